/*
 * device_cuda.c — the device, the compute stream and the caching device
 * allocator of include/tessera/device.h, in plain C over the CUDA runtime API.
 *
 * The pool. Requests are rounded up to 512 bytes. Up to 1 MiB ("small") they
 * are carved from 2 MiB segments; larger ones from a segment rounded up to a
 * multiple of 2 MiB. Each memory category has its own small and large pool,
 * so `reserved` is exact per category. A block taken from a pool is the best
 * fit (smallest free block large enough) and is split when the remainder is
 * worth keeping (any remainder for small blocks, over 1 MiB for large ones);
 * a freed block merges with its free neighbours of the same segment. Nothing
 * goes back to CUDA except by ts_device_empty_cache, or when cudaMalloc fails
 * (then every whole free segment is released and cudaMalloc tried once more).
 * Block records are host-side (malloc); blocks in use are found by pointer in
 * a hash table. One mutex guards it all.
 *
 * Two builds of this file:
 *   TESSERA_HAVE_CUDA       the real thing, in the CUDA backend
 *                           tessera-backend-cuda.so (cmake/gpu.cmake, target
 *                           tessera_gpu), which the core loads on demand: the
 *                           core's own ts_device_* (core/backend/backend_load.c)
 *                           forward to these through the backend's descriptor;
 *   TS_DEVICE_HOST_BACKING  the same pool over host memory standing in for the
 *                           device, so the pool's logic is tested on any
 *                           machine (tests/gpu.cmake, device_alloc_host).
 * A core without a loaded backend answers as a machine without a GPU
 * (backend_load.c); this file is never part of libtessera.
 *
 * What it does not do: streams other than the compute stream (a block's
 * users on other streams must have finished before it is freed, see
 * device.h), several devices per process, memory for NCCL's own buffers.
 */
#define _POSIX_C_SOURCE 200809L /* getenv under -std=c11 */

#include <stdint.h> /* SIZE_MAX, uintptr_t */
#include <stdio.h>  /* fprintf */
#include <stdlib.h> /* calloc, free, getenv, strtol, abort */
#include <string.h> /* memset, memcpy */

#include "tessera/device.h" /* the API this file implements */

#if !defined(TESSERA_HAVE_CUDA) && !defined(TS_DEVICE_HOST_BACKING)
#error "device_cuda.c: build it with TESSERA_HAVE_CUDA (the backend) or TS_DEVICE_HOST_BACKING"
#endif

#include <pthread.h> /* the pool's mutex */

#ifndef TS_DEVICE_HOST_BACKING
#include <cuda_runtime_api.h> /* cudaMalloc, cudaFree, cudaMemsetAsync, streams */
#endif

/* ---------------------------------------------------------------------------
 * The raw layer: the only place that talks to CUDA (or stands in for it).
 * ------------------------------------------------------------------------- */

static int dev_current = -1; /* the selected device, -1: none yet */
static void *dev_stream;     /* the compute stream (cudaStream_t) */

#ifdef TS_DEVICE_HOST_BACKING

/* Host memory pretends to be one device. TESSERA_TEST_DEVICE_BYTES caps what
 * "cudaMalloc" may hold at once, so that tests can exercise running out. */
static size_t dev_fake_held;

static int dev_raw_count(void) {
    return 1;
}
static ts_status dev_raw_select(int device) {
    (void)device;
    return TS_OK;
}
/* 0: ok, 1: out of memory, 2: another error (message set). */
static int dev_raw_malloc(void **p, size_t bytes) {
    const char *cap_env = getenv("TESSERA_TEST_DEVICE_BYTES"); /* read each time: tests move it */
    size_t cap = cap_env ? (size_t)strtoull(cap_env, NULL, 10) : 0;
    if (cap && (bytes > cap || dev_fake_held > cap - bytes)) return 1;
    *p = aligned_alloc(512, bytes);
    if (!*p) return 1;
    dev_fake_held += bytes;
    return 0;
}
static void dev_raw_free(void *p, size_t bytes) {
    dev_fake_held -= bytes;
    free(p);
}
static ts_status dev_raw_zero(void *p, size_t bytes) {
    memset(p, 0, bytes);
    return TS_OK;
}
static ts_status dev_raw_sync(void) {
    return TS_OK;
}
static ts_status dev_raw_copy(void *dst, const void *src, size_t bytes) {
    memmove(dst, src, bytes);
    return TS_OK;
}
static const char *dev_raw_oom_text(void) {
    return "over TESSERA_TEST_DEVICE_BYTES";
}

