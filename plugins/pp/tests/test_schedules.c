/*
 * test_schedules.c — properties of the pp plugin's schedules (the generators
 * of plugins/pp/schedules.c), checked on the action lists and under the
 * core's unit-time simulator (core/base/schedule.c), without a model or MPI.
 *
 * Usage: test_schedules <property>  (one ctest each, see pp_tests.cmake),
 *        test_schedules             (all of them).
 * The sweep: p in {1,2,3,4,8}; m in {1..16, 32} for GPipe and 1F1B; v in
 * {2,3} and m in {p, 2p, ..} up to 32 for interleaved.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "schedule.h"  /* ts_schedule, ts_schedule_simulate: the core's */
#include "schedules.h" /* the generators under test                   */

_Static_assert(TS_PLUGIN_ACT_FORWARD == TS_ACT_FORWARD &&
                   TS_PLUGIN_ACT_SEND_ACT == TS_ACT_SEND_ACT &&
                   TS_PLUGIN_ACT_RECV_GRAD == TS_ACT_RECV_GRAD &&
                   TS_PLUGIN_ACT_OPTIMIZER_STEP == TS_ACT_OPTIMIZER_STEP,
               "the generators emit the core's action kinds");

#include "pp_check.h"

#define MAX_STAGES 8

/* One pipeline: every stage's list for one (kind, p, m, v). */
typedef struct pipeline {
    pp_schedule_kind kind;
    int p, m, v; /* v = 1 for GPipe and 1F1B */
    ts_schedule s[MAX_STAGES];
} pipeline;

static const char *pipeline_name(const pipeline *pl) {
    static char name[96];
    snprintf(name, sizeof name, "%s p=%d m=%d v=%d", pp_schedule_kind_name(pl->kind), pl->p, pl->m,
             pl->v);
    return name;
}

/* The generators' callback, appending to a ts_schedule. */
static ts_status append_to_schedule(void *user, int kind, int mb, int chunk, int peer) {
    return ts_schedule_append(user, (ts_action_kind)kind, mb, chunk, peer);
}

/* One rank's list; on failure `out` is empty and the reason in `why`. */
static ts_status schedule_build(pp_schedule_kind kind, int p, int s, int m, int v, ts_schedule *out,
                                char *why, size_t why_size) {
    *out = (ts_schedule){0, NULL};
    snprintf(why, why_size, "%s", "");
    if (pp_schedule_check(kind, p, s, m, v, why, why_size)) return TS_ERR_CONFIG;
    ts_status st = pp_schedule_emit(kind, p, s, m, v, append_to_schedule, out);
    if (st) {
        snprintf(why, why_size, "%s", ts_last_error());
        ts_schedule_free(out);
    }
    return st;
}

static int pipeline_build(pipeline *pl, pp_schedule_kind kind, int p, int m, int v) {
    *pl = (pipeline){.kind = kind,
                     .p = p,
                     .m = m,
                     .v = kind == PP_SCHEDULE_INTERLEAVED || kind == PP_SCHEDULE_ZB_V ? v : 1};
    for (int s = 0; s < p; s++) {
        char why[256];
        ts_status st = schedule_build(kind, p, s, m, v, &pl->s[s], why, sizeof why);
        CHECK(st == TS_OK, "%s stage %d: %s", pipeline_name(pl), s, why);
        if (st) return 1;
    }
    return 0;
}

static void pipeline_free(pipeline *pl) {
    for (int s = 0; s < pl->p; s++)
        ts_schedule_free(&pl->s[s]);
}

/* Calls check(pl) on every pipeline of the sweep. */
static void sweep(void (*check)(const pipeline *pl)) {
    static const int ps[] = {1, 2, 3, 4, 8};
    for (int i = 0; i < 5; i++) {
        int p = ps[i];
        for (int m = 1; m <= 32; m++) {
            pipeline pl;
            if (m <= 16 || m == 32)
                for (int k = PP_SCHEDULE_GPIPE; k <= PP_SCHEDULE_1F1B; k++) {
                    if (pipeline_build(&pl, (pp_schedule_kind)k, p, m, 1) == 0) check(&pl);
                    pipeline_free(&pl);
                }
            if (m % p == 0)
                for (int v = 2; v <= 3; v++) {
                    if (pipeline_build(&pl, PP_SCHEDULE_INTERLEAVED, p, m, v) == 0) check(&pl);
                    pipeline_free(&pl);
                }
        }
    }
}

static int is_compute(const ts_action *a) {
    return a->kind == TS_ACT_FORWARD || a->kind == TS_ACT_BACKWARD;
}

/* --- every micro-batch's forward precedes its backward on each stage ------- */

static void check_forward_precedes_backward(const pipeline *pl) {
    for (int s = 0; s < pl->p; s++) {
        int fwd_at[32 * 3], bwd_at[32 * 3], fwd_n[32 * 3] = {0}, bwd_n[32 * 3] = {0};
        const ts_schedule *l = &pl->s[s];
        for (int i = 0; i < l->nactions; i++) {
            const ts_action *a = &l->actions[i];
            if (!is_compute(a)) continue;
            int k = a->chunk * pl->m + a->mb;
            if (a->kind == TS_ACT_FORWARD)
                fwd_at[k] = i, fwd_n[k]++;
            else
                bwd_at[k] = i, bwd_n[k]++;
        }
        for (int c = 0; c < pl->v; c++)
            for (int mb = 0; mb < pl->m; mb++) {
                int k = c * pl->m + mb;
                CHECK(fwd_n[k] == 1 && bwd_n[k] == 1, "%s stage %d mb %d chunk %d: %d F, %d B",
                      pipeline_name(pl), s, mb, c, fwd_n[k], bwd_n[k]);
                if (fwd_n[k] == 1 && bwd_n[k] == 1)
                    CHECK(fwd_at[k] < bwd_at[k], "%s stage %d mb %d chunk %d: B at %d, F at %d",
                          pipeline_name(pl), s, mb, c, bwd_at[k], fwd_at[k]);
            }
    }
}

