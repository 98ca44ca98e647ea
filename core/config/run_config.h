/*
 * run_config.h — the run's keys in one table, and the typed run
 * configuration filled from it.
 *
 * TS_RUN_KEYS lists every key of the core's sections (model, data, train,
 * parallel, comm) once: section, key, type, default, range, choices and
 * help. config.c generates the schema from it (ts_config_core_keys, in this
 * order), and ts_run_config has one field per key, `section_key`, of the
 * key's C type (INT int64_t, FLOAT double, BOOL int, STRING and ENUM the
 * text), which ts_run_config_fill sets once from a validated configuration.
 * The trainer reads its keys from there, never by (section, key) strings.
 * The words of [train] recompute exist once (TS_RECOMPUTE_WORDS, in
 * ts_recompute order): the schema's choices and every reader's names.
 *
 * What it does not hold: the plugins' keys (each plugin declares and reads
 * its own through the host table) and [cluster] (the plan's hardware, read
 * by apps/cluster.c; config.c's own list).
 */
#ifndef TESSERA_CORE_RUN_CONFIG_H
#define TESSERA_CORE_RUN_CONFIG_H

#include <math.h>
#include <stdint.h>

#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Ranges the table uses. */
#define CFG_ANY_MAX INFINITY
#define CFG_INT_MAX 2147483647.0      /* a key stored in an int                  */
#define CFG_I64_MAX 9.2e18            /* below INT64_MAX, exactly representable  */
#define CFG_FLT_MAX 3.4e38            /* a key stored in a float (< FLT_MAX)     */
#define CFG_POSITIVE DBL_TRUE_MIN     /* min of a range "> 0" */
#define CFG_BELOW_ONE (1.0 - 0x1p-53) /* max of a range "< 1" */

/* [train] recompute's words, in ts_recompute order (core/model/module.h:
 * none, selective, full). */
#define TS_RECOMPUTE_WORDS(X) X(NONE, "none") X(SELECTIVE, "selective") X(FULL, "full")
#define TS_WORDS_CHOICE_(name, word) "|" word
/* "none|selective|full": the words joined, for the schema. */
#define TS_RECOMPUTE_CHOICES (TS_RECOMPUTE_WORDS(TS_WORDS_CHOICE_) + 1)
/* The word of mode (0, 1, 2), "?" out of range; the mode of a word, -1 for
 * none of them. */
const char *ts_recompute_word(int mode);
int ts_recompute_from_word(const char *word);

