/*
 * trace.h — the trace recorder: timed spans of what each rank did (forward,
 * backward, send, recv, wait, all_reduce, optimizer_step, ...) with their
 * micro-batch, stage and chunk, written at the end of a run as ONE Chrome
 * trace-event JSON file for all ranks (`[train] trace = PATH`). The file
 * opens in Perfetto (ui.perfetto.dev) and in chrome://tracing; one process
 * track per rank. docs/trace.md describes the file and how to read it.
 *
 * Tracing off is a NULL pointer. Every function here accepts a NULL trace and
 * then does nothing (returns TS_OK, -1 or 0), so callers write
 *     int64_t s = ts_trace_begin(tr, "forward", TS_TRACE_CAT_COMPUTE, mb, stage, 0);
 *     ... the work ...
 *     ts_trace_end(tr, s);
 * with no `if (tracing)` around it.
 *
 * Recording. A trace holds a fixed-capacity buffer of events, allocated once
 * by ts_trace_create; recording never allocates, never fails and never
 * blocks. When the buffer is full further events are dropped and counted; the
 * count is reported by ts_trace_dropped and in the file ("dropped_events" in
 * otherData). Each event costs TS_TRACE_EVENT_BYTES bytes.
 *
 * Names. The name (at most TS_TRACE_NAME_MAX-1 bytes) and the category (at
 * most TS_TRACE_CAT_MAX-1 bytes) are copied into the event, so any string may
 * be passed, literal or not; longer ones are cut (at a UTF-8 character
 * boundary). The span names the core uses are, with their categories:
 *     forward, backward, optimizer_step    TS_TRACE_CAT_COMPUTE    "compute"
 *     send, recv, wait                     TS_TRACE_CAT_P2P        "p2p"
 *     all_reduce, all_gather, ...          TS_TRACE_CAT_COLLECTIVE "collective"
 *     step (a whole training step)         TS_TRACE_CAT_STEP       "step"
 * Plugins may use their own names and categories.
 *
 * Time. Times are CLOCK_MONOTONIC seconds as returned by ts_trace_now. The
 * file shows them relative to each rank's epoch, in microseconds. Clocks of
 * different hosts are unrelated, so ranks align their epochs: every rank calls
 * ts_trace_sync_epoch(trace, world) (a barrier, then epoch = now) once before
 * the first step; the ranks' zero points then differ by the barrier's exit
 * skew (microseconds on one host, tens of microseconds across a network).
 * Until then the epoch is the moment of ts_trace_create.
 *
 * Tracks. Within a rank's process track every category gets its own thread
 * track (tid), so that, say, a non-blocking recv that overlaps a forward is
 * drawn beside it, not on top of it. Spans of one category that overlap
 * without nesting are spread over extra lanes ("p2p", "p2p #2", ...) when the
 * file is written, so every thread track holds properly nested spans, which
 * is what the viewers require.
 *
 * Threads. A trace is recorded by one thread at a time (the thread that
 * drives the rank); it is not locked.
 *
 * Failure. Functions that can fail return a ts_status and set the last-error
 * message (ts_last_error()).
 *
 * Layer. It lives in core/train, with the trainer that records and writes
 * it (executor.c, report.c), above the communicators its writer uses
 * (docs/layers.md).
 */
#ifndef TESSERA_CORE_TRACE_H
#define TESSERA_CORE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/comm.h"    /* ts_comm, for writing and aligning epochs */
#include "tessera/tessera.h" /* ts_status */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_trace ts_trace;

/* Longest name and category kept, including the terminating NUL. */
#define TS_TRACE_NAME_MAX 32
#define TS_TRACE_CAT_MAX 16
/* Bytes of buffer per event (max_events * this is allocated at create). */
#define TS_TRACE_EVENT_BYTES 96
/* The buffer size used when ts_trace_create is given max_events == 0. */
#define TS_TRACE_DEFAULT_EVENTS ((size_t)1 << 18)
/* The largest buffer accepted (2^26 events, 6 GiB). */
#define TS_TRACE_MAX_EVENTS ((size_t)1 << 26)
/* The point-to-point tag ts_trace_write uses on `world`. */
#define TS_TRACE_TAG 32100

/* The categories of the core's spans (see the table above). */
#define TS_TRACE_CAT_STEP "step"
#define TS_TRACE_CAT_COMPUTE "compute"
#define TS_TRACE_CAT_P2P "p2p"
#define TS_TRACE_CAT_COLLECTIVE "collective"

/* ---------------------------------------------------------------------------
 * Life cycle
 * ------------------------------------------------------------------------- */

