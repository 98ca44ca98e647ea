/*
 * flex_dispatcher.c — tessera-flex.so: an out-of-tree token dispatcher
 * (plugin ABI 1.1) registered under the name "flex", which sends each token
 * once per destination rank however many of that rank's experts chose it,
 * and fans it out to those experts after receipt (DeepEP's deduplication).
 *
 * A row of the contract is one (token, chosen expert); rows of one token
 * share their data (args->src_index). flex sends per destination rank:
 *  - tokens   the distinct source rows routed there, each once (device);
 *  - entries  one per row, in row order: (the token's slot among those sent
 *             to that rank, the local expert), and the row's probability
 *             when given (host).
 * The receiver copies each token to every expert that chose it, giving the
 * contract's expert_rows (by local expert, then source rank, then row).
 * Combine returns every (token, expert) row separately, as the contract
 * asks, so it sends what all_to_all sends; the saving is the dispatch's:
 * (rows - distinct (token, rank) pairs) x C floats per rank and dispatch.
 *
 * dispatch
 *  pre-process    rows sorted by destination rank (stable); each token
 *                 given a slot the first time it goes to a rank; tokens
 *                 packed by rank.
 *  communication  an all_to_all of (tokens, entries) per rank (host); an
 *                 all_to_allv of the tokens (device), of the entries and of
 *                 the probabilities (host).
 *  post-process   each entry's token copied to its expert's rows.
 * combine
 *  pre-process    the experts' outputs back to the order entries arrived in.
 *  communication  an all_to_allv of one row per entry back to its source.
 *  post-process   each row to its place in rows_out; dropped rows zero.
 *
 * Metrics (host->metric, once a step from an AFTER_OPTIMIZER hook, every
 * layer's dispatches and combines of the step summed): bytes_sent (row
 * data), bytes_saved (duplicate rows not sent) and dispatches.
 */
#include <string.h>

#include "tessera/plugin.h"

static struct {
    const ts_host *host;
    ts_plugin_ctx *ctx;
    /* This step's totals, every layer's (reported and cleared per step). */
    int64_t dispatches, bytes_sent, bytes_saved;
} flex;

/* A buffer reused from call to call: grown when a call needs more. */
typedef struct flex_buf {
    void *ptr;
    size_t cap; /* bytes */
} flex_buf;

/* b holding at least `bytes` (contents not kept when it grows): the run's
 * device memory when `device`, else the core's host allocator's. NULL with
 * the error set on failure. */
static void *flex_reserve(flex_buf *b, int device, size_t bytes) {
    if (b->ptr && bytes <= b->cap) return b->ptr;
    if (device)
        flex.host->device_free(flex.ctx, b->ptr);
    else
        flex.host->mem_free(b->ptr);
    bytes = bytes ? bytes : 64;
    b->ptr = device ? flex.host->device_alloc(flex.ctx, TS_MEM_COMM, bytes)
                    : flex.host->mem_alloc(TS_MEM_COMM, bytes);
    b->cap = b->ptr ? bytes : 0;
    if (!b->ptr) flex.host->error(flex.ctx, TS_ERR_NOMEM, "out of memory (%zu bytes)", bytes);
    return b->ptr;
}

static void flex_release(flex_buf *b, int device) {
    if (device)
        flex.host->device_free(flex.ctx, b->ptr);
    else
        flex.host->mem_free(b->ptr);
    b->ptr = NULL;
    b->cap = 0;
}

/* dst row (dst_idx ? dst_idx[i] : i) = src row (src_idx ? src_idx[i] : i),
 * i < n, C floats each, on the device; consecutive runs go as one copy. */
static ts_status flex_copy_rows(float *dst, const int64_t *dst_idx, const float *src,
                                const int64_t *src_idx, int64_t n, int C) {
    for (int64_t i = 0; i < n;) {
        int64_t d = dst_idx ? dst_idx[i] : i, s = src_idx ? src_idx[i] : i, run = 1;
        while (i + run < n && (dst_idx ? dst_idx[i + run] : i + run) == d + run &&
               (src_idx ? src_idx[i + run] : i + run) == s + run)
            run++;
        TS_TRY(flex.host->device_copy(flex.ctx, dst + (size_t)d * C, src + (size_t)s * C,
                                      (size_t)run * C * sizeof(float)));
        i += run;
    }
    return TS_OK;
}

/* One exchange's per-rank counts and offsets (ranks entries each): sent to
 * each rank, received from each, in one unit. */
typedef struct flex_counts {
    size_t *sc, *sd, *rc, *rd;
} flex_counts;

