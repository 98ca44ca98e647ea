/*
 * backend_load.c — the core's side of device backends: finds, checks and
 * opens the CUDA backend (tessera-backend-cuda.so, backend_abi.h) on demand,
 * and implements ts_backend_open / ts_backend_close / ts_backend_cuda
 * (backend.h) and the API of include/tessera/device.h by routing every call
 * through the loaded backend's descriptor.
 *
 * Before the backend is loaded (and for good when it cannot be) the device
 * API answers as a machine without a GPU: ts_device_current() -1, the
 * stream NULL, counters zero, ts_comm_nccl_group_* and flush no-ops. A call
 * that needs the device loads it first: ts_device_count (0 when the backend
 * cannot be loaded: it never fails), ts_device_init, ts_device_synchronize,
 * ts_device_copy, ts_device_alloc, ts_device_set_stream with a stream,
 * ts_comm_nccl_create, ts_backend_open(TS_DEVICE_CUDA), ts_backend_cuda().
 * A CPU run calls none of them, so it maps no CUDA library.
 *
 * What it does not do: anything with CUDA itself (the backend does; this
 * file includes no CUDA header and builds the same with or without CUDA),
 * unload the backend (a loaded backend stays until the process ends: its
 * communicators and device memory may be in use anywhere), or look for a
 * backend other than "cuda".
 */
#define _GNU_SOURCE
#include "cuda/cuda_sizes.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "backend.h"
#include "backend_abi.h"
#include "so_file.h" /* ts_so_file_check: the ELF checks before dlopen */
#include "tessera/comm.h"
#include "tessera/device.h"

#define BL_MSG 2048
#define BL_MAX_DIRS 32

/* The process's CUDA backend: tried at most once. */
static pthread_mutex_t bl_lock = PTHREAD_MUTEX_INITIALIZER;
static int bl_tried;                         /* a load was attempted        */
static const ts_backend_descriptor *bl_desc; /* non-NULL once loaded        */
static ts_status bl_code;                    /* the failure, when it failed */
static char bl_msg[BL_MSG];
static char bl_path[4096];

/* The loaded descriptor or NULL, without loading: no lock, since it is on
 * the path of every ts_device_free (bl_desc is written once, with release
 * order, after the backend is fully attached). */
static const ts_backend_descriptor *bl_loaded(void) {
    return __atomic_load_n(&bl_desc, __ATOMIC_ACQUIRE);
}

/* ---------------------------------------------------------------------------
 * The host table: the core functions a backend calls.
 * ------------------------------------------------------------------------- */

static ts_status bl_host_error(ts_status code, const char *message) {
    return ts_error(code, "%s", message ? message : "");
}

static const ts_backend_host bl_host = {
    .abi_version = TS_BACKEND_ABI_VERSION,
    .struct_size = sizeof(ts_backend_host),
    .error = bl_host_error,
    .last_error = ts_last_error,
    .assert_fail = ts_assert_fail,
    .dtype_size = ts_dtype_size,
    .mem_category_name = ts_mem_category_name,
    .comm_create = ts_comm_create,
    .comm_split = ts_comm_split,
    .comm_broadcast = ts_comm_broadcast,
    .comm_all_gather = ts_comm_all_gather,
    .comm_free = ts_comm_free,
    .comm_rank = ts_comm_rank,
    .comm_size = ts_comm_size,
    .comm_world_rank = ts_comm_world_rank,
    .comm_timeout = ts_comm_timeout,
    .comm_backend = ts_comm_backend,
};

const ts_backend_host *ts_backend_host_table(void) {
    return &bl_host;
}

/* ---------------------------------------------------------------------------
 * Checks
 * ------------------------------------------------------------------------- */

