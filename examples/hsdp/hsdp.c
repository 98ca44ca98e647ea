/*
 * hsdp.c — tessera-hsdp.so: hybrid sharded data parallelism, an out-of-tree
 * strategy with two axes of its own, built against the installed SDK alone
 * (plugin ABI 1.2). PyTorch FSDP's HYBRID_SHARD (Zhao et al., VLDB 2023)
 * and the hierarchical partitioning of DeepSpeed's ZeRO++ (hpZ; Wang et
 * al., 2023) do the same.
 *
 * The world is cut into `replicate` groups of `shard` ranks (a node's GPUs
 * are one group). Both axes cut the batch by sequences. Inside a group the
 * model state is sharded as ZeRO stage 3 shards it: every parameter is
 * stored cut over `shard` (TS_PROVIDE_PARAM_STORAGE), its gradient and its
 * optimizer state with it; across the groups everything is replicated.
 *  - before each module's forward and again before its backward its
 *    parameters are all-gathered over `shard` (`prefetch` modules ahead)
 *    into whole tensors, released after use (reshard_after_forward = false
 *    keeps them from the forward to the backward);
 *  - after the module's last backward of the step each whole gradient is
 *    reduce-scattered over `shard` (started at once; waited when the bytes
 *    in flight pass bucket_mb, or at the optimizer step), and the block is
 *    then all-reduced over `replicate` (TS_PROVIDE_GRAD_REDUCTION on both
 *    axes) and added into the stored gradient;
 *  - the optimizer updates the stored blocks: its state is cut over
 *    `shard` (register_optimizer_state: each rank's range is its whole
 *    buffer of blocks, which is already its own).
 *
 * Communication per step (P the bytes of the parameters, f32): an
 * all-gather of 2P over `shard` (forward and backward), a reduce-scatter of
 * P over `shard`, an all-reduce of P/shard over `replicate`. Memory per
 * rank: parameters, gradients and the two moments of P/shard each (their
 * blocks), plus the modules gathered at once.
 *
 * What it does not do: compose with cp (the gradients would be partial over
 * cp too) or with a dp axis of more than one rank (dp, and zero with it,
 * would sum the gradients over dp before this plugin's blocks are in
 * place): both are refused at start-up; keep gradients in bf16; offload.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/layout.h"
#include "tessera/plugin.h"

static const ts_plugin_key hsdp_keys[] = {
    {"shard", TS_PLUGIN_KEY_INT, NULL, 1, 1 << 20, NULL,
     "ranks each parameter, gradient and optimizer state is sharded over (inside a node)"},
    {"replicate", TS_PLUGIN_KEY_INT, "auto", 1, 1 << 20, "auto",
     "groups of shard ranks holding replicas (across nodes); auto = the world divided by "
     "the other axes"},
    {"reshard_after_forward", TS_PLUGIN_KEY_BOOL, "true", 1, 0, NULL,
     "release a module's parameters after its forward (false: keep them until its backward)"},
    {"prefetch", TS_PLUGIN_KEY_INT, "1", 0, 64, NULL,
     "modules whose parameters are all-gathered ahead of use"},
    {"bucket_mb", TS_PLUGIN_KEY_FLOAT, "25", 1e-6, 1e6, NULL,
     "reduce-scatter bytes in flight before the oldest is waited for"},
    {"overlap", TS_PLUGIN_KEY_BOOL, "true", 1, 0, NULL,
     "start reductions during backward (false: wait at the optimizer step)"},
};

#define HSDP_MAX_RANKS 4096
#define HSDP_MAX_PENDING 65536

/* One parameter of this rank. */
typedef struct hsdp_param {
    ts_plugin_param *v;
    size_t n_store, n_use; /* elements of the stored block, of the whole */
    size_t es;             /* bytes per element (the model's dtype)      */
    size_t *counts;        /* per shard rank: its block's elements       */
    /* The cut along dimension `dim` of the whole: `outer` slices of
     * rows[r] x `inner` elements per rank r, at row offset row0[r]. Along
     * dimension 0 (outer = 1) the blocks are the whole in rank order;
     * otherwise they travel packed (`packed`) and are unpacked. */
    int dim;
    size_t outer, inner, use_rows, *rows, *row0;
    void *packed;
    int last_backward; /* the module whose backward completes its gradient */
    void *whole;       /* the gathered parameter                          */
    ts_comm_request *gather;
    int holders;    /* module uses in progress                            */
    int prefetched; /* gathered ahead, not used yet                       */
    int grad_users; /* backwards begun on the whole gradient, not ended   */
    int completed;  /* last_backward's module has ended since the reduction */
    float *grad;    /* the whole gradient of the current micro-batch      */
} hsdp_param;

