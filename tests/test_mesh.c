/*
 * test_mesh.c — guards the process mesh: that every group of every axis and
 * product of axes, in both meshes, is the group Megatron-LM would build.
 *
 * Expectations come from two places that do not share code with core/mesh/mesh.c:
 *   1. literal groups from Megatron-LM's documented examples
 *      (initialize_model_parallel and generate_masked_orthogonal_rank_groups);
 *   2. a deliberately different re-derivation in this file: each rank is
 *      decomposed by repeated division, ranks are visited ascending and put
 *      in the bucket of ranks that share every coordinate outside the token.
 * It also checks the size and order errors and their messages. No MPI.
 */
#include <stdio.h>  /* printf, tmpfile, snprintf */
#include <string.h> /* strcmp, strstr, memcmp, strtok */

#include "tessera/mesh.h" /* the mesh under test, ts_last_error */

static int failures = 0;
static int checks = 0;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
        }                                                                                          \
    } while (0)

/* ---------------------------------------------------------------------------
 * The independent model: names, not slots; coordinates by repeated division.
 * ------------------------------------------------------------------------- */

#define REF_MAX_WORLD 256

typedef struct ref_mesh {
    int world;
    int naxes;        /* always 5 after filling in missing names      */
    char names[5][4]; /* order, fastest first: "tp", "cp", ...         */
    int dense[5];     /* size of each ordered name in the dense mesh   */
    int expert[5];    /* ... and in the expert mesh                   */
} ref_mesh;

/* Size of an order name in one mesh (the table in mesh.h, restated). */
static int ref_size(const ts_mesh_sizes *s, const char *name, int expert) {
    if (!strcmp(name, "tp")) return expert ? s->etp : s->tp;
    if (!strcmp(name, "cp")) return expert ? 1 : s->cp;
    if (!strcmp(name, "ep")) return expert ? s->ep : 1;
    if (!strcmp(name, "dp")) return expert ? s->edp : s->dp;
    return s->pp;
}

/* `full` must give every size (no zeros). */
static void ref_build(ref_mesh *m, const ts_mesh_sizes *full, const char *order) {
    static const char *all[5] = {"tp", "cp", "ep", "dp", "pp"};
    char copy[64];
    snprintf(copy, sizeof copy, "%s", order ? order : "tp-cp-ep-dp-pp");
    for (char *c = copy; *c; c++) /* order names are case-insensitive */
        if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
    m->world = full->world;
    m->naxes = 0;
    for (char *tok = strtok(copy, "-"); tok; tok = strtok(NULL, "-"))
        snprintf(m->names[m->naxes++], 4, "%s", tok);
    for (int i = 0; i < 5; i++) {
        int found = 0;
        for (int j = 0; j < m->naxes; j++)
            found |= !strcmp(m->names[j], all[i]);
        if (!found) snprintf(m->names[m->naxes++], 4, "%s", all[i]);
    }
    for (int i = 0; i < 5; i++) {
        m->dense[i] = ref_size(full, m->names[i], 0);
        m->expert[i] = ref_size(full, m->names[i], 1);
    }
}

/* Maps a token axis name to (order name, mesh). */
static void ref_axis(const char *axis, const char **name, int *expert) {
    *expert = !strcmp(axis, "ep") || !strcmp(axis, "etp") || !strcmp(axis, "edp");
    if (!strcmp(axis, "etp"))
        *name = "tp";
    else if (!strcmp(axis, "edp"))
        *name = "dp";
    else
        *name = axis;
}

static void ref_coords(const ref_mesh *m, int expert, int rank, int *coord) {
    const int *n = expert ? m->expert : m->dense;
    for (int i = 0; i < 5; i++) {
        coord[i] = rank % n[i];
        rank /= n[i];
    }
}

typedef struct ref_groups {
    int count, size;
    int ranks[REF_MAX_WORLD]; /* group g at ranks[g*size ...]            */
    int group_of[REF_MAX_WORLD];
    int position_of[REF_MAX_WORLD];
} ref_groups;

/* Buckets the ranks by their coordinates outside the token's axes. */
static void ref_group(const ref_mesh *m, const char *token, ref_groups *out) {
    int masked[5] = {0}, expert = 0;
    char copy[64];
    snprintf(copy, sizeof copy, "%s", token);
    for (char *tok = strtok(copy, "-"); tok; tok = strtok(NULL, "-")) {
        const char *name;
        int e;
        ref_axis(tok, &name, &e);
        expert |= e;
        for (int i = 0; i < 5; i++)
            if (!strcmp(m->names[i], name)) masked[i] = 1;
    }
    int keys[REF_MAX_WORLD][5], fill[REF_MAX_WORLD];
    int lists[REF_MAX_WORLD][REF_MAX_WORLD];
    int nbuckets = 0;
    for (int r = 0; r < m->world; r++) {
        int c[5];
        ref_coords(m, expert, r, c);
        for (int i = 0; i < 5; i++)
            if (masked[i]) c[i] = -1;
        int b = 0;
        while (b < nbuckets && memcmp(keys[b], c, sizeof c))
            b++;
        if (b == nbuckets) {
            memcpy(keys[b], c, sizeof c);
            fill[b] = 0;
            nbuckets++;
        }
        out->group_of[r] = b;
        out->position_of[r] = fill[b];
        lists[b][fill[b]++] = r;
    }
    out->count = nbuckets;
    out->size = m->world / nbuckets;
    for (int b = 0; b < nbuckets; b++)
        memcpy(out->ranks + b * out->size, lists[b], (size_t)out->size * sizeof(int));
}

