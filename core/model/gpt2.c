/*
 * gpt2.c — the GPT-2 architecture (arch.h): its parameters and its three
 * module kinds, written with the placement-driven layers of layers.h.
 *
 * GPT-2 (Radford et al. 2019) as llm.c trains it: tied token embedding and LM
 * head, learned positions, pre-LN blocks (LayerNorm -> causal attention ->
 * residual, LayerNorm -> MLP 4C with tanh-GELU -> residual), a final
 * LayerNorm and softmax cross-entropy over a vocabulary padded to Vp columns.
 * The QKV weight is (3, C, C) and its bias (3, C): q, k and v blocks with the
 * heads contiguous in each, so that cutting dimension 1 cuts by heads.
 *
 * Every collective comes from the placements the plan gives the parameters
 * and the hidden state: cut the QKV and MLP weights by columns and the
 * projections by rows over an axis and the blocks run Megatron-LM's tensor
 * parallelism there; cut the hidden state along the sequence as well and the
 * LayerNorm regions hold sequence slices; cut wte by rows and the embedding
 * and the loss run over vocabulary shards. Nothing here names an axis.
 *
 * Not here: the runtime (runtime.c), the kernels, the optimizer.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "layers.h"
#include "phase.h"      /* ts_phase_recompute: a selective backward's recomputed core */
#include "run_config.h" /* ts_recompute_word */

/* The placement of the hidden state between modules. */
static ts_place hidden_place(const ts_model *m) {
    ts_place p = ts_place_replicated();
    for (int a = 0; a < m->naxes; a++)
        p.on[a] = m->act[a];
    return p;
}

/* ---------------------------------------------------------------------------
 * Embedding: out = wte[tokens] + wpe[t]. Parameters: wte, wpe.
 * ------------------------------------------------------------------------- */
/* The positions of this rank's ctx->T tokens of each sequence (host): the
 * trainer's (ctx->positions), or pos0, pos0 + 1, ... */
static const int32_t *step_positions(ts_model *m, const ts_step_ctx *ctx) {
    if (ctx->positions) return ctx->positions;
    if (m->npositions < ctx->T) {
        int32_t *p = realloc(m->positions, (size_t)ctx->T * sizeof *p);
        if (!p) {
            ts_error(TS_ERR_NOMEM, "model: out of memory");
            return NULL;
        }
        m->positions = p;
        m->npositions = ctx->T;
    }
    for (int i = 0; i < ctx->T; i++)
        m->positions[i] = ctx->pos0 + i;
    return m->positions;
}

/* The learned positions of rows row0 .. row0 + Tl - 1 of this rank's tokens
 * of each sequence (B, Tl, C): forward (backward = 0) adds them to dst, the
 * hidden state, from src = wpe; backward sums src, the hidden state's
 * gradient, into dst = dwpe. One call per run of consecutive positions. */
static ts_status position_rows(ts_model *m, const ts_step_ctx *ctx, float *dst, const float *src,
                               int row0, int Tl, int backward) {
    const int32_t *pos = step_positions(m, ctx);
    if (!pos) return TS_ERR_NOMEM;
    int B = ctx->B, C = m->cfg.d_model;
    ts_status (*add)(float *, const float *, int, int, int, int) =
        backward ? m->be->position_backward : m->be->position_forward;
    for (int r = 0; r < Tl;) {
        int n = 1;
        while (r + n < Tl && pos[row0 + r + n] == pos[row0 + r] + n)
            n++;
        if (n == Tl) return add(dst, src, B, Tl, C, pos[row0]); /* every sequence at once */
        for (int b = 0; b < B; b++) {
            size_t row = (size_t)b * Tl + r;
            TS_TRY(backward ? add(dst, src + row * C, 1, n, C, pos[row0 + r])
                            : add(dst + row * C, src, 1, n, C, pos[row0 + r]));
        }
        r += n;
    }
    return TS_OK;
}

static ts_status embedding_forward(ts_module *mod, ts_step_ctx *ctx, const ts_tensor *x,
                                   ts_tensor *y) {
    (void)x;
    ts_model *m = mod->model;
    const ts_param *wte = ts_module_param(mod, 0), *wpe = ts_module_param(mod, 1);
    ts_place xp = hidden_place(m), lp;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model, v0, Vl;
    TS_TRY(ts_layer_embedding_place(m, wte, &lp, &v0, &Vl));
    int Tl = ts_layer_rows(m, &xp, T), Tlook = ts_layer_rows(m, &lp, T);
    size_t Nl = (size_t)B * Tl, Nlook = (size_t)B * Tlook;
    /* Saved: only the output (B, Tl, C); a lookup over more rows than that
     * lives in the workspace until redistributed. */
    float *out = ts_module_save_output(mod, ctx->mb, Nl * C);
    if (!out) return TS_ERR_NOMEM;
    float *look = Tlook == Tl ? out : ts_layer_work(m, Nlook * C), *h;
    if (!look) return TS_ERR_NOMEM;
    const ts_backend *be = m->be;
    TS_TRY(be->embedding_shard_forward(look, ctx->tokens, ts_layer_weight(m, wte, 0), v0, Vl,
                                       (int)Nlook, C));
    TS_TRY(ts_layer_redistribute(m, out, look, &lp, &xp, B, T, C, &h));
    TS_TRY(position_rows(m, ctx, out, ts_layer_weight(m, wpe, 1), ts_layer_row0(m, &xp, T), Tl, 0));
    TS_TRY(ts_layer_round(m, out, Nl * C));
    int64_t shape[3] = {B, Tl, C};
    ts_tensor_view(y, "embedding.out", TS_F32, 3, shape, out, TS_MEM_ACTS);
    y->device = be->kind;
    return TS_OK;
}

