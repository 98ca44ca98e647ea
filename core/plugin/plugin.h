/*
 * plugin.h (core) — the plugin loader and the registry of what plugins
 * provide, as the rest of the core sees them. The plugin-facing side (the
 * descriptor, the host table, the callback types) is include/tessera/plugin.h.
 *
 * Start-up, in order:
 *     ts_config_create; ts_config_register(core keys); ts_config_load; --set
 *     ts_plugins_create(&reg)
 *     ts_plugins_load(reg, cfg)      opens [parallel] plugins, registers their
 *                                    keys, validates the config, runs init
 *     ts_plugins_mesh(...)           -> ts_mesh / ts_parallel
 *     ts_plugins_set_comm_source     so host->comm can answer
 *     ts_plugins_apply_transforms(reg, plan)
 *     ... ts_plugins_run_hooks, ts_plugins_scheduler, ts_plugins_dispatcher
 *     ts_plugins_destroy(reg)        fini in reverse order, dlclose
 * ts_plugins_load replaces the caller's own ts_config_validate (it must run
 * after the plugins' keys are in the schema).
 *
 * What it does not do: build the mesh or the communicators, or know any
 * plugin by name.
 */
#ifndef TESSERA_CORE_PLUGIN_H
#define TESSERA_CORE_PLUGIN_H

#include <stdio.h>

#include "backend.h"
#include "config.h"
#include "tessera/mesh.h"
#include "tessera/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_plugins ts_plugins;

ts_status ts_plugins_create(ts_plugins **out);
/* Calls fini of every initialised plugin (reverse load order), dlcloses every
 * library and frees the registry. NULL is a no-op. */
void ts_plugins_destroy(ts_plugins *reg);

/* Where the log of host->log goes (default stderr, TS_LOG_INFO). */
void ts_plugins_set_log(ts_plugins *reg, FILE *f, ts_plugin_log_level level);

/* Step 1: opens and checks every plugin of `[parallel] plugins` (',' or blank
 * separated) and registers its keys in cfg (section = its name). `cfg` is
 * borrowed and must outlive the registry; its core keys must be registered.
 * Failures (TS_ERR_PLUGIN, messages name the plugin, the file and the
 * searched directories or versions): not found, not loadable, no entry
 * symbol, ABI major mismatch, newer ABI minor, struct_size too small, name
 * different from the file name, a name given twice or equal to a core
 * section; TS_ERR_CONFIG for a bad key declaration. */
ts_status ts_plugins_open(ts_plugins *reg, ts_config *cfg);
/* Opens one plugin by name, searching `[parallel] plugin_path` of the
 * registry's config (if any), TESSERA_PLUGIN_PATH and the built-in
 * directory. Used by ts_plugins_open; exposed for tools. */
ts_status ts_plugins_open_one(ts_plugins *reg, const char *name);
/* Opens every tessera-*.so in the search path without a config (for
 * `tessera plugins` without --config). Files that fail are reported on `err`
 * (may be NULL) and skipped; returns TS_OK unless out of memory. */
ts_status ts_plugins_discover(ts_plugins *reg, const char *plugin_path, FILE *err);

/* Step 2: calls init of every opened plugin in load order and checks each
 * registration against the earlier ones (axes, owned transform phases,
 * transform, scheduler and dispatcher names). On failure the plugins already
 * initialised stay initialised (destroy calls their fini). */
ts_status ts_plugins_init(ts_plugins *reg);

/* open + ts_config_validate + init. */
ts_status ts_plugins_load(ts_plugins *reg, ts_config *cfg);

/* --- the registry -------------------------------------------------------- */

int ts_plugins_count(const ts_plugins *reg);
const char *ts_plugins_name(const ts_plugins *reg, int i);
const char *ts_plugins_path(const ts_plugins *reg, int i);
const char *ts_plugins_version(const ts_plugins *reg, int i);
/* The descriptor's flags of plugin i (TS_PLUGIN_THREAD_LOCAL_STATE; 0 for a
 * plugin of ABI 1.0-1.2 or one whose struct_size does not reach them). */
uint32_t ts_plugins_flags(const ts_plugins *reg, int i);
/* The host table this registry hands its plugins (for tests and `tessera
 * conform`, which print its sizes). */
