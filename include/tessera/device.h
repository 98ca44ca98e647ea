/*
 * device.h — the GPU side of tessera: which GPU this process drives, the
 * compute stream, the caching device allocator, and the NCCL communicator.
 *
 * This header is part of the SDK installed under include/tessera/. It names
 * no CUDA or NCCL type (streams travel as `void *`, a cudaStream_t), so a
 * plugin includes it whether or not tessera was built with CUDA. See
 * docs/gpu.md for how the pieces fit together.
 *
 * Where it is implemented. libtessera links no CUDA library: the functions
 * below forward to the CUDA backend, tessera-backend-cuda.so, which the core
 * loads on the first call that needs a device — ts_device_count,
 * ts_device_init, ts_device_synchronize, ts_device_copy, ts_device_alloc,
 * ts_device_set_stream with a stream, ts_comm_nccl_create (and
 * ts_backend_open for `[train] device = cuda`). Until then, and for good when
 * the backend cannot be loaded (a build without CUDA, a missing or damaged
 * file), the others answer as a machine without a GPU: ts_device_current()
 * is -1, the stream NULL, the counters zero, the NCCL group functions do
 * nothing; ts_device_count() is 0, and the calls that need a device fail
 * with TS_ERR_INVALID and the loader's message (which file, why). So a CPU
 * run maps no CUDA library at all.
 *
 * One GPU per process. A process drives exactly one device, chosen once by
 * ts_device_init (or implicitly by the first call that needs a device) from
 * the launcher's local rank, so that the ranks of one node spread over its
 * GPUs. Every function below is about that device.
 *
 * Streams. Compute kernels run on the compute stream (ts_device_stream,
 * NULL = CUDA's legacy default stream unless the kernels set their own).
 * Each NCCL communicator owns a communication stream; an operation waits on
 * the compute stream's work enqueued before it (an event, not a host sync),
 * and its request completes when the operation has finished on the GPU.
 *
 * The caching allocator. ts_device_alloc hands out device memory from pools
 * (one per memory category) of segments obtained with cudaMalloc; freed
 * blocks stay cached and are reused, so a training step that allocates what
 * the previous step allocated calls cudaMalloc no more. Counters follow the
 * host allocator's (ts_mem_stats), per category:
 *   allocated — bytes asked for and not yet freed;
 *   reserved  — bytes held from cudaMalloc (segments, cached or in use);
 *   peak      — the highest `allocated` seen (for TS_MEM_NCAT: of the sum).
 * Blocks are stream-ordered on the compute stream: a block may be freed as
 * soon as the host has enqueued its last use on the compute stream (the next
 * owner's kernels run after it, in stream order), but memory used by any
 * other stream — a communication buffer — may be freed only after that use
 * has completed (after ts_comm_wait on its request). The allocator is
 * thread-safe (one mutex).
 */
#ifndef TESSERA_DEVICE_H
#define TESSERA_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "tessera/comm.h"    /* ts_comm, for the NCCL constructor */
#include "tessera/tessera.h" /* ts_status, ts_mem_category, ts_mem_counter */

