/*
 * dispatch_gather.c — the "all_gather" token dispatcher (dispatch.h): every
 * rank gathers the routed rows of every rank of the expert-parallel group,
 * with their experts and probabilities, and keeps those of its own experts;
 * combine puts each expert output in its row's place in a zeroed buffer of
 * every rank's rows and a reduce_scatter_v (sum: one non-zero term per
 * element) hands each rank its own rows back.
 *
 * dispatch
 *  pre-process    the routed rows (dest >= 0) packed in row order, with
 *                 their experts (and probabilities).
 *  communication  an all_gather of each rank's routed count (host), then
 *                 all_gatherv of the rows (device), the experts and the
 *                 probabilities (host).
 *  post-process   the rows of this rank's experts picked out, grouped by
 *                 local expert, then source rank and row:
 *                 args->expert_rows.
 * combine
 *  pre-process    a zeroed buffer of every rank's routed rows, with each
 *                 expert output written in its row's place.
 *  communication  a reduce_scatter_v (sum) of that buffer: each rank gets
 *                 its own routed rows.
 *  post-process   each routed row to its place in rows_out; dropped rows
 *                 zero.
 *
 * Every rank receives every routed row: (ranks - 1) times the data of
 * all_to_all, in exchange for no count exchange before the rows move.
 */
#include <string.h>

#include "dispatch.h"

/* One layer's dispatcher: the last dispatch's routing and reused buffers. */
typedef struct gather_state {
    const ts_host *host;
    int ranks;      /* of the group at the last dispatch; 0 before it */
    int nrows;      /* rows of the last dispatch */
    int64_t nmine;  /* this rank's routed rows */
    int64_t ntotal; /* every rank's routed rows */
    int64_t nkeep;  /* rows of this rank's experts */
    /* size_t, 2 x ranks: routed rows of each rank, in rows and in floats. */
    ep_dispatch_buf counts;
    /* int32, ranks: the gathered routed counts. */
    ep_dispatch_buf nroutes;
    /* int64, 2 x nrows: slot -> row, slot -> src row (this rank's routed). */
    ep_dispatch_buf routed;
    /* Host, nmine: the routed rows' experts (int32) and probabilities. */
    ep_dispatch_buf dest_send, probs_send;
    /* int32, ntotal: every rank's experts, gathered. */
    ep_dispatch_buf dest;
    /* int64, nkeep: expert row -> gathered slot; local_experts: a cursor
     * per expert. */
    ep_dispatch_buf keep, cursor;
    /* f32 host: ntotal gathered, nkeep by expert (args->expert_probs). */
    ep_dispatch_buf probs;
    /* Device rows of C floats: nmine, ntotal, nkeep; in bf16 dispatches
     * this rank's and every rank's rows on the wire, C bf16 values a row. */
    ep_dispatch_buf send, all, expert_rows, wire_send, wire_all;
} gather_state;

static ts_status gather_create(ts_plugin_ctx *ctx, void *user, void **state) {
    const ts_host *host = user;
    gather_state *s = host->mem_alloc(TS_MEM_OTHER, sizeof *s);
    if (!s) return host->error(ctx, TS_ERR_NOMEM, "all_gather: out of memory");
    s->host = host;
    *state = s;
    return TS_OK;
}

static void gather_destroy(ts_plugin_ctx *ctx, void *state) {
    gather_state *s = state;
    if (!s) return;
    const ts_host *h = s->host;
    ep_dispatch_buf *host_bufs[] = {&s->counts,    &s->nroutes,    &s->routed,
                                    &s->dest_send, &s->probs_send, &s->dest,
                                    &s->keep,      &s->cursor,     &s->probs};
    for (size_t i = 0; i < sizeof host_bufs / sizeof *host_bufs; i++)
        ep_dispatch_release(h, ctx, 0, host_bufs[i]);
    ep_dispatch_release(h, ctx, 1, &s->send);
    ep_dispatch_release(h, ctx, 1, &s->all);
    ep_dispatch_release(h, ctx, 1, &s->expert_rows);
    ep_dispatch_release(h, ctx, 1, &s->wire_send);
    ep_dispatch_release(h, ctx, 1, &s->wire_all);
    h->mem_free(s);
}

