/*
 * model.c — GPT-2 parameters, initialisation and the three module kinds
 * (embedding, transformer block, head: final LayerNorm + tied LM head +
 * cross-entropy). The math lives in kernels/cpu; this file wires buffers.
 *
 * Not here: the optimizer (optim.c), the training loop and schedules
 * (train.c), checkpoints (checkpoint.c).
 */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "rng.h"

/* ---------------------------------------------------------------------------
 * Saved state: one allocation of floats per micro-batch slot.
 * ------------------------------------------------------------------------- */
typedef struct saved_table {
    int cap;
    float **slot;
    const float **input; /* the module's input x of that micro-batch */
} saved_table;

static float *saved_alloc(saved_table *t, int mb, size_t floats, const float *input) {
    if (mb >= t->cap) {
        int cap = t->cap ? t->cap : 4;
        while (cap <= mb) cap *= 2;
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
    t->slot[mb] = ts_mem_alloc(TS_MEM_ACTS, floats * sizeof(float));
    t->input[mb] = input;
    return t->slot[mb];
}

static const float *saved_input(const saved_table *t, int mb) { return t->input[mb]; }

static float *saved_get(saved_table *t, int mb) {
    TS_ASSERT(mb < t->cap && t->slot[mb] != NULL);
    return t->slot[mb];
}

static void saved_release(saved_table *t, int mb) {
    ts_mem_free(t->slot[mb]);
    t->slot[mb] = NULL;
}

static void saved_destroy(saved_table *t) {
    for (int i = 0; i < t->cap; i++) ts_mem_free(t->slot[i]);
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
        ts_mem_free(m->work);
        m->work = ts_mem_alloc(TS_MEM_ACTS, floats * sizeof(float));
        m->work_floats = m->work ? floats : 0;
    }
    return m->work;
}

static void round_if_bf16(const ts_model *m, float *x, size_t n) {
    if (m->dtype == TS_BF16) ts_cpu_round_bf16(x, n);
}

const float *ts_model_weight(ts_model *m, const ts_param *p, int slot) {
    if (m->dtype == TS_F32) return p->value.data;
    size_t n = (size_t)ts_tensor_numel(&p->value);
    if (n > m->stage_floats[slot]) {
        ts_mem_free(m->stage[slot]);
        m->stage[slot] = ts_mem_alloc(TS_MEM_ACTS, n * sizeof(float));
        m->stage_floats[slot] = m->stage[slot] ? n : 0;
        TS_ASSERT(m->stage[slot] != NULL);
    }
    ts_cpu_bf16_to_f32(m->stage[slot], p->value.data, n);
    return m->stage[slot];
}

float *ts_model_param_f32(ts_model *m) {
    return m->dtype == TS_F32 ? (float *)m->param_data : NULL;
}

static float *grad_of(const ts_param *p) { return p->grad.data; }

/* ---------------------------------------------------------------------------
 * Embedding: out = wte[tokens] + wpe[t].
 * ------------------------------------------------------------------------- */
typedef struct embedding_impl {
    ts_param *wte, *wpe;
    saved_table saved;
} embedding_impl;

static ts_status embedding_forward(ts_module *mod, ts_step_ctx *ctx,
                                   const ts_tensor *x, ts_tensor *y) {
    (void)x;
    embedding_impl *e = mod->impl;
    ts_model *m = mod->model;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model;
    float *out = saved_alloc(&e->saved, ctx->mb, (size_t)B * T * C, NULL);
    if (!out) return TS_ERR_NOMEM;
    const float *wte = ts_model_weight(m, e->wte, 0);
    const float *wpe = ts_model_weight(m, e->wpe, 1);
    ts_cpu_embedding_forward(out, ctx->tokens, wte, wpe, B, T, C, 0);
    round_if_bf16(m, out, (size_t)B * T * C);
    int64_t shape[3] = {B, T, C};
    ts_tensor_view(y, "embedding.out", TS_F32, 3, shape, out, TS_MEM_ACTS);
    return TS_OK;
}

static ts_status embedding_backward(ts_module *mod, ts_step_ctx *ctx,
                                    const ts_tensor *dy, ts_tensor *dx) {
    (void)dx;
    embedding_impl *e = mod->impl;
    int B = ctx->B, T = ctx->T, C = mod->model->cfg.d_model;
    ts_cpu_embedding_backward(grad_of(e->wte), grad_of(e->wpe), dy->data,
                              ctx->tokens, B, T, C, 0);
    saved_release(&e->saved, ctx->mb);
    return TS_OK;
}

