/*
 * comm.c — the backend-independent half of the communicator: creation,
 * argument checks, dispatch of every operation through the ops table (each
 * `_start` checks, makes the request, calls the backend and charges the
 * counters; each blocking form is start + wait), split, per-op counters and
 * their JSON form, nccl-tests bandwidth arithmetic.
 *
 * It knows no transport: MPI lives in comm_mpi.c, NCCL in the CUDA backend,
 * one rank in comm_self.c; requests and waits are comm_request.c's.
 */
#include "comm_impl.h"
#include "comm_plan.h" /* ts_comm_counter_recompute */

#include <stdio.h>  /* snprintf, fflush */
#include <stdlib.h> /* calloc, free, qsort, _Exit */
#include <string.h> /* memcpy, memset, strlen */

/* ---------------------------------------------------------------------------
 * Names, clocks
 * ------------------------------------------------------------------------- */

_Thread_local int comm_wall_clock = 1;

void ts_comm_plan_untimed(void) {
    comm_wall_clock = 0;
}

static const char *comm_op_names[TS_COMM_NOPS] = {"all_reduce", "all_gather", "reduce_scatter",
                                                  "all_to_all", "broadcast",  "send",
                                                  "recv",       "barrier"};

const char *ts_comm_op_name(ts_comm_op op) {
    if ((int)op < 0 || op >= TS_COMM_NOPS) return "?";
    return comm_op_names[op];
}

const char *ts_reduce_op_name(ts_reduce_op op) {
    switch (op) {
    case TS_REDUCE_SUM: return "sum";
    case TS_REDUCE_MAX: return "max";
    case TS_REDUCE_MIN: return "min";
    }
    return "?";
}

/* ---------------------------------------------------------------------------
 * Creation, properties, abort
 * ------------------------------------------------------------------------- */

static ts_status comm_check_name(const char *name) {
    if (!name || !name[0])
        return ts_error(TS_ERR_INVALID, "communicator: an axis name is required");
    size_t n = strlen(name);
    if (n >= TS_COMM_NAME_MAX)
        return ts_error(TS_ERR_INVALID, "communicator: axis name '%s' is longer than %d characters",
                        name, TS_COMM_NAME_MAX - 1);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || c == '.';
        if (!ok)
            return ts_error(
                TS_ERR_INVALID,
                "communicator: axis name '%s' may hold only letters, digits, '_', '-', '.'", name);
    }
    return TS_OK;
}

ts_status ts_comm_create(const ts_comm_ops *ops, void *ctx, const char *name, int rank, int size,
                         const int *world_ranks, double timeout_s, ts_comm **out) {
    ts_status st = TS_OK;
    if (!out) return ts_error(TS_ERR_INVALID, "ts_comm_create: out is NULL");
    *out = NULL;
    if (!ops || ops->version != TS_COMM_OPS_VERSION) {
        st = ts_error(TS_ERR_INVALID, "ts_comm_create: backend ops version %d, the core expects %d",
                      ops ? ops->version : -1, TS_COMM_OPS_VERSION);
        goto fail;
    }
    if (!ops->all_reduce || !ops->all_gather || !ops->all_gatherv || !ops->reduce_scatter ||
        !ops->reduce_scatter_v || !ops->all_to_all || !ops->all_to_allv || !ops->broadcast ||
        !ops->send || !ops->recv || !ops->test || !ops->split || !ops->free) {
        st = ts_error(TS_ERR_INVALID, "ts_comm_create: backend '%s' leaves a required slot empty",
                      ops->name ? ops->name : "?");
        goto fail;
    }
    if ((st = comm_check_name(name))) goto fail;
    if (size < 1 || rank < 0 || rank >= size) {
        st = ts_error(TS_ERR_INVALID, "ts_comm_create: rank %d of size %d is out of range", rank,
                      size);
        goto fail;
    }
    ts_comm *c = calloc(1, sizeof *c);
    int *wr = malloc((size_t)size * sizeof *wr);
    if (!c || !wr) {
        free(c);
        free(wr);
        st = ts_error(TS_ERR_NOMEM, "ts_comm_create: out of memory");
        goto fail;
    }
    for (int i = 0; i < size; i++)
        wr[i] = world_ranks ? world_ranks[i] : i;
    c->ops = ops;
    c->ctx = ctx;
    snprintf(c->name, sizeof c->name, "%s", name);
    c->rank = rank;
    c->size = size;
    c->world_ranks = wr;
    c->timeout_s = timeout_s;
    c->abort_on_timeout = 1;
    *out = c;
    return TS_OK;
fail:
    if (ops && ops->free) ops->free(ctx);
    return st;
}

