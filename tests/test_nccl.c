/*
 * test_nccl.c — the NCCL backend (core/backend/cuda/comm_nccl.c) against serial references,
 * under mpirun with one GPU per rank.
 *
 * Every rank builds deterministic inputs from its rank, uploads them to its
 * GPU, runs an operation on the NCCL communicator, downloads the result and
 * compares it with what it computes locally. Covered: all_reduce (sum, max,
 * min; f32, bf16, i32; in place and out of place; blocking, `_start` + test),
 * all_gather(v), reduce_scatter(_v) (in place too), all_to_all(v), broadcast,
 * send/recv exchanged with `_start` forms outside any group (held back and
 * issued together) and inside an explicit group, barrier, split (reversed
 * keys, singletons, a rank that joins none), counters, ordering after the
 * compute stream (a large copy enqueued on it just before an all_reduce),
 * and a steady state of allocate / all_reduce / free with no cudaMalloc.
 *
 * Modes:
 *   test_nccl                 the suite; 2+ ranks and a GPU per rank, else
 *                             every rank exits 77 (ctest: skipped)
 *   test_nccl --probe N       no MPI: exits 0 if N GPUs are visible, else 77
 *   test_nccl --timeout-abort the last rank never joins an all_reduce on axis
 *                             'nccl-dp' (timeout 2 s): the others must end
 *                             the job (tests/run_expect_fail.sh checks it)
 *
 * Inputs are small integers, exact in f32 and bf16 and in their sums over a
 * few ranks, so results are compared bit for bit.
 */
#define _POSIX_C_SOURCE 200809L /* nanosleep */

#include <stdio.h>  /* fprintf */
#include <stdlib.h> /* malloc, free, exit, atoi */
#include <string.h> /* memcmp, strcmp */
#include <time.h>   /* nanosleep */

#include <cuda_runtime_api.h> /* a compute stream of our own, for the ordering case */

#include "tessera/comm.h"
#include "tessera/device.h"

#include "test_ranks.h"

/* ---------------------------------------------------------------------------
 * Inputs, references, device buffers
 * ------------------------------------------------------------------------- */

static int small_int(int r, size_t i) {
    return (int)((r * 7 + i * 3) % 11) - 5;
}

static void fill(void *buf, ts_dtype dt, int r, size_t off, size_t count) {
    for (size_t i = 0; i < count; i++) {
        int v = small_int(r, off + i);
        if (dt == TS_F32)
            ((float *)buf)[i] = (float)v;
        else if (dt == TS_BF16)
            ((uint16_t *)buf)[i] = ts_f32_to_bf16((float)v);
        else
            ((int32_t *)buf)[i] = v * 1000 + r;
    }
}

static void reduce_ref(void *out, ts_dtype dt, ts_reduce_op op, int n, size_t g) {
    long acc = 0;
    for (int r = 0; r < n; r++) {
        int s = small_int(r, g);
        long v = dt == TS_I32 ? (long)s * 1000 + r : s;
        acc = r == 0                ? v
              : op == TS_REDUCE_SUM ? acc + v
              : op == TS_REDUCE_MAX ? (v > acc ? v : acc)
                                    : (v < acc ? v : acc);
    }
    if (dt == TS_F32)
        *(float *)out = (float)acc;
    else if (dt == TS_BF16)
        *(uint16_t *)out = ts_f32_to_bf16((float)acc);
    else
        *(int32_t *)out = (int32_t)acc;
}

static int check_reduced(const char *what, const void *got, ts_dtype dt, ts_reduce_op op, int n,
                         size_t off, size_t count) {
    size_t es = ts_dtype_size(dt);
    for (size_t i = 0; i < count; i++) {
        unsigned char want[4];
        reduce_ref(want, dt, op, n, off + i);
        if (memcmp(want, (const char *)got + i * es, es)) {
            CHECK(0, "%s: element %zu (global %zu) of %zu differs", what, i, off + i, count);
            return 0;
        }
    }
    return 1;
}

static int check_input(const char *what, const void *got, ts_dtype dt, int r, size_t off,
                       size_t count) {
    size_t es = ts_dtype_size(dt);
    unsigned char *want = malloc(count * es + 1);
    fill(want, dt, r, off, count);
    int ok = memcmp(want, got, count * es) == 0;
    CHECK(ok, "%s: rank %d's block (offset %zu, %zu elements) differs", what, r, off, count);
    free(want);
    return ok;
}

static void *dev_alloc(size_t bytes) {
    void *p = ts_device_alloc(TS_MEM_COMM, bytes);
    if (!p) {
        fprintf(stderr, "[world rank %d] ts_device_alloc: %s\n", check_rank, ts_last_error());
        exit(1);
    }
    return p;
}