/* A reduce-scatter in flight: the whole gradient, this rank's reduced
 * block and where it is added. */
typedef struct hsdp_pending {
    ts_comm_request *req;
    float *whole, *block, *dst;
    size_t n, bytes;
} hsdp_pending;

static struct {
    const ts_host *host;
    ts_plugin_ctx *ctx;
    int reshard, prefetch, overlap;
    double bucket_bytes;
    ts_comm *shard, *replicate; /* device tensors */
    int rank, ranks;            /* on the shard axis */
    int replicas;               /* replicate's size  */
    const ts_plugin_model *model;
    hsdp_param *params;
    int nparams;
    int **module_params; /* per module: indices into params */
    int nmodules;
    int npending, first_pending;
    size_t pending_bytes;
    /* metrics of the step */
    double wait_gather_s, wait_reduce_s;
    size_t gather_bytes, reduce_bytes, allreduce_bytes;
    /* Last, and not cleared at init (npending says what is used). */
    hsdp_pending pending[HSDP_MAX_PENDING];
} h;

static double hsdp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ts_status hsdp_nomem(void) {
    return h.host->error(h.ctx, TS_ERR_NOMEM, "out of memory");
}

static size_t hsdp_numel(const ts_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* ---------------------------------------------------------------------------
 * Placements
 * ------------------------------------------------------------------------- */

static int hsdp_axis(const ts_layout *l, const char *name) {
    for (int a = 0; a < l->naxes; a++)
        if (strcmp(l->axes[a].name, name) == 0) return a;
    return -1;
}

/* The dimension a parameter is cut along over shard: the first whose
 * extent (what the axes before shard, tp's, leave of it) shard divides,
 * else the longest. So GPT-2's (3, C, C) qkv weight is cut along C. */
static int hsdp_shard_dim(const ts_layout *l, int sh) {
    int64_t ext[TS_MAX_DIMS];
    for (int d = 0; d < l->ndim; d++)
        ext[d] = l->shape[d];
    for (int a = 0; a < sh; a++)
        if (l->axes[a].placement.kind == TS_PLACEMENT_SHARD) {
            int d = l->axes[a].placement.dim;
            ext[d] = (ext[d] + l->axes[a].size - 1) / l->axes[a].size;
        }
    int best = 0, size = l->axes[sh].size;
    for (int d = 0; d < l->ndim; d++)
        if (ext[d] % size == 0 && ext[d] >= size) return d;
    for (int d = 1; d < l->ndim; d++)
        if (ext[d] > ext[best]) best = d;
    return best;
}

/* hsdp is the whole of data parallelism: another axis that cuts the batch
 * by sequences (dp) would have its gradients summed by another plugin as
 * soon as each is announced, before hsdp's reduce-scatter has put its block
 * in place; an axis that cuts every sequence (cp) leaves them partial
 * there. Both are refused with the axis's size. */
static ts_status hsdp_check_axes(void) {
    static const char *const other[] = {"dp", "cp"};
    for (int i = 0; i < 2; i++) {
        ts_comm *c = h.host->comm(h.ctx, other[i]);
        int n = c ? h.host->comm_size(c) : 1;
        if (n > 1 && i == 0)
            return h.host->error(h.ctx, TS_ERR_CONFIG,
                                 "the dp axis has %d ranks beside shard and replicate: hsdp is the "
                                 "data parallelism (its replicate axis is dp's), and dp would sum "
                                 "the gradients before hsdp's blocks are complete; load hsdp "
                                 "without dp (or give dp size 1)",
                                 n);
        if (n > 1)
            return h.host->error(h.ctx, TS_ERR_CONFIG,
                                 "the cp axis has %d ranks: hsdp does not sum gradients over cp "
                                 "(load it without cp)",
                                 n);
    }
    return TS_OK;
}

/* The batch (data and activations) cut by sequences over both axes; every
 * parameter stored cut over shard, replicated over replicate. */
static ts_status hsdp_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)user;
    TS_TRY(hsdp_check_axes());
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        int sh = hsdp_axis(&e->layout, "shard"), rep = hsdp_axis(&e->layout, "replicate");
        if (e->kind != TS_PLAN_PARAM) {
            if (sh >= 0) e->layout.axes[sh].placement = ts_placement_shard(0);
            if (rep >= 0) e->layout.axes[rep].placement = ts_placement_shard(0);
        } else if (sh >= 0 && e->layout.axes[sh].size > 1) {
            e->layout.axes[sh].placement = ts_placement_shard(hsdp_shard_dim(&e->layout, sh));
        }
    }
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * The communicators and the optimizer state
 * ------------------------------------------------------------------------- */

