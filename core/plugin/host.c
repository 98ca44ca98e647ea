/*
 * host.c — the host table handed to plugins (include/tessera/plugin.h,
 * ts_host): messages, the accounted allocator, the plugin's INI section,
 * registration (checked against the other plugins' and copied into the
 * registry), communication, metrics, and from ABI 1.1 the device's memory,
 * layouts, the model view and the attention kernel.
 *
 * What it does not do: load plugins (loader.c) or answer the core's
 * questions about what was registered (registry.c).
 */
#include <ctype.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plugin_impl.h"
#include "schedule.h"       /* ts_schedule: what schedulers append to */
#include "tessera/device.h" /* ts_device_stream */
#include "tessera/layout.h"

/* ------------------------------------------------------------------------- */
/* host table                                                                 */

int plg_ctx_ok(const ts_plugin_ctx *ctx) {
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
ts_status reg_begin(ts_plugin_ctx *ctx, const char *what) {
    if (!plg_ctx_ok(ctx)) return ts_error(TS_ERR_INVALID, "plugins: %s with a bad context", what);
    if (!ctx->in_init)
        return ts_error(TS_ERR_PLUGIN,
                        "%s: %s outside init (registration is only allowed during "
                        "init)",
                        ctx->name, what);
    return TS_OK;
}

ts_status reg_end(ts_plugin_ctx *ctx, ts_status st) {
    if (st != TS_OK && ctx->reg_status == TS_OK) {
        ctx->reg_status = st;
        snprintf(ctx->reg_msg, sizeof ctx->reg_msg, "%s", plg_last_error());
    }
    return st;
}

/* Claims an axis: a standard name (TS_MESH_STANDARD_AXES) on its own mesh,
 * or a name of the plugin's own, placed before `before` ("" or NULL: the
 * pipeline's place) in the default order. */
static ts_status host_claim_axis(ts_plugin_ctx *ctx, const char *name, int size, ts_mesh_kind mesh,
                                 const char *before, int cuts_batch) {
    ts_plugins *reg = ctx->reg;
    int ok = name && *name && strlen(name) < TS_MESH_NAME_MAX && islower((unsigned char)*name);
    for (const char *c = name; ok && *c; c++)
        ok = islower((unsigned char)*c) || isdigit((unsigned char)*c) || *c == '_';
    if (!ok)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers axis '%s' (an axis name is [a-z][a-z0-9_]*, under "
                                     "%d characters)",
                                     name ? name : "(null)", TS_MESH_NAME_MAX));
    const ts_mesh_axis_def *std = ts_plugins_standard_axis(name);
    if (!std && TS_PLUGIN_ABI_MINOR_OF(ctx->desc.abi_version) < 2)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers axis '%s', which is not a mesh axis (tp, cp, dp, "
                                     "pp, ep, etp, edp); an axis of a plugin's own needs plugin "
                                     "ABI 1.2 (the plugin was built for 1.%u)",
                                     name, TS_PLUGIN_ABI_MINOR_OF(ctx->desc.abi_version)));
    if (mesh != TS_MESH_DENSE && mesh != TS_MESH_EXPERT)
        return reg_end(ctx,
                       ts_error(TS_ERR_PLUGIN, "registers axis '%s' on mesh %d (dense or expert)",
                                name, (int)mesh));
    if (std && !std->pipeline && std->mesh != mesh)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers axis '%s' on the %s mesh, but it belongs to the "
                                     "%s mesh",
                                     name, mesh == TS_MESH_DENSE ? "dense" : "expert",
                                     std->mesh == TS_MESH_DENSE ? "dense" : "expert"));
    if (size < 1 && size != TS_PLUGIN_AXIS_AUTO)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers axis '%s' with size %d (a size is >= 1 or auto)",
                                     name, size));
    if (before && strlen(before) >= TS_MESH_NAME_MAX)
        return reg_end(ctx,
                       ts_error(TS_ERR_PLUGIN, "places axis '%s' before '%.20s...', no axis name",
                                name, before));
    for (int i = 0; i < reg->naxes; i++)
        if (strcmp(reg->axes[i].name, name) == 0)
            return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                         "axis '%s' is claimed by two plugins, '%s' and '%s' (an "
                                         "axis belongs to one plugin: load only one of them)",
                                         name, reg->axes[i].plugin, ctx->name));
    if (!plg_grow((void **)&reg->axes, &reg->capaxes, reg->naxes + 1, sizeof *reg->axes))
        return reg_end(ctx, plg_nomem());
    ts_plugin_axis_entry *e = &reg->axes[reg->naxes++];
    memset(e, 0, sizeof *e);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->size = size;
    e->mesh = std && std->pipeline ? TS_MESH_DENSE : mesh;
    e->plugin = ctx->name;
    snprintf(e->before, sizeof e->before, "%s", before && !std ? before : "");
    e->cuts_batch = cuts_batch != 0;
    return TS_OK;
}

