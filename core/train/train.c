/*
 * train.c — the trainer (train.h): configuration to model, data, optimizer
 * and schedule, the batch of each step, and the step itself, which hands the
 * schedule to the executor (executor.c). The training state's files are
 * state_io.c's, progress lines and metrics report.c's (trainer_impl.h).
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

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arch.h"
#include "backend_plan.h"
#include "binder.h"
#include "cpu_kernels.h"
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

/* The shape `file` (an llm.c checkpoint, raw weights or a safetensors file,
 * what it says of the shape in *h) gives the model *mc: each key the INI
 * sets must agree with it (an error naming the key), the others are taken
 * from it. The blocks first: where the INI's experts or moe_every make a
 * block an MLP of experts that the file has dense, or the reverse, the
 * error names the first such block. */
static ts_status trainer_shape_from_file(const ts_config *cfg, ts_model_config *mc,
                                         const ts_model_config *h, const char *what,
                                         const char *file) {
    ts_model_config ini = *h;
    if (ts_config_has(cfg, "model", "experts")) ini.experts = mc->experts;
    if (ts_config_has(cfg, "model", "moe_every")) ini.moe_every = mc->moe_every;
    int layers = ts_config_has(cfg, "model", "layers") ? mc->layers : h->layers;
    char said[64] = "no experts";
    if (h->experts > 0)
        snprintf(said, sizeof said, "experts = %d, moe_every = %d", h->experts, h->moe_every);
    for (int l = 0; l < layers && l < h->layers; l++)
        if (ts_model_config_moe_block(&ini, l) != ts_model_config_moe_block(h, l))
            return trainer_key_error(
                cfg, "model", (ini.experts > 0) != (h->experts > 0) ? "experts" : "moe_every",
                "block h.%d is %s here (experts = %d, moe_every = %d) and %s in %s %s (%s)", l,
                ts_model_config_moe_block(&ini, l) ? "a mixture of experts" : "a dense MLP",
                ini.experts, ini.moe_every,
                ts_model_config_moe_block(h, l) ? "a mixture of experts" : "a dense MLP", what,
                file, said);
    /* experts_only: a key a dense file says nothing of. */
    struct {
        const char *key;
        int *ini;
        int file, experts_only;
    } keys[] = {{"layers", &mc->layers, h->layers, 0},
                {"d_model", &mc->d_model, h->d_model, 0},
                {"heads", &mc->heads, h->heads, 0},
                {"vocab", &mc->vocab, h->vocab, 0},
                {"padded_vocab", &mc->padded_vocab, h->padded_vocab, 0},
                {"context", &mc->context, h->context, 0},
                {"experts", &mc->experts, h->experts, 0},
                {"moe_every", &mc->moe_every, h->moe_every, 1},
                {"expert_hidden", &mc->expert_hidden, h->expert_hidden, 1},
                {"top_k", &mc->top_k, h->top_k, 1}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (h->experts == 0 && keys[i].experts_only) continue;
        if (ts_config_has(cfg, "model", keys[i].key) && *keys[i].ini != keys[i].file)
            return trainer_key_error(cfg, "model", keys[i].key, "%d conflicts with %d in %s %s",
                                     *keys[i].ini, keys[i].file, what, file);
        *keys[i].ini = keys[i].file;
    }
    return TS_OK;
}

/* The model shape from [model], or from the file of weights it starts from
 * (then any shape key given in the INI must agree with the file, and a
 * shape the file alone sets that does not fit is blamed on the file). */