/* Creates a trace for `rank` (the world rank: it becomes the pid, the process
 * track "rank N") with room for `max_events` events (0: the default,
 * TS_TRACE_DEFAULT_EVENTS). The epoch is set to now and the step to -1.
 * Outputs: *out — owned by the caller, released with ts_trace_destroy.
 * Failure: TS_ERR_INVALID for out == NULL, rank < 0 or max_events above
 *          TS_TRACE_MAX_EVENTS; TS_ERR_NOMEM. *out is then NULL. */
ts_status ts_trace_create(int rank, size_t max_events, ts_trace **out);
/* Releases a trace. NULL is ignored. */
void ts_trace_destroy(ts_trace *trace);

/* ---------------------------------------------------------------------------
 * Time
 * ------------------------------------------------------------------------- */

/* CLOCK_MONOTONIC now, in seconds (works without a trace). */
double ts_trace_now(void);
/* Sets the epoch: the instant shown as time 0 of this rank in the file. Events
 * already recorded keep their absolute times and are shifted too. */
void ts_trace_set_epoch(ts_trace *trace, double t0);
/* The epoch (0 for a NULL trace). */
double ts_trace_epoch(const ts_trace *trace);
/* Aligns the ranks' time axes: a barrier over `world`, then the epoch is set
 * to now. Collective over `world` when trace is non-NULL, so tracing must be
 * on on every rank or on none. world == NULL: only sets the epoch.
 * Failure: the barrier's (TS_ERR_COMM). */
ts_status ts_trace_sync_epoch(ts_trace *trace, ts_comm *world);

/* Sets the training step stamped (as args.step) on every event recorded from
 * now on; -1 (the initial value) leaves it out. */
void ts_trace_set_step(ts_trace *trace, int64_t step);

/* ---------------------------------------------------------------------------
 * Recording. `mb` (micro-batch), `stage` (pipeline stage) and `chunk` (model
 * chunk on this rank) appear in the event's args when >= 0; pass -1 for
 * "does not apply". Nothing is recorded for a NULL trace or a full buffer
 * (the latter counts as dropped).
 * ------------------------------------------------------------------------- */

/* A complete span from t_start_s to t_end_s (ts_trace_now times). A span that
 * ends before it starts is recorded with zero duration. */
void ts_trace_span(ts_trace *trace, const char *name, const char *cat, double t_start_s,
                   double t_end_s, int mb, int stage, int chunk);

/* Starts a span now and returns its id for ts_trace_end, or -1 when nothing
 * was recorded (NULL trace, full buffer). */
int64_t ts_trace_begin(ts_trace *trace, const char *name, const char *cat, int mb, int stage,
                       int chunk);
/* Ends span `span` (an id from ts_trace_begin) now. -1, an unknown id or a
 * span already ended are ignored. Spans never ended are left out of the file
 * and counted as "open_spans" in its otherData. */
void ts_trace_end(ts_trace *trace, int64_t span);

/* An instant (a zero-length marker, "ph":"i") at time t_s. */
void ts_trace_instant(ts_trace *trace, const char *name, const char *cat, double t_s, int mb,
                      int stage, int chunk);

/* A counter sample ("ph":"C"): the value of series `name` at time t_s, drawn
 * as a counter track of this rank (loss, tokens/s, bytes in flight, ...).
 * Non-finite values are not recorded (JSON has no NaN). */
void ts_trace_counter(ts_trace *trace, const char *name, double t_s, double value);

/* Events recorded (ended or not) and events dropped because the buffer was
 * full (0 for a NULL trace). */
size_t ts_trace_count(const ts_trace *trace);
uint64_t ts_trace_dropped(const ts_trace *trace);

/* ---------------------------------------------------------------------------
 * Writing
 * ------------------------------------------------------------------------- */

/* Writes the events of every rank of `world` into one JSON file at `path`,
 * written by world rank 0 atomically (PATH.tmp, fsync, rename, fsync of the
 * directory). Collective over `world` when trace is non-NULL: every rank must
 * call it, and every rank returns the same status. The other ranks send their
 * events to rank 0 with ts_comm_send under TS_TRACE_TAG, one rank after the
 * other; no other message with that tag may be pending on `world`. The events
 * stay in the trace (a later write writes them again).
 *
 * world == NULL: this process writes its own events alone.
 * Inputs:  path — only read on rank 0 (the other ranks may pass NULL).
 * Failure: TS_ERR_INVALID for a NULL path on rank 0; TS_ERR_IO if the file
 *          cannot be written (on the other ranks the message says that rank 0
 *          could not write it); TS_ERR_NOMEM; TS_ERR_COMM. A failed write
 *          leaves no PATH.tmp behind and any previous PATH untouched.
 * A NULL trace is a no-op (TS_OK), not collective. */
ts_status ts_trace_write(ts_trace *trace, ts_comm *world, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_TRACE_H */
