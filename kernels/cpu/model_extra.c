/*
 * model_extra.c — the small kernels the GPT-2 modules need besides the big
 * ones: a bias added to rows, the bias gradient, and the last step of the
 * vocabulary-parallel cross-entropy (lse and the per-token losses).
 *
 * They moved here unchanged from the model code (core/model/), so that the CUDA twins
 * (kernels/cuda/model_extra.cu) have a reference to be tested against.
 */
#include <math.h>

#include "cpu_kernels.h"
#include "tasks.h"

void ts_cpu_add_bias(float *out, const float *bias, int N, int C) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(C));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
            float *o = out + (size_t)n * C;
            for (int c = 0; c < C; c++)
                o[c] += bias[c];
        }
}

void ts_cpu_bias_grad_block(float *dbias, const float *dout, int N, int C, int c0, int w) {
    /* TS_CPU_BIAS_BLOCK accumulators at a time: a wider range is summed as
     * several blocks (each column's sum is the same either way). */
    for (int b0 = c0; b0 < c0 + w; b0 += TS_CPU_BIAS_BLOCK) {
        int bw = c0 + w - b0 < TS_CPU_BIAS_BLOCK ? c0 + w - b0 : TS_CPU_BIAS_BLOCK;
        float acc[TS_CPU_BIAS_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const float *row = dout + (size_t)n * C + b0;
            for (int j = 0; j < bw; j++)
                acc[j] += row[j];
        }
        for (int j = 0; j < bw; j++)
            dbias[b0 + j] += acc[j];
    }
}

/* Blocks of TS_CPU_BIAS_BLOCK columns per task, each column's rows summed in
 * order into the block's accumulators: the same bits for any thread count. */
void ts_cpu_bias_grad(float *dbias, const float *dout, int N, int C) {
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)C, TS_CPU_BIAS_BLOCK);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        ts_cpu_bias_grad_block(dbias, dout, N, C, (int)lo, (int)(hi - lo));
}

void ts_cpu_ce_shard_loss(float *losses, float *lse, const float *rowmax, const float *stats,
                          const int32_t *targets, int N) {
    for (int i = 0; i < N; i++) {
        lse[i] = rowmax[i] + logf(stats[2 * i]);
        losses[i] = targets[i] < 0 ? 0.0f : lse[i] - stats[2 * i + 1];
    }
}
