/*
 * test_llama_kernels.c — checks of the CPU kernels of a Llama-class block
 * (RMSNorm, rotary embeddings and their inverse frequencies, SwiGLU,
 * grouped-query attention), one check per run: `test_llama_kernels <name>`,
 * name one of TESTS below; `test_llama_kernels time` (not a ctest) times
 * them at a 124M-class shape.
 *
 * As in test_kernels.c: each forward against a reference written plainly in
 * double in this file; each backward against central finite differences of
 * L = sum(out * R) on a small case (FD_TOL 1e-3: test_kernels.c says why)
 * and run twice from a nonzero start to check that it accumulates (+=); and
 * every kernel on 1, 2 and 3 threads, bit for bit.
 *
 * Tolerances against double (relative to max(1, max |ref|)): a kernel's
 * float result carries about 6e-8 per rounding times a few roundings per
 * term and sqrt(terms) for a sum: RMSNorm and SwiGLU 1e-6, rotary 1e-6
 * (cos/sin rounded to float), inv_freq 1e-7 relative per entry (one rounding
 * of a double), grouped-query attention 2e-6 for out and lse (observed
 * 1-4e-7) and 5e-6 for dqkv (observed up to 1.0e-6 at T 300: a key's dk
 * sums T rows of every query head of its group). A wrong or missing term
 * shows as 1e-2 or more (D left out of the backward: 0.42; one row fewer
 * in dk: 0.18; no rescaling of the running sum: 0.08). The figures
 * observed are printed beside each limit.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "kernel_check.h"

/* --- RMSNorm ------------------------------------------------------------------- */

enum { RN = 10, RC = 8 };
#define RMS_EPS 1e-5f
typedef struct {
    float inp[RN * RC], w[RC], out[RN * RC], rstd[RN], r[RN * RC];
    float dinp[RN * RC], dw[RC];
} rms_ctx;

static double rms_loss(void *p) {
    rms_ctx *c = p;
    ts_cpu_rmsnorm_forward(c->out, c->rstd, c->inp, c->w, RMS_EPS, RN, RC);
    return dot_r(c->out, c->r, RN * RC);
}
static void rms_backward(void *p) {
    rms_ctx *c = p;
    rms_loss(c);
    ts_cpu_rmsnorm_backward(c->dinp, c->dw, c->r, c->inp, c->w, c->rstd, RN, RC);
}

/* out and rstd of rows (n, C) against double, with eps */
static void rms_compare(int n, int nc, float eps, const char *tag) {
    float *x = falloc((size_t)n * nc), *w = falloc(nc), *o = falloc((size_t)n * nc),
          *rs = falloc(n);
    double *ref = malloc(sizeof(double) * n * nc), *rref = malloc(sizeof(double) * n);
    fill(x, (size_t)n * nc, 2), fill(w, nc, 1);
    for (int c = 0; c < nc; c++)
        x[c] = 0.0f; /* row 0 all zero: rstd = 1 / sqrt(eps) */
    for (int r = 0; r < n; r++) {
        double ss = 0.0;
        for (int c = 0; c < nc; c++)
            ss += (double)x[r * nc + c] * x[r * nc + c];
        rref[r] = 1.0 / sqrt(ss / nc + (double)eps);
        for (int c = 0; c < nc; c++)
            ref[(size_t)r * nc + c] = x[r * nc + c] * rref[r] * w[c];
    }
    ts_cpu_rmsnorm_forward(o, rs, x, w, eps, n, nc);
    char what[96];
    snprintf(what, sizeof what, "%s: out vs double reference", tag);
    double e = max_err(o, ref, (size_t)n * nc);
    expect(e <= 1e-6, what, e, 1e-6);
    /* rstd is up to 1/sqrt(eps): relative error */
    double er = 0.0;
    for (int r = 0; r < n; r++)
        er = fmax(er, fabs(rs[r] - rref[r]) / rref[r]);
    snprintf(what, sizeof what, "%s: rstd (relative) vs double", tag);
    expect(er <= 1e-6, what, er, 1e-6);
    free(x), free(w), free(o), free(rs), free(ref), free(rref);
}

static void test_rmsnorm(void) {
    rms_compare(RN, RC, RMS_EPS, "10 x 8, eps 1e-5");
    rms_compare(33, 768, 1e-6f, "33 x 768, eps 1e-6");
    static rms_ctx c;
    fill(c.inp, RN * RC, 2), fill(c.w, RC, 1), fill(c.r, RN * RC, 1);
    kernel k = {rms_loss, rms_backward, &c};
    param ps[] = {{"inp", c.inp, c.dinp, RN * RC, NULL}, {"weight", c.w, c.dw, RC, NULL}};
    check_grads(&k, ps, 2, 1e-2f, FD_TOL);
}

/* --- rotary embeddings ------------------------------------------------------------- */

