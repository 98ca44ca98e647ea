/*
 * llmc.c — reading and writing llm.c GPT-2 checkpoints (docs/formats.md).
 *
 * Layout: 256 int32 header {20240326, version, maxT, V, L, NH, C, Vp, 0...},
 * then every parameter in llm.c's order, each as one array over all layers:
 * wte (Vp,C) wpe (maxT,C) ln1w (L,C) ln1b (L,C) qkvw (L,3C,C) qkvb (L,3C)
 * attprojw (L,C,C) attprojb (L,C) ln2w (L,C) ln2b (L,C) fcw (L,4C,C)
 * fcb (L,4C) fcprojw (L,C,4C) fcprojb (L,C) lnfw (C) lnfb (C).
 * Version 3 stores f32, version 5 bf16. Our per-layer tensors have the same
 * shapes as llm.c's slices, so the mapping is by name only.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cpu_kernels.h"
#include "file.h" /* ts_file_open_read */
#include "state.h"

#define LLMC_MAGIC 20240326
#define LLMC_HEADER_INTS 256
/* tessera's raw weights (a mixture of experts, which llm.c cannot hold). */
#define TS_RAW_MAGIC 20260601

/* llm.c's parameter groups, and our per-layer name pattern for each. */
static const char *llmc_groups[16] = {"wte",
                                      "wpe",
                                      "h.%d.ln1.weight",
                                      "h.%d.ln1.bias",
                                      "h.%d.attn.qkv.weight",
                                      "h.%d.attn.qkv.bias",
                                      "h.%d.attn.proj.weight",
                                      "h.%d.attn.proj.bias",
                                      "h.%d.ln2.weight",
                                      "h.%d.ln2.bias",
                                      "h.%d.mlp.fc.weight",
                                      "h.%d.mlp.fc.bias",
                                      "h.%d.mlp.proj.weight",
                                      "h.%d.mlp.proj.bias",
                                      "lnf.weight",
                                      "lnf.bias"};

static int llmc_per_layer(int g) {
    return g >= 2 && g <= 13;
}

/* A parameter of the unsharded model: where it sits in the global flat
 * layout (whichever ranks hold it). */
typedef struct llmc_param {
    const char *name;
    size_t offset, numel;
} llmc_param;

/* Calls fn for each parameter of the unsharded model in llm.c's file order. */
static ts_status llmc_each(const ts_model *m, ts_status (*fn)(const llmc_param *p, void *arg),
                           void *arg) {
    int n = ts_model_param_table(&m->cfg, NULL, NULL, NULL);
    char(*names)[TS_NAME_MAX] = malloc((size_t)n * sizeof *names);
    int64_t(*shapes)[3] = malloc((size_t)n * sizeof *shapes);
    size_t *offs = malloc((size_t)n * sizeof *offs);
    ts_status st = TS_OK;
    if (!names || !shapes || !offs || ts_model_param_table(&m->cfg, names, shapes, NULL) != n)
        st = ts_error(TS_ERR_NOMEM, "llm.c checkpoint: out of memory");
    size_t off = 0;
    for (int i = 0; i < n && !st; i++) {
        offs[i] = off;
        off += (size_t)(shapes[i][0] * shapes[i][1] * shapes[i][2]);
    }
    for (int g = 0; g < 16 && !st; g++) {
        int reps = llmc_per_layer(g) ? m->cfg.layers : 1;
        for (int l = 0; l < reps && !st; l++) {
            char name[TS_NAME_MAX];
            snprintf(name, sizeof name, llmc_groups[g], l);
            int k = 0;
            while (k < n && strcmp(names[k], name) != 0)
                k++;
            TS_ASSERT(k < n);
            llmc_param p = {names[k], offs[k],
                            (size_t)(shapes[k][0] * shapes[k][1] * shapes[k][2])};
            st = fn(&p, arg);
        }
    }
    free(names);
    free(shapes);
    free(offs);
    return st;
}

