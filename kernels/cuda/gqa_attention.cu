/*
 * gqa_attention.cu — grouped-query causal self-attention (NH query heads
 * sharing NKV key/value heads) over a packed qkv row, forward and backward,
 * flash style in f32 on the CUDA cores, as ts_cpu_gqa_attention_*
 * (cpu_kernels.h states the layout: a row of W = (NH + 2 NKV) hs floats
 * holds the q heads, then the k heads, then the v heads; out rows hold NH hs).
 * Query head h reads kv head h / (NH / NKV) in place: K and V are never
 * repeated, and no (T, T) array exists.
 *
 * Forward: a block owns GQA_TILE query rows of one (batch, query head); it
 * walks the key tiles at or before the diagonal with an online softmax
 * (running max m and sum l, the accumulator rescaled when m grows) and
 * writes out and lse = m + log(l) (B, NH, T).
 * Backward: P = exp(s * scale - lse) made again tile by tile, with
 * Drow = rowsum(dout * out). Two kernels, so that every element of dqkv has
 * one writer and no atomics are needed:
 *   dkv  one block per (key tile, batch, kv head): dk and dv of its keys,
 *        summed over the group's query heads in order, each head's query
 *        tiles at or after the key tile in order;
 *   dq   one block per (query tile, batch, query head): dq over the key
 *        tiles at or before it, in order.
 * So the bits depend on the shape only.
 *
 * Thread layout (GQA_THREADS = 128): thread (ty = 0..15, tx = 0..7) owns
 * rows 2ty, 2ty+1 of a tile, score columns tx + 8j and head columns tx + 8j.
 * A row's 8 threads are 8 consecutive lanes, reduced with xor shuffles 1, 2,
 * 4. Tiles live in shared memory, rows padded to D + 1 floats; the head size
 * hs is padded with zeros up to the template width D in {32, 64, 128}, so
 * hs <= 128 (Llama's is 128).
 *
 * Not here: tensor cores, bf16, larger tiles, a sliding window (this is the
 * correctness baseline, as attention.cu is for multi-head attention).
 */
#include <math.h>

#include "cuda_common.h"

#define GQA_TILE 32
#define GQA_THREADS 128
#define GQA_SP (GQA_TILE + 1) /* padded row of a (tile x tile) matrix */

/* What every kernel needs of the shape. */
struct gqa_dims {
    int T, NH, NKV, hs;
    size_t W, OW; /* floats per qkv row, per out row */
    float scale;
};

/* Rows [t0, t0 + GQA_TILE) of a (B, T, stride) tensor, columns [col, col + hs),
 * zero past T and past hs, into dst[GQA_TILE][D + 1]. */
template <int D>
__device__ static void gqa_load_tile(float *dst, const float *src, int b, int t0, int T,
                                     size_t stride, size_t col, int hs) {
    for (int idx = threadIdx.x; idx < GQA_TILE * D; idx += GQA_THREADS) {
        int r = idx / D, d = idx % D, t = t0 + r;
        float v = 0.0f;
        if (t < T && d < hs) v = src[((size_t)b * T + t) * stride + col + d];
        dst[r * (D + 1) + d] = v;
    }
}

__device__ __forceinline__ static float gqa_row8_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
}
__device__ __forceinline__ static float gqa_row8_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x + __shfl_xor_sync(0xffffffffu, x, 4);
}

/* acc[i][j] += sum over c, in order, of M[2 ty + i][c] X[c][tx + 8 j]: this
 * thread's two rows of a (tile x tile) matrix (rows GQA_SP apart) times a
 * tile of rows (D + 1 apart): the forward's P V and the backward's dS K. */
template <int D>
__device__ __forceinline__ static void gqa_tile_times_rows(float (*acc)[D / 8], const float *M,
                                                           const float *X, int ty, int tx) {
    for (int c = 0; c < GQA_TILE; c++) {
        float m0 = M[(ty * 2) * GQA_SP + c], m1 = M[(ty * 2 + 1) * GQA_SP + c];
        for (int j = 0; j < D / 8; j++) {
            float x = X[c * (D + 1) + tx + 8 * j];
            acc[0][j] += m0 * x;
            acc[1][j] += m1 * x;
        }
    }
}

/* lse_s[r] and drow_s[r] = sum_d dout[r][d] out[r][d] of query head h's
 * tile at q0 (dOs already in shared memory); 0 past T. */