static void test_forward_precedes_backward(void) {
    sweep(check_forward_precedes_backward);
}

/* --- every send has exactly one receive and vice versa ---------------------- */

/* A transfer as both sides see it: direction, micro-batch, the virtual stage
 * it leaves and the one it reaches, source and destination ranks. */
typedef struct transfer {
    int grad, mb, from_vs, to_vs, src, dst;
} transfer;

static int transfer_collect(const pipeline *pl, int want_send, transfer *out) {
    int n = 0;
    for (int s = 0; s < pl->p; s++)
        for (int i = 0; i < pl->s[s].nactions; i++) {
            const ts_action *a = &pl->s[s].actions[i];
            int vs = a->chunk * pl->p + s;
            switch (a->kind) {
            case TS_ACT_SEND_ACT:
                if (want_send) out[n++] = (transfer){0, a->mb, vs, vs + 1, s, a->peer};
                break;
            case TS_ACT_SEND_GRAD:
                if (want_send) out[n++] = (transfer){1, a->mb, vs, vs - 1, s, a->peer};
                break;
            case TS_ACT_RECV_ACT:
                if (!want_send) out[n++] = (transfer){0, a->mb, vs - 1, vs, a->peer, s};
                break;
            case TS_ACT_RECV_GRAD:
                if (!want_send) out[n++] = (transfer){1, a->mb, vs + 1, vs, a->peer, s};
                break;
            default: break;
            }
        }
    return n;
}

static int transfer_count(const transfer *t, int n, const transfer *x) {
    int c = 0;
    for (int i = 0; i < n; i++)
        c += memcmp(&t[i], x, sizeof *x) == 0;
    return c;
}

static void check_sends_match_receives(const pipeline *pl) {
    static transfer sends[2 * MAX_STAGES * 3 * 32], recvs[2 * MAX_STAGES * 3 * 32];
    int ns = transfer_collect(pl, 1, sends), nr = transfer_collect(pl, 0, recvs);
    /* every boundary of every micro-batch is crossed once each way */
    int want = 2 * pl->m * (pl->p * pl->v - 1);
    CHECK(ns == want && nr == want, "%s: %d sends, %d receives, want %d", pipeline_name(pl), ns, nr,
          want);
    for (int i = 0; i < ns; i++)
        CHECK(transfer_count(recvs, nr, &sends[i]) == 1 &&
                  transfer_count(sends, ns, &sends[i]) == 1,
              "%s: send %s mb %d vs %d->%d rank %d->%d has %d receives", pipeline_name(pl),
              sends[i].grad ? "grad" : "act", sends[i].mb, sends[i].from_vs, sends[i].to_vs,
              sends[i].src, sends[i].dst, transfer_count(recvs, nr, &sends[i]));
    for (int i = 0; i < nr; i++)
        CHECK(transfer_count(sends, ns, &recvs[i]) == 1, "%s: receive mb %d vs %d->%d has %d sends",
              pipeline_name(pl), recvs[i].mb, recvs[i].from_vs, recvs[i].to_vs,
              transfer_count(sends, ns, &recvs[i]));
}

static void test_sends_match_receives(void) {
    sweep(check_sends_match_receives);
}

/* --- each compute sits between its receive and its send; peers wrap --------- */

static void check_compute_wrapped(const pipeline *pl) {
    int last = pl->p * pl->v - 1;
    for (int s = 0; s < pl->p; s++) {
        const ts_schedule *l = &pl->s[s];
        int prev = (s + pl->p - 1) % pl->p, next = (s + 1) % pl->p, computes = 0;
        CHECK(l->nactions > 0 && l->actions[l->nactions - 1].kind == TS_ACT_OPTIMIZER_STEP,
              "%s stage %d: does not end with OPTIMIZER_STEP", pipeline_name(pl), s);
        for (int i = 0; i < l->nactions; i++) {
            const ts_action *a = &l->actions[i];
            CHECK(a->kind != TS_ACT_OPTIMIZER_STEP || i == l->nactions - 1,
                  "%s stage %d: OPTIMIZER_STEP at %d of %d", pipeline_name(pl), s, i, l->nactions);
            if (!is_compute(a)) continue;
            computes++;
            int vs = a->chunk * pl->p + s, fwd = a->kind == TS_ACT_FORWARD;
            int has_before = fwd ? vs > 0 : vs < last, has_after = fwd ? vs < last : vs > 0;
            ts_action before = {fwd ? TS_ACT_RECV_ACT : TS_ACT_RECV_GRAD, a->mb, a->chunk,
                                fwd ? prev : next};
            ts_action after = {fwd ? TS_ACT_SEND_ACT : TS_ACT_SEND_GRAD, a->mb, a->chunk,
                               fwd ? next : prev};
            if (has_before)
                CHECK(i > 0 && memcmp(&l->actions[i - 1], &before, sizeof before) == 0,
                      "%s stage %d action %d (%c%d chunk %d): not preceded by its receive",
                      pipeline_name(pl), s, i, fwd ? 'F' : 'B', a->mb, a->chunk);
            if (has_after)
                CHECK(i + 1 < l->nactions && memcmp(&l->actions[i + 1], &after, sizeof after) == 0,
                      "%s stage %d action %d (%c%d chunk %d): not followed by its send",
                      pipeline_name(pl), s, i, fwd ? 'F' : 'B', a->mb, a->chunk);
        }
        CHECK(computes == 2 * pl->m * pl->v, "%s stage %d: %d computes", pipeline_name(pl), s,
              computes);
    }
}

