/*
 * attention_block.cu — block attention for context parallelism (ring
 * attention): a block of query rows against a block of key/value rows with a
 * causal offset, its log-sum-exp, the merge of two partial results, and the
 * backward of one key block from the final output and lse. The semantics are
 * ts_cpu_attention_block_* (cpu_kernels.h); the arithmetic is attention.cu's
 * FlashAttention-2 scheme, generalised to row strides, Tq != Tk and an
 * offset, in f32 on the CUDA cores.
 *
 * Forward: a block owns BLK_TILE query rows of one (batch, head) and walks
 * the key tiles some of its rows can see, with an online softmax (running max
 * m and sum l, the output accumulator rescaled); a row may see no key of a
 * tile, or none at all, so a max of -inf is replaced by 0 before the
 * exponentials (p = 0, no NaN) and a row with l = 0 writes out 0, lse -inf.
 * Backward: P = exp(s - lse) recomputed tile by tile (0 where masked or where
 * lse = -inf), Drow = rowsum(dout * out). Two kernels, so that every element
 * of dq, dk, dv has a single writer and no atomics are needed (deterministic):
 * one block per key tile accumulates dk and dv over the query tiles that see
 * it; one block per query tile accumulates dq over the key tiles it sees.
 * Merge: one warp per (row, head), lanes over the head's columns.
 *
 * Thread layout of the tiled kernels (BLK_THREADS = 128), as attention.cu:
 * thread (ty = 0..15, tx = 0..7) owns rows 2ty, 2ty+1 of the tile, score
 * columns tx + 8j and output columns tx + 8j; a row's 8 threads are 8
 * consecutive lanes, reduced with xor shuffles 1, 2, 4. Tiles live in shared
 * memory with rows padded to D + 1 floats; hs is padded with zeros up to the
 * template width D in {32, 64, 128}.
 *
 * The offset is clamped on the host to [-Tq, Tk] (the same masks), so that
 * row + offset fits an int.
 */
#include <math.h>

#include "cuda_common.h"

#define BLK_TILE 32
#define BLK_THREADS 128
#define BLK_SP (BLK_TILE + 1) /* padded row of a (tile x tile) matrix */

/* rows [t0, t0 + BLK_TILE) of a (B, T, stride) tensor, columns [col, col +
 * hs), zero past T and past hs, into dst[BLK_TILE][D + 1]. */
template <int D>
__device__ static void blk_load(float *dst, const float *src, int b, int t0, int T, int stride,
                                size_t col, int hs) {
    for (int idx = threadIdx.x; idx < BLK_TILE * D; idx += BLK_THREADS) {
        int r = idx / D, d = idx % D, t = t0 + r;
        float v = 0.0f;
        if (t < T && d < hs) v = src[((size_t)b * T + t) * stride + col + d];
        dst[r * (D + 1) + d] = v;
    }
}

__device__ __forceinline__ static float blk_row8_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
}
__device__ __forceinline__ static float blk_row8_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x + __shfl_xor_sync(0xffffffffu, x, 4);
}

/* Keys [0, n) are visible to query row i (0 for a row past Tq). */
__device__ __forceinline__ static int blk_nvis(int i, int Tq, int Tk, int off) {
    int n = i + off + 1;
    return i >= Tq || n < 0 ? 0 : min(n, Tk);
}

/* lse_s[r] (-inf past Tq) and drow_s[r] = sum_d dout[r][d] * out[r][d] for
 * the query tile at q0 (dOs already in shared memory). */
template <int D>
__device__ static void blk_row_stats(float *lse_s, float *drow_s, const float *dOs,
                                     const float *out, const float *lse, int b, int bh, int q0,
                                     int Tq, int os, size_t col, int hs) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = warp; r < BLK_TILE; r += BLK_THREADS / 32) {
        int q = q0 + r;
        float acc = 0.0f;
        if (q < Tq)
            for (int d = lane; d < hs; d += 32)
                acc += dOs[r * (D + 1) + d] * out[((size_t)b * Tq + q) * os + col + d];
        acc = ts_warp_sum(acc);
        if (lane == 0) {
            drow_s[r] = acc;
            lse_s[r] = q < Tq ? lse[(size_t)bh * Tq + q] : -INFINITY;
        }
    }
}

