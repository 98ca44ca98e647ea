/*
 * fuzz_config.c — libFuzzer target: the INI configuration (core/config/config.c).
 *
 * Each input is an INI file. It is loaded into a config that knows the
 * core's keys (ts_config_core_keys), as `tessera train` does before its
 * plugins add theirs; lines of the form ";set section.key=value" (comments to
 * the INI parser) are then applied as --set overrides; then the config is
 * validated, and when it is valid every key is looked up with its type, and
 * where it came from is asked.
 *
 * Oracles: the sanitizers, and that a validated config answers every typed
 * look-up inside the declared range (an INT or FLOAT key outside [min, max]
 * after a successful validate aborts).
 */
#include <math.h>

#include "config.h"
#include "fuzz_common.h"

static ts_config *fuzz_config_new(void) {
    ts_config *cfg;
    int n;
    const ts_key_spec *core = ts_config_core_keys(&n);
    if (ts_config_create(&cfg) != TS_OK) abort();
    if (ts_config_register(cfg, core, n) != TS_OK) {
        fprintf(stderr, "fuzz_config: core keys do not register: %s\n", ts_last_error());
        abort();
    }
    return cfg;
}

/* Applies every ";set ASSIGNMENT" line of the input as an override. */
static void fuzz_apply_sets(ts_config *cfg, const uint8_t *data, size_t size) {
    char line[512];
    for (size_t i = 0; i < size;) {
        size_t j = i;
        while (j < size && data[j] != '\n')
            j++;
        size_t n = j - i;
        if (n > 5 && n < sizeof line && memcmp(data + i, ";set ", 5) == 0) {
            memcpy(line, data + i + 5, n - 5);
            line[n - 5] = '\0';
            (void)ts_config_set(cfg, line);
        }
        i = j + 1;
    }
}

static void fuzz_lookup_all(const ts_config *cfg) {
    char where[512];
    for (int i = 0; i < ts_config_num_specs(cfg); i++) {
        const ts_key_spec *k = ts_config_spec(cfg, i);
        int ranged = k->min <= k->max;
        switch (k->type) {
        case TS_KEY_INT: {
            int64_t v = ts_config_int(cfg, k->section, k->name);
            int is_auto = v == -1 && k->choices && strstr(k->choices, "auto");
            if (ranged && !is_auto && ((double)v < k->min || (double)v > k->max)) {
                fprintf(stderr, "fuzz_config: [%s] %s = %lld validated, outside [%g, %g]\n",
                        k->section, k->name, (long long)v, k->min, k->max);
                abort();
            }
            break;
        }
        case TS_KEY_FLOAT: {
            double v = ts_config_float(cfg, k->section, k->name);
            if (!isfinite(v) || (ranged && (v < k->min || v > k->max))) {
                fprintf(stderr, "fuzz_config: [%s] %s = %g validated, outside [%g, %g]\n",
                        k->section, k->name, v, k->min, k->max);
                abort();
            }
            break;
        }
        case TS_KEY_BOOL: (void)ts_config_bool(cfg, k->section, k->name); break;
        case TS_KEY_STRING:
        case TS_KEY_ENUM: {
            const char *s = ts_config_str(cfg, k->section, k->name);
            if (!s && k->def) abort();
            break;
        }
        }
        (void)ts_config_has(cfg, k->section, k->name);
        (void)ts_config_where(cfg, k->section, k->name, where, (int)sizeof where);
    }
    for (int i = 0; i < ts_config_num_sections(cfg); i++)
        (void)strlen(ts_config_section(cfg, i));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file_write(data, size);
    ts_config *cfg = fuzz_config_new();
    if (ts_config_load(cfg, path) == TS_OK) {
        fuzz_apply_sets(cfg, data, size);
        if (ts_config_validate(cfg) == TS_OK) fuzz_lookup_all(cfg);
    }
    (void)strlen(ts_last_error());
    ts_config_destroy(cfg);
    return 0;
}
