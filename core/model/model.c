/*
 * model.c — GPT-2 parameters, initialisation and the three module kinds
 * (embedding, transformer block, head: final LayerNorm + tied LM head +
 * cross-entropy). The math lives in the kernels; this file wires buffers.
 * Every tensor is allocated, copied and computed on through the model's
 * backend (m->be, backend.h), so the same code runs on the CPU and on a GPU;
 * the host reads only the per-token losses (for the loss sum).
 *
 * Not here: the optimizer (optim.c), the training loop and schedules
 * (train.c), checkpoints (checkpoint.c).
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* ---------------------------------------------------------------------------
 * Saved state: one allocation of floats per micro-batch slot.
 * ------------------------------------------------------------------------- */
typedef struct saved_table {
    const ts_backend *be; /* where the slots are allocated */
    int cap;
    float **slot;
    const float **input; /* the module's input x of that micro-batch */
} saved_table;

static float *saved_alloc(saved_table *t, int mb, size_t floats, const float *input) {
    if (mb >= t->cap) {
        int cap = t->cap ? t->cap : 4;
        while (cap <= mb)
            cap *= 2;
        float **s = realloc(t->slot, (size_t)cap * sizeof *s);
        if (s) t->slot = s;
        const float **in = s ? realloc(t->input, (size_t)cap * sizeof *in) : NULL;
        if (!in) {
            ts_error(TS_ERR_NOMEM, "model: out of memory for saved-state table");
            return NULL;
        }
        t->input = in;
        for (int i = t->cap; i < cap; i++) {
            s[i] = NULL;
            in[i] = NULL;
        }
        t->cap = cap;
    }
    TS_ASSERT(t->slot[mb] == NULL); /* one forward per micro-batch in flight */
    t->slot[mb] = t->be->alloc(TS_MEM_ACTS, floats * sizeof(float));
    t->input[mb] = input;
    return t->slot[mb];
}

static const float *saved_input(const saved_table *t, int mb) {
    return t->input[mb];
}

static void saved_destroy(saved_table *t);
static void saved_release(saved_table *t, int mb);

/* Shared by every module kind: their impl starts with the saved_table. */
static void module_release(ts_module *mod, int mb) {
    saved_release(mod->impl, mb);
}

static void module_destroy(ts_module *mod) {
    saved_destroy(mod->impl);
    free(mod->impl);
    free(mod);
}

static float *saved_get(saved_table *t, int mb) {
    TS_ASSERT(mb < t->cap && t->slot[mb] != NULL);
    return t->slot[mb];
}

static void saved_release(saved_table *t, int mb) {
    t->be->free(t->slot[mb]);
    t->slot[mb] = NULL;
}

static void saved_destroy(saved_table *t) {
    for (int i = 0; i < t->cap; i++)
        t->be->free(t->slot[i]);
    free(t->slot);
    free(t->input);
    t->slot = NULL;
    t->input = NULL;
    t->cap = 0;
}

/* ---------------------------------------------------------------------------
 * Helpers shared by the modules.
 * ------------------------------------------------------------------------- */
static float *model_work(ts_model *m, size_t floats) {
    if (floats > m->work_floats) {
        m->be->free(m->work);
        m->work = m->be->alloc(TS_MEM_ACTS, floats * sizeof(float));
        m->work_floats = m->work ? floats : 0;
    }
    return m->work;
}

static ts_status round_if_bf16(const ts_model *m, float *x, size_t n) {
    return m->dtype == TS_BF16 ? m->be->round_bf16(x, n) : TS_OK;
}

/* A device failure while staging a weight leaves no sane way on: abort, as
 * the core does on any device failure. */
static void weight_fail(const ts_param *p) {
    fprintf(stderr, "tessera: staging %s: %s\n", p->value.name, ts_last_error());
    TS_ASSERT(!"a weight could not be staged");
}

const float *ts_model_weight(ts_model *m, const ts_param *p, int slot) {
    if (m->dtype == TS_F32) return p->value.data;
    size_t n = (size_t)ts_tensor_numel(&p->value);
    if (n > m->stage_floats[slot]) {
        m->be->free(m->stage[slot]);
        m->stage[slot] = m->be->alloc(TS_MEM_ACTS, n * sizeof(float));
        m->stage_floats[slot] = m->stage[slot] ? n : 0;
        if (!m->stage[slot]) weight_fail(p);
    }
    if (m->be->bf16_to_f32(m->stage[slot], p->value.data, n)) weight_fail(p);
    return m->stage[slot];
}

/* The linear layers: out (N, OC) = inp @ W^T + bias with W the parameter
 * `w` (OC, C), and its backward. In f32 the backend's f32 GEMMs; in bf16 its
 * bf16 GEMMs on the bf16 parameter itself (no f32 staging), with operand
 * scratch in m->mm_work. */
static void *matmul_work(ts_model *m, int N, int C, int OC) {
    size_t bytes = m->be->matmul_bf16_work_bytes(N, C, OC);
    if (bytes > m->mm_work_bytes) {
        m->be->free(m->mm_work);
        m->mm_work = m->be->alloc(TS_MEM_ACTS, bytes);
        m->mm_work_bytes = m->mm_work ? bytes : 0;
    }
    return m->mm_work;
}

static ts_status linear_forward(ts_model *m, float *out, const float *inp, const ts_param *w,
                                const float *bias, int N, int C, int OC) {
    if (m->dtype == TS_F32) return m->be->matmul_forward(out, inp, w->value.data, bias, N, C, OC);
    void *work = matmul_work(m, N, C, OC);
    if (!work) return TS_ERR_NOMEM;
    return m->be->matmul_forward_bf16(out, work, inp, w->value.data, bias, N, C, OC);
}

static ts_status linear_backward(ts_model *m, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const ts_param *w, int N,
                                 int C, int OC) {
    if (m->dtype == TS_F32)
        return m->be->matmul_backward(dinp, dweight, dbias, dout, inp, w->value.data, N, C, OC);
    void *work = matmul_work(m, N, C, OC);
    if (!work) return TS_ERR_NOMEM;
    return m->be->matmul_backward_bf16(dinp, dweight, dbias, work, dout, inp, w->value.data, N, C,
                                       OC);
}

/* The host's copy of n floats of device memory `x`: x itself on the CPU,
 * else copied into the model's host staging buffer. */
static ts_status host_view(ts_model *m, const float *x, size_t n, const float **host) {
    if (m->be->kind == TS_DEVICE_CPU) {
        *host = x;
        return TS_OK;
    }
    if (n > m->host_stage_floats) {
        ts_mem_free(m->host_stage);
        m->host_stage = ts_mem_alloc(TS_MEM_OTHER, n * sizeof(float));
        m->host_stage_floats = m->host_stage ? n : 0;
        if (!m->host_stage) return TS_ERR_NOMEM;
    }
    TS_TRY(m->be->to_host(m->host_stage, x, n * sizeof(float)));
    *host = m->host_stage;
    return TS_OK;
}

float *ts_model_param_f32(ts_model *m) {
    return m->dtype == TS_F32 ? (float *)m->param_data : NULL;
}

static float *grad_of(const ts_param *p) {
    return p->grad.data;
}

/* Rows of the hidden state on this rank: all B*T, or B*T/tp with sequence
 * parallelism (each sequence's slice [tp_rank*T/tp, (tp_rank+1)*T/tp)). */
static int local_T(const ts_model *m, int T) {
    return m->shard.sp ? T / m->shard.tp : T;
}

/* --- the tensor-parallel collectives, derived from the shard description.
 * Hidden states are (B, T, C) row-major; under sequence parallelism a rank
 * holds (B, T/tp, C), a slice of every sequence, so a gather or scatter along
 * T goes through a (tp, B, T/tp, C) staging buffer that is contiguous per
 * rank. With tp == 1 each is a copy (or nothing). */
static float *tp_stage(ts_model *m, size_t floats) {
    if (floats > m->tp_stage_floats) {
        m->be->free(m->tp_stage);
        m->tp_stage = m->be->alloc(TS_MEM_COMM, floats * sizeof(float));
        m->tp_stage_floats = m->tp_stage ? floats : 0;
    }
    return m->tp_stage;
}

/* full (B, T, C) = the all-reduce of partial sums x (B, T, C), in place. */
static ts_status tp_all_reduce(ts_model *m, float *x, size_t n) {
    if (m->shard.tp == 1) return TS_OK;
    return ts_comm_all_reduce(m->shard.tp_comm, x, x, n, TS_F32, TS_REDUCE_SUM);
}

