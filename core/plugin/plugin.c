/*
 * plugin.c — the plugin loader and registry (contract in core/plugin.h; the
 * plugin author's side in include/tessera/plugin.h).
 *
 * Loading a plugin: find <dir>/tessera-<name>.so in the search path, dlopen
 * it, dlsym the one entry point, check the descriptor (ABI major, minor,
 * struct size, name = file name), copy it, and register its INI keys with the
 * config under [<name>]. init is called later, with the host table below;
 * every registration made through the host table is checked against the
 * earlier plugins' and copied into the registry's arrays.
 *
 * What it does not do: build the mesh or communicators (host->comm asks a
 * function the core sets), or know any plugin by name.
 */
#define _GNU_SOURCE /* dladdr */
#include "plugin.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "plugin_file.h"    /* ts_plugin_file_check: the ELF checks before dlopen */
#include "tessera/layout.h" /* the plan transforms edit, and who set what */
#include "schedule.h"       /* ts_schedule, ts_action: what schedulers append to */

_Static_assert(TS_PLUGIN_KEY_INT == (int)TS_KEY_INT && TS_PLUGIN_KEY_FLOAT == (int)TS_KEY_FLOAT &&
                   TS_PLUGIN_KEY_BOOL == (int)TS_KEY_BOOL &&
                   TS_PLUGIN_KEY_STRING == (int)TS_KEY_STRING &&
                   TS_PLUGIN_KEY_ENUM == (int)TS_KEY_ENUM,
               "plugin key types mirror the config's");
_Static_assert(TS_PLUGIN_ACT_FORWARD == TS_ACT_FORWARD &&
                   TS_PLUGIN_ACT_RECV_GRAD == TS_ACT_RECV_GRAD &&
                   TS_PLUGIN_ACT_OPTIMIZER_STEP == TS_ACT_OPTIMIZER_STEP,
               "plugin action kinds mirror the schedule's");

#define PLG_MSG 2048
#define PLG_CTX_MAGIC 0x74706c67u /* "tplg" */

struct ts_plugin_ctx {
    uint32_t magic;
    ts_plugins *reg;
    char name[TS_PLUGIN_NAME_MAX];
    char *path;
    void *handle;
    ts_plugin_descriptor desc; /* copy; fields past the plugin's size zeroed */
    int in_init, initialised;
    ts_status reg_status; /* first failed registration during init */
    char reg_msg[PLG_MSG];
    int nmetrics; /* this step's host->metric values          */
    char metric_key[16][32];
    double metric_value[16];
};

typedef struct plg_transform {
    char name[TS_PLUGIN_NAME_MAX * 2];
    ts_plugin_phase phase;
    ts_plugin_transform_fn fn;
    void *user;
    ts_plugin_ctx *ctx;
} plg_transform;

typedef struct plg_hook {
    ts_plugin_hook_kind kind;
    ts_plugin_hook_fn fn;
    void *user;
    ts_plugin_ctx *ctx;
} plg_hook;

typedef struct plg_scheduler {
    char name[TS_PLUGIN_NAME_MAX];
    ts_plugin_scheduler_fn fn;
    void *user;
    ts_plugin_ctx *ctx;
} plg_scheduler;

struct ts_plugins {
    ts_config *cfg; /* borrowed; NULL after ts_plugins_discover alone */
    ts_plugin_ctx **plugins;
    int n, cap;
    ts_plugin_axis_entry *axes;
    int naxes, capaxes;
    plg_transform *transforms;
    int ntransforms, captransforms;
    plg_hook *hooks;
    int nhooks, caphooks;
    plg_scheduler *schedulers;
    int nschedulers, capschedulers;
    ts_plugin_dispatcher_entry *dispatchers;
    int ndispatchers, capdispatchers;
    FILE *log;
    ts_plugin_log_level log_level;
    ts_plugins_comm_fn comm_fn;
    void *comm_source;
    ts_host host;
    int *origin; /* per plan entry and axis: the transform that set it   */
    int origin_count;
};

/* ------------------------------------------------------------------------- */
/* helpers                                                                    */

static int plg_grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 1;
    int nc = *cap ? *cap * 2 : 8;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return 0;
    *arr = p;
    *cap = nc;
    return 1;
}

static ts_status plg_nomem(void) {
    return ts_error(TS_ERR_NOMEM, "plugins: out of memory");
}

/* The last error without the "[rank r/w] " prefix ts_error adds, so that a
 * wrapped message carries the prefix once. */
static const char *plg_last_error(void) {
    const char *m = ts_last_error();
    if (strncmp(m, "[rank ", 6) == 0) {
        const char *e = strstr(m, "] ");
        if (e) return e + 2;
    }
    return m;
}

