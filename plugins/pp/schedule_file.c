/*
 * schedule_file.c — reading, checking and emitting a hand-written pipeline
 * schedule (schedule_file.h). libc (and POSIX open/fstat) only: linked
 * into tessera-pp.so and into the schedule file's fuzz target.
 *
 * Every cost is bounded by the file's own size: a rank's line lists each of
 * the file's (micro-batch, chunk) pairs at least twice, checked before
 * tables of that size are made, and the ranks are simulated together by
 * waking a rank only when something it may wait for completes.
 */
#include "schedule_file.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h> /* open, fcntl: O_NONBLOCK until the file is known regular */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Parses one token ("F12", "BW3.1") into *a; 0, or 1 if malformed. The
 * numbers are bounded as they are read (micro-batch < PP_FILE_MAX_MB, chunk
 * < PP_FILE_MAX_CHUNKS), before any cast. */
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
    while (i < n && isdigit((unsigned char)t[i]) && mb < PP_FILE_MAX_MB)
        mb = mb * 10 + (t[i++] - '0');
    if (i == d) return 1;
    if (i < n && t[i] == '.') {
        size_t c0 = ++i;
        while (i < n && isdigit((unsigned char)t[i]) && chunk < PP_FILE_MAX_CHUNKS)
            chunk = chunk * 10 + (t[i++] - '0');
        if (i == c0) return 1;
    }
    if (i != n || mb >= PP_FILE_MAX_MB || chunk >= PP_FILE_MAX_CHUNKS) return 1;
    a->mb = (int)mb;
    a->chunk = (int)chunk;
    snprintf(a->text, sizeof a->text, "%.*s", (int)(n < 23 ? n : 23), t);
    return 0;
}

/* Reads one line (its '\n' dropped) into line[0..size-1], NUL-terminated,
 * with its length in *len: 1, 0 at the end of the file, -1 for a line of
 * size - 1 bytes or more (the rest of it unread). NUL bytes are kept (and
 * counted in *len), so that the caller can refuse them. */
static int file_line(FILE *in, char *line, size_t size, size_t *len) {
    size_t n = 0;
    int c = EOF;
    while ((c = getc(in)) != EOF && c != '\n') {
        if (n + 1 >= size) return -1;
        line[n++] = (char)c;
    }
    line[n] = '\0';
    *len = n;
    return c == EOF && n == 0 ? 0 : 1;
}

/* "rank N:" at c: 0 with N (saturated past PP_FILE_MAX_RANKS, never cast
 * from a value that does not fit) in *r, its digits at *digits (*ndigits of
 * them) and *used the characters up to and with the ':'; 1 if c is not
 * such a line. */
static int file_rank_head(const char *c, long long *r, const char **digits, int *ndigits,
                          size_t *used) {
    const char *s = c;
    if (strncmp(s, "rank", 4) != 0) return 1;
    s += 4;
    while (*s == ' ' || *s == '\t')
        s++;
    *digits = s;
    long long v = 0;
    for (; isdigit((unsigned char)*s); s++)
        if (v <= PP_FILE_MAX_RANKS) v = v * 10 + (*s - '0');
    *ndigits = (int)(s - *digits);
    if (*ndigits == 0) return 1;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s != ':') return 1;
    *r = v;
    *used = (size_t)(s + 1 - c);
    return 0;
}

/* The syntax: `order` first if at all, then `rank N:` lines in order, at
 * most `ranks` of them (PP_FILE_MAX_RANKS when 0). */
