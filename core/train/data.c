/*
 * data.c — token sources and windows (see data.h for the contract).
 *
 * Tokens are held as uint16 in one block: allocated with the accounted
 * allocator (synthetic, text) or mapped read-only (llm.c token files, so that
 * ranks on one node share the page cache).
 *
 * The synthetic source is a first-order Markov chain over `vocab` states.
 * Each state has min(branching, vocab) distinct successors with skewed
 * probabilities (weights exp(2 z), z standard normal, normalised). One
 * successor of every state follows a random Hamiltonian cycle over all
 * states, which makes the chain irreducible: its stationary distribution pi is
 * unique and is also the long-run state frequency of the generated stream.
 * pi comes from power iteration on the lazy chain (I + P) / 2, which has the
 * same pi and is aperiodic, so the iteration converges even when P is
 * periodic. The entropy rate is sum_s pi(s) H(P(.|s)).
 *
 * Shuffling permutes the window slots of each epoch with a 4-round Feistel
 * network over the next even power of two, cycle-walking back into
 * [0, num_windows): a bijection computed per index, no table stored.
 *
 * What it does not do: tokenise text (bytes are tokens), or stream files
 * larger than memory other than through the mapping.
 */
#include "data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file.h" /* ts_file_open_read */
#include "rng.h"  /* ts_rng_key, ts_rng_u64, ts_rng_uniform_f64, ts_rng_normal */

#define DATA_LLMC_MAGIC 20240520
#define DATA_LLMC_VERSION 1
#define DATA_LLMC_HEADER_BYTES (256 * 4)

struct ts_dataset {
    const uint16_t *tokens;
    int64_t n;
    uint16_t *owned; /* tokens from ts_mem_alloc, or NULL          */
    void *map;       /* the mapping of a token file, or NULL        */
    size_t map_len;
    double entropy_rate; /* nats/token; NaN when unknown            */
    uint64_t shuffle_key;
    int ignore_token;
    int shuffle;
    char source[512];
    char desc[768];
};

/* ------------------------------------------------------------------------- */
/* synthetic Markov source                                                    */

/* Generates the chain's successor table `succ` [V, K] and cumulative
 * probabilities `cum` [V, K], and returns the entropy of each row in `h` [V];
 * `perm` [V] is scratch. */
static void data_markov_chain(uint16_t *succ, double *cum, double *h, uint16_t *perm, int V, int K,
                              uint64_t seed) {
    uint64_t kcycle = ts_rng_key(seed, "data.markov.cycle");
    uint64_t ksucc = ts_rng_key(seed, "data.markov.succ");
    uint64_t kprob = ts_rng_key(seed, "data.markov.prob");

    /* A random cycle through every state: a Fisher-Yates permutation. */
    for (int i = 0; i < V; i++)
        perm[i] = (uint16_t)i;
    for (int i = V - 1; i > 0; i--) {
        int j = (int)(ts_rng_u64(kcycle, (uint64_t)i) % (uint64_t)(i + 1));
        uint16_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < V; i++)
        succ[(size_t)perm[i] * K] = perm[(i + 1) % V];

    for (int s = 0; s < V; s++) {
        uint16_t *row = succ + (size_t)s * K;
        uint64_t attempt = 0;
        for (int k = 1; k < K; k++) {
            for (;;) {
                uint64_t r = ts_rng_u64(ksucc, ((uint64_t)s << 32) | attempt++);
                uint16_t c = (uint16_t)(r % (uint64_t)V);
                int dup = 0;
                for (int m = 0; m < k; m++)
                    dup |= row[m] == c;
                if (!dup) {
                    row[k] = c;
                    break;
                }
            }
        }
    }
    for (int s = 0; s < V; s++) {
        double *c = cum + (size_t)s * K;
        double total = 0;
        for (int k = 0; k < K; k++) {
            c[k] = exp(2.0 * (double)ts_rng_normal(kprob, (uint64_t)s * (uint64_t)K + (uint64_t)k));
            total += c[k];
        }
        double acc = 0, ent = 0;
        for (int k = 0; k < K; k++) {
            double p = c[k] / total;
            if (p > 0) ent -= p * log(p);
            acc += p;
            c[k] = acc;
        }
        c[K - 1] = 1.0;
        h[s] = ent;
    }
}

/* The stationary distribution by power iteration on the lazy chain; pi and
 * next are [V]. */
