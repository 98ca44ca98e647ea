/*
 * mesh.c — the dense and expert process meshes over named axes: size
 * validation and derivation, the order string, coordinates, and the rank
 * groups of single axes and of products of axes (Megatron-LM's
 * RankGenerator arithmetic, written afresh in C, over any number of slots).
 *
 * Pure arithmetic on rank numbers: no MPI, no communicators, no plugins, and
 * no axis it knows by name: the axes are the caller's definitions. The only
 * allocation is the ranks array of ts_mesh_groups and the mesh itself.
 */
#include <ctype.h>  /* tolower, islower, isdigit: names                   */
#include <stdarg.h> /* va_list for the JSON sink                          */
#include <stdlib.h> /* calloc, malloc, free                               */
#include <string.h> /* strchr, strcmp, memcpy, memset                     */

#include "tessera/mesh.h" /* the API, ts_error, TS_TRY, TS_ASSERT */

#define MESH_TOKEN_MAX 96 /* bytes of a group token, NUL included */
#define MESH_MAX_TOKENS 64

typedef struct mesh_axis {
    char name[TS_MESH_NAME_MAX];
    int kind;     /* TS_MESH_DENSE or TS_MESH_EXPERT (the pipeline: dense) */
    int pipeline; /* on both meshes                                        */
    int slot;     /* its place in the order                                */
    int size;
    int batch; /* counts in the data-parallel width                    */
} mesh_axis;

struct ts_mesh {
    int world;
    int naxes;
    mesh_axis axes[TS_MESH_MAX_AXES]; /* dense (pipeline too), then expert */
    int nslots;
    char slot_name[TS_MESH_MAX_AXES][TS_MESH_NAME_MAX];
    int order[TS_MESH_MAX_AXES];     /* slot at each position, fastest first */
    int size[2][TS_MESH_MAX_AXES];   /* [kind][slot]                         */
    int stride[2][TS_MESH_MAX_AXES]; /* [kind][slot]                         */
    int pipeline;                    /* its slot, or -1                      */
    char order_str[TS_MESH_MAX_AXES * TS_MESH_NAME_MAX];
    int ntokens;
    char tokens[MESH_MAX_TOKENS][MESH_TOKEN_MAX];
};

/* A parsed group token: its mesh and which slots it names. */
typedef struct mesh_token {
    ts_mesh_kind kind;
    int masked[TS_MESH_MAX_AXES];
} mesh_token;

/* ------------------------------------------------------------------------- */

/* Copies `len` bytes of `src` lower-cased into `dst` (TS_MESH_NAME_MAX
 * bytes); returns 0 if it does not fit. */
static int mesh_lower_copy(char *dst, const char *src, size_t len) {
    if (len >= TS_MESH_NAME_MAX) return 0;
    for (size_t i = 0; i < len; i++)
        dst[i] = (char)tolower((unsigned char)src[i]);
    dst[len] = '\0';
    return 1;
}

static int mesh_lookup(const ts_mesh *mesh, const char *name, size_t len) {
    char low[TS_MESH_NAME_MAX];
    if (!mesh_lower_copy(low, name, len)) return -1;
    for (int a = 0; a < mesh->naxes; a++)
        if (strcmp(low, mesh->axes[a].name) == 0) return a;
    return -1;
}

static int mesh_lookup_slot(const ts_mesh *mesh, const char *name, size_t len) {
    char low[TS_MESH_NAME_MAX];
    if (!mesh_lower_copy(low, name, len)) return -1;
    for (int s = 0; s < mesh->nslots; s++)
        if (strcmp(low, mesh->slot_name[s]) == 0) return s;
    return -1;
}

/* "tp, cp, dp" — the names of the axes of one kind (-1: every kind; 2: the
 * slots), in the mesh's listing order. */
static const char *mesh_names(const ts_mesh *mesh, int kind, int pipeline, char *buf, size_t cap) {
    size_t j = 0;
    buf[0] = '\0';
    if (kind == 2) {
        for (int s = 0; s < mesh->nslots && j < cap; s++)
            j += (size_t)snprintf(buf + j, cap - j, "%s%s", j ? ", " : "", mesh->slot_name[s]);
        return buf;
    }
    for (int a = 0; a < mesh->naxes && j < cap; a++) {
        const mesh_axis *x = &mesh->axes[a];
        if (kind >= 0 && (x->kind != kind || (x->pipeline && !pipeline))) continue;
        j += (size_t)snprintf(buf + j, cap - j, "%s%s", j ? ", " : "", x->name);
    }
    return buf;
}