/* Sets "<prefix><the current last error>" as the last error. */
static ts_status plg_wrap(ts_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static ts_status plg_wrap(ts_status code, const char *fmt, ...) {
    char saved[PLG_MSG], prefix[PLG_MSG];
    snprintf(saved, sizeof saved, "%s", plg_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    return ts_error(code, "%s%s", prefix, saved[0] ? saved : "(no message)");
}

static int plg_name_ok(const char *s) {
    if (!s || !*s || strlen(s) >= TS_PLUGIN_NAME_MAX) return 0;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_')) return 0;
    return 1;
}

static const char *plg_key_type_name(ts_plugin_key_type t) {
    switch (t) {
    case TS_PLUGIN_KEY_INT: return "int";
    case TS_PLUGIN_KEY_FLOAT: return "float";
    case TS_PLUGIN_KEY_BOOL: return "bool";
    case TS_PLUGIN_KEY_STRING: return "string";
    case TS_PLUGIN_KEY_ENUM: return "enum";
    }
    return "?";
}

static int plg_choice_has(const char *choices, const char *word) {
    if (!choices) return 0;
    size_t wn = strlen(word);
    for (const char *p = choices;;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == wn && strncmp(p, word, n) == 0) return 1;
        if (!bar) return 0;
        p = bar + 1;
    }
}

/* 1 if a declared default reads as a value of its type (so that typed
 * look-ups of a defaulted key cannot fail later). */
static int plg_default_ok(const ts_plugin_key *k) {
    const char *s = k->def;
    char *end;
    switch (k->type) {
    case TS_PLUGIN_KEY_INT:
        /* "auto" is the one word an integer key may take (ts_config_int). */
        if (k->choices && strcmp(k->choices, "auto") == 0 && strcmp(s, "auto") == 0) return 1;
        (void)strtoll(s, &end, 10);
        return *s && !*end;
    case TS_PLUGIN_KEY_FLOAT: (void)strtod(s, &end); return *s && !*end;
    case TS_PLUGIN_KEY_BOOL: {
        static const char *words[] = {"true", "false", "yes", "no", "on", "off", "1", "0"};
        for (int i = 0; i < 8; i++)
            if (strcasecmp(s, words[i]) == 0) return 1;
        return 0;
    }
    case TS_PLUGIN_KEY_STRING: return 1;
    case TS_PLUGIN_KEY_ENUM: return plg_choice_has(k->choices, s);
    }
    return 0;
}

/* ------------------------------------------------------------------------- */
/* search path                                                                */

typedef struct plg_dirs {
    char *list[64];
    int n;
} plg_dirs;

static void plg_dirs_free(plg_dirs *d) {
    for (int i = 0; i < d->n; i++)
        free(d->list[i]);
    d->n = 0;
}

static void plg_dirs_add(plg_dirs *d, const char *s, size_t len) {
    while (len > 1 && s[len - 1] == '/')
        len--;
    if (len == 0 || d->n == 64) return;
    for (int i = 0; i < d->n; i++)
        if (strlen(d->list[i]) == len && strncmp(d->list[i], s, len) == 0) return;
    char *c = malloc(len + 1);
    if (!c) return;
    memcpy(c, s, len);
    c[len] = '\0';
    d->list[d->n++] = c;
}

static void plg_dirs_add_list(plg_dirs *d, const char *colon_list) {
    if (!colon_list) return;
    for (const char *p = colon_list;;) {
        const char *c = strchr(p, ':');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        while (n && isspace((unsigned char)*p))
            p++, n--;
        while (n && isspace((unsigned char)p[n - 1]))
            n--;
        plg_dirs_add(d, p, n);
        if (!c) break;
        p = c + 1;
    }
}

/* plugin_path, then $TESSERA_PLUGIN_PATH, then <dir of libtessera>/tessera
 * (and TESSERA_PLUGIN_DIR when the build defines one). */
static void plg_search_dirs(const char *plugin_path, plg_dirs *d) {
    d->n = 0;
    plg_dirs_add_list(d, plugin_path);
    plg_dirs_add_list(d, getenv("TESSERA_PLUGIN_PATH"));
    Dl_info info;
    if (dladdr((void *)&ts_plugins_create, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        char buf[4096];
        if (slash)
            snprintf(buf, sizeof buf, "%.*s/tessera", (int)(slash - info.dli_fname),
                     info.dli_fname);
        else
            snprintf(buf, sizeof buf, "tessera");
        plg_dirs_add(d, buf, strlen(buf));
    }
#ifdef TESSERA_PLUGIN_DIR
    plg_dirs_add_list(d, TESSERA_PLUGIN_DIR);
#endif
}

static void plg_dirs_join(const plg_dirs *d, char *buf, size_t size) {
    size_t j = 0;
    buf[0] = '\0';
    for (int i = 0; i < d->n && j + 1 < size; i++)
        j += (size_t)snprintf(buf + j, size - j, "%s%s", i ? ", " : "", d->list[i]);
    if (d->n == 0) snprintf(buf, size, "(no directories)");
}

/* ------------------------------------------------------------------------- */
/* host table                                                                 */

static int plg_ctx_ok(const ts_plugin_ctx *ctx) {
    return ctx && ctx->magic == PLG_CTX_MAGIC;
}

static void host_log(ts_plugin_ctx *ctx, ts_plugin_log_level level, const char *fmt, ...) {
    if (!plg_ctx_ok(ctx) || level > ctx->reg->log_level || !ctx->reg->log) return;
    char msg[PLG_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    static const char *tags[] = {"error: ", "warning: ", "", ""};
    fprintf(ctx->reg->log, "tessera: %s: %s%s\n", ctx->name, (unsigned)level < 4 ? tags[level] : "",
            msg);
    fflush(ctx->reg->log);
}

static ts_status host_error(ts_plugin_ctx *ctx, ts_status code, const char *fmt, ...) {
    (void)ctx;
    char msg[PLG_MSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ts_error(code, "%s", msg);
}

/* The declaration of `key` of ctx's plugin, checked against `want` (-1: any
 * type; FLOAT also accepts INT). */
static ts_status host_key(ts_plugin_ctx *ctx, const char *key, int want,
                          const ts_plugin_key **out) {
    if (!plg_ctx_ok(ctx) || !key) return ts_error(TS_ERR_INVALID, "plugins: bad context or key");
    for (int i = 0; i < ctx->desc.nkeys; i++) {
        const ts_plugin_key *k = &ctx->desc.keys[i];
        if (strcmp(k->name, key) != 0) continue;
        if (want >= 0 && (int)k->type != want &&
            !(want == TS_PLUGIN_KEY_FLOAT && k->type == TS_PLUGIN_KEY_INT))
            return ts_error(TS_ERR_INVALID, "%s: reads [%s] %s as %s, but declared it %s",
                            ctx->name, ctx->name, key, plg_key_type_name((ts_plugin_key_type)want),
                            plg_key_type_name(k->type));
        if (!ctx->reg->cfg)
            return ts_error(TS_ERR_INVALID, "%s: reads [%s] %s, but no configuration is loaded",
                            ctx->name, ctx->name, key);
        *out = k;
        return TS_OK;
    }
    return ts_error(TS_ERR_INVALID, "%s: reads [%s] %s, which it did not declare", ctx->name,
                    ctx->name, key);
}

static ts_status host_config_int(ts_plugin_ctx *ctx, const char *key, int64_t *out) {
    const ts_plugin_key *k;
    TS_TRY(host_key(ctx, key, TS_PLUGIN_KEY_INT, &k));
    *out = ts_config_int(ctx->reg->cfg, ctx->name, key);
    return TS_OK;
}

static ts_status host_config_float(ts_plugin_ctx *ctx, const char *key, double *out) {
    const ts_plugin_key *k;
    TS_TRY(host_key(ctx, key, TS_PLUGIN_KEY_FLOAT, &k));
    if (k->type == TS_PLUGIN_KEY_INT)
        *out = (double)ts_config_int(ctx->reg->cfg, ctx->name, key);
    else
        *out = ts_config_float(ctx->reg->cfg, ctx->name, key);
    return TS_OK;
}

static ts_status host_config_bool(ts_plugin_ctx *ctx, const char *key, int *out) {
    const ts_plugin_key *k;
    TS_TRY(host_key(ctx, key, TS_PLUGIN_KEY_BOOL, &k));
    *out = ts_config_bool(ctx->reg->cfg, ctx->name, key);
    return TS_OK;
}

static ts_status host_config_str(ts_plugin_ctx *ctx, const char *key, const char **out) {
    const ts_plugin_key *k;
    TS_TRY(host_key(ctx, key, -1, &k));
    *out = ts_config_str(ctx->reg->cfg, ctx->name, key);
    return TS_OK;
}

static ts_status host_config_has(ts_plugin_ctx *ctx, const char *key, int *out) {
    const ts_plugin_key *k;
    TS_TRY(host_key(ctx, key, -1, &k));
    *out = ts_config_has(ctx->reg->cfg, ctx->name, key);
    return TS_OK;
}

static const char *host_config_where(ts_plugin_ctx *ctx, const char *key, char *buf, int size) {
    const ts_plugin_key *k;
    if (!buf || size <= 0) return buf;
    if (host_key(ctx, key, -1, &k) != TS_OK) {
        snprintf(buf, (size_t)size, "[%s] %s", plg_ctx_ok(ctx) ? ctx->name : "?", key ? key : "?");
        return buf;
    }
    return ts_config_where(ctx->reg->cfg, ctx->name, key, buf, size);
}

/* Every registration: a valid context inside its init. Records the first
 * failure so that an init that ignores it still fails. */
static ts_status reg_begin(ts_plugin_ctx *ctx, const char *what) {
    if (!plg_ctx_ok(ctx)) return ts_error(TS_ERR_INVALID, "plugins: %s with a bad context", what);
    if (!ctx->in_init)
        return ts_error(TS_ERR_PLUGIN,
                        "%s: %s outside init (registration is only allowed during "
                        "init)",
                        ctx->name, what);
    return TS_OK;
}

static ts_status reg_end(ts_plugin_ctx *ctx, ts_status st) {
    if (st != TS_OK && ctx->reg_status == TS_OK) {
        ctx->reg_status = st;
        snprintf(ctx->reg_msg, sizeof ctx->reg_msg, "%s", plg_last_error());
    }
    return st;
}

static ts_status host_register_axis(ts_plugin_ctx *ctx, const char *name, int size,
                                    ts_mesh_kind mesh) {
    TS_TRY(reg_begin(ctx, "register_axis"));
    ts_plugins *reg = ctx->reg;
    ts_mesh_axis axis;
    if (!name || ts_mesh_axis_from_name(name, &axis) != TS_OK)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers axis '%s', which is not a mesh axis (tp, cp, "
                                     "dp, pp, ep, etp, edp)",
                                     name ? name : "(null)"));
    const char *an = ts_mesh_axis_name(axis);
    int dense = axis == TS_AXIS_TP || axis == TS_AXIS_CP || axis == TS_AXIS_DP;
    if (axis != TS_AXIS_PP && (mesh == TS_MESH_DENSE) != dense)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers axis '%s' on the %s mesh, but it belongs to the "
                                     "%s mesh",
                                     an, mesh == TS_MESH_DENSE ? "dense" : "expert",
                                     dense ? "dense" : "expert"));
    if (size < 1 && size != TS_PLUGIN_AXIS_AUTO)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers axis '%s' with size %d (a size is >= 1 or auto)",
                                     an, size));
    for (int i = 0; i < reg->naxes; i++)
        if (strcmp(reg->axes[i].name, an) == 0)
            return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                         "axis '%s' is claimed by two plugins, '%s' and '%s' (an "
                                         "axis belongs to one plugin: load only one of them)",
                                         an, reg->axes[i].plugin, ctx->name));
    if (!plg_grow((void **)&reg->axes, &reg->capaxes, reg->naxes + 1, sizeof *reg->axes))
        return reg_end(ctx, plg_nomem());
    ts_plugin_axis_entry *e = &reg->axes[reg->naxes++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", an);
    e->size = size;
    e->mesh = axis == TS_AXIS_PP ? TS_MESH_DENSE : mesh;
    e->plugin = ctx->name;
    return TS_OK;
}

