/*
 * schedule_file.c — reading, checking and emitting a hand-written pipeline
 * schedule (schedule_file.h). libc only: linked into tessera-pp.so.
 */
#include "schedule_file.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes the reason; returns 1 (the loader's failure). */
static int why_set(char *why, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, size, fmt, ap);
    va_end(ap);
    return 1;
}

void pp_schedule_file_free(pp_schedule_file *f) {
    for (int r = 0; f->acts && r < f->ranks; r++)
        free(f->acts[r]);
    free(f->acts);
    free(f->count);
    memset(f, 0, sizeof *f);
}

/* Appends an action to rank r (growing its array at powers of two). */
static int file_push(pp_schedule_file *f, int r, const pp_file_action *a) {
    int n = f->count[r];
    if (n == 0 || (n & (n - 1)) == 0) {
        pp_file_action *g = realloc(f->acts[r], sizeof *g * (size_t)(n ? 2 * n : 1));
        if (!g) return 1;
        f->acts[r] = g;
    }
    f->acts[r][n] = *a;
    f->count[r] = n + 1;
    return 0;
}

/* A new rank line: the arrays one longer. */
static int file_add_rank(pp_schedule_file *f) {
    int *c = realloc(f->count, sizeof *c * (size_t)(f->ranks + 1));
    if (!c) return 1;
    f->count = c;
    pp_file_action **a = realloc(f->acts, sizeof *a * (size_t)(f->ranks + 1));
    if (!a) return 1;
    f->acts = a;
    f->count[f->ranks] = 0;
    f->acts[f->ranks] = NULL;
    f->ranks++;
    return 0;
}

/* Parses one token ("F12", "BW3.1") into *a; 0, or 1 if malformed. */
static int file_token(const char *t, size_t n, pp_file_action *a) {
    size_t i = 0;
    if (n >= 2 && t[0] == 'B' && t[1] == 'W')
        a->op = 'X', i = 2;
    else if (n >= 1 && (t[0] == 'F' || t[0] == 'B' || t[0] == 'W'))
        a->op = t[0], i = 1;
    else
        return 1;
    long mb = 0, chunk = 0;
    size_t d = i;
    while (i < n && isdigit((unsigned char)t[i]) && mb < 1000000)
        mb = mb * 10 + (t[i++] - '0');
    if (i == d) return 1;
    if (i < n && t[i] == '.') {
        size_t c0 = ++i;
        while (i < n && isdigit((unsigned char)t[i]) && chunk < 1024)
            chunk = chunk * 10 + (t[i++] - '0');
        if (i == c0) return 1;
    }
    if (i != n || mb >= 1000000 || chunk >= 1024) return 1;
    a->mb = (int)mb;
    a->chunk = (int)chunk;
    snprintf(a->text, sizeof a->text, "%.*s", (int)(n < 23 ? n : 23), t);
    return 0;
}

/* The syntax: `order` first if at all, then `rank N:` lines in order. */
static int file_parse(FILE *in, const char *path, pp_schedule_file *f, char *why, size_t size) {
    char line[65536];
    int lineno = 0, seen_rank = 0;
    f->order = TS_STAGES_INTERLEAVED;
    while (fgets(line, sizeof line, in)) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n')
            return why_set(why, size, "%s:%d: a line longer than %zu characters", path, lineno,
                           sizeof line - 2);
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *c = line;
        while (isspace((unsigned char)*c))
            c++;
        if (!*c) continue;
        if (strncmp(c, "order", 5) == 0 && isspace((unsigned char)c[5])) {
            char word[32] = "";
            sscanf(c + 5, "%31s", word);
            if (seen_rank)
                return why_set(why, size, "%s:%d: 'order' after the first rank's line", path,
                               lineno);
            if (strcmp(word, "v") == 0)
                f->order = TS_STAGES_V;
            else if (strcmp(word, "interleaved") != 0)
                return why_set(why, size, "%s:%d: order '%s' is not interleaved or v", path, lineno,
                               word);
            continue;
        }
        int r = -1, used = 0;
        if (sscanf(c, "rank %d :%n", &r, &used) < 1 || used == 0)
            return why_set(why, size,
                           "%s:%d: expected 'rank %d: <actions>' (or 'order interleaved|v' "
                           "before it)",
                           path, lineno, f->ranks);
        if (r != f->ranks)
            return why_set(why, size, "%s:%d: rank %d's line, where rank %d's is next", path,
                           lineno, r, f->ranks);
        if (file_add_rank(f)) return why_set(why, size, "%s: out of memory", path);
        seen_rank = 1;
        for (c += used;;) {
            while (isspace((unsigned char)*c))
                c++;
            if (!*c) break;
            size_t n = 0;
            while (c[n] && !isspace((unsigned char)c[n]))
                n++;
            pp_file_action a = {.line = lineno};
            if (file_token(c, n, &a))
                return why_set(why, size,
                               "%s:%d: '%.*s' (rank %d, action %d) is not F, B, W or BW followed "
                               "by a micro-batch (and '.chunk' with several chunks)",
                               path, lineno, (int)(n < 40 ? n : 40), c, r, f->count[r]);
            if (file_push(f, r, &a)) return why_set(why, size, "%s: out of memory", path);
            if (a.mb + 1 > f->micro_batches) f->micro_batches = a.mb + 1;
            if (a.chunk + 1 > f->chunks) f->chunks = a.chunk + 1;
            c += n;
        }
        if (f->count[r] == 0)
            return why_set(why, size, "%s:%d: rank %d has no actions", path, lineno, r);
    }
    if (ferror(in)) return why_set(why, size, "%s: read error", path);
    if (f->ranks == 0) return why_set(why, size, "%s: no 'rank 0: ...' line", path);
    if (f->order == TS_STAGES_V && f->chunks != 2)
        return why_set(why, size, "%s: order v needs two chunks per rank; the file names %d", path,
                       f->chunks);
    return 0;
}

