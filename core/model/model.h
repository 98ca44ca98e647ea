/*
 * model.h — the GPT-2 model: its shape, its parameters and its modules.
 *
 * GPT-2 (Radford et al. 2019) as llm.c trains it: tied token embedding and LM
 * head, learned positions, pre-LN blocks (LayerNorm -> causal attention ->
 * residual, LayerNorm -> MLP 4C with tanh-GELU -> residual), a final LayerNorm
 * and softmax cross-entropy over a vocabulary padded to Vp columns.
 *
 * Parameters, their gradients and the optimizer state are each one allocation,
 * carved into named tensors at the same element offsets, so the optimizer runs
 * over flat arrays and a checkpoint is a few large writes.
 *
 * Tensor parallelism (Megatron-LM, Shoeybi et al. 2019): with a tp group of
 * size t > 1 every rank holds 1/t of the sharded tensors — QKV by heads and
 * the MLP's first layer by columns (column parallel), the attention and MLP
 * output projections by input rows (row parallel, partial sums all-reduced
 * once and their biases added after), the tied embedding / LM head by
 * vocabulary (lookup partial sums all-reduced; cross-entropy over the
 * vocabulary shards with max and sum-exp reduced, never the full logits).
 * With sequence parallelism (Korthikanti et al. 2022) the hidden states
 * between those regions are cut along T instead of replicated: all-gather
 * before the column-parallel products, reduce-scatter after the row-parallel
 * ones, and the gradients of weights used on sequence slices (LayerNorms,
 * row-parallel biases, positions) come out partial over tp (grad_partial).
 * The modules derive every collective from that one description.
 *
 * Precision: with dtype fp32 the parameters are f32 and are the master
 * weights. With bf16 the parameters are stored in bf16 (the compute copy),
 * the optimizer keeps f32 master weights, gradients accumulate in f32, and
 * every activation is rounded to bf16 at each op boundary; the CPU computes
 * in f32 on values of bf16 precision (and so does CUDA, with the same
 * rounding: the backend's round_bf16).
 *
 * Devices: the model's tensors (parameters, gradients, activations, the
 * workspaces) live on its backend's device (backend.h: the CPU, or one GPU)
 * and every kernel runs there. The host touches only the per-token losses
 * of the head (copied down for the loss sum) and the host arrays of
 * ts_model_gather / ts_model_scatter.
 */
#ifndef TESSERA_CORE_MODEL_H
#define TESSERA_CORE_MODEL_H

#include <stdint.h>

#include "backend.h"
#include "module.h"
#include "tessera/comm.h"
#include "tessera/layout.h"
#include "tessera/mesh.h"
#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_model_config {
    int layers;       /* L                                              */
    int d_model;      /* C                                              */
    int heads;        /* NH; C % NH == 0                                */
    int vocab;        /* V: real token ids are [0, V)                   */
    int padded_vocab; /* Vp >= V: rows of wte, columns of the logits    */
    int context;      /* maxT: rows of wpe                              */
} ts_model_config;

typedef enum ts_init_kind {
    TS_INIT_NORMAL = 0, /* N(0, std) from (seed, name, global index)      */
    TS_INIT_ZEROS = 1,
    TS_INIT_ONES = 2,
} ts_init_kind;

/* How the model is cut over the tensor-parallel group. */
/* How the model is cut over the tensor-parallel group and the pipeline. */
#define TS_MODEL_MAX_MODULES 1026 /* embedding, up to 1024 blocks, head */
typedef struct ts_model_shard {
    int tp;           /* ranks in the tp group; 1 = not cut            */
    int tp_rank;      /* this rank's coordinate on tp                  */
    int sp;           /* sequence parallel: hidden states cut along T  */
    ts_comm *tp_comm; /* borrowed; NULL when tp == 1: the model's tensors
                         (device memory; NCCL on GPUs)              */
    ts_comm *tp_host; /* borrowed; the same group for host memory
                         (ts_model_gather); tp_comm when NULL        */
    /* Pipeline: which modules (embedding 0, blocks 1..L, head L+1) this
     * rank runs, as its model chunk c (a virtual stage), or -1 for a module
     * another rank runs. pp == 0 means the whole model is here as chunk 0. */
    int pp;
    int chunks; /* model chunks on this rank                     */
    int module_chunk[TS_MODEL_MAX_MODULES];
} ts_model_shard;

