/*
 * sample.c — text from the model (train.h: ts_trainer_sample): the next
 * token's logits from a forward over the sequence so far (the last
 * `context` tokens of it), then the argmax (temperature 0) or a draw from
 * softmax(logits / temperature) over the top_k most likely tokens (0: all),
 * with the uniform number of position i drawn from (seed, "sample", i), so a
 * seed gives the same text on any machine. Decoding tokens to text: bytes for
 * a vocabulary of at most 256 tokens, else an llm.c tokenizer file (magic
 * 20240328) or the token ids.
 *
 * What it does not do: cache keys and values (each token runs the whole
 * sequence again: fine for the short samples it is for), or sample a model
 * cut over several ranks (load its checkpoint on one rank instead).
 */
#include "trainer_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

/* The token drawn from `logits` (V of them). */
static int32_t sample_pick(const float *logits, int V, const ts_sample_opts *o, uint64_t key,
                           uint64_t i, float *prob) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (o->temperature <= 0) return best;
    /* The k-th largest logit is the cut: everything below it has no mass. */
    float cut = -INFINITY;
    if (o->top_k > 0 && o->top_k < V) {
        for (int v = 0; v < V; v++)
            prob[v] = logits[v];
        /* Partial selection of the k largest (k is small). */
        for (int k = 0; k < o->top_k; k++) {
            int arg = k;
            for (int v = k + 1; v < V; v++)
                if (prob[v] > prob[arg]) arg = v;
            float tmp = prob[k];
            prob[k] = prob[arg];
            prob[arg] = tmp;
        }
        cut = prob[o->top_k - 1];
    }
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
        prob[v] = logits[v] >= cut ? (float)exp((logits[v] - logits[best]) / o->temperature) : 0.0f;
        sum += prob[v];
    }
    double u = ts_rng_uniform_f64(key, i) * sum, acc = 0.0;
    for (int v = 0; v < V; v++) {
        acc += prob[v];
        if (u < acc && prob[v] > 0) return v;
    }
    return best;
}

ts_status ts_trainer_sample(ts_trainer *t, const int32_t *prompt, int nprompt,
                            const ts_sample_opts *o, int32_t *out) {
    ts_model *m = t->model;
    int V = m->cfg.vocab, ctx = m->cfg.context;
    if (nprompt < 1) return ts_error(TS_ERR_INVALID, "sample: the prompt holds no token");
    for (int i = 0; i < nprompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            return ts_error(TS_ERR_INVALID,
                            "sample: prompt token %d (position %d) is outside the vocabulary "
                            "[0, %d)",
                            prompt[i], i, V);
    float *logits = malloc((size_t)V * 2 * sizeof(float));
    if (!logits) return ts_error(TS_ERR_NOMEM, "sample: out of memory");
    memcpy(out, prompt, (size_t)nprompt * sizeof(int32_t));
    uint64_t key = ts_rng_key(o->seed, "sample");
    ts_status st = TS_OK;
    for (int n = nprompt; n < nprompt + o->tokens && !st; n++) {
        int from = n > ctx ? n - ctx : 0;
        st = ts_model_next_logits(m, out + from, n - from, logits);
        if (!st) out[n] = sample_pick(logits, V, o, key, (uint64_t)n, logits + V);
    }
    free(logits);
    return st;
}

/* --- decoding ------------------------------------------------------------- */
struct ts_tokenizer {
    int n;
    char **piece;
    int *len;
};

ts_status ts_tokenizer_open(const char *path, ts_tokenizer **out) {
    *out = NULL;
    FILE *f;
    TS_TRY(ts_file_open_read(path, "tokenizer", &f));
    uint32_t h[256];
    ts_status st = TS_OK;
    if (fread(h, sizeof h, 1, f) != 1 || h[0] != 20240328u || (h[1] != 1 && h[1] != 2) ||
        h[2] < 1 || h[2] > (1u << 20))
        st = ts_error(TS_ERR_FORMAT,
                      "tokenizer %s: not an llm.c tokenizer file (magic 20240328, version 1 or "
                      "2)",
                      path);
    ts_tokenizer *tk = st ? NULL : calloc(1, sizeof *tk);
    if (!st && tk) {
        tk->n = (int)h[2];
        tk->piece = calloc((size_t)tk->n, sizeof *tk->piece);
        tk->len = calloc((size_t)tk->n, sizeof *tk->len);
    }
    if (!st && (!tk || !tk->piece || !tk->len))
        st = ts_error(TS_ERR_NOMEM, "tokenizer: out of memory");
    for (int i = 0; !st && i < tk->n; i++) {
        unsigned char len;
        if (fread(&len, 1, 1, f) != 1 || !(tk->piece[i] = malloc((size_t)len + 1)) ||
            fread(tk->piece[i], 1, len, f) != len)
            st = ts_error(TS_ERR_FORMAT, "tokenizer %s: truncated at token %d of %d", path, i,
                          tk->n);
        else
            tk->len[i] = len;
    }
    fclose(f);
    if (st) {
        ts_tokenizer_close(tk);
        return st;
    }
    *out = tk;
    return TS_OK;
}

void ts_tokenizer_close(ts_tokenizer *tk) {
    if (!tk) return;
    for (int i = 0; tk->piece && i < tk->n; i++)
        free(tk->piece[i]);
    free(tk->piece);
    free(tk->len);
    free(tk);
}

/* `vocab` is the model's as built (m->cfg.vocab: the weights file's when
 * [model] init gave it), never the INI's key alone: a 50,257-token model
 * read by an INI that leaves vocab at its default of 256 prints ids. */
void ts_tokens_print(FILE *f, const int32_t *tokens, int n, int vocab, const ts_tokenizer *tk) {
    for (int i = 0; i < n; i++) {
        if (tk && tokens[i] >= 0 && tokens[i] < tk->n)
            fwrite(tk->piece[tokens[i]], 1, (size_t)tk->len[tokens[i]], f);
        else if (!tk && vocab <= 256)
            fputc(tokens[i], f);
        else
            fprintf(f, "%s%d", i ? " " : "", tokens[i]);
    }
}
