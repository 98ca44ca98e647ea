/*
 * dp.c — tessera-dp.so: data parallelism with bucketed gradient all-reduce
 * overlapped with backward, in the manner of PyTorch DDP (Li et al., "PyTorch
 * Distributed: Experiences on Accelerating Data Parallel Training", VLDB 2020).
 *
 * What it does:
 *  - claims the `dp` axis (size = N | auto); the core reads each dp rank's
 *    part of the global batch (Megatron-LM's sampler order) and normalises
 *    the loss by the valid tokens of the whole global batch, so gradients
 *    are SUMS over ranks of correctly scaled local gradients;
 *  - declares, as a layout transform, that every parameter is replicated
 *    over dp and that its gradient comes out of backward partial over the
 *    batch-sharding group (dp-cp); the reduction below turns it replicated;
 *  - on each GRAD_READY hook (the last micro-batch's backward finished a
 *    parameter's gradient) adds the gradient to the open bucket; a bucket
 *    closes when it holds at least bucket_mb MiB (PyTorch's rule: a bucket
 *    may exceed the cap by its last tensor) and its non-blocking all-reduce
 *    starts at once (overlap = true) or at the optimizer step (false);
 *  - BEFORE_OPTIMIZER closes the last bucket and waits for all of them.
 *  - declares (ABI 1.1) that it provides the gradient reduction over dp and
 *    cp (its group dp-cp cuts the batch along both), so the core's binder
 *    knows the partial gradients there are summed; a parameter another
 *    plugin keeps cut over dp (its layout S(d) there, e.g. parameter
 *    storage presented whole) is that plugin's to reduce and is skipped.
 *    The provision is a default: a plugin that reduces gradients its own
 *    way (zero's reduce-scatter) takes it over, and dp then reduces
 *    nothing (it still cuts the batch).
 *
 * Buckets reduce the gradient memory in place when their tensors are
 * adjacent in memory (the core's flat gradient array, visited in reverse
 * order of use, is); a tensor that is not adjacent starts a new bucket.
 *
 * What it does not do: shard optimizer state (the zero plugin), or
 * communicate anything the core derives from placements.
 */
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "tessera/plugin.h"

#define DP_MAX_BUCKETS 4096

static const ts_plugin_key dp_keys[] = {
    {"size", TS_PLUGIN_KEY_INT, "auto", 1, 1 << 20, "auto",
     "data-parallel ranks; auto = the world divided by the other axes"},
    {"bucket_mb", TS_PLUGIN_KEY_FLOAT, "25", 1e-6, 1e6, NULL,
     "gradient bucket size in MiB: a bucket's all-reduce starts once it holds this much"},
    {"overlap", TS_PLUGIN_KEY_BOOL, "true", 1, 0, NULL,
     "start each bucket's all-reduce during backward (false: all at the optimizer step)"},
    {"grad_dtype", TS_PLUGIN_KEY_ENUM, "f32", 1, 0, "f32|bf16",
     "the gradient all-reduce's type: f32 (exact sums, as Megatron's main grads) or bf16 "
     "(half the bytes; each bucket rounded to bf16, summed, and widened back)"},
};

typedef struct dp_bucket {
    float *base;  /* lowest address of the bucket's gradients */
    size_t count; /* f32 elements                             */
    void *half;   /* grad_dtype bf16: the bucket in flight     */
    ts_comm_request *req;
    int done;
    double t_start, t_done;
} dp_bucket;

typedef struct dp_state {
    const ts_host *host;
    ts_plugin_ctx *ctx;
    double bucket_bytes;
    int overlap;
    int bf16;      /* [dp] grad_dtype = bf16 */
    ts_comm *comm; /* dp-cp: every rank holding a part of the batch */
    int active;    /* dp reduces the gradients (nobody took it over) */
    /* Experts' weights live on the expert mesh: replicated over edp, their
     * gradients are all-reduced over it, one call per parameter. */
    ts_comm *expert_comm;
    int nexpert;
    size_t expert_bytes;
    int nbuckets; /* closed buckets this step                      */
    float *open_base;
    size_t open_count;
    double t_backward_end;
    /* Totals for the metrics of the step. */
    double exposed_s, span_s;
    size_t reduced_bytes;
    /* Last, and not cleared at init (nexpert and nbuckets say what is
     * used; a bucket is cleared when it is made). */
    ts_comm_request *expert_reqs[DP_MAX_BUCKETS];
    dp_bucket buckets[DP_MAX_BUCKETS];
} dp_state;