static void *host_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) exit(2);
    return p;
}

static void up(void *dev, const void *host, size_t bytes) {
    OK(ts_device_copy(dev, host, bytes));
}
static void down(void *host, const void *dev, size_t bytes) {
    OK(ts_device_copy(host, dev, bytes));
}

/* ---------------------------------------------------------------------------
 * Cases
 * ------------------------------------------------------------------------- */

static void case_all_reduce(ts_comm *c) {
    static const ts_dtype dts[] = {TS_F32, TS_BF16, TS_I32};
    static const ts_reduce_op ops[] = {TS_REDUCE_SUM, TS_REDUCE_MAX, TS_REDUCE_MIN};
    int r = ts_comm_rank(c), n = ts_comm_size(c);
    size_t count = 1000003;
    for (int d = 0; d < 3; d++)
        for (int o = 0; o < 3; o++)
            for (int mode = 0; mode < 3; mode++) { /* out of place, in place, start + test */
                ts_dtype dt = dts[d];
                size_t bytes = count * ts_dtype_size(dt);
                void *h = host_alloc(bytes), *s = dev_alloc(bytes), *v = dev_alloc(bytes);
                fill(h, dt, r, 0, count);
                up(s, h, bytes);
                void *out = mode == 1 ? s : v;
                if (mode == 2) {
                    ts_comm_request *q = NULL;
                    OK(ts_comm_all_reduce_start(c, s, out, count, dt, ops[o], &q));
                    int done = 0;
                    while (!done)
                        OK(ts_comm_test(q, &done));
                } else {
                    OK(ts_comm_all_reduce(c, s, out, count, dt, ops[o]));
                }
                down(h, out, bytes);
                char what[64];
                snprintf(what, sizeof what, "all_reduce %s %s mode %d", ts_dtype_name(dt),
                         ts_reduce_op_name(ops[o]), mode);
                check_reduced(what, h, dt, ops[o], n, 0, count);
                ts_device_free(s);
                ts_device_free(v);
                free(h);
            }
}

static void case_gather_scatter(ts_comm *c) {
    int r = ts_comm_rank(c), n = ts_comm_size(c);
    size_t count = 777, es = sizeof(float);
    float *h = host_alloc((size_t)n * count * es);
    void *s = dev_alloc(count * es), *g = dev_alloc((size_t)n * count * es);

    /* all_gather, out of place then in place */
    for (int inplace = 0; inplace < 2; inplace++) {
        fill(h, TS_F32, r, 0, count);
        void *src = inplace ? (char *)g + (size_t)r * count * es : s;
        up(src, h, count * es);
        OK(ts_comm_all_gather(c, src, g, count, TS_F32));
        down(h, g, (size_t)n * count * es);
        for (int p = 0; p < n; p++)
            check_input("all_gather", h + (size_t)p * count, TS_F32, p, 0, count);
    }

    /* all_gatherv: uneven blocks of a total that does not divide */
    size_t total = 1001, *counts = host_alloc((size_t)n * sizeof *counts), off = 0, mine = 0;
    for (int p = 0; p < n; p++)
        ts_comm_block_range(total, n, p, NULL, &counts[p]);
    ts_comm_block_range(total, n, r, &off, &mine);
    float *hv = host_alloc(total * es);
    void *gv = dev_alloc(total * es);
    fill(hv, TS_F32, r, off, mine);
    up(s, hv, mine * es);
    OK(ts_comm_all_gatherv(c, s, gv, counts, TS_F32));
    down(hv, gv, total * es);
    for (int p = 0, o = 0; p < n; o += (int)counts[p], p++)
        check_input("all_gatherv", hv + o, TS_F32, p, (size_t)o, counts[p]);

    /* reduce_scatter, out of place then in place (NCCL's convention) */
    for (int inplace = 0; inplace < 2; inplace++) {
        fill(h, TS_F32, r, 0, (size_t)n * count);
        up(g, h, (size_t)n * count * es);
        void *dst = inplace ? (char *)g + (size_t)r * count * es : s;
        OK(ts_comm_reduce_scatter(c, g, dst, count, TS_F32, TS_REDUCE_SUM));
        down(h, dst, count * es);
        check_reduced("reduce_scatter", h, TS_F32, TS_REDUCE_SUM, n, (size_t)r * count, count);
    }

    /* reduce_scatter_v */
    fill(hv, TS_BF16, r, 0, total); /* bf16 in a float-sized buffer: room enough */
    up(gv, hv, total * 2);
    OK(ts_comm_reduce_scatter_v(c, gv, s, counts, TS_BF16, TS_REDUCE_SUM));
    down(hv, s, mine * 2);
    check_reduced("reduce_scatter_v bf16", hv, TS_BF16, TS_REDUCE_SUM, n, off, mine);

    /* broadcast from the last rank */
    fill(h, TS_F32, r, 0, count);
    up(s, h, count * es);
    OK(ts_comm_broadcast(c, s, count, TS_F32, n - 1));
    down(h, s, count * es);
    check_input("broadcast", h, TS_F32, n - 1, 0, count);

    ts_device_free(s);
    ts_device_free(g);
    ts_device_free(gv);
    free(h);
    free(hv);
    free(counts);
}

