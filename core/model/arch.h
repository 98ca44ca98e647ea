/*
 * arch.h — model architectures, registered by name (`[model] arch`).
 *
 * An architecture is a definition, not a runtime: it declares the
 * parameters (names, global shapes, initialisation) and the modules that read
 * them, in model order, and gives each module's forward and backward, written
 * with the placement-driven layers of layers.h. The runtime (model.h) does
 * the rest: which parameters and modules this rank holds, their blocks under
 * the plan's placements, flat buffers, stages, the running of chunks.
 *
 * The table is versioned like the plugin ABI: struct_size first, fields only
 * appended, optional slots documented as such.
 *
 * What it does not do: look at ranks or communicators (layers do, from
 * placements), or allocate parameters (the runtime does).
 */
#ifndef TESSERA_CORE_ARCH_H
#define TESSERA_CORE_ARCH_H

#include "model.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ts_arch {
    uint32_t struct_size; /* sizeof(ts_arch)                               */
    const char *name;     /* "gpt2": the value of [model] arch             */
    /* Required. The parameters in model order; returns the count and fills
     * `out` when it is not NULL. */
    int (*declare_params)(const ts_model_config *cfg, ts_param_decl *out);
    /* Required. The modules in model order, each with the indices of the
     * declared parameters it reads; returns the count, fills `out` when not
     * NULL. Every parameter is read by at least one module. */
    int (*declare_modules)(const ts_model_config *cfg, ts_module_decl *out);
    /* Optional (NULL: none). Rules the layers need beyond their own checks,
     * run once the runtime has read every placement (e.g. GPT-2's attention
     * cut by whole heads). Failure: the model is not built; the message names
     * the key or tensor. */
    ts_status (*check)(const ts_model *m);
    /* Required. FLOPs of one forward + backward of B x T tokens (2 per
     * multiply-add, backward twice forward). */
    double (*flops)(const ts_model_config *cfg, int B, int T);
    /* Optional (NULL: the model cannot be sampled). After a forward of
     * micro-batch `mb` of one sequence of T tokens, before its saved state
     * is released: the logits of the last position, the vocabulary's first
     * `vocab` entries, into `out` (host memory). Fails when this rank does
     * not hold the whole vocabulary. */
    ts_status (*last_logits)(ts_model *m, int mb, int T, float *out);
};

/* GPT-2 (core/model/gpt2.c). */
const ts_arch *ts_arch_gpt2(void);

/* The architecture registered under `name`, or NULL. */
const ts_arch *ts_arch_find(const char *name);
/* Registers another architecture (copied by pointer: `arch` must be static).
 * Fails for a name taken or a table too small. */
ts_status ts_arch_register(const ts_arch *arch);
/* The registered names, ", "-separated, for messages. */
const char *ts_arch_names(char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_ARCH_H */
