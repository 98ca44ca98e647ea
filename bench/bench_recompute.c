/*
 * bench_recompute.c — what activation recomputation costs in time and
 * saves in memory, side by side in one process.
 *
 *   bench_recompute CONFIG [--rounds N] [--set section.key=value ...]
 *
 * Three trainers of CONFIG, [train] recompute = none, selective and full,
 * are built in this process (the same weights and data) and take one step
 * each per round, in an order that rotates every round, so that each
 * round's three steps see the machine alike; the first round warms them up.
 * Per mode: the median step time, the median over the rounds of its ratio
 * to none's step of the same round, its activation peak (the accounted
 * allocator's, per trainer) and the recomputed FLOPs a step, counted as
 * `tessera plan` counts them (GEMMs and the attention's products, 2 per
 * multiply-add: full runs every block's forward again, selective the
 * attention's scores alone), which at none's achieved rate predict the
 * extra time; the measured extra time is set against that prediction.
 * Losses of the three are printed each round: they must be equal.
 *
 * The FLOPs are the plan's (docs: tessera plan --json, "flops"), computed
 * here from the model's shape by the same rules so that the benchmark
 * needs no dry run; tests/cli/plan_summary.sh holds the plan to them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "cpu_kernels.h"
#include "run_config.h" /* ts_recompute_word */
#include "train.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Recomputed FLOPs a step (2 per multiply-add), dense GPT-2 blocks of
 * shape c on N = B T tokens: full, every block's forward (its four GEMMs,
 * 24 N C^2, and both attention products over the whole T x T square,
 * 4 B T^2 C); selective, the scores' product alone (2 B T^2 C). */