/* ---------------------------------------------------------------------------
 * Comparisons
 * ------------------------------------------------------------------------- */

static void check_token(const ts_mesh *mesh, const ref_mesh *ref, const char *label,
                        const char *token) {
    static ref_groups want; /* large; keep it off the stack */
    ref_group(ref, token, &want);
    ts_mesh_groups got;
    ts_status st = ts_mesh_groups_init(&got, mesh, token);
    CHECK(st == TS_OK, "%s %s: %s", label, token, ts_last_error());
    if (st) return;
    CHECK(got.count == want.count && got.size == want.size, "%s %s: %d groups of %d, want %d of %d",
          label, token, got.count, got.size, want.count, want.size);
    if (got.count == want.count && got.size == want.size)
        for (int i = 0; i < got.count * got.size; i++)
            if (got.ranks[i] != want.ranks[i]) {
                CHECK(0, "%s %s: group %d slot %d is rank %d, want %d", label, token, i / got.size,
                      i % got.size, got.ranks[i], want.ranks[i]);
                break;
            }
    int members[REF_MAX_WORLD];
    for (int r = 0; r < ref->world; r++) {
        ts_mesh_group g;
        st = ts_mesh_group_of(mesh, token, r, &g, members, REF_MAX_WORLD);
        CHECK(st == TS_OK, "%s %s rank %d: %s", label, token, r, ts_last_error());
        if (st) continue;
        int ok =
            g.index == want.group_of[r] && g.position == want.position_of[r] &&
            g.size == want.size && g.count == want.count && members[g.position] == r &&
            !memcmp(members, want.ranks + g.index * want.size, (size_t)want.size * sizeof(int));
        CHECK(ok, "%s %s rank %d: group %d position %d, want %d %d", label, token, r, g.index,
              g.position, want.group_of[r], want.position_of[r]);
    }
    ts_mesh_groups_free(&got);
    CHECK(got.ranks == NULL && got.count == 0, "free zeroes the struct");
}

/* Builds the JSON the mesh should print from the reference groups. */
static void ref_json(const ref_mesh *ref, const ts_mesh_sizes *full, const char *order, char *out,
                     size_t cap) {
    static const char *tokens[] = {TS_MESH_JSON_TOKENS};
    static ref_groups g;
    size_t n = (size_t)snprintf(out, cap,
                                "{\"world\":%d,\"order\":\"%s\",\"sizes\":{\"tp\":%d,\"cp\":%d,"
                                "\"dp\":%d,\"pp\":%d,\"ep\":%d,\"etp\":%d,\"edp\":%d},\"groups\":{",
                                full->world, order, full->tp, full->cp, full->dp, full->pp,
                                full->ep, full->etp, full->edp);
    for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++) {
        ref_group(ref, tokens[t], &g);
        n += (size_t)snprintf(out + n, cap - n, "%s\"%s\":[", t ? "," : "", tokens[t]);
        for (int k = 0; k < g.count; k++) {
            n += (size_t)snprintf(out + n, cap - n, "%s[", k ? "," : "");
            for (int p = 0; p < g.size; p++)
                n += (size_t)snprintf(out + n, cap - n, "%s%d", p ? "," : "",
                                      g.ranks[k * g.size + p]);
            n += (size_t)snprintf(out + n, cap - n, "]");
        }
        n += (size_t)snprintf(out + n, cap - n, "]");
    }
    snprintf(out + n, cap - n, "}}");
}

/* Creates the mesh from `asked` (zeros allowed), checks derived sizes against
 * `full`, then every coordinate, every token and the JSON against the
 * reference. Returns the mesh for literal checks (caller destroys). */
