/*
 * test_comm.c — the communicator against serial references, run under mpirun
 * with any number of ranks (and as an MPI singleton).
 *
 * Every rank builds deterministic inputs from its own rank in the
 * communicator under test, so every rank can compute the expected result of
 * a collective locally. Each op runs blocking and non-blocking, in f32, bf16
 * and i32, with counts that do not divide the world (7, 1000003), uneven v
 * forms, in place and out of place, on the world, on split sub-groups
 * (even/odd, reversed keys, nested) and on the self communicator. Then:
 * counters after a known sequence, bandwidth arithmetic, a timeout that
 * returns an error, argument errors.
 *
 * Modes:
 *   test_comm                 the suite; exits 0 when every rank passed
 *   test_comm --timeout-abort 3+ ranks: the last rank never joins an
 *                             all_reduce on axis 'dp' (timeout 2 s); the
 *                             others must abort the job with a message
 *                             (checked by tests/run_expect_fail.sh)
 *
 * bf16 inputs are small integers, so every partial sum is exact and results
 * are compared bit for bit; one bf16 sum of non-integer values is compared
 * with a tolerance of n * 2^-8 * sum|x| (one bf16 rounding, at most 2^-9 of
 * the partial sum's magnitude, per combining step).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep under -std=c11 */

#include <math.h>   /* fabsf */
#include <stdio.h>  /* fprintf */
#include <stdlib.h> /* malloc, free */
#include <string.h> /* strstr, memcpy */
#include <time.h>   /* clock_gettime, nanosleep */

#include "tessera/comm.h"

#include "test_ranks.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "test_comm: out of memory\n");
        exit(2);
    }
    return p;
}

/* ---------------------------------------------------------------------------
 * Deterministic inputs
 * ------------------------------------------------------------------------- */

/* An integer in [-5, 5]: exact in f32 and bf16, and so are sums over <= 8 ranks. */
static int small_int(int r, size_t i) {
    return (int)((r * 7 + i * 3) % 11) - 5;
}

/* A value in [-1, 1) that bf16 represents exactly but sums of which it does not. */
static float frac_val(int r, size_t i) {
    uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(i * 2246822519u);
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    float f = (float)(h & 0xffff) / 32768.0f - 1.0f;
    return ts_bf16_to_f32(ts_f32_to_bf16(f));
}

static int32_t i32_val(int r, size_t i) {
    return (int32_t)(r * 1000 + (int)(i % 997)) - 3000;
}

/* Fills a buffer of `count` elements with rank r's inputs (small_int / i32). */
static void fill(void *buf, ts_dtype dt, int r, size_t off, size_t count) {
    for (size_t i = 0; i < count; i++) {
        size_t g = off + i;
        if (dt == TS_F32)
            ((float *)buf)[i] = (float)small_int(r, g);
        else if (dt == TS_BF16)
            ((uint16_t *)buf)[i] = ts_f32_to_bf16((float)small_int(r, g));
        else
            ((int32_t *)buf)[i] = i32_val(r, g);
    }
}

/* The reduction over ranks 0..n-1 of element g, as the dtype's bits. */
static void reduce_ref(void *out, ts_dtype dt, ts_reduce_op op, int n, size_t g) {
    if (dt == TS_I32) {
        int64_t acc = i32_val(0, g);
        for (int r = 1; r < n; r++) {
            int64_t v = i32_val(r, g);
            acc = op == TS_REDUCE_SUM   ? acc + v
                  : op == TS_REDUCE_MAX ? (v > acc ? v : acc)
                                        : (v < acc ? v : acc);
        }
        *(int32_t *)out = (int32_t)acc;
        return;
    }
    int acc = small_int(0, g);
    for (int r = 1; r < n; r++) {
        int v = small_int(r, g);
        acc = op == TS_REDUCE_SUM   ? acc + v
              : op == TS_REDUCE_MAX ? (v > acc ? v : acc)
                                    : (v < acc ? v : acc);
    }
    if (dt == TS_F32)
        *(float *)out = (float)acc;
    else
        *(uint16_t *)out = ts_f32_to_bf16((float)acc);
}

/* Compares `count` reduced elements starting at global element `off`. */
static int check_reduced(const char *what, const void *got, ts_dtype dt, ts_reduce_op op, int n,
                         size_t off, size_t count) {
    size_t es = ts_dtype_size(dt);
    for (size_t i = 0; i < count; i++) {
        unsigned char want[4];
        reduce_ref(want, dt, op, n, off + i);
        if (memcmp(want, (const char *)got + i * es, es) != 0) {
            CHECK(0, "%s: element %zu (global index %zu) of %zu differs", what, i, off + i, count);
            return 0;
        }
    }
    return 1;
}

/* Compares `count` elements of rank r's input starting at global element off. */
static int check_input(const char *what, const void *got, ts_dtype dt, int r, size_t off,
                       size_t count) {
    size_t es = ts_dtype_size(dt);
    unsigned char *want = xmalloc(count * es);
    fill(want, dt, r, off, count);
    int same = memcmp(want, got, count * es) == 0;
    free(want);
    CHECK(same, "%s: rank %d's block (offset %zu, count %zu) differs", what, r, off, count);
    return same;
}

static const ts_dtype dtypes[] = {TS_F32, TS_BF16, TS_I32};

