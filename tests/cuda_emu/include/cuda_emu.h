/*
 * cuda_emu.h — just enough of CUDA's device side to run tessera's .cu files
 * on the host, thread by thread, where no GPU exists (tests/cuda_emu/). The
 * sources are first rewritten by cu2cc.py (launches, shared memory); the
 * headers beside this one stand in for the CUDA runtime, cuBLAS, <mma.h>
 * and <cuda_bf16.h>.
 *
 * Execution. emu_launch runs a grid one block at a time. Each thread of the
 * block is a coroutine (ucontext) on its own stack. The scheduler runs every
 * runnable thread, in order, until it reaches a barrier — a block barrier
 * (__syncthreads) or a warp barrier (__syncwarp, each warp shuffle, each
 * WMMA store) — then releases each warp whose live lanes all wait at a warp
 * barrier and the block once all its live threads wait at a block barrier,
 * and goes round again. A thread that has returned counts as arrived at a
 * block barrier; a warp barrier with a returned lane, and any state where
 * nothing can be released (lanes of one warp waiting at different kinds of
 * barrier, a barrier some threads never reach), fail the test: on the
 * hardware they are undefined or hang. Since threads run one after another
 * between barriers, a read of what another thread writes without a barrier
 * in between sees the old value for the earlier threads: missing barriers
 * show up as wrong results.
 *
 * Launches are checked as the hardware would refuse them: at most 1024
 * threads, grid.y and grid.z at most 65535, and dynamic shared memory above
 * 48 KiB only after cudaFuncSetAttribute raised the kernel's limit, never
 * above 163 KiB (what an sm_80 block may have, the smaller of our two
 * targets). A refused launch sets the error cudaGetLastError returns.
 * Shared memory is poisoned with NaN bytes before each block.
 *
 * WMMA (nvcuda::wmma, 16x16x16, bf16 inputs, f32 accumulators): each lane
 * holds the whole 16x16 tile of its fragment and computes every operation
 * itself. store_matrix_sync is a warp collective: it begins with a warp
 * barrier (every lane's earlier loads are done), only the warp's lane 0
 * stores, and the store lands when the warp next passes a barrier; so a lane that
 * loads before its neighbours' plain writes leaves its stale result in
 * memory, and a lane that reads a stored tile without a barrier reads the
 * old values. Loads and stores check the pointer's 256-bit alignment and
 * that ldm is a multiple of 16 bytes. Products accumulate in f32 in k order.
 *
 * What it cannot show: speed, occupancy and register limits, races between
 * blocks (they run one after another), and the hardware's own rounding
 * inside a tensor-core product (it accumulates exactly as the loop below).
 */
#ifndef TESSERA_TESTS_CUDA_EMU_H
#define TESSERA_TESTS_CUDA_EMU_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tessera/tessera.h"

#ifndef __CUDACC__
#define __CUDACC__ 1 /* cuda_common.h's device helpers */
#endif
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
extern dim3 threadIdx, blockIdx, blockDim, gridDim;

void emu_fail(const char *what);

/* --- synchronisation ------------------------------------------------------ */
void emu_block_barrier(void);
void emu_warp_barrier(void);
/* this thread's index within its block, x fastest */
static inline unsigned emu_tid(void) {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
static inline void __syncthreads(void) {
    emu_block_barrier();
}
static inline void __syncwarp(unsigned mask = 0xffffffffu) {
    if (mask != 0xffffffffu) emu_fail("__syncwarp with a partial mask is not emulated");
    emu_warp_barrier();
}
/* A shuffle: write, warp barrier, read. Consecutive shuffles alternate
 * between two banks of slots, so one barrier each is enough: a lane can only
 * write a bank again after every lane has passed the barrier that follows
 * the other bank's reads. */
extern double emu_lane_slot[2][1024];
extern unsigned char emu_lane_bank[1024];
template <class T> static inline T emu_shfl(T v, unsigned from_lane) {
    unsigned t = emu_tid(), b = emu_lane_bank[t];
    emu_lane_bank[t] = (unsigned char)(b ^ 1u);
    emu_lane_slot[b][t] = (double)v;
    emu_warp_barrier();
    return (T)emu_lane_slot[b][(t & ~31u) | (from_lane & 31u)];
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int m) {
    (void)mask;
    return emu_shfl(v, (emu_tid() & 31u) ^ (unsigned)m);
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int lane) {
    (void)mask;
    return emu_shfl(v, (unsigned)lane);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d) {
    (void)mask;
    unsigned lane = emu_tid() & 31u;
    return emu_shfl(v, lane + d < 32 ? lane + d : lane);
}

/* --- arithmetic intrinsics ------------------------------------------------ */
static inline unsigned __float_as_uint(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}
static inline float __uint_as_float(unsigned u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline int min(int a, int b) {
    return a < b ? a : b;
}
static inline int max(int a, int b) {
    return a > b ? a : b;
}
static inline size_t min(size_t a, size_t b) {
    return a < b ? a : b;
}

/* --- bf16 ----------------------------------------------------------------- */
struct __nv_bfloat16 {
    uint16_t bits;
};
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    __nv_bfloat16 h = {ts_f32_to_bf16(f)};
    return h;
}
static inline float __bfloat162float(__nv_bfloat16 h) {
    return ts_bf16_to_f32(h.bits);
}

/* --- launches ------------------------------------------------------------- */
void *emu_dynamic_smem(void);
/* Runs fn() as every thread of grid x block after checking the launch
 * (above); `kernel` identifies the kernel for its shared-memory limit. */
void emu_launch_run(dim3 grid, dim3 block, size_t smem, const void *kernel, void (*fn)(void *),
                    void *arg);
template <class F>
static inline void emu_launch(dim3 grid, dim3 block, size_t smem, const void *kernel, F body) {
    emu_launch_run(
        grid, block, smem, kernel, [](void *p) { (*(F *)p)(); }, &body);
}

/* --- WMMA ----------------------------------------------------------------- */
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
    float x[16][16]; /* the whole tile, (row, column) */
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
static inline void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, row_major> &f,
                                    const __nv_bfloat16 *p, unsigned ldm) {
    emu_check(p, ldm, 2);
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r][c] = __bfloat162float(p[(size_t)r * ldm + c]);
}
/* B (k, n): row-major at p[k * ldm + n], column-major at p[n * ldm + k] */
static inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, row_major> &f,
                                    const __nv_bfloat16 *p, unsigned ldm) {
    emu_check(p, ldm, 2);
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 16; n++)
            f.x[k][n] = __bfloat162float(p[(size_t)k * ldm + n]);
}
static inline void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, col_major> &f,
                                    const __nv_bfloat16 *p, unsigned ldm) {
    emu_check(p, ldm, 2);
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 16; n++)
            f.x[k][n] = __bfloat162float(p[(size_t)n * ldm + k]);
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
    emu_warp_barrier();
    if ((emu_tid() & 31u) == 0) emu_store_later(p, ldm, layout == mem_col_major, f.x);
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
    memcpy(d.x, out, sizeof out);
}
} // namespace wmma
} // namespace nvcuda

#endif /* TESSERA_TESTS_CUDA_EMU_H */