#else /* the CUDA runtime */

static cudaError_t dev_last_oom;

static ts_status dev_cuda_fail(cudaError_t e, const char *what) {
    return ts_error(TS_ERR_INTERNAL, "device %d: %s failed: %s (%s)", dev_current, what,
                    cudaGetErrorString(e), cudaGetErrorName(e));
}

static int dev_raw_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* no driver or no device: not sticky, clear it */
        return 0;
    }
    return n;
}
static ts_status dev_raw_select(int device) {
    cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) return dev_cuda_fail(e, "cudaSetDevice");
    return TS_OK;
}
/* The runtime's current device is per host thread: bind before every call
 * that allocates or enqueues, in case an OpenMP worker makes it. */
static void dev_raw_bind(void) {
    (void)cudaSetDevice(dev_current);
}
static int dev_raw_malloc(void **p, size_t bytes) {
    dev_raw_bind();
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError(); /* an allocation failure is not sticky */
    dev_last_oom = e;
    if (e == cudaErrorMemoryAllocation) return 1;
    dev_cuda_fail(e, "cudaMalloc");
    return 2;
}
static void dev_raw_free(void *p, size_t bytes) {
    (void)bytes;
    dev_raw_bind();
    cudaError_t e = cudaFree(p);
    if (e != cudaSuccess)
        fprintf(stderr, "tessera: device %d: cudaFree failed: %s\n", dev_current,
                cudaGetErrorString(e));
}
static ts_status dev_raw_zero(void *p, size_t bytes) {
    dev_raw_bind();
    cudaError_t e = cudaMemsetAsync(p, 0, bytes, (cudaStream_t)dev_stream);
    return e == cudaSuccess ? TS_OK : dev_cuda_fail(e, "cudaMemsetAsync");
}
static ts_status dev_raw_sync(void) {
    dev_raw_bind();
    cudaError_t e = cudaStreamSynchronize((cudaStream_t)dev_stream);
    return e == cudaSuccess ? TS_OK : dev_cuda_fail(e, "cudaStreamSynchronize");
}
static ts_status dev_raw_copy(void *dst, const void *src, size_t bytes) {
    dev_raw_bind();
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)dev_stream);
    if (e != cudaSuccess) return dev_cuda_fail(e, "cudaMemcpyAsync");
    return dev_raw_sync();
}
static const char *dev_raw_oom_text(void) {
    return cudaGetErrorString(dev_last_oom);
}

#endif

/* ---------------------------------------------------------------------------
 * Blocks, pools, the table of blocks in use
 * ------------------------------------------------------------------------- */

#define DEV_ROUND ((size_t)512)             /* every block is a multiple  */
#define DEV_SMALL_MAX ((size_t)1 << 20)     /* small requests: <= 1 MiB   */
#define DEV_SMALL_SEGMENT ((size_t)2 << 20) /* their segments: 2 MiB      */
#define DEV_LARGE_ROUND ((size_t)2 << 20)   /* large segments: k * 2 MiB  */

typedef struct dev_block {
    char *ptr;
    size_t size;  /* bytes of the block (multiple of 512)    */
    size_t asked; /* bytes asked for, while in use           */
    int cat, large, in_use;
    struct dev_block *prev, *next; /* neighbours in the segment, by address  */
    struct dev_block *link;        /* the free list, or the hash chain       */
} dev_block;

/* Free blocks, sorted by size then address: [category][small, large]. */
static dev_block *dev_free_lists[TS_MEM_NCAT][2];

static dev_block **dev_table; /* blocks in use, chained by ->link */
static size_t dev_table_cap, dev_table_len;

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t dev_allocated[TS_MEM_NCAT + 1];
static size_t dev_reserved[TS_MEM_NCAT + 1];
static size_t dev_peak[TS_MEM_NCAT + 1];
static size_t dev_in_blocks; /* bytes of blocks in use (rounded sizes) */
static ts_device_pool_counter dev_counter;

