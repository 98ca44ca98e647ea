/*
 * shape.c — the model's and the batch's shape from the configuration
 * (ts_train_shape_resolve, train.h): [model] and the file of weights it
 * starts from ([model] init), [train] seq_len, micro_batch and
 * global_batch, and every size derived from them checked before anything
 * grows with it. Nothing is allocated or opened here.
 */
#include "trainer_impl.h"

#include <stdio.h>
#include <string.h>

#include "arch.h"

/* The shape `file` (an llm.c checkpoint, raw weights or a safetensors file,
 * what it says of the shape in *h) gives the model *mc: each key the INI
 * sets must agree with it (an error naming the key), the others are taken
 * from it. The blocks first: where the INI's experts or moe_every make a
 * block an MLP of experts that the file has dense, or the reverse, the
 * error names the first such block. */
static ts_status trainer_shape_from_file(const ts_config *cfg, ts_model_config *mc,
                                         const ts_model_config *h, const char *what,
                                         const char *file) {
    ts_model_config ini = *h;
    if (ts_config_has(cfg, "model", "experts")) ini.experts = mc->experts;
    if (ts_config_has(cfg, "model", "moe_every")) ini.moe_every = mc->moe_every;
    int layers = ts_config_has(cfg, "model", "layers") ? mc->layers : h->layers;
    char said[64] = "no experts";
    if (h->experts > 0)
        snprintf(said, sizeof said, "experts = %d, moe_every = %d", h->experts, h->moe_every);
    for (int l = 0; l < layers && l < h->layers; l++)
        if (ts_model_config_moe_block(&ini, l) != ts_model_config_moe_block(h, l))
            return trainer_key_error(
                cfg, "model", (ini.experts > 0) != (h->experts > 0) ? "experts" : "moe_every",
                "block h.%d is %s here (experts = %d, moe_every = %d) and %s in %s %s (%s)", l,
                ts_model_config_moe_block(&ini, l) ? "a mixture of experts" : "a dense MLP",
                ini.experts, ini.moe_every,
                ts_model_config_moe_block(h, l) ? "a mixture of experts" : "a dense MLP", what,
                file, said);
    /* experts_only: a key a dense file says nothing of. */
    struct {
        const char *key;
        int *ini;
        int file, experts_only;
    } keys[] = {{"layers", &mc->layers, h->layers, 0},
                {"d_model", &mc->d_model, h->d_model, 0},
                {"heads", &mc->heads, h->heads, 0},
                {"vocab", &mc->vocab, h->vocab, 0},
                {"padded_vocab", &mc->padded_vocab, h->padded_vocab, 0},
                {"context", &mc->context, h->context, 0},
                {"experts", &mc->experts, h->experts, 0},
                {"moe_every", &mc->moe_every, h->moe_every, 1},
                {"expert_hidden", &mc->expert_hidden, h->expert_hidden, 1},
                {"top_k", &mc->top_k, h->top_k, 1}};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (h->experts == 0 && keys[i].experts_only) continue;
        if (ts_config_has(cfg, "model", keys[i].key) && *keys[i].ini != keys[i].file)
            return trainer_key_error(cfg, "model", keys[i].key, "%d conflicts with %d in %s %s",
                                     *keys[i].ini, keys[i].file, what, file);
        *keys[i].ini = keys[i].file;
    }
    return TS_OK;
}

/* The model shape from [model], or from the file of weights it starts from
 * (then any shape key given in the INI must agree with the file, and a
 * shape the file alone sets that does not fit is blamed on the file). */
