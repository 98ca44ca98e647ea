/*
 * runtime.c — the model runtime (model.h): the parameter registry and its
 * flat buffers, this rank's blocks under the plan's placements, modules and
 * their pipeline chunks, the running of chunks, gathering and scattering the
 * unsharded model, and the architecture registry (arch.h).
 *
 * Not here: what any layer computes (layers.c, the architectures), the
 * optimizer (optim.c), the training loop (train.c), checkpoints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h"
#include "layers.h"
#include "phase.h" /* ts_phase_recompute: recomputed work counted apart */
#include "rng.h"

/* ---------------------------------------------------------------------------
 * The architecture registry
 * ------------------------------------------------------------------------- */
#define ARCH_MAX 16
static const ts_arch *arch_table[ARCH_MAX];
static int arch_count;

static void arch_builtin(void) {
    if (arch_count == 0) arch_table[arch_count++] = ts_arch_gpt2();
}

const ts_arch *ts_arch_find(const char *name) {
    arch_builtin();
    for (int i = 0; i < arch_count; i++)
        if (strcmp(arch_table[i]->name, name) == 0) return arch_table[i];
    return NULL;
}

ts_status ts_arch_register(const ts_arch *arch) {
    arch_builtin();
    if (!arch || arch->struct_size < sizeof(ts_arch) || !arch->name || !arch->declare_params ||
        !arch->declare_modules || !arch->flops)
        return ts_error(TS_ERR_INVALID, "model: an architecture table is incomplete");
    if (ts_arch_find(arch->name))
        return ts_error(TS_ERR_INVALID, "model: architecture '%s' is registered twice", arch->name);
    if (arch_count == ARCH_MAX)
        return ts_error(TS_ERR_INVALID, "model: more than %d architectures", ARCH_MAX);
    arch_table[arch_count++] = arch;
    return TS_OK;
}

const char *ts_arch_names(char *buf, size_t size) {
    arch_builtin();
    size_t j = 0;
    buf[0] = '\0';
    for (int i = 0; i < arch_count && j + 1 < size; i++)
        j += (size_t)snprintf(buf + j, size - j, "%s%s", i ? ", " : "", arch_table[i]->name);
    return buf;
}

/* ---------------------------------------------------------------------------
 * Shape checks, declarations
 * ------------------------------------------------------------------------- */
ts_status ts_model_config_check(const ts_model_config *c) {
    if (c->layers < 1)
        return ts_error(TS_ERR_CONFIG, "[model] layers = %d: must be at least 1", c->layers);
    if (c->d_model < 1)
        return ts_error(TS_ERR_CONFIG, "[model] d_model = %d: must be at least 1", c->d_model);
    if (c->heads < 1)
        return ts_error(TS_ERR_CONFIG, "[model] heads = %d: must be at least 1", c->heads);
    if (c->d_model % c->heads != 0)
        return ts_error(TS_ERR_CONFIG, "[model] heads = %d does not divide d_model = %d", c->heads,
                        c->d_model);
    if (c->vocab < 2)
        return ts_error(TS_ERR_CONFIG, "[model] vocab = %d: must be at least 2", c->vocab);
    if (c->padded_vocab < c->vocab)
        return ts_error(TS_ERR_CONFIG, "[model] padded_vocab = %d is smaller than vocab = %d",
                        c->padded_vocab, c->vocab);
    if (c->context < 1)
        return ts_error(TS_ERR_CONFIG, "[model] context = %d: must be at least 1", c->context);
    if (c->experts > 0 && (c->top_k < 1 || c->top_k > c->experts))
        return ts_error(TS_ERR_CONFIG,
                        "[model] top_k = %d: a token chooses 1 .. experts = %d experts", c->top_k,
                        c->experts);
    if (c->experts > 0 && (c->moe_every < 1 || c->expert_hidden < 1))
        return ts_error(TS_ERR_CONFIG, "[model] moe_every = %d and expert_hidden = %d must be >= 1",
                        c->moe_every, c->expert_hidden);
    return TS_OK;
}

static int param_table(const ts_arch *arch, const ts_model_config *cfg, char (*names)[TS_NAME_MAX],
                       int64_t (*shapes)[3], int *ndim) {
    int n = arch->declare_params(cfg, NULL);
    if (!names && !shapes && !ndim) return n;
    ts_param_decl *d = calloc((size_t)n, sizeof *d);
    if (!d) return -1;
    arch->declare_params(cfg, d);
    for (int i = 0; i < n; i++) {
        if (names) snprintf(names[i], TS_NAME_MAX, "%s", d[i].name);
        if (shapes)
            for (int k = 0; k < 3; k++)
                shapes[i][k] = k < d[i].ndim ? d[i].shape[k] : 1;
        if (ndim) ndim[i] = d[i].ndim;
    }
    free(d);
    return n;
}

int ts_model_param_table(const ts_model_config *cfg, char (*names)[TS_NAME_MAX],
                         int64_t (*shapes)[3], int *ndim) {
    return param_table(ts_arch_gpt2(), cfg, names, shapes, ndim);
}

int ts_model_param_table_of(const ts_model *m, char (*names)[TS_NAME_MAX], int64_t (*shapes)[3],
                            int *ndim) {
    return param_table(m->arch, &m->cfg, names, shapes, ndim);
}

double ts_model_flops_per_step(const ts_model_config *cfg, int B, int T) {
    return ts_arch_gpt2()->flops(cfg, B, T);
}

/* ---------------------------------------------------------------------------
 * Building a model
 * ------------------------------------------------------------------------- */
/* Writes the initial value of every element of p's block (as f32) into dst:
 * element (i, j, k) of the block is element (i, j, k) + block_offset of the
 * whole tensor, drawn from (seed, name, its global row-major index). */
