/*
 * parallel.c — the parallel context (parallel.h): mesh plus one
 * communicator per group token, and the communication report.
 */
#include "parallel.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm_plan.h"      /* ts_comm_plan_create */
#include "tessera/device.h" /* ts_comm_nccl_create */

static int parallel_find(const ts_parallel *p, const char *token);

/* The embedding group's split over `world`: the first and last pipeline
 * stage of each pipeline (they both hold the tied wte); a singleton for
 * the others and for a mesh without a pipeline. */
static ts_status parallel_embedding(ts_parallel *p, int *color, int *key, int *first, int *size) {
    const char *pipe = ts_mesh_pipeline_axis(p->mesh);
    int pp = pipe ? ts_mesh_size(p->mesh, pipe) : 1;
    int stage = pipe ? ts_mesh_coord_of(p->mesh, p->rank, pipe) : 0;
    int end = pp > 1 && (stage == 0 || stage == pp - 1);
    ts_mesh_group g = {0, 0, 1, p->size};
    if (pipe) TS_TRY(ts_mesh_group_of(p->mesh, pipe, p->rank, &g, NULL, 0));
    *color = end ? g.index : g.count + p->rank;
    *key = stage;
    *first = stage == 0;
    *size = end ? 2 : 1;
    return TS_OK;
}

static ts_status parallel_add(ts_parallel *p, const char *name, ts_comm *c) {
    if (p->ncomms == TS_PARALLEL_MAX_COMMS) {
        ts_comm_free(c);
        return ts_error(TS_ERR_INTERNAL, "parallel: more than %d communicators",
                        TS_PARALLEL_MAX_COMMS);
    }
    snprintf(p->names[p->ncomms], sizeof p->names[0], "%s", name);
    p->comms[p->ncomms++] = c;
    return TS_OK;
}

/* One communicator of group `token` for this rank: split over the world,
 * or, in a dry run, a dry-run one of the group's size and place. */
static ts_status parallel_open(ts_parallel *p, const char *token) {
    if (strlen(token) >= sizeof p->names[0])
        return ts_error(TS_ERR_INVALID, "parallel: group \"%s\" has too long a name", token);
    ts_mesh_group g;
    TS_TRY(ts_mesh_group_of(p->mesh, token, p->rank, &g, NULL, 0));
    ts_comm *c = NULL;
    if (p->plan)
        TS_TRY(ts_comm_plan_create(ts_comm_plan_dry_run(p->world), token, g.position, g.size, &c));
    else
        TS_TRY(ts_comm_split(p->world, g.index, g.position, token, &c));
    return parallel_add(p, token, c);
}

static ts_status parallel_build(ts_comm *world, ts_mesh *mesh, int plan, ts_parallel **out) {
    *out = NULL;
    ts_parallel *p = calloc(1, sizeof *p);
    if (!p) {
        ts_mesh_destroy(mesh);
        return ts_error(TS_ERR_NOMEM, "parallel: out of memory");
    }
    p->world = world;
    p->mesh = mesh;
    p->plan = plan;
    p->rank = ts_comm_rank(world);
    p->size = ts_comm_size(world);
    ts_status st = TS_OK;
    if (ts_mesh_world(mesh) != p->size)
        st = ts_error(TS_ERR_CONFIG, "the mesh is for %d ranks but the %s has %d",
                      ts_mesh_world(mesh), plan ? "dry run" : "job", p->size);
    for (int i = 0; i < ts_mesh_num_tokens(mesh) && !st; i++)
        st = parallel_open(p, ts_mesh_token_at(mesh, i));
    if (!st) {
        int color, key, first, size;
        ts_comm *c = NULL;
        st = parallel_embedding(p, &color, &key, &first, &size);
        if (!st && plan)
            st = ts_comm_plan_create(ts_comm_plan_dry_run(world), "embedding", size == 2 && !first,
                                     size, &c);
        if (!st && !plan) st = ts_comm_split(world, color, key, "embedding", &c);
        if (!st) st = parallel_add(p, "embedding", c);
    }
    if (st) {
        ts_parallel_destroy(p);
        return st;
    }
    *out = p;
    return TS_OK;
}

ts_status ts_parallel_create_mesh(ts_comm *world, ts_mesh *mesh, ts_parallel **out) {
    return parallel_build(world, mesh, 0, out);
}

ts_status ts_parallel_create_plan_mesh(ts_comm *world, ts_mesh *mesh, ts_parallel **out) {
    return parallel_build(world, mesh, 1, out);
}

