/*
 * phase.h — what the step is running, for the counters that tell work
 * apart: whether a forward runs again inside a backward (activation
 * recomputation: the dry run's FLOPs in backend_plan.c, every
 * communicator's operations in comm.h's ts_comm_counter_recompute), set by
 * the model runtime around each recomputed forward; and which schedule
 * action runs (the dry run's clock, plan_clock.h), set by the executor.
 * Process-wide.
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

/* Sets the schedule action running (a ts_action_kind, or -1: none);
 * returns the previous one. */
int ts_phase_set_action(int kind);
/* The action running, -1 outside the actions. */
int ts_phase_action(void);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_PHASE_H */
