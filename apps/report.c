/*
 * report.c — `tessera report METRICS.jsonl [--out FILE]`: a run's metrics
 * file ([train] metrics: one JSON object per step) as one self-contained
 * HTML page: a summary table (steps, first and last loss, median tokens/s
 * and step time, peak memory), then line charts over the steps: loss (and
 * val_loss where lines have it), learning rate, gradient norm, tokens/s,
 * step time, memory by category (allocated and peak), communication bytes
 * and seconds per step by group and op, the pipeline bubble per stage (when
 * there are several stages) and the MoE auxiliary loss (when lines have it),
 * then the last step's memory and the mean communication per step as tables.
 *
 * The page is inline CSS and inline SVG (a viewBox, so charts scale with the
 * page): no script, no link, no font or image from elsewhere, so it can be
 * archived or mailed and opened offline. A null value (a skipped step's loss
 * and gradient norm) leaves a gap in its line; val_loss, present on some
 * steps only, is joined across the steps without it and marked at each. A
 * line of more than two points per pixel column is thinned to each column's
 * first, lowest, highest and last point.
 *
 * What it does not do: read anything but the metrics file (not the INI
 * file, not [train] summary), compare runs, or link against libtessera: it
 * uses the C library and POSIX only, with a JSON reader of its own (one line
 * at a time into a flat array of nodes, strings decoded in place).
 *
 * Errors name the file and line ("m.jsonl:7: expected ':' after member
 * \"loss\", found '5' (column 16)"). The page is written to OUT.tmp.XXXXXX
 * and renamed over OUT, so a failure leaves no partial file behind.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>    /* errno */
#include <math.h>     /* NAN, isfinite, log10, pow, floor, ceil */
#include <stdarg.h>   /* va_list for fail() */
#include <stdio.h>    /* FILE, getline, fprintf */
#include <stdlib.h>   /* malloc, realloc, qsort, mkstemp */
#include <string.h>   /* strcmp, strerror */
#include <sys/stat.h> /* stat, fchmod, umask */
#include <unistd.h>   /* unlink, close */

#include "commands.h"
#include "file.h" /* ts_file_output_path */

static const char *usage_report =
    "usage: tessera report METRICS.jsonl [--out FILE]\n"
    "\n"
    "Writes a training run's metrics file ([train] metrics = PATH: one JSON\n"
    "object per step) as one self-contained HTML page: a summary, and charts of\n"
    "loss, learning rate, gradient norm, tokens/s, step time, memory by category,\n"
    "communication by group and op and, for pipeline runs, the bubble per stage.\n"
    "The page needs no network and no JavaScript.\n"
    "\n"
    "  --out FILE   the page (default: METRICS with .jsonl replaced by .html),\n"
    "               written atomically; a regular file (or the one a link leads to)\n"
    "               or a new path, never a FIFO, device or directory\n";

/* The last error: "FILE:LINE: what" without the program's name. */
static char errmsg[1024];

static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errmsg, sizeof errmsg, fmt, ap);
    va_end(ap);
    return -1;
}

/* --- JSON reader ---------------------------------------------------------- */

enum { J_NULL, J_FALSE, J_TRUE, J_NUM, J_STR, J_ARR, J_OBJ };

#define JSON_MAX_DEPTH 64

/* One value. Members of an object and elements of an array are linked by
 * `next` from the container's `child`; nodes refer to each other by index
 * because the array grows while a line is parsed. */
typedef struct {
    int type;
    int child;       /* first element or member (J_ARR, J_OBJ); -1 when empty */
    int next;        /* next sibling; -1 for the last */
    const char *key; /* the member's name when the parent is an object */
    const char *str; /* J_STR: decoded, NUL-terminated, inside the line */
    double num;      /* J_NUM */
} jnode;

typedef struct {
    jnode *n;
    int len, cap;
    char *line; /* the line being parsed (strings are decoded into it) */
    char *p;    /* the cursor */
    char err[256];
} jparser;

static const char *jtype_name(int type) {
    static const char *names[] = {"null",     "false",    "true",     "a number",
                                  "a string", "an array", "an object"};
    return names[type];
}

/* What the cursor is at, for messages: 'c' or "the end of the line". */
static const char *jfound(const char *p, char *buf, size_t size) {
    if (*p == '\0') return "the end of the line";
    if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
        snprintf(buf, size, "byte 0x%02x", (unsigned char)*p);
    else
        snprintf(buf, size, "'%c'", *p);
    return buf;
}

static int jfail(jparser *ps, const char *at, const char *fmt, ...) {
    char what[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(ps->err, sizeof ps->err, "%s (column %ld%s)", what, (long)(at - ps->line) + 1,
             *at ? "" : "; is the line cut short?");
    return -1;
}

static void skip_ws(jparser *ps) {
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
        ps->p++;
}

static int jnew(jparser *ps, int type) {
    if (ps->len == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 256;
        jnode *n = realloc(ps->n, (size_t)cap * sizeof *n);
        if (!n) return jfail(ps, ps->p, "out of memory");
        ps->n = n;
        ps->cap = cap;
    }
    jnode *n = &ps->n[ps->len];
    *n = (jnode){.type = type, .child = -1, .next = -1};
    return ps->len++;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = 16 * v + (unsigned)d;
    }
    *out = v;
    return 0;
}

/* A string at the cursor (on its '"'), decoded in place: the decoded text
 * is never longer than the quoted one, so it is written behind the cursor. */
