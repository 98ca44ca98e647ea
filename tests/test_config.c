/*
 * test_config.c — the INI configuration: parsing, typed look-ups, defaults,
 * --set overrides, where-strings, schema registration, and that every
 * malformed file or override fails with a message naming the file, the line
 * and the key. Run with the case name as argv[1] (see tests/config.cmake).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"

#include "test_cases.h"

/* Writes `text` to tmpdir/name and returns the path in a static buffer. */
static const char *write_file(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
    return path;
}

/* A config with the core schema. */
static ts_config *new_config(void) {
    ts_config *cfg = NULL;
    int n = 0;
    const ts_key_spec *core = ts_config_core_keys(&n);
    CHECK_OK(ts_config_create(&cfg));
    CHECK_OK(ts_config_register(cfg, core, n));
    return cfg;
}

static const char *good_ini = "; a small model\n"
                              "[model]\n"
                              "layers = 4\n"
                              "  d_model=128   ; indented, inline comment\n"
                              "vocab = 512\n"
                              "\n"
                              "[data]\n"
                              "shuffle = yes\n"
                              "# hash comment\n"
                              "[train]\n"
                              "lr = 3e-4\n"
                              "device = cuda\n"
                              "metrics =\n"
                              "[tp]\n"
                              "size = auto\n";

static const ts_key_spec tp_keys[] = {
    {"tp", "size", TS_KEY_INT, "1", 1, 1024, "auto", "tensor-parallel degree"},
    {"tp", "overlap", TS_KEY_BOOL, "off", 1, 0, NULL, "overlap communication"},
};

static void test_parse_typed_getters_and_defaults(void) {
    ts_config *cfg = new_config();
    CHECK_OK(ts_config_register(cfg, tp_keys, 2));
    CHECK(strcmp(ts_config_path(cfg), "") == 0);
    const char *path = write_file("good.ini", good_ini);
    CHECK_OK(ts_config_load(cfg, path));
    CHECK_OK(ts_config_validate(cfg));
    CHECK(strcmp(ts_config_path(cfg), path) == 0);

    CHECK(ts_config_int(cfg, "model", "layers") == 4);
    CHECK(ts_config_int(cfg, "model", "d_model") == 128);
    CHECK(ts_config_int(cfg, "model", "vocab") == 512);
    CHECK(ts_config_int(cfg, "model", "heads") == 4);        /* default */
    CHECK(ts_config_int(cfg, "model", "padded_vocab") == 0); /* default */
    CHECK(strcmp(ts_config_str(cfg, "model", "arch"), "gpt2") == 0);
    CHECK(strcmp(ts_config_str(cfg, "model", "init"), "random") == 0);
    CHECK(ts_config_bool(cfg, "data", "shuffle") == 1);
    CHECK(ts_config_int(cfg, "data", "synthetic_tokens") == 1048576);
    CHECK(fabs(ts_config_float(cfg, "train", "lr") - 3e-4) < 1e-18);
    CHECK(fabs(ts_config_float(cfg, "train", "beta2") - 0.95) < 1e-18);
    CHECK(ts_config_float(cfg, "train", "eps") == 1e-8);
    CHECK(ts_config_float(cfg, "comm", "timeout_s") == 300);
    CHECK(strcmp(ts_config_str(cfg, "train", "device"), "cuda") == 0);
    CHECK(strcmp(ts_config_str(cfg, "train", "dtype"), "fp32") == 0);
    CHECK(strcmp(ts_config_str(cfg, "train", "metrics"), "") == 0);
    CHECK(strcmp(ts_config_str(cfg, "parallel", "order"), "tp-cp-ep-dp-pp") == 0);
    CHECK(ts_config_int(cfg, "tp", "size") == -1); /* "auto" */
    CHECK(ts_config_bool(cfg, "tp", "overlap") == 0);

    CHECK(ts_config_has(cfg, "model", "layers"));
    CHECK(ts_config_has(cfg, "train", "metrics"));
    CHECK(!ts_config_has(cfg, "model", "heads"));

    /* sections in file order */
    CHECK(ts_config_num_sections(cfg) == 4);
    if (ts_config_num_sections(cfg) == 4) {
        CHECK(strcmp(ts_config_section(cfg, 0), "model") == 0);
        CHECK(strcmp(ts_config_section(cfg, 1), "data") == 0);
        CHECK(strcmp(ts_config_section(cfg, 2), "train") == 0);
        CHECK(strcmp(ts_config_section(cfg, 3), "tp") == 0);
    }
    char buf[512], want[600];
    snprintf(want, sizeof want, "%s:4 [model] d_model", path);
    CHECK(strcmp(ts_config_where(cfg, "model", "d_model", buf, sizeof buf), want) == 0);
    CHECK(strcmp(ts_config_where(cfg, "model", "heads", buf, sizeof buf),
                 "default [model] heads") == 0);

    /* a second load is refused */
    CHECK(ts_config_load(cfg, path) != TS_OK);
    ts_config_destroy(cfg);

    /* a missing file is an I/O error naming it */
    cfg = new_config();
    CHECK(ts_config_load(cfg, "/nonexistent/tessera.ini") == TS_ERR_IO);
    CHECK(strstr(ts_last_error(), "/nonexistent/tessera.ini") != NULL);
    ts_config_destroy(cfg);
}

