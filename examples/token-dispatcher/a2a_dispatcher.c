/*
 * a2a_dispatcher.c — tessera-a2a_dispatcher.so: an out-of-tree token
 * dispatcher (plugin ABI 1.1) registered under the name "a2a": rows go to
 * the ranks of their experts with one all_to_allv, and come back with
 * another. Experts are spread evenly: rank r of the expert-parallel group
 * holds experts [r * E / ranks, (r + 1) * E / ranks).
 *
 * dispatch (ts_plugin_dispatch_args):
 *  1. counts: how many rows this rank sends to each expert; every rank
 *     learns, with an all_to_all of the counts of its own experts, how many
 *     rows each source sends each of its experts;
 *  2. the rows, packed by destination rank and expert (stable in row
 *     order), go with one all_to_allv of the device communicator;
 *  3. what arrived (by source rank, then expert) is regrouped by expert,
 *     then source: the order the experts read (args->expert_rows).
 * combine reverses the three steps: regroup by source, all_to_allv back,
 * and unpack each row into its original place (dropped rows get zeros).
 *
 * A row with several choices on one rank is sent once per choice; a
 * dispatcher that sends each source row once per destination rank (and fans
 * it out there, args->src_index says which rows share a source) moves less.
 */
#include <stdlib.h>
#include <string.h>

#include "tessera/plugin.h"

static struct {
    const ts_host *host;
    ts_plugin_ctx *ctx;
} a2a;

/* One dispatch's routing, kept for its combine. */
typedef struct a2a_state {
    int ranks, rank;
    size_t *send_counts, *send_displs, *recv_counts, *recv_displs; /* rows, per rank */
    int32_t *order;     /* send position -> row (rows sent, in send order)        */
    int64_t nsent;      /* rows sent                                              */
    int64_t *from;      /* (ranks x local experts) rows from each source, expert  */
    int64_t nrecv;      /* rows received                                          */
    float *send, *recv; /* device staging: nsent and nrecv rows                   */
    float *expert_rows; /* device: received rows by expert then source            */
    float *probs_send, *probs_recv, *expert_probs; /* host: the rows' probabilities */
    size_t send_cap, recv_cap, expert_cap;
} a2a_state;

static void a2a_free_buffers(a2a_state *s) {
    a2a.host->device_free(a2a.ctx, s->send);
    a2a.host->device_free(a2a.ctx, s->recv);
    a2a.host->device_free(a2a.ctx, s->expert_rows);
    s->send = s->recv = s->expert_rows = NULL;
    s->send_cap = s->recv_cap = s->expert_cap = 0;
}

static ts_status a2a_create(ts_plugin_ctx *ctx, void *user, void **state) {
    (void)ctx;
    (void)user;
    a2a_state *s = calloc(1, sizeof *s);
    if (!s) return a2a.host->error(a2a.ctx, TS_ERR_NOMEM, "out of memory");
    *state = s;
    return TS_OK;
}

static void a2a_destroy(ts_plugin_ctx *ctx, void *state) {
    (void)ctx;
    a2a_state *s = state;
    if (!s) return;
    a2a_free_buffers(s);
    free(s->probs_send), free(s->probs_recv), free(s->expert_probs);
    free(s->send_counts);
    free(s->send_displs);
    free(s->recv_counts);
    free(s->recv_displs);
    free(s->order);
    free(s->from);
    free(s);
}

/* Device buffers of at least `rows` rows of C floats. */
static ts_status a2a_reserve(float **buf, size_t *cap, size_t rows, int C) {
    if (rows <= *cap && *buf) return TS_OK;
    a2a.host->device_free(a2a.ctx, *buf);
    *buf = a2a.host->device_alloc(a2a.ctx, TS_MEM_COMM, (rows ? rows : 1) * (size_t)C * 4);
    *cap = *buf ? rows : 0;
    return *buf ? TS_OK : TS_ERR_NOMEM;
}

/* The rows' probabilities go the same way as the rows (host memory, over
 * the host communicator) and are regrouped the same way. */
