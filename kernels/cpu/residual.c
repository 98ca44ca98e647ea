/*
 * residual.c — the residual add out = a + b and its backward.
 */
#include "cpu_kernels.h"

void ts_cpu_residual_forward(float *out,     /* (n) */
                             const float *a, /* (n) */
                             const float *b, /* (n) */
                             size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}

void ts_cpu_residual_backward(float *da,         /* (n) or NULL */
                              float *db,         /* (n) or NULL */
                              const float *dout, /* (n) */
                              size_t n) {
    if (da && db) {
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) {
            da[i] += dout[i];
            db[i] += dout[i];
        }
    } else if (da || db) {
        float *d = da ? da : db;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            d[i] += dout[i];
    }
}
