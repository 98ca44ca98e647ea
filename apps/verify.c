/*
 * verify.c — `tessera verify`: the four ledgers a parallel configuration
 * must pass before it trains for real, from runs this command launches
 * itself (the launcher, mpirun by default, for N ranks; this program
 * directly for one):
 *
 *   base     one rank, the same model, data and global batch (the INI file
 *            without the plugins' sections), K steps, checkpoints at K/2, K
 *   par      the configuration on N ranks, the same, with [train] summary
 *   kill     the same again, world rank N-1 killed with SIGKILL after step
 *            K/2 + 1 (TESSERA_FAULT_KILL), then resumed on N ranks and,
 *            from a copy of the step-K/2 checkpoint, on one rank
 *   plan     `tessera plan --json` for every rank (a dry run)
 *
 * numerics  par against base: every step's loss (relative, within the
 *           dtype's tolerance: 1e-5 f32, 1e-3 bf16) and gradient norm
 *           (10x), the final master weights (relative L2 within the
 *           tolerance), naming the first step and the tensor that differ;
 * memory    every rank's parameters, gradients and optimizer state (exact)
 *           and its activations' and communication buffers' peaks (within
 *           5 %) against the plan's dry run, naming the worst rank (the data
 *           set and staging are reported, not planned);
 * speed     tokens/s, step time, the communication time's share of a step,
 *           the pipeline bubble against the schedule's own under the
 *           unit-time model (tessera plan's: (p-1)/(m+p-1) for 1F1B), the
 *           slowest rank's compute time against the median (it fails above
 *           --slow-rank, default 1.5x); MFU is not reported (the device's
 *           peak is not known to the program);
 * recovery  the killed job left the step-K/2 checkpoint, the resumed run on
 *           N ranks equals the uninterrupted one, the run resumed on one
 *           rank equals the one-rank run (within the tolerance).
 *
 * The default launcher is mpirun, given --oversubscribe when it is Open
 * MPI's (which otherwise refuses more ranks than the machine's cores); a
 * --launcher is taken as given. A run that fails is reported by tessera's
 * own message in its log, else by the launcher's first lines.
 *
 * What it does not do: judge what a run should cost (a slow configuration
 * passes when it is consistent), or run on several nodes by itself (pass
 * the launcher that does: --launcher "srun" or "mpirun --hostfile H").
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "config.h"
#include "state.h"

static const char *usage_verify =
    "usage: tessera verify CONFIG --world N [--steps K] [--json] [--launcher CMD]\n"
    "                      [--timeout S] [--slow-rank F] [--keep DIR] [--set ...]\n"
    "\n"
    "Checks the four ledgers of CONFIG on N ranks against one rank, from runs it\n"
    "launches itself, and prints a table (or, with --json, one object\n"
    "{\"ledgers\": {\"numerics\": {\"pass\": ...}, \"memory\": ..., \"speed\": ...,\n"
    "\"recovery\": ...}}). Exit status 0 only when all four pass. A CONFIG that\n"
    "names no [parallel] plugin runs its N ranks data parallel (--set\n"
    "parallel.plugins=dp, both runs at a micro-batch that divides the global\n"
    "batch among the N), as it says; a --set parallel.plugins=... is taken as given.\n"
    "  numerics  losses and gradient norms of every step and the final weights\n"
    "            against one rank (1e-5 relative in fp32, 1e-3 in bf16)\n"
    "  memory    every rank's memory by category against tessera plan\n"
    "  speed     tokens/s, step time, communication share, pipeline bubble,\n"
    "            the slowest rank (fails above F times the median, default 1.5)\n"
    "  recovery  a rank killed with SIGKILL mid-run; resumed on N ranks and on\n"
    "            one from the last checkpoint, both equal the uninterrupted runs\n"
    "\n"
    "  --steps K          steps of each run (default 10, at least 4)\n"
    "  --launcher CMD     how to start N ranks, taken as given (words split at\n"
    "                     spaces; \"-np N\" is appended); default \"mpirun\", with\n"
    "                     --oversubscribe for Open MPI's, so N may exceed the cores\n"
    "                     (each rank then takes OMP_NUM_THREADS threads, else\n"
    "                     cores / N); a failed launch prints the launcher's own\n"
    "                     first lines of error\n"
    "  --timeout S        seconds any one run may take (default 600)\n"
    "  --keep DIR         keep the runs' files in DIR, new or empty (default: a\n"
    "                     temporary one, removed when all four pass)\n"
    "  --set section.key=value   override one key in every run (repeatable)\n";

#define MAX_SETS 64

typedef struct verify_opts {
    const char *config, *launcher, *keep;
    int world, steps, json;
    double timeout_s, slow_rank;
    int nsets;
    const char *sets[MAX_SETS];
    char dir[1024];
    char self[1024];
    char base_ini[1200];
    char dtype[16];
    double tol;
} verify_opts;

/* One ledger's verdict and its figures (a line of text). */
typedef struct ledger {
    int pass;
    char text[2048];
    char json[2048];
} ledger;

static void say(ledger *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(ledger *l, const char *fmt, ...) {
    size_t n = strlen(l->text);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->text + n, sizeof l->text - n, fmt, ap);
    va_end(ap);
}