/* The exchanges' units: tokens (rows, floats), entries (entries, int32s: two
 * per entry, floats: a row per entry on the way back). */
enum { FLEX_TOK, FLEX_TOK_F, FLEX_ENT, FLEX_ENT_I, FLEX_ENT_F, FLEX_NCOUNTS };

/* dst = src x f, counts and offsets. */
static void flex_scale(flex_counts *dst, const flex_counts *src, int R, size_t f) {
    for (int r = 0; r < R; r++) {
        dst->sc[r] = src->sc[r] * f, dst->sd[r] = src->sd[r] * f;
        dst->rc[r] = src->rc[r] * f, dst->rd[r] = src->rd[r] * f;
    }
}

/* One layer's dispatcher: the last dispatch's routing, for its combine. */
typedef struct flex_state {
    int ranks; /* of the group at the last dispatch; 0 before it */
    int nrows; /* rows of the last dispatch */
    int64_t ntok_sent, nent_sent, ntok_recv, nent_recv;
    /* Counts of the exchanges, carved from `counts` (size_t,
     * FLEX_NCOUNTS x 4 x ranks). */
    flex_counts n[FLEX_NCOUNTS];
    flex_buf counts;
    /* int32, 5 x ranks: (tokens, entries) sent to each rank, received from
     * each; a packing cursor per rank. */
    flex_buf meta;
    /* int64, nrows: routed rows by destination rank (stable). */
    flex_buf by_rank;
    /* int32, 2 x nsrc: the last rank a token went to, its slot there. */
    flex_buf mark;
    /* int64, per entry sent: token send slot -> src row (ntok_sent used),
     * entry send slot -> row. */
    flex_buf tok_src, ent_row;
    /* int32 pairs (slot, local expert): entries sent, entries received. */
    flex_buf ent_send, ent_recv;
    /* int64, nent_recv: expert row -> entry received, -> token received;
     * local_experts: a cursor per expert. */
    flex_buf perm, fan, expert_next;
    /* f32 host: nent_sent probabilities in send order; nent_recv received
     * and nent_recv by expert (args->expert_probs). */
    flex_buf probs_send, probs;
    /* Device rows of C floats: tokens sent and received, expert rows, and
     * combine's rows back (nent_recv sent, nent_sent received). */
    flex_buf tok_send, tok_recv, expert_rows, back_send, back_recv;
} flex_state;

static ts_status flex_create(ts_plugin_ctx *ctx, void *user, void **state) {
    (void)user;
    flex_state *s = flex.host->mem_alloc(TS_MEM_OTHER, sizeof *s);
    if (!s) return flex.host->error(ctx, TS_ERR_NOMEM, "flex: out of memory");
    *state = s;
    return TS_OK;
}

static void flex_destroy(ts_plugin_ctx *ctx, void *state) {
    (void)ctx;
    flex_state *s = state;
    if (!s) return;
    flex_buf *host_bufs[] = {&s->counts,      &s->meta,       &s->by_rank,  &s->mark, &s->tok_src,
                             &s->ent_row,     &s->ent_send,   &s->ent_recv, &s->perm, &s->fan,
                             &s->expert_next, &s->probs_send, &s->probs};
    flex_buf *dev_bufs[] = {&s->tok_send, &s->tok_recv, &s->expert_rows, &s->back_send,
                            &s->back_recv};
    for (size_t i = 0; i < sizeof host_bufs / sizeof *host_bufs; i++)
        flex_release(host_bufs[i], 0);
    for (size_t i = 0; i < sizeof dev_bufs / sizeof *dev_bufs; i++)
        flex_release(dev_bufs[i], 1);
    flex.host->mem_free(s);
}

/* The contract's inputs, and experts spread evenly: rank r of the group
 * holds [r * E / ranks, + E / ranks). */