static ts_status host_register_axis(ts_plugin_ctx *ctx, const char *name, int size,
                                    ts_mesh_kind mesh) {
    TS_TRY(reg_begin(ctx, "register_axis"));
    return host_claim_axis(ctx, name, size, mesh, NULL, 0);
}

static ts_status host_register_axis_spec(ts_plugin_ctx *ctx, const ts_plugin_axis_spec *spec) {
    TS_TRY(reg_begin(ctx, "register_axis_spec"));
    if (!spec || spec->struct_size < sizeof *spec)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "register_axis_spec: struct_size %u, the core knows %zu",
                                     spec ? spec->struct_size : 0, sizeof *spec));
    return host_claim_axis(ctx, spec->name, spec->size, spec->mesh, spec->before, spec->cuts_batch);
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
        /* Stages are no placement: one plugin assigns them. Placements
         * conflict when set (ts_plugins_apply_transforms), not by phase. */
        if (t->phase == phase && phase == TS_PHASE_PIPELINE && t->ctx != ctx)
            return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                         "transforms conflict: plugin '%s' registers '%s' in "
                                         "phase %s, which plugin '%s' owns (transform '%s'); "
                                         "only one plugin may assign pipeline stages",
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

static ts_status host_set_stage_order(ts_plugin_ctx *ctx, int order) {
    TS_TRY(reg_begin(ctx, "set_stage_order"));
    ts_plugins *reg = ctx->reg;
    if (order != TS_STAGES_INTERLEAVED && order != TS_STAGES_V)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "sets stage order %d (not a "
                                     "ts_plugin_stage_order)",
                                     order));
    if (reg->stage_set && reg->stage_set != ctx)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "sets the stage order, which plugin '%s' set already",
                                     reg->stage_set->name));
    reg->stage_order = order;
    reg->stage_set = ctx;
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
    if (!out || kind < TS_PLUGIN_ACT_FORWARD || kind > TS_PLUGIN_ACT_BACKWARD_WEIGHT)
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

