/*
 * comm.h — the communicator: collectives and point-to-point transfers between
 * the ranks of one mesh axis, with per-op counters, timeouts and a record of
 * the last operations for post-mortems.
 *
 * This header is part of the SDK installed under include/tessera/. Plugins
 * move data between ranks only through it (most of the time indirectly, by
 * stating placements and letting the core redistribute). It has three parts:
 *
 *   1. the user API: world set-up, split into axes, the operations (each in a
 *      blocking and a non-blocking `_start` form), requests, counters;
 *   2. bandwidth arithmetic shared by benchmarks and the metrics writer;
 *   3. the backend interface: the ops table a transport (MPI in core/, NCCL in
 *      kernels/cuda/) fills in, and the constructor that wraps it.
 *
 * Model. A `ts_comm` is an object {ops table, backend context} plus what the
 * core keeps for every backend: the axis name ("world", "tp", "dp", ...), this
 * rank and the size, the world rank of every member, the timeout, counters,
 * and sequence numbers. All ranks of a communicator must call the same
 * collectives in the same order with matching arguments (as in MPI and NCCL);
 * a mismatch is detected only as a timeout.
 *
 * Progress. MPI moves non-blocking operations forward only while some MPI
 * call runs on this rank, so with the MPI backend a collective started before
 * compute progresses mostly inside ts_comm_wait; call ts_comm_test now and
 * then during long compute to overlap more. NCCL progresses on its own.
 *
 * Threads. A communicator is driven by one thread at a time, the thread that
 * called ts_comm_world_init (MPI is initialised with MPI_THREAD_FUNNELED).
 * Counters and the recent-operations record are not locked.
 *
 * Buffers. Every `send`/`recv`/`buf` argument is host memory for the MPI
 * backend and device memory for the NCCL backend; it is borrowed: the caller
 * keeps ownership, and for a `_start` form the buffers must stay valid and
 * untouched (send buffers unmodified, receive buffers unread) until the
 * request completes. Counts are in elements of `dtype`, never bytes. Size
 * arrays (`counts`, `displs`) are copied at start and may be reused at once.
 *
 * Element types. Every operation moves any ts_dtype. Reductions (all_reduce,
 * reduce_scatter) are defined for TS_F32, TS_BF16 and TS_I32; other types fail
 * with TS_ERR_INVALID. bf16 reductions combine two operands at a time in f32
 * and round the result to bf16 (round to nearest even) at every step, so a sum
 * over n ranks carries up to n-1 bf16 roundings (relative error about
 * (n-1) * 2^-9 of the sum of magnitudes); the order of combination is the
 * backend's. Results of floating-point sums are not promised to be bitwise
 * identical across backends or world sizes.
 *
 * Failure. Every function that can fail returns a ts_status and sets the
 * last-error message (ts_last_error()), prefixed with "[rank r/w]". Argument
 * errors (NULL pointers, a peer or root out of range, a reduction of an
 * unsupported dtype, counts beyond the backend's limit) return TS_ERR_INVALID
 * before any communication starts; nothing is counted and no peer is
 * affected (but the peers will wait for this rank: treat it as fatal unless
 * every rank fails alike). Transport errors return TS_ERR_COMM.
 *
 * Timeouts. Each communicator has `timeout_s` (0 or less: wait forever). A
 * wait that has lasted longer than timeout_s — measured from the first
 * ts_comm_wait or ts_comm_test call on the request, i.e. from when this rank
 * started waiting, not from when it started the operation — fails with
 *     [rank 0/3] collective timeout after 2s on axis 'dp': all_reduce #5
 *     (count 1000 f32) did not complete
 * (one line; point-to-point ops say "send #3 (count 8 bf16, peer 2)"), and the
 * last TS_COMM_RECENT operations of this rank are printed to stderr. Then, by
 * default, ts_comm_abort ends the whole job so that no peer is left hanging
 * (the wait does not return). With ts_comm_set_abort_on_timeout(comm, 0) the
 * wait returns TS_ERR_COMM instead; the communicator is then unusable (every
 * later operation on it fails with TS_ERR_COMM), the timed-out operation may
 * still write its receive buffer at any later time, and the only safe next
 * step is to abort. That mode exists for tests and diagnostics.
 */
#ifndef TESSERA_COMM_H
#define TESSERA_COMM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h> /* FILE, for ts_comm_print_recent */