static void data_markov_stationary(double *pi, double *next, const uint16_t *succ,
                                   const double *cum, int V, int K) {
    for (int s = 0; s < V; s++)
        pi[s] = 1.0 / V;
    for (int it = 0; it < 10000; it++) {
        for (int s = 0; s < V; s++)
            next[s] = 0.5 * pi[s];
        for (int s = 0; s < V; s++) {
            const double *c = cum + (size_t)s * K;
            double prev = 0, half = 0.5 * pi[s];
            for (int k = 0; k < K; k++) {
                next[succ[(size_t)s * K + k]] += half * (c[k] - prev);
                prev = c[k];
            }
        }
        double total = 0, change = 0;
        for (int s = 0; s < V; s++)
            total += next[s];
        for (int s = 0; s < V; s++) {
            next[s] /= total;
            change += fabs(next[s] - pi[s]);
            pi[s] = next[s];
        }
        if (change < 1e-12) break;
    }
}

static ts_status data_open_synthetic(ts_dataset *ds, const ts_data_opts *o) {
    int V = o->vocab;
    int K = o->synthetic_branching < V ? o->synthetic_branching : V;
    int64_t n = o->synthetic_tokens;
    if (o->synthetic_branching < 1)
        return ts_error(TS_ERR_INVALID, "data synthetic: branching=%d must be >= 1",
                        o->synthetic_branching);
    if (n < 2)
        return ts_error(TS_ERR_INVALID, "data synthetic: synthetic_tokens=%lld must be >= 2",
                        (long long)n);
    uint16_t *succ = ts_mem_alloc(TS_MEM_OTHER, (size_t)V * K * sizeof *succ);
    double *cum = ts_mem_alloc(TS_MEM_OTHER, (size_t)V * K * sizeof *cum);
    double *h = ts_mem_alloc(TS_MEM_OTHER, (size_t)V * sizeof *h);
    double *pi = ts_mem_alloc(TS_MEM_OTHER, (size_t)V * sizeof *pi);
    double *next = ts_mem_alloc(TS_MEM_OTHER, (size_t)V * sizeof *next);
    uint16_t *perm = ts_mem_alloc(TS_MEM_OTHER, (size_t)V * sizeof *perm);
    uint16_t *tok = ts_mem_alloc(TS_MEM_OTHER, (size_t)n * sizeof *tok);
    ts_status st = TS_OK;
    if (!succ || !cum || !h || !pi || !next || !perm || !tok) {
        st = TS_ERR_NOMEM; /* ts_mem_alloc set the message */
        ts_mem_free(tok);
        goto done;
    }
    data_markov_chain(succ, cum, h, perm, V, K, o->seed);
    data_markov_stationary(pi, next, succ, cum, V, K);
    double rate = 0;
    for (int s = 0; s < V; s++)
        rate += pi[s] * h[s];

    uint64_t kstream = ts_rng_key(o->seed, "data.markov.stream");
    uint16_t x = (uint16_t)(ts_rng_u64(kstream, 0) % (uint64_t)V);
    tok[0] = x;
    for (int64_t i = 1; i < n; i++) {
        double u = ts_rng_uniform_f64(kstream, (uint64_t)i);
        const double *c = cum + (size_t)x * K;
        int k = 0;
        while (k < K - 1 && u >= c[k])
            k++;
        x = succ[(size_t)x * K + k];
        tok[i] = x;
    }
    ds->owned = tok;
    ds->tokens = tok;
    ds->n = n;
    ds->entropy_rate = rate;
    snprintf(ds->desc, sizeof ds->desc,
             "synthetic Markov source (vocab %d, %d successors per state, seed %llu): %lld "
             "tokens, entropy rate %.4f nats/token",
             V, K, (unsigned long long)o->seed, (long long)n, rate);
done:
    ts_mem_free(succ);
    ts_mem_free(cum);
    ts_mem_free(h);
    ts_mem_free(pi);
    ts_mem_free(next);
    ts_mem_free(perm);
    return st;
}

/* ------------------------------------------------------------------------- */
/* files                                                                      */

