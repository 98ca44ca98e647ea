/*
 * test_cases.h — what the single-process C tests share: checks that count
 * failures instead of stopping, a scratch directory, and a runner that runs
 * the case named by argv[1] (or all of them) and sets the exit status
 * (0 passed, 1 a check failed, 2 an unknown case or no scratch directory).
 *
 * Header-only, included by one test file each (everything is static).
 */
#ifndef TESSERA_TESTS_TEST_CASES_H
#define TESSERA_TESTS_TEST_CASES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"

static int failures;     /* checks failed so far          */
static char tmpdir[256]; /* the run's scratch directory */

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        ts_status st_ = (expr);                                                                    \
        if (st_ != TS_OK) {                                                                        \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, ts_last_error()); \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

typedef struct test_case {
    const char *name;
    void (*fn)(void);
} test_case;

/* Creates $TMPDIR/<prefix>.XXXXXX, runs the selected cases, removes it. */
static int run_cases(int argc, char **argv, const char *prefix, const test_case *cases, int n) {
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%s/%s.XXXXXX", base, prefix);
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 2;
    }
    int ran = 0;
    for (int i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0) continue;
        printf("== %s\n", cases[i].name);
        cases[i].fn();
        ran++;
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    if (!ran) {
        fprintf(stderr, "unknown test case '%s'\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}

#endif /* TESSERA_TESTS_TEST_CASES_H */
