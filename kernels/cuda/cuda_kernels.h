/*
 * cuda_kernels.h — the CUDA kernels of a GPT-2 step and of a Llama-class
 * block, and the small device context (device, stream, cuBLAS handles) they
 * run on.
 *
 * Every kernel mirrors a CPU reference kernel of cpu_kernels.h with the same
 * argument order — `out` first, inputs next, dimensions last (B batch, T time,
 * C channels, NH heads, V vocabulary, Vp padded vocabulary, N = B*T rows) —
 * and the same semantics, except where a comment below says otherwise
 * (attention saves lse instead of att; the bf16 GEMMs take bf16 operands).
 *
 * Pointers. Every tensor argument is DEVICE memory, allocated by the caller
 * (the core's accounted allocator); kernels never allocate. bf16 tensors are
 * uint16_t arrays holding the upper half of an IEEE f32 (as in tessera.h).
 *
 * Streams. Every kernel is enqueued on ts_cuda_stream() and returns as soon
 * as it is enqueued: outputs are ready after ts_cuda_sync() or any later
 * stream-ordered operation. The returned ts_status reports a failed launch
 * (or a cuBLAS error) at once; a fault inside a kernel surfaces at the next
 * synchronizing call.
 *
 * The += rule, as on the CPU: every backward kernel ACCUMULATES (+=) into
 * every gradient it writes, parameters and activations alike, so callers zero
 * gradient buffers before the first use. The exceptions are the cross-entropy
 * backward kernels, which write dlogits (=) so they may run in place.
 *
 * Determinism. No kernel uses floating-point atomics: every reduction has a
 * fixed order, so two runs with the same inputs, device and launch
 * configuration give the same bits. Results differ from the CPU's in rounding
 * only (summation order); the tests bound that difference (tests/cuda/).
 *
 * Errors. A failure returns a non-zero ts_status and sets the last-error
 * string (ts_last_error) to "cuda: FILE:LINE: CALL: ERROR_NAME: message".
 * TS_ERR_INVALID is a bad argument (e.g. a head size above 128),
 * TS_ERR_NOMEM a failed device allocation in ts_cuda_init, TS_ERR_INTERNAL
 * any other CUDA or cuBLAS error.
 */
#ifndef TESSERA_KERNELS_CUDA_H
#define TESSERA_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA runtime's stream and the cuBLAS handles, named without including
 * the CUDA headers: cudaStream_t is `struct CUstream_st *`, cublasHandle_t
 * `struct cublasContext *`, cublasLtHandle_t `struct cublasLtContext *`. */
struct CUstream_st;
struct cublasContext;
struct cublasLtContext;

/* --- device context (context.cu) --------------------------------------------
 * ts_cuda_available: 1 when the CUDA runtime sees at least one device.
 * Otherwise 0, with why ("no CUDA-capable device is detected", "CUDA driver
 * version is insufficient...") written to reason (NUL-terminated, truncated
 * to reason_len; reason may be NULL). Never fails otherwise, never aborts. */
int ts_cuda_available(char *reason, size_t reason_len);

/* Selects `device`, creates the stream kernels run on (non-blocking with
 * respect to the legacy default stream) and the cuBLAS / cuBLASLt handles.
 * Call once per process before any kernel; a second call with the same
 * device is a no-op, with another device it is TS_ERR_INVALID. */
ts_status ts_cuda_init(int device);
/* Releases what ts_cuda_init created (after synchronizing the stream). */
void ts_cuda_free(void);

/* The device chosen by ts_cuda_init, or -1 before it. */
int ts_cuda_device(void);
/* The stream every kernel is enqueued on (NULL, the legacy default stream,
 * before ts_cuda_init). */
struct CUstream_st *ts_cuda_stream(void);
/* Makes `stream` (owned by the caller, who keeps it alive while it is set)
 * the stream of every following kernel and cuBLAS call; NULL restores the
 * stream ts_cuda_init created. */