template <int D>
__device__ static void gqa_row_stats(float *lse_s, float *drow_s, const float *dOs,
                                     const float *out, const float *lse, int b, int h, int q0,
                                     const gqa_dims &g) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    size_t col = (size_t)h * g.hs;
    for (int r = warp; r < GQA_TILE; r += GQA_THREADS / 32) {
        int q = q0 + r;
        float acc = 0.0f;
        if (q < g.T)
            for (int d = lane; d < g.hs; d += 32)
                acc += dOs[r * (D + 1) + d] * out[((size_t)b * g.T + q) * g.OW + col + d];
        acc = ts_warp_sum(acc);
        if (lane == 0) {
            drow_s[r] = acc;
            lse_s[r] = q < g.T ? lse[((size_t)b * g.NH + h) * g.T + q] : 0.0f;
        }
    }
}

/* grid (query tiles, B * NH). */
template <int D>
__global__ static void __launch_bounds__(GQA_THREADS)
    gqa_forward_kernel(float *out,       /* (B, T, NH hs) */
                       float *lse,       /* (B, NH, T) */
                       const float *qkv, /* (B, T, (NH + 2 NKV) hs) */
                       gqa_dims g) {
    constexpr int DP = D + 1, DJ = D / 8;
    extern __shared__ float smem[];
    float *Qs = smem, *Ks = Qs + GQA_TILE * DP, *Vs = Ks + GQA_TILE * DP;
    float *Ps = Vs + GQA_TILE * DP;
    int b = blockIdx.y / g.NH, h = blockIdx.y % g.NH, kvh = h / (g.NH / g.NKV), T = g.T;
    int q0 = (gridDim.x - 1 - blockIdx.x) * GQA_TILE; /* the longest rows first */
    int lane = threadIdx.x % 32, tx = lane & 7, ty = (threadIdx.x / 32) * 4 + (lane >> 3);
    size_t qcol = (size_t)h * g.hs, kcol = (size_t)(g.NH + kvh) * g.hs;
    size_t vcol = kcol + (size_t)g.NKV * g.hs;

    gqa_load_tile<D>(Qs, qkv, b, q0, T, g.W, qcol, g.hs);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[2][DJ];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < DJ; j++)
            o[i][j] = 0.0f;

    int k_end = min(q0 + GQA_TILE, T);
    for (int k0 = 0; k0 < k_end; k0 += GQA_TILE) {
        __syncthreads();
        gqa_load_tile<D>(Ks, qkv, b, k0, T, g.W, kcol, g.hs);
        gqa_load_tile<D>(Vs, qkv, b, k0, T, g.W, vcol, g.hs);
        __syncthreads();
        float s[2][4];
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++)
                s[i][j] = 0.0f;
        for (int d = 0; d < D; d++) {
            float q[2], k[4];
            for (int i = 0; i < 2; i++)
                q[i] = Qs[(ty * 2 + i) * DP + d];
            for (int j = 0; j < 4; j++)
                k[j] = Ks[(tx + 8 * j) * DP + d];
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 4; j++)
                    s[i][j] += q[i] * k[j];
        }
        for (int i = 0; i < 2; i++) {
            int qi = q0 + ty * 2 + i;
            float mx = -INFINITY;
            for (int j = 0; j < 4; j++) {
                int kj = k0 + tx + 8 * j;
                s[i][j] = kj > qi || kj >= T ? -INFINITY : s[i][j] * g.scale;
                mx = fmaxf(mx, s[i][j]);
            }
            /* key k0 <= qi is never masked, so m_new is finite */
            float m_new = fmaxf(m[i], gqa_row8_max(mx));
            float corr = expf(m[i] - m_new), ps = 0.0f;
            for (int j = 0; j < 4; j++) {
                float p = expf(s[i][j] - m_new);
                Ps[(ty * 2 + i) * GQA_SP + tx + 8 * j] = p;
                ps += p;
            }
            l[i] = l[i] * corr + gqa_row8_sum(ps);
            m[i] = m_new;
            for (int j = 0; j < DJ; j++)
                o[i][j] *= corr;
        }
        __syncthreads();
        gqa_tile_times_rows<D>(o, Ps, Vs, ty, tx);
    }
    for (int i = 0; i < 2; i++) {
        int q = q0 + ty * 2 + i;
        if (q >= T) continue;
        float inv = 1.0f / l[i];
        float *orow = out + ((size_t)b * T + q) * g.OW + qcol;
        for (int j = 0; j < DJ; j++) {
            int d = tx + 8 * j;
            if (d < g.hs) orow[d] = o[i][j] * inv;
        }
        if (tx == 0) lse[((size_t)b * g.NH + h) * T + q] = m[i] + logf(l[i]);
    }
}