static ts_status trainer_model_config(const ts_config *cfg, ts_model_config *mc) {
    mc->layers = (int)ts_config_int(cfg, "model", "layers");
    mc->d_model = (int)ts_config_int(cfg, "model", "d_model");
    mc->heads = (int)ts_config_int(cfg, "model", "heads");
    mc->vocab = (int)ts_config_int(cfg, "model", "vocab");
    mc->padded_vocab = (int)ts_config_int(cfg, "model", "padded_vocab");
    mc->context = (int)ts_config_int(cfg, "model", "context");
    mc->experts = (int)ts_config_int(cfg, "model", "experts");
    mc->moe_every = (int)ts_config_int(cfg, "model", "moe_every");
    mc->expert_hidden = (int)ts_config_int(cfg, "model", "expert_hidden");
    mc->top_k = (int)ts_config_int(cfg, "model", "top_k");
    mc->aux_loss_coeff = (float)ts_config_float(cfg, "model", "aux_loss_coeff");
    mc->z_loss_coeff = (float)ts_config_float(cfg, "model", "z_loss_coeff");
    mc->capacity_factor = (float)ts_config_float(cfg, "model", "capacity_factor");
    mc->drop_by_position = strcmp(ts_config_str(cfg, "model", "drop_policy"), "position") == 0;
    const char *init = ts_config_str(cfg, "model", "init");
    int safetensors = strncmp(init, "safetensors:", 12) == 0;
    if (strncmp(init, "llmc:", 5) == 0 || safetensors) {
        const char *file = strchr(init, ':') + 1;
        ts_model_config h = *mc;
        /* heads and top_k, which a safetensors file may not say (its
         * metadata, config.json beside it): 0 unless the INI sets them, and
         * then none is taken by default. */
        if (safetensors && !ts_config_has(cfg, "model", "heads")) h.heads = 0;
        if (safetensors && !ts_config_has(cfg, "model", "top_k")) h.top_k = 0;
        if ((safetensors ? ts_safetensors_read_config(file, &h) : ts_llmc_read_config(file, &h)) !=
            TS_OK)
            return trainer_key_error_last(cfg, "model", "init", TS_ERR_FORMAT);
        if (h.heads == 0)
            return trainer_key_error(cfg, "model", "heads",
                                     "the safetensors file %s does not say it (no __metadata__ "
                                     "heads, no n_head in a config.json beside it): set it",
                                     file);
        if (h.experts > 0 && h.top_k == 0)
            return trainer_key_error(cfg, "model", "top_k",
                                     "the safetensors file %s of %d experts does not say it (no "
                                     "__metadata__ top_k): set it",
                                     file, h.experts);
        if (h.experts == 0) h.top_k = mc->top_k;
        if (safetensors)
            h.padded_vocab = mc->padded_vocab ? mc->padded_vocab : (h.vocab + 127) / 128 * 128;
        /* (Raw weights are written for a mixture of experts alone.) */
        const char *what = safetensors     ? "the safetensors file"
                           : h.experts > 0 ? "the raw weights"
                                           : "the llm.c checkpoint";
        TS_TRY(trainer_shape_from_file(cfg, mc, &h, what, file));
    } else if (strcmp(init, "random") != 0) {
        return trainer_key_error(cfg, "model", "init",
                                 "'%s' is none of 'random', 'llmc:PATH', 'safetensors:PATH'", init);
    }
    if (mc->experts > 0 && mc->expert_hidden == 0) mc->expert_hidden = 4 * mc->d_model;
    if (mc->experts > 0 && mc->top_k > mc->experts)
        return trainer_key_error(cfg, "model", "top_k",
                                 "top_k = %d is more than experts = %d: a token cannot choose more "
                                 "experts than there are",
                                 mc->top_k, mc->experts);
    if (mc->padded_vocab == 0) mc->padded_vocab = (mc->vocab + 127) / 128 * 128;
    if (mc->d_model % mc->heads != 0)
        return trainer_key_error(cfg, "model", "heads", "heads = %d does not divide d_model = %d",
                                 mc->heads, mc->d_model);
    if (mc->padded_vocab < mc->vocab)
        return trainer_key_error(cfg, "model", "padded_vocab",
                                 "padded_vocab = %d is below vocab = %d", mc->padded_vocab,
                                 mc->vocab);
    return ts_model_config_check(mc);
}

/* a * b into *out; 0 when it does not fit an int64 (or either is negative). */
static int mul_fits(int64_t a, int64_t b, int64_t *out) {
    return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, out);
}

/* Every size derived from the shape keys is checked before anything grows
 * with it: dimensions the kernels take as int (rows B*T, B*heads, 4*C,
 * padded vocabulary), the element counts of the parameters and of the
 * largest activations, and the data cursor after the last step; none may
 * wrap. (Whether the memory exists is the allocator's check.) */
static ts_status trainer_check_sizes(const ts_config *cfg, const ts_train_shape *s) {
    const ts_model_config *c = &s->model;
    int64_t C = c->d_model, L = c->layers, V = c->padded_vocab, P = c->context;
    int64_t B = s->B, T = s->T, NH = c->heads, v, w, params = 0;
    if (!mul_fits(B, T, &v) || v > INT32_MAX)
        return trainer_key_error(cfg, "train", "micro_batch",
                                 "micro_batch x seq_len = %lld x %lld rows exceeds %d",
                                 (long long)B, (long long)T, INT32_MAX);
    if (!mul_fits(B, NH, &v) || v > INT32_MAX)
        return trainer_key_error(cfg, "model", "heads",
                                 "micro_batch x heads = %lld x %lld exceeds %d", (long long)B,
                                 (long long)NH, INT32_MAX);
    if (4 * C > INT32_MAX)
        return trainer_key_error(cfg, "model", "d_model", "d_model = %lld: 4 x d_model exceeds %d",
                                 (long long)C, INT32_MAX);
    /* Parameters: wte, wpe, L blocks of 12C^2 + 13C, the final LayerNorm;
     * 16 bytes each with gradients and both moments. */
    int ok = mul_fits(V, C, &v) && !__builtin_add_overflow(params, v, &params) &&
             mul_fits(P, C, &v) && !__builtin_add_overflow(params, v, &params) &&
             mul_fits(C, C, &v) && mul_fits(v, 12, &v) && !__builtin_add_overflow(v, 13 * C, &v) &&
             mul_fits(v, L, &v) && !__builtin_add_overflow(params, v, &params) &&
             mul_fits(params, 16, &v);
    if (!ok)
        return trainer_key_error(
            cfg, "model", "d_model",
            "d_model = %lld with layers = %lld, context = %lld and padded vocabulary "
            "%lld: the parameter count does not fit 64 bits",
            (long long)C, (long long)L, (long long)P, (long long)V);
    /* The logits (B, T, Vp) and the attention scores (B, heads, T, T). */
    if (!mul_fits(B * T, V, &v) || !mul_fits(v, 4, &v) || !mul_fits(B * NH, T, &v) ||
        !mul_fits(v, T, &v) || !mul_fits(v, 4, &v))
        return trainer_key_error(
            cfg, "train", "seq_len",
            "seq_len = %lld with micro_batch = %lld: the activations' sizes do not "
            "fit 64 bits",
            (long long)T, (long long)B);
    /* The step's batch on one rank (tokens and targets, 4 bytes each) must
     * fit in memory, and its schedule stay a list a person could read. */
    int64_t rows = (int64_t)s->micro_batches * B, bytes;
    if (s->micro_batches > TS_TRAIN_MAX_MICRO_BATCHES || !mul_fits(rows, T, &v) ||
        !mul_fits(v, 8, &bytes) || (ts_physical_memory() && (uint64_t)bytes > ts_physical_memory()))
        return trainer_key_error(
            cfg, "train", "global_batch",
            "global_batch = %d makes %d micro-batches of %lld x %lld tokens per rank "
            "and step (at most %d micro-batches, and the batch must fit in memory)",
            s->global_batch, s->micro_batches, (long long)B, (long long)T,
            TS_TRAIN_MAX_MICRO_BATCHES);
    int64_t steps = ts_config_int(cfg, "train", "steps");
    if (!mul_fits(steps, s->global_batch, &w))
        return trainer_key_error(
            cfg, "train", "steps",
            "steps = %lld x global_batch = %d sequences overflow the data cursor", (long long)steps,
            s->global_batch);
    return TS_OK;
}