static int phase_owned(ts_plugin_phase p) {
    return p != TS_PHASE_ANNOTATE;
}

static ts_status host_register_transform(ts_plugin_ctx *ctx, const char *name,
                                         ts_plugin_phase phase, ts_plugin_transform_fn fn,
                                         void *user) {
    TS_TRY(reg_begin(ctx, "register_transform"));
    ts_plugins *reg = ctx->reg;
    if (!plg_name_ok(name) || !fn)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers transform '%s'%s (names are [a-z0-9_], under %d "
                                     "characters)",
                                     name ? name : "(null)", fn ? "" : " without a function",
                                     TS_PLUGIN_NAME_MAX));
    if ((unsigned)phase >= TS_PHASE_COUNT)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers transform '%s' in phase %d, which "
                                     "does not exist (0 .. %d)",
                                     name, (int)phase, TS_PHASE_COUNT - 1));
    for (int i = 0; i < reg->ntransforms; i++) {
        const plg_transform *t = &reg->transforms[i];
        if (strcmp(t->name, name) == 0)
            return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                         "transform '%s' is registered twice, by plugin '%s' and "
                                         "by plugin '%s'",
                                         name, t->ctx->name, ctx->name));
        if (t->phase == phase && phase_owned(phase) && t->ctx != ctx)
            return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                         "transforms conflict: plugin '%s' registers '%s' in "
                                         "phase %s, which plugin '%s' owns (transform '%s'); "
                                         "only one plugin may act in that phase",
                                         ctx->name, name, ts_plugin_phase_name(phase), t->ctx->name,
                                         t->name));
    }
    if (!plg_grow((void **)&reg->transforms, &reg->captransforms, reg->ntransforms + 1,
                  sizeof *reg->transforms))
        return reg_end(ctx, plg_nomem());
    plg_transform *t = &reg->transforms[reg->ntransforms++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->phase = phase;
    t->fn = fn;
    t->user = user;
    t->ctx = ctx;
    return TS_OK;
}

static ts_status host_register_hook(ts_plugin_ctx *ctx, ts_plugin_hook_kind kind,
                                    ts_plugin_hook_fn fn, void *user) {
    TS_TRY(reg_begin(ctx, "register_hook"));
    ts_plugins *reg = ctx->reg;
    if ((unsigned)kind >= TS_HOOK_COUNT || !fn)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN, "registers a hook of kind %d%s", (int)kind,
                                     fn ? " (no such kind)" : " without a function"));
    if (!plg_grow((void **)&reg->hooks, &reg->caphooks, reg->nhooks + 1, sizeof *reg->hooks))
        return reg_end(ctx, plg_nomem());
    reg->hooks[reg->nhooks++] = (plg_hook){kind, fn, user, ctx};
    return TS_OK;
}

static ts_status host_register_scheduler(ts_plugin_ctx *ctx, const char *name,
                                         ts_plugin_scheduler_fn fn, void *user) {
    TS_TRY(reg_begin(ctx, "register_scheduler"));
    ts_plugins *reg = ctx->reg;
    if (!plg_name_ok(name) || !fn)
        return reg_end(ctx,
                       ts_error(TS_ERR_PLUGIN, "registers scheduler '%s'%s", name ? name : "(null)",
                                fn ? " (names are [a-z0-9_])" : " without a function"));
    for (int i = 0; i < reg->nschedulers; i++)
        if (strcmp(reg->schedulers[i].name, name) == 0)
            return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                         "scheduler '%s' is registered twice, by plugin '%s' and "
                                         "by plugin '%s'",
                                         name, reg->schedulers[i].ctx->name, ctx->name));
    if (!plg_grow((void **)&reg->schedulers, &reg->capschedulers, reg->nschedulers + 1,
                  sizeof *reg->schedulers))
        return reg_end(ctx, plg_nomem());
    plg_scheduler *s = &reg->schedulers[reg->nschedulers++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->fn = fn;
    s->user = user;
    s->ctx = ctx;
    return TS_OK;
}

static ts_status host_register_dispatcher(ts_plugin_ctx *ctx, const char *name,
                                          const ts_plugin_dispatcher_ops *ops, void *user) {
    TS_TRY(reg_begin(ctx, "register_dispatcher"));
    ts_plugins *reg = ctx->reg;
    const size_t need = offsetof(ts_plugin_dispatcher_ops, combine) + sizeof ops->combine;
    if (!plg_name_ok(name) || !ops || ops->struct_size < need || !ops->dispatch || !ops->combine)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN, "registers dispatcher '%s' with %s",
                                     name ? name : "(null)",
                                     !plg_name_ok(name) ? "a bad name (names are [a-z0-9_])"
                                     : !ops || ops->struct_size < need
                                         ? "an ops table whose struct_size is too small"
                                         : "no dispatch or combine function"));
    for (int i = 0; i < reg->ndispatchers; i++)
        if (strcmp(reg->dispatchers[i].name, name) == 0)
            return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                         "dispatcher '%s' is registered twice, by plugin '%s' and "
                                         "by plugin '%s'",
                                         name, reg->dispatchers[i].plugin, ctx->name));
    if (!plg_grow((void **)&reg->dispatchers, &reg->capdispatchers, reg->ndispatchers + 1,
                  sizeof *reg->dispatchers))
        return reg_end(ctx, plg_nomem());
    ts_plugin_dispatcher_entry *d = &reg->dispatchers[reg->ndispatchers++];
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", name);
    size_t n = ops->struct_size < sizeof d->ops ? ops->struct_size : sizeof d->ops;
    memcpy(&d->ops, ops, n);
    d->ops.struct_size = (uint32_t)sizeof d->ops;
    d->user = user;
    d->ctx = ctx;
    d->plugin = ctx->name;
    return TS_OK;
}

