/*
 * residual.cu — the residual add, its backward, and the fused residual add +
 * LayerNorm forward (one warp per row: the sum is written and normalized
 * while the row is still in registers' reach, saving a read of it).
 */
#include "cpu_kernels.h" /* TS_LAYERNORM_EPS */
#include "cuda_common.h"

__global__ static void residual_forward_kernel(float *out, const float *a, const float *b,
                                               size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = a[i] + b[i];
}

__global__ static void residual_backward_kernel(float *da, float *db, const float *dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float d = dout[i];
        if (da) da[i] += d;
        if (db) db[i] += d;
    }
}

ts_status ts_cuda_residual_forward(float *out, const float *a, const float *b, size_t n) {
    if (!n) return TS_OK;
    residual_forward_kernel<<<ts_cuda_blocks(n, 256), 256, 0, ts_cuda_cur_stream()>>>(out, a, b, n);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_residual_backward(float *da, float *db, const float *dout, size_t n) {
    if (!n || (!da && !db)) return TS_OK;
    residual_backward_kernel<<<ts_cuda_blocks(n, 256), 256, 0, ts_cuda_cur_stream()>>>(da, db, dout,
                                                                                       n);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

/* One warp per row: res = a + b written, then mean and variance from res (two
 * passes, as the CPU: mean first, then the sum of (x - mean)^2), then ln_out.
 * The second and third passes read res back, from L1/L2. */
__device__ __forceinline__ static float round_to_bf16(float x) {
    return ts_dev_bf16_to_f32(ts_dev_f32_to_bf16(x));
}

__global__ static void residual_layernorm_kernel(float *res, float *ln_out, float *mean,
                                                 float *rstd, const float *a, const float *b,
                                                 const float *res_bias, const float *weight,
                                                 const float *bias, int N, int C, int round) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;
    size_t off = (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float x = a[off + c] + b[off + c];
        if (res_bias) x += res_bias[c];
        if (round) x = round_to_bf16(x);
        res[off + c] = x;
        s += x;
    }
    float m = ts_warp_sum(s) / (float)C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = res[off + c] - m;
        ss += d * d;
    }
    float r = 1.0f / sqrtf(ts_warp_sum(ss) / (float)C + TS_LAYERNORM_EPS);
    for (int c = lane; c < C; c += 32) {
        float y = (res[off + c] - m) * r * weight[c] + bias[c];
        ln_out[off + c] = round ? round_to_bf16(y) : y;
    }
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

ts_status ts_cuda_residual_layernorm_forward(float *res, float *ln_out, float *mean, float *rstd,
                                             const float *a, const float *b, const float *res_bias,
                                             const float *weight, const float *bias, int N, int C,
                                             int round_bf16) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0, "ts_cuda_residual_layernorm_forward");
    if (!N) return TS_OK;
    const int warps = 8;
    residual_layernorm_kernel<<<(N + warps - 1) / warps, warps * 32, 0, ts_cuda_cur_stream()>>>(
        res, ln_out, mean, rstd, a, b, res_bias, weight, bias, N, C, round_bf16);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}
