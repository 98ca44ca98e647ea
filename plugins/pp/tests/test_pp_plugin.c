/*
 * test_pp_plugin.c — the real tessera-pp.so loaded through the core's
 * registry from an INI file: the stages its transform assigns on the GPT-2
 * layout plan (even split, layers_per_stage, interleaved virtual stages),
 * its configuration errors and their messages, and its scheduler, whose
 * actions must equal the generators' (plugins/pp/schedules.c) and pass the
 * core's simulator with the formula's bubble.
 *
 * Usage: test_pp_plugin CASE PLUGIN_DIR   one case (see `cases` below);
 *                                         PLUGIN_DIR holds tessera-pp.so.
 * Pure logic: no MPI, no training.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"    /* ts_config: the INI file and its schema         */
#include "model.h"     /* ts_model_layout_plan: the plan the plugin edits */
#include "plugin.h"    /* ts_plugins: the registry that loads the plugin  */
#include "schedule.h"  /* ts_schedule, ts_schedule_simulate               */
#include "schedules.h" /* the generators the scheduler must agree with    */

static const char *plugin_dir;
static char tmp_dir[256];
#include "pp_check.h"

/* The plugin under one configuration, and the plan it edited. */
typedef struct fixture {
    ts_config *cfg;
    ts_plugins *reg;
    ts_mesh *mesh;
    ts_layout_plan plan;
    ts_layout_plan pristine; /* the same plan, no transform applied */
} fixture;

/* The [pp] section is at line 4 of every INI file; its keys from line 5. */
static const char *ini_path(void) {
    static char path[512];
    snprintf(path, sizeof path, "%s/case.ini", tmp_dir);
    return path;
}

/* Loads tessera-pp.so with `pp_keys` (lines of the [pp] section). On failure
 * the message is ts_last_error() and the fixture needs no cleanup. */
static ts_status fixture_load(fixture *fx, const char *pp_keys) {
    memset(fx, 0, sizeof *fx);
    FILE *f = fopen(ini_path(), "w");
    if (!f) {
        perror(ini_path());
        exit(2);
    }
    fprintf(f, "[parallel]\nplugins = pp\nplugin_path = %s\n[pp]\n%s", plugin_dir, pp_keys);
    fclose(f);
    int n;
    const ts_key_spec *core = ts_config_core_keys(&n);
    if (ts_config_create(&fx->cfg) || ts_config_register(fx->cfg, core, n) ||
        ts_config_load(fx->cfg, ini_path())) {
        fprintf(stderr, "cannot set up config: %s\n", ts_last_error());
        exit(2);
    }
    if (ts_plugins_create(&fx->reg)) exit(2);
    ts_plugins_set_log(fx->reg, NULL, TS_LOG_ERROR);
    ts_status st = ts_plugins_load(fx->reg, fx->cfg);
    if (st) {
        ts_plugins_destroy(fx->reg);
        ts_config_destroy(fx->cfg);
        memset(fx, 0, sizeof *fx);
    }
    return st;
}

static void fixture_free(fixture *fx) {
    ts_layout_plan_free(&fx->plan);
    ts_layout_plan_free(&fx->pristine);
    ts_mesh_destroy(fx->mesh);
    ts_plugins_destroy(fx->reg);
    ts_config_destroy(fx->cfg);
    memset(fx, 0, sizeof *fx);
}

static ts_model_config model_of(int layers) {
    ts_model_config c = {.layers = layers,
                         .d_model = 16,
                         .heads = 2,
                         .vocab = 50,
                         .padded_vocab = 64,
                         .context = 16};
    return c;
}

/* Builds the mesh from the registered axes on `world` ranks and the GPT-2
 * plan of `layers` layers, then applies the transforms. */
static ts_status fixture_apply(fixture *fx, int world, int layers) {
    ts_model_config c = model_of(layers);
    ts_layout_plan_init(&fx->plan);
    ts_layout_plan_init(&fx->pristine);
    if (ts_plugins_mesh(fx->reg, world, NULL, &fx->mesh) ||
        ts_model_layout_plan(&c, 4, 8, fx->mesh, &fx->plan) ||
        ts_model_layout_plan(&c, 4, 8, fx->mesh, &fx->pristine)) {
        fprintf(stderr, "cannot build the plan: %s\n", ts_last_error());
        exit(2);
    }
    return ts_plugins_apply_transforms(fx->reg, &fx->plan);
}

