/*
 * fuzz_cluster.c — libFuzzer target: cluster files (apps/cluster.c), read as
 * `tessera plan --search --cluster FILE` and `tessera plan --cluster FILE`
 * read them.
 *
 * Each input is an INI file given to cluster_load: the core's [cluster] keys
 * registered alone, the file loaded and validated, the section read into the
 * dry run's rates and links. A cluster that loads is then used as the search
 * uses it: the dry run's clock (core/backend/plan_clock.c) times kernels of
 * each kind from none to 1e24 FLOPs and bytes (past any model's step), every
 * collective on both links from 2 ranks to all the cluster's devices over 0
 * to 1e18 bytes, and a step's MFU is computed from the slowest of them.
 *
 * Oracles besides the sanitizers: a cluster that loads has 1 <= nodes x
 * gpus_per_node = devices <= CLUSTER_MAX_DEVICES, usable memory in (0,
 * memory_gb], every rate, bandwidth and peak positive and finite, every
 * latency and fixed cost finite and >= 0; and every time above is finite
 * and >= 0 and the MFU finite (a rate that gives inf or NaN is one the
 * [cluster] ranges should have refused). A file that does not load leaves a
 * message naming it.
 */
#include <math.h>

#include "cluster.h"
#include "fuzz_common.h"
#include "plan_clock.h"

static void fuzz_check(int ok, const char *what, double v) {
    if (ok) return;
    fprintf(stderr, "fuzz_cluster: %s = %g\n", what, v);
    abort();
}

static int positive(double v) {
    return isfinite(v) && v > 0;
}

static int nonnegative(double v) {
    return isfinite(v) && v >= 0;
}

static void fuzz_check_link(const ts_plan_link *l, const char *name) {
    for (int op = 0; op < TS_COMM_NOPS; op++) {
        fuzz_check(nonnegative(l->latency_s[op]), name, l->latency_s[op]);
        /* the barrier moves no bytes: its bandwidth is not read */
        if (op != TS_COMM_BARRIER) fuzz_check(positive(l->bandwidth[op]), name, l->bandwidth[op]);
    }
}

/* The cluster as the search uses it: every time finite. Returns the
 * slowest. */
static double fuzz_times(const cluster *c) {
    static const double amounts[] = {0, 1, 1e3, 1e9, 1e15, 1e18, 1e24};
    const int n = (int)(sizeof amounts / sizeof amounts[0]);
    double slowest = 0;
    ts_dry_run *dr = NULL;
    if (ts_dry_run_create(&dr) != TS_OK) abort();
    ts_plan_clock_enable(dr, &c->rates);
    for (int kind = TS_PLAN_F32; kind <= TS_PLAN_ATTENTION_BLOCK; kind++)
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                ts_plan_clock_reset(dr);
                ts_plan_clock_kernel(dr, kind, amounts[i], amounts[j]);
                ts_plan_time t;
                ts_plan_clock_read(dr, &t);
                fuzz_check(nonnegative(t.total), "a kernel's time", t.total);
                if (t.total > slowest) slowest = t.total;
            }
    /* every collective on both links: a group of 2, of a node, of all */
    int sizes[] = {2, c->gpus_per_node, c->devices};
    int last = c->devices - 1, ranks[2] = {0, last};
    const ts_plan_link *links[] = {&c->intra, &c->inter, cluster_link(c, ranks, 2)};
    for (size_t l = 0; l < sizeof links / sizeof links[0]; l++)
        for (int op = 0; op < TS_COMM_NOPS; op++)
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                for (int i = 0; i < n && amounts[i] <= 1e18; i++) {
                    double t = ts_plan_link_seconds(links[l], (ts_comm_op)op, sizes[s], amounts[i]);
                    fuzz_check(nonnegative(t), "a collective's time", t);
                    ts_plan_busy busy = {0, 0};
                    double end = ts_plan_clock_start(dr, &busy, t);
                    ts_plan_clock_wait(dr, end);
                    fuzz_check(nonnegative(end), "a collective's end", end);
                    if (t > slowest) slowest = t;
                }
    ts_plan_time t;
    ts_plan_clock_read(dr, &t);
    fuzz_check(nonnegative(t.total) && nonnegative(t.exposed_s), "the clock", t.total);
    ts_dry_run_destroy(dr);
    return slowest;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file_write(data, size);
    cluster c;
    if (cluster_load(path, &c) != TS_OK) {
        if (!strstr(ts_last_error(), path)) {
            fprintf(stderr, "fuzz_cluster: a refusal that names no file: %s\n", ts_last_error());
            abort();
        }
        return 0;
    }
    fuzz_check(c.gpus_per_node >= 1 && c.nodes >= 1, "gpus_per_node", c.gpus_per_node);
    fuzz_check(c.devices == (int64_t)c.nodes * c.gpus_per_node && c.devices <= CLUSTER_MAX_DEVICES,
               "devices", c.devices);
    fuzz_check(positive(c.memory) && c.memory <= c.memory_given, "memory", c.memory);
    fuzz_check(positive(c.memory_given), "memory_given", c.memory_given);
    fuzz_check(nonnegative(c.cores), "cores", c.cores);
    fuzz_check(positive(c.peak_f32) && positive(c.peak_bf16), "a peak", c.peak_f32);
    const ts_plan_rates *r = &c.rates;
    fuzz_check(positive(r->matmul_f32) && positive(r->matmul_bf16), "a GEMM rate", r->matmul_f32);
    fuzz_check(positive(r->attention) && positive(r->attention_block), "an attention rate",
               r->attention);
    fuzz_check(positive(r->memory), "the memory rate", r->memory);
    fuzz_check(nonnegative(r->kernel_s), "kernel_s", r->kernel_s);
    fuzz_check_link(&c.intra, "intra");
    fuzz_check_link(&c.inter, "inter");
    /* a step of the slowest time on every device at the peak: its MFU */
    double step = fuzz_times(&c);
    double mfu = 1e24 / ((step > 0 ? step : 1.0) * c.devices * c.peak_bf16);
    fuzz_check(nonnegative(mfu), "an MFU", mfu);
    return 0;
}