static void param_init_values(float *dst, const ts_param *p, uint64_t seed) {
    int64_t n = ts_tensor_numel(&p->store);
    switch (p->init) {
    case TS_INIT_ZEROS: memset(dst, 0, (size_t)n * sizeof(float)); break;
    case TS_INIT_ONES:
        for (int64_t i = 0; i < n; i++)
            dst[i] = 1.0f;
        break;
    case TS_INIT_NORMAL: {
        uint64_t key = ts_rng_key(seed, p->store.name);
        int64_t ls[3] = {1, 1, 1}, gs[3] = {1, 1, 1};
        for (int d = 0; d < p->global_ndim; d++) {
            ls[d] = p->store.shape[d];
            gs[d] = p->global_shape[d];
        }
        const int64_t *off = p->store_offset;
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) {
            int64_t i2 = i % ls[2], i1 = (i / ls[2]) % ls[1], i0 = i / (ls[1] * ls[2]);
            int64_t g0 = i0 + off[0], g1 = i1 + off[1], g2 = i2 + off[2];
            uint64_t g = (uint64_t)((g0 * gs[1] + g1) * gs[2] + g2);
            dst[i] = g0 < p->init_rows ? p->init_std * ts_rng_normal(key, g) : 0.0f;
        }
        break;
    }
    }
}

/* The plan's entry for a declared parameter: its placement on each of the
 * model's axes, its pipeline stage, and this rank's blocks: as stored
 * (every cut) and as the layers use it (whole along the axes in
 * `provided_axes`, whose plugin presents it so). */
typedef struct param_blocks {
    int64_t use_off[3], use_shape[3];
    int64_t store_off[3], store_shape[3];
    unsigned provided;
} param_blocks;

static ts_status param_from_plan(const ts_model *m, const ts_layout_plan *plan,
                                 unsigned provided_axes, const ts_param_decl *d, ts_placement *on,
                                 int *stage, param_blocks *b) {
    memset(b, 0, sizeof *b);
    for (int k = 0; k < 3; k++) {
        b->use_shape[k] = b->store_shape[k] = k < d->ndim ? d->shape[k] : 1;
    }
    for (int a = 0; a < TS_MODEL_MAX_AXES; a++)
        on[a] = ts_placement_replicate();
    *stage = -1;
    if (!plan) return TS_OK;
    const ts_layout_plan_entry *e = ts_layout_plan_find((ts_layout_plan *)plan, d->name);
    if (!e) return ts_error(TS_ERR_INTERNAL, "model: %s is not in the layout plan", d->name);
    if (e->layout.ndim != d->ndim)
        return ts_error(TS_ERR_INVALID, "model: %s has %d dimensions in the plan, %d declared",
                        d->name, e->layout.ndim, d->ndim);
    *stage = e->stage;
    /* This rank's coordinate on every axis of the entry's layout: the
     * model's axes give theirs; any other axis (the pipeline's) must leave
     * the tensor whole. */
    int coords[TS_LAYOUT_MAX_AXES];
    for (int i = 0; i < e->layout.naxes; i++) {
        const ts_layout_axis *ax = &e->layout.axes[i];
        coords[i] = 0;
        int found = 0;
        for (int a = 0; a < m->naxes; a++)
            if (strcmp(m->axes[a].name, ax->name) == 0) {
                coords[i] = m->axes[a].coord;
                on[a] = ax->placement;
                found = 1;
            }
        if (!found && ax->size > 1 && ax->placement.kind != TS_PLACEMENT_REPLICATE) {
            char p[16];
            return ts_error(TS_ERR_INVALID,
                            "%s is placed %s over %s, an axis the model's tensors are not cut "
                            "along (stages are given by the plan's stage field)",
                            d->name, ts_placement_str(ax->placement, p, sizeof p), ax->name);
        }
    }
    int64_t off[TS_MAX_DIMS], shp[TS_MAX_DIMS];
    TS_TRY(ts_layout_local_block(&e->layout, coords, off, shp));
    for (int k = 0; k < d->ndim; k++) {
        b->store_off[k] = off[k];
        b->store_shape[k] = shp[k];
    }
    /* The layers' view: the same layout with the provided axes whole. */
    ts_layout use = e->layout;
    for (int i = 0; i < use.naxes; i++)
        for (int a = 0; a < m->naxes; a++)
            if ((provided_axes >> a & 1u) && strcmp(m->axes[a].name, use.axes[i].name) == 0 &&
                use.axes[i].placement.kind == TS_PLACEMENT_SHARD) {
                use.axes[i].placement = ts_placement_replicate();
                b->provided |= 1u << a;
                on[a] = ts_placement_replicate(); /* what the layers see */
            }
    TS_TRY(ts_layout_local_block(&use, coords, off, shp));
    for (int k = 0; k < d->ndim; k++) {
        b->use_off[k] = off[k];
        b->use_shape[k] = shp[k];
    }
    return TS_OK;
}

/* Module stages: a module runs on the stage of the parameters it owns (the
 * first module reading a parameter owns it). Virtual stage k runs as chunk
 * k / stages on the rank m->stage_order gives it (ts_stage_rank: k % stages
 * with Megatron-LM's interleaving). */
static ts_status model_stages(ts_model *m, const ts_module_decl *mods, const int *pstage,
                              const int *owner, int stages, int stage) {
    int vstage[TS_MODEL_MAX_MODULES], top = -1;
    for (int i = 0; i < m->nmodules; i++) {
        vstage[i] = -2; /* no owned parameter yet */
        for (int k = 0; k < mods[i].nparams; k++) {
            int p = mods[i].params[k];
            if (owner[p] != i) continue;
            if (vstage[i] != -2 && vstage[i] != pstage[p])
                return ts_error(TS_ERR_CONFIG,
                                "module %s has parameters on stages %d and %d: a module runs on "
                                "one stage",
                                mods[i].name, vstage[i], pstage[p]);
            vstage[i] = pstage[p];
        }
        if (vstage[i] == -2) vstage[i] = -1;
        if (vstage[i] > top) top = vstage[i];
    }
    m->stages = stages < 1 ? 1 : stages;
    m->chunks = 1;
    if (top < 0) { /* no stage assigned: the whole model here, one chunk */
        if (m->stages > 1)
            return ts_error(TS_ERR_PLUGIN,
                            "the pipeline axis has %d ranks but no plugin assigns the modules to "
                            "stages: nothing implements it",
                            m->stages);
        for (int i = 0; i < m->nmodules; i++)
            m->module_chunk[i] = 0;
        return TS_OK;
    }
    int vstages = top + 1;
    if (vstages % m->stages != 0)
        return ts_error(TS_ERR_CONFIG, "%d virtual stages do not divide over pp = %d", vstages,
                        m->stages);
    for (int i = 0; i < m->nmodules; i++)
        if (vstage[i] < 0 || (i > 0 && vstage[i] < vstage[i - 1]))
            return ts_error(TS_ERR_CONFIG,
                            "module %s is assigned to stage %d: stages must cover the modules "
                            "in order",
                            mods[i].name, vstage[i]);
    int seen[vstages];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < m->nmodules; i++)
        seen[vstage[i]] = 1;
    for (int k = 0; k < vstages; k++)
        if (!seen[k]) return ts_error(TS_ERR_CONFIG, "virtual stage %d has no module", k);
    m->chunks = vstages / m->stages;
    for (int i = 0; i < m->nmodules; i++)
        m->module_chunk[i] = ts_stage_rank(m->stage_order, m->stages, vstage[i]) == stage
                                 ? vstage[i] / m->stages
                                 : -1;
    return TS_OK;
}

