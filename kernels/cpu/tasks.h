/*
 * tasks.h — how the CPU kernels share their loops among the thread team.
 *
 * A loop over [0, n) is cut into tasks of `grain` items. Thread t starts on
 * the t-th contiguous share of the tasks, front to back, as a static schedule
 * would: a thread works on the same rows from kernel to kernel and finds the
 * ones it wrote in its own cache. A thread that has finished its share takes
 * the remaining tasks of another share from that share's far end. On a
 * shared machine one core is often slower than the other for a while (or not
 * running at all): the other thread then does more of the work instead of
 * waiting for it at the end of every kernel, which with a plain static
 * schedule made one rank with two threads slower than two ranks with one.
 *
 * Every task runs exactly once and a kernel's tasks write disjoint outputs,
 * so results do not depend on which thread ran which task: bit for bit the
 * same as the static schedule, for any thread count. (Reductions whose
 * partial sums are per thread — ts_cpu_sumsq — keep their static split.)
 *
 *     ts_cpu_tasks q;
 *     ts_cpu_tasks_init(&q, n, TS_CPU_GRAIN);
 * #pragma omp parallel num_threads(q.shares)
 *     for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
 *         for (size_t i = lo; i < hi; i++)
 *             out[i] = a[i] + b[i];
 */
#ifndef TESSERA_KERNELS_CPU_TASKS_H
#define TESSERA_KERNELS_CPU_TASKS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Items per task of an element-wise loop: 64 KiB of floats per stream,
 * large against the cost of a claim (one compare-and-swap), small enough
 * that a kernel of a mid-size model has dozens of tasks. */
#define TS_CPU_GRAIN 16384

/* Shares kept; a larger team takes only the first TS_CPU_MAX_SHARES'. */
#define TS_CPU_MAX_SHARES 64

/* One share's remaining tasks [lo, hi): hi in the upper half of one word,
 * so its owner (from the front) and a thief (from the back) each claim with
 * one compare-and-swap; on its own cache line. */
typedef struct {
    _Atomic uint64_t range;
    char pad[64 - sizeof(uint64_t)];
} ts_cpu_share;

typedef struct {
    ts_cpu_share share[TS_CPU_MAX_SHARES];
    int shares;   /* threads to start: the `num_threads` of the region */
    size_t n;     /* items */
    size_t grain; /* items per task */
} ts_cpu_tasks;

/* Cuts [0, n) into tasks of `grain` items (more, should n / grain pass 2^32)
 * and shares them out over the team (one share inside a parallel region). */
void ts_cpu_tasks_init(ts_cpu_tasks *q, size_t n, size_t grain);

/* The calling thread's next task as items [lo, hi); 0 when none is left. */
int ts_cpu_tasks_next(ts_cpu_tasks *q, size_t *lo, size_t *hi);

/* Grain, in rows of `width` floats, that gives a task about TS_CPU_GRAIN
 * floats (at least one row). */
static inline size_t ts_cpu_rows_grain(size_t width) {
    return width >= TS_CPU_GRAIN ? 1 : TS_CPU_GRAIN / (width ? width : 1);
}

#endif