static void embedding_destroy(ts_module *mod) {
    embedding_impl *e = mod->impl;
    saved_destroy(&e->saved);
    free(e);
    free(mod);
}

static void embedding_release(ts_module *mod, int mb) {
    saved_release(&((embedding_impl *)mod->impl)->saved, mb);
}

static const ts_module_ops embedding_ops = {"embedding", embedding_forward,
                                            embedding_backward, embedding_release,
                                            embedding_destroy};

/* ---------------------------------------------------------------------------
 * Transformer block (pre-LN).
 * ------------------------------------------------------------------------- */
typedef struct block_impl {
    ts_param *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb;
    ts_param *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
    saved_table saved;
} block_impl;

/* The saved activations of one micro-batch, carved from one allocation. */
typedef struct block_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N, C), (N), (N)           */
    float *qkv;               /* (N, 3C)                             */
    float *att;               /* (B, NH, T, T)                       */
    float *atty;              /* (N, C)                              */
    float *res2;              /* (N, C) x + attention branch          */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fch_gelu;    /* (N, 4C)                             */
    float *out;               /* (N, C) res2 + MLP branch             */
} block_acts;

static size_t block_carve(block_acts *a, float *base, int B, int T, int C, int NH) {
    size_t N = (size_t)B * T, off = 0;
#define CARVE(field, count)                                                    \
    do {                                                                       \
        if (a) a->field = base + off;                                          \
        off += (count);                                                        \
    } while (0)
    CARVE(ln1, N * C);
    CARVE(ln1_mean, N);
    CARVE(ln1_rstd, N);
    CARVE(qkv, N * 3 * C);
    CARVE(att, (size_t)B * NH * T * T);
    CARVE(atty, N * C);
    CARVE(res2, N * C);
    CARVE(ln2, N * C);
    CARVE(ln2_mean, N);
    CARVE(ln2_rstd, N);
    CARVE(fch, N * 4 * C);
    CARVE(fch_gelu, N * 4 * C);
    CARVE(out, N * C);
#undef CARVE
    return off;
}

static ts_status block_forward(ts_module *mod, ts_step_ctx *ctx,
                               const ts_tensor *x, ts_tensor *y) {
    block_impl *b = mod->impl;
    ts_model *m = mod->model;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model, NH = m->cfg.heads;
    int N = B * T;
    size_t floats = block_carve(NULL, NULL, B, T, C, NH);
    float *base = saved_alloc(&b->saved, ctx->mb, floats, x->data);
    if (!base) return TS_ERR_NOMEM;
    block_acts a;
    block_carve(&a, base, B, T, C, NH);
    const float *xin = x->data;

    ts_cpu_layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, xin,
                             ts_model_weight(m, b->ln1w, 1),
                             ts_model_weight(m, b->ln1b, 2), N, C);
    round_if_bf16(m, a.ln1, (size_t)N * C);
    ts_cpu_matmul_forward(a.qkv, a.ln1, ts_model_weight(m, b->qkvw, 0),
                          ts_model_weight(m, b->qkvb, 1), N, C, 3 * C);
    round_if_bf16(m, a.qkv, (size_t)N * 3 * C);
    ts_cpu_attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
    round_if_bf16(m, a.atty, (size_t)N * C);
    ts_cpu_matmul_forward(a.res2, a.atty, ts_model_weight(m, b->projw, 0),
                          ts_model_weight(m, b->projb, 1), N, C, C);
    ts_cpu_residual_forward(a.res2, a.res2, xin, (size_t)N * C);
    round_if_bf16(m, a.res2, (size_t)N * C);

    ts_cpu_layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2,
                             ts_model_weight(m, b->ln2w, 1),
                             ts_model_weight(m, b->ln2b, 2), N, C);
    round_if_bf16(m, a.ln2, (size_t)N * C);
    ts_cpu_matmul_forward(a.fch, a.ln2, ts_model_weight(m, b->fcw, 0),
                          ts_model_weight(m, b->fcb, 1), N, C, 4 * C);
    round_if_bf16(m, a.fch, (size_t)N * 4 * C);
    ts_cpu_gelu_forward(a.fch_gelu, a.fch, (size_t)N * 4 * C);
    round_if_bf16(m, a.fch_gelu, (size_t)N * 4 * C);
    ts_cpu_matmul_forward(a.out, a.fch_gelu, ts_model_weight(m, b->fcprojw, 0),
                          ts_model_weight(m, b->fcprojb, 1), N, 4 * C, C);
    ts_cpu_residual_forward(a.out, a.out, a.res2, (size_t)N * C);
    round_if_bf16(m, a.out, (size_t)N * C);

    int64_t shape[3] = {B, T, C};
    ts_tensor_view(y, mod->name, TS_F32, 3, shape, a.out, TS_MEM_ACTS);
    return TS_OK;
}

