/*
 * binder.c — the binder (binder.h, docs/binder.md): the core's rules for
 * each kind of plan entry, the check that every claimed axis is used, and
 * the binding that records what was decided.
 */
#include "binder.h"

#include <stdio.h>
#include <string.h>

/* The unbound placement's message. */
static ts_status bind_fail(const ts_plugins *reg, const ts_layout_plan *plan, int e, int a,
                           const char *why) {
    const ts_layout_plan_entry *en = &plan->entries[e];
    char p[16], who[160];
    ts_placement_str(en->layout.axes[a].placement, p, sizeof p);
    ts_plugins_placement_origin(reg, e, a, who, sizeof who);
    return ts_error(TS_ERR_PLUGIN,
                    "%s is placed %s over %s (set by %s), and nothing implements it: %s", en->name,
                    p, en->layout.axes[a].name, who, why);
}

/* The placement of data.tokens over the axis called `name` (R if none). */
static ts_placement bind_data(const ts_layout_plan *plan, const char *name) {
    const ts_layout_plan_entry *d = ts_layout_plan_find((ts_layout_plan *)plan, "data.tokens");
    int i = d ? ts_layout_axis_index(&d->layout, name) : -1;
    return i >= 0 ? d->layout.axes[i].placement : ts_placement_replicate();
}

/* The name of the axis whose placements stay R (stages come from the plan's
 * stage fields). */
static const char *bind_pipeline(const ts_mesh *mesh) {
    const char *p = mesh ? ts_mesh_pipeline_axis(mesh) : NULL;
    return p ? p : "";
}

/* This rank's coordinate on the axis called `name` (0 for a name the mesh
 * does not know). */
static int bind_coord(const ts_mesh *mesh, int rank, const char *name) {
    int c = mesh ? ts_mesh_coord_of(mesh, rank, name) : -1;
    return c < 0 ? 0 : c;
}

/* Every placement bound to a rule or a provider (docs/binder.md). */
static ts_status bind_placements(const ts_layout_plan *plan, const ts_mesh *mesh,
                                 const ts_plugins *reg) {
    const char *pipeline = bind_pipeline(mesh);
    for (int e = 0; e < plan->count; e++) {
        const ts_layout_plan_entry *en = &plan->entries[e];
        for (int a = 0; a < en->layout.naxes; a++) {
            const ts_layout_axis *ax = &en->layout.axes[a];
            ts_placement p = ax->placement;
            if (ax->size <= 1 || p.kind == TS_PLACEMENT_REPLICATE) continue;
            if (strcmp(ax->name, pipeline) == 0)
                return bind_fail(reg, plan, e, a,
                                 "the pipeline cuts the model by stages (the plan's stage "
                                 "field), not by placements");
            ts_placement data = bind_data(plan, ax->name);
            int cuts_batch = data.kind == TS_PLACEMENT_SHARD;
            switch (en->kind) {
            case TS_PLAN_DATA:
                if (p.kind == TS_PLACEMENT_SHARD && p.dim == 1 &&
                    ts_plugins_provider(reg, TS_PROVIDE_ATTENTION, ax->name))
                    break; /* each rank reads its part of every sequence */
                if (p.kind != TS_PLACEMENT_SHARD || p.dim != 0)
                    return bind_fail(reg, plan, e, a,
                                     p.kind == TS_PLACEMENT_SHARD && p.dim == 1
                                         ? "cutting every sequence needs attention across the "
                                           "axis, which no plugin provides"
                                         : "the batch is read whole (R) or cut by sequences "
                                           "(S(0))");
                if (!ts_placement_equal(p, data))
                    return bind_fail(reg, plan, e, a,
                                     "the targets are cut as the tokens are (data.tokens)");
                break;
            case TS_PLAN_ACTIVATION:
                if (cuts_batch && !ts_placement_equal(p, data))
                    return bind_fail(reg, plan, e, a,
                                     "over an axis that cuts the batch the hidden state holds "
                                     "the rank's own sequences (R, or the batch's placement)");
                if (!cuts_batch && !(p.kind == TS_PLACEMENT_SHARD && p.dim == 1))
                    return bind_fail(reg, plan, e, a,
                                     "between modules the hidden state is replicated or cut "
                                     "along the sequence (S(1))");
                break;
            case TS_PLAN_PARAM:
                if (cuts_batch && p.kind == TS_PLACEMENT_SHARD &&
                    ts_plugins_provider(reg, TS_PROVIDE_PARAM_STORAGE, ax->name))
                    break; /* stored cut, presented whole by the provider */
                if (cuts_batch)
                    return bind_fail(reg, plan, e, a,
                                     "the axis cuts the batch, so its ranks compute with "
                                     "different tokens and each needs the whole parameter; a "
                                     "plugin that keeps it cut and provides it whole to the "
                                     "layers would implement this");
                if (p.kind != TS_PLACEMENT_SHARD)
                    return bind_fail(reg, plan, e, a,
                                     "a parameter is replicated or cut, never a partial sum");
                break;
            }
        }
    }
    return TS_OK;
}