static int mesh_name_ok(const char *name) {
    if (!name || !islower((unsigned char)name[0])) return 0;
    size_t n = strlen(name);
    if (n >= TS_MESH_NAME_MAX) return 0;
    for (size_t i = 0; i < n; i++)
        if (!islower((unsigned char)name[i]) && !isdigit((unsigned char)name[i]) && name[i] != '_')
            return 0;
    return 1;
}

/* ---------------------------------------------------------------------------
 * Creation
 * ------------------------------------------------------------------------- */

/* Takes in the definitions: names, kinds, slots (in definition order), and
 * lists the axes dense first. Sizes are copied as given. */
static ts_status mesh_take_axes(ts_mesh *mesh, const ts_mesh_axis_def *defs, int n) {
    if (n < 1 || n > TS_MESH_MAX_AXES)
        return ts_error(TS_ERR_INVALID, "mesh: %d axes (1 to %d may be defined)", n,
                        TS_MESH_MAX_AXES);
    int npipe = 0;
    /* Slots first: each dense axis and each expert axis without a fold. */
    for (int i = 0; i < n; i++) {
        const ts_mesh_axis_def *d = &defs[i];
        if (!mesh_name_ok(d->name))
            return ts_error(TS_ERR_INVALID,
                            "mesh: axis name \"%s\": names are [a-z][a-z0-9_]*, under %d "
                            "characters",
                            d->name ? d->name : "(null)", TS_MESH_NAME_MAX);
        for (int j = 0; j < i; j++)
            if (strcmp(defs[j].name, d->name) == 0)
                return ts_error(TS_ERR_INVALID, "mesh: axis \"%s\" is defined twice", d->name);
        if (d->mesh != TS_MESH_DENSE && d->mesh != TS_MESH_EXPERT)
            return ts_error(TS_ERR_INVALID,
                            "mesh: axis \"%s\": mesh %d is neither dense nor expert", d->name,
                            (int)d->mesh);
        npipe += d->pipeline != 0;
        if (d->pipeline && (d->mesh != TS_MESH_DENSE || d->fold))
            return ts_error(TS_ERR_INVALID,
                            "mesh: axis \"%s\": the pipeline is defined on the dense mesh, "
                            "without a fold",
                            d->name);
        if (d->fold && d->mesh != TS_MESH_EXPERT)
            return ts_error(TS_ERR_INVALID,
                            "mesh: axis \"%s\" folds onto \"%s\", but only an expert axis "
                            "takes the place of a dense one",
                            d->name, d->fold);
        if (!d->fold) snprintf(mesh->slot_name[mesh->nslots++], TS_MESH_NAME_MAX, "%s", d->name);
    }
    if (npipe > 1)
        return ts_error(TS_ERR_INVALID, "mesh: %d axes are the pipeline; one may be", npipe);
    mesh->pipeline = -1;
    for (int pass = 0; pass < 2; pass++) /* dense, then expert */
        for (int i = 0; i < n; i++) {
            const ts_mesh_axis_def *d = &defs[i];
            if ((int)d->mesh != pass) continue;
            mesh_axis *x = &mesh->axes[mesh->naxes++];
            snprintf(x->name, sizeof x->name, "%s", d->name);
            x->kind = d->mesh;
            x->pipeline = d->pipeline != 0;
            x->size = d->size;
            x->batch = d->batch != 0;
            const char *slot = d->fold ? d->fold : d->name;
            x->slot = mesh_lookup_slot(mesh, slot, strlen(slot));
            int fold_ok = x->slot >= 0;
            for (int j = 0; fold_ok && d->fold && j < n; j++)
                if (strcmp(defs[j].name, d->fold) == 0)
                    fold_ok = defs[j].mesh == TS_MESH_DENSE && !defs[j].pipeline;
            if (!fold_ok)
                return ts_error(TS_ERR_INVALID,
                                "mesh: axis \"%s\" folds onto \"%s\", which is not a dense "
                                "axis of its own place",
                                d->name, d->fold);
            if (x->pipeline) mesh->pipeline = x->slot;
        }
    for (int a = 0; a < mesh->naxes; a++)
        for (int b = 0; b < a; b++)
            if (mesh->axes[a].slot == mesh->axes[b].slot &&
                mesh->axes[a].kind == mesh->axes[b].kind)
                return ts_error(TS_ERR_INVALID,
                                "mesh: axes \"%s\" and \"%s\" of the %s mesh take the same "
                                "place",
                                mesh->axes[b].name, mesh->axes[a].name,
                                mesh->axes[a].kind ? "expert" : "dense");
    return TS_OK;
}