ts_status ts_cuda_set_stream(struct CUstream_st *stream);
/* The cuBLAS and cuBLASLt handles (NULL before ts_cuda_init); bound to
 * ts_cuda_stream(). Borrowed: do not destroy them or change their stream. */
struct cublasContext *ts_cuda_cublas(void);
struct cublasLtContext *ts_cuda_cublaslt(void);
/* Waits for everything enqueued on ts_cuda_stream() and reports any error a
 * kernel raised since the last check. */
ts_status ts_cuda_sync(void);

/* --- GEMM, f32 (matmul.cu) -------------------------------------------------
 * cublasSgemm in plain f32: the handle's math mode is CUBLAS_DEFAULT_MATH for
 * these calls, never TF32, so results match the CPU within f32 rounding.
 * out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be NULL. */
ts_status ts_cuda_matmul_forward(float *out, const float *inp, const float *weight,
                                 const float *bias, int N, int C, int OC);
/* dinp (N, C) += dout (N, OC) @ weight (OC, C)
 * dweight (OC, C) += dout^T @ inp (N, C)
 * dbias (OC) += column sums of dout (rows summed in a fixed order)
 * Any of dinp, dweight, dbias may be NULL to skip that product. */
ts_status ts_cuda_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, int N, int C, int OC);

/* --- GEMM, bf16 operands, f32 accumulation and results (matmul.cu) -------------
 * The same products with bf16 operands (tensor cores, CUBLAS_COMPUTE_32F) and
 * f32 outputs and gradients, for mixed precision: the caller converts
 * activations and the bf16 weight copy (ts_cuda_adamw's copy-out) beforehand.
 * out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias (f32) may be NULL. */
ts_status ts_cuda_matmul_forward_bf16(float *out, const uint16_t *inp, const uint16_t *weight,
                                      const float *bias, int N, int C, int OC);
/* dinp (N, C) += dout (N, OC) @ weight (OC, C)     (f32 result)
 * dweight (OC, C) += dout^T @ inp (N, C)           (f32 result)
 * dbias (OC) += column sums of dout (bf16 values summed in f32)
 * Any of dinp, dweight, dbias may be NULL to skip that product. */
ts_status ts_cuda_matmul_backward_bf16(float *dinp, float *dweight, float *dbias,
                                       const uint16_t *dout, const uint16_t *inp,
                                       const uint16_t *weight, int N, int C, int OC);

/* --- token + learned position embedding (embedding.cu) -----------------------
 * out (B, T, C) = wte[tokens[b,t]] + wpe[pos0 + t]
 * tokens (B, T) are ids in [0, V), trusted as on the CPU; wte (V, C); wpe (maxT, C). */
ts_status ts_cuda_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                                    const float *wpe, int B, int T, int C, int pos0);
/* dwte (V, C) += scatter of dout (B, T, C) by token; dwpe (maxT, C) += sum over b.
 * Without atomics: rows of dwte are split among tasks by token id, and every
 * row sums its contributions in increasing (b, t) order, the CPU's order. */
ts_status ts_cuda_embedding_backward(float *dwte, float *dwpe, const float *dout,
                                     const int32_t *tokens, int B, int T, int C, int pos0);
/* The vocabulary-parallel and position pieces, as ts_cpu_embedding_shard_*:
 *   embedding_shard_forward   out (N, C) = wte[tok - v0], or 0 when the token
 *                             is not in [v0, v0 + V_loc) (written, =)
 *   embedding_shard_backward  dwte (V_loc, C) += scatter of dout (N, C)
 *   position_forward          out (B, T, C) += wpe[pos0 + t]
 *   position_backward         dwpe (maxT, C) += sum over b of dout (B, T, C) */
ts_status ts_cuda_embedding_shard_forward(float *out, const int32_t *tokens, const float *wte,
                                          int v0, int V_loc, int N, int C);
ts_status ts_cuda_embedding_shard_backward(float *dwte, const float *dout, const int32_t *tokens,
                                           int v0, int V_loc, int N, int C);
