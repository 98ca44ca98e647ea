/*
 * backend_plan.h — the dry-run backend of `tessera plan`: a ts_backend whose
 * memory is only counted and whose kernels run nothing, so that the real
 * trainer, model, layers and plugins can run one step for any rank of any
 * world without the memory or the time: what they allocate and what their
 * communicators carry (comm_plan.h) is then exactly what a run would.
 *
 * Memory: every block is an address in a reserved, inaccessible region
 * (PROT_NONE), so a stray dereference faults at once instead of reading
 * garbage; blocks of a freed size are reused. Counters per category follow
 * the accounted allocator's rules (allocated bytes, their peak).
 *
 * FLOPs: each GEMM and attention kernel adds what it would compute, apart
 * for forwards, backwards and recomputed forwards (phase.h).
 *
 * Its state is a dry run's (dry_run.h): every block, counter, tag and FLOP
 * below is that dry run's, so dry runs on different threads do not mix.
 *
 * What it does not do: compute anything, or touch host memory except in
 * to_host (which writes zeros).
 */
#ifndef TESSERA_CORE_BACKEND_PLAN_H
#define TESSERA_CORE_BACKEND_PLAN_H

#include "backend.h"
#include "dry_run.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The dry-run backend of `dr` for a run on `target` (whose sizing rules it
 * copies: the attention's saved state and scratch, the bf16 GEMMs'
 * scratch), bound to the calling thread: its kernels, called on this
 * thread, count into `dr` (dry_run.h). The table lives as long as `dr`. */
ts_status ts_backend_plan(ts_dry_run *dr, const ts_backend *target, const ts_backend **out);

/* The dry run's counters of `cat` (TS_MEM_NCAT: all together); reset sets
 * every peak to the current allocation. */
ts_mem_counter ts_backend_plan_stats(const ts_dry_run *dr, ts_mem_category cat);
void ts_backend_plan_reset_peak(ts_dry_run *dr);

/* The activations at their peak by what they hold (ts_backend_tag): up to
 * `max` tags and their bytes, largest first; returns how many. */
int ts_backend_plan_peak_items(const ts_dry_run *dr, const char **tags, size_t *bytes, int max);

/* The FLOPs of the GEMMs and attention products the dry run was asked for
 * since the last reset (2 per multiply-add; attention counts the whole
 * T x T square, as ts_arch.flops): forwards, backwards, and forwards
 * recomputed inside a backward (activation recomputation). */
void ts_backend_plan_flops(const ts_dry_run *dr, double *forward, double *backward,
                           double *recomputed);
void ts_backend_plan_reset_flops(ts_dry_run *dr);

/* 1 when p lies in the region of `dr` (a block of its memory). */
int ts_backend_plan_owns(const ts_dry_run *dr, const void *p);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_BACKEND_PLAN_H */