/* The hidden state's placement on the model's axes, from the plan's act.x. */
static ts_status model_hidden_place(ts_model *m, const ts_layout_plan *plan) {
    for (int a = 0; a < TS_MODEL_MAX_AXES; a++)
        m->act[a] = ts_placement_replicate();
    if (!plan) return TS_OK;
    const ts_layout_plan_entry *e = ts_layout_plan_find((ts_layout_plan *)plan, "act.x");
    if (!e) return ts_error(TS_ERR_INTERNAL, "model: the plan has no act.x");
    for (int a = 0; a < m->naxes; a++) {
        int i = ts_layout_axis_index(&e->layout, m->axes[a].name);
        if (i < 0 || m->axes[a].cuts_batch) continue; /* the batch's own rows */
        ts_placement p = e->layout.axes[i].placement;
        if (p.kind == TS_PLACEMENT_REPLICATE || (p.kind == TS_PLACEMENT_SHARD && p.dim == 1)) {
            m->act[a] = p;
            continue;
        }
        char ps[16];
        return ts_error(TS_ERR_CONFIG,
                        "act.x is placed %s over %s; the hidden state between modules is "
                        "replicated or cut along the sequence (S(1)) over an axis whose ranks "
                        "read the same tokens",
                        ts_placement_str(p, ps, sizeof ps), m->axes[a].name);
    }
    return TS_OK;
}

static ts_status model_build_modules(ts_model *m, const ts_module_decl *mods, const int *local) {
    m->modules = calloc((size_t)m->nmodules, sizeof *m->modules);
    if (!m->modules) return ts_error(TS_ERR_NOMEM, "model: out of memory");
    for (int i = 0; i < m->nmodules; i++) {
        if (m->module_chunk[i] < 0) continue;
        ts_module *mod = calloc(1, sizeof *mod);
        if (!mod) return ts_error(TS_ERR_NOMEM, "model: out of memory");
        m->modules[i] = mod;
        mod->ops = mods[i].ops;
        mod->model = m;
        mod->index = i;
        snprintf(mod->name, sizeof mod->name, "%s", mods[i].name);
        for (int k = 0; k < mods[i].nparams; k++)
            mod->param_index[mod->nparams++] = local[mods[i].params[k]];
    }
    return TS_OK;
}

ts_status ts_model_create(const ts_model_config *cfg, ts_dtype dtype, uint64_t seed,
                          const ts_model_shard *shard, const ts_backend *be, ts_model **out) {
    return ts_model_create_arch(NULL, cfg, dtype, seed, shard, be, out);
}

/* This rank's parameters among the `ndecl` declared: those its modules
 * read (a module's chunk >= 0), each with its block from the plan (`blk`,
 * `on`), its offset in the flat buffers and its global offset (which counts
 * every parameter, local or not). local[p]: p's index in m->params, -1 when
 * it is not here. Sets nparams, numel and global_numel. */
static void model_local_params(ts_model *m, const ts_param_decl *decl, int ndecl,
                               const ts_module_decl *mods, const int *owner, const int *users,
                               const param_blocks *blk, ts_placement (*on)[TS_MODEL_MAX_AXES],
                               int *local) {
    int nmods = m->nmodules;
    size_t global = 0, total = 0;
    int n = 0;
    for (int p = 0; p < ndecl; p++) {
        size_t gcnt = 1, cnt = 1;
        for (int d = 0; d < decl[p].ndim; d++) {
            gcnt *= (size_t)decl[p].shape[d];
            cnt *= (size_t)blk[p].store_shape[d];
        }
        int here = 0, all = 1;
        for (int i = 0; i < nmods; i++)
            for (int k = 0; k < mods[i].nparams; k++)
                if (mods[i].params[k] == p) {
                    here |= m->module_chunk[i] >= 0;
                    all &= m->module_chunk[i] >= 0;
                }
        local[p] = -1;
        if (here) {
            ts_param *q = &m->params[n];
            local[p] = n++;
            q->global_offset = global;
            q->tied_copy = m->module_chunk[owner[p]] < 0;
            q->tied_split = users[p] > 1 && !all;
            if (q->tied_split) m->tied_split = 1;
            q->global_ndim = decl[p].ndim;
            for (int d = 0; d < 3; d++) {
                q->global_shape[d] = d < decl[p].ndim ? decl[p].shape[d] : 1;
                q->block_offset[d] = blk[p].use_off[d];
                q->value.shape[d] = blk[p].use_shape[d];
                q->store_offset[d] = blk[p].store_off[d];
                q->store.shape[d] = blk[p].store_shape[d];
            }
            q->provided = blk[p].provided;
            memcpy(q->on, on[p], sizeof q->on);
            q->offset = total;
            q->decay = decl[p].decay;
            q->expert = decl[p].expert;
            q->init = decl[p].init;
            q->init_std = decl[p].std;
            q->init_rows = decl[p].rows;
            snprintf(q->value.name, sizeof q->value.name, "%s", decl[p].name);
            total += cnt;
        }
        global += gcnt;
    }
    m->nparams = n;
    m->numel = total;
    m->global_numel = global;
}

/* The parameters' tensors over the flat buffers (allocated here): what this
 * rank stores and the layers' view of it, for the values and the
 * gradients; and which gradients are partial sums over an axis. */
