/*
 * moe.c — the mixture-of-experts MLP (moe.h has the contract).
 *
 * Router (Shazeer et al. 2017; Fedus et al., Switch Transformer, 2021):
 * logits z = x Wr^T (N, E), p = softmax(z), each token's top_k experts
 * (ties to the lower index), weights w = p / sum of the chosen p. With
 * capacity_factor > 0 each expert keeps at most
 * ceil(capacity_factor * N * top_k / E) of this rank's rows, the most
 * probable (drop_policy = probs) or the first (position); a dropped row
 * contributes nothing.
 *
 * Auxiliary losses, per micro-batch over the Tg tokens of every rank that
 * holds part of it (their counts are summed over ctx->batch_comm), averaged
 * over the step's micro-batches as Megatron-LM does:
 *   load balancing  aux_coeff E / (Tg^2 k) sum_e P_e c_e, P_e = sum over
 *                   tokens of p_e, c_e = rows routed to e before dropping
 *                   (Megatron-LM's switch_load_balancing_loss_func);
 *   z-loss          z_coeff / Tg sum_t logsumexp(z_t)^2 (Zoph et al.,
 *                   ST-MoE, 2022).
 * Their gradients reach the router only.
 *
 * The routing and the losses are computed on the host (N x E numbers); the
 * experts and the weighted sum run on the model's device.
 */
#include "moe.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "layers.h"
#include "model.h"

enum { ROUTER, FC, FCB, PROJ, PROJB };

/* What a micro-batch's forward keeps for its backward. */
typedef struct moe_saved {
    int N;
    float *probs;        /* host (N, E): softmax of the router's logits      */
    float *lse;          /* host (N): log-sum-exp of the logits              */
    int32_t *choice;     /* host (N k): the expert of each row               */
    int32_t *dest;       /* host (N k): choice, or -1 when dropped           */
    float *w;            /* host (N k): renormalised weights                 */
    int32_t *counts;     /* host (E): rows routed to each expert before
                            dropping, over the batch's ranks                 */
    double tokens;       /* Tg: tokens of the batch's ranks                  */
    int64_t *per_expert; /* host (local experts): rows dispatch brought each */
    int64_t R;           /* rows dispatch brought this rank                  */
    /* The rows the experts compute on: with the experts' hidden layer cut
     * over etp, every etp rank's (tp_counts: ranks x local experts), grouped
     * by expert; else this rank's (loop = per_expert). */
    int32_t *tp_counts;
    int64_t *loop, Rall;
    float *rows_out;    /* device (N k, C): each row's expert output        */
    float *xin;         /* device (Rall, C): the experts' input rows        */
    float *hpre, *hact; /* device (Rall, F / etp): before, after the GELU   */
} moe_saved;

/* The layer's own routing on this rank (no dispatcher): the rows grouped by
 * expert, in row order within an expert. */
typedef struct moe_local {
    float *rows;
    size_t rows_cap;
    int32_t *order; /* expert_rows[i] is row order[i] */
    size_t order_cap;
} moe_local;

/* A module's persistent MoE state. */
typedef struct moe_layer {
    void *state; /* the dispatcher's, from its create */
    int created;
    moe_local local;
} moe_layer;

static double moe_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ts_status moe_nomem(void) {
    return ts_error(TS_ERR_NOMEM, "moe: out of memory");
}

/* ---------------------------------------------------------------------------
 * Routing the rows
 * ------------------------------------------------------------------------- */

static ts_status local_dispatch(ts_model *m, moe_local *l, ts_plugin_dispatch_args *a) {
    size_t n = 0;
    for (int e = 0; e < a->local_experts; e++)
        a->expert_counts[e] = 0;
    for (int r = 0; r < a->nrows; r++)
        if (a->dest[r] >= 0) a->expert_counts[a->dest[r] - a->first_expert]++, n++;
    if (n > l->order_cap) {
        int32_t *o = realloc(l->order, n * sizeof *o);
        if (!o) return moe_nomem();
        l->order = o;
        l->order_cap = n;
    }
    size_t floats = n * (size_t)a->hidden;
    if (floats > l->rows_cap) {
        m->be->free(l->rows);
        l->rows = m->be->alloc(TS_MEM_COMM, floats * sizeof(float));
        l->rows_cap = l->rows ? floats : 0;
        if (!l->rows) return moe_nomem();
    }
    size_t i = 0, row = (size_t)a->hidden * sizeof(float);
    for (int e = 0; e < a->local_experts; e++)
        for (int r = 0; r < a->nrows; r++)
            if (a->dest[r] == a->first_expert + e) {
                l->order[i] = r;
                TS_TRY(m->be->copy(l->rows + i * a->hidden,
                                   a->src + (size_t)a->src_index[r] * a->hidden, row));
                i++;
            }
    a->expert_rows = l->rows;
    a->expert_nrows = (int64_t)n;
    a->bytes_sent = 0;
    return TS_OK;
}