/* Rows of width RO_IS holding RO_NH heads of RO_HS from column RO_COL (a q
 * or k block inside a packed qkv row); out-of-place into rows of RO_OS. */
enum { RO_N = 7, RO_NH = 2, RO_HS = 8, RO_COL = 3, RO_IS = 24, RO_OS = 17 };
static const int32_t ro_pos[RO_N] = {0, 1, 2, 9, 0, 3, 100000}; /* a reset, a far one */

typedef struct {
    float inp[RO_N * RO_IS], out[RO_N * RO_OS], r[RO_N * RO_OS], dinp[RO_N * RO_IS];
    float inv_freq[RO_HS / 2];
} rope_ctx;

static double rope_loss(void *p) {
    rope_ctx *c = p;
    ts_cpu_rope_forward(c->out, c->inp + RO_COL, ro_pos, c->inv_freq, RO_N, RO_NH, RO_HS, RO_OS,
                        RO_IS);
    return dot_r(c->out, c->r, RO_N * RO_OS);
}
static void rope_backward(void *p) {
    rope_ctx *c = p;
    ts_cpu_rope_backward(c->dinp + RO_COL, c->r, ro_pos, c->inv_freq, RO_N, RO_NH, RO_HS, RO_IS,
                         RO_OS);
}

/* The rotation in double, as transformers writes it: q * cos + rotate_half(q)
 * * sin, with cos, sin of the angle repeated over both halves and
 * rotate_half(x) = [-x2, x1]. */
static void rope_ref(double *o, const float *x, int32_t pos, const float *inv_freq, int hs) {
    int half = hs / 2;
    for (int d = 0; d < hs; d++) {
        double a = (double)pos * inv_freq[d % half];
        double rot = d < half ? -(double)x[d + half] : (double)x[d - half];
        o[d] = x[d] * cos(a) + rot * sin(a);
    }
}

static void test_rope(void) {
    static rope_ctx c;
    ts_cpu_rope_inv_freq(c.inv_freq, RO_HS, 10000.0, NULL);
    fill(c.inp, RO_N * RO_IS, 2), fill(c.r, RO_N * RO_OS, 1);
    for (int i = 0; i < RO_N * RO_OS; i++)
        c.out[i] = 7.0f; /* the columns past the heads are left alone */
    rope_loss(&c);
    double ref[RO_N * RO_NH * RO_HS];
    float got[RO_N * RO_NH * RO_HS];
    int untouched = 1;
    for (int n = 0; n < RO_N; n++) {
        for (int h = 0; h < RO_NH; h++)
            rope_ref(ref + (n * RO_NH + h) * RO_HS, c.inp + n * RO_IS + RO_COL + h * RO_HS,
                     ro_pos[n], c.inv_freq, RO_HS);
        memcpy(got + n * RO_NH * RO_HS, c.out + n * RO_OS, RO_NH * RO_HS * sizeof(float));
        untouched &= c.out[n * RO_OS + RO_NH * RO_HS] == 7.0f;
    }
    double e = max_err(got, ref, RO_N * RO_NH * RO_HS);
    expect(e <= 1e-6, "forward (positions 0..100000) vs double", e, 1e-6);
    expect(untouched, "out's columns past the heads untouched", 0, 0);

    /* in place, inside the packed rows: the out-of-place bits, and the
     * columns around the heads unchanged */
    float inpl[RO_N * RO_IS];
    memcpy(inpl, c.inp, sizeof inpl);
    ts_cpu_rope_forward(inpl + RO_COL, inpl + RO_COL, ro_pos, c.inv_freq, RO_N, RO_NH, RO_HS, RO_IS,
                        RO_IS);
    int same = 1;
    for (int n = 0; n < RO_N; n++)
        for (int i = 0; i < RO_IS; i++) {
            int in_heads = i >= RO_COL && i < RO_COL + RO_NH * RO_HS;
            float want = in_heads ? c.out[n * RO_OS + i - RO_COL] : c.inp[n * RO_IS + i];
            same &= bits(inpl[n * RO_IS + i]) == bits(want);
        }
    expect(same, "in place = out of place, other columns unchanged", 0, 0);

    /* backward then forward: the rotation undone (to rounding) */
    float back[RO_N * RO_IS] = {0};
    ts_cpu_rope_backward(back + RO_COL, c.out, ro_pos, c.inv_freq, RO_N, RO_NH, RO_HS, RO_IS,
                         RO_OS);
    double er = 0.0;
    for (int n = 0; n < RO_N; n++)
        for (int i = RO_COL; i < RO_COL + RO_NH * RO_HS; i++)
            er = fmax(er, fabs(back[n * RO_IS + i] - c.inp[n * RO_IS + i]));
    expect(er <= 1e-6, "backward of forward gives inp back", er, 1e-6);

    kernel k = {rope_loss, rope_backward, &c};
    param ps[] = {{"inp", c.inp, c.dinp, RO_N * RO_IS, NULL}};
    check_grads(&k, ps, 1, 1e-2f, FD_TOL);
}

