/*
 * dispatch_a2a.c — the "all_to_all" token dispatcher (dispatch.h): each
 * routed row goes to the rank of its expert with one all_to_allv of the
 * device communicator, and its expert's output comes back with another.
 * Also ep_register_dispatchers, which registers it with "all_gather".
 *
 * dispatch
 *  pre-process    rows sorted by expert (stable in row order), which sorts
 *                 them by destination rank; packed into one send buffer
 *                 (their probabilities too, when given).
 *  communication  an all_to_all of the per-expert counts (host), so every
 *                 rank knows what each source sends each of its experts;
 *                 an all_to_allv of the rows (device) and of the
 *                 probabilities (host).
 *  post-process   what arrived (source rank, then expert) regrouped by
 *                 local expert, then source: args->expert_rows.
 * combine
 *  pre-process    the experts' outputs back to (source rank, expert) order.
 *  communication  the reverse all_to_allv.
 *  post-process   each row to its place in rows_out; dropped rows zero.
 *
 * A token with several experts on one rank is sent once per expert (the
 * contract's rows); examples/flex-dispatcher sends it once per rank.
 */
#include <string.h>

#include "dispatch.h"

/* One layer's dispatcher: the routing of its last dispatch, for the combine
 * that reverses it, and buffers reused from call to call. */
typedef struct a2a_state {
    const ts_host *host;
    int ranks;     /* of the group at the last dispatch; 0 before it */
    int nrows;     /* rows of the last dispatch */
    int64_t nsent; /* rows this rank sent (its routed rows) */
    int64_t nrecv; /* rows it received (its experts' rows) */
    /* size_t, 8 x ranks: rows sent to each rank, their offsets, rows
     * received from each, theirs; then the same four in floats. */
    ep_dispatch_buf counts;
    /* int32, 3 x E: rows sent to each expert; rows received from each
     * source for each local expert (source-major); the packing cursor. */
    ep_dispatch_buf experts;
    /* int64, 2 x nrows: send slot -> row, send slot -> src row. */
    ep_dispatch_buf order;
    /* int64, nrecv: expert row -> receive slot. */
    ep_dispatch_buf perm;
    /* f32 host: nsent probabilities in send order; nrecv received and
     * nrecv by expert (args->expert_probs). */
    ep_dispatch_buf probs_send, probs;
    /* Device rows of C floats: nsent, nrecv, nrecv; in bf16 dispatches the
     * rows sent and received on the wire, C bf16 values a row. */
    ep_dispatch_buf send, recv, expert_rows, wire_send, wire_recv;
} a2a_state;

static ts_status a2a_create(ts_plugin_ctx *ctx, void *user, void **state) {
    const ts_host *host = user;
    a2a_state *s = host->mem_alloc(TS_MEM_OTHER, sizeof *s);
    if (!s) return host->error(ctx, TS_ERR_NOMEM, "all_to_all: out of memory");
    s->host = host;
    *state = s;
    return TS_OK;
}

static void a2a_destroy(ts_plugin_ctx *ctx, void *state) {
    a2a_state *s = state;
    if (!s) return;
    const ts_host *h = s->host;
    ep_dispatch_buf *host_bufs[] = {&s->counts, &s->experts,    &s->order,
                                    &s->perm,   &s->probs_send, &s->probs};
    for (size_t i = 0; i < sizeof host_bufs / sizeof *host_bufs; i++)
        ep_dispatch_release(h, ctx, 0, host_bufs[i]);
    ep_dispatch_release(h, ctx, 1, &s->send);
    ep_dispatch_release(h, ctx, 1, &s->recv);
    ep_dispatch_release(h, ctx, 1, &s->expert_rows);
    ep_dispatch_release(h, ctx, 1, &s->wire_send);
    ep_dispatch_release(h, ctx, 1, &s->wire_recv);
    h->mem_free(s);
}

