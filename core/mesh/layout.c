/*
 * layout.c — placements and layouts (validation, local-block arithmetic,
 * printing), ts_redistribute (one axis's change of placement turned into one
 * collective plus host-side pack/unpack), and the layout plan.
 *
 * Not here: which axes exist and which ranks form them (mesh.c), how bytes
 * move (comm.c), and the layout transforms that fill the plan (plugins).
 * The rules are stated once, in include/tessera/layout.h.
 */
#include <stdio.h>  /* snprintf, fprintf */
#include <stdlib.h> /* realloc, free, calloc */
#include <string.h> /* memcpy, memset, strcmp, strlen, strstr */

#include "tessera/layout.h"

/* ---------------------------------------------------------------------------
 * Placements
 * ------------------------------------------------------------------------- */

int ts_placement_equal(ts_placement a, ts_placement b) {
    if (a.kind != b.kind) return 0;
    return a.kind != TS_PLACEMENT_SHARD || a.dim == b.dim;
}

const char *ts_placement_str(ts_placement p, char *buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    switch (p.kind) {
    case TS_PLACEMENT_REPLICATE: snprintf(buf, cap, "R"); break;
    case TS_PLACEMENT_SHARD: snprintf(buf, cap, "S(%d)", p.dim); break;
    case TS_PLACEMENT_PARTIAL: snprintf(buf, cap, "P"); break;
    default: snprintf(buf, cap, "?"); break;
    }
    return buf;
}

/* ---------------------------------------------------------------------------
 * Validation
 * ------------------------------------------------------------------------- */

/* The last error without its "[rank r/w] " prefix, for wrapping in a new
 * message (which gets the prefix again). */
static const char *last_error_bare(void) {
    const char *m = ts_last_error();
    if (strncmp(m, "[rank ", 6) == 0) {
        const char *end = strstr(m, "] ");
        if (end) return end + 2;
    }
    return m;
}

static ts_status layout_check_name(const char *name) {
    if (!name || !name[0]) return ts_error(TS_ERR_INVALID, "layout: an axis name is required");
    size_t n = strlen(name);
    if (n >= TS_COMM_NAME_MAX)
        return ts_error(TS_ERR_INVALID, "layout: axis name '%s' is longer than %d characters", name,
                        TS_COMM_NAME_MAX - 1);
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '_' || c == '-' || c == '.';
        if (!ok)
            return ts_error(TS_ERR_INVALID,
                            "layout: axis name '%s' may hold only letters, digits, '_', '-', '.'",
                            name);
    }
    return TS_OK;
}

static ts_status layout_check_placement(ts_placement p, int ndim, const char *axis) {
    switch (p.kind) {
    case TS_PLACEMENT_REPLICATE:
    case TS_PLACEMENT_PARTIAL: return TS_OK;
    case TS_PLACEMENT_SHARD:
        if (p.dim < 0 || p.dim >= ndim)
            return ts_error(TS_ERR_INVALID,
                            "layout: axis '%s' shards dimension %d of a %d-dimensional tensor",
                            axis, p.dim, ndim);
        return TS_OK;
    }
    return ts_error(TS_ERR_INVALID, "layout: axis '%s' has an unknown placement kind %d", axis,
                    (int)p.kind);
}

static ts_status layout_check_shape(int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > TS_MAX_DIMS)
        return ts_error(TS_ERR_INVALID, "layout: %d dimensions (0..%d allowed)", ndim, TS_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return ts_error(TS_ERR_INVALID, "layout: dimension %d has negative extent %lld", i,
                            (long long)shape[i]);
    return TS_OK;
}

ts_status ts_layout_validate(const ts_layout *l) {
    if (!l) return ts_error(TS_ERR_INVALID, "layout: NULL layout");
    TS_TRY(layout_check_shape(l->ndim, l->shape));
    if (l->naxes < 0 || l->naxes > TS_LAYOUT_MAX_AXES)
        return ts_error(TS_ERR_INVALID, "layout: %d axes (0..%d allowed)", l->naxes,
                        TS_LAYOUT_MAX_AXES);
    for (int i = 0; i < l->naxes; i++) {
        const ts_layout_axis *a = &l->axes[i];
        if (!memchr(a->name, '\0', sizeof a->name))
            return ts_error(TS_ERR_INVALID, "layout: axis %d's name is not terminated", i);
        TS_TRY(layout_check_name(a->name));
        for (int j = 0; j < i; j++)
            if (strcmp(l->axes[j].name, a->name) == 0)
                return ts_error(TS_ERR_INVALID, "layout: axis '%s' is named twice", a->name);
        if (a->size < 1)
            return ts_error(TS_ERR_INVALID, "layout: axis '%s' has size %d (at least 1)", a->name,
                            a->size);
        TS_TRY(layout_check_placement(a->placement, l->ndim, a->name));
    }
    return TS_OK;
}