/* Llama 3.1's frequencies (theta 500000, hs 128, rope_scaling factor 8,
 * low_freq_factor 1, high_freq_factor 4, original 8192) against the rule
 * as transformers' _compute_llama3_parameters writes it, in double: the
 * low-frequency value where wavelen > O / low, the smoothed one where
 * neither wavelen < O / high nor wavelen > O / low, else unchanged. */
static void test_rope_inv_freq(void) {
    enum { HS = 128, HALF = HS / 2 };
    const ts_rope_scaling s = {8.0, 1.0, 4.0, 8192};
    float f[HALF], plain[HALF];
    ts_cpu_rope_inv_freq(f, HS, 500000.0, &s);
    ts_cpu_rope_inv_freq(plain, HS, 500000.0, NULL);
    double e = 0.0, ep = 0.0;
    int bands[3] = {0, 0, 0}; /* unchanged, smoothed, divided */
    for (int d = 0; d < HALF; d++) {
        double inv = 1.0 / pow(500000.0, (double)(2 * d) / HS);
        double wavelen = 2.0 * M_PI / inv;
        double low_wavelen = 8192.0 / 1.0, high_wavelen = 8192.0 / 4.0;
        double llama = wavelen > low_wavelen ? inv / 8.0 : inv;
        double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
        double smoothed = (1.0 - smooth) * llama / 8.0 + smooth * llama;
        int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        double want = medium ? smoothed : llama;
        bands[medium ? 1 : wavelen > low_wavelen ? 2 : 0]++;
        e = fmax(e, fabs(f[d] - want) / want);
        ep = fmax(ep, fabs(plain[d] - inv) / inv);
    }
    printf("  bands: %d unchanged, %d smoothed, %d divided by 8\n", bands[0], bands[1], bands[2]);
    expect(e <= 1e-7, "Llama 3 scaled inv_freq (relative) vs double", e, 1e-7);
    expect(ep <= 1e-7, "unscaled theta^(-2d/hs) (relative) vs double", ep, 1e-7);
    expect(bands[0] > 0 && bands[1] > 0 && bands[2] > 0, "all three bands are exercised", 0, 0);
    expect(f[0] == 1.0f && plain[0] == 1.0f, "inv_freq[0] = 1", f[0], 1);
}

/* --- SwiGLU ----------------------------------------------------------------------- */

enum { SN = 5, SF = 7 };
typedef struct {
    float inp[SN * 2 * SF], out[SN * SF], r[SN * SF], dinp[SN * 2 * SF];
} swiglu_ctx;

static double swiglu_loss(void *p) {
    swiglu_ctx *c = p;
    ts_cpu_swiglu_forward(c->out, c->inp, SN, SF);
    return dot_r(c->out, c->r, SN * SF);
}
static void swiglu_backward(void *p) {
    swiglu_ctx *c = p;
    ts_cpu_swiglu_backward(c->dinp, c->inp, c->r, SN, SF);
}

static double silu_ref(double x) {
    return x / (1.0 + exp(-x));
}

static void test_swiglu(void) {
    /* gate over [-100, 100] and +-1e30, up = 1 + something: forward and
     * backward against double, finite everywhere */
    enum { M = 4001 };
    float *in = falloc(2 * M), *o = falloc(M), *dd = falloc(M), *dg = falloc(2 * M);
    for (int i = 0; i < M; i++) {
        in[i] = -100.0f + 200.0f * (float)i / (M - 1);
        in[M + i] = 1.0f + 0.5f * frand();
        dd[i] = 1.0f;
    }
    in[1] = -1e30f, in[M - 2] = 1e30f;
    ts_cpu_swiglu_forward(o, in, 1, M);
    ts_cpu_swiglu_backward(dg, in, dd, 1, M);
    double e = 0.0, eg = 0.0, eu = 0.0;
    int finite = 1;
    for (int i = 0; i < M; i++) {
        double x = in[i], u = in[M + i], sg = 1.0 / (1.0 + exp(-x));
        double ref = silu_ref(x) * u, gref = u * sg * (1.0 + x * (1.0 - sg));
        e = fmax(e, fabs(o[i] - ref) / (1.0 + fabs(ref)));
        eg = fmax(eg, fabs(dg[i] - gref) / (1.0 + fabs(gref)));
        eu = fmax(eu, fabs(dg[M + i] - silu_ref(x)) / (1.0 + fabs(silu_ref(x))));
        finite &= isfinite(o[i]) && isfinite(dg[i]) && isfinite(dg[M + i]);
    }
    expect(e <= 1e-6, "forward, gate on [-100, 100] and +-1e30, vs double", e, 1e-6);
    expect(eg <= 1e-6, "dgate there vs double", eg, 1e-6);
    expect(eu <= 1e-6, "dup there vs double", eu, 1e-6);
    expect(finite, "out, dgate, dup all finite", 0, 0);
    float x2[2] = {-100.0f, 1.0f}, y2;
    ts_cpu_swiglu_forward(&y2, x2, 1, 1);
    expect(y2 == 0.0f, "silu(-100) = 0", y2, 0);
    x2[0] = 100.0f;
    ts_cpu_swiglu_forward(&y2, x2, 1, 1);
    expect(y2 == 100.0f, "silu(100) = 100", y2, 100);
    free(in), free(o), free(dd), free(dg);

    static swiglu_ctx c;
    fill(c.inp, SN * 2 * SF, 4), fill(c.r, SN * SF, 1);
    kernel k = {swiglu_loss, swiglu_backward, &c};
    param ps[] = {{"inp (gate | up)", c.inp, c.dinp, SN * 2 * SF, NULL}};
    check_grads(&k, ps, 1, 1e-2f, FD_TOL);
}

