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
    ts_status st =
        pp_schedule_emit(kind, stages, stage, micro_batches, chunks, pp_schedule_push, out);
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

/* One transfer: a direction (0 activations, 1 gradients), a virtual-stage
 * boundary b and a micro-batch. The activation boundary b carries virtual
 * stage b's output to b+1; the gradient boundary b carries the gradient of
 * virtual stage b+1's input back to b. */
typedef struct pp_transfer {
    int sends, recvs; /* how many list entries name it              */
    int issued;       /* the send has run in the simulation          */
    int sent_at;      /* the time it ran                             */
} pp_transfer;

/* The shape being simulated and its bookkeeping, freed together. */
typedef struct pp_sim {
    int p, m, v, fu, bu;
    const ts_schedule *sch;
    pp_transfer *tr; /* [2][p*v][m]                                     */
    char *recvd;     /* [2][p*v][m]: received so far in list order      */
    char *computed;  /* [2][p*v][m]: forward / backward seen so far     */
    int *start;      /* per stage, per action: start time (compute only) */
    int *offset;     /* [p+1] index of each stage's first action        */
} pp_sim;

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

static size_t pp_sim_index(const pp_sim *S, int dir, int b, int mb) {
    return ((size_t)dir * (size_t)(S->p * S->v) + (size_t)b) * (size_t)S->m + (size_t)mb;
}

/* Error for action i of stage s, with the action spelled out. */
static ts_status pp_bad_action(int s, int i, const ts_action *a, const char *what) {
    return ts_error(TS_ERR_INVALID, "pp: stage %d action %d (%s mb %d chunk %d peer %d): %s", s, i,
                    pp_act_name(a->kind), a->mb, a->chunk, a->peer, what);
}

/* The static checks of one stage's list, in list order: fields in range,
 * peers on the neighbouring virtual stage, each compute once and after the
 * receive it needs, each send after the compute it carries. */
static ts_status pp_sim_check_stage(pp_sim *S, int s) {
    const ts_schedule *l = &S->sch[s];
    int last = S->p * S->v - 1;
    char msg[160];
    for (int i = 0; i < l->nactions; i++) {
        const ts_action *a = &l->actions[i];
        if ((unsigned)a->kind > TS_ACT_OPTIMIZER_STEP)
            return pp_bad_action(s, i, a, "unknown action kind");
        if (a->kind == TS_ACT_OPTIMIZER_STEP) {
            if (i != l->nactions - 1)
                return pp_bad_action(s, i, a, "OPTIMIZER_STEP is not the last action");
            continue;
        }
        if (a->mb < 0 || a->mb >= S->m || a->chunk < 0 || a->chunk >= S->v) {
            snprintf(msg, sizeof msg, "micro-batch or chunk outside 0..%d, 0..%d", S->m - 1,
                     S->v - 1);
            return pp_bad_action(s, i, a, msg);
        }
        int vs = a->chunk * S->p + s, dir = 0, b = 0, peer = -1;
        size_t fwd = pp_sim_index(S, 0, vs, a->mb), bwd = pp_sim_index(S, 1, vs, a->mb);
        switch (a->kind) {
        case TS_ACT_FORWARD:
            if (S->computed[fwd]) return pp_bad_action(s, i, a, "forward computed twice");
            if (vs > 0 && !S->recvd[pp_sim_index(S, 0, vs - 1, a->mb)])
                return pp_bad_action(s, i, a, "forward before its RECV_ACT");
            S->computed[fwd] = 1;
            continue;
        case TS_ACT_BACKWARD:
            if (S->computed[bwd]) return pp_bad_action(s, i, a, "backward computed twice");
            if (!S->computed[fwd]) return pp_bad_action(s, i, a, "backward before its forward");
            if (vs < last && !S->recvd[pp_sim_index(S, 1, vs, a->mb)])
                return pp_bad_action(s, i, a, "backward before its RECV_GRAD");
            S->computed[bwd] = 1;
            continue;
        case TS_ACT_SEND_ACT:
            if (!S->computed[fwd]) return pp_bad_action(s, i, a, "SEND_ACT before its forward");
            dir = 0, b = vs, peer = (vs + 1) % S->p;
            break;
        case TS_ACT_RECV_ACT: dir = 0, b = vs - 1, peer = (vs - 1 + S->p) % S->p; break;
        case TS_ACT_SEND_GRAD:
            if (!S->computed[bwd]) return pp_bad_action(s, i, a, "SEND_GRAD before its backward");
            dir = 1, b = vs - 1, peer = (vs - 1 + S->p) % S->p;
            break;
        case TS_ACT_RECV_GRAD: dir = 1, b = vs, peer = (vs + 1) % S->p; break;
        default: break;
        }
        if (b < 0 || b >= last)
            return pp_bad_action(s, i, a, "no neighbouring virtual stage on that side");
        if (a->peer != peer) {
            snprintf(msg, sizeof msg, "the neighbouring virtual stage is on rank %d", peer);
            return pp_bad_action(s, i, a, msg);
        }
        pp_transfer *t = &S->tr[pp_sim_index(S, dir, b, a->mb)];
        if (a->kind == TS_ACT_RECV_ACT || a->kind == TS_ACT_RECV_GRAD) {
            t->recvs++;
            S->recvd[pp_sim_index(S, dir, b, a->mb)] = 1;
        } else {
            t->sends++;
        }
    }
    if (l->nactions == 0 || l->actions[l->nactions - 1].kind != TS_ACT_OPTIMIZER_STEP)
        return ts_error(TS_ERR_INVALID, "pp: stage %d: the list does not end with OPTIMIZER_STEP",
                        s);
    return TS_OK;
}