static ts_mesh *check_case(const char *label, ts_mesh_sizes asked, ts_mesh_sizes full,
                           const char *order, const char *normalized) {
    ts_mesh *mesh = NULL;
    ts_status st = ts_mesh_create(&asked, order, &mesh);
    CHECK(st == TS_OK, "%s: create: %s", label, ts_last_error());
    if (st) return NULL;
    CHECK(!strcmp(ts_mesh_order(mesh), normalized), "%s: order %s, want %s", label,
          ts_mesh_order(mesh), normalized);
    CHECK(ts_mesh_world(mesh) == full.world, "%s: world", label);
    const int want_size[TS_AXIS_COUNT] = {full.tp, full.cp,  full.dp, full.pp,
                                          full.ep, full.etp, full.edp};
    for (int a = 0; a < TS_AXIS_COUNT; a++)
        CHECK(ts_mesh_axis_size(mesh, (ts_mesh_axis)a) == want_size[a], "%s: %s size %d, want %d",
              label, ts_mesh_axis_name((ts_mesh_axis)a), ts_mesh_axis_size(mesh, (ts_mesh_axis)a),
              want_size[a]);

    ref_mesh ref;
    ref_build(&ref, &full, order);

    /* Coordinates and rank_at against repeated division. */
    for (int r = 0; r < full.world; r++)
        for (int a = 0; a < TS_AXIS_COUNT; a++) {
            const char *name;
            int expert, c[5], i = 0;
            ref_axis(ts_mesh_axis_name((ts_mesh_axis)a), &name, &expert);
            ref_coords(&ref, expert, r, c);
            while (strcmp(ref.names[i], name))
                i++;
            int got = ts_mesh_coord(mesh, r, (ts_mesh_axis)a);
            CHECK(got == c[i], "%s: rank %d %s coord %d, want %d", label, r,
                  ts_mesh_axis_name((ts_mesh_axis)a), got, c[i]);
            for (int k = 0; k < want_size[a]; k++) {
                int other = ts_mesh_rank_at(mesh, r, (ts_mesh_axis)a, k);
                int oc[5];
                ref_coords(&ref, expert, other < 0 ? 0 : other, oc);
                int same = other >= 0 && oc[i] == k;
                for (int j = 0; j < 5; j++)
                    if (j != i) same &= oc[j] == c[j];
                CHECK(same, "%s: rank_at(%d, %s, %d) = %d", label, r,
                      ts_mesh_axis_name((ts_mesh_axis)a), k, other);
            }
        }

    static const char *tokens[] = {
        TS_MESH_JSON_TOKENS, "cp-dp", "dp-tp", "tp-cp-dp-pp", "ep-pp", "edp-pp", "ep-etp",
        "edp-ep-etp-pp",     "cp-pp", "TP-DP"};
    for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++) {
        if (!strcmp(tokens[t], "TP-DP")) { /* names are case-insensitive */
            ts_mesh_groups a, b;
            CHECK(ts_mesh_groups_init(&a, mesh, "TP-DP") == TS_OK &&
                      ts_mesh_groups_init(&b, mesh, "tp-dp") == TS_OK &&
                      !memcmp(a.ranks, b.ranks, (size_t)full.world * sizeof(int)),
                  "%s: TP-DP == tp-dp", label);
            ts_mesh_groups_free(&a);
            ts_mesh_groups_free(&b);
            continue;
        }
        check_token(mesh, &ref, label, tokens[t]);
    }

    /* JSON: the whole text against the reference, and snprintf semantics. */
    static char want[1 << 16], got[1 << 16];
    ref_json(&ref, &full, normalized, want, sizeof want);
    size_t len = ts_mesh_json_format(mesh, NULL, 0);
    size_t len2 = ts_mesh_json_format(mesh, got, sizeof got);
    CHECK(len == len2 && len == strlen(want), "%s: json length %zu %zu %zu", label, len, len2,
          strlen(want));
    CHECK(!strcmp(got, want), "%s: json\n got  %s\n want %s", label, got, want);
    char small[16];
    ts_mesh_json_format(mesh, small, sizeof small);
    CHECK(strlen(small) == 15 && !strncmp(small, want, 15), "%s: truncated json \"%s\"", label,
          small);
    return mesh;
}

/* Group `g` of `token` equals the literal list `want` (n ranks). */
static void check_literal(const ts_mesh *mesh, const char *token, int g, const int *want, int n) {
    ts_mesh_groups got;
    ts_status st = ts_mesh_groups_init(&got, mesh, token);
    CHECK(st == TS_OK, "%s: %s", token, ts_last_error());
    if (st) return;
    int ok = got.size == n && g < got.count &&
             !memcmp(got.ranks + g * got.size, want, (size_t)n * sizeof(int));
    CHECK(ok, "literal %s group %d differs from Megatron's example", token, g);
    ts_mesh_groups_free(&got);
}

#define LIT(mesh, token, g, ...)                                                                   \
    do {                                                                                           \
        const int lit_[] = {__VA_ARGS__};                                                          \
        check_literal(mesh, token, g, lit_, (int)(sizeof lit_ / sizeof(int)));                     \
    } while (0)

/* ---------------------------------------------------------------------------
 * Cases
 * ------------------------------------------------------------------------- */

