/*
 * layers.c — the placement-driven layers (layers.h): redistribution of hidden
 * states, the rules of linear products, embedding lookups and the
 * cross-entropy over cut logits, and the helpers every module uses (weight
 * staging in bf16, rounding, the shared workspace, saved state).
 *
 * Nothing here names a strategy: an axis is an index into model->axes, and
 * what happens on it follows from the placements.
 */
#include "layers.h"
#include "phase.h" /* ts_phase_recomputing: recomputed parts tagged apart */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------
 * Placements
 * ------------------------------------------------------------------------- */
ts_place ts_place_replicated(void) {
    ts_place p;
    for (int a = 0; a < TS_MODEL_MAX_AXES; a++)
        p.on[a] = ts_placement_replicate();
    return p;
}

int ts_place_equal(const ts_model *m, const ts_place *a, const ts_place *b) {
    for (int i = 0; i < m->naxes; i++)
        if (!ts_placement_equal(a->on[i], b->on[i])) return 0;
    return 1;
}

/* The block of the sequence dimension (length T) this rank holds under p. */
static void place_seq_block(const ts_model *m, const ts_place *p, int T, int64_t *off,
                            int64_t *len) {
    ts_layout l;
    int64_t shape[2] = {1, T}, o[2] = {0, 0}, n[2] = {1, T};
    int coords[TS_MODEL_MAX_AXES];
    ts_layout_init(&l, 2, shape);
    for (int a = 0; a < m->naxes; a++) {
        ts_placement q = p->on[a];
        /* Only the sequence cut matters here; other cuts leave T whole. */
        if (!(q.kind == TS_PLACEMENT_SHARD && q.dim == 1)) q = ts_placement_replicate();
        ts_layout_add_axis(&l, m->axes[a].name, m->axes[a].size, q);
        coords[a] = m->axes[a].coord;
    }
    TS_ASSERT(ts_layout_local_block(&l, coords, o, n) == TS_OK);
    *off = o[1];
    *len = n[1];
}

int ts_layer_rows(const ts_model *m, const ts_place *p, int T) {
    int64_t off, len;
    place_seq_block(m, p, T, &off, &len);
    return (int)len;
}

int ts_layer_row0(const ts_model *m, const ts_place *p, int T) {
    int64_t off, len;
    place_seq_block(m, p, T, &off, &len);
    return (int)off;
}

static int is_seq(ts_placement p) {
    return p.kind == TS_PLACEMENT_SHARD && p.dim == 1;
}

/* ---------------------------------------------------------------------------
 * Redistribution of hidden states
 * ------------------------------------------------------------------------- */
static float *comm_stage(ts_model *m, size_t floats) {
    if (floats > m->comm_stage_floats) {
        m->be->free(m->comm_stage);
        m->comm_stage = m->be->alloc(TS_MEM_COMM, floats * sizeof(float));
        m->comm_stage_floats = m->comm_stage ? floats : 0;
    }
    return m->comm_stage;
}

/* The redistribution from `from` to `to`, or with dry set only whether it
 * has a rule (TS_OK) or not (the error). */
static ts_status redistribute(ts_model *m, int dry, float *dst, float *src, const ts_place *from,
                              const ts_place *to, int B, int T, int F, float **out);

ts_status ts_layer_redistribute(ts_model *m, float *dst, float *src, const ts_place *from,
                                const ts_place *to, int B, int T, int F, float **out) {
    return redistribute(m, 0, dst, src, from, to, B, T, F, out);
}

ts_status ts_layer_regather(ts_model *m, float *dst, float *src, const ts_place *from,
                            const ts_place *to, int B, int T, int F, float **out) {
    int was = m->in_backward;
    m->in_backward = 0; /* forward values: bf16 on the wire in bf16 mode */
    ts_status st = redistribute(m, 0, dst, src, from, to, B, T, F, out);
    m->in_backward = was;
    return st;
}

int ts_layer_can_redistribute(const ts_model *m, const ts_place *from, const ts_place *to) {
    float *out;
    return redistribute((ts_model *)m, 1, NULL, NULL, from, to, 1, 1, 1, &out) == TS_OK;
}

