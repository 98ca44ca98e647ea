/*
 * so_file.c — the checks of a shared object before dlopen (contract in
 * so_file.h), for the plugin loader and the backend loader alike: that it is
 * a regular file, and that its ELF header and program headers describe a
 * 64-bit shared object for this host whose loadable bytes all lie inside the
 * file.
 *
 * The ELF structures are copied out of the buffer with memcpy (no alignment
 * assumptions) and read in host byte order once the file's byte order is
 * known to be the host's. Every offset + size is computed without overflow.
 *
 * What it does not do: open the library, or check anything the dynamic
 * loader itself reports as an error (relocations, symbols, dependencies).
 */
#define _GNU_SOURCE /* dladdr */
#include "so_file.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(void *) == 8,
               "so_file.c checks ELF64 shared objects: a 64-bit host is assumed");

/* The host's ELF machine. Another host: build with -DTS_ELF_HOST_MACHINE=EM_... */
#if defined(TS_ELF_HOST_MACHINE)
#elif defined(__x86_64__)
#define TS_ELF_HOST_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define TS_ELF_HOST_MACHINE EM_AARCH64
#elif defined(__powerpc64__)
#define TS_ELF_HOST_MACHINE EM_PPC64
#elif defined(__riscv)
#define TS_ELF_HOST_MACHINE EM_RISCV
#elif defined(__s390x__)
#define TS_ELF_HOST_MACHINE EM_S390
#else
#error "so_file.c: unknown host: define TS_ELF_HOST_MACHINE as its ELF e_machine (EM_* of elf.h)"
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define PF_HOST_DATA ELFDATA2LSB
#else
#define PF_HOST_DATA ELFDATA2MSB
#endif

/* The most ts_so_file_check reads: the program header table must end
 * within it (a linker puts it right after the 64-byte ELF header). */
#define PF_READ_MAX ((size_t)16 << 20)
#define PF_DAMAGED "(a damaged or partly copied file?)"

static const char *pf_machine_name(unsigned m) {
    switch (m) {
    case EM_386: return "x86 (32-bit)";
    case EM_X86_64: return "x86-64";
    case EM_ARM: return "ARM (32-bit)";
    case EM_AARCH64: return "AArch64";
    case EM_PPC: return "PowerPC (32-bit)";
    case EM_PPC64: return "PowerPC64";
    case EM_RISCV: return "RISC-V";
    case EM_S390: return "s390x";
    case EM_MIPS: return "MIPS";
    case EM_SPARCV9: return "SPARC64";
    }
    return "another machine";
}

static const char *pf_type_name(unsigned t) {
    switch (t) {
    case ET_NONE: return "an ELF file of no type (ET_NONE)";
    case ET_REL: return "a relocatable object (ET_REL, a .o file)";
    case ET_EXEC: return "an executable (ET_EXEC)";
    case ET_CORE: return "a core dump (ET_CORE)";
    }
    return "an ELF file of an unknown type";
}

/* a + b > limit, without overflow. */
static int pf_beyond(uint64_t a, uint64_t b, uint64_t limit) {
    return a > limit || b > limit - a;
}

