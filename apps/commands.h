/*
 * commands.h — the `tessera` program's commands that live in files of their
 * own. Each takes the arguments after its name (argv[0] is the first) and
 * returns the exit status: 0 success, 1 a failure while running, 2 a bad
 * command line or configuration.
 */
#ifndef TESSERA_APPS_COMMANDS_H
#define TESSERA_APPS_COMMANDS_H

/* tessera verify CONFIG --world N ... (verify.c) */
int cmd_verify(int argc, char **argv);
/* tessera report METRICS.jsonl [--out FILE] (report.c) */
int cmd_report(int argc, char **argv);

#endif /* TESSERA_APPS_COMMANDS_H */
