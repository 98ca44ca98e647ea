/*
 * plugin.h — the plugin SDK: everything a parallel strategy (or a third-party
 * token dispatcher, hook, scheduler ...) needs to be built as a shared object
 * that tessera loads at start-up because the INI file names it.
 *
 * This header is part of the SDK installed under include/tessera/. A plugin
 * includes it alone (it brings the SDK's types, below) and links against
 * NOTHING of tessera's: every service of the core reaches it through the
 * host table (ts_host) handed to init, from ABI 1.3 grouped in sub-tables
 * by topic (host->comms, host->dev, host->kernels, host->reg,
 * host->config). The library's own functions (ts_error, ts_comm_all_reduce,
 * ...) are declared only by the other SDK headers, for programs that link
 * libtessera; a plugin calling one would be tied to one libtessera.so.
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
 *         TS_TRY(host->config->get_str(ctx, "greeting", &g));
 *         return host->reg->hook(ctx, TS_HOOK_BEFORE_FORWARD, hello_hook, NULL);
 *     }
 *     static const ts_plugin_descriptor hello_descriptor = {
 *         TS_PLUGIN_ABI_VERSION, sizeof(ts_plugin_descriptor),
 *         "hello", "0.1.0", "says hello before every forward pass",
 *         hello_keys, 1, hello_init, NULL, TS_PLUGIN_THREAD_LOCAL_STATE,
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
 * a time; the host functions may only be called from that thread. That is
 * the thread that ran the plugin's init: no helper thread of the core (the
 * asynchronous checkpoint writer writes bytes already copied out and calls
 * nothing of a plugin; the kernels' OpenMP threads run inside a host call)
 * ever calls a plugin. A plugin whose file-scope state is _Thread_local says
 * so with TS_PLUGIN_THREAD_LOCAL_STATE (the descriptor's flags, ABI 1.3):
 * then several trainers may use it at once, each on a thread of its own.
 *
 * What a plugin may include
 * -------------------------
 * This header, which brings the SDK's types (tessera/tessera_types.h,
 * comm_types.h, mesh_types.h, layout_types.h: status codes, tensors,
 * placements, layouts and the layout plan, with static inline helpers that
 * call nothing of the library). It declares no function of libtessera
 * (ctest sdk_plugin_headers_declare_no_library_function checks it); the
 * other SDK headers (tessera.h, comm.h, mesh.h, layout.h, device.h) declare
 * the library's functions for programs that link it, and a plugin has no
 * use for them.
 */
#ifndef TESSERA_PLUGIN_H
#define TESSERA_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

/* Types only: a plugin sees no function of libtessera (see "What a plugin
 * may include" above). */
#include "tessera/comm_types.h"    /* ts_comm, ts_comm_request, ts_reduce_op   */
#include "tessera/layout_types.h"  /* ts_layout, ts_layout_plan, placements     */
#include "tessera/mesh_types.h"    /* ts_mesh_kind, TS_MESH_NAME_MAX            */
#include "tessera/tessera_types.h" /* ts_status, TS_TRY, ts_tensor, ts_dtype    */

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
#define TS_PLUGIN_ABI_MINOR 3
#define TS_PLUGIN_ABI_MAKE(major, minor)                                                           \
    ((uint32_t)(((uint32_t)(major) << 16) | ((uint32_t)(minor)&0xffffu)))
/* The minor a plugin declares (its descriptor's abi_version): this header's
 * unless the plugin asks for an older one by defining TS_PLUGIN_TARGET_MINOR
 * before including it. A plugin targeting 1.0 loads in every 1.x core and
 * must not read host-table fields of later minors without TS_HOST_HAS. The
 * core's own version is TS_PLUGIN_ABI_MAJOR.TS_PLUGIN_ABI_MINOR. */
/* The descriptor's fields of ABI 1.3 (flags) are declared only when the
 * plugin asks for 1.3 or later by defining TS_PLUGIN_TARGET_MINOR: a source
 * written for 1.0-1.2, which initialises the descriptor field by field in
 * order, keeps compiling without a missing-initializer warning (it declares
 * the current minor and leaves flags 0). The core reads flags by offset,
 * only when the plugin's struct_size covers it. */
#ifdef TS_PLUGIN_TARGET_MINOR
#define TS_PLUGIN_DESCRIPTOR_MINOR TS_PLUGIN_TARGET_MINOR
#else
#define TS_PLUGIN_DESCRIPTOR_MINOR 2
#define TS_PLUGIN_TARGET_MINOR TS_PLUGIN_ABI_MINOR
#endif
#define TS_PLUGIN_ABI_VERSION TS_PLUGIN_ABI_MAKE(TS_PLUGIN_ABI_MAJOR, TS_PLUGIN_TARGET_MINOR)
#define TS_PLUGIN_ABI_CORE TS_PLUGIN_ABI_MAKE(TS_PLUGIN_ABI_MAJOR, TS_PLUGIN_ABI_MINOR)
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
 * order of register_transform calls inside one plugin). Two plugins may act
 * in one phase; they conflict when one changes a placement (a tensor over an
 * axis) that the other set — start-up stops naming both transforms. Only
 * PIPELINE holds the transforms of one plugin (stages are no placement: two
 * plugins assigning them cannot both be right). The phases marked "owned"
 * below were owned by one plugin before ABI 1.2.
 * A phase only orders the edits of the plan: what a placement does is the
 * core's rule or a provider's (the binder, docs/plugins.md), whatever phase
 * set it, and a placement nothing implements stops start-up. */
typedef enum ts_plugin_phase {
    TS_PHASE_PIPELINE = 0,        /* owned: assign layers to stages (pp)     */
    TS_PHASE_SHARD_TENSOR = 1,    /* owned: shard weights by heads, columns,
                                     rows (tp)                               */
    TS_PHASE_SHARD_SEQUENCE = 2,  /* owned: shard activations along the
                                     sequence (cp)                           */
    TS_PHASE_SHARD_EXPERT = 3,    /* owned: place experts (ep)               */
    TS_PHASE_SHARD_DATA = 4,      /* owned: replicate over data ranks (dp)   */
    TS_PHASE_SHARD_OPTIMIZER = 5, /* owned: parameters stored cut along the
                                     data axis (zero stage 3; bound by a
                                     PARAM_STORAGE provider). Optimizer
                                     state and gradients are cut by
                                     providers, not placements            */
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
    TS_HOOK_AFTER_OPTIMIZER = 4,  /* after the step (gather sharded params);
                                     the gradient of the optimizer's range
                                     now reads 0: it zeroes each element as
                                     it reads it, for the next step          */
    TS_HOOK_COUNT = 5,
} ts_plugin_hook_kind;

/* ===========================================================================
 * ABI 1.1: the model as plugins see it
 *
 * Valid from the first hook of a run (the model exists) until fini; every
 * pointer is the core's (borrowed, never freed by a plugin). Fields are only
 * appended; check struct_size before reading one added after 1.1.
 * ======================================================================== */

