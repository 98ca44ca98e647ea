/*
 * backend_cuda.c — the CUDA backend (backend.h): the caching device
 * allocator of device.h and the kernels of kernels/cuda, on one GPU; and the
 * descriptor that tessera-backend-cuda.so exports to the core
 * (backend_abi.h), which carries this ops table, the device API of
 * device_cuda.c and the NCCL functions of comm_nccl.c.
 *
 * Every operation is enqueued on the kernels' stream (ts_cuda_stream), which
 * opening the backend also makes the allocator's compute stream, so
 * zero-fills, copies and kernels run in one order. to_host and sumsq wait for
 * the device; nothing else does.
 *
 * In bf16 mode the GEMMs and the attention run on tensor cores: for the
 * GEMMs the f32 activations (already rounded to bf16 by the model) and the
 * gradients flowing back are converted into the caller's `work`, the weights
 * are the model's bf16 parameters; the attention (attention_tc.cu) rounds
 * its tiles as it loads them.
 *
 * Built only into the backend (cmake/gpu.cmake; the emulator's copy in
 * tests/cuda_emu.cmake), never into libtessera: the core reaches all of it
 * through the descriptor. What it does not do: find or load itself
 * (core/backend/backend_load.c), or talk to the core other than through the
 * host table (backend_host.c).
 */
#include "cuda_sizes.h"
#include <stdlib.h>

#include "backend.h"
#include "backend_abi.h"
#include "backend_host.h"
#include "cuda_kernels.h"
#include "tessera/device.h"

static double *g_sumsq; /* one device double for ts_cuda_sumsq's result */
static int g_opened;    /* ts_backend_open(CUDA) calls not yet closed  */

static void *cuda_alloc(ts_mem_category cat, size_t bytes) {
    return ts_device_alloc(cat, bytes);
}
static void cuda_free(void *ptr) {
    ts_device_free(ptr);
}
static ts_status cuda_copy_any(void *dst, const void *src, size_t bytes) {
    return ts_device_copy(dst, src, bytes);
}
static ts_status cuda_sync(void) {
    return ts_cuda_sync();
}

static ts_status cuda_sumsq(double *out, const float *x, size_t n) {
    if (!g_sumsq) {
        g_sumsq = ts_device_alloc(TS_MEM_OTHER, sizeof(double));
        if (!g_sumsq) return TS_ERR_NOMEM;
    }
    TS_TRY(ts_cuda_sumsq(g_sumsq, x, n));
    return ts_device_copy(out, g_sumsq, sizeof(double));
}

/* The bf16 GEMMs' chunks of rows and their scratch: cuda_sizes.h. */
static int gemm_chunk_rows(int N, int C, int OC) {
    return ts_cuda_gemm_chunk_rows(N, C, OC);
}
static size_t bf16_bytes(size_t n) {
    return ts_cuda_bf16_bytes(n);
}
static size_t cuda_matmul_bf16_work_bytes(int N, int C, int OC) {
    return ts_cuda_matmul_bf16_work_bytes(N, C, OC);
}
static ts_status cuda_matmul_forward_bf16(float *out, void *work, const float *inp,
                                          const uint16_t *weight, const float *bias, int N, int C,
                                          int OC) {
    uint16_t *x = work;
    int rows = gemm_chunk_rows(N, C, OC);
    for (int n0 = 0; n0 < N; n0 += rows) {
        int m = N - n0 < rows ? N - n0 : rows;
        TS_TRY(ts_cuda_f32_to_bf16(x, inp + (size_t)n0 * C, (size_t)m * C));
        TS_TRY(ts_cuda_matmul_forward_bf16(out + (size_t)n0 * OC, x, weight, bias, m, C, OC));
    }
    return TS_OK;
}
static ts_status cuda_matmul_backward_bf16(float *dinp, float *dweight, float *dbias, void *work,
                                           const float *dout, const float *inp,
                                           const uint16_t *weight, int N, int C, int OC) {
    int rows = gemm_chunk_rows(N, C, OC);
    uint16_t *x = work, *dy = (uint16_t *)((char *)work + bf16_bytes((size_t)rows * C));
    for (int n0 = 0; n0 < N; n0 += rows) {
        int m = N - n0 < rows ? N - n0 : rows;
        TS_TRY(ts_cuda_f32_to_bf16(dy, dout + (size_t)n0 * OC, (size_t)m * OC));
        if (dweight) TS_TRY(ts_cuda_f32_to_bf16(x, inp + (size_t)n0 * C, (size_t)m * C));
        TS_TRY(ts_cuda_matmul_backward_bf16(dinp ? dinp + (size_t)n0 * C : NULL, dweight, dbias, dy,
                                            x, weight, m, C, OC));
    }
    return TS_OK;
}

