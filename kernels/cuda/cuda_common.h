/*
 * cuda_common.h — private helpers shared by the .cu files of kernels/cuda/:
 * the error macros that turn a CUDA or cuBLAS failure into a ts_status with a
 * message naming the file, line and call, the stream and handle accessors,
 * and a few device helpers (warp sums, bf16 rounding, launch sizes).
 *
 * Not installed and not included by anything outside kernels/cuda/ and its
 * tests; the public API is cuda_kernels.h.
 */
#ifndef TESSERA_KERNELS_CUDA_COMMON_H
#define TESSERA_KERNELS_CUDA_COMMON_H

#include <cublas_v2.h>    /* cublasStatus_t, cublasHandle_t */
#include <cuda_runtime.h> /* cudaError_t, cudaStream_t, launches */
#include <stddef.h>
#include <stdint.h>

#include "cuda_kernels.h"

/* Records "cuda: FILE:LINE: CALL: NAME: message" as the last error and
 * returns TS_ERR_NOMEM for an allocation failure, else TS_ERR_INTERNAL. */
ts_status ts_cuda_error_at(cudaError_t err, const char *call, const char *file, int line);
ts_status ts_cublas_error_at(cublasStatus_t st, const char *call, const char *file, int line);

/* Evaluates a CUDA runtime / cuBLAS call; on failure returns its ts_status. */
#define TS_CUDA_CHECK(call)                                                                        \
    do {                                                                                           \
        cudaError_t ts_cuda_err_ = (call);                                                         \
        if (ts_cuda_err_ != cudaSuccess)                                                           \
            return ts_cuda_error_at(ts_cuda_err_, #call, __FILE__, __LINE__);                      \
    } while (0)
#define TS_CUBLAS_CHECK(call)                                                                      \
    do {                                                                                           \
        cublasStatus_t ts_cublas_st_ = (call);                                                     \
        if (ts_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                                \
            return ts_cublas_error_at(ts_cublas_st_, #call, __FILE__, __LINE__);                   \
    } while (0)
/* After a <<<...>>> launch: reports a failed launch (bad configuration, no
 * device, ...) at once. */
#define TS_CUDA_CHECK_LAUNCH() TS_CUDA_CHECK(cudaGetLastError())

/* Rejects a bad argument with a message naming the kernel. */
#define TS_CUDA_REQUIRE(cond, kernel)                                                              \
    do {                                                                                           \
        if (!(cond)) return ts_error(TS_ERR_INVALID, "cuda: %s: requires %s", kernel, #cond);      \
    } while (0)

/* The stream and handle of the context (context.cu). */
static inline cudaStream_t ts_cuda_cur_stream(void) {
    return (cudaStream_t)ts_cuda_stream();
}

/* Blocks for a grid-stride elementwise loop over n elements. */
static inline unsigned ts_cuda_blocks(size_t n, int threads) {
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    if (b > 65535u * 16u) b = 65535u * 16u; /* grid-stride covers the rest */
    return b ? (unsigned)b : 1u;
}

#ifdef __CUDACC__
/* Sum / max over the 32 lanes of a warp, butterfly order: every lane gets the
 * same bits. */
__device__ __forceinline__ float ts_warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float ts_warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
/* bf16 <-> f32 exactly as ts_f32_to_bf16 / ts_bf16_to_f32 (tessera.h). */
__device__ __forceinline__ uint16_t ts_dev_f32_to_bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return (uint16_t)((u >> 16) | 0x40u);
    uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)((u + rounding) >> 16);
}
__device__ __forceinline__ float ts_dev_bf16_to_f32(uint16_t h) {
    return __uint_as_float((uint32_t)h << 16);
}
#endif

#endif /* TESSERA_KERNELS_CUDA_COMMON_H */
