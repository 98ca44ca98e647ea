/*
 * test_dispatch.c — a token dispatcher plugin, loaded by name from an INI
 * file, checked on N ranks through its contract (include/tessera/plugin.h,
 * ts_plugin_dispatch_args) with identity experts: every rank routes random
 * rows (some dropped, several choices per token, sources shared between
 * rows) to random experts; the experts scale their rows by (expert + 1);
 * after combine every row must hold exactly its source's data times
 * (its expert + 1), dropped rows zero, and each expert must have received
 * exactly the rows routed to it by every rank, in (source rank, row) order,
 * with their routing probabilities (in odd rounds; none in even rounds).
 *
 * usage: mpirun -np N test_dispatch CONFIG NAME EXPERTS ROUNDS
 *   CONFIG loads the dispatcher's plugin; NAME is the dispatcher's name.
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

/* The routing probability of row r of rank `rank`, round `round`. */
static float row_prob(int rank, int round, int r) {
    return 0.25f + 0.001f * (float)(rank * 100 + round * 10) + 0.0001f * (float)r;
}

/* Row r of rank `rank`, round `round`: its value at column c. */
static float row_value(int rank, int round, int src, int c) {
    return (float)(rank * 1000 + round * 100 + src) + 0.001f * (float)c;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: test_dispatch CONFIG NAME EXPERTS ROUNDS\n");
        return 2;
    }
    ts_comm *world = NULL;
    ts_config *cfg = NULL;
    ts_plugins *reg = NULL;
    if (dispatch_setup(&argc, &argv, "test_dispatch", &world, &cfg, &reg)) return 1;
    const ts_plugin_dispatcher_entry *d = ts_plugins_dispatcher(reg, argv[2]);
    if (!d) {
        fprintf(stderr, "test_dispatch: %s\n", ts_last_error());
        return 1;
    }
    int R = ts_comm_size(world), me = ts_comm_rank(world);
    int E = atoi(argv[3]), rounds = atoi(argv[4]), L = E / R, C = 5;
    void *state = NULL;
    if (d->ops.create) CHECK(d->ops.create(d->ctx, d->user, &state) == TS_OK);
    for (int round = 0; round < rounds; round++) {
        /* nsrc sources; each row picks a source and an expert (or none). */
        uint64_t key = ts_rng_key(7 + (uint64_t)round, "dispatch");
        int nsrc = 3 + (int)(ts_rng_u64(key, (uint64_t)me * 1000) % 6);
        int nrows = round == 0 && me == 0 ? 0 : 2 * nsrc;
        float *src = ts_mem_alloc(TS_MEM_OTHER, (size_t)nsrc * C * sizeof(float));
        float *back = ts_mem_alloc(TS_MEM_OTHER, ((size_t)nrows + 1) * C * sizeof(float));
        int32_t *dest = malloc(((size_t)nrows + 1) * sizeof *dest);
        int32_t *srci = malloc(((size_t)nrows + 1) * sizeof *srci);
        float *probs = malloc(((size_t)nrows + 1) * sizeof *probs);
        int64_t *counts = calloc((size_t)L, sizeof *counts);
        for (int s = 0; s < nsrc; s++)
            for (int c = 0; c < C; c++)
                src[s * C + c] = row_value(me, round, s, c);
        for (int r = 0; r < nrows; r++) {
            uint64_t v = ts_rng_u64(key, (uint64_t)me * 1000 + 1 + (uint64_t)r);
            srci[r] = (int32_t)(r / 2); /* two choices per source */
            dest[r] = v % 7 == 0 ? -1 : (int32_t)(v % (uint64_t)E);
            probs[r] = row_prob(me, round, r);
        }
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
                                     .expert_counts = counts,
                                     .probs = with_probs ? probs : NULL};
        ts_status st = d->ops.dispatch(d->ctx, state, &a);
        if (st) fprintf(stderr, "dispatch: %s\n", ts_last_error());
        CHECK(st == TS_OK);
        CHECK(with_probs ? a.expert_probs != NULL : a.expert_probs == NULL);
        /* Every rank's routing, to know what each expert must have got. */
        int32_t total = 0, mine = nrows;
        ts_comm_all_reduce(world, &mine, &total, 1, TS_I32, TS_REDUCE_MAX);
        int32_t *all = calloc((size_t)R * (2 * (size_t)total + 1), sizeof *all);
        int32_t *pack = calloc(2 * (size_t)total + 1, sizeof *pack);
        pack[0] = nrows;
        for (int r = 0; r < nrows; r++) {
            pack[1 + 2 * r] = dest[r];
            pack[2 + 2 * r] = srci[r];
        }
        ts_comm_all_gather(world, pack, all, 2 * (size_t)total + 1, TS_I32);
        /* The expert rows: by local expert, then source rank, then row. */
        int64_t k = 0;
        for (int e = 0; e < L; e++) {
            int64_t want = 0;
            for (int s = 0; s < R; s++) {
                const int32_t *p = all + (size_t)s * (2 * (size_t)total + 1);
                for (int r = 0; r < p[0]; r++) {
                    if (p[1 + 2 * r] != me * L + e) continue;
                    want++;
                    if (with_probs && k < a.expert_nrows && a.expert_probs &&
                        a.expert_probs[k] != row_prob(s, round, r)) {
                        fprintf(stderr, "rank %d expert %d row %lld: probability %g, want %g\n", me,
                                me * L + e, (long long)k, a.expert_probs[k], row_prob(s, round, r));
                        fails++;
                    }
                    for (int c = 0; c < C && k < a.expert_nrows; c++)
                        if (a.expert_rows[k * C + c] != row_value(s, round, p[2 + 2 * r], c)) {
                            fprintf(stderr, "rank %d expert %d row %lld col %d: %g, want %g\n", me,
                                    me * L + e, (long long)k, c, a.expert_rows[k * C + c],
                                    row_value(s, round, p[2 + 2 * r], c));
                            fails++;
                            break;
                        }
                    k++;
                }
            }
            CHECK(counts[e] == want);
        }
        CHECK(k == a.expert_nrows);
        /* The experts: scale by (expert + 1). */
        float *out = ts_mem_alloc(TS_MEM_OTHER, ((size_t)a.expert_nrows + 1) * C * sizeof(float));
        int64_t row = 0;
        for (int e = 0; e < L; e++)
            for (int64_t i = 0; i < counts[e]; i++, row++)
                for (int c = 0; c < C; c++)
                    out[row * C + c] = a.expert_rows[row * C + c] * (float)(me * L + e + 1);
        a.expert_rows_in = out;
        a.rows_out = back;
        st = d->ops.combine(d->ctx, state, &a);
        if (st) fprintf(stderr, "combine: %s\n", ts_last_error());
        CHECK(st == TS_OK);
        for (int r = 0; r < nrows; r++)
            for (int c = 0; c < C; c++) {
                float want = dest[r] < 0 ? 0.0f : row_value(me, round, srci[r], c) * (dest[r] + 1);
                if (back[r * C + c] != want) {
                    fprintf(stderr, "rank %d row %d col %d: %g back, want %g\n", me, r, c,
                            back[r * C + c], want);
                    fails++;
                    break;
                }
            }
        if (me == 0)
            printf("round %d: %lld expert rows on rank 0, %lld bytes sent back\n", round,
                   (long long)a.expert_nrows, (long long)a.bytes_sent);
        ts_mem_free(out);
        ts_mem_free(src);
        ts_mem_free(back);
        free(dest), free(srci), free(probs), free(counts), free(all), free(pack);
    }
    if (d->ops.destroy) d->ops.destroy(d->ctx, state);
    int32_t bad = fails, any = 0;
    ts_comm_all_reduce(world, &bad, &any, 1, TS_I32, TS_REDUCE_SUM);
    if (me == 0)
        printf("%s: %d ranks, %d experts, %d rounds, %d failures\n", argv[2], R, E, rounds, any);
    ts_plugins_destroy(reg);
    ts_config_destroy(cfg);
    ts_comm_world_finalize(world);
    return any ? 1 : 0;
}