static _Thread_local dp_state dp;

static double dp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The communicator exists only once the mesh does: fetch it lazily. */
static ts_status dp_bind(void) {
    if (dp.comm) return TS_OK;
    const char *who = dp.host->provider(dp.ctx, TS_PROVIDE_GRAD_REDUCTION, "dp");
    dp.active = who && strcmp(who, "dp") == 0;
    dp.comm = dp.host->comms->get(dp.ctx, "dp-cp");
    if (!dp.comm) return dp.host->error(dp.ctx, TS_ERR_INVALID, "no dp-cp communicator");
    dp.expert_comm = dp.host->comms->get(dp.ctx, "edp");
    return TS_OK;
}

/* The axis `name` of a layout, or NULL. */
static const ts_layout_axis *dp_axis(const ts_layout *l, const char *name) {
    for (int a = 0; a < l->naxes; a++)
        if (strcmp(l->axes[a].name, name) == 0) return &l->axes[a];
    return NULL;
}

/* An expert's gradient: replicated over edp (when it has ranks), summed
 * there at once. */
static ts_status dp_expert_grad(const ts_layout *l, const ts_tensor *grad, size_t n) {
    const ts_layout_axis *edp = dp_axis(l, "edp");
    if (!edp || edp->size <= 1 || edp->placement.kind != TS_PLACEMENT_REPLICATE) return TS_OK;
    if (!dp.expert_comm) return dp.host->error(dp.ctx, TS_ERR_INVALID, "no edp communicator");
    if (dp.nexpert == DP_MAX_BUCKETS)
        return dp.host->error(dp.ctx, TS_ERR_INVALID, "more than %d expert gradients",
                              DP_MAX_BUCKETS);
    dp.expert_bytes += n * sizeof(float);
    return dp.host->comms->all_reduce_start(dp.expert_comm, grad->data, grad->data, n, TS_F32,
                                            TS_REDUCE_SUM, &dp.expert_reqs[dp.nexpert++]);
}

static ts_status dp_start(dp_bucket *b) {
    b->t_start = dp_now();
    b->done = 0;
    if (!dp.bf16)
        return dp.host->comms->all_reduce_start(dp.comm, b->base, b->base, b->count, TS_F32,
                                                TS_REDUCE_SUM, &b->req);
    /* In bf16: rounded into a buffer of half the bytes, reduced there. */
    b->half = dp.host->dev->alloc(dp.ctx, TS_MEM_COMM, b->count * sizeof(uint16_t));
    if (!b->half)
        return dp.host->error(dp.ctx, TS_ERR_NOMEM, "no memory for a bf16 bucket of %zu elements",
                              b->count);
    TS_TRY(dp.host->dev->convert(dp.ctx, b->half, TS_BF16, b->base, TS_F32, b->count));
    return dp.host->comms->all_reduce_start(dp.comm, b->half, b->half, b->count, TS_BF16,
                                            TS_REDUCE_SUM, &b->req);
}

/* A bucket whose all-reduce completed: in bf16, the sums widened back into
 * the gradients. */
static ts_status dp_finish(dp_bucket *b) {
    b->done = 1;
    b->req = NULL;
    b->t_done = dp_now();
    if (!b->half) return TS_OK;
    ts_status st = dp.host->dev->convert(dp.ctx, b->base, TS_F32, b->half, TS_BF16, b->count);
    dp.host->dev->free(dp.ctx, b->half);
    b->half = NULL;
    return st;
}