typedef struct ts_param {
    ts_tensor value; /* this rank's block (f32 or bf16 storage)         */
    ts_tensor grad;  /* f32, same shape                                 */
    size_t offset;   /* element offset in the flat parameter arrays     */
    int global_ndim; /* the whole tensor: shape and where our block is  */
    int64_t global_shape[3];
    int64_t block_offset[3];
    size_t global_offset; /* element offset in the unsharded flat arrays  */
    int shard_dim;        /* dimension cut over tp, -1 when replicated      */
    int grad_partial;     /* the gradient is partial over tp (sequence
                             parallel): sum it over tp before use            */
    int tied_copy;        /* the LM head's copy of wte on a pipeline rank
                             without the embedding: the embedding's copy is
                             the one checkpoints and the gradient norm count */
    int decay;            /* weight decay applies (2-D weights)              */
    ts_init_kind init;
    float init_std;
    int64_t init_rows; /* NORMAL: rows initialised (wte: V of Vp)        */
} ts_param;

struct ts_model {
    const ts_backend *be; /* where every tensor below lives (borrowed) */
    ts_model_config cfg;
    ts_model_shard shard;
    ts_dtype dtype; /* TS_F32 or TS_BF16: storage of parameters      */
    int nparams;
    ts_param *params;
    size_t numel;        /* elements in this rank's blocks                 */
    size_t global_numel; /* elements in all parameters, unsharded      */
    void *param_data;    /* numel elements of dtype (device memory)       */
    float *grad_data;    /* numel f32 (device memory)                     */

    int nmodules;        /* embedding, L blocks, head                      */
    ts_module **modules; /* NULL for a module another pipeline rank runs */
    int tied_split;      /* wte lives here, and on another pipeline rank too:
                            its gradient is summed across the two each step */

    /* Backward workspace shared by all modules (one backward at a time). */
    float *work;
    size_t work_floats;
    /* Tensor parallelism: staging for gathers and scatters along T. */
    float *tp_stage;
    size_t tp_stage_floats;
    /* bf16 mode: f32 staging for the weights of the op being run (the
     * embedding, LayerNorms, biases), and the bf16 GEMMs' operand scratch. */
    float *stage[4];
    size_t stage_floats[4];
    void *mm_work;
    size_t mm_work_bytes;
    /* Off the CPU: host staging for the head's losses. */
    float *host_stage;
    size_t host_stage_floats;
};

/* Checks the shape (C % NH, Vp >= V, ...); messages name the [model] key. */
ts_status ts_model_config_check(const ts_model_config *cfg);

/* Builds the model with parameters initialised from `seed`: weights
 * N(0, 0.02), residual output projections N(0, 0.02/sqrt(2L)), biases 0,
 * LayerNorm weights 1, padded wte rows 0. Element i of a tensor is drawn
 * from (seed, name, GLOBAL index i), so every rank's block of a sharded
 * tensor holds exactly the values of the unsharded one. `shard` may be NULL
 * (one rank); it is copied. Shapes that the tp size does not divide are
 * errors naming the [model] key. `be` (borrowed, kept by the model; NULL =
 * the CPU) is where the tensors live and the kernels run: the values are
 * drawn on the host and uploaded. */
ts_status ts_model_create(const ts_model_config *cfg, ts_dtype dtype, uint64_t seed,
                          const ts_model_shard *shard, const ts_backend *be, ts_model **out);

/* Checks that a tp group of `tp` ranks can cut this model: heads, the MLP
 * width 4 x d_model and padded_vocab divisible by tp (messages name each). */
ts_status ts_model_tp_check(const ts_model_config *cfg, int tp);

/* The dimension each parameter is cut along under tensor parallelism
 * (-1: replicated): the placement S(d) on the tp axis that the modules
 * implement. Names as in the model ("wte", "h.0.attn.qkv.weight", ...). */
int ts_model_tp_shard_dim(const char *name);

/* Every rank's f32 values of every parameter (`local`, numel elements in
 * this rank's layout) assembled into the unsharded flat layout (`full`,
 * global_numel elements, on every rank of the tp group). Collective over tp.
 * With tp == 1 it is a copy. Both are HOST arrays (the trainer copies
 * device arrays down first). */
