/*
 * reduce.c — the sum of squares (for gradient-norm clipping) and the bf16
 * conversions. The sum of squares gives each thread one contiguous slice,
 * accumulates it in double and adds the per-thread partials in thread order,
 * so the result depends only on the thread count.
 */
#include <omp.h>

#include "cpu_kernels.h"
#include "tasks.h"
#include "tessera/tessera.h"

/* Most threads whose partial sums we keep; larger teams are capped. */
#define REDUCE_MAX_THREADS 256

double ts_cpu_sumsq(const float *x, /* (n) */ size_t n) {
    double partial[REDUCE_MAX_THREADS];
    int want = omp_get_max_threads();
    if (want > REDUCE_MAX_THREADS) want = REDUCE_MAX_THREADS;
    int team = 1;
#pragma omp parallel num_threads(want)
    {
        int nth = omp_get_num_threads();
        int tid = omp_get_thread_num();
        size_t lo = n * (size_t)tid / (size_t)nth;
        size_t hi = n * (size_t)(tid + 1) / (size_t)nth;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++)
            s += (double)x[i] * (double)x[i];
        partial[tid] = s;
        if (tid == 0) team = nth;
    }
    double total = 0.0;
    for (int i = 0; i < team; i++)
        total += partial[i];
    return total;
}

void ts_cpu_round_bf16(float *x, /* (n) */ size_t n) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, n, TS_CPU_GRAIN);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (size_t i = lo; i < hi; i++)
            x[i] = ts_bf16_to_f32(ts_f32_to_bf16(x[i]));
}

void ts_cpu_f32_to_bf16(uint16_t *out, /* (n) */ const float *in, /* (n) */
                        size_t n) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, n, TS_CPU_GRAIN);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (size_t i = lo; i < hi; i++)
            out[i] = ts_f32_to_bf16(in[i]);
}

void ts_cpu_bf16_to_f32(float *out, /* (n) */ const uint16_t *in, /* (n) */
                        size_t n) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, n, TS_CPU_GRAIN);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (size_t i = lo; i < hi; i++)
            out[i] = ts_bf16_to_f32(in[i]);
}
