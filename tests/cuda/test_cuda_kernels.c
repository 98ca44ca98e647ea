/*
 * test_cuda_kernels.c — every CUDA kernel against its CPU reference kernel.
 *
 *   test_cuda_kernels FAMILY     (matmul_f32, matmul_bf16, embedding, layernorm,
 *                                 gelu, attention, residual, crossentropy,
 *                                 adamw, reduce, model_extra, attention_bf16,
 *                                 attention_block)
 *
 * Each run draws fresh random inputs (the seed is time-based and printed;
 * TS_TEST_SEED=S replays one), uploads the same inputs to both backends, and
 * compares forward and backward outputs. Outputs written with `=` are poisoned
 * with NaN (all-ones bytes) on the device before the call, so an element the
 * kernel forgets to write fails; gradients written with `+=` are prefilled with
 * the same random values on both sides, so the accumulation is checked too.
 *
 * The error measure is   max_i |gpu_i - cpu_i| / max(1, max_i |cpu_i|)   (NaN
 * anywhere fails), bounded by 1e-5 for f32 kernels and 1e-2 for kernels with
 * bf16 operands (whose CPU reference runs on the same bf16-rounded values).
 * Conversions to and from bf16 must match bit for bit.
 *
 * Without a CUDA device the test prints "SKIPPED: no CUDA device (reason)" and
 * exits with 77, which tests/cuda.cmake registers as ctest's skip code.
 */
#include <cuda_runtime_api.h> /* cudaMalloc, cudaMemcpy, cudaMemset */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cpu_kernels.h"  /* the reference */
#include "cuda_check.h"   /* random inputs, device buffers, checks */
#include "cuda_kernels.h" /* the kernels under test */

#define TOL_F32 1e-5
#define TOL_BF16 1e-2

/* --- matmul ------------------------------------------------------------------ */
static void test_matmul(int bf16) {
    int N = 33 + rnd_int(64), C = 48 + rnd_int(100), OC = 40 + rnd_int(150);
    double tol = bf16 ? TOL_BF16 : TOL_F32;
    printf("matmul %s N=%d C=%d OC=%d\n", bf16 ? "bf16" : "f32", N, C, OC);
    size_t nin = (size_t)N * C, nw = (size_t)OC * C, nout = (size_t)N * OC;
    float *inp = host_rand(nin, 1.0f), *w = host_rand(nw, 1.0f), *bias = host_rand(OC, 1.0f);
    float *dout = host_rand(nout, 1.0f);
    if (bf16) { /* the CPU reference sees the same bf16-rounded operands */
        ts_cpu_round_bf16(inp, nin);
        ts_cpu_round_bf16(w, nw);
        ts_cpu_round_bf16(dout, nout);
    }
    float *dinp0 = host_rand(nin, 1.0f), *dw0 = host_rand(nw, 1.0f), *db0 = host_rand(OC, 1.0f);
    float *out = malloc(nout * sizeof *out);
    float *dinp = host_copy(dinp0, nin), *dw = host_copy(dw0, nw), *db = host_copy(db0, OC);

    float *d_bias = dev_f(bias, OC), *d_out = dev_nan(nout);
    float *d_dinp = dev_f(dinp0, nin), *d_dw = dev_f(dw0, nw), *d_db = dev_f(db0, OC);
    void *d_inp, *d_w, *d_dout;
    if (bf16) {
        uint16_t *h = malloc((nin > nw ? (nin > nout ? nin : nout) : (nw > nout ? nw : nout)) * 2);
        ts_cpu_f32_to_bf16(h, inp, nin);
        d_inp = dev_from(h, nin * 2);
        ts_cpu_f32_to_bf16(h, w, nw);
        d_w = dev_from(h, nw * 2);
        ts_cpu_f32_to_bf16(h, dout, nout);
        d_dout = dev_from(h, nout * 2);
        free(h);
    } else {
        d_inp = dev_f(inp, nin);
        d_w = dev_f(w, nw);
        d_dout = dev_f(dout, nout);
    }

    for (int with_bias = 0; with_bias < 2; with_bias++) {
        const float *b = with_bias ? bias : NULL, *d_b = with_bias ? d_bias : NULL;
        poison(d_out, nout * sizeof(float));
        ts_cpu_matmul_forward(out, inp, w, b, N, C, OC);
        if (bf16)
            CALL(ts_cuda_matmul_forward_bf16(d_out, d_inp, d_w, d_b, N, C, OC));
        else
            CALL(ts_cuda_matmul_forward(d_out, d_inp, d_w, d_b, N, C, OC));
        check(with_bias ? "forward out (bias)" : "forward out (no bias)", d_out, out, nout, tol);
    }
    ts_cpu_matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
    if (bf16)
        CALL(ts_cuda_matmul_backward_bf16(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC));
    else
        CALL(ts_cuda_matmul_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, N, C, OC));
    check("backward dinp (+=)", d_dinp, dinp, nin, tol);
    check("backward dweight (+=)", d_dw, dw, nw, tol);
    check("backward dbias (+=)", d_db, db, OC, tol);
    /* NULL gradients are skipped: dbias alone */
    float *db2 = host_copy(db0, OC);
    float *d_db2 = dev_f(db0, OC);
    ts_cpu_matmul_backward(NULL, NULL, db2, dout, inp, w, N, C, OC);
    if (bf16)
        CALL(ts_cuda_matmul_backward_bf16(NULL, NULL, d_db2, d_dout, d_inp, d_w, N, C, OC));
    else
        CALL(ts_cuda_matmul_backward(NULL, NULL, d_db2, d_dout, d_inp, d_w, N, C, OC));
    check("backward dbias only", d_db2, db2, OC, tol);

    cudaFree(d_inp), cudaFree(d_w), cudaFree(d_dout), cudaFree(d_bias), cudaFree(d_out);
    cudaFree(d_dinp), cudaFree(d_dw), cudaFree(d_db), cudaFree(d_db2);
    free(inp), free(w), free(bias), free(dout), free(dinp0), free(dw0), free(db0), free(out);
    free(dinp), free(dw), free(db), free(db2);
}

