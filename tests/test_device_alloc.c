/*
 * test_device_alloc.c — the caching device allocator (core/backend/cuda/device_cuda.c):
 * counters per category, rounding and segment sizes, reuse without cudaMalloc,
 * splitting and merging, empty_cache, zero-fill, running out of memory, many
 * threads, and a simulated training step that must reach a steady state in
 * which no step calls cudaMalloc.
 *
 * Two builds of the same file (tests/gpu.cmake):
 *   test_device_alloc       against the real allocator; exits 77 (skipped)
 *                           when no GPU is visible;
 *   test_device_alloc_host  against the pool built over host memory
 *                           (TS_DEVICE_HOST_BACKING), so the pool's logic is
 *                           checked on every machine; it also fills blocks
 *                           with patterns to catch two live blocks that
 *                           overlap, and caps "device" memory to test the
 *                           out-of-memory retry.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */

#include <pthread.h> /* the many-threads case */
#include <stdio.h>   /* fprintf */
#include <stdlib.h>  /* exit, setenv */
#include <string.h>  /* memset, strstr */

#include "tessera/device.h"

#define MiB ((size_t)1 << 20)

#ifdef TS_DEVICE_HOST_BACKING
#define HOST_BACKED 1
#else
#define HOST_BACKED 0
#endif

static int g_fail;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            g_fail++;                                                                              \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

static void *xalloc(ts_mem_category cat, size_t bytes) {
    void *p = ts_device_alloc(cat, bytes);
    if (!p) {
        fprintf(stderr, "FAIL: ts_device_alloc(%s, %zu): %s\n", ts_mem_category_name(cat), bytes,
                ts_last_error());
        exit(1);
    }
    return p;
}

static uint64_t mallocs(void) {
    return ts_device_pool_stats().cuda_mallocs;
}

/* Every category empty and the cache released: the state each case starts from. */
static void expect_empty(const char *when) {
    ts_device_empty_cache();
    for (int c = 0; c <= TS_MEM_NCAT; c++) {
        ts_mem_counter m = ts_device_mem_stats((ts_mem_category)c);
        CHECK(m.allocated == 0 && m.reserved == 0, "%s: %s holds %zu allocated, %zu reserved", when,
              ts_mem_category_name((ts_mem_category)c), m.allocated, m.reserved);
    }
    ts_device_pool_counter p = ts_device_pool_stats();
    CHECK(p.segments == 0 && p.cached == 0, "%s: %zu segments, %zu cached", when, p.segments,
          p.cached);
}

/* Reads a device block back and checks that it is all zero. */
static int is_zero(const void *dev, size_t bytes) {
    unsigned char *h = malloc(bytes);
    if (!h || ts_device_copy(h, dev, bytes)) {
        free(h);
        return 0;
    }
    int ok = 1;
    for (size_t i = 0; i < bytes; i++)
        ok &= h[i] == 0;
    free(h);
    return ok;
}

