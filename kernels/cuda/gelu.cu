/*
 * gelu.cu — GELU, tanh approximation (Hendrycks & Gimpel 2016): forward,
 * backward (+=), and the fused bias + GELU forward of the MLP.
 *
 * tanhf is the accurate libdevice function (no --use_fast_math), within
 * 2 ulp, against the CPU's polynomial within 1e-6: the two agree far inside
 * the tests' 1e-5.
 */
#include "cuda_common.h"

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_A 0.044715f

__device__ __forceinline__ static float gelu_fwd(float x) {
    float th = tanhf(GELU_K * (x + GELU_A * x * x * x));
    return 0.5f * x * (1.0f + th);
}

__global__ static void gelu_forward_kernel(float *out, const float *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = gelu_fwd(inp[i]);
}

__global__ static void gelu_backward_kernel(float *dinp, const float *inp, const float *dout,
                                            size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float x = inp[i];
        float th = tanhf(GELU_K * (x + GELU_A * x * x * x));
        float dudx = GELU_K * (1.0f + 3.0f * GELU_A * x * x);
        float grad = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * dudx;
        dinp[i] += grad * dout[i];
    }
}

/* 2D grid: blockIdx.y walks rows, x covers the channels of a row. */
__device__ __forceinline__ static float round_to_bf16(float x) {
    return ts_dev_bf16_to_f32(ts_dev_f32_to_bf16(x));
}

__global__ static void bias_gelu_kernel(float *out, float *pre, const float *inp, const float *bias,
                                        int N, int C, int round) {
    for (int row = blockIdx.y; row < N; row += gridDim.y) {
        size_t off = (size_t)row * C;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < C; c += gridDim.x * blockDim.x) {
            float x = inp[off + c] + bias[c];
            if (round) x = round_to_bf16(x);
            if (pre) pre[off + c] = x;
            float y = gelu_fwd(x);
            out[off + c] = round ? round_to_bf16(y) : y;
        }
    }
}

ts_status ts_cuda_gelu_forward(float *out, const float *inp, size_t n) {
    if (!n) return TS_OK;
    gelu_forward_kernel<<<ts_cuda_blocks(n, 256), 256, 0, ts_cuda_cur_stream()>>>(out, inp, n);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    if (!n) return TS_OK;
    gelu_backward_kernel<<<ts_cuda_blocks(n, 256), 256, 0, ts_cuda_cur_stream()>>>(dinp, inp, dout,
                                                                                   n);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_bias_gelu_forward(float *out, float *pre, const float *inp, const float *bias,
                                    int N, int C, int round_bf16) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0, "ts_cuda_bias_gelu_forward");
    if (!N) return TS_OK;
    const int threads = 256;
    dim3 grid((unsigned)((C + threads - 1) / threads), (unsigned)(N < 65535 ? N : 65535));
    bias_gelu_kernel<<<grid, threads, 0, ts_cuda_cur_stream()>>>(out, pre, inp, bias, N, C,
                                                                 round_bf16);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}