ts_status ts_parallel_create(ts_comm *world, const ts_mesh_sizes *sizes, const char *order,
                             ts_parallel **out) {
    ts_mesh *mesh = NULL;
    *out = NULL;
    TS_TRY(ts_mesh_create(sizes, order, &mesh));
    return parallel_build(world, mesh, 0, out);
}

ts_status ts_parallel_create_plan(ts_comm *world, const ts_mesh_sizes *sizes, const char *order,
                                  ts_parallel **out) {
    ts_mesh *mesh = NULL;
    *out = NULL;
    TS_TRY(ts_mesh_create(sizes, order, &mesh));
    return parallel_build(world, mesh, 1, out);
}

ts_status ts_parallel_add_group(ts_parallel *p, const char *token) {
    if (parallel_find(p, token) >= 0) return TS_OK;
    TS_TRY(parallel_open(p, token));
    if (p->ncomms > 1 && p->dcomms[0]) { /* device communicators exist: add its twin */
        int i = p->ncomms - 1;
        TS_TRY(ts_comm_nccl_create(p->comms[i], p->names[i], &p->dcomms[i]));
    }
    return TS_OK;
}

ts_status ts_batch_valid_total(ts_comm *batch_comm, int64_t local, int64_t *global) {
    *global = local;
    if (!batch_comm || ts_comm_size(batch_comm) == 1) return TS_OK;
    if (local < 0 || local > INT32_MAX)
        return ts_error(TS_ERR_INVALID, "valid-token count %lld out of range", (long long)local);
    int32_t mine = (int32_t)local, sum = 0;
    TS_TRY(ts_comm_all_reduce(batch_comm, &mine, &sum, 1, TS_I32, TS_REDUCE_SUM));
    *global = sum;
    return TS_OK;
}

ts_status ts_parallel_open_device(ts_parallel *p) {
    if (p->size == 1 || (p->ncomms > 0 && p->dcomms[0])) return TS_OK;
    ts_status st = TS_OK;
    for (int i = 0; i < p->ncomms && !st; i++)
        st = ts_comm_nccl_create(p->comms[i], p->names[i], &p->dcomms[i]);
    if (st)
        for (int i = 0; i < p->ncomms; i++) {
            ts_comm_free(p->dcomms[i]);
            p->dcomms[i] = NULL;
        }
    return st;
}

void ts_parallel_destroy(ts_parallel *p) {
    if (!p) return;
    for (int i = 0; i < p->ncomms; i++)
        ts_comm_free(p->dcomms[i]);
    for (int i = 0; i < p->ncomms; i++)
        ts_comm_free(p->comms[i]);
    ts_mesh_destroy(p->mesh);
    free(p);
}

/* 1 when the group tokens a and b name the same axes, in any order
 * ("cp-dp" and "dp-cp": a group is a set of axes). */
static int token_same_axes(const char *a, const char *b) {
    if (strcmp(a, b) == 0) return 1;
    if (strlen(a) != strlen(b)) return 0;
    for (const char *p = a; *p;) { /* every axis of a is one of b */
        size_t n = strcspn(p, "-");
        int found = 0;
        for (const char *q = b; *q && !found;) {
            size_t m = strcspn(q, "-");
            found = m == n && strncmp(p, q, n) == 0;
            q += m + (q[m] == '-');
        }
        if (!found) return 0;
        p += n + (p[n] == '-');
    }
    return 1;
}

/* The index of the group `token` names (its axes in any order), or -1. */
static int parallel_find(const ts_parallel *p, const char *token) {
    for (int i = 0; i < p->ncomms; i++)
        if (strcmp(p->names[i], token) == 0) return i;
    for (int i = 0; i < p->ncomms; i++)
        if (token_same_axes(p->names[i], token)) return i;
    return -1;
}

ts_comm *ts_parallel_comm(const ts_parallel *p, const char *token) {
    if (strcmp(token, "world") == 0) return p->world;
    int i = parallel_find(p, token);
    return i < 0 ? NULL : p->comms[i];
}

ts_comm *ts_parallel_data_comm(const ts_parallel *p, const char *token) {
    int i = parallel_find(p, token);
    if (i >= 0 && p->dcomms[i]) return p->dcomms[i];
    return ts_parallel_comm(p, token);
}

ts_comm *ts_parallel_plugin_comm(void *source, const char *token) {
    if (strncmp(token, "host:", 5) == 0) return ts_parallel_comm(source, token + 5);
    return ts_parallel_data_comm(source, token);
}

int ts_parallel_plugin_coord(void *source, const char *name) {
    return ts_parallel_coord(source, name);
}

