/*
 * dispatch.h — the ep plugin's built-in token dispatchers, registered by
 * ep_register_dispatchers and chosen by name like a third party's
 * (ts_plugin_dispatcher_ops, ts_plugin_dispatch_args in tessera/plugin.h):
 *
 *  all_to_all  (dispatch_a2a.c) the rows go to the ranks of their experts
 *              with one all_to_allv each way, after an all_to_all of the
 *              per-expert counts (Megatron-LM's MoEAlltoAllTokenDispatcher);
 *              a row is sent once per chosen expert.
 *  all_gather  (dispatch_gather.c) every rank gathers every rank's routed
 *              rows and keeps those of its experts; combine sums the
 *              experts' outputs back with one reduce_scatter_v
 *              (Megatron-LM's MoEAllGatherTokenDispatcher). Moves every row
 *              to every rank: simple, and cheap only for small groups.
 *
 * Both follow the contract exactly, so for the same routing they give the
 * same expert_rows, expert_probs, expert_counts and combined rows, bit for
 * bit (but for the sign of a zero: all_gather's sum gives -0 + 0 = +0).
 * Experts are spread evenly: rank r of the expert-parallel group holds
 * [r * E / ranks, (r + 1) * E / ranks), and each checks that args says so.
 * Rows live in the run's device memory and move over args->comm with the
 * host's device_* functions; the routing (counts, dest, probabilities) is
 * host memory and moves over args->host_comm. Each call runs in three
 * phases, named in the code: pre-process (pack, on this rank), communication
 * (the only collectives), post-process (unpack, on this rank).
 *
 * bytes_sent counts the row data (C floats a row) that this rank puts on
 * the wire in the call, rows to itself included for all_to_all (its
 * all_to_allv sends them); routing metadata is not counted:
 *  all_to_all  dispatch: rows sent (one per routed row); combine: rows
 *              received in dispatch, sent back.
 *  all_gather  dispatch: its routed rows times the other ranks that receive
 *              them; combine: every other rank's rows (its contribution to
 *              their sums in the reduce-scatter).
 *
 * Not here: capacity (dropping is the router's, dest = -1) and weighting
 * (the layer's, with expert_probs or after combine).
 */
#ifndef TESSERA_PLUGINS_EP_DISPATCH_H
#define TESSERA_PLUGINS_EP_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/plugin.h" /* ts_host, ts_plugin_dispatch_args, dispatcher ops */

/* Registers "all_to_all" and "all_gather" with host->reg->dispatcher
 * (during init: ep.c's, or a test plugin's). The host table is kept as the
 * dispatchers' user pointer: it must live until fini (the core's does).
 * Failure: register_dispatcher's (a name taken), returned as it is. */
ts_status ep_register_dispatchers(const ts_host *host, ts_plugin_ctx *ctx);

/* The ops tables of the two dispatchers (dispatch_a2a.c, dispatch_gather.c). */
extern const ts_plugin_dispatcher_ops ep_dispatch_a2a_ops;
extern const ts_plugin_dispatcher_ops ep_dispatch_gather_ops;

/* ===========================================================================
 * Helpers the two dispatchers share
 * ======================================================================== */

/* Checks args against the contract and the even spread of experts: sizes,
 * every dest in [-1, E), every routed row's src_index in [0, nsrc), and this
 * rank's [first_expert, + local_experts) equal to [rank * E/R, + E/R).
 * Sets *ranks and *rank (of host_comm, which must match comm's size).
 * Failure: TS_ERR_INVALID naming the dispatcher, the rank and the field. */
static inline ts_status ep_dispatch_check(const ts_host *host, ts_plugin_ctx *ctx, const char *name,
                                          const ts_plugin_dispatch_args *a, int *ranks, int *rank) {
    if (!a || a->struct_size < offsetof(ts_plugin_dispatch_args, expert_probs) + sizeof(float *))
        return host->error(ctx, TS_ERR_INVALID, "%s: dispatch args of a core older than ABI 1.1",
                           name);
    if (!a->comm || !a->host_comm)
        return host->error(ctx, TS_ERR_INVALID, "%s: no expert-parallel communicator", name);
    int R = host->comms->size(a->host_comm), me = host->comms->rank(a->host_comm);
    if (R < 1 || host->comms->size(a->comm) != R)
        return host->error(ctx, TS_ERR_INVALID,
                           "%s: comm has %d ranks and host_comm %d: they must be one group", name,
                           host->comms->size(a->comm), R);
    int E = a->experts, L = E / R;
    if (E < 1 || E % R != 0 || a->local_experts != L || a->first_expert != me * L)
        return host->error(ctx, TS_ERR_INVALID,
                           "%s: rank %d/%d holds experts [%d, %d) of %d; the dispatcher spreads "
                           "them evenly, E / ranks each, so expects [%d, %d)",
                           name, me, R, a->first_expert, a->first_expert + a->local_experts, E,
                           me * L, me * L + L);
    if (a->hidden < 1 || a->nrows < 0 || a->nsrc < 0 || !a->expert_counts ||
        (a->nrows > 0 && (!a->dest || !a->src_index || !a->src)))
        return host->error(ctx, TS_ERR_INVALID,
                           "%s: rank %d/%d: bad sizes or buffers (hidden %d, nrows %d, nsrc %d)",
                           name, me, R, a->hidden, a->nrows, a->nsrc);
    for (int r = 0; r < a->nrows; r++) {
        if (a->dest[r] < -1 || a->dest[r] >= E)
            return host->error(ctx, TS_ERR_INVALID,
                               "%s: rank %d/%d: dest[%d] = %d, not in [-1, %d)", name, me, R, r,
                               a->dest[r], E);
        if (a->dest[r] >= 0 && (a->src_index[r] < 0 || a->src_index[r] >= a->nsrc))
            return host->error(ctx, TS_ERR_INVALID,
                               "%s: rank %d/%d: src_index[%d] = %d, not in [0, nsrc = %d)", name,
                               me, R, r, a->src_index[r], a->nsrc);
    }
    *ranks = R;
    *rank = me;
    return TS_OK;
}

