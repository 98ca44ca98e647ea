/*
 * config.c — the INI configuration (see config.h for the contract): the key
 * schema, strict parsing of one file with inih, `--set` overrides, validation
 * of every entry against the schema and typed look-ups.
 *
 * inih is built without INI_HANDLER_LINENO, so the file is read into memory
 * and handed to ini_parse_stream one line at a time by our own reader, which
 * counts lines: while the handler runs, the current line is the last one read.
 * The reader also strips leading whitespace (so an indented line is never
 * taken as an inih multi-line continuation), rejects lines longer than inih's
 * buffer and text after a section header's ']', and records every section
 * header in file order (inih reports sections only through their keys).
 *
 * What it does not do: cross-key rules (their owners check them, naming the
 * place with ts_config_where), or merge several files.
 */
#include "config.h"
#include "run_config.h" /* the core's keys, one table */

#include "file.h"         /* ts_file_open_read */
#include "tessera/mesh.h" /* TS_MESH_DEFAULT_ORDER, the standard axes' order */

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <ini.h> /* ini_parse_stream, INI_MAX_LINE */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h> /* strcasecmp */

#define CFG_MSG 1024

typedef struct cfg_entry {
    char *section, *key, *value;
    int line;     /* line in the file; 0 when from --set        */
    int from_set; /* 1 if the value came from ts_config_set       */
} cfg_entry;

typedef struct cfg_section {
    char *name;
    int line; /* line of its first header; 0 when only named by --set */
} cfg_section;

struct ts_config {
    char *path;
    int loaded;
    ts_key_spec *specs;
    int nspecs, capspecs;
    cfg_entry *entries;
    int nentries, capentries;
    cfg_section *sections;
    int nsections, capsections;
};

/* ------------------------------------------------------------------------- */
/* small helpers                                                              */

static char *cfg_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static char *cfg_strndup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* A copy of s with surrounding whitespace removed. */
static char *cfg_trimdup(const char *s) {
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    return cfg_strndup(s, n);
}

static int cfg_grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 1;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return 0;
    *arr = p;
    *cap = nc;
    return 1;
}

static ts_status cfg_nomem(void) {
    return ts_error(TS_ERR_NOMEM, "config: out of memory");
}

/* 1 if `word` is one of the '|'-separated words of `choices`. */
static int cfg_choice_has(const char *choices, const char *word) {
    if (!choices) return 0;
    size_t wn = strlen(word);
    const char *p = choices;
    for (;;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == wn && strncmp(p, word, n) == 0) return 1;
        if (!bar) return 0;
        p = bar + 1;
    }
}

/* "a|b|c" as "a, b, c" into buf. */
static void cfg_choices_list(const char *choices, char *buf, size_t size) {
    size_t j = 0;
    for (const char *p = choices ? choices : ""; *p && j + 3 < size; p++) {
        if (*p == '|') {
            buf[j++] = ',';
            buf[j++] = ' ';
        } else {
            buf[j++] = *p;
        }
    }
    buf[j] = '\0';
}

/* ------------------------------------------------------------------------- */
/* value parsing                                                              */

/* Each returns NULL on success or a short reason. */
static const char *cfg_parse_int(const char *s, int64_t *out) {
    if (!*s) return "not an integer";
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || isspace((unsigned char)*s)) return "not an integer";
    if (errno == ERANGE) return "not a 64-bit integer";
    *out = (int64_t)v;
    return NULL;
}

static const char *cfg_parse_float(const char *s, double *out) {
    if (!*s) return "not a number";
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || isspace((unsigned char)*s)) return "not a number";
    if (!isfinite(v)) return "not a finite number";
    *out = v;
    return NULL;
}

static const char *cfg_parse_bool(const char *s, int *out) {
    static const char *yes[] = {"true", "yes", "on", "1"};
    static const char *no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return NULL;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return NULL;
        }
    }
    return "not a boolean (expected true/false, yes/no, on/off or 1/0)";
}