static ts_status hsdp_bind(void) {
    if (h.shard) return TS_OK;
    h.shard = h.host->comm(h.ctx, "shard");
    h.replicate = h.host->comm(h.ctx, "replicate");
    if (!h.shard || !h.replicate)
        return h.host->error(h.ctx, TS_ERR_INVALID, "no shard or replicate communicator");
    h.rank = h.host->comm_rank(h.shard);
    h.ranks = h.host->comm_size(h.shard);
    h.replicas = h.host->comm_size(h.replicate);
    if (h.ranks > HSDP_MAX_RANKS)
        return h.host->error(h.ctx, TS_ERR_INVALID, "more than %d shard ranks", HSDP_MAX_RANKS);
    return TS_OK;
}

/* The blocks are this rank's own already: its range is its whole buffer. */
static ts_status hsdp_partition(ts_plugin_ctx *ctx, size_t numel, size_t *begin, size_t *end,
                                void *user) {
    (void)ctx;
    (void)user;
    *begin = 0;
    *end = numel;
    return TS_OK;
}

static ts_status hsdp_after_step(ts_plugin_ctx *ctx, void *params, ts_dtype dtype, size_t numel,
                                 void *user) {
    (void)ctx;
    (void)params;
    (void)dtype;
    (void)numel;
    (void)user;
    return TS_OK; /* the next forward gathers the updated blocks */
}

/* ---------------------------------------------------------------------------
 * Blocks gathered whole around the modules
 * ------------------------------------------------------------------------- */

/* The blocks of one parameter per shard rank. */
static ts_status hsdp_setup_param(hsdp_param *p, ts_plugin_param *v) {
    p->v = v;
    p->n_store = hsdp_numel(v->store);
    p->n_use = hsdp_numel(v->use);
    p->es = v->store->dtype == TS_BF16 ? 2 : 4;
    p->last_backward = -1;
    p->counts = calloc((size_t)h.ranks, sizeof *p->counts);
    p->rows = calloc((size_t)h.ranks, sizeof *p->rows);
    p->row0 = calloc((size_t)h.ranks, sizeof *p->row0);
    if (!p->counts || !p->rows || !p->row0) return hsdp_nomem();
    int coords[TS_LAYOUT_MAX_AXES];
    TS_TRY(h.host->layout_coords(h.ctx, v->layout, coords));
    int sh = hsdp_axis(v->layout, "shard");
    if (sh < 0 || !(v->provided >> sh & 1u))
        return h.host->error(h.ctx, TS_ERR_INVALID, "%s is not stored cut over shard", v->name);
    p->dim = v->layout->axes[sh].placement.dim;
    p->outer = p->inner = 1;
    for (int d = 0; d < v->use->ndim; d++) {
        if (d < p->dim) p->outer *= (size_t)v->use->shape[d];
        if (d > p->dim) p->inner *= (size_t)v->use->shape[d];
    }
    p->use_rows = (size_t)v->use->shape[p->dim];
    size_t total = 0;
    for (int r = 0; r < h.ranks; r++) {
        int64_t off[TS_MAX_DIMS], shp[TS_MAX_DIMS];
        coords[sh] = r;
        TS_TRY(h.host->layout_local_block(v->layout, coords, off, shp));
        size_t c = 1;
        for (int d = 0; d < v->layout->ndim; d++)
            c *= (size_t)shp[d];
        p->counts[r] = c;
        p->rows[r] = (size_t)shp[p->dim];
        p->row0[r] = r ? p->row0[r - 1] + p->rows[r - 1] : 0;
        total += c;
    }
    if (total != p->n_use || p->counts[h.rank] != p->n_store)
        return h.host->error(h.ctx, TS_ERR_INVALID,
                             "%s: shard blocks of %zu elements do not make the whole %zu", v->name,
                             total, p->n_use);
    return TS_OK;
}

