/*
 * train.c — the trainer (train.h): configuration to model, data, optimizer
 * and schedule, the batch of each step, and the step itself, which hands the
 * schedule to the executor (executor.c). The training state's files are
 * state_io.c's, progress lines and metrics report.c's (trainer_impl.h).
 *
 * What the plan decided is read from the binding (binder.h); the shape
 * from the configuration is shape.c's, the set-up of the run (device,
 * data, schedule, buffers, resume) and the teardown trainer_setup.c's.
 *
 * A step reads the global batch as consecutive data windows starting at the
 * data cursor, splits it into micro-batches, and runs the schedule; the loss
 * is normalised by the number of valid target tokens of the whole global
 * batch, so accumulation over micro-batches gives the same gradient as one
 * large batch.
 *
 * Devices ([train] device): the model and optimizer live on the backend's
 * device (backend.h). The host reads the batch and counts its valid targets,
 * then uploads tokens and targets once per step; checkpoints, exports and
 * llm.c weights pass through host buffers (to_host before writing,
 * from_host after reading). device = cuda drives one GPU per rank; with
 * several ranks the model's tensors (the layers' collectives, pipeline
 * sends, the plugins' gradient reductions, the tied embedding) travel over
 * the NCCL communicators of parallel.h and the host's scalars over MPI.
 */
#include "trainer_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "backend_plan.h"
#include "binder.h"
#include "tessera/device.h"

ts_status trainer_key_error(const ts_config *cfg, const char *section, const char *key,
                            const char *fmt, ...) {
    char where[512], msg[1024];
    ts_config_where(cfg, section, key, where, sizeof where);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ts_error(TS_ERR_CONFIG, "%s: %s", where, msg);
}

/* How the batch is cut, as the binding has it (docs/binder.md): this rank's
 * block of sequences, and the communicator of the loss group. */
static ts_status trainer_batch_split(ts_trainer *t) {
    t->parts = 1;
    t->part = 0;
    t->batch_comm = NULL;
    if (!t->par) return TS_OK;
    t->parts = t->binding.parts;
    t->part = t->binding.part;
    const char *token = t->binding.loss_group;
    if (!token[0]) return TS_OK;
    /* Every rank has the same plan, so every rank adds the same group. */
    TS_TRY(ts_parallel_add_group(t->par, token));
    t->batch_comm = ts_parallel_comm(t->par, token);
    if (!t->batch_comm)
        return ts_error(TS_ERR_PLUGIN,
                        "data.tokens is cut over %s, a combination of axes with no communicator "
                        "(the loss could not be summed over it)",
                        token);
    return TS_OK;
}

/* The position of each of this rank's T_local tokens of every sequence, by
 * the binding's rule (ts_binding_positions). */
static ts_status trainer_positions(ts_trainer *t) {
    const ts_binding *b = &t->binding;
    free(t->positions);
    t->positions = malloc((size_t)(t->T_local > 0 ? t->T_local : 1) * sizeof *t->positions);
    if (!t->positions) return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    if (b->mirror >= 0 && b->sequence_cuts != 1)
        return ts_error(TS_ERR_PLUGIN,
                        "data.tokens is cut along the sequence over %d axes; mirrored chunks "
                        "(the provider of attention over %s) need it cut over that axis alone",
                        b->sequence_cuts, b->axes[b->mirror].name);
    ts_binding_positions(b, t->positions);
    return TS_OK;
}

/* 1 when some parameter of the plan is cut over axis `name`. */
static int trainer_axis_cuts_params(ts_layout_plan *plan, const char *name) {
    for (int e = 0; e < plan->count; e++) {
        const ts_layout_plan_entry *en = &plan->entries[e];
        int k = ts_layout_axis_index(&en->layout, name);
        if (en->kind == TS_PLAN_PARAM && k >= 0 && en->layout.axes[k].size > 1 &&
            en->layout.axes[k].placement.kind == TS_PLACEMENT_SHARD)
            return 1;
    }
    return 0;
}

/* The mixture-of-experts layers' routing: the axis their experts are cut
 * over (dimension 0 of every expert weight), the dispatcher the plugin
 * providing experts there chose, and this rank's experts. Experts cut
 * nowhere are all on this rank and the layers route by themselves. */