static ts_status embedding_backward(ts_module *mod, ts_step_ctx *ctx, const ts_tensor *dy,
                                    ts_tensor *dx) {
    (void)dx;
    ts_model *m = mod->model;
    const ts_param *wte = ts_module_param(mod, 0), *wpe = ts_module_param(mod, 1);
    ts_place xp = hidden_place(m), lp;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model, v0, Vl;
    TS_TRY(ts_layer_embedding_place(m, wte, &lp, &v0, &Vl));
    int Tl = ts_layer_rows(m, &xp, T);
    TS_TRY(position_rows(m, ctx, ts_layer_grad(wpe), dy->data, ts_layer_row0(m, &xp, T), Tl, 1));
    /* The lookup needs the gradient of every row it produced. */
    ts_place glp = ts_layer_grad_place(m, &lp);
    float *buf = NULL, *dlook;
    if (!ts_place_equal(m, &glp, &xp)) {
        buf = ts_layer_work(m, (size_t)B * ts_layer_rows(m, &glp, T) * C);
        if (!buf) return TS_ERR_NOMEM;
    }
    TS_TRY(ts_layer_redistribute(m, buf, dy->data, &xp, &glp, B, T, C, &dlook));
    TS_TRY(m->be->embedding_shard_backward(ts_layer_grad(wte), dlook, ctx->tokens, v0, Vl,
                                           B * ts_layer_rows(m, &glp, T), C));
    ts_module_release(mod, ctx->mb);
    return TS_OK;
}

static const ts_module_ops embedding_ops = {
    .kind = "embedding", .forward = embedding_forward, .backward = embedding_backward};

/* ---------------------------------------------------------------------------
 * Transformer block (pre-LN). Parameters, in order: ln1.weight, ln1.bias,
 * attn.qkv.weight, attn.qkv.bias, attn.proj.weight, attn.proj.bias,
 * ln2.weight, ln2.bias, mlp.fc.weight, mlp.fc.bias, mlp.proj.weight,
 * mlp.proj.bias.
 * ------------------------------------------------------------------------- */
enum { LN1W, LN1B, QKVW, QKVB, PROJW, PROJB, LN2W, LN2B, FCW, FCB, FCPROJW, FCPROJB };
/* An MoE block (moe.h) has, after LN2B, the router and the experts' four
 * parameters in place of the MLP's: 13 in all. */
enum { MOE_FIRST = LN2B + 1, MOE_BLOCK_PARAMS = LN2B + 6 };

static int block_is_moe(const ts_module *mod) {
    return mod->nparams == MOE_BLOCK_PARAMS;
}

/* The block's placements and local sizes for a micro-batch of B x T. */
typedef struct block_shape {
    ts_place x;                    /* the hidden state                      */
    ts_place qkv_in, qkv, dqkv_in; /* QKV product: input, output, input grad */
    ts_place proj_in, proj;        /* attention projection                  */
    ts_place fc_in, fc, dfc_in;    /* MLP first product                     */
    ts_place fcproj_in, fcproj;    /* MLP projection                        */
    int Tl;                        /* rows of the hidden state per sequence */
    size_t Nl, N;                  /* hidden-state rows; rows of the products */
    int C, Cl, NHl, F4;            /* width; local attention width, heads,
                                      MLP width (0 in an MoE block)         */
    int moe;                       /* the MLP is a mixture of experts       */
} block_shape;

static ts_status block_shape_of(ts_module *mod, int B, int T, block_shape *s) {
    ts_model *m = mod->model;
    s->x = hidden_place(m);
    TS_TRY(ts_layer_linear_places(m, ts_module_param(mod, QKVW), &s->x, &s->qkv_in, &s->qkv,
                                  &s->dqkv_in));
    TS_TRY(ts_layer_linear_places(m, ts_module_param(mod, PROJW), &s->qkv, &s->proj_in, &s->proj,
                                  NULL));
    s->moe = block_is_moe(mod);
    if (!s->moe) {
        TS_TRY(ts_layer_linear_places(m, ts_module_param(mod, FCW), &s->x, &s->fc_in, &s->fc,
                                      &s->dfc_in));
        TS_TRY(ts_layer_linear_places(m, ts_module_param(mod, FCPROJW), &s->fc, &s->fcproj_in,
                                      &s->fcproj, NULL));
    }
    s->C = m->cfg.d_model;
    s->Tl = ts_layer_rows(m, &s->x, T);
    s->Nl = (size_t)B * s->Tl;
    s->N = (size_t)B * ts_layer_rows(m, &s->qkv_in, T);
    s->Cl = (int)ts_module_param(mod, QKVW)->value.shape[1];
    s->NHl = (int)((int64_t)m->cfg.heads * s->Cl / s->C);
    s->F4 = s->moe ? 0 : (int)ts_module_param(mod, FCW)->value.shape[0];
    return TS_OK;
}

/* The axis that cuts every sequence (its plugin computes the attention), or
 * -1: the backend's attention over whole sequences. */
static int seq_axis(const ts_model *m) {
    for (int a = 0; a < m->naxes; a++)
        if (m->axes[a].cuts_sequence) return a;
    return -1;
}

/* The saved activations of one micro-batch, carved from one allocation.
 * Rows: Nl of the hidden state, N of the products (more when the hidden
 * state is cut along the sequence); the inputs of the products are saved as
 * the hidden state's rows and redistributed again in backward (Megatron-LM's
 * choice: it is what makes cutting the sequence save memory). With
 * selective recomputation the attention core's state (att: the
 * probabilities, or what the backend keeps instead) is not saved: it lives
 * in the workspace while the forward, or the backward that makes it again,
 * needs it; the core's output atty stays saved (the projection's input),
 * as in Megatron-LM. */
