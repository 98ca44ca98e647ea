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
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    int transpose;
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

/* Every tensor of the model in file order, the model's declared order with
 * each experts' tensor as E (count in *n; NULL and the error on failure). */
static st_tensor *st_tensors(const ts_model *m, int *n) {
    int np = ts_model_param_table(&m->cfg, NULL, NULL, NULL);
    char(*names)[TS_NAME_MAX] = malloc((size_t)np * sizeof *names);
    int64_t(*shapes)[3] = malloc((size_t)np * sizeof *shapes);
    size_t cap = (size_t)np * (size_t)(m->cfg.experts > 1 ? m->cfg.experts : 1);
    st_tensor *t = malloc(cap * sizeof *t);
    if (!names || !shapes || !t || ts_model_param_table(&m->cfg, names, shapes, NULL) != np) {
        free(names), free(shapes), free(t);
        ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
        return NULL;
    }
    int k = 0;
    size_t off = 0;
    for (int i = 0; i < np; i++) {
        int layer;
        const st_map *s = st_lookup(names[i], &layer);
        TS_ASSERT(s != NULL); /* every parameter of the architectures has a name here */
        int64_t numel = shapes[i][0] * shapes[i][1] * shapes[i][2];
        int64_t copies = s->experts ? shapes[i][0] : 1, each = numel / copies;
        /* Matrices (wte, wpe and the products' weights) by their last
         * dimension: (3, C, C) is (3C, C), an expert's (F, C) is (F, C);
         * everything else a vector: (3, C) is 3C. */
        int matrix = s->transpose || strcmp(s->ours, "wte") == 0 || strcmp(s->ours, "wpe") == 0;
        int64_t last = shapes[i][2] > 1 ? shapes[i][2] : shapes[i][1];
        for (int64_t e = 0; e < copies; e++, k++) {
            char hf[40]; /* the longest: mlp.experts.65535.c_proj.weight */
            snprintf(hf, sizeof hf, s->hf, (int)e);
            if (layer >= 0)
                snprintf(t[k].hf, sizeof t[k].hf, "h.%d.%s", layer, hf);
            else
                snprintf(t[k].hf, sizeof t[k].hf, "%s", hf);
            t[k].offset = off + (size_t)(e * each);
            t[k].cols = matrix ? last : 1;
            t[k].rows = each / t[k].cols;
            t[k].file_rows = layer < 0 && strcmp(s->ours, "wte") == 0 ? m->cfg.vocab : t[k].rows;
            t[k].transpose = s->transpose;
        }
        off += (size_t)numel;
    }
    free(names), free(shapes);
    *n = k;
    return t;
}

/* The file's shape of a tensor: [rows, cols] or, stored transposed,
 * [cols, rows]; a vector [rows] when it has one column. */