int ts_plugins_stage_order(const ts_plugins *reg) {
    return reg ? reg->stage_order : TS_STAGES_INTERLEAVED;
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

/* --- ABI 1.1 ------------------------------------------------------------- */

static ts_status host_need_device(ts_plugin_ctx *ctx) {
    if (!plg_ctx_ok(ctx)) return ts_error(TS_ERR_INVALID, "plugins: a bad context");
    if (!ctx->reg->be)
        return ts_error(TS_ERR_INVALID,
                        "%s: the run's device is not open yet (use device "
                        "memory from hooks, not during init)",
                        ctx->name);
    return TS_OK;
}

static void *host_device_alloc(ts_plugin_ctx *ctx, ts_mem_category cat, size_t bytes) {
    if (host_need_device(ctx)) return NULL;
    return ctx->reg->be->alloc(cat, bytes);
}

static void host_device_free(ts_plugin_ctx *ctx, void *ptr) {
    if (plg_ctx_ok(ctx) && ctx->reg->be) ctx->reg->be->free(ptr);
}

static ts_status host_device_copy(ts_plugin_ctx *ctx, void *dst, const void *src, size_t bytes) {
    TS_TRY(host_need_device(ctx));
    return ctx->reg->be->copy(dst, src, bytes);
}

static ts_status host_device_copy_2d(ts_plugin_ctx *ctx, void *dst, size_t dpitch, const void *src,
                                     size_t spitch, size_t width, size_t rows) {
    TS_TRY(host_need_device(ctx));
    if (rows > 1 && (dpitch < width || spitch < width))
        return ts_error(TS_ERR_INVALID,
                        "%s: device_copy_2d: pitches %zu (dst) and %zu (src) must be at least the "
                        "width, %zu bytes",
                        ctx->name, dpitch, spitch, width);
    return ctx->reg->be->copy_2d(dst, dpitch, src, spitch, width, rows);
}

static ts_status host_device_convert(ts_plugin_ctx *ctx, void *dst, ts_dtype dst_dtype,
                                     const void *src, ts_dtype src_dtype, size_t n) {
    TS_TRY(host_need_device(ctx));
    const ts_backend *be = ctx->reg->be;
    if (dst_dtype == TS_BF16 && src_dtype == TS_F32) return be->f32_to_bf16(dst, src, n);
    if (dst_dtype == TS_F32 && src_dtype == TS_BF16) return be->bf16_to_f32(dst, src, n);
    return ts_error(TS_ERR_INVALID, "%s: device_convert: %s to %s is not a conversion it makes",
                    ctx->name, ts_dtype_name(src_dtype), ts_dtype_name(dst_dtype));
}

static ts_status host_device_to_host(ts_plugin_ctx *ctx, void *host, const void *src,
                                     size_t bytes) {
    TS_TRY(host_need_device(ctx));
    return ctx->reg->be->to_host(host, src, bytes);
}

static ts_status host_device_from_host(ts_plugin_ctx *ctx, void *dst, const void *host,
                                       size_t bytes) {
    TS_TRY(host_need_device(ctx));
    return ctx->reg->be->from_host(dst, host, bytes);
}

static ts_status host_device_zero(ts_plugin_ctx *ctx, void *ptr, size_t bytes) {
    TS_TRY(host_need_device(ctx));
    return ctx->reg->be->zero(ptr, bytes);
}

static ts_status host_device_add(ts_plugin_ctx *ctx, float *y, const float *x, size_t n) {
    TS_TRY(host_need_device(ctx));
    return ctx->reg->be->residual_forward(y, y, x, n);
}

static void *host_device_stream(ts_plugin_ctx *ctx) {
    if (!plg_ctx_ok(ctx) || !ctx->reg->be || ctx->reg->be->kind != TS_DEVICE_CUDA) return NULL;
    return ts_device_stream();
}

static ts_status host_attention_floats(ts_plugin_ctx *ctx, int B, int T, int NH, size_t *saved,
                                       size_t *scratch) {
    TS_TRY(host_need_device(ctx));
    *saved = ctx->reg->be->attention_saved_floats(B, NH, T);
    *scratch = ctx->reg->be->attention_scratch_floats(B, NH, T);
    return TS_OK;
}

static ts_status host_attention_forward(ts_plugin_ctx *ctx, float *out, float *saved,
                                        const float *qkv, int B, int T, int C, int NH, int bf16) {
    TS_TRY(host_need_device(ctx));
    const ts_backend *be = ctx->reg->be;
    return (bf16 ? be->attention_forward_bf16 : be->attention_forward)(out, saved, qkv, B, T, C,
                                                                       NH);
}

static ts_status host_attention_backward(ts_plugin_ctx *ctx, float *dqkv, float *scratch,
                                         const float *dout, const float *qkv, const float *out,
                                         const float *saved, int B, int T, int C, int NH,
                                         int bf16) {
    TS_TRY(host_need_device(ctx));
    const ts_backend *be = ctx->reg->be;
    return (bf16 ? be->attention_backward_bf16 : be->attention_backward)(dqkv, scratch, dout, qkv,
                                                                         out, saved, B, T, C, NH);
}

/* Block attention's arguments: sizes > 0 and C % NH == 0 (dims), then each
 * further size or stride against its minimum (at_least), naming the call. */
static ts_status host_block_dims(ts_plugin_ctx *ctx, const char *op, int B, int Tq, int C, int NH) {
    TS_TRY(host_need_device(ctx));
    if (B <= 0 || Tq <= 0 || C <= 0 || NH <= 0)
        return ts_error(TS_ERR_INVALID, "%s: %s: sizes must be positive (B=%d Tq=%d C=%d NH=%d)",
                        ctx->name, op, B, Tq, C, NH);
    if (C % NH)
        return ts_error(TS_ERR_INVALID, "%s: %s: C=%d is not divisible by NH=%d", ctx->name, op, C,
                        NH);
    return TS_OK;
}
static ts_status host_block_at_least(ts_plugin_ctx *ctx, const char *op, const char *what,
                                     int value, int min) {
    if (value < min)
        return ts_error(TS_ERR_INVALID, "%s: %s: %s=%d must be at least %d", ctx->name, op, what,
                        value, min);
    return TS_OK;
}
static ts_status host_block_tensors(ts_plugin_ctx *ctx, const char *op, const void *const *t,
                                    const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!t[i]) return ts_error(TS_ERR_INVALID, "%s: %s: %s is NULL", ctx->name, op, names[i]);
    return TS_OK;
}

