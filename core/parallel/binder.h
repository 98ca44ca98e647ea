/*
 * binder.h — every placement of the layout plan bound to something that
 * implements it, or start-up stops; and what was decided, in one object.
 *
 * After the plugins' transforms, each (tensor, axis, placement) of the plan
 * must be implemented by one of the core's generic rules or by a provider a
 * plugin registered. The rules (which placements the core implements, which
 * a provider must, the batch's position rule, who reduces gradients, who
 * holds optimizer state, who counts a replica in the gradient norm) are
 * stated in docs/binder.md. `tessera plan` runs the same binder (inside its
 * dry run), so prediction and execution cannot drift apart.
 *
 * ts_bind returns the binding: per axis of the plan, how the batch is cut
 * over it and which plugin (or the core) implements each thing there; this
 * rank's part of the batch and of every sequence; the groups the loss and
 * the experts' token counts are summed over; the pipeline's stages and
 * chunks. The trainer reads it instead of deriving the same from the plan.
 *
 * What it does not do: check shapes the layers need (heads, divisibility,
 * seq_len against an axis); the model's layers and the trainer do, naming
 * the key. It opens no communicator (the groups are tokens for
 * ts_parallel_comm) and calls no plugin.
 */
#ifndef TESSERA_CORE_BINDER_H
#define TESSERA_CORE_BINDER_H

#include "plugin.h"
#include "tessera/layout.h"
#include "tessera/mesh.h"

#ifdef __cplusplus
extern "C" {
#endif

/* At most this many axes of size > 1 in a plan (both meshes together). */
#define TS_BINDING_MAX_AXES 16
/* A group's token: axis names joined by '-' ("dp-cp"). */
#define TS_BINDING_TOKEN_MAX 64

/* One axis of the plan with more than one rank (the pipeline's aside). */
typedef struct ts_binding_axis {
    char name[TS_COMM_NAME_MAX];
    int size, coord; /* ranks along it; this rank's coordinate */
    /* data.tokens is cut over it (S(0) or S(1)): its ranks read different
     * tokens. cuts_sequence: S(1), each holds a part of every sequence. */
    int cuts_batch, cuts_sequence;
    /* act.x is S(1) over it while its ranks read the same tokens (sequence
     * parallelism: the hidden state's rows are cut between the layers). */
    int cuts_rows;
    /* The model's layers see it (a ts_model_axis): data.tokens' layout names
     * it, or some parameter is cut over it. */
    int cuts_model;
    /* The plugins providing each thing over it (their names; NULL: none).
     * grad_reducer NULL on an axis that cuts the batch: the core sums the
     * gradients of the parameters replicated there. */
    const char *grad_reducer;
    const char *param_storage;
    const char *attention; /* cuts_sequence: always set */
    int mirrored;          /* ... holding chunks c and 2n-1-c of each sequence */
    const char *optimizer_state;
    const char *experts;    /* routes tokens to experts cut over it ...   */
    const char *dispatcher; /* ... with this dispatcher (NULL: none)     */
} ts_binding_axis;

typedef struct ts_binding {
    int naxes;
    ts_binding_axis axes[TS_BINDING_MAX_AXES]; /* data.tokens' axes in layout
                                                  order, then the others' */
    const char *pipeline;                      /* the pipeline axis's name                    */
    int stages, chunks;                        /* pipeline stages; model chunks per stage      */
    /* The batch: data.tokens [global_batch, seq_len] is cut in `parts`
     * blocks of sequences (the S(0) axes nested in layout order); this
     * rank's is `part`. */
    int parts, part;
    /* The axes that cut data.tokens at all, joined in layout order: their
     * ranks hold disjoint parts of the batch, so the loss and the count of
     * valid targets are summed over this group ("" when nothing is cut). */
    char loss_group[TS_BINDING_TOKEN_MAX];
    /* The axes holding other rows of a micro-batch's hidden state (cutting
     * the batch, or its rows along the sequence), in axes[] order: the
     * mixture of experts counts its tokens over them ("" when none). */
    char rows_group[TS_BINDING_TOKEN_MAX];
    /* This rank's tokens of each sequence: seq_local of them, its block of
     * data.tokens along the sequence from seq0 (positions from
     * ts_binding_positions). */
    int seq_len, seq0, seq_local;
    int sequence_cuts; /* axes cutting data.tokens along the sequence     */
    int mirror;        /* the axis (index) whose attention holds mirrored
                          chunks; -1: none                                 */
    int optim_axis;    /* the axis (index) a plugin keeps the optimizer
                          state cut over; -1: none                         */
} ts_binding;

/* Binds every placement of `plan` (after the transforms) over `mesh` with
 * the providers of `reg` (NULL: none), for `rank` of the mesh, into *out.
 * TS_ERR_PLUGIN when a placement is unbound, naming the tensor, the axis,
 * the placement and the transform that set it; when a claimed axis is
 * unused; when two axes hold the optimizer state. */
ts_status ts_bind(const ts_layout_plan *plan, const ts_mesh *mesh, const ts_plugins *reg, int rank,
                  ts_binding *out);

/* The axis called `name` (its index in b->axes), or -1. */
int ts_binding_find(const ts_binding *b, const char *name);

/* The position in the sequence of each of this rank's b->seq_local tokens
 * (out: seq_local entries): its block from seq0, or, under mirrored
 * attention (b->mirror >= 0, the only axis cutting the sequence), chunks c
 * and 2n-1-c of the 2n equal chunks. */
void ts_binding_positions(const ts_binding *b, int32_t *out);

/* Whether this rank counts parameter `param` (its plan entry) in the global
 * gradient norm: on every axis where the parameter is a replica (not cut,
 * not the pipeline's), only coordinate 0 counts it, except over the axis
 * whose optimizer state is cut (optim_cut: each rank counts its range).
 * Summed over the world every element is counted once. */
int ts_binding_norm_owner(const ts_binding *b, const ts_layout_plan_entry *param, int optim_cut);

/* Model chunks per pipeline stage: the plan's highest stage + 1 divided by
 * `stages` (1 when no entry has a stage). */
int ts_binding_chunks(const ts_layout_plan *plan, int stages);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_BINDER_H */
