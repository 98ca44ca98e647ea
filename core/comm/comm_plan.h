/*
 * comm_plan.h — communicators of `tessera plan`'s dry run: a rank `rank` of
 * a group of `size` that exchanges nothing and completes every operation at
 * once, counted like any communicator (comm.h's counters), so that one
 * rank's dry run yields the calls and bytes of every group and op that its
 * real run would have.
 *
 * What it does not do: move data between ranks. Buffers of the dry run's
 * memory (backend_plan.h) are left alone; host buffers see what one rank
 * alone would (a sum of one, its own block, zeros received).
 */
#ifndef TESSERA_CORE_COMM_PLAN_H
#define TESSERA_CORE_COMM_PLAN_H

#include "tessera/comm.h"

#include "dry_run.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A dry run's communicator: rank `rank` of `size`, its context `dr` (whose
 * clock its operations occupy, whose memory it leaves alone). */
ts_status ts_comm_plan_create(ts_dry_run *dr, const char *name, int rank, int size,
                              ts_comm **out);
/* The dry run of a dry run's communicator (or of one split from it); NULL
 * for any other communicator. */
ts_dry_run *ts_comm_plan_dry_run(const ts_comm *comm);

/* The part of ts_comm_counter(comm, op) started while a forward ran again
 * inside a backward (activation recomputation, phase.h), on any
 * communicator: what recomputation adds to a step's traffic. Seconds are
 * not kept apart (0). */
ts_comm_op_counter ts_comm_counter_recompute(const ts_comm *comm, ts_comm_op op);

/* The link a dry run's communicator occupies on the clock (plan_clock.h):
 * each of its operations then takes the link's time for its kind, size and
 * bytes. NULL (the default): operations take no time. */
struct ts_plan_link;
ts_status ts_comm_plan_set_link(ts_comm *comm, const struct ts_plan_link *link);

/* For a thread that only dry-runs (the layout search's): the communicators
 * it drives stop reading the wall clock, so their timings are 0, nothing
 * times out and the record of recent operations (for a real run's
 * timeout) is left alone. Not to be undone; the calling thread only. */
void ts_comm_plan_untimed(void);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_COMM_PLAN_H */