/* A reusable buffer of a dispatcher's state: grown when a call needs more,
 * freed by destroy. */
typedef struct ep_dispatch_buf {
    void *ptr;
    size_t cap; /* bytes */
} ep_dispatch_buf;

/* Makes b hold at least `bytes` (its contents are not kept when it grows).
 * Device memory of the run when `device`, else host memory of the core's
 * allocator; both counted under TS_MEM_COMM. Returns b->ptr, or NULL with the
 * error set (TS_ERR_NOMEM). */
static inline void *ep_dispatch_reserve(const ts_host *host, ts_plugin_ctx *ctx, int device,
                                        ep_dispatch_buf *b, size_t bytes) {
    if (b->ptr && bytes <= b->cap) return b->ptr;
    if (device)
        host->dev->free(ctx, b->ptr);
    else
        host->mem_free(b->ptr);
    bytes = bytes ? bytes : 64;
    b->ptr =
        device ? host->dev->alloc(ctx, TS_MEM_COMM, bytes) : host->mem_alloc(TS_MEM_COMM, bytes);
    b->cap = b->ptr ? bytes : 0;
    if (!b->ptr) host->error(ctx, TS_ERR_NOMEM, "out of memory (%zu bytes)", bytes);
    return b->ptr;
}

/* Whether this dispatch's rows may travel in two bytes: the core says they
 * are bf16 values (args->rows_bf16, appended within ABI 1.1) and can
 * convert them. */
static inline int ep_dispatch_bf16(const ts_host *host, const ts_plugin_dispatch_args *a) {
    return a->struct_size >= offsetof(ts_plugin_dispatch_args, rows_bf16) + sizeof a->rows_bf16 &&
           a->rows_bf16 && TS_DEVICE_HAS(host->dev, convert);
}

/* n values between f32 and bf16 (none: nothing). */
static inline ts_status ep_dispatch_convert(const ts_host *host, ts_plugin_ctx *ctx, void *dst,
                                            ts_dtype to, const void *src, ts_dtype from,
                                            size_t n) {
    return n ? host->dev->convert(ctx, dst, to, src, from, n) : TS_OK;
}

/* A bf16 dispatch's wire: `ns` rows of C floats from `rows` converted into
 * send's buffer (*ws), room for `nr` rows in recv's (*wr). */
static inline ts_status ep_dispatch_wire(const ts_host *host, ts_plugin_ctx *ctx,
                                         ep_dispatch_buf *send, ep_dispatch_buf *recv,
                                         const float *rows, int64_t ns, int64_t nr, int C,
                                         void **ws, void **wr) {
    *ws = ep_dispatch_reserve(host, ctx, 1, send, (size_t)ns * C * sizeof(uint16_t));
    *wr = ep_dispatch_reserve(host, ctx, 1, recv, (size_t)nr * C * sizeof(uint16_t));
    if (!*ws || !*wr) return TS_ERR_NOMEM;
    return ep_dispatch_convert(host, ctx, *ws, TS_BF16, rows, TS_F32, (size_t)ns * C);
}

/* Frees what ep_dispatch_reserve made and empties b. */
static inline void ep_dispatch_release(const ts_host *host, ts_plugin_ctx *ctx, int device,
                                       ep_dispatch_buf *b) {
    if (device)
        host->dev->free(ctx, b->ptr);
    else
        host->mem_free(b->ptr);
    b->ptr = NULL;
    b->cap = 0;
}

/* Row copies on the device: dst row (dst_idx ? dst_idx[i] : i) = src row
 * (src_idx ? src_idx[i] : i) for i < n, C floats a row. Runs of rows that
 * follow each other on both sides go as one copy (most of a regrouping).
 *   dst, src: device rows of C floats; dst_idx, src_idx: (n) host, or NULL. */
static inline ts_status ep_dispatch_copy_rows(const ts_host *host, ts_plugin_ctx *ctx, float *dst,
                                              const int64_t *dst_idx, const float *src,
                                              const int64_t *src_idx, int64_t n, int C) {
    for (int64_t i = 0; i < n;) {
        int64_t d = dst_idx ? dst_idx[i] : i, s = src_idx ? src_idx[i] : i, run = 1;
        while (i + run < n && (dst_idx ? dst_idx[i + run] : i + run) == d + run &&
               (src_idx ? src_idx[i + run] : i + run) == s + run)
            run++;
        TS_TRY(host->dev->copy(ctx, dst + (size_t)d * C, src + (size_t)s * C,
                               (size_t)run * C * sizeof(float)));
        i += run;
    }
    return TS_OK;
}

#endif /* TESSERA_PLUGINS_EP_DISPATCH_H */