/* Each rank: every (micro-batch, chunk) once F, once B or BW, once W after
 * a B (none after BW), in that order. */
static int file_check_ranks(const pp_schedule_file *f, const char *path, char *why, size_t size) {
    int m = f->micro_batches, v = f->chunks;
    int *at = malloc(sizeof *at * (size_t)m * (size_t)v * 3);
    if (!at) return why_set(why, size, "%s: out of memory", path);
    int bad = 0;
    for (int r = 0; r < f->ranks && !bad; r++) {
        for (int k = 0; k < m * v * 3; k++)
            at[k] = -1;
        for (int i = 0; i < f->count[r] && !bad; i++) {
            const pp_file_action *a = &f->acts[r][i];
            int key = (a->chunk * m + a->mb) * 3;
            int slot = a->op == 'F' ? 0 : a->op == 'W' ? 2 : 1;
            const char *what = a->op == 'F' ? "forward" : a->op == 'W' ? "weight part" : "backward";
            if (at[key + slot] >= 0)
                bad = why_set(why, size,
                              "%s:%d: '%s' (rank %d, action %d): the %s of micro-batch %d "
                              "chunk %d runs twice (first at action %d)",
                              path, a->line, a->text, r, i, what, a->mb, a->chunk, at[key + slot]);
            else if (slot == 1 && at[key] < 0)
                bad = why_set(why, size,
                              "%s:%d: '%s' (rank %d, action %d): backward before its "
                              "forward F%d",
                              path, a->line, a->text, r, i, a->mb);
            else if (slot == 2 && at[key + 1] < 0)
                bad = why_set(why, size,
                              "%s:%d: '%s' (rank %d, action %d): weight part before "
                              "its B%d",
                              path, a->line, a->text, r, i, a->mb);
            else if (slot == 2 && f->acts[r][at[key + 1]].op == 'X')
                bad = why_set(why, size,
                              "%s:%d: '%s' (rank %d, action %d): BW%d computed the "
                              "weight gradients already",
                              path, a->line, a->text, r, i, a->mb);
            at[key + slot] = i;
        }
        int line = r < f->ranks && f->count[r] ? f->acts[r][0].line : 0;
        for (int c = 0; c < v && !bad; c++)
            for (int mb = 0; mb < m && !bad; mb++) {
                int key = (c * m + mb) * 3;
                const char *sfx = v > 1 ? "." : "";
                char chunk[16] = "";
                if (v > 1) snprintf(chunk, sizeof chunk, "%d", c);
                if (at[key] < 0)
                    bad = why_set(why, size, "%s:%d: rank %d never runs F%d%s%s", path, line, r, mb,
                                  sfx, chunk);
                else if (at[key + 1] < 0)
                    bad = why_set(why, size, "%s:%d: rank %d never runs B%d%s%s or BW%d%s%s", path,
                                  line, r, mb, sfx, chunk, mb, sfx, chunk);
                else if (f->acts[r][at[key + 1]].op == 'B' && at[key + 2] < 0)
                    bad = why_set(why, size,
                                  "%s:%d: rank %d never runs W%d%s%s (the weight part of its "
                                  "action %d, '%s')",
                                  path, line, r, mb, sfx, chunk, at[key + 1],
                                  f->acts[r][at[key + 1]].text);
            }
    }
    free(at);
    return bad;
}

