/*
 * executor.c — runs one step's schedule (schedule.h) on the batch the
 * trainer loaded: forward and backward of model chunks, activations and
 * gradients between pipeline stages, the plugins' hooks and module hooks
 * around them, the gradient reductions no plugin provides, the global
 * gradient norm, and the optimizer step.
 *
 * What it does not do: read data, decide the schedule (a plugin's scheduler
 * or the default one), or print (report.c).
 */
#include "trainer_impl.h"
#include "dry_run.h" /* ts_dry_run_set_action: the dry run's clock per action */

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The global L2 norm of the gradients, each element counted once; NaN on
 * every rank when any rank's local loss `loss_sum` is not finite, so that
 * all agree to skip the step. */
static ts_status trainer_grad_norm(ts_trainer *t, double loss_sum, double *norm) {
    ts_model *m = t->model;
    /* One sum per run of owned parameters adjacent in the flat gradient
     * array (usually one run: one reduction and one wait for the device). */
    double local = 0.0;
    for (int p = 0; p < m->nparams;) {
        if (!t->norm_owner[p]) {
            p++;
            continue;
        }
        size_t begin = m->params[p].offset, end = begin;
        while (p < m->nparams && t->norm_owner[p] && m->params[p].offset == end)
            end += (size_t)ts_tensor_numel(&m->params[p++].store_grad);
        /* Only the optimizer's range, when its state is cut. */
        if (begin < t->optim->shard.begin) begin = t->optim->shard.begin;
        if (end > t->optim->shard.end) end = t->optim->shard.end;
        if (begin >= end) continue;
        double s = 0.0;
        TS_TRY(t->be->sumsq(&s, m->grad_data + begin, end - begin));
        local += s;
    }
    int loss_bad = !isfinite(loss_sum);
    if (t->par && t->par->size > 1) {
        /* Two f32 words carry the double exactly enough: hi + lo; the third
         * counts the ranks whose loss is not finite. */
        float mine[3] = {(float)local, (float)(local - (double)(float)local), (float)loss_bad};
        float sum[3];
        TS_TRY(ts_comm_all_reduce(t->par->world, mine, sum, 3, TS_F32, TS_REDUCE_SUM));
        local = (double)sum[0] + (double)sum[1];
        loss_bad = sum[2] != 0.0f;
    }
    *norm = loss_bad ? NAN : sqrt(local);
    return TS_OK;
}

static ts_status trainer_hook(ts_trainer *t, ts_plugin_hook_kind kind, int mb, ts_param *p) {
    if (!t->reg || ts_plugins_num_hooks(t->reg, kind) == 0) return TS_OK;
    t->tstate.step = t->state.step;
    t->tstate.data_cursor = t->state.data_cursor;
    ts_plugin_hook_event ev = {.struct_size = sizeof ev,
                               .kind = kind,
                               .step = t->state.step,
                               .micro_batch = mb,
                               .micro_batches = t->micro_batches,
                               .param = p ? &p->store : NULL,
                               .grad = p ? &p->store_grad : NULL,
                               .state = &t->state,
                               .train_state = &t->tstate,
                               .view = p ? &t->pviews[p - t->model->params] : NULL};
    return ts_plugins_run_hooks(t->reg, &ev);
}

/* Around each module's forward and backward: the plugins' module hooks. */
static ts_status trainer_module_hook(void *user, int module, int kind) {
    ts_trainer *t = user;
    if (!t->reg || ts_plugins_num_module_hooks(t->reg) == 0) return TS_OK;
    t->tstate.step = t->state.step;
    t->tstate.data_cursor = t->state.data_cursor;
    ts_plugin_module_event ev = {.struct_size = sizeof ev,
                                 .kind = (ts_plugin_module_hook_kind)kind,
                                 .step = t->state.step,
                                 .micro_batch = t->cur_mb,
                                 .micro_batches = t->micro_batches,
                                 .module = &t->mviews[module],
                                 .last = kind == TS_MODULE_AFTER_BACKWARD && t->hooks_on,
                                 .train_state = &t->tstate,
                                 .recompute = t->cur_mb >= 0 && t->ctx[t->cur_mb].recompute};
    return ts_plugins_run_module_hooks(t->reg, &ev);
}