template <int D>
__global__ static void __launch_bounds__(BLK_THREADS)
    block_forward_kernel(float *out, float *lse, const float *q, const float *k, const float *v,
                         int Tq, int Tk, int C, int NH, int qs, int kvs, int os, int off,
                         float scale) {
    constexpr int DP = D + 1, DJ = D / 8;
    extern __shared__ float smem[];
    float *Qs = smem, *Ks = Qs + BLK_TILE * DP, *Vs = Ks + BLK_TILE * DP;
    float *Ps = Vs + BLK_TILE * DP;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH;
    int q0 = (gridDim.x - 1 - blockIdx.x) * BLK_TILE; /* the longest rows first */
    int lane = threadIdx.x % 32, tx = lane & 7, ty = (threadIdx.x / 32) * 4 + (lane >> 3);
    size_t hcol = (size_t)h * hs;

    blk_load<D>(Qs, q, b, q0, Tq, qs, hcol, hs);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[2][DJ];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < DJ; j++)
            o[i][j] = 0.0f;

    int k_end = blk_nvis(min(q0 + BLK_TILE, Tq) - 1, Tq, Tk, off);
    for (int k0 = 0; k0 < k_end; k0 += BLK_TILE) {
        __syncthreads();
        blk_load<D>(Ks, k, b, k0, Tk, kvs, hcol, hs);
        blk_load<D>(Vs, v, b, k0, Tk, kvs, hcol, hs);
        __syncthreads();
        float s[2][4];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++)
                s[i][j] = 0.0f;
        for (int d = 0; d < D; d++) {
            float qd[2], kd[4];
            for (int i = 0; i < 2; i++)
                qd[i] = Qs[(ty * 2 + i) * DP + d];
            for (int j = 0; j < 4; j++)
                kd[j] = Ks[(tx + 8 * j) * DP + d];
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 4; j++)
                    s[i][j] += qd[i] * kd[j];
        }
        for (int i = 0; i < 2; i++) {
            int nv = blk_nvis(q0 + ty * 2 + i, Tq, Tk, off);
            float mx = -INFINITY;
            for (int j = 0; j < 4; j++) {
                s[i][j] = k0 + tx + 8 * j >= nv ? -INFINITY : s[i][j] * scale;
                mx = fmaxf(mx, s[i][j]);
            }
            float m_new = fmaxf(m[i], blk_row8_max(mx));
            float m_use = m_new == -INFINITY ? 0.0f : m_new; /* no key yet: p = 0 */
            float corr = expf(m[i] - m_use), ps = 0.0f;
            for (int j = 0; j < 4; j++) {
                float p = expf(s[i][j] - m_use);
                Ps[(ty * 2 + i) * BLK_SP + tx + 8 * j] = p;
                ps += p;
            }
            l[i] = l[i] * corr + blk_row8_sum(ps);
            m[i] = m_new;
            for (int j = 0; j < DJ; j++)
                o[i][j] *= corr;
        }
        __syncthreads();
        for (int c = 0; c < BLK_TILE; c++) {
            float p0 = Ps[(ty * 2) * BLK_SP + c], p1 = Ps[(ty * 2 + 1) * BLK_SP + c];
            for (int j = 0; j < DJ; j++) {
                float vv = Vs[c * DP + tx + 8 * j];
                o[0][j] += p0 * vv;
                o[1][j] += p1 * vv;
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        int qi = q0 + ty * 2 + i;
        if (qi >= Tq) continue;
        /* l >= 1 once a key is visible (its max contributes exp(0)) */
        float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
        float *orow = out + ((size_t)b * Tq + qi) * os + hcol;
        for (int j = 0; j < DJ; j++) {
            int d = tx + 8 * j;
            if (d < hs) orow[d] = o[i][j] * inv;
        }
        if (tx == 0) lse[(size_t)bh * Tq + qi] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
    }
}

/* P and dS of the (query tile, key tile) pair for the thread's 2 x 4 entries:
 * P = exp(s * scale - lse) (0 where masked or lse = -inf), dS = P (dP - Drow)
 * scale. */
