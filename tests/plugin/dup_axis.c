/*
 * dup_axis.c — tessera-dup_axis.so: claims the tp axis, which tessera-good.so
 * claims too; loading both must fail naming both plugins.
 */
#include "tessera/plugin.h"

static ts_status dup_axis_init(const ts_host *host, ts_plugin_ctx *ctx) {
    return host->register_axis(ctx, "tp", 2, TS_MESH_DENSE);
}

static const ts_plugin_descriptor dup_axis_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "dup_axis",
    "1.0",
    "claims tp a second time",
    NULL,
    0,
    dup_axis_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &dup_axis_descriptor;
}
