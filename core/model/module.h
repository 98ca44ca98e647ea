/*
 * module.h — the module interface: forward, backward, free.
 *
 * A model is a list of modules run in order (embedding, blocks, head); a
 * pipeline stage is a contiguous range of them. Every module passes one
 * hidden-state tensor x (B, T, C) along.
 *
 * Ownership of activations: forward returns y as a view of memory owned by
 * the module's saved state for that micro-batch; it stays valid until the
 * module's backward for the same micro-batch returns, which frees the saved
 * state. The input x is borrowed: its producer keeps it alive until this
 * module's backward has run (backward runs in reverse module order, so that
 * holds by construction). In backward, dy is borrowed and dx is a caller-owned
 * buffer (B, T, C) that the module WRITES (=), not accumulates.
 *
 * Several micro-batches may be in flight at once (pipeline schedules): saved
 * state is kept per micro-batch index `ctx->mb`.
 */
#ifndef TESSERA_CORE_MODULE_H
#define TESSERA_CORE_MODULE_H

#include <stdint.h>

#include "tessera/comm.h"
#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_model ts_model;

/* What one forward or backward call of one micro-batch needs to know. */
typedef struct ts_step_ctx {
    int mb;                 /* micro-batch index: the saved-state slot      */
    int B, T;               /* sequences and tokens per sequence (this
                               rank's part when an axis cuts the sequence) */
    int pos0;               /* the position of the first of those T tokens
                               in its sequence                           */
    /* Or, when not NULL, the position of each of the T tokens (host memory,
     * increasing; an axis that holds mirrored chunks of every sequence). */
    const int32_t *positions;
    const int32_t *tokens;  /* (B, T) inputs                                */
    const int32_t *targets; /* (B, T) next tokens; -1 = masked position     */
    /* tokens and targets are memory of the model's device. targets_host is
     * the host's copy of targets, which the head reads for the loss sum;
     * NULL on the CPU means `targets` itself. */
    const int32_t *targets_host;
    float dloss;          /* d(objective)/d(one token's loss): 1 / (valid
                             tokens in the global batch)                  */
    int micro_batches;    /* of the step: auxiliary losses average over them */
    /* The ranks holding the other parts of this micro-batch (host memory;
     * NULL: this rank alone): the MoE layer's token counts sum over it. */
    ts_comm *batch_comm;
    double loss_sum;      /* out: the head adds the sum of token losses   */
    int64_t valid_tokens; /* out: the head adds the unmasked positions    */
    /* Optional: called after each module's backward with the module's index
     * in the model (gradient-ready hooks start reductions from here). */
    ts_status (*module_done)(void *user, int module);
    void *module_done_user;
    /* Optional: called before and after each module's forward and backward
     * (kind: 0 before forward, 1 after forward, 2 before backward, 3 after
     * backward; the plugins' module hooks run from here). */
    ts_status (*module_hook)(void *user, int module, int kind);
} ts_step_ctx;

typedef struct ts_module ts_module;

typedef struct ts_module_ops {
    const char *kind;
    /* x (B, T, C) -> y (B, T, C). The first module ignores x; the last
     * writes no y (y->data stays NULL) and accumulates the loss into ctx. */
    ts_status (*forward)(ts_module *m, ts_step_ctx *ctx, const ts_tensor *x, ts_tensor *y);
    /* dy (B, T, C) -> dx (B, T, C), accumulating parameter gradients. The
     * last module ignores dy; the first writes no dx (dx may be NULL). */
    ts_status (*backward)(ts_module *m, ts_step_ctx *ctx, const ts_tensor *dy, ts_tensor *dx);
} ts_module_ops;

/* Saved state per micro-batch slot (layers.h: ts_module_save). */
typedef struct ts_module_store {
    int cap;
    float **slot;
    const float **input; /* the module's input x of that micro-batch */
    void **provider;     /* an attention provider's state of it        */
    void **moe;          /* the MoE layer's routing and expert state   */
} ts_module_store;

struct ts_module {
    const ts_module_ops *ops;
    char name[TS_NAME_MAX];
    ts_model *model; /* parameters, workspace and precision live here */
    int index;       /* its place in the model's module list             */
    int nparams;     /* the parameters it reads: indices into model->params,
                        in the order the architecture declared them      */
    int param_index[16];
    ts_module_store saved;
    void *moe_layer; /* an MoE block's dispatcher state (moe.c)          */
};

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_MODULE_H */
