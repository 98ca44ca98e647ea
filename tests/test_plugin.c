/*
 * test_plugin.c — the plugin loader and registry: the good test plugin's
 * registrations (axes, transforms in phase order, hooks, scheduler,
 * dispatcher, INI keys, describe) and every rejection, each checked for the
 * message substrings that name the file, the plugin and the versions;
 * damaged plugin files (truncated, not ELF, a directory, empty, another
 * class, byte order, type or machine) refused before dlopen, without a
 * signal.
 *
 * usage: test_plugin CASE PLUGIN_DIR   one case (see `cases` below); the test
 *                                      plugins are PLUGIN_DIR/tessera-*.so
 *        test_plugin load CONFIG       loads CONFIG and its plugins, prints
 *                                      the registry and runs a
 *                                      before_forward hook (sdk_install.sh)
 * Pure logic: no MPI, no model.
 */
#include <elf.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "plugin.h"
#include "plugin_file.h"
#include "schedule.h"
#include "so_file.h"

static const char *plugin_dir;
static char tmp_dir[256];
static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Writes `text` to <tmp_dir>/<name>; returns the path (static storage per call slot). */
static const char *write_ini(const char *name, const char *fmt, ...) {
    static char paths[4][512];
    static int slot;
    char *path = paths[slot++ % 4];
    snprintf(path, 512, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "w");
    if (!f) {
        perror(path);
        exit(2);
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fclose(f);
    return path;
}

static ts_config *config_for(const char *path) {
    ts_config *cfg;
    int n;
    const ts_key_spec *core = ts_config_core_keys(&n);
    if (ts_config_create(&cfg) || ts_config_register(cfg, core, n) || ts_config_load(cfg, path)) {
        fprintf(stderr, "cannot set up config %s: %s\n", path, ts_last_error());
        exit(2);
    }
    return cfg;
}

/* Loading the INI must fail with a message holding every substring. */
static void expect_load_fails(const char *ini_text, ...) {
    const char *path = write_ini("case.ini", "%s", ini_text);
    ts_config *cfg = config_for(path);
    ts_plugins *reg;
    CHECK(ts_plugins_create(&reg) == TS_OK);
    ts_plugins_set_log(reg, NULL, TS_LOG_ERROR);
    ts_status st = ts_plugins_load(reg, cfg);
    const char *msg = ts_last_error();
    printf("status %s: %s\n", ts_status_name(st), msg);
    CHECK(st != TS_OK);
    va_list ap;
    va_start(ap, ini_text);
    for (const char *want; (want = va_arg(ap, const char *));)
        if (!strstr(msg, want)) {
            fprintf(stderr, "message lacks \"%s\"\n", want);
            failures++;
        }
    va_end(ap);
    ts_plugins_destroy(reg);
    ts_config_destroy(cfg);
}

static char *file_of(const char *name) {
    static char buf[4][600];
    static int slot;
    char *b = buf[slot++ % 4];
    snprintf(b, 600, "%s/tessera-%s.so", plugin_dir, name);
    return b;
}

static const char *abi(int major, int minor) {
    static char buf[4][32];
    static int slot;
    char *b = buf[slot++ % 4];
    snprintf(b, 32, "ABI %d.%d", major, minor);
    return b;
}

/* ------------------------------------------------------------------------- */

static void good_plugin_registers_everything(void) {
    const char *path = write_ini("good.ini",
                                 "[parallel]\nplugins = good\nplugin_path = %s\n"
                                 "[good]\nsize = 4\nmode = b\nlabel = hello there\n",
                                 plugin_dir);
    ts_config *cfg = config_for(path);
    ts_plugins *reg;
    CHECK(ts_plugins_create(&reg) == TS_OK);
    char logbuf[4096] = "";
    FILE *log = fmemopen(logbuf, sizeof logbuf, "w");
    ts_plugins_set_log(reg, log, TS_LOG_INFO);
    ts_status st = ts_plugins_load(reg, cfg);
    if (st) printf("load: %s\n", ts_last_error());
    CHECK(st == TS_OK);
    CHECK(ts_plugins_count(reg) == 1);
    CHECK(strcmp(ts_plugins_name(reg, 0), "good") == 0);
    CHECK(strcmp(ts_plugins_version(reg, 0), "1.2.3") == 0);
    CHECK(strcmp(ts_plugins_path(reg, 0), file_of("good")) == 0);

    /* the axis, and mesh sizes derived from it */
    CHECK(ts_plugins_num_axes(reg) == 1);
    const ts_plugin_axis_entry *ax = ts_plugins_axis(reg, 0);
    CHECK(ax && strcmp(ax->name, "tp") == 0 && ax->size == 4 && ax->mesh == TS_MESH_DENSE);
    CHECK(strcmp(ax->plugin, "good") == 0);
    ts_mesh *ms = NULL;
    CHECK(ts_plugins_mesh(reg, 4, NULL, &ms) == TS_OK);
    CHECK(ms && ts_mesh_world(ms) == 4 && ts_mesh_size(ms, "tp") == 4 &&
          ts_mesh_size(ms, "dp") == 1 && ts_mesh_size(ms, "pp") == 1 &&
          ts_mesh_size(ms, "cp") == 1 && ts_mesh_size(ms, "ep") == 1);
    /* etp takes tp's size, edp is derived */
    CHECK(ms && ts_mesh_size(ms, "etp") == 4 && ts_mesh_size(ms, "edp") == 1);
    ts_mesh_destroy(ms);

    /* transforms: phase order, then registration order */
    char plan[256] = "";
    CHECK(ts_plugins_apply_transforms(reg, (ts_layout_plan *)plan) == TS_OK);
    printf("transform order: %s\n", plan);
    CHECK(strcmp(plan, "pipe,tensor,tensor2,annotate") == 0);

    /* hooks */
    int counter = 0;
    ts_plugin_hook_event ev = {0};
    ev.kind = TS_HOOK_BEFORE_FORWARD;
    ev.state = &counter;
    CHECK(ts_plugins_num_hooks(reg, TS_HOOK_BEFORE_FORWARD) == 1);
    CHECK(ts_plugins_run_hooks(reg, &ev) == TS_OK && counter == 1);
    ev.step = 99;
    st = ts_plugins_run_hooks(reg, &ev);
    printf("failing hook: %s\n", ts_last_error());
    CHECK(st == TS_ERR_PLUGIN);
    CHECK(strstr(ts_last_error(), "plugin 'good': hook before_forward: step 99 is refused"));
    float g[3] = {1, 2, 3};
    ts_tensor grad;
    ts_tensor_view(&grad, "g", TS_F32, 1, (int64_t[]){3}, g, TS_MEM_GRADS);
    ts_plugin_hook_event gev = {0};
    gev.kind = TS_HOOK_GRAD_READY;
    gev.grad = &grad;
    CHECK(ts_plugins_run_hooks(reg, &gev) == TS_OK);
    CHECK(g[0] == 2 && g[1] == 4 && g[2] == 6); /* scale default 2.0 */
    ev.kind = TS_HOOK_AFTER_OPTIMIZER;
    CHECK(ts_plugins_run_hooks(reg, &ev) == TS_OK); /* none registered: nothing runs */

    /* scheduler */
    ts_schedule sched = {0};
    ts_plugin_schedule_args args = {0};
    args.stages = 1;
    args.micro_batches = 2;
    args.chunks = 1;
    CHECK(ts_plugins_has_scheduler(reg, "good_sched"));
    CHECK(ts_plugins_schedule(reg, "good_sched", &args, &sched) == TS_OK);
    CHECK(sched.nactions == 5);
    if (sched.nactions == 5) {
        CHECK(sched.actions[0].kind == TS_ACT_FORWARD && sched.actions[0].mb == 0);
        CHECK(sched.actions[3].kind == TS_ACT_BACKWARD && sched.actions[3].mb == 1);
        CHECK(sched.actions[4].kind == TS_ACT_OPTIMIZER_STEP);
    }
    args.micro_batches = 0;
    st = ts_plugins_schedule(reg, "good_sched", &args, &sched);
    CHECK(st == TS_ERR_INVALID && sched.nactions == 0);
    CHECK(strstr(ts_last_error(), "plugin 'good': scheduler 'good_sched': needs micro_batches"));
    st = ts_plugins_schedule(reg, "1f1b", &args, &sched);
    CHECK(st == TS_ERR_CONFIG && strstr(ts_last_error(), "no scheduler '1f1b'") &&
          strstr(ts_last_error(), "known: good_sched"));
    ts_schedule_free(&sched);

    /* dispatcher */
    const ts_plugin_dispatcher_entry *d = ts_plugins_dispatcher(reg, "good_disp");
    CHECK(d && d->ops.dispatch && d->ops.combine && !d->ops.create && !d->ops.destroy);
    if (d) {
        int acc = 0;
        CHECK(d->ops.dispatch(d->ctx, NULL, &acc) == TS_OK);
        CHECK(d->ops.combine(d->ctx, NULL, &acc) == TS_OK && acc == 11);
    }
    CHECK(ts_plugins_dispatcher(reg, "deepep") == NULL &&
          strstr(ts_last_error(), "no dispatcher 'deepep'"));

    /* describe, like ompi_info */
    char desc[8192] = "";
    FILE *df = fmemopen(desc, sizeof desc, "w");
    CHECK(ts_plugins_describe(reg, df) == TS_OK);
    fclose(df);
    printf("%s", desc);
    CHECK(strstr(desc, "plugin good 1.2.3 (plugin ABI 1.0)"));
    CHECK(strstr(desc, file_of("good")));
    CHECK(strstr(desc, "key good.size") && strstr(desc, "int in [1, 64] or auto"));
    CHECK(strstr(desc, "default 2") && strstr(desc, "size of the tp axis"));
    CHECK(strstr(desc, "key good.mode") && strstr(desc, "enum a|b"));
    CHECK(strstr(desc, "axis tp size 4 (dense mesh)"));
    CHECK(strstr(desc, "transform good_pipe (phase PIPELINE)"));
    CHECK(strstr(desc, "hook grad_ready") && strstr(desc, "scheduler good_sched") &&
          strstr(desc, "dispatcher good_disp"));

    ts_plugins_destroy(reg); /* runs fini */
    fclose(log);
    printf("log:\n%s", logbuf);
    CHECK(strstr(logbuf, "tessera: good: init: tp size 4 from "));
    CHECK(strstr(logbuf, "good.ini:5 [good] size, label 'hello there', mode given 1"));
    CHECK(strstr(logbuf, "tessera: good: fini"));
    ts_config_destroy(cfg);
}

static void auto_axis_takes_the_rest_of_the_world(void) {
    const char *path = write_ini("auto.ini",
                                 "[parallel]\nplugins = good\nplugin_path = %s\n[good]\nsize = "
                                 "auto\n",
                                 plugin_dir);
    ts_config *cfg = config_for(path);
    ts_plugins *reg;
    CHECK(ts_plugins_create(&reg) == TS_OK);
    ts_plugins_set_log(reg, NULL, TS_LOG_ERROR);
    CHECK(ts_plugins_load(reg, cfg) == TS_OK);
    ts_mesh *ms = NULL;
    CHECK(ts_plugins_mesh(reg, 8, NULL, &ms) == TS_OK && ts_mesh_size(ms, "tp") == 8 &&
          ts_mesh_size(ms, "dp") == 1);
    ts_mesh_destroy(ms);
    ts_plugins_destroy(reg);
    ts_config_destroy(cfg);
}

static void missing_plugin_names_searched_paths(void) {
    char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = nope\nplugin_path = %s:/no/such/dir\n",
             plugin_dir);
    char where[600];
    snprintf(where, sizeof where, "%s/case.ini:2 [parallel] plugins", tmp_dir);
    setenv("TESSERA_PLUGIN_PATH", "/env/dir1:/env/dir2", 1);
    /* plugin_path, then the environment, then <dir of libtessera>/tessera */
    expect_load_fails(text, "plugin 'nope'", where, "not found", "tessera-nope.so",
                      "/no/such/dir, /env/dir1, /env/dir2, /", "/tessera (set", plugin_dir,
                      "TESSERA_PLUGIN_PATH", NULL);
    unsetenv("TESSERA_PLUGIN_PATH");
}