static ts_status cuda_bias_gelu_forward(float *out, float *pre, const float *bias, int N, int C,
                                        int round_bf16) {
    return ts_cuda_bias_gelu_forward(out, pre, pre, bias, N, C, round_bf16);
}

/* Saved: lse (B, NH, T); the backward recomputes the probabilities
 * (cuda_sizes.h). */
static size_t cuda_attention_saved(int B, int NH, int T) {
    return ts_cuda_attention_saved(B, NH, T);
}
static size_t cuda_attention_scratch(int B, int NH, int T) {
    return ts_cuda_attention_scratch(B, NH, T);
}
static ts_status cuda_attention_backward(float *dqkv, float *scratch, const float *dout,
                                         const float *qkv, const float *out, const float *saved,
                                         int B, int T, int C, int NH) {
    (void)scratch;
    return ts_cuda_attention_backward(dqkv, dout, qkv, out, saved, B, T, C, NH);
}

static ts_status cuda_attention_backward_bf16(float *dqkv, float *scratch, const float *dout,
                                              const float *qkv, const float *out,
                                              const float *saved, int B, int T, int C, int NH) {
    (void)scratch;
    return ts_cuda_attention_backward_bf16(dqkv, dout, qkv, out, saved, B, T, C, NH);
}

static const ts_backend cuda_backend = {
    .kind = TS_DEVICE_CUDA,
    .name = "cuda",
    .alloc = cuda_alloc,
    .free = cuda_free,
    .zero = ts_cuda_zero,
    .copy = ts_cuda_copy,
    .to_host = cuda_copy_any,
    .from_host = cuda_copy_any,
    .sync = cuda_sync,
    .matmul_forward = ts_cuda_matmul_forward,
    .matmul_backward = ts_cuda_matmul_backward,
    .matmul_bf16_work_bytes = cuda_matmul_bf16_work_bytes,
    .matmul_forward_bf16 = cuda_matmul_forward_bf16,
    .matmul_backward_bf16 = cuda_matmul_backward_bf16,
    .embedding_shard_forward = ts_cuda_embedding_shard_forward,
    .embedding_shard_backward = ts_cuda_embedding_shard_backward,
    .position_forward = ts_cuda_position_forward,
    .position_backward = ts_cuda_position_backward,
    .layernorm_forward = ts_cuda_layernorm_forward,
    .layernorm_backward = ts_cuda_layernorm_backward,
    .residual_layernorm_forward = ts_cuda_residual_layernorm_forward,
    .gelu_forward = ts_cuda_gelu_forward,
    .bias_gelu_forward = cuda_bias_gelu_forward,
    .gelu_backward = ts_cuda_gelu_backward,
    .residual_forward = ts_cuda_residual_forward,
    .add_bias = ts_cuda_add_bias,
    .bias_grad = ts_cuda_bias_grad,
    .attention_saved_floats = cuda_attention_saved,
    .attention_scratch_floats = cuda_attention_scratch,
    .attention_forward = ts_cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .attention_forward_bf16 = ts_cuda_attention_forward_bf16,
    .attention_backward_bf16 = cuda_attention_backward_bf16,
    .ce_shard_max = ts_cuda_ce_shard_max,
    .ce_shard_sumexp = ts_cuda_ce_shard_sumexp,
    .ce_shard_loss = ts_cuda_ce_shard_loss,
    .ce_shard_backward = ts_cuda_ce_shard_backward,
    .adamw = ts_cuda_adamw,
    .sumsq = cuda_sumsq,
    .round_bf16 = ts_cuda_round_bf16,
    .f32_to_bf16 = ts_cuda_f32_to_bf16,
    .bf16_to_f32 = ts_cuda_bf16_to_f32,
    .seq_from_stage = ts_cuda_seq_from_stage,
    .seq_to_stage = ts_cuda_seq_to_stage,
    .attention_block_forward = ts_cuda_attention_block_forward,
    .attention_block_merge = ts_cuda_attention_block_merge,
    .attention_block_backward = ts_cuda_attention_block_backward,
    .copy_2d = ts_cuda_copy_2d,
    .moe_rows_sum = ts_cuda_moe_rows_sum,
    .moe_rows_sum_backward = ts_cuda_moe_rows_sum_backward,
};

