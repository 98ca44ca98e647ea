/*
 * test_data.c — token sources and windows: the synthetic Markov source is a
 * pure function of the seed and its entropy rate matches the empirical
 * conditional entropy of its corpus; windows are stream slices with targets
 * shifted by one; shuffling is a permutation per epoch; llm.c token files
 * round-trip and every malformed one fails naming the file; text reads bytes.
 * Run with the case name as argv[1] (see tests/config.cmake).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data.h"

#include "test_cases.h"

static ts_data_opts synthetic_opts(int vocab, int branching, int64_t n, uint64_t seed) {
    ts_data_opts o = {"synthetic", vocab, seed, 0, n, branching, -1, 0.0, 0};
    return o;
}

/* The whole stream of a dataset, read as its one window of length n - 1. */
static int32_t *read_stream(const ts_dataset *ds) {
    int64_t n = ts_dataset_num_tokens(ds);
    int T = (int)(n - 1);
    int32_t *in = malloc((size_t)n * sizeof *in);
    int32_t *tg = malloc((size_t)T * sizeof *tg);
    CHECK(ts_dataset_num_windows(ds, T) == 1);
    CHECK_OK(ts_dataset_window(ds, 0, T, in, tg));
    for (int t = 0; t + 1 < T; t++)
        CHECK(tg[t] == in[t + 1]);
    in[T] = tg[T - 1];
    free(tg);
    return in;
}

static void test_synthetic_is_deterministic_per_seed(void) {
    ts_data_opts o = synthetic_opts(256, 4, 20000, 1337);
    ts_dataset *a, *b, *c;
    CHECK_OK(ts_dataset_open(&a, &o));
    CHECK_OK(ts_dataset_open(&b, &o));
    o.seed = 1338;
    CHECK_OK(ts_dataset_open(&c, &o));
    CHECK(ts_dataset_num_tokens(a) == 20000);
    int32_t *sa = read_stream(a), *sb = read_stream(b), *sc = read_stream(c);
    int same_ab = 1, same_ac = 0, in_range = 1;
    for (int i = 0; i < 20000; i++) {
        same_ab &= sa[i] == sb[i];
        same_ac += sa[i] == sc[i];
        in_range &= sa[i] >= 0 && sa[i] < 256;
    }
    CHECK(same_ab);
    CHECK(same_ac < 20000 / 10); /* another seed: another chain and stream */
    CHECK(in_range);
    CHECK(ts_dataset_entropy_rate(a) == ts_dataset_entropy_rate(b));
    CHECK(ts_dataset_entropy_rate(a) != ts_dataset_entropy_rate(c));
    printf("%s\n", ts_dataset_describe(a));
    CHECK(strstr(ts_dataset_describe(a), "synthetic") != NULL);
    free(sa);
    free(sb);
    free(sc);
    ts_dataset_close(a);
    ts_dataset_close(b);
    ts_dataset_close(c);

    /* bad options fail clearly */
    ts_dataset *d = NULL;
    o = synthetic_opts(70000, 4, 20000, 1);
    CHECK(ts_dataset_open(&d, &o) != TS_OK);
    CHECK(strstr(ts_last_error(), "vocab=70000") != NULL);
    o = synthetic_opts(256, 4, 20000, 1);
    o.source = "wikipedia";
    CHECK(ts_dataset_open(&d, &o) != TS_OK);
    CHECK(strstr(ts_last_error(), "unknown source 'wikipedia'") != NULL);
}

/* The plug-in estimate of H(X_{t+1} | X_t) over the stream, in nats. */
static double empirical_conditional_entropy(const int32_t *s, int64_t n, int V) {
    uint32_t *pair = calloc((size_t)V * V, sizeof *pair);
    uint32_t *single = calloc((size_t)V, sizeof *single);
    for (int64_t i = 0; i + 1 < n; i++) {
        pair[(size_t)s[i] * V + s[i + 1]]++;
        single[s[i]]++;
    }
    double h = 0;
    for (size_t a = 0; a < (size_t)V; a++)
        for (size_t b = 0; b < (size_t)V; b++) {
            uint32_t c = pair[a * V + b];
            if (c) h -= (double)c * log((double)c / single[a]);
        }
    free(pair);
    free(single);
    return h / (double)(n - 1);
}

