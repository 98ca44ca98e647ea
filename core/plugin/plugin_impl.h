/*
 * plugin_impl.h — what the plugin loader (loader.c), the host table (host.c)
 * and the registry (registry.c) share: the records of loaded plugins and of
 * their registrations, and a few helpers. Internal to core/plugin; the
 * contract is plugin.h (the core's side) and include/tessera/plugin.h (the
 * plugin author's).
 */
#ifndef TESSERA_CORE_PLUGIN_IMPL_H
#define TESSERA_CORE_PLUGIN_IMPL_H

#include <stdio.h>

#include "backend.h"
#include "internal.h"
#include "plugin.h"

#define PLG_MSG 2048
#define PLG_CTX_MAGIC 0x74706c67u /* "tplg" */

struct ts_plugin_ctx {
    uint32_t magic;
    ts_plugins *reg;
    char name[TS_PLUGIN_NAME_MAX];
    char *path;
    void *handle;
    ts_plugin_descriptor desc; /* copy; fields past the plugin's size zeroed */
    uint32_t flags;            /* the descriptor's flags (ABI 1.3), else 0     */
    int in_init, initialised;
    ts_status reg_status; /* first failed registration during init */
    char reg_msg[PLG_MSG];
    int nmetrics; /* this step's host->metric values          */
    char metric_key[16][32];
    double metric_value[16];
};

typedef struct plg_transform {
    char name[TS_PLUGIN_NAME_MAX * 2];
    ts_plugin_phase phase;
    ts_plugin_transform_fn fn;
    void *user;
    ts_plugin_ctx *ctx;
} plg_transform;

typedef struct plg_hook {
    ts_plugin_hook_kind kind;
    ts_plugin_hook_fn fn;
    void *user;
    ts_plugin_ctx *ctx;
} plg_hook;

typedef struct plg_scheduler {
    char name[TS_PLUGIN_NAME_MAX];
    ts_plugin_scheduler_fn fn;
    void *user;
    ts_plugin_ctx *ctx;
} plg_scheduler;

/* ABI 1.1 registrations. */
typedef struct plg_module_hook {
    ts_plugin_module_hook_kind kind;
    ts_plugin_module_hook_fn fn;
    void *user;
    ts_plugin_ctx *ctx;
} plg_module_hook;

typedef struct plg_provider {
    ts_plugin_provision what;
    char axis[TS_MESH_NAME_MAX];
    int is_default; /* TS_PROVIDE_DEFAULT: another plugin may take it over */
    ts_plugin_ctx *ctx;
    /* TS_PROVIDE_ATTENTION / _OPTIMIZER_STATE: the ops (copied) and user */
    ts_plugin_attention_ops attention;
    ts_plugin_optimizer_state_ops optimizer;
    void *user;
    char dispatcher[64]; /* TS_PROVIDE_EXPERTS: the dispatcher's name     */
} plg_provider;

struct ts_plugins {
    ts_config *cfg; /* borrowed; NULL after ts_plugins_discover alone */
    ts_plugin_ctx **plugins;
    int n, cap;
    ts_plugin_axis_entry *axes;
    int naxes, capaxes;
    plg_transform *transforms;
    int ntransforms, captransforms;
    plg_hook *hooks;
    int nhooks, caphooks;
    plg_scheduler *schedulers;
    int nschedulers, capschedulers;
    int stage_order;                 /* ts_plugin_stage_order                */
    struct ts_plugin_ctx *stage_set; /* the plugin that set it, or NULL      */
    ts_plugin_dispatcher_entry *dispatchers;
    int ndispatchers, capdispatchers;
    FILE *log;
    ts_plugin_log_level log_level;
    ts_plugins_comm_fn comm_fn;
    void *comm_source;
    ts_host host;
    int *origin; /* per plan entry and axis: the transform that set it   */
    int origin_count;
    plg_module_hook *module_hooks;
    int nmodule_hooks, capmodule_hooks;
    plg_provider *providers;
    int nproviders, capproviders;
    const ts_plugin_model *model; /* the trainer's view, or NULL       */
    const ts_backend *be;         /* the run's device, or NULL          */
    ts_plugins_coord_fn coord_fn; /* this rank's coordinate on an axis  */
};

/* Grows *arr (of *cap elements of `elem` bytes) to hold `need`; 0 when out
 * of memory. */
TS_INTERNAL int plg_grow(void **arr, int *cap, int need, size_t elem);
TS_INTERNAL ts_status plg_nomem(void);
/* The last error without its "[rank r/w] " prefix. */
TS_INTERNAL const char *plg_last_error(void);
/* Sets "<prefix><the current last error>" as the last error. */
TS_INTERNAL ts_status plg_wrap(ts_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
TS_INTERNAL int plg_name_ok(const char *s);
TS_INTERNAL const char *plg_key_type_name(ts_plugin_key_type t);
TS_INTERNAL int plg_choice_has(const char *choices, const char *word);
/* 1 if a declared default reads as a value of its type. */
TS_INTERNAL int plg_default_ok(const ts_plugin_key *k);
TS_INTERNAL int plg_ctx_ok(const ts_plugin_ctx *ctx);
/* Every registration: a valid context inside its init; reg_end records
 * the first failure so that an init that ignores it still fails. */
TS_INTERNAL ts_status reg_begin(ts_plugin_ctx *ctx, const char *what);
TS_INTERNAL ts_status reg_end(ts_plugin_ctx *ctx, ts_status st);
/* Fills the host table (host.c). */
TS_INTERNAL void plg_host_fill(ts_host *h);

#endif /* TESSERA_CORE_PLUGIN_IMPL_H */