/* The parameters of this rank and the module whose backward completes
 * each gradient. */
static ts_status hsdp_setup_params(void) {
    const ts_plugin_model *m = h.host->model(h.ctx);
    if (!m) return h.host->error(h.ctx, TS_ERR_INVALID, "no model view");
    h.model = m;
    h.nparams = m->nparams;
    h.params = calloc((size_t)(m->nparams ? m->nparams : 1), sizeof *h.params);
    h.module_params = calloc((size_t)(m->nmodules ? m->nmodules : 1), sizeof *h.module_params);
    h.nmodules = m->nmodules;
    if (!h.params || !h.module_params) return hsdp_nomem();
    for (int i = 0; i < m->nparams; i++)
        TS_TRY(hsdp_setup_param(&h.params[i], m->params[i]));
    for (int k = 0; k < m->nmodules; k++) {
        const ts_plugin_module *mod = &m->modules[k];
        if (!mod->here) continue;
        h.module_params[k] = calloc((size_t)mod->nparams + 1, sizeof(int));
        if (!h.module_params[k]) return hsdp_nomem();
        for (int j = 0; j < mod->nparams; j++) {
            int idx = -1;
            for (int i = 0; i < m->nparams && idx < 0; i++)
                if (m->params[i] == mod->params[j]) idx = i;
            if (idx < 0) return h.host->error(h.ctx, TS_ERR_INVALID, "unknown parameter");
            h.module_params[k][j] = idx;
            /* Backward runs in reverse model order: the first module that
             * reads a parameter completes its gradient. */
            if (h.params[idx].last_backward < 0) h.params[idx].last_backward = k;
        }
    }
    return TS_OK;
}

/* Starts gathering p's blocks over shard into a new whole buffer (unless
 * it is there already). */
static ts_status hsdp_gather(hsdp_param *p) {
    if (p->whole) return TS_OK;
    p->whole = h.host->device_alloc(h.ctx, TS_MEM_PARAMS, (p->n_use ? p->n_use : 1) * p->es);
    if (!p->whole) return hsdp_nomem();
    void *dst = p->whole;
    if (p->outer > 1) { /* packed, unpacked in hsdp_use */
        p->packed = h.host->device_alloc(h.ctx, TS_MEM_COMM, (p->n_use ? p->n_use : 1) * p->es);
        if (!p->packed) return hsdp_nomem();
        dst = p->packed;
    }
    h.gather_bytes += p->n_use * p->es;
    return h.host->all_gatherv_start(h.shard, p->v->store->data, dst, p->counts, p->v->store->dtype,
                                     &p->gather);
}

/* Between the whole (dimension `dim` full) and the blocks packed in rank
 * order: rank r's block is outer slices of rows[r] x inner elements. */
