/*
 * meshaxes.c — a test plugin that claims mesh axes with the sizes its INI
 * keys give ([meshaxes] tp, cp, pp, ep, etp), so that `tessera plan` can be
 * checked on any mesh before the strategies that own those axes exist. An
 * axis is claimed only when its key is given.
 */
#include "tessera/plugin.h"

static const ts_plugin_key meshaxes_keys[] = {
    {"tp", TS_PLUGIN_KEY_INT, "1", 1, 1 << 20, NULL, "tensor-parallel size"},
    {"cp", TS_PLUGIN_KEY_INT, "1", 1, 1 << 20, NULL, "context-parallel size"},
    {"pp", TS_PLUGIN_KEY_INT, "1", 1, 1 << 20, NULL, "pipeline-parallel size"},
    {"ep", TS_PLUGIN_KEY_INT, "1", 1, 1 << 20, NULL, "expert-parallel size"},
    {"etp", TS_PLUGIN_KEY_INT, "1", 1, 1 << 20, NULL, "expert tensor-parallel size"},
};

static ts_status meshaxes_init(const ts_host *host, ts_plugin_ctx *ctx) {
    static const struct {
        const char *name;
        ts_mesh_kind mesh;
    } axes[] = {{"tp", TS_MESH_DENSE},
                {"cp", TS_MESH_DENSE},
                {"pp", TS_MESH_DENSE},
                {"ep", TS_MESH_EXPERT},
                {"etp", TS_MESH_EXPERT}};
    for (int i = 0; i < 5; i++) {
        int given = 0;
        int64_t size = 1;
        TS_TRY(host->config_has(ctx, axes[i].name, &given));
        if (!given) continue;
        TS_TRY(host->config_int(ctx, axes[i].name, &size));
        TS_TRY(host->register_axis(ctx, axes[i].name, (int)size, axes[i].mesh));
    }
    return TS_OK;
}

static const ts_plugin_descriptor meshaxes_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "meshaxes",
    "1.0.0",
    "test plugin: claims the mesh axes its keys size",
    meshaxes_keys,
    5,
    meshaxes_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &meshaxes_descriptor;
}