ts_place ts_layer_grad_place(const ts_model *m, const ts_place *p) {
    ts_place g = *p;
    for (int a = 0; a < m->naxes; a++)
        if (g.on[a].kind == TS_PLACEMENT_PARTIAL) g.on[a] = ts_placement_replicate();
    return g;
}

static ts_status redistribute(ts_model *m, int dry, float *dst, float *src, const ts_place *from,
                              const ts_place *to, int B, int T, int F, float **out) {
    int axis = -1;
    for (int a = 0; a < m->naxes; a++) {
        if (ts_placement_equal(from->on[a], to->on[a])) continue;
        if (axis >= 0)
            return ts_error(TS_ERR_INVALID,
                            "layers: a hidden state changes placement over %s and %s at once; "
                            "one axis at a time is supported",
                            m->axes[axis].name, m->axes[a].name);
        axis = a;
    }
    *out = src;
    if (axis < 0) return TS_OK;
    const ts_model_axis *ax = &m->axes[axis];
    ts_placement f = from->on[axis], t = to->on[axis];
    int s = ax->size, Tf = ts_layer_rows(m, from, T), Tt = ts_layer_rows(m, to, T);
    const ts_backend *be = m->be;
    /* In bf16 runs a forward's all-gather of the hidden state (sequence
     * parallelism), and the backward's gathering of the same activations
     * again (ts_layer_regather), move bf16 (half the bytes): the values are
     * bf16 already and arrive exact. Partial sums and the backward's
     * collectives of gradients stay f32:
     * rounding them on the way takes tp 2's bf16 run past the 1e-3 bound of
     * its equivalence with one rank (final weights 1.03e-3 to 1.09e-3
     * relative, measured). */
    int half = m->dtype == TS_BF16 && (!m->in_backward || m->partial_bf16);
    /* Sums in bf16 ([train] partial_dtype): the partials rounded to bf16
     * and reduced in it. */
    int sums16 = m->dtype == TS_BF16 && m->partial_bf16;
    if (is_seq(f) && t.kind == TS_PLACEMENT_REPLICATE) { /* all-gather along T */
        if (dry) return TS_OK;
        size_t blk = (size_t)B * Tf * F;
        float *stage = comm_stage(m, blk * s + (half ? (blk * (s + 1) + 1) / 2 : 0));
        if (!stage) return TS_ERR_NOMEM;
        if (half) {
            uint16_t *mine = (uint16_t *)(stage + blk * s), *all = mine + blk;
            TS_TRY(be->f32_to_bf16(mine, src, blk));
            TS_TRY(ts_comm_all_gather(ax->comm, mine, all, blk, TS_BF16));
            TS_TRY(be->bf16_to_f32(stage, all, blk * s));
        } else {
            TS_TRY(ts_comm_all_gather(ax->comm, src, stage, blk, TS_F32));
        }
        TS_TRY(be->seq_from_stage(dst, stage, s, B, Tt, F));
        *out = dst;
        return TS_OK;
    }
    if (f.kind == TS_PLACEMENT_PARTIAL && t.kind == TS_PLACEMENT_REPLICATE) { /* sum */
        if (dry) return TS_OK;
        size_t n = (size_t)B * Tf * F;
        if (!sums16) return ts_comm_all_reduce(ax->comm, src, src, n, TS_F32, TS_REDUCE_SUM);
        uint16_t *wire = (uint16_t *)comm_stage(m, (n + 1) / 2);
        if (!wire) return TS_ERR_NOMEM;
        TS_TRY(be->f32_to_bf16(wire, src, n));
        TS_TRY(ts_comm_all_reduce(ax->comm, wire, wire, n, TS_BF16, TS_REDUCE_SUM));
        return be->bf16_to_f32(src, wire, n);
    }
    if (f.kind == TS_PLACEMENT_PARTIAL && is_seq(t)) { /* sum, keep our rows */
        if (dry) return TS_OK;
        size_t blk = (size_t)B * Tt * F;
        float *stage = comm_stage(m, blk * s + (sums16 ? (blk * (s + 1) + 1) / 2 : 0));
        if (!stage) return TS_ERR_NOMEM;
        TS_TRY(be->seq_to_stage(stage, src, s, B, Tf, F));
        if (sums16) {
            uint16_t *all = (uint16_t *)(stage + blk * s), *mine = all + blk * s;
            TS_TRY(be->f32_to_bf16(all, stage, blk * s));
            TS_TRY(ts_comm_reduce_scatter(ax->comm, all, mine, blk, TS_BF16, TS_REDUCE_SUM));
            TS_TRY(be->bf16_to_f32(dst, mine, blk));
            *out = dst;
            return TS_OK;
        }
        TS_TRY(ts_comm_reduce_scatter(ax->comm, stage, dst, blk, TS_F32, TS_REDUCE_SUM));
        *out = dst;
        return TS_OK;
    }
    if (f.kind == TS_PLACEMENT_REPLICATE && is_seq(t)) { /* keep our rows */
        if (dry) return TS_OK;
        int r0 = ts_layer_row0(m, to, T) - ts_layer_row0(m, from, T);
        for (int b = 0; b < B; b++)
            TS_TRY(be->copy(dst + (size_t)b * Tt * F, src + ((size_t)b * Tf + r0) * F,
                            (size_t)Tt * F * sizeof(float)));
        *out = dst;
        return TS_OK;
    }
    char pf[16], pt[16];
    return ts_error(
        TS_ERR_INVALID, "layers: no rule redistributes a hidden state from %s to %s over %s",
        ts_placement_str(f, pf, sizeof pf), ts_placement_str(t, pt, sizeof pt), ax->name);
}