/* ---------------------------------------------------------------------------
 * The operations
 * ------------------------------------------------------------------------- */

static void test_all_reduce(ts_comm *c) {
    int n = ts_comm_size(c), me = ts_comm_rank(c);
    static const size_t counts[] = {0, 1, 7, 1000003};
    static const ts_reduce_op ops[] = {TS_REDUCE_SUM, TS_REDUCE_MAX, TS_REDUCE_MIN};
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        size_t count = counts[ci];
        for (int d = 0; d < 3; d++) {
            ts_dtype dt = dtypes[d];
            size_t es = ts_dtype_size(dt);
            void *send = xmalloc(count * es), *recv = xmalloc(count * es);
            for (int o = 0; o < 3; o++) {
                char what[96];
                /* out of place, blocking */
                snprintf(what, sizeof what, "all_reduce %s %s count %zu", ts_dtype_name(dt),
                         ts_reduce_op_name(ops[o]), count);
                fill(send, dt, me, 0, count);
                OK(ts_comm_all_reduce(c, send, recv, count, dt, ops[o]));
                check_reduced(what, recv, dt, ops[o], n, 0, count);
                check_input("all_reduce leaves send alone", send, dt, me, 0, count);
                /* in place, non-blocking */
                snprintf(what, sizeof what, "all_reduce in place start %s %s count %zu",
                         ts_dtype_name(dt), ts_reduce_op_name(ops[o]), count);
                fill(recv, dt, me, 0, count);
                ts_comm_request *req = NULL;
                OK(ts_comm_all_reduce_start(c, recv, recv, count, dt, ops[o], &req));
                OK(ts_comm_wait(req));
                check_reduced(what, recv, dt, ops[o], n, 0, count);
                if (count > 1000) break; /* big buffers: sum only, to keep the test short */
            }
            free(send);
            free(recv);
        }
    }

    /* bf16 sum of non-integers: within n * 2^-8 * sum|x|. */
    size_t count = 1000003;
    uint16_t *b = xmalloc(count * 2);
    for (size_t i = 0; i < count; i++)
        b[i] = ts_f32_to_bf16(frac_val(me, i));
    OK(ts_comm_all_reduce(c, b, b, count, TS_BF16, TS_REDUCE_SUM));
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        float ref = 0, mag = 0;
        for (int r = 0; r < n; r++) {
            ref += frac_val(r, i);
            mag += fabsf(frac_val(r, i));
        }
        if (fabsf(ts_bf16_to_f32(b[i]) - ref) > (float)n * mag / 256.0f + 1e-30f) bad++;
    }
    CHECK(bad == 0, "bf16 all_reduce of fractions: %zu of %zu elements beyond tolerance", bad,
          count);
    free(b);

    /* Several outstanding requests, completed out of order, one by polling. */
    enum { K = 4, CNT = 1000 };
    float *bufs[K];
    ts_comm_request *reqs[K];
    for (int k = 0; k < K; k++) {
        bufs[k] = xmalloc(CNT * sizeof(float));
        for (size_t i = 0; i < CNT; i++)
            bufs[k][i] = (float)small_int(me, i + (size_t)k * CNT);
        OK(ts_comm_all_reduce_start(c, bufs[k], bufs[k], CNT, TS_F32, TS_REDUCE_SUM, &reqs[k]));
    }
    int done = 0;
    double t0 = now_s();
    while (!done && now_s() - t0 < 60)
        OK(ts_comm_test(reqs[K - 1], &done));
    CHECK(done, "ts_comm_test never reported the all_reduce done");
    OK(ts_comm_wait(reqs[1]));
    reqs[1] = NULL;
    reqs[K - 1] = NULL;
    OK(ts_comm_wait_all(reqs, K));
    for (int k = 0; k < K; k++) {
        check_reduced("outstanding all_reduce", bufs[k], TS_F32, TS_REDUCE_SUM, n, (size_t)k * CNT,
                      CNT);
        free(bufs[k]);
    }
}

