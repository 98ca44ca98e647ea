/*
 * model.h — the model runtime: parameters, their flat buffers, modules and
 * the running of model chunks, for any architecture registered by name
 * (arch.h; `[model] arch`, GPT-2 first).
 *
 * What the runtime owns (generic, for every architecture):
 *  - the parameter registry: the architecture declares every parameter
 *    (name, global shape, initialisation, weight decay) and which modules
 *    read it; this rank keeps the parameters its modules read, each as its
 *    block under the layout plan's placements (ts_layout_local_block);
 *  - the flat buffers: parameters, gradients and the optimizer state are each
 *    one allocation, carved into named tensors at the same element offsets,
 *    so the optimizer runs over flat arrays and a checkpoint is a few writes;
 *  - stages and chunks: a module runs on the pipeline stage that the plan's
 *    `stage` fields give its parameters (virtual stage k on pipeline rank
 *    k % stages as its chunk k / stages); modules of another stage are not built;
 *  - the runner: a chunk's modules forward in order and backward in reverse,
 *    with per-micro-batch saved state, a shared backward workspace and the
 *    module-done callback (gradient-ready hooks).
 *
 * What a placement implies for the arithmetic is the layers' business
 * (layers.h): they read each parameter's placement on every cut axis and the
 * hidden state's, and derive the collectives (column and row parallel
 * products, vocabulary-parallel embedding and loss, sequence-sliced regions).
 * Neither the runtime nor the layers know a strategy by name: an axis is
 * whatever the plan calls it.
 *
 * Precision: with dtype fp32 the parameters are f32 and are the master
 * weights. With bf16 the parameters are stored in bf16 (the compute copy),
 * the optimizer keeps f32 master weights, gradients accumulate in f32, and
 * every activation is rounded to bf16 at each op boundary.
 *
 * Devices: the model's tensors live on its backend's device (backend.h: the
 * CPU, or one GPU) and every kernel runs there. The host touches only the
 * per-token losses of the head and the host arrays of ts_model_gather /
 * ts_model_scatter.
 */
#ifndef TESSERA_CORE_MODEL_H
#define TESSERA_CORE_MODEL_H

#include <stdint.h>

#include "backend.h"
#include "module.h"
#include "tessera/comm.h"
#include "tessera/layout.h"
#include "tessera/mesh.h"
#include "moe.h"
#include "tessera/plugin.h" /* attention providers */
#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_arch ts_arch;

/* The shape of the model. GPT-2's keys; an architecture reads what it needs. */
typedef struct ts_model_config {
    int layers;       /* L                                              */
    int d_model;      /* C                                              */
    int heads;        /* NH; C % NH == 0                                */
    int vocab;        /* V: real token ids are [0, V)                   */
    int padded_vocab; /* Vp >= V: rows of wte, columns of the logits    */
    int context;      /* maxT: rows of wpe                              */
    /* Mixture of experts (experts = 0: none). Blocks l with l % moe_every
     * == 0 route each token to top_k of `experts` MLPs of expert_hidden. */
    int experts, moe_every, expert_hidden, top_k;
    float aux_loss_coeff, z_loss_coeff, capacity_factor;
    int drop_by_position; /* drop_policy = position (else probs)       */
} ts_model_config;

/* Whether block l of `c` routes to experts (the rule above, the one place
 * it is written: the architecture, the weight files and their checks use it). */
static inline int ts_model_config_moe_block(const ts_model_config *c, int l) {
    return c->experts > 0 && c->moe_every > 0 && l % c->moe_every == 0;
}

typedef enum ts_init_kind {
    TS_INIT_NORMAL = 0, /* N(0, std) from (seed, name, global index)      */
    TS_INIT_ZEROS = 1,
    TS_INIT_ONES = 2,
} ts_init_kind;

#define TS_MODEL_MAX_MODULES 1026 /* embedding, up to 1024 blocks, head */
#define TS_MODEL_MAX_AXES TS_LAYOUT_MAX_AXES
#define TS_MODULE_MAX_PARAMS 16