/* full (B, T, C) = the sequence slices (B, T/tp, C) of every rank. */
static ts_status sp_gather(ts_model *m, float *full, const float *local, int B, int T, int C) {
    int tp = m->shard.tp, Tl = T / tp;
    size_t blk = (size_t)B * Tl * C;
    float *stage = tp_stage(m, blk * tp);
    if (!stage) return TS_ERR_NOMEM;
    TS_TRY(ts_comm_all_gather(m->shard.tp_comm, local, stage, blk, TS_F32));
    return m->be->seq_from_stage(full, stage, tp, B, T, C);
}

/* local (B, T/tp, C) = this rank's sequence slice of the sum over ranks of
 * the partial sums full (B, T, C). */
static ts_status sp_reduce_scatter(ts_model *m, float *local, const float *full, int B, int T,
                                   int C) {
    int tp = m->shard.tp, Tl = T / tp;
    size_t blk = (size_t)B * Tl * C;
    float *stage = tp_stage(m, blk * tp);
    if (!stage) return TS_ERR_NOMEM;
    TS_TRY(m->be->seq_to_stage(stage, full, tp, B, T, C));
    return ts_comm_reduce_scatter(m->shard.tp_comm, stage, local, blk, TS_F32, TS_REDUCE_SUM);
}

/* Entering a tensor-parallel region (the "f" of Megatron's f/g pair): the
 * replicated input the column-parallel products need. Without sequence
 * parallelism the hidden state already is that (returns it); with it, the
 * slices are all-gathered into `buf`. */
static ts_status tp_enter(ts_model *m, const float *x, float *buf, int B, int T, int C,
                          const float **full) {
    if (!m->shard.sp) {
        *full = x;
        return TS_OK;
    }
    TS_TRY(sp_gather(m, buf, x, B, T, C));
    *full = buf;
    return TS_OK;
}

/* Leaving one (the "g"): the row-parallel product's partial sums p (B, T, C)
 * become the hidden state: all-reduced in place (returned in p), or with
 * sequence parallelism reduce-scattered into `out` (B, T/tp, C). */
static ts_status tp_leave(ts_model *m, float *p, float *out, int B, int T, int C,
                          const float **result) {
    if (!m->shard.sp) {
        TS_TRY(tp_all_reduce(m, p, (size_t)B * T * C));
        *result = p;
        return TS_OK;
    }
    TS_TRY(sp_reduce_scatter(m, out, p, B, T, C));
    *result = out;
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * Embedding: out = wte[tokens] + wpe[t], wte cut by vocabulary over tp.
 * ------------------------------------------------------------------------- */
/* Every module's impl starts with its saved_table, so that releasing and
 * destroying are shared (module_release, module_destroy). */
typedef struct embedding_impl {
    saved_table saved;
    ts_param *wte, *wpe;
} embedding_impl;

static ts_status embedding_forward(ts_module *mod, ts_step_ctx *ctx, const ts_tensor *x,
                                   ts_tensor *y) {
    (void)x;
    embedding_impl *e = mod->impl;
    ts_model *m = mod->model;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model, Tl = local_T(m, T);
    size_t N = (size_t)B * T, Nl = (size_t)B * Tl;
    /* Saved: only the output (B, Tl, C); the lookup's partial sums live in
     * the workspace until reduced. */
    float *out = saved_alloc(&e->saved, ctx->mb, Nl * C, NULL);
    if (!out) return TS_ERR_NOMEM;
    int Vl = (int)e->wte->value.shape[0], v0 = (int)e->wte->block_offset[0];
    float *partial = m->shard.sp ? model_work(m, N * C) : out;
    if (!partial) return TS_ERR_NOMEM;
    const ts_backend *be = m->be;
    TS_TRY(be->embedding_shard_forward(partial, ctx->tokens, ts_model_weight(m, e->wte, 0), v0, Vl,
                                       (int)N, C));
    const float *h;
    if (m->shard.tp > 1) TS_TRY(tp_leave(m, partial, out, B, T, C, &h));
    TS_TRY(be->position_forward(out, ts_model_weight(m, e->wpe, 1), B, Tl, C,
                                m->shard.sp ? m->shard.tp_rank * Tl : 0));
    TS_TRY(round_if_bf16(m, out, Nl * C));
    int64_t shape[3] = {B, Tl, C};
    ts_tensor_view(y, "embedding.out", TS_F32, 3, shape, out, TS_MEM_ACTS);
    y->device = be->kind;
    return TS_OK;
}

static ts_status embedding_backward(ts_module *mod, ts_step_ctx *ctx, const ts_tensor *dy,
                                    ts_tensor *dx) {
    (void)dx;
    embedding_impl *e = mod->impl;
    ts_model *m = mod->model;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model, Tl = local_T(m, T);
    TS_TRY(m->be->position_backward(grad_of(e->wpe), dy->data, B, Tl, C,
                                    m->shard.sp ? m->shard.tp_rank * Tl : 0));
    /* The lookup needs the gradient of every position: gather the slices. */
    const float *dfull = dy->data;
    if (m->shard.sp) {
        float *buf = model_work(m, (size_t)B * T * C);
        if (!buf) return TS_ERR_NOMEM;
        TS_TRY(sp_gather(m, buf, dy->data, B, T, C));
        dfull = buf;
    }
    int Vl = (int)e->wte->value.shape[0], v0 = (int)e->wte->block_offset[0];
    TS_TRY(m->be->embedding_shard_backward(grad_of(e->wte), dfull, ctx->tokens, v0, Vl, B * T, C));
    saved_release(&e->saved, ctx->mb);
    return TS_OK;
}

static const ts_module_ops embedding_ops = {"embedding", embedding_forward, embedding_backward,
                                            module_release, module_destroy};

/* ---------------------------------------------------------------------------
 * Transformer block (pre-LN). With tp > 1, QKV and fc are column parallel
 * (this rank's heads, this rank's 4C/tp columns), proj and fcproj row
 * parallel; Cl = C/tp channels of attention output and heads NH/tp.
 * ------------------------------------------------------------------------- */
typedef struct block_impl {
    saved_table saved;
    ts_param *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb;
    ts_param *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} block_impl;

/* The saved activations of one micro-batch, carved from one allocation.
 * Rows: Nl = B*T/tp under sequence parallelism, else N = B*T; the inputs of
 * the column-parallel products are saved as slices and gathered again in
 * backward (Megatron-LM's choice: it is what makes sequence parallelism save
 * memory). */
typedef struct block_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (Nl, C), (Nl), (Nl)           */
    float *qkv;                       /* (N, 3Cl)                       */
    float *att;                       /* the backend's saved attention
                                         state: (B, NHl, T, T) probabilities
                                         on the CPU, lse (B, NHl, T) on CUDA */
    float *atty;                      /* (N, Cl)                        */
    float *res2;                      /* (Nl, C) x + attention branch   */
    float *ln2, *ln2_mean, *ln2_rstd; /* (Nl, C), (Nl), (Nl)           */
    float *fch, *fch_gelu;            /* (N, 4Cl)                       */
    float *out;                       /* (Nl, C) res2 + MLP branch      */
} block_acts;

/* att_floats: the backend's attention_saved_floats(B, NH/tp, T). */
static size_t block_carve(block_acts *a, float *base, int B, int T, int C, int tp, int sp,
                          size_t att_floats) {
    size_t N = (size_t)B * T, Nl = sp ? N / tp : N, Cl = (size_t)C / tp, off = 0;
#define CARVE(field, count)                                                                        \
    do {                                                                                           \
        if (a) a->field = base + off;                                                              \
        off += (count);                                                                            \
    } while (0)
    CARVE(ln1, Nl * C);
    CARVE(ln1_mean, Nl);
    CARVE(ln1_rstd, Nl);
    CARVE(qkv, N * 3 * Cl);
    CARVE(att, att_floats);
    CARVE(atty, N * Cl);
    CARVE(res2, Nl * C);
    CARVE(ln2, Nl * C);
    CARVE(ln2_mean, Nl);
    CARVE(ln2_rstd, Nl);
    CARVE(fch, N * 4 * Cl);
    CARVE(fch_gelu, N * 4 * Cl);
    CARVE(out, Nl * C);
#undef CARVE
    return off;
}