const ts_host *ts_plugins_host(const ts_plugins *reg);
/* 1 when every loaded plugin declares TS_PLUGIN_THREAD_LOCAL_STATE (also
 * when none is loaded, or reg is NULL): several trainers may then run in
 * this process at once, each on its own thread with its own registry. 0
 * otherwise, with *first_not (when not NULL) the name of the first plugin,
 * in load order, that does not declare it. */
int ts_plugins_thread_safe(const ts_plugins *reg, const char **first_not);

typedef struct ts_plugin_axis_entry {
    char name[TS_MESH_NAME_MAX]; /* "tp", "ep", "shard", ...                 */
    int size;                    /* >= 1, or TS_PLUGIN_AXIS_AUTO             */
    ts_mesh_kind mesh;
    const char *plugin;            /* the plugin that claimed it                         */
    char before[TS_MESH_NAME_MAX]; /* its place: before this axis ("": the
                                      pipeline's); unused for a standard name */
    int cuts_batch;                /* counts in the data-parallel width      */
} ts_plugin_axis_entry;
int ts_plugins_num_axes(const ts_plugins *reg);
const ts_plugin_axis_entry *ts_plugins_axis(const ts_plugins *reg, int i);

/* The mesh over `world` ranks of the axes the plugins claimed: the standard
 * axes (TS_MESH_STANDARD_AXES) in their places, each with the size its
 * claimant gave (an auto axis derived as world / the other axes of its mesh)
 * or its standard size when no plugin claims it, and every other claimed
 * axis just before the one its plugin named (by default the pipeline). The
 * groups listed are the standard tokens and every other axis alone.
 * `order` as ts_mesh_create_axes; NULL: the configuration's [parallel] order
 * when it was given, else the default order. TS_ERR_CONFIG, naming the axes, for two
 * auto axes in one mesh or a world the others do not divide; the mesh's own
 * errors otherwise. */
ts_status ts_plugins_mesh(const ts_plugins *reg, int world, const char *order, ts_mesh **out);
/* Where the axes' sizes come from, for messages about the mesh: for each
 * claimed axis its size (or auto), the plugin that claims it and, when that
 * plugin's section has a `size` key, where that key was set; then the
 * dense axes no plugin claims (size 1). Writes into buf and returns it. */
const char *ts_plugins_axes_origin(const ts_plugins *reg, char *buf, size_t size);
/* The standard axis called `name` (TS_MESH_STANDARD_AXES), or NULL. */
const ts_mesh_axis_def *ts_plugins_standard_axis(const char *name);

/* host->comm resolves tokens through this function (e.g. a wrapper around
 * ts_parallel_comm). Until it is set, host->comm answers NULL. */
typedef ts_comm *(*ts_plugins_comm_fn)(void *source, const char *token);
void ts_plugins_set_comm_source(ts_plugins *reg, ts_plugins_comm_fn fn, void *source);
/* host->layout_coords asks this function (this rank's coordinate on the
 * axis called `name`, -1 for none) with the same source. */
typedef int (*ts_plugins_coord_fn)(void *source, const char *name);
void ts_plugins_set_coord_source(ts_plugins *reg, ts_plugins_coord_fn fn);

/* What the trainer tells the plugins (ABI 1.1): the run's device (for
 * host->device_*; NULL before it is open) and the model view (host->model,
 * module hooks; borrowed, valid until set again). */
void ts_plugins_set_device(ts_plugins *reg, const ts_backend *be);
void ts_plugins_set_model(ts_plugins *reg, const ts_plugin_model *model);

/* Runs the module hooks of event->kind in registration order (struct_size
 * filled in here); stops at the first failure with "plugin '<name>': module
 * hook <kind> of <module>: ". */
ts_status ts_plugins_run_module_hooks(ts_plugins *reg, ts_plugin_module_event *event);
int ts_plugins_num_module_hooks(const ts_plugins *reg);
/* "before_forward", ...; "?" out of range. */
const char *ts_plugin_module_hook_name(ts_plugin_module_hook_kind kind);

/* The plugin providing `what` on `axis` (its name), or NULL. A plugin built
 * against ABI 1.0 that claims an axis and registers a GRAD_READY hook counts
 * as that axis's gradient reduction (1.0 had no way to say so). reg may be
 * NULL. */