/* ---------------------------------------------------------------------------
 * Linear products
 * ------------------------------------------------------------------------- */
ts_status ts_layer_linear_places(const ts_model *m, const ts_param *w, const ts_place *x,
                                 ts_place *need, ts_place *y, ts_place *dneed) {
    *need = *x;
    *y = *x;
    int in_dim = w->global_ndim - 1;
    for (int a = 0; a < m->naxes; a++) {
        ts_placement p = w->on[a];
        if (p.kind == TS_PLACEMENT_REPLICATE) continue;
        char ps[16];
        ts_placement_str(p, ps, sizeof ps);
        if (p.kind != TS_PLACEMENT_SHARD)
            return ts_error(TS_ERR_INVALID,
                            "layers: %s is placed %s over %s; a weight is replicated or cut",
                            w->value.name, ps, m->axes[a].name);
        if (m->axes[a].cuts_batch)
            return ts_error(TS_ERR_INVALID,
                            "layers: %s is placed %s over %s, which cuts the batch: a product "
                            "cuts its weight only over an axis whose ranks read the same tokens",
                            w->value.name, ps, m->axes[a].name);
        if (p.dim < in_dim) { /* column parallel */
            need->on[a] = ts_placement_replicate();
            y->on[a] = ts_placement_shard(2);
        } else { /* row parallel */
            need->on[a] = ts_placement_shard(2);
            y->on[a] = ts_placement_partial();
        }
    }
    if (dneed) {
        *dneed = *need;
        for (int a = 0; a < m->naxes; a++)
            if (w->on[a].kind == TS_PLACEMENT_SHARD && w->on[a].dim < in_dim)
                dneed->on[a] = ts_placement_partial();
    }
    /* A row-parallel product consumes features cut the same way. */
    for (int a = 0; a < m->naxes; a++) {
        if (!(need->on[a].kind == TS_PLACEMENT_SHARD && need->on[a].dim == 2)) continue;
        if (ts_placement_equal(x->on[a], need->on[a])) continue;
        char px[16];
        return ts_error(TS_ERR_INVALID,
                        "layers: %s is cut along its input over %s, but its input is placed %s "
                        "there (a row-parallel product follows a column-parallel one)",
                        w->value.name, m->axes[a].name, ts_placement_str(x->on[a], px, sizeof px));
    }
    return TS_OK;
}

/* Activation memory holding `what` (backend.h: ts_backend_tag), zeroed. */
static void *acts_alloc(const ts_backend *be, size_t bytes, const char *what) {
    ts_backend_tag(what);
    void *p = be->alloc(TS_MEM_ACTS, bytes);
    ts_backend_tag(NULL);
    return p;
}

/* The same, not zeroed where the backend can skip it: for a part every
 * float of which its module's forward writes. */
