/*
 * comm_plan.c — the dry run's communicators (comm_plan.h): every operation
 * completes at once, moves nothing between ranks, and is counted by the
 * core like any other, so that a dry run's counters are the traffic a run
 * would have.
 *
 * Each has its dry run (dry_run.h) as its context: the clock its operations
 * occupy and the region whose buffers are never touched (backend_plan.h). Host
 * buffers get what one rank alone would see (a sum of one, its own block
 * everywhere, zeros received), so host-side arithmetic stays finite.
 */
#include "comm_plan.h"

#include <stdlib.h>
#include <string.h>

#include "backend_plan.h"
#include "comm_impl.h"  /* the communicator's context, for its link */
#include "plan_clock.h" /* each operation occupies its link */

typedef struct plan_ctx {
    ts_dry_run *dr; /* whose clock and memory it sees */
    int rank, size;
    int has_link;
    ts_plan_link link;
    ts_plan_busy busy; /* until its last operation ends */
} plan_ctx;

/* A request of the clock: the operation's end. */
typedef struct plan_req {
    double end;
} plan_req;

/* The operation `op` of `bytes` (counted as the counters count it) on the
 * clock: a request the wait completes at its end, or NULL (complete) when
 * the clock is off or the group has no link. */
static void *plan_charge(void *vctx, ts_comm_op op, double bytes) {
    plan_ctx *c = vctx;
    if (!c || !c->has_link || !ts_plan_clock_on(c->dr)) return NULL;
    plan_req *r = malloc(sizeof *r);
    if (!r) return NULL; /* counted as instantaneous rather than failing */
    r->end =
        ts_plan_clock_start(c->dr, &c->busy, ts_plan_link_seconds(&c->link, op, c->size, bytes));
    return r;
}

static int plan_host(const plan_ctx *c, const void *p) {
    return p && !ts_backend_plan_owns(c->dr, p);
}

static void plan_copy(const plan_ctx *c, void *dst, const void *src, size_t bytes) {
    if (plan_host(c, dst) && plan_host(c, src) && dst != src) memmove(dst, src, bytes);
}

static ts_status plan_all_reduce(void *ctx, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, ts_reduce_op op, void **req) {
    (void)op;
    plan_copy(ctx, recv, send, count * ts_dtype_size(dtype));
    *req = plan_charge(ctx, TS_COMM_ALL_REDUCE, (double)count * ts_dtype_size(dtype));
    return TS_OK;
}

static ts_status plan_all_gather(void *vctx, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, void **req) {
    plan_ctx *ctx = vctx;
    size_t bytes = count * ts_dtype_size(dtype);
    for (int r = 0; r < ctx->size; r++)
        plan_copy(ctx, (char *)recv + (size_t)r * bytes, send, bytes);
    *req = plan_charge(ctx, TS_COMM_ALL_GATHER, (double)bytes * ctx->size);
    return TS_OK;
}

static ts_status plan_all_gatherv(void *vctx, const void *send, void *recv, const size_t *counts,
                                  const size_t *displs, ts_dtype dtype, void **req) {
    plan_ctx *ctx = vctx;
    size_t es = ts_dtype_size(dtype);
    plan_copy(ctx, (char *)recv + displs[ctx->rank] * es, send, counts[ctx->rank] * es);
    double total = 0.0;
    for (int r = 0; r < ctx->size; r++)
        total += (double)counts[r] * es;
    *req = plan_charge(ctx, TS_COMM_ALL_GATHER, total);
    return TS_OK;
}

static ts_status plan_reduce_scatter(void *vctx, const void *send, void *recv, size_t count,
                                     ts_dtype dtype, ts_reduce_op op, void **req) {
    plan_ctx *ctx = vctx;
    (void)op;
    size_t bytes = count * ts_dtype_size(dtype);
    plan_copy(ctx, recv, (const char *)send + (size_t)ctx->rank * bytes, bytes);
    *req = plan_charge(ctx, TS_COMM_REDUCE_SCATTER, (double)bytes * ctx->size);
    return TS_OK;
}

static ts_status plan_reduce_scatter_v(void *vctx, const void *send, void *recv,
                                       const size_t *counts, ts_dtype dtype, ts_reduce_op op,
                                       void **req) {
    plan_ctx *ctx = vctx;
    (void)op;
    size_t es = ts_dtype_size(dtype), off = 0;
    double total = 0.0;
    for (int r = 0; r < ctx->size; r++) {
        if (r < ctx->rank) off += counts[r];
        total += (double)counts[r] * es;
    }
    plan_copy(ctx, recv, (const char *)send + off * es, counts[ctx->rank] * es);
    *req = plan_charge(ctx, TS_COMM_REDUCE_SCATTER, total);
    return TS_OK;
}

static ts_status plan_all_to_all(void *ctx, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, void **req) {
    plan_ctx *c = ctx;
    plan_copy(c, recv, send, count * (size_t)c->size * ts_dtype_size(dtype));
    *req = plan_charge(ctx, TS_COMM_ALL_TO_ALL, (double)count * c->size * ts_dtype_size(dtype));
    return TS_OK;
}