typedef struct block_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (Nl, C), (Nl), (Nl)           */
    float *qkv;                       /* (N, 3Cl)                       */
    float *att;                       /* the backend's saved attention
                                         state: (B, NHl, T, T) probabilities
                                         on the CPU, lse (B, NHl, T) on CUDA */
    float *atty;                      /* (N, Cl)                        */
    float *res2;                      /* (Nl, C) x + attention branch   */
    float *ln2, *ln2_mean, *ln2_rstd; /* (Nl, C), (Nl), (Nl)           */
    float *fch, *fch_gelu;            /* (N, F4)                        */
    float *out;                       /* (Nl, C) res2 + MLP branch: the
                                         module's output, apart          */
} block_acts;

static size_t block_carve(block_acts *a, float *base, const block_shape *s, size_t att_floats,
                          int selective, size_t *keep) {
    size_t N = s->N, Nl = s->Nl, C = (size_t)s->C, Cl = (size_t)s->Cl, off = 0;
#define CARVE(field, count)                                                                        \
    do {                                                                                           \
        if (a) a->field = base + off;                                                              \
        off += (count);                                                                            \
    } while (0)
    /* f32 first: the statistics and the attention's saved state */
    CARVE(ln1_mean, Nl);
    CARVE(ln1_rstd, Nl);
    CARVE(ln2_mean, Nl);
    CARVE(ln2_rstd, Nl);
    if (!selective) CARVE(att, att_floats);
    if (keep) *keep = off;
    /* then the bf16 values of bf16 mode */
    CARVE(ln1, Nl * C);
    CARVE(qkv, N * 3 * Cl);
    CARVE(atty, N * Cl);
    CARVE(res2, Nl * C);
    CARVE(ln2, Nl * C);
    CARVE(fch, N * (size_t)s->F4);
    CARVE(fch_gelu, N * (size_t)s->F4);
#undef CARVE
    return off;
}

/* The attention provider's arguments for this micro-batch of this rank's
 * T rows of each sequence. */
static ts_status provider_args(ts_module *mod, ts_step_ctx *ctx, const block_shape *s, int a,
                               ts_plugin_attention_args *args) {
    ts_model *m = mod->model;
    const int32_t *pos = step_positions(m, ctx);
    if (!pos) return TS_ERR_NOMEM;
    *args = (ts_plugin_attention_args){.struct_size = sizeof *args,
                                       .micro_batch = ctx->mb,
                                       .B = ctx->B,
                                       .T = ctx->T * m->axes[a].size,
                                       .T_local = ctx->T,
                                       .C = s->Cl,
                                       .NH = s->NHl,
                                       .positions = pos,
                                       .saved = ts_module_provider_state(mod, ctx->mb),
                                       .comm = m->axes[a].comm,
                                       .bf16 = m->dtype == TS_BF16,
                                       .grads_bf16 = m->dtype == TS_BF16 && m->partial_bf16};
    return TS_OK;
}

/* The provider's forward (backward = 0) or backward (1); its failure names
 * the module and the axis. */
static ts_status provider_call(ts_module *mod, int a, ts_plugin_attention_args *args,
                               int backward) {
    const ts_model_axis *ax = &mod->model->axes[a];
    ts_error(TS_OK, "%s", "");
    ts_status st = (backward ? ax->attention->backward
                             : ax->attention->forward)(ax->attention_ctx, args, ax->attention_user);
    if (st)
        return ts_error(st, "%s: attention %s over %s: %s", mod->name,
                        backward ? "backward" : "forward", ax->name, ts_last_error_bare());
    return TS_OK;
}

/* The attention core: atty (N, Cl) and its saved state from the block's
 * qkv, by the backend over whole sequences or by the provider of the axis
 * `sa` cutting them. Run by the forward, and again by a selective backward
 * without the backend's fused one: the same kernel on the same q, k, v
 * gives the same bits. `unsaved` (selective, a backend with the fused
 * backward): its forward that keeps nothing, in the scratch a->att. */
static ts_status block_attention(ts_module *mod, ts_step_ctx *ctx, const block_shape *s, int sa,
                                 int unsaved, block_acts *a) {
    ts_model *m = mod->model;
    int B = ctx->B, T = ctx->T;
    if (sa >= 0) { /* a plugin's attention across the ranks cutting the sequence */
        ts_plugin_attention_args args;
        TS_TRY(provider_args(mod, ctx, s, sa, &args));
        args.qkv = a->qkv;
        args.out = a->atty;
        TS_TRY(provider_call(mod, sa, &args, 0));
    } else if (unsaved) {
        TS_TRY(m->be->attention_forward_unsaved(a->atty, a->att, a->qkv, B, T, s->Cl, s->NHl));
    } else {
        TS_TRY((m->dtype == TS_BF16 ? m->be->attention_forward_bf16 : m->be->attention_forward)(
            a->atty, a->att, a->qkv, B, T, s->Cl, s->NHl));
    }
    return ts_layer_round(m, a->atty, s->N * (size_t)s->Cl);
}

/* Selective, on a backend whose attention can keep nothing and make it all
 * again inside its backward (attention_backward_recompute); else the
 * attention's forward runs again before its backward. A provider's
 * attention over a cut sequence always runs its forward again. */
static int block_fused(const ts_module *mod, int sa) {
    const ts_backend *be = mod->model->be;
    return mod->recompute == TS_RECOMPUTE_SELECTIVE && sa < 0 && be->attention_forward_unsaved &&
           be->attention_backward_recompute;
}