static ts_status hsdp_repack(const hsdp_param *p, void *whole, void *packed, size_t es,
                             int to_whole) {
    char *w = whole, *k = packed;
    for (int r = 0; r < h.ranks; r++) {
        size_t slice = p->rows[r] * p->inner * es;
        for (size_t o = 0; o < p->outer && slice; o++) {
            char *a = w + ((o * p->use_rows + p->row0[r]) * p->inner) * es;
            TS_TRY(to_whole ? h.host->device_copy(h.ctx, a, k, slice)
                            : h.host->device_copy(h.ctx, k, a, slice));
            k += slice;
        }
    }
    return TS_OK;
}

/* p whole for the layers: waits for its gather. */
static ts_status hsdp_use(hsdp_param *p) {
    TS_TRY(hsdp_gather(p));
    if (p->gather) {
        double t0 = hsdp_now();
        ts_status st = h.host->wait(p->gather);
        h.wait_gather_s += hsdp_now() - t0;
        p->gather = NULL;
        TS_TRY(st);
    }
    if (p->packed) {
        ts_status st = hsdp_repack(p, p->whole, p->packed, p->es, 1);
        h.host->device_free(h.ctx, p->packed);
        p->packed = NULL;
        TS_TRY(st);
    }
    p->v->use->data = p->whole;
    p->holders++;
    p->prefetched = 0;
    return TS_OK;
}

static void hsdp_free_whole(hsdp_param *p) {
    h.host->device_free(h.ctx, p->whole);
    p->whole = NULL;
    p->v->use->data = NULL;
}

/* One use fewer; the last frees the whole. */
static void hsdp_release(hsdp_param *p) {
    if (p->holders > 0) p->holders--;
    if (p->holders == 0 && !p->prefetched) hsdp_free_whole(p);
}

/* Gathers the parameters of the `prefetch` modules here after (dir = 1) or
 * before (dir = -1) module k. */
static ts_status hsdp_prefetch(int k, int dir) {
    for (int j = k + dir, left = h.prefetch; left > 0 && j >= 0 && j < h.model->nmodules;
         j += dir) {
        if (!h.module_params[j]) continue;
        left--;
        const ts_plugin_module *mod = &h.model->modules[j];
        for (int i = 0; i < mod->nparams; i++) {
            hsdp_param *p = &h.params[h.module_params[j][i]];
            if (p->whole) continue;
            TS_TRY(hsdp_gather(p));
            p->prefetched = 1;
        }
    }
    return TS_OK;
}

/* Completes the oldest reduce-scatter in flight: its block summed over
 * replicate, then added into store_grad. In issue order, so that the sums
 * of the micro-batches are added in one order on every run. */
static ts_status hsdp_finish_oldest(void) {
    hsdp_pending *q = &h.pending[h.first_pending];
    double t0 = hsdp_now();
    ts_status st = q->req ? h.host->wait(q->req) : TS_OK;
    q->req = NULL;
    if (!st && q->n && h.replicas > 1) {
        h.allreduce_bytes += q->n * sizeof(float);
        st = h.host->all_reduce(h.replicate, q->block, q->block, q->n, TS_F32, TS_REDUCE_SUM);
    }
    h.wait_reduce_s += hsdp_now() - t0;
    if (!st && q->n) st = h.host->device_add(h.ctx, q->dst, q->block, q->n);
    h.host->device_free(h.ctx, q->block);
    h.host->device_free(h.ctx, q->whole);
    h.pending_bytes -= q->bytes;
    h.first_pending++;
    if (h.first_pending == h.npending) h.first_pending = h.npending = 0;
    return st;
}

/* Lets the operations in flight progress (MPI moves data only inside its
 * calls); a finished one is completed in order later. */
static ts_status hsdp_progress(void) {
    for (int i = h.first_pending; i < h.npending; i++) {
        hsdp_pending *q = &h.pending[i];
        int done = 0;
        if (q->req) TS_TRY(h.host->test(q->req, &done));
        if (done) q->req = NULL;
    }
    for (int i = 0; i < h.nparams; i++) {
        hsdp_param *p = &h.params[i];
        int done = 0;
        if (p->gather) TS_TRY(h.host->test(p->gather, &done));
        if (done) p->gather = NULL;
    }
    return TS_OK;
}