static ts_status model_param_tensors(ts_model *m) {
    ts_dtype dtype = m->dtype;
    /* A replicated parameter applied to rows that an axis cuts has a
     * partial gradient over it. */
    for (int i = 0; i < m->nparams; i++)
        for (int a = 0; a < m->naxes; a++)
            if (m->params[i].on[a].kind == TS_PLACEMENT_REPLICATE && !m->axes[a].cuts_batch &&
                m->act[a].kind == TS_PLACEMENT_SHARD)
                m->params[i].grad_partial |= 1u << a;
    size_t esz = ts_dtype_size(dtype);
    m->param_data = m->be->alloc(TS_MEM_PARAMS, m->numel * esz);
    m->grad_data = m->be->alloc(TS_MEM_GRADS, m->numel * sizeof(float));
    if (!m->param_data || !m->grad_data) return TS_ERR_NOMEM;
    for (int i = 0; i < m->nparams; i++) {
        ts_param *p = &m->params[i];
        int64_t shape[3] = {p->value.shape[0], p->value.shape[1], p->value.shape[2]};
        int64_t sshape[3] = {p->store.shape[0], p->store.shape[1], p->store.shape[2]};
        char name[TS_NAME_MAX];
        snprintf(name, sizeof name, "%s", p->value.name);
        ts_tensor_view(&p->store, name, dtype, p->global_ndim, sshape,
                       (char *)m->param_data + p->offset * esz, TS_MEM_PARAMS);
        ts_tensor_view(&p->store_grad, name, TS_F32, p->global_ndim, sshape,
                       m->grad_data + p->offset, TS_MEM_GRADS);
        /* The layers' tensors: the stored ones, or (provided whole) empty
         * until the provider's module hook fills them. */
        ts_tensor_view(&p->value, name, dtype, p->global_ndim, shape,
                       p->provided ? NULL : p->store.data, TS_MEM_PARAMS);
        ts_tensor_view(&p->grad, name, TS_F32, p->global_ndim, shape,
                       p->provided ? NULL : p->store_grad.data, TS_MEM_GRADS);
        p->value.device = p->grad.device = p->store.device = p->store_grad.device = m->be->kind;
    }
    return TS_OK;
}

/* The parameters' initial values (seeded by `seed`, drawn as the
 * declarations say). */
static ts_status model_init_values(ts_model *m, uint64_t seed) {
    ts_dtype dtype = m->dtype;
    size_t esz = ts_dtype_size(dtype);
    /* Initialise on the host: f32 directly, or through a staging copy rounded
     * to bf16; on a device, into a host image of the parameters uploaded at
     * the end. A dry run (`tessera plan`) has no values to draw. */
    if (m->be->kind == TS_DEVICE_PLAN) return TS_OK;
    int on_host = m->be->kind == TS_DEVICE_CPU;
    char *image = on_host ? m->param_data : ts_mem_alloc(TS_MEM_OTHER, m->numel * esz);
    if (!image) return TS_ERR_NOMEM;
    ts_status st = TS_OK;
    for (int i = 0; i < m->nparams && !st; i++) {
        ts_param *p = &m->params[i];
        int64_t cnt = ts_tensor_numel(&p->store);
        void *dst = image + p->offset * esz;
        if (dtype == TS_F32) {
            param_init_values(dst, p, seed);
        } else {
            float *tmp = ts_mem_alloc(TS_MEM_OTHER, (size_t)cnt * sizeof(float));
            if (!tmp) {
                st = TS_ERR_NOMEM;
                break;
            }
            param_init_values(tmp, p, seed);
            /* Host memory either way: the CPU's conversion. */
            st = ts_backend_cpu()->f32_to_bf16(dst, tmp, (size_t)cnt);
            ts_mem_free(tmp);
        }
    }
    if (!on_host && !st) st = m->be->from_host(m->param_data, image, m->numel * esz);
    if (!on_host) ts_mem_free(image);
    return st;
}

ts_status ts_model_create_arch(const ts_arch *arch, const ts_model_config *cfg, ts_dtype dtype,
                               uint64_t seed, const ts_model_shard *shard, const ts_backend *be,
                               ts_model **out) {
    *out = NULL;
    if (!arch) arch = ts_arch_gpt2();
    TS_TRY(ts_model_config_check(cfg));
    if (dtype != TS_F32 && dtype != TS_BF16)
        return ts_error(TS_ERR_INVALID, "model: parameters must be f32 or bf16, not %s",
                        ts_dtype_name(dtype));
    int ndecl = arch->declare_params(cfg, NULL);
    int nmods = arch->declare_modules(cfg, NULL);
    if (nmods > TS_MODEL_MAX_MODULES)
        return ts_error(TS_ERR_CONFIG, "model: %d modules, at most %d", nmods,
                        TS_MODEL_MAX_MODULES);
    ts_model *m = calloc(1, sizeof *m);
    ts_param_decl *decl = calloc((size_t)ndecl, sizeof *decl);
    ts_module_decl *mods = calloc((size_t)nmods, sizeof *mods);
    int *owner = calloc((size_t)ndecl, sizeof *owner),
        *users = calloc((size_t)ndecl, sizeof *users);
    int *pstage = calloc((size_t)ndecl, sizeof *pstage),
        *local = calloc((size_t)ndecl, sizeof *local);
    ts_status st = TS_OK;
    if (!m || !decl || !mods || !owner || !users || !pstage || !local) {
        st = ts_error(TS_ERR_NOMEM, "model: out of memory");
        goto done;
    }
    m->arch = arch;
    m->cfg = *cfg;
    m->be = be ? be : ts_backend_cpu();
    m->dtype = dtype;
    m->nmodules = nmods;
    if (shard) {
        m->naxes = shard->naxes;
        memcpy(m->axes, shard->axes, sizeof m->axes);
        m->stage_order = shard->stage_order;
    }
    arch->declare_params(cfg, decl);
    arch->declare_modules(cfg, mods);
    for (int p = 0; p < ndecl; p++)
        owner[p] = -1;
    for (int i = 0; i < nmods; i++)
        for (int k = 0; k < mods[i].nparams; k++) {
            int p = mods[i].params[k];
            TS_ASSERT(p >= 0 && p < ndecl);
            if (owner[p] < 0) owner[p] = i;
            users[p]++;
        }
    const ts_layout_plan *plan = shard ? shard->plan : NULL;
    m->params = calloc((size_t)ndecl, sizeof *m->params);
    if (!m->params) {
        st = ts_error(TS_ERR_NOMEM, "model: out of memory");
        goto done;
    }
    /* Placements and stages from the plan. */
    param_blocks *blk = calloc((size_t)ndecl, sizeof *blk);
    ts_placement(*on)[TS_MODEL_MAX_AXES] = calloc((size_t)ndecl, sizeof *on);
    if (!blk || !on) st = ts_error(TS_ERR_NOMEM, "model: out of memory");
    for (int p = 0; p < ndecl && !st; p++)
        st = param_from_plan(m, plan, shard ? shard->provided_axes : 0, &decl[p], on[p], &pstage[p],
                             &blk[p]);
    if (!st) st = model_hidden_place(m, plan);
    if (!st)
        st = model_stages(m, mods, pstage, owner, shard ? shard->stages : 1,
                          shard ? shard->stage : 0);
    if (!st) model_local_params(m, decl, ndecl, mods, owner, users, blk, on, local);
    free(blk);
    free(on);
    if (st) goto done;
    st = model_param_tensors(m);
    if (st) goto done;
    st = model_build_modules(m, mods, local);
    if (!st && arch->check) st = arch->check(m);
    if (st) goto done;
    st = model_init_values(m, seed);
done:
    free(decl);
    free(mods);
    free(owner);
    free(users);
    free(pstage);
    free(local);
    if (st) {
        ts_model_destroy(m);
        return st;
    }
    *out = m;
    return TS_OK;
}

