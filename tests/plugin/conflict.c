/*
 * conflict.c — tessera-conflict.so: registers a transform in the owned phase
 * SHARD_TENSOR, which tessera-good.so holds: the transforms conflict.
 */
#include "tessera/plugin.h"

static ts_status conflict_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)plan;
    (void)user;
    return TS_OK;
}

static ts_status conflict_init(const ts_host *host, ts_plugin_ctx *ctx) {
    return host->register_transform(ctx, "conflict_tensor", TS_PHASE_SHARD_TENSOR,
                                    conflict_transform, NULL);
}

static const ts_plugin_descriptor conflict_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "conflict",
    "1.0",
    "shards tensors too",
    NULL,
    0,
    conflict_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &conflict_descriptor;
}
