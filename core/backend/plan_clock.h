/*
 * plan_clock.h — the dry run's clock: how long one rank's step would take on
 * a described machine, kept while the dry run (backend_plan.h, comm_plan.h)
 * runs the real trainer. Each kernel of the dry-run backend charges its time
 * (a roofline: its FLOPs at the matrix rate or its bytes at the memory rate,
 * whichever is longer, plus a fixed cost per kernel); each operation of a
 * dry-run communicator occupies its group's link for latency + bytes x
 * factor / bandwidth (the alpha-beta model, in the bus-bandwidth convention
 * of NCCL's tests: all-reduce moves 2(n-1)/n of its buffer, all-gather and
 * reduce-scatter (n-1)/n of the whole, all-to-all (n-1)/n, send/recv and
 * broadcast the buffer once).
 *
 * Time: one compute stream and one link per communicator. A kernel runs
 * after the previous one; a communication starts when both the compute
 * stream has reached it and its link is free, and a wait moves the compute
 * stream to the operation's end: a collective started early and waited late
 * is hidden behind the kernels between (dp's buckets, zero's prefetch, cp's
 * ring), one waited at once is exposed. What the other ranks do is not
 * simulated: the pipeline's idle time comes from the schedule's simulation
 * (schedule.h) with the per-action times kept here.
 *
 * The time is attributed to the schedule action running (the dry run's,
 * dry_run.h), so that a forward, a backward and a weight-gradient part get
 * their own averages. The clock is the dry run's: every function takes it.
 *
 * What it does not do: contention between links, a hierarchy inside a
 * collective that spans nodes, kernels overlapping kernels.
 */
#ifndef TESSERA_CORE_PLAN_CLOCK_H
#define TESSERA_CORE_PLAN_CLOCK_H

#include "tessera/comm.h"

#include "dry_run.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A device's rates. */
typedef struct ts_plan_rates {
    double matmul_f32, matmul_bf16; /* FLOP/s a large GEMM reaches, per dtype  */
    double attention;               /* FLOP/s of the attention products        */
    double attention_block;         /* FLOP/s of ring attention's blocks (cp)  */
    double memory;                  /* bytes/s a memory-bound kernel streams   */
    double kernel_s;                /* fixed seconds per kernel (a launch)     */
    int serial_comm;                /* 1: communication runs on the compute
                                     * stream when it starts (no progress
                                     * beside the kernels: MPI on CPUs)     */
} ts_plan_rates;

/* One group's link: per operation kind, seconds per call and bus bytes/s. */
typedef struct ts_plan_link {
    double latency_s[TS_COMM_NOPS];
    double bandwidth[TS_COMM_NOPS];
} ts_plan_link;

/* Turns the clock on with `rates` (copied), or off (NULL), and resets it. */
void ts_plan_clock_enable(ts_dry_run *dr, const ts_plan_rates *rates);
int ts_plan_clock_on(const ts_dry_run *dr);
/* Zero time, empty tallies; links keep their costs. */
void ts_plan_clock_reset(ts_dry_run *dr);

/* A kernel: `flops` at the rate of `kind` (0 f32 GEMM, 1 bf16 GEMM, 2
 * attention, 3 a block of ring attention; flops 0 for a memory-bound
 * kernel) and `bytes` it streams. */
enum { TS_PLAN_F32 = 0, TS_PLAN_BF16 = 1, TS_PLAN_ATTENTION = 2, TS_PLAN_ATTENTION_BLOCK = 3 };
void ts_plan_clock_kernel(ts_dry_run *dr, int kind, double flops, double bytes);

/* The seconds an operation `op` of `bytes` takes on a group of `size` over
 * `link` (0 for a group of one). */
double ts_plan_link_seconds(const ts_plan_link *link, ts_comm_op op, int size, double bytes);
/* When a link is free again (a reset of the clock frees every link). */
typedef struct ts_plan_busy {
    double until;
    unsigned epoch;
} ts_plan_busy;
/* Starts an operation of `seconds` on a link busy until *busy: returns its
 * end and marks the link busy until then. */
double ts_plan_clock_start(ts_dry_run *dr, ts_plan_busy *busy, double seconds);
/* The compute stream waits for an operation that ends at `end`. */
void ts_plan_clock_wait(ts_dry_run *dr, double end);

/* Where the time went: per schedule action kind (ts_action_kind, the one
 * the dry run says runs), its seconds; the rest (before, between and after the
 * actions: the optimizer step, the waits for gradients) in `outside`;
 * `total` is the compute stream's time, of which `compute_s` in kernels and
 * `exposed_s` waiting for communication. */
#define TS_PLAN_ACTIONS 16
typedef struct ts_plan_time {
    double total, outside;
    double action_s[TS_PLAN_ACTIONS];
    double compute_s, exposed_s;
    double outside_compute_s; /* the kernels of `outside` */
} ts_plan_time;
void ts_plan_clock_read(const ts_dry_run *dr, ts_plan_time *out);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_PLAN_CLOCK_H */