/* Every parameter's stage: wte, wpe 0; h.<l>.* layer_stage[l]; lnf.* last.
 * Everything else -1, and every layout as the model made it. */
static void expect_stages(const fixture *fx, const char *what, int layers, const int *layer_stage,
                          int last) {
    int params = 0;
    for (int i = 0; i < fx->plan.count; i++) {
        const ts_layout_plan_entry *e = &fx->plan.entries[i];
        int want = -1, l;
        char rest[TS_NAME_MAX];
        if (e->kind != TS_PLAN_PARAM)
            want = -1;
        else if (strcmp(e->name, "wte") == 0 || strcmp(e->name, "wpe") == 0)
            want = 0;
        else if (strncmp(e->name, "lnf.", 4) == 0)
            want = last;
        else if (sscanf(e->name, "h.%d.%63s", &l, rest) == 2 && l >= 0 && l < layers)
            want = layer_stage[l];
        else
            CHECK(0, "%s: unexpected parameter %s", what, e->name);
        params += e->kind == TS_PLAN_PARAM;
        CHECK(e->stage == want, "%s: %s has stage %d, want %d", what, e->name, e->stage, want);
        CHECK(ts_layout_equal(&e->layout, &fx->pristine.entries[i].layout),
              "%s: the layout of %s changed", what, e->name);
    }
    CHECK(params == 2 + 12 * layers + 2, "%s: %d parameters", what, params);
}

/* Loading and applying succeed, and the stages are as given. */
static void expect_split(const char *pp_keys, int world, int layers, const int *layer_stage,
                         int last) {
    fixture fx;
    ts_status st = fixture_load(&fx, pp_keys);
    CHECK(st == TS_OK, "load [pp] %s: %s", pp_keys, ts_last_error());
    if (st) return;
    st = fixture_apply(&fx, world, layers);
    CHECK(st == TS_OK, "apply [pp] %s: %s", pp_keys, ts_last_error());
    if (!st) expect_stages(&fx, pp_keys, layers, layer_stage, last);
    fixture_free(&fx);
}

/* The message holds every substring (NULL-terminated list). */
static void expect_message(const char *what, ...) {
    const char *msg = ts_last_error();
    va_list ap;
    va_start(ap, what);
    for (const char *want; (want = va_arg(ap, const char *));)
        CHECK(strstr(msg, want) != NULL, "%s: message \"%s\" lacks \"%s\"", what, msg, want);
    va_end(ap);
    printf("%s: %s\n", what, msg);
}

/* "<tmp>/case.ini:<line> [pp] <key>" */
static const char *where(int line, const char *key) {
    static char buf[4][600];
    static int slot;
    char *b = buf[slot++ % 4];
    snprintf(b, 600, "%s:%d [pp] %s", ini_path(), line, key);
    return b;
}

/* ------------------------------------------------------------------------- */

static void even_split_assigns_layers_in_order(void) {
    static const int two[] = {0, 0, 0, 0, 1, 1, 1, 1}, four[] = {0, 0, 1, 1, 2, 2, 3, 3};
    expect_split("size = 2\n", 2, 8, two, 1);
    expect_split("size = 4\n", 4, 8, four, 3);
    expect_split("size = auto\n", 4, 8, four, 3); /* the world, no other axis */
    static const int one[] = {0, 0, 0, 0, 0, 0, 0, 0};
    expect_split("", 1, 8, one, 0); /* size 1: everything on stage 0 */

    /* what init registered: the axis and the configured scheduler only */
    fixture fx;
    if (fixture_load(&fx, "size = auto\n") == TS_OK) {
        CHECK(ts_plugins_num_axes(fx.reg) == 1, "%d axes", ts_plugins_num_axes(fx.reg));
        const ts_plugin_axis_entry *ax = ts_plugins_axis(fx.reg, 0);
        CHECK(ax && strcmp(ax->name, "pp") == 0 && ax->size == TS_PLUGIN_AXIS_AUTO &&
                  ax->mesh == TS_MESH_DENSE,
              "axis %s size %d", ax ? ax->name : "-", ax ? ax->size : 0);
        CHECK(ts_plugins_has_scheduler(fx.reg, "1f1b"), "no 1f1b scheduler");
        CHECK(!ts_plugins_has_scheduler(fx.reg, "gpipe") &&
                  !ts_plugins_has_scheduler(fx.reg, "interleaved"),
              "more than the configured scheduler");
        fixture_free(&fx);
    } else {
        CHECK(0, "load: %s", ts_last_error());
    }
}

