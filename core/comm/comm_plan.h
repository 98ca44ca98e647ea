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

#ifdef __cplusplus
extern "C" {
#endif

ts_status ts_comm_plan_create(const char *name, int rank, int size, ts_comm **out);

/* The part of ts_comm_counter(comm, op) started while a forward ran again
 * inside a backward (activation recomputation, phase.h), on any
 * communicator: what recomputation adds to a step's traffic. Seconds are
 * not kept apart (0). */
ts_comm_op_counter ts_comm_counter_recompute(const ts_comm *comm, ts_comm_op op);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_COMM_PLAN_H */
