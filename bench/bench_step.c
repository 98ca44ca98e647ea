/*
 * bench_step.c — the CPU speed benchmark of one training step.
 *
 *   bench_step CONFIG [--steps N] [--set section.key=value ...]
 *
 * In one run and with the same threads it measures (1) the machine's CBLAS
 * SGEMM rate on a square 2048^3 product, the best of 5, and (2) full
 * training steps of CONFIG (data, forward, backward, clipping, AdamW), the
 * median of N after one warm-up step. It prints ms/step, the achieved
 * GFLOP/s with FLOPs counted by ts_model_flops_per_step (2 per multiply-add
 * of every GEMM and of the attention products; backward = 2x forward), their
 * ratio to the SGEMM rate, and the peak resident memory (getrusage).
 *
 * It also prints this machine's floor for the step, from two rates measured
 * in the same run: every FLOP of the products at the SGEMM rate, and every
 * other byte the step must move at a measured memory bandwidth (a triad,
 * a[i] = b[i] + s c[i], for the activations' element-wise passes; AdamW
 * itself for the parameter streams). The bytes are counted from the model's
 * shape (floor_bytes below): what each element-wise pass of the forward and
 * backward reads and writes at least once, and, per parameter, the
 * gradient's zeroing and norm and AdamW's 7 streams. The step's ratio to
 * that floor is what remains to be won.
 */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "config.h"
#include "cpu_kernels.h"
#include "train.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double sgemm_gflops(int n) {
    float *a = malloc((size_t)n * n * sizeof *a), *b = malloc((size_t)n * n * sizeof *b);
    float *c = malloc((size_t)n * n * sizeof *c);
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = now_seconds() - t0;
        if (dt < best) best = dt;
    }
    free(a);
    free(b);
    free(c);
    return 2.0 * n * n * (double)n / best * 1e-9;
}

/* The best of 5 triads over three arrays of n floats: bytes moved / s. */
static double triad_gbs(size_t n) {
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    for (size_t i = 0; i < n; i++) {
        a[i] = 0.0f;
        b[i] = (float)(i % 7);
        c[i] = (float)(i % 5);
    }
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now_seconds();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++)
            a[i] = b[i] + 0.5f * c[i];
        double dt = now_seconds() - t0;
        if (dt < best) best = dt;
    }
    volatile float sink = a[n / 2];
    (void)sink;
    free(a);
    free(b);
    free(c);
    return 3.0 * (double)n * sizeof(float) / best * 1e-9;
}

/* The best of 5 AdamW passes over n parameters: 7 streams (param, m, v read
 * and written, the gradient read) / s. */
static double adamw_gbs(size_t n) {
    float *buf = calloc(4 * n, sizeof *buf);
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now_seconds();
        ts_cpu_adamw(buf, buf + n, buf + 2 * n, buf + 3 * n, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                     r + 1, 1.0f);
        double dt = now_seconds() - t0;
        if (dt < best) best = dt;
    }
    free(buf);
    return 7.0 * (double)n * sizeof(float) / best * 1e-9;
}

/* Bytes the step's element-wise work must move, f32, for N = B T tokens of
 * a GPT-2 of c's shape (dense blocks), per layer and token in floats:
 * forward: LayerNorm 1 reads x and writes its output (2C); the residual and
 * LayerNorm 2 read two inputs and write two outputs (4C); bias + GELU read
 * the pre-activation, write it back and write the GELU (3 * 4C); the last
 * residual with its bias reads two and writes one (3C). Backward: the bias
 * gradients read their output gradients (C + 4C + C + 3C); the GELU
 * backward reads two and writes one (3 * 4C); each LayerNorm backward reads
 * three and writes one, plus the copy of the residual gradient (6C each);
 * the workspace is zeroed once (4C + 4C + C + C + 3C). The attention's
 * probabilities, the causal half of T per head, are written and read again
 * in the forward and read twice and written once in the backward (5 NH T /
 * 2). Head: LayerNorm forward and backward (2C + 6C), the logits read twice
 * by the cross-entropy and read and written by its gradient (4 Vp). Per
 * parameter, 4 bytes each: the gradient zeroed and read for its norm
 * (`param_bytes`, at the triad rate) and AdamW's 7 streams (`adam_bytes`). */