/* Closes the open bucket; starts its all-reduce when overlapping. */
static ts_status dp_close_bucket(void) {
    if (dp.open_count == 0) return TS_OK;
    if (dp.nbuckets == DP_MAX_BUCKETS)
        return dp.host->error(dp.ctx, TS_ERR_INVALID,
                              "more than %d gradient buckets: raise [dp] bucket_mb",
                              DP_MAX_BUCKETS);
    dp_bucket *b = &dp.buckets[dp.nbuckets++];
    memset(b, 0, sizeof *b);
    b->base = dp.open_base;
    b->count = dp.open_count;
    dp.open_base = NULL;
    dp.open_count = 0;
    dp.reduced_bytes += b->count * (dp.bf16 ? sizeof(uint16_t) : sizeof(float));
    return dp.overlap ? dp_start(b) : TS_OK;
}

/* Lets started all-reduces progress (MPI moves data inside test and wait). */
static ts_status dp_progress(void) {
    for (int i = 0; i < dp.nbuckets; i++) {
        dp_bucket *b = &dp.buckets[i];
        if (!b->req || b->done) continue;
        int done = 0;
        TS_TRY(dp.host->comms->test(b->req, &done));
        if (done) TS_TRY(dp_finish(b));
    }
    return TS_OK;
}

static ts_status dp_grad_ready(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev, void *user) {
    (void)ctx;
    (void)user;
    if (!dp.active) return TS_OK;
    if (ev->grad->dtype != TS_F32)
        return dp.host->error(dp.ctx, TS_ERR_INVALID, "gradient %s is %d, not f32", ev->grad->name,
                              (int)ev->grad->dtype);
    float *g = ev->grad->data;
    size_t n = 1;
    for (int d = 0; d < ev->grad->ndim; d++)
        n *= (size_t)ev->grad->shape[d];
    if (ev->struct_size >= offsetof(ts_plugin_hook_event, view) + sizeof ev->view && ev->view &&
        ev->view->layout) {
        const ts_layout *l = ev->view->layout;
        const ts_layout_axis *ax = dp_axis(l, "dp");
        /* Not on the dense mesh: an expert's weights. */
        if (!ax) {
            TS_TRY(dp_expert_grad(l, ev->grad, n));
            return dp.overlap ? dp_progress() : TS_OK;
        }
        /* A parameter cut over dp is reduced by the plugin that stores it so. */
        if (ax->size > 1 && ax->placement.kind != TS_PLACEMENT_REPLICATE)
            return dp.overlap ? dp_progress() : TS_OK;
    }
    /* Gradients arrive in reverse order of use; adjacent ones extend the
     * open bucket downwards in memory. */
    if (dp.open_count > 0 && g + n != dp.open_base) TS_TRY(dp_close_bucket());
    if (dp.open_count == 0) dp.open_base = g + n;
    dp.open_base -= n;
    dp.open_count += n;
    if ((double)dp.open_count * sizeof(float) >= dp.bucket_bytes) TS_TRY(dp_close_bucket());
    return dp.overlap ? dp_progress() : TS_OK;
}

static ts_status dp_before_forward(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev, void *user) {
    (void)ctx;
    (void)user;
    TS_TRY(dp_bind());
    if (ev->micro_batch == 0) {
        dp.nbuckets = 0;
        dp.nexpert = 0;
        dp.expert_bytes = 0;
        dp.open_base = NULL;
        dp.open_count = 0;
        dp.reduced_bytes = 0;
    }
    return TS_OK;
}

static ts_status dp_before_optimizer(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev,
                                     void *user) {
    (void)ctx;
    (void)ev;
    (void)user;
    if (!dp.active) return TS_OK;
    dp.t_backward_end = dp_now();
    TS_TRY(dp_close_bucket());
    for (int i = 0; i < dp.nexpert; i++) {
        TS_TRY(dp.host->comms->wait(dp.expert_reqs[i]));
        dp.expert_reqs[i] = NULL;
    }
    for (int i = 0; i < dp.nbuckets; i++) {
        dp_bucket *b = &dp.buckets[i];
        if (!dp.overlap) TS_TRY(dp_start(b));
        if (b->req) {
            TS_TRY(dp.host->comms->wait(b->req));
            TS_TRY(dp_finish(b));
        }
    }
    double end = dp.t_backward_end, first = end, last = end;
    for (int i = 0; i < dp.nbuckets; i++) {
        if (dp.buckets[i].t_start < first) first = dp.buckets[i].t_start;
        if (dp.buckets[i].t_done > last) last = dp.buckets[i].t_done;
    }
    dp.exposed_s = last - end;
    dp.span_s = last - first;
    /* Hidden fraction: the part of the all-reduce span (first start to last
     * completion) that ran before backward ended. */
    double hidden = dp.span_s > 0 ? 1.0 - dp.exposed_s / dp.span_s : 0.0;
    TS_TRY(dp.host->metric(dp.ctx, "buckets", (double)dp.nbuckets));
    TS_TRY(dp.host->metric(dp.ctx, "allreduce_bytes", (double)dp.reduced_bytes));
    if (dp.expert_bytes)
        TS_TRY(dp.host->metric(dp.ctx, "expert_allreduce_bytes", (double)dp.expert_bytes));
    TS_TRY(dp.host->metric(dp.ctx, "allreduce_exposed_ms", 1e3 * dp.exposed_s));
    TS_TRY(dp.host->metric(dp.ctx, "allreduce_span_ms", 1e3 * dp.span_s));
    return dp.host->metric(dp.ctx, "hidden_fraction", hidden);
}

