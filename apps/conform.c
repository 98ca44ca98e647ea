/*
 * conform.c — `tessera conform PLUGIN.so`: the checks every plugin of a kind
 * must pass, run against the plugin file a third party built, with a table
 * of what passed (or one JSON object). Exit status 0 only when no check
 * fails (a check that does not apply to the kind, or cannot be judged, is
 * SKIP and says why).
 *
 *   abi          the core loads the file: ELF, entry point, descriptor (ABI
 *                major equal, minor not newer, struct_size at least 1.0's,
 *                name equal to the file's); the versions and sizes printed
 *   init         its init succeeds with a minimal configuration; what it
 *                registered (axes, transforms, hooks, module hooks,
 *                schedulers, dispatchers, providers) decides the kind when
 *                --kind is not given
 *   unknown_key  `tessera train` of a configuration with an undeclared key
 *                in [NAME] exits non-zero naming the section and the key
 *   bad_value    the same with one of the plugin's own keys out of range
 *                (below its minimum, or a word not among its choices)
 *   numerics     `tessera verify --json` on every point of the grid (ranks x
 *                model shapes): losses, gradient norms and final weights of
 *                the plugin's N ranks against one rank (1e-5 relative, fp32)
 *   memory       verify's memory ledger: every rank's model state equal to
 *                `tessera plan`'s dry run, activation and buffer peaks
 *                within 5 %
 *   comm         rank 0's calls and bytes per group and operation in every
 *                step of the N-rank run equal `tessera plan --json`'s
 *                prediction for rank 0 (the plan predicts per group and op)
 *   resume       verify's recovery ledger: a rank killed with SIGKILL, the
 *                job resumed on N ranks from the last checkpoint equals the
 *                uninterrupted run
 *   resume_other_topology  the same checkpoint resumed on one rank equals
 *                the one-rank run (not judged where numerics failed: the
 *                two runs differ before the kill)
 *
 * The runs use small GPT-2 models written into a temporary directory (two
 * shapes), 4 steps, on 2 and 4 ranks unless --world, --config or --steps
 * say otherwise; the plugin's section gets its size key, and the plugins it
 * needs beside it are named (dp where it claims no axis of the whole world,
 * ep for a dispatcher, pp for a scheduler).
 *
 * What it does not do: judge speed (verify's speed ledger is not a check
 * here), check a plugin's own keys beyond their declared ranges, or run the
 * dispatcher contract on rows directly (tests/test_dispatch.c does; here a
 * dispatcher is checked through the mixture-of-experts runs).
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "config.h"
#include "plugin.h"
#include "plugin_file.h"

static const char *usage_conform =
    "usage: tessera conform PLUGIN.so [--kind K] [--world N[,M...]] [--config BASE.ini]\n"
    "                       [--steps K] [--json] [--launcher CMD] [--timeout S] [--keep DIR]\n"
    "                       [--set section.key=value ...]\n"
    "\n"
    "Runs the checks every plugin of its kind must pass against the file\n"
    "PLUGIN.so (tessera-NAME.so) and prints a table, one row per check: its\n"
    "name, PASS, FAIL or SKIP, and a figure or the reason. Exit status 0 only\n"
    "when none fails. The kind is what the plugin's init registers unless\n"
    "--kind says it: strategy (axes or layout transforms), dispatcher,\n"
    "scheduler, attention, optimizer (an optimizer-state provider) or hook.\n"
    "  abi          the descriptor's ABI version and struct size; the file loads\n"
    "  init         init succeeds with a minimal configuration; what it registers\n"
    "  unknown_key  an undeclared key in [NAME] is refused naming it\n"
    "  bad_value    one of NAME's keys out of its range is refused naming it\n"
    "  numerics     tessera verify on each (ranks, model shape) of the grid:\n"
    "               losses, gradient norms, final weights against one rank (1e-5)\n"
    "  memory       every rank's memory against tessera plan's dry run\n"
    "  comm         rank 0's calls and bytes per group and op against tessera plan\n"
    "  resume       a rank killed mid-run; resumed on the same ranks, equal\n"
    "  resume_other_topology  its checkpoint resumed on one rank, equal\n"
    "\n"
    "  --kind K        strategy|dispatcher|scheduler|attention|optimizer|hook\n"
    "  --world N,M     the grid's rank counts (repeatable; default 2 and 4)\n"
    "  --config BASE   the model, data and training keys of the runs (default:\n"
    "                  two small GPT-2 shapes written by this command)\n"
    "  --steps K       steps of each run (default 4, at least 4)\n"
    "  --set s.k=v     override a key in every run (repeatable; the plugin's\n"
    "                  own sizes, the plugins named beside it, ...)\n"
    "  --json          one object: {\"plugin\", \"kind\", \"pass\", \"checks\": [{\"name\",\n"
    "                  \"result\": \"pass\"|\"fail\"|\"skip\", \"figures\"}, ...]}\n"
    "  --launcher CMD  how tessera verify starts N ranks (default: its own)\n"
    "  --timeout S     seconds one run may take (default 600)\n"
    "  --keep DIR      keep the configurations and runs in DIR, new or empty\n";

#define CF_MAX_SETS 64
#define CF_MAX_WORLDS 8
#define CF_MAX_REG 64

enum { CF_PASS = 0, CF_FAIL = 1, CF_SKIP = 2 };

enum {
    ROW_ABI,
    ROW_INIT,
    ROW_UNKNOWN,
    ROW_BADVAL,
    ROW_NUMERICS,
    ROW_MEMORY,
    ROW_COMM,
    ROW_RESUME,
    ROW_RESUME_OTHER,
    ROW_COUNT
};

static const char *row_names[ROW_COUNT] = {"abi",       "init",     "unknown_key",
                                           "bad_value", "numerics", "memory",
                                           "comm",      "resume",   "resume_other_topology"};

typedef struct cf_row {
    int result; /* CF_PASS, CF_FAIL, CF_SKIP; -1 not run yet */
    char text[1536];
} cf_row;

/* What the plugin registered in its init (from the registry's own
 * answers and its description). */
typedef struct cf_reg {
    int naxes;
    char axis[CF_MAX_REG][64];
    int axis_size[CF_MAX_REG]; /* TS_PLUGIN_AXIS_AUTO or >= 1 */
    int axis_expert[CF_MAX_REG];
    int ntransforms, nhooks, nmodule_hooks;
    char schedulers[CF_MAX_REG][64], dispatchers[CF_MAX_REG][64];
    int nschedulers, ndispatchers;
    char attention[64], optimizer[64], grads[64], storage[64];
    char summary[1024];
} cf_reg;

typedef struct cf_opts {
    const char *plugin, *kind, *base, *launcher, *keep;
    int steps, json, kind_given;
    double timeout_s;
    int nsets;
    const char *sets[CF_MAX_SETS];
    int nworlds, worlds[CF_MAX_WORLDS];
    char path[PATH_MAX], dir[PATH_MAX], name[128];
    char tmp[PATH_MAX], self[PATH_MAX];
    const ts_plugin_descriptor *desc;
    void *handle;
    cf_reg reg;
} cf_opts;

static void rsay(cf_row *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rsay(cf_row *r, const char *fmt, ...) {
    size_t n = strlen(r->text);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->text + n, sizeof r->text - n, fmt, ap);
    va_end(ap);
}

/* --- children ------------------------------------------------------------ */

/* Runs argv with stdout to `out` and stderr to `err` (the same file when
 * equal); verify runs its own runs within its timeout: allow it their sum. */
static int cf_run(const cf_opts *o, char **argv, const char *out, const char *err) {
    return cli_run_child("conform", argv, out, err, NULL, 8 * o->timeout_s);
}