static ts_status flex_check(const ts_plugin_dispatch_args *a, int *ranks, int *rank) {
    const ts_host *h = flex.host;
    if (!a || a->struct_size < offsetof(ts_plugin_dispatch_args, expert_probs) + sizeof(float *))
        return h->error(flex.ctx, TS_ERR_INVALID, "flex: dispatch args older than ABI 1.1");
    if (!a->comm || !a->host_comm)
        return h->error(flex.ctx, TS_ERR_INVALID, "flex: no expert-parallel communicator");
    int R = h->comm_size(a->host_comm), me = h->comm_rank(a->host_comm);
    int E = a->experts, L = R > 0 ? E / R : 0;
    if (R < 1 || h->comm_size(a->comm) != R || E < 1 || E % R != 0 || a->local_experts != L ||
        a->first_expert != me * L)
        return h->error(flex.ctx, TS_ERR_INVALID,
                        "flex: rank %d/%d holds experts [%d, %d) of %d; flex spreads them "
                        "evenly (E / ranks each) over one group",
                        me, R, a->first_expert, a->first_expert + a->local_experts, E);
    if (a->hidden < 1 || a->nrows < 0 || a->nsrc < 0 || !a->expert_counts ||
        (a->nrows > 0 && (!a->dest || !a->src_index || !a->src)))
        return h->error(flex.ctx, TS_ERR_INVALID, "flex: rank %d/%d: bad sizes or buffers", me, R);
    for (int r = 0; r < a->nrows; r++)
        if (a->dest[r] < -1 || a->dest[r] >= E ||
            (a->dest[r] >= 0 && (a->src_index[r] < 0 || a->src_index[r] >= a->nsrc)))
            return h->error(flex.ctx, TS_ERR_INVALID,
                            "flex: rank %d/%d: row %d has dest %d (of %d experts) and src_index "
                            "%d (of %d)",
                            me, R, r, a->dest[r], E, a->src_index[r], a->nsrc);
    *ranks = R;
    *rank = me;
    return TS_OK;
}

