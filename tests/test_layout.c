/*
 * test_layout.c — layouts and ts_redistribute against serial references.
 *
 * Modes:
 *   test_layout --unit   no MPI: local shape and offset arithmetic (hand-made
 *                        cases, the tiling of every block of many layouts,
 *                        nesting), printing, validation errors, the layout
 *                        plan, and every redistribution on a size-1 "self"
 *                        communicator plus its argument errors
 *   test_layout          under mpirun (2, 4, 8 ranks): every (from, to) pair
 *                        of {R, S(0), S(1), P} on the world axis, for global
 *                        shapes 8x12 (divides), 7x5 (does not) and 3x5 (fewer
 *                        rows than ranks on 4 and 8: empty shards), in f32,
 *                        bf16 and i32; then, on 4 and 8 ranks, a 2 x n/2 mesh
 *                        (tp x dp) changing one axis while the other shards
 *
 * Every rank builds its input block from a deterministic global tensor X of
 * small integers; a Partial input is one of n addends that sum to X exactly
 * (every partial sum stays below 256 in magnitude, so bf16 sums are exact
 * too). Results are compared element for element, exactly, with the block
 * the test computes on its own (ref_block, written independently of
 * core/mesh/layout.c). For "-> P" the documented addend is checked, and the sum of
 * the outputs over the axis is checked against X. The communicator's
 * counters must show exactly the one collective of the table in layout.h.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */

#include <stdio.h>  /* printf, tmpfile */
#include <stdlib.h> /* calloc, free */
#include <string.h> /* strcmp, strstr */
#include <time.h>   /* clock_gettime */

#include "tessera/comm.h"
#include "tessera/layout.h"

static int g_cases; /* redistributions checked     */

#include "test_ranks.h"