ts_status ts_train_shape_resolve(const ts_config *cfg, int dp, ts_train_shape *out) {
    memset(out, 0, sizeof *out);
    const char *arch = ts_config_str(cfg, "model", "arch");
    out->arch = ts_arch_find(arch);
    if (!out->arch) {
        char names[256];
        return trainer_key_error(cfg, "model", "arch", "'%s' is not a registered architecture (%s)",
                                 arch, ts_arch_names(names, sizeof names));
    }
    TS_TRY(trainer_model_config(cfg, &out->model));
    out->T = (int)ts_config_int(cfg, "train", "seq_len");
    if (out->T == 0) out->T = out->model.context;
    if (out->T > out->model.context)
        return trainer_key_error(cfg, "train", "seq_len",
                                 "seq_len = %d exceeds the model's context = %d", out->T,
                                 out->model.context);
    out->B = (int)ts_config_int(cfg, "train", "micro_batch");
    int64_t gb = ts_config_int(cfg, "train", "global_batch"), per_step;
    if (!mul_fits(out->B, dp, &per_step) || per_step > INT32_MAX)
        return trainer_key_error(cfg, "train", "micro_batch",
                                 "micro_batch x dp = %d x %d sequences per step exceeds %d", out->B,
                                 dp, INT32_MAX);
    if (gb == 0) gb = per_step;
    if (gb % per_step != 0)
        return trainer_key_error(
            cfg, "train", "global_batch",
            "global_batch = %lld is not a multiple of micro_batch x dp = %d x %d", (long long)gb,
            out->B, dp);
    out->global_batch = (int)gb;
    /* Megatron-LM's rule: m = global_batch / (micro_batch * dp). */
    out->micro_batches = out->global_batch / (out->B * dp);
    return trainer_check_sizes(cfg, out);
}

/* [train] threads = 0: OMP_NUM_THREADS when it is set (a whole number from
 * 1 to 4096, threads of each rank; anything else is refused naming it),
 * else the cores divided among the node's ranks (at least 1). */