static ts_status local_combine(ts_model *m, moe_local *l, ts_plugin_dispatch_args *a) {
    size_t row = (size_t)a->hidden * sizeof(float);
    TS_TRY(m->be->zero(a->rows_out, (size_t)a->nrows * row));
    for (int64_t i = 0; i < a->expert_nrows; i++)
        TS_TRY(m->be->copy(a->rows_out + (size_t)l->order[i] * a->hidden,
                           a->expert_rows_in + (size_t)i * a->hidden, row));
    a->bytes_sent = 0;
    return TS_OK;
}

/* Dispatch (combine = 0) or combine (1) through the run's dispatcher, or
 * this rank's own routing. */
static ts_status moe_route(ts_module *mod, ts_plugin_dispatch_args *a, int combine) {
    ts_model *m = mod->model;
    if (!mod->moe_layer) {
        mod->moe_layer = calloc(1, sizeof(moe_layer));
        if (!mod->moe_layer) return moe_nomem();
    }
    moe_layer *L = mod->moe_layer;
    const ts_moe_routing *rt = &m->moe;
    if (!rt->ops) return combine ? local_combine(m, &L->local, a) : local_dispatch(m, &L->local, a);
    if (!L->created && rt->ops->create) {
        ts_error(TS_OK, "%s", "");
        ts_status st = rt->ops->create(rt->ctx, rt->user, &L->state);
        if (st)
            return ts_error(st, "%s: dispatcher '%s': create: %s", mod->name, rt->name,
                            ts_last_error_bare());
    }
    L->created = 1;
    ts_error(TS_OK, "%s", "");
    ts_status st = (combine ? rt->ops->combine : rt->ops->dispatch)(rt->ctx, L->state, a);
    if (st)
        return ts_error(st, "%s: dispatcher '%s': %s: %s", mod->name, rt->name,
                        combine ? "combine" : "dispatch", ts_last_error_bare());
    return TS_OK;
}

static void moe_saved_free(ts_model *m, moe_saved *s) {
    if (!s) return;
    m->be->free(s->rows_out);
    m->be->free(s->xin);
    m->be->free(s->hpre);
    m->be->free(s->hact);
    free(s->probs);
    free(s->tp_counts);
    free(s);
}

void ts_moe_release(ts_module *mod, int mb, int keep_routing) {
    if (mb >= mod->saved.cap) return;
    moe_saved **slot = (moe_saved **)ts_module_moe_state(mod, mb), *s = *slot;
    if (!s) return;
    if (!keep_routing) {
        moe_saved_free(mod->model, s);
        *slot = NULL;
        return;
    }
    const ts_backend *be = mod->model->be;
    float **dev[4] = {&s->rows_out, &s->xin, &s->hpre, &s->hact};
    for (int i = 0; i < 4; i++) {
        be->free(*dev[i]);
        *dev[i] = NULL;
    }
}

void ts_moe_layer_free(ts_module *mod) {
    moe_layer *L = mod->moe_layer;
    ts_model *m = mod->model;
    for (int mb = 0; mb < mod->saved.cap; mb++) {
        moe_saved_free(m, mod->saved.slot[mb].moe);
        mod->saved.slot[mb].moe = NULL;
    }
    if (!L) return;
    if (L->created && m->moe.ops && m->moe.ops->destroy) m->moe.ops->destroy(m->moe.ctx, L->state);
    m->be->free(L->local.rows);
    free(L->local.order);
    free(L);
    mod->moe_layer = NULL;
}

/* ---------------------------------------------------------------------------
 * The router on the host
 * ------------------------------------------------------------------------- */

/* probs, lse, choice, w from the logits (N, E); per-expert counts before
 * dropping into counts (E, zeroed by the caller). */
static void moe_topk(const ts_model_config *c, const float *logits, moe_saved *s, int N) {
    int E = c->experts, k = c->top_k;
    for (int t = 0; t < N; t++) {
        const float *z = logits + (size_t)t * E;
        float *p = s->probs + (size_t)t * E;
        float mx = z[0];
        for (int e = 1; e < E; e++)
            mx = z[e] > mx ? z[e] : mx;
        double sum = 0.0;
        for (int e = 0; e < E; e++)
            sum += exp((double)z[e] - mx);
        for (int e = 0; e < E; e++)
            p[e] = (float)(exp((double)z[e] - mx) / sum);
        s->lse[t] = (float)(mx + log(sum));
        /* The k largest, ties to the lower index. */
        int32_t *ch = s->choice + (size_t)t * k;
        double chosen = 0.0;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j; i++)
                    taken |= ch[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            ch[j] = best;
            chosen += p[best];
            s->counts[best]++;
        }
        for (int j = 0; j < k; j++)
            s->w[(size_t)t * k + j] = (float)(p[ch[j]] / chosen);
    }
}