static ts_status host_schedule_append(ts_plugin_ctx *ctx, ts_schedule *out, int kind, int mb,
                                      int chunk, int peer) {
    (void)ctx;
    if (!out || kind < TS_PLUGIN_ACT_FORWARD || kind > TS_PLUGIN_ACT_OPTIMIZER_STEP)
        return ts_error(TS_ERR_INVALID, "schedule_append: bad action kind %d", kind);
    int n = out->nactions;
    if (n == 0 || (n & (n - 1)) == 0) { /* capacity is the next power of two */
        ts_action *a = realloc(out->actions, (size_t)(n ? 2 * n : 1) * sizeof *a);
        if (!a) return plg_nomem();
        out->actions = a;
    }
    out->actions[n] = (ts_action){(ts_action_kind)kind, mb, chunk, peer};
    out->nactions = n + 1;
    return TS_OK;
}

static ts_comm *host_comm(ts_plugin_ctx *ctx, const char *token) {
    if (!plg_ctx_ok(ctx) || !token || !ctx->reg->comm_fn) return NULL;
    return ctx->reg->comm_fn(ctx->reg->comm_source, token);
}

static ts_status host_metric(ts_plugin_ctx *ctx, const char *key, double value) {
    if (!plg_ctx_ok(ctx) || !key || !key[0] || strlen(key) >= sizeof ctx->metric_key[0])
        return ts_error(TS_ERR_INVALID, "plugin metric: a key of 1 to %d characters is required",
                        (int)sizeof ctx->metric_key[0] - 1);
    for (int i = 0; i < ctx->nmetrics; i++)
        if (strcmp(ctx->metric_key[i], key) == 0) {
            ctx->metric_value[i] = value;
            return TS_OK;
        }
    if (ctx->nmetrics == 16)
        return ts_error(TS_ERR_INVALID, "plugin '%s': more than 16 metric keys (at '%s')",
                        ctx->name, key);
    snprintf(ctx->metric_key[ctx->nmetrics], sizeof ctx->metric_key[0], "%s", key);
    ctx->metric_value[ctx->nmetrics++] = value;
    return TS_OK;
}

int ts_plugins_num_schedulers(const ts_plugins *reg) {
    return reg ? reg->nschedulers : 0;
}

const char *ts_plugins_scheduler_name(const ts_plugins *reg, int i) {
    return reg && i >= 0 && i < reg->nschedulers ? reg->schedulers[i].name : NULL;
}

ts_status ts_plugins_metrics_json(ts_plugins *reg, char *buf, size_t cap) {
    size_t used = 0;
    int first = 1;
#define PLG_PUT(...)                                                                               \
    do {                                                                                           \
        int n_ = snprintf(buf + used, cap - used, __VA_ARGS__);                                    \
        if (n_ < 0 || (size_t)n_ >= cap - used)                                                    \
            return ts_error(TS_ERR_INVALID, "plugins: metrics buffer too small");                  \
        used += (size_t)n_;                                                                        \
    } while (0)
    PLG_PUT("{");
    for (int i = 0; reg && i < reg->n; i++) {
        ts_plugin_ctx *c = reg->plugins[i];
        if (c->nmetrics == 0) continue;
        PLG_PUT("%s\"%s\":{", first ? "" : ",", c->name);
        for (int k = 0; k < c->nmetrics; k++)
            PLG_PUT("%s\"%s\":%.9g", k ? "," : "", c->metric_key[k], c->metric_value[k]);
        PLG_PUT("}");
        first = 0;
        c->nmetrics = 0;
    }
    PLG_PUT("}");
#undef PLG_PUT
    return TS_OK;
}

static void plg_host_fill(ts_host *h) {
    memset(h, 0, sizeof *h);
    h->abi_version = TS_PLUGIN_ABI_VERSION;
    h->struct_size = (uint32_t)sizeof *h;
    h->log = host_log;
    h->error = host_error;
    h->mem_alloc = ts_mem_alloc;
    h->mem_free = ts_mem_free;
    h->config_int = host_config_int;
    h->config_float = host_config_float;
    h->config_bool = host_config_bool;
    h->config_str = host_config_str;
    h->config_has = host_config_has;
    h->config_where = host_config_where;
    h->register_axis = host_register_axis;
    h->register_transform = host_register_transform;
    h->register_hook = host_register_hook;
    h->register_scheduler = host_register_scheduler;
    h->register_dispatcher = host_register_dispatcher;
    h->schedule_append = host_schedule_append;
    h->comm = host_comm;
    h->comm_rank = ts_comm_rank;
    h->comm_size = ts_comm_size;
    h->all_reduce = ts_comm_all_reduce;
    h->all_reduce_start = ts_comm_all_reduce_start;
    h->all_gather = ts_comm_all_gather;
    h->reduce_scatter = ts_comm_reduce_scatter;
    h->all_to_all = ts_comm_all_to_all;
    h->broadcast = ts_comm_broadcast;
    h->send = ts_comm_send;
    h->recv = ts_comm_recv;
    h->barrier = ts_comm_barrier;
    h->wait = ts_comm_wait;
    h->test = ts_comm_test;
    h->all_gather_start = ts_comm_all_gather_start;
    h->reduce_scatter_start = ts_comm_reduce_scatter_start;
    h->send_start = ts_comm_send_start;
    h->recv_start = ts_comm_recv_start;
    h->metric = host_metric;
}

/* ------------------------------------------------------------------------- */
/* create / destroy                                                           */

ts_status ts_plugins_create(ts_plugins **out) {
    ts_plugins *reg = calloc(1, sizeof *reg);
    if (!reg) return plg_nomem();
    reg->log = stderr;
    reg->log_level = TS_LOG_INFO;
    plg_host_fill(&reg->host);
    *out = reg;
    return TS_OK;
}

static void plg_ctx_free(ts_plugin_ctx *ctx) {
    if (!ctx) return;
    if (ctx->handle) dlclose(ctx->handle);
    free(ctx->path);
    free(ctx);
}

void ts_plugins_destroy(ts_plugins *reg) {
    if (!reg) return;
    for (int i = reg->n - 1; i >= 0; i--) {
        ts_plugin_ctx *ctx = reg->plugins[i];
        if (ctx->initialised && ctx->desc.fini) ctx->desc.fini(&reg->host, ctx);
        ctx->initialised = 0;
    }
    for (int i = reg->n - 1; i >= 0; i--)
        plg_ctx_free(reg->plugins[i]);
    free(reg->plugins);
    free(reg->axes);
    free(reg->origin);
    free(reg->transforms);
    free(reg->hooks);
    free(reg->schedulers);
    free(reg->dispatchers);
    free(reg);
}

void ts_plugins_set_log(ts_plugins *reg, FILE *f, ts_plugin_log_level level) {
    reg->log = f;
    reg->log_level = level;
}

/* ------------------------------------------------------------------------- */
/* opening                                                                    */

static ts_plugin_ctx *plg_find(const ts_plugins *reg, const char *name) {
    for (int i = 0; i < reg->n; i++)
        if (strcmp(reg->plugins[i]->name, name) == 0) return reg->plugins[i];
    return NULL;
}

/* Checks the descriptor of the library at `path`, expected to be `name`, and
 * fills ctx->desc. */