static ts_status block_backward(ts_module *mod, ts_step_ctx *ctx,
                                const ts_tensor *dy, ts_tensor *dx) {
    block_impl *b = mod->impl;
    ts_model *m = mod->model;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model, NH = m->cfg.heads;
    size_t N = (size_t)B * T;
    block_acts a;
    block_carve(&a, saved_get(&b->saved, ctx->mb), B, T, C, NH);

    /* Workspace: dfch_gelu, dfch (N, 4C); dln, dres2, datty (N, C);
     * dqkv (N, 3C); datt (B, NH, T, T). */
    size_t need = N * 4 * C * 2 + N * C * 3 + N * 3 * C + (size_t)B * NH * T * T;
    float *w = model_work(m, need);
    if (!w) return TS_ERR_NOMEM;
    float *dfch_gelu = w, *dfch = dfch_gelu + N * 4 * C;
    float *dln = dfch + N * 4 * C, *dres2 = dln + N * C, *datty = dres2 + N * C;
    float *dqkv = datty + N * C, *datt = dqkv + N * 3 * C;
    memset(w, 0, (N * 4 * C * 2 + N * C * 3 + N * 3 * C) * sizeof(float));
    const float *dout = dy->data;
    float *dxin = dx->data;

    /* MLP branch. */
    ts_cpu_matmul_backward(dfch_gelu, grad_of(b->fcprojw), grad_of(b->fcprojb),
                           dout, a.fch_gelu, ts_model_weight(m, b->fcprojw, 0),
                           (int)N, 4 * C, C);
    ts_cpu_gelu_backward(dfch, a.fch, dfch_gelu, N * 4 * C);
    ts_cpu_matmul_backward(dln, grad_of(b->fcw), grad_of(b->fcb), dfch, a.ln2,
                           ts_model_weight(m, b->fcw, 0), (int)N, C, 4 * C);
    memcpy(dres2, dout, N * C * sizeof(float));
    ts_cpu_layernorm_backward(dres2, grad_of(b->ln2w), grad_of(b->ln2b), dln,
                              a.res2, ts_model_weight(m, b->ln2w, 1), a.ln2_mean,
                              a.ln2_rstd, (int)N, C);
    /* Attention branch. */
    ts_cpu_matmul_backward(datty, grad_of(b->projw), grad_of(b->projb), dres2,
                           a.atty, ts_model_weight(m, b->projw, 0), (int)N, C, C);
    ts_cpu_attention_backward(dqkv, datt, datty, a.qkv, a.att, B, T, C, NH);
    memset(dln, 0, N * C * sizeof(float));
    ts_cpu_matmul_backward(dln, grad_of(b->qkvw), grad_of(b->qkvb), dqkv, a.ln1,
                           ts_model_weight(m, b->qkvw, 0), (int)N, C, 3 * C);
    memcpy(dxin, dres2, N * C * sizeof(float));
    /* The block's input is the previous module's output, kept alive by it. */
    ts_cpu_layernorm_backward(dxin, grad_of(b->ln1w), grad_of(b->ln1b), dln,
                              saved_input(&b->saved, ctx->mb), ts_model_weight(m, b->ln1w, 1), a.ln1_mean,
                              a.ln1_rstd, (int)N, C);
    saved_release(&b->saved, ctx->mb);
    return TS_OK;
}

static void block_destroy(ts_module *mod) {
    block_impl *b = mod->impl;
    saved_destroy(&b->saved);
    free(b);
    free(mod);
}

static void block_release(ts_module *mod, int mb) {
    saved_release(&((block_impl *)mod->impl)->saved, mb);
}

