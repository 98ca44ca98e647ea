/*
 * fuzz_safetensors.c — libFuzzer target: safetensors files of GPT-2 models,
 * dense or with mixture-of-experts blocks (core/train/safetensors.c,
 * `[model] init = safetensors:PATH`).
 *
 * Each input is a safetensors file (8-byte header length, JSON header of
 * tensors and __metadata__, data). ts_safetensors_read_config reads its
 * shape (from a base of 1 head, top_k 1, moe_every 1, no experts, what the
 * file does not say); when the shape is small (the limits below, checked
 * before anything is allocated: this is a fuzzer, not a memory test) and
 * ts_model_config_check accepts it, a CPU model of that shape is built and
 * ts_safetensors_load reads the weights into its unsharded flat layout —
 * the names h.L.mlp.router.weight and h.L.mlp.experts.K.* included, the
 * seeds (fuzz_seeds safetensors) being a dense and a mixture-of-experts
 * model in f32 and bf16. The last model is kept while the shape repeats.
 *
 * Oracles: the sanitizers; a shape that reads has layers, d_model, vocab
 * and context > 0, and with experts moe_every, expert_hidden and top_k >= 1;
 * a failed load leaves a message naming the file, and fails only for a
 * weight that is not finite (ts_safetensors_read_config checks that every
 * tensor of the shape it gives is there, of a dtype read and that shape,
 * before any model is built).
 */
#include "fuzz_common.h"
#include "state.h"

/* The largest shape the target builds (~60k parameters). */
#define FUZZ_MAX_LAYERS 3
#define FUZZ_MAX_C 32
#define FUZZ_MAX_V 64
#define FUZZ_MAX_T 16
#define FUZZ_MAX_EXPERTS 4
#define FUZZ_MAX_HIDDEN 64

static ts_model *fuzz_model;
static float *fuzz_full;

static int fuzz_small(const ts_model_config *c) {
    return c->layers <= FUZZ_MAX_LAYERS && c->d_model <= FUZZ_MAX_C && c->heads <= FUZZ_MAX_C &&
           c->vocab <= FUZZ_MAX_V && c->context <= FUZZ_MAX_T && c->experts <= FUZZ_MAX_EXPERTS &&
           c->expert_hidden <= FUZZ_MAX_HIDDEN && c->moe_every <= FUZZ_MAX_LAYERS + 1;
}

static int fuzz_same_config(const ts_model_config *a, const ts_model_config *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file_write(data, size);
    ts_model_config c = {.heads = 1, .moe_every = 1, .top_k = 1};
    if (ts_safetensors_read_config(path, &c) != TS_OK) return 0;
    if (c.layers <= 0 || c.d_model <= 0 || c.vocab <= 0 || c.context <= 0 ||
        (c.experts > 0 && (c.moe_every < 1 || c.expert_hidden < 1 || c.top_k < 1))) {
        fprintf(stderr, "fuzz_safetensors: a shape with a field <= 0 was read\n");
        abort();
    }
    c.padded_vocab = c.vocab;
    if (!fuzz_small(&c) || ts_model_config_check(&c) != TS_OK) return 0;
    if (!fuzz_model_keep(&c, fuzz_same_config, &fuzz_model, &fuzz_full)) return 0;
    if (ts_safetensors_load(path, fuzz_model, fuzz_full) == TS_OK) return 0;
    if (!strstr(ts_last_error(), path)) {
        fprintf(stderr, "fuzz_safetensors: an error without the file's name: %s\n",
                ts_last_error());
        abort();
    }
    /* read_config checked every tensor the model reads (there, its dtype
     * and shape) before the model was built: only the values can fail. */
    if (!strstr(ts_last_error(), "not finite")) {
        fprintf(stderr, "fuzz_safetensors: a shape that read did not load: %s\n", ts_last_error());
        abort();
    }
    return 0;
}
