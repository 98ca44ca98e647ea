/*
 * reduce.c — the sum of squares (for gradient-norm clipping) and the bf16
 * conversions. The sum of squares cuts the array into at most SUMSQ_CHUNKS
 * chunks of equal size whatever the thread count, accumulates each in double
 * as a task and adds the chunks' sums in chunk order: the same bits on any
 * number of threads. Zeroing and copying large buffers share the work too.
 */
#include <string.h>

#include "cpu_kernels.h"
#include "tasks.h"
#include "tessera/tessera.h"

/* Chunks of the sum of squares: at least SUMSQ_GRAIN floats each, and at
 * most SUMSQ_CHUNKS of them (their partial sums live on the stack). */
#define SUMSQ_GRAIN 65536
#define SUMSQ_CHUNKS 4096

double ts_cpu_sumsq(const float *x, /* (n) */ size_t n) {
    double partial[SUMSQ_CHUNKS];
    size_t grain = n / SUMSQ_CHUNKS + 1;
    if (grain < SUMSQ_GRAIN) grain = SUMSQ_GRAIN;
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, n, grain);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);) {
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++)
            s += (double)x[i] * (double)x[i];
        partial[lo / grain] = s;
    }
    double total = 0.0;
    for (size_t c = 0; c * grain < n; c++)
        total += partial[c];
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

/* Below this many bytes a zeroing or copy runs on the calling thread; above
 * it, in tasks of this many bytes. */
#define MEM_TASK_BYTES (256u << 10)

/* dst = src, or 0 when src is NULL. */
static void mem_fill(void *dst, const void *src, size_t bytes) {
    if (bytes < 2 * MEM_TASK_BYTES) {
        if (bytes && src)
            memcpy(dst, src, bytes);
        else if (bytes)
            memset(dst, 0, bytes);
        return;
    }
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, bytes, MEM_TASK_BYTES);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);) {
        if (src)
            memcpy((char *)dst + lo, (const char *)src + lo, hi - lo);
        else
            memset((char *)dst + lo, 0, hi - lo);
    }
}

void ts_cpu_zero(void *p, size_t bytes) {
    mem_fill(p, NULL, bytes);
}

void ts_cpu_copy(void *dst, const void *src, size_t bytes) {
    mem_fill(dst, src, bytes);
}
