/*
 * layers.h — the placement-driven layers architectures are written with.
 *
 * A hidden state is a (B, T, F) block of a (B, T_global, F_global) tensor
 * whose placement on each of the model's axes (model->axes) is one of
 *   R     every rank of the axis holds the same values,
 *   S(1)  the sequence is cut: each rank holds T_global / size rows of every
 *         sequence (the rank's coordinate picks which),
 *   S(2)  the features are cut (after a column-parallel product),
 *   P     every rank holds a partial sum; the value is their sum.
 * (The batch dimension never appears: an axis that cuts the batch gives each
 * rank its own sequences, which the layers see as their whole batch.)
 *
 * The rules, read from the placements alone (no strategy is named):
 *  - a product y = x W^T with W cut on an axis along an output dimension
 *    (column parallel) needs x replicated there and gives y cut along its
 *    features; with W cut along its input dimension (row parallel) it needs
 *    x cut along its features and gives partial sums; with W replicated x
 *    passes as it is. Other placements of W are errors naming W and the axis
 *    (Shoeybi et al. 2019, Megatron-LM);
 *  - ts_layer_redistribute turns one placement into another: S(1) -> R
 *    all-gather along the sequence, P -> R all-reduce, P -> S(1)
 *    reduce-scatter along the sequence, R -> S(1) a slice (Korthikanti et
 *    al. 2022). The gradient of a tensor takes the tensor's placement, and
 *    the gradient of a partial sum is replicated, so a backward is the same
 *    call with the gradient's placements (the collectives come out as
 *    Megatron-LM's f and g operators and their sequence-parallel forms);
 *  - an embedding whose table is cut along the vocabulary gives partial sums
 *    (rows outside the rank's block are zero); a cross-entropy over logits
 *    cut along the vocabulary reduces its maximum and sums over that axis.
 *
 * All memory is the model's device's (backend.h); bf16 rounding follows the
 * model's dtype.
 */
#ifndef TESSERA_CORE_LAYERS_H
#define TESSERA_CORE_LAYERS_H

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A placement on each of the model's axes. */
typedef struct ts_place {
    ts_placement on[TS_MODEL_MAX_AXES];
} ts_place;

/* Every axis replicated. */
ts_place ts_place_replicated(void);
int ts_place_equal(const ts_model *m, const ts_place *a, const ts_place *b);

/* Rows per sequence under `p` (T divided by the axes cutting the sequence)
 * and the first of them on this rank (its offset in the sequence). */
int ts_layer_rows(const ts_model *m, const ts_place *p, int T);
int ts_layer_row0(const ts_model *m, const ts_place *p, int T);

/* Redistributes a hidden state x of placement `from` (B sequences of T
 * tokens globally, F local features) to placement `to`. The result is
 * written to `dst` (room for the result's local size), or stays in `src`:
 * *out points at whichever holds it. P -> R reduces `src` in place. At most
 * one axis may change; features are never redistributed. Errors name the
 * axis and both placements. */
ts_status ts_layer_redistribute(ts_model *m, float *dst, float *src, const ts_place *from,
                                const ts_place *to, int B, int T, int F, float **out);

/* The same for a tensor of forward values redistributed again in backward
 * (an activation saved cut along the sequence, gathered for a product's
 * weight gradient): in bf16 mode its all-gather moves bf16, exact, where a
 * backward's gradients move f32. */
ts_status ts_layer_regather(ts_model *m, float *dst, float *src, const ts_place *from,
                            const ts_place *to, int B, int T, int F, float **out);

/* Whether ts_layer_redistribute has a rule from `from` to `to` (0 with the
 * message set when not). */
int ts_layer_can_redistribute(const ts_model *m, const ts_place *from, const ts_place *to);

/* The gradient of a tensor of placement p comes in p, except that the
 * gradient of partial sums is replicated. */
ts_place ts_layer_grad_place(const ts_model *m, const ts_place *p);

/* The placements of y = x W^T: what x must be (`need`), what y is, and (when
 * `dneed` is not NULL) how the backward product gives the gradient of the
 * input it used: partial sums over the axes where it is column parallel. */
ts_status ts_layer_linear_places(const ts_model *m, const ts_param *w, const ts_place *x,
                                 ts_place *need, ts_place *y, ts_place *dneed);
/* out (N, OC) = inp (N, C) @ W^T + bias, W the parameter `w` (OC, C) and its
 * backward (accumulating): f32 GEMMs, or in bf16 the bf16 GEMMs on the bf16
 * parameter itself. */
ts_status ts_layer_linear_forward(ts_model *m, float *out, const float *inp, const ts_param *w,
                                  const float *bias, int N, int C, int OC);
ts_status ts_layer_linear_backward(ts_model *m, float *dinp, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const ts_param *w, int N,
                                   int C, int OC);

/* The same backward for a product whose f32 weight the caller holds (an
 * expert's, staged): dinp, dweight, dbias += as the backend's
 * matmul_backward. Both defer their weight gradients in a BACKWARD_INPUT
 * (model.h): dinp now, dweight and dbias recorded for the module's
 * BACKWARD_WEIGHT, with what they read kept (referenced in the module's
 * saved state, else copied). */
ts_status ts_layer_matmul_backward(ts_model *m, float *dinp, float *dweight, float *dbias,
                                   const float *dout, const float *inp, const float *weight, int N,
                                   int C, int OC);

