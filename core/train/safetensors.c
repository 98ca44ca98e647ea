/*
 * safetensors.c — the GPT-2 weights as a Hugging Face safetensors file
 * (docs/formats.md): `tessera export --format safetensors` writes one,
 * `[model] init = safetensors:PATH` starts from one.
 *
 * The file: an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {...}}, padded with spaces to a multiple of 8), then the
 * data, offsets counted from its start. Names and shapes are transformers'
 * GPT2Model's: its Conv1D layers store their weights as [in, out], the
 * transpose of ours (out, in), so c_attn.weight is [C, 3C]; wte has the V
 * real rows (our Vp - V padding rows are written nowhere, read as zeros).
 * Written in f32; read from F32, BF16 or F16.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cpu_kernels.h"
#include "file.h"
#include "state.h"

/* transformers' name, ours, and whether the weight is stored transposed. */
typedef struct st_map {
    const char *hf, *ours;
    int transpose;
} st_map;

static const st_map st_names[] = {
    {"wte.weight", "wte", 0},
    {"wpe.weight", "wpe", 0},
    {"h.%d.ln_1.weight", "h.%d.ln1.weight", 0},
    {"h.%d.ln_1.bias", "h.%d.ln1.bias", 0},
    {"h.%d.attn.c_attn.weight", "h.%d.attn.qkv.weight", 1},
    {"h.%d.attn.c_attn.bias", "h.%d.attn.qkv.bias", 0},
    {"h.%d.attn.c_proj.weight", "h.%d.attn.proj.weight", 1},
    {"h.%d.attn.c_proj.bias", "h.%d.attn.proj.bias", 0},
    {"h.%d.ln_2.weight", "h.%d.ln2.weight", 0},
    {"h.%d.ln_2.bias", "h.%d.ln2.bias", 0},
    {"h.%d.mlp.c_fc.weight", "h.%d.mlp.fc.weight", 1},
    {"h.%d.mlp.c_fc.bias", "h.%d.mlp.fc.bias", 0},
    {"h.%d.mlp.c_proj.weight", "h.%d.mlp.proj.weight", 1},
    {"h.%d.mlp.c_proj.bias", "h.%d.mlp.proj.bias", 0},
    {"ln_f.weight", "lnf.weight", 0},
    {"ln_f.bias", "lnf.bias", 0},
};
#define ST_NMAP (sizeof st_names / sizeof st_names[0])
#define ST_MAX_HEADER (64u << 20)