static ts_status llmc_header(const char *path, int32_t *h, FILE **fout) {
    FILE *f;
    TS_TRY(ts_file_open_read(path, "llm.c checkpoint", &f));
    if (fread(h, sizeof(int32_t), LLMC_HEADER_INTS, f) != LLMC_HEADER_INTS) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT, "llm.c checkpoint %s: shorter than its 1024-byte header",
                        path);
    }
    if (h[0] != LLMC_MAGIC && h[0] != TS_RAW_MAGIC) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT,
                        "llm.c checkpoint %s: wrong magic %d (expected %d, or %d for tessera's raw "
                        "weights)",
                        path, h[0], LLMC_MAGIC, TS_RAW_MAGIC);
    }
    if (h[0] == TS_RAW_MAGIC && h[1] != 1) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT, "raw weights %s: version %d (readable: 1)", path, h[1]);
    }
    /* Raw weights' mixture of experts: experts, moe_every, expert_hidden,
     * top_k (experts 0: none, the other three then unused). */
    if (h[0] == TS_RAW_MAGIC &&
        (h[8] < 0 || h[8] > 65536 ||
         (h[8] > 0 && (h[9] < 1 || h[10] < 1 || h[11] < 1 || h[11] > h[8])))) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT,
                        "raw weights %s: header experts=%d moe_every=%d expert_hidden=%d top_k=%d "
                        "is not a mixture of experts (a corrupt file?)",
                        path, h[8], h[9], h[10], h[11]);
    }
    if (h[0] == LLMC_MAGIC && h[1] != 3 && h[1] != 5) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT,
                        "llm.c checkpoint %s: version %d (readable: 3 = f32, 5 = bf16)", path,
                        h[1]);
    }
    /* The shape, checked here so that a bad header is blamed on the file. */
    static const char *names[8] = {"", "", "maxT", "V", "L", "NH", "C", "Vp"};
    for (int i = 2; i <= 7; i++)
        if (h[i] <= 0) {
            fclose(f);
            return ts_error(TS_ERR_FORMAT, "llm.c checkpoint %s: header %s = %d is not positive",
                            path, names[i], h[i]);
        }
    const char *bad = h[4] > TS_MODEL_MAX_MODULES - 2 ? "L (layers) exceeds 1024"
                      : h[3] < 2 || h[3] > 65536      ? "V (vocab) is outside [2, 65536]"
                      : h[6] % h[5] != 0              ? "NH (heads) does not divide C (d_model)"
                      : h[7] < h[3]                   ? "Vp (padded vocab) is below V"
                      : h[6] > INT32_MAX / 4          ? "C (d_model) is too large"
                                                      : NULL;
    if (bad) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT,
                        "llm.c checkpoint %s: header maxT=%d V=%d L=%d NH=%d C=%d Vp=%d: %s "
                        "(a corrupt file?)",
                        path, h[2], h[3], h[4], h[5], h[6], h[7], bad);
    }
    if (fout)
        *fout = f;
    else
        fclose(f);
    return TS_OK;
}

/* The bytes a file of shape c takes (header and parameters, esz bytes
 * each); 0 when the count does not fit 64 bits. */
static uint64_t llmc_file_bytes(const ts_model_config *c, uint64_t esz) {
    int n = ts_model_param_table(c, NULL, NULL, NULL);
    int64_t(*shapes)[3] = malloc((size_t)n * sizeof *shapes);
    uint64_t total = LLMC_HEADER_INTS * 4, numel;
    int ok = shapes && ts_model_param_table(c, NULL, shapes, NULL) == n;
    for (int i = 0; ok && i < n; i++)
        ok = !__builtin_mul_overflow((uint64_t)shapes[i][0], (uint64_t)shapes[i][1], &numel) &&
             !__builtin_mul_overflow(numel, (uint64_t)shapes[i][2], &numel) &&
             !__builtin_mul_overflow(numel, esz, &numel) &&
             !__builtin_add_overflow(total, numel, &total);
    free(shapes);
    return ok ? total : 0;
}