ts_status ts_so_elf_check(const void *buf, size_t len, uint64_t file_size, const char *path) {
    const unsigned char *p = buf;
    if (!path) path = "(unnamed plugin file)";
    if ((!buf && len > 0) || (uint64_t)len > file_size)
        return ts_error(TS_ERR_INVALID, "%s: %zu bytes given of a file of %llu bytes", path, len,
                        (unsigned long long)file_size);
    if (file_size == 0)
        return ts_error(TS_ERR_PLUGIN, "%s: is empty (0 bytes), not a shared object " PF_DAMAGED,
                        path);
    size_t nmagic = len < SELFMAG ? len : SELFMAG;
    if (nmagic > 0 && memcmp(p, ELFMAG, nmagic) != 0) {
        char first[3 * SELFMAG + 1] = "";
        for (size_t i = 0, j = 0; i < nmagic; i++)
            j += (size_t)snprintf(first + j, sizeof first - j, "%s%02x", i ? " " : "", p[i]);
        return ts_error(TS_ERR_PLUGIN,
                        "%s: is not an ELF shared object (it starts with the bytes %s, not the "
                        "ELF magic 7f 45 4c 46)",
                        path, first);
    }
    if (len >= EI_NIDENT) {
        if (p[EI_CLASS] != ELFCLASS64)
            return ts_error(TS_ERR_PLUGIN, "%s: is %s; tessera loads 64-bit plugins only", path,
                            p[EI_CLASS] == ELFCLASS32 ? "a 32-bit ELF file (ELFCLASS32)"
                                                      : "an ELF file of an invalid class");
        if (p[EI_DATA] != PF_HOST_DATA)
            return ts_error(TS_ERR_PLUGIN,
                            "%s: is a %s ELF file, but this host is %s (built for another "
                            "machine?)",
                            path,
                            p[EI_DATA] == ELFDATA2MSB   ? "big-endian"
                            : p[EI_DATA] == ELFDATA2LSB ? "little-endian"
                                                        : "invalid-byte-order",
                            PF_HOST_DATA == ELFDATA2LSB ? "little-endian" : "big-endian");
        if (p[EI_VERSION] != EV_CURRENT)
            return ts_error(TS_ERR_PLUGIN,
                            "%s: has ELF version %u in its identification, not %u " PF_DAMAGED,
                            path, p[EI_VERSION], EV_CURRENT);
    }
    if (file_size < sizeof(Elf64_Ehdr))
        return ts_error(
            TS_ERR_PLUGIN,
            "%s: truncated: %llu bytes, shorter than the %zu-byte ELF header " PF_DAMAGED, path,
            (unsigned long long)file_size, sizeof(Elf64_Ehdr));
    if (len < sizeof(Elf64_Ehdr))
        return ts_error(TS_ERR_PLUGIN, "%s: only %zu bytes of its ELF header could be read", path,
                        len);

    Elf64_Ehdr eh;
    memcpy(&eh, p, sizeof eh);
    if (eh.e_type != ET_DYN)
        return ts_error(
            TS_ERR_PLUGIN, "%s: is %s, not a shared object (ET_DYN)%s", path,
            pf_type_name(eh.e_type),
            eh.e_type == ET_REL || eh.e_type == ET_EXEC ? ": build a plugin with -shared" : "");
    if (eh.e_machine != TS_ELF_HOST_MACHINE)
        return ts_error(TS_ERR_PLUGIN,
                        "%s: was built for %s (ELF machine %u), but this host is %s (ELF machine "
                        "%u): rebuild the plugin for this machine",
                        path, pf_machine_name(eh.e_machine), eh.e_machine,
                        pf_machine_name(TS_ELF_HOST_MACHINE), TS_ELF_HOST_MACHINE);
    if (eh.e_version != EV_CURRENT)
        return ts_error(TS_ERR_PLUGIN, "%s: has ELF version %u, not %u " PF_DAMAGED, path,
                        eh.e_version, EV_CURRENT);
    if (eh.e_ehsize != sizeof(Elf64_Ehdr))
        return ts_error(TS_ERR_PLUGIN, "%s: says its ELF header is %u bytes, not %zu " PF_DAMAGED,
                        path, eh.e_ehsize, sizeof(Elf64_Ehdr));
    if (eh.e_phnum == 0)
        return ts_error(TS_ERR_PLUGIN,
                        "%s: has no program headers, so nothing to load: not a shared object",
                        path);
    if (eh.e_phentsize != sizeof(Elf64_Phdr))
        return ts_error(TS_ERR_PLUGIN,
                        "%s: says its program headers are %u bytes each, not %zu " PF_DAMAGED, path,
                        eh.e_phentsize, sizeof(Elf64_Phdr));
    uint64_t ph_bytes = (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr);
    if (pf_beyond(eh.e_phoff, ph_bytes, file_size))
        return ts_error(TS_ERR_PLUGIN,
                        "%s: truncated: its program header table (%u entries at offset %llu) "
                        "ends past the end of the file, which has %llu bytes " PF_DAMAGED,
                        path, eh.e_phnum, (unsigned long long)eh.e_phoff,
                        (unsigned long long)file_size);
    if (pf_beyond(eh.e_phoff, ph_bytes, len))
        return ts_error(TS_ERR_PLUGIN,
                        "%s: its program header table (%u entries at offset %llu) lies beyond "
                        "the first %zu bytes, which is all that was read",
                        path, eh.e_phnum, (unsigned long long)eh.e_phoff, len);

    int nload = 0;
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        memcpy(&ph, p + eh.e_phoff + (uint64_t)i * sizeof ph, sizeof ph);
        if (ph.p_type != PT_LOAD) continue;
        nload++;
        if (pf_beyond(ph.p_offset, ph.p_filesz, file_size))
            return ts_error(TS_ERR_PLUGIN,
                            "%s: truncated: its program headers say %llu bytes are loaded from "
                            "offset %llu but the file has %llu bytes " PF_DAMAGED,
                            path, (unsigned long long)ph.p_filesz, (unsigned long long)ph.p_offset,
                            (unsigned long long)file_size);
    }
    if (nload == 0)
        return ts_error(TS_ERR_PLUGIN,
                        "%s: has no loadable segment (PT_LOAD) among its %u program headers: not "
                        "a shared object",
                        path, eh.e_phnum);

    if (eh.e_shoff != 0) {
        /* e_shnum 0 with a table: the count is in section 0 (extended
         * numbering); at least that entry must be there. */
        uint64_t nsec = eh.e_shnum ? eh.e_shnum : 1;
        if (eh.e_shentsize != sizeof(Elf64_Shdr))
            return ts_error(TS_ERR_PLUGIN,
                            "%s: says its section headers are %u bytes each, not %zu " PF_DAMAGED,
                            path, eh.e_shentsize, sizeof(Elf64_Shdr));
        if (pf_beyond(eh.e_shoff, nsec * sizeof(Elf64_Shdr), file_size))
            return ts_error(TS_ERR_PLUGIN,
                            "%s: truncated: its section header table (%llu entries at offset "
                            "%llu) ends past the end of the file, which has %llu bytes " PF_DAMAGED,
                            path, (unsigned long long)nsec, (unsigned long long)eh.e_shoff,
                            (unsigned long long)file_size);
    }
    return TS_OK;
}