template <int D>
__device__ static void blk_pair_grads(float p[2][4], float ds[2][4], const float *Qs,
                                      const float *dOs, const float *Ks, const float *Vs,
                                      const float *lse_s, const float *drow_s, int q0, int k0,
                                      int Tq, int Tk, int off, float scale, int tx, int ty) {
    constexpr int DP = D + 1;
    float s[2][4], dp[2][4];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            s[i][j] = dp[i][j] = 0.0f;
    for (int d = 0; d < D; d++) {
        float qd[2], g[2], kd[4], vd[4];
        for (int i = 0; i < 2; i++) {
            qd[i] = Qs[(ty * 2 + i) * DP + d];
            g[i] = dOs[(ty * 2 + i) * DP + d];
        }
        for (int j = 0; j < 4; j++) {
            kd[j] = Ks[(tx + 8 * j) * DP + d];
            vd[j] = Vs[(tx + 8 * j) * DP + d];
        }
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++) {
                s[i][j] += qd[i] * kd[j];
                dp[i][j] += g[i] * vd[j];
            }
    }
    for (int i = 0; i < 2; i++) {
        int r = ty * 2 + i, nv = blk_nvis(q0 + r, Tq, Tk, off);
        float L = lse_s[r];
        for (int j = 0; j < 4; j++) {
            int kj = k0 + tx + 8 * j;
            float pij = kj >= nv || L == -INFINITY ? 0.0f : expf(s[i][j] * scale - L);
            p[i][j] = pij;
            ds[i][j] = pij * (dp[i][j] - drow_s[r]) * scale;
        }
    }
}

/* One block per key tile: dk, dv (+=) over the query tiles that see it. */
template <int D>
__global__ static void __launch_bounds__(BLK_THREADS)
    block_dkv_kernel(float *dk, float *dv, const float *q, const float *k, const float *v,
                     const float *out, const float *dout, const float *lse, int Tq, int Tk, int C,
                     int NH, int qs, int kvs, int os, int off, float scale) {
    constexpr int DP = D + 1, DJ = D / 8;
    extern __shared__ float smem[];
    float *Ks = smem, *Vs = Ks + BLK_TILE * DP, *Qs = Vs + BLK_TILE * DP;
    float *dOs = Qs + BLK_TILE * DP, *Ps = dOs + BLK_TILE * DP, *dSs = Ps + BLK_TILE * BLK_SP;
    float *lse_s = dSs + BLK_TILE * BLK_SP, *drow_s = lse_s + BLK_TILE;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH;
    int k0 = blockIdx.x * BLK_TILE;
    int lane = threadIdx.x % 32, tx = lane & 7, ty = (threadIdx.x / 32) * 4 + (lane >> 3);
    size_t hcol = (size_t)h * hs;

    blk_load<D>(Ks, k, b, k0, Tk, kvs, hcol, hs);
    blk_load<D>(Vs, v, b, k0, Tk, kvs, hcol, hs);
    float dkr[2][DJ], dvr[2][DJ];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < DJ; j++)
            dkr[i][j] = dvr[i][j] = 0.0f;

    /* the first query row that sees key k0: k0 <= i + off */
    int q_first = max(k0 - off, 0);
    for (int q0 = q_first / BLK_TILE * BLK_TILE; q0 < Tq; q0 += BLK_TILE) {
        __syncthreads();
        blk_load<D>(Qs, q, b, q0, Tq, qs, hcol, hs);
        blk_load<D>(dOs, dout, b, q0, Tq, os, hcol, hs);
        __syncthreads();
        blk_row_stats<D>(lse_s, drow_s, dOs, out, lse, b, bh, q0, Tq, os, hcol, hs);
        __syncthreads();
        float p[2][4], ds[2][4];
        blk_pair_grads<D>(p, ds, Qs, dOs, Ks, Vs, lse_s, drow_s, q0, k0, Tq, Tk, off, scale, tx,
                          ty);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++) {
                Ps[(ty * 2 + i) * BLK_SP + tx + 8 * j] = p[i][j];
                dSs[(ty * 2 + i) * BLK_SP + tx + 8 * j] = ds[i][j];
            }
        __syncthreads();
        /* this thread's key rows 2ty, 2ty+1: sum over the tile's queries */
        for (int r = 0; r < BLK_TILE; r++) {
            float p0 = Ps[r * BLK_SP + ty * 2], p1 = Ps[r * BLK_SP + ty * 2 + 1];
            float s0 = dSs[r * BLK_SP + ty * 2], s1 = dSs[r * BLK_SP + ty * 2 + 1];
            for (int j = 0; j < DJ; j++) {
                float g = dOs[r * DP + tx + 8 * j], qq = Qs[r * DP + tx + 8 * j];
                dvr[0][j] += p0 * g;
                dvr[1][j] += p1 * g;
                dkr[0][j] += s0 * qq;
                dkr[1][j] += s1 * qq;
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        int kr = k0 + ty * 2 + i;
        if (kr >= Tk) continue;
        size_t row = ((size_t)b * Tk + kr) * kvs + hcol;
        for (int j = 0; j < DJ; j++) {
            int d = tx + 8 * j;
            if (d >= hs) continue;
            dk[row + d] += dkr[i][j];
            dv[row + d] += dvr[i][j];
        }
    }
}

