/*
 * report.c — the run loop (ts_trainer_run): a step at a time until [train]
 * steps or the data's epochs are done, with a progress line every log_every
 * steps, a JSONL metrics line per step (memory by category, communication
 * per group and op, the plugins' metrics, the pipeline's bubble), skipped
 * steps reported and counted, and checkpoints when due; at the end the
 * run's summary ([train] summary: every rank's memory and times, for
 * `tessera verify`).
 *
 * Fault injection (trainer_fault), for recovery tests and `tessera verify`:
 * TESSERA_FAULT=RANK:STEP:KIND[,RANK:STEP:KIND...] in the environment, KIND
 * one of
 *   kill                      world rank RANK kills itself with SIGKILL
 *                             right after step STEP (as kill -9 would);
 *   slow_checkpoint:SECONDS   its write of the checkpoint of step STEP, and
 *                             its read of it when a run loads it, take
 *                             SECONDS longer (ckpt_save.c: a slow disk);
 * and TESSERA_FAULT_KILL=STEP:RANK, the older spelling of RANK:STEP:kill.
 */
#include "trainer_impl.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "tessera/device.h"

/* A JSON number, or null when it is not finite (JSON has no NaN). */
static void json_num(FILE *f, const char *fmt, double v) {
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

static ts_status trainer_write_metrics(ts_trainer *t, const ts_step_stats *s) {
    const float *bubble = t->stage_bubble;
    const int32_t *peak_kib = t->stage_peak_kib;
    FILE *f = t->metrics.f;
    ts_mem_counter total = trainer_mem(t, TS_MEM_NCAT);
    fprintf(f, "{\"step\":%lld,\"loss\":", (long long)s->step);
    json_num(f, "%.17g", s->loss);
    if (!isnan(s->val_loss)) {
        fprintf(f, ",\"val_loss\":");
        json_num(f, "%.17g", s->val_loss);
    }
    fprintf(f, ",\"lr\":%.9g,\"grad_norm\":", (double)s->lr);
    json_num(f, "%.9g", s->grad_norm);
    fprintf(f,
            ",\"skipped\":%s,\"skipped_steps\":%lld,\"tokens_per_s\":%.6g,\"step_ms\":%.6g,"
            "\"peak_mem_bytes\":%zu,\"mem\":{",
            s->skipped ? "true" : "false", (long long)s->skipped_steps, s->tokens_per_s, s->step_ms,
            total.peak);
    for (int c = 0; c <= TS_MEM_NCAT; c++) {
        ts_mem_counter k = trainer_mem(t, (ts_mem_category)c);
        fprintf(f, "%s\"%s\":{\"allocated\":%zu,\"reserved\":%zu,\"peak\":%zu}", c ? "," : "",
                ts_mem_category_name((ts_mem_category)c), k.allocated, k.reserved, k.peak);
    }
    fprintf(f, "},\"comm\":");
    char buf[16384];
    if (t->par) {
        TS_TRY(ts_parallel_counters_json(t->par, t->snap, buf, sizeof buf));
        fputs(buf, f);
    } else {
        fputs("{}", f);
    }
    TS_TRY(ts_plugins_metrics_json(t->reg, buf, sizeof buf));
    fprintf(f, ",\"plugins\":%s,\"pipeline\":{\"stages\":%d,\"bubble\":[", buf, t->stages);
    for (int k = 0; k < t->stages; k++) {
        if (k) fputc(',', f);
        json_num(f, "%.4f", (double)bubble[k]);
    }
    fprintf(f, "],\"activation_peak_bytes\":[");
    for (int k = 0; k < t->stages; k++)
        fprintf(f, "%s%lld", k ? "," : "", 1024LL * peak_kib[k]);
    fprintf(f, "]}");
    if (s->experts > 0) {
        fprintf(f, ",\"moe\":{\"aux_loss\":");
        json_num(f, "%.9g", s->aux_loss);
        fprintf(f, ",\"z_loss\":");
        json_num(f, "%.9g", s->z_loss);
        fprintf(f,
                ",\"dropped\":%lld,\"dispatch_bytes\":%lld,\"expert_ms\":%.6g,"
                "\"expert_ms_max\":%.6g,\"expert_rows_max\":%.0f,\"expert_tokens\":[",
                (long long)s->dropped, (long long)s->dispatch_bytes, s->expert_ms, s->expert_ms_max,
                s->expert_rows_max);
        for (int e = 0; e < s->experts; e++)
            fprintf(f, "%s%lld", e ? "," : "", (long long)s->expert_tokens[e]);
        fprintf(f, "]}");
    }
    fprintf(f, "}\n");
    return ts_file_stream_flush(&t->metrics);
}

/* A skipped step's line (every skipped step is printed, whatever
 * log_every), and the error once max_skipped_steps came in a row. */
static ts_status trainer_skipped(ts_trainer *t, const ts_step_stats *s) {
    if (t->rank0) {
        printf("step %5lld/%lld | skipped: loss %g, grad norm %g are not finite; the update is "
               "not applied (%lld in a row, [train] max_skipped_steps = %lld)\n",
               (long long)s->step, (long long)t->steps, s->loss, s->grad_norm,
               (long long)t->skipped_in_row, (long long)t->max_skipped);
        fflush(stdout);
    }
    if (t->skipped_in_row < t->max_skipped) return TS_OK;
    char where[512];
    ts_config_where(t->cfg, "train", "max_skipped_steps", where, sizeof where);
    return ts_error(TS_ERR_INVALID,
                    "step %lld: %lld steps in a row had a non-finite loss or gradient norm (%s = "
                    "%lld); stopping. The weights are those before the first of them; lower "
                    "[train] lr or set grad_clip",
                    (long long)s->step, (long long)t->skipped_in_row, where,
                    (long long)t->max_skipped);
}

static void trainer_print_header(ts_trainer *t) {
    const ts_model_config *c = &t->mcfg;
    char device[32];
    if (t->be->kind == TS_DEVICE_CPU)
        snprintf(device, sizeof device, "cpu");
    else
        snprintf(device, sizeof device, "%s:%d", t->be->name, ts_device_current());
    printf("model: gpt2 layers=%d d_model=%d heads=%d vocab=%d (padded %d) context=%d, "
           "%zu parameters, %s, device %s\n",
           c->layers, c->d_model, c->heads, c->vocab, c->padded_vocab, c->context, t->model->numel,
           ts_dtype_name(t->model->dtype), device);
    printf("data: %s\n", ts_dataset_describe(t->data));
    if (t->val_data)
        printf("held-out data: %s; loss every %lld steps over %lld global batches\n",
               ts_dataset_describe(t->val_data), (long long)t->eval_every,
               (long long)t->eval_batches);
    double h = ts_dataset_entropy_rate(t->data);
    printf("loss at uniform prediction ln(vocab) = %.4f", log((double)c->vocab));
    if (!isnan(h)) printf("; entropy rate of the source = %.4f nats/token", h);
    printf("\ntrain: %lld steps, seq_len %d, micro_batch %d, global_batch %d "
           "(%d micro-batches), %d threads\n",
           (long long)t->steps, t->T, t->B, t->global_batch, t->micro_batches,
           ts_cpu_get_threads());
    if (t->par)
        printf("parallel: %d ranks, mesh order %s, batch in %d parts (%d micro-batches of %d per "
               "rank)\n",
               t->par->size, ts_mesh_order(t->par->mesh), t->parts, t->micro_batches, t->B);
    fflush(stdout);
}

/* Writes [train] summary (rank 0; collective): per rank its memory
 * counters by category and its mean step and compute (forward + backward)
 * time over the steps after the first. */
static ts_status trainer_write_summary(ts_trainer *t, double step_ms, double compute_ms,
                                       int64_t steps) {
    const char *path = t->rc.train_summary;
    if (!path[0]) return TS_OK;
    enum { NC = TS_MEM_NCAT + 1, W = 3 * NC + 2 };
    double mine[W], *all = mine;
    int world = t->par ? t->par->size : 1;
    for (int c = 0; c < NC; c++) {
        ts_mem_counter k = trainer_mem(t, (ts_mem_category)c);
        mine[3 * c] = (double)k.allocated;
        mine[3 * c + 1] = (double)k.reserved;
        mine[3 * c + 2] = (double)k.peak;
    }
    mine[3 * NC] = steps > 0 ? step_ms / (double)steps : 0.0;
    mine[3 * NC + 1] = steps > 0 ? compute_ms / (double)steps : 0.0;
    if (world > 1) {
        if (!(all = malloc(sizeof mine * (size_t)world)))
            return ts_error(TS_ERR_NOMEM, "summary: out of memory");
        ts_status st = ts_comm_all_gather(t->par->world, mine, all, 2 * W, TS_I32);
        if (st) {
            free(all);
            return st;
        }
    }
    ts_status st = TS_OK;
    if (t->rank0) {
        ts_file_stream out;
        st = ts_file_stream_open(&out, path, "summary", "w");
        if (!st) {
            fprintf(out.f, "{\"world\":%d,\"steps\":%lld,\"ranks\":[", world, (long long)steps);
            for (int r = 0; r < world; r++) {
                const double *v = all + (size_t)r * W;
                fprintf(out.f, "%s{\"rank\":%d,\"step_ms\":%.6g,\"compute_ms\":%.6g,\"mem\":{",
                        r ? "," : "", r, v[3 * NC], v[3 * NC + 1]);
                for (int c = 0; c < NC; c++)
                    fprintf(out.f, "%s\"%s\":{\"allocated\":%.0f,\"reserved\":%.0f,\"peak\":%.0f}",
                            c ? "," : "", ts_mem_category_name((ts_mem_category)c), v[3 * c],
                            v[3 * c + 1], v[3 * c + 2]);
                fprintf(out.f, "}}");
            }
            fprintf(out.f, "]}\n");
            st = ts_file_stream_close(&out);
        }
    }
    if (all != mine) free(all);
    return st;
}

/* [train] sample_every: a short sample of text after the step (rank 0,
 * whose model is whole: checked at start-up) from a newline (or token 0),
 * drawn at temperature 1 as llm.c does (greedy text degenerates into
 * repeats early in training) with the seed of (run seed + step), so a rerun
 * prints the same; through [data] tokenizer when one is named. */
static ts_status trainer_print_sample(ts_trainer *t, int64_t step) {
    int n = (int)t->sample_tokens;
    int32_t *out = malloc((size_t)(n + 1) * sizeof *out);
    if (!out) return ts_error(TS_ERR_NOMEM, "sample: out of memory");
    int32_t prompt = t->mcfg.vocab >= 256 ? '\n' : 0;
    ts_sample_opts o = {n, 1.0, 0, t->state.seed + (uint64_t)step};
    ts_tokenizer *tk = NULL;
    const char *path = t->rc.data_tokenizer;
    ts_status st = path[0] ? ts_tokenizer_open(path, &tk) : TS_OK;
    if (!st) st = ts_trainer_sample(t, &prompt, 1, &o, out);
    if (!st) {
        printf("sample at step %lld: ", (long long)step);
        ts_tokens_print(stdout, out + 1, n, t->mcfg.vocab, tk);
        printf("\n");
        fflush(stdout);
    }
    ts_tokenizer_close(tk);
    free(out);
    return st;
}

ts_status trainer_fault(const ts_trainer *t, int64_t step, const char *kind, int *hit,
                        double *arg) {
    *hit = 0;
    const char *spec = getenv("TESSERA_FAULT");
    if (!spec || !spec[0]) return TS_OK;
    int me = t->par ? t->par->rank : 0;
    for (const char *e = spec; *e;) {
        size_t len = strcspn(e, ",");
        char entry[128], name[64] = "", tail[2];
        long long rank = -1, at = -1;
        double secs = 0.0;
        int n = 0, ok = len < sizeof entry;
        if (ok) {
            memcpy(entry, e, len);
            entry[len] = '\0';
            n = sscanf(entry, "%lld:%lld:%63[a-z_]%1s", &rank, &at, name, tail);
        }
        ok = ok && n >= 3 && rank >= 0 && rank <= INT32_MAX && at >= 1;
        if (ok && strcmp(name, "kill") == 0)
            ok = n == 3;
        else if (ok && strcmp(name, "slow_checkpoint") == 0)
            ok = n == 4 && sscanf(entry, "%*d:%*d:%*[a-z_]:%lf%1s", &secs, tail) == 1 &&
                 secs >= 0 && secs <= 86400;
        else
            ok = 0;
        if (!ok)
            return ts_error(TS_ERR_CONFIG,
                            "TESSERA_FAULT=%s: entry '%.*s': expected RANK:STEP:kill or "
                            "RANK:STEP:slow_checkpoint:SECONDS (STEP >= 1, SECONDS 0..86400)",
                            spec, (int)len, e);
        if (rank == me && at == step && strcmp(name, kind) == 0) {
            *hit = 1;
            if (arg) *arg = secs;
        }
        e += len;
        if (*e == ',') e++;
    }
    return TS_OK;
}

/* RANK:STEP:kill (or TESSERA_FAULT_KILL=STEP:RANK): this rank dies after
 * that step. */
static ts_status trainer_fault_kill(const ts_trainer *t, int64_t step) {
    const char *spec = getenv("TESSERA_FAULT_KILL");
    long long at;
    int rank, hit = 0;
    TS_TRY(trainer_fault(t, step, "kill", &hit, NULL));
    if (spec && sscanf(spec, "%lld:%d", &at, &rank) == 2 && step == at &&
        rank == (t->par ? t->par->rank : 0))
        hit = 1;
    if (hit) {
        fflush(stdout);
        raise(SIGKILL);
    }
    return TS_OK;
}

/* Seconds as m:ss, or h:mm:ss from an hour on. */
static void clock_text(double sec, char *buf, size_t size) {
    long long s = sec > 0 && sec < 1e9 ? (long long)(sec + 0.5) : 0;
    if (s >= 3600)
        snprintf(buf, size, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(buf, size, "%lld:%02lld", s / 60, s % 60);
}

ts_status ts_trainer_run(ts_trainer *t) {
    double sum_step_ms = 0.0, sum_compute_ms = 0.0;
    int64_t timed = 0, first_step = t->state.step; /* a resumed run starts later */
    double t_start = now_seconds();
    const ts_model_config *c = &t->mcfg;
    if (t->rank0) trainer_print_header(t);
    while (t->state.step < t->steps) {
        int have = 1;
        TS_TRY(trainer_have_data(t, &have));
        if (!have) {
            if (t->rank0)
                printf("data: [data] epochs = %lld exhausted before step %lld; stopping on all "
                       "ranks\n",
                       (long long)t->epochs, (long long)t->state.step + 1);
            break;
        }
        if (t->par) ts_parallel_snapshot_take(t->par, t->snap);
        ts_step_stats s;
        TS_TRY(ts_trainer_step(t, &s));
        s.val_loss = NAN;
        if (t->eval_every > 0 && (s.step % t->eval_every == 0 || s.step == t->steps))
            TS_TRY(trainer_eval(t, &s.val_loss));
        ts_mem_counter total = trainer_mem(t, TS_MEM_NCAT);
        if (t->rank0 && !s.skipped && (s.step % t->log_every == 0 || s.step == t->steps)) {
            char el[32], left[32];
            double spent = now_seconds() - t_start;
            int64_t done = s.step - first_step, remaining = t->steps - s.step;
            clock_text(spent, el, sizeof el);
            clock_text(done > 0 ? spent / (double)done * (double)remaining : 0.0, left,
                       sizeof left);
            char val[48] = "";
            if (!isnan(s.val_loss)) snprintf(val, sizeof val, " | val %.6f", s.val_loss);
            printf("step %5lld/%lld | loss %.6f%s | lr %.3e | norm %.4f | %8.0f tok/s | "
                   "%8.1f ms | peak %.1f MiB | %s elapsed, %s left\n",
                   (long long)s.step, (long long)t->steps, s.loss, val, (double)s.lr, s.grad_norm,
                   s.tokens_per_s, s.step_ms, (double)total.peak / (1 << 20), el, left);
            fflush(stdout);
        }
        if (t->metrics.f) TS_TRY(trainer_write_metrics(t, &s));
        if (t->sample_every > 0 && t->rank0 && s.step % t->sample_every == 0)
            TS_TRY(trainer_print_sample(t, s.step));
        if (!s.skipped && s.step > 1) { /* the first step warms up */
            sum_step_ms += s.step_ms;
            sum_compute_ms += 1e3 * t->compute_s;
            timed++;
        }
        if (s.skipped) TS_TRY(trainer_skipped(t, &s));
        /* A checkpoint falls due every checkpoint_every steps and at the
         * end; one due on a skipped step waits for the next applied step,
         * so the newest checkpoint never holds the state a skipped step
         * started from (the state that just diverged). */
        if (t->ckpt_dir[0] &&
            ((t->ckpt_every > 0 && s.step % t->ckpt_every == 0) || s.step == t->steps))
            t->ckpt_due = 1;
        if (t->ckpt_due && s.skipped && t->rank0) {
            printf("checkpoint: deferred, step %lld was skipped\n", (long long)s.step);
            fflush(stdout);
        }
        /* A background save is published once every rank has written. */
        TS_TRY(trainer_ckpt_poll(t, 0));
        if (t->ckpt_due && !s.skipped) {
            t->ckpt_due = 0;
            TS_TRY(trainer_save(t));
        }
        TS_TRY(trainer_fault_kill(t, s.step));
    }
    TS_TRY(trainer_ckpt_poll(t, 1));
    TS_TRY(trainer_write_summary(t, sum_step_ms, sum_compute_ms, timed));
    (void)c;
    TS_TRY(ts_file_stream_close(&t->metrics));
    if (t->par && t->rank0) ts_parallel_report(t->par, stdout);
    if (t->trace) {
        TS_TRY(ts_trace_write(t->trace, t->par ? t->par->world : NULL, t->trace_path));
        if (t->rank0) printf("trace: %s\n", t->trace_path);
    }
    return TS_OK;
}
