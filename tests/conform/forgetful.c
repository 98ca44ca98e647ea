/*
 * forgetful.c — tessera-forgetful.so: a broken hook plugin for `tessera
 * conform`'s tests. It keeps the token embedding wte in a buffer of its own
 * between steps (as a strategy that holds a tensor outside the core's
 * buffers would) and presents it to the model before each step's first
 * forward; it fills that buffer from the model on step 0 only and from the
 * optimizer's result after every step. A run from step 0 trains exactly as
 * without it; a run resumed from a checkpoint never fills the buffer and
 * trains with wte zeroed: its state is lost on resume. CPU, f32 runs only
 * (a dry run's tensors are left alone).
 */
#include <string.h>

#include "tessera/plugin.h"

static const ts_host *fg_host;
static float *fg_buf;
static size_t fg_n;

/* This rank's stored wte when it is real f32 memory, else NULL. */
static ts_tensor *fg_wte(ts_plugin_ctx *ctx) {
    const ts_plugin_model *m = fg_host->model(ctx);
    if (!m || m->device != TS_DEVICE_CPU || m->dtype != TS_F32) return NULL;
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i]->name, "wte") && m->params[i]->store->data)
            return m->params[i]->store;
    return NULL;
}

static ts_status fg_take(ts_plugin_ctx *ctx, ts_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)t->shape[d];
    if (fg_buf && fg_n == n) return TS_OK;
    if (fg_buf) fg_host->mem_free(fg_buf);
    fg_buf = fg_host->mem_alloc(TS_MEM_OTHER, n * sizeof(float));
    if (!fg_buf) return fg_host->error(ctx, TS_ERR_NOMEM, "no memory for wte's %zu floats", n);
    memset(fg_buf, 0, n * sizeof(float));
    fg_n = n;
    return TS_OK;
}

static ts_status fg_before_forward(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev, void *user) {
    (void)user;
    ts_tensor *wte = ev->micro_batch == 0 ? fg_wte(ctx) : NULL;
    if (!wte) return TS_OK;
    TS_TRY(fg_take(ctx, wte));
    if (ev->step == 0) memcpy(fg_buf, wte->data, fg_n * sizeof(float)); /* step 0 only: the bug */
    memcpy(wte->data, fg_buf, fg_n * sizeof(float));
    return TS_OK;
}

static ts_status fg_after_optimizer(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev,
                                    void *user) {
    (void)ev;
    (void)user;
    ts_tensor *wte = fg_wte(ctx);
    if (!wte) return TS_OK;
    TS_TRY(fg_take(ctx, wte));
    memcpy(fg_buf, wte->data, fg_n * sizeof(float));
    return TS_OK;
}

static ts_status fg_init(const ts_host *host, ts_plugin_ctx *ctx) {
    fg_host = host;
    if (!TS_HOST_HAS(host, model))
        return host->error(ctx, TS_ERR_PLUGIN, "needs a core of plugin ABI 1.1 or later");
    TS_TRY(host->reg->hook(ctx, TS_HOOK_BEFORE_FORWARD, fg_before_forward, NULL));
    return host->reg->hook(ctx, TS_HOOK_AFTER_OPTIMIZER, fg_after_optimizer, NULL);
}

static void fg_fini(const ts_host *host, ts_plugin_ctx *ctx) {
    (void)ctx;
    if (fg_buf) host->mem_free(fg_buf);
    fg_buf = NULL;
    fg_n = 0;
}

static const ts_plugin_descriptor forgetful_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "forgetful",
    "1.0.0",
    "test plugin: keeps wte between steps, filled on step 0 only (lost on resume)",
    NULL,
    0,
    fg_init,
    fg_fini,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &forgetful_descriptor;
}