/* One block per query tile: dq (+=) over the key tiles it sees. */
template <int D>
__global__ static void __launch_bounds__(BLK_THREADS)
    block_dq_kernel(float *dq, const float *q, const float *k, const float *v, const float *out,
                    const float *dout, const float *lse, int Tq, int Tk, int C, int NH, int qs,
                    int kvs, int os, int off, float scale) {
    constexpr int DP = D + 1, DJ = D / 8;
    extern __shared__ float smem[];
    float *Qs = smem, *dOs = Qs + BLK_TILE * DP, *Ks = dOs + BLK_TILE * DP;
    float *Vs = Ks + BLK_TILE * DP, *dSs = Vs + BLK_TILE * DP;
    float *lse_s = dSs + BLK_TILE * BLK_SP, *drow_s = lse_s + BLK_TILE;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH;
    int q0 = (gridDim.x - 1 - blockIdx.x) * BLK_TILE;
    int lane = threadIdx.x % 32, tx = lane & 7, ty = (threadIdx.x / 32) * 4 + (lane >> 3);
    size_t hcol = (size_t)h * hs;

    blk_load<D>(Qs, q, b, q0, Tq, qs, hcol, hs);
    blk_load<D>(dOs, dout, b, q0, Tq, os, hcol, hs);
    __syncthreads();
    blk_row_stats<D>(lse_s, drow_s, dOs, out, lse, b, bh, q0, Tq, os, hcol, hs);
    float dqr[2][DJ];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < DJ; j++)
            dqr[i][j] = 0.0f;

    int k_end = blk_nvis(min(q0 + BLK_TILE, Tq) - 1, Tq, Tk, off);
    for (int k0 = 0; k0 < k_end; k0 += BLK_TILE) {
        __syncthreads();
        blk_load<D>(Ks, k, b, k0, Tk, kvs, hcol, hs);
        blk_load<D>(Vs, v, b, k0, Tk, kvs, hcol, hs);
        __syncthreads();
        float p[2][4], ds[2][4];
        blk_pair_grads<D>(p, ds, Qs, dOs, Ks, Vs, lse_s, drow_s, q0, k0, Tq, Tk, off, scale, tx,
                          ty);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++)
                dSs[(ty * 2 + i) * BLK_SP + tx + 8 * j] = ds[i][j];
        __syncthreads();
        for (int c = 0; c < BLK_TILE; c++) {
            float s0 = dSs[(ty * 2) * BLK_SP + c], s1 = dSs[(ty * 2 + 1) * BLK_SP + c];
            for (int j = 0; j < DJ; j++) {
                float kk = Ks[c * DP + tx + 8 * j];
                dqr[0][j] += s0 * kk;
                dqr[1][j] += s1 * kk;
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        int qi = q0 + ty * 2 + i;
        if (qi >= Tq) continue;
        float *row = dq + ((size_t)b * Tq + qi) * qs + hcol;
        for (int j = 0; j < DJ; j++) {
            int d = tx + 8 * j;
            if (d < hs) row[d] += dqr[i][j];
        }
    }
}

