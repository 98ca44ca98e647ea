/*
 * fuzz_schedule_file.c — libFuzzer target: pipeline schedule files ([pp]
 * schedule = file, schedule_file = PATH), read by the pp plugin's own loader
 * (plugins/pp/schedule_file.c, compiled in: it links against nothing of the
 * core).
 *
 * Each input is the file, loaded as the plugin loads it when [pp] size is
 * auto (at most PP_FILE_MAX_RANKS rank lines). A file that loads is then
 * loaded again with the run's pp said to be its own rank count and one
 * more, and every rank's list is emitted with its transfers
 * (pp_schedule_file_emit, as the plugin's scheduler does) and simulated by
 * the core (core/base/schedule.c, F = B = W = 1, the file's stage order),
 * as the trainer's start-up check and `tessera plan` do.
 *
 * Oracles besides the sanitizers (and libFuzzer's time and memory limits:
 * the loader is linear in the file): a refusal names the file (the reason
 * starts with its path) and leaves nothing loaded; a file that loads has 1 to
 * PP_FILE_MAX_RANKS ranks, micro-batches and chunks >= 1 (two under `order
 * v`) and every rank's line at least twice micro-batches x chunks long; it
 * loads again when pp is its rank count and is refused, naming the file,
 * when pp is one more; and the core's simulator accepts what it emits (no
 * action missing or twice, no transfer unpaired, no deadlock): the file's
 * own checks promise exactly that.
 */
#include "fuzz_common.h"
#include "schedule.h"      /* ts_schedule, ts_schedule_simulate_shape */
#include "schedule_file.h" /* pp_schedule_file_load, _emit             */

static void fuzz_check(int ok, const char *what, const char *detail) {
    if (ok) return;
    fprintf(stderr, "fuzz_schedule_file: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

/* A refusal of `path`: its reason names the file, nothing stays loaded. */
static void fuzz_refused(const char *path, const pp_schedule_file *f, const char *why) {
    fuzz_check(strncmp(why, path, strlen(path)) == 0, "a refusal that does not name the file", why);
    fuzz_check(f->ranks == 0 && !f->acts && !f->count, "a refusal left a schedule loaded", why);
}

static ts_status fuzz_append(void *user, int kind, int mb, int chunk, int peer) {
    return ts_schedule_append(user, (ts_action_kind)kind, mb, chunk, peer);
}

/* Every rank's list with its transfers, through the core's simulator. */
static void fuzz_simulate(const pp_schedule_file *f) {
    ts_schedule *all = calloc((size_t)f->ranks, sizeof *all);
    fuzz_check(all != NULL, "out of memory", NULL);
    for (int s = 0; s < f->ranks; s++)
        fuzz_check(pp_schedule_file_emit(f, s, fuzz_append, &all[s]) == TS_OK,
                   "a loaded file's rank cannot be emitted", ts_last_error());
    ts_schedule_shape shape = {f->ranks, f->micro_batches, f->chunks, 1, 1, 1, f->order};
    ts_schedule_sim sim;
    ts_status st = ts_schedule_simulate_shape(&shape, all, &sim);
    fuzz_check(st == TS_OK, "the core's simulator refuses a loaded file", ts_last_error());
    ts_schedule_sim_free(&sim);
    for (int s = 0; s < f->ranks; s++)
        ts_schedule_free(&all[s]);
    free(all);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file_write(data, size);
    pp_schedule_file f;
    char why[512] = "";
    if (pp_schedule_file_load(path, 0, &f, why, sizeof why)) {
        fuzz_refused(path, &f, why);
        return 0;
    }
    fuzz_check(f.ranks >= 1 && f.ranks <= PP_FILE_MAX_RANKS, "rank count out of range", NULL);
    fuzz_check(f.micro_batches >= 1 && f.chunks >= 1, "no micro-batch or no chunk", NULL);
    fuzz_check(f.order != TS_STAGES_V || f.chunks == 2, "order v without two chunks", NULL);
    for (int r = 0; r < f.ranks; r++)
        fuzz_check(f.count[r] >= 2LL * f.micro_batches * f.chunks, "a rank's line too short", NULL);
    pp_schedule_file g;
    char again[512] = "";
    fuzz_check(pp_schedule_file_load(path, f.ranks, &g, again, sizeof again) == 0,
               "refused when pp is its own rank count", again);
    pp_schedule_file_free(&g);
    if (f.ranks < PP_FILE_MAX_RANKS) {
        fuzz_check(pp_schedule_file_load(path, f.ranks + 1, &g, again, sizeof again) != 0,
                   "loaded when pp is one more than its ranks", NULL);
        fuzz_refused(path, &g, again);
    }
    fuzz_simulate(&f);
    pp_schedule_file_free(&f);
    return 0;
}