void ts_comm_free(ts_comm *comm) {
    if (!comm) return;
    comm->ops->free(comm->ctx);
    free(comm->world_ranks);
    free(comm);
}

const char *ts_comm_name(const ts_comm *comm) {
    return comm ? comm->name : "?";
}
int ts_comm_rank(const ts_comm *comm) {
    return comm ? comm->rank : -1;
}
int ts_comm_size(const ts_comm *comm) {
    return comm ? comm->size : 0;
}
const char *ts_comm_backend(const ts_comm *comm) {
    return comm ? comm->ops->name : "?";
}
void *ts_comm_backend_ctx(const ts_comm *comm) {
    return comm ? comm->ctx : NULL;
}
double ts_comm_timeout(const ts_comm *comm) {
    return comm ? comm->timeout_s : 0.0;
}
void ts_comm_set_timeout(ts_comm *comm, double timeout_s) {
    if (comm) comm->timeout_s = timeout_s;
}
void ts_comm_set_abort_on_timeout(ts_comm *comm, int abort_on_timeout) {
    if (comm) comm->abort_on_timeout = abort_on_timeout != 0;
}

int ts_comm_world_rank(const ts_comm *comm, int rank) {
    if (!comm || rank < 0 || rank >= comm->size) return -1;
    return comm->world_ranks[rank];
}

void ts_comm_abort(ts_comm *comm, int code) {
    fflush(stdout);
    fflush(stderr);
    if (comm && comm->ops->abort) comm->ops->abort(comm->ctx, code);
    _Exit(code ? code : 1);
}

/* ---------------------------------------------------------------------------
 * Argument checks
 * ------------------------------------------------------------------------- */

static ts_status comm_check_dtype(const ts_comm *comm, const char *opname, ts_dtype dtype) {
    if (ts_dtype_size(dtype) == 0)
        return ts_error(TS_ERR_INVALID, "%s on axis '%s': unknown dtype %d", opname, comm->name,
                        (int)dtype);
    return TS_OK;
}

static ts_status comm_check_reduce(const ts_comm *comm, const char *opname, ts_dtype dtype,
                                   ts_reduce_op op) {
    if (dtype != TS_F32 && dtype != TS_BF16 && dtype != TS_I32)
        return ts_error(TS_ERR_INVALID,
                        "%s on axis '%s': reductions support f32, bf16 and i32, not %s", opname,
                        comm->name, ts_dtype_name(dtype));
    if (op != TS_REDUCE_SUM && op != TS_REDUCE_MAX && op != TS_REDUCE_MIN)
        return ts_error(TS_ERR_INVALID, "%s on axis '%s': unknown reduction %d", opname, comm->name,
                        (int)op);
    return TS_OK;
}

static ts_status comm_check_buf(const ts_comm *comm, const char *opname, const char *what,
                                const void *buf, size_t count) {
    if (count > 0 && !buf)
        return ts_error(TS_ERR_INVALID, "%s on axis '%s': %s is NULL with count %zu", opname,
                        comm->name, what, count);
    return TS_OK;
}

static ts_status comm_check_start(const ts_comm *comm, const char *opname, ts_comm_request **req) {
    TS_TRY(comm_usable(comm, opname));
    if (!req) return ts_error(TS_ERR_INVALID, "%s on axis '%s': req is NULL", opname, comm->name);
    *req = NULL;
    return TS_OK;
}

