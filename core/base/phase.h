/*
 * phase.h — whether the step is running a forward again inside a backward
 * (activation recomputation), for the counters that tell that work apart:
 * the dry run's FLOPs (backend_plan.c) and every communicator's operations
 * (comm.h's counters, ts_comm_counter_recompute). Process-wide, set by the
 * model runtime around each recomputed forward.
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