static void test_set_overrides_and_where(void) {
    ts_config *cfg = new_config();
    const char *path = write_file("set.ini", "[train]\nsteps = 100\nlr = 0.01\n");
    CHECK_OK(ts_config_set(cfg, "model.heads=8")); /* before the load: still wins */
    CHECK_OK(ts_config_load(cfg, path));
    CHECK_OK(ts_config_set(cfg, "train.steps=7"));
    CHECK_OK(ts_config_set(cfg, " train . seed = 42 "));
    CHECK_OK(ts_config_set(cfg, "train.metrics=out/metrics.jsonl"));
    CHECK_OK(ts_config_set(cfg, "data.source=tokens:a=b.bin")); /* '=' in the value */
    CHECK_OK(ts_config_set(cfg, "train.trace="));               /* empty value */
    CHECK_OK(ts_config_set(cfg, "model.heads=16"));             /* the last one wins */
    CHECK_OK(ts_config_validate(cfg));
    CHECK(ts_config_int(cfg, "train", "steps") == 7);
    CHECK(ts_config_int(cfg, "train", "seed") == 42);
    CHECK(ts_config_int(cfg, "model", "heads") == 16);
    CHECK(ts_config_float(cfg, "train", "lr") == 0.01);
    CHECK(strcmp(ts_config_str(cfg, "train", "metrics"), "out/metrics.jsonl") == 0);
    CHECK(strcmp(ts_config_str(cfg, "data", "source"), "tokens:a=b.bin") == 0);
    CHECK(ts_config_has(cfg, "train", "trace"));
    char buf[512], want[600];
    CHECK(strcmp(ts_config_where(cfg, "train", "steps", buf, sizeof buf), "--set [train] steps") ==
          0);
    CHECK(strcmp(ts_config_where(cfg, "model", "heads", buf, sizeof buf), "--set [model] heads") ==
          0);
    snprintf(want, sizeof want, "%s:3 [train] lr", path);
    CHECK(strcmp(ts_config_where(cfg, "train", "lr", buf, sizeof buf), want) == 0);
    CHECK(strcmp(ts_config_where(cfg, "train", "warmup", buf, sizeof buf),
                 "default [train] warmup") == 0);

    /* a bad value given by --set is reported as coming from --set */
    CHECK_OK(ts_config_set(cfg, "train.steps=many"));
    CHECK(ts_config_validate(cfg) == TS_ERR_CONFIG);
    CHECK(strstr(ts_last_error(), "--set") != NULL);
    CHECK(strstr(ts_last_error(), "[train] steps = \"many\": not an integer") != NULL);
    /* an unknown key given by --set too */
    CHECK_OK(ts_config_set(cfg, "train.steps=3"));
    CHECK_OK(ts_config_set(cfg, "train.step=3"));
    CHECK(ts_config_validate(cfg) == TS_ERR_CONFIG);
    CHECK(strstr(ts_last_error(), "--set: unknown key 'step' in [train]") != NULL);
    CHECK(strstr(ts_last_error(), "did you mean 'steps'") != NULL);
    ts_config_destroy(cfg);

    /* an unknown section given only by --set */
    cfg = new_config();
    CHECK_OK(ts_config_set(cfg, "pp.size=2"));
    CHECK(ts_config_validate(cfg) == TS_ERR_CONFIG);
    CHECK(strstr(ts_last_error(), "--set: unknown section [pp]") != NULL);
    ts_config_destroy(cfg);
}

typedef struct bad_case {
    const char *text;
    int line;          /* expected line in the message; 0: no line */
    const char *key;   /* a substring naming the key or the offending text */
    const char *extra; /* another expected substring, or NULL */
} bad_case;