/* Forward workspace: a gathered (N, C) input and an (N, C) partial sum. */
static size_t block_fwd_work(int B, int T, int C) {
    return 2 * (size_t)B * T * C;
}

/* Backward workspace, in floats (see block_backward); scratch_floats: the
 * backend's attention_scratch_floats(B, NH/tp, T). */
static size_t block_bwd_work(int B, int T, int C, int tp, size_t scratch_floats) {
    size_t N = (size_t)B * T, Cl = (size_t)C / tp;
    return N * 4 * Cl * 2 + N * C * 4 + N * Cl + N * 3 * Cl + scratch_floats;
}

/* The CPU attention's saved state and scratch: (B, NH, T, T) each. The
 * public memory estimates below count those. */
static size_t cpu_att_floats(int B, int NH, int T) {
    return (size_t)B * NH * T * T;
}

static ts_status block_forward(ts_module *mod, ts_step_ctx *ctx, const ts_tensor *x, ts_tensor *y) {
    block_impl *b = mod->impl;
    ts_model *m = mod->model;
    const ts_backend *be = m->be;
    int tp = m->shard.tp, sp = m->shard.sp;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model, NH = m->cfg.heads;
    int Cl = C / tp, NHl = NH / tp, Tl = local_T(m, T);
    int N = B * T, Nl = B * Tl;
    size_t att_floats = be->attention_saved_floats(B, NHl, T);
    size_t floats = block_carve(NULL, NULL, B, T, C, tp, sp, att_floats);
    float *base = saved_alloc(&b->saved, ctx->mb, floats, x->data);
    if (!base) return TS_ERR_NOMEM;
    block_acts a;
    block_carve(&a, base, B, T, C, tp, sp, att_floats);
    float *work = model_work(m, block_fwd_work(B, T, C));
    if (!work) return TS_ERR_NOMEM;
    float *gathered = work, *partial = work + (size_t)N * C;
    const float *xin = x->data, *full, *h;

    /* Attention branch. */
    TS_TRY(be->layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, xin, ts_model_weight(m, b->ln1w, 1),
                                 ts_model_weight(m, b->ln1b, 2), Nl, C));
    TS_TRY(round_if_bf16(m, a.ln1, (size_t)Nl * C));
    TS_TRY(tp_enter(m, a.ln1, gathered, B, T, C, &full));
    TS_TRY(linear_forward(m, a.qkv, full, b->qkvw, ts_model_weight(m, b->qkvb, 1), N, C, 3 * Cl));
    TS_TRY(round_if_bf16(m, a.qkv, (size_t)N * 3 * Cl));
    TS_TRY((m->dtype == TS_BF16 ? be->attention_forward_bf16
                                : be->attention_forward)(a.atty, a.att, a.qkv, B, T, Cl, NHl));
    TS_TRY(round_if_bf16(m, a.atty, (size_t)N * Cl));
    TS_TRY(linear_forward(m, partial, a.atty, b->projw, NULL, N, Cl, C));
    TS_TRY(tp_leave(m, partial, a.res2, B, T, C, &h));
    /* res2 = x + attention + proj bias, and the MLP's LayerNorm of it. */
    TS_TRY(be->residual_layernorm_forward(
        a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, h, xin, ts_model_weight(m, b->projb, 3),
        ts_model_weight(m, b->ln2w, 1), ts_model_weight(m, b->ln2b, 2), Nl, C,
        m->dtype == TS_BF16));

    /* MLP branch. */
    TS_TRY(tp_enter(m, a.ln2, gathered, B, T, C, &full));
    TS_TRY(linear_forward(m, a.fch, full, b->fcw, NULL, N, C, 4 * Cl));
    TS_TRY(be->bias_gelu_forward(a.fch_gelu, a.fch, ts_model_weight(m, b->fcb, 1), N, 4 * Cl,
                                 m->dtype == TS_BF16));
    TS_TRY(linear_forward(m, partial, a.fch_gelu, b->fcprojw, NULL, N, 4 * Cl, C));
    TS_TRY(tp_leave(m, partial, a.out, B, T, C, &h));
    TS_TRY(be->residual_forward(a.out, h, a.res2, (size_t)Nl * C));
    TS_TRY(be->add_bias(a.out, ts_model_weight(m, b->fcprojb, 1), Nl, C));
    TS_TRY(round_if_bf16(m, a.out, (size_t)Nl * C));

    int64_t shape[3] = {B, Tl, C};
    ts_tensor_view(y, mod->name, TS_F32, 3, shape, a.out, TS_MEM_ACTS);
    y->device = be->kind;
    return TS_OK;
}

static ts_status block_backward(ts_module *mod, ts_step_ctx *ctx, const ts_tensor *dy,
                                ts_tensor *dx) {
    block_impl *b = mod->impl;
    ts_model *m = mod->model;
    const ts_backend *be = m->be;
    int tp = m->shard.tp, sp = m->shard.sp;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model, NH = m->cfg.heads;
    int Cl = C / tp, NHl = NH / tp, Tl = local_T(m, T);
    size_t N = (size_t)B * T, Nl = (size_t)B * Tl;
    block_acts a;
    block_carve(&a, saved_get(&b->saved, ctx->mb), B, T, C, tp, sp,
                be->attention_saved_floats(B, NHl, T));

    /* Workspace: dfch_gelu, dfch (N, 4Cl); dfull, dln, dres2, gathered
     * (N, C); datty (N, Cl); dqkv (N, 3Cl); the attention's scratch. */
    float *w = model_work(m, block_bwd_work(B, T, C, tp, be->attention_scratch_floats(B, NHl, T)));
    if (!w) return TS_ERR_NOMEM;
    float *dfch_gelu = w, *dfch = dfch_gelu + N * 4 * Cl;
    float *dfull = dfch + N * 4 * Cl, *dln = dfull + N * C, *dres2 = dln + N * C;
    float *gathered = dres2 + N * C, *datty = gathered + N * C;
    float *dqkv = datty + N * Cl, *datt = dqkv + N * 3 * Cl;
    TS_TRY(be->zero(dfch_gelu, N * 4 * Cl * 2 * sizeof(float)));
    TS_TRY(be->zero(dln, N * C * sizeof(float)));
    TS_TRY(be->zero(datty, (N * Cl + N * 3 * Cl) * sizeof(float)));
    const float *dout = dy->data, *din, *full, *dh;

    /* MLP branch: the row-parallel fcproj needs the gradient of every row. */
    TS_TRY(be->bias_grad(grad_of(b->fcprojb), dout, (int)Nl, C));
    TS_TRY(tp_enter(m, dout, dfull, B, T, C, &din));
    TS_TRY(linear_backward(m, dfch_gelu, grad_of(b->fcprojw), NULL, din, a.fch_gelu, b->fcprojw,
                           (int)N, 4 * Cl, C));
    TS_TRY(be->gelu_backward(dfch, a.fch, dfch_gelu, N * 4 * Cl));
    TS_TRY(tp_enter(m, a.ln2, gathered, B, T, C, &full));
    TS_TRY(linear_backward(m, dln, grad_of(b->fcw), grad_of(b->fcb), dfch, full, b->fcw, (int)N, C,
                           4 * Cl));
    /* dln holds partial sums over tp (column-parallel input gradient). */
    TS_TRY(tp_leave(m, dln, dfull, B, T, C, &dh));
    TS_TRY(be->copy(dres2, dout, Nl * C * sizeof(float)));
    TS_TRY(be->layernorm_backward(dres2, grad_of(b->ln2w), grad_of(b->ln2b), dh, a.res2,
                                  ts_model_weight(m, b->ln2w, 1), a.ln2_mean, a.ln2_rstd, (int)Nl,
                                  C));
    /* Attention branch. */
    TS_TRY(be->bias_grad(grad_of(b->projb), dres2, (int)Nl, C));
    TS_TRY(tp_enter(m, dres2, dfull, B, T, C, &din));
    TS_TRY(
        linear_backward(m, datty, grad_of(b->projw), NULL, din, a.atty, b->projw, (int)N, Cl, C));
    TS_TRY((m->dtype == TS_BF16 ? be->attention_backward_bf16 : be->attention_backward)(
        dqkv, datt, datty, a.qkv, a.atty, a.att, B, T, Cl, NHl));
    TS_TRY(be->zero(dln, N * C * sizeof(float)));
    TS_TRY(tp_enter(m, a.ln1, gathered, B, T, C, &full));
    TS_TRY(linear_backward(m, dln, grad_of(b->qkvw), grad_of(b->qkvb), dqkv, full, b->qkvw, (int)N,
                           C, 3 * Cl));
    TS_TRY(tp_leave(m, dln, dfull, B, T, C, &dh));
    float *dxin = dx->data;
    TS_TRY(be->copy(dxin, dres2, Nl * C * sizeof(float)));
    /* The block's input is the previous module's output, kept alive by it. */
    TS_TRY(be->layernorm_backward(dxin, grad_of(b->ln1w), grad_of(b->ln1b), dh,
                                  saved_input(&b->saved, ctx->mb), ts_model_weight(m, b->ln1w, 1),
                                  a.ln1_mean, a.ln1_rstd, (int)Nl, C));
    saved_release(&b->saved, ctx->mb);
    return TS_OK;
}

