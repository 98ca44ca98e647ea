/*
 * wrong_major.c — tessera-wrong_major.so: built for plugin ABI 2.0, which a
 * 1.x core must refuse before reading anything past the first two fields.
 */
#include "tessera/plugin.h"

static ts_status wrong_major_init(const ts_host *host, ts_plugin_ctx *ctx) {
    (void)host;
    (void)ctx;
    return TS_OK;
}

static const ts_plugin_descriptor wrong_major_descriptor = {
    TS_PLUGIN_ABI_MAKE(TS_PLUGIN_ABI_MAJOR + 1, 0),
    sizeof(ts_plugin_descriptor),
    "wrong_major",
    "1.0",
    "ABI major too new",
    NULL,
    0,
    wrong_major_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &wrong_major_descriptor;
}
