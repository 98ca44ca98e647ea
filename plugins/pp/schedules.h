/*
 * schedules.h — the pp plugin's pipeline schedules as pure data, and a
 * unit-time simulator that checks and times them without a model.
 *
 * Three generators answer "what does stage `stage` of `stages` do in one
 * training step of `m` micro-batches": GPipe (all forwards, then all
 * backwards), Megatron-LM's non-interleaved 1F1B, and Megatron-LM's
 * interleaved 1F1B (Narayanan et al., SC'21). Each returns the rank's
 * ordered action list (core/schedule.h) ending with OPTIMIZER_STEP.
 *
 * Conventions shared by all three:
 *  - Virtual stage. Model chunk c on stage s holds virtual stage c*p + s
 *    (p = stages); GPipe and 1F1B have one chunk, so virtual stage = stage.
 *    Activations flow from virtual stage k to k+1, so the boundary after
 *    stage p-1 chunk c wraps to stage 0 chunk c+1.
 *  - Transfers. Every FORWARD(mb, c) is preceded by RECV_ACT(mb, c) from the
 *    previous virtual stage's rank (none on virtual stage 0) and followed by
 *    SEND_ACT(mb, c) to the next one's (none on the last virtual stage).
 *    Every BACKWARD(mb, c) is preceded by RECV_GRAD(mb, c) from the next
 *    virtual stage's rank (none on the last) and followed by SEND_GRAD(mb, c)
 *    to the previous one's (none on virtual stage 0). `chunk` of a transfer
 *    is the chunk on *this* rank; `peer` is the pipeline rank of the other
 *    side (with p = 1 and interleaving, a rank sends to itself).
 *  - Sends are non-blocking (the schedule never waits for a receive to be
 *    posted); receives block until the data is there.
 *
 * The generators know nothing of the plugin ABI: they emit through a
 * pp_append_fn, so the plugin's scheduler callback can forward to
 * host->schedule_append, while tests and `tessera plan` fill a ts_schedule.
 *
 * The simulator's unit-time model: FORWARD and BACKWARD of one chunk take a
 * whole number of time units (1 and 1 unless told otherwise), transfers and
 * the optimizer step take none, a RECV completes at the later of the time
 * its stage reaches it and the time its matching SEND was issued, and every
 * stage runs its list in order, each action as soon as it can. With interleaving a unit is one
 * chunk's forward, 1/v of a stage's layers. Under F = B = 1 the bubble
 * (idle units over stages x makespan) of GPipe and 1F1B is exactly
 * (p-1)/(m+p-1), and interleaved 1F1B's is (p-1)/(v*m+p-1): idle time per
 * unit of work, (p-1)/m, shrinks by the factor v to (p-1)/(v*m), as in
 * Narayanan et al. The fractions stay the same with B = 2 units.
 * tests/test_schedules.c checks all of this as exact fractions.
 *
 * Not here: running a schedule (core/train.c's executor), and choosing m
 * from the batch sizes (the plugin's configuration).
 */
#ifndef TESSERA_PLUGINS_PP_SCHEDULES_H
#define TESSERA_PLUGINS_PP_SCHEDULES_H

#include <stdio.h>

#include "schedule.h"        /* ts_schedule, ts_action, ts_action_kind */
#include "tessera/tessera.h" /* ts_status */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pp_schedule_kind {
    PP_SCHEDULE_GPIPE = 0,       /* all forwards, then all backwards              */
    PP_SCHEDULE_1F1B = 1,        /* warmup forwards, one-forward-one-backward,
                                    cooldown backwards                            */
    PP_SCHEDULE_INTERLEAVED = 2, /* 1F1B over v model chunks per stage            */
} pp_schedule_kind;

/* "gpipe", "1f1b", "interleaved". */
const char *pp_schedule_kind_name(pp_schedule_kind kind);
/* Parses one of the names above; TS_ERR_CONFIG naming the choices otherwise. */
ts_status pp_schedule_kind_parse(const char *name, pp_schedule_kind *out);

/* Receives one action, in execution order. Return non-zero to stop the
 * generator (it then returns that status). */
typedef ts_status (*pp_append_fn)(void *user, ts_action_kind kind, int mb, int chunk, int peer);

/* Checks a schedule's arguments without producing it. `chunks` (v) is read
 * only for PP_SCHEDULE_INTERLEAVED. Returns 0 if they are valid, otherwise
 * non-zero with a one-line reason in `why` (e.g. "interleaved: micro_batches=6
 * is not divisible by stages=4"). Pure: touches no global state, so a plugin
 * can report the reason with host->error. */
int pp_schedule_check(pp_schedule_kind kind, int stages, int stage, int micro_batches, int chunks,
                      char *why, size_t why_size);

/* Emits the actions of stage `stage` through `append`. Invalid arguments
 * (pp_schedule_check) fail with TS_ERR_CONFIG and the reason as the last
 * error; a failing `append` stops the generator with its status. */
ts_status pp_schedule_emit(pp_schedule_kind kind, int stages, int stage, int micro_batches,
                           int chunks, pp_append_fn append, void *user);

