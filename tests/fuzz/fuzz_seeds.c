/*
 * fuzz_seeds.c — writes the fuzz targets' seed inputs with the core's own
 * writers, so a seed is valid for the format the core reads today, and
 * prints libFuzzer dictionaries built from the core's tables.
 *
 * usage: fuzz_seeds TARGET DIR     writes DIR/gen-* for TARGET (config,
 *                                  tokens, llmc, checkpoint, ckpt_meta,
 *                                  plugin, safetensors, cluster, hf,
 *                                  schedule_file)
 *        fuzz_seeds dict TARGET    prints TARGET's dictionary (config: every
 *                                  section, key and enum word; cluster: its
 *                                  keys and edge numbers; safetensors,
 *                                  ckpt_meta, hf: their words; others:
 *                                  nothing)
 * tests/fuzz/fuzz.sh runs it into each target's working corpus before a run;
 * the checked-in seeds of tests/fuzz/corpus were written by it too
 * (`fuzz_seeds TARGET tests/fuzz/corpus/TARGET`).
 *
 * What it does not do: fuzz anything (it is built with the sanitizers but
 * without libFuzzer's main).
 */
#include <errno.h>
#include <sys/stat.h>

#include "config.h"
#include "cpu_kernels.h"
#include "fuzz_common.h"
#include "rng.h"
#include "state.h"

static const char *out_dir;

static void die(const char *what) {
    fprintf(stderr, "fuzz_seeds: %s: %s\n", what, ts_last_error()[0] ? ts_last_error() : "");
    exit(1);
}

static void write_file(const char *name, const void *data, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", out_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

/* --- config: every core key at its default (required keys a value) ------- */
static void seeds_config(void) {
    int n;
    const ts_key_spec *k = ts_config_core_keys(&n);
    static char text[1 << 16];
    size_t j = 0;
    const char *section = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(k[i].section, section) != 0) {
            section = k[i].section;
            j += (size_t)snprintf(text + j, sizeof text - j, "%s[%s]\n", j ? "\n" : "", section);
        }
        char value[64];
        const char *v = k[i].def;
        if (!v) {
            switch (k[i].type) {
            case TS_KEY_INT:
            case TS_KEY_FLOAT:
                snprintf(value, sizeof value, "%g", k[i].min <= k[i].max ? k[i].max : 1.0);
                break;
            case TS_KEY_BOOL: snprintf(value, sizeof value, "true"); break;
            case TS_KEY_STRING: snprintf(value, sizeof value, "x"); break;
            case TS_KEY_ENUM:
                snprintf(value, sizeof value, "%.*s", (int)strcspn(k[i].choices, "|"),
                         k[i].choices);
                break;
            }
            v = value;
        }
        j += (size_t)snprintf(text + j, sizeof text - j, "%s = %s\n", k[i].name, v);
    }
    write_file("gen-all-core-keys.ini", text, j);
    static const char sets[] = "; overrides, as --set\n"
                               ";set train.steps=7\n;set model.layers=3\n;set bogus\n"
                               "[model]\nlayers = 2\nd_model = 64\nheads = 4\n"
                               "[train]\nsteps = 2\nlr = 1e-3\n";
    write_file("gen-sets.ini", sets, sizeof sets - 1);
}

/* --- cluster files: every [cluster] key at its default, and at each end of
 * its range (the slowest machine and the fastest the ranges allow) ------- */