static void *acts_alloc_uninit(const ts_backend *be, size_t bytes, const char *what) {
    if (!be->alloc_uninit) return acts_alloc(be, bytes, what);
    ts_backend_tag(what);
    void *p = be->alloc_uninit(TS_MEM_ACTS, bytes);
    ts_backend_tag(NULL);
    return p;
}

/* Operand scratch of the bf16 GEMMs. */
static void *matmul_work(ts_model *m, int N, int C, int OC) {
    size_t bytes = m->be->matmul_bf16_work_bytes(N, C, OC);
    if (bytes > m->mm_work_bytes) {
        m->be->free(m->mm_work);
        m->mm_work = acts_alloc(m->be, bytes, "bf16 GEMM operands");
        m->mm_work_bytes = m->mm_work ? bytes : 0;
    }
    return m->mm_work;
}

ts_status ts_layer_linear_forward(ts_model *m, float *out, const float *inp, const ts_param *w,
                                  const float *bias, int N, int C, int OC) {
    if (m->dtype == TS_F32) return m->be->matmul_forward(out, inp, w->value.data, bias, N, C, OC);
    void *work = matmul_work(m, N, C, OC);
    if (!work) return TS_ERR_NOMEM;
    return m->be->matmul_forward_bf16(out, work, inp, w->value.data, bias, N, C, OC);
}

/* The backward product, f32 or with a bf16 weight. */
static ts_status matmul_backward(ts_model *m, int bf16, float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp, const void *weight, int N,
                                 int C, int OC) {
    if (!bf16) return m->be->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    void *work = matmul_work(m, N, C, OC);
    if (!work) return TS_ERR_NOMEM;
    return m->be->matmul_backward_bf16(dinp, dweight, dbias, work, dout, inp, weight, N, C, OC);
}

/* `rows` x `cols` floats that a deferred job reads: where they lie in the
 * running module's saved state (kept until the job runs), or a copy in
 * `*copy` at *off (NULL when it fits the state). */
static const float *job_keep(ts_model *m, const float *x, size_t n, float *copy, size_t *off) {
    const ts_saved_part *st = &m->current->saved.slot[m->current_mb].state;
    if (st->data && x >= st->data && x + n <= st->data + st->floats) return x;
    const float *kept = copy + *off;
    if (m->be->copy(copy + *off, x, n * sizeof(float))) return NULL;
    *off += n;
    return kept;
}

/* Records dweight / dbias += the product's for the running module's
 * BACKWARD_WEIGHT, keeping what it reads. */
static ts_status job_defer(ts_model *m, int bf16, float *dweight, float *dbias, const float *dout,
                           const float *inp, const void *weight, int N, int C, int OC) {
    ts_module *mod = m->current;
    ts_module_slot *s = &mod->saved.slot[m->current_mb];
    if (s->njobs == s->capjobs) {
        int cap = s->capjobs ? 2 * s->capjobs : 8;
        ts_weight_job *j = realloc(s->jobs, (size_t)cap * sizeof *j);
        if (!j)
            return ts_error(TS_ERR_NOMEM, "%s: out of memory for deferred gradients", mod->name);
        s->jobs = j;
        s->capjobs = cap;
    }
    /* What is not in the module's state is copied (workspace, a gradient
     * between modules, a layer's own buffers). */
    const ts_saved_part *st = &s->state;
    size_t nd = (size_t)N * OC, ni = (size_t)N * C, need = 0;
    if (!(st->data && dout >= st->data && dout + nd <= st->data + st->floats)) need += nd;
    if (!(st->data && inp >= st->data && inp + ni <= st->data + st->floats)) need += ni;
    float *copy = NULL;
    if (need) {
        ts_backend_tag("deferred weight gradients (f32)");
        copy = m->be->alloc(TS_MEM_ACTS, need * sizeof(float));
        ts_backend_tag(NULL);
        if (!copy) return TS_ERR_NOMEM;
    }
    size_t off = 0;
    ts_weight_job j = {dweight,
                       dbias,
                       job_keep(m, dout, nd, copy, &off),
                       job_keep(m, inp, ni, copy, &off),
                       copy,
                       weight,
                       N,
                       C,
                       OC,
                       bf16};
    if (!j.dout || !j.inp) {
        m->be->free(copy);
        return ts_error(TS_ERR_INTERNAL, "%s: could not keep a deferred gradient's operands",
                        mod->name);
    }
    s->jobs[s->njobs++] = j;
    return TS_OK;
}

