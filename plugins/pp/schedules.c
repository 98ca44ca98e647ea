/*
 * schedules.c — GPipe, 1F1B and interleaved 1F1B as action lists emitted
 * through a callback, their argument checks and their bubble formula (see
 * schedules.h). Calls nothing of libtessera: it is linked into tessera-pp.so.
 *
 * Each generator decides only the order of (micro-batch, chunk) forwards and
 * backwards on its rank; pp_emit_forward / pp_emit_backward wrap each one in
 * its receive and send, so every schedule moves data the same way.
 */
#include "schedules.h"

#include <limits.h> /* INT_MAX: the products of the arguments checked against it */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, free: the ZB-V list scheduler's tables */
#include <string.h>

/* --- names and argument checks ------------------------------------------------ */

#define PP_KINDS 5
static const char *pp_kind_names[PP_KINDS] = {"gpipe", "1f1b", "interleaved", "zb_h1", "zb_v"};

const char *pp_schedule_kind_name(pp_schedule_kind kind) {
    return (unsigned)kind < PP_KINDS ? pp_kind_names[kind] : "?";
}

int pp_schedule_kind_order(pp_schedule_kind kind) {
    return kind == PP_SCHEDULE_ZB_V ? TS_STAGES_V : TS_STAGES_INTERLEAVED;
}

ts_status pp_schedule_kind_parse(const char *name, pp_schedule_kind *out) {
    for (int k = 0; k < PP_KINDS; k++)
        if (name && strcmp(name, pp_kind_names[k]) == 0) {
            *out = (pp_schedule_kind)k;
            return TS_OK;
        }
    return TS_ERR_CONFIG;
}

int pp_schedule_check(pp_schedule_kind kind, int stages, int stage, int micro_batches, int chunks,
                      char *why, size_t why_size) {
    const char *name = pp_schedule_kind_name(kind);
    int v = kind == PP_SCHEDULE_INTERLEAVED || kind == PP_SCHEDULE_ZB_V ? chunks : 1;
    if ((unsigned)kind >= PP_KINDS)
        snprintf(why, why_size, "schedule kind %d is not gpipe, 1f1b, interleaved, zb_h1 or zb_v",
                 (int)kind);
    else if (stages < 1)
        snprintf(why, why_size, "%s: stages=%d, need at least 1", name, stages);
    else if (stage < 0 || stage >= stages)
        snprintf(why, why_size, "%s: stage=%d is outside 0..%d (stages=%d)", name, stage,
                 stages - 1, stages);
    else if (micro_batches < 1)
        snprintf(why, why_size, "%s: micro_batches=%d, need at least 1", name, micro_batches);
    else if (kind == PP_SCHEDULE_INTERLEAVED && chunks < 2)
        snprintf(why, why_size, "interleaved: chunks=%d (virtual stages per rank), need at least 2",
                 chunks);
    else if (kind == PP_SCHEDULE_INTERLEAVED && micro_batches % stages != 0)
        snprintf(why, why_size, "interleaved: micro_batches=%d is not divisible by stages=%d",
                 micro_batches, stages);
    else if (kind == PP_SCHEDULE_ZB_V && chunks != 2)
        snprintf(why, why_size, "zb_v: chunks=%d (virtual stages per rank), need exactly 2",
                 chunks);
    /* Products in 64 bits: a rank's list (at most 7 actions per (micro-
     * batch, chunk): three computations, four transfers) and ZB-V's clock
     * (at most 6 p m units) are counted in int. */
    else if ((long long)micro_batches * v * 7 + 1 > INT_MAX)
        snprintf(why, why_size,
                 "%s: micro_batches=%d x chunks=%d: a rank's list of up to %lld actions does not "
                 "fit in an int",
                 name, micro_batches, v, (long long)micro_batches * v * 7 + 1);
    else if (kind == PP_SCHEDULE_ZB_V && (long long)stages * micro_batches * 6 > INT_MAX)
        snprintf(why, why_size,
                 "zb_v: stages=%d x micro_batches=%d x 6 = %lld steps to simulate, more than an "
                 "int counts",
                 stages, micro_batches, (long long)stages * micro_batches * 6);
    else
        return 0;
    return 1;
}

