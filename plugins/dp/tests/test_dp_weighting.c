/*
 * test_dp_weighting.c — the loss normalisation of data parallelism, run on
 * 2 ranks through the real dp plugin: rank 0 holds 2 valid tokens whose
 * per-token gradient is 1, rank 1 holds 6 whose per-token gradient is 3.
 * The core's rule (ts_batch_valid_total: scale by 1 / the global valid
 * count) and the plugin's bucketed all-reduce (a SUM) must give the mean
 * over all 8 tokens, (2·1 + 6·3) / 8 = 2.5 — not the mean of the ranks'
 * means, (1 + 3) / 2 = 2.
 *
 * Usage: mpirun -np 2 test_dp_weighting
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "parallel.h"
#include "plugin.h"

static int check(ts_status st, const char *what) {
    if (st) fprintf(stderr, "FAIL %s: %s\n", what, ts_last_error());
    return st != TS_OK;
}

int main(int argc, char **argv) {
    ts_comm *world = NULL;
    if (check(ts_comm_world_init(&argc, &argv, 60.0, &world), "MPI")) return 1;
    int rank = ts_comm_rank(world);
    if (ts_comm_size(world) != 2) {
        fprintf(stderr, "FAIL: run on 2 ranks\n");
        return 1;
    }
    char ini[64];
    snprintf(ini, sizeof ini, "/tmp/tessera-dpw-%d-%d.ini", (int)getpid(), rank);
    FILE *f = fopen(ini, "w");
    fprintf(f, "[parallel]\nplugins = dp\n[dp]\nbucket_mb = 1\n");
    fclose(f);

    ts_config *cfg = NULL;
    ts_plugins *reg = NULL;
    ts_parallel *par = NULL;
    int n = 0;
    const ts_key_spec *core = ts_config_core_keys(&n);
    int bad = check(ts_config_create(&cfg), "config") ||
              check(ts_config_register(cfg, core, n), "keys") ||
              check(ts_config_load(cfg, ini), "load") ||
              check(ts_plugins_create(&reg), "registry") ||
              check(ts_plugins_load(reg, cfg), "load dp");
    unlink(ini);
    ts_mesh *mesh = NULL;
    bad = bad || check(ts_plugins_mesh(reg, 2, "tp-cp-ep-dp-pp", &mesh), "mesh") ||
          check(ts_parallel_create_mesh(world, mesh, &par), "parallel");
    if (bad) return 1;
    ts_plugins_set_comm_source(reg, ts_parallel_plugin_comm, par);

    /* This rank's tokens and their per-token gradient. */
    int64_t local = rank == 0 ? 2 : 6, global = 0;
    float per_token = rank == 0 ? 1.0f : 3.0f;
    bad |= check(ts_batch_valid_total(ts_parallel_comm(par, "dp"), local, &global), "valid total");
    if (global != 8) {
        fprintf(stderr, "FAIL: global valid count %lld, expected 8\n", (long long)global);
        bad = 1;
    }
    ts_tensor w, g;
    int64_t shape[1] = {1};
    float value = 0.0f, grad = (float)local * per_token * (1.0f / (float)global);
    ts_tensor_view(&w, "w", TS_F32, 1, shape, &value, TS_MEM_PARAMS);
    ts_tensor_view(&g, "w", TS_F32, 1, shape, &grad, TS_MEM_GRADS);
    ts_plugin_hook_event ev = {.struct_size = sizeof ev, .micro_batches = 1};
    ev.kind = TS_HOOK_BEFORE_FORWARD;
    ev.micro_batch = 0;
    bad |= check(ts_plugins_run_hooks(reg, &ev), "before_forward");
    ev.kind = TS_HOOK_GRAD_READY;
    ev.micro_batch = -1;
    ev.param = &w;
    ev.grad = &g;
    bad |= check(ts_plugins_run_hooks(reg, &ev), "grad_ready");
    ev.kind = TS_HOOK_BEFORE_OPTIMIZER;
    ev.param = ev.grad = NULL;
    bad |= check(ts_plugins_run_hooks(reg, &ev), "before_optimizer");
    if (fabsf(grad - 2.5f) > 1e-6f) {
        fprintf(stderr,
                "FAIL: rank %d: reduced gradient %g, expected 2.5 (2 would be the mean "
                "of the ranks' means)\n",
                rank, (double)grad);
        bad = 1;
    } else if (rank == 0) {
        printf("reduced gradient %g on both ranks: the mean over all 8 tokens\n", (double)grad);
    }
    ts_plugins_destroy(reg);
    ts_parallel_destroy(par);
    ts_config_destroy(cfg);
    ts_comm_world_finalize(world);
    return bad;
}