/* P and dS of a (query tile, key tile) pair for the thread's 2 x 4 entries:
 * P = exp(s * scale - lse) (0 where masked), dS = P (dP - Drow) scale. */
template <int D>
__device__ static void gqa_pair_grads(float p[2][4], float ds[2][4], const float *Qs,
                                      const float *dOs, const float *Ks, const float *Vs,
                                      const float *lse_s, const float *drow_s, int q0, int k0,
                                      const gqa_dims &g, int tx, int ty) {
    constexpr int DP = D + 1;
    float s[2][4], dp[2][4];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            s[i][j] = dp[i][j] = 0.0f;
    for (int d = 0; d < D; d++) {
        float q[2], gr[2], k[4], v[4];
        for (int i = 0; i < 2; i++) {
            q[i] = Qs[(ty * 2 + i) * DP + d];
            gr[i] = dOs[(ty * 2 + i) * DP + d];
        }
        for (int j = 0; j < 4; j++) {
            k[j] = Ks[(tx + 8 * j) * DP + d];
            v[j] = Vs[(tx + 8 * j) * DP + d];
        }
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++) {
                s[i][j] += q[i] * k[j];
                dp[i][j] += gr[i] * v[j];
            }
    }
    for (int i = 0; i < 2; i++) {
        int r = ty * 2 + i, qi = q0 + r;
        for (int j = 0; j < 4; j++) {
            int kj = k0 + tx + 8 * j;
            float pij =
                qi >= g.T || kj >= g.T || kj > qi ? 0.0f : expf(s[i][j] * g.scale - lse_s[r]);
            p[i][j] = pij;
            ds[i][j] = pij * (dp[i][j] - drow_s[r]) * g.scale;
        }
    }
}

/* grid (key tiles, B * NKV): dk, dv (+=) of one kv head's key tile, over
 * the group's query heads in order and their query tiles at or after it. */
template <int D>
__global__ static void __launch_bounds__(GQA_THREADS)
    gqa_dkv_kernel(float *dqkv,       /* (B, T, (NH + 2 NKV) hs) */
                   const float *dout, /* (B, T, NH hs) */
                   const float *qkv,  /* (B, T, (NH + 2 NKV) hs) */
                   const float *out,  /* (B, T, NH hs) */
                   const float *lse,  /* (B, NH, T) */
                   gqa_dims g) {
    constexpr int DP = D + 1, DJ = D / 8;
    extern __shared__ float smem[];
    float *Ks = smem, *Vs = Ks + GQA_TILE * DP, *Qs = Vs + GQA_TILE * DP;
    float *dOs = Qs + GQA_TILE * DP, *Ps = dOs + GQA_TILE * DP, *dSs = Ps + GQA_TILE * GQA_SP;
    float *lse_s = dSs + GQA_TILE * GQA_SP, *drow_s = lse_s + GQA_TILE;
    int b = blockIdx.y / g.NKV, kvh = blockIdx.y % g.NKV, rep = g.NH / g.NKV, T = g.T;
    int k0 = blockIdx.x * GQA_TILE;
    int lane = threadIdx.x % 32, tx = lane & 7, ty = (threadIdx.x / 32) * 4 + (lane >> 3);
    size_t kcol = (size_t)(g.NH + kvh) * g.hs, vcol = kcol + (size_t)g.NKV * g.hs;

    gqa_load_tile<D>(Ks, qkv, b, k0, T, g.W, kcol, g.hs);
    gqa_load_tile<D>(Vs, qkv, b, k0, T, g.W, vcol, g.hs);
    float dk[2][DJ], dv[2][DJ];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < DJ; j++)
            dk[i][j] = dv[i][j] = 0.0f;

    for (int h = kvh * rep; h < (kvh + 1) * rep; h++) {
        size_t qcol = (size_t)h * g.hs;
        for (int q0 = k0; q0 < T; q0 += GQA_TILE) {
            __syncthreads();
            gqa_load_tile<D>(Qs, qkv, b, q0, T, g.W, qcol, g.hs);
            gqa_load_tile<D>(dOs, dout, b, q0, T, g.OW, qcol, g.hs);
            __syncthreads();
            gqa_row_stats<D>(lse_s, drow_s, dOs, out, lse, b, h, q0, g);
            __syncthreads();
            float p[2][4], ds[2][4];
            gqa_pair_grads<D>(p, ds, Qs, dOs, Ks, Vs, lse_s, drow_s, q0, k0, g, tx, ty);
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 4; j++) {
                    Ps[(ty * 2 + i) * GQA_SP + tx + 8 * j] = p[i][j];
                    dSs[(ty * 2 + i) * GQA_SP + tx + 8 * j] = ds[i][j];
                }
            __syncthreads();
            /* this thread's key rows 2ty, 2ty+1: the tile's queries in order */
            for (int r = 0; r < GQA_TILE; r++) {
                float p0 = Ps[r * GQA_SP + ty * 2], p1 = Ps[r * GQA_SP + ty * 2 + 1];
                float s0 = dSs[r * GQA_SP + ty * 2], s1 = dSs[r * GQA_SP + ty * 2 + 1];
                for (int j = 0; j < DJ; j++) {
                    float gr = dOs[r * DP + tx + 8 * j], q = Qs[r * DP + tx + 8 * j];
                    dv[0][j] += p0 * gr;
                    dv[1][j] += p1 * gr;
                    dk[0][j] += s0 * q;
                    dk[1][j] += s1 * q;
                }
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        int k = k0 + ty * 2 + i;
        if (k >= T) continue;
        float *row = dqkv + ((size_t)b * T + k) * g.W;
        for (int j = 0; j < DJ; j++) {
            int d = tx + 8 * j;
            if (d >= g.hs) continue;
            row[kcol + d] += dk[i][j];
            row[vcol + d] += dv[i][j];
        }
    }
}