static ts_status comm_check_counts(const ts_comm *comm, const char *opname, const char *what,
                                   const size_t *counts, size_t *total) {
    if (!counts)
        return ts_error(TS_ERR_INVALID, "%s on axis '%s': %s is NULL", opname, comm->name, what);
    *total = 0;
    for (int i = 0; i < comm->size; i++)
        *total += counts[i];
    return TS_OK;
}

/* Fills displs with the given displacements, or the packed prefix sums. */
static void comm_displs(int n, const size_t *counts, const size_t *given, size_t *displs) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        displs[i] = given ? given[i] : off;
        off += counts[i];
    }
}

/* ---------------------------------------------------------------------------
 * Operations. Each `_start` checks, makes the request, dispatches to the
 * backend and charges the counters; each blocking form is start + wait.
 * ------------------------------------------------------------------------- */

ts_status ts_comm_all_reduce_start(ts_comm *comm, const void *send, void *recv, size_t count,
                                   ts_dtype dtype, ts_reduce_op op, ts_comm_request **req) {
    static const char *opname = "all_reduce";
    TS_TRY(comm_check_start(comm, opname, req));
    TS_TRY(comm_check_reduce(comm, opname, dtype, op));
    TS_TRY(comm_check_buf(comm, opname, "send", send, count));
    TS_TRY(comm_check_buf(comm, opname, "recv", recv, count));
    uint64_t bytes = (uint64_t)count * ts_dtype_size(dtype);
    ts_comm_request *r;
    TS_TRY(comm_request_new(comm, TS_COMM_ALL_REDUCE, opname, count, dtype, -1, bytes, &r));
    double t0 = comm_now();
    ts_status st = comm->ops->all_reduce(comm->ctx, send, recv, count, dtype, op, &r->breq);
    return comm_request_started(r, st, t0, bytes, req);
}

ts_status ts_comm_all_gather_start(ts_comm *comm, const void *send, void *recv, size_t count,
                                   ts_dtype dtype, ts_comm_request **req) {
    static const char *opname = "all_gather";
    TS_TRY(comm_check_start(comm, opname, req));
    TS_TRY(comm_check_dtype(comm, opname, dtype));
    TS_TRY(comm_check_buf(comm, opname, "send", send, count));
    TS_TRY(comm_check_buf(comm, opname, "recv", recv, count));
    uint64_t bytes = (uint64_t)comm->size * count * ts_dtype_size(dtype);
    ts_comm_request *r;
    TS_TRY(comm_request_new(comm, TS_COMM_ALL_GATHER, opname, count, dtype, -1, bytes, &r));
    double t0 = comm_now();
    ts_status st = comm->ops->all_gather(comm->ctx, send, recv, count, dtype, &r->breq);
    return comm_request_started(r, st, t0, bytes, req);
}

ts_status ts_comm_all_gatherv_start(ts_comm *comm, const void *send, void *recv,
                                    const size_t *counts, ts_dtype dtype, ts_comm_request **req) {
    static const char *opname = "all_gatherv";
    size_t total = 0;
    TS_TRY(comm_check_start(comm, opname, req));
    TS_TRY(comm_check_dtype(comm, opname, dtype));
    TS_TRY(comm_check_counts(comm, opname, "counts", counts, &total));
    TS_TRY(comm_check_buf(comm, opname, "send", send, counts[comm->rank]));
    TS_TRY(comm_check_buf(comm, opname, "recv", recv, total));
    size_t *displs = malloc((size_t)comm->size * sizeof *displs);
    if (!displs)
        return ts_error(TS_ERR_NOMEM, "%s on axis '%s': out of memory", opname, comm->name);
    comm_displs(comm->size, counts, NULL, displs);
    uint64_t bytes = (uint64_t)total * ts_dtype_size(dtype);
    ts_comm_request *r;
    ts_status st = comm_request_new(comm, TS_COMM_ALL_GATHER, opname, total, dtype, -1, bytes, &r);
    if (st) {
        free(displs);
        return st;
    }
    double t0 = comm_now();
    st = comm->ops->all_gatherv(comm->ctx, send, recv, counts, displs, dtype, &r->breq);
    free(displs);
    return comm_request_started(r, st, t0, bytes, req);
}