#ifdef __cplusplus
extern "C" {
#endif

/* ===========================================================================
 * 1. The device and the compute stream
 * ======================================================================== */

/* The number of CUDA devices this process sees (CUDA_VISIBLE_DEVICES
 * applies); 0 without a GPU, without a driver, or when the CUDA backend
 * cannot be loaded (a build without CUDA). Loads the backend (a query of the
 * device needs it) but never fails and never selects a device: tests call it
 * to decide to skip. */
int ts_device_count(void);

/* Selects the device this process drives, once.
 * Inputs:  device — a device index, or -1: the launcher's local rank
 *          (OMPI_COMM_WORLD_LOCAL_RANK, else MPI_LOCALRANKID, SLURM_LOCALID,
 *          LOCAL_RANK; 0 if none is set) modulo ts_device_count().
 * Failure: TS_ERR_INVALID without a device, for an index out of range, or
 *          when a different device was selected before (calling it again with
 *          the same device, or with -1, is TS_OK and does nothing). The
 *          allocator and the NCCL constructor call ts_device_init(-1) when
 *          nothing was selected yet. */
ts_status ts_device_init(int device);

/* The selected device, or -1 before ts_device_init. */
int ts_device_current(void);

/* The compute stream (a cudaStream_t; NULL is the legacy default stream).
 * The kernels launch on it, the allocator zero-fills on it, and every NCCL
 * operation waits for the work enqueued on it before the operation starts.
 * The stream is borrowed: whoever created it destroys it, after setting the
 * compute stream back to NULL. Set it before any communication starts, and
 * synchronise the old stream before changing it (cached blocks are ordered
 * only on the compute stream of the moment). */
void *ts_device_stream(void);
void ts_device_set_stream(void *stream);

/* Waits until all work on the compute stream has finished.
 * Failure: TS_ERR_INVALID (no device), TS_ERR_INTERNAL for a CUDA error
 * (a kernel fault surfaces here), with CUDA's message. */
ts_status ts_device_synchronize(void);

/* Copies `bytes` between any two of host and device memory (the direction is
 * inferred from the pointers), ordered after the compute stream's work, and
 * returns when the copy is done. For tests, checkpoints and data upload.
 * Failure: TS_ERR_INVALID (no device), TS_ERR_INTERNAL for a CUDA error. */
ts_status ts_device_copy(void *dst, const void *src, size_t bytes);

/* ===========================================================================
 * 2. The caching allocator
 * ======================================================================== */

/* Allocates `bytes` of device memory under `cat` (256-byte aligned at least,
 * zero-filled on the compute stream, like ts_mem_alloc's zeroed blocks).
 * Requests are rounded up to a multiple of 512 bytes; up to 1 MiB they are
 * carved from 2 MiB segments, larger ones from segments rounded up to a
 * multiple of 2 MiB whose remainder (over 1 MiB) stays cached for later
 * requests. When cudaMalloc fails the allocator releases every cached,
 * unused segment (of every category) and tries once more.
 * Returns NULL and sets the last error on failure: TS_ERR_INVALID for a bad
 * category or no device, TS_ERR_NOMEM with the category, the size and what
 * the device holds. bytes == 0 returns a valid (512-byte) block counted as 0
 * allocated bytes. Free with ts_device_free, never cudaFree. */
void *ts_device_alloc(ts_mem_category cat, size_t bytes);

/* Returns a block to its pool (cached, not to CUDA). NULL is ignored. A
 * pointer that ts_device_alloc did not return, or one freed twice, is a
 * broken invariant: the process aborts with a message. */
void ts_device_free(void *ptr);

/* Counters of one category, or of all together with cat == TS_MEM_NCAT;
 * zeros for an unknown category or before the first allocation. */
ts_mem_counter ts_device_mem_stats(ts_mem_category cat);

/* Forgets the peaks (sets each to the current allocation). */
void ts_device_mem_reset_peak(void);

/* Returns every cached segment none of whose bytes are handed out to CUDA
 * (cudaFree), lowering `reserved`. Blocks in use are untouched. Waits for the
 * device first (cudaFree would anyway). Returns the bytes released. */
size_t ts_device_empty_cache(void);

/* What the pool did since the process started. */
typedef struct ts_device_pool_counter {
    uint64_t allocs;       /* successful ts_device_alloc calls               */
    uint64_t frees;        /* ts_device_free calls with a non-NULL pointer   */
    uint64_t cuda_mallocs; /* segments obtained with cudaMalloc              */
    uint64_t cuda_frees;   /* segments returned with cudaFree                */
    uint64_t oom_retries;  /* cudaMalloc failures retried after emptying the
                              cache                                          */
    size_t cached;         /* reserved bytes not handed out (free blocks)    */
    size_t segments;       /* segments held now                              */
} ts_device_pool_counter;

/* A snapshot of the pool counters. A steady-state training step shows no
 * change in cuda_mallocs between its start and its end. */
ts_device_pool_counter ts_device_pool_stats(void);

/* ===========================================================================
 * 3. The NCCL communicator
 * ======================================================================== */

/* Makes an NCCL communicator over the ranks of `mpi` (the MPI world or any
 * communicator split from it). Collective over `mpi`: every rank of it must
 * call. Selects this process's device (ts_device_init(-1)) if none is yet,
 * then rank 0 of `mpi` creates an ncclUniqueId and broadcasts it with
 * ts_comm_broadcast over a private duplicate of `mpi` (kept for host-side
 * exchanges and split); every rank then joins with ncclCommInitRank.
 *
 * The result is an ordinary ts_comm (backend "nccl"): the operations of
 * comm.h with device buffers, counters, timeouts, split. Its rank, size,
 * world ranks and timeout are those of `mpi` (and abort-on-timeout is the
 * default, 1). NCCL specifics, beyond what comm.h promises:
 *   - all_gatherv and reduce_scatter_v are grouped broadcasts and reduces;
 *     all_to_all(v) are grouped sends and recvs;
 *   - send/recv have no tags (the tag is checked, then ignored) and no count
 *     check: a pair's messages match in the order they were started, and a
 *     count mismatch is undefined (it usually ends in a timeout);
 *   - sends and recvs started outside an explicit group are held back and
 *     issued together, as one NCCL group, at the next wait or test of any
 *     NCCL request, at the next collective, or at ts_comm_nccl_flush — so
 *     two ranks that exchange with `_start` forms do not deadlock;
 *   - on a timeout the core's message is printed, then the job ends through
 *     ncclCommAbort and MPI_Abort; with abort-on-timeout off, ts_comm_free
 *     later aborts the NCCL communicator instead of destroying it.
 *
 * Inputs:  mpi  — an MPI-backed communicator, borrowed for the call (it may
 *                 be freed afterwards);
 *          name — the axis name, copied.
 * Outputs: *out — owned by the caller, released with ts_comm_free before
 *          ts_comm_world_finalize.
 * Failure: TS_ERR_INVALID (no CUDA backend, one built without NCCL, no
 *          device, a backend other than "mpi", a bad name); TS_ERR_COMM when
 *          NCCL cannot initialise (its message included), e.g. two ranks on
 *          one GPU. */
ts_status ts_comm_nccl_create(ts_comm *mpi, const char *name, ts_comm **out);

/* Explicit groups, for the pipeline's exchange of activations and
 * gradients: every `_start` call on any NCCL communicator between
 * group_start and group_end is issued as one NCCL group (ncclGroupStart/End)
 * at group_end; requests started inside may be waited on only after it
 * (earlier: TS_ERR_INVALID). Groups nest; the outermost end issues. */
ts_status ts_comm_nccl_group_start(void);
ts_status ts_comm_nccl_group_end(void);

/* Issues the sends and recvs held back outside a group now (see above), so
 * that they progress during compute that follows. No-op when none. */
ts_status ts_comm_nccl_flush(void);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_DEVICE_H */
