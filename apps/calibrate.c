/*
 * calibrate.c — `tessera plan CONFIG --calibrate --cluster OUT`, run under
 * mpirun: measures what this machine gives each of the ranks running side
 * by side, and writes it as a cluster file the search reads
 * (docs/search.md, "Calibrating").
 *
 * Every rank measures at once, so that ranks sharing cores measure their
 * share: on 8 ranks over 2 cores each sees about a quarter of a core, as it
 * will in the run. The rates are those of the CPU kernels at CONFIG's sizes
 * (micro-batch x seq_len rows, d_model wide), counted as the dry run counts
 * them (backend_plan.c), so that the dry run's FLOPs and bytes divided by
 * these rates give back the measured times:
 *   - GEMM: an MLP projection (N, C) x (4C, C)^T forward and backward, in
 *     f32 and with a bf16 weight; 6 N C 4C FLOPs;
 *   - ring attention's blocks (cp) at cp 2's chunks of T/4 rows, counted
 *     the same way;
 *   - attention: the causal attention's forward and backward, 12 B T^2 C
 *     FLOPs (the dry run's 4 + 8) times the visible share (T + 1) / 2T, as
 *     the dry run's clock charges them;
 *   - memory: LayerNorm forward and backward, bias + GELU, its backward and
 *     a residual add, the bytes the dry run charges each, over their time;
 *   - a kernel's fixed cost: a residual add of 64 floats;
 *   - per collective of the world (and send/recv between neighbours): a
 *     small and a large call, latency = the small call's time, bus
 *     bandwidth = factor x (large - small bytes) / (large - small time), as
 *     nccl-tests count it; where that rate is over CAL_BW_OVER_FLOOR times
 *     the large call's own (the small call nearly as slow as the large: a
 *     disturbed measurement), the large call's rate, a floor, instead.
 * Each figure is the mean over the ranks (a collective's time: the slowest
 * rank's). The file says one node of `world` devices: every group is then
 * intra-node, and inter-node keys repeat the intra ones.
 *
 * The file is written by rank 0 through the core's atomic writer
 * (ts_write_atomic: a unique temporary name beside it, fsync, rename), and
 * its path is checked before anything is measured: only a regular file (or
 * the regular file a symbolic link leads to) or a new path is replaced,
 * never a FIFO, a device or a directory. The sizes come from CONFIG as the
 * trainer resolves them (seq_len 0: the context), each product checked in
 * 64 bits, and the buffers must fit in the rank's share of the memory.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "commands.h"
#include "file.h"  /* ts_file_probe_output */
#include "state.h" /* ts_write_atomic */
#include "tessera/comm.h"
#include "train.h" /* ts_train_shape_resolve */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* --- kernels ----------------------------------------------------------------- */

typedef struct cal_bufs {
    const ts_backend *be;
    int N, C, T, B, NH;
    float *x, *y, *w, *dw, *dx, *mean, *rstd, *big, *dbig, *pre, *qkv, *dqkv, *att, *scratch, *lse;
    uint16_t *w16;
    void *work;
} cal_bufs;

/* One kernel group timed: `reps` calls after one to warm up. */
typedef ts_status (*cal_fn)(cal_bufs *b);

static ts_status gemm_f32(cal_bufs *b) {
    TS_TRY(b->be->matmul_forward(b->big, b->x, b->w, NULL, b->N, b->C, 4 * b->C));
    return b->be->matmul_backward(b->dx, b->dw, NULL, b->dbig, b->x, b->w, b->N, b->C, 4 * b->C);
}

static ts_status gemm_bf16(cal_bufs *b) {
    TS_TRY(b->be->matmul_forward_bf16(b->big, b->work, b->x, b->w16, NULL, b->N, b->C, 4 * b->C));
    return b->be->matmul_backward_bf16(b->dx, b->dw, NULL, b->work, b->dbig, b->x, b->w16, b->N,
                                       b->C, 4 * b->C);
}

