/*
 * comm_nccl.c — the NCCL backend of the communicator (device buffers), and
 * its bootstrap over an MPI communicator.
 *
 * Each NCCL communicator owns a communication stream. An operation records
 * an event on the compute stream (ts_device_stream) and makes the
 * communication stream wait on it, enqueues the NCCL call(s), then records a
 * request event on the communication stream; the core's polled wait calls
 * nccl_test, which asks cudaEventQuery (and ncclCommGetAsyncError), so the
 * core's timeout applies as it does for MPI. NCCL has no allgatherv,
 * reduce_scatterv or alltoall(v): they are grouped broadcasts, reduces and
 * sends/recvs. Sends and recvs are held back in an open NCCL group until
 * something needs them issued (a wait, a test, a collective, an explicit
 * group end or ts_comm_nccl_flush), so that two ranks exchanging with
 * `_start` forms never deadlock on their streams.
 *
 * Bootstrap: a private MPI duplicate ("twin") of the caller's communicator
 * carries the ncclUniqueId broadcast, the core's host-memory color exchange
 * in split, and the fallback split (a fresh unique id per group) when the
 * installed NCCL lacks ncclCommSplit (before 2.18).
 *
 * Part of the CUDA backend (tessera-backend-cuda.so, built by
 * cmake/gpu.cmake when NCCL is found), never of libtessera: the core's
 * ts_comm_nccl_* (core/backend/backend_load.c) forward to the functions at
 * the end of this file through the backend's descriptor, and the ts_comm
 * calls made here reach the core through the host table (backend_host.c).
 *
 * What it does not do: counters, timeouts, argument checks (the core's,
 * comm.c); device selection and the compute stream (device_cuda.c); tags
 * and recv count checks (NCCL has neither).
 */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, free */
#include <string.h> /* memcpy, strcmp */

#include "tessera/comm.h"   /* the ops table this file fills */
#include "tessera/device.h" /* the API: constructor, groups; device, stream, allocator */

#include <cuda_runtime_api.h> /* streams, events, cudaMemcpyAsync */
#include <mpi.h>              /* MPI_Abort: a timeout ends the whole job */
#include <nccl.h>             /* NCCL 2.x; ncclCommSplit from 2.18 */

#define NCCL_HAVE_SPLIT (NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0))

typedef struct nccl_ctx nccl_ctx;

/* A started operation: an event recorded after it on the comm stream. */
typedef struct nccl_req {
    nccl_ctx *ctx;
    cudaEvent_t done;
    int issued;            /* its event is recorded (the NCCL group ended) */
    int orphan;            /* the core let go of it before it was issued */
    char err[256];         /* a failure found when its group ended */
    struct nccl_req *next; /* the ctx's idle list, or the held-back list */
} nccl_req;

struct nccl_ctx {
    ncclComm_t comm;
    ts_comm *twin; /* private MPI duplicate over the same ranks (owned) */
    int rank, size;
    cudaStream_t stream; /* the communication stream (owned) */
    cudaEvent_t ready;   /* recorded on the compute stream before each op */
    int32_t *scratch;    /* one device element, reduced by barrier */
    nccl_req *idle;      /* completed requests kept for reuse */
    int live;            /* requests handed to the core, not yet released */
    int failed;          /* an error was seen: abort rather than destroy */
};

/* The process's open NCCL group: `depth` explicit levels (0: an implicit
 * group holding back sends and recvs), and the requests to issue at its end. */
static struct {
    int open, depth;
    nccl_req *held, **tail;
} nccl_group = {0, 0, NULL, &nccl_group.held};

/* ---------------------------------------------------------------------------
 * Errors, types
 * ------------------------------------------------------------------------- */

static ts_status nccl_fail(const nccl_ctx *ctx, ncclResult_t res, const char *what) {
    const char *last = ctx && ctx->comm ? ncclGetLastError(ctx->comm) : ncclGetLastError(NULL);
    return ts_error(TS_ERR_COMM, "NCCL %s failed: %s%s%s", what, ncclGetErrorString(res),
                    last && *last ? ": " : "", last ? last : "");
}

