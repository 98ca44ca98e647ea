/*
 * pp.c — tessera-pp.so: pipeline parallelism. The plugin claims the `pp`
 * axis, assigns every parameter of the layout plan to a virtual pipeline
 * stage, and registers the one scheduler the core runs: GPipe, 1F1B or
 * interleaved 1F1B (schedules.h).
 *
 * Cut: the L transformer layers h.0 .. h.L-1 are split into p*v virtual
 * stages in order (p = pp size, v = virtual_stages), evenly or as
 * layers_per_stage says; wte and wpe go with virtual stage 0, lnf with the
 * last. Virtual stage k lives on pipeline rank k % p as its model chunk
 * k / p (Megatron-LM's interleaving), so with v = 1 the stage is the rank;
 * zb_v places them in V order instead (host->reg->stage_order: rank s holds
 * virtual stages s and 2p - 1 - s, so the first and last meet on rank 0).
 * A plan entry's `stage` is its virtual stage; placements are untouched.
 *
 * What it does not do: run the schedule, move activations, or keep the tied
 * LM head in step with wte (the core's executor), nor any communication of
 * its own.
 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "schedule_file.h"
#include "schedules.h"
#include "tessera/plugin.h"

static const ts_plugin_key pp_keys[] = {
    {"size", TS_PLUGIN_KEY_INT, "1", 1, 1 << 16, "auto",
     "pipeline ranks; auto: the world divided by the other dense axes"},
    {"schedule", TS_PLUGIN_KEY_ENUM, "1f1b", 1, 0, "gpipe|1f1b|interleaved|zb_h1|zb_v|file",
     "pipeline schedule; interleaved needs virtual_stages >= 2, zb_v exactly 2 (zero bubble: "
     "backward split into input and weight gradients); file: schedule_file's"},
    {"schedule_file", TS_PLUGIN_KEY_STRING, "", 1, 0, NULL,
     "with schedule = file: each rank's F/B/W list (docs in plugins/pp/README.md), checked "
     "before the first step"},
    {"virtual_stages", TS_PLUGIN_KEY_INT, "1", 1, 1024, NULL,
     "model chunks per pipeline rank (v); more than 1 only with schedule = interleaved or zb_v"},
    {"layers_per_stage", TS_PLUGIN_KEY_STRING, "", 1, 0, NULL,
     "layers of each virtual stage, e.g. 3,5 (p*v counts summing to the layers); empty: even"},
};

typedef struct pp_state {
    const ts_host *host;
    pp_schedule_kind kind;
    int from_file; /* schedule = file: `file` decides            */
    pp_schedule_file file;
    pp_schedule_cache cache; /* ZB-V's every-rank simulation, shared by the ranks' calls */
    int virtual_stages;
    const char *layers_per_stage; /* owned by the core until fini */
} pp_state;

static _Thread_local pp_state pp;

/* --- layers_per_stage --------------------------------------------------------- */

/* Reads the comma-separated counts of `text`: *n entries summing to *sum.
 * When stage_of is not NULL, layer l < layers gets the index of the entry
 * that holds it. Returns 0, or non-zero with the reason in `why`. */
static int pp_layers_parse(const char *text, int *stage_of, int layers, int *n, long *sum,
                           char *why, size_t why_size) {
    *n = 0;
    *sum = 0;
    for (const char *c = text;;) {
        const char *token = c, *end = strchr(c, ',');
        size_t token_len = end ? (size_t)(end - c) : strlen(c);
        while (*c == ' ' || *c == '\t')
            c++;
        long count = 0;
        int digits = 0;
        for (; *c >= '0' && *c <= '9' && count <= INT_MAX; c++, digits++)
            count = count * 10 + (*c - '0');
        while (*c == ' ' || *c == '\t')
            c++;
        if (!digits || count < 1 || count > INT_MAX || (*c && *c != ',')) {
            snprintf(why, why_size, "entry %d '%.*s' is not a positive integer", *n + 1,
                     (int)token_len, token);
            return 1;
        }
        for (long l = *sum; stage_of && l < *sum + count && l < layers; l++)
            stage_of[l] = *n;
        *sum += count;
        (*n)++;
        if (!*c) return 0;
        c++;
    }
}

/* --- the transform ------------------------------------------------------------ */

