/*
 * axisspec.c — tessera-axisspec.so: claims an axis of its own with
 * register_axis_spec (ABI 1.2) as [axisspec] how says: "good" (axis "own",
 * 2 ranks, before dp, cutting the batch, used by placing data.tokens S(0)
 * over it), "before_nothing" (placed before an axis that does not exist),
 * "bad_name" (a name with a capital), "small" (a struct_size of 4).
 */
#include <string.h>

#include "tessera/plugin.h"

static const ts_plugin_key axisspec_keys[] = {
    {"how", TS_PLUGIN_KEY_ENUM, "good", 1, 0, "good|before_nothing|bad_name|small",
     "which claim to make"},
};

/* The batch, its targets and the hidden state cut by sequences over "own". */
static ts_status axisspec_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        if (e->kind == TS_PLAN_PARAM) continue;
        for (int a = 0; a < e->layout.naxes; a++)
            if (strcmp(e->layout.axes[a].name, "own") == 0)
                e->layout.axes[a].placement = ts_placement_shard(0);
    }
    return TS_OK;
}

static ts_status axisspec_init(const ts_host *host, ts_plugin_ctx *ctx) {
    const char *how;
    TS_TRY(host->config->get_str(ctx, "how", &how));
    ts_plugin_axis_spec s = {.struct_size = sizeof s,
                             .name = "own",
                             .size = 2,
                             .mesh = TS_MESH_DENSE,
                             .before = "dp",
                             .cuts_batch = 1};
    if (strcmp(how, "before_nothing") == 0) s.before = "nothing";
    if (strcmp(how, "bad_name") == 0) s.name = "Own";
    if (strcmp(how, "small") == 0) s.struct_size = 4;
    TS_TRY(host->reg->axis_spec(ctx, &s));
    TS_TRY(host->reg->transform(ctx, "own_batch", TS_PHASE_SHARD_DATA, axisspec_transform, NULL));
    return host->reg->provider(ctx, TS_PROVIDE_GRAD_REDUCTION, "own");
}

static const ts_plugin_descriptor axisspec_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "axisspec",
    "1.0",
    "claims an axis of its own",
    axisspec_keys,
    1,
    axisspec_init,
    NULL,
    0, /* flags: its state is the process's, one trainer at a time */
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &axisspec_descriptor;
}
