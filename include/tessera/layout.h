/*
 * layout.h — where the pieces of a tensor live: a placement per mesh axis
 * (replicate, shard along a dimension, partial sum), the local block a rank
 * holds, the redistribution that changes one axis's placement with the right
 * collective, and the layout plan (every named tensor's global shape, layout
 * and pipeline stage) that plugins' layout transforms edit.
 *
 * This header is part of the SDK installed under include/tessera/. It is
 * arithmetic plus one data-moving call (ts_redistribute); it knows no plugin
 * and no mesh: an axis here is a name and a size, and a rank is described by
 * its coordinate on every axis (ts_mesh gives those coordinates, ts_comm the
 * axis communicator). docs/layout.md has the same rules with pictures.
 *
 * Model (PyTorch DTensor's, with the names shortened)
 * ---------------------------------------------------
 * A tensor has a global shape (0..4 dimensions, row-major) and, for each of
 * up to TS_LAYOUT_MAX_AXES named mesh axes ("tp", "dp", ...), a placement:
 *
 *   R     TS_PLACEMENT_REPLICATE  every rank of the axis holds the same block;
 *   S(d)  TS_PLACEMENT_SHARD      the block is cut along dimension d into
 *                                 `size` contiguous parts, part i on the rank
 *                                 at coordinate i (DTensor's Shard(d));
 *   P     TS_PLACEMENT_PARTIAL    every rank holds a block of the full shape
 *                                 and the value is the element-wise SUM over
 *                                 the ranks of the axis (Partial("sum")).
 *
 * A layout is printed as "tp:S(0) dp:R" (axes in layout order, a space
 * between; a layout with no axes prints "-").
 *
 * The uneven split rule (the same everywhere in tessera: ts_comm_block_range)
 * ------------------------------------------------------------------------
 * Shard i of n over a dimension of extent d holds
 *     count(i)  = d/n + (i < d%n ? 1 : 0)
 *     offset(i) = i*(d/n) + min(i, d%n)
 * i.e. the first d%n shards get one element more (torch.tensor_split). When
 * d < n the last n-d shards are empty (count 0, offset d); empty shards are
 * legal everywhere, tensors of extent 0 included.
 *
 * Nesting: several axes may shard one dimension
 * ----------------------------------------------
 * Axes apply in layout order: the first axis that shards dimension d cuts the
 * global extent, the next one cuts that rank's block again with the same rule,
 * and so on (DTensor's default, left-to-right). So with global shape [10] and
 * "a:S(0) b:S(0)", sizes a=2, b=3, a's part 1 is [5, 10), which b cuts into
 * [5, 7) [7, 9) [9, 10): the rank at (a=1, b=2) holds [9, 10). R and P never
 * change the shape. Partial on several axes means the sum over all of them.
 *
 * Redistribution: one axis at a time
 * ----------------------------------
 * ts_redistribute changes the placement of ONE axis k, the others staying as
 * they are, with a collective over that axis's communicator. In the terms of
 * the block B this rank would hold if axis k were R (B follows from the other
 * axes alone), with n = the axis size and c = this rank's coordinate on it:
 *
 *   from -> to    what runs                      result on rank c
 *   X -> X        local copy                     a copy of the input
 *   P -> R        all_reduce (sum)               B = the sum of the addends
 *   P -> S(d)     reduce_scatter                 part c of the sum along d
 *                 (reduce_scatter_v when the parts are uneven or d is not
 *                 the outermost dimension of B; the input is packed part by
 *                 part first, so each rank receives its block directly)
 *   S(d) -> R     all_gather (all_gatherv when   B
 *                 uneven), unpacked along d
 *   S(i) -> S(j)  all_to_all (all_to_allv when   part c of B along j
 *                 uneven), packed and unpacked
 *   R -> S(d)     local slice, no communication  part c of B along d
 *   R -> P        local, no communication        c == 0: B; other ranks: 0
 *   S(d) -> P     local, no communication        B with zeros everywhere
 *                                                outside part c along d
 *
 * The two "-> P" rules are choices (any split of B into addends is valid);
 * both keep the sum exact and cost no communication. Sums are the
 * communicator's: f32 and i32 in their own type, bf16 combined in f32 and
 * rounded to bf16 at every step (see comm.h), so a bf16 P -> R / P -> S on n
 * ranks carries up to n-1 roundings; small integers stay exact.
 *
 * Which axis changes may be done alone: every axis before k, and every axis
 * after k that shards a dimension other than the from/to shard dimensions of
 * axis k, commutes with the change. An axis after k that shards the same
 * dimension as axis k's old or new S(d) does not (the blocks nest inside
 * axis k's parts, so the data would have to move over both axes): such a call
 * fails with TS_ERR_INVALID naming both axes; change the later axis first.
 *
 * Element types: any ts_dtype moves; a change out of P (a sum) needs f32,
 * bf16 or i32. Device: CPU tensors only for now (pack/unpack run on the
 * host); a CUDA tensor fails with TS_ERR_INVALID.
 *
 * Ownership: layouts and placements are plain values (copy them freely). The
 * output tensor of ts_redistribute is allocated by the call through the
 * accounted allocator under the input's category and is owned by the caller
 * (release with ts_tensor_free); scratch buffers live under TS_MEM_COMM for
 * the duration of the call only.
 */
