/*
 * test_trace.c — the trace recorder (core/train/trace.c).
 *
 *   test_trace          unit tests, no MPI: spans, their times and args, name
 *                       copies, overflow counting, open spans, lanes for
 *                       overlapping spans, instants and counters, write
 *                       failures, NULL-trace no-ops, a size-1 communicator.
 *   test_trace --mpi    under mpiexec: every rank records the spans of a small
 *                       pipeline-like step around real transfers, the ranks
 *                       write one file collectively, and rank 0 checks that it
 *                       holds spans of every rank with their args; a failing
 *                       write fails on every rank alike.
 *
 * Every file written is read back with the small strict JSON parser below
 * (and, when python3 is on PATH, with Python's json module as well) and checked
 * for what the viewers need: a traceEvents array, one named process per rank,
 * and spans that nest properly on every thread track.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */

#include <math.h>   /* fabs, NAN */
#include <stdio.h>  /* printf, fopen */
#include <stdlib.h> /* malloc, free, system */
#include <string.h> /* strcmp, strlen, strstr */
#include <unistd.h> /* access, unlink, rmdir */

#include "tessera/comm.h" /* ts_comm_world_init, send/recv, all_reduce */
#include "trace.h"

static int failures;
static int my_rank;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "[rank %d] %s:%d: CHECK failed: %s\n", my_rank, __FILE__, __LINE__,    \
                    #cond);                                                                        \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* --- a small strict JSON parser ------------------------------------------------ */

typedef enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
    jtype t;
    double num;         /* J_NUM, J_BOOL                       */
    char *str;          /* J_STR                               */
    int n;              /* J_ARR, J_OBJ: items                 */
    struct jval *items; /* J_ARR, J_OBJ                        */
    char **keys;        /* J_OBJ                               */
} jval;

typedef struct jparser {
    const char *p, *end;
    const char *err;
} jparser;

static void jskip(jparser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t'))
        ps->p++;
}

static int jfail(jparser *ps, const char *why) {
    if (!ps->err) ps->err = why;
    return 0;
}

static void put_utf8(char *out, size_t *n, unsigned cp) {
    if (cp < 0x80) {
        out[(*n)++] = (char)cp;
    } else if (cp < 0x800) {
        out[(*n)++] = (char)(0xC0 | (cp >> 6));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out[(*n)++] = (char)(0xE0 | (cp >> 12));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        out[(*n)++] = (char)(0xF0 | (cp >> 18));
        out[(*n)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        out[(*n)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[(*n)++] = (char)(0x80 | (cp & 0x3F));
    }
}

static int jhex4(jparser *ps, unsigned *cp) {
    if (ps->end - ps->p < 4) return jfail(ps, "short \\u escape");
    *cp = 0;
    for (int k = 0; k < 4; k++) {
        char c = *ps->p++;
        unsigned d = c >= '0' && c <= '9'   ? (unsigned)(c - '0')
                     : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                     : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10)
                                            : 16u;
        if (d == 16) return jfail(ps, "bad hex digit");
        *cp = *cp * 16 + d;
    }
    return 1;
}

static int jstring(jparser *ps, char **out) {
    if (ps->p >= ps->end || *ps->p != '"') return jfail(ps, "expected a string");
    ps->p++;
    char *buf = malloc((size_t)(ps->end - ps->p) + 1);
    size_t n = 0;
    while (1) {
        if (ps->p >= ps->end) {
            free(buf);
            return jfail(ps, "unterminated string");
        }
        unsigned char c = (unsigned char)*ps->p++;
        if (c == '"') break;
        if (c < 0x20) {
            free(buf);
            return jfail(ps, "raw control character in a string");
        }
        if (c != '\\') {
            buf[n++] = (char)c;
            continue;
        }
        if (ps->p >= ps->end) break;
        char e = *ps->p++;
        unsigned cp;
        switch (e) {
        case '"': buf[n++] = '"'; break;
        case '\\': buf[n++] = '\\'; break;
        case '/': buf[n++] = '/'; break;
        case 'b': buf[n++] = '\b'; break;
        case 'f': buf[n++] = '\f'; break;
        case 'n': buf[n++] = '\n'; break;
        case 'r': buf[n++] = '\r'; break;
        case 't': buf[n++] = '\t'; break;
        case 'u':
            if (!jhex4(ps, &cp)) {
                free(buf);
                return 0;
            }
            put_utf8(buf, &n, cp); /* surrogate pairs are not produced by the writer */
            break;
        default: free(buf); return jfail(ps, "bad escape");
        }
    }
    buf[n] = '\0';
    *out = buf;
    return 1;
}

static int jnumber(jparser *ps, double *out) {
    const char *s = ps->p;
    if (ps->p < ps->end && *ps->p == '-') ps->p++;
    if (ps->p >= ps->end) return jfail(ps, "bad number");
    if (*ps->p == '0') {
        ps->p++;
    } else if (*ps->p >= '1' && *ps->p <= '9') {
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    } else {
        return jfail(ps, "bad number");
    }
    if (ps->p < ps->end && *ps->p == '.') {
        ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return jfail(ps, "bad fraction");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return jfail(ps, "bad exponent");
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9')
            ps->p++;
    }
    char tmp[64];
    size_t len = (size_t)(ps->p - s);
    if (len >= sizeof tmp) return jfail(ps, "number too long");
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    *out = strtod(tmp, NULL);
    return 1;
}

static int jvalue(jparser *ps, jval *v, int depth);

static int jpush(jval *v, int *cap) {
    if (v->n == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        v->items = realloc(v->items, (size_t)*cap * sizeof *v->items);
        if (v->t == J_OBJ) v->keys = realloc(v->keys, (size_t)*cap * sizeof *v->keys);
    }
    memset(&v->items[v->n], 0, sizeof v->items[v->n]);
    return v->n++;
}

static int jliteral(jparser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || strncmp(ps->p, word, n) != 0)
        return jfail(ps, "bad literal");
    ps->p += n;
    return 1;
}

