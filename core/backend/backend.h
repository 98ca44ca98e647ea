/*
 * backend.h — where the model's tensors live and its kernels run: one table
 * of memory operations and kernels per device kind (CPU, CUDA).
 *
 * The model, the optimizer and the trainer never touch tensor memory
 * directly: they allocate, zero, copy and compute through the backend of the
 * model (ts_model.be). The CPU backend (backend_cpu.c) wraps the host
 * allocator and the reference kernels of kernels/cpu — bit for bit the
 * computation the model did before the table existed. The CUDA backend
 * (cuda/backend_cuda.c) wraps the caching device allocator (device.h) and
 * the kernels of kernels/cuda; it lives in its own shared object,
 * tessera-backend-cuda.so, which the core opens only when a run needs the
 * device (backend_load.c; the contract, its search path and its errors are
 * in backend_abi.h). This table is part of that contract: fields are only
 * appended, and the backend says how large its table is.
 *
 * Pointers. Every tensor argument is memory of the backend's device,
 * allocated with its `alloc`; only to_host / from_host (and the host double
 * of sumsq) touch host memory. Kernel semantics and argument order are those
 * of kernels/cpu/cpu_kernels.h (`out` first, inputs, dimensions last; every
 * backward kernel accumulates += except the cross-entropy backward, which
 * writes =). Operations are stream-ordered on the device: to_host returns
 * when the data has arrived; everything else may return as soon as it is
 * enqueued. Every slot is required, but those said to be optional (appended
 * since ABI 1.2), whose NULL the core replaces as each says.
 *
 * Attention is the one op whose saved state differs between backends: the
 * CPU saves the probabilities att (B, NH, T, T) and its backward needs a
 * scratch of the same size; CUDA saves lse (B, NH, T) and needs no scratch,
 * but its backward reads the forward's output. The model sizes both through
 * attention_saved_floats / attention_scratch_floats and always passes `out`.
 *
 * Errors: every operation returns ts_status (a failed launch, a CUDA error)
 * with the message in ts_last_error(); alloc returns NULL and sets it.
 *
 * Not here: communication (tessera/comm.h; device buffers go to NCCL
 * communicators, which this backend does not create), the host-side
 * checkpoint and data paths (host buffers, copied with to_host/from_host).
 */
