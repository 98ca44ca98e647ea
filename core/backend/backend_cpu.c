/*
 * backend_cpu.c — the CPU backend (backend.h): the accounted host allocator
 * and the reference kernels of kernels/cpu, wrapped to return ts_status.
 *
 * Nothing here computes differently from calling the ts_cpu_* kernels
 * directly; the bf16 GEMMs widen the bf16 weight into `work` and run the
 * f32 GEMM (backend.h).
 */
#include <stdlib.h> /* getenv */
#include <string.h>

#include "alloc.h"
#include "backend.h"
#include "cpu_kernels.h"

/* A block reused from the allocator's cache is zeroed by the thread team. */
static void *cpu_alloc(ts_mem_category cat, size_t bytes) {
    return ts_mem_alloc_with(cat, bytes, ts_cpu_zero);
}

static void cpu_keep(void *ptr, size_t bytes) {
    (void)ptr;
    (void)bytes;
}

/* Without zeroing a reused block; under TESSERA_POISON_UNINIT=1 every float
 * of the block NaN instead (backend.h). */
static void *cpu_alloc_uninit(ts_mem_category cat, size_t bytes) {
    static int poison = -1;
    if (poison < 0) {
        const char *env = getenv("TESSERA_POISON_UNINIT");
        poison = env && strcmp(env, "1") == 0;
    }
    void *p = ts_mem_alloc_with(cat, bytes, cpu_keep);
    if (p && poison) {
        float *f = p;
        for (size_t i = 0; i < bytes / sizeof(float); i++)
            f[i] = __builtin_nanf("");
    }
    return p;
}
static void cpu_free(void *ptr) {
    ts_mem_free(ptr);
}
static ts_status cpu_zero(void *ptr, size_t bytes) {
    ts_cpu_zero(ptr, bytes);
    return TS_OK;
}
static ts_status cpu_copy(void *dst, const void *src, size_t bytes) {
    ts_cpu_copy(dst, src, bytes);
    return TS_OK;
}
static ts_status cpu_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                             size_t rows) {
    for (size_t r = 0; width && r < rows; r++)
        memcpy((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
    return TS_OK;
}
static ts_status cpu_moe_rows_sum(float *out, const float *rows, const float *w, int N, int k,
                                  int C) {
    ts_cpu_moe_rows_sum(out, rows, w, N, k, C);
    return TS_OK;
}
static ts_status cpu_moe_rows_sum_backward(float *drows, float *dw, const float *dout,
                                           const float *rows, const float *w, int N, int k, int C) {
    ts_cpu_moe_rows_sum_backward(drows, dw, dout, rows, w, N, k, C);
    return TS_OK;
}
static ts_status cpu_sync(void) {
    return TS_OK;
}

static ts_status cpu_matmul_forward(float *out, const float *inp, const float *weight,
                                    const float *bias, int N, int C, int OC) {
    ts_cpu_matmul_forward(out, inp, weight, bias, N, C, OC);
    return TS_OK;
}
static ts_status cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                     const float *inp, const float *weight, int N, int C, int OC) {
    ts_cpu_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    return TS_OK;
}

/* work: the weight in f32 (OC, C); inp and dout are used as they are. */
static size_t cpu_matmul_bf16_work_bytes(int N, int C, int OC) {
    (void)N;
    return sizeof(float) * (size_t)OC * C;
}
static ts_status cpu_matmul_forward_bf16(float *out, void *work, const float *inp,
                                         const uint16_t *weight, const float *bias, int N, int C,
                                         int OC) {
    ts_cpu_bf16_to_f32(work, weight, (size_t)OC * C);
    ts_cpu_matmul_forward(out, inp, work, bias, N, C, OC);
    return TS_OK;
}
static ts_status cpu_matmul_backward_bf16(float *dinp, float *dweight, float *dbias, void *work,
                                          const float *dout, const float *inp,
                                          const uint16_t *weight, int N, int C, int OC) {
    ts_cpu_bf16_to_f32(work, weight, (size_t)OC * C);
    ts_cpu_matmul_backward(dinp, dweight, dbias, dout, inp, work, N, C, OC);
    return TS_OK;
}

static ts_status cpu_embedding_shard_forward(float *out, const int32_t *tokens, const float *wte,
                                             int v0, int V_loc, int N, int C) {
    ts_cpu_embedding_shard_forward(out, tokens, wte, v0, V_loc, N, C);
    return TS_OK;
}
static ts_status cpu_embedding_shard_backward(float *dwte, const float *dout, const int32_t *tokens,
                                              int v0, int V_loc, int N, int C) {
    ts_cpu_embedding_shard_backward(dwte, dout, tokens, v0, V_loc, N, C);
    return TS_OK;
}
static ts_status cpu_position_forward(float *out, const float *wpe, int B, int T, int C, int pos0) {
    ts_cpu_position_forward(out, wpe, B, T, C, pos0);
    return TS_OK;
}
static ts_status cpu_position_backward(float *dwpe, const float *dout, int B, int T, int C,
                                       int pos0) {
    ts_cpu_position_backward(dwpe, dout, B, T, C, pos0);
    return TS_OK;
}

static ts_status cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                       const float *weight, const float *bias, int N, int C) {
    ts_cpu_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
    return TS_OK;
}
static ts_status cpu_layernorm_backward(float *dinp, float *dweight, float *dbias,
                                        const float *dout, const float *inp, const float *weight,
                                        const float *mean, const float *rstd, int N, int C) {
    ts_cpu_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
    return TS_OK;
}