static ts_status trainer_default_threads(int *out) {
    const char *omp = getenv("OMP_NUM_THREADS");
    if (omp) {
        char *end = NULL;
        long n = omp[0] >= '0' && omp[0] <= '9' ? strtol(omp, &end, 10) : 0;
        if (!end || *end || n < 1 || n > 4096)
            return ts_error(TS_ERR_CONFIG,
                            "OMP_NUM_THREADS = '%s' (environment): a whole number of threads "
                            "from 1 to 4096 is required, or unset it ([train] threads = N "
                            "overrides it)",
                            omp);
        *out = (int)n;
        return TS_OK;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long ranks = local ? atol(local) : 1;
    if (cores < 1) cores = 1;
    if (ranks < 1) ranks = 1;
    long n = cores / ranks;
    *out = n < 1 ? 1 : (int)n;
    return TS_OK;
}

/* Reads from the plan how the batch is cut: the axes on which data.tokens
 * is S(0) split it into blocks of sequences (nested in layout order), and
 * every axis on which it is cut at all (along the batch or the sequence)
 * holds a disjoint part of it, so the loss is summed over their group (the
 * token joining their names in layout order, e.g. "dp-cp"). */
static ts_status trainer_batch_split(ts_trainer *t) {
    t->parts = 1;
    t->part = 0;
    t->batch_comm = NULL;
    if (!t->par) return TS_OK;
    const ts_layout_plan_entry *e = ts_layout_plan_find(&t->plan, "data.tokens");
    if (!e) return ts_error(TS_ERR_INTERNAL, "trainer: the plan has no data.tokens");
    char token[64] = "";
    size_t len = 0;
    for (int i = 0; i < e->layout.naxes; i++) {
        const ts_layout_axis *a = &e->layout.axes[i];
        if (a->placement.kind != TS_PLACEMENT_SHARD || a->size == 1) continue;
        int coord = ts_parallel_coord(t->par, a->name);
        if (coord < 0)
            return ts_error(TS_ERR_PLUGIN, "data.tokens is cut over '%s', which is no mesh axis",
                            a->name);
        len += (size_t)snprintf(token + len, sizeof token - len, "%s%s", len ? "-" : "", a->name);
        if (a->placement.dim == 0) {
            t->part = t->part * a->size + coord;
            t->parts *= a->size;
        }
    }
    if (!len) return TS_OK;
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
static ts_status trainer_positions(ts_trainer *t, const ts_model_shard *shard,
                                   const ts_layout_plan_entry *data) {
    (void)shard, (void)data;
    const ts_binding *b = &t->binding;
    free(t->positions);
    t->positions = malloc((size_t)(t->T_local > 0 ? t->T_local : 1) * sizeof *t->positions);
    if (!t->positions) return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    if (b->seq_local != t->T_local || b->seq0 != t->seq0)
        return ts_error(TS_ERR_INTERNAL,
                        "trainer: the binding holds tokens [%d, +%d), not [%d, +%d)", b->seq0,
                        b->seq_local, t->seq0, t->T_local);
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
    /* This rank's tokens of each sequence (its block of data.tokens along
     * the sequence). */
    int coords[TS_LAYOUT_MAX_AXES];
    for (int i = 0; i < data->layout.naxes; i++) {
        int c = ts_parallel_coord(t->par, data->layout.axes[i].name);
        coords[i] = c < 0 ? 0 : c;
    }
    int64_t off[TS_MAX_DIMS], shp[TS_MAX_DIMS];
    TS_TRY(ts_layout_local_block(&data->layout, coords, off, shp));
    t->seq0 = (int)off[1];
    t->T_local = (int)shp[1];
    TS_TRY(trainer_positions(t, shard, data));
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

/* Creates [train] checkpoint_dir (with parents), checks that files can be
 * made in it, locks it for this run, and removes the temporary files a
 * killed writer left there (no writer can be active: we hold the lock). */
static ts_status trainer_claim_dir(ts_trainer *t) {
    ts_status st = ts_file_make_dir(t->ckpt_dir, "directory");
    if (!st) st = ts_dir_lock_acquire(&t->ckpt_lock, t->ckpt_dir, "directory");
    if (st) return trainer_key_error_last(t->cfg, "train", "checkpoint_dir", st);
    DIR *d = opendir(t->ckpt_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "ckpt-", 5) != 0 || !strstr(e->d_name, ".tmp.")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", t->ckpt_dir, e->d_name);
        struct stat sb;
        int dir = lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (dir ? ts_ckpt_remove_dir(path) == TS_OK : unlink(path) == 0)
            printf("checkpoint_dir: removed %s, left by an interrupted save\n", path);
    }
    if (d) closedir(d);
    return TS_OK;
}

/* An output file named by [train] KEY must be creatable at start-up, not
 * found unwritable at the end of the run. */
static ts_status trainer_check_output(ts_trainer *t, const char *key, const char *what) {
    const char *path = ts_config_str(t->cfg, "train", key);
    if (!path[0]) return TS_OK;
    ts_status st = ts_file_probe_output(path, what);
    return st ? trainer_key_error_last(t->cfg, "train", key, st) : TS_OK;
}

/* Opens [train] metrics. A resumed run keeps the lines of the steps up to
 * the checkpoint and drops those after it (written before a kill, and about
 * to be written again), so the file holds every step once. */
static ts_status trainer_open_metrics(ts_trainer *t, int resumed) {
    const char *path = ts_config_str(t->cfg, "train", "metrics");
    if (!path[0]) return TS_OK;
    ts_status st = TS_OK;
    struct stat sb;
    if (resumed && stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
        st = ts_file_truncate_steps_after(path, t->state.step);
    if (!st) st = ts_file_stream_open(&t->metrics, path, "metrics", resumed ? "a" : "w");
    return st ? trainer_key_error_last(t->cfg, "train", "metrics", st) : TS_OK;
}

/* A failure to build the model, with where the [model] keys its message
 * names were set. */
static ts_status trainer_model_error(const ts_config *cfg, ts_status st) {
    char msg[1024], where[1024] = "", w[256];
    snprintf(msg, sizeof msg, "%s", ts_last_error_bare());
    static const char *keys[] = {"layers", "d_model", "heads", "vocab", "padded_vocab", "context"};
    size_t j = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "[model] %s ", keys[k]);
        if (strstr(msg, name) && ts_config_has(cfg, "model", keys[k]))
            j += (size_t)snprintf(where + j, sizeof where - j, "%s%s", j ? "; " : "",
                                  ts_config_where(cfg, "model", keys[k], w, (int)sizeof w));
    }
    return ts_error(st, "%s%s%s%s", msg, j ? " (" : "", where, j ? ")" : "");
}

/* Every rank's list of the registered scheduler, simulated together before
 * any step (core/base/schedule.h): a schedule that misses an action,
 * mismatches a transfer or deadlocks stops start-up naming the rank and the
 * action, on every rank alike. */
static ts_status trainer_check_schedule(ts_trainer *t, ts_plugins *reg) {
    int p = t->stages;
    ts_schedule *all = calloc((size_t)p, sizeof *all);
    if (!all) return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    const char *name = ts_plugins_scheduler_name(reg, 0);
    ts_status st = TS_OK;
    for (int s = 0; s < p && !st; s++) {
        ts_plugin_schedule_args args = {.struct_size = sizeof args,
                                        .stages = p,
                                        .stage = s,
                                        .micro_batches = t->micro_batches,
                                        .chunks = t->chunks};
        st = ts_plugins_schedule(reg, name, &args, &all[s]);
    }
    ts_schedule_shape shape = {p, t->micro_batches, t->chunks, 1, 1, 1, t->model->stage_order};
    ts_schedule_sim sim;
    if (!st) {
        st = ts_schedule_simulate_shape(&shape, all, &sim);
        if (st)
            st = ts_error(st, "pipeline schedule '%s' (%d stages, %d micro-batches): %s", name, p,
                          t->micro_batches, ts_last_error_bare());
        else
            ts_schedule_sim_free(&sim);
    }
    for (int s = 0; s < p; s++)
        ts_schedule_free(&all[s]);
    free(all);
    return st;
}

/* Activation recomputation from [train] recompute, recompute_layers and
 * recompute_method (model.h: ts_model_set_recompute). */
static ts_status trainer_recompute(ts_trainer *t) {
    const ts_config *cfg = t->cfg;
    static const char *modes[] = {"none", "selective", "full"};
    const char *name = ts_config_str(cfg, "train", "recompute");
    ts_recompute mode = TS_RECOMPUTE_NONE;
    for (int k = 0; k < 3; k++)
        if (strcmp(name, modes[k]) == 0) mode = (ts_recompute)k;
    int layers = (int)ts_config_int(cfg, "train", "recompute_layers");
    const char *method = ts_config_str(cfg, "train", "recompute_method");
    int block = strcmp(method, "block") == 0;
    if (mode != TS_RECOMPUTE_NONE) {
        int most = ts_model_recompute_modules(t->model, mode);
        if (most == 0 && t->stages <= 1)
            return trainer_key_error(cfg, "train", "recompute",
                                     "recompute = %s: no module of architecture %s can recompute "
                                     "so",
                                     name, t->model->arch->name);
        if (layers > most && t->stages > 1)
            return trainer_key_error(cfg, "train", "recompute_layers",
                                     "%d blocks (recompute_method = %s), but a model chunk of "
                                     "pipeline stage %d has %d",
                                     layers, method, t->stage, most);
        if (layers > most)
            return trainer_key_error(cfg, "train", "recompute_layers",
                                     "%d blocks (recompute_method = %s), but the model has %d",
                                     layers, method, most);
    }
    ts_status st = ts_model_set_recompute(t->model, mode, layers, block);
    return st ? trainer_key_error_last(cfg, "train", "recompute", st) : TS_OK;
}

/* The backend of a dry run on [train] device: the device's sizing rules
 * (attention state, GEMM scratch), nothing computed; for device = cuda
 * without loading the CUDA backend (cuda_sizes.h). */
static ts_status trainer_plan_backend(const ts_config *cfg, const ts_backend **out) {
    const ts_backend *target = strcmp(ts_config_str(cfg, "train", "device"), "cuda") == 0
                                   ? ts_backend_cuda_sizes()
                                   : ts_backend_cpu();
    return ts_backend_plan(target, out);
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

static ts_status trainer_create(const ts_config *cfg, ts_parallel *par, ts_plugins *reg, int plan,
                                ts_trainer **out) {
    *out = NULL;
    ts_trainer *t = calloc(1, sizeof *t);
    if (!t) return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    t->ckpt_lock.fd = -1;
    t->plan_only = plan;
    t->cfg = cfg;
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

    int threads = (int)ts_config_int(cfg, "train", "threads");
    if (!plan && threads == 0) CHECK(trainer_default_threads(&threads));
    if (!plan) ts_cpu_set_threads(threads);

    const char *device = ts_config_str(cfg, "train", "device");
    if (plan) {
        CHECK(trainer_plan_backend(cfg, &t->be));
    } else if (strcmp(device, "cpu") == 0) {
        t->be = ts_backend_cpu();
    } else {
        /* One GPU per rank (the launcher's local rank); with several ranks
         * the model's tensors travel over NCCL, host scalars over MPI. */
        st = ts_backend_open(TS_DEVICE_CUDA, &t->be);
        if (!st && par) st = ts_parallel_open_device(par);
        if (st) {
            char msg[1024];
            snprintf(msg, sizeof msg, "%s", ts_last_error_bare());
            CHECK(trainer_key_error(cfg, "train", "device", "device = %s: %s", device, msg));
        }
    }

    t->epochs = ts_config_int(cfg, "data", "epochs");
    t->steps = ts_config_int(cfg, "train", "steps");
    t->log_every = (int)ts_config_int(cfg, "train", "log_every");
    t->ckpt_dir = ts_config_str(cfg, "train", "checkpoint_dir");
    t->ckpt_every = ts_config_int(cfg, "train", "checkpoint_every");
    t->ckpt_async = ts_config_bool(cfg, "train", "checkpoint_async");
    t->max_skipped = ts_config_int(cfg, "train", "max_skipped_steps");
    if (t->ckpt_every > 0 && !t->ckpt_dir[0])
        CHECK(trainer_key_error(cfg, "train", "checkpoint_every",
                                "checkpoints every %lld steps need [train] checkpoint_dir",
                                (long long)t->ckpt_every));
    const char *resume = ts_config_str(cfg, "train", "resume");
    if (strcmp(resume, "auto") == 0 && !t->ckpt_dir[0])
        CHECK(trainer_key_error(
            cfg, "train", "resume",
            "resume = auto needs [train] checkpoint_dir (the directory to resume from)"));
    /* The outputs are checked before any work: the checkpoint directory is
     * created, checked writable and locked by the rank that writes it. */
    if (t->rank0 && !plan && t->ckpt_dir[0]) CHECK(trainer_claim_dir(t));
    if (t->rank0 && !plan) CHECK(trainer_check_output(t, "trace", "trace"));
    if (t->rank0 && !plan) CHECK(trainer_check_output(t, "summary", "summary"));

    uint64_t seed = (uint64_t)ts_config_int(cfg, "train", "seed");
    ts_dtype dtype = strcmp(ts_config_str(cfg, "train", "dtype"), "bf16") == 0 ? TS_BF16 : TS_F32;
    int partial_bf16 = strcmp(ts_config_str(cfg, "train", "partial_dtype"), "bf16") == 0;
    if (partial_bf16 && dtype != TS_BF16)
        CHECK(trainer_key_error(cfg, "train", "partial_dtype",
                                "partial_dtype = bf16 needs dtype = bf16 (an f32 run keeps "
                                "its sums in f32)"));

    ts_data_opts dopts = {
        .source = ts_config_str(cfg, "data", "source"),
        .vocab = t->mcfg.vocab,
        .seed = seed,
        .shuffle = ts_config_bool(cfg, "data", "shuffle"),
        .synthetic_tokens = ts_config_int(cfg, "data", "synthetic_tokens"),
        .synthetic_branching = (int)ts_config_int(cfg, "data", "synthetic_branching"),
        .ignore_token = (int)ts_config_int(cfg, "data", "ignore_token"),
    };
    const char *val_source = ts_config_str(cfg, "data", "val_source");
    dopts.split = ts_config_float(cfg, "data", "split");
    t->eval_every = ts_config_int(cfg, "train", "eval_every");
    t->eval_batches = ts_config_int(cfg, "train", "eval_batches");
    t->sample_every = ts_config_int(cfg, "train", "sample_every");
    t->sample_tokens = ts_config_int(cfg, "train", "sample_tokens");
    if (dopts.split > 0 && val_source[0])
        CHECK(trainer_key_error(cfg, "data", "split",
                                "split = %g holds out part of source, and val_source names other "
                                "held-out data: set one of them",
                                dopts.split));
    if (t->eval_every > 0 && !(dopts.split > 0) && !val_source[0])
        CHECK(trainer_key_error(cfg, "train", "eval_every",
                                "eval_every = %lld needs held-out data: [data] val_source or split",
                                (long long)t->eval_every));
    /* A dry run reads no data (its batches are zeros). */
    if (!plan) st = ts_dataset_open(&t->data, &dopts);
    if (!st && !plan && (dopts.split > 0 || val_source[0])) {
        ts_data_opts vopts = dopts;
        vopts.held_out = 1;
        if (val_source[0]) {
            vopts.source = val_source;
            vopts.split = 0;
        }
        st = ts_dataset_open(&t->val_data, &vopts);
        if (st) {
            char msg[2048];
            snprintf(msg, sizeof msg, "%s", ts_last_error_bare());
            CHECK(
                trainer_key_error(cfg, "data", val_source[0] ? "val_source" : "split", "%s", msg));
        }
    }
    if (st) {
        char where[512];
        ts_config_where(cfg, "data", "source", where, sizeof where);
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", ts_last_error_bare());
        st = ts_error(st, "%s: %s", where, msg);
        goto fail;
    }
    if (!plan && t->val_data && t->eval_every > 0 &&
        ts_dataset_num_windows(t->val_data, t->T) < t->eval_batches * t->global_batch)
        CHECK(trainer_key_error(
            cfg, "train", "eval_batches",
            "eval_batches = %lld global batches of %d sequences need %lld held-out windows of "
            "seq_len %d; %s holds %lld",
            (long long)t->eval_batches, t->global_batch,
            (long long)(t->eval_batches * t->global_batch), t->T, ts_dataset_describe(t->val_data),
            (long long)ts_dataset_num_windows(t->val_data, t->T)));
    if (!plan && ts_dataset_num_windows(t->data, t->T) < 1)
        CHECK(trainer_key_error(
            cfg, "data", "source", "%s holds %lld tokens, fewer than seq_len + 1 = %d",
            ts_dataset_describe(t->data), (long long)ts_dataset_num_tokens(t->data), t->T + 1));

    /* The layout plan, after the plugins' transforms, says how the model is
     * cut: the batch over dp, the tensors over tp (and, with act.x cut along
     * T, sequence parallelism). */
    ts_model_shard shard;
    if (par) {
        CHECK(ts_model_layout_plan_arch(t->arch, &t->mcfg, t->global_batch, t->T, par->mesh,
                                        &t->plan));
        if (reg) CHECK(ts_plugins_apply_transforms(reg, &t->plan));
        CHECK(ts_bind(&t->plan, par->mesh, reg, par->rank, &t->binding));
        CHECK(trainer_batch_split(t));
        if (t->parts != dp)
            CHECK(ts_error(TS_ERR_CONFIG,
                           "data.tokens is cut in %d blocks of sequences, but the data-parallel "
                           "axis has %d ranks (each of them must read its own block)",
                           t->parts, dp));
        CHECK(trainer_model_axes(t, &shard));
    }
    st =
        ts_model_create_arch(t->arch, &t->mcfg, dtype, seed, par ? &shard : NULL, t->be, &t->model);
    if (st) CHECK(trainer_model_error(cfg, st));
    t->model->partial_bf16 = partial_bf16;
    trainer_pipeline(t);
    if (par) CHECK(trainer_moe_routing(t));
    CHECK(trainer_recompute(t));
    t->stage_bubble = calloc((size_t)t->stages, sizeof *t->stage_bubble);
    t->stage_peak_kib = calloc((size_t)t->stages, sizeof *t->stage_peak_kib);
    if (!t->stage_bubble || !t->stage_peak_kib)
        CHECK(ts_error(TS_ERR_NOMEM, "trainer: out of memory"));
    ts_optim_config oc = {
        .lr = (float)ts_config_float(cfg, "train", "lr"),
        .min_lr = (float)ts_config_float(cfg, "train", "min_lr"),
        .warmup = ts_config_int(cfg, "train", "warmup"),
        .decay_steps = ts_config_int(cfg, "train", "decay_steps"),
        .beta1 = (float)ts_config_float(cfg, "train", "beta1"),
        .beta2 = (float)ts_config_float(cfg, "train", "beta2"),
        .eps = (float)ts_config_float(cfg, "train", "eps"),
        .weight_decay = (float)ts_config_float(cfg, "train", "weight_decay"),
        .grad_clip = (float)ts_config_float(cfg, "train", "grad_clip"),
    };
    if (oc.decay_steps == 0) oc.decay_steps = t->steps;
    /* The plugins see the model (its views, the device) from here on: an
     * optimizer-state provider's partition may read them. */
    t->state.seed = seed;
    if (reg) ts_plugins_set_device(reg, t->be);
    CHECK(trainer_views(t));
    ts_optim_shard oshard;
    CHECK(trainer_optim_shard(t, &oshard));
    CHECK(ts_optimizer_create_shard(&oc, t->model, &oshard, &t->optim));
    const char *init = ts_config_str(cfg, "model", "init");
    int safetensors = strncmp(init, "safetensors:", 12) == 0;
    if (!plan && (strncmp(init, "llmc:", 5) == 0 || safetensors)) {
        float *full = ts_mem_alloc(TS_MEM_OTHER, t->model->global_numel * sizeof(float));
        if (!full) CHECK(TS_ERR_NOMEM);
        st = safetensors ? ts_safetensors_load(init + 12, t->model, full)
                         : ts_llmc_load(init + 5, t->model, full);
        if (!st) st = trainer_set_master(t, full);
        ts_mem_free(full);
        if (st) goto fail;
    }

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
    if (ts_plugins_num_schedulers(reg) > 1)
        CHECK(ts_error(TS_ERR_CONFIG, "%d schedulers are registered; one is expected",
                       ts_plugins_num_schedulers(reg)));
    if (ts_plugins_num_schedulers(reg) == 1) {
        ts_plugin_schedule_args args = {.struct_size = sizeof args,
                                        .stages = t->stages ? t->stages : 1,
                                        .stage = t->stage,
                                        .micro_batches = t->micro_batches,
                                        .chunks = t->chunks};
        CHECK(ts_plugins_schedule(reg, ts_plugins_scheduler_name(reg, 0), &args, &t->schedule));
        if (t->stages > 1) CHECK(trainer_check_schedule(t, reg));
    } else if (t->stages > 1) {
        CHECK(ts_error(TS_ERR_PLUGIN,
                       "pp = %d needs a pipeline schedule; no plugin registers one (nothing "
                       "implements the pipeline axis)",
                       t->stages));
    } else {
        CHECK(ts_schedule_default(t->micro_batches, &t->schedule));
    }
    size_t slots = (size_t)t->micro_batches * t->chunks;
    t->act_in = calloc(slots, sizeof *t->act_in);
    t->grad_in = calloc(slots, sizeof *t->grad_in);
    t->grad_out = calloc(slots, sizeof *t->grad_out);
    t->chunk_out = calloc(slots, sizeof *t->chunk_out);
    t->act_req = calloc(slots, sizeof *t->act_req);
    t->grad_req = calloc(slots, sizeof *t->grad_req);
    t->grad_pending = calloc(slots, sizeof *t->grad_pending);
    t->act_wire = calloc(slots, sizeof *t->act_wire);
    t->grad_wire = calloc(slots, sizeof *t->grad_wire);
    t->mail_act = calloc(slots, sizeof *t->mail_act);
    t->mail_grad = calloc(slots, sizeof *t->mail_grad);
    if (!t->act_in || !t->grad_in || !t->grad_out || !t->chunk_out || !t->act_req || !t->grad_req ||
        !t->grad_pending || !t->act_wire || !t->grad_wire || !t->mail_act || !t->mail_grad)
        CHECK(ts_error(TS_ERR_NOMEM, "trainer: out of memory"));
    t->trace_path = plan ? "" : ts_config_str(cfg, "train", "trace");
    if (t->trace_path[0]) {
        CHECK(ts_trace_create(par ? par->rank : 0, 0, &t->trace));
        if (par)
            CHECK(ts_trace_sync_epoch(t->trace, par->world));
        else
            ts_trace_set_epoch(t->trace, ts_trace_now());
    }

    size_t toks = (size_t)t->micro_batches * t->B * t->T_local;
    t->window = malloc(2 * (size_t)t->T * sizeof *t->window);
    if (!t->window) CHECK(ts_error(TS_ERR_NOMEM, "trainer: out of memory for batches"));
    t->tokens = ts_mem_alloc(TS_MEM_OTHER, toks * sizeof(int32_t));
    t->targets = ts_mem_alloc(TS_MEM_OTHER, toks * sizeof(int32_t));
    t->ctx = calloc((size_t)t->micro_batches, sizeof *t->ctx);
    if (!t->tokens || !t->targets || !t->ctx)
        CHECK(ts_error(TS_ERR_NOMEM, "trainer: out of memory for batches"));
    if (t->be->kind == TS_DEVICE_CPU) {
        t->tokens_dev = t->tokens;
        t->targets_dev = t->targets;
    } else {
        t->tokens_dev = t->be->alloc(TS_MEM_OTHER, toks * sizeof(int32_t));
        t->targets_dev = t->be->alloc(TS_MEM_OTHER, toks * sizeof(int32_t));
        if (!t->tokens_dev || !t->targets_dev) CHECK(TS_ERR_NOMEM);
    }

    int resumed = 0;
    if (!plan && strcmp(resume, "auto") == 0) {
        char path[4096];
        int found = 0;
        CHECK(ts_checkpoint_latest(t->ckpt_dir, path, sizeof path, &found));
        if (found) {
            CHECK(ts_trainer_load(t, path));
            if (t->rank0)
                printf("resumed from %s at step %lld (rank 0 read %.2f MiB of %.2f; resident "
                       "memory of a rank grew by at most %.2f MiB)\n",
                       path, (long long)t->state.step, (double)t->ckpt_read / (1 << 20),
                       (double)t->ckpt_bytes / (1 << 20), t->ckpt_grew_kib / 1024.0);
            resumed = 1;
        } else if (t->rank0) {
            printf("resume = auto: no checkpoint in %s, starting from step 0\n", t->ckpt_dir);
        }
    }
    if (t->rank0 && !plan) CHECK(trainer_open_metrics(t, resumed));
    *out = t;
    return TS_OK;
fail:
#undef CHECK
    ts_trainer_destroy(t);
    return st;
}

void ts_trainer_destroy(ts_trainer *t) {
    if (!t) return;
    ts_file_stream_close(&t->metrics);
    trainer_ckpt_abandon(t);
    ts_mem_free(t->ckpt_snapshot);
    ts_dir_lock_release(&t->ckpt_lock);
    free(t->snap);
    size_t slots = (size_t)t->micro_batches * (t->chunks > 0 ? t->chunks : 1);
    for (size_t i = 0; t->be && t->act_in && i < slots; i++) {
        t->be->free(t->act_in[i]);
        t->be->free(t->grad_in[i]);
        t->be->free(t->grad_out[i]);
        if (t->mail_act) t->be->free(t->mail_act[i]);
        if (t->mail_grad) t->be->free(t->mail_grad[i]);
    }
    free(t->mail_act);
    free(t->mail_grad);
    free(t->act_in);
    free(t->grad_in);
    free(t->grad_out);
    free(t->chunk_out);
    free(t->act_req);
    free(t->grad_req);
    free(t->grad_pending);
    free(t->act_wire);
    free(t->grad_wire);
    ts_trace_destroy(t->trace);
    free(t->ready_after);
    free(t->norm_owner);
    free(t->window);
    free(t->positions);
    if (t->reg) ts_plugins_set_model(t->reg, NULL);
    free(t->pviews);
    free(t->pview_ptrs);
    free(t->mviews);
    free(t->core_reduce);
    free(t->opt_counts);
    free(t->stage_bubble);
    free(t->stage_peak_kib);
    ts_layout_plan_free(&t->plan);
    ts_schedule_free(&t->schedule);
    if (t->be && t->be->kind != TS_DEVICE_CPU) {
        t->be->free(t->tokens_dev);
        t->be->free(t->targets_dev);
    }
    ts_mem_free(t->tokens);
    ts_mem_free(t->targets);
    free(t->ctx);
    ts_optimizer_destroy(t->optim);
    ts_model_destroy(t->model);
    if (t->be && t->be->kind != TS_DEVICE_PLAN) ts_backend_close(t->be);
    ts_dataset_close(t->data);
    ts_dataset_close(t->val_data);
    free(t);
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
        if (!mul_fits(t->epochs, ts_dataset_num_windows(t->data, t->T), &limit))
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
    if (t->be->kind == TS_DEVICE_PLAN) return ts_backend_plan_stats(cat);
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
