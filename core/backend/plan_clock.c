/*
 * plan_clock.c — the dry run's clock (plan_clock.h).
 */
#include "plan_clock.h"

#include <string.h>

#include "phase.h" /* ts_phase_action: whose time it is */

static int clock_on;
static ts_plan_rates clock_rates;
static ts_plan_time clock_time;
static unsigned clock_epoch = 1; /* a link busy in an earlier epoch is free */

void ts_plan_clock_enable(const ts_plan_rates *rates) {
    clock_on = rates != NULL;
    if (rates) clock_rates = *rates;
    ts_plan_clock_reset();
}

int ts_plan_clock_on(void) {
    return clock_on;
}

void ts_plan_clock_reset(void) {
    memset(&clock_time, 0, sizeof clock_time);
    clock_epoch++;
}

/* The compute stream advances by `dt`, charged to the action running. */
static void clock_advance(double dt) {
    int a = ts_phase_action();
    clock_time.total += dt;
    if (a >= 0 && a < TS_PLAN_ACTIONS)
        clock_time.action_s[a] += dt;
    else
        clock_time.outside += dt;
}

void ts_plan_clock_kernel(int kind, double flops, double bytes) {
    if (!clock_on) return;
    double rate = kind == TS_PLAN_BF16              ? clock_rates.matmul_bf16
                  : kind == TS_PLAN_ATTENTION       ? clock_rates.attention
                  : kind == TS_PLAN_ATTENTION_BLOCK ? clock_rates.attention_block
                                                    : clock_rates.matmul_f32;
    double t_math = flops > 0 && rate > 0 ? flops / rate : 0.0;
    double t_mem = bytes > 0 && clock_rates.memory > 0 ? bytes / clock_rates.memory : 0.0;
    double dt = (t_math > t_mem ? t_math : t_mem) + clock_rates.kernel_s;
    clock_time.compute_s += dt;
    if (ts_phase_action() < 0) clock_time.outside_compute_s += dt;
    clock_advance(dt);
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

double ts_plan_clock_start(ts_plan_busy *busy, double seconds) {
    if (busy->epoch != clock_epoch) *busy = (ts_plan_busy){0.0, clock_epoch};
    if (clock_rates.serial_comm) {
        /* nothing progresses beside the kernels: the stream carries it now */
        double start = clock_time.total > busy->until ? clock_time.total : busy->until;
        busy->until = start + seconds;
        ts_plan_clock_wait(busy->until);
        return busy->until;
    }
    double start = clock_time.total > busy->until ? clock_time.total : busy->until;
    busy->until = start + seconds;
    return busy->until;
}

void ts_plan_clock_wait(double end) {
    if (!clock_on || end <= clock_time.total) return;
    double dt = end - clock_time.total;
    clock_time.exposed_s += dt;
    clock_advance(dt);
}

void ts_plan_clock_read(ts_plan_time *out) {
    *out = clock_time;
}