static const ts_module_ops block_ops = {"block", block_forward, block_backward, module_release,
                                        module_destroy};

/* ---------------------------------------------------------------------------
 * Head: final LayerNorm, logits = lnf @ wte^T (tied, this rank's vocabulary
 * shard), cross-entropy over the shards.
 * ------------------------------------------------------------------------- */
typedef struct head_impl {
    saved_table saved;
    ts_param *lnfw, *lnfb, *wte;
} head_impl;

typedef struct head_acts {
    float *lnf, *mean, *rstd; /* (Nl, C), (Nl), (Nl)         */
    float *logits;            /* (N, Vpl): this rank's shard */
    float *losses, *lse;      /* (N), (N)                    */
} head_acts;

static size_t head_carve(head_acts *a, float *base, size_t N, size_t Nl, int C, int Vpl) {
    size_t off = 0;
#define CARVE(field, count)                                                                        \
    do {                                                                                           \
        if (a) a->field = base + off;                                                              \
        off += (count);                                                                            \
    } while (0)
    CARVE(lnf, Nl * C);
    CARVE(mean, Nl);
    CARVE(rstd, Nl);
    CARVE(logits, N * (size_t)Vpl);
    CARVE(losses, N);
    CARVE(lse, N);
#undef CARVE
    return off;
}

/* This rank's columns of the vocabulary: [v0, v0 + Vpl), the first Vl real. */
static void head_vocab(const head_impl *h, const ts_model *m, int *v0, int *Vl, int *Vpl) {
    *Vpl = (int)h->wte->value.shape[0];
    *v0 = (int)h->wte->block_offset[0];
    int real = m->cfg.vocab - *v0;
    *Vl = real < 0 ? 0 : real > *Vpl ? *Vpl : real;
}

static ts_status head_forward(ts_module *mod, ts_step_ctx *ctx, const ts_tensor *x, ts_tensor *y) {
    head_impl *h = mod->impl;
    ts_model *m = mod->model;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model, Tl = local_T(m, T);
    size_t N = (size_t)B * T, Nl = (size_t)B * Tl;
    int v0, Vl, Vpl;
    head_vocab(h, m, &v0, &Vl, &Vpl);
    float *base = saved_alloc(&h->saved, ctx->mb, head_carve(NULL, NULL, N, Nl, C, Vpl), x->data);
    if (!base) return TS_ERR_NOMEM;
    head_acts a;
    head_carve(&a, base, N, Nl, C, Vpl);
    const ts_backend *be = m->be;
    TS_TRY(be->layernorm_forward(a.lnf, a.mean, a.rstd, x->data, ts_model_weight(m, h->lnfw, 1),
                                 ts_model_weight(m, h->lnfb, 2), (int)Nl, C));
    TS_TRY(round_if_bf16(m, a.lnf, Nl * C));
    float *work = model_work(m, N * C + 3 * N);
    if (!work) return TS_ERR_NOMEM;
    float *stats = work + N * C, *rowmax = stats + 2 * N;
    const float *full;
    TS_TRY(tp_enter(m, a.lnf, work, B, T, C, &full));
    TS_TRY(linear_forward(m, a.logits, full, h->wte, NULL, (int)N, C, Vpl));
    TS_TRY(round_if_bf16(m, a.logits, N * (size_t)Vpl));
    /* Cross-entropy over the vocabulary shards: max, then sum-exp and the
     * target's logit, each reduced over tp. */
    TS_TRY(be->ce_shard_max(rowmax, a.logits, (int)N, Vl, Vpl));
    if (m->shard.tp > 1)
        TS_TRY(ts_comm_all_reduce(m->shard.tp_comm, rowmax, rowmax, N, TS_F32, TS_REDUCE_MAX));
    TS_TRY(be->ce_shard_sumexp(stats, a.logits, rowmax, ctx->targets, v0, (int)N, Vl, Vpl));
    TS_TRY(tp_all_reduce(m, stats, 2 * N));
    TS_TRY(be->ce_shard_loss(a.losses, a.lse, rowmax, stats, ctx->targets, (int)N));
    /* The loss sum, on the host: the losses copied down, the targets' host
     * copy (the same array on the CPU). */
    const int32_t *targets = ctx->targets_host;
    if (!targets) {
        if (be->kind != TS_DEVICE_CPU)
            return ts_error(TS_ERR_INVALID, "model: the step has no host copy of the targets");
        targets = ctx->targets;
    }
    const float *losses;
    TS_TRY(host_view(m, a.losses, N, &losses));
    double sum = 0.0;
    int64_t valid = 0;
    for (size_t i = 0; i < N; i++) {
        if (targets[i] < 0) continue;
        sum += losses[i];
        valid++;
    }
    ctx->loss_sum += sum;
    ctx->valid_tokens += valid;
    memset(y, 0, sizeof *y);
    return TS_OK;
}

static ts_status head_backward(ts_module *mod, ts_step_ctx *ctx, const ts_tensor *dy,
                               ts_tensor *dx) {
    (void)dy;
    head_impl *h = mod->impl;
    ts_model *m = mod->model;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model, Tl = local_T(m, T);
    size_t N = (size_t)B * T, Nl = (size_t)B * Tl;
    int v0, Vl, Vpl;
    head_vocab(h, m, &v0, &Vl, &Vpl);
    head_acts a;
    head_carve(&a, saved_get(&h->saved, ctx->mb), N, Nl, C, Vpl);
    const ts_backend *be = m->be;
    /* In place: the logits become their gradient. */
    TS_TRY(be->ce_shard_backward(a.logits, a.logits, a.lse, ctx->targets, ctx->dloss, v0, (int)N,
                                 Vl, Vpl));
    float *work = model_work(m, 3 * N * C);
    if (!work) return TS_ERR_NOMEM;
    float *dlnf = work, *gathered = work + N * C, *reduced = gathered + N * C;
    TS_TRY(be->zero(dlnf, N * C * sizeof(float)));
    const float *full, *dh;
    TS_TRY(tp_enter(m, a.lnf, gathered, B, T, C, &full));
    TS_TRY(linear_backward(m, dlnf, grad_of(h->wte), NULL, a.logits, full, h->wte, (int)N, C, Vpl));
    TS_TRY(tp_leave(m, dlnf, reduced, B, T, C, &dh));
    TS_TRY(be->zero(dx->data, Nl * C * sizeof(float)));
    TS_TRY(be->layernorm_backward(dx->data, grad_of(h->lnfw), grad_of(h->lnfb), dh,
                                  saved_input(&h->saved, ctx->mb), ts_model_weight(m, h->lnfw, 1),
                                  a.mean, a.rstd, (int)Nl, C));
    saved_release(&h->saved, ctx->mb);
    return TS_OK;
}

static const ts_module_ops head_ops = {"head", head_forward, head_backward, module_release,
                                       module_destroy};

/* ---------------------------------------------------------------------------
 * Parameters: the registry, one allocation each for values and gradients.
 * ------------------------------------------------------------------------- */
ts_status ts_model_config_check(const ts_model_config *c) {
    if (c->layers < 1)
        return ts_error(TS_ERR_CONFIG, "[model] layers = %d: must be at least 1", c->layers);
    if (c->d_model < 1)
        return ts_error(TS_ERR_CONFIG, "[model] d_model = %d: must be at least 1", c->d_model);
    if (c->heads < 1)
        return ts_error(TS_ERR_CONFIG, "[model] heads = %d: must be at least 1", c->heads);
    if (c->d_model % c->heads != 0)
        return ts_error(TS_ERR_CONFIG, "[model] heads = %d does not divide d_model = %d", c->heads,
                        c->d_model);
    if (c->vocab < 2)
        return ts_error(TS_ERR_CONFIG, "[model] vocab = %d: must be at least 2", c->vocab);
    if (c->padded_vocab < c->vocab)
        return ts_error(TS_ERR_CONFIG, "[model] padded_vocab = %d is smaller than vocab = %d",
                        c->padded_vocab, c->vocab);
    if (c->context < 1)
        return ts_error(TS_ERR_CONFIG, "[model] context = %d: must be at least 1", c->context);
    return TS_OK;
}