static int file_parse(FILE *in, const char *path, int ranks, pp_schedule_file *f, char *why,
                      size_t size) {
    char line[65536];
    int lineno = 0, seen_rank = 0;
    size_t len;
    f->order = TS_STAGES_INTERLEAVED;
    for (int got; (got = file_line(in, line, sizeof line, &len)) != 0;) {
        lineno++;
        if (got < 0)
            return why_set(why, size, "%s:%d: a line longer than %zu characters", path, lineno,
                           sizeof line - 2);
        const char *nul = memchr(line, '\0', len);
        if (nul)
            return why_set(why, size,
                           "%s:%d: a NUL byte at column %d (a schedule file is text; nothing "
                           "after a NUL would be read)",
                           path, lineno, (int)(nul - line) + 1);
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *c = line;
        while (isspace((unsigned char)*c))
            c++;
        if (!*c) continue;
        if (strncmp(c, "order", 5) == 0 && isspace((unsigned char)c[5])) {
            char word[32] = "", rest[2] = "";
            int words = sscanf(c + 5, "%31s %1s", word, rest);
            if (seen_rank)
                return why_set(why, size, "%s:%d: 'order' after the first rank's line", path,
                               lineno);
            if (words != 1)
                return why_set(why, size, "%s:%d: 'order' takes one word, interleaved or v", path,
                               lineno);
            if (strcmp(word, "v") == 0)
                f->order = TS_STAGES_V;
            else if (strcmp(word, "interleaved") != 0)
                return why_set(why, size, "%s:%d: order '%s' is not interleaved or v", path, lineno,
                               word);
            continue;
        }
        long long rank = -1;
        const char *digits = NULL;
        int ndigits = 0;
        size_t used = 0;
        if (file_rank_head(c, &rank, &digits, &ndigits, &used))
            return why_set(why, size,
                           "%s:%d: expected 'rank %d: <actions>' (or 'order interleaved|v' "
                           "before it)",
                           path, lineno, f->ranks);
        if (rank != f->ranks)
            return why_set(why, size, "%s:%d: rank %.*s's line, where rank %d's is next", path,
                           lineno, ndigits < 24 ? ndigits : 24, digits, f->ranks);
        if (ranks > 0 && f->ranks >= ranks)
            return why_set(why, size,
                           "%s:%d: rank %d's line, but the run has pp = %d (ranks 0..%d)", path,
                           lineno, f->ranks, ranks, ranks - 1);
        if (f->ranks >= PP_FILE_MAX_RANKS)
            return why_set(why, size, "%s:%d: rank %d's line: at most %d ranks ([pp] size's limit)",
                           path, lineno, f->ranks, PP_FILE_MAX_RANKS);
        if (file_add_rank(f)) return why_set(why, size, "%s: out of memory", path);
        int r = f->ranks - 1;
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
                               "by a micro-batch below %d (and '.chunk' below %d with several "
                               "chunks)",
                               path, lineno, (int)(n < 40 ? n : 40), c, r, f->count[r],
                               PP_FILE_MAX_MB, PP_FILE_MAX_CHUNKS);
            if (file_push(f, r, &a)) return why_set(why, size, "%s: out of memory", path);
            int raised = 0;
            if (a.mb + 1 > f->micro_batches) f->micro_batches = a.mb + 1, raised = 1;
            if (a.chunk + 1 > f->chunks) f->chunks = a.chunk + 1, raised = 1;
            if (raised) f->widest_rank = r, f->widest_action = f->count[r] - 1;
            c += n;
        }
        if (f->count[r] == 0)
            return why_set(why, size, "%s:%d: rank %d has no actions", path, lineno, r);
    }
    if (ferror(in)) return why_set(why, size, "%s: read error", path);
    if (f->ranks == 0) return why_set(why, size, "%s: no 'rank 0: ...' line", path);
    if (ranks > 0 && f->ranks != ranks)
        return why_set(why, size, "%s:%d: the file ends after rank %d's line; the run has pp = %d",
                       path, lineno, f->ranks - 1, ranks);
    if (f->order == TS_STAGES_V && f->chunks != 2)
        return why_set(why, size, "%s: order v needs two chunks per rank; the file names %d", path,
                       f->chunks);
    return 0;
}

/* Every rank computes each of the file's micro-batches x chunks pairs at
 * least twice (F, and B or BW), so some rank's line must be at least twice
 * as long as their number: checked in 64 bits before the per-pair table of
 * file_check_ranks (3 entries a pair, so at most 1.5 x the longest line) is
 * allocated, naming the action that made the count (the last one to raise
 * the largest micro-batch or chunk). */
static int file_check_counts(const pp_schedule_file *f, const char *path, char *why, size_t size) {
    long long pairs = (long long)f->micro_batches * f->chunks;
    int longest = 0;
    for (int r = 1; r < f->ranks; r++)
        if (f->count[r] > f->count[longest]) longest = r;
    if (f->count[longest] >= 2 * pairs) return 0;
    const pp_file_action *w = &f->acts[f->widest_rank][f->widest_action];
    return why_set(why, size,
                   "%s:%d: '%s' (rank %d, action %d) makes %d micro-batches x %d chunks = %lld "
                   "(micro-batch, chunk) pairs, each run forward and backward by every rank, but "
                   "the longest rank's line (%s:%d, rank %d) has %d actions",
                   path, w->line, w->text, f->widest_rank, f->widest_action, f->micro_batches,
                   f->chunks, pairs, path, f->acts[longest][0].line, longest, f->count[longest]);
}

/* Each rank: every (micro-batch, chunk) once F, once B or BW, once W after
 * a B (none after BW), in that order. The table starts empty once and each
 * rank clears only the entries it set, so a rank costs its actions, plus
 * the pairs' scan for a rank whose actions are all valid (at most half its
 * actions after file_check_counts, or once, for the first rank that fails). */