static ts_status nccl_cuda_fail(cudaError_t e, const char *what) {
    return ts_error(TS_ERR_COMM, "nccl backend: %s failed on device %d: %s", what,
                    ts_device_current(), cudaGetErrorString(e));
}

/* Reductions use the element type; everything else moves bytes. */
static ncclDataType_t nccl_type(ts_dtype dtype) {
    switch (dtype) {
    case TS_F32: return ncclFloat32;
    case TS_BF16: return ncclBfloat16;
    case TS_F16: return ncclFloat16;
    case TS_I32: return ncclInt32;
    case TS_U16: break;
    }
    return ncclUint8;
}

static ncclRedOp_t nccl_op(ts_reduce_op op) {
    switch (op) {
    case TS_REDUCE_SUM: return ncclSum;
    case TS_REDUCE_MAX: return ncclMax;
    case TS_REDUCE_MIN: return ncclMin;
    }
    return ncclSum;
}

static const char *nccl_at(const void *p, size_t elems, size_t es) {
    return (const char *)p + elems * es;
}

/* ---------------------------------------------------------------------------
 * Requests and the held-back group
 * ------------------------------------------------------------------------- */

static void nccl_req_release(nccl_req *r) {
    r->ctx->live--;
    r->next = r->ctx->idle;
    r->ctx->idle = r;
}

static void nccl_req_destroy(nccl_req *r) {
    if (r->done) cudaEventDestroy(r->done);
    free(r);
}

/* Ends the open NCCL group and records the events of what it held. */
static ts_status nccl_flush(void) {
    if (!nccl_group.open) return TS_OK;
    ncclResult_t res = ncclGroupEnd();
    nccl_group.open = 0;
    ts_status st = TS_OK;
    if (res != ncclSuccess) st = nccl_fail(NULL, res, "GroupEnd");
    for (nccl_req *r = nccl_group.held, *next; r; r = next) {
        next = r->next;
        r->next = NULL;
        r->issued = 1;
        cudaError_t e = cudaSuccess;
        if (res == ncclSuccess) e = cudaEventRecord(r->done, r->ctx->stream);
        if (res != ncclSuccess || e != cudaSuccess) {
            r->ctx->failed = 1;
            snprintf(r->err, sizeof r->err, "%s",
                     res != ncclSuccess ? ts_last_error() : cudaGetErrorString(e));
        }
        if (r->orphan) nccl_req_release(r);
    }
    nccl_group.held = NULL;
    nccl_group.tail = &nccl_group.held;
    return st;
}

/* Prepares an operation: issues held-back work a collective must not join,
 * orders the comm stream after the compute stream, opens a group for
 * sends and recvs. */
static ts_status nccl_begin(nccl_ctx *ctx, int p2p, const char *opname) {
    if (ctx->failed)
        return ts_error(TS_ERR_COMM, "%s: the NCCL communicator failed earlier", opname);
    if (!p2p && nccl_group.open && nccl_group.depth == 0) TS_TRY(nccl_flush());
    cudaError_t e = cudaEventRecord(ctx->ready, (cudaStream_t)ts_device_stream());
    if (e == cudaSuccess) e = cudaStreamWaitEvent(ctx->stream, ctx->ready, 0);
    if (e != cudaSuccess) return nccl_cuda_fail(e, "ordering after the compute stream");
    if (p2p && !nccl_group.open) {
        ncclResult_t res = ncclGroupStart();
        if (res != ncclSuccess) return nccl_fail(ctx, res, "GroupStart");
        nccl_group.open = 1;
    }
    return TS_OK;
}

/* Finishes an operation: its request, recorded now or when the open group
 * ends. `res` is the result of the enqueueing NCCL call(s). */
