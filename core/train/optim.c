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
    o->shard = shard ? *shard : (ts_optim_shard){0, model->numel, NULL, NULL};
    size_t n = o->shard.end - o->shard.begin, bytes = (n ? n : 1) * sizeof(float);
    o->m = o->be->alloc(TS_MEM_OPTIM, bytes);
    o->v = o->be->alloc(TS_MEM_OPTIM, bytes);
    ts_status st = TS_OK;
    if (model->dtype == TS_F32) {
        o->master = (float *)model->param_data + o->shard.begin;
    } else {
        o->master = o->be->alloc(TS_MEM_OPTIM, bytes);
        o->owns_master = 1;
        if (o->master)
            st = o->be->bf16_to_f32(o->master, (uint16_t *)model->param_data + o->shard.begin, n);
    }
    if (!o->m || !o->v || !o->master || st) {
        ts_optimizer_destroy(o);
        return st ? st : TS_ERR_NOMEM;
    }
    *out = o;
    return TS_OK;
}

void ts_optimizer_destroy(ts_optimizer *o) {
    if (!o) return;
    o->be->free(o->m);
    o->be->free(o->v);
    if (o->owns_master) o->be->free(o->master);
    free(o);
}

ts_status ts_optimizer_step(ts_optimizer *o, ts_model *model, int64_t step, float lr,
                            float grad_scale) {
    const ts_optim_config *c = &o->cfg;
    size_t b = o->shard.begin, e = o->shard.end;
    /* In bf16 the step also writes the bf16 parameters (one pass). */
    uint16_t *bf16 = model->dtype == TS_BF16 ? model->param_data : NULL;
    for (int i = 0; i < model->nparams; i++) {
        const ts_param *p = &model->params[i];
        size_t lo = p->offset, hi = lo + (size_t)ts_tensor_numel(&p->store);
        if (lo < b) lo = b;
        if (hi > e) hi = e;
        if (lo >= hi) continue;
        TS_TRY(o->be->adamw(o->master + (lo - b), o->m + (lo - b), o->v + (lo - b),
                            bf16 ? bf16 + lo : NULL, model->grad_data + lo, hi - lo, lr, c->beta1,
                            c->beta2, c->eps, p->decay ? c->weight_decay : 0.0f, (int)(step + 1),
                            grad_scale));
    }
    if (o->shard.after_step)
        TS_TRY(o->shard.after_step(o->shard.user, model->param_data, model->dtype, model->numel));
    return TS_OK;
}