/* One mesh axis that a model tensor may be cut along, as this rank sees it. */
typedef struct ts_model_axis {
    char name[TS_COMM_NAME_MAX]; /* the plan's name for it ("tp", ...)     */
    int size, coord;
    /* 1 when the batch (data.tokens) is cut along it: its ranks hold
     * different tokens (dp, cp). 0: every rank of it reads the same tokens,
     * so layers may cut weights and hidden states along it. */
    int cuts_batch;
    /* 1 when it cuts every sequence (data.tokens S(1)): each rank holds a
     * part of each sequence, and `attention` (a plugin's, ABI 1.1) computes
     * the attention across the ranks. */
    int cuts_sequence;
    const ts_plugin_attention_ops *attention;
    ts_plugin_ctx *attention_ctx;
    void *attention_user;
    const char *attention_plugin; /* its provider's name, for messages */
    ts_comm *comm; /* the model's tensors (device memory; NCCL on GPUs)   */
    ts_comm *host; /* the same group for host memory; comm when NULL      */
} ts_model_axis;

/* Where the model runs: the plan's placements and this rank's place in the
 * mesh. The pipeline axis is not among `axes`: pipeline stages come from the
 * plan's stage fields. */
typedef struct ts_model_shard {
    const ts_layout_plan *plan; /* borrowed for ts_model_create; NULL: one
                                   rank, nothing cut                      */
    int naxes;
    ts_model_axis axes[TS_MODEL_MAX_AXES];
    int stages, stage; /* pipeline stages and this rank's (0, 0: none)     */
    int stage_order;   /* where virtual stages live (ts_plugin_stage_order) */
    /* Bit a: a plugin keeps parameters cut over axes[a] and presents them
     * whole to the layers (TS_PROVIDE_PARAM_STORAGE). */
    unsigned provided_axes;
} ts_model_shard;

typedef struct ts_param {
    /* What the layers compute with: this rank's block (f32 or bf16) and its
     * f32 gradient. For a parameter stored cut over an axis a plugin
     * provides it whole on (ts_model_shard.provided_axes), the block along
     * that axis is whole and `data` is the provider's between its module
     * hooks (NULL otherwise). */
    ts_tensor value;
    ts_tensor grad;
    /* As stored: the block in the flat parameter and gradient arrays (the
     * same tensors as value and grad unless provided). The optimizer,
     * checkpoints and norms work on these. */
    ts_tensor store;
    ts_tensor store_grad;
    size_t offset;   /* element offset of `store` in the flat arrays    */
    int global_ndim; /* the whole tensor: shape and where our block is  */
    int64_t global_shape[3];
    int64_t block_offset[3]; /* of value in the whole tensor            */
    int64_t store_offset[3]; /* of store in the whole tensor            */
    unsigned provided;       /* bit a: stored cut over axis a, used whole */
    size_t global_offset;    /* element offset in the unsharded flat arrays  */
    /* The placement on each of the model's axes (model->axes order). */
    ts_placement on[TS_MODEL_MAX_AXES];
    /* Bit a: the gradient is partial over axis a of model->axes (a weight
     * replicated on an axis that cuts the rows it is applied to): the core
     * sums it over that axis when the gradient is complete, unless a plugin
     * provides the reduction (bit clear, see ts_model_set_reducer). */
    unsigned grad_partial;
    int tied_copy;  /* a copy of a parameter whose owning module runs on
                       another pipeline rank (GPT-2's LM head's wte): the
                       owner's copy is the one checkpoints and the gradient
                       norm count                                       */
    int tied_split; /* read by modules on two pipeline ranks (the owner's
                       and a tied copy's): the two gradients are summed
                       over the tie group each step                     */
    int decay;      /* weight decay applies (2-D weights)              */
    int expert;     /* an expert's weights (ts_param_decl.expert)       */
    ts_init_kind init;
    float init_std;
    int64_t init_rows; /* NORMAL: rows initialised (wte: V of Vp)        */
} ts_param;

/* The architecture's declaration of one parameter. */
typedef struct ts_param_decl {
    char name[TS_NAME_MAX];
    int ndim;
    int64_t shape[3];
    int decay;
    ts_init_kind init;
    float std;
    int64_t rows; /* NORMAL: leading-dimension rows initialised           */
    int expert;   /* an expert's weights (dimension 0: the experts): it lives
                     on the expert mesh (etp, ep, edp, pp) in the layout plan */
} ts_param_decl;