#define FAILS(expr, needle)                                                                        \
    do {                                                                                           \
        ts_status f_st_ = (expr);                                                                  \
        CHECK(f_st_ == TS_ERR_INVALID && strstr(ts_last_error(), needle),                          \
              "%s -> %s '%s' (wanted invalid, '%s')", #expr, ts_status_name(f_st_),                \
              ts_last_error(), needle);                                                            \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------------
 * The reference: global values and blocks, computed without core/mesh/layout.c
 * ------------------------------------------------------------------------- */

/* The global tensor X: small integers in [-8, 8]. */
static int gval(int64_t i, int64_t j) {
    return (int)((i * 7 + j * 3 + 1) % 17) - 8;
}

/* Rank r's addend of X over n ranks: r >= 1 in [-3, 3]; rank 0 the rest. */
static int addend(int r, int n, int64_t i, int64_t j) {
    if (r > 0) return (int)((i * 5 + j * 11 + r * 3) % 7) - 3;
    int v = gval(i, j);
    for (int q = 1; q < n; q++)
        v -= addend(q, n, i, j);
    return v;
}

/* The block at coords of a 2-D layout (axis `skip` treated as R, -1: none),
 * by the rule: part c of n over extent d has d/n + (c < d%n) elements. */
static void ref_block(const ts_layout *l, const int *coords, int skip, int64_t *off, int64_t *shp) {
    for (int d = 0; d < l->ndim; d++) {
        off[d] = 0;
        shp[d] = l->shape[d];
    }
    for (int a = 0; a < l->naxes; a++) {
        if (a == skip || l->axes[a].placement.kind != TS_PLACEMENT_SHARD) continue;
        int d = l->axes[a].placement.dim;
        int64_t n = l->axes[a].size, c = coords[a];
        int64_t base = shp[d] / n, rem = shp[d] % n;
        off[d] += c * base + (c < rem ? c : rem);
        shp[d] = base + (c < rem ? 1 : 0);
    }
}

/* What a rank's block holds at a global index. */
typedef enum fill {
    FILL_X,        /* X                                               */
    FILL_ADDEND,   /* this rank's addend of X over the axis            */
    FILL_RANK0,    /* X on coordinate 0 of the axis, 0 elsewhere       */
    FILL_OWNBLOCK, /* X inside `own` (a global box), 0 outside         */
} fill;

typedef struct fill_ctx {
    fill kind;
    int c, n; /* coordinate and size of the axis */
    int64_t own_off[2], own_shp[2];
} fill_ctx;

static int fill_value(const fill_ctx *f, int64_t i, int64_t j) {
    switch (f->kind) {
    case FILL_X: return gval(i, j);
    case FILL_ADDEND: return addend(f->c, f->n, i, j);
    case FILL_RANK0: return f->c == 0 ? gval(i, j) : 0;
    case FILL_OWNBLOCK:
        return i >= f->own_off[0] && i < f->own_off[0] + f->own_shp[0] && j >= f->own_off[1] &&
                       j < f->own_off[1] + f->own_shp[1]
                   ? gval(i, j)
                   : 0;
    }
    return 0;
}

static void put(void *data, ts_dtype dt, int64_t k, int v) {
    switch (dt) {
    case TS_F32: ((float *)data)[k] = (float)v; break;
    case TS_BF16: ((uint16_t *)data)[k] = ts_f32_to_bf16((float)v); break;
    case TS_I32: ((int32_t *)data)[k] = v; break;
    default: break;
    }
}

static double get(const void *data, ts_dtype dt, int64_t k) {
    switch (dt) {
    case TS_F32: return ((const float *)data)[k];
    case TS_BF16: return ts_bf16_to_f32(((const uint16_t *)data)[k]);
    case TS_I32: return ((const int32_t *)data)[k];
    default: return 0;
    }
}

/* Allocates t with the 2-D block (off, shp) of the values f. */
static ts_status make_block(ts_tensor *t, ts_dtype dt, const int64_t *off, const int64_t *shp,
                            const fill_ctx *f) {
    TS_TRY(ts_tensor_alloc(t, "x", dt, 2, shp, TS_MEM_ACTS));
    for (int64_t i = 0; i < shp[0]; i++)
        for (int64_t j = 0; j < shp[1]; j++)
            put(t->data, dt, i * shp[1] + j, fill_value(f, off[0] + i, off[1] + j));
    return TS_OK;
}

/* Compares t with the block (off, shp) of f; returns the mismatches. */
static int compare_block(const ts_tensor *t, const int64_t *off, const int64_t *shp,
                         const fill_ctx *f, const char *what) {
    if (t->ndim != 2 || t->shape[0] != shp[0] || t->shape[1] != shp[1]) {
        CHECK(0, "%s: shape [%lldx%lld], want [%lldx%lld]", what, (long long)t->shape[0],
              (long long)t->shape[1], (long long)shp[0], (long long)shp[1]);
        return 1;
    }
    int bad = 0;
    for (int64_t i = 0; i < shp[0]; i++)
        for (int64_t j = 0; j < shp[1]; j++) {
            double got = get(t->data, t->dtype, i * shp[1] + j);
            int want = fill_value(f, off[0] + i, off[1] + j);
            if (got != (double)want && bad++ < 3)
                CHECK(0, "%s: local (%lld,%lld) global (%lld,%lld) = %g, want %d", what,
                      (long long)i, (long long)j, (long long)(off[0] + i), (long long)(off[1] + j),
                      got, want);
        }
    if (bad > 3) CHECK(0, "%s: %d mismatches in all", what, bad);
    return bad;
}

/* The collective the contract names for a change, written out again. */
static int expected_op(ts_placement a, ts_placement b) {
    if (a.kind == b.kind && (a.kind != TS_PLACEMENT_SHARD || a.dim == b.dim)) return -1;
    if (a.kind == TS_PLACEMENT_PARTIAL && b.kind == TS_PLACEMENT_REPLICATE)
        return TS_COMM_ALL_REDUCE;
    if (a.kind == TS_PLACEMENT_PARTIAL && b.kind == TS_PLACEMENT_SHARD)
        return TS_COMM_REDUCE_SCATTER;
    if (a.kind == TS_PLACEMENT_SHARD && b.kind == TS_PLACEMENT_REPLICATE) return TS_COMM_ALL_GATHER;
    if (a.kind == TS_PLACEMENT_SHARD && b.kind == TS_PLACEMENT_SHARD) return TS_COMM_ALL_TO_ALL;
    return -1;
}

/* ---------------------------------------------------------------------------
 * One redistribution, checked
 * ------------------------------------------------------------------------- */

/* Changes axis `axis` of `base` (2-D) from pf to pt on `comm`, this rank at
 * `coords`, and checks the output, the counters and (for -> P) the sum. */
static void run_case(ts_comm *comm, const ts_layout *base, int axis, const int *coords,
                     ts_placement pf, ts_placement pt, ts_dtype dt) {
    ts_layout from = *base, to = *base;
    OK(ts_layout_set_placement(&from, axis, pf));
    OK(ts_layout_set_placement(&to, axis, pt));
    char what[256], df[TS_LAYOUT_DESCRIBE_MAX], dto[TS_LAYOUT_DESCRIBE_MAX];
    snprintf(what, sizeof what, "[%lldx%lld] %s -> %s on '%s' (%s)", (long long)base->shape[0],
             (long long)base->shape[1], ts_layout_describe(&from, df, sizeof df),
             ts_layout_describe(&to, dto, sizeof dto), base->axes[axis].name, ts_dtype_name(dt));
    int n = base->axes[axis].size, c = coords[axis];

    int64_t ioff[2], ishp[2], ooff[2], oshp[2];
    ref_block(&from, coords, -1, ioff, ishp);
    ref_block(&to, coords, -1, ooff, oshp);
    fill_ctx fin = {pf.kind == TS_PLACEMENT_PARTIAL ? FILL_ADDEND : FILL_X, c, n, {0, 0}, {0, 0}};
    fill_ctx fout = {FILL_X, c, n, {0, 0}, {0, 0}};
    if (pt.kind == TS_PLACEMENT_PARTIAL) {
        if (pf.kind == TS_PLACEMENT_PARTIAL) fout.kind = FILL_ADDEND;
        if (pf.kind == TS_PLACEMENT_REPLICATE) fout.kind = FILL_RANK0;
        if (pf.kind == TS_PLACEMENT_SHARD) {
            fout.kind = FILL_OWNBLOCK;
            for (int d = 0; d < 2; d++) {
                fout.own_off[d] = ioff[d];
                fout.own_shp[d] = ishp[d];
            }
        }
    }

    ts_tensor in, out;
    OK(make_block(&in, dt, ioff, ishp, &fin));
    ts_comm_counters_reset(comm);
    ts_status st = ts_redistribute(&from, &to, axis, comm, coords, &in, &out);
    g_cases++;
    CHECK(st == TS_OK, "%s: %s", what, ts_last_error());
    if (st == TS_OK) {
        CHECK(strcmp(out.name, "x") == 0 && out.dtype == dt && out.cat == TS_MEM_ACTS &&
                  out.owns_data,
              "%s: out is '%s' %s cat %d owns %d", what, out.name, ts_dtype_name(out.dtype),
              (int)out.cat, out.owns_data);
        compare_block(&out, ooff, oshp, &fout, what);
        int op = expected_op(pf, pt);
        CHECK(op == ts_redistribute_collective(pf, pt),
              "%s: ts_redistribute_collective %d, want %d", what,
              ts_redistribute_collective(pf, pt), op);
        for (int k = 0; k < TS_COMM_NOPS; k++) {
            uint64_t calls = ts_comm_counter(comm, (ts_comm_op)k).calls;
            CHECK(calls == (k == op ? 1u : 0u), "%s: %llu %s calls", what,
                  (unsigned long long)calls, ts_comm_op_name((ts_comm_op)k));
        }
        if (pt.kind == TS_PLACEMENT_PARTIAL) { /* the addends must sum to X */
            OK(ts_comm_all_reduce(comm, out.data, out.data, (size_t)ts_tensor_numel(&out), dt,
                                  TS_REDUCE_SUM));
            fill_ctx fx = {FILL_X, c, n, {0, 0}, {0, 0}};
            char sum[300];
            snprintf(sum, sizeof sum, "%s, sum over the axis", what);
            compare_block(&out, ooff, oshp, &fx, sum);
        }
    }
    ts_tensor_free(&out);
    ts_tensor_free(&in);
}

static const ts_dtype k_dtypes[] = {TS_F32, TS_BF16, TS_I32};

static ts_placement placement_of(int k) {
    switch (k) {
    case 0: return ts_placement_replicate();
    case 1: return ts_placement_shard(0);
    case 2: return ts_placement_shard(1);
    default: return ts_placement_partial();
    }
}

/* All 16 pairs of {R, S(0), S(1), P} on one axis of `base`; `skip_dim`
 * (-1: none) leaves out S(skip_dim) (a later axis shards it). */
static void run_pairs(ts_comm *comm, const ts_layout *base, int axis, const int *coords,
                      ts_dtype dt, int skip_dim) {
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++) {
            ts_placement pf = placement_of(a), pt = placement_of(b);
            if (skip_dim >= 0 && ((pf.kind == TS_PLACEMENT_SHARD && pf.dim == skip_dim) ||
                                  (pt.kind == TS_PLACEMENT_SHARD && pt.dim == skip_dim)))
                continue;
            run_case(comm, base, axis, coords, pf, pt, dt);
        }
}