/* The last line of `path` that begins "tessera" (the program's own
 * message), else its first line with words; "" when empty. */
static void cf_tail(const char *path, char *out, size_t size) {
    FILE *f = fopen(path, "r");
    char line[1024], first[1024] = "";
    int more = 0; /* the message ended with ':' and goes on in the next line */
    out[0] = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        size_t n = strlen(line), k = strlen(out);
        if (!strncmp(line, "tessera", 7)) {
            snprintf(out, size, "%s", line);
            more = n > 0 && line[n - 1] == ':';
        } else if (more && line[strspn(line, " \t")]) {
            snprintf(out + k, size - k, " %s", line + strspn(line, " \t"));
            more = 0;
        } else if (!first[0] && line[strspn(line, " \t")]) {
            snprintf(first, sizeof first, "%s", line + strspn(line, " \t"));
        }
    }
    if (f) fclose(f);
    if (!out[0]) snprintf(out, size, "%s", first);
}

/* The number after "KEY": at or after p (NaN when absent). */
static double cf_num(const char *p, const char *key) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *q = p ? strstr(p, pat) : NULL;
    if (!q) return NAN;
    q += strlen(pat);
    if (!strncmp(q, "true", 4)) return 1;
    if (!strncmp(q, "false", 5)) return 0;
    if (!strncmp(q, "null", 4)) return NAN;
    return strtod(q, NULL);
}

/* --- the communication of a run and of the plan --------------------------- */

#define CF_MAX_COMM 256
typedef struct cf_comm {
    int n;
    char key[CF_MAX_COMM][64]; /* "group.op" */
    double calls[CF_MAX_COMM], bytes[CF_MAX_COMM];
} cf_comm;

/* The end of the object or string starting at p ('{' or '"'). */
static const char *cf_skip(const char *p) {
    if (*p == '"') {
        for (p++; *p && *p != '"'; p++)
            if (*p == '\\' && p[1]) p++;
        return *p ? p + 1 : p;
    }
    int depth = 0;
    for (; *p; p++) {
        if (*p == '"') {
            p = cf_skip(p) - 1;
        } else if (*p == '{' || *p == '[') {
            depth++;
        } else if ((*p == '}' || *p == ']') && --depth == 0) {
            return p + 1;
        }
    }
    return p;
}

/* Calls fn for each "name":{...} member of the object at p. */
static void cf_members(const char *p,
                       void (*fn)(const char *name, size_t len, const char *obj, void *user),
                       void *user) {
    if (!p || *p != '{') return;
    const char *end = cf_skip(p);
    for (p++; p < end;) {
        p += strspn(p, " ,\n");
        if (*p != '"') break;
        const char *name = p + 1, *q = cf_skip(p);
        size_t len = (size_t)(q - 1 - name);
        q += strspn(q, " :");
        if (*q == '{') fn(name, len, q, user);
        p = *q == '{' || *q == '"' ? cf_skip(q) : q + strcspn(q, ",}");
    }
}

static void cf_comm_add(cf_comm *c, const char *key, const char *obj) {
    if (c->n == CF_MAX_COMM) return;
    snprintf(c->key[c->n], sizeof c->key[0], "%s", key);
    c->calls[c->n] = cf_num(obj, "calls");
    c->bytes[c->n] = cf_num(obj, "bytes");
    c->n++;
}

static void cf_plan_member(const char *name, size_t len, const char *obj, void *user) {
    char key[64];
    snprintf(key, sizeof key, "%.*s", (int)len, name);
    cf_comm_add(user, key, obj);
}

typedef struct cf_group_ctx {
    cf_comm *c;
    char group[48];
} cf_group_ctx;

static void cf_op_member(const char *name, size_t len, const char *obj, void *user) {
    cf_group_ctx *g = user;
    char key[64];
    snprintf(key, sizeof key, "%s.%.*s", g->group, (int)len, name);
    cf_comm_add(g->c, key, obj);
}

static void cf_group_member(const char *name, size_t len, const char *obj, void *user) {
    cf_group_ctx g = {.c = user};
    snprintf(g.group, sizeof g.group, "%.*s", (int)len, name);
    cf_members(obj, cf_op_member, &g);
}

static int cf_comm_find(const cf_comm *c, const char *key) {
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->key[i], key)) return i;
    return -1;
}

/* Compares rank 0's counters of every step of `jsonl` with the plan's
 * prediction in `plan_json`. 1 when equal; else 0 with the first
 * difference in `why`. `entries`: the plan's (group, op) count. */
/* A group of the expert routing ("ep", "etp-ep", ...): a token "ep". */
static int cf_routed_group(const char *key) {
    char g[64];
    snprintf(g, sizeof g, "%s", key);
    if (strchr(g, '.')) *strchr(g, '.') = 0;
    for (char *t = strtok(g, "-"); t; t = strtok(NULL, "-"))
        if (!strcmp(t, "ep")) return 1;
    return 0;
}

static int cf_comm_check(const char *plan_json, const char *jsonl, int steps, int routed,
                         double *routed_dev, int *entries, char *why, size_t size) {
    char *plan = cli_slurp(plan_json);
    const char *pc = plan ? strstr(plan, "\"comm\":{") : NULL;
    cf_comm *want = calloc(1, sizeof *want), *got = calloc(1, sizeof *got);
    int ok = pc && want && got;
    if (!pc) snprintf(why, size, "no \"comm\" in tessera plan's output (%.300s)", plan_json);
    if (ok) cf_members(pc + 7, cf_plan_member, want);
    *entries = want ? want->n : 0;
    FILE *f = ok ? fopen(jsonl, "r") : NULL;
    if (ok && !f) {
        snprintf(why, size, "no metrics (%.300s)", jsonl);
        ok = 0;
    }
    static char line[1 << 20];
    int seen = 0;
    while (ok && f && fgets(line, sizeof line, f)) {
        const char *rc = strstr(line, "}},\"comm\":{");
        if (!rc) continue;
        int step = (int)cf_num(line, "step");
        got->n = 0;
        cf_members(rc + 10, cf_group_member, got);
        seen++;
        for (int i = 0; ok && i < want->n + got->n; i++) {
            const char *k = i < want->n ? want->key[i] : got->key[i - want->n];
            int a = cf_comm_find(want, k), b = cf_comm_find(got, k);
            double wc = a >= 0 ? want->calls[a] : 0, wb = a >= 0 ? want->bytes[a] : 0;
            double gc = b >= 0 ? got->calls[b] : 0, gb = b >= 0 ? got->bytes[b] : 0;
            /* The rows a dispatcher moves follow the routing; the plan
             * routes evenly: their bytes are reported, not judged. */
            if (routed && cf_routed_group(k) && wc == gc) {
                double d = wb > 0 ? fabs(gb - wb) / wb : (gb != wb);
                if (d > *routed_dev) *routed_dev = d;
                continue;
            }
            if (wc != gc || wb != gb) {
                snprintf(why, size,
                         "step %d, %s: the run made %.0f calls of %.0f bytes, the plan predicts "
                         "%.0f calls of %.0f bytes",
                         step, k, gc, gb, wc, wb);
                ok = 0;
            }
        }
    }
    if (f) fclose(f);
    if (ok && seen != steps) {
        snprintf(why, size, "%d of %d steps have counters in %.300s", seen, steps, jsonl);
        ok = 0;
    }
    free(plan);
    free(want);
    free(got);
    return ok;
}

/* --- loading the plugin --------------------------------------------------- */

static int cf_write(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int cf_write(const char *path, const char *fmt, ...) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    return fclose(f) == 0 ? 0 : -1;
}