/* The layer l of a parameter called "h.<l>.<rest>", or -1. */
static int pp_layer_of(const char *name) {
    if (name[0] != 'h' || name[1] != '.' || name[2] < '0' || name[2] > '9') return -1;
    long l = 0;
    const char *c = name + 2;
    for (; *c >= '0' && *c <= '9' && l <= INT_MAX; c++)
        l = l * 10 + (*c - '0');
    return *c == '.' && l <= INT_MAX ? (int)l : -1;
}

/* The size of the pp axis of the plan's entries (all must agree), or -1. */
static int pp_plan_size(ts_plugin_ctx *ctx, const ts_layout_plan *plan, ts_status *st) {
    int p = -1;
    for (int i = 0; i < plan->count; i++) {
        const ts_layout *l = &plan->entries[i].layout;
        for (int a = 0; a < l->naxes; a++) {
            if (strcmp(l->axes[a].name, "pp") != 0) continue;
            if (p > 0 && l->axes[a].size != p) {
                *st = pp.host->error(ctx, TS_ERR_INVALID, "%s has a pp axis of size %d, not %d",
                                     plan->entries[i].name, l->axes[a].size, p);
                return -1;
            }
            p = l->axes[a].size;
        }
    }
    if (p < 1) *st = pp.host->error(ctx, TS_ERR_INVALID, "the layout plan has no pp axis");
    return p;
}

/* Fills stage_of[0..layers-1] with each layer's virtual stage. */
static ts_status pp_split_layers(ts_plugin_ctx *ctx, int *stage_of, int layers, int p, int v) {
    int pv = p * v;
    char size_at[128], v_at[128], why[256];
    pp.host->config->where(ctx, "size", size_at, sizeof size_at);
    pp.host->config->where(ctx, "virtual_stages", v_at, sizeof v_at);
    if (!pp.layers_per_stage[0]) {
        if (layers % pv != 0)
            return pp.host->error(ctx, TS_ERR_CONFIG,
                                  "%d layers do not split evenly into pp size %d x "
                                  "virtual_stages %d = %d virtual stages (%s, %s); set "
                                  "[pp] layers_per_stage for an uneven split",
                                  layers, p, v, pv, size_at, v_at);
        for (int l = 0; l < layers; l++)
            stage_of[l] = l / (layers / pv);
        return TS_OK;
    }
    char at[128];
    int n;
    long sum;
    pp.host->config->where(ctx, "layers_per_stage", at, sizeof at);
    if (pp_layers_parse(pp.layers_per_stage, NULL, 0, &n, &sum, why, sizeof why))
        return pp.host->error(ctx, TS_ERR_CONFIG, "%s = '%s': %s", at, pp.layers_per_stage, why);
    if (n != pv)
        return pp.host->error(ctx, TS_ERR_CONFIG,
                              "%s = '%s' has %d entries, want one per virtual stage: pp size %d x "
                              "virtual_stages %d = %d (%s, %s)",
                              at, pp.layers_per_stage, n, p, v, pv, size_at, v_at);
    if (sum != layers)
        return pp.host->error(ctx, TS_ERR_CONFIG, "%s = '%s' sums to %ld layers, the model has %d",
                              at, pp.layers_per_stage, sum, layers);
    pp_layers_parse(pp.layers_per_stage, stage_of, layers, &n, &sum, why, sizeof why);
    return TS_OK;
}

static ts_status pp_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)user;
    ts_status st = TS_OK;
    int p = pp_plan_size(ctx, plan, &st), v = pp.virtual_stages;
    if (p < 1) return st;
    int layers = 0;
    for (int i = 0; i < plan->count; i++) {
        const char *name = plan->entries[i].name;
        int l = pp_layer_of(name);
        layers += l >= 0 && strcmp(strchr(name + 2, '.'), ".ln1.weight") == 0;
    }
    if (layers < 1)
        return pp.host->error(ctx, TS_ERR_INVALID,
                              "the layout plan has no transformer layers (no h.<l>.ln1.weight)");
    int *stage_of = pp.host->mem_alloc(TS_MEM_OTHER, sizeof *stage_of * (size_t)layers);
    if (!stage_of) return pp.host->error(ctx, TS_ERR_NOMEM, "no memory for %d layers", layers);
    st = pp_split_layers(ctx, stage_of, layers, p, v);
    for (int i = 0; i < plan->count && !st; i++) {
        ts_layout_plan_entry *e = &plan->entries[i];
        if (e->kind != TS_PLAN_PARAM) continue;
        int l = pp_layer_of(e->name);
        if (strcmp(e->name, "wte") == 0 || strcmp(e->name, "wpe") == 0)
            e->stage = 0;
        else if (strncmp(e->name, "lnf.", 4) == 0)
            e->stage = p * v - 1;
        else if (l >= 0 && l < layers)
            e->stage = stage_of[l];
        else if (l >= 0)
            st = pp.host->error(ctx, TS_ERR_INVALID,
                                "%s names layer %d, but the plan has %d layers "
                                "(h.0.ln1.weight .. h.%d.ln1.weight)",
                                e->name, l, layers, layers - 1);
        else
            st = pp.host->error(ctx, TS_ERR_INVALID,
                                "does not know which stage parameter %s belongs to (it knows wte, "
                                "wpe, h.<l>.*, lnf.*)",
                                e->name);
    }
    pp.host->mem_free(stage_of);
    return st;
}

