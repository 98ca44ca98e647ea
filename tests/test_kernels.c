/*
 * test_kernels.c — checks of the CPU reference kernels, one kernel per run:
 * `test_kernels <name>`, where name is one of the entries of TESTS below.
 *
 * Each forward is compared with a naive reference computed in double. Each
 * backward is compared with central finite differences of the scalar
 * L = sum(out * R), R random, on small random shapes; it is also run twice
 * from a nonzero start to check that it accumulates (+=). `test_kernels time`
 * (not a ctest) times the crossentropy and layernorm at GPT-2 124M sizes.
 *
 * Tolerances. The kernels compute in float, so L carries a rounding error of
 * about 1e-7 * sqrt(#terms) * |term|; divided by the step 2 eps = 2e-2 that
 * is ~1e-5 of the gradient. The central-difference truncation error is
 * O(eps^2 f''') ~ 1e-4 relative for these smooth, O(1)-scaled functions
 * (matmul, embedding, residual are linear: no truncation at all). We observe
 * ||g_fd - g|| / ||g_fd|| <= 2e-5 for every kernel and require 1e-3: fifty
 * times the observed error, and ten times below what one wrong term gives
 * (a 1% error in the crossentropy target term shows as 1.1e-2; a missing
 * term in the layernorm, attention or GELU backward as 2e-2..5e-1).
 * Accumulation (+=) is checked to float rounding, 1e-6 of the magnitude.
 */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu_kernels.h"
#include "tasks.h"
#include "tessera/tessera.h"

#include "kernel_check.h"

/* Small shapes shared by the tests. */
enum { B = 2, T = 5, C = 8, NH = 2, N = B * T };

/* --- matmul ------------------------------------------------------------ */

enum { MM_OC = 6 };
typedef struct {
    float inp[N * C], w[MM_OC * C], bias[MM_OC], out[N * MM_OC], r[N * MM_OC];
    float dinp[N * C], dw[MM_OC * C], dbias[MM_OC];
} mm_ctx;

static double mm_loss(void *p) {
    mm_ctx *c = p;
    ts_cpu_matmul_forward(c->out, c->inp, c->w, c->bias, N, C, MM_OC);
    return dot_r(c->out, c->r, N * MM_OC);
}
static void mm_backward(void *p) {
    mm_ctx *c = p;
    ts_cpu_matmul_backward(c->dinp, c->dw, c->dbias, c->r, c->inp, c->w, N, C, MM_OC);
}

/* A short, wide product (70 rows, 1001 columns: three column tiles of 384,
 * on 3 threads) and its backward's dinp (70 x 96, one column tile,
 * accumulating), against double references. */
static void test_matmul_wide(void) {
    enum { WN = 70, WC = 96, WOC = 1001 };
    float *inp = falloc(WN * WC), *w = falloc((size_t)WOC * WC), *bias = falloc(WOC);
    float *out = falloc((size_t)WN * WOC), *dout = falloc((size_t)WN * WOC),
          *dinp = falloc(WN * WC);
    double *ref = malloc(sizeof(double) * WN * WOC), *dref = malloc(sizeof(double) * WN * WC);
    fill(inp, WN * WC, 1), fill(w, (size_t)WOC * WC, 1), fill(bias, WOC, 1);
    fill(dout, (size_t)WN * WOC, 1), fill(dinp, WN * WC, 1);
    for (int n = 0; n < WN; n++)
        for (int o = 0; o < WOC; o++) {
            double acc = bias[o];
            for (int i = 0; i < WC; i++)
                acc += (double)inp[n * WC + i] * w[(size_t)o * WC + i];
            ref[(size_t)n * WOC + o] = acc;
        }
    for (int n = 0; n < WN; n++)
        for (int i = 0; i < WC; i++) {
            double acc = dinp[n * WC + i]; /* the backward adds to what is there */
            for (int o = 0; o < WOC; o++)
                acc += (double)dout[(size_t)n * WOC + o] * w[(size_t)o * WC + i];
            dref[n * WC + i] = acc;
        }
    int saved = ts_cpu_get_threads();
    ts_cpu_set_threads(3);
    ts_cpu_matmul_forward(out, inp, w, bias, WN, WC, WOC);
    ts_cpu_matmul_backward(dinp, NULL, NULL, dout, inp, w, WN, WC, WOC);
    ts_cpu_set_threads(saved);
    double e = max_err(out, ref, (size_t)WN * WOC);
    expect(e <= 1e-6, "70 x 1001 (column tiles) vs double reference", e, 1e-6);
    e = max_err(dinp, dref, WN * WC);
    expect(e <= 1e-6, "its dinp, accumulated (+=), vs double reference", e, 1e-6);
    free(inp), free(w), free(bias), free(out), free(dout), free(dinp), free(ref), free(dref);
}

static void test_matmul(void) {
    static mm_ctx c;
    fill(c.inp, N * C, 1), fill(c.w, MM_OC * C, 1), fill(c.bias, MM_OC, 1);
    fill(c.r, N * MM_OC, 1);
    double ref[N * MM_OC];
    for (int n = 0; n < N; n++)
        for (int o = 0; o < MM_OC; o++) {
            double s = c.bias[o];
            for (int i = 0; i < C; i++)
                s += (double)c.inp[n * C + i] * c.w[o * C + i];
            ref[n * MM_OC + o] = s;
        }
    mm_loss(&c);
    double e = max_err(c.out, ref, N * MM_OC);
    expect(e <= 1e-6, "forward vs double reference", e, 1e-6);
    ts_cpu_matmul_forward(c.out, c.inp, c.w, NULL, N, C, MM_OC);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < MM_OC; o++)
            ref[n * MM_OC + o] -= c.bias[o];
    e = max_err(c.out, ref, N * MM_OC);
    expect(e <= 1e-6, "forward without bias vs double reference", e, 1e-6);

    kernel k = {mm_loss, mm_backward, &c};
    param ps[] = {{"inp", c.inp, c.dinp, N * C, NULL},
                  {"weight", c.w, c.dw, MM_OC * C, NULL},
                  {"bias", c.bias, c.dbias, MM_OC, NULL}};
    check_grads(&k, ps, 3, 1e-2f, FD_TOL);

    /* NULL outputs are skipped and leave the others unchanged */
    float dw2[MM_OC * C] = {0};
    ts_cpu_matmul_backward(NULL, dw2, NULL, c.r, c.inp, c.w, N, C, MM_OC);
    memset(c.dw, 0, sizeof c.dw);
    mm_backward(&c);
    expect(memcmp(dw2, c.dw, sizeof dw2) == 0 ? 1 : 0,
           "dweight alone equals dweight with dinp, dbias", 0, 0);
    test_matmul_wide();
}

/* --- embedding ----------------------------------------------------------- */

enum { EMB_V = 6, EMB_MAXT = 9, EMB_POS0 = 3 };
typedef struct {
    int32_t tok[N];
    float wte[EMB_V * C], wpe[EMB_MAXT * C], out[N * C], r[N * C];
    float dwte[EMB_V * C], dwpe[EMB_MAXT * C];
} emb_ctx;

static double emb_loss(void *p) {
    emb_ctx *c = p;
    ts_cpu_embedding_forward(c->out, c->tok, c->wte, c->wpe, B, T, C, EMB_POS0);
    return dot_r(c->out, c->r, N * C);
}
static void emb_backward(void *p) {
    emb_ctx *c = p;
    ts_cpu_embedding_backward(c->dwte, c->dwpe, c->r, c->tok, B, T, C, EMB_POS0);
}

static void test_embedding(void) {
    static emb_ctx c;
    /* token 1 repeats within and across rows; token 5 never occurs */
    const int32_t tok[N] = {1, 0, 1, 3, 4, 2, 1, 1, 0, 3};
    memcpy(c.tok, tok, sizeof tok);
    fill(c.wte, EMB_V * C, 1), fill(c.wpe, EMB_MAXT * C, 1), fill(c.r, N * C, 1);
    double ref[N * C];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < C; i++)
                ref[(b * T + t) * C + i] =
                    (double)c.wte[tok[b * T + t] * C + i] + c.wpe[(EMB_POS0 + t) * C + i];
    emb_loss(&c);
    double e = max_err(c.out, ref, N * C);
    expect(e <= 1e-7, "forward vs double reference", e, 1e-7);
    kernel k = {emb_loss, emb_backward, &c};
    param ps[] = {{"wte", c.wte, c.dwte, EMB_V * C, NULL},
                  {"wpe", c.wpe, c.dwpe, EMB_MAXT * C, NULL}};
    check_grads(&k, ps, 2, 1e-2f, FD_TOL);
}

/* --- layernorm ----------------------------------------------------------- */

typedef struct {
    float inp[N * C], w[C], bias[C], out[N * C], mean[N], rstd[N], r[N * C];
    float dinp[N * C], dw[C], dbias[C];
} ln_ctx;

static double ln_loss(void *p) {
    ln_ctx *c = p;
    ts_cpu_layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->bias, N, C);
    return dot_r(c->out, c->r, N * C);
}
static void ln_backward(void *p) {
    ln_ctx *c = p;
    ln_loss(c);
    ts_cpu_layernorm_backward(c->dinp, c->dw, c->dbias, c->r, c->inp, c->w, c->mean, c->rstd, N, C);
}