/* --- generators --------------------------------------------------------------- */

/* Where a stage's actions go, and the pipeline's shape. */
typedef struct pp_emitter {
    pp_append_fn append;
    void *user;
    int p, s, v; /* stages, this stage, chunks          */
    int order;   /* ts_plugin_stage_order of the stages */
} pp_emitter;

/* RECV_ACT, FORWARD, SEND_ACT of (mb, chunk) on its virtual stage. */
static ts_status pp_emit_forward(const pp_emitter *e, int mb, int chunk) {
    int vs = ts_stage_virtual(e->order, e->p, e->s, chunk), last = e->p * e->v - 1;
    if (vs > 0)
        TS_TRY(e->append(e->user, TS_PLUGIN_ACT_RECV_ACT, mb, chunk,
                         ts_stage_rank(e->order, e->p, vs - 1)));
    TS_TRY(e->append(e->user, TS_PLUGIN_ACT_FORWARD, mb, chunk, -1));
    if (vs < last)
        TS_TRY(e->append(e->user, TS_PLUGIN_ACT_SEND_ACT, mb, chunk,
                         ts_stage_rank(e->order, e->p, vs + 1)));
    return TS_OK;
}

/* RECV_GRAD, BACKWARD (kind: or BACKWARD_INPUT), SEND_GRAD of (mb, chunk). */
static ts_status pp_emit_backward_as(const pp_emitter *e, int kind, int mb, int chunk) {
    int vs = ts_stage_virtual(e->order, e->p, e->s, chunk), last = e->p * e->v - 1;
    if (vs < last)
        TS_TRY(e->append(e->user, TS_PLUGIN_ACT_RECV_GRAD, mb, chunk,
                         ts_stage_rank(e->order, e->p, vs + 1)));
    TS_TRY(e->append(e->user, kind, mb, chunk, -1));
    if (vs > 0)
        TS_TRY(e->append(e->user, TS_PLUGIN_ACT_SEND_GRAD, mb, chunk,
                         ts_stage_rank(e->order, e->p, vs - 1)));
    return TS_OK;
}

static ts_status pp_emit_backward(const pp_emitter *e, int mb, int chunk) {
    return pp_emit_backward_as(e, TS_PLUGIN_ACT_BACKWARD, mb, chunk);
}

static ts_status pp_emit_weight(const pp_emitter *e, int mb, int chunk) {
    return e->append(e->user, TS_PLUGIN_ACT_BACKWARD_WEIGHT, mb, chunk, -1);
}

static ts_status pp_gen_gpipe(const pp_emitter *e, int m) {
    for (int mb = 0; mb < m; mb++)
        TS_TRY(pp_emit_forward(e, mb, 0));
    for (int mb = 0; mb < m; mb++)
        TS_TRY(pp_emit_backward(e, mb, 0));
    return TS_OK;
}

static ts_status pp_gen_1f1b(const pp_emitter *e, int m) {
    int warmup = e->p - e->s - 1 < m ? e->p - e->s - 1 : m;
    for (int i = 0; i < warmup; i++)
        TS_TRY(pp_emit_forward(e, i, 0));
    for (int i = 0; i < m - warmup; i++) {
        TS_TRY(pp_emit_forward(e, warmup + i, 0));
        TS_TRY(pp_emit_backward(e, i, 0));
    }
    for (int i = m - warmup; i < m; i++)
        TS_TRY(pp_emit_backward(e, i, 0));
    return TS_OK;
}

/* The k-th forward (or backward) of a stage in the interleaved order:
 * micro-batches go in groups of p, each group through chunk 0, 1, .., v-1
 * (backwards v-1 .. 0) before the next group starts. */
static void pp_interleaved_item(const pp_emitter *e, int k, int forward, int *mb, int *chunk) {
    int group = k / (e->p * e->v), in_group = k % (e->p * e->v);
    *chunk = forward ? in_group / e->p : e->v - 1 - in_group / e->p;
    *mb = group * e->p + k % e->p;
}