static void seeds_cluster(void) {
    int n;
    const ts_key_spec *k = ts_config_core_keys(&n);
    static const char *names[3] = {"gen-cluster-defaults.ini", "gen-cluster-lowest.ini",
                                   "gen-cluster-highest.ini"};
    for (int edge = 0; edge < 3; edge++) {
        static char text[1 << 14];
        size_t j = (size_t)snprintf(text, sizeof text, "[cluster]\n");
        for (int i = 0; i < n; i++) {
            if (strcmp(k[i].section, "cluster") != 0) continue;
            char value[64];
            if (edge && (k[i].type == TS_KEY_INT || k[i].type == TS_KEY_FLOAT))
                snprintf(value, sizeof value, "%.17g", edge == 1 ? k[i].min : k[i].max);
            else
                snprintf(value, sizeof value, "%s", k[i].def);
            /* a reserve that leaves nothing is refused: keep it 0 */
            if (!strcmp(k[i].name, "memory_reserve_gb")) snprintf(value, sizeof value, "0");
            /* at most 2^20 devices in all */
            if (!strcmp(k[i].name, "nodes") && edge == 2) snprintf(value, sizeof value, "1");
            j += (size_t)snprintf(text + j, sizeof text - j, "%s = %s\n", k[i].name, value);
        }
        write_file(names[edge], text, j);
    }
    static const char two_nodes[] =
        "; two nodes of 4 devices, A100-like figures\n[cluster]\ngpus_per_node = 4\nnodes = 2\n"
        "memory_gb = 1\nflops_bf16 = 312e12\nflops_fp32 = 19.5e12\nmatmul_efficiency = 0.75\n"
        "attention_efficiency = 0.5\nmemory_bandwidth_gbs = 2039\nkernel_us = 4\n"
        "intra_bandwidth_gbs = 300\nintra_latency_us = 10\ninter_bandwidth_gbs = 25\n"
        "inter_latency_us = 20\ninter_all_reduce_bandwidth_gbs = 20\n"
        "intra_send_recv_latency_us = 2\ncomm_overlap = false\ncores_per_node = 2\n";
    write_file("gen-cluster-two-nodes.ini", two_nodes, sizeof two_nodes - 1);
}

/* --- llm.c token files ---------------------------------------------------- */
static void seeds_tokens(void) {
    int32_t h[256 + 64];
    memset(h, 0, sizeof h);
    h[0] = 20240520;
    h[1] = 1;
    h[2] = 128;
    h[200] = 254; /* vocab 256        */
    h[201] = 1;   /* shuffle          */
    h[202] = 8;   /* ignore token 7   */
    h[203] = 7;   /* T = 8            */
    h[204] = 5;   /* window 5         */
    uint16_t *tok = (uint16_t *)(h + 256);
    for (int i = 0; i < 128; i++)
        tok[i] = (uint16_t)((i * 37 + 11) % 256);
    write_file("gen-128-tokens.bin", h, sizeof h);
    h[2] = 2;
    h[201] = 0;
    h[203] = 0;
    write_file("gen-2-tokens.bin", h, 1024 + 4);
}

/* --- checkpoints of the tiny model ------------------------------------------ */
static ts_model *tiny_model_of(const ts_model_config *cfg) {
    ts_model *m;
    if (ts_model_create(cfg, TS_F32, 42, NULL, NULL, &m) != TS_OK) die("model");
    return m;
}

static ts_model *tiny_model(void) {
    return tiny_model_of(&fuzz_tiny_model);
}

static void seeds_llmc(void) {
    ts_model *m = tiny_model();
    size_t n = m->global_numel;
    float *full = calloc(n, sizeof *full);
    if (!full) die("out of memory");
    memcpy(full, ts_model_param_f32(m), n * sizeof *full);
    char path[1024];
    snprintf(path, sizeof path, "%s/gen-tiny-f32.llmc", out_dir);
    if (ts_llmc_save(path, m, full, 0) != TS_OK) die("ts_llmc_save");
    /* The same as version 5 (bf16), which llm.c writes and tessera reads. */
    size_t bytes = 1024 + 2 * n;
    unsigned char *b = calloc(1, bytes);
    FILE *f = fopen(path, "rb");
    if (!b || !f || fread(b, 1, 1024, f) != 1024) die("reading the f32 seed back");
    fclose(f);
    int32_t version = 5;
    memcpy(b + 4, &version, 4);
    /* llm.c's file order is not the flat order, but any values will do. */
    ts_cpu_f32_to_bf16((uint16_t *)(b + 1024), full, n);
    write_file("gen-tiny-bf16.llmc", b, bytes);
    free(b);
    free(full);
    ts_model_destroy(m);
    /* tessera's raw weights of a mixture of experts (magic 20260601). */
    m = tiny_model_of(&fuzz_tiny_moe);
    snprintf(path, sizeof path, "%s/gen-tiny-moe.raw", out_dir);
    if (ts_llmc_save(path, m, ts_model_param_f32(m), 0) != TS_OK) die("ts_llmc_save (raw)");
    ts_model_destroy(m);
}

