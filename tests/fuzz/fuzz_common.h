/*
 * fuzz_common.h — what the libFuzzer targets of tests/fuzz share: the input
 * as a file the core's readers can open, the tiny model shape of the
 * checkpoint seeds, and the byte encoding of a plugin descriptor that
 * fuzz_plugin.c decodes and fuzz_seeds.c writes.
 *
 * The input as a file: the core reads configs, token files and checkpoints
 * by path only. Each process keeps one anonymous in-memory file (memfd) and
 * names it /proc/self/fd/N; every input is written over it, so no input ever
 * touches the disk. Where memfd or /proc is missing, a file in a private
 * temporary directory (removed at exit) stands in.
 *
 * Targets are compiled with _GNU_SOURCE (memfd_create). What it does not do:
 * any check of the core's behaviour (each target holds its own oracles).
 */
#ifndef TESSERA_FUZZ_COMMON_H
#define TESSERA_FUZZ_COMMON_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model.h"
#include "tessera/plugin.h"

/* The model of the checkpoint seeds and of fuzz_checkpoint: ~1.2k
 * parameters, so a whole checkpoint is ~15 KiB. */
static const ts_model_config fuzz_tiny_model = {
    .layers = 1, .d_model = 8, .heads = 2, .vocab = 16, .padded_vocab = 16, .context = 4};

/* The mixture of experts of the llmc and safetensors seeds: block 0 routes
 * to 2 experts of hidden 8, block 1 is dense. */
static const ts_model_config fuzz_tiny_moe = {.layers = 2,
                                              .d_model = 8,
                                              .heads = 2,
                                              .vocab = 16,
                                              .padded_vocab = 16,
                                              .context = 4,
                                              .experts = 2,
                                              .moe_every = 2,
                                              .expert_hidden = 8,
                                              .top_k = 1};

/* The checkpoint directory of fuzz_ckpt_meta and its seeds: FUZZ_META_FILES
 * shard files rank-RRRRR.bin of FUZZ_META_BYTES zero bytes each (f32 zeros:
 * finite), beside the metadata under test. */
#define FUZZ_META_FILES 2
#define FUZZ_META_BYTES 65536

static int fuzz_fd = -1;
static char fuzz_path[512];
static char fuzz_tmpdir[256];

static inline void fuzz_file_cleanup(void) {
    if (!fuzz_tmpdir[0]) return;
    unlink(fuzz_path);
    rmdir(fuzz_tmpdir);
}

/* Writes the input over the process's input file; returns its path. */
static inline const char *fuzz_file_write(const uint8_t *data, size_t size) {
    if (fuzz_fd < 0) {
        fuzz_fd = memfd_create("tessera-fuzz-input", MFD_CLOEXEC);
        if (fuzz_fd >= 0) {
            snprintf(fuzz_path, sizeof fuzz_path, "/proc/self/fd/%d", fuzz_fd);
            if (access(fuzz_path, R_OK) != 0) {
                close(fuzz_fd);
                fuzz_fd = -1;
            }
        }
        if (fuzz_fd < 0) {
            const char *t = getenv("TMPDIR");
            snprintf(fuzz_tmpdir, sizeof fuzz_tmpdir, "%s/tessera-fuzz.XXXXXX",
                     t && *t ? t : "/tmp");
            if (!mkdtemp(fuzz_tmpdir)) {
                perror("fuzz: mkdtemp");
                abort();
            }
            snprintf(fuzz_path, sizeof fuzz_path, "%s/input", fuzz_tmpdir);
            fuzz_fd = open(fuzz_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (fuzz_fd < 0) {
                perror(fuzz_path);
                abort();
            }
            atexit(fuzz_file_cleanup);
        }
    }
    if (ftruncate(fuzz_fd, 0) != 0) abort();
    for (size_t done = 0; done < size;) {
        ssize_t w = pwrite(fuzz_fd, data + done, size - done, (off_t)done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
    return fuzz_path;
}

/* The CPU model of shape `c` with its unsharded flat weights (*full), kept
 * between inputs: built anew (the last one destroyed) when `same` says the
 * shape changed. 0 when the core refuses to build it. */
static inline int fuzz_model_keep(const ts_model_config *c,
                                  int (*same)(const ts_model_config *, const ts_model_config *),
                                  ts_model **m, float **full) {
    if (*m && same(&(*m)->cfg, c)) return 1;
    ts_model_destroy(*m);
    free(*full);
    *m = NULL;
    *full = NULL;
    if (ts_model_create(c, TS_F32, 1, NULL, NULL, m) != TS_OK) {
        *m = NULL;
        return 0;
    }
    *full = calloc((*m)->global_numel, sizeof(float));
    if (!*full) abort();
    return 1;
}

/* --- a plugin descriptor as bytes --------------------------------------------
 * byte 0      not 0x7f (an input starting with 0x7f is an ELF file)
 * byte 1      flags: 1 abi_version raw (else the current ABI with the minor
 *             taken from byte 2), 2 struct_size raw (else the full size),
 *             4 init NULL, 8 keys NULL
 * byte 2      raw abi_version low byte / minor
 * byte 3      nkeys + 1 (so -1 .. 254; at most FUZZ_MAX_KEYS keys are built)
 * then, for each key, 3 bytes: type (raw, 0..255), min and max (signed
 * bytes; 0x80 in both: no range)
 * the rest    NUL-separated strings in this order: descriptor name,
 *             version, description, then per key name, default, choices,
 *             help; a string "\x7f" stands for NULL, and strings past the end
 *             are NULL. */
#define FUZZ_DESC_TAG 0x01
#define FUZZ_MAX_KEYS 16

#endif /* TESSERA_FUZZ_COMMON_H */
