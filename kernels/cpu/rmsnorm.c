/*
 * rmsnorm.c — RMSNorm over the last axis (no mean, no bias), forward and
 * backward: the normalisation of a Llama-class block.
 *
 * As layernorm.c: rows are independent, so both passes over rows split rows
 * across threads; the weight gradient sums over rows, so each task owns a
 * block of channels and walks the rows in order, which is race-free and
 * gives the same bits for any thread count.
 */
#include <math.h>

#include "cpu_kernels.h"
#include "norm.h" /* the weight gradient of a block of channels */
#include "tasks.h"

void ts_cpu_rmsnorm_forward(float *out,          /* (N, C) */
                            float *rstd,         /* (N) */
                            const float *inp,    /* (N, C) */
                            const float *weight, /* (C) */
                            float eps, int N, int C) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(C));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            const float *x = inp + (size_t)n * C;
            float *o = out + (size_t)n * C;
            float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
            for (int c = 0; c < C; c++)
                ss += x[c] * x[c];
            float r = 1.0f / sqrtf(ss / (float)C + eps);
            for (int c = 0; c < C; c++)
                o[c] = x[c] * r * weight[c];
            rstd[n] = r;
        }
}

void ts_cpu_rmsnorm_backward(float *dinp,         /* (N, C) */
                             float *dweight,      /* (C) */
                             const float *dout,   /* (N, C) */
                             const float *inp,    /* (N, C) */
                             const float *weight, /* (C) */
                             const float *rstd,   /* (N) */
                             int N, int C) {
    int nblocks = (C + TS_CPU_NORM_COL_BLOCK - 1) / TS_CPU_NORM_COL_BLOCK;
    ts_cpu_tasks cols, rows;
    ts_cpu_tasks_init(&cols, (size_t)nblocks, 1);
    ts_cpu_tasks_init(&rows, (size_t)N, ts_cpu_rows_grain(C));
#pragma omp parallel num_threads(cols.shares > rows.shares ? cols.shares : rows.shares)
    {
        /* dweight: a block of channels per task, rows in order. */
        for (size_t lo, hi; ts_cpu_tasks_next(&cols, &lo, &hi);)
            for (int blk = (int)lo; blk < (int)hi; blk++) {
                int c0 = blk * TS_CPU_NORM_COL_BLOCK;
                int w = C - c0 < TS_CPU_NORM_COL_BLOCK ? C - c0 : TS_CPU_NORM_COL_BLOCK;
                ts_cpu_norm_weight_block(dweight, NULL, dout, inp, NULL, rstd, N, C, c0, w);
            }
        /* dinp: rows, independently. With xn = x r and dn = weight dout,
         * dx = (dn - xn mean_c(dn xn)) r. */
        for (size_t lo, hi; ts_cpu_tasks_next(&rows, &lo, &hi);)
            for (int n = (int)lo; n < (int)hi; n++) {
                const float *x = inp + (size_t)n * C;
                const float *d = dout + (size_t)n * C;
                float *dx = dinp + (size_t)n * C;
                float r = rstd[n];
                float sum_dn_xn = 0.0f;
#pragma omp simd reduction(+ : sum_dn_xn)
                for (int c = 0; c < C; c++)
                    sum_dn_xn += weight[c] * d[c] * (x[c] * r);
                float b = sum_dn_xn / (float)C;
                for (int c = 0; c < C; c++)
                    dx[c] += (weight[c] * d[c] - x[c] * r * b) * r;
            }
    }
}