/* The registrations a plugin describes after init ("  dispatcher a2a"). */
static void cf_read_description(cf_reg *r, char *text) {
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char word[32], arg[64];
        if (sscanf(line, " %31s %63s", word, arg) != 2) continue;
        if (!strcmp(word, "transform"))
            r->ntransforms++;
        else if (!strcmp(word, "hook"))
            r->nhooks++;
        else if (!strcmp(word, "scheduler") && r->nschedulers < CF_MAX_REG)
            snprintf(r->schedulers[r->nschedulers++], 64, "%s", arg);
        else if (!strcmp(word, "dispatcher") && r->ndispatchers < CF_MAX_REG)
            snprintf(r->dispatchers[r->ndispatchers++], 64, "%s", arg);
    }
}

/* Who provides `what` on any axis the plugin or the built-in strategies
 * name: the first such axis in `out` ("" when none). */
static void cf_provided(const ts_plugins *reg, const cf_reg *r, ts_plugin_provision what,
                        const char *name, char *out, size_t size) {
    static const char *common[] = {"dp", "tp", "cp", "pp", "ep", "etp", "edp"};
    out[0] = 0;
    for (int i = 0; i < r->naxes + 7 && !out[0]; i++) {
        const char *axis = i < r->naxes ? r->axis[i] : common[i - r->naxes];
        const char *who = ts_plugins_provider(reg, what, axis);
        if (who && !strcmp(who, name)) snprintf(out, size, "%s", axis);
    }
}

/* What the plugin's init registered (o->reg, its summary line), and the
 * sizes of the tables it handed over onto the abi row. */
static void cf_registered(cf_opts *o, const ts_plugins *reg, cf_row *abi) {
    cf_reg *r = &o->reg;
    for (int i = 0; i < ts_plugins_num_axes(reg) && r->naxes < CF_MAX_REG; i++) {
        const ts_plugin_axis_entry *a = ts_plugins_axis(reg, i);
        if (strcmp(a->plugin, o->name) != 0) continue;
        snprintf(r->axis[r->naxes], sizeof r->axis[0], "%s", a->name);
        r->axis_size[r->naxes] = a->size;
        r->axis_expert[r->naxes] = a->mesh == TS_MESH_EXPERT;
        r->naxes++;
    }
    r->nmodule_hooks = ts_plugins_num_module_hooks(reg);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem) {
        ts_plugins_describe(reg, mem);
        fclose(mem);
        cf_read_description(r, text);
        free(text);
    }
    cf_provided(reg, r, TS_PROVIDE_ATTENTION, o->name, r->attention, sizeof r->attention);
    cf_provided(reg, r, TS_PROVIDE_OPTIMIZER_STATE, o->name, r->optimizer, sizeof r->optimizer);
    cf_provided(reg, r, TS_PROVIDE_GRAD_REDUCTION, o->name, r->grads, sizeof r->grads);
    cf_provided(reg, r, TS_PROVIDE_PARAM_STORAGE, o->name, r->storage, sizeof r->storage);
    /* What it registered, in one line. */
    char *s = r->summary;
    size_t cap = sizeof r->summary, n = 0;
#define CF_ADD(...)                                                                                \
    do {                                                                                           \
        if (n < cap) n += (size_t)snprintf(s + n, cap - n, __VA_ARGS__);                           \
    } while (0)
    for (int i = 0; i < r->naxes; i++) {
        CF_ADD("%saxis %s", n ? ", " : "", r->axis[i]);
        if (r->axis_size[i] == TS_PLUGIN_AXIS_AUTO)
            CF_ADD(" (auto%s)", r->axis_expert[i] ? ", expert mesh" : "");
        else
            CF_ADD(" (%d%s)", r->axis_size[i], r->axis_expert[i] ? ", expert mesh" : "");
    }
    if (r->ntransforms)
        CF_ADD("%s%d transform%s", n ? ", " : "", r->ntransforms, r->ntransforms == 1 ? "" : "s");
    if (r->nhooks) CF_ADD("%s%d hook%s", n ? ", " : "", r->nhooks, r->nhooks == 1 ? "" : "s");
    if (r->nmodule_hooks)
        CF_ADD("%s%d module hook%s", n ? ", " : "", r->nmodule_hooks,
               r->nmodule_hooks == 1 ? "" : "s");
    for (int i = 0; i < r->nschedulers; i++)
        CF_ADD("%sscheduler %s", n ? ", " : "", r->schedulers[i]);
    for (int i = 0; i < r->ndispatchers; i++)
        CF_ADD("%sdispatcher %s", n ? ", " : "", r->dispatchers[i]);
    if (r->attention[0]) CF_ADD("%sattention over %s", n ? ", " : "", r->attention);
    if (r->optimizer[0]) CF_ADD("%soptimizer state over %s", n ? ", " : "", r->optimizer);
    if (r->grads[0]) CF_ADD("%sgradient reduction over %s", n ? ", " : "", r->grads);
    if (r->storage[0]) CF_ADD("%sparameter storage over %s", n ? ", " : "", r->storage);
    if (!n) CF_ADD("nothing");
#undef CF_ADD
    /* The sizes of the tables it handed over (the core refused any too
     * small for what it reads: init would have failed). */
    for (int i = 0; i < r->ndispatchers; i++) {
        const ts_plugin_dispatcher_entry *d = ts_plugins_dispatcher(reg, r->dispatchers[i]);
        if (d)
            rsay(abi, "; dispatcher %s's ops %u bytes (this SDK's %zu)", r->dispatchers[i],
                 d->ops.struct_size, sizeof(ts_plugin_dispatcher_ops));
    }
    const ts_plugin_attention_ops *aops = NULL;
    const ts_plugin_optimizer_state_ops *oops = NULL;
    ts_plugin_ctx *pctx = NULL;
    void *puser = NULL;
    if (r->attention[0] && ts_plugins_attention(reg, r->attention, &aops, &pctx, &puser) && aops)
        rsay(abi, "; attention ops %u bytes (this SDK's %zu)", aops->struct_size,
             sizeof(ts_plugin_attention_ops));
    if (r->optimizer[0] && ts_plugins_optimizer_state(reg, r->optimizer, &oops, &pctx, &puser) &&
        oops)
        rsay(abi, "; optimizer-state ops %u bytes (this SDK's %zu)", oops->struct_size,
             sizeof(ts_plugin_optimizer_state_ops));
}

/* The abi row of a descriptor the core accepted: its ABI against the core's,
 * its size (1.0's fields at least; from 1.3 its flags, when it declares
 * them), its flags, and the sizes of the host table and its sub-tables the
 * core hands over. */
static void cf_abi_row(const cf_opts *o, const ts_plugins *reg, cf_row *abi) {
    unsigned major = TS_PLUGIN_ABI_MAJOR_OF(o->desc->abi_version),
             minor = TS_PLUGIN_ABI_MINOR_OF(o->desc->abi_version);
    uint32_t flags = 0;
    for (int i = 0; i < ts_plugins_count(reg); i++)
        if (!strcmp(ts_plugins_name(reg, i), o->name)) flags = ts_plugins_flags(reg, i);
    const ts_host *h = ts_plugins_host(reg);
    abi->result = CF_PASS;
    rsay(abi,
         "plugin %s %s built for ABI %u.%u (this core %u.%u%s); descriptor %u bytes (1.0 needs "
         "%zu, 1.3's flags %zu); %d key%s",
         o->name, o->desc->version, major, minor, TS_PLUGIN_ABI_MAJOR, TS_PLUGIN_ABI_MINOR,
         minor < TS_PLUGIN_ABI_MINOR ? ": an older minor, loaded" : "", o->desc->struct_size,
         (size_t)TS_PLUGIN_DESCRIPTOR_SIZE_1_0, (size_t)TS_PLUGIN_DESCRIPTOR_SIZE_1_3,
         o->desc->nkeys, o->desc->nkeys == 1 ? "" : "s");
    rsay(abi, "; flags 0x%x (%s)", (unsigned)flags,
         flags & TS_PLUGIN_THREAD_LOCAL_STATE ? "thread-local state: one trainer per thread"
                                              : "process-wide state: one trainer per process");
    rsay(abi, "; host table %u bytes (comms %u, dev %u, kernels %u, reg %u, config %u)",
         (unsigned)h->struct_size, (unsigned)h->comms->struct_size, (unsigned)h->dev->struct_size,
         (unsigned)h->kernels->struct_size, (unsigned)h->reg->struct_size,
         (unsigned)h->config->struct_size);
}

