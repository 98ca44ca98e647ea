/*
 * plan_run.c — one layout's dry run, pipeline simulation and predicted step
 * (plan_run.h).
 */
#include "plan_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arch.h" /* the model's FLOPs */
#include "backend_plan.h"
#include "binder.h" /* the pipeline's chunks */
#include "comm_plan.h"

/* Gives each of the dry run's communicators the link its group's ranks use
 * on the cluster: the group of `rank` of the token the communicator is
 * named after; the world; the tied embedding's first and last stage. */
static ts_status plan_set_links(const cluster *cl, const ts_mesh *mesh, int rank, ts_comm *world,
                                ts_parallel *par) {
    int n = ts_mesh_world(mesh);
    int *ranks = malloc((size_t)n * sizeof *ranks);
    if (!ranks) return ts_error(TS_ERR_NOMEM, "plan: out of memory");
    ts_status st = TS_OK;
    for (int i = 0; i < n; i++)
        ranks[i] = i;
    st = ts_comm_plan_set_link(world, cluster_link(cl, ranks, n));
    for (int i = 0; i < par->ncomms && !st; i++) {
        ts_comm *c = par->comms[i];
        const char *name = ts_comm_name(c);
        ts_mesh_group g;
        if (strcmp(name, "embedding") == 0) {
            if (ts_comm_size(c) < 2) continue;
            st = ts_mesh_group_of(mesh, "pp", rank, &g, ranks, n);
            if (!st) ranks[1] = ranks[g.size - 1];
            if (!st) st = ts_comm_plan_set_link(c, cluster_link(cl, ranks, 2));
            continue;
        }
        st = ts_mesh_group_of(mesh, name, rank, &g, ranks, n);
        if (!st) st = ts_comm_plan_set_link(c, cluster_link(cl, ranks, g.size));
    }
    free(ranks);
    return st;
}

ts_status plan_dry_run(ts_dry_run *dr, const ts_config *cfg, ts_plugins *reg, int ranks, int rank,
                       const cluster *cl, const ts_mesh *mesh, ts_comm **world, ts_parallel **par,
                       plan_result *r) {
    TS_TRY(ts_comm_plan_create(dr, "world", rank, ranks, world));
    ts_mesh *own = NULL;
    TS_TRY(ts_plugins_mesh(reg, ranks, NULL, &own));
    TS_TRY(ts_parallel_create_plan_mesh(*world, own, par));
    if (cl) TS_TRY(plan_set_links(cl, mesh, rank, *world, *par));
    ts_plugins_set_comm_source(reg, ts_parallel_plugin_comm, *par);
    ts_plugins_set_coord_source(reg, ts_parallel_plugin_coord);
    ts_trainer *t = NULL;
    TS_TRY(ts_trainer_create_plan(cfg, *par, reg, &t));
    ts_plan_clock_enable(dr, cl ? &cl->rates : NULL);
    /* Two steps: the second holds the workspace the first grew while it
     * saves its activations, the steady state a run reaches. The traffic
     * counted is the second's (every step's is the same). */
    ts_step_stats stats;
    ts_status st = ts_trainer_step(t, &stats);
    for (int i = 0; i < (*par)->ncomms; i++)
        ts_comm_counters_reset((*par)->comms[i]);
    ts_comm_counters_reset(*world);
    ts_backend_plan_reset_flops(dr);
    ts_plan_clock_reset(dr);
    if (!st) st = ts_trainer_step(t, &stats);
    if (!st) {
        r->params = ts_backend_plan_stats(dr, TS_MEM_PARAMS).allocated;
        r->grads = ts_backend_plan_stats(dr, TS_MEM_GRADS).allocated;
        r->optim = ts_backend_plan_stats(dr, TS_MEM_OPTIM).allocated;
        r->acts = ts_backend_plan_stats(dr, TS_MEM_ACTS).peak;
        r->comm = ts_backend_plan_stats(dr, TS_MEM_COMM).peak;
        r->batch = ts_backend_plan_stats(dr, TS_MEM_OTHER).peak;
        r->params_peak = ts_backend_plan_stats(dr, TS_MEM_PARAMS).peak;
        r->grads_peak = ts_backend_plan_stats(dr, TS_MEM_GRADS).peak;
        r->optim_peak = ts_backend_plan_stats(dr, TS_MEM_OPTIM).peak;
        r->total_peak = ts_backend_plan_stats(dr, TS_MEM_NCAT).peak;
        r->nact = ts_backend_plan_peak_items(dr, r->act_tag, r->act_bytes, 16);
        const ts_train_state *ts = ts_trainer_state(t);
        r->numel = ts->model->global_numel;
        r->dtype = ts->model->dtype;
        r->par = *par;
        ts_backend_plan_flops(dr, &r->flops_fwd, &r->flops_bwd, &r->flops_re);
        r->recompute = ts_config_str(cfg, "train", "recompute");
        ts_plan_clock_read(dr, &r->clock);
    }
    ts_plan_clock_enable(dr, NULL);
    ts_trainer_destroy(t);
    return st;
}