static void test_malformed_files_name_file_line_key(void) {
    static char long_line[400];
    memset(long_line, 0, sizeof long_line);
    strcpy(long_line, "[train]\nmetrics = ");
    size_t at = strlen(long_line);
    for (int i = 0; i < 250; i++)
        long_line[at + (size_t)i] = 'x';
    strcat(long_line, "\n");

    const bad_case cases[] = {
        {"[model]\nlayers = 2\nthis is junk\n", 3, "this is junk", "cannot parse"},
        {"heads = 4\n[model]\n", 1, "heads", "outside any section"},
        {"[model]\nheads = 4\nlayers = 2\nheads = 8\n", 4, "heads", "first at line 2"},
        {"[model]\nlayers = 2\n\n\n\n\nlayer = 3\n", 7, "layer",
         "unknown key 'layer' in [model] (known: arch, layers, d_model"},
        {"[data]\nshuffle = no\n[modle]\nlayers = 2\n", 3, "modle",
         "known: model, data, train, parallel, comm"},
        {"[model]\n\nheads = abc\n", 3, "heads", "[model] heads = \"abc\": not an integer"},
        {"[model]\nlayers = 12x\n", 2, "layers", "not an integer"},
        {"[model]\nlayers = 99999999999999999999\n", 2, "layers", "64-bit"},
        {"[train]\nlr = fast\n", 2, "lr", "not a number"},
        {"[train]\nlr = inf\n", 2, "lr", "not a finite number"},
        {"[data]\nshuffle = maybe\n", 2, "shuffle", "not a boolean"},
        {"[train]\ndevice = gpu\n", 2, "device", "expected one of cpu, cuda"},
        {"[model]\nvocab = 70000\n", 2, "vocab", "out of range [2, 65536]"},
        {"[model]\nlayers = 0\n", 2, "layers", "out of range [1, 1024]"},
        {"[model]\nlayers = 100000000\n", 2, "layers", "out of range [1, 1024]"},
        {"[model]\nd_model = 4294967360\n", 2, "d_model", "out of range [1, 2147483647]"},
        {"[train]\nmicro_batch = 2147483648\n", 2, "micro_batch", "out of range [1, 2147483647]"},
        {"[train]\nthreads = 100000\n", 2, "threads", "out of range [0, 4096]"},
        {"[train]\nlr = 1e39\n", 2, "lr", "out of range [0, 3.4e+38]"},
        {"[train]\nmax_skipped_steps = 0\n", 2, "max_skipped_steps", "out of range"},
        {"[train]\nbeta1 = 1\n", 2, "beta1", "out of range [0, 1)"},
        {"[train]\neps = 0\n", 2, "eps", "out of range (0, 3.4e+38]"},
        {"[train]\nsteps = 3\n[model\nlayers = 2\n", 3, "[model", "no closing ']'"},
        {"[model] layers = 2\n", 1, "layers = 2", "after section header"},
        {"[model]\n= 5\n", 2, "without a key", NULL},
        {long_line, 2, "longer than", NULL},
        {"[data]\nsynthetic_tokens = 10\n", 2, "synthetic_tokens", "[1024, 1000000000]"},
        {"[train]\nresume = maybe\n", 2, "resume", "expected one of no, auto"},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        char name[64], want[96];
        snprintf(name, sizeof name, "bad_%02d.ini", i);
        ts_config *cfg = new_config();
        const char *path = write_file(name, cases[i].text);
        ts_status st = ts_config_load(cfg, path);
        if (st == TS_OK) st = ts_config_validate(cfg);
        const char *msg = ts_last_error();
        snprintf(want, sizeof want, "%s:%d: ", name, cases[i].line);
        int ok = st == TS_ERR_CONFIG && strstr(msg, want) && strstr(msg, cases[i].key) &&
                 (!cases[i].extra || strstr(msg, cases[i].extra));
        if (!ok) {
            fprintf(stderr, "case %d: status %d, message: %s\n  wanted '%s', '%s', '%s'\n", i,
                    (int)st, st == TS_OK ? "(none)" : msg, want, cases[i].key,
                    cases[i].extra ? cases[i].extra : "");
            failures++;
        } else {
            printf("case %2d ok: %s\n", i, msg);
        }
        ts_config_destroy(cfg);
    }

    /* a required key (def NULL) that is missing names the file and the key */
    static const ts_key_spec req[] = {
        {"demo", "path", TS_KEY_STRING, NULL, 1, 0, NULL, "where the demo reads from"},
    };
    ts_config *cfg = new_config();
    CHECK_OK(ts_config_register(cfg, req, 1));
    CHECK_OK(ts_config_load(cfg, write_file("req.ini", "[model]\nlayers = 2\n")));
    CHECK(ts_config_validate(cfg) == TS_ERR_CONFIG);
    CHECK(strstr(ts_last_error(), "req.ini") != NULL);
    CHECK(strstr(ts_last_error(), "[demo] path is required") != NULL);
    CHECK_OK(ts_config_set(cfg, "demo.path=/tmp/x"));
    CHECK_OK(ts_config_validate(cfg));
    CHECK(strcmp(ts_config_str(cfg, "demo", "path"), "/tmp/x") == 0);
    ts_config_destroy(cfg);
}

