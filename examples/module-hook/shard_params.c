/*
 * shard_params.c — tessera-shard_params.so: an out-of-tree plugin that keeps
 * every parameter cut over the data-parallel axis and presents it whole to
 * the layers around each module, with the module hooks of ABI 1.1 (the
 * idea of ZeRO-3 / FSDP in its simplest form; plugins/zero is the real one).
 *
 *  - its transform places each parameter S(0) over dp (its first dimension
 *    cut in equal blocks), leaving replicated the few whose first dimension
 *    dp does not divide;
 *  - it declares TS_PROVIDE_PARAM_STORAGE on dp, so the binder accepts those
 *    placements and the core stores only this rank's block;
 *  - before a module's forward (and again before its backward) it
 *    all-gathers the blocks of the module's parameters into whole tensors
 *    (blocks along dimension 0 are contiguous, so the gather is the tensor),
 *    and releases them after (no prefetch, resharded after forward);
 *  - after the backward it reduce-scatters the whole gradient, adding this
 *    rank's block into the stored gradient the optimizer reads.
 *
 * Everything goes through the host table: device memory, the dp
 * communicator (NCCL on GPUs), the parameter views. Load it beside dp (which
 * cuts the batch and reduces the gradients of what stays replicated):
 *   [parallel] plugins = dp, shard_params
 */
#include <stddef.h>
#include <string.h>

#include "tessera/layout.h"
#include "tessera/plugin.h"

static const ts_plugin_key shard_keys[] = {
    {"axis", TS_PLUGIN_KEY_STRING, "dp", 1, 0, NULL,
     "the mesh axis to cut parameters over (it must cut the batch)"},
};

static struct {
    const ts_host *host;
    ts_plugin_ctx *ctx;
    const char *axis;
} sp;

/* The index of our axis in a parameter's layout, or -1 when it is not cut
 * over it (or provided by this plugin there). */
static int shard_axis(const ts_plugin_param *p) {
    if (!p->layout) return -1;
    for (int a = 0; a < p->layout->naxes; a++)
        if (strcmp(p->layout->axes[a].name, sp.axis) == 0 && (p->provided >> a & 1u)) return a;
    return -1;
}

static size_t shard_numel(const ts_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* use->data: the whole parameter, gathered from every rank's block. */
static ts_status shard_gather(const ts_plugin_param *p, ts_comm *comm) {
    size_t n = shard_numel(p->use), es = p->use->dtype == TS_BF16 ? 2 : 4;
    void *whole = sp.host->device_alloc(sp.ctx, TS_MEM_COMM, n * es);
    if (!whole) return TS_ERR_NOMEM;
    TS_TRY(sp.host->all_gather(comm, p->store->data, whole, shard_numel(p->store), p->use->dtype));
    p->use->data = whole;
    return TS_OK;
}

static void shard_release(const ts_plugin_param *p) {
    sp.host->device_free(sp.ctx, p->use->data);
    p->use->data = NULL;
}

static ts_status shard_module(ts_plugin_ctx *ctx, const ts_plugin_module_event *ev, void *user) {
    (void)ctx;
    (void)user;
    ts_comm *comm = sp.host->comm(sp.ctx, sp.axis);
    if (!comm) return sp.host->error(sp.ctx, TS_ERR_INVALID, "no %s communicator", sp.axis);
    for (int k = 0; k < ev->module->nparams; k++) {
        const ts_plugin_param *p = ev->module->params[k];
        if (shard_axis(p) < 0) continue;
        switch (ev->kind) {
        case TS_MODULE_BEFORE_FORWARD: TS_TRY(shard_gather(p, comm)); break;
        case TS_MODULE_AFTER_FORWARD: shard_release(p); break;
        case TS_MODULE_BEFORE_BACKWARD: {
            TS_TRY(shard_gather(p, comm));
            size_t n = shard_numel(p->use_grad);
            float *g = sp.host->device_alloc(sp.ctx, TS_MEM_COMM, n * sizeof(float));
            if (!g) return TS_ERR_NOMEM;
            TS_TRY(sp.host->device_zero(sp.ctx, g, n * sizeof(float)));
            p->use_grad->data = g;
            break;
        }
        case TS_MODULE_AFTER_BACKWARD: {
            /* Sum the whole gradient over the axis, keep our block. */
            size_t n = shard_numel(p->store_grad);
            float *mine = sp.host->device_alloc(sp.ctx, TS_MEM_COMM, n * sizeof(float));
            if (!mine) return TS_ERR_NOMEM;
            ts_status st =
                sp.host->reduce_scatter(comm, p->use_grad->data, mine, n, TS_F32, TS_REDUCE_SUM);
            if (!st) st = sp.host->device_add(sp.ctx, p->store_grad->data, mine, n);
            sp.host->device_free(sp.ctx, mine);
            sp.host->device_free(sp.ctx, p->use_grad->data);
            p->use_grad->data = NULL;
            shard_release(p);
            TS_TRY(st);
            break;
        }
        default: break;
        }
    }
    return TS_OK;
}

/* Every parameter S(0) over the axis where its first dimension divides. */
static ts_status shard_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        if (e->kind != TS_PLAN_PARAM) continue;
        for (int a = 0; a < e->layout.naxes; a++) {
            ts_layout_axis *ax = &e->layout.axes[a];
            if (strcmp(ax->name, sp.axis) == 0 && ax->size > 1 &&
                e->layout.shape[0] % ax->size == 0)
                ax->placement = ts_placement_shard(0);
        }
    }
    return TS_OK;
}

static ts_status shard_init(const ts_host *host, ts_plugin_ctx *ctx) {
    sp.host = host;
    sp.ctx = ctx;
    if (!TS_HOST_HAS(host, register_module_hook))
        return host->error(ctx, TS_ERR_PLUGIN, "needs a core of plugin ABI 1.1 or later");
    TS_TRY(host->config_str(ctx, "axis", &sp.axis));
    TS_TRY(host->register_transform(ctx, "shard_params", TS_PHASE_SHARD_OPTIMIZER, shard_transform,
                                    NULL));
    TS_TRY(host->register_provider(ctx, TS_PROVIDE_PARAM_STORAGE, sp.axis));
    for (int k = 0; k < TS_MODULE_HOOK_COUNT; k++)
        TS_TRY(host->register_module_hook(ctx, (ts_plugin_module_hook_kind)k, shard_module, NULL));
    return TS_OK;
}

static const ts_plugin_descriptor shard_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "shard_params",
    "0.1.0",
    "example: parameters stored cut over dp, gathered whole around each module",
    shard_keys,
    1,
    shard_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &shard_descriptor;
}