static void test_synthetic_entropy_rate_matches_corpus(void) {
    const struct {
        int V, K;
        int64_t n;
    } cases[] = {{256, 4, 2000000}, {1024, 8, 4000000}, {50, 3, 1000000}, {2, 64, 200000}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ts_data_opts o = synthetic_opts(cases[i].V, cases[i].K, cases[i].n, 7 + i);
        ts_dataset *ds;
        CHECK_OK(ts_dataset_open(&ds, &o));
        double h = ts_dataset_entropy_rate(ds);
        int keff = cases[i].K < cases[i].V ? cases[i].K : cases[i].V;
        int32_t *s = read_stream(ds);
        double emp = empirical_conditional_entropy(s, cases[i].n, cases[i].V);
        printf("V=%d K=%d: entropy rate %.5f, empirical %.5f, ln K = %.5f\n", cases[i].V,
               cases[i].K, h, emp, log(keff));
        CHECK(h > 0 && h <= log(keff) + 1e-12);
        CHECK(fabs(emp - h) / h < 0.03);
        /* skewed enough to be learnable: well below the uniform successor choice */
        if (keff >= 4) CHECK(h < 0.9 * log(keff));
        free(s);
        ts_dataset_close(ds);
    }
    /* one successor per state: a deterministic cycle, entropy 0 */
    ts_data_opts o = synthetic_opts(100, 1, 5000, 3);
    ts_dataset *ds;
    CHECK_OK(ts_dataset_open(&ds, &o));
    CHECK(ts_dataset_entropy_rate(ds) == 0);
    int32_t *s = read_stream(ds);
    for (int i = 100; i < 5000; i++)
        CHECK(s[i] == s[i - 100]); /* period = vocab */
    free(s);
    ts_dataset_close(ds);
    /* the largest vocabulary works and stays in range */
    o = synthetic_opts(65536, 4, 1 << 20, 11);
    CHECK_OK(ts_dataset_open(&ds, &o));
    double h = ts_dataset_entropy_rate(ds);
    printf("V=65536 K=4: entropy rate %.5f\n", h);
    CHECK(h > 0 && h <= log(4.0));
    ts_dataset_close(ds);
}

/* [data] ignore_token: targets equal to it come back as -1 (masked); inputs
 * keep the token. */
static void test_ignore_token_masks_targets(void) {
    ts_data_opts o = synthetic_opts(16, 4, 5000, 9);
    ts_dataset *plain, *masked;
    CHECK_OK(ts_dataset_open(&plain, &o));
    o.ignore_token = 3;
    CHECK_OK(ts_dataset_open(&masked, &o));
    int32_t in0[32], tg0[32], in1[32], tg1[32];
    int seen = 0;
    for (int64_t w = 0; w < 50; w++) {
        CHECK_OK(ts_dataset_window(plain, w, 32, in0, tg0));
        CHECK_OK(ts_dataset_window(masked, w, 32, in1, tg1));
        for (int t = 0; t < 32; t++) {
            CHECK(in0[t] == in1[t]);
            CHECK(tg1[t] == (tg0[t] == 3 ? -1 : tg0[t]));
            seen += tg0[t] == 3;
        }
    }
    CHECK(seen > 0);
    ts_dataset_close(plain);
    ts_dataset_close(masked);
}