static const ts_module_ops block_ops = {"block", block_forward, block_backward,
                                        block_release, block_destroy};

/* ---------------------------------------------------------------------------
 * Head: final LayerNorm, logits = lnf @ wte^T (tied), cross-entropy.
 * ------------------------------------------------------------------------- */
typedef struct head_impl {
    ts_param *lnfw, *lnfb, *wte;
    saved_table saved;
} head_impl;

typedef struct head_acts {
    float *lnf, *mean, *rstd; /* (N, C), (N), (N) */
    float *logits;            /* (N, Vp)          */
    float *losses, *lse;      /* (N), (N)         */
} head_acts;

static size_t head_carve(head_acts *a, float *base, size_t N, int C, int Vp) {
    size_t off = 0;
#define CARVE(field, count)                                                    \
    do {                                                                       \
        if (a) a->field = base + off;                                          \
        off += (count);                                                        \
    } while (0)
    CARVE(lnf, N * C);
    CARVE(mean, N);
    CARVE(rstd, N);
    CARVE(logits, N * (size_t)Vp);
    CARVE(losses, N);
    CARVE(lse, N);
#undef CARVE
    return off;
}

static ts_status head_forward(ts_module *mod, ts_step_ctx *ctx,
                              const ts_tensor *x, ts_tensor *y) {
    head_impl *h = mod->impl;
    ts_model *m = mod->model;
    int C = m->cfg.d_model, V = m->cfg.vocab, Vp = m->cfg.padded_vocab;
    size_t N = (size_t)ctx->B * ctx->T;
    float *base = saved_alloc(&h->saved, ctx->mb, head_carve(NULL, NULL, N, C, Vp), x->data);
    if (!base) return TS_ERR_NOMEM;
    head_acts a;
    head_carve(&a, base, N, C, Vp);
    ts_cpu_layernorm_forward(a.lnf, a.mean, a.rstd, x->data,
                             ts_model_weight(m, h->lnfw, 1),
                             ts_model_weight(m, h->lnfb, 2), (int)N, C);
    round_if_bf16(m, a.lnf, N * C);
    ts_cpu_matmul_forward(a.logits, a.lnf, ts_model_weight(m, h->wte, 0), NULL,
                          (int)N, C, Vp);
    round_if_bf16(m, a.logits, N * (size_t)Vp);
    ts_cpu_crossentropy_forward(a.losses, a.lse, a.logits, ctx->targets, (int)N,
                                V, Vp);
    double sum = 0.0;
    int64_t valid = 0;
    for (size_t i = 0; i < N; i++) {
        if (ctx->targets[i] < 0) continue;
        sum += a.losses[i];
        valid++;
    }
    ctx->loss_sum += sum;
    ctx->valid_tokens += valid;
    memset(y, 0, sizeof *y);
    return TS_OK;
}

static ts_status head_backward(ts_module *mod, ts_step_ctx *ctx,
                               const ts_tensor *dy, ts_tensor *dx) {
    (void)dy;
    head_impl *h = mod->impl;
    ts_model *m = mod->model;
    int C = m->cfg.d_model, V = m->cfg.vocab, Vp = m->cfg.padded_vocab;
    size_t N = (size_t)ctx->B * ctx->T;
    head_acts a;
    head_carve(&a, saved_get(&h->saved, ctx->mb), N, C, Vp);
    /* In place: the logits become their gradient. */
    ts_cpu_crossentropy_backward(a.logits, a.logits, a.lse, ctx->targets,
                                 ctx->dloss, (int)N, V, Vp);
    float *dlnf = model_work(m, N * C);
    if (!dlnf) return TS_ERR_NOMEM;
    memset(dlnf, 0, N * C * sizeof(float));
    ts_cpu_matmul_backward(dlnf, grad_of(h->wte), NULL, a.logits, a.lnf,
                           ts_model_weight(m, h->wte, 0), (int)N, C, Vp);
    memset(dx->data, 0, N * C * sizeof(float));
    ts_cpu_layernorm_backward(dx->data, grad_of(h->lnfw), grad_of(h->lnfb), dlnf,
                              saved_input(&h->saved, ctx->mb),
                              ts_model_weight(m, h->lnfw, 1), a.mean, a.rstd,
                              (int)N, C);
    saved_release(&h->saved, ctx->mb);
    return TS_OK;
}