static ts_status trainer_moe_routing(ts_trainer *t) {
    ts_model *m = t->model;
    if (m->cfg.experts <= 0) return TS_OK;
    /* The ranks holding the other rows of a micro-batch (the binding's). */
    const ts_binding *b = &t->binding;
    const char *rows = b->rows_group;
    t->rows_comm = rows[0] ? ts_parallel_comm(t->par, rows) : NULL;
    if (rows[0] && !t->rows_comm)
        return ts_error(TS_ERR_PLUGIN,
                        "the mixture of experts counts tokens over %s, a combination of axes with "
                        "no communicator",
                        rows);
    const ts_param *ref = NULL;
    int axis = -1, tp = -1;
    for (int i = 0; i < m->nparams; i++) {
        const ts_param *p = &m->params[i];
        for (int a = 0; p->expert && a < m->naxes; a++) {
            if (p->on[a].kind != TS_PLACEMENT_SHARD) continue;
            /* By experts over the routing axis, by the hidden layer over
             * the experts' tensor-parallel axis. */
            int *which = p->on[a].dim == 0 ? &axis : &tp;
            if (*which >= 0 && *which != a)
                return ts_error(TS_ERR_PLUGIN,
                                "%s is cut over %s and %s along dimension %d; an expert's weights "
                                "are cut by experts (dimension 0) over one axis and by their "
                                "hidden layer over one other",
                                p->value.name, m->axes[*which].name, m->axes[a].name, p->on[a].dim);
            *which = a;
            if (p->on[a].dim == 0) ref = p;
        }
    }
    if (axis < 0 && tp >= 0)
        return ts_error(TS_ERR_PLUGIN,
                        "the experts' hidden layer is cut over %s, but the experts are not cut "
                        "over an axis that routes tokens to them",
                        m->axes[tp].name);
    if (axis < 0) return TS_OK;
    const ts_model_axis *ax = &m->axes[axis];
    /* Routed, an expert's gradient gathers every token sent to it; copies
     * of it on other ranks are summed over the expert mesh's data axis (by
     * its gradient reduction), not over the dense mesh's axes. Ranks that
     * hold the same rows would send them twice. */
    for (int a = 0; a < m->naxes; a++) {
        int k = ts_binding_find(b, m->axes[a].name);
        if (a != axis && a != tp && k >= 0 && !b->axes[k].cuts_batch && !b->axes[k].cuts_rows)
            return ts_error(TS_ERR_CONFIG,
                            "the experts are routed over %s, and the %s ranks hold the same "
                            "rows of the hidden state: each would send its tokens to the experts "
                            "again. Cut the hidden state along the sequence over %s (sequence "
                            "parallelism; Megatron-LM requires it with experts too)",
                            ax->name, m->axes[a].name, m->axes[a].name);
    }
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].expert) m->params[i].grad_partial = 0;
    if (m->cfg.experts % ax->size != 0)
        return trainer_key_error(t->cfg, "model", "experts",
                                 "experts = %d is not divisible by %s = %d (the experts are cut "
                                 "over it)",
                                 m->cfg.experts, ax->name, ax->size);
    int k = ts_binding_find(b, ax->name);
    const char *name = k >= 0 ? b->axes[k].dispatcher : NULL;
    if (!name)
        return ts_error(TS_ERR_PLUGIN,
                        "the experts are cut over %s, and no plugin routes the tokens to them "
                        "there (host->register_experts)",
                        ax->name);
    const ts_plugin_dispatcher_entry *d = ts_plugins_dispatcher(t->reg, name);
    if (!d)
        return ts_error(TS_ERR_CONFIG, "plugin '%s' routes the experts over %s with %s",
                        b->axes[k].experts, ax->name, ts_last_error_bare());
    m->moe = (ts_moe_routing){.ops = &d->ops,
                              .ctx = d->ctx,
                              .user = d->user,
                              .name = d->name,
                              .comm = ax->comm,
                              .host = ax->host,
                              .first_expert = (int)ref->block_offset[0],
                              .local_experts = (int)ref->value.shape[0],
                              .tp_ranks = 1};
    if (tp >= 0) {
        m->moe.tp = m->axes[tp].comm;
        m->moe.tp_host = m->axes[tp].host;
        m->moe.tp_ranks = m->axes[tp].size;
        m->moe.tp_rank = m->axes[tp].coord;
    }
    return TS_OK;
}

/* The mesh axes that may cut the model's tensors, read from the plan: every
 * axis of size > 1 except the pipeline's (stages come from the plan's
 * stage fields), with this rank's coordinate and communicators, and whether
 * it cuts the batch (data.tokens sharded over it). What each placement
 * implies is the model's layers' business. */