ts_status ts_backend_descriptor_check(const char *name, const char *path,
                                      const ts_backend_descriptor *d) {
    if (!d)
        return ts_error(TS_ERR_PLUGIN, "%s: %s() returned NULL (not a working backend)", path,
                        TS_BACKEND_SYMBOL);
    unsigned major = d->abi_version >> 16, minor = d->abi_version & 0xffffu;
    if (major != TS_BACKEND_ABI_MAJOR || minor > TS_BACKEND_ABI_MINOR)
        return ts_error(TS_ERR_PLUGIN,
                        "%s: built for backend ABI %u.%u, but this tessera speaks %d.%d (rebuild "
                        "the backend with this tessera, or install the matching one)",
                        path, major, minor, TS_BACKEND_ABI_MAJOR, TS_BACKEND_ABI_MINOR);
    if (d->struct_size < TS_BACKEND_DESCRIPTOR_SIZE_1_0)
        return ts_error(TS_ERR_PLUGIN,
                        "%s: descriptor of %u bytes, smaller than ABI %d.0's %zu (a damaged or "
                        "foreign backend)",
                        path, d->struct_size, TS_BACKEND_ABI_MAJOR,
                        (size_t)TS_BACKEND_DESCRIPTOR_SIZE_1_0);
    if (!d->name || strcmp(d->name, name) != 0)
        return ts_error(TS_ERR_PLUGIN, "%s: a backend named '%s', not '%s' as its file name says",
                        path, d->name ? d->name : "(null)", name);
    if (d->kind != TS_DEVICE_CUDA)
        return ts_error(TS_ERR_PLUGIN, "%s: a backend for device kind %d, not cuda", path,
                        (int)d->kind);
    if (d->table_size < sizeof(ts_backend))
        return ts_error(TS_ERR_PLUGIN,
                        "%s: its ops table has %u bytes, fewer than this tessera's %zu (an older "
                        "backend)",
                        path, d->table_size, sizeof(ts_backend));
    struct {
        const char *slot;
        int set;
    } req[] = {
        {"attach", d->attach != NULL},
        {"table", d->table != NULL},
        {"open", d->open != NULL},
        {"close", d->close != NULL},
        {"device_count", d->device_count != NULL},
        {"device_init", d->device_init != NULL},
        {"device_current", d->device_current != NULL},
        {"device_stream", d->device_stream != NULL},
        {"device_set_stream", d->device_set_stream != NULL},
        {"device_synchronize", d->device_synchronize != NULL},
        {"device_copy", d->device_copy != NULL},
        {"device_alloc", d->device_alloc != NULL},
        {"device_free", d->device_free != NULL},
        {"device_mem_stats", d->device_mem_stats != NULL},
        {"device_mem_reset_peak", d->device_mem_reset_peak != NULL},
        {"device_empty_cache", d->device_empty_cache != NULL},
        {"device_pool_stats", d->device_pool_stats != NULL},
    };
    for (size_t i = 0; i < sizeof req / sizeof req[0]; i++)
        if (!req[i].set)
            return ts_error(TS_ERR_PLUGIN, "%s: the descriptor's required slot '%s' is NULL", path,
                            req[i].slot);
    int nccl = (d->comm_nccl_create != NULL) + (d->comm_nccl_group_start != NULL) +
               (d->comm_nccl_group_end != NULL) + (d->comm_nccl_flush != NULL);
    if (nccl != 0 && nccl != 4)
        return ts_error(TS_ERR_PLUGIN,
                        "%s: the descriptor sets %d of the 4 NCCL slots (all or none)", path, nccl);
    return TS_OK;
}

/* ---------------------------------------------------------------------------
 * Finding and loading
 * ------------------------------------------------------------------------- */

typedef struct bl_dirs {
    char list[BL_MAX_DIRS][1024];
    int n;
} bl_dirs;

static void bl_dirs_add(bl_dirs *d, const char *s, size_t len) {
    while (len > 1 && s[len - 1] == '/')
        len--;
    if (len == 0 || d->n == BL_MAX_DIRS || len >= sizeof d->list[0]) return;
    for (int i = 0; i < d->n; i++)
        if (strlen(d->list[i]) == len && strncmp(d->list[i], s, len) == 0) return;
    memcpy(d->list[d->n], s, len);
    d->list[d->n++][len] = '\0';
}