static int parse_string(jparser *ps, const char **out) {
    char *open = ps->p, *r = ps->p + 1, *w = ps->p + 1;
    *out = w;
    for (;;) {
        unsigned char c = (unsigned char)*r;
        if (c == '\0') return jfail(ps, open, "string not closed: the line ends inside it");
        if (c == '"') break;
        if (c < 0x20) return jfail(ps, r, "control character 0x%02x in a string", c);
        if (c != '\\') {
            *w++ = *r++;
            continue;
        }
        char e = r[1];
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e != '\0' && simple) {
            *w++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            r += 2;
            continue;
        }
        if (e != 'u') return jfail(ps, r, "invalid escape in a string");
        unsigned u;
        if (hex4(r + 2, &u) < 0) return jfail(ps, r, "invalid \\u escape in a string");
        r += 6;
        if (u >= 0xd800 && u < 0xdc00) { /* a surrogate pair */
            unsigned lo;
            if (r[0] != '\\' || r[1] != 'u' || hex4(r + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
                return jfail(ps, r, "unpaired surrogate in a \\u escape");
            u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
            r += 6;
        }
        if (u < 0x80) {
            *w++ = (char)u;
        } else if (u < 0x800) {
            *w++ = (char)(0xc0 | u >> 6);
            *w++ = (char)(0x80 | (u & 0x3f));
        } else if (u < 0x10000) {
            *w++ = (char)(0xe0 | u >> 12);
            *w++ = (char)(0x80 | (u >> 6 & 0x3f));
            *w++ = (char)(0x80 | (u & 0x3f));
        } else {
            *w++ = (char)(0xf0 | u >> 18);
            *w++ = (char)(0x80 | (u >> 12 & 0x3f));
            *w++ = (char)(0x80 | (u >> 6 & 0x3f));
            *w++ = (char)(0x80 | (u & 0x3f));
        }
    }
    ps->p = r + 1;
    *w = '\0'; /* w <= r: the closing quote is already consumed */
    return 0;
}

/* A number as JSON spells it: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int parse_number(jparser *ps, double *out) {
    const char *s = ps->p, *q = s;
    if (*q == '-') q++;
    if (*q == '0') {
        if (*++q >= '0' && *q <= '9') return jfail(ps, s, "invalid number: a leading zero");
    } else if (*q >= '1' && *q <= '9') {
        while (*q >= '0' && *q <= '9')
            q++;
    } else {
        return jfail(ps, s, "invalid number");
    }
    if (*q == '.') {
        q++;
        if (!(*q >= '0' && *q <= '9')) return jfail(ps, q, "invalid number: no digit after '.'");
        while (*q >= '0' && *q <= '9')
            q++;
    }
    if (*q == 'e' || *q == 'E') {
        q++;
        if (*q == '+' || *q == '-') q++;
        if (!(*q >= '0' && *q <= '9')) return jfail(ps, q, "invalid number: no exponent digits");
        while (*q >= '0' && *q <= '9')
            q++;
    }
    char buf[64];
    if (q - s >= (long)sizeof buf) return jfail(ps, s, "number longer than 63 characters");
    memcpy(buf, s, (size_t)(q - s));
    buf[q - s] = '\0';
    *out = strtod(buf, NULL);
    ps->p = (char *)q;
    return 0;
}

static int parse_value(jparser *ps, int depth);

/* The elements of an array or the members of an object, after its '['
 * or '{'. */
static int parse_container(jparser *ps, int self, int depth) {
    int object = ps->n[self].type == J_OBJ;
    char close = object ? '}' : ']';
    char tmp[48];
    int last = -1;
    skip_ws(ps);
    if (*ps->p == close) {
        ps->p++;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        if (object) {
            if (*ps->p != '"')
                return jfail(ps, ps->p, "expected a member name in double quotes, found %s",
                             jfound(ps->p, tmp, sizeof tmp));
            if (parse_string(ps, &key) < 0) return -1;
            skip_ws(ps);
            if (*ps->p != ':')
                return jfail(ps, ps->p, "expected ':' after member \"%.40s\", found %s", key,
                             jfound(ps->p, tmp, sizeof tmp));
            ps->p++;
        }
        int kid = parse_value(ps, depth + 1);
        if (kid < 0) return -1;
        ps->n[kid].key = key;
        if (last < 0)
            ps->n[self].child = kid;
        else
            ps->n[last].next = kid;
        last = kid;
        skip_ws(ps);
        if (*ps->p == ',') {
            ps->p++;
            skip_ws(ps);
            continue;
        }
        if (*ps->p == close) {
            ps->p++;
            return 0;
        }
        return jfail(ps, ps->p, "expected ',' or '%c' in %s, found %s", close,
                     object ? "an object" : "an array", jfound(ps->p, tmp, sizeof tmp));
    }
}

static int parse_value(jparser *ps, int depth) {
    char tmp[48];
    skip_ws(ps);
    if (depth > JSON_MAX_DEPTH)
        return jfail(ps, ps->p, "values nested deeper than %d levels", JSON_MAX_DEPTH);
    char c = *ps->p;
    int self;
    if (c == '{' || c == '[') {
        if ((self = jnew(ps, c == '{' ? J_OBJ : J_ARR)) < 0) return -1;
        ps->p++;
        return parse_container(ps, self, depth) < 0 ? -1 : self;
    }
    if (c == '"') {
        const char *s;
        if (parse_string(ps, &s) < 0 || (self = jnew(ps, J_STR)) < 0) return -1;
        ps->n[self].str = s;
        return self;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        double v = 0;
        if (parse_number(ps, &v) < 0 || (self = jnew(ps, J_NUM)) < 0) return -1;
        ps->n[self].num = v;
        return self;
    }
    static const struct {
        const char *word;
        int type;
    } words[] = {{"null", J_NULL}, {"true", J_TRUE}, {"false", J_FALSE}};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t len = strlen(words[i].word);
        if (strncmp(ps->p, words[i].word, len) == 0) {
            ps->p += len;
            return jnew(ps, words[i].type);
        }
    }
    return jfail(ps, ps->p, "expected a value, found %s", jfound(ps->p, tmp, sizeof tmp));
}

/* Parses LINE (NUL-terminated, modified in place) into ps->n; the root is
 * node 0. Returns 0, or -1 with ps->err. */
static int json_parse(jparser *ps, char *line) {
    char tmp[48];
    ps->len = 0;
    ps->line = ps->p = line;
    if (parse_value(ps, 0) < 0) return -1;
    skip_ws(ps);
    if (*ps->p != '\0')
        return jfail(ps, ps->p, "unexpected %s after the JSON value",
                     jfound(ps->p, tmp, sizeof tmp));
    return 0;
}

/* The member KEY of object OBJ, or -1 (also when OBJ is not an object). */
static int jget(const jparser *ps, int obj, const char *key) {
    if (obj < 0 || ps->n[obj].type != J_OBJ) return -1;
    for (int c = ps->n[obj].child; c >= 0; c = ps->n[c].next)
        if (strcmp(ps->n[c].key, key) == 0) return c;
    return -1;
}

/* --- the run's series ----------------------------------------------------- */

/* One line of a chart: a value per step line of the file; NAN where the
 * line has none (or null). */
typedef struct {
    char *name;
    double *v;
    int len;
} series;

typedef struct {
    series *s;
    int n, cap;
    double fill; /* the value of a step a line has no entry for */
} series_set;

typedef struct {
    int n, cap;
    double *step;          /* "step" of each step line */
    series_set scalar;     /* loss, val_loss, lr, grad_norm, tokens_per_s, step_ms, aux_loss */
    series_set mem_alloc;  /* bytes by category (same order as mem_peak) */
    series_set mem_peak;   /* bytes by category */
    series_set comm_bytes; /* per "group.op", per step; 0 where a line has none */
    series_set comm_secs;  /* per "group.op" */
    series_set comm_calls; /* per "group.op" */
    series_set bubble;     /* per "stage k" */
    int stages;            /* the most pipeline stages of any line */
    int skipped;           /* lines with "skipped": true */
    double peak_total;     /* the largest mem.total.peak or peak_mem_bytes */
} run;

static series *set_find(const series_set *set, const char *name) {
    for (int i = 0; i < set->n; i++)
        if (strcmp(set->s[i].name, name) == 0) return &set->s[i];
    return NULL;
}

static series *set_get(series_set *set, const char *name) {
    series *s = set_find(set, name);
    if (s) return s;
    if (set->n == set->cap) {
        int cap = set->cap ? 2 * set->cap : 8;
        series *grown = realloc(set->s, (size_t)cap * sizeof *grown);
        if (!grown) return NULL;
        set->s = grown;
        set->cap = cap;
    }
    s = &set->s[set->n];
    *s = (series){.name = strdup(name)};
    if (!s->name) return NULL;
    set->n++;
    return s;
}

/* Fills S up to LEN entries with FILL. */
static int series_pad(series *s, int len, double fill) {
    if (s->len >= len) return 0;
    double *v = realloc(s->v, (size_t)len * sizeof *v);
    if (!v) return -1;
    s->v = v;
    while (s->len < len)
        s->v[s->len++] = fill;
    return 0;
}

