/*
 * ep.c — tessera-ep.so: expert parallelism for the mixture-of-experts
 * blocks ([model] experts). The experts of every MoE block are split over
 * the `ep` axis of the expert mesh (etp x ep x edp x pp): rank r of an ep
 * group holds experts [r E/ep, (r+1) E/ep), and the rows each token routes to
 * an expert travel to that expert's rank and back with a token dispatcher,
 * chosen by name ([ep] dispatcher): the built-in all_to_all and all_gather
 * (dispatch_a2a.c, dispatch_gather.c), or any plugin's (a third party's
 * `flex`, examples/flex-dispatcher).
 *
 * Parallel folding (Megatron-LM): the expert mesh covers the same ranks as
 * the dense mesh tp x cp x dp x pp, with its own sizes; only the pipeline
 * groups must coincide (the mesh checks it). The experts' gradients are
 * complete on their rank once combine has brought every token's
 * contribution; where edp > 1 the ranks of an edp group hold the same
 * experts and dp all-reduces their gradients over edp.
 *
 * What it decides: the placement of the experts' weights (S(0) over ep,
 * their first dimension is the experts), the axis sizes, and the
 * dispatcher, and with [ep] tensor_size > 1 the cut of each expert's hidden
 * layer over etp (the MoE layer gathers the rows over etp and
 * reduce-scatters the partial outputs). What it does not: the router,
 * capacity and the losses (the model's MoE layer).
 */
#include <stddef.h>
#include <string.h>

#include "dispatch.h"
#include "tessera/plugin.h"

static const ts_plugin_key ep_keys[] = {
    {"size", TS_PLUGIN_KEY_INT, "1", 1, 1 << 16, NULL,
     "expert-parallel ranks: the experts of a block split over them"},
    {"tensor_size", TS_PLUGIN_KEY_INT, "1", 1, 1 << 16, NULL,
     "expert tensor parallelism (etp): each expert's hidden layer cut over etp ranks"},
    {"dispatcher", TS_PLUGIN_KEY_STRING, "all_to_all", 1, 0, NULL,
     "the token dispatcher: all_to_all, all_gather, or a name another plugin registers"},
};

static _Thread_local struct {
    const ts_host *host;
    ts_plugin_ctx *ctx;
} ep;

/* The dimension of an expert weight's hidden layer (fc: its rows, dim 1;
 * its bias, dim 1; proj: its columns, dim 2), or -1 (proj's bias: whole). */
static int ep_hidden_dim(const char *name) {
    static const struct {
        const char *suffix;
        int dim;
    } cuts[] = {{".fc.weight", 1}, {".fc.bias", 1}, {".proj.weight", 2}};
    size_t len = strlen(name);
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        size_t k = strlen(cuts[i].suffix);
        if (len > k && strcmp(name + len - k, cuts[i].suffix) == 0) return cuts[i].dim;
    }
    return -1;
}

/* The experts' weights (the entries of the expert mesh: they have an ep
 * axis) cut by experts over ep, and by their hidden layer over etp (the
 * first product column parallel, the second row parallel, as Megatron-LM's
 * expert tensor parallelism). */
static ts_status ep_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        if (e->kind != TS_PLAN_PARAM) continue;
        for (int a = 0; a < e->layout.naxes; a++) {
            ts_layout_axis *ax = &e->layout.axes[a];
            if (ax->size <= 1) continue;
            if (strcmp(ax->name, "ep") == 0) ax->placement = ts_placement_shard(0);
            int dim = ep_hidden_dim(e->name);
            if (strcmp(ax->name, "etp") == 0 && dim >= 0) ax->placement = ts_placement_shard(dim);
        }
    }
    return TS_OK;
}

static ts_status ep_init(const ts_host *host, ts_plugin_ctx *ctx) {
    ep.host = host;
    ep.ctx = ctx;
    if (!TS_REGISTRATION_HAS(host->reg, experts))
        return host->error(ctx, TS_ERR_PLUGIN, "needs a core with register_experts (ABI 1.1)");
    int64_t size, etp;
    const char *dispatcher;
    TS_TRY(host->config->get_int(ctx, "size", &size));
    TS_TRY(host->config->get_int(ctx, "tensor_size", &etp));
    TS_TRY(host->config->get_str(ctx, "dispatcher", &dispatcher));
    TS_TRY(host->reg->axis(ctx, "ep", (int)size, TS_MESH_EXPERT));
    TS_TRY(host->reg->axis(ctx, "etp", (int)etp, TS_MESH_EXPERT));
    TS_TRY(host->reg->transform(ctx, "experts_over_ep", TS_PHASE_SHARD_EXPERT, ep_transform, NULL));
    TS_TRY(ep_register_dispatchers(host, ctx));
    return host->reg->experts(ctx, "ep", dispatcher);
}

static const ts_plugin_descriptor ep_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "ep",
    "0.1.0",
    "expert parallelism: MoE experts split over ep, tokens routed by a dispatcher",
    ep_keys,
    sizeof ep_keys / sizeof ep_keys[0],
    ep_init,
    NULL,
    TS_PLUGIN_THREAD_LOCAL_STATE, /* its state is _Thread_local */
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &ep_descriptor;
}