/* The architecture's declaration of one module: its ops and the parameters
 * it reads (indices into the declared parameters). The first module reading
 * a parameter owns it (its stage is the parameter's plan stage); a later
 * one borrows it (a tied weight). */
typedef struct ts_module_decl {
    char name[TS_NAME_MAX];
    const ts_module_ops *ops;
    int nparams;
    int params[TS_MODULE_MAX_PARAMS];
} ts_module_decl;

struct ts_model {
    const ts_backend *be; /* where every tensor below lives (borrowed) */
    const ts_arch *arch;  /* the definition (static)                   */
    ts_model_config cfg;
    ts_dtype dtype; /* TS_F32 or TS_BF16: storage of parameters      */
    int nparams;
    ts_param *params;
    size_t numel;        /* elements in this rank's blocks                 */
    size_t global_numel; /* elements in all parameters, unsharded      */
    void *param_data;    /* numel elements of dtype (device memory)       */
    float *grad_data;    /* numel f32 (device memory)                     */
    /* [grad_zero_begin, grad_zero_end) of grad_data is known to be 0: the
     * optimizer's range, which it zeroed as it read it; the next
     * ts_model_zero_grad skips it. Any backward clears it. */
    size_t grad_zero_begin, grad_zero_end;

    /* The axes that cut something (copied from the shard), and the
     * placement of the hidden state passed between modules on each. */
    int naxes;
    ts_model_axis axes[TS_MODEL_MAX_AXES];
    ts_placement act[TS_MODEL_MAX_AXES];

    int nmodules;                           /* every module of the architecture               */
    ts_module **modules;                    /* NULL for a module another pipeline rank runs */
    int module_chunk[TS_MODEL_MAX_MODULES]; /* chunk on this rank, or -1   */
    int stages, chunks;                     /* pipeline stages, model chunks on this rank    */
    int stage_order;                        /* ts_plugin_stage_order of the virtual stages    */
    int tied_split;                         /* a parameter read by modules on two pipeline ranks
                                               lives here: its gradient is summed across them
                                               each step                                      */

    /* Backward workspace shared by all modules (one backward at a time). */
    float *work;
    size_t work_floats;
    /* Set while a backward runs: its gradients cross the axes in f32 ... */
    int in_backward;
    /* Set while a BACKWARD_INPUT runs module `current` for micro-batch
     * `current_mb`: the layers record its weight gradients (ts_weight_job)
     * instead of computing them. */
    int defer_weights;
    ts_module *current;
    int current_mb;
    /* ... unless this is set ([train] partial_dtype = bf16, bf16 runs):
     * partial sums and activation gradients then cross them in bf16. */
    int partial_bf16;
    /* Staging for redistributions along the sequence. */
    float *comm_stage;
    size_t comm_stage_floats;
    /* bf16 mode: f32 staging for the weights of the op being run (the
     * embedding, LayerNorms, biases), and the bf16 GEMMs' operand scratch. */
    float *stage[4];
    size_t stage_floats[4];
    void *mm_work;
    size_t mm_work_bytes;
    /* Off the CPU: host staging for the head's losses. */
    float *host_stage;
    size_t host_stage_floats;
    /* Positions of this rank's tokens in their sequences, for attention
     * providers (host memory). */
    int32_t *positions;
    int npositions;
    /* Mixture of experts (moe.h): who routes the rows, and the step's sums. */
    ts_moe_routing moe;
    ts_moe_stats moe_stats;
};

/* Checks the shape (C % NH, Vp >= V, ...); messages name the [model] key. */
ts_status ts_model_config_check(const ts_model_config *cfg);

/* Builds the model of architecture `arch` (NULL: GPT-2) with parameters
 * initialised from `seed`: element i of a tensor is drawn from (seed, name,
 * GLOBAL index i), so every rank's block of a sharded tensor holds exactly
 * the values of the unsharded one. `shard` may be NULL (one rank, nothing
 * cut); it is copied (its plan is read during the call only). Placements the
 * layers cannot run, stages out of order and shapes the cuts do not divide
 * are errors naming the tensor and the axis. `be` (borrowed, kept by the
 * model; NULL = the CPU) is where the tensors live and the kernels run: the
 * values are drawn on the host and uploaded. */
