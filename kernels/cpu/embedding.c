/*
 * embedding.c — token plus learned position embedding, forward and backward.
 *
 * The backward scatters rows of dout into dwte by token id. Two rows may share
 * a token, so instead of splitting rows across threads we split the channels:
 * each task owns a block of columns of dwte and walks every row in order. That
 * is race-free and bitwise the same for any thread count. Token ids are
 * trusted to lie in [0, V); this file does not check them.
 */
#include <limits.h>

#include "cpu_kernels.h"
#include "tasks.h"

/* Channels per task in the backward scatter. */
#define EMB_COL_BLOCK 64

void ts_cpu_embedding_forward(float *out,            /* (B, T, C) */
                              const int32_t *tokens, /* (B, T) */
                              const float *wte,      /* (V, C) */
                              const float *wpe,      /* (maxT, C) */
                              int B, int T, int C, int pos0) {
    int N = B * T;
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(C));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            int t = n % T;
            float *o = out + (size_t)n * C;
            const float *e = wte + (size_t)tokens[n] * C;
            const float *p = wpe + (size_t)(pos0 + t) * C;
            for (int c = 0; c < C; c++)
                o[c] = e[c] + p[c];
        }
}

void ts_cpu_embedding_backward(float *dwte,           /* (V, C) */
                               float *dwpe,           /* (maxT, C) */
                               const float *dout,     /* (B, T, C) */
                               const int32_t *tokens, /* (B, T) */
                               int B, int T, int C, int pos0) {
    /* the whole vocabulary as one shard (every id in [0, V) is in it), then
     * the positions: the same sums in the same order as one fused pass */
    ts_cpu_embedding_shard_backward(dwte, dout, tokens, 0, INT_MAX, B * T, C);
    ts_cpu_position_backward(dwpe, dout, B, T, C, pos0);
}

/* --- vocabulary-parallel pieces -------------------------------------------- */
void ts_cpu_embedding_shard_forward(float *out,            /* (N, C) */
                                    const int32_t *tokens, /* (N) global ids */
                                    const float *wte,      /* (V_loc, C) rows v0.. */
                                    int v0, int V_loc, int N, int C) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(C));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            float *o = out + (size_t)n * C;
            int r = tokens[n] - v0;
            if (r < 0 || r >= V_loc) {
                for (int c = 0; c < C; c++)
                    o[c] = 0.0f;
                continue;
            }
            const float *e = wte + (size_t)r * C;
            for (int c = 0; c < C; c++)
                o[c] = e[c];
        }
}

void ts_cpu_embedding_shard_backward(float *dwte,           /* (V_loc, C) */
                                     const float *dout,     /* (N, C) */
                                     const int32_t *tokens, /* (N) global ids */
                                     int v0, int V_loc, int N, int C) {
    int nblocks = (C + EMB_COL_BLOCK - 1) / EMB_COL_BLOCK;
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)nblocks, 1);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int blk = (int)lo; blk < (int)hi; blk++) {
            int c0 = blk * EMB_COL_BLOCK;
            int w = C - c0 < EMB_COL_BLOCK ? C - c0 : EMB_COL_BLOCK;
            for (int n = 0; n < N; n++) {
                int r = tokens[n] - v0;
                if (r < 0 || r >= V_loc) continue;
                float *de = dwte + (size_t)r * C + c0;
                const float *d = dout + (size_t)n * C + c0;
                for (int j = 0; j < w; j++)
                    de[j] += d[j];
            }
        }
}

void ts_cpu_position_forward(float *out,       /* (B, T, C) */
                             const float *wpe, /* (maxT, C) */
                             int B, int T, int C, int pos0) {
    int N = B * T;
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(C));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            float *o = out + (size_t)n * C;
            const float *p = wpe + (size_t)(pos0 + n % T) * C;
            for (int c = 0; c < C; c++)
                o[c] += p[c];
        }
}

void ts_cpu_position_backward(float *dwpe,       /* (maxT, C) */
                              const float *dout, /* (B, T, C) */
                              int B, int T, int C, int pos0) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)T, 1);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int t = (int)lo; t < (int)hi; t++) {
            float *dp = dwpe + (size_t)(pos0 + t) * C;
            for (int b = 0; b < B; b++) {
                const float *d = dout + ((size_t)b * T + t) * C;
                for (int c = 0; c < C; c++)
                    dp[c] += d[c];
            }
        }
}
