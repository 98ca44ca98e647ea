/*
 * schedule.h — schedules as data, and a unit-time simulator that checks and
 * times a pipeline's schedules without a model.
 *
 * A schedule is, for one rank, the ordered list of actions of one training
 * step: FORWARD(mb, chunk), BACKWARD(mb, chunk), the point-to-point
 * exchanges of activations and their gradients between pipeline stages, and
 * the OPTIMIZER_STEP. It is produced by a pure function of (stages, rank,
 * micro-batches, chunks), so it can be printed and checked without a model;
 * the executor (core/train/executor.c) runs it. The core provides the
 * default one-stage schedule; pipeline plugins register others
 * (host->schedule_append fills a ts_schedule the same way
 * ts_schedule_append does).
 *
 * Conventions every pipeline schedule follows (the simulator checks them):
 *  - Virtual stage. Model chunk c on pipeline rank s holds virtual stage
 *    c*p + s (p = stages); with one chunk, virtual stage = rank. Activations
 *    flow from virtual stage k to k+1, so the boundary after rank p-1 chunk c
 *    wraps to rank 0 chunk c+1 (Megatron-LM's interleaving).
 *  - Transfers. A FORWARD(mb, c) needs RECV_ACT(mb, c) from the previous
 *    virtual stage's rank first (none on virtual stage 0) and its output goes
 *    out with SEND_ACT(mb, c) to the next one's (none on the last virtual
 *    stage). A BACKWARD(mb, c) needs RECV_GRAD(mb, c) from the next virtual
 *    stage's rank (none on the last) and sends SEND_GRAD(mb, c) to the
 *    previous one's (none on virtual stage 0). `chunk` of a transfer is the
 *    chunk on *this* rank; `peer` is the pipeline rank of the other side
 *    (with p = 1 and several chunks, a rank sends to itself).
 *  - Sends are non-blocking (a schedule never waits for a receive to be
 *    posted); receives block until the data is there.
 *
 * The simulator's unit-time model: a FORWARD of one chunk takes f_units time
 * units and a BACKWARD b_units; transfers and the optimizer step take none;
 * a RECV completes at the later of the time its rank reaches it and the time
 * its matching SEND was issued; every rank runs its list in order, each
 * action as soon as it can. The bubble is the idle fraction of the ranks x
 * makespan rectangle, as an exact reduced fraction.
 *
 * It lives in core/base, below the plugin registry (schedulers append to a
 * ts_schedule through the host table) and the trainer, which both use it
 * (docs/layers.md); it needs nothing of the core but ts_status.
 *
 * Not here: generating pipeline schedules (plugins), running them
 * (core/train/executor.c).
 */
#ifndef TESSERA_CORE_SCHEDULE_H
#define TESSERA_CORE_SCHEDULE_H

#include <stdio.h> /* FILE */

#include "tessera/tessera.h" /* ts_status */