static ts_status trainer_model_axes(ts_trainer *t, ts_model_shard *shard) {
    memset(shard, 0, sizeof *shard);
    shard->plan = &t->plan;
    const ts_layout_plan_entry *data = ts_layout_plan_find(&t->plan, "data.tokens");
    if (!data) return ts_error(TS_ERR_INTERNAL, "trainer: the plan has no data.tokens");
    const ts_mesh *mesh = t->par->mesh;
    for (int a = 0; a < ts_mesh_num_axes(mesh); a++) {
        int size = ts_mesh_axis_size_at(mesh, a);
        if (ts_mesh_axis_is_pipeline(mesh, a) || size <= 1) continue;
        const char *name = ts_mesh_axis_at(mesh, a);
        int i = ts_layout_axis_index(&data->layout, name);
        /* An axis of the other mesh counts where it cuts parameters (the
         * experts' weights over the expert mesh). */
        if (i < 0 && !trainer_axis_cuts_params(&t->plan, name)) continue;
        if (shard->naxes == TS_MODEL_MAX_AXES)
            return ts_error(TS_ERR_INTERNAL, "trainer: more than %d cutting axes",
                            TS_MODEL_MAX_AXES);
        ts_model_axis *ax = &shard->axes[shard->naxes++];
        snprintf(ax->name, sizeof ax->name, "%s", name);
        ax->size = size;
        ax->coord = ts_parallel_coord(t->par, name);
        ax->cuts_batch = i >= 0 && data->layout.axes[i].placement.kind == TS_PLACEMENT_SHARD;
        ax->cuts_sequence = ax->cuts_batch && data->layout.axes[i].placement.dim == 1;
        if (ax->cuts_sequence) {
            if (t->T % size != 0)
                return trainer_key_error(
                    t->cfg, "train", "seq_len",
                    "seq_len = %d is not divisible by %s = %d (data.tokens is cut "
                    "along the sequence over it)",
                    t->T, name, size);
            const ts_plugin_attention_ops *ops = NULL;
            if (!ts_plugins_attention(t->reg, name, &ops, &ax->attention_ctx, &ax->attention_user))
                return ts_error(TS_ERR_PLUGIN,
                                "data.tokens is cut along the sequence over %s, and no plugin "
                                "provides attention over it",
                                name);
            ax->attention = ops;
            ax->attention_plugin = ts_plugins_provider(t->reg, TS_PROVIDE_ATTENTION, name);
            if (ops->order == TS_SEQUENCE_MIRRORED && t->T % (2 * size) != 0)
                return trainer_key_error(
                    t->cfg, "train", "seq_len",
                    "seq_len = %d is not divisible by 2 x %s = %d (plugin '%s' holds mirrored "
                    "chunks of every sequence: 2 x %d chunks of equal length)",
                    t->T, name, 2 * size, ts_plugins_provider(t->reg, TS_PROVIDE_ATTENTION, name),
                    size);
        }
        ax->comm = ts_parallel_data_comm(t->par, name);
        ax->host = ts_parallel_comm(t->par, name);
    }
    const char *pipe = ts_mesh_pipeline_axis(mesh);
    shard->stages = pipe ? ts_mesh_size(mesh, pipe) : 1;
    shard->stage = pipe ? ts_parallel_coord(t->par, pipe) : 0;
    shard->stage_order = ts_plugins_stage_order(t->reg);
    /* This rank's tokens of each sequence (the binding's). */
    t->seq0 = t->binding.seq0;
    t->T_local = t->binding.seq_local;
    TS_TRY(trainer_positions(t));
    /* A hidden state cut along the sequence by an axis that reads the same
     * tokens (sequence parallelism) must cut this rank's rows evenly. */
    const ts_layout_plan_entry *act = ts_layout_plan_find(&t->plan, "act.x");
    for (int a = 0; a < shard->naxes; a++) {
        const ts_model_axis *ax = &shard->axes[a];
        int k = act ? ts_layout_axis_index(&act->layout, ax->name) : -1;
        if (!ax->cuts_batch && k >= 0 && act->layout.axes[k].placement.kind == TS_PLACEMENT_SHARD &&
            act->layout.axes[k].placement.dim == 1 && t->T_local % ax->size != 0)
            return trainer_key_error(t->cfg, "train", "seq_len",
                                     "seq_len = %d leaves %d tokens of every sequence on this "
                                     "rank, not divisible by %s = %d (act.x is cut along the "
                                     "sequence over it)",
                                     t->T, t->T_local, ax->name, ax->size);
    }
    for (int a = 0; a < shard->naxes; a++)
        if (ts_plugins_provider(t->reg, TS_PROVIDE_PARAM_STORAGE, shard->axes[a].name))
            shard->provided_axes |= 1u << a;
    return TS_OK;
}

/* The pipeline as the model built it: this rank's stage and chunks, and the
 * pipeline group's communicators. */
static void trainer_pipeline(ts_trainer *t) {
    t->stages = t->model->stages;
    t->chunks = t->model->chunks;
    const char *pipe = t->par ? ts_mesh_pipeline_axis(t->par->mesh) : NULL;
    t->stage = pipe ? ts_parallel_coord(t->par, pipe) : 0;
    if (pipe && t->stages > 1) {
        t->stage_comm = ts_parallel_data_comm(t->par, pipe);
        t->stage_host = ts_parallel_comm(t->par, pipe);
    }
}

/* after_step of the optimizer's shard: the provider's. */
static ts_status trainer_optim_after_step(void *user, void *params, ts_dtype dtype, size_t numel) {
    ts_trainer *t = user;
    ts_error(TS_OK, "%s", "");
    ts_status st = t->opt_ops->after_step(t->opt_ctx, params, dtype, numel, t->opt_user);
    if (st)
        return ts_error(st, "plugin '%s': optimizer state over %s: after_step: %s", t->opt_plugin,
                        t->model->axes[t->opt_axis].name, ts_last_error_bare());
    return TS_OK;
}

/* The optimizer's range when a plugin provides optimizer state over an axis
 * that cuts the model's tensors (at most one): its partition gives this
 * rank's range; the ranges of the axis group, gathered, must tile the flat
 * buffers in rank order (every element updated by exactly one rank, as the
 * gather after each step expects). Every rank checks every range, so all
 * fail alike. */