/* The abi and init rows: the plugin alone in a minimal configuration. */
static void cf_load(cf_opts *o, cf_row *abi, cf_row *init) {
    char ini[PATH_MAX + 32];
    snprintf(ini, sizeof ini, "%s/load.ini", o->tmp);
    if (cf_write(ini, "[parallel]\nplugins = %s\nplugin_path = %s\n", o->name, o->dir)) {
        abi->result = CF_FAIL;
        rsay(abi, "cannot write %s: %s", ini, strerror(errno));
        return;
    }
    ts_config *cfg = NULL;
    ts_plugins *reg = NULL;
    ts_status st = cli_config_create(&cfg);
    if (!st) st = ts_config_load(cfg, ini);
    /* The plugin alone: the --set values of the core's sections and its own
     * (those of plugins named beside it are for the runs). */
    static const char *core[] = {"model", "data", "train", "comm", "parallel", "cluster"};
    for (int i = 0; i < o->nsets && !st; i++) {
        const char *a = o->sets[i], *dot = strchr(a, '.');
        size_t len = dot ? (size_t)(dot - a) : 0;
        int keep = len == strlen(o->name) && !strncmp(a, o->name, len);
        for (size_t k = 0; k < sizeof core / sizeof core[0]; k++)
            keep |= len == strlen(core[k]) && !strncmp(a, core[k], len);
        if (keep && strncmp(a, "parallel.plugins=", 17) != 0) st = ts_config_set(cfg, a);
    }
    if (!st) st = ts_plugins_create(&reg);
    if (!st) ts_plugins_set_log(reg, stderr, TS_LOG_WARN);
    if (!st) st = ts_plugins_open(reg, cfg);
    if (st) {
        abi->result = CF_FAIL;
        rsay(abi, "%s", ts_last_error());
        ts_plugins_destroy(reg);
        ts_config_destroy(cfg);
        return;
    }
    /* The core opened it: the same object, for its descriptor. */
    o->handle = dlopen(o->path, RTLD_NOW | RTLD_LOCAL);
    ts_plugin_entry_fn entry =
        o->handle ? (ts_plugin_entry_fn)dlsym(o->handle, TS_PLUGIN_SYMBOL) : NULL;
    o->desc = entry ? entry() : NULL;
    if (!o->desc || ts_plugin_descriptor_check(o->name, o->path, o->desc)) {
        abi->result = CF_FAIL;
        rsay(abi, "%s", o->desc ? ts_last_error() : "the entry point gives no descriptor");
        o->desc = NULL;
        ts_plugins_destroy(reg);
        ts_config_destroy(cfg);
        return;
    } else {
        cf_abi_row(o, reg, abi);
    }
    st = ts_config_validate(cfg);
    if (!st) st = ts_plugins_init(reg);
    if (st) {
        init->result = CF_FAIL;
        rsay(init, "with [parallel] plugins = %s alone: %s", o->name, ts_last_error());
        for (int i = 0; o->desc && i < o->desc->nkeys; i++) {
            char given[160];
            snprintf(given, sizeof given, "%s.%s=", o->name, o->desc->keys[i].name);
            int set = 0;
            for (int k = 0; k < o->nsets; k++)
                set |= !strncmp(o->sets[k], given, strlen(given));
            if (!o->desc->keys[i].def && !set)
                rsay(init, "; [%s] %s has no default: give it with --set %s.%s=VALUE", o->name,
                     o->desc->keys[i].name, o->name, o->desc->keys[i].name);
        }
        ts_plugins_destroy(reg);
        ts_config_destroy(cfg);
        return;
    }
    cf_registered(o, reg, abi);
    init->result = CF_PASS;
    rsay(init, "init with [parallel] plugins = %s alone: registers %s", o->name, o->reg.summary);
    ts_plugins_destroy(reg);
    ts_config_destroy(cfg);
}

/* The kind from what init registered. */
static const char *cf_infer_kind(const cf_reg *r) {
    if (r->naxes || r->ntransforms) return "strategy";
    if (r->optimizer[0]) return "optimizer";
    if (r->attention[0]) return "attention";
    if (r->ndispatchers) return "dispatcher";
    if (r->nschedulers) return "scheduler";
    return "hook";
}

/* --- bad keys --------------------------------------------------------------- */

/* `tessera train` of `ini` must exit non-zero (not by a signal) with a
 * message naming "[NAME]" and `key`. */
static void cf_refused(const cf_opts *o, const char *ini, const char *key, const char *what,
                       cf_row *row) {
    char log[PATH_MAX + 32], msg[1024];
    snprintf(log, sizeof log, "%s.log", ini);
    char *argv[] = {(char *)o->self, "train", (char *)ini, NULL};
    int rc = cf_run(o, argv, log, log);
    cf_tail(log, msg, sizeof msg);
    char section[160];
    snprintf(section, sizeof section, "[%s]", o->name);
    /* A plugin without keys has no section: the section itself is refused. */
    int named = strstr(msg, section) && (strstr(msg, key) || o->desc->nkeys == 0);
    if (rc > 0 && rc < 128 && named) {
        row->result = CF_PASS;
        rsay(row, "%s: exit %d, \"%s\"", what, rc, msg);
    } else {
        row->result = CF_FAIL;
        if (rc == 0)
            rsay(row, "%s: accepted (exit 0)", what);
        else if (rc < 0 || rc >= 128)
            rsay(row, "%s: %s", what, rc < 0 ? "did not end in time" : "ended by a signal");
        else
            rsay(row, "%s: exit %d but the message does not name %s %s: \"%s\"", what, rc, section,
                 key, msg);
    }
}

/* The --set values of the plugin's own section as INI lines, but `skip`'s
 * (keys without a default must be given for the file to load). */
static void cf_own_sets(const cf_opts *o, const char *skip, char *out, size_t size) {
    size_t n = 0, nl = strlen(o->name);
    out[0] = 0;
    for (int i = 0; i < o->nsets; i++) {
        const char *a = o->sets[i], *eq = strchr(a, '=');
        if (strncmp(a, o->name, nl) != 0 || a[nl] != '.' || !eq) continue;
        const char *key = a + nl + 1;
        if (skip && (size_t)(eq - key) == strlen(skip) && !strncmp(key, skip, strlen(skip)))
            continue;
        if (n < size)
            n += (size_t)snprintf(out + n, size - n, "%.*s = %s\n", (int)(eq - key), key, eq + 1);
    }
}