static double recomputed_flops(const ts_model_config *c, int mode, double B, double T) {
    double C = c->d_model, L = c->layers, N = B * T;
    if (mode == 2) return L * (24.0 * N * C * C + 4.0 * B * T * T * C);
    if (mode == 1) return L * 2.0 * B * T * T * C;
    return 0.0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr,
                "usage: bench_recompute CONFIG [--rounds N] [--set section.key=value ...]\n");
        return 2;
    }
    int rounds = 7, n = 0;
    const ts_key_spec *core = ts_config_core_keys(&n);
    ts_config *cfg[3] = {NULL, NULL, NULL};
    ts_trainer *t[3] = {NULL, NULL, NULL};
    ts_status st = TS_OK;
    for (int m = 0; m < 3 && !st; m++) {
        st = ts_config_create(&cfg[m]);
        if (!st) st = ts_config_register(cfg[m], core, n);
        if (!st) st = ts_config_load(cfg[m], argv[1]);
        for (int i = 2; i < argc && !st; i++) {
            if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
                char *end;
                long v = strtol(argv[++i], &end, 10);
                if (*end || v < 1 || v > 10000)
                    st = ts_error(TS_ERR_CONFIG,
                                  "--rounds '%s': expected a whole number, 1 to 10000", argv[i]);
                rounds = (int)v;
            } else if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
                st = ts_config_set(cfg[m], argv[++i]);
            } else {
                st = ts_error(TS_ERR_CONFIG, "unexpected argument '%s'", argv[i]);
            }
        }
        char set[64];
        snprintf(set, sizeof set, "train.recompute=%s", ts_recompute_word(m));
        if (!st) st = ts_config_set(cfg[m], set);
        if (!st) st = ts_config_set(cfg[m], "train.steps=1000000");
        if (!st) st = ts_config_validate(cfg[m]);
        if (!st) st = ts_trainer_create(cfg[m], NULL, NULL, &t[m]);
    }
    if (st) {
        fprintf(stderr, "bench_recompute: %s\n", ts_last_error());
        return 1;
    }
    const ts_model_config *mc = &ts_trainer_state(t[0])->model->cfg;
    int T = (int)ts_config_int(cfg[0], "train", "seq_len");
    int gb = (int)ts_config_int(cfg[0], "train", "global_batch");
    if (gb == 0) gb = (int)ts_config_int(cfg[0], "train", "micro_batch");
    double flops = ts_model_flops_per_step(mc, gb, T);
    double *ms[3], *ratio[3];
    /* Activation peaks: the allocator counts every trainer's memory; a
     * trainer's own is its step's rise over what was allocated before it,
     * plus what it keeps between steps (its workspace, left by the warm-up). */
    size_t peak[3] = {0, 0, 0}, kept[3] = {0, 0, 0};
    for (int m = 0; m < 3; m++) {
        ms[m] = calloc((size_t)rounds, sizeof(double));
        ratio[m] = calloc((size_t)rounds, sizeof(double));
    }
    printf("GPT-2 of %d layers, d_model %d, %d tokens a step (B %d, T %d), %d threads, %d "
           "rounds after a warm-up, the order rotating\n",
           mc->layers, mc->d_model, gb * T, gb, T, ts_cpu_get_threads(), rounds);
    for (int r = 0; r <= rounds && !st; r++) {
        double step_ms[3], loss[3];
        for (int k = 0; k < 3 && !st; k++) {
            int m = (r + k) % 3;
            ts_step_stats s;
            ts_mem_reset_peak();
            size_t before = ts_mem_stats(TS_MEM_ACTS).allocated;
            st = ts_trainer_step(t[m], &s);
            step_ms[m] = s.step_ms;
            loss[m] = s.loss;
            ts_mem_counter a = ts_mem_stats(TS_MEM_ACTS);
            if (r == 0) kept[m] = a.allocated - before;
            if (r > 0 && a.peak - before + kept[m] > peak[m]) peak[m] = a.peak - before + kept[m];
        }
        if (st) break;
        printf("round %-3d %s none %8.1f ms, selective %8.1f ms, full %8.1f ms; loss %.9g %s %.9g "
               "%s %.9g\n",
               r, r ? "" : "(warm-up)", step_ms[0], step_ms[1], step_ms[2], loss[0],
               loss[1] == loss[0] ? "=" : "!=", loss[1], loss[2] == loss[0] ? "=" : "!=", loss[2]);
        if (loss[1] != loss[0] || loss[2] != loss[0])
            st = ts_error(TS_ERR_INTERNAL, "the three modes' losses differ in round %d", r);
        if (r == 0) continue;
        for (int m = 0; m < 3; m++) {
            ms[m][r - 1] = step_ms[m];
            ratio[m][r - 1] = step_ms[m] / step_ms[0];
        }
    }
    if (st) {
        fprintf(stderr, "bench_recompute: %s\n", ts_last_error());
        return 1;
    }
    double none_ms = median(ms[0], rounds), rate = flops / (none_ms * 1e-3);
    printf("%-10s %10s %9s %12s %14s %12s %12s %12s\n", "recompute", "step ms", "x none",
           "extra ms", "recomputed", "predicted", "predicted x", "act. peak");
    for (int m = 0; m < 3; m++) {
        double med = median(ms[m], rounds), x = median(ratio[m], rounds);
        double re = recomputed_flops(mc, m, gb, T), predicted = re / rate * 1e3;
        printf("%-10s %10.1f %9.3f %12.1f %11.3f GF %9.1f ms %12.3f %9.1f MiB\n",
               ts_recompute_word(m), med, x, (x - 1.0) * none_ms, re * 1e-9, predicted,
               1.0 + re / flops, peak[m] / 1048576.0);
    }
    printf("(x none: the median over the rounds of each step over none's of the same round; extra "
           "ms: (x none - 1) times none's median; predicted: the recomputed FLOPs at none's "
           "achieved %.1f GFLOP/s, and 1 + those FLOPs over a step's %.3f GF; act. peak: the "
           "accounted activations' peak, each trainer's)\n",
           rate * 1e-9, flops * 1e-9);
    for (int m = 0; m < 3; m++) {
        free(ms[m]);
        free(ratio[m]);
        ts_trainer_destroy(t[m]);
        ts_config_destroy(cfg[m]);
    }
    return 0;
}
