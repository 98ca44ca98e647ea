/*
 * plan_run.h — one layout's prediction, shared by `tessera plan` and its
 * search: the dry run of a rank (the real trainer over the counting backend
 * and communicators), the schedule's simulation, and with a cluster the
 * step time from the dry run's clock (plan_clock.h).
 */
#ifndef TESSERA_APPS_PLAN_RUN_H
#define TESSERA_APPS_PLAN_RUN_H

#include "cluster.h"
#include "config.h"
#include "parallel.h"
#include "plugin.h"
#include "schedule.h"
#include "train.h"

/* What `plan` predicts for one rank: its dry run's allocations per memory
 * category, and what every group's communicator carried in one step. */
typedef struct plan_result {
    size_t params, grads, optim, acts, comm, batch;
    /* Peaks during the steps: gathered parameters and gradients, staging. */
    size_t params_peak, grads_peak, optim_peak, total_peak;
    size_t numel; /* parameters of the whole model (P)          */
    /* The activations at their peak by what they hold (backend_plan.h). */
    const char *act_tag[16];
    size_t act_bytes[16];
    int nact;
    ts_dtype dtype;         /* of the parameters                          */
    const ts_parallel *par; /* the dry run's context: its counters    */
    /* FLOPs of one step (GEMMs and attention, 2 per multiply-add): forward,
     * backward, and forwards recomputed inside the backward. */
    double flops_fwd, flops_bwd, flops_re;
    const char *recompute; /* [train] recompute                       */
    ts_plan_time clock;    /* the second step on the clock (a cluster)  */
} plan_result;

/* Runs two steps of rank `rank` of the configured world as a dry run: the
 * real trainer, model, layers, schedule and plugins over the dry-run
 * backend and communicators (nothing computed, nothing exchanged), so the
 * prediction and the run cannot drift apart. With `cl` (and `mesh`, the
 * layout's), the clock runs: each group's communicator gets the link its
 * ranks use. Everything it counts and times is `dr`'s (dry_run.h), which
 * must outlive *world and *par; the calling thread runs it. */
ts_status plan_dry_run(ts_dry_run *dr, const ts_config *cfg, ts_plugins *reg, int ranks, int rank,
                       const cluster *cl, const ts_mesh *mesh, ts_comm **world, ts_parallel **par,
                       plan_result *r);

/* The model chunks per pipeline rank the layout plan's stages give (1
 * without stages). */
int plan_chunks(const ts_mesh *mesh, const ts_layout_plan *plan);

/* The list of actions stage `stage` of `stages` runs under the registered
 * scheduler, `chunks` model chunks a rank. */
ts_status plan_stage_schedule(ts_plugins *reg, int stages, int stage, int micro_batches, int chunks,
                              ts_schedule *out);

/* The pipeline schedule every stage would run (`chunks` per rank),
 * simulated with one forward `f`, backward (its input part when split) `b`
 * and weight part `w` units: *sim is empty (stages 0) without a registered
 * scheduler. */
ts_status plan_pipeline(ts_plugins *reg, const ts_mesh *mesh, int chunks, const ts_train_shape *sh,
                        int f, int b, int w, ts_schedule_sim *sim);

/* Stage s's idle share of the simulated makespan. */
double plan_stage_bubble(const ts_schedule_sim *sim, int s);

/* A layout's predicted step on a cluster. */
typedef struct plan_time {
    double step_s;            /* the step                                     */
    double compute_s;         /* kernels of this rank                         */
    double comm_s;            /* waits for communication not hidden           */
    double bubble_s;          /* the pipeline's idle time at this rank's stage */
    double f_s, b_s, w_s;     /* one forward, backward (input part), weight part */
    double outside_s;         /* after the actions: reductions' tail, optimizer */
    double model_flops;       /* the model's FLOPs of one step (all ranks)    */
    double tokens_per_s, mfu; /* MFU: model FLOPs / (step x ranks x peak)     */
} plan_time;

/* A dry run of m' micro-batches read as one of m (factor m / m'): every
 * action's time scales, what runs outside the actions does not. */
void plan_scale_clock(ts_plan_time *c, double factor);

/* The numbers of a dry run that grow with the blocks per model chunk: two
 * dry runs of a and b blocks per chunk give every count at l blocks along
 * their line (every block alike: the memory, FLOPs and time a block adds
 * are the same for each). */
typedef struct plan_numbers {
    double params, grads, optim, acts, comm, batch;
    double params_peak, grads_peak, optim_peak, total_peak;
    double flops_fwd, flops_bwd, flops_re;
    ts_plan_time clock;
} plan_numbers;
void plan_numbers_of(const plan_result *r, plan_numbers *out);
void plan_numbers_along(const plan_numbers *a, double la, const plan_numbers *b, double lb,
                        double l, plan_numbers *out);
/* Writes the numbers back into a result (sizes rounded to bytes). */
void plan_numbers_into(const plan_numbers *n, plan_result *r);

/* The predicted step from the clocks of pipeline stage 0 (`first`, or the
 * only rank without stages) and the last stage (`last`, NULL: as stage 0),
 * the middle stages taken as blocks alone, the schedule simulated with
 * each stage's action times (plan_makespan in plan_run.c): the slower of
 * the two end stages. */
ts_status plan_predict(const ts_plan_time *first, const ts_plan_time *last, ts_dtype dtype,
                       ts_plugins *reg, const ts_mesh *mesh, int chunks, const ts_train_shape *sh,
                       const cluster *cl, plan_time *out);

#endif /* TESSERA_APPS_PLAN_RUN_H */
