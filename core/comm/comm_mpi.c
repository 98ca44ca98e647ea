/*
 * comm_mpi.c — the MPI backend of the communicator (CPU buffers), and the
 * world set-up: MPI_Init_thread, the world communicator, MPI_Finalize.
 *
 * Every operation is started with MPI's non-blocking calls (MPI_Iallreduce,
 * MPI_Iallgather(v), MPI_Ireduce_scatter(_block), MPI_Ialltoall(v), MPI_Ibcast,
 * MPI_Isend/Irecv, MPI_Ibarrier) and completed by MPI_Test from the core's
 * polled wait, which is what lets the core enforce timeouts. bf16 has no MPI
 * type: it travels as a 2-byte contiguous type, and its reductions are
 * user-defined MPI_Ops that combine in f32 and round to bf16.
 *
 * A process that no launcher started (none of mpi_launcher_vars in its
 * environment) gets the self communicator as its world and MPI is never
 * initialised; TESSERA_COMM_WORLD=mpi starts an MPI singleton instead.
 *
 * What it does not do: counters, timeouts, argument checks and the split's
 * color exchange are the core's (comm.c).
 */
#include <limits.h> /* INT_MAX: MPI counts are int */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, malloc, free, getenv */
#include <string.h> /* memmove, strcmp */

#include <mpi.h> /* Open MPI 4.1 (MPI 3.1: non-blocking collectives) */

#include "tessera/comm.h" /* the ops table this file fills; bf16 conversions */

typedef struct mpi_ctx {
    MPI_Comm comm;
    int rank, size;
} mpi_ctx;

/* A started operation. Arrays MPI refers to until completion live here. */
typedef struct mpi_req {
    MPI_Request req;
    int *ints;            /* counts and displacements, as int */
    MPI_Datatype type;    /* recv: to check the received count */
    long expect;          /* recv: elements expected; -1 for others */
    int peer, tag;        /* recv: for messages */
    char *move_dst;       /* in-place reduce_scatter: the result is */
    const char *move_src; /* moved from the buffer's start to this */
    size_t move_bytes;    /* rank's block after completion */
} mpi_req;

static MPI_Datatype mpi_half_type = MPI_DATATYPE_NULL; /* bf16 and f16 */
static MPI_Op mpi_bf16_ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
static int mpi_init_here; /* 1 if ts_comm_world_init called MPI_Init_thread */

/* ---------------------------------------------------------------------------
 * Errors, types, reductions
 * ------------------------------------------------------------------------- */

static ts_status mpi_fail(int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return ts_error(TS_ERR_COMM, "MPI %s failed: %s", what, msg);
}

static MPI_Datatype mpi_type(ts_dtype dtype) {
    switch (dtype) {
    case TS_F32: return MPI_FLOAT;
    case TS_I32: return MPI_INT32_T;
    case TS_U16: return MPI_UINT16_T;
    case TS_BF16:
    case TS_F16: return mpi_half_type;
    }
    return MPI_DATATYPE_NULL;
}

static void mpi_bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = ts_f32_to_bf16(ts_bf16_to_f32(a[i]) + ts_bf16_to_f32(b[i]));
}

static void mpi_bf16_max(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        if (ts_bf16_to_f32(a[i]) > ts_bf16_to_f32(b[i])) b[i] = a[i];
}

static void mpi_bf16_min(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        if (ts_bf16_to_f32(a[i]) < ts_bf16_to_f32(b[i])) b[i] = a[i];
}

static MPI_Op mpi_op(ts_dtype dtype, ts_reduce_op op) {
    if (dtype == TS_BF16) return mpi_bf16_ops[op];
    switch (op) {
    case TS_REDUCE_SUM: return MPI_SUM;
    case TS_REDUCE_MAX: return MPI_MAX;
    case TS_REDUCE_MIN: return MPI_MIN;
    }
    return MPI_OP_NULL;
}

