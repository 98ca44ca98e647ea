/*
 * test_dispatch_parity.c — three token dispatchers given the same routing
 * must agree bit for bit: the ep plugin's "all_to_all" and "all_gather" and
 * the example "flex" (examples/flex-dispatcher). Every rank routes random
 * tokens to TOPK distinct experts each (as a top-k router does), some
 * choices dropped (dest -1); the experts compute out = row * (e + 1) + e;
 * after each dispatcher's dispatch and combine, expert_counts, expert_rows,
 * expert_probs and rows_out must equal all_to_all's, and rows_out must be
 * each row's expected output (zero when dropped).
 *
 * Bytes: flex sends each token once per destination rank, so its dispatch
 * must send exactly (duplicates) x C x 4 bytes fewer than all_to_all's,
 * duplicates being this rank's routed rows minus its distinct (token,
 * destination rank) pairs, counted here from the routing; both combines send
 * the same; all_gather's dispatch sends each routed row to every other rank.
 *
 * usage: mpirun -np N test_dispatch_parity CONFIG EXPERTS TOPK ROUNDS
 *   CONFIG loads tessera-ep_dispatchers.so and tessera-flex.so.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "config.h"
#include "plugin.h"
#include "rng.h"
#include "tessera/comm.h"
#include "test_dispatch_setup.h"

static int fails;
#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);                  \
            fails++;                                                                               \
        }                                                                                          \
    } while (0)

#define NDISP 3
static const char *const names[NDISP] = {"all_to_all", "all_gather", "flex"};
enum { A2A, GATHER, FLEX };

/* What one dispatcher gave for one round (host copies). */
typedef struct result {
    int64_t nexp;              /* expert rows                          */
    int64_t *counts;           /* (L)                                  */
    float *rows, *probs, *out; /* (nexp, C), (nexp) or NULL, (nrows, C) */
    int64_t sent_dispatch, sent_combine;
} result;

/* The expert's function, row by row: out = in * (e + 1) + e. */
static float expert_fn(float x, int e) {
    return x * (float)(e + 1) + (float)e;
}

/* Dispatches and combines args' routing with dispatcher d; fills res. */
static void run_one(const ts_plugin_dispatcher_entry *d, void *state, ts_plugin_dispatch_args a,
                    float *rows_out, result *res) {
    int L = a.local_experts, C = a.hidden;
    res->counts = calloc((size_t)L, sizeof(int64_t));
    a.expert_counts = res->counts;
    ts_status st = d->ops.dispatch(d->ctx, state, &a);
    if (st) fprintf(stderr, "%s: dispatch: %s\n", d->name, ts_last_error());
    CHECK(st == TS_OK);
    res->nexp = a.expert_nrows;
    res->sent_dispatch = a.bytes_sent;
    size_t n = (size_t)a.expert_nrows * C;
    res->rows = malloc((n + 1) * sizeof(float));
    memcpy(res->rows, a.expert_rows, n * sizeof(float));
    res->probs = NULL;
    CHECK(a.probs ? a.expert_probs != NULL : a.expert_probs == NULL);
    if (a.probs && a.expert_probs) {
        res->probs = malloc(((size_t)a.expert_nrows + 1) * sizeof(float));
        memcpy(res->probs, a.expert_probs, (size_t)a.expert_nrows * sizeof(float));
    }
    float *out = ts_mem_alloc(TS_MEM_OTHER, (n + 1) * sizeof(float));
    int64_t k = 0;
    for (int e = 0; e < L; e++)
        for (int64_t i = 0; i < res->counts[e]; i++, k++)
            for (int c = 0; c < C; c++)
                out[k * C + c] = expert_fn(a.expert_rows[k * C + c], a.first_expert + e);
    a.expert_rows_in = out;
    a.rows_out = rows_out;
    st = d->ops.combine(d->ctx, state, &a);
    if (st) fprintf(stderr, "%s: combine: %s\n", d->name, ts_last_error());
    CHECK(st == TS_OK);
    res->sent_combine = a.bytes_sent;
    res->out = malloc(((size_t)a.nrows * C + 1) * sizeof(float));
    memcpy(res->out, rows_out, (size_t)a.nrows * C * sizeof(float));
    ts_mem_free(out);
}

static void result_free(result *r) {
    free(r->counts), free(r->rows), free(r->probs), free(r->out);
}