void ts_model_destroy(ts_model *m) {
    if (!m) return;
    ts_moe_stats_free(&m->moe_stats);
    for (int i = 0; m->modules && i < m->nmodules; i++) {
        ts_module *mod = m->modules[i];
        if (!mod) continue;
        m->defer_weights = 0;
        for (int s = 0; s < mod->saved.cap; s++) {
            ts_module_release(mod, s);
            free(mod->saved.slot[s].jobs);
        }
        ts_moe_layer_free(mod);
        free(mod->saved.slot);
        free(mod);
    }
    free(m->modules);
    if (m->be) {
        m->be->free(m->param_data);
        m->be->free(m->grad_data);
        m->be->free(m->work);
        m->be->free(m->comm_stage);
        for (int i = 0; i < 4; i++)
            m->be->free(m->stage[i]);
        m->be->free(m->mm_work);
    }
    ts_mem_free(m->host_stage);
    free(m->positions);
    free(m->params);
    free(m);
}

ts_param *ts_model_param(ts_model *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].value.name, name) == 0) return &m->params[i];
    return NULL;
}

ts_status ts_model_zero_grad(ts_model *m) {
    size_t b = m->grad_zero_begin, e = m->grad_zero_end < m->numel ? m->grad_zero_end : m->numel;
    m->grad_zero_begin = m->grad_zero_end = 0;
    if (b >= e) return m->be->zero(m->grad_data, m->numel * sizeof(float));
    if (b > 0) TS_TRY(m->be->zero(m->grad_data, b * sizeof(float)));
    if (e < m->numel) TS_TRY(m->be->zero(m->grad_data + e, (m->numel - e) * sizeof(float)));
    return TS_OK;
}

float *ts_model_param_f32(ts_model *m) {
    return m->dtype == TS_F32 ? (float *)m->param_data : NULL;
}

/* ---------------------------------------------------------------------------
 * The unsharded model
 * ------------------------------------------------------------------------- */
/* Copies the block of p (offset `boff`, p's local extents) between its
 * place in the whole tensor (`whole`, the global layout) and a contiguous
 * block (`block`), in the given direction. */
static void param_block_copy(const ts_param *p, const int64_t *boff, float *whole, float *block,
                             int to_block) {
    int64_t ls[3] = {1, 1, 1}, gs[3] = {1, 1, 1};
    for (int d = 0; d < p->global_ndim; d++) {
        ls[d] = p->store.shape[d];
        gs[d] = p->global_shape[d];
    }
    for (int64_t i0 = 0; i0 < ls[0]; i0++)
        for (int64_t i1 = 0; i1 < ls[1]; i1++) {
            float *g = whole + ((i0 + boff[0]) * gs[1] + i1 + boff[1]) * gs[2] + boff[2];
            float *b = block + (i0 * ls[1] + i1) * ls[2];
            if (to_block)
                memcpy(b, g, (size_t)ls[2] * sizeof(float));
            else
                memcpy(g, b, (size_t)ls[2] * sizeof(float));
        }
}

ts_status ts_model_gather(ts_model *m, const float *local, float *full) {
    for (int i = 0; i < m->nparams; i++) {
        ts_param *p = &m->params[i];
        size_t n = (size_t)ts_tensor_numel(&p->store), total = 1;
        float *whole = full + p->global_offset;
        if (p->tied_copy) continue; /* the owner's rank writes it */
        for (int d = 0; d < p->global_ndim; d++)
            total *= (size_t)p->global_shape[d];
        if (n == total) {
            memcpy(whole, local + p->offset, n * sizeof(float));
            continue;
        }
        /* Cut over one or more axes, evenly or not: every rank writes its
         * block into zeros and the blocks are summed over each axis that
         * cuts it, as integers (the bits of a float plus zeros are the same
         * bits: -0.0 and NaN payloads survive). */
        memset(whole, 0, total * sizeof(float));
        param_block_copy(p, p->store_offset, whole, (float *)local + p->offset, 0);
        for (int a = 0; a < m->naxes; a++) {
            if (p->on[a].kind != TS_PLACEMENT_SHARD && !(p->provided >> a & 1u)) continue;
            const ts_model_axis *ax = &m->axes[a];
            TS_TRY(ts_comm_all_reduce(ax->host ? ax->host : ax->comm, whole, whole, total, TS_I32,
                                      TS_REDUCE_SUM));
        }
    }
    return TS_OK;
}

void ts_model_scatter(const ts_model *m, const float *full, float *local) {
    for (int i = 0; i < m->nparams; i++) {
        const ts_param *p = &m->params[i];
        param_block_copy(p, p->store_offset, (float *)full + p->global_offset, local + p->offset,
                         1);
    }
}

/* ---------------------------------------------------------------------------
 * Running the modules
 * ------------------------------------------------------------------------- */
int ts_model_chunk_first(const ts_model *m, int chunk) {
    return m->module_chunk[0] == chunk;
}

int ts_model_chunk_last(const ts_model *m, int chunk) {
    return m->module_chunk[m->nmodules - 1] == chunk;
}

void ts_model_hidden_shape(const ts_model *m, int B, int T, int64_t shape[3]) {
    ts_place p = ts_place_replicated();
    for (int a = 0; a < m->naxes; a++)
        p.on[a] = m->act[a];
    shape[0] = B;
    shape[1] = ts_layer_rows(m, &p, T);
    shape[2] = m->cfg.d_model;
}