static ts_status mpi_types_init(void) {
    int rc;
    if (mpi_half_type != MPI_DATATYPE_NULL) return TS_OK;
    if ((rc = MPI_Type_contiguous(2, MPI_BYTE, &mpi_half_type)) != MPI_SUCCESS ||
        (rc = MPI_Type_commit(&mpi_half_type)) != MPI_SUCCESS)
        return mpi_fail(rc, "Type_contiguous (bf16)");
    MPI_User_function *fns[3] = {mpi_bf16_sum, mpi_bf16_max, mpi_bf16_min};
    for (int i = 0; i < 3; i++)
        if ((rc = MPI_Op_create(fns[i], 1, &mpi_bf16_ops[i])) != MPI_SUCCESS)
            return mpi_fail(rc, "Op_create (bf16)");
    return TS_OK;
}

static void mpi_types_free(void) {
    for (int i = 0; i < 3; i++)
        if (mpi_bf16_ops[i] != MPI_OP_NULL) MPI_Op_free(&mpi_bf16_ops[i]);
    if (mpi_half_type != MPI_DATATYPE_NULL) MPI_Type_free(&mpi_half_type);
}

/* MPI counts are int: refuse what does not fit. */
static ts_status mpi_int(size_t v, const char *opname, int *out) {
    if (v > (size_t)INT_MAX)
        return ts_error(TS_ERR_INVALID,
                        "%s: count or offset %zu exceeds the MPI backend's limit of %d elements",
                        opname, v, INT_MAX);
    *out = (int)v;
    return TS_OK;
}

/* Converts `narrays` arrays of `n` size_t each into one int array. */
static ts_status mpi_ints(const char *opname, int n, int narrays, const size_t *const *arrays,
                          int **out) {
    int *ints = malloc((size_t)n * (size_t)narrays * sizeof *ints);
    if (!ints) return ts_error(TS_ERR_NOMEM, "%s: out of memory", opname);
    for (int a = 0; a < narrays; a++)
        for (int i = 0; i < n; i++) {
            ts_status st = mpi_int(arrays[a][i], opname, &ints[a * n + i]);
            if (st) {
                free(ints);
                return st;
            }
        }
    *out = ints;
    return TS_OK;
}

static ts_status mpi_req_new(const char *opname, mpi_req **out) {
    mpi_req *r = calloc(1, sizeof *r);
    if (!r) return ts_error(TS_ERR_NOMEM, "%s: out of memory", opname);
    r->req = MPI_REQUEST_NULL;
    r->expect = -1;
    *out = r;
    return TS_OK;
}

static void mpi_req_free(mpi_req *r) {
    free(r->ints);
    free(r);
}

/* Hands out a started request, or cleans up after MPI refused to start. */
static ts_status mpi_started(mpi_req *r, int rc, const char *what, void **req) {
    if (rc != MPI_SUCCESS) {
        mpi_req_free(r);
        return mpi_fail(rc, what);
    }
    *req = r;
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * Operations
 * ------------------------------------------------------------------------- */

static ts_status mpi_all_reduce(void *vctx, const void *send, void *recv, size_t count,
                                ts_dtype dtype, ts_reduce_op op, void **req) {
    mpi_ctx *ctx = vctx;
    int n = 0;
    mpi_req *r = NULL;
    TS_TRY(mpi_int(count, "all_reduce", &n));
    TS_TRY(mpi_req_new("all_reduce", &r));
    int rc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, n, mpi_type(dtype),
                            mpi_op(dtype, op), ctx->comm, &r->req);
    return mpi_started(r, rc, "Iallreduce", req);
}