ts_status ts_cuda_position_forward(float *out, const float *wpe, int B, int T, int C, int pos0);
ts_status ts_cuda_position_backward(float *dwpe, const float *dout, int B, int T, int C, int pos0);

/* --- LayerNorm, eps TS_LAYERNORM_EPS = 1e-5 (layernorm.cu) ---------------------
 * out (N, C) = (inp - mean) * rstd * weight (C) + bias (C); mean, rstd (N) saved. */
ts_status ts_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                    const float *weight, const float *bias, int N, int C);
/* dinp (N, C) += ...; dweight (C) += ...; dbias (C) += ... (as on the CPU). */
ts_status ts_cuda_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                     const float *inp, const float *weight, const float *mean,
                                     const float *rstd, int N, int C);

/* --- residual add (residual.cu) ---------------------------------------------------
 * out (n) = a + b;  backward: da += dout, db += dout (either may be NULL). */
ts_status ts_cuda_residual_forward(float *out, const float *a, const float *b, size_t n);
ts_status ts_cuda_residual_backward(float *da, float *db, const float *dout, size_t n);
/* Fused: res (N, C) = a + b (+ res_bias (C) when not NULL), then ln_out
 * (N, C) = layernorm(res) with mean, rstd (N) saved — ts_cpu_residual_forward,
 * ts_cpu_add_bias and ts_cpu_layernorm_forward in one pass over memory. With
 * round_bf16 (the model's bf16 mode) res is rounded to bf16 before the
 * statistics and ln_out after. res may alias a or b. The backward is the
 * separate kernels. */
ts_status ts_cuda_residual_layernorm_forward(float *res, float *ln_out, float *mean, float *rstd,
                                             const float *a, const float *b, const float *res_bias,
                                             const float *weight, const float *bias, int N, int C,
                                             int round_bf16);

/* --- GELU, tanh approximation (gelu.cu) ----------------------------------------
 * out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 * backward: dinp (n) += gelu'(inp) * dout. */
ts_status ts_cuda_gelu_forward(float *out, const float *inp, size_t n);
ts_status ts_cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
/* Fused bias + GELU, the tail of the MLP's first linear layer:
 *   pre (N, C) = inp (N, C) + bias (C)   (saved for ts_cuda_gelu_backward;
 *                                         may be NULL, may alias inp)
 *   out (N, C) = gelu(pre)
 * with round_bf16, pre is rounded to bf16 before the GELU and out after it
 * (the model's bf16 mode). Equals ts_cpu_matmul_forward's bias add followed
 * by ts_cpu_gelu_forward (and the roundings). The backward is
 * ts_cuda_gelu_backward on pre, then the bias gradient. */
ts_status ts_cuda_bias_gelu_forward(float *out, float *pre, const float *inp, const float *bias,
                                    int N, int C, int round_bf16);

/* --- causal multi-head self-attention, flash style (attention.cu) ----------------
 * qkv (B, T, 3C) holds q, k, v side by side, each (B, T, NH, hs = C/NH), and
 * hs <= 128. Scores are scaled by 1/sqrt(hs) before the causal softmax.
 *
 * Unlike ts_cpu_attention_forward, the (B, NH, T, T) probability matrix never
 * exists: the forward walks key tiles with an online softmax and saves only
 * lse (B, NH, T), the log-sum-exp of each scaled score row.
 *   out (B, T, C) = softmax(q k^T / sqrt(hs), causal) @ v      (written, =)
 *   lse (B, NH, T) = log sum_{t2 <= t} exp(q_t . k_t2 / sqrt(hs))   (written, =)
 * The backward recomputes the probabilities from q, k and lse:
 *   dqkv (B, T, 3C) += gradient through the softmax attention (+= rule), given
 *   dout (B, T, C), the same qkv and the forward's out and lse.
 * It runs as two kernels (dk and dv per key tile, then dq per query tile), so
 * every element of dqkv has one writer and no atomics are needed.
 *
 * Comparing with the CPU reference (tests/cuda/, family `attention`): the two
 * saved states differ (att vs lse), so the test runs each backend's forward
 * and backward on the same qkv and dout and compares what the model sees:
 * out, and dqkv (both prefilled with the same random values, checking +=);
 * lse is checked against a double-precision log-sum-exp of the scores. */