/* One parameter (the parameter view). */
typedef struct ts_plugin_param {
    uint32_t struct_size;           /* sizeof(ts_plugin_param) of the core          */
    const char *name;               /* "h.0.attn.qkv.weight"                        */
    const struct ts_layout *layout; /* its global shape and placements (the
                                   plan's entry after every transform)          */
    /* This rank's block as stored: in the flat parameter buffer (f32 or
     * bf16) and the flat gradient buffer (f32), `offset` elements in, of
     * the run's device. The optimizer updates exactly these. */
    ts_tensor *store;
    ts_tensor *store_grad;
    size_t offset;
    /* What the layers compute with: `store` itself, unless the parameter is
     * stored cut over an axis a plugin provides it whole on
     * (TS_PROVIDE_PARAM_STORAGE). Then `use` has the whole shape along that
     * axis and data NULL between modules: the provider points use->data and
     * use_grad->data at memory it owns (host->device_alloc) in a module's
     * BEFORE_FORWARD / BEFORE_BACKWARD hook, and after the backward folds
     * use_grad into store_grad (e.g. a reduce-scatter) and releases it. */
    ts_tensor *use;
    ts_tensor *use_grad;
    /* 1 when the stored block is cut over an axis whose provider presents it
     * whole (the bit of the axis in the layout's axis order). */
    unsigned provided;
    /* 1 for a copy of a parameter owned by a module on another pipeline
     * stage (GPT-2's LM head's wte): not counted twice by checkpoints or
     * norms. */
    int tied_copy;
} ts_plugin_param;

/* One module of the model (embedding, block, head ...). */
typedef struct ts_plugin_module {
    uint32_t struct_size;
    const char *name;               /* "embedding", "h.3", "head"     */
    int index;                      /* 0 .. modules - 1, model order  */
    int here;                       /* runs on this rank              */
    int nparams;                    /* the parameters it reads        */
    ts_plugin_param *const *params; /* (here only; NULL otherwise)    */
} ts_plugin_module;

/* The model on this rank. */
typedef struct ts_plugin_model {
    uint32_t struct_size;
    int nmodules;
    const ts_plugin_module *modules; /* every module, model order      */
    int nparams;
    ts_plugin_param *const *params; /* this rank's, flat-buffer order */
    size_t numel;                   /* elements of the flat buffers   */
    ts_dtype dtype;                 /* of the parameters (f32, bf16)  */
    ts_device device;               /* where the buffers live         */
} ts_plugin_model;

/* The training state hooks see (in place of ABI 1.0's opaque pointer). */
typedef struct ts_plugin_train_state {
    uint32_t struct_size;
    int64_t step;        /* optimizer steps completed                   */
    int64_t data_cursor; /* global data windows consumed                */
    uint64_t seed;
    float lr; /* the learning rate of the step in progress   */
    const ts_plugin_model *model;
} ts_plugin_train_state;

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
    void *state;       /* ABI 1.0: the core's training state, opaque;
                          read train_state instead                  */
    /* --- ABI 1.1 ---------------------------------------------------------- */
    const ts_plugin_train_state *train_state; /* NULL outside a trainer  */
    /* GRAD_READY: the parameter's view: param and grad above are its
     * store and store_grad (the gradient the optimizer reads, complete
     * for the step once every module-hook provider has folded its own
     * part in); read its layout to tell which axes still hold partial
     * sums. NULL for other kinds. */
    const ts_plugin_param *view;
} ts_plugin_hook_event;

/* ABI 1.1: per-module hooks, around each module's forward and backward of
 * each micro-batch, on the stage that runs the module. */
typedef enum ts_plugin_module_hook_kind {
    TS_MODULE_BEFORE_FORWARD = 0,
    TS_MODULE_AFTER_FORWARD = 1,
    TS_MODULE_BEFORE_BACKWARD = 2,
    TS_MODULE_AFTER_BACKWARD = 3, /* the module's parameter gradients of this
                                     micro-batch are in use_grad            */
    TS_MODULE_HOOK_COUNT = 4,
} ts_plugin_module_hook_kind;

typedef struct ts_plugin_module_event {
    uint32_t struct_size; /* sizeof(ts_plugin_module_event) of the core  */
    ts_plugin_module_hook_kind kind;
    int64_t step;
    int micro_batch, micro_batches;
    const ts_plugin_module *module; /* the module (its parameters)     */
    int last;                       /* AFTER_BACKWARD: 1 on the module's last backward of
                                       the step (its gradients are complete after it)   */
    const ts_plugin_train_state *train_state;
    /* Appended within ABI 1.1 (check struct_size): 1 on BEFORE_FORWARD and
     * AFTER_FORWARD of a forward run again inside the backward (activation
     * recomputation, [train] recompute = full): the module's parameters are
     * needed as in its first forward. Between its first forward and such a
     * recomputed one, the module's BEFORE_BACKWARD has not run; a module
     * recomputed alone, or last in its group, gets no forward hooks then:
     * its BEFORE_BACKWARD comes first and serves both. A provider that kept
     * the parameters since the first forward need not gather them again. */
    int recompute;
} ts_plugin_module_event;

/* A module hook.
 * Inputs:  ctx, the event (borrowed for the call), user.
 * Outputs: for a parameter provider, use->data / use_grad->data set (or
 *          cleared) as TS_PROVIDE_PARAM_STORAGE says.
 * Failure: return an error set with host->error; the step fails ("plugin
 *          'x': module hook before_forward of h.3: <message>") and, in a
 *          multi-rank run, the job ends. */
typedef ts_status (*ts_plugin_module_hook_fn)(ts_plugin_ctx *ctx,
                                              const ts_plugin_module_event *event, void *user);

/* ABI 1.1: what a plugin provides, so that the binder (docs/binder.md) can
 * accept placements the core's own rules do not implement. Each provision
 * is declared for one mesh axis with host->register_provider. */
typedef enum ts_plugin_provision {
    /* Sums the partial gradients of replicated parameters over the axis
     * (from GRAD_READY hooks on; complete by BEFORE_OPTIMIZER). Without a
     * provider the core sums them itself (one all-reduce of the flat
     * gradient buffer before the optimizer). */
    TS_PROVIDE_GRAD_REDUCTION = 0,
    /* Keeps parameters stored cut over the axis (their layout S(d) there)
     * and presents them whole to the layers with module hooks (see
     * ts_plugin_param.use). The gradient of such a parameter is complete in
     * store_grad after the provider's AFTER_BACKWARD hook: it reduces it
     * over the axis itself. */
    TS_PROVIDE_PARAM_STORAGE = 1,
    /* Keeps the optimizer state cut over the axis
     * (host->register_optimizer_state). */
    TS_PROVIDE_OPTIMIZER_STATE = 2,
    /* Computes attention when the axis cuts every sequence
     * (host->register_attention). */
    TS_PROVIDE_ATTENTION = 3,
    /* Routes the mixture-of-experts layers' rows over the axis, whose ranks
     * hold different experts (expert weights S(0) over it), with a
     * dispatcher chosen by name (host->register_experts). */
    TS_PROVIDE_EXPERTS = 4,
    TS_PROVIDE_COUNT = 5,
    /* OR-ed into `what` of register_provider: a default, provided unless
     * another plugin provides the same on the axis (which then takes it
     * over, whatever the load order). A plugin that registers a default asks
     * host->provider (from its first transform on) whether it is still the
     * provider before acting: dp's gradient reduction is one, which zero
     * takes over. */
    TS_PROVIDE_DEFAULT = 0x100,
} ts_plugin_provision;