static void jsay(ledger *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void jsay(ledger *l, const char *fmt, ...) {
    size_t n = strlen(l->json);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->json + n, sizeof l->json - n, fmt, ap);
    va_end(ap);
}

/* --- running the programs ------------------------------------------------ */

int cli_run_child(const char *who, char **argv, const char *out, const char *err, const char *env,
                  double timeout_s) {
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        setpgid(0, 0);
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int fe = strcmp(out, err) == 0 ? fo : open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo >= 0) dup2(fo, 1);
        if (fe >= 0) dup2(fe, 2);
        if (fo > 2) close(fo);
        if (fe > 2 && fe != fo) close(fe);
        if (env) putenv((char *)env);
        execvp(argv[0], argv);
        fprintf(stderr, "tessera %s: cannot run %s: %s\n", who, argv[0], strerror(errno));
        _exit(127);
    }
    double waited = 0.0;
    for (;;) {
        int status;
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (r < 0) return -1;
        if (waited > timeout_s) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        struct timespec d = {0, 20 * 1000 * 1000};
        nanosleep(&d, NULL);
        waited += 0.02;
    }
}

/* Runs argv with stdout and stderr to `log`, `env` (NAME=VALUE or NULL) in
 * its environment, within the run timeout. */
static int run_logged(const verify_opts *o, char **argv, const char *log, const char *env) {
    return cli_run_child("verify", argv, log, log, env, o->timeout_s);
}

/* Builds the command line of a `tessera train` (np > 1: under the
 * launcher) with the given extra --set values; `plugin_sets`: also the
 * --set values of plugins' sections (the N-rank runs). */
static int train_argv(const verify_opts *o, int np, const char *ini, int plugin_sets, int pass_env,
                      const char *const *extra, int nextra, char **argv, char *words,
                      size_t wsize) {
    int n = 0;
    if (np > 1) {
        snprintf(words, wsize, "%s", o->launcher);
        for (char *w = strtok(words, " "); w; w = strtok(NULL, " "))
            argv[n++] = w;
        const char *base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
        argv[n++] = "-np";
        static char np_buf[16];
        snprintf(np_buf, sizeof np_buf, "%d", np);
        argv[n++] = np_buf;
        /* Open MPI passes only what -x names to the ranks. */
        if (pass_env && (strcmp(base, "mpirun") == 0 || strcmp(base, "mpiexec") == 0)) {
            argv[n++] = "-x";
            argv[n++] = "TESSERA_FAULT_KILL";
        }
    }
    argv[n++] = (char *)o->self;
    argv[n++] = "train";
    argv[n++] = (char *)ini;
    for (int i = 0; i < o->nsets; i++) {
        const char *dot = strchr(o->sets[i], '.');
        int core = dot && ((dot - o->sets[i] == 5 && !strncmp(o->sets[i], "model", 5)) ||
                           (dot - o->sets[i] == 4 && !strncmp(o->sets[i], "data", 4)) ||
                           (dot - o->sets[i] == 5 && !strncmp(o->sets[i], "train", 5)) ||
                           (dot - o->sets[i] == 4 && !strncmp(o->sets[i], "comm", 4)));
        if (!core && !plugin_sets) continue;
        argv[n++] = "--set";
        argv[n++] = (char *)o->sets[i];
    }
    for (int i = 0; i < nextra; i++) {
        argv[n++] = "--set";
        argv[n++] = (char *)extra[i];
    }
    argv[n] = NULL;
    return n;
}

/* A run of `tessera train`: returns its status (see run_logged). */
static int train(const verify_opts *o, int np, const char *name, const char *ckdir,
                 const char *metrics, const char *more, const char *env) {
    char ini[1200], steps[64], ck[1200], met[1200], every[64], log[1200], summary[1200];
    snprintf(ini, sizeof ini, "%s", np > 1 ? o->config : o->base_ini);
    snprintf(steps, sizeof steps, "train.steps=%d", o->steps);
    snprintf(every, sizeof every, "train.checkpoint_every=%d", o->steps / 2);
    snprintf(ck, sizeof ck, "train.checkpoint_dir=%s/%s", o->dir, ckdir);
    snprintf(met, sizeof met, "train.metrics=%s/%s", o->dir, metrics);
    snprintf(log, sizeof log, "%s/%s.log", o->dir, name);
    snprintf(summary, sizeof summary, "train.summary=%s/%s.summary.json", o->dir, name);
    const char *extra[10] = {
        steps, every, ck, met, summary, "train.trace=", "train.log_every=1000000"};
    int nextra = 7;
    if (np == 1) extra[nextra++] = "parallel.plugins=";
    if (more) extra[nextra++] = more;
    char *argv[4 * MAX_SETS + 64];
    char words[1024];
    train_argv(o, np, ini, np > 1, env != NULL, extra, nextra, argv, words, sizeof words);
    return run_logged(o, argv, log, env);
}

/* What a run's log says went wrong. Returns 1 with tessera's own message
 * (the last line beginning "tessera") in `out`; else 0 with the first lines
 * that have words (at most 6, the launcher's own error, e.g. Open MPI's "not
 * enough slots") joined by `sep`, or "" when the log holds nothing. */