/* Runs them: one all-reduce per run of adjacent parameters per axis. */
static ts_status trainer_core_reduce(ts_trainer *t) {
    ts_model *m = t->model;
    for (int a = 0; t->core_reduce && a < m->naxes; a++)
        for (int i = 0; i < m->nparams;) {
            if (!(t->core_reduce[i] >> a & 1u)) {
                i++;
                continue;
            }
            size_t begin = m->params[i].offset, end = begin;
            while (i < m->nparams && (t->core_reduce[i] >> a & 1u) && m->params[i].offset == end)
                end += (size_t)ts_tensor_numel(&m->params[i++].store_grad);
            TS_TRY(ts_comm_all_reduce(m->axes[a].comm, m->grad_data + begin, m->grad_data + begin,
                                      end - begin, TS_F32, TS_REDUCE_SUM));
        }
    return TS_OK;
}

/* The core's own sums of a parameter's gradient (`what`): over an axis
 * that cuts the rows a replicated weight is applied to (a sequence-sliced
 * region) its gradient is partial (SUM_PARTIAL); a tied weight's is summed
 * with its copy on the other pipeline stage (SUM_TIE). */
enum { SUM_PARTIAL = 1, SUM_TIE = 2 };
static ts_status trainer_param_sums(ts_trainer *t, ts_param *p, int what) {
    size_t n = (size_t)ts_tensor_numel(&p->store_grad);
    for (int a = 0; (what & SUM_PARTIAL) && a < t->model->naxes; a++)
        if (p->grad_partial & (1u << a))
            TS_TRY(ts_comm_all_reduce(t->model->axes[a].comm, p->store_grad.data,
                                      p->store_grad.data, n, TS_F32, TS_REDUCE_SUM));
    if ((what & SUM_TIE) && p->tied_split)
        TS_TRY(ts_comm_all_reduce(t->tie_comm, p->store_grad.data, p->store_grad.data, n, TS_F32,
                                  TS_REDUCE_SUM));
    return TS_OK;
}

/* After each module's backward of the step's last micro-batch: the gradients
 * it completed are ready, announced in reverse order of their offsets. */
static ts_status trainer_module_done(void *user, int module) {
    ts_trainer *t = user;
    if (!t->hooks_on) return TS_OK;
    ts_module *mod = t->model->modules[module];
    int idx[16], n = 0;
    for (int k = 0; k < mod->nparams; k++)
        if (t->ready_after[mod->param_index[k]] == module) idx[n++] = mod->param_index[k];
    /* Sort by offset, descending. */
    for (int a = 1; a < n; a++)
        for (int b = a;
             b > 0 && t->model->params[idx[b]].offset > t->model->params[idx[b - 1]].offset; b--) {
            int tmp = idx[b];
            idx[b] = idx[b - 1];
            idx[b - 1] = tmp;
        }
    for (int k = 0; k < n; k++) {
        ts_param *p = &t->model->params[idx[k]];
        /* A parameter stored cut by a plugin is complete only once the
         * plugin has reduced it (by BEFORE_OPTIMIZER): its sums come then. */
        if (!p->provided) {
            TS_TRY(trainer_param_sums(t, p, SUM_PARTIAL));
            /* A tied weight is summed with its copy at the optimizer step,
             * then announced (trainer_optimizer_step). */
            if (p->tied_split) continue;
        }
        TS_TRY(trainer_hook(t, TS_HOOK_GRAD_READY, -1, p));
    }
    return TS_OK;
}

/* Message tags between pipeline stages: direction (activation or gradient),
 * the boundary crossed (the lower virtual stage) and the micro-batch. MPI
 * keeps messages of one tag in order, so the wrap-around is harmless. */
