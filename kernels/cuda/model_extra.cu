/*
 * model_extra.cu — the small kernels the GPT-2 modules need besides the big
 * ones, twins of kernels/cpu/model_extra.c: a bias added to rows, the bias
 * gradient, the last step of the vocabulary-parallel cross-entropy; and the
 * stream-ordered memory operations of the CUDA backend (zero, device copy,
 * the sequence-parallel staging permutation).
 *
 * ts_cuda_bias_grad sums each column's rows in increasing order in f32 with
 * one thread per column, the CPU's order (deterministic, and slow for large
 * N: a blocked, still deterministic, version would be the first
 * refinement).
 */
#include <math.h>

#include "cuda_common.h"

__global__ static void add_bias_kernel(float *out, const float *bias, size_t n, int C) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] += bias[i % (size_t)C];
}

ts_status ts_cuda_add_bias(float *out, const float *bias, int N, int C) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0, "ts_cuda_add_bias");
    size_t n = (size_t)N * C;
    if (!n) return TS_OK;
    add_bias_kernel<<<ts_cuda_blocks(n, 256), 256, 0, ts_cuda_cur_stream()>>>(out, bias, n, C);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

__global__ static void bias_grad_kernel(float *dbias, const float *dout, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float s = 0.0f;
    for (int n = 0; n < N; n++)
        s += dout[(size_t)n * C + c];
    dbias[c] += s;
}

ts_status ts_cuda_bias_grad(float *dbias, const float *dout, int N, int C) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0, "ts_cuda_bias_grad");
    bias_grad_kernel<<<(C + 127) / 128, 128, 0, ts_cuda_cur_stream()>>>(dbias, dout, N, C);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

__global__ static void ce_shard_loss_kernel(float *losses, float *lse, const float *rowmax,
                                            const float *stats, const int32_t *targets, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    float l = rowmax[i] + logf(stats[2 * i]);
    lse[i] = l;
    losses[i] = targets[i] < 0 ? 0.0f : l - stats[2 * i + 1];
}

ts_status ts_cuda_ce_shard_loss(float *losses, float *lse, const float *rowmax, const float *stats,
                                const int32_t *targets, int N) {
    if (N <= 0) return TS_OK;
    ce_shard_loss_kernel<<<(N + 255) / 256, 256, 0, ts_cuda_cur_stream()>>>(losses, lse, rowmax,
                                                                            stats, targets, N);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_zero(void *ptr, size_t bytes) {
    if (!bytes) return TS_OK;
    TS_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, ts_cuda_cur_stream()));
    return TS_OK;
}

ts_status ts_cuda_copy(void *dst, const void *src, size_t bytes) {
    if (!bytes) return TS_OK;
    TS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ts_cuda_cur_stream()));
    return TS_OK;
}

ts_status ts_cuda_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                          size_t rows) {
    if (!width || !rows) return TS_OK;
    TS_CUDA_CHECK(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice,
                                    ts_cuda_cur_stream()));
    return TS_OK;
}

/* Per rank r: B rows of Tl*C floats, pitch T*C in `full`, Tl*C in `stage`. */
ts_status ts_cuda_seq_from_stage(float *full, const float *stage, int tp, int B, int T, int C) {
    TS_CUDA_REQUIRE(tp > 0 && T % tp == 0, "ts_cuda_seq_from_stage");
    size_t Tl = (size_t)(T / tp), row = Tl * C * sizeof(float), blk = (size_t)B * Tl * C;
    for (int r = 0; r < tp && row && B > 0; r++)
        TS_CUDA_CHECK(cudaMemcpy2DAsync(full + r * Tl * C, (size_t)T * C * sizeof(float),
                                        stage + r * blk, row, row, (size_t)B,
                                        cudaMemcpyDeviceToDevice, ts_cuda_cur_stream()));
    return TS_OK;
}

ts_status ts_cuda_seq_to_stage(float *stage, const float *full, int tp, int B, int T, int C) {
    TS_CUDA_REQUIRE(tp > 0 && T % tp == 0, "ts_cuda_seq_to_stage");
    size_t Tl = (size_t)(T / tp), row = Tl * C * sizeof(float), blk = (size_t)B * Tl * C;
    for (int r = 0; r < tp && row && B > 0; r++)
        TS_CUDA_CHECK(cudaMemcpy2DAsync(stage + r * blk, row, full + r * Tl * C,
                                        (size_t)T * C * sizeof(float), row, (size_t)B,
                                        cudaMemcpyDeviceToDevice, ts_cuda_cur_stream()));
    return TS_OK;
}