static ts_status trainer_optim_shard(ts_trainer *t, ts_optim_shard *sh) {
    ts_model *m = t->model;
    *sh = (ts_optim_shard){0, m->numel, NULL, NULL, 0};
    t->opt_axis = -1;
    const ts_binding *bd = &t->binding;
    if (bd->optim_axis < 0) return TS_OK;
    const ts_binding_axis *x = &bd->axes[bd->optim_axis];
    for (int a = 0; a < m->naxes; a++)
        if (strcmp(m->axes[a].name, x->name) == 0) t->opt_axis = a;
    if (t->opt_axis < 0 ||
        !ts_plugins_optimizer_state(t->reg, x->name, &t->opt_ops, &t->opt_ctx, &t->opt_user))
        return ts_error(TS_ERR_INTERNAL,
                        "trainer: the optimizer state's axis %s is not the model's", x->name);
    t->opt_plugin = x->optimizer_state;
    const ts_model_axis *ax = &m->axes[t->opt_axis];
    size_t b = 0, e = 0;
    char why[512] = "";
    ts_error(TS_OK, "%s", "");
    if (t->opt_ops->partition(t->opt_ctx, m->numel, &b, &e, t->opt_user) != TS_OK)
        snprintf(why, sizeof why, "%s", ts_last_error_bare());
    else if ((t->opt_ops->flags & TS_OPTIMIZER_STATE_OFFLOAD) && t->be->kind == TS_DEVICE_CPU)
        snprintf(why, sizeof why,
                 "it keeps the optimizer state in host memory (offload), and the model trains "
                 "there already ([train] device = cpu): nothing to offload");
    /* Status, range and buffer size of every rank: {failed, begin, end,
     * numel}, the sizes as two 32-bit words each. */
    enum { W = 7 };
    int R = ax->size;
    size_t n = m->numel;
    int32_t mine[W] = {why[0] != 0,
                       (int32_t)(uint32_t)b,
                       (int32_t)(uint32_t)(b >> 32),
                       (int32_t)(uint32_t)e,
                       (int32_t)(uint32_t)(e >> 32),
                       (int32_t)(uint32_t)n,
                       (int32_t)(uint32_t)(n >> 32)};
    int32_t *all = malloc((size_t)R * sizeof mine);
    t->opt_counts = malloc((size_t)R * sizeof *t->opt_counts);
    if (!all || !t->opt_counts) {
        free(all);
        return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    }
    /* A dry run's group moves nothing: its ranges cannot be compared. */
    ts_status st = t->plan_only ? TS_OK : ts_comm_all_gather(ax->host, mine, all, W, TS_I32);
    for (int r = 0; t->plan_only && r < R; r++)
        memcpy(all + W * r, mine, sizeof mine);
#define WORD64(w, k) ((size_t)(uint32_t)(w)[k] | (size_t)(uint32_t)(w)[(k) + 1] << 32)
    /* Either every rank keeps its whole buffer (nothing cut), or the ranges
     * tile the buffer, the same size on every rank, in rank order. */
    int whole = 1;
    for (int r = 0; r < R; r++) {
        const int32_t *w = all + W * r;
        whole &= WORD64(w, 1) == 0 && WORD64(w, 3) == WORD64(w, 5);
    }
    size_t prev = 0;
    for (int r = 0; r < R && !st; r++) {
        const int32_t *w = all + W * r;
        size_t rb = WORD64(w, 1), re = WORD64(w, 3), rn = WORD64(w, 5);
        if (w[0])
            st = ts_error(TS_ERR_PLUGIN,
                          "plugin '%s': optimizer state over %s: partition failed on rank %d of "
                          "the group%s%s",
                          t->opt_plugin, ax->name, r, why[0] ? ": " : "", why);
        else if (!whole && !t->plan_only &&
                 (rn != n || rb != prev || re < rb || re > n || (r == R - 1 && re != n)))
            st = ts_error(TS_ERR_PLUGIN,
                          "plugin '%s': optimizer state over %s: rank %d of the group keeps "
                          "[%zu, %zu) of the %zu elements; the ranges must tile [0, %zu) in rank "
                          "order (the previous one ends at %zu)",
                          t->opt_plugin, ax->name, r, rb, re, rn, n, prev);
        t->opt_counts[r] = re - rb;
        prev = re;
    }
#undef WORD64
    free(all);
    t->opt_cut = !whole;
    *sh = (ts_optim_shard){b, e, trainer_optim_after_step, t,
                           (t->opt_ops->flags & TS_OPTIMIZER_STATE_OFFLOAD) != 0};
    return st;
}

/* Which module's backward completes each parameter's gradient: the first
 * module (in model order) that reads it, since backward runs in reverse. */
static ts_status trainer_ready_after(ts_trainer *t) {
    ts_model *m = t->model;
    t->ready_after = malloc((size_t)m->nparams * sizeof *t->ready_after);
    if (!t->ready_after) return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    for (int p = 0; p < m->nparams; p++)
        t->ready_after[p] = -1;
    for (int i = m->nmodules - 1; i >= 0; i--)
        for (int k = 0; m->modules[i] && k < m->modules[i]->nparams; k++)
            t->ready_after[m->modules[i]->param_index[k]] = i;
    return TS_OK;
}

/* Who counts each parameter in the global gradient norm: a rank holding a
 * shard counts it; among ranks holding the same replica (placement R on an
 * axis of size > 1) only coordinate 0 does, except over the axis that cuts
 * the optimizer state, where each rank counts its own range of the flat
 * buffers (the gradient need only be reduced there). Summed over the
 * world, every element of every parameter is then counted exactly once. */
static ts_status trainer_norm_owners(ts_trainer *t) {
    ts_model *m = t->model;
    t->norm_owner = malloc((size_t)m->nparams);
    if (!t->norm_owner) return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    for (int p = 0; p < m->nparams; p++) {
        /* The LM head's copy of wte equals the embedding's: count one. */
        t->norm_owner[p] = !m->params[p].tied_copy;
        if (!t->par) continue;
        const ts_layout_plan_entry *e = ts_layout_plan_find(&t->plan, m->params[p].value.name);
        if (!e)
            return ts_error(TS_ERR_INTERNAL, "trainer: %s is not in the layout plan",
                            m->params[p].value.name);
        /* The optimizer state cut over an axis: each rank counts the range
         * it updates there (trainer_grad_norm). */
        if (!ts_binding_norm_owner(&t->binding, e, t->opt_cut)) t->norm_owner[p] = 0;
    }
    return TS_OK;
}

/* The views plugins read (ABI 1.1): every parameter of this rank with its
 * plan entry's layout, every module, the model and the training state. */
