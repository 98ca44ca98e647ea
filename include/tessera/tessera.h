/*
 * tessera.h — the public types every part of tessera speaks: status codes and
 * the last-error string, element types, memory categories, and the tensor.
 *
 * This header is part of the SDK installed under include/tessera/. It declares
 * plain data and a handful of functions of the core library; it does not
 * declare the model, the optimizer or the training loop (those live in core/).
 */
#ifndef TESSERA_TESSERA_H
#define TESSERA_TESSERA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Errors are values. Every function that can fail returns a ts_status; the
 * human-readable message is kept in a thread-local string that names where the
 * failure happened (rank, file, line, key). TS_OK is zero so that
 * `if (st) return st;` reads naturally.
 * ------------------------------------------------------------------------- */
typedef enum ts_status {
    TS_OK = 0,
    TS_ERR_INVALID = 1,  /* an argument or value is out of range               */
    TS_ERR_CONFIG = 2,   /* the INI file or a --set override is wrong          */
    TS_ERR_IO = 3,       /* a file could not be opened, read or written        */
    TS_ERR_FORMAT = 4,   /* a file was read but its contents are malformed     */
    TS_ERR_NOMEM = 5,    /* the allocator could not satisfy a request          */
    TS_ERR_COMM = 6,     /* a communication operation failed or timed out      */
    TS_ERR_PLUGIN = 7,   /* a plugin could not be loaded or registered         */
    TS_ERR_INTERNAL = 8, /* a broken invariant of our own                      */
} ts_status;

/* Sets the last-error message (printf-style) prefixed with "[rank r/w] " when
 * the rank is known, and returns `code` so that callers can write
 * `return ts_error(TS_ERR_CONFIG, "...")`. */
ts_status ts_error(ts_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The message of the most recent failure on this thread ("" if none). The
 * string is owned by the core and valid until the next ts_error call. */
const char *ts_last_error(void);
/* The same without the "[rank r/w] " prefix, for wrapping in a new message
 * (ts_error adds the prefix again). */
const char *ts_last_error_bare(void);

/* A short name for a status code ("config error", ...). */
const char *ts_status_name(ts_status st);

/* Tells the error machinery which rank this process is, for message prefixes. */
void ts_error_set_rank(int rank, int world);

/* Propagates a failure to the caller. */
#define TS_TRY(expr)                                                                               \
    do {                                                                                           \
        ts_status ts_try_status_ = (expr);                                                         \
        if (ts_try_status_ != TS_OK) return ts_try_status_;                                        \
    } while (0)

/* Aborts the process on a broken invariant of our own (never on bad input). */
void ts_assert_fail(const char *expr, const char *file, int line);
#define TS_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) ts_assert_fail(#cond, __FILE__, __LINE__);                                    \
    } while (0)

/* ---------------------------------------------------------------------------
 * Element types and devices.
 * ------------------------------------------------------------------------- */
typedef enum ts_dtype {
    TS_F32 = 0,
    TS_BF16 = 1,
    TS_F16 = 2,
    TS_I32 = 3,
    TS_U16 = 4,
} ts_dtype;

typedef enum ts_device {
    TS_DEVICE_CPU = 0,
    TS_DEVICE_CUDA = 1,
    TS_DEVICE_PLAN = 2, /* `tessera plan`'s dry run: memory is only counted,
                           kernels run nothing (never dereference it)    */
} ts_device;

size_t ts_dtype_size(ts_dtype dt);
const char *ts_dtype_name(ts_dtype dt);

/* bf16 is the upper half of an IEEE f32. Conversion rounds to nearest, ties to
 * even; NaN stays NaN. */
static inline uint16_t ts_f32_to_bf16(float f) {
    union {
        float f;
        uint32_t u;
    } v = {f};
    if ((v.u & 0x7f800000u) == 0x7f800000u && (v.u & 0x007fffffu))
        return (uint16_t)((v.u >> 16) | 0x40u); /* quiet NaN */
    uint32_t rounding = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + rounding) >> 16);
}
static inline float ts_bf16_to_f32(uint16_t h) {
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)h << 16};
    return v.f;
}

/* ---------------------------------------------------------------------------
 * Memory categories. Every byte of tensor memory is allocated through the core
 * allocator under one of these, so that allocated / reserved / peak can be
 * reported per category and per rank and compared with the analytic estimate.
 * ------------------------------------------------------------------------- */
typedef enum ts_mem_category {
    TS_MEM_PARAMS = 0, /* model weights (the compute copy)                  */
    TS_MEM_GRADS = 1,  /* gradients of the weights                          */
    TS_MEM_OPTIM = 2,  /* optimizer state: master weights and moments       */
    TS_MEM_ACTS = 3,   /* activations, their gradients, backward workspace  */
    TS_MEM_COMM = 4,   /* communication buffers                             */
    TS_MEM_OTHER = 5,  /* data batches and everything else                  */
    TS_MEM_NCAT = 6,
} ts_mem_category;

typedef struct ts_mem_counter {
    size_t allocated; /* bytes handed out and not yet freed                     */
    size_t reserved;  /* bytes held from the system (allocated + headers/pool)  */
    size_t peak;      /* the highest `allocated` ever seen                      */
} ts_mem_counter;

const char *ts_mem_category_name(ts_mem_category cat);

/* Allocates `bytes` (64-byte aligned, zero-filled) under `cat`. Returns NULL
 * and sets the last error on failure. Free with ts_mem_free. */
void *ts_mem_alloc(ts_mem_category cat, size_t bytes);
void ts_mem_free(void *ptr);

/* Counters of one category, or of all together with cat == TS_MEM_NCAT (the
 * total peak is the peak of the sum, not the sum of the peaks). */
ts_mem_counter ts_mem_stats(ts_mem_category cat);
/* Forgets the peaks (sets each to the current allocation). */
void ts_mem_reset_peak(void);
/* Returns the blocks the allocator keeps for reuse (freed activation,
 * communication and other blocks of 1 MiB and more) to the system. */
void ts_mem_trim(void);

/* This machine's physical memory in bytes (0 when unknown). The accounted
 * allocator refuses a request that would take its total beyond it, since
 * such memory could be granted and the process killed when it is touched. */
size_t ts_physical_memory(void);

/* ---------------------------------------------------------------------------
 * Tensors: a contiguous row-major block of one dtype on one device.
 * ------------------------------------------------------------------------- */
#define TS_MAX_DIMS 4
#define TS_NAME_MAX 64

typedef struct ts_tensor {
    char name[TS_NAME_MAX];
    ts_dtype dtype;
    ts_device device;
    int ndim;
    int64_t shape[TS_MAX_DIMS];
    void *data;          /* NULL until allocated or viewed                   */
    ts_mem_category cat; /* the category its bytes are counted under         */
    int owns_data;       /* 1 if ts_tensor_free must release `data`          */
} ts_tensor;

int64_t ts_tensor_numel(const ts_tensor *t);
size_t ts_tensor_bytes(const ts_tensor *t);

/* Fills in `t` and allocates its data through the accounted allocator. */
ts_status ts_tensor_alloc(ts_tensor *t, const char *name, ts_dtype dtype, int ndim,
                          const int64_t *shape, ts_mem_category cat);
/* Fills in `t` as a view onto memory owned by someone else. */
void ts_tensor_view(ts_tensor *t, const char *name, ts_dtype dtype, int ndim, const int64_t *shape,
                    void *data, ts_mem_category cat);
/* Releases owned data (a view is left alone) and clears the struct. */
void ts_tensor_free(ts_tensor *t);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TESSERA_H */