/* Frees the provider's state of micro-batch mb (a selective forward's, or
 * one a forward-only pass left). */
static void provider_release(ts_module *mod, int mb) {
    ts_model *m = mod->model;
    int sa = seq_axis(m);
    if (sa < 0 || mb >= mod->saved.cap || !mod->saved.slot[mb].provider) return;
    const ts_model_axis *ax = &m->axes[sa];
    ts_plugin_attention_args args = {.struct_size = sizeof args,
                                     .micro_batch = mb,
                                     .saved = ts_module_provider_state(mod, mb),
                                     .comm = ax->comm};
    if (ax->attention->release)
        ax->attention->release(ax->attention_ctx, &args, ax->attention_user);
}

static ts_status block_forward(ts_module *mod, ts_step_ctx *ctx, const ts_tensor *x, ts_tensor *y) {
    ts_model *m = mod->model;
    const ts_backend *be = m->be;
    int B = ctx->B, T = ctx->T;
    block_shape s;
    TS_TRY(block_shape_of(mod, B, T, &s));
    if (s.N != (size_t)B * T)
        return ts_error(TS_ERR_INVALID,
                        "%s: the attention needs whole sequences, but its input is cut along "
                        "the sequence",
                        mod->name);
    int C = s.C, Cl = s.Cl, F4 = s.F4, N = (int)s.N, Nl = (int)s.Nl, sa = seq_axis(m);
    int sel = mod->recompute == TS_RECOMPUTE_SELECTIVE;
    int fused = block_fused(mod, sa);
    size_t att_floats = sa >= 0 ? 0 : be->attention_saved_floats(B, s.NHl, T);
    size_t keep, floats = block_carve(NULL, NULL, &s, att_floats, sel, &keep);
    float *base = ts_module_save(mod, ctx->mb, floats, keep, x->data);
    if (!base) return TS_ERR_NOMEM;
    block_acts a;
    block_carve(&a, base, &s, att_floats, sel, NULL);
    a.out = ts_module_save_output(mod, ctx->mb, s.Nl * C);
    if (!a.out) return TS_ERR_NOMEM;
    /* Workspace: a redistributed (N, C) input and an (N, C) partial sum;
     * selective, the attention's state or scratch after them. */
    size_t core = !sel ? 0 : fused ? be->attention_recompute_floats(B, s.NHl, T) : att_floats;
    float *work = ts_layer_work(m, 2 * (size_t)N * C + core);
    if (!work) return TS_ERR_NOMEM;
    float *gathered = work, *partial = work + (size_t)N * C, *full, *h;
    if (sel) a.att = partial + (size_t)N * C;
    const float *xin = x->data;
#define W(k, slot) ts_layer_weight(m, ts_module_param(mod, k), slot)
#define P(k) ts_module_param(mod, k)

    /* Attention branch. */
    TS_TRY(
        be->layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, xin, W(LN1W, 1), W(LN1B, 2), Nl, C));
    TS_TRY(ts_layer_round(m, a.ln1, (size_t)Nl * C));
    TS_TRY(ts_layer_redistribute(m, gathered, a.ln1, &s.x, &s.qkv_in, B, T, C, &full));
    TS_TRY(ts_layer_linear_forward(m, a.qkv, full, P(QKVW), W(QKVB, 1), N, C, 3 * Cl));
    TS_TRY(ts_layer_round(m, a.qkv, (size_t)N * 3 * Cl));
    TS_TRY(block_attention(mod, ctx, &s, sa, fused, &a));
    if (sel) provider_release(mod, ctx->mb); /* its backward runs it again */
    TS_TRY(ts_layer_linear_forward(m, partial, a.atty, P(PROJW), NULL, N, Cl, C));
    TS_TRY(ts_layer_redistribute(m, a.res2, partial, &s.proj, &s.x, B, T, C, &h));
    /* res2 = x + attention + proj bias, and the MLP's LayerNorm of it. */
    TS_TRY(be->residual_layernorm_forward(a.res2, a.ln2, a.ln2_mean, a.ln2_rstd, h, xin,
                                          W(PROJB, 3), W(LN2W, 1), W(LN2B, 2), Nl, C,
                                          m->dtype == TS_BF16));

    /* MLP branch: this rank's rows of the hidden state through the experts,
     * or the (cut) dense MLP. */
    if (s.moe) {
        TS_TRY(ts_moe_forward(mod, ctx, MOE_FIRST, a.ln2, partial, Nl));
        TS_TRY(be->residual_forward(a.out, partial, a.res2, (size_t)Nl * C));
    } else {
        TS_TRY(ts_layer_redistribute(m, gathered, a.ln2, &s.x, &s.fc_in, B, T, C, &full));
        TS_TRY(ts_layer_linear_forward(m, a.fch, full, P(FCW), NULL, N, C, F4));
        TS_TRY(be->bias_gelu_forward(a.fch_gelu, a.fch, W(FCB, 1), N, F4, m->dtype == TS_BF16));
        TS_TRY(ts_layer_linear_forward(m, partial, a.fch_gelu, P(FCPROJW), NULL, N, F4, C));
        TS_TRY(ts_layer_redistribute(m, a.out, partial, &s.fcproj, &s.x, B, T, C, &h));
        TS_TRY(be->residual_forward(a.out, h, a.res2, (size_t)Nl * C));
        TS_TRY(be->add_bias(a.out, W(FCPROJB, 1), Nl, C));
    }
    TS_TRY(ts_layer_round(m, a.out, (size_t)Nl * C));

    int64_t shape[3] = {B, s.Tl, C};
    ts_tensor_view(y, mod->name, TS_F32, 3, shape, a.out, TS_MEM_ACTS);
    y->device = be->kind;
    return TS_OK;
}

