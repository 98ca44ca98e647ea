/*
 * trace.c — the trace recorder (trace.h): a fixed buffer of events per rank,
 * and the collective writer that ships every rank's events to rank 0, which
 * writes one Chrome trace-event JSON file atomically.
 *
 * Recording only copies into the preallocated buffer. Everything that costs
 * (sorting, lane assignment, formatting, allocation) happens in
 * ts_trace_write, once, at the end of a run. The file format is in
 * docs/trace.md.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, fileno, fsync */

#include <errno.h>    /* errno */
#include <fcntl.h>    /* open, O_DIRECTORY */
#include <libgen.h>   /* dirname */
#include <math.h>     /* llround, isfinite */
#include <stdio.h>    /* FILE, fprintf */
#include <stdlib.h>   /* malloc, calloc, realloc, qsort, free */
#include <string.h>   /* memcpy, strlen, strncmp, strerror */
#include <time.h>     /* clock_gettime */
#include <unistd.h>   /* fsync, close, unlink */
#include <sys/stat.h> /* fchmod */

#include "file.h" /* ts_file_output_path */
#include "trace.h"

/* One recorded event; shipped between ranks as raw bytes (same binary). */
typedef struct trace_event {
    double t0, t1; /* absolute CLOCK_MONOTONIC seconds (t1: spans only)   */
    double value;  /* counters                                            */
    int64_t step;  /* -1: none                                            */
    int32_t mb, stage, chunk;
    char ph;   /* 'X' span, 'i' instant, 'C' counter                     */
    char open; /* a span begun and not yet ended                          */
    char pad[2];
    char name[TS_TRACE_NAME_MAX];
    char cat[TS_TRACE_CAT_MAX];
} trace_event;
_Static_assert(sizeof(trace_event) == TS_TRACE_EVENT_BYTES, "trace_event layout");
_Static_assert(sizeof(trace_event) % 4 == 0, "events travel as i32 elements");

struct ts_trace {
    int rank;
    double epoch;
    int64_t step;
    size_t cap, n;
    uint64_t dropped;
    trace_event *ev; /* cap entries */
};

/* What a rank sends rank 0 before its events. */
typedef struct trace_header {
    int64_t rank, count;
    uint64_t dropped;
    double epoch;
} trace_header;
_Static_assert(sizeof(trace_header) % 4 == 0, "headers travel as i32 elements");

/* Events per message from a rank to rank 0 (6 MiB). */
#define TRACE_CHUNK ((size_t)1 << 16)
/* Lanes per category: overlapping, non-nested spans of one category. */
#define TRACE_LANES 16

/* --- recording -------------------------------------------------------------- */

double ts_trace_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

ts_status ts_trace_create(int rank, size_t max_events, ts_trace **out) {
    if (!out) return ts_error(TS_ERR_INVALID, "trace: ts_trace_create needs an output pointer");
    *out = NULL;
    if (rank < 0) return ts_error(TS_ERR_INVALID, "trace: rank %d is negative", rank);
    if (max_events == 0) max_events = TS_TRACE_DEFAULT_EVENTS;
    if (max_events > TS_TRACE_MAX_EVENTS)
        return ts_error(TS_ERR_INVALID, "trace: max_events %zu is above the limit %zu", max_events,
                        TS_TRACE_MAX_EVENTS);
    ts_trace *t = calloc(1, sizeof *t);
    trace_event *ev = calloc(max_events, sizeof *ev);
    if (!t || !ev) {
        free(t);
        free(ev);
        return ts_error(TS_ERR_NOMEM, "trace: cannot allocate %zu events (%zu bytes)", max_events,
                        max_events * sizeof *ev);
    }
    t->rank = rank;
    t->epoch = ts_trace_now();
    t->step = -1;
    t->cap = max_events;
    t->ev = ev;
    *out = t;
    return TS_OK;
}

void ts_trace_destroy(ts_trace *trace) {
    if (!trace) return;
    free(trace->ev);
    free(trace);
}