static void test_layernorm(void) {
    static ln_ctx c;
    fill(c.inp, N * C, 2), fill(c.w, C, 1), fill(c.bias, C, 1), fill(c.r, N * C, 1);
    for (int i = 0; i < N * C; i++)
        c.inp[i] += 0.5f; /* nonzero mean */
    double ref[N * C], refm[N], refr[N];
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int i = 0; i < C; i++)
            m += c.inp[n * C + i];
        m /= C;
        for (int i = 0; i < C; i++)
            v += (c.inp[n * C + i] - m) * (c.inp[n * C + i] - m);
        double r = 1.0 / sqrt(v / C + 1e-5);
        for (int i = 0; i < C; i++)
            ref[n * C + i] = (c.inp[n * C + i] - m) * r * c.w[i] + c.bias[i];
        refm[n] = m, refr[n] = r;
    }
    ln_loss(&c);
    double e = max_err(c.out, ref, N * C);
    expect(e <= 1e-6, "forward vs double reference", e, 1e-6);
    e = fmax(max_err(c.mean, refm, N), max_err(c.rstd, refr, N));
    expect(e <= 1e-6, "saved mean and rstd vs double reference", e, 1e-6);
    kernel k = {ln_loss, ln_backward, &c};
    param ps[] = {{"inp", c.inp, c.dinp, N * C, NULL},
                  {"weight", c.w, c.dw, C, NULL},
                  {"bias", c.bias, c.dbias, C, NULL}};
    check_grads(&k, ps, 3, 1e-2f, FD_TOL);
}

/* --- gelu ------------------------------------------------------------------ */

enum { GELU_N = 41 };
typedef struct {
    float inp[GELU_N], out[GELU_N], r[GELU_N], dinp[GELU_N];
} gelu_ctx;

static double gelu_loss(void *p) {
    gelu_ctx *c = p;
    ts_cpu_gelu_forward(c->out, c->inp, GELU_N);
    return dot_r(c->out, c->r, GELU_N);
}
static void gelu_backward(void *p) {
    gelu_ctx *c = p;
    ts_cpu_gelu_backward(c->dinp, c->inp, c->r, GELU_N);
}

static double gelu_ref(double x) {
    return 0.5 * x *
           (1.0 + tanh(0.79788456080286535588 /* sqrt(2/pi) */ * (x + 0.044715 * x * x * x)));
}

static void test_gelu(void) {
    /* forward over a wide range, including where tanh saturates */
    enum { M = 4001 };
    static float x[M], y[M];
    static double ref[M];
    for (int i = 0; i < M; i++)
        x[i] = -20.0f + 40.0f * (float)i / (M - 1);
    x[0] = -1e30f, x[M - 1] = 1e30f;
    ts_cpu_gelu_forward(y, x, M);
    double e = 0;
    for (int i = 0; i < M; i++) {
        ref[i] = gelu_ref(x[i]);
        e = fmax(e, fabs(y[i] - ref[i]) / (1.0 + fabs(ref[i])));
    }
    expect(e <= 1e-6, "forward on [-20, 20] and +-1e30 vs double", e, 1e-6);

    static gelu_ctx c;
    fill(c.inp, GELU_N, 4), fill(c.r, GELU_N, 1);
    kernel k = {gelu_loss, gelu_backward, &c};
    param ps[] = {{"inp", c.inp, c.dinp, GELU_N, NULL}};
    check_grads(&k, ps, 1, 1e-2f, FD_TOL);
}

/* --- attention ------------------------------------------------------------- */

typedef struct {
    float qkv[N * 3 * C], out[N * C], att[B * NH * T * T], r[N * C];
    float dqkv[N * 3 * C], scratch[B * NH * T * T];
} att_ctx;

static double att_loss(void *p) {
    att_ctx *c = p;
    ts_cpu_attention_forward(c->out, c->att, c->qkv, B, T, C, NH);
    return dot_r(c->out, c->r, N * C);
}
static void att_backward(void *p) {
    att_ctx *c = p;
    att_loss(c);
    ts_cpu_attention_backward(c->dqkv, c->scratch, c->r, c->qkv, c->att, B, T, C, NH);
}

static void test_attention(void) {
    static att_ctx c;
    fill(c.qkv, N * 3 * C, 1.5f), fill(c.r, N * C, 1);
    for (int i = 0; i < B * NH * T * T; i++)
        c.att[i] = NAN; /* must be written */
    att_loss(&c);
    int hs = C / NH;
    double ref_out[N * C], ref_att[B * NH * T * T];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                double s[T], mx = -1e300, sum = 0;
                const float *q = c.qkv + (b * T + t) * 3 * C + h * hs;
                for (int u = 0; u <= t; u++) {
                    const float *kk = c.qkv + (b * T + u) * 3 * C + C + h * hs;
                    s[u] = 0;
                    for (int i = 0; i < hs; i++)
                        s[u] += (double)q[i] * kk[i];
                    s[u] /= sqrt((double)hs);
                    mx = fmax(mx, s[u]);
                }
                for (int u = 0; u <= t; u++)
                    sum += s[u] = exp(s[u] - mx);
                double *a = ref_att + ((b * NH + h) * T + t) * T;
                for (int u = 0; u < T; u++)
                    a[u] = u <= t ? s[u] / sum : 0.0;
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int u = 0; u <= t; u++)
                        o += a[u] * c.qkv[(b * T + u) * 3 * C + 2 * C + h * hs + i];
                    ref_out[(b * T + t) * C + h * hs + i] = o;
                }
            }
    double e = max_err(c.out, ref_out, N * C);
    expect(e <= 1e-6, "forward out vs double reference", e, 1e-6);
    e = max_err(c.att, ref_att, B * NH * T * T);
    expect(e <= 1e-6, "forward att vs double reference", e, 1e-6);
    int causal = 1;
    for (int bh = 0; bh < B * NH; bh++)
        for (int t = 0; t < T; t++)
            for (int u = t + 1; u < T; u++)
                causal &= c.att[(bh * T + t) * T + u] == 0.0f;
    expect(causal, "att is exactly 0 past the diagonal", 0, 0);

    kernel k = {att_loss, att_backward, &c};
    param ps[] = {{"qkv", c.qkv, c.dqkv, N * 3 * C, NULL}};
    check_grads(&k, ps, 1, 1e-2f, FD_TOL);
}

/* --- attention without its probabilities (selective recomputation) --------- */

/* forward_unsaved gives forward's out, and backward_recompute backward's
 * dqkv (+=), bit for bit: T below, at and not a multiple of the 64 rows of
 * a block, on 1 and 3 threads; the recomputing pair touches no scratch
 * beyond ts_cpu_attention_recompute_floats. */
static void test_attention_recompute(void) {
    int saved = ts_cpu_get_threads();
    const int shapes[][4] = {{2, 32, 16, 2}, {1, 64, 24, 3}, {2, 100, 16, 2}, {1, 200, 32, 4}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        int RB = shapes[i][0], RT = shapes[i][1], RC = shapes[i][2], RH = shapes[i][3];
        size_t n = (size_t)RB * RT, tt = (size_t)RB * RH * RT * RT;
        size_t sf = ts_cpu_attention_recompute_floats(RB, RH, RT);
        float *qkv = falloc(n * 3 * RC), *dout = falloc(n * RC), *att = falloc(tt);
        float *scratch = falloc(tt), *out = falloc(n * RC), *out2 = falloc(n * RC);
        float *dq = falloc(n * 3 * RC), *dq2 = falloc(n * 3 * RC), *rs = falloc(sf + 16);
        fill(qkv, n * 3 * RC, 2.0f), fill(dout, n * RC, 1.0f);
        for (int threads = 1; threads <= 3; threads += 2) {
            ts_cpu_set_threads(threads);
            fill(dq, n * 3 * RC, 0.5f);
            memcpy(dq2, dq, n * 3 * RC * sizeof *dq);
            for (size_t k = 0; k < sf + 16; k++)
                rs[k] = NAN; /* written before read; the guard after it untouched */
            ts_cpu_attention_forward(out, att, qkv, RB, RT, RC, RH);
            ts_cpu_attention_backward(dq, scratch, dout, qkv, att, RB, RT, RC, RH);
            ts_cpu_attention_forward_unsaved(out2, rs, qkv, RB, RT, RC, RH);
            ts_cpu_attention_backward_recompute(dq2, rs, dout, qkv, RB, RT, RC, RH);
            int guard = 1;
            for (size_t k = sf; k < sf + 16; k++)
                guard &= isnan(rs[k]);
            char what[160];
            snprintf(what, sizeof what, "B %d T %d C %d NH %d, %d thread%s: out, dqkv (+=) equal",
                     RB, RT, RC, RH, threads, threads > 1 ? "s" : "");
            expect(!memcmp(out, out2, n * RC * sizeof *out) &&
                       !memcmp(dq, dq2, n * 3 * RC * sizeof *dq) && guard,
                   what, 0, 0);
        }
        free(qkv), free(dout), free(att), free(scratch), free(out), free(out2);
        free(dq), free(dq2), free(rs);
    }
    ts_cpu_set_threads(saved);
}

/* --- block attention (context parallelism) ------------------------------------ */

/* The whole causal attention of qkv (nB, nT, 3nC) as the block kernels must
 * reproduce it: out, dqkv (+= onto g0) from ts_cpu_attention_*, and lse in
 * double. */
typedef struct {
    int nB, nT, nC, nH;
    float *qkv, *dout, *g0, *out, *lse, *dqkv;
} blk_ref;