static ts_status host_attention_block_forward(ts_plugin_ctx *ctx, float *out, float *lse,
                                              const float *q, const float *k, const float *v, int B,
                                              int Tq, int Tk, int C, int NH, int qs, int kvs,
                                              int os, int64_t offset) {
    const char *op = "attention_block_forward";
    const void *t[] = {out, lse, q, k, v};
    const char *names[] = {"out", "lse", "q", "k", "v"};
    TS_TRY(host_block_dims(ctx, op, B, Tq, C, NH));
    TS_TRY(host_block_at_least(ctx, op, "Tk", Tk, 1));
    TS_TRY(host_block_at_least(ctx, op, "qs", qs, C));
    TS_TRY(host_block_at_least(ctx, op, "kvs", kvs, C));
    TS_TRY(host_block_at_least(ctx, op, "os", os, C));
    TS_TRY(host_block_tensors(ctx, op, t, names, 5));
    return ctx->reg->be->attention_block_forward(out, lse, q, k, v, B, Tq, Tk, C, NH, qs, kvs, os,
                                                 offset);
}

static ts_status host_attention_block_merge(ts_plugin_ctx *ctx, float *out, float *lse,
                                            const float *out2, const float *lse2, int B, int Tq,
                                            int C, int NH, int os) {
    const char *op = "attention_block_merge";
    const void *t[] = {out, lse, out2, lse2};
    const char *names[] = {"out", "lse", "out2", "lse2"};
    TS_TRY(host_block_dims(ctx, op, B, Tq, C, NH));
    TS_TRY(host_block_at_least(ctx, op, "os", os, C));
    TS_TRY(host_block_tensors(ctx, op, t, names, 4));
    return ctx->reg->be->attention_block_merge(out, lse, out2, lse2, B, Tq, C, NH, os);
}

static ts_status host_attention_block_backward(ts_plugin_ctx *ctx, float *dq, float *dk, float *dv,
                                               const float *q, const float *k, const float *v,
                                               const float *out, const float *dout,
                                               const float *lse, int B, int Tq, int Tk, int C,
                                               int NH, int qs, int kvs, int os, int64_t offset) {
    const char *op = "attention_block_backward";
    const void *t[] = {dq, dk, dv, q, k, v, out, dout, lse};
    const char *names[] = {"dq", "dk", "dv", "q", "k", "v", "out", "dout", "lse"};
    TS_TRY(host_block_dims(ctx, op, B, Tq, C, NH));
    TS_TRY(host_block_at_least(ctx, op, "Tk", Tk, 1));
    TS_TRY(host_block_at_least(ctx, op, "qs", qs, C));
    TS_TRY(host_block_at_least(ctx, op, "kvs", kvs, C));
    TS_TRY(host_block_at_least(ctx, op, "os", os, C));
    TS_TRY(host_block_tensors(ctx, op, t, names, 9));
    return ctx->reg->be->attention_block_backward(dq, dk, dv, q, k, v, out, dout, lse, B, Tq, Tk, C,
                                                  NH, qs, kvs, os, offset);
}

