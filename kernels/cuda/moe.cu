/*
 * moe.cu — twins of kernels/cpu/moe.c: the k expert outputs of every token
 * weighted and summed, and its gradient. One thread per (token, column) for
 * the sum and the row gradients (the k terms added in order, as on the CPU);
 * one warp per row for the weights' gradient (a dot product over C, summed
 * by the warp in a fixed tree: deterministic, not the CPU's order).
 */
#include "cuda_common.h"

__global__ static void moe_rows_sum_kernel(float *out, const float *rows, const float *w, int N,
                                           int k, int C) {
    size_t n = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / (size_t)C, c = i % (size_t)C;
        float s = out[i];
        for (int j = 0; j < k; j++) {
            size_t r = t * k + j;
            s += (w ? w[r] : 1.0f) * rows[r * C + c];
        }
        out[i] = s;
    }
}

ts_status ts_cuda_moe_rows_sum(float *out, const float *rows, const float *w, int N, int k, int C) {
    TS_CUDA_REQUIRE(N >= 0 && k > 0 && C > 0, "ts_cuda_moe_rows_sum");
    size_t n = (size_t)N * C;
    if (!n) return TS_OK;
    moe_rows_sum_kernel<<<ts_cuda_blocks(n, 256), 256, 0, ts_cuda_cur_stream()>>>(out, rows, w, N,
                                                                                  k, C);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

__global__ static void moe_drows_kernel(float *drows, const float *dout, const float *w, int N,
                                        int k, int C) {
    size_t n = (size_t)N * k * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / (size_t)C, c = i % (size_t)C;
        drows[i] = w[r] * dout[(r / k) * C + c];
    }
}

__global__ static void moe_dw_kernel(float *dw, const float *dout, const float *rows, int N, int k,
                                     int C) {
    size_t r = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (r >= (size_t)N * k) return;
    const float *x = rows + r * C, *g = dout + (r / k) * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += x[c] * g[c];
    for (int o = 16; o > 0; o /= 2)
        s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) dw[r] = s;
}

ts_status ts_cuda_moe_rows_sum_backward(float *drows, float *dw, const float *dout,
                                        const float *rows, const float *w, int N, int k, int C) {
    TS_CUDA_REQUIRE(N >= 0 && k > 0 && C > 0, "ts_cuda_moe_rows_sum_backward");
    size_t n = (size_t)N * k * C, R = (size_t)N * k;
    if (!n) return TS_OK;
    moe_drows_kernel<<<ts_cuda_blocks(n, 256), 256, 0, ts_cuda_cur_stream()>>>(drows, dout, w, N, k,
                                                                               C);
    TS_CUDA_CHECK_LAUNCH();
    moe_dw_kernel<<<(unsigned)((R + 7) / 8), 256, 0, ts_cuda_cur_stream()>>>(dw, dout, rows, N, k,
                                                                             C);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}