#include "tessera/comm_types.h" /* ts_comm, ts_comm_request, ts_reduce_op, ... */
#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

/* (The handles, ts_reduce_op and ts_comm_op: comm_types.h.)
 * "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
 * "send", "recv", "barrier" (the JSON keys of the counters); "?" otherwise. */
const char *ts_comm_op_name(ts_comm_op op);
/* "sum", "max", "min"; "?" otherwise. */
const char *ts_reduce_op_name(ts_reduce_op op);

/* ===========================================================================
 * 1. Set-up and properties
 * ======================================================================== */

/* Initialises MPI (MPI_Init_thread, MPI_THREAD_FUNNELED or better) unless it
 * is already initialised, and returns the world communicator, named "world",
 * over a private duplicate of MPI_COMM_WORLD. Also calls ts_error_set_rank so
 * that every later error message names this rank.
 *
 * A process no launcher started (a plain `./program`: none of the variables
 * mpirun, PMIx, PMI or Slurm set in a rank's environment, such as
 * OMPI_COMM_WORLD_SIZE or PMIX_RANK) is a world of one: *world is then the
 * self communicator (backend "self", see ts_comm_self_create) and MPI is not
 * initialised, so such a run does not depend on MPI's singleton start-up.
 * TESSERA_COMM_WORLD=mpi in the environment starts an MPI singleton instead
 * (backend "mpi", size 1); TESSERA_COMM_WORLD=auto is the default.
 *
 * Inputs:  argc, argv — main's, passed to MPI (may be NULL);
 *          timeout_s  — the world's timeout, inherited by ts_comm_split
 *                       (0 or less: none).
 * Outputs: *world — owned by the caller; release with ts_comm_world_finalize.
 * Failure: TS_ERR_COMM if MPI cannot be initialised or offers less than
 *          MPI_THREAD_FUNNELED; TS_ERR_CONFIG for another TESSERA_COMM_WORLD;
 *          *world is then NULL. Call once per process. */
ts_status ts_comm_world_init(int *argc, char ***argv, double timeout_s, ts_comm **world);

/* Frees the world communicator and finalises MPI if ts_comm_world_init
 * initialised it. Every communicator split from it must be freed first and
 * every request completed. `world` may be NULL (then only MPI is finalised). */
ts_status ts_comm_world_finalize(ts_comm *world);

/* A communicator of size 1 over no transport: every collective copies its
 * input to its output (in place: nothing), broadcast and barrier do nothing,
 * send and recv fail with TS_ERR_INVALID (there is no peer). For single-rank
 * tools and tests that must not initialise MPI. `name` is copied.
 * Outputs: *out, released with ts_comm_free. */
ts_status ts_comm_self_create(const char *name, double timeout_s, ts_comm **out);

/* Splits `parent` into disjoint communicators, one per distinct `color`: the
 * ranks that pass the same color >= 0 form one, ordered by `key` (ties by
 * parent rank). Collective over `parent`: every rank of it must call, with its
 * own color and key. A rank that passes color < 0 joins none and gets
 * *out = NULL (and TS_OK).
 *
 * Inputs:  name — the new axis name ("tp", "dp", ...), copied; at most
 *                 TS_COMM_NAME_MAX-1 characters.
 * Outputs: *out — owned by the caller, released with ts_comm_free; it
 *          inherits the parent's timeout and abort-on-timeout setting, starts
 *          with zero counters, and knows the world rank of every member.
 * Failure: TS_ERR_INVALID for a bad name; TS_ERR_COMM if the exchange of
 *          colors times out (see Timeouts) or the backend fails. The exchange
 *          is recorded in the recent-operations list as "split" but not
 *          counted. */
ts_status ts_comm_split(ts_comm *parent, int color, int key, const char *name, ts_comm **out);

/* Releases a communicator made by ts_comm_split, ts_comm_self_create or a
 * backend constructor. Local (not collective); every request on it must have
 * completed. NULL is ignored. */
void ts_comm_free(ts_comm *comm);

const char *ts_comm_name(const ts_comm *comm);    /* the axis name           */
int ts_comm_rank(const ts_comm *comm);            /* 0 .. size-1             */
int ts_comm_size(const ts_comm *comm);            /* ranks in this axis      */
const char *ts_comm_backend(const ts_comm *comm); /* "mpi", "self", "nccl"   */
/* The world rank of member `rank` of this communicator (-1 if out of range). */
int ts_comm_world_rank(const ts_comm *comm, int rank);

