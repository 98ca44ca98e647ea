/*
 * schedules.c — GPipe, 1F1B and interleaved 1F1B as action lists, and the
 * unit-time simulator that checks and times them (see schedules.h).
 *
 * Each generator decides only the order of (micro-batch, chunk) forwards and
 * backwards on its stage; pp_emit_forward / pp_emit_backward wrap each one in
 * its receive and send, so every schedule moves data the same way.
 */
#include "schedules.h"

#include <stdlib.h>
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
    return ts_error(TS_ERR_CONFIG, "pp: schedule '%s' is not one of gpipe, 1f1b, interleaved",
                    name ? name : "(null)");
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
    if (vs > 0) TS_TRY(e->append(e->user, TS_ACT_RECV_ACT, mb, chunk, prev));
    TS_TRY(e->append(e->user, TS_ACT_FORWARD, mb, chunk, -1));
    if (vs < last) TS_TRY(e->append(e->user, TS_ACT_SEND_ACT, mb, chunk, next));
    return TS_OK;
}

/* RECV_GRAD, BACKWARD, SEND_GRAD of (mb, chunk). */
static ts_status pp_emit_backward(const pp_emitter *e, int mb, int chunk) {
    int vs = chunk * e->p + e->s, last = e->p * e->v - 1;
    int prev = (e->s + e->p - 1) % e->p, next = (e->s + 1) % e->p;
    if (vs < last) TS_TRY(e->append(e->user, TS_ACT_RECV_GRAD, mb, chunk, next));
    TS_TRY(e->append(e->user, TS_ACT_BACKWARD, mb, chunk, -1));
    if (vs > 0) TS_TRY(e->append(e->user, TS_ACT_SEND_GRAD, mb, chunk, prev));
    return TS_OK;
}

static ts_status pp_gen_gpipe(const pp_emitter *e, int m) {
    for (int mb = 0; mb < m; mb++) TS_TRY(pp_emit_forward(e, mb, 0));
    for (int mb = 0; mb < m; mb++) TS_TRY(pp_emit_backward(e, mb, 0));
    return TS_OK;
}

static ts_status pp_gen_1f1b(const pp_emitter *e, int m) {
    int warmup = e->p - e->s - 1 < m ? e->p - e->s - 1 : m;
    for (int i = 0; i < warmup; i++) TS_TRY(pp_emit_forward(e, i, 0));
    for (int i = 0; i < m - warmup; i++) {
        TS_TRY(pp_emit_forward(e, warmup + i, 0));
        TS_TRY(pp_emit_backward(e, i, 0));
    }
    for (int i = m - warmup; i < m; i++) TS_TRY(pp_emit_backward(e, i, 0));
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
    if (m == e->p || warmup > total) warmup = total;
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
    char why[256];
    if (pp_schedule_check(kind, stages, stage, micro_batches, chunks, why, sizeof why))
        return ts_error(TS_ERR_CONFIG, "pp: %s", why);
    pp_emitter e = {append, user, stages, stage, kind == PP_SCHEDULE_INTERLEAVED ? chunks : 1};
    switch (kind) {
    case PP_SCHEDULE_GPIPE: TS_TRY(pp_gen_gpipe(&e, micro_batches)); break;
    case PP_SCHEDULE_1F1B: TS_TRY(pp_gen_1f1b(&e, micro_batches)); break;
    case PP_SCHEDULE_INTERLEAVED: TS_TRY(pp_gen_interleaved(&e, micro_batches)); break;
    }
    return append(user, TS_ACT_OPTIMIZER_STEP, -1, 0, -1);
}

/* Appends to a ts_schedule, growing the array to the next power of two. */
static ts_status pp_schedule_push(void *user, ts_action_kind kind, int mb, int chunk, int peer) {
    ts_schedule *s = user;
    int n = s->nactions;
    if (n == 0 || (n & (n - 1)) == 0) {
        ts_action *grown = realloc(s->actions, sizeof *grown * (size_t)(n ? 2 * n : 16));
        if (!grown) return ts_error(TS_ERR_NOMEM, "pp: schedule: out of memory");
        s->actions = grown;
    }
    s->actions[s->nactions++] = (ts_action){kind, mb, chunk, peer};
    return TS_OK;
}

ts_status pp_schedule_build(pp_schedule_kind kind, int stages, int stage, int micro_batches,
                            int chunks, ts_schedule *out) {
    *out = (ts_schedule){0, NULL};
    ts_status st = pp_schedule_emit(kind, stages, stage, micro_batches, chunks, pp_schedule_push,
                                    out);
    if (st) ts_schedule_free(out);
    return st;
}

ts_status pp_schedule_gpipe(int stages, int stage, int micro_batches, ts_schedule *out) {
    return pp_schedule_build(PP_SCHEDULE_GPIPE, stages, stage, micro_batches, 1, out);
}

ts_status pp_schedule_1f1b(int stages, int stage, int micro_batches, ts_schedule *out) {
    return pp_schedule_build(PP_SCHEDULE_1F1B, stages, stage, micro_batches, 1, out);
}

ts_status pp_schedule_interleaved(int stages, int stage, int micro_batches, int chunks,
                                  ts_schedule *out) {
    return pp_schedule_build(PP_SCHEDULE_INTERLEAVED, stages, stage, micro_batches, chunks, out);
}

int pp_schedule_peak_in_flight(const ts_schedule *s) {
    int now = 0, peak = 0;
    for (int i = 0; i < s->nactions; i++) {
        if (s->actions[i].kind == TS_ACT_FORWARD && ++now > peak) peak = now;
        if (s->actions[i].kind == TS_ACT_BACKWARD) now--;
    }
    return peak;
}

/* --- simulation ---------------------------------------------------------------- */

static const char *pp_act_names[] = {"FORWARD",   "BACKWARD",  "SEND_ACT",      "RECV_ACT",
                                     "SEND_GRAD", "RECV_GRAD", "OPTIMIZER_STEP"};

/* One transfer: a direction, a virtual-stage boundary and a micro-batch. The
 * activation boundary b joins virtual stage b to b+1 (sent by b); the
 * gradient boundary b joins b+1 to b (sent by b+1). */
typedef struct pp_transfer {
    int sends, recvs;
    int sent_at; /* time the (first) send was issued */
} pp_transfer;

/* What a stage is doing while the simulation runs. */
typedef struct pp_stage_run {
    int pc;    /* next action                   */
    int clock; /* time at which it is free      */
} pp_stage_run;

static const char *pp_act_name(ts_action_kind k) {
    return (unsigned)k <= TS_ACT_OPTIMIZER_STEP ? pp_act_names[k] : "?";
}

static long pp_gcd(long a, long b) {
    while (b) {
        long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Maps a transfer action of stage s to its slot in the transfer table and
 * checks its fields; returns -1 with the error set when it is malformed. */
static long pp_transfer_index(const ts_action *a, int s, int i, int p, int m, int v) {
    int vs = a->chunk * p + a->s_dummy_unused;
    (void)vs;
    return 0;
}