/* --- embedding ----------------------------------------------------------------- */
static void test_embedding(void) {
    int B = 2 + rnd_int(3), T = 9 + rnd_int(20), C = 70 + rnd_int(200), V = 30 + rnd_int(40);
    int maxT = T + 10, pos0 = rnd_int(10), N = B * T;
    printf("embedding B=%d T=%d C=%d V=%d pos0=%d\n", B, T, C, V, pos0);
    int32_t *tok = malloc((size_t)N * sizeof *tok);
    for (int i = 0; i < N; i++)
        tok[i] = rnd_int(V); /* small V: many repeats */
    float *wte = host_rand((size_t)V * C, 1.0f), *wpe = host_rand((size_t)maxT * C, 1.0f);
    float *dout = host_rand((size_t)N * C, 1.0f);
    float *dwte = host_rand((size_t)V * C, 1.0f), *dwpe = host_rand((size_t)maxT * C, 1.0f);
    float *out = malloc((size_t)N * C * sizeof *out);
    int32_t *d_tok = dev_from(tok, (size_t)N * sizeof *tok);
    float *d_wte = dev_f(wte, (size_t)V * C), *d_wpe = dev_f(wpe, (size_t)maxT * C);
    float *d_dout = dev_f(dout, (size_t)N * C), *d_out = dev_nan((size_t)N * C);
    float *d_dwte = dev_f(dwte, (size_t)V * C), *d_dwpe = dev_f(dwpe, (size_t)maxT * C);

    ts_cpu_embedding_forward(out, tok, wte, wpe, B, T, C, pos0);
    CALL(ts_cuda_embedding_forward(d_out, d_tok, d_wte, d_wpe, B, T, C, pos0));
    check("forward out", d_out, out, (size_t)N * C, TOL_F32);
    ts_cpu_embedding_backward(dwte, dwpe, dout, tok, B, T, C, pos0);
    CALL(ts_cuda_embedding_backward(d_dwte, d_dwpe, d_dout, d_tok, B, T, C, pos0));
    check("backward dwte (+=)", d_dwte, dwte, (size_t)V * C, TOL_F32);
    check("backward dwpe (+=)", d_dwpe, dwpe, (size_t)maxT * C, TOL_F32);

    /* a vocabulary shard [v0, v0 + V_loc) and positions added separately */
    int v0 = rnd_int(V / 2), V_loc = V / 3;
    printf("embedding shard v0=%d V_loc=%d\n", v0, V_loc);
    float *swte = wte + (size_t)v0 * C, *sdwte = host_rand((size_t)V_loc * C, 1.0f);
    float *d_swte = dev_f(swte, (size_t)V_loc * C), *d_sdwte = dev_f(sdwte, (size_t)V_loc * C);
    poison(d_out, (size_t)N * C * sizeof(float));
    ts_cpu_embedding_shard_forward(out, tok, swte, v0, V_loc, N, C);
    CALL(ts_cuda_embedding_shard_forward(d_out, d_tok, d_swte, v0, V_loc, N, C));
    check("shard forward out (zeros off-shard)", d_out, out, (size_t)N * C, TOL_F32);
    ts_cpu_position_forward(out, wpe, B, T, C, pos0);
    CALL(ts_cuda_position_forward(d_out, d_wpe, B, T, C, pos0));
    check("position forward out (+=)", d_out, out, (size_t)N * C, TOL_F32);
    ts_cpu_embedding_shard_backward(sdwte, dout, tok, v0, V_loc, N, C);
    CALL(ts_cuda_embedding_shard_backward(d_sdwte, d_dout, d_tok, v0, V_loc, N, C));
    check("shard backward dwte (+=)", d_sdwte, sdwte, (size_t)V_loc * C, TOL_F32);
    ts_cpu_position_backward(dwpe, dout, B, T, C, pos0);
    CALL(ts_cuda_position_backward(d_dwpe, d_dout, B, T, C, pos0));
    check("position backward dwpe (+=)", d_dwpe, dwpe, (size_t)maxT * C, TOL_F32);

    cudaFree(d_tok), cudaFree(d_wte), cudaFree(d_wpe), cudaFree(d_dout), cudaFree(d_out);
    cudaFree(d_dwte), cudaFree(d_dwpe), cudaFree(d_swte), cudaFree(d_sdwte);
    free(tok), free(wte), free(wpe), free(dout), free(dwte), free(dwpe), free(out), free(sdwte);
}

/* --- layernorm ------------------------------------------------------------------ */
static void test_layernorm(void) {
    int N = 20 + rnd_int(80), C = 30 + rnd_int(800);
    printf("layernorm N=%d C=%d\n", N, C);
    size_t nc = (size_t)N * C;
    float *inp = host_rand(nc, 2.0f), *w = host_rand(C, 1.0f), *b = host_rand(C, 1.0f);
    for (size_t i = 0; i < nc; i++)
        inp[i] += 0.5f; /* a non-zero mean */
    float *dout = host_rand(nc, 1.0f), *dinp = host_rand(nc, 1.0f);
    float *dw = host_rand(C, 1.0f), *db = host_rand(C, 1.0f);
    float *out = malloc(nc * sizeof *out), *mean = malloc(N * sizeof *mean);
    float *rstd = malloc(N * sizeof *rstd);
    float *d_inp = dev_f(inp, nc), *d_w = dev_f(w, C), *d_b = dev_f(b, C),
          *d_dout = dev_f(dout, nc);
    float *d_dinp = dev_f(dinp, nc), *d_dw = dev_f(dw, C), *d_db = dev_f(db, C);
    float *d_out = dev_nan(nc), *d_mean = dev_nan(N), *d_rstd = dev_nan(N);

    ts_cpu_layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    CALL(ts_cuda_layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, C));
    check("forward out", d_out, out, nc, TOL_F32);
    check("forward mean", d_mean, mean, N, TOL_F32);
    check("forward rstd", d_rstd, rstd, N, TOL_F32);
    /* both backward passes from the CPU's saved statistics */
    float *d_mean_c = dev_f(mean, N), *d_rstd_c = dev_f(rstd, N);
    float *dw0 = host_copy(dw, C);
    ts_cpu_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    CALL(ts_cuda_layernorm_backward(d_dinp, d_dw, d_db, d_dout, d_inp, d_w, d_mean_c, d_rstd_c, N,
                                    C));
    check("backward dinp (+=)", d_dinp, dinp, nc, TOL_F32);
    check("backward dweight (+=)", d_dw, dw, C, TOL_F32);
    check("backward dbias (+=)", d_db, db, C, TOL_F32);
    /* determinism: the same call on the same inputs gives the same bits */
    float *g1 = host_f(d_dw, C);
    float *d_dw2 = dev_f(dw0, C), *d_db2 = dev_f(dw0, C), *d_dinp2 = dev_nan(nc);
    CALL(ts_cuda_layernorm_backward(d_dinp2, d_dw2, d_db2, d_dout, d_inp, d_w, d_mean_c, d_rstd_c,
                                    N, C));
    check_bits("backward dweight repeatable", d_dw2, g1, C * sizeof(float));

    cudaFree(d_inp), cudaFree(d_w), cudaFree(d_b), cudaFree(d_dout), cudaFree(d_dinp);
    cudaFree(d_dw), cudaFree(d_db), cudaFree(d_out), cudaFree(d_mean), cudaFree(d_rstd);
    cudaFree(d_mean_c), cudaFree(d_rstd_c), cudaFree(d_dw2), cudaFree(d_db2), cudaFree(d_dinp2);
    free(inp), free(w), free(b), free(dout), free(dinp), free(dw), free(db), free(out);
    free(mean), free(rstd), free(dw0), free(g1);
}