static ts_status host_layout_coords(ts_plugin_ctx *ctx, const ts_layout *l, int *coords) {
    if (!plg_ctx_ok(ctx)) return ts_error(TS_ERR_INVALID, "plugins: a bad context");
    if (!ctx->reg->coord_fn)
        return ts_error(TS_ERR_INVALID, "%s: layout_coords before the mesh exists", ctx->name);
    for (int a = 0; a < l->naxes; a++) {
        int c = ctx->reg->coord_fn(ctx->reg->comm_source, l->axes[a].name);
        coords[a] = c < 0 ? 0 : c;
    }
    return TS_OK;
}

static const ts_plugin_model *host_model(ts_plugin_ctx *ctx) {
    return plg_ctx_ok(ctx) ? ctx->reg->model : NULL;
}

static ts_status host_register_module_hook(ts_plugin_ctx *ctx, ts_plugin_module_hook_kind kind,
                                           ts_plugin_module_hook_fn fn, void *user) {
    TS_TRY(reg_begin(ctx, "register_module_hook"));
    ts_plugins *reg = ctx->reg;
    if ((unsigned)kind >= TS_MODULE_HOOK_COUNT || !fn)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN, "registers a module hook of kind %d%s",
                                     (int)kind, fn ? " (no such kind)" : " without a function"));
    if (!plg_grow((void **)&reg->module_hooks, &reg->capmodule_hooks, reg->nmodule_hooks + 1,
                  sizeof *reg->module_hooks))
        return reg_end(ctx, plg_nomem());
    reg->module_hooks[reg->nmodule_hooks++] = (plg_module_hook){kind, fn, user, ctx};
    return TS_OK;
}

/* A standard axis, or one a plugin has registered so far. */
static int host_axis_known(const ts_plugins *reg, const char *axis) {
    if (!axis) return 0;
    if (ts_plugins_standard_axis(axis)) return 1;
    for (int i = 0; i < reg->naxes; i++)
        if (strcmp(reg->axes[i].name, axis) == 0) return 1;
    return 0;
}

/* A provision entry for (what, axis), checked: a mesh axis, not provided by
 * another plugin. */
static ts_status host_provide(ts_plugin_ctx *ctx, ts_plugin_provision what, const char *axis,
                              plg_provider **out) {
    ts_plugins *reg = ctx->reg;
    int is_default = (what & TS_PROVIDE_DEFAULT) != 0;
    what = (ts_plugin_provision)(what & ~TS_PROVIDE_DEFAULT);
    if ((unsigned)what >= TS_PROVIDE_COUNT)
        return reg_end(
            ctx, ts_error(TS_ERR_PLUGIN, "registers provision %d (no such provision)", (int)what));
    if (!host_axis_known(reg, axis))
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "provides %s on '%s', which is not a mesh axis (a standard "
                                     "one or one a plugin registered before)",
                                     ts_plugin_provision_name(what), axis ? axis : "(null)"));
    for (int i = 0; i < reg->nproviders; i++) {
        plg_provider *q = &reg->providers[i];
        if (q->what != what || strcmp(q->axis, axis) != 0) continue;
        if (is_default) { /* someone provides it already: the default yields */
            *out = NULL;
            return TS_OK;
        }
        if (!q->is_default)
            return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                         "provides %s on %s, which plugin '%s' already provides",
                                         ts_plugin_provision_name(what), axis, q->ctx->name));
        /* Takes the default over. */
        memset(q, 0, sizeof *q);
        q->what = what;
        snprintf(q->axis, sizeof q->axis, "%s", axis);
        q->ctx = ctx;
        *out = q;
        return TS_OK;
    }
    if (!plg_grow((void **)&reg->providers, &reg->capproviders, reg->nproviders + 1,
                  sizeof *reg->providers))
        return reg_end(ctx, plg_nomem());
    plg_provider *p = &reg->providers[reg->nproviders++];
    memset(p, 0, sizeof *p);
    p->what = what;
    snprintf(p->axis, sizeof p->axis, "%s", axis);
    p->is_default = is_default;
    p->ctx = ctx;
    *out = p;
    return TS_OK;
}