/* After all stages' static checks: everything computed once, and each
 * send paired with exactly one receive. */
static ts_status pp_sim_check_all(const pp_sim *S) {
    int pv = S->p * S->v;
    for (int dir = 0; dir < 2; dir++)
        for (int vs = 0; vs < pv; vs++)
            for (int mb = 0; mb < S->m; mb++) {
                size_t k = pp_sim_index(S, dir, vs, mb);
                if (!S->computed[k])
                    return ts_error(TS_ERR_INVALID,
                                    "pp: stage %d chunk %d (virtual stage %d) never computes the "
                                    "%s of micro-batch %d",
                                    vs % S->p, vs / S->p, vs, dir ? "backward" : "forward", mb);
                const pp_transfer *t = &S->tr[k];
                if (vs == pv - 1 || (t->sends == 1 && t->recvs == 1)) continue;
                int from = dir ? (vs + 1) % S->p : vs % S->p,
                    to = dir ? vs % S->p : (vs + 1) % S->p;
                return ts_error(TS_ERR_INVALID,
                                "pp: %s of micro-batch %d from virtual stage %d (rank %d) to %d "
                                "(rank %d): %d sends, %d receives, want one of each",
                                dir ? "gradient" : "activation", mb, dir ? vs + 1 : vs, from,
                                dir ? vs : vs + 1, to, t->sends, t->recvs);
            }
    return TS_OK;
}

