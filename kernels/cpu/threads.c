/*
 * threads.c — one knob for the CPU kernels' parallelism: the OpenMP team
 * size, which the OpenMP build of OpenBLAS shares; and the tasks the kernels'
 * loops are cut into (tasks.h says how they are shared out, and why).
 */
#include <cblas.h>
#include <omp.h>

#include "cpu_kernels.h"
#include "tasks.h"

/* OpenBLAS's own setter and the name of the core whose kernels it runs;
 * declared here because not every cblas.h has them. */
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);

void ts_cpu_set_threads(int n) {
    if (n <= 0) return;
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int ts_cpu_get_threads(void) {
    return omp_get_max_threads();
}

const char *ts_cpu_blas_core(void) {
    return openblas_get_corename();
}

void ts_cpu_tasks_init(ts_cpu_tasks *q, size_t n, size_t grain) {
    if (grain == 0) grain = 1;
    if (n / grain >= UINT32_MAX) grain = n / (UINT32_MAX - 1) + 1; /* task ids fit 32 bits */
    size_t tasks = (n + grain - 1) / grain;
    int shares = omp_in_parallel() ? 1 : omp_get_max_threads();
    if (shares > TS_CPU_MAX_SHARES) shares = TS_CPU_MAX_SHARES;
    if ((size_t)shares > tasks) shares = tasks > 0 ? (int)tasks : 1;
    q->shares = shares;
    q->n = n;
    q->grain = grain;
    for (int s = 0; s < shares; s++) {
        uint64_t lo = tasks * (uint64_t)s / (uint64_t)shares;
        uint64_t hi = tasks * (uint64_t)(s + 1) / (uint64_t)shares;
        atomic_init(&q->share[s].range, (hi << 32) | lo);
    }
}

/* Claims one task of share s, from its front or its back; -1 when empty. */
static int64_t share_claim(ts_cpu_share *s, int from_back) {
    uint64_t r = atomic_load_explicit(&s->range, memory_order_relaxed);
    for (;;) {
        uint32_t lo = (uint32_t)r, hi = (uint32_t)(r >> 32);
        if (lo >= hi) return -1;
        uint64_t next =
            from_back ? ((uint64_t)(hi - 1) << 32) | lo : ((uint64_t)hi << 32) | (uint64_t)(lo + 1);
        if (atomic_compare_exchange_weak_explicit(&s->range, &r, next, memory_order_relaxed,
                                                  memory_order_relaxed))
            return from_back ? (int64_t)(hi - 1) : (int64_t)lo;
    }
}

int ts_cpu_tasks_next(ts_cpu_tasks *q, size_t *lo, size_t *hi) {
    int me = omp_get_thread_num() % q->shares;
    int64_t t = share_claim(&q->share[me], 0);
    /* own share done: the others', nearest first, each from its far end */
    for (int k = 1; t < 0 && k < q->shares; k++)
        t = share_claim(&q->share[(me + k) % q->shares], 1);
    if (t < 0) return 0;
    *lo = (size_t)t * q->grain;
    *hi = *lo + q->grain < q->n ? *lo + q->grain : q->n;
    return 1;
}
