/*
 * trainer_setup.c — the trainer's set-up from its configuration, in the
 * order ts_trainer_create runs it (train.c): threads and device, the run's
 * keys and outputs, the data, the schedule, the step's buffers and the
 * resumed state; and the trainer's teardown. What the plan decides (the
 * binding, the model's axes, the optimizer's shard) is train.c's.
 */
#include "trainer_impl.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arch.h"
#include "backend_plan.h"
#include "comm_plan.h" /* ts_comm_plan_dry_run */
#include "cpu_kernels.h"
#include "tessera/device.h"

/* [train] threads = 0: OMP_NUM_THREADS when it is set (a whole number from
 * 1 to 4096, threads of each rank; anything else is refused naming it),
 * else the cores divided among the node's ranks (at least 1). */
static ts_status trainer_default_threads(int *out) {
    const char *omp = getenv("OMP_NUM_THREADS");
    if (omp) {
        char *end = NULL;
        long n = omp[0] >= '0' && omp[0] <= '9' ? strtol(omp, &end, 10) : 0;
        if (!end || *end || n < 1 || n > 4096)
            return ts_error(TS_ERR_CONFIG,
                            "OMP_NUM_THREADS = '%s' (environment): a whole number of threads "
                            "from 1 to 4096 is required, or unset it ([train] threads = N "
                            "overrides it)",
                            omp);
        *out = (int)n;
        return TS_OK;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *local = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    long ranks = local ? atol(local) : 1;
    if (cores < 1) cores = 1;
    if (ranks < 1) ranks = 1;
    long n = cores / ranks;
    *out = n < 1 ? 1 : (int)n;
    return TS_OK;
}

/* Creates [train] checkpoint_dir (with parents), checks that files can be
 * made in it, locks it for this run, and removes the temporary files a
 * killed writer left there (no writer can be active: we hold the lock). */
static ts_status trainer_claim_dir(ts_trainer *t) {
    ts_status st = ts_file_make_dir(t->ckpt_dir, "directory");
    if (!st) st = ts_dir_lock_acquire(&t->ckpt_lock, t->ckpt_dir, "directory");
    if (st) return trainer_key_error_last(t->cfg, "train", "checkpoint_dir", st);
    DIR *d = opendir(t->ckpt_dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "ckpt-", 5) != 0 || !strstr(e->d_name, ".tmp.")) continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", t->ckpt_dir, e->d_name);
        struct stat sb;
        int dir = lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
        if (dir ? ts_ckpt_remove_dir(path) == TS_OK : unlink(path) == 0)
            printf("checkpoint_dir: removed %s, left by an interrupted save\n", path);
    }
    if (d) closedir(d);
    return TS_OK;
}

/* An output file named by [train] KEY must be creatable at start-up, not
 * found unwritable at the end of the run. */
static ts_status trainer_check_output(ts_trainer *t, const char *key, const char *path,
                                      const char *what) {
    if (!path[0]) return TS_OK;
    ts_status st = ts_file_probe_output(path, what);
    return st ? trainer_key_error_last(t->cfg, "train", key, st) : TS_OK;
}

/* Opens [train] metrics. A resumed run keeps the lines of the steps up to
 * the checkpoint and drops those after it (written before a kill, and about
 * to be written again), so the file holds every step once. */
static ts_status trainer_open_metrics(ts_trainer *t, int resumed) {
    const char *path = t->rc.train_metrics;
    if (!path[0]) return TS_OK;
    ts_status st = TS_OK;
    struct stat sb;
    if (resumed && stat(path, &sb) == 0 && S_ISREG(sb.st_mode))
        st = ts_file_truncate_steps_after(path, t->state.step);
    if (!st) st = ts_file_stream_open(&t->metrics, path, "metrics", resumed ? "a" : "w");
    return st ? trainer_key_error_last(t->cfg, "train", "metrics", st) : TS_OK;
}

/* A failure to build the model, with where the [model] keys its message
 * names were set. */
ts_status trainer_model_error(const ts_config *cfg, ts_status st) {
    char msg[1024], where[1024] = "", w[256];
    snprintf(msg, sizeof msg, "%s", ts_last_error_bare());
    static const char *keys[] = {"layers", "d_model", "heads", "vocab", "padded_vocab", "context"};
    size_t j = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        char name[32];
        snprintf(name, sizeof name, "[model] %s ", keys[k]);
        if (strstr(msg, name) && ts_config_has(cfg, "model", keys[k]))
            j += (size_t)snprintf(where + j, sizeof where - j, "%s%s", j ? "; " : "",
                                  ts_config_where(cfg, "model", keys[k], w, (int)sizeof w));
    }
    return ts_error(st, "%s%s%s%s", msg, j ? " (" : "", where, j ? ")" : "");
}

