/*
 * tessera.c — the command-line program.
 *
 *   tessera train CONFIG [--set section.key=value ...]
 *   tessera export CONFIG --out PATH [--checkpoint FILE] [--set ...]
 *
 * Every failure prints one message naming its place (file, line, key, rank)
 * and exits non-zero: 2 for a bad command line or configuration, 1 for a
 * failure while running.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "parallel.h"
#include "train.h"

static const char *usage_main =
    "usage: tessera <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG [--set section.key=value ...]   train a model as CONFIG says\n"
    "  export CONFIG --out PATH [--checkpoint FILE]  write weights as an llm.c checkpoint\n"
    "\n"
    "Run 'tessera <command> --help' for a command's options.\n";

static const char *usage_train =
    "usage: tessera train CONFIG [--set section.key=value ...]\n"
    "\n"
    "Trains as the INI file CONFIG says, printing one line per step (step, loss,\n"
    "lr, grad norm, tokens/s, step ms, peak memory). [train] metrics = PATH also\n"
    "writes one JSON object per step; [train] checkpoint_dir and checkpoint_every\n"
    "write checkpoints, and resume = auto continues from the newest one.\n"
    "\n"
    "  --set section.key=value   override one key (repeatable)\n";

static const char *usage_export =
    "usage: tessera export CONFIG --out PATH [--checkpoint FILE] [--set ...]\n"
    "\n"
    "Writes the model's weights as an llm.c GPT-2 checkpoint (version 3, f32).\n"
    "The weights come from FILE, else from the newest checkpoint in\n"
    "[train] checkpoint_dir, else from the model's initialisation ([model] init).\n"
    "\n"
    "  --out PATH         the file to write (atomically)\n"
    "  --checkpoint FILE  a tessera checkpoint to take the weights from\n"
    "  --set section.key=value   override one key (repeatable)\n";

static int fail(ts_status st) {
    fprintf(stderr, "tessera: %s\n", ts_last_error());
    return st == TS_ERR_CONFIG || st == TS_ERR_INVALID ? 2 : 1;
}

/* Loads CONFIG, applies --set overrides and validates. argv[0] is CONFIG. */
static ts_status load_config(int argc, char **argv, const char **out_path,
                             const char **checkpoint, ts_config **out) {
    ts_config *cfg = NULL;
    TS_TRY(ts_config_create(&cfg));
    int n = 0;
    const ts_key_spec *core = ts_config_core_keys(&n);
    ts_status st = ts_config_register(cfg, core, n);
    if (!st) st = ts_config_load(cfg, argv[0]);
    for (int i = 1; i < argc && !st; i++) {
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            st = ts_config_set(cfg, argv[++i]);
        } else if (strncmp(argv[i], "--set=", 6) == 0) {
            st = ts_config_set(cfg, argv[i] + 6);
        } else if (out_path && strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            *out_path = argv[++i];
        } else if (checkpoint && strcmp(argv[i], "--checkpoint") == 0 && i + 1 < argc) {
            *checkpoint = argv[++i];
        } else {
            st = ts_error(TS_ERR_CONFIG, "unexpected argument '%s' (see --help)", argv[i]);
        }
    }
    if (!st) st = ts_config_validate(cfg);
    if (st) {
        ts_config_destroy(cfg);
        return st;
    }
    *out = cfg;
    return TS_OK;
}

static int wants_help(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    return 0;
}

/* Starts MPI (a singleton without mpirun) and builds the parallel context
 * from the configuration. */
static ts_status start_parallel(int *argc, char ***argv, const ts_config *cfg,
                                ts_comm **world, ts_parallel **par) {
    TS_TRY(ts_comm_world_init(argc, argv, ts_config_float(cfg, "comm", "timeout_s"), world));
    int n = ts_comm_size(*world);
    const char *plugins = ts_config_str(cfg, "parallel", "plugins");
    if (plugins[0]) {
        char where[512];
        ts_config_where(cfg, "parallel", "plugins", where, sizeof where);
        return ts_error(TS_ERR_CONFIG, "%s: '%s': plugins are not available in this build", where,
                        plugins);
    }
    if (n > 1)
        return ts_error(TS_ERR_CONFIG,
                        "the job has %d ranks but no plugin registers an axis to use them "
                        "([parallel] plugins is empty)", n);
    ts_mesh_sizes sizes = {.world = n, .tp = 1, .cp = 1, .ep = 1, .dp = 0, .pp = 1};
    return ts_parallel_create(*world, &sizes, ts_config_str(cfg, "parallel", "order"), par);
}

static int cmd_train(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(usage_train, stdout);
        return 0;
    }
    if (argc < 1) {
        fputs(usage_train, stderr);
        return 2;
    }
    ts_config *cfg = NULL;
    ts_status st = load_config(argc, argv, NULL, NULL, &cfg);
    if (st) return fail(st);
    ts_comm *world = NULL;
    ts_parallel *par = NULL;
    ts_trainer *t = NULL;
    st = start_parallel(&argc, &argv, cfg, &world, &par);
    if (!st) st = ts_trainer_create(cfg, par, &t);
    if (!st) st = ts_trainer_run(t);
    int rc = st ? fail(st) : 0;
    ts_trainer_destroy(t);
    ts_parallel_destroy(par);
    ts_config_destroy(cfg);
    /* A failure on one rank must not leave its peers waiting. */
    if (rc && world && ts_comm_size(world) > 1) ts_comm_abort(world, rc);
    ts_comm_world_finalize(world);
    return rc;
}

static int cmd_export(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(usage_export, stdout);
        return 0;
    }
    if (argc < 1) {
        fputs(usage_export, stderr);
        return 2;
    }
    const char *out = NULL, *checkpoint = NULL;
    ts_config *cfg = NULL;
    ts_status st = load_config(argc, argv, &out, &checkpoint, &cfg);
    if (st) return fail(st);
    if (!out) {
        ts_config_destroy(cfg);
        fprintf(stderr, "tessera export: --out PATH is required\n");
        return 2;
    }
    /* Export what a checkpoint holds, not what resume would do. */
    st = ts_config_set(cfg, "train.resume=no");
    ts_trainer *t = NULL;
    if (!st) st = ts_trainer_create(cfg, NULL, &t);
    char latest[4096];
    if (!st && !checkpoint) {
        const char *dir = ts_config_str(cfg, "train", "checkpoint_dir");
        int found = 0;
        if (dir[0]) st = ts_checkpoint_latest(dir, latest, sizeof latest, &found);
        if (found) checkpoint = latest;
    }
    if (!st && checkpoint) st = ts_trainer_load(t, checkpoint);
    if (!st) st = ts_trainer_export(t, out);
    if (!st)
        printf("exported %s (step %lld, from %s)\n", out,
               (long long)ts_trainer_state(t)->step, checkpoint ? checkpoint : "initialisation");
    int rc = st ? fail(st) : 0;
    ts_trainer_destroy(t);
    ts_config_destroy(cfg);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(usage_main, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "train") == 0) return cmd_train(argc - 2, argv + 2);
    if (strcmp(argv[1], "export") == 0) return cmd_export(argc - 2, argv + 2);
    fprintf(stderr, "tessera: unknown command '%s'\n\n%s", argv[1], usage_main);
    return 2;
}
