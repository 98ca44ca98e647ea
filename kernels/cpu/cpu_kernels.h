/*
 * cpu_kernels.h — the CPU reference kernels of a GPT-2 step, and those a
 * Llama-class block adds (RMSNorm, rotary embeddings, SwiGLU, grouped-query
 * attention).
 *
 * Every kernel is a plain function over float arrays: `out` first, inputs
 * next, dimensions last (B batch, T time, C channels, NH heads, V vocabulary,
 * Vp padded vocabulary, N = B*T rows). Shapes are given in the comments.
 * Kernels know nothing of ranks, modules or the allocator; they never
 * allocate except for small per-thread scratch on the stack.
 *
 * One rule for every backward kernel: it ACCUMULATES (+=) into every gradient
 * it writes, parameters and activations alike, so callers zero gradient
 * buffers before the first use. The single exception is
 * ts_cpu_crossentropy_backward, which writes dlogits (=) so it may run in
 * place over the logits.
 *
 * Threads. Loops are cut into tasks that the team shares out (tasks.h): each
 * task writes its own part of the output (ts_cpu_sumsq's tasks their own
 * partial sums, added in order), so every kernel gives the same bits on any
 * number of threads (kernels_same_bits_on_1_2_3_threads; a whole training
 * run: cli_threads_same_bits).
 *
 * These kernels are the reference the CUDA kernels are tested against.
 */
#ifndef TESSERA_KERNELS_CPU_H
#define TESSERA_KERNELS_CPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the threads used by OpenMP loops and by the BLAS (0 leaves them). */
void ts_cpu_set_threads(int n);
int ts_cpu_get_threads(void);
/* The CPU core whose kernels OpenBLAS runs ("Zen", "Haswell", "SkylakeX"...:
 * its choice, or OPENBLAS_CORETYPE's): the GEMM's bits depend on it. */
const char *ts_cpu_blas_core(void);

/* --- GEMM (CBLAS) ----------------------------------------------------------
 * out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC); bias may be NULL. */
void ts_cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias,
                           int N, int C, int OC);
/* dinp (N, C) += dout (N, OC) @ weight (OC, C)
 * dweight (OC, C) += dout^T @ inp
 * dbias (OC) += column sums of dout
 * Any of dinp, dweight, dbias may be NULL to skip that product. */
void ts_cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC);

/* --- token + learned position embedding -----------------------------------
 * out (B, T, C) = wte[tokens[b,t]] + wpe[pos0 + t]
 * tokens (B, T) are ids in [0, V); wte (V, C); wpe (maxT, C). */
void ts_cpu_embedding_forward(float *out, const int32_t *tokens, const float *wte, const float *wpe,
                              int B, int T, int C, int pos0);
/* dwte (V, C) += scatter of dout by token; dwpe (maxT, C) += sum over b. */
void ts_cpu_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                               int B, int T, int C, int pos0);

/* The same, cut for a vocabulary-parallel embedding (a rank holds rows
 * [v0, v0 + V_loc) of wte) and with positions added separately, which lets
 * a sequence-parallel rank add the positions of its own slice of T:
 *   embedding_shard_forward   out (N, C) = wte[tok - v0], or 0 when the token
 *                             is not in the shard (written, =)
 *   embedding_shard_backward  dwte (V_loc, C) += scatter of dout (N, C)
 *   position_forward          out (B, T, C) += wpe[pos0 + t]
 *   position_backward         dwpe (maxT, C) += sum over b of dout (B, T, C)
 * embedding_shard_forward(v0 = 0, V_loc = V) then position_forward equals
 * ts_cpu_embedding_forward bit for bit. */
void ts_cpu_embedding_shard_forward(float *out, const int32_t *tokens, const float *wte, int v0,
                                    int V_loc, int N, int C);
void ts_cpu_embedding_shard_backward(float *dwte, const float *dout, const int32_t *tokens, int v0,
                                     int V_loc, int N, int C);
void ts_cpu_position_forward(float *out, const float *wpe, int B, int T, int C, int pos0);
void ts_cpu_position_backward(float *dwpe, const float *dout, int B, int T, int C, int pos0);

/* --- LayerNorm (eps 1e-5) -------------------------------------------------
 * out (N, C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) saved. */
