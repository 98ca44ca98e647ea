/*
 * bench_step.c — the CPU speed benchmark of one training step.
 *
 *   bench_step CONFIG [--steps N] [--each] [--set section.key=value ...]
 *
 * It runs N training steps of CONFIG (data, forward, backward, clipping,
 * AdamW) after one warm-up step, with the same threads as everything it
 * compares them to, and measures this machine's rates again around every
 * step: the CBLAS SGEMM rate on square 2048^3 products run for as long as
 * the step took (at least two on each side), half just before it and half
 * just after (their FLOPs over their time), and, just before it, two memory
 * bandwidths (a triad, a[i] = b[i] + s c[i], for the activations'
 * element-wise passes; AdamW itself for the parameter streams), each the
 * best of 2. This machine's speed drifts by a third within minutes, and
 * its neighbours take memory bandwidth in spells of a second or so, so each
 * step is set against the rates of its own moment, and the SGEMM window is
 * as long as the step, so that a spell slows both alike (the best of two
 * short products just before, used before, caught quiet moments that a
 * whole step did not). The run reports the median over the steps of those
 * ratios and, beside them, the share against the faster of the two
 * products just before each step (that earlier measure) and the ratios
 * against the run's fastest single product and best bandwidths.
 *
 * A step's ratios: its achieved GFLOP/s (FLOPs counted by
 * ts_model_flops_per_step: 2 per multiply-add of every GEMM and of the
 * attention products; backward = 2x forward) over the SGEMM rate, and its
 * time over this machine's floor: every FLOP of the products at the SGEMM
 * rate, and every other byte the step must move at the measured bandwidths.
 * The bytes are counted from the model's shape (floor_bytes below): what
 * each element-wise pass of the forward and backward reads and writes at
 * least once, and, per parameter, the gradient's norm and AdamW's 8 streams
 * (it zeroes the gradient as it reads it). The step's ratio to that floor is
 * what remains to be won.
 *
 * Peak resident memory is the most any step's period held (VmHWM, reset
 * after each measurement of the rates has freed its buffers, which are not
 * the training's), against the accounted allocator's peak.
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

/* A measurement's buffer of n floats, zeroed; exits if out of memory. */
static float *bench_buffer(size_t n) {
    float *p = calloc(n, sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_step: out of memory for a %zu-float buffer\n", n);
        exit(1);
    }
    return p;
}

/* The SGEMM rate over a window: square n^3 products (at least two) for
 * `seconds`, their FLOPs over their time added to *flops and *secs, the
 * fastest product's rate raised into *best, and the faster of the first
 * two's rate returned (GFLOP/s). */
static double sgemm_window(int n, double seconds, double *flops, double *secs, double *best) {
    size_t nn = (size_t)n * n;
    float *a = bench_buffer(nn), *b = bench_buffer(nn), *c = bench_buffer(nn);
    for (size_t i = 0; i < nn; i++) {
        a[i] = (float)(i % 7) * 0.1f;
        b[i] = (float)(i % 5) * 0.1f;
    }
    double one = 2.0 * n * n * (double)n, spent = 0.0, first2 = 0.0;
    int count = 0;
    do {
        double t0 = now_seconds();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double dt = now_seconds() - t0;
        spent += dt;
        *flops += one;
        *secs += dt;
        if (one / dt * 1e-9 > *best) *best = one / dt * 1e-9;
        if (count++ < 2 && one / dt * 1e-9 > first2) first2 = one / dt * 1e-9;
    } while (spent < seconds || count < 2);
    free(a);
    free(b);
    free(c);
    return first2;
}

/* The best of `reps` triads over three arrays of n floats: bytes moved / s. */
static double triad_gbs(size_t n, int reps) {
    float *a = bench_buffer(n), *b = bench_buffer(n), *c = bench_buffer(n);
    for (size_t i = 0; i < n; i++) {
        a[i] = 0.0f;
        b[i] = (float)(i % 7);
        c[i] = (float)(i % 5);
    }
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
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

/* The best of `reps` AdamW passes over n parameters, as the trainer runs
 * them: 8 streams (param, m, v read and written, the gradient read and
 * zeroed) / s. */
static double adamw_gbs(size_t n, int reps) {
    float *buf = bench_buffer(4 * n);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_seconds();
        ts_cpu_adamw(buf, buf + n, buf + 2 * n, buf + 3 * n, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f,
                     r + 1, 1.0f, 1);
        double dt = now_seconds() - t0;
        if (dt < best) best = dt;
    }
    free(buf);
    return 8.0 * (double)n * sizeof(float) / best * 1e-9;
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
 * parameter, 4 bytes each: the gradient read for its norm (`param_bytes`,
 * at the triad rate) and AdamW's 8 streams (`adam_bytes`: param, m and v
 * read and written, the gradient read and left zero for the next step). */