/* Sets series NAME of SET at step line I to V. */
static int set_put(series_set *set, const char *name, int i, double v) {
    series *s = set_get(set, name);
    if (!s || series_pad(s, i + 1, set->fill) < 0) return fail("out of memory");
    s->v[i] = v;
    return 0;
}

static void set_free(series_set *set) {
    for (int i = 0; i < set->n; i++) {
        free(set->s[i].name);
        free(set->s[i].v);
    }
    free(set->s);
}

static series_set *run_sets(run *r, int k) {
    series_set *sets[] = {&r->scalar,    &r->mem_alloc,  &r->mem_peak, &r->comm_bytes,
                          &r->comm_secs, &r->comm_calls, &r->bubble};
    return k < (int)(sizeof sets / sizeof sets[0]) ? sets[k] : NULL;
}

static void run_free(run *r) {
    for (int k = 0; run_sets(r, k); k++)
        set_free(run_sets(r, k));
    free(r->step);
}

/* --- reading the metrics file --------------------------------------------- */

/* Where a line's problems are reported: "FILE:LINE". */
typedef struct {
    const char *path;
    long line;
    const jparser *ps;
} where;

/* A member that must be a number or null when present: *out is its value,
 * NAN when null or absent. WHAT names it in messages ("mem.params.peak"). */
static int num_at(const where *w, int node, const char *what, double *out) {
    *out = NAN;
    if (node < 0 || w->ps->n[node].type == J_NULL) return 0;
    if (w->ps->n[node].type != J_NUM)
        return fail("%s:%ld: \"%s\" is %s, expected a number or null", w->path, w->line, what,
                    jtype_name(w->ps->n[node].type));
    *out = w->ps->n[node].num;
    return 0;
}

/* A member that must be an object when present. */
static int obj_at(const where *w, int node, const char *what) {
    if (node < 0 || w->ps->n[node].type == J_OBJ) return 0;
    return fail("%s:%ld: \"%s\" is %s, expected an object", w->path, w->line, what,
                jtype_name(w->ps->n[node].type));
}

static int take_mem(run *r, const where *w, int mem, int i) {
    const jparser *ps = w->ps;
    char what[160];
    if (obj_at(w, mem, "mem") < 0) return -1;
    for (int c = mem < 0 ? -1 : ps->n[mem].child; c >= 0; c = ps->n[c].next) {
        const char *cat = ps->n[c].key;
        double alloc, peak;
        snprintf(what, sizeof what, "mem.%.60s", cat);
        if (obj_at(w, c, what) < 0) return -1;
        snprintf(what, sizeof what, "mem.%.60s.allocated", cat);
        if (num_at(w, jget(ps, c, "allocated"), what, &alloc) < 0) return -1;
        snprintf(what, sizeof what, "mem.%.60s.peak", cat);
        if (num_at(w, jget(ps, c, "peak"), what, &peak) < 0) return -1;
        if (set_put(&r->mem_alloc, cat, i, alloc) < 0 || set_put(&r->mem_peak, cat, i, peak) < 0)
            return -1;
        if (strcmp(cat, "total") == 0 && isfinite(peak) && peak > r->peak_total)
            r->peak_total = peak;
    }
    return 0;
}

static int take_comm(run *r, const where *w, int comm, int i) {
    const jparser *ps = w->ps;
    char what[200], name[160];
    if (obj_at(w, comm, "comm") < 0) return -1;
    for (int g = comm < 0 ? -1 : ps->n[comm].child; g >= 0; g = ps->n[g].next) {
        snprintf(what, sizeof what, "comm.%.60s", ps->n[g].key);
        if (obj_at(w, g, what) < 0) return -1;
        for (int op = ps->n[g].child; op >= 0; op = ps->n[op].next) {
            snprintf(name, sizeof name, "%.70s.%.70s", ps->n[g].key, ps->n[op].key);
            snprintf(what, sizeof what, "comm.%s", name);
            if (obj_at(w, op, what) < 0) return -1;
            static const char *fields[] = {"bytes", "seconds", "calls"};
            series_set *sets[] = {&r->comm_bytes, &r->comm_secs, &r->comm_calls};
            for (int k = 0; k < 3; k++) {
                double v;
                snprintf(what, sizeof what, "comm.%s.%s", name, fields[k]);
                if (num_at(w, jget(ps, op, fields[k]), what, &v) < 0) return -1;
                if (set_put(sets[k], name, i, v) < 0) return -1;
            }
        }
    }
    return 0;
}

static int take_pipeline(run *r, const where *w, int pipe, int i) {
    const jparser *ps = w->ps;
    double stages;
    if (obj_at(w, pipe, "pipeline") < 0) return -1;
    if (pipe < 0) return 0;
    if (num_at(w, jget(ps, pipe, "stages"), "pipeline.stages", &stages) < 0) return -1;
    if (isfinite(stages) && stages > r->stages && stages < 1e6) r->stages = (int)stages;
    int b = jget(ps, pipe, "bubble");
    if (b < 0) return 0;
    if (ps->n[b].type != J_ARR)
        return fail("%s:%ld: \"pipeline.bubble\" is %s, expected an array", w->path, w->line,
                    jtype_name(ps->n[b].type));
    int k = 0;
    for (int e = ps->n[b].child; e >= 0; e = ps->n[e].next, k++) {
        char what[64], name[32];
        double v;
        snprintf(what, sizeof what, "pipeline.bubble[%d]", k);
        if (num_at(w, e, what, &v) < 0) return -1;
        snprintf(name, sizeof name, "stage %d", k);
        if (set_put(&r->bubble, name, i, v) < 0) return -1;
    }
    return 0;
}

/* Adds the step line at node 0 of W's parser to R. */
static int take_line(run *r, const where *w) {
    const jparser *ps = w->ps;
    double v;
    if (num_at(w, jget(ps, 0, "step"), "step", &v) < 0) return -1;
    if (!isfinite(v)) return fail("%s:%ld: \"step\" is null, expected a number", w->path, w->line);
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 256;
        double *step = realloc(r->step, (size_t)cap * sizeof *step);
        if (!step) return fail("out of memory");
        r->step = step;
        r->cap = cap;
    }
    int i = r->n++;
    r->step[i] = v;

    static const char *scalars[] = {"loss",      "val_loss",     "lr",
                                    "grad_norm", "tokens_per_s", "step_ms"};
    for (size_t k = 0; k < sizeof scalars / sizeof scalars[0]; k++) {
        int node = jget(ps, 0, scalars[k]);
        if (node < 0) continue;
        if (num_at(w, node, scalars[k], &v) < 0 || set_put(&r->scalar, scalars[k], i, v) < 0)
            return -1;
    }
    int skipped = jget(ps, 0, "skipped");
    if (skipped >= 0 && ps->n[skipped].type == J_TRUE) r->skipped++;
    if (num_at(w, jget(ps, 0, "peak_mem_bytes"), "peak_mem_bytes", &v) < 0) return -1;
    if (isfinite(v) && v > r->peak_total) r->peak_total = v;

    int moe = jget(ps, 0, "moe");
    if (obj_at(w, moe, "moe") < 0) return -1;
    int aux = jget(ps, moe, "aux_loss");
    if (aux >= 0 &&
        (num_at(w, aux, "moe.aux_loss", &v) < 0 || set_put(&r->scalar, "aux_loss", i, v) < 0))
        return -1;

    if (take_mem(r, w, jget(ps, 0, "mem"), i) < 0) return -1;
    if (take_comm(r, w, jget(ps, 0, "comm"), i) < 0) return -1;
    return take_pipeline(r, w, jget(ps, 0, "pipeline"), i);
}