/* The backward of a product: whole, or (a BACKWARD_INPUT) dinp now and the
 * weight gradients recorded for later. */
static ts_status product_backward(ts_model *m, int bf16, float *dinp, float *dweight, float *dbias,
                                  const float *dout, const float *inp, const void *weight, int N,
                                  int C, int OC) {
    if (!m->defer_weights || !m->current || (!dweight && !dbias))
        return matmul_backward(m, bf16, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    if (dinp) TS_TRY(matmul_backward(m, bf16, dinp, NULL, NULL, dout, inp, weight, N, C, OC));
    return job_defer(m, bf16, dweight, dbias, dout, inp, weight, N, C, OC);
}

ts_status ts_layer_linear_backward(ts_model *m, float *dinp, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const ts_param *w, int N,
                                   int C, int OC) {
    return product_backward(m, m->dtype == TS_BF16, dinp, dweight, dbias, dout, inp, w->value.data,
                            N, C, OC);
}

ts_status ts_layer_matmul_backward(ts_model *m, float *dinp, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const float *weight, int N,
                                   int C, int OC) {
    return product_backward(m, 0, dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

/* ---------------------------------------------------------------------------
 * Embedding lookups and the cross-entropy over cut logits
 * ------------------------------------------------------------------------- */
ts_status ts_layer_embedding_place(const ts_model *m, const ts_param *table, ts_place *out, int *v0,
                                   int *rows) {
    *out = ts_place_replicated();
    for (int a = 0; a < m->naxes; a++) {
        ts_placement p = table->on[a];
        if (p.kind == TS_PLACEMENT_REPLICATE) continue;
        if (p.kind == TS_PLACEMENT_SHARD && p.dim == 0 && !m->axes[a].cuts_batch) {
            out->on[a] = ts_placement_partial(); /* other rows' tokens read 0 */
            continue;
        }
        char ps[16];
        return ts_error(TS_ERR_INVALID,
                        "layers: the embedding table %s is placed %s over %s; a lookup cuts a "
                        "table only along its rows (the vocabulary) over an axis whose ranks "
                        "read the same tokens",
                        table->value.name, ts_placement_str(p, ps, sizeof ps), m->axes[a].name);
    }
    *v0 = (int)table->block_offset[0];
    *rows = (int)table->value.shape[0];
    return TS_OK;
}

ts_status ts_layer_cross_entropy(ts_model *m, float *losses, float *lse, float *work,
                                 const float *logits, const int32_t *targets, const ts_place *place,
                                 int v0, int N, int Vl, int Vpl) {
    const ts_backend *be = m->be;
    float *stats = work, *rowmax = work + 2 * (size_t)N;
    TS_TRY(be->ce_shard_max(rowmax, logits, N, Vl, Vpl));
    for (int a = 0; a < m->naxes; a++)
        if (place->on[a].kind == TS_PLACEMENT_SHARD)
            TS_TRY(ts_comm_all_reduce(m->axes[a].comm, rowmax, rowmax, (size_t)N, TS_F32,
                                      TS_REDUCE_MAX));
    TS_TRY(be->ce_shard_sumexp(stats, logits, rowmax, targets, v0, N, Vl, Vpl));
    for (int a = 0; a < m->naxes; a++)
        if (place->on[a].kind == TS_PLACEMENT_SHARD)
            TS_TRY(ts_comm_all_reduce(m->axes[a].comm, stats, stats, 2 * (size_t)N, TS_F32,
                                      TS_REDUCE_SUM));
    return be->ce_shard_loss(losses, lse, rowmax, stats, targets, N);
}

/* ---------------------------------------------------------------------------
 * Helpers of every module
 * ------------------------------------------------------------------------- */
/* A device failure while staging a weight leaves no sane way on: abort, as
 * the core does on any device failure. */
static void weight_fail(const ts_param *p) {
    fprintf(stderr, "tessera: staging %s: %s\n", p->value.name, ts_last_error());
    TS_ASSERT(!"a weight could not be staged");
}

const float *ts_layer_weight(ts_model *m, const ts_param *p, int slot) {
    if (m->dtype == TS_F32) return p->value.data;
    size_t n = (size_t)ts_tensor_numel(&p->value);
    if (n > m->stage_floats[slot]) {
        m->be->free(m->stage[slot]);
        m->stage[slot] = acts_alloc(m->be, n * sizeof(float), "weights staged in f32");
        m->stage_floats[slot] = m->stage[slot] ? n : 0;
        if (!m->stage[slot]) weight_fail(p);
    }
    if (m->be->bf16_to_f32(m->stage[slot], p->value.data, n)) weight_fail(p);
    return m->stage[slot];
}

float *ts_layer_grad(const ts_param *p) {
    return p->grad.data;
}

ts_status ts_layer_round(const ts_model *m, float *x, size_t n) {
    return m->dtype == TS_BF16 ? m->be->round_bf16(x, n) : TS_OK;
}

float *ts_layer_work(ts_model *m, size_t floats) {
    if (floats > m->work_floats) {
        m->be->free(m->work);
        m->work = acts_alloc(m->be, floats * sizeof(float), "workspace");
        m->work_floats = m->work ? floats : 0;
    }
    return m->work;
}

ts_status ts_layer_host_view(ts_model *m, const float *x, size_t n, const float **host) {
    if (m->be->kind == TS_DEVICE_CPU) {
        *host = x;
        return TS_OK;
    }
    if (n > m->host_stage_floats) {
        ts_mem_free(m->host_stage);
        m->host_stage = ts_mem_alloc(TS_MEM_OTHER, n * sizeof(float));
        m->host_stage_floats = m->host_stage ? n : 0;
        if (!m->host_stage) return TS_ERR_NOMEM;
    }
    TS_TRY(m->be->to_host(m->host_stage, x, n * sizeof(float)));
    *host = m->host_stage;
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * Saved state, one allocation per micro-batch slot, packed to bf16 between
 * forward and backward in bf16 mode
 * ------------------------------------------------------------------------- */
static ts_module_slot *module_slot(ts_module *mod, int mb) {
    ts_module_store *t = &mod->saved;
    if (mb < t->cap) return &t->slot[mb];
    int cap = t->cap ? t->cap : 4;
    while (cap <= mb)
        cap *= 2;
    ts_module_slot *s = realloc(t->slot, (size_t)cap * sizeof *s);
    if (!s) {
        ts_error(TS_ERR_NOMEM, "model: out of memory for saved-state table");
        return NULL;
    }
    memset(s + t->cap, 0, (size_t)(cap - t->cap) * sizeof *s);
    t->slot = s;
    t->cap = cap;
    return &s[mb];
}

/* What a part holds (kind 0 state, 1 output, 2 a copy of the input), f32
 * or packed: the tags of activation memory. State and outputs a recomputed
 * forward makes inside the backward have tags of their own (kind 3, 4). */
enum { PART_STATE, PART_OUTPUT, PART_INPUT, PART_RECOMPUTED };
static const char *part_tag(int kind, int packed) {
    static const char *tag[5][2] = {
        {"saved (f32)", "saved, packed (bf16)"},
        {"outputs (f32)", "outputs, packed (bf16)"},
        {"received inputs (f32)", "received inputs, packed (bf16)"},
        {"recomputed (f32)", "recomputed, packed (bf16)"},
        {"recomputed outputs (f32)", "recomputed outputs, packed (bf16)"}};
    return tag[kind][packed];
}

/* Allocates a part of floats (device memory, TS_MEM_ACTS). */
static float *part_alloc(ts_module *mod, ts_saved_part *p, size_t floats, size_t keep,
                         int kind) {
    TS_ASSERT(keep <= floats);
    /* one forward per micro-batch in flight */
    TS_ASSERT(p->data == NULL && p->packed == NULL);
    if (ts_phase_recomputing() && kind <= PART_OUTPUT) kind += PART_RECOMPUTED;
    p->data = acts_alloc_uninit(mod->model->be, floats * sizeof(float), part_tag(kind, 0));
    p->floats = floats;
    p->keep = keep;
    return p->data;
}

/* Byte offset of the bf16 values of a packed part (16-byte aligned). */
static size_t packed_offset(const ts_saved_part *p) {
    return (p->keep * sizeof(float) + 15) & ~(size_t)15;
}

/* Packs src (part->floats floats) into the part; src stays. */
static ts_status part_pack_from(ts_model *m, ts_saved_part *part, const float *src, int kind) {
    const ts_backend *be = m->be;
    if (ts_phase_recomputing() && kind <= PART_OUTPUT) kind += PART_RECOMPUTED;
    size_t off = packed_offset(part);
    char *p = acts_alloc(be, off + (part->floats - part->keep) * sizeof(uint16_t),
                         part_tag(kind, 1));
    if (!p) return TS_ERR_NOMEM;
    ts_status st = part->keep ? be->copy(p, src, part->keep * sizeof(float)) : TS_OK;
    if (!st)
        st = be->f32_to_bf16((uint16_t *)(p + off), src + part->keep, part->floats - part->keep);
    if (st) {
        be->free(p);
        return st;
    }
    part->packed = p;
    return TS_OK;
}

static ts_status part_pack(ts_model *m, ts_saved_part *part, int kind) {
    if (m->dtype != TS_BF16 || !part->data) return TS_OK; /* f32, packed, or nothing */
    TS_TRY(part_pack_from(m, part, part->data, kind));
    m->be->free(part->data);
    part->data = NULL;
    return TS_OK;
}

/* The part in f32, unpacked first when packed (NULL when out of memory). */
static float *part_unpack(ts_model *m, ts_saved_part *part, int kind) {
    if (part->data || !part->packed) return part->data;
    const ts_backend *be = m->be;
    float *d = acts_alloc(be, part->floats * sizeof(float), part_tag(kind, 0));
    if (!d) return NULL;
    const char *p = part->packed;
    ts_status st = part->keep ? be->copy(d, p, part->keep * sizeof(float)) : TS_OK;
    if (!st)
        st = be->bf16_to_f32(d + part->keep, (const uint16_t *)(p + packed_offset(part)),
                             part->floats - part->keep);
    if (st) {
        be->free(d);
        return NULL;
    }
    be->free(part->packed);
    part->packed = NULL;
    part->data = d;
    return d;
}

static void part_free(ts_model *m, ts_saved_part *p) {
    m->be->free(p->data);
    m->be->free(p->packed);
    p->data = NULL;
    p->packed = NULL;
}

float *ts_module_save(ts_module *mod, int mb, size_t floats, size_t keep, const float *input) {
    ts_module_slot *s = module_slot(mod, mb);
    if (!s) return NULL;
    s->input = input;
    s->producer = NULL;
    return part_alloc(mod, &s->state, floats, keep, 0);
}

float *ts_module_save_output(ts_module *mod, int mb, size_t floats) {
    ts_module_slot *s = module_slot(mod, mb);
    return s ? part_alloc(mod, &s->output, floats, 0, 1) : NULL;
}

ts_status ts_module_pack(ts_module *mod, int mb) {
    if (mb >= mod->saved.cap) return TS_OK;
    return part_pack(mod->model, &mod->saved.slot[mb].state, 0);
}

ts_status ts_module_pack_output(ts_module *mod, int mb) {
    if (mb >= mod->saved.cap) return TS_OK;
    return part_pack(mod->model, &mod->saved.slot[mb].output, 1);
}

ts_status ts_module_hand_over(ts_module *prev, ts_module *next, int mb) {
    if (mb >= prev->saved.cap || mb >= next->saved.cap) return TS_OK;
    const ts_saved_part *out = &prev->saved.slot[mb].output;
    ts_module_slot *ns = &next->saved.slot[mb];
    if (out->data && ns->input >= out->data && ns->input < out->data + out->floats) {
        ns->producer = prev;
        ns->input_offset = (size_t)(ns->input - out->data);
    }
    return ts_module_pack_output(prev, mb);
}

float *ts_module_saved(ts_module *mod, int mb) {
    TS_ASSERT(mb < mod->saved.cap);
    ts_saved_part *p = &mod->saved.slot[mb].state;
    TS_ASSERT(p->data || p->packed);
    return part_unpack(mod->model, p, 0);
}

ts_status ts_module_copy_input(ts_module *mod, int mb, size_t floats) {
    ts_model *m = mod->model;
    if (m->dtype != TS_BF16 || mb >= mod->saved.cap) return TS_OK;
    ts_module_slot *s = &mod->saved.slot[mb];
    if (s->producer || !s->input) return TS_OK;
    ts_saved_part *p = &s->input_copy;
    TS_ASSERT(p->data == NULL && p->packed == NULL);
    *p = (ts_saved_part){.floats = floats};
    TS_TRY(part_pack_from(m, p, s->input, 2));
    s->input = NULL;
    return TS_OK;
}

const float *ts_module_saved_input(ts_module *mod, int mb) {
    ts_module_slot *s = &mod->saved.slot[mb];
    if (s->input_copy.data || s->input_copy.packed)
        return part_unpack(mod->model, &s->input_copy, 2);
    if (!s->producer) return s->input;
    ts_module *prod = s->producer;
    const float *base = part_unpack(prod->model, &prod->saved.slot[mb].output, 1);
    return base ? base + s->input_offset : NULL;
}

void **ts_module_provider_state(ts_module *mod, int mb) {
    TS_ASSERT(mb < mod->saved.cap);
    return &mod->saved.slot[mb].provider;
}

void **ts_module_moe_state(ts_module *mod, int mb) {
    TS_ASSERT(mb < mod->saved.cap);
    return &mod->saved.slot[mb].moe;
}

/* Frees the deferred jobs' copies and forgets them. */
static void jobs_free(ts_model *m, ts_module_slot *s) {
    for (int j = 0; j < s->njobs; j++)
        m->be->free(s->jobs[j].copy);
    s->njobs = 0;
}

ts_status ts_module_run_deferred(ts_module *mod, int mb) {
    if (mb >= mod->saved.cap) return TS_OK;
    ts_model *m = mod->model;
    ts_module_slot *s = &mod->saved.slot[mb];
    ts_status st = TS_OK;
    for (int j = 0; j < s->njobs && !st; j++) {
        const ts_weight_job *k = &s->jobs[j];
        st = matmul_backward(m, k->bf16, NULL, k->dweight, k->dbias, k->dout, k->inp, k->weight,
                             k->N, k->C, k->OC);
    }
    jobs_free(m, s);
    if (s->release_pending) {
        s->release_pending = 0;
        ts_module_release(mod, mb);
    }
    return st;
}

void ts_module_release(ts_module *mod, int mb) {
    if (mb >= mod->saved.cap) return;
    ts_module_slot *s = &mod->saved.slot[mb];
    /* A BACKWARD_INPUT's jobs still read the state: released after them
     * (the dry run shows it held for them). */
    if (mod->model->defer_weights && s->njobs > 0) {
        s->release_pending = 1;
        ts_saved_part *held[3] = {&s->state, &s->output, &s->input_copy};
        for (int k = 0; k < 3; k++) {
            ts_backend_retag(held[k]->data, "held for weight gradients (f32)");
            ts_backend_retag(held[k]->packed, "held for weight gradients, packed (bf16)");
        }
        return;
    }
    jobs_free(mod->model, s);
    s->release_pending = 0;
    part_free(mod->model, &s->state);
    part_free(mod->model, &s->output);
    part_free(mod->model, &s->input_copy);
    s->producer = NULL;
    s->input = NULL;
    if (mod->ops->release) mod->ops->release(mod, mb, 0);
}

void ts_module_drop(ts_module *mod, int mb) {
    if (mb >= mod->saved.cap) return;
    part_free(mod->model, &mod->saved.slot[mb].state);
    if (mod->ops->release) mod->ops->release(mod, mb, 1);
}

void ts_module_drop_output(ts_module *mod, int mb) {
    if (mb < mod->saved.cap) part_free(mod->model, &mod->saved.slot[mb].output);
}

int ts_module_holds_state(const ts_module *mod, int mb) {
    if (mb >= mod->saved.cap) return 0;
    const ts_saved_part *p = &mod->saved.slot[mb].state;
    return p->data || p->packed;
}

ts_param *ts_module_param(ts_module *mod, int k) {
    TS_ASSERT(k >= 0 && k < mod->nparams);
    return &mod->model->params[mod->param_index[k]];
}
