/*
 * trainer_impl.h — what the trainer's files share (not installed, not for
 * plugins): the trainer itself and the functions one file calls in another.
 *
 *   train.c     the trainer from the binding: the model's axes, the batch's
 *               split, the optimizer's shard, the norm owners and
 *               reductions; the batch of a step; ts_trainer_step
 *   shape.c     the model's and the batch's shape from the configuration
 *   trainer_setup.c  the rest of the set-up (device, run keys, data,
 *               schedule, buffers, resume) and the teardown
 *   executor.c  runs a step's schedule: actions, pipeline sends, hooks, the
 *               gradient reductions nobody provides, the optimizer step
 *   state_io.c  the training state in: checkpoints loaded (any topology's),
 *               exports, sharded optimizer state gathered and cut
 *   ckpt_save.c checkpoints out: every rank its shards, in the background
 *               with checkpoint_async
 *   report.c    the run loop: progress lines, JSONL metrics, checkpoints
 *               when due
 */
#ifndef TESSERA_CORE_TRAINER_IMPL_H
#define TESSERA_CORE_TRAINER_IMPL_H

#include <time.h>

#include "binder.h"
#include "run_config.h"
#include "data.h"
#include "file.h"
#include "internal.h"
#include "schedule.h"
#include "train.h"
#include "trace.h"

struct ts_trainer {
    const ts_config *cfg;
    ts_run_config rc;          /* cfg typed (run_config.h), filled first    */
    ts_parallel *par;          /* borrowed; NULL on one rank without MPI      */
    ts_plugins *reg;           /* borrowed; NULL when no plugin is loaded     */
    ts_layout_plan plan;       /* placements of every tensor after transforms */
    ts_binding binding;        /* what the binder decided from the plan (one
                                  rank: nothing bound, all zero)             */
    int rank0;                 /* this rank prints, writes metrics/checkpoints */
    int parts, part;           /* the global batch is cut in `parts` blocks of
                                  sequences (data.tokens S(0)); ours is `part` */
    ts_comm *batch_comm;       /* ranks holding disjoint parts of the batch   */
    ts_comm *rows_comm;        /* ... and of the hidden state's rows (SP)     */
    int *ready_after;          /* per parameter: the module whose backward
                                  completes its gradient                      */
    unsigned char *norm_owner; /* per parameter: this rank counts it in the
                               global gradient norm (exactly one rank of
                               every replica group does)                   */
    int hooks_on;              /* the current backward is its chunk's last    */
    int cur_mb;                /* the micro-batch of the action running      */
    /* What plugins see of the model (ABI 1.1): one view per parameter, per
     * module, the model and the training state. */
    ts_plugin_param *pviews;
    ts_plugin_param **pview_ptrs; /* the model's, then each module's       */
    ts_plugin_module *mviews;
    ts_plugin_model mview;
    ts_plugin_train_state tstate;
    /* Per parameter, bit a of model->axes: the core itself sums its
     * gradient over that axis before the optimizer (an axis cutting the
     * batch that no plugin reduces gradients over). */
    unsigned *core_reduce;
    /* Pipeline: this rank's stage of `stages`, running `chunks` model chunks
     * (virtual stages chunk * stages + stage). */
    int stages, stage, chunks;
    ts_comm *stage_comm;     /* the pipeline group: comm rank = stage       */
    ts_comm *stage_host;     /* the same group for host memory (borrowed)   */
    float *stage_bubble;     /* per stage: the last step's bubble        */
    int32_t *stage_peak_kib; /* per stage: the activation peak (KiB)     */
    ts_comm *tie_comm;       /* first and last stage (tied wte); borrowed    */
    /* Per (micro-batch, chunk): received activations and gradients, the
     * chunk's output, the gradient sent upstream, and pending sends. */
    float **act_in, **grad_in, **grad_out;
    ts_tensor *chunk_out;
    ts_comm_request **act_req, **grad_req;
    void **act_wire, **grad_wire; /* their bf16 copies (bf16 runs)       */
    /* The slots whose f32 gradient send upstream may still be pending: a
     * backward frees the finished ones among these, not among every slot. */
    size_t *grad_pending, ngrad_pending;
    /* Transfers between two chunks of this rank (a V schedule's turn): what
     * a SEND to this rank left for the RECV of (micro-batch, chunk). */
    float **mail_act, **mail_grad;
    double compute_s; /* this step's forward + backward time         */
    ts_trace *trace;  /* NULL unless [train] trace is set            */
    const char *trace_path;
    ts_parallel_snapshot *snap;
    int64_t epochs; /* [data] epochs; 0 = wrap around               */
    ts_model_config mcfg;
    const ts_arch *arch; /* [model] arch                                */
    ts_model *model;
    ts_optimizer *optim;
    /* Optimizer state cut by a plugin's provider (ABI 1.1) over one axis:
     * its index in model->axes (-1: not cut), the provider, and every
     * rank's range length in rank order of the axis group. */
    int opt_axis;
    int opt_cut; /* its ranges cut the buffers (not the whole on each rank) */
    const char *opt_plugin;
    const ts_plugin_optimizer_state_ops *opt_ops;
    ts_plugin_ctx *opt_ctx;
    void *opt_user;
    size_t *opt_counts;
    ts_dataset *data;
    ts_dataset *val_data; /* held-out ([data] val_source or split)  */
    int64_t eval_every, eval_batches;
    int64_t sample_every, sample_tokens;
    ts_train_state state;
    ts_schedule schedule;