static void test_windows_are_stream_slices(void) {
    ts_data_opts o = synthetic_opts(256, 4, 10000, 5);
    ts_dataset *ds;
    CHECK_OK(ts_dataset_open(&ds, &o));
    int32_t *s = read_stream(ds);
    const int T = 64;
    int64_t nwin = ts_dataset_num_windows(ds, T);
    CHECK(nwin == (10000 - 1) / 64);
    int32_t in[64], tg[64];
    for (int64_t w = 0; w < 3 * nwin; w++) {
        CHECK_OK(ts_dataset_window(ds, w, T, in, tg));
        int64_t start = (w % nwin) * T;
        for (int t = 0; t < T; t++) {
            CHECK(in[t] == s[start + t]);
            CHECK(tg[t] == s[start + t + 1]);
        }
    }
    /* too long a window: a clear error naming the source and T */
    int32_t *big_in = malloc(10000 * sizeof *big_in), *big_tg = malloc(10000 * sizeof *big_tg);
    CHECK(ts_dataset_num_windows(ds, 10000) == 0);
    CHECK(ts_dataset_window(ds, 0, 10000, big_in, big_tg) != TS_OK);
    CHECK(strstr(ts_last_error(), "synthetic") != NULL);
    CHECK(strstr(ts_last_error(), "T=10000") != NULL);
    CHECK_OK(ts_dataset_window(ds, 0, 9999, big_in, big_tg)); /* exactly T+1 tokens */
    CHECK(ts_dataset_window(ds, -1, T, in, tg) != TS_OK);
    CHECK(ts_dataset_window(ds, 0, 0, in, tg) != TS_OK);
    free(big_in);
    free(big_tg);
    free(s);
    ts_dataset_close(ds);
}

/* Writes an llm.c token file: header[0..2] = magic, version, count (as given),
 * then `ntok` tokens. Returns the path in a static buffer. */
static const char *write_tokens(const char *name, int32_t magic, int32_t version, int32_t count,
                                const uint16_t *tok, size_t ntok) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    int32_t header[256] = {0};
    header[0] = magic;
    header[1] = version;
    header[2] = count;
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fwrite(header, sizeof header, 1, f);
    if (ntok) fwrite(tok, sizeof *tok, ntok, f);
    fclose(f);
    return path;
}

static ts_data_opts file_opts(const char *kind, const char *path, int vocab, char *buf,
                              size_t size) {
    snprintf(buf, size, "%s:%s", kind, path);
    ts_data_opts o = {buf, vocab, 1337, 0, 0, 0, -1, 0.0, 0};
    return o;
}

static void test_shuffle_is_a_permutation_per_epoch(void) {
    enum { N = 8001 };
    static uint16_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint16_t)i;
    const char *path = write_tokens("ramp.bin", 20240520, 1, N, tok, N);
    char src[700];
    ts_data_opts o = file_opts("tokens", path, 65536, src, sizeof src);
    o.shuffle = 1;
    ts_dataset *ds, *again, *other;
    CHECK_OK(ts_dataset_open(&ds, &o));
    CHECK_OK(ts_dataset_open(&again, &o));
    o.seed = 99;
    CHECK_OK(ts_dataset_open(&other, &o));
    const int Ts[] = {1, 2, 3, 5, 7, 8, 13, 64, 100, 1000, 4000, 8000};
    static int32_t in[8000], tg[8000];
    static unsigned char seen[8000];
    for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
        int T = Ts[k];
        int64_t nwin = ts_dataset_num_windows(ds, T);
        CHECK(nwin == 8000 / T);
        int64_t moved = 0, differs_epoch = 0, differs_seed = 0;
        int64_t first[2] = {-1, -1};
        for (int epoch = 0; epoch < 2; epoch++) {
            memset(seen, 0, sizeof seen);
            for (int64_t j = 0; j < nwin; j++) {
                int64_t w = epoch * nwin + j;
                CHECK_OK(ts_dataset_window(ds, w, T, in, tg));
                CHECK(in[0] % T == 0);
                int64_t slot = in[0] / T;
                CHECK(slot >= 0 && slot < nwin);
                if (slot < 0 || slot >= nwin) continue;
                CHECK(!seen[slot]);
                seen[slot] = 1;
                for (int t = 0; t < T; t++) {
                    CHECK(in[t] == slot * T + t);
                    CHECK(tg[t] == slot * T + t + 1);
                }
                moved += slot != j;
                if (j == 0) first[epoch] = slot;
                /* the next epoch's order differs */
                int32_t in2[1], tg2[1];
                if (T == 1) {
                    CHECK_OK(ts_dataset_window(ds, w + nwin, T, in2, tg2));
                    differs_epoch += in2[0] != in[0];
                }
                /* the same seed gives the same order, another seed another */
                static int32_t ia[8000], ta[8000];
                CHECK_OK(ts_dataset_window(again, w, T, ia, ta));
                CHECK(ia[0] == in[0]);
                CHECK_OK(ts_dataset_window(other, w, T, ia, ta));
                differs_seed += ia[0] != in[0];
            }
            for (int64_t j = 0; j < nwin; j++)
                CHECK(seen[j]); /* every slot once */
        }
        printf("T=%d nwin=%lld: %lld of %lld moved, epoch-0/1 first slots %lld/%lld\n", T,
               (long long)nwin, (long long)moved, (long long)(2 * nwin), (long long)first[0],
               (long long)first[1]);
        if (nwin >= 8) {
            CHECK(moved > nwin); /* not the identity */
            CHECK(differs_seed > nwin / 2);
        }
        if (T == 1) CHECK(differs_epoch > nwin);
    }
    ts_dataset_close(ds);
    ts_dataset_close(again);
    ts_dataset_close(other);
}

