/*
 * zero.c — tessera-zero.so: the model state sharded over the data-parallel
 * ranks, as ZeRO does (Rajbhandari et al., "ZeRO: Memory Optimizations
 * Toward Training Trillion Parameter Models", SC 2020) and PyTorch FSDP
 * after it (Zhao et al., VLDB 2023).
 *
 * [zero] stage says how much:
 *  1  the optimizer state. The flat buffers are cut by the layout rule (a
 *     1-D layout of numel elements, S(0) over dp: uneven parts allowed);
 *     rank r keeps master weights and moments for its range only
 *     (host->reg->optimizer_state) and updates only it. The gradients
 *     are reduce-scattered to the range owners in buckets that start during
 *     backward (this plugin takes dp's gradient reduction over); after the
 *     update the ranges are all-gathered into the parameters.
 *  2  also the gradients. Every parameter is placed S(0) over dp (uneven
 *     allowed) and stored cut (TS_PROVIDE_PARAM_STORAGE): its block, its
 *     gradient's block and their optimizer state are all a rank keeps of
 *     it. The parameters are all-gathered once per step into a whole copy
 *     the layers read; each module's gradients are computed whole and
 *     reduce-scattered into the blocks after its backward (every
 *     micro-batch, started at once and waited when the in-flight bytes pass
 *     bucket_mb, or at the optimizer step).
 *  3  also the parameters: no whole copy. Each module's parameters are
 *     all-gathered before its forward and again before its backward
 *     (reshard_after_forward = false keeps them from forward to backward),
 *     `prefetch` modules ahead, and released after use.
 *
 * offload = cpu keeps the optimizer state and its update in host memory
 * (the core moves the gradient range down and the parameter range up).
 *
 * Communication per step with one micro-batch, P parameters' bytes: stages
 * 1 and 2 reduce-scatter P and all-gather P (the bytes of one all-reduce);
 * stage 3 all-gathers 2P and reduce-scatters P (1.5x).
 *
 * With cp (every sequence cut over it) the gradients are partial over cp
 * as well: each reduced range or block is all-reduced over cp. The state is
 * sharded over dp alone (Megatron-LM's distributed optimizer shards over
 * dp x cp); the cp ranks of one dp coordinate keep the same shard.
 *
 * What it does not do: shard over dp x cp, or keep
 * gradients in bf16 (they are f32 in every stage).
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tessera/plugin.h"

static const ts_plugin_key zero_keys[] = {
    {"stage", TS_PLUGIN_KEY_INT, "1", 1, 3, NULL,
     "1: optimizer state; 2: + gradients; 3: + parameters (fully sharded)"},
    {"reshard_after_forward", TS_PLUGIN_KEY_BOOL, "true", 1, 0, NULL,
     "stage 3: release a module's parameters after its forward (false: keep them "
     "until its backward)"},
    {"prefetch", TS_PLUGIN_KEY_INT, "1", 0, 64, NULL,
     "stage 3: modules whose parameters are all-gathered ahead of use"},
    {"bucket_mb", TS_PLUGIN_KEY_FLOAT, "25", 1e-6, 1e6, NULL,
     "stage 1: gradient bucket size; stages 2-3: reduce-scatter bytes in flight"},
    {"overlap", TS_PLUGIN_KEY_BOOL, "true", 1, 0, NULL,
     "start reductions during backward (false: at the optimizer step)"},
    {"offload", TS_PLUGIN_KEY_ENUM, "none", 1, 0, "none|cpu",
     "cpu: the optimizer state and its update in host memory (device = cuda only)"},
};

#define ZERO_MAX_RANKS 4096
#define ZERO_MAX_PENDING 65536

/* One parameter of this rank (stages 2 and 3). */
typedef struct zero_param {
    ts_plugin_param *v;
    size_t n_store, n_use; /* elements of the stored block, of the whole      */
    size_t es;             /* bytes per element (the model's dtype)           */
    size_t *counts;        /* per dp rank: its block's elements               */
    /* The cut along dimension `dim` of the whole: `outer` slices of
     * rows[r] x `inner` elements per rank r, at row offset row0[r]. Along
     * dimension 0 (outer = 1) the blocks are the whole in rank order;
     * otherwise they travel packed (`packed`) and are unpacked. */
    int dim;
    size_t outer, inner, use_rows, *rows, *row0;
    void *packed;
    int last_backward; /* the module whose backward completes its gradient */
    void *whole;       /* the gathered parameter (stage 2: persistent)   */
    ts_comm_request *gather;
    int holders;    /* module uses in progress (stage 3)               */
    int prefetched; /* gathered ahead, not used yet                    */
    int grad_users; /* backwards begun on the whole gradient and not yet
                       ended (AFTER_BACKWARD): with split backwards several
                       micro-batches' weight gradients may be pending        */
    int completed;  /* last_backward's module has ended since the reduction */
    float *grad;    /* the whole gradient of the current micro-batch   */
} zero_param;