/* --- gelu ------------------------------------------------------------------------- */
static void test_gelu(void) {
    size_t n = 1000 + (size_t)rnd_int(100000);
    printf("gelu n=%zu\n", n);
    float *inp = host_rand(n, 6.0f), *dout = host_rand(n, 1.0f), *dinp = host_rand(n, 1.0f);
    float *out = malloc(n * sizeof *out);
    float *d_inp = dev_f(inp, n), *d_dout = dev_f(dout, n), *d_dinp = dev_f(dinp, n);
    float *d_out = dev_nan(n);
    ts_cpu_gelu_forward(out, inp, n);
    CALL(ts_cuda_gelu_forward(d_out, d_inp, n));
    check("forward out", d_out, out, n, TOL_F32);
    ts_cpu_gelu_backward(dinp, inp, dout, n);
    CALL(ts_cuda_gelu_backward(d_dinp, d_inp, d_dout, n));
    check("backward dinp (+=)", d_dinp, dinp, n, TOL_F32);

    /* fused bias + GELU == the matmul's bias add then GELU */
    int N = 3 + rnd_int(40), C = 50 + rnd_int(700);
    size_t nc = (size_t)N * C;
    printf("bias_gelu N=%d C=%d\n", N, C);
    float *x = host_rand(nc, 4.0f), *bias = host_rand(C, 1.0f);
    float *pre = malloc(nc * sizeof *pre), *o2 = malloc(nc * sizeof *o2);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++)
            pre[(size_t)r * C + c] = x[(size_t)r * C + c] + bias[c];
    ts_cpu_gelu_forward(o2, pre, nc);
    float *d_x = dev_f(x, nc), *d_bias = dev_f(bias, C), *d_pre = dev_nan(nc), *d_o2 = dev_nan(nc);
    CALL(ts_cuda_bias_gelu_forward(d_o2, d_pre, d_x, d_bias, N, C, 0));
    check("bias_gelu pre", d_pre, pre, nc, TOL_F32);
    check("bias_gelu out", d_o2, o2, nc, TOL_F32);
    poison(d_o2, nc * sizeof(float));
    CALL(ts_cuda_bias_gelu_forward(d_o2, d_x, d_x, d_bias, N, C, 0)); /* in place, pre = inp */
    check("bias_gelu in place: pre", d_x, pre, nc, TOL_F32);
    check("bias_gelu in place: out", d_o2, o2, nc, TOL_F32);
    /* bf16 mode: pre rounded, GELU of the rounded value, out rounded */
    ts_cpu_round_bf16(pre, nc);
    ts_cpu_gelu_forward(o2, pre, nc);
    ts_cpu_round_bf16(o2, nc);
    cu(cudaMemcpy(d_x, x, nc * sizeof(float), cudaMemcpyHostToDevice), "upload");
    poison(d_pre, nc * sizeof(float));
    poison(d_o2, nc * sizeof(float));
    CALL(ts_cuda_bias_gelu_forward(d_o2, d_pre, d_x, d_bias, N, C, 1));
    check_bits("bias_gelu bf16: pre", d_pre, pre, nc * sizeof(float));
    check("bias_gelu bf16: out (one bf16 ulp)", d_o2, o2, nc, TOL_BF16);

    cudaFree(d_inp), cudaFree(d_dout), cudaFree(d_dinp), cudaFree(d_out), cudaFree(d_x);
    cudaFree(d_bias), cudaFree(d_pre), cudaFree(d_o2);
    free(inp), free(dout), free(dinp), free(out), free(x), free(bias), free(pre), free(o2);
}

/* --- attention ---------------------------------------------------------------------- */
/* bf16: the tensor-core kernels (attention_tc.cu) on bf16-valued q, k, v
 * and dout, as the model's bf16 mode hands them over, within TOL_BF16. */
static void attention_case(int B, int T, int C, int NH, int bf16) {
    int hs = C / NH;
    double tol = bf16 ? TOL_BF16 : TOL_F32;
    printf("attention%s B=%d T=%d C=%d NH=%d (hs=%d)\n", bf16 ? " bf16" : "", B, T, C, NH, hs);
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    size_t natt = (size_t)B * NH * T * T, nlse = (size_t)B * NH * T;
    float *qkv = host_rand(nqkv, 2.0f), *dout = host_rand(nout, 1.0f);
    float *dqkv = host_rand(nqkv, 1.0f);
    if (bf16) {
        ts_cpu_round_bf16(qkv, nqkv);
        ts_cpu_round_bf16(dout, nout);
    }
    ts_status (*fwd)(float *, float *, const float *, int, int, int, int) =
        bf16 ? ts_cuda_attention_forward_bf16 : ts_cuda_attention_forward;
    ts_status (*bwd)(float *, const float *, const float *, const float *, const float *, int, int,
                     int, int) =
        bf16 ? ts_cuda_attention_backward_bf16 : ts_cuda_attention_backward;
    float *out = malloc(nout * sizeof *out), *att = malloc(natt * sizeof *att);
    float *scratch = malloc(natt * sizeof *scratch), *lse = malloc(nlse * sizeof *lse);
    /* reference lse: log-sum-exp of the scaled causal scores, in double */
    double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * 3 * C + (size_t)h * hs;
                double mx = -INFINITY;
                double *sc = malloc((size_t)(t + 1) * sizeof *sc);
                for (int t2 = 0; t2 <= t; t2++) {
                    const float *k = qkv + ((size_t)b * T + t2) * 3 * C + C + (size_t)h * hs;
                    double d = 0.0;
                    for (int i = 0; i < hs; i++)
                        d += (double)q[i] * k[i];
                    sc[t2] = d * scale;
                    if (sc[t2] > mx) mx = sc[t2];
                }
                double sum = 0.0;
                for (int t2 = 0; t2 <= t; t2++)
                    sum += exp(sc[t2] - mx);
                lse[((size_t)b * NH + h) * T + t] = (float)(mx + log(sum));
                free(sc);
            }
    float *d_qkv = dev_f(qkv, nqkv), *d_dout = dev_f(dout, nout), *d_dqkv = dev_f(dqkv, nqkv);
    float *d_out = dev_nan(nout), *d_lse = dev_nan(nlse);

    ts_cpu_attention_forward(out, att, qkv, B, T, C, NH);
    CALL(fwd(d_out, d_lse, d_qkv, B, T, C, NH));
    check("forward out", d_out, out, nout, tol);
    check("forward lse (vs double reference)", d_lse, lse, nlse, tol);
    /* each backend's backward from its own forward state */
    ts_cpu_attention_backward(dqkv, scratch, dout, qkv, att, B, T, C, NH);
    CALL(bwd(d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, C, NH));
    check("backward dqkv (+=)", d_dqkv, dqkv, nqkv, tol);
    /* determinism: a second backward from zero gives the same bits twice */
    float *g1;
    cu(cudaMemset(d_dqkv, 0, nqkv * sizeof(float)), "memset");
    cu(cudaDeviceSynchronize(), "sync");
    CALL(bwd(d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, C, NH));
    g1 = host_f(d_dqkv, nqkv);
    cu(cudaMemset(d_dqkv, 0, nqkv * sizeof(float)), "memset");
    cu(cudaDeviceSynchronize(), "sync");
    CALL(bwd(d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, C, NH));
    check_bits("backward dqkv repeatable", d_dqkv, g1, nqkv * sizeof(float));

    cudaFree(d_qkv), cudaFree(d_dout), cudaFree(d_dqkv), cudaFree(d_out), cudaFree(d_lse);
    free(qkv), free(dout), free(dqkv), free(out), free(att), free(scratch), free(lse), free(g1);
}