static ts_status mpi_all_gather(void *vctx, const void *send, void *recv, size_t count,
                                ts_dtype dtype, void **req) {
    mpi_ctx *ctx = vctx;
    int n = 0, total = 0;
    mpi_req *r = NULL;
    TS_TRY(mpi_int(count, "all_gather", &n));
    TS_TRY(mpi_int(count * (size_t)ctx->size, "all_gather", &total));
    TS_TRY(mpi_req_new("all_gather", &r));
    size_t es = ts_dtype_size(dtype);
    int in_place = count > 0 && send == (const char *)recv + (size_t)ctx->rank * count * es;
    int rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : send, n, mpi_type(dtype), recv, n,
                            mpi_type(dtype), ctx->comm, &r->req);
    return mpi_started(r, rc, "Iallgather", req);
}

static ts_status mpi_all_gatherv(void *vctx, const void *send, void *recv, const size_t *counts,
                                 const size_t *displs, ts_dtype dtype, void **req) {
    mpi_ctx *ctx = vctx;
    mpi_req *r = NULL;
    TS_TRY(mpi_req_new("all_gatherv", &r));
    const size_t *arrays[2] = {counts, displs};
    ts_status st = mpi_ints("all_gatherv", ctx->size, 2, arrays, &r->ints);
    if (st) {
        mpi_req_free(r);
        return st;
    }
    size_t es = ts_dtype_size(dtype);
    size_t mine = counts[ctx->rank];
    int in_place = mine > 0 && send == (const char *)recv + displs[ctx->rank] * es;
    int rc =
        MPI_Iallgatherv(in_place ? MPI_IN_PLACE : send, r->ints[ctx->rank], mpi_type(dtype), recv,
                        r->ints, r->ints + ctx->size, mpi_type(dtype), ctx->comm, &r->req);
    return mpi_started(r, rc, "Iallgatherv", req);
}

static ts_status mpi_reduce_scatter(void *vctx, const void *send, void *recv, size_t count,
                                    ts_dtype dtype, ts_reduce_op op, void **req) {
    mpi_ctx *ctx = vctx;
    int n = 0, total = 0;
    mpi_req *r = NULL;
    TS_TRY(mpi_int(count, "reduce_scatter", &n));
    TS_TRY(mpi_int(count * (size_t)ctx->size, "reduce_scatter", &total));
    TS_TRY(mpi_req_new("reduce_scatter", &r));
    size_t es = ts_dtype_size(dtype);
    int in_place = count > 0 && recv == (const char *)send + (size_t)ctx->rank * count * es;
    int rc;
    if (in_place) {
        /* MPI's in-place form leaves the result at the buffer's start; NCCL's
         * (ours) wants it at this rank's block: move it on completion. */
        rc = MPI_Ireduce_scatter_block(MPI_IN_PLACE, (void *)send, n, mpi_type(dtype),
                                       mpi_op(dtype, op), ctx->comm, &r->req);
        if (ctx->rank > 0) {
            r->move_dst = recv;
            r->move_src = send;
            r->move_bytes = count * es;
        }
    } else {
        rc = MPI_Ireduce_scatter_block(send, recv, n, mpi_type(dtype), mpi_op(dtype, op), ctx->comm,
                                       &r->req);
    }
    return mpi_started(r, rc, "Ireduce_scatter_block", req);
}

static ts_status mpi_reduce_scatter_v(void *vctx, const void *send, void *recv,
                                      const size_t *counts, ts_dtype dtype, ts_reduce_op op,
                                      void **req) {
    mpi_ctx *ctx = vctx;
    mpi_req *r = NULL;
    size_t total = 0;
    int itotal = 0;
    for (int i = 0; i < ctx->size; i++)
        total += counts[i];
    TS_TRY(mpi_int(total, "reduce_scatter_v", &itotal));
    TS_TRY(mpi_req_new("reduce_scatter_v", &r));
    const size_t *arrays[1] = {counts};
    ts_status st = mpi_ints("reduce_scatter_v", ctx->size, 1, arrays, &r->ints);
    if (st) {
        mpi_req_free(r);
        return st;
    }
    int rc = MPI_Ireduce_scatter(send, recv, r->ints, mpi_type(dtype), mpi_op(dtype, op), ctx->comm,
                                 &r->req);
    return mpi_started(r, rc, "Ireduce_scatter", req);
}