ts_status ts_model_create_arch(const ts_arch *arch, const ts_model_config *cfg, ts_dtype dtype,
                               uint64_t seed, const ts_model_shard *shard, const ts_backend *be,
                               ts_model **out);
/* The same for GPT-2. */
ts_status ts_model_create(const ts_model_config *cfg, ts_dtype dtype, uint64_t seed,
                          const ts_model_shard *shard, const ts_backend *be, ts_model **out);

/* Every rank's f32 values of every parameter (`local`, numel elements in
 * this rank's layout) assembled into the unsharded flat layout (`full`,
 * global_numel elements, on every rank of the axes that cut them).
 * Collective over those axes; a copy when nothing is cut. Both are HOST
 * arrays (the trainer copies device arrays down first). Pipeline stages
 * write only their own parameters. */
ts_status ts_model_gather(ts_model *m, const float *local, float *full);
/* The reverse: this rank's blocks cut out of the unsharded flat `full`
 * (host arrays too). */
void ts_model_scatter(const ts_model *m, const float *full, float *local);
void ts_model_destroy(ts_model *m);

/* The parameter called `name`, or NULL. */
ts_param *ts_model_param(ts_model *m, const char *name);
/* Sets every gradient to zero (on the device: enqueued). */
ts_status ts_model_zero_grad(ts_model *m);

/* Activation recomputation ([train] recompute, recompute_layers,
 * recompute_method; module.h: ts_recompute): sets the mode of this rank's
 * modules whose kind can recompute so. In each chunk, with `block` = 0
 * (uniform) every such module, FULL ones in groups of `layers` consecutive
 * modules (0: 1) that keep only the group's input; with block = 1 the first
 * `layers` of them (0: all), each on its own (Megatron-LM's
 * --recompute-method uniform | block). NONE resets every module. `layers`
 * must lie in 0 .. ts_model_recompute_modules (the caller checks it). Fails
 * for a module that cannot recompute in this run, with its reason. */
ts_status ts_model_set_recompute(ts_model *m, ts_recompute mode, int layers, int block);
/* The fewest modules of one chunk of this rank whose kind can recompute in
 * `mode` (0 without chunks). */
int ts_model_recompute_modules(const ts_model *m, ts_recompute mode);

/* Forward of model chunk `chunk` (its modules, in order) for micro-batch
 * ctx->mb: x is the hidden state entering it (ignored when the chunk starts
 * with the first module); y receives the state leaving it, owned by the last
 * module's saved state (y->data NULL when the chunk ends with the last). */
ts_status ts_model_forward_chunk(ts_model *m, ts_step_ctx *ctx, int chunk, const ts_tensor *x,
                                 ts_tensor *y);
/* Backward of model chunk `chunk`: dy is the gradient of its output (NULL
 * when it ends with the last module), dx a caller buffer of the hidden
 * state's local size (ts_model_hidden_shape) that receives the gradient of
 * its input (NULL when it starts with the first module). */
ts_status ts_model_backward_chunk(ts_model *m, ts_step_ctx *ctx, int chunk, const ts_tensor *dy,
                                  ts_tensor *dx);
/* The backward of chunk `chunk` in two parts (zero-bubble schedules): the
 * input part computes dx, and every parameter gradient but the matrix
 * products' weight gradients, which it keeps to compute in the weight part
 * (the same kernels on the same values, so the same bits as
 * ts_model_backward_chunk); the module hooks AFTER_BACKWARD and the
 * module-done callbacks run in the weight part, in reverse module order. */
ts_status ts_model_backward_input_chunk(ts_model *m, ts_step_ctx *ctx, int chunk,
                                        const ts_tensor *dy, ts_tensor *dx);
ts_status ts_model_backward_weight_chunk(ts_model *m, ts_step_ctx *ctx, int chunk);
/* Sampling: the logits of the position after `tokens` (T of them, 1 <= T
 * <= context; one sequence) into `logits` (vocab floats, host), from a
 * forward over the whole model on this rank alone. Fails when this rank
 * holds part of the model or the architecture has no last_logits. */
