/*
 * schedules.h — the pp plugin's pipeline schedules as pure functions: GPipe,
 * Megatron-LM's 1F1B and Megatron-LM's interleaved 1F1B (Narayanan et al.,
 * SC'21), their argument checks and the closed form of their bubble.
 *
 * Each generator answers "what does pipeline rank `stage` of `stages` do in
 * one training step of `m` micro-batches" by emitting the rank's actions in
 * execution order through a callback, ending with OPTIMIZER_STEP. The
 * conventions (virtual stage c*p + s, each compute wrapped in its receive
 * and send, non-blocking sends) are the core's, stated in core/base/schedule.h;
 * its unit-time simulator (ts_schedule_simulate) is what the tests check
 * these schedules with.
 *
 * Core-free on purpose: nothing here calls into libtessera (no ts_error, no
 * allocation), so the file links into tessera-pp.so built with
 * -Wl,--no-undefined. Failures are TS_ERR_* codes (tessera/tessera.h) with
 * the reason written to a caller's buffer; the plugin reports it with
 * host->error, and its emit callback forwards to host->schedule_append.
 *
 * Not here: simulating or printing timelines (core/base/schedule.h), running a
 * schedule (the core's executor), choosing m (the core's batch settings).
 */
#ifndef TESSERA_PLUGINS_PP_SCHEDULES_H
#define TESSERA_PLUGINS_PP_SCHEDULES_H

#include <stddef.h> /* size_t */

#include "tessera/plugin.h"        /* TS_PLUGIN_ACT_*: the action kinds emitted */
#include "tessera/tessera_types.h" /* ts_status, TS_ERR_*                       */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pp_schedule_kind {
    PP_SCHEDULE_GPIPE = 0,       /* all forwards, then all backwards              */
    PP_SCHEDULE_1F1B = 1,        /* warmup forwards, one-forward-one-backward,
                                    cooldown backwards                            */
    PP_SCHEDULE_INTERLEAVED = 2, /* 1F1B over v model chunks per stage            */
    PP_SCHEDULE_ZB_H1 = 3,       /* zero bubble, 1F1B's memory: W deferred          */
    PP_SCHEDULE_ZB_V = 4,        /* zero bubble, two chunks per rank in V order     */
} pp_schedule_kind;

/* The stage order a kind needs (TS_STAGES_V for zb_v, else INTERLEAVED). */
int pp_schedule_kind_order(pp_schedule_kind kind);

/* "gpipe", "1f1b", "interleaved", "zb_h1", "zb_v"; "?" for anything else. */
const char *pp_schedule_kind_name(pp_schedule_kind kind);

/* Parses one of the names above into *out. TS_ERR_CONFIG (and *out
 * unchanged) for anything else, including NULL. */
ts_status pp_schedule_kind_parse(const char *name, pp_schedule_kind *out);

/* Receives one action, in execution order: kind is a TS_PLUGIN_ACT_* value,
 * mb the micro-batch (-1 for the optimizer step), chunk the model chunk on
 * this rank, peer the pipeline rank of a transfer's other side (-1
 * otherwise). Return non-zero to stop the generator, which then returns that
 * status. */
typedef ts_status (*pp_append_fn)(void *user, int kind, int mb, int chunk, int peer);

/* Checks a schedule's arguments without producing it. `chunks` (v) is read
 * only for PP_SCHEDULE_INTERLEAVED and PP_SCHEDULE_ZB_V. Returns 0 if they
 * are valid, otherwise non-zero with a one-line reason in `why` (why_size
 * bytes, NUL-terminated, e.g. "interleaved: micro_batches=6 is not divisible
 * by stages=4"): stages < 1, stage outside 0..stages-1, micro_batches < 1,
 * an unknown kind; for interleaved chunks < 2 or micro_batches % stages !=
 * 0; for zb_v chunks other than 2; products (computed in 64 bits) that the
 * lists count in int: 7 x micro_batches x chunks + 1 actions a rank, and
 * for zb_v 6 x stages x micro_batches simulated steps. */
int pp_schedule_check(pp_schedule_kind kind, int stages, int stage, int micro_batches, int chunks,
                      char *why, size_t why_size);

