/*
 * state_io.c — the training state in from files (state.h): a checkpoint
 * directory loaded (each rank reads its own blocks from whichever shards
 * hold them) or an earlier build's single file (this rank's blocks cut out
 * of the whole); the weights exported unsharded (llm.c, safetensors); and
 * initial weights set from a whole flat array.
 *
 * What it does not do: the file formats themselves (checkpoint.c,
 * ckpt_dir.c, llmc.c), write checkpoints (ckpt_save.c) or decide when to
 * save (report.c).
 */
#include "trainer_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

/* Loads a single-file checkpoint of an earlier build: the whole model read,
 * this rank's blocks cut out. */
static ts_status trainer_load_file(ts_trainer *t, const char *path, ts_ckpt_meta *meta) {
    ts_model *m = t->model;
    size_t n = m->global_numel, ln = m->numel;
    float *buf = ts_mem_alloc(TS_MEM_OTHER, 3 * n * sizeof(float));
    float *local = ts_mem_alloc(TS_MEM_OTHER, ln * (sizeof(float) + sizeof(uint16_t)));
    if (!buf || !local) {
        ts_mem_free(buf);
        ts_mem_free(local);
        return TS_ERR_NOMEM;
    }
    ts_status st = ts_checkpoint_load(path, m, meta, buf, buf + n, buf + 2 * n);
    if (!st) {
        ts_model_scatter(m, buf, local);
        st = trainer_put_master(t, local, (uint16_t *)(local + ln));
    }
    float *moments[2] = {t->optim->m, t->optim->v};
    for (int k = 0; k < 2 && !st; k++) {
        ts_model_scatter(m, buf + (size_t)(k + 1) * n, local);
        st = trainer_put_range(t, moments[k], local);
    }
    struct stat sb;
    t->ckpt_read = t->ckpt_bytes = stat(path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    ts_mem_free(buf);
    ts_mem_free(local);
    return st;
}

int64_t trainer_param_box(const ts_param *p, int64_t off[3], int64_t ext[3]) {
    int64_t n = 1;
    for (int d = 0; d < 3; d++) {
        off[d] = d < p->store.ndim ? p->store_offset[d] : 0;
        ext[d] = d < p->store.ndim ? p->store.shape[d] : 1;
        n *= ext[d];
    }
    return n;
}

int trainer_param_range(const ts_trainer *t, const ts_param *p, int64_t n, int64_t *lo,
                        int64_t *hi) {
    int64_t b = (int64_t)t->optim->shard.begin - (int64_t)p->offset;
    int64_t e = (int64_t)t->optim->shard.end - (int64_t)p->offset;
    *lo = b > 0 ? b : 0;
    *hi = e < n ? e : n;
    return *hi > *lo;
}

/* Checks that checkpoint `path` (its metadata `in`) holds this model. */
static ts_status trainer_check_ckpt(ts_trainer *t, const char *path, const ts_ckpt_info *in) {
    const ts_model *m = t->model;
    const ts_model_config *a = &in->cfg, *c = &m->cfg;
    if (a->layers != c->layers || a->d_model != c->d_model || a->heads != c->heads ||
        a->vocab != c->vocab || a->padded_vocab != c->padded_vocab || a->context != c->context ||
        a->experts != c->experts || a->moe_every != c->moe_every ||
        a->expert_hidden != c->expert_hidden || a->top_k != c->top_k)
        return ts_error(TS_ERR_FORMAT,
                        "checkpoint %s: model shape layers=%d d_model=%d heads=%d vocab=%d "
                        "padded_vocab=%d context=%d experts=%d does not match the configured "
                        "layers=%d d_model=%d heads=%d vocab=%d padded_vocab=%d context=%d "
                        "experts=%d",
                        path, a->layers, a->d_model, a->heads, a->vocab, a->padded_vocab,
                        a->context, a->experts, c->layers, c->d_model, c->heads, c->vocab,
                        c->padded_vocab, c->context, c->experts);
    /* The master weights are f32 whatever the parameters' dtype, so a run
     * may change [train] dtype across a checkpoint. */
    return TS_OK;
}

/* Loads a checkpoint directory: each rank reads the byte ranges of its own
 * blocks (master weights whole, moments for its optimizer range) from the
 * shards that hold them, whatever topology wrote them. */
static ts_status trainer_load_dir(ts_trainer *t, const char *path, ts_ckpt_meta *meta) {
    ts_model *m = t->model;
    ts_optimizer *o = t->optim;
    ts_ckpt_reader *r = NULL;
    TS_TRY(ts_ckpt_reader_open(path, &r));
    const ts_ckpt_info *in = ts_ckpt_reader_info(r);
    ts_status st = trainer_check_ckpt(t, path, in);
    /* Straight into the arrays where they are host memory; else through
     * one host copy of this rank's blocks. */
    int direct = t->be->kind == TS_DEVICE_CPU && m->dtype == TS_F32 && !o->owns_master;
    int direct_state = o->state_be->kind == TS_DEVICE_CPU;
    size_t range = o->shard.end - o->shard.begin;
    float *local =
        direct ? NULL : ts_mem_alloc(TS_MEM_OTHER, m->numel * (sizeof(float) + sizeof(uint16_t)));
    float *host =
        direct_state ? NULL : ts_mem_alloc(TS_MEM_OTHER, (range ? range : 1) * sizeof(float));
    if (!st && ((!direct && !local) || (!direct_state && !host)))
        st = ts_error(TS_ERR_NOMEM, "checkpoint %s: out of memory", path);
    float *master = direct ? (float *)m->param_data : local;
    for (int k = 0; k < TS_CKPT_ARRAYS && !st; k++) {
        float *dst = k == 0 ? master : direct_state ? (k == 1 ? o->m : o->v) : host;
        for (int i = 0; i < m->nparams && !st; i++) {
            const ts_param *p = &m->params[i];
            int tensor = ts_ckpt_reader_find(r, p->value.name);
            int64_t off[3], ext[3], n = trainer_param_box(p, off, ext), lo = 0, hi = n;
            if (tensor < 0) {
                st = ts_error(TS_ERR_FORMAT, "checkpoint %s: holds no tensor %s", path,
                              p->value.name);
                break;
            }
            const ts_ckpt_tensor *e = &in->tensors[tensor];
            for (int d = 0; d < 3 && !st; d++)
                if (e->shape[d] != (d < p->global_ndim ? p->global_shape[d] : 1))
                    st = ts_error(TS_ERR_FORMAT,
                                  "checkpoint %s: %s is [%lld, %lld, %lld], the model's is of "
                                  "another shape",
                                  path, e->name, (long long)e->shape[0], (long long)e->shape[1],
                                  (long long)e->shape[2]);
            if (st) break;
            if (k == 0) {
                st = ts_ckpt_reader_read(r, tensor, k, off, ext, 0, n, master + p->offset);
                continue;
            }
            if (!trainer_param_range(t, p, n, &lo, &hi)) continue;
            st = ts_ckpt_reader_read(r, tensor, k, off, ext, lo, hi,
                                     dst + p->offset + lo - o->shard.begin);
        }
        if (!st && k > 0 && !direct_state)
            st = trainer_upload(o->state_be, k == 1 ? o->m : o->v, host, range * sizeof(float));
    }
    if (!st && !direct) st = trainer_put_master(t, local, (uint16_t *)(local + m->numel));
    if (!st) *meta = in->meta;
    t->ckpt_read = ts_ckpt_reader_bytes_read(r);
    t->ckpt_bytes = 0;
    for (int i = 0; i < in->nfiles; i++)
        t->ckpt_bytes += in->file_bytes[i];
    ts_mem_free(local);
    ts_mem_free(host);
    ts_ckpt_reader_close(r);
    return st;
}

ts_status trainer_agree(ts_trainer *t, ts_status st, const char *what) {
    if (!t->par || t->par->size == 1) return st;
    int32_t bad = st != TS_OK, all = 0;
    ts_status cs = ts_comm_all_reduce(t->par->world, &bad, &all, 1, TS_I32, TS_REDUCE_SUM);
    if (cs) return cs;
    if (st || !all) return st;
    return ts_error(TS_ERR_IO, "%s failed on %d other rank%s (see their messages)", what, (int)all,
                    all > 1 ? "s" : "");
}

ts_status ts_trainer_load(ts_trainer *t, const char *path) {
    struct stat sb;
    ts_ckpt_meta meta;
    int dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    int64_t rss0 = trainer_resident_reset();
    ts_status st = dir ? trainer_load_dir(t, path, &meta) : trainer_load_file(t, path, &meta);
    if (!st && meta.seed != t->state.seed)
        st = trainer_key_error(
            t->cfg, "train", "seed", "seed = %llu, but checkpoint %s was trained with seed %llu",
            (unsigned long long)t->state.seed, path, (unsigned long long)meta.seed);
    st = trainer_ckpt_load_agree(t, st, path, st ? -1 : meta.step);
    if (!st) st = trainer_resident_growth(t, rss0, &t->ckpt_grew_kib);
    if (!st) {
        t->state.step = meta.step;
        t->state.data_cursor = meta.data_cursor;
        t->skipped_total = meta.skipped_steps;
    }
    return st;
}

ts_status ts_trainer_export(ts_trainer *t, const char *path, const char *format, int bf16) {
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
        st = safetensors ? ts_safetensors_save(path, m, full, bf16)
                         : ts_llmc_save(path, m, full, bf16);
    ts_mem_free(buf);
    ts_mem_free(host);
    return st;
}
