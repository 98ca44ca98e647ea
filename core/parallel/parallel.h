/*
 * parallel.h — the parallel context of a run: the world communicator, the
 * mesh built from the axes the plugins registered, and one communicator per
 * mesh group token ("tp", "dp", "dp-cp", "etp-ep", ... — every token of
 * TS_MESH_JSON_TOKENS, plus "world"), and "embedding": the first and last
 * pipeline stage of each pipeline, which both hold the tied wte (a single
 * rank elsewhere, and everywhere when pp is 1).
 *
 * Every rank creates the same communicators in the same order (splitting is
 * collective), each named by its token so counters and timeout messages name
 * the axis. A token whose groups are single ranks still gets a communicator
 * (of size 1), so callers never special-case an absent axis.
 *
 * Host and device data. These communicators are MPI's: they carry host
 * memory. When the model lives on GPUs ([train] device = cuda on more than
 * one rank), ts_parallel_open_device adds an NCCL communicator over the same
 * ranks for every token, under the same name; ts_parallel_data_comm returns
 * it, and everything that moves tensors of the model (activations,
 * gradients, the plugins' collectives: ts_host.comm) uses that one, while
 * host scalars (loss sums, token counts, the gradient norm, checkpoint
 * assembly, metrics) stay on ts_parallel_comm. Without device communicators
 * the two are the same. The counters of a token are the sum of both.
 */
#ifndef TESSERA_CORE_PARALLEL_H
#define TESSERA_CORE_PARALLEL_H

#include <stdio.h>

#include "tessera/comm.h"
#include "tessera/mesh.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TS_PARALLEL_MAX_COMMS 48

typedef struct ts_parallel {
    ts_comm *world; /* borrowed: created and finalised by the program */
    ts_mesh *mesh;  /* owned                                           */
    int rank, size;
    int plan; /* 1: a dry run's (dry-run communicators)                 */
    int ncomms;
    char names[TS_PARALLEL_MAX_COMMS][64];
    ts_comm *comms[TS_PARALLEL_MAX_COMMS];
    ts_comm *dcomms[TS_PARALLEL_MAX_COMMS]; /* NCCL, or NULL (see above) */
} ts_parallel;

/* The same for one rank of a dry run (`tessera plan`): `world` is a dry-run
 * communicator (comm_plan.h) of the world's size with this rank's number,
 * and every group's communicator is a dry-run one of the group's size with
 * this rank's place in it, made from the mesh (no exchange), of the same
 * dry run as `world` (ts_comm_plan_dry_run). */
ts_status ts_parallel_create_plan(ts_comm *world, const ts_mesh_sizes *sizes, const char *order,
                                  ts_parallel **out);

/* Builds the mesh (sizes->world must equal the world communicator's size)
 * and splits one communicator per token. Collective over `world`. */
ts_status ts_parallel_create(ts_comm *world, const ts_mesh_sizes *sizes, const char *order,
                             ts_parallel **out);
/* The same over a mesh already built (ts_plugins_mesh), whose tokens it
 * splits; the context owns the mesh from the call on, failure included. */
ts_status ts_parallel_create_mesh(ts_comm *world, ts_mesh *mesh, ts_parallel **out);
ts_status ts_parallel_create_plan_mesh(ts_comm *world, ts_mesh *mesh, ts_parallel **out);
/* Adds the communicator of a group token the mesh did not list (e.g. the
 * product of a plugin's axes that the loss is summed over); a no-op when it
 * exists. Collective: every rank adds the same tokens in the same order. */
ts_status ts_parallel_add_group(ts_parallel *p, const char *token);
void ts_parallel_destroy(ts_parallel *p);

/* The communicator of a token ("dp", "dp-cp", "world", ...), or NULL. */
ts_comm *ts_parallel_comm(const ts_parallel *p, const char *token);
/* Creates the device communicators (NCCL, one per token, collective over
 * the world in the same order on every rank) on the GPU this process
 * already selected. A no-op on one rank, where no tensor leaves the device,
 * and when they exist. Failure (a build without NCCL, NCCL's own): the
 * error, nothing created. */
ts_status ts_parallel_open_device(ts_parallel *p);
/* The communicator that carries the model's tensors for a token: the device
 * one when ts_parallel_open_device made it, else ts_parallel_comm's. */
ts_comm *ts_parallel_data_comm(const ts_parallel *p, const char *token);
/* The plugins' host->comm (plugin.h; a ts_plugins_comm_fn over `source`, a
 * ts_parallel): ts_parallel_data_comm of a token, or with "host:" before
 * the token ts_parallel_comm of it. NULL for an unknown token. */
ts_comm *ts_parallel_plugin_comm(void *source, const char *token);
/* The plugins' coordinate source (ts_plugins_set_coord_source, with the same
 * source): this rank's coordinate on the mesh axis called `name`, -1 for a
 * name that is not a mesh axis. */
int ts_parallel_plugin_coord(void *source, const char *name);
/* This rank's coordinate on the axis called `name`; -1 for no such axis. */
int ts_parallel_coord(const ts_parallel *p, const char *name);

/* The loss normalisation of data-parallel training: the valid target tokens
 * of the whole global batch, summed over `batch_comm`, the ranks that hold
 * disjoint parts of it (NULL or size 1: just `local`). Each rank scales its
 * token losses by 1 / *global before backward, so the SUM of the ranks'
 * gradients is the mean over every valid token of the batch: ranks with 2
 * and 6 valid tokens whose mean gradients are 1 and 3 give (2·1 + 6·3) / 8
 * = 2.5, not the mean of the means, 2. */
ts_status ts_batch_valid_total(ts_comm *batch_comm, int64_t local, int64_t *global);

/* The counters of every communicator at one moment, for per-step deltas. */
typedef struct ts_parallel_snapshot {
    ts_comm_op_counter c[TS_PARALLEL_MAX_COMMS + 1][TS_COMM_NOPS];
} ts_parallel_snapshot;

void ts_parallel_snapshot_take(const ts_parallel *p, ts_parallel_snapshot *s);
/* Writes {"dp":{"all_reduce":{"calls":..,"bytes":..,"seconds":..}},...}: what
 * each communicator did since `since` (all of it when since is NULL), only
 * communicators and ops with calls. TS_ERR_INVALID if cap is too small. */
ts_status ts_parallel_counters_json(const ts_parallel *p, const ts_parallel_snapshot *since,
                                    char *buf, size_t cap);
/* Prints a per-communicator, per-op table (calls, bytes, seconds, algbw,
 * busbw) — the end-of-run communication report. */
void ts_parallel_report(const ts_parallel *p, FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_PARALLEL_H */