static int read_metrics(const char *path, run *r) {
    FILE *f = fopen(path, "r");
    if (!f) return fail("%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0, lines = 0;
    jparser ps = {0};
    where w = {.path = path, .ps = &ps};
    int rc = 0;
    errno = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        w.line = ++lineno;
        if ((size_t)len != strlen(line)) {
            rc = fail("%s:%ld: NUL byte in the line", path, lineno);
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (strspn(line, " \t") == (size_t)len) continue; /* a blank line */
        lines++;
        if (json_parse(&ps, line) < 0) {
            rc = fail("%s:%ld: %s", path, lineno, ps.err);
        } else if (ps.n[0].type != J_OBJ) {
            rc = fail("%s:%ld: expected a JSON object, found %s", path, lineno,
                      jtype_name(ps.n[0].type));
        } else if (jget(&ps, 0, "step") >= 0) { /* other records are not steps: skipped */
            rc = take_line(r, &w);
        }
    }
    if (rc == 0 && ferror(f)) rc = fail("%s: %s", path, strerror(errno ? errno : EIO));
    free(line);
    free(ps.n);
    fclose(f);
    if (rc < 0) return rc;
    if (lines == 0) return fail("%s: the file is empty (no metrics lines)", path);
    if (r->n == 0)
        return fail("%s: no step lines (JSON objects with a \"step\" member) in %ld lines", path,
                    lines);
    for (int k = 0; run_sets(r, k); k++) {
        series_set *set = run_sets(r, k);
        for (int s = 0; s < set->n; s++)
            if (series_pad(&set->s[s], r->n, set->fill) < 0) return fail("out of memory");
    }
    return 0;
}

/* --- numbers -------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of S's finite values; NAN when there are none. */
static double median(const series *s) {
    if (!s) return NAN;
    double *v = malloc((size_t)(s->len ? s->len : 1) * sizeof *v);
    int n = 0;
    if (!v) return NAN;
    for (int i = 0; i < s->len; i++)
        if (isfinite(s->v[i])) v[n++] = s->v[i];
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    double m = n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    free(v);
    return m;
}

/* The first (DIR = 1) or last (DIR = -1) finite value of S; NAN if none. */
static double first_finite(const series *s, int dir) {
    if (!s) return NAN;
    for (int k = 0; k < s->len; k++) {
        double v = s->v[dir > 0 ? k : s->len - 1 - k];
        if (isfinite(v)) return v;
    }
    return NAN;
}

/* %g with the exponent's zeros dropped: 1e-05 -> 1e-5. */
static void fmt_g(char *buf, size_t size, double v, int digits) {
    char tmp[48];
    snprintf(tmp, sizeof tmp, "%.*g", digits, v);
    char *e = strchr(tmp, 'e');
    if (e) {
        char *d = e + 1, *src = e + 1;
        if (*src == '+')
            src++;
        else if (*src == '-')
            *d++ = *src++;
        while (*src == '0' && src[1])
            src++;
        memmove(d, src, strlen(src) + 1);
    }
    snprintf(buf, size, "%s", tmp);
}

/* A linear axis's tick label: %g, or with k/M/G/T when the axis reaches
 * 10^4 (AMAX: the largest absolute value on the axis). */
static void fmt_tick(char *buf, size_t size, double v, double amax) {
    static const char *suffix[] = {"k", "M", "G", "T"};
    if (amax >= 1e4) {
        int k = 0;
        double div = 1e3;
        while (k < 3 && amax >= 1e3 * div * 10) {
            div *= 1e3;
            k++;
        }
        char num[48];
        fmt_g(num, sizeof num, v / div, 4);
        snprintf(buf, size, "%s%s", v == 0 ? "0" : num, v == 0 ? "" : suffix[k]);
        return;
    }
    fmt_g(buf, size, v, 6);
}

/* V with an SI prefix and UNIT: 10 µs, 1 kB, 100 MB. */
static void fmt_si(char *buf, size_t size, double v, const char *unit) {
    static const char *prefix[] = {"n", "µ", "m", "", "k", "M", "G", "T"};
    if (v == 0) {
        snprintf(buf, size, "0 %s", unit);
        return;
    }
    int e = (int)floor(log10(fabs(v)) / 3 + 1e-9);
    if (e < -3) e = -3;
    if (e > 4) e = 4;
    char num[24];
    fmt_g(num, sizeof num, v / pow(10, 3 * e), 3);
    snprintf(buf, size, "%s %s%s", num, prefix[e + 3], unit);
}

static void fmt_mib(char *buf, size_t size, double bytes) {
    if (!isfinite(bytes))
        snprintf(buf, size, "–");
    else if (bytes >= 1024.0 * 1024 * 1024)
        snprintf(buf, size, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    else
        snprintf(buf, size, "%.1f MiB", bytes / (1024.0 * 1024));
}

/* V rounded to an integer, its digits in groups of three: 1 234 567. */
static void fmt_thousands(char *buf, size_t size, double v) {
    char digits[48];
    snprintf(digits, sizeof digits, "%.0f", fabs(v) < 1e30 ? v : 0);
    const char *d = digits + (digits[0] == '-');
    size_t len = strlen(d), n = 0;
    if (d != digits && n + 1 < size) buf[n++] = '-';
    for (size_t i = 0; i < len && n + 4 < size; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            n += (size_t)snprintf(buf + n, size - n, "\xe2\x80\x89" /* a thin space */);
        buf[n++] = d[i];
    }
    buf[n] = '\0';
}

/* A step of 1, 2 or 5 times a power of ten near SPAN / TARGET. */
static double nice_step(double span, int target) {
    double raw = span / target;
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

/* --- HTML ----------------------------------------------------------------- */

static void html_text(FILE *o, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", o); break;
        case '<': fputs("&lt;", o); break;
        case '>': fputs("&gt;", o); break;
        case '"': fputs("&quot;", o); break;
        case '\'': fputs("&#39;", o); break;
        default: fputc(*s, o);
        }
    }
}

/* Ten colours that stay apart on white (Tableau's category10). */
static const char *palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define NPALETTE ((int)(sizeof palette / sizeof palette[0]))
/* Beyond ten lines the colours repeat with a dash pattern. */
static const char *dashes[] = {NULL, "6 3", "2 2.5", "8 3 2 3"};

typedef struct {
    const series *s;
    const char *label;
    const char *color;
    const char *dash; /* stroke-dasharray, or NULL for solid */
    int sparse;       /* joined across missing values, each point marked (val_loss) */
} line;

typedef struct {
    const char *id, *title, *ylabel, *note;
    int logy;           /* log10 y axis */
    int zero;           /* the y axis starts at 0 */
    double scale;       /* values are multiplied by it (bytes to MiB) */
    const char *siunit; /* log axis labels with SI prefixes and this unit */
    line *lines;
    int nlines;
    int legend; /* 0: none (one line), 1: one entry per line, 2: memory's */
} chart;

/* The chart's geometry, in viewBox units (about pixels at 1280 px wide). */
enum { W = 600, H = 290, ML = 64, MR = 16, MT = 12, MB = 44 };
#define PW (W - ML - MR)
#define PH (H - MT - MB)

typedef struct {
    double x0, x1, y0, y1; /* data range (y in log10 when logy) */
    int logy;
    int floor_zero; /* logy: values <= 0 are drawn on the bottom decade, labelled 0 */
} axes;

static double map_x(const axes *a, double x) {
    return ML + (x - a->x0) / (a->x1 - a->x0) * PW;
}

static double map_y(const axes *a, double y) {
    if (a->logy) y = y > 0 ? log10(y) : a->y0;
    if (y < a->y0) y = a->y0;
    return MT + PH - (y - a->y0) / (a->y1 - a->y0) * PH;
}

/* Writes one segment of a line (indices IDX[0..n-1] into the steps),
 * thinned to a column's first, lowest, highest and last point when it has
 * more than two points per pixel column. */
static void write_segment(FILE *o, const run *r, const axes *a, const chart *c, const line *l,
                          const int *idx, int n) {
    if (n == 1) {
        double x = map_x(a, r->step[idx[0]]), y = map_y(a, l->s->v[idx[0]] * c->scale);
        fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.2\" fill=\"%s\"/>\n", x, y, l->color);
        return;
    }
    fprintf(o, "<polyline data-series=\"");
    html_text(o, l->label);
    fprintf(o, "\" stroke=\"%s\"", l->color);
    if (l->dash) fprintf(o, " stroke-dasharray=\"%s\"", l->dash);
    fprintf(o, " points=\"");
    int thin = n > 2 * PW;
    for (int k = 0; k < n;) {
        int end = k + 1;
        if (thin) { /* the points of one pixel column */
            int col = (int)map_x(a, r->step[idx[k]]);
            while (end < n && (int)map_x(a, r->step[idx[end]]) == col)
                end++;
        }
        int lo = k, hi = k;
        for (int j = k; j < end; j++) {
            if (l->s->v[idx[j]] < l->s->v[idx[lo]]) lo = j;
            if (l->s->v[idx[j]] > l->s->v[idx[hi]]) hi = j;
        }
        int pick[4] = {k, lo < hi ? lo : hi, lo < hi ? hi : lo, end - 1};
        for (int j = 0; j < 4; j++) {
            if (j > 0 && pick[j] == pick[j - 1]) continue;
            double x = map_x(a, r->step[idx[pick[j]]]);
            double y = map_y(a, l->s->v[idx[pick[j]]] * c->scale);
            fprintf(o, "%s%.1f,%.1f", k == 0 && j == 0 ? "" : " ", x, y);
        }
        k = end;
    }
    fprintf(o, "\"><title>");
    html_text(o, l->label);
    fprintf(o, "</title></polyline>\n");
}