static void head_destroy(ts_module *mod) {
    head_impl *h = mod->impl;
    saved_destroy(&h->saved);
    free(h);
    free(mod);
}

static void head_release(ts_module *mod, int mb) {
    saved_release(&((head_impl *)mod->impl)->saved, mb);
}

static const ts_module_ops head_ops = {"head", head_forward, head_backward,
                                       head_release, head_destroy};

/* ---------------------------------------------------------------------------
 * Parameters: the registry, one allocation each for values and gradients.
 * ------------------------------------------------------------------------- */
ts_status ts_model_config_check(const ts_model_config *c) {
    if (c->layers < 1) return ts_error(TS_ERR_CONFIG, "[model] layers = %d: must be at least 1", c->layers);
    if (c->d_model < 1) return ts_error(TS_ERR_CONFIG, "[model] d_model = %d: must be at least 1", c->d_model);
    if (c->heads < 1) return ts_error(TS_ERR_CONFIG, "[model] heads = %d: must be at least 1", c->heads);
    if (c->d_model % c->heads != 0)
        return ts_error(TS_ERR_CONFIG, "[model] heads = %d does not divide d_model = %d",
                        c->heads, c->d_model);
    if (c->vocab < 2) return ts_error(TS_ERR_CONFIG, "[model] vocab = %d: must be at least 2", c->vocab);
    if (c->padded_vocab < c->vocab)
        return ts_error(TS_ERR_CONFIG, "[model] padded_vocab = %d is smaller than vocab = %d",
                        c->padded_vocab, c->vocab);
    if (c->context < 1) return ts_error(TS_ERR_CONFIG, "[model] context = %d: must be at least 1", c->context);
    return TS_OK;
}

typedef struct param_decl {
    char name[TS_NAME_MAX];
    int ndim;
    int64_t shape[2];
    int decay;
    ts_init_kind init;
    float std;
    int64_t rows;
} param_decl;

/* Lists the parameters in module order: wte, wpe, h.0.*, ..., lnf.*. */
static int model_declare(const ts_model_config *c, param_decl *d) {
    int n = 0, C = c->d_model;
    float std = 0.02f, resid_std = 0.02f / sqrtf(2.0f * (float)c->layers);
#define DECL(nm, nd, s0, s1, dec, ini, sd, rw)                                 \
    do {                                                                       \
        if (d) {                                                               \
            snprintf(d[n].name, TS_NAME_MAX, "%s", nm);                        \
            d[n].ndim = nd;                                                    \
            d[n].shape[0] = s0;                                                \
            d[n].shape[1] = s1;                                                \
            d[n].decay = dec;                                                  \
            d[n].init = ini;                                                   \
            d[n].std = sd;                                                     \
            d[n].rows = rw;                                                    \
        }                                                                      \
        n++;                                                                   \
    } while (0)
    DECL("wte", 2, c->padded_vocab, C, 1, TS_INIT_NORMAL, std, c->vocab);
    DECL("wpe", 2, c->context, C, 1, TS_INIT_NORMAL, std, c->context);
    for (int l = 0; l < c->layers; l++) {
        char nm[TS_NAME_MAX];
#define LAYER(suffix, nd, s0, s1, dec, ini, sd)                                \
    do {                                                                       \
        snprintf(nm, sizeof nm, "h.%d.%s", l, suffix);                         \
        DECL(nm, nd, s0, s1, dec, ini, sd, s0);                                \
    } while (0)
        LAYER("ln1.weight", 1, C, 1, 0, TS_INIT_ONES, 0);
        LAYER("ln1.bias", 1, C, 1, 0, TS_INIT_ZEROS, 0);
        LAYER("attn.qkv.weight", 2, 3 * C, C, 1, TS_INIT_NORMAL, std);
        LAYER("attn.qkv.bias", 1, 3 * C, 1, 0, TS_INIT_ZEROS, 0);
        LAYER("attn.proj.weight", 2, C, C, 1, TS_INIT_NORMAL, resid_std);
        LAYER("attn.proj.bias", 1, C, 1, 0, TS_INIT_ZEROS, 0);
        LAYER("ln2.weight", 1, C, 1, 0, TS_INIT_ONES, 0);
        LAYER("ln2.bias", 1, C, 1, 0, TS_INIT_ZEROS, 0);
        LAYER("mlp.fc.weight", 2, 4 * C, C, 1, TS_INIT_NORMAL, std);
        LAYER("mlp.fc.bias", 1, 4 * C, 1, 0, TS_INIT_ZEROS, 0);
        LAYER("mlp.proj.weight", 2, C, 4 * C, 1, TS_INIT_NORMAL, resid_std);
        LAYER("mlp.proj.bias", 1, C, 1, 0, TS_INIT_ZEROS, 0);
#undef LAYER
    }
    DECL("lnf.weight", 1, C, 1, 0, TS_INIT_ONES, 0, C);
    DECL("lnf.bias", 1, C, 1, 0, TS_INIT_ZEROS, 0, C);
#undef DECL
    return n;
}

