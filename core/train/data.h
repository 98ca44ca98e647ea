/*
 * data.h — token sources and the windows training reads from them.
 *
 * A dataset is a sequence of token ids held in memory (or mapped):
 *   synthetic       — a fixed random first-order Markov source, generated from
 *                     the seed; its entropy rate (nats/token) is computed
 *                     exactly from the chain's stationary distribution, so the
 *                     best achievable loss is known;
 *   text:PATH       — the bytes of a file, one token per byte (vocab >= 256);
 *   tokens:PATH     — an llm.c token file (256 int32 header: magic 20240520,
 *                     version 1, token count; then uint16 tokens).
 *
 * Training reads windows: window w is tokens [s, s+T] with s = slot(w) * T,
 * inputs the first T and targets the last T (shifted by one), exactly the
 * B*T+1 contiguous reads of llm.c when consecutive windows form a batch. A
 * window index is global and unbounded: epoch e = w / num_windows; the slot is
 * w % num_windows, or with shuffling a permutation of it drawn from
 * (seed, epoch) by a counter-based generator. Because a window is a pure
 * function of its index, any rank can read any part of a global batch, and
 * the data cursor of a checkpoint is a single integer. A target equal to
 * `ignore_token` is returned as -1: masked, it has no loss and no gradient.
 *
 * Held-out data: with `split` = F the tokens [0, c) are the training part
 * and [c, n) the held-out part, c = floor((1 - F) n); each is opened as a
 * dataset of its own, so their windows never share a token.
 */
#ifndef TESSERA_CORE_DATA_H
#define TESSERA_CORE_DATA_H

#include <stdint.h>

#include "tessera/tessera.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_data_opts {
    const char *source;       /* "synthetic", "text:PATH" or "tokens:PATH"  */
    int vocab;                /* the model's (unpadded) vocabulary          */
    uint64_t seed;            /* for the synthetic source and shuffling     */
    int shuffle;              /* permute window order per epoch             */
    int64_t synthetic_tokens; /* length of the synthetic corpus            */
    int synthetic_branching;  /* successors per state in the Markov chain   */
    int ignore_token;         /* targets equal to it are masked (-1); -1 =
                                 none (e.g. an end-of-document token, as
                                 Megatron-LM's eod_mask_loss)              */
    double split;             /* 0 < split < 1: the last `split` of the
                                 tokens are held out; 0 = none              */
    int held_out;             /* open the held-out part (else the rest)    */
} ts_data_opts;

typedef struct ts_dataset ts_dataset;

/* Opens or generates the tokens. Errors name the file: missing, unreadable,
 * wrong magic or version, a token count that disagrees with the file size,
 * a token id >= vocab (with its position), fewer than 2 tokens. */
ts_status ts_dataset_open(ts_dataset **out, const ts_data_opts *opts);
void ts_dataset_close(ts_dataset *ds);

int64_t ts_dataset_num_tokens(const ts_dataset *ds);
/* The number of whole windows of length T: (num_tokens - 1) / T. */
int64_t ts_dataset_num_windows(const ts_dataset *ds, int T);
/* Entropy rate of the source in nats per token; NaN if unknown (files). */
double ts_dataset_entropy_rate(const ts_dataset *ds);
/* A one-line description for the log ("synthetic Markov, 1048576 tokens..."). */
const char *ts_dataset_describe(const ts_dataset *ds);

/* Fills inputs (T) and targets (T) of global window `w`. Fails if the data
 * holds no whole window of length T. */
ts_status ts_dataset_window(const ts_dataset *ds, int64_t w, int T, int32_t *inputs,
                            int32_t *targets);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_DATA_H */