static void case_counters(void) {
    void *a = xalloc(TS_MEM_PARAMS, 1000);
    void *b = xalloc(TS_MEM_GRADS, 100);
    ts_mem_counter pa = ts_device_mem_stats(TS_MEM_PARAMS);
    ts_mem_counter gr = ts_device_mem_stats(TS_MEM_GRADS);
    ts_mem_counter all = ts_device_mem_stats(TS_MEM_NCAT);
    CHECK(pa.allocated == 1000 && pa.reserved == 2 * MiB && pa.peak == 1000, "params %zu/%zu/%zu",
          pa.allocated, pa.reserved, pa.peak);
    CHECK(gr.allocated == 100 && gr.reserved == 2 * MiB, "grads %zu/%zu", gr.allocated,
          gr.reserved);
    CHECK(all.allocated == 1100 && all.reserved == 4 * MiB && all.peak == 1100, "total %zu/%zu/%zu",
          all.allocated, all.reserved, all.peak);
    CHECK(mallocs() == 2, "two categories, two segments: %llu", (unsigned long long)mallocs());
    CHECK(((uintptr_t)a % 256) == 0 && ((uintptr_t)b % 256) == 0, "alignment");
    ts_device_free(a);
    ts_device_free(b);
    pa = ts_device_mem_stats(TS_MEM_PARAMS);
    CHECK(pa.allocated == 0 && pa.reserved == 2 * MiB && pa.peak == 1000,
          "after free: params %zu/%zu/%zu (cached, peak kept)", pa.allocated, pa.reserved, pa.peak);
    ts_device_mem_reset_peak();
    CHECK(ts_device_mem_stats(TS_MEM_PARAMS).peak == 0, "reset_peak");
    CHECK(ts_device_empty_cache() == 4 * MiB, "empty_cache releases both segments");
    CHECK(ts_device_pool_stats().cuda_frees == 2, "two cudaFree");

    void *z = xalloc(TS_MEM_OTHER, 0);
    CHECK(ts_device_mem_stats(TS_MEM_OTHER).allocated == 0, "0 bytes count as 0");
    ts_device_free(z);
    ts_device_free(NULL);

    CHECK(ts_device_alloc((ts_mem_category)TS_MEM_NCAT, 8) == NULL &&
              strstr(ts_last_error(), "unknown memory category"),
          "bad category: %s", ts_last_error());
    expect_empty("counters");
}

static void case_reuse_split_merge(void) {
    uint64_t m0 = mallocs();
    void *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = xalloc(TS_MEM_ACTS, 512 * 1024 - 100);
    CHECK(mallocs() - m0 == 1, "four 512 KiB blocks share one 2 MiB segment: %llu",
          (unsigned long long)(mallocs() - m0));
    for (int i = 1; i < 4; i++)
        CHECK((char *)p[i] == (char *)p[i - 1] + 512 * 1024, "blocks carved in order");
    void *q = xalloc(TS_MEM_ACTS, 1);
    CHECK(mallocs() - m0 == 2, "a full segment makes a new one");
    ts_device_free(q);
    /* Free the middle two: they merge, and a 1 MiB block fits in the hole. */
    ts_device_free(p[1]);
    ts_device_free(p[2]);
    void *big = xalloc(TS_MEM_ACTS, 1024 * 1024);
    CHECK(big == p[1], "1 MiB reuses the merged hole");
    CHECK(mallocs() - m0 == 2, "no cudaMalloc for it");
    ts_device_free(big);
    ts_device_free(p[0]);
    ts_device_free(p[3]);
    /* The segment is whole again: empty_cache can release it. */
    CHECK(ts_device_empty_cache() == 4 * MiB, "both segments whole and released");

    /* Large blocks: segments are multiples of 2 MiB; remainders over 1 MiB are kept. */
    m0 = mallocs();
    void *l1 = xalloc(TS_MEM_OPTIM, 5 * MiB); /* 6 MiB segment, 1 MiB slack kept in the block */
    CHECK(ts_device_mem_stats(TS_MEM_OPTIM).reserved == 6 * MiB, "5 MiB -> 6 MiB segment");
    void *l2 = xalloc(TS_MEM_OPTIM, 5 * MiB / 2); /* 4 MiB segment, 1.5 MiB remainder split */
    void *l3 = xalloc(TS_MEM_OPTIM, 5 * MiB / 4); /* 1.25 MiB from that remainder */
    CHECK(mallocs() - m0 == 2, "the remainder serves the next large block: %llu",
          (unsigned long long)(mallocs() - m0));
    CHECK((char *)l3 == (char *)l2 + 5 * MiB / 2, "carved right after");
    void *s = xalloc(TS_MEM_OPTIM, 4096);
    CHECK(mallocs() - m0 == 3, "small requests never come from large segments");
    ts_device_free(l1);
    ts_device_free(l3);
    ts_device_free(l2);
    ts_device_free(s);
    ts_device_pool_counter c = ts_device_pool_stats();
    CHECK(c.segments == 3 && c.cached == 12 * MiB, "all cached: %zu segments, %zu bytes",
          c.segments, c.cached);
    expect_empty("reuse/split/merge");
}