static ts_status pp_gen_interleaved(const pp_emitter *e, int m) {
    int total = m * e->v, mb, chunk;
    int warmup = (e->p - e->s - 1) * 2 + (e->v - 1) * e->p;
    if (warmup > total) warmup = total;
    for (int k = 0; k < warmup; k++) {
        pp_interleaved_item(e, k, 1, &mb, &chunk);
        TS_TRY(pp_emit_forward(e, mb, chunk));
    }
    for (int k = 0; k < total - warmup; k++) {
        pp_interleaved_item(e, warmup + k, 1, &mb, &chunk);
        TS_TRY(pp_emit_forward(e, mb, chunk));
        pp_interleaved_item(e, k, 0, &mb, &chunk);
        TS_TRY(pp_emit_backward(e, mb, chunk));
    }
    for (int k = total - warmup; k < total; k++) {
        pp_interleaved_item(e, k, 0, &mb, &chunk);
        TS_TRY(pp_emit_backward(e, mb, chunk));
    }
    return TS_OK;
}

ts_status pp_emit_computation(int order, int stages, int stage, int chunks, char op, int mb,
                              int chunk, pp_append_fn append, void *user) {
    pp_emitter e = {append, user, stages, stage, chunks, order};
    switch (op) {
    case 'F': return pp_emit_forward(&e, mb, chunk);
    case 'B': return pp_emit_backward_as(&e, TS_PLUGIN_ACT_BACKWARD_INPUT, mb, chunk);
    case 'X': return pp_emit_backward(&e, mb, chunk);
    case 'W': return pp_emit_weight(&e, mb, chunk);
    default: return TS_ERR_INVALID;
    }
}

/* ZB-H1 (schedules.h): 1F1B with B and W split, `stage` Ws deferred. */
static ts_status pp_gen_zb_h1(const pp_emitter *e, int m) {
    int warmup = e->p - e->s - 1 < m ? e->p - e->s - 1 : m, w = 0;
    for (int i = 0; i < warmup; i++)
        TS_TRY(pp_emit_forward(e, i, 0));
    for (int i = 0; i < m - warmup; i++) {
        TS_TRY(pp_emit_forward(e, warmup + i, 0));
        TS_TRY(pp_emit_backward_as(e, TS_PLUGIN_ACT_BACKWARD_INPUT, i, 0));
        if (i >= e->s) TS_TRY(pp_emit_weight(e, w++, 0));
    }
    for (int i = m - warmup; i < m; i++) {
        TS_TRY(pp_emit_backward_as(e, TS_PLUGIN_ACT_BACKWARD_INPUT, i, 0));
        TS_TRY(pp_emit_weight(e, w++, 0));
    }
    while (w < m)
        TS_TRY(pp_emit_weight(e, w++, 0));
    return TS_OK;
}

/* ZB-V (schedules.h): list scheduling of every rank's two chunks under the
 * unit-time model, all ranks at once: each rank's computations go into the
 * cache in the order it ran them, so that the p calls of one shape (one per
 * rank, as the core asks) share one simulation.
 *
 * What a rank does at time t depends only on what ended before t (a step
 * run at t ends at t + 1), so the ranks of one t may be visited in any
 * order, and a rank that idles at t can run at t + 1 only if a neighbour's
 * step ended at t: the forward of virtual stage k readies k + 1's, the
 * backward of k readies k - 1's (a rank's own steps, its W queue and its
 * activation count change only when it runs). Each t visits the ranks that
 * ran at t - 1 or were readied then, so the simulation costs its steps plus
 * the makespan, not the ranks x the makespan.
 *
 * The table, per micro-batch and virtual stage k (neighbouring stages side
 * by side, as the ranks of one t read them): the time its F and its B
 * ended, side by side (0: not yet; times count from 1). */
