/*
 * optshard.c — tessera-optshard.so: a test plugin (ABI 1.1) that keeps the
 * optimizer state cut over an axis ([optshard] axis, default dp), as ZeRO
 * stage 1 does: rank r of the axis group keeps master weights and moments
 * for elements [r * n / R, (r + 1) * n / R) of the flat buffers, and after
 * each update all-gathers every rank's updated range into the whole
 * parameter buffer. It claims no axis and moves no placement: with dp it
 * must train exactly like dp alone, with 1/R of the optimizer memory.
 *
 * [optshard] skew = 1 makes every rank but the first start one element
 * late (a gap between ranges): the core must refuse it at start-up.
 */
#include <stdint.h>

#include "tessera/plugin.h"

static const ts_plugin_key optshard_keys[] = {
    {"axis", TS_PLUGIN_KEY_STRING, "dp", 0, 0, NULL, "the axis to cut the optimizer state over"},
    {"skew", TS_PLUGIN_KEY_BOOL, "false", 0, 0, NULL, "leave a gap between ranges (tests)"},
};

static struct {
    const ts_host *host;
    ts_plugin_ctx *ctx;
    const char *axis;
    int skew;
} os;

/* Rank r's range of n elements over R ranks. */
static size_t optshard_begin(size_t n, int r, int R) {
    return (size_t)((unsigned __int128)n * (unsigned)r / (unsigned)R);
}

static ts_status optshard_partition(ts_plugin_ctx *ctx, size_t numel, size_t *begin, size_t *end,
                                    void *user) {
    (void)user;
    ts_comm *comm = os.host->comms->get(ctx, os.axis);
    if (!comm) return os.host->error(ctx, TS_ERR_INVALID, "no %s communicator", os.axis);
    int r = os.host->comms->rank(comm), R = os.host->comms->size(comm);
    *begin = optshard_begin(numel, r, R) + (os.skew && r > 0);
    *end = optshard_begin(numel, r + 1, R);
    return TS_OK;
}

static ts_status optshard_after_step(ts_plugin_ctx *ctx, void *params, ts_dtype dtype, size_t numel,
                                     void *user) {
    (void)user;
    ts_comm *comm = os.host->comms->get(ctx, os.axis);
    if (!comm) return os.host->error(ctx, TS_ERR_INVALID, "no %s communicator", os.axis);
    int r = os.host->comms->rank(comm), R = os.host->comms->size(comm);
    size_t counts[R], es = dtype == TS_BF16 ? 2 : 4;
    for (int k = 0; k < R; k++)
        counts[k] = optshard_begin(numel, k + 1, R) - optshard_begin(numel, k, R);
    char *base = params;
    return os.host->comms->all_gatherv(comm, base + optshard_begin(numel, r, R) * es, base, counts,
                                       dtype);
}

static ts_status optshard_init(const ts_host *host, ts_plugin_ctx *ctx) {
    os.host = host;
    os.ctx = ctx;
    if (!TS_REGISTRATION_HAS(host->reg, optimizer_state))
        return host->error(ctx, TS_ERR_PLUGIN, "needs a core of plugin ABI 1.1 or later");
    TS_TRY(host->config->get_str(ctx, "axis", &os.axis));
    TS_TRY(host->config->get_bool(ctx, "skew", &os.skew));
    static const ts_plugin_optimizer_state_ops ops = {
        sizeof ops,
        optshard_partition,
        optshard_after_step,
        0,
    };
    return host->reg->optimizer_state(ctx, os.axis, &ops, NULL);
}

static const ts_plugin_descriptor optshard_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "optshard",
    "1.0.0",
    "test plugin: optimizer state cut over an axis (ZeRO stage 1)",
    optshard_keys,
    2,
    optshard_init,
    NULL,
    0, /* flags: its state is the process's, one trainer at a time */
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &optshard_descriptor;
}