static void test_malformed_set_is_rejected(void) {
    const char *bad[] = {"trainsteps=5", "train.steps",     ".steps=5",       "train.=5",
                         "=5",           "train steps.x=1", "[train].steps=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ts_config *cfg = new_config();
        ts_status st = ts_config_set(cfg, bad[i]);
        CHECK(st == TS_ERR_CONFIG);
        CHECK(strstr(ts_last_error(), bad[i]) != NULL);
        CHECK(strstr(ts_last_error(), "expected section.key=value") != NULL);
        if (st == TS_ERR_CONFIG) printf("--set %-18s -> %s\n", bad[i], ts_last_error());
        ts_config_destroy(cfg);
    }
}

static void test_schema_registration(void) {
    int n = 0;
    const ts_key_spec *core = ts_config_core_keys(&n);
    CHECK(n >= 35);
    ts_config *cfg = new_config();
    CHECK(ts_config_num_specs(cfg) == n);
    /* every core default is valid for its own spec (register checked them) and
     * every key has help */
    for (int i = 0; i < n; i++) {
        CHECK(core[i].help && core[i].help[0]);
        CHECK(core[i].def != NULL);
    }
    /* registering a key twice is an error naming it */
    CHECK(ts_config_register(cfg, core + 3, 1) != TS_OK);
    CHECK(strstr(ts_last_error(), "[model] heads") != NULL);
    /* a default that does not fit its own type is refused */
    ts_key_spec badspec = {"x", "k", TS_KEY_INT, "ten", 1, 0, NULL, "h"};
    CHECK(ts_config_register(cfg, &badspec, 1) != TS_OK);
    CHECK(strstr(ts_last_error(), "[x] k") != NULL);
    ts_key_spec badenum = {"x", "e", TS_KEY_ENUM, "a", 1, 0, NULL, "h"};
    CHECK(ts_config_register(cfg, &badenum, 1) != TS_OK);
    /* an integer key takes one word, "auto" (read as -1): any other choice
     * would validate and then not read as an integer (found by fuzz_plugin) */
    ts_key_spec intwords = {"x", "n", TS_KEY_INT, "max", 1, 0, "max|auto", "h"};
    CHECK(ts_config_register(cfg, &intwords, 1) != TS_OK);
    CHECK(strstr(ts_last_error(), "[x] n") && strstr(ts_last_error(), "\"auto\""));
    ts_key_spec intauto = {"x", "a", TS_KEY_INT, "auto", 1, 0, "auto", "h"};
    CHECK_OK(ts_config_register(cfg, &intauto, 1));
    CHECK(ts_config_int(cfg, "x", "a") == -1);
    /* specs are copied: the caller's strings may go away */
    char sec[8] = "zz", key[8] = "kk", def[8] = "3";
    ts_key_spec tmp = {sec, key, TS_KEY_INT, def, 0, 10, NULL, "temporary"};
    CHECK_OK(ts_config_register(cfg, &tmp, 1));
    strcpy(sec, "qq");
    strcpy(key, "qq");
    strcpy(def, "9");
    CHECK(ts_config_int(cfg, "zz", "kk") == 3);
    const ts_key_spec *last = ts_config_spec(cfg, ts_config_num_specs(cfg) - 1);
    CHECK(strcmp(last->section, "zz") == 0 && strcmp(last->name, "kk") == 0);
    /* a plugin section becomes known once registered */
    CHECK_OK(ts_config_load(cfg, write_file("plug.ini", "[zz]\nkk = 10\n")));
    CHECK_OK(ts_config_validate(cfg));
    CHECK(ts_config_int(cfg, "zz", "kk") == 10);
    ts_config_destroy(cfg);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"parse_typed_getters_and_defaults", test_parse_typed_getters_and_defaults},
        {"set_overrides_and_where", test_set_overrides_and_where},
        {"malformed_files_name_file_line_key", test_malformed_files_name_file_line_key},
        {"malformed_set_is_rejected", test_malformed_set_is_rejected},
        {"schema_registration", test_schema_registration},
    };
    return run_cases(argc, argv, "test_config", cases, (int)(sizeof cases / sizeof cases[0]));
}