typedef struct param_decl {
    char name[TS_NAME_MAX];
    int ndim;
    int64_t shape[3];
    int decay;
    ts_init_kind init;
    float std;
    int64_t rows; /* NORMAL: leading-dimension rows initialised (wte: V) */
} param_decl;

/* Lists the parameters in module order: wte, wpe, h.0.*, ..., lnf.*. The
 * QKV weight is (3, C, C) and its bias (3, C): q, k and v blocks with the
 * heads contiguous in each, so that cutting dimension 1 cuts by heads. */
static int model_declare(const ts_model_config *c, param_decl *d) {
    int n = 0, C = c->d_model;
    float std = 0.02f, resid_std = 0.02f / sqrtf(2.0f * (float)c->layers);
#define DECL(nm, nd, s0, s1, s2, dec, ini, sd, rw)                                                 \
    do {                                                                                           \
        if (d) {                                                                                   \
            snprintf(d[n].name, TS_NAME_MAX, "%s", nm);                                            \
            d[n].ndim = nd;                                                                        \
            d[n].shape[0] = s0;                                                                    \
            d[n].shape[1] = s1;                                                                    \
            d[n].shape[2] = s2;                                                                    \
            d[n].decay = dec;                                                                      \
            d[n].init = ini;                                                                       \
            d[n].std = sd;                                                                         \
            d[n].rows = rw;                                                                        \
        }                                                                                          \
        n++;                                                                                       \
    } while (0)
    DECL("wte", 2, c->padded_vocab, C, 1, 1, TS_INIT_NORMAL, std, c->vocab);
    DECL("wpe", 2, c->context, C, 1, 1, TS_INIT_NORMAL, std, c->context);
    for (int l = 0; l < c->layers; l++) {
        char nm[TS_NAME_MAX];
#define LAYER(suffix, nd, s0, s1, s2, dec, ini, sd)                                                \
    do {                                                                                           \
        snprintf(nm, sizeof nm, "h.%d.%s", l, suffix);                                             \
        DECL(nm, nd, s0, s1, s2, dec, ini, sd, s0);                                                \
    } while (0)
        LAYER("ln1.weight", 1, C, 1, 1, 0, TS_INIT_ONES, 0);
        LAYER("ln1.bias", 1, C, 1, 1, 0, TS_INIT_ZEROS, 0);
        LAYER("attn.qkv.weight", 3, 3, C, C, 1, TS_INIT_NORMAL, std);
        LAYER("attn.qkv.bias", 2, 3, C, 1, 0, TS_INIT_ZEROS, 0);
        LAYER("attn.proj.weight", 2, C, C, 1, 1, TS_INIT_NORMAL, resid_std);
        LAYER("attn.proj.bias", 1, C, 1, 1, 0, TS_INIT_ZEROS, 0);
        LAYER("ln2.weight", 1, C, 1, 1, 0, TS_INIT_ONES, 0);
        LAYER("ln2.bias", 1, C, 1, 1, 0, TS_INIT_ZEROS, 0);
        LAYER("mlp.fc.weight", 2, 4 * C, C, 1, 1, TS_INIT_NORMAL, std);
        LAYER("mlp.fc.bias", 1, 4 * C, 1, 1, 0, TS_INIT_ZEROS, 0);
        LAYER("mlp.proj.weight", 2, C, 4 * C, 1, 1, TS_INIT_NORMAL, resid_std);
        LAYER("mlp.proj.bias", 1, C, 1, 1, 0, TS_INIT_ZEROS, 0);
#undef LAYER
    }
    DECL("lnf.weight", 1, C, 1, 1, 0, TS_INIT_ONES, 0, C);
    DECL("lnf.bias", 1, C, 1, 1, 0, TS_INIT_ZEROS, 0, C);
#undef DECL
    return n;
}

int ts_model_tp_shard_dim(const char *name) {
    static const struct {
        const char *suffix;
        int dim;
    } cuts[] = {{"attn.qkv.weight", 1}, {"attn.qkv.bias", 1}, {"attn.proj.weight", 1},
                {"mlp.fc.weight", 0},   {"mlp.fc.bias", 0},   {"mlp.proj.weight", 1}};
    if (strcmp(name, "wte") == 0) return 0;
    size_t len = strlen(name);
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        size_t k = strlen(cuts[i].suffix);
        if (len > k && strcmp(name + len - k, cuts[i].suffix) == 0 && name[len - k - 1] == '.')
            return cuts[i].dim;
    }
    return -1;
}

int ts_model_param_table(const ts_model_config *cfg, char (*names)[TS_NAME_MAX],
                         int64_t (*shapes)[3], int *ndim) {
    int n = model_declare(cfg, NULL);
    if (!names && !shapes && !ndim) return n;
    param_decl *d = calloc((size_t)n, sizeof *d);
    if (!d) return -1;
    model_declare(cfg, d);
    for (int i = 0; i < n; i++) {
        if (names) snprintf(names[i], TS_NAME_MAX, "%s", d[i].name);
        if (shapes)
            for (int k = 0; k < 3; k++)
                shapes[i][k] = k < d[i].ndim ? d[i].shape[k] : 1;
        if (ndim) ndim[i] = d[i].ndim;
    }
    free(d);
    return n;
}

/* Writes the initial value of every element of p's block (as f32) into dst:
 * element (i, j, k) of the block is element (i, j, k) + block_offset of the
 * whole tensor, drawn from (seed, name, its global row-major index). */
static void param_init_values(float *dst, const ts_param *p, uint64_t seed) {
    int64_t n = ts_tensor_numel(&p->value);
    switch (p->init) {
    case TS_INIT_ZEROS: memset(dst, 0, (size_t)n * sizeof(float)); break;
    case TS_INIT_ONES:
        for (int64_t i = 0; i < n; i++)
            dst[i] = 1.0f;
        break;
    case TS_INIT_NORMAL: {
        uint64_t key = ts_rng_key(seed, p->value.name);
        int64_t ls[3] = {1, 1, 1}, gs[3] = {1, 1, 1};
        for (int d = 0; d < p->global_ndim; d++) {
            ls[d] = p->value.shape[d];
            gs[d] = p->global_shape[d];
        }
        const int64_t *off = p->block_offset;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            int64_t i2 = i % ls[2], i1 = (i / ls[2]) % ls[1], i0 = i / (ls[1] * ls[2]);
            int64_t g0 = i0 + off[0], g1 = i1 + off[1], g2 = i2 + off[2];
            uint64_t g = (uint64_t)((g0 * gs[1] + g1) * gs[2] + g2);
            dst[i] = g0 < p->init_rows ? p->init_std * ts_rng_normal(key, g) : 0.0f;
        }
        break;
    }
    }
}

static ts_module *module_new(ts_model *m, const ts_module_ops *ops, const char *name, void *impl) {
    ts_module *mod = calloc(1, sizeof *mod);
    if (!mod) return NULL;
    mod->ops = ops;
    snprintf(mod->name, sizeof mod->name, "%s", name);
    mod->model = m;
    mod->impl = impl;
    return mod;
}

static int module_local(const ts_model *m, int i) {
    return m->shard.module_chunk[i] >= 0;
}

