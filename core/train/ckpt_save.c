/*
 * ckpt_save.c — checkpoints out (state.h, docs/formats.md): every rank
 * writes the shards it owns into the step's temporary directory, world rank
 * 0 publishes it (metadata, marker, rename) once all have written.
 *
 * Who writes what: each rank its blocks of every parameter (the optimizer's
 * range of them when the optimizer state is cut); a block several ranks hold
 * is written by one of them, the replicas taking turns by bytes.
 *
 * Synchronous saves write straight from the arrays (state off the host
 * through a 16 MiB staging buffer). With [train] checkpoint_async = true the
 * shards are copied to host memory (a snapshot of this rank's shards) and a
 * thread writes them while training goes on; after each step the ranks
 * agree whether every writer is done, and then rank 0 publishes. A save
 * still pending when the next falls due, or at the end of the run, is
 * waited for.
 *
 * Waiting for a slow file system: every agreement that follows work on the
 * file system (creating the directory, opening the files, writing the
 * shards, publishing) is a roll call (ckpt_agree): each rank reports to rank
 * 0 when it is done, rank 0 answers when all have. The wait is bounded by
 * [train] checkpoint_timeout_s, not by [comm] timeout_s (a large save on a
 * shared file system may take longer than any sane communication timeout);
 * past it the job ends naming the ranks still at work, and the previous
 * checkpoints stay as they were. A load's agreement is one too
 * (trainer_ckpt_load_agree, called by state_io.c).
 *
 * What it does not do: the format (ckpt_dir.c), loading (state_io.c), or
 * decide when to save (report.c).
 */
#include "trainer_impl.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Bytes of host memory a save of state off the host copies through. */
#define SAVE_STAGE_BYTES (16u << 20)

/* One save in progress. */
typedef struct trainer_ckpt_job {
    char final[4096], tmp[4200];
    int64_t step;
    ts_ckpt_meta meta;
    ts_ckpt_shard *shards; /* this rank's, file offsets set; CRCs once written */
    size_t *src;           /* per shard: its first element in the optimizer's
                              arrays (index from the range's begin)          */
    int64_t nshards;
    uint64_t bytes;  /* this rank's file                               */
    float *snapshot; /* async: the file's bytes in host memory (the
                        trainer's ckpt_snapshot, borrowed)           */
    ts_ckpt_file file;
    int delay_ms;  /* TESSERA_CKPT_WRITE_DELAY_MS: a pause after each
                      shard, so tests can kill a rank mid-save      */
    double slow_s; /* TESSERA_FAULT slow_checkpoint: a pause before
                      the file is closed (a slow disk)              */
    pthread_t thread;
    int thread_started;
    atomic_int done;
    ts_status st; /* the writer's */
    char msg[1024];
    double t0, t_snapshot;
    int64_t rss0; /* resident KiB when the save began            */
    char (*names)[TS_NAME_MAX];
    int64_t (*shapes)[3];
    int *ndim;
    int ntable;
} trainer_ckpt_job;

/* Resident memory (Linux: /proc/self/status) in KiB: the current and the
 * peak since the last trainer_resident_reset; 0 where unknown. */
static void resident_kib(int64_t *now, int64_t *peak) {
    *now = *peak = 0;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        long long v;
        if (sscanf(line, "VmRSS: %lld kB", &v) == 1) *now = v;
        if (sscanf(line, "VmHWM: %lld kB", &v) == 1) *peak = v;
    }
    if (f) fclose(f);
}

int64_t trainer_resident_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f); /* resets the peak to the current resident size */
        fclose(f);
    }
    int64_t now, peak;
    resident_kib(&now, &peak);
    return now;
}

ts_status trainer_resident_growth(ts_trainer *t, int64_t base_kib, int32_t *max_kib) {
    int64_t now, peak;
    resident_kib(&now, &peak);
    int32_t mine = peak > base_kib ? (int32_t)(peak - base_kib) : 0;
    *max_kib = mine;
    if (t->par && t->par->size > 1)
        TS_TRY(ts_comm_all_reduce(t->par->world, &mine, max_kib, 1, TS_I32, TS_REDUCE_MAX));
    return TS_OK;
}

static void job_free(trainer_ckpt_job *j) {
    if (!j) return;
    free(j->shards);
    free(j->src);
    free(j->names);
    free(j->shapes);
    free(j->ndim);
    free(j);
}

/* Fails when the master weights or moments hold a value that is not
 * finite on any rank (each checks the range it updates; all agree): such a
 * state is never written as a checkpoint. (A sum of squares of finite f32
 * values cannot overflow a double, so it is finite exactly when every value
 * is.) */
