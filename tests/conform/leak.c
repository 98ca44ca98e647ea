/*
 * leak.c — tessera-leak.so: a broken hook plugin for `tessera conform`'s
 * tests. Before every optimizer step it takes a staging buffer of
 * [leak] kib KiB (communication buffers, through the core's accounted
 * allocator) and never gives it back until fini: a leak of one buffer a
 * step. The plan's dry run of two steps sees two buffers; a run of K steps
 * holds K, so its memory exceeds the plan's. It changes nothing else.
 */
#include "tessera/plugin.h"

static const ts_plugin_key leak_keys[] = {
    {"kib", TS_PLUGIN_KEY_INT, "256", 1, 1 << 20, NULL, "KiB taken (and kept) every step"},
};

#define LEAK_MAX 4096
static const ts_host *leak_host;
static int64_t leak_kib;
static void *leak_bufs[LEAK_MAX];
static int leak_n;

static ts_status leak_before_optimizer(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev,
                                       void *user) {
    (void)ev;
    (void)user;
    if (leak_n == LEAK_MAX) return TS_OK;
    void *p = leak_host->mem_alloc(TS_MEM_COMM, (size_t)leak_kib * 1024);
    if (!p)
        return leak_host->error(ctx, TS_ERR_NOMEM, "no memory for %lld KiB", (long long)leak_kib);
    leak_bufs[leak_n++] = p;
    return TS_OK;
}

static ts_status leak_init(const ts_host *host, ts_plugin_ctx *ctx) {
    leak_host = host;
    leak_n = 0;
    TS_TRY(host->config->get_int(ctx, "kib", &leak_kib));
    return host->reg->hook(ctx, TS_HOOK_BEFORE_OPTIMIZER, leak_before_optimizer, NULL);
}

static void leak_fini(const ts_host *host, ts_plugin_ctx *ctx) {
    (void)ctx;
    for (int i = 0; i < leak_n; i++)
        host->mem_free(leak_bufs[i]);
    leak_n = 0;
}

static const ts_plugin_descriptor leak_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "leak",
    "1.0.0",
    "test plugin: keeps a staging buffer of every step (a leak the plan does not see)",
    leak_keys,
    1,
    leak_init,
    leak_fini,
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &leak_descriptor;
}
