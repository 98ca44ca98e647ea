/*
 * tessera_types.h — the types every part of tessera speaks: status codes,
 * element types and devices, memory categories and the tensor, with the
 * static inline helpers that need nothing of the library (TS_TRY, bf16
 * rounding).
 *
 * This header is part of the SDK installed under include/tessera/. It
 * declares no function of libtessera, so a plugin (which links nothing of
 * tessera's) may include it: plugin.h does. tessera.h includes it and
 * declares the library's functions on these types (ts_error, ts_mem_alloc,
 * ts_tensor_alloc, ...), for programs that link libtessera.
 */
#ifndef TESSERA_TESSERA_TYPES_H
#define TESSERA_TESSERA_TYPES_H

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

/* Propagates a failure to the caller. */
#define TS_TRY(expr)                                                                               \
    do {                                                                                           \
        ts_status ts_try_status_ = (expr);                                                         \
        if (ts_try_status_ != TS_OK) return ts_try_status_;                                        \
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

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_TESSERA_TYPES_H */