static int st_shape(const st_tensor *t, int64_t *shape) {
    if (t->cols == 1) {
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
} st_json;

static ts_status st_bad(const st_json *j, const char *what) {
    return ts_error(TS_ERR_FORMAT, "safetensors %s: header JSON, at byte %lld of it: %s", j->path,
                    (long long)(j->p - j->base), what);
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

/* A JSON string, its escapes decoded (\uXXXX as UTF-8, a surrogate pair
 * joined), into out (cap bytes with the NUL), or only checked when out is
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
    size_t n = 0, cap = 0;
    st_key_at *keys = NULL;
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
        if (!(keys[n].key = malloc(len + 1))) {
            st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
            break;
        }
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
    for (size_t i = 0; i < n; i++)
        free(keys[i].key);
    free(keys);
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
    st_json j = {hdr, hdr, hdr + len, path};
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

/* What the file holds of block l's MLP: 1 experts (a router or an expert's
 * tensor), 0 a dense MLP, -1 neither; *name one of its tensors. */
static int st_block_kind(const st_header *h, int l, const char **name) {
    char pre[64];
    int n = snprintf(pre, sizeof pre, "h.%d.mlp.", l), kind = -1;
    for (int i = 0; i < h->n && kind < 1; i++) {
        const char *x = h->e[i].name;
        if (strncmp(x, pre, (size_t)n) != 0) continue;
        if (strncmp(x + n, "router.", 7) == 0 || strncmp(x + n, "experts.", 8) == 0) {
            kind = 1, *name = x;
        } else if (kind < 0 && strncmp(x + n, "c_", 2) == 0) {
            kind = 0, *name = x;
        }
    }
    return kind;
}

ts_status ts_safetensors_read_config(const char *path, ts_model_config *cfg) {
    st_header h;
    TS_TRY(st_header_read(path, &h));
    const st_entry *wte = st_find(&h, "wte.weight"), *wpe = st_find(&h, "wpe.weight");
    ts_status st = TS_OK;
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2)
        st = ts_error(TS_ERR_FORMAT,
                      "safetensors %s: no 2-D wte.weight and wpe.weight (transformers' GPT2Model "
                      "names, without a 'transformer.' prefix)",
                      path);
    /* The shape from the tensors; the metadata's shape keys must agree. */
    ts_model_config c = *cfg;
    int experts = 0, l, k, n;
    c.layers = 0;
    for (int i = 0; !st && i < h.n; i++) {
        const char *x = h.e[i].name;
        if (sscanf(x, "h.%d.", &l) == 1 && (l < 0 || l >= TS_MODEL_MAX_MODULES - 2))
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: %s: block %d is not in 0-%d", path, x, l,
                          TS_MODEL_MAX_MODULES - 3);
        else if (sscanf(x, "h.%d.", &l) == 1 && l + 1 > c.layers)
            c.layers = l + 1;
        n = 0;
        if (!st && sscanf(x, "h.%d.mlp.experts.%d.%n", &l, &k, &n) == 2 && n > 0) {
            if (k < 0 || k >= 65536)
                st = ts_error(TS_ERR_FORMAT, "safetensors %s: %s: expert %d is not in 0-65535",
                              path, x, k);
            else if (k + 1 > experts)
                experts = k + 1;
        }
    }
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
        if (key != ST_KEY_HEADS && h.key[key] >= 0 && h.key[key] != *st_key_field(&c, key))
            st = ts_error(TS_ERR_FORMAT,
                          "safetensors %s: __metadata__ %s = %d, but the tensors make it %d", path,
                          st_keys[key], h.key[key], *st_key_field(&c, key));
    /* The experts as the tensors show them (block 0 has them if any block
     * has: l % moe_every == 0), then the metadata's keys over them; top_k
     * only the metadata knows, heads too. */
    const char *any = NULL;
    c.experts = experts;
    if (!st && experts > 0) {
        int second = 0;
        for (l = 1; l < c.layers && !second; l++)
            if (st_block_kind(&h, l, &any) == 1) second = l;
        c.moe_every = second ? second : c.layers;
        for (l = 0; l < c.layers && !st && h.key[ST_KEY_MOE_EVERY] < 0; l++)
            if ((st_block_kind(&h, l, &any) == 1) != ts_model_config_moe_block(&c, l))
                st = ts_error(TS_ERR_FORMAT,
                              "safetensors %s: block h.%d %s experts, which no moe_every gives "
                              "(the first two with experts: h.0, h.%d), and the metadata does "
                              "not say",
                              path, l, ts_model_config_moe_block(&c, l) ? "has no" : "has",
                              c.moe_every);
    }
    for (int key = ST_KEY_HEADS; !st && key < ST_NKEYS; key++)
        if (key != ST_KEY_VOCAB && key != ST_KEY_CONTEXT && h.key[key] >= 0)
            *st_key_field(&c, key) = h.key[key];
    if (!st && c.experts > 0 && h.key[ST_KEY_EXPERT_HIDDEN] < 0) {
        const st_entry *w = st_find(&h, "h.0.mlp.experts.0.c_fc.weight");
        if (!w || w->ndim != 2 || w->shape[1] < 1 || w->shape[1] > INT32_MAX)
            st = ts_error(TS_ERR_FORMAT,
                          "safetensors %s: no 2-D tensor h.0.mlp.experts.0.c_fc.weight to give "
                          "expert_hidden, and the metadata does not say (experts = %d)",
                          path, c.experts);
        else
            c.expert_hidden = (int)w->shape[1];
    }
    if (!st) *cfg = c;
    st_header_close(&h);
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

ts_status ts_safetensors_load(const char *path, const ts_model *m, float *full) {
    st_header h;
    int n = 0;
    TS_TRY(st_header_read(path, &h));
    ts_status st = st_check_blocks(&h, &m->cfg);
    st_tensor *t = st ? NULL : st_tensors(m, &n);
    if (!st && !t) st = TS_ERR_NOMEM;
    memset(full, 0, m->global_numel * sizeof *full);
    for (int i = 0; !st && i < n; i++) {
        const st_tensor *x = &t[i];
        const st_entry *y = st_find(&h, x->hf);
        int64_t shape[2] = {0, 0};
        int nd = st_shape(x, shape);
        size_t es = y ? st_dtype_bytes(y->dtype) : 0, count = (size_t)(x->file_rows * x->cols);
        char want[64], got[64];
        if (!y) {
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: no tensor %s", path, x->hf);
            break;
        }
        st_shape_text(shape, nd, want, sizeof want);
        st_shape_text(y->shape, y->ndim == 2 ? 2 : 1, got, sizeof got);
        if (strcmp(y->dtype, "F32") != 0 && strcmp(y->dtype, "BF16") != 0 &&
            strcmp(y->dtype, "F16") != 0) {
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: %s is %s (F32, BF16 or F16 expected)",
                          path, x->hf, y->dtype);
        } else if (y->ndim != nd || y->shape[0] != shape[0] ||
                   (nd == 2 && y->shape[1] != shape[1])) {
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: %s has shape [%s]%s, the model's is [%s]",
                          path, x->hf, y->ndim ? got : "", y->ndim > 2 ? " (and more)" : "", want);
        }
        if (st) break;
        unsigned char *raw = malloc(count * es);
        if (!raw) {
            st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
            break;
        }
        if (fseek(h.f, (long)(h.data_start + y->begin), SEEK_SET) != 0 ||
            fread(raw, es, count, h.f) != count)
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: truncated in %s", path, x->hf);
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
            /* File element k is row r, column c of the file's layout. */
            size_t r = x->transpose ? k % (size_t)x->file_rows : k / (size_t)x->cols;
            size_t c = x->transpose ? k / (size_t)x->file_rows : k % (size_t)x->cols;
            dst[r * (size_t)x->cols + c] = v;
        }
        free(raw);
    }
    free(t);
    st_header_close(&h);
    return st;
}