static ts_status trainer_state_finite(ts_trainer *t) {
    const char *names[3] = {"master weights", "first moments", "second moments"};
    const float *arrays[3] = {t->optim->master, t->optim->m, t->optim->v};
    size_t n = t->optim->shard.end - t->optim->shard.begin;
    int32_t bad[3], all[3];
    for (int k = 0; k < 3; k++) {
        double s = 0.0;
        TS_TRY(t->optim->state_be->sumsq(&s, arrays[k], n));
        bad[k] = !isfinite(s);
    }
    memcpy(all, bad, sizeof all);
    if (t->par && t->par->size > 1)
        TS_TRY(ts_comm_all_reduce(t->par->world, bad, all, 3, TS_I32, TS_REDUCE_SUM));
    for (int k = 0; k < 3; k++)
        if (all[k])
            return ts_error(TS_ERR_INVALID,
                            "step %lld: the %s hold values that are not finite (on %d rank%s); "
                            "no checkpoint is written (the newest one in %s is kept). Lower "
                            "[train] lr or set grad_clip",
                            (long long)t->state.step, names[k], (int)all[k], all[k] > 1 ? "s" : "",
                            t->ckpt_dir);
    return TS_OK;
}

/* Which parameters this rank writes (writes[p]). A block held by several
 * ranks (placement R on an axis of size > 1, other than the pipeline's and
 * the one that cuts the optimizer state, over which each rank writes its
 * own range) is written by one of them: the blocks of each replica group,
 * largest first, go to the replica given the fewest bytes so far (Graham's
 * longest-processing-time rule), so the writing spreads over the group.
 * Every member makes the same choices: they hold the same blocks. */
typedef struct writer_item {
    int64_t size; /* elements written          */
    int param;
    unsigned sig; /* the replica axes (bits)   */
    int replicas, mine;
} writer_item;

static int writer_item_cmp(const void *a, const void *b) {
    const writer_item *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return x->param - y->param;
}

static ts_status trainer_writers(ts_trainer *t, unsigned char *writes) {
    ts_model *m = t->model;
    writer_item *items = malloc((size_t)(m->nparams ? m->nparams : 1) * sizeof *items);
    if (!items) return ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    int n = 0;
    ts_status st = TS_OK;
    for (int p = 0; p < m->nparams && !st; p++) {
        const ts_param *q = &m->params[p];
        writes[p] = !q->tied_copy;
        if (!t->par || q->tied_copy) continue;
        const ts_layout_plan_entry *e = ts_layout_plan_find(&t->plan, q->value.name);
        if (!e) {
            st = ts_error(TS_ERR_INTERNAL, "checkpoint: %s is not in the layout plan",
                          q->value.name);
            break;
        }
        writer_item it = {.param = p, .replicas = 1};
        for (int a = 0; a < e->layout.naxes && !st; a++) {
            const ts_layout_axis *ax = &e->layout.axes[a];
            if (ax->size == 1 || ax->placement.kind == TS_PLACEMENT_SHARD ||
                ts_mesh_axis_is_pipeline(t->par->mesh, ts_mesh_find_axis(t->par->mesh, ax->name)) ==
                    1)
                continue;
            if (t->opt_cut && strcmp(ax->name, m->axes[t->opt_axis].name) == 0) continue;
            int axis = ts_mesh_find_axis(t->par->mesh, ax->name);
            if (axis < 0) {
                st = ts_error(TS_ERR_INTERNAL, "checkpoint: %s is placed over '%s', no mesh axis",
                              q->value.name, ax->name);
                break;
            }
            it.sig |= 1u << axis;
            it.mine = it.mine * ax->size + ts_parallel_coord(t->par, ax->name);
            it.replicas *= ax->size;
        }
        int64_t off[3], ext[3], cnt = trainer_param_box(q, off, ext), lo, hi;
        if (it.replicas == 1 || !trainer_param_range(t, q, cnt, &lo, &hi)) continue;
        it.size = hi - lo;
        items[n++] = it;
    }
    qsort(items, (size_t)n, sizeof *items, writer_item_cmp);
    /* One load vector per replica group kind, filled in that order. */
    for (int i = 0; i < n && !st; i++) {
        if (items[i].replicas == 0) continue; /* done with its group */
        int64_t *load = calloc((size_t)items[i].replicas, sizeof *load);
        if (!load) {
            st = ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
            break;
        }
        unsigned sig = items[i].sig;
        for (int j = i; j < n; j++) {
            writer_item *it = &items[j];
            if (it->replicas == 0 || it->sig != sig) continue;
            int best = 0;
            for (int r = 1; r < it->replicas; r++)
                if (load[r] < load[best]) best = r;
            load[best] += it->size;
            writes[it->param] = best == it->mine;
            it->replicas = 0;
        }
        free(load);
    }
    free(items);
    return st;
}

/* Checks, before a checkpoint is published, that its shards hold every
 * element of every tensor's three arrays once (the writers' choices
 * agreed). */
