/*
 * attention.c — causal multi-head self-attention over a packed qkv tensor,
 * forward and backward.
 *
 * Each (batch, head) pair is an independent task (tasks.h): it reads its
 * slices of q, k and v and writes only its own slices of out, att and dqkv,
 * so the tasks run in parallel with no races. Within a task the products go through SGEMM in
 * blocks of ATT_ROWS query rows: rows [r0, r1) see keys [0, r1), so only the
 * upper triangle of each diagonal block is computed and then masked (the
 * library runs single-threaded inside the parallel loop). The softmax
 * backward uses the row form dpre = att * (datt - sum(att * datt)), O(T^2 hs)
 * per head.
 *
 * Selective activation recomputation keeps no (B, NH, T, T) array: its
 * forward keeps no probabilities (forward_unsaved), and its backward makes
 * each block of rows' probabilities again, by the forward's own code, just
 * before the backward's code uses it, in a scratch of two blocks of rows
 * per task.
 */
#include <cblas.h>
#include <math.h>

#include "cpu_kernels.h"
#include "tasks.h"

#define ATT_ROWS 64

/* Probabilities of query rows [r0, r1) of one (batch, head) into a (rows
 * [r0, r1) of a T-wide array, row t zero past t): the scaled scores against
 * keys [0, r1), then the softmax of each row. The forward and the
 * recomputation both call it, so they make the same bits. */
static void att_rows(float *a, const float *q, const float *k, int r0, int r1, int T, int hs,
                     int C3, float scale) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs, scale,
                q + (size_t)r0 * C3, C3, k, C3, 0.0f, a, T);
    for (int t = r0; t < r1; t++) {
        float *row = a + (size_t)(t - r0) * T, mx = -INFINITY, sum = 0.0f;
        for (int u = 0; u <= t; u++)
            mx = row[u] > mx ? row[u] : mx;
        for (int u = 0; u <= t; u++) {
            row[u] = expf(row[u] - mx);
            sum += row[u];
        }
        float inv = 1.0f / sum;
        for (int u = 0; u <= t; u++)
            row[u] *= inv;
        for (int u = t + 1; u < T; u++)
            row[u] = 0.0f;
    }
}

/* The backward of query rows [r0, r1) of one (batch, head), given their
 * probabilities ab (T-wide rows) and a T-wide scratch db of as many rows. */
static void att_rows_backward(float *dq, float *dk, float *dv, float *db, const float *ab,
                              const float *q, const float *k, const float *v, const float *dy,
                              int r0, int r1, int T, int hs, int C, int C3, float scale) {
    int m = r1 - r0;
    const float *dyb = dy + (size_t)r0 * C;
    /* through out = att @ v: datt = dout v^T, dv += att^T dout */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hs, 1.0f, dyb, C, v, C3, 0.0f, db,
                T);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, m, 1.0f, ab, T, dyb, C, 1.0f, dv,
                C3);
    /* through the softmax and the scale */
    for (int t = r0; t < r1; t++) {
        const float *ar = ab + (size_t)(t - r0) * T;
        float *dr = db + (size_t)(t - r0) * T, dot = 0.0f;
        for (int u = 0; u <= t; u++)
            dot += ar[u] * dr[u];
        for (int u = 0; u <= t; u++)
            dr[u] = ar[u] * (dr[u] - dot) * scale;
        for (int u = t + 1; u < T; u++)
            dr[u] = 0.0f;
    }
    /* through q k^T: dq += dpre k, dk += dpre^T q */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, r1, 1.0f, db, T, k, C3, 1.0f,
                dq + (size_t)r0 * C3, C3);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hs, m, 1.0f, db, T,
                q + (size_t)r0 * C3, C3, 1.0f, dk, C3);
}

void ts_cpu_attention_forward(float *out,       /* (B, T, C) */
                              float *att,       /* (B, NH, T, T) */
                              const float *qkv, /* (B, T, 3C) */
                              int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)B * NH, 1);