/* ---------------------------------------------------------------------------
 * Unit mode (no MPI)
 * ------------------------------------------------------------------------- */

static void unit_blocks(void) {
    ts_layout l;
    int64_t shape[2] = {7, 5}, off[2], shp[2];
    OK(ts_layout_init(&l, 2, shape));
    OK(ts_layout_add_axis(&l, "tp", 4, ts_placement_shard(0)));
    const int64_t rows7[4][2] = {{0, 2}, {2, 2}, {4, 2}, {6, 1}}; /* offset, count */
    for (int c = 0; c < 4; c++) {
        OK(ts_layout_local_block(&l, &c, off, shp));
        CHECK(off[0] == rows7[c][0] && shp[0] == rows7[c][1] && off[1] == 0 && shp[1] == 5,
              "7x5 S(0) on 4, part %d: offset %lld,%lld shape %lld,%lld", c, (long long)off[0],
              (long long)off[1], (long long)shp[0], (long long)shp[1]);
    }
    shape[0] = 3; /* fewer rows than ranks: the last shard is empty at offset 3 */
    OK(ts_layout_init(&l, 2, shape));
    OK(ts_layout_add_axis(&l, "tp", 4, ts_placement_shard(0)));
    for (int c = 0; c < 4; c++) {
        OK(ts_layout_local_shape(&l, &c, shp));
        OK(ts_layout_local_offset(&l, &c, off));
        CHECK(shp[0] == (c < 3) && off[0] == (c < 3 ? c : 3) && shp[1] == 5,
              "3x5 S(0) on 4, part %d: offset %lld shape %lld", c, (long long)off[0],
              (long long)shp[0]);
    }
    /* nesting, the header's example: [10], a:S(0) size 2, b:S(0) size 3 */
    int64_t ten = 10;
    OK(ts_layout_init(&l, 1, &ten));
    OK(ts_layout_add_axis(&l, "a", 2, ts_placement_shard(0)));
    OK(ts_layout_add_axis(&l, "b", 3, ts_placement_shard(0)));
    const int64_t nest[2][3][2] = {{{0, 2}, {2, 2}, {4, 1}}, {{5, 2}, {7, 2}, {9, 1}}};
    for (int a = 0; a < 2; a++)
        for (int b = 0; b < 3; b++) {
            int co[2] = {a, b};
            OK(ts_layout_local_block(&l, co, off, shp));
            CHECK(off[0] == nest[a][b][0] && shp[0] == nest[a][b][1],
                  "nested (%d,%d): [%lld, +%lld)", a, b, (long long)off[0], (long long)shp[0]);
        }
    /* NULL coords: coordinate 0 everywhere; R and P do not change the shape */
    int64_t s3[3] = {6, 4, 9};
    OK(ts_layout_init(&l, 3, s3));
    OK(ts_layout_add_axis(&l, "dp", 4, ts_placement_partial()));
    OK(ts_layout_add_axis(&l, "tp", 4, ts_placement_shard(2)));
    OK(ts_layout_add_axis(&l, "cp", 3, ts_placement_replicate()));
    int64_t o3[3], p3[3];
    OK(ts_layout_local_block(&l, NULL, o3, p3));
    CHECK(p3[0] == 6 && p3[1] == 4 && p3[2] == 3 && o3[0] == 0 && o3[1] == 0 && o3[2] == 0,
          "NULL coords: shape %lld,%lld,%lld", (long long)p3[0], (long long)p3[1],
          (long long)p3[2]);
    int bad[3] = {0, 4, 0};
    FAILS(ts_layout_local_shape(&l, bad, p3), "coordinate 4 on axis 'tp' of size 4");
}

