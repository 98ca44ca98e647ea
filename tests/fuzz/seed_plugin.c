/*
 * seed_plugin.c — the smallest well-formed tessera plugin, built by
 * tests/fuzz/CMakeLists.txt without the C library or sanitizers (~2 KiB) as a
 * seed input of fuzz_plugin: a real shared object of this toolchain for the
 * ELF checks to start from. It registers nothing.
 */
#include "tessera/plugin.h"

static ts_status seed_init(const ts_host *host, ts_plugin_ctx *ctx) {
    (void)host;
    (void)ctx;
    return TS_OK;
}

static const ts_plugin_descriptor seed_descriptor = {
    .abi_version = TS_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ts_plugin_descriptor),
    .name = "seed",
    .version = "1.0",
    .description = "the fuzzer's seed plugin",
    .init = seed_init,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &seed_descriptor;
}
