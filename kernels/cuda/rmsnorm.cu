/*
 * rmsnorm.cu — RMSNorm over the last axis (no mean, no bias), forward and
 * backward: the normalisation of a Llama-class block, as ts_cpu_rmsnorm_*.
 *
 * Forward and the input gradient: one warp per row, the CPU's formulas (the
 * sum of squares, then rstd; the row's sum of dn * xn). The weight gradient
 * sums over rows without atomics, as layernorm.cu's: a block owns RMS_COLS
 * channels, its RMS_ROWS row-lanes each walk a fixed strided set of rows,
 * and a fixed tree adds the lanes, so the bits do not depend on timing.
 * Not here: a fused residual add, bf16.
 */
#include "cuda_common.h"

#define RMS_WARPS 8 /* rows per block in the row kernels */
#define RMS_COLS 8  /* channels per block in the column sums */
#define RMS_ROWS 64 /* row-lanes per block in the column sums */

__global__ static void rmsnorm_forward_kernel(float *out,          /* (N, C) */
                                              float *rstd,         /* (N) */
                                              const float *inp,    /* (N, C) */
                                              const float *weight, /* (C) */
                                              float eps, int N, int C) {
    int row = blockIdx.x * RMS_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float *o = out + (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32)
        ss += x[c] * x[c];
    float r = 1.0f / sqrtf(ts_warp_sum(ss) / (float)C + eps);
    for (int c = lane; c < C; c += 32)
        o[c] = x[c] * r * weight[c];
    if (lane == 0) rstd[row] = r;
}

/* dx = (dn - xn mean_c(dn xn)) r, with xn = x r and dn = weight dout. */
__global__ static void rmsnorm_dinp_kernel(float *dinp,         /* (N, C) */
                                           const float *dout,   /* (N, C) */
                                           const float *inp,    /* (N, C) */
                                           const float *weight, /* (C) */
                                           const float *rstd,   /* (N) */
                                           int N, int C) {
    int row = blockIdx.x * RMS_WARPS + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    const float *d = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float r = rstd[row];
    float acc = 0.0f;
    for (int c = lane; c < C; c += 32)
        acc += weight[c] * d[c] * (x[c] * r);
    float b = ts_warp_sum(acc) / (float)C;
    for (int c = lane; c < C; c += 32)
        dx[c] += (weight[c] * d[c] - x[c] * r * b) * r;
}

/* blockDim (RMS_COLS, RMS_ROWS); block b owns channels [b*RMS_COLS, +RMS_COLS). */
__global__ static void rmsnorm_dweight_kernel(float *dweight,    /* (C) */
                                              const float *dout, /* (N, C) */
                                              const float *inp,  /* (N, C) */
                                              const float *rstd, /* (N) */
                                              int N, int C) {
    __shared__ float sh[RMS_ROWS][RMS_COLS];
    int c = blockIdx.x * RMS_COLS + threadIdx.x;
    float acc = 0.0f;
    if (c < C)
        for (int n = threadIdx.y; n < N; n += RMS_ROWS) {
            size_t i = (size_t)n * C + c;
            acc += inp[i] * rstd[n] * dout[i];
        }
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int w = RMS_ROWS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.y < w) sh[threadIdx.y][threadIdx.x] += sh[threadIdx.y + w][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < C) dweight[c] += sh[0][threadIdx.x];
}

ts_status ts_cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                                  float eps, int N, int C) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0, "ts_cuda_rmsnorm_forward");
    if (!N) return TS_OK;
    rmsnorm_forward_kernel<<<(N + RMS_WARPS - 1) / RMS_WARPS, RMS_WARPS * 32, 0,
                             ts_cuda_cur_stream()>>>(out, rstd, inp, weight, eps, N, C);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                   const float *weight, const float *rstd, int N, int C) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0, "ts_cuda_rmsnorm_backward");
    if (!N) return TS_OK;
    cudaStream_t s = ts_cuda_cur_stream();
    rmsnorm_dweight_kernel<<<(C + RMS_COLS - 1) / RMS_COLS, dim3(RMS_COLS, RMS_ROWS), 0, s>>>(
        dweight, dout, inp, rstd, N, C);
    TS_CUDA_CHECK_LAUNCH();
    rmsnorm_dinp_kernel<<<(N + RMS_WARPS - 1) / RMS_WARPS, RMS_WARPS * 32, 0, s>>>(
        dinp, dout, inp, weight, rstd, N, C);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}