/* grid (query tiles, B * NH): dq (+=) over the key tiles at or before it. */
template <int D>
__global__ static void __launch_bounds__(GQA_THREADS)
    gqa_dq_kernel(float *dqkv,       /* (B, T, (NH + 2 NKV) hs) */
                  const float *dout, /* (B, T, NH hs) */
                  const float *qkv,  /* (B, T, (NH + 2 NKV) hs) */
                  const float *out,  /* (B, T, NH hs) */
                  const float *lse,  /* (B, NH, T) */
                  gqa_dims g) {
    constexpr int DP = D + 1, DJ = D / 8;
    extern __shared__ float smem[];
    float *Qs = smem, *dOs = Qs + GQA_TILE * DP, *Ks = dOs + GQA_TILE * DP;
    float *Vs = Ks + GQA_TILE * DP, *dSs = Vs + GQA_TILE * DP;
    float *lse_s = dSs + GQA_TILE * GQA_SP, *drow_s = lse_s + GQA_TILE;
    int b = blockIdx.y / g.NH, h = blockIdx.y % g.NH, kvh = h / (g.NH / g.NKV), T = g.T;
    int q0 = (gridDim.x - 1 - blockIdx.x) * GQA_TILE;
    int lane = threadIdx.x % 32, tx = lane & 7, ty = (threadIdx.x / 32) * 4 + (lane >> 3);
    size_t qcol = (size_t)h * g.hs, kcol = (size_t)(g.NH + kvh) * g.hs;
    size_t vcol = kcol + (size_t)g.NKV * g.hs;

    gqa_load_tile<D>(Qs, qkv, b, q0, T, g.W, qcol, g.hs);
    gqa_load_tile<D>(dOs, dout, b, q0, T, g.OW, qcol, g.hs);
    __syncthreads();
    gqa_row_stats<D>(lse_s, drow_s, dOs, out, lse, b, h, q0, g);
    float dq[2][DJ];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < DJ; j++)
            dq[i][j] = 0.0f;

    int k_end = min(q0 + GQA_TILE, T);
    for (int k0 = 0; k0 < k_end; k0 += GQA_TILE) {
        __syncthreads();
        gqa_load_tile<D>(Ks, qkv, b, k0, T, g.W, kcol, g.hs);
        gqa_load_tile<D>(Vs, qkv, b, k0, T, g.W, vcol, g.hs);
        __syncthreads();
        float p[2][4], ds[2][4];
        gqa_pair_grads<D>(p, ds, Qs, dOs, Ks, Vs, lse_s, drow_s, q0, k0, g, tx, ty);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++)
                dSs[(ty * 2 + i) * GQA_SP + tx + 8 * j] = ds[i][j];
        __syncthreads();
        gqa_tile_times_rows<D>(dq, dSs, Ks, ty, tx);
    }
    for (int i = 0; i < 2; i++) {
        int q = q0 + ty * 2 + i;
        if (q >= T) continue;
        float *row = dqkv + ((size_t)b * T + q) * g.W + qcol;
        for (int j = 0; j < DJ; j++) {
            int d = tx + 8 * j;
            if (d < g.hs) row[d] += dq[i][j];
        }
    }
}