/* --- grouped-query attention ---------------------------------------------------------- */

/* Ordinary multi-head causal attention in double over K and V repeated to
 * NH heads (made here, as a model without GQA would): out (B, T, NH hs), lse
 * (B, NH, T), and the gradient of sum(out * dout) as dqkv in the packed GQA
 * layout, each kv head's dk, dv the sum of its repeated copies'. */
static void gqa_ref(double *out, double *lse, double *dqkv, const float *qkv, const float *dout,
                    int nB, int nT, int nNH, int nKV, int hs) {
    int rep = nNH / nKV, W = (nNH + 2 * nKV) * hs, OW = nNH * hs;
    size_t nrep = (size_t)nB * nT * nNH * hs;
    double *q = malloc(sizeof(double) * nrep), *k = malloc(sizeof(double) * nrep),
           *v = malloc(sizeof(double) * nrep), *dq = calloc(nrep, sizeof(double)),
           *dk = calloc(nrep, sizeof(double)), *dv = calloc(nrep, sizeof(double)),
           *p = malloc(sizeof(double) * nT), *dp = malloc(sizeof(double) * nT);
    for (int b = 0; b < nB; b++)
        for (int t = 0; t < nT; t++)
            for (int h = 0; h < nNH; h++)
                for (int d = 0; d < hs; d++) {
                    const float *row = qkv + ((size_t)b * nT + t) * W;
                    size_t i = (((size_t)b * nT + t) * nNH + h) * hs + d;
                    q[i] = row[h * hs + d];
                    k[i] = row[(nNH + h / rep) * hs + d];
                    v[i] = row[(nNH + nKV + h / rep) * hs + d];
                }
#define AT(x, b, t, h) ((x) + (((size_t)(b)*nT + (t)) * nNH + (h)) * hs)
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < nB; b++)
        for (int h = 0; h < nNH; h++)
            for (int t = 0; t < nT; t++) {
                double mx = -INFINITY, sum = 0.0, D = 0.0;
                for (int u = 0; u <= t; u++) {
                    p[u] = 0.0;
                    for (int d = 0; d < hs; d++)
                        p[u] += AT(q, b, t, h)[d] * AT(k, b, u, h)[d];
                    p[u] *= scale;
                    mx = fmax(mx, p[u]);
                }
                for (int u = 0; u <= t; u++)
                    sum += exp(p[u] - mx);
                lse[((size_t)b * nNH + h) * nT + t] = mx + log(sum);
                for (int u = 0; u <= t; u++)
                    p[u] = exp(p[u] - mx) / sum;
                const float *dy = dout + ((size_t)b * nT + t) * OW + h * hs;
                double *o = out + ((size_t)b * nT + t) * OW + h * hs;
                for (int d = 0; d < hs; d++) {
                    o[d] = 0.0;
                    for (int u = 0; u <= t; u++)
                        o[d] += p[u] * AT(v, b, u, h)[d];
                    D += dy[d] * o[d];
                }
                for (int u = 0; u <= t; u++) {
                    dp[u] = 0.0;
                    for (int d = 0; d < hs; d++)
                        dp[u] += dy[d] * AT(v, b, u, h)[d];
                    double ds = p[u] * (dp[u] - D) * scale;
                    for (int d = 0; d < hs; d++) {
                        AT(dv, b, u, h)[d] += p[u] * dy[d];
                        AT(dq, b, t, h)[d] += ds * AT(k, b, u, h)[d];
                        AT(dk, b, u, h)[d] += ds * AT(q, b, t, h)[d];
                    }
                }
            }
    memset(dqkv, 0, sizeof(double) * nB * nT * W);
    for (int b = 0; b < nB; b++)
        for (int t = 0; t < nT; t++)
            for (int h = 0; h < nNH; h++)
                for (int d = 0; d < hs; d++) {
                    double *row = dqkv + ((size_t)b * nT + t) * W;
                    row[h * hs + d] = AT(dq, b, t, h)[d];
                    row[(nNH + h / rep) * hs + d] += AT(dk, b, t, h)[d];
                    row[(nNH + nKV + h / rep) * hs + d] += AT(dv, b, t, h)[d];
                }
