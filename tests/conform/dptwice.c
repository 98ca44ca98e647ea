/*
 * dptwice.c — tessera-dptwice.so: a broken data-parallel strategy for
 * `tessera conform`'s tests. It claims the dp axis (auto), cuts the batch
 * over it and provides the gradient reduction, like plugins/dp, but sums
 * every gradient over dp twice: the second all-reduce of a gradient already
 * summed multiplies it by the dp size, as a reducer that both a hook and a
 * bucket reduce would. The plan's dry run runs the same code, so its
 * memory and communication match the plan; only the numerics (and what
 * follows from them) fail.
 */
#include <string.h>

#include "tessera/plugin.h"

static const ts_plugin_key dptwice_keys[] = {
    {"size", TS_PLUGIN_KEY_INT, "auto", 1, 1 << 20, "auto",
     "data-parallel ranks; auto = the world divided by the other axes"},
};

static const ts_host *dt_host;
static ts_plugin_ctx *dt_ctx;

static ts_status dt_grad_ready(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev, void *user) {
    (void)user;
    ts_comm *comm = dt_host->comms->get(ctx, "dp");
    if (!comm) return dt_host->error(ctx, TS_ERR_INVALID, "no dp communicator");
    size_t n = 1;
    for (int d = 0; d < ev->grad->ndim; d++)
        n *= (size_t)ev->grad->shape[d];
    void *g = ev->grad->data;
    TS_TRY(dt_host->comms->all_reduce(comm, g, g, n, TS_F32, TS_REDUCE_SUM));
    return dt_host->comms->all_reduce(comm, g, g, n, TS_F32, TS_REDUCE_SUM); /* the bug */
}

/* The batch and activations cut along their first dimension over dp. */
static ts_status dt_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        if (e->kind == TS_PLAN_PARAM) continue;
        for (int a = 0; a < e->layout.naxes; a++)
            if (strcmp(e->layout.axes[a].name, "dp") == 0)
                e->layout.axes[a].placement = ts_placement_shard(0);
    }
    return TS_OK;
}

static ts_status dt_init(const ts_host *host, ts_plugin_ctx *ctx) {
    dt_host = host;
    dt_ctx = ctx;
    int64_t size = 0;
    TS_TRY(host->config->get_int(ctx, "size", &size));
    TS_TRY(host->reg->axis(ctx, "dp", size < 0 ? TS_PLUGIN_AXIS_AUTO : (int)size, TS_MESH_DENSE));
    TS_TRY(host->reg->transform(ctx, "dp_batch", TS_PHASE_SHARD_DATA, dt_transform, NULL));
    TS_TRY(host->reg->provider(ctx, TS_PROVIDE_GRAD_REDUCTION, "dp"));
    return host->reg->hook(ctx, TS_HOOK_GRAD_READY, dt_grad_ready, NULL);
}

static const ts_plugin_descriptor dptwice_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "dptwice",
    "1.0.0",
    "test plugin: data parallel that sums every gradient over dp twice (broken)",
    dptwice_keys,
    1,
    dt_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &dptwice_descriptor;
}