/* Backward workspace, in floats (see block_backward). */
static size_t block_bwd_work(const block_shape *s, size_t scratch_floats) {
    size_t N = s->N, C = (size_t)s->C, Cl = (size_t)s->Cl;
    return N * (size_t)s->F4 * 2 + N * C * 4 + N * Cl + N * 3 * Cl + scratch_floats;
}

static ts_status block_backward(ts_module *mod, ts_step_ctx *ctx, const ts_tensor *dy,
                                ts_tensor *dx) {
    ts_model *m = mod->model;
    const ts_backend *be = m->be;
    int B = ctx->B, T = ctx->T;
    block_shape s;
    TS_TRY(block_shape_of(mod, B, T, &s));
    int C = s.C, Cl = s.Cl, F4 = s.F4, sa = seq_axis(m);
    int sel = mod->recompute == TS_RECOMPUTE_SELECTIVE;
    size_t N = s.N, Nl = s.Nl;
    int fused = block_fused(mod, sa);
    size_t att_floats = sa >= 0 ? 0 : be->attention_saved_floats(B, s.NHl, T);
    size_t scratch = sa >= 0 ? 0
                     : fused ? be->attention_recompute_floats(B, s.NHl, T)
                             : be->attention_scratch_floats(B, s.NHl, T);
    float *base = ts_module_saved(mod, ctx->mb);
    if (!base) return TS_ERR_NOMEM;
    block_acts a;
    block_carve(&a, base, &s, att_floats, sel, NULL);

    /* Workspace: dfch_gelu, dfch (N, F4); dfull, dln, dres2, gathered
     * (N, C); datty (N, Cl); dqkv (N, 3Cl); the attention's scratch;
     * selective without the fused backward, the attention's state. */
    float *w = ts_layer_work(m, block_bwd_work(&s, scratch) + (sel && !fused ? att_floats : 0));
    if (!w) return TS_ERR_NOMEM;
    float *dfch_gelu = w, *dfch = dfch_gelu + N * F4;
    float *dfull = dfch + N * F4, *dln = dfull + N * C, *dres2 = dln + N * C;
    float *gathered = dres2 + N * C, *datty = gathered + N * C;
    float *dqkv = datty + N * Cl, *datt = dqkv + N * 3 * Cl;
    if (sel) a.att = datt + scratch;
    TS_TRY(be->zero(dfch_gelu, N * F4 * 2 * sizeof(float)));
    TS_TRY(be->zero(dln, N * C * sizeof(float)));
    TS_TRY(be->zero(datty, (N * Cl + N * 3 * Cl) * sizeof(float)));
    float *dout = dy->data, *din, *full, *dh;
    ts_place gfcproj = s.moe ? s.x : ts_layer_grad_place(m, &s.fcproj);
    ts_place gproj = ts_layer_grad_place(m, &s.proj);

    if (s.moe) { /* the experts' and the router's gradient, on this rank's rows */
        TS_TRY(be->zero(dln, Nl * C * sizeof(float)));
        TS_TRY(ts_moe_backward(mod, ctx, MOE_FIRST, a.ln2, dout, dln, (int)Nl));
        dh = dln;
    } else {
        /* MLP branch: the projection's gradient as its output was (before
         * the redistribution to the hidden state). */
        TS_TRY(be->bias_grad(ts_layer_grad(P(FCPROJB)), dout, (int)Nl, C));
        TS_TRY(ts_layer_redistribute(m, dfull, dout, &s.x, &gfcproj, B, T, C, &din));
        TS_TRY(ts_layer_linear_backward(m, dfch_gelu, ts_layer_grad(P(FCPROJW)), NULL, din,
                                        a.fch_gelu, P(FCPROJW), (int)N, F4, C));
        TS_TRY(be->gelu_backward(dfch, a.fch, dfch_gelu, N * F4));
        TS_TRY(ts_layer_regather(m, gathered, a.ln2, &s.x, &s.fc_in, B, T, C, &full));
        TS_TRY(ts_layer_linear_backward(m, dln, ts_layer_grad(P(FCW)), ts_layer_grad(P(FCB)), dfch,
                                        full, P(FCW), (int)N, C, F4));
        /* dln as the product gives it (partial sums where it is column
         * parallel) to the hidden state's placement. */
        TS_TRY(ts_layer_redistribute(m, dfull, dln, &s.dfc_in, &s.x, B, T, C, &dh));
    }
    TS_TRY(be->copy(dres2, dout, Nl * C * sizeof(float)));
    TS_TRY(be->layernorm_backward(dres2, ts_layer_grad(P(LN2W)), ts_layer_grad(P(LN2B)), dh, a.res2,
                                  W(LN2W, 1), a.ln2_mean, a.ln2_rstd, (int)Nl, C));
    /* Attention branch. */
    TS_TRY(be->bias_grad(ts_layer_grad(P(PROJB)), dres2, (int)Nl, C));
    TS_TRY(ts_layer_redistribute(m, dfull, dres2, &s.x, &gproj, B, T, C, &din));
    TS_TRY(ts_layer_linear_backward(m, datty, ts_layer_grad(P(PROJW)), NULL, din, a.atty, P(PROJW),
                                    (int)N, Cl, C));
    if (sel && !fused) { /* the core's forward again: its state, atty's same bits */
        int phase = ts_phase_recompute(1);
        ts_status st = block_attention(mod, ctx, &s, sa, 0, &a);
        ts_phase_recompute(phase);
        TS_TRY(st);
    }
    if (sa >= 0) {
        ts_plugin_attention_args args;
        TS_TRY(provider_args(mod, ctx, &s, sa, &args));
        args.qkv = a.qkv;
        args.out = a.atty;
        args.dout = datty;
        args.dqkv = dqkv;
        TS_TRY(provider_call(mod, sa, &args, 1));
    } else if (fused) {
        TS_TRY(be->attention_backward_recompute(dqkv, datt, datty, a.qkv, B, T, Cl, s.NHl));
    } else {
        TS_TRY((m->dtype == TS_BF16 ? be->attention_backward_bf16 : be->attention_backward)(
            dqkv, datt, datty, a.qkv, a.atty, a.att, B, T, Cl, s.NHl));
    }
    TS_TRY(be->zero(dln, N * C * sizeof(float)));
    TS_TRY(ts_layer_regather(m, gathered, a.ln1, &s.x, &s.qkv_in, B, T, C, &full));
    TS_TRY(ts_layer_linear_backward(m, dln, ts_layer_grad(P(QKVW)), ts_layer_grad(P(QKVB)), dqkv,
                                    full, P(QKVW), (int)N, C, 3 * Cl));
    TS_TRY(ts_layer_redistribute(m, dfull, dln, &s.dqkv_in, &s.x, B, T, C, &dh));
    float *dxin = dx->data;
    TS_TRY(be->copy(dxin, dres2, Nl * C * sizeof(float)));
    /* The block's input is the previous module's output, kept by it. */
    const float *xin = ts_module_saved_input(mod, ctx->mb);
    if (!xin) return TS_ERR_NOMEM;
    TS_TRY(be->layernorm_backward(dxin, ts_layer_grad(P(LN1W)), ts_layer_grad(P(LN1B)), dh, xin,
                                  W(LN1W, 1), a.ln1_mean, a.ln1_rstd, (int)Nl, C));
    ts_module_release(mod, ctx->mb);
    return TS_OK;
}