/* The plugin alone in the bad-key files (they fail before anything runs). */
static void cf_bad_keys(const cf_opts *o, cf_row *unknown, cf_row *badval) {
    char ini[PATH_MAX + 32], own[2048];
    snprintf(ini, sizeof ini, "%s/unknown_key.ini", o->tmp);
    cf_own_sets(o, NULL, own, sizeof own);
    if (cf_write(ini,
                 "[parallel]\nplugins = %s\nplugin_path = %s\n[%s]\n%sconform_no_such_key = 1\n",
                 o->name, o->dir, o->name, own)) {
        unknown->result = CF_FAIL;
        rsay(unknown, "cannot write %s", ini);
    } else {
        char what[256];
        snprintf(what, sizeof what, "[%s] conform_no_such_key = 1", o->name);
        cf_refused(o, ini, "conform_no_such_key", what, unknown);
    }
    /* A key of its own, and a value outside what it declares: its size (or
     * the first key with a range), else the first with choices. */
    const ts_plugin_key *pick = NULL;
    char value[64] = "";
    for (int pass = 0; pass < 3 && !pick; pass++)
        for (int i = 0; i < o->desc->nkeys && !pick; i++) {
            const ts_plugin_key *k = &o->desc->keys[i];
            int ranged = (k->type == TS_PLUGIN_KEY_INT || k->type == TS_PLUGIN_KEY_FLOAT) &&
                         k->min <= k->max && k->min > -1e15;
            if (pass == 0 && ranged && !strcmp(k->name, "size")) pick = k;
            if (pass == 1 && ranged) pick = k;
            if (pass == 2 && (k->type == TS_PLUGIN_KEY_ENUM || k->type == TS_PLUGIN_KEY_BOOL))
                pick = k;
        }
    if (!pick) {
        badval->result = CF_SKIP;
        rsay(badval, "the plugin declares no key with a range, choices or a bool (%d key%s)",
             o->desc->nkeys, o->desc->nkeys == 1 ? "" : "s");
        return;
    }
    if (pick->type == TS_PLUGIN_KEY_INT)
        snprintf(value, sizeof value, "%.0f", floor(pick->min) - 1);
    else if (pick->type == TS_PLUGIN_KEY_FLOAT)
        snprintf(value, sizeof value, "%.17g", pick->min - fmax(1.0, fabs(pick->min)));
    else
        snprintf(value, sizeof value, "conform_not_a_choice");
    snprintf(ini, sizeof ini, "%s/bad_value.ini", o->tmp);
    char what[256];
    snprintf(what, sizeof what, "[%s] %s = %s", o->name, pick->name, value);
    cf_own_sets(o, pick->name, own, sizeof own);
    if (cf_write(ini, "[parallel]\nplugins = %s\nplugin_path = %s\n[%s]\n%s%s = %s\n", o->name,
                 o->dir, o->name, own, pick->name, value)) {
        badval->result = CF_FAIL;
        rsay(badval, "cannot write %s", ini);
        return;
    }
    cf_refused(o, ini, pick->name, what, badval);
}

/* --- the grid ------------------------------------------------------------------ */

/* The model shapes of the runs when no --config is given: small enough to
 * run in a second on one thread, divisible by 2 and 4 where the strategies
 * cut (heads, layers, 4 x d_model, the sequence in 2 x cp chunks). */
static const char *cf_shapes[][2] = {
    {"gpt2 2x32",
     "[model]\nlayers = 2\nd_model = 32\nheads = 4\nvocab = 64\ncontext = 32\n"
     "[data]\nsource = synthetic\nsynthetic_tokens = 16384\n"
     "[train]\nseq_len = 16\nglobal_batch = 8\nmicro_batch = 2\nlr = 2e-3\nwarmup = 1\n"
     "grad_clip = 1.0\nseed = 7\n"},
    {"gpt2 4x48",
     "[model]\nlayers = 4\nd_model = 48\nheads = 4\nvocab = 96\ncontext = 32\n"
     "[data]\nsource = synthetic\nsynthetic_tokens = 16384\n"
     "[train]\nseq_len = 16\nglobal_batch = 8\nmicro_batch = 2\nlr = 1e-3\nwarmup = 1\n"
     "grad_clip = 1.0\nseed = 11\n"},
};

/* The --set values of one grid point: the plugins named, the plugin's size,
 * the mixture-of-experts keys where its kind needs them, then the user's. */
typedef struct cf_point {
    int world, shape, moe;
    char ini[PATH_MAX + 32];
    char keep[PATH_MAX + 32];
    char label[64];
    int nsets;
    char sets[16][PATH_MAX + 64];
} cf_point;

static void cf_point_sets(const cf_opts *o, cf_point *p) {
    const cf_reg *r = &o->reg;
    int dense_fixed = 0, dense_auto = 0, expert = 0, size_key = 0;
    for (int i = 0; i < r->naxes; i++) {
        if (r->axis_expert[i])
            expert = 1;
        else if (r->axis_size[i] == TS_PLUGIN_AXIS_AUTO)
            dense_auto = 1;
        else
            dense_fixed = 1;
    }
    for (int i = 0; i < o->desc->nkeys; i++)
        size_key |=
            !strcmp(o->desc->keys[i].name, "size") && o->desc->keys[i].type == TS_PLUGIN_KEY_INT;
    const char *kind = o->kind;
    char plugins[512] = "";
    int moe = expert, cut = 1;
    p->nsets = 0;
#define CF_SET(...) snprintf(p->sets[p->nsets++], sizeof p->sets[0], __VA_ARGS__)
    if (!strcmp(kind, "dispatcher")) {
        snprintf(plugins, sizeof plugins, "dp, %s%s", strcmp(o->name, "ep") ? "ep, " : "", o->name);
        CF_SET("ep.size=2");
        CF_SET("ep.dispatcher=%s", r->ndispatchers ? r->dispatchers[0] : o->name);
        moe = 1;
    } else if (!strcmp(kind, "scheduler")) {
        snprintf(plugins, sizeof plugins, "%s%s%s", o->name, strcmp(o->name, "pp") ? ", pp" : "",
                 p->world > 2 && strcmp(o->name, "dp") ? ", dp" : "");
        CF_SET("pp.size=2");
    } else if (dense_auto) {
        /* An axis of its own takes the rest of the world. */
        snprintf(plugins, sizeof plugins, "%s", o->name);
    } else {
        /* Its own size 2 (when it has one), dp for the rest of the world. */
        if (size_key && (dense_fixed || expert)) {
            CF_SET("%s.size=2", o->name);
            cut = 2;
        }
        int need_dp = strcmp(o->name, "dp") != 0 && (expert || !dense_fixed || p->world > cut);
        snprintf(plugins, sizeof plugins, "%s%s", need_dp ? "dp, " : "", o->name);
    }
    p->moe = moe;
    if (moe) {
        CF_SET("model.experts=4");
        CF_SET("model.top_k=2");
    }
    CF_SET("parallel.plugins=%s", plugins);
    CF_SET("parallel.plugin_path=%s", o->dir);
#undef CF_SET
}

/* Rank r's activation and communication-buffer peaks, measured (the N-rank
 * run's summary) and planned (its plan), in `out` ("" when unreadable). */
static void cf_peaks(const char *keep, int r, char *out, size_t size) {
    char path[PATH_MAX + 64], key[32];
    snprintf(path, sizeof path, "%s/par.summary.json", keep);
    char *sum = cli_slurp(path);
    snprintf(path, sizeof path, "%s/plan%d.json", keep, r);
    char *plan = cli_slurp(path);
    snprintf(key, sizeof key, "{\"rank\":%d,", r);
    const char *m = sum ? strstr(sum, key) : NULL, *pm = plan ? strstr(plan, "\"memory\":") : NULL;
    out[0] = 0;
    if (m && pm) {
        const double M = 1048576;
        snprintf(out, size,
                 "rank %d: activations peak %.3f MiB, plan %.3f; communication buffers peak %.3f "
                 "MiB, plan %.3f",
                 r, cf_num(strstr(m, "\"activations\":"), "peak") / M,
                 cf_num(pm, "activations") / M, cf_num(strstr(m, "\"comm\":"), "peak") / M,
                 cf_num(pm, "comm") / M);
    }
    free(sum);
    free(plan);
}