static void layers_per_stage_sets_uneven_split(void) {
    static const int two[] = {0, 0, 0, 1, 1, 1, 1, 1}, four[] = {0, 1, 1, 2, 2, 2, 3, 3};
    expect_split("size = 2\nlayers_per_stage = 3, 5\n", 2, 8, two, 1);
    expect_split("size = 4\nlayers_per_stage = 1,2,3,2\n", 4, 8, four, 3);
    static const int gpipe[] = {0, 0, 0, 0, 0, 0, 0, 1};
    expect_split("size = 2\nschedule = gpipe\nlayers_per_stage = 7,1\n", 2, 8, gpipe, 1);
}

static void interleaved_assigns_virtual_stages(void) {
    /* p = 2, v = 2: virtual stage k on rank k % 2 as chunk k / 2, so layers
     * 0-1 on rank 0 chunk 0, 2-3 rank 1 chunk 0, 4-5 rank 0 chunk 1, 6-7
     * rank 1 chunk 1; lnf with the last virtual stage, 3 */
    static const int even[] = {0, 0, 1, 1, 2, 2, 3, 3};
    expect_split("size = 2\nschedule = interleaved\nvirtual_stages = 2\n", 2, 8, even, 3);
    static const int listed[] = {0, 1, 1, 1, 2, 2, 2, 3};
    expect_split("size = 2\nschedule = interleaved\nvirtual_stages = 2\n"
                 "layers_per_stage = 1,3,3,1\n",
                 2, 8, listed, 3);
    static const int four[] = {0, 1, 2, 3, 4, 5, 6, 7};
    expect_split("size = 4\nschedule = interleaved\nvirtual_stages = 2\n", 4, 8, four, 7);
    fixture fx;
    if (fixture_load(&fx, "size = 2\nschedule = interleaved\nvirtual_stages = 2\n") == TS_OK) {
        CHECK(ts_plugins_has_scheduler(fx.reg, "interleaved") &&
                  !ts_plugins_has_scheduler(fx.reg, "1f1b"),
              "the interleaved scheduler is not the one registered");
        fixture_free(&fx);
    }
}

static void bad_layers_per_stage_is_a_config_error(void) {
    fixture fx;
    /* wrong count: found when the plan (and so p) is known */
    if (fixture_load(&fx, "size = 2\nlayers_per_stage = 3,5,1\n") == TS_OK) {
        ts_status st = fixture_apply(&fx, 2, 8);
        CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
        expect_message("three entries for two stages", "plugin 'pp': transform 'pp_stages'",
                       where(6, "layers_per_stage"), "= '3,5,1' has 3 entries",
                       "pp size 2 x virtual_stages 1 = 2", NULL);
        fixture_free(&fx);
    }
    /* wrong sum */
    if (fixture_load(&fx, "size = 2\nlayers_per_stage = 3,4\n") == TS_OK) {
        ts_status st = fixture_apply(&fx, 2, 8);
        CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
        expect_message("sum 7 for 8 layers", where(6, "layers_per_stage"),
                       "sums to 7 layers, the model has 8", NULL);
        fixture_free(&fx);
    }
    /* interleaved: one count per virtual stage, p*v of them */
    if (fixture_load(&fx, "size = 2\nschedule = interleaved\nvirtual_stages = 2\n"
                          "layers_per_stage = 4,4\n") == TS_OK) {
        ts_status st = fixture_apply(&fx, 2, 8);
        CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
        expect_message("two entries for four virtual stages", where(8, "layers_per_stage"),
                       "has 2 entries", "pp size 2 x virtual_stages 2 = 4", NULL);
        fixture_free(&fx);
    }
    /* not numbers, or not positive: refused at load */
    ts_status st = fixture_load(&fx, "size = 2\nlayers_per_stage = 3,x\n");
    CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
    expect_message("3,x", "plugin 'pp'", where(6, "layers_per_stage"),
                   "= '3,x': entry 2 'x' is not a positive integer", NULL);
    st = fixture_load(&fx, "size = 2\nlayers_per_stage = 0,8\n");
    CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
    expect_message("0,8", where(6, "layers_per_stage"), "entry 1 '0' is not a positive integer",
                   NULL);
    st = fixture_load(&fx, "size = 2\nlayers_per_stage = 4,,4\n");
    CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
    expect_message("4,,4", "entry 2 '' is not a positive integer", NULL);
}