/* Shared-memory bytes of each kernel for width D. */
static size_t gqa_fwd_smem(int D) {
    return sizeof(float) * (3 * GQA_TILE * (D + 1) + GQA_TILE * GQA_SP);
}
static size_t gqa_dkv_smem(int D) {
    return sizeof(float) * (4 * GQA_TILE * (D + 1) + 2 * GQA_TILE * GQA_SP + 2 * GQA_TILE);
}
static size_t gqa_dq_smem(int D) {
    return sizeof(float) * (4 * GQA_TILE * (D + 1) + GQA_TILE * GQA_SP + 2 * GQA_TILE);
}

static ts_status gqa_check(const char *kernel, int B, int T, int NH, int NKV, int hs) {
    if (B < 0 || T <= 0 || NH <= 0 || NKV <= 0 || NH % NKV || hs <= 0 || hs > 128 ||
        (long)B * NH > 65535)
        return ts_error(TS_ERR_INVALID,
                        "cuda: %s: bad shape B=%d T=%d NH=%d NKV=%d hs=%d (need NH %% NKV == 0, "
                        "hs <= 128, B*NH <= 65535)",
                        kernel, B, T, NH, NKV, hs);
    return TS_OK;
}

static gqa_dims gqa_make_dims(int T, int NH, int NKV, int hs) {
    gqa_dims g;
    g.T = T, g.NH = NH, g.NKV = NKV, g.hs = hs;
    g.W = (size_t)(NH + 2 * NKV) * hs, g.OW = (size_t)NH * hs;
    g.scale = 1.0f / sqrtf((float)hs);
    return g;
}

template <int D>
static ts_status gqa_forward_d(float *out, float *lse, const float *qkv, int B, const gqa_dims &g) {
    size_t sm = gqa_fwd_smem(D);
    TS_CUDA_CHECK(cudaFuncSetAttribute(gqa_forward_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    dim3 grid((unsigned)((g.T + GQA_TILE - 1) / GQA_TILE), (unsigned)(B * g.NH));
    gqa_forward_kernel<D><<<grid, GQA_THREADS, sm, ts_cuda_cur_stream()>>>(out, lse, qkv, g);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

template <int D>
static ts_status gqa_backward_d(float *dqkv, const float *dout, const float *qkv, const float *out,
                                const float *lse, int B, const gqa_dims &g) {
    size_t sm_kv = gqa_dkv_smem(D), sm_q = gqa_dq_smem(D);
    TS_CUDA_CHECK(cudaFuncSetAttribute(gqa_dkv_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_kv));
    TS_CUDA_CHECK(cudaFuncSetAttribute(gqa_dq_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_q));
    unsigned tiles = (unsigned)((g.T + GQA_TILE - 1) / GQA_TILE);
    cudaStream_t s = ts_cuda_cur_stream();
    gqa_dkv_kernel<D><<<dim3(tiles, (unsigned)(B * g.NKV)), GQA_THREADS, sm_kv, s>>>(
        dqkv, dout, qkv, out, lse, g);
    TS_CUDA_CHECK_LAUNCH();
    gqa_dq_kernel<D>
        <<<dim3(tiles, (unsigned)(B * g.NH)), GQA_THREADS, sm_q, s>>>(dqkv, dout, qkv, out, lse, g);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_gqa_attention_forward(float *out, float *lse, const float *qkv, int B, int T,
                                        int NH, int NKV, int hs) {
    TS_TRY(gqa_check("ts_cuda_gqa_attention_forward", B, T, NH, NKV, hs));
    if (!B) return TS_OK;
    gqa_dims g = gqa_make_dims(T, NH, NKV, hs);
    if (hs <= 32) return gqa_forward_d<32>(out, lse, qkv, B, g);
    if (hs <= 64) return gqa_forward_d<64>(out, lse, qkv, B, g);
    return gqa_forward_d<128>(out, lse, qkv, B, g);
}

ts_status ts_cuda_gqa_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse, int B, int T, int NH,
                                         int NKV, int hs) {
    TS_TRY(gqa_check("ts_cuda_gqa_attention_backward", B, T, NH, NKV, hs));
    if (!B) return TS_OK;
    gqa_dims g = gqa_make_dims(T, NH, NKV, hs);
    if (hs <= 32) return gqa_backward_d<32>(dqkv, dout, qkv, out, lse, B, g);
    if (hs <= 64) return gqa_backward_d<64>(dqkv, dout, qkv, out, lse, B, g);
    return gqa_backward_d<128>(dqkv, dout, qkv, out, lse, B, g);
}
