/*
 * state_io.c — the training state in and out of files (state.h): a
 * checkpoint saved (every rank's blocks gathered into the unsharded layout,
 * written by world rank 0) and loaded (this rank's blocks cut out of it),
 * the llm.c export, and initial weights set from a whole flat array.
 *
 * What it does not do: the file formats themselves (checkpoint.c, llmc.c) or
 * decide when to save (report.c).
 */
#include "trainer_impl.h"

#include <math.h>
#include <string.h>

#include "cpu_kernels.h"

/* Copies `bytes` between host memory and the memory of `be` (a memcpy on
 * the CPU). */
static ts_status trainer_upload(const ts_backend *be, void *dev, const void *host, size_t bytes) {
    if (be->kind != TS_DEVICE_CPU) return be->from_host(dev, host, bytes);
    if (dev != host) memcpy(dev, host, bytes);
    return TS_OK;
}

static ts_status trainer_download(const ts_backend *be, void *host, const void *dev, size_t bytes) {
    if (be->kind != TS_DEVICE_CPU) return be->to_host(host, dev, bytes);
    if (dev != host) memcpy(host, dev, bytes);
    return TS_OK;
}

/* The host's view of `dev` (numel f32 in the memory of `be`): `dev` itself
 * on the CPU, else a copy in `host` (numel floats). */
static ts_status trainer_host(ts_trainer *t, const ts_backend *be, const float *dev, float *host,
                              const float **out) {
    if (be->kind == TS_DEVICE_CPU) {
        *out = dev;
        return TS_OK;
    }
    TS_TRY(be->to_host(host, dev, t->model->numel * sizeof(float)));
    *out = host;
    return TS_OK;
}

/* Whether the optimizer keeps only a range of the flat buffers. */
static int trainer_optim_cut(const ts_trainer *t) {
    return t->optim->shard.begin != 0 || t->optim->shard.end != t->model->numel;
}

/* Whether state_io needs host buffers of numel floats per array: the
 * model's device is not the host, or the optimizer's ranges are gathered. */
static int trainer_needs_host(const ts_trainer *t) {
    return t->be->kind != TS_DEVICE_CPU || t->optim->state_be->kind != TS_DEVICE_CPU ||
           trainer_optim_cut(t);
}

/* The whole local array (numel f32, host) of an optimizer array that holds
 * this rank's range (`range`, where the optimizer's state lives): the array
 * itself when nothing is cut (on the CPU), else every rank's range gathered
 * over the cutting axis into `host` (numel floats). Collective over that
 * axis when cut. */
static ts_status trainer_whole(ts_trainer *t, const float *range, float *host, const float **out) {
    const ts_backend *sb = t->optim->state_be;
    if (!trainer_optim_cut(t)) return trainer_host(t, sb, range, host, out);
    size_t b = t->optim->shard.begin, e = t->optim->shard.end;
    TS_TRY(trainer_download(sb, host + b, range, (e - b) * sizeof(float)));
    TS_TRY(ts_comm_all_gatherv(t->model->axes[t->opt_axis].host, host + b, host, t->opt_counts,
                               TS_F32));
    *out = host;
    return TS_OK;
}

/* The whole local master weights: the f32 parameters themselves (whole
 * after every update), or the master copy (bf16 runs, offloaded state)
 * gathered. */
static ts_status trainer_master_whole(ts_trainer *t, float *host, const float **out) {
    if (!t->optim->owns_master) return trainer_host(t, t->be, t->model->param_data, host, out);
    return trainer_whole(t, t->optim->master, host, out);
}

/* Sets an optimizer array (this rank's range) from the whole local array
 * `local` (numel f32, host). */
static ts_status trainer_put_range(ts_trainer *t, float *range, const float *local) {
    size_t b = t->optim->shard.begin, e = t->optim->shard.end;
    return trainer_upload(t->optim->state_be, range, local + b, (e - b) * sizeof(float));
}

/* Sets the master weights and the parameters from the whole local array
 * `local` (numel f32, host; `scratch`: numel bf16 of host memory for a bf16
 * run on a device). */
static ts_status trainer_put_master(ts_trainer *t, const float *local, uint16_t *scratch) {
    ts_model *m = t->model;
    if (t->optim->owns_master) TS_TRY(trainer_put_range(t, t->optim->master, local));
    if (m->dtype == TS_F32)
        return trainer_upload(t->be, m->param_data, local, m->numel * sizeof(float));
    if (t->be->kind == TS_DEVICE_CPU) return t->be->f32_to_bf16(m->param_data, local, m->numel);
    ts_cpu_f32_to_bf16(scratch, local, m->numel);
    return t->be->from_host(m->param_data, scratch, m->numel * sizeof(uint16_t));
}

/* Sets the master weights (and, in bf16, the parameters) from the
 * unsharded flat array: this rank's blocks are cut out of it. */
ts_status trainer_set_master(ts_trainer *t, const float *full) {
    ts_model *m = t->model;
    float *local = ts_mem_alloc(TS_MEM_OTHER, m->numel * (sizeof(float) + sizeof(uint16_t)));
    if (!local) return TS_ERR_NOMEM;
    ts_model_scatter(m, full, local);
    ts_status st = trainer_put_master(t, local, (uint16_t *)(local + m->numel));
    ts_mem_free(local);
    return st;
}

