/*
 * rope.c — rotary position embeddings in Hugging Face's "rotate_half"
 * layout, forward and backward, over heads inside packed rows; and the
 * inverse frequencies, with Llama 3's rope scaling.
 *
 * Rows are independent tasks. A row's cosines and sines are computed in
 * double from its own position, a tile of ROPE_TILE frequencies at a time on
 * the stack, and applied to every head of the row: nothing depends on which
 * thread ran the row, and hs has no upper bound. Not here: which columns of
 * a row are q or k (the caller's pointer and stride say), caching a table
 * across calls.
 */
#include <math.h>

#include "cpu_kernels.h"
#include "tasks.h"

#define ROPE_TILE 64 /* frequencies whose cos/sin are held at a time */

/* The rotation of the nheads heads of each of N rows: by +a (sign 1, out =)
 * or by -a (sign -1, out +=). */
static void rope_apply(float *out, const float *inp, const int32_t *pos, const float *inv_freq,
                       int N, int nheads, int hs, int os, int is, int sign) {
    int half = hs / 2;
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain((size_t)nheads * hs));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            const float *x = inp + (size_t)n * is;
            float *o = out + (size_t)n * os;
            double p = (double)pos[n];
            for (int d0 = 0; d0 < half; d0 += ROPE_TILE) {
                int w = half - d0 < ROPE_TILE ? half - d0 : ROPE_TILE;
                float cs[ROPE_TILE], sn[ROPE_TILE];
                for (int j = 0; j < w; j++) {
                    double a = p * (double)inv_freq[d0 + j];
                    cs[j] = (float)cos(a);
                    sn[j] = (float)(sign * sin(a));
                }
                for (int h = 0; h < nheads; h++) {
                    const float *x0 = x + (size_t)h * hs + d0, *x1 = x0 + half;
                    float *o0 = o + (size_t)h * hs + d0, *o1 = o0 + half;
                    if (sign > 0) {
#pragma omp simd
                        for (int j = 0; j < w; j++) {
                            float a0 = x0[j], a1 = x1[j];
                            o0[j] = a0 * cs[j] - a1 * sn[j];
                            o1[j] = a1 * cs[j] + a0 * sn[j];
                        }
                    } else {
#pragma omp simd
                        for (int j = 0; j < w; j++) {
                            float a0 = x0[j], a1 = x1[j];
                            o0[j] += a0 * cs[j] - a1 * sn[j];
                            o1[j] += a1 * cs[j] + a0 * sn[j];
                        }
                    }
                }
            }
        }
}

void ts_cpu_rope_forward(float *out,            /* (N, os), nheads * hs used */
                         const float *inp,      /* (N, is), nheads * hs used */
                         const int32_t *pos,    /* (N) */
                         const float *inv_freq, /* (hs/2) */
                         int N, int nheads, int hs, int os, int is) {
    rope_apply(out, inp, pos, inv_freq, N, nheads, hs, os, is, 1);
}

void ts_cpu_rope_backward(float *dinp,           /* (N, ds), nheads * hs used */
                          const float *dout,     /* (N, dos), nheads * hs used */
                          const int32_t *pos,    /* (N) */
                          const float *inv_freq, /* (hs/2) */
                          int N, int nheads, int hs, int ds, int dos) {
    rope_apply(dinp, dout, pos, inv_freq, N, nheads, hs, ds, dos, -1);
}

void ts_cpu_rope_inv_freq(float *inv_freq, /* (hs/2) */
                          int hs, double theta, const ts_rope_scaling *s) {
    const double two_pi = 6.283185307179586476925;
    for (int d = 0; d < hs / 2; d++) {
        double f = pow(theta, -2.0 * d / hs);
        if (s) {
            double O = s->original_max_position_embeddings;
            double wavelen = two_pi / f;
            if (wavelen > O / s->low_freq_factor)
                f /= s->factor;
            else if (wavelen >= O / s->high_freq_factor) {
                double m =
                    (O / wavelen - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
                f = (1.0 - m) * f / s->factor + m * f;
            }
        }
        inv_freq[d] = (float)f;
    }
}