static ts_status attention(cal_bufs *b) {
    TS_TRY(b->be->attention_forward(b->x, b->att, b->qkv, b->B, b->T, b->C, b->NH));
    return b->be->attention_backward(b->dqkv, b->scratch, b->y, b->qkv, b->x, b->att, b->B, b->T,
                                     b->C, b->NH);
}

/* Ring attention's blocks at cp 2's chunks (T/4 rows, the smallest the
 * search proposes): a diagonal block (offset 0) and a whole one, forward
 * and backward, over the B x 4 chunks of the buffers. */
static ts_status attention_blocks(cal_bufs *b) {
    int Bc = 4 * b->B, Tc = b->T / 4, C = b->C, NH = b->NH;
    for (int whole = 0; whole < 2; whole++) {
        int64_t off = whole ? Tc : 0;
        TS_TRY(b->be->attention_block_forward(b->x, b->lse, b->qkv, b->qkv + C, b->qkv + 2 * C, Bc,
                                              Tc, Tc, C, NH, 3 * C, 3 * C, C, off));
        TS_TRY(b->be->attention_block_backward(b->dqkv, b->dqkv + C, b->dqkv + 2 * C, b->qkv,
                                               b->qkv + C, b->qkv + 2 * C, b->x, b->y, b->lse, Bc,
                                               Tc, Tc, C, NH, 3 * C, 3 * C, C, off));
    }
    return TS_OK;
}

static ts_status memory_mix(cal_bufs *b) {
    int N = b->N, C = b->C;
    TS_TRY(b->be->layernorm_forward(b->y, b->mean, b->rstd, b->x, b->w, b->w, N, C));
    TS_TRY(b->be->layernorm_backward(b->dx, b->dw, b->dw + C, b->y, b->x, b->w, b->mean, b->rstd, N,
                                     C));
    TS_TRY(b->be->bias_gelu_forward(b->big, b->pre, b->w, N, 4 * C, 0));
    TS_TRY(b->be->gelu_backward(b->dbig, b->pre, b->big, (size_t)N * 4 * C));
    return b->be->residual_forward(b->y, b->x, b->dx, (size_t)N * C);
}

/* The bytes the dry run charges memory_mix (backend_plan.c). */
static double memory_mix_bytes(const cal_bufs *b) {
    double NC = (double)b->N * b->C;
    return 4.0 * (2 * NC + 3 * NC + 3 * 4 * NC + 3 * 4 * NC + 3 * NC);
}

static ts_status tiny(cal_bufs *b) {
    return b->be->residual_forward(b->y, b->x, b->dx, 64);
}

/* Calls of a kernel taking `t` seconds that fill CAL_SECONDS (the most any
 * rank needs, so that all ranks run side by side throughout). */
#define CAL_SECONDS 0.4
static ts_status agree_reps(ts_comm *w, double t, int *reps) {
    int32_t mine = t > 0 ? (int32_t)fmin(1e5, ceil(CAL_SECONDS / t)) : 100000, most = 0;
    if (mine < 2) mine = 2;
    TS_TRY(ts_comm_all_reduce(w, &mine, &most, 1, TS_I32, TS_REDUCE_MAX));
    *reps = most;
    return TS_OK;
}

/* Seconds per call of `fn`, the ranks' mean: every rank runs it at once. */
static ts_status time_kernel(ts_comm *w, cal_bufs *b, cal_fn fn, double *out) {
    double t0 = now_s();
    TS_TRY(fn(b));
    int reps;
    TS_TRY(agree_reps(w, now_s() - t0, &reps));
    t0 = now_s();
    for (int i = 0; i < reps; i++)
        TS_TRY(fn(b));
    float t = (float)((now_s() - t0) / reps), sum = 0;
    TS_TRY(ts_comm_all_reduce(w, &t, &sum, 1, TS_F32, TS_REDUCE_SUM));
    *out = (double)sum / ts_comm_size(w);
    return TS_OK;
}

/* --- collectives --------------------------------------------------------------- */

