/*
 * backend_abi.h — the contract between the core (libtessera.so) and a device
 * backend loaded at run time (<dir>/tessera-backend-<name>.so; today the one
 * backend is "cuda"): the entry point the backend exports, the descriptor it
 * returns, and the host table of core functions the core hands it.
 *
 * Why a separate shared object: the CUDA backend links cudart, cuBLAS and
 * NCCL. Linked into libtessera, those libraries are mapped and relocated by
 * every process, also by CPU runs that never touch a GPU (about 230 MiB of
 * resident memory for GPT-2 124M on the CPU). Loaded on demand, a CPU run
 * maps none of them. The core opens the backend (backend_load.c) on the
 * first call that needs a device: ts_backend_open(TS_DEVICE_CUDA),
 * ts_backend_cuda(), ts_device_count / init / alloc / copy / synchronize,
 * ts_comm_nccl_create. It is never unloaded.
 *
 * Finding the file. The core looks for tessera-backend-cuda.so in each
 * directory of $TESSERA_BACKEND_PATH (colon-separated, an override for
 * tests and unusual installs), then in the built-in directory: <the
 * directory of libtessera.so>/tessera, where the plugins live too (the
 * build's <build>/tessera, an install's <libdir>/tessera), or
 * TESSERA_BACKEND_DIR when the core is compiled with one (the emulator's
 * build of tests/cuda_emu.cmake). The first directory that holds the file
 * decides: a damaged file there is an error, not a reason to look further.
 *
 * Loading, in this order, each failure an error that names the file and
 * what is wrong (TS_ERR_INVALID when no file is found, TS_ERR_PLUGIN for
 * the rest; the trainer prefixes "[train] device = cuda: "):
 *   1. ts_so_file_check (core/base/so_file.h, the plugin loader's check
 *      too): a regular file, an ELF shared object of this machine whose
 *      loadable bytes lie within the file — a truncated or empty file is
 *      refused here, not by SIGBUS;
 *   2. dlopen(RTLD_NOW | RTLD_LOCAL): every library it needs (libcudart,
 *      libcublas, libnccl, ...) must be found; dlerror() says which is not;
 *   3. dlsym(TS_BACKEND_SYMBOL), called once: the descriptor;
 *   4. the descriptor: abi_version's major equal to the core's and its minor
 *      not newer, struct_size at least that of ABI 1.0, name equal to the
 *      file's <name>, kind matching, table_size at least sizeof(ts_backend),
 *      every required slot set;
 *   5. attach(host): the backend keeps the host table (and may refuse it).
 *
 * Versioning, as the plugin ABI's (include/tessera/plugin.h): one version,
 * (major << 16) | minor, covers the descriptor, the host table and the ops
 * table ts_backend (backend.h). Within a major, structs only grow at their
 * end; each carries its size. The backend and the core are built from one
 * tree and installed together, so in practice the versions match; the
 * checks turn a stale or foreign file into a message instead of a crash.
 *
 * Ownership: the descriptor, the ops table and everything they point to are
 * static in the backend and live until the process ends. The host table is
 * static in the core. A backend never frees what the core allocated, nor
 * the reverse; the ts_comm objects the NCCL constructor returns are the
 * core's (ts_comm_create) over ops and contexts of the backend, released
 * with ts_comm_free.
 *
 * Not here: the operations themselves (backend.h for the ops table,
 * include/tessera/device.h for the device, allocator and NCCL functions
 * whose semantics the descriptor's slots carry unchanged).
 */
#ifndef TESSERA_CORE_BACKEND_ABI_H
#define TESSERA_CORE_BACKEND_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"        /* ts_backend: the ops table */
#include "tessera/comm.h"   /* ts_comm, ts_comm_ops */
#include "tessera/device.h" /* ts_device_pool_counter */