static ts_status plg_check_descriptor(ts_plugin_ctx *ctx, const ts_plugin_descriptor *d) {
    const char *name = ctx->name, *path = ctx->path;
    if (!d)
        return ts_error(TS_ERR_PLUGIN, "plugin '%s': %s: %s() returned no descriptor", name, path,
                        TS_PLUGIN_SYMBOL);
    unsigned major = TS_PLUGIN_ABI_MAJOR_OF(d->abi_version);
    unsigned minor = TS_PLUGIN_ABI_MINOR_OF(d->abi_version);
    if (major != TS_PLUGIN_ABI_MAJOR)
        return ts_error(TS_ERR_PLUGIN,
                        "plugin '%s': %s was built for plugin ABI %u.%u, but this tessera speaks "
                        "ABI %d.%d (the major versions must match: rebuild the plugin against "
                        "this tessera's SDK)",
                        name, path, major, minor, TS_PLUGIN_ABI_MAJOR, TS_PLUGIN_ABI_MINOR);
    if (minor > TS_PLUGIN_ABI_MINOR)
        return ts_error(TS_ERR_PLUGIN,
                        "plugin '%s': %s was built for plugin ABI %u.%u, newer than this "
                        "tessera's ABI %d.%d (upgrade tessera, or rebuild the plugin against this "
                        "tessera's SDK)",
                        name, path, major, minor, TS_PLUGIN_ABI_MAJOR, TS_PLUGIN_ABI_MINOR);
    if (d->struct_size < TS_PLUGIN_DESCRIPTOR_SIZE_1_0)
        return ts_error(TS_ERR_PLUGIN,
                        "plugin '%s': %s: descriptor struct_size %u is smaller than the %zu bytes "
                        "of ABI %d.0 (set it to sizeof(ts_plugin_descriptor))",
                        name, path, (unsigned)d->struct_size, TS_PLUGIN_DESCRIPTOR_SIZE_1_0,
                        TS_PLUGIN_ABI_MAJOR);
    if (!d->name || strcmp(d->name, name) != 0)
        return ts_error(TS_ERR_PLUGIN,
                        "plugin '%s': %s holds a plugin named '%s', not '%s' (a plugin's "
                        "descriptor name must match its file name tessera-<name>.so and its INI "
                        "section)",
                        name, path, d->name ? d->name : "(null)", name);
    if (!d->version || !d->init)
        return ts_error(TS_ERR_PLUGIN, "plugin '%s': %s: the descriptor has no %s", name, path,
                        d->version ? "init function" : "version string");
    if (d->nkeys < 0 || (d->nkeys > 0 && !d->keys))
        return ts_error(TS_ERR_PLUGIN, "plugin '%s': %s: the descriptor declares %d keys but %s",
                        name, path, d->nkeys, d->nkeys < 0 ? "a count < 0" : "no key array");
    memset(&ctx->desc, 0, sizeof ctx->desc);
    memcpy(&ctx->desc, d, d->struct_size < sizeof ctx->desc ? d->struct_size : sizeof ctx->desc);
    for (int i = 0; i < d->nkeys; i++) {
        const ts_plugin_key *k = &d->keys[i];
        const char *why = NULL;
        if (!k->name || !*k->name || strpbrk(k->name, " \t=[];.#"))
            why = "has no valid name";
        else if ((unsigned)k->type > TS_PLUGIN_KEY_ENUM)
            why = "has an unknown type";
        else if (!k->help || !*k->help)
            why = "has no help line";
        else if (k->type == TS_PLUGIN_KEY_ENUM && (!k->choices || !*k->choices))
            why = "is an enum without choices";
        else if (k->type == TS_PLUGIN_KEY_INT && k->choices && strcmp(k->choices, "auto") != 0)
            why = "is an integer key with choices other than \"auto\" (the one word an integer "
                  "key takes)";
        else if (k->def && !plg_default_ok(k))
            why = "has a default that is not a value of its type";
        for (int j = 0; !why && j < i; j++)
            if (strcmp(d->keys[j].name, k->name) == 0) why = "is declared twice";
        if (why)
            return ts_error(TS_ERR_PLUGIN, "plugin '%s': %s: key %d ('%s') %s", name, path, i,
                            k->name ? k->name : "(null)", why);
    }
    return TS_OK;
}

ts_status ts_plugin_descriptor_check(const char *name, const char *path,
                                     const ts_plugin_descriptor *d) {
    ts_plugin_ctx ctx = {.magic = PLG_CTX_MAGIC, .path = (char *)path}; /* only read */
    snprintf(ctx.name, sizeof ctx.name, "%s", name);
    return plg_check_descriptor(&ctx, d);
}

/* Registers the plugin's keys with the config, section = its name. */
static ts_status plg_register_keys(ts_plugins *reg, ts_plugin_ctx *ctx) {
    if (!reg->cfg || ctx->desc.nkeys == 0) return TS_OK;
    ts_key_spec *specs = calloc((size_t)ctx->desc.nkeys, sizeof *specs);
    if (!specs) return plg_nomem();
    for (int i = 0; i < ctx->desc.nkeys; i++) {
        const ts_plugin_key *k = &ctx->desc.keys[i];
        specs[i] = (ts_key_spec){ctx->name, k->name, (ts_key_type)k->type, k->def,
                                 k->min,    k->max,  k->choices,           k->help};
    }
    ts_status st = ts_config_register(reg->cfg, specs, ctx->desc.nkeys);
    free(specs);
    if (st) return plg_wrap(TS_ERR_PLUGIN, "plugin '%s': %s: ", ctx->name, ctx->path);
    return TS_OK;
}

/* Opens the file `path` as plugin `name` and appends it to the registry. */
static ts_status plg_open_file(ts_plugins *reg, const char *name, const char *path) {
    ts_plugin_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return plg_nomem();
    ctx->magic = PLG_CTX_MAGIC;
    ctx->reg = reg;
    snprintf(ctx->name, sizeof ctx->name, "%s", name);
    ctx->path = strdup(path);
    ts_status st = TS_OK;
    if (!ctx->path) {
        st = plg_nomem();
        goto fail;
    }
    st = ts_plugin_file_check(path); /* a damaged file: an error, not SIGBUS in dlopen */
    if (st) {
        st = plg_wrap(st, "plugin '%s': cannot load ", name);
        goto fail;
    }
    dlerror();
    ctx->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!ctx->handle) {
        const char *e = dlerror();
        st = ts_error(TS_ERR_PLUGIN, "plugin '%s': cannot load %s: %s", name, path,
                      e ? e : "unknown dlopen error");
        goto fail;
    }
    dlerror();
    void *sym = dlsym(ctx->handle, TS_PLUGIN_SYMBOL);
    if (!sym) {
        st = ts_error(TS_ERR_PLUGIN,
                      "plugin '%s': %s does not export the entry point %s (is it a tessera "
                      "plugin? the function must be declared TS_PLUGIN_EXPORT)",
                      name, path, TS_PLUGIN_SYMBOL);
        goto fail;
    }
    ts_plugin_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry); /* object to function pointer, as POSIX allows */
    st = plg_check_descriptor(ctx, entry());
    if (st) goto fail;
    st = plg_register_keys(reg, ctx);
    if (st) goto fail;
    if (!plg_grow((void **)&reg->plugins, &reg->cap, reg->n + 1, sizeof *reg->plugins)) {
        st = plg_nomem();
        goto fail;
    }
    reg->plugins[reg->n++] = ctx;
    return TS_OK;
fail:
    plg_ctx_free(ctx);
    return st;
}

static ts_status plg_open_in(ts_plugins *reg, const char *name, const char *plugin_path) {
    char where[512] = "";
    if (reg->cfg) {
        char w[400];
        snprintf(where, sizeof where, " (%s)",
                 ts_config_where(reg->cfg, "parallel", "plugins", w, (int)sizeof w));
    }
    if (!plg_name_ok(name))
        return ts_error(TS_ERR_PLUGIN,
                        "plugin '%s'%s: a plugin name is 1 to %d characters of a-z, 0-9 and _",
                        name, where, TS_PLUGIN_NAME_MAX - 1);
    if (plg_find(reg, name))
        return ts_error(TS_ERR_PLUGIN, "plugin '%s'%s is named twice", name, where);
    if (reg->cfg)
        for (int i = 0; i < ts_config_num_specs(reg->cfg); i++)
            if (strcmp(ts_config_spec(reg->cfg, i)->section, name) == 0)
                return ts_error(TS_ERR_PLUGIN,
                                "plugin '%s'%s: the name is taken by the core's section [%s]", name,
                                where, name);
    plg_dirs dirs;
    plg_search_dirs(plugin_path, &dirs);
    char path[4096];
    for (int i = 0; i < dirs.n; i++) {
        snprintf(path, sizeof path, "%s/tessera-%s.so", dirs.list[i], name);
        if (access(path, F_OK) == 0) {
            plg_dirs_free(&dirs);
            return plg_open_file(reg, name, path);
        }
    }
    char searched[2048];
    plg_dirs_join(&dirs, searched, sizeof searched);
    plg_dirs_free(&dirs);
    return ts_error(TS_ERR_PLUGIN,
                    "plugin '%s'%s not found: no tessera-%s.so in %s (set [parallel] plugin_path "
                    "or TESSERA_PLUGIN_PATH)",
                    name, where, name, searched);
}

