/*
 * cuda_emu.h — just enough of CUDA to run a .cu file's kernels on the host,
 * thread by thread, so that their indexing, masking, synchronisation and
 * WMMA use are checked on machines without a GPU (tests/cuda_emu/).
 *
 * A kernel is run one block at a time by emu_launch: each of the block's
 * threads is a coroutine (ucontext) on its own stack, and every
 * synchronisation point — __syncthreads, __syncwarp and each warp shuffle —
 * is a barrier of the whole block: the scheduler runs every thread up to its
 * next barrier, then the next round. That is stricter than the hardware
 * (a warp barrier waits for the block), which is only valid for kernels whose
 * threads all pass the same sequence of synchronisation points; emu_launch
 * checks that every thread did and fails otherwise.
 *
 * WMMA (nvcuda::wmma, 16x16x16, bf16 inputs, f32 accumulators): each lane
 * holds the whole 16x16 tile of its fragment and computes every operation by
 * itself. store_matrix_sync is a warp collective: it begins with a barrier
 * (every lane's earlier loads are done), only the warp's lane 0 stores, and
 * its store lands when the block next passes a synchronisation point. So
 * both missing __syncwarp hazards show up as wrong results: a lane that
 * loads before its neighbours' plain writes leaves its stale fragment in
 * memory (lane 0 runs first), and a lane that reads what a store wrote
 * without a barrier in between reads the old values. Loads and stores check
 * what the hardware requires (a 256-bit aligned pointer, ldm a multiple of
 * 16 bytes). Products accumulate in f32 in k order.
 *
 * Included first by a driver that then includes the .cu file with
 * TS_CUDA_EMULATION defined (the file leaves its host launchers out then);
 * this header stands in for cuda_common.h, <mma.h> and <cuda_bf16.h>.
 */
#ifndef TESSERA_TESTS_CUDA_EMU_H
#define TESSERA_TESTS_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <ucontext.h>

#include "tessera/tessera.h"

#define TS_CUDA_EMULATION 1
#define TESSERA_KERNELS_CUDA_COMMON_H /* the real cuda_common.h stays out */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))

struct emu_dim3 {
    unsigned x, y, z;
};
extern emu_dim3 threadIdx, blockIdx, blockDim, gridDim;

/* The synchronisation points (a barrier of the whole block, see above). */
void emu_barrier(void);
static inline void __syncthreads(void) {
    emu_barrier();
}
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    (void)mask;
    emu_barrier();
}
extern float emu_lane_slot[1024];
static inline float __shfl_xor_sync(unsigned mask, float v, int m) {
    (void)mask;
    unsigned t = threadIdx.x;
    emu_lane_slot[t] = v;
    emu_barrier();
    float r = emu_lane_slot[(t & ~31u) | ((t & 31u) ^ (unsigned)m)];
    emu_barrier();
    return r;
}
static inline float ts_warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
static inline int min(int a, int b) {
    return a < b ? a : b;
}

/* bf16 storage; conversions as ts_f32_to_bf16 (nearest, ties to even). */
struct __nv_bfloat16 {
    uint16_t bits;
};
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    __nv_bfloat16 h = {ts_f32_to_bf16(f)};
    return h;
}
static inline float emu_bf16_value(__nv_bfloat16 h) {
    return ts_bf16_to_f32(h.bits);
}

void emu_fail(const char *what);
/* A store: a barrier, then lane 0 queues the tile, written by the scheduler
 * once every thread has reached its next barrier (cuda_emu.cc). */
void emu_store_later(float *p, unsigned ldm, int col_major, const float (*x)[16]);

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 only");
    float x[16][16]; /* the whole tile, logical (row, column) */
};

static inline void emu_check(const void *p, unsigned ldm, size_t elem) {
    if ((uintptr_t)p % 32) emu_fail("wmma: pointer not 256-bit aligned");
    if ((ldm * elem) % 16) emu_fail("wmma: ldm not a multiple of 16 bytes");
}

template <class F> static inline void fill_fragment(F &f, float v) {
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r][c] = v;
}
/* A (16 x 16) row-major; B (k, n) row-major or column-major. */
static inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major> &f,
                                    const __nv_bfloat16 *p, unsigned ldm) {
    emu_check(p, ldm, 2);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r][c] = emu_bf16_value(p[(size_t)r * ldm + c]);
}
static inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, row_major> &f,
                                    const __nv_bfloat16 *p, unsigned ldm) {
    emu_check(p, ldm, 2);
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 16; n++)
            f.x[k][n] = emu_bf16_value(p[(size_t)k * ldm + n]);
}
static inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major> &f,
                                    const __nv_bfloat16 *p, unsigned ldm) {
    emu_check(p, ldm, 2);
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 16; n++)
            f.x[k][n] = emu_bf16_value(p[(size_t)n * ldm + k]);
}
static inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                                    unsigned ldm, layout_t layout) {
    emu_check(p, ldm, 4);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r][c] = layout == mem_row_major ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
}
static inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                                     unsigned ldm, layout_t layout) {
    emu_check(p, ldm, 4);
    emu_barrier();
    if ((threadIdx.x & 31u) == 0) emu_store_later(p, ldm, layout == mem_col_major, f.x);
}
template <class LB>
static inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                            const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major> &a,
                            const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                            const fragment<accumulator, 16, 16, 16, float> &c) {
    float out[16][16];
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++) {
            float acc = c.x[r][n];
            for (int k = 0; k < 16; k++)
                acc += a.x[r][k] * b.x[k][n];
            out[r][n] = acc;
        }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 16; n++)
            d.x[r][n] = out[r][n];
}
} // namespace wmma
} // namespace nvcuda

/* Runs body() as every thread of a (grid.x, grid.y) x block grid, one block
 * at a time, with `smem_bytes` of the driver's shared-memory array `smem`
 * poisoned with NaN bytes before each block. Fails (emu_fail) if the threads
 * of a block pass different numbers of synchronisation points. */
void emu_launch(emu_dim3 grid, unsigned block, size_t smem_bytes, void (*body)(void *), void *arg);

#endif /* TESSERA_TESTS_CUDA_EMU_H */