static ts_status model_build_modules(ts_model *m) {
    int L = m->cfg.layers;
    m->nmodules = L + 2;
    m->modules = calloc((size_t)m->nmodules, sizeof *m->modules);
    if (!m->modules) return ts_error(TS_ERR_NOMEM, "model: out of memory");
    if (module_local(m, 0)) {
        embedding_impl *e = calloc(1, sizeof *e);
        if (!e) return ts_error(TS_ERR_NOMEM, "model: out of memory");
        e->saved.be = m->be;
        e->wte = ts_model_param(m, "wte");
        e->wpe = ts_model_param(m, "wpe");
        ts_module *mod = m->modules[0] = module_new(m, &embedding_ops, "embedding", e);
        if (!mod) return ts_error(TS_ERR_NOMEM, "model: out of memory");
        mod->param_index[mod->nparams++] = (int)(e->wte - m->params);
        mod->param_index[mod->nparams++] = (int)(e->wpe - m->params);
    }
    for (int l = 0; l < L; l++) {
        if (!module_local(m, 1 + l)) continue;
        block_impl *b = calloc(1, sizeof *b);
        if (!b) return ts_error(TS_ERR_NOMEM, "model: out of memory");
        b->saved.be = m->be;
        char nm[TS_NAME_MAX];
        ts_param **slots[12] = {&b->ln1w, &b->ln1b, &b->qkvw, &b->qkvb, &b->projw,   &b->projb,
                                &b->ln2w, &b->ln2b, &b->fcw,  &b->fcb,  &b->fcprojw, &b->fcprojb};
        static const char *suffix[12] = {"ln1.weight",    "ln1.bias",         "attn.qkv.weight",
                                         "attn.qkv.bias", "attn.proj.weight", "attn.proj.bias",
                                         "ln2.weight",    "ln2.bias",         "mlp.fc.weight",
                                         "mlp.fc.bias",   "mlp.proj.weight",  "mlp.proj.bias"};
        snprintf(nm, sizeof nm, "h.%d", l);
        ts_module *mod = m->modules[1 + l] = module_new(m, &block_ops, nm, b);
        if (!mod) return ts_error(TS_ERR_NOMEM, "model: out of memory");
        for (int i = 0; i < 12; i++) {
            snprintf(nm, sizeof nm, "h.%d.%s", l, suffix[i]);
            *slots[i] = ts_model_param(m, nm);
            TS_ASSERT(*slots[i] != NULL);
            mod->param_index[mod->nparams++] = (int)(*slots[i] - m->params);
        }
    }
    if (module_local(m, L + 1)) {
        head_impl *h = calloc(1, sizeof *h);
        if (!h) return ts_error(TS_ERR_NOMEM, "model: out of memory");
        h->saved.be = m->be;
        h->lnfw = ts_model_param(m, "lnf.weight");
        h->lnfb = ts_model_param(m, "lnf.bias");
        h->wte = ts_model_param(m, "wte");
        ts_module *mod = m->modules[L + 1] = module_new(m, &head_ops, "head", h);
        if (!mod) return ts_error(TS_ERR_NOMEM, "model: out of memory");
        mod->param_index[mod->nparams++] = (int)(h->lnfw - m->params);
        mod->param_index[mod->nparams++] = (int)(h->lnfb - m->params);
        mod->param_index[mod->nparams++] = (int)(h->wte - m->params);
    }
    return TS_OK;
}

/* The modules that read declared parameter `name`: 1 or 2 of them. */
static int decl_users(const char *name, int L, int users[2]) {
    if (strcmp(name, "wte") == 0) {
        users[0] = 0;
        users[1] = L + 1;
        return 2;
    }
    if (strcmp(name, "wpe") == 0) {
        users[0] = 0;
        return 1;
    }
    int l;
    if (sscanf(name, "h.%d.", &l) == 1) {
        users[0] = 1 + l;
        return 1;
    }
    users[0] = L + 1; /* lnf */
    return 1;
}

/* Checks that the tp size divides what it cuts; messages name the key. */
ts_status ts_model_tp_check(const ts_model_config *c, int tp) {
    if (tp <= 1) return TS_OK;
    if (c->heads % tp != 0)
        return ts_error(TS_ERR_CONFIG,
                        "[model] heads = %d is not divisible by tp = %d "
                        "(attention is cut by heads)",
                        c->heads, tp);
    if ((4 * c->d_model) % tp != 0)
        return ts_error(TS_ERR_CONFIG,
                        "the MLP width 4 x [model] d_model = %d is not divisible "
                        "by tp = %d",
                        4 * c->d_model, tp);
    if (c->padded_vocab % tp != 0)
        return ts_error(TS_ERR_CONFIG,
                        "[model] padded_vocab = %d is not divisible by tp = %d "
                        "(the embedding is cut by vocabulary; set padded_vocab to a multiple)",
                        c->padded_vocab, tp);
    return TS_OK;
}

static ts_status model_check_shard(const ts_model_config *c, const ts_model_shard *s) {
    int tp = s->tp;
    if (tp < 1 || s->tp_rank < 0 || s->tp_rank >= tp)
        return ts_error(TS_ERR_INVALID, "model: tp rank %d of %d", s->tp_rank, tp);
    if (tp == 1) return TS_OK;
    if (!s->tp_comm) return ts_error(TS_ERR_INVALID, "model: tp = %d without a communicator", tp);
    return ts_model_tp_check(c, tp);
}

ts_status ts_model_create(const ts_model_config *cfg, ts_dtype dtype, uint64_t seed,
                          const ts_model_shard *shard, const ts_backend *be, ts_model **out) {
    *out = NULL;
    TS_TRY(ts_model_config_check(cfg));
    ts_model_shard one = {.tp = 1};
    if (!shard) shard = &one;
    TS_TRY(model_check_shard(cfg, shard));
    if (dtype != TS_F32 && dtype != TS_BF16)
        return ts_error(TS_ERR_INVALID, "model: parameters must be f32 or bf16, not %s",
                        ts_dtype_name(dtype));
    if (cfg->layers + 2 > TS_MODEL_MAX_MODULES)
        return ts_error(TS_ERR_CONFIG, "[model] layers = %d: at most %d", cfg->layers,
                        TS_MODEL_MAX_MODULES - 2);
    ts_model *m = calloc(1, sizeof *m);
    if (!m) return ts_error(TS_ERR_NOMEM, "model: out of memory");
    m->cfg = *cfg;
    m->be = be ? be : ts_backend_cpu();
    m->shard = *shard;
    if (m->shard.tp == 1) m->shard.sp = 0; /* nothing to cut along T */
    if (m->shard.pp < 1) {                 /* the whole model here, one chunk */
        m->shard.pp = 1;
        m->shard.chunks = 1;
        for (int i = 0; i < cfg->layers + 2; i++)
            m->shard.module_chunk[i] = 0;
    }
    m->dtype = dtype;
    int L = cfg->layers;
    int ndecl = model_declare(cfg, NULL);
    param_decl *all = calloc((size_t)ndecl, sizeof *all);
    param_decl *decl = calloc((size_t)ndecl, sizeof *decl);
    size_t *goffs = calloc((size_t)ndecl, sizeof *goffs);
    m->params = calloc((size_t)ndecl, sizeof *m->params);
    if (!all || !decl || !goffs || !m->params) {
        free(all);
        free(decl);
        free(goffs);
        ts_model_destroy(m);
        return ts_error(TS_ERR_NOMEM, "model: out of memory");
    }
    model_declare(cfg, all);
    /* This rank's parameters: those its modules read. The global offsets
     * count every parameter, local or not. */
    int n = 0, tied_copy[ndecl];
    size_t global = 0;
    for (int i = 0; i < ndecl; i++) {
        size_t gcnt = 1;
        for (int d = 0; d < all[i].ndim; d++)
            gcnt *= (size_t)all[i].shape[d];
        int users[2], nu = decl_users(all[i].name, L, users), here = 0;
        for (int u = 0; u < nu; u++)
            here |= m->shard.module_chunk[users[u]] >= 0;
        if (here) {
            goffs[n] = global;
            tied_copy[n] = nu == 2 && m->shard.module_chunk[0] < 0;
            if (nu == 2 && (m->shard.module_chunk[0] < 0) != (m->shard.module_chunk[L + 1] < 0))
                m->tied_split = 1;
            decl[n++] = all[i];
        }
        global += gcnt;
    }
    free(all);
    m->nparams = n;
    /* Local blocks: the tp-cut dimension divided, offset by the rank. */
    int64_t local[n > 0 ? n : 1][3];
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        int dim = m->shard.tp > 1 ? ts_model_tp_shard_dim(decl[i].name) : -1;
        size_t cnt = 1;
        for (int d = 0; d < 3; d++) {
            local[i][d] = d < decl[i].ndim ? decl[i].shape[d] : 1;
            if (d == dim) local[i][d] /= m->shard.tp;
            cnt *= (size_t)local[i][d];
        }
        total += cnt;
    }
    m->numel = total;
    m->global_numel = global;
    size_t esz = ts_dtype_size(dtype);
    m->param_data = m->be->alloc(TS_MEM_PARAMS, total * esz);
    m->grad_data = m->be->alloc(TS_MEM_GRADS, total * sizeof(float));
    if (!m->param_data || !m->grad_data) {
        free(decl);
        ts_model_destroy(m);
        return TS_ERR_NOMEM;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        ts_param *p = &m->params[i];
        int dim = m->shard.tp > 1 ? ts_model_tp_shard_dim(decl[i].name) : -1;
        ts_tensor_view(&p->value, decl[i].name, dtype, decl[i].ndim, local[i],
                       (char *)m->param_data + off * esz, TS_MEM_PARAMS);
        ts_tensor_view(&p->grad, decl[i].name, TS_F32, decl[i].ndim, local[i], m->grad_data + off,
                       TS_MEM_GRADS);
        p->value.device = p->grad.device = m->be->kind;
        p->offset = off;
        p->global_offset = goffs[i];
        p->tied_copy = tied_copy[i];
        p->global_ndim = decl[i].ndim;
        for (int d = 0; d < 3; d++) {
            p->global_shape[d] = d < decl[i].ndim ? decl[i].shape[d] : 1;
            p->block_offset[d] = d == dim ? local[i][d] * m->shard.tp_rank : 0;
        }
        p->shard_dim = dim;
        p->grad_partial = m->shard.sp && dim < 0 && strcmp(decl[i].name, "wte") != 0;
        p->decay = decl[i].decay;
        p->init = decl[i].init;
        p->init_std = decl[i].std;
        p->init_rows = decl[i].rows;
        off += (size_t)ts_tensor_numel(&p->value);
    }
    free(decl);
    free(goffs);
    /* Initialise on the host: f32 directly, or through a staging copy rounded
     * to bf16; on a device, into a host image of the parameters uploaded at
     * the end. */
    int on_host = m->be->kind == TS_DEVICE_CPU;
    ts_status st = TS_OK;
    char *image = on_host ? m->param_data : ts_mem_alloc(TS_MEM_OTHER, total * esz);
    if (!image) {
        ts_model_destroy(m);
        return TS_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        ts_param *p = &m->params[i];
        int64_t cnt = ts_tensor_numel(&p->value);
        void *dst = image + p->offset * esz;
        if (dtype == TS_F32) {
            param_init_values(dst, p, seed);
        } else {
            float *tmp = ts_mem_alloc(TS_MEM_OTHER, (size_t)cnt * sizeof(float));
            if (!tmp) {
                if (!on_host) ts_mem_free(image);
                ts_model_destroy(m);
                return TS_ERR_NOMEM;
            }
            param_init_values(tmp, p, seed);
            /* Host memory either way: the CPU's conversion. */
            st = ts_backend_cpu()->f32_to_bf16(dst, tmp, (size_t)cnt);
            ts_mem_free(tmp);
        }
    }
    if (!on_host && !st) st = m->be->from_host(m->param_data, image, total * esz);
    if (!on_host) ts_mem_free(image);
    if (!st) st = model_build_modules(m);
    if (st) {
        ts_model_destroy(m);
        return st;
    }
    *out = m;
    return TS_OK;
}

