/*
 * backend_plan.c — the dry-run backend (backend_plan.h): counted, inaccessible
 * memory and kernels that run nothing.
 */
#include "backend_plan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dry_run_impl.h" /* the dry run's fields */
#include "phase.h"        /* ts_phase_recomputing: recomputed FLOPs apart */
#include "plan_clock.h"   /* each kernel charges its time */

#define PLAN_ALIGN 256

/* The dry run the calling thread's kernels charge (ts_backend_plan binds
 * it): the table's functions take no context. */
static _Thread_local ts_dry_run *plan_bound;

static ts_dry_run *plan_dr(void) {
    TS_ASSERT(plan_bound && "plan: a dry-run kernel called on a thread with no dry run");
    return plan_bound;
}

void plan_unbind(const ts_dry_run *dr) {
    if (plan_bound == dr) plan_bound = NULL;
}

/* The index of tag `what` (added when new; "other" when the table is full). */
static int plan_tag_index(ts_dry_run *dr, const char *what) {
    if (!what) return 0;
    for (int i = 0; i < dr->ntags; i++) /* tags are mostly literals: same pointer */
        if (dr->tags[i] == what) return i;
    for (int i = 0; i < dr->ntags; i++)
        if (!strcmp(dr->tags[i], what)) return i;
    if (dr->ntags == PLAN_TAGS) return 0; /* counted as "other" */
    dr->tags[dr->ntags] = what;
    return dr->ntags++;
}

void ts_backend_tag(const char *what) {
    if (plan_bound) plan_bound->tag_now = plan_tag_index(plan_bound, what);
}

int ts_backend_plan_peak_items(const ts_dry_run *dr, const char **tags, size_t *bytes, int max) {
    int n = 0;
    for (int i = 0; i < dr->ntags && n < max; i++) {
        if (!dr->tag_at_peak[i]) continue;
        int k = n++;
        while (k > 0 && bytes[k - 1] < dr->tag_at_peak[i]) {
            tags[k] = tags[k - 1];
            bytes[k] = bytes[k - 1];
            k--;
        }
        tags[k] = dr->tags[i];
        bytes[k] = dr->tag_at_peak[i];
    }
    return n;
}

/* FLOPs of the GEMMs and attention products the dry run was asked for, 2 per
 * multiply-add: forward, backward, and forwards recomputed inside a
 * backward (phase.h). */
static void plan_forward_flops(double f) {
    ts_dry_run *dr = plan_dr();
    if (ts_phase_recomputing())
        dr->flops_re += f;
    else
        dr->flops_fwd += f;
}
static void plan_backward_flops(double f) {
    plan_dr()->flops_bwd += f;
}
static void plan_recomputed_flops(double f) {
    plan_dr()->flops_re += f;
}

/* The clock's charges (plan_clock.h): activations stream as f32 (4 bytes),
 * as the layers keep them. */
#define F4 4.0
static void plan_kernel(int kind, double flops, double bytes) {
    ts_plan_clock_kernel(plan_dr(), kind, flops, bytes);
}
static void plan_mem(double bytes) {
    plan_kernel(TS_PLAN_F32, 0.0, bytes);
}

void ts_backend_plan_flops(const ts_dry_run *dr, double *forward, double *backward,
                           double *recomputed) {
    *forward = dr->flops_fwd;
    *backward = dr->flops_bwd;
    *recomputed = dr->flops_re;
}

void ts_backend_plan_reset_flops(ts_dry_run *dr) {
    dr->flops_fwd = dr->flops_bwd = dr->flops_re = 0.0;
}

/* What the accounted host allocator holds for `bytes`: a 64-byte header and
 * the payload rounded up to 64 (alloc.c). */
static size_t plan_reserved_bytes(size_t bytes) {
    return 64 + (bytes + 63) / 64 * 64;
}