/* The placement of an embedding lookup out of table `table` (its rows cut on
 * an axis give partial sums there; a replicated table gives replicated
 * rows) and its rows [*v0, *v0 + *rows) of the vocabulary on this rank.
 * Other cuts of the table are errors naming it and the axis. */
ts_status ts_layer_embedding_place(const ts_model *m, const ts_param *table, ts_place *out, int *v0,
                                   int *rows);

/* Cross-entropy of logits (N, Vpl) whose features are cut as `place` says
 * (this rank's columns [v0, v0 + Vpl), the first Vl of them real): per-row
 * losses and log-sum-exp, the maximum and the sums reduced over the cutting
 * axes. `work` has room for 3N floats. */
ts_status ts_layer_cross_entropy(ts_model *m, float *losses, float *lse, float *work,
                                 const float *logits, const int32_t *targets, const ts_place *place,
                                 int v0, int N, int Vl, int Vpl);

/* f32 values of parameter p: its storage, or in bf16 staged through `slot`
 * (0 for the large weight of an op, 1-3 for small vectors), valid until the
 * next call with that slot. A device failure while staging aborts (the
 * core's rule for device failures). */
const float *ts_layer_weight(ts_model *m, const ts_param *p, int slot);
/* p's gradient (f32, device memory). */
float *ts_layer_grad(const ts_param *p);
/* Rounds x (n floats) to bf16 values in bf16 mode; nothing in fp32. */
ts_status ts_layer_round(const ts_model *m, float *x, size_t n);
/* The shared workspace, grown to `floats` (device memory); NULL when out of
 * memory (the last error set). */
float *ts_layer_work(ts_model *m, size_t floats);
/* The host's copy of n floats of device memory x (x itself on the CPU). */
ts_status ts_layer_host_view(ts_model *m, const float *x, size_t n, const float **host);

/* Per-micro-batch saved state of a module: one allocation of `floats`
 * (device memory, TS_MEM_ACTS) for micro-batch mb that its backward reads,
 * remembering the module's input; and its output (ts_module_save_output),
 * which the next module reads. In bf16 mode both wait packed to two bytes
 * per value: the state from the end of the module's forward to its backward
 * (ts_module_pack), the output from the next module's forward to that
 * module's backward (ts_module_hand_over). The state's first `keep` floats
 * stay f32 (statistics); every other value must be a bf16 value there. Both
 * come unzeroed (alloc_uninit, backend.h): the module's forward writes every
 * float of them (cli_poison_uninit_same_bits fills them with NaN first). */
float *ts_module_save(ts_module *mod, int mb, size_t floats, size_t keep, const float *input);
float *ts_module_save_output(ts_module *mod, int mb, size_t floats);
/* The state in f32 (unpacked first when packed; NULL with the error set when
 * out of memory); the module's input x as ts_module_save saw it (unpacked
 * from its producer's output likewise). */
float *ts_module_saved(ts_module *mod, int mb);
const float *ts_module_saved_input(ts_module *mod, int mb);
/* In bf16 mode, stores the state / the output of micro-batch mb in two
 * bytes per value (nothing in f32, or when packed already). */
ts_status ts_module_pack(ts_module *mod, int mb);
ts_status ts_module_pack_output(ts_module *mod, int mb);
/* In bf16 mode, keeps a packed copy of the module's input of micro-batch mb
 * (`floats` of memory no module of the model holds: a chunk's received
 * input), so that its owner may free it; nothing otherwise. */
ts_status ts_module_copy_input(ts_module *mod, int mb, size_t floats);
/* `next`'s forward of micro-batch mb has consumed the output of `prev`: next
 * finds its saved input through prev from now on, and prev's output is
 * packed. */
ts_status ts_module_hand_over(ts_module *prev, ts_module *next, int mb);
/* Frees everything micro-batch mb holds: the parts above and what the
 * module keeps outside them (ts_module_ops.release). In a BACKWARD_INPUT
 * whose weight gradients are deferred, the slot is released once they have
 * run (ts_module_run_deferred). */
void ts_module_release(ts_module *mod, int mb);
/* Runs the weight gradients micro-batch mb's BACKWARD_INPUT deferred, in the
 * order it recorded them, then releases the slot if the module released it
 * meanwhile. */
ts_status ts_module_run_deferred(ts_module *mod, int mb);
/* Activation recomputation (FULL): frees the state of micro-batch mb and
 * what the module keeps outside its parts, but for the decisions its
 * recomputed forward reuses; the output and the input link stay. */
void ts_module_drop(ts_module *mod, int mb);
/* Frees the output of micro-batch mb (a FULL module's output that no
 * module reads until its recomputed forward makes it again). */
void ts_module_drop_output(ts_module *mod, int mb);
/* Whether micro-batch mb's state is held (f32 or packed). */
int ts_module_holds_state(const ts_module *mod, int mb);
/* The slot of an MoE layer's state for micro-batch mb (after ts_module_save). */
void **ts_module_moe_state(ts_module *mod, int mb);
/* The slot of an attention provider's state for micro-batch mb (after
 * ts_module_save for it). */
void **ts_module_provider_state(ts_module *mod, int mb);
/* The module's k-th parameter (as declared). */
ts_param *ts_module_param(ts_module *mod, int k);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_LAYERS_H */