static void blk_ref_init(blk_ref *r, int nB, int nT, int nC, int nH) {
    size_t nqkv = (size_t)nB * nT * 3 * nC, nout = (size_t)nB * nT * nC;
    size_t natt = (size_t)nB * nH * nT * nT;
    int hs = nC / nH;
    *r = (blk_ref){.nB = nB, .nT = nT, .nC = nC, .nH = nH};
    r->qkv = falloc(nqkv), r->g0 = falloc(nqkv), r->dqkv = falloc(nqkv);
    r->dout = falloc(nout), r->out = falloc(nout), r->lse = falloc((size_t)nB * nH * nT);
    fill(r->qkv, nqkv, 1.5f), fill(r->dout, nout, 1), fill(r->g0, nqkv, 1);
    float *att = falloc(natt), *scratch = falloc(natt);
    ts_cpu_attention_forward(r->out, att, r->qkv, nB, nT, nC, nH);
    memcpy(r->dqkv, r->g0, nqkv * sizeof(float));
    ts_cpu_attention_backward(r->dqkv, scratch, r->dout, r->qkv, att, nB, nT, nC, nH);
    for (int b = 0; b < nB; b++)
        for (int h = 0; h < nH; h++)
            for (int t = 0; t < nT; t++) {
                const float *q = r->qkv + ((size_t)b * nT + t) * 3 * nC + h * hs;
                double mx = -INFINITY, sum = 0.0, *s = malloc((size_t)(t + 1) * sizeof *s);
                for (int u = 0; u <= t; u++) {
                    const float *k = r->qkv + ((size_t)b * nT + u) * 3 * nC + nC + h * hs;
                    s[u] = 0.0;
                    for (int i = 0; i < hs; i++)
                        s[u] += (double)q[i] * k[i];
                    s[u] /= sqrt((double)hs);
                    mx = fmax(mx, s[u]);
                }
                for (int u = 0; u <= t; u++)
                    sum += exp(s[u] - mx);
                r->lse[((size_t)b * nH + h) * nT + t] = (float)(mx + log(sum));
                free(s);
            }
    free(att), free(scratch);
}

static void blk_ref_free(blk_ref *r) {
    free(r->qkv), free(r->dout), free(r->g0), free(r->out), free(r->lse), free(r->dqkv);
}

/* (a) One block over the whole sequence (Tq = Tk = T, offset 0), q, k, v
 * inside qkv (qs = kvs = 3C, os = C): the whole attention's out and dqkv,
 * and lse against double; the backward twice gives the same bits. */
static void block_whole_case(int nB, int nT, int nC, int nH) {
    printf(" one block, B=%d T=%d C=%d NH=%d\n", nB, nT, nC, nH);
    blk_ref r;
    blk_ref_init(&r, nB, nT, nC, nH);
    size_t nqkv = (size_t)nB * nT * 3 * nC, nout = (size_t)nB * nT * nC,
           nlse = (size_t)nB * nH * nT;
    float *out = falloc(nout), *lse = falloc(nlse), *dqkv = falloc(nqkv), *d2 = falloc(nqkv);
    for (size_t i = 0; i < nout; i++)
        out[i] = NAN; /* must be written */
    int s3 = 3 * nC;
    ts_cpu_attention_block_forward(out, lse, r.qkv, r.qkv + nC, r.qkv + 2 * nC, nB, nT, nT, nC, nH,
                                   s3, s3, nC, 0);
    double e = max_err_f(out, r.out, nout);
    expect(e <= 1e-6, "out vs ts_cpu_attention_forward", e, 1e-6);
    e = max_err_f(lse, r.lse, nlse);
    expect(e <= 1e-6, "lse vs double reference", e, 1e-6);
    memcpy(dqkv, r.g0, nqkv * sizeof(float));
    ts_cpu_attention_block_backward(dqkv, dqkv + nC, dqkv + 2 * nC, r.qkv, r.qkv + nC,
                                    r.qkv + 2 * nC, out, r.dout, lse, nB, nT, nT, nC, nH, s3, s3,
                                    nC, 0);
    e = max_err_f(dqkv, r.dqkv, nqkv);
    expect(e <= 1e-6, "dqkv (+=) vs ts_cpu_attention_backward", e, 1e-6);
    memset(dqkv, 0, nqkv * sizeof(float)), memset(d2, 0, nqkv * sizeof(float));
    for (float *g = dqkv; g; g = g == dqkv ? d2 : NULL)
        ts_cpu_attention_block_backward(g, g + nC, g + 2 * nC, r.qkv, r.qkv + nC, r.qkv + 2 * nC,
                                        out, r.dout, lse, nB, nT, nT, nC, nH, s3, s3, nC, 0);
    expect(!memcmp(dqkv, d2, nqkv * sizeof(float)), "backward twice: same bits", 0, 0);
    free(out), free(lse), free(dqkv), free(d2);
    blk_ref_free(&r);
}

/* (b), (d) The sequence cut in nch chunks, chunk c being rows [at[c],
 * at[c+1]). Rank r of n holds the query chunks {r} (contiguous) or {r,
 * 2n-1-r} (mirrored, nch = 2n). Every query chunk meets every key chunk kc
 * with offset at[qc] - at[kc], the key chunks in ring order (the rank's own
 * first, then those of ranks r-1, r-2, ... modulo n), so that chunks past
 * the diagonal, fully masked, are merged in too. Chunks are packed as a
 * plugin holds them: q in its own (B, Tc, 3C) block (qs = 3C), k and v side
 * by side in (B, Tc, 2C) (kvs = 2C). The merged out and lse, and the
 * gradients summed over the blocks, are compared with the whole attention. */
static void block_split_case(int nranks, int mirrored, const int *at) {
    enum { SB = 2, SC = 16, SH = 2 };
    int nch = mirrored ? 2 * nranks : nranks, per = mirrored ? 2 : 1, ST = at[nch];
    printf(" %s split over %d ranks, chunks at", mirrored ? "mirrored" : "contiguous", nranks);
    for (int c = 0; c <= nch; c++)
        printf(" %d", at[c]);
    printf(", B=%d C=%d NH=%d\n", SB, SC, SH);
    blk_ref r;
    blk_ref_init(&r, SB, ST, SC, SH);
    size_t nqkv = (size_t)SB * ST * 3 * SC, nout = (size_t)SB * ST * SC,
           nlse = (size_t)SB * SH * ST;
    /* pools in chunk order: chunk c starts at SB * at[c] rows */
    float *q = falloc(nqkv), *dq = falloc(nqkv), *kv = falloc((size_t)SB * ST * 2 * SC),
          *dkv = falloc((size_t)SB * ST * 2 * SC), *out = falloc(nout), *lse = falloc(nlse),
          *dout = falloc(nout), *o2 = falloc(nout), *l2 = falloc(nlse);
#define CH(pool, c, width) ((pool) + (size_t)SB * at[c] * (width))
    for (int c = 0; c < nch; c++)
        for (int b = 0; b < SB; b++)
            for (int i = 0; i < at[c + 1] - at[c]; i++) {
                size_t row = (size_t)b * ST + at[c] + i, lrow = (size_t)b * (at[c + 1] - at[c]) + i;
                const float *x = r.qkv + row * 3 * SC, *g = r.g0 + row * 3 * SC;
                memcpy(CH(q, c, 3 * SC) + lrow * 3 * SC, x, 3 * SC * sizeof(float));
                memcpy(CH(dq, c, 3 * SC) + lrow * 3 * SC, g, 3 * SC * sizeof(float));
                memcpy(CH(kv, c, 2 * SC) + lrow * 2 * SC, x + SC, 2 * SC * sizeof(float));
                memcpy(CH(dkv, c, 2 * SC) + lrow * 2 * SC, g + SC, 2 * SC * sizeof(float));
                memcpy(CH(dout, c, SC) + lrow * SC, r.dout + row * SC, SC * sizeof(float));
            }
    /* forward and merge, then the backward from the merged out and lse */
    for (int pass = 0; pass < 2; pass++)
        for (int rk = 0; rk < nranks; rk++)
            for (int a = 0; a < per; a++) {
                int qc = a ? nch - 1 - rk : rk, Tq = at[qc + 1] - at[qc];
                float *oq = CH(out, qc, SC), *lq = CH(lse, qc, SH);
                for (int step = 0; step < nranks; step++) {
                    int src = ((rk - step) % nranks + nranks) % nranks;
                    for (int a2 = 0; a2 < per; a2++) {
                        int kc = a2 ? nch - 1 - src : src, Tk = at[kc + 1] - at[kc];
                        int64_t off = at[qc] - at[kc];
                        const float *kk = CH(kv, kc, 2 * SC), *vv = kk + SC;
                        if (pass == 1)
                            ts_cpu_attention_block_backward(
                                CH(dq, qc, 3 * SC), CH(dkv, kc, 2 * SC), CH(dkv, kc, 2 * SC) + SC,
                                CH(q, qc, 3 * SC), kk, vv, oq, CH(dout, qc, SC), lq, SB, Tq, Tk, SC,
                                SH, 3 * SC, 2 * SC, SC, off);
                        else if (step == 0 && a2 == 0)
                            ts_cpu_attention_block_forward(oq, lq, CH(q, qc, 3 * SC), kk, vv, SB,
                                                           Tq, Tk, SC, SH, 3 * SC, 2 * SC, SC, off);
                        else {
                            ts_cpu_attention_block_forward(o2, l2, CH(q, qc, 3 * SC), kk, vv, SB,
                                                           Tq, Tk, SC, SH, 3 * SC, 2 * SC, SC, off);
                            ts_cpu_attention_block_merge(oq, lq, o2, l2, SB, Tq, SC, SH, SC);
                        }
                    }
                }
            }
    /* unpack into whole-sequence order and compare */
    float *fo = falloc(nout), *fl = falloc(nlse), *fd = falloc(nqkv);
    for (int c = 0; c < nch; c++) {
        int Tc = at[c + 1] - at[c];
        for (int b = 0; b < SB; b++) {
            for (int i = 0; i < Tc; i++) {
                size_t row = (size_t)b * ST + at[c] + i, lrow = (size_t)b * Tc + i;
                memcpy(fo + row * SC, CH(out, c, SC) + lrow * SC, SC * sizeof(float));
                memcpy(fd + row * 3 * SC, CH(dq, c, 3 * SC) + lrow * 3 * SC, SC * sizeof(float));
                memcpy(fd + row * 3 * SC + SC, CH(dkv, c, 2 * SC) + lrow * 2 * SC,
                       2 * SC * sizeof(float));
            }
            for (int h = 0; h < SH; h++)
                memcpy(fl + ((size_t)b * SH + h) * ST + at[c],
                       CH(lse, c, SH) + ((size_t)b * SH + h) * Tc, Tc * sizeof(float));
        }
    }
#undef CH
    double e = max_err_f(fo, r.out, nout);
    expect(e <= 1e-6, "merged out vs the whole attention", e, 1e-6);
    e = max_err_f(fl, r.lse, nlse);
    expect(e <= 1e-6, "merged lse vs double reference", e, 1e-6);
    e = max_err_f(fd, r.dqkv, nqkv);
    expect(e <= 1e-6, "dq, dk, dv summed over blocks (+=) vs whole", e, 1e-6);
    free(q), free(kv), free(dq), free(dkv), free(out), free(lse), free(dout), free(o2), free(l2);
    free(fo), free(fl), free(fd);
    blk_ref_free(&r);
}