void ts_trace_set_epoch(ts_trace *trace, double t0) {
    if (trace) trace->epoch = t0;
}

double ts_trace_epoch(const ts_trace *trace) {
    return trace ? trace->epoch : 0.0;
}

ts_status ts_trace_sync_epoch(ts_trace *trace, ts_comm *world) {
    if (!trace) return TS_OK;
    if (world) TS_TRY(ts_comm_barrier(world));
    trace->epoch = ts_trace_now();
    return TS_OK;
}

void ts_trace_set_step(ts_trace *trace, int64_t step) {
    if (trace) trace->step = step < 0 ? -1 : step;
}

/* Copies at most cap-1 bytes of src, never cutting a UTF-8 character. */
static void copy_name(char *dst, size_t cap, const char *src) {
    size_t n = 0;
    while (n < cap && src[n])
        n++;
    if (n == cap) { /* too long: cut before the character that straddles */
        n = cap - 1;
        while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* The next free event, filled with the common fields, or NULL (counted). */
static trace_event *record(ts_trace *t, char ph, const char *name, const char *cat, int mb,
                           int stage, int chunk) {
    if (t->n == t->cap) {
        t->dropped++;
        return NULL;
    }
    trace_event *e = &t->ev[t->n++];
    e->ph = ph;
    e->open = 0;
    e->step = t->step;
    e->mb = mb < 0 ? -1 : mb;
    e->stage = stage < 0 ? -1 : stage;
    e->chunk = chunk < 0 ? -1 : chunk;
    e->value = 0.0;
    copy_name(e->name, sizeof e->name, name ? name : "?");
    copy_name(e->cat, sizeof e->cat, cat && cat[0] ? cat : "other");
    return e;
}

void ts_trace_span(ts_trace *trace, const char *name, const char *cat, double t_start_s,
                   double t_end_s, int mb, int stage, int chunk) {
    if (!trace) return;
    trace_event *e = record(trace, 'X', name, cat, mb, stage, chunk);
    if (!e) return;
    e->t0 = t_start_s;
    e->t1 = t_end_s < t_start_s ? t_start_s : t_end_s;
}

int64_t ts_trace_begin(ts_trace *trace, const char *name, const char *cat, int mb, int stage,
                       int chunk) {
    if (!trace) return -1;
    trace_event *e = record(trace, 'X', name, cat, mb, stage, chunk);
    if (!e) return -1;
    e->open = 1;
    e->t0 = e->t1 = ts_trace_now();
    return (int64_t)(e - trace->ev);
}

void ts_trace_end(ts_trace *trace, int64_t span) {
    if (!trace || span < 0 || (uint64_t)span >= trace->n) return;
    trace_event *e = &trace->ev[span];
    if (e->ph != 'X' || !e->open) return;
    e->t1 = ts_trace_now();
    if (e->t1 < e->t0) e->t1 = e->t0;
    e->open = 0;
}

void ts_trace_instant(ts_trace *trace, const char *name, const char *cat, double t_s, int mb,
                      int stage, int chunk) {
    if (!trace) return;
    trace_event *e = record(trace, 'i', name, cat, mb, stage, chunk);
    if (e) e->t0 = e->t1 = t_s;
}

void ts_trace_counter(ts_trace *trace, const char *name, double t_s, double value) {
    if (!trace || !isfinite(value)) return;
    trace_event *e = record(trace, 'C', name, "counter", -1, -1, -1);
    if (!e) return;
    e->t0 = e->t1 = t_s;
    e->value = value;
}

size_t ts_trace_count(const ts_trace *trace) {
    return trace ? trace->n : 0;
}
uint64_t ts_trace_dropped(const ts_trace *trace) {
    return trace ? trace->dropped : 0;
}

/* --- the JSON writer (rank 0) --------------------------------------------------- */

/* A span of one rank being placed: times in ns since its epoch. */
typedef struct trace_item {
    int64_t s, e;
    int32_t cat, ev, lane, pad;
} trace_item;

typedef struct trace_lane {
    int64_t *end; /* ends of the open enclosing spans, non-increasing */
    size_t n, cap;
} trace_lane;

typedef struct trace_writer {
    FILE *f;
    const char *tmp;
    int first; /* no event written yet (no comma before the next) */
    char (*cats)[TS_TRACE_CAT_MAX];
    int ncats, capcats;
    trace_lane lanes[TRACE_LANES];
    uint64_t written, open_spans;
} trace_writer;

static int64_t to_ns(double t, double epoch) {
    return (int64_t)llround((t - epoch) * 1e9);
}

/* ns as microseconds with three decimals, exactly (no float rounding). */
static void put_us(FILE *f, int64_t ns) {
    uint64_t a = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    fprintf(f, "%s%llu.%03llu", ns < 0 ? "-" : "", (unsigned long long)(a / 1000),
            (unsigned long long)(a % 1000));
}

/* A JSON string: escapes quotes, backslashes and control bytes; bytes that
 * are not valid UTF-8 become '?'. */
static void put_str(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', f);
    while (*p) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            fputc('\\', f);
            fputc((int)c, f);
            p++;
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
            p++;
        } else if (c < 0x80) {
            fputc((int)c, f);
            p++;
        } else {
            int len = c >= 0xC2 && c <= 0xDF   ? 2
                      : c >= 0xE0 && c <= 0xEF ? 3
                      : c >= 0xF0 && c <= 0xF4 ? 4
                                               : 0;
            int ok = len > 0;
            for (int k = 1; ok && k < len; k++)
                ok = (p[k] & 0xC0) == 0x80;
            if (ok) {
                fwrite(p, 1, (size_t)len, f);
                p += len;
            } else {
                fputc('?', f);
                p++;
            }
        }
    }
    fputc('"', f);
}