ts_status ts_layout_init(ts_layout *l, int ndim, const int64_t *shape) {
    if (!l) return ts_error(TS_ERR_INVALID, "layout: NULL layout");
    memset(l, 0, sizeof *l);
    if (ndim > 0 && !shape) return ts_error(TS_ERR_INVALID, "layout: NULL shape");
    TS_TRY(layout_check_shape(ndim, shape));
    l->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        l->shape[i] = shape[i];
    return TS_OK;
}

ts_status ts_layout_add_axis(ts_layout *l, const char *name, int size, ts_placement p) {
    TS_TRY(ts_layout_validate(l));
    TS_TRY(layout_check_name(name));
    if (l->naxes == TS_LAYOUT_MAX_AXES)
        return ts_error(TS_ERR_INVALID, "layout: cannot add axis '%s': already %d axes", name,
                        TS_LAYOUT_MAX_AXES);
    if (ts_layout_axis_index(l, name) >= 0)
        return ts_error(TS_ERR_INVALID, "layout: axis '%s' is named twice", name);
    if (size < 1)
        return ts_error(TS_ERR_INVALID, "layout: axis '%s' has size %d (at least 1)", name, size);
    TS_TRY(layout_check_placement(p, l->ndim, name));
    ts_layout_axis *a = &l->axes[l->naxes++];
    memset(a, 0, sizeof *a);
    memcpy(a->name, name, strlen(name) + 1);
    a->size = size;
    a->placement = p;
    return TS_OK;
}

ts_status ts_layout_set_placement(ts_layout *l, int axis, ts_placement p) {
    TS_TRY(ts_layout_validate(l));
    if (axis < 0 || axis >= l->naxes)
        return ts_error(TS_ERR_INVALID, "layout: axis index %d out of range (%d axes)", axis,
                        l->naxes);
    TS_TRY(layout_check_placement(p, l->ndim, l->axes[axis].name));
    l->axes[axis].placement = p;
    return TS_OK;
}

int ts_layout_axis_index(const ts_layout *l, const char *name) {
    if (!l || !name) return -1;
    for (int i = 0; i < l->naxes && i < TS_LAYOUT_MAX_AXES; i++)
        if (strncmp(l->axes[i].name, name, TS_COMM_NAME_MAX) == 0) return i;
    return -1;
}

int ts_layout_equal(const ts_layout *a, const ts_layout *b) {
    if (a->ndim != b->ndim || a->naxes != b->naxes) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    for (int i = 0; i < a->naxes; i++)
        if (strcmp(a->axes[i].name, b->axes[i].name) != 0 || a->axes[i].size != b->axes[i].size ||
            !ts_placement_equal(a->axes[i].placement, b->axes[i].placement))
            return 0;
    return 1;
}

/* ---------------------------------------------------------------------------
 * Local blocks
 * ------------------------------------------------------------------------- */

/* One part of the uneven split (ts_comm_block_range) in int64_t. */
static void layout_part(int64_t total, int nparts, int part, int64_t *offset, int64_t *count) {
    size_t off, cnt;
    ts_comm_block_range((size_t)total, nparts, part, &off, &cnt);
    if (offset) *offset = (int64_t)off;
    if (count) *count = (int64_t)cnt;
}

/* The block at `coords` (already checked), with axis `skip` treated as R
 * (-1: none skipped). */
static void layout_block(const ts_layout *l, const int *coords, int skip, int64_t *off,
                         int64_t *shp) {
    for (int d = 0; d < l->ndim; d++) {
        off[d] = 0;
        shp[d] = l->shape[d];
    }
    for (int i = 0; i < l->naxes; i++) {
        ts_placement p = l->axes[i].placement;
        if (i == skip || p.kind != TS_PLACEMENT_SHARD) continue;
        int64_t o, c;
        layout_part(shp[p.dim], l->axes[i].size, coords ? coords[i] : 0, &o, &c);
        off[p.dim] += o;
        shp[p.dim] = c;
    }
}

static ts_status layout_check_coords(const ts_layout *l, const int *coords) {
    if (!coords) return TS_OK;
    for (int i = 0; i < l->naxes; i++)
        if (coords[i] < 0 || coords[i] >= l->axes[i].size)
            return ts_error(TS_ERR_INVALID, "layout: coordinate %d on axis '%s' of size %d",
                            coords[i], l->axes[i].name, l->axes[i].size);
    return TS_OK;
}

