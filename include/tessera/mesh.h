/*
 * mesh.h — the process mesh: which rank holds which coordinate on every
 * parallel axis, and which ranks form the group of an axis (or of a product of
 * axes) that a communicator is split for.
 *
 * This header is part of the SDK installed under include/tessera/. The mesh is
 * pure arithmetic on rank numbers: it knows no MPI, no communicator and no
 * plugin. The communicator layer asks it for (group index, position) pairs and
 * splits; `tessera plan` prints it; plugins ask it for coordinates.
 *
 * Two meshes over one world (Megatron-LM's "MoE parallel folding")
 * ----------------------------------------------------------------
 *   dense mesh   tp x cp x dp x pp          (attention, dense MLP, embeddings)
 *   expert mesh  etp x ep x edp x pp        (the experts of MoE layers)
 * Both products must equal the world size, and both meshes must put every rank
 * on the same pipeline stage (their pp groups are identical), so the pipeline
 * is shared while the rest of the world is folded two different ways.
 *
 * Rank arithmetic (Megatron-LM's RankGenerator, core/parallel_state.py)
 * --------------------------------------------------------------------
 * The order string names five slots — tp, cp, ep, dp, pp — fastest-varying
 * first; the default is "tp-cp-ep-dp-pp". Each mesh fills the slots with its
 * own sizes:
 *
 *     slot    dense mesh   expert mesh
 *     tp      tp           etp
 *     cp      cp           1
 *     ep      1            ep
 *     dp      dp           edp
 *     pp      pp           pp
 *
 * With the slots in order s_0 (fastest) .. s_4 and their sizes n_0 .. n_4,
 * stride_0 = 1, stride_i = stride_{i-1} * n_{i-1}, and
 *
 *     rank = sum_i coord(s_i) * stride_i,    coord(s_i) = rank / stride_i % n_i
 *
 * Example: world 16, tp 2, pp 4 (dp derived as 2), default order:
 *     tp groups  [0,1] [2,3] [4,5] ... [14,15]
 *     dp groups  [0,2] [1,3] [4,6] [5,7] ... [13,15]
 *     pp groups  [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]
 *
 * Groups of a product of axes ("masked" groups)
 * ---------------------------------------------
 * For a token such as "tp-dp", the ranks that differ only in the named axes
 * and share every other coordinate form one group (Megatron-LM's
 * generate_masked_orthogonal_rank_groups). Within a group, members are listed
 * ascending, which is the same as counting the named axes in mixed radix,
 * fastest axis of the order first; a rank's place in that list is its
 * `position` (its rank inside the group communicator). Groups are numbered by
 * counting the other axes the same way, which lists them ordered by their
 * first rank. The order of names inside a token does not matter: "dp-cp" and
 * "cp-dp" are the same group.
 *
 * Which mesh a token refers to follows from its names: tp, cp, dp are dense;
 * etp, ep, edp are expert; pp belongs to both (its groups are the same in
 * both, so a token of pp alone is answered from the dense mesh). A token that
 * mixes dense and expert names ("tp-ep") is rejected: write "etp-ep".
 *
 * Order strings accepted (documented in docs/mesh.md)
 * ----------------------------------------------------
 *   - NULL or "" means the default "tp-cp-ep-dp-pp".
 *   - Names are tp, cp, ep, dp, pp separated by '-', case-insensitive; any
 *     permutation of all five is accepted.
 *   - A name may be left out when its size is 1 in both meshes (cp is always
 *     1 on the expert side, ep always 1 on the dense side); it is then placed
 *     after the named ones, where a size-1 axis changes no rank. So
 *     "tp-dp-pp" and "tp-pp-dp" work for a model with no cp and no ep.
 *     (Megatron-LM does the same, appending missing names of size 1.)
 *   - Rejected, with a message naming the string: an unknown name (etp and
 *     edp included: they take the tp and dp slots), a name given twice, an
 *     empty name ("tp--dp"), and leaving out a name whose size is above 1.
 * ts_mesh_order returns the normalized string that names all five slots.
 */
#ifndef TESSERA_MESH_H
#define TESSERA_MESH_H