/* dest from choice: rows over an expert's capacity dropped (-1). Returns
 * the rows dropped. */
static int64_t moe_drop(const ts_model_config *c, moe_saved *s, int N) {
    int E = c->experts, k = c->top_k;
    size_t rows = (size_t)N * k;
    memcpy(s->dest, s->choice, rows * sizeof *s->dest);
    if (c->capacity_factor <= 0.0f) return 0;
    int64_t cap = (int64_t)ceil((double)c->capacity_factor * N * k / E), dropped = 0;
    for (int e = 0; e < E; e++) {
        int64_t n = 0;
        for (size_t r = 0; r < rows; r++)
            n += s->choice[r] == e;
        /* Position: keep the first cap rows. Probs: drop the least probable
         * (the later row among equals) until cap remain. */
        for (int64_t over = n - cap; over > 0; over--, dropped++) {
            size_t victim = rows;
            for (size_t r = 0; r < rows; r++) {
                if (s->dest[r] != e) continue;
                if (c->drop_by_position)
                    victim = r; /* the last one kept so far */
                else if (victim == rows ||
                         s->probs[(r / k) * E + e] <= s->probs[(victim / k) * E + e])
                    victim = r;
            }
            s->dest[victim] = -1;
        }
    }
    return dropped;
}

/* Sums `n` ints over the batch's ranks in place. */
static ts_status moe_sum_i32(ts_step_ctx *ctx, int32_t *x, size_t n) {
    if (!ctx->batch_comm || ts_comm_size(ctx->batch_comm) == 1) return TS_OK;
    return ts_comm_all_reduce(ctx->batch_comm, x, x, n, TS_I32, TS_REDUCE_SUM);
}

static ts_status moe_sum_f32(ts_step_ctx *ctx, float *x, size_t n) {
    if (!ctx->batch_comm || ts_comm_size(ctx->batch_comm) == 1) return TS_OK;
    return ts_comm_all_reduce(ctx->batch_comm, x, x, n, TS_F32, TS_REDUCE_SUM);
}

/* ---------------------------------------------------------------------------
 * Forward and backward
 * ------------------------------------------------------------------------- */

/* The routing arguments of this layer for nrows rows of src. */
/* Whether the experts' outputs and the gradients travel in bf16 ([train]
 * partial_dtype = bf16). */
static int moe_partial_bf16(const ts_model *m) {
    return m->dtype == TS_BF16 && m->partial_bf16;
}

static ts_plugin_dispatch_args moe_args(const ts_model *m, moe_saved *s, int nrows,
                                        const int32_t *src_index, const float *src, int nsrc) {
    int E = m->cfg.experts;
    return (ts_plugin_dispatch_args){.struct_size = sizeof(ts_plugin_dispatch_args),
                                     .experts = E,
                                     .local_experts = m->moe.ops ? m->moe.local_experts : E,
                                     .first_expert = m->moe.ops ? m->moe.first_expert : 0,
                                     .hidden = m->cfg.d_model,
                                     .comm = m->moe.comm,
                                     .host_comm = m->moe.host,
                                     .nrows = nrows,
                                     .dest = s->dest,
                                     .src_index = src_index,
                                     .src = src,
                                     .nsrc = nsrc,
                                     .expert_counts = s->per_expert};
}

/* ---------------------------------------------------------------------------
 * Expert tensor parallelism: the experts' hidden layer cut over etp. Every
 * rank of an etp group computes its slice of each expert on the rows all of
 * them received: the rows are gathered, grouped by expert (etp_gather), and
 * the products' partial sums reduce-scattered back to the rank each row came
 * to (etp_scatter), Megatron-LM's all-gather before the experts and
 * reduce-scatter after them.
 * ------------------------------------------------------------------------- */

/* Every etp rank's rows per local expert (after this rank's dispatch). */
static ts_status etp_counts(ts_model *m, moe_saved *s, int El) {
    const ts_moe_routing *rt = &m->moe;
    s->loop = s->per_expert;
    s->Rall = s->R;
    if (rt->tp_ranks <= 1) return TS_OK;
    free(s->tp_counts);
    s->tp_counts = malloc((size_t)rt->tp_ranks * El * sizeof *s->tp_counts + (size_t)El * 8);
    if (!s->tp_counts) return moe_nomem();
    int32_t mine[El > 0 ? El : 1];
    for (int e = 0; e < El; e++)
        mine[e] = (int32_t)s->per_expert[e];
    TS_TRY(ts_comm_all_gather(rt->tp_host, mine, s->tp_counts, (size_t)El, TS_I32));
    s->loop = (int64_t *)(s->tp_counts + (size_t)rt->tp_ranks * El);
    s->Rall = 0;
    for (int e = 0; e < El; e++) {
        s->loop[e] = 0;
        for (int r = 0; r < rt->tp_ranks; r++)
            s->loop[e] += s->tp_counts[(size_t)r * El + e];
        s->Rall += s->loop[e];
    }
    return TS_OK;
}