/* --- the scheduler ---------------------------------------------------------------- */

typedef struct pp_sink {
    ts_plugin_ctx *ctx;
    ts_schedule *out;
} pp_sink;

static ts_status pp_append(void *user, int kind, int mb, int chunk, int peer) {
    pp_sink *sink = user;
    return pp.host->schedule_append(sink->ctx, sink->out, kind, mb, chunk, peer);
}

static ts_status pp_scheduler(ts_plugin_ctx *ctx, const ts_plugin_schedule_args *args,
                              ts_schedule *out, void *user) {
    (void)user;
    char why[256], at[128];
    pp_sink sink = {ctx, out};
    if (pp.from_file) {
        const pp_schedule_file *f = &pp.file;
        pp.host->config->where(ctx, "schedule_file", at, sizeof at);
        if (args->stages != f->ranks || args->micro_batches != f->micro_batches ||
            args->chunks != f->chunks)
            return pp.host->error(ctx, TS_ERR_CONFIG,
                                  "%s lists %d ranks, %d micro-batches and %d chunks per rank; "
                                  "the run has pp = %d, %d micro-batches and %d chunks",
                                  at, f->ranks, f->micro_batches, f->chunks, args->stages,
                                  args->micro_batches, args->chunks);
        return pp_schedule_file_emit(f, args->stage, pp_append, &sink);
    }
    if (args->chunks != pp.virtual_stages) {
        pp.host->config->where(ctx, "virtual_stages", at, sizeof at);
        return pp.host->error(ctx, TS_ERR_CONFIG, "asked for %d chunks per rank, but %s = %d",
                              args->chunks, at, pp.virtual_stages);
    }
    if (pp_schedule_check(pp.kind, args->stages, args->stage, args->micro_batches, args->chunks,
                          why, sizeof why)) {
        pp.host->config->where(ctx, "schedule", at, sizeof at);
        return pp.host->error(ctx, TS_ERR_CONFIG, "%s (%s)", why, at);
    }
    return pp_schedule_emit_cached(&pp.cache, pp.kind, args->stages, args->stage,
                                   args->micro_batches, args->chunks, pp_append, &sink);
}

/* --- init ------------------------------------------------------------------------ */