/* --- safetensors: the tiny dense model and the tiny mixture of experts ---- */
static void seeds_safetensors(void) {
    static const struct {
        const ts_model_config *cfg;
        int bf16;
        const char *name;
    } seeds[] = {{&fuzz_tiny_model, 0, "gen-tiny-f32.safetensors"},
                 {&fuzz_tiny_moe, 0, "gen-tiny-moe-f32.safetensors"},
                 {&fuzz_tiny_moe, 1, "gen-tiny-moe-bf16.safetensors"}};
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
        ts_model *m = tiny_model_of(seeds[i].cfg);
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", out_dir, seeds[i].name);
        if (ts_safetensors_save(path, m, ts_model_param_f32(m), seeds[i].bf16) != TS_OK)
            die("ts_safetensors_save");
        ts_model_destroy(m);
    }
}

/* --- hf: config.json and the index beside the tiny model (fuzz_hf.c): byte
 * 0 even for config.json, odd for the index ------------------------------ */
static void seeds_hf(void) {
    static const char *const configs[][2] = {
        {"gen-config.json",
         "{\"architectures\": [\"GPT2LMHeadModel\"], \"model_type\": \"gpt2\", \"n_head\": 2, "
         "\"n_embd\": 8, \"n_layer\": 1, \"n_positions\": 4, \"n_ctx\": 4, \"vocab_size\": 16, "
         "\"layer_norm_epsilon\": 1e-05, \"activation_function\": \"gelu_new\", "
         "\"tie_word_embeddings\": true, \"n_inner\": null, \"scale_attn_weights\": true, "
         "\"task_specific_params\": {\"text-generation\": {\"do_sample\": true, "
         "\"max_length\": 50}}, \"resid_pdrop\": 0.1, \"bos_token_id\": 50256}"},
        {"gen-config-erf.json", "{\"n_head\": 2, \"activation_function\": \"gelu\"}"},
        {"gen-config-eps.json", "{\"layer_norm_epsilon\": 1e-3, \"n_inner\": 32}"},
        {"gen-config-untied.json", "{\"tie_word_embeddings\": false, \"n_head\": 4}"}};
    char buf[2048];
    for (size_t i = 0; i < sizeof configs / sizeof *configs; i++) {
        int n = snprintf(buf, sizeof buf, "%c%s", 0, configs[i][1]);
        write_file(configs[i][0], buf, (size_t)n);
    }
    static const char *const names[] = {"wte.weight",
                                        "wpe.weight",
                                        "h.0.ln_1.weight",
                                        "h.0.ln_1.bias",
                                        "h.0.attn.c_attn.weight",
                                        "h.0.attn.c_attn.bias",
                                        "h.0.attn.c_proj.weight",
                                        "h.0.attn.c_proj.bias",
                                        "h.0.ln_2.weight",
                                        "h.0.ln_2.bias",
                                        "h.0.mlp.c_fc.weight",
                                        "h.0.mlp.c_fc.bias",
                                        "h.0.mlp.c_proj.weight",
                                        "h.0.mlp.c_proj.bias",
                                        "ln_f.weight",
                                        "ln_f.bias"};
    size_t len = (size_t)snprintf(buf, sizeof buf,
                                  "%c{\"metadata\": {\"total_size\": 4928}, "
                                  "\"weight_map\": {",
                                  1);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len,
                                "%s\"transformer.%s\": \"model-00001-of-00001.safetensors\"",
                                i ? ", " : "", names[i]);
    len += (size_t)snprintf(buf + len, sizeof buf - len, "}}");
    write_file("gen-index.json", buf, len);
}

