/*
 * layernorm.c — LayerNorm over the last axis, forward and backward.
 *
 * Rows are independent, so both passes over rows split rows across threads.
 * The weight and bias gradients sum over rows; for those each task owns a
 * block of channels and walks the rows in order, which is race-free and gives
 * the same bits for any thread count.
 */
#include <math.h>

#include "cpu_kernels.h"
#include "norm.h" /* the weight gradient of a block of channels */
#include "tasks.h"

void ts_cpu_layernorm_forward(float *out,          /* (N, C) */
                              float *mean,         /* (N) */
                              float *rstd,         /* (N) */
                              const float *inp,    /* (N, C) */
                              const float *weight, /* (C) */
                              const float *bias,   /* (C) */
                              int N, int C) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(C));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            const float *x = inp + (size_t)n * C;
            float *o = out + (size_t)n * C;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int c = 0; c < C; c++)
                s += x[c];
            float m = s / (float)C;
            float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
            for (int c = 0; c < C; c++)
                ss += (x[c] - m) * (x[c] - m);
            float r = 1.0f / sqrtf(ss / (float)C + TS_LAYERNORM_EPS);
            for (int c = 0; c < C; c++)
                o[c] = (x[c] - m) * r * weight[c] + bias[c];
            mean[n] = m;
            rstd[n] = r;
        }
}

void ts_cpu_layernorm_backward(float *dinp,         /* (N, C) */
                               float *dweight,      /* (C) */
                               float *dbias,        /* (C) */
                               const float *dout,   /* (N, C) */
                               const float *inp,    /* (N, C) */
                               const float *weight, /* (C) */
                               const float *mean,   /* (N) */
                               const float *rstd,   /* (N) */
                               int N, int C) {
    int nblocks = (C + TS_CPU_NORM_COL_BLOCK - 1) / TS_CPU_NORM_COL_BLOCK;
    ts_cpu_tasks cols, rows;
    ts_cpu_tasks_init(&cols, (size_t)nblocks, 1);
    ts_cpu_tasks_init(&rows, (size_t)N, ts_cpu_rows_grain(C));
#pragma omp parallel num_threads(cols.shares > rows.shares ? cols.shares : rows.shares)
    {
        /* dweight, dbias: a block of channels per task, rows in order. */
        for (size_t lo, hi; ts_cpu_tasks_next(&cols, &lo, &hi);)
            for (int blk = (int)lo; blk < (int)hi; blk++) {
                int c0 = blk * TS_CPU_NORM_COL_BLOCK;
                int w = C - c0 < TS_CPU_NORM_COL_BLOCK ? C - c0 : TS_CPU_NORM_COL_BLOCK;
                ts_cpu_norm_weight_block(dweight, dbias, dout, inp, mean, rstd, N, C, c0, w);
            }
        /* dinp: rows, independently. */
        for (size_t lo, hi; ts_cpu_tasks_next(&rows, &lo, &hi);)
            for (int n = (int)lo; n < (int)hi; n++) {
                const float *x = inp + (size_t)n * C;
                const float *d = dout + (size_t)n * C;
                float *dx = dinp + (size_t)n * C;
                float m = mean[n], r = rstd[n];
                float sum_dn = 0.0f, sum_dn_xn = 0.0f;
#pragma omp simd reduction(+ : sum_dn, sum_dn_xn)
                for (int c = 0; c < C; c++) {
                    float dn = weight[c] * d[c];
                    sum_dn += dn;
                    sum_dn_xn += dn * (x[c] - m) * r;
                }
                float a = sum_dn / (float)C, b = sum_dn_xn / (float)C;
                for (int c = 0; c < C; c++) {
                    float xn = (x[c] - m) * r;
                    dx[c] += (weight[c] * d[c] - a - xn * b) * r;
                }
            }
    }
}
