/*
 * backend_plan.c — the dry-run backend (backend_plan.h): counted, inaccessible
 * memory and kernels that run nothing.
 */
#include "backend_plan.h"
#include "phase.h"      /* ts_phase_recomputing: recomputed FLOPs apart */
#include "plan_clock.h" /* each kernel charges its time */

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* 4 TiB of address space, reserved but never backed. */
#define PLAN_REGION ((size_t)1 << 42)
#define PLAN_ALIGN 256

typedef struct plan_block {
    char *ptr;
    size_t bytes;
    ts_mem_category cat;
    int live;
    int tag;       /* index into plan_tags */
    int next_free; /* the next free block of this size, -1 at the end */
} plan_block;

/* The activations by tag: live bytes now, and at the activations' peak. */
#define PLAN_TAGS 16
static const char *plan_tags[PLAN_TAGS] = {"other"};
static int plan_ntags = 1, plan_tag_now;
static size_t plan_tag_live[PLAN_TAGS], plan_tag_at_peak[PLAN_TAGS];

/* The index of tag `what` (added when new; "other" when the table is full). */
static int plan_tag_index(const char *what) {
    if (!what) return 0;
    for (int i = 0; i < plan_ntags; i++) /* tags are mostly literals: same pointer */
        if (plan_tags[i] == what) return i;
    for (int i = 0; i < plan_ntags; i++)
        if (!strcmp(plan_tags[i], what)) return i;
    if (plan_ntags == PLAN_TAGS) return 0; /* counted as "other" */
    plan_tags[plan_ntags] = what;
    return plan_ntags++;
}

void ts_backend_tag(const char *what) {
    plan_tag_now = plan_tag_index(what);
}

int ts_backend_plan_peak_items(const char **tags, size_t *bytes, int max) {
    int n = 0;
    for (int i = 0; i < plan_ntags && n < max; i++) {
        if (!plan_tag_at_peak[i]) continue;
        int k = n++;
        while (k > 0 && bytes[k - 1] < plan_tag_at_peak[i]) {
            tags[k] = tags[k - 1];
            bytes[k] = bytes[k - 1];
            k--;
        }
        tags[k] = plan_tags[i];
        bytes[k] = plan_tag_at_peak[i];
    }
    return n;
}

/* FLOPs of the GEMMs and attention products the dry run was asked for, 2 per
 * multiply-add: forward, backward, and forwards recomputed inside a
 * backward (phase.h). */
static double plan_flops_fwd, plan_flops_bwd, plan_flops_re;

static void plan_forward_flops(double f) {
    if (ts_phase_recomputing())
        plan_flops_re += f;
    else
        plan_flops_fwd += f;
}

/* The clock's charges (plan_clock.h): activations stream as f32 (4 bytes),
 * as the layers keep them. */
#define F4 4.0
static void plan_mem(double bytes) {
    ts_plan_clock_kernel(TS_PLAN_F32, 0.0, bytes);
}

void ts_backend_plan_flops(double *forward, double *backward, double *recomputed) {
    *forward = plan_flops_fwd;
    *backward = plan_flops_bwd;
    *recomputed = plan_flops_re;
}

void ts_backend_plan_reset_flops(void) {
    plan_flops_fwd = plan_flops_bwd = plan_flops_re = 0.0;
}

static char *plan_base;
static size_t plan_used;
static plan_block *plan_blocks;
static int plan_nblocks, plan_capblocks;
static size_t plan_allocated[TS_MEM_NCAT + 1], plan_reserved[TS_MEM_NCAT + 1],
    plan_peak[TS_MEM_NCAT + 1];

/* What the accounted host allocator holds for `bytes`: a 64-byte header and
 * the payload rounded up to 64 (alloc.c). */
static size_t plan_reserved_bytes(size_t bytes) {
    return 64 + (bytes + 63) / 64 * 64;
}