static void floor_bytes(const ts_model_config *c, double N, int T, double P, double *act_bytes,
                        double *param_bytes, double *adam_bytes) {
    double C = c->d_model, NH = c->heads, L = c->layers;
    double fwd = 2 * C + 4 * C + 12 * C + 3 * C;
    double bwd = 9 * C + 12 * C + 12 * C + 13 * C;
    double att = 5.0 * NH * T / 2.0;
    double head = 8 * C + 4.0 * c->padded_vocab;
    *act_bytes = 4.0 * N * (L * (fwd + bwd + att) + head);
    *param_bytes = 4.0 * 2.0 * P;
    *adam_bytes = 4.0 * 7.0 * P;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_step CONFIG [--steps N] [--set section.key=value ...]\n");
        return 2;
    }
    int steps = 5;
    ts_config *cfg = NULL;
    int n = 0;
    const ts_key_spec *core = ts_config_core_keys(&n);
    ts_status st = ts_config_create(&cfg);
    if (!st) st = ts_config_register(cfg, core, n);
    if (!st) st = ts_config_load(cfg, argv[1]);
    for (int i = 2; i < argc && !st; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc)
            st = ts_config_set(cfg, argv[++i]);
        else
            st = ts_error(TS_ERR_CONFIG, "unexpected argument '%s'", argv[i]);
    }
    if (!st) st = ts_config_set(cfg, "train.steps=1000000");
    if (!st) st = ts_config_validate(cfg);
    ts_trainer *t = NULL;
    if (!st) st = ts_trainer_create(cfg, NULL, NULL, &t);
    if (st) {
        fprintf(stderr, "bench_step: %s\n", ts_last_error());
        return 1;
    }
    int threads = ts_cpu_get_threads();
    double peak = sgemm_gflops(2048);
    double triad = triad_gbs((size_t)32 << 20), adam = adamw_gbs((size_t)16 << 20);

    ts_step_stats s;
    double *ms = calloc((size_t)steps, sizeof *ms);
    for (int i = 0; i <= steps && !st; i++) {
        st = ts_trainer_step(t, &s);
        if (i > 0) ms[i - 1] = s.step_ms;
    }
    if (st) {
        fprintf(stderr, "bench_step: %s\n", ts_last_error());
        return 1;
    }
    qsort(ms, (size_t)steps, sizeof *ms, cmp_double);
    double med = ms[steps / 2];
    ts_train_state *state = ts_trainer_state(t);
    int B = (int)ts_config_int(cfg, "train", "micro_batch");
    int T = (int)ts_config_int(cfg, "train", "seq_len");
    int gb = (int)ts_config_int(cfg, "train", "global_batch");
    if (gb == 0) gb = B;
    double flops = ts_model_flops_per_step(&state->model->cfg, gb, T);
    double achieved = flops / (med * 1e-3) * 1e-9;
    double act_b, param_b, adam_b;
    floor_bytes(&state->model->cfg, (double)gb * T, T, (double)state->model->global_numel, &act_b,
                &param_b, &adam_b);
    double gemm_ms = flops / (peak * 1e9) * 1e3;
    double stream_ms = (act_b + param_b) / (triad * 1e9) * 1e3 + adam_b / (adam * 1e9) * 1e3;
    double floor_ms = gemm_ms + stream_ms;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("threads            %d\n", threads);
    printf("sgemm 2048^3       %.1f GFLOP/s (best of 5)\n", peak);
    printf("step               %.1f ms (median of %d; min %.1f, max %.1f)\n", med, steps, ms[0],
           ms[steps - 1]);
    printf("flops per step     %.3f GFLOP (B=%d, T=%d)\n", flops * 1e-9, gb, T);
    printf("achieved           %.1f GFLOP/s = %.1f%% of sgemm\n", achieved,
           100.0 * achieved / peak);
    printf("tokens/s           %.0f\n", gb * T / (med * 1e-3));
    printf("bandwidth          triad %.1f GB/s, adamw %.1f GB/s (best of 5)\n", triad, adam);
    printf("floor              %.1f ms = products %.1f at the sgemm rate + streams %.1f "
           "(%.0f MB of activations and %.0f MB of gradients at the triad rate, %.0f MB of "
           "AdamW at its rate)\n",
           floor_ms, gemm_ms, stream_ms, act_b * 1e-6, param_b * 1e-6, adam_b * 1e-6);
    printf("step / floor       %.3f\n", med / floor_ms);
    printf("peak rss           %.1f MiB\n", ru.ru_maxrss / 1024.0);
    ts_mem_counter total = ts_mem_stats(TS_MEM_NCAT);
    printf("peak accounted     %.1f MiB\n", total.peak / 1048576.0);
    free(ms);
    ts_trainer_destroy(t);
    ts_config_destroy(cfg);
    return 0;
}