ts_status ts_model_next_logits(ts_model *m, const int32_t *tokens, int T, float *logits);
/* Frees what the forward of chunk `chunk` saved for micro-batch `mb`'s
 * backward (its output among it): a forward-only pass (evaluation) calls it
 * once the output is used. */
void ts_model_release_chunk(ts_model *m, int mb, int chunk);
/* After the forward of chunk `chunk` (not the model's first) of ctx's
 * micro-batch: in bf16 mode its first module keeps a packed copy of the
 * input it was given, which the caller may then free (*kept = 1). */
ts_status ts_model_keep_input(ts_model *m, const ts_step_ctx *ctx, int chunk, int *kept);
/* The output of chunk `chunk`'s forward of micro-batch mb has been copied
 * for sending: it is packed (bf16 mode) until the chunk's backward. */
ts_status ts_model_output_sent(ts_model *m, int mb, int chunk);
/* Whether chunk `chunk` starts with the first module / ends with the last. */
int ts_model_chunk_first(const ts_model *m, int chunk);
int ts_model_chunk_last(const ts_model *m, int chunk);
/* The local shape of the hidden state passed between modules for a
 * micro-batch of B sequences of T tokens: (B, T / the axes cutting the
 * sequence, C). */
void ts_model_hidden_shape(const ts_model *m, int B, int T, int64_t shape[3]);

/* Forward over all modules for micro-batch ctx->mb, keeping the saved state
 * its backward needs; adds the loss sum and valid-token count into ctx. */
ts_status ts_model_forward(ts_model *m, ts_step_ctx *ctx);
/* Backward of micro-batch ctx->mb (after its forward): accumulates the
 * parameter gradients and frees the saved state. */
ts_status ts_model_backward(ts_model *m, ts_step_ctx *ctx);
/* Both, for one micro-batch. */
ts_status ts_model_forward_backward(ts_model *m, ts_step_ctx *ctx);
/* Forward only; returns the mean loss over valid tokens (no gradients, no
 * saved state left behind). */
ts_status ts_model_loss(ts_model *m, ts_step_ctx *ctx, double *mean_loss);

/* f32 view of the flat parameter values (fp32 mode only; NULL in bf16). */
float *ts_model_param_f32(ts_model *m);

/* The layout plan of a model of shape `cfg` on `mesh` (nothing allocated):
 * every parameter (kind PARAM, its global shape), the hidden state passed
 * between modules ("act.x", (G, T, C)) and the batch ("data.tokens",
 * "data.targets", (G, T)), G the global batch in sequences. Every dense-mesh
 * axis (tp, cp, dp, pp) appears on every entry, replicated; stage -1
 * (unassigned). Plugins' transforms then change placements. */
ts_status ts_model_layout_plan(const ts_model_config *cfg, int global_batch, int T,
                               const ts_mesh *mesh, ts_layout_plan *plan);
/* The same for architecture `arch` (NULL: GPT-2). */
ts_status ts_model_layout_plan_arch(const ts_arch *arch, const ts_model_config *cfg,
                                    int global_batch, int T, const ts_mesh *mesh,
                                    ts_layout_plan *plan);

/* Parameter names and global shapes in model order (for checkpoints, whose
 * metadata names every tensor with its global shape, and for the files of
 * other programs, which hold the whole model): returns the count; fills
 * names/shapes when not NULL (shape[i] has 3 entries, ndim[i] how many are
 * used). */
int ts_model_param_table(const ts_model_config *cfg, char (*names)[TS_NAME_MAX],
                         int64_t (*shapes)[3], int *ndim);
/* The same for the architecture of model `m`. */
int ts_model_param_table_of(const ts_model *m, char (*names)[TS_NAME_MAX], int64_t (*shapes)[3],
                            int *ndim);

/* FLOPs of one forward+backward of B x T tokens, counted as 2 per
 * multiply-add for every GEMM (forward 1x, backward 2x) and for the two
 * attention products QK^T and AV. Element-wise work is not counted. */
double ts_model_flops_per_step(const ts_model_config *cfg, int B, int T);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_MODEL_H */