/* Every block of many layouts: inside the tensor, and all blocks together
 * cover every element exactly (product of the non-sharding axis sizes)
 * times. */
static void unit_tiling(void) {
    static const int64_t shapes[][4] = {{7, 5, 3, 2}, {3, 1, 0, 4}, {16, 9, 5, 1}, {1, 2, 3, 4}};
    static const int sizes[] = {1, 2, 3, 4, 5, 8};
    int layouts = 0;
    for (int si = 0; si < 4; si++)
        for (int ndim = 1; ndim <= 4; ndim++)
            for (int combo = 0; combo < 36; combo++) {
                ts_layout l;
                OK(ts_layout_init(&l, ndim, shapes[si]));
                /* up to three axes: placement from combo, sizes from the table */
                int naxes = 1 + combo % 3, repl = 1;
                for (int a = 0; a < naxes; a++) {
                    int code = (combo / 3 + a * 5) % (ndim + 2);
                    ts_placement p = code < ndim    ? ts_placement_shard(code)
                                     : code == ndim ? ts_placement_replicate()
                                                    : ts_placement_partial();
                    int size = sizes[(combo + 2 * a) % 6];
                    char name[24];
                    snprintf(name, sizeof name, "ax%d", a);
                    OK(ts_layout_add_axis(&l, name, size, p));
                    if (p.kind != TS_PLACEMENT_SHARD) repl *= size;
                }
                int64_t total = 1;
                for (int d = 0; d < ndim; d++)
                    total *= l.shape[d];
                int *cover = calloc((size_t)(total ? total : 1), sizeof *cover);
                int co[3] = {0, 0, 0};
                for (;;) {
                    int64_t off[4], shp[4];
                    OK(ts_layout_local_block(&l, co, off, shp));
                    int64_t cnt = 1;
                    for (int d = 0; d < ndim; d++) {
                        CHECK(off[d] >= 0 && shp[d] >= 0 && off[d] + shp[d] <= l.shape[d],
                              "block outside the tensor");
                        cnt *= shp[d];
                    }
                    for (int64_t k = 0; k < cnt; k++) { /* row-major walk of the block */
                        int64_t rem = k, flat = 0, idx[4];
                        for (int d = ndim - 1; d >= 0; d--) {
                            idx[d] = rem % shp[d];
                            rem /= shp[d];
                        }
                        for (int d = 0; d < ndim; d++)
                            flat = flat * l.shape[d] + off[d] + idx[d];
                        cover[flat]++;
                    }
                    int a = 0;
                    while (a < naxes && ++co[a] == l.axes[a].size)
                        co[a++] = 0;
                    if (a == naxes) break;
                }
                for (int64_t k = 0; k < total; k++)
                    if (cover[k] != repl) {
                        char desc[TS_LAYOUT_DESCRIBE_MAX];
                        CHECK(0, "%s ndim %d: element %lld covered %d times, want %d",
                              ts_layout_describe(&l, desc, sizeof desc), ndim, (long long)k,
                              cover[k], repl);
                        break;
                    }
                free(cover);
                layouts++;
            }
    CHECK(layouts == 4 * 4 * 36, "tiling: %d layouts", layouts);
}

