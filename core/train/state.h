/*
 * state.h — the explicit training state and the files it is saved in.
 *
 * Everything a run needs to continue bit-identically lives in ts_train_state:
 * the model (parameters), the optimizer (master weights and moments), the
 * position in the learning-rate schedule (= steps completed), the RNG (every
 * draw is a pure function of (seed, stream, counter), so the seed and the
 * step are its whole state) and the data cursor (global windows consumed).
 * A checkpoint writes exactly this, so it is complete by construction.
 *
 * Checkpoints (docs/formats.md): a directory DIR/ckpt-NNNNNNNN per step in
 * which every rank writes the shards it owns, published by a rename after
 * the metadata and a completion marker, so a reader sees a whole checkpoint
 * or none; any topology reads any other's (each rank reads the byte ranges
 * of its blocks). CRC32s make a truncated or corrupt file a clear error,
 * never a silent load. Single files DIR/ckpt-NNNNNNNN.tsck of earlier builds
 * still load.
 *
 * llm.c interop: GPT-2 checkpoints of llm.c (header of 256 int32: magic
 * 20240326, version 3 = f32 or 5 = bf16; maxT, V, L, NH, C, Vp; then the
 * parameters in llm.c's order) can be read, and written as version 3.
 */
#ifndef TESSERA_CORE_STATE_H
#define TESSERA_CORE_STATE_H

#include <stdint.h>

#include "model.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_train_state {
    ts_model *model;     /* borrowed                                        */
    ts_optimizer *optim; /* borrowed                                        */
    int64_t step;        /* optimizer steps completed: the LR position      */
    int64_t data_cursor; /* global data windows consumed                    */
    uint64_t seed;       /* the RNG state together with `step`              */
} ts_train_state;

/* What a checkpoint records besides the arrays. */
typedef struct ts_ckpt_meta {
    int64_t step;
    int64_t data_cursor;
    uint64_t seed;
    int64_t skipped_steps; /* steps not applied (non-finite) so far */
} ts_ckpt_meta;

/* Single-file checkpoints, the format of earlier builds: the UNSHARDED
 * model, master weights and both moments in the global flat layout
 * (m->global_numel elements each, every tensor whole at its global offset).
 * Runs still load them (every rank cuts its blocks out, ts_model_scatter);
 * runs write sharded directories (below). The writer remains for tests and
 * the fuzzing seeds.
 *
 * Writes DIR/ckpt-<step>.tsck atomically (creating DIR if needed); the final
 * path is copied to path_out when it is not NULL. */
ts_status ts_checkpoint_save(const char *dir, const ts_model *m, const ts_ckpt_meta *meta,
                             const float *master, const float *mom1, const float *mom2,
                             char *path_out, size_t path_size);
/* --- sharded checkpoint directories (ckpt_dir.c, docs/formats.md) --------
 *
 * DIR/ckpt-NNNNNNNN/ holds rank-RRRRR.bin (the shards world rank R wrote:
 * raw f32, one after another), `metadata` (text: the step, data cursor,
 * seed, the model's shape, every tensor's global shape, and for every shard
 * its tensor, array, file, byte offset, box and element range) and
 * `COMPLETE`. Ranks write into DIR/ckpt-NNNNNNNN.tmp.dir; after all have
 * written, world rank 0 writes the metadata, then the marker, then renames
 * the directory into place. A directory without its marker is never loaded.
 *
 * A shard is a box of a tensor (offset and extent per dimension, the
 * dimensions past ndim of extent 1), or elements [lo, hi) of the box in
 * row-major order (the range an optimizer cut along the flat buffers
 * holds). Boxes and ranges of one tensor's shards are disjoint and together
 * cover it. */
#define TS_CKPT_ARRAYS 3 /* master weights, first and second moments */

typedef struct ts_ckpt_shard {
    int64_t tensor, array, file, file_offset; /* file: the writer's rank    */
    int64_t offset[3], extent[3];
    int64_t lo, hi;
    int64_t crc; /* CRC-32 of the shard's bytes                          */
} ts_ckpt_shard;

typedef struct ts_ckpt_tensor {
    char name[64];
    int ndim;
    int64_t shape[3];
} ts_ckpt_tensor;

/* Everything the metadata holds. */
typedef struct ts_ckpt_info {
    ts_ckpt_meta meta;
    ts_model_config cfg; /* the shape keys only                         */
    ts_dtype param_dtype;
    int nfiles;
    uint64_t *file_bytes;
    int ntensors;
    ts_ckpt_tensor *tensors;
    int64_t nshards;
    ts_ckpt_shard *shards;
} ts_ckpt_info;

/* "master", "m" or "v". */
const char *ts_ckpt_array_name(int array);
/* DIR/ckpt-<step> and the temporary directory it is written in. */
void ts_ckpt_dir_paths(const char *dir, int64_t step, char *final, char *tmp, size_t size);
/* CKPT/rank-<rank>.bin */
void ts_ckpt_rank_file(const char *ckpt, int rank, char *path, size_t size);
/* Creates the temporary directory empty (removing one a killed save left). */
ts_status ts_ckpt_begin(const char *tmp);
/* Removes a checkpoint directory and its files (missing is fine). */
ts_status ts_ckpt_remove_dir(const char *path);

/* One rank's shard file, written in order; `crc` is the CRC-32 of the bytes
 * written since the caller last set it to 0. */