static ts_status trainer_model_config(const ts_config *cfg, const ts_run_config *rc,
                                      ts_model_config *mc) {
    mc->layers = (int)rc->model_layers;
    mc->d_model = (int)rc->model_d_model;
    mc->heads = (int)rc->model_heads;
    mc->vocab = (int)rc->model_vocab;
    mc->padded_vocab = (int)rc->model_padded_vocab;
    mc->context = (int)rc->model_context;
    mc->experts = (int)rc->model_experts;
    mc->moe_every = (int)rc->model_moe_every;
    mc->expert_hidden = (int)rc->model_expert_hidden;
    mc->top_k = (int)rc->model_top_k;
    mc->aux_loss_coeff = (float)rc->model_aux_loss_coeff;
    mc->z_loss_coeff = (float)rc->model_z_loss_coeff;
    mc->capacity_factor = (float)rc->model_capacity_factor;
    mc->drop_by_position = strcmp(rc->model_drop_policy, "position") == 0;
    const char *init = rc->model_init;
    int safetensors = strncmp(init, "safetensors:", 12) == 0;
    if (strncmp(init, "llmc:", 5) == 0 || safetensors) {
        const char *file = strchr(init, ':') + 1;
        ts_model_config h = *mc;
        /* heads and top_k, which a safetensors file may not say (its
         * metadata, config.json beside it): 0 unless the INI sets them, and
         * then none is taken by default. */
        if (safetensors && !ts_config_has(cfg, "model", "heads")) h.heads = 0;
        if (safetensors && !ts_config_has(cfg, "model", "top_k")) h.top_k = 0;
        if ((safetensors ? ts_safetensors_read_config(file, &h) : ts_llmc_read_config(file, &h)) !=
            TS_OK)
            return trainer_key_error_last(cfg, "model", "init", TS_ERR_FORMAT);
        if (h.heads == 0)
            return trainer_key_error(cfg, "model", "heads",
                                     "the safetensors file %s does not say it (no __metadata__ "
                                     "heads, no n_head in a config.json beside it): set it",
                                     file);
        if (h.experts > 0 && h.top_k == 0)
            return trainer_key_error(cfg, "model", "top_k",
                                     "the safetensors file %s of %d experts does not say it (no "
                                     "__metadata__ top_k): set it",
                                     file, h.experts);
        if (h.experts == 0) h.top_k = mc->top_k;
        if (safetensors)
            h.padded_vocab = mc->padded_vocab ? mc->padded_vocab : (h.vocab + 127) / 128 * 128;
        /* (Raw weights are written for a mixture of experts alone.) */
        const char *what = safetensors     ? "the safetensors file"
                           : h.experts > 0 ? "the raw weights"
                                           : "the llm.c checkpoint";
        TS_TRY(trainer_shape_from_file(cfg, mc, &h, what, file));
    } else if (strcmp(init, "random") != 0) {
        return trainer_key_error(cfg, "model", "init",
                                 "'%s' is none of 'random', 'llmc:PATH', 'safetensors:PATH'", init);
    }
    if (mc->experts > 0 && mc->expert_hidden == 0) mc->expert_hidden = 4 * mc->d_model;
    if (mc->experts > 0 && mc->top_k > mc->experts)
        return trainer_key_error(cfg, "model", "top_k",
                                 "top_k = %d is more than experts = %d: a token cannot choose more "
                                 "experts than there are",
                                 mc->top_k, mc->experts);
    if (mc->padded_vocab == 0) mc->padded_vocab = (mc->vocab + 127) / 128 * 128;
    if (mc->d_model % mc->heads != 0)
        return trainer_key_error(cfg, "model", "heads", "heads = %d does not divide d_model = %d",
                                 mc->heads, mc->d_model);
    if (mc->padded_vocab < mc->vocab)
        return trainer_key_error(cfg, "model", "padded_vocab",
                                 "padded_vocab = %d is below vocab = %d", mc->padded_vocab,
                                 mc->vocab);
    return ts_model_config_check(mc);
}

/* Every size derived from the shape keys is checked before anything grows
 * with it: dimensions the kernels take as int (rows B*T, B*heads, 4*C,
 * padded vocabulary), the element counts of the parameters and of the
 * largest activations, and the data cursor after the last step; none may
 * wrap. (Whether the memory exists is the allocator's check.) */
