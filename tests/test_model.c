/*
 * test_model.c — the whole GPT-2 model and the optimizer on one rank:
 *
 *   grad          the model's gradient against central finite differences
 *   accumulation  two micro-batches give the gradient of one batch of both
 *   init          counter-based initialisation: pure in (seed, name, index)
 *   lr            warmup + cosine schedule and clipping factor
 *   memory        allocator accounting by category, back to zero when freed
 *   bf16          bf16 parameter storage is half the bytes, rounded master
 *
 * Usage: test_model <case>
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "model.h"
#include "optim.h"
#include "rng.h"

static int failures;

#define EXPECT(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static const ts_model_config tiny = {
    .layers = 2, .d_model = 16, .heads = 2, .vocab = 29, .padded_vocab = 32, .context = 8};

static ts_model *make_model(ts_dtype dt, uint64_t seed) {
    ts_model *m = NULL;
    if (ts_model_create(&tiny, dt, seed, NULL, NULL, &m) != TS_OK) {
        fprintf(stderr, "model: %s\n", ts_last_error());
        exit(1);
    }
    return m;
}

/* Replaces the 0.02-scale initialisation by O(1) values so every path of the
 * network carries gradient well above float noise. */
static void randomise(ts_model *m) {
    float *p = ts_model_param_f32(m);
    uint64_t key = ts_rng_key(7, "test.params");
    for (size_t i = 0; i < m->numel; i++)
        p[i] = 0.3f * ts_rng_normal(key, i);
    for (int i = 0; i < m->nparams; i++) {
        ts_param *q = &m->params[i];
        if (strstr(q->value.name, "ln") && strstr(q->value.name, "weight")) {
            float *w = q->value.data;
            for (int64_t k = 0; k < ts_tensor_numel(&q->value); k++)
                w[k] += 1.0f;
        }
    }
}

static void make_batch(int B, int T, int32_t *tok, int32_t *tgt) {
    uint64_t key = ts_rng_key(3, "test.batch");
    for (int i = 0; i < B * T; i++) {
        tok[i] = (int32_t)(ts_rng_u64(key, 2 * (uint64_t)i) % (uint64_t)tiny.vocab);
        tgt[i] = (int32_t)(ts_rng_u64(key, 2 * (uint64_t)i + 1) % (uint64_t)tiny.vocab);
    }
    tgt[3] = -1; /* one masked position */
}

static double mean_loss(ts_model *m, int B, int T, const int32_t *tok, const int32_t *tgt) {
    ts_step_ctx c = {.mb = 0, .B = B, .T = T, .tokens = tok, .targets = tgt};
    double loss = 0.0;
    if (ts_model_loss(m, &c, &loss) != TS_OK) {
        fprintf(stderr, "loss: %s\n", ts_last_error());
        exit(1);
    }
    return loss;
}

static int64_t count_valid(const int32_t *tgt, int n) {
    int64_t v = 0;
    for (int i = 0; i < n; i++)
        v += tgt[i] >= 0;
    return v;
}

typedef double (*objective_fn)(ts_model *m, int B, int T, const int32_t *tok, const int32_t *tgt);

/* The model's gradient (in m->grad_data) against central differences of
 * `objective` with step eps, over up to 24 sampled elements of every tensor
 * whose name contains `only` (NULL: every tensor): relative L2 error per
 * tensor below tol, printed when `print`. */