static ts_status flex_dispatch(ts_plugin_ctx *ctx, void *state, void *vargs) {
    (void)ctx;
    flex_state *s = state;
    ts_plugin_dispatch_args *a = vargs;
    const ts_host *h = flex.host;
    s->ranks = 0; /* no routing to reverse until this dispatch completes */
    int R = 0, me = 0;
    TS_TRY(flex_check(a, &R, &me));
    int L = a->local_experts, C = a->hidden;
    size_t row = (size_t)C * sizeof(float);
    size_t *counts = flex_reserve(&s->counts, 0, FLEX_NCOUNTS * 4 * (size_t)R * sizeof(size_t));
    int32_t *meta = flex_reserve(&s->meta, 0, 5 * (size_t)R * sizeof(int32_t));
    int64_t *by_rank = flex_reserve(&s->by_rank, 0, (size_t)a->nrows * sizeof(int64_t));
    int32_t *mark = flex_reserve(&s->mark, 0, 2 * (size_t)a->nsrc * sizeof(int32_t));
    if (!counts || !meta || !by_rank || !mark) return TS_ERR_NOMEM;
    for (int k = 0; k < FLEX_NCOUNTS; k++) {
        size_t *c = counts + (size_t)k * 4 * R;
        s->n[k] = (flex_counts){c, c + R, c + 2 * R, c + 3 * R};
    }
    flex_counts *tok = &s->n[FLEX_TOK], *ent = &s->n[FLEX_ENT];
    int32_t *slot = mark + a->nsrc, *cursor = meta + 4 * R;

    /* --- pre-process: rows by destination rank, each token once per rank -- */
    memset(ent->sc, 0, (size_t)R * sizeof(size_t));
    for (int r = 0; r < a->nrows; r++)
        if (a->dest[r] >= 0) ent->sc[a->dest[r] / L]++;
    int64_t nent = 0;
    for (int d = 0; d < R; d++) {
        ent->sd[d] = (size_t)nent;
        cursor[d] = (int32_t)nent;
        nent += (int64_t)ent->sc[d];
    }
    for (int r = 0; r < a->nrows; r++)
        if (a->dest[r] >= 0) by_rank[cursor[a->dest[r] / L]++] = r;
    int64_t *tok_src = flex_reserve(&s->tok_src, 0, (size_t)nent * sizeof(int64_t));
    int64_t *ent_row = flex_reserve(&s->ent_row, 0, (size_t)nent * sizeof(int64_t));
    int32_t *ent_send = flex_reserve(&s->ent_send, 0, 2 * (size_t)nent * sizeof(int32_t));
    if (!tok_src || !ent_row || !ent_send) return TS_ERR_NOMEM;
    for (int i = 0; i < a->nsrc; i++)
        mark[i] = -1;
    int64_t ntok = 0;
    for (int d = 0; d < R; d++) {
        tok->sc[d] = 0;
        tok->sd[d] = (size_t)ntok;
        for (size_t j = ent->sd[d]; j < ent->sd[d] + ent->sc[d]; j++) {
            int64_t r = by_rank[j];
            int32_t src = a->src_index[r];
            if (mark[src] != d) { /* the token's first row for rank d */
                mark[src] = d;
                slot[src] = (int32_t)tok->sc[d]++;
                tok_src[ntok++] = src;
            }
            ent_send[2 * j] = slot[src];
            ent_send[2 * j + 1] = a->dest[r] - d * L;
            ent_row[j] = r;
        }
    }
    for (int d = 0; d < R; d++) {
        meta[2 * d] = (int32_t)tok->sc[d];
        meta[2 * d + 1] = (int32_t)ent->sc[d];
    }
    float *tok_send = flex_reserve(&s->tok_send, 1, (size_t)ntok * row);
    float *probs_send = NULL;
    if (a->probs) probs_send = flex_reserve(&s->probs_send, 0, (size_t)nent * sizeof(float));
    if (!tok_send || (a->probs && !probs_send)) return TS_ERR_NOMEM;
    TS_TRY(flex_copy_rows(tok_send, NULL, a->src, tok_src, ntok, C));
    for (int64_t j = 0; probs_send && j < nent; j++)
        probs_send[j] = a->probs[ent_row[j]];

    /* --- communication ------------------------------------------------------ */
    TS_TRY(h->all_to_all(a->host_comm, meta, meta + 2 * R, 2, TS_I32));
    int64_t ntok_recv = 0, nent_recv = 0;
    for (int src = 0; src < R; src++) {
        tok->rc[src] = (size_t)meta[2 * R + 2 * src];
        ent->rc[src] = (size_t)meta[2 * R + 2 * src + 1];
        tok->rd[src] = (size_t)ntok_recv, ent->rd[src] = (size_t)nent_recv;
        ntok_recv += (int64_t)tok->rc[src], nent_recv += (int64_t)ent->rc[src];
    }
    flex_scale(&s->n[FLEX_TOK_F], tok, R, (size_t)C);
    flex_scale(&s->n[FLEX_ENT_I], ent, R, 2);
    flex_scale(&s->n[FLEX_ENT_F], ent, R, (size_t)C);
    const flex_counts *tf = &s->n[FLEX_TOK_F], *ei = &s->n[FLEX_ENT_I];
    float *tok_recv = flex_reserve(&s->tok_recv, 1, (size_t)ntok_recv * row);
    int32_t *ent_recv = flex_reserve(&s->ent_recv, 0, 2 * (size_t)nent_recv * sizeof(int32_t));
    float *probs = NULL;
    if (a->probs) probs = flex_reserve(&s->probs, 0, 2 * (size_t)nent_recv * sizeof(float));
    if (!tok_recv || !ent_recv || (a->probs && !probs)) return TS_ERR_NOMEM;
    TS_TRY(h->all_to_allv(a->comm, tok_send, tf->sc, tf->sd, tok_recv, tf->rc, tf->rd, TS_F32));
    TS_TRY(
        h->all_to_allv(a->host_comm, ent_send, ei->sc, ei->sd, ent_recv, ei->rc, ei->rd, TS_I32));
    if (probs)
        TS_TRY(h->all_to_allv(a->host_comm, probs_send, ent->sc, ent->sd, probs, ent->rc, ent->rd,
                              TS_F32));

    /* --- post-process: each token to the experts that chose it here -------- */
    int64_t *perm = flex_reserve(&s->perm, 0, (size_t)nent_recv * sizeof(int64_t));
    int64_t *fan = flex_reserve(&s->fan, 0, (size_t)nent_recv * sizeof(int64_t));
    float *rows = flex_reserve(&s->expert_rows, 1, (size_t)nent_recv * row);
    int64_t *next = flex_reserve(&s->expert_next, 0, (size_t)L * sizeof(int64_t));
    if (!perm || !fan || !rows || !next) return TS_ERR_NOMEM;
    for (int e = 0; e < L; e++)
        a->expert_counts[e] = 0;
    for (int src = 0; src < R; src++)
        for (size_t j = ent->rd[src]; j < ent->rd[src] + ent->rc[src]; j++) {
            int32_t slot_j = ent_recv[2 * j], e = ent_recv[2 * j + 1];
            if (e < 0 || e >= L || slot_j < 0 || (size_t)slot_j >= tok->rc[src])
                return h->error(flex.ctx, TS_ERR_PLUGIN,
                                "flex: rank %d/%d: entry %zu from rank %d names token %d of %zu "
                                "and local expert %d of %d",
                                me, R, j, src, slot_j, tok->rc[src], e, L);
            a->expert_counts[e]++;
        }
    for (int e = 0; e < L; e++)
        next[e] = e ? next[e - 1] + a->expert_counts[e - 1] : 0;
    /* Entries arrive in (source rank, row) order: placing them in turn keeps
     * that order within each expert. */
    for (int src = 0; src < R; src++)
        for (size_t j = ent->rd[src]; j < ent->rd[src] + ent->rc[src]; j++) {
            int64_t k = next[ent_recv[2 * j + 1]]++;
            perm[k] = (int64_t)j;
            fan[k] = (int64_t)tok->rd[src] + ent_recv[2 * j];
        }
    TS_TRY(flex_copy_rows(rows, NULL, tok_recv, fan, nent_recv, C));
    a->expert_probs = NULL;
    if (probs) {
        float *in = probs, *out = probs + nent_recv;
        for (int64_t i = 0; i < nent_recv; i++)
            out[i] = in[perm[i]];
        a->expert_probs = out;
    }
    a->expert_rows = rows;
    a->expert_nrows = nent_recv;
    a->bytes_sent = ntok * (int64_t)row;
    s->ranks = R, s->nrows = a->nrows;
    s->ntok_sent = ntok, s->nent_sent = nent, s->ntok_recv = ntok_recv, s->nent_recv = nent_recv;
    flex.dispatches++;
    flex.bytes_sent += a->bytes_sent;
    flex.bytes_saved += (nent - ntok) * (int64_t)row;
    return TS_OK;
}

