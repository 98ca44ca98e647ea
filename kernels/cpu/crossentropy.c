/*
 * crossentropy.c — softmax cross-entropy over a padded vocabulary, forward
 * (per-row loss and log-sum-exp) and backward (dlogits, written in place).
 *
 * Rows are split across threads. A row of 50304 floats (200 KB) stays in L2,
 * so the forward makes two vectorized passes over it (max, then sum of exp)
 * rather than one online pass whose running rescale would not vectorize. exp
 * is a branch-free polynomial the compiler vectorizes (libm's expf stays
 * scalar without -ffast-math). Padded columns [V, Vp) are never read.
 */
#include <math.h>
#include <string.h>

#include "cpu_kernels.h"
#include "tasks.h"
#include "fastmath.h"

void ts_cpu_crossentropy_forward(float *losses,          /* (N) */
                                 float *lse,             /* (N) */
                                 const float *logits,    /* (N, Vp) */
                                 const int32_t *targets, /* (N) */
                                 int N, int V, int Vp) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(Vp));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            const float *x = logits + (size_t)n * Vp;
            float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int c = 0; c < V; c++)
                mx = x[c] > mx ? x[c] : mx;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int c = 0; c < V; c++)
                s += ts_cpu_exp_neg(x[c] - mx);
            float l = mx + logf(s);
            lse[n] = l;
            losses[n] = targets[n] < 0 ? 0.0f : l - x[targets[n]];
        }
}

/* One row of the gradient, out of place or in place. */
static void ce_row(float *restrict d, const float *restrict x, float l, float dloss, int V) {
    for (int c = 0; c < V; c++)
        d[c] = ts_cpu_exp_neg(x[c] - l) * dloss;
}
static void ce_row_inplace(float *d, float l, float dloss, int V) {
    for (int c = 0; c < V; c++)
        d[c] = ts_cpu_exp_neg(d[c] - l) * dloss;
}

void ts_cpu_crossentropy_backward(float *dlogits,         /* (N, Vp) */
                                  const float *logits,    /* (N, Vp) */
                                  const float *lse,       /* (N) */
                                  const int32_t *targets, /* (N) */
                                  float dloss, int N, int V, int Vp) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(Vp));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            float *d = dlogits + (size_t)n * Vp;
            const float *x = logits + (size_t)n * Vp;
            int tgt = targets[n];
            if (tgt < 0) {
                memset(d, 0, (size_t)Vp * sizeof *d);
                continue;
            }
            if (d == x)
                ce_row_inplace(d, lse[n], dloss, V);
            else
                ce_row(d, x, lse[n], dloss, V);
            d[tgt] -= dloss;
            memset(d + V, 0, (size_t)(Vp - V) * sizeof *d);
        }
}

/* --- vocabulary-parallel pieces (see cpu_kernels.h) ------------------------ */
void ts_cpu_ce_shard_max(float *rowmax,       /* (N) */
                         const float *logits, /* (N, Vp_loc) */
                         int N, int V_loc, int Vp_loc) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(Vp_loc));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            const float *x = logits + (size_t)n * Vp_loc;
            float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
            for (int c = 0; c < V_loc; c++)
                mx = x[c] > mx ? x[c] : mx;
            rowmax[n] = mx;
        }
}

void ts_cpu_ce_shard_sumexp(float *stats,           /* (N, 2) */
                            const float *logits,    /* (N, Vp_loc) */
                            const float *rowmax,    /* (N) global */
                            const int32_t *targets, /* (N) global ids */
                            int v0, int N, int V_loc, int Vp_loc) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(Vp_loc));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            const float *x = logits + (size_t)n * Vp_loc;
            float mx = rowmax[n], s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int c = 0; c < V_loc; c++)
                s += ts_cpu_exp_neg(x[c] - mx);
            int t = targets[n] - v0;
            stats[2 * n] = s;
            stats[2 * n + 1] = targets[n] >= 0 && t >= 0 && t < V_loc ? x[t] : 0.0f;
        }
}

void ts_cpu_ce_shard_backward(float *dlogits,         /* (N, Vp_loc) */
                              const float *logits,    /* (N, Vp_loc) */
                              const float *lse,       /* (N) global */
                              const int32_t *targets, /* (N) global ids */
                              float dloss, int v0, int N, int V_loc, int Vp_loc) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(Vp_loc));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            float *d = dlogits + (size_t)n * Vp_loc;
            const float *x = logits + (size_t)n * Vp_loc;
            if (targets[n] < 0) {
                memset(d, 0, (size_t)Vp_loc * sizeof *d);
                continue;
            }
            if (d == x)
                ce_row_inplace(d, lse[n], dloss, V_loc);
            else
                ce_row(d, x, lse[n], dloss, V_loc);
            int t = targets[n] - v0;
            if (t >= 0 && t < V_loc) d[t] -= dloss;
            memset(d + V_loc, 0, (size_t)(Vp_loc - V_loc) * sizeof *d);
        }
}
