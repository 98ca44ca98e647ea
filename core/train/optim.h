/*
 * optim.h — AdamW with f32 master weights and moments, the learning-rate
 * schedule (linear warmup, cosine decay to min_lr) and global gradient-norm
 * clipping.
 *
 * The optimizer works on the model's flat arrays: m and v (and, when the
 * parameters are bf16, the f32 master copy) have one f32 element per
 * parameter element, at the same offsets. Weight decay applies to tensors
 * whose ts_param.decay is set (the 2-D weights), as in GPT-2 / llm.c.
 * The arrays live with the model's tensors, on its backend's device, and the
 * update runs there (backend.h: adamw).
 *
 * Cut optimizer state (ZeRO stage 1, Rajbhandari et al. 2020): with a
 * ts_optim_shard the optimizer keeps master weights and moments for one
 * range [begin, end) of the flat buffers only and updates only that range;
 * the shard's after_step then makes the parameters whole again (the ranks
 * of the cutting axis exchange their updated ranges).
 */
#ifndef TESSERA_CORE_OPTIM_H
#define TESSERA_CORE_OPTIM_H

#include <stdint.h>

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_optim_config {
    float lr, min_lr;
    int64_t warmup;      /* steps of linear warmup                       */
    int64_t decay_steps; /* the cosine reaches min_lr at this step       */
    float beta1, beta2, eps, weight_decay;
    float grad_clip; /* 0 = no clipping                              */
} ts_optim_config;

/* This rank's part of the optimizer state: the range [begin, end) of the
 * model's flat buffers it keeps and updates, and what makes the parameters
 * whole after an update (every rank's range in place; NULL when the range
 * is the whole buffer). */
typedef struct ts_optim_shard {
    size_t begin, end;
    ts_status (*after_step)(void *user, void *params, ts_dtype dtype, size_t numel);
    void *user;
    /* The state and its update in host memory while the model is on a GPU
     * (ignored when it is on the CPU already). */
    int offload;
} ts_optim_shard;

typedef struct ts_optimizer {
    ts_optim_config cfg;
    const ts_backend *be; /* the model's: where the arrays live (borrowed) */
    size_t numel;         /* elements of the model's flat buffers          */
    ts_optim_shard shard; /* the range kept here: [0, numel) uncut          */
    /* Where the state lives and the update runs: the model's backend, or
     * the CPU's when offloaded. */
    const ts_backend *state_be;
    /* Element i of the flat buffers (begin <= i < end) is at [i - begin]: */
    float *m, *v;  /* first and second moments (TS_MEM_OPTIM)          */
    float *master; /* f32 master weights: the model's own array (from
                      begin) in fp32 mode, a TS_MEM_OPTIM copy in bf16
                      mode or when offloaded                            */
    int owns_master;
    /* Offloaded: the range's gradient and bf16 parameters in host memory. */
    float *grad_host;
    uint16_t *bf16_host;
} ts_optimizer;

/* The learning rate of 0-based step `step`: lr * (step+1)/warmup during
 * warmup, then min_lr + (lr - min_lr) * (1 + cos(pi * r)) / 2 with
 * r = (step - warmup) / (decay_steps - warmup) clamped to [0, 1]. */
float ts_lr_at(const ts_optim_config *cfg, int64_t step);

/* The optimizer of the whole flat buffers. In bf16 mode the master copy
 * starts as the model's parameters. */
ts_status ts_optimizer_create(const ts_optim_config *cfg, ts_model *model, ts_optimizer **out);
/* The same for the range of `shard` (NULL: the whole buffers). */
ts_status ts_optimizer_create_shard(const ts_optim_config *cfg, ts_model *model,
                                    const ts_optim_shard *shard, ts_optimizer **out);
void ts_optimizer_destroy(ts_optimizer *opt);

/* The clipping factor for a global gradient norm: min(1, clip / norm). */
float ts_grad_clip_scale(const ts_optim_config *cfg, double grad_norm);

/* One AdamW update of every parameter element of the range with the
 * gradients scaled by grad_scale; `step` is 0-based (bias correction uses
 * step + 1). In bf16 mode the bf16 parameters are refreshed from the master
 * weights. Then the shard's after_step, if any. The range's gradients are
 * left 0 (read and zeroed in one pass; the model's next zero_grad skips
 * them), except when offloaded, where the update reads a host copy. Fails on
 * a device error or after_step's failure. */
ts_status ts_optimizer_step(ts_optimizer *opt, ts_model *model, int64_t step, float lr,
                            float grad_scale);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_OPTIM_H */