static void case_zero_fill(void) {
    size_t n = 3 * MiB + 7;
    unsigned char *h = malloc(n);
    memset(h, 0xab, n);
    void *d = xalloc(TS_MEM_ACTS, n);
    CHECK(is_zero(d, n), "fresh block is zero");
    CHECK(ts_device_copy(d, h, n) == TS_OK, "upload: %s", ts_last_error());
    ts_device_free(d);
    void *e = xalloc(TS_MEM_ACTS, n);
    CHECK(e == d, "the same block comes back");
    CHECK(is_zero(e, n), "a reused block is zeroed again");
    ts_device_free(e);
    free(h);
    expect_empty("zero fill");
}

/* A training step's pattern: parameters, gradients and optimizer state once;
 * per step, activations allocated through the forward pass, freed in reverse
 * through backward, with workspace and communication buffers in between. */
static void case_steady_state(void) {
    static const size_t act_sizes[] = {4096,        768 * 1024, 3 * MiB + 100, 96 * 1024,
                                       12 * MiB,    512,        50257 * 4 * 8, 2 * MiB,
                                       2 * MiB + 1, 17 * 1024,  6 * MiB,       300};
    enum { NACT = sizeof act_sizes / sizeof act_sizes[0], LAYERS = 4, STEPS = 12 };
    void *params = xalloc(TS_MEM_PARAMS, 30 * MiB);
    void *grads = xalloc(TS_MEM_GRADS, 30 * MiB);
    void *optim = xalloc(TS_MEM_OPTIM, 90 * MiB);
    uint64_t before = 0;
    for (int step = 0; step < STEPS; step++) {
        if (step == 2) before = mallocs(); /* after two warm-up steps */
        void *acts[LAYERS][NACT];
        for (int l = 0; l < LAYERS; l++)
            for (int i = 0; i < NACT; i++)
                acts[l][i] = xalloc(TS_MEM_ACTS, act_sizes[i]);
        for (int l = LAYERS - 1; l >= 0; l--) {
            void *ws = xalloc(TS_MEM_ACTS, 5 * MiB + 3); /* backward workspace */
            for (int i = NACT - 1; i >= 0; i--)
                ts_device_free(acts[l][i]);
            void *bucket = xalloc(TS_MEM_COMM, 25 * MiB); /* a gradient bucket */
            ts_device_free(ws);
            ts_device_free(bucket);
        }
    }
    uint64_t steady = mallocs() - before;
    CHECK(steady == 0, "steady-state steps called cudaMalloc %llu times",
          (unsigned long long)steady);
    ts_mem_counter acts = ts_device_mem_stats(TS_MEM_ACTS);
    size_t one_pass = 0;
    for (int i = 0; i < NACT; i++)
        one_pass += act_sizes[i];
    CHECK(acts.allocated == 0 && acts.peak >= LAYERS * one_pass,
          "activations: %zu allocated, peak %zu (expected >= %zu)", acts.allocated, acts.peak,
          (size_t)LAYERS * one_pass);
    CHECK(acts.reserved >= acts.peak, "reserved %zu covers the peak %zu", acts.reserved, acts.peak);
    ts_device_free(params);
    ts_device_free(grads);
    ts_device_free(optim);
    expect_empty("steady state");
}

