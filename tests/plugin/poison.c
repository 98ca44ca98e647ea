/*
 * poison.c — tessera-poison.so: on the optimizer step [poison] step (from 0)
 * it writes NaN into the first element of the gradient of wte, as a
 * numerical blow-up would. Used to test that such a step is skipped (not
 * applied) and that training then continues. CPU tensors only.
 */
#include <math.h>
#include <string.h>

#include "tessera/plugin.h"

static const ts_plugin_key poison_keys[] = {
    {"step", TS_PLUGIN_KEY_INT, "-1", -1, 1e9, NULL,
     "the step (from 0) whose wte gradient gets a NaN; -1 = none"},
};

static ts_status poison_grad_ready(ts_plugin_ctx *ctx, const ts_plugin_hook_event *ev, void *user) {
    (void)ctx;
    const int64_t *step = user;
    if (ev->step == *step && ev->param && strcmp(ev->param->name, "wte") == 0)
        ((float *)ev->grad->data)[0] = NAN;
    return TS_OK;
}

static int64_t poison_step = -1;

static ts_status poison_init(const ts_host *host, ts_plugin_ctx *ctx) {
    TS_TRY(host->config->get_int(ctx, "step", &poison_step));
    return host->reg->hook(ctx, TS_HOOK_GRAD_READY, poison_grad_ready, &poison_step);
}

static const ts_plugin_descriptor poison_descriptor = {
    TS_PLUGIN_ABI_VERSION,
    sizeof(ts_plugin_descriptor),
    "poison",
    "1.0",
    "writes a NaN into one gradient on one step",
    poison_keys,
    1,
    poison_init,
    NULL,
    0, /* flags: its state is the process's, one trainer at a time */
};

TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
    return &poison_descriptor;
}