static void test_compute_wrapped_in_transfers(void) {
    sweep(check_compute_wrapped);
    /* the wrap itself: p=4, v=2, stage 3 chunk 0 feeds stage 0 chunk 1 */
    pipeline pl;
    if (pipeline_build(&pl, PP_SCHEDULE_INTERLEAVED, 4, 8, 2) == 0) {
        int found = 0;
        for (int i = 0; i < pl.s[0].nactions; i++) {
            const ts_action *a = &pl.s[0].actions[i];
            found += a->kind == TS_ACT_RECV_ACT && a->chunk == 1 && a->peer == 3;
            CHECK(!(a->kind == TS_ACT_RECV_ACT && a->chunk == 0), "stage 0 chunk 0 receives");
        }
        CHECK(found == 8, "stage 0 chunk 1 receives %d activations from rank 3, want 8", found);
    }
    pipeline_free(&pl);
}

/* --- no schedule deadlocks --------------------------------------------------- */

static void check_no_deadlock(const pipeline *pl) {
    ts_schedule_sim r;
    ts_status st = ts_schedule_simulate(pl->p, pl->s, pl->m, pl->v, 1, 1, &r);
    CHECK(st == TS_OK, "%s: %s", pipeline_name(pl), ts_last_error());
    if (st) return;
    CHECK(r.busy == 2L * pl->p * pl->m * pl->v, "%s: busy %ld", pipeline_name(pl), r.busy);
    ts_schedule_sim_free(&r);
    /* a backward taking twice as long does not change the order of events */
    st = ts_schedule_simulate(pl->p, pl->s, pl->m, pl->v, 1, 2, &r);
    CHECK(st == TS_OK, "%s, B = 2: %s", pipeline_name(pl), ts_last_error());
    if (!st) ts_schedule_sim_free(&r);
}

static void test_no_deadlock(void) {
    sweep(check_no_deadlock);
}

/* --- bubble (p-1)/(m+p-1) for GPipe and 1F1B -------------------------------- */

static long gcd(long a, long b) {
    return b ? gcd(b, a % b) : a;
}

static int simulated_bubble(const pipeline *pl, int b_units, long *num, long *den) {
    ts_schedule_sim r;
    ts_status st = ts_schedule_simulate(pl->p, pl->s, pl->m, pl->v, 1, b_units, &r);
    CHECK(st == TS_OK, "%s: %s", pipeline_name(pl), ts_last_error());
    if (st) return 1;
    *num = r.bubble_num, *den = r.bubble_den;
    ts_schedule_sim_free(&r);
    return 0;
}

static void check_bubble_gpipe_1f1b(const pipeline *pl) {
    if (pl->kind == PP_SCHEDULE_INTERLEAVED) return;
    long num, den, fnum, fden;
    long want_num = pl->p - 1, want_den = pl->m + pl->p - 1, g = gcd(want_num, want_den);
    want_num /= g, want_den /= g;
    if (pp_bubble_formula(pl->kind, pl->p, pl->m, 1, &fnum, &fden) == TS_OK)
        CHECK(fnum == want_num && fden == want_den, "%s: formula %ld/%ld, want %ld/%ld",
              pipeline_name(pl), fnum, fden, want_num, want_den);
    for (int b_units = 1; b_units <= 2; b_units++)
        if (simulated_bubble(pl, b_units, &num, &den) == 0)
            CHECK(num == want_num && den == want_den, "%s, B = %d: simulated %ld/%ld, want %ld/%ld",
                  pipeline_name(pl), b_units, num, den, want_num, want_den);
}

static void test_bubble_gpipe_1f1b(void) {
    sweep(check_bubble_gpipe_1f1b);
    /* the examples */
    static const struct {
        int m;
        long num, den;
    } ex[] = {{8, 3, 11}, {32, 3, 35}};
    for (int i = 0; i < 2; i++)
        for (int k = PP_SCHEDULE_GPIPE; k <= PP_SCHEDULE_1F1B; k++) {
            pipeline pl;
            long num, den;
            if (pipeline_build(&pl, (pp_schedule_kind)k, 4, ex[i].m, 1) == 0 &&
                simulated_bubble(&pl, 1, &num, &den) == 0)
                CHECK(num == ex[i].num && den == ex[i].den, "%s: %ld/%ld, want %ld/%ld",
                      pipeline_name(&pl), num, den, ex[i].num, ex[i].den);
            pipeline_free(&pl);
        }
}

/* --- interleaved: smaller by the factor v ------------------------------------ */