/* Element i of the block rank `from` sends to rank `to`. */
static int32_t a2a_val(int from, int to, size_t i) {
    return from * 100000 + to * 1000 + (int)i;
}

static void case_all_to_all(ts_comm *c) {
    int r = ts_comm_rank(c), n = ts_comm_size(c);
    size_t count = 513;
    int32_t *h = host_alloc((size_t)n * count * 4);
    void *s = dev_alloc((size_t)n * count * 4), *d = dev_alloc((size_t)n * count * 4);
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++)
            h[(size_t)p * count + i] = a2a_val(r, p, i);
    up(s, h, (size_t)n * count * 4);
    OK(ts_comm_all_to_all(c, s, d, count, TS_I32));
    down(h, d, (size_t)n * count * 4);
    int ok = 1;
    for (int p = 0; p < n; p++)
        for (size_t i = 0; i < count; i++)
            ok &= h[(size_t)p * count + i] == a2a_val(p, r, i);
    CHECK(ok, "all_to_all");

    /* all_to_allv: rank p sends (p + q) % 3 * 100 elements to rank q (some zero) */
    size_t *sc = host_alloc((size_t)n * sizeof *sc), *rc = host_alloc((size_t)n * sizeof *rc);
    size_t stot = 0, rtot = 0;
    for (int q = 0; q < n; q++) {
        sc[q] = (size_t)((r + q) % 3) * 100;
        rc[q] = (size_t)((q + r) % 3) * 100;
        stot += sc[q];
        rtot += rc[q];
    }
    int32_t *hs = host_alloc(stot * 4), *hr = host_alloc(rtot * 4);
    for (int q = 0, o = 0; q < n; o += (int)sc[q], q++)
        for (size_t i = 0; i < sc[q]; i++)
            hs[(size_t)o + i] = a2a_val(r, q, i);
    void *vs = dev_alloc(stot * 4 + 4), *vr = dev_alloc(rtot * 4 + 4);
    up(vs, hs, stot * 4);
    OK(ts_comm_all_to_allv(c, vs, sc, NULL, vr, rc, NULL, TS_I32));
    down(hr, vr, rtot * 4);
    ok = 1;
    for (int q = 0, o = 0; q < n; o += (int)rc[q], q++)
        for (size_t i = 0; i < rc[q]; i++)
            ok &= hr[(size_t)o + i] == a2a_val(q, r, i);
    CHECK(ok, "all_to_allv");
    ts_device_free(s);
    ts_device_free(d);
    ts_device_free(vs);
    ts_device_free(vr);
    free(h);
    free(sc);
    free(rc);
    free(hs);
    free(hr);
}