ts_status ts_layout_local_block(const ts_layout *l, const int *coords, int64_t *offset,
                                int64_t *shape) {
    TS_TRY(ts_layout_validate(l));
    TS_TRY(layout_check_coords(l, coords));
    int64_t off[TS_MAX_DIMS], shp[TS_MAX_DIMS];
    layout_block(l, coords, -1, off, shp);
    for (int d = 0; d < l->ndim; d++) {
        if (offset) offset[d] = off[d];
        if (shape) shape[d] = shp[d];
    }
    return TS_OK;
}

ts_status ts_layout_local_shape(const ts_layout *l, const int *coords, int64_t *shape) {
    return ts_layout_local_block(l, coords, NULL, shape);
}

ts_status ts_layout_local_offset(const ts_layout *l, const int *coords, int64_t *offset) {
    return ts_layout_local_block(l, coords, offset, NULL);
}

/* ---------------------------------------------------------------------------
 * Printing
 * ------------------------------------------------------------------------- */

const char *ts_layout_describe(const ts_layout *l, char *buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    buf[0] = '\0';
    if (!l || l->naxes <= 0) {
        snprintf(buf, cap, "-");
        return buf;
    }
    size_t used = 0;
    for (int i = 0; i < l->naxes && i < TS_LAYOUT_MAX_AXES && used < cap; i++) {
        char p[16];
        int n =
            snprintf(buf + used, cap - used, "%s%.*s:%s", i ? " " : "", (int)(TS_COMM_NAME_MAX - 1),
                     l->axes[i].name, ts_placement_str(l->axes[i].placement, p, sizeof p));
        if (n < 0) break;
        used += (size_t)n;
    }
    return buf;
}

const char *ts_layout_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap) {
    if (!buf || cap == 0) return buf;
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && d < TS_MAX_DIMS && used < cap; d++) {
        int n = snprintf(buf + used, cap - used, "%s%lld", d ? "x" : "", (long long)shape[d]);
        if (n < 0) break;
        used += (size_t)n;
    }
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

/* ---------------------------------------------------------------------------
 * Redistribution: pack/unpack helpers
 * ------------------------------------------------------------------------- */

static int64_t shape_numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

/* Copies the box of extents `ext` starting at `soff` in src (row-major, shape
 * sshape) to `doff` in dst (shape dshape); ndim 0..4, es bytes per element.
 * Dimensions are padded to four at the front; the innermost row is one
 * memcpy. */
static void copy_box(char *dst, const int64_t *dshape, const int64_t *doff, const char *src,
                     const int64_t *sshape, const int64_t *soff, const int64_t *ext, int ndim,
                     size_t es) {
    int64_t ds[4], dof[4], ss[4], sof[4], e[4];
    int pad = 4 - ndim;
    for (int d = 0; d < 4; d++) {
        int k = d - pad;
        ds[d] = k >= 0 ? dshape[k] : 1;
        dof[d] = k >= 0 ? doff[k] : 0;
        ss[d] = k >= 0 ? sshape[k] : 1;
        sof[d] = k >= 0 ? soff[k] : 0;
        e[d] = k >= 0 ? ext[k] : 1;
        if (e[d] == 0) return;
    }
    size_t row = (size_t)e[3] * es;
    for (int64_t a = 0; a < e[0]; a++)
        for (int64_t b = 0; b < e[1]; b++)
            for (int64_t c = 0; c < e[2]; c++) {
                int64_t di =
                    (((dof[0] + a) * ds[1] + dof[1] + b) * ds[2] + dof[2] + c) * ds[3] + dof[3];
                int64_t si =
                    (((sof[0] + a) * ss[1] + sof[1] + b) * ss[2] + sof[2] + c) * ss[3] + sof[3];
                memcpy(dst + (size_t)di * es, src + (size_t)si * es, row);
            }
}

/* A copy of `shape` with dimension d set to `extent`. */
static void shape_with(int64_t *out, int ndim, const int64_t *shape, int d, int64_t extent) {
    for (int e = 0; e < ndim; e++)
        out[e] = shape[e];
    out[d] = extent;
}

/* 1 if every dimension before d has extent 1, so that the parts along d of a
 * row-major block are contiguous and in part order. */
static int outer_is_one(int ndim, const int64_t *shape, int d) {
    (void)ndim;
    for (int e = 0; e < d; e++)
        if (shape[e] != 1) return 0;
    return 1;
}

/* Scratch memory for one call, under TS_MEM_COMM. */
static ts_status scratch_alloc(void **p, size_t bytes) {
    *p = ts_mem_alloc(TS_MEM_COMM, bytes ? bytes : 1);
    return *p ? TS_OK : TS_ERR_NOMEM;
}

/* The per-call state of one redistribution. */
typedef struct redist {
    ts_comm *comm;
    int n, c; /* axis size, this rank's coordinate       */
    int ndim;
    int64_t b[TS_MAX_DIMS];    /* the block if the axis were R            */
    int64_t zero[TS_MAX_DIMS]; /* an all-zero offset                      */
    ts_dtype dtype;
    size_t es;
    const ts_tensor *in;
    ts_tensor *out;
} redist;

