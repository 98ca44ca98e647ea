/*
 * comm_types.h — the communicator's types: the opaque handles ts_comm and
 * ts_comm_request, the reduction and operation kinds, and the counters.
 *
 * This header is part of the SDK installed under include/tessera/. It
 * declares no function of libtessera (plugins reach the operations through
 * host->comms, plugin.h); comm.h includes it and declares the library's
 * communicator functions, for programs that link libtessera.
 */
#ifndef TESSERA_COMM_TYPES_H
#define TESSERA_COMM_TYPES_H

#include <stdint.h>

#include "tessera/tessera_types.h" /* ts_status, ts_dtype */

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque handles. A ts_comm is created by ts_comm_world_init, ts_comm_self_create,
 * ts_comm_split or a backend's constructor and released with ts_comm_free (the
 * world with ts_comm_world_finalize). A ts_comm_request is created by a `_start`
 * call and released by the ts_comm_wait / ts_comm_test call that completes it. */
typedef struct ts_comm ts_comm;
typedef struct ts_comm_request ts_comm_request;

/* The longest axis name, including the terminating NUL. */
#define TS_COMM_NAME_MAX 32
/* How many recent operations each rank remembers for post-mortems. */
#define TS_COMM_RECENT 16

typedef enum ts_reduce_op {
    TS_REDUCE_SUM = 0,
    TS_REDUCE_MAX = 1,
    TS_REDUCE_MIN = 2,
} ts_reduce_op;

/* The operation kinds counters are kept for. The `v` forms count under their
 * even form (all_gatherv under TS_COMM_ALL_GATHER, and so on). */
typedef enum ts_comm_op {
    TS_COMM_ALL_REDUCE = 0,
    TS_COMM_ALL_GATHER = 1,
    TS_COMM_REDUCE_SCATTER = 2,
    TS_COMM_ALL_TO_ALL = 3,
    TS_COMM_BROADCAST = 4,
    TS_COMM_SEND = 5,
    TS_COMM_RECV = 6,
    TS_COMM_BARRIER = 7,
    TS_COMM_NOPS = 8,
} ts_comm_op;

typedef struct ts_comm_op_counter {
    uint64_t calls; /* operations started                                   */
    uint64_t bytes; /* the sum of their "bytes" as defined per op above     */
    double seconds; /* wall time spent inside start + wait/test, completed
                       operations only: the communication time this rank
                       waited for (not hidden behind compute)               */
} ts_comm_op_counter;

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_COMM_TYPES_H */