static void plan_count(ts_mem_category cat, int tag, size_t bytes, int sign) {
    if (cat == TS_MEM_ACTS) {
        if (sign > 0) {
            plan_tag_live[tag] += bytes;
            if (plan_allocated[cat] + bytes > plan_peak[cat])
                memcpy(plan_tag_at_peak, plan_tag_live, sizeof plan_tag_at_peak);
        } else {
            plan_tag_live[tag] -= bytes;
        }
    }
    for (int i = 0; i < 2; i++) {
        int c = i ? TS_MEM_NCAT : (int)cat;
        if (sign > 0) {
            plan_allocated[c] += bytes;
            plan_reserved[c] += plan_reserved_bytes(bytes);
            if (plan_allocated[c] > plan_peak[c]) plan_peak[c] = plan_allocated[c];
        } else {
            plan_allocated[c] -= bytes;
            plan_reserved[c] -= plan_reserved_bytes(bytes);
        }
    }
}

/* Free blocks by size (activations repeat: a freed block of the same size is
 * reused): an open-addressed table of sizes, each the head of its list. */
typedef struct plan_size {
    size_t bytes; /* 0: an empty slot */
    int head;     /* first free block, -1 when none */
} plan_size;
static plan_size *plan_sizes;
static size_t plan_sizecap, plan_nsizes;

static plan_size *plan_size_slot(size_t bytes) {
    if (plan_nsizes * 2 >= plan_sizecap) {
        size_t cap = plan_sizecap ? 2 * plan_sizecap : 256;
        plan_size *t = calloc(cap, sizeof *t);
        if (!t) return NULL;
        for (size_t i = 0; i < plan_sizecap; i++) {
            if (!plan_sizes[i].bytes) continue;
            size_t k = plan_sizes[i].bytes * 0x9E3779B97F4A7C15ull & (cap - 1);
            while (t[k].bytes)
                k = (k + 1) & (cap - 1);
            t[k] = plan_sizes[i];
        }
        free(plan_sizes);
        plan_sizes = t;
        plan_sizecap = cap;
    }
    size_t k = bytes * 0x9E3779B97F4A7C15ull & (plan_sizecap - 1);
    while (plan_sizes[k].bytes && plan_sizes[k].bytes != bytes)
        k = (k + 1) & (plan_sizecap - 1);
    if (!plan_sizes[k].bytes) {
        plan_sizes[k] = (plan_size){bytes, -1};
        plan_nsizes++;
    }
    return &plan_sizes[k];
}

/* The block at `ptr`: blocks lie in the region in the order they were made. */
static plan_block *plan_block_at(const void *ptr) {
    int lo = 0, hi = plan_nblocks - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        const char *p = plan_blocks[mid].ptr;
        if (p == (const char *)ptr) return &plan_blocks[mid];
        if (p < (const char *)ptr)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return NULL;
}

