/*
 * small_struct.c — tessera-small_struct.so: a descriptor whose struct_size is
 * smaller than ABI 1.0's, as a hand-made or corrupt one would be.
 */
#include "tessera/plugin.h"

static const ts_plugin_descriptor small_struct_descriptor = {
    TS_PLUGIN_ABI_VERSION, 8, "small_struct", "1.0", NULL, NULL, 0, NULL, NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &small_struct_descriptor;
}
