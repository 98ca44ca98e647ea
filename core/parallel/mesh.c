/*
 * mesh.c — the dense and expert process meshes: size validation, the order
 * string, coordinates, and the rank groups of single axes and of products of
 * axes (Megatron-LM's RankGenerator arithmetic, written afresh in C).
 *
 * Pure arithmetic on rank numbers: no MPI, no communicators, no plugins. The
 * only allocation is the ranks array of ts_mesh_groups and the mesh itself.
 */
#include <ctype.h>  /* tolower: names are case-insensitive          */
#include <stdarg.h> /* va_list for the JSON sink                    */
#include <stdlib.h> /* calloc, malloc, free                          */
#include <string.h> /* strchr, strcmp, memcpy, memset                */

#include "tessera/mesh.h" /* the API, ts_error, TS_TRY, TS_ASSERT */

/* The five slots of the order string, in the default order. */
enum { SLOT_TP, SLOT_CP, SLOT_EP, SLOT_DP, SLOT_PP, SLOT_COUNT };

static const char *const mesh_slot_names[SLOT_COUNT] = {"tp", "cp", "ep", "dp", "pp"};
static const char *const mesh_axis_names[TS_AXIS_COUNT] = {"tp", "cp",  "dp", "pp",
                                                           "ep", "etp", "edp"};

/* Which mesh and which slot each axis lives in (pp: dense, equal in both). */
static const ts_mesh_kind mesh_axis_kind[TS_AXIS_COUNT] = {
    TS_MESH_DENSE,  TS_MESH_DENSE,  TS_MESH_DENSE, TS_MESH_DENSE,
    TS_MESH_EXPERT, TS_MESH_EXPERT, TS_MESH_EXPERT};
static const int mesh_axis_slot[TS_AXIS_COUNT] = {SLOT_TP, SLOT_CP, SLOT_DP, SLOT_PP,
                                                  SLOT_EP, SLOT_TP, SLOT_DP};

#define MESH_NAME_MAX 8 /* longest name is 3 characters; room for junk */

struct ts_mesh {
    int world;
    int axis_size[TS_AXIS_COUNT];
    int order[SLOT_COUNT];          /* slot at each position, fastest first */
    int size[2][SLOT_COUNT];        /* [kind][slot]                         */
    int stride[2][SLOT_COUNT];      /* [kind][slot]                         */
    char order_str[4 * SLOT_COUNT]; /* "tp-cp-ep-dp-pp" and a NUL           */
};

/* A parsed group token: its mesh and which slots it names. */
typedef struct mesh_token {
    ts_mesh_kind kind;
    int masked[SLOT_COUNT];
} mesh_token;

/* ------------------------------------------------------------------------- */

const char *ts_mesh_axis_name(ts_mesh_axis axis) {
    if ((int)axis < 0 || axis >= TS_AXIS_COUNT) return "?";
    return mesh_axis_names[axis];
}

/* Copies `len` bytes of `src` lower-cased into `dst` (MESH_NAME_MAX bytes);
 * returns 0 if it does not fit. */
static int mesh_lower_copy(char *dst, const char *src, size_t len) {
    if (len >= MESH_NAME_MAX) return 0;
    for (size_t i = 0; i < len; i++)
        dst[i] = (char)tolower((unsigned char)src[i]);
    dst[len] = '\0';
    return 1;
}

static int mesh_lookup_axis(const char *name, size_t len) {
    char low[MESH_NAME_MAX];
    if (!mesh_lower_copy(low, name, len)) return -1;
    for (int a = 0; a < TS_AXIS_COUNT; a++)
        if (strcmp(low, mesh_axis_names[a]) == 0) return a;
    return -1;
}

