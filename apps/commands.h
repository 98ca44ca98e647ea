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

/* Every number on a command line (tessera.c): `text`, the value of option
 * `flag`, read whole and checked before it is cast. cli_parse_int: decimal
 * digits only (a '-' first only when lo < 0; no space, '+', fraction or
 * exponent) within [lo, hi]; cli_parse_number: a finite decimal number
 * (digits, '.', an exponent; no inf, nan or hex) within [lo, hi]. Anything
 * else, the empty string included, is a TS_ERR_CONFIG error naming the
 * flag and the text ("--top-k '1.5': a whole number from 0 to 1048576 is
 * required"); *out is written only on success. */
#include <stdint.h>
ts_status cli_parse_int(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out);
ts_status cli_parse_number(const char *flag, const char *text, double lo, double hi, double *out);

/* Runs argv in a process group of its own with stdout to `out` and stderr
 * to `err` (the same file when equal), `env` (NAME=VALUE or NULL) added to
 * its environment; kills the group past `timeout_s`. Returns the exit
 * status, 128 + the signal that ended it, or -1 when it could not start or
 * ran past the timeout. `who` names the command in a failed exec's message.
 * (verify.c) */
int cli_run_child(const char *who, char **argv, const char *out, const char *err, const char *env,
                  double timeout_s);

/* A whole small file into memory (NUL-terminated; free it), NULL when it
 * cannot be read. (verify.c) */
char *cli_slurp(const char *path);

/* tessera verify CONFIG --world N ... (verify.c) */
int cmd_verify(int argc, char **argv);
/* tessera conform PLUGIN.so [--kind K] ... (conform.c) */
int cmd_conform(int argc, char **argv);
/* tessera report METRICS.jsonl [--out FILE] (report.c) */
int cmd_report(int argc, char **argv);

/* tessera plan CONFIG --search (search.c): `cfg` is CONFIG as loaded. */
#include "config.h"
typedef struct plan_search_opts {
    int world;           /* --world (0: the cluster's devices)       */
    int top;             /* --top: layouts printed                   */
    int jobs;            /* --jobs: dry runs at once (0: the CPUs)   */
    int processes;       /* --processes: each dry run in a process   */
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