#undef AT
    free(q), free(k), free(v), free(dq), free(dk), free(dv), free(p), free(dp);
}

/* Forward (out, lse) and backward (dqkv, += onto a random start) against
 * gqa_ref; with NKV = NH, against ts_cpu_attention_forward / _backward too. */
static void gqa_case(int nB, int nT, int nNH, int nKV, int hs) {
    int W = (nNH + 2 * nKV) * hs, OW = nNH * hs;
    size_t nqkv = (size_t)nB * nT * W, nout = (size_t)nB * nT * OW;
    size_t nlse = ts_cpu_gqa_attention_saved_floats(nB, nNH, nT);
    float *qkv = falloc(nqkv), *dout = falloc(nout), *out = falloc(nout), *lse = falloc(nlse),
          *g0 = falloc(nqkv), *dqkv = falloc(nqkv);
    double *rout = malloc(sizeof(double) * nout), *rlse = malloc(sizeof(double) * nlse),
           *rd = malloc(sizeof(double) * nqkv);
    fill(qkv, nqkv, 1.5f), fill(dout, nout, 1), fill(g0, nqkv, 1);
    for (size_t i = 0; i < nout; i++)
        out[i] = NAN; /* must be written */
    gqa_ref(rout, rlse, rd, qkv, dout, nB, nT, nNH, nKV, hs);
    ts_cpu_gqa_attention_forward(out, lse, qkv, nB, nT, nNH, nKV, hs);
    memcpy(dqkv, g0, nqkv * sizeof(float));
    ts_cpu_gqa_attention_backward(dqkv, dout, qkv, out, lse, nB, nT, nNH, nKV, hs);
    for (size_t i = 0; i < nqkv; i++)
        dqkv[i] -= g0[i]; /* what the backward added */
    printf(" B %d T %d NH %d NKV %d hs %d\n", nB, nT, nNH, nKV, hs);
    double e = max_err(out, rout, nout);
    expect(e <= 2e-6, "out vs double MHA over repeated K, V", e, 2e-6);
    e = max_err(lse, rlse, nlse);
    expect(e <= 2e-6, "lse vs double", e, 2e-6);
    e = max_err(dqkv, rd, nqkv);
    expect(e <= 5e-6, "dqkv (+=) vs double, dk dv summed over copies", e, 5e-6);
    if (nKV == nNH) { /* the layouts coincide with the (B, T, 3C) of attention.c */
        int nC = nNH * hs;
        size_t natt = (size_t)nB * nNH * nT * nT;
        float *o2 = falloc(nout), *att = falloc(natt), *scratch = falloc(natt), *d2 = falloc(nqkv);
        ts_cpu_attention_forward(o2, att, qkv, nB, nT, nC, nNH);
        ts_cpu_attention_backward(d2, scratch, dout, qkv, att, nB, nT, nC, nNH);
        e = max_err_f(out, o2, nout);
        expect(e <= 1e-6, "out vs ts_cpu_attention_forward", e, 1e-6);
        e = max_err_f(dqkv, d2, nqkv);
        expect(e <= 2e-6, "dqkv vs ts_cpu_attention_backward", e, 2e-6);
        free(o2), free(att), free(scratch), free(d2);
    }
    free(qkv), free(dout), free(out), free(lse), free(g0), free(dqkv);
    free(rout), free(rlse), free(rd);
}

/* A small case for finite differences: B 2, T 5, NH 4, hs 4. */
enum { GB = 2, GT = 5, GNH = 4, GHS = 4, GMAXW = (GNH + 2 * GNH) * GHS };
typedef struct {
    int nkv;
    float qkv[GB * GT * GMAXW], out[GB * GT * GNH * GHS], lse[GB * GNH * GT];
    float r[GB * GT * GNH * GHS], dqkv[GB * GT * GMAXW];
} gqa_ctx;

static double gqa_loss(void *p) {
    gqa_ctx *c = p;
    ts_cpu_gqa_attention_forward(c->out, c->lse, c->qkv, GB, GT, GNH, c->nkv, GHS);
    return dot_r(c->out, c->r, GB * GT * GNH * GHS);
}
static void gqa_backward(void *p) {
    gqa_ctx *c = p;
    gqa_loss(c);
    ts_cpu_gqa_attention_backward(c->dqkv, c->r, c->qkv, c->out, c->lse, GB, GT, GNH, c->nkv, GHS);
}