static int trainer_tag(int grad, int boundary, int mb) {
    return ((grad * 64 + boundary % 64) * 256) + mb % 256;
}

/* Activation memory holding `what` (backend.h: ts_backend_tag). */
static void *trainer_acts(ts_trainer *t, size_t bytes, const char *what) {
    ts_backend_tag(what);
    void *p = t->be->alloc(TS_MEM_ACTS, bytes);
    ts_backend_tag(NULL);
    return p;
}

/* Completes a pending send (if any). */
static ts_status trainer_wait(ts_comm_request **req) {
    if (!*req) return TS_OK;
    ts_status st = ts_comm_wait(*req);
    *req = NULL;
    return st;
}

/* Pipeline traffic: in bf16 runs activations and their gradients travel
 * as bf16 (half the bytes): the activations a chunk sends are bf16 values
 * already (every op's output is rounded), so they arrive exact; their
 * gradients are rounded to bf16 on the way, as Megatron-LM's bf16 pipeline
 * sends them. The bf16 copy of a send (`*wire`) lives until its wait. */
static int trainer_wire_bf16(const ts_trainer *t) {
    return t->model->dtype == TS_BF16;
}

static ts_status trainer_send(ts_trainer *t, const float *buf, size_t n, int peer, int tag,
                              ts_comm_request **req, void **wire) {
    if (!trainer_wire_bf16(t))
        return ts_comm_send_start(t->stage_comm, buf, n, TS_F32, peer, tag, req);
    *wire = t->be->alloc(TS_MEM_COMM, n * sizeof(uint16_t));
    if (!*wire) return TS_ERR_NOMEM;
    TS_TRY(t->be->f32_to_bf16(*wire, buf, n));
    return ts_comm_send_start(t->stage_comm, *wire, n, TS_BF16, peer, tag, req);
}

static ts_status trainer_recv(ts_trainer *t, float *buf, size_t n, int peer, int tag) {
    if (!trainer_wire_bf16(t)) return ts_comm_recv(t->stage_comm, buf, n, TS_F32, peer, tag);
    uint16_t *wire = t->be->alloc(TS_MEM_COMM, n * sizeof(uint16_t));
    if (!wire) return TS_ERR_NOMEM;
    ts_status st = ts_comm_recv(t->stage_comm, wire, n, TS_BF16, peer, tag);
    if (!st) st = t->be->bf16_to_f32(buf, wire, n);
    t->be->free(wire);
    return st;
}

/* Frees the gradients whose f32 sends upstream have completed (bf16 sends
 * free theirs at once): only the slots still pending are tested, so a
 * backward costs the sends in flight, not the micro-batches x chunks. */
static ts_status trainer_reap_grads(ts_trainer *t) {
    for (size_t i = 0; i < t->ngrad_pending;) {
        size_t k = t->grad_pending[i];
        int done = !t->grad_req[k]; /* waited for already */
        if (!done) TS_TRY(ts_comm_test(t->grad_req[k], &done));
        if (!done) {
            i++;
            continue;
        }
        if (t->grad_req[k]) {
            t->grad_req[k] = NULL;
            t->be->free(t->grad_out[k]);
            t->grad_out[k] = NULL;
        }
        t->grad_pending[i] = t->grad_pending[--t->ngrad_pending];
    }
    return TS_OK;
}

/* Completes a pending send and frees its bf16 copy. */
static ts_status trainer_wait_wire(ts_trainer *t, ts_comm_request **req, void **wire) {
    ts_status st = trainer_wait(req);
    t->be->free(*wire);
    *wire = NULL;
    return st;
}

/* FORWARD(mb, chunk): the micro-batch's context on its first forward here
 * (and the BEFORE_FORWARD hooks), the chunk's forward from its input (the
 * received activations in `slot`; the tokens on the first chunk), the input
 * released where the chunk keeps its own copy; *loss_sum grows by the loss
 * the chunk computed. */