static void put_sep(trace_writer *w) {
    fputs(w->first ? "\n" : ",\n", w->f);
    w->first = 0;
}

/* The index of category `cat` in the file-wide table (added if new). */
static int cat_index(trace_writer *w, const char *cat) {
    for (int i = 0; i < w->ncats; i++)
        if (strncmp(w->cats[i], cat, TS_TRACE_CAT_MAX) == 0) return i;
    if (w->ncats == w->capcats) {
        int cap = w->capcats ? 2 * w->capcats : 16;
        void *p = realloc(w->cats, (size_t)cap * sizeof *w->cats);
        if (!p) return -1;
        w->cats = p;
        w->capcats = cap;
    }
    copy_name(w->cats[w->ncats], TS_TRACE_CAT_MAX, cat);
    return w->ncats++;
}

static int tid_of(int cat, int lane) {
    return cat * TRACE_LANES + lane;
}

static int item_cmp(const void *pa, const void *pb) {
    const trace_item *a = pa, *b = pb;
    if (a->cat != b->cat) return a->cat < b->cat ? -1 : 1;
    if (a->s != b->s) return a->s < b->s ? -1 : 1;
    if (a->e != b->e) return a->e > b->e ? -1 : 1; /* the enclosing span first */
    return a->ev < b->ev ? -1 : a->ev > b->ev;
}

/* Places the spans of one category (sorted by start) on lanes so that the
 * spans of each lane nest or are disjoint. */
static ts_status assign_lanes(trace_writer *w, trace_item *it, size_t n) {
    for (int l = 0; l < TRACE_LANES; l++)
        w->lanes[l].n = 0;
    for (size_t i = 0; i < n; i++) {
        int chosen = -1;
        for (int l = 0; l < TRACE_LANES && chosen < 0; l++) {
            trace_lane *ln = &w->lanes[l];
            while (ln->n && ln->end[ln->n - 1] <= it[i].s)
                ln->n--;
            if (!ln->n || ln->end[ln->n - 1] >= it[i].e) chosen = l;
        }
        if (chosen < 0) { /* every lane taken: misnested on the last one */
            it[i].lane = TRACE_LANES - 1;
            continue;
        }
        trace_lane *ln = &w->lanes[chosen];
        if (ln->n == ln->cap) {
            size_t cap = ln->cap ? 2 * ln->cap : 64;
            int64_t *p = realloc(ln->end, cap * sizeof *p);
            if (!p) return ts_error(TS_ERR_NOMEM, "trace: out of memory placing spans");
            ln->end = p;
            ln->cap = cap;
        }
        ln->end[ln->n++] = it[i].e;
        it[i].lane = chosen;
    }
    return TS_OK;
}