/* Element counts per part along d of the block b: counts[r] elements of
 * part r (b with dim d cut to part r). Returns 1 if all are equal. */
static int part_counts(const redist *r, int d, size_t *counts) {
    int64_t rest = 1;
    for (int e = 0; e < r->ndim; e++)
        if (e != d) rest *= r->b[e];
    int even = 1;
    for (int p = 0; p < r->n; p++) {
        int64_t cnt;
        layout_part(r->b[d], r->n, p, NULL, &cnt);
        counts[p] = (size_t)(rest * cnt);
        if (counts[p] != counts[0]) even = 0;
    }
    return even;
}

/* P -> S(d): reduce_scatter of the parts along d (packed part by part unless
 * they are contiguous already). */
static ts_status redist_partial_to_shard(const redist *r, int d) {
    size_t *counts = calloc((size_t)r->n, sizeof *counts);
    if (!counts) return ts_error(TS_ERR_NOMEM, "redistribute: no memory for %d counts", r->n);
    int even = part_counts(r, d, counts);
    const void *send = r->in->data;
    void *pack = NULL;
    ts_status st = TS_OK;
    if (!outer_is_one(r->ndim, r->b, d)) {
        st = scratch_alloc(&pack, ts_tensor_bytes(r->in));
        if (st) goto done;
        size_t at = 0;
        for (int p = 0; p < r->n; p++) {
            int64_t off[TS_MAX_DIMS] = {0}, ext[TS_MAX_DIMS];
            shape_with(ext, r->ndim, r->b, d, 0);
            layout_part(r->b[d], r->n, p, &off[d], &ext[d]);
            copy_box((char *)pack + at * r->es, ext, r->zero, r->in->data, r->b, off, ext, r->ndim,
                     r->es);
            at += counts[p];
        }
        send = pack;
    }
    if (even)
        st =
            ts_comm_reduce_scatter(r->comm, send, r->out->data, counts[0], r->dtype, TS_REDUCE_SUM);
    else
        st = ts_comm_reduce_scatter_v(r->comm, send, r->out->data, counts, r->dtype, TS_REDUCE_SUM);
done:
    if (pack) ts_mem_free(pack);
    free(counts);
    return st;
}

/* S(d) -> R: all_gather of the parts, unpacked along d unless they land
 * contiguous already. */
static ts_status redist_shard_to_replicate(const redist *r, int d) {
    size_t *counts = calloc((size_t)r->n, sizeof *counts);
    if (!counts) return ts_error(TS_ERR_NOMEM, "redistribute: no memory for %d counts", r->n);
    int even = part_counts(r, d, counts);
    int direct = outer_is_one(r->ndim, r->b, d);
    void *recv = r->out->data;
    ts_status st = TS_OK;
    if (!direct) {
        st = scratch_alloc(&recv, ts_tensor_bytes(r->out));
        if (st) goto done;
    }
    if (even)
        st = ts_comm_all_gather(r->comm, r->in->data, recv, counts[0], r->dtype);
    else
        st = ts_comm_all_gatherv(r->comm, r->in->data, recv, counts, r->dtype);
    if (st || direct) goto done;
    size_t at = 0;
    for (int p = 0; p < r->n; p++) {
        int64_t off[TS_MAX_DIMS] = {0}, ext[TS_MAX_DIMS];
        shape_with(ext, r->ndim, r->b, d, 0);
        layout_part(r->b[d], r->n, p, &off[d], &ext[d]);
        copy_box(r->out->data, r->b, off, (char *)recv + at * r->es, ext, r->zero, ext, r->ndim,
                 r->es);
        at += counts[p];
    }
done:
    if (!direct && recv) ts_mem_free(recv);
    free(counts);
    return st;
}

/* S(i) -> S(j), i != j: all_to_all. Rank c sends rank p the part of its
 * block along j that p will own; it receives from rank s the part of s's
 * block (along i) that lies in its own part along j. */