static ts_status cuda_open(const ts_backend **out) {
    *out = NULL;
    if (g_opened++ == 0) {
        char why[256];
        ts_status st = TS_OK;
        if (!ts_cuda_available(why, sizeof why))
            st = ts_error(TS_ERR_INVALID, "no CUDA device is visible (%s)", why);
        if (!st) st = ts_device_init(-1);
        if (!st) st = ts_cuda_init(ts_device_current());
        if (st) {
            g_opened = 0;
            return st;
        }
        /* One stream for kernels, zero-fills and copies. */
        ts_device_set_stream(ts_cuda_stream());
    }
    *out = &cuda_backend;
    return TS_OK;
}

static void cuda_close(const ts_backend *be) {
    if (be != &cuda_backend || g_opened == 0 || --g_opened > 0) return;
    ts_device_free(g_sumsq);
    g_sumsq = NULL;
    (void)ts_cuda_sync();
    ts_device_set_stream(NULL);
    ts_cuda_free();
}

static const ts_backend *cuda_table(void) {
    return &cuda_backend;
}

static const ts_backend_descriptor cuda_descriptor = {
    .abi_version = TS_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ts_backend_descriptor),
    .name = "cuda",
    .kind = TS_DEVICE_CUDA,
    .table_size = sizeof(ts_backend),
    .attach = ts_backend_host_attach,
    .table = cuda_table,
    .open = cuda_open,
    .close = cuda_close,
    .device_count = ts_device_count,
    .device_init = ts_device_init,
    .device_current = ts_device_current,
    .device_stream = ts_device_stream,
    .device_set_stream = ts_device_set_stream,
    .device_synchronize = ts_device_synchronize,
    .device_copy = ts_device_copy,
    .device_alloc = ts_device_alloc,
    .device_free = ts_device_free,
    .device_mem_stats = ts_device_mem_stats,
    .device_mem_reset_peak = ts_device_mem_reset_peak,
    .device_empty_cache = ts_device_empty_cache,
    .device_pool_stats = ts_device_pool_stats,
#ifdef TESSERA_HAVE_NCCL
    .comm_nccl_create = ts_comm_nccl_create,
    .comm_nccl_group_start = ts_comm_nccl_group_start,
    .comm_nccl_group_end = ts_comm_nccl_group_end,
    .comm_nccl_flush = ts_comm_nccl_flush,
#endif
};

/* The one exported symbol of tessera-backend-cuda.so. */
TS_BACKEND_EXPORT const ts_backend_descriptor *tessera_backend_descriptor(void);
TS_BACKEND_EXPORT const ts_backend_descriptor *tessera_backend_descriptor(void) {
    return &cuda_descriptor;
}