static ts_status a2a_dispatch(ts_plugin_ctx *ctx, void *state, void *vargs) {
    a2a_state *s = state;
    ts_plugin_dispatch_args *a = vargs;
    const ts_host *h = s->host;
    s->ranks = 0; /* no routing to reverse until this dispatch completes */
    int R = 0, me = 0;
    TS_TRY(ep_dispatch_check(h, ctx, "all_to_all", a, &R, &me));
    int E = a->experts, L = a->local_experts, C = a->hidden;
    size_t row = (size_t)C * sizeof(float);
    size_t *counts = ep_dispatch_reserve(h, ctx, 0, &s->counts, 8 * (size_t)R * sizeof(size_t));
    int32_t *cnt = ep_dispatch_reserve(h, ctx, 0, &s->experts, 3 * (size_t)E * sizeof(int32_t));
    int64_t *order =
        ep_dispatch_reserve(h, ctx, 0, &s->order, 2 * (size_t)a->nrows * sizeof(int64_t));
    if (!counts || !cnt || !order) return TS_ERR_NOMEM;
    size_t *sc = counts, *sd = counts + R, *rc = counts + 2 * R, *rd = counts + 3 * R;
    size_t *fsc = counts + 4 * R, *fsd = counts + 5 * R, *frc = counts + 6 * R,
           *frd = counts + 7 * R;
    int32_t *recv_cnt = cnt + E, *next = cnt + 2 * E;

    /* --- pre-process: sort by expert (so by destination rank), pack ------ */
    memset(cnt, 0, (size_t)E * sizeof *cnt);
    for (int r = 0; r < a->nrows; r++)
        if (a->dest[r] >= 0) cnt[a->dest[r]]++;
    int64_t nsent = 0;
    for (int e = 0; e < E; e++) {
        next[e] = (int32_t)nsent;
        nsent += cnt[e];
    }
    int64_t *pack_src = order + a->nrows;
    for (int r = 0; r < a->nrows; r++)
        if (a->dest[r] >= 0) order[next[a->dest[r]]++] = r;
    for (int64_t i = 0; i < nsent; i++)
        pack_src[i] = a->src_index[order[i]];
    for (int d = 0; d < R; d++) {
        sc[d] = 0;
        for (int e = d * L; e < (d + 1) * L; e++)
            sc[d] += (size_t)cnt[e];
        sd[d] = d ? sd[d - 1] + sc[d - 1] : 0;
    }
    float *send = ep_dispatch_reserve(h, ctx, 1, &s->send, (size_t)nsent * row);
    float *probs_send = NULL;
    if (a->probs)
        probs_send = ep_dispatch_reserve(h, ctx, 0, &s->probs_send, (size_t)nsent * sizeof(float));
    if (!send || (a->probs && !probs_send)) return TS_ERR_NOMEM;
    TS_TRY(ep_dispatch_copy_rows(h, ctx, send, NULL, a->src, pack_src, nsent, C));
    for (int64_t i = 0; probs_send && i < nsent; i++)
        probs_send[i] = a->probs[order[i]];

    /* --- communication ------------------------------------------------------ */
    TS_TRY(h->comms->all_to_all(a->host_comm, cnt, recv_cnt, (size_t)L, TS_I32));
    int64_t nrecv = 0;
    for (int src = 0; src < R; src++) {
        rc[src] = 0;
        for (int e = 0; e < L; e++)
            rc[src] += (size_t)recv_cnt[src * L + e];
        rd[src] = src ? rd[src - 1] + rc[src - 1] : 0;
        nrecv += (int64_t)rc[src];
    }
    for (int r = 0; r < R; r++) {
        fsc[r] = sc[r] * C, fsd[r] = sd[r] * C, frc[r] = rc[r] * C, frd[r] = rd[r] * C;
    }
    float *recv = ep_dispatch_reserve(h, ctx, 1, &s->recv, (size_t)nrecv * row);
    float *rows = ep_dispatch_reserve(h, ctx, 1, &s->expert_rows, (size_t)nrecv * row);
    int64_t *perm = ep_dispatch_reserve(h, ctx, 0, &s->perm, (size_t)nrecv * sizeof(int64_t));
    float *probs = NULL;
    if (a->probs)
        probs = ep_dispatch_reserve(h, ctx, 0, &s->probs, 2 * (size_t)nrecv * sizeof(float));
    if (!recv || !rows || !perm || (a->probs && !probs)) return TS_ERR_NOMEM;
    int bf = ep_dispatch_bf16(h, a);
    if (bf) { /* bf16 values: two bytes on the wire, exact */
        void *ws, *wr;
        TS_TRY(ep_dispatch_wire(h, ctx, &s->wire_send, &s->wire_recv, send, nsent, nrecv, C, &ws,
                                &wr));
        TS_TRY(h->comms->all_to_allv(a->comm, ws, fsc, fsd, wr, frc, frd, TS_BF16));
        TS_TRY(ep_dispatch_convert(h, ctx, recv, TS_F32, wr, TS_BF16, (size_t)nrecv * C));
    } else {
        TS_TRY(h->comms->all_to_allv(a->comm, send, fsc, fsd, recv, frc, frd, TS_F32));
    }
    if (probs)
        TS_TRY(h->comms->all_to_allv(a->host_comm, probs_send, sc, sd, probs, rc, rd, TS_F32));

    /* --- post-process: by local expert, then source rank ------------------- */
    int64_t k = 0;
    for (int e = 0; e < L; e++) {
        a->expert_counts[e] = 0;
        for (int src = 0; src < R; src++) {
            int64_t off = (int64_t)rd[src];
            for (int j = 0; j < e; j++)
                off += recv_cnt[src * L + j];
            for (int32_t i = 0; i < recv_cnt[src * L + e]; i++)
                perm[k++] = off + i;
            a->expert_counts[e] += recv_cnt[src * L + e];
        }
    }
    TS_TRY(ep_dispatch_copy_rows(h, ctx, rows, NULL, recv, perm, nrecv, C));
    a->expert_probs = NULL;
    if (probs) {
        float *in = probs, *out = probs + nrecv;
        for (int64_t i = 0; i < nrecv; i++)
            out[i] = in[perm[i]];
        a->expert_probs = out;
    }
    a->expert_rows = rows;
    a->expert_nrows = nrecv;
    a->bytes_sent = nsent * (int64_t)C * (int64_t)(bf ? sizeof(uint16_t) : sizeof(float));
    s->ranks = R, s->nrows = a->nrows, s->nsent = nsent, s->nrecv = nrecv;
    return TS_OK;
}