#define TS_LAYERNORM_EPS 1e-5f
void ts_cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int N, int C);
void ts_cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C);

/* --- GELU, tanh approximation ----------------------------------------------
 * out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
void ts_cpu_gelu_forward(float *out, const float *inp, size_t n);
void ts_cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);

/* --- causal multi-head self-attention --------------------------------------
 * qkv (B, T, 3C) holds q, k, v side by side, each (B, T, NH, C/NH).
 * att (B, NH, T, T) receives the softmax probabilities (row t is zero past t),
 * scaled by 1/sqrt(C/NH) before the softmax; out (B, T, C) = att @ v. */
void ts_cpu_attention_forward(float *out, float *att, const float *qkv, int B, int T, int C,
                              int NH);
/* dqkv (B, T, 3C) += gradient through att @ v, the softmax and q k^T.
 * scratch (B, NH, T, T) is workspace the kernel overwrites. */
void ts_cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *att, int B, int T, int C, int NH);
/* Selective activation recomputation, with no (B, NH, T, T) array at all:
 * the forward's out without keeping att, and the backward without att,
 * each block of query rows' probabilities made again by the forward's code
 * (the same bits) just before its use. Both work in a scratch of
 * ts_cpu_attention_recompute_floats: two blocks of at most 64 rows of T per
 * (batch, head). */
size_t ts_cpu_attention_recompute_floats(int B, int NH, int T);
void ts_cpu_attention_forward_unsaved(float *out, float *scratch, const float *qkv, int B, int T,
                                      int C, int NH);
void ts_cpu_attention_backward_recompute(float *dqkv, float *scratch, const float *dout,
                                         const float *qkv, int B, int T, int C, int NH);

/* --- block attention: a block of queries against a block of keys -----------
 * (attention_block.c) The step of ring attention (context parallelism): the
 * queries of one part of the sequence against the keys and values of
 * another, with the log-sum-exp saved so that partial results over disjoint
 * key blocks merge exactly, and no (Tq, Tk) matrix anywhere.
 * NH heads of hs = C/NH; scores s_ij = q_i . k_j / sqrt(hs) per head. Tensors
 * are given by row strides in floats (only the first C columns are used):
 *   q (B, Tq, qs), dq    element (b, i, h, d) at [(b*Tq + i)*qs + h*hs + d]
 *   k, v (B, Tk, kvs), dk, dv          (b, j, h, d) at [(b*Tk + j)*kvs + ...]
 *   out, dout (B, Tq, os)              (b, i, h, d) at [(b*Tq + i)*os + ...]
 *   lse (B, NH, Tq), contiguous        [(b*NH + h)*Tq + i]
 * Causal offset: key j is visible to query i iff j <= i + offset (offset =
 * position of query row 0 - position of key row 0): offset >= Tk - 1 masks
 * nothing, offset < -(Tq - 1) everything. Inside a packed qkv (B, T, 3C),
 * q = qkv, k = qkv + C, v = qkv + 2C with qs = kvs = 3C, os = C; with Tq =
 * Tk = T and offset 0 these are ts_cpu_attention_forward / _backward.
 *
 * forward   out (=) = softmax over the visible keys of s, times v;
 *           lse (=) = log sum_j exp(s_ij) over the visible j (max + log sum
 *           exp(s - max)). A row with no visible key: out 0, lse -INFINITY.
 * merge     folds (out2, lse2), the same rows over a disjoint set of keys,
 *           into (out, lse) in place: L = log(exp(lse) + exp(lse2)) (max +
 *           log1p(exp(min - max))), out = out e^(lse-L) + out2 e^(lse2-L).
 *           A side at -INFINITY adds nothing; both: out 0, lse -INFINITY.
 *           out2 has out's stride os. Never produces NaN from -INFINITY.
 * backward  given the FINAL out and lse (merged over every key block) and
 *           dout, accumulates (+=) this key block's part of the gradient:
 *           P = exp(s - lse) on visible keys; D_i = dout_i . out_i;
 *           dv_j += sum_i P_ij dout_i; dS = P (dout_i . v_j - D_i);
 *           dq_i += scale sum_j dS_ij k_j; dk_j += scale sum_i dS_ij q_i.
 *           Rows with lse = -INFINITY contribute nothing.
 * Deterministic: forward and merge rows are independent; the backward
 * splits (batch, head) pairs across threads, each the only writer of its
 * head's columns. */
