/*
 * moe.c — the mixture-of-experts layer's own element-wise kernels: the k
 * expert outputs of every token weighted by its routing weights and summed,
 * and the gradient of that sum (kernels/cuda/moe.cu is the twin).
 *
 * Row r of `rows` is token r / k's output of its (r % k)-th chosen expert;
 * sums run over j = 0 .. k-1 in order, so results do not depend on threads.
 */
#include "cpu_kernels.h"

void ts_cpu_moe_rows_sum(float *out, const float *rows, const float *w, int N, int k, int C) {
    for (int t = 0; t < N; t++) {
        float *o = out + (size_t)t * C;
        for (int j = 0; j < k; j++) {
            size_t r = (size_t)t * k + j;
            float wr = w ? w[r] : 1.0f;
            const float *x = rows + r * C;
            for (int c = 0; c < C; c++)
                o[c] += wr * x[c];
        }
    }
}

void ts_cpu_moe_rows_sum_backward(float *drows, float *dw, const float *dout, const float *rows,
                                  const float *w, int N, int k, int C) {
    for (int t = 0; t < N; t++) {
        const float *g = dout + (size_t)t * C;
        for (int j = 0; j < k; j++) {
            size_t r = (size_t)t * k + j;
            const float *x = rows + r * C;
            float *d = drows + r * C, dot = 0.0f;
            for (int c = 0; c < C; c++) {
                d[c] = w[r] * g[c];
                dot += x[c] * g[c];
            }
            dw[r] = dot;
        }
    }
}