double plan_stage_bubble(const ts_schedule_sim *sim, int s) {
    int idle = 0;
    for (int t = 0; t < sim->makespan; t++)
        idle += sim->slots[(size_t)s * (size_t)sim->makespan + (size_t)t].op == '.';
    return sim->makespan ? (double)idle / sim->makespan : 0.0;
}

int plan_chunks(const ts_mesh *mesh, const ts_layout_plan *plan) {
    return ts_binding_chunks(plan, ts_mesh_axis_size(mesh, TS_AXIS_PP));
}

ts_status plan_stage_schedule(ts_plugins *reg, int stages, int stage, int micro_batches, int chunks,
                              ts_schedule *out) {
    ts_plugin_schedule_args args = {.struct_size = sizeof args,
                                    .stages = stages,
                                    .stage = stage,
                                    .micro_batches = micro_batches,
                                    .chunks = chunks};
    return ts_plugins_schedule(reg, ts_plugins_scheduler_name(reg, 0), &args, out);
}

ts_status plan_pipeline(ts_plugins *reg, const ts_mesh *mesh, int chunks, const ts_train_shape *sh,
                        int f, int b, int w, ts_schedule_sim *sim) {
    memset(sim, 0, sizeof *sim);
    if (ts_plugins_num_schedulers(reg) != 1) return TS_OK;
    int pp = ts_mesh_axis_size(mesh, TS_AXIS_PP);
    ts_schedule *per_stage = calloc((size_t)pp, sizeof *per_stage);
    if (!per_stage) return ts_error(TS_ERR_NOMEM, "plan: out of memory");
    ts_status st = TS_OK;
    for (int s = 0; s < pp && !st; s++)
        st = plan_stage_schedule(reg, pp, s, sh->micro_batches, chunks, &per_stage[s]);
    ts_schedule_shape shape = {pp, sh->micro_batches, chunks, f, b, w, ts_plugins_stage_order(reg)};
    if (!st) st = ts_schedule_simulate_shape(&shape, per_stage, sim);
    for (int s = 0; s < pp; s++)
        ts_schedule_free(&per_stage[s]);
    free(per_stage);
    return st;
}

void plan_scale_clock(ts_plan_time *c, double factor) {
    double actions = 0;
    for (int k = 0; k < TS_PLAN_ACTIONS; k++)
        actions += c->action_s[k] *= factor;
    c->compute_s = c->outside_compute_s + (c->compute_s - c->outside_compute_s) * factor;
    c->total = c->outside + actions;
    c->exposed_s = c->total - c->compute_s;
}

void plan_numbers_of(const plan_result *r, plan_numbers *out) {
    *out = (plan_numbers){(double)r->params,
                          (double)r->grads,
                          (double)r->optim,
                          (double)r->acts,
                          (double)r->comm,
                          (double)r->batch,
                          (double)r->params_peak,
                          (double)r->grads_peak,
                          (double)r->optim_peak,
                          (double)r->total_peak,
                          r->flops_fwd,
                          r->flops_bwd,
                          r->flops_re,
                          r->clock};
}

_Static_assert(sizeof(plan_numbers) == (13 + 5 + TS_PLAN_ACTIONS) * sizeof(double),
               "plan_numbers holds doubles only (plan_numbers_along walks it as an array)");

/* x at l on the line through (la, a) and (lb, b). */
static double plan_along(double a, double la, double b, double lb, double l) {
    return a + (b - a) * (l - la) / (lb - la);
}

void plan_numbers_along(const plan_numbers *a, double la, const plan_numbers *b, double lb,
                        double l, plan_numbers *out) {
    /* Every field is a double: walk them as an array. */
    const double *x = (const double *)a, *y = (const double *)b;
    double *z = (double *)out;
    for (size_t i = 0; i < sizeof *out / sizeof(double); i++)
        z[i] = plan_along(x[i], la, y[i], lb, l);
}

