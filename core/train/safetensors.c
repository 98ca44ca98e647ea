/*
 * safetensors.c — the GPT-2 weights, dense or with mixture-of-experts MLPs,
 * as a Hugging Face safetensors file (docs/formats.md): `tessera export
 * --format safetensors` writes one, `[model] init = safetensors:PATH` starts
 * from one.
 *
 * The file: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {...}}, padded with spaces to a multiple of 8), then the
 * data, offsets counted from its start. Names and shapes are transformers'
 * GPT2Model's: its Conv1D layers store their weights as [in, out], the
 * transpose of ours (out, in), so c_attn.weight is [C, 3C]; wte has the V
 * real rows (our Vp - V padding rows are written nowhere, read as zeros).
 * A mixture-of-experts block has, in place of the dense MLP, DESIGN.md's
 * h.L.mlp.router.weight [C, E] and for each expert K h.L.mlp.experts.K.
 * c_fc.weight [C, F], .c_fc.bias [F], .c_proj.weight [F, C], .c_proj.bias
 * [C]: our (E, F, C) tensor is E of them, each a contiguous slab. The
 * metadata holds the shape keys as [model] names them (strings, as the
 * format asks). Written in f32 or bf16; read from F32, BF16 or F16.
 *
 * Read also as transformers' save_pretrained writes a GPT-2: names with
 * the "transformer." prefix, a directory or a sharded checkpoint's index,
 * config.json beside the weights (its shape keys must agree; what the model
 * does not compute is refused naming the key), lm_head.weight only as wte's
 * copy. No shape is guessed: what the files do not say they leave to the
 * caller (the trainer refuses a head count nobody gives).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>

#include "cpu_kernels.h"
#include "file.h"
#include "state.h"

/* Our name (after "h.L." for a block's) and transformers', whether the
 * weight is stored transposed, and whether our tensor holds every expert
 * (dimension 0), written as one tensor each ("%d" in the name: K). */
typedef struct st_map {
    const char *ours, *hf;
    int transpose, experts;
} st_map;

static const st_map st_names[] = {
    {"wte", "wte.weight", 0, 0},
    {"wpe", "wpe.weight", 0, 0},
    {"lnf.weight", "ln_f.weight", 0, 0},
    {"lnf.bias", "ln_f.bias", 0, 0},
    {"ln1.weight", "ln_1.weight", 0, 0},
    {"ln1.bias", "ln_1.bias", 0, 0},
    {"attn.qkv.weight", "attn.c_attn.weight", 1, 0},
    {"attn.qkv.bias", "attn.c_attn.bias", 0, 0},
    {"attn.proj.weight", "attn.c_proj.weight", 1, 0},
    {"attn.proj.bias", "attn.c_proj.bias", 0, 0},
    {"ln2.weight", "ln_2.weight", 0, 0},
    {"ln2.bias", "ln_2.bias", 0, 0},
    {"mlp.fc.weight", "mlp.c_fc.weight", 1, 0},
    {"mlp.fc.bias", "mlp.c_fc.bias", 0, 0},
    {"mlp.proj.weight", "mlp.c_proj.weight", 1, 0},
    {"mlp.proj.bias", "mlp.c_proj.bias", 0, 0},
    {"moe.router.weight", "mlp.router.weight", 1, 0},
    {"moe.experts.fc.weight", "mlp.experts.%d.c_fc.weight", 1, 1},
    {"moe.experts.fc.bias", "mlp.experts.%d.c_fc.bias", 0, 1},
    {"moe.experts.proj.weight", "mlp.experts.%d.c_proj.weight", 1, 1},
    {"moe.experts.proj.bias", "mlp.experts.%d.c_proj.bias", 0, 1},
};
#define ST_NMAP (sizeof st_names / sizeof st_names[0])
#define ST_MAX_HEADER (64u << 20)
#define ST_FIRST_BLOCK_NAME 4 /* st_names[4..]: a block's, after "h.L." */

/* The shape keys the metadata holds, as [model] names them. */
enum {
    ST_KEY_LAYERS,
    ST_KEY_D_MODEL,
    ST_KEY_HEADS,
    ST_KEY_VOCAB,
    ST_KEY_CONTEXT,
    ST_KEY_EXPERTS,
    ST_KEY_MOE_EVERY,
    ST_KEY_EXPERT_HIDDEN,
    ST_KEY_TOP_K,
    ST_NKEYS
};
static const char *const st_keys[ST_NKEYS] = {"layers",    "d_model",       "heads",
                                              "vocab",     "context",       "experts",
                                              "moe_every", "expert_hidden", "top_k"};

static int *st_key_field(ts_model_config *c, int k) {
    int *f[ST_NKEYS] = {&c->layers,  &c->d_model,   &c->heads,         &c->vocab, &c->context,
                        &c->experts, &c->moe_every, &c->expert_hidden, &c->top_k};
    return f[k];
}

/* One tensor of the file as the model sees it: where it lives in the
 * unsharded flat layout, its rows and columns as ours (out, in), the rows
 * the file holds (wte: V of Vp). */
typedef struct st_tensor {
    char hf[TS_NAME_MAX];
    size_t offset; /* in the model's flat layout */
    int64_t rows, cols, file_rows;
    int transpose, matrix; /* matrix: 2-D in the file, even with one column */
} st_tensor;

/* Our name `name` in st_names (its block in *layer, -1 for none); NULL when
 * the file format has no place for it. */
static const st_map *st_lookup(const char *name, int *layer) {
    int l = -1, n = 0;
    const char *rest = name;
    if (sscanf(name, "h.%d.%n", &l, &n) == 1 && n > 0) rest = name + n;
    *layer = l;
    for (size_t g = l < 0 ? 0 : ST_FIRST_BLOCK_NAME; g < (l < 0 ? ST_FIRST_BLOCK_NAME : ST_NMAP);
         g++)
        if (strcmp(st_names[g].ours, rest) == 0) return &st_names[g];
    return NULL;
}

/* Calls fn for every tensor of a model of shape c in file order, the
 * model's declared order with each experts' tensor as E, until fn fails:
 * nothing is allocated per tensor, so a shape read from a file is checked
 * against its tensors in time bounded by theirs. The element counts are
 * checked in 64 bits (the error names `path`). */
static ts_status st_each(const ts_model_config *c, const char *path,
                         ts_status (*fn)(const st_tensor *t, void *arg), void *arg) {
    int np = ts_model_param_table(c, NULL, NULL, NULL);
    char(*names)[TS_NAME_MAX] = malloc((size_t)np * sizeof *names);
    int64_t(*shapes)[3] = malloc((size_t)np * sizeof *shapes);
    if (!names || !shapes || ts_model_param_table(c, names, shapes, NULL) != np) {
        free(names), free(shapes);
        return ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    }
    ts_status st = TS_OK;
    int64_t off = 0, numel = 0;
    for (int i = 0; !st && i < np; i++, off += numel) {
        int layer;
        const st_map *s = st_lookup(names[i], &layer);
        TS_ASSERT(s != NULL); /* every parameter of the architectures has a name here */
        if (__builtin_mul_overflow(shapes[i][0], shapes[i][1], &numel) ||
            __builtin_mul_overflow(numel, shapes[i][2], &numel) ||
            __builtin_add_overflow(off, numel, &(int64_t){0})) {
            st = ts_error(TS_ERR_FORMAT,
                          "safetensors %s: the model's %s (%lld x %lld x %lld) and the parameters "
                          "before it do not fit 64 bits",
                          path, names[i], (long long)shapes[i][0], (long long)shapes[i][1],
                          (long long)shapes[i][2]);
            break;
        }
        int64_t copies = s->experts ? shapes[i][0] : 1, each = copies ? numel / copies : 0;
        /* Matrices (wte, wpe and the products' weights) by their last
         * dimension: (3, C, C) is (3C, C), an expert's (F, C) is (F, C);
         * everything else a vector: (3, C) is 3C. */
        int matrix = s->transpose || strcmp(s->ours, "wte") == 0 || strcmp(s->ours, "wpe") == 0;
        int64_t last = shapes[i][2] > 1 ? shapes[i][2] : shapes[i][1];
        for (int64_t e = 0; !st && e < copies; e++) {
            st_tensor t;
            char hf[40]; /* the longest: mlp.experts.65535.c_proj.weight */
            snprintf(hf, sizeof hf, s->hf, (int)e);
            if (layer >= 0)
                snprintf(t.hf, sizeof t.hf, "h.%d.%s", layer, hf);
            else
                snprintf(t.hf, sizeof t.hf, "%s", hf);
            t.offset = (size_t)(off + e * each);
            t.cols = matrix && last > 0 ? last : 1;
            t.rows = each / t.cols;
            t.file_rows = layer < 0 && strcmp(s->ours, "wte") == 0 ? c->vocab : t.rows;
            t.transpose = s->transpose;
            t.matrix = matrix;
            st = fn(&t, arg);
        }
    }
    free(names), free(shapes);
    return st;
}

typedef struct st_list {
    st_tensor *t;
    size_t n, cap;
} st_list;

static ts_status st_collect(const st_tensor *t, void *arg) {
    st_list *l = arg;
    TS_ASSERT(l->n < l->cap); /* only the experts' tensors are more than one, E each */
    l->t[l->n++] = *t;
    return TS_OK;
}

/* Every tensor of the model in file order (st_each; count in *n; NULL and
 * the error on failure). */
static st_tensor *st_tensors(const ts_model *m, int *n) {
    int np = ts_model_param_table(&m->cfg, NULL, NULL, NULL);
    st_list l = {NULL, 0, (size_t)np * (size_t)(m->cfg.experts > 1 ? m->cfg.experts : 1)};
    if (!(l.t = malloc(l.cap * sizeof *l.t))) {
        ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
        return NULL;
    }
    if (st_each(&m->cfg, "(the model)", st_collect, &l)) {
        free(l.t);
        return NULL;
    }
    *n = (int)l.n;
    return l.t;
}

/* The file's shape of a tensor: [rows, cols] or, stored transposed,
 * [cols, rows]; a vector [rows] when it is not a matrix. */
static int st_shape(const st_tensor *t, int64_t *shape) {
    if (!t->matrix) {
        shape[0] = t->file_rows;
        return 1;
    }
    shape[0] = t->transpose ? t->cols : t->file_rows;
    shape[1] = t->transpose ? t->file_rows : t->cols;
    return 2;
}

static void st_shape_text(const int64_t *shape, int nd, char *out, size_t cap) {
    if (nd == 2)
        snprintf(out, cap, "%lld,%lld", (long long)shape[0], (long long)shape[1]);
    else
        snprintf(out, cap, "%lld", (long long)shape[0]);
}

