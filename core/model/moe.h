/*
 * moe.h — the mixture-of-experts MLP of a block (moe.c): a linear router,
 * softmax, the top_k experts of each token with their probabilities
 * renormalised over the chosen ones, capacity and dropping, the expert MLPs,
 * and the auxiliary losses (Switch/GShard load balancing, router z-loss).
 *
 * Rows. Every (token t, choice j) is one row r = t k + j routed to its
 * expert (dest[r], -1 when dropped). A dispatcher (tessera/plugin.h,
 * ts_plugin_dispatch_args) brings the rows to the ranks of their experts and
 * back; without one the layer's own, on this rank, does it. The experts'
 * outputs come back unweighted; the layer weights and sums them per token.
 * Backward dispatches the rows' gradients the same way and combines the
 * experts' input gradients back.
 *
 * Not here: the attention half of the block (gpt2.c), where the experts
 * live (the layout plan: the expert weights' first dimension may be cut
 * over the expert-parallel axis).
 */
#ifndef TESSERA_CORE_MOE_H
#define TESSERA_CORE_MOE_H

#include <stdint.h>

#include "tessera/comm.h"
#include "tessera/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_module ts_module;
typedef struct ts_step_ctx ts_step_ctx;

/* Who routes the rows: a plugin's dispatcher over the expert-parallel group
 * (comm: device memory; host: the same ranks, host memory), or, with
 * ops NULL, the layer itself on this rank. first_expert and local_experts:
 * the experts this rank holds. */
typedef struct ts_moe_routing {
    const ts_plugin_dispatcher_ops *ops;
    ts_plugin_ctx *ctx;
    void *user;
    const char *name; /* the dispatcher's, for messages                 */
    ts_comm *comm, *host;
    int first_expert, local_experts;
    /* The experts' hidden layer cut over an expert tensor-parallel group
     * (tp_ranks > 1): its communicators (device, host) and this rank's
     * place in it. */
    ts_comm *tp, *tp_host;
    int tp_ranks, tp_rank;
} ts_moe_routing;

#define TS_MOE_MAX_EXPERTS 65536

/* The step's sums over every MoE block and micro-batch, this rank's; the
 * trainer sums the counts over the batch's ranks for the metrics. The
 * losses are already those of the whole batch (their counts are summed
 * over the batch's ranks before they are formed). */
typedef struct ts_moe_stats {
    int experts;
    double aux_loss, z_loss; /* with their coefficients, averaged over the
                                micro-batches, summed over the blocks      */
    int64_t *tokens;         /* (experts): rows each expert computed       */
    int64_t dropped;         /* rows dropped by capacity                   */
    int64_t bytes_sent;      /* row data the dispatcher sent               */
    int64_t expert_rows;     /* rows this rank's experts computed          */
    double expert_s;         /* time in this rank's experts, forward and
                                backward (on a GPU: enqueueing only)     */
} ts_moe_stats;

/* The MoE MLP of a block on its N rows x (C), given the module's
 * parameters from index `first`: router (E, C), experts' fc (E, F, C) and
 * bias (E, F), proj (E, C, F) and bias (E, C) (this rank's experts when
 * their first dimension is cut). y (N, C) (=) is the MLP's output. */
ts_status ts_moe_forward(ts_module *mod, ts_step_ctx *ctx, int first, const float *x, float *y,
                         int N);
/* Its backward: dx (N, C) += the gradient through router and experts;
 * parameter gradients accumulated. Releases the micro-batch's state. */
ts_status ts_moe_backward(ts_module *mod, ts_step_ctx *ctx, int first, const float *x,
                          const float *dy, float *dx, int N);
/* Frees what micro-batch mb's forward keeps for its backward: with
 * keep_routing = 1 only the rows on the device, keeping the routing (a FULL
 * block's recomputed forward, ts_step_ctx.recompute, reuses it and routes
 * the same rows again), else everything. Nothing held: nothing done. */
void ts_moe_release(ts_module *mod, int mb, int keep_routing);
/* Frees a module's MoE state (the dispatcher's per-layer state). */
void ts_moe_layer_free(ts_module *mod);

/* Clears the step's sums (allocating the per-expert counts once). */
ts_status ts_moe_stats_reset(ts_moe_stats *s, int experts);
void ts_moe_stats_free(ts_moe_stats *s);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_MOE_H */
