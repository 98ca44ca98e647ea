/*
 * fuzz_tokens.c — libFuzzer target: llm.c token files as a data source
 * (core/train/data.c, `[data] source = tokens:PATH`).
 *
 * Each input is a token file (256 int32 header: magic 20240520, version 1,
 * token count; then uint16 tokens). It is opened with ts_dataset_open and,
 * when it opens, windows are read with ts_dataset_window: the first, the
 * last, one past the last (the next epoch), a far one and one of the input's
 * choosing. The reader ignores header ints 3..255, so the target takes its
 * own knobs from them (the seeds set them; mutations vary them):
 *     h[200] vocab = 2 + h % 65535      h[201] & 1: shuffle
 *     h[202] ignore_token = h % 65537 - 1 (-1: none)
 *     h[203] T = 1 + h % 256            h[204..205] a window index (int64)
 * An input shorter than the header uses vocab 65536, T 4.
 *
 * Oracles: the sanitizers; every input id in [0, vocab), every target in
 * [0, vocab) or -1 (masked), and a masked target only where its token is the
 * ignore token.
 */
#include "data.h"
#include "fuzz_common.h"

#define FUZZ_T_MAX 256

static int32_t fuzz_h(const uint8_t *data, size_t size, int i) {
    int32_t v = 0;
    if (size >= 1024) memcpy(&v, data + 4 * i, 4);
    return v;
}

static void fuzz_check_window(const ts_dataset *ds, int64_t w, int T, int vocab, int ignore) {
    int32_t in[FUZZ_T_MAX], tg[FUZZ_T_MAX];
    if (ts_dataset_window(ds, w, T, in, tg) != TS_OK) return;
    for (int t = 0; t < T; t++) {
        int bad_in = in[t] < 0 || in[t] >= vocab;
        int bad_tg = tg[t] < -1 || tg[t] >= vocab || (tg[t] == -1 && ignore < 0) ||
                     (ignore >= 0 && tg[t] == ignore);
        if (bad_in || bad_tg) {
            fprintf(stderr,
                    "fuzz_tokens: window %lld position %d: input %d target %d (vocab %d, "
                    "ignore %d)\n",
                    (long long)w, t, in[t], tg[t], vocab, ignore);
            abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file_write(data, size);
    char source[600];
    snprintf(source, sizeof source, "tokens:%s", path);
    int full = size >= 1024;
    ts_data_opts o = {
        .source = source,
        .vocab = full ? 2 + (int)((uint32_t)fuzz_h(data, size, 200) % 65535u) : 65536,
        .seed = 1234,
        .shuffle = fuzz_h(data, size, 201) & 1,
        .ignore_token = full ? (int)((uint32_t)fuzz_h(data, size, 202) % 65537u) - 1 : -1,
    };
    int T = full ? 1 + (int)((uint32_t)fuzz_h(data, size, 203) % FUZZ_T_MAX) : 4;
    ts_dataset *ds = NULL;
    if (ts_dataset_open(&ds, &o) != TS_OK) return 0;
    (void)strlen(ts_dataset_describe(ds));
    int64_t nwin = ts_dataset_num_windows(ds, T);
    int64_t pick = 0;
    if (full) memcpy(&pick, data + 4 * 204, sizeof pick);
    int64_t ws[6] = {0, nwin - 1, nwin, 7 * nwin + 3, pick, INT64_MAX};
    for (int i = 0; i < 6; i++)
        fuzz_check_window(ds, ws[i], T, o.vocab, o.ignore_token);
    ts_dataset_close(ds);
    return 0;
}