ts_status ts_model_gather(ts_model *m, const float *local, float *full);
/* The reverse: this rank's blocks cut out of the unsharded flat `full`
 * (host arrays too). */
void ts_model_scatter(const ts_model *m, const float *full, float *local);
void ts_model_destroy(ts_model *m);

/* The parameter called `name`, or NULL. */
ts_param *ts_model_param(ts_model *m, const char *name);
/* Sets every gradient to zero (on the device: enqueued). */
ts_status ts_model_zero_grad(ts_model *m);

/* Forward of model chunk `chunk` (its modules, in order) for micro-batch
 * ctx->mb: x is the hidden state entering it (ignored when the chunk starts
 * with the embedding); y receives the state leaving it, owned by the last
 * module's saved state (y->data NULL when the chunk ends with the head). */
ts_status ts_model_forward_chunk(ts_model *m, ts_step_ctx *ctx, int chunk, const ts_tensor *x,
                                 ts_tensor *y);
/* Backward of model chunk `chunk`: dy is the gradient of its output (NULL
 * when it ends with the head), dx a caller buffer (B, T_local, C) that
 * receives the gradient of its input (NULL when it starts with the
 * embedding). */
ts_status ts_model_backward_chunk(ts_model *m, ts_step_ctx *ctx, int chunk, const ts_tensor *dy,
                                  ts_tensor *dx);
/* Whether chunk `chunk` starts with the embedding / ends with the head. */
int ts_model_chunk_first(const ts_model *m, int chunk);
int ts_model_chunk_last(const ts_model *m, int chunk);

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

/* Parameter access for the modules: an f32 pointer to p's values, staged
 * through `slot` (0 for the large weight of an op, 1-3 for small vectors)
 * when the parameters are bf16. Valid until the next call with that slot.
 * Device memory of the model's backend. A device failure while staging
 * aborts the process (the core's rule for device failures). */
const float *ts_model_weight(ts_model *m, const ts_param *p, int slot);
/* f32 view of the flat parameter values (fp32 mode only; NULL in bf16). */
float *ts_model_param_f32(ts_model *m);

/* The layout plan of a model of shape `cfg` on `mesh` (nothing allocated): every parameter (kind
 * PARAM, its global shape), the hidden state passed between modules ("act.x", (G, T, C)) and the
 * batch ("data.tokens", "data.targets", (G, T)), G the global batch in sequences. Every dense-mesh
 * axis (tp, cp, dp, pp) appears on every entry, replicated; stage -1 (unassigned). Plugins'
 * transforms then change placements. */
ts_status ts_model_layout_plan(const ts_model_config *cfg, int global_batch, int T,
                               const ts_mesh *mesh, ts_layout_plan *plan);

/* Parameter names and global shapes in model order (for checkpoints, which
 * store the unsharded model): returns the count; fills names/shapes when
 * not NULL (shape[i] has 3 entries, ndim[i] how many are used). */
int ts_model_param_table(const ts_model_config *cfg, char (*names)[TS_NAME_MAX],
                         int64_t (*shapes)[3], int *ndim);

/* The activation memory of micro-batches of B x T in f32 (on one rank of
 * the tp group `shard`, which may be NULL), on backend `be` (NULL: the
 * CPU's; the attention's state differs, backend.h): `saved` bytes held from
 * one micro-batch's forward until its backward (every module's saved state),
 * and `workspace` bytes of backward scratch shared by all micro-batches.
 * With k micro-batches in flight the activation peak is k * saved +
 * workspace, exactly as the allocator counts it. bf16 adds the staging of
 * weights and GEMM operands, not counted here. */
void ts_model_activation_bytes(const ts_model_config *cfg, const ts_model_shard *shard,
                               const ts_backend *be, int B, int T, size_t *saved,
                               size_t *workspace);
/* The same for the modules of one chunk only (the chunk's `saved` bytes). */
size_t ts_model_chunk_saved_bytes(const ts_model_config *cfg, const ts_model_shard *shard,
                                  const ts_backend *be, int B, int T, int chunk);

/* FLOPs of one forward+backward of B x T tokens, counted as 2 per
 * multiply-add for every GEMM (forward 1x, backward 2x) and for the two
 * attention products QK^T and AV. Element-wise work is not counted. */
double ts_model_flops_per_step(const ts_model_config *cfg, int B, int T);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_MODEL_H */
