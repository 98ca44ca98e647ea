/*
 * search.c — `tessera plan CONFIG --search`: every layout of CONFIG's model
 * on a cluster, ranked by predicted step time (docs/search.md).
 *
 * A layout is a choice of tp (with sequence parallelism), cp, pp and its
 * schedule (1f1b, zb_h1, interleaved with v chunks, zb_v), dp (the rest),
 * the zero stage, the micro-batch and the recomputation. The search only
 * proposes: each layout is configured through the plugins' own keys and
 * judged by the same code a run uses — plugin start-up, the binder, and a
 * dry run of rank 0 with the clock on (plan_run.h) — so a layout the
 * plugins refuse is refused here with their message, and memory and
 * communication are the ledger's. The dry runs run on `jobs` threads of
 * this process, each dry run its own object (dry_run.h) on its thread,
 * when every strategy plugin keeps its state per thread
 * (TS_PLUGIN_THREAD_LOCAL_STATE); else, as before that flag, each in a
 * child process of its own on `jobs` worker processes.
 *
 * Two cuts keep it fast, neither dropping a layout that could win: a layout
 * whose model state alone (weights, gradients, optimizer, as sharded)
 * exceeds the device is not dry-run; and more recomputation is tried only
 * when less does not fit (it adds FLOPs and saves nothing else). GPipe is
 * not proposed: 1F1B has its bubble and traffic with less memory.
 *
 * The top layouts are then confirmed by a dry run of the last pipeline
 * stage too (it holds the LM head and the loss): the memory shown is the
 * larger, the step the slower stage's.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "arch.h"
#include "backend.h"
#include "comm_plan.h"
#include "model.h"
#include "plan_run.h"
#include "run_config.h" /* ts_recompute_word */

/* --- layouts ------------------------------------------------------------------ */

enum { REC_NONE, REC_SELECTIVE, REC_FULL, REC_KINDS };
/* REC_* follow ts_recompute; their words are the schema's (run_config.h). */
#define rec_names(mode) ts_recompute_word(mode)

typedef struct layout {
    int tp, cp, pp, dp, ep;
    const char *schedule; /* "" without pp                         */
    int v;                /* chunks per rank                            */
    int mb, m;            /* micro-batch, micro-batches per rank and step */
    int zero;             /* 0: dp alone                                */
    int recompute;        /* REC_*                                      */
} layout;

/* What one layout's dry run gave (plain data: it crosses a pipe). */
enum { RES_FITS, RES_TOO_BIG, RES_REFUSED, RES_DOMINATED, RES_STATE_TOO_BIG, RES_UNPREDICTABLE };
typedef struct result {
    int status;
    char why[240]; /* RES_REFUSED, RES_UNPREDICTABLE: the message */
    double peak;   /* bytes at the peak of the step (max of the ranks dry-run) */
    double state;  /* params + grads + optimizer                */
    double acts;   /* activations at their peak                 */
    plan_time t;
    int confirmed;        /* dry-run whole, and the last stage too      */
    int m_run;            /* micro-batches the dry run ran              */
    int blocks_run;       /* blocks per chunk it ran (0: all)           */
    int bound;            /* RES_TOO_BIG without a dry run: peak is a floor */
    ts_plan_time clock;   /* the clock the prediction read (whole, scaled) */
    plan_numbers numbers; /* the dry run's own numbers                  */
} result;

typedef struct search {
    const ts_config *base;
    const plan_search_opts *o;
    cluster cl;
    int world;
    ts_train_shape shape; /* of the base (for the model's sizes)       */
    ts_dtype dtype;       /* [train] dtype                              */
    const char *plugins[8];
    int nplugins;      /* installed strategies the search may use     */
    ts_plugins *found; /* every plugin found, kept loaded             */
    int uneven;        /* blocks are not alike per chunk: no cut runs   */
    layout *lay;
    result *res;
    int n, cap;
    int *fam; /* families' first layouts (add_family)       */
    int nfam, famcap;
    int threads;             /* 1: dry runs on threads of this process */
    const char *process_why; /* else: the plugin that keeps process state */
} search;

static int has_plugin(const search *S, const char *name) {
    for (int i = 0; i < S->nplugins; i++)
        if (!strcmp(S->plugins[i], name)) return 1;
    return 0;
}

static ts_status add_layout(search *S, const layout *L) {
    if (S->n == S->cap) {
        int cap = S->cap ? 2 * S->cap : 256;
        layout *l = realloc(S->lay, (size_t)cap * sizeof *l);
        if (!l) return ts_error(TS_ERR_NOMEM, "plan --search: out of memory");
        S->lay = l;
        S->cap = cap;
    }
    S->lay[S->n++] = *L;
    return TS_OK;
}

/* The fewest tokens of a sequence a cp rank is given: below that each of
 * the ring's steps is a latency-bound exchange around attention blocks too
 * small to hide it (Liu et al.'s ring attention hides a step behind a
 * block's compute only when the block is large). */
#define SEARCH_MIN_CP_TOKENS 128

/* A family: the layouts that differ only in micro-batch, zero stage and
 * recomputation, from S->lay[S->fam[f]] to S->lay[S->fam[f + 1]]. */
static ts_status add_family(search *S) {
    if (S->nfam + 2 > S->famcap) {
        int cap = S->famcap ? 2 * S->famcap : 256;
        int *f = realloc(S->fam, (size_t)cap * sizeof *f);
        if (!f) return ts_error(TS_ERR_NOMEM, "plan --search: out of memory");
        S->fam = f;
        S->famcap = cap;
    }
    S->fam[S->nfam++] = S->n;
    S->fam[S->nfam] = S->n;
    return TS_OK;
}

/* Every layout the model and the cluster's devices allow by divisibility
 * (the plugins check the rest), recompute none first in each group of
 * three (the order the dominance cut relies on). */
