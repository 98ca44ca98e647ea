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
 * The axes are named by whoever builds the mesh (ts_mesh_create_axes below;
 * the registry builds it from the axes plugins claim). What follows describes
 * the standard axes, Megatron-LM's layout (TS_MESH_STANDARD_AXES); an axis a
 * plugin adds is one more slot of the order with the same arithmetic.
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

#include "tessera/mesh_types.h" /* ts_mesh, ts_mesh_kind, TS_MESH_*_MAX */
#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Axes by name
 *
 * A mesh is built from a list of axis definitions. Each axis has a name, a
 * size and a mesh (dense or expert); one axis may be the pipeline, on both
 * meshes with the same groups. Every dense axis, and every expert axis that
 * does not fold onto a dense one, is a slot of the order string; an expert
 * axis with `fold` takes the place of the dense axis it names (etp takes
 * tp's, edp dp's), and a slot without an axis of one mesh has size 1 there.
 * The default order is the slots in definition order. Rank arithmetic is the
 * one above, over however many slots there are.
 * ------------------------------------------------------------------------- */

/* A size meaning "the size of the axis it folds onto" (etp: tp's). */
#define TS_MESH_SIZE_OF_FOLD (-2)

typedef struct ts_mesh_axis_def {
    const char *name;  /* copied                                            */
    int size;          /* >= 1; 0: derived (world / the product of the
                          other axes of its mesh; one per mesh);
                          TS_MESH_SIZE_OF_FOLD                             */
    ts_mesh_kind mesh; /* its mesh (the pipeline: TS_MESH_DENSE)            */
    int pipeline;      /* 1: the pipeline axis, on both meshes; at most one */
    const char *fold;  /* expert axes: the dense axis whose place it takes,
                          or NULL for a place of its own                    */
    int batch;         /* 1: its ranks read different sequences of the
                          batch (it counts in ts_mesh_batch_width)          */
} ts_mesh_axis_def;

/* Builds a mesh over `world` ranks from `naxes` definitions.
 * Inputs:  `order` as above (NULL or "": the slots in definition order);
 *          `tokens`, `ntokens`: the group tokens ts_mesh_json_format lists
 *          (NULL: every axis alone, in ts_mesh_axis_at order); all borrowed.
 * Fails with TS_ERR_INVALID and a message naming the axis or the order for
 * a bad name, a name given twice, a bad fold, two pipelines, two derived
 * axes in one mesh, sizes that do not multiply to the world (the message
 * shows the product), a bad order, or pipelines that differ between the
 * two meshes. */
ts_status ts_mesh_create_axes(int world, const ts_mesh_axis_def *axes, int naxes, const char *order,
                              const char *const *tokens, int ntokens, ts_mesh **out);

/* The axes: the dense mesh's (pipeline included) in definition order, then
 * the expert mesh's. */
int ts_mesh_num_axes(const ts_mesh *mesh);
const char *ts_mesh_axis_at(const ts_mesh *mesh, int i); /* NULL out of range */
/* The index of the axis called `name` (case-insensitive), or -1. */
int ts_mesh_find_axis(const ts_mesh *mesh, const char *name);
/* The mesh of axis i (the pipeline: TS_MESH_DENSE), its size, and whether
 * it is the pipeline; -1 out of range. */
int ts_mesh_axis_kind_at(const ts_mesh *mesh, int i);
int ts_mesh_axis_size_at(const ts_mesh *mesh, int i);
int ts_mesh_axis_is_pipeline(const ts_mesh *mesh, int i);
/* The axes of one mesh (the pipeline included) in the default order of
 * their places, which is the order of a layout's axes over that mesh (the
 * layout plan's): fills up to `cap` names (owned by the mesh) and returns
 * how many there are. */
int ts_mesh_axes_of(const ts_mesh *mesh, ts_mesh_kind kind, const char **names, int cap);
/* The data-parallel width: the product of the sizes of the batch axes (1
 * when there are none). A global batch is cut into this many parts. */
int ts_mesh_batch_width(const ts_mesh *mesh);
/* 1 when axis i cuts the batch (counts in the width), 0 if not, -1 out of
 * range. */
int ts_mesh_axis_cuts_batch_at(const ts_mesh *mesh, int i);
/* The pipeline axis's name, or NULL when the mesh has none. */
const char *ts_mesh_pipeline_axis(const ts_mesh *mesh);
/* By name: the size (-1 for an unknown name), the rank's coordinate (-1 for
 * an unknown name or a rank outside [0, world)), and the rank that differs
 * from `rank` only in its coordinate along the axis (-1 for anything out of
 * range). */
int ts_mesh_size(const ts_mesh *mesh, const char *name);
int ts_mesh_coord_of(const ts_mesh *mesh, int rank, const char *name);
int ts_mesh_rank_along(const ts_mesh *mesh, int rank, const char *name, int coord);

/* Frees a mesh; NULL is a no-op. */
void ts_mesh_destroy(ts_mesh *mesh);

/* The number of ranks. */
int ts_mesh_world(const ts_mesh *mesh);

/* The normalized order naming every slot, e.g. "tp-dp-pp-cp-ep" for the
 * input "tp-dp-pp". Owned by the mesh. */
const char *ts_mesh_order(const ts_mesh *mesh);

/* The group tokens of ts_mesh_json_format, in its order. */
int ts_mesh_num_tokens(const ts_mesh *mesh);
const char *ts_mesh_token_at(const ts_mesh *mesh, int i);

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