static void unit_print_and_errors(void) {
    char buf[TS_LAYOUT_DESCRIBE_MAX], p[8];
    ts_layout l;
    int64_t shape[2] = {8, 12};
    OK(ts_layout_init(&l, 2, shape));
    CHECK(strcmp(ts_layout_describe(&l, buf, sizeof buf), "-") == 0, "no axes: '%s'", buf);
    OK(ts_layout_add_axis(&l, "tp", 2, ts_placement_shard(0)));
    OK(ts_layout_add_axis(&l, "dp", 4, ts_placement_replicate()));
    OK(ts_layout_add_axis(&l, "pp", 2, ts_placement_partial()));
    CHECK(strcmp(ts_layout_describe(&l, buf, sizeof buf), "tp:S(0) dp:R pp:P") == 0, "'%s'", buf);
    char small[6];
    CHECK(strcmp(ts_layout_describe(&l, small, sizeof small), "tp:S(") == 0, "truncated '%s'",
          small);
    CHECK(strcmp(ts_placement_str(ts_placement_shard(3), p, sizeof p), "S(3)") == 0, "S(3)");
    CHECK(strcmp(ts_layout_shape_str(2, shape, buf, sizeof buf), "[8x12]") == 0, "'%s'", buf);
    CHECK(strcmp(ts_layout_shape_str(0, NULL, buf, sizeof buf), "[]") == 0, "'%s'", buf);
    CHECK(ts_layout_axis_index(&l, "dp") == 1 && ts_layout_axis_index(&l, "ep") == -1, "index");
    ts_layout m = l;
    CHECK(ts_layout_equal(&l, &m), "equal");
    OK(ts_layout_set_placement(&m, 1, ts_placement_shard(1)));
    CHECK(!ts_layout_equal(&l, &m), "not equal after a change");

    /* errors name what is wrong and leave the layout unchanged */
    FAILS(ts_layout_add_axis(&l, "dp", 2, ts_placement_replicate()), "'dp' is named twice");
    FAILS(ts_layout_add_axis(&l, "t p", 2, ts_placement_replicate()), "may hold only");
    FAILS(ts_layout_add_axis(&l, "", 2, ts_placement_replicate()), "name is required");
    FAILS(ts_layout_add_axis(&l, "cp", 0, ts_placement_replicate()), "size 0");
    FAILS(ts_layout_add_axis(&l, "cp", 2, ts_placement_shard(2)), "shards dimension 2");
    FAILS(ts_layout_set_placement(&l, 0, ts_placement_shard(-1)), "shards dimension -1");
    FAILS(ts_layout_set_placement(&l, 3, ts_placement_replicate()), "axis index 3");
    CHECK(l.naxes == 3 && l.axes[0].placement.dim == 0, "a failed call changed the layout");
    int64_t neg[2] = {4, -1};
    FAILS(ts_layout_init(&m, 2, neg), "negative extent");
    FAILS(ts_layout_init(&m, 5, shape), "5 dimensions");
    OK(ts_layout_init(&m, 2, shape));
    for (int a = 0; a < TS_LAYOUT_MAX_AXES; a++) {
        char name[24];
        snprintf(name, sizeof name, "a%d", a);
        OK(ts_layout_add_axis(&m, name, 1, ts_placement_replicate()));
    }
    FAILS(ts_layout_add_axis(&m, "a9", 1, ts_placement_replicate()), "already 8 axes");
    m.axes[2].placement.kind = (ts_placement_kind)7;
    FAILS(ts_layout_validate(&m), "unknown placement kind 7");
}