/* Rank-major rows (each etp rank's, grouped by expert) <-> expert-major
 * (each expert's, by rank). to_experts = 0 is the inverse. */
static ts_status etp_move(ts_model *m, const moe_saved *s, int El, float *by_expert, float *by_rank,
                          int C, int to_experts) {
    int ranks = m->moe.tp_ranks;
    size_t src = 0, row = (size_t)C * sizeof(float);
    for (int r = 0; r < ranks; r++)
        for (int e = 0; e < El; e++) {
            size_t n = (size_t)s->tp_counts[(size_t)r * El + e], dst = 0;
            for (int f = 0; f < e; f++)
                dst += (size_t)s->loop[f];
            for (int q = 0; q < r; q++)
                dst += (size_t)s->tp_counts[(size_t)q * El + e];
            if (n)
                TS_TRY(to_experts ? m->be->copy(by_expert + dst * C, by_rank + src * C, n * row)
                                  : m->be->copy(by_rank + src * C, by_expert + dst * C, n * row));
            src += n;
        }
    return TS_OK;
}

/* Rows per etp rank, in elements of C floats. */
static void etp_sizes(const ts_model *m, const moe_saved *s, int El, int C, size_t *counts) {
    for (int r = 0; r < m->moe.tp_ranks; r++) {
        counts[r] = 0;
        for (int e = 0; e < El; e++)
            counts[r] += (size_t)s->tp_counts[(size_t)r * El + e] * C;
    }
}

/* This rank's rows (R, C) -> every etp rank's, by expert (Rall, C). */
static ts_status etp_gather(ts_model *m, const moe_saved *s, int El, const float *mine, float *all,
                            int C) {
    size_t counts[m->moe.tp_ranks];
    etp_sizes(m, s, El, C, counts);
    float *ranked = m->be->alloc(TS_MEM_COMM, ((size_t)s->Rall + 1) * C * sizeof(float));
    if (!ranked) return moe_nomem();
    ts_status st = ts_comm_all_gatherv(m->moe.tp, mine, ranked, counts, TS_F32);
    if (!st) st = etp_move(m, s, El, all, ranked, C, 1);
    m->be->free(ranked);
    return st;
}

/* Partial sums over the etp ranks of every row, by expert (Rall, C) ->
 * this rank's rows summed (R, C). */
static ts_status etp_scatter(ts_model *m, const moe_saved *s, int El, float *all, float *mine,
                             int C) {
    size_t counts[m->moe.tp_ranks];
    etp_sizes(m, s, El, C, counts);
    float *ranked = m->be->alloc(TS_MEM_COMM, ((size_t)s->Rall + 1) * C * sizeof(float));
    if (!ranked) return moe_nomem();
    ts_status st = etp_move(m, s, El, all, ranked, C, 0);
    if (!st) st = ts_comm_reduce_scatter_v(m->moe.tp, ranked, mine, counts, TS_F32, TS_REDUCE_SUM);
    m->be->free(ranked);
    return st;
}

/* The batch's expert counts and token total (summed over the ranks holding
 * its other rows), the auxiliary and z losses they give (added to the
 * step's, per micro-batch), and the step's per-expert and dropped counts.
 * `logits` is scratch of E floats. */
static ts_status moe_batch_losses(ts_model *m, ts_step_ctx *ctx, moe_saved *s, float *logits, int N,
                                  int64_t dropped) {
    const ts_model_config *c = &m->cfg;
    int E = c->experts, k = c->top_k;
    size_t rows = (size_t)N * k;
    ts_moe_stats *st_ = &m->moe_stats;
    /* The batch's counts and token total, for the losses. */
    int32_t nt = N;
    TS_TRY(moe_sum_i32(ctx, s->counts, (size_t)E));
    TS_TRY(moe_sum_i32(ctx, &nt, 1));
    s->tokens = nt;
    int M = ctx->micro_batches > 0 ? ctx->micro_batches : 1;
    if (c->aux_loss_coeff > 0.0f) {
        float *P = logits; /* the logits are no longer needed */
        for (int e = 0; e < E; e++) {
            double sum = 0.0;
            for (int t = 0; t < N; t++)
                sum += s->probs[(size_t)t * E + e];
            P[e] = (float)sum;
        }
        TS_TRY(moe_sum_f32(ctx, P, (size_t)E));
        double aux = 0.0;
        for (int e = 0; e < E; e++)
            aux += (double)P[e] * s->counts[e];
        st_->aux_loss += c->aux_loss_coeff * E * aux / (s->tokens * s->tokens * k) / M;
    }
    if (c->z_loss_coeff > 0.0f) {
        double sum = 0.0;
        for (int t = 0; t < N; t++)
            sum += (double)s->lse[t] * s->lse[t];
        float z2 = (float)sum;
        TS_TRY(moe_sum_f32(ctx, &z2, 1));
        st_->z_loss += c->z_loss_coeff * z2 / s->tokens / M;
    }
    for (size_t r = 0; r < rows; r++)
        if (s->dest[r] >= 0) st_->tokens[s->dest[r]]++;
    st_->dropped += dropped;
    return TS_OK;
}