static ts_status trainer_views(ts_trainer *t) {
    ts_model *m = t->model;
    int total = m->nparams;
    for (int i = 0; i < m->nmodules; i++)
        total += m->modules[i] ? m->modules[i]->nparams : 0;
    t->pviews = calloc((size_t)(m->nparams ? m->nparams : 1), sizeof *t->pviews);
    t->pview_ptrs = calloc((size_t)(total ? total : 1), sizeof *t->pview_ptrs);
    t->mviews = calloc(m->nmodules > 0 ? (size_t)m->nmodules : 1, sizeof *t->mviews);
    if (!t->pviews || !t->pview_ptrs || !t->mviews)
        return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    for (int i = 0; i < m->nparams; i++) {
        ts_param *p = &m->params[i];
        ts_plugin_param *v = &t->pviews[i];
        const ts_layout_plan_entry *e = ts_layout_plan_find(&t->plan, p->value.name);
        *v = (ts_plugin_param){.struct_size = sizeof *v,
                               .name = p->value.name,
                               .layout = e ? &e->layout : NULL,
                               .store = &p->store,
                               .store_grad = &p->store_grad,
                               .offset = p->offset,
                               .use = &p->value,
                               .use_grad = &p->grad,
                               .tied_copy = p->tied_copy};
        /* The provided bits in the layout's axis order. */
        for (int a = 0; e && a < m->naxes; a++)
            if (p->provided >> a & 1u) {
                int k = ts_layout_axis_index(&e->layout, m->axes[a].name);
                if (k >= 0) v->provided |= 1u << k;
            }
        t->pview_ptrs[i] = v;
    }
    int next = m->nparams;
    for (int i = 0; i < m->nmodules; i++) {
        ts_module *mod = m->modules[i];
        ts_plugin_module *mv = &t->mviews[i];
        *mv = (ts_plugin_module){.struct_size = sizeof *mv, .index = i, .here = mod != NULL};
        mv->name = mod ? mod->name : "";
        if (!mod) continue;
        mv->nparams = mod->nparams;
        mv->params = t->pview_ptrs + next;
        for (int k = 0; k < mod->nparams; k++)
            t->pview_ptrs[next++] = &t->pviews[mod->param_index[k]];
    }
    t->mview = (ts_plugin_model){.struct_size = sizeof t->mview,
                                 .nmodules = m->nmodules,
                                 .modules = t->mviews,
                                 .nparams = m->nparams,
                                 .params = t->pview_ptrs,
                                 .numel = m->numel,
                                 .dtype = m->dtype,
                                 .device = m->be->kind};
    t->tstate = (ts_plugin_train_state){
        .struct_size = sizeof t->tstate, .seed = t->state.seed, .model = &t->mview};
    if (t->reg) ts_plugins_set_model(t->reg, &t->mview);
    return TS_OK;
}

/* The gradient reductions nobody provides: over an axis that cuts the batch
 * with no plugin providing its gradient reduction, the core sums the
 * gradient of every parameter replicated there (placement R, not provided
 * whole by a plugin), before the optimizer. */
static ts_status trainer_core_reductions(ts_trainer *t) {
    ts_model *m = t->model;
    t->core_reduce = calloc((size_t)(m->nparams ? m->nparams : 1), sizeof *t->core_reduce);
    if (!t->core_reduce) return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    for (int a = 0; a < m->naxes; a++) {
        int k = ts_binding_find(&t->binding, m->axes[a].name);
        if (k < 0 || !t->binding.axes[k].cuts_batch || t->binding.axes[k].grad_reducer) continue;
        for (int i = 0; i < m->nparams; i++)
            if (m->params[i].on[a].kind == TS_PLACEMENT_REPLICATE &&
                !(m->params[i].provided >> a & 1u))
                t->core_reduce[i] |= 1u << a;
    }
    return TS_OK;
}

ts_status trainer_key_error_last(const ts_config *cfg, const char *section, const char *key,
                                 ts_status code) {
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", ts_last_error_bare());
    ts_status st = trainer_key_error(cfg, section, key, "%s", msg);
    return code ? code : st;
}

static ts_status trainer_create(const ts_config *cfg, ts_parallel *par, ts_plugins *reg, int plan,
                                ts_trainer **out);

ts_status ts_trainer_create(const ts_config *cfg, ts_parallel *par, ts_plugins *reg,
                            ts_trainer **out) {
    return trainer_create(cfg, par, reg, 0, out);
}

ts_status ts_trainer_create_plan(const ts_config *cfg, ts_parallel *par, ts_plugins *reg,
                                 ts_trainer **out) {
    return trainer_create(cfg, par, reg, 1, out);
}

/* The model as the plan cuts it: the layout plan and the plugins'
 * transforms, the binding (binder.h), the batch's split and the axes the
 * layers see; then the model, its pipeline, expert routing and
 * recomputation, and the per-stage statistics. */