static ts_status redist_shard_to_shard(const redist *r, int i, int j) {
    size_t *cnt = calloc(2 * (size_t)r->n, sizeof *cnt);
    if (!cnt) return ts_error(TS_ERR_NOMEM, "redistribute: no memory for %d counts", r->n);
    size_t *scounts = cnt, *rcounts = cnt + r->n;
    const int64_t *ishape = r->in->shape, *oshape = r->out->shape;
    for (int p = 0; p < r->n; p++) {
        int64_t ext[TS_MAX_DIMS];
        shape_with(ext, r->ndim, ishape, j, 0);
        layout_part(r->b[j], r->n, p, NULL, &ext[j]);
        scounts[p] = (size_t)shape_numel(r->ndim, ext);
        shape_with(ext, r->ndim, oshape, i, 0);
        layout_part(r->b[i], r->n, p, NULL, &ext[i]);
        rcounts[p] = (size_t)shape_numel(r->ndim, ext);
    }
    void *sbuf = NULL, *rbuf = NULL;
    ts_status st = scratch_alloc(&sbuf, ts_tensor_bytes(r->in));
    if (!st) st = scratch_alloc(&rbuf, ts_tensor_bytes(r->out));
    if (st) goto done;
    size_t at = 0;
    for (int p = 0; p < r->n; p++) { /* pack: the parts along j, in rank order */
        int64_t off[TS_MAX_DIMS] = {0}, ext[TS_MAX_DIMS];
        shape_with(ext, r->ndim, ishape, j, 0);
        layout_part(r->b[j], r->n, p, &off[j], &ext[j]);
        copy_box((char *)sbuf + at * r->es, ext, r->zero, r->in->data, ishape, off, ext, r->ndim,
                 r->es);
        at += scounts[p];
    }
    /* Every rank of the axis decides alike: b is the same on all of them. */
    if (r->b[i] % r->n == 0 && r->b[j] % r->n == 0)
        st = ts_comm_all_to_all(r->comm, sbuf, rbuf, scounts[0], r->dtype);
    else
        st = ts_comm_all_to_allv(r->comm, sbuf, scounts, NULL, rbuf, rcounts, NULL, r->dtype);
    if (st) goto done;
    at = 0;
    for (int p = 0; p < r->n; p++) { /* unpack: rank p's part along i */
        int64_t off[TS_MAX_DIMS] = {0}, ext[TS_MAX_DIMS];
        shape_with(ext, r->ndim, oshape, i, 0);
        layout_part(r->b[i], r->n, p, &off[i], &ext[i]);
        copy_box(r->out->data, oshape, off, (char *)rbuf + at * r->es, ext, r->zero, ext, r->ndim,
                 r->es);
        at += rcounts[p];
    }
done:
    if (sbuf) ts_mem_free(sbuf);
    if (rbuf) ts_mem_free(rbuf);
    free(cnt);
    return st;
}

/* R -> S(d) (from the full block into this rank's part) and S(d) -> P (this
 * rank's part into a zero-filled full block): local copies. */
static void redist_slice(const redist *r, int d, int into_full) {
    int64_t off[TS_MAX_DIMS] = {0}, ext[TS_MAX_DIMS];
    shape_with(ext, r->ndim, r->b, d, 0);
    layout_part(r->b[d], r->n, r->c, &off[d], &ext[d]);
    if (into_full)
        copy_box(r->out->data, r->b, off, r->in->data, ext, r->zero, ext, r->ndim, r->es);
    else
        copy_box(r->out->data, ext, r->zero, r->in->data, r->b, off, ext, r->ndim, r->es);
}

/* ---------------------------------------------------------------------------
 * Redistribution: checks and dispatch
 * ------------------------------------------------------------------------- */