static int write_line(FILE *o, const run *r, const axes *a, const chart *c, const line *l) {
    int *idx = malloc((size_t)r->n * sizeof *idx);
    if (!idx) return fail("out of memory");
    int n = 0;
    for (int i = 0; i <= r->n; i++) {
        int ok = i < r->n && isfinite(l->s->v[i]);
        if (ok) idx[n++] = i;
        if ((!ok && !l->sparse) || i == r->n) { /* a gap, or the end */
            if (n > 0) write_segment(o, r, a, c, l, idx, n);
            n = 0;
        }
    }
    if (l->sparse) /* each point marked */
        for (int i = 0; i < r->n; i++)
            if (isfinite(l->s->v[i]))
                fprintf(o, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.6\" fill=\"%s\"/>\n",
                        map_x(a, r->step[i]), map_y(a, l->s->v[i] * c->scale), l->color);
    free(idx);
    return 0;
}

static void write_legend(FILE *o, const chart *c) {
    if (!c->legend || c->nlines == 0) return;
    fprintf(o, "<div class=\"legend\">");
    for (int k = 0; k < c->nlines; k++) {
        const line *l = &c->lines[k];
        if (c->legend == 2 && l->dash) continue; /* memory: one entry per category */
        fprintf(o, "<span><i style=\"border-color:%s\"%s></i>", l->color,
                l->dash ? " class=\"dash\"" : "");
        html_text(o, l->label);
        fprintf(o, "</span>");
    }
    if (c->legend == 2)
        fprintf(o, "<span class=\"key\"><i></i>allocated</span>"
                   "<span class=\"key\"><i class=\"dash\"></i>peak</span>");
    fprintf(o, "</div>\n");
}

/* Ticks on the y axis: linear (nice steps) or one per decade. */
static void write_y_ticks(FILE *o, const axes *a, const chart *c, double step) {
    char label[48];
    if (a->logy) {
        int decades = (int)(a->y1 - a->y0 + 0.5);
        int every = decades > 14 ? 3 : decades > 7 ? 2 : 1;
        for (int d = 0; d <= decades; d++) {
            double e = a->y0 + d;
            double y = MT + PH - (double)d / decades * PH;
            fprintf(o, "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>\n", ML,
                    ML + PW, y, y);
            if ((decades - d) % every) continue;
            if (d == 0 && a->floor_zero)
                snprintf(label, sizeof label, "0");
            else if (c->siunit)
                fmt_si(label, sizeof label, pow(10, e), c->siunit);
            else
                fmt_g(label, sizeof label, pow(10, e), 3);
            fprintf(o, "<text class=\"yt\" x=\"%d\" y=\"%.1f\">%s</text>\n", ML - 6, y, label);
        }
        return;
    }
    double amax = fmax(fabs(a->y0), fabs(a->y1));
    long k0 = (long)ceil(a->y0 / step - 1e-9), k1 = (long)floor(a->y1 / step + 1e-9);
    for (long k = k0; k <= k1; k++) {
        double v = k * step;
        if (fabs(v) < step * 1e-9) v = 0;
        double y = map_y(a, v);
        fprintf(o, "<line class=\"grid\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>\n", ML,
                ML + PW, y, y);
        fmt_tick(label, sizeof label, v, amax);
        fprintf(o, "<text class=\"yt\" x=\"%d\" y=\"%.1f\">%s</text>\n", ML - 6, y, label);
    }
}

static void write_x_ticks(FILE *o, const axes *a) {
    char label[48];
    double step = fmax(1, nice_step(a->x1 - a->x0, 8));
    double amax = fmax(fabs(a->x0), fabs(a->x1));
    for (long k = (long)ceil(a->x0 / step - 1e-9); k * step <= a->x1 + 1e-9; k++) {
        double x = map_x(a, k * step);
        fprintf(o, "<line class=\"grid\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>\n", x, x, MT,
                MT + PH);
        fprintf(o, "<line class=\"axis\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>\n", x, x,
                MT + PH, MT + PH + 4);
        fmt_tick(label, sizeof label, k * step, amax);
        fprintf(o, "<text class=\"xt\" x=\"%.1f\" y=\"%d\">%s</text>\n", x, MT + PH + 17, label);
    }
}