#ifndef TESSERA_CORE_BACKEND_H
#define TESSERA_CORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_backend {
    ts_device kind;   /* TS_DEVICE_CPU or TS_DEVICE_CUDA                  */
    const char *name; /* "cpu", "cuda"                                    */

    /* --- memory -------------------------------------------------------------
     * alloc: `bytes` zero-filled under `cat` (NULL and the last error on
     * failure); free: a block from alloc (NULL ignored). zero: `bytes` of
     * device memory set to 0. copy: device to device (no overlap). to_host /
     * from_host: between device memory and host memory; to_host waits until
     * the bytes are on the host. sync: waits for all enqueued work. */
    void *(*alloc)(ts_mem_category cat, size_t bytes);
    void (*free)(void *ptr);
    ts_status (*zero)(void *ptr, size_t bytes);
    ts_status (*copy)(void *dst, const void *src, size_t bytes);
    ts_status (*to_host)(void *host, const void *src, size_t bytes);
    ts_status (*from_host)(void *dst, const void *host, size_t bytes);
    ts_status (*sync)(void);

    /* --- GEMM: out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC or NULL);
     * backward: dinp (N, C) +=, dweight (OC, C) +=, dbias (OC) += (each may
     * be NULL). */
    ts_status (*matmul_forward)(float *out, const float *inp, const float *weight,
                                const float *bias, int N, int C, int OC);
    ts_status (*matmul_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                                 const float *inp, const float *weight, int N, int C, int OC);

    /* --- GEMM with a bf16 weight (the model's bf16 mode): the products of
     * matmul_forward / matmul_backward with weight (OC, C) in bf16, f32
     * accumulation and f32 results (out =, dinp / dweight / dbias +=).
     * inp must hold bf16 values (the model rounds every activation that
     * enters a GEMM), so converting it is exact. dout is f32: CUDA rounds it
     * to bf16 for the tensor-core products (as mixed-precision training
     * does; dbias then sums the rounded values), the CPU uses it as it is.
     * `work`: matmul_bf16_work_bytes(N, C, OC) bytes of device memory for the
     * converted operands, not kept between calls. */
    size_t (*matmul_bf16_work_bytes)(int N, int C, int OC);
    ts_status (*matmul_forward_bf16)(float *out, void *work, const float *inp,
                                     const uint16_t *weight, const float *bias, int N, int C,
                                     int OC);
    ts_status (*matmul_backward_bf16)(float *dinp, float *dweight, float *dbias, void *work,
                                      const float *dout, const float *inp, const uint16_t *weight,
                                      int N, int C, int OC);

    /* --- embedding, vocabulary-parallel (rows [v0, v0 + V_loc) of wte) ------
     * embedding_shard_forward  out (N, C) = wte[tok - v0] or 0 (=)
     * embedding_shard_backward dwte (V_loc, C) += scatter of dout (N, C)
     * position_forward         out (B, T, C) += wpe[pos0 + t]
     * position_backward        dwpe (maxT, C) += sum over b of dout */
    ts_status (*embedding_shard_forward)(float *out, const int32_t *tokens, const float *wte,
                                         int v0, int V_loc, int N, int C);
    ts_status (*embedding_shard_backward)(float *dwte, const float *dout, const int32_t *tokens,
                                          int v0, int V_loc, int N, int C);
    ts_status (*position_forward)(float *out, const float *wpe, int B, int T, int C, int pos0);
    ts_status (*position_backward)(float *dwpe, const float *dout, int B, int T, int C, int pos0);

    /* --- LayerNorm: out (N, C), mean, rstd (N) saved; backward += --------- */
    ts_status (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                                   const float *weight, const float *bias, int N, int C);
    ts_status (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
                                    const float *inp, const float *weight, const float *mean,
                                    const float *rstd, int N, int C);
    /* residual_layernorm_forward: res (N, C) = a + b (+ res_bias (C), may be
     * NULL), then ln_out = layernorm(res) with mean, rstd saved; with
     * round_bf16, res is rounded to bf16 before the LayerNorm and ln_out
     * after. res may alias a or b. The CPU runs residual, add_bias, round,
     * layernorm, round; CUDA one fused pass. */
    ts_status (*residual_layernorm_forward)(float *res, float *ln_out, float *mean, float *rstd,
                                            const float *a, const float *b, const float *res_bias,
                                            const float *weight, const float *bias, int N, int C,
                                            int round_bf16);

    /* --- element-wise: gelu (n), residual out = a + b (n), bias ------------
     * add_bias  out (N, C) += bias (C)
     * bias_grad dbias (C) += column sums of dout (N, C) */
    ts_status (*gelu_forward)(float *out, const float *inp, size_t n);
    /* bias_gelu_forward: pre (N, C) += bias (C), then out (N, C) = gelu(pre);
     * with round_bf16 (the model's bf16 mode) pre is rounded to bf16 before
     * the GELU and out after it. The CPU runs add_bias, round, gelu, round;
     * CUDA one fused pass. */
    ts_status (*bias_gelu_forward)(float *out, float *pre, const float *bias, int N, int C,
                                   int round_bf16);
    ts_status (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    ts_status (*residual_forward)(float *out, const float *a, const float *b, size_t n);
    ts_status (*add_bias)(float *out, const float *bias, int N, int C);
    ts_status (*bias_grad)(float *dbias, const float *dout, int N, int C);

    /* --- causal self-attention over qkv (B, T, 3C), out (B, T, C) ----------
     * attention_saved_floats   floats of `saved` for (B, NH, T)
     * attention_scratch_floats floats of the backward's `scratch` (may be 0;
     *                          scratch may then be NULL)
     * attention_forward        out (=), saved (=)
     * attention_backward       dqkv (B, T, 3C) += ..., given dout, qkv and
     *                          the forward's out and saved */
    size_t (*attention_saved_floats)(int B, int NH, int T);
    size_t (*attention_scratch_floats)(int B, int NH, int T);
    ts_status (*attention_forward)(float *out, float *saved, const float *qkv, int B, int T, int C,
                                   int NH);
    ts_status (*attention_backward)(float *dqkv, float *scratch, const float *dout,
                                    const float *qkv, const float *out, const float *saved, int B,
                                    int T, int C, int NH);
    /* The same two in the model's bf16 mode (qkv holds bf16 values), with the
     * same saved state and scratch: CUDA computes the products on tensor
     * cores with bf16 operands (probabilities and dout rounded to bf16, f32
     * accumulation); the CPU runs its f32 kernels. */
    ts_status (*attention_forward_bf16)(float *out, float *saved, const float *qkv, int B, int T,
                                        int C, int NH);
    ts_status (*attention_backward_bf16)(float *dqkv, float *scratch, const float *dout,
                                         const float *qkv, const float *out, const float *saved,
                                         int B, int T, int C, int NH);

    /* --- vocabulary-parallel cross-entropy (cpu_kernels.h has the recipe) ---
     * ce_shard_max, ce_shard_sumexp, ce_shard_backward as ts_cpu_ce_shard_*;
     * ce_shard_loss: lse (N) = rowmax + log(stats[.,0]); losses (N) = lse -
     * stats[.,1], 0 where the target is masked (step 3 of the recipe). */
    ts_status (*ce_shard_max)(float *rowmax, const float *logits, int N, int V_loc, int Vp_loc);
    ts_status (*ce_shard_sumexp)(float *stats, const float *logits, const float *rowmax,
                                 const int32_t *targets, int v0, int N, int V_loc, int Vp_loc);
    ts_status (*ce_shard_loss)(float *losses, float *lse, const float *rowmax, const float *stats,
                               const int32_t *targets, int N);
    ts_status (*ce_shard_backward)(float *dlogits, const float *logits, const float *lse,
                                   const int32_t *targets, float dloss, int v0, int N, int V_loc,
                                   int Vp_loc);

    /* --- optimizer and reductions ------------------------------------------
     * adamw as ts_cpu_adamw, and when param_bf16 (n) is not NULL it also
     * receives the updated parameters rounded to bf16 (CUDA in the same pass:
     * the fused AdamW of cuda_kernels.h), and with zero_grad leaves grad 0;
     * sumsq: *out (a HOST double) = sum of x^2 (n), accumulated in double
     * (waits for the result). */
    ts_status (*adamw)(float *param, float *m, float *v, uint16_t *param_bf16, float *grad,
                       size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                       int t, float grad_scale, int zero_grad);
    ts_status (*sumsq)(double *out, const float *x, size_t n);

    /* --- bf16: round in place; conversions (nearest, ties to even) --------- */
    ts_status (*round_bf16)(float *x, size_t n);
    ts_status (*f32_to_bf16)(uint16_t *out, const float *in, size_t n);
    ts_status (*bf16_to_f32)(float *out, const uint16_t *in, size_t n);

    /* --- sequence-parallel staging: hidden states (B, T, C) against the
     * per-rank blocks stage (tp, B, T/tp, C) of an all-gather / reduce-scatter
     * seq_from_stage  full (B, T, C) = the blocks of stage (tp, B, T/tp, C)
     * seq_to_stage    stage (tp, B, T/tp, C) = full (B, T, C) cut by rank */
    ts_status (*seq_from_stage)(float *full, const float *stage, int tp, int B, int T, int C);
    ts_status (*seq_to_stage)(float *stage, const float *full, int tp, int B, int T, int C);

    /* --- ABI 1.1: attention of a block of queries against a block of keys
     * (context parallelism: ring attention), as ts_cpu_attention_block_*
     * (cpu_kernels.h: the layout by row strides qs / kvs / os, the causal
     * offset, the arithmetic). Both backends save lse (B, NH, Tq) here.
     * attention_block_forward   out (=), lse (=; -inf for a row with no
     *                           visible key, its out row 0)
     * attention_block_merge     (out, lse) folded with a partial (out2,
     *                           lse2) over other keys, in place
     * attention_block_backward  dq, dk, dv += this key block's part, given
     *                           the final (merged) out and lse, and dout */
    ts_status (*attention_block_forward)(float *out, float *lse, const float *q, const float *k,
                                         const float *v, int B, int Tq, int Tk, int C, int NH,
                                         int qs, int kvs, int os, int64_t offset);
    ts_status (*attention_block_merge)(float *out, float *lse, const float *out2, const float *lse2,
                                       int B, int Tq, int C, int NH, int os);
    ts_status (*attention_block_backward)(float *dq, float *dk, float *dv, const float *q,
                                          const float *k, const float *v, const float *out,
                                          const float *dout, const float *lse, int B, int Tq,
                                          int Tk, int C, int NH, int qs, int kvs, int os,
                                          int64_t offset);

    /* --- ABI 1.1: a strided copy (device to device): `rows` rows of `width`
     * bytes, from src with `spitch` bytes between rows to dst with `dpitch`
     * (cudaMemcpy2D's arguments; no overlap). */
    ts_status (*copy_2d)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                         size_t rows);

    /* --- ABI 1.1: a mixture of experts' outputs, k rows per token --------
     * moe_rows_sum           out (N, C) += sum_j w[t k + j] rows[t k + j]
     *                        (w NULL: weights 1)
     * moe_rows_sum_backward  drows (N k, C) = w[r] dout[r / k];
     *                        dw (N k) = rows[r] . dout[r / k] */
    ts_status (*moe_rows_sum)(float *out, const float *rows, const float *w, int N, int k, int C);
    ts_status (*moe_rows_sum_backward)(float *drows, float *dw, const float *dout, const float *rows,
                                       const float *w, int N, int k, int C);

    /* --- since ABI 1.2 -------------------------------------------------------
     * alloc_uninit: as alloc, but the block need not be zeroed: for a block
     * whose every byte the caller writes before it reads one (a module's
     * saved activations). NULL: alloc serves. The CPU backend leaves a block
     * reused from the allocator's cache as it was, or fills the whole block
     * with NaN when the environment sets TESSERA_POISON_UNINIT=1, so that a
     * read before the write shows in the loss (cli_poison_uninit_same_bits). */
    void *(*alloc_uninit)(ts_mem_category cat, size_t bytes);

    /* --- since ABI 1.3: selective activation recomputation -----------------
     * Optional, all three or none (NULL: the model runs attention_forward
     * with `saved` in its workspace, and again in the backward before
     * attention_backward). For f32 and bf16 runs alike:
     * attention_forward_unsaved     out (=) as attention_forward makes it
     *                               (the same bits), keeping nothing;
     * attention_backward_recompute  dqkv += as attention_backward, without
     *                               `saved` or `out`: it makes again from
     *                               qkv what of the forward it needs, as the
     *                               forward made it;
     * both in a `scratch` of attention_recompute_floats (B, NH, T) floats. */
    size_t (*attention_recompute_floats)(int B, int NH, int T);
    ts_status (*attention_forward_unsaved)(float *out, float *scratch, const float *qkv, int B,
                                           int T, int C, int NH);
    ts_status (*attention_backward_recompute)(float *dqkv, float *scratch, const float *dout,
                                              const float *qkv, int B, int T, int C, int NH);
} ts_backend;