static void missing_symbol_is_rejected(void) {
    char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = no_symbol\nplugin_path = %s\n", plugin_dir);
    expect_load_fails(text, "plugin 'no_symbol'", file_of("no_symbol"),
                      "does not export the entry point tessera_plugin_descriptor", NULL);
}

static void abi_major_mismatch_is_rejected(void) {
    char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = wrong_major\nplugin_path = %s\n",
             plugin_dir);
    expect_load_fails(
        text, "plugin 'wrong_major'", file_of("wrong_major"), abi(TS_PLUGIN_ABI_MAJOR + 1, 0),
        abi(TS_PLUGIN_ABI_MAJOR, TS_PLUGIN_ABI_MINOR), "major versions must match", NULL);
}

static void newer_abi_minor_is_rejected(void) {
    char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = newer_minor\nplugin_path = %s\n",
             plugin_dir);
    expect_load_fails(text, "plugin 'newer_minor'", file_of("newer_minor"),
                      abi(TS_PLUGIN_ABI_MAJOR, TS_PLUGIN_ABI_MINOR + 1),
                      "newer than this tessera's", abi(TS_PLUGIN_ABI_MAJOR, TS_PLUGIN_ABI_MINOR),
                      NULL);
}

static void descriptor_name_must_match_file(void) {
    char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = misnamed\nplugin_path = %s\n", plugin_dir);
    expect_load_fails(text, file_of("misnamed"), "holds a plugin named 'renamed', not 'misnamed'",
                      "tessera-<name>.so", NULL);
}