static ts_status trainer_action_forward(ts_trainer *t, int mb, int chunk, size_t slot,
                                        const int64_t shape[3], int64_t valid, double *loss_sum) {
    ts_model *m = t->model;
    ts_step_ctx *c = &t->ctx[mb];
    ts_status st = TS_OK;
    if (c->B == 0) { /* the micro-batch's first forward on this rank */
        size_t off = (size_t)mb * t->B * t->T_local;
        *c = (ts_step_ctx){.mb = mb,
                           .B = t->B,
                           .T = t->T_local,
                           .pos0 = t->seq0,
                           .positions = t->positions,
                           .micro_batches = t->micro_batches,
                           .batch_comm = t->rows_comm,
                           .tokens = t->tokens_dev + off,
                           .targets = t->targets_dev + off,
                           .targets_host = t->targets + off,
                           .dloss = valid > 0 ? 1.0f / (float)valid : 0.0f,
                           .module_done = trainer_module_done,
                           .module_hook = trainer_module_hook,
                           .module_done_user = t};
        st = trainer_hook(t, TS_HOOK_BEFORE_FORWARD, mb, NULL);
    }
    ts_tensor x;
    ts_tensor_view(&x, "act.in", TS_F32, 3, shape, t->act_in[slot], TS_MEM_ACTS);
    x.device = t->be->kind;
    double before = c->loss_sum;
    if (!st)
        st = ts_model_forward_chunk(m, c, chunk, ts_model_chunk_first(m, chunk) ? NULL : &x,
                                    &t->chunk_out[slot]);
    if (!st && !ts_model_chunk_first(m, chunk)) { /* bf16: the chunk keeps it packed */
        int kept;
        st = ts_model_keep_input(m, c, chunk, &kept);
        if (!st && kept) {
            t->be->free(t->act_in[slot]);
            t->act_in[slot] = NULL;
        }
    }
    *loss_sum += c->loss_sum - before;
    return st;
}

/* BACKWARD or BACKWARD_INPUT of (mb, chunk) in `slot`: from the received
 * gradient (none on the last chunk) into the gradient sent upstream (none
 * on the first), the hooks on when it is the chunk's last backward of the
 * step; its inputs freed, and AFTER_BACKWARD run after a whole one. */
static ts_status trainer_action_backward(ts_trainer *t, const ts_action *a, int index, size_t slot,
                                         const int64_t shape[3], const int *last_backward) {
    ts_model *m = t->model;
    int chunk = a->chunk, mb = a->mb;
    ts_step_ctx *c = &t->ctx[mb];
    ts_status st;
    ts_tensor dy, dx;
    ts_tensor_view(&dy, "grad.in", TS_F32, 3, shape, t->grad_in[slot], TS_MEM_ACTS);
    dy.device = t->be->kind;
    int first = ts_model_chunk_first(m, chunk);
    ts_tensor_view(&dx, "grad.out", TS_F32, 3, shape, t->grad_out[slot], TS_MEM_ACTS);
    dx.device = t->be->kind;
    t->hooks_on = index == last_backward[chunk];
    int whole = a->kind == TS_ACT_BACKWARD;
    st = (whole ? ts_model_backward_chunk : ts_model_backward_input_chunk)(
        m, c, chunk, ts_model_chunk_last(m, chunk) ? NULL : &dy, first ? NULL : &dx);
    t->hooks_on = 0;
    t->be->free(t->grad_in[slot]);
    t->be->free(t->act_in[slot]);
    t->grad_in[slot] = t->act_in[slot] = NULL;
    if (!st && whole) st = trainer_hook(t, TS_HOOK_AFTER_BACKWARD, mb, NULL);
    return st;
}