/* "tp 2 x cp 1 x dp 3 x pp 2" in slot order over the axes of `kind`
 * (skipping `skip`, -1 for none), and their product. */
static double mesh_describe(const ts_mesh *mesh, int kind, int skip, char *buf, size_t cap) {
    double prod = 1;
    size_t j = 0;
    buf[0] = '\0';
    for (int s = 0; s < mesh->nslots; s++)
        for (int a = 0; a < mesh->naxes; a++) {
            const mesh_axis *x = &mesh->axes[a];
            if (x->slot != s || a == skip || !(x->kind == kind || x->pipeline)) continue;
            prod *= x->size;
            if (j < cap)
                j +=
                    (size_t)snprintf(buf + j, cap - j, "%s%s %d", j ? " x " : "", x->name, x->size);
        }
    return prod;
}

/* Sizes: checks, folds and derives one mesh at a time. */
static ts_status mesh_derive(ts_mesh *mesh, int kind) {
    const char *mname = kind == TS_MESH_DENSE ? "dense" : "expert";
    int derived = -1;
    for (int a = 0; a < mesh->naxes; a++) {
        mesh_axis *x = &mesh->axes[a];
        if (!(x->kind == kind || x->pipeline)) continue;
        if (x->size == 0 && !(x->pipeline && kind == TS_MESH_EXPERT)) {
            if (derived >= 0)
                return ts_error(TS_ERR_INVALID,
                                "%s mesh: both %s and %s are to be derived; give one of them "
                                "a size",
                                mname, mesh->axes[derived].name, x->name);
            derived = a;
        }
    }
    char desc[512], note[128] = "";
    for (int a = 0; a < mesh->naxes; a++) {
        mesh_axis *x = &mesh->axes[a];
        if (x->kind != kind || x->size != TS_MESH_SIZE_OF_FOLD) continue;
        for (int b = 0; b < mesh->naxes; b++)
            if (mesh->axes[b].kind == TS_MESH_DENSE && mesh->axes[b].slot == x->slot) {
                x->size = mesh->axes[b].size;
                snprintf(note, sizeof note, " (%s was not given: it defaults to %s)", x->name,
                         mesh->axes[b].name);
            }
    }
    if (derived >= 0) {
        mesh_axis *x = &mesh->axes[derived];
        double others = mesh_describe(mesh, kind, derived, desc, sizeof desc);
        if (others > mesh->world || mesh->world % (int)others != 0)
            return ts_error(TS_ERR_INVALID,
                            "%s mesh: %s cannot be derived: the world of %d ranks is not "
                            "divisible by %s = %.0f%s",
                            mname, x->name, mesh->world, desc, others, note);
        x->size = mesh->world / (int)others;
    }
    double prod = mesh_describe(mesh, kind, -1, desc, sizeof desc);
    if (prod != mesh->world)
        return ts_error(TS_ERR_INVALID, "%s mesh: %s = %.0f, but the world has %d ranks%s", mname,
                        desc, prod, mesh->world, note);
    return TS_OK;
}