ts_status ts_plugins_open_one(ts_plugins *reg, const char *name) {
    const char *pp = reg->cfg ? ts_config_str(reg->cfg, "parallel", "plugin_path") : NULL;
    return plg_open_in(reg, name, pp);
}

ts_status ts_plugins_open(ts_plugins *reg, ts_config *cfg) {
    reg->cfg = cfg;
    const char *list = ts_config_str(cfg, "parallel", "plugins");
    char name[256];
    for (const char *p = list; *p;) {
        while (*p && (*p == ',' || isspace((unsigned char)*p)))
            p++;
        size_t n = 0;
        while (p[n] && p[n] != ',' && !isspace((unsigned char)p[n]))
            n++;
        if (n == 0) break;
        snprintf(name, sizeof name, "%.*s", (int)n, p);
        TS_TRY(ts_plugins_open_one(reg, name));
        p += n;
    }
    return TS_OK;
}

ts_status ts_plugins_discover(ts_plugins *reg, const char *plugin_path, FILE *err) {
    plg_dirs dirs;
    plg_search_dirs(plugin_path, &dirs);
    for (int i = 0; i < dirs.n; i++) {
        DIR *dir = opendir(dirs.list[i]);
        if (!dir) continue;
        struct dirent *de;
        while ((de = readdir(dir))) {
            size_t len = strlen(de->d_name);
            if (len <= 11 || strncmp(de->d_name, "tessera-", 8) != 0 ||
                strcmp(de->d_name + len - 3, ".so") != 0)
                continue;
            char name[256], path[4096];
            snprintf(name, sizeof name, "%.*s", (int)(len - 11), de->d_name + 8);
            if (!plg_name_ok(name) || plg_find(reg, name)) continue;
            snprintf(path, sizeof path, "%s/%s", dirs.list[i], de->d_name);
            ts_status st = plg_open_file(reg, name, path);
            if (st == TS_ERR_NOMEM) {
                closedir(dir);
                plg_dirs_free(&dirs);
                return st;
            }
            if (st && err) fprintf(err, "tessera: skipped: %s\n", ts_last_error());
        }
        closedir(dir);
    }
    plg_dirs_free(&dirs);
    return TS_OK;
}

/* ------------------------------------------------------------------------- */
/* init                                                                       */

/* Drops everything ctx registered (after its init failed: no fini will run,
 * so nothing may point into it). */
static void plg_purge(ts_plugins *reg, const ts_plugin_ctx *ctx) {
    int j = 0;
    for (int i = 0; i < reg->naxes; i++)
        if (strcmp(reg->axes[i].plugin, ctx->name) != 0) reg->axes[j++] = reg->axes[i];
    reg->naxes = j;
    j = 0;
    for (int i = 0; i < reg->ntransforms; i++)
        if (reg->transforms[i].ctx != ctx) reg->transforms[j++] = reg->transforms[i];
    reg->ntransforms = j;
    j = 0;
    for (int i = 0; i < reg->nhooks; i++)
        if (reg->hooks[i].ctx != ctx) reg->hooks[j++] = reg->hooks[i];
    reg->nhooks = j;
    j = 0;
    for (int i = 0; i < reg->nschedulers; i++)
        if (reg->schedulers[i].ctx != ctx) reg->schedulers[j++] = reg->schedulers[i];
    reg->nschedulers = j;
    j = 0;
    for (int i = 0; i < reg->ndispatchers; i++)
        if (reg->dispatchers[i].ctx != ctx) reg->dispatchers[j++] = reg->dispatchers[i];
    reg->ndispatchers = j;
}

ts_status ts_plugins_init(ts_plugins *reg) {
    if (!reg->cfg && reg->n > 0)
        return ts_error(TS_ERR_INTERNAL, "plugins: init needs a configuration (ts_plugins_open)");
    for (int i = 0; i < reg->n; i++) {
        ts_plugin_ctx *ctx = reg->plugins[i];
        if (ctx->initialised) continue;
        ctx->reg_status = TS_OK;
        ctx->in_init = 1;
        ts_status st = ctx->desc.init(&reg->host, ctx);
        ctx->in_init = 0;
        if (st == TS_OK && ctx->reg_status != TS_OK) {
            st = ctx->reg_status;
            ts_error(st, "%s", ctx->reg_msg);
        }
        if (st != TS_OK) {
            plg_purge(reg, ctx);
            return plg_wrap(st, "plugin '%s' (%s): init failed: ", ctx->name, ctx->path);
        }
        ctx->initialised = 1;
    }
    return TS_OK;
}

ts_status ts_plugins_load(ts_plugins *reg, ts_config *cfg) {
    TS_TRY(ts_plugins_open(reg, cfg));
    TS_TRY(ts_config_validate(cfg));
    return ts_plugins_init(reg);
}

/* ------------------------------------------------------------------------- */
/* queries                                                                    */

int ts_plugins_count(const ts_plugins *reg) {
    return reg->n;
}
const char *ts_plugins_name(const ts_plugins *reg, int i) {
    return reg->plugins[i]->name;
}
const char *ts_plugins_path(const ts_plugins *reg, int i) {
    return reg->plugins[i]->path;
}
const char *ts_plugins_version(const ts_plugins *reg, int i) {
    return reg->plugins[i]->desc.version;
}
int ts_plugins_num_axes(const ts_plugins *reg) {
    return reg->naxes;
}
const ts_plugin_axis_entry *ts_plugins_axis(const ts_plugins *reg, int i) {
    return i >= 0 && i < reg->naxes ? &reg->axes[i] : NULL;
}

const char *ts_plugins_axes_origin(const ts_plugins *reg, char *buf, size_t size) {
    size_t j = 0;
    buf[0] = '\0';
    static const char *dense[] = {"tp", "cp", "dp", "pp"};
    int claimed[4] = {0};
    for (int i = 0; i < reg->naxes && j + 1 < size; i++) {
        const ts_plugin_axis_entry *a = &reg->axes[i];
        for (int k = 0; k < 4; k++)
            claimed[k] |= strcmp(a->name, dense[k]) == 0;
        char value[16], where[256] = "";
        if (a->size == TS_PLUGIN_AXIS_AUTO)
            snprintf(value, sizeof value, "auto");
        else
            snprintf(value, sizeof value, "%d", a->size);
        int has_size = 0;
        for (int k = 0; reg->cfg && k < ts_config_num_specs(reg->cfg); k++) {
            const ts_key_spec *sp = ts_config_spec(reg->cfg, k);
            has_size |= strcmp(sp->section, a->plugin) == 0 && strcmp(sp->name, "size") == 0;
        }
        if (has_size) {
            char w[200];
            snprintf(where, sizeof where, ", %s",
                     ts_config_where(reg->cfg, a->plugin, "size", w, (int)sizeof w));
        }
        j += (size_t)snprintf(buf + j, size - j, "%s%s %s (plugin %s%s)", j ? "; " : "", a->name,
                              value, a->plugin, where);
    }
    int any = 0;
    for (int k = 0; k < 4 && j + 1 < size; k++) {
        if (claimed[k]) continue;
        j += (size_t)snprintf(buf + j, size - j, "%s%s", any ? ", " : j ? "; " : "", dense[k]);
        any = 1;
    }
    if (any && j + 1 < size) snprintf(buf + j, size - j, " 1 (no plugin claims them)");
    return buf;
}

