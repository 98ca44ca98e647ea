/*
 * cluster.h — the machine `tessera plan --search` predicts for: a [cluster]
 * section (docs/search.md), in CONFIG or in a file of its own, read into
 * the dry run's rates and links (plan_clock.h).
 */
#ifndef TESSERA_APPS_CLUSTER_H
#define TESSERA_APPS_CLUSTER_H

#include "config.h"
#include "plan_clock.h"

/* The most devices a cluster may have: the most ranks a run may have
 * (`--world` at most 2^20). */
#define CLUSTER_MAX_DEVICES (1 << 20)

typedef struct cluster {
    int gpus_per_node, nodes;
    int devices;                /* nodes x gpus_per_node (<= CLUSTER_MAX_DEVICES)     */
    double cores;               /* CPU cores a node's ranks share (0: a device each)     */
    double memory;              /* bytes a run may use on one device (memory - reserve) */
    double memory_given;        /* memory_gb, in bytes                                  */
    double peak_f32, peak_bf16; /* FLOP/s as given (for MFU)                           */
    ts_plan_rates rates;        /* the peaks times the efficiencies                     */
    ts_plan_link intra, inter;  /* inside a node, across nodes                          */
    char source[512];           /* the file it came from                                */
} cluster;

/* 1 when `cfg` gives any [cluster] key. */
int cluster_given(const ts_config *cfg);

/* Reads the [cluster] section of `cfg` (its keys are in the core's schema,
 * each rate, size and time within a range a real machine lies in, so that
 * every prediction is finite). A key the prediction needs and the file does
 * not give is an error naming the file and the key; nodes x gpus_per_node
 * (in 64 bits) above CLUSTER_MAX_DEVICES, and a memory_reserve_gb that
 * leaves nothing, are errors naming the file, line and key. */
ts_status cluster_from_config(const ts_config *cfg, cluster *out);

/* Loads `path`, an INI file of a [cluster] section only, and reads it. */
ts_status cluster_load(const char *path, cluster *out);

/* The link a group of `size` ranks whose ranks are `ranks` uses: intra when
 * they all lie on one node (rank / gpus_per_node), inter otherwise. */
const ts_plan_link *cluster_link(const cluster *c, const int *ranks, int size);

#endif /* TESSERA_APPS_CLUSTER_H */