/* The three generators, filling `out` (which the caller frees with
 * ts_schedule_free). On failure `out` is left empty. Errors: TS_ERR_CONFIG
 * for stages < 1, stage outside 0..stages-1, micro_batches < 1, and for
 * interleaved chunks < 2 or micro_batches not divisible by stages;
 * TS_ERR_NOMEM.
 *
 * 1F1B: warmup = min(p - stage - 1, m) forwards, then pairs of one forward
 * and one backward, then the remaining backwards (Megatron-LM's
 * forward_backward_pipelining_without_interleaving).
 *
 * Interleaved: the m*v forwards of (micro-batch, chunk) run in groups of p
 * micro-batches per chunk (chunk 0 for micro-batches 0..p-1, chunk 1 for the
 * same ones, ..., then the next p); backwards likewise from the last chunk
 * down. Warmup = (p - stage - 1)*2 + (v - 1)*p forwards, at most m*v
 * (Megatron-LM's forward_backward_pipelining_with_interleaving; Megatron
 * also makes every forward a warmup one when m == p, which its paired
 * blocking send/recv needs and our non-blocking sends do not: the simulator
 * finds no deadlock and the same bubble without it, with fewer activations
 * in flight). */
ts_status pp_schedule_gpipe(int stages, int stage, int micro_batches, ts_schedule *out);
ts_status pp_schedule_1f1b(int stages, int stage, int micro_batches, ts_schedule *out);
ts_status pp_schedule_interleaved(int stages, int stage, int micro_batches, int chunks,
                                  ts_schedule *out);
/* Any of the three by kind (`chunks` read only for interleaved). */
ts_status pp_schedule_build(pp_schedule_kind kind, int stages, int stage, int micro_batches,
                            int chunks, ts_schedule *out);

/* The most micro-batches whose forward has run on this rank and whose
 * backward has not, over the whole list (for interleaved, (mb, chunk) pairs
 * count one each). Activations kept for the backward grow with it: 1F1B
 * bounds it by p - stage, GPipe's is m. */
int pp_schedule_peak_in_flight(const ts_schedule *s);

/* --- simulation ------------------------------------------------------------ */

/* One time unit of one stage: 'F' or 'B' of (mb, chunk), or '.' for idle. A
 * backward of b_units > 1 fills that many consecutive slots. */
typedef struct pp_sim_slot {
    char op;
    int mb;
    int chunk;
} pp_sim_slot;

typedef struct pp_sim_result {
    int stages, micro_batches, chunks; /* as simulated                          */
    int f_units, b_units;              /* time units of one FORWARD / BACKWARD  */
    int makespan;                      /* time of the last compute's end        */
    pp_sim_slot *slots;                /* [stages][makespan], owned             */
    int *peak_in_flight;               /* [stages], owned                       */
    long busy;                         /* compute units, summed over stages     */
    long bubble_num, bubble_den;       /* idle / (stages * makespan), reduced   */
} pp_sim_result;

/* Checks and runs all stages' lists together under the unit-time model with
 * F = B = 1. schedules[i] is stage i's list; `chunks` is v (1 for GPipe and
 * 1F1B). Fails (TS_ERR_INVALID, with a message naming the stage and action)
 * when an action is malformed (micro-batch, chunk or peer out of range, or a
 * peer that is not the neighbouring virtual stage's rank), a SEND has no
 * matching RECV or two (matched by direction, micro-batch, virtual-stage
 * boundary, source and destination) or the other way round, a (mb, chunk)
 * is not computed exactly once forward and once backward, a backward comes
 * before its forward on its rank, OPTIMIZER_STEP is not the last action or
 * appears twice, or the stages deadlock (every unfinished stage blocked on
 * a receive whose send can never be issued). `out` is filled on success and
 * freed with pp_sim_result_free. */
ts_status pp_simulate(int stages, const ts_schedule *schedules, int micro_batches, int chunks,
                      pp_sim_result *out);
/* The same with a FORWARD taking f_units and a BACKWARD b_units (>= 1). */
ts_status pp_simulate_timed(int stages, const ts_schedule *schedules, int micro_batches, int chunks,
                            int f_units, int b_units, pp_sim_result *out);
void pp_sim_result_free(pp_sim_result *r);

/* The per-rank timeline, one line per rank and one fixed-width cell per time
 * unit, cells separated by one space:
 *
 *   rank 0 | F0 F1 F2 .  .  B0 F3 B1 .  B2 .  B3      (1F1B, p = 3, m = 4)
 *   rank 1 | .  F0 F1 .  B0 F2 B1 F3 B2 .  B3 .
 *   rank 2 | .  .  F0 B0 F1 B1 F2 B2 F3 B3 .  .
 *   bubble 1/3 = 0.333 (makespan 12 units; F = 1, B = 1)
 *
 * A cell is 'F' or 'B', the micro-batch, and with chunks > 1 the chunk as a
 * letter (a = chunk 0, b = chunk 1, ...: "F3b"), left-aligned and padded to
 * the widest cell; an idle unit is '.'. */
void pp_timeline_print(const pp_sim_result *r, FILE *f);

/* The closed form of the unit-time bubble (F = 1, B = 1 or 2) as a reduced fraction:
 * (p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v*m+p-1) for interleaved (the
 * fill and drain of p-1 chunk-units against v*m chunk-units of work per
 * stage). Fails with TS_ERR_CONFIG for p < 1, m < 1 or (interleaved) v < 1. */
ts_status pp_bubble_formula(pp_schedule_kind kind, int stages, int micro_batches, int chunks,
                            long *num, long *den);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_PLUGINS_PP_SCHEDULES_H */