static ts_status gather_dispatch(ts_plugin_ctx *ctx, void *state, void *vargs) {
    gather_state *s = state;
    ts_plugin_dispatch_args *a = vargs;
    const ts_host *h = s->host;
    s->ranks = 0; /* no routing to reverse until this dispatch completes */
    int R = 0, me = 0;
    TS_TRY(ep_dispatch_check(h, ctx, "all_gather", a, &R, &me));
    int L = a->local_experts, C = a->hidden, first = a->first_expert;
    size_t row = (size_t)C * sizeof(float);
    size_t *counts = ep_dispatch_reserve(h, ctx, 0, &s->counts, 2 * (size_t)R * sizeof(size_t));
    int32_t *nroutes = ep_dispatch_reserve(h, ctx, 0, &s->nroutes, (size_t)R * sizeof(int32_t));
    int64_t *routed =
        ep_dispatch_reserve(h, ctx, 0, &s->routed, 2 * (size_t)a->nrows * sizeof(int64_t));
    if (!counts || !nroutes || !routed) return TS_ERR_NOMEM;
    size_t *n = counts, *fn = counts + R;
    int64_t *pack_src = routed + a->nrows;

    /* --- pre-process: the routed rows, in row order ------------------------ */
    int64_t nmine = 0;
    for (int r = 0; r < a->nrows; r++)
        if (a->dest[r] >= 0) {
            routed[nmine] = r;
            pack_src[nmine++] = a->src_index[r];
        }
    float *send = ep_dispatch_reserve(h, ctx, 1, &s->send, (size_t)nmine * row);
    int32_t *dest_send =
        ep_dispatch_reserve(h, ctx, 0, &s->dest_send, (size_t)nmine * sizeof(int32_t));
    float *probs_send = NULL;
    if (a->probs)
        probs_send = ep_dispatch_reserve(h, ctx, 0, &s->probs_send, (size_t)nmine * sizeof(float));
    if (!send || !dest_send || (a->probs && !probs_send)) return TS_ERR_NOMEM;
    TS_TRY(ep_dispatch_copy_rows(h, ctx, send, NULL, a->src, pack_src, nmine, C));
    for (int64_t i = 0; i < nmine; i++) {
        dest_send[i] = a->dest[routed[i]];
        if (probs_send) probs_send[i] = a->probs[routed[i]];
    }

    /* --- communication ------------------------------------------------------ */
    int32_t mine = (int32_t)nmine;
    TS_TRY(h->comms->all_gather(a->host_comm, &mine, nroutes, 1, TS_I32));
    int64_t ntotal = 0;
    for (int r = 0; r < R; r++) {
        n[r] = (size_t)nroutes[r], fn[r] = n[r] * C;
        ntotal += nroutes[r];
    }
    int32_t *dest_all = ep_dispatch_reserve(h, ctx, 0, &s->dest, (size_t)ntotal * sizeof(int32_t));
    float *all = ep_dispatch_reserve(h, ctx, 1, &s->all, (size_t)ntotal * row);
    float *probs = NULL;
    if (a->probs)
        probs = ep_dispatch_reserve(h, ctx, 0, &s->probs, 2 * (size_t)ntotal * sizeof(float));
    if (!dest_all || !all || (a->probs && !probs)) return TS_ERR_NOMEM;
    int bf = ep_dispatch_bf16(h, a);
    if (bf) { /* bf16 values: two bytes on the wire, exact */
        void *ws, *wa;
        TS_TRY(ep_dispatch_wire(h, ctx, &s->wire_send, &s->wire_all, send, nmine, ntotal, C, &ws,
                                &wa));
        TS_TRY(h->comms->all_gatherv(a->comm, ws, wa, fn, TS_BF16));
        TS_TRY(ep_dispatch_convert(h, ctx, all, TS_F32, wa, TS_BF16, (size_t)ntotal * C));
    } else {
        TS_TRY(h->comms->all_gatherv(a->comm, send, all, fn, TS_F32));
    }
    TS_TRY(h->comms->all_gatherv(a->host_comm, dest_send, dest_all, n, TS_I32));
    if (probs) TS_TRY(h->comms->all_gatherv(a->host_comm, probs_send, probs, n, TS_F32));

    /* --- post-process: this rank's experts' rows, by expert, source, row ---- */
    int64_t *cursor = ep_dispatch_reserve(h, ctx, 0, &s->cursor, (size_t)L * sizeof(int64_t));
    if (!cursor) return TS_ERR_NOMEM;
    for (int e = 0; e < L; e++)
        a->expert_counts[e] = 0;
    for (int64_t i = 0; i < ntotal; i++)
        if (dest_all[i] >= first && dest_all[i] < first + L)
            a->expert_counts[dest_all[i] - first]++;
    int64_t nkeep = 0;
    for (int e = 0; e < L; e++) {
        cursor[e] = nkeep;
        nkeep += a->expert_counts[e];
    }
    int64_t *keep = ep_dispatch_reserve(h, ctx, 0, &s->keep, (size_t)nkeep * sizeof(int64_t));
    float *rows = ep_dispatch_reserve(h, ctx, 1, &s->expert_rows, (size_t)nkeep * row);
    if (!keep || !rows) return TS_ERR_NOMEM;
    for (int64_t i = 0; i < ntotal; i++) /* gathered in (source rank, row) order */
        if (dest_all[i] >= first && dest_all[i] < first + L)
            keep[cursor[dest_all[i] - first]++] = i;
    TS_TRY(ep_dispatch_copy_rows(h, ctx, rows, NULL, all, keep, nkeep, C));
    a->expert_probs = NULL;
    if (probs) {
        float *in = probs, *out = probs + ntotal;
        for (int64_t i = 0; i < nkeep; i++)
            out[i] = in[keep[i]];
        a->expert_probs = out;
    }
    a->expert_rows = rows;
    a->expert_nrows = nkeep;
    a->bytes_sent = nmine * (int64_t)C * (int64_t)(bf ? sizeof(uint16_t) : sizeof(float)) * (R - 1);
    s->ranks = R, s->nrows = a->nrows, s->nmine = nmine, s->ntotal = ntotal, s->nkeep = nkeep;
    return TS_OK;
}