/* Every claimed axis with more than one rank is used. */
static ts_status bind_axes_used(const ts_layout_plan *plan, const ts_mesh *mesh,
                                const ts_plugins *reg) {
    for (int k = 0; mesh && k < ts_mesh_num_axes(mesh); k++) {
        if (ts_mesh_axis_is_pipeline(mesh, k)) continue;
        int size = ts_mesh_axis_size_at(mesh, k);
        const char *name = ts_mesh_axis_at(mesh, k);
        if (size <= 1) continue;
        int used = 0;
        for (int e = 0; e < plan->count && !used; e++) {
            int i = ts_layout_axis_index(&plan->entries[e].layout, name);
            used =
                i >= 0 && plan->entries[e].layout.axes[i].placement.kind != TS_PLACEMENT_REPLICATE;
        }
        if (used) continue;
        const char *owner = NULL;
        for (int i = 0; reg && i < ts_plugins_num_axes(reg); i++)
            if (strcmp(ts_plugins_axis(reg, i)->name, name) == 0)
                owner = ts_plugins_axis(reg, i)->plugin;
        /* An axis no plugin claims is derived from the others (the expert
         * mesh's etp and edp): nothing was asked of it. */
        if (!owner) continue;
        return ts_error(TS_ERR_PLUGIN,
                        "the %s axis has %d ranks%s%s%s, but no placement of the layout plan "
                        "uses it: its ranks would all do the same work, and nothing implements "
                        "it",
                        name, size, owner ? " (claimed by plugin '" : "", owner ? owner : "",
                        owner ? "')" : "");
    }
    return TS_OK;
}

/* Appends `name` to the token `buf` ("dp" then "dp-cp"). */
static void bind_token_add(char *buf, const char *name) {
    size_t len = strlen(buf);
    snprintf(buf + len, TS_BINDING_TOKEN_MAX - len, "%s%s", len ? "-" : "", name);
}

/* The axis of the binding called `name`, added (with this rank's
 * coordinate) when it is new; NULL when the binding is full. */
static ts_binding_axis *bind_axis(ts_binding *b, const ts_layout_axis *ax, const ts_mesh *mesh,
                                  int rank) {
    int i = ts_binding_find(b, ax->name);
    if (i >= 0) return &b->axes[i];
    if (b->naxes == TS_BINDING_MAX_AXES) return NULL;
    ts_binding_axis *out = &b->axes[b->naxes++];
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", ax->name);
    out->size = ax->size;
    out->coord = bind_coord(mesh, rank, ax->name);
    return out;
}