ts_status ts_safetensors_save(const char *path, const ts_model *m, const float *full, int bf16) {
    int n = 0;
    st_tensor *t = st_tensors(m, &n);
    if (!t) return TS_ERR_NOMEM;
    size_t es = bf16 ? 2 : 4, data = 0, cap = 1024 + (size_t)n * (TS_NAME_MAX + 96), len = 0;
    for (int i = 0; i < n; i++)
        data += (size_t)(t[i].file_rows * t[i].cols);
    char *hdr = malloc(cap);
    float *out = ts_mem_alloc(TS_MEM_OTHER, (data ? data : 1) * sizeof(float));
    ts_status st = hdr && out ? TS_OK : ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    if (!st) {
        /* The shape keys; a dense model's stop at context. */
        ts_model_config c = m->cfg;
        len += (size_t)snprintf(hdr, cap, "{\"__metadata__\":{\"format\":\"pt\"");
        for (int k = 0; k < (c.experts > 0 ? ST_NKEYS : ST_KEY_EXPERTS); k++)
            len += (size_t)snprintf(hdr + len, cap - len, ",\"%s\":\"%d\"", st_keys[k],
                                    *st_key_field(&c, k));
        len += (size_t)snprintf(hdr + len, cap - len, "}");
    }
    size_t pos = 0;
    for (int i = 0; !st && i < n; i++) {
        const st_tensor *x = &t[i];
        int64_t shape[2];
        char dims[64];
        st_shape_text(shape, st_shape(x, shape), dims, sizeof dims);
        size_t count = (size_t)(x->file_rows * x->cols);
        len += (size_t)snprintf(hdr + len, cap - len,
                                ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],"
                                "\"data_offsets\":[%zu,%zu]}",
                                x->hf, bf16 ? "BF16" : "F32", dims, pos * es, (pos + count) * es);
        const float *src = full + x->offset;
        for (int64_t r = 0; r < x->file_rows; r++)
            for (int64_t c = 0; c < x->cols; c++)
                out[pos + (x->transpose ? (size_t)(c * x->file_rows + r)
                                        : (size_t)(r * x->cols + c))] = src[r * x->cols + c];
        pos += count;
    }
    if (!st) {
        /* bf16: rounded to nearest even (a bf16 run's parameters are its
         * master weights rounded so: the file holds them exactly). */
        uint16_t *half = bf16 ? ts_mem_alloc(TS_MEM_OTHER, (data ? data : 1) * 2) : NULL;
        if (bf16 && !half) st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
        if (half) ts_cpu_f32_to_bf16(half, out, data);
        len += (size_t)snprintf(hdr + len, cap - len, "}");
        while (len % 8)
            hdr[len++] = ' ';
        uint64_t n8 = len;
        unsigned char lenb[8];
        for (int b = 0; b < 8; b++)
            lenb[b] = (unsigned char)(n8 >> (8 * b));
        const void *bufs[3] = {lenb, hdr, half ? (const void *)half : out};
        size_t sizes[3] = {8, len, data * es};
        if (!st) st = ts_write_atomic(path, 3, bufs, sizes);
        ts_mem_free(half);
    }
    free(hdr);
    ts_mem_free(out);
    free(t);
    return st;
}

/* ---------------------------------------------------------------------------
 * Reading: the header's JSON, as safetensors writes it (an object of objects
 * with strings, integers and arrays of integers)
 * ------------------------------------------------------------------------- */

typedef struct st_entry {
    char name[TS_NAME_MAX];
    char dtype[8];
    int ndim;
    int64_t shape[4];
    uint64_t begin, end;
    int prefixed; /* the file spells it "transformer." + name (st_files_open) */
} st_entry;

/* The header: its tensors sorted by name, the shape keys the metadata
 * holds (-1 where it holds none), where the data starts and its size. */
typedef struct st_header {
    const char *path;
    st_entry *e;
    int n;
    int key[ST_NKEYS];
    FILE *f;
    uint64_t data_start, data_size;
} st_header;

typedef struct st_json {
    const char *base, *p, *end, *path;
    int doc; /* 1: a JSON file of its own (config.json, the index); 0: a header */
} st_json;

static ts_status st_bad(const st_json *j, const char *what) {
    return ts_error(TS_ERR_FORMAT,
                    j->doc ? "safetensors %s: at byte %lld: %s"
                           : "safetensors %s: header JSON, at byte %lld of it: %s",
                    j->path, (long long)(j->p - j->base), what);
}

static void st_ws(st_json *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\t' || *j->p == '\r'))
        j->p++;
}

static int st_eat(st_json *j, char c) {
    st_ws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return 1;
    }
    return 0;
}

/* The 4 hex digits of a \u escape (j->p at the first). */
static ts_status st_hex4(st_json *j, uint32_t *cp) {
    *cp = 0;
    for (int i = 0; i < 4; i++, j->p++) {
        char c = j->p < j->end ? *j->p : '\0';
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return st_bad(j, "a \\u escape without 4 hex digits");
        *cp = *cp << 4 | (uint32_t)d;
    }
    return TS_OK;
}

/* A JSON string, its escapes decoded (a \u escape of four hex digits as
 * UTF-8, a surrogate pair joined), into out (cap bytes with the NUL), or only checked when out is
 * NULL; its length in *len when len is not NULL. Refused: a NUL (raw or
 * \u0000: C strings would end there), another control character, an
 * unknown escape, and with out a string of cap bytes or more. */
static ts_status st_string_len(st_json *j, char *out, size_t cap, size_t *len) {
    if (!st_eat(j, '"')) return st_bad(j, "a string expected");
    size_t n = 0;
    for (;;) {
        if (j->p >= j->end) return st_bad(j, "an unterminated string");
        const char *at = j->p;
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') break;
        if (c == '\0') return st_bad(j, "a NUL byte inside a string");
        if (c < 0x20) return st_bad(j, "a control character inside a string (escape it)");
        char u[4] = {(char)c};
        size_t k = 1;
        j->p++;
        if (c >= 0x80) { /* UTF-8, as the format's header is: no overlong or surrogate form */
            k = c < 0xc2 ? 0 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : c < 0xf5 ? 4 : 0;
            unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80;
            unsigned hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
            int ok = k && j->end - at >= (ptrdiff_t)k && (unsigned char)at[1] >= lo &&
                     (unsigned char)at[1] <= hi;
            for (size_t b = 2; ok && b < k; b++)
                ok = ((unsigned char)at[b] & 0xc0) == 0x80;
            if (!ok) {
                j->p = at;
                return st_bad(j, "a string that is not UTF-8");
            }
            memcpy(u, at, k);
            j->p = at + k;
        }
        if (c == '\\') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            char e = j->p < j->end ? *j->p++ : '\0';
            const char *x = e ? strchr(from, e) : NULL;
            uint32_t cp = 0, lo = 0;
            if (x) {
                u[0] = to[x - from];
            } else if (e != 'u') {
                j->p = at;
                return st_bad(j, "an escape that is not JSON's");
            } else {
                TS_TRY(st_hex4(j, &cp));
                if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 2 && j->p[0] == '\\' &&
                    j->p[1] == 'u') {
                    j->p += 2;
                    TS_TRY(st_hex4(j, &lo));
                }
                if (cp >= 0xd800 && cp < 0xdc00 && lo >= 0xdc00 && lo < 0xe000)
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                j->p = cp >= 0xd800 && cp < 0xe000 ? at : j->p;
                if (cp >= 0xd800 && cp < 0xe000) return st_bad(j, "a \\u surrogate not in a pair");
                if (cp == 0) {
                    j->p = at;
                    return st_bad(j, "a NUL (\\u0000) inside a string");
                }
                k = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
                static const unsigned char lead[5] = {0, 0, 0xc0, 0xe0, 0xf0};
                for (size_t b = k - 1; b > 0; b--, cp >>= 6)
                    u[b] = (char)(0x80 | (cp & 0x3f));
                u[0] = (char)(lead[k] | cp);
            }
        }
        if (out && n + k >= cap) {
            char what[64];
            snprintf(what, sizeof what, "a string longer than the %zu bytes read here", cap - 1);
            return st_bad(j, what);
        }
        if (out) memcpy(out + n, u, k);
        n += k;
    }
    j->p++;
    if (out) out[n] = '\0';
    if (len) *len = n;
    return TS_OK;
}

static ts_status st_string(st_json *j, char *out, size_t cap) {
    return st_string_len(j, out, cap, NULL);
}

/* A non-negative JSON integer (no sign, fraction, exponent or leading
 * zero) of at most 2^63 - 1. */
static ts_status st_int(st_json *j, int64_t *v) {
    st_ws(j);
    const char *s = j->p;
    uint64_t x = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        unsigned d = (unsigned)(*j->p++ - '0');
        if (x > ((uint64_t)INT64_MAX - d) / 10) {
            while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
                j->p++;
            char what[96];
            snprintf(what, sizeof what, "%.*s%s is more than 2^63 - 1",
                     (int)(j->p - s > 40 ? 40 : j->p - s), s, j->p - s > 40 ? "..." : "");
            j->p = s;
            return st_bad(j, what);
        }
        x = x * 10 + d;
    }
    int frac = j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E');
    if (j->p == s || frac || (j->p - s > 1 && *s == '0')) {
        j->p = s;
        return st_bad(j, "a non-negative integer expected");
    }
    *v = (int64_t)x;
    return TS_OK;
}

static ts_status st_ints(st_json *j, int64_t *v, int cap, int *n) {
    if (!st_eat(j, '[')) return st_bad(j, "an array expected");
    *n = 0;
    if (st_eat(j, ']')) return TS_OK;
    do {
        int64_t x = 0;
        TS_TRY(st_int(j, &x));
        if (*n == cap) return st_bad(j, "too many dimensions");
        v[(*n)++] = x;
    } while (st_eat(j, ','));
    return st_eat(j, ']') ? TS_OK : st_bad(j, "',' or ']' expected");
}

/* A key of __metadata__ as read (decoded) and where it starts. */
typedef struct st_key_at {
    char *key;
    const char *at;
} st_key_at;

static int st_key_cmp(const void *a, const void *b) {
    const st_key_at *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    return c ? c : x->at < y->at ? -1 : x->at > y->at;
}

/* No key of __metadata__ twice (JSON leaves it to the reader which one
 * wins): the keys sorted, the second of a pair named. */
static ts_status st_metadata_unique(st_json *j, st_key_at *keys, size_t n) {
    qsort(keys, n, sizeof *keys, st_key_cmp);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(keys[i - 1].key, keys[i].key) != 0) continue;
        char what[96];
        snprintf(what, sizeof what, "__metadata__ key %.48s%s appears twice", keys[i].key,
                 strlen(keys[i].key) > 48 ? "..." : "");
        j->p = keys[i].at;
        return st_bad(j, what);
    }
    return TS_OK;
}

/* __metadata__: an object of string values, no key twice; the shape keys
 * among them (decimal integers) into h->key. */