static ts_status plan_all_to_allv(void *ctx, const void *send, const size_t *send_counts,
                                  const size_t *send_displs, void *recv, const size_t *recv_counts,
                                  const size_t *recv_displs, ts_dtype dtype, void **req) {
    (void)send, (void)send_displs;
    size_t es = ts_dtype_size(dtype);
    plan_ctx *c = ctx;
    double total = 0.0;
    for (int r = 0; r < c->size; r++) {
        if (plan_host(c, recv)) memset((char *)recv + recv_displs[r] * es, 0, recv_counts[r] * es);
        total += (double)send_counts[r] * es;
    }
    *req = plan_charge(ctx, TS_COMM_ALL_TO_ALL, total);
    return TS_OK;
}

static ts_status plan_broadcast(void *ctx, void *buf, size_t count, ts_dtype dtype, int root,
                                void **req) {
    (void)buf, (void)root;
    *req = plan_charge(ctx, TS_COMM_BROADCAST, (double)count * ts_dtype_size(dtype));
    return TS_OK;
}

static ts_status plan_send(void *ctx, const void *buf, size_t count, ts_dtype dtype, int peer,
                           int tag, void **req) {
    (void)buf, (void)peer, (void)tag;
    *req = plan_charge(ctx, TS_COMM_SEND, (double)count * ts_dtype_size(dtype));
    return TS_OK;
}

static ts_status plan_recv(void *ctx, void *buf, size_t count, ts_dtype dtype, int peer, int tag,
                           void **req) {
    (void)peer, (void)tag;
    if (plan_host(ctx, buf)) memset(buf, 0, count * ts_dtype_size(dtype));
    *req = plan_charge(ctx, TS_COMM_RECV, (double)count * ts_dtype_size(dtype));
    return TS_OK;
}

static ts_status plan_barrier(void *ctx, void **req) {
    (void)ctx;
    *req = NULL;
    return TS_OK;
}

/* Every operation is complete when asked: the compute stream moves to its
 * end (an early wait exposes what the link has left). */
static ts_status plan_test(void *ctx, void *req, int *done) {
    if (req) {
        ts_plan_clock_wait(((plan_ctx *)ctx)->dr, ((plan_req *)req)->end);
        free(req);
    }
    *done = 1;
    return TS_OK;
}

static ts_status plan_split(void *ctx, int color, int key, const int *members, int new_size,
                            int new_rank, void **new_ctx) {
    (void)key, (void)members;
    *new_ctx = NULL;
    if (color < 0) return TS_OK;
    plan_ctx *c = malloc(sizeof *c);
    if (!c) return ts_error(TS_ERR_NOMEM, "plan: out of memory");
    *c = (plan_ctx){.dr = ((plan_ctx *)ctx)->dr, .rank = new_rank, .size = new_size};
    *new_ctx = c;
    return TS_OK;
}

static void plan_free(void *ctx) {
    free(ctx);
}

static const ts_comm_ops comm_plan_ops = {
    .version = TS_COMM_OPS_VERSION,
    .name = "plan",
    .all_reduce = plan_all_reduce,
    .all_gather = plan_all_gather,
    .all_gatherv = plan_all_gatherv,
    .reduce_scatter = plan_reduce_scatter,
    .reduce_scatter_v = plan_reduce_scatter_v,
    .all_to_all = plan_all_to_all,
    .all_to_allv = plan_all_to_allv,
    .broadcast = plan_broadcast,
    .send = plan_send,
    .recv = plan_recv,
    .barrier = plan_barrier,
    .test = plan_test,
    .split = plan_split,
    .free = plan_free,
    .abort = NULL,
};

ts_status ts_comm_plan_create(ts_dry_run *dr, const char *name, int rank, int size, ts_comm **out) {
    *out = NULL;
    if (!dr) return ts_error(TS_ERR_INVALID, "plan: a dry run's communicator needs its dry run");
    plan_ctx *c = malloc(sizeof *c);
    if (!c) return ts_error(TS_ERR_NOMEM, "plan: out of memory");
    *c = (plan_ctx){.dr = dr, .rank = rank, .size = size};
    return ts_comm_create(&comm_plan_ops, c, name, rank, size, NULL, 1e9, out);
}

ts_status ts_comm_plan_set_link(ts_comm *comm, const ts_plan_link *link) {
    if (!comm || comm->ops != &comm_plan_ops || !comm->ctx)
        return ts_error(TS_ERR_INVALID, "ts_comm_plan_set_link: not a dry run's communicator");
    plan_ctx *c = comm->ctx;
    c->has_link = link != NULL;
    if (link) c->link = *link;
    c->busy = (ts_plan_busy){0};
    return TS_OK;
}

ts_dry_run *ts_comm_plan_dry_run(const ts_comm *comm) {
    if (!comm || comm->ops != &comm_plan_ops || !comm->ctx) return NULL;
    return ((const plan_ctx *)comm->ctx)->dr;
}
