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

#include <stdio.h> /* snprintf */
#include <string.h>

/* --- names and argument checks ------------------------------------------------ */

static const char *pp_kind_names[] = {"gpipe", "1f1b", "interleaved"};

const char *pp_schedule_kind_name(pp_schedule_kind kind) {
    return (unsigned)kind < 3 ? pp_kind_names[kind] : "?";
}

ts_status pp_schedule_kind_parse(const char *name, pp_schedule_kind *out) {
    for (int k = 0; k < 3; k++)
        if (name && strcmp(name, pp_kind_names[k]) == 0) {
            *out = (pp_schedule_kind)k;
            return TS_OK;
        }
    return TS_ERR_CONFIG;
}

int pp_schedule_check(pp_schedule_kind kind, int stages, int stage, int micro_batches, int chunks,
                      char *why, size_t why_size) {
    const char *name = pp_schedule_kind_name(kind);
    if ((unsigned)kind >= 3)
        snprintf(why, why_size, "schedule kind %d is not gpipe, 1f1b or interleaved", (int)kind);
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
    else
        return 0;
    return 1;
}

/* --- generators --------------------------------------------------------------- */

/* Where a stage's actions go, and the pipeline's shape. */
typedef struct pp_emitter {
    pp_append_fn append;
    void *user;
    int p, s, v; /* stages, this stage, chunks */
} pp_emitter;

/* RECV_ACT, FORWARD, SEND_ACT of (mb, chunk) on virtual stage chunk*p + s. */
static ts_status pp_emit_forward(const pp_emitter *e, int mb, int chunk) {
    int vs = chunk * e->p + e->s, last = e->p * e->v - 1;
    int prev = (e->s + e->p - 1) % e->p, next = (e->s + 1) % e->p;
    if (vs > 0) TS_TRY(e->append(e->user, TS_PLUGIN_ACT_RECV_ACT, mb, chunk, prev));
    TS_TRY(e->append(e->user, TS_PLUGIN_ACT_FORWARD, mb, chunk, -1));
    if (vs < last) TS_TRY(e->append(e->user, TS_PLUGIN_ACT_SEND_ACT, mb, chunk, next));
    return TS_OK;
}

/* RECV_GRAD, BACKWARD, SEND_GRAD of (mb, chunk). */
static ts_status pp_emit_backward(const pp_emitter *e, int mb, int chunk) {
    int vs = chunk * e->p + e->s, last = e->p * e->v - 1;
    int prev = (e->s + e->p - 1) % e->p, next = (e->s + 1) % e->p;
    if (vs < last) TS_TRY(e->append(e->user, TS_PLUGIN_ACT_RECV_GRAD, mb, chunk, next));
    TS_TRY(e->append(e->user, TS_PLUGIN_ACT_BACKWARD, mb, chunk, -1));
    if (vs > 0) TS_TRY(e->append(e->user, TS_PLUGIN_ACT_SEND_GRAD, mb, chunk, prev));
    return TS_OK;
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

ts_status pp_schedule_emit(pp_schedule_kind kind, int stages, int stage, int micro_batches,
                           int chunks, pp_append_fn append, void *user) {
    char why[160];
    if (pp_schedule_check(kind, stages, stage, micro_batches, chunks, why, sizeof why))
        return TS_ERR_CONFIG;
    pp_emitter e = {append, user, stages, stage, kind == PP_SCHEDULE_INTERLEAVED ? chunks : 1};
    switch (kind) {
    case PP_SCHEDULE_GPIPE: TS_TRY(pp_gen_gpipe(&e, micro_batches)); break;
    case PP_SCHEDULE_1F1B: TS_TRY(pp_gen_1f1b(&e, micro_batches)); break;
    case PP_SCHEDULE_INTERLEAVED: TS_TRY(pp_gen_interleaved(&e, micro_batches)); break;
    }
    return append(user, TS_PLUGIN_ACT_OPTIMIZER_STEP, -1, 0, -1);
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
    if ((unsigned)kind >= 3 || stages < 1 || micro_batches < 1 || v < 1) return TS_ERR_CONFIG;
    long n = stages - 1, d = (long)v * micro_batches + stages - 1;
    long g = pp_gcd(n, d);
    *num = n / g;
    *den = d / g;
    return TS_OK;
}