static void test_megatron_16_tp2_pp4(void) {
    /* initialize_model_parallel's docstring: 16 GPUs, tp 2, pp 4. */
    ts_mesh_sizes asked = {.world = 16, .tp = 2, .pp = 4};
    ts_mesh_sizes full = {16, 2, 1, 1, 2, 4, 2, 2};
    ts_mesh *m = check_case("w16 tp2 pp4", asked, full, NULL, "tp-cp-ep-dp-pp");
    if (!m) return;
    const int dp[8][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}};
    for (int g = 0; g < 8; g++) {
        check_literal(m, "dp", g, dp[g], 2);
        LIT(m, "tp", g, 2 * g, 2 * g + 1);
    }
    LIT(m, "pp", 0, 0, 4, 8, 12);
    LIT(m, "pp", 1, 1, 5, 9, 13);
    LIT(m, "pp", 2, 2, 6, 10, 14);
    LIT(m, "pp", 3, 3, 7, 11, 15);
    ts_mesh_group g;
    int members[4];
    CHECK(ts_mesh_group_of(m, "pp", 9, &g, members, 4) == TS_OK && g.index == 1 &&
              g.position == 2 && g.size == 4 && g.count == 4 && members[0] == 1 && members[3] == 13,
          "rank 9's pipeline is group 1, stage 2");
    CHECK(ts_mesh_coord(m, 9, TS_AXIS_PP) == 2 && ts_mesh_rank_at(m, 9, TS_AXIS_PP, 3) == 13,
          "rank 9: stage 2, next stage rank 13");
    ts_mesh_destroy(m);
}

static void test_megatron_cp_example(void) {
    /* context_parallel_size doc: 8 GPUs, tp 4, cp 2 -> cp [0,4] .. [3,7]. */
    ts_mesh_sizes asked = {.world = 8, .tp = 4, .cp = 2};
    ts_mesh_sizes full = {8, 4, 2, 1, 1, 1, 4, 2};
    ts_mesh *m = check_case("w8 tp4 cp2", asked, full, NULL, "tp-cp-ep-dp-pp");
    if (!m) return;
    for (int g = 0; g < 4; g++)
        LIT(m, "cp", g, g, g + 4);
    LIT(m, "tp", 1, 4, 5, 6, 7);
    ts_mesh_destroy(m);
}

static void test_megatron_masked_docstring(void) {
    /* generate_masked_orthogonal_rank_groups: sizes [tp 2, dp 3, pp 4] in
     * order tp-dp-pp; dp groups [0,2,4], [1,3,5], ..., [19,21,23]. */
    ts_mesh_sizes asked = {.world = 24, .tp = 2, .dp = 3, .pp = 4};
    ts_mesh_sizes full = {24, 2, 1, 1, 3, 4, 2, 3};
    ts_mesh *m = check_case("w24 tp-dp-pp", asked, full, "tp-dp-pp", "tp-dp-pp-cp-ep");
    if (!m) return;
    LIT(m, "dp", 0, 0, 2, 4);
    LIT(m, "dp", 1, 1, 3, 5);
    LIT(m, "dp", 7, 19, 21, 23);
    ts_mesh_destroy(m);

    /* Same docstring: 8 GPUs, order tp-pp-dp, 2-2-2: dp [0,4] [1,5] ... */
    ts_mesh_sizes asked8 = {.world = 8, .tp = 2, .pp = 2, .dp = 2};
    ts_mesh_sizes full8 = {8, 2, 1, 1, 2, 2, 2, 2};
    m = check_case("w8 tp-pp-dp", asked8, full8, "tp-pp-dp", "tp-pp-dp-cp-ep");
    if (!m) return;
    for (int g = 0; g < 4; g++)
        LIT(m, "dp", g, g, g + 4);
    LIT(m, "pp", 0, 0, 2);
    LIT(m, "pp", 3, 5, 7);
    ts_mesh_destroy(m);
}

static void test_w16_folded_moe(void) {
    /* tp 2, cp 2, pp 2, dp 2; expert etp 1, ep 4, edp 2. */
    ts_mesh_sizes asked = {.world = 16, .tp = 2, .cp = 2, .pp = 2, .dp = 2, .etp = 1, .ep = 4};
    ts_mesh_sizes full = {16, 2, 2, 4, 2, 2, 1, 2};
    ts_mesh *m = check_case("w16 moe", asked, full, NULL, "tp-cp-ep-dp-pp");
    if (!m) return;
    LIT(m, "tp", 0, 0, 1);
    LIT(m, "cp", 0, 0, 2);
    LIT(m, "cp", 1, 1, 3);
    LIT(m, "dp", 0, 0, 4);
    LIT(m, "dp-cp", 0, 0, 2, 4, 6);
    LIT(m, "dp-cp", 2, 8, 10, 12, 14);
    LIT(m, "pp", 0, 0, 8);
    LIT(m, "tp-pp", 0, 0, 1, 8, 9);
    LIT(m, "tp-dp-cp", 1, 8, 9, 10, 11, 12, 13, 14, 15);
    LIT(m, "ep", 0, 0, 1, 2, 3);
    LIT(m, "ep", 3, 12, 13, 14, 15);
    LIT(m, "edp", 0, 0, 4);
    LIT(m, "edp", 4, 8, 12);
    LIT(m, "etp", 5, 5);
    LIT(m, "etp-ep-pp", 0, 0, 1, 2, 3, 8, 9, 10, 11);
    ts_mesh_destroy(m);
}

