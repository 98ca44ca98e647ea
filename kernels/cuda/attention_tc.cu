/*
 * attention_tc.cu — causal multi-head self-attention on tensor cores, for the
 * model's bf16 mode: the flash scheme of attention.cu (online softmax, the
 * (T, T) matrix never stored, lse saved, two backward kernels with one writer
 * per element of dqkv) with every product Q K^T, P V, dO V^T, dS K, dS^T Q,
 * P^T dO issued as 16x16x16 bf16 WMMA operations accumulating in f32
 * (nvcuda::wmma, sm_80 and later).
 *
 * What is rounded to bf16: q, k, v and dout as they are loaded (in bf16 mode
 * the model's activations are bf16 values already, so this is exact for
 * them), and the probabilities P and the score gradients dS as they enter a
 * product. Row maxima, sums, lse, the D = rowsum(dout * out) terms and every
 * accumulator stay f32; out and dqkv are f32.
 *
 * Tiles: 64 query rows x 64 keys per step, 4 warps, each owning 16 rows (the
 * forward and dq: query rows; dk/dv: key rows) of every per-tile matrix, so
 * a warp's softmax and its accumulator updates need only __syncwarp; the
 * block synchronises only around the shared K/V (or Q/dO) tile loads. The
 * accumulators (O, dQ, dK, dV) live in shared memory as f32 and are loaded
 * into WMMA accumulator fragments for each product, which keeps the online
 * softmax's per-row rescaling independent of the fragments' register layout.
 * Head sizes up to 64 are padded with zeros to D in {32, 64}; larger heads
 * use the f32 kernels of attention.cu.
 *
 * Reference: T. Dao, "FlashAttention-2: Faster Attention with Better
 * Parallelism and Work Partitioning", 2023 (Algorithms 1 and 2).
 */
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include "cuda_common.h"

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

#define TC_ROWS 64           /* query rows and keys per tile            */
#define TC_THREADS 128       /* 4 warps x 16 rows                     */
#define TC_LDS (TC_ROWS + 4) /* f32 (64 x 64) score tiles: ldm multiple of 4 */
#define TC_LDP (TC_ROWS + 8) /* bf16 (64 x 64) P / dS tiles: ldm multiple of 8 */

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_frag;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a_frag;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> b_row_frag;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b_col_frag;

/* Shared-memory carving: every buffer starts on a 128-byte boundary (WMMA
 * wants 256-bit aligned pointers; every fragment offset below is a multiple
 * of 16 rows and 16 columns, which keeps that). */
__host__ __device__ constexpr size_t tc_align(size_t bytes) {
    return (bytes + 127) / 128 * 128;
}
template <int D> __host__ __device__ constexpr int tc_ldb() {
    return D + 8; /* bf16 (64 x D) tiles */
}
template <int D> __host__ __device__ constexpr int tc_ldo() {
    return D + 4; /* f32 (64 x D) accumulators */
}
template <int D> __host__ __device__ constexpr size_t tc_tile_bytes() {
    return tc_align((size_t)TC_ROWS * tc_ldb<D>() * sizeof(bf16));
}
template <int D> __host__ __device__ constexpr size_t tc_acc_bytes() {
    return tc_align((size_t)TC_ROWS * tc_ldo<D>() * sizeof(float));
}
__host__ __device__ constexpr size_t tc_s_bytes() {
    return tc_align((size_t)TC_ROWS * TC_LDS * sizeof(float));
}
__host__ __device__ constexpr size_t tc_p_bytes() {
    return tc_align((size_t)TC_ROWS * TC_LDP * sizeof(bf16));
}
__host__ __device__ constexpr size_t tc_row_bytes() {
    return tc_align(TC_ROWS * sizeof(float));
}
/* forward: Q, K, V tiles, S, P, O, and alpha, m, l per row */
template <int D> constexpr size_t tc_fwd_smem() {
    return 3 * tc_tile_bytes<D>() + tc_s_bytes() + tc_p_bytes() + tc_acc_bytes<D>() +
           3 * tc_row_bytes();
}
/* backward (either kernel): Q, dO, K, V tiles, S, P/dS, two accumulators,
 * lse and D per row */