ts_status ts_cuda_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                                    int NH);
ts_status ts_cuda_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                     const float *out, const float *lse, int B, int T, int C,
                                     int NH);

/* --- the same attention on tensor cores, for bf16 mode (attention_tc.cu) --------
 * Same arguments, saved state (lse) and += rule as above; q, k, v and dout are
 * rounded to bf16 as they are loaded (exact for the model's bf16-valued
 * activations), the probabilities and score gradients are rounded to bf16 as
 * they enter a product, and everything accumulates in f32 (WMMA 16x16x16).
 * Head sizes up to 64; larger ones run the f32 kernels above. Needs sm_80 or
 * later. Compared with the CPU kernel on bf16-valued inputs within 1e-2
 * (tests/cuda/, family `attention_bf16`). */
ts_status ts_cuda_attention_forward_bf16(float *out, float *lse, const float *qkv, int B, int T,
                                         int C, int NH);
ts_status ts_cuda_attention_backward_bf16(float *dqkv, const float *dout, const float *qkv,
                                          const float *out, const float *lse, int B, int T, int C,
                                          int NH);

/* --- block attention for context parallelism (attention_block.cu) ---------------
 * ts_cpu_attention_block_forward / _merge / _backward (cpu_kernels.h has the
 * layout by row strides, the causal offset and the arithmetic), same
 * arguments and results, in f32: a block of Tq query rows against a block of
 * Tk key/value rows, out (=) and lse (B, NH, Tq) (=, -inf for a row that sees
 * no key); merge folds a second partial (out2, lse2) into (out, lse); the
 * backward accumulates (+=) dq, dk, dv of one key block from the final out
 * and lse. hs = C/NH <= 128, B*NH <= 65535, strides >= C. Like the attention
 * above: flash-style tiles, no (Tq, Tk) matrix, and the backward runs as two
 * kernels (dk, dv per key tile; dq per query tile) with no atomics, so the
 * results are deterministic. Compared with the CPU kernels within 1e-5
 * (tests/cuda/, family `attention_block`). */
ts_status ts_cuda_attention_block_forward(float *out, float *lse, const float *q, const float *k,
                                          const float *v, int B, int Tq, int Tk, int C, int NH,
                                          int qs, int kvs, int os, int64_t offset);
ts_status ts_cuda_attention_block_merge(float *out, float *lse, const float *out2,
                                        const float *lse2, int B, int Tq, int C, int NH, int os);
ts_status ts_cuda_attention_block_backward(float *dq, float *dk, float *dv, const float *q,
                                           const float *k, const float *v, const float *out,
                                           const float *dout, const float *lse, int B, int Tq,
                                           int Tk, int C, int NH, int qs, int kvs, int os,
                                           int64_t offset);

/* --- the kernels of a Llama-class block (rmsnorm.cu, rope.cu, swiglu.cu,
 * gqa_attention.cu) ---------------------------------------------------------
 * The arguments, layouts and results of ts_cpu_rmsnorm_*, ts_cpu_rope_*,
 * ts_cpu_swiglu_* and ts_cpu_gqa_attention_* (cpu_kernels.h states them), in
 * f32, with the += rule of backward; compared with the CPU kernels by
 * tests/cuda/test_cuda_llama_kernels.c (f32 within 1e-6 for the elementwise
 * kernels and RMSNorm, 1e-5 for attention).
 *
 * RMSNorm: out (N, C) = inp * rstd * weight (C), rstd (N) saved (=);
 * backward dinp (N, C) +=, dweight (C) += (rows summed in a fixed order, no
 * atomics). */