enum { CAL_OPS = 6 };
/* A difference rate above this many times the large call's rate means the
 * small call took over 3/4 of the large one's time: not a latency any
 * link has beside its bandwidth, but a preempted call. */
#define CAL_BW_OVER_FLOOR 4.0
static const char *cal_op_keys[CAL_OPS] = {"all_reduce", "all_gather", "reduce_scatter",
                                           "all_to_all", "broadcast",  "send_recv"};
static const ts_comm_op cal_op_kind[CAL_OPS] = {TS_COMM_ALL_REDUCE,     TS_COMM_ALL_GATHER,
                                                TS_COMM_REDUCE_SCATTER, TS_COMM_ALL_TO_ALL,
                                                TS_COMM_BROADCAST,      TS_COMM_SEND};

/* One call of collective k with `count` floats per rank; *bytes as the
 * communicators count it (comm.c). */
static ts_status one_collective(ts_comm *w, int k, float *send, float *recv, size_t count,
                                double *bytes) {
    int n = ts_comm_size(w), r = ts_comm_rank(w);
    double per = (double)count * sizeof(float);
    switch (k) {
    case 0: *bytes = per; return ts_comm_all_reduce(w, send, recv, count, TS_F32, TS_REDUCE_SUM);
    case 1: *bytes = per * n; return ts_comm_all_gather(w, send, recv, count, TS_F32);
    case 2:
        *bytes = per * n;
        return ts_comm_reduce_scatter(w, send, recv, count, TS_F32, TS_REDUCE_SUM);
    case 3: *bytes = per * n; return ts_comm_all_to_all(w, send, recv, count, TS_F32);
    case 4: *bytes = per; return ts_comm_broadcast(w, send, count, TS_F32, 0);
    default:
        /* neighbours in pairs, one direction: what a pipeline stage sends */
        *bytes = per;
        if ((r ^ 1) >= n) return TS_OK;
        return r % 2 == 0 ? ts_comm_send(w, send, count, TS_F32, r ^ 1, 7)
                          : ts_comm_recv(w, recv, count, TS_F32, r ^ 1, 7);
    }
}

/* Seconds per call of collective k at `count` floats a rank: the slowest
 * rank's mean over the calls of a timed run, the least of three runs (a
 * run that a descheduled rank stretched is not the link's). */
static ts_status time_collective(ts_comm *w, int k, float *send, float *recv, size_t count,
                                 double *sec, double *bytes) {
    double t0 = now_s();
    TS_TRY(one_collective(w, k, send, recv, count, bytes));
    int reps;
    TS_TRY(agree_reps(w, now_s() - t0, &reps));
    *sec = INFINITY;
    for (int run = 0; run < 3; run++) {
        TS_TRY(ts_comm_barrier(w));
        t0 = now_s();
        for (int i = 0; i < reps; i++)
            TS_TRY(one_collective(w, k, send, recv, count, bytes));
        float t = (float)((now_s() - t0) / reps), worst = 0;
        TS_TRY(ts_comm_all_reduce(w, &t, &worst, 1, TS_F32, TS_REDUCE_MAX));
        if (worst < *sec) *sec = worst;
    }
    return TS_OK;
}

/* --- the command ------------------------------------------------------------------ */

static void *cal_alloc(const ts_backend *be, size_t bytes) {
    return be->alloc(TS_MEM_ACTS, bytes ? bytes : 64);
}

/* The sizes of the kernels: CONFIG's micro-batch, sequence (seq_len 0: the
 * context) and width as the trainer resolves them, each product in 64 bits;
 * the buffers must fit in the rank's share of the memory (`mem_bytes`).
 * *bytes: what the buffers take. */
