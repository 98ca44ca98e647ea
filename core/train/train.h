/*
 * train.h — the trainer: builds the model, optimizer, data and schedule from
 * a validated configuration and runs training steps, printing one progress
 * line per step, writing JSONL metrics and checkpoints.
 */
#ifndef TESSERA_CORE_TRAIN_H
#define TESSERA_CORE_TRAIN_H

#include <stdio.h>

#include "config.h"
#include "parallel.h"
#include "plugin.h"
#include "state.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ts_trainer ts_trainer;

/* The shapes a configuration trains: the model (from [model] or the llm.c
 * checkpoint of [model] init), seq_len T, micro_batch B, global_batch G and
 * the micro-batches per rank m = G / (B * dp). */
typedef struct ts_train_shape {
    const struct ts_arch *arch; /* [model] arch                         */
    ts_model_config model;
    int T, B, global_batch, micro_batches;
} ts_train_shape;

/* At most this many micro-batches per rank and step (global_batch /
 * (micro_batch x dp)); the schedule lists an action for each. */
#define TS_TRAIN_MAX_MICRO_BATCHES (1 << 20)

/* Resolves and checks them; errors name the file, line and key. Every size
 * derived from the keys is checked for overflow before use. */
ts_status ts_train_shape_resolve(const ts_config *cfg, int dp, ts_train_shape *out);

/* What one optimizer step measured. */
typedef struct ts_step_stats {
    int64_t step; /* 1-based number of the step just taken          */
    double loss;  /* mean loss over the valid tokens of the batch   */
    float lr;
    double grad_norm; /* before clipping                                */
    double step_ms;
    double tokens_per_s;
    double bubble;         /* this rank's idle fraction: 1 - compute / step    */
    int skipped;           /* 1: the loss or gradient norm was not finite and
                              the update was not applied (the step still counts
                              and its batch is consumed)                       */
    int64_t skipped_steps; /* steps skipped so far in this run          */
    double val_loss;       /* the held-out loss after this step ([train]
                              eval_every); NaN when none was computed      */
    /* Mixture of experts (experts > 0): the step's auxiliary losses (with
     * their coefficients, summed over the MoE blocks), rows each expert
     * computed and rows dropped over the whole batch, and the row bytes this
     * rank's dispatchers sent. expert_tokens is the trainer's. */
    int experts;
    double aux_loss, z_loss;
    const int64_t *expert_tokens;
    int64_t dropped, dispatch_bytes;
    /* The busiest rank's (of the world): rows its experts computed and its
     * time in them; this rank's time in them. */
    double expert_rows_max, expert_ms_max, expert_ms;
} ts_step_stats;

/* Builds everything from cfg (already validated): the model shape (from
 * [model] or from an llm.c checkpoint named by [model] init), the data,
 * the optimizer, and resumes from the newest checkpoint with
 * [train] resume = auto. Cross-key errors name the file, line and key.
 * `par` (borrowed, may be NULL for one rank) gives the mesh and `reg`
 * (borrowed, may be NULL) the plugins: their transforms place the model's
 * tensors (data.tokens S(0) over dp: each dp rank reads its part of the
 * global batch; the loss is normalised over all of it) and their hooks run
 * around forward, backward and the optimizer step. */
ts_status ts_trainer_create(const ts_config *cfg, ts_parallel *par, ts_plugins *reg,
                            ts_trainer **out);
/* The same for `tessera plan`'s dry run of one rank: `par` is a dry-run
 * context (ts_parallel_create_plan), the backend the dry-run one for
 * [train] device (backend_plan.h), no data is read (batches are zeros) and
 * nothing is written (no checkpoints, metrics, trace). A step then runs the
 * real model, schedule and plugins without computing anything: what it
 * allocates (ts_backend_plan_stats) and what its communicators count is
 * what the real step would. */
ts_status ts_trainer_create_plan(const ts_config *cfg, ts_parallel *par, ts_plugins *reg,
                                 ts_trainer **out);
void ts_trainer_destroy(ts_trainer *t);

/* Runs until [train] steps are done. */
ts_status ts_trainer_run(ts_trainer *t);
/* Takes one optimizer step. */
ts_status ts_trainer_step(ts_trainer *t, ts_step_stats *stats);

ts_train_state *ts_trainer_state(ts_trainer *t);
/* Loads a checkpoint into the trainer's state: a checkpoint directory
 * written by any topology (each rank reads its own blocks) or an earlier
 * build's single file. Collective over the world: a failure on any rank is
 * an error on every rank. */
ts_status ts_trainer_load(ts_trainer *t, const char *path);
/* Saves the current state as checkpoint directory `path` (written beside it
 * as PATH.tmp.dir, then renamed). Collective over the world. */
ts_status ts_trainer_save_checkpoint(ts_trainer *t, const char *path);
/* Writes the current weights, unsharded, for other programs, in f32 or (bf16) rounded to bf16.
 * format: "llmc" (llm.c's GPT-2; raw f32 weights for a mixture of experts) or "safetensors"
 * (transformers' GPT-2 names and shapes, DESIGN.md's for the experts). */
ts_status ts_trainer_export(ts_trainer *t, const char *path, const char *format, int bf16);

/* Sampling (sample.c). */
typedef struct ts_sample_opts {
    int tokens;         /* new tokens to generate                        */
    double temperature; /* 0: the most likely token each time (argmax)   */
    int top_k;          /* draw among the k most likely; 0 = all          */
    uint64_t seed;      /* the draws: a pure function of (seed, position) */
} ts_sample_opts;
/* Continues `prompt` (nprompt tokens, each < vocab) by o->tokens tokens
 * into `out` (nprompt + o->tokens: the prompt, then the new tokens); the
 * model must be whole on this rank (one stage, nothing cut). */
ts_status ts_trainer_sample(ts_trainer *t, const int32_t *prompt, int nprompt,
                            const ts_sample_opts *o, int32_t *out);
/* An llm.c tokenizer file (magic 20240328, version 1 or 2) for decoding. */
typedef struct ts_tokenizer ts_tokenizer;
ts_status ts_tokenizer_open(const char *path, ts_tokenizer **out);
void ts_tokenizer_close(ts_tokenizer *tk);
/* Prints tokens as text: through `tk` when given, as bytes when vocab <=
 * 256, else as ids separated by spaces. */
void ts_tokens_print(FILE *f, const int32_t *tokens, int n, int vocab, const ts_tokenizer *tk);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_TRAIN_H */
