/*
 * emu_async.h — the emulator's only asynchronous work (private to
 * cuda_emu.cc and nccl_emu.cc): an emulated NCCL operation is a set of MPI
 * requests plus what to do once they complete (a local reduction, freeing a
 * staging buffer); it sits on its stream until then. Events capture a
 * stream's pending operations (cuda_runtime_api.h).
 */
#ifndef TESSERA_TESTS_EMU_ASYNC_H
#define TESSERA_TESTS_EMU_ASYNC_H

#include <mpi.h>

#include <functional>
#include <vector>

#include "cuda_runtime_api.h"

struct emu_op {
    std::vector<MPI_Request> reqs;
    /* The bytes it reads and writes. A stream runs its work in order; here an
     * operation is issued at once, so one that touches what a pending one
     * writes (or writes what it reads) would see another order: refused. */
    const char *in = nullptr, *out = nullptr;
    size_t in_bytes = 0, out_bytes = 0;
    std::function<void()> finish; /* run once, when every request completed */
    bool done = false;
    int refs = 1; /* the stream's, plus one per event that captured it */
};

/* Queues op on stream (NULL: the legacy default stream); fails the test if
 * it overlaps a pending operation of that stream (see emu_op). */
void emu_stream_push(cudaStream_t stream, emu_op *op);
/* Tests (progressing MPI) / waits for op; runs its finish when complete. */
bool emu_op_test(emu_op *op);
void emu_op_wait(emu_op *op);
void emu_op_unref(emu_op *op);

#endif /* TESSERA_TESTS_EMU_ASYNC_H */
