/*
 * binder.c — the binder (binder.h): the core's rules for each kind of plan
 * entry, and the check that every claimed axis is used.
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

ts_status ts_bind(const ts_layout_plan *plan, const ts_mesh *mesh, const ts_plugins *reg) {
    const char *pipeline = ts_mesh_axis_name(TS_AXIS_PP);
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
    /* Every claimed axis with more than one rank is used. */
    static const ts_mesh_axis axes[] = {TS_AXIS_TP, TS_AXIS_CP,  TS_AXIS_DP,
                                        TS_AXIS_EP, TS_AXIS_ETP, TS_AXIS_EDP};
    for (size_t k = 0; k < sizeof axes / sizeof axes[0]; k++) {
        int size = ts_mesh_axis_size(mesh, axes[k]);
        const char *name = ts_mesh_axis_name(axes[k]);
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
