/*
 * skew.c — tessera-skew.so: on world rank [skew] rank it multiplies the
 * gradient of wte by 1 + [skew] factor when it is ready, every step, before
 * any reduction: one rank computes a wrong gradient, as a bug in a strategy
 * would make it. Used to test that `tessera verify`'s numerics ledger fails
 * on it and says where. CPU tensors only.
 */
#include <string.h>

#include "tessera/plugin.h"

static const ts_plugin_key skew_keys[] = {
    {"rank", TS_PLUGIN_KEY_INT, "1", 0, 1e6, NULL, "the world rank whose gradient is skewed"},
    {"factor", TS_PLUGIN_KEY_FLOAT, "0.01", -1, 1e6, NULL,
     "the gradient of wte is multiplied by 1 + factor"},
};

static const ts_host *skew_host;
static int64_t skew_rank;
static double skew_factor;

static ts_status skew_grad_ready(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev, void *user) {
    (void)user;
    /* CPU tensors only (a dry run's are never dereferenced). */
    if (!ev->param || strcmp(ev->param->name, "wte") != 0 || ev->grad->device != TS_DEVICE_CPU)
        return TS_OK;
    if (skew_host->comm_rank(skew_host->comm(ctx, "world")) != skew_rank) return TS_OK;
    float *g = ev->grad->data;
    int64_t n = 1;
    for (int d = 0; d < ev->grad->ndim; d++)
        n *= ev->grad->shape[d];
    for (int64_t i = 0; i < n; i++)
        g[i] *= (float)(1.0 + skew_factor);
    return TS_OK;
}

static ts_status skew_init(const ts_host *host, ts_plugin_ctx *ctx) {
    skew_host = host;
    TS_TRY(host->config_int(ctx, "rank", &skew_rank));
    TS_TRY(host->config_float(ctx, "factor", &skew_factor));
    return host->register_hook(ctx, TS_HOOK_GRAD_READY, skew_grad_ready, NULL);
}

static const ts_plugin_descriptor skew_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "skew",
    "1.0",
    "multiplies one rank's wte gradient by 1 + factor",
    skew_keys,
    2,
    skew_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &skew_descriptor;
}