#ifdef __cplusplus
extern "C" {
#endif

/* The values of TS_PLUGIN_ACT_* (tessera/plugin.h); core/plugin/loader.c
 * asserts it. */
typedef enum ts_action_kind {
    TS_ACT_FORWARD = 0,
    TS_ACT_BACKWARD = 1,
    TS_ACT_SEND_ACT = 2,  /* send the chunk's output activations downstream  */
    TS_ACT_RECV_ACT = 3,  /* receive the chunk's input activations           */
    TS_ACT_SEND_GRAD = 4, /* send the gradient of the chunk's input upstream */
    TS_ACT_RECV_GRAD = 5, /* receive the gradient of the chunk's output      */
    TS_ACT_OPTIMIZER_STEP = 6,
    TS_ACT_BACKWARD_INPUT = 7,  /* B: the input gradient, weight gradients deferred */
    TS_ACT_BACKWARD_WEIGHT = 8, /* W: the deferred weight gradients                 */
} ts_action_kind;
#define TS_ACT_KINDS 9 /* how many kinds there are */

typedef struct ts_action {
    ts_action_kind kind;
    int mb;    /* micro-batch, -1 for OPTIMIZER_STEP                    */
    int chunk; /* model chunk (virtual stage) on this rank, 0 normally  */
    int peer;  /* pipeline rank of the other side of a send/recv, or -1 */
} ts_action;

/* An empty schedule is {0, NULL}. The array's capacity is always the next
 * power of two at or above nactions (at least 1), so every appender that
 * grows it at powers of two (ts_schedule_append, host->schedule_append) may
 * add to the same schedule. */
typedef struct ts_schedule {
    int nactions;
    ts_action *actions; /* owned; free with ts_schedule_free */
} ts_schedule;

/* The one-stage schedule with gradient accumulation: F0 B0 F1 B1 ... OPT.
 * `out` is overwritten (not freed). TS_ERR_INVALID for micro_batches < 1,
 * TS_ERR_NOMEM; `out` is then empty. */
ts_status ts_schedule_default(int micro_batches, ts_schedule *out);

/* Appends one action, growing the array. TS_ERR_INVALID for an unknown
 * kind, TS_ERR_NOMEM (the schedule is then unchanged). */
ts_status ts_schedule_append(ts_schedule *s, ts_action_kind kind, int mb, int chunk, int peer);

/* Releases the actions and leaves an empty schedule. */
void ts_schedule_free(ts_schedule *s);

/* One line, e.g. "F0 B0 F1 B1 OPT". */
void ts_schedule_print(const ts_schedule *s, FILE *f);

/* The most (micro-batch, chunk) pairs whose FORWARD has run on this rank and
 * whose BACKWARD (or BACKWARD_WEIGHT) has not, over the whole list. The
 * activations kept for the backward grow with it: 1F1B bounds it by
 * p - stage, GPipe's is m. */
int ts_schedule_peak_in_flight(const ts_schedule *s);
/* The most (micro-batch, chunk) pairs whose BACKWARD_INPUT has run and whose
 * BACKWARD_WEIGHT has not: the deferred weight gradients' state held. */
int ts_schedule_peak_deferred(const ts_schedule *s);

/* --- simulation ------------------------------------------------------------ */

/* One time unit of one rank: 'F', 'B' or 'W' of (mb, chunk), or '.' for
 * idle (mb and chunk -1). A compute of several units fills that many slots
 * (a fused BACKWARD's show 'B'). */
typedef struct ts_schedule_slot {
    char op;
    int mb;
    int chunk;
} ts_schedule_slot;

typedef struct ts_schedule_sim {
    int stages, micro_batches, chunks; /* as simulated                          */
    int f_units, b_units;              /* time units of one FORWARD / BACKWARD  */
    int w_units, order;                /* ... of one BACKWARD_WEIGHT; stages'
                                          ts_plugin_stage_order                */
    int makespan;                      /* time of the last compute's end        */
    ts_schedule_slot *slots;           /* [stages][makespan], owned             */
    int *peak_in_flight;               /* [stages], owned                       */
    long busy;                         /* compute units, summed over stages     */
    long bubble_num, bubble_den;       /* idle / (stages * makespan), reduced   */
} ts_schedule_sim;

/* Checks and runs all ranks' lists together under the unit-time model.
 *
 * Inputs:  per_stage — `stages` schedules, per_stage[s] the list of pipeline
 *                      rank s (borrowed);
 *          micro_batches (m), chunks (v, 1 without interleaving),
 *          f_units, b_units — all >= 1.
 * Outputs: *out, filled on success; free it with ts_schedule_sim_free. On
 *          failure *out is empty (freeing it is harmless).
 * Failure: TS_ERR_INVALID, with a message naming the rank and the action
 *          ("schedule: stage 0 action 2 (RECV_GRAD mb 0 chunk 0 peer 1):
 *          ..."), when
 *   - an argument is below 1;
 *   - an action is malformed: unknown kind, micro-batch or chunk out of
 *     range, a transfer with no neighbouring virtual stage on that side, or
 *     a peer that is not the neighbouring virtual stage's rank;
 *   - a (mb, chunk) is not computed exactly once forward and once backward,
 *     a backward comes before its forward, a compute before the receive it
 *     needs, a send before the compute it carries;
 *   - a SEND has no matching RECV or two (matched by direction,
 *     micro-batch, virtual-stage boundary, source and destination), or the
 *     other way round ("2 sends, 1 receives, want one of each");
 *   - OPTIMIZER_STEP is not the last action, or a list does not end with it;
 *   - the ranks deadlock: every unfinished rank is blocked on a receive whose
 *     send can never be issued ("schedule: the schedule deadlocks: stage 0
 *     waits at action 2 (RECV_GRAD mb 0 chunk 0 from rank 1, t=1); ...").
 *   TS_ERR_NOMEM. */
ts_status ts_schedule_simulate(int stages, const ts_schedule *per_stage, int micro_batches,
                               int chunks, int f_units, int b_units, ts_schedule_sim *out);

/* The same with the backward in two parts and virtual stages placed by
 * `order` (ts_plugin_stage_order: INTERLEAVED as above, or V): a
 * BACKWARD_INPUT takes b_units, a BACKWARD_WEIGHT w_units and a fused
 * BACKWARD b_units + w_units (w_units 0: BACKWARD takes b_units, and a list
 * with BACKWARD_WEIGHT is refused). Also refused: a BACKWARD_INPUT without
 * its BACKWARD_WEIGHT on the same rank, or the reverse; a BACKWARD_WEIGHT
 * before its BACKWARD_INPUT; a SEND_GRAD before the BACKWARD_INPUT (or
 * BACKWARD) it carries; a peer that is not the neighbouring virtual stage's
 * rank under `order`. */
typedef struct ts_schedule_shape {
    int stages, micro_batches, chunks;
    int f_units, b_units, w_units;
    int order;
} ts_schedule_shape;
ts_status ts_schedule_simulate_shape(const ts_schedule_shape *shape, const ts_schedule *per_stage,
                                     ts_schedule_sim *out);

/* Releases what ts_schedule_simulate allocated and empties `sim`. */
void ts_schedule_sim_free(ts_schedule_sim *sim);

/* The per-rank timeline, one line per rank and one fixed-width cell per time
 * unit, cells separated by one space:
 *
 *   rank 0 | F0 F1 F2 .  .  B0 F3 B1 .  B2 .  B3      (1F1B, p = 3, m = 4)
 *   rank 1 | .  F0 F1 .  B0 F2 B1 F3 B2 .  B3 .
 *   rank 2 | .  .  F0 B0 F1 B1 F2 B2 F3 B3 .  .
 *   bubble 1/3 = 0.333 (makespan 12 units; F = 1, B = 1)
 *
 * A cell is 'F', 'B' or 'W', the micro-batch, and with chunks > 1 the chunk
 * as a letter (a = chunk 0, b = chunk 1, ...: "F3b"), left-aligned and padded
 * to the widest cell; an idle unit is '.'. The last line gives W's units too
 * when W actions were simulated. */
void ts_schedule_timeline_print(const ts_schedule_sim *sim, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_SCHEDULE_H */
