/*
 * nccl_emu.cc — the emulator's NCCL (include/nccl.h) over MPI: one MPI
 * process per emulated GPU, device memory being host memory.
 *
 * Communicators. ncclGetUniqueId writes the caller's world rank and a
 * sequence number; ncclCommInitRank gathers the members' world ranks at the
 * id's owner over MPI_COMM_WORLD point-to-point (tags 31000 + seq % 1000 and
 * 32000 + ...), which sends the list back, and every member then calls
 * MPI_Comm_create_group: collective over the members only, as NCCL's
 * initialisation is. ncclCommSplit is MPI_Comm_split of that communicator.
 *
 * Operations are issued at once as non-blocking MPI calls and queued on
 * their stream as pending work (emu_async.h); reductions gather every
 * rank's contribution and reduce it locally in rank order when the requests
 * complete (f32 and bf16 accumulate in f32, bf16 is rounded once at the
 * end). Groups need nothing: everything is non-blocking already, and each
 * rank issues the same collectives in the same order, as NCCL requires.
 * Errors come back as ncclInvalidArgument / ncclSystemError with a last
 * error string; asynchronous errors never occur (a peer that never joins
 * leaves the operation pending, as a real NCCL hang would).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "emu_async.h"
#include "nccl.h"
#include "tessera/tessera.h"

struct ncclComm {
    MPI_Comm comm;
    int rank, size;
};

static char nccl_last[256];
static ncclResult_t nccl_err(ncclResult_t r, const char *what) {
    snprintf(nccl_last, sizeof nccl_last, "%s", what);
    return r;
}

struct nccl_id {
    int magic, owner, seq;
};
#define NCCL_EMU_MAGIC 0x7e55e7a

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    static int seq;
    nccl_id v = {NCCL_EMU_MAGIC, 0, seq++};
    MPI_Comm_rank(MPI_COMM_WORLD, &v.owner);
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &v, sizeof v);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
    nccl_id v;
    memcpy(&v, id.internal, sizeof v);
    if (v.magic != NCCL_EMU_MAGIC) return nccl_err(ncclInvalidArgument, "not an emulated id");
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return nccl_err(ncclInvalidArgument, "bad rank or size");
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int tag = 31000 + v.seq % 1000;
    std::vector<int> members((size_t)nranks, -1);
    if (rank == 0) {
        if (me != v.owner) return nccl_err(ncclInvalidUsage, "rank 0 must own the id");
        members[0] = me;
        for (int i = 1; i < nranks; i++) {
            int msg[2];
            MPI_Recv(msg, 2, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (msg[0] < 1 || msg[0] >= nranks || members[(size_t)msg[0]] >= 0)
                return nccl_err(ncclInvalidUsage, "two members claim one rank");
            members[(size_t)msg[0]] = msg[1];
        }
        for (int i = 1; i < nranks; i++)
            MPI_Send(members.data(), nranks, MPI_INT, members[(size_t)i], tag + 1000,
                     MPI_COMM_WORLD);
    } else {
        int msg[2] = {rank, me};
        MPI_Send(msg, 2, MPI_INT, v.owner, tag, MPI_COMM_WORLD);
        MPI_Recv(members.data(), nranks, MPI_INT, v.owner, tag + 1000, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    }
    MPI_Group world, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, nranks, members.data(), &group);
    MPI_Comm c;
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &c);
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    if (rc != MPI_SUCCESS) return nccl_err(ncclSystemError, "MPI_Comm_create_group failed");
    *out = new ncclComm{c, rank, nranks};
    return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config) {
    (void)config;
    MPI_Comm c;
    if (MPI_Comm_split(comm->comm, color < 0 ? MPI_UNDEFINED : color, key, &c) != MPI_SUCCESS)
        return nccl_err(ncclSystemError, "MPI_Comm_split failed");
    *newcomm = NULL;
    if (c == MPI_COMM_NULL) return ncclSuccess;
    int r, n;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &n);
    *newcomm = new ncclComm{c, r, n};
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
    MPI_Comm_free(&comm->comm);
    delete comm;
    return ncclSuccess;
}
/* Operations may still be pending on it: leave the MPI communicator alone. */
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    delete comm;
    return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    *count = comm->size;
    return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    *rank = comm->rank;
    return ncclSuccess;
}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async) {
    (void)comm;
    *async = ncclSuccess;
    return ncclSuccess;
}
const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclSystemError: return "system error";
    default: return "emulated NCCL error";
    }
}
const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return nccl_last;
}
ncclResult_t ncclGroupStart(void) {
    return ncclSuccess;
}
ncclResult_t ncclGroupEnd(void) {
    return ncclSuccess;
}

