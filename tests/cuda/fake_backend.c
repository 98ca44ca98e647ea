/*
 * fake_backend.c — stand-ins for tessera-backend-cuda.so that the core's
 * loader must refuse, or use, with a clear message (tests/cuda/backend_load.sh).
 * One source, one MODULE per variant (FAKE_VARIANT, tests/cuda_train.cmake):
 *   1 abi     the descriptor says backend ABI 2.0;
 *   2 name    a backend named "rocm" in a file named ...-cuda.so;
 *   3 nosym   no tessera_backend_descriptor symbol;
 *   4 refuse  attach refuses the host table;
 *   5 open    a valid backend whose open fails with its own message, to show
 *             that ts_backend_open reaches the backend through the descriptor.
 * No CUDA anywhere: these build and run in every build.
 */
#include "backend_abi.h"

static const ts_backend_host *host;

static ts_status fake_attach(const ts_backend_host *h) {
    host = h;
#if FAKE_VARIANT == 4
    return h->error(TS_ERR_PLUGIN, "fake backend: this host table will not do");
#else
    return TS_OK;
#endif
}

static const ts_backend fake_table = {.kind = TS_DEVICE_CUDA, .name = "cuda"};

static const ts_backend *fake_get_table(void) {
    return &fake_table;
}
static ts_status fake_open(const ts_backend **out) {
    *out = NULL;
    return host->error(TS_ERR_INVALID, "fake backend: open reached through the descriptor");
}
static void fake_close(const ts_backend *be) {
    (void)be;
}
static int fake_count(void) {
    return 0;
}
static ts_status fake_init(int device) {
    (void)device;
    return host->error(TS_ERR_INVALID, "fake backend: no device");
}
static int fake_current(void) {
    return -1;
}
static void *fake_stream(void) {
    return NULL;
}
static void fake_set_stream(void *stream) {
    (void)stream;
}
static ts_status fake_sync(void) {
    return host->error(TS_ERR_INVALID, "fake backend: no device");
}
static ts_status fake_copy(void *dst, const void *src, size_t bytes) {
    (void)dst, (void)src, (void)bytes;
    return host->error(TS_ERR_INVALID, "fake backend: no device");
}
static void *fake_alloc(ts_mem_category cat, size_t bytes) {
    (void)cat, (void)bytes;
    host->error(TS_ERR_INVALID, "fake backend: no device");
    return NULL;
}
static void fake_free(void *ptr) {
    (void)ptr;
}
static ts_mem_counter fake_mem_stats(ts_mem_category cat) {
    (void)cat;
    ts_mem_counter c = {0, 0, 0};
    return c;
}
static void fake_reset_peak(void) {}
static size_t fake_empty_cache(void) {
    return 0;
}
static ts_device_pool_counter fake_pool_stats(void) {
    ts_device_pool_counter c = {0, 0, 0, 0, 0, 0, 0};
    return c;
}

static const ts_backend_descriptor fake_descriptor = {
#if FAKE_VARIANT == 1
    .abi_version = TS_BACKEND_ABI_MAKE(TS_BACKEND_ABI_MAJOR + 1, 0),
#else
    .abi_version = TS_BACKEND_ABI_VERSION,
#endif
    .struct_size = sizeof(ts_backend_descriptor),
#if FAKE_VARIANT == 2
    .name = "rocm",
#else
    .name = "cuda",
#endif
    .kind = TS_DEVICE_CUDA,
    .table_size = sizeof(ts_backend),
    .attach = fake_attach,
    .table = fake_get_table,
    .open = fake_open,
    .close = fake_close,
    .device_count = fake_count,
    .device_init = fake_init,
    .device_current = fake_current,
    .device_stream = fake_stream,
    .device_set_stream = fake_set_stream,
    .device_synchronize = fake_sync,
    .device_copy = fake_copy,
    .device_alloc = fake_alloc,
    .device_free = fake_free,
    .device_mem_stats = fake_mem_stats,
    .device_mem_reset_peak = fake_reset_peak,
    .device_empty_cache = fake_empty_cache,
    .device_pool_stats = fake_pool_stats,
};

#if FAKE_VARIANT == 3
TS_BACKEND_EXPORT const ts_backend_descriptor *not_the_entry_point(void);
TS_BACKEND_EXPORT const ts_backend_descriptor *not_the_entry_point(void) {
    return &fake_descriptor;
}
#else
TS_BACKEND_EXPORT const ts_backend_descriptor *tessera_backend_descriptor(void);
TS_BACKEND_EXPORT const ts_backend_descriptor *tessera_backend_descriptor(void) {
    return &fake_descriptor;
}
#endif