static void check_bubble_interleaved(const pipeline *pl) {
    if (pl->kind != PP_SCHEDULE_INTERLEAVED) return;
    long num, den, fnum, fden, onum, oden;
    if (pp_bubble_formula(pl->kind, pl->p, pl->m, pl->v, &fnum, &fden) != TS_OK) return;
    for (int b_units = 2; b_units >= 1; b_units--) /* ends with B = 1 in num, den */
        if (simulated_bubble(pl, b_units, &num, &den) == 0)
            CHECK(num == fnum && den == fden,
                  "%s, B = %d: simulated %ld/%ld, formula (p-1)/(vm+p-1) %ld/%ld",
                  pipeline_name(pl), b_units, num, den, fnum, fden);
    pipeline one;
    if (pipeline_build(&one, PP_SCHEDULE_1F1B, pl->p, pl->m, 1) == 0 &&
        simulated_bubble(&one, 1, &onum, &oden) == 0) {
        if (pl->p > 1)
            CHECK(num * oden < onum * den, "%s: %ld/%ld is not below 1f1b's %ld/%ld",
                  pipeline_name(pl), num, den, onum, oden);
        /* idle per unit of work is exactly v times smaller:
         * num/(den-num) * v == onum/(oden-onum) */
        CHECK(num * pl->v * (oden - onum) == onum * (den - num),
              "%s: idle/work %ld/%ld is not 1f1b's %ld/%ld divided by v", pipeline_name(pl), num,
              den - num, onum, oden - onum);
    }
    pipeline_free(&one);
}

static void test_bubble_interleaved(void) {
    sweep(check_bubble_interleaved);
    static const struct {
        int m;
        long num, den;
    } ex[] = {{8, 3, 19}, {32, 3, 67}};
    for (int i = 0; i < 2; i++) {
        pipeline pl;
        long num, den;
        if (pipeline_build(&pl, PP_SCHEDULE_INTERLEAVED, 4, ex[i].m, 2) == 0 &&
            simulated_bubble(&pl, 1, &num, &den) == 0)
            CHECK(num == ex[i].num && den == ex[i].den, "%s: %ld/%ld, want %ld/%ld",
                  pipeline_name(&pl), num, den, ex[i].num, ex[i].den);
        pipeline_free(&pl);
    }
}

/* --- micro-batches in flight: 1F1B <= p - stage, GPipe = m --------------------- */

static void check_in_flight(const pipeline *pl) {
    if (pl->kind == PP_SCHEDULE_INTERLEAVED) return;
    ts_schedule_sim r;
    if (ts_schedule_simulate(pl->p, pl->s, pl->m, pl->v, 1, 1, &r)) {
        CHECK(0, "%s: %s", pipeline_name(pl), ts_last_error());
        return;
    }
    for (int s = 0; s < pl->p; s++) {
        int got = r.peak_in_flight[s];
        int bound = pl->p - s < pl->m ? pl->p - s : pl->m;
        if (pl->kind == PP_SCHEDULE_1F1B)
            CHECK(got <= pl->p - s && got == bound,
                  "%s stage %d: %d in flight, want min(p-s, m)=%d", pipeline_name(pl), s, got,
                  bound);
        else
            CHECK(got == pl->m, "%s stage %d: %d in flight, want m", pipeline_name(pl), s, got);
    }
    ts_schedule_sim_free(&r);
}

static void test_in_flight(void) {
    sweep(check_in_flight);
}

/* --- interleaved warmup as Megatron-LM computes it ------------------------------ */

/* Stage s runs w = (p-s-1)*2 + (v-1)*p warmup forwards (at most m*v), then
 * one more forward before its first backward: w+1 (mb, chunk) pairs in
 * flight, capped at m*v. A shorter warmup gives the same unit-time bubble
 * (transfers cost nothing here), so this is what pins Megatron's count. */
static void check_interleaved_warmup(const pipeline *pl) {
    if (pl->kind != PP_SCHEDULE_INTERLEAVED) return;
    for (int s = 0; s < pl->p; s++) {
        int want = (pl->p - s - 1) * 2 + (pl->v - 1) * pl->p + 1;
        if (want > pl->m * pl->v) want = pl->m * pl->v;
        int got = ts_schedule_peak_in_flight(&pl->s[s]);
        CHECK(got == want, "%s stage %d: %d in flight, want %d", pipeline_name(pl), s, got, want);
    }
}

static void test_interleaved_warmup(void) {
    sweep(check_interleaved_warmup);
}

/* --- invalid arguments ------------------------------------------------------- */

/* Refused by pp_schedule_check with `want` in the reason, and by
 * pp_schedule_emit with TS_ERR_CONFIG before anything is emitted. */
static void expect_refused(pp_schedule_kind kind, int p, int s, int m, int v, const char *want) {
    char why[256] = "";
    CHECK(pp_schedule_check(kind, p, s, m, v, why, sizeof why) != 0, "accepted (%s)", want);
    CHECK(strstr(why, want) != NULL, "reason '%s' lacks '%s'", why, want);
    ts_schedule out = {0, NULL};
    ts_status st = pp_schedule_emit(kind, p, s, m, v, append_to_schedule, &out);
    CHECK(st == TS_ERR_CONFIG, "emit: status %d, want TS_ERR_CONFIG (%s)", (int)st, want);
    CHECK(out.nactions == 0, "emit: %d actions emitted (%s)", out.nactions, want);
    ts_schedule_free(&out);
}

/* An append that fails at its third call. */
static ts_status append_fails_third(void *user, int kind, int mb, int chunk, int peer) {
    (void)kind, (void)mb, (void)chunk, (void)peer;
    return ++*(int *)user == 3 ? TS_ERR_NOMEM : TS_OK;
}

