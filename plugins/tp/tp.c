/*
 * tp.c — tessera-tp.so: tensor parallelism as in Megatron-LM (Shoeybi et
 * al., "Megatron-LM", 2019), with optional sequence parallelism (Korthikanti
 * et al., "Reducing Activation Recomputation in Large Transformer Models",
 * 2022).
 *
 * The plugin claims the `tp` axis and states placements in the layout plan;
 * the core's GPT-2 modules derive every collective from them:
 *   attn.qkv.weight (3, C, C)  S(1)  column parallel, cut by heads
 *   attn.qkv.bias   (3, C)     S(1)
 *   attn.proj.weight (C, C)    S(1)  row parallel: partial sums, all-reduced
 *   mlp.fc.weight   (4C, C)    S(0)  column parallel
 *   mlp.fc.bias     (4C)       S(0)
 *   mlp.proj.weight (C, 4C)    S(1)  row parallel
 *   wte             (Vp, C)    S(0)  vocabulary parallel embedding and LM head
 *   everything else            R     (row-parallel biases added once)
 * With sequence_parallel = true the hidden state act.x (B, T, C) is S(1)
 * over tp: LayerNorm regions hold sequence slices, all-gathers and
 * reduce-scatters replace the all-reduces.
 *
 * What it does not do: the arithmetic (core/model/layers.c) or any communication of
 * its own.
 */
#include <string.h>

#include "tessera/plugin.h"

static const ts_plugin_key tp_keys[] = {
    {"size", TS_PLUGIN_KEY_INT, "1", 1, 1 << 16, NULL,
     "tensor-parallel ranks: heads, 4 x d_model and padded_vocab must divide by it"},
    {"sequence_parallel", TS_PLUGIN_KEY_BOOL, "false", 1, 0, NULL,
     "cut the hidden states along the sequence outside the tensor-parallel regions"},
};

typedef struct tp_state {
    const ts_host *host;
    int sequence_parallel;
} tp_state;

static _Thread_local tp_state tp;

/* The dimension a parameter is cut along, by the last part of its name. */
static int tp_cut(const char *name) {
    static const struct {
        const char *suffix;
        int dim;
    } cuts[] = {{".attn.qkv.weight", 1}, {".attn.qkv.bias", 1}, {".attn.proj.weight", 1},
                {".mlp.fc.weight", 0},   {".mlp.fc.bias", 0},   {".mlp.proj.weight", 1}};
    if (strcmp(name, "wte") == 0) return 0;
    size_t len = strlen(name);
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        size_t k = strlen(cuts[i].suffix);
        if (len > k && strcmp(name + len - k, cuts[i].suffix) == 0) return cuts[i].dim;
    }
    return -1;
}

static ts_layout_axis *tp_axis(ts_layout_plan_entry *e) {
    for (int a = 0; a < e->layout.naxes; a++)
        if (strcmp(e->layout.axes[a].name, "tp") == 0) return &e->layout.axes[a];
    return NULL;
}

static ts_status tp_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        ts_layout_axis *ax = tp_axis(e);
        if (!ax) continue; /* on the expert mesh (experts' weights): etp's, not tp's */
        if (e->kind == TS_PLAN_PARAM) {
            int dim = tp_cut(e->name);
            if (dim < 0) continue;
            if (e->layout.shape[dim] % ax->size != 0) {
                char where[128];
                tp.host->config->where(ctx, "size", where, sizeof where);
                return tp.host->error(ctx, TS_ERR_CONFIG,
                                      "%s: %s has %lld %s along dimension %d, not divisible by "
                                      "tp = %d",
                                      where, e->name, (long long)e->layout.shape[dim],
                                      strcmp(e->name, "wte") == 0 ? "rows (padded_vocab)"
                                      : strstr(e->name, "qkv")    ? "channels (heads x head size)"
                                                                  : "channels",
                                      dim, ax->size);
            }
            ax->placement = ts_placement_shard(dim);
        } else if (e->kind == TS_PLAN_ACTIVATION && tp.sequence_parallel) {
            if (e->layout.shape[1] % ax->size != 0) {
                char where[128];
                tp.host->config->where(ctx, "sequence_parallel", where, sizeof where);
                return tp.host->error(ctx, TS_ERR_CONFIG,
                                      "%s: seq_len = %lld is not divisible by tp = %d", where,
                                      (long long)e->layout.shape[1], ax->size);
            }
            ax->placement = ts_placement_shard(1);
        }
    }
    return TS_OK;
}

static ts_status tp_init(const ts_host *host, ts_plugin_ctx *ctx) {
    memset(&tp, 0, sizeof tp);
    tp.host = host;
    int64_t size = 1;
    TS_TRY(host->config->get_int(ctx, "size", &size));
    TS_TRY(host->config->get_bool(ctx, "sequence_parallel", &tp.sequence_parallel));
    TS_TRY(host->reg->axis(ctx, "tp", (int)size, TS_MESH_DENSE));
    return host->reg->transform(ctx, "tp_megatron", TS_PHASE_SHARD_TENSOR, tp_transform, NULL);
}

static const ts_plugin_descriptor tp_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "tp",
    "1.0.0",
    "tensor parallel (Megatron-LM column/row parallel layers, vocabulary-parallel embedding and "
    "loss) with optional sequence parallelism",
    tp_keys,
    (int)(sizeof tp_keys / sizeof tp_keys[0]),
    tp_init,
    NULL,
    TS_PLUGIN_THREAD_LOCAL_STATE, /* its state is _Thread_local */
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &tp_descriptor;
}