static int jvalue(jparser *ps, jval *v, int depth) {
    memset(v, 0, sizeof *v);
    if (depth > 64) return jfail(ps, "nested too deeply");
    jskip(ps);
    if (ps->p >= ps->end) return jfail(ps, "unexpected end");
    char c = *ps->p;
    int cap = 0;
    if (c == '{' || c == '[') {
        v->t = c == '{' ? J_OBJ : J_ARR;
        char close = c == '{' ? '}' : ']';
        ps->p++;
        jskip(ps);
        if (ps->p < ps->end && *ps->p == close) {
            ps->p++;
            return 1;
        }
        while (1) {
            int i = jpush(v, &cap);
            if (v->t == J_OBJ) {
                jskip(ps);
                if (!jstring(ps, &v->keys[i])) return 0;
                jskip(ps);
                if (ps->p >= ps->end || *ps->p != ':') return jfail(ps, "expected ':'");
                ps->p++;
            }
            if (!jvalue(ps, &v->items[i], depth + 1)) return 0;
            jskip(ps);
            if (ps->p < ps->end && *ps->p == ',') {
                ps->p++;
                continue;
            }
            if (ps->p < ps->end && *ps->p == close) {
                ps->p++;
                return 1;
            }
            return jfail(ps, "expected ',' or a closing bracket");
        }
    }
    if (c == '"') {
        v->t = J_STR;
        return jstring(ps, &v->str);
    }
    if (c == 't' || c == 'f') {
        v->t = J_BOOL;
        v->num = c == 't';
        return jliteral(ps, c == 't' ? "true" : "false");
    }
    if (c == 'n') {
        v->t = J_NULL;
        return jliteral(ps, "null");
    }
    v->t = J_NUM;
    return jnumber(ps, &v->num);
}

static void jfree(jval *v) {
    for (int i = 0; i < v->n; i++) {
        jfree(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->str);
}

static const jval *jget(const jval *o, const char *key) {
    if (!o || o->t != J_OBJ) return NULL;
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->keys[i], key) == 0) return &o->items[i];
    return NULL;
}
static double jnum(const jval *o, const char *key, double dflt) {
    const jval *v = jget(o, key);
    return v && v->t == J_NUM ? v->num : dflt;
}
static const char *jstr(const jval *o, const char *key) {
    const jval *v = jget(o, key);
    return v && v->t == J_STR ? v->str : "";
}

/* Reads and parses `path`; 0 (and a CHECK failure) if it is not valid JSON. */
static int load_json(const char *path, jval *root) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        failures++;
        return 0;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)size + 1);
    size_t got = fread(text, 1, (size_t)size, f);
    fclose(f);
    jparser ps = {text, text + got, NULL};
    int ok = jvalue(&ps, root, 0);
    jskip(&ps);
    if (ok && ps.p != ps.end) ok = jfail(&ps, "trailing characters");
    if (!ok) {
        fprintf(stderr, "%s: invalid JSON at byte %ld: %s\n", path, (long)(ps.p - text), ps.err);
        failures++;
        jfree(root);
        memset(root, 0, sizeof *root);
    }
    free(text);
    return ok;
}