static void test_gqa_attention(void) {
    static gqa_ctx c;
    for (int nkv = 1; nkv <= 2; nkv++) {
        printf(" finite differences, NH %d NKV %d\n", GNH, nkv);
        c.nkv = nkv;
        size_t n = (size_t)GB * GT * (GNH + 2 * nkv) * GHS;
        fill(c.qkv, n, 1.5f), fill(c.r, GB * GT * GNH * GHS, 1);
        kernel k = {gqa_loss, gqa_backward, &c};
        param ps[] = {{"qkv", c.qkv, c.dqkv, n, NULL}};
        check_grads(&k, ps, 1, 1e-2f, FD_TOL);
    }
}

/* NH:NKV = 4:1, 2:1, 1:1 at hs 64 and 128, T 70 and 130 (past one and two
 * tiles of 64 keys); and head sizes that take the products' other paths: 40
 * (32 + 8 elements), 44 (32 + 8 + 4 one by one), 320 (tiles of 24 keys:
 * 3 x 8 columns); 10 query heads on one kv head (taken 8, then 2) at hs
 * 16 (8 + 8); T 300, past the backward's chunk of 256 rows, at hs 64 and
 * 320 (whose tiles of 24 keys straddle the chunk's first row); and T 1. */
static void test_gqa_attention_mha(void) {
    const int shapes[][5] = {{2, 70, 4, 1, 64},   {2, 70, 4, 2, 64},   {2, 70, 4, 4, 64},
                             {1, 130, 4, 1, 128}, {1, 130, 2, 1, 128}, {2, 70, 2, 2, 128},
                             {1, 70, 2, 1, 40},   {1, 70, 2, 1, 44},   {1, 100, 2, 1, 320},
                             {2, 40, 10, 1, 16},  {1, 300, 4, 1, 64},  {1, 300, 2, 1, 320},
                             {3, 1, 2, 1, 8}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        gqa_case(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4]);
}

/* --- the same bits on 1, 2 and 3 threads ------------------------------------------------- */

/* Every kernel's outputs at B 3, T 70, NH 4, NKV 2, hs 64 (C 256, F 320):
 * 3 threads give shares of unequal length and tasks left to take. */
enum { KB = 3, KT = 70, KNH = 4, KKV = 2, KHS = 64, KC = KNH * KHS, KF = 320, KN = KB * KT };
enum { KW = (KNH + 2 * KKV) * KHS, NOUT = 11 };

static void llama_run(float **x, const float *in, const float *dy, const float *w,
                      const int32_t *pos, const float *inv_freq) {
    x[0] = falloc((size_t)KN * KC), x[1] = falloc(KN), x[2] = falloc((size_t)KN * KC),
    x[3] = falloc(KC);
    ts_cpu_rmsnorm_forward(x[0], x[1], in, w, 1e-5f, KN, KC);
    ts_cpu_rmsnorm_backward(x[2], x[3], dy, in, w, x[1], KN, KC);
    x[4] = falloc((size_t)KN * KW), x[5] = falloc((size_t)KN * KW);
    memcpy(x[4], in, (size_t)KN * KW * sizeof(float));
    ts_cpu_rope_forward(x[4], x[4], pos, inv_freq, KN, KNH + KKV, KHS, KW, KW); /* q and k */
    ts_cpu_rope_backward(x[5], dy, pos, inv_freq, KN, KNH + KKV, KHS, KW, KW);
    x[6] = falloc((size_t)KN * KF), x[7] = falloc((size_t)KN * 2 * KF);
    ts_cpu_swiglu_forward(x[6], in, KN, KF);
    ts_cpu_swiglu_backward(x[7], in, dy, KN, KF);
    x[8] = falloc((size_t)KN * KC), x[9] = falloc(ts_cpu_gqa_attention_saved_floats(KB, KNH, KT));
    x[10] = falloc((size_t)KN * KW);
    ts_cpu_gqa_attention_forward(x[8], x[9], x[4], KB, KT, KNH, KKV, KHS);
    ts_cpu_gqa_attention_backward(x[10], dy, x[4], x[8], x[9], KB, KT, KNH, KKV, KHS);
}