/* A reduce-scatter in flight: the whole gradient (its input), this rank's
 * reduced block and where it is added. */
typedef struct zero_pending {
    ts_comm_request *req;
    float *whole, *block, *dst;
    size_t n, bytes;
} zero_pending;

/* A stage-1 bucket: a region of the flat gradient buffer. */
typedef struct zero_bucket {
    size_t begin, end; /* flat offsets                      */
    float *block;      /* this rank's reduced part          */
    ts_comm_request *req;
} zero_bucket;

static _Thread_local struct {
    const ts_host *host;
    ts_plugin_ctx *ctx;
    int stage, reshard, prefetch, overlap, offload;
    double bucket_bytes;
    ts_comm *comm; /* dp, device tensors */
    int rank, ranks;
    /* cp, when it cuts every sequence: the weights' gradients are partial
     * over it too; each reduced range or block is summed over it. */
    ts_comm *cp_comm;
    const ts_plugin_model *model;
    /* stage 1 */
    size_t numel, *range_begin, *range_count; /* per rank */
    zero_bucket *buckets;
    int nbuckets, capbuckets;
    size_t open_begin, open_end; /* the open bucket [begin, end), empty when equal */
    float *grad_base;            /* the flat gradient buffer (offset 0) */
    /* stages 2 and 3 */
    zero_param *params;
    int nparams;
    int **module_params; /* per module: indices into params */
    int nmodules;
    int npending, first_pending;
    size_t pending_bytes;
    /* metrics of the step */
    double wait_gather_s, wait_reduce_s;
    size_t gather_bytes, reduce_bytes;
    /* Last, and not cleared at init (npending says what is used): its
     * pages are touched only as reductions queue. */
    zero_pending pending[ZERO_MAX_PENDING];
} z;

static ts_status zero_progress(void);

static double zero_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static ts_status zero_nomem(void) {
    return z.host->error(z.ctx, TS_ERR_NOMEM, "out of memory");
}

static size_t zero_numel(const ts_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    return n;
}

/* ---------------------------------------------------------------------------
 * Placements and the checks of the layout plan
 * ------------------------------------------------------------------------- */

static int zero_axis(const ts_layout *l, const char *name) {
    for (int a = 0; a < l->naxes; a++)
        if (strcmp(l->axes[a].name, name) == 0) return a;
    return -1;
}

/* The dimension a parameter is cut along over dp: the first whose extent
 * (what the axes before dp leave of it) dp divides, else the longest. So
 * GPT-2's (3, C, C) qkv weight is cut along C, not into three rows. */
static int zero_shard_dim(const ts_layout *l, int dp) {
    int64_t ext[TS_MAX_DIMS];
    for (int d = 0; d < l->ndim; d++)
        ext[d] = l->shape[d];
    for (int a = 0; a < dp; a++)
        if (l->axes[a].placement.kind == TS_PLACEMENT_SHARD) {
            int d = l->axes[a].placement.dim;
            ext[d] = (ext[d] + l->axes[a].size - 1) / l->axes[a].size;
        }
    int best = 0, size = l->axes[dp].size;
    for (int d = 0; d < l->ndim; d++)
        if (ext[d] % size == 0 && ext[d] >= size) return d;
    for (int d = 1; d < l->ndim; d++)
        if (ext[d] > ext[best]) best = d;
    return best;
}

static ts_status zero_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        int dp = zero_axis(&e->layout, "dp"), cp = zero_axis(&e->layout, "cp");
        if (strcmp(e->name, "data.tokens") == 0) {
            if (dp < 0 || e->layout.axes[dp].placement.kind != TS_PLACEMENT_SHARD ||
                e->layout.axes[dp].placement.dim != 0)
                return z.host->error(z.ctx, TS_ERR_CONFIG,
                                     "zero shards the model state over the data-parallel ranks, "
                                     "and nothing cuts the batch over dp: load dp first "
                                     "([parallel] plugins = dp, zero)");
            (void)cp;
        }
        /* Stages 2 and 3 store every parameter cut over dp. */
        if (z.stage >= 2 && e->kind == TS_PLAN_PARAM && dp >= 0 && e->layout.axes[dp].size > 1)
            e->layout.axes[dp].placement = ts_placement_shard(zero_shard_dim(&e->layout, dp));
    }
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * Stage 1: the optimizer state's ranges, bucketed reduce-scatter
 * ------------------------------------------------------------------------- */

static ts_status zero_bind(void) {
    if (z.comm) return TS_OK;
    z.comm = z.host->comms->get(z.ctx, "dp");
    if (!z.comm) return z.host->error(z.ctx, TS_ERR_INVALID, "no dp communicator");
    z.rank = z.host->comms->rank(z.comm);
    z.ranks = z.host->comms->size(z.comm);
    ts_comm *cp = z.host->comms->get(z.ctx, "cp");
    z.cp_comm = cp && z.host->comms->size(cp) > 1 ? cp : NULL;
    if (z.ranks > ZERO_MAX_RANKS)
        return z.host->error(z.ctx, TS_ERR_INVALID, "more than %d dp ranks", ZERO_MAX_RANKS);
    return TS_OK;
}