static void layers_not_divisible_names_size_and_virtual_stages(void) {
    fixture fx;
    if (fixture_load(&fx, "size = 3\n") == TS_OK) {
        ts_status st = fixture_apply(&fx, 3, 8);
        CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
        expect_message("8 layers on 3 stages", "plugin 'pp': transform 'pp_stages'",
                       "8 layers do not split evenly into pp size 3 x virtual_stages 1 = 3",
                       where(5, "size"), "default [pp] virtual_stages", "[pp] layers_per_stage",
                       NULL);
        fixture_free(&fx);
    }
    if (fixture_load(&fx, "size = 2\nschedule = interleaved\nvirtual_stages = 3\n") == TS_OK) {
        ts_status st = fixture_apply(&fx, 2, 8);
        CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
        expect_message("8 layers on 6 virtual stages", "pp size 2 x virtual_stages 3 = 6",
                       where(5, "size"), where(7, "virtual_stages"), NULL);
        fixture_free(&fx);
    }
}

static void interleaved_needs_two_virtual_stages(void) {
    fixture fx;
    ts_status st = fixture_load(&fx, "size = 2\nschedule = interleaved\n");
    CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
    expect_message("interleaved, v = 1", "plugin 'pp'", "init failed", where(6, "schedule"),
                   "= interleaved needs at least 2 virtual stages per rank",
                   "default [pp] virtual_stages = 1", NULL);
    st = fixture_load(&fx, "size = 2\nvirtual_stages = 2\n");
    CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
    expect_message("1f1b, v = 2", where(6, "virtual_stages"),
                   "= 2 needs [pp] schedule = interleaved", "default [pp] schedule = 1f1b", NULL);
    st = fixture_load(&fx, "schedule = gpipe\nvirtual_stages = 4\n");
    CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
    expect_message("gpipe, v = 4", where(6, "virtual_stages"), where(5, "schedule"), "= gpipe",
                   NULL);
}

/* --- the scheduler ---------------------------------------------------------- */

static ts_status append_to_schedule(void *user, int kind, int mb, int chunk, int peer) {
    return ts_schedule_append(user, (ts_action_kind)kind, mb, chunk, peer);
}

/* Every rank's list from the registry equals the generator's, and together
 * they simulate with the formula's bubble. */
static void expect_scheduler(const char *pp_keys, pp_schedule_kind kind, int p, int m, int v) {
    fixture fx;
    ts_status st = fixture_load(&fx, pp_keys);
    CHECK(st == TS_OK, "load [pp] %s: %s", pp_keys, ts_last_error());
    if (st) return;
    const char *name = pp_schedule_kind_name(kind);
    ts_schedule got[8] = {{0, NULL}}, want = {0, NULL};
    for (int s = 0; s < p; s++) {
        ts_plugin_schedule_args args = {0};
        args.stages = p, args.stage = s, args.micro_batches = m, args.chunks = v;
        st = ts_plugins_schedule(fx.reg, name, &args, &got[s]);
        CHECK(st == TS_OK, "%s p=%d stage %d m=%d: %s", name, p, s, m, ts_last_error());
        want = (ts_schedule){0, NULL};
        CHECK(pp_schedule_emit(kind, p, s, m, v, append_to_schedule, &want) == TS_OK, "emit");
        int same =
            got[s].nactions == want.nactions && want.nactions > 0 &&
            memcmp(got[s].actions, want.actions, sizeof *want.actions * (size_t)want.nactions) == 0;
        CHECK(same,
              "%s p=%d stage %d m=%d v=%d: %d actions from the registry, %d from the "
              "generator, or they differ",
              name, p, s, m, v, got[s].nactions, want.nactions);
        ts_schedule_free(&want);
    }
    ts_schedule_sim sim;
    long num, den;
    st = ts_schedule_simulate(p, got, m, v, 1, 1, &sim);
    CHECK(st == TS_OK, "%s: simulate: %s", name, ts_last_error());
    if (!st && pp_bubble_formula(kind, p, m, v, &num, &den) == TS_OK) {
        CHECK(sim.bubble_num == num && sim.bubble_den == den, "%s: bubble %ld/%ld, formula %ld/%ld",
              name, sim.bubble_num, sim.bubble_den, num, den);
        printf("%s p=%d m=%d v=%d:\n", name, p, m, v);
        ts_schedule_timeline_print(&sim, stdout);
        ts_schedule_sim_free(&sim);
    }
    for (int s = 0; s < p; s++)
        ts_schedule_free(&got[s]);
    fixture_free(&fx);
}