static int log_tail(const verify_opts *o, const char *name, const char *sep, char *out,
                    size_t size) {
    char path[1200], line[1024], first[2048] = "";
    snprintf(path, sizeof path, "%s/%s.log", o->dir, name);
    out[0] = 0;
    FILE *f = fopen(path, "r");
    int nfirst = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (strncmp(line, "tessera", 7) == 0)
            snprintf(out, size, "%s", line);
        else if (nfirst < 6 && line[strspn(line, "- \t")]) {
            size_t n = strlen(first);
            snprintf(first + n, sizeof first - n, "%s%s", nfirst++ ? sep : "",
                     line + strspn(line, " \t"));
        }
    }
    if (f) fclose(f);
    if (out[0]) return 1;
    snprintf(out, size, "%s", first);
    return 0;
}

/* The launcher when --launcher is not given: mpirun, which Open MPI's
 * refuses to start more ranks than the machine has cores unless told
 * --oversubscribe (as every mpirun line of the README and the tests is);
 * other MPIs' mpirun (MPICH, Intel) allow it and refuse the flag. */
static const char *default_launcher(void) {
    FILE *p = popen("mpirun --version 2>&1", "r");
    char line[256];
    int openmpi = 0;
    while (p && fgets(line, sizeof line, p))
        openmpi |= strstr(line, "Open MPI") != NULL || strstr(line, "OpenRTE") != NULL;
    if (p) pclose(p);
    return openmpi ? "mpirun --oversubscribe" : "mpirun";
}

/* --- reading what the runs wrote ----------------------------------------- */

typedef struct step_rec {
    double loss, grad_norm, step_ms, tokens_per_s, comm_s, bubble;
    int stages;
} step_rec;

/* The number after "KEY": at or after p (NaN when absent or null). */
static double json_after(const char *p, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *q = strstr(p, pat);
    if (!q) return NAN;
    q += strlen(pat);
    if (!strncmp(q, "null", 4)) return NAN;
    return strtod(q, NULL);
}

/* Reads a metrics file: rec[s - 1] for step s; returns the number of steps. */
static int read_metrics(const char *path, step_rec *rec, int cap) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    static char line[1 << 20];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        double step = json_after(line, "step");
        if (!(step >= 1 && step <= cap)) continue;
        step_rec *r = &rec[(int)step - 1];
        r->loss = json_after(line, "loss");
        r->grad_norm = json_after(line, "grad_norm");
        r->step_ms = json_after(line, "step_ms");
        r->tokens_per_s = json_after(line, "tokens_per_s");
        /* The communication counters: after the memory object's end. */
        r->comm_s = 0.0;
        const char *c = strstr(line, "}},\"comm\":"), *end = c ? strstr(c, ",\"plugins\":") : NULL;
        for (const char *q = c; q && end && (q = strstr(q, "\"seconds\":")) && q < end; q++)
            r->comm_s += strtod(q + 10, NULL);
        const char *b = strstr(line, "\"bubble\":[");
        r->bubble = 0.0;
        r->stages = 0;
        for (const char *q = b ? b + 10 : NULL; q && *q && *q != ']';) {
            char *e;
            double v = strtod(q, &e);
            if (e == q) break;
            r->bubble += v;
            r->stages++;
            q = *e == ',' ? e + 1 : e;
        }
        if (r->stages) r->bubble /= r->stages;
        if ((int)step > n) n = (int)step;
    }
    fclose(f);
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

char *cli_slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

/* --- the ledgers ---------------------------------------------------------- */

/* Relative difference of b from a (absolute below 1e-12). */
static double rel(double a, double b) {
    double d = fabs(a - b), m = fabs(a);
    return m > 1e-12 ? d / m : d;
}