/* A card with chart C: title, legend, and the SVG (id C->id). */
static int write_chart(FILE *o, const run *r, const chart *c) {
    fprintf(o, "<div class=\"card\">\n<h2>%s</h2>\n", c->title);
    write_legend(o, c);

    /* The y range over every line's finite values (positive ones on a log axis). */
    double lo = INFINITY, hi = -INFINITY, minpos = INFINITY;
    int nonpos = 0;
    for (int k = 0; k < c->nlines; k++)
        for (int i = 0; i < r->n; i++) {
            double v = c->lines[k].s->v[i] * c->scale;
            if (!isfinite(v)) continue;
            lo = fmin(lo, v);
            hi = fmax(hi, v);
            if (v > 0)
                minpos = fmin(minpos, v);
            else
                nonpos = 1;
        }
    if (!(lo <= hi) || (c->logy && !isfinite(minpos))) {
        fprintf(o,
                "<svg id=\"%s\" class=\"chart empty\" viewBox=\"0 0 %d 70\" role=\"img\">"
                "<text x=\"%d\" y=\"40\">%s</text></svg>\n",
                c->id, W, W / 2,
                c->nlines ? "no values to plot (every value is zero or null)"
                : c->note ? c->note
                          : "not in this file");
        fprintf(o, "</div>\n");
        return 0;
    }

    axes a = {.logy = c->logy};
    a.x0 = r->step[0];
    a.x1 = r->step[0];
    for (int i = 0; i < r->n; i++) {
        a.x0 = fmin(a.x0, r->step[i]);
        a.x1 = fmax(a.x1, r->step[i]);
    }
    if (a.x1 - a.x0 < 1) { /* one step */
        a.x0 -= 1;
        a.x1 += 1;
    }
    double ystep = 0;
    if (c->logy) {
        a.y0 = floor(log10(minpos) + 1e-9);
        a.y1 = ceil(log10(hi) - 1e-9);
        if (a.y1 <= a.y0) a.y1 = a.y0 + 1;
        if (nonpos) {
            a.y0 -= 1;
            a.floor_zero = 1;
        }
    } else {
        if (c->zero) {
            lo = fmin(lo, 0);
            hi = fmax(hi, 0);
        }
        if (hi - lo <= 1e-12 * fmax(fabs(hi), 1e-300)) { /* flat */
            double pad = hi != 0 ? 0.1 * fabs(hi) : 1;
            if (c->zero && lo == 0)
                hi += hi != 0 ? pad : 1;
            else
                lo -= pad, hi += pad;
        }
        ystep = nice_step(hi - lo, 5);
        a.y0 = floor(lo / ystep + 1e-9) * ystep;
        a.y1 = ceil(hi / ystep - 1e-9) * ystep;
    }

    fprintf(o,
            "<svg id=\"%s\" class=\"chart\" viewBox=\"0 0 %d %d\" role=\"img\" "
            "aria-label=\"%s\">\n",
            c->id, W, H, c->title);
    write_y_ticks(o, &a, c, ystep);
    write_x_ticks(o, &a);
    fprintf(o, "<line class=\"axis\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>\n", ML, ML + PW,
            MT + PH, MT + PH);
    fprintf(o, "<line class=\"axis\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>\n", ML, ML, MT,
            MT + PH);
    fprintf(o, "<text class=\"xl\" x=\"%d\" y=\"%d\">step</text>\n", ML + PW / 2, H - 6);
    fprintf(o, "<text class=\"yl\" transform=\"translate(14 %d) rotate(-90)\">%s</text>\n",
            MT + PH / 2, c->ylabel);
    fprintf(o, "<g class=\"lines\">\n");
    for (int k = 0; k < c->nlines; k++)
        if (write_line(o, r, &a, c, &c->lines[k]) < 0) return -1;
    fprintf(o, "</g>\n</svg>\n");
    if (c->note) fprintf(o, "<p class=\"note\">%s</p>\n", c->note);
    fprintf(o, "</div>\n");
    return 0;
}

/* A chart of one or two scalar series. */
static int write_scalar_chart(FILE *o, const run *r, const char *id, const char *title,
                              const char *ylabel, const char *key, int zero) {
    line l[2];
    int n = 0;
    const series *s = set_find(&r->scalar, key);
    if (s) l[n++] = (line){.s = s, .label = key, .color = palette[0]};
    if (strcmp(key, "loss") == 0 && (s = set_find(&r->scalar, "val_loss")))
        l[n++] = (line){.s = s, .label = "val_loss", .color = palette[1], .sparse = 1};
    chart c = {.id = id,
               .title = title,
               .ylabel = ylabel,
               .zero = zero,
               .scale = 1,
               .lines = l,
               .nlines = n,
               .legend = n > 1};
    return write_chart(o, r, &c);
}

/* Lines for every series of SET: colours in turn, a dash pattern after ten. */
static line *set_lines(const series_set *set, const char *dash_all) {
    line *l = calloc((size_t)(set->n ? set->n : 1), sizeof *l);
    if (!l) return NULL;
    for (int k = 0; k < set->n; k++) {
        l[k] = (line){.s = &set->s[k],
                      .label = set->s[k].name,
                      .color = palette[k % NPALETTE],
                      .dash = dash_all ? dash_all : dashes[(k / NPALETTE) % 4]};
    }
    return l;
}

static int write_memory_chart(FILE *o, const run *r) {
    int n = r->mem_alloc.n;
    line *l = calloc((size_t)(2 * n + 1), sizeof *l);
    if (!l) return fail("out of memory");
    for (int k = 0; k < n; k++) {
        const char *color =
            strcmp(r->mem_alloc.s[k].name, "total") == 0 ? "#222222" : palette[k % NPALETTE];
        l[2 * k] = (line){.s = &r->mem_alloc.s[k], .label = r->mem_alloc.s[k].name, .color = color};
        l[2 * k + 1] = (line){
            .s = &r->mem_peak.s[k], .label = r->mem_peak.s[k].name, .color = color, .dash = "5 3"};
    }
    chart c = {.id = "chart-memory",
               .title = "Memory by category",
               .ylabel = "MiB",
               .zero = 1,
               .scale = 1.0 / (1024 * 1024),
               .lines = l,
               .nlines = 2 * n,
               .legend = 2,
               .note = "Accounted allocator, rank 0: solid lines allocated at the end of the step, "
                       "dashed lines peak."};
    int rc = write_chart(o, r, &c);
    free(l);
    return rc;
}

static int write_set_chart(FILE *o, const run *r, const series_set *set, const char *id,
                           const char *title, const char *ylabel, const char *note, int logy,
                           const char *siunit) {
    line *l = set_lines(set, NULL);
    if (!l) return fail("out of memory");
    chart c = {.id = id,
               .title = title,
               .ylabel = ylabel,
               .note = note,
               .logy = logy,
               .zero = 1,
               .scale = 1,
               .siunit = siunit,
               .lines = l,
               .nlines = set->n,
               .legend = set->n > 1};
    int rc = write_chart(o, r, &c);
    free(l);
    return rc;
}

