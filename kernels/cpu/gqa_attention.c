/*
 * gqa_attention.c — grouped-query causal self-attention over a packed qkv
 * row (q heads, then k heads, then v heads), forward and backward, with the
 * log-sum-exp saved in place of the probabilities: no (T, T) array and no
 * repeated K or V anywhere. cpu_kernels.h states the semantics.
 *
 * Keys go by in tiles of kw (64; fewer when hs > 128, so that a tile of
 * keys transposed, hs x kw floats, stays within 32 KiB on the stack; hence
 * hs <= 1024; a thread's stack holds at most two such tiles and 12 KiB
 * more). The scores of a query against a tile are a product with the
 * transposed tile (gqa_scores), and sums of rows weighted by a tile's
 * probabilities a product with the rows as they lie (gqa_rows_axpy): both
 * hold 32 sums in four vector registers (GNU C vector types) and sum each
 * element in a fixed order, so a result's bits depend on the shape only.
 * No BLAS. (Per-row dot products, or sums the compiler keeps in memory,
 * were 2x slower.)
 *
 * Forward: a task is GQA_QROWS rows of the query heads of one (batch, kv
 * head), GQA_HEADS heads at a time: it walks the key tiles any of its rows
 * sees, transposing each once for all of them, each (head, row) with an
 * online softmax (running max and sum; its output row is the accumulator,
 * rescaled when the max grows). Backward: a task is one (batch, kv head),
 * the only writer of its k and v columns of dqkv and of the q columns of
 * its query heads. For each key tile it takes its query heads in order and
 * their rows from the tile on, GQA_QB at a time, recomputing P = exp(s -
 * lse): dq of a row gathers the tile's keys; dk, dv of a key gather the
 * GQA_QB rows, in row order. So every gradient is summed in one fixed order
 * whatever the thread count.
 *
 * Not here: rotary embeddings (rope.c, applied to q and k before), a
 * sliding window, dropout, bf16.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cpu_kernels.h"
#include "tasks.h"
#include "fastmath.h" /* ts_cpu_exp_neg: a vectorizable exp */

#define GQA_TILE 64                      /* keys per tile, at most */
#define GQA_TILE_FLOATS (GQA_TILE * 128) /* a transposed tile: 32 KiB */
#define GQA_QROWS 16                     /* forward: query rows per task */
#define GQA_HEADS 8    /* forward: query heads sharing a transposed tile, at most */
#define GQA_QB 4       /* backward: rows whose dk, dv go together */
#define GQA_RCHUNK 256 /* backward: rows whose q, dq, dout stay in cache */
#define GQA_LANES 8    /* floats of a vector register (gqa_v8) */

size_t ts_cpu_gqa_attention_saved_floats(int B, int NH, int T) {
    return (size_t)B * NH * T;
}

/* A head larger than the tiles hold is a caller's bug (cpu_kernels.h):
 * stop, naming it, before a tile overruns the stack. */
static void gqa_check_head(int hs) {
    if (hs >= 1 && hs <= TS_CPU_GQA_MAX_HEAD) return;
    fprintf(stderr, "ts_cpu_gqa_attention: head size %d outside [1, %d]\n", hs,
            TS_CPU_GQA_MAX_HEAD);
    abort();
}

/* Keys per tile for head size hs: a multiple of GQA_LANES. */
static int gqa_tile_keys(int hs) {
    int kw = GQA_TILE_FLOATS / hs / GQA_LANES * GQA_LANES;
    return kw > GQA_TILE ? GQA_TILE : kw > GQA_LANES ? kw : GQA_LANES;
}

/* xT (hs, kw) = the n rows of x (W floats apart), transposed; columns
 * [n, kw) zero. */
static void gqa_transpose(float *xT, const float *x, size_t W, int n, int kw, int hs) {
    for (int j = 0; j < n; j++) /* rows read whole, columns written */
        for (int d = 0; d < hs; d++)
            xT[(size_t)d * kw + j] = x[(size_t)j * W + d];
    for (int d = 0; d < hs; d++)
        for (int j = n; j < kw; j++)
            xT[(size_t)d * kw + j] = 0.0f;
}

/* Eight floats in one vector register (GNU C vector extension; AVX2's
 * ymm under -march=x86-64-v3): the helpers below keep their sums in such
 * variables, which the compiler holds in registers (a float array it keeps
 * in memory, and each sum then waits on a store). Memory is read and
 * written through gqa_v8u, unaligned and allowed to alias floats, as
 * immintrin.h's __m256_u. */