static void *plan_alloc(ts_mem_category cat, size_t bytes) {
    if ((int)cat < 0 || cat >= TS_MEM_NCAT) {
        ts_error(TS_ERR_INVALID, "plan: unknown memory category %d", (int)cat);
        return NULL;
    }
    plan_size *sz = plan_size_slot(bytes ? bytes : (size_t)-1);
    if (!sz) {
        ts_error(TS_ERR_NOMEM, "plan: out of memory");
        return NULL;
    }
    if (sz->head >= 0) {
        plan_block *b = &plan_blocks[sz->head];
        sz->head = b->next_free;
        b->live = 1;
        b->cat = cat;
        b->tag = plan_tag_now;
        plan_count(cat, b->tag, bytes, +1);
        return b->ptr;
    }
    size_t span = (bytes + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
    if (span == 0) span = PLAN_ALIGN;
    if (span > PLAN_REGION - plan_used) {
        ts_error(TS_ERR_NOMEM,
                 "plan: %zu bytes of %s do not fit the dry run's 4 TiB of address space", bytes,
                 ts_mem_category_name(cat));
        return NULL;
    }
    if (plan_nblocks == plan_capblocks) {
        int cap = plan_capblocks ? 2 * plan_capblocks : 256;
        plan_block *nb = realloc(plan_blocks, (size_t)cap * sizeof *nb);
        if (!nb) {
            ts_error(TS_ERR_NOMEM, "plan: out of memory");
            return NULL;
        }
        plan_blocks = nb;
        plan_capblocks = cap;
    }
    plan_block *b = &plan_blocks[plan_nblocks++];
    *b = (plan_block){plan_base + plan_used, bytes, cat, 1, plan_tag_now, -1};
    plan_used += span;
    plan_count(cat, b->tag, bytes, +1);
    return b->ptr;
}

static void plan_free(void *ptr) {
    if (!ptr) return;
    plan_block *b = plan_block_at(ptr);
    TS_ASSERT(b && "plan: freeing a block the dry run did not allocate");
    TS_ASSERT(b->live);
    b->live = 0;
    plan_count(b->cat, b->tag, b->bytes, -1);
    plan_size *sz = plan_size_slot(b->bytes ? b->bytes : (size_t)-1);
    TS_ASSERT(sz);
    b->next_free = sz->head;
    sz->head = (int)(b - plan_blocks);
}

void ts_backend_retag(const void *ptr, const char *what) {
    if (!ptr || !plan_base) return;
    plan_block *b = plan_block_at(ptr);
    if (b && b->live) {
        if (b->cat == TS_MEM_ACTS) {
            int tag = plan_tag_index(what);
            plan_tag_live[b->tag] -= b->bytes;
            plan_tag_live[tag] += b->bytes;
            b->tag = tag;
        }
    }
}

int ts_backend_plan_owns(const void *p) {
    return plan_base && (const char *)p >= plan_base && (const char *)p < plan_base + PLAN_REGION;
}

ts_mem_counter ts_backend_plan_stats(ts_mem_category cat) {
    ts_mem_counter c = {0, 0, 0};
    if ((int)cat < 0 || cat > TS_MEM_NCAT) return c;
    c.allocated = plan_allocated[cat];
    c.reserved = plan_reserved[cat];
    c.peak = plan_peak[cat];
    return c;
}

void ts_backend_plan_reset_peak(void) {
    for (int i = 0; i <= TS_MEM_NCAT; i++)
        plan_peak[i] = plan_allocated[i];
    memcpy(plan_tag_at_peak, plan_tag_live, sizeof plan_tag_at_peak);
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
    ts_plan_clock_kernel(kind, flops, F4 * (N * C + N * OC) + wb * C * OC);
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
        plan_flops_bwd += f;
        plan_matmul_time(kind, f, N, C, OC, wb);
    }
    if (dw) {
        plan_flops_bwd += f;
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
/* The backend the dry run stands for: its attention's saved state. */
static const ts_backend *plan_target;

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
    double state = plan_target && plan_target->attention_saved_floats
                       ? (double)plan_target->attention_saved_floats(B, NH, T)
                       : 0.0;
    ts_plan_clock_kernel(TS_PLAN_ATTENTION, flops * plan_visible(T, T, 0),
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
    plan_flops_bwd += 8.0 * B * T * T * C;
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
    plan_flops_re += 2.0 * B * T * T * C;
    plan_flops_bwd += 8.0 * B * T * T * C;
    plan_attention_time(10.0 * B * T * T * C, B, T, C, NH, 3.0);
    return TS_OK;
}
static ts_status plan_attention_block_forward(float *o, float *l, const float *q, const float *k,
                                              const float *v, int B, int Tq, int Tk, int C, int NH,
                                              int qs, int kvs, int os, int64_t off) {
    (void)o, (void)l, (void)q, (void)k, (void)v, (void)NH, (void)qs, (void)kvs, (void)os, (void)off;
    plan_forward_flops(4.0 * B * Tq * Tk * C);
    ts_plan_clock_kernel(TS_PLAN_ATTENTION_BLOCK, 4.0 * B * Tq * Tk * C * plan_visible(Tq, Tk, off),
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
    plan_flops_bwd += 8.0 * B * Tq * Tk * C;
    ts_plan_clock_kernel(TS_PLAN_ATTENTION_BLOCK, 8.0 * B * Tq * Tk * C * plan_visible(Tq, Tk, off),
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

static ts_backend plan_table;

ts_status ts_backend_plan(const ts_backend *target, const ts_backend **out) {
    *out = NULL;
    if (!plan_base) {
        void *p =
            mmap(NULL, PLAN_REGION, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            return ts_error(TS_ERR_NOMEM, "plan: cannot reserve the dry run's address space");
        plan_base = p;
    }
    plan_target = target;
    plan_table = (ts_backend){
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
    *out = &plan_table;
    return TS_OK;
}