/* Writes the initial value of every element of p (as f32) into dst. */
static void param_init_values(float *dst, const ts_param *p, uint64_t seed) {
    int64_t n = ts_tensor_numel(&p->value);
    switch (p->init) {
    case TS_INIT_ZEROS:
        memset(dst, 0, (size_t)n * sizeof(float));
        break;
    case TS_INIT_ONES:
        for (int64_t i = 0; i < n; i++) dst[i] = 1.0f;
        break;
    case TS_INIT_NORMAL: {
        uint64_t key = ts_rng_key(seed, p->value.name);
        int64_t cols = p->value.ndim == 2 ? p->value.shape[1] : 1;
        int64_t limit = p->init_rows * cols;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++)
            dst[i] = i < limit ? p->init_std * ts_rng_normal(key, (uint64_t)i) : 0.0f;
        break;
    }
    }
}

static ts_module *module_new(ts_model *m, const ts_module_ops *ops, const char *name,
                             void *impl) {
    ts_module *mod = calloc(1, sizeof *mod);
    if (!mod) return NULL;
    mod->ops = ops;
    snprintf(mod->name, sizeof mod->name, "%s", name);
    mod->model = m;
    mod->impl = impl;
    return mod;
}

static ts_status model_build_modules(ts_model *m) {
    int L = m->cfg.layers;
    m->nmodules = L + 2;
    m->modules = calloc((size_t)m->nmodules, sizeof *m->modules);
    if (!m->modules) return ts_error(TS_ERR_NOMEM, "model: out of memory");
    embedding_impl *e = calloc(1, sizeof *e);
    if (!e) return ts_error(TS_ERR_NOMEM, "model: out of memory");
    e->wte = ts_model_param(m, "wte");
    e->wpe = ts_model_param(m, "wpe");
    m->modules[0] = module_new(m, &embedding_ops, "embedding", e);
    for (int l = 0; l < L; l++) {
        block_impl *b = calloc(1, sizeof *b);
        if (!b) return ts_error(TS_ERR_NOMEM, "model: out of memory");
        char nm[TS_NAME_MAX];
        ts_param **slots[12] = {&b->ln1w, &b->ln1b, &b->qkvw, &b->qkvb,
                                &b->projw, &b->projb, &b->ln2w, &b->ln2b,
                                &b->fcw, &b->fcb, &b->fcprojw, &b->fcprojb};
        static const char *suffix[12] = {
            "ln1.weight", "ln1.bias", "attn.qkv.weight", "attn.qkv.bias",
            "attn.proj.weight", "attn.proj.bias", "ln2.weight", "ln2.bias",
            "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias"};
        for (int i = 0; i < 12; i++) {
            snprintf(nm, sizeof nm, "h.%d.%s", l, suffix[i]);
            *slots[i] = ts_model_param(m, nm);
            TS_ASSERT(*slots[i] != NULL);
        }
        snprintf(nm, sizeof nm, "h.%d", l);
        m->modules[1 + l] = module_new(m, &block_ops, nm, b);
    }
    head_impl *h = calloc(1, sizeof *h);
    if (!h) return ts_error(TS_ERR_NOMEM, "model: out of memory");
    h->lnfw = ts_model_param(m, "lnf.weight");
    h->lnfb = ts_model_param(m, "lnf.bias");
    h->wte = ts_model_param(m, "wte");
    m->modules[L + 1] = module_new(m, &head_ops, "head", h);
    for (int i = 0; i < m->nmodules; i++)
        if (!m->modules[i]) return ts_error(TS_ERR_NOMEM, "model: out of memory");
    /* Which parameters each module reads, for gradient-ready tracking. */
    ts_module *emb = m->modules[0], *head = m->modules[L + 1];
    emb->param_index[emb->nparams++] = (int)(e->wte - m->params);
    emb->param_index[emb->nparams++] = (int)(e->wpe - m->params);
    for (int l = 0; l < L; l++) {
        ts_module *mod = m->modules[1 + l];
        block_impl *b = mod->impl;
        ts_param *list[12] = {b->ln1w, b->ln1b, b->qkvw, b->qkvb, b->projw, b->projb,
                              b->ln2w, b->ln2b, b->fcw,  b->fcb,  b->fcprojw, b->fcprojb};
        for (int i = 0; i < 12; i++) mod->param_index[mod->nparams++] = (int)(list[i] - m->params);
    }
    head->param_index[head->nparams++] = (int)(h->lnfw - m->params);
    head->param_index[head->nparams++] = (int)(h->lnfb - m->params);
    head->param_index[head->nparams++] = (int)(h->wte - m->params);
    return TS_OK;
}