/* One verify run: its JSON's ledger object for `name`, or NULL. */
static const char *cf_ledger(const char *json, const char *name) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":{", name);
    return json ? strstr(json, pat) : NULL;
}

/* What the grid's runs add up to, for the rows' figures. */
typedef struct cf_tally {
    int ran, npoints, comm_entries, other_judged, other_skipped, moe_runs;
    double worst_loss, worst_norm, worst_w, worst_peak, worst_resume, worst_other;
    double routed_dev, moe_peak;
    char labels[512];
} cf_tally;

/* Makes the row a failure (its text cleared) unless it failed already:
 * the first failing run is the one named. 1 when it was not failed yet. */
static int cf_fails(cf_row *r) {
    if (r->result == CF_FAIL) return 0;
    r->result = CF_FAIL;
    r->text[0] = 0;
    return 1;
}

/* Runs `tessera verify --json` of one grid point: stdout to `out`, stderr
 * to `err`; returns its exit status (cf_run). */
static int cf_verify(const cf_opts *o, const cf_point *p, const char *out, const char *err) {
    char world[16], steps[16], timeout[32];
    snprintf(world, sizeof world, "%d", p->world);
    snprintf(steps, sizeof steps, "%d", o->steps);
    snprintf(timeout, sizeof timeout, "%g", o->timeout_s);
    char *argv[2 * (CF_MAX_SETS + 16) + 32];
    int n = 0;
    const char *fixed[] = {o->self,  "verify", p->ini,  "--world",   world,   "--steps",     steps,
                           "--json", "--keep", p->keep, "--timeout", timeout, "--slow-rank", "1e9"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        argv[n++] = (char *)fixed[i];
    if (o->launcher) {
        argv[n++] = "--launcher";
        argv[n++] = (char *)o->launcher;
    }
    for (int i = 0; i < p->nsets; i++) {
        argv[n++] = "--set";
        argv[n++] = (char *)p->sets[i];
    }
    for (int i = 0; i < o->nsets; i++) {
        argv[n++] = "--set";
        argv[n++] = (char *)o->sets[i];
    }
    argv[n] = NULL;
    if (!o->json) {
        fprintf(stderr, "conform: tessera verify on %s ...\n", p->label);
        fflush(stderr);
    }
    return cf_run(o, argv, out, err);
}

/* The rows of one run that verify completed: its ledgers (`num`, `mem`,
 * `rec`) and the communication of its files against the plan. */
static void cf_judge(const cf_opts *o, const cf_point *p, const char *num, const char *mem,
                     const char *rec, cf_row *rows, cf_tally *t) {
    t->ran++;
    double tol = cf_num(num, "tolerance"), bad = cf_num(num, "first_bad_step");
    int num_ok = cf_num(num, "pass") == 1;
    if (!num_ok && cf_fails(&rows[ROW_NUMERICS])) {
        rsay(&rows[ROW_NUMERICS],
             "%s: loss max rel %.1e, grad norm max rel %.1e, final weights rel L2 %.1e "
             "(tolerance %g)",
             p->label, cf_num(num, "loss_max_rel"), cf_num(num, "grad_norm_max_rel"),
             cf_num(num, "weights_rel_l2"), tol);
        if (bad > 0)
            rsay(&rows[ROW_NUMERICS], "; first differs at step %.0f (%s)", bad,
                 cf_num(num, "loss_max_rel") > tol ? "loss" : "gradient norm");
    }
    t->worst_loss = fmax(t->worst_loss, cf_num(num, "loss_max_rel"));
    t->worst_norm = fmax(t->worst_norm, cf_num(num, "grad_norm_max_rel"));
    t->worst_w = fmax(t->worst_w, cf_num(num, "weights_rel_l2"));
    /* With experts the activations follow the routing (the plan routes
     * evenly): the model state is judged, the peaks reported. */
    int mem_ok = cf_num(mem, "pass") == 1;
    if (p->moe) {
        t->moe_runs++;
        mem_ok = cf_num(mem, "state_mismatch_rank") == -1;
        t->moe_peak = fmax(t->moe_peak, cf_num(mem, "peak_rel"));
    } else {
        t->worst_peak = fmax(t->worst_peak, cf_num(mem, "peak_rel"));
    }
    if (!mem_ok && cf_fails(&rows[ROW_MEMORY])) {
        double rank = cf_num(mem, "state_mismatch_rank");
        rsay(&rows[ROW_MEMORY], "%s: ", p->label);
        if (rank >= 0)
            rsay(&rows[ROW_MEMORY],
                 "rank %.0f's parameters, gradients or optimizer state differ from the plan; ",
                 rank);
        char peaks[512];
        cf_peaks(p->keep, (int)cf_num(mem, "worst_rank"), peaks, sizeof peaks);
        rsay(&rows[ROW_MEMORY], "%s (within 5%% or 64 KiB required); the runs: %s",
             peaks[0] ? peaks : "the peaks differ from the plan", p->keep);
    }
    char why[512] = "", plan[PATH_MAX + 64], metrics[PATH_MAX + 64];
    snprintf(plan, sizeof plan, "%s/plan0.json", p->keep);
    snprintf(metrics, sizeof metrics, "%s/par.jsonl", p->keep);
    int entries = 0;
    if (!cf_comm_check(plan, metrics, o->steps, p->moe, &t->routed_dev, &entries, why,
                       sizeof why) &&
        cf_fails(&rows[ROW_COMM]))
        rsay(&rows[ROW_COMM], "%s: %s", p->label, why);
    if (entries > t->comm_entries) t->comm_entries = entries;
    if (cf_num(rec, "same_topology_pass") != 1 && cf_fails(&rows[ROW_RESUME]))
        rsay(&rows[ROW_RESUME],
             "%s: rank %.0f killed after step %.0f, resumed from step %.0f on %d ranks: differs "
             "from the uninterrupted run (max rel %.1e)",
             p->label, cf_num(rec, "killed_rank"), cf_num(rec, "killed_after_step"),
             cf_num(rec, "resumed_from"), p->world, cf_num(rec, "same_topology_max_rel"));
    t->worst_resume = fmax(t->worst_resume, cf_num(rec, "same_topology_max_rel"));
    if (!num_ok) {
        t->other_skipped++;
        return;
    }
    t->other_judged++;
    t->worst_other = fmax(t->worst_other, cf_num(rec, "one_rank_max_rel"));
    if (cf_num(rec, "one_rank_pass") != 1 && cf_fails(&rows[ROW_RESUME_OTHER]))
        rsay(&rows[ROW_RESUME_OTHER],
             "%s: the step-%.0f checkpoint of %d ranks resumed on one rank differs from the "
             "one-rank run (max rel %.1e)",
             p->label, cf_num(rec, "resumed_from"), p->world, cf_num(rec, "one_rank_max_rel"));
}

/* The figures of the rows that passed every run. */
static void cf_summary(const cf_opts *o, cf_row *rows, const cf_tally *t) {
    if (!t->ran) return;
    if (rows[ROW_NUMERICS].result == CF_PASS)
        rsay(&rows[ROW_NUMERICS],
             "%d of %d runs (%s), %d steps each: loss max rel %.1e, grad norm max rel %.1e, final "
             "weights rel L2 %.1e",
             t->ran, t->npoints, t->labels, o->steps, t->worst_loss, t->worst_norm, t->worst_w);
    if (rows[ROW_MEMORY].result == CF_PASS) {
        rsay(&rows[ROW_MEMORY],
             "%d runs: every rank's params, grads and optimizer state equal to the plan", t->ran);
        if (t->moe_runs < t->ran)
            rsay(&rows[ROW_MEMORY], "; activation and buffer peaks within %.1f%%",
                 100 * t->worst_peak);
        if (t->moe_runs)
            rsay(&rows[ROW_MEMORY],
                 " (%d mixture-of-experts run%s: peaks %.1f%% from the plan's even routing, "
                 "reported, not judged)",
                 t->moe_runs, t->moe_runs == 1 ? "" : "s", 100 * t->moe_peak);
    }
    if (rows[ROW_COMM].result == CF_PASS) {
        rsay(&rows[ROW_COMM],
             "%d runs: rank 0's calls and bytes of every step equal the plan's (up to %d "
             "group.op entries a run)",
             t->ran, t->comm_entries);
        if (t->moe_runs)
            rsay(&rows[ROW_COMM],
                 "; the expert groups' bytes follow the routing: at most %.1f%% from the plan's "
                 "even routing (calls equal; bytes reported, not judged)",
                 100 * t->routed_dev);
    }
    if (rows[ROW_RESUME].result == CF_PASS)
        rsay(&rows[ROW_RESUME],
             "%d runs: a rank killed with SIGKILL, resumed on the same ranks: max rel %.1e", t->ran,
             t->worst_resume);
    cf_row *other = &rows[ROW_RESUME_OTHER];
    if (other->result != CF_PASS) return;
    if (t->other_judged)
        rsay(other, "%d runs: resumed on one rank: max rel %.1e", t->other_judged, t->worst_other);
    if (t->other_skipped) {
        if (!t->other_judged) other->result = CF_SKIP;
        rsay(other,
             "%snot judged on %d run%s: numerics failed there (the N-rank and one-rank runs "
             "differ before the kill)",
             t->other_judged ? "; " : "", t->other_skipped, t->other_skipped == 1 ? "" : "s");
    }
}

static void cf_grid(cf_opts *o, cf_row *rows) {
    int nshapes = o->base ? 1 : (int)(sizeof cf_shapes / sizeof cf_shapes[0]);
    cf_tally *t = calloc(1, sizeof *t);
    if (!t) return;
    t->npoints = o->nworlds * nshapes;
    for (int k = ROW_NUMERICS; k <= ROW_RESUME_OTHER; k++)
        rows[k].result = CF_PASS;
    const char *bn = o->base && strrchr(o->base, '/') ? strrchr(o->base, '/') + 1 : o->base;
    for (int wi = 0; wi < o->nworlds; wi++)
        for (int si = 0; si < nshapes; si++) {
            cf_point *p = calloc(1, sizeof *p);
            if (!p) break;
            p->world = o->worlds[wi];
            p->shape = si;
            snprintf(p->label, sizeof p->label, "%d ranks, %s", p->world,
                     o->base ? bn : cf_shapes[si][0]);
            if (o->base) {
                snprintf(p->ini, sizeof p->ini, "%s", o->base);
            } else {
                snprintf(p->ini, sizeof p->ini, "%s/shape%d.ini", o->tmp, si);
                cf_write(p->ini, "%s", cf_shapes[si][1]);
            }
            snprintf(p->keep, sizeof p->keep, "%s/w%d_s%d", o->tmp, p->world, si);
            cf_point_sets(o, p);
            char out[PATH_MAX + 64], err[PATH_MAX + 64];
            snprintf(out, sizeof out, "%s/w%d_s%d.json", o->tmp, p->world, si);
            snprintf(err, sizeof err, "%s/w%d_s%d.err", o->tmp, p->world, si);
            int rc = cf_verify(o, p, out, err);
            char *json = cli_slurp(out);
            const char *num = cf_ledger(json, "numerics"), *mem = cf_ledger(json, "memory"),
                       *rec = cf_ledger(json, "recovery");
            size_t len = strlen(t->labels);
            snprintf(t->labels + len, sizeof t->labels - len, "%s%s", len ? "; " : "", p->label);
            if (num && mem && rec) {
                cf_judge(o, p, num, mem, rec, rows, t);
            } else {
                /* verify did not get to its ledgers: its own message. */
                char msg[1024];
                cf_tail(err, msg, sizeof msg);
                int first = rows[ROW_NUMERICS].result != CF_FAIL;
                for (int k = ROW_NUMERICS; k <= ROW_RESUME_OTHER; k++)
                    if (cf_fails(&rows[k]) && (k == ROW_NUMERICS || !first))
                        rsay(&rows[k], "%s: tessera verify failed (exit %d): %s", p->label, rc,
                             msg[0] ? msg : "(no message)");
                    else if (rows[k].text[0] == 0)
                        rsay(&rows[k],
                             "%s: tessera verify failed (exit %d; its message under numerics)",
                             p->label, rc);
            }
            free(json);
            free(p);
        }
    cf_summary(o, rows, t);
    free(t);
}

/* --- the command ------------------------------------------------------------ */

static void cf_json_string(const char *s) {
    putchar('"');
    for (const char *c = s; *c; c++)
        if (*c == '"' || *c == '\\')
            printf("\\%c", *c);
        else if ((unsigned char)*c < 0x20)
            printf("\\u%04x", *c);
        else
            putchar(*c);
    putchar('"');
}

static int cf_parse_worlds(cf_opts *o, const char *text) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", text);
    for (char *w = strtok(buf, ", "); w; w = strtok(NULL, ", ")) {
        int64_t v = 0;
        if (o->nworlds == CF_MAX_WORLDS || cli_parse_int("--world", w, 2, 1 << 20, &v)) return -1;
        o->worlds[o->nworlds++] = (int)v;
    }
    return 0;
}

