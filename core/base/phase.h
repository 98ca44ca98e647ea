/*
 * phase.h — whether a forward runs again inside a backward (activation
 * recomputation), for the counters that tell that work apart: the dry run's
 * FLOPs (backend_plan.c) and every communicator's operations (comm.h's
 * ts_comm_counter_recompute). Set by the model runtime around each
 * recomputed forward; kept per thread (the thread running the step: dry
 * runs on other threads have their own). The schedule action running is
 * the dry run's (dry_run.h).
 */
#ifndef TESSERA_CORE_PHASE_H
#define TESSERA_CORE_PHASE_H

#ifdef __cplusplus
extern "C" {
#endif

/* Sets (1) or clears (0) the recomputing phase; returns the previous one. */
int ts_phase_recompute(int on);
/* 1 while a recomputed forward runs. */
int ts_phase_recomputing(void);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_PHASE_H */
