/*
 * embedding.c — token plus learned position embedding, forward and backward.
 *
 * The backward scatters rows of dout into dwte by token id. Two rows may share
 * a token, so instead of splitting rows across threads we split the channels:
 * each task owns a block of columns of dwte and walks every row in order. That
 * is race-free and bitwise the same for any thread count. Token ids are
 * trusted to lie in [0, V); this file does not check them.
 */
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
    int N = B * T;
    int nblocks = (C + EMB_COL_BLOCK - 1) / EMB_COL_BLOCK;
    ts_cpu_tasks pos, cols;
    ts_cpu_tasks_init(&pos, (size_t)T, ts_cpu_rows_grain((size_t)B * C));
    ts_cpu_tasks_init(&cols, (size_t)nblocks, 1);
#pragma omp parallel num_threads(pos.shares > cols.shares ? pos.shares : cols.shares)
    {
        /* dwpe: each position is owned by one task, summed over b in order. */
        for (size_t lo, hi; ts_cpu_tasks_next(&pos, &lo, &hi);)
            for (int t = (int)lo; t < (int)hi; t++) {
                float *dp = dwpe + (size_t)(pos0 + t) * C;
                for (int b = 0; b < B; b++) {
                    const float *d = dout + ((size_t)b * T + t) * C;
                    for (int c = 0; c < C; c++)
                        dp[c] += d[c];
                }
            }
        /* dwte: each block of channels is owned by one task. */
        for (size_t lo, hi; ts_cpu_tasks_next(&cols, &lo, &hi);)
            for (int blk = (int)lo; blk < (int)hi; blk++) {
                int c0 = blk * EMB_COL_BLOCK;
                int w = C - c0 < EMB_COL_BLOCK ? C - c0 : EMB_COL_BLOCK;
                for (int n = 0; n < N; n++) {
                    float *de = dwte + (size_t)tokens[n] * C + c0;
                    const float *d = dout + (size_t)n * C + c0;
                    for (int j = 0; j < w; j++)
                        de[j] += d[j];
                }
            }
    }
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
