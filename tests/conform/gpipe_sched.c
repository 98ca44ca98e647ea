/*
 * gpipe_sched.c — tessera-gpipe_sched.so: a scheduler alone, for `tessera
 * conform`'s scheduler kind: GPipe (all forwards, then all backwards in
 * reverse order, then the optimizer step) registered as "gpipe_sched",
 * one model chunk per rank. Loaded before pp, it is the run's schedule
 * (the core takes the first registered); pp cuts the layers.
 */
#include "tessera/plugin.h"

static const ts_host *gp_host;

static ts_status gp_schedule(ts_plugin_ctx *ctx, const ts_plugin_schedule_args *a, ts_schedule *out,
                             void *user) {
    (void)user;
    if (a->chunks != 1)
        return gp_host->error(ctx, TS_ERR_INVALID, "one chunk per rank only (got %d)", a->chunks);
    int s = a->stage, last = a->stages - 1;
    for (int mb = 0; mb < a->micro_batches; mb++) {
        if (s > 0) TS_TRY(gp_host->schedule_append(ctx, out, TS_PLUGIN_ACT_RECV_ACT, mb, 0, s - 1));
        TS_TRY(gp_host->schedule_append(ctx, out, TS_PLUGIN_ACT_FORWARD, mb, 0, -1));
        if (s < last)
            TS_TRY(gp_host->schedule_append(ctx, out, TS_PLUGIN_ACT_SEND_ACT, mb, 0, s + 1));
    }
    for (int mb = a->micro_batches - 1; mb >= 0; mb--) {
        if (s < last)
            TS_TRY(gp_host->schedule_append(ctx, out, TS_PLUGIN_ACT_RECV_GRAD, mb, 0, s + 1));
        TS_TRY(gp_host->schedule_append(ctx, out, TS_PLUGIN_ACT_BACKWARD, mb, 0, -1));
        if (s > 0)
            TS_TRY(gp_host->schedule_append(ctx, out, TS_PLUGIN_ACT_SEND_GRAD, mb, 0, s - 1));
    }
    return gp_host->schedule_append(ctx, out, TS_PLUGIN_ACT_OPTIMIZER_STEP, -1, 0, -1);
}

static ts_status gp_init(const ts_host *host, ts_plugin_ctx *ctx) {
    gp_host = host;
    return host->reg->scheduler(ctx, "gpipe_sched", gp_schedule, NULL);
}

static const ts_plugin_descriptor gp_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "gpipe_sched",
    "1.0.0",
    "test plugin: a GPipe scheduler alone",
    NULL,
    0,
    gp_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &gp_descriptor;
}