double ts_comm_timeout(const ts_comm *comm);
/* Changes the timeout for operations started from now on (0 or less: none). */
void ts_comm_set_timeout(ts_comm *comm, double timeout_s);
/* 1 (the default): a timeout aborts the job. 0: the wait returns TS_ERR_COMM
 * and the communicator becomes unusable (see Timeouts above). */
void ts_comm_set_abort_on_timeout(ts_comm *comm, int abort_on_timeout);

/* Ends the whole job (every rank of every communicator, not only `comm`'s)
 * with exit status `code`, after flushing stdout and stderr: MPI_Abort for
 * the MPI backend. Used by the core on communication failure; plugins never
 * call exit or abort themselves. `comm` may be NULL (then the process exits
 * alone). Does not return. */
void ts_comm_abort(ts_comm *comm, int code) __attribute__((noreturn));

/* ===========================================================================
 * 2. Operations
 *
 * Each operation has a blocking form, which returns when this rank's part is
 * complete (its receive buffer is filled and its send buffer may be reused),
 * and a `_start` form, which returns at once with *req set to a request to
 * pass to ts_comm_wait or ts_comm_test. On failure of a `_start` form *req is
 * NULL. The blocking form is `_start` followed by ts_comm_wait.
 *
 * Counters (section 3) are charged when an operation starts: one call and its
 * "bytes", which follow nccl-tests' "size" column (doc/PERFORMANCE.md in
 * github.com/NVIDIA/nccl-tests) so that algbw = bytes / seconds and busbw
 * come out as nccl-tests reports them. Each op below states its bytes.
 * ======================================================================== */

/* all_reduce: every rank contributes `count` elements; every rank receives
 * their element-wise reduction. In place when send == recv.
 *   send: count elements (read); recv: count elements (written).
 *   bytes: count * elem_size. */
ts_status ts_comm_all_reduce(ts_comm *comm, const void *send, void *recv, size_t count,
                             ts_dtype dtype, ts_reduce_op op);
ts_status ts_comm_all_reduce_start(ts_comm *comm, const void *send, void *recv, size_t count,
                                   ts_dtype dtype, ts_reduce_op op, ts_comm_request **req);

/* all_gather: every rank contributes `count` elements; every rank receives
 * size*count elements, rank r's block at offset r*count. In place when
 * send == recv + rank*count elements (NCCL's convention).
 *   send: count elements; recv: size*count elements.
 *   bytes: size * count * elem_size (the gathered total). */
ts_status ts_comm_all_gather(ts_comm *comm, const void *send, void *recv, size_t count,
                             ts_dtype dtype);
ts_status ts_comm_all_gather_start(ts_comm *comm, const void *send, void *recv, size_t count,
                                   ts_dtype dtype, ts_comm_request **req);

/* all_gatherv: uneven blocks. counts[0..size-1] (identical on every rank)
 * gives each rank's block; blocks are packed in rank order in recv (rank r's
 * block starts at counts[0] + ... + counts[r-1]). This rank sends
 * counts[rank] elements from `send`. In place when send == recv + that
 * offset. A count may be 0.
 *   bytes: (counts[0] + ... + counts[size-1]) * elem_size. */
ts_status ts_comm_all_gatherv(ts_comm *comm, const void *send, void *recv, const size_t *counts,
                              ts_dtype dtype);
ts_status ts_comm_all_gatherv_start(ts_comm *comm, const void *send, void *recv,
                                    const size_t *counts, ts_dtype dtype, ts_comm_request **req);

/* reduce_scatter: every rank contributes size*count elements; rank r receives
 * the reduction of block r (elements r*count .. r*count+count-1) over all
 * ranks. In place when recv == send + rank*count elements (NCCL's
 * convention); the rest of `send` is then left undefined.
 *   send: size*count elements; recv: count elements.
 *   bytes: size * count * elem_size (the input total). */
ts_status ts_comm_reduce_scatter(ts_comm *comm, const void *send, void *recv, size_t count,
                                 ts_dtype dtype, ts_reduce_op op);
ts_status ts_comm_reduce_scatter_start(ts_comm *comm, const void *send, void *recv, size_t count,
                                       ts_dtype dtype, ts_reduce_op op, ts_comm_request **req);