static void ledger_numerics(const verify_opts *o, ledger *l) {
    char p1[1200], p2[1200];
    step_rec a[1024], b[1024];
    snprintf(p1, sizeof p1, "%s/base.jsonl", o->dir);
    snprintf(p2, sizeof p2, "%s/par.jsonl", o->dir);
    int na = read_metrics(p1, a, 1024), nb = read_metrics(p2, b, 1024);
    l->pass = na == o->steps && nb == o->steps;
    if (!l->pass) {
        say(l, "the runs wrote %d (one rank) and %d (N ranks) of %d steps", na, nb, o->steps);
        jsay(l, "\"error\":\"missing steps\"");
        return;
    }
    double worst_loss = 0, worst_norm = 0;
    int first_bad = 0;
    const char *what = "";
    for (int s = 0; s < o->steps; s++) {
        double dl = rel(a[s].loss, b[s].loss), dn = rel(a[s].grad_norm, b[s].grad_norm);
        if (!isfinite(dl)) dl = INFINITY;
        if (!isfinite(dn)) dn = INFINITY;
        if (dl > worst_loss) worst_loss = dl;
        if (dn > worst_norm) worst_norm = dn;
        if (!first_bad && (dl > o->tol || dn > 10 * o->tol)) {
            first_bad = s + 1;
            what = dl > o->tol ? "loss" : "gradient norm";
        }
    }
    /* The final master weights, tensor by tensor. */
    char ca[1200], cb[1200];
    snprintf(ca, sizeof ca, "%s/base_ck/ckpt-%08d", o->dir, o->steps);
    snprintf(cb, sizeof cb, "%s/par_ck/ckpt-%08d", o->dir, o->steps);
    ts_ckpt_reader *ra = NULL, *rb = NULL;
    double num = 0, den = 0, worst_t = 0;
    char worst_name[64] = "";
    int weights_ok = !ts_ckpt_reader_open(ca, &ra) && !ts_ckpt_reader_open(cb, &rb);
    for (int i = 0; weights_ok && i < ts_ckpt_reader_info(ra)->ntensors; i++) {
        const ts_ckpt_tensor *e = &ts_ckpt_reader_info(ra)->tensors[i];
        int j = ts_ckpt_reader_find(rb, e->name);
        int64_t n = e->shape[0] * e->shape[1] * e->shape[2], off[3] = {0, 0, 0};
        float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
        weights_ok = j >= 0 && x && y && !ts_ckpt_reader_read(ra, i, 0, off, e->shape, 0, n, x) &&
                     !ts_ckpt_reader_read(rb, j, 0, off, e->shape, 0, n, y);
        double tn = 0, td = 0;
        for (int64_t k = 0; weights_ok && k < n; k++) {
            tn += ((double)x[k] - y[k]) * ((double)x[k] - y[k]);
            td += (double)x[k] * x[k];
        }
        num += tn;
        den += td;
        double tr = td > 0 ? sqrt(tn / td) : sqrt(tn);
        if (tr > worst_t) {
            worst_t = tr;
            snprintf(worst_name, sizeof worst_name, "%s", e->name);
        }
        free(x);
        free(y);
    }
    ts_ckpt_reader_close(ra);
    ts_ckpt_reader_close(rb);
    double wrel = den > 0 ? sqrt(num / den) : INFINITY;
    l->pass = !first_bad && weights_ok && wrel <= o->tol;
    say(l, "%d steps: loss max rel %.1e, grad norm max rel %.1e (tolerance %.0e %s, norms %.0e); ",
        o->steps, worst_loss, worst_norm, o->tol, o->dtype, 10 * o->tol);
    if (weights_ok)
        say(l, "final weights rel L2 %.1e, worst tensor %s %.1e", wrel, worst_name, worst_t);
    else
        say(l, "final weights: the checkpoints could not be read");
    if (first_bad) say(l, "; FIRST DIFFERS at step %d (%s)", first_bad, what);
    jsay(l,
         "\"steps\":%d,\"tolerance\":%g,\"loss_max_rel\":%g,\"grad_norm_max_rel\":%g,"
         "\"weights_rel_l2\":%g,\"worst_tensor\":\"%s\",\"worst_tensor_rel\":%g,"
         "\"first_bad_step\":%d",
         o->steps, o->tol, worst_loss, worst_norm, weights_ok ? wrel : -1.0, worst_name, worst_t,
         first_bad);
}

/* One rank's numbers from the summary or the plan: the model state's
 * categories allocated, the activations' and communication buffers' peaks,
 * and (measured only) the rest ("other": the data set, staging). */
typedef struct mem_rec {
    double params, grads, optim, act, comm, other;
} mem_rec;

static void ledger_memory(const verify_opts *o, ledger *l, double *bubble_theory) {
    char path[1200];
    snprintf(path, sizeof path, "%s/par.summary.json", o->dir);
    char *sum = cli_slurp(path);
    l->pass = sum != NULL;
    if (!sum) {
        say(l, "no summary from the N-rank run");
        jsay(l, "\"error\":\"no summary\"");
        return;
    }
    double worst = -1;
    int worst_rank = -1, bad_state = -1;
    mem_rec wm = {0}, wp = {0};
    for (int r = 0; r < o->world; r++) {
        /* The plan of rank r. */
        char rank[16], world[16], log[1200];
        snprintf(rank, sizeof rank, "%d", r);
        snprintf(world, sizeof world, "%d", o->world);
        snprintf(log, sizeof log, "%s/plan%d.json", o->dir, r);
        char *argv[2 * MAX_SETS + 16];
        int n = 0;
        argv[n++] = (char *)o->self;
        argv[n++] = "plan";
        argv[n++] = (char *)o->config;
        argv[n++] = "--world";
        argv[n++] = world;
        argv[n++] = "--rank";
        argv[n++] = rank;
        argv[n++] = "--json";
        for (int i = 0; i < o->nsets; i++) {
            argv[n++] = "--set";
            argv[n++] = (char *)o->sets[i];
        }
        argv[n] = NULL;
        char *plan = run_logged(o, argv, log, NULL) == 0 ? cli_slurp(log) : NULL;
        char key[32];
        snprintf(key, sizeof key, "{\"rank\":%d,", r);
        const char *m = strstr(sum, key), *pm = plan ? strstr(plan, "\"memory\":") : NULL;
        if (!m || !pm) {
            l->pass = 0;
            say(l, "rank %d: %s; ", r, !m ? "not in the summary" : "tessera plan failed");
            free(plan);
            continue;
        }
        if (r == 0 && bubble_theory) *bubble_theory = json_after(plan, "bubble");
        mem_rec run = {json_after(strstr(m, "\"params\":"), "allocated"),
                       json_after(strstr(m, "\"grads\":"), "allocated"),
                       json_after(strstr(m, "\"optimizer\":"), "allocated"),
                       json_after(strstr(m, "\"activations\":"), "peak"),
                       json_after(strstr(m, "\"comm\":"), "peak"),
                       json_after(strstr(m, "\"other\":"), "peak")};
        mem_rec est = {json_after(pm, "params"),    json_after(pm, "grads"),
                       json_after(pm, "optimizer"), json_after(pm, "activations"),
                       json_after(pm, "comm"),      0};
        free(plan);
        if (run.params != est.params || run.grads != est.grads || run.optim != est.optim) {
            if (bad_state < 0) bad_state = r;
            l->pass = 0;
        }
        /* Peaks of activations and communication buffers: within 5 % (or
         * 64 KiB) of the dry run's. */
        double d = fmax(rel(est.act, run.act), rel(est.comm, run.comm));
        if (fabs(run.act - est.act) <= 65536 && fabs(run.comm - est.comm) <= 65536) d = 0;
        if (d > worst) {
            worst = d;
            worst_rank = r;
            wm = run;
            wp = est;
        }
    }
    free(sum);
    if (worst > 0.05) l->pass = 0;
    const double M = 1048576;
    if (worst_rank >= 0)
        say(l,
            "worst rank %d: activations peak %.2f MiB, plan %.2f (%+.1f%%), comm buffers %.2f, "
            "plan %.2f (within 5%% required); params/grads/optimizer %.2f/%.2f/%.2f MiB, plan "
            "%.2f/%.2f/%.2f; data and staging %.2f MiB (not planned)",
            worst_rank, wm.act / M, wp.act / M, wp.act > 0 ? 100 * (wm.act - wp.act) / wp.act : 0.0,
            wm.comm / M, wp.comm / M, wm.params / M, wm.grads / M, wm.optim / M, wp.params / M,
            wp.grads / M, wp.optim / M, wm.other / M);
    if (bad_state >= 0)
        say(l, "; rank %d's parameters, gradients or optimizer state differ from the plan",
            bad_state);
    else if (worst_rank >= 0)
        say(l, "; model state equal to the plan on all %d ranks", o->world);
    jsay(l,
         "\"worst_rank\":%d,\"activations_peak_bytes\":%.0f,\"plan_activations_bytes\":%.0f,"
         "\"peak_rel\":%g,\"state_mismatch_rank\":%d",
         worst_rank, wm.act, wp.act, worst, bad_state);
}