void ts_cpu_attention_block_forward(float *out, float *lse, const float *q, const float *k,
                                    const float *v, int B, int Tq, int Tk, int C, int NH, int qs,
                                    int kvs, int os, int64_t offset);
void ts_cpu_attention_block_merge(float *out, float *lse, const float *out2, const float *lse2,
                                  int B, int Tq, int C, int NH, int os);
void ts_cpu_attention_block_backward(float *dq, float *dk, float *dv, const float *q,
                                     const float *k, const float *v, const float *out,
                                     const float *dout, const float *lse, int B, int Tq, int Tk,
                                     int C, int NH, int qs, int kvs, int os, int64_t offset);

/* --- the kernels of a Llama-class block ---------------------------------------
 * RMSNorm, rotary position embeddings (with Llama 3's rope scaling), the
 * SwiGLU gate and grouped-query causal attention (rmsnorm.c, rope.c,
 * swiglu.c, gqa_attention.c). Same rules as above: backward accumulates
 * (+=), every task writes its own outputs, the same bits on any thread
 * count. */

/* RMSNorm (Zhang & Sennrich 2019), no bias:
 * out (N, C) = inp * rstd * weight (C); rstd (N) = 1 / sqrt(mean_c(inp^2) + eps)
 * saved; in float, as the LayerNorm. backward: dinp (N, C) +=, dweight (C)
 * += (rows summed in order). */
void ts_cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                            float eps, int N, int C);
void ts_cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C);

/* Rotary position embeddings (Su et al. 2021) in Hugging Face transformers'
 * "rotate_half" layout: within a head of hs (even) floats, element d < hs/2
 * pairs with d + hs/2; with a = pos[n] * inv_freq[d],
 *   out_d        = x_d cos a - x_{d+hs/2} sin a
 *   out_{d+hs/2} = x_{d+hs/2} cos a + x_d sin a.
 * The heads sit inside packed rows: row n holds nheads heads of hs side by
 * side from its first float, rows `is` floats apart in inp, `os` in out (so
 * inp = qkv + col, is = the qkv row's width, picks the q or the k heads; in
 * the packed qkv of ts_cpu_gqa_attention_forward, inp = qkv and nheads =
 * NH + NKV rotate q and k in one call).
 * pos (N) is each row's position (int32): a chunk of a sequence or a
 * document that restarts at 0 is only other positions. The angle, its
 * cosine and sine are computed in double, per row, from inv_freq (hs/2),
 * then rounded to float: the same on any thread split.
 * forward   out (=); out may equal inp (in place) when os == is.
 * backward  dinp += the rotation by -a of dout (the transpose); dinp must
 *           not overlap dout. */
void ts_cpu_rope_forward(float *out, const float *inp, const int32_t *pos, const float *inv_freq,
                         int N, int nheads, int hs, int os, int is);
void ts_cpu_rope_backward(float *dinp, const float *dout, const int32_t *pos, const float *inv_freq,
                          int N, int nheads, int hs, int ds, int dos);

/* Llama 3's rope scaling (transformers' _compute_llama3_parameters), the
 * `rope_scaling` of a Llama 3.1 config: factor 8, low_freq_factor 1,
 * high_freq_factor 4, original_max_position_embeddings 8192. */
typedef struct {
    double factor;
    double low_freq_factor;
    double high_freq_factor;
    int original_max_position_embeddings;
} ts_rope_scaling;

/* inv_freq (hs/2) = theta^(-2d/hs), computed in double and rounded once.
 * With s (may be NULL: no scaling), per frequency, wavelen = 2 pi / inv_freq,
 * O = original_max_position_embeddings:
 *   wavelen < O / high_freq_factor   unchanged
 *   wavelen > O / low_freq_factor    inv_freq / factor
 *   otherwise                        (1 - m) inv_freq / factor + m inv_freq,
 *                                    m = (O / wavelen - low) / (high - low). */
void ts_cpu_rope_inv_freq(float *inv_freq, int hs, double theta, const ts_rope_scaling *s);