enum { ZBV_F, ZBV_B, ZBV_W };
static ts_status pp_zb_v_build(pp_schedule_cache *cache, int p, int m) {
    int V = 2 * p, limit = 2 * p;
    size_t per_rank = (size_t)6 * (size_t)m;                       /* 2 chunks x m x (F, B, W) */
    int *done2 = calloc((size_t)V * (size_t)m * 2, sizeof *done2); /* F, B of each */
    int *state = calloc((size_t)p * 8, sizeof *state);             /* per rank: see below   */
    int *visit = malloc(sizeof *visit * (size_t)p * 2);            /* this t's ranks, next's */
    int *mark = calloc((size_t)p, sizeof *mark);                   /* 1 + the t it is listed */
    pp_schedule_step *steps = malloc(sizeof *steps * (size_t)p * per_rank);
    ts_status st = done2 && state && visit && mark && steps ? TS_OK : TS_ERR_NOMEM;
    /* state[r*8 + ...]: 0,1 next F of chunk 0/1; 2,3 next B; 4 where in its
     * steps to look for the B of its next W (Ws run in B order); 5 Ws
     * pending; 6 (micro-batch, chunk) pairs holding activations; 7 how many
     * steps the rank has run. */
    long total = (long)p * 2 * m * 3, done = 0;
    int *now = visit, *next = visit + p, nnow = 0, nnext = 0;
    for (int r = 0; !st && r < p; r++)
        now[nnow++] = r, mark[r] = 1;
    for (int t = 0; !st && done < total; t++) { /* t < 6pm: each t runs some rank's step */
        nnext = 0;
#define ZBV_LIST(rank)                                                                             \
    do {                                                                                           \
        int q_ = (rank);                                                                           \
        if (mark[q_] != t + 2) mark[q_] = t + 2, next[nnext++] = q_;                               \
    } while (0)
        for (int i = 0; i < nnow; i++) {
            int r = now[i];
            int *R = state + (size_t)r * 8;
            pp_schedule_step *mine = steps + (size_t)r * per_rank;
            int op = -1, chunk = 0, mb = 0;
            for (int c = 0; c < 2 && op < 0; c++) { /* a ready B, chunk 0 first */
                int k = ts_stage_virtual(TS_STAGES_V, p, r, c), b = R[2 + c];
                if (b >= m) continue;
                int ready = k < V - 1 ? done2[2 * ((size_t)b * V + k + 1) + 1]
                                      : done2[2 * ((size_t)b * V + k)];
                if (done2[2 * ((size_t)b * V + k)] && done2[2 * ((size_t)b * V + k)] <= t &&
                    ready && ready <= t)
                    op = ZBV_B, chunk = c, mb = b;
            }
            for (int c = 1; c >= 0 && op < 0 && R[6] < limit; c--) { /* a ready F, chunk 1 first */
                int k = ts_stage_virtual(TS_STAGES_V, p, r, c), f = R[c];
                if (f >= m) continue;
                int ready = k > 0 ? done2[2 * ((size_t)f * V + k - 1)] : 1;
                if (ready && (k == 0 || ready <= t)) op = ZBV_F, chunk = c, mb = f;
            }
            if (op < 0 && R[5] > 0) { /* the oldest pending W: its B, the next in the list */
                while (PP_STEP_OP(mine[R[4]]) != ZBV_B)
                    R[4]++;
                op = ZBV_W;
                chunk = PP_STEP_CHUNK(mine[R[4]]);
                mb = PP_STEP_MB(mine[R[4]]);
                R[4]++;
            }
            if (op < 0) continue; /* idle: listed again when a neighbour readies it */
            int k = ts_stage_virtual(TS_STAGES_V, p, r, chunk);
            if (op == ZBV_F) {
                done2[2 * ((size_t)mb * V + k)] = t + 1;
                R[chunk]++;
                R[6]++;
                if (k < V - 1) ZBV_LIST(ts_stage_rank(TS_STAGES_V, p, k + 1));
            } else if (op == ZBV_B) {
                done2[2 * ((size_t)mb * V + k) + 1] = t + 1;
                R[2 + chunk]++;
                R[5]++;
                if (k > 0) ZBV_LIST(ts_stage_rank(TS_STAGES_V, p, k - 1));
            } else {
                R[5]--;
                R[6]--;
            }
            ZBV_LIST(r);
            mine[R[7]++] = PP_STEP(mb, chunk, op);
            done++;
        }
#undef ZBV_LIST
        if (nnext == 0 && done < total) st = TS_ERR_INTERNAL; /* cannot happen */
        int *swap = now;
        now = next, next = swap, nnow = nnext;
    }
    free(done2);
    free(state);
    free(visit);
    free(mark);
    if (st) {
        free(steps);
        return st;
    }
    pp_schedule_cache_free(cache);
    *cache = (pp_schedule_cache){PP_SCHEDULE_ZB_V, p, m, 2, per_rank, steps};
    return TS_OK;
}