ts_status ts_comm_reduce_scatter_start(ts_comm *comm, const void *send, void *recv, size_t count,
                                       ts_dtype dtype, ts_reduce_op op, ts_comm_request **req) {
    static const char *opname = "reduce_scatter";
    TS_TRY(comm_check_start(comm, opname, req));
    TS_TRY(comm_check_reduce(comm, opname, dtype, op));
    TS_TRY(comm_check_buf(comm, opname, "send", send, count));
    TS_TRY(comm_check_buf(comm, opname, "recv", recv, count));
    uint64_t bytes = (uint64_t)comm->size * count * ts_dtype_size(dtype);
    ts_comm_request *r;
    TS_TRY(comm_request_new(comm, TS_COMM_REDUCE_SCATTER, opname, count, dtype, -1, bytes, &r));
    double t0 = comm_now();
    ts_status st = comm->ops->reduce_scatter(comm->ctx, send, recv, count, dtype, op, &r->breq);
    return comm_request_started(r, st, t0, bytes, req);
}

ts_status ts_comm_reduce_scatter_v_start(ts_comm *comm, const void *send, void *recv,
                                         const size_t *counts, ts_dtype dtype, ts_reduce_op op,
                                         ts_comm_request **req) {
    static const char *opname = "reduce_scatter_v";
    size_t total = 0;
    TS_TRY(comm_check_start(comm, opname, req));
    TS_TRY(comm_check_reduce(comm, opname, dtype, op));
    TS_TRY(comm_check_counts(comm, opname, "counts", counts, &total));
    TS_TRY(comm_check_buf(comm, opname, "send", send, total));
    TS_TRY(comm_check_buf(comm, opname, "recv", recv, counts[comm->rank]));
    uint64_t bytes = (uint64_t)total * ts_dtype_size(dtype);
    ts_comm_request *r;
    TS_TRY(comm_request_new(comm, TS_COMM_REDUCE_SCATTER, opname, total, dtype, -1, bytes, &r));
    double t0 = comm_now();
    ts_status st = comm->ops->reduce_scatter_v(comm->ctx, send, recv, counts, dtype, op, &r->breq);
    return comm_request_started(r, st, t0, bytes, req);
}

ts_status ts_comm_all_to_all_start(ts_comm *comm, const void *send, void *recv, size_t count,
                                   ts_dtype dtype, ts_comm_request **req) {
    static const char *opname = "all_to_all";
    TS_TRY(comm_check_start(comm, opname, req));
    TS_TRY(comm_check_dtype(comm, opname, dtype));
    TS_TRY(comm_check_buf(comm, opname, "send", send, count));
    TS_TRY(comm_check_buf(comm, opname, "recv", recv, count));
    uint64_t bytes = (uint64_t)comm->size * count * ts_dtype_size(dtype);
    ts_comm_request *r;
    TS_TRY(comm_request_new(comm, TS_COMM_ALL_TO_ALL, opname, count, dtype, -1, bytes, &r));
    double t0 = comm_now();
    ts_status st = comm->ops->all_to_all(comm->ctx, send, recv, count, dtype, &r->breq);
    return comm_request_started(r, st, t0, bytes, req);
}