/* ---------------------------------------------------------------------------
 * Activation recomputation
 * ------------------------------------------------------------------------- */
/* The modules of chunk c whose kind can recompute in `mode`, in order. */
static int recompute_modules(const ts_model *m, int c, ts_recompute mode, int *idx) {
    int n = 0;
    for (int i = 0; i < m->nmodules; i++)
        if (m->module_chunk[i] == c && (m->modules[i]->ops->recompute & (1u << mode))) idx[n++] = i;
    return n;
}

int ts_model_recompute_modules(const ts_model *m, ts_recompute mode) {
    int idx[TS_MODEL_MAX_MODULES], least = -1;
    for (int c = 0; c < m->chunks; c++) {
        int n = recompute_modules(m, c, mode, idx);
        if (least < 0 || n < least) least = n;
    }
    return least < 0 ? 0 : least;
}

ts_status ts_model_set_recompute(ts_model *m, ts_recompute mode, int layers, int block) {
    for (int i = 0; i < m->nmodules; i++)
        if (m->modules[i]) {
            m->modules[i]->recompute = TS_RECOMPUTE_NONE;
            m->modules[i]->group_first = i;
        }
    if (mode == TS_RECOMPUTE_NONE) return TS_OK;
    TS_ASSERT(layers >= 0 && layers <= ts_model_recompute_modules(m, mode));
    for (int c = 0; c < m->chunks; c++) {
        int idx[TS_MODEL_MAX_MODULES], n = recompute_modules(m, c, mode, idx);
        /* uniform: groups of `layers` modules (1 by default), each keeping
         * only its input; block: the first `layers` modules (all by
         * default), each on its own (Megatron-LM's recompute methods). A
         * group never spans a module that cannot recompute. */
        int count = block ? (layers ? layers : n) : n;
        int group = block || mode != TS_RECOMPUTE_FULL ? 1 : (layers ? layers : 1);
        for (int j = 0, first = -1, size = 0; j < count; j++) {
            ts_module *mod = m->modules[idx[j]];
            if (mod->ops->can_recompute) TS_TRY(mod->ops->can_recompute(mod, mode));
            if (size == group || j == 0 || idx[j] != idx[j - 1] + 1) first = idx[j], size = 0;
            mod->recompute = mode;
            mod->group_first = first;
            size++;
        }
    }
    return TS_OK;
}

/* Calls the module hook of `kind` for module i, if any. */
static ts_status model_hook(ts_step_ctx *ctx, int i, int kind) {
    return ctx->module_hook ? ctx->module_hook(ctx->module_done_user, i, kind) : TS_OK;
}

/* Runs the forwards of modules first .. last (a FULL group of one chunk,
 * their state dropped) again for ctx's micro-batch, from first's saved
 * input, inside the backward of `last`: each with its module hooks, but
 * `last`, whose BEFORE_BACKWARD hook comes first instead (its parameters
 * serve its forward and its backward). Exactly the first forwards: the same
 * inputs, the same kernels, the collectives again, decisions reused. */
static ts_status model_recompute(ts_model *m, ts_step_ctx *ctx, int first, int last) {
    int mb = ctx->mb;
    ts_module *head = m->modules[first];
    const float *in = ts_module_saved_input(head, mb);
    if (!in) return TS_ERR_NOMEM;
    ts_module_slot link = head->saved.slot[mb];
    int64_t shape[3];
    ts_model_hidden_shape(m, ctx->B, ctx->T, shape);
    ts_tensor x, y;
    ts_tensor_view(&x, "recompute.in", TS_F32, 3, shape, (float *)in, TS_MEM_ACTS);
    x.device = m->be->kind;
    int in_backward = m->in_backward, phase = ts_phase_recompute(1);
    m->in_backward = 0; /* its collectives exactly as in the forward */
    ctx->recompute = 1;
    ts_status st = TS_OK;
    for (int j = first; j <= last && !st; j++) {
        ts_module *mod = m->modules[j];
        ts_module_drop_output(mod, mb); /* the group's last kept it: made again */
        st = model_hook(ctx, j, j < last ? 0 : 2);
        if (!st) st = mod->ops->forward(mod, ctx, &x, &y);
        if (!st && j < last) st = model_hook(ctx, j, 1);
        if (st) break;
        if (j == first) { /* its input as the first forward found it */
            ts_module_slot *s = &head->saved.slot[mb];
            s->input = link.input;
            s->producer = link.producer;
            s->input_offset = link.input_offset;
        } else {
            st = ts_module_hand_over(m->modules[j - 1], mod, mb);
        }
        if (!st && j < last) st = ts_module_pack(mod, mb);
        x = y;
    }
    ctx->recompute = 0;
    m->in_backward = in_backward;
    ts_phase_recompute(phase);
    return st;
}

ts_status ts_model_forward_chunk(ts_model *m, ts_step_ctx *ctx, int chunk, const ts_tensor *x,
                                 ts_tensor *y) {
    ts_tensor cur, next;
    if (x)
        cur = *x;
    else
        memset(&cur, 0, sizeof cur);
    memset(y, 0, sizeof *y);
    int ran[TS_MODEL_MAX_MODULES], nran = 0;
    for (int i = 0; i < m->nmodules; i++) {
        if (m->module_chunk[i] != chunk) continue;
        ts_module *mod = m->modules[i];
        ts_status st = model_hook(ctx, i, 0);
        if (!st) st = mod->ops->forward(mod, ctx, &cur, &next);
        if (!st) st = model_hook(ctx, i, 1);
        /* The module's state waits for its backward (packed in bf16), or,
         * recomputed (FULL), is dropped. The last module's state, the
         * logits, is not packed: its backward follows soon on the same
         * stage, and packing would hold it twice meanwhile. */
        if (!st && mod->recompute == TS_RECOMPUTE_FULL)
            ts_module_drop(mod, ctx->mb);
        else if (!st && i < m->nmodules - 1)
            st = ts_module_pack(mod, ctx->mb);
        /* The previous module's output has been consumed: it waits for
         * this module's backward, or, read only inside a FULL group, is
         * dropped (the group's recompute makes it again). */
        if (!st && nran > 0) {
            ts_module *prev = m->modules[ran[nran - 1]];
            if (prev->recompute == TS_RECOMPUTE_FULL && mod->recompute == TS_RECOMPUTE_FULL &&
                mod->group_first == prev->group_first)
                ts_module_drop_output(prev, ctx->mb);
            st = ts_module_hand_over(prev, mod, ctx->mb);
        }
        if (st) {
            for (int k = 0; k < nran; k++)
                ts_module_release(m->modules[ran[k]], ctx->mb);
            ts_module_release(m->modules[i], ctx->mb);
            return st;
        }
        ran[nran++] = i;
        cur = next;
    }
    if (nran == 0) return ts_error(TS_ERR_INTERNAL, "model: chunk %d has no module here", chunk);
    *y = cur;
    return TS_OK;
}

