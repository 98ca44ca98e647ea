/*
 * fuzz_ckpt_meta.c — libFuzzer target: the metadata of a checkpoint
 * directory (core/train/ckpt_dir.c: ts_ckpt_reader_open parses it, then
 * ts_ckpt_reader_read reads boxes of tensors from the shard files it names;
 * the format is docs/formats.md).
 *
 * The input is the text of `metadata` in a directory that also holds
 * COMPLETE and FUZZ_META_FILES shard files of zeros (fuzz_common.h). Each
 * input is opened twice: as it is, and with its `end` line replaced by the
 * right checksum of the text before it, so that mutations reach the parser
 * behind the checksum. After an open that succeeds every array of every
 * tensor of at most 2^16 elements is read whole, which walks the shard
 * intersections, the coverage count, the byte ranges and the CRC checks.
 *
 * Oracles: the sanitizers (no crash, leak, overflow or out-of-bounds read
 * whatever the text says).
 */
#include <sys/stat.h>

#include "fuzz_common.h"
#include "state.h"

static char meta_dir[512];
static char *meta_text;
static size_t meta_cap;

static void meta_write(const char *name, const void *data, size_t size) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", meta_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

static void meta_cleanup(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/metadata", meta_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/COMPLETE", meta_dir);
    unlink(path);
    for (int i = 0; i < FUZZ_META_FILES; i++) {
        snprintf(path, sizeof path, "%s/rank-%05d.bin", meta_dir, i);
        unlink(path);
    }
    rmdir(meta_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *t = getenv("TMPDIR");
    snprintf(meta_dir, sizeof meta_dir, "%s/tessera-fuzz-meta.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(meta_dir)) {
        perror("fuzz_ckpt_meta: mkdtemp");
        abort();
    }
    atexit(meta_cleanup);
    static unsigned char zeros[FUZZ_META_BYTES];
    for (int i = 0; i < FUZZ_META_FILES; i++) {
        char name[32];
        snprintf(name, sizeof name, "rank-%05d.bin", i);
        meta_write(name, zeros, sizeof zeros);
    }
    meta_write("COMPLETE", "complete step 3\n", 16);
    return 0;
}

static void meta_load(const char *text, size_t size) {
    meta_write("metadata", text, size);
    ts_ckpt_reader *r = NULL;
    if (ts_ckpt_reader_open(meta_dir, &r) != TS_OK) return;
    const ts_ckpt_info *in = ts_ckpt_reader_info(r);
    static float buf[1 << 16];
    for (int i = 0; i < in->ntensors; i++) {
        const ts_ckpt_tensor *e = &in->tensors[i];
        int64_t off[3] = {0, 0, 0}, n = e->shape[0] * e->shape[1] * e->shape[2];
        if (n > (int64_t)(sizeof buf / sizeof *buf)) continue;
        for (int a = 0; a < TS_CKPT_ARRAYS; a++)
            (void)ts_ckpt_reader_read(r, i, a, off, e->shape, 0, n, buf);
    }
    ts_ckpt_reader_close(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    meta_load((const char *)data, size);
    /* Again with a right `end` line: the text up to its last "\nend " (or
     * all of it), then "end CRC\n". */
    size_t keep = size;
    for (size_t i = size; i >= 5; i--)
        if (memcmp(data + i - 5, "\nend ", 5) == 0) {
            keep = i - 4;
            break;
        }
    if (meta_cap < keep + 32) {
        meta_cap = keep + 32;
        meta_text = realloc(meta_text, meta_cap);
        if (!meta_text) abort();
    }
    memcpy(meta_text, data, keep);
    int n = snprintf(meta_text + keep, 32, "end %08x\n", ts_crc32(0, data, keep));
    meta_load(meta_text, keep + (size_t)n);
    return 0;
}