ts_status ts_model_create(const ts_model_config *cfg, ts_dtype dtype,
                          uint64_t seed, ts_model **out) {
    *out = NULL;
    TS_TRY(ts_model_config_check(cfg));
    if (dtype != TS_F32 && dtype != TS_BF16)
        return ts_error(TS_ERR_INVALID, "model: parameters must be f32 or bf16, not %s",
                        ts_dtype_name(dtype));
    ts_model *m = calloc(1, sizeof *m);
    if (!m) return ts_error(TS_ERR_NOMEM, "model: out of memory");
    m->cfg = *cfg;
    m->dtype = dtype;
    int n = model_declare(cfg, NULL);
    param_decl *decl = calloc((size_t)n, sizeof *decl);
    m->params = calloc((size_t)n, sizeof *m->params);
    if (!decl || !m->params) {
        free(decl);
        ts_model_destroy(m);
        return ts_error(TS_ERR_NOMEM, "model: out of memory");
    }
    model_declare(cfg, decl);
    m->nparams = n;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += (size_t)(decl[i].shape[0] * (decl[i].ndim == 2 ? decl[i].shape[1] : 1));
    m->numel = total;
    size_t esz = ts_dtype_size(dtype);
    m->param_data = ts_mem_alloc(TS_MEM_PARAMS, total * esz);
    m->grad_data = ts_mem_alloc(TS_MEM_GRADS, total * sizeof(float));
    if (!m->param_data || !m->grad_data) {
        free(decl);
        ts_model_destroy(m);
        return TS_ERR_NOMEM;
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        ts_param *p = &m->params[i];
        ts_tensor_view(&p->value, decl[i].name, dtype, decl[i].ndim, decl[i].shape,
                       (char *)m->param_data + off * esz, TS_MEM_PARAMS);
        ts_tensor_view(&p->grad, decl[i].name, TS_F32, decl[i].ndim, decl[i].shape,
                       m->grad_data + off, TS_MEM_GRADS);
        p->offset = off;
        p->decay = decl[i].decay;
        p->init = decl[i].init;
        p->init_std = decl[i].std;
        p->init_rows = decl[i].rows;
        off += (size_t)ts_tensor_numel(&p->value);
    }
    free(decl);
    /* Initialise: f32 directly, or through a staging copy rounded to bf16. */
    for (int i = 0; i < n; i++) {
        ts_param *p = &m->params[i];
        int64_t cnt = ts_tensor_numel(&p->value);
        if (dtype == TS_F32) {
            param_init_values(p->value.data, p, seed);
        } else {
            float *tmp = ts_mem_alloc(TS_MEM_OTHER, (size_t)cnt * sizeof(float));
            if (!tmp) {
                ts_model_destroy(m);
                return TS_ERR_NOMEM;
            }
            param_init_values(tmp, p, seed);
            ts_cpu_f32_to_bf16(p->value.data, tmp, (size_t)cnt);
            ts_mem_free(tmp);
        }
    }
    ts_status st = model_build_modules(m);
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
    ts_mem_free(m->param_data);
    ts_mem_free(m->grad_data);
    ts_mem_free(m->work);
    for (int i = 0; i < 4; i++) ts_mem_free(m->stage[i]);
    free(m->params);
    free(m);
}