static ts_status trainer_check_cover(const ts_ckpt_tensor *tensors, int ntable,
                                     const ts_ckpt_shard *all, int64_t total) {
    int64_t *held = calloc((size_t)ntable * TS_CKPT_ARRAYS, sizeof *held);
    if (!held) return ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    for (int64_t i = 0; i < total; i++)
        held[all[i].tensor * TS_CKPT_ARRAYS + all[i].array] += all[i].hi - all[i].lo;
    ts_status st = TS_OK;
    for (int i = 0; i < ntable * TS_CKPT_ARRAYS && !st; i++) {
        const ts_ckpt_tensor *e = &tensors[i / TS_CKPT_ARRAYS];
        int64_t n = e->shape[0] * e->shape[1] * e->shape[2];
        if (held[i] != n)
            st = ts_error(TS_ERR_INTERNAL,
                          "checkpoint: the ranks wrote %lld elements of %s (%s), it has %lld; "
                          "nothing was published",
                          (long long)held[i], e->name, ts_ckpt_array_name(i % TS_CKPT_ARRAYS),
                          (long long)n);
    }
    free(held);
    return st;
}

/* This rank's shards: for every parameter it writes, the master weights,
 * then both moments, each for the part of its block in the optimizer's
 * range; laid out one after another in its file. */
static ts_status job_plan(ts_trainer *t, trainer_ckpt_job *j) {
    ts_model *m = t->model;
    unsigned char *writes = malloc((size_t)(m->nparams ? m->nparams : 1));
    j->shards = malloc((size_t)(TS_CKPT_ARRAYS * m->nparams + 1) * sizeof *j->shards);
    j->src = malloc((size_t)(TS_CKPT_ARRAYS * m->nparams + 1) * sizeof *j->src);
    if (!writes || !j->shards || !j->src) {
        free(writes);
        return ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    }
    ts_status st = trainer_writers(t, writes);
    int rank = t->par ? t->par->rank : 0;
    for (int k = 0; k < TS_CKPT_ARRAYS && !st; k++)
        for (int p = 0; p < m->nparams && !st; p++) {
            const ts_param *q = &m->params[p];
            int64_t off[3], ext[3], n = trainer_param_box(q, off, ext), lo, hi;
            if (!writes[p] || !trainer_param_range(t, q, n, &lo, &hi)) continue;
            int tensor = 0;
            while (tensor < j->ntable && strcmp(j->names[tensor], q->value.name) != 0)
                tensor++;
            if (tensor == j->ntable) {
                st = ts_error(TS_ERR_INTERNAL, "checkpoint: %s is not in the tensor table",
                              q->value.name);
                break;
            }
            ts_ckpt_shard *sh = &j->shards[j->nshards];
            *sh = (ts_ckpt_shard){.tensor = tensor,
                                  .array = k,
                                  .file = rank,
                                  .file_offset = (int64_t)j->bytes,
                                  .lo = lo,
                                  .hi = hi};
            memcpy(sh->offset, off, sizeof off);
            memcpy(sh->extent, ext, sizeof ext);
            j->src[j->nshards++] = q->offset + (size_t)lo - t->optim->shard.begin;
            j->bytes += (uint64_t)(hi - lo) * sizeof(float);
        }
    free(writes);
    return st;
}

/* The optimizer's arrays, in the order of TS_CKPT_ARRAYS. */
static const float *job_array(const ts_trainer *t, int64_t k) {
    return k == 0 ? t->optim->master : k == 1 ? t->optim->m : t->optim->v;
}

/* Sleeps `sec` seconds (the test aids' pauses). */
static void ckpt_sleep(double sec) {
    struct timespec d = {(time_t)sec, (long)((sec - (double)(time_t)sec) * 1e9)};
    while (nanosleep(&d, &d) != 0 && errno == EINTR)
        ;
}

/* Writes the shards into the open file, from the snapshot when there is
 * one, else from the arrays (through `stage` when they are off the host),
 * setting each shard's CRC. */
static ts_status job_write(const ts_trainer *t, trainer_ckpt_job *j, float *stage) {
    const ts_backend *be = t ? t->optim->state_be : NULL;
    for (int64_t i = 0; i < j->nshards; i++) {
        ts_ckpt_shard *sh = &j->shards[i];
        size_t count = (size_t)(sh->hi - sh->lo);
        j->file.crc = 0;
        if (j->snapshot) {
            TS_TRY(ts_ckpt_file_write(&j->file, j->snapshot + sh->file_offset / 4,
                                      count * sizeof(float)));
        } else {
            const float *src = job_array(t, sh->array) + j->src[i];
            if (be->kind == TS_DEVICE_CPU) TS_TRY(ts_ckpt_file_write(&j->file, src, count * 4));
            for (size_t done = 0; be->kind != TS_DEVICE_CPU && done < count;) {
                size_t c =
                    count - done < SAVE_STAGE_BYTES / 4 ? count - done : SAVE_STAGE_BYTES / 4;
                TS_TRY(be->to_host(stage, src + done, c * sizeof(float)));
                TS_TRY(ts_ckpt_file_write(&j->file, stage, c * sizeof(float)));
                done += c;
            }
        }
        sh->crc = j->file.crc;
        if (j->delay_ms > 0) ckpt_sleep(j->delay_ms / 1e3);
    }
    if (j->slow_s > 0) ckpt_sleep(j->slow_s);
    return ts_ckpt_file_close(&j->file);
}