static void seeds_checkpoint(void) {
    ts_model *m = tiny_model();
    size_t n = m->global_numel;
    float *mom = calloc(2 * n, sizeof *mom);
    if (!mom) die("out of memory");
    uint64_t key = ts_rng_key(5, "fuzz.moments");
    for (size_t i = 0; i < n; i++) {
        mom[i] = 0.01f * ts_rng_normal(key, i);
        mom[n + i] = 1e-4f * (float)(i % 7);
    }
    ts_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.step = 3;
    meta.data_cursor = 12;
    meta.seed = 1337;
    char path[4096], dest[1024];
    if (ts_checkpoint_save(out_dir, m, &meta, ts_model_param_f32(m), mom, mom + n, path,
                           sizeof path) != TS_OK)
        die("ts_checkpoint_save");
    snprintf(dest, sizeof dest, "%s/gen-tiny.tsck", out_dir);
    if (rename(path, dest) != 0) {
        perror(dest);
        exit(1);
    }
    free(mom);
    ts_model_destroy(m);
}

/* --- ckpt_meta: the metadata of a checkpoint of the fuzz target's files ------- */
static void seeds_ckpt_meta(void) {
    /* Tensor "w" (4, 8): master and m cut by rows over the two files, v cut
     * as an element range; "b" (8) whole in file 1. */
    static const ts_ckpt_tensor tensors[2] = {{"w", 2, {4, 8, 1}}, {"b", 1, {8, 1, 1}}};
    static ts_ckpt_shard shards[8];
    static unsigned char zeros[FUZZ_META_BYTES];
    int n = 0;
    int64_t at[FUZZ_META_FILES] = {0};
    for (int a = 0; a < TS_CKPT_ARRAYS; a++)
        for (int f = 0; f < FUZZ_META_FILES; f++) {
            ts_ckpt_shard *s = &shards[n++];
            *s = (ts_ckpt_shard){.tensor = 0, .array = a, .file = f, .file_offset = at[f]};
            int range = a == 2;
            s->offset[0] = range ? 0 : 2 * f;
            s->extent[0] = range ? 4 : 2;
            s->extent[1] = 8;
            s->extent[2] = 1;
            s->lo = range ? 16 * f : 0;
            s->hi = s->lo + 16;
            s->crc = ts_crc32(0, zeros, 64);
            at[f] += 64;
        }
    ts_ckpt_shard *b = &shards[n++];
    *b = (ts_ckpt_shard){.tensor = 1, .array = 0, .file = 1, .file_offset = at[1], .hi = 8};
    b->extent[0] = 8;
    b->extent[1] = b->extent[2] = 1;
    b->crc = ts_crc32(0, zeros, 32);
    uint64_t bytes[FUZZ_META_FILES] = {FUZZ_META_BYTES, FUZZ_META_BYTES};
    ts_ckpt_info info = {.meta = {3, 48, 7, 0},
                         .cfg = fuzz_tiny_model,
                         .param_dtype = TS_F32,
                         .nfiles = FUZZ_META_FILES,
                         .file_bytes = bytes,
                         .ntensors = 2,
                         .tensors = (ts_ckpt_tensor *)tensors,
                         .nshards = n,
                         .shards = shards};
    char tmp[1024], final[1024], path[1100];
    snprintf(tmp, sizeof tmp, "%s/meta.tmp.dir", out_dir);
    snprintf(final, sizeof final, "%s/meta.dir", out_dir);
    if (ts_ckpt_begin(tmp) != TS_OK || ts_ckpt_commit(tmp, final, &info) != TS_OK)
        die("ts_ckpt_commit");
    snprintf(path, sizeof path, "%s/metadata", final);
    FILE *f = fopen(path, "rb");
    static char text[1 << 16];
    size_t len = f ? fread(text, 1, sizeof text, f) : 0;
    if (!f || len == 0) die("reading the seed metadata");
    fclose(f);
    write_file("gen-metadata.txt", text, len);
    if (ts_ckpt_remove_dir(final) != TS_OK) die("removing the seed directory");
}

/* --- plugin: a small shared object and descriptors -------------------------- */
static void desc_seed(const char *name, const unsigned char *head, size_t nhead,
                      const char *const *strs, int nstrs) {
    static unsigned char b[4096];
    size_t j = 0;
    memcpy(b, head, nhead);
    j = nhead;
    for (int i = 0; i < nstrs; i++) {
        size_t len = strlen(strs[i]) + 1;
        memcpy(b + j, strs[i], len);
        j += len;
    }
    write_file(name, b, j);
}