static void ledger_speed(const verify_opts *o, ledger *l, double bubble_theory) {
    char path[1200];
    step_rec s[1024];
    snprintf(path, sizeof path, "%s/par.jsonl", o->dir);
    int n = read_metrics(path, s, 1024);
    double tok[1024], ms[1024], share[1024], bub[1024];
    int k = 0;
    for (int i = 1; i < n; i++) { /* the first step warms up */
        tok[k] = s[i].tokens_per_s;
        ms[k] = s[i].step_ms;
        share[k] = s[i].step_ms > 0 ? s[i].comm_s / (s[i].step_ms / 1e3) : 0;
        bub[k] = s[i].bubble;
        k++;
    }
    int stages = n ? s[n - 1].stages : 0;
    double mt = median(tok, k), mm = median(ms, k), mc = median(share, k), mb = median(bub, k);
    /* The slowest rank's compute time against the median rank's. */
    snprintf(path, sizeof path, "%s/par.summary.json", o->dir);
    char *sum = cli_slurp(path);
    double comp[4096];
    int nr = 0, slow = -1;
    for (const char *q = sum; q && nr < 4096 && (q = strstr(q, "\"compute_ms\":")); q++)
        comp[nr++] = strtod(q + 13, NULL);
    double worst = 0;
    for (int r = 0; r < nr; r++)
        if (comp[r] > worst) {
            worst = comp[r];
            slow = r;
        }
    double cm = median(comp, nr), ratio = cm > 0 ? worst / cm : NAN;
    free(sum);
    l->pass = k > 0 && isfinite(mt) && mt > 0 && nr == o->world && ratio <= o->slow_rank;
    say(l, "%.0f tok/s, %.1f ms/step, communication %.0f%% of a step", mt, mm, 100 * mc);
    if (stages > 1) say(l, ", bubble %.2f (the schedule's unit-time %.2f)", mb, bubble_theory);
    say(l, ", slowest rank %d at %.2fx the median compute (limit %.2fx); MFU n/a (peak unknown)",
        slow, ratio, o->slow_rank);
    jsay(l,
         "\"tokens_per_s\":%g,\"step_ms\":%g,\"comm_share\":%g,\"bubble\":%g,"
         "\"bubble_schedule\":%g,\"slowest_rank\":%d,\"slowest_ratio\":%g,\"mfu\":null",
         mt, mm, mc, stages > 1 ? mb : 0.0, stages > 1 ? bubble_theory : 0.0, slow,
         isfinite(ratio) ? ratio : -1.0);
}

/* Runs argv[0] (found on PATH) with its words as given, no shell between:
 * a path with a quote or a space in it (TMPDIR, --keep) stays one word.
 * 0 when it exits 0. */
static int spawn_wait(char *const argv[]) {
    pid_t pid;
    extern char **environ;
    if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ) != 0) return -1;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Copies the files of directory `from` into a new directory `to`. */
static int copy_dir(const char *from, const char *to) {
    char *mk[] = {"mkdir", "-p", "--", (char *)to, NULL};
    char dest[4096];
    snprintf(dest, sizeof dest, "%s/", to);
    char *cp[] = {"cp", "-r", "--", (char *)from, dest, NULL};
    return spawn_wait(mk) == 0 && spawn_wait(cp) == 0 ? 0 : -1;
}