#ifndef TESSERA_LAYOUT_H
#define TESSERA_LAYOUT_H

#include <stdint.h>
#include <stdio.h> /* FILE, for ts_layout_plan_print */

#include "tessera/comm.h"         /* ts_comm, ts_comm_op */
#include "tessera/layout_types.h" /* ts_placement, ts_layout, ts_layout_plan */
#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ===========================================================================
 * 1. Placements (ts_placement_kind, ts_placement and their constructors
 *    ts_placement_replicate/shard/partial: layout_types.h)
 * ======================================================================== */

/* 1 if a and b are the same placement (the dim counts only for SHARD). */
int ts_placement_equal(ts_placement a, ts_placement b);

/* Writes "R", "S(<dim>)" or "P" (DTensor's Replicate(), Shard(d), Partial())
 * into buf (cap bytes, NUL-terminated, truncated if short; 8 bytes always
 * suffice) and returns buf. An unknown kind prints "?". */
const char *ts_placement_str(ts_placement p, char *buf, size_t cap);

/* ===========================================================================
 * 2. Layouts
 *
 * A plain value: copy it with `=`. Build one with ts_layout_init and
 * ts_layout_add_axis (both validate), or fill the fields and call
 * ts_layout_validate. Every function below that takes a layout validates it
 * first and fails with TS_ERR_INVALID and a message naming the axis.
 * (ts_layout_axis and ts_layout: layout_types.h.)
 * ======================================================================== */

/* Clears `l` and sets the global shape (ndim entries of `shape`, which may be
 * NULL when ndim is 0). No axes: every rank holds the whole tensor.
 * Failure: TS_ERR_INVALID for ndim outside 0..TS_MAX_DIMS or a negative
 * extent (l is then left cleared). */
ts_status ts_layout_init(ts_layout *l, int ndim, const int64_t *shape);

/* Appends an axis. `name` is copied.
 * Failure: TS_ERR_INVALID for a bad or duplicate name, size < 1, a shard
 * dimension outside 0..ndim-1, an unknown kind, or a full layout; `l` is
 * then unchanged. */
ts_status ts_layout_add_axis(ts_layout *l, const char *name, int size, ts_placement p);

/* Sets the placement of axis `axis` (an index 0..naxes-1).
 * Failure: TS_ERR_INVALID as for ts_layout_add_axis; `l` is then unchanged. */
ts_status ts_layout_set_placement(ts_layout *l, int axis, ts_placement p);

/* The index of the axis called `name`, or -1. */
int ts_layout_axis_index(const ts_layout *l, const char *name);

/* Checks every field: ndim, extents, axis count, names (valid, unique),
 * sizes, placements. TS_OK or TS_ERR_INVALID with a message. */
ts_status ts_layout_validate(const ts_layout *l);

/* 1 if a and b have the same global shape and the same axes (names, sizes,
 * placements, in the same order). */
int ts_layout_equal(const ts_layout *a, const ts_layout *b);

/* The block of the global tensor held by the rank at `coords`.
 *
 * Inputs:  coords — naxes entries, coords[i] in 0..axes[i].size-1 (the rank's
 *                   position in axis i's communicator); NULL means 0 on every
 *                   axis (the largest block, since the first shards are the
 *                   larger ones).
 * Outputs: offset — ndim entries: where the block starts in the global
 *                   tensor (0 along dimensions no axis shards);
 *          shape  — ndim entries: the local shape (the global extent along
 *                   dimensions no axis shards; 0 for an empty shard).
 *          Either output may be NULL. The blocks of all ranks that differ
 *          only in their coordinates on sharding axes tile the global tensor
 *          exactly, in row-major order of those coordinates along each dim.
 * Failure: TS_ERR_INVALID for an invalid layout or a coordinate out of range
 *          (outputs untouched). */
ts_status ts_layout_local_block(const ts_layout *l, const int *coords, int64_t *offset,
                                int64_t *shape);
/* The same, one output each. */
ts_status ts_layout_local_shape(const ts_layout *l, const int *coords, int64_t *shape);
ts_status ts_layout_local_offset(const ts_layout *l, const int *coords, int64_t *offset);

/* Writes the placements as "tp:S(0) dp:R pp:P" ("-" for no axes) into buf
 * (cap bytes; TS_LAYOUT_DESCRIBE_MAX always suffices) and returns buf. A
 * short buffer gets a truncated, NUL-terminated prefix. */
const char *ts_layout_describe(const ts_layout *l, char *buf, size_t cap);