static void unit_plan(void) {
    ts_layout_plan plan;
    ts_layout_plan_init(&plan);
    ts_layout wte, qkv, ln;
    int64_t s_wte[2] = {50257, 768}, s_qkv[2] = {768, 2304}, s_ln[1] = {768};
    OK(ts_layout_init(&wte, 2, s_wte));
    OK(ts_layout_add_axis(&wte, "tp", 2, ts_placement_shard(0)));
    OK(ts_layout_add_axis(&wte, "dp", 4, ts_placement_replicate()));
    OK(ts_layout_init(&qkv, 2, s_qkv));
    OK(ts_layout_add_axis(&qkv, "tp", 2, ts_placement_shard(1)));
    OK(ts_layout_add_axis(&qkv, "dp", 4, ts_placement_replicate()));
    OK(ts_layout_init(&ln, 1, s_ln));
    OK(ts_layout_plan_add(&plan, "wte", &wte, 0));
    OK(ts_layout_plan_add(&plan, "h.0.attn.qkv.weight", &qkv, 0));
    OK(ts_layout_plan_add(&plan, "ln_f.bias", &ln, -1));
    FAILS(ts_layout_plan_add(&plan, "wte", &wte, 1), "already in the plan");
    FAILS(ts_layout_plan_add(&plan, "x", &wte, -2), "stage -2");
    ts_layout broken = wte;
    broken.axes[0].placement.dim = 2;
    FAILS(ts_layout_plan_add(&plan, "y", &broken, 0), "tensor 'y': layout: axis 'tp' shards");
    for (int i = 0; i < 40; i++) { /* growth past the first allocation */
        char name[24];
        snprintf(name, sizeof name, "extra%d", i);
        OK(ts_layout_plan_add(&plan, name, &ln, i % 3));
    }
    CHECK(plan.count == 43, "count %d", plan.count);
    ts_layout_plan_entry *e = ts_layout_plan_find(&plan, "h.0.attn.qkv.weight");
    CHECK(e && e->stage == 0 && e->layout.shape[1] == 2304, "find");
    CHECK(ts_layout_plan_find(&plan, "nope") == NULL, "find of a missing name");
    /* a transform edits in place */
    if (e) OK(ts_layout_set_placement(&e->layout, 1, ts_placement_shard(0)));
    plan.count = 3; /* print the first three only */
    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile");
    if (f) {
        OK(ts_layout_plan_print(&plan, f));
        char text[1024] = {0};
        rewind(f);
        size_t got = fread(text, 1, sizeof text - 1, f);
        text[got] = '\0';
        const char *want =
            "wte                  stage 0  global [50257x768]  local [25129x768]  tp:S(0) dp:R\n"
            "h.0.attn.qkv.weight  stage 0  global [768x2304]   local [192x1152]   tp:S(1) dp:S(0)\n"
            "ln_f.bias            stage -  global [768]        local [768]        -\n";
        CHECK(strcmp(text, want) == 0, "plan print:\n%s\nwant:\n%s", text, want);
        fclose(f);
    }
    plan.count = 43;
    ts_layout_plan_free(&plan);
    CHECK(plan.count == 0 && plan.entries == NULL, "free leaves an empty plan");
    ts_layout_plan_free(NULL);
}

