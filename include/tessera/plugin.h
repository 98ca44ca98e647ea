/*
 * plugin.h — the plugin SDK: everything a parallel strategy (or a third-party
 * token dispatcher, hook, scheduler ...) needs to be built as a shared object
 * that tessera loads at start-up because the INI file names it.
 *
 * This header is part of the SDK installed under include/tessera/. A plugin
 * includes it (and, for what it touches, tessera.h, mesh.h, comm.h, layout.h)
 * and links against NOTHING of tessera's: every service of the core reaches
 * it through the host table (ts_host) handed to init. Calling a function
 * declared in another SDK header (ts_error, ts_comm_all_reduce, ...) directly
 * would tie the plugin to one libtessera.so; use the host table's pointer.
 * Build plugins with -Wl,--no-undefined to be sure (the CMake helper
 * tessera_add_plugin does).
 *
 * Shape of a plugin (examples/hello-plugin/ is a complete one)
 * ------------------------------------------------------------
 *     #include <tessera/plugin.h>
 *
 *     static const ts_plugin_key hello_keys[] = {
 *         {"greeting", TS_PLUGIN_KEY_STRING, "hello", 1, 0, NULL, "what to say"},
 *     };
 *     static ts_status hello_init(const ts_host *host, ts_plugin_ctx *ctx) {
 *         const char *g;
 *         TS_TRY(host->config_str(ctx, "greeting", &g));
 *         return host->register_hook(ctx, TS_HOOK_BEFORE_FORWARD, hello_hook, NULL);
 *     }
 *     static const ts_plugin_descriptor hello_descriptor = {
 *         TS_PLUGIN_ABI_VERSION, sizeof(ts_plugin_descriptor),
 *         "hello", "0.1.0", "says hello before every forward pass",
 *         hello_keys, 1, hello_init, NULL,
 *     };
 *     TS_PLUGIN_EXPORT const ts_plugin_descriptor *tessera_plugin_descriptor(void) {
 *         return &hello_descriptor;
 *     }
 *
 * Life of a plugin
 * ----------------
 *  1. `[parallel] plugins = dp, tp` names it; the core looks for the file
 *     tessera-<name>.so in, in this order: every directory of
 *     `[parallel] plugin_path` (':'-separated; relative to the working
 *     directory), every directory of the environment variable
 *     TESSERA_PLUGIN_PATH, and the built-in directory (<libdir>/tessera next
 *     to libtessera.so). The first file found is dlopen'ed (RTLD_NOW |
 *     RTLD_LOCAL) and its one exported symbol TS_PLUGIN_SYMBOL is called.
 *  2. The core checks the descriptor (see "Versioning"), that its `name`
 *     equals <name> of the file, and registers its INI keys under the section
 *     [<name>]. Then the whole INI file is validated: a key in [<name>] that
 *     the plugin did not declare, or a value of the wrong type or range, is
 *     an error naming the file, the line and the key.
 *  3. init(host, ctx) is called, plugins in the order of the `plugins` list.
 *     init reads its keys and registers axes, layout transforms, hooks,
 *     schedulers and dispatchers. The core checks every registration against
 *     those of the plugins before it (two plugins claiming one axis, one
 *     transform phase, one scheduler name ... are errors naming both).
 *  4. The run: the core builds the mesh from the registered axes, applies the
 *     transforms to the layout plan, runs the hooks and uses the schedulers
 *     and dispatchers by name. Communicators exist from now on (host->comm).
 *  5. fini(host, ctx) is called, plugins in reverse order, then dlclose.
 *
 * Ownership
 * ---------
 *  - Everything the core passes in is borrowed for the call unless said
 *    otherwise. The `host` table and `ctx` live from init until fini returns:
 *    a plugin may keep them in a static for use in hooks and transforms.
 *  - Everything a plugin registers is copied (names, key specs, ops tables)
 *    except the function pointers' targets and `user` pointers, which must
 *    stay valid until fini returns. The descriptor and its keys array must be
 *    static (they are read before init and listed by `tessera plugins`).
 *  - Memory is freed by whoever allocated it, with the same allocator:
 *    tensor memory comes from host->mem_alloc and goes back through
 *    host->mem_free; nothing is freed across the .so boundary.
 *
 * Errors
 * ------
 * Every callback that can fail returns a ts_status (tessera.h): TS_OK on
 * success, otherwise a code whose meaning for a plugin author is
 *     TS_ERR_INVALID  an argument the core passed is unusable
 *     TS_ERR_CONFIG   the plugin's INI keys are inconsistent (say which)
 *     TS_ERR_NOMEM    an allocation failed
 *     TS_ERR_COMM     a communication operation failed (propagate it)
 *     TS_ERR_PLUGIN   anything else the plugin cannot do
 * and sets the message with host->error(ctx, code, fmt, ...), which returns
 * `code` so that `return host->error(ctx, TS_ERR_CONFIG, "...")` reads
 * naturally; the core prefixes the plugin's name. What the core does with a
 * failure is said at each callback. Plugins never call exit or abort: on a
 * failure during the run the core ends the whole job so no peer hangs.
 *
 * Threads: every callback is called on the thread that drives the run, one at
 * a time; the host functions may only be called from that thread.
 */