/* Schedule files of every shape the loader knows: GPipe's order over p
 * ranks and m micro-batches, with whole backwards (BW) or split ones (B then
 * W), and over two chunks a rank in V order (each rank's chunk 0 forwards,
 * its chunk 1 forwards, then the backwards the other way round). */
static void seeds_schedule_file(void) {
    char text[4096], name[64];
    for (int p = 1; p <= 4; p++)
        for (int m = 1; m <= 3; m += 2)
            for (int kind = 0; kind < 3; kind++) {
                int n = snprintf(text, sizeof text, "# GPipe order, p = %d, m = %d\n%s", p, m,
                                 kind == 2 ? "order v\n" : "");
                for (int r = 0; r < p; r++) {
                    n += snprintf(text + n, sizeof text - (size_t)n, "rank %d:", r);
                    for (int c = 0; c < (kind == 2 ? 2 : 1); c++)
                        for (int mb = 0; mb < m; mb++)
                            n += snprintf(text + n, sizeof text - (size_t)n,
                                          kind == 2 ? " F%d.%d" : " F%d", mb, c);
                    for (int c = kind == 2 ? 1 : 0; c >= 0; c--)
                        for (int mb = 0; mb < m; mb++)
                            n += snprintf(text + n, sizeof text - (size_t)n,
                                          kind == 0   ? " BW%d"
                                          : kind == 1 ? " B%d W%d"
                                                      : " B%d.%d W%d.%d",
                                          mb, kind == 1 ? mb : c, mb, c);
                    n += snprintf(text + n, sizeof text - (size_t)n, "\n");
                }
                snprintf(name, sizeof name, "gen-gpipe-p%d-m%d-%s.sched", p, m,
                         kind == 0   ? "bw"
                         : kind == 1 ? "split"
                                     : "v");
                write_file(name, text, (size_t)n);
            }
}

static void seeds_plugin(void) {
#ifdef FUZZ_SEED_PLUGIN
    FILE *f = fopen(FUZZ_SEED_PLUGIN, "rb");
    static unsigned char so[1 << 16];
    size_t n = f ? fread(so, 1, sizeof so, f) : 0;
    if (!f || n == 0 || n == sizeof so) die("reading the seed plugin " FUZZ_SEED_PLUGIN);
    fclose(f);
    write_file("gen-seed-plugin.so", so, n);
#endif
    /* tag, flags, minor, nkeys + 1, then per key: type, min, max */
    static const unsigned char head[] = {
        FUZZ_DESC_TAG, 0, 0, 6, 0, 1, 64, 1, 0x80, 0x80, 2, 0, 0, 3, 0x80, 0x80, 4, 0x80, 0x80};
    static const char *const strs[] = {
        "fuzz",     "1.0",       "a plugin of the fuzzer", /* name, version, description */
        "size",     "auto",      "auto",
        "the size", /* name, default, choices, help */
        "rate",     "0.5",       "\x7f",
        "a rate",   "verbose",   "no",
        "\x7f",     "be chatty", "label",
        "\x7f",     "\x7f",      "a required label",
        "mode",     "fast",      "fast|slow|auto",
        "the mode"};
    desc_seed("gen-descriptor.bin", head, sizeof head, strs, (int)(sizeof strs / sizeof *strs));
    static const unsigned char head0[] = {FUZZ_DESC_TAG, 0, 0, 1};
    static const char *const strs0[] = {"fuzz", "0.1", "\x7f"};
    desc_seed("gen-descriptor-nokeys.bin", head0, sizeof head0, strs0, 3);
}