template <int D> constexpr size_t tc_bwd_smem() {
    return 4 * tc_tile_bytes<D>() + tc_s_bytes() + tc_p_bytes() + 2 * tc_acc_bytes<D>() +
           2 * tc_row_bytes();
}

/* rows [t0, t0 + 64) of a (B, T, stride) f32 tensor, columns [col, col + hs),
 * rounded to bf16 into dst (64 x ldb); zero past T and past hs. */
template <int D>
__device__ static void tc_load(bf16 *dst, const float *src, int b, int t0, int T, size_t stride,
                               size_t col, int hs) {
    for (int i = threadIdx.x; i < TC_ROWS * D; i += TC_THREADS) {
        int r = i / D, d = i % D, t = t0 + r;
        float v = 0.0f;
        if (t < T && d < hs) v = src[((size_t)b * T + t) * stride + col + d];
        dst[r * tc_ldb<D>() + d] = __float2bfloat16_rn(v);
    }
}

/* lse_s[r] and drow_s[r] = sum_d dout[q][d] * out[q][d] (f32, from global
 * memory) for the 64 query rows at q0; 0 past T. One warp per row. */
__device__ static void tc_row_stats(float *lse_s, float *drow_s, const float *dout,
                                    const float *out, const float *lse, int b, int bh, int q0,
                                    int T, int C, size_t col, int hs) {
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int r = warp; r < TC_ROWS; r += TC_THREADS / 32) {
        int q = q0 + r;
        float acc = 0.0f;
        if (q < T) {
            const float *o = out + ((size_t)b * T + q) * C + col;
            const float *g = dout + ((size_t)b * T + q) * C + col;
            for (int d = lane; d < hs; d += 32)
                acc += g[d] * o[d];
        }
        acc = ts_warp_sum(acc);
        if (lane == 0) {
            drow_s[r] = acc;
            lse_s[r] = q < T ? lse[(size_t)bh * T + q] : 0.0f;
        }
    }
}

/* out (16 x 64, f32, ldm TC_LDS) = A (16 x D, row-major) @ B^T, where B is
 * (64 x D) row-major: the products Q K^T, K Q^T, dO V^T, V dO^T. */
template <int D> __device__ static void tc_abt(float *out, const bf16 *A, const bf16 *B) {
    for (int n = 0; n < TC_ROWS / 16; n++) {
        acc_frag acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < D / 16; k++) {
            a_frag a;
            b_col_frag bt;
            wmma::load_matrix_sync(a, A + k * 16, tc_ldb<D>());
            wmma::load_matrix_sync(bt, B + (size_t)n * 16 * tc_ldb<D>() + k * 16, tc_ldb<D>());
            wmma::mma_sync(acc, a, bt, acc);
        }
        wmma::store_matrix_sync(out + n * 16, acc, TC_LDS, wmma::mem_row_major);
    }
}

/* acc (16 x D, f32, ldm tc_ldo) += A (16 x 64, bf16, ldm TC_LDP) @ B, where B
 * is (64 x D) row-major: the products P V, P^T dO, dS K, dS^T Q. */