#ifdef __cplusplus
extern "C" {
#endif

/* 1.1 appended the block attention slots (attention_block_*) to ts_backend;
 * a 1.0 backend's table is then too small and refused by its table_size.
 * 1.2 appended alloc_uninit (optional), 1.3 attention_recompute_floats,
 * attention_forward_unsaved and attention_backward_recompute (optional). */
#define TS_BACKEND_ABI_MAJOR 1
#define TS_BACKEND_ABI_MINOR 3
#define TS_BACKEND_ABI_MAKE(major, minor)                                                          \
    ((uint32_t)(((uint32_t)(major) << 16) | ((uint32_t)(minor)&0xffffu)))
#define TS_BACKEND_ABI_VERSION TS_BACKEND_ABI_MAKE(TS_BACKEND_ABI_MAJOR, TS_BACKEND_ABI_MINOR)

/* The one symbol a backend exports: a function of type ts_backend_entry_fn. */
#define TS_BACKEND_SYMBOL "tessera_backend_descriptor"
/* Marks the entry point as exported even under -fvisibility=hidden. */
#define TS_BACKEND_EXPORT __attribute__((visibility("default")))

/* The file of the CUDA backend, searched as said above. */
#define TS_BACKEND_CUDA_FILE "tessera-backend-cuda.so"

/* ---------------------------------------------------------------------------
 * What the core gives a backend: the core functions a backend's sources call
 * (ts_error, the communicator functions of the NCCL bootstrap, ...), so that
 * the backend links against nothing of tessera's and works under any copy of
 * the core (the shared library, or the emulator's static one). Each slot has
 * the semantics of the function of the same name in tessera.h / comm.h.
 * Every slot is set. The table lives as long as the process.
 * ------------------------------------------------------------------------- */
typedef struct ts_backend_host {
    uint32_t abi_version; /* TS_BACKEND_ABI_VERSION of the core                 */
    uint32_t struct_size; /* sizeof(ts_backend_host) as the core was compiled  */

    /* Errors: `error` sets the calling thread's last error to `message` (the
     * core adds its "[rank r/w] " prefix) and returns `code`. */
    ts_status (*error)(ts_status code, const char *message);
    const char *(*last_error)(void);
    void (*assert_fail)(const char *expr, const char *file, int line);

    /* Names and sizes. */
    size_t (*dtype_size)(ts_dtype dt);
    const char *(*mem_category_name)(ts_mem_category cat);

    /* Communicators (comm.h), for the NCCL communicator: wrap a backend
     * context (comm_create), bootstrap and split over MPI (comm_split,
     * comm_broadcast, comm_all_gather), and what a communicator is. */
    ts_status (*comm_create)(const ts_comm_ops *ops, void *ctx, const char *name, int rank,
                             int size, const int *world_ranks, double timeout_s, ts_comm **out);
    ts_status (*comm_split)(ts_comm *parent, int color, int key, const char *name, ts_comm **out);
    ts_status (*comm_broadcast)(ts_comm *comm, void *buf, size_t count, ts_dtype dtype, int root);
    ts_status (*comm_all_gather)(ts_comm *comm, const void *send, void *recv, size_t count,
                                 ts_dtype dtype);
    void (*comm_free)(ts_comm *comm);
    int (*comm_rank)(const ts_comm *comm);
    int (*comm_size)(const ts_comm *comm);
    int (*comm_world_rank)(const ts_comm *comm, int rank);
    double (*comm_timeout)(const ts_comm *comm);
    const char *(*comm_backend)(const ts_comm *comm);
} ts_backend_host;

/* ---------------------------------------------------------------------------
 * What a backend gives the core. Slots marked (required) must be set; the
 * NCCL slots may all be NULL (a backend built without NCCL: the core's
 * ts_comm_nccl_create then fails saying so, and its group functions do
 * nothing).
 * ------------------------------------------------------------------------- */
typedef struct ts_backend_descriptor {
    uint32_t abi_version; /* TS_BACKEND_ABI_VERSION the backend was built with */
    uint32_t struct_size; /* sizeof(ts_backend_descriptor) as it was compiled  */
    const char *name;     /* "cuda": must equal <name> of tessera-backend-<name>.so */
    ts_device kind;       /* TS_DEVICE_CUDA                                     */
    uint32_t table_size;  /* sizeof(ts_backend) as the backend was compiled    */

    /* (required) Called once, right after the checks, before any other slot.
     * The backend keeps `host` (borrowed for the process's life). Failure:
     * TS_ERR_PLUGIN with a message (e.g. a host table too old for it); the
     * core then refuses the backend. */
    ts_status (*attach)(const ts_backend_host *host);

    /* (required) The ops table without any initialisation (for estimates:
     * `tessera plan` reads attention_saved_floats). Never NULL. */
    const ts_backend *(*table)(void);
    /* (required) ts_backend_open / ts_backend_close for this device
     * (backend.h): open selects the device and creates the kernels' context,
     * counted; close undoes the last open. */
    ts_status (*open)(const ts_backend **out);
    void (*close)(const ts_backend *be);

    /* (required) include/tessera/device.h, one slot per function. */
    int (*device_count)(void);
    ts_status (*device_init)(int device);
    int (*device_current)(void);
    void *(*device_stream)(void);
    void (*device_set_stream)(void *stream);
    ts_status (*device_synchronize)(void);
    ts_status (*device_copy)(void *dst, const void *src, size_t bytes);
    void *(*device_alloc)(ts_mem_category cat, size_t bytes);
    void (*device_free)(void *ptr);
    ts_mem_counter (*device_mem_stats)(ts_mem_category cat);
    void (*device_mem_reset_peak)(void);
    size_t (*device_empty_cache)(void);
    ts_device_pool_counter (*device_pool_stats)(void);

    /* (optional, all or none) device.h's NCCL functions. */
    ts_status (*comm_nccl_create)(ts_comm *mpi, const char *name, ts_comm **out);
    ts_status (*comm_nccl_group_start)(void);
    ts_status (*comm_nccl_group_end)(void);
    ts_status (*comm_nccl_flush)(void);
} ts_backend_descriptor;

/* The type of the exported entry point: returns the backend's static
 * descriptor (never NULL for a working backend). */
typedef const ts_backend_descriptor *(*ts_backend_entry_fn)(void);

/* The size of the ABI 1.0 descriptor: the smallest the core accepts. */
#define TS_BACKEND_DESCRIPTOR_SIZE_1_0                                                             \
    (offsetof(ts_backend_descriptor, comm_nccl_flush) + sizeof(void (*)(void)))

/* ---------------------------------------------------------------------------
 * The core's side (backend_load.c).
 * ------------------------------------------------------------------------- */

/* Loads the CUDA backend if it is not loaded yet (once per process: a
 * failure is remembered and reported again by every later call).
 * Outputs: *out, the checked descriptor (may be NULL when not needed).
 * Failure: TS_ERR_INVALID when no directory holds the file (the message
 *          lists the directories, and says when this build has no CUDA),
 *          TS_ERR_PLUGIN for a file that cannot be loaded or is not a
 *          backend of this ABI; the message names the file and why. */
ts_status ts_backend_cuda_load(const ts_backend_descriptor **out);

/* The loaded CUDA backend's path ("" before a successful load). */
const char *ts_backend_cuda_path(void);

/* The host table the core hands to backends (also for tests of the checks). */
const ts_backend_host *ts_backend_host_table(void);

/* The checks of step 4 above, on a descriptor `d` read from `path` (only
 * named in messages) for device `name`. Returns TS_OK or TS_ERR_PLUGIN. */
ts_status ts_backend_descriptor_check(const char *name, const char *path,
                                      const ts_backend_descriptor *d);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_BACKEND_ABI_H */