static size_t dev_hash(const void *p, size_t cap) {
    uint64_t h = (uint64_t)(uintptr_t)p >> 9; /* blocks are 512-aligned */
    h *= 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 20) & (cap - 1);
}

static int dev_table_grow(void) {
    size_t cap = dev_table_cap ? 2 * dev_table_cap : 1024;
    dev_block **t = calloc(cap, sizeof *t);
    if (!t) return -1;
    for (size_t i = 0; i < dev_table_cap; i++)
        for (dev_block *b = dev_table[i], *n; b; b = n) {
            n = b->link;
            size_t h = dev_hash(b->ptr, cap);
            b->link = t[h];
            t[h] = b;
        }
    free(dev_table);
    dev_table = t;
    dev_table_cap = cap;
    return 0;
}

static int dev_table_put(dev_block *b) {
    if (dev_table_len + 1 > dev_table_cap && dev_table_grow()) return -1;
    size_t h = dev_hash(b->ptr, dev_table_cap);
    b->link = dev_table[h];
    dev_table[h] = b;
    dev_table_len++;
    return 0;
}

static dev_block *dev_table_take(const void *p) {
    if (!dev_table_cap) return NULL;
    for (dev_block **pp = &dev_table[dev_hash(p, dev_table_cap)]; *pp; pp = &(*pp)->link)
        if ((*pp)->ptr == (const char *)p) {
            dev_block *b = *pp;
            *pp = b->link;
            b->link = NULL;
            dev_table_len--;
            return b;
        }
    return NULL;
}

static int dev_block_less(const dev_block *a, const dev_block *b) {
    return a->size < b->size || (a->size == b->size && a->ptr < b->ptr);
}

static void dev_free_insert(dev_block *b) {
    dev_block **pp = &dev_free_lists[b->cat][b->large];
    while (*pp && dev_block_less(*pp, b))
        pp = &(*pp)->link;
    b->link = *pp;
    *pp = b;
}

static void dev_free_remove(dev_block *b) {
    for (dev_block **pp = &dev_free_lists[b->cat][b->large]; *pp; pp = &(*pp)->link)
        if (*pp == b) {
            *pp = b->link;
            b->link = NULL;
            return;
        }
    TS_ASSERT(!"a free block is on its free list");
}

/* The best-fitting free block of at least `size`, removed from its list. */
static dev_block *dev_free_take(int cat, int large, size_t size) {
    for (dev_block **pp = &dev_free_lists[cat][large]; *pp; pp = &(*pp)->link)
        if ((*pp)->size >= size) {
            dev_block *b = *pp;
            *pp = b->link;
            b->link = NULL;
            return b;
        }
    return NULL;
}

/* Releases every whole free segment of every category to CUDA. */
static size_t dev_release_cached(void) {
    size_t released = 0;
    for (int c = 0; c < TS_MEM_NCAT; c++)
        for (int l = 0; l < 2; l++)
            for (dev_block **pp = &dev_free_lists[c][l]; *pp;) {
                dev_block *b = *pp;
                if (b->prev || b->next) { /* part of a segment still in use */
                    pp = &b->link;
                    continue;
                }
                *pp = b->link;
                dev_raw_free(b->ptr, b->size);
                dev_reserved[c] -= b->size;
                dev_reserved[TS_MEM_NCAT] -= b->size;
                dev_counter.cuda_frees++;
                dev_counter.segments--;
                released += b->size;
                free(b);
            }
    return released;
}