/* $TESSERA_BACKEND_PATH, then the built-in directory. */
static void bl_search_dirs(bl_dirs *d) {
    d->n = 0;
    const char *env = getenv("TESSERA_BACKEND_PATH");
    for (const char *p = env; p && *p;) {
        const char *c = strchr(p, ':');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        bl_dirs_add(d, p, n);
        if (!c) break;
        p = c + 1;
    }
#ifdef TESSERA_BACKEND_DIR
    bl_dirs_add(d, TESSERA_BACKEND_DIR, strlen(TESSERA_BACKEND_DIR));
#else
    char buf[4096];
    ts_so_default_dir(buf, sizeof buf);
    bl_dirs_add(d, buf, strlen(buf));
#endif
}

/* Records a failure (bare message) for every later call, and returns it. */
static ts_status bl_fail(ts_status code) {
    bl_code = code;
    snprintf(bl_msg, sizeof bl_msg, "%s", ts_last_error_bare());
    return code;
}

/* The load itself; the lock is held. */
static ts_status bl_load_locked(void) {
    bl_dirs dirs;
    bl_search_dirs(&dirs);
    const char *found = NULL;
    char path[4096];
    for (int i = 0; i < dirs.n && !found; i++) {
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", dirs.list[i], TS_BACKEND_CUDA_FILE);
        if (stat(path, &sb) == 0) found = path;
    }
    if (!found) {
        char where[BL_MSG / 2];
        size_t j = 0;
        where[0] = '\0';
        for (int i = 0; i < dirs.n && j + 1 < sizeof where; i++)
            j += (size_t)snprintf(where + j, sizeof where - j, "%s%s", i ? ", " : "", dirs.list[i]);
        if (dirs.n == 0) snprintf(where, sizeof where, "(no directories)");
#ifdef TESSERA_CUDA_BACKEND_BUILT
        const char *hint = "the build puts it into <build>/tessera and the install into "
                           "<libdir>/tessera; TESSERA_BACKEND_PATH adds directories";
#else
        const char *hint = "this build has no CUDA (configure with -DTESSERA_CUDA=ON where the "
                           "CUDA toolkit is installed)";
#endif
        ts_error(TS_ERR_INVALID, "the CUDA backend %s is not in %s: %s", TS_BACKEND_CUDA_FILE,
                 where, hint);
        return bl_fail(TS_ERR_INVALID);
    }
    /* 1. The file: a damaged one is an error here, not SIGBUS inside dlopen. */
    if (ts_so_file_check(found) != TS_OK) {
        char why[BL_MSG];
        snprintf(why, sizeof why, "%s", ts_last_error_bare());
        ts_error(TS_ERR_PLUGIN, "cannot load the CUDA backend: %s", why);
        return bl_fail(TS_ERR_PLUGIN);
    }
    /* 2. dlopen: the CUDA libraries it needs are mapped now, and only now. */
    void *handle = dlopen(found, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *e = dlerror();
        ts_error(TS_ERR_PLUGIN, "cannot load the CUDA backend %s: %s", found,
                 e ? e : "dlopen failed");
        return bl_fail(TS_ERR_PLUGIN);
    }
    /* 3. The entry point and 4. its descriptor. */
    ts_backend_entry_fn entry;
    *(void **)&entry = dlsym(handle, TS_BACKEND_SYMBOL);
    ts_status st = TS_OK;
    const ts_backend_descriptor *d = NULL;
    if (!entry)
        st = ts_error(TS_ERR_PLUGIN, "%s: no symbol %s (not a tessera backend)", found,
                      TS_BACKEND_SYMBOL);
    if (!st) d = entry();
    if (!st) st = ts_backend_descriptor_check("cuda", found, d);
    if (st) {
        char why[BL_MSG];
        snprintf(why, sizeof why, "%s", ts_last_error_bare());
        dlclose(handle);
        ts_error(TS_ERR_PLUGIN, "cannot use the CUDA backend: %s", why);
        return bl_fail(TS_ERR_PLUGIN);
    }
    /* 5. attach: the backend keeps the host table. */
    if (d->attach(&bl_host) != TS_OK) {
        char why[BL_MSG];
        snprintf(why, sizeof why, "%s", ts_last_error_bare());
        dlclose(handle);
        ts_error(TS_ERR_PLUGIN, "the CUDA backend %s refused the core's host table: %s", found,
                 why[0] ? why : "(no message)");
        return bl_fail(TS_ERR_PLUGIN);
    }
    snprintf(bl_path, sizeof bl_path, "%s", found);
    __atomic_store_n(&bl_desc, d, __ATOMIC_RELEASE); /* the handle stays open for good */
    return TS_OK;
}