ts_status ts_comm_all_to_allv_start(ts_comm *comm, const void *send, const size_t *send_counts,
                                    const size_t *send_displs, void *recv,
                                    const size_t *recv_counts, const size_t *recv_displs,
                                    ts_dtype dtype, ts_comm_request **req) {
    static const char *opname = "all_to_allv";
    size_t stotal = 0, rtotal = 0;
    TS_TRY(comm_check_start(comm, opname, req));
    TS_TRY(comm_check_dtype(comm, opname, dtype));
    TS_TRY(comm_check_counts(comm, opname, "send_counts", send_counts, &stotal));
    TS_TRY(comm_check_counts(comm, opname, "recv_counts", recv_counts, &rtotal));
    TS_TRY(comm_check_buf(comm, opname, "send", send, stotal));
    TS_TRY(comm_check_buf(comm, opname, "recv", recv, rtotal));
    size_t n = (size_t)comm->size;
    size_t *displs = malloc(2 * n * sizeof *displs);
    if (!displs)
        return ts_error(TS_ERR_NOMEM, "%s on axis '%s': out of memory", opname, comm->name);
    comm_displs(comm->size, send_counts, send_displs, displs);
    comm_displs(comm->size, recv_counts, recv_displs, displs + n);
    uint64_t bytes = (uint64_t)stotal * ts_dtype_size(dtype);
    ts_comm_request *r;
    ts_status st = comm_request_new(comm, TS_COMM_ALL_TO_ALL, opname, stotal, dtype, -1, bytes, &r);
    if (st) {
        free(displs);
        return st;
    }
    double t0 = comm_now();
    st = comm->ops->all_to_allv(comm->ctx, send, send_counts, displs, recv, recv_counts, displs + n,
                                dtype, &r->breq);
    free(displs);
    return comm_request_started(r, st, t0, bytes, req);
}

ts_status ts_comm_broadcast_start(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int root,
                                  ts_comm_request **req) {
    static const char *opname = "broadcast";
    TS_TRY(comm_check_start(comm, opname, req));
    TS_TRY(comm_check_dtype(comm, opname, dtype));
    TS_TRY(comm_check_buf(comm, opname, "buf", buf, count));
    if (root < 0 || root >= comm->size)
        return ts_error(TS_ERR_INVALID, "%s on axis '%s': root %d is not a rank of size %d", opname,
                        comm->name, root, comm->size);
    uint64_t bytes = (uint64_t)count * ts_dtype_size(dtype);
    ts_comm_request *r;
    TS_TRY(comm_request_new(comm, TS_COMM_BROADCAST, opname, count, dtype, -1, bytes, &r));
    double t0 = comm_now();
    ts_status st = comm->ops->broadcast(comm->ctx, buf, count, dtype, root, &r->breq);
    return comm_request_started(r, st, t0, bytes, req);
}

static ts_status comm_check_p2p(const ts_comm *comm, const char *opname, int peer, int tag) {
    if (peer < 0 || peer >= comm->size || peer == comm->rank)
        return ts_error(TS_ERR_INVALID, "%s on axis '%s': peer %d is not another rank of size %d",
                        opname, comm->name, peer, comm->size);
    if (tag < 0 || tag > 32767)
        return ts_error(TS_ERR_INVALID, "%s on axis '%s': tag %d is outside 0..32767", opname,
                        comm->name, tag);
    return TS_OK;
}

ts_status ts_comm_send_start(ts_comm *comm, const void *buf, size_t count, ts_dtype dtype, int peer,
                             int tag, ts_comm_request **req) {
    static const char *opname = "send";
    TS_TRY(comm_check_start(comm, opname, req));
    TS_TRY(comm_check_dtype(comm, opname, dtype));
    TS_TRY(comm_check_buf(comm, opname, "buf", buf, count));
    TS_TRY(comm_check_p2p(comm, opname, peer, tag));
    uint64_t bytes = (uint64_t)count * ts_dtype_size(dtype);
    ts_comm_request *r;
    TS_TRY(comm_request_new(comm, TS_COMM_SEND, opname, count, dtype, peer, bytes, &r));
    double t0 = comm_now();
    ts_status st = comm->ops->send(comm->ctx, buf, count, dtype, peer, tag, &r->breq);
    return comm_request_started(r, st, t0, bytes, req);
}

