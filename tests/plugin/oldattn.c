/*
 * oldattn.c — a test plugin: an attention provider built before
 * ts_plugin_attention_ops.release existed (its ops table ends at `order`).
 * It claims the axis "cp" ([oldattn] size), cuts every sequence over it as
 * the cp plugin does, and registers attention whose forward and backward
 * only fail: it is for the start-up checks, which must refuse activation
 * recomputation with it (its state cannot be dropped) and name it.
 */
#include <stddef.h>
#include <string.h>

#include "tessera/layout.h"
#include "tessera/plugin.h"

static const ts_plugin_key oldattn_keys[] = {
    {"size", TS_PLUGIN_KEY_INT, "2", 1, 1 << 20, NULL, "ranks cutting every sequence"},
};

static const ts_host *oldattn_host;

static ts_status oldattn_run(ts_plugin_ctx *ctx, ts_plugin_attention_args *args, void *user) {
    (void)args, (void)user;
    return oldattn_host->error(ctx, TS_ERR_INTERNAL, "oldattn computes no attention");
}

/* Every activation and the batch cut along the sequence over cp. */
static ts_status oldattn_cut(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx, (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        if (e->kind == TS_PLAN_PARAM || e->layout.ndim < 2) continue;
        for (int a = 0; a < e->layout.naxes; a++)
            if (strcmp(e->layout.axes[a].name, "cp") == 0)
                e->layout.axes[a].placement = ts_placement_shard(1);
    }
    return TS_OK;
}

static ts_status oldattn_init(const ts_host *host, ts_plugin_ctx *ctx) {
    oldattn_host = host;
    int64_t size = 2;
    TS_TRY(host->config_int(ctx, "size", &size));
    TS_TRY(host->register_axis(ctx, "cp", (int)size, TS_MESH_DENSE));
    TS_TRY(
        host->register_transform(ctx, "sequence_cut", TS_PHASE_SHARD_SEQUENCE, oldattn_cut, NULL));
    static ts_plugin_attention_ops ops;
    ops = (ts_plugin_attention_ops){.forward = oldattn_run, .backward = oldattn_run};
    ops.struct_size = (uint32_t)offsetof(ts_plugin_attention_ops, release);
    return host->register_attention(ctx, "cp", &ops, NULL);
}

static const ts_plugin_descriptor oldattn_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "oldattn",
    "1.0.0",
    "test plugin: an attention provider without release",
    oldattn_keys,
    1,
    oldattn_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &oldattn_descriptor;
}