/* Runs every stage as far as it can until all are done; fails on a deadlock. */
static ts_status pp_sim_run(pp_sim *S) {
    int *pc = calloc((size_t)S->p, sizeof *pc), *clock = calloc((size_t)S->p, sizeof *clock);
    ts_status st = TS_OK;
    if (!pc || !clock) {
        st = ts_error(TS_ERR_NOMEM, "pp: simulate: out of memory");
        goto out;
    }
    for (;;) {
        int progress = 0, done = 0;
        for (int s = 0; s < S->p; s++) {
            const ts_schedule *l = &S->sch[s];
            for (; pc[s] < l->nactions; pc[s]++, progress = 1) {
                const ts_action *a = &l->actions[pc[s]];
                if (a->kind == TS_ACT_OPTIMIZER_STEP) continue;
                int vs = a->chunk * S->p + s;
                pp_transfer *t = NULL;
                switch (a->kind) {
                case TS_ACT_SEND_ACT:
                case TS_ACT_RECV_GRAD:
                    t = &S->tr[pp_sim_index(S, a->kind == TS_ACT_RECV_GRAD, vs, a->mb)];
                    break;
                case TS_ACT_RECV_ACT:
                case TS_ACT_SEND_GRAD:
                    t = &S->tr[pp_sim_index(S, a->kind == TS_ACT_SEND_GRAD, vs - 1, a->mb)];
                    break;
                default: break;
                }
                if (a->kind == TS_ACT_FORWARD || a->kind == TS_ACT_BACKWARD) {
                    S->start[S->offset[s] + pc[s]] = clock[s];
                    clock[s] += a->kind == TS_ACT_FORWARD ? S->fu : S->bu;
                } else if (a->kind == TS_ACT_SEND_ACT || a->kind == TS_ACT_SEND_GRAD) {
                    t->issued = 1;
                    t->sent_at = clock[s];
                } else if (!t->issued) {
                    break; /* a receive whose send has not run yet */
                } else if (t->sent_at > clock[s]) {
                    clock[s] = t->sent_at;
                }
            }
            done += pc[s] == l->nactions;
        }
        if (done == S->p) break;
        if (progress) continue;
        char msg[1024];
        int n = snprintf(msg, sizeof msg, "pp: the schedule deadlocks:");
        for (int s = 0; s < S->p && n < (int)sizeof msg; s++) {
            if (pc[s] == S->sch[s].nactions) continue;
            const ts_action *a = &S->sch[s].actions[pc[s]];
            n += snprintf(msg + n, sizeof msg - (size_t)n,
                          " stage %d waits at action %d (%s mb %d chunk %d from rank %d, t=%d);", s,
                          pc[s], pp_act_name(a->kind), a->mb, a->chunk, a->peer, clock[s]);
        }
        st = ts_error(TS_ERR_INVALID, "%s", msg);
        break;
    }
out:
    free(pc);
    free(clock);
    return st;
}

/* Fills the result's timeline, in-flight peaks and bubble from S->start. */
static ts_status pp_sim_fill(const pp_sim *S, pp_sim_result *r) {
    r->makespan = 0;
    r->busy = 0;
    for (int s = 0; s < S->p; s++)
        for (int i = 0; i < S->sch[s].nactions; i++) {
            const ts_action *a = &S->sch[s].actions[i];
            if (a->kind != TS_ACT_FORWARD && a->kind != TS_ACT_BACKWARD) continue;
            int dur = a->kind == TS_ACT_FORWARD ? S->fu : S->bu;
            int end = S->start[S->offset[s] + i] + dur;
            if (end > r->makespan) r->makespan = end;
            r->busy += dur;
        }
    r->slots = malloc(sizeof *r->slots * (size_t)S->p * (size_t)r->makespan);
    r->peak_in_flight = malloc(sizeof *r->peak_in_flight * (size_t)S->p);
    if (!r->slots || !r->peak_in_flight)
        return ts_error(TS_ERR_NOMEM, "pp: simulate: out of memory");
    for (long k = 0; k < (long)S->p * r->makespan; k++)
        r->slots[k] = (pp_sim_slot){'.', -1, -1};
    for (int s = 0; s < S->p; s++) {
        r->peak_in_flight[s] = pp_schedule_peak_in_flight(&S->sch[s]);
        for (int i = 0; i < S->sch[s].nactions; i++) {
            const ts_action *a = &S->sch[s].actions[i];
            if (a->kind != TS_ACT_FORWARD && a->kind != TS_ACT_BACKWARD) continue;
            int t0 = S->start[S->offset[s] + i], dur = a->kind == TS_ACT_FORWARD ? S->fu : S->bu;
            for (int t = t0; t < t0 + dur; t++)
                r->slots[(size_t)s * (size_t)r->makespan + (size_t)t] =
                    (pp_sim_slot){a->kind == TS_ACT_FORWARD ? 'F' : 'B', a->mb, a->chunk};
        }
    }
    r->bubble_den = (long)S->p * r->makespan;
    r->bubble_num = r->bubble_den - r->busy;
    long g = pp_gcd(r->bubble_num, r->bubble_den);
    if (g > 1) r->bubble_num /= g, r->bubble_den /= g;
    return TS_OK;
}

