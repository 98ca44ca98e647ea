/*
 * ep_dispatchers.c — tessera-ep_dispatchers.so: the ep plugin's built-in
 * dispatchers "all_to_all" and "all_gather" (plugins/ep/dispatch_*.c, compiled
 * in), registered alone so that test_dispatch and test_dispatch_parity can
 * check them without the rest of the ep plugin (axes, transforms, keys).
 */
#include "dispatch.h" /* ep_register_dispatchers */
#include "tessera/plugin.h"

static const ts_plugin_descriptor ep_dispatchers_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "ep_dispatchers",
    "0.1.0",
    "test: the ep plugin's dispatchers all_to_all and all_gather, nothing else",
    NULL,
    0,
    ep_register_dispatchers,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &ep_dispatchers_descriptor;
}