typedef float gqa_v8 __attribute__((vector_size(32)));
typedef float gqa_v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define GQA_AT(p) (*(gqa_v8u *)(p))
#define GQA_AT_C(p) (*(const gqa_v8u *)(p))

/* s (kw) = q (hs) . each column of xT (hs, kw), kw a multiple of 8, each
 * sum over d in order; 32 columns at a time in four independent sums, so
 * that the FMAs overlap instead of waiting on each other. */
static inline void gqa_scores(float *s, const float *q, const float *xT, int kw, int hs) {
    int j0 = 0;
    for (; j0 + 32 <= kw; j0 += 32) {
        gqa_v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (int d = 0; d < hs; d++) {
            const float *x = xT + (size_t)d * kw + j0;
            float qd = q[d];
            a0 += qd * GQA_AT_C(x), a1 += qd * GQA_AT_C(x + 8);
            a2 += qd * GQA_AT_C(x + 16), a3 += qd * GQA_AT_C(x + 24);
        }
        GQA_AT(s + j0) = a0, GQA_AT(s + j0 + 8) = a1;
        GQA_AT(s + j0 + 16) = a2, GQA_AT(s + j0 + 24) = a3;
    }
    for (; j0 < kw; j0 += 8) {
        gqa_v8 a0 = {0};
        for (int d = 0; d < hs; d++)
            a0 += q[d] * GQA_AT_C(xT + (size_t)d * kw + j0);
        GQA_AT(s + j0) = a0;
    }
}

/* y (hs) += sum_j w[j] x_j over the n rows x_j of x (W floats apart), each
 * element's sum over j in order: 32 elements at a time in four sums, as
 * gqa_scores, then 8, then one by one. */
static inline void gqa_rows_axpy(float *y, const float *w, const float *x, size_t W, int n,
                                 int hs) {
    int d0 = 0;
    for (; d0 + 32 <= hs; d0 += 32) {
        gqa_v8 a0 = GQA_AT(y + d0), a1 = GQA_AT(y + d0 + 8);
        gqa_v8 a2 = GQA_AT(y + d0 + 16), a3 = GQA_AT(y + d0 + 24);
        for (int j = 0; j < n; j++) {
            const float *xj = x + (size_t)j * W + d0;
            float wj = w[j];
            a0 += wj * GQA_AT_C(xj), a1 += wj * GQA_AT_C(xj + 8);
            a2 += wj * GQA_AT_C(xj + 16), a3 += wj * GQA_AT_C(xj + 24);
        }
        GQA_AT(y + d0) = a0, GQA_AT(y + d0 + 8) = a1;
        GQA_AT(y + d0 + 16) = a2, GQA_AT(y + d0 + 24) = a3;
    }
    for (; d0 + 8 <= hs; d0 += 8) {
        gqa_v8 a0 = GQA_AT(y + d0);
        for (int j = 0; j < n; j++)
            a0 += w[j] * GQA_AT_C(x + (size_t)j * W + d0);
        GQA_AT(y + d0) = a0;
    }
    for (int d = d0; d < hs; d++) {
        float a = y[d];
        for (int j = 0; j < n; j++)
            a += w[j] * x[(size_t)j * W + d];
        y[d] = a;
    }
}