/* Python's json module, when there is a python3 (CI has one). */
static void python_check(const char *path) {
    if (system("command -v python3 >/dev/null 2>&1") != 0) {
        printf("  (python3 not found: cross-check skipped)\n");
        return;
    }
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import json,sys; d=json.load(open(sys.argv[1],encoding=\"utf-8\")); "
             "assert isinstance(d[\"traceEvents\"],list) and d[\"displayTimeUnit\"]==\"ms\"' '%s'",
             path);
    CHECK(system(cmd) == 0);
}

/* --- checks on a parsed trace ---------------------------------------------------- */

static const jval *events_of(const jval *root) {
    const jval *ev = jget(root, "traceEvents");
    CHECK(ev && ev->t == J_ARR);
    return ev && ev->t == J_ARR ? ev : NULL;
}

/* The first event with this ph, pid and name (NULL if none). */
static const jval *find_event(const jval *root, const char *ph, int pid, const char *name) {
    const jval *ev = events_of(root);
    for (int i = 0; ev && i < ev->n; i++) {
        const jval *e = &ev->items[i];
        if (strcmp(jstr(e, "ph"), ph) == 0 && jnum(e, "pid", -1) == pid &&
            strcmp(jstr(e, "name"), name) == 0)
            return e;
    }
    return NULL;
}

static int count_events(const jval *root, const char *ph, int pid) {
    const jval *ev = events_of(root);
    int n = 0;
    for (int i = 0; ev && i < ev->n; i++)
        if (strcmp(jstr(&ev->items[i], "ph"), ph) == 0 && jnum(&ev->items[i], "pid", -1) == pid)
            n++;
    return n;
}

/* The name a "M" thread_name event gives (pid, tid), or "". */
static const char *thread_name(const jval *root, int pid, int tid) {
    const jval *ev = events_of(root);
    for (int i = 0; ev && i < ev->n; i++) {
        const jval *e = &ev->items[i];
        if (strcmp(jstr(e, "ph"), "M") == 0 && strcmp(jstr(e, "name"), "thread_name") == 0 &&
            jnum(e, "pid", -1) == pid && jnum(e, "tid", -1) == tid)
            return jstr(jget(e, "args"), "name");
    }
    return "";
}

typedef struct span_ref {
    double pid, tid, s, e;
} span_ref;

static int span_cmp(const void *pa, const void *pb) {
    const span_ref *a = pa, *b = pb;
    if (a->pid != b->pid) return a->pid < b->pid ? -1 : 1;
    if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
    if (a->s != b->s) return a->s < b->s ? -1 : 1;
    return a->e > b->e ? -1 : a->e < b->e;
}

/* Every span has the required fields, every process with spans is named,
 * and on each (pid, tid) track spans nest or are disjoint. */
static void check_well_formed(const jval *root) {
    CHECK(strcmp(jstr(root, "displayTimeUnit"), "ms") == 0);
    CHECK(jget(root, "otherData") && jget(root, "otherData")->t == J_OBJ);
    const jval *ev = events_of(root);
    if (!ev) return;
    span_ref *sp = malloc(((size_t)ev->n + 1) * sizeof *sp);
    int n = 0;
    for (int i = 0; i < ev->n; i++) {
        const jval *e = &ev->items[i];
        CHECK(e->t == J_OBJ);
        CHECK(jget(e, "ph") && jget(e, "pid") && jget(e, "name"));
        if (strcmp(jstr(e, "ph"), "X") != 0) continue;
        CHECK(jget(e, "tid") && jget(e, "ts") && jget(e, "dur") && jget(e, "cat"));
        CHECK(jnum(e, "dur", -1) >= 0);
        int pid = (int)jnum(e, "pid", -1);
        const jval *pn = NULL;
        for (int k = 0; k < ev->n && !pn; k++) {
            const jval *m = &ev->items[k];
            if (strcmp(jstr(m, "ph"), "M") == 0 && strcmp(jstr(m, "name"), "process_name") == 0 &&
                jnum(m, "pid", -2) == pid)
                pn = m;
        }
        CHECK(pn != NULL);
        CHECK(thread_name(root, pid, (int)jnum(e, "tid", -1))[0] != '\0');
        /* Exactly what the viewer computes: ts and ts + dur, in ns. */
        double s = floor(jnum(e, "ts", 0) * 1000 + 0.5);
        sp[n++] = (span_ref){pid, jnum(e, "tid", 0), s, s + floor(jnum(e, "dur", 0) * 1000 + 0.5)};
    }
    qsort(sp, (size_t)n, sizeof *sp, span_cmp);
    double stack[256];
    int depth = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || sp[i].pid != sp[i - 1].pid || sp[i].tid != sp[i - 1].tid) depth = 0;
        while (depth && stack[depth - 1] <= sp[i].s)
            depth--;
        if (depth) CHECK(sp[i].e <= stack[depth - 1]); /* nests in the enclosing span */
        if (depth < 256) stack[depth++] = sp[i].e;
    }
    free(sp);
}

/* --- unit tests ------------------------------------------------------------------- */

static char tmpdir[256];

/* A path in the test's directory (4 rotating buffers: several may be live). */
static const char *tmp_path(const char *name) {
    static char buf[4][512];
    static int next;
    char *b = buf[next++ % 4];
    snprintf(b, sizeof buf[0], "%s/%s", tmpdir, name);
    return b;
}

static int file_exists(const char *path) {
    return access(path, F_OK) == 0;
}