/* Every rank's list of the registered scheduler, simulated together before
 * any step (core/base/schedule.h): a schedule that misses an action,
 * mismatches a transfer or deadlocks stops start-up naming the rank and the
 * action, on every rank alike. */
static ts_status trainer_check_schedule(ts_trainer *t, ts_plugins *reg) {
    int p = t->stages;
    ts_schedule *all = calloc((size_t)p, sizeof *all);
    if (!all) return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    const char *name = ts_plugins_scheduler_name(reg, 0);
    ts_status st = TS_OK;
    for (int s = 0; s < p && !st; s++) {
        ts_plugin_schedule_args args = {.struct_size = sizeof args,
                                        .stages = p,
                                        .stage = s,
                                        .micro_batches = t->micro_batches,
                                        .chunks = t->chunks};
        st = ts_plugins_schedule(reg, name, &args, &all[s]);
    }
    ts_schedule_shape shape = {p, t->micro_batches, t->chunks, 1, 1, 1, t->model->stage_order};
    ts_schedule_sim sim;
    if (!st) {
        st = ts_schedule_simulate_shape(&shape, all, &sim);
        if (st)
            st = ts_error(st, "pipeline schedule '%s' (%d stages, %d micro-batches): %s", name, p,
                          t->micro_batches, ts_last_error_bare());
        else
            ts_schedule_sim_free(&sim);
    }
    for (int s = 0; s < p; s++)
        ts_schedule_free(&all[s]);
    free(all);
    return st;
}

/* Activation recomputation from [train] recompute, recompute_layers and
 * recompute_method (model.h: ts_model_set_recompute). */
ts_status trainer_recompute(ts_trainer *t) {
    const ts_config *cfg = t->cfg;
    const char *name = t->rc.train_recompute;
    int word = ts_recompute_from_word(name);
    ts_recompute mode = word < 0 ? TS_RECOMPUTE_NONE : (ts_recompute)word;
    int layers = (int)t->rc.train_recompute_layers;
    const char *method = t->rc.train_recompute_method;
    int block = strcmp(method, "block") == 0;
    if (mode != TS_RECOMPUTE_NONE) {
        int most = ts_model_recompute_modules(t->model, mode);
        if (most == 0 && t->stages <= 1)
            return trainer_key_error(cfg, "train", "recompute",
                                     "recompute = %s: no module of architecture %s can recompute "
                                     "so",
                                     name, t->model->arch->name);
        if (layers > most && t->stages > 1)
            return trainer_key_error(cfg, "train", "recompute_layers",
                                     "%d blocks (recompute_method = %s), but a model chunk of "
                                     "pipeline stage %d has %d",
                                     layers, method, t->stage, most);
        if (layers > most)
            return trainer_key_error(cfg, "train", "recompute_layers",
                                     "%d blocks (recompute_method = %s), but the model has %d",
                                     layers, method, most);
    }
    ts_status st = ts_model_set_recompute(t->model, mode, layers, block);
    return st ? trainer_key_error_last(cfg, "train", "recompute", st) : TS_OK;
}

/* The backend of a dry run on [train] device: the device's sizing rules
 * (attention state, GEMM scratch), nothing computed; for device = cuda
 * without loading the CUDA backend (cuda_sizes.h). */
static ts_status trainer_plan_backend(ts_trainer *t, const char *device, const ts_backend **out) {
    t->dry = ts_comm_plan_dry_run(t->par->world);
    if (!t->dry)
        return ts_error(TS_ERR_INVALID,
                        "plan: a dry run's trainer needs a dry run's communicators");
    const ts_backend *target =
        strcmp(device, "cuda") == 0 ? ts_backend_cuda_sizes() : ts_backend_cpu();
    return ts_backend_plan(t->dry, target, out);
}

/* [train] threads and device: the CPU kernels' threads (a run's; a dry run
 * sets none) and the backend the model lives on. */