static void scheduler_matches_generator(void) {
    expect_scheduler("size = 4\nschedule = gpipe\n", PP_SCHEDULE_GPIPE, 4, 8, 1);
    expect_scheduler("size = 4\n", PP_SCHEDULE_1F1B, 4, 6, 1);
    expect_scheduler("size = 3\nschedule = 1f1b\n", PP_SCHEDULE_1F1B, 3, 2, 1);
    expect_scheduler("size = 2\nschedule = interleaved\nvirtual_stages = 2\n",
                     PP_SCHEDULE_INTERLEAVED, 2, 4, 2);
    expect_scheduler("size = 4\nschedule = interleaved\nvirtual_stages = 3\n",
                     PP_SCHEDULE_INTERLEAVED, 4, 8, 3);
}

static void scheduler_refuses_bad_micro_batches(void) {
    fixture fx;
    if (fixture_load(&fx, "size = 4\nschedule = interleaved\nvirtual_stages = 2\n") != TS_OK) {
        CHECK(0, "load: %s", ts_last_error());
        return;
    }
    ts_schedule out = {0, NULL};
    ts_plugin_schedule_args args = {0};
    args.stages = 4, args.stage = 1, args.micro_batches = 6, args.chunks = 2;
    ts_status st = ts_plugins_schedule(fx.reg, "interleaved", &args, &out);
    CHECK(st == TS_ERR_CONFIG && out.nactions == 0, "status %d, %d actions", (int)st, out.nactions);
    expect_message("m = 6 on p = 4", "plugin 'pp': scheduler 'interleaved'",
                   "interleaved: micro_batches=6 is not divisible by stages=4",
                   where(6, "schedule"), NULL);
    args.micro_batches = 8, args.chunks = 3;
    st = ts_plugins_schedule(fx.reg, "interleaved", &args, &out);
    CHECK(st == TS_ERR_CONFIG && out.nactions == 0, "status %d, %d actions", (int)st, out.nactions);
    expect_message("chunks 3 for v = 2", "asked for 3 chunks per rank", where(7, "virtual_stages"),
                   "= 2", NULL);
    args.chunks = 2, args.stage = 4;
    st = ts_plugins_schedule(fx.reg, "interleaved", &args, &out);
    CHECK(st == TS_ERR_CONFIG, "status %d", (int)st);
    expect_message("stage 4 of 4", "stage=4 is outside 0..3", NULL);
    ts_schedule_free(&out);
    fixture_free(&fx);
}

/* ------------------------------------------------------------------------- */

static const struct {
    const char *name;
    void (*fn)(void);
} cases[] = {
    {"even_split_assigns_layers_in_order", even_split_assigns_layers_in_order},
    {"layers_per_stage_sets_uneven_split", layers_per_stage_sets_uneven_split},
    {"interleaved_assigns_virtual_stages", interleaved_assigns_virtual_stages},
    {"bad_layers_per_stage_is_a_config_error", bad_layers_per_stage_is_a_config_error},
    {"layers_not_divisible_names_size_and_virtual_stages",
     layers_not_divisible_names_size_and_virtual_stages},
    {"interleaved_needs_two_virtual_stages", interleaved_needs_two_virtual_stages},
    {"scheduler_matches_generator", scheduler_matches_generator},
    {"scheduler_refuses_bad_micro_batches", scheduler_refuses_bad_micro_batches},
};

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s CASE PLUGIN_DIR\n", argv[0]);
        return 2;
    }
    plugin_dir = argv[2];
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/test_pp_plugin.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 2;
    }
    int found = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0) {
            found = 1;
            cases[i].fn();
        }
    unlink(ini_path());
    rmdir(tmp_dir);
    if (!found) {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    printf("%s: %s\n", argv[1], failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
