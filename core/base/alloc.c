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
 *
 * A mapped block of the per-step categories (activations, communication
 * staging, other) is not unmapped when freed but kept in a small cache and
 * handed out again for a request of the same size (zeroed, as a new block
 * is): a training step allocates the same sizes every step, and reusing
 * them saves the page faults, the kernel's zeroing of fresh pages and the
 * unmapping (Linux faults in every 4 KiB page of a new mapping). A cached
 * block stays counted as `reserved` (held from the system) but not as
 * `allocated`; the cache holds at most ALLOC_CACHE_BLOCKS blocks and as
 * many bytes as the largest `allocated` total seen (so it never holds
 * more than a step needed at once), and ts_mem_trim empties it. The CPU
 * backend has a reused block zeroed by its thread team (ts_mem_alloc_with);
 * alone, one thread zeroed it while the others waited.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* mmap, munmap */
#include <unistd.h>   /* sysconf */

#include "alloc.h"
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

/* Freed mapped blocks kept for reuse (see the top of the file). */
#define ALLOC_CACHE_BLOCKS 256
static pthread_mutex_t alloc_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static alloc_header *alloc_cache[ALLOC_CACHE_BLOCKS];
static size_t alloc_cache_total[ALLOC_CACHE_BLOCKS]; /* each block's mapped bytes */
static int alloc_cache_count;
static size_t alloc_cache_bytes;

static int alloc_cacheable(int cat) {
    return cat == TS_MEM_ACTS || cat == TS_MEM_COMM || cat == TS_MEM_OTHER;
}

/* A cached block of exactly `total` mapped bytes, or NULL. */
static alloc_header *alloc_cache_take(size_t total) {
    alloc_header *h = NULL;
    pthread_mutex_lock(&alloc_cache_lock);
    for (int i = alloc_cache_count - 1; i >= 0; i--)
        if (alloc_cache_total[i] == total) {
            h = alloc_cache[i];
            alloc_cache[i] = alloc_cache[alloc_cache_count - 1];
            alloc_cache_total[i] = alloc_cache_total[alloc_cache_count - 1];
            alloc_cache_count--;
            alloc_cache_bytes -= total;
            break;
        }
    pthread_mutex_unlock(&alloc_cache_lock);
    return h;
}

/* Keeps a freed block when there is room; returns 0 when it must be
 * unmapped instead. */
static int alloc_cache_put(alloc_header *h, size_t total, size_t limit) {
    int kept = 0;
    pthread_mutex_lock(&alloc_cache_lock);
    if (alloc_cache_count < ALLOC_CACHE_BLOCKS && alloc_cache_bytes + total <= limit) {
        alloc_cache[alloc_cache_count] = h;
        alloc_cache_total[alloc_cache_count++] = total;
        alloc_cache_bytes += total;
        kept = 1;
    }
    pthread_mutex_unlock(&alloc_cache_lock);
    return kept;
}

void ts_mem_trim(void) {
    pthread_mutex_lock(&alloc_cache_lock);
    for (int i = 0; i < alloc_cache_count; i++) {
        atomic_fetch_sub(&alloc_reserved[alloc_cache[i]->cat], alloc_cache_total[i]);
        atomic_fetch_sub(&alloc_reserved[TS_MEM_NCAT], alloc_cache_total[i]);
        munmap(alloc_cache[i], alloc_cache_total[i]);
    }
    alloc_cache_count = 0;
    alloc_cache_bytes = 0;
    pthread_mutex_unlock(&alloc_cache_lock);
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

static void alloc_memset_zero(void *ptr, size_t bytes) {
    memset(ptr, 0, bytes);
}

void *ts_mem_alloc(ts_mem_category cat, size_t bytes) {
    return ts_mem_alloc_with(cat, bytes, alloc_memset_zero);
}

void *ts_mem_alloc_with(ts_mem_category cat, size_t bytes, void (*zero)(void *ptr, size_t bytes)) {
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
    if (mapped && alloc_cacheable(cat) && (h = alloc_cache_take(total)) != NULL) {
        /* Reused: `zero` clears it like a new mapping (or leaves it, for a
         * caller that writes all of it); its bytes move to `cat`. */
        zero(h + 1, bytes);
        atomic_fetch_sub(&alloc_reserved[h->cat], total);
        atomic_fetch_sub(&alloc_reserved[TS_MEM_NCAT], total);
    } else if (mapped) {
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
    h->magic = 0;
    /* Kept: still reserved (under its category until reused). The cache
     * holds at most what the per-step categories ever held at once: the
     * peak of everything less the model state held now. */
    size_t state = atomic_load(&alloc_allocated[TS_MEM_PARAMS]) +
                   atomic_load(&alloc_allocated[TS_MEM_GRADS]) +
                   atomic_load(&alloc_allocated[TS_MEM_OPTIM]);
    size_t peak = atomic_load(&alloc_peak[TS_MEM_NCAT]);
    if (h->mapped && alloc_cacheable((int)h->cat) &&
        alloc_cache_put(h, total, peak > state ? peak - state : 0))
        return;
    atomic_fetch_sub(&alloc_reserved[h->cat], total);
    atomic_fetch_sub(&alloc_reserved[TS_MEM_NCAT], total);
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