static void small_descriptor_is_rejected(void) {
    char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = small_struct\nplugin_path = %s\n",
             plugin_dir);
    expect_load_fails(text, "plugin 'small_struct'", file_of("small_struct"),
                      "descriptor struct_size 8 is smaller than", NULL);
}

static void two_plugins_claiming_one_axis_conflict(void) {
    char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = good, dup_axis\nplugin_path = %s\n",
             plugin_dir);
    expect_load_fails(text, "plugin 'dup_axis'", file_of("dup_axis"), "init failed",
                      "axis 'tp' is claimed by two plugins, 'good' and 'dup_axis'", NULL);
}

static void undeclared_key_in_plugin_section_is_rejected(void) {
    char text[1024];
    snprintf(text, sizeof text,
             "[parallel]\nplugins = good\nplugin_path = %s\n[good]\nsize = 2\nbogus = 1\n",
             plugin_dir);
    char where[600];
    snprintf(where, sizeof where, "%s/case.ini:6", tmp_dir);
    expect_load_fails(text, where, "unknown key 'bogus' in [good]", "known: size, mode", NULL);
}

static void bad_value_in_plugin_section_is_rejected(void) {
    char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = good\nplugin_path = %s\n[good]\nsize = 0\n",
             plugin_dir);
    char where[600];
    snprintf(where, sizeof where, "%s/case.ini:5", tmp_dir);
    expect_load_fails(text, where, "[good] size", "out of range", NULL);
}

