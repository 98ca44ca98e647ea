/*
 * attention.cu — causal multi-head self-attention in the style of
 * FlashAttention-2 (Dao 2023), in f32 on the CUDA cores: the (T, T) score
 * matrix is never stored.
 *
 * Forward: a block owns ATT_TILE query rows of one (batch, head); it walks the
 * key tiles at or before the diagonal, keeping a running row max m and sum l
 * (online softmax) and rescaling its output accumulator; it writes out and
 * lse = m + log(l).
 * Backward: recomputes P = exp(q k^T * scale - lse) tile by tile, with
 * Drow = rowsum(dout * out). Two kernels, so that each element of dqkv has a
 * single writer and no atomics are needed: one block per key tile
 * accumulates dk and dv over the query tiles at or after it; one block per
 * query tile accumulates dq over the key tiles at or before it.
 *
 * Thread layout (ATT_THREADS = 128): thread (ty = 0..15, tx = 0..7) owns rows
 * 2ty, 2ty+1 of the tile, score columns tx + 8j, output columns tx + 8j. A
 * row's 8 threads are 8 consecutive lanes, reduced with xor shuffles 1, 2, 4.
 * Tiles live in shared memory with rows padded to D + 1 floats (conflict-free
 * column walks). The head size hs is padded with zeros up to the template
 * width D in {32, 64, 128}.
 *
 * Not done here: tensor cores (a bf16 version would not match the CPU
 * within 1e-5) and larger tiles; this is the correctness baseline.
 */
#include <math.h>

#include "cuda_common.h"

#define ATT_TILE 32
#define ATT_THREADS 128
#define ATT_SP (ATT_TILE + 1) /* padded row of a (tile x tile) matrix */

/* rows [t0, t0 + ATT_TILE) of a (B, T, stride) tensor, columns [col, col + hs),
 * zero past T and past hs, into dst[ATT_TILE][D + 1]. */
template <int D>
__device__ static void load_tile(float *dst, const float *src, int b, int t0, int T, size_t stride,
                                 size_t col, int hs) {
    for (int idx = threadIdx.x; idx < ATT_TILE * D; idx += ATT_THREADS) {
        int r = idx / D, d = idx % D, t = t0 + r;
        float v = 0.0f;
        if (t < T && d < hs) v = src[((size_t)b * T + t) * stride + col + d];
        dst[r * (D + 1) + d] = v;
    }
}

__device__ __forceinline__ static float row8_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 4));
}
__device__ __forceinline__ static float row8_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x + __shfl_xor_sync(0xffffffffu, x, 4);
}

/* lse_s[r] and drow_s[r] = sum_d dout[r][d] * out[r][d] for the query tile at
 * q0 (dOs already in shared memory); 0 past T. */
template <int D>
__device__ static void load_row_stats(float *lse_s, float *drow_s, const float *dOs,
                                      const float *out, const float *lse, int b, int bh, int q0,
                                      int T, int C, size_t col, int hs) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = warp; r < ATT_TILE; r += ATT_THREADS / 32) {
        int q = q0 + r;
        float acc = 0.0f;
        if (q < T)
            for (int d = lane; d < hs; d += 32)
                acc += dOs[r * (D + 1) + d] * out[((size_t)b * T + q) * C + col + d];
        acc = ts_warp_sum(acc);
        if (lane == 0) {
            drow_s[r] = acc;
            lse_s[r] = q < T ? lse[(size_t)bh * T + q] : 0.0f;
        }
    }
}