void ts_model_destroy(ts_model *m) {
    if (!m) return;
    for (int i = 0; i < m->nmodules; i++)
        if (m->modules[i]) m->modules[i]->ops->destroy(m->modules[i]);
    free(m->modules);
    if (m->be) {
        m->be->free(m->param_data);
        m->be->free(m->grad_data);
        m->be->free(m->work);
        m->be->free(m->tp_stage);
        for (int i = 0; i < 4; i++)
            m->be->free(m->stage[i]);
        m->be->free(m->mm_work);
    }
    ts_mem_free(m->host_stage);
    free(m->params);
    free(m);
}

ts_param *ts_model_param(ts_model *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].value.name, name) == 0) return &m->params[i];
    return NULL;
}

ts_status ts_model_zero_grad(ts_model *m) {
    return m->be->zero(m->grad_data, m->numel * sizeof(float));
}

/* Copies the block of p between its place in the whole tensor (`whole`, the
 * global layout) and a contiguous block (`block`), in the given direction. */
static void param_block_copy(const ts_param *p, float *whole, float *block, int to_block) {
    int64_t ls[3] = {1, 1, 1}, gs[3] = {1, 1, 1};
    for (int d = 0; d < p->global_ndim; d++) {
        ls[d] = p->value.shape[d];
        gs[d] = p->global_shape[d];
    }
    for (int64_t i0 = 0; i0 < ls[0]; i0++)
        for (int64_t i1 = 0; i1 < ls[1]; i1++) {
            float *g = whole +
                       ((i0 + p->block_offset[0]) * gs[1] + i1 + p->block_offset[1]) * gs[2] +
                       p->block_offset[2];
            float *b = block + (i0 * ls[1] + i1) * ls[2];
            if (to_block)
                memcpy(b, g, (size_t)ls[2] * sizeof(float));
            else
                memcpy(g, b, (size_t)ls[2] * sizeof(float));
        }
}

ts_status ts_model_gather(ts_model *m, const float *local, float *full) {
    int tp = m->shard.tp;
    float *buf = NULL;
    size_t cap = 0;
    ts_status st = TS_OK;
    for (int i = 0; i < m->nparams && !st; i++) {
        ts_param *p = &m->params[i];
        size_t n = (size_t)ts_tensor_numel(&p->value);
        float *whole = full + p->global_offset;
        if (p->tied_copy) continue; /* the embedding's rank writes wte */
        if (p->shard_dim < 0) {
            memcpy(whole, local + p->offset, n * sizeof(float));
            continue;
        }
        if (n * tp > cap) {
            ts_mem_free(buf);
            cap = n * tp;
            buf = ts_mem_alloc(TS_MEM_COMM, cap * sizeof(float));
            if (!buf) return TS_ERR_NOMEM;
        }
        st = ts_comm_all_gather(m->shard.tp_host ? m->shard.tp_host : m->shard.tp_comm,
                                local + p->offset, buf, n, TS_F32);
        /* Rank r's block sits at offset r * (its extent) along shard_dim. */
        ts_param q = *p;
        for (int r = 0; r < tp && !st; r++) {
            q.block_offset[p->shard_dim] = p->value.shape[p->shard_dim] * r;
            param_block_copy(&q, whole, buf + n * r, 0);
        }
    }
    ts_mem_free(buf);
    return st;
}

void ts_model_scatter(const ts_model *m, const float *full, float *local) {
    for (int i = 0; i < m->nparams; i++) {
        const ts_param *p = &m->params[i];
        param_block_copy(p, (float *)full + p->global_offset, local + p->offset, 1);
    }
}

/* ---------------------------------------------------------------------------
 * Running the modules.
 * ------------------------------------------------------------------------- */
int ts_model_chunk_first(const ts_model *m, int chunk) {
    return m->shard.module_chunk[0] == chunk;
}

int ts_model_chunk_last(const ts_model *m, int chunk) {
    return m->shard.module_chunk[m->nmodules - 1] == chunk;
}

ts_status ts_model_forward_chunk(ts_model *m, ts_step_ctx *ctx, int chunk, const ts_tensor *x,
                                 ts_tensor *y) {
    ts_tensor cur, next;
    if (x)
        cur = *x;
    else
        memset(&cur, 0, sizeof cur);
    memset(y, 0, sizeof *y);
    int ran[TS_MODEL_MAX_MODULES], nran = 0;
    for (int i = 0; i < m->nmodules; i++) {
        if (m->shard.module_chunk[i] != chunk) continue;
        ts_status st = m->modules[i]->ops->forward(m->modules[i], ctx, &cur, &next);
        if (st) {
            for (int k = 0; k < nran; k++)
                m->modules[ran[k]]->ops->release(m->modules[ran[k]], ctx->mb);
            return st;
        }
        ran[nran++] = i;
        cur = next;
    }
    if (nran == 0) return ts_error(TS_ERR_INTERNAL, "model: chunk %d has no module here", chunk);
    *y = cur;
    return TS_OK;
}