/* (c) Rows that see no key: out 0 and lse -inf, over a NaN-poisoned out; the
 * merge takes the other side exactly and never makes NaN; the backward adds
 * nothing for them. An offset beyond the block masks nothing. */
static void block_masked_case(void) {
    enum { MB = 2, MT = 12, MC = 8, MH = 2 };
    printf(" masked rows, B=%d T=%d C=%d NH=%d\n", MB, MT, MC, MH);
    size_t nq = (size_t)MB * MT * 3 * MC, no = (size_t)MB * MT * MC, nl = (size_t)MB * MH * MT;
    float *qkv = falloc(nq), *dout = falloc(no), *o = falloc(no), *l = falloc(nl), *o2 = falloc(no),
          *l2 = falloc(nl), *o3 = falloc(no), *l3 = falloc(nl), *g = falloc(nq), *g0 = falloc(nq);
    fill(qkv, nq, 1.5f), fill(dout, no, 1), fill(g0, nq, 1);
    const float *q = qkv, *k = qkv + MC, *v = qkv + 2 * MC;
    int s3 = 3 * MC, hs = MC / MH, half = MT / 2;
    /* offset -half: rows i < half see nothing, the rest see j <= i - half */
    for (size_t i = 0; i < no; i++)
        o[i] = NAN;
    ts_cpu_attention_block_forward(o, l, q, k, v, MB, MT, MT, MC, MH, s3, s3, MC, -half);
    int ok = 1;
    for (int b = 0; b < MB; b++)
        for (int i = 0; i < MT; i++)
            for (int h = 0; h < MH; h++) {
                float li = l[((size_t)b * MH + h) * MT + i];
                ok &= i < half ? li == -INFINITY : isfinite(li);
                for (int d = 0; d < hs; d++) {
                    float x = o[((size_t)b * MT + i) * MC + h * hs + d];
                    ok &= i < half ? x == 0.0f : isfinite(x);
                }
            }
    expect(ok, "offset -T/2: first rows out 0, lse -inf", 0, 0);
    /* offset -T and INT64_MIN: everything masked */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < no; i++)
            o3[i] = NAN;
        ts_cpu_attention_block_forward(o3, l3, q, k, v, MB, MT, MT, MC, MH, s3, s3, MC,
                                       pass ? INT64_MIN : -MT);
        ok = 1;
        for (size_t i = 0; i < no; i++)
            ok &= o3[i] == 0.0f;
        for (size_t i = 0; i < nl; i++)
            ok &= l3[i] == -INFINITY;
        expect(ok, pass ? "offset INT64_MIN: all masked" : "offset -T: all out 0, lse -inf", 0, 0);
    }
    /* INT64_MAX and T - 1: no mask, the same bits */
    ts_cpu_attention_block_forward(o2, l2, q, k, v, MB, MT, MT, MC, MH, s3, s3, MC, INT64_MAX);
    ts_cpu_attention_block_forward(o3, l3, q, k, v, MB, MT, MT, MC, MH, s3, s3, MC, MT - 1);
    expect(!memcmp(o2, o3, no * sizeof(float)) && !memcmp(l2, l3, nl * sizeof(float)),
           "offset INT64_MAX equals T-1 (no mask)", 0, 0);
    /* merge: (all masked) + (no mask) takes the other side bit for bit ... */
    float *m = falloc(no), *ml = falloc(nl);
    ts_cpu_attention_block_forward(m, ml, q, k, v, MB, MT, MT, MC, MH, s3, s3, MC, -MT);
    ts_cpu_attention_block_merge(m, ml, o2, l2, MB, MT, MC, MH, MC);
    expect(!memcmp(m, o2, no * sizeof(float)) && !memcmp(ml, l2, nl * sizeof(float)),
           "merge -inf side with a partial: the partial exactly", 0, 0);
    /* ... (no mask) + (all masked) leaves it unchanged ... */
    ts_cpu_attention_block_forward(o3, l3, q, k, v, MB, MT, MT, MC, MH, s3, s3, MC, -MT);
    ts_cpu_attention_block_merge(m, ml, o3, l3, MB, MT, MC, MH, MC);
    expect(!memcmp(m, o2, no * sizeof(float)) && !memcmp(ml, l2, nl * sizeof(float)),
           "merge a -inf partial: unchanged", 0, 0);
    /* ... both masked: out 0, lse -inf, no NaN; and the half-masked o, l
     * merged with a masked partial keeps its -inf rows at 0 */
    ts_cpu_attention_block_forward(m, ml, q, k, v, MB, MT, MT, MC, MH, s3, s3, MC, -MT);
    ts_cpu_attention_block_merge(m, ml, o3, l3, MB, MT, MC, MH, MC);
    ts_cpu_attention_block_merge(o, l, o3, l3, MB, MT, MC, MH, MC);
    ok = 1;
    for (size_t i = 0; i < no; i++)
        ok &= m[i] == 0.0f && !isnan(o[i]);
    for (size_t i = 0; i < nl; i++)
        ok &= ml[i] == -INFINITY && !isnan(l[i]);
    expect(ok, "merge both -inf: out 0, lse -inf, no NaN", 0, 0);
    /* backward: a fully masked block adds nothing; nor do lse = -inf rows,
     * even against an unmasked block */
    memcpy(g, g0, nq * sizeof(float));
    ts_cpu_attention_block_backward(g, g + MC, g + 2 * MC, q, k, v, o2, dout, l2, MB, MT, MT, MC,
                                    MH, s3, s3, MC, -MT);
    ts_cpu_attention_block_backward(g, g + MC, g + 2 * MC, q, k, v, m, dout, ml, MB, MT, MT, MC, MH,
                                    s3, s3, MC, INT64_MAX);
    expect(!memcmp(g, g0, nq * sizeof(float)), "backward of masked rows or blocks adds nothing", 0,
           0);
    free(qkv), free(dout), free(o), free(l), free(o2), free(l2), free(o3), free(l3), free(g);
    free(g0), free(m), free(ml);
}

static void test_attention_block(void) {
    block_whole_case(B, T, C, NH);
    block_whole_case(2, 150, 24, 3); /* several 64-key tiles: the online rescale */
    block_whole_case(1, 1, 8, 1);
    static const int two[] = {0, 24, 48}, three[] = {0, 16, 32, 48}, four[] = {0, 12, 24, 36, 48};
    static const int uneven[] = {0, 7, 30, 48}, mirror2[] = {0, 12, 24, 36, 48};
    static const int mirror3[] = {0, 8, 16, 24, 32, 40, 48};
    block_split_case(2, 0, two);
    block_split_case(3, 0, three);
    block_split_case(4, 0, four);
    block_split_case(3, 0, uneven); /* Tq != Tk, offsets of every sign */
    block_split_case(2, 1, mirror2);
    block_split_case(3, 1, mirror3);
    block_masked_case();
}

/* --- residual -------------------------------------------------------------- */

enum { RES_N = 37 };
typedef struct {
    float a[RES_N], b[RES_N], out[RES_N], r[RES_N], da[RES_N], db[RES_N];
} res_ctx;

static double res_loss(void *p) {
    res_ctx *c = p;
    ts_cpu_residual_forward(c->out, c->a, c->b, RES_N);
    return dot_r(c->out, c->r, RES_N);
}
static void res_backward(void *p) {
    res_ctx *c = p;
    ts_cpu_residual_backward(c->da, c->db, c->r, RES_N);
}

static void test_residual(void) {
    static res_ctx c;
    fill(c.a, RES_N, 1), fill(c.b, RES_N, 1), fill(c.r, RES_N, 1);
    res_loss(&c);
    double ref[RES_N];
    for (int i = 0; i < RES_N; i++)
        ref[i] = (double)c.a[i] + c.b[i];
    double e = max_err(c.out, ref, RES_N);
    expect(e <= 1e-7, "forward vs double reference", e, 1e-7);
    kernel k = {res_loss, res_backward, &c};
    param ps[] = {{"a", c.a, c.da, RES_N, NULL}, {"b", c.b, c.db, RES_N, NULL}};
    check_grads(&k, ps, 2, 1e-2f, FD_TOL);
    /* one side NULL */
    float da[RES_N] = {0};
    ts_cpu_residual_backward(da, NULL, c.r, RES_N);
    expect(memcmp(da, c.r, sizeof da) == 0, "da alone (db NULL) equals dout", 0, 0);
}

/* --- crossentropy ---------------------------------------------------------- */

enum { CE_N = 6, CE_V = 7, CE_VP = 12 };
typedef struct {
    float logits[CE_N * CE_VP], losses[CE_N], lse[CE_N], dlogits[CE_N * CE_VP];
    int32_t tgt[CE_N];
    float dloss;
} ce_ctx;

static double ce_loss(void *p) {
    ce_ctx *c = p;
    ts_cpu_crossentropy_forward(c->losses, c->lse, c->logits, c->tgt, CE_N, CE_V, CE_VP);
    double s = 0;
    for (int n = 0; n < CE_N; n++)
        s += (double)c->losses[n] * c->dloss;
    return s;
}