static void test_all_gather(ts_comm *c) {
    int n = ts_comm_size(c), me = ts_comm_rank(c);
    static const size_t counts[] = {1, 7, 1001};
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        size_t count = counts[ci];
        for (int d = 0; d < 3; d++) {
            ts_dtype dt = dtypes[d];
            size_t es = ts_dtype_size(dt);
            char *send = xmalloc(count * es), *recv = xmalloc((size_t)n * count * es);
            /* block r holds rank r's inputs at global offset r*count */
            fill(send, dt, me, (size_t)me * count, count);
            OK(ts_comm_all_gather(c, send, recv, count, dt));
            for (int r = 0; r < n; r++)
                check_input("all_gather", recv + (size_t)r * count * es, dt, r, (size_t)r * count,
                            count);
            /* in place (send inside recv), non-blocking */
            memset(recv, 0, (size_t)n * count * es);
            fill(recv + (size_t)me * count * es, dt, me, (size_t)me * count, count);
            ts_comm_request *req;
            OK(ts_comm_all_gather_start(c, recv + (size_t)me * count * es, recv, count, dt, &req));
            OK(ts_comm_wait(req));
            for (int r = 0; r < n; r++)
                check_input("all_gather in place", recv + (size_t)r * count * es, dt, r,
                            (size_t)r * count, count);
            free(send);
            free(recv);
        }
    }

    /* all_gatherv: uneven blocks, some empty, and the torch.tensor_split rule. */
    for (int variant = 0; variant < 2; variant++) {
        size_t *cnt = xmalloc((size_t)n * sizeof *cnt), total = 0;
        for (int r = 0; r < n; r++) {
            if (variant == 0)
                cnt[r] = (size_t)((r * 5 + 3) % 4);
            else
                ts_comm_block_range(1000003, n, r, NULL, &cnt[r]);
            total += cnt[r];
        }
        for (int d = 0; d < 2; d++) {
            ts_dtype dt = dtypes[d];
            size_t es = ts_dtype_size(dt), off;
            char *recv = xmalloc(total * es), *send;
            off = 0;
            for (int r = 0; r < me; r++)
                off += cnt[r];
            send = xmalloc(cnt[me] * es);
            fill(send, dt, me, off, cnt[me]);
            ts_comm_request *req;
            OK(ts_comm_all_gatherv_start(c, send, recv, cnt, dt, &req));
            OK(ts_comm_wait(req));
            size_t o = 0;
            for (int r = 0; r < n; r++) {
                check_input("all_gatherv", recv + o * es, dt, r, o, cnt[r]);
                o += cnt[r];
            }
            memset(recv, 0, total * es);
            fill(recv + off * es, dt, me, off, cnt[me]);
            OK(ts_comm_all_gatherv(c, recv + off * es, recv, cnt, dt));
            o = 0;
            for (int r = 0; r < n; r++) {
                check_input("all_gatherv in place", recv + o * es, dt, r, o, cnt[r]);
                o += cnt[r];
            }
            free(send);
            free(recv);
        }
        free(cnt);
    }
}

static void test_reduce_scatter(ts_comm *c) {
    int n = ts_comm_size(c), me = ts_comm_rank(c);
    static const size_t counts[] = {1, 7, 100003};
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        size_t count = counts[ci], total = (size_t)n * count;
        for (int d = 0; d < 3; d++) {
            ts_dtype dt = dtypes[d];
            size_t es = ts_dtype_size(dt);
            char *send = xmalloc(total * es), *recv = xmalloc(count * es);
            ts_reduce_op op = d == 2 ? TS_REDUCE_MAX : TS_REDUCE_SUM;
            fill(send, dt, me, 0, total);
            OK(ts_comm_reduce_scatter(c, send, recv, count, dt, op));
            check_reduced("reduce_scatter", recv, dt, op, n, (size_t)me * count, count);
            /* in place: recv is this rank's block of send */
            fill(send, dt, me, 0, total);
            ts_comm_request *req;
            OK(ts_comm_reduce_scatter_start(c, send, send + (size_t)me * count * es, count, dt, op,
                                            &req));
            OK(ts_comm_wait(req));
            check_reduced("reduce_scatter in place", send + (size_t)me * count * es, dt, op, n,
                          (size_t)me * count, count);
            free(send);
            free(recv);
        }
    }

    /* reduce_scatter_v: the uneven split of 1000003 elements, and tiny blocks. */
    for (int variant = 0; variant < 2; variant++) {
        size_t *cnt = xmalloc((size_t)n * sizeof *cnt), total = 0, off = 0;
        for (int r = 0; r < n; r++) {
            if (variant == 0)
                ts_comm_block_range(1000003, n, r, NULL, &cnt[r]);
            else
                cnt[r] = (size_t)(r % 3);
            total += cnt[r];
        }
        for (int r = 0; r < me; r++)
            off += cnt[r];
        for (int d = 0; d < 3; d++) {
            ts_dtype dt = dtypes[d];
            size_t es = ts_dtype_size(dt);
            char *send = xmalloc(total * es), *recv = xmalloc(cnt[me] * es);
            fill(send, dt, me, 0, total);
            ts_comm_request *req;
            OK(ts_comm_reduce_scatter_v_start(c, send, recv, cnt, dt, TS_REDUCE_SUM, &req));
            OK(ts_comm_wait(req));
            check_reduced("reduce_scatter_v", recv, dt, TS_REDUCE_SUM, n, off, cnt[me]);
            OK(ts_comm_reduce_scatter_v(c, send, recv, cnt, dt, TS_REDUCE_MIN));
            check_reduced("reduce_scatter_v min", recv, dt, TS_REDUCE_MIN, n, off, cnt[me]);
            free(send);
            free(recv);
        }
        free(cnt);
    }
}

/* all_to_all payloads: element j of the block src sends to dst. */
static int32_t a2a_val(int src, int dst, size_t j) {
    return src * 1000000 + dst * 10000 + (int32_t)j;
}
/* all_to_allv block sizes: some empty. */
static size_t a2a_cnt(int src, int dst) {
    return (size_t)((src * 3 + dst * 5) % 4);
}