/* Every pair on a size-1 axis, and the argument errors of ts_redistribute. */
static void unit_redistribute(void) {
    ts_comm *self = NULL;
    OK(ts_comm_self_create("self", 5.0, &self));
    if (!self) return;
    int64_t shapes[2][2] = {{7, 5}, {0, 3}};
    for (int s = 0; s < 2; s++) {
        ts_layout base;
        OK(ts_layout_init(&base, 2, shapes[s]));
        OK(ts_layout_add_axis(&base, "self", 1, ts_placement_replicate()));
        int co = 0;
        for (int k = 0; k < 3; k++)
            run_pairs(self, &base, 0, &co, k_dtypes[k], -1);
    }

    /* errors: checked before anything moves; out is left cleared */
    ts_layout from, to;
    int64_t shape[2] = {4, 6};
    OK(ts_layout_init(&from, 2, shape));
    OK(ts_layout_add_axis(&from, "a", 1, ts_placement_shard(0)));
    OK(ts_layout_add_axis(&from, "b", 1, ts_placement_shard(0)));
    to = from;
    OK(ts_layout_set_placement(&to, 0, ts_placement_replicate()));
    ts_tensor in, out;
    int co[2] = {0, 0};
    OK(ts_tensor_alloc(&in, "w", TS_F32, 2, shape, TS_MEM_PARAMS));
    FAILS(ts_redistribute(&from, &to, 0, self, co, &in, &out),
          "axis 'a' cannot change alone: the later axis 'b' shards the same dimension 0");
    CHECK(out.data == NULL && out.ndim == 0, "out not cleared on failure");
    OK(ts_layout_set_placement(&to, 0, ts_placement_shard(0))); /* b may change: nothing later */
    OK(ts_layout_set_placement(&to, 1, ts_placement_replicate()));
    OK(ts_redistribute(&from, &to, 1, self, co, &in, &out));
    ts_tensor_free(&out);
    FAILS(ts_redistribute(&from, &to, 0, self, co, &in, &out), "axis 'b' changes too");
    FAILS(ts_redistribute(&from, &to, 1, self, NULL, &in, &out), "coordinates are needed");
    FAILS(ts_redistribute(&from, &to, 2, self, co, &in, &out), "axis index 2");
    int co_bad[2] = {0, 1};
    FAILS(ts_redistribute(&from, &to, 1, self, co_bad, &in, &out), "coordinate 1 on axis 'b'");
    FAILS(ts_redistribute(&from, &to, 1, self, co, &in, &in), "the output is the input");
    ts_layout big = from, big_to;
    big.axes[1].size = 2;
    big_to = big;
    OK(ts_layout_set_placement(&big_to, 1, ts_placement_replicate()));
    FAILS(ts_redistribute(&big, &big_to, 1, self, co, &in, &out),
          "axis 'b' has size 2 but its communicator 'self' has 1 ranks");
    ts_layout other = to;
    other.shape[1] = 7;
    FAILS(ts_redistribute(&from, &other, 1, self, co, &in, &out), "dimension 1 differs");
    ts_tensor small;
    int64_t s2[2] = {4, 5};
    OK(ts_tensor_alloc(&small, "w", TS_F32, 2, s2, TS_MEM_PARAMS));
    FAILS(ts_redistribute(&from, &to, 1, self, co, &small, &out),
          "tensor w has local shape [4x5], but its layout gives [4x6]");
    ts_tensor_free(&small);
    ts_tensor half;
    OK(ts_tensor_alloc(&half, "h", TS_F16, 2, shape, TS_MEM_PARAMS));
    OK(ts_layout_set_placement(&from, 1, ts_placement_partial()));
    FAILS(ts_redistribute(&from, &to, 1, self, co, &half, &out), "cannot sum f16");
    ts_layout back = from;
    OK(ts_layout_set_placement(&back, 1, ts_placement_partial()));
    OK(ts_redistribute(&from, &back, 1, self, co, &half, &out)); /* P -> P moves f16 */
    ts_tensor_free(&out);
    ts_tensor_free(&half);
    ts_tensor_free(&in);
    ts_comm_free(self);
}

static int run_unit(void) {
    double t0 = now_s();
    unit_blocks();
    unit_tiling();
    unit_print_and_errors();
    unit_plan();
    unit_redistribute();
    ts_mem_counter comm = ts_mem_stats(TS_MEM_COMM), all = ts_mem_stats(TS_MEM_NCAT);
    CHECK(comm.allocated == 0 && all.allocated == 0, "leak: %zu comm bytes, %zu in all",
          comm.allocated, all.allocated);
    if (check_failures) {
        printf("test_layout --unit: FAILED: %d checks\n", check_failures);
        return 1;
    }
    printf("test_layout --unit: PASS (%d redistributions) in %.2fs\n", g_cases, now_s() - t0);
    return 0;
}