ts_status ts_backend_cuda_load(const ts_backend_descriptor **out) {
    const ts_backend_descriptor *loaded = bl_loaded();
    if (loaded) { /* the common case: no lock */
        if (out) *out = loaded;
        return TS_OK;
    }
    pthread_mutex_lock(&bl_lock);
    ts_status st = TS_OK;
    if (!bl_tried) {
        bl_tried = 1;
        st = bl_load_locked();
    } else if (!bl_desc) {
        st = ts_error(bl_code, "%s", bl_msg); /* the first failure, again */
    }
    const ts_backend_descriptor *d = bl_desc;
    pthread_mutex_unlock(&bl_lock);
    if (out) *out = d;
    return st;
}

const char *ts_backend_cuda_path(void) {
    return bl_loaded() ? bl_path : "";
}

/* ---------------------------------------------------------------------------
 * backend.h
 * ------------------------------------------------------------------------- */

/* The CUDA backend's sizing rules alone (cuda_sizes.h), for dry runs of
 * device = cuda: the device and the CUDA libraries are not needed. */
static size_t sizes_work(int N, int C, int OC) {
    return ts_cuda_matmul_bf16_work_bytes(N, C, OC);
}
static size_t sizes_saved(int B, int NH, int T) {
    return ts_cuda_attention_saved(B, NH, T);
}
static size_t sizes_scratch(int B, int NH, int T) {
    return ts_cuda_attention_scratch(B, NH, T);
}
const ts_backend *ts_backend_cuda_sizes(void) {
    static const ts_backend table = {.kind = TS_DEVICE_CUDA,
                                     .name = "cuda",
                                     .matmul_bf16_work_bytes = sizes_work,
                                     .attention_saved_floats = sizes_saved,
                                     .attention_scratch_floats = sizes_scratch};
    return &table;
}

const ts_backend *ts_backend_cuda(void) {
    const ts_backend_descriptor *d;
    if (ts_backend_cuda_load(&d) != TS_OK) return NULL;
    return d->table();
}

ts_status ts_backend_open(ts_device device, const ts_backend **out) {
    *out = NULL;
    if (device == TS_DEVICE_CPU) {
        *out = ts_backend_cpu();
        return TS_OK;
    }
    if (device != TS_DEVICE_CUDA)
        return ts_error(TS_ERR_INVALID, "backend: unknown device %d", (int)device);
    const ts_backend_descriptor *d;
    TS_TRY(ts_backend_cuda_load(&d));
    return d->open(out);
}

void ts_backend_close(const ts_backend *be) {
    if (!be || be->kind != TS_DEVICE_CUDA) return;
    const ts_backend_descriptor *d = bl_loaded();
    if (d) d->close(be);
}

/* ---------------------------------------------------------------------------
 * include/tessera/device.h
 * ------------------------------------------------------------------------- */

/* The descriptor for a call that needs the device, loading it; NULL with
 * the loader's message (prefixed with `what`) when there is none. */
static const ts_backend_descriptor *bl_need(const char *what) {
    const ts_backend_descriptor *d;
    if (ts_backend_cuda_load(&d) == TS_OK) return d;
    char why[BL_MSG];
    snprintf(why, sizeof why, "%s", ts_last_error_bare());
    ts_error(TS_ERR_INVALID, "%s: %s", what, why);
    return NULL;
}