static void test_llama_threads(void) {
    int saved = ts_cpu_get_threads();
    size_t nin = (size_t)KN * 2 * KF; /* the widest input */
    float *in = falloc(nin), *dy = falloc(nin), *w = falloc(KC), inv_freq[KHS / 2];
    int32_t pos[KN];
    fill(in, nin, 2), fill(dy, nin, 1), fill(w, KC, 1);
    for (int n = 0; n < KN; n++)
        pos[n] = n % KT + 1000 * (n / KT);
    const ts_rope_scaling s = {8.0, 1.0, 4.0, 8192};
    ts_cpu_rope_inv_freq(inv_freq, KHS, 500000.0, &s);
    float *res[3][NOUT];
    for (int t = 0; t < 3; t++) {
        ts_cpu_set_threads(t + 1);
        llama_run(res[t], in, dy, w, pos, inv_freq);
    }
    const size_t len[NOUT] = {(size_t)KN * KC, KN,
                              (size_t)KN * KC, KC,
                              (size_t)KN * KW, (size_t)KN * KW,
                              (size_t)KN * KF, (size_t)KN * 2 * KF,
                              (size_t)KN * KC, ts_cpu_gqa_attention_saved_floats(KB, KNH, KT),
                              (size_t)KN * KW};
    const char *names[NOUT] = {"rmsnorm out",       "rmsnorm rstd",      "rmsnorm dinp",
                               "rmsnorm dweight",   "rope (in place)",   "rope backward",
                               "swiglu out",        "swiglu dinp",       "gqa attention out",
                               "gqa attention lse", "gqa attention dqkv"};
    for (int i = 0; i < NOUT; i++) {
        int same = 1;
        double diff = 0.0;
        for (int t = 1; t < 3; t++)
            same &= same_bits(names[i], "1 thread", res[0][i], t == 1 ? "2 threads" : "3 threads",
                              res[t][i], len[i], &diff);
        char what[96];
        snprintf(what, sizeof what, "%s: 1 = 2 = 3 threads", names[i]);
        expect(same, what, diff, 0);
    }
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < NOUT; i++)
            free(res[t][i]);
    free(in), free(dy), free(w);
    ts_cpu_set_threads(saved);
}

/* --- timing (by hand, not a ctest) ------------------------------------------------------- */

/* Each kernel at a Llama-124M-class shape: C 768, F 2048, NH 12, NKV 4,
 * hs 64, T 1024, B 4, on the threads set (OMP_NUM_THREADS); the best of
 * `reps` runs. */
static double best_of(int reps, void (*fn)(void *), void *ctx) {
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = omp_get_wtime();
        fn(ctx);
        best = fmin(best, omp_get_wtime() - t0);
    }
    return best;
}

typedef struct {
    int B, T, C, F, NH, NKV, hs, N, W;
    float *x, *y, *dx, *w, *dw, *rstd, *qkv, *dqkv, *out, *lse, *dout, *h, *gu, *dgu, *inv_freq;
    int32_t *pos;
} bench;

static void b_rms_f(void *p) {
    bench *b = p;
    ts_cpu_rmsnorm_forward(b->y, b->rstd, b->x, b->w, 1e-5f, b->N, b->C);
}
static void b_rms_b(void *p) {
    bench *b = p;
    ts_cpu_rmsnorm_backward(b->dx, b->dw, b->y, b->x, b->w, b->rstd, b->N, b->C);
}
static void b_rope_f(void *p) {
    bench *b = p;
    ts_cpu_rope_forward(b->qkv, b->qkv, b->pos, b->inv_freq, b->N, b->NH + b->NKV, b->hs, b->W,
                        b->W);
}
static void b_rope_b(void *p) {
    bench *b = p;
    ts_cpu_rope_backward(b->dqkv, b->qkv, b->pos, b->inv_freq, b->N, b->NH + b->NKV, b->hs, b->W,
                         b->W);
}
static void b_swiglu_f(void *p) {
    bench *b = p;
    ts_cpu_swiglu_forward(b->h, b->gu, b->N, b->F);
}
static void b_swiglu_b(void *p) {
    bench *b = p;
    ts_cpu_swiglu_backward(b->dgu, b->gu, b->h, b->N, b->F);
}
static void b_gqa_f(void *p) {
    bench *b = p;
    ts_cpu_gqa_attention_forward(b->out, b->lse, b->qkv, b->B, b->T, b->NH, b->NKV, b->hs);
}
static void b_gqa_b(void *p) {
    bench *b = p;
    ts_cpu_gqa_attention_backward(b->dqkv, b->dout, b->qkv, b->out, b->lse, b->B, b->T, b->NH,
                                  b->NKV, b->hs);
}