static ts_status gather_combine(ts_plugin_ctx *ctx, void *state, void *vargs) {
    gather_state *s = state;
    ts_plugin_dispatch_args *a = vargs;
    const ts_host *h = s->host;
    if (!s->ranks || a->nrows != s->nrows || (s->nkeep && !a->expert_rows_in) ||
        (a->nrows && !a->rows_out))
        return h->error(ctx, TS_ERR_INVALID,
                        "all_gather: combine of %d rows follows no dispatch of them (or lacks "
                        "expert_rows_in / rows_out)",
                        a->nrows);
    int R = s->ranks, C = a->hidden;
    size_t row = (size_t)C * sizeof(float);
    size_t *fn = (size_t *)s->counts.ptr + R;
    float *all = s->all.ptr, *mine = s->send.ptr;

    /* --- pre-process: every rank's rows, zero but this rank's experts' ------ */
    if (s->ntotal) TS_TRY(h->dev->zero(ctx, all, (size_t)s->ntotal * row));
    TS_TRY(ep_dispatch_copy_rows(h, ctx, all, s->keep.ptr, a->expert_rows_in, NULL, s->nkeep, C));
    /* --- communication: each rank gets its rows' sums ----------------------- */
    int bf = ep_dispatch_bf16(h, a);
    if (bf) { /* in two bytes: one rank's value and zeros in each row's sum */
        void *wa, *wm;
        TS_TRY(ep_dispatch_wire(h, ctx, &s->wire_all, &s->wire_send, all, s->ntotal, s->nmine, C,
                                &wa, &wm));
        TS_TRY(h->comms->reduce_scatter_v(a->comm, wa, wm, fn, TS_BF16, TS_REDUCE_SUM));
        TS_TRY(ep_dispatch_convert(h, ctx, mine, TS_F32, wm, TS_BF16, (size_t)s->nmine * C));
    } else {
        TS_TRY(h->comms->reduce_scatter_v(a->comm, all, mine, fn, TS_F32, TS_REDUCE_SUM));
    }
    /* --- post-process: each row to its place, dropped rows zero ------------ */
    if (a->nrows) TS_TRY(h->dev->zero(ctx, a->rows_out, (size_t)a->nrows * row));
    TS_TRY(ep_dispatch_copy_rows(h, ctx, a->rows_out, s->routed.ptr, mine, NULL, s->nmine, C));
    a->bytes_sent =
        (s->ntotal - s->nmine) * (int64_t)C * (int64_t)(bf ? sizeof(uint16_t) : sizeof(float));
    return TS_OK;
}

const ts_plugin_dispatcher_ops ep_dispatch_gather_ops = {
    sizeof(ts_plugin_dispatcher_ops),
    gather_create,
    gather_dispatch,
    gather_combine,
    gather_destroy,
};