int ts_device_count(void) {
    const ts_backend_descriptor *d;
    if (ts_backend_cuda_load(&d) != TS_OK) return 0;
    return d->device_count();
}

ts_status ts_device_init(int device) {
    const ts_backend_descriptor *d = bl_need("ts_device_init");
    return d ? d->device_init(device) : TS_ERR_INVALID;
}

int ts_device_current(void) {
    const ts_backend_descriptor *d = bl_loaded();
    return d ? d->device_current() : -1;
}

void *ts_device_stream(void) {
    const ts_backend_descriptor *d = bl_loaded();
    return d ? d->device_stream() : NULL;
}

void ts_device_set_stream(void *stream) {
    const ts_backend_descriptor *d = bl_loaded();
    if (!d && stream && ts_backend_cuda_load(&d) != TS_OK) return; /* no device: no stream */
    if (d) d->device_set_stream(stream);
}

ts_status ts_device_synchronize(void) {
    const ts_backend_descriptor *d = bl_need("ts_device_synchronize");
    return d ? d->device_synchronize() : TS_ERR_INVALID;
}

ts_status ts_device_copy(void *dst, const void *src, size_t bytes) {
    const ts_backend_descriptor *d = bl_need("ts_device_copy");
    return d ? d->device_copy(dst, src, bytes) : TS_ERR_INVALID;
}

void *ts_device_alloc(ts_mem_category cat, size_t bytes) {
    const ts_backend_descriptor *d = bl_need("ts_device_alloc");
    return d ? d->device_alloc(cat, bytes) : NULL;
}

void ts_device_free(void *ptr) {
    if (!ptr) return;
    const ts_backend_descriptor *d = bl_loaded();
    if (!d)
        fprintf(stderr, "tessera: ts_device_free(%p) before the CUDA backend was loaded\n", ptr);
    TS_ASSERT(d != NULL);
    d->device_free(ptr);
}

ts_mem_counter ts_device_mem_stats(ts_mem_category cat) {
    const ts_backend_descriptor *d = bl_loaded();
    if (d) return d->device_mem_stats(cat);
    ts_mem_counter c = {0, 0, 0};
    return c;
}

void ts_device_mem_reset_peak(void) {
    const ts_backend_descriptor *d = bl_loaded();
    if (d) d->device_mem_reset_peak();
}

size_t ts_device_empty_cache(void) {
    const ts_backend_descriptor *d = bl_loaded();
    return d ? d->device_empty_cache() : 0;
}

ts_device_pool_counter ts_device_pool_stats(void) {
    const ts_backend_descriptor *d = bl_loaded();
    if (d) return d->device_pool_stats();
    ts_device_pool_counter c;
    memset(&c, 0, sizeof c);
    return c;
}

ts_status ts_comm_nccl_create(ts_comm *mpi, const char *name, ts_comm **out) {
    if (out) *out = NULL;
    const ts_backend_descriptor *d = bl_need("ts_comm_nccl_create");
    if (!d) return TS_ERR_INVALID;
    if (!d->comm_nccl_create)
        return ts_error(TS_ERR_INVALID,
                        "ts_comm_nccl_create: the CUDA backend %s was built without NCCL",
                        ts_backend_cuda_path());
    return d->comm_nccl_create(mpi, name, out);
}

/* No NCCL communicator exists before the backend is loaded: nothing to
 * group or flush. */
ts_status ts_comm_nccl_group_start(void) {
    const ts_backend_descriptor *d = bl_loaded();
    return d && d->comm_nccl_group_start ? d->comm_nccl_group_start() : TS_OK;
}

ts_status ts_comm_nccl_group_end(void) {
    const ts_backend_descriptor *d = bl_loaded();
    return d && d->comm_nccl_group_end ? d->comm_nccl_group_end() : TS_OK;
}

ts_status ts_comm_nccl_flush(void) {
    const ts_backend_descriptor *d = bl_loaded();
    return d && d->comm_nccl_flush ? d->comm_nccl_flush() : TS_OK;
}