ts_param *ts_model_param(ts_model *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].value.name, name) == 0) return &m->params[i];
    return NULL;
}

void ts_model_zero_grad(ts_model *m) {
    float *g = m->grad_data;
    size_t n = m->numel;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) g[i] = 0.0f;
}

/* ---------------------------------------------------------------------------
 * Running the modules.
 * ------------------------------------------------------------------------- */
ts_status ts_model_forward(ts_model *m, ts_step_ctx *ctx) {
    ts_tensor x, y;
    memset(&x, 0, sizeof x);
    for (int i = 0; i < m->nmodules; i++) {
        ts_status st = m->modules[i]->ops->forward(m->modules[i], ctx, &x, &y);
        if (st) {
            for (int k = 0; k < i; k++) m->modules[k]->ops->release(m->modules[k], ctx->mb);
            return st;
        }
        x = y;
    }
    return TS_OK;
}

ts_status ts_model_backward(ts_model *m, ts_step_ctx *ctx) {
    size_t n = (size_t)ctx->B * ctx->T * m->cfg.d_model;
    float *buf = ts_mem_alloc(TS_MEM_ACTS, 2 * n * sizeof(float));
    if (!buf) return TS_ERR_NOMEM;
    int64_t shape[3] = {ctx->B, ctx->T, m->cfg.d_model};
    ts_tensor grads[2];
    ts_tensor_view(&grads[0], "dx0", TS_F32, 3, shape, buf, TS_MEM_ACTS);
    ts_tensor_view(&grads[1], "dx1", TS_F32, 3, shape, buf + n, TS_MEM_ACTS);
    ts_status st = TS_OK;
    int cur = 0; /* grads[cur] holds dy of the module being run */
    for (int i = m->nmodules - 1; i >= 0 && !st; i--) {
        st = m->modules[i]->ops->backward(m->modules[i], ctx, &grads[cur],
                                          i > 0 ? &grads[1 - cur] : NULL);
        if (!st && ctx->module_done) st = ctx->module_done(ctx->module_done_user, i);
        cur = 1 - cur;
    }
    ts_mem_free(buf);
    return st;
}

ts_status ts_model_forward_backward(ts_model *m, ts_step_ctx *ctx) {
    TS_TRY(ts_model_forward(m, ctx));
    return ts_model_backward(m, ctx);
}

ts_status ts_model_loss(ts_model *m, ts_step_ctx *ctx, double *mean_loss) {
    double before = ctx->loss_sum;
    int64_t valid_before = ctx->valid_tokens;
    TS_TRY(ts_model_forward(m, ctx));
    for (int i = 0; i < m->nmodules; i++) m->modules[i]->ops->release(m->modules[i], ctx->mb);
    int64_t valid = ctx->valid_tokens - valid_before;
    *mean_loss = valid > 0 ? (ctx->loss_sum - before) / (double)valid : 0.0;
    return TS_OK;
}

static ts_status plan_entry(ts_layout_plan *plan, const ts_mesh *mesh, const char *name,
                            int ndim, const int64_t *shape, ts_plan_kind kind) {
    ts_layout l;
    TS_TRY(ts_layout_init(&l, ndim, shape));
    static const ts_mesh_axis axes[] = {TS_AXIS_TP, TS_AXIS_CP, TS_AXIS_DP, TS_AXIS_PP,
                                        TS_AXIS_EP, TS_AXIS_ETP, TS_AXIS_EDP};
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

void ts_model_activation_bytes(const ts_model_config *c, int B, int T, size_t *saved,
                               size_t *workspace) {
    size_t N = (size_t)B * T, C = (size_t)c->d_model, Vp = (size_t)c->padded_vocab;
    size_t block = block_carve(NULL, NULL, B, T, c->d_model, c->heads);
    size_t head = head_carve(NULL, NULL, N, c->d_model, c->padded_vocab);
    *saved = sizeof(float) * (N * C + (size_t)c->layers * block + head);
    /* Backward: the block's workspace (or the head's dlnf, if larger) and
     * the two dx buffers that alternate between modules. */
    size_t ws_block = N * 4 * C * 2 + N * C * 3 + N * 3 * C + (size_t)B * c->heads * T * T;
    size_t ws = ws_block > N * C ? ws_block : N * C;
    (void)Vp;
    *workspace = sizeof(float) * (ws + 2 * N * C);
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
