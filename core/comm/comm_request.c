/*
 * comm_request.c — the life of a started operation: its request, the
 * per-process record of recent operations (printed when one times out),
 * polled waits and tests with a deadline, and the timeout that ends the job.
 *
 * Waits never block inside a transport: they call ops->test in a loop with a
 * short back-off, so that a deadline can be enforced (blocking collectives
 * cannot be timed out).
 */
#include "comm_impl.h"
#include "phase.h" /* ts_phase_recomputing: counted apart */

#include <sched.h>  /* sched_yield */
#include <stdio.h>  /* snprintf, fprintf */
#include <stdlib.h> /* calloc, free */
#include <string.h> /* memcpy, memset, strcmp */

/* Polling back-off: a few tight polls for short operations, then yield the
 * core, then sleep briefly so that oversubscribed peers can run. */
static void comm_backoff(unsigned spins) {
    if (spins < 32) return;
    if (spins < 256) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, spins < 2048 ? 20000 : 200000};
    nanosleep(&ts, NULL);
}

/* ---------------------------------------------------------------------------
 * The record of recent operations (per process, over all communicators)
 * ------------------------------------------------------------------------- */

enum { RECENT_RUNNING = 0, RECENT_DONE, RECENT_FAILED, RECENT_TIMEOUT };

typedef struct comm_recent {
    uint64_t id; /* 1-based; 0: empty slot */
    char axis[TS_COMM_NAME_MAX];
    const char *opname;
    uint64_t seq;
    size_t count;
    ts_dtype dtype;
    uint64_t bytes;
    int peer;
    int state;
    double t_start, t_end;
} comm_recent;

static comm_recent comm_recent_ops[TS_COMM_RECENT];
static uint64_t comm_recent_last; /* id of the newest entry */

static uint64_t comm_recent_add(const ts_comm *comm, const ts_comm_request *r, uint64_t bytes) {
    if (!comm_wall_clock) return 0; /* a dry-run thread's: no record (ts_comm_plan_untimed) */
    uint64_t id = ++comm_recent_last;
    comm_recent *e = &comm_recent_ops[id % TS_COMM_RECENT];
    memset(e, 0, sizeof *e);
    e->id = id;
    memcpy(e->axis, comm->name, sizeof e->axis);
    e->opname = r->opname;
    e->seq = r->seq;
    e->count = r->count;
    e->dtype = r->dtype;
    e->bytes = bytes;
    e->peer = r->peer;
    e->state = RECENT_RUNNING;
    e->t_start = comm_now();
    return id;
}

static void comm_recent_mark(uint64_t id, int state) {
    if (!id) return; /* not recorded */
    comm_recent *e = &comm_recent_ops[id % TS_COMM_RECENT];
    if (e->id != id) return; /* already overwritten by newer operations */
    e->state = state;
    e->t_end = comm_now();
}

void ts_comm_print_recent(FILE *f) {
    static const char *states[] = {"RUNNING", "done", "FAILED", "TIMED OUT"};
    double now = comm_now();
    fprintf(f, "tessera: last %d communication operations on this rank, oldest first:\n",
            TS_COMM_RECENT);
    fprintf(f, "  %6s %-12s %-16s %6s %10s %5s %12s %5s %9s %9s  %s\n", "#", "axis", "op", "seq",
            "count", "dtype", "bytes", "peer", "ago_s", "took_s", "state");
    uint64_t first = comm_recent_last >= TS_COMM_RECENT ? comm_recent_last - TS_COMM_RECENT + 1 : 1;
    for (uint64_t id = first; id <= comm_recent_last; id++) {
        const comm_recent *e = &comm_recent_ops[id % TS_COMM_RECENT];
        if (e->id != id) continue;
        char peer[16] = "-", took[32] = "-";
        if (e->peer >= 0) snprintf(peer, sizeof peer, "%d", e->peer);
        if (e->state != RECENT_RUNNING) snprintf(took, sizeof took, "%.6f", e->t_end - e->t_start);
        int none = strcmp(e->opname, "barrier") == 0; /* no payload */
        fprintf(f, "  %6llu %-12s %-16s %6llu %10zu %5s %12llu %5s %9.3f %9s  %s\n",
                (unsigned long long)e->id, e->axis, e->opname, (unsigned long long)e->seq, e->count,
                none ? "-" : ts_dtype_name(e->dtype), (unsigned long long)e->bytes, peer,
                now - e->t_start, took, states[e->state]);
    }
    fflush(f);
}

/* ---------------------------------------------------------------------------
 * Requests: start, poll, finish, timeout
 * ------------------------------------------------------------------------- */

ts_status comm_usable(const ts_comm *comm, const char *opname) {
    if (!comm) return ts_error(TS_ERR_INVALID, "%s: communicator is NULL", opname);
    if (comm->broken)
        return ts_error(TS_ERR_COMM,
                        "%s on axis '%s': the communicator is unusable after an earlier timeout",
                        opname, comm->name);
    return TS_OK;
}