static ts_status mesh_check_sizes(ts_mesh *mesh) {
    if (mesh->world < 1)
        return ts_error(TS_ERR_INVALID, "mesh: the world must have at least 1 rank (got %d)",
                        mesh->world);
    for (int a = 0; a < mesh->naxes; a++) {
        const mesh_axis *x = &mesh->axes[a];
        if (x->size < 0 && x->size != TS_MESH_SIZE_OF_FOLD)
            return ts_error(TS_ERR_INVALID,
                            "mesh: %s = %d; a size must be positive (or 0 for its default)",
                            x->name, x->size);
        if (x->size == TS_MESH_SIZE_OF_FOLD && x->kind == TS_MESH_DENSE)
            return ts_error(TS_ERR_INVALID,
                            "mesh: %s takes the size of a fold, but is no expert axis", x->name);
        if (x->size > mesh->world)
            return ts_error(TS_ERR_INVALID, "mesh: %s = %d is larger than the world of %d ranks",
                            x->name, x->size, mesh->world);
    }
    TS_TRY(mesh_derive(mesh, TS_MESH_DENSE));
    TS_TRY(mesh_derive(mesh, TS_MESH_EXPERT));
    for (int k = 0; k < 2; k++)
        for (int s = 0; s < mesh->nslots; s++)
            mesh->size[k][s] = 1;
    for (int a = 0; a < mesh->naxes; a++) {
        const mesh_axis *x = &mesh->axes[a];
        mesh->size[x->kind][x->slot] = x->size;
        if (x->pipeline) mesh->size[TS_MESH_EXPERT][x->slot] = x->size;
    }
    return TS_OK;
}

/* Parses `order` into mesh->order and mesh->order_str. Sizes must be set. */
static ts_status mesh_parse_order(ts_mesh *mesh, const char *order) {
    char dflt[sizeof mesh->order_str];
    size_t j = 0;
    for (int s = 0; s < mesh->nslots; s++)
        j += (size_t)snprintf(dflt + j, sizeof dflt - j, "%s%s", s ? "-" : "", mesh->slot_name[s]);
    if (!order || !*order) order = dflt;
    int seen[TS_MESH_MAX_AXES] = {0};
    int n = 0, pos = 0;
    const char *p = order;
    char valid[512];
    for (;;) {
        const char *dash = strchr(p, '-');
        size_t len = dash ? (size_t)(dash - p) : strlen(p);
        pos++;
        if (len == 0)
            return ts_error(TS_ERR_INVALID,
                            "mesh: order \"%s\": empty axis name at position %d (write names "
                            "joined by '-', e.g. %s)",
                            order, pos, dflt);
        int slot = mesh_lookup_slot(mesh, p, len);
        if (slot < 0) {
            int a = mesh_lookup(mesh, p, len);
            char hint[128] = "";
            if (a >= 0)
                snprintf(hint, sizeof hint, "; the expert mesh puts %s in %s's place",
                         mesh->axes[a].name, mesh->slot_name[mesh->axes[a].slot]);
            return ts_error(TS_ERR_INVALID,
                            "mesh: order \"%s\": unknown axis \"%.*s\"%s (valid: %s)", order,
                            (int)len, p, hint, mesh_names(mesh, 2, 0, valid, sizeof valid));
        }
        if (seen[slot])
            return ts_error(TS_ERR_INVALID, "mesh: order \"%s\": axis \"%s\" appears twice", order,
                            mesh->slot_name[slot]);
        seen[slot] = 1;
        mesh->order[n++] = slot;
        if (!dash) break;
        p = dash + 1;
    }
    /* Names left out go last, in default order, if 1 in both meshes. */
    for (int s = 0; s < mesh->nslots; s++) {
        if (seen[s]) continue;
        for (int k = 0; k < 2; k++)
            if (mesh->size[k][s] != 1)
                return ts_error(TS_ERR_INVALID,
                                "mesh: order \"%s\" leaves out %s, whose size is %d in the %s "
                                "mesh; name every axis of size above 1 (default order %s)",
                                order, mesh->slot_name[s], mesh->size[k][s],
                                k == TS_MESH_DENSE ? "dense" : "expert", dflt);
        mesh->order[n++] = s;
    }
    j = 0;
    for (int i = 0; i < mesh->nslots; i++)
        j += (size_t)snprintf(mesh->order_str + j, sizeof mesh->order_str - j, "%s%s", i ? "-" : "",
                              mesh->slot_name[mesh->order[i]]);
    return TS_OK;
}

static void mesh_set_strides(ts_mesh *mesh) {
    for (int k = 0; k < 2; k++) {
        int stride = 1;
        for (int i = 0; i < mesh->nslots; i++) {
            int s = mesh->order[i];
            mesh->stride[k][s] = stride;
            stride *= mesh->size[k][s];
        }
    }
}

