/*
 * checkpoint.c — saving and loading the training state (state.h), the
 * atomic file writer and CRC-32 they rely on. The byte layout is documented
 * in docs/formats.md.
 */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "state.h"

/* --- CRC-32, slicing by 8 ------------------------------------------------- */
static uint32_t crc_table[8][256];
static int crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
    crc_ready = 1;
}

uint32_t ts_crc32(uint32_t crc, const void *data, size_t n) {
    if (!crc_ready) crc_init();
    const unsigned char *p = data;
    crc = ~crc;
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= crc;
        crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
              crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
              crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^
              crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* --- atomic writes -------------------------------------------------------- */
static ts_status write_all(int fd, const void *buf, size_t n, const char *path) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return ts_error(TS_ERR_IO, "%s: write failed: %s", path, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
    return TS_OK;
}

ts_status ts_write_atomic(const char *path, int n, const void *const *bufs, const size_t *sizes) {
    /* Only a regular file (or a new path) is replaced; through a link, its
     * target. The temporary name is unique, so two writers never share it. */
    char final[4096], tmp[4200];
    TS_TRY(ts_file_output_path(path, "output file", final, sizeof final));
    snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", final);
    int fd = mkstemp(tmp);
    if (fd < 0) return ts_error(TS_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    ts_status st = TS_OK;
    if (fchmod(fd, 0644) != 0)
        st = ts_error(TS_ERR_IO, "%s: chmod failed: %s", tmp, strerror(errno));
    for (int i = 0; i < n && !st; i++)
        st = write_all(fd, bufs[i], sizes[i], tmp);
    if (!st && fsync(fd) != 0)
        st = ts_error(TS_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !st)
        st = ts_error(TS_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
    if (!st && rename(tmp, final) != 0)
        st = ts_error(TS_ERR_IO, "%s: rename to %s failed: %s", tmp, final, strerror(errno));
    if (st) {
        unlink(tmp);
        return st;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", final);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return TS_OK;
}

/* --- the checkpoint format ------------------------------------------------ */
#define CKPT_MAGIC "TSCKPT\0\1"
#define CKPT_VERSION 1u
#define CKPT_HEADER_BYTES 256u

typedef struct ckpt_header {
    char magic[8];
    uint32_t version;
    uint32_t header_bytes;
    int64_t step;
    int64_t data_cursor;
    uint64_t seed;
    int32_t layers, d_model, heads, vocab, padded_vocab, context;
    int32_t param_dtype; /* ts_dtype of the model's parameters */
    int32_t ntensors;
    uint64_t numel;         /* elements in each of master, m, v */
    uint64_t payload_bytes; /* tensor table + 3 * numel * 4     */
    uint32_t payload_crc;
    uint32_t header_crc;   /* over the 256 bytes with this field 0 */
    int64_t skipped_steps; /* 0 in files of older builds            */
    char reserved[CKPT_HEADER_BYTES - 104];
} ckpt_header;
_Static_assert(sizeof(ckpt_header) == CKPT_HEADER_BYTES, "header is 256 bytes");

typedef struct ckpt_entry {
    char name[64];
    int64_t ndim;
    int64_t shape[4];
    int64_t offset; /* element offset in the flat arrays */
    int64_t numel;
    int64_t reserved;
} ckpt_entry;
_Static_assert(sizeof(ckpt_entry) == 128, "table entries are 128 bytes");

/* The table of the unsharded model: every parameter (whichever ranks hold
 * it), in model order, at its global offset. Returns the count, -1 when out
 * of memory; with tab NULL only counts. */
static int ckpt_fill_table(ckpt_entry *tab, const ts_model *m) {
    int n = ts_model_param_table_of(m, NULL, NULL, NULL);
    if (!tab) return n;
    char(*names)[TS_NAME_MAX] = malloc((size_t)n * sizeof *names);
    int64_t(*shapes)[3] = malloc((size_t)n * sizeof *shapes);
    int *ndim = malloc((size_t)n * sizeof *ndim);
    if (!names || !shapes || !ndim || ts_model_param_table_of(m, names, shapes, ndim) != n) {
        free(names);
        free(shapes);
        free(ndim);
        return -1;
    }
    memset(tab, 0, sizeof *tab * (size_t)n);
    int64_t off = 0;
    for (int i = 0; i < n; i++) {
        snprintf(tab[i].name, sizeof tab[i].name, "%s", names[i]);
        tab[i].ndim = ndim[i];
        int64_t cnt = 1;
        for (int d = 0; d < ndim[i]; d++) {
            tab[i].shape[d] = shapes[i][d];
            cnt *= shapes[i][d];
        }
        tab[i].offset = off;
        tab[i].numel = cnt;
        off += cnt;
    }
    free(names);
    free(shapes);
    free(ndim);
    return n;
}

ts_status ts_checkpoint_save(const char *dir, const ts_model *m, const ts_ckpt_meta *meta,
                             const float *master, const float *mom1, const float *mom2,
                             char *path_out, size_t path_size) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ts_error(TS_ERR_IO, "checkpoint_dir %s: cannot create: %s", dir, strerror(errno));
    int ntab = ckpt_fill_table(NULL, m);
    size_t tab_bytes = sizeof(ckpt_entry) * (size_t)ntab;
    ckpt_entry *tab = malloc(tab_bytes);
    if (!tab || ckpt_fill_table(tab, m) != ntab) {
        free(tab);
        return ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    }
    size_t arr = m->global_numel * sizeof(float);
    ckpt_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, CKPT_MAGIC, 8);
    h.version = CKPT_VERSION;
    h.header_bytes = CKPT_HEADER_BYTES;
    h.step = meta->step;
    h.data_cursor = meta->data_cursor;
    h.seed = meta->seed;
    h.skipped_steps = meta->skipped_steps;
    h.layers = m->cfg.layers;
    h.d_model = m->cfg.d_model;
    h.heads = m->cfg.heads;
    h.vocab = m->cfg.vocab;
    h.padded_vocab = m->cfg.padded_vocab;
    h.context = m->cfg.context;
    h.param_dtype = (int32_t)m->dtype;
    h.ntensors = ntab;
    h.numel = m->global_numel;
    h.payload_bytes = tab_bytes + 3 * arr;
    uint32_t crc = ts_crc32(0, tab, tab_bytes);
    crc = ts_crc32(crc, master, arr);
    crc = ts_crc32(crc, mom1, arr);
    crc = ts_crc32(crc, mom2, arr);
    h.payload_crc = crc;
    h.header_crc = ts_crc32(0, &h, sizeof h);

    char path[4096];
    snprintf(path, sizeof path, "%s/ckpt-%08lld.tsck", dir, (long long)meta->step);
    const void *bufs[5] = {&h, tab, master, mom1, mom2};
    size_t sizes[5] = {sizeof h, tab_bytes, arr, arr, arr};
    ts_status s = ts_write_atomic(path, 5, bufs, sizes);
    free(tab);
    if (!s && path_out) snprintf(path_out, path_size, "%s", path);
    return s;
}

static ts_status read_exact(FILE *f, void *buf, size_t n, const char *path, const char *what) {
    if (fread(buf, 1, n, f) != n)
        return ts_error(TS_ERR_FORMAT, "checkpoint %s: truncated while reading %s", path, what);
    return TS_OK;
}

ts_status ts_checkpoint_load(const char *path, const ts_model *m, ts_ckpt_meta *meta, float *master,
                             float *mom1, float *mom2) {
    FILE *f;
    TS_TRY(ts_file_open_read(path, "checkpoint", &f));
    ckpt_header h;
    ts_status s = read_exact(f, &h, sizeof h, path, "the header");
    if (s) {
        fclose(f);
        return s;
    }
    if (memcmp(h.magic, CKPT_MAGIC, 8) != 0) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT, "checkpoint %s: wrong magic (not a tessera checkpoint)",
                        path);
    }
    if (h.version != CKPT_VERSION) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT, "checkpoint %s: version %u, this build reads version %u",
                        path, h.version, CKPT_VERSION);
    }
    uint32_t want = h.header_crc;
    h.header_crc = 0;
    if (ts_crc32(0, &h, sizeof h) != want) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT, "checkpoint %s: header checksum mismatch (corrupt file)",
                        path);
    }
    const ts_model_config *c = &m->cfg;
    if (h.layers != c->layers || h.d_model != c->d_model || h.heads != c->heads ||
        h.vocab != c->vocab || h.padded_vocab != c->padded_vocab || h.context != c->context ||
        h.numel != m->global_numel || h.ntensors != ckpt_fill_table(NULL, m)) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT,
                        "checkpoint %s: model shape layers=%d d_model=%d heads=%d vocab=%d "
                        "padded_vocab=%d context=%d does not match the configured "
                        "layers=%d d_model=%d heads=%d vocab=%d padded_vocab=%d context=%d",
                        path, h.layers, h.d_model, h.heads, h.vocab, h.padded_vocab, h.context,
                        c->layers, c->d_model, c->heads, c->vocab, c->padded_vocab, c->context);
    }
    if (h.param_dtype != (int32_t)m->dtype) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT, "checkpoint %s: parameters were %s, the run uses %s", path,
                        ts_dtype_name((ts_dtype)h.param_dtype), ts_dtype_name(m->dtype));
    }
    int ntab = h.ntensors;
    size_t tab_bytes = sizeof(ckpt_entry) * (size_t)ntab;
    size_t arr = m->global_numel * sizeof(float);
    if (h.payload_bytes != tab_bytes + 3 * arr) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT, "checkpoint %s: payload size %llu, expected %zu", path,
                        (unsigned long long)h.payload_bytes, tab_bytes + 3 * arr);
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && (uint64_t)sb.st_size != sizeof h + h.payload_bytes) {
        fclose(f);
        return ts_error(
            TS_ERR_FORMAT, "checkpoint %s: file is %lld bytes, expected %llu (truncated or padded)",
            path, (long long)sb.st_size, (unsigned long long)(sizeof h + h.payload_bytes));
    }
    /* Read everything into scratch, verify, and only then write the outputs. */
    ckpt_entry *tab = malloc(tab_bytes);
    ckpt_entry *expect = malloc(tab_bytes);
    float *buf = ts_mem_alloc(TS_MEM_OTHER, 3 * arr);
    if (!tab || !expect || !buf) {
        free(tab);
        free(expect);
        ts_mem_free(buf);
        fclose(f);
        return ts_error(TS_ERR_NOMEM, "checkpoint %s: out of memory", path);
    }
    s = read_exact(f, tab, tab_bytes, path, "the tensor table");
    if (!s) s = read_exact(f, buf, 3 * arr, path, "the tensors");
    fclose(f);
    if (!s) {
        uint32_t crc = ts_crc32(0, tab, tab_bytes);
        crc = ts_crc32(crc, buf, 3 * arr);
        if (crc != h.payload_crc)
            s = ts_error(TS_ERR_FORMAT, "checkpoint %s: payload checksum mismatch (corrupt file)",
                         path);
    }
    if (!s && ckpt_fill_table(expect, m) != ntab)
        s = ts_error(TS_ERR_NOMEM, "checkpoint %s: out of memory", path);
    if (!s) {
        for (int i = 0; i < ntab && !s; i++)
            if (memcmp(&tab[i], &expect[i], sizeof tab[i]) != 0)
                s = ts_error(TS_ERR_FORMAT,
                             "checkpoint %s: tensor %d is '%.*s', expected '%s' "
                             "with the same shape and offset",
                             path, i, (int)sizeof tab[i].name, tab[i].name, expect[i].name);
    }
    /* A diverged state is never resumed (this build never writes one). */
    for (size_t i = 0; !s && i < 3 * m->global_numel; i++)
        if (!isfinite(buf[i]))
            s = ts_error(TS_ERR_FORMAT,
                         "checkpoint %s: holds a value that is not finite (%s element %zu): it "
                         "was written by a run that diverged; resume from an earlier checkpoint",
                         path,
                         i < m->global_numel       ? "master weight"
                         : i < 2 * m->global_numel ? "first moment"
                                                   : "second moment",
                         i % m->global_numel);
    if (!s) {
        memcpy(master, buf, arr);
        memcpy(mom1, buf + m->global_numel, arr);
        memcpy(mom2, buf + 2 * m->global_numel, arr);
        meta->step = h.step;
        meta->data_cursor = h.data_cursor;
        meta->seed = h.seed;
        meta->skipped_steps = h.skipped_steps;
    }
    free(tab);
    free(expect);
    ts_mem_free(buf);
    return s;
}
