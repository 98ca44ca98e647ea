/*
 * config.h — the INI configuration: a schema of known keys, strict parsing
 * with inih, `--set section.key=value` overrides and typed look-ups.
 *
 * The schema is a list of ts_key_spec registered by the core (sections model,
 * data, train, parallel, comm) and by each plugin for its own section. A file
 * is parsed into entries that remember where they came from (file and line,
 * or "--set"), so that every error names the file, the line and the key:
 *     tiny.ini:12: [model] heads = 5: d_model=64 is not divisible by heads
 *
 * What it does not do: interpret values beyond their declared type and range
 * (cross-key rules such as heads dividing d_model are checked by their owners
 * using ts_config_where to name the place).
 */
#ifndef TESSERA_CORE_CONFIG_H
#define TESSERA_CORE_CONFIG_H

#include <stdint.h>

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ts_key_type {
    TS_KEY_INT = 0,    /* a decimal integer (64-bit)                            */
    TS_KEY_FLOAT = 1,  /* a finite decimal or scientific number                 */
    TS_KEY_BOOL = 2,   /* true/false, yes/no, on/off, 1/0                       */
    TS_KEY_STRING = 3, /* any text (surrounding whitespace trimmed)             */
    TS_KEY_ENUM = 4,   /* one of the '|'-separated words in `choices`           */
} ts_key_type;

typedef struct ts_key_spec {
    const char *section; /* "model", "train", a plugin's name, ...         */
    const char *name;    /* the key                                          */
    ts_key_type type;
    const char *def;     /* default as text; NULL means the key is required  */
    double min, max;     /* inclusive range for INT and FLOAT (min > max: none) */
    const char *choices; /* ENUM: "cpu|cuda"; INT: "auto" allowed if "auto"  */
    const char *help;    /* one line for `tessera plugins` and --help        */
} ts_key_spec;

typedef struct ts_config ts_config;

ts_status ts_config_create(ts_config **out);
void ts_config_destroy(ts_config *cfg);

/* Adds keys to the schema (the specs are copied). A section becomes known as
 * soon as one of its keys is registered. Registering a key twice is an error. */
ts_status ts_config_register(ts_config *cfg, const ts_key_spec *specs, int n);
/* The schema of the core's own sections. */
const ts_key_spec *ts_config_core_keys(int *n);

/* Parses an INI file; syntax errors (a line that is neither a section, a
 * key=value nor a comment; a key outside any section; a key given twice) name
 * the file and line. Values are kept as text until ts_config_validate. */
ts_status ts_config_load(ts_config *cfg, const char *path);
/* Applies one "section.key=value" override; it replaces any value from the
 * file and is reported as coming from "--set". */
ts_status ts_config_set(ts_config *cfg, const char *assignment);
/* Checks every entry against the schema: unknown section, unknown key, a value
 * of the wrong type or out of range, a required key missing. */
ts_status ts_config_validate(const ts_config *cfg);

/* Typed look-ups; the key must be in the schema (a broken invariant if not).
 * A key absent from the file yields its default. An INT given as "auto"
 * yields -1. */
int64_t ts_config_int(const ts_config *cfg, const char *section, const char *key);
double ts_config_float(const ts_config *cfg, const char *section, const char *key);
int ts_config_bool(const ts_config *cfg, const char *section, const char *key);
const char *ts_config_str(const ts_config *cfg, const char *section, const char *key);
/* 1 if the key was given in the file or by --set. */
int ts_config_has(const ts_config *cfg, const char *section, const char *key);
/* Where a key was given, for error messages: "tiny.ini:12 [model] heads",
 * "--set [train] steps", or "default [train] steps". Returns buf. */
const char *ts_config_where(const ts_config *cfg, const char *section, const char *key, char *buf,
                            int size);
/* The path of the loaded file ("" before ts_config_load). */
const char *ts_config_path(const ts_config *cfg);

/* The effective configuration as text: one line "section.key=value" per
 * key of the schema (the value given, or the default), numbers written in
 * one canonical form (so "1e-3" and "0.001" agree), lines sorted. The
 * string is malloc'd; the caller frees it. NULL when out of memory. */
char *ts_config_canonical(const ts_config *cfg);

/* Checks that every rank of `world` runs the same effective configuration
 * (ts_config_canonical, so after --set): ranks launched with different files
 * or overrides (an MPMD launch, a stale copy on one node) would otherwise
 * train apart or fail in an opaque way. Collective over `world`. On a
 * difference every rank returns TS_ERR_CONFIG with the same message naming
 * the first differing key, its values and the ranks holding each. */
typedef struct ts_comm ts_comm;
ts_status ts_config_agree(const ts_config *cfg, ts_comm *world);

/* The sections that appear in the file (for plugin lookup), in file order. */
int ts_config_num_sections(const ts_config *cfg);
const char *ts_config_section(const ts_config *cfg, int i);
/* The registered schema, for listings. */
int ts_config_num_specs(const ts_config *cfg);
const ts_key_spec *ts_config_spec(const ts_config *cfg, int i);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_CONFIG_H */
