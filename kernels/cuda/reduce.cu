/*
 * reduce.cu — the sum of squares for gradient-norm clipping, and the bf16
 * conversions.
 *
 * The sum of squares is deterministic: pass 1 runs a fixed grid of
 * SUMSQ_BLOCKS blocks, block i summing the contiguous slice
 * [n*i/SUMSQ_BLOCKS, n*(i+1)/SUMSQ_BLOCKS) in double with a fixed tree, into
 * a static partial; pass 2, one block, adds the partials with the same tree.
 * The bits depend on n only, not on the device's size or timing.
 */
#include "cuda_common.h"

#define SUMSQ_BLOCKS 1024
#define SUMSQ_THREADS 256

static __device__ double g_sumsq_partials[SUMSQ_BLOCKS];

/* Sum over a block of SUMSQ_THREADS doubles, a fixed tree; thread 0 gets it. */
__device__ static double block_sum_double(double s) {
    __shared__ double sh[SUMSQ_THREADS];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = SUMSQ_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    return sh[0];
}

__global__ static void sumsq_partial_kernel(const float *x, size_t n) {
    size_t lo = n * blockIdx.x / SUMSQ_BLOCKS, hi = n * (blockIdx.x + 1) / SUMSQ_BLOCKS;
    double s = 0.0;
    for (size_t i = lo + threadIdx.x; i < hi; i += SUMSQ_THREADS) {
        double v = (double)x[i];
        s += v * v;
    }
    double tot = block_sum_double(s);
    if (threadIdx.x == 0) g_sumsq_partials[blockIdx.x] = tot;
}

__global__ static void sumsq_final_kernel(double *out) {
    double s = 0.0;
    for (int i = threadIdx.x; i < SUMSQ_BLOCKS; i += SUMSQ_THREADS)
        s += g_sumsq_partials[i];
    double tot = block_sum_double(s);
    if (threadIdx.x == 0) *out = tot;
}

/* n * (i+1) must not overflow size_t in the slice bounds. */
ts_status ts_cuda_sumsq(double *out, const float *x, size_t n) {
    TS_CUDA_REQUIRE(n <= SIZE_MAX / SUMSQ_BLOCKS, "ts_cuda_sumsq");
    cudaStream_t s = ts_cuda_cur_stream();
    sumsq_partial_kernel<<<SUMSQ_BLOCKS, SUMSQ_THREADS, 0, s>>>(x, n);
    TS_CUDA_CHECK_LAUNCH();
    sumsq_final_kernel<<<1, SUMSQ_THREADS, 0, s>>>(out);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

__global__ static void round_bf16_kernel(float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = ts_dev_bf16_to_f32(ts_dev_f32_to_bf16(x[i]));
}

__global__ static void f32_to_bf16_kernel(uint16_t *out, const float *in, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = ts_dev_f32_to_bf16(in[i]);
}

__global__ static void bf16_to_f32_kernel(float *out, const uint16_t *in, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = ts_dev_bf16_to_f32(in[i]);
}

ts_status ts_cuda_round_bf16(float *x, size_t n) {
    if (!n) return TS_OK;
    round_bf16_kernel<<<ts_cuda_blocks(n, 256), 256, 0, ts_cuda_cur_stream()>>>(x, n);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_f32_to_bf16(uint16_t *out, const float *in, size_t n) {
    if (!n) return TS_OK;
    f32_to_bf16_kernel<<<ts_cuda_blocks(n, 256), 256, 0, ts_cuda_cur_stream()>>>(out, in, n);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_bf16_to_f32(float *out, const uint16_t *in, size_t n) {
    if (!n) return TS_OK;
    bf16_to_f32_kernel<<<ts_cuda_blocks(n, 256), 256, 0, ts_cuda_cur_stream()>>>(out, in, n);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}
