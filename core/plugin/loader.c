/*
 * loader.c — loading plugins (contract in plugin.h; the plugin author's side
 * in include/tessera/plugin.h): find <dir>/tessera-<name>.so in the search
 * path, check the file (so_file.h), dlopen it, dlsym the one entry
 * point, check the descriptor (ABI major, minor, struct size, name = file
 * name), copy it, register its INI keys under [<name>], call init and fini;
 * discovery for `tessera plugins`, and its listing.
 *
 * What it does not do: the host table (host.c) or the registry of what
 * plugins registered (registry.c), or know any plugin by name.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "plugin_file.h" /* ts_plugin_descriptor_check */
#include "plugin_impl.h"
#include "schedule.h" /* ts_schedule, ts_action: what schedulers append to */
#include "so_file.h"  /* ts_so_file_check: the ELF checks before dlopen */

_Static_assert(TS_PLUGIN_KEY_INT == (int)TS_KEY_INT && TS_PLUGIN_KEY_FLOAT == (int)TS_KEY_FLOAT &&
                   TS_PLUGIN_KEY_BOOL == (int)TS_KEY_BOOL &&
                   TS_PLUGIN_KEY_STRING == (int)TS_KEY_STRING &&
                   TS_PLUGIN_KEY_ENUM == (int)TS_KEY_ENUM,
               "plugin key types mirror the config's");
_Static_assert(TS_PLUGIN_ACT_FORWARD == TS_ACT_FORWARD &&
                   TS_PLUGIN_ACT_RECV_GRAD == TS_ACT_RECV_GRAD &&
                   TS_PLUGIN_ACT_OPTIMIZER_STEP == TS_ACT_OPTIMIZER_STEP,
               "plugin action kinds mirror the schedule's");

/* ------------------------------------------------------------------------- */
/* helpers                                                                    */

int plg_grow(void **arr, int *cap, int need, size_t elem) {
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

ts_status plg_nomem(void) {
    return ts_error(TS_ERR_NOMEM, "plugins: out of memory");
}

/* The last error without the "[rank r/w] " prefix ts_error adds, so that a
 * wrapped message carries the prefix once. */
const char *plg_last_error(void) {
    const char *m = ts_last_error();
    if (strncmp(m, "[rank ", 6) == 0) {
        const char *e = strstr(m, "] ");
        if (e) return e + 2;
    }
    return m;
}

/* Sets "<prefix><the current last error>" as the last error. */
ts_status plg_wrap(ts_status code, const char *fmt, ...) {
    char saved[PLG_MSG], prefix[PLG_MSG];
    snprintf(saved, sizeof saved, "%s", plg_last_error());
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    return ts_error(code, "%s%s", prefix, saved[0] ? saved : "(no message)");
}

int plg_name_ok(const char *s) {
    if (!s || !*s || strlen(s) >= TS_PLUGIN_NAME_MAX) return 0;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_')) return 0;
    return 1;
}

const char *plg_key_type_name(ts_plugin_key_type t) {
    switch (t) {
    case TS_PLUGIN_KEY_INT: return "int";
    case TS_PLUGIN_KEY_FLOAT: return "float";
    case TS_PLUGIN_KEY_BOOL: return "bool";
    case TS_PLUGIN_KEY_STRING: return "string";
    case TS_PLUGIN_KEY_ENUM: return "enum";
    }
    return "?";
}

int plg_choice_has(const char *choices, const char *word) {
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
int plg_default_ok(const ts_plugin_key *k) {
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
    char buf[4096];
    ts_so_default_dir(buf, sizeof buf);
    plg_dirs_add(d, buf, strlen(buf));
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
    free(reg->module_hooks);
    free(reg->providers);
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
    /* By offset: this file's ts_plugin_descriptor need not declare it. */
    ctx->flags = 0;
    if (TS_PLUGIN_ABI_MINOR_OF(d->abi_version) >= 3 &&
        d->struct_size >= TS_PLUGIN_DESCRIPTOR_SIZE_1_3)
        memcpy(&ctx->flags, (const char *)d + TS_PLUGIN_DESCRIPTOR_FLAGS_OFFSET, sizeof ctx->flags);
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
    st = ts_so_file_check(path); /* a damaged file: an error, not SIGBUS in dlopen */
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
        if (ctx->flags & TS_PLUGIN_THREAD_LOCAL_STATE)
            fprintf(f, "  thread-local state: trainers on several threads may use it\n");
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