/* Reference loss and gradient of one row in double over the real columns. */
static void ce_ref(double *loss, double *grad, const float *x, int tgt, double dloss, int V) {
    double mx = -1e300, s = 0;
    for (int i = 0; i < V; i++)
        mx = fmax(mx, x[i]);
    for (int i = 0; i < V; i++)
        s += exp(x[i] - mx);
    double lse = mx + log(s);
    *loss = tgt < 0 ? 0.0 : lse - x[tgt];
    for (int i = 0; i < V; i++)
        grad[i] = tgt < 0 ? 0.0 : (exp(x[i] - lse) - (i == tgt)) * dloss;
}

/* Forward and backward on (n, V, Vp) against ce_ref, huge padding, one
 * masked row (row 1), and in place against out of place. */
static void ce_compare(int n, int V, int Vp, float scale, const char *tag) {
    float *x = falloc((size_t)n * Vp), *d = falloc((size_t)n * Vp);
    float *loss = falloc(n), *lse = falloc(n);
    int32_t *tgt = malloc((size_t)n * sizeof *tgt);
    double *rl = malloc((size_t)n * sizeof *rl), *rg = malloc((size_t)V * sizeof *rg);
    for (int r = 0; r < n; r++) {
        fill(x + (size_t)r * Vp, V, scale);
        for (int i = V; i < Vp; i++)
            x[(size_t)r * Vp + i] = 1e30f; /* huge pad */
        tgt[r] = r == 1 ? -1 : (int32_t)((r * 7919u) % (unsigned)V);
    }
    const float dloss = 1.0f / (float)(n - 1);
    ts_cpu_crossentropy_forward(loss, lse, x, tgt, n, V, Vp);
    for (int i = 0; i < n * Vp; i++)
        d[i] = NAN; /* all of it must be written */
    ts_cpu_crossentropy_backward(d, x, lse, tgt, dloss, n, V, Vp);
    double el = 0, eg = 0;
    int pad_zero = 1, masked_zero = loss[1] == 0.0f;
    for (int r = 0; r < n; r++) {
        ce_ref(&rl[r], rg, x + (size_t)r * Vp, tgt[r], dloss, V);
        el = fmax(el, fabs(loss[r] - rl[r]) / (1 + fabs(rl[r])));
        for (int i = 0; i < V; i++)
            eg = fmax(eg, fabs(d[(size_t)r * Vp + i] - rg[i]));
        for (int i = V; i < Vp; i++)
            pad_zero &= d[(size_t)r * Vp + i] == 0.0f;
        if (r == 1)
            for (int i = 0; i < Vp; i++)
                masked_zero &= d[(size_t)r * Vp + i] == 0.0f;
    }
    char what[96];
    snprintf(what, sizeof what, "%s loss vs double (pad = 1e30)", tag);
    expect(el <= 2e-6, what, el, 2e-6);
    snprintf(what, sizeof what, "%s dlogits vs double (abs)", tag);
    expect(eg * n <= 1e-6, what, eg * n, 1e-6);
    snprintf(what, sizeof what, "%s padded columns get exactly 0", tag);
    expect(pad_zero, what, 0, 0);
    snprintf(what, sizeof what, "%s masked row: loss 0, dlogits 0", tag);
    expect(masked_zero, what, 0, 0);
    /* in place gives the same bits */
    ts_cpu_crossentropy_backward(x, x, lse, tgt, dloss, n, V, Vp);
    snprintf(what, sizeof what, "%s in place equals out of place", tag);
    expect(memcmp(x, d, (size_t)n * Vp * sizeof *x) == 0, what, 0, 0);
    free(x), free(d), free(loss), free(lse), free(tgt), free(rl), free(rg);
}

static void test_crossentropy(void) {
    ce_compare(CE_N, CE_V, CE_VP, 3.0f, "V=7 Vp=12:");
    ce_compare(16, 5000, 5056, 8.0f, "V=5000 Vp=5056:");

    /* finite differences of dloss * sum(losses) over the real columns */
    static ce_ctx c;
    static unsigned char pad[CE_N * CE_VP];
    for (int n = 0; n < CE_N; n++) {
        fill(c.logits + n * CE_VP, CE_V, 2);
        for (int i = CE_V; i < CE_VP; i++) {
            c.logits[n * CE_VP + i] = 1e30f;
            pad[n * CE_VP + i] = 1;
        }
        c.tgt[n] = n == 2 ? -1 : (n * 3) % CE_V;
    }
    c.dloss = 0.37f;
    ce_loss(&c);
    ts_cpu_crossentropy_backward(c.dlogits, c.logits, c.lse, c.tgt, c.dloss, CE_N, CE_V, CE_VP);
    param q = {"logits", c.logits, c.dlogits, CE_N * CE_VP, pad};
    double num = 0, den = 0;
    const float eps = 1e-2f;
    for (size_t i = 0; i < q.n; i++) {
        if (pad[i]) continue;
        float x0 = q.x[i], xp = x0 + eps, xm = x0 - eps;
        q.x[i] = xp;
        double lp = ce_loss(&c);
        q.x[i] = xm;
        double lm = ce_loss(&c);
        q.x[i] = x0;
        double fd = (lp - lm) / ((double)xp - xm);
        num += (fd - q.g[i]) * (fd - q.g[i]);
        den += fd * fd;
    }
    expect(sqrt(num / den) <= FD_TOL, "dlogits vs finite differences (eps 1e-2)", sqrt(num / den),
           FD_TOL);
    /* writes (=): a second call from garbage gives the same bits */
    ce_loss(&c); /* lse of the unperturbed logits again */
    float again[CE_N * CE_VP];
    for (int i = 0; i < CE_N * CE_VP; i++)
        again[i] = 123.0f;
    ts_cpu_crossentropy_backward(again, c.logits, c.lse, c.tgt, c.dloss, CE_N, CE_V, CE_VP);
    expect(memcmp(again, c.dlogits, sizeof again) == 0, "backward writes (=), not accumulates", 0,
           0);
}

/* Vocabulary-parallel cross-entropy: the logits of N rows over Vp = 24
 * padded columns (V = 19 real) cut into 3 shards of 8, reduced by hand as the
 * model reduces them across tp (MAX, then SUM), give the losses and, shard by
 * shard, the gradient of the full-vocabulary kernels. Tolerance 1e-6: only
 * the order of the exp sums differs. */
static void test_crossentropy_shards(void) {
    enum { N = 5, V = 19, VP = 24, S = 3, VL = VP / S };
    float *x = falloc(N * VP), *losses = falloc(N), *lse = falloc(N), *d = falloc(N * VP);
    fill(x, N * VP, 3.0f);
    int32_t tg[N] = {0, 18, 7, -1, 12};
    ts_cpu_crossentropy_forward(losses, lse, x, tg, N, V, VP);
    ts_cpu_crossentropy_backward(d, x, lse, tg, 0.25f, N, V, VP);
    float shard[S][N * VL], mx[S][N], st[S][N * 2], gmax[N], glse[N];
    for (int s = 0; s < S; s++) {
        for (int n = 0; n < N; n++)
            memcpy(shard[s] + n * VL, x + n * VP + s * VL, VL * sizeof(float));
        int vloc = V - s * VL < 0 ? 0 : (V - s * VL > VL ? VL : V - s * VL);
        ts_cpu_ce_shard_max(mx[s], shard[s], N, vloc, VL);
    }
    for (int n = 0; n < N; n++)
        gmax[n] = fmaxf(fmaxf(mx[0][n], mx[1][n]), mx[2][n]);
    for (int s = 0; s < S; s++) {
        int vloc = V - s * VL > VL ? VL : V - s * VL;
        ts_cpu_ce_shard_sumexp(st[s], shard[s], gmax, tg, s * VL, N, vloc, VL);
    }
    double worst = 0.0;
    for (int n = 0; n < N; n++) {
        float sum = st[0][2 * n] + st[1][2 * n] + st[2][2 * n];
        float tl = st[0][2 * n + 1] + st[1][2 * n + 1] + st[2][2 * n + 1];
        glse[n] = gmax[n] + logf(sum);
        float loss = tg[n] < 0 ? 0.0f : glse[n] - tl;
        worst = fmax(worst, fabs(loss - losses[n]));
    }
    expect(worst < 1e-6, "sharded loss vs full", worst, 1e-6);
    worst = 0.0;
    for (int s = 0; s < S; s++) {
        int vloc = V - s * VL > VL ? VL : V - s * VL;
        ts_cpu_ce_shard_backward(shard[s], shard[s], glse, tg, 0.25f, s * VL, N, vloc, VL);
        for (int n = 0; n < N; n++)
            for (int c = 0; c < VL; c++)
                worst = fmax(worst, fabs(shard[s][n * VL + c] - d[n * VP + s * VL + c]));
    }
    expect(worst < 1e-6, "sharded dlogits vs full (padding 0, one-hot on the owner)", worst, 1e-6);
    free(x);
    free(losses);
    free(lse);
    free(d);
}

/* The vocabulary-parallel embedding pieces: shards of wte looked up and
 * summed, plus positions, equal the fused kernel bit for bit; the shard
 * backward scatters into the right rows of each shard only. */