typedef struct ts_ckpt_file {
    char path[4200];
    int fd;
    uint64_t bytes;
    uint32_t crc;
} ts_ckpt_file;
ts_status ts_ckpt_file_open(ts_ckpt_file *f, const char *path);
ts_status ts_ckpt_file_write(ts_ckpt_file *f, const void *buf, size_t n);
/* fsync and close; TS_OK on a file never opened (fd -1). */
ts_status ts_ckpt_file_close(ts_ckpt_file *f);

/* Writes TMP/metadata and TMP/COMPLETE (each atomically) and renames TMP
 * to FINAL (replacing a checkpoint of the same step). */
ts_status ts_ckpt_commit(const char *tmp, const char *final, const ts_ckpt_info *info);

/* Whether PATH is a checkpoint directory with its marker. */
int ts_ckpt_is_complete(const char *path);
/* Finds the newest checkpoint in DIR: a complete directory ckpt-<step>, or
 * an older build's ckpt-<step>.tsck file. *found = 0 (and TS_OK) when DIR is
 * missing or holds none; temporary and incomplete ones are ignored. */
ts_status ts_checkpoint_latest(const char *dir, char *path, size_t path_size, int *found);

/* Reading: the metadata parsed and checked (its checksum, every shard inside
 * its tensor and its file, every file of the size it says), and any box of
 * any tensor read from the shards that hold it, only their bytes. */
typedef struct ts_ckpt_reader ts_ckpt_reader;
ts_status ts_ckpt_reader_open(const char *path, ts_ckpt_reader **out);
const ts_ckpt_info *ts_ckpt_reader_info(const ts_ckpt_reader *r);
/* The index of tensor `name`, -1 when absent. */
int ts_ckpt_reader_find(const ts_ckpt_reader *r, const char *name);
/* Elements [lo, hi) (row-major) of box (offset, extent) of `array` of
 * `tensor` into dst (hi - lo floats). Fails when the shards do not cover
 * them exactly, on a checksum mismatch of a shard read whole, and on a
 * value that is not finite. */
ts_status ts_ckpt_reader_read(ts_ckpt_reader *r, int tensor, int array, const int64_t offset[3],
                              const int64_t extent[3], int64_t lo, int64_t hi, float *dst);
/* Bytes read from the shard files so far. */
uint64_t ts_ckpt_reader_bytes_read(const ts_ckpt_reader *r);
void ts_ckpt_reader_close(ts_ckpt_reader *r);

/* Loads a single-file checkpoint (older builds) into the unsharded arrays (global_numel each). The
 * file is verified completely (sizes, shape, dtype, tensor table, both checksums) before anything
 * is written to the outputs. */
ts_status ts_checkpoint_load(const char *path, const ts_model *m, ts_ckpt_meta *meta, float *master,
                             float *mom1, float *mom2);

/* Reads the model shape from an llm.c checkpoint's header, or from the
 * header of tessera's raw weights (magic 20260601, a mixture of experts'
 * keys too). */
ts_status ts_llmc_read_config(const char *path, ts_model_config *cfg);
/* Reads the weights of an llm.c checkpoint or of raw weights (whose shape
 * must be the model's) into `full`, the unsharded flat f32 layout. */
ts_status ts_llmc_load(const char *path, const ts_model *m, float *full);
/* Writes `full` (unsharded flat f32) as an llm.c checkpoint, version 3
 * (f32) or 5 (bf16: rounded to nearest even), atomically; a mixture of
 * experts, which llm.c has not, as raw weights (f32 only). */
ts_status ts_llmc_save(const char *path, const ts_model *m, const float *full, int bf16);

/* transformers' GPT-2 weights, dense or with DESIGN.md's mixture-of-experts
 * names, as a safetensors file (safetensors.c). `path` of read_config and
 * load: a file, a directory (a sharded checkpoint's index, model.safetensors
 * or its only *.safetensors) or a sharded checkpoint's index; names with or
 * without the "transformer." prefix; config.json beside it read when there.
 * read_config takes layers, d_model, vocab and context from the tensors,
 * heads, experts, moe_every, expert_hidden and top_k from the metadata
 * (experts, moe_every and expert_hidden from the tensors when it has none;
 * heads from config.json's n_head), refuses what the model does not compute
 * (config.json's other epsilon or GELU, an untied lm_head.weight, a name
 * that is no GPT-2 tensor) and leaves what the files do not say; load reads
 * them into `full` (unsharded flat f32, the model's shape), refusing a
 * block whose MLP differs from the model's and a tensor it does not read;
 * save writes `full` in f32 or (bf16) rounded to bf16, atomically. */
ts_status ts_safetensors_read_config(const char *path, ts_model_config *cfg);
ts_status ts_safetensors_load(const char *path, const ts_model *m, float *full);
ts_status ts_safetensors_save(const char *path, const ts_model *m, const float *full, int bf16);

/* CRC-32 (IEEE 802.3, reflected, as zlib computes it), chainable from 0. */
uint32_t ts_crc32(uint32_t crc, const void *data, size_t n);

/* Writes `n` buffers to `path` atomically: PATH.tmp, fsync, rename, fsync of
 * the directory. */
ts_status ts_write_atomic(const char *path, int n, const void *const *bufs, const size_t *sizes);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_STATE_H */