static ts_status data_open_text(ts_dataset *ds, const ts_data_opts *o, const char *path) {
    if (o->vocab < 256)
        return ts_error(TS_ERR_INVALID,
                        "data text:%s: byte tokens need vocab >= 256 (the model has %d)", path,
                        o->vocab);
    FILE *f;
    TS_TRY(ts_file_open_read(path, "data file", &f));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0) {
        fclose(f);
        return ts_error(TS_ERR_IO, "data text:%s: cannot stat: %s", path, strerror(errno));
    }
    int64_t n = (int64_t)sb.st_size;
    if (n < 2) {
        fclose(f);
        return ts_error(TS_ERR_FORMAT, "data text:%s: holds %lld bytes; at least 2 are needed",
                        path, (long long)n);
    }
    uint16_t *tok = ts_mem_alloc(TS_MEM_OTHER, (size_t)n * sizeof *tok);
    unsigned char *bytes = ts_mem_alloc(TS_MEM_OTHER, (size_t)n);
    if (!tok || !bytes) {
        ts_mem_free(tok);
        ts_mem_free(bytes);
        fclose(f);
        return TS_ERR_NOMEM;
    }
    size_t got = fread(bytes, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) {
        ts_mem_free(tok);
        ts_mem_free(bytes);
        return ts_error(TS_ERR_IO, "data text:%s: read %zu of %lld bytes", path, got, (long long)n);
    }
    for (int64_t i = 0; i < n; i++)
        tok[i] = bytes[i];
    ts_mem_free(bytes);
    ds->owned = tok;
    ds->tokens = tok;
    ds->n = n;
    snprintf(ds->desc, sizeof ds->desc, "text:%s: %lld bytes as tokens", path, (long long)n);
    return TS_OK;
}

static ts_status data_open_tokens(ts_dataset *ds, const ts_data_opts *o, const char *path) {
    int fd;
    TS_TRY(ts_file_open_read_fd(path, "data file", &fd));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return ts_error(TS_ERR_IO, "data tokens:%s: cannot stat: %s", path, strerror(errno));
    }
    size_t size = (size_t)sb.st_size;
    if (size < DATA_LLMC_HEADER_BYTES) {
        close(fd);
        return ts_error(TS_ERR_FORMAT,
                        "data tokens:%s: %zu bytes is shorter than the %d-byte llm.c header", path,
                        size, DATA_LLMC_HEADER_BYTES);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return ts_error(TS_ERR_IO, "data tokens:%s: cannot map: %s", path, strerror(map_errno));
    const int32_t *header = map;
    ts_status st = TS_OK;
    if (header[0] != DATA_LLMC_MAGIC) {
        st = ts_error(TS_ERR_FORMAT,
                      "data tokens:%s: bad magic %d (expected %d): not an llm.c token file", path,
                      header[0], DATA_LLMC_MAGIC);
    } else if (header[1] != DATA_LLMC_VERSION) {
        st = ts_error(TS_ERR_FORMAT, "data tokens:%s: unsupported version %d (expected %d)", path,
                      header[1], DATA_LLMC_VERSION);
    } else if (header[2] < 0 || size != DATA_LLMC_HEADER_BYTES + 2 * (size_t)(uint32_t)header[2]) {
        st = ts_error(TS_ERR_FORMAT,
                      "data tokens:%s: the header declares %d tokens (%zu bytes with the header) "
                      "but the file holds %zu bytes",
                      path, header[2], DATA_LLMC_HEADER_BYTES + 2 * (size_t)(uint32_t)header[2],
                      size);
    } else if (header[2] < 2) {
        st = ts_error(TS_ERR_FORMAT, "data tokens:%s: holds %d tokens; at least 2 are needed", path,
                      header[2]);
    }
    const uint16_t *tok = (const uint16_t *)((const char *)map + DATA_LLMC_HEADER_BYTES);
    int64_t n = st == TS_OK ? header[2] : 0;
    for (int64_t i = 0; i < n; i++)
        if (tok[i] >= o->vocab) {
            st = ts_error(TS_ERR_FORMAT,
                          "data tokens:%s: token %lld has id %u, outside the vocabulary of %d",
                          path, (long long)i, (unsigned)tok[i], o->vocab);
            break;
        }
    if (st != TS_OK) {
        munmap(map, size);
        return st;
    }
    ds->map = map;
    ds->map_len = size;
    ds->tokens = tok;
    ds->n = n;
    snprintf(ds->desc, sizeof ds->desc, "tokens:%s: %lld tokens (llm.c format)", path,
             (long long)n);
    return TS_OK;
}

/* ------------------------------------------------------------------------- */