/* What the block keeps outside its slot's parts: the attention provider's
 * state and the MoE layer's (whose routing a FULL block's recomputed
 * forward reuses). */
static void block_release(ts_module *mod, int mb, int keep_decisions) {
    provider_release(mod, mb);
    if (block_is_moe(mod)) ts_moe_release(mod, mb, keep_decisions);
}

/* The provider of attention across the ranks cutting the sequence must be
 * able to drop its state for the block to recompute. */
static ts_status block_can_recompute(const ts_module *mod, ts_recompute mode) {
    const ts_model *m = mod->model;
    int sa = seq_axis(m);
    const ts_model_axis *ax = sa >= 0 ? &m->axes[sa] : NULL;
    if (ax && !ax->attention->release)
        return ts_error(TS_ERR_CONFIG,
                        "%s cannot recompute (%s): its attention over %s comes from plugin '%s', "
                        "whose attention ops have no release (ts_plugin_attention_ops.release), "
                        "so their state cannot be dropped and made again",
                        mod->name, ts_recompute_word(mode), ax->name,
                        ax->attention_plugin ? ax->attention_plugin : "?");
    return TS_OK;
}

static const ts_module_ops block_ops = {
    .kind = "block",
    .forward = block_forward,
    .backward = block_backward,
    .recompute = TS_RECOMPUTE_CAN_FULL | TS_RECOMPUTE_CAN_SELECTIVE,
    .release = block_release,
    .can_recompute = block_can_recompute,
};

/* ---------------------------------------------------------------------------
 * Head: final LayerNorm, logits = lnf @ wte^T (the tied table; this rank's
 * rows of the vocabulary when it is cut), cross-entropy. Parameters:
 * lnf.weight, lnf.bias, wte.
 * ------------------------------------------------------------------------- */
enum { LNFW, LNFB, HWTE };

typedef struct head_acts {
    float *lnf, *mean, *rstd; /* (Nl, C), (Nl), (Nl)         */
    float *logits;            /* (N, Vpl): this rank's shard */
    float *losses, *lse;      /* (N), (N)                    */
} head_acts;

static size_t head_carve(head_acts *a, float *base, size_t N, size_t Nl, int C, int Vpl,
                         size_t *keep) {
    size_t off = 0;
#define CARVE(field, count)                                                                        \
    do {                                                                                           \
        if (a) a->field = base + off;                                                              \
        off += (count);                                                                            \
    } while (0)
    /* f32 first: the statistics, losses and log-sum-exp */
    CARVE(mean, Nl);
    CARVE(rstd, Nl);
    CARVE(losses, N);
    CARVE(lse, N);
    if (keep) *keep = off;
    CARVE(lnf, Nl * C);
    CARVE(logits, N * (size_t)Vpl);
#undef CARVE
    return off;
}

/* The head's placements: the hidden state x, the logits product's input,
 * output and input gradient; this rank's vocabulary columns [v0, v0 + Vpl),
 * the first Vl of them real. */
typedef struct head_shape {
    ts_place x, in, logits, din;
    size_t Nl, N;
    int v0, Vl, Vpl;
} head_shape;

static ts_status head_shape_of(ts_module *mod, int B, int T, head_shape *s) {
    ts_model *m = mod->model;
    const ts_param *wte = ts_module_param(mod, HWTE);
    s->x = hidden_place(m);
    TS_TRY(ts_layer_linear_places(m, wte, &s->x, &s->in, &s->logits, &s->din));
    s->Nl = (size_t)B * ts_layer_rows(m, &s->x, T);
    s->N = (size_t)B * ts_layer_rows(m, &s->in, T);
    s->Vpl = (int)wte->value.shape[0];
    s->v0 = (int)wte->block_offset[0];
    int real = m->cfg.vocab - s->v0;
    s->Vl = real < 0 ? 0 : real > s->Vpl ? s->Vpl : real;
    return TS_OK;
}