static ts_status a2a_combine(ts_plugin_ctx *ctx, void *state, void *vargs) {
    a2a_state *s = state;
    ts_plugin_dispatch_args *a = vargs;
    const ts_host *h = s->host;
    if (!s->ranks || a->nrows != s->nrows || (s->nrecv && !a->expert_rows_in) ||
        (a->nrows && !a->rows_out))
        return h->error(ctx, TS_ERR_INVALID,
                        "all_to_all: combine of %d rows follows no dispatch of them (or lacks "
                        "expert_rows_in / rows_out)",
                        a->nrows);
    int R = s->ranks, C = a->hidden;
    size_t row = (size_t)C * sizeof(float);
    size_t *counts = s->counts.ptr;
    size_t *fsc = counts + 4 * R, *fsd = counts + 5 * R, *frc = counts + 6 * R,
           *frd = counts + 7 * R;
    float *send = s->send.ptr, *recv = s->recv.ptr;

    /* --- pre-process: back to (source rank, expert) order ---------------- */
    TS_TRY(ep_dispatch_copy_rows(h, ctx, recv, s->perm.ptr, a->expert_rows_in, NULL, s->nrecv, C));
    /* --- communication ------------------------------------------------------ */
    int bf = ep_dispatch_bf16(h, a);
    if (bf) { /* the rows back in two bytes */
        void *ws, *wr;
        TS_TRY(ep_dispatch_wire(h, ctx, &s->wire_recv, &s->wire_send, recv, s->nrecv, s->nsent, C,
                                &ws, &wr));
        TS_TRY(h->comms->all_to_allv(a->comm, ws, frc, frd, wr, fsc, fsd, TS_BF16));
        TS_TRY(ep_dispatch_convert(h, ctx, send, TS_F32, wr, TS_BF16, (size_t)s->nsent * C));
    } else {
        TS_TRY(h->comms->all_to_allv(a->comm, recv, frc, frd, send, fsc, fsd, TS_F32));
    }
    /* --- post-process: each row to its place, dropped rows zero ------------ */
    if (a->nrows) TS_TRY(h->dev->zero(ctx, a->rows_out, (size_t)a->nrows * row));
    TS_TRY(ep_dispatch_copy_rows(h, ctx, a->rows_out, s->order.ptr, send, NULL, s->nsent, C));
    a->bytes_sent = s->nrecv * (int64_t)C * (int64_t)(bf ? sizeof(uint16_t) : sizeof(float));
    return TS_OK;
}

const ts_plugin_dispatcher_ops ep_dispatch_a2a_ops = {
    sizeof(ts_plugin_dispatcher_ops), a2a_create, a2a_dispatch, a2a_combine, a2a_destroy,
};

ts_status ep_register_dispatchers(const ts_host *host, ts_plugin_ctx *ctx) {
    if (!TS_DEVICE_HAS(host->dev, copy))
        return host->error(ctx, TS_ERR_PLUGIN, "the dispatchers need a core of ABI 1.1 or later");
    /* The user pointer is the host table: create keeps it in the state. */
    TS_TRY(host->reg->dispatcher(ctx, "all_to_all", &ep_dispatch_a2a_ops, (void *)host));
    return host->reg->dispatcher(ctx, "all_gather", &ep_dispatch_gather_ops, (void *)host);
}