static ts_status host_register_provider(ts_plugin_ctx *ctx, ts_plugin_provision what,
                                        const char *axis) {
    TS_TRY(reg_begin(ctx, "register_provider"));
    ts_plugin_provision kind = (ts_plugin_provision)(what & ~TS_PROVIDE_DEFAULT);
    if (kind == TS_PROVIDE_EXPERTS)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "provides experts with register_provider; it is registered "
                                     "with its dispatcher (register_experts)"));
    if (kind == TS_PROVIDE_ATTENTION || kind == TS_PROVIDE_OPTIMIZER_STATE)
        return reg_end(ctx,
                       ts_error(TS_ERR_PLUGIN,
                                "provides %s with register_provider; it is registered with "
                                "its ops (register_%s)",
                                ts_plugin_provision_name(kind),
                                kind == TS_PROVIDE_ATTENTION ? "attention" : "optimizer_state"));
    plg_provider *p;
    return host_provide(ctx, what, axis, &p);
}

/* Copies as much of an ops table as both sides know. */
static void plg_copy_ops(void *dst, size_t dst_size, const void *src, uint32_t src_size) {
    memset(dst, 0, dst_size);
    memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
}

static ts_status host_register_attention(ts_plugin_ctx *ctx, const char *axis,
                                         const ts_plugin_attention_ops *ops, void *user) {
    TS_TRY(reg_begin(ctx, "register_attention"));
    if (!ops ||
        ops->struct_size < offsetof(ts_plugin_attention_ops, backward) + sizeof ops->backward ||
        !ops->forward || !ops->backward)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers attention on %s without forward "
                                     "and backward",
                                     axis ? axis : "(null)"));
    if (ops->struct_size >= offsetof(ts_plugin_attention_ops, order) + sizeof ops->order &&
        ops->order != TS_SEQUENCE_CONTIGUOUS && ops->order != TS_SEQUENCE_MIRRORED)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers attention on %s with sequence order %d "
                                     "(not a ts_plugin_sequence_order)",
                                     axis ? axis : "(null)", ops->order));
    plg_provider *p;
    TS_TRY(host_provide(ctx, TS_PROVIDE_ATTENTION, axis, &p));
    plg_copy_ops(&p->attention, sizeof p->attention, ops, ops->struct_size);
    p->user = user;
    return TS_OK;
}

static ts_status host_register_experts(ts_plugin_ctx *ctx, const char *axis,
                                       const char *dispatcher) {
    TS_TRY(reg_begin(ctx, "register_experts"));
    size_t n = dispatcher ? strlen(dispatcher) : 0;
    if (n == 0 || n >= sizeof((plg_provider *)0)->dispatcher)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers experts on %s without a dispatcher name (1..63 "
                                     "characters)",
                                     axis ? axis : "(null)"));
    plg_provider *p;
    TS_TRY(host_provide(ctx, TS_PROVIDE_EXPERTS, axis, &p));
    snprintf(p->dispatcher, sizeof p->dispatcher, "%s", dispatcher);
    return TS_OK;
}

