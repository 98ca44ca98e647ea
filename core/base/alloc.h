/*
 * alloc.h — the accounted allocator's entry for the core's backends.
 */
#ifndef TESSERA_CORE_BASE_ALLOC_H
#define TESSERA_CORE_BASE_ALLOC_H

#include <stddef.h>

#include "internal.h"
#include "tessera/tessera.h"

/* ts_mem_alloc, with a block reused from the cache handed to `zero` (a new
 * mapping comes zeroed from the system; a small block is zeroed with
 * memset): the CPU backend passes its threads' ts_cpu_zero, and for
 * alloc_uninit a function that leaves the block as it was. */
TS_INTERNAL void *ts_mem_alloc_with(ts_mem_category cat, size_t bytes,
                                    void (*zero)(void *ptr, size_t bytes));

#endif /* TESSERA_CORE_BASE_ALLOC_H */