static ts_status nccl_end(nccl_ctx *ctx, ncclResult_t res, const char *what, void **out) {
    if (res != ncclSuccess) {
        /* A refused argument leaves the communicator usable; anything else not. */
        if (res != ncclInvalidArgument && res != ncclInvalidUsage) ctx->failed = 1;
        return nccl_fail(ctx, res, what);
    }
    nccl_req *r = ctx->idle;
    if (r) {
        ctx->idle = r->next;
    } else {
        r = calloc(1, sizeof *r);
        if (!r) return ts_error(TS_ERR_NOMEM, "%s: out of memory", what);
        cudaError_t e = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            free(r);
            return nccl_cuda_fail(e, "cudaEventCreate");
        }
    }
    r->ctx = ctx;
    r->next = NULL;
    r->orphan = 0;
    r->err[0] = '\0';
    if (nccl_group.open) {
        r->issued = 0;
        *nccl_group.tail = r;
        nccl_group.tail = &r->next;
    } else {
        r->issued = 1;
        cudaError_t e = cudaEventRecord(r->done, ctx->stream);
        if (e != cudaSuccess) {
            r->next = ctx->idle;
            ctx->idle = r;
            ctx->failed = 1;
            return nccl_cuda_fail(e, "cudaEventRecord");
        }
    }
    ctx->live++;
    *out = r;
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * Operations
 * ------------------------------------------------------------------------- */

static ts_status nccl_all_reduce(void *vctx, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, ts_reduce_op op, void **req) {
    nccl_ctx *ctx = vctx;
    TS_TRY(nccl_begin(ctx, 0, "all_reduce"));
    ncclResult_t res =
        ncclAllReduce(send, recv, count, nccl_type(dtype), nccl_op(op), ctx->comm, ctx->stream);
    return nccl_end(ctx, res, "AllReduce", req);
}

/* Host memory cannot go through NCCL: true for pointers CUDA does not know. */
static int nccl_is_host(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 1;
    }
    return a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
}

static ts_status nccl_all_gather(void *vctx, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, void **req) {
    nccl_ctx *ctx = vctx;
    /* The core's split exchanges colors in host memory: the twin carries it. */
    if (count > 0 && (nccl_is_host(send) || nccl_is_host(recv))) {
        *req = NULL;
        return ts_comm_all_gather(ctx->twin, send, recv, count, dtype);
    }
    TS_TRY(nccl_begin(ctx, 0, "all_gather"));
    size_t es = ts_dtype_size(dtype);
    ncclResult_t res = ncclAllGather(send, recv, count * es, ncclUint8, ctx->comm, ctx->stream);
    return nccl_end(ctx, res, "AllGather", req);
}