static ts_status head_forward(ts_module *mod, ts_step_ctx *ctx, const ts_tensor *x, ts_tensor *y) {
    ts_model *m = mod->model;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model;
    head_shape s;
    TS_TRY(head_shape_of(mod, B, T, &s));
    size_t N = s.N, Nl = s.Nl;
    size_t keep, floats = head_carve(NULL, NULL, N, Nl, C, s.Vpl, &keep);
    float *base = ts_module_save(mod, ctx->mb, floats, keep, x->data);
    if (!base) return TS_ERR_NOMEM;
    head_acts a;
    head_carve(&a, base, N, Nl, C, s.Vpl, NULL);
    const ts_backend *be = m->be;
    TS_TRY(
        be->layernorm_forward(a.lnf, a.mean, a.rstd, x->data, W(LNFW, 1), W(LNFB, 2), (int)Nl, C));
    TS_TRY(ts_layer_round(m, a.lnf, Nl * C));
    float *work = ts_layer_work(m, N * C + 3 * N);
    if (!work) return TS_ERR_NOMEM;
    float *full;
    TS_TRY(ts_layer_redistribute(m, work, a.lnf, &s.x, &s.in, B, T, C, &full));
    TS_TRY(ts_layer_linear_forward(m, a.logits, full, P(HWTE), NULL, (int)N, C, s.Vpl));
    TS_TRY(ts_layer_round(m, a.logits, N * (size_t)s.Vpl));
    TS_TRY(ts_layer_cross_entropy(m, a.losses, a.lse, work + N * C, a.logits, ctx->targets,
                                  &s.logits, s.v0, (int)N, s.Vl, s.Vpl));
    /* The loss sum, on the host: the losses copied down, the targets' host
     * copy (the same array on the CPU). */
    const int32_t *targets = ctx->targets_host;
    if (!targets) {
        if (be->kind != TS_DEVICE_CPU)
            return ts_error(TS_ERR_INVALID, "model: the step has no host copy of the targets");
        targets = ctx->targets;
    }
    const float *losses;
    TS_TRY(ts_layer_host_view(m, a.losses, N, &losses));
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
    ts_model *m = mod->model;
    int B = ctx->B, T = ctx->T, C = m->cfg.d_model;
    head_shape s;
    TS_TRY(head_shape_of(mod, B, T, &s));
    size_t N = s.N, Nl = s.Nl;
    float *base = ts_module_saved(mod, ctx->mb);
    if (!base) return TS_ERR_NOMEM;
    head_acts a;
    head_carve(&a, base, N, Nl, C, s.Vpl, NULL);
    const ts_backend *be = m->be;
    /* In place: the logits become their gradient. */
    TS_TRY(be->ce_shard_backward(a.logits, a.logits, a.lse, ctx->targets, ctx->dloss, s.v0, (int)N,
                                 s.Vl, s.Vpl));
    float *work = ts_layer_work(m, 3 * N * C);
    if (!work) return TS_ERR_NOMEM;
    float *dlnf = work, *gathered = work + N * C, *reduced = gathered + N * C, *full, *dh;
    TS_TRY(be->zero(dlnf, N * C * sizeof(float)));
    TS_TRY(ts_layer_regather(m, gathered, a.lnf, &s.x, &s.in, B, T, C, &full));
    TS_TRY(ts_layer_linear_backward(m, dlnf, ts_layer_grad(P(HWTE)), NULL, a.logits, full, P(HWTE),
                                    (int)N, C, s.Vpl));
    TS_TRY(ts_layer_redistribute(m, reduced, dlnf, &s.din, &s.x, B, T, C, &dh));
    TS_TRY(be->zero(dx->data, Nl * C * sizeof(float)));
    const float *xin = ts_module_saved_input(mod, ctx->mb);
    if (!xin) return TS_ERR_NOMEM;
    TS_TRY(be->layernorm_backward(dx->data, ts_layer_grad(P(LNFW)), ts_layer_grad(P(LNFB)), dh,
                                  xin, W(LNFW, 1), a.mean, a.rstd, (int)Nl, C));
    ts_module_release(mod, ctx->mb);
    return TS_OK;
}
#undef W
#undef P

static const ts_module_ops head_ops = {
    .kind = "head", .forward = head_forward, .backward = head_backward};

/* ---------------------------------------------------------------------------
 * Declarations
 * ------------------------------------------------------------------------- */
