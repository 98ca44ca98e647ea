/*
 * flags12.c — tessera-flags12.so, a test plugin whose descriptor holds
 * TS_PLUGIN_THREAD_LOCAL_STATE in the place of ABI 1.3's flags (it is built
 * with TS_PLUGIN_TARGET_MINOR=3) but declares ABI 1.2: the loader must read
 * no flags from a descriptor older than 1.3, whatever its size, so it
 * counts as a plugin without the flag. Registers nothing.
 */
#include "tessera/plugin.h"

static ts_status flags12_init(const ts_host *host, ts_plugin_ctx *ctx) {
    (void)host;
    (void)ctx;
    return TS_OK;
}

static const ts_plugin_descriptor flags12_descriptor = {
    .abi_version = TS_PLUGIN_ABI_MAKE(1, 2),
    .struct_size = sizeof(ts_plugin_descriptor),
    .name = "flags12",
    .version = "0.1.0",
    .description = "test: a 1.2 descriptor with bits where 1.3's flags are",
    .init = flags12_init,
    .flags = TS_PLUGIN_THREAD_LOCAL_STATE,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &flags12_descriptor;
}