ts_status ts_cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                                  float eps, int N, int C);
ts_status ts_cuda_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                                   const float *weight, const float *rstd, int N, int C);
/* Rotary embeddings, rotate_half layout, nheads heads of hs (even) floats
 * inside rows `is` (inp) / `os` (out) floats apart; pos (N) int32 per row;
 * inv_freq (hs/2) DEVICE memory, from ts_cpu_rope_inv_freq on the host. The
 * angle, its cosine and sine in double per row, rounded to float, as on the
 * CPU. forward out (=), in place when out == inp and os == is; backward
 * dinp += the rotation by -angle of dout (dinp must not overlap dout). */
ts_status ts_cuda_rope_forward(float *out, const float *inp, const int32_t *pos,
                               const float *inv_freq, int N, int nheads, int hs, int os, int is);
ts_status ts_cuda_rope_backward(float *dinp, const float *dout, const int32_t *pos,
                                const float *inv_freq, int N, int nheads, int hs, int ds, int dos);
/* SwiGLU over the packed (N, 2F) gate | up: out (N, F) = silu(gate) * up (=);
 * backward dinp (N, 2F) += [dgate | dup]. */
ts_status ts_cuda_swiglu_forward(float *out, const float *inp, int N, int F);
ts_status ts_cuda_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);
/* Grouped-query causal attention: qkv (B, T, (NH + 2 NKV) hs) packed rows
 * (q heads, k heads, v heads), NKV divides NH, hs <= 128, B*NH <= 65535;
 * out (B, T, NH hs) (=) and lse (B, NH, T) (=), K and V never repeated;
 * backward dqkv (B, T, (NH + 2 NKV) hs) += from dout (B, T, NH hs), qkv, out
 * and lse. Flash style as the attention above: two backward kernels (dk, dv
 * per (key tile, kv head), its query heads summed in order; dq per query
 * tile), no atomics, deterministic. */
ts_status ts_cuda_gqa_attention_forward(float *out, float *lse, const float *qkv, int B, int T,
                                        int NH, int NKV, int hs);
ts_status ts_cuda_gqa_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                         const float *out, const float *lse, int B, int T, int NH,
                                         int NKV, int hs);

/* --- softmax cross-entropy over a padded vocabulary (crossentropy.cu) ---------
 * As ts_cpu_crossentropy_*: logits (N, Vp), only the first V columns are
 * real; targets (N) a class id in [0, V) or -1 (masked: loss 0, no gradient).
 * losses (N) = lse - row[target];  lse (N) = logsumexp(row[0:V]). */
ts_status ts_cuda_crossentropy_forward(float *losses, float *lse, const float *logits,
                                       const int32_t *targets, int N, int V, int Vp);
/* dlogits (N, Vp) = (softmax(row) - onehot(target)) * dloss, written (=), 0 in
 * the padded columns and in masked rows. dlogits may alias logits. */
ts_status ts_cuda_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                        const int32_t *targets, float dloss, int N, int V, int Vp);
/* The vocabulary-parallel pieces, as ts_cpu_ce_shard_* (see cpu_kernels.h for
 * how the caller assembles lse from them with two all-reduces):
 *   ce_shard_max      rowmax (N) = max over the V_loc real local columns (-inf if none)
 *   ce_shard_sumexp   stats (N, 2) = {sum exp(x - rowmax), x[target - v0] if local else 0}
 *   ce_shard_backward dlogits (N, Vp_loc) (=), one-hot only where the target is local;
 *                     dlogits may alias logits. */
ts_status ts_cuda_ce_shard_max(float *rowmax, const float *logits, int N, int V_loc, int Vp_loc);
ts_status ts_cuda_ce_shard_sumexp(float *stats, const float *logits, const float *rowmax,
                                  const int32_t *targets, int v0, int N, int V_loc, int Vp_loc);
ts_status ts_cuda_ce_shard_backward(float *dlogits, const float *logits, const float *lse,
                                    const int32_t *targets, float dloss, int v0, int N, int V_loc,
                                    int Vp_loc);