static void test_all_to_all(ts_comm *c) {
    int n = ts_comm_size(c), me = ts_comm_rank(c);
    static const size_t counts[] = {1, 5, 3001};
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        size_t count = counts[ci], total = (size_t)n * count;
        int32_t *send = xmalloc(total * 4), *recv = xmalloc(total * 4);
        for (int d = 0; d < n; d++)
            for (size_t j = 0; j < count; j++)
                send[(size_t)d * count + j] = a2a_val(me, d, j);
        for (int nb = 0; nb < 2; nb++) {
            memset(recv, 0, total * 4);
            if (nb) {
                ts_comm_request *req;
                OK(ts_comm_all_to_all_start(c, send, recv, count, TS_I32, &req));
                OK(ts_comm_wait(req));
            } else {
                OK(ts_comm_all_to_all(c, send, recv, count, TS_I32));
            }
            size_t bad = 0;
            for (int s = 0; s < n; s++)
                for (size_t j = 0; j < count; j++)
                    bad += recv[(size_t)s * count + j] != a2a_val(s, me, j);
            CHECK(bad == 0, "all_to_all count %zu: %zu wrong elements", count, bad);
        }
        /* bf16 travels as 2-byte elements: check the bits arrive. */
        uint16_t *hs = xmalloc(total * 2), *hr = xmalloc(total * 2);
        for (size_t i = 0; i < total; i++)
            hs[i] = (uint16_t)(me * 4099 + i);
        OK(ts_comm_all_to_all(c, hs, hr, count, TS_BF16));
        size_t bad = 0;
        for (int s = 0; s < n; s++)
            for (size_t j = 0; j < count; j++)
                bad += hr[(size_t)s * count + j] != (uint16_t)(s * 4099 + (size_t)me * count + j);
        CHECK(bad == 0, "all_to_all bf16 count %zu: %zu wrong elements", count, bad);
        free(hs);
        free(hr);
        free(send);
        free(recv);
    }

    /* all_to_allv, packed (NULL displs) and with gaps between blocks. */
    size_t *sc = xmalloc((size_t)n * sizeof *sc), *rc = xmalloc((size_t)n * sizeof *rc);
    size_t *sd = xmalloc((size_t)n * sizeof *sd), *rd = xmalloc((size_t)n * sizeof *rd);
    size_t st = 0, rt = 0;
    for (int p = 0; p < n; p++) {
        sc[p] = a2a_cnt(me, p);
        rc[p] = a2a_cnt(p, me);
        sd[p] = st + 2 * (size_t)p;
        rd[p] = rt + 3 * (size_t)p;
        st += sc[p];
        rt += rc[p];
    }
    for (int gaps = 0; gaps < 2; gaps++) {
        size_t slen = st + 2 * (size_t)n, rlen = rt + 3 * (size_t)n;
        int32_t *send = xmalloc(slen * 4), *recv = xmalloc(rlen * 4);
        for (size_t i = 0; i < rlen; i++)
            recv[i] = -7;
        size_t o = 0;
        for (int d = 0; d < n; d++) {
            size_t base = gaps ? sd[d] : o;
            for (size_t j = 0; j < sc[d]; j++)
                send[base + j] = a2a_val(me, d, j);
            o += sc[d];
        }
        ts_comm_request *req;
        OK(ts_comm_all_to_allv_start(c, send, sc, gaps ? sd : NULL, recv, rc, gaps ? rd : NULL,
                                     TS_I32, &req));
        OK(ts_comm_wait(req));
        size_t bad = 0, untouched = 0;
        o = 0;
        for (int s = 0; s < n; s++) {
            size_t base = gaps ? rd[s] : o;
            for (size_t j = 0; j < rc[s]; j++)
                bad += recv[base + j] != a2a_val(s, me, j);
            if (gaps)
                for (size_t j = 0; j < 3; j++)
                    untouched += recv[base + rc[s] + j] == -7;
            o += rc[s];
        }
        CHECK(bad == 0, "all_to_allv (gaps %d): %zu wrong elements", gaps, bad);
        if (gaps) CHECK(untouched == 3 * (size_t)n, "all_to_allv wrote into the gaps");
        /* the blocking form, f32 */
        float *fs = xmalloc(slen * 4), *fr = xmalloc(rlen * 4);
        for (size_t i = 0; i < slen; i++)
            fs[i] = (float)send[i];
        OK(ts_comm_all_to_allv(c, fs, sc, gaps ? sd : NULL, fr, rc, gaps ? rd : NULL, TS_F32));
        bad = 0;
        o = 0;
        for (int s = 0; s < n; s++) {
            size_t base = gaps ? rd[s] : o;
            for (size_t j = 0; j < rc[s]; j++)
                bad += fr[base + j] != (float)a2a_val(s, me, j);
            o += rc[s];
        }
        CHECK(bad == 0, "all_to_allv f32 (gaps %d): %zu wrong elements", gaps, bad);
        free(fs);
        free(fr);
        free(send);
        free(recv);
    }
    free(sc);
    free(rc);
    free(sd);
    free(rd);
}

static void test_broadcast(ts_comm *c) {
    int n = ts_comm_size(c), me = ts_comm_rank(c);
    int roots[2] = {0, n - 1};
    for (int ri = 0; ri < 2; ri++) {
        int root = roots[ri];
        for (int d = 0; d < 3; d++) {
            ts_dtype dt = dtypes[d];
            size_t count = d == 0 ? 1000003 : 7, es = ts_dtype_size(dt);
            char *buf = xmalloc(count * es);
            if (me == root)
                fill(buf, dt, root, 0, count);
            else
                memset(buf, 0x5a, count * es);
            if (d == 1) {
                ts_comm_request *req;
                OK(ts_comm_broadcast_start(c, buf, count, dt, root, &req));
                OK(ts_comm_wait(req));
            } else {
                OK(ts_comm_broadcast(c, buf, count, dt, root));
            }
            check_input("broadcast", buf, dt, root, 0, count);
            free(buf);
        }
    }
}

