/*
 * ckpt_dir.c — the sharded checkpoint directory (state.h, docs/formats.md):
 * each rank's shard file, the metadata that says where every shard of every
 * tensor lies, the completion marker and the rename that publishes it, and
 * reading any box of any tensor back from whichever shards hold it.
 *
 * What it does not do: choose which rank writes which shard or move the
 * trainer's arrays (state_io.c); the single-file format of older builds
 * (checkpoint.c).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h"
#include "state.h"

#define META_MAGIC "tessera-checkpoint 2"
/* The largest dimension and element count of a tensor the reader accepts
 * (2^48: far beyond any model, small enough that no offset arithmetic on
 * it overflows). */
#define TS_CKPT_MAX_DIM (1LL << 48)
static const char *const array_names[TS_CKPT_ARRAYS] = {"master", "m", "v"};

const char *ts_ckpt_array_name(int array) {
    return array >= 0 && array < TS_CKPT_ARRAYS ? array_names[array] : "?";
}

/* --- paths ---------------------------------------------------------------- */
void ts_ckpt_dir_paths(const char *dir, int64_t step, char *final, char *tmp, size_t size) {
    snprintf(final, size, "%s/ckpt-%08lld", dir, (long long)step);
    snprintf(tmp, size, "%s/ckpt-%08lld.tmp.dir", dir, (long long)step);
}

void ts_ckpt_rank_file(const char *ckpt, int rank, char *path, size_t size) {
    snprintf(path, size, "%s/rank-%05d.bin", ckpt, rank);
}

/* Removes directory `path` and the plain files in it (a checkpoint
 * directory has no subdirectories). Missing is fine. A symbolic link (or a
 * file) at `path` is refused, never followed: a link planted at a
 * temporary name (DIR.tmp.dir) would have had the files of the directory
 * it leads to removed. */
ts_status ts_ckpt_remove_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return TS_OK;
    if (fd < 0 && (errno == ELOOP || errno == ENOTDIR))
        return ts_error(TS_ERR_IO,
                        "%s: is a symbolic link or not a directory: refusing to remove it or "
                        "what it leads to (remove it by hand)",
                        path);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0) close(fd);
        return ts_error(TS_ERR_IO, "%s: %s", path, strerror(e));
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[8192];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (unlinkat(dirfd(d), e->d_name, 0) != 0 && errno != ENOENT) {
            closedir(d);
            return ts_error(TS_ERR_IO, "%s: cannot remove: %s", p, strerror(errno));
        }
    }
    closedir(d);
    if (rmdir(path) != 0 && errno != ENOENT)
        return ts_error(TS_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return TS_OK;
}