static ts_status a2a_probs(a2a_state *s, ts_plugin_dispatch_args *a) {
    int R = s->ranks, L = a->local_experts;
    free(s->probs_send), free(s->probs_recv), free(s->expert_probs);
    s->probs_send = malloc(((size_t)s->nsent + 1) * sizeof(float));
    s->probs_recv = malloc(((size_t)s->nrecv + 1) * sizeof(float));
    s->expert_probs = malloc(((size_t)s->nrecv + 1) * sizeof(float));
    if (!s->probs_send || !s->probs_recv || !s->expert_probs)
        return a2a.host->error(a2a.ctx, TS_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < s->nsent; i++)
        s->probs_send[i] = a->probs[s->order[i]];
    TS_TRY(a2a.host->all_to_allv(a->host_comm, s->probs_send, s->send_counts, s->send_displs,
                                 s->probs_recv, s->recv_counts, s->recv_displs, TS_F32));
    int64_t out = 0;
    for (int e = 0; e < L; e++)
        for (int src = 0; src < R; src++) {
            int64_t off = (int64_t)s->recv_displs[src];
            for (int k = 0; k < e; k++)
                off += s->from[src * L + k];
            for (int64_t i = 0; i < s->from[src * L + e]; i++)
                s->expert_probs[out++] = s->probs_recv[off + i];
        }
    a->expert_probs = s->expert_probs;
    return TS_OK;
}

static ts_status a2a_dispatch(ts_plugin_ctx *ctx, void *state, void *vargs) {
    (void)ctx;
    a2a_state *s = state;
    ts_plugin_dispatch_args *a = vargs;
    int R = a2a.host->comm_size(a->host_comm), E = a->experts, L = a->local_experts;
    int C = a->hidden;
    if (E % R != 0 || L != E / R)
        return a2a.host->error(a2a.ctx, TS_ERR_INVALID,
                               "%d experts over %d ranks with %d local: a2a needs E / ranks each",
                               E, R, L);
    s->ranks = R;
    s->rank = a2a.host->comm_rank(a->host_comm);
    size_t *np[4] = {0};
    for (int k = 0; k < 4; k++)
        np[k] = calloc((size_t)R, sizeof(size_t));
    int32_t *by_expert = calloc((size_t)E, sizeof *by_expert); /* rows per expert, then start */
    int32_t *cnt = calloc((size_t)E, sizeof *cnt), *recv_cnt = calloc((size_t)E, sizeof *cnt);
    int32_t *order = malloc(((size_t)a->nrows + 1) * sizeof *order);
    int64_t *from = calloc((size_t)R * L, sizeof *from);
    if (!np[0] || !np[1] || !np[2] || !np[3] || !by_expert || !cnt || !recv_cnt || !order ||
        !from) {
        for (int k = 0; k < 4; k++)
            free(np[k]);
        free(by_expert), free(cnt), free(recv_cnt), free(order), free(from);
        return a2a.host->error(a2a.ctx, TS_ERR_NOMEM, "out of memory");
    }
    free(s->send_counts), free(s->send_displs), free(s->recv_counts), free(s->recv_displs);
    free(s->order), free(s->from);
    s->send_counts = np[0], s->send_displs = np[1], s->recv_counts = np[2];
    s->recv_displs = np[3], s->order = order, s->from = from;
    /* 1. Rows per expert; the send order: by expert (so by rank), stable. */
    for (int r = 0; r < a->nrows; r++)
        if (a->dest[r] >= 0) cnt[a->dest[r]]++;
    int64_t pos = 0;
    for (int e = 0; e < E; e++) {
        by_expert[e] = (int32_t)pos;
        pos += cnt[e];
    }
    s->nsent = pos;
    for (int r = 0; r < a->nrows; r++)
        if (a->dest[r] >= 0) order[by_expert[a->dest[r]]++] = r;
    for (int e = 0; e < E; e++)
        s->send_counts[e / L] += (size_t)cnt[e];
    /* Every source's counts for this rank's experts. */
    TS_TRY(a2a.host->all_to_all(a->host_comm, cnt, recv_cnt, (size_t)L, TS_I32));
    s->nrecv = 0;
    for (int src = 0; src < R; src++)
        for (int e = 0; e < L; e++) {
            from[src * L + e] = recv_cnt[src * L + e];
            s->recv_counts[src] += (size_t)recv_cnt[src * L + e];
            s->nrecv += recv_cnt[src * L + e];
        }
    for (int r = 1; r < R; r++) {
        s->send_displs[r] = s->send_displs[r - 1] + s->send_counts[r - 1];
        s->recv_displs[r] = s->recv_displs[r - 1] + s->recv_counts[r - 1];
    }
    free(by_expert), free(cnt), free(recv_cnt);
    /* 2. Pack, exchange (counts in floats: rows x C). */
    TS_TRY(a2a_reserve(&s->send, &s->send_cap, (size_t)s->nsent, C));
    TS_TRY(a2a_reserve(&s->recv, &s->recv_cap, (size_t)s->nrecv, C));
    TS_TRY(a2a_reserve(&s->expert_rows, &s->expert_cap, (size_t)s->nrecv, C));
    size_t row = (size_t)C * sizeof(float);
    for (int64_t i = 0; i < s->nsent; i++)
        TS_TRY(a2a.host->device_copy(a2a.ctx, s->send + (size_t)i * C,
                                     a->src + (size_t)a->src_index[order[i]] * C, row));
    size_t fc[4][64], *f[4] = {fc[0], fc[1], fc[2], fc[3]};
    if (R > 64) return a2a.host->error(a2a.ctx, TS_ERR_INVALID, "more than 64 ranks");
    for (int r = 0; r < R; r++) {
        f[0][r] = s->send_counts[r] * C, f[1][r] = s->send_displs[r] * C;
        f[2][r] = s->recv_counts[r] * C, f[3][r] = s->recv_displs[r] * C;
    }
    TS_TRY(a2a.host->all_to_allv(a->comm, s->send, f[0], f[1], s->recv, f[2], f[3], TS_F32));
    /* 3. By expert, then source. */
    int64_t out = 0;
    for (int e = 0; e < L; e++)
        for (int src = 0; src < R; src++) {
            int64_t off = (int64_t)s->recv_displs[src];
            for (int k = 0; k < e; k++)
                off += from[src * L + k];
            for (int64_t i = 0; i < from[src * L + e]; i++, out++)
                TS_TRY(a2a.host->device_copy(a2a.ctx, s->expert_rows + (size_t)out * C,
                                             s->recv + (size_t)(off + i) * C, row));
        }
    for (int e = 0; e < L; e++) {
        a->expert_counts[e] = 0;
        for (int src = 0; src < R; src++)
            a->expert_counts[e] += from[src * L + e];
    }
    a->expert_probs = NULL;
    if (a->probs) TS_TRY(a2a_probs(s, a));
    a->expert_rows = s->expert_rows;
    a->expert_nrows = s->nrecv;
    a->bytes_sent = s->nsent * (int64_t)row;
    return TS_OK;
}

