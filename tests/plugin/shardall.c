/*
 * shardall.c — tessera-shardall.so: a test plugin whose transform places
 * every parameter S(0) over dp and that implements nothing of it. The binder
 * must refuse it at start-up, naming the tensor, the axis, the placement and
 * this transform (a placement nothing implements would otherwise train with
 * replicated memory and a gradient norm summed twice).
 */
#include <string.h>

#include "tessera/plugin.h"

static ts_status shardall_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        if (e->kind != TS_PLAN_PARAM) continue;
        for (int a = 0; a < e->layout.naxes; a++)
            if (strcmp(e->layout.axes[a].name, "dp") == 0)
                e->layout.axes[a].placement = ts_placement_shard(0);
    }
    return TS_OK;
}

static ts_status shardall_init(const ts_host *host, ts_plugin_ctx *ctx) {
    return host->register_transform(ctx, "shard_everything", TS_PHASE_SHARD_OPTIMIZER,
                                    shardall_transform, NULL);
}

static const ts_plugin_descriptor shardall_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "shardall",
    "1.0.0",
    "test plugin: every parameter S(0) over dp, nothing implemented",
    NULL,
    0,
    shardall_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &shardall_descriptor;
}
