/*
 * so_file.h — the checks a shared object passes before the core hands it to
 * dlopen (a plugin, tessera-<name>.so, by core/plugin/loader.c; the CUDA
 * backend, tessera-backend-cuda.so, by core/backend/backend_load.c), so that
 * a damaged file is an error that names it rather than a signal inside the
 * dynamic loader; and the directory both are looked for by default. One
 * check for both loaders, in the lowest layer (docs/layers.md).
 *
 * Why: dlopen maps every loadable segment (PT_LOAD) of a shared object with
 * mmap and then reads it. When a file is shorter than its program headers
 * say (a partial copy, a full disk during install), the pages beyond the end
 * of the file are still mapped, and the first read of one raises SIGBUS: the
 * process dies inside dlopen, with no message. The checks below read the ELF
 * header and the program header table and refuse such a file first.
 *
 * What is checked, in this order (each failure is TS_ERR_PLUGIN with a
 * message "<path>: <what is wrong>", e.g.
 *     /x/tessera-dp.so: truncated: its program headers say 28672 bytes are
 *     loaded from offset 4096 but the file has 8192 bytes (a damaged or
 *     partly copied file?)
 * which the plugin loader prefixes with "plugin '<name>': cannot load " and
 * the backend loader with "cannot load the CUDA backend: "):
 *   - the path is a regular file (not a directory, FIFO, device or socket;
 *     a FIFO is opened non-blocking, so the check never hangs);
 *   - the ELF magic, class ELFCLASS64, the host's byte order, EV_CURRENT;
 *   - type ET_DYN (a shared object: not an executable, a .o or a core dump);
 *   - e_machine equal to the host's (EM_X86_64 on x86-64; other hosts are
 *     listed in so_file.c, or set TS_ELF_HOST_MACHINE at compile time);
 *   - e_ehsize and e_phentsize equal to the ELF64 structure sizes, at least
 *     one program header, and the program header table inside the file;
 *   - at least one PT_LOAD, and every PT_LOAD's file bytes
 *     [p_offset, p_offset + p_filesz) inside the file;
 *   - when e_shoff != 0: e_shentsize equal to the ELF64 section header size
 *     and the section header table inside the file (a truncated tail).
 *
 * What it does not do: check relocations, symbols, the dynamic section or
 * a plugin's descriptor (dlopen and the loaders do that; the plugin
 * loader's descriptor check is ts_plugin_descriptor_check, plugin_file.h),
 * or guard against the file being replaced between the check and dlopen
 * (the plugin directory is trusted; the check is against damage, not
 * against an attacker).
 */
#ifndef TESSERA_CORE_SO_FILE_H
#define TESSERA_CORE_SO_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Checks the file at `path` (see above) by reading only what the checks need:
 * the 64-byte ELF header and then the file's first bytes up to the end of the
 * program header table (for a linker's output, under 1 KiB; never more than
 * 16 MiB, a table beyond that is refused). The file is opened read-only and
 * non-blocking and closed before returning.
 * Returns TS_OK, or TS_ERR_PLUGIN naming the path and what is wrong (also
 * when it cannot be opened or read, with the system's reason); TS_ERR_NOMEM
 * if the buffer for a large program header table cannot be allocated. */
ts_status ts_so_file_check(const char *path);

/* The directory the core searches by default for plugins and backends:
 * <the directory of the library holding the core>/tessera (for an installed
 * core <libdir>/tessera, for a build tree <build>/tessera), written to buf;
 * "tessera" when the library's path is unknown. */
void ts_so_default_dir(char *buf, size_t size);

/* The ELF checks alone, on memory: `buf` holds the first `len` bytes of a
 * file of `file_size` bytes (len <= file_size; the whole file is fine).
 * The ELF header and the program header table must lie within those `len`
 * bytes (a table that lies in the file but beyond `len` is refused as not
 * read). `path` only names the file in messages. Never reads outside
 * buf[0, len) and never fails other than with TS_ERR_PLUGIN (TS_ERR_INVALID
 * for len > file_size or a NULL buf with len > 0). Pure: no I/O, no
 * allocation. */
ts_status ts_so_elf_check(const void *buf, size_t len, uint64_t file_size, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_SO_FILE_H */
