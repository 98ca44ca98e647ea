/*
 * wrong_name.c — built as tessera-misnamed.so, but its descriptor says
 * "renamed": the loader must refuse a file whose name and descriptor differ.
 */
#include "tessera/plugin.h"

static ts_status renamed_init(const ts_host *host, ts_plugin_ctx *ctx) {
    (void)host;
    (void)ctx;
    return TS_OK;
}

static const ts_plugin_descriptor renamed_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "renamed",
    "1.0",
    "file name and descriptor name differ",
    NULL,
    0,
    renamed_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &renamed_descriptor;
}