ts_status ts_plugins_mesh_sizes(const ts_plugins *reg, int world, ts_mesh_sizes *out) {
    /* per ts_mesh_axis; dense unclaimed 1, etp/edp unclaimed 0 (mesh default) */
    int s[TS_AXIS_COUNT] = {1, 1, 1, 1, 1, 0, 0};
    int claimed[TS_AXIS_COUNT] = {0};
    if (world < 1) return ts_error(TS_ERR_INVALID, "plugins: world %d < 1", world);
    for (int i = 0; i < reg->naxes; i++) {
        ts_mesh_axis a;
        TS_ASSERT(ts_mesh_axis_from_name(reg->axes[i].name, &a) == TS_OK);
        s[a] = reg->axes[i].size;
        claimed[a] = 1;
    }
    static const ts_mesh_axis dense[] = {TS_AXIS_TP, TS_AXIS_CP, TS_AXIS_DP, TS_AXIS_PP};
    static const ts_mesh_axis expert[] = {TS_AXIS_ETP, TS_AXIS_EP, TS_AXIS_EDP, TS_AXIS_PP};
    for (int m = 0; m < 2; m++) {
        const ts_mesh_axis *ax = m == 0 ? dense : expert;
        int nauto = 0, which = -1;
        long prod = 1;
        char desc[256] = "";
        size_t j = 0;
        for (int k = 0; k < 4; k++) {
            int v = s[ax[k]];
            if (ax[k] == TS_AXIS_ETP && v == 0) v = s[TS_AXIS_TP] > 0 ? s[TS_AXIS_TP] : 1;
            if (v == TS_PLUGIN_AXIS_AUTO) {
                nauto++;
                which = ax[k];
                continue;
            }
            if (v == 0) continue; /* edp: derived by the mesh */
            prod *= v;
            j += (size_t)snprintf(desc + j, sizeof desc - j, "%s%s %d", j ? " x " : "",
                                  ts_mesh_axis_name(ax[k]), v);
        }
        if (nauto == 0) continue;
        if (nauto > 1)
            return ts_error(TS_ERR_CONFIG,
                            "plugins: %d axes of the %s mesh are auto; at most one "
                            "may be",
                            nauto, m ? "expert" : "dense");
        if (m == 1 && which != TS_AXIS_EDP && !claimed[TS_AXIS_EDP])
            return ts_error(TS_ERR_CONFIG,
                            "plugins: axis '%s' is auto, but edp is derived too (no plugin "
                            "claims it); give one of them a size",
                            ts_mesh_axis_name((ts_mesh_axis)which));
        if (world % prod)
            return ts_error(TS_ERR_CONFIG,
                            "plugins: axis '%s' is auto, but the other axes of the %s mesh (%s = "
                            "%ld) do not divide the world of %d ranks",
                            ts_mesh_axis_name((ts_mesh_axis)which), m ? "expert" : "dense",
                            j ? desc : "none", prod, world);
        s[which] = (int)(world / prod);
    }
    memset(out, 0, sizeof *out);
    out->world = world;
    out->tp = s[TS_AXIS_TP];
    out->cp = s[TS_AXIS_CP];
    out->dp = s[TS_AXIS_DP];
    out->pp = s[TS_AXIS_PP];
    out->ep = s[TS_AXIS_EP];
    out->etp = s[TS_AXIS_ETP];
    out->edp = s[TS_AXIS_EDP];
    return TS_OK;
}

void ts_plugins_set_comm_source(ts_plugins *reg, ts_plugins_comm_fn fn, void *source) {
    reg->comm_fn = fn;
    reg->comm_source = source;
}

const char *ts_plugin_phase_name(ts_plugin_phase phase) {
    static const char *names[TS_PHASE_COUNT] = {"PIPELINE",     "SHARD_TENSOR", "SHARD_SEQUENCE",
                                                "SHARD_EXPERT", "SHARD_DATA",   "SHARD_OPTIMIZER",
                                                "ANNOTATE"};
    return (unsigned)phase < TS_PHASE_COUNT ? names[phase] : "?";
}

const char *ts_plugin_hook_name(ts_plugin_hook_kind kind) {
    static const char *names[TS_HOOK_COUNT] = {"grad_ready", "before_forward", "after_backward",
                                               "before_optimizer", "after_optimizer"};
    return (unsigned)kind < TS_HOOK_COUNT ? names[kind] : "?";
}

/* The placements of every entry and axis, for spotting what a transform
 * changed. */
static ts_placement *plg_placements(const ts_layout_plan *plan, int count) {
    ts_placement *p = malloc((size_t)(count ? count : 1) * TS_LAYOUT_MAX_AXES * sizeof *p);
    if (!p) return NULL;
    for (int e = 0; e < count; e++)
        for (int a = 0; a < TS_LAYOUT_MAX_AXES; a++)
            p[e * TS_LAYOUT_MAX_AXES + a] = a < plan->entries[e].layout.naxes
                                                ? plan->entries[e].layout.axes[a].placement
                                                : ts_placement_replicate();
    return p;
}

ts_status ts_plugins_apply_transforms(ts_plugins *reg, ts_layout_plan *plan) {
    /* Which transform set each placement last (-1: none, the core's
     * default), for the binder's messages. */
    free(reg->origin);
    reg->origin_count = plan->count;
    reg->origin =
        malloc((size_t)(plan->count ? plan->count : 1) * TS_LAYOUT_MAX_AXES * sizeof *reg->origin);
    if (!reg->origin) return plg_nomem();
    for (int k = 0; k < plan->count * TS_LAYOUT_MAX_AXES; k++)
        reg->origin[k] = -1;
    for (int phase = 0; phase < TS_PHASE_COUNT; phase++)
        for (int i = 0; i < reg->ntransforms; i++) {
            const plg_transform *t = &reg->transforms[i];
            if ((int)t->phase != phase) continue;
            /* Transforms edit entries, never add them: the count at the
             * start bounds what is compared. */
            ts_placement *before = plg_placements(plan, reg->origin_count);
            if (!before) return plg_nomem();
            ts_error(TS_OK, "%s", "");
            ts_status st = t->fn(t->ctx, plan, t->user);
            if (st != TS_OK) {
                free(before);
                return plg_wrap(st, "plugin '%s': transform '%s' (phase %s): ", t->ctx->name,
                                t->name, ts_plugin_phase_name(t->phase));
            }
            for (int e = 0; e < reg->origin_count; e++)
                for (int a = 0; a < plan->entries[e].layout.naxes; a++)
                    if (!ts_placement_equal(before[e * TS_LAYOUT_MAX_AXES + a],
                                            plan->entries[e].layout.axes[a].placement))
                        reg->origin[e * TS_LAYOUT_MAX_AXES + a] = i;
            free(before);
        }
    return TS_OK;
}

const char *ts_plugins_placement_origin(const ts_plugins *reg, int entry, int axis, char *buf,
                                        size_t size) {
    int t = reg && reg->origin && entry >= 0 && entry < reg->origin_count && axis >= 0 &&
                    axis < TS_LAYOUT_MAX_AXES
                ? reg->origin[entry * TS_LAYOUT_MAX_AXES + axis]
                : -1;
    if (t < 0)
        snprintf(buf, size, "the core's default");
    else
        snprintf(buf, size, "plugin '%s', transform '%s'", reg->transforms[t].ctx->name,
                 reg->transforms[t].name);
    return buf;
}