const char *ts_plugins_provider(const ts_plugins *reg, ts_plugin_provision what, const char *axis);
/* "gradient reduction", "parameter storage", ...; "?" out of range. */
const char *ts_plugin_provision_name(ts_plugin_provision what);
/* The attention / optimizer-state provider of `axis`: 1 with its ops,
 * context and user pointer, 0 when none. */
int ts_plugins_attention(const ts_plugins *reg, const char *axis,
                         const ts_plugin_attention_ops **ops, ts_plugin_ctx **ctx, void **user);
int ts_plugins_optimizer_state(const ts_plugins *reg, const char *axis,
                               const ts_plugin_optimizer_state_ops **ops, ts_plugin_ctx **ctx,
                               void **user);

/* Applies every transform to `plan` in phase order, then registration order.
 * Stops at the first failure: TS_ERR_PLUGIN (or the transform's code) with
 * "plugin 'tp': transform 'shard' (phase SHARD_TENSOR): <message>". */
ts_status ts_plugins_apply_transforms(ts_plugins *reg, ts_layout_plan *plan);
/* Who set the placement of plan entry `entry` on its layout axis `axis` in
 * the last ts_plugins_apply_transforms: "plugin 'tp', transform
 * 'tp_megatron'", or "the core's default" (written to buf, returned). */
const char *ts_plugins_placement_origin(const ts_plugins *reg, int entry, int axis, char *buf,
                                        size_t size);
/* "PIPELINE", "SHARD_TENSOR", ...; "?" out of range. */
const char *ts_plugin_phase_name(ts_plugin_phase phase);

/* Runs the hooks of event->kind in registration order (event->struct_size
 * is filled in here). Stops at the first failure, prefixing the message with
 * "plugin '<name>': hook <kind>: ". */
ts_status ts_plugins_run_hooks(ts_plugins *reg, ts_plugin_hook_event *event);
/* "grad_ready", "before_forward", ...; "?" out of range. */
const char *ts_plugin_hook_name(ts_plugin_hook_kind kind);
int ts_plugins_num_hooks(const ts_plugins *reg, ts_plugin_hook_kind kind);

/* Runs the scheduler called `name` into `out` (emptied first). TS_ERR_CONFIG
 * for an unknown name (listing the known ones). `args->struct_size` is filled
 * in here. On failure `out` is left empty. */
ts_status ts_plugins_schedule(ts_plugins *reg, const char *name, ts_plugin_schedule_args *args,
                              ts_schedule *out);
int ts_plugins_has_scheduler(const ts_plugins *reg, const char *name);
/* Where virtual pipeline stages live: a ts_plugin_stage_order, as a plugin
 * set it (host->set_stage_order), INTERLEAVED otherwise (reg may be NULL). */
int ts_plugins_stage_order(const ts_plugins *reg);
/* The registered schedulers, in registration order (reg may be NULL). */
int ts_plugins_num_schedulers(const ts_plugins *reg);
const char *ts_plugins_scheduler_name(const ts_plugins *reg, int i);

/* A registered dispatcher: its ops (copied, absent optional slots NULL), user
 * pointer and the context to pass to every call. */
typedef struct ts_plugin_dispatcher_entry {
    char name[TS_PLUGIN_NAME_MAX];
    ts_plugin_dispatcher_ops ops;
    void *user;
    ts_plugin_ctx *ctx;
    const char *plugin;
} ts_plugin_dispatcher_entry;
/* The dispatcher called `name`, or NULL with TS_ERR_CONFIG set as the last
 * error (listing the known ones). */
const ts_plugin_dispatcher_entry *ts_plugins_dispatcher(const ts_plugins *reg, const char *name);
/* The dispatcher name the provider of experts over `axis` chose, or NULL
 * when no plugin routes experts there (host->register_experts). */
const char *ts_plugins_experts(const ts_plugins *reg, const char *axis);

/* Lists every plugin (like ompi_info): name, version, ABI, file and
 * description, each INI key with type, default, range or choices and help,
 * then what it registered (axes, transforms by phase, hooks, schedulers,
 * dispatchers) once initialised. TS_ERR_IO if writing fails. */
ts_status ts_plugins_describe(const ts_plugins *reg, FILE *f);

/* Writes {"dp":{"buckets":3,...},...}: the values plugins reported with
 * host->metric since the last call, which clears them. TS_ERR_INVALID if
 * cap is too small. */
ts_status ts_plugins_metrics_json(ts_plugins *reg, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_PLUGIN_H */
