/*
 * backend_host.c — inside a backend shared object, the core functions its
 * sources call, each forwarded through the host table the core handed to
 * attach (backend_abi.h). With these, device_cuda.c, comm_nccl.c and the
 * kernels keep calling ts_error, ts_comm_split, ... as they do when linked
 * into a test directly, and the backend needs no symbol of libtessera: it
 * links with -Wl,--no-undefined and exports only its entry point.
 *
 * What it does not do: keep any state of its own besides the table pointer
 * (the last error, the rank prefix and the communicators all stay the
 * core's), or work before attach (a broken invariant: the core attaches
 * before it calls anything else).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend_host.h"

static const ts_backend_host *host;

/* The slots ABI 1.0's host table has: the most this file calls. */
#define HOST_SIZE_1_0 (offsetof(ts_backend_host, comm_backend) + sizeof(void (*)(void)))

ts_status ts_backend_host_attach(const ts_backend_host *h) {
    if (!h) return TS_ERR_PLUGIN;
    const char *why = NULL;
    char msg[256];
    if ((h->abi_version >> 16) != TS_BACKEND_ABI_MAJOR)
        why = "a host table of another ABI major";
    else if (h->struct_size < HOST_SIZE_1_0)
        why = "a host table smaller than ABI 1.0's";
    if (!why) {
        host = h;
        return TS_OK;
    }
    snprintf(msg, sizeof msg, "backend ABI %d.%d got %s (core ABI %u.%u, %u bytes)",
             TS_BACKEND_ABI_MAJOR, TS_BACKEND_ABI_MINOR, why, h->abi_version >> 16,
             h->abi_version & 0xffffu, h->struct_size);
    return h->error ? h->error(TS_ERR_PLUGIN, msg) : TS_ERR_PLUGIN;
}

static void host_missing(const char *what) {
    fprintf(stderr, "tessera: CUDA backend: %s called before the core attached\n", what);
    abort();
}

ts_status ts_error(ts_status code, const char *fmt, ...) {
    if (!host) host_missing("ts_error");
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return host->error(code, msg);
}

const char *ts_last_error(void) {
    if (!host) host_missing("ts_last_error");
    return host->last_error();
}

void ts_assert_fail(const char *expr, const char *file, int line) {
    if (!host) {
        fprintf(stderr, "tessera: internal invariant broken: %s (%s:%d)\n", expr, file, line);
        abort();
    }
    host->assert_fail(expr, file, line);
    abort(); /* the core's never returns; the compiler should know */
}

size_t ts_dtype_size(ts_dtype dt) {
    if (!host) host_missing("ts_dtype_size");
    return host->dtype_size(dt);
}

const char *ts_mem_category_name(ts_mem_category cat) {
    if (!host) host_missing("ts_mem_category_name");
    return host->mem_category_name(cat);
}

ts_status ts_comm_create(const ts_comm_ops *ops, void *ctx, const char *name, int rank, int size,
                         const int *world_ranks, double timeout_s, ts_comm **out) {
    if (!host) host_missing("ts_comm_create");
    return host->comm_create(ops, ctx, name, rank, size, world_ranks, timeout_s, out);
}

ts_status ts_comm_split(ts_comm *parent, int color, int key, const char *name, ts_comm **out) {
    if (!host) host_missing("ts_comm_split");
    return host->comm_split(parent, color, key, name, out);
}

ts_status ts_comm_broadcast(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int root) {
    if (!host) host_missing("ts_comm_broadcast");
    return host->comm_broadcast(comm, buf, count, dtype, root);
}

ts_status ts_comm_all_gather(ts_comm *comm, const void *send, void *recv, size_t count,
                             ts_dtype dtype) {
    if (!host) host_missing("ts_comm_all_gather");
    return host->comm_all_gather(comm, send, recv, count, dtype);
}

void ts_comm_free(ts_comm *comm) {
    if (!host) host_missing("ts_comm_free");
    host->comm_free(comm);
}

int ts_comm_rank(const ts_comm *comm) {
    if (!host) host_missing("ts_comm_rank");
    return host->comm_rank(comm);
}

int ts_comm_size(const ts_comm *comm) {
    if (!host) host_missing("ts_comm_size");
    return host->comm_size(comm);
}

int ts_comm_world_rank(const ts_comm *comm, int rank) {
    if (!host) host_missing("ts_comm_world_rank");
    return host->comm_world_rank(comm, rank);
}

double ts_comm_timeout(const ts_comm *comm) {
    if (!host) host_missing("ts_comm_timeout");
    return host->comm_timeout(comm);
}

const char *ts_comm_backend(const ts_comm *comm) {
    if (!host) host_missing("ts_comm_backend");
    return host->comm_backend(comm);
}