static void write_summary(FILE *o, const run *r) {
    char buf[64];
    const series *loss = set_find(&r->scalar, "loss");
    const series *val = set_find(&r->scalar, "val_loss");
    fprintf(o, "<table class=\"summary\">\n<tr><th>steps</th><th>first loss</th>"
               "<th>last loss</th>");
    if (val) fprintf(o, "<th>last val_loss</th>");
    fprintf(o, "<th>median tokens/s</th><th>median step</th><th>peak memory</th>"
               "<th>skipped steps</th>");
    if (r->stages > 1) fprintf(o, "<th>pipeline stages</th><th>median bubble</th>");
    fprintf(o, "</tr>\n<tr><td>%d", r->n);
    if (r->n > 1) fprintf(o, " <small>(%.15g–%.15g)</small>", r->step[0], r->step[r->n - 1]);
    fprintf(o, "</td>");
    double v[] = {first_finite(loss, 1), first_finite(loss, -1), first_finite(val, -1)};
    for (int k = 0; k < 3; k++) {
        if (k == 2 && !val) continue;
        if (isfinite(v[k]))
            fprintf(o, "<td>%.4f</td>", v[k]);
        else
            fprintf(o, "<td>–</td>");
    }
    double tps = median(set_find(&r->scalar, "tokens_per_s"));
    double ms = median(set_find(&r->scalar, "step_ms"));
    if (isfinite(tps)) {
        fmt_thousands(buf, sizeof buf, tps);
        fprintf(o, "<td>%s</td>", buf);
    } else
        fprintf(o, "<td>–</td>");
    if (isfinite(ms))
        fprintf(o, "<td>%.3g ms</td>", ms);
    else
        fprintf(o, "<td>–</td>");
    fmt_mib(buf, sizeof buf, r->peak_total > 0 ? r->peak_total : NAN);
    fprintf(o, "<td>%s</td><td>%d</td>", buf, r->skipped);
    if (r->stages > 1) {
        double sum = 0;
        int n = 0;
        for (int k = 0; k < r->bubble.n; k++) {
            double m = median(&r->bubble.s[k]);
            if (isfinite(m)) sum += m, n++;
        }
        fprintf(o, "<td>%d</td>", r->stages);
        if (n)
            fprintf(o, "<td>%.1f %%</td>", 100 * sum / n);
        else
            fprintf(o, "<td>–</td>");
    }
    fprintf(o, "</tr>\n</table>\n");
}

/* The last step's memory by category, and communication per step (mean)
 * when there is any. */
static void write_tables(FILE *o, const run *r) {
    char a[32], p[32];
    fprintf(o, "<div class=\"card\">\n<h2>Memory at the last step</h2>\n<table class=\"data\">"
               "<tr><th>category</th><th>allocated</th><th>peak</th></tr>\n");
    for (int k = 0; k < r->mem_alloc.n; k++) {
        fmt_mib(a, sizeof a, r->mem_alloc.s[k].v[r->n - 1]);
        fmt_mib(p, sizeof p, r->mem_peak.s[k].v[r->n - 1]);
        fprintf(o, "<tr><td>");
        html_text(o, r->mem_alloc.s[k].name);
        fprintf(o, "</td><td>%s</td><td>%s</td></tr>\n", a, p);
    }
    fprintf(o, "</table>\n</div>\n");

    if (r->comm_bytes.n == 0) return; /* the charts' cards say so */
    fprintf(o, "<div class=\"card\">\n<h2>Communication per step (mean over steps)</h2>\n");
    fprintf(o, "<table class=\"data\"><tr><th>group.op</th><th>calls</th><th>bytes</th>"
               "<th>time</th></tr>\n");
    for (int k = 0; k < r->comm_bytes.n; k++) {
        const series *set[] = {&r->comm_calls.s[k], &r->comm_bytes.s[k], &r->comm_secs.s[k]};
        double mean[3];
        for (int j = 0; j < 3; j++) {
            double sum = 0;
            int n = 0;
            for (int i = 0; i < r->n; i++)
                if (isfinite(set[j]->v[i])) sum += set[j]->v[i], n++;
            mean[j] = n ? sum / n : NAN;
        }
        fmt_si(a, sizeof a, mean[1], "B");
        fmt_si(p, sizeof p, mean[2], "s");
        fprintf(o, "<tr><td><i style=\"border-color:%s\"></i>", palette[k % NPALETTE]);
        html_text(o, r->comm_bytes.s[k].name);
        fprintf(o, "</td><td>%.3g</td><td>%s</td><td>%s</td></tr>\n", mean[0], a, p);
    }
    fprintf(o, "</table>\n</div>\n");
}

static const char *css =
    "*{box-sizing:border-box}\n"
    "body{margin:0;padding:20px 24px 32px;background:#f3f4f6;color:#1f2937;"
    "font:14px/1.4 system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif}\n"
    "header{max-width:1400px;margin:0 auto 14px}\n"
    "h1{font-size:20px;margin:0 0 2px}\n"
    "header .file{color:#4b5563;font-family:ui-monospace,Menlo,Consolas,monospace;"
    "font-size:13px;word-break:break-all}\n"
    "main{max-width:1400px;margin:0 auto;display:grid;"
    "grid-template-columns:repeat(2,minmax(0,1fr));gap:16px}\n"
    "@media (max-width:900px){main{grid-template-columns:minmax(0,1fr)}}\n"
    ".card{background:#fff;border:1px solid #e5e7eb;border-radius:8px;padding:12px 14px 10px}\n"
    ".card h2{font-size:15px;margin:0 0 4px}\n"
    ".wide{max-width:1400px;margin:0 auto 16px;overflow-x:auto}\n"
    "table.summary{border-collapse:collapse;width:100%;font-size:13px}\n"
    "table.summary th{text-align:left;font-weight:600;color:#6b7280;padding:2px 14px 2px 0;"
    "white-space:nowrap}\n"
    "table.summary td{font-size:17px;font-variant-numeric:tabular-nums;padding:2px 14px 2px 0;"
    "white-space:nowrap}\n"
    "table.data{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}\n"
    "table.data th,table.data td{padding:3px 16px 3px 0;text-align:right;"
    "border-bottom:1px solid #f0f0f0}\n"
    "table.data th:first-child,table.data td:first-child{text-align:left}\n"
    "table.data i{display:inline-block;width:14px;margin-right:6px;vertical-align:middle;"
    "border-top:3px solid}\n"
    ".legend{display:flex;flex-wrap:wrap;gap:2px 14px;font-size:12px;color:#374151;"
    "margin:0 0 2px}\n"
    ".legend span{white-space:nowrap}\n"
    ".legend i{display:inline-block;width:18px;margin-right:5px;vertical-align:middle;"
    "border-top:3px solid}\n"
    ".legend i.dash{border-top-style:dashed}\n"
    ".legend .key{color:#6b7280}\n"
    ".legend .key i{border-color:#6b7280}\n"
    "svg.chart{display:block;width:100%;height:auto;font-size:12px}\n"
    "svg.chart text{fill:#374151}\n"
    "svg.chart .yt{text-anchor:end;dominant-baseline:middle;font-size:11.5px}\n"
    "svg.chart .xt{text-anchor:middle;font-size:11.5px}\n"
    "svg.chart .xl,svg.chart .yl{text-anchor:middle;font-size:12px;fill:#4b5563}\n"
    "svg.chart .grid{stroke:#eceef1;stroke-width:1}\n"
    "svg.chart .axis{stroke:#9ca3af;stroke-width:1}\n"
    "svg.chart polyline{fill:none;stroke-width:1.8;stroke-linejoin:round;stroke-linecap:round}\n"
    "svg.empty text{text-anchor:middle;fill:#9ca3af;font-size:13px}\n"
    ".note{font-size:12px;color:#6b7280;margin:4px 0 0}\n";