/* The axes of the plan (data.tokens' first) and what cuts each. */
static ts_status bind_collect_axes(ts_binding *b, const ts_layout_plan *plan, const ts_mesh *mesh,
                                   int rank) {
    const ts_layout_plan_entry *data = ts_layout_plan_find((ts_layout_plan *)plan, "data.tokens");
    const ts_layout_plan_entry *act = ts_layout_plan_find((ts_layout_plan *)plan, "act.x");
    for (int pass = 0; pass < 2; pass++)
        for (int e = 0; e < plan->count; e++) {
            const ts_layout_plan_entry *en = &plan->entries[e];
            if ((pass == 0) != (en == data)) continue;
            for (int a = 0; a < en->layout.naxes; a++) {
                const ts_layout_axis *ax = &en->layout.axes[a];
                if (ax->size <= 1 || strcmp(ax->name, b->pipeline) == 0) continue;
                ts_binding_axis *x = bind_axis(b, ax, mesh, rank);
                if (!x)
                    return ts_error(TS_ERR_PLUGIN, "the plan has more than %d axes of size > 1",
                                    TS_BINDING_MAX_AXES);
                int shard = ax->placement.kind == TS_PLACEMENT_SHARD;
                if (en == data) {
                    x->cuts_model = 1;
                    x->cuts_batch = shard;
                    x->cuts_sequence = shard && ax->placement.dim == 1;
                } else if (en->kind == TS_PLAN_PARAM && shard) {
                    x->cuts_model = 1;
                }
            }
        }
    for (int i = 0; act && i < b->naxes; i++) {
        int k = ts_layout_axis_index(&act->layout, b->axes[i].name);
        b->axes[i].cuts_rows = !b->axes[i].cuts_batch && k >= 0 &&
                               act->layout.axes[k].placement.kind == TS_PLACEMENT_SHARD &&
                               act->layout.axes[k].placement.dim == 1;
    }
    return TS_OK;
}

/* The providers of each axis, and the one axis the optimizer state may be
 * cut over. */
static ts_status bind_providers(ts_binding *b, const ts_plugins *reg) {
    b->optim_axis = -1;
    b->mirror = -1;
    for (int i = 0; i < b->naxes; i++) {
        ts_binding_axis *x = &b->axes[i];
        x->grad_reducer = ts_plugins_provider(reg, TS_PROVIDE_GRAD_REDUCTION, x->name);
        x->param_storage = ts_plugins_provider(reg, TS_PROVIDE_PARAM_STORAGE, x->name);
        x->experts = ts_plugins_provider(reg, TS_PROVIDE_EXPERTS, x->name);
        x->dispatcher = reg ? ts_plugins_experts(reg, x->name) : NULL;
        const ts_plugin_attention_ops *ops = NULL;
        ts_plugin_ctx *ctx;
        void *user;
        if (reg && ts_plugins_attention(reg, x->name, &ops, &ctx, &user)) {
            x->attention = ts_plugins_provider(reg, TS_PROVIDE_ATTENTION, x->name);
            x->mirrored = ops->order == TS_SEQUENCE_MIRRORED;
        }
        if (x->cuts_sequence && x->mirrored) b->mirror = i;
        if (!x->cuts_model) continue;
        const ts_plugin_optimizer_state_ops *oops;
        if (!reg || !ts_plugins_optimizer_state(reg, x->name, &oops, &ctx, &user)) continue;
        x->optimizer_state = ts_plugins_provider(reg, TS_PROVIDE_OPTIMIZER_STATE, x->name);
        if (b->optim_axis >= 0)
            return ts_error(TS_ERR_PLUGIN,
                            "the optimizer state is cut over %s (plugin '%s') and over %s "
                            "(plugin '%s'); one axis at most",
                            b->axes[b->optim_axis].name, b->axes[b->optim_axis].optimizer_state,
                            x->name, x->optimizer_state);
        b->optim_axis = i;
    }
    return TS_OK;
}

/* The batch: its blocks of sequences, this rank's block and part of every
 * sequence, the groups the loss and the experts' counts are summed over. */