ts_status trainer_setup_device(ts_trainer *t) {
    const ts_config *cfg = t->cfg;
    int plan = t->plan_only;
    int threads = (int)t->rc.train_threads;
    if (!plan && threads == 0) TS_TRY(trainer_default_threads(&threads));
    if (!plan) ts_cpu_set_threads(threads);

    const char *device = t->rc.train_device;
    if (plan) return trainer_plan_backend(t, t->rc.train_device, &t->be);
    if (strcmp(device, "cpu") == 0) {
        t->be = ts_backend_cpu();
        return TS_OK;
    }
    /* One GPU per rank (the launcher's local rank); with several ranks the
     * model's tensors travel over NCCL, host scalars over MPI. */
    ts_status st = ts_backend_open(TS_DEVICE_CUDA, &t->be);
    if (!st && t->par) st = ts_parallel_open_device(t->par);
    if (st) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ts_last_error_bare());
        return trainer_key_error(cfg, "train", "device", "device = %s: %s", device, msg);
    }
    return TS_OK;
}

/* The run's keys: steps, logging, checkpoints and resume; the outputs
 * are checked before any work (the checkpoint directory created, checked
 * writable and locked by the rank that writes it). */
ts_status trainer_setup_run(ts_trainer *t) {
    const ts_config *cfg = t->cfg;
    int plan = t->plan_only;
    t->epochs = t->rc.data_epochs;
    t->steps = t->rc.train_steps;
    t->log_every = (int)t->rc.train_log_every;
    t->ckpt_dir = t->rc.train_checkpoint_dir;
    t->ckpt_every = t->rc.train_checkpoint_every;
    t->ckpt_async = t->rc.train_checkpoint_async;
    t->max_skipped = t->rc.train_max_skipped_steps;
    if (t->ckpt_every > 0 && !t->ckpt_dir[0])
        return trainer_key_error(cfg, "train", "checkpoint_every",
                                 "checkpoints every %lld steps need [train] checkpoint_dir",
                                 (long long)t->ckpt_every);
    const char *resume = t->rc.train_resume;
    if (strcmp(resume, "auto") == 0 && !t->ckpt_dir[0])
        return trainer_key_error(
            cfg, "train", "resume",
            "resume = auto needs [train] checkpoint_dir (the directory to resume from)");
    /* The outputs are checked before any work: the checkpoint directory is
     * created, checked writable and locked by the rank that writes it. */
    if (t->rank0 && !plan && t->ckpt_dir[0]) TS_TRY(trainer_claim_dir(t));
    if (t->rank0 && !plan) TS_TRY(trainer_check_output(t, "trace", t->rc.train_trace, "trace"));
    if (t->rank0 && !plan)
        TS_TRY(trainer_check_output(t, "summary", t->rc.train_summary, "summary"));

    return TS_OK;
}

/* [data]: the training data and the held-out data, opened (a dry run reads
 * none: its batches are zeros) and checked against the batch. */
ts_status trainer_setup_data(ts_trainer *t, uint64_t seed) {
    const ts_config *cfg = t->cfg;
    int plan = t->plan_only;
    ts_data_opts dopts = {
        .source = t->rc.data_source,
        .vocab = t->mcfg.vocab,
        .seed = seed,
        .shuffle = t->rc.data_shuffle,
        .synthetic_tokens = t->rc.data_synthetic_tokens,
        .synthetic_branching = (int)t->rc.data_synthetic_branching,
        .ignore_token = (int)t->rc.data_ignore_token,
    };
    const char *val_source = t->rc.data_val_source;
    dopts.split = t->rc.data_split;
    t->eval_every = t->rc.train_eval_every;
    t->eval_batches = t->rc.train_eval_batches;
    t->sample_every = t->rc.train_sample_every;
    t->sample_tokens = t->rc.train_sample_tokens;
    if (dopts.split > 0 && val_source[0])
        return trainer_key_error(cfg, "data", "split",
                                 "split = %g holds out part of source, and val_source names other "
                                 "held-out data: set one of them",
                                 dopts.split);
    if (t->eval_every > 0 && !(dopts.split > 0) && !val_source[0])
        return trainer_key_error(
            cfg, "train", "eval_every",
            "eval_every = %lld needs held-out data: [data] val_source or split",
            (long long)t->eval_every);
    /* A dry run reads no data (its batches are zeros). */
    ts_status st = TS_OK;
    if (!plan) st = ts_dataset_open(&t->data, &dopts);
    if (!st && !plan && (dopts.split > 0 || val_source[0])) {
        ts_data_opts vopts = dopts;
        vopts.held_out = 1;
        if (val_source[0]) {
            vopts.source = val_source;
            vopts.split = 0;
        }
        st = ts_dataset_open(&t->val_data, &vopts);
        if (st) {
            char msg[2048];
            snprintf(msg, sizeof msg, "%s", ts_last_error_bare());
            return trainer_key_error(cfg, "data", val_source[0] ? "val_source" : "split", "%s",
                                     msg);
        }
    }
    if (st) {
        char where[512];
        ts_config_where(cfg, "data", "source", where, sizeof where);
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", ts_last_error_bare());
        return ts_error(st, "%s: %s", where, msg);
    }
    if (!plan && t->val_data && t->eval_every > 0 &&
        ts_dataset_num_windows(t->val_data, t->T) < t->eval_batches * t->global_batch)
        return trainer_key_error(
            cfg, "train", "eval_batches",
            "eval_batches = %lld global batches of %d sequences need %lld held-out windows of "
            "seq_len %d; %s holds %lld",
            (long long)t->eval_batches, t->global_batch,
            (long long)(t->eval_batches * t->global_batch), t->T, ts_dataset_describe(t->val_data),
            (long long)ts_dataset_num_windows(t->val_data, t->T));
    if (!plan && ts_dataset_num_windows(t->data, t->T) < 1)
        return trainer_key_error(
            cfg, "data", "source", "%s holds %lld tokens, fewer than seq_len + 1 = %d",
            ts_dataset_describe(t->data), (long long)ts_dataset_num_tokens(t->data), t->T + 1);

    return TS_OK;
}

