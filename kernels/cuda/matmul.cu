/*
 * matmul.cu — the linear layer through cuBLAS: out = inp @ weight^T + bias
 * and its backward, in plain f32 (cublasSgemm, never TF32) and with bf16
 * operands (cublasGemmEx, CUBLAS_COMPUTE_32F, f32 results).
 *
 * Row-major tensors are column-major transposes, so each product is issued
 * transposed in cuBLAS's column-major terms: out^T (OC, N) = weight (OC, C) @ inp^T
 * (see each call). The bias add and the bias gradient are ours; the bias
 * gradient sums columns without atomics, in a fixed order (as layernorm.cu).
 */
#include <cublas_v2.h>

#include "cuda_common.h"

#define MM_COLS 8  /* columns per block in the column sums */
#define MM_ROWS 64 /* row-lanes per block in the column sums */

__device__ __forceinline__ static float load_f32(const float *p, size_t i) {
    return p[i];
}
__device__ __forceinline__ static float load_f32(const uint16_t *p, size_t i) {
    return ts_dev_bf16_to_f32(p[i]);
}

/* out (N, OC) += bias (OC), row by row. */
__global__ static void add_bias_kernel(float *out, const float *bias, int N, int OC) {
    for (int row = blockIdx.y; row < N; row += gridDim.y) {
        float *o = out + (size_t)row * OC;
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < OC; c += gridDim.x * blockDim.x)
            o[c] += bias[c];
    }
}

/* dbias (OC) += column sums of dout (N, OC). blockDim (MM_COLS, MM_ROWS). */
template <typename T>
__global__ static void colsum_kernel(float *dbias, const T *dout, int N, int OC) {
    __shared__ float sh[MM_ROWS][MM_COLS];
    int c = blockIdx.x * MM_COLS + threadIdx.x;
    float acc = 0.0f;
    if (c < OC)
        for (int n = threadIdx.y; n < N; n += MM_ROWS)
            acc += load_f32(dout, (size_t)n * OC + c);
    sh[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    for (int w = MM_ROWS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.y < w) sh[threadIdx.y][threadIdx.x] += sh[threadIdx.y + w][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && c < OC) dbias[c] += sh[0][threadIdx.x];
}

static ts_status add_bias(float *out, const float *bias, int N, int OC) {
    const int threads = 256;
    dim3 grid((unsigned)((OC + threads - 1) / threads), (unsigned)(N < 65535 ? N : 65535));
    add_bias_kernel<<<grid, threads, 0, ts_cuda_cur_stream()>>>(out, bias, N, OC);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

template <typename T> static ts_status colsum(float *dbias, const T *dout, int N, int OC) {
    colsum_kernel<T>
        <<<(OC + MM_COLS - 1) / MM_COLS, dim3(MM_COLS, MM_ROWS), 0, ts_cuda_cur_stream()>>>(
            dbias, dout, N, OC);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

static ts_status handle(cublasHandle_t *h, const char *kernel) {
    *h = ts_cuda_cublas();
    if (!*h) return ts_error(TS_ERR_INVALID, "cuda: %s: ts_cuda_init not called", kernel);
    return TS_OK;
}

/* --- f32 ---------------------------------------------------------------------- */
ts_status ts_cuda_matmul_forward(float *out, const float *inp, const float *weight,
                                 const float *bias, int N, int C, int OC) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0 && OC > 0, "ts_cuda_matmul_forward");
    if (!N) return TS_OK;
    cublasHandle_t h;
    TS_TRY(handle(&h, "ts_cuda_matmul_forward"));
    const float one = 1.0f, zero = 0.0f;
    TS_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH)); /* no TF32 */
    /* out^T (OC, N) = op_T(weight: stored C x OC) @ inp^T (stored C x N) */
    TS_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C, inp, C,
                                &zero, out, OC));
    if (bias) TS_TRY(add_bias(out, bias, N, OC));
    return TS_OK;
}

ts_status ts_cuda_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, int N, int C, int OC) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0 && OC > 0, "ts_cuda_matmul_backward");
    if (!N) return TS_OK;
    cublasHandle_t h;
    TS_TRY(handle(&h, "ts_cuda_matmul_backward"));
    const float one = 1.0f;
    TS_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    /* dinp^T (C, N) += weight^T (C x OC, as stored) @ dout^T (OC x N, as stored) */
    if (dinp)
        TS_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C, dout,
                                    OC, &one, dinp, C));
    /* dweight^T (C, OC) += inp^T (C x N, as stored) @ dout (N x OC: op T of stored) */
    if (dweight)
        TS_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC,
                                    &one, dweight, C));
    if (dbias) TS_TRY(colsum(dbias, dout, N, OC));
    return TS_OK;
}

/* --- bf16 operands, f32 accumulation and results -------------------------------- */
ts_status ts_cuda_matmul_forward_bf16(float *out, const uint16_t *inp, const uint16_t *weight,
                                      const float *bias, int N, int C, int OC) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0 && OC > 0, "ts_cuda_matmul_forward_bf16");
    if (!N) return TS_OK;
    cublasHandle_t h;
    TS_TRY(handle(&h, "ts_cuda_matmul_forward_bf16"));
    const float one = 1.0f, zero = 0.0f;
    TS_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, CUDA_R_16BF,
                                 C, inp, CUDA_R_16BF, C, &zero, out, CUDA_R_32F, OC,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (bias) TS_TRY(add_bias(out, bias, N, OC));
    return TS_OK;
}

ts_status ts_cuda_matmul_backward_bf16(float *dinp, float *dweight, float *dbias,
                                       const uint16_t *dout, const uint16_t *inp,
                                       const uint16_t *weight, int N, int C, int OC) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0 && OC > 0, "ts_cuda_matmul_backward_bf16");
    if (!N) return TS_OK;
    cublasHandle_t h;
    TS_TRY(handle(&h, "ts_cuda_matmul_backward_bf16"));
    const float one = 1.0f;
    if (dinp)
        TS_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight,
                                     CUDA_R_16BF, C, dout, CUDA_R_16BF, OC, &one, dinp, CUDA_R_32F,
                                     C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (dweight)
        TS_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, CUDA_R_16BF,
                                     C, dout, CUDA_R_16BF, OC, &one, dweight, CUDA_R_32F, C,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (dbias) TS_TRY(colsum(dbias, dout, N, OC));
    return TS_OK;
}