static void test_invalid_arguments(void) {
    expect_refused(PP_SCHEDULE_GPIPE, 4, 0, 0, 1, "gpipe: micro_batches=0, need at least 1");
    expect_refused(PP_SCHEDULE_1F1B, 0, 0, 8, 1, "1f1b: stages=0, need at least 1");
    expect_refused(PP_SCHEDULE_1F1B, 4, 4, 8, 1, "stage=4 is outside 0..3");
    expect_refused(PP_SCHEDULE_GPIPE, 4, -1, 8, 1, "stage=-1 is outside 0..3");
    expect_refused(PP_SCHEDULE_INTERLEAVED, 4, 0, 6, 2,
                   "interleaved: micro_batches=6 is not divisible by stages=4");
    expect_refused(PP_SCHEDULE_INTERLEAVED, 4, 0, 8, 1,
                   "interleaved: chunks=1 (virtual stages per rank), need at least 2");
    expect_refused((pp_schedule_kind)7, 4, 0, 8, 1, "schedule kind 7 is not gpipe");
    /* products of the arguments, counted in 64 bits before an int holds them */
    expect_refused(PP_SCHEDULE_INTERLEAVED, 2, 0, 200000000, 2,
                   "interleaved: micro_batches=200000000 x chunks=2: a rank's list of up to "
                   "2800000001 actions does not fit in an int");
    expect_refused(PP_SCHEDULE_ZB_V, 65536, 0, 10000, 2,
                   "zb_v: stages=65536 x micro_batches=10000 x 6 = 3932160000 steps");
    pp_schedule_kind kind = PP_SCHEDULE_GPIPE;
    CHECK(pp_schedule_kind_parse("zigzag", &kind) == TS_ERR_CONFIG && kind == PP_SCHEDULE_GPIPE,
          "zigzag parsed");
    CHECK(pp_schedule_kind_parse(NULL, &kind) == TS_ERR_CONFIG, "NULL parsed");
    for (int k = PP_SCHEDULE_GPIPE; k <= PP_SCHEDULE_INTERLEAVED; k++)
        CHECK(pp_schedule_kind_parse(pp_schedule_kind_name((pp_schedule_kind)k), &kind) == TS_OK &&
                  kind == (pp_schedule_kind)k,
              "%s does not parse back", pp_schedule_kind_name((pp_schedule_kind)k));
    char why[128] = "";
    CHECK(pp_schedule_check(PP_SCHEDULE_1F1B, 2, 1, 3, 0, why, sizeof why) == 0, "valid: %s", why);
    long num = -1, den = -1;
    CHECK(pp_bubble_formula(PP_SCHEDULE_INTERLEAVED, 4, 8, 0, &num, &den) == TS_ERR_CONFIG &&
              num == -1,
          "bubble with v=0");
    CHECK(pp_bubble_formula(PP_SCHEDULE_1F1B, 0, 8, 1, &num, &den) == TS_ERR_CONFIG, "p=0");
    /* a failing append stops the generator with its status */
    int calls = 0;
    CHECK(pp_schedule_emit(PP_SCHEDULE_1F1B, 2, 0, 4, 1, append_fails_third, &calls) ==
                  TS_ERR_NOMEM &&
              calls == 3,
          "append failure: %d calls", calls);
}

/* ZB-V's simulation kept for the other ranks' calls (as the plugin keeps it)
 * gives every rank exactly the actions of a fresh one, in any order of the
 * calls and across a change of shape. */
static void test_zb_v_cache_matches_fresh(void) {
    pp_schedule_cache cache = {0};
    static const int shapes[][2] = {{4, 8}, {3, 5}, {4, 8}, {1, 2}, {8, 16}};
    for (int i = 0; i < (int)(sizeof shapes / sizeof shapes[0]); i++) {
        int p = shapes[i][0], m = shapes[i][1];
        for (int k = 0; k < p; k++) {
            int s = (k * 5 + i) % p; /* not in rank order */
            ts_schedule fresh = {0, NULL}, kept = {0, NULL};
            CHECK(pp_schedule_emit(PP_SCHEDULE_ZB_V, p, s, m, 2, append_to_schedule, &fresh) ==
                      TS_OK,
                  "zb_v p=%d m=%d stage %d", p, m, s);
            CHECK(pp_schedule_emit_cached(&cache, PP_SCHEDULE_ZB_V, p, s, m, 2, append_to_schedule,
                                          &kept) == TS_OK,
                  "cached zb_v p=%d m=%d stage %d", p, m, s);
            CHECK(fresh.nactions == kept.nactions &&
                      memcmp(fresh.actions, kept.actions,
                             sizeof *fresh.actions * (size_t)fresh.nactions) == 0,
                  "zb_v p=%d m=%d stage %d: the cached list differs", p, m, s);
            ts_schedule_free(&fresh);
            ts_schedule_free(&kept);
        }
    }
    pp_schedule_cache_free(&cache);
    CHECK(cache.steps == NULL, "the cache is not empty after pp_schedule_cache_free");
}

/* --- the simulator itself catches broken schedules ---------------------------- */

#define A(k, mb, peer) ((ts_action){TS_ACT_##k, mb, 0, peer})

static ts_status simulate_lists(ts_action *l0, int n0, ts_action *l1, int n1) {
    ts_schedule s[2] = {{n0, l0}, {n1, l1}};
    ts_schedule_sim r;
    ts_status st = ts_schedule_simulate(2, s, 2, 1, 1, 1, &r);
    if (!st) ts_schedule_sim_free(&r);
    return st;
}