static void ledger_recovery(const verify_opts *o, ledger *l) {
    int h = o->steps / 2;
    char env[64], ck[1200], tail[1024];
    snprintf(env, sizeof env, "TESSERA_FAULT_KILL=%d:%d", h + 1, o->world - 1);
    int killed = train(o, o->world, "kill", "kill_ck", "kill.jsonl", NULL, env);
    snprintf(ck, sizeof ck, "%s/kill_ck/ckpt-%08d", o->dir, h);
    l->pass = killed != 0 && ts_ckpt_is_complete(ck);
    if (!l->pass) {
        say(l, "the job with rank %d killed after step %d %s", o->world - 1, h + 1,
            killed == 0 ? "did not die" : "left no checkpoint of step");
        if (killed != 0) say(l, " %d", h);
        jsay(l, "\"error\":\"kill\"");
        return;
    }
    /* Resumed on one rank, from a copy of the step-h checkpoint. */
    char one[1200];
    snprintf(one, sizeof one, "%s/one_ck", o->dir);
    int st_one = copy_dir(ck, one)
                     ? -1
                     : train(o, 1, "resume1", "one_ck", "resume1.jsonl", "train.resume=auto", NULL);
    /* Resumed on N ranks in the killed job's directory (its metrics file
     * keeps steps 1..h and gets the rest). */
    int st_n = train(o, o->world, "resumeN", "kill_ck", "kill.jsonl", "train.resume=auto", NULL);
    step_rec par[1024], base[1024], rn[1024], r1[1024];
    char p[1200];
    snprintf(p, sizeof p, "%s/par.jsonl", o->dir);
    int npar = read_metrics(p, par, 1024);
    snprintf(p, sizeof p, "%s/base.jsonl", o->dir);
    int nbase = read_metrics(p, base, 1024);
    snprintf(p, sizeof p, "%s/kill.jsonl", o->dir);
    int nn = read_metrics(p, rn, 1024);
    memset(r1, 0, sizeof r1);
    snprintf(p, sizeof p, "%s/resume1.jsonl", o->dir);
    int n1 = read_metrics(p, r1, 1024);
    double dn = 0, d1 = 0;
    int exact = 1;
    for (int s = h; s < o->steps; s++) {
        if (s < nn && s < npar) {
            double d = fmax(rel(par[s].loss, rn[s].loss), rel(par[s].grad_norm, rn[s].grad_norm));
            if (!(d <= dn)) dn = d;
            exact &= par[s].loss == rn[s].loss && par[s].grad_norm == rn[s].grad_norm;
        }
        if (s < n1 && s < nbase) {
            double d =
                fmax(rel(base[s].loss, r1[s].loss), rel(base[s].grad_norm, r1[s].grad_norm) / 10);
            if (!(d <= d1)) d1 = d;
        }
    }
    int ok_n = st_n == 0 && nn == o->steps && npar == o->steps && dn <= o->tol;
    int ok_1 = st_one == 0 && n1 == o->steps && nbase == o->steps && d1 <= o->tol;
    l->pass = ok_n && ok_1;
    say(l,
        "rank %d killed after step %d; resumed from step %d on %d ranks: %s (%d steps, max rel "
        "%.1e)",
        o->world - 1, h + 1, h, o->world,
        exact && ok_n ? "bit for bit"
        : ok_n        ? "within tolerance"
                      : "DIFFERS",
        o->steps - h, dn);
    say(l, "; on 1 rank: %s (max rel %.1e)", ok_1 ? "within tolerance" : "DIFFERS", d1);
    if (st_n != 0 || st_one != 0) {
        log_tail(o, st_n != 0 ? "resumeN" : "resume1", " / ", tail, sizeof tail);
        say(l, "; a resumed run failed: %s", tail[0] ? tail : "(its log is empty)");
    }
    jsay(l,
         "\"killed_rank\":%d,\"killed_after_step\":%d,\"resumed_from\":%d,\"same_topology_exact\":%"
         "s,"
         "\"same_topology_max_rel\":%g,\"one_rank_max_rel\":%g,\"same_topology_pass\":%s,"
         "\"one_rank_pass\":%s",
         o->world - 1, h + 1, h, exact && ok_n ? "true" : "false", dn, d1, ok_n ? "true" : "false",
         ok_1 ? "true" : "false");
}

/* --- the command ----------------------------------------------------------- */

/* CONFIG without the plugins' sections: the one-rank baseline's INI. */
static int write_base_ini(verify_opts *o) {
    FILE *in = fopen(o->config, "r");
    snprintf(o->base_ini, sizeof o->base_ini, "%s/base.ini", o->dir);
    FILE *out = fopen(o->base_ini, "w");
    if (!in || !out) {
        if (in) fclose(in);
        if (out) fclose(out);
        return -1;
    }
    char line[4096];
    int keep = 1;
    while (fgets(line, sizeof line, in)) {
        const char *p = line + strspn(line, " \t");
        if (*p == '[') {
            char name[64] = "";
            sscanf(p + 1, "%63[^]]", name);
            keep = !strcmp(name, "model") || !strcmp(name, "data") || !strcmp(name, "train") ||
                   !strcmp(name, "parallel") || !strcmp(name, "comm");
        }
        /* Relative paths stay relative to where verify runs. */
        if (keep) fputs(line, out);
    }
    fclose(in);
    return fclose(out) == 0 ? 0 : -1;
}