/* The experts' MLPs over the rows they received (s->loop[e] rows for local
 * expert e, in order): fc, GELU and proj into yexp; cut over etp, the
 * products are partial sums and rank 0 adds the bias. Timed and counted in
 * *st_; runs nothing when `st` (a failure before) is not TS_OK. */
static ts_status moe_experts_mlp(ts_module *mod, int first, moe_saved *s, float *yexp,
                                 ts_moe_stats *st_, ts_status st) {
    ts_model *m = mod->model;
    const ts_backend *be = m->be;
    int C = m->cfg.d_model, El = m->moe.ops ? m->moe.local_experts : m->cfg.experts;
    const ts_param *fc = ts_module_param(mod, first + FC);
    int F = (int)fc->value.shape[1];
    int tp = m->moe.tp_ranks > 1;
    size_t R = (size_t)s->Rall;
    double t0 = moe_now();
    st_->expert_rows += (int64_t)R;
    const float *w1 = ts_layer_weight(m, fc, 1);
    const float *b1 = ts_layer_weight(m, ts_module_param(mod, first + FCB), 2);
    size_t o = 0;
    for (int e = 0; !st && e < El; o += (size_t)s->loop[e++]) {
        int n = (int)s->loop[e];
        if (!n) continue;
        st = be->matmul_forward(s->hpre + o * F, s->xin + o * C, w1 + (size_t)e * F * C,
                                b1 + (size_t)e * F, n, C, F);
        if (!st) st = be->gelu_forward(s->hact + o * F, s->hpre + o * F, (size_t)n * F);
    }
    if (!st) st = ts_layer_round(m, s->hact, R * F);
    const float *w2 = ts_layer_weight(m, ts_module_param(mod, first + PROJ), 3);
    const float *b2 = ts_layer_weight(m, ts_module_param(mod, first + PROJB), 0);
    /* Cut over etp, the products are partial sums: the bias once. */
    int bias = !tp || m->moe.tp_rank == 0;
    o = 0;
    for (int e = 0; !st && e < El; o += (size_t)s->loop[e++]) {
        int n = (int)s->loop[e];
        if (n)
            st = be->matmul_forward(yexp + o * C, s->hact + o * F, w2 + (size_t)e * C * F,
                                    bias ? b2 + (size_t)e * C : NULL, n, F, C);
    }
    st_->expert_s += moe_now() - t0;
    return st;
}

