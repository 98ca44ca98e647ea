/*
 * schedule.c — the default one-stage schedule, building and printing
 * schedules, and the unit-time simulator that checks a pipeline's schedules
 * and times them (see schedule.h for the model and the conventions).
 *
 * The simulator knows no schedule by name: it takes any per-rank lists and
 * either finds them consistent and deadlock-free, with a timeline and a
 * bubble, or says which action of which rank is wrong.
 */
#include "schedule.h"

#include <limits.h> /* USHRT_MAX */
#include <stdlib.h>
#include <string.h>

#include "tessera/plugin.h" /* ts_stage_rank, ts_stage_virtual: where virtual stages live */

/* --- building and printing --------------------------------------------------- */

ts_status ts_schedule_append(ts_schedule *s, ts_action_kind kind, int mb, int chunk, int peer) {
    if ((unsigned)kind >= TS_ACT_KINDS)
        return ts_error(TS_ERR_INVALID, "schedule: bad action kind %d", (int)kind);
    int n = s->nactions;
    if (n == 0 || (n & (n - 1)) == 0) { /* capacity is the next power of two */
        ts_action *grown = realloc(s->actions, sizeof *grown * (size_t)(n ? 2 * n : 1));
        if (!grown) return ts_error(TS_ERR_NOMEM, "schedule: out of memory");
        s->actions = grown;
    }
    s->actions[n] = (ts_action){kind, mb, chunk, peer};
    s->nactions = n + 1;
    return TS_OK;
}

ts_status ts_schedule_default(int micro_batches, ts_schedule *out) {
    *out = (ts_schedule){0, NULL};
    if (micro_batches < 1)
        return ts_error(TS_ERR_INVALID, "schedule: %d micro-batches", micro_batches);
    ts_status st = TS_OK;
    for (int mb = 0; mb < micro_batches && !st; mb++) {
        st = ts_schedule_append(out, TS_ACT_FORWARD, mb, 0, -1);
        if (!st) st = ts_schedule_append(out, TS_ACT_BACKWARD, mb, 0, -1);
    }
    if (!st) st = ts_schedule_append(out, TS_ACT_OPTIMIZER_STEP, -1, 0, -1);
    if (st) ts_schedule_free(out);
    return st;
}

void ts_schedule_free(ts_schedule *s) {
    free(s->actions);
    s->actions = NULL;
    s->nactions = 0;
}

void ts_schedule_print(const ts_schedule *s, FILE *f) {
    static const char *tag[] = {"F", "B", "SA", "RA", "SG", "RG", "OPT", "Bi", "W"};
    for (int i = 0; i < s->nactions; i++) {
        const ts_action *a = &s->actions[i];
        if (a->kind == TS_ACT_OPTIMIZER_STEP)
            fprintf(f, "%sOPT", i ? " " : "");
        else
            fprintf(f, "%s%s%d", i ? " " : "", tag[a->kind], a->mb);
    }
    fputc('\n', f);
}

/* The peak of a count that `up` raises and `down` (or `down2`) lowers. */
static int sched_peak(const ts_schedule *s, ts_action_kind up, ts_action_kind down,
                      ts_action_kind down2) {
    int now = 0, peak = 0;
    for (int i = 0; i < s->nactions; i++) {
        ts_action_kind k = s->actions[i].kind;
        if (k == up && ++now > peak) peak = now;
        if (k == down || k == down2) now--;
    }
    return peak;
}

int ts_schedule_peak_in_flight(const ts_schedule *s) {
    return sched_peak(s, TS_ACT_FORWARD, TS_ACT_BACKWARD, TS_ACT_BACKWARD_WEIGHT);
}

int ts_schedule_peak_deferred(const ts_schedule *s) {
    return sched_peak(s, TS_ACT_BACKWARD_INPUT, TS_ACT_BACKWARD_WEIGHT, TS_ACT_BACKWARD_WEIGHT);
}

/* --- simulation ---------------------------------------------------------------- */