int ts_parallel_coord(const ts_parallel *p, const char *name) {
    return ts_mesh_coord_of(p->mesh, p->rank, name);
}

/* Every communicator that did something: the world first, then the tokens. */
static ts_comm *parallel_nth(const ts_parallel *p, int i, const char **name) {
    if (i == 0) {
        *name = "world";
        return p->world;
    }
    *name = p->names[i - 1];
    return p->comms[i - 1];
}

/* The counter of the i-th communicator (parallel_nth) and its device twin. */
static ts_comm_op_counter parallel_counter(const ts_parallel *p, int i, ts_comm_op op) {
    const char *name;
    ts_comm_op_counter k = ts_comm_counter(parallel_nth(p, i, &name), op);
    if (i > 0 && p->dcomms[i - 1]) {
        ts_comm_op_counter d = ts_comm_counter(p->dcomms[i - 1], op);
        k.calls += d.calls;
        k.bytes += d.bytes;
        k.seconds += d.seconds;
    }
    return k;
}

static int parallel_active(const ts_parallel *p, int i) {
    for (int op = 0; op < TS_COMM_NOPS; op++)
        if (parallel_counter(p, i, (ts_comm_op)op).calls > 0) return 1;
    return 0;
}

void ts_parallel_snapshot_take(const ts_parallel *p, ts_parallel_snapshot *s) {
    for (int i = 0; i <= p->ncomms; i++)
        for (int op = 0; op < TS_COMM_NOPS; op++)
            s->c[i][op] = parallel_counter(p, i, (ts_comm_op)op);
}

ts_status ts_parallel_counters_json(const ts_parallel *p, const ts_parallel_snapshot *since,
                                    char *buf, size_t cap) {
    size_t used = 0;
    int first = 1;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int n_ = snprintf(buf + used, cap - used, __VA_ARGS__);                                    \
        if (n_ < 0 || (size_t)n_ >= cap - used)                                                    \
            return ts_error(TS_ERR_INVALID, "parallel: counters buffer too small");                \
        used += (size_t)n_;                                                                        \
    } while (0)
    PUT("{");
    for (int i = 0; i <= p->ncomms; i++) {
        const char *name;
        (void)parallel_nth(p, i, &name);
        int opened = 0;
        for (int op = 0; op < TS_COMM_NOPS; op++) {
            ts_comm_op_counter k = parallel_counter(p, i, (ts_comm_op)op);
            if (since) {
                k.calls -= since->c[i][op].calls;
                k.bytes -= since->c[i][op].bytes;
                k.seconds -= since->c[i][op].seconds;
            }
            if (k.calls == 0) continue;
            if (!opened) PUT("%s\"%s\":{", first ? "" : ",", name);
            PUT("%s\"%s\":{\"calls\":%llu,\"bytes\":%llu,\"seconds\":%.9g}", opened ? "," : "",
                ts_comm_op_name((ts_comm_op)op), (unsigned long long)k.calls,
                (unsigned long long)k.bytes, k.seconds);
            opened = 1;
            first = 0;
        }
        if (opened) PUT("}");
    }
    PUT("}");
#undef PUT
    return TS_OK;
}

void ts_parallel_report(const ts_parallel *p, FILE *f) {
    int any = 0;
    for (int i = 0; i <= p->ncomms; i++)
        any |= parallel_active(p, i);
    if (!any) return;
    fprintf(f, "communication on rank %d (algbw and busbw as nccl-tests define them):\n", p->rank);
    fprintf(f, "  %-10s %-15s %8s %14s %10s %12s %12s\n", "group", "op", "calls", "bytes",
            "seconds", "algbw GB/s", "busbw GB/s");
    for (int i = 0; i <= p->ncomms; i++) {
        const char *name;
        ts_comm *c = parallel_nth(p, i, &name);
        for (int op = 0; op < TS_COMM_NOPS; op++) {
            ts_comm_op_counter k = parallel_counter(p, i, (ts_comm_op)op);
            if (k.calls == 0) continue;
            double alg = 0, bus = 0;
            ts_comm_bandwidth((ts_comm_op)op, ts_comm_size(c), k.bytes, k.seconds, &alg, &bus);
            fprintf(f, "  %-10s %-15s %8llu %14llu %10.4f %12.3f %12.3f\n", name,
                    ts_comm_op_name((ts_comm_op)op), (unsigned long long)k.calls,
                    (unsigned long long)k.bytes, k.seconds, alg * 1e-9, bus * 1e-9);
        }
    }
}
