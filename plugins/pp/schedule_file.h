/*
 * schedule_file.h — a pipeline schedule written by hand ([pp] schedule =
 * file, [pp] schedule_file = PATH): read, checked whole before any step, and
 * emitted as the pp plugin's other schedules are.
 *
 * The file: one line per pipeline rank, in rank order, listing the rank's
 * computations in the order it runs them; '#' starts a comment; blank lines
 * are ignored.
 *
 *     # ZB-H1, p = 2, m = 2
 *     order interleaved        # optional, before the ranks: interleaved or v
 *     rank 0: F0 F1 B0 W0 B1 W1
 *     rank 1: F0 B0 F1 B1 W0 W1
 *
 * A token is F (forward), B (the backward's input part), W (its weight
 * part) or BW (a whole backward), then the micro-batch, then with several
 * chunks per rank '.' and the chunk (F3.1). The ranks, micro-batches and
 * chunks are those the file names (0 .. the largest). Transfers are implied:
 * each F is wrapped in the receive and send of its activations, each B or BW
 * in those of its gradients, as every schedule of the plugin is.
 *
 * Checked when loaded (each failure names the file, the line and the
 * token): a regular file (a FIFO, a device or a directory is refused, never
 * waited on or read without end); text (a NUL byte is refused); the
 * syntax, every number bounded before it is stored (rank numbers are
 * compared as written: `rank 4294967297:` is not rank 1); each rank's line
 * once and in order, no more ranks than the run's pp when it is known (and
 * PP_FILE_MAX_RANKS in any case), refused at the first line too many; every
 * rank's line at least twice as long as the file's micro-batches x chunks
 * (each pair needs its F and its B), counted in 64 bits before anything of
 * that size is allocated; every (micro-batch, chunk) of every rank computed
 * exactly once forward and once backward (B then W, or BW), in that order
 * on the rank; and the ranks together under the unit-time model of
 * core/base/schedule.h, which must finish: a rank whose next computation
 * waits for one that can never run (a deadlock) is named with what it
 * waits for. Time and memory are linear in the file's size.
 *
 * Core-free, as schedules.c: libc and POSIX open/fstat only.
 */
#ifndef TESSERA_PLUGINS_PP_SCHEDULE_FILE_H
#define TESSERA_PLUGINS_PP_SCHEDULE_FILE_H

#include <stddef.h> /* size_t */

#include "schedules.h" /* pp_append_fn */

#ifdef __cplusplus
extern "C" {
#endif

/* Limits of the file's numbers: [pp] size's and virtual_stages' maxima, and
 * a micro-batch bound far above any line's reach. */
#define PP_FILE_MAX_RANKS 65536
#define PP_FILE_MAX_CHUNKS 1024
#define PP_FILE_MAX_MB 1000000

/* One computation of the file: op 'F', 'B', 'W' or 'X' (BW), where it is. */
typedef struct pp_file_action {
    char op;
    int mb, chunk;
    int line;
    char text[24]; /* the token as written, for messages */
} pp_file_action;

typedef struct pp_schedule_file {
    int ranks, micro_batches, chunks;
    int order; /* ts_plugin_stage_order */
    int *count;
    pp_file_action **acts;          /* per rank, `count` each */
    int widest_rank, widest_action; /* the last action to raise micro_batches or chunks */
} pp_schedule_file;

/* Reads and checks `path`. `ranks`: the run's pp size when known (a line
 * for rank `ranks` or a file with fewer lines is refused), 0 when not (at
 * most PP_FILE_MAX_RANKS lines). Returns 0 with *out filled (free it with
 * pp_schedule_file_free), or non-zero with *out empty and a one-line reason
 * in `why` ("sched.txt:4: 'W2' (rank 1, action 6): ..."). */
int pp_schedule_file_load(const char *path, int ranks, pp_schedule_file *out, char *why,
                          size_t why_size);
void pp_schedule_file_free(pp_schedule_file *f);

/* Emits rank `stage`'s actions, transfers included, then OPTIMIZER_STEP. */
ts_status pp_schedule_file_emit(const pp_schedule_file *f, int stage, pp_append_fn append,
                                void *user);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_PLUGINS_PP_SCHEDULE_FILE_H */