static const char *sched_act_names[] = {"FORWARD",        "BACKWARD",       "SEND_ACT",
                                        "RECV_ACT",       "SEND_GRAD",      "RECV_GRAD",
                                        "OPTIMIZER_STEP", "BACKWARD_INPUT", "BACKWARD_WEIGHT"};

/* One transfer: a direction (0 activations, 1 gradients), a virtual-stage
 * boundary b and a micro-batch. The activation boundary b carries virtual
 * stage b's output to b+1; the gradient boundary b carries the gradient of
 * virtual stage b+1's input back to b. */
typedef struct sched_transfer {
    int issued_at;               /* 1 + the time its send ran; 0: not yet   */
    unsigned short sends, recvs; /* list entries naming it (65,535 at most) */
} sched_transfer;

/* The shape being simulated and its bookkeeping, freed together. */
typedef struct sched_sim {
    int p, m, v, fu, bu, wu, order;
    const ts_schedule *sch;
    sched_transfer *tr; /* [2][p*v][m] (a receive seen: recvs > 0)        */
    char *computed;     /* [3][p*v][m]: forward / input gradient / weight
                           gradient seen so far                            */
    int *start;         /* per rank, per computation: its start time       */
    int *offset;        /* [p+1] index of each rank's first computation    */
    int makespan;       /* sched_run: the latest end of a computation      */
    long busy;          /* sched_run: the computations' units, summed      */
} sched_sim;

static const char *sched_act_name(ts_action_kind k) {
    return (unsigned)k < TS_ACT_KINDS ? sched_act_names[k] : "?";
}

/* Time units of a compute action (0 for the rest). */
static int sched_units(const sched_sim *S, ts_action_kind k) {
    switch (k) {
    case TS_ACT_FORWARD: return S->fu;
    case TS_ACT_BACKWARD: return S->bu + S->wu;
    case TS_ACT_BACKWARD_INPUT: return S->bu;
    case TS_ACT_BACKWARD_WEIGHT: return S->wu;
    default: return 0;
    }
}

static int sched_compute(ts_action_kind k) {
    return k == TS_ACT_FORWARD || k == TS_ACT_BACKWARD || k == TS_ACT_BACKWARD_INPUT ||
           k == TS_ACT_BACKWARD_WEIGHT;
}

static int sched_rank(const sched_sim *S, int vs) {
    return ts_stage_rank(S->order, S->p, vs);
}