/* ABI 1.1: attention over sequences cut along an axis (context
 * parallelism). The core calls forward in place of its attention when the
 * axis the provider registered for cuts data.tokens along the sequence, and
 * backward in its backward. Buffers are the run's device's. */
typedef struct ts_plugin_attention_args {
    uint32_t struct_size;
    int micro_batch;
    int B, T, T_local; /* sequences; tokens per sequence; this rank's rows */
    int C, NH;         /* attention width and heads on this rank          */
    /* Position in the sequence of each of this rank's rows (host, T_local
     * entries, increasing; in runs of consecutive positions, one run for
     * CONTIGUOUS, two for MIRRORED): the causal mask compares positions. */
    const int32_t *positions;
    const float *qkv;  /* (B, T_local, 3C): q, k, v blocks, heads contiguous */
    float *out;        /* forward: (B, T_local, C), written (=)            */
    const float *dout; /* backward: (B, T_local, C)                        */
    float *dqkv;       /* backward: (B, T_local, 3C), accumulated (+=)     */
    /* The provider's state for this micro-batch: forward stores what it
     * allocates (host->device_alloc), backward reads and frees it. */
    void **saved;
    ts_comm *comm; /* the axis's group, device tensors                  */
    int bf16;      /* the model's bf16 mode: round as the core does      */
    /* Appended within ABI 1.1 (check struct_size): 1 when the run sends the
     * gradients of activations in bf16 ([train] partial_dtype = bf16): the
     * provider may exchange its gradients in two bytes, rounded. */
    int grads_bf16;
} ts_plugin_attention_args;

/* Which rows of every sequence a rank of the axis holds (the provider's
 * choice; the core reads the data, the positions and the hidden state in
 * that order). With n ranks on the axis:
 *   CONTIGUOUS  rank i holds part i of n (the layout rule, S(1));
 *   MIRRORED    the sequence is cut in 2n chunks and rank i holds chunks i
 *               and 2n-1-i, in that order, so that every rank has the same
 *               causal attention work (Megatron-LM's and Transformer
 *               Engine's load balancing); seq_len must divide by 2n. */
typedef enum ts_plugin_sequence_order {
    TS_SEQUENCE_CONTIGUOUS = 0,
    TS_SEQUENCE_MIRRORED = 1,
} ts_plugin_sequence_order;

typedef struct ts_plugin_attention_ops {
    uint32_t struct_size; /* sizeof(ts_plugin_attention_ops) of the plugin */
    /* Required, both. Failure: the step fails (the job ends). */
    ts_status (*forward)(ts_plugin_ctx *ctx, ts_plugin_attention_args *args, void *user);
    ts_status (*backward)(ts_plugin_ctx *ctx, ts_plugin_attention_args *args, void *user);
    /* A ts_plugin_sequence_order (absent in an older plugin: CONTIGUOUS). */
    int order;
    /* Appended within ABI 1.1 (check struct_size); optional. Frees the
     * state forward stored in *args->saved (and sets it NULL) without a
     * backward: the core calls it when activation recomputation ([train]
     * recompute = selective or full) drops the attention's state after a
     * forward, then calls forward again before the backward (which reads
     * and frees that state as always), and when a forward-only pass ends.
     * Only args->saved, micro_batch and comm are meaningful. Called with
     * *args->saved NULL, it does nothing. Absent: recompute is refused
     * at start-up, naming the plugin. */
    void (*release)(ts_plugin_ctx *ctx, ts_plugin_attention_args *args, void *user);
} ts_plugin_attention_ops;

/* ABI 1.1: optimizer state cut over an axis (ZeRO-1 style). The core's
 * AdamW keeps master weights and moments only for this rank's range of the
 * flat buffers and updates only that range; the provider then makes the
 * parameters whole again. The gradient need only be complete in the range:
 * the global gradient norm sums each rank's range. A provider whose ranges
 * are the whole buffer on every rank cuts nothing (it may still offload). */
typedef struct ts_plugin_optimizer_state_ops {
    uint32_t struct_size;
    /* Required. This rank's range [*begin, *end) of the `numel` elements of
     * the flat buffers (called once, when the optimizer is built). */
    ts_status (*partition)(ts_plugin_ctx *ctx, size_t numel, size_t *begin, size_t *end,
                           void *user);
    /* Required. After each applied update of this rank's range: bring every
     * rank's updated range into the whole flat parameter buffer `params`
     * (`numel` elements of `dtype`, the run's device). Failure: the step
     * fails. */
    ts_status (*after_step)(ts_plugin_ctx *ctx, void *params, ts_dtype dtype, size_t numel,
                            void *user);
    /* Optional: TS_OPTIMIZER_STATE_* bits (0: none). */
    uint32_t flags;
} ts_plugin_optimizer_state_ops;

/* The optimizer state (master weights, moments) and its update live in host
 * memory while the model trains on a GPU: each step the core copies the
 * gradient range down and the updated parameter range up. Refused on a CPU
 * run (nothing to offload from). */
#define TS_OPTIMIZER_STATE_OFFLOAD 1u

/* A hook (ABI 1.0).
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
/* Appended within ABI 1.1: the backward of (mb, chunk) in two parts
 * (zero-bubble schedules, Qi et al. 2023). BACKWARD_INPUT computes the
 * gradient of the chunk's input (what SEND_GRAD sends) and the parameter
 * gradients that cost no GEMM (biases, LayerNorms, embeddings), keeping what
 * the weight gradients of its matrix products need; BACKWARD_WEIGHT later
 * computes those, the same bits as BACKWARD would, and only then are the
 * chunk's module hooks AFTER_BACKWARD and gradient-ready hooks run. Every
 * BACKWARD_INPUT of a (mb, chunk) needs its BACKWARD_WEIGHT on the same
 * rank; BACKWARD is both at once. */
#define TS_PLUGIN_ACT_BACKWARD_INPUT 7  /* B: the input gradient of (mb, chunk) */
#define TS_PLUGIN_ACT_BACKWARD_WEIGHT 8 /* W: its deferred weight gradients      */

/* Appended within ABI 1.1: where virtual pipeline stages live. With p
 * pipeline ranks and v chunks per rank, virtual stage k (activations flow
 * from k to k + 1) is chunk c = k / p of
 *   INTERLEAVED  rank k % p (Megatron-LM's interleaving; with v = 1 the
 *                stage is the rank), the default;
 *   V            rank k % p for even c and p - 1 - k % p for odd c: with
 *                v = 2 the first and the last virtual stage are on rank 0
 *                and the pipeline turns back at rank p - 1 (ZB-V).
 * A pipeline plugin sets it once, during init (host->set_stage_order). */