/* ---------------------------------------------------------------------------
 * MPI mode
 * ------------------------------------------------------------------------- */

static void mpi_world_axis(ts_comm *world) {
    int n = ts_comm_size(world), me = ts_comm_rank(world);
    static const int64_t shapes[3][2] = {{8, 12}, {7, 5}, {3, 5}};
    for (int s = 0; s < 3; s++) {
        ts_layout base;
        OK(ts_layout_init(&base, 2, shapes[s]));
        OK(ts_layout_add_axis(&base, "dp", n, ts_placement_replicate()));
        for (int k = 0; k < 3; k++)
            run_pairs(world, &base, 0, &me, k_dtypes[k], -1);
    }
}

/* tp (size 2, fastest) x dp (size n/2): change dp while tp shards either
 * dimension (dp nests inside tp's block, even along the same dimension), and
 * change tp while dp shards dimension 0 (then tp may not use S(0)). */
static void mpi_two_axes(ts_comm *world) {
    int n = ts_comm_size(world), me = ts_comm_rank(world);
    int coords[2] = {me % 2, me / 2};
    ts_comm *tp = NULL, *dp = NULL;
    OK(ts_comm_split(world, me / 2, me % 2, "tp", &tp));
    OK(ts_comm_split(world, me % 2, me / 2, "dp", &dp));
    if (!tp || !dp) return;
    static const int64_t shapes[2][2] = {{8, 12}, {7, 5}};
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++) {
            ts_layout base;
            for (int d = 0; d < 2; d++) {
                OK(ts_layout_init(&base, 2, shapes[s]));
                OK(ts_layout_add_axis(&base, "tp", 2, ts_placement_shard(d)));
                OK(ts_layout_add_axis(&base, "dp", n / 2, ts_placement_replicate()));
                run_pairs(dp, &base, 1, coords, k_dtypes[k], -1);
            }
            OK(ts_layout_init(&base, 2, shapes[s]));
            OK(ts_layout_add_axis(&base, "tp", 2, ts_placement_replicate()));
            OK(ts_layout_add_axis(&base, "dp", n / 2, ts_placement_shard(0)));
            run_pairs(tp, &base, 0, coords, k_dtypes[k], 0);
            /* the pair it may not do alone fails on every rank, before moving */
            ts_layout to = base;
            OK(ts_layout_set_placement(&base, 0, ts_placement_shard(0)));
            ts_tensor in, out;
            int64_t shp[2];
            OK(ts_layout_local_shape(&base, coords, shp));
            OK(ts_tensor_alloc(&in, "w", k_dtypes[k], 2, shp, TS_MEM_PARAMS));
            FAILS(ts_redistribute(&base, &to, 0, tp, coords, &in, &out), "cannot change alone");
            ts_tensor_free(&in);
        }
    ts_comm_free(dp);
    ts_comm_free(tp);
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--unit") == 0) return run_unit();

    double t_start = now_s();
    ts_comm *world = NULL;
    if (ts_comm_world_init(&argc, &argv, 60.0, &world)) {
        fprintf(stderr, "ts_comm_world_init: %s\n", ts_last_error());
        return 1;
    }
    check_rank = ts_comm_rank(world);
    int n = ts_comm_size(world);
    double t0 = now_s();
    mpi_world_axis(world);
    if (check_rank == 0) printf("  world axis (%d ranks): %.2fs\n", n, now_s() - t0);
    if (n >= 4 && n % 2 == 0) {
        t0 = now_s();
        mpi_two_axes(world);
        if (check_rank == 0) printf("  tp 2 x dp %d: %.2fs\n", n / 2, now_s() - t0);
    }
    ts_mem_counter comm = ts_mem_stats(TS_MEM_COMM), all = ts_mem_stats(TS_MEM_NCAT);
    CHECK(comm.allocated == 0 && all.allocated == 0, "leak: %zu comm bytes, %zu in all",
          comm.allocated, all.allocated);

    int32_t fails = check_failures;
    if (ts_comm_all_reduce(world, &fails, &fails, 1, TS_I32, TS_REDUCE_SUM)) {
        fprintf(stderr, "final all_reduce: %s\n", ts_last_error());
        fails = 1;
    }
    if (check_rank == 0) {
        if (fails)
            printf("test_layout: FAILED: %d checks failed over %d ranks\n", (int)fails, n);
        else
            printf("test_layout: PASS on %d ranks (%d redistributions per rank) in %.2fs\n", n,
                   g_cases, now_s() - t_start);
    }
    ts_comm_world_finalize(world);
    return fails ? 1 : 0;
}