static ts_status nccl_all_gatherv(void *vctx, const void *send, void *recv, const size_t *counts,
                                  const size_t *displs, ts_dtype dtype, void **req) {
    nccl_ctx *ctx = vctx;
    TS_TRY(nccl_begin(ctx, 0, "all_gatherv"));
    size_t es = ts_dtype_size(dtype);
    ncclResult_t res = ncclGroupStart();
    for (int r = 0; r < ctx->size && res == ncclSuccess; r++) {
        if (!counts[r]) continue;
        void *dst = (char *)recv + displs[r] * es;
        res = ncclBroadcast(r == ctx->rank ? send : dst, dst, counts[r] * es, ncclUint8, r,
                            ctx->comm, ctx->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    return nccl_end(ctx, res != ncclSuccess ? res : end, "Broadcast (all_gatherv)", req);
}

static ts_status nccl_reduce_scatter(void *vctx, const void *send, void *recv, size_t count,
                                     ts_dtype dtype, ts_reduce_op op, void **req) {
    nccl_ctx *ctx = vctx;
    TS_TRY(nccl_begin(ctx, 0, "reduce_scatter"));
    ncclResult_t res =
        ncclReduceScatter(send, recv, count, nccl_type(dtype), nccl_op(op), ctx->comm, ctx->stream);
    return nccl_end(ctx, res, "ReduceScatter", req);
}

static ts_status nccl_reduce_scatter_v(void *vctx, const void *send, void *recv,
                                       const size_t *counts, ts_dtype dtype, ts_reduce_op op,
                                       void **req) {
    nccl_ctx *ctx = vctx;
    TS_TRY(nccl_begin(ctx, 0, "reduce_scatter_v"));
    size_t es = ts_dtype_size(dtype), off = 0;
    ncclResult_t res = ncclGroupStart();
    for (int r = 0; r < ctx->size && res == ncclSuccess; off += counts[r], r++) {
        if (!counts[r]) continue;
        const void *src = nccl_at(send, off, es);
        /* Only the root writes its recvbuff; the others pass a valid pointer. */
        void *dst = r == ctx->rank ? recv : (recv ? recv : (void *)src);
        res = ncclReduce(src, dst, counts[r], nccl_type(dtype), nccl_op(op), r, ctx->comm,
                         ctx->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    return nccl_end(ctx, res != ncclSuccess ? res : end, "Reduce (reduce_scatter_v)", req);
}

/* The exchange under all_to_all(v): one grouped send and recv per peer, and
 * a device copy for this rank's own block. Displacements in elements. */
static ts_status nccl_exchange(nccl_ctx *ctx, const void *send, const size_t *send_counts,
                               const size_t *send_displs, void *recv, const size_t *recv_counts,
                               const size_t *recv_displs, size_t es, void **req) {
    int me = ctx->rank;
    if (send_counts[me] != recv_counts[me])
        return ts_error(TS_ERR_INVALID,
                        "all_to_all: this rank sends itself %zu elements but expects %zu",
                        send_counts[me], recv_counts[me]);
    if (send_counts[me]) {
        cudaError_t e =
            cudaMemcpyAsync((char *)recv + recv_displs[me] * es, nccl_at(send, send_displs[me], es),
                            send_counts[me] * es, cudaMemcpyDeviceToDevice, ctx->stream);
        if (e != cudaSuccess) return nccl_cuda_fail(e, "cudaMemcpyAsync (all_to_all)");
    }
    ncclResult_t res = ncclGroupStart();
    for (int p = 0; p < ctx->size && res == ncclSuccess; p++) {
        if (p == me) continue;
        if (send_counts[p])
            res = ncclSend(nccl_at(send, send_displs[p], es), send_counts[p] * es, ncclUint8, p,
                           ctx->comm, ctx->stream);
        if (res == ncclSuccess && recv_counts[p])
            res = ncclRecv((char *)recv + recv_displs[p] * es, recv_counts[p] * es, ncclUint8, p,
                           ctx->comm, ctx->stream);
    }
    ncclResult_t end = ncclGroupEnd();
    return nccl_end(ctx, res != ncclSuccess ? res : end, "Send/Recv (all_to_all)", req);
}

static ts_status nccl_all_to_all(void *vctx, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, void **req) {
    nccl_ctx *ctx = vctx;
    size_t n = (size_t)ctx->size;
    size_t *a = malloc(2 * n * sizeof *a);
    if (!a) return ts_error(TS_ERR_NOMEM, "all_to_all: out of memory");
    for (size_t i = 0; i < n; i++) {
        a[i] = count;
        a[n + i] = i * count;
    }
    ts_status st = nccl_begin(ctx, 0, "all_to_all");
    if (!st) st = nccl_exchange(ctx, send, a, a + n, recv, a, a + n, ts_dtype_size(dtype), req);
    free(a);
    return st;
}

static ts_status nccl_all_to_allv(void *vctx, const void *send, const size_t *send_counts,
                                  const size_t *send_displs, void *recv, const size_t *recv_counts,
                                  const size_t *recv_displs, ts_dtype dtype, void **req) {
    nccl_ctx *ctx = vctx;
    TS_TRY(nccl_begin(ctx, 0, "all_to_allv"));
    return nccl_exchange(ctx, send, send_counts, send_displs, recv, recv_counts, recv_displs,
                         ts_dtype_size(dtype), req);
}

static ts_status nccl_broadcast(void *vctx, void *buf, size_t count, ts_dtype dtype, int root,
                                void **req) {
    nccl_ctx *ctx = vctx;
    TS_TRY(nccl_begin(ctx, 0, "broadcast"));
    ncclResult_t res = ncclBroadcast(buf, buf, count * ts_dtype_size(dtype), ncclUint8, root,
                                     ctx->comm, ctx->stream);
    return nccl_end(ctx, res, "Broadcast", req);
}

static ts_status nccl_send(void *vctx, const void *buf, size_t count, ts_dtype dtype, int peer,
                           int tag, void **req) {
    (void)tag; /* NCCL has no tags: a pair's messages match in order */
    nccl_ctx *ctx = vctx;
    TS_TRY(nccl_begin(ctx, 1, "send"));
    ncclResult_t res =
        ncclSend(buf, count * ts_dtype_size(dtype), ncclUint8, peer, ctx->comm, ctx->stream);
    return nccl_end(ctx, res, "Send", req);
}

static ts_status nccl_recv(void *vctx, void *buf, size_t count, ts_dtype dtype, int peer, int tag,
                           void **req) {
    (void)tag;
    nccl_ctx *ctx = vctx;
    TS_TRY(nccl_begin(ctx, 1, "recv"));
    ncclResult_t res =
        ncclRecv(buf, count * ts_dtype_size(dtype), ncclUint8, peer, ctx->comm, ctx->stream);
    return nccl_end(ctx, res, "Recv", req);
}

/* A one-element all-reduce of device scratch (the core's fallback would
 * reduce host memory, which NCCL cannot). */
static ts_status nccl_barrier(void *vctx, void **req) {
    nccl_ctx *ctx = vctx;
    TS_TRY(nccl_begin(ctx, 0, "barrier"));
    ncclResult_t res =
        ncclAllReduce(ctx->scratch, ctx->scratch, 1, ncclInt32, ncclSum, ctx->comm, ctx->stream);
    return nccl_end(ctx, res, "AllReduce (barrier)", req);
}

static ts_status nccl_test(void *vctx, void *vreq, int *done) {
    nccl_ctx *ctx = vctx;
    nccl_req *r = vreq;
    *done = 1;
    if (!r->issued) {
        if (nccl_group.depth > 0) {
            r->orphan = 1; /* released when the group ends */
            return ts_error(TS_ERR_INVALID,
                            "a request started inside ts_comm_nccl_group_start was waited on "
                            "before ts_comm_nccl_group_end");
        }
        nccl_flush(); /* a failure lands in r->err */
    }
    if (r->err[0]) {
        ts_status st = ts_error(TS_ERR_COMM, "NCCL group failed: %s", r->err);
        nccl_req_release(r);
        return st;
    }
    cudaError_t e = cudaEventQuery(r->done);
    if (e == cudaSuccess) {
        nccl_req_release(r);
        return TS_OK;
    }
    if (e != cudaErrorNotReady) {
        ctx->failed = 1;
        ctx->live--;
        nccl_req_destroy(r);
        return nccl_cuda_fail(e, "cudaEventQuery");
    }
    ncclResult_t async = ncclSuccess;
    ncclResult_t res = ncclCommGetAsyncError(ctx->comm, &async);
    if (res != ncclSuccess || (async != ncclSuccess && async != ncclInProgress)) {
        ctx->failed = 1;
        ctx->live--;
        nccl_req_destroy(r); /* never reused: the stream may still hold it */
        return nccl_fail(ctx, res != ncclSuccess ? res : async, "operation (asynchronous error)");
    }
    *done = 0;
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------- */

static void nccl_free(void *vctx) {
    nccl_ctx *ctx = vctx;
    if (!ctx) return;
    if (nccl_group.open && nccl_group.depth == 0) nccl_flush();
    if (ctx->comm) {
        if (ctx->live > 0 || ctx->failed)
            ncclCommAbort(ctx->comm); /* work may be in flight forever */
        else
            ncclCommDestroy(ctx->comm);
    }
    while (ctx->idle) {
        nccl_req *r = ctx->idle;
        ctx->idle = r->next;
        nccl_req_destroy(r);
    }
    if (ctx->ready) cudaEventDestroy(ctx->ready);
    if (ctx->stream) cudaStreamDestroy(ctx->stream);
    if (ctx->scratch && !ctx->failed && ctx->live == 0) ts_device_free(ctx->scratch);
    ts_comm_free(ctx->twin);
    free(ctx);
}

/* A context around an initialised NCCL communicator; takes `twin` and
 * `comm` (released by nccl_free also on failure). */
static ts_status nccl_ctx_new(ncclComm_t comm, ts_comm *twin, nccl_ctx **out) {
    *out = NULL;
    nccl_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        ncclCommDestroy(comm);
        ts_comm_free(twin);
        return ts_error(TS_ERR_NOMEM, "nccl backend: out of memory");
    }
    ctx->comm = comm;
    ctx->twin = twin;
    ctx->rank = ts_comm_rank(twin);
    ctx->size = ts_comm_size(twin);
    int nrank = -1, nsize = -1;
    ncclResult_t res = ncclCommUserRank(comm, &nrank);
    if (res == ncclSuccess) res = ncclCommCount(comm, &nsize);
    ts_status st = TS_OK;
    if (res != ncclSuccess)
        st = nccl_fail(ctx, res, "CommUserRank");
    else if (nrank != ctx->rank || nsize != ctx->size)
        st = ts_error(TS_ERR_INTERNAL,
                      "nccl backend: NCCL placed this rank at %d of %d, the core expected %d of %d",
                      nrank, nsize, ctx->rank, ctx->size);
    cudaError_t e = cudaSuccess;
    if (!st && (e = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking)) != cudaSuccess)
        st = nccl_cuda_fail(e, "cudaStreamCreate");
    if (!st && (e = cudaEventCreateWithFlags(&ctx->ready, cudaEventDisableTiming)) != cudaSuccess)
        st = nccl_cuda_fail(e, "cudaEventCreate");
    if (!st && !(ctx->scratch = ts_device_alloc(TS_MEM_COMM, sizeof *ctx->scratch)))
        st = TS_ERR_NOMEM;
    if (st) {
        ctx->failed = 1; /* abort, not destroy: the peers may not agree */
        nccl_free(ctx);
        return st;
    }
    *out = ctx;
    return TS_OK;
}

/* Every rank of `twin` joins one new NCCL communicator: rank 0 makes the
 * unique id and broadcasts it (with a flag, so that a failure there fails
 * everyone instead of leaving them waiting). */
static ts_status nccl_init_over(ts_comm *twin, ncclComm_t *out) {
    enum { ID_INTS = (sizeof(ncclUniqueId) + sizeof(int32_t) - 1) / sizeof(int32_t) };
    int32_t msg[1 + ID_INTS];
    ncclUniqueId id;
    memset(msg, 0, sizeof msg);
    memset(&id, 0, sizeof id);
    ncclResult_t res = ncclSuccess;
    if (ts_comm_rank(twin) == 0) {
        res = ncclGetUniqueId(&id);
        msg[0] = res == ncclSuccess;
        memcpy(&msg[1], &id, sizeof id);
    }
    TS_TRY(ts_comm_broadcast(twin, msg, 1 + ID_INTS, TS_I32, 0));
    if (!msg[0])
        return ts_comm_rank(twin) == 0
                   ? nccl_fail(NULL, res, "GetUniqueId")
                   : ts_error(TS_ERR_COMM, "nccl backend: rank 0 could not make an NCCL id");
    memcpy(&id, &msg[1], sizeof id);
    *out = NULL;
    res = ncclCommInitRank(out, ts_comm_size(twin), id, ts_comm_rank(twin));
    if (res != ncclSuccess) return nccl_fail(NULL, res, "CommInitRank");
    return TS_OK;
}

static ts_status nccl_split(void *vctx, int color, int key, const int *members, int new_size,
                            int new_rank, void **new_ctx) {
    (void)members;
    nccl_ctx *ctx = vctx;
    *new_ctx = NULL;
    if (nccl_group.depth > 0)
        return ts_error(TS_ERR_INVALID, "split: not allowed inside an NCCL group");
    TS_TRY(nccl_flush());
    ts_comm *twin = NULL;
    TS_TRY(ts_comm_split(ctx->twin, color, key, "nccl-boot", &twin));
    if (twin && (ts_comm_rank(twin) != new_rank || ts_comm_size(twin) != new_size)) {
        ts_comm_free(twin);
        return ts_error(TS_ERR_INTERNAL, "split: the MPI twin disagrees with the core's order");
    }
    ncclComm_t nc = NULL;
#if NCCL_HAVE_SPLIT
    ncclResult_t res =
        ncclCommSplit(ctx->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, NULL);
    if (res != ncclSuccess) {
        ts_comm_free(twin);
        return nccl_fail(ctx, res, "CommSplit");
    }
#else
    if (twin) {
        ts_status st = nccl_init_over(twin, &nc);
        if (st) {
            ts_comm_free(twin);
            return st;
        }
    }
#endif
    if (color < 0) return TS_OK;
    nccl_ctx *c = NULL;
    TS_TRY(nccl_ctx_new(nc, twin, &c));
    *new_ctx = c;
    return TS_OK;
}

static void nccl_abort(void *vctx, int code) {
    nccl_ctx *ctx = vctx;
    if (ctx && ctx->comm) ncclCommAbort(ctx->comm);
    MPI_Abort(MPI_COMM_WORLD, code);
}

static const ts_comm_ops nccl_ops = {
    .version = TS_COMM_OPS_VERSION,
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .all_gather = nccl_all_gather,
    .all_gatherv = nccl_all_gatherv,
    .reduce_scatter = nccl_reduce_scatter,
    .reduce_scatter_v = nccl_reduce_scatter_v,
    .all_to_all = nccl_all_to_all,
    .all_to_allv = nccl_all_to_allv,
    .broadcast = nccl_broadcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .test = nccl_test,
    .split = nccl_split,
    .free = nccl_free,
    .abort = nccl_abort,
};

/* ---------------------------------------------------------------------------
 * The API
 * ------------------------------------------------------------------------- */

ts_status ts_comm_nccl_create(ts_comm *mpi, const char *name, ts_comm **out) {
    if (!out) return ts_error(TS_ERR_INVALID, "ts_comm_nccl_create: out is NULL");
    *out = NULL;
    if (!mpi || strcmp(ts_comm_backend(mpi), "mpi") != 0)
        return ts_error(TS_ERR_INVALID,
                        "ts_comm_nccl_create: bootstraps over an MPI communicator, not '%s'",
                        mpi ? ts_comm_backend(mpi) : "NULL");
    if (nccl_group.depth > 0)
        return ts_error(TS_ERR_INVALID, "ts_comm_nccl_create: not allowed inside an NCCL group");
    TS_TRY(nccl_flush());
    TS_TRY(ts_device_init(-1));
    ts_comm *twin = NULL;
    TS_TRY(ts_comm_split(mpi, 0, ts_comm_rank(mpi), "nccl-boot", &twin));
    ncclComm_t comm = NULL;
    ts_status st = nccl_init_over(twin, &comm);
    if (st) {
        ts_comm_free(twin);
        return st;
    }
    nccl_ctx *ctx = NULL;
    TS_TRY(nccl_ctx_new(comm, twin, &ctx));
    int n = ts_comm_size(mpi);
    int *wr = malloc((size_t)n * sizeof *wr);
    if (!wr) {
        nccl_free(ctx);
        return ts_error(TS_ERR_NOMEM, "ts_comm_nccl_create: out of memory");
    }
    for (int i = 0; i < n; i++)
        wr[i] = ts_comm_world_rank(mpi, i);
    st = ts_comm_create(&nccl_ops, ctx, name, ts_comm_rank(mpi), n, wr, ts_comm_timeout(mpi), out);
    free(wr);
    return st;
}

ts_status ts_comm_nccl_group_start(void) {
    if (!nccl_group.open) {
        ncclResult_t res = ncclGroupStart();
        if (res != ncclSuccess) return nccl_fail(NULL, res, "GroupStart");
        nccl_group.open = 1;
    }
    nccl_group.depth++;
    return TS_OK;
}

ts_status ts_comm_nccl_group_end(void) {
    if (nccl_group.depth <= 0)
        return ts_error(TS_ERR_INVALID, "ts_comm_nccl_group_end without a group_start");
    if (--nccl_group.depth > 0) return TS_OK;
    return nccl_flush();
}

ts_status ts_comm_nccl_flush(void) {
    if (nccl_group.depth > 0) return TS_OK; /* the explicit group's end issues */
    return nccl_flush();
}