typedef enum ts_plugin_stage_order {
    TS_STAGES_INTERLEAVED = 0,
    TS_STAGES_V = 1,
} ts_plugin_stage_order;

/* The rank of virtual stage k, and the virtual stage of (rank, chunk). */
static inline int ts_stage_rank(int order, int p, int k) {
    int c = k / p, r = k % p;
    return order == TS_STAGES_V && c % 2 ? p - 1 - r : r;
}
static inline int ts_stage_virtual(int order, int p, int rank, int chunk) {
    return chunk * p + (order == TS_STAGES_V && chunk % 2 ? p - 1 - rank : rank);
}

/* A scheduler: a pure function of its arguments.
 * Inputs:  ctx, args (borrowed), out (an empty schedule owned by the core),
 *          user.
 * Outputs: the actions, appended in execution order with
 *          host->schedule_append(ctx, out, kind, mb, chunk, peer).
 * Failure: return an error set with host->error; the core discards `out`
 *          and fails with "plugin 'pp': scheduler '1f1b': <message>". */
typedef ts_status (*ts_plugin_scheduler_fn)(ts_plugin_ctx *ctx, const ts_plugin_schedule_args *args,
                                            ts_schedule *out, void *user);

/* What a token dispatcher moves (ABI 1.1; `args` of dispatch and combine
 * points to it). A dispatch routes `nrows` rows to the ranks of their
 * experts: row r's data is src[src_index[r]] (rows of the same source share
 * it, so a dispatcher may send it once per rank and fan it out there), its
 * expert dest[r] (-1: dropped, sent nowhere). The MoE layer routes one row
 * per (token, chosen expert) forward, and gradients backward. Device
 * buffers are the run's device's; host arrays are marked so. */
typedef struct ts_plugin_dispatch_args {
    uint32_t struct_size; /* sizeof(ts_plugin_dispatch_args) of the core */
    int experts;          /* E over every rank of `comm`                 */
    int local_experts;    /* on this rank: [first_expert, + local)       */
    int first_expert;
    int hidden;         /* C: floats per row                           */
    ts_comm *comm;      /* the expert-parallel group, device tensors   */
    ts_comm *host_comm; /* the same group, host memory (counts)        */
    /* --- dispatch: in ------------------------------------------------------ */
    int nrows;
    const int32_t *dest;      /* (nrows) host: expert of each row, or -1 */
    const int32_t *src_index; /* (nrows) host: its row in src            */
    const float *src;         /* (nsrc, C) device                        */
    int nsrc;
    /* --- dispatch: out ----------------------------------------------------- */
    /* The rows received, grouped by local expert in expert order (within
     * an expert in order of source rank, then of row): (expert_nrows, C)
     * device memory the dispatcher owns until its next dispatch or destroy. */
    float *expert_rows;
    int64_t expert_nrows;
    int64_t *expert_counts; /* (local_experts) host, the caller's: rows of each */
    /* --- combine: in and out ----------------------------------------------- */
    const float *expert_rows_in; /* (expert_nrows, C) device, dispatch's order */
    float *rows_out;             /* (nrows, C) device, the caller's: row r's data back
                                    (=); 0 for a dropped row                       */
    /* --- both: out --------------------------------------------------------- */
    int64_t bytes_sent; /* bytes of row data this rank sent (metrics)  */
    /* --- dispatch: the router's weights ------------------------------------ */
    /* In: (nrows) host, row r's routing probability; NULL when the layer
     * applies the weights itself after combine. */
    const float *probs;
    /* Out, when probs is given: (expert_nrows) host, the probability of
     * each row of expert_rows in the same order, so that the experts can
     * weight their outputs (the dispatcher's memory until its next dispatch
     * or destroy). */
    float *expert_probs;
    /* --- appended within ABI 1.1: check struct_size ----------------------- */
    /* In, dispatch and combine: 1 when the rows may travel in two bytes
     * (host->device_convert; expert_rows and rows_out stay f32): in a bf16
     * run's forward dispatch, where every value of src is a bf16 value (so
     * they arrive exact), and with [train] partial_dtype = bf16 in every
     * call (the experts' outputs and the gradients are then rounded on the
     * way). 0: f32. */
    int rows_bf16;
} ts_plugin_dispatch_args;

/* A token dispatcher for mixture-of-experts layers (the ep plugin's default,
 * or a third party's). dispatch sends rows (and their routing
 * probabilities, when given) to the ranks of their experts, combine brings
 * each row's expert output back as it is: weighting is the layer's, on the
 * expert side (expert_probs) or after combine (args:
 * ts_plugin_dispatch_args, borrowed for the call; ABI 1.0 declared it
 * void *). A combine follows the dispatch whose routing it reverses, with
 * the same args block. Fields are only appended; set struct_size to
 * sizeof. */
