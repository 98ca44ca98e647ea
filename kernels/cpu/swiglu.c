/*
 * swiglu.c — the SwiGLU gate of a Llama-class MLP, silu(gate) * up, over a
 * packed (N, 2F) input (gate columns first), forward and backward; rows are
 * independent tasks.
 *
 * The sigmoid takes e = exp(-|x|) from the polynomial exp of fastmath.h,
 * which the compiler vectorizes and which is 0 below -87 (never overflows):
 * silu and its derivative are finite for every finite x, +-0 for
 * x < -87 (the true values are below 1e-35 there), exactly x and 1 for
 * x above about 17 (where the sigmoid rounds to 1 in float).
 */
#include <string.h>

#include "cpu_kernels.h"
#include "tasks.h"
#include "fastmath.h" /* ts_cpu_exp_neg: a vectorizable exp */

/* sigmoid(x) = 1 / (1 + exp(-x)) into *s and 1 - sigmoid(x) = sigmoid(-x)
 * into *sc, for any x, from e = exp(-|x|) (0 below -87, so never
 * overflowing): 1 / (1 + e) and e / (1 + e), one for each, by the sign of
 * x, so neither is computed by a cancelling subtraction. The sign selects
 * on the bits (a mask, not a branch), so that the loops vectorize. */
static inline void swiglu_sigmoid(float x, float *s, float *sc) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint32_t neg = (uint32_t)((int32_t)b >> 31), nb = b | 0x80000000u; /* -|x| */
    float nx;
    memcpy(&nx, &nb, sizeof nx);
    float e = ts_cpu_exp_neg(nx), r = 1.0f / (1.0f + e), er = e * r;
    uint32_t rb, erb;
    memcpy(&rb, &r, sizeof rb), memcpy(&erb, &er, sizeof erb);
    uint32_t sb = (rb & ~neg) | (erb & neg), scb = (erb & ~neg) | (rb & neg);
    memcpy(s, &sb, sizeof sb), memcpy(sc, &scb, sizeof scb);
}

void ts_cpu_swiglu_forward(float *out,       /* (N, F) */
                           const float *inp, /* (N, 2F): gate | up */
                           int N, int F) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(3 * (size_t)F));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            const float *g = inp + (size_t)n * 2 * F, *u = g + F;
            float *o = out + (size_t)n * F;
#pragma omp simd
            for (int i = 0; i < F; i++) {
                float sg, sc;
                swiglu_sigmoid(g[i], &sg, &sc);
                o[i] = g[i] * sg * u[i];
            }
        }
}

void ts_cpu_swiglu_backward(float *dinp,       /* (N, 2F): dgate | dup */
                            const float *inp,  /* (N, 2F): gate | up */
                            const float *dout, /* (N, F) */
                            int N, int F) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(5 * (size_t)F));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            const float *g = inp + (size_t)n * 2 * F, *u = g + F, *d = dout + (size_t)n * F;
            float *dg = dinp + (size_t)n * 2 * F, *du = dg + F;
#pragma omp simd
            for (int i = 0; i < F; i++) {
                float x = g[i], s, sc;
                swiglu_sigmoid(x, &s, &sc);
                /* d silu / dx = s + x s (1 - s) */
                dg[i] += d[i] * u[i] * (s * (1.0f + x * sc));
                du[i] += d[i] * x * s;
            }
        }
}