static void test_time(void) {
    bench b = {.B = 4, .T = 1024, .C = 768, .F = 2048, .NH = 12, .NKV = 4, .hs = 64};
    b.N = b.B * b.T, b.W = (b.NH + 2 * b.NKV) * b.hs;
    size_t N = (size_t)b.N;
    b.x = falloc(N * b.C), b.y = falloc(N * b.C), b.dx = falloc(N * b.C);
    b.w = falloc(b.C), b.dw = falloc(b.C), b.rstd = falloc(N);
    b.qkv = falloc(N * b.W), b.dqkv = falloc(N * b.W), b.out = falloc(N * b.NH * b.hs);
    b.dout = falloc(N * b.NH * b.hs),
    b.lse = falloc(ts_cpu_gqa_attention_saved_floats(b.B, b.NH, b.T));
    b.h = falloc(N * b.F), b.gu = falloc(N * 2 * b.F), b.dgu = falloc(N * 2 * b.F);
    b.inv_freq = falloc(b.hs / 2);
    b.inv_freq = falloc(b.hs / 2);
    b.pos = malloc(N * sizeof *b.pos);
    fill(b.x, N * b.C, 1), fill(b.w, b.C, 1), fill(b.qkv, N * b.W, 1);
    fill(b.dout, N * b.NH * b.hs, 1), fill(b.gu, N * 2 * b.F, 3);
    for (int n = 0; n < b.N; n++)
        b.pos[n] = n % b.T;
    const ts_rope_scaling s = {8.0, 1.0, 4.0, 8192};
    ts_cpu_rope_inv_freq(b.inv_freq, b.hs, 500000.0, &s);
    printf("  B %d T %d C %d F %d NH %d NKV %d hs %d, %d threads, best of runs:\n", b.B, b.T, b.C,
           b.F, b.NH, b.NKV, b.hs, ts_cpu_get_threads());
    printf("  rmsnorm (N, C)           fwd %8.3f ms  bwd %8.3f ms\n",
           1e3 * best_of(20, b_rms_f, &b), 1e3 * best_of(20, b_rms_b, &b));
    printf("  rope q+k heads in qkv    fwd %8.3f ms  bwd %8.3f ms\n",
           1e3 * best_of(20, b_rope_f, &b), 1e3 * best_of(20, b_rope_b, &b));
    printf("  swiglu (N, 2F) -> (N, F) fwd %8.3f ms  bwd %8.3f ms\n",
           1e3 * best_of(20, b_swiglu_f, &b), 1e3 * best_of(20, b_swiglu_b, &b));
    double tf = best_of(3, b_gqa_f, &b), tb = best_of(3, b_gqa_b, &b);
    /* causal: B NH T(T+1)/2 scores, 2 hs FLOPs each for q.k and for p v */
    double flops = 4.0 * b.B * b.NH * (double)b.T * (b.T + 1) / 2 * b.hs;
    printf("  gqa attention            fwd %8.3f ms  bwd %8.3f ms  (%.1f, %.1f GFLOP/s at 1x, 2x "
           "the forward's %.2f GFLOP)\n",
           1e3 * tf, 1e3 * tb, flops / tf * 1e-9, 2 * flops / tb * 1e-9, flops * 1e-9);
    if (getenv("TS_BENCH_MHA")) { /* beside it, attention.c's MHA (12 kv heads, saving T x T) */
        size_t natt = (size_t)b.B * b.NH * b.T * b.T, n3 = N * 3 * b.C;
        float *q3 = falloc(n3), *d3 = falloc(n3), *att = falloc(natt), *scr = falloc(natt);
        fill(q3, n3, 1);
        double af = INFINITY, ab = INFINITY;
        for (int r = 0; r < 3; r++) {
            double t0 = omp_get_wtime();
            ts_cpu_attention_forward(b.out, att, q3, b.B, b.T, b.C, b.NH);
            double t1 = omp_get_wtime();
            ts_cpu_attention_backward(d3, scr, b.dout, q3, att, b.B, b.T, b.C, b.NH);
            af = fmin(af, t1 - t0), ab = fmin(ab, omp_get_wtime() - t1);
        }
        printf(
            "  mha attention (SGEMM)    fwd %8.3f ms  bwd %8.3f ms  (ts_cpu_attention_*, NH %d)\n",
            1e3 * af, 1e3 * ab, b.NH);
        free(q3), free(d3), free(att), free(scr);
    }
    free(b.x), free(b.y), free(b.dx), free(b.w), free(b.dw), free(b.rstd), free(b.qkv);
    free(b.dqkv), free(b.out), free(b.dout), free(b.lse), free(b.h), free(b.gu), free(b.dgu),
        free(b.inv_freq);
    free(b.pos);
}

/* A head over TS_CPU_GQA_MAX_HEAD: the kernel stops before it touches a
 * buffer (all one float: a tile of it would overrun the stack). */
static void test_gqa_head_too_large(void) {
    float one = 0;
    printf("  forward, hs %d: expect a stop naming it\n", TS_CPU_GQA_MAX_HEAD + 1);
    fflush(stdout);
    ts_cpu_gqa_attention_forward(&one, &one, &one, 1, 1, 1, 1, TS_CPU_GQA_MAX_HEAD + 1);
    expect(0, "the forward returned", TS_CPU_GQA_MAX_HEAD + 1, TS_CPU_GQA_MAX_HEAD);
}

/* --- driver ------------------------------------------------------------------------------- */

static const kernel_test TESTS[] = {
    {"rmsnorm", test_rmsnorm},
    {"rope", test_rope},
    {"rope_inv_freq", test_rope_inv_freq},
    {"swiglu", test_swiglu},
    {"gqa_attention", test_gqa_attention},
    {"gqa_attention_mha", test_gqa_attention_mha},
    {"threads", test_llama_threads},
    {"gqa_head_too_large", test_gqa_head_too_large},
    {"time", test_time},
};

int main(int argc, char **argv) {
    return kernel_tests_main(argc, argv, TESTS, (int)(sizeof TESTS / sizeof TESTS[0]));
}