static void test_p2p(ts_comm *c) {
    int n = ts_comm_size(c), me = ts_comm_rank(c);
    if (n < 2) return;
    /* A ring, non-blocking: every rank sends to the next and receives from
     * the previous at the same time. */
    size_t count = 100003;
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    for (int d = 0; d < 3; d++) {
        ts_dtype dt = dtypes[d];
        size_t es = ts_dtype_size(dt);
        char *send = xmalloc(count * es), *recv = xmalloc(count * es);
        fill(send, dt, me, 0, count);
        ts_comm_request *reqs[2];
        OK(ts_comm_recv_start(c, recv, count, dt, prev, 7, &reqs[0]));
        OK(ts_comm_send_start(c, send, count, dt, next, 7, &reqs[1]));
        OK(ts_comm_wait_all(reqs, 2));
        check_input("ring send/recv", recv, dt, prev, 0, count);
        free(send);
        free(recv);
    }
    /* Pairs, blocking, ordered by parity so nobody deadlocks. Two messages
     * with one tag arrive in order. */
    int partner = me ^ 1;
    if (partner < n) {
        float out[2][5], in[2][5];
        for (int m = 0; m < 2; m++)
            for (int j = 0; j < 5; j++)
                out[m][j] = (float)(me * 100 + m * 10 + j);
        for (int step = 0; step < 2; step++) {
            if ((me & 1) == step) {
                OK(ts_comm_send(c, out[0], 5, TS_F32, partner, 3));
                OK(ts_comm_send(c, out[1], 5, TS_F32, partner, 3));
            } else {
                OK(ts_comm_recv(c, in[0], 5, TS_F32, partner, 3));
                OK(ts_comm_recv(c, in[1], 5, TS_F32, partner, 3));
            }
        }
        int bad = 0;
        for (int m = 0; m < 2; m++)
            for (int j = 0; j < 5; j++)
                bad += in[m][j] != (float)(partner * 100 + m * 10 + j);
        CHECK(bad == 0, "pairwise send/recv: %d wrong elements", bad);
    }
}

static void test_barrier(ts_comm *c) {
    OK(ts_comm_barrier(c));
    ts_comm_request *req;
    OK(ts_comm_barrier_start(c, &req));
    int done = 0;
    double t0 = now_s();
    while (!done && now_s() - t0 < 60)
        OK(ts_comm_test(req, &done));
    CHECK(done, "barrier never completed under ts_comm_test");
}

static void run_suite(ts_comm *c) {
    test_all_reduce(c);
    test_all_gather(c);
    test_reduce_scatter(c);
    test_all_to_all(c);
    test_broadcast(c);
    test_p2p(c);
    test_barrier(c);
}

/* ---------------------------------------------------------------------------
 * Split, counters, bandwidth, errors
 * ------------------------------------------------------------------------- */

static void test_splits(ts_comm *world) {
    int n = ts_comm_size(world), me = ts_comm_rank(world);
    double t0 = now_s();

    /* even / odd */
    ts_comm *par = NULL;
    OK(ts_comm_split(world, me % 2, me, "parity", &par));
    CHECK(par != NULL, "split returned no communicator");
    if (!par) return;
    CHECK(strcmp(ts_comm_name(par), "parity") == 0, "split name '%s'", ts_comm_name(par));
    CHECK(ts_comm_rank(par) == me / 2, "parity rank %d, expected %d", ts_comm_rank(par), me / 2);
    CHECK(ts_comm_size(par) == (n + 1 - me % 2) / 2, "parity size %d", ts_comm_size(par));
    for (int r = 0; r < ts_comm_size(par); r++)
        CHECK(ts_comm_world_rank(par, r) == 2 * r + me % 2, "parity member %d is world rank %d", r,
              ts_comm_world_rank(par, r));
    CHECK(ts_comm_timeout(par) == ts_comm_timeout(world), "split does not inherit the timeout");
    run_suite(par);

    /* nested: halves of each parity group */
    int ps = ts_comm_size(par), pr = ts_comm_rank(par);
    ts_comm *half = NULL;
    OK(ts_comm_split(par, pr < ps / 2, pr, "half", &half));
    if (half) {
        int base = pr < ps / 2 ? 0 : ps / 2;
        CHECK(ts_comm_rank(half) == pr - base, "nested rank %d", ts_comm_rank(half));
        for (int r = 0; r < ts_comm_size(half); r++)
            CHECK(ts_comm_world_rank(half, r) == 2 * (base + r) + me % 2,
                  "nested member %d is world rank %d", r, ts_comm_world_rank(half, r));
        test_all_gather(half);
        test_all_reduce(half);
    }
    ts_comm_free(half);
    ts_comm_free(par);

    /* reversed keys: rank order follows the key, not the parent rank */
    ts_comm *rev = NULL;
    OK(ts_comm_split(world, 0, -me, "rev", &rev));
    if (rev) {
        CHECK(ts_comm_rank(rev) == n - 1 - me, "rev rank %d, expected %d", ts_comm_rank(rev),
              n - 1 - me);
        CHECK(ts_comm_world_rank(rev, 0) == n - 1, "rev member 0 is world rank %d",
              ts_comm_world_rank(rev, 0));
        test_all_gather(rev);
        test_reduce_scatter(rev);
        test_p2p(rev);
    }
    ts_comm_free(rev);

    /* color < 0: rank 0 joins nothing */
    ts_comm *rest = NULL;
    OK(ts_comm_split(world, me == 0 ? -1 : 5, 0, "rest", &rest));
    CHECK((rest == NULL) == (me == 0), "color -1 gave a communicator, or color 5 none");
    if (rest) {
        CHECK(ts_comm_size(rest) == n - 1 && ts_comm_rank(rest) == me - 1, "rest rank %d size %d",
              ts_comm_rank(rest), ts_comm_size(rest));
        if (n > 1) test_all_reduce(rest);
    }
    ts_comm_free(rest);
    if (me == 0) printf("  splits: %.2fs\n", now_s() - t0);
}

