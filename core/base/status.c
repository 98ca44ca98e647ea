/*
 * status.c — the thread-local last-error string and rank-prefixed messages.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tessera/tessera.h"

static _Thread_local char status_message[2048];
static int status_rank = -1;
static int status_world = 0;

void ts_error_set_rank(int rank, int world) {
    status_rank = rank;
    status_world = world;
}

ts_status ts_error(ts_status code, const char *fmt, ...) {
    int n = 0;
    if (status_rank >= 0 && status_world > 1)
        n = snprintf(status_message, sizeof status_message, "[rank %d/%d] ", status_rank,
                     status_world);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(status_message + n, sizeof status_message - (size_t)n, fmt, ap);
    va_end(ap);
    return code;
}

const char *ts_last_error(void) {
    return status_message;
}

const char *ts_last_error_bare(void) {
    const char *m = status_message;
    if (strncmp(m, "[rank ", 6) == 0) {
        const char *end = strstr(m, "] ");
        if (end) return end + 2;
    }
    return m;
}

const char *ts_status_name(ts_status st) {
    switch (st) {
    case TS_OK: return "ok";
    case TS_ERR_INVALID: return "invalid argument";
    case TS_ERR_CONFIG: return "config error";
    case TS_ERR_IO: return "i/o error";
    case TS_ERR_FORMAT: return "format error";
    case TS_ERR_NOMEM: return "out of memory";
    case TS_ERR_COMM: return "communication error";
    case TS_ERR_PLUGIN: return "plugin error";
    case TS_ERR_INTERNAL: return "internal error";
    }
    return "unknown error";
}

void ts_assert_fail(const char *expr, const char *file, int line) {
    fprintf(stderr, "tessera: internal invariant broken: %s (%s:%d)\n", expr, file, line);
    abort();
}