    int T, B, global_batch, micro_batches;
    /* This rank's tokens of each sequence: T_local of them from position
     * seq0 (the whole sequence unless an axis cuts data.tokens along it). */
    int T_local, seq0;
    int32_t *positions; /* (T_local): their positions in the sequence     */
    int32_t *window;    /* one data window (T + 1 tokens' inputs, targets)  */
    int64_t steps;
    int log_every;
    const char *ckpt_dir;
    int64_t ckpt_every;
    uint64_t ckpt_read, ckpt_bytes;    /* the last load: bytes this rank read
                                          of the checkpoint's shard files   */
    int32_t ckpt_grew_kib;             /* ... and the most any rank's resident
                                          memory grew by                     */
    int ckpt_async;                    /* [train] checkpoint_async          */
    struct trainer_ckpt_job *ckpt_job; /* a background save (NULL: none) */
    float *ckpt_snapshot;              /* its host copy, kept between saves */
    uint64_t ckpt_snapshot_bytes;
    ts_dir_lock ckpt_lock;  /* held by rank 0 while it owns ckpt_dir      */
    ts_file_stream metrics; /* rank 0's JSONL metrics (f NULL: none)     */
    /* Steps whose loss or gradient norm was not finite: not applied. */
    int64_t max_skipped, skipped_in_row, skipped_total;
    int ckpt_due;  /* a checkpoint is due at the next applied step      */
    int plan_only; /* a dry run (ts_trainer_create_plan): no data, no
                      outputs, the dry-run backend                      */
    struct ts_dry_run *dry; /* that dry run (its world communicator's)  */

    const ts_backend *be;      /* the model's device (opened here)      */
    int32_t *tokens, *targets; /* (global_batch, T) of the current step,
                                  in host memory                        */
    ts_step_ctx *ctx;          /* one per micro-batch                   */
    /* The batch on the device (the host arrays themselves on the CPU). */
    int32_t *tokens_dev, *targets_dev;
};