static void expect_counter(ts_comm *c, ts_comm_op op, uint64_t calls, uint64_t bytes) {
    ts_comm_op_counter k = ts_comm_counter(c, op);
    CHECK(k.calls == calls && k.bytes == bytes,
          "counter %s: calls %llu bytes %llu, expected %llu and %llu", ts_comm_op_name(op),
          (unsigned long long)k.calls, (unsigned long long)k.bytes, (unsigned long long)calls,
          (unsigned long long)bytes);
    CHECK(k.seconds >= 0 && (calls == 0 || k.seconds > 0), "counter %s: seconds %g",
          ts_comm_op_name(op), k.seconds);
}

static void test_counters(ts_comm *world) {
    int me = ts_comm_rank(world), n = ts_comm_size(world);
    ts_comm *c = NULL;
    OK(ts_comm_split(world, 0, me, "ctr", &c));
    if (!c) return;
    uint64_t N = (uint64_t)n;
    float f[64] = {0};
    uint16_t h[64] = {0};
    int32_t i[64] = {0};
    float g[1024];
    size_t cnt[64];
    ts_comm_request *req;

    for (int k = 0; k < 64; k++)
        cnt[k] = 1;
    OK(ts_comm_all_reduce(c, f, f, 10, TS_F32, TS_REDUCE_SUM));             /* 40 bytes */
    OK(ts_comm_all_reduce_start(c, h, h, 6, TS_BF16, TS_REDUCE_MAX, &req)); /* 12 bytes */
    OK(ts_comm_wait(req));
    OK(ts_comm_all_gather(c, f, g, 3, TS_F32));                          /* 3*4*n  */
    OK(ts_comm_all_gatherv(c, f, g, cnt, TS_I32));                       /* 4*n    */
    OK(ts_comm_reduce_scatter(c, h, h + 32, 1, TS_BF16, TS_REDUCE_SUM)); /* 2*n */
    OK(ts_comm_reduce_scatter_v(c, f, g, cnt, TS_F32, TS_REDUCE_SUM));   /* 4*n */
    OK(ts_comm_all_to_all(c, i, g, 2, TS_I32));                          /* 2*4*n  */
    OK(ts_comm_all_to_allv(c, f, cnt, NULL, g, cnt, NULL, TS_F32));      /* 4*n */
    OK(ts_comm_broadcast(c, f, 5, TS_F32, 0));                           /* 20     */
    OK(ts_comm_barrier(c));
    OK(ts_comm_barrier_start(c, &req));
    OK(ts_comm_wait(req));
    int partner = me ^ 1, paired = partner < n;
    if (paired) {
        ts_comm_request *rr[2];
        OK(ts_comm_recv_start(c, g, 8, TS_F32, partner, 1, &rr[0]));
        OK(ts_comm_send_start(c, f, 8, TS_F32, partner, 1, &rr[1]));
        OK(ts_comm_wait_all(rr, 2));
    }
    /* argument errors are not counted */
    CHECK(ts_comm_all_reduce(c, f, f, 4, TS_F16, TS_REDUCE_SUM) == TS_ERR_INVALID,
          "an f16 all_reduce was accepted");
    CHECK(strstr(ts_last_error(), "f16") != NULL, "message '%s' does not name the dtype",
          ts_last_error());
    CHECK(ts_comm_broadcast(c, f, 1, TS_F32, n) == TS_ERR_INVALID, "root %d accepted", n);
    CHECK(ts_comm_send(c, f, 1, TS_F32, me, 0) == TS_ERR_INVALID, "send to self accepted");
    CHECK(ts_comm_all_reduce(c, NULL, f, 4, TS_F32, TS_REDUCE_SUM) == TS_ERR_INVALID,
          "a NULL buffer was accepted");

    expect_counter(c, TS_COMM_ALL_REDUCE, 2, 52);
    expect_counter(c, TS_COMM_ALL_GATHER, 2, 12 * N + 4 * N);
    expect_counter(c, TS_COMM_REDUCE_SCATTER, 2, 2 * N + 4 * N);
    expect_counter(c, TS_COMM_ALL_TO_ALL, 2, 8 * N + 4 * N);
    expect_counter(c, TS_COMM_BROADCAST, 1, 20);
    expect_counter(c, TS_COMM_BARRIER, 2, 0);
    expect_counter(c, TS_COMM_SEND, paired, paired ? 32 : 0);
    expect_counter(c, TS_COMM_RECV, paired, paired ? 32 : 0);

    char buf[1024], want[128];
    size_t len = 0;
    OK(ts_comm_counters_json(c, buf, sizeof buf, &len));
    CHECK(len == strlen(buf), "json length %zu != %zu", len, strlen(buf));
    snprintf(want, sizeof want, "\"ctr\":{\"all_reduce\":{\"calls\":2,\"bytes\":52,\"seconds\":");
    CHECK(strncmp(buf, want, strlen(want)) == 0, "json '%s' does not start with '%s'", buf, want);
    snprintf(want, sizeof want, "\"all_gather\":{\"calls\":2,\"bytes\":%llu,",
             (unsigned long long)(16 * N));
    CHECK(strstr(buf, want) != NULL, "json '%s' lacks '%s'", buf, want);
    CHECK(strstr(buf, "\"barrier\":{\"calls\":2,\"bytes\":0,") != NULL,
          "json '%s' lacks the barrier", buf);
    CHECK(buf[len - 1] == '}' && buf[len - 2] == '}', "json '%s' is not closed", buf);
    size_t need = 0;
    CHECK(ts_comm_counters_json(c, buf, 16, &need) == TS_ERR_INVALID && need == len &&
              strlen(buf) == 15,
          "a short json buffer was not reported (need %zu, len %zu)", need, len);

    ts_comm_counters_reset(c);
    expect_counter(c, TS_COMM_ALL_REDUCE, 0, 0);
    OK(ts_comm_counters_json(c, buf, sizeof buf, &len));
    CHECK(strcmp(buf, "\"ctr\":{}") == 0, "json after reset: '%s'", buf);
    ts_comm_free(c);
}

