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
    printf("peak rss           %.1f MiB\n", ru.ru_maxrss / 1024.0);
    ts_mem_counter total = ts_mem_stats(TS_MEM_NCAT);
    printf("peak accounted     %.1f MiB\n", total.peak / 1048576.0);
    free(ms);
    ts_trainer_destroy(t);
    ts_config_destroy(cfg);
    return 0;
}