static void case_send_recv(ts_comm *c) {
    int r = ts_comm_rank(c), n = ts_comm_size(c);
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    size_t count = 4099;
    float *h = host_alloc(count * 4);
    void *s = dev_alloc(count * 4), *d = dev_alloc(count * 4);
    fill(h, TS_F32, r, 0, count);
    up(s, h, count * 4);

    /* A ring with `_start` forms outside any group: every rank sends before it
     * receives, which deadlocks unless the backend issues both together. */
    ts_comm_request *q[2];
    OK(ts_comm_send_start(c, s, count, TS_F32, next, 7, &q[0]));
    OK(ts_comm_recv_start(c, d, count, TS_F32, prev, 7, &q[1]));
    OK(ts_comm_wait_all(q, 2));
    down(h, d, count * 4);
    check_input("ring send/recv", h, TS_F32, prev, 0, count);

    /* The same ring plus an all_reduce inside an explicit group. */
    void *a = dev_alloc(count * 4);
    fill(h, TS_F32, r, 0, count);
    up(a, h, count * 4);
    ts_comm_request *g[3];
    OK(ts_comm_nccl_group_start());
    OK(ts_comm_send_start(c, s, count, TS_F32, next, 0, &g[0]));
    OK(ts_comm_recv_start(c, d, count, TS_F32, prev, 0, &g[1]));
    OK(ts_comm_all_reduce_start(c, a, a, count, TS_F32, TS_REDUCE_SUM, &g[2]));
    OK(ts_comm_nccl_group_end());
    OK(ts_comm_wait_all(g, 3));
    down(h, d, count * 4);
    check_input("grouped send/recv", h, TS_F32, prev, 0, count);
    down(h, a, count * 4);
    check_reduced("grouped all_reduce", h, TS_F32, TS_REDUCE_SUM, n, 0, count);

    /* Blocking, ordered pairs: even ranks send first, odd ranks receive first. */
    if (n % 2 == 0) {
        int peer = r ^ 1;
        fill(h, TS_F32, r, 0, count);
        up(s, h, count * 4);
        if (r % 2 == 0) {
            OK(ts_comm_send(c, s, count, TS_F32, peer, 1));
            OK(ts_comm_recv(c, d, count, TS_F32, peer, 1));
        } else {
            OK(ts_comm_recv(c, d, count, TS_F32, peer, 1));
            OK(ts_comm_send(c, s, count, TS_F32, peer, 1));
        }
        down(h, d, count * 4);
        check_input("blocking send/recv", h, TS_F32, peer, 0, count);
    }
    OK(ts_comm_barrier(c));
    ts_device_free(s);
    ts_device_free(d);
    ts_device_free(a);
    free(h);
}

static void case_split(ts_comm *c) {
    int r = ts_comm_rank(c), n = ts_comm_size(c);
    ts_comm *rev = NULL, *odd = NULL, *half = NULL;
    /* Everyone, reversed. */
    OK(ts_comm_split(c, 0, n - r, "rev", &rev));
    if (rev) {
        CHECK(ts_comm_rank(rev) == n - 1 - r && !strcmp(ts_comm_backend(rev), "nccl"),
              "reversed split: rank %d", ts_comm_rank(rev));
        int32_t *h = host_alloc((size_t)n * 4);
        void *s = dev_alloc(4), *g = dev_alloc((size_t)n * 4);
        int32_t me = check_rank;
        up(s, &me, 4);
        OK(ts_comm_all_gather(rev, s, g, 1, TS_I32));
        down(h, g, (size_t)n * 4);
        for (int i = 0; i < n; i++)
            CHECK(h[i] == ts_comm_world_rank(rev, i) && h[i] == n - 1 - i,
                  "reversed member %d is world rank %d", i, h[i]);
        ts_device_free(s);
        ts_device_free(g);
        free(h);
    }
    /* Singletons by parity in pairs, and a rank that joins none. */
    OK(ts_comm_split(c, r % 2, r, "parity", &odd));
    OK(ts_comm_split(c, r == n - 1 ? -1 : 0, r, "half", &half));
    CHECK((r == n - 1) == (half == NULL), "color -1 joins none");
    if (odd) {
        int m = ts_comm_size(odd);
        void *s = dev_alloc(4);
        int32_t v = check_rank, want = 0;
        for (int i = 0; i < m; i++)
            want += ts_comm_world_rank(odd, i);
        up(s, &v, 4);
        OK(ts_comm_all_reduce(odd, s, s, 1, TS_I32, TS_REDUCE_SUM));
        down(&v, s, 4);
        CHECK(v == want, "parity all_reduce %d, want %d", v, want);
        ts_comm_op_counter k = ts_comm_counter(odd, TS_COMM_ALL_REDUCE);
        CHECK(k.calls == 1 && k.bytes == 4, "counters: %llu calls, %llu bytes",
              (unsigned long long)k.calls, (unsigned long long)k.bytes);
        ts_device_free(s);
    }
    ts_comm_free(half);
    ts_comm_free(odd);
    ts_comm_free(rev);
}

/* A large memset and copy enqueued on the compute stream right before an
 * all_reduce of the copy's destination: the reduction must see the result. */
static void case_stream_order(ts_comm *c) {
    int n = ts_comm_size(c);
    size_t count = (size_t)64 << 20; /* 256 MiB of f32 */
    cudaStream_t st;
    CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) == cudaSuccess, "stream");
    ts_device_set_stream(st);
    void *a = dev_alloc(count * 4), *b = dev_alloc(count * 4); /* zeroed on `st` */
    CHECK(cudaMemsetAsync(a, 1, count * 4, st) == cudaSuccess, "memset");
    CHECK(cudaMemcpyAsync(b, a, count * 4, cudaMemcpyDeviceToDevice, st) == cudaSuccess, "copy");
    OK(ts_comm_all_reduce(c, b, b, count, TS_F32, TS_REDUCE_SUM));
    float h[1024], one, want = 0.0f;
    memset(&one, 1, sizeof one); /* the float whose bytes are all 0x01 */
    for (int i = 0; i < n; i++)
        want += one; /* exact: a few times a small mantissa */
    down(h, (float *)b + count - 1024, sizeof h);
    int ok = 1;
    for (int i = 0; i < 1024; i++)
        ok &= h[i] == want;
    CHECK(ok, "all_reduce after work on the compute stream saw stale data (%g, want %g)",
          (double)h[0], (double)want);
    OK(ts_device_synchronize());
    ts_device_free(a);
    ts_device_free(b);
    ts_device_set_stream(NULL);
    cudaStreamDestroy(st);
}