ts_status ts_llmc_read_config(const char *path, ts_model_config *cfg) {
    int32_t h[LLMC_HEADER_INTS];
    FILE *f = NULL;
    TS_TRY(llmc_header(path, h, &f));
    ts_model_config c = *cfg;
    c.context = h[2];
    c.vocab = h[3];
    c.layers = h[4];
    c.heads = h[5];
    c.d_model = h[6];
    c.padded_vocab = h[7];
    c.experts = 0;
    if (h[0] == TS_RAW_MAGIC && h[8] > 0) {
        c.experts = h[8];
        c.moe_every = h[9];
        c.expert_hidden = h[10];
        c.top_k = h[11];
    }
    /* The file's size against the shape its header gives, before anything
     * is sized by that shape (65,536 experts in a file of 4 built a model
     * of them first). */
    struct stat sb;
    int statted = fstat(fileno(f), &sb) == 0;
    fclose(f);
    uint64_t want = llmc_file_bytes(&c, h[1] == 5 ? 2 : 4);
    if (statted && (want == 0 || (uint64_t)sb.st_size != want)) {
        char need[32] = "more than 2^64", moe[96] = "";
        if (want) snprintf(need, sizeof need, "%llu", (unsigned long long)want);
        if (c.experts)
            snprintf(moe, sizeof moe, " experts=%d moe_every=%d expert_hidden=%d", c.experts,
                     c.moe_every, c.expert_hidden);
        return ts_error(TS_ERR_FORMAT,
                        "%s %s: %lld bytes, but its header's shape (maxT=%d V=%d L=%d NH=%d C=%d "
                        "Vp=%d%s) takes %s",
                        h[0] == TS_RAW_MAGIC ? "raw weights" : "llm.c checkpoint", path,
                        (long long)sb.st_size, h[2], h[3], h[4], h[5], h[6], h[7], moe, need);
    }
    *cfg = c;
    return TS_OK;
}

typedef struct llmc_reader {
    FILE *f;
    const char *path;
    int bf16;
    float *values; /* f32 destination indexed by global offset */
} llmc_reader;

static ts_status llmc_read_param(const llmc_param *p, void *arg) {
    llmc_reader *r = arg;
    size_t n = p->numel;
    float *dst = r->values + p->offset;
    if (!r->bf16) {
        if (fread(dst, sizeof(float), n, r->f) != n)
            return ts_error(TS_ERR_FORMAT, "llm.c checkpoint %s: truncated in %s", r->path,
                            p->name);
        return TS_OK;
    }
    uint16_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return ts_error(TS_ERR_NOMEM, "llm.c checkpoint: out of memory");
    size_t got = fread(tmp, sizeof *tmp, n, r->f);
    if (got == n) ts_cpu_bf16_to_f32(dst, tmp, n);
    free(tmp);
    if (got != n)
        return ts_error(TS_ERR_FORMAT, "llm.c checkpoint %s: truncated in %s", r->path, p->name);
    return TS_OK;
}

/* Every weight read is finite (a run from a NaN or an infinity would skip
 * every step): the first that is not named by its parameter and index. */
static ts_status llmc_check_finite(const char *what, const char *path, const ts_model *m,
                                   const float *full) {
    size_t i = 0;
    while (i < m->global_numel && isfinite(full[i]))
        i++;
    if (i == m->global_numel) return TS_OK;
    int n = ts_model_param_table_of(m, NULL, NULL, NULL);
    char(*names)[TS_NAME_MAX] = malloc((size_t)n * sizeof *names);
    int64_t(*shapes)[3] = malloc((size_t)n * sizeof *shapes);
    size_t off = 0, numel = 0;
    int k = n;
    if (names && shapes && ts_model_param_table_of(m, names, shapes, NULL) == n)
        for (k = 0; k < n; k++, off += numel)
            if (i < off + (numel = (size_t)(shapes[k][0] * shapes[k][1] * shapes[k][2]))) break;
    ts_status st = ts_error(TS_ERR_FORMAT,
                            "%s %s: %s holds a value that is not finite (%s at element %zu of its "
                            "%zu): tessera starts only from finite weights",
                            what, path, k < n ? names[k] : "the parameters",
                            isnan(full[i]) ? "nan"
                            : full[i] > 0  ? "inf"
                                           : "-inf",
                            k < n ? i - off : i, k < n ? numel : m->global_numel);
    free(names);
    free(shapes);
    return st;
}