static void floor_bytes(const ts_model_config *c, double N, int T, double P, double *act_bytes,
                        double *param_bytes, double *adam_bytes) {
    double C = c->d_model, NH = c->heads, L = c->layers;
    double fwd = 2 * C + 4 * C + 12 * C + 3 * C;
    double bwd = 9 * C + 12 * C + 12 * C + 13 * C;
    double att = 5.0 * NH * T / 2.0;
    double head = 8 * C + 4.0 * c->padded_vocab;
    *act_bytes = 4.0 * N * (L * (fwd + bwd + att) + head);
    *param_bytes = 4.0 * P;
    *adam_bytes = 4.0 * 8.0 * P;
}

/* The step's floor in ms: `flops` at the SGEMM rate, `stream_bytes` at the
 * triad rate and `adam_bytes` at AdamW's (GFLOP/s, GB/s). */
static double step_floor_ms(double flops, double stream_bytes, double adam_bytes, double sgemm,
                            double triad, double adam) {
    return (flops / (sgemm * 1e9) + stream_bytes / (triad * 1e9) + adam_bytes / (adam * 1e9)) *
           1e3;
}

/* The peak resident set (VmHWM) since the last reset_peak_rss, in KiB; the
 * process's whole peak (getrusage) where /proc cannot be read. */
static long peak_rss_kib(void) {
    long kib = -1;
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kib = atol(line + 6);
    if (f) fclose(f);
    if (kib < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kib = ru.ru_maxrss;
    }
    return kib;
}

/* Starts the peak resident set again from the current one (Linux's
 * clear_refs 5); where it cannot, the peak stays the process's whole. */
