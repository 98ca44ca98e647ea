/*
 * layernorm.cu — LayerNorm over the last axis, forward and backward.
 *
 * Forward and the input gradient: one warp per row, the CPU's formulas (mean,
 * then the sum of (x - mean)^2). The weight and bias gradients sum over rows
 * without atomics: a block owns LN_COLS channels, its LN_ROWS row-lanes each
 * walk a fixed strided set of rows, and a fixed tree adds the lanes — so the
 * bits do not depend on timing.
 */
#include "cpu_kernels.h" /* TS_LAYERNORM_EPS */
#include "cuda_common.h"

#define LN_WARPS 8 /* rows per block in the row kernels */
#define LN_COLS 8  /* channels per block in the column sums */
#define LN_ROWS 64 /* row-lanes per block in the column sums */

__global__ static void layernorm_forward_kernel(float *out, float *mean, float *rstd,
                                                const float *inp, const float *weight,
                                                const float *bias, int N, int C) {
    int row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float *o = out + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32)
        s += x[c];
    float m = ts_warp_sum(s) / (float)C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        ss += d * d;
    }
    float r = 1.0f / sqrtf(ts_warp_sum(ss) / (float)C + TS_LAYERNORM_EPS);
    for (int c = lane; c < C; c += 32)
        o[c] = (x[c] - m) * r * weight[c] + bias[c];
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

__global__ static void layernorm_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                             const float *weight, const float *mean,
                                             const float *rstd, int N, int C) {
    int row = blockIdx.x * LN_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    const float *d = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float m = mean[row], r = rstd[row];
    float sum_dn = 0.0f, sum_dn_xn = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float dn = weight[c] * d[c];
        sum_dn += dn;
        sum_dn_xn += dn * (x[c] - m) * r;
    }
    float a = ts_warp_sum(sum_dn) / (float)C, b = ts_warp_sum(sum_dn_xn) / (float)C;
    for (int c = lane; c < C; c += 32) {
        float xn = (x[c] - m) * r;
        dx[c] += (weight[c] * d[c] - a - xn * b) * r;
    }
}

/* blockDim (LN_COLS, LN_ROWS); block b owns channels [b*LN_COLS, +LN_COLS). */
__global__ static void layernorm_dparams_kernel(float *dweight, float *dbias, const float *dout,
                                                const float *inp, const float *mean,
                                                const float *rstd, int N, int C) {
    __shared__ float shw[LN_ROWS][LN_COLS], shb[LN_ROWS][LN_COLS];
    int c = blockIdx.x * LN_COLS + threadIdx.x;
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        for (int n = threadIdx.y; n < N; n += LN_ROWS) {
            size_t i = (size_t)n * C + c;
            float d = dout[i];
            aw += (inp[i] - mean[n]) * rstd[n] * d;
            ab += d;
        }
    }
    shw[threadIdx.y][threadIdx.x] = aw;
    shb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    for (int w = LN_ROWS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.y < w) {
            shw[threadIdx.y][threadIdx.x] += shw[threadIdx.y + w][threadIdx.x];
            shb[threadIdx.y][threadIdx.x] += shb[threadIdx.y + w][threadIdx.x];
        }
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < C) {
        dweight[c] += shw[0][threadIdx.x];
        dbias[c] += shb[0][threadIdx.x];
    }
}

ts_status ts_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                    const float *weight, const float *bias, int N, int C) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0, "ts_cuda_layernorm_forward");
    if (!N) return TS_OK;
    layernorm_forward_kernel<<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0,
                               ts_cuda_cur_stream()>>>(out, mean, rstd, inp, weight, bias, N, C);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                     const float *inp, const float *weight, const float *mean,
                                     const float *rstd, int N, int C) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0, "ts_cuda_layernorm_backward");
    if (!N) return TS_OK;
    cudaStream_t s = ts_cuda_cur_stream();
    layernorm_dparams_kernel<<<(C + LN_COLS - 1) / LN_COLS, dim3(LN_COLS, LN_ROWS), 0, s>>>(
        dweight, dbias, dout, inp, mean, rstd, N, C);
    TS_CUDA_CHECK_LAUNCH();
    layernorm_dinp_kernel<<<(N + LN_WARPS - 1) / LN_WARPS, LN_WARPS * 32, 0, s>>>(
        dinp, dout, inp, weight, mean, rstd, N, C);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}