/* The modules of chunk `chunk` on this rank, in model order: their count. */
static int chunk_modules(const ts_model *m, int chunk, int *idx) {
    int cnt = 0;
    for (int i = 0; i < m->nmodules; i++)
        if (m->module_chunk[i] == chunk) idx[cnt++] = i;
    if (cnt == 0) ts_error(TS_ERR_INTERNAL, "model: chunk %d has no module here", chunk);
    return cnt;
}

/* After module i's backward is whole (its weight gradients too): the module
 * hooks AFTER_BACKWARD, then the module-done callback. */
static ts_status model_backward_done(ts_step_ctx *ctx, int i) {
    TS_TRY(model_hook(ctx, i, 3));
    return ctx->module_done ? ctx->module_done(ctx->module_done_user, i) : TS_OK;
}

/* The backward of a chunk; with `defer` its modules' weight gradients are
 * recorded for ts_model_backward_weight_chunk, which then finishes each
 * module. */
static ts_status model_backward(ts_model *m, ts_step_ctx *ctx, int chunk, const ts_tensor *dy,
                                ts_tensor *dx, int defer) {
    m->grad_zero_begin = m->grad_zero_end = 0; /* gradients are written from here */
    int64_t shape[3];
    ts_model_hidden_shape(m, ctx->B, ctx->T, shape);
    size_t n = (size_t)(shape[0] * shape[1] * shape[2]);
    int idx[TS_MODEL_MAX_MODULES], cnt = chunk_modules(m, chunk, idx);
    if (cnt == 0) return TS_ERR_INTERNAL;
    /* Between the modules of the chunk, two buffers alternate. */
    ts_backend_tag("gradients between modules (f32)");
    float *buf = cnt > 1 ? m->be->alloc(TS_MEM_ACTS, 2 * n * sizeof(float)) : NULL;
    ts_backend_tag(NULL);
    if (cnt > 1 && !buf) return TS_ERR_NOMEM;
    ts_tensor grads[2];
    ts_tensor_view(&grads[0], "dx0", TS_F32, 3, shape, buf, TS_MEM_ACTS);
    ts_tensor_view(&grads[1], "dx1", TS_F32, 3, shape, buf ? buf + n : NULL, TS_MEM_ACTS);
    grads[0].device = grads[1].device = m->be->kind;
    ts_status st = TS_OK;
    const ts_tensor *in = dy;
    m->in_backward = 1;
    for (int k = cnt - 1; k >= 0 && !st; k--) {
        int i = idx[k];
        ts_module *mod = m->modules[i];
        ts_tensor *out = k == 0 ? dx : &grads[k % 2];
        /* A FULL module whose state was dropped: its group's forwards run
         * again first (BEFORE_BACKWARD among them). */
        if (mod->recompute == TS_RECOMPUTE_FULL && !ts_module_holds_state(mod, ctx->mb))
            st = model_recompute(m, ctx, mod->group_first, i);
        else
            st = model_hook(ctx, i, 2);
        m->current = mod;
        m->current_mb = ctx->mb;
        m->defer_weights = defer;
        if (!st) st = mod->ops->backward(mod, ctx, in, out);
        m->defer_weights = 0;
        m->current = NULL;
        if (!st && !defer) st = model_backward_done(ctx, i);
        in = out;
    }
    m->in_backward = 0;
    m->be->free(buf);
    return st;
}

ts_status ts_model_backward_chunk(ts_model *m, ts_step_ctx *ctx, int chunk, const ts_tensor *dy,
                                  ts_tensor *dx) {
    return model_backward(m, ctx, chunk, dy, dx, 0);
}

ts_status ts_model_backward_input_chunk(ts_model *m, ts_step_ctx *ctx, int chunk,
                                        const ts_tensor *dy, ts_tensor *dx) {
    return model_backward(m, ctx, chunk, dy, dx, 1);
}

ts_status ts_model_backward_weight_chunk(ts_model *m, ts_step_ctx *ctx, int chunk) {
    int idx[TS_MODEL_MAX_MODULES], cnt = chunk_modules(m, chunk, idx);
    if (cnt == 0) return TS_ERR_INTERNAL;
    m->grad_zero_begin = m->grad_zero_end = 0;
    ts_status st = TS_OK;
    for (int k = cnt - 1; k >= 0 && !st; k--) {
        st = ts_module_run_deferred(m->modules[idx[k]], ctx->mb);
        if (!st) st = model_backward_done(ctx, idx[k]);
    }
    return st;
}

ts_status ts_model_forward(ts_model *m, ts_step_ctx *ctx) {
    if (m->stages > 1 || m->chunks > 1)
        return ts_error(TS_ERR_INTERNAL, "model: whole-model forward on a pipeline stage");
    ts_tensor y;
    return ts_model_forward_chunk(m, ctx, 0, NULL, &y);
}

ts_status ts_model_backward(ts_model *m, ts_step_ctx *ctx) {
    return ts_model_backward_chunk(m, ctx, 0, NULL, NULL);
}

ts_status ts_model_forward_backward(ts_model *m, ts_step_ctx *ctx) {
    TS_TRY(ts_model_forward(m, ctx));
    return ts_model_backward(m, ctx);
}