static ts_status pp_init(const ts_host *host, ts_plugin_ctx *ctx) {
    memset(&pp, 0, sizeof pp);
    pp.host = host;
    int64_t size = 1, v = 1;
    const char *schedule = NULL;
    char at[128], v_at[128], why[256];
    TS_TRY(host->config->get_int(ctx, "size", &size));
    TS_TRY(host->config->get_str(ctx, "schedule", &schedule));
    TS_TRY(host->config->get_int(ctx, "virtual_stages", &v));
    TS_TRY(host->config->get_str(ctx, "layers_per_stage", &pp.layers_per_stage));
    pp.virtual_stages = (int)v;
    host->config->where(ctx, "schedule", at, sizeof at);
    host->config->where(ctx, "virtual_stages", v_at, sizeof v_at);
    const char *file = NULL;
    TS_TRY(host->config->get_str(ctx, "schedule_file", &file));
    pp.from_file = schedule && strcmp(schedule, "file") == 0;
    if (pp.from_file) {
        char file_at[128];
        host->config->where(ctx, "schedule_file", file_at, sizeof file_at);
        if (!file || !file[0])
            return host->error(ctx, TS_ERR_CONFIG, "%s = file needs [pp] schedule_file (%s)", at,
                               file_at);
        /* A known pp size bounds the file's rank lines as they are read. */
        if (pp_schedule_file_load(file, size >= 1 ? (int)size : 0, &pp.file, why, sizeof why))
            return host->error(ctx, TS_ERR_CONFIG, "%s: %s", file_at, why);
        if (pp.file.chunks != v) {
            int chunks = pp.file.chunks;
            pp_schedule_file_free(&pp.file);
            return host->error(ctx, TS_ERR_CONFIG, "%s names %d chunks per rank, but %s = %d",
                               file_at, chunks, v_at, (int)v);
        }
        pp.kind = v > 1 ? PP_SCHEDULE_INTERLEAVED : PP_SCHEDULE_1F1B; /* for the checks below */
        if (pp.file.order != TS_STAGES_INTERLEAVED) {
            if (!TS_REGISTRATION_HAS(host->reg, stage_order))
                return host->error(ctx, TS_ERR_PLUGIN,
                                   "a V schedule needs a core that places "
                                   "stages in V order");
            TS_TRY(host->reg->stage_order(ctx, pp.file.order));
        }
    } else if (file && file[0]) {
        char file_at[128];
        host->config->where(ctx, "schedule_file", file_at, sizeof file_at);
        return host->error(ctx, TS_ERR_CONFIG, "%s is read only with [pp] schedule = file, not %s",
                           file_at, schedule);
    } else if (pp_schedule_kind_parse(schedule, &pp.kind) != TS_OK) {
        return host->error(ctx, TS_ERR_CONFIG,
                           "%s = '%s' is not gpipe, 1f1b, interleaved, zb_h1, zb_v or file", at,
                           schedule ? schedule : "");
    }
    if (pp.kind == PP_SCHEDULE_INTERLEAVED && v < 2 && !pp.from_file)
        return host->error(ctx, TS_ERR_CONFIG,
                           "%s = interleaved needs at least 2 virtual stages per rank, but %s = "
                           "%d",
                           at, v_at, (int)v);
    if (pp.kind == PP_SCHEDULE_ZB_V && v != 2)
        return host->error(ctx, TS_ERR_CONFIG,
                           "%s = zb_v places exactly 2 virtual stages per rank (a V), but %s = %d",
                           at, v_at, (int)v);
    if (pp.kind != PP_SCHEDULE_INTERLEAVED && pp.kind != PP_SCHEDULE_ZB_V && v > 1 && !pp.from_file)
        return host->error(ctx, TS_ERR_CONFIG,
                           "%s = %d needs [pp] schedule = interleaved or zb_v, but %s = %s", v_at,
                           (int)v, at, schedule);
    if (pp_schedule_kind_order(pp.kind) != TS_STAGES_INTERLEAVED) {
        if (!TS_REGISTRATION_HAS(host->reg, stage_order))
            return host->error(ctx, TS_ERR_PLUGIN,
                               "%s = %s needs a core that places stages in V "
                               "order (plugin ABI 1.1 with set_stage_order)",
                               at, schedule);
        TS_TRY(host->reg->stage_order(ctx, pp_schedule_kind_order(pp.kind)));
    }
    if (pp.layers_per_stage[0]) {
        int n;
        long sum;
        if (pp_layers_parse(pp.layers_per_stage, NULL, 0, &n, &sum, why, sizeof why)) {
            host->config->where(ctx, "layers_per_stage", at, sizeof at);
            return host->error(ctx, TS_ERR_CONFIG, "%s = '%s': %s", at, pp.layers_per_stage, why);
        }
    }
    TS_TRY(host->reg->axis(ctx, "pp", size < 0 ? TS_PLUGIN_AXIS_AUTO : (int)size, TS_MESH_DENSE));
    TS_TRY(host->reg->transform(ctx, "pp_stages", TS_PHASE_PIPELINE, pp_transform, NULL));
    return host->reg->scheduler(ctx, pp.from_file ? "file" : pp_schedule_kind_name(pp.kind),
                                pp_scheduler, NULL);
}

static void pp_fini(const ts_host *host, ts_plugin_ctx *ctx) {
    (void)host, (void)ctx;
    pp_schedule_file_free(&pp.file);
    pp_schedule_cache_free(&pp.cache);
}

static const ts_plugin_descriptor pp_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "pp",
    "1.0.0",
    "pipeline parallel: layers cut into (virtual) stages, GPipe, 1F1B, interleaved 1F1B, ZB-H1 or "
    "ZB-V",
    pp_keys,
    (int)(sizeof pp_keys / sizeof pp_keys[0]),
    pp_init,
    pp_fini,
    TS_PLUGIN_THREAD_LOCAL_STATE, /* its state is _Thread_local */
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &pp_descriptor;
}