/* Runs one action of the schedule. */
static ts_status trainer_action(ts_trainer *t, const ts_action *a, int index, int64_t valid,
                                const int *last_backward, double *loss_sum) {
    ts_model *m = t->model;
    int chunk = a->chunk, mb = a->mb;
    size_t slot = mb >= 0 ? (size_t)mb * t->chunks + chunk : 0;
    int vstage = ts_stage_virtual(t->model->stage_order, t->stages, t->stage, chunk);
    int64_t shape[3];
    ts_model_hidden_shape(m, t->B, t->T_local, shape);
    size_t n = (size_t)(shape[0] * shape[1] * shape[2]);
    ts_step_ctx *c = mb >= 0 ? &t->ctx[mb] : NULL;
    t->cur_mb = mb;
    double t0 = now_seconds();
    const char *span = NULL, *cat = TS_TRACE_CAT_COMPUTE;
    ts_status st = TS_OK;
    /* A transfer to this rank itself (a V schedule's turn, from one chunk to
     * the next): the chunk the other virtual stage is, and its slot. */
    int self = a->peer == t->stage;
    int near = a->kind == TS_ACT_SEND_ACT || a->kind == TS_ACT_RECV_GRAD ? vstage + 1 : vstage - 1;
    size_t other = mb >= 0 ? (size_t)mb * t->chunks + (size_t)(near / t->stages) : 0;
    switch (a->kind) {
    case TS_ACT_RECV_ACT:
        if (self) { /* what the SEND left */
            t->act_in[slot] = t->mail_act[slot];
            t->mail_act[slot] = NULL;
            break;
        }
        t->act_in[slot] = trainer_acts(t, n * sizeof(float), "pipeline inputs (f32)");
        if (!t->act_in[slot]) return TS_ERR_NOMEM;
        st = trainer_recv(t, t->act_in[slot], n, a->peer, trainer_tag(0, vstage - 1, mb));
        span = "recv";
        cat = TS_TRACE_CAT_P2P;
        break;
    case TS_ACT_FORWARD:
        st = trainer_action_forward(t, mb, chunk, slot, shape, valid, loss_sum);
        t->compute_s += now_seconds() - t0;
        span = "forward";
        break;
    case TS_ACT_SEND_ACT:
        if (self) { /* a copy the next chunk's RECV takes, as a receive would make it */
            t->mail_act[other] = trainer_acts(t, n * sizeof(float), "pipeline inputs (f32)");
            if (!t->mail_act[other]) return TS_ERR_NOMEM;
            st = t->be->copy(t->mail_act[other], t->chunk_out[slot].data, n * sizeof(float));
        } else {
            st = trainer_send(t, t->chunk_out[slot].data, n, a->peer, trainer_tag(0, vstage, mb),
                              &t->act_req[slot], &t->act_wire[slot]);
        }
        /* A bf16 send travels from its own copy (a local one is a copy
         * too): the chunk's state packs. */
        if (!st && (self || trainer_wire_bf16(t))) st = ts_model_output_sent(m, mb, chunk);
        span = "send";
        cat = TS_TRACE_CAT_P2P;
        break;
    case TS_ACT_RECV_GRAD:
        if (self) {
            t->grad_in[slot] = t->mail_grad[slot];
            t->mail_grad[slot] = NULL;
            break;
        }
        t->grad_in[slot] = trainer_acts(t, n * sizeof(float), "pipeline gradients (f32)");
        if (!t->grad_in[slot]) return TS_ERR_NOMEM;
        st = trainer_recv(t, t->grad_in[slot], n, a->peer, trainer_tag(1, vstage, mb));
        span = "recv";
        cat = TS_TRACE_CAT_P2P;
        break;
    case TS_ACT_BACKWARD:
    case TS_ACT_BACKWARD_INPUT: {
        /* The chunk's output is freed by its backward: its send must be done. */
        TS_TRY(trainer_wait_wire(t, &t->act_req[slot], &t->act_wire[slot]));
        if (!ts_model_chunk_first(m, chunk)) {
            TS_TRY(trainer_reap_grads(t));
            t->grad_out[slot] = trainer_acts(t, n * sizeof(float), "pipeline gradients (f32)");
            if (!t->grad_out[slot]) return TS_ERR_NOMEM;
        }
        st = trainer_action_backward(t, a, index, slot, shape, last_backward);
        t->compute_s += now_seconds() - t0;
        span = a->kind == TS_ACT_BACKWARD ? "backward" : "backward_input";
        break;
    }
    case TS_ACT_BACKWARD_WEIGHT:
        /* The deferred weight gradients; the gradients complete only now. */
        t->hooks_on = index == last_backward[chunk];
        st = ts_model_backward_weight_chunk(m, c, chunk);
        t->hooks_on = 0;
        if (!st) st = trainer_hook(t, TS_HOOK_AFTER_BACKWARD, mb, NULL);
        t->compute_s += now_seconds() - t0;
        span = "backward_weight";
        break;
    case TS_ACT_SEND_GRAD:
        if (self) { /* handed over, rounded as the wire would round it */
            t->mail_grad[other] = t->grad_out[slot];
            t->grad_out[slot] = NULL;
            if (trainer_wire_bf16(t)) st = t->be->round_bf16(t->mail_grad[other], n);
            break;
        }
        st = trainer_send(t, t->grad_out[slot], n, a->peer, trainer_tag(1, vstage - 1, mb),
                          &t->grad_req[slot], &t->grad_wire[slot]);
        if (!st && trainer_wire_bf16(t)) { /* it travels from its bf16 copy */
            t->be->free(t->grad_out[slot]);
            t->grad_out[slot] = NULL;
        } else if (!st && t->grad_req[slot] &&
                   t->ngrad_pending < (size_t)t->micro_batches * t->chunks) {
            t->grad_pending[t->ngrad_pending++] = slot; /* freed when the send is done */
        }
        span = "send";
        cat = TS_TRACE_CAT_P2P;
        break;
    case TS_ACT_OPTIMIZER_STEP: return TS_OK; /* run by the caller */
    }
    if (span) {
        double t1 = now_seconds();
        ts_trace_span(t->trace, span, cat, t0, t1, mb, t->stage, chunk);
    }
    return st;
}