static ts_status st_metadata(st_json *j, st_header *h) {
    if (!st_eat(j, '{')) return st_bad(j, "an object expected");
    if (st_eat(j, '}')) return TS_OK;
    /* The keys decoded into one arena: a decoded key and its NUL take no
     * more bytes than it and its quotes do in the header. */
    size_t n = 0, cap = 0, used = 0;
    st_key_at *keys = NULL;
    char *arena = malloc((size_t)(j->end - j->p) + 1);
    if (!arena) return ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    ts_status st = TS_OK;
    do {
        st_ws(j);
        const char *at = j->p;
        size_t len = 0;
        if ((st = st_string_len(j, NULL, 0, &len))) break;
        if (n == cap) {
            st_key_at *g = realloc(keys, (cap = cap ? 2 * cap : 16) * sizeof *g);
            if (!g) {
                st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
                break;
            }
            keys = g;
        }
        keys[n].at = at;
        keys[n].key = arena + used;
        used += len + 1;
        j->p = at;
        n++;
        if ((st = st_string(j, keys[n - 1].key, len + 1))) break;
        const char *key = keys[n - 1].key;
        if (!st_eat(j, ':')) {
            st = st_bad(j, "':' expected");
            break;
        }
        int k = 0;
        while (k < ST_NKEYS && strcmp(key, st_keys[k]) != 0)
            k++;
        if (k == ST_NKEYS) { /* another key: any string */
            if ((st = st_string(j, NULL, 0))) break;
            continue;
        }
        char value[32] = "";
        st_ws(j);
        const char *vat = j->p;
        size_t vlen = 0;
        if ((st = st_string_len(j, NULL, 0, &vlen))) break;
        j->p = vat;
        if (vlen < sizeof value)
            st = st_string(j, value, sizeof value);
        else
            snprintf(value, sizeof value, "(%zu bytes)", vlen), st = st_string(j, NULL, 0);
        if (st) break;
        long v = 0, least = k == ST_KEY_EXPERTS ? 0 : 1;
        size_t d = 0;
        while (value[d] >= '0' && value[d] <= '9' && v <= 1 << 30)
            v = v * 10 + (value[d++] - '0');
        if (d == 0 || value[d] || (d > 1 && value[0] == '0') || v < least || v > 1 << 30) {
            st = ts_error(TS_ERR_FORMAT,
                          "safetensors %s: __metadata__ %s = \"%s\" is not a count of at least %ld "
                          "(and at most 2^30)",
                          h->path, key, value, least);
            break;
        }
        h->key[k] = (int)v;
    } while (st_eat(j, ','));
    if (!st && !st_eat(j, '}')) st = st_bad(j, "',' or '}' expected");
    if (!st) st = st_metadata_unique(j, keys, n);
    free(keys);
    free(arena);
    return st;
}

static ts_status st_entry_read(st_json *j, st_entry *e) {
    if (!st_eat(j, '{')) return st_bad(j, "an object expected");
    int seen = 0;
    do {
        char key[32];
        TS_TRY(st_string(j, key, sizeof key));
        if (!st_eat(j, ':')) return st_bad(j, "':' expected");
        int bit = strcmp(key, "dtype") == 0 ? 1 : strcmp(key, "shape") == 0 ? 2 : 4;
        if (seen & bit && (bit < 4 || strcmp(key, "data_offsets") == 0)) {
            char what[TS_NAME_MAX + 48];
            snprintf(what, sizeof what, "%s has %s twice", e->name, key);
            return st_bad(j, what);
        }
        if (strcmp(key, "dtype") == 0) {
            TS_TRY(st_string(j, e->dtype, sizeof e->dtype));
            seen |= 1;
        } else if (strcmp(key, "shape") == 0) {
            TS_TRY(st_ints(j, e->shape, 4, &e->ndim));
            seen |= 2;
        } else if (strcmp(key, "data_offsets") == 0) {
            int64_t o[2];
            int k;
            TS_TRY(st_ints(j, o, 2, &k));
            if (k != 2 || o[1] < o[0]) return st_bad(j, "data_offsets is not [begin, end]");
            e->begin = (uint64_t)o[0];
            e->end = (uint64_t)o[1];
            seen |= 4;
        } else {
            return st_bad(j, "an unknown field of a tensor");
        }
    } while (st_eat(j, ','));
    if (!st_eat(j, '}')) return st_bad(j, "',' or '}' expected");
    return seen == 7 ? TS_OK : st_bad(j, "a tensor without dtype, shape or data_offsets");
}