static void fsync_dir(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

ts_status ts_ckpt_begin(const char *tmp) {
    TS_TRY(ts_ckpt_remove_dir(tmp));
    if (mkdir(tmp, 0755) != 0)
        return ts_error(TS_ERR_IO, "checkpoint %s: cannot create: %s", tmp, strerror(errno));
    return TS_OK;
}

/* --- one rank's shard file ------------------------------------------------ */
ts_status ts_ckpt_file_open(ts_ckpt_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    snprintf(f->path, sizeof f->path, "%s", path);
    f->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (f->fd < 0) return ts_error(TS_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    return TS_OK;
}

ts_status ts_ckpt_file_write(ts_ckpt_file *f, const void *buf, size_t n) {
    const char *p = buf;
    f->crc = ts_crc32(f->crc, buf, n);
    while (n > 0) {
        ssize_t w = write(f->fd, p, n > (1u << 30) ? (1u << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return ts_error(TS_ERR_IO, "%s: write failed: %s", f->path, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
        f->bytes += (uint64_t)w;
    }
    return TS_OK;
}

ts_status ts_ckpt_file_close(ts_ckpt_file *f) {
    ts_status st = TS_OK;
    if (f->fd < 0) return st;
    if (fsync(f->fd) != 0)
        st = ts_error(TS_ERR_IO, "%s: fsync failed: %s", f->path, strerror(errno));
    if (close(f->fd) != 0 && !st)
        st = ts_error(TS_ERR_IO, "%s: close failed: %s", f->path, strerror(errno));
    f->fd = -1;
    return st;
}

/* --- metadata ------------------------------------------------------------- */
/* Appends printf output to a growing buffer. */
typedef struct text {
    char *s;
    size_t len, cap;
    int oom;
} text;

static void text_add(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_add(text *t, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = t->oom
                    ? 0
                    : vsnprintf(t->s ? t->s + t->len : NULL, t->s ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (t->oom) return;
        if (t->s && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = (t->cap ? t->cap * 2 : 65536) + (size_t)n;
        char *s = realloc(t->s, cap);
        if (!s) {
            t->oom = 1;
            return;
        }
        t->s = s;
        t->cap = cap;
    }
}

ts_status ts_ckpt_commit(const char *tmp, const char *final, const ts_ckpt_info *info) {
    text t = {0};
    const ts_ckpt_meta *me = &info->meta;
    const ts_model_config *c = &info->cfg;
    text_add(&t, META_MAGIC "\n");
    text_add(&t,
             "step %" PRId64 "\ndata_cursor %" PRId64 "\nseed %" PRIu64 "\nskipped_steps %" PRId64
             "\n",
             me->step, me->data_cursor, me->seed, me->skipped_steps);
    text_add(&t, "param_dtype %s\n", ts_dtype_name(info->param_dtype));
    text_add(&t,
             "model layers=%d d_model=%d heads=%d vocab=%d padded_vocab=%d context=%d "
             "experts=%d moe_every=%d expert_hidden=%d top_k=%d\n",
             c->layers, c->d_model, c->heads, c->vocab, c->padded_vocab, c->context, c->experts,
             c->moe_every, c->expert_hidden, c->top_k);
    text_add(&t, "files %d\n", info->nfiles);
    for (int i = 0; i < info->nfiles; i++)
        text_add(&t, "file %d rank-%05d.bin %" PRIu64 "\n", i, i, info->file_bytes[i]);
    text_add(&t, "tensors %d\n", info->ntensors);
    for (int i = 0; i < info->ntensors; i++) {
        const ts_ckpt_tensor *e = &info->tensors[i];
        text_add(&t, "tensor %d %s %d %" PRId64 " %" PRId64 " %" PRId64 "\n", i, e->name, e->ndim,
                 e->shape[0], e->shape[1], e->shape[2]);
    }
    text_add(&t, "shards %" PRId64 "\n", info->nshards);
    for (int64_t i = 0; i < info->nshards; i++) {
        const ts_ckpt_shard *s = &info->shards[i];
        text_add(&t,
                 "shard %" PRId64 " %s %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64
                 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %08" PRIx64 "\n",
                 s->tensor, ts_ckpt_array_name((int)s->array), s->file, s->file_offset,
                 s->offset[0], s->offset[1], s->offset[2], s->extent[0], s->extent[1], s->extent[2],
                 s->lo, s->hi, s->crc);
    }
    if (t.oom) {
        free(t.s);
        return ts_error(TS_ERR_NOMEM, "checkpoint %s: out of memory for the metadata", tmp);
    }
    text_add(&t, "end %08" PRIx32 "\n", ts_crc32(0, t.s, t.len));
    char path[4200], marker[64];
    snprintf(path, sizeof path, "%s/metadata", tmp);
    const void *bufs[1] = {t.s};
    size_t sizes[1] = {t.len};
    ts_status st = t.oom ? TS_ERR_NOMEM : ts_write_atomic(path, 1, bufs, sizes);
    free(t.s);
    TS_TRY(st);
    /* The marker last: a directory without it is never loaded. */
    int n = snprintf(marker, sizeof marker, "complete step %" PRId64 "\n", me->step);
    snprintf(path, sizeof path, "%s/COMPLETE", tmp);
    bufs[0] = marker;
    sizes[0] = (size_t)n;
    TS_TRY(ts_write_atomic(path, 1, bufs, sizes));
    fsync_dir(tmp);
    /* Publish: a checkpoint of the same step already there (a run resumed
     * before it and saved again) is set aside first, removed after. */
    char old[4200];
    struct stat sb;
    int had_old = 0;
    if (lstat(final, &sb) == 0) {
        char marker[4200];
        snprintf(marker, sizeof marker, "%s/COMPLETE", final);
        if (!S_ISDIR(sb.st_mode) || access(marker, F_OK) != 0)
            return ts_error(TS_ERR_IO,
                            "checkpoint %s: exists and is not a checkpoint: it is left alone and "
                            "this checkpoint is not written (move it away)",
                            final);
        snprintf(old, sizeof old, "%s.old.tmp.dir", final);
        TS_TRY(ts_ckpt_remove_dir(old));
        if (rename(final, old) != 0)
            return ts_error(TS_ERR_IO, "checkpoint %s: cannot move aside: %s", final,
                            strerror(errno));
        had_old = 1;
    }
    if (rename(tmp, final) != 0)
        return ts_error(TS_ERR_IO, "checkpoint %s: rename to %s failed: %s", tmp, final,
                        strerror(errno));
    char parent[4200];
    snprintf(parent, sizeof parent, "%s/..", final);
    fsync_dir(parent);
    if (had_old) TS_TRY(ts_ckpt_remove_dir(old));
    return TS_OK;
}

/* --- finding the newest --------------------------------------------------- */
int ts_ckpt_is_complete(const char *path) {
    char marker[4200];
    struct stat sb;
    snprintf(marker, sizeof marker, "%s/COMPLETE", path);
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode) && stat(marker, &sb) == 0 &&
           S_ISREG(sb.st_mode);
}

ts_status ts_checkpoint_latest(const char *dir, char *path, size_t path_size, int *found) {
    *found = 0;
    DIR *d = opendir(dir);
    if (!d) return TS_OK;
    long long best = -1;
    int best_dir = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long step;
        char tail[8];
        size_t len = strlen(e->d_name);
        /* ckpt-<8 digits> (a directory with its marker), or an older build's
         * ckpt-<8 digits>.tsck; "%7s" catches anything trailing. */
        if (len == strlen("ckpt-00000000") && sscanf(e->d_name, "ckpt-%lld%7s", &step, tail) == 1) {
            char p[8192];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (ts_ckpt_is_complete(p) && (step > best || (step == best && !best_dir))) {
                best = step;
                best_dir = 1;
            }
        } else if (len == strlen("ckpt-00000000.tsck") &&
                   sscanf(e->d_name, "ckpt-%lld.tsck%7s", &step, tail) == 1 && step > best) {
            best = step;
            best_dir = 0;
        }
    }
    closedir(d);
    if (best < 0) return TS_OK;
    if (best_dir)
        snprintf(path, path_size, "%s/ckpt-%08lld", dir, best);
    else
        snprintf(path, path_size, "%s/ckpt-%08lld.tsck", dir, best);
    *found = 1;
    return TS_OK;
}

/* --- reading -------------------------------------------------------------- */
struct ts_ckpt_reader {
    char path[4096];
    ts_ckpt_info info;
    int *fds;            /* per file, opened on first use (-1)              */
    int64_t *first;      /* per tensor: its first shard in `order`          */
    int64_t *count;      /* ... and how many                                */
    int64_t *order;      /* shard indices grouped by tensor                 */
    char *text;          /* the metadata                                    */
    uint64_t bytes_read; /* from the shard files so far                    */
};

static ts_status meta_error(const ts_ckpt_reader *r, int line, const char *what) {
    return ts_error(TS_ERR_FORMAT, "checkpoint %s: metadata line %d: %s", r->path, line, what);
}

/* Parses the metadata text (NUL-terminated, its last line "end CRC"). */
static ts_status reader_parse(ts_ckpt_reader *r) {
    char *s = r->text;
    size_t len = strlen(s);
    char *end = NULL;
    for (char *p = s + len; p > s; p--)
        if (p[-1] == '\n' && strncmp(p, "end ", 4) == 0) {
            end = p;
            break;
        }
    unsigned crc;
    if (!end || sscanf(end, "end %8x", &crc) != 1)
        return ts_error(TS_ERR_FORMAT, "checkpoint %s: metadata has no end line (truncated)",
                        r->path);
    if (ts_crc32(0, s, (size_t)(end - s)) != crc)
        return ts_error(TS_ERR_FORMAT, "checkpoint %s: metadata checksum mismatch (corrupt file)",
                        r->path);
    *end = 0;
    /* No count may promise more records than the text has lines (a forged
     * count must not make the reader allocate for it). */
    long long lines = 0;
    for (const char *p = s; *p; p++)
        lines += *p == '\n';
    ts_ckpt_info *in = &r->info;
    int line = 0;
    char *save = NULL;
    char *l = strtok_r(s, "\n", &save);
#define NEXT() (line++, l = (line == 1 ? l : strtok_r(NULL, "\n", &save)))
    NEXT();
    if (!l || strcmp(l, META_MAGIC) != 0)
        return ts_error(TS_ERR_FORMAT,
                        "checkpoint %s: metadata does not start with '" META_MAGIC "'", r->path);
    long long v[13];
    char name[64], dtype[16];
    if (!NEXT() || sscanf(l, "step %lld", &v[0]) != 1) return meta_error(r, line, "expected step");
    in->meta.step = v[0];
    if (!NEXT() || sscanf(l, "data_cursor %lld", &v[0]) != 1)
        return meta_error(r, line, "expected data_cursor");
    in->meta.data_cursor = v[0];
    unsigned long long seed;
    if (!NEXT() || sscanf(l, "seed %llu", &seed) != 1) return meta_error(r, line, "expected seed");
    in->meta.seed = seed;
    if (!NEXT() || sscanf(l, "skipped_steps %lld", &v[0]) != 1)
        return meta_error(r, line, "expected skipped_steps");
    in->meta.skipped_steps = v[0];
    if (!NEXT() || sscanf(l, "param_dtype %15s", dtype) != 1)
        return meta_error(r, line, "expected param_dtype");
    if (strcmp(dtype, "f32") == 0)
        in->param_dtype = TS_F32;
    else if (strcmp(dtype, "bf16") == 0)
        in->param_dtype = TS_BF16;
    else
        return meta_error(r, line, "param_dtype is neither f32 nor bf16");
    ts_model_config *c = &in->cfg;
    if (!NEXT() ||
        sscanf(l,
               "model layers=%d d_model=%d heads=%d vocab=%d padded_vocab=%d "
               "context=%d experts=%d moe_every=%d expert_hidden=%d top_k=%d",
               &c->layers, &c->d_model, &c->heads, &c->vocab, &c->padded_vocab, &c->context,
               &c->experts, &c->moe_every, &c->expert_hidden, &c->top_k) != 10)
        return meta_error(r, line, "expected the model line");
    if (!NEXT() || sscanf(l, "files %d", &in->nfiles) != 1 || in->nfiles < 1 || in->nfiles > lines)
        return meta_error(r, line, "expected files N");
    in->file_bytes = calloc((size_t)in->nfiles, sizeof *in->file_bytes);
    r->fds = malloc((size_t)in->nfiles * sizeof *r->fds);
    if (!in->file_bytes || !r->fds) return TS_ERR_NOMEM;
    for (int i = 0; i < in->nfiles; i++) {
        r->fds[i] = -1;
        char want[32];
        unsigned long long bytes;
        snprintf(want, sizeof want, "rank-%05d.bin", i);
        if (!NEXT() || sscanf(l, "file %lld %63s %llu", &v[0], name, &bytes) != 3 || v[0] != i ||
            strcmp(name, want) != 0)
            return meta_error(r, line, "expected file I rank-I.bin BYTES");
        in->file_bytes[i] = bytes;
    }
    if (!NEXT() || sscanf(l, "tensors %d", &in->ntensors) != 1 || in->ntensors < 1 ||
        in->ntensors > lines)
        return meta_error(r, line, "expected tensors N");
    in->tensors = calloc((size_t)in->ntensors, sizeof *in->tensors);
    if (!in->tensors) return TS_ERR_NOMEM;
    for (int i = 0; i < in->ntensors; i++) {
        ts_ckpt_tensor *e = &in->tensors[i];
        if (!NEXT() ||
            sscanf(l, "tensor %lld %63s %d %lld %lld %lld", &v[0], e->name, &e->ndim, &v[1], &v[2],
                   &v[3]) != 6 ||
            v[0] != i || e->ndim < 1 || e->ndim > 3)
            return meta_error(r, line, "expected tensor I NAME NDIM D0 D1 D2");
        int64_t numel = 1;
        for (int d = 0; d < 3; d++) {
            e->shape[d] = v[1 + d];
            if (e->shape[d] < 1 || e->shape[d] > TS_CKPT_MAX_DIM ||
                (d >= e->ndim && e->shape[d] != 1))
                return meta_error(r, line, "a tensor dimension out of range");
            numel *= e->shape[d];
            if (numel > TS_CKPT_MAX_DIM) return meta_error(r, line, "a tensor too large");
        }
    }
    if (!NEXT() || sscanf(l, "shards %lld", &v[0]) != 1 || v[0] < 0 || v[0] > lines)
        return meta_error(r, line, "expected shards N");
    in->nshards = v[0];
    in->shards = calloc((size_t)(in->nshards ? in->nshards : 1), sizeof *in->shards);
    if (!in->shards) return TS_ERR_NOMEM;
    for (int64_t i = 0; i < in->nshards; i++) {
        ts_ckpt_shard *sh = &in->shards[i];
        char arr[16];
        unsigned long long scrc;
        if (!NEXT() ||
            sscanf(l, "shard %lld %15s %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %llx",
                   &v[0], arr, &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
                   &v[10], &scrc) != 13)
            return meta_error(r, line, "expected a shard line");
        sh->tensor = v[0];
        sh->array = -1;
        for (int a = 0; a < TS_CKPT_ARRAYS; a++)
            if (strcmp(arr, array_names[a]) == 0) sh->array = a;
        sh->file = v[1];
        sh->file_offset = v[2];
        sh->lo = v[9];
        sh->hi = v[10];
        sh->crc = (int64_t)scrc;
        if (sh->tensor < 0 || sh->tensor >= in->ntensors || sh->array < 0 || sh->file < 0 ||
            sh->file >= in->nfiles || sh->file_offset < 0)
            return meta_error(r, line, "a shard names a tensor, array or file that does not exist");
        const ts_ckpt_tensor *e = &in->tensors[sh->tensor];
        int64_t box = 1;
        for (int d = 0; d < 3; d++) {
            sh->offset[d] = v[3 + d];
            sh->extent[d] = v[6 + d];
            if (sh->offset[d] < 0 || sh->extent[d] < 1 || sh->extent[d] > e->shape[d] ||
                sh->offset[d] > e->shape[d] - sh->extent[d])
                return meta_error(r, line, "a shard's box lies outside its tensor");
            box *= sh->extent[d];
        }
        if (sh->lo < 0 || sh->hi <= sh->lo || sh->hi > box ||
            (uint64_t)sh->file_offset + (uint64_t)(sh->hi - sh->lo) * 4 > in->file_bytes[sh->file])
            return meta_error(r, line, "a shard's range lies outside its box or its file");
    }
    if (strtok_r(NULL, "\n", &save)) return meta_error(r, line + 1, "unexpected line before end");
#undef NEXT
    return TS_OK;
}

/* Groups the shards by tensor (a counting sort). */
static ts_status reader_index(ts_ckpt_reader *r) {
    ts_ckpt_info *in = &r->info;
    r->first = calloc((size_t)in->ntensors * TS_CKPT_ARRAYS + 1, sizeof *r->first);
    r->count = calloc((size_t)in->ntensors * TS_CKPT_ARRAYS, sizeof *r->count);
    r->order = malloc((size_t)(in->nshards ? in->nshards : 1) * sizeof *r->order);
    if (!r->first || !r->count || !r->order) return TS_ERR_NOMEM;
    for (int64_t i = 0; i < in->nshards; i++)
        r->count[in->shards[i].tensor * TS_CKPT_ARRAYS + in->shards[i].array]++;
    int64_t n = (int64_t)in->ntensors * TS_CKPT_ARRAYS;
    for (int64_t k = 0; k < n; k++)
        r->first[k + 1] = r->first[k] + r->count[k];
    memset(r->count, 0, (size_t)n * sizeof *r->count);
    for (int64_t i = 0; i < in->nshards; i++) {
        int64_t k = in->shards[i].tensor * TS_CKPT_ARRAYS + in->shards[i].array;
        r->order[r->first[k] + r->count[k]++] = i;
    }
    return TS_OK;
}

ts_status ts_ckpt_reader_open(const char *path, ts_ckpt_reader **out) {
    *out = NULL;
    if (!ts_ckpt_is_complete(path)) {
        char meta[4200];
        struct stat sb;
        snprintf(meta, sizeof meta, "%s/metadata", path);
        if (stat(path, &sb) != 0)
            return ts_error(TS_ERR_IO, "checkpoint %s: %s", path, strerror(errno));
        if (!S_ISDIR(sb.st_mode) || stat(meta, &sb) != 0)
            return ts_error(TS_ERR_FORMAT,
                            "checkpoint %s: not a checkpoint directory (no metadata, no COMPLETE "
                            "marker)",
                            path);
        return ts_error(TS_ERR_FORMAT,
                        "checkpoint %s: not a complete checkpoint directory (no COMPLETE marker: "
                        "its save was interrupted)",
                        path);
    }
    ts_ckpt_reader *r = calloc(1, sizeof *r);
    if (!r) return TS_ERR_NOMEM;
    snprintf(r->path, sizeof r->path, "%s", path);
    char meta[4200];
    snprintf(meta, sizeof meta, "%s/metadata", path);
    FILE *f;
    ts_status st = ts_file_open_read(meta, "checkpoint metadata", &f);
    if (!st) {
        struct stat sb;
        if (fstat(fileno(f), &sb) != 0 || sb.st_size > (1LL << 34))
            st = ts_error(TS_ERR_FORMAT, "checkpoint %s: metadata unreadable or too large", path);
        else if (!(r->text = malloc((size_t)sb.st_size + 1)))
            st = TS_ERR_NOMEM;
        else if (fread(r->text, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size)
            st = ts_error(TS_ERR_IO, "checkpoint %s: cannot read the metadata", path);
        else
            r->text[sb.st_size] = 0;
        fclose(f);
    }
    if (!st) st = reader_parse(r);
    if (!st) st = reader_index(r);
    for (int i = 0; !st && i < r->info.nfiles; i++) {
        char p[4200];
        struct stat sb;
        ts_ckpt_rank_file(path, i, p, sizeof p);
        if (stat(p, &sb) != 0)
            st = ts_error(TS_ERR_FORMAT, "checkpoint %s: shard file %s is missing", path, p);
        else if ((uint64_t)sb.st_size != r->info.file_bytes[i])
            st =
                ts_error(TS_ERR_FORMAT,
                         "checkpoint %s: shard file %s is %lld bytes, the metadata says %llu "
                         "(truncated or replaced)",
                         path, p, (long long)sb.st_size, (unsigned long long)r->info.file_bytes[i]);
    }
    if (st) {
        if (st == TS_ERR_NOMEM) ts_error(st, "checkpoint %s: out of memory", path);
        ts_ckpt_reader_close(r);
        return st;
    }
    *out = r;
    return TS_OK;
}

const ts_ckpt_info *ts_ckpt_reader_info(const ts_ckpt_reader *r) {
    return &r->info;
}

uint64_t ts_ckpt_reader_bytes_read(const ts_ckpt_reader *r) {
    return r->bytes_read;
}

void ts_ckpt_reader_close(ts_ckpt_reader *r) {
    if (!r) return;
    for (int i = 0; r->fds && i < r->info.nfiles; i++)
        if (r->fds[i] >= 0) close(r->fds[i]);
    free(r->fds);
    free(r->info.file_bytes);
    free(r->info.tensors);
    free(r->info.shards);
    free(r->first);
    free(r->count);
    free(r->order);
    free(r->text);
    free(r);
}

int ts_ckpt_reader_find(const ts_ckpt_reader *r, const char *name) {
    for (int i = 0; i < r->info.ntensors; i++)
        if (strcmp(r->info.tensors[i].name, name) == 0) return i;
    return -1;
}

/* A pending read: `n` elements at byte `off` of file `file` into `dst`;
 * consecutive rows merge into one. */
typedef struct pending {
    int64_t file, off, n;
    float *dst;
} pending;

static ts_status reader_flush(ts_ckpt_reader *r, pending *p) {
    if (p->n == 0) return TS_OK;
    int *fd = &r->fds[p->file];
    if (*fd < 0) {
        char path[4200];
        ts_ckpt_rank_file(r->path, (int)p->file, path, sizeof path);
        TS_TRY(ts_file_open_read_fd(path, "checkpoint shard", fd));
    }
    char *dst = (char *)p->dst;
    size_t left = (size_t)p->n * sizeof(float);
    off_t off = (off_t)p->off;
    while (left > 0) {
        ssize_t got = pread(*fd, dst, left, off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            return ts_error(TS_ERR_IO, "checkpoint %s: cannot read rank-%05d.bin at byte %lld: %s",
                            r->path, (int)p->file, (long long)off,
                            got < 0 ? strerror(errno) : "end of file");
        dst += got;
        off += got;
        r->bytes_read += (uint64_t)got;
        left -= (size_t)got;
    }
    p->n = 0;
    return TS_OK;
}

ts_status ts_ckpt_reader_read(ts_ckpt_reader *r, int tensor, int array, const int64_t offset[3],
                              const int64_t extent[3], int64_t lo, int64_t hi, float *dst) {
    const ts_ckpt_info *in = &r->info;
    int64_t k = (int64_t)tensor * TS_CKPT_ARRAYS + array, covered = 0;
    pending p = {0, 0, 0, NULL};
    for (int64_t j = r->first[k]; j < r->first[k + 1]; j++) {
        const ts_ckpt_shard *s = &in->shards[r->order[j]];
        int64_t io[3], ie[3]; /* the intersection of the two boxes */
        int empty = 0;
        for (int d = 0; d < 3; d++) {
            int64_t a = offset[d] > s->offset[d] ? offset[d] : s->offset[d];
            int64_t b0 = offset[d] + extent[d], b1 = s->offset[d] + s->extent[d];
            int64_t b = b0 < b1 ? b0 : b1;
            io[d] = a;
            ie[d] = b - a;
            if (ie[d] <= 0) empty = 1;
        }
        if (empty) continue;
        int64_t read_here = 0;
        float *first_dst = NULL;
        int merged = 1;
        for (int64_t i0 = 0; i0 < ie[0]; i0++)
            for (int64_t i1 = 0; i1 < ie[1]; i1++) {
                int64_t g0 = io[0] + i0, g1 = io[1] + i1, g2 = io[2];
                int64_t jt = ((g0 - offset[0]) * extent[1] + (g1 - offset[1])) * extent[2] +
                             (g2 - offset[2]);
                int64_t js =
                    ((g0 - s->offset[0]) * s->extent[1] + (g1 - s->offset[1])) * s->extent[2] +
                    (g2 - s->offset[2]);
                int64_t a = 0, b = ie[2];
                if (lo - jt > a) a = lo - jt;
                if (s->lo - js > a) a = s->lo - js;
                if (hi - jt < b) b = hi - jt;
                if (s->hi - js < b) b = s->hi - js;
                if (b <= a) continue;
                int64_t off = s->file_offset + (js + a - s->lo) * 4;
                float *d = dst + (jt + a - lo);
                if (p.n && p.file == s->file && p.off + p.n * 4 == off && p.dst + p.n == d) {
                    p.n += b - a;
                } else {
                    if (p.n) merged = 0;
                    TS_TRY(reader_flush(r, &p));
                    p = (pending){s->file, off, b - a, d};
                    if (!first_dst) first_dst = d;
                }
                read_here += b - a;
            }
        TS_TRY(reader_flush(r, &p));
        /* A shard read whole into one place is checked against its CRC. */
        if (read_here == s->hi - s->lo && merged && first_dst &&
            ts_crc32(0, first_dst, (size_t)read_here * 4) != (uint32_t)s->crc)
            return ts_error(TS_ERR_FORMAT,
                            "checkpoint %s: %s of %s in rank-%05d.bin: checksum mismatch "
                            "(corrupt file)",
                            r->path, ts_ckpt_array_name(array), in->tensors[tensor].name,
                            (int)s->file);
        covered += read_here;
    }
    if (covered != hi - lo)
        return ts_error(TS_ERR_FORMAT,
                        "checkpoint %s: the shards of %s (%s) cover %lld of the %lld elements "
                        "asked for",
                        r->path, in->tensors[tensor].name, ts_ckpt_array_name(array),
                        (long long)covered, (long long)(hi - lo));
    for (int64_t i = 0; i < hi - lo; i++)
        if (!isfinite(dst[i]))
            return ts_error(TS_ERR_FORMAT,
                            "checkpoint %s: holds a value that is not finite (%s of %s): it was "
                            "written by a run that diverged; resume from an earlier checkpoint",
                            r->path, ts_ckpt_array_name(array), in->tensors[tensor].name);
    return TS_OK;
}