static void put_args(FILE *f, const trace_event *e) {
    int any = 0;
    const char *keys[4] = {"step", "mb", "stage", "chunk"};
    int64_t vals[4] = {e->step, e->mb, e->stage, e->chunk};
    for (int k = 0; k < 4; k++) {
        if (vals[k] < 0) continue;
        fprintf(f, "%s\"%s\":%lld", any ? "," : ",\"args\":{", keys[k], (long long)vals[k]);
        any = 1;
    }
    if (any) fputc('}', f);
}

/* Writes one rank's events: its metadata, spans on their lanes, instants and
 * counters. */
static ts_status write_rank(trace_writer *w, const trace_header *h, trace_event *ev) {
    FILE *f = w->f;
    long long pid = (long long)h->rank;
    size_t n = (size_t)h->count;
    put_sep(w);
    fprintf(f,
            "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%lld,\"tid\":0,"
            "\"args\":{\"name\":\"rank %lld\"}}",
            pid, pid);
    put_sep(w);
    fprintf(f,
            "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%lld,\"tid\":0,"
            "\"args\":{\"sort_index\":%lld}}",
            pid, pid);

    int *cat = malloc((n ? n : 1) * sizeof *cat);
    trace_item *it = malloc((n ? n : 1) * sizeof *it);
    if (!cat || !it) {
        free(cat);
        free(it);
        return ts_error(TS_ERR_NOMEM, "trace: out of memory writing %zu events of rank %lld", n,
                        pid);
    }
    size_t nit = 0;
    for (size_t i = 0; i < n; i++) {
        trace_event *e = &ev[i];
        e->name[TS_TRACE_NAME_MAX - 1] = e->cat[TS_TRACE_CAT_MAX - 1] = '\0';
        cat[i] = cat_index(w, e->cat);
        if (cat[i] < 0) {
            free(cat);
            free(it);
            return ts_error(TS_ERR_NOMEM, "trace: out of memory for categories");
        }
        if (e->ph != 'X') continue;
        if (e->open) {
            w->open_spans++;
            continue;
        }
        it[nit++] =
            (trace_item){to_ns(e->t0, h->epoch), to_ns(e->t1, h->epoch), cat[i], (int32_t)i, 0, 0};
    }
    qsort(it, nit, sizeof *it, item_cmp);
    ts_status st = TS_OK;
    for (size_t a = 0, b; a < nit && !st; a = b) {
        for (b = a; b < nit && it[b].cat == it[a].cat; b++) {
        }
        st = assign_lanes(w, it + a, b - a);
    }
    unsigned char *used = st ? NULL : calloc((size_t)w->ncats * TRACE_LANES, 1);
    if (!st && !used) st = ts_error(TS_ERR_NOMEM, "trace: out of memory writing rank %lld", pid);
    if (st) {
        free(cat);
        free(it);
        return st;
    }

    for (size_t k = 0; k < nit; k++) {
        const trace_event *e = &ev[it[k].ev];
        used[it[k].cat * TRACE_LANES + it[k].lane] = 1;
        put_sep(w);
        fputs("{\"name\":", f);
        put_str(f, e->name);
        fputs(",\"cat\":", f);
        put_str(f, e->cat);
        fprintf(f, ",\"ph\":\"X\",\"pid\":%lld,\"tid\":%d,\"ts\":", pid,
                tid_of(it[k].cat, it[k].lane));
        put_us(f, it[k].s);
        fputs(",\"dur\":", f);
        put_us(f, it[k].e - it[k].s);
        put_args(f, e);
        fputc('}', f);
        w->written++;
    }
    for (size_t i = 0; i < n; i++) {
        const trace_event *e = &ev[i];
        if (e->ph == 'X') continue;
        put_sep(w);
        fputs("{\"name\":", f);
        put_str(f, e->name);
        if (e->ph == 'i') {
            used[cat[i] * TRACE_LANES] = 1;
            fputs(",\"cat\":", f);
            put_str(f, e->cat);
            fprintf(f, ",\"ph\":\"i\",\"s\":\"t\",\"pid\":%lld,\"tid\":%d,\"ts\":", pid,
                    tid_of(cat[i], 0));
            put_us(f, to_ns(e->t0, h->epoch));
            put_args(f, e);
        } else {
            fprintf(f, ",\"ph\":\"C\",\"pid\":%lld,\"tid\":0,\"ts\":", pid);
            put_us(f, to_ns(e->t0, h->epoch));
            fprintf(f, ",\"args\":{\"value\":%.17g}", e->value);
        }
        fputc('}', f);
        w->written++;
    }
    for (int c = 0; c < w->ncats; c++)
        for (int l = 0; l < TRACE_LANES; l++) {
            if (!used[c * TRACE_LANES + l]) continue;
            put_sep(w);
            fprintf(f,
                    "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%lld,\"tid\":%d,\"args\":{"
                    "\"name\":",
                    pid, tid_of(c, l));
            if (l == 0) {
                put_str(f, w->cats[c]);
            } else {
                char label[TS_TRACE_CAT_MAX + 16];
                snprintf(label, sizeof label, "%s #%d", w->cats[c], l + 1);
                put_str(f, label);
            }
            fputs("}}", f);
            put_sep(w);
            fprintf(f,
                    "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%lld,\"tid\":%d,"
                    "\"args\":{\"sort_index\":%d}}",
                    pid, tid_of(c, l), tid_of(c, l));
        }
    free(used);
    free(cat);
    free(it);
    return TS_OK;
}