static void reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return;
    fputs("5", f);
    fclose(f);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: bench_step CONFIG [--steps N] [--each] [--set section.key=value ...]\n");
        return 2;
    }
    int steps = 7, each = 0; /* --each: a line per step, its time and its rates */
    ts_config *cfg = NULL;
    int n = 0;
    const ts_key_spec *core = ts_config_core_keys(&n);
    ts_status st = ts_config_create(&cfg);
    if (!st) st = ts_config_register(cfg, core, n);
    if (!st) st = ts_config_load(cfg, argv[1]);
    for (int i = 2; i < argc && !st; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            char *end;
            long v = strtol(argv[++i], &end, 10);
            if (*end || v < 1 || v > 10000)
                st = ts_error(TS_ERR_CONFIG, "--steps '%s': expected a whole number, 1 to 10000",
                              argv[i]);
            steps = (int)v;
        }
        else if (strcmp(argv[i], "--each") == 0)
            each = 1;
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
    ts_train_state *state = ts_trainer_state(t);
    int B = (int)ts_config_int(cfg, "train", "micro_batch");
    int T = (int)ts_config_int(cfg, "train", "seq_len");
    int gb = (int)ts_config_int(cfg, "train", "global_batch");
    if (gb == 0) gb = B;
    double flops = ts_model_flops_per_step(&state->model->cfg, gb, T);
    double act_b, param_b, adam_b;
    floor_bytes(&state->model->cfg, (double)gb * T, T, (double)state->model->global_numel, &act_b,
                &param_b, &adam_b);

    /* Per measured step: its time, the rates around it (the SGEMM window's,
     * the bandwidths just before), its share of the window's SGEMM rate and
     * its ratio to the floor at those rates, and its share of the faster of
     * the window's first two products. */
    enum { MS, SGEMM, TRIAD, ADAM, SHARE, FLOOR, SHARE2, NCOL };
    double *col[NCOL];
    for (int c = 0; c < NCOL; c++)
        col[c] = calloc((size_t)steps, sizeof(double));
    long peak_kib = 0;
    double best_sgemm = 0.0; /* the fastest single product around any measured step */
    ts_step_stats s;
    double window = 0.25; /* half the last step's time: SGEMMs before and after a step */
    for (int i = 0; i <= steps && !st; i++) {
        double gemm_flops = 0.0, gemm_s = 0.0, fastest = 0.0;
        double best2 = sgemm_window(2048, window, &gemm_flops, &gemm_s, &fastest);
        double triad = triad_gbs((size_t)32 << 20, 2), adam = adamw_gbs((size_t)16 << 20, 2);
        reset_peak_rss();
        st = ts_trainer_step(t, &s);
        long kib = peak_rss_kib();
        if (st) break;
        if (kib > peak_kib) peak_kib = kib;
        window = 0.5e-3 * s.step_ms;
        sgemm_window(2048, window, &gemm_flops, &gemm_s, &fastest);
        double rate = gemm_flops / gemm_s * 1e-9;
        if (each)
            printf("step %-3d %s%8.1f ms  sgemm %6.1f GFLOP/s (fastest %6.1f)  triad %5.1f GB/s  "
                   "adamw %5.1f GB/s\n",
                   i, i ? "" : "(warm-up) ", s.step_ms, rate, fastest, triad, adam);
        if (i == 0) continue; /* the warm-up */
        if (fastest > best_sgemm) best_sgemm = fastest;
        double floor_ms = step_floor_ms(flops, act_b + param_b, adam_b, rate, triad, adam);
        double row[NCOL] = {s.step_ms, rate, triad, adam,
                            flops / (s.step_ms * 1e-3) * 1e-9 / rate, s.step_ms / floor_ms,
                            flops / (s.step_ms * 1e-3) * 1e-9 / best2};
        for (int c = 0; c < NCOL; c++)
            col[c][i - 1] = row[c];
    }
    if (st) {
        fprintf(stderr, "bench_step: %s\n", ts_last_error());
        return 1;
    }
    double med[NCOL], best[NCOL];
    for (int c = 0; c < NCOL; c++) {
        qsort(col[c], (size_t)steps, sizeof(double), cmp_double);
        med[c] = col[c][steps / 2];
        best[c] = col[c][steps - 1];
    }
    double achieved = flops / (med[MS] * 1e-3) * 1e-9;
    double best_floor =
        step_floor_ms(flops, act_b + param_b, adam_b, best_sgemm, best[TRIAD], best[ADAM]);
    printf("threads            %d\n", threads);
    printf("sgemm 2048^3       %.1f GFLOP/s (median over the steps of the rate of the products "
           "around each, for as long as the step; %.1f-%.1f; fastest single product %.1f)\n",
           med[SGEMM], col[SGEMM][0], best[SGEMM], best_sgemm);
    printf("step               %.1f ms (median of %d; min %.1f, max %.1f)\n", med[MS], steps,
           col[MS][0], best[MS]);
    printf("flops per step     %.3f GFLOP (B=%d, T=%d)\n", flops * 1e-9, gb, T);
    printf("achieved           %.1f GFLOP/s = %.1f%% of sgemm (median over the steps of each "
           "against its own rate; %.1f%% against the faster of the two products just before "
           "each; %.1f%% of the run's fastest product)\n",
           achieved, 100.0 * med[SHARE], 100.0 * med[SHARE2], 100.0 * achieved / best_sgemm);
    printf("tokens/s           %.0f\n", gb * T / (med[MS] * 1e-3));
    printf("bandwidth          triad %.1f GB/s, adamw %.1f GB/s (medians; best %.1f, %.1f)\n",
           med[TRIAD], med[ADAM], best[TRIAD], best[ADAM]);
    double gemm_ms = flops / (med[SGEMM] * 1e9) * 1e3;
    printf("floor              %.1f ms = products %.1f at the sgemm rate + streams %.1f "
           "(%.0f MB of activations and %.0f MB of gradients at the triad rate, %.0f MB of "
           "AdamW at its rate; at the median rates)\n",
           step_floor_ms(flops, act_b + param_b, adam_b, med[SGEMM], med[TRIAD], med[ADAM]),
           gemm_ms,
           step_floor_ms(0, act_b + param_b, adam_b, med[SGEMM], med[TRIAD], med[ADAM]),
           act_b * 1e-6, param_b * 1e-6, adam_b * 1e-6);
    printf("step / floor       %.3f (median over the steps of each against its own rates; "
           "%.3f against the run's best)\n",
           med[FLOOR], med[MS] / best_floor);
    printf("peak rss           %.1f MiB (the most a step's period held)\n", peak_kib / 1024.0);
    ts_mem_counter total = ts_mem_stats(TS_MEM_NCAT);
    printf("peak accounted     %.1f MiB\n", total.peak / 1048576.0);
    for (int c = 0; c < NCOL; c++)
        free(col[c]);
    ts_trainer_destroy(t);
    ts_config_destroy(cfg);
    return 0;
}