static void test_bandwidth(void) {
    CHECK(ts_comm_busbw_factor(TS_COMM_ALL_REDUCE, 4) == 1.5, "all_reduce factor");
    CHECK(ts_comm_busbw_factor(TS_COMM_ALL_GATHER, 4) == 0.75, "all_gather factor");
    CHECK(ts_comm_busbw_factor(TS_COMM_REDUCE_SCATTER, 8) == 0.875, "reduce_scatter factor");
    CHECK(ts_comm_busbw_factor(TS_COMM_ALL_TO_ALL, 2) == 0.5, "all_to_all factor");
    CHECK(ts_comm_busbw_factor(TS_COMM_BROADCAST, 8) == 1.0, "broadcast factor");
    CHECK(ts_comm_busbw_factor(TS_COMM_SEND, 8) == 1.0, "send factor");
    CHECK(ts_comm_busbw_factor(TS_COMM_BARRIER, 8) == 0.0, "barrier factor");
    CHECK(ts_comm_busbw_factor(TS_COMM_ALL_REDUCE, 1) == 0.0, "one rank moves nothing");
    double alg = 0, bus = 0;
    ts_comm_bandwidth(TS_COMM_ALL_REDUCE, 4, 1000000000u, 2.0, &alg, &bus);
    CHECK(alg == 5e8 && bus == 7.5e8, "bandwidth %g %g", alg, bus);
    ts_comm_bandwidth(TS_COMM_ALL_REDUCE, 4, 1000, 0.0, &alg, &bus);
    CHECK(alg == 0 && bus == 0, "bandwidth of zero seconds");
    /* the uneven split rule: 10 over 4 is 3,3,2,2 at 0,3,6,8 */
    size_t want_c[4] = {3, 3, 2, 2}, want_o[4] = {0, 3, 6, 8};
    for (int p = 0; p < 4; p++) {
        size_t o, k;
        ts_comm_block_range(10, 4, p, &o, &k);
        CHECK(o == want_o[p] && k == want_c[p], "block_range part %d: %zu at %zu", p, k, o);
    }
    size_t o, k;
    ts_comm_block_range(2, 4, 3, &o, &k);
    CHECK(o == 2 && k == 0, "block_range of an empty part: %zu at %zu", k, o);
}

/* A timeout that returns: world ranks 0 and 1 form axis 'pair'; rank 0 waits
 * 0.3 s on a barrier rank 1 joins only after rank 0 has given up. */
static void test_timeout_returns(ts_comm *world) {
    int me = ts_comm_rank(world), n = ts_comm_size(world);
    if (n < 2) return;
    ts_comm *pair = NULL;
    OK(ts_comm_split(world, me < 2 ? 0 : -1, me, "pair", &pair));
    if (me == 0) {
        ts_comm_set_timeout(pair, 0.3);
        ts_comm_set_abort_on_timeout(pair, 0);
        fprintf(stderr, "[world rank 0] expected: a timeout report on axis 'pair' follows\n");
        double t0 = now_s();
        ts_status st = ts_comm_barrier(pair);
        double waited = now_s() - t0;
        const char *msg = ts_last_error();
        CHECK(st == TS_ERR_COMM, "the barrier returned %s, not a timeout", ts_status_name(st));
        CHECK(waited >= 0.3 && waited < 5.0, "the timeout took %.2fs", waited);
        CHECK(strstr(msg, "timeout after 0.3s") && strstr(msg, "axis 'pair'") &&
                  strstr(msg, "barrier #1") && (n < 2 || strstr(msg, "[rank 0/")),
              "timeout message: '%s'", msg);
        float x = 1;
        st = ts_comm_all_reduce(pair, &x, &x, 1, TS_F32, TS_REDUCE_SUM);
        CHECK(st == TS_ERR_COMM && strstr(ts_last_error(), "unusable"),
              "a communicator after a timeout: %s '%s'", ts_status_name(st), ts_last_error());
        int32_t go = 1;
        OK(ts_comm_send(world, &go, 1, TS_I32, 1, 99));
    } else if (me == 1) {
        int32_t go = 0;
        OK(ts_comm_recv(world, &go, 1, TS_I32, 0, 99));
        OK(ts_comm_barrier(pair)); /* matches rank 0's abandoned barrier */
    }
    ts_comm_free(pair);
    OK(ts_comm_barrier(world));
}