ts_status ts_moe_forward(ts_module *mod, ts_step_ctx *ctx, int first, const float *x, float *y,
                         int N) {
    ts_model *m = mod->model;
    const ts_backend *be = m->be;
    const ts_model_config *c = &m->cfg;
    int E = c->experts, k = c->top_k, C = c->d_model;
    int El = m->moe.ops ? m->moe.local_experts : E;
    const ts_param *fc = ts_module_param(mod, first + FC);
    int F = (int)fc->value.shape[1]; /* this rank's slice of expert_hidden */
    if (fc->value.shape[0] != El)
        return ts_error(TS_ERR_INTERNAL, "%s: holds %lld experts, routing expects %d", mod->name,
                        (long long)fc->value.shape[0], El);
    size_t rows = (size_t)N * k;
    ts_moe_stats *st_ = &m->moe_stats;
    ts_status st = TS_OK;
    moe_saved *s;
    int32_t *src_index;
    if (ctx->recompute) {
        /* Recomputed (FULL): the routing the first forward decided, reused
         * as it was (not decided again from the recomputed rows), and
         * nothing added to the step's losses or statistics. */
        s = *ts_module_moe_state(mod, ctx->mb);
        TS_ASSERT(s && s->N == N && !s->xin);
        src_index = (int32_t *)(s->per_expert + El);
        goto experts;
    }
    /* One host block: probs, lse, choice, dest, w, counts, per_expert,
     * src_index. */
    size_t bytes = (size_t)N * E * 4 + (size_t)N * 4 + rows * 4 * 3 + (size_t)E * 4 +
                   (size_t)El * 8 + rows * 4 + (size_t)N * E * 4;
    s = calloc(1, sizeof *s);
    char *h = s ? calloc(1, bytes) : NULL;
    if (!h) {
        free(s);
        return moe_nomem();
    }
    /* A forward without its backward (a loss evaluation) left its state. */
    moe_saved_free(m, *ts_module_moe_state(mod, ctx->mb));
    s->N = N;
    s->probs = (float *)h;
    s->lse = s->probs + (size_t)N * E;
    s->choice = (int32_t *)(s->lse + N);
    s->dest = s->choice + rows;
    s->w = (float *)(s->dest + rows);
    s->counts = (int32_t *)(s->w + rows);
    s->per_expert = (int64_t *)(s->counts + E);
    src_index = (int32_t *)(s->per_expert + El);
    float *logits = (float *)(src_index + rows);
    *ts_module_moe_state(mod, ctx->mb) = s;

    /* Router and routing. */
    float *zdev = be->alloc(TS_MEM_ACTS, (size_t)N * E * sizeof(float));
    if (!zdev) return moe_nomem();
    st = ts_layer_linear_forward(m, zdev, x, ts_module_param(mod, first + ROUTER), NULL, N, C, E);
    if (!st) st = be->to_host(logits, zdev, (size_t)N * E * sizeof(float));
    be->free(zdev);
    TS_TRY(st);
    moe_topk(c, logits, s, N);
    /* The dry run (tessera plan) computes no logits: it routes evenly, row
     * r to expert r mod E, the balanced case its traffic predicts. */
    if (be->kind == TS_DEVICE_PLAN) {
        memset(s->counts, 0, (size_t)E * sizeof *s->counts);
        for (size_t r = 0; r < rows; r++) {
            s->choice[r] = (int32_t)(r % (size_t)E);
            s->counts[s->choice[r]]++;
        }
    }
    int64_t dropped = moe_drop(c, s, N);
    for (size_t r = 0; r < rows; r++)
        src_index[r] = (int32_t)(r / (size_t)k);
    TS_TRY(moe_batch_losses(m, ctx, s, logits, N, dropped));

experts:;
    /* Dispatch, experts, combine. A recomputed forward counts nothing in
     * the step's statistics (the communicators count its traffic). */
    ts_moe_stats unused = {0};
    if (ctx->recompute) st_ = &unused;
    ts_plugin_dispatch_args a = moe_args(m, s, (int)rows, src_index, x, N);
    a.rows_bf16 = m->dtype == TS_BF16; /* x is the LayerNorm's rounded output */
    TS_TRY(moe_route(mod, &a, 0));
    a.rows_bf16 = moe_partial_bf16(m); /* the experts' outputs */
    st_->bytes_sent += a.bytes_sent;
    s->R = a.expert_nrows;
    TS_TRY(etp_counts(m, s, El));
    int tp = m->moe.tp_ranks > 1;
    size_t R = (size_t)s->Rall;
    s->xin = be->alloc(TS_MEM_ACTS, (R ? R : 1) * C * sizeof(float));
    s->hpre = be->alloc(TS_MEM_ACTS, (R ? R : 1) * F * sizeof(float));
    s->hact = be->alloc(TS_MEM_ACTS, (R ? R : 1) * F * sizeof(float));
    s->rows_out = be->alloc(TS_MEM_ACTS, rows * C * sizeof(float));
    float *yexp = be->alloc(TS_MEM_ACTS, (R ? R : 1) * C * sizeof(float));
    float *yown = tp ? be->alloc(TS_MEM_ACTS, ((size_t)s->R + 1) * C * sizeof(float)) : yexp;
    float *wdev = be->alloc(TS_MEM_ACTS, rows * sizeof(float));
    if (!s->xin || !s->hpre || !s->hact || !s->rows_out || !yexp || !yown || !wdev)
        st = moe_nomem();
    if (!st && tp)
        st = etp_gather(m, s, El, a.expert_rows, s->xin, C);
    else if (!st && R)
        st = be->copy(s->xin, a.expert_rows, R * C * sizeof(float));
    st = moe_experts_mlp(mod, first, s, yexp, st_, st);
    if (!st && tp) st = etp_scatter(m, s, El, yexp, yown, C);
    if (!st) {
        a.expert_rows_in = yown;
        a.rows_out = s->rows_out;
        st = moe_route(mod, &a, 1);
        st_->bytes_sent += a.bytes_sent;
    }
    /* y = the weighted sum of each token's rows. */
    if (!st) st = be->zero(y, (size_t)N * C * sizeof(float));
    if (!st) st = be->from_host(wdev, s->w, rows * sizeof(float));
    if (!st) st = be->moe_rows_sum(y, s->rows_out, wdev, N, k, C);
    if (tp) be->free(yown);
    be->free(yexp);
    be->free(wdev);
    return st;
}

