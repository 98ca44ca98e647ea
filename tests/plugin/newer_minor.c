/*
 * newer_minor.c — tessera-newer_minor.so: built for a minor ABI version one
 * above the core's (it could call host functions this core lacks).
 */
#include "tessera/plugin.h"

static ts_status newer_minor_init(const ts_host *host, ts_plugin_ctx *ctx) {
    (void)host;
    (void)ctx;
    return TS_OK;
}

static const ts_plugin_descriptor newer_minor_descriptor = {
    TS_PLUGIN_ABI_MAKE(TS_PLUGIN_ABI_MAJOR, TS_PLUGIN_ABI_MINOR + 1),
    sizeof(ts_plugin_descriptor),
    "newer_minor",
    "1.0",
    "ABI minor too new",
    NULL,
    0,
    newer_minor_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &newer_minor_descriptor;
}