template <int D> __device__ static void tc_acc_ab(float *acc_s, const bf16 *A, const bf16 *B) {
    for (int n = 0; n < D / 16; n++) {
        acc_frag acc;
        wmma::load_matrix_sync(acc, acc_s + n * 16, tc_ldo<D>(), wmma::mem_row_major);
        for (int k = 0; k < TC_ROWS / 16; k++) {
            a_frag a;
            b_row_frag b;
            wmma::load_matrix_sync(a, A + k * 16, TC_LDP);
            wmma::load_matrix_sync(b, B + (size_t)k * 16 * tc_ldb<D>() + n * 16, tc_ldb<D>());
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(acc_s + n * 16, acc, tc_ldo<D>(), wmma::mem_row_major);
    }
}

/* Where a block and a thread work: batch x head bh = (b, h) from blockIdx.y,
 * head size hs, the lane, the first of the warp's 16 rows w0, the row stride
 * of qkv (3C) and the head's first column hcol. */
struct tc_where {
    int bh, b, h, hs, lane, w0;
    size_t C3, hcol;
    __device__ tc_where(int C, int NH) {
        bh = blockIdx.y;
        b = bh / NH;
        h = bh % NH;
        hs = C / NH;
        lane = threadIdx.x % 32;
        w0 = (threadIdx.x / 32) * 16;
        C3 = 3 * (size_t)C;
        hcol = (size_t)h * hs;
    }
};

/* ---------------------------------------------------------------------------
 * Forward: one block per (64 query rows, batch x head), the longest rows first.
 * ------------------------------------------------------------------------- */
template <int D>
__global__ static void __launch_bounds__(TC_THREADS)
    tc_forward_kernel(float *out, float *lse, const float *qkv, int T, int C, int NH, float scale) {
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem;
    bf16 *Ks = (bf16 *)(smem + tc_tile_bytes<D>());
    bf16 *Vs = (bf16 *)(smem + 2 * tc_tile_bytes<D>());
    float *S = (float *)(smem + 3 * tc_tile_bytes<D>());
    bf16 *P = (bf16 *)((unsigned char *)S + tc_s_bytes());
    float *O = (float *)((unsigned char *)P + tc_p_bytes());
    float *alpha = (float *)((unsigned char *)O + tc_acc_bytes<D>());
    float *mrow = (float *)((unsigned char *)alpha + tc_row_bytes());
    float *lrow = (float *)((unsigned char *)mrow + tc_row_bytes());
    constexpr int LDO = tc_ldo<D>();

    tc_where at(C, NH);
    int bh = at.bh, b = at.b, hs = at.hs, lane = at.lane, w0 = at.w0;
    size_t C3 = at.C3, hcol = at.hcol;
    int q0 = (gridDim.x - 1 - blockIdx.x) * TC_ROWS;

    tc_load<D>(Qs, qkv, b, q0, T, C3, hcol, hs);
    for (int i = threadIdx.x; i < TC_ROWS * LDO; i += TC_THREADS)
        O[i] = 0.0f;
    if (threadIdx.x < TC_ROWS) {
        mrow[threadIdx.x] = -INFINITY;
        lrow[threadIdx.x] = 0.0f;
    }
    /* This lane's share of its warp's rows: row r, 32 columns from c0. */
    int r = w0 + (lane >> 1), c0 = (lane & 1) * 32, q = q0 + r;

    int k_end = min(q0 + TC_ROWS, T);
    for (int k0 = 0; k0 < k_end; k0 += TC_ROWS) {
        __syncthreads();
        tc_load<D>(Ks, qkv, b, k0, T, C3, C + hcol, hs);
        tc_load<D>(Vs, qkv, b, k0, T, C3, 2 * (size_t)C + hcol, hs);
        __syncthreads();
        tc_abt<D>(S + w0 * TC_LDS, Qs + (size_t)w0 * tc_ldb<D>(), Ks);
        __syncwarp();
        /* Online softmax over this tile's columns (causal, and nothing past T). */
        float s[32], mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < 32; j++) {
            int k = k0 + c0 + j;
            s[j] = (k <= q && k < T) ? S[r * TC_LDS + c0 + j] * scale : -INFINITY;
            mx = fmaxf(mx, s[j]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        float m_old = mrow[r], m_new = fmaxf(m_old, mx), sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 32; j++) {
            float p = m_new == -INFINITY ? 0.0f : expf(s[j] - m_new);
            sum += p;
            P[r * TC_LDP + c0 + j] = __float2bfloat16_rn(p);
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        float a = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
        __syncwarp();
        if ((lane & 1) == 0) {
            mrow[r] = m_new;
            lrow[r] = lrow[r] * a + sum;
            alpha[r] = a;
        }
        __syncwarp();
        for (int i = lane; i < 16 * D; i += 32) {
            int rr = w0 + i / D;
            O[rr * LDO + i % D] *= alpha[rr];
        }
        __syncwarp();
        tc_acc_ab<D>(O + w0 * LDO, P + w0 * TC_LDP, Vs);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < TC_ROWS * hs; i += TC_THREADS) {
        int rr = i / hs, d = i % hs, qq = q0 + rr;
        if (qq < T) out[((size_t)b * T + qq) * C + hcol + d] = O[rr * LDO + d] / lrow[rr];
    }
    if (threadIdx.x < TC_ROWS && q0 + (int)threadIdx.x < T)
        lse[(size_t)bh * T + q0 + threadIdx.x] = mrow[threadIdx.x] + logf(lrow[threadIdx.x]);
}

/* The backward kernels' shared memory (tc_bwd_smem bytes): the Q, dO, K, V
 * tiles, a score tile S and its bf16 companion P (P or dS), two f32
 * accumulators (dK, dV; dq uses the first) and lse and D per query row. */
template <int D> struct tc_bwd_tiles {
    bf16 *Q, *dO, *K, *V, *P;
    float *S, *acc0, *acc1, *lse, *drow;
    __device__ explicit tc_bwd_tiles(unsigned char *smem) {
        Q = (bf16 *)smem;
        dO = (bf16 *)(smem + tc_tile_bytes<D>());
        K = (bf16 *)(smem + 2 * tc_tile_bytes<D>());
        V = (bf16 *)(smem + 3 * tc_tile_bytes<D>());
        S = (float *)(smem + 4 * tc_tile_bytes<D>());
        P = (bf16 *)((unsigned char *)S + tc_s_bytes());
        acc0 = (float *)((unsigned char *)P + tc_p_bytes());
        acc1 = (float *)((unsigned char *)acc0 + tc_acc_bytes<D>());
        lse = (float *)((unsigned char *)acc1 + tc_acc_bytes<D>());
        drow = (float *)((unsigned char *)lse + tc_row_bytes());
    }
};

/* ---------------------------------------------------------------------------
 * Backward, dk and dv: one block per (64 keys, batch x head); it walks the
 * query tiles at or after its keys. Warp w owns keys w0..w0+15 and computes
 * the transposed tiles S^T = K Q^T, P^T, dP^T = V dO^T, dS^T.
 * ------------------------------------------------------------------------- */
template <int D>
__global__ static void __launch_bounds__(TC_THREADS)
    tc_dkv_kernel(float *dqkv, const float *dout, const float *qkv, const float *out,
                  const float *lse, int T, int C, int NH, float scale) {
    extern __shared__ __align__(128) unsigned char smem[];
    tc_bwd_tiles<D> m(smem);
    bf16 *Qs = m.Q, *dOs = m.dO, *Ks = m.K, *Vs = m.V, *P = m.P;
    float *S = m.S, *dK = m.acc0, *dV = m.acc1, *lse_s = m.lse, *drow_s = m.drow;
    constexpr int LDO = tc_ldo<D>();

    tc_where at(C, NH);
    int bh = at.bh, b = at.b, hs = at.hs, lane = at.lane, w0 = at.w0;
    size_t C3 = at.C3, hcol = at.hcol;
    int k0 = blockIdx.x * TC_ROWS;

    tc_load<D>(Ks, qkv, b, k0, T, C3, C + hcol, hs);
    tc_load<D>(Vs, qkv, b, k0, T, C3, 2 * (size_t)C + hcol, hs);
    for (int i = threadIdx.x; i < TC_ROWS * LDO; i += TC_THREADS)
        dK[i] = dV[i] = 0.0f;
    /* This lane's share: key row r, query columns c0..c0+31. */
    int r = w0 + (lane >> 1), c0 = (lane & 1) * 32, key = k0 + r;

    for (int q0 = k0; q0 < T; q0 += TC_ROWS) {
        __syncthreads();
        tc_load<D>(Qs, qkv, b, q0, T, C3, hcol, hs);
        tc_load<D>(dOs, dout, b, q0, T, C, hcol, hs);
        tc_row_stats(lse_s, drow_s, dout, out, lse, b, bh, q0, T, C, hcol, hs);
        __syncthreads();
        tc_abt<D>(S + w0 * TC_LDS, Ks + (size_t)w0 * tc_ldb<D>(), Qs); /* S^T */
        __syncwarp();
        float p[32];
#pragma unroll
        for (int j = 0; j < 32; j++) {
            int c = c0 + j, qq = q0 + c;
            p[j] = (key <= qq && qq < T && key < T) ? expf(S[r * TC_LDS + c] * scale - lse_s[c])
                                                    : 0.0f;
            P[r * TC_LDP + c] = __float2bfloat16_rn(p[j]);
        }
        __syncwarp();
        tc_acc_ab<D>(dV + w0 * LDO, P + w0 * TC_LDP, dOs);              /* dV += P^T dO */
        tc_abt<D>(S + w0 * TC_LDS, Vs + (size_t)w0 * tc_ldb<D>(), dOs); /* dP^T */
        __syncwarp();
#pragma unroll
        for (int j = 0; j < 32; j++) {
            int c = c0 + j;
            P[r * TC_LDP + c] = __float2bfloat16_rn(p[j] * (S[r * TC_LDS + c] - drow_s[c]));
        }
        __syncwarp();
        tc_acc_ab<D>(dK + w0 * LDO, P + w0 * TC_LDP, Qs); /* dK += dS^T Q (unscaled) */
    }
    __syncthreads();
    for (int i = threadIdx.x; i < TC_ROWS * hs; i += TC_THREADS) {
        int rr = i / hs, d = i % hs, kk = k0 + rr;
        if (kk >= T) continue;
        float *g = dqkv + ((size_t)b * T + kk) * C3 + hcol + d;
        g[C] += scale * dK[rr * LDO + d];
        g[2 * (size_t)C] += dV[rr * LDO + d];
    }
}

/* ---------------------------------------------------------------------------
 * Backward, dq: one block per (64 query rows, batch x head), walking the key
 * tiles at or before them. Warp w owns query rows w0..w0+15.
 * ------------------------------------------------------------------------- */
template <int D>
__global__ static void __launch_bounds__(TC_THREADS)
    tc_dq_kernel(float *dqkv, const float *dout, const float *qkv, const float *out,
                 const float *lse, int T, int C, int NH, float scale) {
    extern __shared__ __align__(128) unsigned char smem[];
    tc_bwd_tiles<D> m(smem);
    bf16 *Qs = m.Q, *dOs = m.dO, *Ks = m.K, *Vs = m.V, *dS = m.P;
    float *S = m.S, *dQ = m.acc0, *lse_s = m.lse, *drow_s = m.drow;
    constexpr int LDO = tc_ldo<D>();

    tc_where at(C, NH);
    int bh = at.bh, b = at.b, hs = at.hs, lane = at.lane, w0 = at.w0;
    size_t C3 = at.C3, hcol = at.hcol;
    int q0 = (gridDim.x - 1 - blockIdx.x) * TC_ROWS;

    tc_load<D>(Qs, qkv, b, q0, T, C3, hcol, hs);
    tc_load<D>(dOs, dout, b, q0, T, C, hcol, hs);
    tc_row_stats(lse_s, drow_s, dout, out, lse, b, bh, q0, T, C, hcol, hs);
    for (int i = threadIdx.x; i < TC_ROWS * LDO; i += TC_THREADS)
        dQ[i] = 0.0f;
    int r = w0 + (lane >> 1), c0 = (lane & 1) * 32, q = q0 + r;

    int k_end = min(q0 + TC_ROWS, T);
    for (int k0 = 0; k0 < k_end; k0 += TC_ROWS) {
        __syncthreads();
        tc_load<D>(Ks, qkv, b, k0, T, C3, C + hcol, hs);
        tc_load<D>(Vs, qkv, b, k0, T, C3, 2 * (size_t)C + hcol, hs);
        __syncthreads();
        tc_abt<D>(S + w0 * TC_LDS, Qs + (size_t)w0 * tc_ldb<D>(), Ks); /* S */
        __syncwarp();
        float p[32];
#pragma unroll
        for (int j = 0; j < 32; j++) {
            int k = k0 + c0 + j;
            p[j] =
                (k <= q && k < T && q < T) ? expf(S[r * TC_LDS + c0 + j] * scale - lse_s[r]) : 0.0f;
        }
        __syncwarp();
        tc_abt<D>(S + w0 * TC_LDS, dOs + (size_t)w0 * tc_ldb<D>(), Vs); /* dP */
        __syncwarp();
#pragma unroll
        for (int j = 0; j < 32; j++) {
            int c = c0 + j;
            dS[r * TC_LDP + c] = __float2bfloat16_rn(p[j] * (S[r * TC_LDS + c] - drow_s[r]));
        }
        __syncwarp();
        tc_acc_ab<D>(dQ + w0 * LDO, dS + w0 * TC_LDP, Ks); /* dQ += dS K (unscaled) */
    }
    __syncthreads();
    for (int i = threadIdx.x; i < TC_ROWS * hs; i += TC_THREADS) {
        int rr = i / hs, d = i % hs, qq = q0 + rr;
        if (qq < T) dqkv[((size_t)b * T + qq) * C3 + hcol + d] += scale * dQ[rr * LDO + d];
    }
}

/* ---------------------------------------------------------------------------
 * Launchers
 * ------------------------------------------------------------------------- */
template <int D>
static ts_status tc_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH) {
    constexpr size_t sm = tc_fwd_smem<D>();
    TS_CUDA_CHECK(cudaFuncSetAttribute(tc_forward_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    dim3 grid((unsigned)((T + TC_ROWS - 1) / TC_ROWS), (unsigned)(B * NH));
    float scale = 1.0f / sqrtf((float)(C / NH));
    tc_forward_kernel<D>
        <<<grid, TC_THREADS, sm, ts_cuda_cur_stream()>>>(out, lse, qkv, T, C, NH, scale);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

template <int D>
static ts_status tc_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                             const float *lse, int B, int T, int C, int NH) {
    constexpr size_t sm = tc_bwd_smem<D>();
    TS_CUDA_CHECK(cudaFuncSetAttribute(tc_dkv_kernel<D>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm));
    TS_CUDA_CHECK(cudaFuncSetAttribute(tc_dq_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)sm));
    dim3 grid((unsigned)((T + TC_ROWS - 1) / TC_ROWS), (unsigned)(B * NH));
    float scale = 1.0f / sqrtf((float)(C / NH));
    cudaStream_t s = ts_cuda_cur_stream();
    tc_dkv_kernel<D><<<grid, TC_THREADS, sm, s>>>(dqkv, dout, qkv, out, lse, T, C, NH, scale);
    TS_CUDA_CHECK_LAUNCH();
    tc_dq_kernel<D><<<grid, TC_THREADS, sm, s>>>(dqkv, dout, qkv, out, lse, T, C, NH, scale);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T,
                                         int C, int NH) {
    TS_CUDA_REQUIRE(B >= 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0 && (long)B * NH <= 65535,
                    "ts_cuda_attention_forward_bf16");
    if (!B) return TS_OK;
    int hs = C / NH;
    if (hs <= 32) return tc_forward<32>(out, lse, qkv, B, T, C, NH);
    if (hs <= 64) return tc_forward<64>(out, lse, qkv, B, T, C, NH);
    return ts_cuda_attention_forward(out, lse, qkv, B, T, C, NH);
}

ts_status ts_cuda_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv,
                                          const float *out, const float *lse, int B, int T, int C,
                                          int NH) {
    TS_CUDA_REQUIRE(B >= 0 && T > 0 && C > 0 && NH > 0 && C % NH == 0 && (long)B * NH <= 65535,
                    "ts_cuda_attention_backward_bf16");
    if (!B) return TS_OK;
    int hs = C / NH;
    if (hs <= 32) return tc_backward<32>(dqkv, dout, qkv, out, lse, B, T, C, NH);
    if (hs <= 64) return tc_backward<64>(dqkv, dout, qkv, out, lse, B, T, C, NH);
    return ts_cuda_attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH);
}