static ts_status pp_gen_zb_v(const pp_emitter *e, int m, pp_schedule_cache *cache) {
    if (!cache->steps || cache->kind != PP_SCHEDULE_ZB_V || cache->stages != e->p ||
        cache->micro_batches != m)
        TS_TRY(pp_zb_v_build(cache, e->p, m));
    const pp_schedule_step *mine = cache->steps + (size_t)e->s * cache->per_rank;
    for (size_t i = 0; i < cache->per_rank; i++) {
        int op = PP_STEP_OP(mine[i]), mb = PP_STEP_MB(mine[i]), chunk = PP_STEP_CHUNK(mine[i]);
        TS_TRY(op == ZBV_F   ? pp_emit_forward(e, mb, chunk)
               : op == ZBV_B ? pp_emit_backward_as(e, TS_PLUGIN_ACT_BACKWARD_INPUT, mb, chunk)
                             : pp_emit_weight(e, mb, chunk));
    }
    return TS_OK;
}

void pp_schedule_cache_free(pp_schedule_cache *cache) {
    free(cache->steps);
    memset(cache, 0, sizeof *cache);
}

ts_status pp_schedule_emit_cached(pp_schedule_cache *cache, pp_schedule_kind kind, int stages,
                                  int stage, int micro_batches, int chunks, pp_append_fn append,
                                  void *user) {
    char why[160];
    if (pp_schedule_check(kind, stages, stage, micro_batches, chunks, why, sizeof why))
        return TS_ERR_CONFIG;
    pp_emitter e = {append,
                    user,
                    stages,
                    stage,
                    kind == PP_SCHEDULE_INTERLEAVED || kind == PP_SCHEDULE_ZB_V ? chunks : 1,
                    pp_schedule_kind_order(kind)};
    switch (kind) {
    case PP_SCHEDULE_GPIPE: TS_TRY(pp_gen_gpipe(&e, micro_batches)); break;
    case PP_SCHEDULE_1F1B: TS_TRY(pp_gen_1f1b(&e, micro_batches)); break;
    case PP_SCHEDULE_INTERLEAVED: TS_TRY(pp_gen_interleaved(&e, micro_batches)); break;
    case PP_SCHEDULE_ZB_H1: TS_TRY(pp_gen_zb_h1(&e, micro_batches)); break;
    case PP_SCHEDULE_ZB_V: TS_TRY(pp_gen_zb_v(&e, micro_batches, cache)); break;
    }
    return append(user, TS_PLUGIN_ACT_OPTIMIZER_STEP, -1, 0, -1);
}

ts_status pp_schedule_emit(pp_schedule_kind kind, int stages, int stage, int micro_batches,
                           int chunks, pp_append_fn append, void *user) {
    pp_schedule_cache cache = {0};
    ts_status st =
        pp_schedule_emit_cached(&cache, kind, stages, stage, micro_batches, chunks, append, user);
    pp_schedule_cache_free(&cache);
    return st;
}

/* --- bubble ---------------------------------------------------------------------- */

static long pp_gcd(long a, long b) {
    while (b) {
        long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

ts_status pp_bubble_formula(pp_schedule_kind kind, int stages, int micro_batches, int chunks,
                            long *num, long *den) {
    int v = kind == PP_SCHEDULE_INTERLEAVED ? chunks : 1;
    if ((unsigned)kind >= PP_KINDS || kind == PP_SCHEDULE_ZB_V || stages < 1 || micro_batches < 1 ||
        v < 1 || (kind == PP_SCHEDULE_ZB_H1 && micro_batches < stages))
        return TS_ERR_CONFIG;
    long n = stages - 1, d = (long)v * micro_batches + stages - 1;
    if (kind == PP_SCHEDULE_ZB_H1) d = 3L * micro_batches + stages - 1;
    long g = pp_gcd(n, d);
    *num = n / g;
    *den = d / g;
    return TS_OK;
}