static ts_status a2a_combine(ts_plugin_ctx *ctx, void *state, void *vargs) {
    (void)ctx;
    a2a_state *s = state;
    ts_plugin_dispatch_args *a = vargs;
    int R = s->ranks, L = a->local_experts, C = a->hidden;
    size_t row = (size_t)C * sizeof(float);
    /* 3'. Back to (source, expert) order. */
    int64_t in = 0;
    for (int e = 0; e < L; e++)
        for (int src = 0; src < R; src++) {
            int64_t off = (int64_t)s->recv_displs[src];
            for (int k = 0; k < e; k++)
                off += s->from[src * L + k];
            for (int64_t i = 0; i < s->from[src * L + e]; i++, in++)
                TS_TRY(a2a.host->device_copy(a2a.ctx, s->recv + (size_t)(off + i) * C,
                                             a->expert_rows_in + (size_t)in * C, row));
        }
    /* 2'. The reverse exchange. */
    size_t fc[4][64], *f[4] = {fc[0], fc[1], fc[2], fc[3]};
    for (int r = 0; r < R; r++) {
        f[0][r] = s->recv_counts[r] * C, f[1][r] = s->recv_displs[r] * C;
        f[2][r] = s->send_counts[r] * C, f[3][r] = s->send_displs[r] * C;
    }
    TS_TRY(a2a.host->all_to_allv(a->comm, s->recv, f[0], f[1], s->send, f[2], f[3], TS_F32));
    /* 1'. Each row to its place; dropped rows are zero. */
    TS_TRY(a2a.host->device_zero(a2a.ctx, a->rows_out, (size_t)a->nrows * row));
    for (int64_t i = 0; i < s->nsent; i++)
        TS_TRY(a2a.host->device_copy(a2a.ctx, a->rows_out + (size_t)s->order[i] * C,
                                     s->send + (size_t)i * C, row));
    a->bytes_sent = s->nrecv * (int64_t)row;
    return TS_OK;
}

static ts_status a2a_init(const ts_host *host, ts_plugin_ctx *ctx) {
    a2a.host = host;
    a2a.ctx = ctx;
    if (!TS_HOST_HAS(host, all_to_allv))
        return host->error(ctx, TS_ERR_PLUGIN, "needs a core of plugin ABI 1.1 or later");
    static const ts_plugin_dispatcher_ops ops = {sizeof ops, a2a_create, a2a_dispatch, a2a_combine,
                                                 a2a_destroy};
    return host->register_dispatcher(ctx, "a2a", &ops, NULL);
}

static const ts_plugin_descriptor a2a_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "a2a_dispatcher",
    "0.1.0",
    "example: token dispatcher 'a2a' (one all_to_allv each way)",
    NULL,
    0,
    a2a_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &a2a_descriptor;
}