/* The background writer: the snapshot to the file. */
static void *job_thread(void *arg) {
    trainer_ckpt_job *j = arg;
    j->st = job_write(NULL, j, NULL);
    if (j->st) snprintf(j->msg, sizeof j->msg, "%s", ts_last_error());
    atomic_store(&j->done, 1);
    return NULL;
}

/* Copies this rank's shards into host memory, in file order. */
static ts_status job_snapshot(ts_trainer *t, trainer_ckpt_job *j) {
    /* Kept for the run's next saves: its pages are resident after the first. */
    if (t->ckpt_snapshot_bytes < j->bytes) {
        ts_mem_free(t->ckpt_snapshot);
        t->ckpt_snapshot = ts_mem_alloc(TS_MEM_OTHER, j->bytes ? j->bytes : 4);
        t->ckpt_snapshot_bytes = t->ckpt_snapshot ? j->bytes : 0;
    }
    j->snapshot = t->ckpt_snapshot;
    if (!j->snapshot)
        return ts_error(TS_ERR_NOMEM,
                        "checkpoint_async: no host memory for a snapshot of this rank's shards "
                        "(%.1f MiB); set [train] checkpoint_async = false",
                        (double)j->bytes / (1 << 20));
    const ts_backend *be = t->optim->state_be;
    for (int64_t i = 0; i < j->nshards; i++) {
        const ts_ckpt_shard *sh = &j->shards[i];
        size_t bytes = (size_t)(sh->hi - sh->lo) * sizeof(float);
        const float *src = job_array(t, sh->array) + j->src[i];
        float *dst = j->snapshot + sh->file_offset / 4;
        if (be->kind == TS_DEVICE_CPU)
            memcpy(dst, src, bytes);
        else
            TS_TRY(be->to_host(dst, src, bytes));
    }
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * The roll call: an agreement that waits for slow file systems
 * ------------------------------------------------------------------------- */

/* Tags of the roll call's messages on the world communicator (the trace's
 * gather uses TS_TRACE_TAG there, nothing else sends on it). */
enum { CKPT_TAG_REPORT = 32110, CKPT_TAG_NOTICE, CKPT_TAG_VERDICT };
/* Seconds a rank waits for rank 0's verdict beyond checkpoint_timeout_s
 * (rank 0 ends the job at that bound; this only covers its going away). */
#define CKPT_VERDICT_GRACE_S 60.0
/* Seconds between rank 0's notes while it waits. */
#define CKPT_NOTE_EVERY_S 60.0

/* What the ranks do before a roll call: `one` and `many` name the work a
 * late rank (late ranks) are still at, `what` the step of the save in
 * failure messages. */
typedef struct ckpt_phase {
    const char *one, *many, *what;
} ckpt_phase;

static const ckpt_phase ckpt_creating = {"creating the checkpoint's directory",
                                         "creating the checkpoint's directory",
                                         "creating the checkpoint"};
static const ckpt_phase ckpt_starting = {
    "opening its shard file (or copying its shards to host memory, with checkpoint_async)",
    "opening their shard files (or copying their shards to host memory, with "
    "checkpoint_async)",
    "starting the checkpoint"};
static const ckpt_phase ckpt_writing = {"writing its shards", "writing their shards",
                                        "writing the checkpoint's shards"};
static const ckpt_phase ckpt_reading = {"reading its shards", "reading their shards",
                                        "loading the checkpoint"};
static const ckpt_phase ckpt_publishing = {
    "publishing the checkpoint (metadata, COMPLETE marker, rename)",
    "publishing the checkpoint (metadata, COMPLETE marker, rename)", "publishing the checkpoint"};

/* Ends the job after a roll call ran past its bound (the message set is
 * this rank's; the requests still posted are left to the abort). */
static void ckpt_agree_abort(ts_trainer *t) {
    fprintf(stderr, "tessera: %s\n", ts_last_error());
    ts_comm_abort(t->par->world, (int)TS_ERR_IO);
}

/* "rank 3 is" or "ranks 3, 5, 9 and 12 more are": the ranks r with late[r];
 * returns how many. */
static int ckpt_late_names(const unsigned char *late, int n, char *buf, size_t size) {
    int count = 0, shown = 0;
    for (int r = 0; r < n; r++)
        count += late[r] != 0;
    size_t len = (size_t)snprintf(buf, size, "rank%s", count > 1 ? "s" : "");
    for (int r = 0; r < n && len < size; r++) {
        if (!late[r]) continue;
        if (shown == 8) {
            len += (size_t)snprintf(buf + len, size - len, " and %d more", count - shown);
            break;
        }
        len += (size_t)snprintf(buf + len, size - len, "%s %d", shown ? "," : "", r);
        shown++;
    }
    if (len < size) snprintf(buf + len, size - len, " %s", count > 1 ? "are" : "is");
    return count;
}

/* Polls reqs[lo..hi) until all are done or `deadline` passes; a completed
 * one is set NULL, late[r] cleared and *last = r. On rank 0, a note every
 * CKPT_NOTE_EVERY_S names the ranks still late. Returns 1 when all are
 * done, 0 at the deadline, -1 on a failure (its message set). */
static int ckpt_poll_all(ts_trainer *t, ts_comm_request **reqs, unsigned char *late, int lo, int hi,
                         double begin, double deadline, const ckpt_phase *ph, const char *subject,
                         int *last) {
    double note = begin + CKPT_NOTE_EVERY_S;
    for (unsigned spins = 0;; spins++) {
        int pending = 0;
        for (int r = lo; r < hi; r++) {
            if (!reqs[r]) continue;
            int done = 0;
            if (ts_comm_test(reqs[r], &done)) {
                reqs[r] = NULL; /* released by the failed test */
                return -1;
            }
            if (done) {
                reqs[r] = NULL;
                late[r] = 0;
                *last = r;
            } else {
                pending++;
            }
        }
        if (!pending) return 1;
        double now = now_seconds();
        if (now > deadline) return 0;
        if (t->rank0 && now > note) {
            char who[160];
            int k = ckpt_late_names(late, ts_comm_size(t->par->world), who, sizeof who);
            printf("%s: waited %.0f s so far: %s still %s ([train] checkpoint_timeout_s = %g)\n",
                   subject, now - begin, who, k > 1 ? ph->many : ph->one, deadline - begin);
            fflush(stdout);
            note = now + CKPT_NOTE_EVERY_S;
        }
        struct timespec d = {0, spins < 64 ? 50000L : spins < 1024 ? 1000000L : 10000000L};
        nanosleep(&d, NULL);
    }
}

/* The outcome of a roll call. */
typedef struct ckpt_roll {
    int slowest;     /* rank 0: the rank whose report came last           */
    double waited_s; /* rank 0: how long it waited for the others' reports */
} ckpt_roll;

/* Agrees `st` over the world, as trainer_agree does, after work on the file
 * system (phase `ph`; `subject` begins every message, `tail` ends the one
 * that stops the job): every rank reports to rank 0 when done; rank 0 tells
 * every rank when it is done itself and, once all have reported, how many
 * failed. Each wait is bounded by [train] checkpoint_timeout_s from when the
 * rank began waiting ([comm] timeout_s is lifted from the world meanwhile):
 * past it rank 0 names the ranks that have not reported, another rank names
 * rank 0 if it has not said it is done, and the job ends. `roll` (may be
 * NULL) gets rank 0's view. */
static ts_status ckpt_roll_call(ts_trainer *t, ts_status st, const char *subject, const char *tail,
                                const ckpt_phase *ph, ckpt_roll *roll) {
    if (roll) *roll = (ckpt_roll){0, 0.0};
    if (!t->par || t->par->size == 1) return st;
    ts_comm *w = t->par->world;
    int n = ts_comm_size(w), me = ts_comm_rank(w);
    double bound = t->rc.train_checkpoint_timeout_s;
    char where[256];
    ts_config_where(t->cfg, "train", "checkpoint_timeout_s", where, sizeof where);
    /* msg: the reports [0, n), the notice [n], the verdict [n+1]. On the heap
     * and not freed when the job ends with them still posted. */
    int32_t *msg = calloc((size_t)n + 2, sizeof *msg);
    ts_comm_request **reqs = calloc((size_t)2 * n, sizeof *reqs);
    unsigned char *late = calloc((size_t)n, 1);
    if (!msg || !reqs || !late) {
        free(msg);
        free(reqs);
        free(late);
        return ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    }
    int32_t *notice = msg + n, *verdict = msg + n + 1;
    msg[me] = st != TS_OK;
    double comm_timeout = ts_comm_timeout(w);
    ts_comm_set_timeout(w, 0.0); /* the waits below have their own bound */
    double begin = now_seconds();
    int last = 0, got = 1;
    ts_status cs = TS_OK;
    if (me == 0) {
        /* reqs[r]: rank r's report, then the verdict to it; reqs[n + r]: the
         * notice to it. */
        for (int r = 1; r < n && !cs; r++)
            cs = ts_comm_send_start(w, notice, 1, TS_I32, r, CKPT_TAG_NOTICE, &reqs[n + r]);
        for (int r = 1; r < n && !cs; r++) {
            late[r] = 1;
            cs = ts_comm_recv_start(w, &msg[r], 1, TS_I32, r, CKPT_TAG_REPORT, &reqs[r]);
        }
        if (!cs) got = ckpt_poll_all(t, reqs, late, 1, n, begin, begin + bound, ph, subject, &last);
        if (got == 0) {
            char who[200];
            int k = ckpt_late_names(late, n, who, sizeof who);
            ts_error(TS_ERR_IO, "%s: %s still %s %.1f s after rank 0 was done (%s = %g); %s",
                     subject, who, k > 1 ? ph->many : ph->one, now_seconds() - begin, where, bound,
                     tail);
            ckpt_agree_abort(t);
        }
        if (got < 0) cs = TS_ERR_COMM;
        if (roll) {
            roll->waited_s = now_seconds() - begin;
            roll->slowest = last;
        }
        *verdict = 0;
        for (int r = 0; r < n; r++)
            *verdict += msg[r] != 0;
        for (int r = 1; r < n && !cs; r++)
            cs = ts_comm_send_start(w, verdict, 1, TS_I32, r, CKPT_TAG_VERDICT, &reqs[r]);
    } else {
        /* reqs[0]: the notice, reqs[1]: the verdict, reqs[n]: the report. */
        cs = ts_comm_recv_start(w, notice, 1, TS_I32, 0, CKPT_TAG_NOTICE, &reqs[0]);
        if (!cs) cs = ts_comm_recv_start(w, verdict, 1, TS_I32, 0, CKPT_TAG_VERDICT, &reqs[1]);
        if (!cs) cs = ts_comm_send_start(w, &msg[me], 1, TS_I32, 0, CKPT_TAG_REPORT, &reqs[n]);
        late[0] = 1;
        if (!cs) got = ckpt_poll_all(t, reqs, late, 0, 1, begin, begin + bound, ph, subject, &last);
        if (got == 0) {
            ts_error(TS_ERR_IO,
                     "%s: rank 0 is still %s %.1f s after rank %d was done (%s = %g); %s", subject,
                     ph->one, now_seconds() - begin, me, where, bound, tail);
            ckpt_agree_abort(t);
        }
        double told = now_seconds();
        if (!cs && got > 0)
            got = ckpt_poll_all(t, reqs, late, 1, 2, told, told + bound + CKPT_VERDICT_GRACE_S, ph,
                                subject, &last);
        if (got == 0) {
            ts_error(TS_ERR_IO,
                     "%s: rank 0 was done %s but has not answered the others' reports %.1f s "
                     "later (%s = %g, and %g s more); the job ends",
                     subject, ph->one, now_seconds() - told, where, bound, CKPT_VERDICT_GRACE_S);
            ckpt_agree_abort(t);
        }
        if (got < 0) cs = TS_ERR_COMM;
    }
    /* The sends complete at once: every peer posted its receives before it
     * reported. */
    ts_comm_set_timeout(w, comm_timeout);
    for (int i = 0; i < 2 * n; i++)
        if (reqs[i]) {
            ts_status ws = ts_comm_wait(reqs[i]);
            if (ws && !cs) cs = ws;
        }
    int others = *verdict - (st != TS_OK);
    free(msg);
    free(reqs);
    free(late);
    if (cs) return cs;
    if (st || others <= 0) return st;
    return ts_error(TS_ERR_IO, "%s failed on %d other rank%s (see their messages)", ph->what,
                    others, others > 1 ? "s" : "");
}

/* A roll call of the save of `step` into `tmp`. */
static ts_status ckpt_agree(ts_trainer *t, ts_status st, int64_t step, const char *tmp,
                            const ckpt_phase *ph, ckpt_roll *roll) {
    char subject[64], tail[4400];
    snprintf(subject, sizeof subject, "checkpoint of step %lld", (long long)step);
    snprintf(tail, sizeof tail,
             "the job ends: this checkpoint is not published (resume = auto removes %s), the "
             "previous ones are kept",
             tmp);
    return ckpt_roll_call(t, st, subject, tail, ph, roll);
}

ts_status trainer_ckpt_load_agree(ts_trainer *t, ts_status st, const char *path, int64_t step) {
    int slow = 0;
    double secs = 0.0;
    ts_status fs = step >= 0 ? trainer_fault(t, step, "slow_checkpoint", &slow, &secs) : TS_OK;
    if (fs && !st) st = fs;
    if (slow && secs > 0) ckpt_sleep(secs);
    char subject[4200];
    snprintf(subject, sizeof subject, "loading checkpoint %s", path);
    return ckpt_roll_call(t, st, subject, "the job ends", &ckpt_reading, NULL);
}

/* Publishes a written job (collective): every rank's shard table to rank
 * 0, which checks it covers every tensor and commits. A failure anywhere
 * removes the temporary directory. */
static ts_status job_publish(ts_trainer *t, trainer_ckpt_job *j, ts_status st) {
    ts_model *m = t->model;
    int world = t->par ? t->par->size : 1;
    ckpt_roll roll;
    st = ckpt_agree(t, st, j->meta.step, j->tmp, &ckpt_writing, &roll);
    if (!st && t->rank0 && roll.waited_s > ts_comm_timeout(t->par->world)) {
        printf("checkpoint: step %lld: waited %.1f s for rank %d to finish writing its shards, "
               "longer than [comm] timeout_s = %g (a save waits up to [train] "
               "checkpoint_timeout_s = %g)\n",
               (long long)j->meta.step, roll.waited_s, roll.slowest, ts_comm_timeout(t->par->world),
               t->rc.train_checkpoint_timeout_s);
        fflush(stdout);
    }
    enum { W = sizeof(ts_ckpt_shard) / sizeof(int32_t) };
    size_t *counts = calloc((size_t)world, sizeof *counts);
    int64_t *bytes = calloc((size_t)world, sizeof *bytes);
    int32_t *nall = calloc((size_t)world, sizeof *nall);
    ts_ckpt_shard *all = NULL;
    int64_t total = 0;
    if (!st && (!counts || !bytes || !nall))
        st = ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    if (!st) {
        int32_t n = (int32_t)j->nshards;
        int64_t b = (int64_t)j->bytes;
        if (world > 1) {
            st = ts_comm_all_gather(t->par->world, &n, nall, 1, TS_I32);
            if (!st) st = ts_comm_all_gather(t->par->world, &b, bytes, 2, TS_I32);
        } else {
            nall[0] = n;
            bytes[0] = b;
        }
    }
    for (int r = 0; !st && r < world; r++) {
        counts[r] = (size_t)nall[r] * W;
        total += nall[r];
    }
    if (!st && !(all = malloc((size_t)(total ? total : 1) * sizeof *all)))
        st = ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    if (!st) {
        if (world > 1)
            st = ts_comm_all_gatherv(t->par->world, j->shards, all, counts, TS_I32);
        else
            memcpy(all, j->shards, (size_t)j->nshards * sizeof *all);
    }
    if (!st && t->rank0) {
        ts_ckpt_tensor *tensors = calloc((size_t)j->ntable, sizeof *tensors);
        uint64_t *fb = calloc((size_t)world, sizeof *fb);
        if (!tensors || !fb) st = ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
        for (int i = 0; !st && i < j->ntable; i++) {
            snprintf(tensors[i].name, sizeof tensors[i].name, "%s", j->names[i]);
            tensors[i].ndim = j->ndim[i];
            for (int d = 0; d < 3; d++)
                tensors[i].shape[d] = d < j->ndim[i] ? j->shapes[i][d] : 1;
        }
        for (int r = 0; !st && r < world; r++)
            fb[r] = (uint64_t)bytes[r];
        if (!st) st = trainer_check_cover(tensors, j->ntable, all, total);
        ts_ckpt_info info = {.meta = j->meta,
                             .cfg = m->cfg,
                             .param_dtype = m->dtype,
                             .nfiles = world,
                             .file_bytes = fb,
                             .ntensors = j->ntable,
                             .tensors = tensors,
                             .nshards = total,
                             .shards = all};
        if (!st) st = ts_ckpt_commit(j->tmp, j->final, &info);
        free(tensors);
        free(fb);
    }
    st = ckpt_agree(t, st, j->meta.step, j->tmp, &ckpt_publishing, NULL);
    /* A failed save leaves nothing behind (the previous checkpoints stay). */
    if (st && t->rank0) ts_ckpt_remove_dir(j->tmp);
    int32_t grew = 0;
    if (!st) st = trainer_resident_growth(t, j->rss0, &grew);
    if (!st && t->rank0) {
        uint64_t sum = 0;
        for (int r = 0; r < world; r++)
            sum += (uint64_t)bytes[r];
        double ms = 1e3 * (now_seconds() - j->t0);
        if (j->snapshot)
            printf("checkpoint: %s (%.2f MiB; training paused %.1f ms for the snapshot, published "
                   "after %.1f ms; resident memory of a rank grew by at most %.2f MiB)\n",
                   j->final, (double)sum / (1 << 20), 1e3 * j->t_snapshot, ms, grew / 1024.0);
        else
            printf("checkpoint: %s (%.2f MiB in %.1f ms; resident memory of a rank grew by at "
                   "most %.2f MiB)\n",
                   j->final, (double)sum / (1 << 20), ms, grew / 1024.0);
        fflush(stdout);
    }
    free(counts);
    free(bytes);
    free(nall);
    free(all);
    return st;
}

/* Starts a save of the current state into `final` (collective): the state
 * checked finite, the temporary directory made, this rank's shards planned
 * and its file opened. */
static ts_status job_start(ts_trainer *t, const char *final, const char *tmp,
                           trainer_ckpt_job **out) {
    *out = NULL;
    TS_TRY(trainer_state_finite(t));
    TS_TRY(ckpt_agree(t, t->rank0 ? ts_ckpt_begin(tmp) : TS_OK, t->state.step, tmp, &ckpt_creating,
                      NULL));
    ts_model *m = t->model;
    trainer_ckpt_job *j = calloc(1, sizeof *j);
    ts_status st = j ? TS_OK : ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    if (!st) {
        j->rss0 = trainer_resident_reset();
        j->t0 = now_seconds();
        j->file.fd = -1;
        snprintf(j->final, sizeof j->final, "%s", final);
        snprintf(j->tmp, sizeof j->tmp, "%s", tmp);
        j->meta =
            (ts_ckpt_meta){t->state.step, t->state.data_cursor, t->state.seed, t->skipped_total};
        const char *delay = getenv("TESSERA_CKPT_WRITE_DELAY_MS");
        j->delay_ms = delay ? atoi(delay) : 0;
        int slow = 0;
        st = trainer_fault(t, t->state.step, "slow_checkpoint", &slow, &j->slow_s);
        if (!slow) j->slow_s = 0.0;
        j->ntable = ts_model_param_table_of(m, NULL, NULL, NULL);
        j->names = malloc((size_t)j->ntable * sizeof *j->names);
        j->shapes = malloc((size_t)j->ntable * sizeof *j->shapes);
        j->ndim = malloc((size_t)j->ntable * sizeof *j->ndim);
        if (!j->names || !j->shapes || !j->ndim ||
            ts_model_param_table_of(m, j->names, j->shapes, j->ndim) != j->ntable)
            st = ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    }
    if (!st) st = job_plan(t, j);
    char path[4300];
    if (!st) {
        ts_ckpt_rank_file(tmp, t->par ? t->par->rank : 0, path, sizeof path);
        st = ts_ckpt_file_open(&j->file, path);
    }
    if (st) {
        if (j && j->file.fd >= 0) ts_ckpt_file_close(&j->file);
        job_free(j);
        return st;
    }
    *out = j;
    return TS_OK;
}

/* A synchronous save into `final`: start, write from the arrays, publish. */
static ts_status trainer_save_now(ts_trainer *t, const char *final, const char *tmp) {
    trainer_ckpt_job *j = NULL;
    ts_status st = job_start(t, final, tmp, &j);
    st = ckpt_agree(t, st, t->state.step, tmp, &ckpt_starting, NULL);
    if (st) {
        if (t->rank0) ts_ckpt_remove_dir(tmp);
        job_free(j);
        return st;
    }
    float *stage = NULL;
    if (t->optim->state_be->kind != TS_DEVICE_CPU &&
        !(stage = ts_mem_alloc(TS_MEM_OTHER, SAVE_STAGE_BYTES)))
        st = ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    if (!st) st = job_write(t, j, stage);
    if (j->file.fd >= 0) ts_ckpt_file_close(&j->file);
    ts_mem_free(stage);
    st = job_publish(t, j, st);
    job_free(j);
    return st;
}

ts_status trainer_ckpt_poll(ts_trainer *t, int wait) {
    trainer_ckpt_job *j = t->ckpt_job;
    if (!j) return TS_OK;
    int32_t done = wait || atomic_load(&j->done), all = done;
    if (!wait && t->par && t->par->size > 1)
        TS_TRY(ts_comm_all_reduce(t->par->world, &done, &all, 1, TS_I32, TS_REDUCE_MIN));
    if (!all) return TS_OK;
    pthread_join(j->thread, NULL);
    t->ckpt_job = NULL;
    ts_status st = j->st ? ts_error(j->st, "%s", j->msg) : TS_OK;
    st = job_publish(t, j, st);
    job_free(j);
    return st;
}

void trainer_ckpt_abandon(ts_trainer *t) {
    trainer_ckpt_job *j = t->ckpt_job;
    if (!j) return;
    pthread_join(j->thread, NULL);
    t->ckpt_job = NULL;
    job_free(j);
}

ts_status trainer_save(ts_trainer *t) {
    TS_TRY(trainer_ckpt_poll(t, 1));
    char final[4096], tmp[4200];
    ts_ckpt_dir_paths(t->ckpt_dir, t->state.step, final, tmp, sizeof final);
    if (!t->ckpt_async) return trainer_save_now(t, final, tmp);
    trainer_ckpt_job *j = NULL;
    ts_status st = job_start(t, final, tmp, &j);
    if (!st) st = job_snapshot(t, j);
    st = ckpt_agree(t, st, t->state.step, tmp, &ckpt_starting, NULL);
    if (st) {
        if (j && j->file.fd >= 0) ts_ckpt_file_close(&j->file);
        if (t->rank0) ts_ckpt_remove_dir(tmp);
        job_free(j);
        return st;
    }
    j->t_snapshot = now_seconds() - j->t0;
    if (pthread_create(&j->thread, NULL, job_thread, j) != 0) {
        /* No thread: write now. */
        j->st = job_write(NULL, j, NULL);
        if (j->st) snprintf(j->msg, sizeof j->msg, "%s", ts_last_error());
        atomic_store(&j->done, 1);
        ts_status pst = job_publish(t, j, j->st ? ts_error(j->st, "%s", j->msg) : TS_OK);
        job_free(j);
        return pst;
    }
    j->thread_started = 1;
    t->ckpt_job = j;
    return TS_OK;
}

ts_status ts_trainer_save_checkpoint(ts_trainer *t, const char *path) {
    struct stat sb;
    if (lstat(path, &sb) == 0)
        return ts_error(TS_ERR_IO, "%s exists: a checkpoint is written to a new path only", path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.dir", path);
    return trainer_save_now(t, path, tmp);
}
