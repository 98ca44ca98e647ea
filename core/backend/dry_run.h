/*
 * dry_run.h — one dry run of `tessera plan`: the object that holds what a
 * dry run counts and times, so that several can run in one process, each on
 * its own thread (the layout search's, docs/search.md).
 *
 * It holds the clock (the device's rates, the compute stream's time and
 * where it went, the links' epoch: plan_clock.h), the schedule action
 * running (set by the trainer's executor, read by the clock), and the
 * dry-run backend's state (backend_plan.h): its reserved, inaccessible
 * address region, its blocks and free lists, the memory counters per
 * category, the activations' tags and the FLOPs counted.
 *
 * Who reaches it how. The dry run's communicators (comm_plan.h) are created
 * with it as their context, and the trainer of a dry run finds it through
 * its world communicator (ts_comm_plan_dry_run). The backend's kernels take
 * no context (backend.h's signatures are also the CUDA backend's ABI): the
 * table ts_backend_plan returns charges the dry run bound to the calling
 * thread, which ts_backend_plan binds. One dry run runs on one thread at a
 * time; a thread runs one dry run at a time.
 */
#ifndef TESSERA_CORE_DRY_RUN_H
#define TESSERA_CORE_DRY_RUN_H

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_dry_run ts_dry_run;

/* A dry run with its clock off and nothing counted. Reserves the backend's
 * address region (up to 4 TiB of address space, never backed; less where
 * the process has less left, down to 64 GiB). Fails with TS_ERR_NOMEM. */
ts_status ts_dry_run_create(ts_dry_run **out);
/* Frees it and its region; NULL is ignored. Nothing of it may be in use
 * (its backend's blocks, its communicators). */
void ts_dry_run_destroy(ts_dry_run *dr);

/* The schedule action running (a ts_action_kind, or -1: none), whose time
 * the clock charges it; returns the previous one. */
int ts_dry_run_set_action(ts_dry_run *dr, int kind);
int ts_dry_run_action(const ts_dry_run *dr);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_DRY_RUN_H */
