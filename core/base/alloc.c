/*
 * alloc.c — the accounted host allocator.
 *
 * Every block carries a 64-byte header recording its size and category, so
 * that frees are counted against the category they were allocated under.
 * `reserved` counts what is held from the system (payload rounded up to 64
 * bytes plus the header; whole pages for a large block); `allocated` counts
 * the payload asked for. Counters are updated with atomics so OpenMP threads
 * may allocate.
 *
 * Blocks of ALLOC_MAP_MIN bytes and more are mapped from the system and
 * unmapped when freed (zeroed by the kernel, so their pages are resident
 * only once written). Left to malloc, large blocks freed during a step stay
 * in its heap as glibc raises its mapping threshold, and the process's
 * resident memory then drifts above the accounted peak by up to the
 * threshold's ceiling, depending on the address layout.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* mmap, munmap */
#include <unistd.h>   /* sysconf */

#include "tessera/tessera.h"

#define ALLOC_ALIGN 64
#define ALLOC_MAGIC 0x7e55e7a5u
#define ALLOC_MAP_MIN (1u << 20)

typedef struct alloc_header {
    size_t bytes;
    uint32_t magic;
    uint32_t cat;
    uint32_t mapped; /* from mmap (else aligned_alloc) */
    char pad[ALLOC_ALIGN - sizeof(size_t) - 3 * sizeof(uint32_t)];
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
    size_t total = sizeof(alloc_header) + ((bytes + ALLOC_ALIGN - 1) / ALLOC_ALIGN) * ALLOC_ALIGN;
    if (total < ALLOC_MAP_MIN) return total;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (total + page - 1) / page * page;
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
    int mapped = total >= ALLOC_MAP_MIN;
    alloc_header *h;
    if (mapped) {
        h = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (h == MAP_FAILED) h = NULL;
    } else {
        h = aligned_alloc(ALLOC_ALIGN, total);
        if (h) memset(h, 0, total);
    }
    if (!h) {
        ts_error(TS_ERR_NOMEM, "allocator: out of memory allocating %zu bytes of %s", bytes,
                 alloc_names[cat]);
        return NULL;
    }
    h->bytes = bytes;
    h->magic = ALLOC_MAGIC;
    h->cat = (uint32_t)cat;
    h->mapped = (uint32_t)mapped;
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
    if (h->mapped)
        munmap(h, total);
    else
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