/* Bytes an element of a safetensors dtype takes (0: not one). */
static size_t st_dtype_bytes(const char *d) {
    static const struct {
        const char *name;
        size_t bytes;
    } types[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
                 {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
                 {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E5M2", 1}, {"F8_E4M3", 1}};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(types[i].name, d) == 0) return types[i].bytes;
    return 0;
}

static int st_by_name(const void *a, const void *b) {
    return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int st_by_begin(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : strcmp(x->name, y->name);
}

/* Every tensor of the header, whatever the model reads of it: a dtype of
 * the format, data_offsets that hold its shape's elements within the data,
 * no two sharing a byte and no byte of the data in none (the format's
 * reference reader refuses both), no name twice. */
static ts_status st_check_entries(st_header *h) {
    for (int i = 0; i < h->n; i++) {
        const st_entry *e = &h->e[i];
        size_t es = st_dtype_bytes(e->dtype);
        uint64_t numel = 1;
        for (int d = 0; d < e->ndim; d++)
            numel = e->shape[d] && numel > UINT64_MAX / (uint64_t)e->shape[d]
                        ? UINT64_MAX
                        : numel * (uint64_t)e->shape[d];
        if (!es)
            return ts_error(TS_ERR_FORMAT,
                            "safetensors %s: %s has dtype \"%s\", not one of the "
                            "format's",
                            h->path, e->name, e->dtype);
        if (e->end > h->data_size)
            return ts_error(TS_ERR_FORMAT,
                            "safetensors %s: %s's data_offsets [%llu, %llu) run past the end of "
                            "the %llu data bytes",
                            h->path, e->name, (unsigned long long)e->begin,
                            (unsigned long long)e->end, (unsigned long long)h->data_size);
        if (numel > UINT64_MAX / es || e->end - e->begin != numel * es)
            return ts_error(
                TS_ERR_FORMAT,
                "safetensors %s: %s's data_offsets [%llu, %llu) are not the %llu "
                "bytes of its %s shape",
                h->path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end,
                numel > UINT64_MAX / es ? 0ULL : (unsigned long long)(numel * es), e->dtype);
    }
    qsort(h->e, (size_t)h->n, sizeof *h->e, st_by_name);
    for (int i = 1; i < h->n; i++)
        if (strcmp(h->e[i - 1].name, h->e[i].name) == 0)
            return ts_error(TS_ERR_FORMAT, "safetensors %s: %s appears twice", h->path,
                            h->e[i].name);
    const st_entry **order = malloc((size_t)(h->n ? h->n : 1) * sizeof *order);
    if (!order) return ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    for (int i = 0; i < h->n; i++)
        order[i] = &h->e[i];
    qsort(order, (size_t)h->n, sizeof *order, st_by_begin);
    ts_status st = TS_OK;
    const st_entry *last = NULL; /* the non-empty tensor ending furthest */
    for (int i = 0; i < h->n && !st; i++) {
        const st_entry *e = order[i];
        if (e->end == e->begin) continue;
        if (last && e->begin < last->end)
            st = ts_error(TS_ERR_FORMAT,
                          "safetensors %s: %s's data_offsets [%llu, %llu) overlap %s's [%llu, "
                          "%llu)",
                          h->path, e->name, (unsigned long long)e->begin,
                          (unsigned long long)e->end, last->name, (unsigned long long)last->begin,
                          (unsigned long long)last->end);
        else if (e->begin > (last ? last->end : 0))
            st = ts_error(TS_ERR_FORMAT,
                          "safetensors %s: data bytes [%llu, %llu) before %s are no tensor's (the "
                          "tensors tile the data)",
                          h->path, (unsigned long long)(last ? last->end : 0),
                          (unsigned long long)e->begin, e->name);
        if (!last || e->end > last->end) last = e;
    }
    if (!st && (last ? last->end : 0) < h->data_size)
        st = ts_error(TS_ERR_FORMAT,
                      "safetensors %s: data bytes [%llu, %llu) after the last tensor are no "
                      "tensor's (the tensors tile the data)",
                      h->path, (unsigned long long)(last ? last->end : 0),
                      (unsigned long long)h->data_size);
    free(order);
    return st;
}

static void st_header_close(st_header *h) {
    free(h->e);
    if (h->f) fclose(h->f);
    memset(h, 0, sizeof *h);
}

/* The header of `path`, checked (st_check_entries), the file left open. */
static ts_status st_header_read(const char *path, st_header *h) {
    memset(h, 0, sizeof *h);
    h->path = path;
    for (int k = 0; k < ST_NKEYS; k++)
        h->key[k] = -1;
    TS_TRY(ts_file_open_read(path, "safetensors", &h->f));
    struct stat sb;
    unsigned char lenb[8];
    if (fstat(fileno(h->f), &sb) != 0 || fread(lenb, 1, 8, h->f) != 8) {
        st_header_close(h);
        return ts_error(TS_ERR_FORMAT, "safetensors %s: shorter than its 8-byte header length",
                        path);
    }
    uint64_t len = 0;
    for (int b = 7; b >= 0; b--)
        len = len << 8 | lenb[b];
    if (len > ST_MAX_HEADER || len + 8 > (uint64_t)sb.st_size) {
        st_header_close(h);
        return ts_error(TS_ERR_FORMAT,
                        "safetensors %s: header length %llu does not fit the file of %lld bytes",
                        path, (unsigned long long)len, (long long)sb.st_size);
    }
    char *hdr = malloc(len + 1);
    int cap = 64;
    h->e = malloc((size_t)cap * sizeof *h->e);
    ts_status st = hdr && h->e ? TS_OK : ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    if (!st && fread(hdr, 1, len, h->f) != len)
        st = ts_error(TS_ERR_FORMAT, "safetensors %s: truncated header", path);
    if (hdr) hdr[len] = '\0';
    st_json j = {hdr, hdr, hdr + len, path, 0};
    int metadata = 0;
    if (!st && (len == 0 || hdr[0] != '{')) st = st_bad(&j, "the header does not begin with '{'");
    if (!st) j.p++;
    for (int first = 1; !st && !st_eat(&j, '}'); first = 0) {
        if (!first && !st_eat(&j, ',')) {
            st = st_bad(&j, "',' expected");
            break;
        }
        char name[TS_NAME_MAX];
        st = st_string(&j, name, sizeof name);
        if (!st && !st_eat(&j, ':')) st = st_bad(&j, "':' expected");
        if (st) break;
        if (strcmp(name, "__metadata__") == 0) {
            st = metadata++ ? st_bad(&j, "a second __metadata__") : st_metadata(&j, h);
            continue;
        }
        if (h->n == cap) {
            st_entry *g = realloc(h->e, (size_t)(cap *= 2) * sizeof *g);
            if (!g) {
                st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
                break;
            }
            h->e = g;
        }
        memset(&h->e[h->n], 0, sizeof h->e[h->n]);
        snprintf(h->e[h->n].name, sizeof h->e[h->n].name, "%s", name);
        st = st_entry_read(&j, &h->e[h->n]);
        if (!st) h->n++;
    }
    /* After the closing brace only the padding (JSON's whitespace). */
    if (!st) st_ws(&j);
    if (!st && j.p < j.end) {
        char what[64];
        unsigned char c = (unsigned char)*j.p;
        snprintf(what, sizeof what,
                 c > 0x20 && c < 0x7f ? "'%c' after the header's closing brace"
                                      : "byte 0x%02x after the header's closing brace",
                 c);
        st = st_bad(&j, what);
    }
    free(hdr);
    h->data_start = 8 + len;
    h->data_size = (uint64_t)sb.st_size - 8 - len;
    if (!st) st = st_check_entries(h);
    if (st) st_header_close(h);
    return st;
}

static const st_entry *st_find(const st_header *h, const char *name) {
    st_entry key;
    snprintf(key.name, sizeof key.name, "%s", name);
    return bsearch(&key, h->e, (size_t)h->n, sizeof *h->e, st_by_name);
}

/* ---------------------------------------------------------------------------
 * Where the weights are: PATH a safetensors file, a directory holding a
 * sharded checkpoint (model.safetensors.index.json), model.safetensors or
 * exactly one *.safetensors, or such an index itself (a name ending in
 * .json); the names with or without transformers' "transformer." prefix
 * (what GPT2LMHeadModel's save_pretrained writes); config.json beside them
 * when there is one. The JSON of the index and of config.json is read by a
 * reader of its own (any JSON value; the header's grammar is narrower).
 * ------------------------------------------------------------------------- */

#define ST_PREFIX "transformer."
#define ST_MAX_JSON (64u << 20)
#define ST_JSON_DEPTH 64

typedef struct st_files {
    char *dir;         /* where config.json and the shards are               */
    char *index;       /* the index read, NULL for one file                  */
    char *config;      /* config.json's path, NULL when there is none        */
    int n;             /* files: 1, or the index's shards                     */
    char **paths;      /* each file's path                                    */
    st_header *h;      /* each file's header, names without the prefix       */
    int prefixed;      /* whether any file spells its names with the prefix  */
    int key[ST_NKEYS]; /* the metadata's shape keys over all files (-1) */
} st_files;

/* A JSON number, its grammar checked (strtod alone takes hex, inf, "1."). */
static ts_status st_doc_number(st_json *j, double *v) {
    st_ws(j);
    const char *p = j->p, *end = j->end;
#define ST_DIGITS(q) ((q) < end && *(q) >= '0' && *(q) <= '9')
    if (p < end && *p == '-') p++;
    if (!ST_DIGITS(p)) return st_bad(j, "a value expected");
    if (*p == '0' && ST_DIGITS(p + 1)) return st_bad(j, "a number with a leading zero");
    while (ST_DIGITS(p))
        p++;
    if (p < end && *p == '.') {
        if (!ST_DIGITS(p + 1)) return st_bad(j, "a number with no digit after its '.'");
        for (p++; ST_DIGITS(p); p++)
            ;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (!ST_DIGITS(p)) return st_bad(j, "a number with no digit in its exponent");
        while (ST_DIGITS(p))
            p++;
    }
#undef ST_DIGITS
    *v = strtod(j->p, NULL); /* the text is NUL-terminated past the number */
    j->p = p;
    return TS_OK;
}

/* true, false or null: 1, 0 or -1 in *v; 2 when the value is none of them
 * (nothing consumed). */
static void st_doc_literal(st_json *j, int *v) {
    st_ws(j);
    static const char *const word[3] = {"null", "false", "true"};
    *v = 2;
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(word[k]);
        if ((size_t)(j->end - j->p) >= n && memcmp(j->p, word[k], n) == 0) {
            j->p += n;
            *v = k - 1;
            return;
        }
    }
}

/* Any JSON value, skipped. */
static ts_status st_doc_skip(st_json *j, int depth) {
    if (depth > ST_JSON_DEPTH) return st_bad(j, "values nested too deep");
    st_ws(j);
    char c = j->p < j->end ? *j->p : 0;
    int lit;
    double x;
    if (c == '"') return st_string(j, NULL, 0);
    if (c == '{' || c == '[') {
        char close = c == '{' ? '}' : ']';
        j->p++;
        if (st_eat(j, close)) return TS_OK;
        do {
            if (c == '{') {
                TS_TRY(st_string(j, NULL, 0));
                if (!st_eat(j, ':')) return st_bad(j, "':' expected");
            }
            TS_TRY(st_doc_skip(j, depth + 1));
        } while (st_eat(j, ','));
        return st_eat(j, close) ? TS_OK : st_bad(j, "',' or a closing bracket expected");
    }
    st_doc_literal(j, &lit);
    return lit != 2 ? TS_OK : st_doc_number(j, &x);
}

/* The whole of a JSON file (at most ST_MAX_JSON bytes), NUL-terminated. */
static ts_status st_doc_load(const char *path, const char *what, char **text, size_t *len) {
    FILE *f;
    *text = NULL;
    TS_TRY(ts_file_open_read(path, what, &f));
    struct stat sb;
    ts_status st = TS_OK;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size > (off_t)ST_MAX_JSON)
        st = ts_error(TS_ERR_FORMAT, "%s %s: larger than %u bytes", what, path, ST_MAX_JSON);
    char *b = st ? NULL : malloc((size_t)sb.st_size + 1);
    if (!st && !b) st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    if (!st && fread(b, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size)
        st = ts_error(TS_ERR_IO, "%s %s: cannot read", what, path);
    fclose(f);
    if (st) {
        free(b);
        return st;
    }
    b[sb.st_size] = '\0';
    *text = b;
    *len = (size_t)sb.st_size;
    return TS_OK;
}

/* ---- config.json: the keys of transformers' GPT2Config tessera reads ---- */

typedef struct st_hf_config {
    /* -1: absent (n_inner also when null) */
    int n_head, n_embd, n_layer, n_positions, vocab_size, n_inner;
    double eps;                   /* layer_norm_epsilon, < 0: absent */
    char act[64], model_type[64]; /* "": absent */
    /* tie_word_embeddings, scale_attn_weights, scale_attn_by_inverse_layer_idx,
     * add_cross_attention: -1 absent, else 0 or 1 */
    int tie, scale_attn, scale_by_layer, cross;
} st_hf_config;

static ts_status st_hf_config_read(const char *path, st_hf_config *g) {
    static const char *const ints[] = {"n_head",      "n_embd",     "n_layer",
                                       "n_positions", "vocab_size", "n_inner"};
    static const char *const bools[] = {"tie_word_embeddings", "scale_attn_weights",
                                        "scale_attn_by_inverse_layer_idx", "add_cross_attention"};
    int *intf[] = {&g->n_head,      &g->n_embd,     &g->n_layer,
                   &g->n_positions, &g->vocab_size, &g->n_inner};
    int *boolf[] = {&g->tie, &g->scale_attn, &g->scale_by_layer, &g->cross};
    memset(g, 0, sizeof *g);
    for (int k = 0; k < 6; k++)
        *intf[k] = -1;
    for (int k = 0; k < 4; k++)
        *boolf[k] = -1;
    g->eps = -1;
    char *text;
    size_t len;
    TS_TRY(st_doc_load(path, "safetensors config.json", &text, &len));
    st_json j = {text, text, text + len, path, 1};
    ts_status st = st_eat(&j, '{') ? TS_OK : st_bad(&j, "the file is not a JSON object");
    unsigned seen = 0;
    for (int first = 1; !st && !st_eat(&j, '}'); first = 0) {
        char key[128], msg[256];
        if (!first && !st_eat(&j, ',')) {
            st = st_bad(&j, "',' or '}' expected");
            break;
        }
        key[0] = '\0';
        st = st_string(&j, key, sizeof key);
        if (!st && !st_eat(&j, ':')) st = st_bad(&j, "':' expected");
        if (st) break;
        int which = -1, lit;
        double v;
        for (int k = 0; k < 6 && which < 0; k++)
            if (strcmp(key, ints[k]) == 0) which = k;
        for (int k = 0; k < 4 && which < 0; k++)
            if (strcmp(key, bools[k]) == 0) which = 6 + k;
        if (which < 0 && strcmp(key, "layer_norm_epsilon") == 0) which = 10;
        if (which < 0 && strcmp(key, "activation_function") == 0) which = 11;
        if (which < 0 && strcmp(key, "model_type") == 0) which = 12;
        if (which < 0) {
            st = st_doc_skip(&j, 0);
            continue;
        }
        if (seen & 1u << which) {
            snprintf(msg, sizeof msg, "%s appears twice", key);
            st = st_bad(&j, msg);
            break;
        }
        seen |= 1u << which;
        if (which < 6) {
            st_doc_literal(&j, &lit);
            if (lit == -1 && which == 5) continue; /* n_inner: null, 4 x n_embd */
            if (lit == 2) st = st_doc_number(&j, &v);
            /* the range first: a cast of a double past int64_t is undefined */
            if (!st && (lit != 2 || !(v >= 1 && v <= (double)(1 << 30)) || v != (double)(int)v)) {
                snprintf(msg, sizeof msg, "%s is not a count (an integer from 1 to 2^30)", key);
                st = st_bad(&j, msg);
            }
            if (!st) *intf[which] = (int)v;
        } else if (which < 10) {
            st_doc_literal(&j, &lit);
            if (lit != 0 && lit != 1) {
                snprintf(msg, sizeof msg, "%s is not true or false", key);
                st = st_bad(&j, msg);
            }
            *boolf[which - 6] = lit;
        } else if (which == 10) {
            st = st_doc_number(&j, &g->eps);
            if (!st && !(g->eps > 0)) st = st_bad(&j, "layer_norm_epsilon is not positive");
        } else {
            char *out = which == 11 ? g->act : g->model_type;
            st = st_string(&j, out, 64);
            if (!st && !out[0]) {
                snprintf(msg, sizeof msg, "%s is empty", key);
                st = st_bad(&j, msg);
            }
        }
    }
    st_ws(&j);
    if (!st && j.p != j.end) st = st_bad(&j, "text after the closing '}'");
    free(text);
    return st;
}

/* ---- the files ---- */

static char *st_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    if (a) {
        memcpy(s, dir, a);
        if (dir[a - 1] != '/') s[a++] = '/';
    }
    memcpy(s + a, name, b + 1);
    return s;
}

static int st_ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

static void st_files_close(st_files *f) {
    for (int i = 0; i < f->n; i++) {
        if (f->h) st_header_close(&f->h[i]);
        if (f->paths) free(f->paths[i]);
    }
    free(f->h), free(f->paths), free(f->dir), free(f->index), free(f->config);
    memset(f, 0, sizeof *f);
}

/* Room for n files (their paths and headers zeroed). */
static ts_status st_files_alloc(st_files *f, int n) {
    f->paths = calloc((size_t)n, sizeof *f->paths);
    f->h = calloc((size_t)n, sizeof *f->h);
    if (!f->paths || !f->h) return ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    return TS_OK;
}

/* A directory's one file of weights: model.safetensors, else its only
 * *.safetensors (none or several: an error naming the directory). */
static ts_status st_dir_pick(const char *dir, char **out) {
    struct stat sb;
    *out = st_join(dir, "model.safetensors");
    if (!*out) return ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    if (stat(*out, &sb) == 0) return TS_OK;
    free(*out);
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return ts_error(TS_ERR_IO, "safetensors %s: cannot list the directory", dir);
    char names[3][64] = {"", "", ""};
    int count = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!st_ends_with(e->d_name, ".safetensors")) continue;
        if (count == 0) *out = st_join(dir, e->d_name);
        if (count < 3) snprintf(names[count], sizeof names[count], "%s", e->d_name);
        count++;
    }
    closedir(d);
    if (count == 1) return *out ? TS_OK : ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    free(*out);
    *out = NULL;
    if (count == 0)
        return ts_error(TS_ERR_FORMAT,
                        "safetensors %s: the directory holds no model.safetensors.index.json, "
                        "model.safetensors or other *.safetensors file",
                        dir);
    return ts_error(TS_ERR_FORMAT,
                    "safetensors %s: the directory holds %d *.safetensors files (%s, %s%s%s) and "
                    "no model.safetensors.index.json or model.safetensors: name one "
                    "(init = safetensors:%s/FILE)",
                    dir, count, names[0], names[1], count > 2 ? ", " : "",
                    count > 2 ? names[2] : "", dir);
}