static ts_status redist_check(const ts_layout *from, const ts_layout *to, int axis, ts_comm *comm,
                              const int *coords, const ts_tensor *in) {
    TS_TRY(ts_layout_validate(from));
    TS_TRY(ts_layout_validate(to));
    if (from->ndim != to->ndim || from->naxes != to->naxes)
        return ts_error(TS_ERR_INVALID,
                        "redistribute: layouts differ in shape or axes (%d vs %d dimensions, "
                        "%d vs %d axes)",
                        from->ndim, to->ndim, from->naxes, to->naxes);
    for (int d = 0; d < from->ndim; d++)
        if (from->shape[d] != to->shape[d])
            return ts_error(TS_ERR_INVALID,
                            "redistribute: global extent of dimension %d differs (%lld vs %lld)", d,
                            (long long)from->shape[d], (long long)to->shape[d]);
    if (axis < 0 || axis >= from->naxes)
        return ts_error(TS_ERR_INVALID, "redistribute: axis index %d out of range (%d axes)", axis,
                        from->naxes);
    const char *name = from->axes[axis].name;
    for (int k = 0; k < from->naxes; k++) {
        const ts_layout_axis *a = &from->axes[k], *b = &to->axes[k];
        if (strcmp(a->name, b->name) != 0 || a->size != b->size)
            return ts_error(TS_ERR_INVALID,
                            "redistribute: axis %d is '%s' of size %d in one layout and '%s' of "
                            "size %d in the other",
                            k, a->name, a->size, b->name, b->size);
        if (k != axis && !ts_placement_equal(a->placement, b->placement))
            return ts_error(TS_ERR_INVALID,
                            "redistribute: changing axis '%s', but axis '%s' changes too (one "
                            "axis at a time)",
                            name, a->name);
    }
    ts_placement pf = from->axes[axis].placement, pt = to->axes[axis].placement;
    for (int k = axis + 1; k < from->naxes; k++) {
        ts_placement q = from->axes[k].placement;
        if (q.kind != TS_PLACEMENT_SHARD) continue;
        if ((pf.kind == TS_PLACEMENT_SHARD && pf.dim == q.dim) ||
            (pt.kind == TS_PLACEMENT_SHARD && pt.dim == q.dim))
            return ts_error(TS_ERR_INVALID,
                            "redistribute: axis '%s' cannot change alone: the later axis '%s' "
                            "shards the same dimension %d inside it (change '%s' first)",
                            name, from->axes[k].name, q.dim, from->axes[k].name);
    }
    if (!comm) return ts_error(TS_ERR_INVALID, "redistribute: axis '%s': NULL communicator", name);
    if (ts_comm_size(comm) != from->axes[axis].size)
        return ts_error(TS_ERR_INVALID,
                        "redistribute: axis '%s' has size %d but its communicator '%s' has %d "
                        "ranks",
                        name, from->axes[axis].size, ts_comm_name(comm), ts_comm_size(comm));
    if (coords) {
        TS_TRY(layout_check_coords(from, coords));
        if (coords[axis] != ts_comm_rank(comm))
            return ts_error(TS_ERR_INVALID,
                            "redistribute: coordinate %d on axis '%s' but rank %d in its "
                            "communicator",
                            coords[axis], name, ts_comm_rank(comm));
    } else {
        for (int k = 0; k < from->naxes; k++)
            if (k != axis && from->axes[k].placement.kind == TS_PLACEMENT_SHARD)
                return ts_error(TS_ERR_INVALID,
                                "redistribute: axis '%s' shards, so the coordinates are needed",
                                from->axes[k].name);
    }
    if (!in) return ts_error(TS_ERR_INVALID, "redistribute: NULL input tensor");
    if (in->device != TS_DEVICE_CPU)
        return ts_error(TS_ERR_INVALID, "redistribute: tensor %s: only CPU tensors for now",
                        in->name);
    if (pf.kind == TS_PLACEMENT_PARTIAL && pt.kind != TS_PLACEMENT_PARTIAL && in->dtype != TS_F32 &&
        in->dtype != TS_BF16 && in->dtype != TS_I32)
        return ts_error(TS_ERR_INVALID, "redistribute: tensor %s: cannot sum %s (f32, bf16, i32)",
                        in->name, ts_dtype_name(in->dtype));
    if (ts_dtype_size(in->dtype) == 0)
        return ts_error(TS_ERR_INVALID, "redistribute: tensor %s: unknown dtype %d", in->name,
                        (int)in->dtype);
    return TS_OK;
}