static void expect_open_error(const ts_data_opts *o, const char *path, const char *what,
                              const char *more) {
    ts_dataset *ds = NULL;
    ts_status st = ts_dataset_open(&ds, o);
    const char *msg = ts_last_error();
    int ok = st != TS_OK && strstr(msg, path) && strstr(msg, what) && (!more || strstr(msg, more));
    if (!ok) {
        fprintf(stderr, "expected an error naming %s with '%s' '%s'; got status %d: %s\n", path,
                what, more ? more : "", (int)st, st ? msg : "(none)");
        failures++;
        if (st == TS_OK) ts_dataset_close(ds);
    } else {
        printf("error ok: %s\n", msg);
    }
}

static void test_llmc_token_file_round_trip_and_errors(void) {
    enum { N = 5000 };
    static uint16_t tok[N];
    for (int i = 0; i < N; i++)
        tok[i] = (uint16_t)((i * 7919u + 13u) % 50257u);
    char src[700];
    const char *path = write_tokens("good.bin", 20240520, 1, N, tok, N);
    ts_data_opts o = file_opts("tokens", path, 50257, src, sizeof src);
    ts_dataset *ds;
    CHECK_OK(ts_dataset_open(&ds, &o));
    CHECK(ts_dataset_num_tokens(ds) == N);
    CHECK(isnan(ts_dataset_entropy_rate(ds)));
    CHECK(strstr(ts_dataset_describe(ds), "good.bin") != NULL);
    int32_t *s = read_stream(ds);
    int same = 1;
    for (int i = 0; i < N; i++)
        same &= s[i] == tok[i];
    CHECK(same);
    free(s);
    ts_dataset_close(ds);

    path = write_tokens("magic.bin", 20240521, 1, N, tok, N);
    o = file_opts("tokens", path, 50257, src, sizeof src);
    expect_open_error(&o, "magic.bin", "bad magic 20240521", "20240520");

    path = write_tokens("version.bin", 20240520, 2, N, tok, N);
    o = file_opts("tokens", path, 50257, src, sizeof src);
    expect_open_error(&o, "version.bin", "version 2", NULL);

    path = write_tokens("truncated.bin", 20240520, 1, N, tok, N / 2);
    o = file_opts("tokens", path, 50257, src, sizeof src);
    expect_open_error(&o, "truncated.bin", "declares 5000 tokens", "holds 6024 bytes");

    path = write_tokens("long.bin", 20240520, 1, 10, tok, 11);
    o = file_opts("tokens", path, 50257, src, sizeof src);
    expect_open_error(&o, "long.bin", "declares 10 tokens", NULL);

    path = write_tokens("negative.bin", 20240520, 1, -4, tok, 0);
    o = file_opts("tokens", path, 50257, src, sizeof src);
    expect_open_error(&o, "negative.bin", "declares -4 tokens", NULL);

    path = write_tokens("one.bin", 20240520, 1, 1, tok, 1);
    o = file_opts("tokens", path, 50257, src, sizeof src);
    expect_open_error(&o, "one.bin", "holds 1 tokens", "at least 2");

    for (int i = 0; i < N; i++)
        tok[i] = (uint16_t)(tok[i] % 256);
    tok[1234] = 300;
    path = write_tokens("vocab.bin", 20240520, 1, N, tok, N);
    o = file_opts("tokens", path, 256, src, sizeof src);
    expect_open_error(&o, "vocab.bin", "token 1234 has id 300", "vocabulary of 256");

    char shortp[512];
    snprintf(shortp, sizeof shortp, "%s/short.bin", tmpdir);
    FILE *f = fopen(shortp, "wb");
    fwrite(tok, 1, 100, f);
    fclose(f);
    o = file_opts("tokens", shortp, 256, src, sizeof src);
    expect_open_error(&o, "short.bin", "shorter than the 1024-byte llm.c header", NULL);

    o = file_opts("tokens", "/nonexistent/train.bin", 256, src, sizeof src);
    expect_open_error(&o, "/nonexistent/train.bin", "cannot open", NULL);
}