/* The closing part: otherData with the totals and per-rank counts. */
static void write_tail(trace_writer *w, int nranks, const uint64_t *counts,
                       const uint64_t *dropped) {
    FILE *f = w->f;
    uint64_t total_dropped = 0;
    for (int r = 0; r < nranks; r++)
        total_dropped += dropped[r];
    fprintf(f,
            "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{\"producer\":\"tessera\","
            "\"format_version\":1,\"time\":\"microseconds since each rank's epoch "
            "(CLOCK_MONOTONIC, aligned at a barrier)\",\"ranks\":%d,\"events\":%llu,"
            "\"dropped_events\":%llu,\"open_spans\":%llu,\"events_per_rank\":[",
            nranks, (unsigned long long)w->written, (unsigned long long)total_dropped,
            (unsigned long long)w->open_spans);
    for (int r = 0; r < nranks; r++)
        fprintf(f, "%s%llu", r ? "," : "", (unsigned long long)counts[r]);
    fputs("],\"dropped_per_rank\":[", f);
    for (int r = 0; r < nranks; r++)
        fprintf(f, "%s%llu", r ? "," : "", (unsigned long long)dropped[r]);
    fputs("]}}\n", f);
}

/* Flushes, syncs and renames the temporary file into place. */
static ts_status finish_file(trace_writer *w, const char *path) {
    ts_status st = TS_OK;
    if (fflush(w->f) != 0 || ferror(w->f))
        st = ts_error(TS_ERR_IO, "trace: %s: write failed: %s", w->tmp, strerror(errno));
    if (!st && fsync(fileno(w->f)) != 0)
        st = ts_error(TS_ERR_IO, "trace: %s: fsync failed: %s", w->tmp, strerror(errno));
    if (fclose(w->f) != 0 && !st)
        st = ts_error(TS_ERR_IO, "trace: %s: close failed: %s", w->tmp, strerror(errno));
    w->f = NULL;
    if (!st && rename(w->tmp, path) != 0)
        st = ts_error(TS_ERR_IO, "trace: %s: rename to %s failed: %s", w->tmp, path,
                      strerror(errno));
    if (st) {
        unlink(w->tmp);
        return st;
    }
    char *dir = malloc(strlen(path) + 1);
    if (dir) {
        memcpy(dir, path, strlen(path) + 1);
        int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY);
        if (dfd >= 0) {
            fsync(dfd);
            close(dfd);
        }
        free(dir);
    }
    return TS_OK;
}

