/*
 * comm_self.c — the size-1 "self" backend: the communicator of an axis with
 * one rank, and of a run without MPI. No transport: every operation is a copy
 * (or nothing) and completes in its start call.
 */
#include <string.h> /* memmove */

#include "tessera/comm.h"

static void self_copy(void *dst, const void *src, size_t bytes) {
    if (dst != src && bytes) memmove(dst, src, bytes);
}

static ts_status self_all_reduce(void *ctx, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, ts_reduce_op op, void **req) {
    (void)ctx, (void)op;
    self_copy(recv, send, count * ts_dtype_size(dtype));
    *req = NULL;
    return TS_OK;
}

static ts_status self_all_gather(void *ctx, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, void **req) {
    (void)ctx;
    self_copy(recv, send, count * ts_dtype_size(dtype));
    *req = NULL;
    return TS_OK;
}

static ts_status self_all_gatherv(void *ctx, const void *send, void *recv, const size_t *counts,
                                  const size_t *displs, ts_dtype dtype, void **req) {
    (void)ctx;
    size_t es = ts_dtype_size(dtype);
    self_copy((char *)recv + displs[0] * es, send, counts[0] * es);
    *req = NULL;
    return TS_OK;
}

static ts_status self_reduce_scatter(void *ctx, const void *send, void *recv, size_t count,
                                     ts_dtype dtype, ts_reduce_op op, void **req) {
    return self_all_reduce(ctx, send, recv, count, dtype, op, req);
}

static ts_status self_reduce_scatter_v(void *ctx, const void *send, void *recv,
                                       const size_t *counts, ts_dtype dtype, ts_reduce_op op,
                                       void **req) {
    return self_all_reduce(ctx, send, recv, counts[0], dtype, op, req);
}

static ts_status self_all_to_allv(void *ctx, const void *send, const size_t *send_counts,
                                  const size_t *send_displs, void *recv, const size_t *recv_counts,
                                  const size_t *recv_displs, ts_dtype dtype, void **req) {
    (void)ctx;
    size_t es = ts_dtype_size(dtype);
    if (send_counts[0] != recv_counts[0])
        return ts_error(TS_ERR_INVALID,
                        "all_to_allv on a self communicator: send count %zu != recv count %zu",
                        send_counts[0], recv_counts[0]);
    self_copy((char *)recv + recv_displs[0] * es, (const char *)send + send_displs[0] * es,
              send_counts[0] * es);
    *req = NULL;
    return TS_OK;
}

static ts_status self_broadcast(void *ctx, void *buf, size_t count, ts_dtype dtype, int root,
                                void **req) {
    (void)ctx, (void)buf, (void)count, (void)dtype, (void)root;
    *req = NULL;
    return TS_OK;
}

/* Unreachable: the core rejects every peer of a size-1 communicator. */
static ts_status self_send(void *ctx, const void *buf, size_t count, ts_dtype dtype, int peer,
                           int tag, void **req) {
    (void)ctx, (void)buf, (void)count, (void)dtype, (void)tag, (void)req;
    return ts_error(TS_ERR_INVALID, "send on a self communicator: there is no peer %d", peer);
}

static ts_status self_recv(void *ctx, void *buf, size_t count, ts_dtype dtype, int peer, int tag,
                           void **req) {
    (void)ctx, (void)buf, (void)count, (void)dtype, (void)tag, (void)req;
    return ts_error(TS_ERR_INVALID, "recv on a self communicator: there is no peer %d", peer);
}

static ts_status self_barrier(void *ctx, void **req) {
    (void)ctx;
    *req = NULL;
    return TS_OK;
}

static ts_status self_test(void *ctx, void *req, int *done) {
    (void)ctx, (void)req;
    *done = 1;
    return TS_OK;
}

static ts_status self_split(void *ctx, int color, int key, const int *members, int new_size,
                            int new_rank, void **new_ctx) {
    (void)ctx, (void)color, (void)key, (void)members, (void)new_size, (void)new_rank;
    *new_ctx = NULL;
    return TS_OK;
}

static void self_free(void *ctx) {
    (void)ctx;
}

static ts_status self_all_to_all(void *ctx, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, void **req) {
    return self_all_gather(ctx, send, recv, count, dtype, req);
}

static const ts_comm_ops comm_self_ops = {
    .version = TS_COMM_OPS_VERSION,
    .name = "self",
    .all_reduce = self_all_reduce,
    .all_gather = self_all_gather,
    .all_gatherv = self_all_gatherv,
    .reduce_scatter = self_reduce_scatter,
    .reduce_scatter_v = self_reduce_scatter_v,
    .all_to_all = self_all_to_all,
    .all_to_allv = self_all_to_allv,
    .broadcast = self_broadcast,
    .send = self_send,
    .recv = self_recv,
    .barrier = self_barrier,
    .test = self_test,
    .split = self_split,
    .free = self_free,
    .abort = NULL,
};

ts_status ts_comm_self_create(const char *name, double timeout_s, ts_comm **out) {
    return ts_comm_create(&comm_self_ops, NULL, name, 0, 1, NULL, timeout_s, out);
}