static ts_status mpi_all_to_all(void *vctx, const void *send, void *recv, size_t count,
                                ts_dtype dtype, void **req) {
    mpi_ctx *ctx = vctx;
    int n = 0, total = 0;
    mpi_req *r = NULL;
    TS_TRY(mpi_int(count, "all_to_all", &n));
    TS_TRY(mpi_int(count * (size_t)ctx->size, "all_to_all", &total));
    TS_TRY(mpi_req_new("all_to_all", &r));
    int rc = MPI_Ialltoall(send, n, mpi_type(dtype), recv, n, mpi_type(dtype), ctx->comm, &r->req);
    return mpi_started(r, rc, "Ialltoall", req);
}

static ts_status mpi_all_to_allv(void *vctx, const void *send, const size_t *send_counts,
                                 const size_t *send_displs, void *recv, const size_t *recv_counts,
                                 const size_t *recv_displs, ts_dtype dtype, void **req) {
    mpi_ctx *ctx = vctx;
    mpi_req *r = NULL;
    TS_TRY(mpi_req_new("all_to_allv", &r));
    const size_t *arrays[4] = {send_counts, send_displs, recv_counts, recv_displs};
    ts_status st = mpi_ints("all_to_allv", ctx->size, 4, arrays, &r->ints);
    if (st) {
        mpi_req_free(r);
        return st;
    }
    int n = ctx->size;
    int rc = MPI_Ialltoallv(send, r->ints, r->ints + n, mpi_type(dtype), recv, r->ints + 2 * n,
                            r->ints + 3 * n, mpi_type(dtype), ctx->comm, &r->req);
    return mpi_started(r, rc, "Ialltoallv", req);
}

static ts_status mpi_broadcast(void *vctx, void *buf, size_t count, ts_dtype dtype, int root,
                               void **req) {
    mpi_ctx *ctx = vctx;
    int n = 0;
    mpi_req *r = NULL;
    TS_TRY(mpi_int(count, "broadcast", &n));
    TS_TRY(mpi_req_new("broadcast", &r));
    int rc = MPI_Ibcast(buf, n, mpi_type(dtype), root, ctx->comm, &r->req);
    return mpi_started(r, rc, "Ibcast", req);
}

static ts_status mpi_send(void *vctx, const void *buf, size_t count, ts_dtype dtype, int peer,
                          int tag, void **req) {
    mpi_ctx *ctx = vctx;
    int n = 0;
    mpi_req *r = NULL;
    TS_TRY(mpi_int(count, "send", &n));
    TS_TRY(mpi_req_new("send", &r));
    int rc = MPI_Isend(buf, n, mpi_type(dtype), peer, tag, ctx->comm, &r->req);
    return mpi_started(r, rc, "Isend", req);
}

static ts_status mpi_recv(void *vctx, void *buf, size_t count, ts_dtype dtype, int peer, int tag,
                          void **req) {
    mpi_ctx *ctx = vctx;
    int n = 0;
    mpi_req *r = NULL;
    TS_TRY(mpi_int(count, "recv", &n));
    TS_TRY(mpi_req_new("recv", &r));
    r->type = mpi_type(dtype);
    r->expect = n;
    r->peer = peer;
    r->tag = tag;
    int rc = MPI_Irecv(buf, n, r->type, peer, tag, ctx->comm, &r->req);
    return mpi_started(r, rc, "Irecv", req);
}

static ts_status mpi_barrier(void *vctx, void **req) {
    mpi_ctx *ctx = vctx;
    mpi_req *r = NULL;
    TS_TRY(mpi_req_new("barrier", &r));
    int rc = MPI_Ibarrier(ctx->comm, &r->req);
    return mpi_started(r, rc, "Ibarrier", req);
}

