/*
 * onethread.c — tessera-onethread.so, an ABI 1.3 test plugin that declares
 * TS_PLUGIN_THREAD_LOCAL_STATE and checks what the core promises in return:
 * every callback runs on the thread that ran init. It registers a layout
 * transform, a hook of every kind and a module hook of every kind; each
 * compares pthread_self() with the thread init ran on and fails, naming
 * the callback, when they differ. AFTER_OPTIMIZER reports the callbacks
 * counted so far as the metric "calls"; fini logs them. Its state is
 * _Thread_local, as the flag says.
 */
#include <pthread.h>

#include "tessera/plugin.h"

static _Thread_local struct {
    const ts_host *host;
    pthread_t init_thread;
    int64_t calls;
} one;

static ts_status one_check(ts_plugin_ctx *ctx, const char *what) {
    one.calls++;
    if (pthread_equal(pthread_self(), one.init_thread)) return TS_OK;
    return one.host->error(ctx, TS_ERR_PLUGIN, "%s called on another thread than init's", what);
}

static ts_status one_transform(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user) {
    (void)plan;
    (void)user;
    return one_check(ctx, "transform");
}

static ts_status one_hook(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev, void *user) {
    (void)user;
    TS_TRY(one_check(ctx, "hook"));
    if (ev->kind == TS_HOOK_AFTER_OPTIMIZER)
        return one.host->metric(ctx, "calls", (double)one.calls);
    return TS_OK;
}

static ts_status one_module_hook(ts_plugin_ctx *ctx, const ts_plugin_module_event *ev, void *user) {
    (void)ev;
    (void)user;
    return one_check(ctx, "module hook");
}

static ts_status one_init(const ts_host *host, ts_plugin_ctx *ctx) {
    one.host = host;
    one.init_thread = pthread_self();
    one.calls = 0;
    const ts_host_registration *reg = host->reg;
    TS_TRY(reg->transform(ctx, "onethread_check", TS_PHASE_ANNOTATE, one_transform, NULL));
    for (int k = 0; k < TS_HOOK_COUNT; k++)
        TS_TRY(reg->hook(ctx, (ts_plugin_hook_kind)k, one_hook, NULL));
    for (int k = 0; k < TS_MODULE_HOOK_COUNT; k++)
        TS_TRY(reg->module_hook(ctx, (ts_plugin_module_hook_kind)k, one_module_hook, NULL));
    return TS_OK;
}

static void one_fini(const ts_host *host, ts_plugin_ctx *ctx) {
    if (!pthread_equal(pthread_self(), one.init_thread))
        host->log(ctx, TS_LOG_ERROR, "fini called on another thread than init's");
    else
        host->log(ctx, TS_LOG_INFO, "%lld callbacks, all on init's thread", (long long)one.calls);
}

static const ts_plugin_descriptor one_descriptor = {
    .abi_version = TS_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ts_plugin_descriptor),
    .name = "onethread",
    .version = "0.1.0",
    .description = "test: fails any callback made on another thread than init's",
    .keys = NULL,
    .nkeys = 0,
    .init = one_init,
    .fini = one_fini,
    .flags = TS_PLUGIN_THREAD_LOCAL_STATE,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &one_descriptor;
}
