/*
 * gqa_attention.c — grouped-query causal self-attention over a packed qkv
 * row (q heads, then k heads, then v heads), forward and backward, with the
 * log-sum-exp saved in place of the probabilities: no (T, T) array and no
 * repeated K or V anywhere. cpu_kernels.h states the semantics.
 *
 * Forward: every (batch, query head, query row) is an independent task, as
 * in attention_block.c: a row walks its keys 0..t in tiles of GQA_TILE
 * scores on the stack with an online softmax (running max and sum; the
 * output row itself is the accumulator, rescaled when the max grows).
 * Backward: every (batch, kv head) is a task, the only writer of its k and
 * v columns of dqkv and of the q columns of its query heads; it takes its
 * query heads in order and their rows in order, recomputing P = exp(s - lse)
 * a tile of keys at a time, so every gradient is summed in one fixed order
 * whatever the thread count. The products are plain loops (no BLAS): a
 * product's bits then depend on its shape only.
 *
 * Not here: rotary embeddings (rope.c, applied to q and k before), a
 * sliding window, dropout, bf16.
 */
#include <math.h>

#include "cpu_kernels.h"
#include "tasks.h"
#include "fastmath.h" /* ts_cpu_exp_neg: a vectorizable exp */

#define GQA_TILE 64 /* scores of one row held at a time */

static inline float gqa_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < n; d++)
        s += a[d] * b[d];
    return s;
}

size_t ts_cpu_gqa_attention_saved_floats(int B, int NH, int T) {
    return (size_t)B * NH * T;
}

void ts_cpu_gqa_attention_forward(float *out,       /* (B, T, NH hs) */
                                  float *lse,       /* (B, NH, T) */
                                  const float *qkv, /* (B, T, (NH + 2 NKV) hs) */
                                  int B, int T, int NH, int NKV, int hs) {
    int rep = NH / NKV;
    size_t W = (size_t)(NH + 2 * NKV) * hs, OW = (size_t)NH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    /* tasks of 16 rows: the causal rows' growing lengths make a static split
     * uneven, which the threads' taking of each other's tasks evens out */
    ts_cpu_tasks tq;
    ts_cpu_tasks_init(&tq, (size_t)B * NH * T, 16);
#pragma omp parallel num_threads(tq.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&tq, &lo, &hi);)
        for (size_t r = lo; r < hi; r++) {
            int t = (int)(r % T), bh = (int)(r / T), b = bh / NH, h = bh % NH, g = h / rep;
            const float *qt = qkv + ((size_t)b * T + t) * W + (size_t)h * hs;
            const float *kb = qkv + (size_t)b * T * W + (size_t)(NH + g) * hs;
            const float *vb = kb + (size_t)NKV * hs;
            float *o = out + ((size_t)b * T + t) * OW + (size_t)h * hs;
            for (int d = 0; d < hs; d++)
                o[d] = 0.0f;
            int n = t + 1; /* keys 0..t */
            float m = -INFINITY, l = 0.0f, s[GQA_TILE];
            for (int j0 = 0; j0 < n; j0 += GQA_TILE) {
                int nj = n - j0 < GQA_TILE ? n - j0 : GQA_TILE;
                float mx = m;
                for (int jj = 0; jj < nj; jj++) {
                    s[jj] = gqa_dot(qt, kb + (size_t)(j0 + jj) * W, hs) * scale;
                    mx = s[jj] > mx ? s[jj] : mx;
                }
                if (mx > m) { /* rescale what the earlier tiles summed */
                    float corr = expf(m - mx);
                    l *= corr;
                    for (int d = 0; d < hs; d++)
                        o[d] *= corr;
                    m = mx;
                }
#pragma omp simd
                for (int jj = 0; jj < nj; jj++)
                    s[jj] = ts_cpu_exp_neg(s[jj] - m);
                for (int jj = 0; jj < nj; jj++) {
                    const float *vj = vb + (size_t)(j0 + jj) * W;
                    float p = s[jj];
                    l += p;
#pragma omp simd
                    for (int d = 0; d < hs; d++)
                        o[d] += p * vj[d];
                }
            }
            float inv = 1.0f / l;
            for (int d = 0; d < hs; d++)
                o[d] *= inv;
            lse[(size_t)bh * T + t] = m + logf(l);
        }
}

void ts_cpu_gqa_attention_backward(float *dqkv,       /* (B, T, (NH + 2 NKV) hs) */
                                   const float *dout, /* (B, T, NH hs) */
                                   const float *qkv,  /* (B, T, (NH + 2 NKV) hs) */
                                   const float *out,  /* (B, T, NH hs) */
                                   const float *lse,  /* (B, NH, T) */
                                   int B, int T, int NH, int NKV, int hs) {
    int rep = NH / NKV;
    size_t W = (size_t)(NH + 2 * NKV) * hs, OW = (size_t)NH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    ts_cpu_tasks tq;
    ts_cpu_tasks_init(&tq, (size_t)B * NKV, 1);
#pragma omp parallel num_threads(tq.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&tq, &lo, &hi);)
        for (int bg = (int)lo; bg < (int)hi; bg++) {
            int b = bg / NKV, g = bg % NKV;
            size_t kvoff = (size_t)b * T * W + (size_t)(NH + g) * hs, voff = (size_t)NKV * hs;
            const float *kb = qkv + kvoff, *vb = kb + voff;
            float *dkb = dqkv + kvoff, *dvb = dkb + voff;
            /* a tile of keys at a time: its k, v, dk, dv rows stay in cache
             * while every query that sees it goes by */
            for (int j0 = 0; j0 < T; j0 += GQA_TILE)
                for (int h = g * rep; h < (g + 1) * rep; h++)
                    for (int t = j0; t < T; t++) {
                        int nj = t + 1 - j0 < GQA_TILE ? t + 1 - j0 : GQA_TILE;
                        float L = lse[((size_t)b * NH + h) * T + t];
                        size_t qoff = ((size_t)b * T + t) * W + (size_t)h * hs;
                        size_t ooff = ((size_t)b * T + t) * OW + (size_t)h * hs;
                        const float *qt = qkv + qoff, *dy = dout + ooff;
                        float *dqt = dqkv + qoff;
                        float D = gqa_dot(dy, out + ooff, hs); /* = sum_j P_tj dP_tj */
                        float p[GQA_TILE], ds[GQA_TILE];
                        for (int jj = 0; jj < nj; jj++) {
                            size_t row = (size_t)(j0 + jj) * W;
                            p[jj] = gqa_dot(qt, kb + row, hs) * scale - L;
                            ds[jj] = gqa_dot(dy, vb + row, hs) - D;
                        }
#pragma omp simd
                        for (int jj = 0; jj < nj; jj++) {
                            p[jj] = ts_cpu_exp_neg(p[jj]);
                            ds[jj] *= p[jj] * scale;
                        }
                        for (int jj = 0; jj < nj; jj++) {
                            size_t row = (size_t)(j0 + jj) * W;
                            const float *kj = kb + row;
                            float *dkj = dkb + row, *dvj = dvb + row, pj = p[jj], dsj = ds[jj];
#pragma omp simd
                            for (int d = 0; d < hs; d++) {
                                dvj[d] += pj * dy[d];
                                dqt[d] += dsj * kj[d];
                                dkj[d] += dsj * qt[d];
                            }
                        }
                    }
        }
}
