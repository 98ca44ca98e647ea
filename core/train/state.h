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
 * Checkpoint files (docs/formats.md): DIR/ckpt-NNNNNNNN.tsck, written to a
 * temporary name, fsync'd, renamed into place and the directory fsync'd, so a
 * reader sees a whole file or none. A header CRC32 and a payload CRC32 make a
 * truncated or corrupt file a clear error, never a silent load.
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

/* Checkpoints hold the UNSHARDED model: master weights and both moments in
 * the global flat layout (m->global_numel elements each, every tensor whole
 * at its global offset), so a run can resume on any topology; a sharded run
 * gathers before saving and cuts its blocks out after loading
 * (ts_model_gather / ts_model_scatter). The model supplies the shape and the
 * tensor table (names, global shapes and offsets).
 *
 * Writes DIR/ckpt-<step>.tsck atomically (creating DIR if needed); the final
 * path is copied to path_out when it is not NULL. */
ts_status ts_checkpoint_save(const char *dir, const ts_model *m, const ts_ckpt_meta *meta,
                             const float *master, const float *mom1, const float *mom2,
                             char *path_out, size_t path_size);
/* Finds the checkpoint with the highest step in DIR. *found = 0 (and TS_OK)
 * when DIR is missing or holds none; temporary files are ignored. */
ts_status ts_checkpoint_latest(const char *dir, char *path, size_t path_size, int *found);
/* Loads a checkpoint into the unsharded arrays (global_numel each). The file
 * is verified completely (sizes, shape, dtype, tensor table, both
 * checksums) before anything is written to the outputs. */
ts_status ts_checkpoint_load(const char *path, const ts_model *m, ts_ckpt_meta *meta, float *master,
                             float *mom1, float *mom2);

/* Reads the model shape from an llm.c checkpoint's header. */
ts_status ts_llmc_read_config(const char *path, ts_model_config *cfg);
/* Reads the weights of an llm.c checkpoint (whose shape must be the
 * model's) into `full`, the unsharded flat f32 layout. */
ts_status ts_llmc_load(const char *path, const ts_model *m, float *full);
/* Writes `full` (unsharded flat f32) as an llm.c version-3 checkpoint,
 * atomically. */
ts_status ts_llmc_save(const char *path, const ts_model *m, const float *full);

/* transformers' GPT-2 weights as a safetensors file (safetensors.c):
 * read_config takes layers, d_model, vocab and context from it (heads are
 * not in the weights); load reads it into `full` (unsharded flat f32, the
 * model's shape); save writes `full` in f32, atomically. */
ts_status ts_safetensors_read_config(const char *path, ts_model_config *cfg);
ts_status ts_safetensors_load(const char *path, const ts_model *m, float *full);
ts_status ts_safetensors_save(const char *path, const ts_model *m, const float *full);

/* CRC-32 (IEEE 802.3, reflected, as zlib computes it), chainable from 0. */
uint32_t ts_crc32(uint32_t crc, const void *data, size_t n);

/* Writes `n` buffers to `path` atomically: PATH.tmp, fsync, rename, fsync of
 * the directory. */
ts_status ts_write_atomic(const char *path, int n, const void *const *bufs, const size_t *sizes);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_STATE_H */
