/*
 * good.c — tessera-good.so, the well-formed test plugin: it declares one key
 * of every type and registers one of everything (an axis, transforms in three
 * phases, hooks, a scheduler and a dispatcher) so that tests/test_plugin.c
 * can check the registry, the phase order and the error paths of callbacks.
 * Test conventions: a transform treats the plan as a char buffer and appends
 * its name; a hook treats event->state as an int counter.
 */
#include <stdio.h>
#include <string.h>

#include "tessera/plugin.h"

static const ts_host *good_host;

static const ts_plugin_key good_keys[] = {
    {"size", TS_PLUGIN_KEY_INT, "2", 1, 64, "auto", "size of the tp axis"},
    {"mode", TS_PLUGIN_KEY_ENUM, "a", 1, 0, "a|b", "a mode with two choices"},
    {"scale", TS_PLUGIN_KEY_FLOAT, "2.0", 0, 100, NULL, "factor the grad_ready hook applies"},
    {"verbose", TS_PLUGIN_KEY_BOOL, "false", 1, 0, NULL, "log from every hook"},
    {"label", TS_PLUGIN_KEY_STRING, "", 1, 0, NULL, "free text, echoed by init"},
};

static float good_scale = 1;

static ts_status good_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)ctx;
    char *buf = (char *)plan; /* test convention, see the top of the file */
    size_t n = strlen(buf);
    snprintf(buf + n, 256 - n, "%s%s", n ? "," : "", (const char *)user);
    return TS_OK;
}

static ts_status good_before_forward(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev,
                                     void *user) {
    (void)user;
    if (ev->step == 99) return good_host->error(ctx, TS_ERR_PLUGIN, "step 99 is refused");
    if (ev->state) (*(int *)ev->state)++;
    return TS_OK;
}

static ts_status good_grad_ready(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev, void *user) {
    (void)ctx;
    (void)user;
    float *g = ev->grad->data;
    for (int64_t i = 0; i < ev->grad->shape[0]; i++)
        g[i] *= good_scale;
    return TS_OK;
}

/* F/B per micro-batch, then the optimizer step. */
static ts_status good_schedule(ts_plugin_ctx *ctx, const ts_plugin_schedule_args *args,
                               ts_schedule *out, void *user) {
    (void)user;
    if (args->micro_batches < 1)
        return good_host->error(ctx, TS_ERR_INVALID, "needs micro_batches >= 1, got %d",
                                args->micro_batches);
    for (int mb = 0; mb < args->micro_batches; mb++) {
        TS_TRY(good_host->schedule_append(ctx, out, TS_PLUGIN_ACT_FORWARD, mb, 0, -1));
        TS_TRY(good_host->schedule_append(ctx, out, TS_PLUGIN_ACT_BACKWARD, mb, 0, -1));
    }
    return good_host->schedule_append(ctx, out, TS_PLUGIN_ACT_OPTIMIZER_STEP, -1, 0, -1);
}

static ts_status good_dispatch(ts_plugin_ctx *ctx, void *state, void *args) {
    (void)ctx;
    (void)state;
    (*(int *)args) += 1;
    return TS_OK;
}

static ts_status good_combine(ts_plugin_ctx *ctx, void *state, void *args) {
    (void)ctx;
    (void)state;
    (*(int *)args) += 10;
    return TS_OK;
}

static const ts_plugin_dispatcher_ops good_dispatcher = {sizeof(ts_plugin_dispatcher_ops), NULL,
                                                         good_dispatch, good_combine, NULL};

static ts_status good_init(const ts_host *host, ts_plugin_ctx *ctx) {
    good_host = host;
    int64_t size;
    double scale;
    const char *label;
    int verbose, has;
    TS_TRY(host->config_int(ctx, "size", &size));
    TS_TRY(host->config_float(ctx, "scale", &scale));
    TS_TRY(host->config_str(ctx, "label", &label));
    TS_TRY(host->config_bool(ctx, "verbose", &verbose));
    TS_TRY(host->config_has(ctx, "mode", &has));
    good_scale = (float)scale;
    /* reading an undeclared key, or a key as the wrong type, must fail */
    int64_t bogus;
    if (host->config_int(ctx, "undeclared", &bogus) != TS_ERR_INVALID ||
        host->config_int(ctx, "label", &bogus) != TS_ERR_INVALID)
        return host->error(ctx, TS_ERR_PLUGIN, "the host answered a key it should refuse");
    if (host->comm(ctx, "dp") != NULL)
        return host->error(ctx, TS_ERR_PLUGIN, "a communicator exists during init");
    char where[128];
    host->log(ctx, TS_LOG_INFO, "init: tp size %lld from %s, label '%s', mode given %d",
              (long long)size, host->config_where(ctx, "size", where, sizeof where), label, has);
    TS_TRY(host->register_axis(ctx, "tp", (int)size, TS_MESH_DENSE));
    /* registered out of phase order on purpose */
    TS_TRY(host->register_transform(ctx, "good_annotate", TS_PHASE_ANNOTATE, good_transform,
                                    "annotate"));
    TS_TRY(host->register_transform(ctx, "good_tensor", TS_PHASE_SHARD_TENSOR, good_transform,
                                    "tensor"));
    TS_TRY(host->register_transform(ctx, "good_pipe", TS_PHASE_PIPELINE, good_transform, "pipe"));
    TS_TRY(host->register_transform(ctx, "good_tensor2", TS_PHASE_SHARD_TENSOR, good_transform,
                                    "tensor2"));
    TS_TRY(host->register_hook(ctx, TS_HOOK_BEFORE_FORWARD, good_before_forward, NULL));
    TS_TRY(host->register_hook(ctx, TS_HOOK_GRAD_READY, good_grad_ready, NULL));
    TS_TRY(host->register_scheduler(ctx, "good_sched", good_schedule, NULL));
    return host->register_dispatcher(ctx, "good_disp", &good_dispatcher, NULL);
}

static void good_fini(const ts_host *host, ts_plugin_ctx *ctx) {
    host->log(ctx, TS_LOG_INFO, "fini");
}

static const ts_plugin_descriptor good_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "good",
    "1.2.3",
    "the well-formed test plugin: one of everything",
    good_keys,
    (int)(sizeof good_keys / sizeof good_keys[0]),
    good_init,
    good_fini,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &good_descriptor;
}