static int mesh_slot_coord(const ts_mesh *mesh, int kind, int slot, int rank) {
    return rank / mesh->stride[kind][slot] % mesh->size[kind][slot];
}

static int mesh_slot_rank_at(const ts_mesh *mesh, int kind, int slot, int rank, int coord) {
    int now = mesh_slot_coord(mesh, kind, slot, rank);
    return rank + (coord - now) * mesh->stride[kind][slot];
}

/* The name of the axis of `kind` in `slot` ("1" when it has none). */
static const char *mesh_slot_axis(const ts_mesh *mesh, int kind, int slot) {
    for (int a = 0; a < mesh->naxes; a++)
        if (mesh->axes[a].slot == slot && (mesh->axes[a].kind == kind || mesh->axes[a].pipeline))
            return mesh->axes[a].name;
    return "1";
}

/* Megatron-LM requires the pp groups of both meshes to be the same list. */
static ts_status mesh_check_pipeline(const ts_mesh *mesh) {
    const int ps = mesh->pipeline;
    if (ps < 0) return TS_OK;
    const int pp = mesh->size[TS_MESH_DENSE][ps];
    for (int r = 0; r < mesh->world; r++)
        for (int stage = 0; stage < pp; stage++) {
            int d = mesh_slot_rank_at(mesh, TS_MESH_DENSE, ps, r, stage);
            int e = mesh_slot_rank_at(mesh, TS_MESH_EXPERT, ps, r, stage);
            if (d == e) continue;
            char dense[512], expert[512], fix[256] = "";
            mesh_describe(mesh, TS_MESH_DENSE, -1, dense, sizeof dense);
            mesh_describe(mesh, TS_MESH_EXPERT, -1, expert, sizeof expert);
            /* The slots after the pipeline whose sizes differ. */
            size_t j = 0;
            int after = 0;
            for (int i = 0; i < mesh->nslots; i++) {
                int s = mesh->order[i];
                if (s == ps) after = 1;
                if (!after || s == ps || mesh->size[0][s] == mesh->size[1][s]) continue;
                j += (size_t)snprintf(fix + j, sizeof fix - j, "%s%s equal %s", j ? " and " : "",
                                      mesh_slot_axis(mesh, TS_MESH_EXPERT, s),
                                      mesh_slot_axis(mesh, TS_MESH_DENSE, s));
            }
            return ts_error(TS_ERR_INVALID,
                            "mesh: order \"%s\": the pipeline of rank %d has rank %d at stage %d "
                            "in the dense mesh (%s) but rank %d in the expert mesh (%s); put %s "
                            "last in the order%s%s",
                            mesh->order_str, r, d, stage, dense, e, expert, mesh->slot_name[ps],
                            j ? " or make " : "", fix);
        }
    return TS_OK;
}

static ts_status mesh_parse_token(const ts_mesh *mesh, const char *axes, mesh_token *tok);

static ts_status mesh_take_tokens(ts_mesh *mesh, const char *const *tokens, int n) {
    if (!tokens) n = mesh->naxes;
    if (n > MESH_MAX_TOKENS)
        return ts_error(TS_ERR_INVALID, "mesh: %d group tokens (at most %d)", n, MESH_MAX_TOKENS);
    for (int i = 0; i < n; i++) {
        const char *t = tokens ? tokens[i] : mesh->axes[i].name;
        mesh_token tok;
        if (!t || strlen(t) >= MESH_TOKEN_MAX)
            return ts_error(TS_ERR_INVALID, "mesh: group token %d is missing or too long", i);
        TS_TRY(mesh_parse_token(mesh, t, &tok));
        snprintf(mesh->tokens[mesh->ntokens++], MESH_TOKEN_MAX, "%s", t);
    }
    return TS_OK;
}

ts_status ts_mesh_create_axes(int world, const ts_mesh_axis_def *axes, int naxes, const char *order,
                              const char *const *tokens, int ntokens, ts_mesh **out) {
    *out = NULL;
    if (!axes) return ts_error(TS_ERR_INVALID, "mesh: no axes given");
    ts_mesh *mesh = calloc(1, sizeof *mesh);
    if (!mesh) return ts_error(TS_ERR_NOMEM, "mesh: out of memory");
    mesh->world = world;
    ts_status st = mesh_take_axes(mesh, axes, naxes);
    if (!st) st = mesh_check_sizes(mesh);
    if (!st) st = mesh_parse_order(mesh, order);
    if (!st) {
        mesh_set_strides(mesh);
        st = mesh_check_pipeline(mesh);
    }
    if (!st) st = mesh_take_tokens(mesh, tokens, ntokens);
    if (st) {
        free(mesh);
        return st;
    }
    *out = mesh;
    return TS_OK;
}