static ts_status cpu_residual_layernorm_forward(float *res, float *ln_out, float *mean, float *rstd,
                                                const float *a, const float *b,
                                                const float *res_bias, const float *weight,
                                                const float *bias, int N, int C, int round_bf16) {
    size_t n = (size_t)N * C;
    ts_cpu_residual_forward(res, a, b, n);
    if (res_bias) ts_cpu_add_bias(res, res_bias, N, C);
    if (round_bf16) ts_cpu_round_bf16(res, n);
    ts_cpu_layernorm_forward(ln_out, mean, rstd, res, weight, bias, N, C);
    if (round_bf16) ts_cpu_round_bf16(ln_out, n);
    return TS_OK;
}

static ts_status cpu_gelu_forward(float *out, const float *inp, size_t n) {
    ts_cpu_gelu_forward(out, inp, n);
    return TS_OK;
}
static ts_status cpu_bias_gelu_forward(float *out, float *pre, const float *bias, int N, int C,
                                       int round_bf16) {
    size_t n = (size_t)N * C;
    ts_cpu_add_bias(pre, bias, N, C);
    if (round_bf16) ts_cpu_round_bf16(pre, n);
    ts_cpu_gelu_forward(out, pre, n);
    if (round_bf16) ts_cpu_round_bf16(out, n);
    return TS_OK;
}
static ts_status cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
    ts_cpu_gelu_backward(dinp, inp, dout, n);
    return TS_OK;
}
static ts_status cpu_residual_forward(float *out, const float *a, const float *b, size_t n) {
    ts_cpu_residual_forward(out, a, b, n);
    return TS_OK;
}
static ts_status cpu_add_bias(float *out, const float *bias, int N, int C) {
    ts_cpu_add_bias(out, bias, N, C);
    return TS_OK;
}
static ts_status cpu_bias_grad(float *dbias, const float *dout, int N, int C) {
    ts_cpu_bias_grad(dbias, dout, N, C);
    return TS_OK;
}

/* Saved: the probabilities att (B, NH, T, T); scratch: their gradient. */
static size_t cpu_attention_floats(int B, int NH, int T) {
    return (size_t)B * NH * T * T;
}
static ts_status cpu_attention_forward(float *out, float *saved, const float *qkv, int B, int T,
                                       int C, int NH) {
    ts_cpu_attention_forward(out, saved, qkv, B, T, C, NH);
    return TS_OK;
}
static ts_status cpu_attention_backward(float *dqkv, float *scratch, const float *dout,
                                        const float *qkv, const float *out, const float *saved,
                                        int B, int T, int C, int NH) {
    (void)out;
    ts_cpu_attention_backward(dqkv, scratch, dout, qkv, saved, B, T, C, NH);
    return TS_OK;
}