/* The unsharded copy of a local f32 array (numel) — the array itself when
 * nothing is cut, else a gather over tp into `scratch` (global_numel). */
static int trainer_cut(const ts_trainer *t) {
    return t->model->numel != t->model->global_numel || t->stages > 1;
}

static ts_status trainer_full(ts_trainer *t, const float *local, float *scratch,
                              const float **full) {
    if (!trainer_cut(t)) {
        *full = local;
        return TS_OK;
    }
    /* Each pipeline stage fills its own parameters (gathered over tp) and
     * zeros elsewhere; a sum over the pipeline group assembles the model. */
    if (t->stages > 1) memset(scratch, 0, t->model->global_numel * sizeof(float));
    TS_TRY(ts_model_gather(t->model, local, scratch));
    if (t->stages > 1)
        TS_TRY(ts_comm_all_reduce(t->stage_host, scratch, scratch, t->model->global_numel, TS_F32,
                                  TS_REDUCE_SUM));
    *full = scratch;
    return TS_OK;
}

ts_status ts_trainer_load(ts_trainer *t, const char *path) {
    ts_model *m = t->model;
    size_t n = m->global_numel, ln = m->numel;
    float *buf = ts_mem_alloc(TS_MEM_OTHER, 3 * n * sizeof(float));
    float *local = ts_mem_alloc(TS_MEM_OTHER, ln * (sizeof(float) + sizeof(uint16_t)));
    if (!buf || !local) {
        ts_mem_free(buf);
        ts_mem_free(local);
        return TS_ERR_NOMEM;
    }
    ts_ckpt_meta meta;
    ts_status st = ts_checkpoint_load(path, m, &meta, buf, buf + n, buf + 2 * n);
    if (!st && meta.seed != t->state.seed)
        st = trainer_key_error(
            t->cfg, "train", "seed", "seed = %llu, but checkpoint %s was trained with seed %llu",
            (unsigned long long)t->state.seed, path, (unsigned long long)meta.seed);
    if (!st) {
        ts_model_scatter(m, buf, local);
        st = trainer_put_master(t, local, (uint16_t *)(local + ln));
    }
    float *moments[2] = {t->optim->m, t->optim->v};
    for (int k = 0; k < 2 && !st; k++) {
        ts_model_scatter(m, buf + (size_t)(k + 1) * n, local);
        st = trainer_put_range(t, moments[k], local);
    }
    if (!st) {
        t->state.step = meta.step;
        t->state.data_cursor = meta.data_cursor;
        t->skipped_total = meta.skipped_steps;
    }
    ts_mem_free(buf);
    ts_mem_free(local);
    return st;
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

/* Saves the training state: the optimizer's ranges gathered over the axis
 * that cuts them, the model's blocks gathered over the axes that cut it
 * (every rank takes part), written by world rank 0. */
ts_status trainer_save(ts_trainer *t, char *path, size_t size) {
    ts_model *m = t->model;
    TS_TRY(trainer_state_finite(t));
    int cut = trainer_cut(t), local = trainer_needs_host(t);
    size_t n = m->global_numel, ln = m->numel;
    float *buf = cut ? ts_mem_alloc(TS_MEM_OTHER, 3 * n * sizeof(float)) : NULL;
    float *host = local ? ts_mem_alloc(TS_MEM_OTHER, 3 * ln * sizeof(float)) : NULL;
    if ((cut && !buf) || (local && !host)) {
        ts_mem_free(buf);
        return TS_ERR_NOMEM;
    }
    const float *la, *lb, *lc, *a, *b, *c;
    ts_status st = trainer_master_whole(t, host, &la);
    if (!st) st = trainer_whole(t, t->optim->m, host ? host + ln : NULL, &lb);
    if (!st) st = trainer_whole(t, t->optim->v, host ? host + 2 * ln : NULL, &lc);
    if (!st) st = trainer_full(t, la, buf, &a);
    if (!st) st = trainer_full(t, lb, buf ? buf + n : NULL, &b);
    if (!st) st = trainer_full(t, lc, buf ? buf + 2 * n : NULL, &c);
    ts_ckpt_meta meta = {t->state.step, t->state.data_cursor, t->state.seed, t->skipped_total};
    if (!st && t->rank0) st = ts_checkpoint_save(t->ckpt_dir, m, &meta, a, b, c, path, size);
    ts_mem_free(buf);
    ts_mem_free(host);
    return st;
}

ts_status ts_trainer_export(ts_trainer *t, const char *path, const char *format) {
    ts_model *m = t->model;
    int local = trainer_needs_host(t);
    float *buf =
        trainer_cut(t) ? ts_mem_alloc(TS_MEM_OTHER, m->global_numel * sizeof(float)) : NULL;
    float *host = local ? ts_mem_alloc(TS_MEM_OTHER, m->numel * sizeof(float)) : NULL;
    if ((trainer_cut(t) && !buf) || (local && !host)) {
        ts_mem_free(buf);
        return TS_ERR_NOMEM;
    }
    const float *whole, *full;
    ts_status st = trainer_master_whole(t, host, &whole);
    if (!st) st = trainer_full(t, whole, buf, &full);
    int safetensors = format && strcmp(format, "safetensors") == 0;
    if (!st && t->rank0)
        st = safetensors ? ts_safetensors_save(path, m, full) : ts_llmc_save(path, m, full);
    ts_mem_free(buf);
    ts_mem_free(host);
    return st;
}