/* reduce_scatter_v: uneven blocks. counts[0..size-1] (identical on every
 * rank); `send` holds the packed blocks (sum of counts elements) and rank r
 * receives counts[r] reduced elements. `send` and `recv` must not overlap.
 * ts_comm_block_range gives the usual uneven split of a flat buffer.
 *   bytes: (counts[0] + ... + counts[size-1]) * elem_size. */
ts_status ts_comm_reduce_scatter_v(ts_comm *comm, const void *send, void *recv,
                                   const size_t *counts, ts_dtype dtype, ts_reduce_op op);
ts_status ts_comm_reduce_scatter_v_start(ts_comm *comm, const void *send, void *recv,
                                         const size_t *counts, ts_dtype dtype, ts_reduce_op op,
                                         ts_comm_request **req);

/* all_to_all: rank r sends block d of `send` (count elements at d*count) to
 * rank d, and receives rank s's block r at recv + s*count. Not in place.
 *   send, recv: size*count elements each.
 *   bytes: size * count * elem_size (this rank's send total). */
ts_status ts_comm_all_to_all(ts_comm *comm, const void *send, void *recv, size_t count,
                             ts_dtype dtype);
ts_status ts_comm_all_to_all_start(ts_comm *comm, const void *send, void *recv, size_t count,
                                   ts_dtype dtype, ts_comm_request **req);

/* all_to_allv: send_counts[d] elements at send + send_displs[d] go to rank d;
 * recv_counts[s] elements from rank s land at recv + recv_displs[s]. The
 * arrays have `size` entries and differ per rank; send_counts[d] on rank r
 * must equal recv_counts[r] on rank d. A displs argument may be NULL: then the
 * blocks are packed in rank order (prefix sums of the counts). Not in place.
 *   bytes: (send_counts[0] + ... + send_counts[size-1]) * elem_size — this
 *   rank's send total, which differs between ranks. */
ts_status ts_comm_all_to_allv(ts_comm *comm, const void *send, const size_t *send_counts,
                              const size_t *send_displs, void *recv, const size_t *recv_counts,
                              const size_t *recv_displs, ts_dtype dtype);
ts_status ts_comm_all_to_allv_start(ts_comm *comm, const void *send, const size_t *send_counts,
                                    const size_t *send_displs, void *recv,
                                    const size_t *recv_counts, const size_t *recv_displs,
                                    ts_dtype dtype, ts_comm_request **req);

/* broadcast: `root`'s `count` elements of buf are copied into buf on every
 * other rank. root is a rank of this communicator.
 *   bytes: count * elem_size (on every rank, root included). */
ts_status ts_comm_broadcast(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int root);
ts_status ts_comm_broadcast_start(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int root,
                                  ts_comm_request **req);

/* send / recv: point to point with `peer` (a rank of this communicator, not
 * this rank) under `tag` (0 .. 32767). Messages between one pair with one tag
 * arrive in order. recv must name exactly the count that was sent; a
 * different count fails with TS_ERR_COMM when the recv completes. A blocking
 * send may wait until the peer posts its recv, so two ranks that exchange
 * must use the `_start` forms (or order their calls).
 *   bytes: count * elem_size. */
ts_status ts_comm_send(ts_comm *comm, const void *buf, size_t count, ts_dtype dtype, int peer,
                       int tag);
ts_status ts_comm_send_start(ts_comm *comm, const void *buf, size_t count, ts_dtype dtype, int peer,
                             int tag, ts_comm_request **req);
ts_status ts_comm_recv(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int peer, int tag);
ts_status ts_comm_recv_start(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int peer,
                             int tag, ts_comm_request **req);

/* barrier: returns when every rank has entered it. bytes: 0. */
ts_status ts_comm_barrier(ts_comm *comm);
ts_status ts_comm_barrier_start(ts_comm *comm, ts_comm_request **req);

/* --- requests -------------------------------------------------------------
 * A request is completed and released by exactly one ts_comm_wait call, or by
 * the ts_comm_test call that reports it done; it must not be used afterwards.
 * Requests of one communicator may be waited on in any order. The seconds a
 * rank spends inside the `_start` call and inside wait/test until completion
 * are added to the op's counter. */