static void case_steady_state(ts_comm *c) {
    uint64_t before = 0;
    for (int step = 0; step < 8; step++) {
        if (step == 2) before = ts_device_pool_stats().cuda_mallocs;
        void *act = dev_alloc(24 << 20), *grad = dev_alloc(10 << 20);
        OK(ts_comm_all_reduce(c, grad, grad, (10 << 20) / 4, TS_F32, TS_REDUCE_SUM));
        ts_device_free(act);
        ts_device_free(grad);
    }
    uint64_t calls = ts_device_pool_stats().cuda_mallocs - before;
    CHECK(calls == 0, "steady-state steps called cudaMalloc %llu times", (unsigned long long)calls);
}

/* ---------------------------------------------------------------------------
 * main
 * ------------------------------------------------------------------------- */

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--probe")) {
        int want = atoi(argv[2]), have = ts_device_count();
        if (have < want) printf("SKIP: %d GPU(s) visible, %d needed\n", have, want);
        return have >= want ? 0 : 77;
    }
    int timeout_mode = argc > 1 && !strcmp(argv[1], "--timeout-abort");
    ts_comm *world = NULL;
    if (ts_comm_world_init(&argc, &argv, 60.0, &world)) {
        fprintf(stderr, "test_nccl: %s\n", ts_last_error());
        return 1;
    }
    check_rank = ts_comm_rank(world);
    int n = ts_comm_size(world);
    /* Every rank agrees to skip: fewer than 2 ranks, or fewer GPUs than ranks. */
    int32_t ok = n >= 2 && ts_device_count() >= n, all = 0;
    if (ts_comm_all_reduce(world, &ok, &all, 1, TS_I32, TS_REDUCE_MIN) || !all) {
        if (check_rank == 0)
            printf("SKIP: test_nccl needs 2+ ranks and a GPU each (%d ranks, %d GPUs here)\n", n,
                   ts_device_count());
        ts_comm_world_finalize(world);
        return 77;
    }

    ts_comm *nccl = NULL;
    ts_status st = ts_comm_nccl_create(world, timeout_mode ? "nccl-dp" : "nccl-world", &nccl);
    if (st) {
        fprintf(stderr, "[world rank %d] ts_comm_nccl_create: %s\n", check_rank, ts_last_error());
        ts_comm_abort(world, 1);
    }

    if (timeout_mode) {
        ts_comm_set_timeout(nccl, 2.0);
        void *b = dev_alloc(1000 * 4);
        if (check_rank == n - 1) {
            sleep_s(30.0); /* never joins; the others end the job */
        } else {
            ts_comm_all_reduce(nccl, b, b, 1000, TS_F32, TS_REDUCE_SUM);
            fprintf(stderr, "test_nccl: the all_reduce returned instead of aborting\n");
        }
        return 3;
    }

    CHECK(!strcmp(ts_comm_backend(nccl), "nccl"), "backend %s", ts_comm_backend(nccl));
    CHECK(ts_comm_rank(nccl) == check_rank && ts_comm_size(nccl) == n, "rank/size");
    case_all_reduce(nccl);
    case_gather_scatter(nccl);
    case_all_to_all(nccl);
    case_send_recv(nccl);
    case_split(nccl);
    case_stream_order(nccl);
    case_steady_state(nccl);

    ts_comm_op_counter k = ts_comm_counter(nccl, TS_COMM_ALL_REDUCE);
    CHECK(k.calls > 0 && k.bytes > 0, "all_reduce counters are charged");
    ts_comm_free(nccl);

    int32_t mine = check_failures, fails = 0;
    ts_comm_all_reduce(world, &mine, &fails, 1, TS_I32, TS_REDUCE_SUM);
    if (check_rank == 0)
        printf("test_nccl: %d ranks, %s (%d failed checks)\n", n, fails ? "FAILED" : "ok", fails);
    ts_comm_world_finalize(world);
    return fails ? 1 : 0;
}