/* --- element types and local reductions --------------------------------- */
static size_t nccl_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
    }
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        float f = (float)man / 16777216.0f; /* 2^-24 */
        return sign ? -f : f;
    }
    if (exp == 31)
        u = sign | 0x7f800000u | (man << 13);
    else
        u = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    float a = f < 0 ? -f : f;
    if (a != a) return (uint16_t)(sign | 0x7e00);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
    if (a < 6.103515625e-05f) return (uint16_t)(sign | (uint32_t)(a * 16777216.0f + 0.5f));
    uint32_t exp = ((u >> 23) & 0xff) - 112, man = u & 0x7fffff;
    uint32_t h = (exp << 10) | (man >> 13), rest = man & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
    return (uint16_t)(sign | h);
}

static double nccl_get(const void *p, size_t i, ncclDataType_t t) {
    switch (t) {
    case ncclFloat32: return ((const float *)p)[i];
    case ncclBfloat16: return ts_bf16_to_f32(((const uint16_t *)p)[i]);
    case ncclFloat16: return f16_to_f32(((const uint16_t *)p)[i]);
    case ncclInt32: return ((const int32_t *)p)[i];
    case ncclUint32: return ((const uint32_t *)p)[i];
    case ncclUint8: return ((const uint8_t *)p)[i];
    case ncclInt8: return ((const int8_t *)p)[i];
    case ncclFloat64: return ((const double *)p)[i];
    default: return (double)((const int64_t *)p)[i];
    }
}
static void nccl_put(void *p, size_t i, ncclDataType_t t, double v) {
    switch (t) {
    case ncclFloat32: ((float *)p)[i] = (float)v; break;
    case ncclBfloat16: ((uint16_t *)p)[i] = ts_f32_to_bf16((float)v); break;
    case ncclFloat16: ((uint16_t *)p)[i] = f32_to_f16((float)v); break;
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case ncclInt8: ((int8_t *)p)[i] = (int8_t)v; break;
    case ncclFloat64: ((double *)p)[i] = v; break;
    default: ((int64_t *)p)[i] = (int64_t)v; break;
    }
}

/* out (count) = contributions parts[0..n) (each count elements, one after
 * another) reduced in order; floats accumulate in f32 as the device would. */
static void nccl_reduce_local(void *out, const char *parts, int n, size_t count, ncclDataType_t t,
                              ncclRedOp_t op) {
    size_t es = nccl_size(t);
    int is_float = t == ncclFloat32 || t == ncclBfloat16 || t == ncclFloat16;
    for (size_t i = 0; i < count; i++) {
        double acc = nccl_get(parts, i, t);
        for (int r = 1; r < n; r++) {
            double x = nccl_get(parts + (size_t)r * count * es, i, t);
            switch (op) {
            case ncclSum:
            case ncclAvg: acc = is_float ? (double)((float)acc + (float)x) : acc + x; break;
            case ncclProd: acc = is_float ? (double)((float)acc * (float)x) : acc * x; break;
            case ncclMax: acc = x > acc ? x : acc; break;
            case ncclMin: acc = x < acc ? x : acc; break;
            }
        }
        if (op == ncclAvg) acc /= n;
        nccl_put(out, i, t, acc);
    }
}

/* --- operations ------------------------------------------------------------ */
static void nccl_io(emu_op *o, const void *in, size_t in_bytes, const void *out, size_t out_bytes) {
    o->in = (const char *)in;
    o->in_bytes = in_bytes;
    o->out = (const char *)out;
    o->out_bytes = out_bytes;
}