/* The router's logit gradients (N, E) from the rows' weight gradients dw
 * and the auxiliary losses. */
static void moe_router_grad(const ts_model_config *c, const moe_saved *s, const float *dw, int M,
                            float *dz) {
    int E = c->experts, k = c->top_k, N = s->N;
    double aux = c->aux_loss_coeff * (double)E / (s->tokens * s->tokens * k) / M;
    double zc = 2.0 * c->z_loss_coeff / s->tokens / M;
    for (int t = 0; t < N; t++) {
        const float *p = s->probs + (size_t)t * E;
        const int32_t *ch = s->choice + (size_t)t * k;
        const float *w = s->w + (size_t)t * k, *g = dw + (size_t)t * k;
        float *d = dz + (size_t)t * E;
        double chosen = 0.0, gw = 0.0;
        for (int j = 0; j < k; j++) {
            chosen += p[ch[j]];
            gw += (double)g[j] * w[j];
        }
        for (int e = 0; e < E; e++)
            d[e] = c->aux_loss_coeff > 0.0f ? (float)(aux * s->counts[e]) : 0.0f;
        /* w_j = p_j / sum of the chosen p: dL/dp_j = (dw_j - sum_i dw_i w_i) / sum. */
        for (int j = 0; j < k; j++)
            d[ch[j]] += (float)((g[j] - gw) / chosen);
        double dot = 0.0;
        for (int e = 0; e < E; e++)
            dot += (double)p[e] * d[e];
        for (int e = 0; e < E; e++)
            d[e] = (float)(p[e] * (d[e] - dot) + zc * s->lse[t] * p[e]);
    }
}