/* Every rank's range of the flat buffers: the layout rule's blocks of a
 * 1-D tensor of numel elements cut S(0) over dp. */
static ts_status zero_ranges(size_t numel) {
    TS_TRY(zero_bind());
    if (z.range_begin && z.numel == numel) return TS_OK;
    free(z.range_begin);
    free(z.range_count);
    z.range_begin = calloc((size_t)z.ranks, sizeof *z.range_begin);
    z.range_count = calloc((size_t)z.ranks, sizeof *z.range_count);
    if (!z.range_begin || !z.range_count) return zero_nomem();
    z.numel = numel;
    ts_layout l;
    memset(&l, 0, sizeof l);
    l.ndim = 1;
    l.shape[0] = (int64_t)numel;
    l.naxes = 1;
    strcpy(l.axes[0].name, "dp");
    l.axes[0].size = z.ranks;
    l.axes[0].placement = ts_placement_shard(0);
    for (int r = 0; r < z.ranks; r++) {
        int64_t off, cnt;
        TS_TRY(z.host->comms->layout_local_block(&l, &r, &off, &cnt));
        z.range_begin[r] = (size_t)off;
        z.range_count[r] = (size_t)cnt;
    }
    return TS_OK;
}

/* offload = cpu needs a model on a GPU. */
static ts_status zero_check_offload(void) {
    const ts_plugin_model *m = z.host->model(z.ctx);
    if (!z.offload || !m || m->device != TS_DEVICE_CPU) return TS_OK;
    char where[256];
    z.host->config->where(z.ctx, "offload", where, sizeof where);
    return z.host->error(z.ctx, TS_ERR_CONFIG,
                         "%s: offload = cpu moves the optimizer state off the GPU, and this run "
                         "trains on the CPU ([train] device = cpu): nothing to offload",
                         where);
}

static ts_status zero_partition(ts_plugin_ctx *ctx, size_t numel, size_t *begin, size_t *end,
                                void *user) {
    (void)ctx;
    (void)user;
    TS_TRY(zero_check_offload());
    if (z.stage >= 2) { /* the blocks are already this rank's own */
        *begin = 0;
        *end = numel;
        return TS_OK;
    }
    TS_TRY(zero_ranges(numel));
    *begin = z.range_begin[z.rank];
    *end = *begin + z.range_count[z.rank];
    return TS_OK;
}

/* After the update of this rank's range: every range into the parameters. */
static ts_status zero_after_step(ts_plugin_ctx *ctx, void *params, ts_dtype dtype, size_t numel,
                                 void *user) {
    (void)ctx;
    (void)user;
    if (z.stage >= 2) return TS_OK;
    TS_TRY(zero_ranges(numel));
    size_t es = dtype == TS_BF16 ? 2 : 4;
    char *base = params;
    z.gather_bytes += numel * es;
    double t0 = zero_now();
    ts_status st = z.host->comms->all_gatherv(z.comm, base + z.range_begin[z.rank] * es, base,
                                              z.range_count, dtype);
    z.wait_gather_s += zero_now() - t0; /* nothing to hide it behind */
    return st;
}

/* A reduced range or block summed over cp as well (the dp ranks of one cp
 * coordinate hold partial sums of the same weights). */
static ts_status zero_sum_cp(float *block, size_t n) {
    if (!z.cp_comm) return TS_OK;
    double t0 = zero_now();
    ts_status st = z.host->comms->all_reduce(z.cp_comm, block, block, n, TS_F32, TS_REDUCE_SUM);
    z.wait_reduce_s += zero_now() - t0;
    return st;
}

/* The part of [begin, end) each rank owns. */
static void zero_bucket_counts(size_t begin, size_t end, size_t *counts) {
    for (int r = 0; r < z.ranks; r++) {
        size_t lo = z.range_begin[r], hi = lo + z.range_count[r];
        if (lo < begin) lo = begin;
        if (hi > end) hi = end;
        counts[r] = hi > lo ? hi - lo : 0;
    }
}

static ts_status zero_bucket_start(zero_bucket *b) {
    size_t counts[ZERO_MAX_RANKS];
    zero_bucket_counts(b->begin, b->end, counts);
    size_t mine = counts[z.rank] ? counts[z.rank] : 1;
    b->block = z.host->dev->alloc(z.ctx, TS_MEM_COMM, mine * sizeof(float));
    if (!b->block) return zero_nomem();
    z.reduce_bytes += (b->end - b->begin) * sizeof(float);
    return z.host->comms->reduce_scatter_v_start(z.comm, z.grad_base + b->begin, b->block, counts,
                                                 TS_F32, TS_REDUCE_SUM, &b->req);
}

