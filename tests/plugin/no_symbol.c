/*
 * no_symbol.c — tessera-no_symbol.so: exports a misspelt entry point, so the
 * loader finds the file but not the symbol tessera_plugin_descriptor.
 */
#include "tessera/plugin.h"

TS_PLUGIN_EXPORT int tessera_plugin_descriptr(void);
TS_PLUGIN_EXPORT int tessera_plugin_descriptr(void) {
    return 0;
}