static ts_status flex_combine(ts_plugin_ctx *ctx, void *state, void *vargs) {
    (void)ctx;
    flex_state *s = state;
    ts_plugin_dispatch_args *a = vargs;
    const ts_host *h = flex.host;
    if (!s->ranks || a->nrows != s->nrows || (s->nent_recv && !a->expert_rows_in) ||
        (a->nrows && !a->rows_out))
        return h->error(flex.ctx, TS_ERR_INVALID,
                        "flex: combine of %d rows follows no dispatch of them (or lacks "
                        "expert_rows_in / rows_out)",
                        a->nrows);
    int C = a->hidden;
    size_t row = (size_t)C * sizeof(float);
    const flex_counts *ef = &s->n[FLEX_ENT_F];
    float *back_send = flex_reserve(&s->back_send, 1, (size_t)s->nent_recv * row);
    float *back_recv = flex_reserve(&s->back_recv, 1, (size_t)s->nent_sent * row);
    if (!back_send || !back_recv) return TS_ERR_NOMEM;

    /* --- pre-process: outputs back to the order their entries arrived in --- */
    TS_TRY(flex_copy_rows(back_send, s->perm.ptr, a->expert_rows_in, NULL, s->nent_recv, C));
    /* --- communication: one row per entry, back to its source -------------- */
    TS_TRY(h->all_to_allv(a->comm, back_send, ef->rc, ef->rd, back_recv, ef->sc, ef->sd, TS_F32));
    /* --- post-process: each row to its place, dropped rows zero ------------ */
    if (a->nrows) TS_TRY(h->device_zero(flex.ctx, a->rows_out, (size_t)a->nrows * row));
    TS_TRY(flex_copy_rows(a->rows_out, s->ent_row.ptr, back_recv, NULL, s->nent_sent, C));
    a->bytes_sent = s->nent_recv * (int64_t)row;
    flex.bytes_sent += a->bytes_sent;
    return TS_OK;
}

/* Once a step: the step's totals, every layer's, then cleared. */
static ts_status flex_after_step(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev, void *user) {
    (void)ev;
    (void)user;
    if (!flex.dispatches) return TS_OK;
    TS_TRY(flex.host->metric(ctx, "dispatches", (double)flex.dispatches));
    TS_TRY(flex.host->metric(ctx, "bytes_sent", (double)flex.bytes_sent));
    TS_TRY(flex.host->metric(ctx, "bytes_saved", (double)flex.bytes_saved));
    flex.dispatches = flex.bytes_sent = flex.bytes_saved = 0;
    return TS_OK;
}

static ts_status flex_init(const ts_host *host, ts_plugin_ctx *ctx) {
    memset(&flex, 0, sizeof flex);
    flex.host = host;
    flex.ctx = ctx;
    if (!TS_HOST_HAS(host, device_copy))
        return host->error(ctx, TS_ERR_PLUGIN, "needs a core of plugin ABI 1.1 or later");
    static const ts_plugin_dispatcher_ops ops = {sizeof ops, flex_create, flex_dispatch,
                                                 flex_combine, flex_destroy};
    TS_TRY(host->register_hook(ctx, TS_HOOK_AFTER_OPTIMIZER, flex_after_step, NULL));
    return host->register_dispatcher(ctx, "flex", &ops, NULL);
}

static const ts_plugin_descriptor flex_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "flex",
    "0.1.0",
    "example: token dispatcher 'flex' (each token sent once per rank, fanned out there)",
    NULL,
    0,
    flex_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &flex_descriptor;
}