/* SwiGLU (Shazeer 2020) over one packed (N, 2F) input, a row's gate in its
 * first F columns and up in the next F (one GEMM against [W_gate; W_up]):
 *   out (N, F) = silu(gate) * up,  silu(x) = x / (1 + exp(-x))
 * backward: dinp (N, 2F) += [dgate | dup]. Finite for any finite input
 * (silu(-100) = -0, silu(100) = 100). */
void ts_cpu_swiglu_forward(float *out, const float *inp, int N, int F);
void ts_cpu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);

/* Grouped-query causal attention (Ainslie et al. 2023): NH query heads,
 * NKV key/value heads (NKV divides NH), query head h reading kv head
 * h / (NH / NKV); head size hs (at most TS_CPU_GQA_MAX_HEAD: a caller
 * refuses more; the kernels stop the process saying so rather than overrun
 * their tiles), scores scaled by 1/sqrt(hs).
 * The packed row of qkv (B, T, W), W = (NH + 2 NKV) hs, holds q (NH hs),
 * then k (NKV hs), then v (NKV hs); with NKV = NH it is the (B, T, 3C) of
 * ts_cpu_attention_forward, C = NH hs. out (B, T, NH hs). K and V are never
 * repeated.
 * forward   out (=), and lse (=) (B, NH, T), each row's log sum_j exp(s_tj)
 *           over its keys j <= t: ts_cpu_gqa_attention_saved_floats, all
 *           the backward keeps besides qkv and out (no (T, T) array).
 * backward  dqkv (B, T, W) += the gradient of out against dout (B, T, NH hs),
 *           P = exp(s - lse) made again a tile of keys at a time. One task
 *           per (batch, kv head) is the only writer of its dk, dv, each
 *           key's summed over its NH/NKV query heads in order, then rows in
 *           order: the same bits on any thread count (and at most B NKV
 *           threads busy). */
#define TS_CPU_GQA_MAX_HEAD 1024
size_t ts_cpu_gqa_attention_saved_floats(int B, int NH, int T);
void ts_cpu_gqa_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH,
                                  int NKV, int hs);
void ts_cpu_gqa_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int NH,
                                   int NKV, int hs);

/* --- residual add -----------------------------------------------------------
 * out (n) = a + b;  backward: da += dout, db += dout (either may be NULL). */
void ts_cpu_residual_forward(float *out, const float *a, const float *b, size_t n);
void ts_cpu_residual_backward(float *da, float *db, const float *dout, size_t n);

/* --- softmax cross-entropy over a padded vocabulary ------------------------
 * logits (N, Vp), only the first V columns are real; columns [V, Vp) never
 * win and get no gradient. targets (N): a class id in [0, V), or -1 for a
 * masked position (loss 0, no gradient).
 * losses (N) = logsumexp(row) - row[target];  lse (N) = logsumexp(row)
 * (lse is saved for the backward). */
void ts_cpu_crossentropy_forward(float *losses, float *lse, const float *logits,
                                 const int32_t *targets, int N, int V, int Vp);
/* dlogits (N, Vp) = (softmax(row) - onehot(target)) * dloss, written (=), and
 * 0 in the padded columns and in masked rows. dlogits may alias logits. */
void ts_cpu_crossentropy_backward(float *dlogits, const float *logits, const float *lse,
                                  const int32_t *targets, float dloss, int N, int V, int Vp);

/* --- vocabulary-parallel cross-entropy -------------------------------------
 * A rank holds columns [v0, v0 + Vp_loc) of the padded vocabulary; the real
 * ones among them are the first V_loc = clamp(V - v0, 0, Vp_loc). The loss
 * of row n is lse - x[target] with lse = gmax + log(sum over ALL ranks of
 * exp(x - gmax)), assembled by the caller with two reductions:
 *   1. ts_cpu_ce_shard_max     rowmax (N): max over local real columns
 *                              (-inf if none)           -> all-reduce MAX
 *   2. ts_cpu_ce_shard_sumexp  stats (N, 2): {sum exp(x - gmax), x[target]
 *                              if the target is local, else 0} -> all-reduce SUM
 *   3. lse = gmax + log(stats[0]); loss = lse - stats[1] (0 where masked)
 *   4. ts_cpu_ce_shard_backward dlogits (=) as crossentropy_backward, with
 *                              the one-hot only where the target is local.
 * With one shard (v0 = 0, V_loc = V) they equal the full-vocabulary kernels.
 * The full logits row never exists on one rank. dlogits may alias logits. */