void plan_numbers_into(const plan_numbers *n, plan_result *r) {
    r->params = (size_t)llround(n->params);
    r->grads = (size_t)llround(n->grads);
    r->optim = (size_t)llround(n->optim);
    r->acts = (size_t)llround(n->acts);
    r->comm = (size_t)llround(n->comm);
    r->batch = (size_t)llround(n->batch);
    r->params_peak = (size_t)llround(n->params_peak);
    r->grads_peak = (size_t)llround(n->grads_peak);
    r->optim_peak = (size_t)llround(n->optim_peak);
    r->total_peak = (size_t)llround(n->total_peak);
    r->flops_fwd = n->flops_fwd;
    r->flops_bwd = n->flops_bwd;
    r->flops_re = n->flops_re;
    r->clock = n->clock;
}

/* Action a of stage s in the simulation: its seconds (a computation), or
 * -1 and *t, the transfer it sends or receives (cells: a direction, a
 * virtual stage, a micro-batch; (size_t)-1 for neither). */
static double plan_action_cost(const ts_action *a, int p, int chunks, int m, int order, int s,
                               const double *f, const double *b, const double *w, size_t *t) {
    int vs = ts_stage_virtual(order, p, s, a->chunk);
    *t = (size_t)-1;
    switch (a->kind) {
    case TS_ACT_FORWARD: return f[s];
    case TS_ACT_BACKWARD: return b[s] + w[s];
    case TS_ACT_BACKWARD_INPUT: return b[s];
    case TS_ACT_BACKWARD_WEIGHT: return w[s];
    case TS_ACT_SEND_ACT:
    case TS_ACT_RECV_GRAD:
        *t = ((size_t)(a->kind == TS_ACT_RECV_GRAD) * p * chunks + (size_t)vs) * m + (size_t)a->mb;
        return -1;
    case TS_ACT_RECV_ACT:
    case TS_ACT_SEND_GRAD:
        *t = ((size_t)(a->kind == TS_ACT_SEND_GRAD) * p * chunks + (size_t)vs - 1) * m +
             (size_t)a->mb;
        return -1;
    default: return -1;
    }
}

/* Stage s, idle, runs its actions up to a computation (started: left[s]
 * >= 0) or a receive whose send has not run. */
static void plan_shared_advance(const ts_schedule *sch, int p, int chunks, int m, int order,
                                const double *f, const double *b, const double *w, char *issued,
                                size_t cells, int s, int *pc, double *left) {
    while (left[s] < 0 && pc[s] < sch[s].nactions) {
        const ts_action *a = &sch[s].actions[pc[s]];
        size_t t;
        left[s] = plan_action_cost(a, p, chunks, m, order, s, f, b, w, &t);
        if (left[s] >= 0) return; /* started */
        if (a->kind == TS_ACT_SEND_ACT || a->kind == TS_ACT_SEND_GRAD) {
            if (t < cells) issued[t] = 1;
        } else if ((a->kind == TS_ACT_RECV_ACT || a->kind == TS_ACT_RECV_GRAD) && t < cells &&
                   !issued[t]) {
            return; /* waits for its send */
        }
        pc[s]++;
    }
}

/* The pipeline's makespan: every stage runs its list of the schedule, an
 * action of stage s taking f[s], b[s] (a backward's input part, or a whole
 * backward less w[s]) and w[s] seconds, a receive waiting for its send.
 * With `cores` > 0 the ranks share that many CPU cores (processor
 * sharing): the times are those measured with every rank busy, and with
 * fewer busy each runs faster, up to a core of its own. A stage's action is
 * run by its ranks (tp, cp, dp) together. An event simulation: at each
 * event every running action advances at the speed its number of busy
 * ranks gives. busy[s]: the seconds stage s computes. */