void ts_cpu_gqa_attention_forward(float *out,       /* (B, T, NH hs) */
                                  float *lse,       /* (B, NH, T) */
                                  const float *qkv, /* (B, T, (NH + 2 NKV) hs) */
                                  int B, int T, int NH, int NKV, int hs) {
    gqa_check_head(hs);
    int rep = NH / NKV, kw = gqa_tile_keys(hs), nblk = (T + GQA_QROWS - 1) / GQA_QROWS;
    size_t W = (size_t)(NH + 2 * NKV) * hs, OW = (size_t)NH * hs;
    float scale = 1.0f / sqrtf((float)hs);
    ts_cpu_tasks tq;
    ts_cpu_tasks_init(&tq, (size_t)B * NKV * nblk, 1);
#pragma omp parallel num_threads(tq.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&tq, &lo, &hi);)
        for (size_t task = lo; task < hi; task++) {
            int bg = (int)(task / nblk), b = bg / NKV, g = bg % NKV;
            int t0 = (int)(task % nblk) * GQA_QROWS;
            int t1 = t0 + GQA_QROWS < T ? t0 + GQA_QROWS : T;
            const float *kb = qkv + (size_t)b * T * W + (size_t)(NH + g) * hs;
            const float *vb = kb + (size_t)NKV * hs;
            /* running max and sum of (head h0 + i, row t0 + r) at [i][r] */
            float m[GQA_HEADS][GQA_QROWS], l[GQA_HEADS][GQA_QROWS];
            float kT[GQA_TILE_FLOATS], s[GQA_TILE];
            /* the group's query heads, GQA_HEADS at a time, each transposed
             * tile of keys serving all of them */
            for (int h0 = g * rep; h0 < (g + 1) * rep; h0 += GQA_HEADS) {
                int nh = (g + 1) * rep - h0 < GQA_HEADS ? (g + 1) * rep - h0 : GQA_HEADS;
                for (int i = 0; i < nh; i++)
                    for (int t = t0; t < t1; t++) {
                        float *o = out + ((size_t)b * T + t) * OW + (size_t)(h0 + i) * hs;
                        for (int d = 0; d < hs; d++)
                            o[d] = 0.0f;
                        m[i][t - t0] = -INFINITY, l[i][t - t0] = 0.0f;
                    }
                for (int j0 = 0; j0 < t1; j0 += kw) {
                    int nk = t1 - j0 < kw ? t1 - j0 : kw; /* keys the last row sees */
                    gqa_transpose(kT, kb + (size_t)j0 * W, W, nk, kw, hs);
                    for (int i = 0; i < nh; i++)
                        for (int t = j0 > t0 ? j0 : t0; t < t1; t++) {
                            int nj = t + 1 - j0 < nk ? t + 1 - j0 : nk; /* keys j0..t */
                            size_t row = (size_t)b * T + t;
                            const float *qt = qkv + row * W + (size_t)(h0 + i) * hs;
                            float *o = out + row * OW + (size_t)(h0 + i) * hs;
                            float *mt = &m[i][t - t0], *lt = &l[i][t - t0], mx = *mt;
                            gqa_scores(s, qt, kT, kw, hs);
                            for (int j = 0; j < nj; j++) {
                                s[j] *= scale;
                                mx = s[j] > mx ? s[j] : mx;
                            }
                            if (mx > *mt) { /* rescale what the earlier tiles summed */
                                float corr = expf(*mt - mx);
                                *lt *= corr;
                                for (int d = 0; d < hs; d++)
                                    o[d] *= corr;
                                *mt = mx;
                            }
#pragma omp simd
                            for (int j = 0; j < nj; j++)
                                s[j] = ts_cpu_exp_neg(s[j] - mx);
                            for (int j = 0; j < nj; j++)
                                *lt += s[j];
                            gqa_rows_axpy(o, s, vb + (size_t)j0 * W, W, nj, hs);
                        }
                }
                for (int i = 0; i < nh; i++)
                    for (int t = t0; t < t1; t++) {
                        float *o = out + ((size_t)b * T + t) * OW + (size_t)(h0 + i) * hs;
                        float inv = 1.0f / l[i][t - t0];
                        for (int d = 0; d < hs; d++)
                            o[d] *= inv;
                        lse[((size_t)b * NH + h0 + i) * T + t] = m[i][t - t0] + logf(l[i][t - t0]);
                    }
            }
        }
}

/* What every block of the backward shares: the qkv and out rows' widths,
 * the head size, the keys per tile, 1/sqrt(hs). */
typedef struct {
    size_t W, OW;
    int hs, kw;
    float scale;
} gqa_shape;

/* The backward of one query head's rows [t0, t0 + nq), nq <= GQA_QB, against
 * one tile of keys [j0, j0 + nk) whose k and v are transposed in kT, vT:
 * q, dq the rows' q and dq columns (W apart), dy their dout (OW apart), L,
 * D their lse and dout . out; k, dk, dv the tile's key rows (W apart). */

static void gqa_backward_rows(float *dq, float *dk, float *dv, const float *q, const float *dy,
                              const float *L, const float *D, const float *k, const float *kT,
                              const float *vT, int t0, int nq, int j0, int nk,
                              const gqa_shape *sh) {
    int kw = sh->kw, hs = sh->hs;
    float p[GQA_TILE], ds[GQA_TILE], pT[GQA_TILE * GQA_QB], dsT[GQA_TILE * GQA_QB];
    for (int r = 0; r < nq; r++) {
        int t = t0 + r, nj = t + 1 - j0 < nk ? t + 1 - j0 : nk; /* keys j0..t */
        gqa_scores(p, q + r * sh->W, kT, kw, hs);
        gqa_scores(ds, dy + r * sh->OW, vT, kw, hs);
#pragma omp simd
        for (int j = 0; j < kw; j++) {
            p[j] = ts_cpu_exp_neg(p[j] * sh->scale - L[r]);
            ds[j] = (ds[j] - D[r]) * p[j] * sh->scale;
        }
        for (int j = nj; j < kw; j++) /* keys past t */
            p[j] = ds[j] = 0.0f;
        gqa_rows_axpy(dq + r * sh->W, ds, k, sh->W, nj, hs);
        for (int j = 0; j < kw; j++)
            pT[j * GQA_QB + r] = p[j], dsT[j * GQA_QB + r] = ds[j];
    }
    int nkb = t0 + nq - j0 < nk ? t0 + nq - j0 : nk; /* keys any of the rows sees */
    for (int j = 0; j < nkb; j++) {
        gqa_rows_axpy(dk + j * sh->W, dsT + j * GQA_QB, q, sh->W, nq, hs);
        gqa_rows_axpy(dv + j * sh->W, pT + j * GQA_QB, dy, sh->OW, nq, hs);
    }
}