ts_status pp_simulate_timed(int stages, const ts_schedule *schedules, int micro_batches, int chunks,
                            int f_units, int b_units, pp_sim_result *out) {
    memset(out, 0, sizeof *out);
    if (stages < 1 || micro_batches < 1 || chunks < 1 || f_units < 1 || b_units < 1)
        return ts_error(TS_ERR_INVALID,
                        "pp: simulate: stages=%d micro_batches=%d chunks=%d f_units=%d "
                        "b_units=%d, all must be at least 1",
                        stages, micro_batches, chunks, f_units, b_units);
    pp_sim S = {stages, micro_batches, chunks, f_units, b_units, schedules, 0, 0, 0, 0, 0};
    size_t cells = 2 * (size_t)stages * (size_t)chunks * (size_t)micro_batches;
    int nall = 0;
    for (int s = 0; s < stages; s++)
        nall += schedules[s].nactions;
    S.tr = calloc(cells, sizeof *S.tr);
    S.recvd = calloc(cells, 1);
    S.computed = calloc(cells, 1);
    S.start = calloc((size_t)nall + 1, sizeof *S.start);
    S.offset = calloc((size_t)stages + 1, sizeof *S.offset);
    ts_status st = TS_OK;
    if (!S.tr || !S.recvd || !S.computed || !S.start || !S.offset)
        st = ts_error(TS_ERR_NOMEM, "pp: simulate: out of memory");
    for (int s = 0; !st && s < stages; s++)
        S.offset[s + 1] = S.offset[s] + schedules[s].nactions;
    for (int s = 0; !st && s < stages; s++)
        st = pp_sim_check_stage(&S, s);
    if (!st) st = pp_sim_check_all(&S);
    if (!st) st = pp_sim_run(&S);
    if (!st) {
        *out = (pp_sim_result){stages, micro_batches, chunks, f_units, b_units, 0,
                               NULL,   NULL,          0,      0,       1};
        st = pp_sim_fill(&S, out);
    }
    if (st) pp_sim_result_free(out);
    free(S.tr);
    free(S.recvd);
    free(S.computed);
    free(S.start);
    free(S.offset);
    return st;
}

ts_status pp_simulate(int stages, const ts_schedule *schedules, int micro_batches, int chunks,
                      pp_sim_result *out) {
    return pp_simulate_timed(stages, schedules, micro_batches, chunks, 1, 1, out);
}

void pp_sim_result_free(pp_sim_result *r) {
    free(r->slots);
    free(r->peak_in_flight);
    memset(r, 0, sizeof *r);
}

static int pp_digits(int x) {
    int d = 1;
    while (x >= 10)
        x /= 10, d++;
    return d;
}

void pp_timeline_print(const pp_sim_result *r, FILE *f) {
    int width = 1 + pp_digits(r->micro_batches - 1) + (r->chunks > 1);
    int rank_width = pp_digits(r->stages - 1);
    for (int s = 0; s < r->stages; s++) {
        fprintf(f, "rank %*d |", rank_width, s);
        for (int t = 0; t < r->makespan; t++) {
            const pp_sim_slot *c = &r->slots[(size_t)s * (size_t)r->makespan + (size_t)t];
            char cell[32];
            if (c->op == '.')
                snprintf(cell, sizeof cell, ".");
            else if (r->chunks > 1)
                snprintf(cell, sizeof cell, "%c%d%c", c->op, c->mb,
                         c->chunk < 26 ? 'a' + c->chunk : '+');
            else
                snprintf(cell, sizeof cell, "%c%d", c->op, c->mb);
            fprintf(f, " %-*s", t + 1 < r->makespan ? width : 0, cell);
        }
        fputc('\n', f);
    }
    fprintf(f, "bubble %ld/%ld = %.3f (makespan %d units; F = %d, B = %d)\n", r->bubble_num,
            r->bubble_den, r->bubble_den ? (double)r->bubble_num / (double)r->bubble_den : 0.0,
            r->makespan, r->f_units, r->b_units);
}

ts_status pp_bubble_formula(pp_schedule_kind kind, int stages, int micro_batches, int chunks,
                            long *num, long *den) {
    int v = kind == PP_SCHEDULE_INTERLEAVED ? chunks : 1;
    if ((unsigned)kind >= 3 || stages < 1 || micro_batches < 1 || v < 1)
        return ts_error(TS_ERR_CONFIG, "pp: bubble of %s with stages=%d micro_batches=%d chunks=%d",
                        pp_schedule_kind_name(kind), stages, micro_batches, chunks);
    long n = stages - 1, d = (long)v * micro_batches + stages - 1;
    long g = pp_gcd(n, d);
    *num = n / g;
    *den = d / g;
    return TS_OK;
}
