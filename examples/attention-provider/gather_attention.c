/*
 * gather_attention.c — tessera-gather_attention.so: an out-of-tree attention
 * provider (plugin ABI 1.1) that cuts every sequence over the `cp` axis, the
 * simplest context parallelism there is (plugins/cp does it properly: ring
 * exchange, load balance, no redundant work).
 *
 *  - claims the `cp` axis ([gather_attention] size) and places the batch and
 *    the hidden state S(1) over it: each rank reads a contiguous part of
 *    every sequence, its own positions;
 *  - registers attention over cp: forward all-gathers the (B, T/cp, 3C)
 *    q, k, v blocks into whole sequences, runs the core's causal attention
 *    on them (host->attention_forward) and keeps its own rows of the output;
 *    backward runs the core's backward with the output gradient of its own
 *    rows (zeros elsewhere) and reduce-scatters the whole-sequence gradient,
 *    which sums every rank's contribution to each k and v.
 *
 * Every rank computes the attention of the whole sequence (cp times the
 * work): the point is the extension point, not the speed. The parameters'
 * gradients are partial over cp; whoever reduces them over cp (the dp
 * plugin over dp-cp, or the core) makes them whole.
 */
#include <stddef.h>
#include <string.h>

#include "tessera/layout.h"
#include "tessera/plugin.h"

static const ts_plugin_key ga_keys[] = {
    {"size", TS_PLUGIN_KEY_INT, "2", 1, 1 << 16, NULL, "ranks that share each sequence (cp)"},
};

static struct {
    const ts_host *host;
    ts_plugin_ctx *ctx;
} ga;

/* What the forward keeps for the backward of one micro-batch. */
typedef struct ga_saved {
    float *qkv, *out, *att; /* whole sequences: (B, T, 3C), (B, T, C), state */
    size_t att_floats;
} ga_saved;

/* Whole sequences (B, T, F) <-> the blocks (ranks, B, T/ranks, F) of every
 * rank, in device memory. to_blocks = 0: blocks -> whole. */
static ts_status ga_reorder(float *whole, float *blocks, int ranks, int B, int Tl, int F,
                            int to_blocks) {
    size_t row = (size_t)Tl * F * sizeof(float);
    for (int r = 0; r < ranks; r++)
        for (int b = 0; b < B; b++) {
            float *w = whole + ((size_t)b * ranks + r) * Tl * F;
            float *k = blocks + ((size_t)r * B + b) * Tl * F;
            TS_TRY(to_blocks ? ga.host->device_copy(ga.ctx, k, w, row)
                             : ga.host->device_copy(ga.ctx, w, k, row));
        }
    return TS_OK;
}

/* This rank's rows of whole sequences (B, T, F) <-> (B, T/ranks, F). */
static ts_status ga_rows(float *whole, float *mine, int rank, int ranks, int B, int Tl, int F,
                         int to_mine) {
    size_t row = (size_t)Tl * F * sizeof(float);
    for (int b = 0; b < B; b++) {
        float *w = whole + ((size_t)b * ranks + rank) * Tl * F, *m = mine + (size_t)b * Tl * F;
        TS_TRY(to_mine ? ga.host->device_copy(ga.ctx, m, w, row)
                       : ga.host->device_copy(ga.ctx, w, m, row));
    }
    return TS_OK;
}

static ts_status ga_forward(ts_plugin_ctx *ctx, ts_plugin_attention_args *a, void *user) {
    (void)ctx;
    (void)user;
    int ranks = ga.host->comm_size(a->comm), rank = ga.host->comm_rank(a->comm);
    int B = a->B, T = a->T, Tl = a->T_local, C = a->C;
    size_t scratch;
    ga_saved *s = ga.host->mem_alloc(TS_MEM_OTHER, sizeof *s);
    if (!s) return TS_ERR_NOMEM;
    TS_TRY(ga.host->attention_floats(ga.ctx, B, T, a->NH, &s->att_floats, &scratch));
    size_t qkv = (size_t)B * T * 3 * C, out = (size_t)B * T * C;
    s->qkv = ga.host->device_alloc(ga.ctx, TS_MEM_ACTS, qkv * sizeof(float));
    s->out = ga.host->device_alloc(ga.ctx, TS_MEM_ACTS, out * sizeof(float));
    s->att = ga.host->device_alloc(ga.ctx, TS_MEM_ACTS, (s->att_floats + 1) * sizeof(float));
    float *blocks = ga.host->device_alloc(ga.ctx, TS_MEM_COMM, qkv * sizeof(float));
    if (!s->qkv || !s->out || !s->att || !blocks) return TS_ERR_NOMEM;
    *a->saved = s;
    /* Every rank's q, k, v, then whole sequences. */
    ts_status st = ga.host->all_gather(a->comm, a->qkv, blocks, (size_t)B * Tl * 3 * C, TS_F32);
    if (!st) st = ga_reorder(s->qkv, blocks, ranks, B, Tl, 3 * C, 0);
    ga.host->device_free(ga.ctx, blocks);
    if (!st)
        st = ga.host->attention_forward(ga.ctx, s->out, s->att, s->qkv, B, T, C, a->NH, a->bf16);
    if (!st) st = ga_rows(s->out, a->out, rank, ranks, B, Tl, C, 1);
    return st;
}