ts_status ts_model_next_logits(ts_model *m, const int32_t *tokens, int T, float *logits) {
    if (!m->arch->last_logits || m->arch->struct_size < sizeof(ts_arch))
        return ts_error(TS_ERR_INVALID, "sample: architecture %s cannot be sampled", m->arch->name);
    if (m->stages > 1 || m->chunks > 1 || m->numel != m->global_numel)
        return ts_error(TS_ERR_INVALID,
                        "sample: this rank holds part of the model; sample on one rank (tessera "
                        "sample loads a checkpoint of any topology)");
    if (T < 1 || T > m->cfg.context)
        return ts_error(TS_ERR_INVALID, "sample: %d tokens, the context holds 1..%d", T,
                        m->cfg.context);
    const ts_backend *be = m->be;
    int32_t *host = malloc((size_t)T * 2 * sizeof(int32_t));
    int32_t *dev = be->kind == TS_DEVICE_CPU ? host : be->alloc(TS_MEM_OTHER, (size_t)T * 2 * 4);
    if (!host || !dev) {
        free(host);
        if (dev && dev != host) be->free(dev);
        return ts_error(TS_ERR_NOMEM, "sample: out of memory");
    }
    memcpy(host, tokens, (size_t)T * sizeof(int32_t));
    for (int i = 0; i < T; i++)
        host[T + i] = -1; /* no targets: nothing is scored */
    ts_status st = dev == host ? TS_OK : be->from_host(dev, host, (size_t)T * 2 * sizeof(int32_t));
    ts_step_ctx ctx = {.mb = 0,
                       .B = 1,
                       .T = T,
                       .tokens = dev,
                       .targets = dev + T,
                       .targets_host = host + T,
                       .micro_batches = 1};
    if (!st) st = ts_model_forward(m, &ctx);
    if (!st) st = m->arch->last_logits(m, 0, T, logits);
    for (int i = 0; i < m->nmodules; i++)
        if (m->modules[i]) ts_module_release(m->modules[i], 0);
    if (dev != host) be->free(dev);
    free(host);
    return st;
}

ts_status ts_model_keep_input(ts_model *m, const ts_step_ctx *ctx, int chunk, int *kept) {
    *kept = 0;
    if (m->dtype != TS_BF16) return TS_OK;
    int64_t shape[3];
    ts_model_hidden_shape(m, ctx->B, ctx->T, shape);
    for (int i = 0; i < m->nmodules; i++) {
        if (!m->modules[i] || m->module_chunk[i] != chunk) continue;
        TS_TRY(
            ts_module_copy_input(m->modules[i], ctx->mb, (size_t)(shape[0] * shape[1] * shape[2])));
        *kept = 1;
        return TS_OK;
    }
    return TS_OK;
}

ts_status ts_model_output_sent(ts_model *m, int mb, int chunk) {
    for (int i = m->nmodules - 1; i >= 0; i--) {
        if (!m->modules[i] || m->module_chunk[i] != chunk) continue;
        /* No module here reads it; a FULL module makes it again. */
        if (m->modules[i]->recompute == TS_RECOMPUTE_FULL) {
            ts_module_drop_output(m->modules[i], mb);
            return TS_OK;
        }
        return ts_module_pack_output(m->modules[i], mb);
    }
    return TS_OK;
}

void ts_model_release_chunk(ts_model *m, int mb, int chunk) {
    for (int i = 0; i < m->nmodules; i++)
        if (m->modules[i] && m->module_chunk[i] == chunk) ts_module_release(m->modules[i], mb);
}

ts_status ts_model_loss(ts_model *m, ts_step_ctx *ctx, double *mean_loss) {
    double before = ctx->loss_sum;
    int64_t valid_before = ctx->valid_tokens;
    TS_TRY(ts_model_forward(m, ctx));
    for (int i = 0; i < m->nmodules; i++)
        if (m->modules[i]) ts_module_release(m->modules[i], ctx->mb);
    int64_t valid = ctx->valid_tokens - valid_before;
    *mean_loss = valid > 0 ? (ctx->loss_sum - before) / (double)valid : 0.0;
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * The layout plan
 * ------------------------------------------------------------------------- */
static ts_status plan_entry(ts_layout_plan *plan, const ts_mesh *mesh, const char *name, int ndim,
                            const int64_t *shape, ts_plan_kind kind, int expert) {
    ts_layout l;
    TS_TRY(ts_layout_init(&l, ndim, shape));
    /* The dense mesh, or the expert mesh for experts' weights (parallel
     * folding: both cover the same ranks, only the pipeline is shared). */
    const char *axes[TS_LAYOUT_MAX_AXES];
    int n =
        ts_mesh_axes_of(mesh, expert ? TS_MESH_EXPERT : TS_MESH_DENSE, axes, TS_LAYOUT_MAX_AXES);
    if (n > TS_LAYOUT_MAX_AXES)
        return ts_error(TS_ERR_INVALID, "layout plan: the mesh has %d axes, a layout at most %d", n,
                        TS_LAYOUT_MAX_AXES);
    for (int i = 0; i < n; i++)
        TS_TRY(
            ts_layout_add_axis(&l, axes[i], ts_mesh_size(mesh, axes[i]), ts_placement_replicate()));
    TS_TRY(ts_layout_plan_add(plan, name, &l, -1));
    ts_layout_plan_find(plan, name)->kind = kind;
    return TS_OK;
}

ts_status ts_model_layout_plan(const ts_model_config *cfg, int global_batch, int T,
                               const ts_mesh *mesh, ts_layout_plan *plan) {
    return ts_model_layout_plan_arch(NULL, cfg, global_batch, T, mesh, plan);
}

ts_status ts_model_layout_plan_arch(const ts_arch *arch, const ts_model_config *cfg,
                                    int global_batch, int T, const ts_mesh *mesh,
                                    ts_layout_plan *plan) {
    if (!arch) arch = ts_arch_gpt2();
    int64_t data[2] = {global_batch, T}, act[3] = {global_batch, T, cfg->d_model};
    TS_TRY(plan_entry(plan, mesh, "data.tokens", 2, data, TS_PLAN_DATA, 0));
    TS_TRY(plan_entry(plan, mesh, "data.targets", 2, data, TS_PLAN_DATA, 0));
    TS_TRY(plan_entry(plan, mesh, "act.x", 3, act, TS_PLAN_ACTIVATION, 0));
    int n = arch->declare_params(cfg, NULL);
    ts_param_decl *decl = calloc((size_t)n, sizeof *decl);
    if (!decl) return ts_error(TS_ERR_NOMEM, "model: out of memory");
    arch->declare_params(cfg, decl);
    ts_status st = TS_OK;
    for (int i = 0; i < n && !st; i++)
        st = plan_entry(plan, mesh, decl[i].name, decl[i].ndim, decl[i].shape, TS_PLAN_PARAM,
                        decl[i].expert);
    free(decl);
    return st;
}