ts_status ts_dataset_open(ts_dataset **out, const ts_data_opts *opts) {
    const char *src = opts->source ? opts->source : "synthetic";
    if (opts->vocab < 2 || opts->vocab > 65536)
        return ts_error(TS_ERR_INVALID, "data %s: vocab=%d is outside [2, 65536]", src,
                        opts->vocab);
    ts_dataset *ds = ts_mem_alloc(TS_MEM_OTHER, sizeof *ds);
    if (!ds) return TS_ERR_NOMEM;
    ds->entropy_rate = NAN;
    ds->shuffle = opts->shuffle != 0;
    ds->shuffle_key = ts_rng_key(opts->seed, "data.shuffle");
    ds->ignore_token = opts->ignore_token;
    snprintf(ds->source, sizeof ds->source, "%s", src);
    ts_status st;
    if (strcmp(src, "synthetic") == 0)
        st = data_open_synthetic(ds, opts);
    else if (strncmp(src, "text:", 5) == 0 && src[5])
        st = data_open_text(ds, opts, src + 5);
    else if (strncmp(src, "tokens:", 7) == 0 && src[7])
        st = data_open_tokens(ds, opts, src + 7);
    else
        st = ts_error(TS_ERR_INVALID,
                      "data: unknown source '%s' (expected synthetic, text:PATH or tokens:PATH)",
                      src);
    if (st != TS_OK) {
        ts_mem_free(ds);
        return st;
    }
    if (opts->split > 0.0 && opts->split < 1.0) {
        int64_t cut = (int64_t)((1.0 - opts->split) * (double)ds->n), from = 0, to = cut;
        if (opts->held_out) {
            from = cut;
            to = ds->n;
        }
        ds->tokens += from;
        ds->n = to - from;
        size_t len = strlen(ds->desc);
        snprintf(ds->desc + len, sizeof ds->desc - len, ", %s tokens [%lld, %lld) (split %g)",
                 opts->held_out ? "held-out" : "training", (long long)from, (long long)to,
                 opts->split);
    }
    if (ds->shuffle) {
        size_t len = strlen(ds->desc);
        snprintf(ds->desc + len, sizeof ds->desc - len, ", shuffled");
    }
    *out = ds;
    return TS_OK;
}

void ts_dataset_close(ts_dataset *ds) {
    if (!ds) return;
    if (ds->map) munmap(ds->map, ds->map_len);
    ts_mem_free(ds->owned);
    ts_mem_free(ds);
}

int64_t ts_dataset_num_tokens(const ts_dataset *ds) {
    return ds->n;
}

int64_t ts_dataset_num_windows(const ts_dataset *ds, int T) {
    if (T <= 0) return 0;
    return (ds->n - 1) / T;
}

double ts_dataset_entropy_rate(const ts_dataset *ds) {
    return ds->entropy_rate;
}

const char *ts_dataset_describe(const ts_dataset *ds) {
    return ds->desc;
}

/* The slot of position `i` of an epoch under the permutation keyed by `key`:
 * a balanced Feistel network on 2*half bits, cycle-walked into [0, n). */
static int64_t data_permute(uint64_t key, uint64_t i, uint64_t n) {
    int half = 1;
    while (half < 32 && ((uint64_t)1 << (2 * half)) < n)
        half++;
    uint64_t mask = ((uint64_t)1 << half) - 1;
    uint64_t rk[4];
    for (int r = 0; r < 4; r++)
        rk[r] = ts_rng_u64(key, (uint64_t)r);
    uint64_t x = i;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (int round = 0; round < 4; round++) {
            uint64_t t = r;
            r = l ^ (ts_rng_u64(rk[round], r) & mask);
            l = t;
        }
        x = (l << half) | r;
    } while (x >= n);
    return (int64_t)x;
}

ts_status ts_dataset_window(const ts_dataset *ds, int64_t w, int T, int32_t *inputs,
                            int32_t *targets) {
    if (T <= 0) return ts_error(TS_ERR_INVALID, "data %s: window length T=%d", ds->source, T);
    if (w < 0)
        return ts_error(TS_ERR_INVALID, "data %s: window index %lld < 0", ds->source, (long long)w);
    int64_t nwin = ts_dataset_num_windows(ds, T);
    if (nwin == 0)
        return ts_error(TS_ERR_INVALID,
                        "data %s: %lld tokens hold no window of T=%d (seq_len) tokens, which "
                        "needs T+1 = %lld",
                        ds->source, (long long)ds->n, T, (long long)T + 1);
    int64_t epoch = w / nwin, slot = w % nwin;
    if (ds->shuffle && nwin > 1)
        slot = data_permute(ts_rng_u64(ds->shuffle_key, (uint64_t)epoch), (uint64_t)slot,
                            (uint64_t)nwin);
    const uint16_t *p = ds->tokens + slot * (int64_t)T;
    for (int t = 0; t < T; t++) {
        inputs[t] = p[t];
        targets[t] = p[t + 1] == ds->ignore_token ? -1 : p[t + 1];
    }
    return TS_OK;
}