ts_status ts_model_backward_chunk(ts_model *m, ts_step_ctx *ctx, int chunk, const ts_tensor *dy,
                                  ts_tensor *dx) {
    int Tl = local_T(m, ctx->T);
    size_t n = (size_t)ctx->B * Tl * m->cfg.d_model;
    int idx[TS_MODEL_MAX_MODULES], cnt = 0;
    for (int i = 0; i < m->nmodules; i++)
        if (m->shard.module_chunk[i] == chunk) idx[cnt++] = i;
    if (cnt == 0) return ts_error(TS_ERR_INTERNAL, "model: chunk %d has no module here", chunk);
    /* Between the modules of the chunk, two buffers alternate. */
    float *buf = cnt > 1 ? m->be->alloc(TS_MEM_ACTS, 2 * n * sizeof(float)) : NULL;
    if (cnt > 1 && !buf) return TS_ERR_NOMEM;
    int64_t shape[3] = {ctx->B, Tl, m->cfg.d_model};
    ts_tensor grads[2];
    ts_tensor_view(&grads[0], "dx0", TS_F32, 3, shape, buf, TS_MEM_ACTS);
    ts_tensor_view(&grads[1], "dx1", TS_F32, 3, shape, buf ? buf + n : NULL, TS_MEM_ACTS);
    grads[0].device = grads[1].device = m->be->kind;
    ts_status st = TS_OK;
    const ts_tensor *in = dy;
    for (int k = cnt - 1; k >= 0 && !st; k--) {
        int i = idx[k];
        ts_tensor *out = k == 0 ? dx : &grads[k % 2];
        st = m->modules[i]->ops->backward(m->modules[i], ctx, in, out);
        if (!st && ctx->module_done) st = ctx->module_done(ctx->module_done_user, i);
        in = out;
    }
    m->be->free(buf);
    return st;
}

ts_status ts_model_forward(ts_model *m, ts_step_ctx *ctx) {
    if (m->shard.pp > 1 || m->shard.chunks > 1)
        return ts_error(TS_ERR_INTERNAL, "model: whole-model forward on a pipeline stage");
    ts_tensor y;
    return ts_model_forward_chunk(m, ctx, 0, NULL, &y);
}

ts_status ts_model_backward(ts_model *m, ts_step_ctx *ctx) {
    return ts_model_backward_chunk(m, ctx, 0, NULL, NULL);
}

ts_status ts_model_forward_backward(ts_model *m, ts_step_ctx *ctx) {
    TS_TRY(ts_model_forward(m, ctx));
    return ts_model_backward(m, ctx);
}

ts_status ts_model_loss(ts_model *m, ts_step_ctx *ctx, double *mean_loss) {
    double before = ctx->loss_sum;
    int64_t valid_before = ctx->valid_tokens;
    TS_TRY(ts_model_forward(m, ctx));
    for (int i = 0; i < m->nmodules; i++)
        if (m->modules[i]) m->modules[i]->ops->release(m->modules[i], ctx->mb);
    int64_t valid = ctx->valid_tokens - valid_before;
    *mean_loss = valid > 0 ? (ctx->loss_sum - before) / (double)valid : 0.0;
    return TS_OK;
}

static ts_status plan_entry(ts_layout_plan *plan, const ts_mesh *mesh, const char *name, int ndim,
                            const int64_t *shape, ts_plan_kind kind) {
    ts_layout l;
    TS_TRY(ts_layout_init(&l, ndim, shape));
    /* The dense mesh: GPT-2's tensors live there. Expert tensors (MoE) will
     * carry the expert mesh's axes (etp, ep, edp, pp) instead. */
    static const ts_mesh_axis axes[] = {TS_AXIS_TP, TS_AXIS_CP, TS_AXIS_DP, TS_AXIS_PP};
    for (size_t i = 0; i < sizeof axes / sizeof axes[0]; i++)
        TS_TRY(ts_layout_add_axis(&l, ts_mesh_axis_name(axes[i]), ts_mesh_axis_size(mesh, axes[i]),
                                  ts_placement_replicate()));
    TS_TRY(ts_layout_plan_add(plan, name, &l, -1));
    ts_layout_plan_find(plan, name)->kind = kind;
    return TS_OK;
}

ts_status ts_model_layout_plan(const ts_model_config *cfg, int global_batch, int T,
                               const ts_mesh *mesh, ts_layout_plan *plan) {
    int64_t data[2] = {global_batch, T}, act[3] = {global_batch, T, cfg->d_model};
    TS_TRY(plan_entry(plan, mesh, "data.tokens", 2, data, TS_PLAN_DATA));
    TS_TRY(plan_entry(plan, mesh, "data.targets", 2, data, TS_PLAN_DATA));
    TS_TRY(plan_entry(plan, mesh, "act.x", 3, act, TS_PLAN_ACTIVATION));
    int n = model_declare(cfg, NULL);
    param_decl *decl = calloc((size_t)n, sizeof *decl);
    if (!decl) return ts_error(TS_ERR_NOMEM, "model: out of memory");
    model_declare(cfg, decl);
    ts_status st = TS_OK;
    for (int i = 0; i < n && !st; i++)
        st = plan_entry(plan, mesh, decl[i].name, decl[i].ndim, decl[i].shape, TS_PLAN_PARAM);
    free(decl);
    return st;
}

/* The attention's saved and scratch floats on `be` (NULL: the CPU's). */
static size_t att_saved_floats(const ts_backend *be, int B, int NH, int T) {
    return be ? be->attention_saved_floats(B, NH, T) : cpu_att_floats(B, NH, T);
}
static size_t att_scratch_floats(const ts_backend *be, int B, int NH, int T) {
    return be ? be->attention_scratch_floats(B, NH, T) : cpu_att_floats(B, NH, T);
}

/* Saved floats of module i for one micro-batch. */
static size_t module_saved_floats(const ts_model_config *c, const ts_backend *be, int tp, int sp,
                                  int B, int T, int i) {
    size_t N = (size_t)B * T, Nl = sp ? N / tp : N, C = (size_t)c->d_model;
    if (i == 0) return Nl * C;
    if (i == c->layers + 1) return head_carve(NULL, NULL, N, Nl, c->d_model, c->padded_vocab / tp);
    return block_carve(NULL, NULL, B, T, c->d_model, tp, sp,
                       att_saved_floats(be, B, c->heads / tp, T));
}

static int shard_module_chunk(const ts_model_shard *s, int i) {
    return !s || s->pp < 1 ? 0 : s->module_chunk[i];
}

size_t ts_model_chunk_saved_bytes(const ts_model_config *c, const ts_model_shard *shard,
                                  const ts_backend *be, int B, int T, int chunk) {
    int tp = shard ? shard->tp : 1, sp = shard && tp > 1 ? shard->sp : 0;
    size_t floats = 0;
    for (int i = 0; i < c->layers + 2; i++)
        if (shard_module_chunk(shard, i) == chunk)
            floats += module_saved_floats(c, be, tp, sp, B, T, i);
    return sizeof(float) * floats;
}

void ts_model_activation_bytes(const ts_model_config *c, const ts_model_shard *shard,
                               const ts_backend *be, int B, int T, size_t *saved,
                               size_t *workspace) {
    int tp = shard ? shard->tp : 1, sp = shard && tp > 1 ? shard->sp : 0;
    size_t N = (size_t)B * T, Nl = sp ? N / tp : N, C = (size_t)c->d_model;
    *saved = 0;
    int chunks = shard && shard->pp >= 1 ? shard->chunks : 1;
    for (int k = 0; k < chunks; k++)
        *saved += ts_model_chunk_saved_bytes(c, shard, be, B, T, k);
    /* The shared workspace grows to the largest request of any module, forward
     * or backward; the two dx buffers alternate between modules in backward. */
    size_t ws = block_fwd_work(B, T, c->d_model);
    size_t need[] = {
        block_bwd_work(B, T, c->d_model, tp, att_scratch_floats(be, B, c->heads / tp, T)),
        N * C + 3 * N, 3 * N * C};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (need[i] > ws) ws = need[i];
    *workspace = sizeof(float) * (ws + 2 * Nl * C);
}

double ts_model_flops_per_step(const ts_model_config *c, int B, int T) {
    double N = (double)B * T, C = c->d_model, L = c->layers, Vp = c->padded_vocab;
    /* Per token, forward: QKV 3C^2, proj C^2, fc 4C^2, fcproj 4C^2 multiply-adds
     * per layer, the LM head C*Vp, and attention QK^T and AV about T*C each
     * (causal halves the useful work; we count the full square, as
     * implemented). One multiply-add is 2 FLOPs; backward is twice forward. */
    double gemm = N * (L * 12.0 * C * C + C * Vp);
    double attn = L * (double)B * 2.0 * T * T * C;
    return 3.0 * 2.0 * (gemm + attn);
}
