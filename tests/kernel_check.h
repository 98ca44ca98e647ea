/*
 * kernel_check.h — what the CPU kernels' tests share (test_kernels.c,
 * test_llama_kernels.c): random inputs, checks that count failures and print
 * one line each, errors against a double reference, the finite-difference
 * and accumulation check of a backward (check_grads), and the bit-for-bit
 * comparison of two results (same_bits).
 *
 * Header-only, included by one test file each (everything is static;
 * functions inline so that a file may use some of them only).
 */
#ifndef TESSERA_TESTS_KERNEL_CHECK_H
#define TESSERA_TESTS_KERNEL_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Relative error allowed between a backward and finite differences. */
#define FD_TOL 1e-3

/* --- helpers ------------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

/* Uniform in [-1, 1). */
static inline float frand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static inline void fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = scale * frand();
}

static inline float *falloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof *p);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* A float's bits, and the float of some bits. */
static inline uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static int failures;

static inline void expect(int ok, const char *what, double got, double limit) {
    printf("  %-52s %10.3e (limit %.1e) %s\n", what, got, limit, ok ? "ok" : "FAIL");
    if (!ok) failures++;
}

/* max |a - ref| / max(1, max |ref|) over n entries */
static inline double max_err(const float *a, const double *ref, size_t n) {
    double e = 0.0, m = 1.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        e = d > e ? d : e;
        m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
    }
    return e / m;
}

static inline double dot_r(const float *out, const float *r, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)out[i] * r[i];
    return s;
}

/* One differentiable input of a kernel: its values and its gradient buffer.
 * skip (optional) marks entries not to perturb. */
typedef struct {
    const char *name;
    float *x, *g;
    size_t n;
    const unsigned char *skip;
} param;

/* A kernel under test: loss() runs the forward and returns L; backward()
 * runs the forward and then the backward with dout = R into the g buffers. */
typedef struct {
    double (*loss)(void *ctx);
    void (*backward)(void *ctx);
    void *ctx;
} kernel;

/* Checks every param's gradient against central differences with step eps
 * (relative error <= tol), then that a second backward adds the same again. */
static inline void check_grads(const kernel *k, param *ps, int np, float eps, double tol) {
    for (int p = 0; p < np; p++)
        memset(ps[p].g, 0, ps[p].n * sizeof(float));
    k->backward(k->ctx);
    for (int p = 0; p < np; p++) {
        param *q = &ps[p];
        double num = 0.0, den = 0.0;
        for (size_t i = 0; i < q->n; i++) {
            if (q->skip && q->skip[i]) continue;
            float x0 = q->x[i];
            float xp = x0 + eps, xm = x0 - eps;
            q->x[i] = xp;
            double lp = k->loss(k->ctx);
            q->x[i] = xm;
            double lm = k->loss(k->ctx);
            q->x[i] = x0;
            double fd = (lp - lm) / ((double)xp - (double)xm);
            num += (fd - q->g[i]) * (fd - q->g[i]);
            den += fd * fd;
        }
        char what[96];
        snprintf(what, sizeof what, "d%s vs finite differences (eps %.0e)", q->name, (double)eps);
        double rel = sqrt(num) / (den > 0 ? sqrt(den) : 1.0);
        expect(rel <= tol, what, rel, tol);
    }
    /* accumulation: from g0 != 0, two backwards give g0 + g and g0 + 2g */
    float *clean[8]; /* np <= 8 */
    for (int p = 0; p < np; p++) {
        clean[p] = falloc(ps[p].n);
        memcpy(clean[p], ps[p].g, ps[p].n * sizeof(float));
    }
    for (int p = 0; p < np; p++) {
        param *q = &ps[p];
        float *g = clean[p], *g0 = falloc(q->n), *g1 = falloc(q->n);
        double gn = 0.0;
        for (size_t i = 0; i < q->n; i++)
            gn = fmax(gn, fabs(g[i]));
        fill(g0, q->n, (float)(gn > 0 ? gn : 1.0));
        memcpy(q->g, g0, q->n * sizeof *g0);
        for (int other = 0; other < np; other++)
            if (other != p) memset(ps[other].g, 0, ps[other].n * sizeof(float));
        k->backward(k->ctx);
        memcpy(g1, q->g, q->n * sizeof *g1);
        k->backward(k->ctx);
        double e = 0.0, m = 1e-30;
        for (size_t i = 0; i < q->n; i++) {
            double d1 = (double)g1[i] - g0[i] - g[i];
            double d2 = (double)q->g[i] - g1[i] - g[i];
            e = fmax(e, fmax(fabs(d1), fabs(d2)));
            m = fmax(m, fabs(g0[i]) + 2 * fabs(g[i]));
        }
        char what[96];
        snprintf(what, sizeof what, "d%s accumulates (+=) twice", q->name);
        expect(e / m <= 1e-6, what, e / m, 1e-6);
        free(g0), free(g1);
    }
    for (int p = 0; p < np; p++) {
        memcpy(ps[p].g, clean[p], ps[p].n * sizeof(float));
        free(clean[p]);
    }
}

/* max |a - ref| / max(1, max |ref|), float against float; NaN anywhere: inf */
static inline double max_err_f(const float *a, const float *ref, size_t n) {
    double e = 0.0, m = 1.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (d != d) return INFINITY;
        e = d > e ? d : e;
        m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
    }
    return e / m;
}

/* Whether b[0..n) has a's bits; if not, prints the first element that
 * differs (index, both values and their bits) under `what`, and gives the
 * largest |a - b| through *diff. */
static inline int same_bits(const char *what, const char *ta, const float *a, const char *tb,
                            const float *b, size_t n, double *diff) {
    size_t first = n;
    double d = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (!memcmp(&a[i], &b[i], sizeof *a)) continue;
        if (first == n) first = i;
        double e = fabs((double)a[i] - (double)b[i]);
        d = e > d ? e : d;
    }
    if (d > *diff) *diff = d;
    if (first == n) return 1;
    uint32_t ua, ub;
    memcpy(&ua, &a[first], 4), memcpy(&ub, &b[first], 4);
    printf("    %s: element %zu of %zu differs: %s %.9g (0x%08x), %s %.9g (0x%08x)\n", what, first,
           n, ta, (double)a[first], ua, tb, (double)b[first], ub);
    return 0;
}

/* A test binary's driver: runs the one test argv[1] names, prints whether
 * it passed; exit 0, 1 on a failure, 2 for a bad command line. */
typedef struct kernel_test {
    const char *name;
    void (*run)(void);
} kernel_test;

static inline int kernel_tests_main(int argc, char **argv, const kernel_test *tests, int ntests) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s <kernel>; kernels:", argv[0]);
        for (int i = 0; i < ntests; i++)
            fprintf(stderr, " %s", tests[i].name);
        fprintf(stderr, "\n");
        return 2;
    }
    for (int i = 0; i < ntests; i++) {
        if (strcmp(argv[1], tests[i].name)) continue;
        printf("%s:\n", tests[i].name);
        tests[i].run();
        printf("%s: %s\n", tests[i].name, failures ? "FAILED" : "passed");
        return failures ? 1 : 0;
    }
    fprintf(stderr, "%s: no kernel test named '%s'\n", argv[0], argv[1]);
    return 2;
}

#endif /* TESSERA_TESTS_KERNEL_CHECK_H */