static ts_status host_register_optimizer_state(ts_plugin_ctx *ctx, const char *axis,
                                               const ts_plugin_optimizer_state_ops *ops,
                                               void *user) {
    TS_TRY(reg_begin(ctx, "register_optimizer_state"));
    if (!ops ||
        ops->struct_size <
            offsetof(ts_plugin_optimizer_state_ops, after_step) + sizeof ops->after_step ||
        !ops->partition || !ops->after_step)
        return reg_end(ctx, ts_error(TS_ERR_PLUGIN,
                                     "registers optimizer state on %s without "
                                     "partition and after_step",
                                     axis ? axis : "(null)"));
    plg_provider *p;
    TS_TRY(host_provide(ctx, TS_PROVIDE_OPTIMIZER_STATE, axis, &p));
    plg_copy_ops(&p->optimizer, sizeof p->optimizer, ops, ops->struct_size);
    p->user = user;
    return TS_OK;
}

static const char *host_provider(ts_plugin_ctx *ctx, ts_plugin_provision what, const char *axis) {
    if (!plg_ctx_ok(ctx) || !axis) return NULL;
    return ts_plugins_provider(ctx->reg, (ts_plugin_provision)(what & ~TS_PROVIDE_DEFAULT), axis);
}

/* ABI 1.3: the sub-tables, static and shared by every registry; the flat
 * fields of ts_host are filled from them, so each pointer has its twin. */
static const ts_host_comms host_comms = {
    .struct_size = sizeof(ts_host_comms),
    .get = host_comm,
    .rank = ts_comm_rank,
    .size = ts_comm_size,
    .all_reduce = ts_comm_all_reduce,
    .all_reduce_start = ts_comm_all_reduce_start,
    .all_gather = ts_comm_all_gather,
    .all_gather_start = ts_comm_all_gather_start,
    .all_gatherv = ts_comm_all_gatherv,
    .all_gatherv_start = ts_comm_all_gatherv_start,
    .reduce_scatter = ts_comm_reduce_scatter,
    .reduce_scatter_start = ts_comm_reduce_scatter_start,
    .reduce_scatter_v = ts_comm_reduce_scatter_v,
    .reduce_scatter_v_start = ts_comm_reduce_scatter_v_start,
    .all_to_all = ts_comm_all_to_all,
    .all_to_all_start = ts_comm_all_to_all_start,
    .all_to_allv = ts_comm_all_to_allv,
    .all_to_allv_start = ts_comm_all_to_allv_start,
    .broadcast = ts_comm_broadcast,
    .send = ts_comm_send,
    .send_start = ts_comm_send_start,
    .recv = ts_comm_recv,
    .recv_start = ts_comm_recv_start,
    .barrier = ts_comm_barrier,
    .wait = ts_comm_wait,
    .test = ts_comm_test,
    .layout_local_block = ts_layout_local_block,
    .layout_coords = host_layout_coords,
    .redistribute = ts_redistribute,
};

static const ts_host_device host_dev = {
    .struct_size = sizeof(ts_host_device),
    .alloc = host_device_alloc,
    .free = host_device_free,
    .copy = host_device_copy,
    .copy_2d = host_device_copy_2d,
    .to_host = host_device_to_host,
    .from_host = host_device_from_host,
    .zero = host_device_zero,
    .add = host_device_add,
    .convert = host_device_convert,
    .stream = host_device_stream,
};

static const ts_host_kernels host_kernels = {
    .struct_size = sizeof(ts_host_kernels),
    .attention_floats = host_attention_floats,
    .attention_forward = host_attention_forward,
    .attention_backward = host_attention_backward,
    .attention_block_forward = host_attention_block_forward,
    .attention_block_merge = host_attention_block_merge,
    .attention_block_backward = host_attention_block_backward,
};

static const ts_host_registration host_reg = {
    .struct_size = sizeof(ts_host_registration),
    .axis = host_register_axis,
    .axis_spec = host_register_axis_spec,
    .transform = host_register_transform,
    .hook = host_register_hook,
    .module_hook = host_register_module_hook,
    .scheduler = host_register_scheduler,
    .dispatcher = host_register_dispatcher,
    .provider = host_register_provider,
    .attention = host_register_attention,
    .optimizer_state = host_register_optimizer_state,
    .experts = host_register_experts,
    .stage_order = host_set_stage_order,
};