static void test_null_trace_is_noop(void) {
    ts_trace *t = NULL;
    ts_trace_set_epoch(t, 5.0);
    ts_trace_set_step(t, 3);
    ts_trace_span(t, "forward", TS_TRACE_CAT_COMPUTE, 0.0, 1.0, 0, 0, 0);
    CHECK(ts_trace_begin(t, "x", "y", 0, 0, 0) == -1);
    ts_trace_end(t, 0);
    ts_trace_end(t, -1);
    ts_trace_instant(t, "i", "c", 0.0, -1, -1, -1);
    ts_trace_counter(t, "loss", 0.0, 1.0);
    CHECK(ts_trace_count(t) == 0 && ts_trace_dropped(t) == 0 && ts_trace_epoch(t) == 0.0);
    CHECK(ts_trace_sync_epoch(t, NULL) == TS_OK);
    const char *path = tmp_path("null.json");
    CHECK(ts_trace_write(t, NULL, path) == TS_OK);
    CHECK(!file_exists(path));
    ts_trace_destroy(NULL);
}

static void test_create_rejects_bad_arguments(void) {
    ts_trace *t = (ts_trace *)&t;
    CHECK(ts_trace_create(-1, 10, &t) == TS_ERR_INVALID && t == NULL);
    CHECK(strstr(ts_last_error(), "rank -1") != NULL);
    CHECK(ts_trace_create(0, TS_TRACE_MAX_EVENTS + 1, &t) == TS_ERR_INVALID && t == NULL);
    CHECK(ts_trace_create(0, 10, NULL) == TS_ERR_INVALID);
    CHECK(ts_trace_create(0, 0, &t) == TS_OK && t != NULL); /* 0: the default size */
    for (size_t i = 0; i < TS_TRACE_DEFAULT_EVENTS + 3; i++)
        ts_trace_span(t, "s", "c", 1.0, 2.0, -1, -1, -1);
    CHECK(ts_trace_count(t) == TS_TRACE_DEFAULT_EVENTS && ts_trace_dropped(t) == 3);
    ts_trace_destroy(t);
}

static void test_spans_carry_times_and_args(void) {
    ts_trace *t = NULL;
    CHECK(ts_trace_create(3, 64, &t) == TS_OK);
    ts_trace_set_epoch(t, 100.0);
    CHECK(ts_trace_epoch(t) == 100.0);
    ts_trace_span(t, "forward", TS_TRACE_CAT_COMPUTE, 100.001, 100.002, 1, 0, -1);
    ts_trace_set_step(t, 7);
    ts_trace_span(t, "backward", TS_TRACE_CAT_COMPUTE, 100.003, 100.0035, 1, 2, 1);
    ts_trace_span(t, "all_reduce", TS_TRACE_CAT_COLLECTIVE, 100.004, 100.003, -1, -1, -1);
    CHECK(ts_trace_count(t) == 3);
    const char *path = tmp_path("spans.json");
    CHECK(ts_trace_write(t, NULL, path) == TS_OK);
    CHECK(!file_exists(tmp_path("spans.json.tmp")));
    jval root;
    if (load_json(path, &root)) {
        check_well_formed(&root);
        python_check(path);
        const jval *pn = find_event(&root, "M", 3, "process_name");
        CHECK(pn && strcmp(jstr(jget(pn, "args"), "name"), "rank 3") == 0);
        CHECK(count_events(&root, "X", 3) == 3);
        const jval *f = find_event(&root, "X", 3, "forward");
        CHECK(f && strcmp(jstr(f, "cat"), "compute") == 0);
        CHECK(f && fabs(jnum(f, "ts", 0) - 1000.0) < 1e-9 &&
              fabs(jnum(f, "dur", 0) - 1000.0) < 1e-9);
        const jval *fa = f ? jget(f, "args") : NULL;
        CHECK(jnum(fa, "mb", -1) == 1 && jnum(fa, "stage", -1) == 0);
        CHECK(!jget(fa, "chunk") && !jget(fa, "step")); /* -1: left out */
        CHECK(f && strcmp(thread_name(&root, 3, (int)jnum(f, "tid", -1)), "compute") == 0);
        const jval *b = find_event(&root, "X", 3, "backward");
        const jval *ba = b ? jget(b, "args") : NULL;
        CHECK(b && fabs(jnum(b, "ts", 0) - 3000.0) < 1e-9 &&
              fabs(jnum(b, "dur", 0) - 500.0) < 1e-9);
        CHECK(jnum(ba, "step", -1) == 7 && jnum(ba, "mb", -1) == 1 && jnum(ba, "stage", -1) == 2 &&
              jnum(ba, "chunk", -1) == 1);
        CHECK(b && f && jnum(b, "tid", -1) == jnum(f, "tid", -2));
        const jval *ar = find_event(&root, "X", 3, "all_reduce");
        CHECK(ar && jnum(ar, "dur", -1) == 0.0); /* ended before it started: zero length */
        CHECK(ar && jnum(ar, "tid", -1) != jnum(f, "tid", -1));
        const jval *ara = ar ? jget(ar, "args") : NULL;
        CHECK(ara && ara->n == 1 && jnum(ara, "step", -1) == 7); /* mb, stage, chunk -1 */
        const jval *od = jget(&root, "otherData");
        CHECK(jnum(od, "events", -1) == 3 && jnum(od, "dropped_events", -1) == 0);
        CHECK(jnum(od, "ranks", -1) == 1 && jnum(od, "open_spans", -1) == 0);
        jfree(&root);
    }
    /* A second write replaces the file and writes the same events again. */
    ts_trace_span(t, "optimizer_step", TS_TRACE_CAT_COMPUTE, 100.005, 100.006, -1, -1, -1);
    CHECK(ts_trace_write(t, NULL, path) == TS_OK);
    if (load_json(path, &root)) {
        CHECK(count_events(&root, "X", 3) == 4);
        jfree(&root);
    }
    unlink(path);
    ts_trace_destroy(t);
}

