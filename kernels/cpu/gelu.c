/*
 * gelu.c — GELU, tanh approximation (Hendrycks & Gimpel 2016), forward and
 * backward, elementwise and parallel.
 *
 * tanh is computed as 1 - 2 / (exp(2u) + 1) with a polynomial exp that the
 * compiler vectorizes (libm's tanhf stays scalar without -ffast-math). Its
 * absolute error is below 1e-6 over the whole float range.
 */
#include <string.h>

#include "cpu_kernels.h"
#include "tasks.h"
#include "fastmath.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f
/* tanh(u) rounds to +-1 in float for |u| >= 9.1; clamping keeps exp finite. */
#define GELU_U_MAX 10.0f

/* tanh(u) for any u. |u| is clamped to GELU_U_MAX on its integer bits: a
 * float compare with a constant bound lets GCC fold the clamped path into a
 * constant under -ftrapping-math, which leaves a branch in the loop and stops
 * vectorization. */
static inline float gelu_tanh(float u) {
    const uint32_t max_bits = 0x41200000u; /* GELU_U_MAX as f32 bits */
    uint32_t b;
    memcpy(&b, &u, sizeof b);
    uint32_t mag = b & 0x7fffffffu;
    b = (b & 0x80000000u) | (mag > max_bits ? max_bits : mag);
    memcpy(&u, &b, sizeof u);
    return 1.0f - 2.0f / (ts_cpu_exp_poly(2.0f * u) + 1.0f);
}

void ts_cpu_gelu_forward(float *out, /* (n) */ const float *inp, /* (n) */
                         size_t n) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, n, TS_CPU_GRAIN);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (size_t i = lo; i < hi; i++) {
            float x = inp[i];
            float th = gelu_tanh(GELU_K * (x + GELU_A * x * x * x));
            out[i] = 0.5f * x * (1.0f + th);
        }
}

void ts_cpu_gelu_backward(float *dinp,       /* (n) */
                          const float *inp,  /* (n) */
                          const float *dout, /* (n) */
                          size_t n) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, n, TS_CPU_GRAIN);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (size_t i = lo; i < hi; i++) {
            float x = inp[i];
            float th = gelu_tanh(GELU_K * (x + GELU_A * x * x * x));
            float dudx = GELU_K * (1.0f + 3.0f * GELU_A * x * x);
            float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * dudx;
            dinp[i] += grad * dout[i];
        }
}