/* The CPU backend: always available, never fails. */
const ts_backend *ts_backend_cpu(void);
/* The CUDA backend's sizing rules only (attention state, GEMM scratch; no
 * kernels), without loading it: the target of a dry run of device = cuda. */
const ts_backend *ts_backend_cuda_sizes(void);
/* The CUDA backend's table, without any initialisation (use
 * ts_backend_open), loading tessera-backend-cuda.so if it is not loaded yet;
 * NULL, with the loader's message as the last error, when it cannot be
 * loaded (not found — also the case of a build without CUDA — damaged, or of
 * another ABI; backend_abi.h). */
const ts_backend *ts_backend_cuda(void);

/* The backend of `device`, ready for use. For TS_DEVICE_CUDA this loads
 * tessera-backend-cuda.so (once per process), then selects the GPU
 * (ts_device_init(-1): the launcher's local rank), creates the kernels'
 * context (ts_cuda_init) and makes its stream the compute stream of the
 * device allocator, once per process. Failure: TS_ERR_INVALID when no
 * backend file is found (the message lists the directories searched and
 * says when this build has no CUDA) or no CUDA device is visible;
 * TS_ERR_PLUGIN when the file is damaged, cannot be loaded (a CUDA library
 * it needs is missing: dlerror's words) or is not a backend of this ABI
 * (the message names the file and what is wrong); or any error of the
 * initialisation. */
ts_status ts_backend_open(ts_device device, const ts_backend **out);
/* What the next allocations hold, until the next call (a static string;
 * NULL: unnamed). The dry run of `tessera plan` bound to the calling thread
 * (backend_plan.h) itemises the activations' peak by it; the other backends
 * ignore it. */
void ts_backend_tag(const char *what);
/* What the live block `ptr` holds from now on (the dry run moves its bytes
 * to that tag; nothing happens elsewhere, or for a block it did not make). */
void ts_backend_retag(const void *ptr, const char *what);

/* Releases what ts_backend_open(TS_DEVICE_CUDA) set up (waits for the
 * device, resets the compute stream, frees the kernels' context). Call after
 * every block of the backend has been freed. A no-op for the CPU or NULL. */
void ts_backend_close(const ts_backend *be);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_BACKEND_H */
