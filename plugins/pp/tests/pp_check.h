/*
 * pp_check.h — the check the pp plugin's C tests share: a failed condition
 * prints file, line, the condition and a message, and is counted in
 * `failures` so a test reports everything it finds. Header-only, included by
 * one test file each.
 */
#ifndef TESSERA_PLUGINS_PP_TESTS_PP_CHECK_H
#define TESSERA_PLUGINS_PP_TESTS_PP_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);                             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

#endif /* TESSERA_PLUGINS_PP_TESTS_PP_CHECK_H */