/* Strips the "transformer." prefix from h's names (marking them), sorted
 * again; a tensor then named twice is an error naming both spellings. */
static ts_status st_strip_prefix(st_header *h, int *any) {
    size_t n = strlen(ST_PREFIX);
    int stripped = 0;
    for (int i = 0; i < h->n; i++)
        if (strncmp(h->e[i].name, ST_PREFIX, n) == 0) {
            memmove(h->e[i].name, h->e[i].name + n, strlen(h->e[i].name + n) + 1);
            h->e[i].prefixed = stripped = *any = 1;
        }
    if (!stripped) return TS_OK;
    qsort(h->e, (size_t)h->n, sizeof *h->e, st_by_name);
    for (int i = 1; i < h->n; i++)
        if (strcmp(h->e[i - 1].name, h->e[i].name) == 0)
            return ts_error(TS_ERR_FORMAT,
                            "safetensors %s: %s and " ST_PREFIX "%s are one tensor named twice",
                            h->path, h->e[i].name, h->e[i].name);
    return TS_OK;
}

/* A name as the file spells it: e's, or (e NULL: a tensor the file lacks)
 * as the file spells the others (lm_head.weight never has the prefix). */
static const char *st_spell(const st_files *f, const st_entry *e, const char *name, char *buf,
                            size_t cap) {
    int pre = e ? e->prefixed : f->prefixed && strcmp(name, "lm_head.weight") != 0;
    snprintf(buf, cap, "%s%s", pre ? ST_PREFIX : "", name);
    return buf;
}

static const st_entry *st_files_find(const st_files *f, const char *name, int *shard) {
    for (int s = 0; s < f->n; s++) {
        const st_entry *e = st_find(&f->h[s], name);
        if (e) {
            *shard = s;
            return e;
        }
    }
    return NULL;
}

/* One entry of an index's weight_map: a tensor (without the prefix) and
 * the shard holding it. */
typedef struct st_mapped {
    char name[TS_NAME_MAX];
    int shard, prefixed;
} st_mapped;

static int st_mapped_by_name(const void *a, const void *b) {
    return strcmp(((const st_mapped *)a)->name, ((const st_mapped *)b)->name);
}

/* The index's weight_map (sorted by name, *n entries) and its shards'
 * file names (f->paths, joined to f->dir; f->n of them). */
static ts_status st_index_parse(st_files *f, st_mapped **map, int *n) {
    char *text;
    size_t len;
    *map = NULL;
    *n = 0;
    TS_TRY(st_doc_load(f->index, "safetensors index", &text, &len));
    st_json j = {text, text, text + len, f->index, 1};
    int cap = 0, maps = 0, shards = 0;
    char **names = NULL;
    ts_status st = st_eat(&j, '{') ? TS_OK : st_bad(&j, "the index is not a JSON object");
    for (int first = 1; !st && !st_eat(&j, '}'); first = 0) {
        char key[64];
        if (!first && !st_eat(&j, ',')) st = st_bad(&j, "',' or '}' expected");
        if (!st) st = st_string(&j, key, sizeof key);
        if (!st && !st_eat(&j, ':')) st = st_bad(&j, "':' expected");
        if (st) break;
        if (strcmp(key, "weight_map") != 0) {
            st = st_doc_skip(&j, 0);
            continue;
        }
        if (maps++) {
            st = st_bad(&j, "weight_map appears twice");
            break;
        }
        if (!st_eat(&j, '{')) {
            st = st_bad(&j, "weight_map is not an object");
            break;
        }
        for (int one = 1; !st && !st_eat(&j, '}'); one = 0) {
            char file[1024];
            if (!one && !st_eat(&j, ',')) st = st_bad(&j, "',' or '}' expected");
            if (*n == cap) {
                st_mapped *g = realloc(*map, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *g);
                char **h = realloc(names, (size_t)cap * sizeof *h);
                if (g) *map = g;
                if (h) names = h;
                if (!g || !h) st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
            }
            if (st) break;
            st_mapped *m = &(*map)[*n];
            memset(m, 0, sizeof *m);
            st = st_string(&j, m->name, sizeof m->name);
            if (!st && !st_eat(&j, ':')) st = st_bad(&j, "':' expected");
            if (!st) st = st_string(&j, file, sizeof file);
            if (st) break;
            /* A shard beside the index: no absolute path, no "..". */
            if (!file[0] || file[0] == '/' || strcmp(file, "..") == 0 ||
                strncmp(file, "../", 3) == 0 || strstr(file, "/../") || st_ends_with(file, "/..")) {
                st = ts_error(TS_ERR_FORMAT,
                              "safetensors %s: weight_map puts %s in \"%s\", not a file beside "
                              "the index",
                              f->index, m->name, file);
                break;
            }
            size_t pn = strlen(ST_PREFIX);
            if (strncmp(m->name, ST_PREFIX, pn) == 0) {
                memmove(m->name, m->name + pn, strlen(m->name + pn) + 1);
                m->prefixed = 1;
            }
            m->shard = -1;
            for (int s = 0; s < shards && m->shard < 0; s++)
                if (strcmp(names[s], file) == 0) m->shard = s;
            if (m->shard < 0) {
                names[shards] = malloc(strlen(file) + 1);
                if (!names[shards]) {
                    st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
                    break;
                }
                strcpy(names[shards], file);
                m->shard = shards++;
            }
            (*n)++;
        }
    }
    st_ws(&j);
    if (!st && j.p != j.end) st = st_bad(&j, "text after the closing '}'");
    if (!st && !maps) st = ts_error(TS_ERR_FORMAT, "safetensors %s: no weight_map", f->index);
    if (!st && *n == 0)
        st = ts_error(TS_ERR_FORMAT, "safetensors %s: the weight_map is empty", f->index);
    free(text);
    if (!st) st = st_files_alloc(f, shards);
    if (!st) f->n = shards;
    for (int s = 0; s < shards; s++) {
        if (!st && !(f->paths[s] = st_join(f->dir, names[s])))
            st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
        free(names[s]);
    }
    free(names);
    if (!st) qsort(*map, (size_t)*n, sizeof **map, st_mapped_by_name);
    for (int i = 1; !st && i < *n; i++)
        if (strcmp((*map)[i - 1].name, (*map)[i].name) == 0)
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: weight_map names %s twice", f->index,
                          (*map)[i].name);
    return st;
}

/* The index's weight_map against its shards: each tensor it maps is in
 * that shard, each tensor of a shard is mapped there. */
static ts_status st_index_check(const st_files *f, const st_mapped *map, int n) {
    char a[TS_NAME_MAX + 16];
    for (int i = 0; i < n; i++)
        if (!st_find(&f->h[map[i].shard], map[i].name))
            return ts_error(TS_ERR_FORMAT,
                            "safetensors %s: weight_map puts %s%s in %s, which has no such tensor",
                            f->index, map[i].prefixed ? ST_PREFIX : "", map[i].name,
                            f->paths[map[i].shard]);
    for (int s = 0; s < f->n; s++)
        for (int i = 0; i < f->h[s].n; i++) {
            const st_entry *e = &f->h[s].e[i];
            st_mapped key;
            snprintf(key.name, sizeof key.name, "%s", e->name);
            const st_mapped *m = bsearch(&key, map, (size_t)n, sizeof *map, st_mapped_by_name);
            if (!m || m->shard != s)
                return ts_error(TS_ERR_FORMAT, "safetensors %s: %s is %s %s's weight_map%s%s",
                                f->paths[s], st_spell(f, e, e->name, a, sizeof a),
                                m ? "in another shard in" : "not in", f->index, m ? ": " : "",
                                m ? f->paths[m->shard] : "");
        }
    return TS_OK;
}

/* Opens the weights at `path` (any of the forms above): every file's
 * header read and checked, the names without the prefix, the metadata's
 * shape keys merged (two files that disagree: an error). */
static ts_status st_files_open(const char *path, st_files *f) {
    memset(f, 0, sizeof *f);
    for (int k = 0; k < ST_NKEYS; k++)
        f->key[k] = -1;
    struct stat sb;
    char *file = NULL;
    ts_status st = TS_OK;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        f->dir = st_join(path, "");
        f->index = st_join(path, "model.safetensors.index.json");
        if (!f->dir || !f->index) st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
        if (!st && stat(f->index, &sb) != 0) {
            free(f->index);
            f->index = NULL;
            st = st_dir_pick(path, &file);
        }
    } else {
        const char *slash = strrchr(path, '/');
        f->dir = malloc(slash ? (size_t)(slash - path) + 2 : 1);
        if (f->dir) snprintf(f->dir, slash ? (size_t)(slash - path) + 2 : 1, "%s", path);
        if (st_ends_with(path, ".json"))
            f->index = st_join("", path);
        else
            file = st_join("", path);
        if (!f->dir || (!f->index && !file))
            st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    }
    if (!st) {
        f->config = st_join(f->dir, "config.json");
        if (!f->config) st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
        if (f->config && stat(f->config, &sb) != 0) {
            free(f->config);
            f->config = NULL;
        }
    }
    st_mapped *map = NULL;
    int nmap = 0, from[ST_NKEYS] = {0};
    if (!st && f->index) {
        st = st_index_parse(f, &map, &nmap);
    } else if (!st) {
        st = st_files_alloc(f, 1);
        if (!st) f->paths[0] = file, f->n = 1, file = NULL;
    }
    free(file);
    for (int s = 0; !st && s < f->n; s++) {
        st = st_header_read(f->paths[s], &f->h[s]);
        if (st && f->index) {
            char msg[2048];
            snprintf(msg, sizeof msg, "%s", ts_last_error_bare());
            st = ts_error(st, "%s (a shard of %s)", msg, f->index);
        }
        if (!st) st = st_strip_prefix(&f->h[s], &f->prefixed);
        for (int k = 0; !st && k < ST_NKEYS; k++) {
            int v = f->h[s].key[k];
            if (v >= 0 && f->key[k] >= 0 && v != f->key[k])
                st = ts_error(TS_ERR_FORMAT,
                              "safetensors %s: __metadata__ %s = %d, but %s's says %d", f->paths[s],
                              st_keys[k], v, f->paths[from[k]], f->key[k]);
            else if (v >= 0 && f->key[k] < 0)
                f->key[k] = v, from[k] = s;
        }
    }
    if (!st && f->index) st = st_index_check(f, map, nmap);
    free(map);
    if (st) st_files_close(f);
    return st;
}

