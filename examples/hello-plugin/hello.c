/*
 * hello.c — tessera-hello.so, the smallest useful plugin: one INI key of its
 * own section and one hook. Before the first micro-batch of every `every`-th
 * step it logs its greeting, with the sizes of the dp communicator when the
 * run has one. It shows the whole shape of a plugin: INI keys declared with
 * type, default and help; init reading them through the host table and
 * registering a hook; the one exported descriptor function.
 *
 * It includes only <tessera/plugin.h> and links nothing of tessera's. It is
 * an ABI 1.3 plugin: it reaches the core's services through the host's
 * sub-tables (host->config, host->reg, host->comms), and its state is
 * _Thread_local, so that trainers on several threads of one process may
 * each use it (TS_PLUGIN_THREAD_LOCAL_STATE).
 */
#define TS_PLUGIN_TARGET_MINOR 3 /* declares ABI 1.3, before the include */
#include <tessera/plugin.h>

/* The host table, kept from init for use in the hook (it lives until fini
 * returns), and the keys' values: one copy per thread. */
static _Thread_local const ts_host *hello_host;

static _Thread_local const char *hello_greeting;
static _Thread_local int64_t hello_every;

/* [hello] keys: name, type, default, min, max, choices, help. */
static const ts_plugin_key hello_keys[] = {
    {"greeting", TS_PLUGIN_KEY_STRING, "hello from a plugin", 1, 0, NULL,
     "what to log before a step's first forward pass"},
    {"every", TS_PLUGIN_KEY_INT, "1", 1, 1e9, NULL, "log every N steps"},
};

static ts_status hello_before_forward(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev,
                                      void *user) {
    (void)user;
    if (ev->micro_batch > 0 || ev->step % hello_every != 0) return TS_OK;
    const ts_host_comms *comms = hello_host->comms;
    ts_comm *dp = comms->get(ctx, "dp"); /* NULL outside a multi-rank run */
    if (dp)
        hello_host->log(ctx, TS_LOG_INFO, "%s (step %lld, dp rank %d of %d)", hello_greeting,
                        (long long)ev->step, comms->rank(dp), comms->size(dp));
    else
        hello_host->log(ctx, TS_LOG_INFO, "%s (step %lld)", hello_greeting, (long long)ev->step);
    return TS_OK;
}

static ts_status hello_init(const ts_host *host, ts_plugin_ctx *ctx) {
    hello_host = host;
    TS_TRY(host->config->get_str(ctx, "greeting", &hello_greeting));
    TS_TRY(host->config->get_int(ctx, "every", &hello_every));
    return host->reg->hook(ctx, TS_HOOK_BEFORE_FORWARD, hello_before_forward, NULL);
}

static void hello_fini(const ts_host *host, ts_plugin_ctx *ctx) {
    host->log(ctx, TS_LOG_DEBUG, "goodbye");
}

static const ts_plugin_descriptor hello_descriptor = {
    .abi_version = TS_PLUGIN_ABI_VERSION,
    .struct_size = sizeof(ts_plugin_descriptor),
    .name = "hello", /* must match the file name tessera-hello.so */
    .version = "0.1.0",
    .description = "logs a greeting before the first forward pass of every N-th step",
    .keys = hello_keys,
    .nkeys = (int)(sizeof hello_keys / sizeof hello_keys[0]),
    .init = hello_init,
    .fini = hello_fini,
    .flags = TS_PLUGIN_THREAD_LOCAL_STATE, /* ABI 1.3: its state is _Thread_local */
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &hello_descriptor;
}