static ts_status trainer_build_model(ts_trainer *t, int dp, ts_dtype dtype, uint64_t seed,
                                     int partial_bf16) {
    ts_parallel *par = t->par;
    ts_plugins *reg = t->reg;
    /* The layout plan, after the plugins' transforms, says how the model is
     * cut: the batch over dp, the tensors over tp (and, with act.x cut along
     * T, sequence parallelism). */
    ts_model_shard shard;
    if (par) {
        TS_TRY(ts_model_layout_plan_arch(t->arch, &t->mcfg, t->global_batch, t->T, par->mesh,
                                         &t->plan));
        if (reg) TS_TRY(ts_plugins_apply_transforms(reg, &t->plan));
        TS_TRY(ts_bind(&t->plan, par->mesh, reg, par->rank, &t->binding));
        TS_TRY(trainer_batch_split(t));
        if (t->parts != dp)
            return ts_error(TS_ERR_CONFIG,
                            "data.tokens is cut in %d blocks of sequences, but the data-parallel "
                            "axis has %d ranks (each of them must read its own block)",
                            t->parts, dp);
        TS_TRY(trainer_model_axes(t, &shard));
    }
    ts_status st =
        ts_model_create_arch(t->arch, &t->mcfg, dtype, seed, par ? &shard : NULL, t->be, &t->model);
    if (st) return trainer_model_error(t->cfg, st);
    t->model->partial_bf16 = partial_bf16;
    trainer_pipeline(t);
    if (par) TS_TRY(trainer_moe_routing(t));
    TS_TRY(trainer_recompute(t));
    t->stage_bubble = calloc((size_t)t->stages, sizeof *t->stage_bubble);
    t->stage_peak_kib = calloc((size_t)t->stages, sizeof *t->stage_peak_kib);
    if (!t->stage_bubble || !t->stage_peak_kib)
        return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    return TS_OK;
}

/* The optimizer over the model (AdamW from [train]; its state cut where a
 * plugin provides it), the plugins' views of the model, and the weights the
 * model starts from ([model] init). */
static ts_status trainer_build_optimizer(ts_trainer *t, uint64_t seed) {
    ts_plugins *reg = t->reg;
    int plan = t->plan_only;
    ts_optim_config oc = {
        .lr = (float)t->rc.train_lr,
        .min_lr = (float)t->rc.train_min_lr,
        .warmup = t->rc.train_warmup,
        .decay_steps = t->rc.train_decay_steps,
        .beta1 = (float)t->rc.train_beta1,
        .beta2 = (float)t->rc.train_beta2,
        .eps = (float)t->rc.train_eps,
        .weight_decay = (float)t->rc.train_weight_decay,
        .grad_clip = (float)t->rc.train_grad_clip,
    };
    if (oc.decay_steps == 0) oc.decay_steps = t->steps;
    /* The plugins see the model (its views, the device) from here on: an
     * optimizer-state provider's partition may read them. */
    t->state.seed = seed;
    if (reg) ts_plugins_set_device(reg, t->be);
    TS_TRY(trainer_views(t));
    ts_optim_shard oshard;
    TS_TRY(trainer_optim_shard(t, &oshard));
    TS_TRY(ts_optimizer_create_shard(&oc, t->model, &oshard, &t->optim));
    const char *init = t->rc.model_init;
    int safetensors = strncmp(init, "safetensors:", 12) == 0;
    if (!plan && (strncmp(init, "llmc:", 5) == 0 || safetensors)) {
        float *full = ts_mem_alloc(TS_MEM_OTHER, t->model->global_numel * sizeof(float));
        if (!full) return TS_ERR_NOMEM;
        ts_status st = safetensors ? ts_safetensors_load(init + 12, t->model, full)
                                   : ts_llmc_load(init + 5, t->model, full);
        if (!st) st = trainer_set_master(t, full);
        ts_mem_free(full);
        return st;
    }

    return TS_OK;
}

static ts_status trainer_create(const ts_config *cfg, ts_parallel *par, ts_plugins *reg, int plan,
                                ts_trainer **out) {
    *out = NULL;
    ts_trainer *t = calloc(1, sizeof *t);
    if (!t) return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    t->ckpt_lock.fd = -1;
    t->plan_only = plan;
    t->cfg = cfg;
    ts_run_config_fill(cfg, &t->rc);
    t->par = par;
    t->reg = reg;
    ts_layout_plan_init(&t->plan);
    t->rank0 = !par || par->rank == 0;
    t->stages = 1;
    t->chunks = 1;
    t->binding = (ts_binding){.parts = 1, .stages = 1, .chunks = 1, .mirror = -1, .optim_axis = -1};
    int dp = par ? ts_mesh_batch_width(par->mesh) : 1;
    if (par) {
        t->snap = calloc(1, sizeof *t->snap);
        if (!t->snap) {
            free(t);
            return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
        }
    }
    ts_status st = TS_OK;
#define CHECK(expr)                                                                                \
    do {                                                                                           \
        st = (expr);                                                                               \
        if (st) goto fail;                                                                         \
    } while (0)
    ts_train_shape shape;
    CHECK(ts_train_shape_resolve(cfg, dp, &shape));
    t->mcfg = shape.model;
    t->arch = shape.arch;
    t->T = shape.T;
    t->T_local = shape.T;
    t->B = shape.B;
    t->global_batch = shape.global_batch;
    t->micro_batches = shape.micro_batches;

    CHECK(trainer_setup_device(t));
    CHECK(trainer_setup_run(t));
    uint64_t seed = (uint64_t)t->rc.train_seed;
    ts_dtype dtype = strcmp(t->rc.train_dtype, "bf16") == 0 ? TS_BF16 : TS_F32;
    int partial_bf16 = strcmp(t->rc.train_partial_dtype, "bf16") == 0;
    if (partial_bf16 && dtype != TS_BF16)
        CHECK(trainer_key_error(cfg, "train", "partial_dtype",
                                "partial_dtype = bf16 needs dtype = bf16 (an f32 run keeps "
                                "its sums in f32)"));

    CHECK(trainer_setup_data(t, seed));
    CHECK(trainer_build_model(t, dp, dtype, seed, partial_bf16));
    CHECK(trainer_build_optimizer(t, seed));
    t->state = (ts_train_state){t->model, t->optim, 0, 0, seed};
    CHECK(trainer_ready_after(t));
    CHECK(trainer_norm_owners(t));
    if (t->sample_every > 0 &&
        (t->model->numel != t->model->global_numel || t->stages > 1 || t->T_local != t->T))
        CHECK(trainer_key_error(cfg, "train", "sample_every",
                                "sample_every = %lld needs the whole model on rank 0 (one stage, "
                                "no parameter or sequence cut); sample a checkpoint with tessera "
                                "sample instead",
                                (long long)t->sample_every));
    CHECK(trainer_core_reductions(t));
    if (par) t->tie_comm = ts_parallel_data_comm(par, "embedding");
    CHECK(trainer_setup_schedule(t));
    CHECK(trainer_setup_buffers(t));
    CHECK(trainer_setup_resume(t));
    *out = t;
    return TS_OK;
fail:
#undef CHECK
    ts_trainer_destroy(t);
    return st;
}