/* ---------------------------------------------------------------------------
 * The standard axes: Megatron-LM's layout
 *
 * The built-in strategies claim these names (plugins/tp, cp, ep, dp, pp);
 * the registry gives the ones no plugin claims their standard place with
 * size 1 (etp: tp's size, edp: derived), so existing order strings and
 * `tessera plan` output keep their shape with any set of plugins.
 * TS_MESH_STANDARD_AXES initialises an array of ts_mesh_axis_def in the
 * standard definition order; TS_MESH_JSON_TOKENS are their groups.
 *
 * What follows — ts_mesh_sizes, the ts_mesh_axis enum and the functions on
 * them — is the interface of SDK 1.0-1.1, kept for code written against it:
 * inline wrappers of the functions by name above.
 * ------------------------------------------------------------------------- */
/* clang-format off */
#define TS_MESH_STANDARD_AXES                                                                      \
    {{"tp",  1,                    TS_MESH_DENSE,  0, NULL, 0},                                    \
     {"cp",  1,                    TS_MESH_DENSE,  0, NULL, 0},                                    \
     {"ep",  1,                    TS_MESH_EXPERT, 0, NULL, 0},                                    \
     {"dp",  1,                    TS_MESH_DENSE,  0, NULL, 1},                                    \
     {"pp",  1,                    TS_MESH_DENSE,  1, NULL, 0},                                    \
     {"etp", TS_MESH_SIZE_OF_FOLD, TS_MESH_EXPERT, 0, "tp", 0},                                    \
     {"edp", 0,                    TS_MESH_EXPERT, 0, "dp", 0}}
/* clang-format on */
#define TS_MESH_STANDARD_COUNT 7

/* The default order, fastest-varying axis first (Megatron-LM's default). */
#define TS_MESH_DEFAULT_ORDER "tp-cp-ep-dp-pp"

/* Every standard axis. TS_AXIS_PP is shared by the two meshes. */
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

/* The axis's name ("tp", ..., "edp"), or "?" for a value out of range. */
static inline const char *ts_mesh_axis_name(ts_mesh_axis axis) {
    static const char *const names[TS_AXIS_COUNT] = {"tp", "cp", "dp", "pp", "ep", "etp", "edp"};
    return (int)axis >= 0 && axis < TS_AXIS_COUNT ? names[axis] : "?";
}

/* Looks an axis up by name (case-insensitive). Returns TS_ERR_INVALID, with
 * a message listing the valid names, for anything else. */
static inline ts_status ts_mesh_axis_from_name(const char *name, ts_mesh_axis *out) {
    for (int a = 0; name && a < TS_AXIS_COUNT; a++) {
        const char *s = ts_mesh_axis_name((ts_mesh_axis)a), *n = name;
        while (*s && (*n | 0x20) == *s)
            n++, s++;
        if (!*s && !*n) {
            *out = (ts_mesh_axis)a;
            return TS_OK;
        }
    }
    return ts_error(TS_ERR_INVALID,
                    "mesh: unknown axis \"%s\" (valid: tp, cp, dp, pp, ep, etp, edp)",
                    name ? name : "(null)");
}

/* Builds the standard mesh from `sizes` (borrowed) and `order` (NULL or ""
 * for the default); the errors of ts_mesh_create_axes. */
static inline ts_status ts_mesh_create(const ts_mesh_sizes *sizes, const char *order,
                                       ts_mesh **out) {
    *out = NULL;
    if (!sizes) return ts_error(TS_ERR_INVALID, "mesh: no sizes given");
    ts_mesh_axis_def d[TS_MESH_STANDARD_COUNT] = TS_MESH_STANDARD_AXES;
    const int given[TS_MESH_STANDARD_COUNT] = {sizes->tp, sizes->cp,  sizes->ep, sizes->dp,
                                               sizes->pp, sizes->etp, sizes->edp};
    for (int i = 0; i < TS_MESH_STANDARD_COUNT; i++)
        if (given[i] || i == 3) d[i].size = given[i]; /* dp: 0 -> derived */
    const char *const tokens[] = {TS_MESH_JSON_TOKENS};
    return ts_mesh_create_axes(sizes->world, d, TS_MESH_STANDARD_COUNT, order, tokens,
                               (int)(sizeof tokens / sizeof tokens[0]), out);
}

/* The size of an axis after defaults and derivation; -1 for a bad axis. */
static inline int ts_mesh_axis_size(const ts_mesh *mesh, ts_mesh_axis axis) {
    return (int)axis >= 0 && axis < TS_AXIS_COUNT ? ts_mesh_size(mesh, ts_mesh_axis_name(axis))
                                                  : -1;
}

/* The rank's coordinate along `axis` (in its own mesh), in [0, size);
 * -1 for a rank outside [0, world) or a bad axis. */
static inline int ts_mesh_coord(const ts_mesh *mesh, int rank, ts_mesh_axis axis) {
    return (int)axis >= 0 && axis < TS_AXIS_COUNT
               ? ts_mesh_coord_of(mesh, rank, ts_mesh_axis_name(axis))
               : -1;
}

/* The rank whose coordinates, in the mesh of `axis`, equal those of `rank`
 * except that its coordinate along `axis` is `coord`. E.g. the next pipeline
 * stage of rank r is ts_mesh_rank_at(m, r, TS_AXIS_PP, stage + 1). Returns -1
 * for a rank, axis or coordinate out of range. */
static inline int ts_mesh_rank_at(const ts_mesh *mesh, int rank, ts_mesh_axis axis, int coord) {
    return (int)axis >= 0 && axis < TS_AXIS_COUNT
               ? ts_mesh_rank_along(mesh, rank, ts_mesh_axis_name(axis), coord)
               : -1;
}

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_MESH_H */
