/*
 * embedding.cu — token plus learned position embedding, forward and backward,
 * and the vocabulary-shard and position pieces of a vocabulary-parallel or
 * sequence-parallel embedding.
 *
 * The backward scatters rows of dout into dwte by token id without atomics.
 * Rows of dwte are split into EMB_GROUPS groups by (row % EMB_GROUPS); the
 * blocks of group g own those rows, walk all N tokens in order (staged through
 * shared memory; the branch is uniform across the block) and add only the rows
 * they own. So every element of dwte has one writer and sums its
 * contributions in increasing n — the CPU's order, hence the CPU's bits.
 * Token ids are trusted to lie in [0, V), as on the CPU.
 */
#include <limits.h>

#include "cuda_common.h"

#define EMB_GROUPS 64   /* row groups of dwte in the scatter */
#define EMB_THREADS 128 /* channels per block in the scatter */

__global__ static void embedding_forward_kernel(float *out, const int32_t *tokens, const float *wte,
                                                const float *wpe, int N, int T, int C, int pos0) {
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int n = (int)(i / C), c = (int)(i % C);
        out[i] = wte[(size_t)tokens[n] * C + c] + wpe[(size_t)(pos0 + n % T) * C + c];
    }
}

__global__ static void embedding_shard_forward_kernel(float *out, const int32_t *tokens,
                                                      const float *wte, int v0, int V_loc, int N,
                                                      int C) {
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int n = (int)(i / C), c = (int)(i % C);
        int r = tokens[n] - v0;
        out[i] = r < 0 || r >= V_loc ? 0.0f : wte[(size_t)r * C + c];
    }
}

__global__ static void position_forward_kernel(float *out, const float *wpe, int N, int T, int C,
                                               int pos0) {
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int n = (int)(i / C), c = (int)(i % C);
        out[i] += wpe[(size_t)(pos0 + n % T) * C + c];
    }
}

/* grid (ceil(C / EMB_THREADS), EMB_GROUPS); block g-row owns dwte rows r with
 * r % EMB_GROUPS == blockIdx.y. */
__global__ static void embedding_scatter_kernel(float *dwte, const float *dout,
                                                const int32_t *tokens, int v0, int V_loc, int N,
                                                int C) {
    __shared__ int32_t tile[EMB_THREADS];
    int c = blockIdx.x * EMB_THREADS + threadIdx.x;
    int g = blockIdx.y;
    for (int n0 = 0; n0 < N; n0 += EMB_THREADS) {
        int nt = N - n0 < EMB_THREADS ? N - n0 : EMB_THREADS;
        __syncthreads();
        if ((int)threadIdx.x < nt) tile[threadIdx.x] = tokens[n0 + threadIdx.x];
        __syncthreads();
        for (int j = 0; j < nt; j++) {
            int r = tile[j] - v0;
            if (r < 0 || r >= V_loc || r % EMB_GROUPS != g) continue;
            if (c < C) dwte[(size_t)r * C + c] += dout[(size_t)(n0 + j) * C + c];
        }
    }
}

/* One thread per (t, c): dwpe[pos0 + t][c] += dout[b][t][c] for b in order. */
__global__ static void position_backward_kernel(float *dwpe, const float *dout, int B, int T, int C,
                                                int pos0) {
    size_t total = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        int t = (int)(i / C), c = (int)(i % C);
        float *dp = dwpe + (size_t)(pos0 + t) * C + c;
        float acc = *dp;
        for (int b = 0; b < B; b++)
            acc += dout[((size_t)b * T + t) * C + c];
        *dp = acc;
    }
}

static ts_status scatter(float *dwte, const float *dout, const int32_t *tokens, int v0, int V_loc,
                         int N, int C) {
    dim3 grid((unsigned)((C + EMB_THREADS - 1) / EMB_THREADS), EMB_GROUPS);
    embedding_scatter_kernel<<<grid, EMB_THREADS, 0, ts_cuda_cur_stream()>>>(dwte, dout, tokens, v0,
                                                                             V_loc, N, C);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                                    const float *wpe, int B, int T, int C, int pos0) {
    TS_CUDA_REQUIRE(B >= 0 && T > 0 && C > 0 && pos0 >= 0, "ts_cuda_embedding_forward");
    size_t total = (size_t)B * T * C;
    if (!total) return TS_OK;
    embedding_forward_kernel<<<ts_cuda_blocks(total, 256), 256, 0, ts_cuda_cur_stream()>>>(
        out, tokens, wte, wpe, B * T, T, C, pos0);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_embedding_backward(float *dwte, float *dwpe, const float *dout,
                                     const int32_t *tokens, int B, int T, int C, int pos0) {
    TS_CUDA_REQUIRE(B >= 0 && T > 0 && C > 0 && pos0 >= 0, "ts_cuda_embedding_backward");
    if (!B) return TS_OK;
    TS_TRY(ts_cuda_position_backward(dwpe, dout, B, T, C, pos0));
    return scatter(dwte, dout, tokens, 0, INT_MAX, B * T, C);
}

ts_status ts_cuda_embedding_shard_forward(float *out, const int32_t *tokens, const float *wte,
                                          int v0, int V_loc, int N, int C) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0 && V_loc >= 0, "ts_cuda_embedding_shard_forward");
    size_t total = (size_t)N * C;
    if (!total) return TS_OK;
    embedding_shard_forward_kernel<<<ts_cuda_blocks(total, 256), 256, 0, ts_cuda_cur_stream()>>>(
        out, tokens, wte, v0, V_loc, N, C);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_embedding_shard_backward(float *dwte, const float *dout, const int32_t *tokens,
                                           int v0, int V_loc, int N, int C) {
    TS_CUDA_REQUIRE(N >= 0 && C > 0 && V_loc >= 0, "ts_cuda_embedding_shard_backward");
    if (!N || !V_loc) return TS_OK;
    return scatter(dwte, dout, tokens, v0, V_loc, N, C);
}

ts_status ts_cuda_position_forward(float *out, const float *wpe, int B, int T, int C, int pos0) {
    TS_CUDA_REQUIRE(B >= 0 && T > 0 && C > 0 && pos0 >= 0, "ts_cuda_position_forward");
    size_t total = (size_t)B * T * C;
    if (!total) return TS_OK;
    position_forward_kernel<<<ts_cuda_blocks(total, 256), 256, 0, ts_cuda_cur_stream()>>>(
        out, wpe, B * T, T, C, pos0);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_position_backward(float *dwpe, const float *dout, int B, int T, int C, int pos0) {
    TS_CUDA_REQUIRE(B >= 0 && T > 0 && C > 0 && pos0 >= 0, "ts_cuda_position_backward");
    size_t total = (size_t)T * C;
    if (!B) return TS_OK;
    position_backward_kernel<<<ts_cuda_blocks(total, 256), 256, 0, ts_cuda_cur_stream()>>>(
        dwpe, dout, B, T, C, pos0);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}