void ts_cpu_gqa_attention_backward(float *dqkv,       /* (B, T, (NH + 2 NKV) hs) */
                                   const float *dout, /* (B, T, NH hs) */
                                   const float *qkv,  /* (B, T, (NH + 2 NKV) hs) */
                                   const float *out,  /* (B, T, NH hs) */
                                   const float *lse,  /* (B, NH, T) */
                                   int B, int T, int NH, int NKV, int hs) {
    gqa_check_head(hs);
    int rep = NH / NKV;
    gqa_shape sh = {.W = (size_t)(NH + 2 * NKV) * hs,
                    .OW = (size_t)NH * hs,
                    .hs = hs,
                    .kw = gqa_tile_keys(hs),
                    .scale = 1.0f / sqrtf((float)hs)};
    size_t W = sh.W, OW = sh.OW;
    int kw = sh.kw;
    ts_cpu_tasks tq;
    ts_cpu_tasks_init(&tq, (size_t)B * NKV, 1);
#pragma omp parallel num_threads(tq.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&tq, &lo, &hi);)
        for (int bg = (int)lo; bg < (int)hi; bg++) {
            int b = bg / NKV, g = bg % NKV;
            size_t kvoff = (size_t)b * T * W + (size_t)(NH + g) * hs, voff = (size_t)NKV * hs;
            const float *kb = qkv + kvoff, *vb = kb + voff;
            float *dkb = dqkv + kvoff, *dvb = dkb + voff;
            float kT[GQA_TILE_FLOATS], vT[GQA_TILE_FLOATS], D[GQA_HEADS][GQA_RCHUNK];
            /* GQA_RCHUNK rows of GQA_HEADS heads at a time, so that their q,
             * dq and dout stay in cache while the key tiles go by */
            for (int c0 = 0; c0 < T; c0 += GQA_RCHUNK)
                for (int h0 = g * rep; h0 < (g + 1) * rep; h0 += GQA_HEADS) {
                    int c1 = c0 + GQA_RCHUNK < T ? c0 + GQA_RCHUNK : T;
                    int nh = (g + 1) * rep - h0 < GQA_HEADS ? (g + 1) * rep - h0 : GQA_HEADS;
                    for (int i = 0; i < nh; i++)
                        for (int t = c0; t < c1; t++) {
                            size_t o = ((size_t)b * T + t) * OW + (size_t)(h0 + i) * hs;
                            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
                            for (int d = 0; d < hs; d++)
                                acc += dout[o + d] * out[o + d];
                            D[i][t - c0] = acc; /* = sum_j P_tj dP_tj */
                        }
                    for (int j0 = 0; j0 < c1; j0 += kw) {
                        int nk = T - j0 < kw ? T - j0 : kw;
                        gqa_transpose(kT, kb + (size_t)j0 * W, W, nk, kw, hs);
                        gqa_transpose(vT, vb + (size_t)j0 * W, W, nk, kw, hs);
                        for (int i = 0; i < nh; i++)
                            for (int t0 = j0 > c0 ? j0 : c0; t0 < c1; t0 += GQA_QB) {
                                int h = h0 + i, nq = c1 - t0 < GQA_QB ? c1 - t0 : GQA_QB;
                                size_t q0 = ((size_t)b * T + t0) * W + (size_t)h * hs;
                                size_t o0 = ((size_t)b * T + t0) * OW + (size_t)h * hs;
                                size_t row = (size_t)j0 * W;
                                gqa_backward_rows(dqkv + q0, dkb + row, dvb + row, qkv + q0,
                                                  dout + o0, lse + ((size_t)b * NH + h) * T + t0,
                                                  &D[i][t0 - c0], kb + row, kT, vT, t0, nq, j0, nk,
                                                  &sh);
                            }
                    }
                }
        }
}