void ts_mesh_destroy(ts_mesh *mesh) {
    free(mesh);
}

int ts_mesh_world(const ts_mesh *mesh) {
    return mesh->world;
}

const char *ts_mesh_order(const ts_mesh *mesh) {
    return mesh->order_str;
}

int ts_mesh_num_axes(const ts_mesh *mesh) {
    return mesh->naxes;
}

const char *ts_mesh_axis_at(const ts_mesh *mesh, int i) {
    return i >= 0 && i < mesh->naxes ? mesh->axes[i].name : NULL;
}

int ts_mesh_find_axis(const ts_mesh *mesh, const char *name) {
    return name ? mesh_lookup(mesh, name, strlen(name)) : -1;
}

int ts_mesh_axis_kind_at(const ts_mesh *mesh, int i) {
    return i >= 0 && i < mesh->naxes ? mesh->axes[i].kind : -1;
}

int ts_mesh_axis_size_at(const ts_mesh *mesh, int i) {
    return i >= 0 && i < mesh->naxes ? mesh->axes[i].size : -1;
}

int ts_mesh_axis_is_pipeline(const ts_mesh *mesh, int i) {
    return i >= 0 && i < mesh->naxes ? mesh->axes[i].pipeline : -1;
}

int ts_mesh_axes_of(const ts_mesh *mesh, ts_mesh_kind kind, const char **names, int cap) {
    int n = 0;
    for (int slot = 0; slot < mesh->nslots; slot++)
        for (int a = 0; a < mesh->naxes; a++) {
            const mesh_axis *x = &mesh->axes[a];
            if (x->slot != slot || !(x->kind == (int)kind || x->pipeline)) continue;
            if (n < cap) names[n] = x->name;
            n++;
        }
    return n;
}

int ts_mesh_axis_cuts_batch_at(const ts_mesh *mesh, int i) {
    return i >= 0 && i < mesh->naxes ? mesh->axes[i].batch : -1;
}

int ts_mesh_batch_width(const ts_mesh *mesh) {
    int w = 1;
    for (int a = 0; a < mesh->naxes; a++)
        if (mesh->axes[a].batch) w *= mesh->axes[a].size;
    return w;
}

const char *ts_mesh_pipeline_axis(const ts_mesh *mesh) {
    for (int a = 0; a < mesh->naxes; a++)
        if (mesh->axes[a].pipeline) return mesh->axes[a].name;
    return NULL;
}

int ts_mesh_size(const ts_mesh *mesh, const char *name) {
    int a = ts_mesh_find_axis(mesh, name);
    return a < 0 ? -1 : mesh->axes[a].size;
}

int ts_mesh_coord_of(const ts_mesh *mesh, int rank, const char *name) {
    int a = ts_mesh_find_axis(mesh, name);
    if (a < 0 || rank < 0 || rank >= mesh->world) return -1;
    return mesh_slot_coord(mesh, mesh->axes[a].kind, mesh->axes[a].slot, rank);
}

int ts_mesh_rank_along(const ts_mesh *mesh, int rank, const char *name, int coord) {
    int a = ts_mesh_find_axis(mesh, name);
    if (a < 0 || rank < 0 || rank >= mesh->world) return -1;
    if (coord < 0 || coord >= mesh->axes[a].size) return -1;
    return mesh_slot_rank_at(mesh, mesh->axes[a].kind, mesh->axes[a].slot, rank, coord);
}

int ts_mesh_num_tokens(const ts_mesh *mesh) {
    return mesh->ntokens;
}

const char *ts_mesh_token_at(const ts_mesh *mesh, int i) {
    return i >= 0 && i < mesh->ntokens ? mesh->tokens[i] : NULL;
}

/* ---------------------------------------------------------------------------
 * Groups
 * ------------------------------------------------------------------------- */

