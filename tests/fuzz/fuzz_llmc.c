/*
 * fuzz_llmc.c — libFuzzer target: llm.c GPT-2 checkpoints (core/train/llmc.c,
 * `[model] init = llmc:PATH`).
 *
 * Each input is an llm.c checkpoint (256 int32 header: magic 20240326,
 * version 3 = f32 or 5 = bf16, maxT, V, L, NH, C, Vp; then the parameters)
 * or tessera's raw weights (magic 20260601, version 1, the same shape, then
 * experts, moe_every, expert_hidden, top_k; the parameters in f32).
 * ts_llmc_read_config reads its shape; when the shape is small (the limits
 * below, checked before anything is allocated: this is a fuzzer, not a
 * memory test) and ts_model_config_check accepts it, a CPU model of that
 * shape is built and ts_llmc_load reads the weights into its unsharded flat
 * layout. The last model is kept while the shape repeats.
 *
 * Oracles: the sanitizers; a shape that reads is one the header holds
 * (all fields > 0).
 */
#include "fuzz_common.h"
#include "state.h"

/* The largest shape the target builds (~30k parameters). */
#define FUZZ_MAX_LAYERS 2
#define FUZZ_MAX_C 32
#define FUZZ_MAX_V 64
#define FUZZ_MAX_T 16
#define FUZZ_MAX_EXPERTS 4

static ts_model *fuzz_model;
static float *fuzz_full;

static int fuzz_small(const ts_model_config *c) {
    return c->layers <= FUZZ_MAX_LAYERS && c->d_model <= FUZZ_MAX_C && c->heads <= FUZZ_MAX_C &&
           c->vocab <= FUZZ_MAX_V && c->padded_vocab <= FUZZ_MAX_V && c->context <= FUZZ_MAX_T &&
           c->experts <= FUZZ_MAX_EXPERTS && c->expert_hidden <= FUZZ_MAX_C * 2;
}

static int fuzz_same_shape(const ts_model_config *a, const ts_model_config *b) {
    return a->layers == b->layers && a->d_model == b->d_model && a->heads == b->heads &&
           a->vocab == b->vocab && a->padded_vocab == b->padded_vocab && a->context == b->context &&
           a->experts == b->experts && a->moe_every == b->moe_every &&
           a->expert_hidden == b->expert_hidden && a->top_k == b->top_k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file_write(data, size);
    ts_model_config c;
    memset(&c, 0, sizeof c);
    c.moe_every = 1;
    if (ts_llmc_read_config(path, &c) != TS_OK) return 0;
    if (c.layers <= 0 || c.d_model <= 0 || c.heads <= 0 || c.vocab <= 0 || c.padded_vocab <= 0 ||
        c.context <= 0) {
        fprintf(stderr, "fuzz_llmc: a shape with a field <= 0 was read\n");
        abort();
    }
    if (!fuzz_small(&c) || ts_model_config_check(&c) != TS_OK) return 0;
    if (!fuzz_model_keep(&c, fuzz_same_shape, &fuzz_model, &fuzz_full)) return 0;
    (void)ts_llmc_load(path, fuzz_model, fuzz_full);
    return 0;
}
