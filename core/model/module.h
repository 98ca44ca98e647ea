/*
 * module.h — the module interface: forward, backward, free.
 *
 * A model is a list of modules run in order (embedding, blocks, head); a
 * pipeline stage is a contiguous range of them. Every module passes one
 * hidden-state tensor x (B, T, C) along.
 *
 * Ownership of activations: forward returns y as a view of memory owned by
 * the module's saved state for that micro-batch; it stays valid until the
 * next module's forward has consumed it (or the chunk's output was sent):
 * then, in bf16 mode, the state is packed to two bytes per value. The
 * module's backward for the same micro-batch frees the saved state. The
 * input x is borrowed: a module finds it again in backward through
 * ts_module_saved_input (its producer keeps it alive until this module's
 * backward has run; backward runs in reverse module order). In backward, dy is borrowed and dx is a
 * caller-owned buffer (B, T, C) that the module WRITES (=), not accumulates.
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
    /* 1 while the runner runs a forward again inside the backward
     * (activation recomputation, ts_model_set_recompute): the module
     * recomputes exactly what it computed the first time, reusing the
     * decisions it kept (an MoE layer's routing), and adds nothing to the
     * step's losses or statistics. The module hooks see it too. */
    int recompute;
} ts_step_ctx;

typedef struct ts_module ts_module;

/* Activation recomputation ([train] recompute): what a module keeps between
 * its forward and its backward.
 *   NONE       everything its backward reads;
 *   SELECTIVE  all but its attention core (the scores, softmax and
 *              probabilities, and the core's output), which its backward
 *              recomputes from the saved q, k, v (Korthikanti et al. 2022);
 *   FULL       nothing but its input (the previous module's output): its
 *              backward first runs its forward again. */
typedef enum ts_recompute {
    TS_RECOMPUTE_NONE = 0,
    TS_RECOMPUTE_SELECTIVE = 1,
    TS_RECOMPUTE_FULL = 2,
} ts_recompute;

/* What a module's kind can recompute (ts_module_ops.recompute). */
enum {
    TS_RECOMPUTE_CAN_FULL = 1u << TS_RECOMPUTE_FULL,
    TS_RECOMPUTE_CAN_SELECTIVE = 1u << TS_RECOMPUTE_SELECTIVE,
};

typedef struct ts_module_ops {
    const char *kind;
    /* x (B, T, C) -> y (B, T, C). The first module ignores x; the last
     * writes no y (y->data stays NULL) and accumulates the loss into ctx. */
    ts_status (*forward)(ts_module *m, ts_step_ctx *ctx, const ts_tensor *x, ts_tensor *y);
    /* dy (B, T, C) -> dx (B, T, C), accumulating parameter gradients. The
     * last module ignores dy; the first writes no dx (dx may be NULL). */
    ts_status (*backward)(ts_module *m, ts_step_ctx *ctx, const ts_tensor *dy, ts_tensor *dx);
    /* --- optional: activation recomputation ---------------------------- */
    /* TS_RECOMPUTE_CAN_* bits: the modes this kind implements (0: none;
     * such a module keeps everything whatever [train] recompute says). A
     * module of mode SELECTIVE reads its own m->recompute in forward and
     * backward; FULL needs nothing of the module beyond `release`. */
    unsigned recompute;
    /* Frees what the forward of micro-batch mb keeps outside the runtime's
     * parts of its slot (an attention provider's state, an MoE layer's
     * device rows). keep_decisions = 1 (a FULL module after its forward):
     * keep what its recomputed forward must reuse (an MoE layer's routing);
     * 0 (release): free everything. Called with nothing held, it does
     * nothing. NULL: the module keeps nothing outside its parts. */
    void (*release)(ts_module *m, int mb, int keep_decisions);
    /* Whether this module can run in `mode` in this run: TS_OK, or an
     * error whose message names the module and says why not (an attention
     * provider that cannot free its state, say). NULL: every mode in
     * `recompute` works. */
    ts_status (*can_recompute)(const ts_module *m, ts_recompute mode);
} ts_module_ops;

/* One part of a module's saved state: in the model's bf16 mode it waits
 * between the forward that made it and its use packed to two bytes per
 * value. Its first `keep` floats (statistics) stay f32; every later value is
 * exactly a bf16 value (the model rounds each op's output), so packing loses
 * nothing. */
typedef struct ts_saved_part {
    float *data;  /* f32, or NULL while packed                     */
    void *packed; /* keep f32 floats, then floats - keep bf16 ones */
    size_t floats, keep;
} ts_saved_part;

/* The saved state of one micro-batch (layers.h: ts_module_save): what the
 * module's backward reads, and its output, which the next module reads
 * (packed once that module's forward has consumed it). */
/* A weight gradient deferred from a BACKWARD_INPUT to its BACKWARD_WEIGHT
 * (layers.c): dweight (and dbias) += the product of dout and inp, the
 * kernel the fused backward would have called. */
typedef struct ts_weight_job {
    float *dweight, *dbias;
    const float *dout, *inp; /* in the module's saved state, or in `copy`   */
    float *copy;             /* what the job had to keep itself (owned)      */
    const void *weight;      /* the product's weight, as the call takes it   */
    int N, C, OC;
    int bf16; /* the bf16 GEMM (a bf16 weight), else f32                    */
} ts_weight_job;

typedef struct ts_module_slot {
    ts_saved_part state, output;
    const float *input;         /* the module's input x, when no module of
                                   the model holds it (a chunk's received
                                   input),                                */
    ts_saved_part input_copy;   /* or the module's packed copy of it       */
    struct ts_module *producer; /* else the module whose output x is,      */
    size_t input_offset;        /* at this offset                          */
    void *provider;             /* an attention provider's state           */
    void *moe;                  /* the MoE layer's routing and expert state */
    /* A BACKWARD_INPUT's deferred weight gradients, and whether the module
     * released the slot meanwhile (it is released after they have run). */
    ts_weight_job *jobs;
    int njobs, capjobs;
    int release_pending;
} ts_module_slot;

typedef struct ts_module_store {
    int cap;
    ts_module_slot *slot;
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
    /* Activation recomputation (ts_model_set_recompute): this module's
     * mode, and for FULL the first module of its group (the modules
     * recomputed together from the group's input; itself for a group of
     * one). */
    ts_recompute recompute;
    int group_first;
};

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_MODULE_H */