static void plan_count(ts_dry_run *dr, ts_mem_category cat, int tag, size_t bytes, int sign) {
    if (cat == TS_MEM_ACTS) {
        if (sign > 0) {
            dr->tag_live[tag] += bytes;
            if (dr->allocated[cat] + bytes > dr->peak[cat])
                memcpy(dr->tag_at_peak, dr->tag_live, sizeof dr->tag_at_peak);
        } else {
            dr->tag_live[tag] -= bytes;
        }
    }
    for (int i = 0; i < 2; i++) {
        int c = i ? TS_MEM_NCAT : (int)cat;
        if (sign > 0) {
            dr->allocated[c] += bytes;
            dr->reserved[c] += plan_reserved_bytes(bytes);
            if (dr->allocated[c] > dr->peak[c]) dr->peak[c] = dr->allocated[c];
        } else {
            dr->allocated[c] -= bytes;
            dr->reserved[c] -= plan_reserved_bytes(bytes);
        }
    }
}

/* Free blocks by size (activations repeat: a freed block of the same size is
 * reused). */
static plan_size *plan_size_slot(ts_dry_run *dr, size_t bytes) {
    if (dr->nsizes * 2 >= dr->sizecap) {
        size_t cap = dr->sizecap ? 2 * dr->sizecap : 256;
        plan_size *t = calloc(cap, sizeof *t);
        if (!t) return NULL;
        for (size_t i = 0; i < dr->sizecap; i++) {
            if (!dr->sizes[i].bytes) continue;
            size_t k = dr->sizes[i].bytes * 0x9E3779B97F4A7C15ull & (cap - 1);
            while (t[k].bytes)
                k = (k + 1) & (cap - 1);
            t[k] = dr->sizes[i];
        }
        free(dr->sizes);
        dr->sizes = t;
        dr->sizecap = cap;
    }
    size_t k = bytes * 0x9E3779B97F4A7C15ull & (dr->sizecap - 1);
    while (dr->sizes[k].bytes && dr->sizes[k].bytes != bytes)
        k = (k + 1) & (dr->sizecap - 1);
    if (!dr->sizes[k].bytes) {
        dr->sizes[k] = (plan_size){bytes, -1};
        dr->nsizes++;
    }
    return &dr->sizes[k];
}

