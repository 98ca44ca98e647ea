/*
 * layout_types.h — the layout's types: placements (with their static inline
 * constructors), the layout of a tensor over named mesh axes, and the layout
 * plan that plugins' transforms edit. layout.h explains the model.
 *
 * This header is part of the SDK installed under include/tessera/. It
 * declares no function of libtessera (plugins reach the layout arithmetic
 * through host->comms, plugin.h); layout.h includes it and declares the
 * library's layout functions, for programs that link libtessera.
 */
#ifndef TESSERA_LAYOUT_TYPES_H
#define TESSERA_LAYOUT_TYPES_H

#include <stdint.h>

#include "tessera/comm_types.h"    /* TS_COMM_NAME_MAX */
#include "tessera/tessera_types.h" /* TS_MAX_DIMS, TS_NAME_MAX */

#ifdef __cplusplus
extern "C" {
#endif

/* The most mesh axes one layout names. */
#define TS_LAYOUT_MAX_AXES 8
/* Room for ts_layout_describe's text of any layout (8 axes of 31-character
 * names with "S(3)"), including the NUL. */
#define TS_LAYOUT_DESCRIBE_MAX (TS_LAYOUT_MAX_AXES * (TS_COMM_NAME_MAX + 8) + 2)

typedef enum ts_placement_kind {
    TS_PLACEMENT_REPLICATE = 0, /* R: every rank of the axis holds the block */
    TS_PLACEMENT_SHARD = 1,     /* S(dim): cut along dim, part i at coord i   */
    TS_PLACEMENT_PARTIAL = 2,   /* P: the value is the sum over the axis      */
} ts_placement_kind;

typedef struct ts_placement {
    ts_placement_kind kind;
    int dim; /* TS_PLACEMENT_SHARD: the global dimension cut (0..ndim-1);
                0 and ignored for the other kinds */
} ts_placement;

static inline ts_placement ts_placement_replicate(void) {
    ts_placement p = {TS_PLACEMENT_REPLICATE, 0};
    return p;
}
static inline ts_placement ts_placement_shard(int dim) {
    ts_placement p = {TS_PLACEMENT_SHARD, dim};
    return p;
}
static inline ts_placement ts_placement_partial(void) {
    ts_placement p = {TS_PLACEMENT_PARTIAL, 0};
    return p;
}

typedef struct ts_layout_axis {
    char name[TS_COMM_NAME_MAX]; /* "tp", "dp", "tp-dp", ...: letters, digits,
                                    '_', '-', '.' (the communicator's rule) */
    int size;                    /* ranks along the axis, >= 1            */
    ts_placement placement;
} ts_layout_axis;

typedef struct ts_layout {
    int ndim;                                /* 0..TS_MAX_DIMS                           */
    int64_t shape[TS_MAX_DIMS];              /* the global shape, every extent >= 0      */
    int naxes;                               /* 0..TS_LAYOUT_MAX_AXES                    */
    ts_layout_axis axes[TS_LAYOUT_MAX_AXES]; /* in nesting order (above)    */
} ts_layout;

/* What a plan entry describes: transforms pick their tensors by kind and
 * name (a parameter's name is its model name: "wte", "h.3.attn.qkv.weight"). */
typedef enum ts_plan_kind {
    TS_PLAN_PARAM = 0,      /* a weight (its gradient has the same layout)   */
    TS_PLAN_ACTIVATION = 1, /* a tensor passed between modules, (B, T, C)    */
    TS_PLAN_DATA = 2,       /* the batch read from the data: tokens, targets */
} ts_plan_kind;

typedef struct ts_layout_plan_entry {
    char name[TS_NAME_MAX]; /* unique within the plan                      */
    ts_layout layout;       /* global shape and placement per axis         */
    int stage;              /* pipeline stage, >= 0; -1: not assigned yet  */
    ts_plan_kind kind;      /* TS_PLAN_PARAM unless set after adding       */
} ts_layout_plan_entry;

typedef struct ts_layout_plan {
    int count;                     /* entries in use                      */
    int cap;                       /* entries allocated                   */
    ts_layout_plan_entry *entries; /* in the order they were added        */
} ts_layout_plan;

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_LAYOUT_TYPES_H */