int cmd_verify(int argc, char **argv) {
    if (argc >= 1 && (!strcmp(argv[0], "--help") || !strcmp(argv[0], "-h"))) {
        fputs(usage_verify, stdout);
        return 0;
    }
    verify_opts o = {.steps = 10, .timeout_s = 600, .slow_rank = 1.5};
    ts_status st = TS_OK;
    for (int i = 0; i < argc && !st; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        int64_t v = 0;
        if (!strcmp(a, "--world") && more) {
            st = cli_parse_int(a, argv[++i], 1, 1 << 20, &v);
            o.world = (int)v;
        } else if (!strcmp(a, "--steps") && more) {
            st = cli_parse_int(a, argv[++i], 4, 1000, &v);
            o.steps = (int)v;
        } else if (!strcmp(a, "--json"))
            o.json = 1;
        else if (!strcmp(a, "--launcher") && more)
            o.launcher = argv[++i];
        else if (!strcmp(a, "--timeout") && more)
            st = cli_parse_number(a, argv[++i], 1e-3, 1e7, &o.timeout_s);
        else if (!strcmp(a, "--slow-rank") && more)
            st = cli_parse_number(a, argv[++i], 1, 1e9, &o.slow_rank);
        else if (!strcmp(a, "--keep") && more)
            o.keep = argv[++i];
        else if (!strcmp(a, "--set") && more && o.nsets < MAX_SETS)
            o.sets[o.nsets++] = argv[++i];
        else if (!o.config && a[0] != '-')
            o.config = a;
        else {
            fprintf(stderr, "tessera verify: unexpected argument '%s'\n\n%s", a, usage_verify);
            return 2;
        }
    }
    if (st) {
        fprintf(stderr, "tessera verify: %s\n", ts_last_error());
        return 2;
    }
    if (!o.config || o.world < 1) {
        fprintf(stderr,
                "tessera verify: CONFIG and --world N (N >= 1) are required; --steps "
                "between 4 and 1000, --timeout > 0, --slow-rank >= 1\n\n%s",
                usage_verify);
        return 2;
    }
    ssize_t len = readlink("/proc/self/exe", o.self, sizeof o.self - 1);
    if (len <= 0) {
        fprintf(stderr, "tessera verify: cannot find this program's path\n");
        return 1;
    }
    o.self[len] = 0;
    /* The configuration must load as `tessera train` would read it (its
     * dtype decides the tolerance). */
    if (!o.launcher) o.launcher = o.world > 1 ? default_launcher() : "mpirun";
    ts_config *cfg = NULL;
    st = cli_config_create(&cfg);
    if (!st) st = ts_config_load(cfg, o.config);
    for (int i = 0; i < o.nsets && !st; i++) {
        const char *dot = strchr(o.sets[i], '.');
        size_t sec = dot ? (size_t)(dot - o.sets[i]) : 0;
        if (sec == 5 && (!strncmp(o.sets[i], "model", 5) || !strncmp(o.sets[i], "train", 5)))
            st = ts_config_set(cfg, o.sets[i]);
    }
    if (st) {
        fprintf(stderr, "tessera verify: %s\n", ts_last_error());
        ts_config_destroy(cfg);
        return 2;
    }
    snprintf(o.dtype, sizeof o.dtype, "%s", ts_config_str(cfg, "train", "dtype"));
    /* A configuration that names no parallel plugin has nothing to cut on
     * N ranks: its N-rank run is data parallel then, as a launcher's DDP
     * would be, and where the micro-batch on every rank would pass the
     * global batch, both runs take the largest micro-batch that divides the
     * global batch's share of a rank (the same micro-batches summed). */
    static char dp_micro[64], dp_global[64];
    char dp_note[400] = "";
    int named = 0, first = o.nsets;
    for (int i = 0; i < o.nsets; i++)
        named |= !strncmp(o.sets[i], "parallel.plugins=", 17);
    if (o.world > 1 && !named && !ts_config_str(cfg, "parallel", "plugins")[0] &&
        o.nsets + 3 <= MAX_SETS) {
        o.sets[o.nsets++] = "parallel.plugins=dp";
        int64_t mb = ts_config_int(cfg, "train", "micro_batch");
        int64_t gb = ts_config_int(cfg, "train", "global_batch");
        if (gb <= 0) { /* micro_batch x dp: the one-rank run sums as many */
            gb = mb * o.world;
            snprintf(dp_global, sizeof dp_global, "train.global_batch=%lld", (long long)gb);
            o.sets[o.nsets++] = dp_global;
        }
        int64_t share = gb % o.world == 0 ? gb / o.world : 0, fit = share < mb ? share : mb;
        while (fit > 1 && share % fit)
            fit--;
        if (fit >= 1 && fit != mb) {
            snprintf(dp_micro, sizeof dp_micro, "train.micro_batch=%lld", (long long)fit);
            o.sets[o.nsets++] = dp_micro;
        }
        int n = snprintf(dp_note, sizeof dp_note,
                         "%s names no parallel plugin: the %d-rank run is data parallel (",
                         o.config, o.world);
        for (int i = first; i < o.nsets && n > 0 && (size_t)n < sizeof dp_note; i++)
            n += snprintf(dp_note + n, sizeof dp_note - (size_t)n, "%s--set %s",
                          i > first ? " " : "", o.sets[i]);
        if (n > 0 && (size_t)n < sizeof dp_note)
            snprintf(dp_note + n, sizeof dp_note - (size_t)n, ")");
    }
    ts_config_destroy(cfg);
    o.tol = strcmp(o.dtype, "bf16") == 0 ? 1e-3 : 1e-5;
    if (o.keep) {
        snprintf(o.dir, sizeof o.dir, "%s", o.keep);
        /* A new directory, or an empty one that is not a link: the runs'
         * files are then the only ones in it, and none is a link planted
         * to have its target overwritten. */
        struct stat sb;
        if (mkdir(o.dir, 0755) != 0) {
            int empty = errno == EEXIST && lstat(o.dir, &sb) == 0 && S_ISDIR(sb.st_mode);
            DIR *d = empty ? opendir(o.dir) : NULL;
            for (struct dirent *e; d && empty && (e = readdir(d));)
                empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
            if (d) closedir(d);
            if (!empty) {
                fprintf(stderr, "tessera verify: --keep %s: %s\n", o.dir,
                        errno == EEXIST ? "exists and is not an empty directory; name a new one"
                                        : strerror(errno));
                return 2;
            }
        }
    } else {
        snprintf(o.dir, sizeof o.dir, "%s/tessera-verify.XXXXXX",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(o.dir)) {
            fprintf(stderr, "tessera verify: cannot make a temporary directory: %s\n",
                    strerror(errno));
            return 1;
        }
    }
    if (write_base_ini(&o) != 0) {
        fprintf(stderr, "tessera verify: cannot read %s or write %s\n", o.config, o.base_ini);
        return 1;
    }
    if (!o.json) {
        printf("verify %s on %d ranks (launcher: %s) against 1, %d steps, runs in %s\n", o.config,
               o.world, o.launcher, o.steps, o.dir);
        if (dp_note[0]) printf("%s\n", dp_note);
        fflush(stdout);
    }
    ledger num = {0}, mem = {0}, spd = {0}, rec = {0};
    int sb = train(&o, 1, "base", "base_ck", "base.jsonl", NULL, NULL);
    int sp = sb == 0 ? train(&o, o.world, "par", "par_ck", "par.jsonl", NULL, NULL) : -1;
    int rc = 0;
    if (sb != 0 || sp != 0) {
        /* tessera's own message, else the launcher's first lines. */
        char tail[2048];
        const char *name = sb != 0 ? "base" : "par";
        int own = log_tail(&o, name, "\n  ", tail, sizeof tail);
        fprintf(stderr, "tessera verify: the %s run failed (status %d; %s/%s.log)",
                sb != 0 ? "one-rank" : "N-rank", sb != 0 ? sb : sp, o.dir, name);
        if (own)
            fprintf(stderr, ": %s\n", tail);
        else if (sb == 0)
            fprintf(stderr, "; the launcher '%s -np %d' %s%s\n", o.launcher, o.world,
                    tail[0] ? "said:\n  " : "printed nothing", tail);
        else
            fprintf(stderr, "%s%s\n", tail[0] ? ":\n  " : "; it printed nothing", tail);
        rc = 1;
    } else {
        double bubble = 0;
        ledger_numerics(&o, &num);
        ledger_memory(&o, &mem, &bubble);
        ledger_speed(&o, &spd, bubble);
        ledger_recovery(&o, &rec);
        const char *names[4] = {"numerics", "memory", "speed", "recovery"};
        ledger *all[4] = {&num, &mem, &spd, &rec};
        int pass = 1;
        for (int i = 0; i < 4; i++)
            pass &= all[i]->pass;
        if (o.json) {
            printf("{\"config\":\"");
            for (const char *c = o.config; *c; c++) /* a JSON string */
                if (*c == '"' || *c == '\\')
                    printf("\\%c", *c);
                else if ((unsigned char)*c < 0x20)
                    printf("\\u%04x", *c);
                else
                    putchar(*c);
            printf("\",\"world\":%d,\"steps\":%d,\"pass\":%s,\"ledgers\":{", o.world, o.steps,
                   pass ? "true" : "false");
            for (int i = 0; i < 4; i++)
                printf("%s\"%s\":{\"pass\":%s,%s}", i ? "," : "", names[i],
                       all[i]->pass ? "true" : "false", all[i]->json);
            printf("}}\n");
        } else {
            printf("%-9s %-6s %s\n", "ledger", "result", "figures");
            for (int i = 0; i < 4; i++)
                printf("%-9s %-6s %s\n", names[i], all[i]->pass ? "PASS" : "FAIL", all[i]->text);
            printf("%s\n", pass ? "all four ledgers pass" : "verify: FAILED");
        }
        rc = pass ? 0 : 1;
    }
    if (!o.keep && rc == 0) {
        char *rm[] = {"rm", "-rf", "--", o.dir, NULL};
        if (spawn_wait(rm) != 0) fprintf(stderr, "tessera verify: could not remove %s\n", o.dir);
    } else if (rc != 0 && !o.json) {
        printf("the runs' files are kept in %s\n", o.dir);
    }
    return rc;
}