/* The optimizer step: finishes the plugins' gradient reductions, ties the
 * two copies of wte across the first and last pipeline stage, clips by the
 * global norm and updates. When the norm or any rank's loss (`loss_sum`,
 * this rank's part) is not finite, every rank skips the update (*skipped =
 * 1): the parameters and moments stay as they were, and the plugins'
 * after-optimizer hooks do not run. */
static ts_status trainer_optimizer_step(ts_trainer *t, double loss_sum, double *norm, float *lr,
                                        int *skipped) {
    ts_model *m = t->model;
    double t0 = now_seconds();
    /* Tied weights: this rank's gradient is complete now; summed with the
     * copy's, it is announced like the others. */
    for (int i = 0; i < m->nparams; i++) {
        ts_param *p = &m->params[i];
        if (!p->tied_split || p->provided) continue;
        TS_TRY(trainer_param_sums(t, p, SUM_TIE));
        TS_TRY(trainer_hook(t, TS_HOOK_GRAD_READY, -1, p));
    }
    TS_TRY(trainer_hook(t, TS_HOOK_BEFORE_OPTIMIZER, -1, NULL));
    /* Parameters stored cut: the plugin has reduced them; now the core's
     * own sums. */
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].provided)
            TS_TRY(trainer_param_sums(t, &m->params[i], SUM_PARTIAL | SUM_TIE));
    TS_TRY(trainer_core_reduce(t));
    double t1 = now_seconds();
    ts_trace_span(t->trace, "grad_sync", TS_TRACE_CAT_COLLECTIVE, t0, t1, -1, t->stage, -1);
    TS_TRY(trainer_grad_norm(t, loss_sum, norm));
    *lr = ts_lr_at(&t->optim->cfg, t->state.step);
    *skipped = !isfinite(*norm);
    if (*skipped) return TS_OK;
    float scale = ts_grad_clip_scale(&t->optim->cfg, *norm);
    TS_TRY(ts_optimizer_step(t->optim, m, t->state.step, *lr, scale));
    TS_TRY(trainer_hook(t, TS_HOOK_AFTER_OPTIMIZER, -1, NULL));
    ts_trace_span(t->trace, "optimizer_step", TS_TRACE_CAT_COMPUTE, t1, now_seconds(), -1, t->stage,
                  -1);
    return TS_OK;
}