static void test_other_shapes(void) {
    ts_mesh *m;
    m = check_case("w8 tp2 pp2 dp2", (ts_mesh_sizes){.world = 8, .tp = 2, .pp = 2, .dp = 2},
                   (ts_mesh_sizes){8, 2, 1, 1, 2, 2, 2, 2}, NULL, "tp-cp-ep-dp-pp");
    ts_mesh_destroy(m);
    m = check_case("w12 tp3 dp4", (ts_mesh_sizes){.world = 12, .tp = 3, .dp = 4},
                   (ts_mesh_sizes){12, 3, 1, 1, 4, 1, 3, 4}, NULL, "tp-cp-ep-dp-pp");
    if (m) LIT(m, "dp", 2, 2, 5, 8, 11);
    ts_mesh_destroy(m);
    m = check_case(
        "w64 moe",
        (ts_mesh_sizes){.world = 64, .tp = 4, .cp = 2, .pp = 2, .dp = 4, .ep = 8, .etp = 1},
        (ts_mesh_sizes){64, 4, 2, 8, 4, 2, 1, 4}, NULL, "tp-cp-ep-dp-pp");
    if (m) {
        LIT(m, "ep", 1, 8, 9, 10, 11, 12, 13, 14, 15);
        LIT(m, "edp", 0, 0, 8, 16, 24);
        LIT(m, "pp", 0, 0, 32);
        LIT(m, "cp", 0, 0, 4);
    }
    ts_mesh_destroy(m);
    /* Everything given, dp and edp included; etp bigger than tp. */
    m = check_case(
        "w32 etp>tp",
        (ts_mesh_sizes){
            .world = 32, .tp = 2, .cp = 2, .pp = 2, .dp = 4, .ep = 2, .etp = 4, .edp = 2},
        (ts_mesh_sizes){32, 2, 2, 2, 4, 2, 4, 2}, NULL, "tp-cp-ep-dp-pp");
    ts_mesh_destroy(m);
    /* One rank: every group is {0}. */
    m = check_case("w1", (ts_mesh_sizes){.world = 1}, (ts_mesh_sizes){1, 1, 1, 1, 1, 1, 1, 1}, NULL,
                   "tp-cp-ep-dp-pp");
    ts_mesh_destroy(m);
}

static void test_non_default_orders(void) {
    ts_mesh *m;
    /* Megatron's "pp before dp" layout: pp groups are equal in both meshes
     * because edp == dp. */
    m = check_case("w16 tp-cp-ep-pp-dp",
                   (ts_mesh_sizes){.world = 16, .tp = 2, .pp = 2, .ep = 2, .etp = 1},
                   (ts_mesh_sizes){16, 2, 1, 2, 4, 2, 1, 4}, "tp-cp-ep-pp-dp", "tp-cp-ep-pp-dp");
    if (m) {
        LIT(m, "pp", 0, 0, 2);
        LIT(m, "dp", 0, 0, 4, 8, 12);
        LIT(m, "ep", 0, 0, 1);
        LIT(m, "edp", 1, 1, 5, 9, 13);
    }
    ts_mesh_destroy(m);
    m = check_case("w16 tp-pp-dp-cp-ep",
                   (ts_mesh_sizes){.world = 16, .tp = 2, .pp = 2, .cp = 2, .ep = 2, .etp = 2},
                   (ts_mesh_sizes){16, 2, 2, 2, 2, 2, 2, 2}, "tp-pp-dp-cp-ep", "tp-pp-dp-cp-ep");
    ts_mesh_destroy(m);
    m = check_case("w24 pp-dp-cp-tp-ep (upper case)",
                   (ts_mesh_sizes){.world = 24, .tp = 3, .pp = 2, .cp = 2},
                   (ts_mesh_sizes){24, 3, 2, 1, 2, 2, 3, 4}, "PP-Dp-cp-tp-ep", "pp-dp-cp-tp-ep");
    ts_mesh_destroy(m);
}