/* Placements: the batch (data and activations) is cut along its first
 * dimension over dp; parameters stay replicated over dp (their gradients are
 * partial over the batch-sharding group until the buckets reduce them). */
static ts_status dp_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    (void)user;
    for (int i = 0; i < plan->count; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        if (e->kind == TS_PLAN_PARAM) continue;
        for (int a = 0; a < e->layout.naxes; a++)
            if (strcmp(e->layout.axes[a].name, "dp") == 0)
                e->layout.axes[a].placement = ts_placement_shard(0);
    }
    return TS_OK;
}

static ts_status dp_init(const ts_host *host, ts_plugin_ctx *ctx) {
    memset(&dp, 0, offsetof(dp_state, expert_reqs));
    dp.host = host;
    dp.ctx = ctx;
    int64_t size = 0;
    double mb = 0;
    TS_TRY(host->config->get_int(ctx, "size", &size));
    TS_TRY(host->config->get_float(ctx, "bucket_mb", &mb));
    TS_TRY(host->config->get_bool(ctx, "overlap", &dp.overlap));
    const char *gd = "f32";
    TS_TRY(host->config->get_str(ctx, "grad_dtype", &gd));
    dp.bf16 = strcmp(gd, "bf16") == 0;
    if (dp.bf16 && !TS_DEVICE_HAS(host->dev, convert))
        return host->error(ctx, TS_ERR_INVALID,
                           "grad_dtype = bf16 needs a core with device_convert (ABI 1.1, later "
                           "build)");
    dp.bucket_bytes = mb * 1024.0 * 1024.0;
    TS_TRY(host->reg->axis(ctx, "dp", size < 0 ? TS_PLUGIN_AXIS_AUTO : (int)size, TS_MESH_DENSE));
    TS_TRY(host->reg->transform(ctx, "dp_batch", TS_PHASE_SHARD_DATA, dp_transform, NULL));
    TS_TRY(host->reg->hook(ctx, TS_HOOK_BEFORE_FORWARD, dp_before_forward, NULL));
    TS_TRY(host->reg->hook(ctx, TS_HOOK_GRAD_READY, dp_grad_ready, NULL));
    /* The buckets reduce over dp-cp: every axis that cuts the batch. */
    TS_TRY(host->reg->provider(ctx, TS_PROVIDE_GRAD_REDUCTION | TS_PROVIDE_DEFAULT, "dp"));
    TS_TRY(host->reg->provider(ctx, TS_PROVIDE_GRAD_REDUCTION | TS_PROVIDE_DEFAULT, "cp"));
    return host->reg->hook(ctx, TS_HOOK_BEFORE_OPTIMIZER, dp_before_optimizer, NULL);
}

static const ts_plugin_descriptor dp_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "dp",
    "1.1.0",
    "data parallel: batch sharded over dp, bucketed gradient all-reduce overlapped with backward",
    dp_keys,
    (int)(sizeof dp_keys / sizeof dp_keys[0]),
    dp_init,
    NULL,
    TS_PLUGIN_THREAD_LOCAL_STATE, /* its state is _Thread_local */
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &dp_descriptor;
}