ts_status ts_comm_recv_start(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int peer,
                             int tag, ts_comm_request **req) {
    static const char *opname = "recv";
    TS_TRY(comm_check_start(comm, opname, req));
    TS_TRY(comm_check_dtype(comm, opname, dtype));
    TS_TRY(comm_check_buf(comm, opname, "buf", buf, count));
    TS_TRY(comm_check_p2p(comm, opname, peer, tag));
    uint64_t bytes = (uint64_t)count * ts_dtype_size(dtype);
    ts_comm_request *r;
    TS_TRY(comm_request_new(comm, TS_COMM_RECV, opname, count, dtype, peer, bytes, &r));
    double t0 = comm_now();
    ts_status st = comm->ops->recv(comm->ctx, buf, count, dtype, peer, tag, &r->breq);
    return comm_request_started(r, st, t0, bytes, req);
}

ts_status ts_comm_barrier_start(ts_comm *comm, ts_comm_request **req) {
    static const char *opname = "barrier";
    TS_TRY(comm_check_start(comm, opname, req));
    ts_comm_request *r;
    TS_TRY(comm_request_new(comm, TS_COMM_BARRIER, opname, 0, TS_I32, -1, 0, &r));
    double t0 = comm_now();
    ts_status st;
    if (comm->ops->barrier)
        st = comm->ops->barrier(comm->ctx, &r->breq);
    else
        st = comm->ops->all_reduce(comm->ctx, &r->scratch, &r->scratch, 1, TS_I32, TS_REDUCE_SUM,
                                   &r->breq);
    return comm_request_started(r, st, t0, 0, req);
}

/* The blocking forms. */

ts_status ts_comm_all_reduce(ts_comm *comm, const void *send, void *recv, size_t count,
                             ts_dtype dtype, ts_reduce_op op) {
    ts_comm_request *r;
    TS_TRY(ts_comm_all_reduce_start(comm, send, recv, count, dtype, op, &r));
    return ts_comm_wait(r);
}

ts_status ts_comm_all_gather(ts_comm *comm, const void *send, void *recv, size_t count,
                             ts_dtype dtype) {
    ts_comm_request *r;
    TS_TRY(ts_comm_all_gather_start(comm, send, recv, count, dtype, &r));
    return ts_comm_wait(r);
}

ts_status ts_comm_all_gatherv(ts_comm *comm, const void *send, void *recv, const size_t *counts,
                              ts_dtype dtype) {
    ts_comm_request *r;
    TS_TRY(ts_comm_all_gatherv_start(comm, send, recv, counts, dtype, &r));
    return ts_comm_wait(r);
}

ts_status ts_comm_reduce_scatter(ts_comm *comm, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, ts_reduce_op op) {
    ts_comm_request *r;
    TS_TRY(ts_comm_reduce_scatter_start(comm, send, recv, count, dtype, op, &r));
    return ts_comm_wait(r);
}

ts_status ts_comm_reduce_scatter_v(ts_comm *comm, const void *send, void *recv,
                                   const size_t *counts, ts_dtype dtype, ts_reduce_op op) {
    ts_comm_request *r;
    TS_TRY(ts_comm_reduce_scatter_v_start(comm, send, recv, counts, dtype, op, &r));
    return ts_comm_wait(r);
}

ts_status ts_comm_all_to_all(ts_comm *comm, const void *send, void *recv, size_t count,
                             ts_dtype dtype) {
    ts_comm_request *r;
    TS_TRY(ts_comm_all_to_all_start(comm, send, recv, count, dtype, &r));
    return ts_comm_wait(r);
}

ts_status ts_comm_all_to_allv(ts_comm *comm, const void *send, const size_t *send_counts,
                              const size_t *send_displs, void *recv, const size_t *recv_counts,
                              const size_t *recv_displs, ts_dtype dtype) {
    ts_comm_request *r;
    TS_TRY(ts_comm_all_to_allv_start(comm, send, send_counts, send_displs, recv, recv_counts,
                                     recv_displs, dtype, &r));
    return ts_comm_wait(r);
}