template <int D>
__global__ static void __launch_bounds__(ATT_THREADS)
    attention_forward_kernel(float *out, float *lse, const float *qkv, int T, int C, int NH,
                             float scale) {
    constexpr int DP = D + 1, DJ = D / 8;
    extern __shared__ float smem[];
    float *Qs = smem, *Ks = Qs + ATT_TILE * DP, *Vs = Ks + ATT_TILE * DP;
    float *Ps = Vs + ATT_TILE * DP;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH;
    int q0 = (gridDim.x - 1 - blockIdx.x) * ATT_TILE; /* the longest rows first */
    int lane = threadIdx.x % 32, tx = lane & 7, ty = (threadIdx.x / 32) * 4 + (lane >> 3);
    size_t C3 = 3 * (size_t)C, hcol = (size_t)h * hs;

    load_tile<D>(Qs, qkv, b, q0, T, C3, hcol, hs);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[2][DJ];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < DJ; j++)
            o[i][j] = 0.0f;

    int k_end = min(q0 + ATT_TILE, T);
    for (int k0 = 0; k0 < k_end; k0 += ATT_TILE) {
        __syncthreads();
        load_tile<D>(Ks, qkv, b, k0, T, C3, C + hcol, hs);
        load_tile<D>(Vs, qkv, b, k0, T, C3, 2 * (size_t)C + hcol, hs);
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
                s[i][j] = kj > qi || kj >= T ? -INFINITY : s[i][j] * scale;
                mx = fmaxf(mx, s[i][j]);
            }
            /* key k0 <= qi is always unmasked, so m_new is finite */
            float m_new = fmaxf(m[i], row8_max(mx));
            float corr = expf(m[i] - m_new), ps = 0.0f;
            for (int j = 0; j < 4; j++) {
                float p = expf(s[i][j] - m_new);
                Ps[(ty * 2 + i) * ATT_SP + tx + 8 * j] = p;
                ps += p;
            }
            l[i] = l[i] * corr + row8_sum(ps);
            m[i] = m_new;
            for (int j = 0; j < DJ; j++)
                o[i][j] *= corr;
        }
        __syncthreads();
        for (int c = 0; c < ATT_TILE; c++) {
            float p0 = Ps[(ty * 2) * ATT_SP + c], p1 = Ps[(ty * 2 + 1) * ATT_SP + c];
            for (int j = 0; j < DJ; j++) {
                float v = Vs[c * DP + tx + 8 * j];
                o[0][j] += p0 * v;
                o[1][j] += p1 * v;
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        int q = q0 + ty * 2 + i;
        if (q >= T) continue;
        float inv = 1.0f / l[i];
        float *orow = out + ((size_t)b * T + q) * C + hcol;
        for (int j = 0; j < DJ; j++) {
            int d = tx + 8 * j;
            if (d < hs) orow[d] = o[i][j] * inv;
        }
        if (tx == 0) lse[(size_t)bh * T + q] = m[i] + logf(l[i]);
    }
}

/* P and dS of the (query tile, key tile) pair for the thread's 2 x 4 entries:
 * P = exp(s * scale - lse) (0 where masked), dS = P (dP - Drow) scale. */
template <int D>
__device__ static void pair_grads(float p[2][4], float ds[2][4], const float *Qs, const float *dOs,
                                  const float *Ks, const float *Vs, const float *lse_s,
                                  const float *drow_s, int q0, int k0, int T, float scale, int tx,
                                  int ty) {
    constexpr int DP = D + 1;
    float s[2][4], dp[2][4];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 4; j++)
            s[i][j] = dp[i][j] = 0.0f;
    for (int d = 0; d < D; d++) {
        float q[2], g[2], k[4], v[4];
        for (int i = 0; i < 2; i++) {
            q[i] = Qs[(ty * 2 + i) * DP + d];
            g[i] = dOs[(ty * 2 + i) * DP + d];
        }
        for (int j = 0; j < 4; j++) {
            k[j] = Ks[(tx + 8 * j) * DP + d];
            v[j] = Vs[(tx + 8 * j) * DP + d];
        }
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++) {
                s[i][j] += q[i] * k[j];
                dp[i][j] += g[i] * v[j];
            }
    }
    for (int i = 0; i < 2; i++) {
        int r = ty * 2 + i, qi = q0 + r;
        for (int j = 0; j < 4; j++) {
            int kj = k0 + tx + 8 * j;
            float pij = qi >= T || kj >= T || kj > qi ? 0.0f : expf(s[i][j] * scale - lse_s[r]);
            p[i][j] = pij;
            ds[i][j] = pij * (dp[i][j] - drow_s[r]) * scale;
        }
    }
}

