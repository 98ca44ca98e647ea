/*
 * config_agree.c — every rank runs the same configuration (config.h,
 * ts_config_agree). A 64-bit hash of the canonical text is compared first;
 * only when the hashes differ are the texts themselves gathered, to name
 * the first key that differs and which ranks hold which value.
 *
 * What it does not do: reconcile differences (any difference is an error).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "tessera/comm.h"

/* FNV-1a, 64 bits. */
static uint64_t agree_hash(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* The value of `key` ("section.key") in a canonical text, or NULL; the value
 * runs to the end of its line (copied into buf). */
static const char *agree_value(const char *text, const char *key, char *buf, size_t size) {
    size_t klen = strlen(key);
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
            size_t v = len - klen - 1 < size - 1 ? len - klen - 1 : size - 1;
            memcpy(buf, p + klen + 1, v);
            buf[v] = '\0';
            return buf;
        }
        p += len + (nl ? 1 : 0);
    }
    return NULL;
}

/* The first key whose value differs between texts a and b (present in one
 * only counts), into key. Returns 0 when they are equal. */
static int agree_first_difference(const char *a, const char *b, char *key, size_t size) {
    const char *texts[2] = {a, b};
    for (int side = 0; side < 2; side++)
        for (const char *p = texts[side]; *p;) {
            const char *nl = strchr(p, '\n'), *eq = strchr(p, '=');
            size_t len = nl ? (size_t)(nl - p) : strlen(p);
            if (eq && eq < p + len && (size_t)(eq - p) < size) {
                memcpy(key, p, (size_t)(eq - p));
                key[eq - p] = '\0';
                char va[512], vb[512];
                const char *x = agree_value(a, key, va, sizeof va);
                const char *y = agree_value(b, key, vb, sizeof vb);
                if (!x || !y || strcmp(x, y) != 0) return 1;
            }
            p += len + (nl ? 1 : 0);
        }
    return 0;
}

ts_status ts_config_agree(const ts_config *cfg, ts_comm *world) {
    int n = ts_comm_size(world);
    if (n <= 1) return TS_OK;
    char *text = ts_config_canonical(cfg);
    if (!text) return ts_error(TS_ERR_NOMEM, "config: out of memory");
    uint64_t h = agree_hash(text);
    int32_t mine[2] = {(int32_t)(uint32_t)h, (int32_t)(uint32_t)(h >> 32)};
    int32_t *all = malloc((size_t)n * 2 * sizeof *all);
    ts_status st = all ? ts_comm_all_gather(world, mine, all, 2, TS_I32)
                       : ts_error(TS_ERR_NOMEM, "config: out of memory");
    int same = 1;
    for (int r = 1; !st && r < n; r++)
        same &= all[2 * r] == all[0] && all[2 * r + 1] == all[1];
    free(all);
    if (st || same) {
        free(text);
        return st;
    }
    /* They differ: gather every text (padded to the longest) to say how. */
    int32_t len = (int32_t)((strlen(text) + 1 + 3) / 4), longest = 0;
    st = ts_comm_all_reduce(world, &len, &longest, 1, TS_I32, TS_REDUCE_MAX);
    int32_t *words = NULL, *texts = NULL;
    if (!st) {
        words = calloc((size_t)longest, sizeof *words);
        texts = malloc((size_t)n * (size_t)longest * sizeof *texts);
        if (!words || !texts) st = ts_error(TS_ERR_NOMEM, "config: out of memory");
    }
    if (!st) {
        memcpy(words, text, strlen(text) + 1);
        st = ts_comm_all_gather(world, words, texts, (size_t)longest, TS_I32);
    }
    if (!st) {
        /* The first rank that differs from rank 0 names the key. */
        const char *t0 = (const char *)texts;
        char key[256] = "", msg[1500];
        for (int r = 1; r < n && !key[0]; r++)
            if (!agree_first_difference(t0, (const char *)(texts + (size_t)r * longest), key,
                                        sizeof key))
                key[0] = '\0';
        /* Group the ranks by their value of that key: "= 0.001 on ranks 0, 2". */
        size_t pos = 0;
        char *done = calloc((size_t)n, 1);
        for (int r = 0; done && r < n; r++) {
            if (done[r]) continue;
            char vr[512], vs[512], list[512];
            const char *v =
                agree_value((const char *)(texts + (size_t)r * longest), key, vr, sizeof vr);
            size_t lpos = 0;
            int count = 0;
            for (int q = r; q < n; q++) {
                const char *w =
                    agree_value((const char *)(texts + (size_t)q * longest), key, vs, sizeof vs);
                int match = v ? w && strcmp(v, w) == 0 : !w;
                if (done[q] || !match) continue;
                done[q] = 1;
                if (lpos < sizeof list - 16)
                    lpos += (size_t)snprintf(list + lpos, sizeof list - lpos, "%s%d",
                                             count ? ", " : "", q);
                count++;
            }
            if (pos < sizeof msg - 1)
                pos += (size_t)snprintf(msg + pos, sizeof msg - pos, "%s%s%s on rank%s %s",
                                        pos ? "; " : "", v ? "= " : "absent", v ? v : "",
                                        count > 1 ? "s" : "", list);
        }
        free(done);
        const char *dot = strchr(key, '.');
        st = ts_error(TS_ERR_CONFIG,
                      "the ranks run different configurations (after --set): [%.*s] %s %s; every "
                      "rank must be launched with the same file and overrides",
                      dot ? (int)(dot - key) : 0, key, dot ? dot + 1 : key, msg);
    }
    free(words);
    free(texts);
    free(text);
    return st;
}