static void test_attention(int bf16) {
    attention_case(2, 33 + rnd_int(64), 128, 2, bf16); /* hs 64, T not a tile multiple */
    attention_case(1 + rnd_int(2), 40, 48, 3, bf16);   /* hs 16, padded to 32 */
    attention_case(1, 20 + rnd_int(60), 96, 1, bf16);  /* hs 96: bf16 falls back to f32 */
    attention_case(2, 1, 64, 4, bf16);                 /* a single position */
    if (bf16) {
        attention_case(1, 130 + rnd_int(200), 64, 2, bf16);    /* hs 32, several 64-row tiles */
        attention_case(2, 64 * (1 + rnd_int(3)), 96, 2, bf16); /* hs 48, whole tiles */
    }
}

/* --- block attention (context parallelism) ----------------------------------------- */
/* Compares the first C columns of `rows` rows of stride `stride`; lse-like
 * arrays (lse = 1) must also agree on where they are -inf. */
static void check_strided(const char *what, const float *d_gpu, const float *cpu, size_t rows,
                          int stride, int C, int lse) {
    float *g = host_f(d_gpu, rows * stride), *a = malloc(rows * C * sizeof *a),
          *b = malloc(rows * C * sizeof *b);
    int inf_ok = 1;
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < C; c++) {
            float x = g[r * stride + c], y = cpu[r * stride + c];
            if (lse && (isinf(x) || isinf(y))) {
                inf_ok &= x == -INFINITY && y == -INFINITY;
                x = y = 0.0f;
            }
            a[r * C + c] = x, b[r * C + c] = y;
        }
    double e = inf_ok ? rel_err(a, b, rows * C) : INFINITY;
    int ok = e <= TOL_F32;
    printf("  %-40s rel err %.3g (tol %.0e) %s\n", what, e, TOL_F32, ok ? "ok" : "FAIL");
    if (!ok) g_failures++;
    free(g), free(a), free(b);
}

/* Queries (B, Tq) against two key blocks of Tk rows: block 1 with `offset`,
 * block 2 the Tk positions before it (offset + Tk), as a ring step brings
 * them. q lives in rows of qs = C + qpad floats, k and v side by side in
 * rows of kvs = 2C + kvpad, out and dout in rows of os = C + opad. Each
 * backend runs forward 1, forward 2, merge, then the backward of both key
 * blocks from its own merged out and lse; dq and dk/dv (whole buffers, pads
 * included) are prefilled with the same random values. */
static void attention_block_case(int B, int Tq, int Tk, int C, int NH, int qpad, int kvpad,
                                 int opad, int64_t offset) {
    int qs = C + qpad, kvs = 2 * C + kvpad, os = C + opad;
    printf("attention_block B=%d Tq=%d Tk=%d C=%d NH=%d (hs=%d) qs=%d kvs=%d os=%d offset=%lld\n",
           B, Tq, Tk, C, NH, C / NH, qs, kvs, os, (long long)offset);
    size_t nq = (size_t)B * Tq * qs, nkv = (size_t)B * Tk * kvs, no = (size_t)B * Tq * os;
    size_t nl = (size_t)B * NH * Tq, rows_q = (size_t)B * Tq;
    float *q = host_rand(nq, 2.0f), *kv1 = host_rand(nkv, 2.0f), *kv2 = host_rand(nkv, 2.0f);
    float *dout = host_rand(no, 1.0f), *dq = host_rand(nq, 1.0f), *dkv1 = host_rand(nkv, 1.0f);
    float *dkv2 = host_rand(nkv, 1.0f);
    float *o = host_rand(no, 1.0f), *o2 = host_copy(o, no); /* pads: same values both sides */
    float *l = malloc(nl * sizeof *l), *l2 = malloc(nl * sizeof *l2);
    float *d_q = dev_f(q, nq), *d_kv1 = dev_f(kv1, nkv), *d_kv2 = dev_f(kv2, nkv);
    float *d_dout = dev_f(dout, no), *d_dq = dev_f(dq, nq), *d_dkv1 = dev_f(dkv1, nkv);
    float *d_dkv2 = dev_f(dkv2, nkv), *d_o = dev_f(o, no), *d_o2 = dev_f(o2, no);
    float *d_l = dev_nan(nl), *d_l2 = dev_nan(nl);
    /* the C columns of out are poisoned on the device: they must be written */
    float *pois = host_copy(o, no);
    for (size_t r = 0; r < rows_q; r++)
        memset(pois + r * os, 0xff, (size_t)C * sizeof(float));
    cu(cudaMemcpy(d_o, pois, no * sizeof(float), cudaMemcpyHostToDevice), "poison");
    cu(cudaMemcpy(d_o2, pois, no * sizeof(float), cudaMemcpyHostToDevice), "poison");
    cu(cudaDeviceSynchronize(), "sync");

    ts_cpu_attention_block_forward(o, l, q, kv1, kv1 + C, B, Tq, Tk, C, NH, qs, kvs, os, offset);
    CALL(ts_cuda_attention_block_forward(d_o, d_l, d_q, d_kv1, d_kv1 + C, B, Tq, Tk, C, NH, qs, kvs,
                                         os, offset));
    check_strided("forward out, key block 1", d_o, o, rows_q, os, C, 0);
    check_strided("forward lse, key block 1", d_l, l, nl, 1, 1, 1);
    int64_t off2 = offset > INT64_MAX - Tk ? INT64_MAX : offset + Tk;
    ts_cpu_attention_block_forward(o2, l2, q, kv2, kv2 + C, B, Tq, Tk, C, NH, qs, kvs, os, off2);
    CALL(ts_cuda_attention_block_forward(d_o2, d_l2, d_q, d_kv2, d_kv2 + C, B, Tq, Tk, C, NH, qs,
                                         kvs, os, off2));
    check_strided("forward out, key block 2", d_o2, o2, rows_q, os, C, 0);
    check_strided("forward lse, key block 2", d_l2, l2, nl, 1, 1, 1);
    ts_cpu_attention_block_merge(o, l, o2, l2, B, Tq, C, NH, os);
    CALL(ts_cuda_attention_block_merge(d_o, d_l, d_o2, d_l2, B, Tq, C, NH, os));
    check_strided("merge out", d_o, o, rows_q, os, C, 0);
    check_strided("merge lse", d_l, l, nl, 1, 1, 1);

    ts_cpu_attention_block_backward(dq, dkv1, dkv1 + C, q, kv1, kv1 + C, o, dout, l, B, Tq, Tk, C,
                                    NH, qs, kvs, os, offset);
    ts_cpu_attention_block_backward(dq, dkv2, dkv2 + C, q, kv2, kv2 + C, o, dout, l, B, Tq, Tk, C,
                                    NH, qs, kvs, os, off2);
    CALL(ts_cuda_attention_block_backward(d_dq, d_dkv1, d_dkv1 + C, d_q, d_kv1, d_kv1 + C, d_o,
                                          d_dout, d_l, B, Tq, Tk, C, NH, qs, kvs, os, offset));
    CALL(ts_cuda_attention_block_backward(d_dq, d_dkv2, d_dkv2 + C, d_q, d_kv2, d_kv2 + C, d_o,
                                          d_dout, d_l, B, Tq, Tk, C, NH, qs, kvs, os, off2));
    check("backward dq (+=, whole rows)", d_dq, dq, nq, TOL_F32);
    check("backward dk, dv of block 1 (+=)", d_dkv1, dkv1, nkv, TOL_F32);
    check("backward dk, dv of block 2 (+=)", d_dkv2, dkv2, nkv, TOL_F32);
    /* determinism: the backward from zero twice gives the same bits */
    float *g1;
    cu(cudaMemset(d_dkv1, 0, nkv * sizeof(float)), "memset");
    cu(cudaDeviceSynchronize(), "sync");
    CALL(ts_cuda_attention_block_backward(d_dq, d_dkv1, d_dkv1 + C, d_q, d_kv1, d_kv1 + C, d_o,
                                          d_dout, d_l, B, Tq, Tk, C, NH, qs, kvs, os, offset));
    g1 = host_f(d_dkv1, nkv);
    cu(cudaMemset(d_dkv1, 0, nkv * sizeof(float)), "memset");
    cu(cudaDeviceSynchronize(), "sync");
    CALL(ts_cuda_attention_block_backward(d_dq, d_dkv1, d_dkv1 + C, d_q, d_kv1, d_kv1 + C, d_o,
                                          d_dout, d_l, B, Tq, Tk, C, NH, qs, kvs, os, offset));
    check_bits("backward dk, dv repeatable", d_dkv1, g1, nkv * sizeof(float));

    cudaFree(d_q), cudaFree(d_kv1), cudaFree(d_kv2), cudaFree(d_dout), cudaFree(d_dq);
    cudaFree(d_dkv1), cudaFree(d_dkv2), cudaFree(d_o), cudaFree(d_o2), cudaFree(d_l);
    cudaFree(d_l2);
    free(q), free(kv1), free(kv2), free(dout), free(dq), free(dkv1), free(dkv2), free(o);
    free(o2), free(l), free(l2), free(pois), free(g1);
}