ts_status ts_comm_broadcast(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int root) {
    ts_comm_request *r;
    TS_TRY(ts_comm_broadcast_start(comm, buf, count, dtype, root, &r));
    return ts_comm_wait(r);
}

ts_status ts_comm_send(ts_comm *comm, const void *buf, size_t count, ts_dtype dtype, int peer,
                       int tag) {
    ts_comm_request *r;
    TS_TRY(ts_comm_send_start(comm, buf, count, dtype, peer, tag, &r));
    return ts_comm_wait(r);
}

ts_status ts_comm_recv(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int peer, int tag) {
    ts_comm_request *r;
    TS_TRY(ts_comm_recv_start(comm, buf, count, dtype, peer, tag, &r));
    return ts_comm_wait(r);
}

ts_status ts_comm_barrier(ts_comm *comm) {
    ts_comm_request *r;
    TS_TRY(ts_comm_barrier_start(comm, &r));
    return ts_comm_wait(r);
}

/* ---------------------------------------------------------------------------
 * Split
 * ------------------------------------------------------------------------- */

typedef struct comm_member {
    int key, parent_rank;
} comm_member;

static int comm_member_cmp(const void *a, const void *b) {
    const comm_member *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->parent_rank > y->parent_rank) - (x->parent_rank < y->parent_rank);
}

ts_status ts_comm_split(ts_comm *parent, int color, int key, const char *name, ts_comm **out) {
    static const char *opname = "split";
    TS_TRY(comm_usable(parent, opname));
    if (!out) return ts_error(TS_ERR_INVALID, "split on axis '%s': out is NULL", parent->name);
    *out = NULL;
    TS_TRY(comm_check_name(name));
    if (color < 0) color = -1;

    /* Every rank learns every (color, key) with one timed all_gather. */
    int n = parent->size;
    int32_t mine[2] = {color, key};
    int32_t *pairs = malloc(2 * (size_t)n * sizeof *pairs);
    comm_member *members = malloc((size_t)n * sizeof *members);
    int *ranks = malloc(2 * (size_t)n * sizeof *ranks);
    ts_status st = TS_OK;
    if (!pairs || !members || !ranks) {
        st = ts_error(TS_ERR_NOMEM, "split on axis '%s': out of memory", parent->name);
        goto done;
    }
    ts_comm_request *r;
    if ((st = comm_request_new(parent, COMM_KIND_SPLIT, opname, 2, TS_I32, -1, 0, &r))) goto done;
    double t0 = comm_now();
    st = parent->ops->all_gather(parent->ctx, mine, pairs, 2, TS_I32, &r->breq);
    if ((st = comm_request_started(r, st, t0, 0, &r))) goto done;
    if ((st = ts_comm_wait(r))) goto done;

    int new_size = 0, new_rank = -1;
    if (color >= 0) {
        for (int i = 0; i < n; i++)
            if (pairs[2 * i] == color) members[new_size++] = (comm_member){pairs[2 * i + 1], i};
        qsort(members, (size_t)new_size, sizeof *members, comm_member_cmp);
        for (int i = 0; i < new_size; i++) {
            ranks[i] = members[i].parent_rank;
            ranks[n + i] = parent->world_ranks[members[i].parent_rank];
            if (members[i].parent_rank == parent->rank) new_rank = i;
        }
        TS_ASSERT(new_rank >= 0);
    }
    void *ctx = NULL;
    st = parent->ops->split(parent->ctx, color, key, color >= 0 ? ranks : NULL, new_size, new_rank,
                            &ctx);
    if (st || color < 0) goto done;
    st = ts_comm_create(parent->ops, ctx, name, new_rank, new_size, ranks + n, parent->timeout_s,
                        out);
    if (!st) (*out)->abort_on_timeout = parent->abort_on_timeout;
done:
    free(pairs);
    free(members);
    free(ranks);
    return st;
}