static int st_per_layer(const st_map *s) {
    return strchr(s->hf, '%') != NULL;
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

/* Every tensor of the model in file order (count in *n; NULL and the error
 * on failure). */
static st_tensor *st_tensors(const ts_model *m, int *n) {
    int np = ts_model_param_table(&m->cfg, NULL, NULL, NULL);
    char(*names)[TS_NAME_MAX] = malloc((size_t)np * sizeof *names);
    int64_t(*shapes)[3] = malloc((size_t)np * sizeof *shapes);
    st_tensor *t = malloc(((size_t)m->cfg.layers * ST_NMAP + ST_NMAP) * sizeof *t);
    if (!names || !shapes || !t || ts_model_param_table(&m->cfg, names, shapes, NULL) != np) {
        free(names), free(shapes), free(t);
        ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
        return NULL;
    }
    int k = 0;
    for (size_t g = 0; g < ST_NMAP; g++)
        for (int l = 0; l < (st_per_layer(&st_names[g]) ? m->cfg.layers : 1); l++) {
            char ours[TS_NAME_MAX];
            snprintf(ours, sizeof ours, st_names[g].ours, l);
            snprintf(t[k].hf, sizeof t[k].hf, st_names[g].hf, l);
            size_t off = 0;
            int i = 0;
            for (; i < np && strcmp(names[i], ours) != 0; i++)
                off += (size_t)(shapes[i][0] * shapes[i][1] * shapes[i][2]);
            TS_ASSERT(i < np);
            t[k].offset = off;
            /* Matrices (wte, wpe and the products' weights) by their last
             * dimension: (3, C, C) is (3C, C); everything else a vector:
             * (3, C) is 3C. */
            int64_t numel = shapes[i][0] * shapes[i][1] * shapes[i][2];
            int matrix = st_names[g].transpose || g < 2;
            int last = shapes[i][2] > 1 ? 2 : 1;
            t[k].cols = matrix ? shapes[i][last] : 1;
            t[k].rows = numel / t[k].cols;
            t[k].file_rows = strcmp(ours, "wte") == 0 ? m->cfg.vocab : t[k].rows;
            t[k].transpose = st_names[g].transpose;
            k++;
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

ts_status ts_safetensors_save(const char *path, const ts_model *m, const float *full) {
    if (m->cfg.experts > 0)
        return ts_error(TS_ERR_CONFIG,
                        "safetensors export writes transformers' GPT-2, which has no mixture of "
                        "experts ([model] experts = %d)",
                        m->cfg.experts);
    int n = 0;
    st_tensor *t = st_tensors(m, &n);
    if (!t) return TS_ERR_NOMEM;
    size_t data = 0, cap = 256 + (size_t)n * 160, len = 0;
    for (int i = 0; i < n; i++)
        data += (size_t)(t[i].file_rows * t[i].cols);
    char *hdr = malloc(cap);
    float *out = ts_mem_alloc(TS_MEM_OTHER, (data ? data : 1) * sizeof(float));
    ts_status st = hdr && out ? TS_OK : ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    size_t pos = 0;
    if (!st) len += (size_t)snprintf(hdr, cap, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; !st && i < n; i++) {
        const st_tensor *x = &t[i];
        int64_t shape[2];
        char dims[64];
        if (st_shape(x, shape) == 2)
            snprintf(dims, sizeof dims, "%lld,%lld", (long long)shape[0], (long long)shape[1]);
        else
            snprintf(dims, sizeof dims, "%lld", (long long)shape[0]);
        size_t count = (size_t)(x->file_rows * x->cols);
        len += (size_t)snprintf(hdr + len, cap - len,
                                ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%s],"
                                "\"data_offsets\":[%zu,%zu]}",
                                x->hf, dims, pos * 4, (pos + count) * 4);
        const float *src = full + x->offset;
        for (int64_t r = 0; r < x->file_rows; r++)
            for (int64_t c = 0; c < x->cols; c++)
                out[pos + (x->transpose ? (size_t)(c * x->file_rows + r)
                                        : (size_t)(r * x->cols + c))] = src[r * x->cols + c];
        pos += count;
    }
    if (!st) {
        len += (size_t)snprintf(hdr + len, cap - len, "}");
        while (len % 8)
            hdr[len++] = ' ';
        uint64_t n8 = len;
        unsigned char lenb[8];
        for (int b = 0; b < 8; b++)
            lenb[b] = (unsigned char)(n8 >> (8 * b));
        const void *bufs[3] = {lenb, hdr, out};
        size_t sizes[3] = {8, len, data * sizeof(float)};
        st = ts_write_atomic(path, 3, bufs, sizes);
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

static ts_status st_string(st_json *j, char *out, size_t cap) {
    if (!st_eat(j, '"')) return st_bad(j, "a string expected");
    size_t n = 0;
    while (j->p < j->end && *j->p != '"') {
        char c = *j->p++;
        if (c == '\\' && j->p < j->end) c = *j->p++;
        if (n + 1 < cap) out[n++] = c;
    }
    if (j->p >= j->end) return st_bad(j, "an unterminated string");
    j->p++;
    out[n] = '\0';
    return TS_OK;
}

static ts_status st_int(st_json *j, int64_t *v) {
    st_ws(j);
    char *e = NULL;
    long long x = strtoll(j->p, &e, 10);
    if (e == j->p || e > j->end || x < 0) return st_bad(j, "a non-negative integer expected");
    j->p = e;
    *v = x;
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

/* Skips an object of string values (__metadata__). */
static ts_status st_skip_strings(st_json *j) {
    if (!st_eat(j, '{')) return st_bad(j, "an object expected");
    if (st_eat(j, '}')) return TS_OK;
    char tmp[256];
    do {
        TS_TRY(st_string(j, tmp, sizeof tmp));
        if (!st_eat(j, ':')) return st_bad(j, "':' expected");
        TS_TRY(st_string(j, tmp, sizeof tmp));
    } while (st_eat(j, ','));
    return st_eat(j, '}') ? TS_OK : st_bad(j, "',' or '}' expected");
}

static ts_status st_entry_read(st_json *j, st_entry *e) {
    if (!st_eat(j, '{')) return st_bad(j, "an object expected");
    int seen = 0;
    do {
        char key[32];
        TS_TRY(st_string(j, key, sizeof key));
        if (!st_eat(j, ':')) return st_bad(j, "':' expected");
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

/* The header of `path`: its entries (malloc'd, *n of them), the open file
 * and where the data starts. */
static ts_status st_read_header(const char *path, st_entry **out, int *n, FILE **fout,
                                uint64_t *data_start, uint64_t *data_size) {
    FILE *f = NULL;
    TS_TRY(ts_file_open_read(path, "safetensors", &f));
    struct stat sb;
    unsigned char lenb[8];
    if (fstat(fileno(f), &sb) != 0 || fread(lenb, 1, 8, f) != 8) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT, "safetensors %s: shorter than its 8-byte header length",
                        path);
    }
    uint64_t len = 0;
    for (int b = 7; b >= 0; b--)
        len = len << 8 | lenb[b];
    if (len > ST_MAX_HEADER || len + 8 > (uint64_t)sb.st_size) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT,
                        "safetensors %s: header length %llu does not fit the file of %lld bytes",
                        path, (unsigned long long)len, (long long)sb.st_size);
    }
    char *hdr = malloc(len + 1);
    int cap = 64, count = 0;
    st_entry *e = malloc((size_t)cap * sizeof *e);
    ts_status st = hdr && e ? TS_OK : ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
    if (!st && fread(hdr, 1, len, f) != len)
        st = ts_error(TS_ERR_FORMAT, "safetensors %s: truncated header", path);
    if (hdr) hdr[len] = '\0'; /* numbers are parsed with strtoll */
    st_json j = {hdr, hdr, hdr + len, path};
    if (!st && !st_eat(&j, '{')) st = st_bad(&j, "the header is not an object");
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
            st = st_skip_strings(&j);
            continue;
        }
        if (count == cap) {
            st_entry *g = realloc(e, (size_t)(cap *= 2) * sizeof *g);
            if (!g) {
                st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
                break;
            }
            e = g;
        }
        memset(&e[count], 0, sizeof e[count]);
        snprintf(e[count].name, sizeof e[count].name, "%s", name);
        st = st_entry_read(&j, &e[count]);
        if (!st) count++;
    }
    free(hdr);
    if (st) {
        free(e);
        fclose(f);
        return st;
    }
    *out = e;
    *n = count;
    *fout = f;
    *data_start = 8 + len;
    *data_size = (uint64_t)sb.st_size - 8 - len;
    return TS_OK;
}

static const st_entry *st_find(const st_entry *e, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(e[i].name, name) == 0) return &e[i];
    return NULL;
}

