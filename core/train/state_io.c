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

/* A parameter's stored block as a box of three dimensions (those past its
 * own of extent 1) and its element count. */
static int64_t param_box(const ts_param *p, int64_t off[3], int64_t ext[3]) {
    int64_t n = 1;
    for (int d = 0; d < 3; d++) {
        off[d] = d < p->store.ndim ? p->store_offset[d] : 0;
        ext[d] = d < p->store.ndim ? p->store.shape[d] : 1;
        n *= ext[d];
    }
    return n;
}

/* Elements [lo, hi) of param p's block (box-relative) that lie in the
 * optimizer's range: the part of p this rank keeps optimizer state for. */
static int param_range(const ts_trainer *t, const ts_param *p, int64_t n, int64_t *lo,
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
    if (in->param_dtype != m->dtype)
        return ts_error(TS_ERR_FORMAT, "checkpoint %s: parameters were %s, the run uses %s", path,
                        ts_dtype_name(in->param_dtype), ts_dtype_name(m->dtype));
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
    float *local = direct ? NULL
                          : ts_mem_alloc(TS_MEM_OTHER, m->numel * (sizeof(float) + sizeof(uint16_t)));
    float *host = direct_state ? NULL : ts_mem_alloc(TS_MEM_OTHER, (range ? range : 1) * sizeof(float));
    if (!st && ((!direct && !local) || (!direct_state && !host)))
        st = ts_error(TS_ERR_NOMEM, "checkpoint %s: out of memory", path);
    float *master = direct ? (float *)m->param_data : local;
    for (int k = 0; k < TS_CKPT_ARRAYS && !st; k++) {
        float *dst = k == 0 ? master : direct_state ? (k == 1 ? o->m : o->v) : host;
        for (int i = 0; i < m->nparams && !st; i++) {
            const ts_param *p = &m->params[i];
            int tensor = ts_ckpt_reader_find(r, p->value.name);
            int64_t off[3], ext[3], n = param_box(p, off, ext), lo = 0, hi = n;
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
            if (!param_range(t, p, n, &lo, &hi)) continue;
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

/* Whether any rank failed (collective over the world): a failure on one
 * rank becomes an error on every rank, so none is left waiting. */
static ts_status trainer_agree(ts_trainer *t, ts_status st, const char *what) {
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
    ts_status st = dir ? trainer_load_dir(t, path, &meta) : trainer_load_file(t, path, &meta);
    if (!st && meta.seed != t->state.seed)
        st = trainer_key_error(
            t->cfg, "train", "seed", "seed = %llu, but checkpoint %s was trained with seed %llu",
            (unsigned long long)t->state.seed, path, (unsigned long long)meta.seed);
    st = trainer_agree(t, st, "loading the checkpoint");
    if (!st) {
        t->state.step = meta.step;
        t->state.data_cursor = meta.data_cursor;
        t->skipped_total = meta.skipped_steps;
    }
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

/* Which parameters this rank writes (writes[p]). A block held by several
 * ranks (placement R on an axis of size > 1, other than the pipeline's and
 * the one that cuts the optimizer state, over which each rank writes its
 * own range) is written by one of them; the blocks of each such replica
 * group go, in model order, to the replica that has been given the fewest
 * bytes so far, so the writing spreads over the group (every member makes
 * the same choices: they hold the same blocks). */
static ts_status trainer_writers(ts_trainer *t, unsigned char *writes) {
    ts_model *m = t->model;
    enum { MAX_SIGS = 32 };
    unsigned sigs[MAX_SIGS];
    int64_t *loads[MAX_SIGS];
    int nsigs = 0;
    ts_status st = TS_OK;
    for (int p = 0; p < m->nparams && !st; p++) {
        const ts_param *q = &m->params[p];
        writes[p] = !q->tied_copy;
        if (!t->par || q->tied_copy) continue;
        const ts_layout_plan_entry *e = ts_layout_plan_find(&t->plan, q->value.name);
        if (!e) return ts_error(TS_ERR_INTERNAL, "checkpoint: %s is not in the layout plan", q->value.name);
        unsigned sig = 0;
        int replicas = 1, mine = 0;
        for (int a = 0; a < e->layout.naxes; a++) {
            const ts_layout_axis *ax = &e->layout.axes[a];
            if (ax->size == 1 || ax->placement.kind == TS_PLACEMENT_SHARD ||
                strcmp(ax->name, ts_mesh_axis_name(TS_AXIS_PP)) == 0)
                continue;
            if (t->opt_cut && strcmp(ax->name, m->axes[t->opt_axis].name) == 0) continue;
            ts_mesh_axis axis;
            TS_TRY(ts_mesh_axis_from_name(ax->name, &axis));
            sig |= 1u << axis;
            mine = mine * ax->size + ts_parallel_coord(t->par, axis);
            replicas *= ax->size;
        }
        if (replicas == 1) continue;
        int k = 0;
        while (k < nsigs && sigs[k] != sig)
            k++;
        if (k == nsigs) {
            if (nsigs == MAX_SIGS || !(loads[k] = calloc((size_t)replicas, sizeof(int64_t)))) {
                st = ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
                break;
            }
            sigs[nsigs++] = sig;
        }
        int64_t off[3], ext[3], n = param_box(q, off, ext), lo = 0, hi = n;
        if (!param_range(t, q, n, &lo, &hi)) continue;
        int best = 0;
        for (int r = 1; r < replicas; r++)
            if (loads[k][r] < loads[k][best]) best = r;
        loads[k][best] += hi - lo;
        writes[p] = best == mine;
    }
    for (int k = 0; k < nsigs; k++)
        free(loads[k]);
    return st;
}

/* Writes this rank's shards into `file` and describes them in `shards`
 * (*nshards of them): for every parameter it writes, the master weights,
 * then both moments, each for the part of its block in the optimizer's
 * range. State off the host goes through `stage` (stage_floats). */
static ts_status trainer_write_shards(ts_trainer *t, const unsigned char *writes, int rank,
                                      ts_ckpt_file *file, ts_ckpt_shard *shards, int64_t *nshards,
                                      const char (*names)[TS_NAME_MAX], int ntable, float *stage,
                                      size_t stage_floats) {
    ts_model *m = t->model;
    ts_optimizer *o = t->optim;
    const float *arrays[TS_CKPT_ARRAYS] = {o->master, o->m, o->v};
    int host = o->state_be->kind == TS_DEVICE_CPU;
    *nshards = 0;
    for (int k = 0; k < TS_CKPT_ARRAYS; k++)
        for (int p = 0; p < m->nparams; p++) {
            const ts_param *q = &m->params[p];
            int64_t off[3], ext[3], n = param_box(q, off, ext), lo, hi;
            if (!writes[p] || !param_range(t, q, n, &lo, &hi)) continue;
            int tensor = 0;
            while (tensor < ntable && strcmp(names[tensor], q->value.name) != 0)
                tensor++;
            if (tensor == ntable)
                return ts_error(TS_ERR_INTERNAL, "checkpoint: %s is not in the tensor table",
                                q->value.name);
            ts_ckpt_shard *sh = &shards[(*nshards)++];
            *sh = (ts_ckpt_shard){.tensor = tensor, .array = k, .file = rank,
                                  .file_offset = (int64_t)file->bytes, .lo = lo, .hi = hi};
            memcpy(sh->offset, off, sizeof off);
            memcpy(sh->extent, ext, sizeof ext);
            const float *src = arrays[k] + (q->offset + (size_t)lo - o->shard.begin);
            file->crc = 0;
            size_t count = (size_t)(hi - lo);
            if (host) TS_TRY(ts_ckpt_file_write(file, src, count * sizeof(float)));
            for (size_t done = 0; !host && done < count; done += stage_floats) {
                size_t c = count - done < stage_floats ? count - done : stage_floats;
                TS_TRY(o->state_be->to_host(stage, src + done, c * sizeof(float)));
                TS_TRY(ts_ckpt_file_write(file, stage, c * sizeof(float)));
            }
            sh->crc = file->crc;
        }
    return TS_OK;
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

/* Bytes of host memory a save of state off the host copies through. */
#define TRAINER_SAVE_STAGE_BYTES (16u << 20)

/* Saves the training state as checkpoint directory `final` (collective over
 * the world): every rank writes its shards into `tmp`, then world rank 0
 * the metadata and the marker, and renames it into place. */
static ts_status trainer_save_dir(ts_trainer *t, const char *final, const char *tmp) {
    ts_model *m = t->model;
    int rank = t->par ? t->par->rank : 0, world = t->par ? t->par->size : 1;
    TS_TRY(trainer_state_finite(t));
    TS_TRY(trainer_agree(t, t->rank0 ? ts_ckpt_begin(tmp) : TS_OK, "creating the checkpoint"));

    int ntable = ts_model_param_table_of(m, NULL, NULL, NULL);
    char(*names)[TS_NAME_MAX] = malloc((size_t)ntable * sizeof *names);
    int64_t(*shapes)[3] = malloc((size_t)ntable * sizeof *shapes);
    int *ndim = malloc((size_t)ntable * sizeof *ndim);
    unsigned char *writes = malloc((size_t)(m->nparams ? m->nparams : 1));
    ts_ckpt_shard *mine = malloc((size_t)(TS_CKPT_ARRAYS * m->nparams + 1) * sizeof *mine);
    int host = t->optim->state_be->kind == TS_DEVICE_CPU;
    float *stage = host ? NULL : ts_mem_alloc(TS_MEM_OTHER, TRAINER_SAVE_STAGE_BYTES);
    ts_status st = TS_OK;
    if (!names || !shapes || !ndim || !writes || !mine || (!host && !stage) ||
        ts_model_param_table_of(m, names, shapes, ndim) != ntable)
        st = ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    int64_t nmine = 0;
    ts_ckpt_file file = {.fd = -1};
    char path[4200];
    ts_ckpt_rank_file(tmp, rank, path, sizeof path);
    if (!st) st = trainer_writers(t, writes);
    if (!st) st = ts_ckpt_file_open(&file, path);
    if (!st)
        st = trainer_write_shards(t, writes, rank, &file, mine, &nmine, names, ntable, stage,
                                  TRAINER_SAVE_STAGE_BYTES / sizeof(float));
    ts_status cs = ts_ckpt_file_close(&file);
    if (!st) st = cs;
    st = trainer_agree(t, st, "writing the checkpoint's shards");

    /* Every rank's shard table and file size to every rank (small). */
    enum { W = sizeof(ts_ckpt_shard) / sizeof(int32_t) };
    size_t *counts = st ? NULL : calloc((size_t)world, sizeof *counts);
    int64_t *bytes = st ? NULL : calloc((size_t)world, sizeof *bytes);
    int32_t *nall = st ? NULL : calloc((size_t)world, sizeof *nall);
    ts_ckpt_shard *all = NULL;
    int64_t total = 0;
    if (!st && (!counts || !bytes || !nall)) st = ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
    if (!st) {
        int32_t n = (int32_t)nmine;
        int64_t b = (int64_t)file.bytes;
        if (t->par && world > 1) {
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
        if (t->par && world > 1)
            st = ts_comm_all_gatherv(t->par->world, mine, all, counts, TS_I32);
        else
            memcpy(all, mine, (size_t)nmine * sizeof *all);
    }
    if (!st && t->rank0) {
        ts_ckpt_tensor *tensors = calloc((size_t)ntable, sizeof *tensors);
        uint64_t *fb = calloc((size_t)world, sizeof *fb);
        if (!tensors || !fb) st = ts_error(TS_ERR_NOMEM, "checkpoint: out of memory");
        for (int i = 0; !st && i < ntable; i++) {
            snprintf(tensors[i].name, sizeof tensors[i].name, "%s", names[i]);
            tensors[i].ndim = ndim[i];
            for (int d = 0; d < 3; d++)
                tensors[i].shape[d] = d < ndim[i] ? shapes[i][d] : 1;
        }
        for (int r = 0; !st && r < world; r++)
            fb[r] = (uint64_t)bytes[r];
        if (!st) st = trainer_check_cover(tensors, ntable, all, total);
        ts_ckpt_info info = {
            .meta = {t->state.step, t->state.data_cursor, t->state.seed, t->skipped_total},
            .cfg = m->cfg, .param_dtype = m->dtype, .nfiles = world, .file_bytes = fb,
            .ntensors = ntable, .tensors = tensors, .nshards = total, .shards = all};
        if (!st) st = ts_ckpt_commit(tmp, final, &info);
        free(tensors);
        free(fb);
    }
    st = trainer_agree(t, st, "publishing the checkpoint");
    /* A failed save leaves nothing behind (the previous checkpoints stay). */
    if (st && t->rank0) ts_ckpt_remove_dir(tmp);
    free(names);
    free(shapes);
    free(ndim);
    free(writes);
    free(mine);
    free(counts);
    free(bytes);
    free(nall);
    free(all);
    ts_mem_free(stage);
    return st;
}

ts_status trainer_save(ts_trainer *t, char *path, size_t size) {
    char final[4096], tmp[4096];
    ts_ckpt_dir_paths(t->ckpt_dir, t->state.step, final, tmp, sizeof final);
    TS_TRY(trainer_save_dir(t, final, tmp));
    snprintf(path, size, "%s", final);
    return TS_OK;
}

ts_status ts_trainer_save_checkpoint(ts_trainer *t, const char *path) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.dir", path);
    return trainer_save_dir(t, path, tmp);
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