/* Creation must fail with TS_ERR_INVALID and a message containing `needle`. */
static void expect_error(const char *label, ts_mesh_sizes s, const char *order,
                         const char *needle) {
    ts_mesh *m = (ts_mesh *)&s; /* anything non-NULL: create must clear it */
    ts_status st = ts_mesh_create(&s, order, &m);
    CHECK(st == TS_ERR_INVALID && m == NULL, "%s: status %d", label, st);
    CHECK(strstr(ts_last_error(), needle) != NULL, "%s: message \"%s\" lacks \"%s\"", label,
          ts_last_error(), needle);
    if (st == TS_OK) ts_mesh_destroy(m);
}

static void test_errors(void) {
    expect_error("dense product", (ts_mesh_sizes){.world = 16, .tp = 2, .dp = 3, .pp = 2}, NULL,
                 "dense mesh: tp 2 x cp 1 x dp 3 x pp 2 = 12, but the world "
                 "has 16 ranks");
    expect_error("dense derive", (ts_mesh_sizes){.world = 16, .tp = 3, .pp = 2}, NULL,
                 "dense mesh: dp cannot be derived: the world of 16 ranks is "
                 "not divisible by tp 3 x cp 1 x pp 2 = 6");
    expect_error("expert product",
                 (ts_mesh_sizes){.world = 16, .tp = 2, .pp = 2, .ep = 4, .etp = 1, .edp = 3}, NULL,
                 "expert mesh: etp 1 x ep 4 x edp 3 x pp 2 = 24, but the "
                 "world has 16 ranks");
    expect_error("expert derive with etp defaulted", (ts_mesh_sizes){.world = 12, .tp = 2, .ep = 4},
                 NULL,
                 "not divisible by etp 2 x ep 4 x pp 1 = 8 (etp was not "
                 "given: it defaults to tp)");
    expect_error("too big", (ts_mesh_sizes){.world = 4, .tp = 8}, NULL,
                 "tp = 8 is larger than the world of 4 ranks");
    expect_error("negative", (ts_mesh_sizes){.world = 4, .pp = -1}, NULL, "pp = -1");
    expect_error("no world", (ts_mesh_sizes){.tp = 1}, NULL, "at least 1 rank");
    expect_error("unknown axis", (ts_mesh_sizes){.world = 4, .tp = 2}, "tp-xp-dp-pp",
                 "order \"tp-xp-dp-pp\": unknown axis \"xp\"");
    expect_error("etp in order", (ts_mesh_sizes){.world = 4, .tp = 2}, "etp-cp-ep-dp-pp",
                 "puts etp in tp's place");
    expect_error("duplicate axis", (ts_mesh_sizes){.world = 4, .tp = 2}, "tp-dp-tp",
                 "axis \"tp\" appears twice");
    expect_error("empty name", (ts_mesh_sizes){.world = 4, .tp = 2}, "tp--dp",
                 "empty axis name at position 2");
    expect_error("trailing dash", (ts_mesh_sizes){.world = 4, .tp = 2}, "tp-dp-",
                 "empty axis name at position 3");
    expect_error("missing cp", (ts_mesh_sizes){.world = 8, .tp = 2, .cp = 2}, "tp-dp-pp",
                 "leaves out cp, whose size is 2 in the dense");
    expect_error("missing ep", (ts_mesh_sizes){.world = 8, .ep = 2}, "tp-cp-dp-pp",
                 "leaves out ep, whose size is 2 in the expert");
    /* tp-pp-dp with edp 4 != dp 2: the pipelines would differ. */
    expect_error("pipelines differ", (ts_mesh_sizes){.world = 8, .tp = 2, .pp = 2, .etp = 1},
                 "tp-pp-dp", "put pp last in the order or make edp equal dp");

    /* Token errors. */
    ts_mesh *m = NULL;
    ts_mesh_sizes s = {.world = 8, .tp = 2, .ep = 2};
    CHECK(ts_mesh_create(&s, NULL, &m) == TS_OK, "%s", ts_last_error());
    if (!m) return;
    ts_mesh_groups g;
    struct {
        const char *token, *needle;
    } bad[] = {{"tp-ep", "mixes dense axes"},
               {"xp", "unknown axis \"xp\""},
               {"dp-dp", "axis \"dp\" appears twice"},
               {"dp-", "empty axis name"},
               {"", "empty group name"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ts_status st = ts_mesh_groups_init(&g, m, bad[i].token);
        CHECK(st == TS_ERR_INVALID && g.ranks == NULL && strstr(ts_last_error(), bad[i].needle),
              "token \"%s\": %s", bad[i].token, ts_last_error());
    }
    ts_mesh_group one;
    int members[1];
    CHECK(ts_mesh_group_of(m, "tp", 8, &one, NULL, 0) == TS_ERR_INVALID, "rank out of range");
    CHECK(ts_mesh_group_of(m, "tp", 0, &one, members, 1) == TS_ERR_INVALID &&
              strstr(ts_last_error(), "buffer holds 1"),
          "small members buffer: %s", ts_last_error());
    CHECK(ts_mesh_group_of(m, "tp", 3, &one, NULL, 0) == TS_OK && one.size == 2 && one.index == 1 &&
              one.position == 1,
          "group_of without members");
    CHECK(ts_mesh_coord(m, 8, TS_AXIS_TP) == -1 && ts_mesh_coord(m, 0, TS_AXIS_COUNT) == -1 &&
              ts_mesh_rank_at(m, 0, TS_AXIS_TP, 2) == -1 &&
              ts_mesh_axis_size(m, TS_AXIS_COUNT) == -1,
          "out-of-range getters return -1");
    ts_mesh_axis a;
    CHECK(ts_mesh_axis_from_name("EDP", &a) == TS_OK && a == TS_AXIS_EDP, "axis by name");
    CHECK(ts_mesh_axis_from_name("sp", &a) == TS_ERR_INVALID, "unknown axis by name");
    ts_mesh_destroy(m);
}

static void test_json_write(void) {
    ts_mesh *m = NULL;
    ts_mesh_sizes s = {.world = 4, .tp = 2};
    CHECK(ts_mesh_create(&s, NULL, &m) == TS_OK, "%s", ts_last_error());
    if (!m) return;
    const char *want = "{\"world\":4,\"order\":\"tp-cp-ep-dp-pp\",\"sizes\":{\"tp\":2,"
                       "\"cp\":1,\"dp\":2,\"pp\":1,\"ep\":1,\"etp\":2,\"edp\":2},\"groups\":{"
                       "\"tp\":[[0,1],[2,3]],\"cp\":[[0],[1],[2],[3]],\"dp\":[[0,2],[1,3]],"
                       "\"pp\":[[0],[1],[2],[3]],\"dp-cp\":[[0,2],[1,3]],"
                       "\"tp-cp\":[[0,1],[2,3]],\"tp-dp\":[[0,1,2,3]],"
                       "\"tp-dp-cp\":[[0,1,2,3]],\"tp-pp\":[[0,1],[2,3]],"
                       "\"ep\":[[0],[1],[2],[3]],\"etp\":[[0,1],[2,3]],"
                       "\"edp\":[[0,2],[1,3]],\"etp-ep\":[[0,1],[2,3]],"
                       "\"etp-ep-pp\":[[0,1],[2,3]]}}\n";
    char buf[2048] = {0};
    FILE *f = tmpfile();
    CHECK(f != NULL, "tmpfile");
    if (f) {
        CHECK(ts_mesh_json_write(m, f) == TS_OK, "%s", ts_last_error());
        rewind(f);
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        CHECK(!strcmp(buf, want), "json file\n got  %s want %s", buf, want);
    }
    ts_mesh_destroy(m);
}

/* Axes by name: a strategy's own axes (hsdp's shard and replicate) beside
 * the standard ones, and the definitions the mesh refuses. */
static void test_named_axes(void) {
    const ts_mesh_axis_def defs[] = {{"tp", 2, TS_MESH_DENSE, 0, NULL, 0},
                                     {"shard", 2, TS_MESH_DENSE, 0, NULL, 1},
                                     {"replicate", 0, TS_MESH_DENSE, 0, NULL, 1},
                                     {"pp", 1, TS_MESH_DENSE, 1, NULL, 0},
                                     {"etp", TS_MESH_SIZE_OF_FOLD, TS_MESH_EXPERT, 0, "tp", 0},
                                     {"edp", 0, TS_MESH_EXPERT, 0, "shard", 0}};
    ts_mesh *m = NULL;
    CHECK(ts_mesh_create_axes(8, defs, 6, NULL, NULL, 0, &m) == TS_OK, "named: %s",
          ts_last_error());
    if (!m) return;
    CHECK(!strcmp(ts_mesh_order(m), "tp-shard-replicate-pp"), "named order %s", ts_mesh_order(m));
    CHECK(ts_mesh_size(m, "replicate") == 2 && ts_mesh_size(m, "etp") == 2 &&
              ts_mesh_size(m, "edp") == 4 && ts_mesh_size(m, "nope") == -1,
          "named sizes: derived replicate 2, etp tp's 2, edp derived 4");
    CHECK(ts_mesh_batch_width(m) == 4, "batch width shard x replicate = %d",
          ts_mesh_batch_width(m));
    CHECK(!strcmp(ts_mesh_pipeline_axis(m), "pp"), "the pipeline axis");
    /* rank = tp + 2 shard + 4 replicate */
    CHECK(ts_mesh_coord_of(m, 6, "shard") == 1 && ts_mesh_coord_of(m, 6, "replicate") == 1 &&
              ts_mesh_coord_of(m, 6, "tp") == 0 && ts_mesh_coord_of(m, 6, "edp") == 3,
          "named coordinates of rank 6");
    CHECK(ts_mesh_rank_along(m, 6, "replicate", 0) == 2 &&
              ts_mesh_rank_along(m, 6, "shard", 2) == -1,
          "rank along");
    ts_mesh_groups g;
    CHECK(ts_mesh_groups_init(&g, m, "shard") == TS_OK && g.count == 4 && g.size == 2 &&
              g.ranks[0] == 0 && g.ranks[1] == 2 && g.ranks[2] == 1 && g.ranks[3] == 3,
          "shard groups [0,2] [1,3] ...");
    ts_mesh_groups_free(&g);
    CHECK(ts_mesh_groups_init(&g, m, "replicate-shard") == TS_OK && g.count == 2 && g.size == 4 &&
              g.ranks[0] == 0 && g.ranks[1] == 2 && g.ranks[2] == 4 && g.ranks[3] == 6,
          "shard-replicate groups [0,2,4,6] [1,3,5,7]");
    ts_mesh_groups_free(&g);
    CHECK(ts_mesh_groups_init(&g, m, "shard-etp") == TS_ERR_INVALID &&
              strstr(ts_last_error(), "mixes dense axes (tp, shard, replicate) with expert axes "
                                      "(etp, edp)"),
          "a token mixing meshes: %s", ts_last_error());
    const char *names[8];
    CHECK(ts_mesh_axes_of(m, TS_MESH_DENSE, names, 8) == 4 && !strcmp(names[1], "shard") &&
              !strcmp(names[3], "pp"),
          "dense axes in their places");
    CHECK(ts_mesh_axes_of(m, TS_MESH_EXPERT, names, 8) == 3 && !strcmp(names[0], "etp") &&
              !strcmp(names[1], "edp") && !strcmp(names[2], "pp"),
          "expert axes in their places: etp edp pp");
    CHECK(ts_mesh_num_tokens(m) == 6 && !strcmp(ts_mesh_token_at(m, 1), "shard"),
          "without a token list every axis alone");
    ts_mesh_destroy(m);
    /* An order naming the plugin's axes; leaving one out that is above 1. */
    CHECK(ts_mesh_create_axes(8, defs, 6, "replicate-tp-shard", NULL, 0, &m) == TS_OK &&
              !strcmp(ts_mesh_order(m), "replicate-tp-shard-pp") &&
              ts_mesh_coord_of(m, 1, "replicate") == 1,
          "named order given: %s", ts_last_error());
    ts_mesh_destroy(m);
    m = NULL;
    CHECK(ts_mesh_create_axes(8, defs, 6, "tp-pp", NULL, 0, &m) == TS_ERR_INVALID && !m &&
              strstr(ts_last_error(), "leaves out shard, whose size is 2 in the dense mesh"),
          "order leaving out shard: %s", ts_last_error());
    struct {
        ts_mesh_axis_def d[3];
        int n;
        const char *needle;
    } bad[] = {
        {{{"Shard", 2, TS_MESH_DENSE, 0, NULL, 0}}, 1, "names are [a-z][a-z0-9_]*"},
        {{{"a", 2, TS_MESH_DENSE, 0, NULL, 0}, {"a", 4, TS_MESH_DENSE, 0, NULL, 0}},
         2,
         "axis \"a\" is defined twice"},
        {{{"a", 2, TS_MESH_DENSE, 1, NULL, 0}, {"b", 4, TS_MESH_DENSE, 1, NULL, 0}},
         2,
         "2 axes are the pipeline"},
        {{{"a", 0, TS_MESH_DENSE, 0, NULL, 0}, {"b", 0, TS_MESH_DENSE, 0, NULL, 0}},
         2,
         "both a and b are to be derived"},
        {{{"a", 8, TS_MESH_DENSE, 0, NULL, 0}, {"e", 8, TS_MESH_EXPERT, 0, "z", 0}},
         2,
         "folds onto \"z\""},
        {{{"a", 2, TS_MESH_DENSE, 0, NULL, 0}, {"b", 3, TS_MESH_DENSE, 0, NULL, 0}},
         2,
         "dense mesh: a 2 x b 3 = 6, but the world has 8 ranks"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        m = NULL;
        ts_status st = ts_mesh_create_axes(8, bad[i].d, bad[i].n, NULL, NULL, 0, &m);
        CHECK(st == TS_ERR_INVALID && !m && strstr(ts_last_error(), bad[i].needle),
              "bad definition %zu: %s", i, ts_last_error());
    }
}

int main(void) {
    test_megatron_16_tp2_pp4();
    test_megatron_cp_example();
    test_megatron_masked_docstring();
    test_w16_folded_moe();
    test_other_shapes();
    test_non_default_orders();
    test_errors();
    test_json_write();
    test_named_axes();
    printf("test_mesh: %d checks, %d failed\n", checks, failures);
    return failures ? 1 : 0;
}