/* One warp per (row, head) r = (b * Tq + i) * NH + h, lanes over columns. */
__global__ static void block_merge_kernel(float *out, float *lse, const float *out2,
                                          const float *lse2, int Tq, int NH, int hs, int os,
                                          long rows) {
    int lane = threadIdx.x % 32;
    long warp = ((long)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    long nwarps = (long)gridDim.x * blockDim.x / 32;
    for (long r = warp; r < rows; r += nwarps) {
        int h = (int)(r % NH);
        long bi = r / NH; /* b * Tq + i */
        int i = (int)(bi % Tq), b = (int)(bi / Tq);
        size_t li = ((size_t)b * NH + h) * Tq + i, oi = (size_t)bi * os + (size_t)h * hs;
        float a = lse[li], a2 = lse2[li], L = a;
        if (a2 == -INFINITY) { /* nothing to add; both empty: out 0 */
            if (a == -INFINITY)
                for (int d = lane; d < hs; d += 32)
                    out[oi + d] = 0.0f;
        } else if (a == -INFINITY) { /* take the other part */
            for (int d = lane; d < hs; d += 32)
                out[oi + d] = out2[oi + d];
            L = a2;
        } else {
            float mx = fmaxf(a, a2), mn = fminf(a, a2);
            L = mx + log1pf(expf(mn - mx));
            float w = expf(a - L), w2 = expf(a2 - L);
            for (int d = lane; d < hs; d += 32)
                out[oi + d] = out[oi + d] * w + out2[oi + d] * w2;
        }
        __syncwarp(); /* every lane has read lse[li] */
        if (lane == 0) lse[li] = L;
    }
}

/* Shared-memory bytes of each tiled kernel for width D. */
static size_t fwd_smem(int D) {
    return sizeof(float) * (3 * BLK_TILE * (D + 1) + BLK_TILE * BLK_SP);
}
static size_t dkv_smem(int D) {
    return sizeof(float) * (4 * BLK_TILE * (D + 1) + 2 * BLK_TILE * BLK_SP + 2 * BLK_TILE);
}
static size_t dq_smem(int D) {
    return sizeof(float) * (4 * BLK_TILE * (D + 1) + BLK_TILE * BLK_SP + 2 * BLK_TILE);
}

static ts_status check_block(const char *kernel, int B, int Tq, int Tk, int C, int NH, int qs,
                             int kvs, int os) {
    if (B < 0 || Tq < 0 || Tk < 0 || C <= 0 || NH <= 0 || C % NH || C / NH > 128 ||
        (long)B * NH > 65535 || qs < C || kvs < C || os < C)
        return ts_error(TS_ERR_INVALID,
                        "cuda: %s: bad shape B=%d Tq=%d Tk=%d C=%d NH=%d qs=%d kvs=%d os=%d "
                        "(need C %% NH == 0, C/NH <= 128, B*NH <= 65535, strides >= C)",
                        kernel, B, Tq, Tk, C, NH, qs, kvs, os);
    return TS_OK;
}

/* The same masks with row + offset inside an int. */
static int clamp_offset(int64_t offset, int Tq, int Tk) {
    if (offset > Tk) return Tk;
    if (offset < -(int64_t)Tq) return -Tq;
    return (int)offset;
}

template <int D>
static ts_status forward_d(float *out, float *lse, const float *q, const float *k, const float *v,
                           int B, int Tq, int Tk, int C, int NH, int qs, int kvs, int os, int off) {
    size_t sm = fwd_smem(D);
    TS_CUDA_CHECK(cudaFuncSetAttribute(block_forward_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    dim3 grid((unsigned)((Tq + BLK_TILE - 1) / BLK_TILE), (unsigned)(B * NH));
    float scale = 1.0f / sqrtf((float)(C / NH));
    block_forward_kernel<D><<<grid, BLK_THREADS, sm, ts_cuda_cur_stream()>>>(
        out, lse, q, k, v, Tq, Tk, C, NH, qs, kvs, os, off, scale);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

template <int D>
static ts_status backward_d(float *dq, float *dk, float *dv, const float *q, const float *k,
                            const float *v, const float *out, const float *dout, const float *lse,
                            int B, int Tq, int Tk, int C, int NH, int qs, int kvs, int os,
                            int off) {
    size_t sm_kv = dkv_smem(D), sm_q = dq_smem(D);
    TS_CUDA_CHECK(cudaFuncSetAttribute(block_dkv_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_kv));
    TS_CUDA_CHECK(cudaFuncSetAttribute(block_dq_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_q));
    float scale = 1.0f / sqrtf((float)(C / NH));
    cudaStream_t s = ts_cuda_cur_stream();
    dim3 grid_kv((unsigned)((Tk + BLK_TILE - 1) / BLK_TILE), (unsigned)(B * NH));
    block_dkv_kernel<D><<<grid_kv, BLK_THREADS, sm_kv, s>>>(dk, dv, q, k, v, out, dout, lse, Tq, Tk,
                                                            C, NH, qs, kvs, os, off, scale);
    TS_CUDA_CHECK_LAUNCH();
    dim3 grid_q((unsigned)((Tq + BLK_TILE - 1) / BLK_TILE), (unsigned)(B * NH));
    block_dq_kernel<D><<<grid_q, BLK_THREADS, sm_q, s>>>(dq, q, k, v, out, dout, lse, Tq, Tk, C, NH,
                                                         qs, kvs, os, off, scale);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_attention_block_forward(float *out, float *lse, const float *q, const float *k,
                                          const float *v, int B, int Tq, int Tk, int C, int NH,
                                          int qs, int kvs, int os, int64_t offset) {
    TS_TRY(check_block("ts_cuda_attention_block_forward", B, Tq, Tk, C, NH, qs, kvs, os));
    if (!B || !Tq) return TS_OK;
    int hs = C / NH, off = clamp_offset(offset, Tq, Tk);
    if (hs <= 32) return forward_d<32>(out, lse, q, k, v, B, Tq, Tk, C, NH, qs, kvs, os, off);
    if (hs <= 64) return forward_d<64>(out, lse, q, k, v, B, Tq, Tk, C, NH, qs, kvs, os, off);
    return forward_d<128>(out, lse, q, k, v, B, Tq, Tk, C, NH, qs, kvs, os, off);
}

ts_status ts_cuda_attention_block_merge(float *out, float *lse, const float *out2,
                                        const float *lse2, int B, int Tq, int C, int NH, int os) {
    if (B < 0 || Tq < 0 || C <= 0 || NH <= 0 || C % NH || os < C)
        return ts_error(TS_ERR_INVALID,
                        "cuda: ts_cuda_attention_block_merge: bad shape B=%d Tq=%d C=%d NH=%d "
                        "os=%d (need C %% NH == 0, os >= C)",
                        B, Tq, C, NH, os);
    long rows = (long)B * Tq * NH;
    if (!rows) return TS_OK;
    int threads = 256;
    block_merge_kernel<<<ts_cuda_blocks((size_t)rows * 32, threads), threads, 0,
                         ts_cuda_cur_stream()>>>(out, lse, out2, lse2, Tq, NH, C / NH, os, rows);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_attention_block_backward(float *dq, float *dk, float *dv, const float *q,
                                           const float *k, const float *v, const float *out,
                                           const float *dout, const float *lse, int B, int Tq,
                                           int Tk, int C, int NH, int qs, int kvs, int os,
                                           int64_t offset) {
    TS_TRY(check_block("ts_cuda_attention_block_backward", B, Tq, Tk, C, NH, qs, kvs, os));
    if (!B || !Tq || !Tk) return TS_OK;
    int hs = C / NH, off = clamp_offset(offset, Tq, Tk);
    if (hs <= 32)
        return backward_d<32>(dq, dk, dv, q, k, v, out, dout, lse, B, Tq, Tk, C, NH, qs, kvs, os,
                              off);
    if (hs <= 64)
        return backward_d<64>(dq, dk, dv, q, k, v, out, dout, lse, B, Tq, Tk, C, NH, qs, kvs, os,
                              off);
    return backward_d<128>(dq, dk, dv, q, k, v, out, dout, lse, B, Tq, Tk, C, NH, qs, kvs, os, off);
}