static int file_check_ranks(const pp_schedule_file *f, const char *path, char *why, size_t size) {
    int m = f->micro_batches, v = f->chunks;
    size_t cells = (size_t)m * (size_t)v * 3; /* at most 1.5 x a rank's actions (counts) */
    int *at = malloc(sizeof *at * cells);
    if (!at) return why_set(why, size, "%s: out of memory", path);
    for (size_t k = 0; k < cells; k++)
        at[k] = -1;
    int bad = 0;
    for (int r = 0; r < f->ranks && !bad; r++) {
        for (int i = 0; i < f->count[r] && !bad; i++) {
            const pp_file_action *a = &f->acts[r][i];
            size_t key = ((size_t)a->chunk * (size_t)m + (size_t)a->mb) * 3;
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
                size_t key = ((size_t)c * (size_t)m + (size_t)mb) * 3;
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
        for (int i = 0; i < f->count[r]; i++) {
            const pp_file_action *a = &f->acts[r][i];
            size_t key = ((size_t)a->chunk * (size_t)m + (size_t)a->mb) * 3;
            at[key] = at[key + 1] = at[key + 2] = -1;
        }
    }
    free(at);
    return bad;
}

/* The ranks together, each running its list in order: a forward waits for
 * the previous virtual stage's forward of its micro-batch, a backward for
 * the next one's backward (the last stage's for its own forward), a weight
 * part for its backward (on the rank already). Under the unit-time model
 * every action runs once what it waits for has, so whether all finish does
 * not depend on when: each rank runs as far as it can, and a rank that
 * stops is run again only when an action it may wait for completes (a
 * forward wakes the next virtual stage's rank, a backward the previous
 * one's), so the check costs the actions plus the ranks. Fails naming the
 * first rank stuck and what it waits for. */
static int file_check_together(const pp_schedule_file *f, const char *path, char *why,
                               size_t size) {
    int p = f->ranks, V = p * f->chunks; /* p <= 65536, chunks <= 1024 */
    size_t m = (size_t)f->micro_batches, cells = (size_t)V * m;
    char *fwd = calloc(cells, 1), *bwd = calloc(cells, 1);
    int *pc = calloc((size_t)p, sizeof *pc), *queue = malloc(sizeof *queue * (size_t)p);
    char *queued = calloc((size_t)p, 1);
    int bad = !fwd || !bwd || !pc || !queue || !queued
                  ? why_set(why, size, "%s: out of memory", path)
                  : 0;
    /* A ring of the ranks to run, each in it at most once. */
    int head = 0, n = 0;
    for (int r = 0; !bad && r < p; r++)
        queue[n++] = r, queued[r] = 1;
    while (!bad && n > 0) {
        int r = queue[head];
        head = (head + 1) % p;
        n--;
        queued[r] = 0;
        for (; pc[r] < f->count[r]; pc[r]++) {
            const pp_file_action *a = &f->acts[r][pc[r]];
            int k = ts_stage_virtual(f->order, p, r, a->chunk), wake = -1;
            size_t at = (size_t)k * m + (size_t)a->mb;
            if (a->op == 'F') {
                if (k > 0 && !fwd[at - m]) break;
                fwd[at] = 1;
                if (k < V - 1) wake = ts_stage_rank(f->order, p, k + 1);
            } else if (a->op != 'W') {
                if (!(k == V - 1 ? fwd[at] : bwd[at + m])) break;
                bwd[at] = 1;
                if (k > 0) wake = ts_stage_rank(f->order, p, k - 1);
            }
            if (wake >= 0 && wake != r && !queued[wake]) {
                queue[(head + n) % p] = wake;
                queued[wake] = 1;
                n++;
            }
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
    free(pc);
    free(queue);
    free(queued);
    return bad;
}

/* Opens `path` for reading if it is a regular file, as the core's loaders
 * do (core/base/file.c, ts_file_open_read): without blocking (a FIFO with no
 * writer would block the open), then fstat, then blocking again. The plugin
 * links against nothing of the core, and the host table has no file slot,
 * so the same steps are taken here with libc. */
static FILE *file_open_regular(const char *path, char *why, size_t size) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        why_set(why, size, "%s: cannot open it for reading: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        why_set(why, size, "%s: cannot stat it: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(sb.st_mode)) {
        const char *kind = S_ISDIR(sb.st_mode)    ? "a directory"
                           : S_ISFIFO(sb.st_mode) ? "a FIFO"
                           : S_ISCHR(sb.st_mode)  ? "a character device"
                           : S_ISBLK(sb.st_mode)  ? "a block device"
                           : S_ISSOCK(sb.st_mode) ? "a socket"
                                                  : "not a regular file";
        why_set(why, size, "%s: is %s; a schedule file must be a regular file", path, kind);
        close(fd);
        return NULL;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    FILE *in = fdopen(fd, "r");
    if (!in) {
        why_set(why, size, "%s: cannot open it for reading: %s", path, strerror(errno));
        close(fd);
    }
    return in;
}

int pp_schedule_file_load(const char *path, int ranks, pp_schedule_file *out, char *why,
                          size_t why_size) {
    memset(out, 0, sizeof *out);
    FILE *in = file_open_regular(path, why, why_size);
    if (!in) return 1;
    int bad = file_parse(in, path, ranks, out, why, why_size);
    fclose(in);
    if (!bad) bad = file_check_counts(out, path, why, why_size);
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