ts_train_state *ts_trainer_state(ts_trainer *t) {
    return &t->state;
}

/* The global window read by sequence b of micro-batch k on this rank. The
 * step's global batch is the windows [cursor, cursor + G); data.tokens
 * S(0) over dp gives part r the r-th contiguous block of G / parts of them,
 * read as m micro-batches of B, so the union over ranks is exactly the
 * global batch one rank would read. */
static int64_t trainer_window(const ts_trainer *t, int64_t cursor, int k, int b) {
    return cursor + (int64_t)t->part * t->micro_batches * t->B + (int64_t)k * t->B + b;
}

/* Whether every window of this step lies within [data] epochs (always, when
 * epochs = 0), agreed by all ranks: a rank that is short stops everybody. */
ts_status trainer_have_data(ts_trainer *t, int *have) {
    int32_t ok = 1;
    if (t->epochs > 0) {
        int64_t limit;
        if (!trainer_mul_fits(t->epochs, ts_dataset_num_windows(t->data, t->T), &limit))
            limit = INT64_MAX; /* more windows than any run reads */
        int64_t last = trainer_window(t, t->state.data_cursor, t->micro_batches - 1, t->B - 1);
        ok = last < limit;
    }
    if (t->par && t->par->size > 1) {
        int32_t all = 0;
        TS_TRY(ts_comm_all_reduce(t->par->world, &ok, &all, 1, TS_I32, TS_REDUCE_MIN));
        ok = all;
    }
    *have = ok;
    return TS_OK;
}

/* Reads this rank's part of the global batch of windows [cursor, cursor +
 * G) of `ds` and counts the valid targets of the whole global batch. */
static ts_status trainer_load_batch(ts_trainer *t, const ts_dataset *ds, int64_t cursor,
                                    int64_t *valid) {
    int T = t->T_local;
    size_t seq = 0;
    for (int k = 0; k < t->micro_batches; k++)
        for (int b = 0; b < t->B; b++, seq++) {
            if (t->plan_only) continue; /* zeros: every target valid */
            if (T == t->T) {
                TS_TRY(ts_dataset_window(ds, trainer_window(t, cursor, k, b), T,
                                         t->tokens + seq * T, t->targets + seq * T));
                continue;
            }
            /* This rank's part of every sequence. */
            int32_t *in = t->window, *tg = t->window + t->T;
            TS_TRY(ts_dataset_window(ds, trainer_window(t, cursor, k, b), t->T, in, tg));
            for (int i = 0; i < T; i++) {
                t->tokens[seq * T + i] = in[t->positions[i]];
                t->targets[seq * T + i] = tg[t->positions[i]];
            }
        }
    int64_t n = 0;
    for (size_t i = 0; i < seq * T; i++)
        n += t->targets[i] >= 0;
    if (t->be->kind != TS_DEVICE_CPU) {
        TS_TRY(t->be->from_host(t->tokens_dev, t->tokens, seq * T * sizeof(int32_t)));
        TS_TRY(t->be->from_host(t->targets_dev, t->targets, seq * T * sizeof(int32_t)));
    }
    return ts_batch_valid_total(t->batch_comm, n, valid);
}

/* Memory counters of the model's device: the host allocator's on the CPU,
 * the device allocator's on a GPU, the dry run's counts in a plan. */
ts_mem_counter trainer_mem(const ts_trainer *t, ts_mem_category cat) {
    if (t->be->kind == TS_DEVICE_PLAN) return ts_backend_plan_stats(t->dry, cat);
    return t->be->kind == TS_DEVICE_CPU ? ts_mem_stats(cat) : ts_device_mem_stats(cat);
}

/* Per pipeline stage: the measured bubble of the step and the activation
 * peak so far (KiB), gathered over the pipeline group (collective: part of
 * every step, so that a plan counts it like the run). */
static ts_status trainer_stage_stats(ts_trainer *t, double bubble) {
    float b = (float)bubble;
    int32_t k = (int32_t)(trainer_mem(t, TS_MEM_ACTS).peak / 1024);
    if (!t->stage_comm || t->stages == 1) {
        t->stage_bubble[0] = b;
        t->stage_peak_kib[0] = k;
        return TS_OK;
    }
    TS_TRY(ts_comm_all_gather(t->stage_host, &b, t->stage_bubble, 1, TS_F32));
    return ts_comm_all_gather(t->stage_host, &k, t->stage_peak_kib, 1, TS_I32);
}