static void test_simulator_catches_broken_schedules(void) {
    /* stage 0 waits for mb 0's gradient before sending mb 1; stage 1 sends
     * that gradient only after the backward of mb 1: a cycle */
    ts_action s0[] = {A(FORWARD, 0, -1),  A(SEND_ACT, 0, 1),  A(RECV_GRAD, 0, 1),
                      A(BACKWARD, 0, -1), A(FORWARD, 1, -1),  A(SEND_ACT, 1, 1),
                      A(RECV_GRAD, 1, 1), A(BACKWARD, 1, -1), A(OPTIMIZER_STEP, -1, -1)};
    ts_action s1[] = {A(RECV_ACT, 0, 0),  A(FORWARD, 0, -1),  A(RECV_ACT, 1, 0),
                      A(FORWARD, 1, -1),  A(BACKWARD, 1, -1), A(SEND_GRAD, 1, 0),
                      A(BACKWARD, 0, -1), A(SEND_GRAD, 0, 0), A(OPTIMIZER_STEP, -1, -1)};
    ts_status st = simulate_lists(s0, 9, s1, 9);
    CHECK(st == TS_ERR_INVALID && strstr(ts_last_error(), "deadlocks"), "deadlock: %d %s", (int)st,
          ts_last_error());
    CHECK(strstr(ts_last_error(), "stage 0 waits at action 2 (RECV_GRAD mb 0"), "%s",
          ts_last_error());

    /* the same with stage 1 in 1F1B order runs */
    ts_action ok1[] = {A(RECV_ACT, 0, 0),  A(FORWARD, 0, -1),  A(BACKWARD, 0, -1),
                       A(SEND_GRAD, 0, 0), A(RECV_ACT, 1, 0),  A(FORWARD, 1, -1),
                       A(BACKWARD, 1, -1), A(SEND_GRAD, 1, 0), A(OPTIMIZER_STEP, -1, -1)};
    ts_action ok0[9];
    memcpy(ok0, s0, sizeof ok0);
    st = simulate_lists(ok0, 9, ok1, 9);
    CHECK(st == TS_OK, "%s", ts_last_error());

    /* a send twice */
    ts_action dup0[10];
    memcpy(dup0, s0, 2 * sizeof *dup0);
    dup0[2] = A(SEND_ACT, 0, 1);
    memcpy(dup0 + 3, s0 + 2, 7 * sizeof *dup0);
    st = simulate_lists(dup0, 10, ok1, 9);
    CHECK(st == TS_ERR_INVALID && strstr(ts_last_error(), "2 sends, 1 receives"), "%s",
          ts_last_error());

    /* a send to the wrong rank */
    memcpy(ok0, s0, sizeof ok0);
    ok0[1].peer = 0;
    st = simulate_lists(ok0, 9, ok1, 9);
    CHECK(st == TS_ERR_INVALID &&
              strstr(ts_last_error(), "neighbouring virtual stage is on rank 1"),
          "%s", ts_last_error());

    /* a backward before its forward */
    memcpy(ok0, s0, sizeof ok0);
    ok0[0] = A(BACKWARD, 0, -1), ok0[3] = A(FORWARD, 0, -1);
    st = simulate_lists(ok0, 9, ok1, 9);
    CHECK(st == TS_ERR_INVALID && strstr(ts_last_error(), "backward before its forward"), "%s",
          ts_last_error());

    /* no optimizer step */
    st = simulate_lists(s0, 8, ok1, 9);
    CHECK(st == TS_ERR_INVALID && strstr(ts_last_error(), "does not end with OPTIMIZER_STEP"), "%s",
          ts_last_error());
}

/* --- zero-bubble schedules ------------------------------------------------------ */

/* Simulates a zero-bubble pipeline with F = B = W = 1 unit (a whole
 * backward 2); 0 and the result in *r, or 1 with the failure checked. */
static int zb_simulate(const pipeline *pl, ts_schedule_sim *r) {
    ts_schedule_shape shape = {pl->p, pl->m, pl->v, 1, 1, 1, pp_schedule_kind_order(pl->kind)};
    ts_status st = ts_schedule_simulate_shape(&shape, pl->s, r);
    CHECK(st == TS_OK, "%s: %s", pipeline_name(pl), ts_last_error());
    return st != TS_OK;
}

/* Every (mb, chunk) once F, once B (its input part), once W, in that order on
 * its rank, and the whole pipeline consistent and deadlock-free under the
 * simulator (which checks every transfer, peer and dependency), for p in
 * {1, 2, 3, 4, 8} and m in 1..16 and 32. */
static void test_zero_bubble_valid(void) {
    static const int ps[] = {1, 2, 3, 4, 8};
    for (int i = 0; i < 5; i++)
        for (int m = 1; m <= 32; m++) {
            if (m > 16 && m != 32) continue;
            for (int k = PP_SCHEDULE_ZB_H1; k <= PP_SCHEDULE_ZB_V; k++) {
                pipeline pl;
                if (pipeline_build(&pl, (pp_schedule_kind)k, ps[i], m, 2) == 0) {
                    for (int s = 0; s < pl.p; s++) {
                        int seen[3][2 * 32] = {{0}}, order_ok = 1;
                        for (int a = 0; a < pl.s[s].nactions; a++) {
                            const ts_action *x = &pl.s[s].actions[a];
                            int op = x->kind == TS_ACT_FORWARD           ? 0
                                     : x->kind == TS_ACT_BACKWARD_INPUT  ? 1
                                     : x->kind == TS_ACT_BACKWARD_WEIGHT ? 2
                                                                         : -1;
                            CHECK(x->kind != TS_ACT_BACKWARD, "%s: a whole backward",
                                  pipeline_name(&pl));
                            if (op < 0) continue;
                            int key = x->chunk * pl.m + x->mb;
                            order_ok &= op == 0 || seen[op - 1][key];
                            seen[op][key]++;
                        }
                        for (int key = 0; key < pl.v * pl.m; key++)
                            CHECK(seen[0][key] == 1 && seen[1][key] == 1 && seen[2][key] == 1,
                                  "%s stage %d mb %d chunk %d: %d F, %d B, %d W",
                                  pipeline_name(&pl), s, key % pl.m, key / pl.m, seen[0][key],
                                  seen[1][key], seen[2][key]);
                        CHECK(order_ok, "%s stage %d: a B before its F or a W before its B",
                              pipeline_name(&pl), s);
                    }
                    ts_schedule_sim r;
                    if (zb_simulate(&pl, &r) == 0) ts_schedule_sim_free(&r);
                }
                pipeline_free(&pl);
            }
        }
}