/* Waits for `req` to complete and releases it. NULL is a no-op (TS_OK).
 * Returns the operation's status: TS_OK, TS_ERR_COMM on a transport error or
 * a recv count mismatch, or (if the communicator does not abort on timeout)
 * TS_ERR_COMM on timeout. The request is released in every case. */
ts_status ts_comm_wait(ts_comm_request *req);
/* Waits for reqs[0..n-1] in order (NULL entries skipped), releasing each;
 * returns the first failure but still waits for the rest. */
ts_status ts_comm_wait_all(ts_comm_request **reqs, int n);
/* Checks `req` without blocking. *done = 1: it completed and was released
 * (the return value is its status). *done = 0: still running, TS_OK. A test
 * past the deadline fails as a wait would. */
ts_status ts_comm_test(ts_comm_request *req, int *done);

/* ===========================================================================
 * 3. Counters and bandwidth
 * ======================================================================== */

/* The counter (ts_comm_op_counter, comm_types.h) of one op kind on `comm`
 * (zeros for an unknown kind). */
ts_comm_op_counter ts_comm_counter(const ts_comm *comm, ts_comm_op op);
/* Sets every counter of `comm` to zero (sequence numbers keep running). */
void ts_comm_counters_reset(ts_comm *comm);

/* Writes this communicator's counters as one JSON member, for embedding in an
 * object that the caller opens and closes:
 *     "tp":{"all_reduce":{"calls":4,"bytes":4096,"seconds":0.0012},...}
 * Only op kinds with calls > 0 appear ("tp":{} if none). Keys are the names of
 * ts_comm_op_name; seconds are printed with %.9g.
 * Inputs:  buf/cap — the caller's buffer.
 * Outputs: buf — NUL-terminated text; *len (may be NULL) — its length.
 * Failure: TS_ERR_INVALID if it does not fit (buf then holds a truncated,
 *          NUL-terminated prefix and *len the length needed). */
ts_status ts_comm_counters_json(const ts_comm *comm, char *buf, size_t cap, size_t *len);

/* nccl-tests' bus-bandwidth factor for an op on n ranks (PERFORMANCE.md):
 * all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
 * broadcast, send, recv 1; barrier 0. busbw = algbw * factor is comparable
 * with the link bandwidth whatever n is. n <= 1 gives 0 for the collectives
 * that then move nothing. */
double ts_comm_busbw_factor(ts_comm_op op, int n);
/* algbw = bytes / seconds and busbw = algbw * ts_comm_busbw_factor(op, n), in
 * bytes per second (0 when seconds <= 0). Either output may be NULL. */
void ts_comm_bandwidth(ts_comm_op op, int n, uint64_t bytes, double seconds, double *algbw,
                       double *busbw);

/* The uneven-split rule used across tessera for cutting `total` elements into
 * `nparts` contiguous parts (as torch.tensor_split does): the first
 * total % nparts parts get one element more. Outputs part `part`'s offset and
 * count (either may be NULL). Use it to build counts for all_gatherv and
 * reduce_scatter_v. */
void ts_comm_block_range(size_t total, int nparts, int part, size_t *offset, size_t *count);

/* Prints this rank's last TS_COMM_RECENT operations over all communicators,
 * oldest first (axis, op, per-axis sequence number, count, dtype, bytes, and
 * whether each completed), to `f`. The timeout path calls it with stderr. */
void ts_comm_print_recent(FILE *f);

/* ===========================================================================
 * 4. The backend interface
 *
 * A transport implements the non-blocking start of each operation plus test,
 * split, free and abort; the core does everything else (argument checks,
 * counters, sequence numbers, the recent-operations record, polling waits and
 * timeouts, request objects). Fields are only ever appended; `version` first.
 *
 * Every start slot gets the backend context, arguments already checked by the
 * core (buffers non-NULL when their count is non-zero, dtype supported for
 * reductions, peers and roots in range, v-form arrays of `size` entries with
 * displacements filled in by the core), and returns TS_OK with *req set to a
 * backend request, or an error (message set with ts_error, *req untouched).
 * A backend that completes an operation inside start sets *req = NULL.
 * In-place calls arrive as the caller made them (all_reduce send == recv;
 * all_gather(v) send inside recv at this rank's block; reduce_scatter recv
 * inside send at this rank's block): the backend recognises them.
 * Size arrays are borrowed for the call only: a backend whose transport keeps
 * referring to them until completion (MPI does) must copy them.
 * ======================================================================== */