static void conflicting_transforms_are_rejected(void) {
    char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = good conflict\nplugin_path = %s\n",
             plugin_dir);
    expect_load_fails(text, "plugin 'conflict'", file_of("conflict"),
                      "transforms conflict: plugin 'conflict' registers 'conflict_stages' in "
                      "phase PIPELINE, which plugin 'good' owns (transform 'good_pipe')",
                      NULL);
}

static void failed_init_is_reported(void) {
    char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = fail_init\nplugin_path = %s\n", plugin_dir);
    expect_load_fails(text, "plugin 'fail_init'", file_of("fail_init"),
                      "init failed: refusing to start (default [fail_init] refuse)", NULL);
    /* a registration failure that init ignores still fails the load */
    snprintf(text, sizeof text,
             "[parallel]\nplugins = fail_init\nplugin_path = %s\n[fail_init]\nrefuse = no\n",
             plugin_dir);
    expect_load_fails(text, "plugin 'fail_init'", "init failed",
                      "registers axis 'zz', which is not a mesh axis", NULL);
}

static void plugin_named_twice_is_rejected(void) {
    char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = good,good\nplugin_path = %s\n", plugin_dir);
    expect_load_fails(text, "plugin 'good'", "is named twice", NULL);
    snprintf(text, sizeof text, "[parallel]\nplugins = train\nplugin_path = %s\n", plugin_dir);
    expect_load_fails(text, "plugin 'train'", "core's section [train]", NULL);
    snprintf(text, sizeof text, "[parallel]\nplugins = ../x\nplugin_path = %s\n", plugin_dir);
    expect_load_fails(text, "plugin '../x'", "a-z, 0-9 and _", NULL);
}

/* Every pointer of every ABI 1.3 sub-table is set and equals its flat twin
 * of ABI 1.0-1.2, and each table's struct_size is this core's sizeof. */
