/*
 * fuzz_checkpoint.c — libFuzzer target: tessera checkpoints (core/train/checkpoint.c,
 * ts_checkpoint_load; the format is docs/formats.md).
 *
 * One tiny CPU model (fuzz_tiny_model) is built in LLVMFuzzerInitialize with
 * its three unsharded arrays. Each input is loaded twice: as it is, and with
 * both CRC-32 fields recomputed over the input (payload CRC at byte 88 over
 * bytes 256.., then the header CRC at byte 92 over the 256 header bytes with
 * that field 0). The first load tests the checksums themselves; the second
 * lets mutations reach the checks behind them (shape, dtype, sizes, tensor
 * table) instead of stopping at a checksum mismatch.
 *
 * Oracles: the sanitizers; a load that fails leaves the outputs untouched
 * (state.h: the file is verified completely before anything is written).
 */
#include "fuzz_common.h"
#include "state.h"

#define FUZZ_CKPT_HEADER 256
#define FUZZ_CKPT_PAYLOAD_CRC 88
#define FUZZ_CKPT_HEADER_CRC 92

static ts_model *fuzz_model;
static float *fuzz_arrays; /* master, mom1, mom2: global_numel each */
static uint8_t *fuzz_copy;
static size_t fuzz_copy_cap;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (ts_model_create(&fuzz_tiny_model, TS_F32, 1, NULL, NULL, &fuzz_model) != TS_OK) {
        fprintf(stderr, "fuzz_checkpoint: cannot build the model: %s\n", ts_last_error());
        abort();
    }
    fuzz_arrays = calloc(3 * fuzz_model->global_numel, sizeof(float));
    if (!fuzz_arrays) abort();
    return 0;
}

static void fuzz_load(const uint8_t *data, size_t size) {
    const char *path = fuzz_file_write(data, size);
    size_t n = fuzz_model->global_numel;
    const float canary = 1234.5f;
    for (size_t i = 0; i < 3 * n; i++)
        fuzz_arrays[i] = canary;
    ts_ckpt_meta meta;
    memset(&meta, 0, sizeof meta);
    ts_status st = ts_checkpoint_load(path, fuzz_model, &meta, fuzz_arrays, fuzz_arrays + n,
                                      fuzz_arrays + 2 * n);
    if (st == TS_OK) return;
    for (size_t i = 0; i < 3 * n; i++)
        if (fuzz_arrays[i] != canary) {
            fprintf(stderr, "fuzz_checkpoint: a failed load (%s) wrote element %zu\n",
                    ts_last_error(), i);
            abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fuzz_load(data, size);
    if (size < FUZZ_CKPT_HEADER) return 0;
    if (size > fuzz_copy_cap) {
        free(fuzz_copy);
        fuzz_copy = malloc(size);
        if (!fuzz_copy) abort();
        fuzz_copy_cap = size;
    }
    memcpy(fuzz_copy, data, size);
    uint32_t crc = ts_crc32(0, fuzz_copy + FUZZ_CKPT_HEADER, size - FUZZ_CKPT_HEADER);
    memcpy(fuzz_copy + FUZZ_CKPT_PAYLOAD_CRC, &crc, 4);
    memset(fuzz_copy + FUZZ_CKPT_HEADER_CRC, 0, 4);
    crc = ts_crc32(0, fuzz_copy, FUZZ_CKPT_HEADER);
    memcpy(fuzz_copy + FUZZ_CKPT_HEADER_CRC, &crc, 4);
    fuzz_load(fuzz_copy, size);
    return 0;
}