/* Waits for bucket b and puts this rank's reduced part in place. */
static ts_status zero_bucket_finish(zero_bucket *b) {
    if (!b->block) return TS_OK;
    double t0 = zero_now();
    ts_status st = b->req ? z.host->comms->wait(b->req) : TS_OK;
    z.wait_reduce_s += zero_now() - t0;
    b->req = NULL;
    size_t lo = z.range_begin[z.rank], hi = lo + z.range_count[z.rank];
    if (lo < b->begin) lo = b->begin;
    if (hi > b->end) hi = b->end;
    if (!st && hi > lo) st = zero_sum_cp(b->block, hi - lo);
    if (!st && hi > lo)
        st = z.host->dev->copy(z.ctx, z.grad_base + lo, b->block, (hi - lo) * sizeof(float));
    z.host->dev->free(z.ctx, b->block);
    b->block = NULL;
    return st;
}

static ts_status zero_close_bucket(void) {
    if (z.open_end == z.open_begin) return TS_OK;
    if (z.nbuckets == z.capbuckets) {
        int cap = z.capbuckets ? 2 * z.capbuckets : 64;
        zero_bucket *nb = realloc(z.buckets, (size_t)cap * sizeof *nb);
        if (!nb) return zero_nomem();
        z.buckets = nb;
        z.capbuckets = cap;
    }
    zero_bucket *b = &z.buckets[z.nbuckets++];
    *b = (zero_bucket){z.open_begin, z.open_end, NULL, NULL};
    z.open_begin = z.open_end = 0;
    return z.overlap ? zero_bucket_start(b) : TS_OK;
}

static ts_status zero_grad_ready(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev, void *user) {
    (void)ctx;
    (void)user;
    if (z.stage >= 2 || !ev->view || z.ranks == 1) return TS_OK;
    const ts_plugin_param *v = ev->view;
    size_t n = zero_numel(v->store_grad);
    z.grad_base = (float *)v->store_grad->data - v->offset;
    /* Gradients arrive in reverse order of their offsets: an adjacent one
     * extends the open bucket downwards. */
    if (z.open_end > z.open_begin && v->offset + n != z.open_begin) TS_TRY(zero_close_bucket());
    if (z.open_end == z.open_begin) z.open_begin = z.open_end = v->offset + n;
    z.open_begin -= n;
    if ((double)(z.open_end - z.open_begin) * sizeof(float) >= z.bucket_bytes)
        TS_TRY(zero_close_bucket());
    return z.overlap ? zero_progress() : TS_OK;
}

/* ---------------------------------------------------------------------------
 * Stages 2 and 3: blocks gathered whole around the modules
 * ------------------------------------------------------------------------- */

/* The parameters of this rank, their blocks per dp rank, and the module
 * whose backward completes each gradient. */
static ts_status zero_setup_params(void) {
    const ts_plugin_model *m = z.host->model(z.ctx);
    if (!m) return z.host->error(z.ctx, TS_ERR_INVALID, "no model view");
    z.model = m;
    z.nparams = m->nparams;
    z.params = calloc((size_t)(m->nparams ? m->nparams : 1), sizeof *z.params);
    z.module_params = calloc((size_t)(m->nmodules ? m->nmodules : 1), sizeof *z.module_params);
    z.nmodules = m->nmodules;
    if (!z.params || !z.module_params) return zero_nomem();
    for (int i = 0; i < m->nparams; i++) {
        zero_param *p = &z.params[i];
        ts_plugin_param *v = m->params[i];
        p->v = v;
        p->n_store = zero_numel(v->store);
        p->n_use = zero_numel(v->use);
        p->es = v->store->dtype == TS_BF16 ? 2 : 4;
        p->last_backward = -1;
        p->counts = calloc((size_t)z.ranks, sizeof *p->counts);
        if (!p->counts) return zero_nomem();
        int coords[TS_LAYOUT_MAX_AXES];
        TS_TRY(z.host->comms->layout_coords(z.ctx, v->layout, coords));
        int dp = zero_axis(v->layout, "dp");
        if (dp < 0 || !(v->provided >> dp & 1u))
            return z.host->error(z.ctx, TS_ERR_INVALID, "%s is not stored cut over dp", v->name);
        p->dim = v->layout->axes[dp].placement.dim;
        p->outer = p->inner = 1;
        for (int d = 0; d < v->use->ndim; d++) {
            if (d < p->dim) p->outer *= (size_t)v->use->shape[d];
            if (d > p->dim) p->inner *= (size_t)v->use->shape[d];
        }
        p->use_rows = (size_t)v->use->shape[p->dim];
        p->rows = calloc((size_t)z.ranks, sizeof *p->rows);
        p->row0 = calloc((size_t)z.ranks, sizeof *p->row0);
        if (!p->rows || !p->row0) return zero_nomem();
        size_t total = 0;
        for (int r = 0; r < z.ranks; r++) {
            int64_t off[TS_MAX_DIMS], shp[TS_MAX_DIMS];
            coords[dp] = r;
            TS_TRY(z.host->comms->layout_local_block(v->layout, coords, off, shp));
            size_t c = 1;
            for (int d = 0; d < v->layout->ndim; d++)
                c *= (size_t)shp[d];
            p->counts[r] = c;
            p->rows[r] = (size_t)shp[p->dim];
            p->row0[r] = r ? p->row0[r - 1] + p->rows[r - 1] : 0;
            total += c;
        }
        if (total != p->n_use || p->counts[z.rank] != p->n_store)
            return z.host->error(z.ctx, TS_ERR_INVALID,
                                 "%s: dp blocks of %zu elements do not make the whole %zu", v->name,
                                 total, p->n_use);
    }
    for (int k = 0; k < m->nmodules; k++) {
        const ts_plugin_module *mod = &m->modules[k];
        if (!mod->here) continue;
        z.module_params[k] = calloc((size_t)mod->nparams + 1, sizeof(int));
        if (!z.module_params[k]) return zero_nomem();
        for (int j = 0; j < mod->nparams; j++) {
            int idx = -1;
            for (int i = 0; i < m->nparams && idx < 0; i++)
                if (m->params[i] == mod->params[j]) idx = i;
            if (idx < 0) return z.host->error(z.ctx, TS_ERR_INVALID, "unknown parameter");
            z.module_params[k][j] = idx;
            /* Backward runs in reverse model order: the first module that
             * reads a parameter completes its gradient. */
            if (z.params[idx].last_backward < 0) z.params[idx].last_backward = k;
        }
    }
    return TS_OK;
}