typedef struct ts_plugin_dispatcher_ops {
    uint32_t struct_size; /* sizeof(ts_plugin_dispatcher_ops) of the plugin */
    /* Optional (NULL: no state). Called once before the first dispatch;
     * *state receives the plugin's per-layer state, handed back to every
     * call. Failure: the run fails at start-up naming the dispatcher. */
    ts_status (*create)(ts_plugin_ctx *ctx, void *user, void **state);
    /* Required. Sends every token to the ranks of its experts. Failure: the
     * step fails and, in a multi-rank run, the job ends. */
    ts_status (*dispatch)(ts_plugin_ctx *ctx, void *state, void *args);
    /* Required. Brings the expert outputs back, row by row. Failure: as
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

/* ABI 1.2: an axis a plugin claims (host->register_axis_spec). */
typedef struct ts_plugin_axis_spec {
    uint32_t struct_size; /* sizeof(ts_plugin_axis_spec)                   */
    const char *name;     /* [a-z][a-z0-9_]*, under TS_MESH_NAME_MAX bytes;
                             a standard name (tp, cp, dp, pp, ep, etp, edp)
                             keeps its standard place                      */
    int size;             /* >= 1 or TS_PLUGIN_AXIS_AUTO (world / the other
                             axes of its mesh; one auto axis per mesh)     */
    ts_mesh_kind mesh;    /* dense or expert; a new axis of the dense mesh
                             has size 1 in the expert one and the reverse   */
    const char *before;   /* its place in the default order: just before
                             the axis of this name (NULL: just before the
                             pipeline's, i.e. after the others)            */
    int cuts_batch;       /* 1: its ranks read different sequences, so it
                             counts in the data-parallel width: the global
                             batch is micro_batch x (the product of such
                             axes) x the micro-batches                     */
} ts_plugin_axis_spec;

/* ===========================================================================
 * ABI 1.3: the host's services in sub-tables by topic
 *
 * ts_host points (from ABI 1.3, at its end) at one const table per topic:
 *     host->comms    communicators and their operations   ts_host_comms
 *     host->dev      memory of the run's device           ts_host_device
 *     host->kernels  the core's attention kernels          ts_host_kernels
 *     host->reg      registration, during init only       ts_host_registration
 *     host->config   the plugin's own INI keys             ts_host_config
 * Messages (log, error), the accounted allocator (mem_alloc, mem_free),
 * metric, model, provider and schedule_append stay top-level fields of
 * ts_host itself, the same at every minor. Each sub-table holds the very
 * function pointers of its flat twins earlier in ts_host (host->comms->
 * all_reduce == host->all_reduce), with the meaning, inputs and failures
 * documented at the flat field; a plugin of ABI 1.3 reads the sub-tables,
 * one of 1.0-1.2 keeps reading the flat fields, which stay where they are.
 * Each table starts with its own struct_size (the core's sizeof) and grows
 * only at its end: check a field appended later with TS_COMMS_HAS(t, field)
 * and its kin. The tables are the core's, static, and live as long as the
 * host table; every pointer a table's struct_size covers is non-NULL.
 * ======================================================================== */

/* host->comms: "host->comms->all_reduce(host->comms->get(ctx, "dp"), ...)". */
typedef struct ts_host_comms {
    uint32_t struct_size; /* sizeof(ts_host_comms) of the core */
    /* host->comm: the communicator of a mesh group token, or NULL. */
    ts_comm *(*get)(ts_plugin_ctx *ctx, const char *token);
    int (*rank)(const ts_comm *comm); /* host->comm_rank */
    int (*size)(const ts_comm *comm); /* host->comm_size */
    ts_status (*all_reduce)(ts_comm *comm, const void *send, void *recv, size_t count,
                            ts_dtype dtype, ts_reduce_op op);
    ts_status (*all_reduce_start)(ts_comm *comm, const void *send, void *recv, size_t count,
                                  ts_dtype dtype, ts_reduce_op op, ts_comm_request **req);
    ts_status (*all_gather)(ts_comm *comm, const void *send, void *recv, size_t count,
                            ts_dtype dtype);
    ts_status (*all_gather_start)(ts_comm *comm, const void *send, void *recv, size_t count,
                                  ts_dtype dtype, ts_comm_request **req);
    ts_status (*all_gatherv)(ts_comm *comm, const void *send, void *recv, const size_t *counts,
                             ts_dtype dtype);
    ts_status (*all_gatherv_start)(ts_comm *comm, const void *send, void *recv,
                                   const size_t *counts, ts_dtype dtype, ts_comm_request **req);
    ts_status (*reduce_scatter)(ts_comm *comm, const void *send, void *recv, size_t count,
                                ts_dtype dtype, ts_reduce_op op);
    ts_status (*reduce_scatter_start)(ts_comm *comm, const void *send, void *recv, size_t count,
                                      ts_dtype dtype, ts_reduce_op op, ts_comm_request **req);
    ts_status (*reduce_scatter_v)(ts_comm *comm, const void *send, void *recv, const size_t *counts,
                                  ts_dtype dtype, ts_reduce_op op);
    ts_status (*reduce_scatter_v_start)(ts_comm *comm, const void *send, void *recv,
                                        const size_t *counts, ts_dtype dtype, ts_reduce_op op,
                                        ts_comm_request **req);
    ts_status (*all_to_all)(ts_comm *comm, const void *send, void *recv, size_t count,
                            ts_dtype dtype);
    ts_status (*all_to_all_start)(ts_comm *comm, const void *send, void *recv, size_t count,
                                  ts_dtype dtype, ts_comm_request **req);
    ts_status (*all_to_allv)(ts_comm *comm, const void *send, const size_t *send_counts,
                             const size_t *send_displs, void *recv, const size_t *recv_counts,
                             const size_t *recv_displs, ts_dtype dtype);
    ts_status (*all_to_allv_start)(ts_comm *comm, const void *send, const size_t *send_counts,
                                   const size_t *send_displs, void *recv, const size_t *recv_counts,
                                   const size_t *recv_displs, ts_dtype dtype,
                                   ts_comm_request **req);
    ts_status (*broadcast)(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int root);
    ts_status (*send)(ts_comm *comm, const void *buf, size_t count, ts_dtype dtype, int peer,
                      int tag);
    ts_status (*send_start)(ts_comm *comm, const void *buf, size_t count, ts_dtype dtype, int peer,
                            int tag, ts_comm_request **req);
    ts_status (*recv)(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int peer, int tag);
    ts_status (*recv_start)(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int peer,
                            int tag, ts_comm_request **req);
    ts_status (*barrier)(ts_comm *comm);
    ts_status (*wait)(ts_comm_request *req);
    ts_status (*test)(ts_comm_request *req, int *done);
    /* Which block of a group a rank holds, and moving blocks between
     * placements (host->layout_local_block, layout_coords, redistribute). */
    ts_status (*layout_local_block)(const struct ts_layout *l, const int *coords, int64_t *offset,
                                    int64_t *shape);
    ts_status (*layout_coords)(ts_plugin_ctx *ctx, const struct ts_layout *l, int *coords);
    ts_status (*redistribute)(const struct ts_layout *from, const struct ts_layout *to, int axis,
                              ts_comm *axis_comm, const int *coords, const ts_tensor *in,
                              ts_tensor *out);
} ts_host_comms;

/* host->dev: the run's device memory (host->device_*), e.g.
 * "float *buf = host->dev->alloc(ctx, TS_MEM_COMM, bytes)". */
typedef struct ts_host_device {
    uint32_t struct_size; /* sizeof(ts_host_device) of the core */
    void *(*alloc)(ts_plugin_ctx *ctx, ts_mem_category cat, size_t bytes);
    void (*free)(ts_plugin_ctx *ctx, void *ptr);
    ts_status (*copy)(ts_plugin_ctx *ctx, void *dst, const void *src, size_t bytes);
    ts_status (*copy_2d)(ts_plugin_ctx *ctx, void *dst, size_t dpitch, const void *src,
                         size_t spitch, size_t width, size_t rows);
    ts_status (*to_host)(ts_plugin_ctx *ctx, void *host, const void *src, size_t bytes);
    ts_status (*from_host)(ts_plugin_ctx *ctx, void *dst, const void *host, size_t bytes);
    ts_status (*zero)(ts_plugin_ctx *ctx, void *ptr, size_t bytes);
    ts_status (*add)(ts_plugin_ctx *ctx, float *y, const float *x, size_t n);
    ts_status (*convert)(ts_plugin_ctx *ctx, void *dst, ts_dtype dst_dtype, const void *src,
                         ts_dtype src_dtype, size_t n);
    void *(*stream)(ts_plugin_ctx *ctx);
} ts_host_device;

/* host->kernels: the core's attention, whole (host->attention_*) and by
 * blocks of queries and keys (host->attention_block_*). */
typedef struct ts_host_kernels {
    uint32_t struct_size; /* sizeof(ts_host_kernels) of the core */
    ts_status (*attention_floats)(ts_plugin_ctx *ctx, int B, int T, int NH, size_t *saved,
                                  size_t *scratch);
    ts_status (*attention_forward)(ts_plugin_ctx *ctx, float *out, float *saved, const float *qkv,
                                   int B, int T, int C, int NH, int bf16);
    ts_status (*attention_backward)(ts_plugin_ctx *ctx, float *dqkv, float *scratch,
                                    const float *dout, const float *qkv, const float *out,
                                    const float *saved, int B, int T, int C, int NH, int bf16);
    ts_status (*attention_block_forward)(ts_plugin_ctx *ctx, float *out, float *lse, const float *q,
                                         const float *k, const float *v, int B, int Tq, int Tk,
                                         int C, int NH, int qs, int kvs, int os, int64_t offset);
    ts_status (*attention_block_merge)(ts_plugin_ctx *ctx, float *out, float *lse,
                                       const float *out2, const float *lse2, int B, int Tq, int C,
                                       int NH, int os);
    ts_status (*attention_block_backward)(ts_plugin_ctx *ctx, float *dq, float *dk, float *dv,
                                          const float *q, const float *k, const float *v,
                                          const float *out, const float *dout, const float *lse,
                                          int B, int Tq, int Tk, int C, int NH, int qs, int kvs,
                                          int os, int64_t offset);
} ts_host_kernels;

/* host->reg: what a plugin registers, during init only (the flat
 * register_* fields and set_stage_order), e.g.
 * "TS_TRY(host->reg->hook(ctx, TS_HOOK_GRAD_READY, dp_grad_ready, NULL))". */
typedef struct ts_host_registration {
    uint32_t struct_size; /* sizeof(ts_host_registration) of the core */
    ts_status (*axis)(ts_plugin_ctx *ctx, const char *name, int size, ts_mesh_kind mesh);
    ts_status (*axis_spec)(ts_plugin_ctx *ctx, const ts_plugin_axis_spec *spec);
    ts_status (*transform)(ts_plugin_ctx *ctx, const char *name, ts_plugin_phase phase,
                           ts_plugin_transform_fn fn, void *user);
    ts_status (*hook)(ts_plugin_ctx *ctx, ts_plugin_hook_kind kind, ts_plugin_hook_fn fn,
                      void *user);
    ts_status (*module_hook)(ts_plugin_ctx *ctx, ts_plugin_module_hook_kind kind,
                             ts_plugin_module_hook_fn fn, void *user);
    ts_status (*scheduler)(ts_plugin_ctx *ctx, const char *name, ts_plugin_scheduler_fn fn,
                           void *user);
    ts_status (*dispatcher)(ts_plugin_ctx *ctx, const char *name,
                            const ts_plugin_dispatcher_ops *ops, void *user);
    ts_status (*provider)(ts_plugin_ctx *ctx, ts_plugin_provision what, const char *axis);
    ts_status (*attention)(ts_plugin_ctx *ctx, const char *axis, const ts_plugin_attention_ops *ops,
                           void *user);
    ts_status (*optimizer_state)(ts_plugin_ctx *ctx, const char *axis,
                                 const ts_plugin_optimizer_state_ops *ops, void *user);
    ts_status (*experts)(ts_plugin_ctx *ctx, const char *axis, const char *dispatcher);
    ts_status (*stage_order)(ts_plugin_ctx *ctx, int order);
} ts_host_registration;

/* host->config: the plugin's keys (host->config_int ... config_where), e.g.
 * "TS_TRY(host->config->get_int(ctx, "size", &size))". */
typedef struct ts_host_config {
    uint32_t struct_size; /* sizeof(ts_host_config) of the core */
    ts_status (*get_int)(ts_plugin_ctx *ctx, const char *key, int64_t *out);
    ts_status (*get_float)(ts_plugin_ctx *ctx, const char *key, double *out);
    ts_status (*get_bool)(ts_plugin_ctx *ctx, const char *key, int *out);
    ts_status (*get_str)(ts_plugin_ctx *ctx, const char *key, const char **out);
    ts_status (*has)(ts_plugin_ctx *ctx, const char *key, int *out);
    const char *(*where)(ts_plugin_ctx *ctx, const char *key, char *buf, int size);
} ts_host_config;

/* 1 if sub-table `t` has field `field` (one appended after the table's first
 * minor, 1.3, in a core of a later minor). */
#define TS_TABLE_HAS_(type, t, field)                                                              \
    ((t) && (t)->struct_size >= offsetof(type, field) + sizeof((t)->field))
#define TS_COMMS_HAS(t, field) TS_TABLE_HAS_(ts_host_comms, t, field)
#define TS_DEVICE_HAS(t, field) TS_TABLE_HAS_(ts_host_device, t, field)
#define TS_KERNELS_HAS(t, field) TS_TABLE_HAS_(ts_host_kernels, t, field)
#define TS_REGISTRATION_HAS(t, field) TS_TABLE_HAS_(ts_host_registration, t, field)
#define TS_CONFIG_HAS(t, field) TS_TABLE_HAS_(ts_host_config, t, field)

/* ===========================================================================
 * The host table: the core's services, handed to init. Function pointers
 * only, so a plugin links against nothing of tessera's. Every pointer is
 * non-NULL in a table whose struct_size covers it.
 *
 * Its fields through register_axis_spec are those of ABI 1.0-1.2, in the
 * order they were appended; they stay at their offsets forever. From ABI
 * 1.3 the same functions are grouped in the sub-tables at the end (comms,
 * dev, kernels, reg, config: "ABI 1.3" above), which a plugin of 1.3 uses;
 * the flat fields other than the top-level services (log, error,
 * mem_alloc, mem_free, metric, model, provider, schedule_append) are the
 * flat form kept for plugins of ABI 1.0-1.2, documented here.
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

    /* Claims a mesh axis: a standard one — tp, cp, dp, pp (dense mesh; pp
     * is in both), ep, etp, edp (expert mesh) — or, from ABI 1.2, a name
     * of the plugin's own ([a-z][a-z0-9_]*), placed just before the
     * pipeline in the default order (register_axis_spec chooses the place);
     * size >= 1 or TS_PLUGIN_AXIS_AUTO. `mesh` must be a standard axis's
     * mesh (either for pp). Fails when another plugin (or this one) already
     * claimed the axis. A standard axis no plugin claims has size 1 (etp:
     * tp's size; edp: derived). */
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

    /* --- ABI 1.1: more of comm.h ------------------------------------------- */
    ts_status (*all_to_all_start)(ts_comm *comm, const void *send, void *recv, size_t count,
                                  ts_dtype dtype, ts_comm_request **req);
    /* counts[r]: rank r's block, packed in rank order in recv. */
    ts_status (*all_gatherv)(ts_comm *comm, const void *send, void *recv, const size_t *counts,
                             ts_dtype dtype);
    ts_status (*all_gatherv_start)(ts_comm *comm, const void *send, void *recv,
                                   const size_t *counts, ts_dtype dtype, ts_comm_request **req);
    ts_status (*reduce_scatter_v)(ts_comm *comm, const void *send, void *recv, const size_t *counts,
                                  ts_dtype dtype, ts_reduce_op op);
    ts_status (*reduce_scatter_v_start)(ts_comm *comm, const void *send, void *recv,
                                        const size_t *counts, ts_dtype dtype, ts_reduce_op op,
                                        ts_comm_request **req);
    ts_status (*all_to_allv)(ts_comm *comm, const void *send, const size_t *send_counts,
                             const size_t *send_displs, void *recv, const size_t *recv_counts,
                             const size_t *recv_displs, ts_dtype dtype);
    ts_status (*all_to_allv_start)(ts_comm *comm, const void *send, const size_t *send_counts,
                                   const size_t *send_displs, void *recv, const size_t *recv_counts,
                                   const size_t *recv_displs, ts_dtype dtype,
                                   ts_comm_request **req);

    /* --- ABI 1.1: layouts (layout.h) --------------------------------------- */
    /* This rank's block of a layout (ts_layout_local_block). */
    ts_status (*layout_local_block)(const struct ts_layout *l, const int *coords, int64_t *offset,
                                    int64_t *shape);
    /* ts_layout_local_block's coordinates of this rank for `l`: its
     * coordinate on each of the layout's axes (0 for an axis the mesh does
     * not have). Fails before the mesh exists. */
    ts_status (*layout_coords)(ts_plugin_ctx *ctx, const struct ts_layout *l, int *coords);
    /* ts_redistribute: one axis's placement change of a HOST tensor, over a
     * host communicator ("host:TOKEN"). Device tensors: use the collectives
     * above on a device communicator. */
    ts_status (*redistribute)(const struct ts_layout *from, const struct ts_layout *to, int axis,
                              ts_comm *axis_comm, const int *coords, const ts_tensor *in,
                              ts_tensor *out);

    /* --- ABI 1.1: memory of the run's device ------------------------------- */
    /* The device the model lives on ([train] device): the CPU's accounted
     * allocator on a CPU run, the GPU's on a CUDA run. Blocks are counted
     * under `cat`; free with device_free. NULL (with the error set) before
     * the trainer opens the device, or on failure. */
    void *(*device_alloc)(ts_plugin_ctx *ctx, ts_mem_category cat, size_t bytes);
    void (*device_free)(ts_plugin_ctx *ctx, void *ptr);
    /* Device to device, device to host, host to device; zero; y += x (f32).
     * Each is ordered with the model's kernels (on a GPU: its stream). */
    ts_status (*device_copy)(ts_plugin_ctx *ctx, void *dst, const void *src, size_t bytes);
    ts_status (*device_to_host)(ts_plugin_ctx *ctx, void *host, const void *src, size_t bytes);
    ts_status (*device_from_host)(ts_plugin_ctx *ctx, void *dst, const void *host, size_t bytes);
    ts_status (*device_zero)(ts_plugin_ctx *ctx, void *ptr, size_t bytes);
    ts_status (*device_add)(ts_plugin_ctx *ctx, float *y, const float *x, size_t n);
    /* The model's compute stream (cudaStream_t) on a GPU; NULL on the CPU. */
    void *(*device_stream)(ts_plugin_ctx *ctx);

    /* --- ABI 1.1: the model's attention kernel (for attention providers) --- */
    /* The core's causal attention of whole sequences (B, T) on the run's
     * device: out (B, T, C) from qkv (B, T, 3C) and its backward, with the
     * saved state and scratch sized by attention_floats (saved, scratch). */
    ts_status (*attention_floats)(ts_plugin_ctx *ctx, int B, int T, int NH, size_t *saved,
                                  size_t *scratch);
    ts_status (*attention_forward)(ts_plugin_ctx *ctx, float *out, float *saved, const float *qkv,
                                   int B, int T, int C, int NH, int bf16);
    ts_status (*attention_backward)(ts_plugin_ctx *ctx, float *dqkv, float *scratch,
                                    const float *dout, const float *qkv, const float *out,
                                    const float *saved, int B, int T, int C, int NH, int bf16);

    /* --- ABI 1.1: the model and its training state ------------------------- */
    /* NULL before the trainer built the model (during init and transforms). */
    const ts_plugin_model *(*model)(ts_plugin_ctx *ctx);

    /* --- ABI 1.1: registration (during init only, as above) ---------------- */
    ts_status (*register_module_hook)(ts_plugin_ctx *ctx, ts_plugin_module_hook_kind kind,
                                      ts_plugin_module_hook_fn fn, void *user);
    /* Declares a provision on mesh axis `axis` ("dp", "cp", ...). Fails for
     * an unknown axis or provision, or one another plugin provides there. */
    ts_status (*register_provider)(ts_plugin_ctx *ctx, ts_plugin_provision what, const char *axis);
    /* Attention over sequences cut along `axis` (and the provision). */
    ts_status (*register_attention)(ts_plugin_ctx *ctx, const char *axis,
                                    const ts_plugin_attention_ops *ops, void *user);
    /* Optimizer state cut over `axis` (and the provision). */
    ts_status (*register_optimizer_state)(ts_plugin_ctx *ctx, const char *axis,
                                          const ts_plugin_optimizer_state_ops *ops, void *user);
    /* The plugin providing `what` on `axis` (its name), or NULL; final once
     * every plugin's init has run (from the first transform on). */
    const char *(*provider)(ts_plugin_ctx *ctx, ts_plugin_provision what, const char *axis);

    /* --- ABI 1.1: attention of a block of queries against a block of keys (context parallelism) */
    /* The steps of ring attention on the run's device, f32 (a plugin in the
     * model's bf16 mode rounds its inputs itself). NH heads of hs = C/NH,
     * scores s_ij = q_i . k_j / sqrt(hs). Tensors are device memory given by
     * row strides in floats (the first C columns are used):
     *   q (B, Tq, qs), dq: (b, i, h, d) at q[(b*Tq + i)*qs + h*hs + d]
     *   k, v (B, Tk, kvs), dk, dv: at [(b*Tk + j)*kvs + h*hs + d]
     *   out, out2, dout (B, Tq, os): at [(b*Tq + i)*os + h*hs + d]
     *   lse, lse2 (B, NH, Tq), contiguous: [(b*NH + h)*Tq + i]
     * Key row j is visible to query row i iff j <= i + offset (offset = the
     * sequence position of query row 0 minus that of key row 0; >= Tk - 1
     * masks nothing). Inside a packed qkv (B, T, 3C): q = qkv, k = qkv + C,
     * v = qkv + 2C, qs = kvs = 3C; Tq = Tk = T with offset 0 is the core's
     * attention.
     * attention_block_forward: out (=) the softmax over the visible keys of
     *   s, times v; lse (=) log sum_j exp(s_ij) over them. A row with no
     *   visible key gets out 0 and lse -INFINITY.
     * attention_block_merge: folds (out2, lse2), the same rows over a
     *   disjoint set of keys, into (out, lse) in place: L = log(e^lse +
     *   e^lse2), out = out e^(lse - L) + out2 e^(lse2 - L). A side at
     *   -INFINITY adds nothing (both: out 0, lse -INFINITY); never NaN.
     * attention_block_backward: given the FINAL out and lse (merged over
     *   every key block) and dout, accumulates (+=) this key block's part:
     *   P = exp(s - lse) on visible keys, D_i = dout_i . out_i,
     *   dv_j += sum_i P_ij dout_i, dS = P (dout_i . v_j - D_i),
     *   dq_i += sum_j dS_ij k_j / sqrt(hs), dk_j += sum_i dS_ij q_i / sqrt(hs).
     *   Rows with lse = -INFINITY contribute nothing.
     * Ordered with the model's kernels (on a GPU, its stream); deterministic.
     * Failure: TS_ERR_INVALID for a size <= 0, C not divisible by NH, a
     * stride below C, a NULL tensor, or before the device is open; a device
     * error otherwise (a head size above 128 on a GPU). */
    ts_status (*attention_block_forward)(ts_plugin_ctx *ctx, float *out, float *lse, const float *q,
                                         const float *k, const float *v, int B, int Tq, int Tk,
                                         int C, int NH, int qs, int kvs, int os, int64_t offset);
    ts_status (*attention_block_merge)(ts_plugin_ctx *ctx, float *out, float *lse,
                                       const float *out2, const float *lse2, int B, int Tq, int C,
                                       int NH, int os);
    ts_status (*attention_block_backward)(ts_plugin_ctx *ctx, float *dq, float *dk, float *dv,
                                          const float *q, const float *k, const float *v,
                                          const float *out, const float *dout, const float *lse,
                                          int B, int Tq, int Tk, int C, int NH, int qs, int kvs,
                                          int os, int64_t offset);
    /* --- ABI 1.1: a strided copy in the run's device memory --------------- */
    /* `rows` rows of `width` bytes from src (rows `spitch` bytes apart) to
     * dst (`dpitch` apart), ordered like device_copy: e.g. the k and v
     * columns of every row of a packed qkv. No overlap. */
    ts_status (*device_copy_2d)(ts_plugin_ctx *ctx, void *dst, size_t dpitch, const void *src,
                                size_t spitch, size_t width, size_t rows);
    /* --- ABI 1.1: mixture of experts --------------------------------------- */
    /* During init: the MoE layers' experts are cut over `axis` (the plugin's
     * transform places their weights S(0) there) and their rows travel with
     * the dispatcher called `dispatcher` (registered by any plugin; an
     * unknown name stops start-up listing the registered ones). Declares
     * TS_PROVIDE_EXPERTS on the axis. */
    ts_status (*register_experts)(ts_plugin_ctx *ctx, const char *axis, const char *dispatcher);
    /* --- appended within ABI 1.1: check with TS_HOST_HAS ----------------- */
    /* Converts n elements of device memory between f32 and bf16: src_dtype
     * TS_F32 to dst_dtype TS_BF16 rounds to nearest even; TS_BF16 to TS_F32
     * is exact. Other pairs and overlapping buffers fail (TS_ERR_INVALID).
     * E.g. a gradient reduced in bf16 ([dp] grad_dtype). */
    ts_status (*device_convert)(ts_plugin_ctx *ctx, void *dst, ts_dtype dst_dtype, const void *src,
                                ts_dtype src_dtype, size_t n);
    /* During init, by the plugin whose transform assigns pipeline stages:
     * where virtual stages live (ts_plugin_stage_order; default
     * INTERLEAVED). Fails for an unknown order, or when another plugin set
     * it already. */
    ts_status (*set_stage_order)(ts_plugin_ctx *ctx, int order);
    /* --- ABI 1.2: axes of a plugin's own --------------------------------- */
    /* Claims a mesh axis as register_axis does, with its place in the
     * default order and its role (ts_plugin_axis_spec). A name other than
     * the standard ones makes a new axis of the plugin's: a slot of the
     * order string of its own ([parallel] order may name it), groups and a
     * communicator of its own (host->comm(ctx, name)), and placements over
     * it in the layout plan. */
    ts_status (*register_axis_spec)(ts_plugin_ctx *ctx, const ts_plugin_axis_spec *spec);
    /* --- ABI 1.3: the sub-tables by topic (see "ABI 1.3" above) ---------- */
    /* Everything from comm to register_axis_spec above that is no
     * top-level service (log, error, mem_alloc, mem_free, metric, model,
     * provider, schedule_append) is the flat form kept for plugins of ABI
     * 1.0-1.2; a plugin of 1.3 calls the same functions through these. */
    const ts_host_comms *comms;
    const ts_host_device *dev;
    const ts_host_kernels *kernels;
    const ts_host_registration *reg;
    const ts_host_config *config;
    /* ABI 1.4 and later append here. */
} ts_host;

