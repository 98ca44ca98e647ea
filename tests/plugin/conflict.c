/*
 * conflict.c — tessera-conflict.so: registers a transform in the phase
 * PIPELINE, which tessera-good.so holds (one plugin assigns stages), and one
 * in SHARD_TENSOR that places every parameter S(1) over dp. With good, the
 * load fails; with shardall (which places them S(0) over dp later), the
 * transforms conflict on a placement.
 */
#include <string.h>

#include "tessera/plugin.h"

static ts_status conflict_stages(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)plan;
    (void)user;
    return TS_OK;
}

/* Every parameter of two dimensions or more S(1) over dp. */
static ts_status conflict_params(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        if (e->kind != TS_PLAN_PARAM || e->layout.ndim < 2) continue;
        for (int a = 0; a < e->layout.naxes; a++)
            if (strcmp(e->layout.axes[a].name, "dp") == 0)
                e->layout.axes[a].placement = ts_placement_shard(1);
    }
    return TS_OK;
}

static ts_status conflict_init(const ts_host *host, ts_plugin_ctx *ctx) {
    int both = 0;
    TS_TRY(host->config_bool(ctx, "stages", &both));
    if (both)
        TS_TRY(host->register_transform(ctx, "conflict_stages", TS_PHASE_PIPELINE, conflict_stages,
                                        NULL));
    return host->register_transform(ctx, "conflict_params", TS_PHASE_SHARD_TENSOR, conflict_params,
                                    NULL);
}

static const ts_plugin_key conflict_keys[] = {
    {"stages", TS_PLUGIN_KEY_BOOL, "true", 1, 0, NULL, "also assign pipeline stages"},
};

static const ts_plugin_descriptor conflict_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "conflict",
    "1.0",
    "shards tensors too",
    conflict_keys,
    1,
    conflict_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &conflict_descriptor;
}
