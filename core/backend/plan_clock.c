/*
 * plan_clock.c — the dry run's clock (plan_clock.h), kept in the dry run
 * (dry_run_impl.h).
 */
#include "plan_clock.h"

#include <string.h>

#include "dry_run_impl.h"

void ts_plan_clock_enable(ts_dry_run *dr, const ts_plan_rates *rates) {
    dr->clock_on = rates != NULL;
    if (rates) dr->rates = *rates;
    ts_plan_clock_reset(dr);
}

int ts_plan_clock_on(const ts_dry_run *dr) {
    return dr->clock_on;
}

void ts_plan_clock_reset(ts_dry_run *dr) {
    memset(&dr->time, 0, sizeof dr->time);
    dr->epoch++;
}

/* The compute stream advances by `dt`, charged to the action running. */
static void clock_advance(ts_dry_run *dr, double dt) {
    int a = dr->action;
    dr->time.total += dt;
    if (a >= 0 && a < TS_PLAN_ACTIONS)
        dr->time.action_s[a] += dt;
    else
        dr->time.outside += dt;
}

void ts_plan_clock_kernel(ts_dry_run *dr, int kind, double flops, double bytes) {
    if (!dr->clock_on) return;
    const ts_plan_rates *r = &dr->rates;
    double rate = kind == TS_PLAN_BF16              ? r->matmul_bf16
                  : kind == TS_PLAN_ATTENTION       ? r->attention
                  : kind == TS_PLAN_ATTENTION_BLOCK ? r->attention_block
                                                    : r->matmul_f32;
    double t_math = flops > 0 && rate > 0 ? flops / rate : 0.0;
    double t_mem = bytes > 0 && r->memory > 0 ? bytes / r->memory : 0.0;
    double dt = (t_math > t_mem ? t_math : t_mem) + r->kernel_s;
    dr->time.compute_s += dt;
    if (dr->action < 0) dr->time.outside_compute_s += dt;
    clock_advance(dr, dt);
}

double ts_plan_link_seconds(const ts_plan_link *link, ts_comm_op op, int size, double bytes) {
    if (!link || size <= 1 || (unsigned)op >= TS_COMM_NOPS) return 0.0;
    double n = size, factor;
    switch (op) {
    case TS_COMM_ALL_REDUCE: factor = 2.0 * (n - 1.0) / n; break;
    case TS_COMM_ALL_GATHER:
    case TS_COMM_REDUCE_SCATTER:
    case TS_COMM_ALL_TO_ALL: factor = (n - 1.0) / n; break;
    case TS_COMM_BARRIER: factor = 0.0; break;
    default: factor = 1.0; /* broadcast, send, recv */
    }
    double bw = link->bandwidth[op];
    return link->latency_s[op] + (bw > 0 ? factor * bytes / bw : 0.0);
}

double ts_plan_clock_start(ts_dry_run *dr, ts_plan_busy *busy, double seconds) {
    if (busy->epoch != dr->epoch) *busy = (ts_plan_busy){0.0, dr->epoch};
    double start = dr->time.total > busy->until ? dr->time.total : busy->until;
    busy->until = start + seconds;
    /* nothing progresses beside the kernels: the stream carries it now */
    if (dr->rates.serial_comm) ts_plan_clock_wait(dr, busy->until);
    return busy->until;
}

void ts_plan_clock_wait(ts_dry_run *dr, double end) {
    if (!dr->clock_on || end <= dr->time.total) return;
    double dt = end - dr->time.total;
    dr->time.exposed_s += dt;
    clock_advance(dr, dt);
}

void ts_plan_clock_read(const ts_dry_run *dr, ts_plan_time *out) {
    *out = dr->time;
}