static void test_attention_block(void) {
    int T = 33 + rnd_int(64);
    attention_block_case(2, T, T, 128, 2, 0, 0, 0, 0); /* hs 64, the diagonal block */
    attention_block_case(1 + rnd_int(2), 40, 70, 48, 3, 5, 3, 7, -13);  /* hs 16; empty rows */
    attention_block_case(1, 50, 20 + rnd_int(40), 96, 1, 0, 0, 2, 200); /* hs 96; no mask */
    attention_block_case(2, 30, 45, 64, 4, 1, 0, 0, -35);      /* block 1 masked, block 2 partly */
    attention_block_case(1, 20, 30, 64, 2, 0, 0, 0, -60);      /* both blocks fully masked */
    attention_block_case(2, 1, 37, 64, 4, 0, 0, 0, INT64_MAX); /* a single row, no mask */
}

/* --- residual -------------------------------------------------------------------------- */
static void test_residual(void) {
    int N = 5 + rnd_int(60), C = 40 + rnd_int(900);
    size_t n = (size_t)N * C;
    printf("residual N=%d C=%d\n", N, C);
    float *a = host_rand(n, 1.0f), *b = host_rand(n, 1.0f), *dout = host_rand(n, 1.0f);
    float *da = host_rand(n, 1.0f), *db = host_rand(n, 1.0f), *out = malloc(n * sizeof *out);
    float *d_a = dev_f(a, n), *d_b = dev_f(b, n), *d_dout = dev_f(dout, n);
    float *d_da = dev_f(da, n), *d_db = dev_f(db, n), *d_out = dev_nan(n);
    ts_cpu_residual_forward(out, a, b, n);
    CALL(ts_cuda_residual_forward(d_out, d_a, d_b, n));
    check("forward out", d_out, out, n, TOL_F32);
    ts_cpu_residual_backward(da, db, dout, n);
    CALL(ts_cuda_residual_backward(d_da, d_db, d_dout, n));
    check("backward da (+=)", d_da, da, n, TOL_F32);
    check("backward db (+=)", d_db, db, n, TOL_F32);
    ts_cpu_residual_backward(NULL, db, dout, n);
    CALL(ts_cuda_residual_backward(NULL, d_db, d_dout, n));
    check("backward db only (+=)", d_db, db, n, TOL_F32);

    /* fused residual + layernorm == residual then layernorm */
    float *w = host_rand(C, 1.0f), *bias = host_rand(C, 1.0f);
    float *ln = malloc(n * sizeof *ln), *mean = malloc(N * sizeof *mean);
    float *rstd = malloc(N * sizeof *rstd);
    ts_cpu_layernorm_forward(ln, mean, rstd, out, w, bias, N, C);
    float *d_w = dev_f(w, C), *d_bias = dev_f(bias, C), *d_ln = dev_nan(n);
    float *d_mean = dev_nan(N), *d_rstd = dev_nan(N);
    poison(d_out, n * sizeof(float));
    CALL(ts_cuda_residual_layernorm_forward(d_out, d_ln, d_mean, d_rstd, d_a, d_b, NULL, d_w,
                                            d_bias, N, C, 0));
    check("fused residual+layernorm: res", d_out, out, n, TOL_F32);
    check("fused residual+layernorm: out", d_ln, ln, n, TOL_F32);
    check("fused residual+layernorm: mean", d_mean, mean, N, TOL_F32);
    check("fused residual+layernorm: rstd", d_rstd, rstd, N, TOL_F32);
    /* res aliasing a (in-place residual stream) */
    CALL(ts_cuda_residual_layernorm_forward(d_a, d_ln, d_mean, d_rstd, d_a, d_b, NULL, d_w, d_bias,
                                            N, C, 0));
    check("fused, res aliasing a: res", d_a, out, n, TOL_F32);
    check("fused, res aliasing a: out", d_ln, ln, n, TOL_F32);
    /* the block's use in bf16: res = bf16(a + b + res_bias), ln_out rounded */
    float *rb = host_rand(C, 1.0f);
    ts_cpu_residual_forward(out, a, b, n);
    ts_cpu_add_bias(out, rb, N, C);
    ts_cpu_round_bf16(out, n);
    ts_cpu_layernorm_forward(ln, mean, rstd, out, w, bias, N, C);
    ts_cpu_round_bf16(ln, n);
    float *d_rb = dev_f(rb, C);
    cu(cudaMemcpy(d_a, a, n * sizeof(float), cudaMemcpyHostToDevice), "upload");
    poison(d_out, n * sizeof(float));
    poison(d_ln, n * sizeof(float));
    CALL(ts_cuda_residual_layernorm_forward(d_out, d_ln, d_mean, d_rstd, d_a, d_b, d_rb, d_w,
                                            d_bias, N, C, 1));
    check_bits("fused bf16 (+ bias): res", d_out, out, n * sizeof(float));
    check("fused bf16 (+ bias): out (one bf16 ulp)", d_ln, ln, n, TOL_BF16);
    check("fused bf16 (+ bias): mean", d_mean, mean, N, TOL_F32);
    check("fused bf16 (+ bias): rstd", d_rstd, rstd, N, TOL_F32);
    cudaFree(d_rb);
    free(rb);

    cudaFree(d_a), cudaFree(d_b), cudaFree(d_dout), cudaFree(d_da), cudaFree(d_db);
    cudaFree(d_out), cudaFree(d_w), cudaFree(d_bias), cudaFree(d_ln), cudaFree(d_mean);
    cudaFree(d_rstd);
    free(a), free(b), free(dout), free(da), free(db), free(out), free(w), free(bias), free(ln);
    free(mean), free(rstd);
}