static ts_status plan_makespan(ts_plugins *reg, const ts_mesh *mesh, int chunks,
                               const ts_train_shape *sh, const double *f, const double *b,
                               const double *w, double cores, double *makespan, double *busy) {
    int p = ts_mesh_axis_size(mesh, TS_AXIS_PP), m = sh->micro_batches;
    double ranks = ts_mesh_world(mesh), per_stage = ranks / p;
    ts_schedule *sch = calloc((size_t)p, sizeof *sch);
    int *pc = calloc((size_t)p, sizeof *pc);
    double *left = calloc((size_t)p, sizeof *left); /* < 0: not running */
    size_t cells = 2 * (size_t)p * (size_t)chunks * (size_t)m;
    char *issued = calloc(cells, 1);
    ts_status st = TS_OK;
    if (!sch || !pc || !left || !issued) st = ts_error(TS_ERR_NOMEM, "plan: out of memory");
    for (int s = 0; s < p && left; s++)
        left[s] = -1;
    for (int s = 0; s < p && !st; s++)
        st = plan_stage_schedule(reg, p, s, m, chunks, &sch[s]);
    int order = ts_plugins_stage_order(reg);
    if (!st && cores <= 0) {
        /* A device each: every stage keeps its own clock, a receive moves it
         * to its send's time (as the unit-time simulation, in seconds). */
        double *clock = calloc((size_t)p, sizeof *clock), *sent = malloc(cells * sizeof *sent);
        if (!clock || !sent) st = ts_error(TS_ERR_NOMEM, "plan: out of memory");
        for (int s = 0; !st && s < p; s++)
            busy[s] = 0;
        for (int progress = 1, done = 0; !st && done < p;) {
            if (!progress) {
                st = ts_error(TS_ERR_INVALID, "plan: the simulation of the schedule deadlocks");
                break;
            }
            progress = 0, done = 0;
            for (int s = 0; s < p; s++) {
                for (; pc[s] < sch[s].nactions; pc[s]++, progress = 1) {
                    size_t t;
                    double d = plan_action_cost(&sch[s].actions[pc[s]], p, chunks, m, order, s, f,
                                                b, w, &t);
                    const ts_action *a = &sch[s].actions[pc[s]];
                    if (d >= 0) {
                        clock[s] += d;
                        busy[s] += d;
                    } else if (t >= cells) {
                        continue;
                    } else if (a->kind == TS_ACT_SEND_ACT || a->kind == TS_ACT_SEND_GRAD) {
                        issued[t] = 1;
                        sent[t] = clock[s];
                    } else if (!issued[t]) {
                        break; /* its send has not run yet */
                    } else if (sent[t] > clock[s]) {
                        clock[s] = sent[t];
                    }
                }
                done += pc[s] == sch[s].nactions;
            }
        }
        double end = 0;
        for (int s = 0; clock && s < p; s++)
            if (clock[s] > end) end = clock[s];
        *makespan = end;
        free(clock);
        free(sent);
        goto out;
    }
    double now = 0, all_busy = cores > 0 ? fmin(1.0, cores / ranks) : 1.0;
    for (int s = 0; s < p; s++)
        busy[s] = 0;
    while (!st) {
        int running = 0, done = 0, moved = 1;
        /* start what can start: a send may free a receive of a stage swept
         * before it */
        while (moved) {
            moved = 0;
            for (int s = 0; s < p; s++) {
                int was = pc[s], idle = left[s] < 0;
                plan_shared_advance(sch, p, chunks, m, order, f, b, w, issued, cells, s, pc, left);
                if (idle && left[s] >= 0) busy[s] += left[s];
                moved |= pc[s] != was || (idle && left[s] >= 0);
            }
        }
        for (int s = 0; s < p; s++) {
            running += left[s] >= 0;
            done += pc[s] == sch[s].nactions;
        }
        if (done == p) break;
        if (!running) {
            st = ts_error(TS_ERR_INVALID, "plan: the simulation of the schedule deadlocks");
            break;
        }
        /* each busy rank's speed over its speed with all ranks busy */
        double speed = cores > 0 ? fmin(1.0, cores / (running * per_stage)) / all_busy : 1.0;
        double dt = INFINITY;
        for (int s = 0; s < p; s++)
            if (left[s] >= 0 && left[s] / speed < dt) dt = left[s] / speed;
        now += dt;
        for (int s = 0; s < p; s++) {
            if (left[s] < 0) continue;
            left[s] -= dt * speed;
            if (left[s] <= 1e-12 * (f[s] + b[s] + w[s])) left[s] = -1, pc[s]++;
        }
    }
    *makespan = now;
out:
    for (int s = 0; sch && s < p; s++)
        ts_schedule_free(&sch[s]);
    free(sch);
    free(pc);
    free(left);
    free(issued);
    return st;
}

