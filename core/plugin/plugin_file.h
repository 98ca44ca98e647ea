/*
 * plugin_file.h — the plugin loader's check of the descriptor a plugin file
 * returns, for tests and the fuzzer. The checks of the file itself before
 * dlopen (regular file, ELF header, program headers inside the file) are
 * the ones every shared object the core opens passes: core/base/so_file.h.
 */
#ifndef TESSERA_CORE_PLUGIN_FILE_H
#define TESSERA_CORE_PLUGIN_FILE_H

#include "tessera/plugin.h"
#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The loader's check of a descriptor returned by a plugin's entry point
 * (defined in loader.c, the same function plg_open_file runs after dlsym):
 * ABI major and minor, struct_size, name equal to `name` (the file's
 * tessera-<name>.so), version and init present, and every key declaration
 * (name, type, help, enum choices, a default of its type, no duplicates).
 * `d` and everything it points to must be readable; `path` names the file in
 * messages. Returns TS_OK or TS_ERR_PLUGIN. For tests and the fuzzer. */
ts_status ts_plugin_descriptor_check(const char *name, const char *path,
                                     const ts_plugin_descriptor *d);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_PLUGIN_FILE_H */