/* --- cross-entropy ---------------------------------------------------------------------- */
static void test_crossentropy(void) {
    int N = 5 + rnd_int(40), V = 500 + rnd_int(3000), Vp = (V + 127) / 128 * 128;
    float dloss = 1.0f / (float)N;
    printf("crossentropy N=%d V=%d Vp=%d\n", N, V, Vp);
    size_t nl = (size_t)N * Vp;
    float *logits = host_rand(nl, 4.0f);
    for (size_t i = 0; i < nl; i++)
        if ((int)(i % Vp) >= V) logits[i] = 1e4f; /* padding must never win */
    int32_t *tgt = malloc(N * sizeof *tgt);
    for (int i = 0; i < N; i++)
        tgt[i] = rnd_int(5) == 0 ? -1 : rnd_int(V);
    tgt[0] = -1, tgt[N - 1] = V - 1;
    float *losses = malloc(N * sizeof *losses), *lse = malloc(N * sizeof *lse);
    float *dl = malloc(nl * sizeof *dl);
    float *d_logits = dev_f(logits, nl), *d_losses = dev_nan(N), *d_lse = dev_nan(N);
    float *d_dl = dev_nan(nl);
    int32_t *d_tgt = dev_from(tgt, N * sizeof *tgt);

    ts_cpu_crossentropy_forward(losses, lse, logits, tgt, N, V, Vp);
    CALL(ts_cuda_crossentropy_forward(d_losses, d_lse, d_logits, d_tgt, N, V, Vp));
    check("forward losses (masked rows 0)", d_losses, losses, N, TOL_F32);
    check("forward lse", d_lse, lse, N, TOL_F32);
    ts_cpu_crossentropy_backward(dl, logits, lse, tgt, dloss, N, V, Vp);
    float *d_lse_c = dev_f(lse, N);
    CALL(ts_cuda_crossentropy_backward(d_dl, d_logits, d_lse_c, d_tgt, dloss, N, V, Vp));
    check("backward dlogits (=)", d_dl, dl, nl, TOL_F32);
    CALL(ts_cuda_crossentropy_backward(d_logits, d_logits, d_lse_c, d_tgt, dloss, N, V, Vp));
    check("backward dlogits in place", d_logits, dl, nl, TOL_F32);

    /* two vocabulary shards of Vp/2 columns each */
    int Vp_loc = Vp / 2;
    float *gmax = malloc(N * sizeof *gmax), *sum = calloc(N, sizeof *sum);
    float *xt = calloc(N, sizeof *xt);
    float *shard = malloc((size_t)N * Vp_loc * sizeof *shard);
    float *rowmax = malloc(N * sizeof *rowmax), *stats = malloc(2 * N * sizeof *stats);
    for (int i = 0; i < N; i++)
        gmax[i] = -INFINITY;
    for (int pass = 0; pass < 3; pass++)
        for (int s = 0; s < 2; s++) {
            int v0 = s * Vp_loc, V_loc = V - v0 < Vp_loc ? V - v0 : Vp_loc;
            for (int r = 0; r < N; r++)
                memcpy(shard + (size_t)r * Vp_loc, logits + (size_t)r * Vp + v0,
                       Vp_loc * sizeof *shard);
            float *d_shard = dev_f(shard, (size_t)N * Vp_loc);
            char what[64];
            if (pass == 0) { /* 1. local max */
                float *d_rowmax = dev_nan(N);
                ts_cpu_ce_shard_max(rowmax, shard, N, V_loc, Vp_loc);
                CALL(ts_cuda_ce_shard_max(d_rowmax, d_shard, N, V_loc, Vp_loc));
                snprintf(what, sizeof what, "shard %d max", s);
                check(what, d_rowmax, rowmax, N, TOL_F32);
                for (int r = 0; r < N; r++)
                    gmax[r] = fmaxf(gmax[r], rowmax[r]);
                cudaFree(d_rowmax);
            } else if (pass == 1) { /* 2. sum of exp and the local target logit */
                float *d_gmax = dev_f(gmax, N), *d_stats = dev_nan(2 * (size_t)N);
                ts_cpu_ce_shard_sumexp(stats, shard, gmax, tgt, v0, N, V_loc, Vp_loc);
                CALL(
                    ts_cuda_ce_shard_sumexp(d_stats, d_shard, d_gmax, d_tgt, v0, N, V_loc, Vp_loc));
                snprintf(what, sizeof what, "shard %d sumexp stats", s);
                check(what, d_stats, stats, 2 * (size_t)N, TOL_F32);
                for (int r = 0; r < N; r++)
                    sum[r] += stats[2 * r], xt[r] += stats[2 * r + 1];
                cudaFree(d_gmax), cudaFree(d_stats);
            } else { /* 4. backward with the assembled lse */
                float *slse = malloc(N * sizeof *slse);
                for (int r = 0; r < N; r++)
                    slse[r] = gmax[r] + logf(sum[r]);
                float *d_slse = dev_f(slse, N), *d_sdl = dev_nan((size_t)N * Vp_loc);
                float *sdl = malloc((size_t)N * Vp_loc * sizeof *sdl);
                ts_cpu_ce_shard_backward(sdl, shard, slse, tgt, dloss, v0, N, V_loc, Vp_loc);
                CALL(ts_cuda_ce_shard_backward(d_sdl, d_shard, d_slse, d_tgt, dloss, v0, N, V_loc,
                                               Vp_loc));
                snprintf(what, sizeof what, "shard %d backward dlogits (=)", s);
                check(what, d_sdl, sdl, (size_t)N * Vp_loc, TOL_F32);
                cudaFree(d_slse), cudaFree(d_sdl);
                free(slse), free(sdl);
            }
            cudaFree(d_shard);
        }

    cudaFree(d_logits), cudaFree(d_losses), cudaFree(d_lse), cudaFree(d_dl), cudaFree(d_tgt);
    cudaFree(d_lse_c);
    free(logits), free(tgt), free(losses), free(lse), free(dl), free(gmax), free(sum), free(xt);
    free(shard), free(rowmax), free(stats);
}