static ts_status trainer_check_sizes(const ts_config *cfg, const ts_run_config *rc,
                                     const ts_train_shape *s) {
    const ts_model_config *c = &s->model;
    int64_t C = c->d_model, L = c->layers, V = c->padded_vocab, P = c->context;
    int64_t B = s->B, T = s->T, NH = c->heads, v, w, params = 0;
    if (!trainer_mul_fits(B, T, &v) || v > INT32_MAX)
        return trainer_key_error(cfg, "train", "micro_batch",
                                 "micro_batch x seq_len = %lld x %lld rows exceeds %d",
                                 (long long)B, (long long)T, INT32_MAX);
    if (!trainer_mul_fits(B, NH, &v) || v > INT32_MAX)
        return trainer_key_error(cfg, "model", "heads",
                                 "micro_batch x heads = %lld x %lld exceeds %d", (long long)B,
                                 (long long)NH, INT32_MAX);
    if (4 * C > INT32_MAX)
        return trainer_key_error(cfg, "model", "d_model", "d_model = %lld: 4 x d_model exceeds %d",
                                 (long long)C, INT32_MAX);
    /* Parameters: wte, wpe, L blocks of 12C^2 + 13C, the final LayerNorm;
     * 16 bytes each with gradients and both moments. */
    int ok = trainer_mul_fits(V, C, &v) && !__builtin_add_overflow(params, v, &params) &&
             trainer_mul_fits(P, C, &v) && !__builtin_add_overflow(params, v, &params) &&
             trainer_mul_fits(C, C, &v) && trainer_mul_fits(v, 12, &v) &&
             !__builtin_add_overflow(v, 13 * C, &v) && trainer_mul_fits(v, L, &v) &&
             !__builtin_add_overflow(params, v, &params) && trainer_mul_fits(params, 16, &v);
    if (!ok)
        return trainer_key_error(
            cfg, "model", "d_model",
            "d_model = %lld with layers = %lld, context = %lld and padded vocabulary "
            "%lld: the parameter count does not fit 64 bits",
            (long long)C, (long long)L, (long long)P, (long long)V);
    /* The logits (B, T, Vp) and the attention scores (B, heads, T, T). */
    if (!trainer_mul_fits(B * T, V, &v) || !trainer_mul_fits(v, 4, &v) ||
        !trainer_mul_fits(B * NH, T, &v) || !trainer_mul_fits(v, T, &v) ||
        !trainer_mul_fits(v, 4, &v))
        return trainer_key_error(
            cfg, "train", "seq_len",
            "seq_len = %lld with micro_batch = %lld: the activations' sizes do not "
            "fit 64 bits",
            (long long)T, (long long)B);
    /* The step's batch on one rank (tokens and targets, 4 bytes each) must
     * fit in memory, and its schedule stay a list a person could read. */
    int64_t rows = (int64_t)s->micro_batches * B, bytes;
    if (s->micro_batches > TS_TRAIN_MAX_MICRO_BATCHES || !trainer_mul_fits(rows, T, &v) ||
        !trainer_mul_fits(v, 8, &bytes) ||
        (ts_physical_memory() && (uint64_t)bytes > ts_physical_memory()))
        return trainer_key_error(
            cfg, "train", "global_batch",
            "global_batch = %d makes %d micro-batches of %lld x %lld tokens per rank "
            "and step (at most %d micro-batches, and the batch must fit in memory)",
            s->global_batch, s->micro_batches, (long long)B, (long long)T,
            TS_TRAIN_MAX_MICRO_BATCHES);
    int64_t steps = rc->train_steps;
    if (!trainer_mul_fits(steps, s->global_batch, &w))
        return trainer_key_error(
            cfg, "train", "steps",
            "steps = %lld x global_batch = %d sequences overflow the data cursor", (long long)steps,
            s->global_batch);
    return TS_OK;
}

ts_status ts_train_shape_resolve(const ts_config *cfg, int dp, ts_train_shape *out) {
    memset(out, 0, sizeof *out);
    ts_run_config rcv;
    ts_run_config_fill(cfg, &rcv);
    const ts_run_config *rc = &rcv;
    const char *arch = rc->model_arch;
    out->arch = ts_arch_find(arch);
    if (!out->arch) {
        char names[256];
        return trainer_key_error(cfg, "model", "arch", "'%s' is not a registered architecture (%s)",
                                 arch, ts_arch_names(names, sizeof names));
    }
    TS_TRY(trainer_model_config(cfg, rc, &out->model));
    out->T = (int)rc->train_seq_len;
    if (out->T == 0) out->T = out->model.context;
    if (out->T > out->model.context)
        return trainer_key_error(cfg, "train", "seq_len",
                                 "seq_len = %d exceeds the model's context = %d", out->T,
                                 out->model.context);
    out->B = (int)rc->train_micro_batch;
    int64_t gb = rc->train_global_batch, per_step;
    if (!trainer_mul_fits(out->B, dp, &per_step) || per_step > INT32_MAX)
        return trainer_key_error(cfg, "train", "micro_batch",
                                 "micro_batch x dp = %d x %d sequences per step exceeds %d", out->B,
                                 dp, INT32_MAX);
    if (gb == 0) gb = per_step;
    if (gb % per_step != 0)
        return trainer_key_error(
            cfg, "train", "global_batch",
            "global_batch = %lld is not a multiple of micro_batch x dp = %d x %d", (long long)gb,
            out->B, dp);
    out->global_batch = (int)gb;
    /* Megatron-LM's rule: m = global_batch / (micro_batch * dp). */
    out->micro_batches = out->global_batch / (out->B * dp);
    return trainer_check_sizes(cfg, rc, out);
}