static ts_status hsdp_finish_all(void) {
    while (h.first_pending < h.npending)
        TS_TRY(hsdp_finish_oldest());
    return TS_OK;
}

/* Reduce-scatters p's whole gradient over shard into its block. */
static ts_status hsdp_reduce(hsdp_param *p) {
    if (h.npending == HSDP_MAX_PENDING) TS_TRY(hsdp_finish_all());
    hsdp_pending *q = &h.pending[h.npending];
    if (p->outer > 1) { /* the blocks packed in rank order, as the reduction wants them */
        float *packed =
            h.host->device_alloc(h.ctx, TS_MEM_COMM, (p->n_use ? p->n_use : 1) * sizeof(float));
        if (!packed) return hsdp_nomem();
        ts_status st = hsdp_repack(p, p->grad, packed, sizeof(float), 0);
        h.host->device_free(h.ctx, p->grad);
        p->grad = packed;
        TS_TRY(st);
    }
    q->whole = p->grad;
    q->n = p->n_store;
    q->bytes = p->n_use * sizeof(float);
    q->dst = p->v->store_grad->data;
    q->block = h.host->device_alloc(h.ctx, TS_MEM_COMM, (q->n ? q->n : 1) * sizeof(float));
    if (!q->block) return hsdp_nomem();
    h.reduce_bytes += q->bytes;
    TS_TRY(h.host->reduce_scatter_v_start(h.shard, q->whole, q->block, p->counts, TS_F32,
                                          TS_REDUCE_SUM, &q->req));
    h.npending++;
    h.pending_bytes += q->bytes;
    p->grad = NULL;
    p->v->use_grad->data = NULL;
    if (!h.overlap) return TS_OK; /* all at the optimizer step */
    while (h.first_pending < h.npending && (double)h.pending_bytes > h.bucket_bytes)
        TS_TRY(hsdp_finish_oldest());
    return TS_OK;
}

static ts_status hsdp_before_forward_module(int k, const int *idx, int n, int again) {
    if (again && !h.reshard) {
        for (int i = 0; i < n; i++)
            h.params[idx[i]].v->use->data = h.params[idx[i]].whole;
        return TS_OK;
    }
    for (int i = 0; i < n; i++)
        TS_TRY(hsdp_gather(&h.params[idx[i]]));
    if (!again) TS_TRY(hsdp_prefetch(k, 1));
    for (int i = 0; i < n; i++)
        TS_TRY(hsdp_use(&h.params[idx[i]]));
    return TS_OK;
}

static ts_status hsdp_before_backward_module(int k, const int *idx, int n) {
    for (int i = 0; i < n; i++) {
        hsdp_param *p = &h.params[idx[i]];
        if (h.reshard) TS_TRY(hsdp_gather(p));
        if (!p->grad) {
            size_t bytes = (p->n_use ? p->n_use : 1) * sizeof(float);
            p->grad = h.host->device_alloc(h.ctx, TS_MEM_GRADS, bytes);
            if (!p->grad) return hsdp_nomem();
            TS_TRY(h.host->device_zero(h.ctx, p->grad, bytes));
        }
        p->grad_users++;
        p->v->use_grad->data = p->grad;
    }
    TS_TRY(hsdp_prefetch(k, -1));
    for (int i = 0; i < n; i++) {
        hsdp_param *p = &h.params[idx[i]];
        if (h.reshard)
            TS_TRY(hsdp_use(p));
        else
            p->v->use->data = p->whole; /* held since the forward */
    }
    return TS_OK;
}

