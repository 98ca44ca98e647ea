/*
 * comm_impl.h — what the communicator's files share (not installed): the
 * communicator and request structures and the request bookkeeping that
 * every operation goes through.
 *
 *   comm.c          creation, argument checks, the operations, split,
 *                   counters and bandwidth
 *   comm_request.c  requests: the record of recent operations, polled
 *                   waits, timeouts
 *   comm_self.c     the size-1 "self" backend
 */
#ifndef TESSERA_CORE_COMM_IMPL_H
#define TESSERA_CORE_COMM_IMPL_H

#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep under -std=c11 */

#include <time.h> /* clock_gettime */

#include "internal.h"
#include "tessera/comm.h" /* the API, the ops table, ts_error */

struct ts_comm {
    const ts_comm_ops *ops;
    void *ctx;
    char name[TS_COMM_NAME_MAX];
    int rank, size;
    int *world_ranks; /* size entries */
    double timeout_s;
    int abort_on_timeout;
    int broken;        /* a timed-out op may still be in flight */
    uint64_t seq_coll; /* collectives started, split exchanges included */
    uint64_t seq_p2p;  /* sends and recvs started */
    ts_comm_op_counter counters[TS_COMM_NOPS];
    /* The part of `counters` started while a forward ran again inside a
     * backward (phase.h: activation recomputation). */
    ts_comm_op_counter recomputed[TS_COMM_NOPS];
};

/* An internal kind for the split's exchange: recorded, never counted. */
#define COMM_KIND_SPLIT TS_COMM_NOPS

struct ts_comm_request {
    ts_comm *comm;
    void *breq;         /* the backend's request (NULL: already complete) */
    int kind;           /* ts_comm_op or COMM_KIND_SPLIT */
    const char *opname; /* as shown in messages: "all_gatherv", ... */
    uint64_t seq;
    size_t count;
    ts_dtype dtype;
    int peer;           /* send/recv only, else -1 */
    uint64_t recent_id; /* its entry in the recent-operations record */
    double seconds;     /* time spent in start, wait and test so far */
    double wait_begin;  /* when waiting started (0: not yet) */
    int32_t scratch;    /* the core's barrier fallback reduces this */
};

/* 0 on a thread after ts_comm_plan_untimed: no wall clock is read there
 * (timings stay 0) and no recent operation recorded. */
TS_INTERNAL extern _Thread_local int comm_wall_clock;

static inline double comm_now(void) {
    if (!comm_wall_clock) return 0.0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Fails for a NULL communicator or one broken by an earlier timeout. */
TS_INTERNAL ts_status comm_usable(const ts_comm *comm, const char *opname);
/* Makes the request of an operation about to start: its sequence number and
 * its entry in the record of recent operations. */
TS_INTERNAL ts_status comm_request_new(ts_comm *comm, int kind, const char *opname, size_t count,
                                       ts_dtype dtype, int peer, uint64_t bytes,
                                       ts_comm_request **out);
/* Completes the bookkeeping of a started operation (`st`: the backend's
 * answer, t0 when it started): on success charges the counters and hands
 * the request out in *req; on failure releases it. */
TS_INTERNAL ts_status comm_request_started(ts_comm_request *r, ts_status st, double t0,
                                           uint64_t bytes, ts_comm_request **req);

#endif /* TESSERA_CORE_COMM_IMPL_H */
