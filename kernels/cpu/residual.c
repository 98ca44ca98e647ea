/*
 * residual.c — the residual add out = a + b and its backward.
 */
#include "cpu_kernels.h"
#include "tasks.h"

void ts_cpu_residual_forward(float *out,     /* (n) */
                             const float *a, /* (n) */
                             const float *b, /* (n) */
                             size_t n) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, n, TS_CPU_GRAIN);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (size_t i = lo; i < hi; i++)
            out[i] = a[i] + b[i];
}

void ts_cpu_residual_backward(float *da,         /* (n) or NULL */
                              float *db,         /* (n) or NULL */
                              const float *dout, /* (n) */
                              size_t n) {
    if (da && db) {
        ts_cpu_tasks q;
        ts_cpu_tasks_init(&q, n, TS_CPU_GRAIN);
#pragma omp parallel num_threads(q.shares)
        for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
            for (size_t i = lo; i < hi; i++) {
                da[i] += dout[i];
                db[i] += dout[i];
            }
    } else if (da || db) {
        float *d = da ? da : db;
        ts_cpu_tasks q;
        ts_cpu_tasks_init(&q, n, TS_CPU_GRAIN);
#pragma omp parallel num_threads(q.shares)
        for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
            for (size_t i = lo; i < hi; i++)
                d[i] += dout[i];
    }
}