/* An action's average seconds from a clock: forward (with its receive and
 * send), backward or its input part (with theirs), weight part. */
static void plan_action_times(const ts_plan_time *c, double units, double *f, double *b,
                              double *w) {
    const double *a = c->action_s;
    *f = (a[TS_ACT_FORWARD] + a[TS_ACT_RECV_ACT] + a[TS_ACT_SEND_ACT]) / units;
    *b = (a[TS_ACT_BACKWARD] + a[TS_ACT_BACKWARD_INPUT] + a[TS_ACT_RECV_GRAD] +
          a[TS_ACT_SEND_GRAD]) /
         units;
    *w = a[TS_ACT_BACKWARD_WEIGHT] / units;
}

ts_status plan_predict(const ts_plan_time *first, const ts_plan_time *last, ts_dtype dtype,
                       ts_plugins *reg, const ts_mesh *mesh, int chunks, const ts_train_shape *sh,
                       const cluster *cl, plan_time *out) {
    memset(out, 0, sizeof *out);
    const ts_plan_time *c = first;
    double units = (double)sh->micro_batches * chunks;
    plan_action_times(c, units, &out->f_s, &out->b_s, &out->w_s);
    out->compute_s = c->compute_s;
    out->comm_s = c->exposed_s;
    out->outside_s = c->outside;
    out->step_s = c->total;
    int p = ts_mesh_axis_size(mesh, TS_AXIS_PP);
    if (p > 1 && ts_plugins_num_schedulers(reg) == 1) {
        /* Stage 0 acts as r's rank, the last stage as `last`; the middle
         * ones hold blocks only: like stage 0 in the interleaved order (its
         * embedding is a gather), like the last in the V order (whose rank
         * 0 holds the LM head too). */
        const ts_plan_time *end = last ? last : c;
        int v_order = ts_plugins_stage_order(reg) == TS_STAGES_V;
        double *t = calloc(4 * (size_t)p, sizeof *t);
        if (!t) return ts_error(TS_ERR_NOMEM, "plan: out of memory");
        double *f = t, *b = t + p, *w = t + 2 * p, *busy = t + 3 * p;
        for (int s = 0; s < p; s++) {
            const ts_plan_time *k = s == 0 ? c : s == p - 1 || v_order ? end : c;
            plan_action_times(k, units, &f[s], &b[s], &w[s]);
        }
        double makespan = 0;
        ts_status st = plan_makespan(reg, mesh, chunks, sh, f, b, w, cl->cores, &makespan, busy);
        if (!st) {
            /* the slower of the two ends: what runs outside the actions
             * (the last reductions, the optimizer) after the makespan */
            const ts_plan_time *slow = end->outside > c->outside ? end : c;
            out->step_s = slow->outside + makespan;
            out->compute_s = slow->compute_s;
            out->comm_s = slow->exposed_s;
            out->outside_s = slow->outside;
            /* its idle time; with shared cores it may be negative (idle
             * peers lend their cores) */
            out->bubble_s = out->step_s - slow->total;
        }
        free(t);
        TS_TRY(st);
    }
    out->model_flops = sh->arch->flops(&sh->model, sh->global_batch, sh->T);
    double peak = dtype == TS_BF16 ? cl->peak_bf16 : cl->peak_f32;
    int world = ts_mesh_world(mesh);
    if (out->step_s > 0) {
        out->tokens_per_s = (double)sh->global_batch * sh->T / out->step_s;
        out->mfu = out->model_flops / (out->step_s * world * peak);
    }
    /* A prediction is finite, or it is none: never a step of inf or NaN
     * seconds ranked as a layout (the [cluster] ranges keep every rate
     * where this holds; this is the last word). */
    const double parts[] = {out->step_s,      out->compute_s,    out->comm_s, out->bubble_s,
                            out->f_s,         out->b_s,          out->w_s,    out->outside_s,
                            out->model_flops, out->tokens_per_s, out->mfu};
    int finite = out->step_s > 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        finite &= isfinite(parts[i]);
    if (!finite)
        return ts_error(
            TS_ERR_INVALID,
            "plan: the predicted step on %s is not a finite positive time (step %g s: "
            "compute %g s, communication %g s, pipeline idle %g s); the cluster's rates "
            "cannot time this model",
            cl->source, out->step_s, out->compute_s, out->comm_s, out->bubble_s);
    return TS_OK;
}
