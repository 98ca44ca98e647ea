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
    /* Formatted aside first: an argument may be the last message itself
     * (a caller wrapping ts_last_error_bare() with its context). */
    char msg[sizeof status_message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = 0, len = strlen(msg);
    if (status_rank >= 0 && status_world > 1)
        n = (size_t)snprintf(status_message, sizeof status_message, "[rank %d/%d] ", status_rank,
                             status_world);
    if (len > sizeof status_message - 1 - n) len = sizeof status_message - 1 - n;
    memcpy(status_message + n, msg, len);
    status_message[n + len] = '\0';
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