/* Emits the actions of rank `stage` through `append`.
 *
 * Arguments that pp_schedule_check rejects fail with TS_ERR_CONFIG before
 * anything is emitted (ask pp_schedule_check for the reason); a failing
 * `append` stops the generator with its status, after the actions before it.
 *
 * GPipe: the m forwards, then the m backwards, in micro-batch order.
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
 * in flight).
 *
 * ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): 1F1B's order
 * with each backward split into B (BACKWARD_INPUT) and W (BACKWARD_WEIGHT):
 * warmup = min(p - stage - 1, m) forwards; then F, B pairs, each followed by
 * the oldest pending W except in the first `stage` pairs; in the cooldown
 * each B is followed by a W; the remaining Ws last. Deferring `stage` Ws
 * fills the cooldown's bubble with them: with F, B and W of one unit each,
 * every rank idles p - 1 units where 1F1B idles 3 (p - 1), at 1F1B's
 * activations in flight (plus the deferred Ws' state, at most `stage`).
 *
 * ZB-V: two chunks per rank in V order (TS_STAGES_V: rank s holds virtual
 * stages s and 2p - 1 - s), B and W split, made by list scheduling all ranks
 * together under the unit-time model: a free rank runs the first of a ready
 * B (chunk 0 before chunk 1), a ready F (chunk 1 before chunk 0, in
 * micro-batch order, while fewer than 2p (micro-batch, chunk) pairs hold
 * activations there: 1F1B's first stage's memory) and its oldest pending W,
 * and idles otherwise. The simulation gives every rank's order at once:
 * pp_schedule_emit_cached keeps it for the other ranks of the shape. */
ts_status pp_schedule_emit(pp_schedule_kind kind, int stages, int stage, int micro_batches,
                           int chunks, pp_append_fn append, void *user);

/* One computation of a cached rank's order, packed in 32 bits: micro-batch
 * x 8 + chunk x 4 + op (0 F, 1 B, 2 W); pp_schedule_check keeps a
 * micro-batch below 2^28. */
typedef unsigned pp_schedule_step;
#define PP_STEP(mb, chunk, op)                                                                     \
    ((pp_schedule_step)(mb) << 3 | (unsigned)(chunk) << 2 | (unsigned)(op))
#define PP_STEP_MB(x) ((int)((x) >> 3))
#define PP_STEP_CHUNK(x) ((int)((x) >> 2 & 1u))
#define PP_STEP_OP(x) ((int)((x)&3u))

/* What a generator keeps between calls of one shape: ZB-V's simulation of
 * every rank together, made at the first call for (stages, micro_batches)
 * and read by the next ranks' (the core asks for all p ranks in a row: p
 * simulations cost p^2 x the makespan, one costs p x it). The caller owns
 * it: zero-initialised, then passed to every pp_schedule_emit_cached call,
 * freed with pp_schedule_cache_free. Another shape replaces what it holds. */
typedef struct pp_schedule_cache {
    int kind, stages, micro_batches, chunks;
    size_t per_rank;         /* steps of each rank                  */
    pp_schedule_step *steps; /* [stages][per_rank], NULL when empty */
} pp_schedule_cache;

/* pp_schedule_emit, with what it may keep in `cache`: the same actions in
 * the same order; TS_ERR_NOMEM if the cache's tables cannot be allocated
 * (nothing emitted then). */
ts_status pp_schedule_emit_cached(pp_schedule_cache *cache, pp_schedule_kind kind, int stages,
                                  int stage, int micro_batches, int chunks, pp_append_fn append,
                                  void *user);
void pp_schedule_cache_free(pp_schedule_cache *cache);

/* Emits one computation of rank `stage` of `stages` (v chunks per rank,
 * virtual stages placed by `order`) with the transfers it implies: 'F' a
 * forward (RECV_ACT, FORWARD, SEND_ACT), 'B' a backward's input part and
 * 'X' a whole backward (RECV_GRAD, BACKWARD_INPUT or BACKWARD, SEND_GRAD),
 * 'W' its weight part (BACKWARD_WEIGHT alone). */
ts_status pp_emit_computation(int order, int stages, int stage, int chunks, char op, int mb,
                              int chunk, pp_append_fn append, void *user);

/* The closed form of the unit-time bubble (F = 1, B = 1 or 2; see
 * core/base/schedule.h for the model) as a reduced fraction *num / *den:
 * (p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v*m+p-1) for interleaved (the
 * fill and drain of p-1 chunk-units against v*m chunk-units of work per
 * rank), and with F = B = W = 1 (p-1)/(3m+p-1) for ZB-H1 when m >= p (p - 1
 * idle units per rank, Qi et al.'s (p-1)(F + B - W)). `chunks` is read only
 * for interleaved. TS_ERR_CONFIG for an unknown kind, p < 1, m < 1,
 * (interleaved) v < 1, ZB-H1 with m < p, or ZB-V (no closed form: ask the
 * simulator); the outputs are then unchanged. */
ts_status pp_bubble_formula(pp_schedule_kind kind, int stages, int micro_batches, int chunks,
                            long *num, long *den);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_PLUGINS_PP_SCHEDULES_H */