static void case_out_of_memory(void) {
    void *p = ts_device_alloc(TS_MEM_OTHER, (size_t)1 << 52);
    CHECK(p == NULL, "4 PiB cannot be allocated");
    CHECK(strstr(ts_last_error(), "out of memory") && strstr(ts_last_error(), "other"),
          "message names the failure and the category: %s", ts_last_error());
    if (HOST_BACKED) { /* capped at 64 MiB (main): the retry frees other categories' cache */
        uint64_t retries = ts_device_pool_stats().oom_retries;
        void *a = xalloc(TS_MEM_OTHER, 40 * MiB);
        ts_device_free(a); /* 40 MiB cached under "other" */
        void *b = ts_device_alloc(TS_MEM_PARAMS, 40 * MiB);
        CHECK(b != NULL, "the retry after releasing the cache succeeds: %s", ts_last_error());
        CHECK(ts_device_pool_stats().oom_retries == retries + 1, "one retry");
        CHECK(ts_device_mem_stats(TS_MEM_OTHER).reserved == 0, "other's cache was released");
        ts_device_free(b);
    }
    expect_empty("out of memory");
}

/* Threads allocate and free concurrently; host-backed blocks carry a pattern
 * that a block overlapping another would spoil. */
static void *thread_body(void *arg) {
    int id = (int)(intptr_t)arg;
    unsigned x = 12345u + (unsigned)id;
    void *live[16] = {0};
    size_t sizes[16] = {0};
    for (int it = 0; it < 2000; it++) {
        int k = (int)((x = x * 1103515245u + 12345u) >> 16) % 16;
        if (live[k]) {
            if (HOST_BACKED) {
                unsigned char *b = live[k];
                for (size_t i = 0; i < sizes[k]; i += 97)
                    if (b[i] != (unsigned char)(id * 16 + k)) {
                        fprintf(stderr, "FAIL: thread %d block %d overwritten\n", id, k);
                        __atomic_add_fetch(&g_fail, 1, __ATOMIC_RELAXED);
                        break;
                    }
            }
            ts_device_free(live[k]);
            live[k] = NULL;
        } else {
            sizes[k] = 1 + ((x >> 8) % (3 * MiB));
            live[k] = ts_device_alloc((ts_mem_category)(k % TS_MEM_NCAT), sizes[k]);
            if (!live[k]) {
                fprintf(stderr, "FAIL: thread %d: %s\n", id, ts_last_error());
                __atomic_add_fetch(&g_fail, 1, __ATOMIC_RELAXED);
            } else if (HOST_BACKED) {
                memset(live[k], id * 16 + k, sizes[k]);
            }
        }
    }
    for (int k = 0; k < 16; k++)
        ts_device_free(live[k]);
    return NULL;
}

static void case_threads(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, thread_body, (void *)(intptr_t)i);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    ts_device_pool_counter c = ts_device_pool_stats();
    CHECK(c.allocs == c.frees, "every block freed: allocs %llu frees %llu",
          (unsigned long long)c.allocs, (unsigned long long)c.frees);
    expect_empty("threads");
}

int main(void) {
    if (HOST_BACKED) setenv("TESSERA_TEST_DEVICE_BYTES", "1073741824", 1); /* 1 GiB */
    if (ts_device_count() == 0) {
        printf("SKIP: no CUDA device visible: test_device_alloc needs a GPU\n");
        return 77;
    }
    if (ts_device_init(-1)) {
        fprintf(stderr, "FAIL: ts_device_init: %s\n", ts_last_error());
        return 1;
    }
    case_counters();
    case_reuse_split_merge();
    case_zero_fill();
    case_steady_state();
    case_threads();
    if (HOST_BACKED) setenv("TESSERA_TEST_DEVICE_BYTES", "67108864", 1); /* 64 MiB */
    case_out_of_memory();
    ts_device_pool_counter c = ts_device_pool_stats();
    printf("%s: %llu allocs, %llu cudaMalloc, %llu cudaFree, %llu retries: %s\n",
           HOST_BACKED ? "test_device_alloc_host" : "test_device_alloc",
           (unsigned long long)c.allocs, (unsigned long long)c.cuda_mallocs,
           (unsigned long long)c.cuda_frees, (unsigned long long)c.oom_retries,
           g_fail ? "FAILED" : "ok");
    return g_fail ? 1 : 0;
}