static ts_status mpi_test(void *vctx, void *vreq, int *done) {
    (void)vctx;
    mpi_req *r = vreq;
    MPI_Status status;
    int flag = 0;
    int rc = MPI_Test(&r->req, &flag, &status);
    ts_status st = TS_OK;
    if (rc != MPI_SUCCESS) {
        int cls = 0;
        MPI_Error_class(rc, &cls);
        if (r->expect >= 0 && cls == MPI_ERR_TRUNCATE)
            st = ts_error(
                TS_ERR_COMM,
                "recv from peer %d tag %d: the message is longer than the %ld elements expected",
                r->peer, r->tag, r->expect);
        else
            st = mpi_fail(rc, "Test");
        *done = 1;
        mpi_req_free(r);
        return st;
    }
    if (!flag) {
        *done = 0;
        return TS_OK;
    }
    if (r->expect >= 0) {
        int got = 0;
        MPI_Get_count(&status, r->type, &got);
        if (got != r->expect)
            st = ts_error(TS_ERR_COMM, "recv from peer %d tag %d: got %d elements, expected %ld",
                          r->peer, r->tag, got, r->expect);
    }
    if (r->move_bytes) memmove(r->move_dst, r->move_src, r->move_bytes);
    *done = 1;
    mpi_req_free(r);
    return st;
}

/* ---------------------------------------------------------------------------
 * Communicators
 * ------------------------------------------------------------------------- */

static ts_status mpi_ctx_new(MPI_Comm comm, mpi_ctx **out) {
    mpi_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return ts_error(TS_ERR_NOMEM, "communicator: out of memory");
    ctx->comm = comm;
    MPI_Comm_rank(comm, &ctx->rank);
    MPI_Comm_size(comm, &ctx->size);
    *out = ctx;
    return TS_OK;
}

static void mpi_free(void *vctx) {
    mpi_ctx *ctx = vctx;
    if (!ctx) return;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && ctx->comm != MPI_COMM_NULL) MPI_Comm_free(&ctx->comm);
    free(ctx);
}

static ts_status mpi_split(void *vctx, int color, int key, const int *members, int new_size,
                           int new_rank, void **new_ctx) {
    (void)members;
    mpi_ctx *ctx = vctx;
    MPI_Comm nc = MPI_COMM_NULL;
    *new_ctx = NULL;
    int rc = MPI_Comm_split(ctx->comm, color < 0 ? MPI_UNDEFINED : color, key, &nc);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "Comm_split");
    if (color < 0) return TS_OK;
    mpi_ctx *c = NULL;
    ts_status st = mpi_ctx_new(nc, &c);
    if (st) {
        MPI_Comm_free(&nc);
        return st;
    }
    if (c->rank != new_rank || c->size != new_size) {
        st = ts_error(TS_ERR_INTERNAL,
                      "split: MPI placed this rank at %d of %d, the core expected %d of %d",
                      c->rank, c->size, new_rank, new_size);
        mpi_free(c);
        return st;
    }
    *new_ctx = c;
    return TS_OK;
}

static void mpi_abort(void *vctx, int code) {
    (void)vctx;
    MPI_Abort(MPI_COMM_WORLD, code);
}

static const ts_comm_ops mpi_ops = {
    .version = TS_COMM_OPS_VERSION,
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .all_gather = mpi_all_gather,
    .all_gatherv = mpi_all_gatherv,
    .reduce_scatter = mpi_reduce_scatter,
    .reduce_scatter_v = mpi_reduce_scatter_v,
    .all_to_all = mpi_all_to_all,
    .all_to_allv = mpi_all_to_allv,
    .broadcast = mpi_broadcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .barrier = mpi_barrier,
    .test = mpi_test,
    .split = mpi_split,
    .free = mpi_free,
    .abort = mpi_abort,
};

/* ---------------------------------------------------------------------------
 * World
 * ------------------------------------------------------------------------- */