static const char *pf_file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

/* Reads up to n bytes at offset 0; *got is what arrived (short at EOF). */
static ts_status pf_read(int fd, unsigned char *buf, size_t n, size_t *got, const char *path) {
    *got = 0;
    while (*got < n) {
        ssize_t r = pread(fd, buf + *got, n - *got, (off_t)*got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return ts_error(TS_ERR_PLUGIN, "%s: cannot read: %s", path, strerror(errno));
        if (r == 0) break;
        *got += (size_t)r;
    }
    return TS_OK;
}

ts_status ts_so_file_check(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return ts_error(TS_ERR_PLUGIN, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return ts_error(TS_ERR_PLUGIN, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return ts_error(TS_ERR_PLUGIN,
                        "%s: is %s, not a regular file (a plugin is a shared object file "
                        "tessera-<name>.so)",
                        path, pf_file_kind(sb.st_mode));
    }
    uint64_t size = (uint64_t)sb.st_size;
    /* First the ELF header, then as much of the file's start as the program
     * header table needs (the header's fields are checked by
     * ts_so_elf_check; here they only size the read). */
    unsigned char head[sizeof(Elf64_Ehdr)];
    size_t got;
    ts_status st = pf_read(fd, head, sizeof head, &got, path);
    if (st == TS_OK && (got < sizeof head || memcmp(head, ELFMAG, SELFMAG) != 0 ||
                        head[EI_DATA] != PF_HOST_DATA)) {
        close(fd); /* too short, not ELF, or a foreign byte order: refused below */
        return ts_so_elf_check(head, got, got < sizeof head ? got : size, path);
    }
    size_t need = sizeof head;
    if (st == TS_OK) {
        Elf64_Ehdr eh;
        memcpy(&eh, head, sizeof eh);
        uint64_t end = (uint64_t)eh.e_phnum * eh.e_phentsize;
        end = eh.e_phoff > UINT64_MAX - end ? UINT64_MAX : eh.e_phoff + end;
        if (end > size) end = size;               /* elf_check says "truncated" */
        if (end > PF_READ_MAX) end = sizeof head; /* it says "not read"   */
        if (end > need) need = (size_t)end;
    }
    unsigned char *buf = NULL;
    if (st == TS_OK && need > sizeof head) {
        buf = malloc(need);
        if (!buf) st = ts_error(TS_ERR_NOMEM, "%s: out of memory reading its ELF headers", path);
        if (st == TS_OK) st = pf_read(fd, buf, need, &got, path);
    }
    close(fd);
    if (st == TS_OK) {
        /* A file that shrank since fstat is judged by what is left. */
        uint64_t fsize = got < need ? got : size;
        st = ts_so_elf_check(buf ? buf : head, got, fsize, path);
    }
    free(buf);
    return st;
}

void ts_so_default_dir(char *buf, size_t size) {
    Dl_info info;
    const char *slash = NULL;
    if (dladdr((void *)&ts_so_default_dir, &info) && info.dli_fname)
        slash = strrchr(info.dli_fname, '/');
    if (slash)
        snprintf(buf, size, "%.*s/tessera", (int)(slash - info.dli_fname), info.dli_fname);
    else
        snprintf(buf, size, "tessera");
}