/* 1 when the n floats at x and y are the same bits (NULL only with NULL). */
static int same(const float *x, const float *y, size_t n) {
    if (!x || !y) return x == y;
    return memcmp(x, y, n * sizeof(float)) == 0;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: test_dispatch_parity CONFIG EXPERTS TOPK ROUNDS\n");
        return 2;
    }
    ts_comm *world = NULL;
    ts_config *cfg = NULL;
    ts_plugins *reg = NULL;
    if (dispatch_setup(&argc, &argv, "test_dispatch_parity", &world, &cfg, &reg)) return 1;
    const ts_plugin_dispatcher_entry *d[NDISP];
    void *state[NDISP] = {0};
    for (int i = 0; i < NDISP; i++) {
        d[i] = ts_plugins_dispatcher(reg, names[i]);
        if (!d[i]) {
            fprintf(stderr, "test_dispatch_parity: %s\n", ts_last_error());
            return 1;
        }
        if (d[i]->ops.create) CHECK(d[i]->ops.create(d[i]->ctx, d[i]->user, &state[i]) == TS_OK);
    }
    int R = ts_comm_size(world), me = ts_comm_rank(world);
    int E = atoi(argv[2]), topk = atoi(argv[3]), rounds = atoi(argv[4]), L = E / R, C = 6;
    if (topk < 1 || topk > E || E % R) {
        fprintf(stderr,
                "test_dispatch_parity: TOPK in [1, EXPERTS], EXPERTS a multiple of ranks\n");
        return 2;
    }
    size_t row = (size_t)C * sizeof(float);
    int64_t total[NDISP][2] = {{0}}, total_dups = 0;
    for (int round = 0; round < rounds; round++) {
        uint64_t key = ts_rng_key(11 + (uint64_t)round, "dispatch_parity");
        uint64_t mine = (uint64_t)me << 32;
        int nsrc = round == 0 && me == 0 ? 0 : 4 + (int)(ts_rng_u64(key, mine) % 17);
        int nrows = nsrc * topk;
        float *src = ts_mem_alloc(TS_MEM_OTHER, ((size_t)nsrc * C + 1) * sizeof(float));
        float *back = ts_mem_alloc(TS_MEM_OTHER, ((size_t)nrows * C + 1) * sizeof(float));
        int32_t *dest = malloc(((size_t)nrows + 1) * sizeof *dest);
        int32_t *srci = malloc(((size_t)nrows + 1) * sizeof *srci);
        float *probs = malloc(((size_t)nrows + 1) * sizeof *probs);
        uint8_t *to_rank = calloc((size_t)R, 1), *chosen = calloc((size_t)E, 1);
        for (int64_t i = 0; i < (int64_t)nsrc * C; i++)
            src[i] = 2 * ts_rng_uniform(key, mine + 1000 + (uint64_t)i) - 1;
        /* top-k: TOPK distinct experts per token, each dropped with p = 1/8. */
        int64_t routed = 0, pairs = 0; /* pairs: distinct (token, destination rank) */
        for (int t = 0; t < nsrc; t++) {
            memset(chosen, 0, (size_t)E);
            memset(to_rank, 0, (size_t)R);
            for (int j = 0; j < topk; j++) {
                int r = t * topk + j;
                uint64_t v = ts_rng_u64(key, mine + 100000 + (uint64_t)r);
                int e = (int)(v % (uint64_t)E);
                while (chosen[e])
                    e = (e + 1) % E;
                chosen[e] = 1;
                dest[r] = (v >> 20) % 8 == 0 ? -1 : e;
                srci[r] = t;
                probs[r] = ts_rng_uniform(key, mine + 200000 + (uint64_t)r);
                if (dest[r] < 0) continue;
                routed++;
                pairs += !to_rank[e / L];
                to_rank[e / L] = 1;
            }
        }
        int64_t dups = routed - pairs;
        int with_probs = round % 2 == 1;
        ts_plugin_dispatch_args a = {.struct_size = sizeof a,
                                     .experts = E,
                                     .local_experts = L,
                                     .first_expert = me * L,
                                     .hidden = C,
                                     .comm = world,
                                     .host_comm = world,
                                     .nrows = nrows,
                                     .dest = dest,
                                     .src_index = srci,
                                     .src = src,
                                     .nsrc = nsrc,
                                     .probs = with_probs ? probs : NULL};
        result res[NDISP];
        for (int i = 0; i < NDISP; i++)
            run_one(d[i], state[i], a, back, &res[i]);
        /* Every dispatcher against all_to_all, and all_to_all against the rows. */
        for (int i = 1; i < NDISP; i++) {
            int ok = res[i].nexp == res[A2A].nexp;
            for (int e = 0; ok && e < L; e++)
                ok = res[i].counts[e] == res[A2A].counts[e];
            ok = ok && same(res[i].rows, res[A2A].rows, (size_t)res[i].nexp * C);
            ok = ok && same(res[i].probs, res[A2A].probs, with_probs ? (size_t)res[i].nexp : 0);
            ok = ok && same(res[i].out, res[A2A].out, (size_t)nrows * C);
            if (!ok) {
                fprintf(stderr, "rank %d round %d: %s differs from all_to_all\n", me, round,
                        names[i]);
                fails++;
            }
        }
        for (int r = 0; r < nrows; r++)
            for (int c = 0; c < C; c++) {
                float want = dest[r] < 0 ? 0.0f : expert_fn(src[srci[r] * C + c], dest[r]);
                if (res[A2A].out[r * C + c] != want) {
                    fprintf(stderr, "rank %d round %d row %d: %g back, want %g\n", me, round, r,
                            res[A2A].out[r * C + c], want);
                    fails++;
                    break;
                }
            }
        /* Bytes: flex saves exactly the duplicates; combines move the same. */
        CHECK(res[A2A].sent_dispatch == routed * (int64_t)row);
        CHECK(res[FLEX].sent_dispatch == res[A2A].sent_dispatch - dups * (int64_t)row);
        CHECK(res[FLEX].sent_combine == res[A2A].sent_combine);
        CHECK(res[GATHER].sent_dispatch == routed * (int64_t)row * (R - 1));
        /* Summed over the ranks (int32: far below 2^31 at these sizes). */
        int32_t bytes[2 * NDISP + 1], sum[2 * NDISP + 1];
        for (int i = 0; i < NDISP; i++) {
            bytes[2 * i] = (int32_t)res[i].sent_dispatch;
            bytes[2 * i + 1] = (int32_t)res[i].sent_combine;
        }
        bytes[2 * NDISP] = (int32_t)dups;
        ts_comm_all_reduce(world, bytes, sum, 2 * NDISP + 1, TS_I32, TS_REDUCE_SUM);
        for (int i = 0; i < NDISP; i++)
            total[i][0] += sum[2 * i], total[i][1] += sum[2 * i + 1];
        total_dups += sum[2 * NDISP];
        if (me == 0)
            printf("round %d%s: dispatch bytes (all ranks) all_to_all %lld, flex %lld (%lld "
                   "duplicate rows not sent), all_gather %lld; combine all_to_all %lld, flex "
                   "%lld, all_gather %lld\n",
                   round, with_probs ? " (probs)" : "", (long long)sum[2 * A2A],
                   (long long)sum[2 * FLEX], (long long)sum[2 * NDISP], (long long)sum[2 * GATHER],
                   (long long)sum[2 * A2A + 1], (long long)sum[2 * FLEX + 1],
                   (long long)sum[2 * GATHER + 1]);
        for (int i = 0; i < NDISP; i++)
            result_free(&res[i]);
        ts_mem_free(src);
        ts_mem_free(back);
        free(dest), free(srci), free(probs), free(to_rank), free(chosen);
    }
    for (int i = 0; i < NDISP; i++)
        if (d[i]->ops.destroy) d[i]->ops.destroy(d[i]->ctx, state[i]);
    int32_t bad = fails, any = 0;
    ts_comm_all_reduce(world, &bad, &any, 1, TS_I32, TS_REDUCE_SUM);
    if (me == 0) {
        printf("total dispatch bytes: all_to_all %lld, flex %lld (%lld fewer; %lld duplicate "
               "rows x %zu bytes = %lld), all_gather %lld\n",
               (long long)total[A2A][0], (long long)total[FLEX][0],
               (long long)(total[A2A][0] - total[FLEX][0]), (long long)total_dups, row,
               (long long)(total_dups * (int64_t)row), (long long)total[GATHER][0]);
        printf("parity: %d ranks, %d experts, top-%d, %d rounds, %d failures\n", R, E, topk, rounds,
               any);
    }
    ts_plugins_destroy(reg);
    ts_config_destroy(cfg);
    ts_comm_world_finalize(world);
    return any ? 1 : 0;
}