ts_status ts_redistribute(const ts_layout *from, const ts_layout *to, int axis, ts_comm *axis_comm,
                          const int *coords, const ts_tensor *in, ts_tensor *out) {
    if (!out) return ts_error(TS_ERR_INVALID, "redistribute: NULL output tensor");
    if (out == in) return ts_error(TS_ERR_INVALID, "redistribute: the output is the input");
    memset(out, 0, sizeof *out);
    TS_TRY(redist_check(from, to, axis, axis_comm, coords, in));

    redist r;
    memset(&r, 0, sizeof r);
    r.comm = axis_comm;
    r.n = ts_comm_size(axis_comm);
    r.c = ts_comm_rank(axis_comm);
    r.ndim = from->ndim;
    r.dtype = in->dtype;
    r.es = ts_dtype_size(in->dtype);
    r.in = in;
    r.out = out;

    int at[TS_LAYOUT_MAX_AXES] = {0};
    for (int k = 0; k < from->naxes; k++)
        at[k] = coords ? coords[k] : 0;
    at[axis] = r.c;
    int64_t ishape[TS_MAX_DIMS], oshape[TS_MAX_DIMS], boff[TS_MAX_DIMS];
    layout_block(from, at, -1, boff, ishape);
    layout_block(to, at, -1, boff, oshape);
    layout_block(from, at, axis, boff, r.b);
    char want[96], got[96];
    int shape_ok = in->ndim == from->ndim;
    for (int d = 0; shape_ok && d < r.ndim; d++)
        shape_ok = in->shape[d] == ishape[d];
    if (!shape_ok)
        return ts_error(TS_ERR_INVALID,
                        "redistribute: tensor %s has local shape %s, but its layout gives %s",
                        in->name, ts_layout_shape_str(in->ndim, in->shape, got, sizeof got),
                        ts_layout_shape_str(r.ndim, ishape, want, sizeof want));
    if (!in->data && shape_numel(r.ndim, ishape) > 0)
        return ts_error(TS_ERR_INVALID, "redistribute: tensor %s has no data", in->name);

    TS_TRY(ts_tensor_alloc(out, in->name, in->dtype, r.ndim, oshape, in->cat)); /* zero-filled */

    ts_placement pf = from->axes[axis].placement, pt = to->axes[axis].placement;
    ts_status st = TS_OK;
    size_t bytes = ts_tensor_bytes(in);
    if (ts_placement_equal(pf, pt)) {
        if (bytes) memcpy(out->data, in->data, bytes);
    } else if (pf.kind == TS_PLACEMENT_PARTIAL && pt.kind == TS_PLACEMENT_REPLICATE) {
        st = ts_comm_all_reduce(axis_comm, in->data, out->data, (size_t)ts_tensor_numel(in),
                                r.dtype, TS_REDUCE_SUM);
    } else if (pf.kind == TS_PLACEMENT_PARTIAL) {
        st = redist_partial_to_shard(&r, pt.dim);
    } else if (pf.kind == TS_PLACEMENT_SHARD && pt.kind == TS_PLACEMENT_REPLICATE) {
        st = redist_shard_to_replicate(&r, pf.dim);
    } else if (pf.kind == TS_PLACEMENT_SHARD && pt.kind == TS_PLACEMENT_SHARD) {
        st = redist_shard_to_shard(&r, pf.dim, pt.dim);
    } else if (pf.kind == TS_PLACEMENT_REPLICATE && pt.kind == TS_PLACEMENT_SHARD) {
        redist_slice(&r, pt.dim, 0);
    } else if (pf.kind == TS_PLACEMENT_REPLICATE) { /* -> P: rank 0 keeps the value */
        if (r.c == 0 && bytes) memcpy(out->data, in->data, bytes);
    } else { /* S(d) -> P: own part, zeros elsewhere */
        redist_slice(&r, pf.dim, 1);
    }
    if (st) ts_tensor_free(out);
    return st;
}

int ts_redistribute_collective(ts_placement from, ts_placement to) {
    if (ts_placement_equal(from, to)) return -1;
    if (from.kind == TS_PLACEMENT_PARTIAL)
        return to.kind == TS_PLACEMENT_REPLICATE ? (int)TS_COMM_ALL_REDUCE
                                                 : (int)TS_COMM_REDUCE_SCATTER;
    if (from.kind == TS_PLACEMENT_SHARD && to.kind == TS_PLACEMENT_REPLICATE)
        return (int)TS_COMM_ALL_GATHER;
    if (from.kind == TS_PLACEMENT_SHARD && to.kind == TS_PLACEMENT_SHARD)
        return (int)TS_COMM_ALL_TO_ALL;
    return -1;
}

/* ---------------------------------------------------------------------------
 * The layout plan
 * ------------------------------------------------------------------------- */

void ts_layout_plan_init(ts_layout_plan *p) {
    if (p) memset(p, 0, sizeof *p);
}

/* A name index of the plan used last (a model's plan has a dozen entries a
 * block, and every entry is looked up when it is added and when it is
 * built): an open-addressed table of entry indices, kept per thread. It
 * follows the plan while entries are only appended; any other change of
 * the plan (another plan, its entries moved, fewer of them) rebuilds it. A
 * hit is checked against the entry's name. */
static _Thread_local struct {
    const ts_layout_plan *plan;
    const ts_layout_plan_entry *entries;
    int indexed; /* entries [0, indexed) are in the table */
    int *slot;   /* entry index + 1; 0: empty */
    size_t cap;
} plan_index;