/* --- dictionaries ------------------------------------------------------------- */
static void dict_config(void) {
    int n;
    const ts_key_spec *k = ts_config_core_keys(&n);
    const char *section = "";
    for (int i = 0; i < n; i++) {
        if (strcmp(k[i].section, section) != 0) {
            section = k[i].section;
            printf("\"[%s]\"\n", section);
        }
        printf("\"%s\"\n\"%s.%s=\"\n", k[i].name, k[i].section, k[i].name);
        for (const char *c = k[i].choices; c && *c;) {
            size_t len = strcspn(c, "|");
            printf("\"%.*s\"\n", (int)len, c);
            c += len + (c[len] == '|');
        }
    }
    printf("\" = \"\n\";set \"\n\"auto\"\n\"1e308\"\n\"9223372036854775807\"\n\"-0\"\n");
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "dict") == 0) {
        if (strcmp(argv[2], "config") == 0) dict_config();
        if (strcmp(argv[2], "safetensors") == 0)
            printf("\"__metadata__\"\n\"data_offsets\"\n\"dtype\"\n\"shape\"\n\"F32\"\n"
                   "\"BF16\"\n\"F16\"\n\"I32\"\n\"experts\"\n\"moe_every\"\n"
                   "\"expert_hidden\"\n\"top_k\"\n\"heads\"\n\"h.1.mlp.router.weight\"\n"
                   "\"h.0.mlp.experts.2.c_fc.weight\"\n\"h.0.mlp.experts.1.c_proj.bias\"\n"
                   "\"h.1.mlp.c_fc.weight\"\n\"mlp.experts.\"\n\"18446744073709551615\"\n");
        if (strcmp(argv[2], "cluster") == 0) {
            int n;
            const ts_key_spec *k = ts_config_core_keys(&n);
            for (int i = 0; i < n; i++)
                if (strcmp(k[i].section, "cluster") == 0) printf("\"%s\"\n", k[i].name);
            printf("\"[cluster]\"\n\" = \"\n\"1e-300\"\n\"1e300\"\n\"1048576\"\n\"4096\"\n"
                   "\"2147483647\"\n\"inf\"\n\"nan\"\n\"-0\"\n\"0x1p-1074\"\n\"true\"\n");
        }
        if (strcmp(argv[2], "hf") == 0)
            printf("\"n_head\"\n\"n_embd\"\n\"n_layer\"\n\"n_positions\"\n\"vocab_size\"\n"
                   "\"n_inner\"\n\"layer_norm_epsilon\"\n\"activation_function\"\n"
                   "\"tie_word_embeddings\"\n\"scale_attn_weights\"\n"
                   "\"scale_attn_by_inverse_layer_idx\"\n\"add_cross_attention\"\n"
                   "\"model_type\"\n\"weight_map\"\n\"gelu_new\"\n\"gelu\"\n\"null\"\n"
                   "\"true\"\n\"false\"\n\"1e-05\"\n\"\\\\u0000\"\n\"transformer.\"\n"
                   "\"lm_head.weight\"\n\"model-00001-of-00001.safetensors\"\n\"../\"\n");
        if (strcmp(argv[2], "ckpt_meta") == 0)
            printf("\"tessera-checkpoint 2\"\n\"shard \"\n\"tensor \"\n\"file \"\n\"master\"\n"
                   "\"rank-00000.bin\"\n\"end \"\n\"9223372036854775807\"\n\"-1\"\n");
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: %s TARGET DIR | %s dict TARGET\n", argv[0], argv[0]);
        return 2;
    }
    out_dir = argv[2];
    if (mkdir(out_dir, 0755) != 0 && errno != EEXIST) {
        perror(out_dir);
        return 1;
    }
    static const struct {
        const char *name;
        void (*fn)(void);
    } targets[] = {{"config", seeds_config},
                   {"tokens", seeds_tokens},
                   {"llmc", seeds_llmc},
                   {"checkpoint", seeds_checkpoint},
                   {"ckpt_meta", seeds_ckpt_meta},
                   {"plugin", seeds_plugin},
                   {"safetensors", seeds_safetensors},
                   {"cluster", seeds_cluster},
                   {"hf", seeds_hf},
                   {"schedule_file", seeds_schedule_file}};
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++)
        if (strcmp(argv[1], targets[i].name) == 0) {
            targets[i].fn();
            return 0;
        }
    fprintf(stderr, "fuzz_seeds: unknown target %s\n", argv[1]);
    return 2;
}