/* --- the collective write ------------------------------------------------------- */

static ts_status send_events(ts_trace *t, ts_comm *world) {
    trace_header h = {t->rank, (int64_t)t->n, t->dropped, t->epoch};
    TS_TRY(ts_comm_send(world, &h, sizeof h / 4, TS_I32, 0, TS_TRACE_TAG));
    for (size_t at = 0; at < t->n; at += TRACE_CHUNK) {
        size_t k = t->n - at < TRACE_CHUNK ? t->n - at : TRACE_CHUNK;
        TS_TRY(
            ts_comm_send(world, t->ev + at, k * sizeof(trace_event) / 4, TS_I32, 0, TS_TRACE_TAG));
    }
    return TS_OK;
}

/* Receives rank r's header and events; on a local failure (memory) keeps
 * receiving into `scratch` so that the sender is not left hanging, and
 * reports the failure in *local. */
static ts_status recv_events(ts_comm *world, int r, trace_header *h, trace_event **buf, size_t *cap,
                             trace_event *scratch, ts_status *local) {
    TS_TRY(ts_comm_recv(world, h, sizeof *h / 4, TS_I32, r, TS_TRACE_TAG));
    if (h->count < 0 || (uint64_t)h->count > TS_TRACE_MAX_EVENTS)
        return ts_error(TS_ERR_COMM, "trace: rank %d announced %lld events", r,
                        (long long)h->count);
    size_t n = (size_t)h->count;
    if (!*local && n > *cap) {
        trace_event *p = realloc(*buf, n * sizeof *p);
        if (p) {
            *buf = p;
            *cap = n;
        } else {
            *local = ts_error(TS_ERR_NOMEM, "trace: cannot hold the %zu events of rank %d", n, r);
        }
    }
    for (size_t at = 0; at < n; at += TRACE_CHUNK) {
        size_t k = n - at < TRACE_CHUNK ? n - at : TRACE_CHUNK;
        trace_event *dst = *local ? scratch : *buf + at;
        TS_TRY(ts_comm_recv(world, dst, k * sizeof(trace_event) / 4, TS_I32, r, TS_TRACE_TAG));
    }
    return TS_OK;
}

/* Rank 0's part once the file is open. */
static ts_status write_all_ranks(ts_trace *t, ts_comm *world, int size, trace_writer *w,
                                 const char *path) {
    uint64_t *counts = calloc((size_t)size, sizeof *counts);
    uint64_t *dropped = calloc((size_t)size, sizeof *dropped);
    trace_event *scratch = size > 1 ? malloc(TRACE_CHUNK * sizeof *scratch) : NULL;
    trace_event *buf = NULL;
    size_t cap = 0;
    ts_status st = TS_OK; /* local failure: keep draining the senders */
    if (!counts || !dropped || (size > 1 && !scratch))
        st = ts_error(TS_ERR_NOMEM, "trace: out of memory writing %s", path);
    /* Without scratch space the senders cannot be drained: give up now. */
    if (st && size > 1 && !scratch) {
        free(counts);
        free(dropped);
        return st;
    }

    fputs("{\"traceEvents\":[", w->f);
    trace_header mine = {t->rank, (int64_t)t->n, t->dropped, t->epoch};
    if (!st) {
        counts[0] = t->n;
        dropped[0] = t->dropped;
        st = write_rank(w, &mine, t->ev);
    }
    ts_status comm_st = TS_OK;
    for (int r = 1; r < size && !comm_st; r++) {
        trace_header h;
        comm_st = recv_events(world, r, &h, &buf, &cap, scratch, &st);
        if (comm_st || st) continue;
        counts[r] = (uint64_t)h.count;
        dropped[r] = h.dropped;
        st = write_rank(w, &h, buf);
    }
    if (!st && !comm_st) write_tail(w, size, counts, dropped);
    free(counts);
    free(dropped);
    free(scratch);
    free(buf);
    return comm_st ? comm_st : st;
}

