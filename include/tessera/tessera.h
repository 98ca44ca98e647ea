/*
 * tessera.h — the library's functions on the types every part of tessera
 * speaks (tessera_types.h): the last-error string, element types, the
 * accounted allocator and its counters, and tensors.
 *
 * This header is part of the SDK installed under include/tessera/. It declares
 * the core library's functions on them (errors, the accounted allocator,
 * tensors) for programs that link libtessera; the types themselves are in
 * tessera_types.h, which plugins get through plugin.h. It does not declare
 * the model, the optimizer or the training loop (those live in core/).
 */
#ifndef TESSERA_TESSERA_H
#define TESSERA_TESSERA_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/tessera_types.h" /* ts_status, ts_dtype, ts_tensor, ... */

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Errors (ts_status and TS_TRY: tessera_types.h).
 * ------------------------------------------------------------------------- */

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

/* Aborts the process on a broken invariant of our own (never on bad input). */
void ts_assert_fail(const char *expr, const char *file, int line);
#define TS_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) ts_assert_fail(#cond, __FILE__, __LINE__);                                    \
    } while (0)

/* Element types (ts_dtype, ts_device: tessera_types.h). */
size_t ts_dtype_size(ts_dtype dt);
const char *ts_dtype_name(ts_dtype dt);

/* The accounted allocator (ts_mem_category, ts_mem_counter: tessera_types.h). */
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

/* Tensors (ts_tensor: tessera_types.h). */
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