static int gpt2_params(const ts_model_config *c, ts_param_decl *d) {
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
        if (ts_model_config_moe_block(c, l)) {
            int E = c->experts, F = c->expert_hidden;
            LAYER("moe.router.weight", 2, E, C, 1, 1, TS_INIT_NORMAL, std);
            LAYER("moe.experts.fc.weight", 3, E, F, C, 1, TS_INIT_NORMAL, std);
            LAYER("moe.experts.fc.bias", 2, E, F, 1, 0, TS_INIT_ZEROS, 0);
            LAYER("moe.experts.proj.weight", 3, E, C, F, 1, TS_INIT_NORMAL, resid_std);
            LAYER("moe.experts.proj.bias", 2, E, C, 1, 0, TS_INIT_ZEROS, 0);
            for (int k = 1; d && k <= 4; k++)
                d[n - k].expert = 1;
            continue;
        }
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

/* Parameter indices follow gpt2_params: wte 0, wpe 1, then each block's 12
 * (13 for an MoE block) in order, then lnf's two. */
static int gpt2_modules(const ts_model_config *c, ts_module_decl *d) {
    int L = c->layers, n = 0, p = 2;
    if (d) {
        d[n] = (ts_module_decl){.ops = &embedding_ops, .nparams = 2, .params = {0, 1}};
        snprintf(d[n].name, TS_NAME_MAX, "embedding");
    }
    n++;
    for (int l = 0; l < L; l++, n++) {
        int np = ts_model_config_moe_block(c, l) ? MOE_BLOCK_PARAMS : 12;
        if (d) {
            d[n] = (ts_module_decl){.ops = &block_ops, .nparams = np};
            snprintf(d[n].name, TS_NAME_MAX, "h.%d", l);
            for (int k = 0; k < np; k++)
                d[n].params[k] = p + k;
        }
        p += np;
    }
    if (d) {
        d[n] = (ts_module_decl){.ops = &head_ops, .nparams = 3, .params = {p, p + 1, 0}};
        snprintf(d[n].name, TS_NAME_MAX, "head");
    }
    return n + 1;
}

/* Rules beyond the layers' own: the attention is cut by whole heads; a
 * hidden state cut along the sequence needs every product that reads it cut
 * by columns there (else the attention would see part of a sequence); and
 * every product's redistributions exist. Checked before anything runs. */
static ts_status gpt2_check(const ts_model *m) {
    const ts_model_config *c = &m->cfg;
    for (int i = 0; i < m->nmodules; i++) {
        ts_module *mod = m->modules[i];
        if (!mod || mod->ops != &block_ops) continue;
        const ts_param *qkv = ts_module_param(mod, QKVW);
        for (int a = 0; a < m->naxes; a++) {
            ts_placement p = qkv->on[a];
            if (p.kind == TS_PLACEMENT_SHARD && p.dim == 1 && c->heads % m->axes[a].size != 0)
                return ts_error(TS_ERR_CONFIG,
                                "[model] heads = %d is not divisible by %s = %d (attention is cut "
                                "by heads)",
                                c->heads, m->axes[a].name, m->axes[a].size);
        }
        block_shape s;
        TS_TRY(block_shape_of(mod, 1, 1, &s));
        const ts_place *chain[4][2] = {
            {&s.x, &s.qkv_in}, {&s.proj, &s.x}, {&s.x, &s.fc_in}, {&s.fcproj, &s.x}};
        for (int k = 0; k < (s.moe ? 2 : 4); k++)
            if (!ts_layer_can_redistribute(m, chain[k][0], chain[k][1]))
                return ts_error(TS_ERR_CONFIG, "%s: %s", mod->name, ts_last_error_bare());
        for (int a = 0; a < m->naxes; a++)
            if (s.qkv_in.on[a].kind == TS_PLACEMENT_SHARD)
                return ts_error(TS_ERR_CONFIG,
                                "%s: the hidden state is cut along the sequence over %s, but "
                                "%s is not cut by heads there: the attention would see part of "
                                "each sequence",
                                mod->name, m->axes[a].name, qkv->value.name);
    }
    return TS_OK;
}

static double gpt2_flops(const ts_model_config *c, int B, int T) {
    double N = (double)B * T, C = c->d_model, L = c->layers, Vp = c->padded_vocab;
    /* Per token, forward: QKV 3C^2, proj C^2, fc 4C^2, fcproj 4C^2 multiply-adds
     * per layer, the LM head C*Vp, and attention QK^T and AV about T*C each
     * (causal halves the useful work; we count the full square, as
     * implemented). One multiply-add is 2 FLOPs; backward is twice forward. */
    double gemm = N * (L * 12.0 * C * C + C * Vp);
    /* An MoE block: each token through top_k experts of 2 C F, and the
     * router's C E, in place of the dense MLP's 8 C^2. */
    for (int l = 0; l < c->layers; l++)
        if (ts_model_config_moe_block(c, l))
            gemm += N * (c->top_k * 2.0 * C * c->expert_hidden + C * c->experts - 8.0 * C * C);
    double attn = L * (double)B * 2.0 * T * T * C;
    return 3.0 * 2.0 * (gemm + attn);
}

/* The head's logits of the last position (arch.h: last_logits). */
static ts_status gpt2_last_logits(ts_model *m, int mb, int T, float *out) {
    ts_module *head = m->modules[m->nmodules - 1];
    if (!head) return ts_error(TS_ERR_INVALID, "sample: the head runs on another pipeline stage");
    head_shape s;
    TS_TRY(head_shape_of(head, 1, T, &s));
    if (s.v0 != 0 || s.Vl < m->cfg.vocab || s.N != (size_t)T)
        return ts_error(TS_ERR_INVALID,
                        "sample: this rank holds part of the vocabulary or sequence");
    float *base = ts_module_saved(head, mb);
    if (!base) return ts_error(TS_ERR_INTERNAL, "sample: the head saved nothing");
    head_acts a;
    head_carve(&a, base, s.N, s.Nl, m->cfg.d_model, s.Vpl, NULL);
    const float *row = a.logits + (size_t)(T - 1) * s.Vpl;
    if (m->be->kind == TS_DEVICE_CPU) {
        memcpy(out, row, (size_t)m->cfg.vocab * sizeof(float));
        return TS_OK;
    }
    return m->be->to_host(out, row, (size_t)m->cfg.vocab * sizeof(float));
}

static const ts_arch gpt2_arch = {
    .struct_size = sizeof(ts_arch),
    .name = "gpt2",
    .declare_params = gpt2_params,
    .declare_modules = gpt2_modules,
    .check = gpt2_check,
    .flops = gpt2_flops,
    .last_logits = gpt2_last_logits,
};

const ts_arch *ts_arch_gpt2(void) {
    return &gpt2_arch;
}
