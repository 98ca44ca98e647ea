/*
 * registry.c — what the plugins registered, as the core asks for it: axes
 * and mesh sizes, transforms (in phase order, remembering who set each
 * placement), hooks and module hooks, schedulers, dispatchers, providers,
 * attention and optimizer-state registrations, the model view, metrics.
 *
 * What it does not do: load plugins (loader.c) or the host table (host.c).
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "plugin_impl.h"
#include "schedule.h"
#include "tessera/layout.h" /* the plan transforms edit, and who set what */

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
uint32_t ts_plugins_flags(const ts_plugins *reg, int i) {
    return reg->plugins[i]->flags;
}
const ts_host *ts_plugins_host(const ts_plugins *reg) {
    return &reg->host;
}
int ts_plugins_thread_safe(const ts_plugins *reg, const char **first_not) {
    if (first_not) *first_not = NULL;
    for (int i = 0; reg && i < reg->n; i++) {
        if (reg->plugins[i]->flags & TS_PLUGIN_THREAD_LOCAL_STATE) continue;
        if (first_not) *first_not = reg->plugins[i]->name;
        return 0;
    }
    return 1;
}
int ts_plugins_num_axes(const ts_plugins *reg) {
    return reg->naxes;
}
const ts_plugin_axis_entry *ts_plugins_axis(const ts_plugins *reg, int i) {
    return i >= 0 && i < reg->naxes ? &reg->axes[i] : NULL;
}

/* The standard axes (their place, standard size and fold), then the claimed
 * axes of other names, each inserted before the axis it names; whether a
 * plugin claims each. The names point into the registry's entries. */
typedef struct plg_mesh_defs {
    int n;
    ts_mesh_axis_def d[TS_MESH_MAX_AXES];
    int claimed[TS_MESH_MAX_AXES];
} plg_mesh_defs;

static int plg_def_index(const plg_mesh_defs *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->d[i].name, name) == 0) return i;
    return -1;
}

static const ts_mesh_axis_def plg_standard[TS_MESH_STANDARD_COUNT] = TS_MESH_STANDARD_AXES;

const ts_mesh_axis_def *ts_plugins_standard_axis(const char *name) {
    for (int i = 0; name && i < TS_MESH_STANDARD_COUNT; i++)
        if (strcmp(plg_standard[i].name, name) == 0) return &plg_standard[i];
    return NULL;
}

static ts_status plg_mesh_defs_build(const ts_plugins *reg, plg_mesh_defs *m) {
    memset(m, 0, sizeof *m);
    m->n = TS_MESH_STANDARD_COUNT;
    memcpy(m->d, plg_standard, sizeof plg_standard);
    for (int i = 0; i < reg->naxes; i++) {
        const ts_plugin_axis_entry *a = &reg->axes[i];
        int k = plg_def_index(m, a->name);
        if (k < 0) {
            if (m->n == TS_MESH_MAX_AXES)
                return ts_error(TS_ERR_CONFIG, "plugins: more than %d mesh axes", TS_MESH_MAX_AXES);
            int at = a->before[0] ? plg_def_index(m, a->before) : -1;
            for (int j = 0; at < 0 && !a->before[0] && j < m->n; j++)
                if (m->d[j].pipeline) at = j;
            if (a->before[0] && at < 0)
                return ts_error(TS_ERR_CONFIG,
                                "plugins: plugin '%s' places axis '%s' before '%s', which is no "
                                "mesh axis",
                                a->plugin, a->name, a->before);
            if (at < 0) at = m->n;
            memmove(&m->d[at + 1], &m->d[at], (size_t)(m->n - at) * sizeof m->d[0]);
            memmove(&m->claimed[at + 1], &m->claimed[at], (size_t)(m->n - at) * sizeof(int));
            m->n++;
            k = at;
            m->d[k] = (ts_mesh_axis_def){a->name, 1, a->mesh, 0, NULL, 0};
        }
        m->d[k].batch |= a->cuts_batch;
        m->d[k].size = a->size == TS_PLUGIN_AXIS_AUTO ? 0 : a->size;
        m->claimed[k] = 1;
    }
    return TS_OK;
}