ts_status comm_request_new(ts_comm *comm, int kind, const char *opname, size_t count,
                           ts_dtype dtype, int peer, uint64_t bytes, ts_comm_request **out) {
    ts_comm_request *r = calloc(1, sizeof *r);
    if (!r) return ts_error(TS_ERR_NOMEM, "%s on axis '%s': out of memory", opname, comm->name);
    r->comm = comm;
    r->kind = kind;
    r->opname = opname;
    r->seq = (kind == TS_COMM_SEND || kind == TS_COMM_RECV) ? ++comm->seq_p2p : ++comm->seq_coll;
    r->count = count;
    r->dtype = dtype;
    r->peer = peer;
    r->recent_id = comm_recent_add(comm, r, bytes);
    *out = r;
    return TS_OK;
}

ts_status comm_request_started(ts_comm_request *r, ts_status st, double t0, uint64_t bytes,
                               ts_comm_request **req) {
    r->seconds += comm_now() - t0;
    if (st != TS_OK) {
        comm_recent_mark(r->recent_id, RECENT_FAILED);
        free(r);
        *req = NULL;
        return st;
    }
    if (r->kind < TS_COMM_NOPS) {
        r->comm->counters[r->kind].calls++;
        r->comm->counters[r->kind].bytes += bytes;
        if (ts_phase_recomputing()) {
            r->comm->recomputed[r->kind].calls++;
            r->comm->recomputed[r->kind].bytes += bytes;
        }
    }
    *req = r;
    return TS_OK;
}

static void comm_request_finish(ts_comm_request *r, ts_status st) {
    if (r->kind < TS_COMM_NOPS) r->comm->counters[r->kind].seconds += r->seconds;
    comm_recent_mark(r->recent_id, st == TS_OK ? RECENT_DONE : RECENT_FAILED);
    free(r);
}

static ts_status comm_timeout(ts_comm_request *r) {
    ts_comm *comm = r->comm;
    char what[160];
    if (r->kind == TS_COMM_BARRIER)
        snprintf(what, sizeof what, "barrier #%llu", (unsigned long long)r->seq);
    else if (r->kind == COMM_KIND_SPLIT)
        snprintf(what, sizeof what, "split #%llu (color exchange)", (unsigned long long)r->seq);
    else if (r->peer >= 0)
        snprintf(what, sizeof what, "%s #%llu (count %zu %s, peer %d)", r->opname,
                 (unsigned long long)r->seq, r->count, ts_dtype_name(r->dtype), r->peer);
    else
        snprintf(what, sizeof what, "%s #%llu (count %zu %s)", r->opname,
                 (unsigned long long)r->seq, r->count, ts_dtype_name(r->dtype));
    int p2p = r->kind == TS_COMM_SEND || r->kind == TS_COMM_RECV;
    ts_status st =
        ts_error(TS_ERR_COMM, "%s timeout after %gs on axis '%s': %s did not complete",
                 p2p ? "point-to-point" : "collective", comm->timeout_s, comm->name, what);
    comm_recent_mark(r->recent_id, RECENT_TIMEOUT);
    fprintf(stderr, "tessera: %s\n", ts_last_error());
    ts_comm_print_recent(stderr);
    if (comm->abort_on_timeout) {
        fprintf(stderr, "tessera: aborting the job after a communication timeout on axis '%s'\n",
                comm->name);
        ts_comm_abort(comm, (int)TS_ERR_COMM);
    }
    /* The backend request stays in flight: leak it rather than free memory
     * the transport may still use, and refuse further work on this axis. */
    comm->broken = 1;
    free(r);
    return st;
}

/* Polls `r` until it completes (block) or once (!block). On completion the
 * request is released and *done = 1. */
static ts_status comm_progress(ts_comm_request *r, int block, int *done) {
    ts_comm *comm = r->comm;
    *done = 0;
    if (!r->breq) {
        *done = 1;
        comm_request_finish(r, TS_OK);
        return TS_OK;
    }
    double t0 = comm_now();
    if (r->wait_begin == 0.0) r->wait_begin = t0;
    double deadline = comm->timeout_s > 0 ? r->wait_begin + comm->timeout_s : -1.0;
    for (unsigned spins = 0;; spins++) {
        int d = 0;
        ts_status st = comm->ops->test(comm->ctx, r->breq, &d);
        double t = comm_now();
        if (st != TS_OK || d) {
            r->seconds += t - t0;
            *done = 1;
            comm_request_finish(r, st);
            return st;
        }
        if (deadline > 0 && t > deadline) {
            r->seconds += t - t0;
            *done = 1; /* released */
            return comm_timeout(r);
        }
        if (!block) {
            r->seconds += t - t0;
            return TS_OK;
        }
        comm_backoff(spins);
    }
}

ts_status ts_comm_wait(ts_comm_request *req) {
    if (!req) return TS_OK;
    int done;
    return comm_progress(req, 1, &done);
}

ts_status ts_comm_wait_all(ts_comm_request **reqs, int n) {
    ts_status first = TS_OK;
    for (int i = 0; i < n; i++) {
        ts_status st = ts_comm_wait(reqs[i]);
        reqs[i] = NULL;
        if (st && !first) first = st;
    }
    return first;
}

ts_status ts_comm_test(ts_comm_request *req, int *done) {
    if (!done) return ts_error(TS_ERR_INVALID, "ts_comm_test: done is NULL");
    if (!req) {
        *done = 1;
        return TS_OK;
    }
    return comm_progress(req, 0, done);
}
