/*
 * fuzz_plugin.c — libFuzzer target: the plugin checks before and after
 * dlopen (core/base/so_file.c, core/plugin/loader.c).
 *
 * Every input goes to ts_so_elf_check as a whole file, as the first 64
 * bytes of a file twice its size, and as its first half (the "only a prefix
 * was read" paths). An input that does not start with 0x7f is also decoded
 * into a plugin descriptor (the encoding is in fuzz_common.h) and given to
 * ts_plugin_descriptor_check, the loader's own check, as a plugin named
 * "fuzz"; a descriptor that passes has its keys registered in a config with
 * the core's keys, as the loader does, and when the config (with no file)
 * validates, every declared key is looked up by its type.
 *
 * Oracles: the sanitizers; an ELF check that passes on the first bytes of a
 * file, or on a shorter file, also passes on the whole file.
 */
#include "config.h"
#include "fuzz_common.h"
#include "plugin_file.h"
#include "so_file.h"

typedef struct fuzz_reader {
    const uint8_t *p, *end;
} fuzz_reader;

static uint8_t fuzz_byte(fuzz_reader *r) {
    return r->p < r->end ? *r->p++ : 0;
}

/* The next NUL-terminated string (copied into `pool`), or NULL: past the end,
 * or the string "\x7f". */
static const char *fuzz_str(fuzz_reader *r, char **pool, char *pool_end) {
    if (r->p >= r->end) return NULL;
    const uint8_t *s = r->p;
    while (r->p < r->end && *r->p)
        r->p++;
    size_t n = (size_t)(r->p - s);
    if (r->p < r->end) r->p++; /* the NUL */
    if (n == 1 && s[0] == 0x7f) return NULL;
    if (n + 1 > (size_t)(pool_end - *pool)) return NULL;
    char *out = *pool;
    memcpy(out, s, n);
    out[n] = '\0';
    *pool += n + 1;
    return out;
}

static ts_status fuzz_init(const ts_host *host, ts_plugin_ctx *ctx) {
    (void)host;
    (void)ctx;
    return TS_OK;
}

static void fuzz_descriptor(const uint8_t *data, size_t size) {
    static char pool[1 << 16];
    char *pp = pool, *pend = pool + sizeof pool;
    fuzz_reader r = {data + 1, data + size};
    uint8_t flags = fuzz_byte(&r), minor = fuzz_byte(&r);
    int nkeys = (int)fuzz_byte(&r) - 1;
    ts_plugin_key keys[FUZZ_MAX_KEYS];
    memset(keys, 0, sizeof keys);
    int nbuilt = nkeys < 0 ? 0 : nkeys > FUZZ_MAX_KEYS ? FUZZ_MAX_KEYS : nkeys;
    if (nkeys > FUZZ_MAX_KEYS) nkeys = FUZZ_MAX_KEYS; /* the array holds no more */
    for (int i = 0; i < nbuilt; i++) {
        keys[i].type = (ts_plugin_key_type)fuzz_byte(&r);
        int8_t lo = (int8_t)fuzz_byte(&r), hi = (int8_t)fuzz_byte(&r);
        keys[i].min = lo == INT8_MIN && hi == INT8_MIN ? 1 : lo;
        keys[i].max = lo == INT8_MIN && hi == INT8_MIN ? 0 : hi;
    }
    /* The object is as large as any struct_size it claims (up to 255): the
     * loader reads every field the size covers, as ABI 1.3's flags past fini,
     * which this file's ts_plugin_descriptor does not declare. */
    union {
        ts_plugin_descriptor fields;
        unsigned char bytes[256];
    } desc;
    memset(&desc, 0, sizeof desc);
    ts_plugin_descriptor *d = &desc.fields;
    d->abi_version = flags & 1 ? (uint32_t)minor * 0x01010101u
                              : TS_PLUGIN_ABI_MAKE(TS_PLUGIN_ABI_MAJOR, minor % 4);
    d->struct_size = flags & 2 ? (uint32_t)minor : (uint32_t)sizeof *d;
    d->name = fuzz_str(&r, &pp, pend);
    d->version = fuzz_str(&r, &pp, pend);
    d->description = fuzz_str(&r, &pp, pend);
    d->keys = flags & 8 ? NULL : keys;
    d->nkeys = nkeys;
    d->init = flags & 4 ? NULL : fuzz_init;
    for (int i = 0; i < nbuilt; i++) {
        keys[i].name = fuzz_str(&r, &pp, pend);
        keys[i].def = fuzz_str(&r, &pp, pend);
        keys[i].choices = fuzz_str(&r, &pp, pend);
        keys[i].help = fuzz_str(&r, &pp, pend);
    }
    if (ts_plugin_descriptor_check("fuzz", "/fuzz/tessera-fuzz.so", d) != TS_OK) return;

    /* Registered as the loader registers them (plugin.c plg_register_keys). */
    ts_config *cfg;
    int ncore;
    const ts_key_spec *core = ts_config_core_keys(&ncore);
    if (ts_config_create(&cfg) != TS_OK || ts_config_register(cfg, core, ncore) != TS_OK) abort();
    ts_key_spec specs[FUZZ_MAX_KEYS];
    for (int i = 0; i < d->nkeys; i++) {
        const ts_plugin_key *k = &d->keys[i];
        specs[i] = (ts_key_spec){"fuzz", k->name, (ts_key_type)k->type, k->def,
                                 k->min, k->max,  k->choices,           k->help};
    }
    if (d->nkeys == 0 || ts_config_register(cfg, specs, d->nkeys) == TS_OK) {
        if (ts_config_validate(cfg) == TS_OK)
            for (int i = 0; i < d->nkeys; i++) {
                const ts_plugin_key *k = &d->keys[i];
                switch (k->type) {
                case TS_PLUGIN_KEY_INT: (void)ts_config_int(cfg, "fuzz", k->name); break;
                case TS_PLUGIN_KEY_FLOAT: (void)ts_config_float(cfg, "fuzz", k->name); break;
                case TS_PLUGIN_KEY_BOOL: (void)ts_config_bool(cfg, "fuzz", k->name); break;
                case TS_PLUGIN_KEY_STRING:
                case TS_PLUGIN_KEY_ENUM: (void)ts_config_str(cfg, "fuzz", k->name); break;
                }
            }
    }
    ts_config_destroy(cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = "/fuzz/tessera-fuzz.so";
    size_t head = size < 64 ? size : 64;
    ts_status whole = ts_so_elf_check(data, size, size, path);
    (void)ts_so_elf_check(data, head, (uint64_t)size * 2, path);
    /* Passing with fewer bytes read, or a smaller file, implies passing. */
    if (whole != TS_OK && (ts_so_elf_check(data, size / 2, size, path) == TS_OK ||
                           ts_so_elf_check(data, head, head, path) == TS_OK)) {
        fprintf(stderr, "fuzz_plugin: a prefix passes the ELF check, the whole file fails\n");
        abort();
    }
    if (size >= 1 && data[0] != 0x7f) fuzz_descriptor(data, size);
    return 0;
}
