/*
 * tensor.c — tensor bookkeeping: sizes, allocation through the accounted
 * allocator, views.
 */
#include <stdio.h>
#include <string.h>

#include "tessera/tessera.h"

size_t ts_dtype_size(ts_dtype dt) {
    switch (dt) {
    case TS_F32: return 4;
    case TS_BF16: return 2;
    case TS_F16: return 2;
    case TS_I32: return 4;
    case TS_U16: return 2;
    }
    return 0;
}

const char *ts_dtype_name(ts_dtype dt) {
    switch (dt) {
    case TS_F32: return "f32";
    case TS_BF16: return "bf16";
    case TS_F16: return "f16";
    case TS_I32: return "i32";
    case TS_U16: return "u16";
    }
    return "?";
}

int64_t ts_tensor_numel(const ts_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

size_t ts_tensor_bytes(const ts_tensor *t) {
    return (size_t)ts_tensor_numel(t) * ts_dtype_size(t->dtype);
}

void ts_tensor_view(ts_tensor *t, const char *name, ts_dtype dtype, int ndim, const int64_t *shape,
                    void *data, ts_mem_category cat) {
    TS_ASSERT(ndim >= 0 && ndim <= TS_MAX_DIMS);
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name ? name : "");
    t->dtype = dtype;
    t->device = TS_DEVICE_CPU;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t->shape[i] = shape[i];
    t->data = data;
    t->cat = cat;
    t->owns_data = 0;
}

ts_status ts_tensor_alloc(ts_tensor *t, const char *name, ts_dtype dtype, int ndim,
                          const int64_t *shape, ts_mem_category cat) {
    if (ndim < 0 || ndim > TS_MAX_DIMS)
        return ts_error(TS_ERR_INVALID, "tensor %s: %d dimensions (at most %d)", name, ndim,
                        TS_MAX_DIMS);
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0)
            return ts_error(TS_ERR_INVALID, "tensor %s: negative dimension %d", name, i);
    ts_tensor_view(t, name, dtype, ndim, shape, NULL, cat);
    size_t bytes = ts_tensor_bytes(t);
    t->data = ts_mem_alloc(cat, bytes ? bytes : 1);
    if (!t->data) return TS_ERR_NOMEM;
    t->owns_data = 1;
    return TS_OK;
}

void ts_tensor_free(ts_tensor *t) {
    if (t->owns_data) ts_mem_free(t->data);
    memset(t, 0, sizeof *t);
}