/* The pipeline schedule: the registered scheduler's list for this stage
 * (every stage's simulated together when there are several), or one stage's
 * default. */
ts_status trainer_setup_schedule(ts_trainer *t) {
    ts_plugins *reg = t->reg;
    if (ts_plugins_num_schedulers(reg) > 1)
        return ts_error(TS_ERR_CONFIG, "%d schedulers are registered; one is expected",
                        ts_plugins_num_schedulers(reg));
    if (ts_plugins_num_schedulers(reg) == 1) {
        ts_plugin_schedule_args args = {.struct_size = sizeof args,
                                        .stages = t->stages ? t->stages : 1,
                                        .stage = t->stage,
                                        .micro_batches = t->micro_batches,
                                        .chunks = t->chunks};
        TS_TRY(ts_plugins_schedule(reg, ts_plugins_scheduler_name(reg, 0), &args, &t->schedule));
        return t->stages > 1 ? trainer_check_schedule(t, reg) : TS_OK;
    }
    if (t->stages > 1)
        return ts_error(TS_ERR_PLUGIN,
                        "pp = %d needs a pipeline schedule; no plugin registers one (nothing "
                        "implements the pipeline axis)",
                        t->stages);
    return ts_schedule_default(t->micro_batches, &t->schedule);
}

/* The step's buffers: per (micro-batch, chunk) the pipeline's slots, the
 * trace, and the batch's tokens and targets (on the host, and on the
 * device when it is not the CPU). */
ts_status trainer_setup_buffers(ts_trainer *t) {
    ts_parallel *par = t->par;
    int plan = t->plan_only;
    size_t slots = (size_t)t->micro_batches * t->chunks;
    t->act_in = calloc(slots, sizeof *t->act_in);
    t->grad_in = calloc(slots, sizeof *t->grad_in);
    t->grad_out = calloc(slots, sizeof *t->grad_out);
    t->chunk_out = calloc(slots, sizeof *t->chunk_out);
    t->act_req = calloc(slots, sizeof *t->act_req);
    t->grad_req = calloc(slots, sizeof *t->grad_req);
    t->grad_pending = calloc(slots, sizeof *t->grad_pending);
    t->act_wire = calloc(slots, sizeof *t->act_wire);
    t->grad_wire = calloc(slots, sizeof *t->grad_wire);
    t->mail_act = calloc(slots, sizeof *t->mail_act);
    t->mail_grad = calloc(slots, sizeof *t->mail_grad);
    if (!t->act_in || !t->grad_in || !t->grad_out || !t->chunk_out || !t->act_req || !t->grad_req ||
        !t->grad_pending || !t->act_wire || !t->grad_wire || !t->mail_act || !t->mail_grad)
        return ts_error(TS_ERR_NOMEM, "trainer: out of memory");
    t->trace_path = plan ? "" : t->rc.train_trace;
    if (t->trace_path[0]) {
        TS_TRY(ts_trace_create(par ? par->rank : 0, 0, &t->trace));
        if (par)
            TS_TRY(ts_trace_sync_epoch(t->trace, par->world));
        else
            ts_trace_set_epoch(t->trace, ts_trace_now());
    }

    size_t toks = (size_t)t->micro_batches * t->B * t->T_local;
    t->window = malloc(2 * (size_t)t->T * sizeof *t->window);
    if (!t->window) return ts_error(TS_ERR_NOMEM, "trainer: out of memory for batches");
    t->tokens = ts_mem_alloc(TS_MEM_OTHER, toks * sizeof(int32_t));
    t->targets = ts_mem_alloc(TS_MEM_OTHER, toks * sizeof(int32_t));
    t->ctx = calloc((size_t)t->micro_batches, sizeof *t->ctx);
    if (!t->tokens || !t->targets || !t->ctx)
        return ts_error(TS_ERR_NOMEM, "trainer: out of memory for batches");
    if (t->be->kind == TS_DEVICE_CPU) {
        t->tokens_dev = t->tokens;
        t->targets_dev = t->targets;
    } else {
        t->tokens_dev = t->be->alloc(TS_MEM_OTHER, toks * sizeof(int32_t));
        t->targets_dev = t->be->alloc(TS_MEM_OTHER, toks * sizeof(int32_t));
        if (!t->tokens_dev || !t->targets_dev) return TS_ERR_NOMEM;
    }

    return TS_OK;
}

