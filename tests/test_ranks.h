/*
 * test_ranks.h — the checks the multi-rank C tests share: a failed check
 * prints the world rank, file and line with a message and is counted
 * (check_failures), so every rank reports all it finds before the test
 * combines the counts; OK(expr) checks a ts_status and prints the last error.
 *
 * Header-only, included by one test file each (everything is static). The
 * test sets check_rank once it knows its rank.
 */
#ifndef TESSERA_TESTS_TEST_RANKS_H
#define TESSERA_TESTS_TEST_RANKS_H

#include <stdio.h>

#include "tessera/tessera.h"

static int check_failures; /* failed checks on this rank */
static int check_rank;     /* world rank, for messages    */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            check_failures++;                                                                      \
            fprintf(stderr, "[world rank %d] FAIL %s:%d: ", check_rank, __FILE__, __LINE__);       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#define OK(expr)                                                                                   \
    do {                                                                                           \
        ts_status ok_st_ = (expr);                                                                 \
        CHECK(ok_st_ == TS_OK, "%s -> %s: %s", #expr, ts_status_name(ok_st_), ts_last_error());    \
    } while (0)

#endif /* TESSERA_TESTS_TEST_RANKS_H */