/* One block per key tile: dk, dv (+=) over the query tiles at or after it. */
template <int D>
__global__ static void __launch_bounds__(ATT_THREADS)
    attention_dkv_kernel(float *dqkv, const float *dout, const float *qkv, const float *out,
                         const float *lse, int T, int C, int NH, float scale) {
    constexpr int DP = D + 1, DJ = D / 8;
    extern __shared__ float smem[];
    float *Ks = smem, *Vs = Ks + ATT_TILE * DP, *Qs = Vs + ATT_TILE * DP;
    float *dOs = Qs + ATT_TILE * DP, *Ps = dOs + ATT_TILE * DP, *dSs = Ps + ATT_TILE * ATT_SP;
    float *lse_s = dSs + ATT_TILE * ATT_SP, *drow_s = lse_s + ATT_TILE;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH;
    int k0 = blockIdx.x * ATT_TILE;
    int lane = threadIdx.x % 32, tx = lane & 7, ty = (threadIdx.x / 32) * 4 + (lane >> 3);
    size_t C3 = 3 * (size_t)C, hcol = (size_t)h * hs;

    load_tile<D>(Ks, qkv, b, k0, T, C3, C + hcol, hs);
    load_tile<D>(Vs, qkv, b, k0, T, C3, 2 * (size_t)C + hcol, hs);
    float dk[2][DJ], dv[2][DJ];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < DJ; j++)
            dk[i][j] = dv[i][j] = 0.0f;

    for (int q0 = k0; q0 < T; q0 += ATT_TILE) {
        __syncthreads();
        load_tile<D>(Qs, qkv, b, q0, T, C3, hcol, hs);
        load_tile<D>(dOs, dout, b, q0, T, (size_t)C, hcol, hs);
        __syncthreads();
        load_row_stats<D>(lse_s, drow_s, dOs, out, lse, b, bh, q0, T, C, hcol, hs);
        __syncthreads();
        float p[2][4], ds[2][4];
        pair_grads<D>(p, ds, Qs, dOs, Ks, Vs, lse_s, drow_s, q0, k0, T, scale, tx, ty);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++) {
                Ps[(ty * 2 + i) * ATT_SP + tx + 8 * j] = p[i][j];
                dSs[(ty * 2 + i) * ATT_SP + tx + 8 * j] = ds[i][j];
            }
        __syncthreads();
        /* this thread's key rows 2ty, 2ty+1: sum over the tile's queries */
        for (int r = 0; r < ATT_TILE; r++) {
            float p0 = Ps[r * ATT_SP + ty * 2], p1 = Ps[r * ATT_SP + ty * 2 + 1];
            float s0 = dSs[r * ATT_SP + ty * 2], s1 = dSs[r * ATT_SP + ty * 2 + 1];
            for (int j = 0; j < DJ; j++) {
                float g = dOs[r * DP + tx + 8 * j], q = Qs[r * DP + tx + 8 * j];
                dv[0][j] += p0 * g;
                dv[1][j] += p1 * g;
                dk[0][j] += s0 * q;
                dk[1][j] += s1 * q;
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        int k = k0 + ty * 2 + i;
        if (k >= T) continue;
        float *row = dqkv + ((size_t)b * T + k) * C3 + hcol;
        for (int j = 0; j < DJ; j++) {
            int d = tx + 8 * j;
            if (d >= hs) continue;
            row[C + d] += dk[i][j];
            row[2 * (size_t)C + d] += dv[i][j];
        }
    }
}

/* One block per query tile: dq (+=) over the key tiles at or before it. */
template <int D>
__global__ static void __launch_bounds__(ATT_THREADS)
    attention_dq_kernel(float *dqkv, const float *dout, const float *qkv, const float *out,
                        const float *lse, int T, int C, int NH, float scale) {
    constexpr int DP = D + 1, DJ = D / 8;
    extern __shared__ float smem[];
    float *Qs = smem, *dOs = Qs + ATT_TILE * DP, *Ks = dOs + ATT_TILE * DP;
    float *Vs = Ks + ATT_TILE * DP, *dSs = Vs + ATT_TILE * DP;
    float *lse_s = dSs + ATT_TILE * ATT_SP, *drow_s = lse_s + ATT_TILE;
    int bh = blockIdx.y, b = bh / NH, h = bh % NH, hs = C / NH;
    int q0 = (gridDim.x - 1 - blockIdx.x) * ATT_TILE;
    int lane = threadIdx.x % 32, tx = lane & 7, ty = (threadIdx.x / 32) * 4 + (lane >> 3);
    size_t C3 = 3 * (size_t)C, hcol = (size_t)h * hs;

    load_tile<D>(Qs, qkv, b, q0, T, C3, hcol, hs);
    load_tile<D>(dOs, dout, b, q0, T, (size_t)C, hcol, hs);
    __syncthreads();
    load_row_stats<D>(lse_s, drow_s, dOs, out, lse, b, bh, q0, T, C, hcol, hs);
    float dq[2][DJ];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < DJ; j++)
            dq[i][j] = 0.0f;

    int k_end = min(q0 + ATT_TILE, T);
    for (int k0 = 0; k0 < k_end; k0 += ATT_TILE) {
        __syncthreads();
        load_tile<D>(Ks, qkv, b, k0, T, C3, C + hcol, hs);
        load_tile<D>(Vs, qkv, b, k0, T, C3, 2 * (size_t)C + hcol, hs);
        __syncthreads();
        float p[2][4], ds[2][4];
        pair_grads<D>(p, ds, Qs, dOs, Ks, Vs, lse_s, drow_s, q0, k0, T, scale, tx, ty);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++)
                dSs[(ty * 2 + i) * ATT_SP + tx + 8 * j] = ds[i][j];
        __syncthreads();
        for (int c = 0; c < ATT_TILE; c++) {
            float s0 = dSs[(ty * 2) * ATT_SP + c], s1 = dSs[(ty * 2 + 1) * ATT_SP + c];
            for (int j = 0; j < DJ; j++) {
                float k = Ks[c * DP + tx + 8 * j];
                dq[0][j] += s0 * k;
                dq[1][j] += s1 * k;
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        int q = q0 + ty * 2 + i;
        if (q >= T) continue;
        float *row = dqkv + ((size_t)b * T + q) * C3 + hcol;
        for (int j = 0; j < DJ; j++) {
            int d = tx + 8 * j;
            if (d < hs) row[d] += dq[i][j];
        }
    }
}