/* Frees what the forward kept: after the backward, or when the core drops
 * it (activation recomputation runs the forward again before the backward;
 * a forward-only pass keeps nothing). */
static void ga_release(ts_plugin_ctx *ctx, ts_plugin_attention_args *a, void *user) {
    (void)ctx;
    (void)user;
    ga_saved *s = *a->saved;
    if (!s) return;
    ga.host->device_free(ga.ctx, s->qkv);
    ga.host->device_free(ga.ctx, s->out);
    ga.host->device_free(ga.ctx, s->att);
    ga.host->mem_free(s);
    *a->saved = NULL;
}

static ts_status ga_backward(ts_plugin_ctx *ctx, ts_plugin_attention_args *a, void *user) {
    (void)ctx;
    (void)user;
    ga_saved *s = *a->saved;
    int ranks = ga.host->comm_size(a->comm), rank = ga.host->comm_rank(a->comm);
    int B = a->B, T = a->T, Tl = a->T_local, C = a->C;
    size_t saved, scratch;
    TS_TRY(ga.host->attention_floats(ga.ctx, B, T, a->NH, &saved, &scratch));
    size_t qkv = (size_t)B * T * 3 * C, out = (size_t)B * T * C, local = qkv / (size_t)ranks;
    float *dout = ga.host->device_alloc(ga.ctx, TS_MEM_ACTS, out * sizeof(float));
    float *dqkv = ga.host->device_alloc(ga.ctx, TS_MEM_ACTS, qkv * sizeof(float));
    float *blocks = ga.host->device_alloc(ga.ctx, TS_MEM_COMM, qkv * sizeof(float));
    float *work = ga.host->device_alloc(ga.ctx, TS_MEM_ACTS, (scratch + 1) * sizeof(float));
    float *mine = ga.host->device_alloc(ga.ctx, TS_MEM_ACTS, local * sizeof(float));
    ts_status st = dout && dqkv && blocks && work && mine ? TS_OK : TS_ERR_NOMEM;
    /* Our rows' output gradient in whole sequences, zeros elsewhere. */
    if (!st) st = ga.host->device_zero(ga.ctx, dout, out * sizeof(float));
    if (!st) st = ga.host->device_zero(ga.ctx, dqkv, qkv * sizeof(float));
    if (!st) st = ga_rows(dout, (float *)a->dout, rank, ranks, B, Tl, C, 0);
    if (!st)
        st = ga.host->attention_backward(ga.ctx, dqkv, work, dout, s->qkv, s->out, s->att, B, T, C,
                                         a->NH, a->bf16);
    /* Sum every rank's contributions to every row; keep ours, and add it. */
    if (!st) st = ga_reorder(dqkv, blocks, ranks, B, Tl, 3 * C, 1);
    if (!st) st = ga.host->reduce_scatter(a->comm, blocks, mine, local, TS_F32, TS_REDUCE_SUM);
    if (!st) st = ga.host->device_add(ga.ctx, a->dqkv, mine, local);
    ga.host->device_free(ga.ctx, mine);
    ga.host->device_free(ga.ctx, work);
    ga.host->device_free(ga.ctx, blocks);
    ga.host->device_free(ga.ctx, dqkv);
    ga.host->device_free(ga.ctx, dout);
    ga_release(ctx, a, user);
    return st;
}

/* The batch and the hidden state cut along the sequence over cp. */
static ts_status ga_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        if (e->kind == TS_PLAN_PARAM) continue;
        for (int a = 0; a < e->layout.naxes; a++)
            if (strcmp(e->layout.axes[a].name, "cp") == 0)
                e->layout.axes[a].placement = ts_placement_shard(1);
    }
    return TS_OK;
}

static ts_status ga_init(const ts_host *host, ts_plugin_ctx *ctx) {
    ga.host = host;
    ga.ctx = ctx;
    if (!TS_HOST_HAS(host, register_attention))
        return host->error(ctx, TS_ERR_PLUGIN, "needs a core of plugin ABI 1.1 or later");
    int64_t size = 2;
    TS_TRY(host->config_int(ctx, "size", &size));
    TS_TRY(host->register_axis(ctx, "cp", (int)size, TS_MESH_DENSE));
    TS_TRY(
        host->register_transform(ctx, "sequence_cut", TS_PHASE_SHARD_SEQUENCE, ga_transform, NULL));
    static const ts_plugin_attention_ops ops = {.struct_size = sizeof ops,
                                                .forward = ga_forward,
                                                .backward = ga_backward,
                                                .order = TS_SEQUENCE_CONTIGUOUS,
                                                .release = ga_release};
    return host->register_attention(ctx, "cp", &ops, NULL);
}

static const ts_plugin_descriptor ga_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "gather_attention",
    "0.1.0",
    "example: sequences cut over cp, attention of gathered k and v",
    ga_keys,
    1,
    ga_init,
    NULL,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &ga_descriptor;
}