ts_status ts_plugins_run_hooks(ts_plugins *reg, ts_plugin_hook_event *event) {
    event->struct_size = (uint32_t)sizeof *event;
    for (int i = 0; i < reg->nhooks; i++) {
        const plg_hook *h = &reg->hooks[i];
        if (h->kind != event->kind) continue;
        ts_error(TS_OK, "%s", "");
        ts_status st = h->fn(h->ctx, event, h->user);
        if (st != TS_OK)
            return plg_wrap(st, "plugin '%s': hook %s: ", h->ctx->name,
                            ts_plugin_hook_name(h->kind));
    }
    return TS_OK;
}

int ts_plugins_num_hooks(const ts_plugins *reg, ts_plugin_hook_kind kind) {
    int n = 0;
    for (int i = 0; i < reg->nhooks; i++)
        n += reg->hooks[i].kind == kind;
    return n;
}

static void plg_list_names(char *buf, size_t size, const char *first, size_t stride, int n) {
    size_t j = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && j + 1 < size; i++)
        j += (size_t)snprintf(buf + j, size - j, "%s%s", i ? ", " : "", first + (size_t)i * stride);
    if (n == 0) snprintf(buf, size, "none");
}

int ts_plugins_has_scheduler(const ts_plugins *reg, const char *name) {
    for (int i = 0; i < reg->nschedulers; i++)
        if (strcmp(reg->schedulers[i].name, name) == 0) return 1;
    return 0;
}

ts_status ts_plugins_schedule(ts_plugins *reg, const char *name, ts_plugin_schedule_args *args,
                              ts_schedule *out) {
    ts_schedule_free(out);
    out->actions = NULL;
    out->nactions = 0;
    args->struct_size = (uint32_t)sizeof *args;
    for (int i = 0; i < reg->nschedulers; i++) {
        const plg_scheduler *s = &reg->schedulers[i];
        if (strcmp(s->name, name) != 0) continue;
        ts_error(TS_OK, "%s", "");
        ts_status st = s->fn(s->ctx, args, out, s->user);
        if (st != TS_OK) {
            ts_schedule_free(out);
            out->actions = NULL;
            out->nactions = 0;
            return plg_wrap(st, "plugin '%s': scheduler '%s': ", s->ctx->name, s->name);
        }
        return TS_OK;
    }
    char list[1024];
    plg_list_names(list, sizeof list, reg->schedulers ? reg->schedulers[0].name : "",
                   sizeof *reg->schedulers, reg->nschedulers);
    return ts_error(TS_ERR_CONFIG, "no scheduler '%s' is registered (known: %s)", name, list);
}

const ts_plugin_dispatcher_entry *ts_plugins_dispatcher(const ts_plugins *reg, const char *name) {
    for (int i = 0; i < reg->ndispatchers; i++)
        if (strcmp(reg->dispatchers[i].name, name) == 0) return &reg->dispatchers[i];
    char list[1024];
    plg_list_names(list, sizeof list, reg->dispatchers ? reg->dispatchers[0].name : "",
                   sizeof *reg->dispatchers, reg->ndispatchers);
    ts_error(TS_ERR_CONFIG, "no dispatcher '%s' is registered (known: %s)", name, list);
    return NULL;
}

/* ------------------------------------------------------------------------- */
/* describe                                                                   */

/* A bound as an integer when it is one ("64", not "64.000000" or "1e+09"). */
static void plg_fmt_num(double v, char *buf, size_t size) {
    if (v == (double)(long long)v && v > -1e18 && v < 1e18)
        snprintf(buf, size, "%lld", (long long)v);
    else
        snprintf(buf, size, "%g", v);
}

/* "int in [1, 64] or auto", "float >= 0", "enum gpipe|1f1b", ... */
static void plg_key_kind(const ts_plugin_key *k, char *buf, size_t size) {
    size_t j = (size_t)snprintf(buf, size, "%s", plg_key_type_name(k->type));
    if ((k->type == TS_PLUGIN_KEY_INT || k->type == TS_PLUGIN_KEY_FLOAT) && k->min <= k->max) {
        char lo[64], hi[64];
        plg_fmt_num(k->min, lo, sizeof lo);
        plg_fmt_num(k->max, hi, sizeof hi);
        if (k->max >= 1e300)
            j += (size_t)snprintf(buf + j, size - j, " >= %s", lo);
        else
            j += (size_t)snprintf(buf + j, size - j, " in [%s, %s]", lo, hi);
    }
    if (k->choices && j < size)
        snprintf(buf + j, size - j, "%s%s", k->type == TS_PLUGIN_KEY_ENUM ? " " : " or ",
                 k->choices);
}

ts_status ts_plugins_describe(const ts_plugins *reg, FILE *f) {
    for (int i = 0; i < reg->n; i++) {
        const ts_plugin_ctx *ctx = reg->plugins[i];
        const ts_plugin_descriptor *d = &ctx->desc;
        fprintf(f, "plugin %s %s (plugin ABI %u.%u) %s\n", ctx->name, d->version,
                TS_PLUGIN_ABI_MAJOR_OF(d->abi_version), TS_PLUGIN_ABI_MINOR_OF(d->abi_version),
                ctx->path);
        if (d->description) fprintf(f, "  %s\n", d->description);
        for (int k = 0; k < d->nkeys; k++) {
            const ts_plugin_key *key = &d->keys[k];
            char kind[256], def[300];
            plg_key_kind(key, kind, sizeof kind);
            if (!key->def)
                snprintf(def, sizeof def, "required");
            else if (key->type == TS_PLUGIN_KEY_STRING)
                snprintf(def, sizeof def, "default \"%s\"", key->def);
            else
                snprintf(def, sizeof def, "default %s", key->def);
            fprintf(f, "  key %s.%s: %s, %s\n      %s\n", ctx->name, key->name, kind, def,
                    key->help);
        }
        if (!ctx->initialised) continue;
        for (int a = 0; a < reg->naxes; a++)
            if (strcmp(reg->axes[a].plugin, ctx->name) == 0) {
                if (reg->axes[a].size == TS_PLUGIN_AXIS_AUTO)
                    fprintf(f, "  axis %s size auto (%s mesh)\n", reg->axes[a].name,
                            reg->axes[a].mesh == TS_MESH_DENSE ? "dense" : "expert");
                else
                    fprintf(f, "  axis %s size %d (%s mesh)\n", reg->axes[a].name,
                            reg->axes[a].size,
                            reg->axes[a].mesh == TS_MESH_DENSE ? "dense" : "expert");
            }
        for (int t = 0; t < reg->ntransforms; t++)
            if (reg->transforms[t].ctx == ctx)
                fprintf(f, "  transform %s (phase %s)\n", reg->transforms[t].name,
                        ts_plugin_phase_name(reg->transforms[t].phase));
        for (int h = 0; h < reg->nhooks; h++)
            if (reg->hooks[h].ctx == ctx)
                fprintf(f, "  hook %s\n", ts_plugin_hook_name(reg->hooks[h].kind));
        for (int s = 0; s < reg->nschedulers; s++)
            if (reg->schedulers[s].ctx == ctx)
                fprintf(f, "  scheduler %s\n", reg->schedulers[s].name);
        for (int s = 0; s < reg->ndispatchers; s++)
            if (reg->dispatchers[s].ctx == ctx)
                fprintf(f, "  dispatcher %s\n", reg->dispatchers[s].name);
    }
    if (reg->n == 0) fprintf(f, "no plugins loaded\n");
    fflush(f);
    return ferror(f) ? ts_error(TS_ERR_IO, "plugins: cannot write the description") : TS_OK;
}