static void fd_check(ts_model *m, objective_fn objective, const char *only, int B, int T,
                     const int32_t *tok, const int32_t *tgt, float eps, double tol, int print) {
    float *p = ts_model_param_f32(m);
    uint64_t key = ts_rng_key(5, "test.sample");
    for (int t = 0; t < m->nparams; t++) {
        ts_param *q = &m->params[t];
        if (only && !strstr(q->value.name, only)) continue;
        int64_t n = ts_tensor_numel(&q->value);
        int samples = n < 24 ? (int)n : 24;
        double num = 0.0, den = 0.0;
        for (int s = 0; s < samples; s++) {
            int64_t i = samples == n
                            ? s
                            : (int64_t)(ts_rng_u64(key, (uint64_t)(t * 100 + s)) % (uint64_t)n);
            size_t k = q->offset + (size_t)i;
            float saved = p[k];
            p[k] = saved + eps;
            double lp = objective(m, B, T, tok, tgt);
            p[k] = saved - eps;
            double lm = objective(m, B, T, tok, tgt);
            p[k] = saved;
            double fd = (lp - lm) / (2.0 * eps), g = m->grad_data[k];
            num += (fd - g) * (fd - g);
            den += g * g;
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        EXPECT(rel < tol, "%s: relative gradient error %.3g", q->value.name, rel);
        if (print) printf("%-28s relative gradient error %.2e\n", q->value.name, rel);
    }
}

/* The gradient of the mean loss against central differences over a sample of
 * elements of every tensor. Tolerance: ||g_fd - g|| / ||g|| <= 2e-3 per
 * tensor. The forward runs in f32 (relative rounding ~1e-7 on a loss of ~5),
 * so with eps = 1e-2 the difference quotient carries ~5e-5 absolute noise
 * and O(eps^2) truncation; gradients here are 1e-3..1e-1 per element, so a
 * correct backward lands near 1e-4 and any wrong term lands far above. */
static void test_grad(void) {
    ts_model *m = make_model(TS_F32, 1);
    randomise(m);
    int B = 2, T = 8;
    int32_t tok[16], tgt[16];
    make_batch(B, T, tok, tgt);
    ts_model_zero_grad(m);
    ts_step_ctx c = {.mb = 0,
                     .B = B,
                     .T = T,
                     .tokens = tok,
                     .targets = tgt,
                     .dloss = 1.0f / (float)count_valid(tgt, B * T)};
    EXPECT(ts_model_forward_backward(m, &c) == TS_OK, "%s", ts_last_error());
    double loss0 = c.loss_sum / (double)c.valid_tokens;
    EXPECT(fabs(loss0 - mean_loss(m, B, T, tok, tgt)) < 1e-6,
           "forward-only loss differs from the forward+backward loss");
    EXPECT(c.valid_tokens == 15, "valid tokens %lld, expected 15", (long long)c.valid_tokens);

    /* wte rows of padded ids and of ids never seen get no gradient: they
     * are sampled too, the finite difference must be 0 there. */
    fd_check(m, mean_loss, NULL, B, T, tok, tgt, 1e-2f, 2e-3, 0);
    /* The padded rows of wte never get a gradient. */
    ts_param *wte = ts_model_param(m, "wte");
    for (int64_t r = tiny.vocab; r < tiny.padded_vocab; r++)
        for (int ch = 0; ch < tiny.d_model; ch++)
            EXPECT(((float *)wte->grad.data)[r * tiny.d_model + ch] == 0.0f,
                   "padded wte row %lld has a gradient", (long long)r);
    ts_model_destroy(m);
}

/* Gradient accumulation: micro-batches of B=1 twice equal one batch of B=2
 * (same normalisation by the global valid count). Tolerance 1e-5 relative:
 * only the summation order of the parameter gradients differs. */
static void test_accumulation(void) {
    ts_model *a = make_model(TS_F32, 2), *b = make_model(TS_F32, 2);
    randomise(a);
    randomise(b);
    int T = 8;
    int32_t tok[16], tgt[16];
    make_batch(2, T, tok, tgt);
    float dloss = 1.0f / (float)count_valid(tgt, 16);
    ts_model_zero_grad(a);
    ts_model_zero_grad(b);
    ts_step_ctx whole = {.mb = 0, .B = 2, .T = T, .tokens = tok, .targets = tgt, .dloss = dloss};
    EXPECT(ts_model_forward_backward(a, &whole) == TS_OK, "%s", ts_last_error());
    ts_step_ctx part0 = {.mb = 0, .B = 1, .T = T, .tokens = tok, .targets = tgt, .dloss = dloss};
    ts_step_ctx part1 = {
        .mb = 1, .B = 1, .T = T, .tokens = tok + T, .targets = tgt + T, .dloss = dloss};
    /* Both forwards before both backwards, as a pipeline would run them. */
    EXPECT(ts_model_forward(b, &part0) == TS_OK, "%s", ts_last_error());
    EXPECT(ts_model_forward(b, &part1) == TS_OK, "%s", ts_last_error());
    EXPECT(ts_model_backward(b, &part1) == TS_OK, "%s", ts_last_error());
    EXPECT(ts_model_backward(b, &part0) == TS_OK, "%s", ts_last_error());
    EXPECT(fabs(whole.loss_sum - (part0.loss_sum + part1.loss_sum)) < 1e-5 * fabs(whole.loss_sum),
           "loss sums differ: %g vs %g", whole.loss_sum, part0.loss_sum + part1.loss_sum);
    double num = 0, den = 0;
    for (size_t i = 0; i < a->numel; i++) {
        double d = a->grad_data[i] - b->grad_data[i];
        num += d * d;
        den += (double)a->grad_data[i] * a->grad_data[i];
    }
    EXPECT(sqrt(num / den) < 1e-5, "accumulated gradient differs: %.3g", sqrt(num / den));
    ts_mem_counter acts = ts_mem_stats(TS_MEM_ACTS);
    ts_model_destroy(a);
    ts_model_destroy(b);
    (void)acts;
}

static void test_init(void) {
    ts_model *a = make_model(TS_F32, 42), *b = make_model(TS_F32, 42), *c = make_model(TS_F32, 43);
    EXPECT(memcmp(a->param_data, b->param_data, a->numel * 4) == 0, "same seed, different init");
    EXPECT(memcmp(a->param_data, c->param_data, a->numel * 4) != 0, "different seeds, same init");
    /* Element i of a tensor is a pure function of (seed, name, i). */
    ts_param *w = ts_model_param(a, "h.1.attn.qkv.weight");
    uint64_t key = ts_rng_key(42, "h.1.attn.qkv.weight");
    for (int64_t i = 0; i < ts_tensor_numel(&w->value); i += 37)
        EXPECT(((float *)w->value.data)[i] == 0.02f * ts_rng_normal(key, (uint64_t)i),
               "qkv.weight[%lld] is not 0.02 * normal(seed, name, %lld)", (long long)i,
               (long long)i);
    ts_param *proj = ts_model_param(a, "h.0.mlp.proj.weight");
    key = ts_rng_key(42, "h.0.mlp.proj.weight");
    float std = 0.02f / sqrtf(2.0f * tiny.layers);
    EXPECT(((float *)proj->value.data)[5] == std * ts_rng_normal(key, 5),
           "residual projection not scaled by 1/sqrt(2L)");
    ts_param *wte = ts_model_param(a, "wte");
    for (int64_t i = (int64_t)tiny.vocab * tiny.d_model; i < ts_tensor_numel(&wte->value); i++)
        EXPECT(((float *)wte->value.data)[i] == 0.0f, "padded wte element %lld not zero",
               (long long)i);
    EXPECT(((float *)ts_model_param(a, "h.0.ln1.weight")->value.data)[3] == 1.0f,
           "LayerNorm weight not 1");
    EXPECT(((float *)ts_model_param(a, "h.0.attn.qkv.bias")->value.data)[3] == 0.0f, "bias not 0");
    EXPECT(ts_model_param(a, "wte")->decay && !ts_model_param(a, "lnf.bias")->decay &&
               !ts_model_param(a, "h.0.mlp.fc.bias")->decay,
           "weight decay must apply to 2-D weights only");
    ts_model_destroy(a);
    ts_model_destroy(b);
    ts_model_destroy(c);
}

static void test_lr(void) {
    ts_optim_config c = {.lr = 1.0f, .min_lr = 0.1f, .warmup = 10, .decay_steps = 110};
    EXPECT(fabsf(ts_lr_at(&c, 0) - 0.1f) < 1e-7f, "warmup step 0: %g", ts_lr_at(&c, 0));
    EXPECT(fabsf(ts_lr_at(&c, 4) - 0.5f) < 1e-7f, "warmup step 4: %g", ts_lr_at(&c, 4));
    EXPECT(fabsf(ts_lr_at(&c, 10) - 1.0f) < 1e-6f, "peak after warmup: %g", ts_lr_at(&c, 10));
    EXPECT(fabsf(ts_lr_at(&c, 60) - 0.55f) < 1e-6f, "cosine midpoint: %g", ts_lr_at(&c, 60));
    EXPECT(fabsf(ts_lr_at(&c, 110) - 0.1f) < 1e-6f, "end of decay: %g", ts_lr_at(&c, 110));
    EXPECT(fabsf(ts_lr_at(&c, 500) - 0.1f) < 1e-6f, "after decay: %g", ts_lr_at(&c, 500));
    c.grad_clip = 1.0f;
    EXPECT(ts_grad_clip_scale(&c, 0.5) == 1.0f, "no clipping below the threshold");
    EXPECT(fabsf(ts_grad_clip_scale(&c, 4.0) - 0.25f) < 1e-7f, "clip scale 1/4");
    c.grad_clip = 0.0f;
    EXPECT(ts_grad_clip_scale(&c, 100.0) == 1.0f, "grad_clip = 0 disables clipping");
}

static void test_memory(void) {
    ts_mem_counter before = ts_mem_stats(TS_MEM_NCAT);
    ts_model *m = make_model(TS_F32, 1);
    ts_optim_config oc = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    ts_optimizer *o = NULL;
    EXPECT(ts_optimizer_create(&oc, m, &o) == TS_OK, "%s", ts_last_error());
    size_t bytes = m->numel * sizeof(float);
    EXPECT(ts_mem_stats(TS_MEM_PARAMS).allocated == bytes, "params accounted %zu, expected %zu",
           ts_mem_stats(TS_MEM_PARAMS).allocated, bytes);
    EXPECT(ts_mem_stats(TS_MEM_GRADS).allocated == bytes, "grads accounted");
    EXPECT(ts_mem_stats(TS_MEM_OPTIM).allocated == 2 * bytes,
           "fp32: m and v only, master is the params");
    EXPECT(ts_mem_stats(TS_MEM_PARAMS).reserved >= bytes, "reserved covers allocated");
    int32_t tok[16], tgt[16];
    make_batch(2, 8, tok, tgt);
    ts_step_ctx c = {.mb = 0, .B = 2, .T = 8, .tokens = tok, .targets = tgt, .dloss = 0.1f};
    EXPECT(ts_model_forward(m, &c) == TS_OK, "%s", ts_last_error());
    size_t held = ts_mem_stats(TS_MEM_ACTS).allocated;
    EXPECT(held > 0, "forward keeps saved activations");
    EXPECT(ts_model_backward(m, &c) == TS_OK, "%s", ts_last_error());
    EXPECT(ts_mem_stats(TS_MEM_ACTS).allocated < held, "backward frees saved activations");
    EXPECT(ts_mem_stats(TS_MEM_ACTS).peak >= held, "activation peak recorded");
    ts_optimizer_destroy(o);
    ts_model_destroy(m);
    EXPECT(ts_mem_stats(TS_MEM_NCAT).allocated == before.allocated, "everything freed: %zu left",
           ts_mem_stats(TS_MEM_NCAT).allocated - before.allocated);
}

/* The allocator keeps freed per-step blocks of 1 MiB and more for reuse:
 * still reserved, no longer allocated, handed out again zeroed for the same
 * size, and returned to the system by ts_mem_trim. */
static void test_memory_cache(void) {
    ts_mem_trim();
    /* A peak first, so that the cache has room (it holds at most what the
     * per-step categories held at once). */
    size_t n = 4u << 20;
    ts_mem_counter r0 = ts_mem_stats(TS_MEM_NCAT);
    unsigned char *a = ts_mem_alloc(TS_MEM_ACTS, n), *b = ts_mem_alloc(TS_MEM_ACTS, n);
    EXPECT(a && b, "%s", ts_last_error());
    memset(a, 0x5a, n);
    ts_mem_free(b);
    ts_mem_counter r1 = ts_mem_stats(TS_MEM_NCAT);
    EXPECT(r1.allocated == r0.allocated + n, "freed: not allocated (%zu)", r1.allocated);
    EXPECT(r1.reserved > r0.reserved + n, "freed: still reserved (cached)");
    ts_mem_free(a);
    r1 = ts_mem_stats(TS_MEM_NCAT);
    unsigned char *c = ts_mem_alloc(TS_MEM_COMM, n);
    EXPECT(c != NULL, "%s", ts_last_error());
    size_t nonzero = 0;
    for (size_t i = 0; i < n; i++)
        nonzero += c[i] != 0;
    EXPECT(nonzero == 0, "a reused block is zeroed (%zu bytes are not)", nonzero);
    ts_mem_counter r2 = ts_mem_stats(TS_MEM_NCAT);
    EXPECT(r2.reserved == r1.reserved, "reuse maps nothing new: reserved %zu, was %zu", r2.reserved,
           r1.reserved);
    EXPECT(ts_mem_stats(TS_MEM_COMM).reserved >= n, "a reused block counts under its new category");
    ts_mem_free(c);
    /* The CPU backend's blocks are zeroed by its thread team (ts_mem_alloc_with
     * and ts_cpu_zero): the same, over two threads' shares. */
    const ts_backend *be = ts_backend_cpu();
    int threads = ts_cpu_get_threads();
    ts_cpu_set_threads(2);
    unsigned char *d = be->alloc(TS_MEM_ACTS, n);
    EXPECT(d != NULL, "%s", ts_last_error());
    memset(d, 0xa5, n);
    be->free(d);
    ts_mem_counter r4 = ts_mem_stats(TS_MEM_NCAT);
    unsigned char *e = be->alloc(TS_MEM_ACTS, n);
    EXPECT(e != NULL, "%s", ts_last_error());
    nonzero = 0;
    for (size_t i = 0; i < n; i++)
        nonzero += e[i] != 0;
    EXPECT(nonzero == 0, "a block the CPU backend reuses is zeroed (%zu bytes are not)", nonzero);
    EXPECT(ts_mem_stats(TS_MEM_NCAT).reserved == r4.reserved,
           "the backend's block was reused: reserved %zu, was %zu",
           ts_mem_stats(TS_MEM_NCAT).reserved, r4.reserved);
    be->free(e);
    ts_cpu_set_threads(threads);
    ts_mem_trim();
    ts_mem_counter r3 = ts_mem_stats(TS_MEM_NCAT);
    EXPECT(r3.reserved == r0.reserved && r3.allocated == r0.allocated,
           "trim returns every cached block: reserved %zu, was %zu", r3.reserved, r0.reserved);
}

/* The optimizer zeroes the gradient of its range as it reads it, and the
 * next zero_grad skips that range: after a step on the middle third, that
 * third reads 0 and the rest is as the backward left it; zero_grad then
 * zeroes the rest, trusting the range (a value planted there stays), and
 * the next backward gives the same bits as after a full zeroing. Any
 * backward forgets the range. */
static void test_grad_zero(void) {
    ts_model *m = make_model(TS_F32, 3);
    randomise(m);
    size_t n = m->numel, b = n / 3, e = 2 * n / 3;
    ts_optim_config oc = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    ts_optim_shard shard = {.begin = b, .end = e};
    ts_optimizer *o = NULL;
    EXPECT(ts_optimizer_create_shard(&oc, m, &shard, &o) == TS_OK, "%s", ts_last_error());
    int32_t tok[16], tgt[16];
    make_batch(2, 8, tok, tgt);
    ts_step_ctx c = {.mb = 0, .B = 2, .T = 8, .tokens = tok, .targets = tgt, .dloss = 1.0f / 15};
    float *g = m->grad_data, *before = malloc(n * sizeof *before), *full = malloc(n * sizeof *full);
    ts_model_zero_grad(m);
    EXPECT(ts_model_forward_backward(m, &c) == TS_OK, "%s", ts_last_error());
    memcpy(before, g, n * sizeof *g);
    size_t nonzero = 0;
    for (size_t i = b; i < e; i++)
        nonzero += before[i] != 0.0f;
    EXPECT(nonzero > (e - b) / 2, "the backward wrote the range (%zu of %zu nonzero)", nonzero,
           e - b);
    EXPECT(ts_optimizer_step(o, m, 0, 1e-3f, 1.0f) == TS_OK, "%s", ts_last_error());
    EXPECT(m->grad_zero_begin == b && m->grad_zero_end == e, "the step records [%zu, %zu)",
           m->grad_zero_begin, m->grad_zero_end);
    int range_zero = 1, rest_kept = 1;
    for (size_t i = 0; i < n; i++) {
        if (i >= b && i < e)
            range_zero &= g[i] == 0.0f;
        else
            rest_kept &= memcmp(&g[i], &before[i], sizeof *g) == 0;
    }
    EXPECT(range_zero, "the optimizer's range of the gradient is 0 after its step");
    EXPECT(rest_kept, "outside the range the gradient is as the backward left it");

    g[b] = 7.0f; /* planted: zero_grad trusts the range */
    ts_model_zero_grad(m);
    int rest_zero = 1;
    for (size_t i = 0; i < n; i++)
        rest_zero &= i == b || g[i] == 0.0f;
    EXPECT(rest_zero, "zero_grad zeroes everything outside the range");
    EXPECT(g[b] == 7.0f, "zero_grad skips the range the optimizer left 0");
    EXPECT(m->grad_zero_begin == 0 && m->grad_zero_end == 0, "zero_grad forgets the range");
    g[b] = 0.0f;

    /* The next backward after the step: the same bits as after a full zeroing. */
    EXPECT(ts_optimizer_step(o, m, 1, 1e-3f, 1.0f) == TS_OK, "%s", ts_last_error());
    ts_model_zero_grad(m);
    EXPECT(ts_model_forward_backward(m, &c) == TS_OK, "%s", ts_last_error());
    memcpy(full, g, n * sizeof *g);
    m->grad_zero_begin = m->grad_zero_end = 0;
    ts_model_zero_grad(m);
    EXPECT(ts_model_forward_backward(m, &c) == TS_OK, "%s", ts_last_error());
    EXPECT(!memcmp(full, g, n * sizeof *g), "gradients after the skipped zeroing: same bits");

    /* A backward without zero_grad forgets the range. */
    m->grad_zero_begin = b, m->grad_zero_end = e;
    EXPECT(ts_model_forward_backward(m, &c) == TS_OK, "%s", ts_last_error());
    EXPECT(m->grad_zero_begin == 0 && m->grad_zero_end == 0, "a backward forgets the range");
    free(before);
    free(full);
    ts_optimizer_destroy(o);
    ts_model_destroy(m);
}

static void test_bf16(void) {
    ts_model *f = make_model(TS_F32, 9);
    ts_mem_counter p0 = ts_mem_stats(TS_MEM_PARAMS);
    ts_model *h = make_model(TS_BF16, 9);
    size_t bf16_bytes = ts_mem_stats(TS_MEM_PARAMS).allocated - p0.allocated;
    EXPECT(bf16_bytes == h->numel * 2, "bf16 parameters take %zu bytes, expected %zu", bf16_bytes,
           h->numel * 2);
    const uint16_t *hv = h->param_data;
    const float *fv = f->param_data;
    for (size_t i = 0; i < h->numel; i++)
        if (hv[i] != ts_f32_to_bf16(fv[i])) {
            EXPECT(0, "bf16 parameter %zu is not the rounded f32 initial value", i);
            break;
        }
    ts_optim_config oc = {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f};
    ts_optimizer *o = NULL;
    EXPECT(ts_optimizer_create(&oc, h, &o) == TS_OK, "%s", ts_last_error());
    EXPECT(o->owns_master, "bf16 keeps an f32 master copy");
    int32_t tok[16], tgt[16];
    make_batch(2, 8, tok, tgt);
    ts_model_zero_grad(h);
    ts_step_ctx c = {.mb = 0, .B = 2, .T = 8, .tokens = tok, .targets = tgt, .dloss = 1.0f / 15};
    EXPECT(ts_model_forward_backward(h, &c) == TS_OK, "%s", ts_last_error());
    ts_optimizer_step(o, h, 0, 1e-3f, 1.0f);
    for (size_t i = 0; i < h->numel; i++)
        if (hv[i] != ts_f32_to_bf16(o->master[i])) {
            EXPECT(0, "bf16 parameter %zu is not the rounded master after a step", i);
            break;
        }
    ts_optimizer_destroy(o);
    ts_model_destroy(h);
    ts_model_destroy(f);
}

/* The MoE block (core/model/moe.c) against central differences of the whole
 * objective: the mean LM loss plus the load-balancing and z losses. 4
 * experts, top 2, every block MoE; routing is piecewise constant in the
 * parameters, so eps is small (1e-3: the difference quotient then carries
 * ~5e-4 absolute noise on gradients of 1e-2..1e-1) and the tolerance 1e-2;
 * a missing term (the aux loss's gradient, the renormalisation, the z-loss)
 * moves the router's error far above it. With capacity_factor 1.0 some
 * rows are dropped and the same must hold. */
static double moe_objective(ts_model *m, int B, int T, const int32_t *tok, const int32_t *tgt) {
    ts_moe_stats_reset(&m->moe_stats, m->cfg.experts);
    double loss = mean_loss(m, B, T, tok, tgt);
    return loss + m->moe_stats.aux_loss + m->moe_stats.z_loss;
}

static void test_moe_grad(float capacity_factor) {
    ts_model_config cfg = tiny;
    cfg.experts = 4;
    cfg.moe_every = 1;
    cfg.expert_hidden = 24;
    cfg.top_k = 2;
    cfg.aux_loss_coeff = 0.1f;
    cfg.z_loss_coeff = 0.01f;
    cfg.capacity_factor = capacity_factor;
    ts_model *m = NULL;
    if (ts_model_create(&cfg, TS_F32, 1, NULL, NULL, &m) != TS_OK) {
        fprintf(stderr, "model: %s\n", ts_last_error());
        exit(1);
    }
    randomise(m);
    int B = 2, T = 8;
    int32_t tok[16], tgt[16];
    make_batch(B, T, tok, tgt);
    ts_model_zero_grad(m);
    ts_moe_stats_reset(&m->moe_stats, cfg.experts);
    ts_step_ctx c = {.mb = 0,
                     .B = B,
                     .T = T,
                     .tokens = tok,
                     .targets = tgt,
                     .dloss = 1.0f / (float)count_valid(tgt, B * T)};
    EXPECT(ts_model_forward_backward(m, &c) == TS_OK, "%s", ts_last_error());
    int64_t rows = 0;
    for (int e = 0; e < cfg.experts; e++)
        rows += m->moe_stats.tokens[e];
    EXPECT(rows + m->moe_stats.dropped == (int64_t)cfg.layers * B * T * cfg.top_k,
           "rows %lld + dropped %lld", (long long)rows, (long long)m->moe_stats.dropped);
    EXPECT(capacity_factor == 0.0f || m->moe_stats.dropped > 0, "capacity 1.0 dropped nothing");
    /* The MoE blocks' own tensors and the LayerNorm before them. */
    fd_check(m, moe_objective, "moe", B, T, tok, tgt, 1e-3f, 1e-2, 1);
    fd_check(m, moe_objective, "ln2", B, T, tok, tgt, 1e-3f, 1e-2, 1);
    ts_model_destroy(m);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_model grad|accumulation|init|lr|memory|bf16\n");
        return 2;
    }
    ts_cpu_set_threads(2);
    if (strcmp(argv[1], "grad") == 0)
        test_grad();
    else if (strcmp(argv[1], "accumulation") == 0)
        test_accumulation();
    else if (strcmp(argv[1], "init") == 0)
        test_init();
    else if (strcmp(argv[1], "lr") == 0)
        test_lr();
    else if (strcmp(argv[1], "memory") == 0)
        test_memory();
    else if (strcmp(argv[1], "memory_cache") == 0)
        test_memory_cache();
    else if (strcmp(argv[1], "grad_zero") == 0)
        test_grad_zero();
    else if (strcmp(argv[1], "bf16") == 0)
        test_bf16();
    else if (strcmp(argv[1], "moe_grad") == 0)
        test_moe_grad(0.0f);
    else if (strcmp(argv[1], "moe_grad_dropping") == 0)
        test_moe_grad(1.0f);
    else {
        fprintf(stderr, "unknown case %s\n", argv[1]);
        return 2;
    }
    if (failures) fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