static ts_status cal_sizes(const ts_config *cfg, const ts_backend *be, int ranks, double mem_bytes,
                           size_t big_count, cal_bufs *b, double *bytes) {
    ts_train_shape sh;
    TS_TRY(ts_train_shape_resolve(cfg, 1, &sh));
    int64_t N = (int64_t)sh.B * sh.T, C = sh.model.d_model;
    if (N > INT32_MAX / 4 || 4 * C > INT32_MAX || N * C > INT32_MAX)
        return ts_error(TS_ERR_CONFIG,
                        "plan --calibrate %s: [train] micro_batch x seq_len = %lld rows of [model] "
                        "d_model %lld is too large for one kernel call (rows x width at most "
                        "2^31 - 1): calibrate at a smaller micro_batch",
                        ts_config_path(cfg), (long long)N, (long long)C);
    b->B = sh.B;
    b->T = sh.T;
    b->C = sh.model.d_model;
    b->NH = sh.model.heads;
    b->N = (int)N;
    double NC = (double)N * C, CC = (double)C * C;
    *bytes = 4.0 * (3 * NC + 2 * 4 * CC + 3 * 4 * NC + 2 * (double)N + 2 * 3 * NC) + 2.0 * 4 * CC +
             4.0 * ((double)be->attention_saved_floats(b->B, b->NH, b->T) +
                    (double)be->attention_scratch_floats(b->B, b->NH, b->T) + (double)N * b->NH +
                    fmax(4 * CC, 3 * NC)) +
             (double)be->matmul_bf16_work_bytes(b->N, b->C, 4 * b->C) +
             2.0 * 4 * (double)big_count * ranks;
    if (*bytes > mem_bytes)
        return ts_error(TS_ERR_CONFIG,
                        "plan --calibrate %s: the kernels at micro_batch %d x seq_len %d rows of "
                        "d_model %d need %.3g GB a rank, more than this machine's %.3g GB a rank "
                        "(%d ranks): calibrate at a smaller micro_batch",
                        ts_config_path(cfg), b->B, b->T, b->C, *bytes / 1e9, mem_bytes / 1e9,
                        ranks);
    return TS_OK;
}

/* Every rank learns whether any failed; the first failing rank's message is
 * printed once (rank 0's when it failed). Returns 1 when any failed. */
static int cal_agree(ts_comm *w, ts_status st) {
    int32_t mine = st != TS_OK, any = 0, first = mine ? ts_comm_rank(w) : INT32_MAX, who = 0;
    if (ts_comm_all_reduce(w, &mine, &any, 1, TS_I32, TS_REDUCE_MAX) != TS_OK ||
        ts_comm_all_reduce(w, &first, &who, 1, TS_I32, TS_REDUCE_MIN) != TS_OK) {
        fprintf(stderr, "tessera: rank %d: %s\n", ts_comm_rank(w), ts_last_error());
        return 1;
    }
    if (mine && who == ts_comm_rank(w)) {
        if (ts_comm_size(w) > 1)
            fprintf(stderr, "tessera: rank %d: %s\n", ts_comm_rank(w), ts_last_error());
        else
            fprintf(stderr, "tessera: %s\n", ts_last_error());
    }
    return any != 0;
}

/* The cluster file's text, appended to; `full` once a piece did not fit,
 * `bad` the first figure the [cluster] schema would refuse. */
typedef struct cal_text {
    char buf[16384];
    size_t len;
    int full;
    char bad[256];
} cal_text;

static void cal_printf(cal_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void cal_printf(cal_text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof t->buf - t->len)
        t->full = 1;
    else
        t->len += (size_t)k;
}

/* Writes `key = value` (%.6g; an integer key's whole), checking the value as written against the
 * key's range in the core's schema: a measurement the search would refuse
 * (not finite, 0 where a rate must be positive, past a range) is not
 * written. */
static void cal_key(cal_text *t, const char *key, double value) {
    int n = 0;
    const ts_key_spec *k = ts_config_core_keys(&n), *sp = NULL;
    for (int i = 0; i < n && !sp; i++)
        if (!strcmp(k[i].section, "cluster") && !strcmp(k[i].name, key)) sp = &k[i];
    char text[64];
    snprintf(text, sizeof text, sp && sp->type == TS_KEY_INT ? "%.0f" : "%.6g", value);
    double v = strtod(text, NULL);
    if (!t->bad[0] && (!sp || !isfinite(v) || (sp->min <= sp->max && (v < sp->min || v > sp->max))))
        snprintf(t->bad, sizeof t->bad, "[cluster] %s measured %s, outside [%g, %g]", key, text,
                 sp ? sp->min : 0.0, sp ? sp->max : 0.0);
    cal_printf(t, "%s = %s\n", key, text);
}