/* A new segment for a block of `size`, as one free block (not listed). */
static ts_status dev_segment_new(ts_mem_category cat, int large, size_t size, size_t asked,
                                 dev_block **out) {
    size_t seg = large ? (size + DEV_LARGE_ROUND - 1) / DEV_LARGE_ROUND * DEV_LARGE_ROUND
                       : DEV_SMALL_SEGMENT;
    dev_block *b = calloc(1, sizeof *b);
    if (!b) return ts_error(TS_ERR_NOMEM, "device allocator: out of host memory");
    void *p = NULL;
    int rc = dev_raw_malloc(&p, seg);
    if (rc == 1) {
        dev_counter.oom_retries++;
        dev_release_cached();
        rc = dev_raw_malloc(&p, seg);
    }
    if (rc) {
        free(b);
        if (rc == 2) return TS_ERR_INTERNAL; /* message set by the raw layer */
        return ts_error(TS_ERR_NOMEM,
                        "device allocator: out of memory on device %d allocating %zu bytes of %s "
                        "(a %zu-byte segment): %zu bytes allocated and %zu reserved in all "
                        "categories, %zu of them reserved for %s (%s)",
                        dev_current, asked, ts_mem_category_name(cat), seg,
                        dev_allocated[TS_MEM_NCAT], dev_reserved[TS_MEM_NCAT], dev_reserved[cat],
                        ts_mem_category_name(cat), dev_raw_oom_text());
    }
    b->ptr = p;
    b->size = seg;
    b->cat = (int)cat;
    b->large = large;
    dev_reserved[cat] += seg;
    dev_reserved[TS_MEM_NCAT] += seg;
    dev_counter.cuda_mallocs++;
    dev_counter.segments++;
    *out = b;
    return TS_OK;
}

/* Selects the device; the lock is held. */
static ts_status dev_select(int device) {
    if (device < 0 && dev_current >= 0) return TS_OK; /* -1 keeps what was selected */
    int n = dev_raw_count();
    if (n <= 0) return ts_error(TS_ERR_INVALID, "device: no CUDA device is visible");
    if (device < 0) {
        static const char *vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                     "SLURM_LOCALID", "LOCAL_RANK"};
        int local = 0;
        for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
            const char *v = getenv(vars[i]);
            if (v && *v) {
                local = (int)strtol(v, NULL, 10);
                break;
            }
        }
        device = (local < 0 ? 0 : local) % n;
    }
    if (device >= n)
        return ts_error(TS_ERR_INVALID, "device: device %d does not exist (%d visible)", device, n);
    if (dev_current >= 0) {
        if (device == dev_current) return TS_OK;
        return ts_error(TS_ERR_INVALID,
                        "device: this process already drives device %d, not %d (one per process)",
                        dev_current, device);
    }
    TS_TRY(dev_raw_select(device));
    dev_current = device;
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * The API
 * ------------------------------------------------------------------------- */

int ts_device_count(void) {
    return dev_raw_count();
}

ts_status ts_device_init(int device) {
    pthread_mutex_lock(&dev_lock);
    ts_status st = dev_select(device);
    pthread_mutex_unlock(&dev_lock);
    return st;
}

int ts_device_current(void) {
    return dev_current;
}
void *ts_device_stream(void) {
    return dev_stream;
}
void ts_device_set_stream(void *stream) {
    dev_stream = stream;
}

ts_status ts_device_synchronize(void) {
    TS_TRY(ts_device_init(-1));
    return dev_raw_sync();
}

ts_status ts_device_copy(void *dst, const void *src, size_t bytes) {
    if (!bytes) return TS_OK;
    if (!dst || !src) return ts_error(TS_ERR_INVALID, "ts_device_copy: NULL pointer");
    TS_TRY(ts_device_init(-1));
    return dev_raw_copy(dst, src, bytes);
}

static void dev_raise_peak(int idx) {
    if (dev_allocated[idx] > dev_peak[idx]) dev_peak[idx] = dev_allocated[idx];
}

