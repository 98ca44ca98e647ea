/*
 * cuda_check.h — what the CUDA kernels' tests share (test_cuda_kernels.c,
 * test_cuda_llama_kernels.c): random inputs (xorshift64*, seeded by the
 * test's main), device buffers filled from the host or poisoned with NaN,
 * copies back after ts_cuda_sync, and checks that count failures and print
 * one line each: the relative error of a device array against a host
 * reference, and bit-for-bit equality.
 *
 * Header-only, included by one test file each (everything is static;
 * functions inline so that a file may use some of them only). A device or
 * runtime failure aborts the test (a broken test machine); a kernel's own
 * error fails it with ts_last_error().
 */
#ifndef TESSERA_TESTS_CUDA_CHECK_H
#define TESSERA_TESTS_CUDA_CHECK_H

#include <cuda_runtime_api.h> /* cudaMalloc, cudaMemcpy, cudaMemset */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_kernels.h" /* ts_cuda_sync, ts_status */

static int g_failures;

/* --- random numbers (xorshift64*) ------------------------------------------ */
static uint64_t g_rng;
static inline uint32_t rnd_u32(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 2685821657736338717ull) >> 32);
}
static inline int rnd_int(int n) {
    return (int)(rnd_u32() % (uint32_t)n);
}
/* uniform in [-scale, scale) */
static inline float rnd_f(float scale) {
    return scale * ((float)rnd_u32() / 2147483648.0f - 1.0f);
}
static inline float *host_rand(size_t n, float scale) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = rnd_f(scale);
    return x;
}
static inline float *host_copy(const float *x, size_t n) {
    float *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* --- device helpers: a failure here is a broken test machine, so abort ------ */
static inline void cu(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "FATAL: %s: %s\n", what, cudaGetErrorString(e));
    exit(1);
}
static inline void ts(ts_status st, const char *what) {
    if (st == TS_OK) return;
    fprintf(stderr, "FAIL: %s returned %d: %s\n", what, (int)st, ts_last_error());
    exit(1);
}
#define CALL(expr) ts((expr), #expr)

static inline void *dev_alloc(size_t bytes) {
    void *p = NULL;
    cu(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
    return p;
}
/* Copies host data up; the device is synchronized after every upload because
 * the kernels run on a non-blocking stream that does not wait for the legacy
 * stream's copies. */
static inline void *dev_from(const void *h, size_t bytes) {
    void *d = dev_alloc(bytes);
    cu(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    cu(cudaDeviceSynchronize(), "sync");
    return d;
}
static inline float *dev_f(const float *h, size_t n) {
    return dev_from(h, n * sizeof(float));
}
/* A device buffer of n floats filled with NaN. */
static inline float *dev_nan(size_t n) {
    float *d = dev_alloc(n * sizeof *d);
    cu(cudaMemset(d, 0xff, n * sizeof *d), "cudaMemset");
    cu(cudaDeviceSynchronize(), "sync");
    return d;
}
static inline void poison(void *d, size_t bytes) {
    cu(cudaMemset(d, 0xff, bytes), "cudaMemset");
    cu(cudaDeviceSynchronize(), "sync");
}
/* Waits for the kernels' stream, then copies down into a new host array. */
static inline void *host_from(const void *d, size_t bytes) {
    CALL(ts_cuda_sync());
    void *h = malloc(bytes ? bytes : 1);
    cu(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return h;
}
static inline float *host_f(const float *d, size_t n) {
    return host_from(d, n * sizeof(float));
}

/* --- comparison ------------------------------------------------------------- */
static inline double rel_err(const float *gpu, const float *cpu, size_t n) {
    double maxdiff = 0.0, maxref = 1.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - (double)cpu[i]);
        if (isnan(d)) return INFINITY;
        if (d > maxdiff) maxdiff = d;
        if (fabs((double)cpu[i]) > maxref) maxref = fabs((double)cpu[i]);
    }
    return maxdiff / maxref;
}
/* Compares a device array with a host reference; frees nothing. */
static inline void check(const char *what, const float *d_gpu, const float *cpu, size_t n,
                         double tol) {
    float *g = host_f(d_gpu, n);
    double e = rel_err(g, cpu, n);
    int ok = e <= tol;
    printf("  %-40s rel err %.3g (tol %.0e) %s\n", what, e, tol, ok ? "ok" : "FAIL");
    if (!ok) g_failures++;
    free(g);
}
static inline void check_bits(const char *what, const void *d_gpu, const void *cpu, size_t bytes) {
    void *g = host_from(d_gpu, bytes);
    int ok = memcmp(g, cpu, bytes) == 0;
    printf("  %-40s %s\n", what, ok ? "bitwise equal ok" : "bits differ FAIL");
    if (!ok) g_failures++;
    free(g);
}

/* Overwrites n floats of a device buffer with host data. */
static inline void dev_set(float *d, const float *h, size_t n) {
    cu(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
    cu(cudaDeviceSynchronize(), "sync");
}

/* A test binary's start: the family argv[1] names (its index into
 * `families`), the device, the seed (TS_TEST_SEED replays one). Returns -1
 * to go on with *fam set, else the exit status: 2 for a bad command line, 77
 * (skipped) without a device. */
static inline int cuda_tests_begin(int argc, char **argv, const char *program,
                                   const char *const *families, int nfam, int *fam) {
    *fam = -1;
    for (int i = 0; argc == 2 && i < nfam; i++)
        if (strcmp(argv[1], families[i]) == 0) *fam = i;
    if (*fam < 0) {
        fprintf(stderr, "usage: %s FAMILY\n  families:", program);
        for (int i = 0; i < nfam; i++)
            fprintf(stderr, " %s", families[i]);
        fprintf(stderr, "\n");
        return 2;
    }
    char why[256];
    if (!ts_cuda_available(why, sizeof why)) {
        printf("SKIPPED: no CUDA device (%s)\n", why);
        return 77;
    }
    const char *env = getenv("TS_TEST_SEED");
    uint64_t seed =
        env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) * 1000003u ^ (uint64_t)getpid();
    if (!seed) seed = 1;
    g_rng = seed;
    printf("seed %llu (replay with TS_TEST_SEED=%llu)\n", (unsigned long long)seed,
           (unsigned long long)seed);
    CALL(ts_cuda_init(0));
    return -1;
}

/* A test binary's end: the verdict of family `name`, the exit status. */
static inline int cuda_tests_end(const char *name) {
    ts_cuda_free();
    printf("%s: %s (%d failed checks)\n", name, g_failures ? "FAIL" : "PASS", g_failures);
    return g_failures ? 1 : 0;
}

#endif /* TESSERA_TESTS_CUDA_CHECK_H */