void ts_cpu_ce_shard_max(float *rowmax, const float *logits, int N, int V_loc, int Vp_loc);
void ts_cpu_ce_shard_sumexp(float *stats, const float *logits, const float *rowmax,
                            const int32_t *targets, int v0, int N, int V_loc, int Vp_loc);
void ts_cpu_ce_shard_backward(float *dlogits, const float *logits, const float *lse,
                              const int32_t *targets, float dloss, int v0, int N, int V_loc,
                              int Vp_loc);

/* 3. as a kernel: lse (N) = rowmax + log(stats[., 0]); losses (N) = lse -
 * stats[., 1], or 0 where targets (N) is masked (-1). (model_extra.c) */
void ts_cpu_ce_shard_loss(float *losses, float *lse, const float *rowmax, const float *stats,
                          const int32_t *targets, int N);

/* --- memory (reduce.c) -------------------------------------------------------
 * zero  bytes of p set to 0; copy  bytes from src to dst (not overlapping);
 * large ones shared among the threads. */
void ts_cpu_zero(void *p, size_t bytes);
void ts_cpu_copy(void *dst, const void *src, size_t bytes);

/* --- biases (model_extra.c) --------------------------------------------------
 * add_bias         out (N, C) += bias (C) on every row
 * bias_grad        dbias (C) += column sums of dout (N, C), rows in order
 * bias_grad_block  the same for columns [c0, c0 + w) only, summed
 *                  TS_CPU_BIAS_BLOCK columns at a time over whole rows: one
 *                  task of bias_grad and of the linear layer's backward */
#define TS_CPU_BIAS_BLOCK 64
void ts_cpu_add_bias(float *out, const float *bias, int N, int C);
void ts_cpu_bias_grad(float *dbias, const float *dout, int N, int C);
void ts_cpu_bias_grad_block(float *dbias, const float *dout, int N, int C, int c0, int w);

/* --- mixture of experts (moe.c) --------------------------------------------
 * Row r of rows (N k, C) is token r / k's output of its (r % k)-th expert.
 * moe_rows_sum           out (N, C) += sum_j w[t k + j] rows[t k + j]
 *                        (w NULL: weights 1), j in order
 * moe_rows_sum_backward  drows (N k, C) = w[r] dout[r / k];
 *                        dw (N k) = rows[r] . dout[r / k] */
void ts_cpu_moe_rows_sum(float *out, const float *rows, const float *w, int N, int k, int C);
void ts_cpu_moe_rows_sum_backward(float *drows, float *dw, const float *dout, const float *rows,
                                  const float *w, int N, int k, int C);

/* --- AdamW (decoupled weight decay, Loshchilov & Hutter 2019) --------------
 * For each i:  g = grad[i] * grad_scale
 *   m = beta1 m + (1-beta1) g;  v = beta2 v + (1-beta2) g^2
 *   mhat = m / (1 - beta1^t);   vhat = v / (1 - beta2^t)
 *   param -= lr * (mhat / (sqrt(vhat) + eps) + weight_decay * param)
 * t is the 1-based step count. With zero_grad, grad[i] is left 0 once read
 * (the next step's gradients start from it without a zeroing pass). */
void ts_cpu_adamw(float *param, float *m, float *v, float *grad, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t, float grad_scale,
                  int zero_grad);

/* --- reductions and conversions -------------------------------------------- */
/* Sum of squares, accumulated in double, deterministic for a thread count. */
double ts_cpu_sumsq(const float *x, size_t n);
/* x[i] = round_to_bf16(x[i]) in place (values stay f32, precision bf16). */
void ts_cpu_round_bf16(float *x, size_t n);
void ts_cpu_f32_to_bf16(uint16_t *out, const float *in, size_t n);
void ts_cpu_bf16_to_f32(float *out, const uint16_t *in, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_KERNELS_CPU_H */