static ts_status mesh_parse_token(const ts_mesh *mesh, const char *axes, mesh_token *tok) {
    memset(tok, 0, sizeof *tok);
    char ex[256];
    if (!axes || !*axes)
        return ts_error(TS_ERR_INVALID,
                        "mesh: empty group name (expected one axis or several "
                        "joined by '-', e.g. \"%s\")",
                        mesh->axes[0].name);
    int seen[TS_MESH_MAX_AXES] = {0};
    int dense = 0, expert = 0;
    const char *p = axes;
    for (;;) {
        const char *dash = strchr(p, '-');
        size_t len = dash ? (size_t)(dash - p) : strlen(p);
        if (len == 0) return ts_error(TS_ERR_INVALID, "mesh: group \"%s\": empty axis name", axes);
        int a = mesh_lookup(mesh, p, len);
        if (a < 0)
            return ts_error(TS_ERR_INVALID, "mesh: group \"%s\": unknown axis \"%.*s\" (valid: %s)",
                            axes, (int)len, p, mesh_names(mesh, -1, 1, ex, sizeof ex));
        if (seen[a])
            return ts_error(TS_ERR_INVALID, "mesh: group \"%s\": axis \"%s\" appears twice", axes,
                            mesh->axes[a].name);
        seen[a] = 1;
        if (!mesh->axes[a].pipeline) {
            dense |= mesh->axes[a].kind == TS_MESH_DENSE;
            expert |= mesh->axes[a].kind == TS_MESH_EXPERT;
        }
        tok->masked[mesh->axes[a].slot] = 1;
        if (!dash) break;
        p = dash + 1;
    }
    if (dense && expert) {
        char dn[256];
        const char *pipe = ts_mesh_pipeline_axis(mesh);
        char en[256] = "";
        size_t j = 0; /* expert axes in slot order */
        for (int i = 0; i < mesh->nslots; i++)
            for (int a = 0; a < mesh->naxes; a++)
                if (mesh->axes[a].slot == i && mesh->axes[a].kind == TS_MESH_EXPERT)
                    j += (size_t)snprintf(en + j, sizeof en - j, "%s%s", j ? ", " : "",
                                          mesh->axes[a].name);
        return ts_error(TS_ERR_INVALID,
                        "mesh: group \"%s\" mixes dense axes (%s) with expert axes (%s)%s%s%s",
                        axes, mesh_names(mesh, TS_MESH_DENSE, 0, dn, sizeof dn), en,
                        pipe ? "; " : "", pipe ? pipe : "", pipe ? " goes with either" : "");
    }
    tok->kind = expert ? TS_MESH_EXPERT : TS_MESH_DENSE;
    return TS_OK;
}

/* Spreads `value` in mixed radix over the slots that are (want == 1) or are
 * not (want == 0) masked, fastest first, and returns the rank offset. */
static int mesh_compose(const ts_mesh *mesh, const mesh_token *tok, int want, int value) {
    int rank = 0;
    for (int i = 0; i < mesh->nslots; i++) {
        int s = mesh->order[i];
        if (tok->masked[s] != want) continue;
        int n = mesh->size[tok->kind][s];
        rank += value % n * mesh->stride[tok->kind][s];
        value /= n;
    }
    return rank;
}

static int mesh_group_size(const ts_mesh *mesh, const mesh_token *tok) {
    int size = 1;
    for (int s = 0; s < mesh->nslots; s++)
        if (tok->masked[s]) size *= mesh->size[tok->kind][s];
    return size;
}

ts_status ts_mesh_groups_init(ts_mesh_groups *out, const ts_mesh *mesh, const char *axes) {
    memset(out, 0, sizeof *out);
    mesh_token tok;
    TS_TRY(mesh_parse_token(mesh, axes, &tok));
    int size = mesh_group_size(mesh, &tok), count = mesh->world / size;
    int *ranks = malloc((size_t)mesh->world * sizeof *ranks);
    if (!ranks)
        return ts_error(TS_ERR_NOMEM, "mesh: no memory for the %d ranks of group \"%s\"",
                        mesh->world, axes);
    for (int g = 0; g < count; g++) {
        int base = mesh_compose(mesh, &tok, 0, g);
        for (int p = 0; p < size; p++)
            ranks[g * size + p] = base + mesh_compose(mesh, &tok, 1, p);
    }
    out->count = count;
    out->size = size;
    out->ranks = ranks;
    return TS_OK;
}