/* The block at `ptr`: blocks lie in the region in the order they were made. */
static plan_block *plan_block_at(ts_dry_run *dr, const void *ptr) {
    int lo = 0, hi = dr->nblocks - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const char *p = dr->blocks[mid].ptr;
        if (p == (const char *)ptr) return &dr->blocks[mid];
        if (p < (const char *)ptr)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

static void *plan_alloc(ts_mem_category cat, size_t bytes) {
    ts_dry_run *dr = plan_dr();
    if ((int)cat < 0 || cat >= TS_MEM_NCAT) {
        ts_error(TS_ERR_INVALID, "plan: unknown memory category %d", (int)cat);
        return NULL;
    }
    plan_size *sz = plan_size_slot(dr, bytes ? bytes : (size_t)-1);
    if (!sz) {
        ts_error(TS_ERR_NOMEM, "plan: out of memory");
        return NULL;
    }
    if (sz->head >= 0) {
        plan_block *b = &dr->blocks[sz->head];
        sz->head = b->next_free;
        b->live = 1;
        b->cat = cat;
        b->tag = dr->tag_now;
        plan_count(dr, cat, b->tag, bytes, +1);
        return b->ptr;
    }
    size_t span = (bytes + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
    if (span == 0) span = PLAN_ALIGN;
    if (span > dr->region - dr->used) {
        ts_error(TS_ERR_NOMEM,
                 "plan: %zu bytes of %s do not fit the dry run's %.0f GiB of address space", bytes,
                 ts_mem_category_name(cat), (double)dr->region / (double)((size_t)1 << 30));
        return NULL;
    }
    if (dr->nblocks == dr->capblocks) {
        int cap = dr->capblocks ? 2 * dr->capblocks : 256;
        plan_block *nb = realloc(dr->blocks, (size_t)cap * sizeof *nb);
        if (!nb) {
            ts_error(TS_ERR_NOMEM, "plan: out of memory");
            return NULL;
        }
        dr->blocks = nb;
        dr->capblocks = cap;
    }
    plan_block *b = &dr->blocks[dr->nblocks++];
    *b = (plan_block){dr->base + dr->used, bytes, cat, 1, dr->tag_now, -1};
    dr->used += span;
    plan_count(dr, cat, b->tag, bytes, +1);
    return b->ptr;
}

static void plan_free(void *ptr) {
    if (!ptr) return;
    ts_dry_run *dr = plan_dr();
    plan_block *b = plan_block_at(dr, ptr);
    TS_ASSERT(b && "plan: freeing a block the dry run did not allocate");
    TS_ASSERT(b->live);
    b->live = 0;
    plan_count(dr, b->cat, b->tag, b->bytes, -1);
    plan_size *sz = plan_size_slot(dr, b->bytes ? b->bytes : (size_t)-1);
    TS_ASSERT(sz);
    b->next_free = sz->head;
    sz->head = (int)(b - dr->blocks);
}

void ts_backend_retag(const void *ptr, const char *what) {
    ts_dry_run *dr = plan_bound;
    if (!ptr || !dr || !ts_backend_plan_owns(dr, ptr)) return;
    plan_block *b = plan_block_at(dr, ptr);
    if (b && b->live) {
        if (b->cat == TS_MEM_ACTS) {
            int tag = plan_tag_index(dr, what);
            dr->tag_live[b->tag] -= b->bytes;
            dr->tag_live[tag] += b->bytes;
            b->tag = tag;
        }
    }
}

int ts_backend_plan_owns(const ts_dry_run *dr, const void *p) {
    return dr && (const char *)p >= dr->base && (const char *)p < dr->base + dr->region;
}

ts_mem_counter ts_backend_plan_stats(const ts_dry_run *dr, ts_mem_category cat) {
    ts_mem_counter c = {0, 0, 0};
    if ((int)cat < 0 || cat > TS_MEM_NCAT) return c;
    c.allocated = dr->allocated[cat];
    c.reserved = dr->reserved[cat];
    c.peak = dr->peak[cat];
    return c;
}

void ts_backend_plan_reset_peak(ts_dry_run *dr) {
    for (int i = 0; i <= TS_MEM_NCAT; i++)
        dr->peak[i] = dr->allocated[i];
    memcpy(dr->tag_at_peak, dr->tag_live, sizeof dr->tag_at_peak);
}

/* --- the kernels: nothing runs ---------------------------------------------- */
static ts_status plan_ok(void) {
    return TS_OK;
}
static ts_status plan_zero(void *p, size_t n) {
    (void)p;
    plan_mem((double)n);
    return TS_OK;
}
static ts_status plan_copy(void *d, const void *s, size_t n) {
    (void)d, (void)s;
    plan_mem(2.0 * (double)n);
    return TS_OK;
}
static ts_status plan_copy_2d(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t r) {
    (void)d, (void)dp, (void)s, (void)sp;
    plan_mem(2.0 * (double)w * (double)r);
    return TS_OK;
}
static ts_status plan_moe_rows_sum(float *o, const float *r, const float *w, int N, int k, int C) {
    (void)o, (void)r, (void)w;
    plan_mem(F4 * ((double)N * k * C + (double)N * C));
    return TS_OK;
}
static ts_status plan_moe_rows_sum_backward(float *dr, float *dw, const float *d, const float *r,
                                            const float *w, int N, int k, int C) {
    (void)dr, (void)dw, (void)d, (void)r, (void)w;
    plan_mem(F4 * (2.0 * N * k * C + (double)N * C));
    return TS_OK;
}
static ts_status plan_to_host(void *host, const void *src, size_t n) {
    (void)src;
    memset(host, 0, n);
    return TS_OK;
}
/* A GEMM's bytes: its input and output (f32), its weights (`wb` bytes
 * each). The backward is two GEMMs, either of which may be skipped (a split
 * backward's input part, then its weight part). */
static void plan_matmul_time(int kind, double flops, double N, double C, double OC, double wb) {
    plan_kernel(kind, flops, F4 * (N * C + N * OC) + wb * C * OC);
}
static ts_status plan_matmul_fwd(int kind, const float *b, int N, int C, int OC) {
    double f = 2.0 * N * C * OC;
    plan_forward_flops(f);
    plan_matmul_time(kind, f, N, C, OC, kind == TS_PLAN_BF16 ? 2.0 : F4);
    if (b) plan_mem(F4 * 2.0 * N * OC);
    return TS_OK;
}
static ts_status plan_matmul_bwd(int kind, const float *di, const float *dw, const float *db, int N,
                                 int C, int OC) {
    double f = 2.0 * N * C * OC, wb = kind == TS_PLAN_BF16 ? 2.0 : F4;
    if (di) {
        plan_backward_flops(f);
        plan_matmul_time(kind, f, N, C, OC, wb);
    }
    if (dw) {
        plan_backward_flops(f);
        plan_matmul_time(kind, f, N, C, OC, F4 * 2.0); /* f32 gradients, accumulated */
    }
    if (db) plan_mem(F4 * (double)N * OC);
    return TS_OK;
}
static ts_status plan_matmul_forward(float *o, const float *i, const float *w, const float *b,
                                     int N, int C, int OC) {
    (void)o, (void)i, (void)w;
    return plan_matmul_fwd(TS_PLAN_F32, b, N, C, OC);
}
static ts_status plan_matmul_backward(float *di, float *dw, float *db, const float *d,
                                      const float *i, const float *w, int N, int C, int OC) {
    (void)d, (void)i, (void)w;
    return plan_matmul_bwd(TS_PLAN_F32, di, dw, db, N, C, OC);
}
static ts_status plan_matmul_forward_bf16(float *o, void *wk, const float *i, const uint16_t *w,
                                          const float *b, int N, int C, int OC) {
    (void)o, (void)wk, (void)i, (void)w;
    return plan_matmul_fwd(TS_PLAN_BF16, b, N, C, OC);
}
static ts_status plan_matmul_backward_bf16(float *di, float *dw, float *db, void *wk,
                                           const float *d, const float *i, const uint16_t *w, int N,
                                           int C, int OC) {
    (void)wk, (void)d, (void)i, (void)w;
    return plan_matmul_bwd(TS_PLAN_BF16, di, dw, db, N, C, OC);
}
static ts_status plan_embedding_forward(float *o, const int32_t *t, const float *w, int v0, int V,
                                        int N, int C) {
    (void)o, (void)t, (void)w, (void)v0, (void)V;
    plan_mem(F4 * 2.0 * N * C);
    return TS_OK;
}
static ts_status plan_embedding_backward(float *dw, const float *d, const int32_t *t, int v0, int V,
                                         int N, int C) {
    (void)dw, (void)d, (void)t, (void)v0, (void)V;
    plan_mem(F4 * 3.0 * N * C);
    return TS_OK;
}
static ts_status plan_position(float *o, const float *w, int B, int T, int C, int p0) {
    (void)o, (void)w, (void)p0;
    plan_mem(F4 * 3.0 * B * T * C);
    return TS_OK;
}
static ts_status plan_layernorm_forward(float *o, float *m, float *r, const float *i,
                                        const float *w, const float *b, int N, int C) {
    (void)o, (void)m, (void)r, (void)i, (void)w, (void)b;
    plan_mem(F4 * 2.0 * N * C);
    return TS_OK;
}
static ts_status plan_layernorm_backward(float *di, float *dw, float *db, const float *d,
                                         const float *i, const float *w, const float *m,
                                         const float *r, int N, int C) {
    (void)di, (void)dw, (void)db, (void)d, (void)i, (void)w, (void)m, (void)r;
    plan_mem(F4 * 3.0 * N * C);
    return TS_OK;
}
static ts_status plan_residual_layernorm(float *res, float *o, float *m, float *r, const float *a,
                                         const float *b, const float *rb, const float *w,
                                         const float *bias, int N, int C, int round) {
    (void)res, (void)o, (void)m, (void)r, (void)a, (void)b, (void)rb, (void)w, (void)bias,
        (void)round;
    plan_mem(F4 * 4.0 * N * C);
    return TS_OK;
}
static ts_status plan_unary(float *o, const float *i, size_t n) {
    (void)o, (void)i;
    plan_mem(F4 * 2.0 * (double)n);
    return TS_OK;
}
static ts_status plan_bias_gelu(float *o, float *p, const float *b, int N, int C, int round) {
    (void)o, (void)b, (void)round;
    plan_mem(F4 * (p ? 3.0 : 2.0) * N * C);
    return TS_OK;
}
static ts_status plan_binary(float *o, const float *a, const float *b, size_t n) {
    (void)o, (void)a, (void)b;
    plan_mem(F4 * 3.0 * (double)n);
    return TS_OK;
}
static ts_status plan_bias(float *o, const float *b, int N, int C) {
    (void)o, (void)b;
    plan_mem(F4 * 2.0 * N * C);
    return TS_OK;
}

/* An attention kernel's bytes: q, k, v and the output (f32), and `sweeps`
 * passes over the state the target keeps per head (T x T on a CPU, the
 * log-sum-exp on a GPU). */
/* The share of a (Tq, Tk) block of scores a causal kernel computes: key j
 * is visible to query i iff j <= i + offset (cpu_kernels.h). The FLOPs
 * counted for the ledger are the whole block's (as Narayanan et al. count
 * attention); the clock charges the visible share, which is what the
 * kernels (CPU loops, flash blocks) compute. */
static double plan_visible(int Tq, int Tk, int64_t offset) {
    if (Tq <= 0 || Tk <= 0) return 0.0;
    double a = (double)offset + 1.0; /* keys row i sees: clamp(i + a, 0, Tk) */
    double lo = fmax(0.0, 1.0 - a), hi = fmin(Tq - 1.0, Tk - a - 1.0);
    double part = hi >= lo ? (hi - lo + 1.0) * (lo + hi) / 2.0 + (hi - lo + 1.0) * a : 0.0;
    double full_from = fmax(0.0, Tk - a);
    double full = full_from <= Tq - 1.0 ? (Tq - full_from) * Tk : 0.0;
    return (part + full) / ((double)Tq * Tk);
}

static void plan_attention_time(double flops, int B, int T, int C, int NH, double sweeps) {
    const ts_backend *target = plan_dr()->target;
    double state = target && target->attention_saved_floats
                       ? (double)target->attention_saved_floats(B, NH, T)
                       : 0.0;
    plan_kernel(TS_PLAN_ATTENTION, flops * plan_visible(T, T, 0),
                F4 * (4.0 * B * T * C + sweeps * state));
}

/* Attention counts the whole T x T square of both products (QK^T and AV),
 * as the architectures' FLOP counts do (gpt2.c). */
static ts_status plan_attention_forward(float *o, float *s, const float *q, int B, int T, int C,
                                        int NH) {
    (void)o, (void)s, (void)q;
    plan_forward_flops(4.0 * B * T * T * C);
    plan_attention_time(4.0 * B * T * T * C, B, T, C, NH, 1.0);
    return TS_OK;
}
static ts_status plan_attention_backward(float *dq, float *s, const float *d, const float *q,
                                         const float *o, const float *sv, int B, int T, int C,
                                         int NH) {
    (void)dq, (void)s, (void)d, (void)q, (void)o, (void)sv;
    plan_backward_flops(8.0 * B * T * T * C);
    plan_attention_time(8.0 * B * T * T * C, B, T, C, NH, 2.0);
    return TS_OK;
}
static ts_status plan_attention_forward_unsaved(float *o, float *s, const float *q, int B, int T,
                                                int C, int NH) {
    return plan_attention_forward(o, s, q, B, T, C, NH);
}
/* The scores made again (QK^T alone), then the backward. */
static ts_status plan_attention_backward_recompute(float *dq, float *s, const float *d,
                                                   const float *q, int B, int T, int C, int NH) {
    (void)dq, (void)s, (void)d, (void)q;
    plan_recomputed_flops(2.0 * B * T * T * C);
    plan_backward_flops(8.0 * B * T * T * C);
    plan_attention_time(10.0 * B * T * T * C, B, T, C, NH, 3.0);
    return TS_OK;
}
static ts_status plan_attention_block_forward(float *o, float *l, const float *q, const float *k,
                                              const float *v, int B, int Tq, int Tk, int C, int NH,
                                              int qs, int kvs, int os, int64_t off) {
    (void)o, (void)l, (void)q, (void)k, (void)v, (void)NH, (void)qs, (void)kvs, (void)os, (void)off;
    plan_forward_flops(4.0 * B * Tq * Tk * C);
    plan_kernel(TS_PLAN_ATTENTION_BLOCK, 4.0 * B * Tq * Tk * C * plan_visible(Tq, Tk, off),
                F4 * (2.0 * B * Tq * C + 2.0 * B * Tk * C));
    return TS_OK;
}
static ts_status plan_attention_block_merge(float *o, float *l, const float *o2, const float *l2,
                                            int B, int Tq, int C, int NH, int os) {
    (void)o, (void)l, (void)o2, (void)l2, (void)NH, (void)os;
    plan_mem(F4 * 3.0 * B * Tq * C);
    return TS_OK;
}
static ts_status plan_attention_block_backward(float *dq, float *dk, float *dv, const float *q,
                                               const float *k, const float *v, const float *o,
                                               const float *d, const float *l, int B, int Tq,
                                               int Tk, int C, int NH, int qs, int kvs, int os,
                                               int64_t off) {
    (void)dq, (void)dk, (void)dv, (void)q, (void)k, (void)v, (void)o, (void)d, (void)l, (void)NH,
        (void)qs, (void)kvs, (void)os, (void)off;
    plan_backward_flops(8.0 * B * Tq * Tk * C);
    plan_kernel(TS_PLAN_ATTENTION_BLOCK, 8.0 * B * Tq * Tk * C * plan_visible(Tq, Tk, off),
                F4 * (4.0 * B * Tq * C + 4.0 * B * Tk * C));
    return TS_OK;
}
static ts_status plan_ce_max(float *r, const float *l, int N, int V, int Vp) {
    (void)r, (void)l, (void)V;
    plan_mem(F4 * (double)N * Vp);
    return TS_OK;
}
static ts_status plan_ce_sumexp(float *s, const float *l, const float *r, const int32_t *t, int v0,
                                int N, int V, int Vp) {
    (void)s, (void)l, (void)r, (void)t, (void)v0, (void)V;
    plan_mem(F4 * (double)N * Vp);
    return TS_OK;
}
static ts_status plan_ce_loss(float *l, float *lse, const float *r, const float *s,
                              const int32_t *t, int N) {
    (void)l, (void)lse, (void)r, (void)s, (void)t;
    plan_mem(F4 * 4.0 * N);
    return TS_OK;
}
static ts_status plan_ce_backward(float *d, const float *l, const float *lse, const int32_t *t,
                                  float dl, int v0, int N, int V, int Vp) {
    (void)d, (void)l, (void)lse, (void)t, (void)dl, (void)v0, (void)V;
    plan_mem(F4 * 2.0 * N * Vp);
    return TS_OK;
}
/* AdamW reads the f32 parameter, gradient and moments and writes them back
 * (and the bf16 copy): 7 f32 passes and one of 2 bytes. */
static ts_status plan_adamw(float *p, float *m, float *v, uint16_t *pb, float *g, size_t n,
                            float lr, float b1, float b2, float eps, float wd, int t, float gs,
                            int zg) {
    (void)p, (void)m, (void)v, (void)g, (void)lr, (void)b1, (void)b2, (void)eps, (void)wd, (void)t,
        (void)gs, (void)zg;
    plan_mem((F4 * 7.0 + (pb ? 2.0 : 0.0)) * (double)n);
    return TS_OK;
}
static ts_status plan_sumsq(double *out, const float *x, size_t n) {
    (void)x;
    *out = 0.0;
    plan_mem(F4 * (double)n);
    return TS_OK;
}
static ts_status plan_round(float *x, size_t n) {
    (void)x;
    plan_mem(F4 * 2.0 * (double)n);
    return TS_OK;
}
static ts_status plan_f32_to_bf16(uint16_t *o, const float *i, size_t n) {
    (void)o, (void)i;
    plan_mem(6.0 * (double)n);
    return TS_OK;
}
static ts_status plan_bf16_to_f32(float *o, const uint16_t *i, size_t n) {
    (void)o, (void)i;
    plan_mem(6.0 * (double)n);
    return TS_OK;
}
static ts_status plan_stage(float *a, const float *b, int tp, int B, int T, int C) {
    (void)a, (void)b, (void)tp;
    plan_mem(F4 * 2.0 * B * T * C);
    return TS_OK;
}

ts_status ts_backend_plan(ts_dry_run *dr, const ts_backend *target, const ts_backend **out) {
    *out = NULL;
    if (!dr) return ts_error(TS_ERR_INVALID, "plan: the dry-run backend needs a dry run");
    dr->target = target;
    dr->table = (ts_backend){
        .kind = TS_DEVICE_PLAN,
        .name = "plan",
        .alloc = plan_alloc,
        .free = plan_free,
        .zero = plan_zero,
        .copy = plan_copy,
        .to_host = plan_to_host,
        .from_host = plan_copy,
        .sync = plan_ok,
        .matmul_forward = plan_matmul_forward,
        .matmul_backward = plan_matmul_backward,
        .matmul_bf16_work_bytes = target->matmul_bf16_work_bytes,
        .matmul_forward_bf16 = plan_matmul_forward_bf16,
        .matmul_backward_bf16 = plan_matmul_backward_bf16,
        .embedding_shard_forward = plan_embedding_forward,
        .embedding_shard_backward = plan_embedding_backward,
        .position_forward = plan_position,
        .position_backward = plan_position,
        .layernorm_forward = plan_layernorm_forward,
        .layernorm_backward = plan_layernorm_backward,
        .residual_layernorm_forward = plan_residual_layernorm,
        .gelu_forward = plan_unary,
        .bias_gelu_forward = plan_bias_gelu,
        .gelu_backward = plan_binary,
        .residual_forward = plan_binary,
        .add_bias = plan_bias,
        .bias_grad = plan_bias,
        .attention_saved_floats = target->attention_saved_floats,
        .attention_scratch_floats = target->attention_scratch_floats,
        .attention_forward = plan_attention_forward,
        .attention_backward = plan_attention_backward,
        .attention_forward_bf16 = plan_attention_forward,
        .attention_backward_bf16 = plan_attention_backward,
        .ce_shard_max = plan_ce_max,
        .ce_shard_sumexp = plan_ce_sumexp,
        .ce_shard_loss = plan_ce_loss,
        .ce_shard_backward = plan_ce_backward,
        .adamw = plan_adamw,
        .sumsq = plan_sumsq,
        .round_bf16 = plan_round,
        .f32_to_bf16 = plan_f32_to_bf16,
        .bf16_to_f32 = plan_bf16_to_f32,
        .seq_from_stage = plan_stage,
        .seq_to_stage = plan_stage,
        .attention_block_forward = plan_attention_block_forward,
        .attention_block_merge = plan_attention_block_merge,
        .attention_block_backward = plan_attention_block_backward,
        .copy_2d = plan_copy_2d,
        .moe_rows_sum = plan_moe_rows_sum,
        .moe_rows_sum_backward = plan_moe_rows_sum_backward,
        .attention_recompute_floats = target->attention_recompute_floats,
        .attention_forward_unsaved =
            target->attention_forward_unsaved ? plan_attention_forward_unsaved : NULL,
        .attention_backward_recompute =
            target->attention_backward_recompute ? plan_attention_backward_recompute : NULL,
    };
    plan_bound = dr;
    *out = &dr->table;
    return TS_OK;
}