/* Idle time units of a simulated pipeline (p x makespan - busy). */
static long idle_units(const ts_schedule_sim *r) {
    return (long)r->stages * r->makespan - r->busy;
}

/* Qi et al.: with F, B and W of equal cost ZB-H1's bubble is a third of
 * 1F1B's, (p - 1)(F + B - W) against (p - 1)(F + B + W) per rank, at 1F1B's
 * memory; checked at p = 4, m = 8 (the case: 12 idle units against
 * 36) and for every p and m >= p against the closed form (p-1)/(3m+p-1).
 * ZB-V idles less than ZB-H1 (as fractions of their makespans). */
static void test_zb_h1_bubble(void) {
    pipeline zb, one, v;
    ts_schedule_sim rz, r1, rv;
    if (pipeline_build(&zb, PP_SCHEDULE_ZB_H1, 4, 8, 1) == 0 &&
        pipeline_build(&one, PP_SCHEDULE_1F1B, 4, 8, 1) == 0 &&
        pipeline_build(&v, PP_SCHEDULE_ZB_V, 4, 8, 2) == 0 && zb_simulate(&zb, &rz) == 0 &&
        zb_simulate(&one, &r1) == 0 && zb_simulate(&v, &rv) == 0) {
        printf("  p=4 m=8, F = B = W = 1: 1F1B idles %ld units (bubble %ld/%ld), ZB-H1 %ld "
               "(%ld/%ld), ZB-V %ld half-stage units (%ld/%ld)\n",
               idle_units(&r1), r1.bubble_num, r1.bubble_den, idle_units(&rz), rz.bubble_num,
               rz.bubble_den, idle_units(&rv), rv.bubble_num, rv.bubble_den);
        CHECK(3 * idle_units(&rz) <= idle_units(&r1), "ZB-H1 idles %ld, 1F1B %ld", idle_units(&rz),
              idle_units(&r1));
        CHECK(rv.bubble_num * rz.bubble_den < rz.bubble_num * rv.bubble_den,
              "ZB-V's bubble %ld/%ld is not below ZB-H1's %ld/%ld", rv.bubble_num, rv.bubble_den,
              rz.bubble_num, rz.bubble_den);
        ts_schedule_sim_free(&rz), ts_schedule_sim_free(&r1), ts_schedule_sim_free(&rv);
    }
    pipeline_free(&zb), pipeline_free(&one), pipeline_free(&v);
    static const int ps[] = {1, 2, 3, 4, 8};
    for (int i = 0; i < 5; i++)
        for (int m = ps[i]; m <= 32; m++) {
            pipeline pl;
            long fnum, fden;
            if (pipeline_build(&pl, PP_SCHEDULE_ZB_H1, ps[i], m, 1) == 0 &&
                zb_simulate(&pl, &rz) == 0) {
                CHECK(pp_bubble_formula(PP_SCHEDULE_ZB_H1, pl.p, m, 1, &fnum, &fden) == TS_OK &&
                          fnum == rz.bubble_num && fden == rz.bubble_den,
                      "%s: simulated %ld/%ld, formula %ld/%ld", pipeline_name(&pl), rz.bubble_num,
                      rz.bubble_den, fnum, fden);
                ts_schedule_sim_free(&rz);
            }
            pipeline_free(&pl);
        }
}

/* Memory: ZB-H1's stage s holds 1F1B's p - s micro-batches in flight plus at
 * most s + 1 whose weight gradients wait (at most p in all), ZB-V at most 2p
 * (micro-batch, chunk) pairs: 1F1B's first stage's activations. */
static void test_zero_bubble_in_flight(void) {
    static const int ps[] = {1, 2, 3, 4, 8};
    for (int i = 0; i < 5; i++)
        for (int m = 1; m <= 32; m++) {
            pipeline pl;
            if (pipeline_build(&pl, PP_SCHEDULE_ZB_H1, ps[i], m, 1) == 0)
                for (int s = 0; s < pl.p; s++) {
                    int in = ts_schedule_peak_in_flight(&pl.s[s]);
                    int w = ts_schedule_peak_deferred(&pl.s[s]);
                    int lim = pl.p - s < m ? pl.p - s : m;
                    CHECK(in <= (pl.p < m ? pl.p : m) && w <= s + 1 && in - w <= lim,
                          "%s stage %d: %d in flight, %d deferred", pipeline_name(&pl), s, in, w);
                }
            pipeline_free(&pl);
            if (pipeline_build(&pl, PP_SCHEDULE_ZB_V, ps[i], m, 2) == 0)
                for (int s = 0; s < pl.p; s++)
                    CHECK(ts_schedule_peak_in_flight(&pl.s[s]) <= 2 * pl.p,
                          "%s stage %d: %d in flight", pipeline_name(&pl), s,
                          ts_schedule_peak_in_flight(&pl.s[s]));
            pipeline_free(&pl);
        }
}