static ts_status hsdp_module(ts_plugin_ctx *ctx, const ts_plugin_module_event *ev, void *user) {
    (void)ctx;
    (void)user;
    if (h.ranks <= 1 || !h.module_params) return TS_OK;
    int k = ev->module->index;
    const int *idx = h.module_params[k];
    int n = ev->module->nparams;
    if (!idx) return TS_OK;
    if (h.overlap) TS_TRY(hsdp_progress());
    /* A forward run again inside the backward (activation recomputation). */
    int again = ev->struct_size >= offsetof(ts_plugin_module_event, recompute) + sizeof(int) &&
                ev->recompute;
    switch (ev->kind) {
    case TS_MODULE_BEFORE_FORWARD: return hsdp_before_forward_module(k, idx, n, again);
    case TS_MODULE_AFTER_FORWARD:
        for (int i = 0; h.reshard && i < n; i++)
            hsdp_release(&h.params[idx[i]]);
        return TS_OK;
    case TS_MODULE_BEFORE_BACKWARD: return hsdp_before_backward_module(k, idx, n);
    case TS_MODULE_AFTER_BACKWARD:
        for (int i = 0; i < n; i++) {
            hsdp_param *p = &h.params[idx[i]];
            hsdp_release(p);
            /* Reduced once no other micro-batch's backward still adds to it. */
            if (p->grad_users > 0) p->grad_users--;
            if (p->last_backward == k) p->completed = 1;
            if (p->completed && p->grad_users == 0) {
                p->completed = 0;
                TS_TRY(hsdp_reduce(p));
            }
        }
        return TS_OK;
    default: return TS_OK;
    }
}

/* ---------------------------------------------------------------------------
 * The step
 * ------------------------------------------------------------------------- */

static ts_status hsdp_before_forward(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev,
                                     void *user) {
    (void)ctx;
    (void)user;
    if (ev->micro_batch != 0) return TS_OK;
    TS_TRY(hsdp_bind());
    if (h.ranks > 1 && !h.params) TS_TRY(hsdp_setup_params());
    return TS_OK;
}

/* With one shard rank nothing is stored cut: the gradients, whole on every
 * rank, are summed over replicate in one all-reduce of the flat buffer. */
static ts_status hsdp_reduce_unsharded(void) {
    const ts_plugin_model *m = h.host->model(h.ctx);
    if (!m || m->nparams == 0) return TS_OK;
    const ts_plugin_param *v = m->params[0];
    float *base = (float *)v->store_grad->data - v->offset;
    h.allreduce_bytes += m->numel * sizeof(float);
    double t0 = hsdp_now();
    ts_status st = h.host->all_reduce(h.replicate, base, base, m->numel, TS_F32, TS_REDUCE_SUM);
    h.wait_reduce_s += hsdp_now() - t0;
    return st;
}

