/*
 * attention_block.c — causal attention of a block of query rows against a
 * block of key/value rows, the step of ring (context-parallel) attention:
 * the forward with the log-sum-exp of every row, the merge of two partial
 * results over disjoint sets of keys, and the backward of one key block
 * given the final (merged) output and lse. cpu_kernels.h states the
 * semantics; with one block holding the whole sequence (Tq = Tk, offset 0)
 * they are ts_cpu_attention_forward / _backward.
 *
 * Forward: every (batch, head, query row) is an independent task. A row
 * walks its visible keys in tiles of BLK_TILE scores held on the stack, with
 * an online softmax (running max and sum; the output row itself is the
 * accumulator, rescaled when the max grows), so no (Tq, Tk) buffer exists
 * and nothing is allocated. Backward: every (batch, head) pair is a task, as
 * in attention.c: it alone writes its head's columns of dq, dk and dv, so
 * the row-by-row accumulation needs no atomics and is deterministic. P is
 * recomputed as exp(s - lse) from the final lse, a tile of keys at a time.
 * The exponentials of a tile run in one vectorized loop (fastmath.h), away
 * from the dot products and the updates: libm's expf would stay scalar.
 *
 * Not here: communication (the cp plugin moves the blocks), bf16 rounding.
 */
#include <math.h>

#include "cpu_kernels.h"
#include "tasks.h"
#include "fastmath.h" /* ts_cpu_exp_neg: a vectorizable exp */

#define BLK_TILE 64 /* scores of one row held at a time */

/* Keys [0, n) are visible to query row i: n = clamp(i + offset + 1, 0, Tk),
 * computed without overflow for any offset. */
static inline int blk_visible(int i, int64_t offset, int Tk) {
    if (offset >= (int64_t)Tk - 1 - i) return Tk;
    if (offset < -(int64_t)i) return 0;
    return (int)(i + offset + 1);
}

static inline float blk_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int d = 0; d < n; d++)
        s += a[d] * b[d];
    return s;
}

void ts_cpu_attention_block_forward(float *out,     /* (B, Tq, os), C used */
                                    float *lse,     /* (B, NH, Tq) */
                                    const float *q, /* (B, Tq, qs), C used */
                                    const float *k, /* (B, Tk, kvs), C used */
                                    const float *v, /* (B, Tk, kvs), C used */
                                    int B, int Tq, int Tk, int C, int NH, int qs, int kvs, int os,
                                    int64_t offset) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    long rows = (long)B * NH * Tq;
    /* tasks of 16 rows: the causal rows' growing lengths make a static split
     * uneven, which the threads' taking of each other's tasks evens out */
    ts_cpu_tasks tq;
    ts_cpu_tasks_init(&tq, (size_t)rows, 16);
#pragma omp parallel num_threads(tq.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&tq, &lo, &hi);)
        for (long r = (long)lo; r < (long)hi; r++) {
            int i = (int)(r % Tq), bh = (int)(r / Tq), b = bh / NH, h = bh % NH;
            const float *qi = q + ((size_t)b * Tq + i) * qs + (size_t)h * hs;
            const float *kb = k + (size_t)b * Tk * kvs + (size_t)h * hs;
            const float *vb = v + (size_t)b * Tk * kvs + (size_t)h * hs;
            float *o = out + ((size_t)b * Tq + i) * os + (size_t)h * hs;
            for (int d = 0; d < hs; d++)
                o[d] = 0.0f;
            int n = blk_visible(i, offset, Tk);
            float m = -INFINITY, l = 0.0f, s[BLK_TILE];
            for (int j0 = 0; j0 < n; j0 += BLK_TILE) {
                int nj = n - j0 < BLK_TILE ? n - j0 : BLK_TILE;
                float mx = m;
                for (int jj = 0; jj < nj; jj++) {
                    s[jj] = blk_dot(qi, kb + (size_t)(j0 + jj) * kvs, hs) * scale;
                    mx = s[jj] > mx ? s[jj] : mx;
                }
                if (mx > m) { /* rescale what the earlier tiles summed */
                    float corr = expf(m - mx);
                    l *= corr;
                    for (int d = 0; d < hs; d++)
                        o[d] *= corr;
                    m = mx;
                }
#pragma omp simd
                for (int jj = 0; jj < nj; jj++)
                    s[jj] = ts_cpu_exp_neg(s[jj] - m);
                for (int jj = 0; jj < nj; jj++) {
                    const float *vj = vb + (size_t)(j0 + jj) * kvs;
                    float p = s[jj];
                    l += p;
#pragma omp simd
                    for (int d = 0; d < hs; d++)
                        o[d] += p * vj[d];
                }
            }
            float *li = lse + (size_t)bh * Tq + i;
            if (n == 0) {
                *li = -INFINITY;
                continue;
            }
            float inv = 1.0f / l;
            for (int d = 0; d < hs; d++)
                o[d] *= inv;
            *li = m + logf(l);
        }
}