static void test_names_are_copied_cut_and_escaped(void) {
    ts_trace *t = NULL;
    CHECK(ts_trace_create(0, 16, &t) == TS_OK);
    ts_trace_set_epoch(t, 0.0);
    char name[64];
    strcpy(name, "say \"hi\"\\\n\tok");
    ts_trace_span(t, name, "my cat", 1.0, 2.0, -1, -1, -1);
    strcpy(name, "overwritten");
    ts_trace_span(t, "0123456789012345678901234567890123456789", "a-category-that-is-long", 1.0,
                  2.0, -1, -1, -1);
    /* 30 ASCII bytes then a 2-byte character that would straddle the cut. */
    ts_trace_span(t, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\xc3\xa9", "c", 1.0, 2.0, -1, -1, -1);
    ts_trace_span(t, "bad \xff byte", "c", 1.0, 2.0, -1, -1, -1);
    ts_trace_span(t, NULL, NULL, 1.0, 2.0, -1, -1, -1);
    const char *path = tmp_path("names.json");
    CHECK(ts_trace_write(t, NULL, path) == TS_OK);
    jval root;
    if (load_json(path, &root)) {
        check_well_formed(&root);
        python_check(path);
        CHECK(find_event(&root, "X", 0, "say \"hi\"\\\n\tok") != NULL);
        const jval *cut = find_event(&root, "X", 0, "0123456789012345678901234567890");
        CHECK(cut && strcmp(jstr(cut, "cat"), "a-category-that") == 0);
        CHECK(find_event(&root, "X", 0, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") != NULL);
        CHECK(find_event(&root, "X", 0, "bad ? byte") != NULL);
        const jval *q = find_event(&root, "X", 0, "?");
        CHECK(q && strcmp(jstr(q, "cat"), "other") == 0);
        jfree(&root);
    }
    unlink(path);
    ts_trace_destroy(t);
}

static void test_full_buffer_counts_dropped_events(void) {
    ts_trace *t = NULL;
    CHECK(ts_trace_create(0, 4, &t) == TS_OK);
    for (int i = 0; i < 3; i++)
        ts_trace_span(t, "forward", TS_TRACE_CAT_COMPUTE, 1.0 + i, 1.5 + i, i, 0, -1);
    int64_t s = ts_trace_begin(t, "backward", TS_TRACE_CAT_COMPUTE, 0, 0, -1);
    CHECK(s == 3);
    ts_trace_end(t, s);
    CHECK(ts_trace_begin(t, "backward", TS_TRACE_CAT_COMPUTE, 1, 0, -1) == -1);
    ts_trace_end(t, -1);
    ts_trace_counter(t, "loss", 1.0, 2.0);
    for (int i = 0; i < 4; i++)
        ts_trace_span(t, "x", "y", 1.0, 2.0, -1, -1, -1);
    CHECK(ts_trace_count(t) == 4 && ts_trace_dropped(t) == 6);
    const char *path = tmp_path("full.json");
    CHECK(ts_trace_write(t, NULL, path) == TS_OK);
    jval root;
    if (load_json(path, &root)) {
        check_well_formed(&root);
        const jval *od = jget(&root, "otherData");
        CHECK(jnum(od, "dropped_events", -1) == 6 && jnum(od, "events", -1) == 4);
        const jval *dpr = jget(od, "dropped_per_rank");
        CHECK(dpr && dpr->t == J_ARR && dpr->n == 1 && dpr->items[0].num == 6);
        CHECK(count_events(&root, "X", 0) == 4);
        jfree(&root);
    }
    unlink(path);
    ts_trace_destroy(t);
}

static void test_begin_end_and_open_spans(void) {
    ts_trace *t = NULL;
    CHECK(ts_trace_create(1, 16, &t) == TS_OK);
    CHECK(ts_trace_sync_epoch(t, NULL) == TS_OK);
    int64_t a = ts_trace_begin(t, "step", TS_TRACE_CAT_STEP, -1, -1, -1);
    int64_t b = ts_trace_begin(t, "forward", TS_TRACE_CAT_COMPUTE, 0, 1, 0);
    int64_t c = ts_trace_begin(t, "recv", TS_TRACE_CAT_P2P, 0, 1, -1); /* never ended */
    CHECK(a == 0 && b == 1 && c == 2);
    ts_trace_end(t, b);
    ts_trace_end(t, a);
    ts_trace_end(t, 99); /* unknown ids are ignored */
    ts_trace_counter(t, "loss", ts_trace_now(), 3.5);
    ts_trace_counter(t, "loss", ts_trace_now(), NAN); /* not recorded */
    ts_trace_instant(t, "checkpoint", TS_TRACE_CAT_STEP, ts_trace_now(), -1, -1, -1);
    ts_trace_end(t, 3); /* the counter: not a span, ignored */
    CHECK(ts_trace_count(t) == 5);
    const char *path = tmp_path("open.json");
    CHECK(ts_trace_write(t, NULL, path) == TS_OK);
    jval root;
    if (load_json(path, &root)) {
        check_well_formed(&root);
        python_check(path);
        CHECK(count_events(&root, "X", 1) == 2);
        CHECK(find_event(&root, "X", 1, "recv") == NULL);
        const jval *st = find_event(&root, "X", 1, "step");
        const jval *fw = find_event(&root, "X", 1, "forward");
        CHECK(st && fw && jnum(st, "ts", -1) >= 0 && jnum(fw, "ts", -1) >= jnum(st, "ts", 0));
        CHECK(st && fw &&
              jnum(fw, "ts", 0) + jnum(fw, "dur", 0) <= jnum(st, "ts", 0) + jnum(st, "dur", 0));
        const jval *ctr = find_event(&root, "C", 1, "loss");
        CHECK(ctr && jnum(jget(ctr, "args"), "value", 0) == 3.5);
        CHECK(count_events(&root, "C", 1) == 1);
        const jval *in = find_event(&root, "i", 1, "checkpoint");
        CHECK(in && strcmp(jstr(in, "s"), "t") == 0);
        CHECK(strcmp(thread_name(&root, 1, (int)jnum(in, "tid", -1)), "step") == 0);
        CHECK(jnum(jget(&root, "otherData"), "open_spans", -1) == 1);
        jfree(&root);
    }
    unlink(path);
    ts_trace_destroy(t);
}

static void test_overlapping_spans_get_separate_lanes(void) {
    ts_trace *t = NULL;
    CHECK(ts_trace_create(0, 16, &t) == TS_OK);
    ts_trace_set_epoch(t, 0.0);
    ts_trace_span(t, "forward", TS_TRACE_CAT_COMPUTE, 0.0, 0.010, 0, 0, -1);
    ts_trace_span(t, "inner", TS_TRACE_CAT_COMPUTE, 0.002, 0.005, 0, 0, -1); /* nested */
    ts_trace_span(t, "send", TS_TRACE_CAT_P2P, 0.0, 0.010, 0, 0, -1);
    ts_trace_span(t, "recv", TS_TRACE_CAT_P2P, 0.005, 0.015, 1, 0, -1); /* overlaps send */
    ts_trace_span(t, "wait", TS_TRACE_CAT_P2P, 0.010, 0.012, 1, 0, -1); /* inside recv */
    const char *path = tmp_path("lanes.json");
    CHECK(ts_trace_write(t, NULL, path) == TS_OK);
    jval root;
    if (load_json(path, &root)) {
        check_well_formed(&root);
        const jval *f = find_event(&root, "X", 0, "forward");
        const jval *in = find_event(&root, "X", 0, "inner");
        const jval *s = find_event(&root, "X", 0, "send");
        const jval *r = find_event(&root, "X", 0, "recv");
        const jval *w = find_event(&root, "X", 0, "wait");
        CHECK(f && in && s && r && w);
        if (f && in && s && r && w) {
            CHECK(jnum(f, "tid", -1) == jnum(in, "tid", -2));
            CHECK(jnum(s, "tid", -1) != jnum(r, "tid", -1));
            CHECK(strcmp(thread_name(&root, 0, (int)jnum(s, "tid", -1)), "p2p") == 0);
            CHECK(strcmp(thread_name(&root, 0, (int)jnum(r, "tid", -1)), "p2p #2") == 0);
            CHECK(jnum(w, "tid", -1) == jnum(s, "tid", -2)); /* send has ended by then */
        }
        jfree(&root);
    }
    unlink(path);
    ts_trace_destroy(t);
}

static void test_write_failures_leave_nothing(void) {
    ts_trace *t = NULL;
    CHECK(ts_trace_create(0, 4, &t) == TS_OK);
    ts_trace_span(t, "forward", TS_TRACE_CAT_COMPUTE, 1.0, 2.0, 0, 0, -1);
    const char *bad = tmp_path("no-such-dir/trace.json");
    CHECK(ts_trace_write(t, NULL, bad) == TS_ERR_IO);
    CHECK(strstr(ts_last_error(), "no-such-dir/trace.json.tmp") != NULL);
    CHECK(ts_trace_write(t, NULL, NULL) == TS_ERR_INVALID);
    CHECK(ts_trace_write(t, NULL, "") == TS_ERR_INVALID);
    ts_trace_destroy(t);
}

static void test_size_one_communicator(void) {
    ts_comm *self = NULL;
    CHECK(ts_comm_self_create("world", 10.0, &self) == TS_OK);
    ts_trace *t = NULL;
    CHECK(ts_trace_create(0, 8, &t) == TS_OK);
    CHECK(ts_trace_sync_epoch(t, self) == TS_OK);
    int64_t s = ts_trace_begin(t, "optimizer_step", TS_TRACE_CAT_COMPUTE, -1, 0, -1);
    ts_trace_end(t, s);
    const char *path = tmp_path("self.json");
    CHECK(ts_trace_write(t, self, path) == TS_OK);
    jval root;
    if (load_json(path, &root)) {
        check_well_formed(&root);
        CHECK(find_event(&root, "X", 0, "optimizer_step") != NULL);
        jfree(&root);
    }
    unlink(path);
    ts_trace_destroy(t);
    ts_comm_free(self);
}

static int run_unit(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tessera-trace-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_null_trace_is_noop();
    test_create_rejects_bad_arguments();
    test_spans_carry_times_and_args();
    test_names_are_copied_cut_and_escaped();
    test_full_buffer_counts_dropped_events();
    test_begin_end_and_open_spans();
    test_overlapping_spans_get_separate_lanes();
    test_write_failures_leave_nothing();
    test_size_one_communicator();
    rmdir(tmpdir);
    printf("trace unit tests: %s (%d failures)\n", failures ? "FAILED" : "ok", failures);
    return failures != 0;
}

/* --- the multi-rank test ---------------------------------------------------------- */

static const char *span_names[] = {"forward", "backward",   "send",          "recv",
                                   "wait",    "all_reduce", "optimizer_step"};

/* One rank's step: a stage of a pipeline of `size` stages with 4
 * micro-batches, a ring exchange per micro-batch, then a gradient
 * all-reduce and the optimizer step. */
static void record_step(ts_trace *t, ts_comm *world, int64_t step) {
    int rank = ts_comm_rank(world), size = ts_comm_size(world);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    ts_trace_set_step(t, step);
    int64_t whole = ts_trace_begin(t, "step", TS_TRACE_CAT_STEP, -1, rank, -1);
    float out[64], in[64], grad[256];
    for (int mb = 0; mb < 4; mb++) {
        int64_t f = ts_trace_begin(t, "forward", TS_TRACE_CAT_COMPUTE, mb, rank, 0);
        for (int i = 0; i < 64; i++)
            out[i] = (float)(rank * 100 + mb + i);
        ts_trace_end(t, f);
        ts_comm_request *rs = NULL, *rr = NULL;
        double t_send = ts_trace_now();
        CHECK(ts_comm_send_start(world, out, 64, TS_F32, next, mb, &rs) == TS_OK);
        double t_recv = ts_trace_now();
        CHECK(ts_comm_recv_start(world, in, 64, TS_F32, prev, mb, &rr) == TS_OK);
        int64_t w = ts_trace_begin(t, "wait", TS_TRACE_CAT_P2P, mb, rank, -1);
        CHECK(ts_comm_wait(rr) == TS_OK);
        double t_recv_done = ts_trace_now();
        CHECK(ts_comm_wait(rs) == TS_OK);
        ts_trace_end(t, w);
        ts_trace_span(t, "recv", TS_TRACE_CAT_P2P, t_recv, t_recv_done, mb, rank, -1);
        ts_trace_span(t, "send", TS_TRACE_CAT_P2P, t_send, ts_trace_now(), mb, rank, -1);
        CHECK(in[0] == (float)(prev * 100 + mb));
        int64_t b = ts_trace_begin(t, "backward", TS_TRACE_CAT_COMPUTE, mb, rank, 0);
        for (int i = 0; i < 256; i++)
            grad[i] = (float)(i % 7);
        ts_trace_end(t, b);
    }
    int64_t ar = ts_trace_begin(t, "all_reduce", TS_TRACE_CAT_COLLECTIVE, -1, rank, -1);
    CHECK(ts_comm_all_reduce(world, grad, grad, 256, TS_F32, TS_REDUCE_SUM) == TS_OK);
    ts_trace_end(t, ar);
    CHECK(grad[3] == 3.0f * (float)size);
    int64_t o = ts_trace_begin(t, "optimizer_step", TS_TRACE_CAT_COMPUTE, -1, rank, -1);
    ts_trace_end(t, o);
    ts_trace_counter(t, "loss", ts_trace_now(), 4.0 - (double)step);
    ts_trace_end(t, whole);
}

static int run_mpi(int *argc, char ***argv) {
    ts_comm *world = NULL;
    if (ts_comm_world_init(argc, argv, 60.0, &world) != TS_OK) {
        fprintf(stderr, "%s\n", ts_last_error());
        return 1;
    }
    int rank = ts_comm_rank(world), size = ts_comm_size(world);
    my_rank = rank;
    const char *path = "trace_mpi_test.json";

    ts_trace *t = NULL;
    CHECK(ts_trace_create(rank, 1024, &t) == TS_OK);
    CHECK(ts_trace_sync_epoch(t, world) == TS_OK);
    for (int64_t step = 0; step < 2; step++)
        record_step(t, world, step);
    /* Only rank 0 reads the path. */
    CHECK(ts_trace_write(t, world, rank == 0 ? path : NULL) == TS_OK);

    if (rank == 0) {
        jval root;
        if (load_json(path, &root)) {
            check_well_formed(&root);
            python_check(path);
            const jval *od = jget(&root, "otherData");
            CHECK(jnum(od, "ranks", -1) == size && jnum(od, "dropped_events", -1) == 0);
            CHECK(jnum(od, "open_spans", -1) == 0);
            for (int p = 0; p < size; p++) {
                char want[32];
                snprintf(want, sizeof want, "rank %d", p);
                const jval *pn = find_event(&root, "M", p, "process_name");
                CHECK(pn && strcmp(jstr(jget(pn, "args"), "name"), want) == 0);
                /* 2 steps x (1 step + 4 x (fwd, wait, recv, send, bwd) + ar + opt) */
                CHECK(count_events(&root, "X", p) == 2 * 23);
                CHECK(count_events(&root, "C", p) == 2);
                for (size_t k = 0; k < sizeof span_names / sizeof *span_names; k++) {
                    const jval *e = find_event(&root, "X", p, span_names[k]);
                    CHECK(e != NULL);
                    if (!e) {
                        fprintf(stderr, "  no %s span on rank %d\n", span_names[k], p);
                        continue;
                    }
                    const jval *args = jget(e, "args");
                    CHECK(jnum(args, "stage", -1) == p && jnum(args, "step", -1) == 0);
                    CHECK(jnum(e, "ts", -1) >= 0);
                }
                const jval *fw = find_event(&root, "X", p, "forward");
                CHECK(fw && jnum(jget(fw, "args"), "mb", -1) == 0 &&
                      jnum(jget(fw, "args"), "chunk", -1) == 0);
            }
            CHECK(count_events(&root, "X", size) == 0);
            jfree(&root);
        }
        unlink(path);
    }

    /* Drops differ per rank and are reported per rank. */
    ts_trace *small = NULL;
    CHECK(ts_trace_create(rank, 2, &small) == TS_OK);
    for (int i = 0; i < 2 + rank; i++)
        ts_trace_span(small, "forward", TS_TRACE_CAT_COMPUTE, 1.0, 2.0, i, rank, -1);
    CHECK(ts_trace_write(small, world, rank == 0 ? path : NULL) == TS_OK);
    if (rank == 0) {
        jval root;
        if (load_json(path, &root)) {
            const jval *dpr = jget(jget(&root, "otherData"), "dropped_per_rank");
            CHECK(dpr && dpr->t == J_ARR && dpr->n == size);
            for (int r = 0; dpr && r < dpr->n && r < size; r++)
                CHECK(dpr->items[r].num == r);
            CHECK(jnum(jget(&root, "otherData"), "dropped_events", -1) ==
                  (double)(size * (size - 1) / 2));
            jfree(&root);
        }
        unlink(path);
    }

    /* A file rank 0 cannot create fails on every rank, and nobody hangs. */
    ts_status st = ts_trace_write(t, world, rank == 0 ? "/nonexistent-dir/trace.json" : NULL);
    CHECK(st == TS_ERR_IO);
    if (rank != 0) CHECK(strstr(ts_last_error(), "rank 0 could not create") != NULL);
    CHECK(ts_comm_barrier(world) == TS_OK);

    ts_trace_destroy(small);
    ts_trace_destroy(t);
    /* Every rank's verdict, so that rank 0's checks fail the job on all. */
    int32_t bad = failures;
    CHECK(ts_comm_all_reduce(world, &bad, &bad, 1, TS_I32, TS_REDUCE_SUM) == TS_OK);
    if (rank == 0)
        printf("trace np%d: %s (%d failures over all ranks)\n", size, bad ? "FAILED" : "ok",
               (int)bad);
    ts_comm_world_finalize(world);
    return bad != 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--mpi") == 0) return run_mpi(&argc, &argv);
    return run_unit();
}