/* The step's schedule, action by action; the optimizer step is an action
 * too (after every gradient sent upstream has left). */
ts_status trainer_execute(ts_trainer *t, int64_t valid, double *loss_sum, double *norm, float *lr,
                          int *skipped) {
    memset(t->ctx, 0, (size_t)t->micro_batches * sizeof *t->ctx);
    t->compute_s = 0.0;
    /* A chunk's gradients are complete after its last backward (its weight
     * part, when the backward is split). */
    int last_backward[t->chunks];
    for (int k = 0; k < t->chunks; k++)
        last_backward[k] = -1;
    for (int i = 0; i < t->schedule.nactions; i++)
        if (t->schedule.actions[i].kind == TS_ACT_BACKWARD ||
            t->schedule.actions[i].kind == TS_ACT_BACKWARD_WEIGHT)
            last_backward[t->schedule.actions[i].chunk] = i;
    for (int i = 0; i < t->schedule.nactions; i++) {
        const ts_action *a = &t->schedule.actions[i];
        if (a->kind != TS_ACT_OPTIMIZER_STEP) {
            int was = t->dry ? ts_dry_run_set_action(t->dry, (int)a->kind) : -1;
            ts_status st = trainer_action(t, a, i, valid, last_backward, loss_sum);
            if (t->dry) ts_dry_run_set_action(t->dry, was);
            TS_TRY(st);
            continue;
        }
        size_t slots = (size_t)t->micro_batches * t->chunks;
        for (size_t k = 0; k < slots; k++) {
            TS_TRY(trainer_wait_wire(t, &t->grad_req[k], &t->grad_wire[k]));
            t->be->free(t->grad_out[k]);
            t->grad_out[k] = NULL;
        }
        t->ngrad_pending = 0;
        TS_TRY(trainer_optimizer_step(t, *loss_sum, norm, lr, skipped));
    }
    return TS_OK;
}

/* A forward-only pass of the loaded batch: the step's schedule without its
 * backward, gradient and optimizer actions (each rank's forwards keep their
 * order, so the pipeline cannot deadlock: activations only flow
 * downstream). A chunk's saved state is freed once its output has left (or
 * its loss is counted). *loss_sum: this rank's summed loss. No gradient is
 * touched and no hook of the backward or the optimizer runs. */
ts_status trainer_execute_forward(ts_trainer *t, double *loss_sum) {
    memset(t->ctx, 0, (size_t)t->micro_batches * sizeof *t->ctx);
    t->compute_s = 0.0;
    int none[t->chunks];
    for (int k = 0; k < t->chunks; k++)
        none[k] = -1;
    for (int i = 0; i < t->schedule.nactions; i++) {
        const ts_action *a = &t->schedule.actions[i];
        if (a->kind != TS_ACT_FORWARD && a->kind != TS_ACT_RECV_ACT && a->kind != TS_ACT_SEND_ACT)
            continue;
        TS_TRY(trainer_action(t, a, i, 0, none, loss_sum));
        size_t slot = (size_t)a->mb * t->chunks + a->chunk;
        int sends = !ts_model_chunk_last(t->model, a->chunk);
        if (a->kind == TS_ACT_SEND_ACT)
            TS_TRY(trainer_wait_wire(t, &t->act_req[slot], &t->act_wire[slot]));
        if ((a->kind == TS_ACT_FORWARD && !sends) || a->kind == TS_ACT_SEND_ACT) {
            ts_model_release_chunk(t->model, a->mb, a->chunk);
            t->be->free(t->act_in[slot]);
            t->act_in[slot] = NULL;
        }
    }
    return TS_OK;
}