static ts_status bind_batch(ts_binding *b, const ts_layout_plan *plan, const ts_mesh *mesh,
                            int rank) {
    const ts_layout_plan_entry *data = ts_layout_plan_find((ts_layout_plan *)plan, "data.tokens");
    if (!data) return ts_error(TS_ERR_INTERNAL, "binder: the plan has no data.tokens");
    b->parts = 1;
    b->part = 0;
    int coords[TS_LAYOUT_MAX_AXES];
    for (int i = 0; i < data->layout.naxes; i++) {
        const ts_layout_axis *a = &data->layout.axes[i];
        int k = ts_binding_find(b, a->name);
        coords[i] = k >= 0 ? b->axes[k].coord : 0;
        if (a->placement.kind != TS_PLACEMENT_SHARD || a->size == 1) continue;
        if (mesh && ts_mesh_coord_of(mesh, rank, a->name) < 0)
            return ts_error(TS_ERR_PLUGIN, "data.tokens is cut over '%s', which is no mesh axis",
                            a->name);
        bind_token_add(b->loss_group, a->name);
        if (a->placement.dim == 0) {
            b->part = b->part * a->size + coords[i];
            b->parts *= a->size;
        } else {
            b->sequence_cuts++;
        }
    }
    for (int i = 0; i < b->naxes; i++)
        if (b->axes[i].cuts_model && (b->axes[i].cuts_batch || b->axes[i].cuts_rows))
            bind_token_add(b->rows_group, b->axes[i].name);
    int64_t off[TS_MAX_DIMS], shp[TS_MAX_DIMS];
    TS_TRY(ts_layout_local_block(&data->layout, coords, off, shp));
    b->seq_len = data->layout.ndim > 1 ? (int)data->layout.shape[1] : 0;
    b->seq0 = (int)off[1];
    b->seq_local = (int)shp[1];
    return TS_OK;
}

ts_status ts_bind(const ts_layout_plan *plan, const ts_mesh *mesh, const ts_plugins *reg, int rank,
                  ts_binding *out) {
    memset(out, 0, sizeof *out);
    out->pipeline = bind_pipeline(mesh);
    TS_TRY(bind_placements(plan, mesh, reg));
    TS_TRY(bind_axes_used(plan, mesh, reg));
    TS_TRY(bind_collect_axes(out, plan, mesh, rank));
    TS_TRY(bind_providers(out, reg));
    TS_TRY(bind_batch(out, plan, mesh, rank));
    out->stages = mesh && *out->pipeline ? ts_mesh_size(mesh, out->pipeline) : 1;
    out->chunks = ts_binding_chunks(plan, out->stages);
    return TS_OK;
}

int ts_binding_find(const ts_binding *b, const char *name) {
    for (int i = 0; i < b->naxes; i++)
        if (strcmp(b->axes[i].name, name) == 0) return i;
    return -1;
}

void ts_binding_positions(const ts_binding *b, int32_t *out) {
    for (int i = 0; i < b->seq_local; i++)
        out[i] = b->seq0 + i;
    if (b->mirror < 0 || b->sequence_cuts != 1) return;
    const ts_binding_axis *m = &b->axes[b->mirror];
    int n = m->size, c = m->coord, L = b->seq_len / (2 * n);
    for (int i = 0; i < L; i++) {
        out[i] = c * L + i;
        out[L + i] = (2 * n - 1 - c) * L + i;
    }
}

int ts_binding_norm_owner(const ts_binding *b, const ts_layout_plan_entry *param, int optim_cut) {
    for (int a = 0; a < param->layout.naxes; a++) {
        const ts_layout_axis *ax = &param->layout.axes[a];
        if (ax->size == 1 || ax->placement.kind == TS_PLACEMENT_SHARD ||
            strcmp(ax->name, b->pipeline) == 0)
            continue;
        if (optim_cut && b->optim_axis >= 0 && strcmp(ax->name, b->axes[b->optim_axis].name) == 0)
            continue;
        int k = ts_binding_find(b, ax->name);
        if (k >= 0 && b->axes[k].coord != 0) return 0;
    }
    return 1;
}

int ts_binding_chunks(const ts_layout_plan *plan, int stages) {
    int top = -1;
    for (int i = 0; i < plan->count; i++)
        if (plan->entries[i].stage > top) top = plan->entries[i].stage;
    return top >= 0 && stages > 0 ? (top + 1) / stages : 1;
}