ts_status ts_safetensors_read_config(const char *path, ts_model_config *cfg) {
    st_entry *e = NULL;
    int n = 0;
    FILE *f = NULL;
    uint64_t start, size;
    TS_TRY(st_read_header(path, &e, &n, &f, &start, &size));
    fclose(f);
    const st_entry *wte = st_find(e, n, "wte.weight"), *wpe = st_find(e, n, "wpe.weight");
    ts_status st = TS_OK;
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2)
        st = ts_error(TS_ERR_FORMAT,
                      "safetensors %s: no 2-D wte.weight and wpe.weight (transformers' GPT2Model "
                      "names, without a 'transformer.' prefix)",
                      path);
    int layers = 0;
    for (int i = 0; !st && i < n; i++) {
        int l;
        if (sscanf(e[i].name, "h.%d.", &l) == 1 && l + 1 > layers) layers = l + 1;
    }
    if (!st) {
        cfg->vocab = (int)wte->shape[0];
        cfg->d_model = (int)wte->shape[1];
        cfg->context = (int)wpe->shape[0];
        cfg->layers = layers;
    }
    free(e);
    return st;
}

/* Element size of a dtype the reader takes (0: not one). */
static size_t st_dtype_size(const char *d) {
    return strcmp(d, "F32") == 0 ? 4 : strcmp(d, "BF16") == 0 || strcmp(d, "F16") == 0 ? 2 : 0;
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

ts_status ts_safetensors_load(const char *path, const ts_model *m, float *full) {
    if (m->cfg.experts > 0)
        return ts_error(TS_ERR_CONFIG,
                        "%s: transformers' GPT-2 has no mixture of experts, and [model] experts "
                        "= %d",
                        path, m->cfg.experts);
    st_entry *e = NULL;
    int ne = 0, n = 0;
    FILE *f = NULL;
    uint64_t start, size;
    TS_TRY(st_read_header(path, &e, &ne, &f, &start, &size));
    st_tensor *t = st_tensors(m, &n);
    ts_status st = t ? TS_OK : TS_ERR_NOMEM;
    memset(full, 0, m->global_numel * sizeof *full);
    for (int i = 0; !st && i < n; i++) {
        const st_tensor *x = &t[i];
        const st_entry *y = st_find(e, ne, x->hf);
        int64_t shape[2];
        int nd = st_shape(x, shape);
        size_t es = y ? st_dtype_size(y->dtype) : 0, count = (size_t)(x->file_rows * x->cols);
        if (!y) {
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: no tensor %s", path, x->hf);
        } else if (!es) {
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: %s is %s (F32, BF16 or F16 expected)",
                          path, x->hf, y->dtype);
        } else if (y->ndim != nd || y->shape[0] != shape[0] ||
                   (nd == 2 && y->shape[1] != shape[1])) {
            st = ts_error(TS_ERR_FORMAT,
                          "safetensors %s: %s has shape [%lld%s%lld], the model's is [%lld%s%lld]",
                          path, x->hf, (long long)y->shape[0], y->ndim > 1 ? "," : "",
                          y->ndim > 1 ? (long long)y->shape[1] : 0LL, (long long)shape[0],
                          nd > 1 ? "," : "", nd > 1 ? (long long)shape[1] : 0LL);
        } else if (y->end - y->begin != count * es || y->end > size) {
            st = ts_error(TS_ERR_FORMAT,
                          "safetensors %s: %s's data_offsets [%llu, %llu) do not hold its %zu "
                          "elements within the %llu data bytes",
                          path, x->hf, (unsigned long long)y->begin, (unsigned long long)y->end,
                          count, (unsigned long long)size);
        }
        if (st) break;
        unsigned char *raw = malloc(count * es);
        if (!raw) {
            st = ts_error(TS_ERR_NOMEM, "safetensors: out of memory");
            break;
        }
        if (fseek(f, (long)(start + y->begin), SEEK_SET) != 0 || fread(raw, es, count, f) != count)
            st = ts_error(TS_ERR_FORMAT, "safetensors %s: truncated in %s", path, x->hf);
        float *dst = full + x->offset;
        for (size_t k = 0; !st && k < count; k++) {
            float v;
            if (es == 4) {
                memcpy(&v, raw + 4 * k, 4);
            } else {
                uint16_t h;
                memcpy(&h, raw + 2 * k, 2);
                if (strcmp(y->dtype, "BF16") == 0) {
                    uint32_t bits = (uint32_t)h << 16;
                    memcpy(&v, &bits, 4);
                } else {
                    v = st_f16(h);
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
    free(e);
    fclose(f);
    return st;
}
