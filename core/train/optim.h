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

typedef struct ts_optimizer {
    ts_optim_config cfg;
    const ts_backend *be; /* the model's: where the arrays live (borrowed) */
    size_t numel;
    float *m, *v;  /* first and second moments (TS_MEM_OPTIM), on the
                      model's device                                    */
    float *master; /* f32 master weights: the model's own array in fp32
                      mode, a TS_MEM_OPTIM copy in bf16 mode            */
    int owns_master;
} ts_optimizer;

/* The learning rate of 0-based step `step`: lr * (step+1)/warmup during
 * warmup, then min_lr + (lr - min_lr) * (1 + cos(pi * r)) / 2 with
 * r = (step - warmup) / (decay_steps - warmup) clamped to [0, 1]. */
float ts_lr_at(const ts_optim_config *cfg, int64_t step);

ts_status ts_optimizer_create(const ts_optim_config *cfg, ts_model *model, ts_optimizer **out);
void ts_optimizer_destroy(ts_optimizer *opt);

/* The clipping factor for a global gradient norm: min(1, clip / norm). */
float ts_grad_clip_scale(const ts_optim_config *cfg, double grad_norm);

/* One AdamW update of every parameter with the gradients scaled by
 * grad_scale; `step` is 0-based (bias correction uses step + 1). In bf16
 * mode the bf16 parameters are refreshed from the master weights. Fails
 * only on a device error. */
ts_status ts_optimizer_step(ts_optimizer *opt, ts_model *model, int64_t step, float lr,
                            float grad_scale);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_OPTIM_H */