/* Starts gathering p's blocks into its whole buffer: a new one (stage 3,
 * unless it is there already), or again into the same (stage 2's refresh,
 * `again`). */
static ts_status zero_gather_into(zero_param *p, int again) {
    if (p->whole && !again) return TS_OK;
    if (!p->whole)
        p->whole = z.host->dev->alloc(z.ctx, TS_MEM_PARAMS, (p->n_use ? p->n_use : 1) * p->es);
    if (!p->whole) return zero_nomem();
    void *dst = p->whole;
    if (p->outer > 1) { /* packed, unpacked in zero_use */
        p->packed = z.host->dev->alloc(z.ctx, TS_MEM_COMM, (p->n_use ? p->n_use : 1) * p->es);
        if (!p->packed) return zero_nomem();
        dst = p->packed;
    }
    z.gather_bytes += p->n_use * p->es;
    return z.host->comms->all_gatherv_start(z.comm, p->v->store->data, dst, p->counts,
                                            p->v->store->dtype, &p->gather);
}

/* Between the whole (dimension `dim` full) and the blocks packed in rank
 * order: rank r's block is outer slices of rows[r] x inner elements. */
static ts_status zero_repack(const zero_param *p, void *whole, void *packed, size_t es,
                             int to_whole) {
    char *w = whole, *k = packed;
    for (int r = 0; r < z.ranks; r++) {
        size_t slice = p->rows[r] * p->inner * es;
        for (size_t o = 0; o < p->outer && slice; o++) {
            char *a = w + ((o * p->use_rows + p->row0[r]) * p->inner) * es;
            TS_TRY(to_whole ? z.host->dev->copy(z.ctx, a, k, slice)
                            : z.host->dev->copy(z.ctx, k, a, slice));
            k += slice;
        }
    }
    return TS_OK;
}

static ts_status zero_gather(zero_param *p) {
    return zero_gather_into(p, 0);
}

/* p whole for the layers: waits for its gather. */
static ts_status zero_use(zero_param *p) {
    TS_TRY(zero_gather(p));
    if (p->gather) {
        double t0 = zero_now();
        ts_status st = z.host->comms->wait(p->gather);
        z.wait_gather_s += zero_now() - t0;
        p->gather = NULL;
        TS_TRY(st);
    }
    if (p->packed) {
        ts_status st = zero_repack(p, p->whole, p->packed, p->es, 1);
        z.host->dev->free(z.ctx, p->packed);
        p->packed = NULL;
        TS_TRY(st);
    }
    p->v->use->data = p->whole;
    p->holders++;
    p->prefetched = 0;
    return TS_OK;
}

static void zero_free_whole(zero_param *p) {
    z.host->dev->free(z.ctx, p->whole);
    p->whole = NULL;
    p->v->use->data = NULL;
}

/* Stage 3: one use fewer; the last frees the whole. */
static void zero_release(zero_param *p) {
    if (p->holders > 0) p->holders--;
    if (p->holders == 0 && !p->prefetched) zero_free_whole(p);
}