/* The MoE blocks' sums of the step over the batch's ranks and the pipeline
 * stages (each stage holds its own blocks); the losses are already the
 * batch's. */
static ts_status trainer_moe_stats(ts_trainer *t, ts_step_stats *stats) {
    ts_moe_stats *m = &t->model->moe_stats;
    stats->experts = t->mcfg.experts;
    if (t->mcfg.experts <= 0) return TS_OK;
    int E = m->experts;
    int32_t *c = malloc(((size_t)E + 1) * sizeof *c);
    if (!c) return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    for (int e = 0; e < E; e++)
        c[e] = (int32_t)m->tokens[e];
    c[E] = (int32_t)m->dropped;
    float loss[2] = {(float)m->aux_loss, (float)m->z_loss};
    ts_status st = TS_OK;
    if (t->rows_comm && ts_comm_size(t->rows_comm) > 1)
        st = ts_comm_all_reduce(t->rows_comm, c, c, (size_t)E + 1, TS_I32, TS_REDUCE_SUM);
    if (!st && t->stage_host && ts_comm_size(t->stage_host) > 1) {
        st = ts_comm_all_reduce(t->stage_host, c, c, (size_t)E + 1, TS_I32, TS_REDUCE_SUM);
        if (!st) st = ts_comm_all_reduce(t->stage_host, loss, loss, 2, TS_F32, TS_REDUCE_SUM);
    }
    for (int e = 0; !st && e < E; e++)
        m->tokens[e] = c[e];
    stats->dropped = c[E];
    free(c);
    stats->aux_loss = loss[0];
    stats->z_loss = loss[1];
    stats->expert_tokens = m->tokens;
    stats->dispatch_bytes = m->bytes_sent;
    float busy[2] = {(float)m->expert_rows, (float)(1e3 * m->expert_s)};
    stats->expert_ms = busy[1];
    if (!st && t->par && t->par->size > 1)
        st = ts_comm_all_reduce(t->par->world, busy, busy, 2, TS_F32, TS_REDUCE_MAX);
    stats->expert_rows_max = busy[0];
    stats->expert_ms_max = busy[1];
    return st;
}

/* The loss summed over the ranks that hold parts of it: the last pipeline
 * stage's (the others add 0) and every part of the batch. */
static ts_status trainer_loss_total(ts_trainer *t, double *loss_sum) {
    if (t->stage_comm && ts_comm_size(t->stage_comm) > 1) {
        float local = (float)*loss_sum, sum = 0.0f;
        TS_TRY(ts_comm_all_reduce(t->stage_host, &local, &sum, 1, TS_F32, TS_REDUCE_SUM));
        *loss_sum = sum;
    }
    if (t->batch_comm && ts_comm_size(t->batch_comm) > 1) {
        float local = (float)*loss_sum, sum = 0.0f;
        TS_TRY(ts_comm_all_reduce(t->batch_comm, &local, &sum, 1, TS_F32, TS_REDUCE_SUM));
        *loss_sum = sum;
    }
    return TS_OK;
}

ts_status ts_trainer_step(ts_trainer *t, ts_step_stats *stats) {
    double t0 = now_seconds();
    ts_trace_set_step(t->trace, t->state.step + 1);
    int64_t valid = 0;
    TS_TRY(trainer_load_batch(t, t->data, t->state.data_cursor, &valid));
    TS_TRY(ts_model_zero_grad(t->model));
    if (t->mcfg.experts > 0) TS_TRY(ts_moe_stats_reset(&t->model->moe_stats, t->mcfg.experts));
    double loss_sum = 0.0, norm = 0.0;
    float lr = 0.0f;
    int skipped = 0;
    TS_TRY(trainer_execute(t, valid, &loss_sum, &norm, &lr, &skipped));
    TS_TRY(trainer_loss_total(t, &loss_sum));
    t->state.step++;
    t->state.data_cursor += t->global_batch;
    double dt = now_seconds() - t0;
    ts_trace_span(t->trace, "step", TS_TRACE_CAT_STEP, t0, t0 + dt, -1, t->stage, -1);
    stats->step = t->state.step;
    stats->loss = valid > 0 ? loss_sum / (double)valid : 0.0;
    stats->lr = lr;
    stats->grad_norm = norm;
    stats->step_ms = 1e3 * dt;
    stats->tokens_per_s = (double)t->global_batch * t->T / dt;
    stats->bubble = dt > 0 ? 1.0 - t->compute_s / dt : 0.0;
    stats->skipped = skipped;
    if (skipped) {
        t->skipped_in_row++;
        t->skipped_total++;
    } else {
        t->skipped_in_row = 0;
    }
    stats->skipped_steps = t->skipped_total;
    TS_TRY(trainer_moe_stats(t, stats));
    return trainer_stage_stats(t, stats->bubble);
}

ts_status trainer_eval(ts_trainer *t, double *val_loss) {
    double loss_sum = 0.0;
    int64_t valid_sum = 0;
    for (int64_t i = 0; i < t->eval_batches; i++) {
        int64_t valid = 0;
        double part = 0.0;
        TS_TRY(trainer_load_batch(t, t->val_data, i * t->global_batch, &valid));
        TS_TRY(trainer_execute_forward(t, &part));
        loss_sum += part;
        valid_sum += valid;
    }
    TS_TRY(trainer_loss_total(t, &loss_sum));
    *val_loss = valid_sum > 0 ? loss_sum / (double)valid_sum : 0.0;
    return TS_OK;
}
