/*
 * attention.c — causal multi-head self-attention over a packed qkv tensor,
 * forward and backward.
 *
 * Each (batch, head) pair is an independent task: it reads its slices of q, k
 * and v and writes only its own slices of out, att and dqkv, so the tasks run
 * in parallel with no races. The softmax backward uses the row form
 * dpre = att * (datt - sum(att * datt)), O(T^2 hs) per head.
 */
#include <math.h>

#include "cpu_kernels.h"

void ts_cpu_attention_forward(float *out,       /* (B, T, C) */
                              float *att,       /* (B, NH, T, T) */
                              const float *qkv, /* (B, T, 3C) */
                              int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *base = qkv + (size_t)b * T * C3 + (size_t)h * hs;
        for (int t = 0; t < T; t++) {
            const float *q = base + t * C3;
            float *a = att + ((size_t)bh * T + t) * T;
            float mx = -INFINITY;
            for (int t2 = 0; t2 <= t; t2++) {
                const float *k = base + t2 * C3 + C;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int i = 0; i < hs; i++)
                    s += q[i] * k[i];
                s *= scale;
                a[t2] = s;
                mx = s > mx ? s : mx;
            }
            float sum = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) {
                a[t2] = expf(a[t2] - mx);
                sum += a[t2];
            }
            float inv = 1.0f / sum;
            for (int t2 = 0; t2 <= t; t2++)
                a[t2] *= inv;
            for (int t2 = t + 1; t2 < T; t2++)
                a[t2] = 0.0f;
            float *o = out + ((size_t)b * T + t) * C + (size_t)h * hs;
            for (int i = 0; i < hs; i++)
                o[i] = 0.0f;
            for (int t2 = 0; t2 <= t; t2++) {
                const float *v = base + t2 * C3 + 2 * (size_t)C;
                float w = a[t2];
                for (int i = 0; i < hs; i++)
                    o[i] += w * v[i];
            }
        }
    }
}

void ts_cpu_attention_backward(float *dqkv,       /* (B, T, 3C) */
                               float *scratch,    /* (B, NH, T, T) */
                               const float *dout, /* (B, T, C) */
                               const float *qkv,  /* (B, T, 3C) */
                               const float *att,  /* (B, NH, T, T) */
                               int B, int T, int C, int NH) {
    int hs = C / NH;
    size_t C3 = 3 * (size_t)C;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel for schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        size_t off = (size_t)b * T * C3 + (size_t)h * hs;
        const float *base = qkv + off;
        float *dbase = dqkv + off;
        for (int t = 0; t < T; t++) {
            const float *a = att + ((size_t)bh * T + t) * T;
            float *dpre = scratch + ((size_t)bh * T + t) * T;
            const float *dy = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
            /* through out = att @ v: datt and dv */
            for (int t2 = 0; t2 <= t; t2++) {
                const float *v = base + t2 * C3 + 2 * (size_t)C;
                float *dv = dbase + t2 * C3 + 2 * (size_t)C;
                float s = 0.0f;
#pragma omp simd reduction(+ : s)
                for (int i = 0; i < hs; i++)
                    s += dy[i] * v[i];
                dpre[t2] = s;
                float w = a[t2];
                for (int i = 0; i < hs; i++)
                    dv[i] += w * dy[i];
            }
            /* through the softmax and the scale */
            float dot = 0.0f;
            for (int t2 = 0; t2 <= t; t2++)
                dot += a[t2] * dpre[t2];
            for (int t2 = 0; t2 <= t; t2++)
                dpre[t2] = a[t2] * (dpre[t2] - dot) * scale;
            for (int t2 = t + 1; t2 < T; t2++)
                dpre[t2] = 0.0f;
            /* through q k^T: dq and dk */
            const float *q = base + t * C3;
            float *dq = dbase + t * C3;
            for (int t2 = 0; t2 <= t; t2++) {
                const float *k = base + t2 * C3 + C;
                float *dk = dbase + t2 * C3 + C;
                float g = dpre[t2];
                for (int i = 0; i < hs; i++) {
                    dq[i] += g * k[i];
                    dk[i] += g * q[i];
                }
            }
        }
    }
}