static size_t cpu_attention_recompute_floats(int B, int NH, int T) {
    return ts_cpu_attention_recompute_floats(B, NH, T);
}
static ts_status cpu_attention_forward_unsaved(float *out, float *scratch, const float *qkv, int B,
                                               int T, int C, int NH) {
    ts_cpu_attention_forward_unsaved(out, scratch, qkv, B, T, C, NH);
    return TS_OK;
}
static ts_status cpu_attention_backward_recompute(float *dqkv, float *scratch, const float *dout,
                                                  const float *qkv, int B, int T, int C, int NH) {
    ts_cpu_attention_backward_recompute(dqkv, scratch, dout, qkv, B, T, C, NH);
    return TS_OK;
}

static ts_status cpu_attention_block_forward(float *out, float *lse, const float *q, const float *k,
                                             const float *v, int B, int Tq, int Tk, int C, int NH,
                                             int qs, int kvs, int os, int64_t offset) {
    ts_cpu_attention_block_forward(out, lse, q, k, v, B, Tq, Tk, C, NH, qs, kvs, os, offset);
    return TS_OK;
}
static ts_status cpu_attention_block_merge(float *out, float *lse, const float *out2,
                                           const float *lse2, int B, int Tq, int C, int NH,
                                           int os) {
    ts_cpu_attention_block_merge(out, lse, out2, lse2, B, Tq, C, NH, os);
    return TS_OK;
}
static ts_status cpu_attention_block_backward(float *dq, float *dk, float *dv, const float *q,
                                              const float *k, const float *v, const float *out,
                                              const float *dout, const float *lse, int B, int Tq,
                                              int Tk, int C, int NH, int qs, int kvs, int os,
                                              int64_t offset) {
    ts_cpu_attention_block_backward(dq, dk, dv, q, k, v, out, dout, lse, B, Tq, Tk, C, NH, qs, kvs,
                                    os, offset);
    return TS_OK;
}

static ts_status cpu_ce_shard_max(float *rowmax, const float *logits, int N, int V_loc,
                                  int Vp_loc) {
    ts_cpu_ce_shard_max(rowmax, logits, N, V_loc, Vp_loc);
    return TS_OK;
}
static ts_status cpu_ce_shard_sumexp(float *stats, const float *logits, const float *rowmax,
                                     const int32_t *targets, int v0, int N, int V_loc, int Vp_loc) {
    ts_cpu_ce_shard_sumexp(stats, logits, rowmax, targets, v0, N, V_loc, Vp_loc);
    return TS_OK;
}
static ts_status cpu_ce_shard_loss(float *losses, float *lse, const float *rowmax,
                                   const float *stats, const int32_t *targets, int N) {
    ts_cpu_ce_shard_loss(losses, lse, rowmax, stats, targets, N);
    return TS_OK;
}
static ts_status cpu_ce_shard_backward(float *dlogits, const float *logits, const float *lse,
                                       const int32_t *targets, float dloss, int v0, int N,
                                       int V_loc, int Vp_loc) {
    ts_cpu_ce_shard_backward(dlogits, logits, lse, targets, dloss, v0, N, V_loc, Vp_loc);
    return TS_OK;
}

static ts_status cpu_adamw(float *param, float *m, float *v, uint16_t *param_bf16, float *grad,
                           size_t n, float lr, float beta1, float beta2, float eps,
                           float weight_decay, int t, float grad_scale, int zero_grad) {
    ts_cpu_adamw(param, m, v, grad, n, lr, beta1, beta2, eps, weight_decay, t, grad_scale,
                 zero_grad);
    if (param_bf16) ts_cpu_f32_to_bf16(param_bf16, param, n);
    return TS_OK;
}
static ts_status cpu_sumsq(double *out, const float *x, size_t n) {
    *out = ts_cpu_sumsq(x, n);
    return TS_OK;
}
static ts_status cpu_round_bf16(float *x, size_t n) {
    ts_cpu_round_bf16(x, n);
    return TS_OK;
}
static ts_status cpu_f32_to_bf16(uint16_t *out, const float *in, size_t n) {
    ts_cpu_f32_to_bf16(out, in, n);
    return TS_OK;
}
static ts_status cpu_bf16_to_f32(float *out, const uint16_t *in, size_t n) {
    ts_cpu_bf16_to_f32(out, in, n);
    return TS_OK;
}