static size_t plan_name_hash(const char *s) {
    size_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void plan_index_insert(int i) {
    size_t k = plan_name_hash(plan_index.entries[i].name) & (plan_index.cap - 1);
    while (plan_index.slot[k])
        k = (k + 1) & (plan_index.cap - 1);
    plan_index.slot[k] = i + 1;
}

/* Brings the index up to `p`; 0 when there is no memory for it. */
static int plan_index_sync(const ts_layout_plan *p) {
    if (plan_index.plan != p || plan_index.entries != p->entries || plan_index.indexed > p->count) {
        plan_index.plan = p;
        plan_index.entries = p->entries;
        plan_index.indexed = 0;
        if (plan_index.slot) memset(plan_index.slot, 0, plan_index.cap * sizeof(int));
    }
    if ((size_t)p->count * 2 >= plan_index.cap) {
        size_t cap = plan_index.cap ? plan_index.cap : 64;
        while ((size_t)p->count * 2 >= cap)
            cap *= 2;
        int *slot = calloc(cap, sizeof *slot);
        if (!slot) return 0;
        free(plan_index.slot);
        plan_index.slot = slot;
        plan_index.cap = cap;
        plan_index.indexed = 0;
    }
    for (; plan_index.indexed < p->count; plan_index.indexed++)
        plan_index_insert(plan_index.indexed);
    return 1;
}

ts_layout_plan_entry *ts_layout_plan_find(ts_layout_plan *p, const char *name) {
    if (!p || !name) return NULL;
    if (!plan_index_sync(p)) {
        for (int i = 0; i < p->count; i++)
            if (strcmp(p->entries[i].name, name) == 0) return &p->entries[i];
        return NULL;
    }
    size_t k = plan_name_hash(name) & (plan_index.cap - 1);
    for (; plan_index.slot[k]; k = (k + 1) & (plan_index.cap - 1)) {
        ts_layout_plan_entry *e = &p->entries[plan_index.slot[k] - 1];
        if (strcmp(e->name, name) == 0) return e;
    }
    return NULL;
}

ts_status ts_layout_plan_add(ts_layout_plan *p, const char *name, const ts_layout *layout,
                             int stage) {
    if (!p) return ts_error(TS_ERR_INVALID, "layout plan: NULL plan");
    if (!name || !name[0])
        return ts_error(TS_ERR_INVALID, "layout plan: a tensor name is required");
    if (strlen(name) >= TS_NAME_MAX)
        return ts_error(TS_ERR_INVALID,
                        "layout plan: tensor name '%s' is longer than %d characters", name,
                        TS_NAME_MAX - 1);
    if (ts_layout_plan_find(p, name))
        return ts_error(TS_ERR_INVALID, "layout plan: tensor '%s' is already in the plan", name);
    if (stage < -1)
        return ts_error(TS_ERR_INVALID, "layout plan: tensor '%s': stage %d (-1 or more)", name,
                        stage);
    if (ts_layout_validate(layout) != TS_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", last_error_bare());
        return ts_error(TS_ERR_INVALID, "layout plan: tensor '%s': %s", name, why);
    }
    if (p->count == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        ts_layout_plan_entry *e = realloc(p->entries, (size_t)cap * sizeof *e);
        if (!e) return ts_error(TS_ERR_NOMEM, "layout plan: no memory for %d entries", cap);
        p->entries = e;
        p->cap = cap;
    }
    ts_layout_plan_entry *e = &p->entries[p->count++];
    memset(e, 0, sizeof *e);
    memcpy(e->name, name, strlen(name) + 1);
    e->layout = *layout;
    e->stage = stage;
    return TS_OK;
}

ts_status ts_layout_plan_print(const ts_layout_plan *p, FILE *f) {
    if (!p || !f) return ts_error(TS_ERR_INVALID, "layout plan: NULL plan or file");
    int wname = 0, wstage = 1, wglob = 0, wloc = 0;
    char buf[96], loc[96], stage[16], desc[TS_LAYOUT_DESCRIBE_MAX];
    for (int pass = 0; pass < 2; pass++) { /* widths, then lines */
        for (int i = 0; i < p->count; i++) {
            const ts_layout_plan_entry *e = &p->entries[i];
            if (pass == 0 && ts_layout_validate(&e->layout) != TS_OK) {
                char why[512];
                snprintf(why, sizeof why, "%s", last_error_bare());
                return ts_error(TS_ERR_INVALID, "layout plan: tensor '%s': %s", e->name, why);
            }
            int64_t off[TS_MAX_DIMS], shp[TS_MAX_DIMS];
            layout_block(&e->layout, NULL, -1, off, shp);
            ts_layout_shape_str(e->layout.ndim, e->layout.shape, buf, sizeof buf);
            ts_layout_shape_str(e->layout.ndim, shp, loc, sizeof loc);
            if (e->stage < 0)
                snprintf(stage, sizeof stage, "-");
            else
                snprintf(stage, sizeof stage, "%d", e->stage);
            if (pass == 0) {
                int n;
                if ((n = (int)strlen(e->name)) > wname) wname = n;
                if ((n = (int)strlen(stage)) > wstage) wstage = n;
                if ((n = (int)strlen(buf)) > wglob) wglob = n;
                if ((n = (int)strlen(loc)) > wloc) wloc = n;
                continue;
            }
            if (fprintf(f, "%-*s  stage %-*s  global %-*s  local %-*s  %s\n", wname, e->name,
                        wstage, stage, wglob, buf, wloc, loc,
                        ts_layout_describe(&e->layout, desc, sizeof desc)) < 0)
                return ts_error(TS_ERR_IO, "layout plan: cannot write the plan");
        }
    }
    return TS_OK;
}

void ts_layout_plan_free(ts_layout_plan *p) {
    if (!p) return;
    if (plan_index.plan == p) plan_index.plan = NULL;
    free(p->entries);
    memset(p, 0, sizeof *p);
}
