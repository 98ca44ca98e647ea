/*
 * schedule.h — schedules as data.
 *
 * A schedule is, for one rank, the ordered list of actions of one training
 * step: FORWARD(mb, chunk), BACKWARD(mb, chunk), the point-to-point
 * exchanges of activations and their gradients between pipeline stages, and
 * the OPTIMIZER_STEP. It is produced by a pure function of (stages, rank,
 * micro-batches, ...), so it can be printed and checked without a model; the
 * executor in train.c runs it. The core provides the default one-stage
 * schedule; pipeline plugins register others.
 */
#ifndef TESSERA_CORE_SCHEDULE_H
#define TESSERA_CORE_SCHEDULE_H

#include <stdio.h>

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ts_action_kind {
    TS_ACT_FORWARD = 0,
    TS_ACT_BACKWARD = 1,
    TS_ACT_SEND_ACT = 2,  /* send the chunk's output activations downstream  */
    TS_ACT_RECV_ACT = 3,  /* receive the chunk's input activations           */
    TS_ACT_SEND_GRAD = 4, /* send the gradient of the chunk's input upstream */
    TS_ACT_RECV_GRAD = 5, /* receive the gradient of the chunk's output      */
    TS_ACT_OPTIMIZER_STEP = 6,
} ts_action_kind;

typedef struct ts_action {
    ts_action_kind kind;
    int mb;    /* micro-batch, -1 for OPTIMIZER_STEP                    */
    int chunk; /* model chunk (virtual stage) on this rank, 0 normally  */
    int peer;  /* pipeline rank of the other side of a send/recv, or -1 */
} ts_action;

typedef struct ts_schedule {
    int nactions;
    ts_action *actions; /* owned; free with ts_schedule_free */
} ts_schedule;

/* The one-stage schedule with gradient accumulation: F0 B0 F1 B1 ... OPT. */
ts_status ts_schedule_default(int micro_batches, ts_schedule *out);
void ts_schedule_free(ts_schedule *s);
/* One line, e.g. "F0 B0 F1 B1 OPT". */
void ts_schedule_print(const ts_schedule *s, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_SCHEDULE_H */
