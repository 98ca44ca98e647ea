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
