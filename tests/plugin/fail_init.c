/*
 * fail_init.c — tessera-fail_init.so: init fails with a message when [fail_init]
 * refuse is true; otherwise it registers a bad axis and ignores the failure,
 * which the core must still report.
 */
#include "tessera/plugin.h"

static const ts_plugin_key fail_init_keys[] = {
    {"refuse", TS_PLUGIN_KEY_BOOL, "true", 1, 0, NULL, "fail init with a message"},
};

static ts_status fail_init_init(const ts_host *host, ts_plugin_ctx *ctx) {
    int refuse;
    TS_TRY(host->config_bool(ctx, "refuse", &refuse));
    if (refuse) {
        char where[128];
        return host->error(ctx, TS_ERR_CONFIG, "refusing to start (%s)",
                           host->config_where(ctx, "refuse", where, sizeof where));
    }
    (void)host->register_axis(ctx, "zz", 2, TS_MESH_DENSE); /* failure ignored on purpose */
    return TS_OK;
}

static const ts_plugin_descriptor fail_init_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "fail_init",
    "1.0",
    "fails its init",
    fail_init_keys,
    1,
    fail_init_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &fail_init_descriptor;
}