/* What a name (without the prefix) is: 1 a tensor of transformers' GPT-2,
 * dense or with DESIGN.md's experts (its block in *layer, -1 for none), 2
 * a buffer transformers does not load either (h.L.attn.bias, the causal
 * mask; h.L.attn.masked_bias), 0 neither. Numbers are decimal, no sign or
 * leading zero. */
static int st_name_kind(const char *name, int *layer) {
    *layer = -1;
    if (strcmp(name, "lm_head.weight") == 0) return 1;
    for (size_t g = 0; g < ST_FIRST_BLOCK_NAME; g++)
        if (strcmp(name, st_names[g].hf) == 0) return 1;
    int l, k, n = 0, p = 0;
    char canon[40];
    if (sscanf(name, "h.%d.%n", &l, &n) != 1 || n == 0 || l < 0) return 0;
    if (snprintf(canon, sizeof canon, "h.%d.", l) != n || strncmp(name, canon, (size_t)n) != 0)
        return 0;
    *layer = l;
    const char *rest = name + n;
    if (strcmp(rest, "attn.bias") == 0 || strcmp(rest, "attn.masked_bias") == 0) return 2;
    int expert = sscanf(rest, "mlp.experts.%d.%n", &k, &p) == 1 && p > 0 && k >= 0;
    if (expert && (snprintf(canon, sizeof canon, "mlp.experts.%d.", k) != p ||
                   strncmp(rest, canon, (size_t)p) != 0))
        return 0;
    for (size_t g = ST_FIRST_BLOCK_NAME; g < ST_NMAP; g++) {
        const char *hf = st_names[g].hf;
        if (st_names[g].experts ? expert && strcmp(rest + p, strstr(hf, "%d.") + 3) == 0
                                : !expert && strcmp(rest, hf) == 0)
            return 1;
    }
    return 0;
}

/* Every name of the files is one of st_name_kind's; the blocks with
 * tensors are h.0 .. h.{L-1} (L in *layers), a tensor of a block past a
 * missing one named; the experts' count from their numbers (*experts). */
static ts_status st_files_names(const st_files *f, int *layers, int *experts) {
    unsigned char present[TS_MODEL_MAX_MODULES] = {0};
    char a[TS_NAME_MAX + 16];
    *experts = 0;
    for (int s = 0; s < f->n; s++)
        for (int i = 0; i < f->h[s].n; i++) {
            const st_entry *e = &f->h[s].e[i];
            int l, k, n = 0, kind = st_name_kind(e->name, &l);
            if (kind == 0)
                return ts_error(TS_ERR_FORMAT,
                                "safetensors %s: %s is no tensor of transformers' GPT-2 (nor of "
                                "its experts' names, docs/formats.md)",
                                f->h[s].path, st_spell(f, e, e->name, a, sizeof a));
            if (l >= TS_MODEL_MAX_MODULES - 2)
                return ts_error(TS_ERR_FORMAT, "safetensors %s: %s: block %d is not in 0-%d",
                                f->h[s].path, st_spell(f, e, e->name, a, sizeof a), l,
                                TS_MODEL_MAX_MODULES - 3);
            if (l >= 0 && kind == 1) present[l] = 1;
            if (sscanf(e->name, "h.%d.mlp.experts.%d.%n", &l, &k, &n) == 2 && n > 0) {
                if (k >= 65536)
                    return ts_error(TS_ERR_FORMAT,
                                    "safetensors %s: %s: expert %d is not in 0-65535", f->h[s].path,
                                    st_spell(f, e, e->name, a, sizeof a), k);
                if (k + 1 > *experts) *experts = k + 1;
            }
        }
    int L = 0;
    while (L < TS_MODEL_MAX_MODULES - 2 && present[L])
        L++;
    *layers = L;
    /* The lowest block past h.{L-1}, and its first name. */
    const st_entry *stray = NULL;
    int stray_l = 0, stray_s = 0;
    for (int s = 0; s < f->n; s++)
        for (int i = 0; i < f->h[s].n; i++) {
            const st_entry *e = &f->h[s].e[i];
            int l;
            st_name_kind(e->name, &l);
            if (l >= L &&
                (!stray || l < stray_l || (l == stray_l && strcmp(e->name, stray->name) < 0)))
                stray = e, stray_l = l, stray_s = s;
        }
    if (stray && L == 0)
        return ts_error(TS_ERR_FORMAT,
                        "safetensors %s: %s: block h.%d, but the file has no block h.0",
                        f->h[stray_s].path, st_spell(f, stray, stray->name, a, sizeof a), stray_l);
    if (stray)
        return ts_error(TS_ERR_FORMAT,
                        "safetensors %s: %s: a tensor of block h.%d, past the file's blocks "
                        "h.0-h.%d (no tensor of h.%d)",
                        f->h[stray_s].path, st_spell(f, stray, stray->name, a, sizeof a), stray_l,
                        L - 1, L);
    return TS_OK;
}

/* What the file holds of block l's MLP: 1 experts (a router or an expert's
 * tensor), 0 a dense MLP, -1 neither; *name one of its tensors. */
