/*
 * cluster.c — the [cluster] section read into rates and links (cluster.h).
 */
#include "cluster.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The collectives a link's keys name, in ts_comm_op order ("send_recv"
 * stands for both directions). */
static const struct {
    const char *key;
    ts_comm_op op, op2;
} cluster_ops[] = {
    {"all_reduce", TS_COMM_ALL_REDUCE, TS_COMM_ALL_REDUCE},
    {"all_gather", TS_COMM_ALL_GATHER, TS_COMM_ALL_GATHER},
    {"reduce_scatter", TS_COMM_REDUCE_SCATTER, TS_COMM_REDUCE_SCATTER},
    {"all_to_all", TS_COMM_ALL_TO_ALL, TS_COMM_ALL_TO_ALL},
    {"broadcast", TS_COMM_BROADCAST, TS_COMM_BROADCAST},
    {"send_recv", TS_COMM_SEND, TS_COMM_RECV},
};

/* The keys without which there is no prediction. */
static const char *cluster_required[] = {
    "gpus_per_node",       "nodes",
    "memory_gb",           "flops_fp32",
    "flops_bf16",          "memory_bandwidth_gbs",
    "intra_bandwidth_gbs", "intra_latency_us",
    "inter_bandwidth_gbs", "inter_latency_us",
};

int cluster_given(const ts_config *cfg) {
    int n = ts_config_num_specs(cfg);
    for (int i = 0; i < n; i++) {
        const ts_key_spec *sp = ts_config_spec(cfg, i);
        if (strcmp(sp->section, "cluster") == 0 && ts_config_has(cfg, "cluster", sp->name))
            return 1;
    }
    return 0;
}

static double cl_float(const ts_config *cfg, const char *key) {
    return ts_config_float(cfg, "cluster", key);
}

/* One link's costs: the link's own keys, then each collective's. */
static void cluster_read_link(const ts_config *cfg, const char *link, ts_plan_link *out) {
    char bw[96], lat[96];
    snprintf(bw, sizeof bw, "%s_bandwidth_gbs", link);
    snprintf(lat, sizeof lat, "%s_latency_us", link);
    double b = cl_float(cfg, bw) * 1e9, l = cl_float(cfg, lat) * 1e-6;
    for (int op = 0; op < TS_COMM_NOPS; op++) {
        out->bandwidth[op] = b;
        out->latency_s[op] = l;
    }
    for (size_t i = 0; i < sizeof cluster_ops / sizeof cluster_ops[0]; i++) {
        snprintf(bw, sizeof bw, "%s_%s_bandwidth_gbs", link, cluster_ops[i].key);
        snprintf(lat, sizeof lat, "%s_%s_latency_us", link, cluster_ops[i].key);
        if (ts_config_has(cfg, "cluster", bw))
            out->bandwidth[cluster_ops[i].op] = out->bandwidth[cluster_ops[i].op2] =
                cl_float(cfg, bw) * 1e9;
        if (ts_config_has(cfg, "cluster", lat))
            out->latency_s[cluster_ops[i].op] = out->latency_s[cluster_ops[i].op2] =
                cl_float(cfg, lat) * 1e-6;
    }
    out->latency_s[TS_COMM_BARRIER] = l;
}