/* The variables a launcher sets in every rank's environment: Open MPI's
 * mpirun and prterun, PMIx servers (Slurm's srun --mpi=pmix, jsrun), PMI-1/2
 * launchers (MPICH's and Intel MPI's hydra, srun --mpi=pmi2), MVAPICH's, and
 * any Slurm step. With none of them set the process was started on its own. */
static const char *const mpi_launcher_vars[] = {"OMPI_COMM_WORLD_SIZE",
                                                "OMPI_COMM_WORLD_RANK",
                                                "PMIX_RANK",
                                                "PMIX_NAMESPACE",
                                                "PMI_RANK",
                                                "PMI_SIZE",
                                                "PMI_FD",
                                                "PMI_PORT",
                                                "MPI_LOCALNRANKS",
                                                "MV2_COMM_WORLD_RANK",
                                                "SLURM_PROCID",
                                                "SLURM_STEP_ID"};

/* 1 when the world is to be MPI's: a launcher started this process, or
 * TESSERA_COMM_WORLD=mpi asks for an MPI singleton. 0: the process runs
 * alone and MPI is not started. -1 (an error set) for another value. */
static int mpi_world_wanted(void) {
    const char *force = getenv("TESSERA_COMM_WORLD");
    if (force && force[0]) {
        if (strcmp(force, "mpi") == 0) return 1;
        if (strcmp(force, "auto") != 0) {
            ts_error(TS_ERR_CONFIG,
                     "TESSERA_COMM_WORLD=%s: expected mpi (always start MPI) or auto (start MPI "
                     "only under a launcher)",
                     force);
            return -1;
        }
    }
    int inited = 0;
    MPI_Initialized(&inited);
    if (inited) return 1;
    for (size_t i = 0; i < sizeof mpi_launcher_vars / sizeof mpi_launcher_vars[0]; i++)
        if (getenv(mpi_launcher_vars[i])) return 1;
    return 0;
}

ts_status ts_comm_world_init(int *argc, char ***argv, double timeout_s, ts_comm **world) {
    if (!world) return ts_error(TS_ERR_INVALID, "ts_comm_world_init: world is NULL");
    *world = NULL;
    /* A process started on its own is a world of one: the self communicator
     * serves it, and MPI's singleton start-up (a daemon it forks, a segment
     * file it sizes) is not needed. */
    int wanted = mpi_world_wanted();
    if (wanted < 0) return TS_ERR_CONFIG;
    if (!wanted) {
        ts_error_set_rank(0, 1);
        return ts_comm_self_create("world", timeout_s, world);
    }
    int inited = 0, provided = MPI_THREAD_SINGLE, rc;
    MPI_Initialized(&inited);
    if (!inited) {
        if ((rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
            return mpi_fail(rc, "Init_thread");
        mpi_init_here = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_FUNNELED)
        return ts_error(TS_ERR_COMM,
                        "MPI offers thread level %d, tessera needs MPI_THREAD_FUNNELED", provided);
    TS_TRY(mpi_types_init());
    MPI_Comm dup;
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &dup)) != MPI_SUCCESS) return mpi_fail(rc, "Comm_dup");
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    mpi_ctx *ctx = NULL;
    ts_status st = mpi_ctx_new(dup, &ctx);
    if (st) {
        MPI_Comm_free(&dup);
        return st;
    }
    ts_error_set_rank(ctx->rank, ctx->size);
    return ts_comm_create(&mpi_ops, ctx, "world", ctx->rank, ctx->size, NULL, timeout_s, world);
}

ts_status ts_comm_world_finalize(ts_comm *world) {
    ts_comm_free(world);
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    if (!inited) return TS_OK; /* a world of one without MPI */
    MPI_Finalized(&finalized);
    if (finalized) return TS_OK;
    mpi_types_free();
    if (mpi_init_here) {
        mpi_init_here = 0;
        int rc = MPI_Finalize();
        if (rc != MPI_SUCCESS) return mpi_fail(rc, "Finalize");
    }
    return TS_OK;
}