/* recv count checks: a shorter message and a longer one. */
static void test_recv_mismatch(ts_comm *world) {
    int me = ts_comm_rank(world), n = ts_comm_size(world);
    if (n < 2 || me > 1) return;
    float buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    if (me == 0) {
        OK(ts_comm_send(world, buf, 3, TS_F32, 1, 11));
        OK(ts_comm_send(world, buf, 8, TS_F32, 1, 12));
    } else {
        ts_status st = ts_comm_recv(world, buf, 5, TS_F32, 0, 11);
        CHECK(st == TS_ERR_COMM && strstr(ts_last_error(), "got 3 elements, expected 5"),
              "short message: %s '%s'", ts_status_name(st), ts_last_error());
        st = ts_comm_recv(world, buf, 4, TS_F32, 0, 12);
        CHECK(st == TS_ERR_COMM && strstr(ts_last_error(), "longer"), "long message: %s '%s'",
              ts_status_name(st), ts_last_error());
    }
}

static int run_timeout_abort(ts_comm *world) {
    int me = ts_comm_rank(world), n = ts_comm_size(world);
    ts_comm *dp = NULL;
    if (ts_comm_split(world, 0, me, "dp", &dp)) {
        fprintf(stderr, "split failed: %s\n", ts_last_error());
        return 1;
    }
    ts_comm_set_timeout(dp, 2.0);
    float x[1000] = {0};
    if (ts_comm_all_reduce(dp, x, x, 1000, TS_F32, TS_REDUCE_SUM)) return 1; /* all_reduce #1 */
    if (me == n - 1) {
        fprintf(stderr, "[world rank %d] not joining all_reduce #2\n", me);
        for (int s = 0; s < 60; s++)
            nanosleep(&(struct timespec){1, 0}, NULL);
        return 0;
    }
    ts_status st = ts_comm_all_reduce(dp, x, x, 1000, TS_F32, TS_REDUCE_SUM);
    fprintf(stderr, "UNEXPECTED: all_reduce returned %s: %s\n", ts_status_name(st),
            ts_last_error());
    return 0;
}

int main(int argc, char **argv) {
    double t_start = now_s();
    ts_comm *world = NULL;
    if (ts_comm_world_init(&argc, &argv, 60.0, &world)) {
        fprintf(stderr, "ts_comm_world_init: %s\n", ts_last_error());
        return 1;
    }
    check_rank = ts_comm_rank(world);
    int n = ts_comm_size(world);
    if (argc > 1 && strcmp(argv[1], "--timeout-abort") == 0) {
        int rc = run_timeout_abort(world);
        ts_comm_world_finalize(world);
        return rc;
    }
    int me = check_rank;
    CHECK(strcmp(ts_comm_name(world), "world") == 0 && strcmp(ts_comm_backend(world), "mpi") == 0,
          "world is '%s' on '%s'", ts_comm_name(world), ts_comm_backend(world));
    CHECK(ts_comm_world_rank(world, me) == me, "world rank mapping");

    double t0 = now_s();
    run_suite(world);
    if (me == 0) printf("  world suite (%d ranks): %.2fs\n", n, now_s() - t0);
    test_splits(world);
    t0 = now_s();
    test_counters(world);
    test_bandwidth();
    test_recv_mismatch(world);
    test_timeout_returns(world);
    if (me == 0) printf("  counters, errors, timeout: %.2fs\n", now_s() - t0);

    /* the self communicator needs no transport */
    ts_comm *self = NULL;
    OK(ts_comm_self_create("self", 1.0, &self));
    if (self) {
        CHECK(ts_comm_size(self) == 1 && strcmp(ts_comm_backend(self), "self") == 0, "self comm");
        run_suite(self);
        ts_comm *sub = NULL;
        OK(ts_comm_split(self, 3, 0, "self2", &sub));
        CHECK(sub && ts_comm_size(sub) == 1, "self split");
        ts_comm_free(sub);
        CHECK(ts_comm_self_create("bad name!", 1.0, &sub) == TS_ERR_INVALID && sub == NULL,
              "a bad axis name was accepted");
    }
    ts_comm_free(self);

    /* every rank's verdict */
    int32_t fails = check_failures;
    ts_status st = ts_comm_all_reduce(world, &fails, &fails, 1, TS_I32, TS_REDUCE_SUM);
    if (st) {
        fprintf(stderr, "final all_reduce: %s\n", ts_last_error());
        fails = 1;
    }
    if (me == 0) {
        if (fails)
            printf("test_comm: FAILED: %d checks failed over %d ranks\n", (int)fails, n);
        else
            printf("test_comm: PASS on %d ranks in %.2fs\n", n, now_s() - t_start);
    }
    ts_comm_world_finalize(world);
    return fails ? 1 : 0;
}