/* --- AdamW -------------------------------------------------------------------------------- */
static void test_adamw(void) {
    size_t n = 1000 + (size_t)rnd_int(200000);
    int t = 1 + rnd_int(100);
    printf("adamw n=%zu t=%d\n", n, t);
    float *p = host_rand(n, 1.0f), *m = host_rand(n, 0.1f), *v = host_rand(n, 0.01f);
    float *g = host_rand(n, 1.0f);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    float *d_p = dev_f(p, n), *d_m = dev_f(m, n), *d_v = dev_f(v, n), *d_g = dev_f(g, n);
    uint16_t *d_pb = dev_alloc(n * 2);
    poison(d_pb, n * 2);
    ts_cpu_adamw(p, m, v, g, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.7f, 0);
    CALL(ts_cuda_adamw(d_p, d_m, d_v, d_pb, d_g, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.7f, 0));
    check("param", d_p, p, n, TOL_F32);
    check("m", d_m, m, n, TOL_F32);
    check("v", d_v, v, n, TOL_F32);
    /* the bf16 copy is exactly the rounding of the updated f32 parameters */
    float *gp = host_f(d_p, n);
    uint16_t *pb = malloc(n * 2);
    ts_cpu_f32_to_bf16(pb, gp, n);
    check_bits("param_bf16 == bf16(param)", d_pb, pb, n * 2);
    check_bits("grad untouched without zero_grad", d_g, g, n * sizeof(float));
    /* and without the copy-out, zeroing the gradient as it reads it */
    CALL(ts_cuda_adamw(d_p, d_m, d_v, NULL, d_g, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, t + 1, 1.0f,
                       1));
    ts_cpu_adamw(p, m, v, g, n, 6e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, t + 1, 1.0f, 1);
    check("param, second step, no copy-out", d_p, p, n, TOL_F32);
    check("m, second step", d_m, m, n, TOL_F32);
    check_bits("grad left 0 with zero_grad", d_g, g, n * sizeof(float));

    cudaFree(d_p), cudaFree(d_m), cudaFree(d_v), cudaFree(d_g), cudaFree(d_pb);
    free(p), free(m), free(v), free(g), free(gp), free(pb);
}

/* --- reductions and conversions ------------------------------------------------------------- */
static void test_reduce(void) {
    size_t n = 1 + (size_t)rnd_int(3000000);
    printf("reduce n=%zu\n", n);
    float *x = host_rand(n, 3.0f);
    /* special values for the conversions: ties, NaN, infinities, tiny */
    uint32_t specials[] = {0x3f808000u, 0x3f818000u, 0x7fc00001u, 0x7f800001u, 0xff800000u,
                           0x7f800000u, 0x00000001u, 0x80000000u, 0x7f7fffffu, 0x3f80ffffu};
    for (size_t i = 0; i < sizeof specials / sizeof *specials && i < n; i++)
        memcpy(&x[i], &specials[i], 4);
    float *d_x = dev_f(x, n);

    /* sumsq over finite values only */
    float *y = host_rand(n, 3.0f);
    float *d_y = dev_f(y, n);
    double *d_s = dev_alloc(2 * sizeof(double));
    CALL(ts_cuda_sumsq(d_s, d_y, n));
    CALL(ts_cuda_sumsq(d_s + 1, d_y, n));
    double *s = host_from(d_s, 2 * sizeof(double));
    double ref = ts_cpu_sumsq(y, n), e = fabs(s[0] - ref) / fmax(1.0, fabs(ref));
    int ok = e <= 1e-12;
    printf("  %-40s rel err %.3g (tol 1e-12) %s\n", "sumsq (double)", e, ok ? "ok" : "FAIL");
    g_failures += !ok;
    ok = memcmp(&s[0], &s[1], sizeof(double)) == 0;
    printf("  %-40s %s\n", "sumsq repeatable", ok ? "bitwise equal ok" : "bits differ FAIL");
    g_failures += !ok;

    uint16_t *hb = malloc(n * 2), *d_b = dev_alloc(n * 2);
    poison(d_b, n * 2);
    ts_cpu_f32_to_bf16(hb, x, n);
    CALL(ts_cuda_f32_to_bf16(d_b, d_x, n));
    check_bits("f32_to_bf16", d_b, hb, n * 2);
    float *hf = malloc(n * sizeof *hf), *d_f = dev_nan(n);
    ts_cpu_bf16_to_f32(hf, hb, n);
    CALL(ts_cuda_bf16_to_f32(d_f, d_b, n));
    check_bits("bf16_to_f32", d_f, hf, n * sizeof(float));
    ts_cpu_round_bf16(x, n);
    CALL(ts_cuda_round_bf16(d_x, n));
    check_bits("round_bf16 in place", d_x, x, n * sizeof(float));

    cudaFree(d_x), cudaFree(d_y), cudaFree(d_s), cudaFree(d_b), cudaFree(d_f);
    free(x), free(y), free(s), free(hb), free(hf);
}