/* Rank r's block of the staging buffer holds rows [r*T/tp, (r+1)*T/tp) of
 * every sequence. */
static ts_status cpu_seq_from_stage(float *full, const float *stage, int tp, int B, int T, int C) {
    int Tl = T / tp;
    size_t blk = (size_t)B * Tl * C;
#pragma omp parallel for collapse(2) schedule(static)
    for (int r = 0; r < tp; r++)
        for (int b = 0; b < B; b++)
            memcpy(full + ((size_t)b * T + (size_t)r * Tl) * C,
                   stage + r * blk + (size_t)b * Tl * C, (size_t)Tl * C * sizeof(float));
    return TS_OK;
}
static ts_status cpu_seq_to_stage(float *stage, const float *full, int tp, int B, int T, int C) {
    int Tl = T / tp;
    size_t blk = (size_t)B * Tl * C;
#pragma omp parallel for collapse(2) schedule(static)
    for (int r = 0; r < tp; r++)
        for (int b = 0; b < B; b++)
            memcpy(stage + r * blk + (size_t)b * Tl * C,
                   full + ((size_t)b * T + (size_t)r * Tl) * C, (size_t)Tl * C * sizeof(float));
    return TS_OK;
}

static const ts_backend cpu_backend = {
    .kind = TS_DEVICE_CPU,
    .name = "cpu",
    .alloc = cpu_alloc,
    .alloc_uninit = cpu_alloc_uninit,
    .attention_recompute_floats = cpu_attention_recompute_floats,
    .attention_forward_unsaved = cpu_attention_forward_unsaved,
    .attention_backward_recompute = cpu_attention_backward_recompute,
    .free = cpu_free,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .to_host = cpu_copy,
    .from_host = cpu_copy,
    .sync = cpu_sync,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .matmul_bf16_work_bytes = cpu_matmul_bf16_work_bytes,
    .matmul_forward_bf16 = cpu_matmul_forward_bf16,
    .matmul_backward_bf16 = cpu_matmul_backward_bf16,
    .embedding_shard_forward = cpu_embedding_shard_forward,
    .embedding_shard_backward = cpu_embedding_shard_backward,
    .position_forward = cpu_position_forward,
    .position_backward = cpu_position_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .residual_layernorm_forward = cpu_residual_layernorm_forward,
    .gelu_forward = cpu_gelu_forward,
    .bias_gelu_forward = cpu_bias_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .residual_forward = cpu_residual_forward,
    .add_bias = cpu_add_bias,
    .bias_grad = cpu_bias_grad,
    .attention_saved_floats = cpu_attention_floats,
    .attention_scratch_floats = cpu_attention_floats,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .attention_forward_bf16 = cpu_attention_forward,
    .attention_backward_bf16 = cpu_attention_backward,
    .ce_shard_max = cpu_ce_shard_max,
    .ce_shard_sumexp = cpu_ce_shard_sumexp,
    .ce_shard_loss = cpu_ce_shard_loss,
    .ce_shard_backward = cpu_ce_shard_backward,
    .adamw = cpu_adamw,
    .sumsq = cpu_sumsq,
    .round_bf16 = cpu_round_bf16,
    .f32_to_bf16 = cpu_f32_to_bf16,
    .bf16_to_f32 = cpu_bf16_to_f32,
    .seq_from_stage = cpu_seq_from_stage,
    .seq_to_stage = cpu_seq_to_stage,
    .attention_block_forward = cpu_attention_block_forward,
    .attention_block_merge = cpu_attention_block_merge,
    .attention_block_backward = cpu_attention_block_backward,
    .copy_2d = cpu_copy_2d,
    .moe_rows_sum = cpu_moe_rows_sum,
    .moe_rows_sum_backward = cpu_moe_rows_sum_backward,
};

const ts_backend *ts_backend_cpu(void) {
    return &cpu_backend;
}
