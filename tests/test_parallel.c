/*
 * test_parallel.c — the parallel context's two kinds of communicators
 * (core/parallel/parallel.h), on 4 ranks as tp 2 x dp 2:
 *
 *   - without device communicators, every token's data communicator is its
 *     host (MPI) one; the plugins' resolver (ts_parallel_plugin_comm) gives
 *     the data communicator for "tp" and the host one for "host:tp", NULL
 *     for unknown tokens (with or without "host:"), the world for "world";
 *   - each token's group has the mesh's size and this rank's position;
 *   - the per-token counters (snapshot, JSON) count what ran on the token;
 *   - ts_parallel_open_device either fails with a message and creates
 *     nothing (no GPU, no NCCL: this machine) or, with a GPU per rank, gives
 *     every token an NCCL communicator of the same size and rank, which the
 *     resolver returns while "host:" still gives MPI, and whose calls are
 *     counted under the same token.
 *
 * Usage: mpirun -np 4 test_parallel
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel.h"

#include "test_ranks.h"

static const char *tokens[] = {TS_MESH_JSON_TOKENS, "embedding"};
#define NTOKENS ((int)(sizeof tokens / sizeof tokens[0]))

/* calls of `op` under `token` in a counters JSON object, or 0 */
static long long json_calls(const char *json, const char *token, const char *op) {
    char key[64];
    snprintf(key, sizeof key, "\"%s\":{", token);
    const char *t = strstr(json, key);
    if (!t) return 0;
    const char *end = strstr(t, "}}"); /* the token's object ends here */
    snprintf(key, sizeof key, "\"%s\":{\"calls\":", op);
    const char *o = strstr(t, key);
    long long calls = 0;
    if (o && end && o < end) sscanf(o + strlen(key), "%lld", &calls);
    return calls;
}

int main(int argc, char **argv) {
    ts_comm *world = NULL;
    if (ts_comm_world_init(&argc, &argv, 60.0, &world)) {
        fprintf(stderr, "FAIL: MPI: %s\n", ts_last_error());
        return 1;
    }
    check_rank = ts_comm_rank(world);
    if (ts_comm_size(world) != 4) {
        fprintf(stderr, "FAIL: run on 4 ranks\n");
        return 1;
    }
    ts_mesh_sizes sizes = {
        .world = 4, .tp = 2, .cp = 1, .ep = 1, .dp = 2, .pp = 1, .etp = 1, .edp = 4};
    ts_parallel *par = NULL;
    OK(ts_parallel_create(world, &sizes, NULL, &par));
    if (!par) return 1;

    /* Host communicators only: data == host, the resolver's two spellings. */
    for (int i = 0; i < NTOKENS; i++) {
        ts_comm *host = ts_parallel_comm(par, tokens[i]);
        char spelled[32];
        snprintf(spelled, sizeof spelled, "host:%s", tokens[i]);
        CHECK(host != NULL, "no communicator for %s", tokens[i]);
        CHECK(ts_parallel_data_comm(par, tokens[i]) == host, "%s: data != host", tokens[i]);
        CHECK(ts_parallel_plugin_comm(par, tokens[i]) == host, "plugin %s", tokens[i]);
        CHECK(ts_parallel_plugin_comm(par, spelled) == host, "plugin %s", spelled);
    }
    CHECK(ts_parallel_plugin_comm(par, "world") == world, "world");
    CHECK(ts_parallel_plugin_comm(par, "host:world") == world, "host:world");
    CHECK(ts_parallel_plugin_comm(par, "nope") == NULL, "an unknown token resolved");
    CHECK(ts_parallel_plugin_comm(par, "host:nope") == NULL, "an unknown host: token resolved");
    CHECK(ts_parallel_plugin_comm(par, "host:") == NULL, "an empty host: token resolved");

    /* Default order tp-cp-ep-dp-pp: tp groups {0,1},{2,3}; dp {0,2},{1,3}. */
    ts_comm *tp = ts_parallel_comm(par, "tp"), *dp = ts_parallel_comm(par, "dp");
    CHECK(ts_comm_size(tp) == 2 && ts_comm_rank(tp) == check_rank % 2, "tp group");
    CHECK(ts_comm_size(dp) == 2 && ts_comm_rank(dp) == check_rank / 2, "dp group");

    /* Counters under the token. */
    ts_parallel_snapshot *snap = calloc(1, sizeof *snap);
    char *json = malloc(1 << 16);
    ts_parallel_snapshot_take(par, snap);
    int32_t x = check_rank, y = 0;
    OK(ts_comm_all_reduce(tp, &x, &y, 1, TS_I32, TS_REDUCE_SUM));
    CHECK(y == (check_rank / 2) * 4 + 1, "tp sum %d", (int)y);
    OK(ts_parallel_counters_json(par, snap, json, 1 << 16));
    CHECK(json_calls(json, "tp", "all_reduce") == 1, "tp all_reduce not counted once: %s", json);
    CHECK(json_calls(json, "dp", "all_reduce") == 0, "dp counted a tp call: %s", json);

    /* Device communicators. */
    ts_status st = ts_parallel_open_device(par);
    int opened = st == TS_OK, all = 0;
    OK(ts_comm_all_reduce(world, &opened, &all, 1, TS_I32, TS_REDUCE_SUM));
    if (!opened) {
        CHECK(strlen(ts_last_error()) > 0, "open_device failed without a message");
        for (int i = 0; i < NTOKENS; i++)
            CHECK(ts_parallel_data_comm(par, tokens[i]) == ts_parallel_comm(par, tokens[i]),
                  "%s: a device communicator survived a failed open", tokens[i]);
        if (check_rank == 0) printf("no device communicators here (%s)\n", ts_last_error());
    } else {
        for (int i = 0; i < NTOKENS; i++) {
            ts_comm *d = ts_parallel_data_comm(par, tokens[i]),
                    *h = ts_parallel_comm(par, tokens[i]);
            char spelled[32];
            snprintf(spelled, sizeof spelled, "host:%s", tokens[i]);
            CHECK(d != h && strcmp(ts_comm_backend(d), "nccl") == 0, "%s is not NCCL", tokens[i]);
            CHECK(ts_comm_size(d) == ts_comm_size(h) && ts_comm_rank(d) == ts_comm_rank(h),
                  "%s: the NCCL group differs from the MPI one", tokens[i]);
            CHECK(ts_parallel_plugin_comm(par, tokens[i]) == d, "plugin %s", tokens[i]);
            CHECK(ts_parallel_plugin_comm(par, spelled) == h, "plugin %s", spelled);
        }
        ts_parallel_snapshot_take(par, snap);
        OK(ts_comm_barrier(ts_parallel_data_comm(par, "dp")));
        OK(ts_parallel_counters_json(par, snap, json, 1 << 16));
        CHECK(json_calls(json, "dp", "barrier") == 1, "an NCCL barrier not counted under dp: %s",
              json);
        CHECK(ts_parallel_open_device(par) == TS_OK, "a second open failed");
        if (check_rank == 0) printf("NCCL communicators for %d tokens\n", NTOKENS);
    }
    CHECK(all == 0 || all == 4, "open_device succeeded on %d of 4 ranks", all);
    free(json);
    free(snap);
    ts_parallel_destroy(par);

    int mine = check_failures, failures = 0;
    ts_comm_all_reduce(world, &mine, &failures, 1, TS_I32, TS_REDUCE_SUM);
    ts_comm_world_finalize(world);
    if (failures) return 1;
    if (check_rank == 0) printf("PASS\n");
    return 0;
}