static void test_embedding_shards(void) {
    enum { B = 2, T = 5, C = 7, V = 10, S = 2, VL = V / S, MAXT = 8 };
    float *wte = falloc(V * C), *wpe = falloc(MAXT * C), *ref = falloc(B * T * C);
    float *sum = falloc(B * T * C), *part = falloc(B * T * C), *dout = falloc(B * T * C);
    float *dwte = falloc(V * C), *dwte_ref = falloc(V * C), *dwpe = falloc(MAXT * C);
    float *dwpe_ref = falloc(MAXT * C);
    int32_t tok[B * T] = {0, 9, 4, 5, 5, 1, 2, 8, 3, 6};
    fill(wte, V * C, 1.0f);
    fill(wpe, MAXT * C, 1.0f);
    fill(dout, B * T * C, 1.0f);
    ts_cpu_embedding_forward(ref, tok, wte, wpe, B, T, C, 2);
    memset(sum, 0, B * T * C * sizeof(float));
    for (int s = 0; s < S; s++) {
        ts_cpu_embedding_shard_forward(part, tok, wte + s * VL * C, s * VL, VL, B * T, C);
        for (int i = 0; i < B * T * C; i++)
            sum[i] += part[i];
    }
    ts_cpu_position_forward(sum, wpe, B, T, C, 2);
    double worst = 0.0;
    for (int i = 0; i < B * T * C; i++)
        worst = fmax(worst, fabs(sum[i] - ref[i]));
    expect(worst == 0.0, "shards + positions == fused forward (exact)", worst, 0.0);
    memset(dwte_ref, 0, V * C * sizeof(float));
    memset(dwpe_ref, 0, MAXT * C * sizeof(float));
    memset(dwte, 0, V * C * sizeof(float));
    memset(dwpe, 0, MAXT * C * sizeof(float));
    ts_cpu_embedding_backward(dwte_ref, dwpe_ref, dout, tok, B, T, C, 2);
    for (int s = 0; s < S; s++)
        ts_cpu_embedding_shard_backward(dwte + s * VL * C, dout, tok, s * VL, VL, B * T, C);
    ts_cpu_position_backward(dwpe, dout, B, T, C, 2);
    worst = 0.0;
    for (int i = 0; i < V * C; i++)
        worst = fmax(worst, fabs(dwte[i] - dwte_ref[i]));
    for (int i = 0; i < MAXT * C; i++)
        worst = fmax(worst, fabs(dwpe[i] - dwpe_ref[i]));
    expect(worst == 0.0, "shard backward == fused backward (exact)", worst, 0.0);
    free(wte);
    free(wpe);
    free(ref);
    free(sum);
    free(part);
    free(dout);
    free(dwte);
    free(dwte_ref);
    free(dwpe);
    free(dwpe_ref);
}

/* --- adamw ----------------------------------------------------------------- */

/* The update against the formula in double; and, run beside it on a copy,
 * the update that zeroes the gradient as it reads it: the same bits, and the
 * gradient left 0 (untouched without zero_grad). */
static void test_adamw(void) {
    enum { AN = 1003 };
    static float p[AN], m[AN], v[AN], g[AN], g0[AN], pz[AN], mz[AN], vz[AN];
    static double rp[AN], rm[AN], rv[AN];
    fill(p, AN, 1);
    for (int i = 0; i < AN; i++)
        rp[i] = p[i], rm[i] = rv[i] = 0, m[i] = v[i] = 0;
    memcpy(pz, p, sizeof p), memcpy(mz, m, sizeof m), memcpy(vz, v, sizeof v);
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
    double ep = 0, emv = 0;
    int zeroed = 1, kept = 1;
    for (int t = 1; t <= 3; t++) {
        fill(g0, AN, t == 2 ? 1e-3f : 2.0f); /* a step where eps matters */
        memcpy(g, g0, sizeof g);
        ts_cpu_adamw(p, m, v, g, AN, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t,
                     (float)gs, 0);
        kept &= !memcmp(g, g0, sizeof g);
        ts_cpu_adamw(pz, mz, vz, g, AN, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, t,
                     (float)gs, 1);
        for (int i = 0; i < AN; i++)
            zeroed &= bits(g[i]) == 0;
        for (int i = 0; i < AN; i++) {
            double gi = g0[i] * gs;
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            double mh = rm[i] / (1 - pow(b1, t)), vh = rv[i] / (1 - pow(b2, t));
            rp[i] -= lr * (mh / (sqrt(vh) + eps) + wd * rp[i]);
        }
        double mm = 0, mv = 0, em = 0, ev = 0;
        for (int i = 0; i < AN; i++) {
            ep = fmax(ep, fabs(p[i] - rp[i]));
            em = fmax(em, fabs(m[i] - rm[i])), mm = fmax(mm, fabs(rm[i]));
            ev = fmax(ev, fabs(v[i] - rv[i])), mv = fmax(mv, fabs(rv[i]));
        }
        emv = fmax(emv, fmax(em / mm, ev / mv));
    }
    /* params are O(1) and move by lr = 1e-2 per step: float rounding ~1e-7 */
    expect(ep <= 1e-6, "params after 3 steps vs double formula (abs)", ep, 1e-6);
    expect(emv <= 1e-5, "moments after 3 steps vs double (max-relative)", emv, 1e-5);
    expect(kept, "without zero_grad the gradient is left as it was", 0, 0);
    expect(zeroed, "with zero_grad the gradient is left +0", 0, 0);
    expect(!memcmp(p, pz, sizeof p) && !memcmp(m, mz, sizeof m) && !memcmp(v, vz, sizeof v),
           "with zero_grad: the same params and moments, bit for bit", 0, 0);
}

/* --- sumsq and bf16 --------------------------------------------------------- */

static void test_reduce(void) {
    enum { SN = 100003 };
    float *x = falloc(SN);
    fill(x, SN, 3);
    double ref = 0;
    for (int i = 0; i < SN; i++)
        ref += (double)x[i] * x[i];
    double s = ts_cpu_sumsq(x, SN);
    expect(fabs(s - ref) / ref <= 1e-12, "sumsq vs double loop (rel)", fabs(s - ref) / ref, 1e-12);
    expect(ts_cpu_sumsq(x, 0) == 0.0, "sumsq of nothing is 0", 0, 0);

    /* bf16 rounding: nearest, ties to even, overflow to inf, NaN stays NaN */
    static const struct {
        uint32_t f;
        uint16_t h;
    } cases[] = {
        {0x3F800000u, 0x3F80},                        /* 1.0 exact */
        {0x3F808000u, 0x3F80},                        /* tie, even below */
        {0x3F818000u, 0x3F82},                        /* tie, even above */
        {0x3F808001u, 0x3F81},                        /* just above the tie */
        {0x3F807FFFu, 0x3F80},                        /* just below the tie */
        {0xBF808000u, 0xBF80},                        /* negative tie */
        {0xBF818000u, 0xBF82}, {0x7F800000u, 0x7F80}, /* inf */
        {0x7F7FFFFFu, 0x7F80},                        /* FLT_MAX rounds up to inf */
        {0x00000001u, 0x0000},                        /* smallest subnormal rounds to 0 */
        {0x80000000u, 0x8000},                        /* -0 */
    };
    enum { NC = sizeof cases / sizeof cases[0] };
    float in[NC + 1];
    uint16_t out[NC + 1];
    for (int i = 0; i < NC; i++)
        in[i] = from_bits(cases[i].f);
    in[NC] = from_bits(0x7FC00001u); /* NaN */
    ts_cpu_f32_to_bf16(out, in, NC + 1);
    int ok = 1;
    for (int i = 0; i < NC; i++)
        ok &= out[i] == cases[i].h;
    expect(ok, "f32_to_bf16: ties to even, inf, subnormal, -0", 0, 0);
    expect((out[NC] & 0x7F80) == 0x7F80 && (out[NC] & 0x7F), "f32_to_bf16: NaN stays NaN", 0, 0);
    ts_cpu_round_bf16(in, NC);
    ok = 1;
    for (int i = 0; i < NC; i++)
        ok &= bits(in[i]) == (uint32_t)cases[i].h << 16;
    expect(ok, "round_bf16 in place matches the table", 0, 0);

    /* round trip of every non-NaN bf16 value */
    static uint16_t all[65536], back[65536];
    static float f[65536];
    for (int i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    ts_cpu_bf16_to_f32(f, all, 65536);
    ts_cpu_f32_to_bf16(back, f, 65536);
    ok = 1;
    for (int i = 0; i < 65536; i++) {
        int nan = (i & 0x7F80) == 0x7F80 && (i & 0x7F);
        ok &= nan ? isnan(f[i]) && isnan(ts_bf16_to_f32(back[i])) : back[i] == all[i];
        ok &= bits(f[i]) == (uint32_t)i << 16;
    }
    expect(ok, "bf16 -> f32 -> bf16 round trip, all 65536", 0, 0);

    /* the parallel conversion equals the scalar one on a large array */
    uint16_t *h = malloc(SN * sizeof *h);
    ts_cpu_f32_to_bf16(h, x, SN);
    ts_cpu_round_bf16(x, SN);
    ok = 1;
    for (int i = 0; i < SN; i++)
        ok &= bits(x[i]) == (uint32_t)h[i] << 16;
    expect(ok, "round_bf16 equals f32_to_bf16 on 100003 values", 0, 0);
    free(h), free(x);
}

/* --- determinism ------------------------------------------------------------ */

static void test_determinism(void) {
    int ce_n = 64, V = 5000, Vp = 5056;
    float *x = falloc((size_t)ce_n * Vp), *d1 = falloc((size_t)ce_n * Vp),
          *d2 = falloc((size_t)ce_n * Vp), *l = falloc(ce_n), *lse = falloc(ce_n),
          *l2 = falloc(ce_n), *lse2 = falloc(ce_n);
    int32_t *tgt = malloc((size_t)ce_n * sizeof *tgt);
    fill(x, (size_t)ce_n * Vp, 5);
    for (int n = 0; n < ce_n; n++)
        tgt[n] = n % 9 == 0 ? -1 : (n * 131) % V;
    ts_cpu_crossentropy_forward(l, lse, x, tgt, ce_n, V, Vp);
    ts_cpu_crossentropy_backward(d1, x, lse, tgt, 0.01f, ce_n, V, Vp);
    ts_cpu_crossentropy_forward(l2, lse2, x, tgt, ce_n, V, Vp);
    ts_cpu_crossentropy_backward(d2, x, lse2, tgt, 0.01f, ce_n, V, Vp);
    int same = !memcmp(l, l2, ce_n * sizeof *l) && !memcmp(lse, lse2, ce_n * sizeof *l) &&
               !memcmp(d1, d2, (size_t)ce_n * Vp * sizeof *d1);
    expect(same, "crossentropy fwd+bwd twice: same bits", 0, 0);

    int ln_n = 256, lc = 768;
    float *inp = falloc((size_t)ln_n * lc), *dout = falloc((size_t)ln_n * lc),
          *out = falloc((size_t)ln_n * lc), *w = falloc(lc), *bb = falloc(lc), *mean = falloc(ln_n),
          *rstd = falloc(ln_n);
    float *g[2][3];
    fill(inp, (size_t)ln_n * lc, 2), fill(dout, (size_t)ln_n * lc, 1);
    fill(w, lc, 1), fill(bb, lc, 1);
    ts_cpu_layernorm_forward(out, mean, rstd, inp, w, bb, ln_n, lc);
    for (int r = 0; r < 2; r++) {
        g[r][0] = falloc((size_t)ln_n * lc), g[r][1] = falloc(lc), g[r][2] = falloc(lc);
        ts_cpu_layernorm_backward(g[r][0], g[r][1], g[r][2], dout, inp, w, mean, rstd, ln_n, lc);
    }
    same = !memcmp(g[0][0], g[1][0], (size_t)ln_n * lc * sizeof(float)) &&
           !memcmp(g[0][1], g[1][1], lc * sizeof(float)) &&
           !memcmp(g[0][2], g[1][2], lc * sizeof(float));
    expect(same, "layernorm backward twice: same bits", 0, 0);
    expect(ts_cpu_sumsq(inp, (size_t)ln_n * lc) == ts_cpu_sumsq(inp, (size_t)ln_n * lc),
           "sumsq twice: same bits", 0, 0);
    printf("  (threads: %d)\n", ts_cpu_get_threads());
    for (int r = 0; r < 2; r++)
        free(g[r][0]), free(g[r][1]), free(g[r][2]);
    free(x), free(d1), free(d2), free(l), free(lse), free(l2), free(lse2), free(tgt);
    free(inp), free(dout), free(out), free(w), free(bb), free(mean), free(rstd);
}

/* --- tasks and thread counts ------------------------------------------------ */

/* The task loop of tasks.h: every task runs once; a thread runs its own share
 * front to back; a thread held up leaves its share to the other, which takes
 * it from the far end. Thread 1 sleeps before it starts, so thread 0 must
 * take some of share 1 (all of it, unless thread 1 wakes in time). */
static void test_tasks(void) {
    enum { NT = 400, GRAIN = 3, N_ITEMS = NT * GRAIN - 1 };
    int who[NT], order[NT], seen = 0;
    for (int i = 0; i < NT; i++)
        who[i] = -1, order[i] = -1;
    int saved = ts_cpu_get_threads();
    ts_cpu_set_threads(2);
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, N_ITEMS, GRAIN);
    int bad_range = 0;
#pragma omp parallel num_threads(q.shares)
    {
        int me = omp_get_thread_num();
        if (me == 1) {
            struct timespec nap = {0, 50 * 1000 * 1000};
            nanosleep(&nap, NULL);
        }
        for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);) {
            int t = (int)(lo / GRAIN);
            if (lo % GRAIN || hi - lo != (t == NT - 1 ? GRAIN - 1 : GRAIN)) bad_range = 1;
#pragma omp critical
            {
                if (who[t] != -1)
                    who[t] = -2; /* ran twice */
                else
                    who[t] = me;
                order[t] = seen++;
            }
        }
    }
    int once = 1, own_in_order = 1, stolen = 0, stolen_backwards = 1, last = -1;
    for (int t = 0; t < NT; t++)
        once &= who[t] >= 0;
    for (int t = 0; t < NT / 2; t++) { /* share 0: thread 0, front to back */
        own_in_order &= who[t] == 0 && order[t] > last;
        last = order[t];
    }
    last = -1;
    for (int t = NT / 2; t < NT; t++)
        if (who[t] == 0) stolen++;
    for (int t = NT - 1; t >= NT / 2 && who[t] == 0; t--) { /* taken from the back */
        stolen_backwards &= order[t] > last;
        last = order[t];
    }
    expect(q.shares == 2, "two shares for two threads", q.shares, 2);
    expect(once && !bad_range, "every task once, items [t*grain, ..) cut at n", 0, 0);
    expect(own_in_order, "thread 0 runs share 0 front to back", 0, 0);
    expect(stolen > 0 && stolen_backwards, "thread 0 takes share 1 from its far end", stolen, 1);
    /* inside a parallel region: one share, all tasks in order */
    int inner_ok = 1;