/* The ranks together, each running its list in order, one unit per
 * computation: a forward waits for the previous virtual stage's forward of
 * its micro-batch, a backward for the next one's backward (the last stage's
 * for its own forward), a weight part for its backward (on the rank
 * already). Fails naming the first rank stuck and what it waits for. */
static int file_check_together(const pp_schedule_file *f, const char *path, char *why,
                               size_t size) {
    int p = f->ranks, m = f->micro_batches, v = f->chunks, V = p * v;
    long *fwd = calloc((size_t)V * (size_t)m, sizeof *fwd),
         *bwd = calloc((size_t)V * m, sizeof *bwd);
    long *clock = calloc((size_t)p, sizeof *clock);
    int *pc = calloc((size_t)p, sizeof *pc);
    int bad = !fwd || !bwd || !clock || !pc ? why_set(why, size, "%s: out of memory", path) : 0;
    for (int progress = 1; !bad && progress;) {
        progress = 0;
        for (int r = 0; r < p; r++)
            for (; pc[r] < f->count[r]; pc[r]++) {
                const pp_file_action *a = &f->acts[r][pc[r]];
                int k = ts_stage_virtual(f->order, p, r, a->chunk);
                long dep = 0; /* when what it waits for ended (0: not yet) */
                if (a->op == 'F')
                    dep = k == 0 ? 1 : fwd[(size_t)(k - 1) * m + a->mb];
                else if (a->op == 'W')
                    dep = 1;
                else
                    dep =
                        k == V - 1 ? fwd[(size_t)k * m + a->mb] : bwd[(size_t)(k + 1) * m + a->mb];
                if (!dep) break;
                long start = clock[r] > dep - 1 ? clock[r] : dep - 1;
                clock[r] = start + 1;
                if (a->op == 'F') fwd[(size_t)k * m + a->mb] = clock[r] + 1;
                if (a->op == 'B' || a->op == 'X') bwd[(size_t)k * m + a->mb] = clock[r] + 1;
                progress = 1;
            }
    }
    for (int r = 0; r < p && !bad; r++) {
        if (pc[r] == f->count[r]) continue;
        const pp_file_action *a = &f->acts[r][pc[r]];
        int k = ts_stage_virtual(f->order, p, r, a->chunk);
        int need = a->op == 'F' ? k - 1 : k == V - 1 ? k : k + 1;
        bad = why_set(why, size,
                      "%s:%d: '%s' (rank %d, action %d) waits for the %s of micro-batch %d on "
                      "virtual stage %d (rank %d), which never comes: the schedule deadlocks",
                      path, a->line, a->text, r, pc[r],
                      a->op == 'F' || need == k ? "forward" : "backward", a->mb, need,
                      ts_stage_rank(f->order, p, need));
    }
    free(fwd);
    free(bwd);
    free(clock);
    free(pc);
    return bad;
}

int pp_schedule_file_load(const char *path, pp_schedule_file *out, char *why, size_t why_size) {
    memset(out, 0, sizeof *out);
    FILE *in = fopen(path, "r");
    if (!in) return why_set(why, why_size, "%s: cannot open it for reading", path);
    int bad = file_parse(in, path, out, why, why_size);
    fclose(in);
    if (!bad) bad = file_check_ranks(out, path, why, why_size);
    if (!bad) bad = file_check_together(out, path, why, why_size);
    if (bad) pp_schedule_file_free(out);
    return bad;
}

ts_status pp_schedule_file_emit(const pp_schedule_file *f, int stage, pp_append_fn append,
                                void *user) {
    if (stage < 0 || stage >= f->ranks) return TS_ERR_CONFIG;
    for (int i = 0; i < f->count[stage]; i++) {
        const pp_file_action *a = &f->acts[stage][i];
        TS_TRY(pp_emit_computation(f->order, f->ranks, stage, f->chunks, a->op, a->mb, a->chunk,
                                   append, user));
    }
    return append(user, TS_PLUGIN_ACT_OPTIMIZER_STEP, -1, 0, -1);
}