static int nccl_bytes_ok(size_t bytes) {
    return bytes <= (size_t)INT32_MAX;
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    size_t bytes = count * nccl_size(type);
    if (!nccl_bytes_ok(bytes * (size_t)comm->size))
        return nccl_err(ncclInvalidArgument, "too large");
    char *parts = (char *)malloc(bytes * (size_t)comm->size + 1);
    emu_op *o = new emu_op;
    nccl_io(o, send, bytes, recv, bytes);
    o->reqs.resize(1);
    MPI_Iallgather(send, (int)bytes, MPI_BYTE, parts, (int)bytes, MPI_BYTE, comm->comm,
                   &o->reqs[0]);
    int n = comm->size;
    o->finish = [=]() {
        nccl_reduce_local(recv, parts, n, count, type, op);
        free(parts);
    };
    emu_stream_push(stream, o);
    return ncclSuccess;
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
    size_t bytes = count * nccl_size(type);
    if (!nccl_bytes_ok(bytes * (size_t)comm->size))
        return nccl_err(ncclInvalidArgument, "too large");
    if (root < 0 || root >= comm->size) return nccl_err(ncclInvalidArgument, "bad root");
    int me = comm->rank, n = comm->size;
    char *parts = me == root ? (char *)malloc(bytes * (size_t)n + 1) : NULL;
    emu_op *o = new emu_op;
    nccl_io(o, send, bytes, me == root ? recv : NULL, bytes);
    o->reqs.resize(1);
    MPI_Igather(send, (int)bytes, MPI_BYTE, parts, (int)bytes, MPI_BYTE, root, comm->comm,
                &o->reqs[0]);
    o->finish = [=]() {
        if (parts) nccl_reduce_local(recv, parts, n, count, type, op);
        free(parts);
    };
    emu_stream_push(stream, o);
    return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    size_t bytes = recvcount * nccl_size(type);
    int n = comm->size;
    if (!nccl_bytes_ok(bytes * (size_t)n)) return nccl_err(ncclInvalidArgument, "too large");
    /* parts[j] = rank j's block for this rank */
    char *parts = (char *)malloc(bytes * (size_t)n + 1);
    emu_op *o = new emu_op;
    nccl_io(o, send, bytes * (size_t)n, recv, bytes);
    o->reqs.resize(1);
    MPI_Ialltoall(send, (int)bytes, MPI_BYTE, parts, (int)bytes, MPI_BYTE, comm->comm, &o->reqs[0]);
    o->finish = [=]() {
        nccl_reduce_local(recv, parts, n, recvcount, type, op);
        free(parts);
    };
    emu_stream_push(stream, o);
    return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
    size_t bytes = sendcount * nccl_size(type);
    if (!nccl_bytes_ok(bytes * (size_t)comm->size))
        return nccl_err(ncclInvalidArgument, "too large");
    /* In place when send is this rank's block of recv (MPI wants MPI_IN_PLACE). */
    const void *src = send == (const char *)recv + bytes * (size_t)comm->rank ? MPI_IN_PLACE : send;
    emu_op *o = new emu_op;
    nccl_io(o, src == MPI_IN_PLACE ? NULL : send, bytes, recv, bytes * (size_t)comm->size);
    o->reqs.resize(1);
    MPI_Iallgather(src, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm->comm, &o->reqs[0]);
    emu_stream_push(stream, o);
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
    size_t bytes = count * nccl_size(type);
    if (!nccl_bytes_ok(bytes)) return nccl_err(ncclInvalidArgument, "too large");
    if (root < 0 || root >= comm->size) return nccl_err(ncclInvalidArgument, "bad root");
    if (comm->rank == root && send != recv && bytes) memmove(recv, send, bytes);
    emu_op *o = new emu_op;
    nccl_io(o, NULL, 0, recv, bytes);
    o->reqs.resize(1);
    MPI_Ibcast(recv, (int)bytes, MPI_BYTE, root, comm->comm, &o->reqs[0]);
    emu_stream_push(stream, o);
    return ncclSuccess;
}

#define NCCL_EMU_P2P_TAG 7
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
    size_t bytes = count * nccl_size(type);
    if (!nccl_bytes_ok(bytes) || peer < 0 || peer >= comm->size)
        return nccl_err(ncclInvalidArgument, "bad send");
    emu_op *o = new emu_op;
    nccl_io(o, send, bytes, NULL, 0);
    o->reqs.resize(1);
    MPI_Isend(send, (int)bytes, MPI_BYTE, peer, NCCL_EMU_P2P_TAG, comm->comm, &o->reqs[0]);
    emu_stream_push(stream, o);
    return ncclSuccess;
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    size_t bytes = count * nccl_size(type);
    if (!nccl_bytes_ok(bytes) || peer < 0 || peer >= comm->size)
        return nccl_err(ncclInvalidArgument, "bad recv");
    emu_op *o = new emu_op;
    nccl_io(o, NULL, 0, recv, bytes);
    o->reqs.resize(1);
    MPI_Irecv(recv, (int)bytes, MPI_BYTE, peer, NCCL_EMU_P2P_TAG, comm->comm, &o->reqs[0]);
    emu_stream_push(stream, o);
    return ncclSuccess;
}