const char *ts_plugins_axes_origin(const ts_plugins *reg, char *buf, size_t size) {
    size_t j = 0;
    buf[0] = '\0';
    for (int i = 0; i < reg->naxes && j + 1 < size; i++) {
        const ts_plugin_axis_entry *a = &reg->axes[i];
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
    /* The dense axes of size 1 that no plugin claims. */
    plg_mesh_defs m;
    if (plg_mesh_defs_build(reg, &m) != TS_OK) return buf;
    int any = 0;
    for (int k = 0; k < m.n && j + 1 < size; k++) {
        if (m.claimed[k] || m.d[k].mesh != TS_MESH_DENSE) continue;
        j += (size_t)snprintf(buf + j, size - j, "%s%s", any ? ", " : j ? "; " : "", m.d[k].name);
        any = 1;
    }
    if (any && j + 1 < size) snprintf(buf + j, size - j, " 1 (no plugin claims them)");
    return buf;
}

/* The size of definition k once folds are resolved (0: derived). */
static int plg_def_size(const plg_mesh_defs *m, int k) {
    if (m->d[k].size != TS_MESH_SIZE_OF_FOLD) return m->d[k].size;
    int f = plg_def_index(m, m->d[k].fold);
    return f >= 0 && m->d[f].size > 0 ? m->d[f].size : 1;
}

/* An auto axis: at most one per mesh, and the others must divide the world
 * (the message lists them as the mesh will). */
static ts_status plg_mesh_auto(plg_mesh_defs *m, int world) {
    for (int kind = 0; kind < 2; kind++) {
        int nauto = 0, which = -1, derived = -1;
        long prod = 1;
        char desc[256] = "";
        size_t j = 0;
        for (int k = 0; k < m->n; k++) {
            const ts_mesh_axis_def *d = &m->d[k];
            if (!((int)d->mesh == kind || d->pipeline)) continue;
            int v = plg_def_size(m, k);
            if (v == 0 && m->claimed[k]) {
                nauto++;
                which = k;
                continue;
            }
            if (v == 0) { /* derived by the mesh: no plugin asked for it */
                derived = k;
                continue;
            }
            prod *= v;
            j += (size_t)snprintf(desc + j, sizeof desc - j, "%s%s %d", j ? " x " : "", d->name, v);
        }
        if (nauto == 0) continue;
        const char *mname = kind ? "expert" : "dense";
        if (nauto > 1)
            return ts_error(TS_ERR_CONFIG,
                            "plugins: %d axes of the %s mesh are auto; at most one may be", nauto,
                            mname);
        if (derived >= 0)
            return ts_error(TS_ERR_CONFIG,
                            "plugins: axis '%s' is auto, but %s is derived too (no plugin claims "
                            "it); give one of them a size",
                            m->d[which].name, m->d[derived].name);
        if (world % prod)
            return ts_error(TS_ERR_CONFIG,
                            "plugins: axis '%s' is auto, but the other axes of the %s mesh (%s = "
                            "%ld) do not divide the world of %d ranks",
                            m->d[which].name, mname, j ? desc : "none", prod, world);
        m->d[which].size = (int)(world / prod);
    }
    return TS_OK;
}

ts_status ts_plugins_mesh(const ts_plugins *reg, int world, const char *order, ts_mesh **out) {
    *out = NULL;
    /* [parallel] order when the configuration gives it; else the axes'
     * default order (a plugin's axes in the places it chose). */
    if (!order && reg->cfg && ts_config_has(reg->cfg, "parallel", "order"))
        order = ts_config_str(reg->cfg, "parallel", "order");
    if (world < 1) return ts_error(TS_ERR_INVALID, "plugins: world %d < 1", world);
    plg_mesh_defs m;
    TS_TRY(plg_mesh_defs_build(reg, &m));
    /* An auto axis is derived here, so that a failure's message speaks of
     * the plugins' axes. */
    TS_TRY(plg_mesh_auto(&m, world));
    const char *tokens[64] = {TS_MESH_JSON_TOKENS};
    int ntok = 0;
    while (ntok < 64 && tokens[ntok])
        ntok++;
    for (int k = 0; k < m.n && ntok < 64; k++) {
        int listed = 0;
        for (int t = 0; t < ntok; t++)
            listed |= strcmp(tokens[t], m.d[k].name) == 0;
        if (!listed) tokens[ntok++] = m.d[k].name;
    }
    return ts_mesh_create_axes(world, m.d, m.n, order, tokens, ntok, out);
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
            /* A placement belongs to the plugin that set it: another
             * plugin changing it is a conflict (two in one phase are not). */
            for (int e = 0; e < reg->origin_count && st == TS_OK; e++)
                for (int a = 0; a < plan->entries[e].layout.naxes && st == TS_OK; a++) {
                    int k = e * TS_LAYOUT_MAX_AXES + a;
                    ts_placement was = before[k], now = plan->entries[e].layout.axes[a].placement;
                    if (ts_placement_equal(was, now)) continue;
                    int o = reg->origin[k];
                    if (o >= 0 && reg->transforms[o].ctx != t->ctx) {
                        char p0[16], p1[16];
                        ts_placement_str(was, p0, sizeof p0);
                        ts_placement_str(now, p1, sizeof p1);
                        st = ts_error(TS_ERR_PLUGIN,
                                      "transforms conflict: plugin '%s' (transform '%s', phase "
                                      "%s) places %s %s over %s, which plugin '%s' (transform "
                                      "'%s') placed %s; a placement of a tensor over an axis "
                                      "belongs to one plugin",
                                      t->ctx->name, t->name, ts_plugin_phase_name(t->phase),
                                      plan->entries[e].name, p1,
                                      plan->entries[e].layout.axes[a].name,
                                      reg->transforms[o].ctx->name, reg->transforms[o].name, p0);
                    }
                    reg->origin[k] = i;
                }
            free(before);
            if (st != TS_OK) return st;
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

/* --- ABI 1.1 ------------------------------------------------------------------ */

void ts_plugins_set_coord_source(ts_plugins *reg, ts_plugins_coord_fn fn) {
    reg->coord_fn = fn;
}

void ts_plugins_set_device(ts_plugins *reg, const ts_backend *be) {
    if (reg) reg->be = be;
}

void ts_plugins_set_model(ts_plugins *reg, const ts_plugin_model *model) {
    if (reg) reg->model = model;
}

const char *ts_plugin_module_hook_name(ts_plugin_module_hook_kind kind) {
    static const char *names[] = {"before_forward", "after_forward", "before_backward",
                                  "after_backward"};
    return (unsigned)kind < TS_MODULE_HOOK_COUNT ? names[kind] : "?";
}

int ts_plugins_num_module_hooks(const ts_plugins *reg) {
    return reg ? reg->nmodule_hooks : 0;
}

ts_status ts_plugins_run_module_hooks(ts_plugins *reg, ts_plugin_module_event *event) {
    event->struct_size = (uint32_t)sizeof *event;
    for (int i = 0; i < reg->nmodule_hooks; i++) {
        const plg_module_hook *h = &reg->module_hooks[i];
        if (h->kind != event->kind) continue;
        ts_error(TS_OK, "%s", "");
        ts_status st = h->fn(h->ctx, event, h->user);
        if (st != TS_OK)
            return plg_wrap(st, "plugin '%s': module hook %s of %s: ", h->ctx->name,
                            ts_plugin_module_hook_name(h->kind), event->module->name);
    }
    return TS_OK;
}

const char *ts_plugin_provision_name(ts_plugin_provision what) {
    static const char *names[] = {"gradient reduction", "parameter storage", "optimizer state",
                                  "attention", "experts"};
    return (unsigned)what < TS_PROVIDE_COUNT ? names[what] : "?";
}

static const plg_provider *plg_provider_of(const ts_plugins *reg, ts_plugin_provision what,
                                           const char *axis) {
    for (int i = 0; reg && i < reg->nproviders; i++)
        if (reg->providers[i].what == what && strcmp(reg->providers[i].axis, axis) == 0)
            return &reg->providers[i];
    return NULL;
}

const char *ts_plugins_provider(const ts_plugins *reg, ts_plugin_provision what, const char *axis) {
    const plg_provider *p = plg_provider_of(reg, what, axis);
    if (p) return p->ctx->name;
    if (!reg || what != TS_PROVIDE_GRAD_REDUCTION) return NULL;
    /* ABI 1.0: a plugin claiming the axis with a GRAD_READY hook reduces
     * its gradients (it had no other way to say so). */
    for (int i = 0; i < reg->naxes; i++) {
        if (strcmp(reg->axes[i].name, axis) != 0) continue;
        for (int k = 0; k < reg->nhooks; k++) {
            const ts_plugin_ctx *c = reg->hooks[k].ctx;
            if (reg->hooks[k].kind == TS_HOOK_GRAD_READY &&
                strcmp(c->name, reg->axes[i].plugin) == 0 &&
                TS_PLUGIN_ABI_MINOR_OF(c->desc.abi_version) == 0)
                return c->name;
        }
    }
    return NULL;
}

int ts_plugins_attention(const ts_plugins *reg, const char *axis,
                         const ts_plugin_attention_ops **ops, ts_plugin_ctx **ctx, void **user) {
    const plg_provider *p = plg_provider_of(reg, TS_PROVIDE_ATTENTION, axis);
    if (!p) return 0;
    *ops = &p->attention;
    *ctx = p->ctx;
    *user = p->user;
    return 1;
}

const char *ts_plugins_experts(const ts_plugins *reg, const char *axis) {
    const plg_provider *p = plg_provider_of(reg, TS_PROVIDE_EXPERTS, axis);
    return p ? p->dispatcher : NULL;
}

int ts_plugins_optimizer_state(const ts_plugins *reg, const char *axis,
                               const ts_plugin_optimizer_state_ops **ops, ts_plugin_ctx **ctx,
                               void **user) {
    const plg_provider *p = plg_provider_of(reg, TS_PROVIDE_OPTIMIZER_STATE, axis);
    if (!p) return 0;
    *ops = &p->optimizer;
    *ctx = p->ctx;
    *user = p->user;
    return 1;
}