/* Shared-memory bytes of each kernel for width D. */
static size_t fwd_smem(int D) {
    return sizeof(float) * (3 * ATT_TILE * (D + 1) + ATT_TILE * ATT_SP);
}
static size_t dkv_smem(int D) {
    return sizeof(float) * (4 * ATT_TILE * (D + 1) + 2 * ATT_TILE * ATT_SP + 2 * ATT_TILE);
}
static size_t dq_smem(int D) {
    return sizeof(float) * (4 * ATT_TILE * (D + 1) + ATT_TILE * ATT_SP + 2 * ATT_TILE);
}

static ts_status check_shape(const char *kernel, int B, int T, int C, int NH) {
    if (B < 0 || T <= 0 || C <= 0 || NH <= 0 || C % NH || C / NH > 128 || (long)B * NH > 65535)
        return ts_error(TS_ERR_INVALID,
                        "cuda: %s: bad shape B=%d T=%d C=%d NH=%d (need C %% NH == 0, "
                        "C/NH <= 128, B*NH <= 65535)",
                        kernel, B, T, C, NH);
    return TS_OK;
}

template <int D>
static ts_status forward_d(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
    size_t sm = fwd_smem(D);
    TS_CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    dim3 grid((unsigned)((T + ATT_TILE - 1) / ATT_TILE), (unsigned)(B * NH));
    float scale = 1.0f / sqrtf((float)(C / NH));
    attention_forward_kernel<D>
        <<<grid, ATT_THREADS, sm, ts_cuda_cur_stream()>>>(out, lse, qkv, T, C, NH, scale);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

template <int D>
static ts_status backward_d(float *dqkv, const float *dout, const float *qkv, const float *out,
                            const float *lse, int B, int T, int C, int NH) {
    size_t sm_kv = dkv_smem(D), sm_q = dq_smem(D);
    TS_CUDA_CHECK(cudaFuncSetAttribute(attention_dkv_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_kv));
    TS_CUDA_CHECK(cudaFuncSetAttribute(attention_dq_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm_q));
    dim3 grid((unsigned)((T + ATT_TILE - 1) / ATT_TILE), (unsigned)(B * NH));
    float scale = 1.0f / sqrtf((float)(C / NH));
    cudaStream_t s = ts_cuda_cur_stream();
    attention_dkv_kernel<D>
        <<<grid, ATT_THREADS, sm_kv, s>>>(dqkv, dout, qkv, out, lse, T, C, NH, scale);
    TS_CUDA_CHECK_LAUNCH();
    attention_dq_kernel<D>
        <<<grid, ATT_THREADS, sm_q, s>>>(dqkv, dout, qkv, out, lse, T, C, NH, scale);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                    int NH) {
    TS_TRY(check_shape("ts_cuda_attention_forward", B, T, C, NH));
    if (!B) return TS_OK;
    int hs = C / NH;
    if (hs <= 32) return forward_d<32>(out, lse, qkv, B, T, C, NH);
    if (hs <= 64) return forward_d<64>(out, lse, qkv, B, T, C, NH);
    return forward_d<128>(out, lse, qkv, B, T, C, NH);
}

ts_status ts_cuda_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                     const float *out, const float *lse, int B, int T, int C,
                                     int NH) {
    TS_TRY(check_shape("ts_cuda_attention_backward", B, T, C, NH));
    if (!B) return TS_OK;
    int hs = C / NH;
    if (hs <= 32) return backward_d<32>(dqkv, dout, qkv, out, lse, B, T, C, NH);
    if (hs <= 64) return backward_d<64>(dqkv, dout, qkv, out, lse, B, T, C, NH);
    return backward_d<128>(dqkv, dout, qkv, out, lse, B, T, C, NH);
}