static ts_status enumerate(search *S) {
    const ts_model_config *mc = &S->shape.model;
    int W = S->world, L = mc->layers, GB = S->shape.global_batch;
    int tp_max = S->cl.gpus_per_node;
    int experts = mc->experts > 1 ? mc->experts : 1;
    for (int tp = 1; tp <= tp_max; tp++) {
        if (tp_max % tp || W % tp || mc->heads % tp) continue;
        if (tp > 1 && !has_plugin(S, "tp")) continue;
        for (int cp = 1; cp <= W / tp; cp *= 2) {
            if ((W / tp) % cp || S->shape.T % (2 * cp)) continue;
            if (cp > 1 && S->shape.T / cp < SEARCH_MIN_CP_TOKENS) continue;
            if (cp > 1 && !has_plugin(S, "cp")) continue;
            for (int pp = 1; pp <= L && pp <= W / (tp * cp); pp++) {
                if (L % pp || (W / (tp * cp)) % pp) continue;
                if (pp > 1 && !has_plugin(S, "pp")) continue;
                int dp = W / (tp * cp * pp);
                if (GB % dp) continue;
                /* Schedules: (name, v); none without pp. */
                const char *sn[16];
                int sv[16], ns = 0;
                if (pp == 1) {
                    sn[ns] = "", sv[ns++] = 1;
                } else {
                    sn[ns] = "1f1b", sv[ns++] = 1;
                    sn[ns] = "zb_h1", sv[ns++] = 1;
                    for (int v = 2; v <= 8 && ns < 15; v++)
                        if ((L / pp) % v == 0) sn[ns] = "interleaved", sv[ns++] = v;
                    if ((L / pp) % 2 == 0 && ns < 16) sn[ns] = "zb_v", sv[ns++] = 2;
                }
                for (int e = 1; e <= experts; e++) {
                    if (experts % e || (experts == 1 && e > 1)) continue;
                    if (e > 1 && (!has_plugin(S, "ep") || (W / pp) % e)) continue;
                    for (int s = 0; s < ns; s++) {
                        TS_TRY(add_family(S));
                        for (int mb = 1; mb <= 16 && mb <= GB / dp; mb *= 2) {
                            if ((GB / dp) % mb) continue;
                            int m = GB / dp / mb;
                            if (!strcmp(sn[s], "interleaved") && m % pp) continue;
                            for (int z = 3; z >= 0; z--) {
                                if (z > 0 && (dp == 1 || !has_plugin(S, "zero"))) continue;
                                for (int rc = 0; rc < REC_KINDS; rc++) {
                                    layout l = {tp, cp, pp, dp, e, sn[s], sv[s], mb, m, z, rc};
                                    TS_TRY(add_layout(S, &l));
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    if (S->fam) S->fam[S->nfam] = S->n;
    return TS_OK;
}

/* The layout as a line of --set assignments (what reproduces it). */
static void layout_sets(const search *S, const layout *L, char *buf, size_t size) {
    char plugins[128] = "dp";
    if (L->tp > 1) strcat(plugins, ",tp");
    if (L->cp > 1) strcat(plugins, ",cp");
    if (L->ep > 1) strcat(plugins, ",ep");
    if (L->zero) strcat(plugins, ",zero");
    if (L->pp > 1) strcat(plugins, ",pp");
    int n =
        snprintf(buf, size, "--set parallel.plugins=%s --set train.micro_batch=%d", plugins, L->mb);
    if (L->tp > 1 && n < (int)size)
        n +=
            snprintf(buf + n, size - n, " --set tp.size=%d --set tp.sequence_parallel=true", L->tp);
    if (L->cp > 1 && n < (int)size) n += snprintf(buf + n, size - n, " --set cp.size=%d", L->cp);
    if (L->ep > 1 && n < (int)size) n += snprintf(buf + n, size - n, " --set ep.size=%d", L->ep);
    if (L->zero && n < (int)size) n += snprintf(buf + n, size - n, " --set zero.stage=%d", L->zero);
    if (L->pp > 1 && n < (int)size)
        n += snprintf(buf + n, size - n,
                      " --set pp.size=%d --set pp.schedule=%s --set pp.virtual_stages=%d", L->pp,
                      L->schedule, L->v);
    if (n < (int)size)
        snprintf(buf + n, size - n, " --set train.recompute=%s", rec_names(L->recompute));
    (void)S;
}

static void layout_name(const layout *L, char *buf, size_t size) {
    char sched[32] = "";
    if (L->pp > 1 && !strcmp(L->schedule, "interleaved"))
        snprintf(sched, sizeof sched, " interleaved v%d", L->v);
    else if (L->pp > 1)
        snprintf(sched, sizeof sched, " %s", L->schedule);
    char ep[16] = "";
    if (L->ep > 1) snprintf(ep, sizeof ep, " ep %d", L->ep);
    snprintf(buf, size, "tp %d cp %d pp %d dp %d%s%s mb %d zero %d %s", L->tp, L->cp, L->pp, L->dp,
             ep, sched, L->mb, L->zero, rec_names(L->recompute));
}

/* --- one layout's dry run (in a child) -------------------------------------------- */

/* The sections of the strategies the search sets, apart from the core's. */
static int core_section(const char *s) {
    static const char *core[] = {"model", "data", "train", "parallel", "comm", "cluster"};
    for (size_t i = 0; i < sizeof core / sizeof core[0]; i++)
        if (!strcmp(s, core[i])) return 1;
    return 0;
}

/* CONFIG with the layout's plugins and keys: every key the base gives (its
 * plugins' sections only where the layout loads the plugin), then the
 * layout's assignments. */
static ts_status layout_config(const search *S, const layout *L, ts_config **out_cfg,
                               ts_plugins **out_reg) {
    ts_config *cfg = NULL;
    TS_TRY(cli_config_create(&cfg));
    ts_status st = TS_OK;
    char sets[1024];
    layout_sets(S, L, sets, sizeof sets);
    char plugins[128];
    {
        const char *p = strstr(sets, "parallel.plugins=") + strlen("parallel.plugins=");
        size_t k = strcspn(p, " ");
        snprintf(plugins, sizeof plugins, "%.*s", (int)k, p);
    }
    int ns = ts_config_num_specs(S->base);
    for (int i = 0; i < ns && !st; i++) {
        const ts_key_spec *sp = ts_config_spec(S->base, i);
        if (!ts_config_has(S->base, sp->section, sp->name)) continue;
        if (!core_section(sp->section)) {
            /* a plugin's section: kept where the layout loads it */
            char list[136];
            snprintf(list, sizeof list, ",%s,", plugins);
            char want[40];
            snprintf(want, sizeof want, ",%s,", sp->section);
            if (!strstr(list, want)) continue;
        }
        char a[1024];
        snprintf(a, sizeof a, "%s.%s=%s", sp->section, sp->name,
                 ts_config_str(S->base, sp->section, sp->name));
        st = ts_config_set(cfg, a);
    }
    /* The layout's own keys. */
    for (char *p = sets; !st && (p = strstr(p, "--set ")) != NULL;) {
        p += 6;
        size_t k = strcspn(p, " ");
        char a[256];
        snprintf(a, sizeof a, "%.*s", (int)k, p);
        st = ts_config_set(cfg, a);
        p += k;
    }
    return cli_config_finish(st, cfg, out_cfg, out_reg);
}

/* Stage 0's schedule at `m` micro-batches: its most micro-batches in
 * flight and deferred weight parts (-1, -1 when it cannot be made). */
static void stage0_peaks(ts_plugins *reg, int pp, int v, int m, int *in_flight, int *deferred) {
    ts_schedule s;
    memset(&s, 0, sizeof s);
    *in_flight = *deferred = -1;
    if (plan_stage_schedule(reg, pp, 0, m, v, &s) == TS_OK) {
        *in_flight = ts_schedule_peak_in_flight(&s);
        *deferred = ts_schedule_peak_deferred(&s);
    }
    ts_schedule_free(&s);
}

/* The fewest micro-batches whose dry run holds at its peak what m's does:
 * stage 0 reaches the same micro-batches in flight and deferred (a
 * pipeline's steady state; 2 without one, so that gradients accumulate).
 * The time of the rest is the actions' times scaled (plan_scale_clock). */
static int screen_micro_batches(ts_plugins *reg, const layout *L) {
    if (L->m <= 2) return L->m;
    if (L->pp == 1 || ts_plugins_num_schedulers(reg) != 1) return 2;
    int step = !strcmp(L->schedule, "interleaved") ? L->pp : 1;
    int want_f, want_d;
    stage0_peaks(reg, L->pp, L->v, L->m, &want_f, &want_d);
    for (int c = step >= 2 ? step : 2; c < L->m; c += step) {
        int f, d;
        stage0_peaks(reg, L->pp, L->v, c, &f, &d);
        if (f == want_f && d == want_d) return c;
    }
    return L->m;
}

/* How a layout's dry run is cut down: `screen` runs fewer micro-batches
 * where the peak allows (screen_micro_batches); `blocks` > 0 runs that many
 * blocks per model chunk, and with `prev` (the same layout's run of
 * `prev_blocks` per chunk) reads the whole model's numbers off the line
 * through the two. */
typedef struct run_cut {
    int screen;
    int blocks;
    const plan_numbers *prev;
    int prev_blocks;
    const ts_plan_time *first; /* a last stage's run: stage 0's clock */
} run_cut;

/* The dry run of layout L's rank 0 (or its last stage's first rank): its
 * memory and predicted step. */
static ts_status layout_run(const search *S, const layout *L, int last_stage, const run_cut *cut,
                            result *out) {
    ts_config *cfg = NULL;
    ts_plugins *reg = NULL;
    TS_TRY(layout_config(S, L, &cfg, &reg));
    ts_mesh *mesh = NULL;
    ts_train_shape shape;
    ts_comm *world = NULL;
    ts_parallel *par = NULL;
    plan_result r = {0};
    ts_status st = ts_plugins_mesh(reg, S->world, NULL, &mesh);
    if (!st) st = ts_train_shape_resolve(cfg, ts_mesh_batch_width(mesh), &shape);
    int rank = 0, stage = 0, m_run = shape.micro_batches;
    if (!st && last_stage) {
        stage = ts_mesh_axis_size(mesh, TS_AXIS_PP) - 1;
        rank = ts_mesh_rank_at(mesh, 0, TS_AXIS_PP, stage);
    }
    if (!st && cut->screen) m_run = screen_micro_batches(reg, L);
    char a[96];
    if (!st && m_run < shape.micro_batches) {
        snprintf(a, sizeof a, "train.global_batch=%lld", (long long)m_run * L->mb * L->dp);
        st = ts_config_set(cfg, a);
    }
    if (!st && cut->blocks > 0) {
        snprintf(a, sizeof a, "model.layers=%d", cut->blocks * L->pp * L->v);
        st = ts_config_set(cfg, a);
    }
    ts_dry_run *dr = NULL;
    if (!st) st = ts_dry_run_create(&dr);
    if (!st) st = plan_dry_run(dr, cfg, reg, S->world, rank, &S->cl, mesh, &world, &par, &r);
    int predicted = 0;
    if (!st) {
        plan_numbers_of(&r, &out->numbers);
        if (cut->prev) {
            double per_chunk = (double)S->shape.model.layers / (L->pp * L->v);
            plan_numbers whole;
            plan_numbers_along(cut->prev, cut->prev_blocks, &out->numbers, cut->blocks, per_chunk,
                               &whole);
            plan_numbers_into(&whole, &r);
        }
        plan_scale_clock(&r.clock, (double)shape.micro_batches / m_run);
        out->clock = r.clock;
        /* a prediction that is not finite is no layout's: the search stops
         * on it (cmd_plan_search) */
        ts_status pst = cut->first ? plan_predict(cut->first, &r.clock, r.dtype, reg, mesh, L->v,
                                                  &shape, &S->cl, &out->t)
                                   : plan_predict(&r.clock, NULL, r.dtype, reg, mesh, L->v, &shape,
                                                  &S->cl, &out->t);
        predicted = pst == TS_OK;
        if (pst) {
            out->status = RES_UNPREDICTABLE;
            snprintf(out->why, sizeof out->why, "%s", ts_last_error_bare());
        }
    }
    if (!st && predicted) {
        out->peak = (double)r.total_peak;
        out->state = (double)(r.params + r.grads + r.optim);
        out->acts = (double)r.acts;
        out->status = out->peak <= S->cl.memory ? RES_FITS : RES_TOO_BIG;
        out->m_run = m_run;
        out->blocks_run = cut->blocks;
    }
    ts_parallel_destroy(par);
    ts_comm_free(world);
    ts_dry_run_destroy(dr);
    ts_mesh_destroy(mesh);
    ts_plugins_destroy(reg);
    ts_config_destroy(cfg);
    return st;
}

/* Runs layout_run on this thread (S->threads) or in a child process, whose
 * result comes back through a pipe. */
static void layout_child(const search *S, const layout *L, int last_stage, const run_cut *cut,
                         result *out) {
    memset(out, 0, sizeof *out);
    if (S->threads) {
        if (layout_run(S, L, last_stage, cut, out)) {
            out->status = RES_REFUSED;
            snprintf(out->why, sizeof out->why, "%s", ts_last_error_bare());
        }
        return;
    }
    int fd[2];
    if (pipe(fd) != 0) {
        out->status = RES_REFUSED;
        snprintf(out->why, sizeof out->why, "pipe: %s", strerror(errno));
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        ts_comm_plan_untimed(); /* this process only dry-runs */
        result r;
        memset(&r, 0, sizeof r);
        ts_status st = layout_run(S, L, last_stage, cut, &r);
        if (st) {
            r.status = RES_REFUSED;
            snprintf(r.why, sizeof r.why, "%s", ts_last_error_bare());
        }
        ssize_t w = write(fd[1], &r, sizeof r);
        _exit(w == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    size_t got = 0;
    if (pid > 0)
        while (got < sizeof *out) {
            ssize_t k = read(fd[0], (char *)out + got, sizeof *out - got);
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) break;
            got += (size_t)k;
        }
    close(fd[0]);
    int status = 0;
    if (pid > 0) waitpid(pid, &status, 0);
    if (got != sizeof *out) {
        memset(out, 0, sizeof *out);
        out->status = RES_REFUSED;
        snprintf(out->why, sizeof out->why, "the dry run %s",
                 pid < 0               ? "could not start (fork failed)"
                 : WIFSIGNALED(status) ? "crashed"
                                       : "ended without a result");
    }
}

/* The blocks per chunk a layout's cut dry runs take (0: the whole model):
 * one and two periods of the block pattern (MoE every moe_every blocks),
 * when the chunk has at least three and every block of a period is alike. */
static int cut_period(const search *S, const layout *L) {
    const ts_model_config *mc = &S->shape.model;
    int per_chunk = mc->layers / (L->pp * L->v);
    int period = mc->experts > 1 && mc->moe_every > 1 ? mc->moe_every : 1;
    if (S->uneven || per_chunk % period || per_chunk < 3 * period) return 0;
    return period;
}

/* Layout L's prediction: screened (fewer micro-batches, and the whole
 * model read off two cut models where the blocks allow), or whole
 * (`screen` 0: every micro-batch and block, as a run). */
static void layout_eval(const search *S, const layout *L, int last_stage, int screen,
                        const ts_plan_time *first, result *out) {
    int period = screen ? cut_period(S, L) : 0;
    if (!period) {
        run_cut whole = {.screen = screen, .first = first};
        layout_child(S, L, last_stage, &whole, out);
        return;
    }
    run_cut one = {.screen = 1, .blocks = period, .first = first};
    result cut1;
    layout_child(S, L, last_stage, &one, &cut1);
    if (cut1.status == RES_REFUSED || cut1.status == RES_UNPREDICTABLE) {
        *out = cut1;
        return;
    }
    if (cut1.status == RES_TOO_BIG) {
        /* a model of one period a chunk already holds more than the device:
         * the whole one holds at least that */
        *out = cut1;
        out->bound = 1;
        return;
    }
    run_cut two = {.screen = 1,
                   .blocks = 2 * period,
                   .prev = &cut1.numbers,
                   .prev_blocks = period,
                   .first = first};
    layout_child(S, L, last_stage, &two, out);
}

static const char *status_name(int s) {
    switch (s) {
    case RES_FITS: return "fits";
    case RES_TOO_BIG: return "too_big";
    case RES_STATE_TOO_BIG: return "state_too_big";
    case RES_DOMINATED: return "dominated";
    case RES_UNPREDICTABLE: return "unpredictable";
    default: return "refused";
    }
}

/* Layout i confirmed: rank 0's whole dry run, then the last stage's with
 * stage 0's clock (plan_predict simulates the pipeline with both). */
static void confirm_one(const search *S, int i, result *out) {
    const layout *L = &S->lay[i];
    result first = S->res[i], last;
    if (first.m_run < L->m || first.blocks_run) layout_eval(S, L, 0, 0, NULL, &first);
    if (first.status == RES_REFUSED || first.status == RES_UNPREDICTABLE) {
        *out = first;
        return;
    }
    last = first;
    if (L->pp > 1) layout_eval(S, L, 1, 0, &first.clock, &last);
    if (last.status == RES_UNPREDICTABLE) {
        *out = last;
        return;
    }
    if (last.status == RES_REFUSED) last = first;
    *out = first;
    if (last.peak > out->peak)
        out->peak = last.peak, out->state = last.state, out->acts = last.acts;
    out->t = last.t; /* from both ends' clocks */
    out->status = out->peak <= S->cl.memory ? RES_FITS : RES_TOO_BIG;
    out->confirmed = 1;
}

/* Layout i, found too big when confirmed, had made others dominated: its
 * group's with more recomputation, and at zero 1 the same micro-batch's
 * zero 2 and 3 from its recomputation on. They are screened now, each
 * group up to the first that fits. */
static void reopen_dominated(search *S, int i) {
    const layout *L = &S->lay[i];
    int base = i - i % REC_KINDS, rec = i % REC_KINDS;
    int groups[3] = {base, -1, -1}, from[3] = {rec + 1, rec, rec};
    for (int z = 2, n = 1; L->zero == 1 && z <= 3; z++) {
        int g = base - (z - 1) * REC_KINDS; /* zero 3, 2, 1, 0 in a micro-batch */
        if (g >= 0 && S->lay[g].zero == z && S->lay[g].mb == L->mb && S->lay[g].tp == L->tp &&
            S->lay[g].pp == L->pp && S->lay[g].cp == L->cp && S->lay[g].v == L->v &&
            S->lay[g].schedule == L->schedule)
            groups[n++] = g;
    }
    for (int q = 0; q < 3; q++) {
        if (groups[q] < 0) continue;
        for (int k = from[q]; k < REC_KINDS; k++) {
            result *r = &S->res[groups[q] + k];
            if (r->status != RES_DOMINATED) continue;
            layout_eval(S, &S->lay[groups[q] + k], 0, 1, NULL, r);
            if (r->status == RES_FITS) break; /* the rest stay dominated */
        }
    }
}

/* confirm_one on a thread of this process. */
typedef struct confirm_arg {
    const search *S;
    int i;
    result r;
} confirm_arg;

static void *confirm_thread(void *p) {
    confirm_arg *a = p;
    ts_comm_plan_untimed(); /* this thread only dry-runs */
    confirm_one(a->S, a->i, &a->r);
    return NULL;
}

/* confirm_one of idx[0..n), `jobs` at a time, each on a thread of its own
 * (S->threads) or in a process of its own (whose dry runs fork their own). */
static void confirm_all(search *S, const int *idx, int n, int jobs) {
    if (jobs > 64) jobs = 64;
    for (int b = 0; S->threads && b < n; b += jobs) {
        int m = n - b < jobs ? n - b : jobs, started[64];
        pthread_t th[64];
        confirm_arg args[64];
        for (int k = 0; k < m; k++) {
            args[k] = (confirm_arg){.S = S, .i = idx[b + k]};
            started[k] = pthread_create(&th[k], NULL, confirm_thread, &args[k]) == 0;
        }
        for (int k = 0; k < m; k++) {
            if (started[k])
                pthread_join(th[k], NULL);
            else
                confirm_thread(&args[k]);
        }
        for (int k = 0; k < m; k++) /* after every thread: each read its own entry */
            S->res[idx[b + k]] = args[k].r;
    }
    for (int b = 0; !S->threads && b < n; b += jobs) {
        int m = n - b < jobs ? n - b : jobs, fds[64];
        pid_t pids[64];
        fflush(NULL);
        for (int k = 0; k < m; k++) {
            int fd[2] = {-1, -1};
            pids[k] = pipe(fd) == 0 ? fork() : -1;
            if (pids[k] == 0) {
                close(fd[0]);
                result r;
                confirm_one(S, idx[b + k], &r);
                ssize_t w = write(fd[1], &r, sizeof r);
                _exit(w == (ssize_t)sizeof r ? 0 : 1);
            }
            if (fd[1] >= 0) close(fd[1]);
            fds[k] = fd[0];
        }
        for (int k = 0; k < m; k++) {
            result r;
            size_t got = 0;
            while (fds[k] >= 0 && got < sizeof r) {
                ssize_t g = read(fds[k], (char *)&r + got, sizeof r - got);
                if (g < 0 && errno == EINTR) continue;
                if (g <= 0) break;
                got += (size_t)g;
            }
            if (fds[k] >= 0) close(fds[k]);
            if (pids[k] > 0) waitpid(pids[k], NULL, 0);
            result *out = &S->res[idx[b + k]];
            if (got == sizeof r) {
                *out = r;
            } else {
                out->status = RES_REFUSED;
                snprintf(out->why, sizeof out->why, "its confirmation %s",
                         pids[k] < 0 ? "could not start" : "ended without a result");
            }
        }
    }
}

/* --- the search ----------------------------------------------------------------- */

/* The model's parameters, from its declaration. */
static double model_numel(const ts_train_shape *sh) {
    int n = sh->arch->declare_params(&sh->model, NULL);
    ts_param_decl *d = n > 0 ? calloc((size_t)n, sizeof *d) : NULL;
    double total = 0;
    if (d) {
        sh->arch->declare_params(&sh->model, d);
        for (int i = 0; i < n; i++) {
            double e = 1;
            for (int k = 0; k < d[i].ndim; k++)
                e *= (double)d[i].shape[k];
            total += e;
        }
    }
    free(d);
    return total;
}

/* A lower bound of the model state one rank holds: P / (tp pp) parameters
 * (the average of the stages; the largest holds at least that) at the
 * bytes per parameter the zero stage leaves whole, the rest over dp. With
 * experts over ep, P / (tp pp ep cp): experts are cut ep ways and their
 * optimizer state over edp = tp cp dp / (ep etp), so a rank holds at least
 * that share of every kind of parameter. */
static double state_floor(const search *S, const layout *L, double numel) {
    double wb = S->dtype == TS_BF16 ? 2.0 : 4.0;
    double opt = S->dtype == TS_BF16 ? 12.0 : 8.0; /* master? + m + v */
    double g = 4.0, dp = L->dp;
    double per = L->zero == 0   ? wb + g + opt
                 : L->zero == 1 ? wb + g + opt / dp
                 : L->zero == 2 ? wb + (g + opt) / dp
                                : (wb + g + opt) / dp;
    double cut = (double)L->tp * L->pp * (L->ep > 1 ? (double)L->ep * L->cp : 1.0);
    return numel / cut * per;
}

/* Where a worker's results go: straight into the search's table (a
 * thread's: the layouts of its families are its own) or down a pipe (a
 * worker process's). */
typedef struct sink {
    result *res;
    int fd;
} sink;

static void send_result(const sink *to, int i, const result *r) {
    if (to->res) {
        to->res[i] = *r;
        return;
    }
    if (write(to->fd, &i, sizeof i) != sizeof i || write(to->fd, r, sizeof *r) != sizeof *r)
        _exit(1);
}

/* One layout's dry run (or its state's floor when that alone is too big). */
static void eval_one(const search *S, double numel, int i, result *r) {
    memset(r, 0, sizeof *r);
    const layout *L = &S->lay[i];
    double floor = state_floor(S, L, numel);
    if (floor > S->cl.memory) {
        r->status = RES_STATE_TOO_BIG;
        r->state = r->peak = floor;
        return;
    }
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    layout_eval(S, L, 0, 1, NULL, r);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (getenv("TESSERA_SEARCH_TRACE")) {
        char nm[128];
        layout_name(L, nm, sizeof nm);
        fprintf(stderr, "%8.1f ms  m %d/%d  %s  %s\n",
                1e3 * (double)(b.tv_sec - a.tv_sec) + 1e-6 * (double)(b.tv_nsec - a.tv_nsec),
                r->m_run, L->m, nm, status_name(r->status));
    }
}

/* One group (a micro-batch and zero stage; recomputation none, selective,
 * full at g, g + 1, g + 2): rec in [from, to) tried in order until one fits,
 * those below `from` too big with floor[k] as their peak's floor, those
 * from `to` on dominated. Returns the recomputation that fits (REC_KINDS:
 * none; -1: refused), the smallest peak seen and each one's (`peaks`, may
 * be NULL; INFINITY where none was seen). */
static int eval_group(const search *S, double numel, int g, int from, int to, const double *floor,
                      const sink *fd, double *smallest, double *peaks) {
    int fit = REC_KINDS;
    *smallest = INFINITY;
    for (int k = 0; peaks && k < REC_KINDS; k++)
        peaks[k] = INFINITY;
    for (int k = 0; k < REC_KINDS; k++) {
        result r;
        memset(&r, 0, sizeof r);
        if (k < from) {
            r.status = RES_TOO_BIG;
            r.bound = 1;
            r.peak = floor[k];
        } else if (k >= to || fit < REC_KINDS) {
            r.status = RES_DOMINATED;
        } else {
            eval_one(S, numel, g + k, &r);
            if (r.status == RES_REFUSED) {
                /* the others of the group are refused likewise */
                for (; k < REC_KINDS; k++)
                    send_result(fd, g + k, &r);
                return -1;
            }
            if (r.status == RES_FITS) fit = k;
            if (r.peak < *smallest) *smallest = r.peak;
            if (peaks) peaks[k] = r.peak;
            if (r.status == RES_STATE_TOO_BIG) {
                /* recomputation saves no state */
                for (; k < REC_KINDS; k++) {
                    if (peaks) peaks[k] = r.peak;
                    send_result(fd, g + k, &r);
                }
                return REC_KINDS;
            }
        }
        send_result(fd, g + k, &r);
    }
    return fit;
}

/* Worker `w` of `jobs`: its share of the families. A family holds, per
 * micro-batch (ascending), a group per zero stage (3, 2, 1, 0, or 0
 * alone), each of the three recomputations. Three cuts, none of which
 * drops a layout that could win (docs/search.md):
 *  - more recomputation than fits is dominated (more FLOPs, nothing else);
 *  - a zero stage above 1 at a recomputation where zero 1 fits is
 *    dominated: it holds less, but moves at least as much (gradients
 *    reduce-scattered per reduction, zero 3's parameters gathered again)
 *    for the same FLOPs; zero 1 is tried first;
 *  - when a group fits with none of the recomputations, every group of its
 *    zero stage or a lower one, at its micro-batch or a larger one, is too
 *    big without a dry run (activations grow with the micro-batch, each
 *    zero stage holds at least what the next holds), with the failed peak
 *    as a floor.
 * Results go to `fd`. */
static void search_worker(const search *S, double numel, int w, int jobs, const sink *fd) {
    for (int f = w; f < S->nfam; f += jobs) {
        int end = S->fam[f + 1];
        int failed_zero = -1;   /* the highest zero stage found too big */
        double failed_peak = 0; /* its smallest peak                    */
        for (int g0 = S->fam[f]; g0 < end;) {
            /* the groups of this micro-batch: g0 .. g1 */
            int mb = S->lay[g0].mb, g1 = g0, at[4] = {-1, -1, -1, -1};
            for (; g1 < end && S->lay[g1].mb == mb; g1 += REC_KINDS)
                at[S->lay[g1].zero] = g1;
            double smallest, floor1[REC_KINDS] = {0, 0, 0};
            int r1 = REC_KINDS; /* where zero 1 fits */
            for (int z = 0; z < 4; z++)
                if (at[z] >= 0 && z <= failed_zero) {
                    double fl[REC_KINDS] = {failed_peak, failed_peak, failed_peak};
                    eval_group(S, numel, at[z], REC_KINDS, REC_KINDS, fl, fd, &smallest, NULL);
                    at[z] = -1;
                }
            if (at[1] >= 0) {
                r1 = eval_group(S, numel, at[1], 0, REC_KINDS, NULL, fd, &smallest, floor1);
                if (r1 == REC_KINDS && failed_zero < 1) failed_zero = 1, failed_peak = smallest;
            }
            for (int z = 2; z <= 3; z++) {
                if (at[z] < 0) continue;
                int to = r1 < 0 ? REC_KINDS : r1;
                int fit = eval_group(S, numel, at[z], 0, to, NULL, fd, &smallest, NULL);
                if (fit == REC_KINDS && to == REC_KINDS && failed_zero < z)
                    failed_zero = z, failed_peak = smallest;
            }
            if (at[0] >= 0) {
                /* below where zero 1 fits, zero 0 (which holds more) does not */
                int from = at[1] >= 0 && r1 >= 0 ? r1 : 0;
                int fit = eval_group(S, numel, at[0], from, REC_KINDS, floor1, fd, &smallest, NULL);
                if (fit == REC_KINDS && from == 0 && failed_zero < 0)
                    failed_zero = 0, failed_peak = smallest;
            }
            g0 = g1;
        }
    }
}

/* A worker on a thread of this process: its results go into S->res. */
typedef struct worker_arg {
    search *S;
    double numel;
    int w, jobs;
} worker_arg;

static void *worker_thread(void *p) {
    const worker_arg *a = p;
    ts_comm_plan_untimed(); /* this thread only dry-runs */
    sink to = {a->S->res, -1};
    search_worker(a->S, a->numel, a->w, a->jobs, &to);
    return NULL;
}

/* `jobs` workers on threads; one that cannot start runs here, after. */
static void run_worker_threads(search *S, double numel, int jobs) {
    pthread_t th[64];
    worker_arg args[64];
    int started[64];
    for (int w = 0; w < jobs; w++) {
        args[w] = (worker_arg){S, numel, w, jobs};
        started[w] = pthread_create(&th[w], NULL, worker_thread, &args[w]) == 0;
    }
    for (int w = 0; w < jobs; w++)
        if (started[w])
            pthread_join(th[w], NULL);
        else
            worker_thread(&args[w]);
}

static ts_status run_workers(search *S, double numel, int jobs) {
    int fds[64];
    pid_t pids[64];
    if (jobs > 64) jobs = 64;
    if (S->threads) {
        run_worker_threads(S, numel, jobs);
        return TS_OK;
    }
    fflush(NULL);
    for (int w = 0; w < jobs; w++) {
        int fd[2];
        if (pipe(fd) != 0) return ts_error(TS_ERR_IO, "plan --search: pipe: %s", strerror(errno));
        pids[w] = fork();
        if (pids[w] < 0) return ts_error(TS_ERR_IO, "plan --search: fork: %s", strerror(errno));
        if (pids[w] == 0) {
            close(fd[0]);
            sink to = {NULL, fd[1]};
            search_worker(S, numel, w, jobs, &to);
            _exit(0);
        }
        close(fd[1]);
        fds[w] = fd[0];
    }
    /* Read whichever worker has written (a worker blocks on a full pipe):
     * fixed-size messages, an index and its result. */
    enum { MSG = sizeof(int) + sizeof(result) };
    static char msg[64][MSG];
    size_t got[64] = {0};
    struct pollfd pfd[64];
    int open = jobs;
    for (int w = 0; w < jobs; w++)
        pfd[w] = (struct pollfd){.fd = fds[w], .events = POLLIN};
    while (open > 0) {
        if (poll(pfd, (nfds_t)jobs, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        for (int w = 0; w < jobs; w++) {
            if (pfd[w].fd < 0 || !(pfd[w].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t k = read(fds[w], msg[w] + got[w], MSG - got[w]);
            if (k <= 0) {
                close(fds[w]);
                pfd[w].fd = -1;
                open--;
                continue;
            }
            got[w] += (size_t)k;
            if (got[w] < MSG) continue;
            int i;
            memcpy(&i, msg[w], sizeof i);
            if (i >= 0 && i < S->n) memcpy(&S->res[i], msg[w] + sizeof i, sizeof(result));
            got[w] = 0;
        }
    }
    for (int w = 0; w < jobs; w++) {
        int status;
        waitpid(pids[w], &status, 0);
    }
    return TS_OK;
}

static int by_step(const void *a, const void *b, void *ctx) {
    const search *S = ctx;
    const result *x = &S->res[*(const int *)a], *y = &S->res[*(const int *)b];
    int fx = x->status == RES_FITS, fy = y->status == RES_FITS;
    if (fx != fy) return fy - fx;
    if (!fx) return 0;
    return x->t.step_s < y->t.step_s ? -1 : x->t.step_s > y->t.step_s;
}

/* qsort without a context: the search being sorted. */
static search *sort_search;
static int by_step_q(const void *a, const void *b) {
    return by_step(a, b, sort_search);
}

static void gb(double b, char *buf, size_t size) {
    snprintf(buf, size, "%.1f GB", b / 1e9);
}

static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            printf("\\u%04x", *s);
        else
            putchar(*s);
    }
    putchar('"');
}

static void print_json(const search *S, const int *order, double secs) {
    printf("{\"cluster\":");
    json_str(S->cl.source);
    printf(",\"world\":%d,\"memory_bytes\":%.0f,\"seconds\":%.3f,\"layouts\":[", S->world,
           S->cl.memory, secs);
    for (int k = 0; k < S->n; k++) {
        const layout *L = &S->lay[order[k]];
        const result *r = &S->res[order[k]];
        char sets[1024];
        layout_sets(S, L, sets, sizeof sets);
        printf("%s{\"tp\":%d,\"cp\":%d,\"pp\":%d,\"dp\":%d,\"ep\":%d,\"schedule\":\"%s\","
               "\"virtual_stages\":%d,\"micro_batch\":%d,\"micro_batches\":%d,\"zero\":%d,"
               "\"recompute\":\"%s\",\"status\":\"%s\"",
               k ? "," : "", L->tp, L->cp, L->pp, L->dp, L->ep, L->schedule, L->v, L->mb, L->m,
               L->zero, rec_names(L->recompute), status_name(r->status));
        if (r->status == RES_REFUSED) {
            printf(",\"why\":");
            json_str(r->why);
        }
        if (r->bound)
            printf(",\"memory_bytes_at_least\":%.0f", r->peak);
        else if (r->status == RES_FITS || r->status == RES_TOO_BIG)
            printf(",\"memory_bytes\":%.0f,\"state_bytes\":%.0f,\"activation_bytes\":%.0f,"
                   "\"step_s\":%.6g,\"compute_s\":%.6g,\"comm_s\":%.6g,\"bubble_s\":%.6g,"
                   "\"outside_s\":%.6g,\"forward_s\":%.6g,\"backward_s\":%.6g,\"weight_s\":%.6g,"
                   "\"tokens_per_s\":%.6g,\"mfu\":%.6g,\"confirmed\":%s",
                   r->peak, r->state, r->acts, r->t.step_s, r->t.compute_s, r->t.comm_s,
                   r->t.bubble_s, r->t.outside_s, r->t.f_s, r->t.b_s, r->t.w_s, r->t.tokens_per_s,
                   r->t.mfu, r->confirmed ? "true" : "false");
        if (r->status == RES_STATE_TOO_BIG) printf(",\"state_bytes_at_least\":%.0f", r->state);
        printf(",\"sets\":");
        json_str(sets);
        printf("}");
    }
    printf("]}\n");
}

int cmd_plan_search(const ts_config *base, const plan_search_opts *o) {
    search S = {.base = base, .o = o};
    ts_status st = TS_OK;
    if (!o->cluster && !cluster_given(base))
        st = ts_error(TS_ERR_CONFIG,
                      "plan --search needs a cluster: --cluster FILE, or a [cluster] section in %s "
                      "(docs/search.md)",
                      ts_config_path(base));
    else
        st = o->cluster ? cluster_load(o->cluster, &S.cl) : cluster_from_config(base, &S.cl);
    if (st) goto fail;
    S.world = o->world > 0 ? o->world : S.cl.devices;
    if (S.world != S.cl.devices) {
        st = ts_error(TS_ERR_CONFIG,
                      "plan --search: --world %d, but %s describes %d nodes x %d = %d "
                      "devices",
                      S.world, S.cl.source, S.cl.nodes, S.cl.gpus_per_node, S.cl.devices);
        goto fail;
    }
    st = ts_train_shape_resolve(base, 1, &S.shape);
    if (st) goto fail;
    S.dtype = strcmp(ts_config_str(base, "train", "dtype"), "bf16") == 0 ? TS_BF16 : TS_F32;
    /* Blocks per chunk differ when pp places them by hand or only some are
     * recomputed: the cut runs' line would not hold. */
    S.uneven = (ts_config_has(base, "pp", "layers_per_stage") &&
                *ts_config_str(base, "pp", "layers_per_stage")) ||
               ts_config_int(base, "train", "recompute_layers") > 1 ||
               strcmp(ts_config_str(base, "train", "recompute_method"), "block") == 0;
    {
        /* the strategies this build has (tessera-NAME.so on the plugin path) */
        static const char *all[] = {"dp", "tp", "cp", "pp", "zero", "ep"};
        if (ts_plugins_create(&S.found) == TS_OK &&
            ts_plugins_discover(S.found, ts_config_str(base, "parallel", "plugin_path"), NULL) ==
                TS_OK)
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                for (int k = 0; k < ts_plugins_count(S.found); k++)
                    if (!strcmp(ts_plugins_name(S.found, k), all[i]))
                        S.plugins[S.nplugins++] = all[i];
    }
    if (!has_plugin(&S, "dp")) {
        st = ts_error(TS_ERR_PLUGIN, "plan --search: the dp plugin is not installed");
        goto fail;
    }
    /* Threads when every strategy keeps its state per thread; a dry run
     * of this (main) thread then runs here too (reopen_dominated). */
    S.threads = !o->processes && ts_plugins_thread_safe(S.found, &S.process_why);
    if (o->processes) S.process_why = "--processes";
    if (S.threads) ts_comm_plan_untimed();
    st = enumerate(&S);
    if (st) goto fail;
    if (S.n == 0) {
        st = ts_error(TS_ERR_CONFIG,
                      "plan --search: no layout of %d layers and %d heads divides "
                      "%d devices with global_batch %d",
                      S.shape.model.layers, S.shape.model.heads, S.world, S.shape.global_batch);
        goto fail;
    }
    S.res = calloc((size_t)S.n, sizeof *S.res);
    int *order = malloc((size_t)S.n * sizeof *order);
    if (!S.res || !order) {
        free(order);
        st = ts_error(TS_ERR_NOMEM, "plan --search: out of memory");
        goto fail;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double numel = model_numel(&S.shape);
    int jobs = o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (jobs < 1) jobs = 1;
    st = run_workers(&S, numel, jobs);
    if (st) {
        free(order);
        goto fail;
    }
    /* confirm the best: the last stage's dry run too */
    for (int k = 0; k < S.n; k++)
        order[k] = k;
    sort_search = &S;
    qsort(order, (size_t)S.n, sizeof *order, by_step_q);
    int top = o->top > 0 ? o->top : 10;
    /* Confirm the best: rank 0 with every micro-batch, and the last stage;
     * again for those the new order brings into the top. */
    int *pending = malloc((size_t)(top < S.n ? top : S.n) * sizeof *pending);
    for (int rounds = 0; pending && rounds < 8; rounds++) {
        int n = 0;
        for (int k = 0; k < S.n && k < top; k++)
            if (S.res[order[k]].status == RES_FITS && !S.res[order[k]].confirmed)
                pending[n++] = order[k];
        if (n == 0) break;
        confirm_all(&S, pending, n, jobs);
        for (int k = 0; k < n; k++) {
            const result *r = &S.res[pending[k]];
            if (getenv("TESSERA_SEARCH_TRACE")) {
                char nm[128];
                layout_name(&S.lay[pending[k]], nm, sizeof nm);
                fprintf(stderr, "confirmed %s: peak %.6g, step %.6g, %s\n", nm, r->peak,
                        r->t.step_s, status_name(r->status));
            }
            /* Too big after all (the last stage holds more): the layouts of
             * its group with more recomputation were marked dominated on its
             * account; they are screened now, up to the first that fits. */
            if (r->status == RES_TOO_BIG) reopen_dominated(&S, pending[k]);
        }
        qsort(order, (size_t)S.n, sizeof *order, by_step_q);
    }
    free(pending);
    for (int i = 0; i < S.n; i++)
        if (S.res[i].status == RES_UNPREDICTABLE) {
            char nm[128];
            layout_name(&S.lay[i], nm, sizeof nm);
            st = ts_error(TS_ERR_INVALID, "plan --search: layout %s: %s", nm, S.res[i].why);
            free(order);
            goto fail;
        }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    int nfit = 0, nbig = 0, nref = 0, ndom = 0;
    double smallest = INFINITY;
    const char *why = NULL;
    for (int i = 0; i < S.n; i++) {
        const result *r = &S.res[i];
        nfit += r->status == RES_FITS;
        nbig += r->status == RES_TOO_BIG || r->status == RES_STATE_TOO_BIG;
        ndom += r->status == RES_DOMINATED;
        if (r->status == RES_REFUSED) {
            nref++;
            if (!why) why = r->why;
        }
        if ((r->status == RES_TOO_BIG || r->status == RES_STATE_TOO_BIG) && r->peak < smallest)
            smallest = r->peak;
    }
    if (o->json) {
        print_json(&S, order, secs);
    } else {
        char mem[32];
        gb(S.cl.memory, mem, sizeof mem);
        printf("search: %d layers, d_model %d, %d heads, %d x %d tokens a step, %s, on %d nodes x "
               "%d devices (%s usable each; %s)\n",
               S.shape.model.layers, S.shape.model.d_model, S.shape.model.heads,
               S.shape.global_batch, S.shape.T, ts_dtype_name(S.dtype), S.cl.nodes,
               S.cl.gpus_per_node, mem, S.cl.source);
        printf("  %d layouts: %d fit, %d do not fit, %d refused by the plugins, %d dominated (more "
               "recomputation than a fitting one, or zero 2/3 where zero 1 fits) (%.1f s, %d "
               "workers)\n",
               S.n, nfit, nbig, nref, ndom, secs, jobs);
        if (!S.threads)
            printf("  dry runs in processes, not threads: %s%s\n", S.process_why,
                   strcmp(S.process_why, "--processes")
                       ? " does not declare TS_PLUGIN_THREAD_LOCAL_STATE"
                       : "");
        if (nref && why) printf("  e.g. refused: %s\n", why);
        if (nfit == 0) {
            char need[32];
            gb(smallest, need, sizeof need);
            if (nbig == 0)
                fprintf(stderr,
                        "tessera: plan --search: no layout could be dry-run: the plugins refused "
                        "all %d (e.g. %s)\n",
                        S.n, why ? why : "no message");
            else
                fprintf(stderr,
                        "tessera: plan --search: no layout fits in %s (%s: memory_gb %g, "
                        "memory_reserve_gb %g); the smallest needs %s\n",
                        mem, S.cl.source, S.cl.memory_given / 1e9,
                        (S.cl.memory_given - S.cl.memory) / 1e9, need);
            free(order);
            free(S.res);
            free(S.lay);
            free(S.fam);
            ts_plugins_destroy(S.found);
            return 1;
        }
        printf("  rank  %-52s %9s %9s %8s %8s %8s %8s %10s %5s\n", "layout", "memory", "step",
               "compute", "comm", "bubble", "other", "tokens/s", "MFU");
        for (int k = 0; k < S.n && k < top; k++) {
            const layout *L = &S.lay[order[k]];
            const result *r = &S.res[order[k]];
            if (r->status != RES_FITS) break;
            char name[96], m[32];
            layout_name(L, name, sizeof name);
            gb(r->peak, m, sizeof m);
            double other = r->t.step_s - r->t.compute_s - r->t.comm_s - r->t.bubble_s;
            if (fabs(other) < 1e-9 * r->t.step_s) other = 0; /* the parts' rounding */
            printf("  %4d  %-52s %9s %8.4gs %7.4gs %7.4gs %7.4gs %7.4gs %10.4g %4.1f%%\n", k + 1,
                   name, m, r->t.step_s, r->t.compute_s, r->t.comm_s, r->t.bubble_s, other,
                   r->t.tokens_per_s, 100.0 * r->t.mfu);
        }
        char sets[1024];
        layout_sets(&S, &S.lay[order[0]], sets, sizeof sets);
        printf("  the best as a run: %s\n", sets);
    }
    free(order);
    free(S.res);
    free(S.lay);
    free(S.fam);
    ts_plugins_destroy(S.found);
    return nfit ? 0 : 1;
fail:
    free(S.res);
    free(S.lay);
    free(S.fam);
    ts_plugins_destroy(S.found);
    fprintf(stderr, "tessera: %s\n", ts_last_error());
    return st == TS_ERR_CONFIG || st == TS_ERR_INVALID || st == TS_ERR_PLUGIN ? 2 : 1;
}