#ifndef TESSERA_PLUGIN_H
#define TESSERA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/comm.h"    /* ts_comm, ts_comm_request, ts_reduce_op */
#include "tessera/mesh.h"    /* ts_mesh_kind                          */
#include "tessera/tessera.h" /* ts_status, ts_tensor, ts_mem_category  */

#ifdef __cplusplus
extern "C" {
#endif

/* ===========================================================================
 * Versioning
 *
 * One ABI version, (major << 16) | minor, covers the descriptor and the host
 * table. A plugin is accepted when its major equals the core's and its minor
 * is not newer than the core's (a newer minor may rely on host functions this
 * core lacks). Within a major, structs only ever grow at their end: a new
 * minor appends fields and host functions, never moves or removes one. Each
 * struct carries its own size, so either side can tell which fields the other
 * knows (TS_HOST_HAS below).
 * ======================================================================== */
#define TS_PLUGIN_ABI_MAJOR 1
#define TS_PLUGIN_ABI_MINOR 0
#define TS_PLUGIN_ABI_MAKE(major, minor)                                                           \
    ((uint32_t)(((uint32_t)(major) << 16) | ((uint32_t)(minor)&0xffffu)))
#define TS_PLUGIN_ABI_VERSION TS_PLUGIN_ABI_MAKE(TS_PLUGIN_ABI_MAJOR, TS_PLUGIN_ABI_MINOR)
#define TS_PLUGIN_ABI_MAJOR_OF(v) ((unsigned)((uint32_t)(v) >> 16))
#define TS_PLUGIN_ABI_MINOR_OF(v) ((unsigned)((uint32_t)(v)&0xffffu))

/* The one symbol a plugin exports: a function of type ts_plugin_entry_fn. */
#define TS_PLUGIN_SYMBOL "tessera_plugin_descriptor"

/* Marks the entry point as exported even under -fvisibility=hidden. */
#define TS_PLUGIN_EXPORT __attribute__((visibility("default")))

/* Longest plugin name; names are [a-z0-9_], 1..TS_PLUGIN_NAME_MAX-1 chars. */
#define TS_PLUGIN_NAME_MAX 32

/* Opaque: the core's record of one loaded plugin. Every host function takes
 * it first so that the core knows who registers, whose section is read and
 * whose name goes in front of a message. Valid from init until fini returns. */
typedef struct ts_plugin_ctx ts_plugin_ctx;

/* The model's layout plan (include/tessera/layout.h); transforms edit it. */
typedef struct ts_layout_plan ts_layout_plan;

/* ===========================================================================
 * INI keys a plugin declares
 *
 * Every key of the plugin's section [<name>] is declared here, with a type,
 * a default and a one-line help (Open MPI MCA style): the core validates the
 * INI file against them, answers host->config_* with them, and lists them in
 * `tessera plugins`. A key in [<name>] that is not declared is an error.
 * ======================================================================== */
typedef enum ts_plugin_key_type {
    TS_PLUGIN_KEY_INT = 0,    /* decimal 64-bit integer                       */
    TS_PLUGIN_KEY_FLOAT = 1,  /* finite number                                */
    TS_PLUGIN_KEY_BOOL = 2,   /* true/false, yes/no, on/off, 1/0              */
    TS_PLUGIN_KEY_STRING = 3, /* any text, surrounding blanks trimmed         */
    TS_PLUGIN_KEY_ENUM = 4,   /* one of the '|'-separated words of `choices`  */
} ts_plugin_key_type;

typedef struct ts_plugin_key {
    /* The key, e.g. "size"; no blanks, '=', '[', ']', ';', '.' or '#'. */
    const char *name;
    ts_plugin_key_type type;
    /* The default as text ("auto", "1", "gpipe"), checked against the type
     * at load; NULL makes the key required. */
    const char *def;
    /* INT and FLOAT: the inclusive range; min > max means none. */
    double min, max;
    /* ENUM: the words, "gpipe|1f1b". INT: "auto" lets the key be given as
     * auto (config_int then gives -1). NULL otherwise. */
    const char *choices;
    /* One line for `tessera plugins` and error messages; required. */
    const char *help;
} ts_plugin_key;

/* ===========================================================================
 * What a plugin registers
 * ======================================================================== */

/* An axis size that the core derives: the world divided by the product of
 * the other axes of the axis's mesh (at most one auto axis per mesh). */
#define TS_PLUGIN_AXIS_AUTO (-1)

/* Layout-transform phases, applied in this fixed order (then, within a
 * phase, in registration order: the order of `[parallel] plugins`, then the
 * order of register_transform calls inside one plugin). A phase marked
 * "owned" may hold the transforms of one plugin only: a second plugin
 * registering in it conflicts with the first (two plugins assigning pipeline
 * stages, or both sharding by tensor columns, cannot both be right). */
typedef enum ts_plugin_phase {
    TS_PHASE_PIPELINE = 0,        /* owned: assign layers to stages (pp)     */
    TS_PHASE_SHARD_TENSOR = 1,    /* owned: shard weights by heads, columns,
                                     rows (tp)                               */
    TS_PHASE_SHARD_SEQUENCE = 2,  /* owned: shard activations along the
                                     sequence (cp)                           */
    TS_PHASE_SHARD_EXPERT = 3,    /* owned: place experts (ep)               */
    TS_PHASE_SHARD_DATA = 4,      /* owned: replicate over data ranks (dp)   */
    TS_PHASE_SHARD_OPTIMIZER = 5, /* owned: shard optimizer state, grads,
                                     params along dp (zero)                  */
    TS_PHASE_ANNOTATE = 6,        /* shared: checks and annotations that
                                     read the finished placements            */
    TS_PHASE_COUNT = 7,
} ts_plugin_phase;

/* A layout transform.
 * Inputs:  ctx  — the registering plugin's context;
 *          plan — the model's layout plan: every parameter and activation
 *                 with global shape, placement per axis and pipeline stage,
 *                 as left by the earlier phases; edit it in place;
 *          user — the pointer given to register_transform.
 * Outputs: the edited plan. Do not add or remove entries' storage yourself
 *          (the plan's arrays belong to the core).
 * Failure: return an error set with host->error; the core stops applying
 *          transforms and fails start-up with "plugin 'tp': transform
 *          'shard_qkv' (phase SHARD_TENSOR): <your message>". */
typedef ts_status (*ts_plugin_transform_fn)(ts_plugin_ctx *ctx, ts_layout_plan *plan, void *user);

/* Hook kinds: points in a training step where the core calls plugins. */
typedef enum ts_plugin_hook_kind {
    TS_HOOK_GRAD_READY = 0,       /* one parameter's gradient is complete for
                                     this step (after the last micro-batch's
                                     backward touched it): start its
                                     reduction here to overlap compute       */
    TS_HOOK_BEFORE_FORWARD = 1,   /* before each micro-batch's forward       */
    TS_HOOK_AFTER_BACKWARD = 2,   /* after each micro-batch's backward       */
    TS_HOOK_BEFORE_OPTIMIZER = 3, /* all gradients ready, before clipping and
                                     the optimizer step (finish reductions)  */
    TS_HOOK_AFTER_OPTIMIZER = 4,  /* after the step (gather sharded params)  */
    TS_HOOK_COUNT = 5,
} ts_plugin_hook_kind;

/* What a hook is told. Fields are only appended; check struct_size before
 * reading a field added after ABI 1.0. */
typedef struct ts_plugin_hook_event {
    uint32_t struct_size; /* sizeof(ts_plugin_hook_event) of the core  */
    ts_plugin_hook_kind kind;
    int64_t step;      /* optimizer step, from 0                    */
    int micro_batch;   /* micro-batch in the step; -1 when none     */
    int micro_batches; /* micro-batches per step                    */
    ts_tensor *param;  /* GRAD_READY: the parameter; else NULL      */
    ts_tensor *grad;   /* GRAD_READY: its gradient, which the hook
                          may rewrite in place (e.g. all-reduce);
                          else NULL                                 */
    void *state;       /* the core's training state (opaque), NULL
                          when run outside a trainer                */
} ts_plugin_hook_event;

/* A hook.
 * Inputs:  ctx, the event (borrowed for the call; its tensors are the
 *          core's: edit their data, never free them), user.
 * Failure: return an error set with host->error. The core runs no further
 *          hook of this event, fails the step with "plugin 'dp': hook
 *          grad_ready: <message>" and, in a multi-rank run, ends the job. */
typedef ts_status (*ts_plugin_hook_fn)(ts_plugin_ctx *ctx, const ts_plugin_hook_event *event,
                                       void *user);

/* The question a scheduler answers: the actions of one rank for one step. */
typedef struct ts_plugin_schedule_args {
    uint32_t struct_size; /* sizeof(ts_plugin_schedule_args) of the core   */
    int stages;           /* pipeline stages (pp size)                     */
    int stage;            /* this rank's stage, 0 .. stages-1              */
    int micro_batches;    /* micro-batches per step                        */
    int chunks;           /* model chunks (virtual stages) per rank, >= 1  */
} ts_plugin_schedule_args;

/* Opaque: the schedule under construction, owned by the core. */
typedef struct ts_schedule ts_schedule;

/* Action kinds a scheduler appends (the values of the core's
 * ts_action_kind; see `tessera plan` for how they print). */
#define TS_PLUGIN_ACT_FORWARD 0        /* forward of (mb, chunk)            */
#define TS_PLUGIN_ACT_BACKWARD 1       /* backward of (mb, chunk)           */
#define TS_PLUGIN_ACT_SEND_ACT 2       /* send activations downstream       */
#define TS_PLUGIN_ACT_RECV_ACT 3       /* receive activations from upstream */
#define TS_PLUGIN_ACT_SEND_GRAD 4      /* send input gradient upstream      */
#define TS_PLUGIN_ACT_RECV_GRAD 5      /* receive output gradient           */
#define TS_PLUGIN_ACT_OPTIMIZER_STEP 6 /* the optimizer step (mb = -1)      */

/* A scheduler: a pure function of its arguments.
 * Inputs:  ctx, args (borrowed), out (an empty schedule owned by the core),
 *          user.
 * Outputs: the actions, appended in execution order with
 *          host->schedule_append(ctx, out, kind, mb, chunk, peer).
 * Failure: return an error set with host->error; the core discards `out`
 *          and fails with "plugin 'pp': scheduler '1f1b': <message>". */
typedef ts_status (*ts_plugin_scheduler_fn)(ts_plugin_ctx *ctx, const ts_plugin_schedule_args *args,
                                            ts_schedule *out, void *user);

/* A token dispatcher for mixture-of-experts layers (the ep plugin's default,
 * or a third party's). The core calls dispatch before the experts and
 * combine after them. `args` points to the MoE layer's argument block
 * (tokens, routing, expert buffers; defined with the MoE layer), borrowed for
 * the call. Fields are only appended; set struct_size to sizeof. */
typedef struct ts_plugin_dispatcher_ops {
    uint32_t struct_size; /* sizeof(ts_plugin_dispatcher_ops) of the plugin */
    /* Optional (NULL: no state). Called once before the first dispatch;
     * *state receives the plugin's per-layer state, handed back to every
     * call. Failure: the run fails at start-up naming the dispatcher. */
    ts_status (*create)(ts_plugin_ctx *ctx, void *user, void **state);
    /* Required. Sends every token to the ranks of its experts. Failure: the
     * step fails and, in a multi-rank run, the job ends. */
    ts_status (*dispatch)(ts_plugin_ctx *ctx, void *state, void *args);
    /* Required. Brings expert outputs back and weights them. Failure: as
     * dispatch. */
    ts_status (*combine)(ts_plugin_ctx *ctx, void *state, void *args);
    /* Optional. Frees what create made; never fails. */
    void (*destroy)(ts_plugin_ctx *ctx, void *state);
} ts_plugin_dispatcher_ops;

/* Log levels for host->log. */
typedef enum ts_plugin_log_level {
    TS_LOG_ERROR = 0,
    TS_LOG_WARN = 1,
    TS_LOG_INFO = 2,
    TS_LOG_DEBUG = 3,
} ts_plugin_log_level;

/* ===========================================================================
 * The host table: the core's services, handed to init. Function pointers
 * only, so a plugin links against nothing of tessera's. Every pointer is
 * non-NULL in a table whose struct_size covers it.
 * ======================================================================== */
typedef struct ts_host {
    uint32_t abi_version; /* the core's TS_PLUGIN_ABI_VERSION              */
    uint32_t struct_size; /* sizeof(ts_host) of the core                   */

    /* --- messages ------------------------------------------------------- */

    /* Prints "tessera: <name>: <message>" on stderr when `level` is at or
     * below the core's log level (INFO by default). Never fails. */
    void (*log)(ts_plugin_ctx *ctx, ts_plugin_log_level level, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
    /* Sets the core's last-error message and returns `code`, for
     * `return host->error(ctx, TS_ERR_CONFIG, "...")`. Say what is wrong and
     * where; the core adds the plugin's name and what it was doing (init,
     * which transform, which hook) when it reports the failure. */
    ts_status (*error)(ts_plugin_ctx *ctx, ts_status code, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));

    /* --- memory (the core's accounted allocator) ------------------------- */

    /* 64-byte aligned, zero-filled bytes counted under `cat`; NULL (with the
     * last error set) on failure. Free with mem_free, never with free(). */
    void *(*mem_alloc)(ts_mem_category cat, size_t bytes);
    void (*mem_free)(void *ptr);

    /* --- the plugin's own INI section ------------------------------------ */
    /* Each reads key `key` of [<name>]: the value given in the file or by
     * --set, else the declared default. The key must be one the plugin
     * declared; another key fails with TS_ERR_INVALID ("reads [hello] foo,
     * which it did not declare") and leaves *out unchanged. Strings are
     * owned by the core and live until fini returns. config_int gives -1
     * for "auto". config_has sets *out to 1 when the key was given. */
    ts_status (*config_int)(ts_plugin_ctx *ctx, const char *key, int64_t *out);
    ts_status (*config_float)(ts_plugin_ctx *ctx, const char *key, double *out);
    ts_status (*config_bool)(ts_plugin_ctx *ctx, const char *key, int *out);
    ts_status (*config_str)(ts_plugin_ctx *ctx, const char *key, const char **out);
    ts_status (*config_has)(ts_plugin_ctx *ctx, const char *key, int *out);
    /* Where the key was set, for messages: "run.ini:12 [tp] size",
     * "--set [tp] size" or "default [tp] size", written to buf (always
     * NUL-terminated when size > 0). Returns buf. */
    const char *(*config_where)(ts_plugin_ctx *ctx, const char *key, char *buf, int size);

    /* --- registration: only during init --------------------------------- */
    /* Each copies what it is given (the function and user pointers must stay
     * valid until fini). Called outside init, each fails with
     * TS_ERR_PLUGIN. On failure the message names both parties; init should
     * return the status at once (TS_TRY). Even if it does not, the core
     * remembers the first failed registration and fails the start-up with
     * its message after init returns. */

    /* Claims a mesh axis: name one of tp, cp, dp, pp (dense mesh; pp is in
     * both), ep, etp, edp (expert mesh); size >= 1 or TS_PLUGIN_AXIS_AUTO.
     * `mesh` must be the axis's mesh (either for pp). Fails when
     * another plugin (or this one) already claimed the axis. An axis no
     * plugin claims has size 1 (etp: tp's size; edp: derived). */
    ts_status (*register_axis)(ts_plugin_ctx *ctx, const char *name, int size, ts_mesh_kind mesh);
    /* Adds a layout transform in `phase`. `name` (unique among all plugins'
     * transforms) appears in messages and `tessera plugins`. Fails for a
     * name taken, a phase out of range, or an owned phase that another
     * plugin holds. */
    ts_status (*register_transform)(ts_plugin_ctx *ctx, const char *name, ts_plugin_phase phase,
                                    ts_plugin_transform_fn fn, void *user);
    /* Adds a hook; hooks of one kind run in registration order. */
    ts_status (*register_hook)(ts_plugin_ctx *ctx, ts_plugin_hook_kind kind, ts_plugin_hook_fn fn,
                               void *user);
    /* Adds a scheduler under `name` (e.g. "1f1b"), chosen by name by the
     * core's configuration. Fails for a name another scheduler has. */
    ts_status (*register_scheduler)(ts_plugin_ctx *ctx, const char *name, ts_plugin_scheduler_fn fn,
                                    void *user);
    /* Adds a dispatcher under `name` (e.g. "all_to_all"); `ops` is copied
     * (as much of it as ops->struct_size and the core know). Fails for a
     * name taken, or dispatch/combine NULL. */
    ts_status (*register_dispatcher)(ts_plugin_ctx *ctx, const char *name,
                                     const ts_plugin_dispatcher_ops *ops, void *user);

    /* --- schedules -------------------------------------------------------- */

    /* Appends one action (TS_PLUGIN_ACT_*) to a schedule being built by a
     * scheduler: micro-batch `mb` (-1 for the optimizer step), `chunk`, and
     * the pipeline rank `peer` of a send/recv (-1 otherwise). Fails with
     * TS_ERR_INVALID for a bad kind and TS_ERR_NOMEM. */
    ts_status (*schedule_append)(ts_plugin_ctx *ctx, ts_schedule *out, int kind, int mb, int chunk,
                                 int peer);

    /* --- communication ----------------------------------------------------- */

    /* The communicator of a mesh group token ("dp", "tp", "dp-cp", "world",
     * ...) of this rank, borrowed: never free it. NULL before the mesh
     * exists (always during init: ask from transforms, hooks, schedulers and
     * dispatchers) and for a token the core does not know. It carries the
     * model's tensors: with [train] device = cuda on several ranks it is an
     * NCCL communicator over device memory (ts_comm_backend says "nccl").
     * "host:TOKEN" ("host:dp", ...) names the same group for host memory
     * (MPI), for scalars a plugin reduces itself; "world" is host memory. */
    ts_comm *(*comm)(ts_plugin_ctx *ctx, const char *token);
    /* The operations of comm.h, with the same meaning and failures (see
     * there). A communication failure returned to the core ends the job. */
    int (*comm_rank)(const ts_comm *comm);
    int (*comm_size)(const ts_comm *comm);
    ts_status (*all_reduce)(ts_comm *comm, const void *send, void *recv, size_t count,
                            ts_dtype dtype, ts_reduce_op op);
    ts_status (*all_reduce_start)(ts_comm *comm, const void *send, void *recv, size_t count,
                                  ts_dtype dtype, ts_reduce_op op, ts_comm_request **req);
    ts_status (*all_gather)(ts_comm *comm, const void *send, void *recv, size_t count,
                            ts_dtype dtype);
    ts_status (*reduce_scatter)(ts_comm *comm, const void *send, void *recv, size_t count,
                                ts_dtype dtype, ts_reduce_op op);
    ts_status (*all_to_all)(ts_comm *comm, const void *send, void *recv, size_t count,
                            ts_dtype dtype);
    ts_status (*broadcast)(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int root);
    ts_status (*send)(ts_comm *comm, const void *buf, size_t count, ts_dtype dtype, int peer,
                      int tag);
    ts_status (*recv)(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int peer, int tag);
    ts_status (*barrier)(ts_comm *comm);
    ts_status (*wait)(ts_comm_request *req);
    /* Non-blocking forms (comm.h's _start functions) and a test that lets a
     * started operation progress: *done = 1 when it completed (the request
     * is then released), 0 when it is still running. */
    ts_status (*test)(ts_comm_request *req, int *done);
    ts_status (*all_gather_start)(ts_comm *comm, const void *send, void *recv, size_t count,
                                  ts_dtype dtype, ts_comm_request **req);
    ts_status (*reduce_scatter_start)(ts_comm *comm, const void *send, void *recv, size_t count,
                                      ts_dtype dtype, ts_reduce_op op, ts_comm_request **req);
    ts_status (*send_start)(ts_comm *comm, const void *buf, size_t count, ts_dtype dtype, int peer,
                            int tag, ts_comm_request **req);
    ts_status (*recv_start)(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int peer,
                            int tag, ts_comm_request **req);
    /* --- metrics ------------------------------------------------------------ */
    /* Reports a number for this step's metrics line: it appears as
     * "plugins":{"<name>":{"<key>":value}} in the JSONL metrics (the last
     * value given in the step wins; keys are cleared after every step).
     * At most 16 keys per plugin, each under 32 characters. Fails with
     * TS_ERR_INVALID beyond that. */
    ts_status (*metric)(ts_plugin_ctx *ctx, const char *key, double value);
    /* ABI 1.1 and later append here. */
} ts_host;

/* 1 if the host table `h` has field `field` (a plugin built against a newer
 * minor than the core it runs in cannot load, but one built against an older
 * one may check for newer fields this way). */
#define TS_HOST_HAS(h, field) ((h)->struct_size >= offsetof(ts_host, field) + sizeof((h)->field))

/* ===========================================================================
 * The descriptor
 * ======================================================================== */
typedef struct ts_plugin_descriptor {
    /* --- ABI 1.0: abi_version and struct_size stay first forever ---------- */
    uint32_t abi_version;      /* TS_PLUGIN_ABI_VERSION the plugin was built
                                  against                                   */
    uint32_t struct_size;      /* sizeof(ts_plugin_descriptor)              */
    const char *name;          /* must equal <name> of tessera-<name>.so    */
    const char *version;       /* the plugin's own version, "1.2.0"         */
    const char *description;   /* one line for `tessera plugins`, or NULL   */
    const ts_plugin_key *keys; /* the keys of [<name>], static; NULL if none */
    int nkeys;

    /* Required. Reads the plugin's keys and registers what it provides.
     * Inputs:  host — the host table; ctx — this plugin's context; both live
     *          until fini returns.
     * Failure: return an error set with host->error. The core calls no
     *          fini for this plugin (init must undo its own work) and drops
     *          what it registered, fails start-up with "plugin 'tp'
     *          (<path>): init failed: <message>", and at tear-down calls fini
     *          of the plugins initialised before it. */
    ts_status (*init)(const ts_host *host, ts_plugin_ctx *ctx);
    /* Optional (NULL: nothing to do). Releases what init made. Called once,
     * in reverse load order, only after a successful init. Cannot fail. */
    void (*fini)(const ts_host *host, ts_plugin_ctx *ctx);
    /* ABI 1.1 and later append here. */
} ts_plugin_descriptor;

/* The smallest struct_size the core accepts for ABI 1.x: through `fini`. */
#define TS_PLUGIN_DESCRIPTOR_SIZE_1_0                                                              \
    (offsetof(ts_plugin_descriptor, fini) + sizeof(void (*)(void)))

/* The entry point's type. It must return the same pointer every call, to a
 * descriptor that lives as long as the library (a static const). The core
 * calls it once per load; a NULL return is a load error. */
typedef const ts_plugin_descriptor *(*ts_plugin_entry_fn)(void);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_PLUGIN_H */