ts_status ts_trace_write(ts_trace *trace, ts_comm *world, const char *path) {
    if (!trace) return TS_OK;
    int rank = world ? ts_comm_rank(world) : 0;
    int size = world ? ts_comm_size(world) : 1;
    int32_t flag = 0;

    if (rank != 0) { /* send to rank 0, learn the outcome */
        TS_TRY(ts_comm_broadcast(world, &flag, 1, TS_I32, 0));
        if (flag)
            return ts_error((ts_status)flag, "trace: rank 0 could not create the trace file (%s)",
                            ts_status_name((ts_status)flag));
        TS_TRY(send_events(trace, world));
        TS_TRY(ts_comm_broadcast(world, &flag, 1, TS_I32, 0));
        if (flag)
            return ts_error((ts_status)flag, "trace: rank 0 could not write the trace file (%s)",
                            ts_status_name((ts_status)flag));
        return TS_OK;
    }

    trace_writer w = {.first = 1};
    ts_status st = TS_OK;
    char *tmp = NULL, final[4096];
    if (!path || !path[0]) {
        st = ts_error(TS_ERR_INVALID, "trace: no file name given to ts_trace_write");
    } else if ((st = ts_file_output_path(path, "trace", final, sizeof final)) != TS_OK) {
        /* not a file we may replace */
    } else if (!(tmp = malloc(strlen(final) + 12))) {
        st = ts_error(TS_ERR_NOMEM, "trace: out of memory");
    } else {
        /* A unique temporary name: two runs never write into one. */
        sprintf(tmp, "%s.tmp.XXXXXX", final);
        w.tmp = tmp;
        int fd = mkstemp(tmp);
        if (fd >= 0 && (fchmod(fd, 0644) != 0 || !(w.f = fdopen(fd, "w")))) {
            close(fd);
            unlink(tmp);
        }
        if (!w.f)
            st = ts_error(TS_ERR_IO, "trace: %s: cannot create: %s", tmp, strerror(errno));
        else
            setvbuf(w.f, NULL, _IOFBF, 1 << 20);
    }
    /* The core's categories first, so that their tracks come in this order. */
    const char *known[] = {TS_TRACE_CAT_STEP, TS_TRACE_CAT_COMPUTE, TS_TRACE_CAT_P2P,
                           TS_TRACE_CAT_COLLECTIVE};
    for (int k = 0; k < 4 && !st; k++)
        if (cat_index(&w, known[k]) < 0) st = ts_error(TS_ERR_NOMEM, "trace: out of memory");
    flag = (int32_t)st;
    if (size > 1) {
        ts_status bst = ts_comm_broadcast(world, &flag, 1, TS_I32, 0);
        if (bst && !st) st = bst;
    }
    if (!st) {
        st = write_all_ranks(trace, world, size, &w, path);
        if (!st) {
            st = finish_file(&w, final);
        } else {
            fclose(w.f);
            unlink(tmp);
        }
        flag = (int32_t)st;
        if (size > 1 && st != TS_ERR_COMM) {
            ts_status bst = ts_comm_broadcast(world, &flag, 1, TS_I32, 0);
            if (bst && !st) st = bst;
        }
    } else if (w.f) {
        fclose(w.f);
        unlink(tmp);
    }
    free(tmp);
    free(w.cats);
    for (int l = 0; l < TRACE_LANES; l++)
        free(w.lanes[l].end);
    return st;
}
