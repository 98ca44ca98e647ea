/*
 * dry_run_impl.h — the dry run's fields (dry_run.h), shared by its clock
 * (plan_clock.c) and its backend (backend_plan.c). Private to core/backend.
 */
#ifndef TESSERA_CORE_DRY_RUN_IMPL_H
#define TESSERA_CORE_DRY_RUN_IMPL_H

#include "backend.h"
#include "internal.h" /* TS_INTERNAL */
#include "dry_run.h"
#include "plan_clock.h"

/* A block of the dry run's region. */
typedef struct plan_block {
    char *ptr;
    size_t bytes;
    ts_mem_category cat;
    int live;
    int tag;       /* index into tags */
    int next_free; /* the next free block of this size, -1 at the end */
} plan_block;

/* Free blocks by size: an open-addressed table of sizes, each the head of
 * its list. */
typedef struct plan_size {
    size_t bytes; /* 0: an empty slot */
    int head;     /* first free block, -1 when none */
} plan_size;

#define PLAN_TAGS 16

struct ts_dry_run {
    /* the clock (plan_clock.c) */
    int clock_on;
    ts_plan_rates rates;
    ts_plan_time time;
    unsigned epoch; /* a link busy in an earlier epoch is free */
    int action;     /* the schedule action running, -1 outside */

    /* the backend (backend_plan.c) */
    ts_backend table;
    const ts_backend *target; /* whose sizing rules the table copies */
    char *base;               /* the reserved region              */
    size_t region, used;      /* its bytes, and those handed out   */
    plan_block *blocks;       /* in the order they were made       */
    int nblocks, capblocks;
    plan_size *sizes;
    size_t sizecap, nsizes;
    size_t allocated[TS_MEM_NCAT + 1], reserved[TS_MEM_NCAT + 1], peak[TS_MEM_NCAT + 1];
    /* the activations by tag: live bytes now, and at the activations' peak */
    const char *tags[PLAN_TAGS];
    int ntags, tag_now;
    size_t tag_live[PLAN_TAGS], tag_at_peak[PLAN_TAGS];
    /* FLOPs asked for, 2 per multiply-add */
    double flops_fwd, flops_bwd, flops_re;
};

/* Unbinds `dr` from the calling thread if it is bound there (its
 * destruction). */
TS_INTERNAL void plan_unbind(const ts_dry_run *dr);

#endif /* TESSERA_CORE_DRY_RUN_IMPL_H */