#pragma omp parallel num_threads(2) reduction(& : inner_ok)
    {
        ts_cpu_tasks in;
        ts_cpu_tasks_init(&in, 10, 1);
        size_t next = 0;
#pragma omp parallel num_threads(in.shares)
        for (size_t lo, hi; ts_cpu_tasks_next(&in, &lo, &hi);)
            inner_ok &= lo == next++;
        inner_ok &= in.shares == 1 && next == 10;
    }
    expect(inner_ok, "nested: one share, every task in order", 0, 0);
    /* more than 2^32 tasks asked for: the grain grows so that task ids fit
     * 32 bits, and the tasks still cover [0, n) */
    ts_cpu_tasks huge;
    size_t n_huge = ((size_t)1 << 33) + 5, lo_h, hi_h;
    ts_cpu_tasks_init(&huge, n_huge, 1);
    int first = ts_cpu_tasks_next(&huge, &lo_h, &hi_h);
    expect(huge.grain >= 2 && (n_huge + huge.grain - 1) / huge.grain < UINT32_MAX && first &&
               lo_h == 0 && hi_h == huge.grain,
           "2^33 + 5 items at grain 1: grain grows, ids fit 32 bits", (double)huge.grain, 2);
    ts_cpu_set_threads(saved);
}

/* Every kernel whose loop is cut into tasks gives the same bits on 1, 2 and 3
 * threads (3: shares of unequal length, tiles left to steal). The products
 * are cut by rows (more rows than columns) and by columns (a head's shape,
 * in tiles fixed by the shape);
 * 700 x 40 x 50's weight gradient is one tile, which the library, left to
 * split it over its threads, summed differently. */
typedef struct {
    int n, c, oc;
    float *inp, *w, *bias, *dout, *out, *dinp, *dw, *db;
} mm_shape;

static int matmul_bits(int threads, const mm_shape *m, float *out, float *dinp, float *dw,
                       float *db) {
    ts_cpu_set_threads(threads);
    ts_cpu_matmul_forward(out, m->inp, m->w, m->bias, m->n, m->c, m->oc);
    memset(dinp, 0, (size_t)m->n * m->c * sizeof *dinp);
    memset(dw, 0, (size_t)m->oc * m->c * sizeof *dw);
    memset(db, 0, (size_t)m->oc * sizeof *db);
    ts_cpu_matmul_backward(dinp, dw, db, m->dout, m->inp, m->w, m->n, m->c, m->oc);
    return ts_cpu_get_threads();
}