static void host_subtables_match_their_flat_fields(void) {
    ts_plugins *reg;
    CHECK(ts_plugins_create(&reg) == TS_OK);
    const ts_host *h = ts_plugins_host(reg);
    CHECK(h->abi_version == TS_PLUGIN_ABI_CORE && h->struct_size == sizeof(ts_host));
    CHECK(TS_HOST_HAS(h, comms) && TS_HOST_HAS(h, config));
    int pairs = 0;
#define TWIN(table, field, flat)                                                                   \
    do {                                                                                           \
        pairs++;                                                                                   \
        if (!h->table->field || (void (*)(void))h->table->field != (void (*)(void))h->flat) {      \
            fprintf(stderr, "host->%s->%s is not host->%s\n", #table, #field, #flat);              \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)
    CHECK(h->comms && h->comms->struct_size == sizeof(ts_host_comms));
    TWIN(comms, get, comm);
    TWIN(comms, rank, comm_rank);
    TWIN(comms, size, comm_size);
    TWIN(comms, all_reduce, all_reduce);
    TWIN(comms, all_reduce_start, all_reduce_start);
    TWIN(comms, all_gather, all_gather);
    TWIN(comms, all_gather_start, all_gather_start);
    TWIN(comms, all_gatherv, all_gatherv);
    TWIN(comms, all_gatherv_start, all_gatherv_start);
    TWIN(comms, reduce_scatter, reduce_scatter);
    TWIN(comms, reduce_scatter_start, reduce_scatter_start);
    TWIN(comms, reduce_scatter_v, reduce_scatter_v);
    TWIN(comms, reduce_scatter_v_start, reduce_scatter_v_start);
    TWIN(comms, all_to_all, all_to_all);
    TWIN(comms, all_to_all_start, all_to_all_start);
    TWIN(comms, all_to_allv, all_to_allv);
    TWIN(comms, all_to_allv_start, all_to_allv_start);
    TWIN(comms, broadcast, broadcast);
    TWIN(comms, send, send);
    TWIN(comms, send_start, send_start);
    TWIN(comms, recv, recv);
    TWIN(comms, recv_start, recv_start);
    TWIN(comms, barrier, barrier);
    TWIN(comms, wait, wait);
    TWIN(comms, test, test);
    TWIN(comms, layout_local_block, layout_local_block);
    TWIN(comms, layout_coords, layout_coords);
    TWIN(comms, redistribute, redistribute);
    CHECK(h->dev && h->dev->struct_size == sizeof(ts_host_device));
    TWIN(dev, alloc, device_alloc);
    TWIN(dev, free, device_free);
    TWIN(dev, copy, device_copy);
    TWIN(dev, copy_2d, device_copy_2d);
    TWIN(dev, to_host, device_to_host);
    TWIN(dev, from_host, device_from_host);
    TWIN(dev, zero, device_zero);
    TWIN(dev, add, device_add);
    TWIN(dev, convert, device_convert);
    TWIN(dev, stream, device_stream);
    CHECK(h->kernels && h->kernels->struct_size == sizeof(ts_host_kernels));
    TWIN(kernels, attention_floats, attention_floats);
    TWIN(kernels, attention_forward, attention_forward);
    TWIN(kernels, attention_backward, attention_backward);
    TWIN(kernels, attention_block_forward, attention_block_forward);
    TWIN(kernels, attention_block_merge, attention_block_merge);
    TWIN(kernels, attention_block_backward, attention_block_backward);
    CHECK(h->reg && h->reg->struct_size == sizeof(ts_host_registration));
    TWIN(reg, axis, register_axis);
    TWIN(reg, axis_spec, register_axis_spec);
    TWIN(reg, transform, register_transform);
    TWIN(reg, hook, register_hook);
    TWIN(reg, module_hook, register_module_hook);
    TWIN(reg, scheduler, register_scheduler);
    TWIN(reg, dispatcher, register_dispatcher);
    TWIN(reg, provider, register_provider);
    TWIN(reg, attention, register_attention);
    TWIN(reg, optimizer_state, register_optimizer_state);
    TWIN(reg, experts, register_experts);
    TWIN(reg, stage_order, set_stage_order);
    CHECK(h->config && h->config->struct_size == sizeof(ts_host_config));
    TWIN(config, get_int, config_int);
    TWIN(config, get_float, config_float);
    TWIN(config, get_bool, config_bool);
    TWIN(config, get_str, config_str);
    TWIN(config, has, config_has);
    TWIN(config, where, config_where);
#undef TWIN
    /* Every function pointer of every table was compared: a field added to
     * a table without a twin here changes its size. */
    size_t fn = sizeof(void (*)(void));
    size_t listed = sizeof(ts_host_comms) - offsetof(ts_host_comms, get);
    listed += sizeof(ts_host_device) - offsetof(ts_host_device, alloc);
    listed += sizeof(ts_host_kernels) - offsetof(ts_host_kernels, attention_floats);
    listed += sizeof(ts_host_registration) - offsetof(ts_host_registration, axis);
    listed += sizeof(ts_host_config) - offsetof(ts_host_config, get_int);
    if (listed != (size_t)pairs * fn) {
        fprintf(stderr, "the sub-tables hold %zu function pointers, %d compared\n", listed / fn,
                pairs);
        failures++;
    }
    CHECK(TS_COMMS_HAS(h->comms, redistribute) && TS_CONFIG_HAS(h->config, where));
    CHECK(!TS_DEVICE_HAS((const ts_host_device *)NULL, alloc));
    printf("%d sub-table pointers equal their flat twins\n", pairs);
    ts_plugins_destroy(reg);
}

/* ts_plugins_thread_safe: 1 when every plugin declares
 * TS_PLUGIN_THREAD_LOCAL_STATE, else the first that does not (a 1.2 and a
 * 1.0 plugin load, their flags 0; flags12's bit where 1.3's flags are is
 * not read from its 1.2 descriptor). */
static void thread_safe_names_the_first_plugin_without_the_flag(void) {
    static const struct {
        const char *plugins, *first_not;
    } runs[] = {{"onethread", NULL},
                {"onethread, skew, good", "skew"},
                {"good", "good"},
                {"onethread, flags12", "flags12"}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const char *path = write_ini("tls.ini", "[parallel]\nplugins = %s\nplugin_path = %s\n",
                                     runs[i].plugins, plugin_dir);
        ts_config *cfg = config_for(path);
        ts_plugins *reg;
        CHECK(ts_plugins_create(&reg) == TS_OK);
        ts_plugins_set_log(reg, NULL, TS_LOG_ERROR);
        ts_status st = ts_plugins_load(reg, cfg);
        if (st) printf("load %s: %s\n", runs[i].plugins, ts_last_error());
        CHECK(st == TS_OK);
        const char *first_not = "unset";
        int safe = ts_plugins_thread_safe(reg, &first_not);
        printf("plugins = %s: thread safe %d, first without the flag %s\n", runs[i].plugins, safe,
               first_not ? first_not : "(none)");
        CHECK(safe == (runs[i].first_not == NULL));
        CHECK(runs[i].first_not ? first_not && strcmp(first_not, runs[i].first_not) == 0
                                : first_not == NULL);
        /* `tessera plugins` says which keep thread-local state. */
        char text[8192] = "";
        FILE *df = fmemopen(text, sizeof text, "w");
        CHECK(ts_plugins_describe(reg, df) == TS_OK);
        fclose(df);
        CHECK((strstr(text, "thread-local state") != NULL) ==
              (strstr(runs[i].plugins, "onethread") != NULL));
        for (int p = 0; p < ts_plugins_count(reg); p++)
            CHECK(ts_plugins_flags(reg, p) == (strcmp(ts_plugins_name(reg, p), "onethread") == 0
                                                   ? TS_PLUGIN_THREAD_LOCAL_STATE
                                                   : 0u));
        ts_plugins_destroy(reg);
        ts_config_destroy(cfg);
    }
    CHECK(ts_plugins_thread_safe(NULL, NULL) == 1);
}

static void discover_lists_good_and_skips_broken(void) {
    ts_plugins *reg;
    CHECK(ts_plugins_create(&reg) == TS_OK);
    char errbuf[8192] = "";
    FILE *err = fmemopen(errbuf, sizeof errbuf, "w");
    CHECK(ts_plugins_discover(reg, plugin_dir, err) == TS_OK);
    fclose(err);
    printf("skipped:\n%s", errbuf);
    int good = 0;
    for (int i = 0; i < ts_plugins_count(reg); i++)
        good += strcmp(ts_plugins_name(reg, i), "good") == 0;
    CHECK(good == 1);
    CHECK(strstr(errbuf, "wrong_major") && strstr(errbuf, "misnamed"));
    ts_plugins_destroy(reg);
}

/* ------------------------------------------------------------------------- */
/* damaged plugin files: refused by the checks before dlopen                  */

/* Copies the good test plugin to <tmp_dir>/tessera-<name>.so, cut to `keep`
 * bytes (< 0: whole; -2: half). Returns the copy's size. */
static long copy_good_plugin(const char *name, long keep) {
    char dst[600];
    snprintf(dst, sizeof dst, "%s/tessera-%s.so", tmp_dir, name);
    FILE *in = fopen(file_of("good"), "rb"), *out = fopen(dst, "wb");
    if (!in || !out) {
        perror("copy_good_plugin");
        exit(2);
    }
    char buf[65536];
    size_t n;
    long size = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) {
        fwrite(buf, 1, n, out);
        size += (long)n;
    }
    fclose(in);
    if (fclose(out) != 0) exit(2);
    if (keep == -2) keep = size / 2;
    if (keep >= 0) {
        if (truncate(dst, keep) != 0) exit(2);
        size = keep;
    }
    return size;
}

/* Overwrites `n` bytes at `offset` of <tmp_dir>/tessera-<name>.so. */
static void patch_plugin(const char *name, long offset, const void *bytes, size_t n) {
    char path[600];
    snprintf(path, sizeof path, "%s/tessera-%s.so", tmp_dir, name);
    FILE *f = fopen(path, "r+b");
    if (!f || fseek(f, offset, SEEK_SET) != 0 || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

static const char *tmp_file_of(const char *name) {
    static char buf[4][600];
    static int slot;
    char *b = buf[slot++ % 4];
    snprintf(b, 600, "%s/tessera-%s.so", tmp_dir, name);
    return b;
}

static const char *ini_loading(const char *name) {
    static char text[1024];
    snprintf(text, sizeof text, "[parallel]\nplugins = %s\nplugin_path = %s\n", name, tmp_dir);
    return text;
}

static void truncated_plugin_file_is_rejected(void) {
    /* Half the file: dlopen would map its segments past the end (SIGBUS). */
    copy_good_plugin("half", -2);
    expect_load_fails(ini_loading("half"), "plugin 'half': cannot load ", tmp_file_of("half"),
                      ": truncated: its program headers say ", "bytes are loaded from offset",
                      "a damaged or partly copied file?", NULL);
    /* Only the tail lost: the loadable part is whole, the section table is not. */
    long size = copy_good_plugin("tail", -1);
    copy_good_plugin("tail", size - 16);
    expect_load_fails(ini_loading("tail"), "plugin 'tail': cannot load ", tmp_file_of("tail"),
                      "truncated: its section header table", "ends past the end of the file", NULL);
    /* Shorter than the ELF header. */
    copy_good_plugin("short", 40);
    expect_load_fails(ini_loading("short"), tmp_file_of("short"),
                      "truncated: 40 bytes, shorter than the 64-byte ELF header", NULL);
    /* The checker accepts the whole file. */
    CHECK(ts_so_file_check(file_of("good")) == TS_OK);
}

static void non_elf_plugin_file_is_rejected(void) {
    write_ini("tessera-text.so", "hello, I am not a shared object\n");
    expect_load_fails(ini_loading("text"), "plugin 'text': cannot load ", tmp_file_of("text"),
                      "is not an ELF shared object (it starts with the bytes 68 65 6c 6c", NULL);
}

static void plugin_path_that_is_a_directory_is_rejected(void) {
    CHECK(mkdir(tmp_file_of("dir"), 0755) == 0);
    expect_load_fails(ini_loading("dir"), "plugin 'dir': cannot load ", tmp_file_of("dir"),
                      "is a directory, not a regular file", NULL);
    /* A FIFO: refused at once, never opened for a blocking read. */
    CHECK(mkfifo(tmp_file_of("fifo"), 0644) == 0);
    expect_load_fails(ini_loading("fifo"), tmp_file_of("fifo"), "is a named pipe (FIFO)", NULL);
}

static void empty_plugin_file_is_rejected(void) {
    write_ini("tessera-empty.so", "%s", "");
    expect_load_fails(ini_loading("empty"), "plugin 'empty': cannot load ", tmp_file_of("empty"),
                      "is empty (0 bytes)", NULL);
}

static void plugin_file_of_another_class_or_machine_is_rejected(void) {
    unsigned char b = ELFCLASS32;
    copy_good_plugin("class32", -1);
    patch_plugin("class32", EI_CLASS, &b, 1);
    expect_load_fails(ini_loading("class32"), tmp_file_of("class32"),
                      "is a 32-bit ELF file (ELFCLASS32); tessera loads 64-bit plugins only", NULL);
    b = ELFDATA2MSB;
    copy_good_plugin("bigendian", -1);
    patch_plugin("bigendian", EI_DATA, &b, 1);
    expect_load_fails(ini_loading("bigendian"), tmp_file_of("bigendian"),
                      "is a big-endian ELF file, but this host is little-endian", NULL);
    uint16_t machine = EM_AARCH64;
    copy_good_plugin("arm", -1);
    patch_plugin("arm", offsetof(Elf64_Ehdr, e_machine), &machine, sizeof machine);
    expect_load_fails(ini_loading("arm"), tmp_file_of("arm"),
                      "was built for AArch64 (ELF machine 183), but this host is", NULL);
    uint16_t type = ET_EXEC;
    copy_good_plugin("exec", -1);
    patch_plugin("exec", offsetof(Elf64_Ehdr, e_type), &type, sizeof type);
    expect_load_fails(
        ini_loading("exec"), tmp_file_of("exec"),
        "is an executable (ET_EXEC), not a shared object (ET_DYN): build a plugin with -shared",
        NULL);
}

/* `test_plugin load CONFIG`: the driver of tests/sdk_install.sh. */
static int load_and_print(const char *path) {
    ts_config *cfg = config_for(path);
    ts_plugins *reg;
    if (ts_plugins_create(&reg) || ts_plugins_load(reg, cfg)) {
        fprintf(stderr, "tessera: %s\n", ts_last_error());
        return 1;
    }
    ts_plugins_describe(reg, stdout);
    int counter = 0;
    ts_plugin_hook_event ev = {0};
    ev.kind = TS_HOOK_BEFORE_FORWARD;
    ev.micro_batch = 0;
    ev.micro_batches = 1;
    ev.state = &counter;
    fflush(stdout);
    ts_status st = ts_plugins_run_hooks(reg, &ev);
    if (st) fprintf(stderr, "tessera: %s\n", ts_last_error());
    ts_plugins_destroy(reg);
    ts_config_destroy(cfg);
    return st != TS_OK;
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "load") == 0) return load_and_print(argv[2]);
    if (argc != 3) {
        fprintf(stderr, "usage: %s CASE PLUGIN_DIR | %s load CONFIG\n", argv[0], argv[0]);
        return 2;
    }
    plugin_dir = argv[2];
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof tmp_dir, "%s/test_plugin.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 2;
    }
    static const struct {
        const char *name;
        void (*fn)(void);
    } cases[] = {
        {"good_plugin_registers_everything", good_plugin_registers_everything},
        {"auto_axis_takes_the_rest_of_the_world", auto_axis_takes_the_rest_of_the_world},
        {"missing_plugin_names_searched_paths", missing_plugin_names_searched_paths},
        {"missing_symbol_is_rejected", missing_symbol_is_rejected},
        {"abi_major_mismatch_is_rejected", abi_major_mismatch_is_rejected},
        {"newer_abi_minor_is_rejected", newer_abi_minor_is_rejected},
        {"descriptor_name_must_match_file", descriptor_name_must_match_file},
        {"small_descriptor_is_rejected", small_descriptor_is_rejected},
        {"two_plugins_claiming_one_axis_conflict", two_plugins_claiming_one_axis_conflict},
        {"undeclared_key_in_plugin_section_is_rejected",
         undeclared_key_in_plugin_section_is_rejected},
        {"bad_value_in_plugin_section_is_rejected", bad_value_in_plugin_section_is_rejected},
        {"conflicting_transforms_are_rejected", conflicting_transforms_are_rejected},
        {"failed_init_is_reported", failed_init_is_reported},
        {"plugin_named_twice_is_rejected", plugin_named_twice_is_rejected},
        {"discover_lists_good_and_skips_broken", discover_lists_good_and_skips_broken},
        {"host_subtables_match_their_flat_fields", host_subtables_match_their_flat_fields},
        {"thread_safe_names_the_first_plugin_without_the_flag",
         thread_safe_names_the_first_plugin_without_the_flag},
        {"truncated_plugin_file_is_rejected", truncated_plugin_file_is_rejected},
        {"non_elf_plugin_file_is_rejected", non_elf_plugin_file_is_rejected},
        {"plugin_path_that_is_a_directory_is_rejected",
         plugin_path_that_is_a_directory_is_rejected},
        {"empty_plugin_file_is_rejected", empty_plugin_file_is_rejected},
        {"plugin_file_of_another_class_or_machine_is_rejected",
         plugin_file_of_another_class_or_machine_is_rejected},
    };
    int found = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(argv[1], cases[i].name) == 0 || strcmp(argv[1], "all") == 0) {
            cases[i].fn();
            found = 1;
        }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp_dir);
    if (!found) {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures ? 1 : 0;
}