static int cf_make_dir(cf_opts *o) {
    if (o->keep) {
        snprintf(o->tmp, sizeof o->tmp, "%s", o->keep);
        if (mkdir(o->tmp, 0755) != 0) {
            struct stat sb;
            int empty = errno == EEXIST && lstat(o->tmp, &sb) == 0 && S_ISDIR(sb.st_mode);
            DIR *d = empty ? opendir(o->tmp) : NULL;
            for (struct dirent *e; d && empty && (e = readdir(d));)
                empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
            if (d) closedir(d);
            if (!empty) {
                fprintf(stderr, "tessera conform: --keep %s: not a new or empty directory\n",
                        o->tmp);
                return 2;
            }
        }
        return 0;
    }
    snprintf(o->tmp, sizeof o->tmp, "%s/tessera-conform.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(o->tmp)) {
        fprintf(stderr, "tessera conform: cannot make a temporary directory: %s\n",
                strerror(errno));
        return 1;
    }
    return 0;
}

/* The table (or the --json object) of the rows. */
static void cf_print(const cf_opts *o, const cf_row *rows, int pass) {
    static const char *res[] = {"PASS", "FAIL", "SKIP"};
    if (o->json) {
        printf("{\"plugin\":");
        cf_json_string(o->path);
        printf(",\"name\":");
        cf_json_string(o->name);
        printf(",\"kind\":");
        cf_json_string(o->kind ? o->kind : "");
        printf(",\"kind_inferred\":%s,\"registers\":", o->kind_given ? "false" : "true");
        cf_json_string(o->reg.summary);
        printf(",\"worlds\":[");
        for (int i = 0; i < o->nworlds; i++)
            printf("%s%d", i ? "," : "", o->worlds[i]);
        printf("],\"steps\":%d,\"pass\":%s,\"checks\":[", o->steps, pass ? "true" : "false");
        for (int k = 0; k < ROW_COUNT; k++) {
            printf("%s{\"name\":\"%s\",\"result\":\"%s\",\"figures\":", k ? "," : "", row_names[k],
                   rows[k].result == CF_PASS   ? "pass"
                   : rows[k].result == CF_FAIL ? "fail"
                                               : "skip");
            cf_json_string(rows[k].text);
            printf("}");
        }
        printf("]}\n");
    } else {
        printf("conform %s: plugin %s, kind %s (%s)%s%s\n", o->path, o->name,
               o->kind ? o->kind : "unknown", o->kind_given ? "--kind" : "from what it registers",
               o->reg.summary[0] ? "; registers " : "", o->reg.summary);
        printf("%-22s %-6s %s\n", "check", "result", "figures");
        for (int k = 0; k < ROW_COUNT; k++)
            printf("%-22s %-6s %s\n", row_names[k], res[rows[k].result], rows[k].text);
        int failed = 0, skipped = 0;
        for (int k = 0; k < ROW_COUNT; k++) {
            failed += rows[k].result == CF_FAIL;
            skipped += rows[k].result == CF_SKIP;
        }
        if (pass)
            printf("conform: PASS (%d checks, %d skipped)\n", ROW_COUNT - skipped, skipped);
        else {
            printf("conform: FAILED:");
            for (int k = 0; k < ROW_COUNT; k++)
                if (rows[k].result == CF_FAIL) printf(" %s", row_names[k]);
            printf("\n");
        }
    }
}