/* ---------------------------------------------------------------------------
 * Counters and bandwidth
 * ------------------------------------------------------------------------- */

ts_comm_op_counter ts_comm_counter(const ts_comm *comm, ts_comm_op op) {
    ts_comm_op_counter zero = {0, 0, 0.0};
    if (!comm || (int)op < 0 || op >= TS_COMM_NOPS) return zero;
    return comm->counters[op];
}

void ts_comm_counters_reset(ts_comm *comm) {
    if (!comm) return;
    memset(comm->counters, 0, sizeof comm->counters);
    memset(comm->recomputed, 0, sizeof comm->recomputed);
}

ts_comm_op_counter ts_comm_counter_recompute(const ts_comm *comm, ts_comm_op op) {
    ts_comm_op_counter zero = {0, 0, 0.0};
    if (!comm || (int)op < 0 || op >= TS_COMM_NOPS) return zero;
    return comm->recomputed[op];
}

ts_status ts_comm_counters_json(const ts_comm *comm, char *buf, size_t cap, size_t *len) {
    if (!comm || (!buf && cap))
        return ts_error(TS_ERR_INVALID, "ts_comm_counters_json: comm or buf is NULL");
    size_t n = 0;
    int first = 1;
#define COMM_JSON_PUT(...)                                                                         \
    do {                                                                                           \
        int k_ = snprintf(n < cap ? buf + n : NULL, n < cap ? cap - n : 0, __VA_ARGS__);           \
        if (k_ > 0) n += (size_t)k_;                                                               \
    } while (0)
    COMM_JSON_PUT("\"%s\":{", comm->name);
    for (int op = 0; op < TS_COMM_NOPS; op++) {
        const ts_comm_op_counter *c = &comm->counters[op];
        if (!c->calls) continue;
        COMM_JSON_PUT("%s\"%s\":{\"calls\":%llu,\"bytes\":%llu,\"seconds\":%.9g}", first ? "" : ",",
                      ts_comm_op_name((ts_comm_op)op), (unsigned long long)c->calls,
                      (unsigned long long)c->bytes, c->seconds);
        first = 0;
    }
    COMM_JSON_PUT("}");
#undef COMM_JSON_PUT
    if (len) *len = n;
    if (n >= cap) {
        if (cap) buf[cap - 1] = '\0';
        return ts_error(TS_ERR_INVALID,
                        "ts_comm_counters_json: %zu bytes needed, the buffer holds %zu", n + 1,
                        cap);
    }
    return TS_OK;
}

double ts_comm_busbw_factor(ts_comm_op op, int n) {
    if (n < 1) return 0.0;
    double dn = (double)n;
    switch (op) {
    case TS_COMM_ALL_REDUCE: return 2.0 * (dn - 1.0) / dn;
    case TS_COMM_ALL_GATHER:
    case TS_COMM_REDUCE_SCATTER:
    case TS_COMM_ALL_TO_ALL: return (dn - 1.0) / dn;
    case TS_COMM_BROADCAST:
    case TS_COMM_SEND:
    case TS_COMM_RECV: return 1.0;
    default: return 0.0;
    }
}

void ts_comm_bandwidth(ts_comm_op op, int n, uint64_t bytes, double seconds, double *algbw,
                       double *busbw) {
    double alg = seconds > 0 ? (double)bytes / seconds : 0.0;
    if (algbw) *algbw = alg;
    if (busbw) *busbw = alg * ts_comm_busbw_factor(op, n);
}

void ts_comm_block_range(size_t total, int nparts, int part, size_t *offset, size_t *count) {
    size_t off = 0, cnt = 0;
    if (nparts > 0 && part >= 0 && part < nparts) {
        size_t np = (size_t)nparts, p = (size_t)part;
        size_t base = total / np, extra = total % np;
        cnt = base + (p < extra ? 1 : 0);
        off = p * base + (p < extra ? p : extra);
    }
    if (offset) *offset = off;
    if (count) *count = cnt;
}