static int st_block_kind(const st_files *f, int l, const char **name) {
    char pre[64];
    int n = snprintf(pre, sizeof pre, "h.%d.mlp.", l), kind = -1;
    for (int s = 0; s < f->n; s++) {
        /* The names are sorted: those of the block start at the first not
         * below pre (a search per block, not a pass over every tensor). */
        int lo = 0, hi = f->h[s].n;
        while (lo < hi) {
            int mid = lo + (hi - lo) / 2;
            if (strcmp(f->h[s].e[mid].name, pre) < 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (int i = lo; i < f->h[s].n && kind < 1; i++) {
            const char *x = f->h[s].e[i].name;
            if (strncmp(x, pre, (size_t)n) != 0) break;
            if (strncmp(x + n, "router.", 7) == 0 || strncmp(x + n, "experts.", 8) == 0) {
                kind = 1, *name = x;
            } else if (kind < 0 && strncmp(x + n, "c_", 2) == 0) {
                kind = 0, *name = x;
            }
        }
    }
    return kind;
}

/* config.json beside the weights, against the shape the file gives (*c,
 * from its tensors and metadata): n_layer, n_embd, n_positions and
 * vocab_size must agree with the tensors, n_head with the metadata's heads
 * (else it gives heads); what tessera's GPT-2 does not compute is refused
 * naming the key (it has no knob for any of them). */
static ts_status st_hf_apply(const st_files *f, const int *meta, ts_model_config *c) {
    if (!f->config) return TS_OK;
    st_hf_config g;
    TS_TRY(st_hf_config_read(f->config, &g));
    const char *cj = f->config;
    char a[TS_NAME_MAX + 16];
    if (g.model_type[0] && strcmp(g.model_type, "gpt2") != 0)
        return ts_error(TS_ERR_FORMAT,
                        "%s: model_type = \"%s\": the weights are read as transformers' GPT-2 "
                        "(\"gpt2\", [model] arch = gpt2)",
                        cj, g.model_type);
    if (g.n_layer >= 0 && g.n_layer < c->layers) {
        /* The first tensor of block h.{n_layer}: past config.json's blocks. */
        char pre[24];
        int n = snprintf(pre, sizeof pre, "h.%d.", g.n_layer);
        for (int s = 0; s < f->n; s++)
            for (int i = 0; i < f->h[s].n; i++)
                if (strncmp(f->h[s].e[i].name, pre, (size_t)n) == 0)
                    return ts_error(TS_ERR_FORMAT,
                                    "safetensors %s: %s: a tensor of block h.%d, past %s's "
                                    "n_layer = %d (blocks h.0-h.%d)",
                                    f->h[s].path,
                                    st_spell(f, &f->h[s].e[i], f->h[s].e[i].name, a, sizeof a),
                                    g.n_layer, cj, g.n_layer, g.n_layer - 1);
    }
    struct {
        const char *key, *ours;
        int cj, file;
    } agree[] = {{"n_layer", "blocks h.L", g.n_layer, c->layers},
                 {"n_embd", "wte.weight's columns", g.n_embd, c->d_model},
                 {"n_positions", "wpe.weight's rows", g.n_positions, c->context},
                 {"vocab_size", "wte.weight's rows", g.vocab_size, c->vocab}};
    for (size_t k = 0; k < sizeof agree / sizeof agree[0]; k++)
        if (agree[k].cj >= 0 && agree[k].cj != agree[k].file)
            return ts_error(TS_ERR_FORMAT, "%s: %s = %d, but the tensors make it %d (%s)", cj,
                            agree[k].key, agree[k].cj, agree[k].file, agree[k].ours);
    if (g.n_head >= 0 && meta[ST_KEY_HEADS] >= 0 && g.n_head != meta[ST_KEY_HEADS])
        return ts_error(TS_ERR_FORMAT,
                        "%s: n_head = %d, but the safetensors file's __metadata__ says heads = %d",
                        cj, g.n_head, meta[ST_KEY_HEADS]);
    if (g.n_inner >= 0 && (int64_t)g.n_inner != 4 * (int64_t)c->d_model)
        return ts_error(TS_ERR_FORMAT,
                        "%s: n_inner = %d: tessera's GPT-2 MLP is 4 x n_embd = %lld wide", cj,
                        g.n_inner, 4 * (long long)c->d_model);
    if (g.eps >= 0 && (float)g.eps != TS_LAYERNORM_EPS)
        return ts_error(TS_ERR_FORMAT,
                        "%s: layer_norm_epsilon = %g: tessera's LayerNorm adds %g, and [model] "
                        "has no key to change it",
                        cj, g.eps, (double)TS_LAYERNORM_EPS);
    if (g.act[0] && strcmp(g.act, "gelu_new") != 0 && strcmp(g.act, "gelu_pytorch_tanh") != 0 &&
        strcmp(g.act, "gelu_fast") != 0)
        return ts_error(TS_ERR_FORMAT,
                        "%s: activation_function = \"%s\": tessera's GPT-2 MLP computes the tanh "
                        "GELU (gelu_new, gelu_pytorch_tanh, gelu_fast)%s",
                        cj, g.act,
                        strcmp(g.act, "gelu") == 0 ? ", not the erf GELU \"gelu\" names" : "");
    /* The switches config.json may set that tessera's GPT-2 does not have:
     * the value it cannot honour (-1: not in the file), and why. */
    const struct {
        int value, bad;
        const char *key, *why;
    } switches[] = {
        {g.tie, 0, "tie_word_embeddings",
         "tessera's GPT-2 ties its output head to wte.weight ([model] arch = gpt2 has no "
         "tie_embeddings key)"},
        {g.scale_attn, 0, "scale_attn_weights",
         "tessera scales the attention scores by 1/sqrt(head size)"},
        {g.scale_by_layer, 1, "scale_attn_by_inverse_layer_idx",
         "tessera does not scale block L's attention scores by 1/(L + 1)"},
        {g.cross, 1, "add_cross_attention", "tessera's GPT-2 has no cross-attention"}};
    for (size_t k = 0; k < sizeof switches / sizeof switches[0]; k++)
        if (switches[k].value == switches[k].bad)
            return ts_error(TS_ERR_FORMAT, "%s: %s = %s: %s", cj, switches[k].key,
                            switches[k].bad ? "true" : "false", switches[k].why);
    if (g.n_head >= 0) c->heads = g.n_head;
    return TS_OK;
}

/* lm_head.weight, when the file has one, must be wte.weight bit for bit
 * (a tied head written out): tessera's GPT-2 has no head of its own. */
static ts_status st_lm_head_check(const st_files *f, const st_entry *wte, int ws) {
    int hs;
    const st_entry *lm = st_files_find(f, "lm_head.weight", &hs);
    if (!lm) return TS_OK;
    const char *why = "an output head apart from wte.weight, which tessera's GPT-2 does not have "
                      "(it ties them: [model] arch = gpt2 has no tie_embeddings key)";
    if (lm->ndim != 2 || lm->shape[0] != wte->shape[0] || lm->shape[1] != wte->shape[1] ||
        strcmp(lm->dtype, wte->dtype) != 0)
        return ts_error(TS_ERR_FORMAT,
                        "safetensors %s: lm_head.weight is %s [%lld, %lld], wte.weight %s [%lld, "
                        "%lld]: %s",
                        f->h[hs].path, lm->dtype, (long long)lm->shape[0],
                        (long long)(lm->ndim > 1 ? lm->shape[1] : 0), wte->dtype,
                        (long long)wte->shape[0], (long long)wte->shape[1], why);
    enum { CHUNK = 1 << 16 };
    unsigned char *x = malloc(2 * CHUNK), *y = x ? x + CHUNK : NULL;
    if (!x) return ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    uint64_t size = wte->end - wte->begin;
    ts_status st = TS_OK;
    for (uint64_t at = 0; !st && at < size; at += CHUNK) {
        size_t n = size - at < CHUNK ? (size_t)(size - at) : CHUNK;
        FILE *a = f->h[ws].f, *b = f->h[hs].f;
        if (fseek(a, (long)(f->h[ws].data_start + wte->begin + at), SEEK_SET) != 0 ||
            fread(x, 1, n, a) != n)
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: truncated in wte.weight", f->h[ws].path);
        else if (fseek(b, (long)(f->h[hs].data_start + lm->begin + at), SEEK_SET) != 0 ||
                 fread(y, 1, n, b) != n)
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: truncated in lm_head.weight",
                          f->h[hs].path);
        else if (memcmp(x, y, n) != 0) {
            size_t d = 0;
            while (x[d] == y[d])
                d++;
            uint64_t k = (at + d) / st_dtype_bytes(wte->dtype);
            st = ts_error(TS_ERR_FORMAT,
                          "safetensors %s: lm_head.weight differs from wte.weight (first at row "
                          "%llu, column %llu): %s",
                          f->h[hs].path, (unsigned long long)(k / (uint64_t)wte->shape[1]),
                          (unsigned long long)(k % (uint64_t)wte->shape[1]), why);
        }
    }
    free(x);
    return st;
}

static ts_status st_missing(const st_files *f, const char *path, const char *name);
static ts_status st_check_blocks(const st_header *h, const ts_model_config *c);

/* The metadata's counts against the tensors, before anything is sized by
 * them (*c: the shape with the metadata's keys over the tensors'; experts
 * the count the tensors' numbers give): experts equal, moe_every routing
 * exactly the blocks that hold experts, expert_hidden the width of
 * h.0.mlp.experts.0.c_fc.weight, top_k at most experts, heads dividing
 * d_model. The error names the file and the key. */
static ts_status st_check_counts(const st_files *f, const char *path, int experts,
                                 const ts_model_config *c) {
    const int *key = f->key;
    for (int s = 0; key[ST_KEY_EXPERTS] >= 0 && key[ST_KEY_EXPERTS] < experts && s < f->n; s++)
        for (int i = 0; i < f->h[s].n; i++) {
            const char *x = f->h[s].e[i].name;
            int l, k, n = 0;
            if (sscanf(x, "h.%d.mlp.experts.%d.%n", &l, &k, &n) == 2 && n > 0 &&
                k >= key[ST_KEY_EXPERTS])
                return ts_error(TS_ERR_FORMAT,
                                "safetensors %s: %s: expert %d is past the model's %d "
                                "(__metadata__ experts = %d)",
                                f->h[s].path, x, k, key[ST_KEY_EXPERTS], key[ST_KEY_EXPERTS]);
        }
    if (key[ST_KEY_EXPERTS] >= 0 && key[ST_KEY_EXPERTS] != experts)
        return ts_error(TS_ERR_FORMAT,
                        "safetensors %s: __metadata__ experts = %d, but the tensors make it %d "
                        "(%s)",
                        path, key[ST_KEY_EXPERTS], experts,
                        experts ? "the numbers K of h.L.mlp.experts.K" : "no h.L.mlp.experts.K");
    if (c->experts > 0 && key[ST_KEY_MOE_EVERY] >= 0)
        for (int l = 0; l < c->layers; l++) {
            const char *any = NULL;
            int kind = st_block_kind(f, l, &any), moe = ts_model_config_moe_block(c, l);
            if ((kind == 1) == moe) continue;
            if (moe)
                return ts_error(TS_ERR_FORMAT,
                                "safetensors %s: %s%sblock h.%d of the model is a mixture of %d "
                                "experts (__metadata__ moe_every = %d), the file has %s there",
                                path, any ? any : "", any ? ": " : "", l, c->experts, c->moe_every,
                                kind == 0 ? "a dense MLP" : "no MLP");
            return ts_error(TS_ERR_FORMAT,
                            "safetensors %s: %s: block h.%d of the model is a dense MLP "
                            "(__metadata__ moe_every = %d), the file routes it to experts",
                            path, any, l, c->moe_every);
        }
    int s = 0;
    const st_entry *w =
        c->experts > 0 ? st_files_find(f, "h.0.mlp.experts.0.c_fc.weight", &s) : NULL;
    if (w && w->ndim == 2 && key[ST_KEY_EXPERT_HIDDEN] >= 0 &&
        w->shape[1] != key[ST_KEY_EXPERT_HIDDEN])
        return ts_error(TS_ERR_FORMAT,
                        "safetensors %s: __metadata__ expert_hidden = %d, but the tensors make it "
                        "%lld (h.0.mlp.experts.0.c_fc.weight [%lld, %lld])",
                        path, key[ST_KEY_EXPERT_HIDDEN], (long long)w->shape[1],
                        (long long)w->shape[0], (long long)w->shape[1]);
    if (c->experts > 0 && key[ST_KEY_TOP_K] > c->experts)
        return ts_error(TS_ERR_FORMAT,
                        "safetensors %s: __metadata__ top_k = %d is more than the %d experts (a "
                        "token cannot choose more experts than there are)",
                        path, key[ST_KEY_TOP_K], c->experts);
    if (key[ST_KEY_HEADS] > 0 && c->d_model % key[ST_KEY_HEADS] != 0)
        return ts_error(TS_ERR_FORMAT,
                        "safetensors %s: __metadata__ heads = %d does not divide d_model = %d",
                        path, key[ST_KEY_HEADS], c->d_model);
    return TS_OK;
}

/* The file's tensor for x: there, a dtype tessera reads (F32, BF16, F16),
 * x's shape (*y its entry, *shard its file). */
static ts_status st_tensor_check(const st_files *f, const char *path, const st_tensor *x,
                                 const st_entry **y, int *shard) {
    const st_entry *e = st_files_find(f, x->hf, shard);
    if (!e) return st_missing(f, path, x->hf);
    char name[TS_NAME_MAX + 16], want[64], got[64];
    int64_t shape[2] = {0, 0};
    int nd = st_shape(x, shape);
    st_spell(f, e, x->hf, name, sizeof name);
    st_shape_text(shape, nd, want, sizeof want);
    st_shape_text(e->shape, e->ndim == 2 ? 2 : 1, got, sizeof got);
    if (strcmp(e->dtype, "F32") != 0 && strcmp(e->dtype, "BF16") != 0 &&
        strcmp(e->dtype, "F16") != 0)
        return ts_error(TS_ERR_FORMAT, "safetensors %s: %s is %s (F32, BF16 or F16 expected)",
                        f->h[*shard].path, name, e->dtype);
    if (e->ndim != nd || e->shape[0] != shape[0] || (nd == 2 && e->shape[1] != shape[1]))
        return ts_error(TS_ERR_FORMAT, "safetensors %s: %s has shape [%s]%s, the model's is [%s]",
                        f->h[*shard].path, name, e->ndim ? got : "",
                        e->ndim > 2 ? " (and more)" : "", want);
    *y = e;
    return TS_OK;
}

typedef struct st_check_arg {
    const st_files *f;
    const char *path;
} st_check_arg;

static ts_status st_check_one(const st_tensor *x, void *arg) {
    const st_check_arg *a = arg;
    const st_entry *y;
    int s;
    return st_tensor_check(a->f, a->path, x, &y, &s);
}

/* Every tensor a model of shape *c reads is in the files, of its shape:
 * checked before the model is built, so that what it allocates is bounded
 * by what the files hold (the first tensor missing is found after at most
 * as many as the files have). */
static ts_status st_check_model(const st_files *f, const char *path, const ts_model_config *c) {
    ts_model_config m = *c;
    m.padded_vocab = m.vocab; /* the rows the file holds; the padding is read nowhere */
    for (int s = 0; s < f->n; s++)
        TS_TRY(st_check_blocks(&f->h[s], &m));
    st_check_arg a = {f, path};
    return st_each(&m, path, st_check_one, &a);
}

ts_status ts_safetensors_read_config(const char *path, ts_model_config *cfg) {
    st_files f;
    TS_TRY(st_files_open(path, &f));
    int ws = 0, ps = 0;
    const st_entry *wte = st_files_find(&f, "wte.weight", &ws),
                   *wpe = st_files_find(&f, "wpe.weight", &ps);
    /* The shape from the tensors; the metadata's shape keys must agree. */
    ts_model_config c = *cfg;
    int experts = 0, l;
    ts_status st = st_files_names(&f, &c.layers, &experts);
    if (!st && (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2))
        st = ts_error(TS_ERR_FORMAT,
                      "safetensors %s: no 2-D wte.weight and wpe.weight (transformers' GPT-2 "
                      "names, with or without the 'transformer.' prefix)",
                      path);
    if (!st) {
        c.vocab = (int)wte->shape[0];
        c.d_model = (int)wte->shape[1];
        c.context = (int)wpe->shape[0];
    }
    if (!st && (c.layers < 1 || wte->shape[0] < 1 || wte->shape[1] < 1 || wpe->shape[0] < 1 ||
                wte->shape[0] > INT32_MAX || wte->shape[1] > INT32_MAX ||
                wpe->shape[0] > INT32_MAX || wpe->shape[1] != wte->shape[1]))
        st = ts_error(TS_ERR_FORMAT,
                      "safetensors %s: wte.weight [%lld, %lld], wpe.weight [%lld, %lld] and %d "
                      "blocks h.L are not a GPT-2",
                      path, (long long)wte->shape[0], (long long)wte->shape[1],
                      (long long)wpe->shape[0], (long long)wpe->shape[1], c.layers);
    for (int key = ST_KEY_LAYERS; !st && key <= ST_KEY_CONTEXT; key++)
        if (key != ST_KEY_HEADS && f.key[key] >= 0 && f.key[key] != *st_key_field(&c, key))
            st = ts_error(TS_ERR_FORMAT,
                          "safetensors %s: __metadata__ %s = %d, but the tensors make it %d", path,
                          st_keys[key], f.key[key], *st_key_field(&c, key));
    /* The experts as the tensors show them (block 0 has them if any block
     * has: l % moe_every == 0), then the metadata's keys over them; top_k
     * only the metadata knows, heads the metadata or config.json. */
    const char *any = NULL;
    c.experts = experts;
    if (!st && experts > 0) {
        int second = 0;
        for (l = 1; l < c.layers && !second; l++)
            if (st_block_kind(&f, l, &any) == 1) second = l;
        c.moe_every = second ? second : c.layers;
        for (l = 0; l < c.layers && !st && f.key[ST_KEY_MOE_EVERY] < 0; l++)
            if ((st_block_kind(&f, l, &any) == 1) != ts_model_config_moe_block(&c, l))
                st = ts_error(TS_ERR_FORMAT,
                              "safetensors %s: block h.%d %s experts, which no moe_every gives "
                              "(the first two with experts: h.0, h.%d), and the metadata does "
                              "not say",
                              path, l, ts_model_config_moe_block(&c, l) ? "has no" : "has",
                              c.moe_every);
    }
    for (int key = ST_KEY_HEADS; !st && key < ST_NKEYS; key++)
        if (key != ST_KEY_VOCAB && key != ST_KEY_CONTEXT && f.key[key] >= 0)
            *st_key_field(&c, key) = f.key[key];
    if (!st && c.experts > 0 && f.key[ST_KEY_EXPERT_HIDDEN] < 0) {
        int s;
        const st_entry *w = st_files_find(&f, "h.0.mlp.experts.0.c_fc.weight", &s);
        if (!w || w->ndim != 2 || w->shape[1] < 1 || w->shape[1] > INT32_MAX)
            st = ts_error(TS_ERR_FORMAT,
                          "safetensors %s: no 2-D tensor h.0.mlp.experts.0.c_fc.weight to give "
                          "expert_hidden, and the metadata does not say (experts = %d)",
                          path, c.experts);
        else
            c.expert_hidden = (int)w->shape[1];
    }
    if (!st) st = st_check_counts(&f, path, experts, &c);
    if (!st) st = st_hf_apply(&f, f.key, &c);
    if (!st) st = st_lm_head_check(&f, wte, ws);
    if (!st) st = st_check_model(&f, path, &c);
    if (!st) *cfg = c;
    st_files_close(&f);
    return st;
}

static float st_f16(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0) { /* subnormal or zero */
        float v = (float)m / 1024.0f / 16384.0f;
        return s ? -v : v;
    }
    bits = e == 31 ? s | 0x7f800000u | m << 13 : s | (e + 112) << 23 | m << 13;
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

/* The file's MLP tensors against the model's blocks: no expert of a dense
 * block or past the model's experts, no dense MLP in a block of experts. */
static ts_status st_check_blocks(const st_header *h, const ts_model_config *c) {
    for (int i = 0; i < h->n; i++) {
        const char *x = h->e[i].name;
        int l, k, n = 0, p = 0;
        if (sscanf(x, "h.%d.mlp.%n", &l, &n) != 1 || n == 0) continue;
        if (l < 0 || l >= c->layers)
            return ts_error(TS_ERR_FORMAT, "safetensors %s: %s: the model has %d blocks (h.0-h.%d)",
                            h->path, x, c->layers, c->layers - 1);
        int expert = sscanf(x + n, "experts.%d.%n", &k, &p) == 1 && p > 0;
        int moe_tensor = expert || strncmp(x + n, "router.", 7) == 0;
        if (moe_tensor && !ts_model_config_moe_block(c, l))
            return ts_error(TS_ERR_FORMAT,
                            "safetensors %s: %s: block h.%d of the model is a dense MLP, the file "
                            "routes it to experts",
                            h->path, x, l);
        if (expert && (k < 0 || k >= c->experts))
            return ts_error(TS_ERR_FORMAT,
                            "safetensors %s: %s: expert %d is past the model's %d (experts 0-%d)",
                            h->path, x, k, c->experts, c->experts - 1);
        if (!moe_tensor && strncmp(x + n, "c_", 2) == 0 && ts_model_config_moe_block(c, l))
            return ts_error(TS_ERR_FORMAT,
                            "safetensors %s: %s: block h.%d of the model is a mixture of %d "
                            "experts, the file has a dense MLP there",
                            h->path, x, l, c->experts);
    }
    return TS_OK;
}

/* The error for tensor `name` of the model that the files lack; a block
 * of the file that holds some of its tensors is named with one of them (a
 * block cut short, or a stray tensor past the last whole block). */
static ts_status st_missing(const st_files *f, const char *path, const char *name) {
    char a[TS_NAME_MAX + 16], b[TS_NAME_MAX + 16], pre[24];
    int l, n = 0, count = 0, s0 = 0;
    const st_entry *one = NULL;
    if (sscanf(name, "h.%d.%n", &l, &n) == 1 && n > 0) {
        snprintf(pre, sizeof pre, "h.%d.", l);
        for (int s = 0; s < f->n; s++)
            for (int i = 0; i < f->h[s].n; i++)
                if (strncmp(f->h[s].e[i].name, pre, strlen(pre)) == 0 && count++ == 0)
                    one = &f->h[s].e[i], s0 = s;
    }
    if (!one)
        return ts_error(TS_ERR_FORMAT, "safetensors %s: no tensor %s", path,
                        st_spell(f, NULL, name, a, sizeof a));
    return ts_error(TS_ERR_FORMAT,
                    "safetensors %s: no tensor %s, while block h.%d holds %d other%s (%s in %s): "
                    "a block cut short, or a stray tensor",
                    path, st_spell(f, NULL, name, a, sizeof a), l, count, count == 1 ? "" : "s",
                    st_spell(f, one, one->name, b, sizeof b), f->h[s0].path);
}

ts_status ts_safetensors_load(const char *path, const ts_model *m, float *full) {
    st_files f;
    int n = 0, read = 0;
    TS_TRY(st_files_open(path, &f));
    ts_status st = TS_OK;
    for (int s = 0; !st && s < f.n; s++)
        st = st_check_blocks(&f.h[s], &m->cfg);
    st_tensor *t = st ? NULL : st_tensors(m, &n);
    if (!st && !t) st = TS_ERR_NOMEM;
    memset(full, 0, m->global_numel * sizeof *full);
    for (int i = 0; !st && i < n; i++) {
        const st_tensor *x = &t[i];
        int s = 0;
        const st_entry *y = st_files_find(&f, x->hf, &s);
        const st_header *hp = &f.h[s];
        char name[TS_NAME_MAX + 16];
        int64_t shape[2] = {0, 0};
        int nd = st_shape(x, shape);
        size_t es = y ? st_dtype_bytes(y->dtype) : 0, count = (size_t)(x->file_rows * x->cols);
        char want[64], got[64];
        if (!y) {
            st = st_missing(&f, path, x->hf);
            break;
        }
        read++;
        st_spell(&f, y, x->hf, name, sizeof name);
        st_shape_text(shape, nd, want, sizeof want);
        st_shape_text(y->shape, y->ndim == 2 ? 2 : 1, got, sizeof got);
        if (strcmp(y->dtype, "F32") != 0 && strcmp(y->dtype, "BF16") != 0 &&
            strcmp(y->dtype, "F16") != 0) {
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: %s is %s (F32, BF16 or F16 expected)",
                          hp->path, name, y->dtype);
        } else if (y->ndim != nd || y->shape[0] != shape[0] ||
                   (nd == 2 && y->shape[1] != shape[1])) {
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: %s has shape [%s]%s, the model's is [%s]",
                          hp->path, name, y->ndim ? got : "", y->ndim > 2 ? " (and more)" : "",
                          want);
        }
        if (st) break;
        unsigned char *raw = malloc(count * es);
        if (!raw) {
            st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
            break;
        }
        if (fseek(hp->f, (long)(hp->data_start + y->begin), SEEK_SET) != 0 ||
            fread(raw, es, count, hp->f) != count)
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: truncated in %s", hp->path, name);
        float *dst = full + x->offset;
        for (size_t k = 0; !st && k < count; k++) {
            float v;
            if (es == 4) {
                memcpy(&v, raw + 4 * k, 4);
            } else {
                uint16_t b;
                memcpy(&b, raw + 2 * k, 2);
                if (strcmp(y->dtype, "BF16") == 0) {
                    uint32_t bits = (uint32_t)b << 16;
                    memcpy(&v, &bits, 4);
                } else {
                    v = st_f16(b);
                }
            }
            if (!isfinite(v)) { /* a run from it would skip every step */
                char dims[64];
                st_shape_text(y->shape, y->ndim == 2 ? 2 : 1, dims, sizeof dims);
                st = ts_error(TS_ERR_FORMAT,
                              "safetensors %s: %s holds a value that is not finite (%s at element "
                              "%zu of its [%s]): tessera starts only from finite weights",
                              hp->path, name,
                              isnan(v) ? "nan"
                              : v > 0  ? "inf"
                                       : "-inf",
                              k, dims);
                break;
            }
            /* File element k is row r, column c of the file's layout. */
            size_t r = x->transpose ? k % (size_t)x->file_rows : k / (size_t)x->cols;
            size_t c = x->transpose ? k / (size_t)x->file_rows : k % (size_t)x->cols;
            dst[r * (size_t)x->cols + c] = v;
        }
        free(raw);
    }
    /* Every tensor of the files read, but the buffers and a tied
     * lm_head.weight (ts_safetensors_read_config's checks): when more are
     * there, the first that is no tensor of the model named. */
    int weights = 0, l;
    for (int s = 0; s < f.n; s++)
        for (int i = 0; i < f.h[s].n; i++)
            weights += st_name_kind(f.h[s].e[i].name, &l) == 1 &&
                       strcmp(f.h[s].e[i].name, "lm_head.weight") != 0;
    for (int s = 0; !st && weights != read && s < f.n; s++)
        for (int i = 0; !st && i < f.h[s].n; i++) {
            const st_entry *e = &f.h[s].e[i];
            int used = st_name_kind(e->name, &l) != 1 || strcmp(e->name, "lm_head.weight") == 0;
            for (int k = 0; k < n && !used; k++)
                used = strcmp(t[k].hf, e->name) == 0;
            char a[TS_NAME_MAX + 16];
            if (!used)
                st = ts_error(TS_ERR_FORMAT,
                              "safetensors %s: %s is no tensor of the model (layers = %d, "
                              "experts = %d)",
                              f.h[s].path, st_spell(&f, e, e->name, a, sizeof a), m->cfg.layers,
                              m->cfg.experts);
        }
    free(t);
    st_files_close(&f);
    return st;
}