ts_status cluster_from_config(const ts_config *cfg, cluster *out) {
    memset(out, 0, sizeof *out);
    const char *path = ts_config_path(cfg);
    snprintf(out->source, sizeof out->source, "%s", path && *path ? path : "the configuration");
    for (size_t i = 0; i < sizeof cluster_required / sizeof cluster_required[0]; i++) {
        if (ts_config_has(cfg, "cluster", cluster_required[i])) continue;
        const ts_key_spec *sp = NULL;
        for (int k = 0; k < ts_config_num_specs(cfg) && !sp; k++) {
            const ts_key_spec *s = ts_config_spec(cfg, k);
            if (!strcmp(s->section, "cluster") && !strcmp(s->name, cluster_required[i])) sp = s;
        }
        return ts_error(TS_ERR_CONFIG, "%s: [cluster] %s is required by plan --search (%s)",
                        out->source, cluster_required[i], sp ? sp->help : "see docs/search.md");
    }
    /* each in [1, 2^20] (the schema); their product in 64 bits */
    int64_t gpn = ts_config_int(cfg, "cluster", "gpus_per_node");
    int64_t nodes = ts_config_int(cfg, "cluster", "nodes"), devices = gpn * nodes;
    if (devices > CLUSTER_MAX_DEVICES) {
        char at[256];
        ts_config_where(cfg, "cluster", "nodes", at, sizeof at);
        return ts_error(TS_ERR_CONFIG,
                        "%s = %lld x gpus_per_node = %lld is %lld devices, more than the %d "
                        "ranks a run may have",
                        at, (long long)nodes, (long long)gpn, (long long)devices,
                        CLUSTER_MAX_DEVICES);
    }
    out->gpus_per_node = (int)gpn;
    out->nodes = (int)nodes;
    out->devices = (int)devices;
    out->cores = (double)ts_config_int(cfg, "cluster", "cores_per_node");
    out->memory_given = cl_float(cfg, "memory_gb") * 1e9;
    double reserve = cl_float(cfg, "memory_reserve_gb") * 1e9;
    if (reserve >= out->memory_given) {
        char at[256];
        ts_config_where(cfg, "cluster", "memory_reserve_gb", at, sizeof at);
        return ts_error(TS_ERR_CONFIG, "%s = %g leaves nothing of memory_gb = %g", at,
                        reserve / 1e9, out->memory_given / 1e9);
    }
    out->memory = out->memory_given - reserve;
    out->peak_f32 = cl_float(cfg, "flops_fp32");
    out->peak_bf16 = cl_float(cfg, "flops_bf16");
    double eff = cl_float(cfg, "matmul_efficiency");
    double aeff = ts_config_has(cfg, "cluster", "attention_efficiency")
                      ? cl_float(cfg, "attention_efficiency")
                      : eff;
    out->rates = (ts_plan_rates){
        .matmul_f32 = out->peak_f32 * eff,
        .matmul_bf16 = out->peak_bf16 * eff,
        .attention = out->peak_bf16 * aeff,
        .attention_block =
            out->peak_bf16 * (ts_config_has(cfg, "cluster", "attention_block_efficiency")
                                  ? cl_float(cfg, "attention_block_efficiency")
                                  : aeff),
        .memory = cl_float(cfg, "memory_bandwidth_gbs") * 1e9,
        .kernel_s = cl_float(cfg, "kernel_us") * 1e-6,
        .serial_comm = !ts_config_bool(cfg, "cluster", "comm_overlap"),
    };
    cluster_read_link(cfg, "intra", &out->intra);
    cluster_read_link(cfg, "inter", &out->inter);
    return TS_OK;
}

ts_status cluster_load(const char *path, cluster *out) {
    ts_config *cfg = NULL;
    TS_TRY(ts_config_create(&cfg));
    int n = 0, k = 0;
    const ts_key_spec *core = ts_config_core_keys(&n);
    ts_key_spec specs[64];
    for (int i = 0; i < n && k < 64; i++)
        if (strcmp(core[i].section, "cluster") == 0) specs[k++] = core[i];
    ts_status st = ts_config_register(cfg, specs, k);
    if (!st) st = ts_config_load(cfg, path);
    if (!st) st = ts_config_validate(cfg);
    if (!st) st = cluster_from_config(cfg, out);
    ts_config_destroy(cfg);
    return st;
}

const ts_plan_link *cluster_link(const cluster *c, const int *ranks, int size) {
    for (int i = 1; i < size; i++)
        if (ranks[i] / c->gpus_per_node != ranks[0] / c->gpus_per_node) return &c->inter;
    return &c->intra;
}