/* The simulator refuses a B without its W, a W before its B, a W twice. */
static void test_simulator_catches_broken_split(void) {
    ts_action s0[] = {A(FORWARD, 0, -1),
                      A(SEND_ACT, 0, 1),
                      A(RECV_GRAD, 0, 1),
                      {TS_ACT_BACKWARD_INPUT, 0, 0, -1},
                      {TS_ACT_BACKWARD_WEIGHT, 0, 0, -1},
                      A(OPTIMIZER_STEP, -1, -1)};
    ts_action s1[] = {A(RECV_ACT, 0, 0), A(FORWARD, 0, -1), A(BACKWARD, 0, -1), A(SEND_GRAD, 0, 0),
                      A(OPTIMIZER_STEP, -1, -1)};
    ts_schedule s[2] = {{6, s0}, {5, s1}};
    ts_schedule_shape shape = {2, 1, 1, 1, 1, 1, TS_STAGES_INTERLEAVED};
    ts_schedule_sim r;
    ts_status st = ts_schedule_simulate_shape(&shape, s, &r);
    CHECK(st == TS_OK, "%s", ts_last_error());
    if (!st) ts_schedule_sim_free(&r);
    s[0].nactions = 6;
    s0[4] = A(OPTIMIZER_STEP, -1, -1); /* the W dropped */
    s[0].nactions = 5;
    st = ts_schedule_simulate_shape(&shape, s, &r);
    CHECK(st == TS_ERR_INVALID && strstr(ts_last_error(), "never computes the weight gradients"),
          "%s", ts_last_error());
    s0[3] = (ts_action){TS_ACT_BACKWARD_WEIGHT, 0, 0, -1}; /* W where B was */
    s0[4] = (ts_action){TS_ACT_BACKWARD_INPUT, 0, 0, -1};
    s0[5] = A(OPTIMIZER_STEP, -1, -1);
    s[0].nactions = 6;
    st = ts_schedule_simulate_shape(&shape, s, &r);
    CHECK(st == TS_ERR_INVALID &&
              strstr(ts_last_error(), "weight gradients before their BACKWARD_INPUT"),
          "%s", ts_last_error());
}

/* --- the printed timeline ---------------------------------------------------- */

static void expect_timeline(pp_schedule_kind kind, int p, int m, int v, const char *want) {
    pipeline pl;
    ts_schedule_sim r;
    char got[4096] = "";
    if (pipeline_build(&pl, kind, p, m, v) == 0 &&
        ts_schedule_simulate(p, pl.s, m, pl.v, 1, 1, &r) == TS_OK) {
        FILE *f = tmpfile();
        if (f) {
            ts_schedule_timeline_print(&r, f);
            rewind(f);
            size_t n = fread(got, 1, sizeof got - 1, f);
            got[n] = '\0';
            fclose(f);
        }
        ts_schedule_sim_free(&r);
    }
    CHECK(strcmp(got, want) == 0, "%s:\n--- got\n%s--- want\n%s", pipeline_name(&pl), got, want);
    pipeline_free(&pl);
}

static void test_timeline_print(void) {
    expect_timeline(PP_SCHEDULE_1F1B, 3, 4, 1,
                    "rank 0 | F0 F1 F2 .  .  B0 F3 B1 .  B2 .  B3\n"
                    "rank 1 | .  F0 F1 .  B0 F2 B1 F3 B2 .  B3 .\n"
                    "rank 2 | .  .  F0 B0 F1 B1 F2 B2 F3 B3 .  .\n"
                    "bubble 1/3 = 0.333 (makespan 12 units; F = 1, B = 1)\n");
    expect_timeline(PP_SCHEDULE_INTERLEAVED, 2, 2, 2,
                    "rank 0 | F0a F1a F0b F1b .   B0b .   B1b B0a B1a\n"
                    "rank 1 | .   F0a F1a F0b B0b F1b B1b B0a B1a .\n"
                    "bubble 1/5 = 0.200 (makespan 10 units; F = 1, B = 1)\n");
}

/* --- driver ------------------------------------------------------------------ */

static const struct {
    const char *name;
    void (*fn)(void);
} tests[] = {
    {"forward_precedes_backward", test_forward_precedes_backward},
    {"each_send_has_one_receive", test_sends_match_receives},
    {"compute_between_its_receive_and_send", test_compute_wrapped_in_transfers},
    {"no_deadlock", test_no_deadlock},
    {"bubble_gpipe_1f1b_is_p_minus_1_over_m_plus_p_minus_1", test_bubble_gpipe_1f1b},
    {"bubble_interleaved_smaller_by_factor_v", test_bubble_interleaved},
    {"in_flight_1f1b_at_most_p_gpipe_all_m", test_in_flight},
    {"interleaved_warmup_as_megatron", test_interleaved_warmup},
    {"invalid_arguments_give_config_errors", test_invalid_arguments},
    {"simulator_catches_broken_schedules", test_simulator_catches_broken_schedules},
    {"timeline_print_format", test_timeline_print},
    {"zero_bubble_valid", test_zero_bubble_valid},
    {"zb_h1_bubble_a_third_of_1f1b", test_zb_h1_bubble},
    {"zero_bubble_in_flight", test_zero_bubble_in_flight},
    {"simulator_catches_broken_split", test_simulator_catches_broken_split},
    {"zb_v_cache_matches_fresh", test_zb_v_cache_matches_fresh},
};

int main(int argc, char **argv) {
    int ran = 0, ntests = (int)(sizeof tests / sizeof tests[0]);
    for (int i = 0; i < ntests; i++) {
        if (argc > 1 && strcmp(argv[1], tests[i].name) != 0) continue;
        int before = failures;
        tests[i].fn();
        printf("%s: %s\n", tests[i].name, failures == before ? "ok" : "FAILED");
        ran++;
    }
    if (!ran) {
        fprintf(stderr, "test_schedules: no test named '%s'\n", argv[1]);
        return 2;
    }
    return failures ? 1 : 0;
}
