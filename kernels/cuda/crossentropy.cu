/*
 * crossentropy.cu — softmax cross-entropy over a padded vocabulary: the fused
 * forward (per-row max, sum of exp, log-sum-exp and loss in one block per
 * row), the backward (dlogits written in place or not), and the three pieces
 * of a vocabulary-parallel loss (shard max, shard sum of exp + target logit,
 * shard backward).
 *
 * Rows are reduced by one block each with a fixed tree (warp butterflies,
 * then the warps in order), so results are deterministic. The forward reads a
 * row twice (max, then sum of exp); a 200 KB row is still in L2 the second
 * time. Padded columns [V, Vp) are never read; the backward writes them 0.
 */
#include <math.h>

#include "cuda_common.h"

#define CE_THREADS 512

/* Sum / max over the block; every thread gets the same result. */
__device__ static float block_sum(float v) {
    __shared__ float sh[32];
    __shared__ float total;
    v = ts_warp_sum(v);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads(); /* sh and total may still be read by a previous call */
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float x = lane < nw ? sh[lane] : 0.0f;
        x = ts_warp_sum(x);
        if (lane == 0) total = x;
    }
    __syncthreads();
    return total;
}

__device__ static float block_max(float v) {
    __shared__ float sh[32];
    __shared__ float total;
    v = ts_warp_max(v);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    __syncthreads();
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float x = lane < nw ? sh[lane] : -INFINITY;
        x = ts_warp_max(x);
        if (lane == 0) total = x;
    }
    __syncthreads();
    return total;
}

__device__ static float row_max(const float *x, int V) {
    float mx = -INFINITY;
    for (int c = threadIdx.x; c < V; c += blockDim.x)
        mx = fmaxf(mx, x[c]);
    return block_max(mx);
}

__device__ static float row_sumexp(const float *x, float mx, int V) {
    float s = 0.0f;
    for (int c = threadIdx.x; c < V; c += blockDim.x)
        s += expf(x[c] - mx);
    return block_sum(s);
}

__global__ static void ce_forward_kernel(float *losses, float *lse, const float *logits,
                                         const int32_t *targets, int V, int Vp) {
    int n = blockIdx.x;
    const float *x = logits + (size_t)n * Vp;
    float mx = row_max(x, V);
    float s = row_sumexp(x, mx, V);
    if (threadIdx.x == 0) {
        float l = mx + logf(s);
        int t = targets[n];
        lse[n] = l;
        losses[n] = t < 0 ? 0.0f : l - x[t];
    }
}

__global__ static void ce_shard_max_kernel(float *rowmax, const float *logits, int V_loc,
                                           int Vp_loc) {
    int n = blockIdx.x;
    float mx = row_max(logits + (size_t)n * Vp_loc, V_loc);
    if (threadIdx.x == 0) rowmax[n] = mx;
}

__global__ static void ce_shard_sumexp_kernel(float *stats, const float *logits,
                                              const float *rowmax, const int32_t *targets, int v0,
                                              int V_loc, int Vp_loc) {
    int n = blockIdx.x;
    const float *x = logits + (size_t)n * Vp_loc;
    float s = row_sumexp(x, rowmax[n], V_loc);
    if (threadIdx.x == 0) {
        int t = targets[n] - v0;
        stats[2 * n] = s;
        stats[2 * n + 1] = targets[n] >= 0 && t >= 0 && t < V_loc ? x[t] : 0.0f;
    }
}

/* dlogits (N, Vp) written; grid (column blocks, rows); in place is safe: each
 * element is read then written by one thread. tgt_local is the target's
 * column in this shard (or out of range). */
__global__ static void ce_backward_kernel(float *dlogits, const float *logits, const float *lse,
                                          const int32_t *targets, float dloss, int v0, int N, int V,
                                          int Vp) {
    for (int n = blockIdx.y; n < N; n += gridDim.y) {
        size_t off = (size_t)n * Vp;
        int tgt = targets[n];
        int t = tgt - v0;
        float l = lse[n];
        for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < Vp; c += gridDim.x * blockDim.x) {
            float d = 0.0f;
            if (tgt >= 0 && c < V) {
                d = expf(logits[off + c] - l) * dloss;
                if (c == t) d -= dloss;
            }
            dlogits[off + c] = d;
        }
    }
}

static ts_status ce_backward(float *dlogits, const float *logits, const float *lse,
                             const int32_t *targets, float dloss, int v0, int N, int V, int Vp) {
    const int threads = 256;
    int xblocks = (Vp + threads - 1) / threads;
    if (xblocks > 64) xblocks = 64;
    dim3 grid((unsigned)xblocks, (unsigned)(N < 65535 ? N : 65535));
    ce_backward_kernel<<<grid, threads, 0, ts_cuda_cur_stream()>>>(dlogits, logits, lse, targets,
                                                                   dloss, v0, N, V, Vp);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_crossentropy_forward(float *losses, float *lse, const float *logits,
                                       const int32_t *targets, int N, int V, int Vp) {
    TS_CUDA_REQUIRE(N >= 0 && V > 0 && Vp >= V, "ts_cuda_crossentropy_forward");
    if (!N) return TS_OK;
    ce_forward_kernel<<<N, CE_THREADS, 0, ts_cuda_cur_stream()>>>(losses, lse, logits, targets, V,
                                                                  Vp);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                        const int32_t *targets, float dloss, int N, int V, int Vp) {
    TS_CUDA_REQUIRE(N >= 0 && V > 0 && Vp >= V, "ts_cuda_crossentropy_backward");
    if (!N) return TS_OK;
    return ce_backward(dlogits, logits, lse, targets, dloss, 0, N, V, Vp);
}

ts_status ts_cuda_ce_shard_max(float *rowmax, const float *logits, int N, int V_loc, int Vp_loc) {
    TS_CUDA_REQUIRE(N >= 0 && V_loc >= 0 && Vp_loc >= V_loc, "ts_cuda_ce_shard_max");
    if (!N) return TS_OK;
    ce_shard_max_kernel<<<N, CE_THREADS, 0, ts_cuda_cur_stream()>>>(rowmax, logits, V_loc, Vp_loc);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_ce_shard_sumexp(float *stats, const float *logits, const float *rowmax,
                                  const int32_t *targets, int v0, int N, int V_loc, int Vp_loc) {
    TS_CUDA_REQUIRE(N >= 0 && V_loc >= 0 && Vp_loc >= V_loc, "ts_cuda_ce_shard_sumexp");
    if (!N) return TS_OK;
    ce_shard_sumexp_kernel<<<N, CE_THREADS, 0, ts_cuda_cur_stream()>>>(stats, logits, rowmax,
                                                                       targets, v0, V_loc, Vp_loc);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_ce_shard_backward(float *dlogits, const float *logits, const float *lse,
                                    const int32_t *targets, float dloss, int v0, int N, int V_loc,
                                    int Vp_loc) {
    TS_CUDA_REQUIRE(N >= 0 && V_loc >= 0 && Vp_loc >= V_loc, "ts_cuda_ce_shard_backward");
    if (!N) return TS_OK;
    return ce_backward(dlogits, logits, lse, targets, dloss, v0, N, V_loc, Vp_loc);
}