ts_status ts_moe_backward(ts_module *mod, ts_step_ctx *ctx, int first, const float *x,
                          const float *dy, float *dx, int N) {
    ts_model *m = mod->model;
    const ts_backend *be = m->be;
    const ts_model_config *c = &m->cfg;
    int E = c->experts, k = c->top_k, C = c->d_model;
    int F = (int)ts_module_param(mod, first + FC)->value.shape[1];
    int El = m->moe.ops ? m->moe.local_experts : E;
    moe_saved *s = *ts_module_moe_state(mod, ctx->mb);
    TS_ASSERT(s && s->N == N);
    int tp = m->moe.tp_ranks > 1;
    size_t rows = (size_t)N * k, R = (size_t)s->Rall;
    float *wdev = be->alloc(TS_MEM_ACTS, rows * sizeof(float));
    float *dwdev = be->alloc(TS_MEM_ACTS, rows * sizeof(float));
    float *drows = be->alloc(TS_MEM_ACTS, rows * C * sizeof(float));
    float *dhact = be->alloc(TS_MEM_ACTS, (R ? R : 1) * F * sizeof(float));
    float *dhpre = be->alloc(TS_MEM_ACTS, (R ? R : 1) * F * sizeof(float));
    float *dxin = be->alloc(TS_MEM_ACTS, (R ? R : 1) * C * sizeof(float));
    /* With etp: the output gradients of every etp rank's rows, and this
     * rank's rows' input gradients summed over the slices. */
    float *dyall = tp ? be->alloc(TS_MEM_ACTS, (R ? R : 1) * C * sizeof(float)) : NULL;
    float *dxown = tp ? be->alloc(TS_MEM_ACTS, ((size_t)s->R + 1) * C * sizeof(float)) : dxin;
    float *dz = malloc(rows * sizeof(float) + (size_t)N * E * sizeof(float));
    int32_t *ident = malloc(rows * sizeof *ident);
    ts_status st =
        wdev && dwdev && drows && dhact && dhpre && dxin && dz && ident && (!tp || (dyall && dxown))
            ? TS_OK
            : moe_nomem();
    float *dw = dz + (size_t)N * E;
    /* Through the weighted sum: each row's gradient and its weight's. */
    if (!st) st = be->from_host(wdev, s->w, rows * sizeof(float));
    if (!st) st = be->moe_rows_sum_backward(drows, dwdev, dy, s->rows_out, wdev, N, k, C);
    if (!st) st = be->to_host(dw, dwdev, rows * sizeof(float));
    /* The rows' gradients to the experts, routed as the rows were. */
    for (size_t r = 0; r < rows; r++)
        if (ident) ident[r] = (int32_t)r;
    ts_plugin_dispatch_args a = moe_args(m, s, (int)rows, ident, drows, (int)rows);
    a.rows_bf16 = moe_partial_bf16(m);
    if (!st) st = moe_route(mod, &a, 0);
    m->moe_stats.bytes_sent += a.bytes_sent;
    if (!st && a.expert_nrows != s->R)
        st = ts_error(TS_ERR_INTERNAL, "%s: the gradients reached %lld rows, the rows %lld",
                      mod->name, (long long)a.expert_nrows, (long long)s->R);
    const float *dyexp = a.expert_rows;
    if (!st && tp) {
        st = etp_gather(m, s, El, a.expert_rows, dyall, C);
        dyexp = dyall;
    }
    if (!st) st = be->zero(dhact, (R ? R : 1) * F * sizeof(float));
    if (!st) st = be->zero(dhpre, (R ? R : 1) * F * sizeof(float));
    if (!st) st = be->zero(dxin, (R ? R : 1) * C * sizeof(float));
    const ts_param *pfc = ts_module_param(mod, first + FC),
                   *pfcb = ts_module_param(mod, first + FCB);
    const ts_param *ppj = ts_module_param(mod, first + PROJ);
    const ts_param *ppjb = ts_module_param(mod, first + PROJB);
    const float *w1 = ts_layer_weight(m, pfc, 1), *w2 = ts_layer_weight(m, ppj, 3);
    float *dw1 = ts_layer_grad(pfc), *db1 = ts_layer_grad(pfcb);
    float *dw2 = ts_layer_grad(ppj), *db2 = ts_layer_grad(ppjb);
    double t0 = moe_now();
    size_t o = 0;
    for (int e = 0; !st && e < El; o += (size_t)s->loop[e++]) {
        int n = (int)s->loop[e];
        if (!n) continue;
        st = ts_layer_matmul_backward(m, dhact + o * F, dw2 + (size_t)e * C * F,
                                      db2 + (size_t)e * C, dyexp + o * C, s->hact + o * F,
                                      w2 + (size_t)e * C * F, n, F, C);
        if (!st)
            st = be->gelu_backward(dhpre + o * F, s->hpre + o * F, dhact + o * F, (size_t)n * F);
        if (!st)
            st = ts_layer_matmul_backward(m, dxin + o * C, dw1 + (size_t)e * F * C,
                                          db1 + (size_t)e * F, dhpre + o * F, s->xin + o * C,
                                          w1 + (size_t)e * F * C, n, C, F);
    }
    m->moe_stats.expert_s += moe_now() - t0;
    if (!st && tp) st = etp_scatter(m, s, El, dxin, dxown, C);
    /* The experts' input gradients back to their rows, summed per token. */
    if (!st) {
        a.expert_rows_in = dxown;
        a.rows_out = drows; /* free again: reused */
        st = moe_route(mod, &a, 1);
        m->moe_stats.bytes_sent += a.bytes_sent;
    }
    if (!st) st = be->moe_rows_sum(dx, drows, NULL, N, k, C);
    /* Through the router. */
    float *dzdev = NULL;
    if (!st) {
        moe_router_grad(c, s, dw, ctx->micro_batches > 0 ? ctx->micro_batches : 1, dz);
        dzdev = be->alloc(TS_MEM_ACTS, (size_t)N * E * sizeof(float));
        st = dzdev ? be->from_host(dzdev, dz, (size_t)N * E * sizeof(float)) : moe_nomem();
    }
    const ts_param *router = ts_module_param(mod, first + ROUTER);
    if (!st)
        st =
            ts_layer_linear_backward(m, dx, ts_layer_grad(router), NULL, dzdev, x, router, N, C, E);
    be->free(dzdev);
    be->free(wdev);
    be->free(dwdev);
    be->free(drows);
    be->free(dhact);
    be->free(dhpre);
    be->free(dxin);
    if (tp) {
        be->free(dyall);
        be->free(dxown);
    }
    free(dz);
    free(ident);
    moe_saved_free(m, s);
    *ts_module_moe_state(mod, ctx->mb) = NULL;
    return st;
}

/* ---------------------------------------------------------------------------
 * The step's sums
 * ------------------------------------------------------------------------- */

ts_status ts_moe_stats_reset(ts_moe_stats *s, int experts) {
    if (!s->tokens && experts > 0) {
        s->tokens = calloc((size_t)experts, sizeof *s->tokens);
        if (!s->tokens) return moe_nomem();
        s->experts = experts;
    }
    for (int e = 0; e < s->experts; e++)
        s->tokens[e] = 0;
    s->aux_loss = s->z_loss = s->expert_s = 0.0;
    s->dropped = s->bytes_sent = s->expert_rows = 0;
    return TS_OK;
}

void ts_moe_stats_free(ts_moe_stats *s) {
    free(s->tokens);
    s->tokens = NULL;
    s->experts = 0;
}