int cmd_plan_calibrate(const ts_config *cfg, int *argc, char ***argv, const char *out_path,
                       FILE *say, int *world_size, int *world_rank) {
    ts_comm *w = NULL;
    ts_status st = ts_comm_world_init(argc, argv, ts_config_float(cfg, "comm", "timeout_s"), &w);
    if (st) {
        fprintf(stderr, "tessera: %s\n", ts_last_error());
        return 1;
    }
    int n = ts_comm_size(w), rank = ts_comm_rank(w);
    *world_size = n;
    *world_rank = rank;
    cal_bufs b = {.be = ts_backend_cpu()};
    const ts_backend *be = b.be;
    size_t big_count = (size_t)1 << 20; /* floats a rank: 4 MiB */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int mem_known = pages > 0 && page > 0;
    double mem_gb = mem_known ? (double)pages * (double)page / n / 1e9 : 1.0;
    /* Before anything is measured: the sizes, and the path rank 0 will
     * replace (a regular file, or a new one, in a directory it can write). */
    double need = 0;
    st = cal_sizes(cfg, be, n, mem_known ? mem_gb * 1e9 : INFINITY, big_count, &b, &need);
    if (!st && rank == 0) st = ts_file_probe_output(out_path, "plan --calibrate --cluster");
    if (cal_agree(w, st)) {
        ts_comm_world_finalize(w);
        return st == TS_ERR_CONFIG ? 2 : 1;
    }
    size_t NC = (size_t)b.N * b.C, CC = (size_t)b.C * b.C;
    b.x = cal_alloc(be, NC * 4);
    b.y = cal_alloc(be, NC * 4);
    b.dx = cal_alloc(be, NC * 4);
    b.w = cal_alloc(be, 4 * CC * 4);
    b.dw = cal_alloc(be, 4 * CC * 4);
    b.w16 = cal_alloc(be, 4 * CC * 2);
    b.big = cal_alloc(be, 4 * NC * 4);
    b.dbig = cal_alloc(be, 4 * NC * 4);
    b.pre = cal_alloc(be, 4 * NC * 4);
    b.mean = cal_alloc(be, (size_t)b.N * 4);
    b.rstd = cal_alloc(be, (size_t)b.N * 4);
    b.qkv = cal_alloc(be, 3 * NC * 4);
    b.dqkv = cal_alloc(be, 3 * NC * 4);
    b.att = cal_alloc(be, be->attention_saved_floats(b.B, b.NH, b.T) * 4);
    b.scratch = cal_alloc(be, be->attention_scratch_floats(b.B, b.NH, b.T) * 4);
    b.work = cal_alloc(be, be->matmul_bf16_work_bytes(b.N, b.C, 4 * b.C));
    b.lse = cal_alloc(be, (size_t)b.N * b.NH * 4);
    float *send = calloc(big_count * n, sizeof *send), *recv = calloc(big_count * n, sizeof *recv);
    if (!b.x || !b.y || !b.dx || !b.w || !b.dw || !b.w16 || !b.big || !b.dbig || !b.pre ||
        !b.mean || !b.rstd || !b.qkv || !b.dqkv || !b.att || !b.scratch || !b.work || !b.lse ||
        !send || !recv)
        st = ts_error(TS_ERR_NOMEM,
                      "plan --calibrate: out of memory for the kernels' buffers (%.3g GB)",
                      need / 1e9);
    /* Values that keep the kernels finite: a LayerNorm weight of ones, small
     * activations. */
    if (!st) {
        float *h = malloc(4 * CC * 4 > 3 * NC * 4 ? 4 * CC * 4 : 3 * NC * 4);
        if (!h) st = ts_error(TS_ERR_NOMEM, "plan --calibrate: out of memory");
        for (size_t i = 0; !st && i < 4 * CC; i++)
            h[i] = i < (size_t)b.C ? 1.0f : 0.01f * (float)((i * 7919) % 13) - 0.06f;
        if (!st) st = be->from_host(b.w, h, 4 * CC * 4);
        for (size_t i = 0; !st && i < 3 * NC; i++)
            h[i] = 0.1f * (float)((i * 104729) % 17) - 0.8f;
        if (!st) st = be->from_host(b.qkv, h, 3 * NC * 4);
        if (!st) st = be->from_host(b.x, h, NC * 4);
        if (!st) st = be->from_host(b.y, h, NC * 4);
        if (!st) st = be->from_host(b.dbig, h, NC * 4);
        free(h);
    }
    double t_f32 = 0, t_bf16 = 0, t_att = 0, t_blk = 0, t_mem = 0, t_tiny = 0;
    if (!st) st = time_kernel(w, &b, gemm_f32, &t_f32);
    if (!st) st = time_kernel(w, &b, gemm_bf16, &t_bf16);
    if (!st) st = time_kernel(w, &b, attention, &t_att);
    if (!st && b.T >= 8) st = time_kernel(w, &b, attention_blocks, &t_blk);
    if (!st) st = time_kernel(w, &b, memory_mix, &t_mem);
    if (!st) st = time_kernel(w, &b, tiny, &t_tiny);
    double lat[CAL_OPS], bw[CAL_OPS];
    for (int k = 0; k < CAL_OPS && !st; k++) {
        double ts = 0, tl = 0, bs = 0, bl = 0;
        st = time_collective(w, k, send, recv, 64, &ts, &bs);
        if (!st) st = time_collective(w, k, send, recv, big_count, &tl, &bl);
        double factor = ts_comm_busbw_factor(cal_op_kind[k], n);
        lat[k] = ts;
        bw[k] = factor * (bl - bs) / (tl - ts);
        double floor = factor > 0 ? factor * bl / tl : bl / tl;
        if (!(tl > ts) || !(bw[k] > 0) || !isfinite(bw[k]) || bw[k] > CAL_BW_OVER_FLOOR * floor) {
            /* the small call no faster than the large, or nearly as slow
             * (a disturbed run: a small call preempted makes the difference
             * tiny and the rate absurd, 4e10 GB/s seen): the large call's
             * rate alone, latency and all, a floor */
            lat[k] = fmin(ts, tl);
            bw[k] = floor;
        }
    }
    int rc = 0;
    if (st) {
        fprintf(stderr, "tessera: rank %d: %s\n", rank, ts_last_error());
        rc = 1;
    } else if (rank == 0) {
        double C = b.C, N = b.N, T = b.T, B = b.B;
        /* attention: the causal half the kernels compute (T + 1) / 2T of
         * the whole, as the clock charges it */
        double gemm_flops = 6.0 * N * C * 4 * C,
               att_flops = 12.0 * B * T * T * C * (T + 1) / (2 * T);
        double f32 = gemm_flops / t_f32, bf16 = gemm_flops / t_bf16, att = att_flops / t_att;
        /* the blocks: 4B chunks of T/4, a diagonal and a whole block */
        double Tc = (double)(b.T / 4);
        double blk_flops = 12.0 * 4 * B * Tc * Tc * C * (1.0 + (Tc + 1) / (2 * Tc));
        double blk = t_blk > 0 ? blk_flops / t_blk : att;
        double membw = memory_mix_bytes(&b) / t_mem;
        cal_text *t = calloc(1, sizeof *t);
        if (!t) {
            fprintf(stderr, "tessera: plan --calibrate: out of memory\n");
            rc = 1;
        }
        if (t) {
            cal_printf(t,
                       "; written by tessera plan --calibrate: %d ranks side by side on this "
                       "machine, the kernels at %d x %d rows of width %d, %d heads\n"
                       "; (what each rank measured while all ran; efficiencies 1: the peaks "
                       "are the measured rates)\n[cluster]\n",
                       n, b.B, b.T, b.C, b.NH);
            cal_key(t, "gpus_per_node", n);
            cal_key(t, "nodes", 1);
            cal_key(t, "memory_gb", mem_gb);
            cal_key(t, "memory_reserve_gb", 0);
            cal_key(t, "flops_fp32", f32);
            cal_key(t, "flops_bf16", bf16);
            cal_key(t, "matmul_efficiency", 1);
            cal_key(t, "attention_efficiency", att / bf16);
            cal_key(t, "attention_block_efficiency", blk / bf16);
            cal_key(t, "memory_bandwidth_gbs", membw / 1e9);
            cal_key(t, "kernel_us", t_tiny * 1e6);
            cal_printf(t, "; MPI progresses a transfer only inside a call: nothing hides it\n"
                          "comm_overlap = false\n"
                          "; the CPU cores the ranks share (0: no fewer than the ranks)\n");
            cal_key(t, "cores_per_node", cpus > 0 && cpus < n ? (double)cpus : 0.0);
            for (int side = 0; side < 2; side++) {
                const char *link = side ? "inter" : "intra";
                char key[96];
                snprintf(key, sizeof key, "%s_bandwidth_gbs", link);
                cal_key(t, key, bw[0] / 1e9);
                snprintf(key, sizeof key, "%s_latency_us", link);
                cal_key(t, key, lat[0] * 1e6);
                for (int k = 0; k < CAL_OPS; k++) {
                    snprintf(key, sizeof key, "%s_%s_bandwidth_gbs", link, cal_op_keys[k]);
                    cal_key(t, key, bw[k] / 1e9);
                    snprintf(key, sizeof key, "%s_%s_latency_us", link, cal_op_keys[k]);
                    cal_key(t, key, lat[k] * 1e6);
                }
            }
            const void *bufs[1] = {t->buf};
            size_t sizes[1] = {t->len};
            if (t->bad[0]) {
                fprintf(stderr,
                        "tessera: plan --calibrate: %s (a disturbed measurement?); %s not "
                        "written\n",
                        t->bad, out_path);
                rc = 1;
            } else if (t->full) {
                fprintf(stderr, "tessera: plan --calibrate: the cluster file's text is too long\n");
                rc = 1;
            } else if (ts_write_atomic(out_path, 1, bufs, sizes) != TS_OK) {
                fprintf(stderr, "tessera: plan --calibrate --cluster: %s\n", ts_last_error());
                rc = 1;
            } else {
                fprintf(say,
                        "calibrated %d ranks side by side: GEMM %.3g GFLOP/s f32, %.3g bf16; "
                        "attention %.3g GFLOP/s (cp's blocks %.3g); memory-bound kernels %.3g "
                        "GB/s; a kernel %.3g us; "
                        "all_reduce %.3g us + %.3g GB/s bus (%s)\n",
                        n, f32 / 1e9, bf16 / 1e9, att / 1e9, blk / 1e9, membw / 1e9, t_tiny * 1e6,
                        lat[0] * 1e6, bw[0] / 1e9, out_path);
            }
            free(t);
        }
    }
    /* every rank learns whether rank 0 wrote the file */
    int32_t ok = rc, any = 0;
    if (ts_comm_all_reduce(w, &ok, &any, 1, TS_I32, TS_REDUCE_MAX) != TS_OK) any = 1;
    void *bufs[] = {b.x,    b.y,    b.dx,  b.w,    b.dw,  b.w16,     b.big,  b.dbig, b.pre,
                    b.mean, b.rstd, b.qkv, b.dqkv, b.att, b.scratch, b.work, b.lse};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        be->free(bufs[i]);
    free(send);
    free(recv);
    ts_comm_world_finalize(w);
    return any ? 1 : 0;
}