/* Gathers the parameters of the `n` modules here after (dir = 1) or before
 * (dir = -1) module k. */
static ts_status zero_prefetch(int k, int dir) {
    for (int j = k + dir, left = z.prefetch; left > 0 && j >= 0 && j < z.model->nmodules;
         j += dir) {
        if (!z.module_params[j]) continue;
        left--;
        const ts_plugin_module *mod = &z.model->modules[j];
        for (int i = 0; i < mod->nparams; i++) {
            zero_param *p = &z.params[z.module_params[j][i]];
            if (p->whole) continue;
            TS_TRY(zero_gather(p));
            p->prefetched = 1;
        }
    }
    return TS_OK;
}

/* Completes the oldest reduce-scatter in flight: adds this rank's block of
 * the reduced gradient into store_grad. In issue order, so that the sums
 * of the micro-batches are added in one order on every run. */
static ts_status zero_finish_oldest(void) {
    zero_pending *q = &z.pending[z.first_pending];
    double t0 = zero_now();
    ts_status st = q->req ? z.host->comms->wait(q->req) : TS_OK;
    z.wait_reduce_s += zero_now() - t0;
    q->req = NULL;
    if (!st && q->n) st = zero_sum_cp(q->block, q->n);
    if (!st && q->n) st = z.host->dev->add(z.ctx, q->dst, q->block, q->n);
    z.host->dev->free(z.ctx, q->block);
    z.host->dev->free(z.ctx, q->whole);
    z.pending_bytes -= q->bytes;
    z.first_pending++;
    if (z.first_pending == z.npending) z.first_pending = z.npending = 0;
    return st;
}

/* Lets the operations in flight progress (a transport such as MPI moves
 * data only inside its calls): tests each once; a finished one is marked
 * (its request released) and completed in order later. */
static ts_status zero_progress(void) {
    for (int i = z.first_pending; i < z.npending; i++) {
        zero_pending *q = &z.pending[i];
        int done = 0;
        if (q->req) TS_TRY(z.host->comms->test(q->req, &done));
        if (done) q->req = NULL;
    }
    for (int i = 0; i < z.nparams; i++) {
        zero_param *p = &z.params[i];
        int done = 0;
        if (p->gather) TS_TRY(z.host->comms->test(p->gather, &done));
        if (done) p->gather = NULL;
    }
    for (int i = 0; i < z.nbuckets; i++) {
        zero_bucket *b = &z.buckets[i];
        int done = 0;
        if (b->req) TS_TRY(z.host->comms->test(b->req, &done));
        if (done) b->req = NULL;
    }
    return TS_OK;
}

static ts_status zero_finish_all(void) {
    while (z.first_pending < z.npending)
        TS_TRY(zero_finish_oldest());
    return TS_OK;
}

/* Reduce-scatters p's whole gradient into its block. */
static ts_status zero_reduce(zero_param *p) {
    if (z.npending == ZERO_MAX_PENDING) TS_TRY(zero_finish_all());
    zero_pending *q = &z.pending[z.npending];
    if (p->outer > 1) { /* the blocks packed in rank order, as the reduction wants them */
        float *packed =
            z.host->dev->alloc(z.ctx, TS_MEM_COMM, (p->n_use ? p->n_use : 1) * sizeof(float));
        if (!packed) return zero_nomem();
        ts_status st = zero_repack(p, p->grad, packed, sizeof(float), 0);
        z.host->dev->free(z.ctx, p->grad);
        p->grad = packed;
        TS_TRY(st);
    }
    q->whole = p->grad;
    q->n = p->n_store;
    q->bytes = p->n_use * sizeof(float);
    q->dst = p->v->store_grad->data;
    q->block = z.host->dev->alloc(z.ctx, TS_MEM_COMM, (q->n ? q->n : 1) * sizeof(float));
    if (!q->block) return zero_nomem();
    z.reduce_bytes += q->bytes;
    TS_TRY(z.host->comms->reduce_scatter_v_start(z.comm, q->whole, q->block, p->counts, TS_F32,
                                                 TS_REDUCE_SUM, &q->req));
    z.npending++;
    z.pending_bytes += q->bytes;
    p->grad = NULL;
    p->v->use_grad->data = NULL;
    if (!z.overlap) return TS_OK; /* all at the optimizer step */
    while (z.first_pending < z.npending && (double)z.pending_bytes > z.bucket_bytes)
        TS_TRY(zero_finish_oldest());
    return TS_OK;
}