/* 1 if the host table `h` has field `field` (a plugin built against a newer
 * minor than the core it runs in cannot load, but one built against an older
 * one may check for newer fields this way). A plugin targeting 1.2 or older
 * that wants the sub-tables checks TS_HOST_HAS(host, comms) first; fields
 * appended to a sub-table: TS_COMMS_HAS and its kin. */
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
#if TS_PLUGIN_DESCRIPTOR_MINOR >= 3
    /* --- ABI 1.3 (read only when struct_size covers it; older: 0) ------- */
    uint32_t flags; /* TS_PLUGIN_THREAD_LOCAL_STATE, or 0                */
#endif
    /* ABI 1.4 and later append here. */
} ts_plugin_descriptor;

/* Where the descriptor's flags are (right after fini), and the smallest
 * struct_size that holds them. */
#define TS_PLUGIN_DESCRIPTOR_FLAGS_OFFSET                                                          \
    (offsetof(ts_plugin_descriptor, fini) + sizeof(void (*)(void)))
#define TS_PLUGIN_DESCRIPTOR_SIZE_1_3 (TS_PLUGIN_DESCRIPTOR_FLAGS_OFFSET + sizeof(uint32_t))
#if TS_PLUGIN_DESCRIPTOR_MINOR >= 3 && !defined(__cplusplus)
_Static_assert(offsetof(ts_plugin_descriptor, flags) == TS_PLUGIN_DESCRIPTOR_FLAGS_OFFSET,
               "the descriptor's flags follow fini");
#endif

/* A bit of the descriptor's flags (ABI 1.3). The plugin keeps its state per
 * thread (or per ctx): several trainers may run in one process at once,
 * each on its own thread, and the core calls a plugin's functions only from
 * the thread that ran its init. A plugin sets it when every file-scope
 * variable it writes is _Thread_local (or lives behind its ctx): the
 * library is loaded once per process and shared by the trainers, and its
 * _Thread_local state is each thread's own.
 * What the core guarantees in return: init, every callback of one trainer
 * (transforms, hooks, module hooks, schedulers, dispatchers, providers) and
 * fini run on the thread that ran that trainer's init; no helper thread of
 * the core calls a plugin (the asynchronous checkpoint writer writes bytes
 * the trainer copied out and calls nothing of a plugin). Without the flag
 * the core runs at most one trainer per process with the plugin loaded
 * (ts_plugins_thread_safe, core/plugin/plugin.h, tells it: `tessera plan
 * --search` runs its dry runs in threads only when every plugin sets it). */
#define TS_PLUGIN_THREAD_LOCAL_STATE 1u

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