#pragma omp parallel num_threads(q.shares)
    for (size_t bh0, bh1; ts_cpu_tasks_next(&q, &bh0, &bh1);) {
        int bh = (int)bh0, b = bh / NH, h = bh % NH;
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
        float *o = out + (size_t)b * T * C + (size_t)h * hs;
        float *a = att + (size_t)bh * T * T;
        for (int r0 = 0; r0 < T; r0 += ATT_ROWS) {
            int r1 = r0 + ATT_ROWS < T ? r0 + ATT_ROWS : T, m = r1 - r0;
            att_rows(a + (size_t)r0 * T, q, k, r0, r1, T, hs, C3, scale);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hs, r1, 1.0f,
                        a + (size_t)r0 * T, T, v, C3, 0.0f, o + (size_t)r0 * C, C);
        }
    }
}

void ts_cpu_attention_backward(float *dqkv,       /* (B, T, 3C) */
                               float *scratch,    /* (B, NH, T, T) */
                               const float *dout, /* (B, T, C) */
                               const float *qkv,  /* (B, T, 3C) */
                               const float *att,  /* (B, NH, T, T) */
                               int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)B * NH, 1);
#pragma omp parallel num_threads(q.shares)
    for (size_t bh0, bh1; ts_cpu_tasks_next(&q, &bh0, &bh1);) {
        int bh = (int)bh0, b = bh / NH, h = bh % NH;
        size_t off = (size_t)b * T * C3 + (size_t)h * hs;
        const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
        float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
        const float *dy = dout + (size_t)b * T * C + (size_t)h * hs;
        const float *a = att + (size_t)bh * T * T;
        float *dpre = scratch + (size_t)bh * T * T;
        for (int r0 = 0; r0 < T; r0 += ATT_ROWS) {
            int r1 = r0 + ATT_ROWS < T ? r0 + ATT_ROWS : T;
            att_rows_backward(dq, dk, dv, dpre + (size_t)r0 * T, a + (size_t)r0 * T, q, k, v, dy,
                              r0, r1, T, hs, C, C3, scale);
        }
    }
}

/* Selective recomputation's two passes over each (batch, head), in a scratch
 * of two blocks of rows per task and no T x T array: with out, the forward's
 * output; with dqkv, the backward, each block of rows' probabilities made
 * again just before its use. */
static void att_unsaved(float *out, float *dqkv, float *scratch, const float *dout,
                        const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    size_t rows = T < ATT_ROWS ? (size_t)T : ATT_ROWS;
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)B * NH, 1);
#pragma omp parallel num_threads(q.shares)
    for (size_t bh0, bh1; ts_cpu_tasks_next(&q, &bh0, &bh1);) {
        int bh = (int)bh0, b = bh / NH, h = bh % NH;
        size_t off = (size_t)b * T * C3 + (size_t)h * hs, row = (size_t)b * T * C + (size_t)h * hs;
        const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
        float *ab = scratch + (size_t)bh * 2 * rows * T, *db = ab + rows * T;
        for (int r0 = 0; r0 < T; r0 += ATT_ROWS) {
            int r1 = r0 + ATT_ROWS < T ? r0 + ATT_ROWS : T;
            att_rows(ab, q, k, r0, r1, T, hs, C3, scale);
            if (out)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1, 1.0f, ab,
                            T, v, C3, 0.0f, out + row + (size_t)r0 * C, C);
            else
                att_rows_backward(dqkv + off, dqkv + off + C, dqkv + off + 2 * C, db, ab, q, k, v,
                                  dout + row, r0, r1, T, hs, C, C3, scale);
        }
    }
}

size_t ts_cpu_attention_recompute_floats(int B, int NH, int T) {
    size_t rows = T < ATT_ROWS ? (size_t)T : ATT_ROWS;
    return (size_t)B * NH * 2 * rows * (size_t)T;
}

void ts_cpu_attention_forward_unsaved(float *out,       /* (B, T, C) */
                                      float *scratch,   /* recompute_floats */
                                      const float *qkv, /* (B, T, 3C) */
                                      int B, int T, int C, int NH) {
    att_unsaved(out, NULL, scratch, NULL, qkv, B, T, C, NH);
}

void ts_cpu_attention_backward_recompute(float *dqkv,       /* (B, T, 3C) */
                                         float *scratch,    /* recompute_floats */
                                         const float *dout, /* (B, T, C) */
                                         const float *qkv,  /* (B, T, 3C) */
                                         int B, int T, int C, int NH) {
    att_unsaved(NULL, dqkv, scratch, dout, qkv, B, T, C, NH);
}
