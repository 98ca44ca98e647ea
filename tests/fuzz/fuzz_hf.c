/*
 * fuzz_hf.c — libFuzzer target: what a transformers checkpoint adds to a
 * safetensors file (core/train/safetensors.c, `[model] init =
 * safetensors:DIR`): the config.json beside the weights and a sharded
 * checkpoint's model.safetensors.index.json, both read by the reader's own
 * JSON parser and checked against the tensors.
 *
 * Two fixed directories in a private temporary one (removed at exit), each
 * with the tiny model of fuzz_common.h written by ts_safetensors_save: cfg/
 * as model.safetensors, idx/ as the one shard model-00001-of-00001.safetensors.
 * Byte 0 of an input chooses: even, the rest is cfg/config.json; odd, the
 * rest is idx/model.safetensors.index.json. ts_safetensors_read_config of
 * that directory then reads it (from a base of 1 head, top_k 1, moe_every 1,
 * as fuzz_safetensors). Seeds (fuzz_seeds hf): transformers' config.json of
 * the tiny model, ones with a refused value, and the index of its tensors.
 *
 * Oracles: the sanitizers; a shape that reads is the file's (layers 1,
 * d_model 8, vocab 16, context 4) with heads >= 1; a failure's message names
 * a file of the directory.
 */
#include <sys/stat.h>

#include "fuzz_common.h"
#include "state.h"

static char fuzz_dir[256], fuzz_cfg[300], fuzz_idx[300];

static void fuzz_hf_cleanup(void) {
    static const char *const files[] = {"cfg/config.json", "cfg/model.safetensors",
                                        "idx/model.safetensors.index.json",
                                        "idx/model-00001-of-00001.safetensors"};
    char p[512];
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(p, sizeof p, "%s/%s", fuzz_dir, files[i]);
        unlink(p);
    }
    rmdir(fuzz_cfg);
    rmdir(fuzz_idx);
    rmdir(fuzz_dir);
}

static void fuzz_hf_setup(void) {
    const char *t = getenv("TMPDIR");
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/tessera-fuzz-hf.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(fuzz_dir)) abort();
    snprintf(fuzz_cfg, sizeof fuzz_cfg, "%s/cfg", fuzz_dir);
    snprintf(fuzz_idx, sizeof fuzz_idx, "%s/idx", fuzz_dir);
    if (mkdir(fuzz_cfg, 0700) != 0 || mkdir(fuzz_idx, 0700) != 0) abort();
    atexit(fuzz_hf_cleanup);
    ts_model *m = NULL;
    float *full = NULL;
    if (!fuzz_model_keep(&fuzz_tiny_model, NULL, &m, &full)) abort();
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", fuzz_cfg);
    if (ts_safetensors_save(p, m, full, 0) != TS_OK) abort();
    snprintf(p, sizeof p, "%s/model-00001-of-00001.safetensors", fuzz_idx);
    if (ts_safetensors_save(p, m, full, 0) != TS_OK) abort();
    ts_model_destroy(m);
    free(full);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!fuzz_dir[0]) fuzz_hf_setup();
    if (size == 0) return 0;
    const char *dir = data[0] & 1 ? fuzz_idx : fuzz_cfg;
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir,
             data[0] & 1 ? "model.safetensors.index.json" : "config.json");
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data + 1, 1, size - 1, f) != size - 1 || fclose(f) != 0) abort();
    ts_model_config c = {.heads = 1, .moe_every = 1, .top_k = 1};
    if (ts_safetensors_read_config(dir, &c) != TS_OK) {
        if (!strstr(ts_last_error(), fuzz_dir)) {
            fprintf(stderr, "fuzz_hf: an error without the directory's name: %s\n",
                    ts_last_error());
            abort();
        }
        return 0;
    }
    const ts_model_config *w = &fuzz_tiny_model;
    if (c.layers != w->layers || c.d_model != w->d_model || c.vocab != w->vocab ||
        c.context != w->context || c.heads < 1) {
        fprintf(stderr, "fuzz_hf: read layers %d d_model %d vocab %d context %d heads %d\n",
                c.layers, c.d_model, c.vocab, c.context, c.heads);
        abort();
    }
    return 0;
}
