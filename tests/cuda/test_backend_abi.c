/*
 * test_backend_abi.c — the core's side of the backend contract
 * (core/backend/backend_abi.h) in one process, no GPU needed:
 *   1. the device.h calls that need no device (current, stream, counters,
 *      empty_cache, NCCL group and flush, free(NULL)) answer as a machine
 *      without a GPU and load no backend (/proc/self/maps shows no
 *      tessera-backend-cuda.so);
 *   2. the host table is of this ABI, of its own size, with every slot set;
 *   3. ts_backend_descriptor_check accepts a valid descriptor (the stand-in
 *      fake-open.so of tests/cuda/fake_backend.c, argv[1]) and refuses each
 *      defect with a message naming the file and the defect: NULL, another
 *      major, a newer minor, too small, no or another name, another kind, a
 *      smaller ops table, each required slot NULL, 1-3 of the 4 NCCL slots.
 * Usage: test_backend_abi FAKE_OPEN_SO. Exit 0 when every check passes.
 */
#define _GNU_SOURCE /* dlopen's RTLD_NOW under -std=c11 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_abi.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL (line %d): ", __LINE__);                                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Whether this process has mapped a file whose path contains `name`. */
static int mapped(const char *name) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return 0;
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f))
        found = strstr(line, name) != NULL;
    fclose(f);
    return found;
}

/* The check of `d` must fail naming the file and saying `want`. */
static void refused(const ts_backend_descriptor *d, const char *want, const char *what) {
    ts_status st = ts_backend_descriptor_check("cuda", "/x/tessera-backend-cuda.so", d);
    const char *msg = ts_last_error();
    CHECK(st == TS_ERR_PLUGIN, "%s: accepted (status %d)", what, (int)st);
    CHECK(strstr(msg, "/x/tessera-backend-cuda.so") != NULL, "%s: no file in '%s'", what, msg);
    CHECK(strstr(msg, want) != NULL, "%s: '%s' does not say '%s'", what, msg, want);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_backend_abi FAKE_OPEN_SO\n");
        return 2;
    }

    /* 1. No device needed: no backend loaded. */
    CHECK(ts_device_current() == -1, "ts_device_current before any device");
    CHECK(ts_device_stream() == NULL, "ts_device_stream before any device");
    ts_device_set_stream(NULL);
    ts_mem_counter m = ts_device_mem_stats(TS_MEM_NCAT);
    CHECK(m.allocated == 0 && m.reserved == 0 && m.peak == 0, "ts_device_mem_stats not zero");
    ts_device_mem_reset_peak();
    CHECK(ts_device_empty_cache() == 0, "ts_device_empty_cache not 0");
    ts_device_pool_counter p = ts_device_pool_stats();
    CHECK(p.allocs == 0 && p.cuda_mallocs == 0 && p.segments == 0, "pool counters not zero");
    CHECK(ts_comm_nccl_group_start() == TS_OK && ts_comm_nccl_group_end() == TS_OK &&
              ts_comm_nccl_flush() == TS_OK,
          "NCCL group functions without NCCL");
    ts_device_free(NULL);
    CHECK(!mapped("tessera-backend-cuda"), "a call that needs no device loaded the backend");
    CHECK(!mapped("libcudart") && !mapped("libcublas") && !mapped("libnccl"),
          "a CUDA library is mapped without the backend");

    /* 2. The host table. */
    const ts_backend_host *h = ts_backend_host_table();
    CHECK(h->abi_version == TS_BACKEND_ABI_VERSION, "host table ABI %#x", h->abi_version);
    CHECK(h->struct_size == sizeof(ts_backend_host), "host table of %u bytes", h->struct_size);
    CHECK(h->error && h->last_error && h->assert_fail && h->dtype_size && h->mem_category_name &&
              h->comm_create && h->comm_split && h->comm_broadcast && h->comm_all_gather &&
              h->comm_free && h->comm_rank && h->comm_size && h->comm_world_rank &&
              h->comm_timeout && h->comm_backend,
          "a host slot is NULL");
    CHECK(h->error(TS_ERR_COMM, "through the host") == TS_ERR_COMM &&
              strcmp(ts_last_error(), "through the host") == 0,
          "host->error did not set the last error: '%s'", ts_last_error());
    CHECK(h->dtype_size(TS_BF16) == 2, "host->dtype_size");

    /* 3. The descriptor checks, on copies of a valid one. */
    void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        fprintf(stderr, "FAIL: dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    ts_backend_entry_fn entry;
    *(void **)&entry = dlsym(so, TS_BACKEND_SYMBOL);
    if (!entry) {
        fprintf(stderr, "FAIL: %s has no %s\n", argv[1], TS_BACKEND_SYMBOL);
        return 1;
    }
    const ts_backend_descriptor good = *entry();
    CHECK(ts_backend_descriptor_check("cuda", "/x/tessera-backend-cuda.so", &good) == TS_OK,
          "a valid descriptor refused: %s", ts_last_error());
    ts_backend_descriptor d;

    refused(NULL, "returned NULL", "NULL descriptor");
    d = good, d.abi_version = TS_BACKEND_ABI_MAKE(TS_BACKEND_ABI_MAJOR + 1, 0);
    refused(&d, "built for backend ABI 2.0", "another major");
    char newer[64];
    snprintf(newer, sizeof newer, "built for backend ABI %d.%d", TS_BACKEND_ABI_MAJOR,
             TS_BACKEND_ABI_MINOR + 1);
    d = good, d.abi_version = TS_BACKEND_ABI_MAKE(TS_BACKEND_ABI_MAJOR, TS_BACKEND_ABI_MINOR + 1);
    refused(&d, newer, "a newer minor");
    d = good, d.struct_size = 16;
    refused(&d, "descriptor of 16 bytes", "too small");
    d = good, d.name = NULL;
    refused(&d, "named '(null)'", "no name");
    d = good, d.name = "cud";
    refused(&d, "named 'cud', not 'cuda'", "another name");
    d = good, d.kind = TS_DEVICE_CPU;
    refused(&d, "device kind 0", "another kind");
    d = good, d.table_size = 64;
    refused(&d, "ops table has 64 bytes", "a smaller ops table");
    d = good, d.attach = NULL;
    refused(&d, "slot 'attach' is NULL", "no attach");
    d = good, d.open = NULL;
    refused(&d, "slot 'open' is NULL", "no open");
    d = good, d.device_alloc = NULL;
    refused(&d, "slot 'device_alloc' is NULL", "no device_alloc");
    d = good, d.device_pool_stats = NULL;
    refused(&d, "slot 'device_pool_stats' is NULL", "no device_pool_stats");
    d = good, d.comm_nccl_group_start = good.device_synchronize;
    refused(&d, "sets 1 of the 4 NCCL slots", "one NCCL slot");
    d.comm_nccl_group_end = good.device_synchronize, d.comm_nccl_flush = good.device_synchronize;
    refused(&d, "sets 3 of the 4 NCCL slots", "three NCCL slots");
    dlclose(so);

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("backend ABI %d.%d: host table, no-device answers and descriptor checks: PASS\n",
           TS_BACKEND_ABI_MAJOR, TS_BACKEND_ABI_MINOR);
    return 0;
}