/* Shortest "%g" text that reads back as v. */
static void cfg_fmt_num(double v, char *buf, size_t size) {
    if (isinf(v)) {
        snprintf(buf, size, "%sinf", v < 0 ? "-" : "");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e18) {
        snprintf(buf, size, "%.0f", v == 0 ? 0.0 : v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* A bound written as an exclusive one when the float next to it (toward the
 * outside of the range) is written shorter: min = DBL_TRUE_MIN reads "> 0",
 * max = 1 - 2^-53 reads "< 1". Either form is exact. */
static int cfg_fmt_bound(double v, double toward, char *buf, size_t size) {
    cfg_fmt_num(v, buf, size);
    if (isinf(v)) return 0;
    char alt[64];
    cfg_fmt_num(nextafter(v, toward), alt, sizeof alt);
    if (strlen(alt) >= strlen(buf)) return 0;
    snprintf(buf, size, "%s", alt);
    return 1;
}

static void cfg_fmt_range(const ts_key_spec *sp, char *buf, size_t size) {
    char lo[64], hi[64];
    int lo_ex = cfg_fmt_bound(sp->min, -INFINITY, lo, sizeof lo);
    int hi_ex = cfg_fmt_bound(sp->max, INFINITY, hi, sizeof hi);
    if (isinf(sp->max) && sp->max > 0)
        snprintf(buf, size, "%s %s", lo_ex ? ">" : ">=", lo);
    else if (isinf(sp->min) && sp->min < 0)
        snprintf(buf, size, "%s %s", hi_ex ? "<" : "<=", hi);
    else
        snprintf(buf, size, "%s%s, %s%s", lo_ex ? "(" : "[", lo, hi, hi_ex ? ")" : "]");
}

static int cfg_has_range(const ts_key_spec *sp) {
    return sp->min <= sp->max;
}

/* Checks `value` against the spec. Returns 1 if valid; otherwise 0 with a
 * description such as `"abc": not an integer` written to why. */
static int cfg_check_value(const ts_key_spec *sp, const char *value, char *why, size_t size) {
    const char *err = NULL;
    double num = 0;
    switch (sp->type) {
    case TS_KEY_INT: {
        if (cfg_choice_has(sp->choices, value)) return 1;
        int64_t v;
        err = cfg_parse_int(value, &v);
        if (err && sp->choices) {
            char list[256];
            cfg_choices_list(sp->choices, list, sizeof list);
            snprintf(why, size, "\"%s\": %s (or %s)", value, err, list);
            return 0;
        }
        num = (double)v;
        break;
    }
    case TS_KEY_FLOAT: err = cfg_parse_float(value, &num); break;
    case TS_KEY_BOOL: {
        int b;
        err = cfg_parse_bool(value, &b);
        break;
    }
    case TS_KEY_STRING: return 1;
    case TS_KEY_ENUM:
        if (cfg_choice_has(sp->choices, value)) return 1;
        {
            char list[256];
            cfg_choices_list(sp->choices, list, sizeof list);
            snprintf(why, size, "\"%s\": expected one of %s", value, list);
        }
        return 0;
    default: snprintf(why, size, "unknown key type %d", (int)sp->type); return 0;
    }
    if (err) {
        snprintf(why, size, "\"%s\": %s", value, err);
        return 0;
    }
    if ((sp->type == TS_KEY_INT || sp->type == TS_KEY_FLOAT) && cfg_has_range(sp) &&
        (num < sp->min || num > sp->max)) {
        char range[160];
        cfg_fmt_range(sp, range, sizeof range);
        snprintf(why, size, "%s: out of range %s", value, range);
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------- */
/* schema                                                                     */

static const ts_key_spec cfg_core_keys[] = {
#define CFG_SPEC_(sec, key, type, def, min, max, choices, help)                                    \
    {#sec, #key, TS_KEY_##type, def, min, max, choices, help},
    TS_RUN_KEYS(CFG_SPEC_)
#undef CFG_SPEC_
#define CFG_CLUSTER_OP(link, op)                                                                   \
    {"cluster",                                                                                    \
     link "_" op "_bandwidth_gbs",                                                                 \
     TS_KEY_FLOAT,                                                                                 \
     "1",                                                                                          \
     1e-6,                                                                                         \
     1e9,                                                                                          \
     NULL,                                                                                         \
     "this collective's bus bandwidth " link "-node, GB/s (default: " link "_bandwidth_gbs)"},     \
    {                                                                                              \
        "cluster", link "_" op "_latency_us", TS_KEY_FLOAT, "0", 0, 1e8, NULL,                     \
            "this collective's latency " link "-node, us (default: " link "_latency_us)"           \
    }
        CFG_CLUSTER_OP("intra", "all_reduce"),
    CFG_CLUSTER_OP("intra", "all_gather"),
    CFG_CLUSTER_OP("intra", "reduce_scatter"),
    CFG_CLUSTER_OP("intra", "all_to_all"),
    CFG_CLUSTER_OP("intra", "broadcast"),
    CFG_CLUSTER_OP("intra", "send_recv"),
    CFG_CLUSTER_OP("inter", "all_reduce"),
    CFG_CLUSTER_OP("inter", "all_gather"),
    CFG_CLUSTER_OP("inter", "reduce_scatter"),
    CFG_CLUSTER_OP("inter", "all_to_all"),
    CFG_CLUSTER_OP("inter", "broadcast"),
    CFG_CLUSTER_OP("inter", "send_recv"),
#undef CFG_CLUSTER_OP
};

#define CFG_GET_INT ts_config_int
#define CFG_GET_FLOAT ts_config_float
#define CFG_GET_BOOL ts_config_bool
#define CFG_GET_STRING ts_config_str
#define CFG_GET_ENUM ts_config_str

void ts_run_config_fill(const ts_config *cfg, ts_run_config *out) {
#define CFG_FILL_(sec, key, type, def, min, max, choices, help)                                    \
    out->sec##_##key = CFG_GET_##type(cfg, #sec, #key);
    TS_RUN_KEYS(CFG_FILL_)
#undef CFG_FILL_
}

static const char *const cfg_recompute_words[] = {
#define CFG_WORD_(name, word) word,
    TS_RECOMPUTE_WORDS(CFG_WORD_)
#undef CFG_WORD_
};

const char *ts_recompute_word(int mode) {
    int n = (int)(sizeof cfg_recompute_words / sizeof cfg_recompute_words[0]);
    return mode >= 0 && mode < n ? cfg_recompute_words[mode] : "?";
}

int ts_recompute_from_word(const char *word) {
    int n = (int)(sizeof cfg_recompute_words / sizeof cfg_recompute_words[0]);
    for (int i = 0; word && i < n; i++)
        if (strcmp(word, cfg_recompute_words[i]) == 0) return i;
    return -1;
}

const ts_key_spec *ts_config_core_keys(int *n) {
    if (n) *n = (int)(sizeof cfg_core_keys / sizeof cfg_core_keys[0]);
    return cfg_core_keys;
}

static const ts_key_spec *cfg_find_spec(const ts_config *cfg, const char *section,
                                        const char *key) {
    for (int i = 0; i < cfg->nspecs; i++)
        if (strcmp(cfg->specs[i].section, section) == 0 && strcmp(cfg->specs[i].name, key) == 0)
            return &cfg->specs[i];
    return NULL;
}

static int cfg_section_known(const ts_config *cfg, const char *section) {
    for (int i = 0; i < cfg->nspecs; i++)
        if (strcmp(cfg->specs[i].section, section) == 0) return 1;
    return 0;
}

static void cfg_free_spec(ts_key_spec *sp) {
    free((char *)sp->section);
    free((char *)sp->name);
    free((char *)sp->def);
    free((char *)sp->choices);
    free((char *)sp->help);
}

ts_status ts_config_create(ts_config **out) {
    ts_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return cfg_nomem();
    cfg->path = cfg_strdup("");
    if (!cfg->path) {
        free(cfg);
        return cfg_nomem();
    }
    *out = cfg;
    return TS_OK;
}

void ts_config_destroy(ts_config *cfg) {
    if (!cfg) return;
    for (int i = 0; i < cfg->nspecs; i++)
        cfg_free_spec(&cfg->specs[i]);
    for (int i = 0; i < cfg->nentries; i++) {
        free(cfg->entries[i].section);
        free(cfg->entries[i].key);
        free(cfg->entries[i].value);
    }
    for (int i = 0; i < cfg->nsections; i++)
        free(cfg->sections[i].name);
    free(cfg->specs);
    free(cfg->entries);
    free(cfg->sections);
    free(cfg->path);
    free(cfg);
}

ts_status ts_config_register(ts_config *cfg, const ts_key_spec *specs, int n) {
    for (int i = 0; i < n; i++) {
        const ts_key_spec *sp = &specs[i];
        if (!sp->section || !*sp->section || !sp->name || !*sp->name)
            return ts_error(TS_ERR_INVALID, "config: key spec %d has no section or name", i);
        if (cfg_find_spec(cfg, sp->section, sp->name))
            return ts_error(TS_ERR_INVALID, "config: key [%s] %s is registered twice", sp->section,
                            sp->name);
        for (int j = 0; j < i; j++)
            if (strcmp(specs[j].section, sp->section) == 0 && strcmp(specs[j].name, sp->name) == 0)
                return ts_error(TS_ERR_INVALID, "config: key [%s] %s is registered twice",
                                sp->section, sp->name);
        if ((int)sp->type < TS_KEY_INT || sp->type > TS_KEY_ENUM)
            return ts_error(TS_ERR_INVALID, "config: key [%s] %s has unknown type %d", sp->section,
                            sp->name, (int)sp->type);
        if (sp->type == TS_KEY_INT && sp->choices && strcmp(sp->choices, "auto") != 0)
            return ts_error(TS_ERR_INVALID,
                            "config: integer key [%s] %s has choices \"%s\"; the only word an "
                            "integer key accepts is \"auto\"",
                            sp->section, sp->name, sp->choices);
        if (sp->type == TS_KEY_ENUM && (!sp->choices || !*sp->choices))
            return ts_error(TS_ERR_INVALID, "config: enum key [%s] %s has no choices", sp->section,
                            sp->name);
        char why[CFG_MSG];
        if (sp->def && !cfg_check_value(sp, sp->def, why, sizeof why))
            return ts_error(TS_ERR_INVALID, "config: default of [%s] %s is invalid: %s",
                            sp->section, sp->name, why);
    }
    if (!cfg_grow((void **)&cfg->specs, &cfg->capspecs, cfg->nspecs + n, sizeof *cfg->specs))
        return cfg_nomem();
    for (int i = 0; i < n; i++) {
        ts_key_spec c = specs[i];
        c.section = cfg_strdup(specs[i].section);
        c.name = cfg_strdup(specs[i].name);
        c.def = cfg_strdup(specs[i].def);
        c.choices = cfg_strdup(specs[i].choices);
        c.help = cfg_strdup(specs[i].help ? specs[i].help : "");
        if (!c.section || !c.name || (specs[i].def && !c.def) || (specs[i].choices && !c.choices) ||
            !c.help) {
            cfg_free_spec(&c);
            return cfg_nomem();
        }
        cfg->specs[cfg->nspecs++] = c;
    }
    return TS_OK;
}

/* ------------------------------------------------------------------------- */
/* entries                                                                    */

static cfg_entry *cfg_find_entry(const ts_config *cfg, const char *section, const char *key) {
    for (int i = 0; i < cfg->nentries; i++)
        if (strcmp(cfg->entries[i].section, section) == 0 && strcmp(cfg->entries[i].key, key) == 0)
            return &cfg->entries[i];
    return NULL;
}

static ts_status cfg_add_section(ts_config *cfg, const char *name, int line) {
    for (int i = 0; i < cfg->nsections; i++)
        if (strcmp(cfg->sections[i].name, name) == 0) return TS_OK;
    if (!cfg_grow((void **)&cfg->sections, &cfg->capsections, cfg->nsections + 1,
                  sizeof *cfg->sections))
        return cfg_nomem();
    char *copy = cfg_strdup(name);
    if (!copy) return cfg_nomem();
    cfg->sections[cfg->nsections].name = copy;
    cfg->sections[cfg->nsections].line = line;
    cfg->nsections++;
    return TS_OK;
}

/* Sets or replaces an entry. */
static ts_status cfg_put(ts_config *cfg, const char *section, const char *key, const char *value,
                         int line, int from_set) {
    cfg_entry *e = cfg_find_entry(cfg, section, key);
    char *v = cfg_strdup(value);
    if (!v) return cfg_nomem();
    if (e) {
        free(e->value);
        e->value = v;
        e->line = line;
        e->from_set = from_set;
        return TS_OK;
    }
    if (!cfg_grow((void **)&cfg->entries, &cfg->capentries, cfg->nentries + 1,
                  sizeof *cfg->entries)) {
        free(v);
        return cfg_nomem();
    }
    e = &cfg->entries[cfg->nentries];
    e->section = cfg_strdup(section);
    e->key = cfg_strdup(key);
    e->value = v;
    e->line = line;
    e->from_set = from_set;
    if (!e->section || !e->key) {
        free(e->section);
        free(e->key);
        free(v);
        return cfg_nomem();
    }
    cfg->nentries++;
    return TS_OK;
}

/* ------------------------------------------------------------------------- */
/* loading                                                                    */

typedef struct cfg_reader {
    ts_config *cfg;
    const char *buf, *pos, *end;
    int lineno;         /* lines handed to inih so far = the current line      */
    int err_line;       /* first error found by the reader or the handler      */
    char err[CFG_MSG];  /* its message (without the "file:line: " prefix)      */
    ts_status err_code; /* TS_ERR_CONFIG, or TS_ERR_NOMEM                      */
} cfg_reader;

static void cfg_reader_fail(cfg_reader *r, ts_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cfg_reader_fail(cfg_reader *r, ts_status code, const char *fmt, ...) {
    if (r->err_line) return;
    r->err_line = r->lineno;
    r->err_code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

/* Hands inih one physical line, without leading whitespace or line end. */
static char *cfg_read_line(char *str, int num, void *stream) {
    cfg_reader *r = stream;
    if (r->pos >= r->end) return NULL;
    const char *nl = memchr(r->pos, '\n', (size_t)(r->end - r->pos));
    const char *stop = nl ? nl : r->end;
    const char *s = r->pos;
    r->pos = nl ? nl + 1 : r->end;
    r->lineno++;
    if (r->lineno == 1 && stop - s >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3;
    while (s < stop && (*s == ' ' || *s == '\t'))
        s++;
    while (stop > s && (stop[-1] == '\r' || stop[-1] == ' ' || stop[-1] == '\t'))
        stop--;
    size_t n = (size_t)(stop - s);
    if (n + 1 > (size_t)num) {
        cfg_reader_fail(r, TS_ERR_CONFIG, "line is longer than %d characters", num - 1);
        str[0] = '\0'; /* hand inih a blank line */
        return str;
    }
    memcpy(str, s, n);
    str[n] = '\0';
    if (memchr(str, '\0', n)) {
        cfg_reader_fail(r, TS_ERR_CONFIG, "line contains a NUL byte");
        str[0] = '\0';
        return str;
    }
    if (str[0] == '[') {
        char *close = strchr(str, ']');
        if (close) {
            const char *rest = close + 1;
            while (*rest == ' ' || *rest == '\t')
                rest++;
            if (*rest && *rest != ';' && *rest != '#') {
                cfg_reader_fail(r, TS_ERR_CONFIG, "unexpected text '%s' after section header",
                                rest);
                return str;
            }
            char *name = cfg_strndup(str + 1, (size_t)(close - str - 1));
            char *trimmed = name ? cfg_trimdup(name) : NULL;
            free(name);
            if (!trimmed) {
                cfg_reader_fail(r, TS_ERR_NOMEM, "out of memory");
                return str;
            }
            if (!*trimmed)
                cfg_reader_fail(r, TS_ERR_CONFIG, "empty section name []");
            else if (cfg_add_section(r->cfg, trimmed, r->lineno) != TS_OK)
                cfg_reader_fail(r, TS_ERR_NOMEM, "out of memory");
            free(trimmed);
        }
    }
    return str;
}

static int cfg_handler(void *user, const char *section, const char *name, const char *value) {
    cfg_reader *r = user;
    ts_config *cfg = r->cfg;
    char *sec = cfg_trimdup(section);
    char *key = cfg_trimdup(name);
    int ok = 0;
    if (!sec || !key) {
        cfg_reader_fail(r, TS_ERR_NOMEM, "out of memory");
    } else if (!*key) {
        cfg_reader_fail(r, TS_ERR_CONFIG, "a value without a key (expected key = value)");
    } else if (!*sec) {
        cfg_reader_fail(r, TS_ERR_CONFIG,
                        "key '%s' is outside any section (put it under a [section] header)", key);
    } else {
        cfg_entry *e = cfg_find_entry(cfg, sec, key);
        if (e && !e->from_set) {
            cfg_reader_fail(r, TS_ERR_CONFIG, "[%s] %s is given twice (first at line %d)", sec, key,
                            e->line);
        } else if (e && e->from_set) {
            ok = 1; /* an earlier --set wins over the file */
        } else if (cfg_put(cfg, sec, key, value, r->lineno, 0) != TS_OK) {
            cfg_reader_fail(r, TS_ERR_NOMEM, "out of memory");
        } else {
            ok = 1;
        }
    }
    free(sec);
    free(key);
    return ok;
}

/* The text of line `line` (1-based) of buf, leading whitespace removed. */
static void cfg_line_text(const char *buf, size_t len, int line, char *out, size_t size) {
    const char *p = buf, *end = buf + len;
    for (int l = 1; l < line && p < end; l++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    size_t n = 0;
    while (p + n < end && p[n] != '\n' && p[n] != '\r' && n + 1 < size)
        n++;
    memcpy(out, p, n);
    out[n] = '\0';
    if (n > 60) strcpy(out + 57, "...");
}

ts_status ts_config_load(ts_config *cfg, const char *path) {
    if (cfg->loaded)
        return ts_error(TS_ERR_INVALID, "config: %s: a configuration file is already loaded (%s)",
                        path, cfg->path);
    FILE *f;
    TS_TRY(ts_file_open_read(path, "config file", &f));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int read_err = ferror(f);
    fclose(f);
    if (!buf) return cfg_nomem();
    if (read_err) {
        free(buf);
        return ts_error(TS_ERR_IO, "config: cannot read %s", path);
    }
    char *p = cfg_strdup(path);
    if (!p) {
        free(buf);
        return cfg_nomem();
    }
    free(cfg->path);
    cfg->path = p;
    cfg->loaded = 1;

    cfg_reader r = {0};
    r.cfg = cfg;
    r.buf = r.pos = buf;
    r.end = buf + len;
    int bad = ini_parse_stream(cfg_read_line, &r, cfg_handler, &r);
    ts_status st = TS_OK;
    if (bad < 0) {
        st = ts_error(TS_ERR_NOMEM, "config: %s: inih could not allocate its line buffer", path);
    } else if (r.err_line && (bad == 0 || r.err_line <= bad)) {
        st = ts_error(r.err_code, "%s:%d: %s", path, r.err_line, r.err);
    } else if (bad > 0) {
        char text[256];
        cfg_line_text(buf, len, bad, text, sizeof text);
        if (text[0] == '[')
            st = ts_error(TS_ERR_CONFIG, "%s:%d: section header '%s' has no closing ']'", path, bad,
                          text);
        else
            st = ts_error(TS_ERR_CONFIG,
                          "%s:%d: cannot parse '%s' (expected [section], key = value or a ; "
                          "comment)",
                          path, bad, text);
    }
    free(buf);
    return st;
}

ts_status ts_config_set(ts_config *cfg, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    const char *dot = eq ? memchr(assignment, '.', (size_t)(eq - assignment)) : NULL;
    if (!eq || !dot)
        return ts_error(TS_ERR_CONFIG, "--set \"%s\": expected section.key=value", assignment);
    char *sec = cfg_strndup(assignment, (size_t)(dot - assignment));
    char *key = cfg_strndup(dot + 1, (size_t)(eq - dot - 1));
    char *tsec = sec ? cfg_trimdup(sec) : NULL;
    char *tkey = key ? cfg_trimdup(key) : NULL;
    char *tval = cfg_trimdup(eq + 1);
    free(sec);
    free(key);
    ts_status st = TS_OK;
    if (!tsec || !tkey || !tval) {
        st = cfg_nomem();
    } else if (!*tsec || !*tkey) {
        st = ts_error(TS_ERR_CONFIG, "--set \"%s\": expected section.key=value (empty %s)",
                      assignment, *tsec ? "key" : "section");
    } else if (strpbrk(tsec, " \t[]") || strpbrk(tkey, " \t[]")) {
        st = ts_error(TS_ERR_CONFIG,
                      "--set \"%s\": expected section.key=value (no spaces or brackets in the "
                      "section or key)",
                      assignment);
    } else {
        st = cfg_add_section(cfg, tsec, 0);
        if (st == TS_OK) st = cfg_put(cfg, tsec, tkey, tval, 0, 1);
    }
    free(tsec);
    free(tkey);
    free(tval);
    return st;
}

/* "tiny.ini:12" or "--set" into buf. */
static const char *cfg_origin(const ts_config *cfg, int from_set, int line, char *buf,
                              size_t size) {
    if (from_set || line <= 0)
        snprintf(buf, size, "%s", from_set || !*cfg->path ? "--set" : cfg->path);
    else
        snprintf(buf, size, "%s:%d", cfg->path, line);
    return buf;
}

/* The edit distance of a and b, capped at 3 (enough for a suggestion). */
static int cfg_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 3;
    int d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb] < 3 ? d[la][lb] : 3;
}

ts_status ts_config_validate(const ts_config *cfg) {
    char where[1200], list[1024];
    for (int i = 0; i < cfg->nsections; i++) {
        const cfg_section *s = &cfg->sections[i];
        if (cfg_section_known(cfg, s->name)) continue;
        size_t j = 0;
        list[0] = '\0';
        for (int k = 0; k < cfg->nspecs && j + 40 < sizeof list; k++) {
            int seen = 0;
            for (int m = 0; m < k; m++)
                if (strcmp(cfg->specs[m].section, cfg->specs[k].section) == 0) seen = 1;
            if (seen) continue;
            j += (size_t)snprintf(list + j, sizeof list - j, "%s%s", j ? ", " : "",
                                  cfg->specs[k].section);
        }
        return ts_error(TS_ERR_CONFIG, "%s: unknown section [%s] (known: %s)",
                        cfg_origin(cfg, s->line == 0, s->line, where, sizeof where), s->name, list);
    }
    for (int i = 0; i < cfg->nentries; i++) {
        const cfg_entry *e = &cfg->entries[i];
        cfg_origin(cfg, e->from_set, e->line, where, sizeof where);
        const ts_key_spec *sp = cfg_find_spec(cfg, e->section, e->key);
        if (!sp) {
            size_t j = 0;
            const char *best = NULL;
            int best_d = 3;
            list[0] = '\0';
            for (int k = 0; k < cfg->nspecs; k++) {
                if (strcmp(cfg->specs[k].section, e->section) != 0) continue;
                if (j + 40 < sizeof list)
                    j += (size_t)snprintf(list + j, sizeof list - j, "%s%s", j ? ", " : "",
                                          cfg->specs[k].name);
                int d = cfg_distance(e->key, cfg->specs[k].name);
                if (d < best_d) {
                    best_d = d;
                    best = cfg->specs[k].name;
                }
            }
            char hint[128] = "";
            if (best) snprintf(hint, sizeof hint, "; did you mean '%s'?", best);
            return ts_error(TS_ERR_CONFIG, "%s: unknown key '%s' in [%s] (known: %s)%s", where,
                            e->key, e->section, list, hint);
        }
        char why[CFG_MSG];
        if (!cfg_check_value(sp, e->value, why, sizeof why))
            return ts_error(TS_ERR_CONFIG, "%s: [%s] %s = %s (%s)", where, e->section, e->key, why,
                            sp->help);
    }
    for (int k = 0; k < cfg->nspecs; k++) {
        const ts_key_spec *sp = &cfg->specs[k];
        if (sp->def || cfg_find_entry(cfg, sp->section, sp->name)) continue;
        return ts_error(TS_ERR_CONFIG, "%s: [%s] %s is required (%s)",
                        *cfg->path ? cfg->path : "config", sp->section, sp->name, sp->help);
    }
    return TS_OK;
}

/* ------------------------------------------------------------------------- */
/* look-ups                                                                   */

/* The text of a key: its entry's value, or its default. */
static const char *cfg_text(const ts_config *cfg, const char *section, const char *key,
                            const ts_key_spec **spec) {
    const ts_key_spec *sp = cfg_find_spec(cfg, section, key);
    TS_ASSERT(sp != NULL); /* look-ups are for keys in the schema */
    const cfg_entry *e = cfg_find_entry(cfg, section, key);
    const char *text = e ? e->value : sp->def;
    TS_ASSERT(text != NULL); /* a required key is missing: validate first */
    if (spec) *spec = sp;
    return text;
}

int64_t ts_config_int(const ts_config *cfg, const char *section, const char *key) {
    const ts_key_spec *sp;
    const char *text = cfg_text(cfg, section, key, &sp);
    TS_ASSERT(sp->type == TS_KEY_INT);
    if (strcmp(text, "auto") == 0 && cfg_choice_has(sp->choices, "auto")) return -1;
    int64_t v = 0;
    TS_ASSERT(cfg_parse_int(text, &v) == NULL); /* validate first */
    return v;
}

double ts_config_float(const ts_config *cfg, const char *section, const char *key) {
    const ts_key_spec *sp;
    const char *text = cfg_text(cfg, section, key, &sp);
    TS_ASSERT(sp->type == TS_KEY_FLOAT || sp->type == TS_KEY_INT);
    double v = 0;
    TS_ASSERT(cfg_parse_float(text, &v) == NULL); /* validate first */
    return v;
}

int ts_config_bool(const ts_config *cfg, const char *section, const char *key) {
    const ts_key_spec *sp;
    const char *text = cfg_text(cfg, section, key, &sp);
    TS_ASSERT(sp->type == TS_KEY_BOOL);
    int v = 0;
    TS_ASSERT(cfg_parse_bool(text, &v) == NULL); /* validate first */
    return v;
}

const char *ts_config_str(const ts_config *cfg, const char *section, const char *key) {
    return cfg_text(cfg, section, key, NULL);
}

int ts_config_has(const ts_config *cfg, const char *section, const char *key) {
    return cfg_find_entry(cfg, section, key) != NULL;
}

const char *ts_config_where(const ts_config *cfg, const char *section, const char *key, char *buf,
                            int size) {
    if (size <= 0) return buf;
    const cfg_entry *e = cfg_find_entry(cfg, section, key);
    if (!e)
        snprintf(buf, (size_t)size, "default [%s] %s", section, key);
    else if (e->from_set)
        snprintf(buf, (size_t)size, "--set [%s] %s", section, key);
    else
        snprintf(buf, (size_t)size, "%s:%d [%s] %s", cfg->path, e->line, section, key);
    return buf;
}

/* One key's canonical value into buf. */
static void cfg_canonical_value(const ts_key_spec *sp, const char *text, char *buf, size_t size) {
    int64_t i;
    double d;
    int b;
    if (sp->type == TS_KEY_INT && !cfg_choice_has(sp->choices, text) && !cfg_parse_int(text, &i))
        snprintf(buf, size, "%lld", (long long)i);
    else if (sp->type == TS_KEY_FLOAT && !cfg_parse_float(text, &d))
        cfg_fmt_num(d, buf, size); /* the shortest text that reads back as d */
    else if (sp->type == TS_KEY_BOOL && !cfg_parse_bool(text, &b))
        snprintf(buf, size, "%s", b ? "true" : "false");
    else
        snprintf(buf, size, "%s", text);
}

static int cfg_cmp_lines(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char *ts_config_canonical(const ts_config *cfg) {
    char **lines = calloc((size_t)cfg->nspecs + 1, sizeof *lines);
    size_t total = 1;
    int n = 0, ok = lines != NULL;
    for (int k = 0; ok && k < cfg->nspecs; k++) {
        const ts_key_spec *sp = &cfg->specs[k];
        const cfg_entry *e = cfg_find_entry(cfg, sp->section, sp->name);
        const char *text = e ? e->value : sp->def ? sp->def : "";
        char value[CFG_MSG];
        cfg_canonical_value(sp, text, value, sizeof value);
        size_t len = strlen(sp->section) + strlen(sp->name) + strlen(value) + 3;
        lines[n] = malloc(len);
        if (!lines[n]) {
            ok = 0;
            break;
        }
        snprintf(lines[n], len, "%s.%s=%s", sp->section, sp->name, value);
        total += len;
        n++;
    }
    char *out = ok ? malloc(total) : NULL;
    if (out) {
        qsort(lines, (size_t)n, sizeof *lines, cfg_cmp_lines);
        size_t pos = 0;
        for (int k = 0; k < n; k++)
            pos += (size_t)sprintf(out + pos, "%s\n", lines[k]);
        out[pos] = '\0';
    }
    for (int k = 0; lines && k < n; k++)
        free(lines[k]);
    free(lines);
    return out;
}

const char *ts_config_path(const ts_config *cfg) {
    return cfg->path;
}

int ts_config_num_sections(const ts_config *cfg) {
    return cfg->nsections;
}

const char *ts_config_section(const ts_config *cfg, int i) {
    TS_ASSERT(i >= 0 && i < cfg->nsections);
    return cfg->sections[i].name;
}

int ts_config_num_specs(const ts_config *cfg) {
    return cfg->nspecs;
}

const ts_key_spec *ts_config_spec(const ts_config *cfg, int i) {
    TS_ASSERT(i >= 0 && i < cfg->nspecs);
    return &cfg->specs[i];
}
