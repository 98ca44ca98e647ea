/*
 * commands.h — the `tessera` program's commands that live in files of their
 * own. Each takes the arguments after its name (argv[0] is the first) and
 * returns the exit status: 0 success, 1 a failure while running, 2 a bad
 * command line or configuration.
 */
#ifndef TESSERA_APPS_COMMANDS_H
#define TESSERA_APPS_COMMANDS_H

/* How every command builds its configuration (tessera.c): create makes
 * one with the core's keys registered; finish, when st (how setting it went
 * so far) is TS_OK, loads the plugins it names and hands both to the
 * caller; on any failure both are destroyed and the error returned. */
#include "config.h"
#include "plugin.h"
ts_status cli_config_create(ts_config **out);
ts_status cli_config_finish(ts_status st, ts_config *cfg, ts_config **out_cfg,
                            ts_plugins **out_reg);

/* tessera verify CONFIG --world N ... (verify.c) */
int cmd_verify(int argc, char **argv);
/* tessera report METRICS.jsonl [--out FILE] (report.c) */
int cmd_report(int argc, char **argv);

/* tessera plan CONFIG --search (search.c): `cfg` is CONFIG as loaded. */
#include "config.h"
typedef struct plan_search_opts {
    int world;           /* --world (0: the cluster's devices)       */
    int top;             /* --top: layouts printed                   */
    int jobs;            /* --jobs: dry runs at once (0: the CPUs)   */
    int json;            /* --json: every layout                     */
    const char *cluster; /* --cluster FILE (NULL: CONFIG's [cluster]) */
} plan_search_opts;
int cmd_plan_search(const ts_config *cfg, const plan_search_opts *opts);

/* tessera plan CONFIG --calibrate --cluster FILE under mpirun (calibrate.c):
 * starts and ends MPI; rank 0 writes FILE and says what it measured on
 * `say`. *world and *rank: this run's. */
#include <stdio.h>
int cmd_plan_calibrate(const ts_config *cfg, int *argc, char ***argv, const char *out_path,
                       FILE *say, int *world, int *rank);

#endif /* TESSERA_APPS_COMMANDS_H */