/* [train] resume = auto: the latest checkpoint of checkpoint_dir loaded;
 * then [train] metrics opened (kept up to the checkpoint's step). */
ts_status trainer_setup_resume(ts_trainer *t) {
    int plan = t->plan_only;
    const char *resume = t->rc.train_resume;
    int resumed = 0;
    if (!plan && strcmp(resume, "auto") == 0) {
        char path[4096];
        int found = 0;
        TS_TRY(ts_checkpoint_latest(t->ckpt_dir, path, sizeof path, &found));
        if (found) {
            TS_TRY(ts_trainer_load(t, path));
            if (t->rank0)
                printf("resumed from %s at step %lld (rank 0 read %.2f MiB of %.2f; resident "
                       "memory of a rank grew by at most %.2f MiB)\n",
                       path, (long long)t->state.step, (double)t->ckpt_read / (1 << 20),
                       (double)t->ckpt_bytes / (1 << 20), t->ckpt_grew_kib / 1024.0);
            resumed = 1;
        } else if (t->rank0) {
            printf("resume = auto: no checkpoint in %s, starting from step 0\n", t->ckpt_dir);
        }
    }
    if (t->rank0 && !plan) TS_TRY(trainer_open_metrics(t, resumed));
    return TS_OK;
}

void ts_trainer_destroy(ts_trainer *t) {
    if (!t) return;
    ts_file_stream_close(&t->metrics);
    trainer_ckpt_abandon(t);
    ts_mem_free(t->ckpt_snapshot);
    ts_dir_lock_release(&t->ckpt_lock);
    free(t->snap);
    size_t slots = (size_t)t->micro_batches * (t->chunks > 0 ? t->chunks : 1);
    for (size_t i = 0; t->be && t->act_in && i < slots; i++) {
        t->be->free(t->act_in[i]);
        t->be->free(t->grad_in[i]);
        t->be->free(t->grad_out[i]);
        if (t->mail_act) t->be->free(t->mail_act[i]);
        if (t->mail_grad) t->be->free(t->mail_grad[i]);
    }
    free(t->mail_act);
    free(t->mail_grad);
    free(t->act_in);
    free(t->grad_in);
    free(t->grad_out);
    free(t->chunk_out);
    free(t->act_req);
    free(t->grad_req);
    free(t->grad_pending);
    free(t->act_wire);
    free(t->grad_wire);
    ts_trace_destroy(t->trace);
    free(t->ready_after);
    free(t->norm_owner);
    free(t->window);
    free(t->positions);
    if (t->reg) ts_plugins_set_model(t->reg, NULL);
    free(t->pviews);
    free(t->pview_ptrs);
    free(t->mviews);
    free(t->core_reduce);
    free(t->opt_counts);
    free(t->stage_bubble);
    free(t->stage_peak_kib);
    ts_layout_plan_free(&t->plan);
    ts_schedule_free(&t->schedule);
    if (t->be && t->be->kind != TS_DEVICE_CPU) {
        t->be->free(t->tokens_dev);
        t->be->free(t->targets_dev);
    }
    ts_mem_free(t->tokens);
    ts_mem_free(t->targets);
    free(t->ctx);
    ts_optimizer_destroy(t->optim);
    ts_model_destroy(t->model);
    if (t->be && t->be->kind != TS_DEVICE_PLAN) ts_backend_close(t->be);
    ts_dataset_close(t->data);
    ts_dataset_close(t->val_data);
    free(t);
}