/* --- AdamW over f32 master weights (adamw.cu) ----------------------------------
 * The update of ts_cpu_adamw, elementwise, on param, m, v (n) with grad (n);
 * t is the 1-based step, bias corrections are computed in double on the host
 * as on the CPU. When param_bf16 (n) is not NULL it receives the updated
 * parameters rounded to bf16 (nearest, ties to even: ts_f32_to_bf16), the
 * compute copy for the bf16 GEMMs, in the same pass; with zero_grad, grad is
 * left 0 (as on the CPU). */
ts_status ts_cuda_adamw(float *param, float *m, float *v, uint16_t *param_bf16, float *grad,
                        size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                        int t, float grad_scale, int zero_grad);

/* --- reductions and conversions (reduce.cu) ------------------------------------
 * sumsq: *out (one double, DEVICE memory, written =) = sum of x[i]^2 (n),
 * accumulated in double. Deterministic two-pass reduction: a fixed grid of
 * blocks each sums a fixed slice into a partial, then one block adds the
 * partials in order. The partials live in a static device array, so calls
 * must not run concurrently on two streams. */
ts_status ts_cuda_sumsq(double *out, const float *x, size_t n);
/* x (n) = round_to_bf16(x) in place; out (n) = bf16(in) (nearest, ties to even,
 * NaN stays NaN, bit for bit ts_f32_to_bf16); out (n) = f32(in). */
ts_status ts_cuda_round_bf16(float *x, size_t n);
ts_status ts_cuda_f32_to_bf16(uint16_t *out, const float *in, size_t n);
ts_status ts_cuda_bf16_to_f32(float *out, const uint16_t *in, size_t n);

/* --- the model's small kernels and memory operations (model_extra.cu) ----------
 * As ts_cpu_add_bias, ts_cpu_bias_grad (each column's rows summed in order, as
 * the CPU sums them)
 * and ts_cpu_ce_shard_loss (log on the device: within an ulp):
 *   add_bias       out (N, C) += bias (C)
 *   bias_grad      dbias (C) += column sums of dout (N, C)
 *   ce_shard_loss  lse (N) = rowmax + log(stats[., 0]); losses (N) = lse -
 *                  stats[., 1], 0 where targets (N) is -1 */
ts_status ts_cuda_add_bias(float *out, const float *bias, int N, int C);
ts_status ts_cuda_bias_grad(float *dbias, const float *dout, int N, int C);
ts_status ts_cuda_ce_shard_loss(float *losses, float *lse, const float *rowmax, const float *stats,
                                const int32_t *targets, int N);
/* Stream-ordered on ts_cuda_stream(): zero `bytes` of device memory; copy
 * device to device; the sequence-parallel staging of a hidden state (B, T, C)
 * against per-rank blocks (tp, B, T/tp, C): seq_from_stage full = stage's
 * blocks put back in sequence order, seq_to_stage the reverse. */
ts_status ts_cuda_zero(void *ptr, size_t bytes);
ts_status ts_cuda_copy(void *dst, const void *src, size_t bytes);
/* The mixture of experts' weighted sum of k rows per token and its
 * gradient (moe.cu; kernels/cpu/cpu_kernels.h has the arithmetic). */
ts_status ts_cuda_moe_rows_sum(float *out, const float *rows, const float *w, int N, int k, int C);
ts_status ts_cuda_moe_rows_sum_backward(float *drows, float *dw, const float *dout,
                                        const float *rows, const float *w, int N, int k, int C);
/* rows x width bytes between pitched device buffers (cudaMemcpy2DAsync). */
ts_status ts_cuda_copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                          size_t rows);
ts_status ts_cuda_seq_from_stage(float *full, const float *stage, int tp, int B, int T, int C);
ts_status ts_cuda_seq_to_stage(float *stage, const float *full, int tp, int B, int T, int C);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_KERNELS_CUDA_H */