void ts_cpu_attention_block_merge(float *out,        /* (B, Tq, os), C used */
                                  float *lse,        /* (B, NH, Tq) */
                                  const float *out2, /* (B, Tq, os), C used */
                                  const float *lse2, /* (B, NH, Tq) */
                                  int B, int Tq, int C, int NH, int os) {
    int hs = C / NH;
    long rows = (long)B * Tq * NH;
    ts_cpu_tasks tq;
    ts_cpu_tasks_init(&tq, (size_t)rows, ts_cpu_rows_grain((size_t)hs));
#pragma omp parallel num_threads(tq.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&tq, &lo, &hi);)
        for (long r = (long)lo; r < (long)hi; r++) {
            int h = (int)(r % NH), i = (int)(r / NH % Tq), b = (int)(r / NH / Tq);
            size_t li = ((size_t)b * NH + h) * Tq + i,
                   oi = ((size_t)b * Tq + i) * os + (size_t)h * hs;
            float a = lse[li], a2 = lse2[li];
            float *o = out + oi;
            const float *o2 = out2 + oi;
            if (a2 == -INFINITY) { /* the other part saw no key: nothing to add */
                if (a == -INFINITY)
                    for (int d = 0; d < hs; d++)
                        o[d] = 0.0f;
                continue;
            }
            if (a == -INFINITY) { /* this part saw no key: take the other */
                for (int d = 0; d < hs; d++)
                    o[d] = o2[d];
                lse[li] = a2;
                continue;
            }
            float mx = a > a2 ? a : a2, mn = a > a2 ? a2 : a;
            float L = mx + log1pf(expf(mn - mx));
            float w = expf(a - L), w2 = expf(a2 - L);
#pragma omp simd
            for (int d = 0; d < hs; d++)
                o[d] = o[d] * w + o2[d] * w2;
            lse[li] = L;
        }
}

void ts_cpu_attention_block_backward(float *dq,         /* (B, Tq, qs), C used */
                                     float *dk,         /* (B, Tk, kvs), C used */
                                     float *dv,         /* (B, Tk, kvs), C used */
                                     const float *q,    /* (B, Tq, qs) */
                                     const float *k,    /* (B, Tk, kvs) */
                                     const float *v,    /* (B, Tk, kvs) */
                                     const float *out,  /* (B, Tq, os), final */
                                     const float *dout, /* (B, Tq, os) */
                                     const float *lse,  /* (B, NH, Tq), final */
                                     int B, int Tq, int Tk, int C, int NH, int qs, int kvs, int os,
                                     int64_t offset) {
    int hs = C / NH;
    float scale = 1.0f / sqrtf((float)hs);
    ts_cpu_tasks tq;
    ts_cpu_tasks_init(&tq, (size_t)B * NH, 1);
#pragma omp parallel num_threads(tq.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&tq, &lo, &hi);)
        for (int bh = (int)lo; bh < (int)hi; bh++) {
            int b = bh / NH, h = bh % NH;
            size_t kvoff = (size_t)b * Tk * kvs + (size_t)h * hs;
            const float *kb = k + kvoff, *vb = v + kvoff;
            float *dkb = dk + kvoff, *dvb = dv + kvoff;
            for (int i = 0; i < Tq; i++) {
                float L = lse[(size_t)bh * Tq + i];
                int n = blk_visible(i, offset, Tk);
                if (n == 0 || L == -INFINITY) continue;
                size_t qoff = ((size_t)b * Tq + i) * qs + (size_t)h * hs;
                size_t ooff = ((size_t)b * Tq + i) * os + (size_t)h * hs;
                const float *qi = q + qoff, *dy = dout + ooff;
                float *dqi = dq + qoff;
                float D = blk_dot(dy, out + ooff, hs); /* = sum_j P_ij dP_ij */
                float p[BLK_TILE], ds[BLK_TILE];
                for (int j0 = 0; j0 < n; j0 += BLK_TILE) {
                    int nj = n - j0 < BLK_TILE ? n - j0 : BLK_TILE;
                    for (int jj = 0; jj < nj; jj++) {
                        size_t row = (size_t)(j0 + jj) * kvs;
                        p[jj] = blk_dot(qi, kb + row, hs) * scale - L;
                        ds[jj] = blk_dot(dy, vb + row, hs) - D;
                    }
#pragma omp simd
                    for (int jj = 0; jj < nj; jj++) {
                        p[jj] = ts_cpu_exp_neg(p[jj]);
                        ds[jj] *= p[jj] * scale;
                    }
                    for (int jj = 0; jj < nj; jj++) {
                        size_t row = (size_t)(j0 + jj) * kvs;
                        const float *kj = kb + row;
                        float *dkj = dkb + row, *dvj = dvb + row, pj = p[jj], dsj = ds[jj];
#pragma omp simd
                        for (int d = 0; d < hs; d++) {
                            dvj[d] += pj * dy[d];
                            dqi[d] += dsj * kj[d];
                            dkj[d] += dsj * qi[d];
                        }
                    }
                }
            }
        }
}