/* --- the model's small kernels and memory operations (model_extra.cu) ------------------------ */
static void test_model_extra(void) {
    int N = 1 + rnd_int(300), C = 1 + rnd_int(1000);
    size_t n = (size_t)N * C;
    printf("model_extra N=%d C=%d\n", N, C);
    float *out = host_rand(n, 1.0f), *bias = host_rand(C, 1.0f), *db = host_rand(C, 1.0f);
    float *d_out = dev_f(out, n), *d_bias = dev_f(bias, C), *d_db = dev_f(db, C);
    ts_cpu_add_bias(out, bias, N, C);
    CALL(ts_cuda_add_bias(d_out, d_bias, N, C));
    check("add_bias out (+=)", d_out, out, n, TOL_F32);
    ts_cpu_bias_grad(db, out, N, C);
    CALL(ts_cuda_bias_grad(d_db, d_out, N, C));
    check("bias_grad dbias (+=)", d_db, db, C, TOL_F32);

    /* cross-entropy's last step: sum-exps >= 1 (the max's own term), some
     * targets masked */
    float *rowmax = host_rand(N, 5.0f), *stats = host_rand(2 * (size_t)N, 5.0f);
    int32_t *tgt = malloc(N * sizeof *tgt);
    for (int i = 0; i < N; i++) {
        stats[2 * i] = 1.0f + fabsf(stats[2 * i]) * 100.0f;
        tgt[i] = rnd_int(4) == 0 ? -1 : rnd_int(1000);
    }
    float *losses = malloc(N * sizeof *losses), *lse = malloc(N * sizeof *lse);
    float *d_rowmax = dev_f(rowmax, N), *d_stats = dev_f(stats, 2 * (size_t)N);
    int32_t *d_tgt = dev_from(tgt, N * sizeof *tgt);
    float *d_losses = dev_nan(N), *d_lse = dev_nan(N);
    ts_cpu_ce_shard_loss(losses, lse, rowmax, stats, tgt, N);
    CALL(ts_cuda_ce_shard_loss(d_losses, d_lse, d_rowmax, d_stats, d_tgt, N));
    check("ce_shard_loss losses", d_losses, losses, N, TOL_F32);
    check("ce_shard_loss lse", d_lse, lse, N, TOL_F32);

    /* zero, device copy */
    float *zeros = calloc(n, sizeof *zeros), *d_copy = dev_nan(n);
    CALL(ts_cuda_copy(d_copy, d_out, n * sizeof(float)));
    check_bits("copy", d_copy, out, n * sizeof(float));
    CALL(ts_cuda_zero(d_copy, n * sizeof(float)));
    check_bits("zero", d_copy, zeros, n * sizeof(float));

    /* the sequence-parallel staging: (B, T, C) against (tp, B, T/tp, C) */
    int tp = 1 + rnd_int(4), B = 1 + rnd_int(4), T = tp * (1 + rnd_int(16)), Cs = 1 + rnd_int(64);
    int Tl = T / tp;
    size_t ns = (size_t)B * T * Cs;
    float *full = host_rand(ns, 1.0f), *stage = malloc(ns * sizeof *stage);
    for (int r = 0; r < tp; r++)
        for (int b = 0; b < B; b++)
            memcpy(stage + ((size_t)r * B + b) * Tl * Cs,
                   full + ((size_t)b * T + (size_t)r * Tl) * Cs, (size_t)Tl * Cs * sizeof(float));
    float *d_full = dev_f(full, ns), *d_stage = dev_nan(ns), *d_back = dev_nan(ns);
    CALL(ts_cuda_seq_to_stage(d_stage, d_full, tp, B, T, Cs));
    check_bits("seq_to_stage", d_stage, stage, ns * sizeof(float));
    CALL(ts_cuda_seq_from_stage(d_back, d_stage, tp, B, T, Cs));
    check_bits("seq_from_stage", d_back, full, ns * sizeof(float));

    cudaFree(d_out), cudaFree(d_bias), cudaFree(d_db), cudaFree(d_rowmax), cudaFree(d_stats);
    cudaFree(d_tgt), cudaFree(d_losses), cudaFree(d_lse), cudaFree(d_copy), cudaFree(d_full);
    cudaFree(d_stage), cudaFree(d_back);
    free(out), free(bias), free(db), free(rowmax), free(stats), free(tgt), free(losses), free(lse);
    free(zeros), free(full), free(stage);
}

/* The mixture of experts' weighted row sum (moe.cu) against the CPU's: out
 * += accumulates, NULL weights mean 1, the row gradients exactly and the
 * weights' gradients (a dot product over C, summed in another order) within
 * TOL_F32. */
static void test_moe(void) {
    int N = 1 + rnd_int(200), k = 1 + rnd_int(4), C = 1 + rnd_int(300);
    size_t rows = (size_t)N * k, n = (size_t)N * C;
    printf("moe N=%d k=%d C=%d\n", N, k, C);
    float *out = host_rand(n, 1.0f), *r = host_rand(rows * C, 1.0f), *w = host_rand(rows, 1.0f);
    float *dout = host_rand(n, 1.0f);
    float *d_out = dev_f(out, n), *d_r = dev_f(r, rows * C), *d_w = dev_f(w, rows);
    float *d_dout = dev_f(dout, n);
    ts_cpu_moe_rows_sum(out, r, w, N, k, C);
    CALL(ts_cuda_moe_rows_sum(d_out, d_r, d_w, N, k, C));
    check("moe_rows_sum out (+=)", d_out, out, n, TOL_F32);
    ts_cpu_moe_rows_sum(out, r, NULL, N, k, C);
    CALL(ts_cuda_moe_rows_sum(d_out, d_r, NULL, N, k, C));
    check("moe_rows_sum unweighted (+=)", d_out, out, n, TOL_F32);
    float *drows = malloc(rows * C * sizeof *drows), *dw = malloc(rows * sizeof *dw);
    float *d_drows = dev_nan(rows * C), *d_dw = dev_nan(rows);
    ts_cpu_moe_rows_sum_backward(drows, dw, dout, r, w, N, k, C);
    CALL(ts_cuda_moe_rows_sum_backward(d_drows, d_dw, d_dout, d_r, d_w, N, k, C));
    check_bits("moe_rows_sum_backward drows", d_drows, drows, rows * C * sizeof(float));
    check("moe_rows_sum_backward dw", d_dw, dw, rows, TOL_F32);
    cudaFree(d_out), cudaFree(d_r), cudaFree(d_w), cudaFree(d_dout), cudaFree(d_drows);
    cudaFree(d_dw);
    free(out), free(r), free(w), free(dout), free(drows), free(dw);
}

int main(int argc, char **argv) {
    static const char *const families[] = {
        "matmul_f32",  "matmul_bf16",    "embedding",       "layernorm", "gelu",
        "attention",   "residual",       "crossentropy",    "adamw",     "reduce",
        "model_extra", "attention_bf16", "attention_block", "moe"};
    int fam, rc = cuda_tests_begin(argc, argv, "test_cuda_kernels", families,
                                   (int)(sizeof families / sizeof *families), &fam);
    if (rc >= 0) return rc;

    switch (fam) {
    case 0: test_matmul(0); break;
    case 1: test_matmul(1); break;
    case 2: test_embedding(); break;
    case 3: test_layernorm(); break;
    case 4: test_gelu(); break;
    case 5: test_attention(0); break;
    case 6: test_residual(); break;
    case 7: test_crossentropy(); break;
    case 8: test_adamw(); break;
    case 9: test_reduce(); break;
    case 10: test_model_extra(); break;
    case 11: test_attention(1); break;
    case 12: test_attention_block(); break;
    case 13: test_moe(); break;
    }
    return cuda_tests_end(families[fam]);
}