static void test_threads(void) {
    int saved = ts_cpu_get_threads();
    printf("  (OpenBLAS core: %s)\n", ts_cpu_blas_core());
    /* One block call over 150 columns (more than TS_CPU_BIAS_BLOCK) sums
     * each column as ts_cpu_bias_grad's blocks of 64 do, bit for bit. */
    {
        enum { BN = 37, BC = 150 };
        float *dout = falloc((size_t)BN * BC), *a = falloc(BC), *b = falloc(BC);
        fill(dout, (size_t)BN * BC, 1);
        memset(a, 0, BC * sizeof *a), memset(b, 0, BC * sizeof *b);
        ts_cpu_bias_grad(a, dout, BN, BC);
        ts_cpu_bias_grad_block(b, dout, BN, BC, 0, BC);
        expect(!memcmp(a, b, BC * sizeof *a), "bias_grad_block over 150 columns = bias_grad", 0, 0);
        free(dout), free(a), free(b);
    }
    const int shapes[][3] = {{333, 130, 190}, {70, 96, 1001}, {700, 40, 50}, {512, 256, 768}};
    for (int s = 0; s < 4; s++) {
        mm_shape m = {.n = shapes[s][0], .c = shapes[s][1], .oc = shapes[s][2]};
        size_t ni = (size_t)m.n * m.c, nw = (size_t)m.oc * m.c, no = (size_t)m.n * m.oc;
        m.inp = falloc(ni), m.w = falloc(nw), m.bias = falloc(m.oc), m.dout = falloc(no);
        fill(m.inp, ni, 1), fill(m.w, nw, 1), fill(m.bias, m.oc, 1), fill(m.dout, no, 1);
        float *r[3][4];
        for (int t = 0; t < 3; t++) {
            r[t][0] = falloc(no), r[t][1] = falloc(ni), r[t][2] = falloc(nw),
            r[t][3] = falloc(m.oc);
            matmul_bits(t + 1, &m, r[t][0], r[t][1], r[t][2], r[t][3]);
        }
        int same = 1;
        double diff = 0.0;
        const char *part[4] = {"out", "dinp", "dweight", "dbias"};
        const size_t part_n[4] = {no, ni, nw, (size_t)m.oc};
        for (int t = 1; t < 3; t++)
            for (int k = 0; k < 4; k++)
                same &= same_bits(part[k], "1 thread", r[0][k], t == 1 ? "2 threads" : "3 threads",
                                  r[t][k], part_n[k], &diff);
        char what[96];
        snprintf(what, sizeof what, "matmul %dx%dx%d fwd+bwd: 1 = 2 = 3 threads", m.n, m.c, m.oc);
        expect(same, what, diff, 0);
        for (int t = 0; t < 3; t++)
            free(r[t][0]), free(r[t][1]), free(r[t][2]), free(r[t][3]);
        free(m.inp), free(m.w), free(m.bias), free(m.dout);
    }

    /* attention, layernorm, gelu, residual, adamw at B 3, T 70, C 64, 4 heads */
    enum { AB = 3, AT = 70, AC = 64, ANH = 4, AN = AB * AT };
    float *qkv = falloc((size_t)AN * 3 * AC), *dy = falloc((size_t)AN * AC);
    float *lw = falloc(AC), *lb = falloc(AC);
    fill(qkv, (size_t)AN * 3 * AC, 1), fill(dy, (size_t)AN * AC, 1);
    fill(lw, AC, 1), fill(lb, AC, 1);
    float *res[3][12];
    for (int t = 0; t < 3; t++) {
        float **x = res[t];
        ts_cpu_set_threads(t + 1);
        x[0] = falloc((size_t)AN * AC), x[1] = falloc((size_t)AB * ANH * AT * AT);
        x[2] = falloc((size_t)AN * 3 * AC), x[3] = falloc((size_t)AB * ANH * AT * AT);
        ts_cpu_attention_forward(x[0], x[1], qkv, AB, AT, AC, ANH);
        ts_cpu_attention_backward(x[2], x[3], dy, qkv, x[1], AB, AT, AC, ANH);
        x[4] = falloc((size_t)AN * AC), x[5] = falloc(AN), x[6] = falloc(AN);
        ts_cpu_layernorm_forward(x[4], x[5], x[6], qkv, lw, lb, AN, AC);
        x[7] = falloc((size_t)AN * AC), x[8] = falloc(AC), x[9] = falloc(AC);
        ts_cpu_layernorm_backward(x[7], x[8], x[9], dy, qkv, lw, x[5], x[6], AN, AC);
        x[10] = falloc((size_t)AN * 3 * AC);
        ts_cpu_gelu_forward(x[10], qkv, (size_t)AN * 3 * AC);
        ts_cpu_gelu_backward(x[10], qkv, qkv, (size_t)AN * 3 * AC);
        ts_cpu_residual_backward(x[10], x[10] + AN * AC, dy, (size_t)AN * AC);
        x[11] = falloc((size_t)AN * 3 * AC); /* AdamW: parameters, moments from qkv */
        float *mom = falloc((size_t)AN * 3 * AC * 2);
        memcpy(x[11], qkv, (size_t)AN * 3 * AC * 4);
        ts_cpu_adamw(x[11], mom, mom + (size_t)AN * 3 * AC, x[10], (size_t)AN * 3 * AC, 1e-3f, 0.9f,
                     0.95f, 1e-8f, 0.1f, 1, 1.0f, 0);
        free(mom);
    }
    const size_t len[12] = {(size_t)AN * AC,
                            (size_t)AB * ANH * AT * AT,
                            (size_t)AN * 3 * AC,
                            (size_t)AB * ANH * AT * AT,
                            (size_t)AN * AC,
                            AN,
                            AN,
                            (size_t)AN * AC,
                            AC,
                            AC,
                            (size_t)AN * 3 * AC,
                            (size_t)AN * 3 * AC};
    const char *names[12] = {"attention out",
                             "attention probabilities",
                             "attention dqkv",
                             "attention scratch",
                             "layernorm out",
                             "layernorm mean",
                             "layernorm rstd",
                             "layernorm dinp",
                             "layernorm dweight",
                             "layernorm dbias",
                             "gelu + residual backward",
                             "adamw params"};
    for (int i = 0; i < 12; i++) {
        int same = 1;
        double diff = 0.0;
        for (int t = 1; t < 3; t++)
            same &= same_bits(names[i], "1 thread", res[0][i], t == 1 ? "2 threads" : "3 threads",
                              res[t][i], len[i], &diff);
        char what[96];
        snprintf(what, sizeof what, "%s: 1 = 2 = 3 threads", names[i]);
        expect(same, what, diff, 0);
    }
    /* the sum of squares over 5 M floats: 77 chunks, shared unevenly */
    size_t big = 5000003;
    float *sq = falloc(big);
    fill(sq, big, 1);
    double sums[3];
    for (int t = 0; t < 3; t++) {
        ts_cpu_set_threads(t + 1);
        sums[t] = ts_cpu_sumsq(sq, big);
    }
    expect(sums[0] == sums[1] && sums[0] == sums[2], "sumsq (5,000,003): 1 = 2 = 3 threads",
           sums[2] - sums[0], 0);
    /* zero and copy in tasks: every byte, none past the end */
    size_t nb = 3 * (256u << 10) + 12345;
    unsigned char *src = malloc(nb + 64), *dst = malloc(nb + 64);
    for (size_t i = 0; i < nb + 64; i++)
        src[i] = (unsigned char)(i * 131 + 7), dst[i] = 0xAB;
    ts_cpu_set_threads(3);
    ts_cpu_copy(dst, src, nb);
    int copied = !memcmp(dst, src, nb) && dst[nb] == 0xAB && dst[nb + 63] == 0xAB;
    ts_cpu_zero(dst, nb - 1);
    int zeroed = dst[nb - 1] == src[nb - 1] && dst[nb] == 0xAB;
    for (size_t i = 0; i + 1 < nb; i++)
        zeroed &= dst[i] == 0;
    expect(copied && zeroed, "copy and zero of 786,432 + 12,345 bytes on 3 threads", 0, 0);
    free(src), free(dst), free(sq);
    for (int t = 0; t < 3; t++)
        for (int i = 0; i < 12; i++)
            free(res[t][i]);
    free(qkv), free(dy), free(lw), free(lb);
    ts_cpu_set_threads(saved);
}

/* --- timing (by hand, not a ctest) -------------------------------------------- */

/* Prints the core whose kernels OpenBLAS runs (tests/blas_core.sh checks
 * that a forced OPENBLAS_CORETYPE took). */
static void test_blas_core(void) {
    printf("  OpenBLAS core: %s\n", ts_cpu_blas_core());
}

static void test_time(void) {
    int n = 256, V = 50257, Vp = 50304, lc = 768, reps = 20;
    float *x = falloc((size_t)n * Vp), *l = falloc(n), *lse = falloc(n);
    int32_t *tgt = malloc((size_t)n * sizeof *tgt);
    fill(x, (size_t)n * Vp, 5);
    for (int i = 0; i < n; i++)
        tgt[i] = (i * 7919) % V;
    ts_cpu_crossentropy_forward(l, lse, x, tgt, n, V, Vp);
    double t0 = omp_get_wtime();
    for (int r = 0; r < reps; r++) {
        ts_cpu_crossentropy_forward(l, lse, x, tgt, n, V, Vp);
        ts_cpu_crossentropy_backward(x, x, lse, tgt, 1.0f / n, n, V, Vp);
        fill(x, 1, 1); /* keep the compiler honest; logits now hold grads */
    }
    printf("crossentropy fwd+bwd (in place) N=%d V=%d Vp=%d: %.2f ms\n", n, V, Vp,
           (omp_get_wtime() - t0) / reps * 1e3);
    float *inp = falloc((size_t)n * lc), *out = falloc((size_t)n * lc),
          *dinp = falloc((size_t)n * lc), *w = falloc(lc), *b = falloc(lc), *dw = falloc(lc),
          *db = falloc(lc), *mean = falloc(n), *rstd = falloc(n);
    fill(inp, (size_t)n * lc, 1), fill(w, lc, 1);
    reps = 200;
    t0 = omp_get_wtime();
    for (int r = 0; r < reps; r++)
        ts_cpu_layernorm_forward(out, mean, rstd, inp, w, b, n, lc);
    double tf = (omp_get_wtime() - t0) / reps;
    t0 = omp_get_wtime();
    for (int r = 0; r < reps; r++)
        ts_cpu_layernorm_backward(dinp, dw, db, out, inp, w, mean, rstd, n, lc);
    double tb = (omp_get_wtime() - t0) / reps;
    printf("layernorm N=%d C=%d: fwd %.1f us, bwd %.1f us\n", n, lc, tf * 1e6, tb * 1e6);
    size_t gn = (size_t)n * 3072;
    float *gi = falloc(gn), *go = falloc(gn), *gd = falloc(gn);
    fill(gi, gn, 3);
    t0 = omp_get_wtime();
    for (int r = 0; r < reps; r++)
        ts_cpu_gelu_forward(go, gi, gn);
    tf = (omp_get_wtime() - t0) / reps;
    t0 = omp_get_wtime();
    for (int r = 0; r < reps; r++)
        ts_cpu_gelu_backward(gd, gi, go, gn);
    tb = (omp_get_wtime() - t0) / reps;
    printf("gelu n=%zu: fwd %.1f us, bwd %.1f us (threads %d)\n", gn, tf * 1e6, tb * 1e6,
           ts_cpu_get_threads());
    free(x), free(l), free(lse), free(tgt), free(inp), free(out), free(dinp);
    free(w), free(b), free(dw), free(db), free(mean), free(rstd);
    free(gi), free(go), free(gd);
}

/* --- driver -------------------------------------------------------------------- */

static const kernel_test TESTS[] = {
    {"matmul", test_matmul},
    {"embedding", test_embedding},
    {"layernorm", test_layernorm},
    {"gelu", test_gelu},
    {"attention", test_attention},
    {"attention_block", test_attention_block},
    {"attention_recompute", test_attention_recompute},
    {"residual", test_residual},
    {"crossentropy", test_crossentropy},
    {"crossentropy_shards", test_crossentropy_shards},
    {"embedding_shards", test_embedding_shards},
    {"adamw", test_adamw},
    {"reduce", test_reduce},
    {"determinism", test_determinism},
    {"tasks", test_tasks},
    {"threads", test_threads},
    {"time", test_time},
    {"blas_core", test_blas_core},
};

int main(int argc, char **argv) {
    return kernel_tests_main(argc, argv, TESTS, (int)(sizeof TESTS / sizeof TESTS[0]));
}