void *ts_device_alloc(ts_mem_category cat, size_t bytes) {
    if ((int)cat < 0 || cat >= TS_MEM_NCAT) {
        ts_error(TS_ERR_INVALID, "device allocator: unknown memory category %d", (int)cat);
        return NULL;
    }
    if (bytes > SIZE_MAX - 2 * DEV_LARGE_ROUND) {
        ts_error(TS_ERR_NOMEM, "device allocator: %zu bytes of %s is beyond any device", bytes,
                 ts_mem_category_name(cat));
        return NULL;
    }
    size_t size = bytes ? (bytes + DEV_ROUND - 1) / DEV_ROUND * DEV_ROUND : DEV_ROUND;
    int large = size > DEV_SMALL_MAX;

    pthread_mutex_lock(&dev_lock);
    ts_status st = dev_current >= 0 ? TS_OK : dev_select(-1);
    dev_block *b = NULL;
    if (!st && !(b = dev_free_take((int)cat, large, size)))
        st = dev_segment_new(cat, large, size, bytes, &b);
    if (st) {
        pthread_mutex_unlock(&dev_lock);
        return NULL;
    }
    /* Split off the remainder when it is worth caching on its own. */
    size_t rest = b->size - size;
    if (rest >= (large ? DEV_SMALL_MAX + DEV_ROUND : DEV_ROUND)) {
        dev_block *r = calloc(1, sizeof *r);
        if (r) { /* without it the block keeps its slack */
            r->ptr = b->ptr + size;
            r->size = rest;
            r->cat = b->cat;
            r->large = b->large;
            r->prev = b;
            r->next = b->next;
            if (b->next) b->next->prev = r;
            b->next = r;
            b->size = size;
            dev_free_insert(r);
        }
    }
    if (dev_table_put(b)) {
        dev_free_insert(b);
        pthread_mutex_unlock(&dev_lock);
        ts_error(TS_ERR_NOMEM, "device allocator: out of host memory");
        return NULL;
    }
    b->in_use = 1;
    b->asked = bytes;
    dev_allocated[cat] += bytes;
    dev_allocated[TS_MEM_NCAT] += bytes;
    dev_raise_peak((int)cat);
    dev_raise_peak(TS_MEM_NCAT);
    dev_in_blocks += b->size;
    dev_counter.allocs++;
    pthread_mutex_unlock(&dev_lock);

    if (dev_raw_zero(b->ptr, bytes)) { /* the message is set */
        ts_device_free(b->ptr);
        return NULL;
    }
    return b->ptr;
}

void ts_device_free(void *ptr) {
    if (!ptr) return;
    pthread_mutex_lock(&dev_lock);
    dev_block *b = dev_table_take(ptr);
    if (!b) {
        pthread_mutex_unlock(&dev_lock);
        fprintf(stderr,
                "tessera: ts_device_free(%p): not a block of the device allocator, or freed "
                "twice\n",
                ptr);
    }
    TS_ASSERT(b != NULL);
    dev_allocated[b->cat] -= b->asked;
    dev_allocated[TS_MEM_NCAT] -= b->asked;
    dev_in_blocks -= b->size;
    dev_counter.frees++;
    b->in_use = 0;
    b->asked = 0;
    if (b->prev && !b->prev->in_use) { /* merge into the free block before */
        dev_block *p = b->prev;
        dev_free_remove(p);
        p->size += b->size;
        p->next = b->next;
        if (b->next) b->next->prev = p;
        free(b);
        b = p;
    }
    if (b->next && !b->next->in_use) { /* absorb the free block after */
        dev_block *n = b->next;
        dev_free_remove(n);
        b->size += n->size;
        b->next = n->next;
        if (n->next) n->next->prev = b;
        free(n);
    }
    dev_free_insert(b);
    pthread_mutex_unlock(&dev_lock);
}

ts_mem_counter ts_device_mem_stats(ts_mem_category cat) {
    ts_mem_counter c = {0, 0, 0};
    if ((int)cat < 0 || cat > TS_MEM_NCAT) return c;
    pthread_mutex_lock(&dev_lock);
    c.allocated = dev_allocated[cat];
    c.reserved = dev_reserved[cat];
    c.peak = dev_peak[cat];
    pthread_mutex_unlock(&dev_lock);
    return c;
}

void ts_device_mem_reset_peak(void) {
    pthread_mutex_lock(&dev_lock);
    for (int i = 0; i <= TS_MEM_NCAT; i++)
        dev_peak[i] = dev_allocated[i];
    pthread_mutex_unlock(&dev_lock);
}

size_t ts_device_empty_cache(void) {
    pthread_mutex_lock(&dev_lock);
    size_t released = dev_current >= 0 ? dev_release_cached() : 0;
    pthread_mutex_unlock(&dev_lock);
    return released;
}

ts_device_pool_counter ts_device_pool_stats(void) {
    pthread_mutex_lock(&dev_lock);
    ts_device_pool_counter c = dev_counter;
    c.cached = dev_reserved[TS_MEM_NCAT] - dev_in_blocks;
    pthread_mutex_unlock(&dev_lock);
    return c;
}