static const ts_host_config host_config = {
    .struct_size = sizeof(ts_host_config),
    .get_int = host_config_int,
    .get_float = host_config_float,
    .get_bool = host_config_bool,
    .get_str = host_config_str,
    .has = host_config_has,
    .where = host_config_where,
};

/* The flat fields of ABI 1.0-1.2, from the sub-tables. */
static void host_fill_flat(ts_host *h) {
    const ts_host_comms *c = &host_comms;
    h->comm = c->get;
    h->comm_rank = c->rank;
    h->comm_size = c->size;
    h->all_reduce = c->all_reduce;
    h->all_reduce_start = c->all_reduce_start;
    h->all_gather = c->all_gather;
    h->reduce_scatter = c->reduce_scatter;
    h->all_to_all = c->all_to_all;
    h->broadcast = c->broadcast;
    h->send = c->send;
    h->recv = c->recv;
    h->barrier = c->barrier;
    h->wait = c->wait;
    h->test = c->test;
    h->all_gather_start = c->all_gather_start;
    h->reduce_scatter_start = c->reduce_scatter_start;
    h->send_start = c->send_start;
    h->recv_start = c->recv_start;
    h->all_to_all_start = c->all_to_all_start;
    h->all_gatherv = c->all_gatherv;
    h->all_gatherv_start = c->all_gatherv_start;
    h->reduce_scatter_v = c->reduce_scatter_v;
    h->reduce_scatter_v_start = c->reduce_scatter_v_start;
    h->all_to_allv = c->all_to_allv;
    h->all_to_allv_start = c->all_to_allv_start;
    h->layout_local_block = c->layout_local_block;
    h->layout_coords = c->layout_coords;
    h->redistribute = c->redistribute;
    const ts_host_device *d = &host_dev;
    h->device_alloc = d->alloc;
    h->device_free = d->free;
    h->device_copy = d->copy;
    h->device_to_host = d->to_host;
    h->device_from_host = d->from_host;
    h->device_zero = d->zero;
    h->device_add = d->add;
    h->device_stream = d->stream;
    h->device_copy_2d = d->copy_2d;
    h->device_convert = d->convert;
    const ts_host_kernels *k = &host_kernels;
    h->attention_floats = k->attention_floats;
    h->attention_forward = k->attention_forward;
    h->attention_backward = k->attention_backward;
    h->attention_block_forward = k->attention_block_forward;
    h->attention_block_merge = k->attention_block_merge;
    h->attention_block_backward = k->attention_block_backward;
    const ts_host_registration *r = &host_reg;
    h->register_axis = r->axis;
    h->register_axis_spec = r->axis_spec;
    h->register_transform = r->transform;
    h->register_hook = r->hook;
    h->register_scheduler = r->scheduler;
    h->register_dispatcher = r->dispatcher;
    h->register_module_hook = r->module_hook;
    h->register_provider = r->provider;
    h->register_attention = r->attention;
    h->register_optimizer_state = r->optimizer_state;
    h->register_experts = r->experts;
    h->set_stage_order = r->stage_order;
    const ts_host_config *g = &host_config;
    h->config_int = g->get_int;
    h->config_float = g->get_float;
    h->config_bool = g->get_bool;
    h->config_str = g->get_str;
    h->config_has = g->has;
    h->config_where = g->where;
}

void plg_host_fill(ts_host *h) {
    memset(h, 0, sizeof *h);
    h->abi_version = TS_PLUGIN_ABI_CORE;
    h->struct_size = (uint32_t)sizeof *h;
    /* The top-level services, the same at every minor. */
    h->log = host_log;
    h->error = host_error;
    h->mem_alloc = ts_mem_alloc;
    h->mem_free = ts_mem_free;
    h->metric = host_metric;
    h->model = host_model;
    h->provider = host_provider;
    h->schedule_append = host_schedule_append;
    host_fill_flat(h);
    /* ABI 1.3 */
    h->comms = &host_comms;
    h->dev = &host_dev;
    h->kernels = &host_kernels;
    h->reg = &host_reg;
    h->config = &host_config;
}