/* Writes the shape as "[8x12]" ("[]" for 0 dimensions) into buf (cap bytes;
 * 96 always suffice) and returns buf. */
const char *ts_layout_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap);

/* ===========================================================================
 * 3. Redistribution
 * ======================================================================== */

/* Changes the placement of axis `axis` from from->axes[axis].placement to
 * to->axes[axis].placement, with the collective of the table at the top of
 * this file over `axis_comm`. Collective over axis_comm: every rank of it
 * calls with the same from, to and axis (and in's dtype); ranks of other
 * groups of the same axis may run it independently.
 *
 * Inputs:  from, to  — valid layouts, identical except for axis `axis`'s
 *                      placement (same shape, same axes, same sizes, same
 *                      other placements; equal placements are allowed: the
 *                      call is then a copy);
 *          axis      — the index of the axis that changes, 0..naxes-1;
 *          axis_comm — the communicator of that axis: its size must be
 *                      from->axes[axis].size (its name is not compared);
 *          coords    — this rank's coordinate on every axis of the layout
 *                      (naxes entries); coords[axis] must equal
 *                      ts_comm_rank(axis_comm). May be NULL when no axis
 *                      other than `axis` is S (then only axis_comm's rank
 *                      matters);
 *          in        — this rank's block under `from`: a CPU tensor whose
 *                      ndim and shape equal ts_layout_local_shape(from,
 *                      coords). Borrowed, not modified.
 * Outputs: out — filled in and allocated by the call (ts_tensor_alloc: same
 *                name, dtype and memory category as `in`, the shape of
 *                ts_layout_local_shape(to, coords)); the caller owns it and
 *                releases it with ts_tensor_free. Whatever `out` held before
 *                is overwritten, not freed. out must not be `in`.
 * Failure: TS_ERR_INVALID (before any communication, on this rank only:
 *          the peers will then wait for it, so treat it as fatal unless every
 *          rank fails alike) for mismatched layouts, an axis that cannot
 *          change alone (see "Redistribution" above), a wrong comm size or
 *          coordinate, a tensor of the wrong shape or device, or a sum of a
 *          dtype other than f32, bf16, i32; TS_ERR_NOMEM; TS_ERR_COMM from the
 *          collective. On failure *out is cleared (nothing to free). */
ts_status ts_redistribute(const ts_layout *from, const ts_layout *to, int axis, ts_comm *axis_comm,
                          const int *coords, const ts_tensor *in, ts_tensor *out);

/* The collective ts_redistribute runs for a change from `from` to `to`:
 * TS_COMM_ALL_REDUCE, TS_COMM_REDUCE_SCATTER, TS_COMM_ALL_GATHER or
 * TS_COMM_ALL_TO_ALL (the `v` forms count under these, as in comm.h), or -1
 * when it runs none (a copy, a slice, a zero-fill). The collective runs on an
 * axis of size 1 too (where it is a copy), so the counters are alike for
 * every size. For `tessera plan` and tests. */
int ts_redistribute_collective(ts_placement from, ts_placement to);

/* ===========================================================================
 * 4. The layout plan
 *
 * Every parameter and activation of the model, by name: its global shape and
 * layout (one struct, ts_layout) and its pipeline stage. The model fills it;
 * plugins' layout transforms edit the entries in place (the struct is plain
 * on purpose: iterate entries[0..count-1] and change layouts and stages);
 * `tessera plan` prints it. The entries array belongs to the plan.
 * ======================================================================== */

/* An empty plan (nothing allocated). */
void ts_layout_plan_init(ts_layout_plan *p);

/* Appends an entry; `name` and `layout` are copied.
 * Failure: TS_ERR_INVALID for an empty name, one of TS_NAME_MAX characters
 * or more, a name already in the plan, an invalid layout or stage < -1;
 * TS_ERR_NOMEM. The plan is unchanged on failure. */
ts_status ts_layout_plan_add(ts_layout_plan *p, const char *name, const ts_layout *layout,
                             int stage);

/* The entry called `name`, or NULL. The pointer is valid until the next
 * ts_layout_plan_add or ts_layout_plan_free. */
ts_layout_plan_entry *ts_layout_plan_find(ts_layout_plan *p, const char *name);

/* Prints one line per entry, in plan order, columns aligned:
 *     wte        stage 0  global [50257x768]  local [25129x768]  tp:S(0) dp:R
 * "stage -" for an unassigned stage; "local" is the block at coordinate 0 on
 * every axis, the largest any rank holds. Nothing for an empty plan.
 * Failure: TS_ERR_INVALID (naming the tensor) if a transform left an invalid
 * layout, before anything is printed; TS_ERR_IO if writing to f fails. */
ts_status ts_layout_plan_print(const ts_layout_plan *p, FILE *f);

/* Releases the entries and leaves an empty plan. NULL is ignored. */
void ts_layout_plan_free(ts_layout_plan *p);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_LAYOUT_H */
