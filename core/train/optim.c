/*
 * optim.c — AdamW over the model's flat arrays, the LR schedule, clipping.
 * The moments and master weights are allocated and updated through the
 * model's backend (the CPU or one GPU).
 */
#include "optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

float ts_lr_at(const ts_optim_config *c, int64_t step) {
    if (c->warmup > 0 && step < c->warmup) return c->lr * (float)(step + 1) / (float)c->warmup;
    if (c->decay_steps <= c->warmup) return c->lr;
    double r = (double)(step - c->warmup) / (double)(c->decay_steps - c->warmup);
    if (r < 0.0) r = 0.0;
    if (r > 1.0) r = 1.0;
    double coeff = 0.5 * (1.0 + cos(M_PI * r));
    return (float)(c->min_lr + coeff * (c->lr - c->min_lr));
}

float ts_grad_clip_scale(const ts_optim_config *c, double grad_norm) {
    if (c->grad_clip <= 0.0f || !(grad_norm > c->grad_clip)) return 1.0f;
    return (float)(c->grad_clip / grad_norm);
}

ts_status ts_optimizer_create(const ts_optim_config *cfg, ts_model *model, ts_optimizer **out) {
    return ts_optimizer_create_shard(cfg, model, NULL, out);
}

ts_status ts_optimizer_create_shard(const ts_optim_config *cfg, ts_model *model,
                                    const ts_optim_shard *shard, ts_optimizer **out) {
    *out = NULL;
    if (shard && (shard->begin > shard->end || shard->end > model->numel))
        return ts_error(TS_ERR_INTERNAL, "optimizer: range [%zu, %zu) outside the %zu elements",
                        shard->begin, shard->end, model->numel);
    ts_optimizer *o = calloc(1, sizeof *o);
    if (!o) return ts_error(TS_ERR_NOMEM, "optimizer: out of memory");
    o->cfg = *cfg;
    o->be = model->be;
    o->numel = model->numel;
    o->shard = shard ? *shard : (ts_optim_shard){0, model->numel, NULL, NULL, 0};
    o->shard.offload = o->shard.offload && model->be->kind != TS_DEVICE_CPU;
    o->state_be = o->shard.offload ? ts_backend_cpu() : model->be;
    size_t b = o->shard.begin, n = o->shard.end - b, bytes = (n ? n : 1) * sizeof(float);
    const ts_backend *sb = o->state_be;
    o->m = sb->alloc(TS_MEM_OPTIM, bytes);
    o->v = sb->alloc(TS_MEM_OPTIM, bytes);
    ts_status st = TS_OK;
    if (model->dtype == TS_F32 && !o->shard.offload) {
        o->master = (float *)model->param_data + b;
    } else {
        o->master = sb->alloc(TS_MEM_OPTIM, bytes);
        o->owns_master = 1;
    }
    if (o->shard.offload) {
        o->grad_host = sb->alloc(TS_MEM_OPTIM, bytes);
        if (model->dtype == TS_BF16)
            o->bf16_host = sb->alloc(TS_MEM_OPTIM, (n ? n : 1) * sizeof(uint16_t));
    }
    int ok = o->m && o->v && o->master && (!o->shard.offload || o->grad_host) &&
             (!o->shard.offload || model->dtype != TS_BF16 || o->bf16_host);
    /* The master copy starts as the parameters of the range. */
    if (ok && o->owns_master) {
        if (model->dtype == TS_F32)
            st = o->be->to_host(o->master, (float *)model->param_data + b, n * sizeof(float));
        else if (!o->shard.offload)
            st = o->be->bf16_to_f32(o->master, (uint16_t *)model->param_data + b, n);
        else if (!(st = o->be->to_host(o->bf16_host, (uint16_t *)model->param_data + b,
                                       n * sizeof(uint16_t))))
            st = sb->bf16_to_f32(o->master, o->bf16_host, n);
    }
    if (!ok || st) {
        ts_optimizer_destroy(o);
        return st ? st : TS_ERR_NOMEM;
    }
    *out = o;
    return TS_OK;
}

void ts_optimizer_destroy(ts_optimizer *o) {
    if (!o) return;
    const ts_backend *sb = o->state_be ? o->state_be : o->be;
    sb->free(o->m);
    sb->free(o->v);
    if (o->owns_master) sb->free(o->master);
    sb->free(o->grad_host);
    sb->free(o->bf16_host);
    free(o);
}

ts_status ts_optimizer_step(ts_optimizer *o, ts_model *model, int64_t step, float lr,
                            float grad_scale) {
    const ts_optim_config *c = &o->cfg;
    size_t b = o->shard.begin, e = o->shard.end;
    int bf = model->dtype == TS_BF16, off = o->shard.offload;
    /* Offloaded: the range's gradient comes down, the update runs on the
     * host, the range's parameters go up. */
    float *grad = model->grad_data;
    /* The gradient read where the backward accumulates is zeroed in the same
     * pass, and the next zero_grad skips the range (not the host copy). */
    int zero = !off;
    model->grad_zero_begin = model->grad_zero_end = 0;
    if (off) {
        TS_TRY(o->be->to_host(o->grad_host, model->grad_data + b, (e - b) * sizeof(float)));
        grad = o->grad_host - b;
    }
    /* In bf16 the step also writes the bf16 parameters (one pass). */
    uint16_t *bf16 = !bf ? NULL : off ? o->bf16_host - b : (uint16_t *)model->param_data;
    for (int i = 0; i < model->nparams; i++) {
        const ts_param *p = &model->params[i];
        size_t lo = p->offset, hi = lo + (size_t)ts_tensor_numel(&p->store);
        if (lo < b) lo = b;
        if (hi > e) hi = e;
        if (lo >= hi) continue;
        TS_TRY(o->state_be->adamw(o->master + (lo - b), o->m + (lo - b), o->v + (lo - b),
                                  bf16 ? bf16 + lo : NULL, grad + lo, hi - lo, lr, c->beta1,
                                  c->beta2, c->eps, p->decay ? c->weight_decay : 0.0f,
                                  (int)(step + 1), grad_scale, zero));
    }
    if (off && bf)
        TS_TRY(o->be->from_host((uint16_t *)model->param_data + b, o->bf16_host,
                                (e - b) * sizeof(uint16_t)));
    else if (off)
        TS_TRY(
            o->be->from_host((float *)model->param_data + b, o->master, (e - b) * sizeof(float)));
    if (o->shard.after_step)
        TS_TRY(o->shard.after_step(o->shard.user, model->param_data, model->dtype, model->numel));
    if (zero) model->grad_zero_begin = b, model->grad_zero_end = e;
    return TS_OK;
}