static long sched_gcd(long a, long b) {
    while (b) {
        long t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static size_t sched_index(const sched_sim *S, int dir, int b, int mb) {
    return ((size_t)dir * (size_t)(S->p * S->v) + (size_t)b) * (size_t)S->m + (size_t)mb;
}

/* Error for action i of rank s, with the action spelled out. */
static ts_status sched_bad_action(int s, int i, const ts_action *a, const char *what) {
    return ts_error(TS_ERR_INVALID, "schedule: stage %d action %d (%s mb %d chunk %d peer %d): %s",
                    s, i, sched_act_name(a->kind), a->mb, a->chunk, a->peer, what);
}

/* The static checks of one rank's list, in list order: fields in range,
 * peers on the neighbouring virtual stage, each compute once and after the
 * receive it needs, each send after the compute it carries. */
static ts_status sched_check_stage(sched_sim *S, int s) {
    const ts_schedule *l = &S->sch[s];
    int last = S->p * S->v - 1;
    char msg[160];
    for (int i = 0; i < l->nactions; i++) {
        const ts_action *a = &l->actions[i];
        if ((unsigned)a->kind >= TS_ACT_KINDS)
            return sched_bad_action(s, i, a, "unknown action kind");
        if (a->kind == TS_ACT_OPTIMIZER_STEP) {
            if (i != l->nactions - 1)
                return sched_bad_action(s, i, a, "OPTIMIZER_STEP is not the last action");
            continue;
        }
        if (a->mb < 0 || a->mb >= S->m || a->chunk < 0 || a->chunk >= S->v) {
            snprintf(msg, sizeof msg, "micro-batch or chunk outside 0..%d, 0..%d", S->m - 1,
                     S->v - 1);
            return sched_bad_action(s, i, a, msg);
        }
        S->offset[s + 1] += sched_compute(a->kind); /* the rank's computations, counted */
        int vs = ts_stage_virtual(S->order, S->p, s, a->chunk), dir = 0, b = 0, peer = -1;
        size_t fwd = sched_index(S, 0, vs, a->mb), bwd = sched_index(S, 1, vs, a->mb);
        size_t wgt = sched_index(S, 2, vs, a->mb);
        switch (a->kind) {
        case TS_ACT_FORWARD:
            if (S->computed[fwd]) return sched_bad_action(s, i, a, "forward computed twice");
            if (vs > 0 && !S->tr[sched_index(S, 0, vs - 1, a->mb)].recvs)
                return sched_bad_action(s, i, a, "forward before its RECV_ACT");
            S->computed[fwd] = 1;
            continue;
        case TS_ACT_BACKWARD:
        case TS_ACT_BACKWARD_INPUT:
            if (S->computed[bwd]) return sched_bad_action(s, i, a, "backward computed twice");
            if (!S->computed[fwd]) return sched_bad_action(s, i, a, "backward before its forward");
            if (vs < last && !S->tr[sched_index(S, 1, vs, a->mb)].recvs)
                return sched_bad_action(s, i, a, "backward before its RECV_GRAD");
            S->computed[bwd] = 1;
            S->computed[wgt] = a->kind == TS_ACT_BACKWARD;
            continue;
        case TS_ACT_BACKWARD_WEIGHT:
            if (S->wu < 1)
                return sched_bad_action(s, i, a,
                                        "a weight-gradient action, simulated with 0 units");
            if (S->computed[wgt])
                return sched_bad_action(s, i, a, "weight gradients computed twice");
            if (!S->computed[bwd])
                return sched_bad_action(s, i, a, "weight gradients before their BACKWARD_INPUT");
            S->computed[wgt] = 1;
            continue;
        case TS_ACT_SEND_ACT:
            if (!S->computed[fwd]) return sched_bad_action(s, i, a, "SEND_ACT before its forward");
            dir = 0, b = vs, peer = vs + 1 <= last ? sched_rank(S, vs + 1) : -1;
            break;
        case TS_ACT_RECV_ACT:
            dir = 0, b = vs - 1, peer = vs > 0 ? sched_rank(S, vs - 1) : -1;
            break;
        case TS_ACT_SEND_GRAD:
            if (!S->computed[bwd])
                return sched_bad_action(s, i, a, "SEND_GRAD before its backward");
            dir = 1, b = vs - 1, peer = vs > 0 ? sched_rank(S, vs - 1) : -1;
            break;
        case TS_ACT_RECV_GRAD:
            dir = 1, b = vs, peer = vs + 1 <= last ? sched_rank(S, vs + 1) : -1;
            break;
        default: break;
        }
        if (b < 0 || b >= last)
            return sched_bad_action(s, i, a, "no neighbouring virtual stage on that side");
        if (a->peer != peer) {
            snprintf(msg, sizeof msg, "the neighbouring virtual stage is on rank %d", peer);
            return sched_bad_action(s, i, a, msg);
        }
        sched_transfer *t = &S->tr[sched_index(S, dir, b, a->mb)];
        if (a->kind == TS_ACT_RECV_ACT || a->kind == TS_ACT_RECV_GRAD)
            t->recvs += t->recvs < USHRT_MAX;
        else
            t->sends += t->sends < USHRT_MAX;
    }
    if (l->nactions == 0 || l->actions[l->nactions - 1].kind != TS_ACT_OPTIMIZER_STEP)
        return ts_error(TS_ERR_INVALID,
                        "schedule: stage %d: the list does not end with OPTIMIZER_STEP", s);
    return TS_OK;
}

/* After all ranks' static checks: everything computed once, and each send
 * paired with exactly one receive. */
static ts_status sched_check_all(const sched_sim *S) {
    static const char *what[3] = {"forward", "backward", "weight gradients (BACKWARD_WEIGHT)"};
    int pv = S->p * S->v;
    for (int dir = 0; dir < 3; dir++)
        for (int vs = 0; vs < pv; vs++)
            for (int mb = 0; mb < S->m; mb++)
                if (!S->computed[sched_index(S, dir, vs, mb)])
                    return ts_error(TS_ERR_INVALID,
                                    "schedule: stage %d chunk %d (virtual stage %d) never "
                                    "computes the %s of micro-batch %d",
                                    sched_rank(S, vs), vs / S->p, vs, what[dir], mb);
    for (int dir = 0; dir < 2; dir++)
        for (int vs = 0; vs < pv; vs++)
            for (int mb = 0; mb < S->m; mb++) {
                const sched_transfer *t = &S->tr[sched_index(S, dir, vs, mb)];
                if (vs == pv - 1 || (t->sends == 1 && t->recvs == 1)) continue;
                int from = dir ? sched_rank(S, vs + 1) : sched_rank(S, vs),
                    to = dir ? sched_rank(S, vs) : sched_rank(S, vs + 1);
                return ts_error(TS_ERR_INVALID,
                                "schedule: %s of micro-batch %d from virtual stage %d (rank %d) "
                                "to %d (rank %d): %d sends, %d receives, want one of each",
                                dir ? "gradient" : "activation", mb, dir ? vs + 1 : vs, from,
                                dir ? vs : vs + 1, to, t->sends, t->recvs);
            }
    return TS_OK;
}

/* Runs every rank as far as it can until all are done; fails on a deadlock.
 * A rank that stops at a receive is run again only when a send to it is
 * issued (each rank on a stack of ranks to run at most once), so the run
 * costs the actions plus the ranks; which rank runs first changes nothing,
 * since a rank's clock follows only its own list and the times its
 * receives' sends were issued. */
static ts_status sched_run(sched_sim *S) {
    int *pc = calloc((size_t)S->p, sizeof *pc), *clock = calloc((size_t)S->p, sizeof *clock);
    int *stack = malloc(sizeof *stack * (size_t)S->p), *ci = malloc(sizeof *ci * (size_t)S->p);
    char *queued = calloc((size_t)S->p, 1);
    ts_status st = TS_OK;
    if (!pc || !clock || !stack || !ci || !queued) {
        st = ts_error(TS_ERR_NOMEM, "schedule: simulate: out of memory");
        goto out;
    }
    int n = 0, done = 0;
    for (int s = S->p - 1; s >= 0; s--)
        stack[n++] = s, queued[s] = 1, ci[s] = S->offset[s]; /* its next computation's index */
    while (n > 0) {
        int s = stack[--n];
        queued[s] = 0;
        const ts_schedule *l = &S->sch[s];
        for (; pc[s] < l->nactions; pc[s]++) {
            const ts_action *a = &l->actions[pc[s]];
            if (a->kind == TS_ACT_OPTIMIZER_STEP) continue;
            int vs = ts_stage_virtual(S->order, S->p, s, a->chunk);
            sched_transfer *t = NULL;
            switch (a->kind) {
            case TS_ACT_SEND_ACT:
            case TS_ACT_RECV_GRAD:
                t = &S->tr[sched_index(S, a->kind == TS_ACT_RECV_GRAD, vs, a->mb)];
                break;
            case TS_ACT_RECV_ACT:
            case TS_ACT_SEND_GRAD:
                t = &S->tr[sched_index(S, a->kind == TS_ACT_SEND_GRAD, vs - 1, a->mb)];
                break;
            default: break;
            }
            if (sched_compute(a->kind)) {
                int units = sched_units(S, a->kind);
                S->start[ci[s]++] = clock[s];
                clock[s] += units;
                S->busy += units;
                if (clock[s] > S->makespan) S->makespan = clock[s];
            } else if (a->kind == TS_ACT_SEND_ACT || a->kind == TS_ACT_SEND_GRAD) {
                t->issued_at = clock[s] + 1;
                /* The receiver (the checked peer) may be waiting for it. */
                if (a->peer != s && !queued[a->peer]) {
                    stack[n++] = a->peer;
                    queued[a->peer] = 1;
                }
            } else if (!t->issued_at) {
                break; /* a receive whose send has not run yet */
            } else if (t->issued_at - 1 > clock[s]) {
                clock[s] = t->issued_at - 1;
            }
        }
    }
    for (int s = 0; s < S->p; s++)
        done += pc[s] == S->sch[s].nactions;
    if (done < S->p) {
        char msg[1024];
        int len = snprintf(msg, sizeof msg, "schedule: the schedule deadlocks:");
        for (int s = 0; s < S->p && len < (int)sizeof msg; s++) {
            if (pc[s] == S->sch[s].nactions) continue;
            const ts_action *a = &S->sch[s].actions[pc[s]];
            len += snprintf(msg + len, sizeof msg - (size_t)len,
                            " stage %d waits at action %d (%s mb %d chunk %d from rank %d, t=%d);",
                            s, pc[s], sched_act_name(a->kind), a->mb, a->chunk, a->peer, clock[s]);
        }
        st = ts_error(TS_ERR_INVALID, "%s", msg);
    }
out:
    free(pc);
    free(clock);
    free(stack);
    free(ci);
    free(queued);
    return st;
}

/* Fills the result's timeline, in-flight peaks and bubble from S->start. */
static ts_status sched_fill(const sched_sim *S, ts_schedule_sim *r) {
    r->makespan = S->makespan;
    r->busy = S->busy;
    r->slots = malloc(sizeof *r->slots * ((size_t)S->p * (size_t)r->makespan + 1));
    r->peak_in_flight = malloc(sizeof *r->peak_in_flight * (size_t)S->p);
    if (!r->slots || !r->peak_in_flight)
        return ts_error(TS_ERR_NOMEM, "schedule: simulate: out of memory");
    for (long k = 0; k < (long)S->p * r->makespan; k++)
        r->slots[k] = (ts_schedule_slot){'.', -1, -1};
    for (int s = 0; s < S->p; s++) {
        int now = 0, peak = 0, c = S->offset[s]; /* peak: ts_schedule_peak_in_flight's */
        for (int i = 0; i < S->sch[s].nactions; i++) {
            const ts_action *a = &S->sch[s].actions[i];
            if (!sched_compute(a->kind)) continue;
            if (a->kind == TS_ACT_FORWARD && ++now > peak) peak = now;
            if (a->kind == TS_ACT_BACKWARD || a->kind == TS_ACT_BACKWARD_WEIGHT) now--;
            int t0 = S->start[c++], dur = sched_units(S, a->kind);
            char op = a->kind == TS_ACT_FORWARD           ? 'F'
                      : a->kind == TS_ACT_BACKWARD_WEIGHT ? 'W'
                                                          : 'B';
            for (int t = t0; t < t0 + dur; t++)
                r->slots[(size_t)s * (size_t)r->makespan + (size_t)t] =
                    (ts_schedule_slot){op, a->mb, a->chunk};
        }
        r->peak_in_flight[s] = peak;
    }
    r->bubble_den = (long)S->p * r->makespan;
    r->bubble_num = r->bubble_den - r->busy;
    long g = sched_gcd(r->bubble_num, r->bubble_den);
    if (g > 1) r->bubble_num /= g, r->bubble_den /= g;
    return TS_OK;
}

ts_status ts_schedule_simulate(int stages, const ts_schedule *per_stage, int micro_batches,
                               int chunks, int f_units, int b_units, ts_schedule_sim *out) {
    ts_schedule_shape shape = {stages, micro_batches,        chunks, f_units, b_units,
                               0,      TS_STAGES_INTERLEAVED};
    return ts_schedule_simulate_shape(&shape, per_stage, out);
}

ts_status ts_schedule_simulate_shape(const ts_schedule_shape *sh, const ts_schedule *per_stage,
                                     ts_schedule_sim *out) {
    memset(out, 0, sizeof *out);
    int stages = sh->stages, micro_batches = sh->micro_batches, chunks = sh->chunks;
    if (stages < 1 || micro_batches < 1 || chunks < 1 || sh->f_units < 1 || sh->b_units < 1 ||
        sh->w_units < 0 || !per_stage)
        return ts_error(TS_ERR_INVALID,
                        "schedule: simulate: stages=%d micro_batches=%d chunks=%d f_units=%d "
                        "b_units=%d, all must be at least 1 (w_units=%d at least 0)",
                        stages, micro_batches, chunks, sh->f_units, sh->b_units, sh->w_units);
    if (sh->order != TS_STAGES_INTERLEAVED && sh->order != TS_STAGES_V)
        return ts_error(TS_ERR_INVALID, "schedule: simulate: stage order %d", sh->order);
    sched_sim S = {.p = stages,
                   .m = micro_batches,
                   .v = chunks,
                   .fu = sh->f_units,
                   .bu = sh->b_units,
                   .wu = sh->w_units,
                   .order = sh->order,
                   .sch = per_stage};
    size_t cells = 3 * (size_t)stages * (size_t)chunks * (size_t)micro_batches;
    size_t transfers = cells / 3 * 2;
    S.tr = calloc(transfers, sizeof *S.tr);
    S.computed = calloc(cells, 1);
    S.offset = calloc((size_t)stages + 1, sizeof *S.offset);
    ts_status st = TS_OK;
    if (!S.tr || !S.computed || !S.offset)
        st = ts_error(TS_ERR_NOMEM, "schedule: simulate: out of memory");
    for (int s = 0; !st && s < stages; s++)
        st = sched_check_stage(&S, s);
    for (int s = 0; !st && s < stages; s++)
        S.offset[s + 1] += S.offset[s];
    if (!st) st = sched_check_all(&S);
    if (!st && !(S.start = malloc(sizeof *S.start * ((size_t)S.offset[stages] + 1))))
        st = ts_error(TS_ERR_NOMEM, "schedule: simulate: out of memory");
    if (!st) st = sched_run(&S);
    if (!st) {
        *out = (ts_schedule_sim){.stages = stages,
                                 .micro_batches = micro_batches,
                                 .chunks = chunks,
                                 .f_units = sh->f_units,
                                 .b_units = sh->b_units,
                                 .w_units = sh->w_units,
                                 .order = sh->order,
                                 .bubble_den = 1};
        st = sched_fill(&S, out);
    }
    if (st) ts_schedule_sim_free(out);
    free(S.tr);
    free(S.computed);
    free(S.start);
    free(S.offset);
    return st;
}

void ts_schedule_sim_free(ts_schedule_sim *sim) {
    free(sim->slots);
    free(sim->peak_in_flight);
    memset(sim, 0, sizeof *sim);
}

static int sched_digits(int x) {
    int d = 1;
    while (x >= 10)
        x /= 10, d++;
    return d;
}

void ts_schedule_timeline_print(const ts_schedule_sim *r, FILE *f) {
    int width = 1 + sched_digits(r->micro_batches - 1) + (r->chunks > 1);
    int rank_width = sched_digits(r->stages - 1);
    for (int s = 0; s < r->stages; s++) {
        fprintf(f, "rank %*d |", rank_width, s);
        for (int t = 0; t < r->makespan; t++) {
            const ts_schedule_slot *c = &r->slots[(size_t)s * (size_t)r->makespan + (size_t)t];
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
    fprintf(f, "bubble %ld/%ld = %.3f (makespan %d units; F = %d, B = %d", r->bubble_num,
            r->bubble_den, r->bubble_den ? (double)r->bubble_num / (double)r->bubble_den : 0.0,
            r->makespan, r->f_units, r->b_units);
    if (r->w_units > 0) fprintf(f, ", W = %d", r->w_units);
    fprintf(f, ")\n");
}