void ts_mesh_groups_free(ts_mesh_groups *groups) {
    if (!groups) return;
    free(groups->ranks);
    memset(groups, 0, sizeof *groups);
}

ts_status ts_mesh_group_of(const ts_mesh *mesh, const char *axes, int rank, ts_mesh_group *out,
                           int *members, int capacity) {
    mesh_token tok;
    TS_TRY(mesh_parse_token(mesh, axes, &tok));
    if (rank < 0 || rank >= mesh->world)
        return ts_error(TS_ERR_INVALID,
                        "mesh: group \"%s\": rank %d is outside the world of %d ranks", axes, rank,
                        mesh->world);
    int index = 0, position = 0, size = 1, count = 1, base = rank;
    for (int i = 0; i < mesh->nslots; i++) {
        int s = mesh->order[i];
        int n = mesh->size[tok.kind][s];
        int c = mesh_slot_coord(mesh, tok.kind, s, rank);
        if (tok.masked[s]) {
            position += c * size;
            size *= n;
            base -= c * mesh->stride[tok.kind][s];
        } else {
            index += c * count;
            count *= n;
        }
    }
    if (members) {
        if (capacity < size)
            return ts_error(TS_ERR_INVALID,
                            "mesh: group \"%s\" has %d ranks but the members buffer holds %d", axes,
                            size, capacity);
        for (int p = 0; p < size; p++)
            members[p] = base + mesh_compose(mesh, &tok, 1, p);
    }
    out->index = index;
    out->position = position;
    out->size = size;
    out->count = count;
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * JSON
 * ------------------------------------------------------------------------- */

/* Counts what it is given and copies what fits into buf. */
typedef struct mesh_sink {
    char *buf;
    size_t cap;
    size_t len;
} mesh_sink;

__attribute__((format(printf, 2, 3))) static void mesh_emit(mesh_sink *sink, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = sink->len < sink->cap ? sink->buf + sink->len : NULL;
    size_t room = sink->len < sink->cap ? sink->cap - sink->len : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0) sink->len += (size_t)n;
}

size_t ts_mesh_json_format(const ts_mesh *mesh, char *buf, size_t cap) {
    mesh_sink sink = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    mesh_emit(&sink, "{\"world\":%d,\"order\":\"%s\",\"sizes\":{", mesh->world, mesh->order_str);
    for (int i = 0; i < mesh->naxes; i++)
        mesh_emit(&sink, "%s\"%s\":%d", i ? "," : "", mesh->axes[i].name, mesh->axes[i].size);
    mesh_emit(&sink, "},\"groups\":{");
    for (int t = 0; t < mesh->ntokens; t++) {
        mesh_token tok;
        ts_status st = mesh_parse_token(mesh, mesh->tokens[t], &tok);
        TS_ASSERT(st == TS_OK);
        int size = mesh_group_size(mesh, &tok), count = mesh->world / size;
        mesh_emit(&sink, "%s\"%s\":[", t ? "," : "", mesh->tokens[t]);
        for (int g = 0; g < count; g++) {
            int base = mesh_compose(mesh, &tok, 0, g);
            mesh_emit(&sink, "%s[", g ? "," : "");
            for (int p = 0; p < size; p++)
                mesh_emit(&sink, "%s%d", p ? "," : "", base + mesh_compose(mesh, &tok, 1, p));
            mesh_emit(&sink, "]");
        }
        mesh_emit(&sink, "]");
    }
    mesh_emit(&sink, "}}");
    return sink.len;
}

ts_status ts_mesh_json_write(const ts_mesh *mesh, FILE *f) {
    size_t len = ts_mesh_json_format(mesh, NULL, 0);
    char *text = malloc(len + 1);
    if (!text) return ts_error(TS_ERR_NOMEM, "mesh: no memory for %zu bytes of JSON", len + 1);
    ts_mesh_json_format(mesh, text, len + 1);
    int ok = fwrite(text, 1, len, f) == len && fputc('\n', f) != EOF;
    free(text);
    if (!ok) return ts_error(TS_ERR_IO, "mesh: could not write the JSON text");
    return TS_OK;
}
