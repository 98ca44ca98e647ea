/*
 * cuda_sizes.h — the CUDA backend's sizing rules, apart from its kernels:
 * what its attention saves and needs as scratch, and the scratch of its
 * bf16 GEMMs. The backend (backend_cuda.c) uses them, and so does the dry
 * run of device = cuda (backend_load.c, ts_backend_cuda_sizes), which then
 * needs neither the device nor the CUDA libraries: a plan of a GPU run on
 * any machine, and the layout search's thousands of dry runs without
 * cuBLAS mapped into each.
 */
#ifndef TESSERA_CORE_CUDA_SIZES_H
#define TESSERA_CORE_CUDA_SIZES_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* The bf16 GEMMs convert their f32 operands into `work` and multiply a
 * chunk of rows at a time, so that the scratch stays within
 * TESSERA_BF16_GEMM_SCRATCH_KB KiB (default 65536: 64 MiB) however many rows
 * there are — the LM head's backward would otherwise need N x Vp bf16 (1.6 GB
 * for GPT-2 at 16 x 1024 tokens). Rows go in multiples of 64, at least 64. */
static inline size_t ts_cuda_gemm_scratch_budget(void) {
    static size_t budget; /* read once (per file that includes this) */
    if (!budget) {
        const char *env = getenv("TESSERA_BF16_GEMM_SCRATCH_KB");
        long long kb = env ? atoll(env) : 65536;
        budget = (size_t)(kb > 0 ? kb : 65536) << 10;
    }
    return budget;
}
static inline int ts_cuda_gemm_chunk_rows(int N, int C, int OC) {
    size_t per_row = 2 * ((size_t)C + (size_t)OC), rows = ts_cuda_gemm_scratch_budget() / per_row;
    rows = rows < 64 ? 64 : rows / 64 * 64;
    return rows >= (size_t)N ? N : (int)rows;
}
/* work: rows x C then rows x OC bf16, each 256-byte aligned (cuBLAS picks
 * its tensor-core kernels by alignment). */
static inline size_t ts_cuda_bf16_bytes(size_t n) {
    return (n * sizeof(uint16_t) + 255) / 256 * 256;
}
static inline size_t ts_cuda_matmul_bf16_work_bytes(int N, int C, int OC) {
    size_t rows = (size_t)ts_cuda_gemm_chunk_rows(N, C, OC);
    return ts_cuda_bf16_bytes(rows * C) + ts_cuda_bf16_bytes(rows * OC);
}

/* Saved: lse (B, NH, T); the backward recomputes the probabilities. */
static inline size_t ts_cuda_attention_saved(int B, int NH, int T) {
    return (size_t)B * NH * T;
}
static inline size_t ts_cuda_attention_scratch(int B, int NH, int T) {
    (void)B, (void)NH, (void)T;
    return 0;
}

#endif /* TESSERA_CORE_CUDA_SIZES_H */