static inline double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* An error about [section] key, naming where it was set (file and line). */
TS_INTERNAL ts_status trainer_key_error(const ts_config *cfg, const char *section, const char *key,
                                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The same wrapping the last error (a file's own message); returns `code`
 * when it is not TS_OK. */
TS_INTERNAL ts_status trainer_key_error_last(const ts_config *cfg, const char *section,
                                             const char *key, ts_status code);

/* a * b into *out; 0 when it does not fit an int64 (or either is negative). */
static inline int trainer_mul_fits(int64_t a, int64_t b, int64_t *out) {
    return a >= 0 && b >= 0 && !__builtin_mul_overflow(a, b, out);
}

/* trainer_setup.c: the parts of ts_trainer_create, in its order, each
 * failing with the message naming the key: threads and the device; the
 * run's keys and outputs; the data; the schedule; the step's buffers and
 * trace; resume = auto and the metrics file. */
TS_INTERNAL ts_status trainer_setup_device(ts_trainer *t);
TS_INTERNAL ts_status trainer_setup_run(ts_trainer *t);
TS_INTERNAL ts_status trainer_setup_data(ts_trainer *t, uint64_t seed);
TS_INTERNAL ts_status trainer_setup_schedule(ts_trainer *t);
TS_INTERNAL ts_status trainer_setup_buffers(ts_trainer *t);
TS_INTERNAL ts_status trainer_setup_resume(ts_trainer *t);
/* trainer_setup.c: a failure to build the model, with where the [model]
 * keys its message names were set (returns st). */
TS_INTERNAL ts_status trainer_model_error(const ts_config *cfg, ts_status st);
/* trainer_setup.c: activation recomputation from [train] recompute,
 * recompute_layers and recompute_method, checked against the model. */
TS_INTERNAL ts_status trainer_recompute(ts_trainer *t);

/* train.c: the memory counters of the model's device for `cat`. */
TS_INTERNAL ts_mem_counter trainer_mem(const ts_trainer *t, ts_mem_category cat);

/* train.c: whether every window of this step lies within [data] epochs,
 * agreed by all ranks (collective). */
TS_INTERNAL ts_status trainer_have_data(ts_trainer *t, int *have);

/* executor.c: runs the step's schedule (every action, the optimizer step
 * among them) on the loaded batch with `valid` target tokens in the global
 * batch. *loss_sum: this rank's summed loss; *norm, *lr: the step's
 * gradient norm and learning rate; *skipped: the update was not applied (a
 * non-finite loss or norm on some rank). */
TS_INTERNAL ts_status trainer_execute(ts_trainer *t, int64_t valid, double *loss_sum, double *norm,
                                      float *lr, int *skipped);

/* executor.c: a forward-only pass of the loaded batch along the step's
 * schedule; *loss_sum: this rank's summed loss (not normalised). */
TS_INTERNAL ts_status trainer_execute_forward(ts_trainer *t, double *loss_sum);
/* train.c: the held-out loss: eval_batches global batches of the held-out
 * data (the same ones every time), forward only, over valid tokens.
 * Collective. */
TS_INTERNAL ts_status trainer_eval(ts_trainer *t, double *val_loss);

/* state_io.c: sets the master weights (and the bf16 parameters) from the
 * unsharded flat array `full` (global_numel f32, host memory). */
TS_INTERNAL ts_status trainer_set_master(ts_trainer *t, const float *full);
/* state_io.c: a parameter's stored block as a box of three dimensions
 * (those past its own of extent 1); returns its element count. */
TS_INTERNAL int64_t trainer_param_box(const ts_param *p, int64_t off[3], int64_t ext[3]);
/* state_io.c: elements [lo, hi) of p's block (n elements, box-relative)
 * in the optimizer's range, the part this rank keeps state for; 0 when
 * none. */
TS_INTERNAL int trainer_param_range(const ts_trainer *t, const ts_param *p, int64_t n, int64_t *lo,
                                    int64_t *hi);
/* state_io.c: whether any rank failed (collective over the world): `st`
 * on a failing rank, an error naming `what` on the others, TS_OK on all
 * when none did. */
TS_INTERNAL ts_status trainer_agree(ts_trainer *t, ts_status st, const char *what);

/* report.c: whether TESSERA_FAULT injects fault `kind` ("kill",
 * "slow_checkpoint") on this rank at `step` (*hit; *arg: its SECONDS, when
 * arg is not NULL); fails naming the variable when an entry is malformed. */
TS_INTERNAL ts_status trainer_fault(const ts_trainer *t, int64_t step, const char *kind, int *hit,
                                    double *arg);

/* ckpt_save.c: agrees the load of checkpoint `path` (of `step`, -1 when
 * unknown) as trainer_agree does, but waits for the slowest reader up to
 * [train] checkpoint_timeout_s, not [comm] timeout_s (collective). */
TS_INTERNAL ts_status trainer_ckpt_load_agree(ts_trainer *t, ts_status st, const char *path,
                                              int64_t step);

/* ckpt_save.c: saves a checkpoint of the current state (collective: every
 * rank writes its shards; world rank 0 publishes). With [train]
 * checkpoint_async the shards are copied to host memory and written by a
 * thread; trainer_ckpt_poll publishes it later. A pending save is finished
 * first. */
TS_INTERNAL ts_status trainer_save(ts_trainer *t);
/* ckpt_save.c: publishes a background save once every rank has written
 * (collective; `wait`: block until then). No-op when none is pending. */
TS_INTERNAL ts_status trainer_ckpt_poll(ts_trainer *t, int wait);
/* ckpt_save.c: resets the process's resident-memory peak (Linux); returns
 * the resident KiB now. */
TS_INTERNAL int64_t trainer_resident_reset(void);
/* ckpt_save.c: the largest growth of any rank's resident peak over its
 * `base_kib` (collective over the world). */
TS_INTERNAL ts_status trainer_resident_growth(ts_trainer *t, int64_t base_kib, int32_t *max_kib);
/* ckpt_save.c: drops a pending background save (its temporary directory
 * stays for the next run to remove); for teardown after an error. */
TS_INTERNAL void trainer_ckpt_abandon(ts_trainer *t);

#endif /* TESSERA_CORE_TRAINER_IMPL_H */