#define TS_COMM_OPS_VERSION 1

typedef struct ts_comm_ops {
    int version;      /* TS_COMM_OPS_VERSION                            */
    const char *name; /* "mpi", "nccl", ... (static storage)            */

    ts_status (*all_reduce)(void *ctx, const void *send, void *recv, size_t count, ts_dtype dtype,
                            ts_reduce_op op, void **req);
    ts_status (*all_gather)(void *ctx, const void *send, void *recv, size_t count, ts_dtype dtype,
                            void **req);
    /* counts and displs (offsets in elements into recv) of every rank. */
    ts_status (*all_gatherv)(void *ctx, const void *send, void *recv, const size_t *counts,
                             const size_t *displs, ts_dtype dtype, void **req);
    ts_status (*reduce_scatter)(void *ctx, const void *send, void *recv, size_t count,
                                ts_dtype dtype, ts_reduce_op op, void **req);
    /* blocks packed in send; this rank receives counts[rank] elements. */
    ts_status (*reduce_scatter_v)(void *ctx, const void *send, void *recv, const size_t *counts,
                                  ts_dtype dtype, ts_reduce_op op, void **req);
    ts_status (*all_to_all)(void *ctx, const void *send, void *recv, size_t count, ts_dtype dtype,
                            void **req);
    ts_status (*all_to_allv)(void *ctx, const void *send, const size_t *send_counts,
                             const size_t *send_displs, void *recv, const size_t *recv_counts,
                             const size_t *recv_displs, ts_dtype dtype, void **req);
    ts_status (*broadcast)(void *ctx, void *buf, size_t count, ts_dtype dtype, int root,
                           void **req);
    ts_status (*send)(void *ctx, const void *buf, size_t count, ts_dtype dtype, int peer, int tag,
                      void **req);
    ts_status (*recv)(void *ctx, void *buf, size_t count, ts_dtype dtype, int peer, int tag,
                      void **req);
    /* Optional (NULL): the core runs a one-element i32 all_reduce instead. */
    ts_status (*barrier)(void *ctx, void **req);

    /* Progresses `req` without blocking. On *done = 1 the backend has
     * released `req` and returns the operation's status (TS_ERR_COMM with a
     * message for a transport error or a recv count mismatch). Never called
     * with a NULL req. Returning an error also means done and released. A
     * request that never completes is never released (the core leaks it after
     * a timeout rather than free memory the transport may still use). */
    ts_status (*test)(void *ctx, void *req, int *done);

    /* Creates the backend context of the new communicator this rank joins.
     * Called on every rank of the parent (collective over it, like
     * MPI_Comm_split and ncclCommSplit) after the core has exchanged colors
     * and keys, so every rank has already arrived. For color >= 0: `members`
     * lists the new communicator's ranks as parent ranks, in new-rank order
     * (by key, ties by parent rank), `new_size` entries, this rank at
     * `new_rank`; the backend must produce that order. For color < 0:
     * members NULL, new_size 0, new_rank -1, and *new_ctx must be set NULL. */
    ts_status (*split)(void *ctx, int color, int key, const int *members, int new_size,
                       int new_rank, void **new_ctx);
    /* Releases a context (local). */
    void (*free)(void *ctx);
    /* Optional (NULL: the core calls _Exit): ends the whole job with `code`. */
    void (*abort)(void *ctx, int code);
} ts_comm_ops;

/* Wraps a backend context into a communicator.
 * Inputs:  ops — must outlive the communicator (normally a static const);
 *          ctx — ownership passes to the communicator (ops->free releases
 *                it in ts_comm_free, also when this call fails);
 *          world_ranks — `size` entries, copied (NULL: 0..size-1).
 * Outputs: *out, released with ts_comm_free.
 * Failure: TS_ERR_INVALID for a version mismatch, a missing required slot, a
 *          bad name, rank or size; TS_ERR_NOMEM. */
ts_status ts_comm_create(const ts_comm_ops *ops, void *ctx, const char *name, int rank, int size,
                         const int *world_ranks, double timeout_s, ts_comm **out);

/* The backend context of `comm` (for a backend's own helpers, e.g. the NCCL
 * backend bootstrapping over an MPI communicator: prefer ts_comm_broadcast of
 * the unique id, which needs no context at all). */
void *ts_comm_backend_ctx(const ts_comm *comm);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_COMM_H */