static ts_status zero_module(ts_plugin_ctx *ctx, const ts_plugin_module_event *ev, void *user) {
    (void)ctx;
    (void)user;
    if (z.stage < 2) return TS_OK;
    int k = ev->module->index;
    const int *idx = z.module_params[k];
    int n = ev->module->nparams;
    if (!idx) return TS_OK;
    if (z.overlap) TS_TRY(zero_progress());
    /* A forward run again inside the backward (activation recomputation):
     * without resharding after the forward, the parameters are held since
     * the first one; with it, gathered again (no prefetch: the modules
     * after it have run their backward). */
    int again = ev->struct_size >= offsetof(ts_plugin_module_event, recompute) + sizeof(int) &&
                ev->recompute;
    switch (ev->kind) {
    case TS_MODULE_BEFORE_FORWARD:
        if (z.stage == 3 && again && !z.reshard) {
            for (int i = 0; i < n; i++)
                z.params[idx[i]].v->use->data = z.params[idx[i]].whole;
        } else if (z.stage == 3) {
            for (int i = 0; i < n; i++)
                TS_TRY(zero_gather(&z.params[idx[i]]));
            if (!again) TS_TRY(zero_prefetch(k, 1));
            for (int i = 0; i < n; i++)
                TS_TRY(zero_use(&z.params[idx[i]]));
        }
        break;
    case TS_MODULE_AFTER_FORWARD:
        if (z.stage == 3 && z.reshard)
            for (int i = 0; i < n; i++)
                zero_release(&z.params[idx[i]]);
        break;
    case TS_MODULE_BEFORE_BACKWARD:
        for (int i = 0; i < n; i++) {
            zero_param *p = &z.params[idx[i]];
            if (z.stage == 3 && z.reshard) TS_TRY(zero_gather(p));
            if (!p->grad) {
                size_t bytes = (p->n_use ? p->n_use : 1) * sizeof(float);
                p->grad = z.host->dev->alloc(z.ctx, TS_MEM_GRADS, bytes);
                if (!p->grad) return zero_nomem();
                TS_TRY(z.host->dev->zero(z.ctx, p->grad, bytes));
            }
            p->grad_users++;
            p->v->use_grad->data = p->grad;
        }
        if (z.stage == 3) {
            TS_TRY(zero_prefetch(k, -1));
            for (int i = 0; i < n; i++) {
                zero_param *p = &z.params[idx[i]];
                if (z.reshard)
                    TS_TRY(zero_use(p));
                else
                    p->v->use->data = p->whole; /* held since the forward */
            }
        }
        break;
    case TS_MODULE_AFTER_BACKWARD:
        for (int i = 0; i < n; i++) {
            zero_param *p = &z.params[idx[i]];
            if (z.stage == 3) zero_release(p);
            /* Reduced once no other micro-batch's backward still adds to it
             * (with split backwards, its weight part is pending). */
            if (p->grad_users > 0) p->grad_users--;
            if (p->last_backward == k) p->completed = 1;
            if (p->completed && p->grad_users == 0) {
                p->completed = 0;
                TS_TRY(zero_reduce(p));
            }
        }
        break;
    default: break;
    }
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * The step
 * ------------------------------------------------------------------------- */

static ts_status zero_before_forward(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev,
                                     void *user) {
    (void)ctx;
    (void)user;
    if (ev->micro_batch != 0) return TS_OK;
    TS_TRY(zero_check_offload());
    TS_TRY(zero_bind());
    if (z.ranks == 1) return TS_OK; /* one data-parallel rank: nothing to shard */
    z.nbuckets = 0;
    z.open_begin = z.open_end = 0;
    if (z.stage < 2) return TS_OK;
    if (!z.params) TS_TRY(zero_setup_params());
    if (z.stage == 2) {
        /* The whole copy the layers read this step, from the blocks the
         * last update (or a checkpoint) left. */
        for (int i = 0; i < z.nparams; i++)
            TS_TRY(zero_gather_into(&z.params[i], 1));
        for (int i = 0; i < z.nparams; i++) {
            zero_param *p = &z.params[i];
            TS_TRY(zero_use(p));
            p->holders = 0; /* kept whole; never released */
        }
    }
    return TS_OK;
}

static ts_status zero_before_optimizer(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev,
                                       void *user) {
    (void)ctx;
    (void)ev;
    (void)user;
    if (z.ranks == 1) return TS_OK;
    if (z.stage == 1) {
        TS_TRY(zero_close_bucket());
        for (int i = 0; i < z.nbuckets; i++) {
            if (!z.buckets[i].block) TS_TRY(zero_bucket_start(&z.buckets[i]));
            TS_TRY(zero_bucket_finish(&z.buckets[i]));
        }
        TS_TRY(z.host->metric(z.ctx, "buckets", (double)z.nbuckets));
    } else {
        TS_TRY(zero_finish_all());
        /* Stage 3: anything gathered ahead and never used this step. */
        for (int i = 0; z.stage == 3 && i < z.nparams; i++) {
            zero_param *p = &z.params[i];
            if (p->gather) {
                TS_TRY(z.host->comms->wait(p->gather));
                p->gather = NULL;
            }
            z.host->dev->free(z.ctx, p->packed);
            p->packed = NULL;
            if (p->whole) zero_free_whole(p);
            p->holders = p->prefetched = 0;
        }
    }
    /* Time blocked in waits since the last report (stage 1's all-gather of
     * the updated ranges comes after the report: it counts in the next). */
    TS_TRY(z.host->metric(z.ctx, "stage", (double)z.stage));
    TS_TRY(z.host->metric(z.ctx, "reduce_scatter_bytes", (double)z.reduce_bytes));
    TS_TRY(z.host->metric(z.ctx, "gather_wait_ms", 1e3 * z.wait_gather_s));
    TS_TRY(z.host->metric(z.ctx, "reduce_wait_ms", 1e3 * z.wait_reduce_s));
    z.wait_gather_s = z.wait_reduce_s = 0.0;
    z.gather_bytes = z.reduce_bytes = 0;
    return TS_OK;
}

static ts_status zero_init(const ts_host *host, ts_plugin_ctx *ctx) {
    memset(&z, 0, offsetof(__typeof__(z), pending));
    z.host = host;
    z.ctx = ctx;
    if (!TS_HOST_HAS(host, provider))
        return host->error(ctx, TS_ERR_PLUGIN, "needs a core of plugin ABI 1.1 or later");
    int64_t stage, prefetch;
    const char *offload;
    double mb;
    TS_TRY(host->config->get_int(ctx, "stage", &stage));
    TS_TRY(host->config->get_int(ctx, "prefetch", &prefetch));
    TS_TRY(host->config->get_bool(ctx, "reshard_after_forward", &z.reshard));
    TS_TRY(host->config->get_bool(ctx, "overlap", &z.overlap));
    TS_TRY(host->config->get_float(ctx, "bucket_mb", &mb));
    TS_TRY(host->config->get_str(ctx, "offload", &offload));
    z.stage = (int)stage;
    z.prefetch = (int)prefetch;
    z.bucket_bytes = mb * 1024.0 * 1024.0;
    z.offload = strcmp(offload, "cpu") == 0;
    TS_TRY(host->reg->transform(ctx, "zero", TS_PHASE_SHARD_OPTIMIZER, zero_transform, NULL));
    TS_TRY(host->reg->hook(ctx, TS_HOOK_BEFORE_FORWARD, zero_before_forward, NULL));
    TS_TRY(host->reg->hook(ctx, TS_HOOK_BEFORE_OPTIMIZER, zero_before_optimizer, NULL));
    static const ts_plugin_optimizer_state_ops cut = {sizeof cut, zero_partition, zero_after_step,
                                                      0};
    static const ts_plugin_optimizer_state_ops cut_offload = {
        sizeof cut_offload, zero_partition, zero_after_step, TS_OPTIMIZER_STATE_OFFLOAD};
    /* The gradients are partial over cp too: zero sums its ranges or blocks
     * over it (dp's default reduction over dp-cp yields). */
    TS_TRY(host->reg->provider(ctx, TS_PROVIDE_GRAD_REDUCTION, "cp"));
    if (z.stage == 1) {
        TS_TRY(host->reg->provider(ctx, TS_PROVIDE_GRAD_REDUCTION, "dp"));
        TS_TRY(host->reg->hook(ctx, TS_HOOK_GRAD_READY, zero_grad_ready, NULL));
    } else {
        TS_TRY(host->reg->provider(ctx, TS_PROVIDE_PARAM_STORAGE, "dp"));
        for (int k = 0; k < TS_MODULE_HOOK_COUNT; k++)
            TS_TRY(host->reg->module_hook(ctx, (ts_plugin_module_hook_kind)k, zero_module, NULL));
    }
    /* Stage 1 cuts the optimizer state itself; stages 2 and 3 cut it with
     * the blocks, and need the provider only to move it off the GPU. */
    if (z.stage == 1 || z.offload)
        TS_TRY(host->reg->optimizer_state(ctx, "dp", z.offload ? &cut_offload : &cut, NULL));
    return TS_OK;
}

static void zero_fini(const ts_host *host, ts_plugin_ctx *ctx) {
    (void)host;
    (void)ctx;
    free(z.range_begin);
    free(z.range_count);
    free(z.buckets);
    for (int i = 0; i < z.nparams; i++) {
        free(z.params[i].counts);
        free(z.params[i].rows);
        free(z.params[i].row0);
    }
    for (int k = 0; z.module_params && k < z.nmodules; k++)
        free(z.module_params[k]);
    free(z.params);
    free(z.module_params);
}

static const ts_plugin_descriptor zero_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "zero",
    "1.0.0",
    "ZeRO stages 1-3: optimizer state, gradients and parameters sharded over dp",
    zero_keys,
    sizeof zero_keys / sizeof zero_keys[0],
    zero_init,
    zero_fini,
    TS_PLUGIN_THREAD_LOCAL_STATE, /* its state is _Thread_local */
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &zero_descriptor;
}