static ts_status hsdp_before_optimizer(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev,
                                       void *user) {
    (void)ctx;
    (void)ev;
    (void)user;
    TS_TRY(hsdp_bind());
    if (h.ranks == 1 && h.replicas > 1) TS_TRY(hsdp_reduce_unsharded());
    TS_TRY(hsdp_finish_all());
    /* Anything gathered ahead and never used this step. */
    for (int i = 0; i < h.nparams; i++) {
        hsdp_param *p = &h.params[i];
        if (p->gather) {
            TS_TRY(h.host->wait(p->gather));
            p->gather = NULL;
        }
        h.host->device_free(h.ctx, p->packed);
        p->packed = NULL;
        if (p->whole) hsdp_free_whole(p);
        p->holders = p->prefetched = 0;
    }
    TS_TRY(h.host->metric(h.ctx, "all_gather_bytes", (double)h.gather_bytes));
    TS_TRY(h.host->metric(h.ctx, "reduce_scatter_bytes", (double)h.reduce_bytes));
    TS_TRY(h.host->metric(h.ctx, "all_reduce_bytes", (double)h.allreduce_bytes));
    TS_TRY(h.host->metric(h.ctx, "gather_wait_ms", 1e3 * h.wait_gather_s));
    TS_TRY(h.host->metric(h.ctx, "reduce_wait_ms", 1e3 * h.wait_reduce_s));
    h.wait_gather_s = h.wait_reduce_s = 0.0;
    h.gather_bytes = h.reduce_bytes = h.allreduce_bytes = 0;
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * Registration
 * ------------------------------------------------------------------------- */

static ts_status hsdp_axes(const ts_host *host, ts_plugin_ctx *ctx) {
    int64_t shard, replicate;
    TS_TRY(host->config_int(ctx, "shard", &shard));
    TS_TRY(host->config_int(ctx, "replicate", &replicate));
    ts_plugin_axis_spec s = {
        .struct_size = sizeof s,
        .name = "shard",
        .size = (int)shard,
        .mesh = TS_MESH_DENSE,
        .before = NULL,
        .cuts_batch = 1,
    };
    TS_TRY(host->register_axis_spec(ctx, &s));
    s.name = "replicate";
    s.size = replicate < 0 ? TS_PLUGIN_AXIS_AUTO : (int)replicate;
    return host->register_axis_spec(ctx, &s);
}

static ts_status hsdp_init(const ts_host *host, ts_plugin_ctx *ctx) {
    memset(&h, 0, offsetof(__typeof__(h), pending));
    h.host = host;
    h.ctx = ctx;
    if (!TS_HOST_HAS(host, register_axis_spec))
        return host->error(ctx, TS_ERR_PLUGIN,
                           "needs a core of plugin ABI 1.2 or later (register_axis_spec, for its "
                           "shard and replicate axes); this core is %u.%u",
                           TS_PLUGIN_ABI_MAJOR_OF(host->abi_version),
                           TS_PLUGIN_ABI_MINOR_OF(host->abi_version));
    int64_t prefetch;
    double mb;
    TS_TRY(host->config_int(ctx, "prefetch", &prefetch));
    TS_TRY(host->config_bool(ctx, "reshard_after_forward", &h.reshard));
    TS_TRY(host->config_bool(ctx, "overlap", &h.overlap));
    TS_TRY(host->config_float(ctx, "bucket_mb", &mb));
    h.prefetch = (int)prefetch;
    h.bucket_bytes = mb * 1024.0 * 1024.0;
    TS_TRY(hsdp_axes(host, ctx));
    TS_TRY(host->register_transform(ctx, "hsdp", TS_PHASE_SHARD_DATA, hsdp_transform, NULL));
    TS_TRY(host->register_hook(ctx, TS_HOOK_BEFORE_FORWARD, hsdp_before_forward, NULL));
    TS_TRY(host->register_hook(ctx, TS_HOOK_BEFORE_OPTIMIZER, hsdp_before_optimizer, NULL));
    for (int k = 0; k < TS_MODULE_HOOK_COUNT; k++)
        TS_TRY(host->register_module_hook(ctx, (ts_plugin_module_hook_kind)k, hsdp_module, NULL));
    TS_TRY(host->register_provider(ctx, TS_PROVIDE_GRAD_REDUCTION, "shard"));
    TS_TRY(host->register_provider(ctx, TS_PROVIDE_GRAD_REDUCTION, "replicate"));
    TS_TRY(host->register_provider(ctx, TS_PROVIDE_PARAM_STORAGE, "shard"));
    static const ts_plugin_optimizer_state_ops cut = {sizeof cut, hsdp_partition, hsdp_after_step,
                                                      0};
    return host->register_optimizer_state(ctx, "shard", &cut, NULL);
}

static void hsdp_fini(const ts_host *host, ts_plugin_ctx *ctx) {
    (void)host;
    (void)ctx;
    for (int i = 0; i < h.nparams; i++) {
        free(h.params[i].counts);
        free(h.params[i].rows);
        free(h.params[i].row0);
    }
    for (int k = 0; h.module_params && k < h.nmodules; k++)
        free(h.module_params[k]);
    free(h.params);
    free(h.module_params);
}

static const ts_plugin_descriptor hsdp_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "hsdp",
    "0.1.0",
    "hybrid sharded data parallel: state sharded over shard, replicated over replicate",
    hsdp_keys,
    sizeof hsdp_keys / sizeof hsdp_keys[0],
    hsdp_init,
    hsdp_fini,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &hsdp_descriptor;
}