ts_status ts_llmc_load(const char *path, const ts_model *m, float *full) {
    int32_t h[LLMC_HEADER_INTS];
    FILE *f = NULL;
    TS_TRY(llmc_header(path, h, &f));
    const ts_model_config *c = &m->cfg;
    int raw = h[0] == TS_RAW_MAGIC, experts = raw ? h[8] : 0;
    if (h[2] != c->context || h[3] != c->vocab || h[4] != c->layers || h[5] != c->heads ||
        h[6] != c->d_model || h[7] != c->padded_vocab || experts != c->experts ||
        (experts > 0 && (h[9] != c->moe_every || h[10] != c->expert_hidden))) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT,
                        "%s %s: shape maxT=%d V=%d L=%d NH=%d C=%d Vp=%d experts=%d differs from "
                        "the model",
                        raw ? "raw weights" : "llm.c checkpoint", path, h[2], h[3], h[4], h[5],
                        h[6], h[7], experts);
    }
    size_t esz = h[1] == 5 ? 2 : 4;
    struct stat sb;
    size_t want = LLMC_HEADER_INTS * 4 + m->global_numel * esz;
    if (fstat(fileno(f), &sb) == 0 && (size_t)sb.st_size != want) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT,
                        "llm.c checkpoint %s: %lld bytes, expected %zu for this shape", path,
                        (long long)sb.st_size, want);
    }
    llmc_reader r = {f, path, h[1] == 5, full};
    /* Raw weights are the flat layout itself, in the declared order. */
    llmc_param all = {"the parameters", 0, m->global_numel};
    ts_status s = raw ? llmc_read_param(&all, &r) : llmc_each(m, llmc_read_param, &r);
    fclose(f);
    return s ? s : llmc_check_finite(raw ? "raw weights" : "llm.c checkpoint", path, m, full);
}

typedef struct llmc_writer {
    float *out; /* the file's parameter area, in file order */
    size_t pos;
    const float *src; /* f32 values indexed by global offset        */
} llmc_writer;

static ts_status llmc_write_param(const llmc_param *p, void *arg) {
    llmc_writer *w = arg;
    size_t n = p->numel;
    memcpy(w->out + w->pos, w->src + p->offset, n * sizeof(float));
    w->pos += n;
    return TS_OK;
}

/* llm.c's GPT-2 has no mixture of experts: such a model is written as
 * tessera's raw weights instead, the same 256-int header (magic
 * TS_RAW_MAGIC, version 1, the shape, then experts, moe_every,
 * expert_hidden, top_k) and every parameter in f32, in the order the
 * architecture declares them. */
static ts_status raw_save(const char *path, const ts_model *m, const float *full) {
    int32_t h[LLMC_HEADER_INTS];
    memset(h, 0, sizeof h);
    const ts_model_config *c = &m->cfg;
    int32_t head[] = {TS_RAW_MAGIC,     1,          c->context,      c->vocab,   c->layers,
                      c->heads,         c->d_model, c->padded_vocab, c->experts, c->moe_every,
                      c->expert_hidden, c->top_k};
    memcpy(h, head, sizeof head);
    const void *bufs[2] = {h, full};
    size_t sizes[2] = {sizeof h, m->global_numel * sizeof(float)};
    return ts_write_atomic(path, 2, bufs, sizes);
}

ts_status ts_llmc_save(const char *path, const ts_model *m, const float *full, int bf16) {
    if (m->cfg.experts > 0 && bf16)
        return ts_error(TS_ERR_CONFIG,
                        "%s: raw weights of a mixture of experts are f32 only; bf16 is written "
                        "as safetensors (--format safetensors)",
                        path);
    if (m->cfg.experts > 0) return raw_save(path, m, full);
    int32_t h[LLMC_HEADER_INTS];
    memset(h, 0, sizeof h);
    h[0] = LLMC_MAGIC;
    h[1] = bf16 ? 5 : 3;
    h[2] = m->cfg.context;
    h[3] = m->cfg.vocab;
    h[4] = m->cfg.layers;
    h[5] = m->cfg.heads;
    h[6] = m->cfg.d_model;
    h[7] = m->cfg.padded_vocab;
    float *out = ts_mem_alloc(TS_MEM_OTHER, m->global_numel * sizeof(float));
    if (!out) return TS_ERR_NOMEM;
    llmc_writer w = {out, 0, full};
    ts_status s = llmc_each(m, llmc_write_param, &w);
    uint16_t *half = bf16 && !s ? ts_mem_alloc(TS_MEM_OTHER, m->global_numel * 2) : NULL;
    if (bf16 && !s && !half) s = TS_ERR_NOMEM;
    if (half) ts_cpu_f32_to_bf16(half, out, m->global_numel);
    if (!s) {
        const void *bufs[2] = {h, half ? (const void *)half : out};
        size_t sizes[2] = {sizeof h, m->global_numel * (bf16 ? 2 : sizeof(float))};
        s = ts_write_atomic(path, 2, bufs, sizes);
    }
    ts_mem_free(half);
    ts_mem_free(out);
    return s;
}