static void test_text_source_reads_bytes(void) {
    char path[512], src[700];
    snprintf(path, sizeof path, "%s/text.txt", tmpdir);
    const unsigned char text[] = "hello, world\n\xff\x80 bytes";
    size_t n = sizeof text - 1;
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, n, f);
    fclose(f);
    ts_data_opts o = file_opts("text", path, 256, src, sizeof src);
    ts_dataset *ds;
    CHECK_OK(ts_dataset_open(&ds, &o));
    CHECK(ts_dataset_num_tokens(ds) == (int64_t)n);
    CHECK(isnan(ts_dataset_entropy_rate(ds)));
    int32_t *s = read_stream(ds);
    int same = 1;
    for (size_t i = 0; i < n; i++)
        same &= s[i] == text[i];
    CHECK(same);
    int32_t in[4], tg[4];
    CHECK_OK(ts_dataset_window(ds, 1, 4, in, tg)); /* "o, w" -> ", wo" */
    CHECK(in[0] == 'o' && in[1] == ',' && tg[0] == ',' && tg[3] == 'o');
    free(s);
    ts_dataset_close(ds);

    o = file_opts("text", path, 100, src, sizeof src);
    expect_open_error(&o, "text.txt", "vocab >= 256", NULL);

    snprintf(path, sizeof path, "%s/empty.txt", tmpdir);
    f = fopen(path, "wb");
    fclose(f);
    o = file_opts("text", path, 256, src, sizeof src);
    expect_open_error(&o, "empty.txt", "holds 0 bytes", NULL);

    o = file_opts("text", "/nonexistent/corpus.txt", 256, src, sizeof src);
    expect_open_error(&o, "/nonexistent/corpus.txt", "cannot open", NULL);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"synthetic_is_deterministic_per_seed", test_synthetic_is_deterministic_per_seed},
        {"synthetic_entropy_rate_matches_corpus", test_synthetic_entropy_rate_matches_corpus},
        {"windows_are_stream_slices", test_windows_are_stream_slices},
        {"ignore_token_masks_targets", test_ignore_token_masks_targets},
        {"shuffle_is_a_permutation_per_epoch", test_shuffle_is_a_permutation_per_epoch},
        {"llmc_token_file_round_trip_and_errors", test_llmc_token_file_round_trip_and_errors},
        {"text_source_reads_bytes", test_text_source_reads_bytes},
    };
    return run_cases(argc, argv, "test_data", cases, (int)(sizeof cases / sizeof cases[0]));
}
