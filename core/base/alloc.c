/*
 * alloc.c — the accounted host allocator.
 *
 * Every block carries a 64-byte header recording its size and category, so
 * that frees are counted against the category they were allocated under.
 * `reserved` counts what is held from the system (payload rounded up to 64
 * bytes plus the header); `allocated` counts the payload asked for. Counters
 * are updated with atomics so OpenMP threads may allocate.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* sysconf */

#include "tessera/tessera.h"

#define ALLOC_ALIGN 64
#define ALLOC_MAGIC 0x7e55e7a5u

typedef struct alloc_header {
    size_t bytes;
    uint32_t magic;
    uint32_t cat;
    char pad[ALLOC_ALIGN - sizeof(size_t) - 2 * sizeof(uint32_t)];
} alloc_header;

_Static_assert(sizeof(alloc_header) == ALLOC_ALIGN, "header keeps alignment");

static _Atomic size_t alloc_allocated[TS_MEM_NCAT + 1];
static _Atomic size_t alloc_reserved[TS_MEM_NCAT + 1];
static _Atomic size_t alloc_peak[TS_MEM_NCAT + 1];

static const char *alloc_names[TS_MEM_NCAT + 1] = {"params", "grads", "optimizer", "activations",
                                                   "comm",   "other", "total"};

const char *ts_mem_category_name(ts_mem_category cat) {
    if ((int)cat < 0 || cat > TS_MEM_NCAT) return "?";
    return alloc_names[cat];
}

static void alloc_raise_peak(int idx, size_t now) {
    size_t old = atomic_load(&alloc_peak[idx]);
    while (now > old && !atomic_compare_exchange_weak(&alloc_peak[idx], &old, now)) {
    }
}

size_t ts_physical_memory(void) {
    static size_t phys;
    if (!phys) {
        long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        if (pages > 0 && page > 0) phys = (size_t)pages * (size_t)page;
    }
    return phys;
}

static size_t alloc_reserved_bytes(size_t bytes) {
    return sizeof(alloc_header) + ((bytes + ALLOC_ALIGN - 1) / ALLOC_ALIGN) * ALLOC_ALIGN;
}

void *ts_mem_alloc(ts_mem_category cat, size_t bytes) {
    if ((int)cat < 0 || cat >= TS_MEM_NCAT) {
        ts_error(TS_ERR_INVALID, "allocator: unknown memory category %d", (int)cat);
        return NULL;
    }
    /* Refused before anything is touched: a size whose rounding overflows,
     * and a request that would take the accounted total beyond the
     * machine's physical memory (which the kernel might grant, only to
     * kill the process when the pages are first written). */
    size_t phys = ts_physical_memory();
    if (bytes > SIZE_MAX - 2 * ALLOC_ALIGN ||
        (phys && atomic_load(&alloc_reserved[TS_MEM_NCAT]) + bytes > phys)) {
        ts_error(TS_ERR_NOMEM,
                 "allocator: %zu bytes of %s (%.1f GiB) would exceed this machine's memory "
                 "(%.1f GiB, %.1f GiB of it already allocated)",
                 bytes, alloc_names[cat], (double)bytes / (1 << 30), (double)phys / (1 << 30),
                 (double)atomic_load(&alloc_reserved[TS_MEM_NCAT]) / (1 << 30));
        return NULL;
    }
    size_t total = alloc_reserved_bytes(bytes);
    alloc_header *h = aligned_alloc(ALLOC_ALIGN, total);
    if (!h) {
        ts_error(TS_ERR_NOMEM, "allocator: out of memory allocating %zu bytes of %s", bytes,
                 alloc_names[cat]);
        return NULL;
    }
    memset(h, 0, total);
    h->bytes = bytes;
    h->magic = ALLOC_MAGIC;
    h->cat = (uint32_t)cat;
    size_t now = atomic_fetch_add(&alloc_allocated[cat], bytes) + bytes;
    size_t all = atomic_fetch_add(&alloc_allocated[TS_MEM_NCAT], bytes) + bytes;
    atomic_fetch_add(&alloc_reserved[cat], total);
    atomic_fetch_add(&alloc_reserved[TS_MEM_NCAT], total);
    alloc_raise_peak(cat, now);
    alloc_raise_peak(TS_MEM_NCAT, all);
    return h + 1;
}

void ts_mem_free(void *ptr) {
    if (!ptr) return;
    alloc_header *h = (alloc_header *)ptr - 1;
    TS_ASSERT(h->magic == ALLOC_MAGIC);
    size_t total = alloc_reserved_bytes(h->bytes);
    atomic_fetch_sub(&alloc_allocated[h->cat], h->bytes);
    atomic_fetch_sub(&alloc_allocated[TS_MEM_NCAT], h->bytes);
    atomic_fetch_sub(&alloc_reserved[h->cat], total);
    atomic_fetch_sub(&alloc_reserved[TS_MEM_NCAT], total);
    h->magic = 0;
    free(h);
}

ts_mem_counter ts_mem_stats(ts_mem_category cat) {
    ts_mem_counter c = {0, 0, 0};
    if ((int)cat < 0 || cat > TS_MEM_NCAT) return c;
    c.allocated = atomic_load(&alloc_allocated[cat]);
    c.reserved = atomic_load(&alloc_reserved[cat]);
    c.peak = atomic_load(&alloc_peak[cat]);
    return c;
}

void ts_mem_reset_peak(void) {
    for (int i = 0; i <= TS_MEM_NCAT; i++)
        atomic_store(&alloc_peak[i], atomic_load(&alloc_allocated[i]));
}