int cmd_conform(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage_conform, stdout);
            return 0;
        }
    static cf_opts o;
    memset(&o, 0, sizeof o);
    o.steps = 4;
    o.timeout_s = 600;
    ts_status st = TS_OK;
    for (int i = 0; i < argc && !st; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        int64_t v = 0;
        if (!strcmp(a, "--kind") && more) {
            o.kind = argv[++i];
            o.kind_given = 1;
        } else if (!strcmp(a, "--world") && more) {
            if (cf_parse_worlds(&o, argv[++i]))
                st = ts_error(TS_ERR_CONFIG,
                              "--world '%s': rank counts from 2 up, separated by commas (at "
                              "most %d in all)",
                              argv[i], CF_MAX_WORLDS);
        } else if (!strcmp(a, "--steps") && more) {
            st = cli_parse_int(a, argv[++i], 4, 1000, &v);
            o.steps = (int)v;
        } else if (!strcmp(a, "--config") && more) {
            o.base = argv[++i];
        } else if (!strcmp(a, "--json")) {
            o.json = 1;
        } else if (!strcmp(a, "--launcher") && more) {
            o.launcher = argv[++i];
        } else if (!strcmp(a, "--timeout") && more) {
            st = cli_parse_number(a, argv[++i], 1e-3, 1e7, &o.timeout_s);
        } else if (!strcmp(a, "--keep") && more) {
            o.keep = argv[++i];
        } else if (!strcmp(a, "--set") && more && o.nsets < CF_MAX_SETS) {
            o.sets[o.nsets++] = argv[++i];
        } else if (!o.plugin && a[0] != '-') {
            o.plugin = a;
        } else {
            fprintf(stderr, "tessera conform: unexpected argument '%s'\n\n%s", a, usage_conform);
            return 2;
        }
    }
    if (st) {
        fprintf(stderr, "tessera conform: %s\n", ts_last_error());
        return 2;
    }
    static const char *kinds[] = {"strategy",  "dispatcher", "scheduler",
                                  "attention", "optimizer",  "hook"};
    int known = !o.kind;
    for (size_t i = 0; o.kind && i < sizeof kinds / sizeof kinds[0]; i++)
        known |= !strcmp(o.kind, kinds[i]);
    if (!o.plugin || !known) {
        fprintf(stderr, "tessera conform: %s\n\n%s",
                !o.plugin ? "PLUGIN.so is required"
                          : "--kind: one of strategy, dispatcher, scheduler, attention, "
                            "optimizer, hook",
                usage_conform);
        return 2;
    }
    if (!o.nworlds) {
        o.worlds[o.nworlds++] = 2;
        o.worlds[o.nworlds++] = 4;
    }
    /* The file: tessera-NAME.so, found by its directory. */
    const char *base = strrchr(o.plugin, '/') ? strrchr(o.plugin, '/') + 1 : o.plugin;
    size_t bl = strlen(base);
    if (strncmp(base, "tessera-", 8) != 0 || bl <= 11 || strcmp(base + bl - 3, ".so") != 0 ||
        bl - 11 >= sizeof o.name) {
        fprintf(stderr, "tessera conform: %s: a plugin file is named tessera-NAME.so\n", o.plugin);
        return 2;
    }
    snprintf(o.name, sizeof o.name, "%.*s", (int)(bl - 11), base + 8);
    if (!realpath(o.plugin, o.path)) {
        fprintf(stderr, "tessera conform: %s: %s\n", o.plugin, strerror(errno));
        return 2;
    }
    snprintf(o.dir, sizeof o.dir, "%s", o.path);
    *strrchr(o.dir, '/') = 0;
    if (o.base && access(o.base, R_OK) != 0) {
        fprintf(stderr, "tessera conform: --config %s: %s\n", o.base, strerror(errno));
        return 2;
    }
    ssize_t len = readlink("/proc/self/exe", o.self, sizeof o.self - 1);
    if (len <= 0) {
        fprintf(stderr, "tessera conform: cannot find this program's path\n");
        return 1;
    }
    o.self[len] = 0;
    int rc = cf_make_dir(&o);
    if (rc) return rc;

    cf_row rows[ROW_COUNT];
    memset(rows, 0, sizeof rows);
    for (int k = 0; k < ROW_COUNT; k++)
        rows[k].result = -1;
    cf_load(&o, &rows[ROW_ABI], &rows[ROW_INIT]);
    if (rows[ROW_INIT].result == CF_PASS) {
        if (!o.kind) o.kind = cf_infer_kind(&o.reg);
        cf_bad_keys(&o, &rows[ROW_UNKNOWN], &rows[ROW_BADVAL]);
        int named = 0;
        for (int i = 0; i < o.nsets; i++)
            named |= !strncmp(o.sets[i], "parallel.plugins=", 17);
        const char *cannot = NULL;
        if (!strcmp(o.kind, "attention") && !o.reg.naxes && !named)
            cannot = "an attention provider without an axis of its own: name the plugin that "
                     "cuts the sequences with --set parallel.plugins=...";
        if (!strcmp(o.kind, "scheduler") && !o.reg.naxes && !named)
            cannot = "a scheduler alone does not run: the core runs one scheduler and pp "
                     "registers its own (\"2 schedulers are registered; one is expected\"); "
                     "check it inside the pipeline strategy that registers it";
        if (cannot)
            for (int k = ROW_NUMERICS; k < ROW_COUNT; k++) {
                rows[k].result = CF_SKIP;
                rsay(&rows[k], "%s", cannot);
            }
        else
            cf_grid(&o, rows);
    }
    for (int k = 0; k < ROW_COUNT; k++)
        if (rows[k].result < 0) {
            rows[k].result = CF_SKIP;
            rsay(&rows[k], "not run: %s failed",
                 rows[ROW_ABI].result == CF_FAIL ? "abi (the core does not load it)" : "init");
        }
    int pass = 1;
    for (int k = 0; k < ROW_COUNT; k++)
        pass &= rows[k].result != CF_FAIL;
    cf_print(&o, rows, pass);
    if (!o.keep && pass) {
        pid_t pid = fork();
        if (pid == 0) {
            execlp("rm", "rm", "-rf", "--", o.tmp, (char *)NULL);
            _exit(127);
        }
        int status;
        if (pid > 0) waitpid(pid, &status, 0);
    } else if (!pass && !o.json) {
        printf("the configurations and runs are kept in %s\n", o.tmp);
    }
    if (o.handle) dlclose(o.handle);
    return pass ? 0 : 1;
}