static int write_report(FILE *o, const run *r, const char *name) {
    fprintf(o, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
               "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
               "<title>tessera report: ");
    html_text(o, name);
    fprintf(o, "</title>\n<style>\n%s</style>\n</head>\n<body>\n", css);
    fprintf(o, "<header><h1>tessera report</h1><div class=\"file\">");
    html_text(o, name);
    fprintf(o, "</div></header>\n<div class=\"card wide\">\n");
    write_summary(o, r);
    fprintf(o, "</div>\n<main>\n");

    if (write_scalar_chart(o, r, "chart-loss", "Loss", "cross-entropy (nats/token)", "loss", 0) <
            0 ||
        write_scalar_chart(o, r, "chart-lr", "Learning rate", "learning rate", "lr", 1) < 0 ||
        write_scalar_chart(o, r, "chart-grad-norm", "Gradient norm",
                           "global L2 norm (before clipping)", "grad_norm", 1) < 0 ||
        write_scalar_chart(o, r, "chart-tokens", "Throughput", "tokens/s", "tokens_per_s", 1) < 0 ||
        write_scalar_chart(o, r, "chart-step-ms", "Step time", "ms per step", "step_ms", 1) < 0 ||
        write_memory_chart(o, r) < 0)
        return -1;
    const char *none = "No communication recorded (one rank).";
    if (write_set_chart(o, r, &r->comm_bytes, "chart-comm-bytes", "Communication bytes by group.op",
                        "bytes per step (log scale)",
                        r->comm_bytes.n
                            ? "Per step, rank 0. Lines that coincide (a send and its recv) hide "
                              "one another: the table below lists each."
                            : none,
                        1, "B") < 0 ||
        write_set_chart(o, r, &r->comm_secs, "chart-comm-seconds", "Communication time by group.op",
                        "seconds per step (log scale)",
                        r->comm_secs.n ? "Per step, rank 0; time inside the call, waiting "
                                         "included."
                                       : none,
                        1, "s") < 0)
        return -1;
    if (r->stages > 1 &&
        write_set_chart(o, r, &r->bubble, "chart-bubble", "Pipeline bubble by stage",
                        "idle fraction of the step",
                        "The share of the step each stage spends waiting for its neighbours.", 0,
                        NULL) < 0)
        return -1;
    if (set_find(&r->scalar, "aux_loss") &&
        write_scalar_chart(o, r, "chart-moe-aux", "MoE auxiliary loss", "aux loss", "aux_loss", 1) <
            0)
        return -1;
    write_tables(o, r);
    fprintf(o, "</main>\n</body>\n</html>\n");
    return 0;
}

/* --- the command ---------------------------------------------------------- */

/* Writes the page to OUT through OUT.tmp.XXXXXX, fsync and rename(2). OUT
 * must be a regular file or a new path (through a symbolic link: the file
 * it leads to), never a FIFO, a device or a directory (file.h). */
static int write_atomically(const char *path, const run *r, const char *name) {
    char out[4096];
    if (ts_file_output_path(path, "--out", out, sizeof out) != TS_OK)
        return fail("%s", ts_last_error_bare());
    size_t len = strlen(out);
    char *tmp = malloc(len + 12);
    if (!tmp) return fail("out of memory");
    snprintf(tmp, len + 12, "%s.tmp.XXXXXX", out);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        fail("%s: cannot create a temporary file beside it: %s", out, strerror(errno));
        free(tmp);
        return -1;
    }
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask); /* as a plain fopen(w) would: mkstemp makes it 0600 */
    FILE *o = fdopen(fd, "w");
    int rc = 0;
    if (!o) {
        rc = fail("%s: %s", tmp, strerror(errno));
        close(fd);
    } else {
        rc = write_report(o, r, name);
        int werr = ferror(o) ? errno : 0;
        if (!werr && (fflush(o) != 0 || fsync(fileno(o)) != 0)) werr = errno ? errno : EIO;
        if (fclose(o) != 0 && !werr) werr = errno ? errno : EIO;
        if (rc == 0 && werr) rc = fail("%s: write failed: %s", tmp, strerror(werr));
    }
    if (rc == 0 && rename(tmp, out) != 0) rc = fail("%s: %s", out, strerror(errno));
    if (rc < 0) unlink(tmp);
    free(tmp);
    return rc;
}

/* METRICS with .jsonl replaced by .html, or with .html appended. */
static char *default_out(const char *in) {
    size_t len = strlen(in);
    char *out = malloc(len + 6);
    if (!out) return NULL;
    memcpy(out, in, len + 1);
    if (len > 6 && strcmp(in + len - 6, ".jsonl") == 0) out[len - 6] = '\0';
    strcat(out, ".html");
    return out;
}

/* The path as shown on the page: repeated slashes folded into one. */
static void display_name(char *buf, size_t size, const char *path) {
    size_t n = 0;
    for (const char *s = path; *s && n + 1 < size; s++)
        if (!(*s == '/' && n > 0 && buf[n - 1] == '/')) buf[n++] = *s;
    buf[n] = '\0';
}

int cmd_report(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_report, stdout);
            return 0;
        } else if (strcmp(a, "--out") == 0) {
            if (i + 1 >= argc || argv[i + 1][0] == '\0') {
                fprintf(stderr, "tessera report: --out needs a file name\n");
                return 2;
            }
            out = argv[++i];
        } else if (strncmp(a, "--out=", 6) == 0 && a[6]) {
            out = a + 6;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "tessera report: unknown option '%s'\n\n%s", a, usage_report);
            return 2;
        } else if (in) {
            fprintf(stderr, "tessera report: one metrics file only ('%s' and '%s')\n", in, a);
            return 2;
        } else {
            in = a;
        }
    }
    if (!in) {
        fputs(usage_report, stderr);
        return 2;
    }
    char *def = out ? NULL : default_out(in);
    if (!out && !def) {
        fprintf(stderr, "tessera report: out of memory\n");
        return 1;
    }
    if (!out) out = def;
    struct stat si, so;
    if (stat(in, &si) == 0 && stat(out, &so) == 0 && si.st_dev == so.st_dev &&
        si.st_ino == so.st_ino) {
        fprintf(stderr, "tessera report: %s: the output would replace the metrics file\n", out);
        free(def);
        return 2;
    }

    run r = {.scalar.fill = NAN, .mem_alloc.fill = NAN, .mem_peak.fill = NAN, .bubble.fill = NAN};
    char name[4096];
    display_name(name, sizeof name, in);
    int rc = read_metrics(in, &r);
    if (rc == 0) rc = write_atomically(out, &r, name);
    if (rc == 0)
        printf("tessera report: wrote %s (%d steps)\n", out, r.n);
    else
        fprintf(stderr, "tessera report: %s\n", errmsg);
    run_free(&r);
    free(def);
    return rc == 0 ? 0 : 1;
}