#include <stddef.h>
#include <stdio.h>

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The default order, fastest-varying axis first (Megatron-LM's default). */
#define TS_MESH_DEFAULT_ORDER "tp-cp-ep-dp-pp"

/* The two meshes that cover the world. */
typedef enum ts_mesh_kind {
    TS_MESH_DENSE = 0,  /* tp x cp x dp x pp   */
    TS_MESH_EXPERT = 1, /* etp x ep x edp x pp */
} ts_mesh_kind;

/* Every axis of both meshes. TS_AXIS_PP is shared by the two meshes. */
typedef enum ts_mesh_axis {
    TS_AXIS_TP = 0,  /* dense: tensor parallel                       */
    TS_AXIS_CP = 1,  /* dense: context (sequence) parallel           */
    TS_AXIS_DP = 2,  /* dense: data parallel                         */
    TS_AXIS_PP = 3,  /* both:  pipeline parallel                     */
    TS_AXIS_EP = 4,  /* expert: expert parallel (experts split)      */
    TS_AXIS_ETP = 5, /* expert: tensor parallel inside an expert     */
    TS_AXIS_EDP = 6, /* expert: data parallel of the expert weights  */
    TS_AXIS_COUNT = 7,
} ts_mesh_axis;

/* The axis's name ("tp", ..., "edp"), or "?" for a value out of range. */
const char *ts_mesh_axis_name(ts_mesh_axis axis);

/* Looks an axis up by name (case-insensitive). Returns TS_ERR_INVALID, with
 * a message listing the valid names, for anything else. */
ts_status ts_mesh_axis_from_name(const char *name, ts_mesh_axis *out);

/* The requested sizes. Zero means "not given":
 *   world        required, >= 1
 *   tp, cp, pp   0 -> 1
 *   ep           0 -> 1
 *   dp           0 -> derived: world / (tp * cp * pp), which must divide
 *   etp          0 -> tp (Megatron-LM's default expert_tensor_parallel_size)
 *   edp          0 -> derived: world / (etp * ep * pp), which must divide
 * Negative sizes are rejected. A zero-initialized struct with only `world`
 * set is a valid request: pure data parallelism over the world. */
typedef struct ts_mesh_sizes {
    int world;
    int tp, cp, ep, dp, pp;
    int etp, edp;
} ts_mesh_sizes;

/* Opaque: the validated sizes, the normalized order and the strides of both
 * meshes. Immutable after creation, so one mesh may be read from any thread. */
typedef struct ts_mesh ts_mesh;

/* Builds and validates a mesh.
 * Inputs:  `sizes` (borrowed for the call) and `order` (NULL or "" for the
 *          default; see the top of this file for what is accepted).
 * Outputs: on TS_OK, *out owns a new mesh; free it with ts_mesh_destroy.
 * Fails with TS_ERR_INVALID, *out set to NULL, and a message that shows the
 * arithmetic, for:
 *   - a world below 1 or a negative size;
 *   - "dense mesh: tp 2 x cp 1 x dp 3 x pp 2 = 12, but the world has 16 ranks"
 *     (and the same for "expert mesh: etp .. x ep .. x edp .. x pp ..");
 *   - a derived dp or edp whose divisor does not divide the world;
 *   - a bad order string;
 *   - pipeline groups that differ between the two meshes (possible only when
 *     pp is not the slowest axis of the order and edp != dp). */
ts_status ts_mesh_create(const ts_mesh_sizes *sizes, const char *order, ts_mesh **out);

/* Frees a mesh; NULL is a no-op. */
void ts_mesh_destroy(ts_mesh *mesh);

/* The number of ranks. */
int ts_mesh_world(const ts_mesh *mesh);

/* The normalized order naming all five slots, e.g. "tp-dp-pp-cp-ep" for the
 * input "tp-dp-pp". Owned by the mesh. */
const char *ts_mesh_order(const ts_mesh *mesh);

/* The size of an axis after defaults and derivation; -1 for a bad axis. */
int ts_mesh_axis_size(const ts_mesh *mesh, ts_mesh_axis axis);

/* The rank's coordinate along `axis` (in its own mesh), in [0, size);
 * -1 for a rank outside [0, world) or a bad axis. */
int ts_mesh_coord(const ts_mesh *mesh, int rank, ts_mesh_axis axis);

/* The rank whose coordinates, in the mesh of `axis`, equal those of `rank`
 * except that its coordinate along `axis` is `coord`. E.g. the next pipeline
 * stage of rank r is ts_mesh_rank_at(m, r, TS_AXIS_PP, stage + 1). Returns -1
 * for a rank, axis or coordinate out of range. */
int ts_mesh_rank_at(const ts_mesh *mesh, int rank, ts_mesh_axis axis, int coord);

/* ---------------------------------------------------------------------------
 * Groups. `axes` is a token: one axis name or several joined by '-', e.g.
 * "tp", "dp-cp", "tp-dp-cp", "tp-pp", "ep", "etp-ep", "etp-ep-pp", "edp".
 * Token errors (TS_ERR_INVALID, message names the token): an unknown name, a
 * name given twice, an empty name, and dense and expert names mixed.
 * ------------------------------------------------------------------------- */

/* Every group of one token: `count` groups of `size` ranks each, stored
 * contiguously: group g is ranks[g * size .. g * size + size), ascending;
 * groups are ordered by their first rank (so group g is the one whose
 * `index` ts_mesh_group_of reports as g). count * size == world. */
typedef struct ts_mesh_groups {
    int count;
    int size;
    int *ranks; /* owned by the struct; release with ts_mesh_groups_free */
} ts_mesh_groups;

/* Fills `out` with every group of `axes`.
 * Outputs: on TS_OK, `out` owns its `ranks` array; on failure `out` is
 *          zeroed and holds nothing. TS_ERR_NOMEM if the array cannot be had.
 */
ts_status ts_mesh_groups_init(ts_mesh_groups *out, const ts_mesh *mesh, const char *axes);

/* Releases the ranks array and zeroes the struct; a zeroed struct is a no-op.
 */
void ts_mesh_groups_free(ts_mesh_groups *groups);

/* The group of one rank, as a communicator split wants it: split with
 * color = index and key = position. */
typedef struct ts_mesh_group {
    int index;    /* which group, 0 .. count-1, ordered by first rank     */
    int position; /* the rank's place in the ascending member list        */
    int size;     /* ranks in the group: the product of the axes' sizes   */
    int count;    /* groups of this token: world / size                   */
} ts_mesh_group;

/* Finds the group of `axes` that holds `rank`.
 * Inputs:  `members` may be NULL (capacity ignored); otherwise it receives the
 *          group's ranks ascending and must hold at least `size` ints (the
 *          size is the product of the axis sizes, or ts_mesh_group_of with
 *          members NULL tells it).
 * Outputs: *out on TS_OK. TS_ERR_INVALID for a bad token, a rank outside
 *          [0, world), or `capacity` below the group size. */
ts_status ts_mesh_group_of(const ts_mesh *mesh, const char *axes, int rank, ts_mesh_group *out,
                           int *members, int capacity);

/* ---------------------------------------------------------------------------
 * JSON, the shape `tessera plan --json` prints under its mesh:
 *   {"world":16,"order":"tp-cp-ep-dp-pp",
 *    "sizes":{"tp":2,"cp":2,"dp":2,"pp":2,"ep":4,"etp":1,"edp":2},
 *    "groups":{"tp":[[0,1],[2,3],...],...}}
 * on one line, without a trailing newline. "groups" holds, in this order,
 * the dense tokens   tp cp dp pp dp-cp tp-cp tp-dp tp-dp-cp tp-pp
 * and the expert ones ep etp edp etp-ep etp-ep-pp
 * — every single axis, plus the product groups Megatron-LM builds
 * communicators for (TS_MESH_JSON_TOKENS lists them).
 * ------------------------------------------------------------------------- */
#define TS_MESH_JSON_TOKENS                                                                        \
    "tp", "cp", "dp", "pp", "dp-cp", "tp-cp", "tp-dp", "tp-dp-cp", "tp-pp", "ep", "etp", "edp",    \
        "etp-ep", "etp-ep-pp"

/* snprintf-style: writes at most `cap` bytes (NUL included) into `buf`, which
 * may be NULL when cap is 0, and returns the length of the whole JSON text
 * (without the NUL) — call once with cap 0 to size the buffer. */
size_t ts_mesh_json_format(const ts_mesh *mesh, char *buf, size_t cap);

/* Writes the JSON text and a newline to `f`; TS_ERR_IO if the write fails,
 * TS_ERR_NOMEM if the text cannot be built. */
ts_status ts_mesh_json_write(const ts_mesh *mesh, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_MESH_H */