ts_status ts_mesh_axis_from_name(const char *name, ts_mesh_axis *out) {
    int a = name ? mesh_lookup_axis(name, strlen(name)) : -1;
    if (a < 0)
        return ts_error(TS_ERR_INVALID,
                        "mesh: unknown axis \"%s\" (valid: tp, cp, dp, pp, "
                        "ep, etp, edp)",
                        name ? name : "(null)");
    *out = (ts_mesh_axis)a;
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * Creation
 * ------------------------------------------------------------------------- */

/* Parses `order` into mesh->order and mesh->order_str. Sizes must be set. */
static ts_status mesh_parse_order(ts_mesh *mesh, const char *order) {
    if (!order || !*order) order = TS_MESH_DEFAULT_ORDER;
    int seen[SLOT_COUNT] = {0};
    int n = 0, pos = 0;
    const char *p = order;
    for (;;) {
        const char *dash = strchr(p, '-');
        size_t len = dash ? (size_t)(dash - p) : strlen(p);
        pos++;
        if (len == 0)
            return ts_error(TS_ERR_INVALID,
                            "mesh: order \"%s\": empty axis name at position "
                            "%d (write names joined by '-', e.g. %s)",
                            order, pos, TS_MESH_DEFAULT_ORDER);
        char low[MESH_NAME_MAX];
        int slot = -1;
        if (mesh_lower_copy(low, p, len))
            for (int s = 0; s < SLOT_COUNT; s++)
                if (strcmp(low, mesh_slot_names[s]) == 0) slot = s;
        if (slot < 0) {
            int is_expert =
                mesh_lower_copy(low, p, len) && (!strcmp(low, "etp") || !strcmp(low, "edp"));
            return ts_error(TS_ERR_INVALID,
                            "mesh: order \"%s\": unknown axis \"%.*s\"%s "
                            "(valid: tp, cp, ep, dp, pp)",
                            order, (int)len, p,
                            is_expert ? "; the expert mesh puts etp in tp's "
                                        "place and edp in dp's"
                                      : "");
        }
        if (seen[slot])
            return ts_error(TS_ERR_INVALID, "mesh: order \"%s\": axis \"%s\" appears twice", order,
                            mesh_slot_names[slot]);
        seen[slot] = 1;
        mesh->order[n++] = slot;
        if (!dash) break;
        p = dash + 1;
    }
    /* Names left out go last, in default order, if 1 in both meshes. */
    for (int s = 0; s < SLOT_COUNT; s++) {
        if (seen[s]) continue;
        for (int k = 0; k < 2; k++)
            if (mesh->size[k][s] != 1)
                return ts_error(TS_ERR_INVALID,
                                "mesh: order \"%s\" leaves out %s, whose size is %d in the "
                                "%s mesh; name every axis of size above 1 (default order "
                                "%s)",
                                order, mesh_slot_names[s], mesh->size[k][s],
                                k == TS_MESH_DENSE ? "dense" : "expert", TS_MESH_DEFAULT_ORDER);
        mesh->order[n++] = s;
    }
    char *w = mesh->order_str;
    for (int i = 0; i < SLOT_COUNT; i++) {
        if (i) *w++ = '-';
        memcpy(w, mesh_slot_names[mesh->order[i]], 2);
        w += 2;
    }
    *w = '\0';
    return TS_OK;
}

static ts_status mesh_check_sizes(const ts_mesh_sizes *in, ts_mesh *mesh) {
    const int world = in->world;
    if (world < 1)
        return ts_error(TS_ERR_INVALID, "mesh: the world must have at least 1 rank (got %d)",
                        world);
    const char *names[] = {"tp", "cp", "ep", "dp", "pp", "etp", "edp"};
    const int given[] = {in->tp, in->cp, in->ep, in->dp, in->pp, in->etp, in->edp};
    for (int i = 0; i < 7; i++) {
        if (given[i] < 0)
            return ts_error(TS_ERR_INVALID,
                            "mesh: %s = %d; a size must be positive (or 0 for "
                            "its default)",
                            names[i], given[i]);
        if (given[i] > world)
            return ts_error(TS_ERR_INVALID,
                            "mesh: %s = %d is larger than the world of %d "
                            "ranks",
                            names[i], given[i], world);
    }
    const int tp = in->tp ? in->tp : 1, cp = in->cp ? in->cp : 1;
    const int ep = in->ep ? in->ep : 1, pp = in->pp ? in->pp : 1;
    const int etp = in->etp ? in->etp : tp;
    const char *etp_note = in->etp ? "" : " (etp was not given: it defaults to tp)";

    /* Products in double: every factor is at most the world (< 2^31), so a
     * product that fits in 2^53 is exact and a larger one is not the world. */
    int dp = in->dp;
    double model = (double)tp * cp * pp;
    if (dp == 0) {
        if (model > world || world % (int)model != 0)
            return ts_error(TS_ERR_INVALID,
                            "dense mesh: dp cannot be derived: the world of %d "
                            "ranks is not divisible by tp %d x cp %d x pp %d = "
                            "%.0f",
                            world, tp, cp, pp, model);
        dp = world / (int)model;
    } else if (model * dp != world) {
        return ts_error(TS_ERR_INVALID,
                        "dense mesh: tp %d x cp %d x dp %d x pp %d = %.0f, but "
                        "the world has %d ranks",
                        tp, cp, dp, pp, model * dp, world);
    }
    int edp = in->edp;
    double expert_model = (double)etp * ep * pp;
    if (edp == 0) {
        if (expert_model > world || world % (int)expert_model != 0)
            return ts_error(TS_ERR_INVALID,
                            "expert mesh: edp cannot be derived: the world of "
                            "%d ranks is not divisible by etp %d x ep %d x pp "
                            "%d = %.0f%s",
                            world, etp, ep, pp, expert_model, etp_note);
        edp = world / (int)expert_model;
    } else if (expert_model * edp != world) {
        return ts_error(TS_ERR_INVALID,
                        "expert mesh: etp %d x ep %d x edp %d x pp %d = %.0f, "
                        "but the world has %d ranks%s",
                        etp, ep, edp, pp, expert_model * edp, world, etp_note);
    }

    mesh->world = world;
    mesh->axis_size[TS_AXIS_TP] = tp;
    mesh->axis_size[TS_AXIS_CP] = cp;
    mesh->axis_size[TS_AXIS_DP] = dp;
    mesh->axis_size[TS_AXIS_PP] = pp;
    mesh->axis_size[TS_AXIS_EP] = ep;
    mesh->axis_size[TS_AXIS_ETP] = etp;
    mesh->axis_size[TS_AXIS_EDP] = edp;
    const int dense[SLOT_COUNT] = {tp, cp, 1, dp, pp};
    const int expert[SLOT_COUNT] = {etp, 1, ep, edp, pp};
    memcpy(mesh->size[TS_MESH_DENSE], dense, sizeof dense);
    memcpy(mesh->size[TS_MESH_EXPERT], expert, sizeof expert);
    return TS_OK;
}

static void mesh_set_strides(ts_mesh *mesh) {
    for (int k = 0; k < 2; k++) {
        int stride = 1;
        for (int i = 0; i < SLOT_COUNT; i++) {
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

/* Megatron-LM requires the pp groups of both meshes to be the same list. */
static ts_status mesh_check_pipeline(const ts_mesh *mesh) {
    const int pp = mesh->size[TS_MESH_DENSE][SLOT_PP];
    for (int r = 0; r < mesh->world; r++)
        for (int stage = 0; stage < pp; stage++) {
            int d = mesh_slot_rank_at(mesh, TS_MESH_DENSE, SLOT_PP, r, stage);
            int e = mesh_slot_rank_at(mesh, TS_MESH_EXPERT, SLOT_PP, r, stage);
            if (d != e)
                return ts_error(TS_ERR_INVALID,
                                "mesh: order \"%s\": the pipeline of rank %d has rank %d "
                                "at stage %d in the dense mesh (tp %d x cp %d x dp %d x pp "
                                "%d) but rank %d in the expert mesh (etp %d x ep %d x edp "
                                "%d x pp %d); put pp last in the order or make edp equal "
                                "dp",
                                mesh->order_str, r, d, stage, mesh->axis_size[TS_AXIS_TP],
                                mesh->axis_size[TS_AXIS_CP], mesh->axis_size[TS_AXIS_DP], pp, e,
                                mesh->axis_size[TS_AXIS_ETP], mesh->axis_size[TS_AXIS_EP],
                                mesh->axis_size[TS_AXIS_EDP], pp);
        }
    return TS_OK;
}

ts_status ts_mesh_create(const ts_mesh_sizes *sizes, const char *order, ts_mesh **out) {
    *out = NULL;
    if (!sizes) return ts_error(TS_ERR_INVALID, "mesh: no sizes given");
    ts_mesh *mesh = calloc(1, sizeof *mesh);
    if (!mesh) return ts_error(TS_ERR_NOMEM, "mesh: out of memory");
    ts_status st = mesh_check_sizes(sizes, mesh);
    if (!st) st = mesh_parse_order(mesh, order);
    if (!st) {
        mesh_set_strides(mesh);
        st = mesh_check_pipeline(mesh);
    }
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

int ts_mesh_axis_size(const ts_mesh *mesh, ts_mesh_axis axis) {
    if ((int)axis < 0 || axis >= TS_AXIS_COUNT) return -1;
    return mesh->axis_size[axis];
}

int ts_mesh_coord(const ts_mesh *mesh, int rank, ts_mesh_axis axis) {
    if ((int)axis < 0 || axis >= TS_AXIS_COUNT) return -1;
    if (rank < 0 || rank >= mesh->world) return -1;
    return mesh_slot_coord(mesh, mesh_axis_kind[axis], mesh_axis_slot[axis], rank);
}

int ts_mesh_rank_at(const ts_mesh *mesh, int rank, ts_mesh_axis axis, int coord) {
    if ((int)axis < 0 || axis >= TS_AXIS_COUNT) return -1;
    if (rank < 0 || rank >= mesh->world) return -1;
    if (coord < 0 || coord >= mesh->axis_size[axis]) return -1;
    return mesh_slot_rank_at(mesh, mesh_axis_kind[axis], mesh_axis_slot[axis], rank, coord);
}

/* ---------------------------------------------------------------------------
 * Groups
 * ------------------------------------------------------------------------- */

static ts_status mesh_parse_token(const char *axes, mesh_token *tok) {
    memset(tok, 0, sizeof *tok);
    if (!axes || !*axes)
        return ts_error(TS_ERR_INVALID, "mesh: empty group name (expected e.g. "
                                        "\"tp\", \"dp-cp\", \"etp-ep\")");
    int seen[TS_AXIS_COUNT] = {0};
    int dense = 0, expert = 0;
    const char *p = axes;
    for (;;) {
        const char *dash = strchr(p, '-');
        size_t len = dash ? (size_t)(dash - p) : strlen(p);
        if (len == 0) return ts_error(TS_ERR_INVALID, "mesh: group \"%s\": empty axis name", axes);
        int a = mesh_lookup_axis(p, len);
        if (a < 0)
            return ts_error(TS_ERR_INVALID,
                            "mesh: group \"%s\": unknown axis \"%.*s\" (valid: "
                            "tp, cp, dp, pp, ep, etp, edp)",
                            axes, (int)len, p);
        if (seen[a])
            return ts_error(TS_ERR_INVALID, "mesh: group \"%s\": axis \"%s\" appears twice", axes,
                            mesh_axis_names[a]);
        seen[a] = 1;
        if (a == TS_AXIS_TP || a == TS_AXIS_CP || a == TS_AXIS_DP) dense = 1;
        if (a == TS_AXIS_EP || a == TS_AXIS_ETP || a == TS_AXIS_EDP) expert = 1;
        tok->masked[mesh_axis_slot[a]] = 1;
        if (!dash) break;
        p = dash + 1;
    }
    if (dense && expert)
        return ts_error(TS_ERR_INVALID,
                        "mesh: group \"%s\" mixes dense axes (tp, cp, dp) with "
                        "expert axes (etp, ep, edp); pp goes with either (for "
                        "the expert tensor-and-expert group write \"etp-ep\")",
                        axes);
    tok->kind = expert ? TS_MESH_EXPERT : TS_MESH_DENSE;
    return TS_OK;
}

/* Spreads `value` in mixed radix over the slots that are (want == 1) or are
 * not (want == 0) masked, fastest first, and returns the rank offset. */
static int mesh_compose(const ts_mesh *mesh, const mesh_token *tok, int want, int value) {
    int rank = 0;
    for (int i = 0; i < SLOT_COUNT; i++) {
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
    for (int s = 0; s < SLOT_COUNT; s++)
        if (tok->masked[s]) size *= mesh->size[tok->kind][s];
    return size;
}

ts_status ts_mesh_groups_init(ts_mesh_groups *out, const ts_mesh *mesh, const char *axes) {
    memset(out, 0, sizeof *out);
    mesh_token tok;
    TS_TRY(mesh_parse_token(axes, &tok));
    int size = mesh_group_size(mesh, &tok), count = mesh->world / size;
    int *ranks = malloc((size_t)mesh->world * sizeof *ranks);
    if (!ranks)
        return ts_error(TS_ERR_NOMEM,
                        "mesh: no memory for the %d ranks of "
                        "group \"%s\"",
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
    TS_TRY(mesh_parse_token(axes, &tok));
    if (rank < 0 || rank >= mesh->world)
        return ts_error(TS_ERR_INVALID,
                        "mesh: group \"%s\": rank %d is outside the world of "
                        "%d ranks",
                        axes, rank, mesh->world);
    int index = 0, position = 0, size = 1, count = 1, base = rank;
    for (int i = 0; i < SLOT_COUNT; i++) {
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
                            "mesh: group \"%s\" has %d ranks but the members "
                            "buffer holds %d",
                            axes, size, capacity);
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
    static const char *const tokens[] = {TS_MESH_JSON_TOKENS};
    static const ts_mesh_axis size_order[] = {TS_AXIS_TP, TS_AXIS_CP,  TS_AXIS_DP, TS_AXIS_PP,
                                              TS_AXIS_EP, TS_AXIS_ETP, TS_AXIS_EDP};
    mesh_sink sink = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    mesh_emit(&sink, "{\"world\":%d,\"order\":\"%s\",\"sizes\":{", mesh->world, mesh->order_str);
    for (int i = 0; i < TS_AXIS_COUNT; i++)
        mesh_emit(&sink, "%s\"%s\":%d", i ? "," : "", mesh_axis_names[size_order[i]],
                  mesh->axis_size[size_order[i]]);
    mesh_emit(&sink, "},\"groups\":{");
    for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++) {
        mesh_token tok;
        ts_status st = mesh_parse_token(tokens[t], &tok);
        TS_ASSERT(st == TS_OK);
        int size = mesh_group_size(mesh, &tok), count = mesh->world / size;
        mesh_emit(&sink, "%s\"%s\":[", t ? "," : "", tokens[t]);
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