/* X(section, key, type, default, min, max, choices, help) per key. */
#define TS_RUN_KEYS(X)                                                                             \
    X(model, arch, ENUM, "gpt2", 1, 0, "gpt2", "model architecture")                               \
    X(model, layers, INT, "2", 1, 1024, NULL, "number of transformer blocks")                      \
    X(model, d_model, INT, "64", 1, CFG_INT_MAX, NULL, "width of the residual stream")             \
    X(model, heads, INT, "4", 1, CFG_INT_MAX, NULL, "attention heads (must divide d_model)")       \
    X(model, vocab, INT, "256", 2, 65536, NULL,                                                    \
      "vocabulary size (token ids are stored as uint16)")                                          \
    X(model, padded_vocab, INT, "0", 0, CFG_INT_MAX, NULL,                                         \
      "embedding rows; 0 = vocab rounded up to a multiple of 128")                                 \
    X(model, context, INT, "64", 1, CFG_INT_MAX, NULL, "maximum sequence length (positions)")      \
    X(model, init, STRING, "random", 1, 0, NULL,                                                   \
      "initial weights: random, llmc:PATH (an llm.c checkpoint or raw weights) or "                \
      "safetensors:PATH (a file, a transformers checkpoint's directory or sharded index)")         \
    X(model, experts, INT, "0", 0, 65536, NULL,                                                    \
      "mixture of experts: experts per MoE block (0 = dense MLP everywhere)")                      \
    X(model, moe_every, INT, "1", 1, 1024, NULL,                                                   \
      "blocks 0, moe_every, 2 moe_every, ... are MoE blocks")                                      \
    X(model, expert_hidden, INT, "0", 0, CFG_INT_MAX, NULL,                                        \
      "width of each expert's hidden layer (0 = 4 d_model)")                                       \
    X(model, top_k, INT, "2", 1, 65536, NULL, "experts each token is routed to")                   \
    X(model, aux_loss_coeff, FLOAT, "0", 0, CFG_FLT_MAX, NULL,                                     \
      "load-balancing loss coefficient (Switch/GShard)")                                           \
    X(model, z_loss_coeff, FLOAT, "0", 0, CFG_FLT_MAX, NULL, "router z-loss coefficient")          \
    X(model, capacity_factor, FLOAT, "0", 0, CFG_FLT_MAX, NULL,                                    \
      "0 = never drop; else each expert takes at most capacity_factor * tokens * top_k / experts " \
      "rows of a rank's micro-batch")                                                              \
    X(model, drop_policy, ENUM, "probs", 1, 0, "probs|position",                                   \
      "which rows an expert over capacity keeps: the most probable or the first")                  \
    X(data, source, STRING, "synthetic", 1, 0, NULL,                                               \
      "synthetic, text:PATH (bytes) or tokens:PATH (llm.c token file)")                            \
    X(data, shuffle, BOOL, "false", 1, 0, NULL, "permute window order every epoch")                \
    X(data, synthetic_tokens, INT, "1048576", 1024, 1e9, NULL, "length of the synthetic corpus")   \
    X(data, synthetic_branching, INT, "4", 1, 64, NULL,                                            \
      "successors per state of the synthetic Markov chain")                                        \
    X(data, ignore_token, INT, "-1", -1, 65535, NULL,                                              \
      "targets equal to this id are masked: no loss, no gradient (-1 = none)")                     \
    X(data, val_source, STRING, "", 1, 0, NULL,                                                    \
      "held-out data for [train] eval_every (the forms of source); empty = none")                  \
    X(data, split, FLOAT, "0", 0, 0.99, NULL,                                                      \
      "hold out the last fraction of source as the held-out data (0 < split < 1); 0 = none")       \
    X(train, eval_every, INT, "0", 0, CFG_I64_MAX, NULL,                                           \
      "steps between held-out losses (forward only, the same mesh); 0 = never")                    \
    X(train, sample_every, INT, "0", 0, CFG_I64_MAX, NULL,                                         \
      "steps between samples of text printed by rank 0 (the model whole on it); 0 = never")        \
    X(train, sample_tokens, INT, "64", 1, 1e5, NULL, "tokens of each sample (sample_every)")       \
    X(data, tokenizer, STRING, "", 1, 0, NULL,                                                     \
      "an llm.c tokenizer file to print samples as text; empty = bytes or token ids")              \
    X(train, eval_batches, INT, "4", 1, 1e6, NULL,                                                 \
      "global batches of held-out data per evaluation (the same ones each time)")                  \
    X(data, epochs, INT, "0", 0, CFG_I64_MAX, NULL,                                                \
      "passes over the data before training stops cleanly (0 = wrap around forever)")              \
    X(train, steps, INT, "20", 0, CFG_I64_MAX, NULL, "optimizer steps to run")                     \
    X(train, seq_len, INT, "0", 0, CFG_INT_MAX, NULL, "tokens per sequence; 0 = context")          \
    X(train, micro_batch, INT, "4", 1, CFG_INT_MAX, NULL, "sequences per micro-batch per rank")    \
    X(train, global_batch, INT, "0", 0, CFG_INT_MAX, NULL,                                         \
      "sequences per step; 0 = micro_batch x data-parallel size")                                  \
    X(train, lr, FLOAT, "1e-3", 0, CFG_FLT_MAX, NULL, "peak learning rate")                        \
    X(train, warmup, INT, "0", 0, CFG_I64_MAX, NULL, "linear warm-up steps")                       \
    X(train, min_lr, FLOAT, "0", 0, CFG_FLT_MAX, NULL,                                             \
      "learning rate at the end of the cosine decay")                                              \
    X(train, decay_steps, INT, "0", 0, CFG_I64_MAX, NULL, "cosine decay length; 0 = steps")        \
    X(train, beta1, FLOAT, "0.9", 0, CFG_BELOW_ONE, NULL, "AdamW first-moment decay")              \
    X(train, beta2, FLOAT, "0.95", 0, CFG_BELOW_ONE, NULL, "AdamW second-moment decay")            \
    X(train, eps, FLOAT, "1e-8", CFG_POSITIVE, CFG_FLT_MAX, NULL, "AdamW epsilon")                 \
    X(train, weight_decay, FLOAT, "0.1", 0, CFG_FLT_MAX, NULL, "AdamW decoupled weight decay")     \
    X(train, grad_clip, FLOAT, "1.0", 0, CFG_FLT_MAX, NULL, "global gradient-norm clip; 0 = off")  \
    X(train, seed, INT, "1337", 0, CFG_I64_MAX, NULL, "seed of every random stream")               \
    X(train, dtype, ENUM, "fp32", 1, 0, "fp32|bf16", "compute precision")                          \
    X(train, partial_dtype, ENUM, "f32", 1, 0, "f32|bf16",                                         \
      "bf16 runs: the type partial sums and activation gradients cross the model's axes in "       \
      "(tensor and sequence parallelism, the experts' rows); bf16 halves those bytes and "         \
      "rounds them")                                                                               \
    X(train, device, ENUM, "cpu", 1, 0, "cpu|cuda", "where the kernels run")                       \
    X(train, threads, INT, "0", 0, 4096, NULL,                                                     \
      "CPU threads per rank; 0 = OMP_NUM_THREADS when set, else cores / ranks on the node")        \
    X(train, metrics, STRING, "", 1, 0, NULL, "JSON-lines metrics file; empty = none")             \
    X(train, trace, STRING, "", 1, 0, NULL, "trace file; empty = none")                            \
    X(train, summary, STRING, "", 1, 0, NULL,                                                      \
      "JSON file written at the end: every rank's memory by category and mean step and "           \
      "compute times (tessera verify reads it); empty = none")                                     \
    X(train, checkpoint_dir, STRING, "", 1, 0, NULL, "checkpoint directory; empty = none")         \
    X(train, checkpoint_every, INT, "0", 0, CFG_I64_MAX, NULL,                                     \
      "steps between checkpoints; 0 = only at the end")                                            \
    X(train, checkpoint_async, BOOL, "false", 1, 0, NULL,                                          \
      "copy each checkpoint's shards to host memory and write them in a background thread "        \
      "while training goes on")                                                                    \
    X(train, checkpoint_timeout_s, FLOAT, "1800", CFG_POSITIVE, 604800, NULL,                      \
      "seconds a save waits for its slowest rank to write (or rank 0 to publish), and a load "     \
      "for its slowest reader, before the job ends naming that rank; [comm] timeout_s does "       \
      "not bound these waits")                                                                     \
    X(train, resume, ENUM, "no", 1, 0, "no|auto", "auto = resume from the latest checkpoint")      \
    X(train, log_every, INT, "1", 1, CFG_INT_MAX, NULL, "steps between progress lines")            \
    X(train, recompute, ENUM, "none", 1, 0, TS_RECOMPUTE_CHOICES,                                  \
      "activation recomputation: selective recomputes each block's attention core in its "         \
      "backward, full keeps only each block's input and runs its forward again")                   \
    X(train, recompute_layers, INT, "0", 0, 1024, NULL,                                            \
      "uniform: blocks per recomputed group (0 = 1); block: blocks recomputed per pipeline "       \
      "chunk (0 = all)")                                                                           \
    X(train, recompute_method, ENUM, "uniform", 1, 0, "uniform|block",                             \
      "uniform: every block, full recomputation in groups of recompute_layers; block: only the "   \
      "first recompute_layers blocks of each chunk (Megatron-LM's methods)")                       \
    X(train, max_skipped_steps, INT, "3", 1, 1e6, NULL,                                            \
      "steps in a row whose loss or gradient norm is not finite (each skipped, not applied) "      \
      "before the run stops")                                                                      \
    X(parallel, plugins, STRING, "", 1, 0, NULL, "comma-separated plugins to load (dp, tp, ...)")  \
    X(parallel, order, STRING, TS_MESH_DEFAULT_ORDER, 1, 0, NULL,                                  \
      "mesh axes, fastest-varying first (not given: the standard ones, a plugin's own where "      \
      "it placed them)")                                                                           \
    X(parallel, plugin_path, STRING, "", 1, 0, NULL,                                               \
      "directory of tessera-<name>.so; empty = the built-in one")                                  \
    X(comm, timeout_s, FLOAT, "300", CFG_POSITIVE, CFG_ANY_MAX, NULL,                              \
      "seconds a collective may wait before the job fails")                                        \
    X(cluster, gpus_per_node, INT, "1", 1, 1 << 20, NULL,                                          \
      "devices (GPUs, or ranks) per node; required")                                               \
    X(cluster, nodes, INT, "1", 1, 1 << 20, NULL, "nodes; required")                               \
    X(cluster, cores_per_node, INT, "0", 0, 1 << 20, NULL,                                         \
      "CPU cores a node's ranks share (CPU ranks; calibrate sets it when ranks outnumber "         \
      "cores): a rank idling in the pipeline lends its share to the busy ones; 0: a device "       \
      "each")                                                                                      \
    X(cluster, memory_gb, FLOAT, "1", 1e-6, 1e6, NULL,                                             \
      "memory of one device, GB (1e9 bytes); required")                                            \
    X(cluster, memory_reserve_gb, FLOAT, "0", 0, 1e6, NULL,                                        \
      "memory of each device a run cannot use (the runtime's own, fragmentation), GB")             \
    X(cluster, flops_fp32, FLOAT, "1e12", 1e6, 1e19, NULL,                                         \
      "peak FLOP/s of one device's f32 GEMMs; required")                                           \
    X(cluster, flops_bf16, FLOAT, "1e12", 1e6, 1e19, NULL,                                         \
      "peak FLOP/s of one device's bf16 GEMMs (dense); required")                                  \
    X(cluster, matmul_efficiency, FLOAT, "1", 1e-3, 1, NULL,                                       \
      "fraction of the peak a large GEMM reaches")                                                 \
    X(cluster, attention_efficiency, FLOAT, "1", 1e-3, 16, NULL,                                   \
      "the attention products' rate over flops_bf16 (default: matmul_efficiency; above 1 where "   \
      "attention outruns the bf16 GEMM, as calibrated CPU kernels may)")                           \
    X(cluster, attention_block_efficiency, FLOAT, "1", 1e-3, 16, NULL,                             \
      "ring attention's blocks' rate (cp) over flops_bf16 (default: attention_efficiency)")        \
    X(cluster, memory_bandwidth_gbs, FLOAT, "1", 1e-3, 1e6, NULL,                                  \
      "GB/s a memory-bound kernel streams on one device; required")                                \
    X(cluster, comm_overlap, BOOL, "true", 1, 0, NULL,                                             \
      "communication progresses beside the kernels (NCCL's own kernels); false: only "             \
      "while a rank waits for it (MPI on CPUs), so none is hidden")                                \
    X(cluster, kernel_us, FLOAT, "0", 0, 1e6, NULL,                                                \
      "fixed microseconds each kernel costs (its launch)")                                         \
    X(cluster, intra_bandwidth_gbs, FLOAT, "1", 1e-6, 1e9, NULL,                                   \
      "bus bandwidth of a collective inside a node, GB/s per device; required")                    \
    X(cluster, intra_latency_us, FLOAT, "0", 0, 1e8, NULL,                                         \
      "latency of a collective inside a node, microseconds; required")                             \
    X(cluster, inter_bandwidth_gbs, FLOAT, "1", 1e-6, 1e9, NULL,                                   \
      "bus bandwidth of a collective across nodes, GB/s per device; required")                     \
    X(cluster, inter_latency_us, FLOAT, "0", 0, 1e8, NULL,                                         \
      "latency of a collective across nodes, microseconds; required")

#define TS_RUN_CTYPE_INT int64_t
#define TS_RUN_CTYPE_FLOAT double
#define TS_RUN_CTYPE_BOOL int
#define TS_RUN_CTYPE_STRING const char *
#define TS_RUN_CTYPE_ENUM const char *

/* The run's configuration, typed: one field per key of TS_RUN_KEYS. The
 * strings are borrowed from the ts_config it was filled from. */
typedef struct ts_run_config {
#define TS_RUN_FIELD_(sec, key, type, def, min, max, choices, help) TS_RUN_CTYPE_##type sec##_##key;
    TS_RUN_KEYS(TS_RUN_FIELD_)
#undef TS_RUN_FIELD_
} ts_run_config;

/* Fills *out from `cfg` (validated against a schema holding the core's
 * keys): each key's value, or its default. An INT given as "auto" is -1. */
void ts_run_config_fill(const ts_config *cfg, ts_run_config *out);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_RUN_CONFIG_H */
