/*
 * config.c — the INI configuration (see config.h for the contract): the key
 * schema, strict parsing of one file with inih, `--set` overrides, validation
 * of every entry against the schema and typed look-ups.
 *
 * inih is built without INI_HANDLER_LINENO, so the file is read into memory
 * and handed to ini_parse_stream one line at a time by our own reader, which
 * counts lines: while the handler runs, the current line is the last one read.
 * The reader also strips leading whitespace (so an indented line is never
 * taken as an inih multi-line continuation), rejects lines longer than inih's
 * buffer and text after a section header's ']', and records every section
 * header in file order (inih reports sections only through their keys).
 *
 * What it does not do: cross-key rules (their owners check them, naming the
 * place with ts_config_where), or merge several files.
 */
#include "config.h"

#include "file.h"         /* ts_file_open_read */
#include "tessera/mesh.h" /* TS_MESH_DEFAULT_ORDER, the standard axes' order */

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <ini.h> /* ini_parse_stream, INI_MAX_LINE */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h> /* strcasecmp */

#define CFG_MSG 1024

typedef struct cfg_entry {
    char *section, *key, *value;
    int line;     /* line in the file; 0 when from --set        */
    int from_set; /* 1 if the value came from ts_config_set       */
} cfg_entry;

typedef struct cfg_section {
    char *name;
    int line; /* line of its first header; 0 when only named by --set */
} cfg_section;

struct ts_config {
    char *path;
    int loaded;
    ts_key_spec *specs;
    int nspecs, capspecs;
    cfg_entry *entries;
    int nentries, capentries;
    cfg_section *sections;
    int nsections, capsections;
};

/* ------------------------------------------------------------------------- */
/* small helpers                                                              */

static char *cfg_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static char *cfg_strndup(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* A copy of s with surrounding whitespace removed. */
static char *cfg_trimdup(const char *s) {
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    return cfg_strndup(s, n);
}

static int cfg_grow(void **arr, int *cap, int need, size_t elem) {
    if (need <= *cap) return 1;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p) return 0;
    *arr = p;
    *cap = nc;
    return 1;
}

static ts_status cfg_nomem(void) {
    return ts_error(TS_ERR_NOMEM, "config: out of memory");
}

/* 1 if `word` is one of the '|'-separated words of `choices`. */
static int cfg_choice_has(const char *choices, const char *word) {
    if (!choices) return 0;
    size_t wn = strlen(word);
    const char *p = choices;
    for (;;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == wn && strncmp(p, word, n) == 0) return 1;
        if (!bar) return 0;
        p = bar + 1;
    }
}

/* "a|b|c" as "a, b, c" into buf. */
static void cfg_choices_list(const char *choices, char *buf, size_t size) {
    size_t j = 0;
    for (const char *p = choices ? choices : ""; *p && j + 3 < size; p++) {
        if (*p == '|') {
            buf[j++] = ',';
            buf[j++] = ' ';
        } else {
            buf[j++] = *p;
        }
    }
    buf[j] = '\0';
}

/* ------------------------------------------------------------------------- */
/* value parsing                                                              */

/* Each returns NULL on success or a short reason. */
static const char *cfg_parse_int(const char *s, int64_t *out) {
    if (!*s) return "not an integer";
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || isspace((unsigned char)*s)) return "not an integer";
    if (errno == ERANGE) return "not a 64-bit integer";
    *out = (int64_t)v;
    return NULL;
}

static const char *cfg_parse_float(const char *s, double *out) {
    if (!*s) return "not a number";
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || isspace((unsigned char)*s)) return "not a number";
    if (!isfinite(v)) return "not a finite number";
    *out = v;
    return NULL;
}

static const char *cfg_parse_bool(const char *s, int *out) {
    static const char *yes[] = {"true", "yes", "on", "1"};
    static const char *no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = 1;
            return NULL;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = 0;
            return NULL;
        }
    }
    return "not a boolean (expected true/false, yes/no, on/off or 1/0)";
}

/* Shortest "%g" text that reads back as v. */
static void cfg_fmt_num(double v, char *buf, size_t size) {
    if (isinf(v)) {
        snprintf(buf, size, "%sinf", v < 0 ? "-" : "");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e18) {
        snprintf(buf, size, "%.0f", v == 0 ? 0.0 : v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return;
    }
}

/* A bound written as an exclusive one when the float next to it (toward the
 * outside of the range) is written shorter: min = DBL_TRUE_MIN reads "> 0",
 * max = 1 - 2^-53 reads "< 1". Either form is exact. */
static int cfg_fmt_bound(double v, double toward, char *buf, size_t size) {
    cfg_fmt_num(v, buf, size);
    if (isinf(v)) return 0;
    char alt[64];
    cfg_fmt_num(nextafter(v, toward), alt, sizeof alt);
    if (strlen(alt) >= strlen(buf)) return 0;
    snprintf(buf, size, "%s", alt);
    return 1;
}

static void cfg_fmt_range(const ts_key_spec *sp, char *buf, size_t size) {
    char lo[64], hi[64];
    int lo_ex = cfg_fmt_bound(sp->min, -INFINITY, lo, sizeof lo);
    int hi_ex = cfg_fmt_bound(sp->max, INFINITY, hi, sizeof hi);
    if (isinf(sp->max) && sp->max > 0)
        snprintf(buf, size, "%s %s", lo_ex ? ">" : ">=", lo);
    else if (isinf(sp->min) && sp->min < 0)
        snprintf(buf, size, "%s %s", hi_ex ? "<" : "<=", hi);
    else
        snprintf(buf, size, "%s%s, %s%s", lo_ex ? "(" : "[", lo, hi, hi_ex ? ")" : "]");
}

static int cfg_has_range(const ts_key_spec *sp) {
    return sp->min <= sp->max;
}

/* Checks `value` against the spec. Returns 1 if valid; otherwise 0 with a
 * description such as `"abc": not an integer` written to why. */
static int cfg_check_value(const ts_key_spec *sp, const char *value, char *why, size_t size) {
    const char *err = NULL;
    double num = 0;
    switch (sp->type) {
    case TS_KEY_INT: {
        if (cfg_choice_has(sp->choices, value)) return 1;
        int64_t v;
        err = cfg_parse_int(value, &v);
        if (err && sp->choices) {
            char list[256];
            cfg_choices_list(sp->choices, list, sizeof list);
            snprintf(why, size, "\"%s\": %s (or %s)", value, err, list);
            return 0;
        }
        num = (double)v;
        break;
    }
    case TS_KEY_FLOAT: err = cfg_parse_float(value, &num); break;
    case TS_KEY_BOOL: {
        int b;
        err = cfg_parse_bool(value, &b);
        break;
    }
    case TS_KEY_STRING: return 1;
    case TS_KEY_ENUM:
        if (cfg_choice_has(sp->choices, value)) return 1;
        {
            char list[256];
            cfg_choices_list(sp->choices, list, sizeof list);
            snprintf(why, size, "\"%s\": expected one of %s", value, list);
        }
        return 0;
    default: snprintf(why, size, "unknown key type %d", (int)sp->type); return 0;
    }
    if (err) {
        snprintf(why, size, "\"%s\": %s", value, err);
        return 0;
    }
    if ((sp->type == TS_KEY_INT || sp->type == TS_KEY_FLOAT) && cfg_has_range(sp) &&
        (num < sp->min || num > sp->max)) {
        char range[160];
        cfg_fmt_range(sp, range, sizeof range);
        snprintf(why, size, "%s: out of range %s", value, range);
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------------- */
/* schema                                                                     */

#define CFG_ANY_MAX INFINITY
#define CFG_INT_MAX 2147483647.0      /* a key stored in an int                  */
#define CFG_I64_MAX 9.2e18            /* below INT64_MAX, exactly representable  */
#define CFG_FLT_MAX 3.4e38            /* a key stored in a float (< FLT_MAX)     */
#define CFG_POSITIVE DBL_TRUE_MIN     /* min of a range "> 0" */
#define CFG_BELOW_ONE (1.0 - 0x1p-53) /* max of a range "< 1" */

static const ts_key_spec cfg_core_keys[] = {
    /* section, name, type, default, min, max, choices, help */
    {"model", "arch", TS_KEY_ENUM, "gpt2", 1, 0, "gpt2", "model architecture"},
    {"model", "layers", TS_KEY_INT, "2", 1, 1024, NULL, "number of transformer blocks"},
    {"model", "d_model", TS_KEY_INT, "64", 1, CFG_INT_MAX, NULL, "width of the residual stream"},
    {"model", "heads", TS_KEY_INT, "4", 1, CFG_INT_MAX, NULL,
     "attention heads (must divide d_model)"},
    {"model", "vocab", TS_KEY_INT, "256", 2, 65536, NULL,
     "vocabulary size (token ids are stored as uint16)"},
    {"model", "padded_vocab", TS_KEY_INT, "0", 0, CFG_INT_MAX, NULL,
     "embedding rows; 0 = vocab rounded up to a multiple of 128"},
    {"model", "context", TS_KEY_INT, "64", 1, CFG_INT_MAX, NULL,
     "maximum sequence length (positions)"},
    {"model", "init", TS_KEY_STRING, "random", 1, 0, NULL,
     "initial weights: random, llmc:PATH (an llm.c checkpoint or raw weights) or "
     "safetensors:PATH (a file, a transformers checkpoint's directory or sharded index)"},
    {"model", "experts", TS_KEY_INT, "0", 0, 65536, NULL,
     "mixture of experts: experts per MoE block (0 = dense MLP everywhere)"},
    {"model", "moe_every", TS_KEY_INT, "1", 1, 1024, NULL,
     "blocks 0, moe_every, 2 moe_every, ... are MoE blocks"},
    {"model", "expert_hidden", TS_KEY_INT, "0", 0, CFG_INT_MAX, NULL,
     "width of each expert's hidden layer (0 = 4 d_model)"},
    {"model", "top_k", TS_KEY_INT, "2", 1, 65536, NULL, "experts each token is routed to"},
    {"model", "aux_loss_coeff", TS_KEY_FLOAT, "0", 0, CFG_FLT_MAX, NULL,
     "load-balancing loss coefficient (Switch/GShard)"},
    {"model", "z_loss_coeff", TS_KEY_FLOAT, "0", 0, CFG_FLT_MAX, NULL, "router z-loss coefficient"},
    {"model", "capacity_factor", TS_KEY_FLOAT, "0", 0, CFG_FLT_MAX, NULL,
     "0 = never drop; else each expert takes at most capacity_factor * tokens * top_k / experts "
     "rows of a rank's micro-batch"},
    {"model", "drop_policy", TS_KEY_ENUM, "probs", 1, 0, "probs|position",
     "which rows an expert over capacity keeps: the most probable or the first"},

    {"data", "source", TS_KEY_STRING, "synthetic", 1, 0, NULL,
     "synthetic, text:PATH (bytes) or tokens:PATH (llm.c token file)"},
    {"data", "shuffle", TS_KEY_BOOL, "false", 1, 0, NULL, "permute window order every epoch"},
    {"data", "synthetic_tokens", TS_KEY_INT, "1048576", 1024, 1e9, NULL,
     "length of the synthetic corpus"},
    {"data", "synthetic_branching", TS_KEY_INT, "4", 1, 64, NULL,
     "successors per state of the synthetic Markov chain"},
    {"data", "ignore_token", TS_KEY_INT, "-1", -1, 65535, NULL,
     "targets equal to this id are masked: no loss, no gradient (-1 = none)"},
    {"data", "val_source", TS_KEY_STRING, "", 1, 0, NULL,
     "held-out data for [train] eval_every (the forms of source); empty = none"},
    {"data", "split", TS_KEY_FLOAT, "0", 0, 0.99, NULL,
     "hold out the last fraction of source as the held-out data (0 < split < 1); 0 = none"},
    {"train", "eval_every", TS_KEY_INT, "0", 0, CFG_I64_MAX, NULL,
     "steps between held-out losses (forward only, the same mesh); 0 = never"},
    {"train", "sample_every", TS_KEY_INT, "0", 0, CFG_I64_MAX, NULL,
     "steps between samples of text printed by rank 0 (the model whole on it); 0 = never"},
    {"train", "sample_tokens", TS_KEY_INT, "64", 1, 1e5, NULL,
     "tokens of each sample (sample_every)"},
    {"data", "tokenizer", TS_KEY_STRING, "", 1, 0, NULL,
     "an llm.c tokenizer file to print samples as text; empty = bytes or token ids"},
    {"train", "eval_batches", TS_KEY_INT, "4", 1, 1e6, NULL,
     "global batches of held-out data per evaluation (the same ones each time)"},
    {"data", "epochs", TS_KEY_INT, "0", 0, CFG_I64_MAX, NULL,
     "passes over the data before training stops cleanly (0 = wrap around forever)"},

    {"train", "steps", TS_KEY_INT, "20", 0, CFG_I64_MAX, NULL, "optimizer steps to run"},
    {"train", "seq_len", TS_KEY_INT, "0", 0, CFG_INT_MAX, NULL, "tokens per sequence; 0 = context"},
    {"train", "micro_batch", TS_KEY_INT, "4", 1, CFG_INT_MAX, NULL,
     "sequences per micro-batch per rank"},
    {"train", "global_batch", TS_KEY_INT, "0", 0, CFG_INT_MAX, NULL,
     "sequences per step; 0 = micro_batch x data-parallel size"},
    {"train", "lr", TS_KEY_FLOAT, "1e-3", 0, CFG_FLT_MAX, NULL, "peak learning rate"},
    {"train", "warmup", TS_KEY_INT, "0", 0, CFG_I64_MAX, NULL, "linear warm-up steps"},
    {"train", "min_lr", TS_KEY_FLOAT, "0", 0, CFG_FLT_MAX, NULL,
     "learning rate at the end of the cosine decay"},
    {"train", "decay_steps", TS_KEY_INT, "0", 0, CFG_I64_MAX, NULL,
     "cosine decay length; 0 = steps"},
    {"train", "beta1", TS_KEY_FLOAT, "0.9", 0, CFG_BELOW_ONE, NULL, "AdamW first-moment decay"},
    {"train", "beta2", TS_KEY_FLOAT, "0.95", 0, CFG_BELOW_ONE, NULL, "AdamW second-moment decay"},
    {"train", "eps", TS_KEY_FLOAT, "1e-8", CFG_POSITIVE, CFG_FLT_MAX, NULL, "AdamW epsilon"},
    {"train", "weight_decay", TS_KEY_FLOAT, "0.1", 0, CFG_FLT_MAX, NULL,
     "AdamW decoupled weight decay"},
    {"train", "grad_clip", TS_KEY_FLOAT, "1.0", 0, CFG_FLT_MAX, NULL,
     "global gradient-norm clip; 0 = off"},
    {"train", "seed", TS_KEY_INT, "1337", 0, CFG_I64_MAX, NULL, "seed of every random stream"},
    {"train", "dtype", TS_KEY_ENUM, "fp32", 1, 0, "fp32|bf16", "compute precision"},
    {"train", "partial_dtype", TS_KEY_ENUM, "f32", 1, 0, "f32|bf16",
     "bf16 runs: the type partial sums and activation gradients cross the model's axes in "
     "(tensor and sequence parallelism, the experts' rows); bf16 halves those bytes and "
     "rounds them"},
    {"train", "device", TS_KEY_ENUM, "cpu", 1, 0, "cpu|cuda", "where the kernels run"},
    {"train", "threads", TS_KEY_INT, "0", 0, 4096, NULL,
     "CPU threads per rank; 0 = OMP_NUM_THREADS when set, else cores / ranks on the node"},
    {"train", "metrics", TS_KEY_STRING, "", 1, 0, NULL, "JSON-lines metrics file; empty = none"},
    {"train", "trace", TS_KEY_STRING, "", 1, 0, NULL, "trace file; empty = none"},
    {"train", "summary", TS_KEY_STRING, "", 1, 0, NULL,
     "JSON file written at the end: every rank's memory by category and mean step and "
     "compute times (tessera verify reads it); empty = none"},
    {"train", "checkpoint_dir", TS_KEY_STRING, "", 1, 0, NULL,
     "checkpoint directory; empty = none"},
    {"train", "checkpoint_every", TS_KEY_INT, "0", 0, CFG_I64_MAX, NULL,
     "steps between checkpoints; 0 = only at the end"},
    {"train", "checkpoint_async", TS_KEY_BOOL, "false", 1, 0, NULL,
     "copy each checkpoint's shards to host memory and write them in a background thread "
     "while training goes on"},
    {"train", "checkpoint_timeout_s", TS_KEY_FLOAT, "1800", CFG_POSITIVE, 604800, NULL,
     "seconds a save waits for its slowest rank to write (or rank 0 to publish), and a load "
     "for its slowest reader, before the job ends naming that rank; [comm] timeout_s does "
     "not bound these waits"},
    {"train", "resume", TS_KEY_ENUM, "no", 1, 0, "no|auto",
     "auto = resume from the latest checkpoint"},
    {"train", "log_every", TS_KEY_INT, "1", 1, CFG_INT_MAX, NULL, "steps between progress lines"},
    {"train", "recompute", TS_KEY_ENUM, "none", 1, 0, "none|selective|full",
     "activation recomputation: selective recomputes each block's attention core in its "
     "backward, full keeps only each block's input and runs its forward again"},
    {"train", "recompute_layers", TS_KEY_INT, "0", 0, 1024, NULL,
     "uniform: blocks per recomputed group (0 = 1); block: blocks recomputed per pipeline "
     "chunk (0 = all)"},
    {"train", "recompute_method", TS_KEY_ENUM, "uniform", 1, 0, "uniform|block",
     "uniform: every block, full recomputation in groups of recompute_layers; block: only the "
     "first recompute_layers blocks of each chunk (Megatron-LM's methods)"},
    {"train", "max_skipped_steps", TS_KEY_INT, "3", 1, 1e6, NULL,
     "steps in a row whose loss or gradient norm is not finite (each skipped, not applied) "
     "before the run stops"},

    {"parallel", "plugins", TS_KEY_STRING, "", 1, 0, NULL,
     "comma-separated plugins to load (dp, tp, ...)"},
    {"parallel", "order", TS_KEY_STRING, TS_MESH_DEFAULT_ORDER, 1, 0, NULL,
     "mesh axes, fastest-varying first (not given: the standard ones, a plugin's own where "
     "it placed them)"},
    {"parallel", "plugin_path", TS_KEY_STRING, "", 1, 0, NULL,
     "directory of tessera-<name>.so; empty = the built-in one"},

    {"comm", "timeout_s", TS_KEY_FLOAT, "300", CFG_POSITIVE, CFG_ANY_MAX, NULL,
     "seconds a collective may wait before the job fails"},

    /* The machine `tessera plan --search` predicts for (docs/search.md);
     * training ignores it. The keys marked required are required there.
     * Each rate, size and time has a range a real machine lies in, so that
     * every prediction made of them is finite (1 MFLOP/s .. 10 EFLOP/s a
     * device, a link's 1 kB/s up to 1e9 GB/s: a collective of one rank, as
     * calibrated, moves nothing; latencies up to 100 s); the devices,
     * nodes x gpus_per_node, are checked by the search (apps/cluster.c). */
    {"cluster", "gpus_per_node", TS_KEY_INT, "1", 1, 1 << 20, NULL,
     "devices (GPUs, or ranks) per node; required"},
    {"cluster", "nodes", TS_KEY_INT, "1", 1, 1 << 20, NULL, "nodes; required"},
    {"cluster", "cores_per_node", TS_KEY_INT, "0", 0, 1 << 20, NULL,
     "CPU cores a node's ranks share (CPU ranks; calibrate sets it when ranks outnumber "
     "cores): a rank idling in the pipeline lends its share to the busy ones; 0: a device "
     "each"},
    {"cluster", "memory_gb", TS_KEY_FLOAT, "1", 1e-6, 1e6, NULL,
     "memory of one device, GB (1e9 bytes); required"},
    {"cluster", "memory_reserve_gb", TS_KEY_FLOAT, "0", 0, 1e6, NULL,
     "memory of each device a run cannot use (the runtime's own, fragmentation), GB"},
    {"cluster", "flops_fp32", TS_KEY_FLOAT, "1e12", 1e6, 1e19, NULL,
     "peak FLOP/s of one device's f32 GEMMs; required"},
    {"cluster", "flops_bf16", TS_KEY_FLOAT, "1e12", 1e6, 1e19, NULL,
     "peak FLOP/s of one device's bf16 GEMMs (dense); required"},
    {"cluster", "matmul_efficiency", TS_KEY_FLOAT, "1", 1e-3, 1, NULL,
     "fraction of the peak a large GEMM reaches"},
    {"cluster", "attention_efficiency", TS_KEY_FLOAT, "1", 1e-3, 16, NULL,
     "the attention products' rate over flops_bf16 (default: matmul_efficiency; above 1 where "
     "attention outruns the bf16 GEMM, as calibrated CPU kernels may)"},
    {"cluster", "attention_block_efficiency", TS_KEY_FLOAT, "1", 1e-3, 16, NULL,
     "ring attention's blocks' rate (cp) over flops_bf16 (default: attention_efficiency)"},
    {"cluster", "memory_bandwidth_gbs", TS_KEY_FLOAT, "1", 1e-3, 1e6, NULL,
     "GB/s a memory-bound kernel streams on one device; required"},
    {"cluster", "comm_overlap", TS_KEY_BOOL, "true", 1, 0, NULL,
     "communication progresses beside the kernels (NCCL's own kernels); false: only "
     "while a rank waits for it (MPI on CPUs), so none is hidden"},
    {"cluster", "kernel_us", TS_KEY_FLOAT, "0", 0, 1e6, NULL,
     "fixed microseconds each kernel costs (its launch)"},
    {"cluster", "intra_bandwidth_gbs", TS_KEY_FLOAT, "1", 1e-6, 1e9, NULL,
     "bus bandwidth of a collective inside a node, GB/s per device; required"},
    {"cluster", "intra_latency_us", TS_KEY_FLOAT, "0", 0, 1e8, NULL,
     "latency of a collective inside a node, microseconds; required"},
    {"cluster", "inter_bandwidth_gbs", TS_KEY_FLOAT, "1", 1e-6, 1e9, NULL,
     "bus bandwidth of a collective across nodes, GB/s per device; required"},
    {"cluster", "inter_latency_us", TS_KEY_FLOAT, "0", 0, 1e8, NULL,
     "latency of a collective across nodes, microseconds; required"},
#define CFG_CLUSTER_OP(link, op)                                                                   \
    {"cluster",                                                                                    \
     link "_" op "_bandwidth_gbs",                                                                 \
     TS_KEY_FLOAT,                                                                                 \
     "1",                                                                                          \
     1e-6,                                                                                         \
     1e9,                                                                                          \
     NULL,                                                                                         \
     "this collective's bus bandwidth " link "-node, GB/s (default: " link "_bandwidth_gbs)"},     \
    {                                                                                              \
        "cluster", link "_" op "_latency_us", TS_KEY_FLOAT, "0", 0, 1e8, NULL,                     \
            "this collective's latency " link "-node, us (default: " link "_latency_us)"           \
    }
    CFG_CLUSTER_OP("intra", "all_reduce"),
    CFG_CLUSTER_OP("intra", "all_gather"),
    CFG_CLUSTER_OP("intra", "reduce_scatter"),
    CFG_CLUSTER_OP("intra", "all_to_all"),
    CFG_CLUSTER_OP("intra", "broadcast"),
    CFG_CLUSTER_OP("intra", "send_recv"),
    CFG_CLUSTER_OP("inter", "all_reduce"),
    CFG_CLUSTER_OP("inter", "all_gather"),
    CFG_CLUSTER_OP("inter", "reduce_scatter"),
    CFG_CLUSTER_OP("inter", "all_to_all"),
    CFG_CLUSTER_OP("inter", "broadcast"),
    CFG_CLUSTER_OP("inter", "send_recv"),
#undef CFG_CLUSTER_OP
};

const ts_key_spec *ts_config_core_keys(int *n) {
    if (n) *n = (int)(sizeof cfg_core_keys / sizeof cfg_core_keys[0]);
    return cfg_core_keys;
}

static const ts_key_spec *cfg_find_spec(const ts_config *cfg, const char *section,
                                        const char *key) {
    for (int i = 0; i < cfg->nspecs; i++)
        if (strcmp(cfg->specs[i].section, section) == 0 && strcmp(cfg->specs[i].name, key) == 0)
            return &cfg->specs[i];
    return NULL;
}

static int cfg_section_known(const ts_config *cfg, const char *section) {
    for (int i = 0; i < cfg->nspecs; i++)
        if (strcmp(cfg->specs[i].section, section) == 0) return 1;
    return 0;
}

static void cfg_free_spec(ts_key_spec *sp) {
    free((char *)sp->section);
    free((char *)sp->name);
    free((char *)sp->def);
    free((char *)sp->choices);
    free((char *)sp->help);
}

ts_status ts_config_create(ts_config **out) {
    ts_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg) return cfg_nomem();
    cfg->path = cfg_strdup("");
    if (!cfg->path) {
        free(cfg);
        return cfg_nomem();
    }
    *out = cfg;
    return TS_OK;
}

void ts_config_destroy(ts_config *cfg) {
    if (!cfg) return;
    for (int i = 0; i < cfg->nspecs; i++)
        cfg_free_spec(&cfg->specs[i]);
    for (int i = 0; i < cfg->nentries; i++) {
        free(cfg->entries[i].section);
        free(cfg->entries[i].key);
        free(cfg->entries[i].value);
    }
    for (int i = 0; i < cfg->nsections; i++)
        free(cfg->sections[i].name);
    free(cfg->specs);
    free(cfg->entries);
    free(cfg->sections);
    free(cfg->path);
    free(cfg);
}

ts_status ts_config_register(ts_config *cfg, const ts_key_spec *specs, int n) {
    for (int i = 0; i < n; i++) {
        const ts_key_spec *sp = &specs[i];
        if (!sp->section || !*sp->section || !sp->name || !*sp->name)
            return ts_error(TS_ERR_INVALID, "config: key spec %d has no section or name", i);
        if (cfg_find_spec(cfg, sp->section, sp->name))
            return ts_error(TS_ERR_INVALID, "config: key [%s] %s is registered twice", sp->section,
                            sp->name);
        for (int j = 0; j < i; j++)
            if (strcmp(specs[j].section, sp->section) == 0 && strcmp(specs[j].name, sp->name) == 0)
                return ts_error(TS_ERR_INVALID, "config: key [%s] %s is registered twice",
                                sp->section, sp->name);
        if ((int)sp->type < TS_KEY_INT || sp->type > TS_KEY_ENUM)
            return ts_error(TS_ERR_INVALID, "config: key [%s] %s has unknown type %d", sp->section,
                            sp->name, (int)sp->type);
        if (sp->type == TS_KEY_INT && sp->choices && strcmp(sp->choices, "auto") != 0)
            return ts_error(TS_ERR_INVALID,
                            "config: integer key [%s] %s has choices \"%s\"; the only word an "
                            "integer key accepts is \"auto\"",
                            sp->section, sp->name, sp->choices);
        if (sp->type == TS_KEY_ENUM && (!sp->choices || !*sp->choices))
            return ts_error(TS_ERR_INVALID, "config: enum key [%s] %s has no choices", sp->section,
                            sp->name);
        char why[CFG_MSG];
        if (sp->def && !cfg_check_value(sp, sp->def, why, sizeof why))
            return ts_error(TS_ERR_INVALID, "config: default of [%s] %s is invalid: %s",
                            sp->section, sp->name, why);
    }
    if (!cfg_grow((void **)&cfg->specs, &cfg->capspecs, cfg->nspecs + n, sizeof *cfg->specs))
        return cfg_nomem();
    for (int i = 0; i < n; i++) {
        ts_key_spec c = specs[i];
        c.section = cfg_strdup(specs[i].section);
        c.name = cfg_strdup(specs[i].name);
        c.def = cfg_strdup(specs[i].def);
        c.choices = cfg_strdup(specs[i].choices);
        c.help = cfg_strdup(specs[i].help ? specs[i].help : "");
        if (!c.section || !c.name || (specs[i].def && !c.def) || (specs[i].choices && !c.choices) ||
            !c.help) {
            cfg_free_spec(&c);
            return cfg_nomem();
        }
        cfg->specs[cfg->nspecs++] = c;
    }
    return TS_OK;
}

/* ------------------------------------------------------------------------- */
/* entries                                                                    */

static cfg_entry *cfg_find_entry(const ts_config *cfg, const char *section, const char *key) {
    for (int i = 0; i < cfg->nentries; i++)
        if (strcmp(cfg->entries[i].section, section) == 0 && strcmp(cfg->entries[i].key, key) == 0)
            return &cfg->entries[i];
    return NULL;
}

static ts_status cfg_add_section(ts_config *cfg, const char *name, int line) {
    for (int i = 0; i < cfg->nsections; i++)
        if (strcmp(cfg->sections[i].name, name) == 0) return TS_OK;
    if (!cfg_grow((void **)&cfg->sections, &cfg->capsections, cfg->nsections + 1,
                  sizeof *cfg->sections))
        return cfg_nomem();
    char *copy = cfg_strdup(name);
    if (!copy) return cfg_nomem();
    cfg->sections[cfg->nsections].name = copy;
    cfg->sections[cfg->nsections].line = line;
    cfg->nsections++;
    return TS_OK;
}

/* Sets or replaces an entry. */
static ts_status cfg_put(ts_config *cfg, const char *section, const char *key, const char *value,
                         int line, int from_set) {
    cfg_entry *e = cfg_find_entry(cfg, section, key);
    char *v = cfg_strdup(value);
    if (!v) return cfg_nomem();
    if (e) {
        free(e->value);
        e->value = v;
        e->line = line;
        e->from_set = from_set;
        return TS_OK;
    }
    if (!cfg_grow((void **)&cfg->entries, &cfg->capentries, cfg->nentries + 1,
                  sizeof *cfg->entries)) {
        free(v);
        return cfg_nomem();
    }
    e = &cfg->entries[cfg->nentries];
    e->section = cfg_strdup(section);
    e->key = cfg_strdup(key);
    e->value = v;
    e->line = line;
    e->from_set = from_set;
    if (!e->section || !e->key) {
        free(e->section);
        free(e->key);
        free(v);
        return cfg_nomem();
    }
    cfg->nentries++;
    return TS_OK;
}

/* ------------------------------------------------------------------------- */
/* loading                                                                    */

typedef struct cfg_reader {
    ts_config *cfg;
    const char *buf, *pos, *end;
    int lineno;         /* lines handed to inih so far = the current line      */
    int err_line;       /* first error found by the reader or the handler      */
    char err[CFG_MSG];  /* its message (without the "file:line: " prefix)      */
    ts_status err_code; /* TS_ERR_CONFIG, or TS_ERR_NOMEM                      */
} cfg_reader;

static void cfg_reader_fail(cfg_reader *r, ts_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cfg_reader_fail(cfg_reader *r, ts_status code, const char *fmt, ...) {
    if (r->err_line) return;
    r->err_line = r->lineno;
    r->err_code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
}

/* Hands inih one physical line, without leading whitespace or line end. */
static char *cfg_read_line(char *str, int num, void *stream) {
    cfg_reader *r = stream;
    if (r->pos >= r->end) return NULL;
    const char *nl = memchr(r->pos, '\n', (size_t)(r->end - r->pos));
    const char *stop = nl ? nl : r->end;
    const char *s = r->pos;
    r->pos = nl ? nl + 1 : r->end;
    r->lineno++;
    if (r->lineno == 1 && stop - s >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3;
    while (s < stop && (*s == ' ' || *s == '\t'))
        s++;
    while (stop > s && (stop[-1] == '\r' || stop[-1] == ' ' || stop[-1] == '\t'))
        stop--;
    size_t n = (size_t)(stop - s);
    if (n + 1 > (size_t)num) {
        cfg_reader_fail(r, TS_ERR_CONFIG, "line is longer than %d characters", num - 1);
        str[0] = '\0'; /* hand inih a blank line */
        return str;
    }
    memcpy(str, s, n);
    str[n] = '\0';
    if (memchr(str, '\0', n)) {
        cfg_reader_fail(r, TS_ERR_CONFIG, "line contains a NUL byte");
        str[0] = '\0';
        return str;
    }
    if (str[0] == '[') {
        char *close = strchr(str, ']');
        if (close) {
            const char *rest = close + 1;
            while (*rest == ' ' || *rest == '\t')
                rest++;
            if (*rest && *rest != ';' && *rest != '#') {
                cfg_reader_fail(r, TS_ERR_CONFIG, "unexpected text '%s' after section header",
                                rest);
                return str;
            }
            char *name = cfg_strndup(str + 1, (size_t)(close - str - 1));
            char *trimmed = name ? cfg_trimdup(name) : NULL;
            free(name);
            if (!trimmed) {
                cfg_reader_fail(r, TS_ERR_NOMEM, "out of memory");
                return str;
            }
            if (!*trimmed)
                cfg_reader_fail(r, TS_ERR_CONFIG, "empty section name []");
            else if (cfg_add_section(r->cfg, trimmed, r->lineno) != TS_OK)
                cfg_reader_fail(r, TS_ERR_NOMEM, "out of memory");
            free(trimmed);
        }
    }
    return str;
}

static int cfg_handler(void *user, const char *section, const char *name, const char *value) {
    cfg_reader *r = user;
    ts_config *cfg = r->cfg;
    char *sec = cfg_trimdup(section);
    char *key = cfg_trimdup(name);
    int ok = 0;
    if (!sec || !key) {
        cfg_reader_fail(r, TS_ERR_NOMEM, "out of memory");
    } else if (!*key) {
        cfg_reader_fail(r, TS_ERR_CONFIG, "a value without a key (expected key = value)");
    } else if (!*sec) {
        cfg_reader_fail(r, TS_ERR_CONFIG,
                        "key '%s' is outside any section (put it under a [section] header)", key);
    } else {
        cfg_entry *e = cfg_find_entry(cfg, sec, key);
        if (e && !e->from_set) {
            cfg_reader_fail(r, TS_ERR_CONFIG, "[%s] %s is given twice (first at line %d)", sec, key,
                            e->line);
        } else if (e && e->from_set) {
            ok = 1; /* an earlier --set wins over the file */
        } else if (cfg_put(cfg, sec, key, value, r->lineno, 0) != TS_OK) {
            cfg_reader_fail(r, TS_ERR_NOMEM, "out of memory");
        } else {
            ok = 1;
        }
    }
    free(sec);
    free(key);
    return ok;
}

/* The text of line `line` (1-based) of buf, leading whitespace removed. */
static void cfg_line_text(const char *buf, size_t len, int line, char *out, size_t size) {
    const char *p = buf, *end = buf + len;
    for (int l = 1; l < line && p < end; l++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        p = nl ? nl + 1 : end;
    }
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    size_t n = 0;
    while (p + n < end && p[n] != '\n' && p[n] != '\r' && n + 1 < size)
        n++;
    memcpy(out, p, n);
    out[n] = '\0';
    if (n > 60) strcpy(out + 57, "...");
}

ts_status ts_config_load(ts_config *cfg, const char *path) {
    if (cfg->loaded)
        return ts_error(TS_ERR_INVALID, "config: %s: a configuration file is already loaded (%s)",
                        path, cfg->path);
    FILE *f;
    TS_TRY(ts_file_open_read(path, "config file", &f));
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (len == cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    int read_err = ferror(f);
    fclose(f);
    if (!buf) return cfg_nomem();
    if (read_err) {
        free(buf);
        return ts_error(TS_ERR_IO, "config: cannot read %s", path);
    }
    char *p = cfg_strdup(path);
    if (!p) {
        free(buf);
        return cfg_nomem();
    }
    free(cfg->path);
    cfg->path = p;
    cfg->loaded = 1;

    cfg_reader r = {0};
    r.cfg = cfg;
    r.buf = r.pos = buf;
    r.end = buf + len;
    int bad = ini_parse_stream(cfg_read_line, &r, cfg_handler, &r);
    ts_status st = TS_OK;
    if (bad < 0) {
        st = ts_error(TS_ERR_NOMEM, "config: %s: inih could not allocate its line buffer", path);
    } else if (r.err_line && (bad == 0 || r.err_line <= bad)) {
        st = ts_error(r.err_code, "%s:%d: %s", path, r.err_line, r.err);
    } else if (bad > 0) {
        char text[256];
        cfg_line_text(buf, len, bad, text, sizeof text);
        if (text[0] == '[')
            st = ts_error(TS_ERR_CONFIG, "%s:%d: section header '%s' has no closing ']'", path, bad,
                          text);
        else
            st = ts_error(TS_ERR_CONFIG,
                          "%s:%d: cannot parse '%s' (expected [section], key = value or a ; "
                          "comment)",
                          path, bad, text);
    }
    free(buf);
    return st;
}

ts_status ts_config_set(ts_config *cfg, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    const char *dot = eq ? memchr(assignment, '.', (size_t)(eq - assignment)) : NULL;
    if (!eq || !dot)
        return ts_error(TS_ERR_CONFIG, "--set \"%s\": expected section.key=value", assignment);
    char *sec = cfg_strndup(assignment, (size_t)(dot - assignment));
    char *key = cfg_strndup(dot + 1, (size_t)(eq - dot - 1));
    char *tsec = sec ? cfg_trimdup(sec) : NULL;
    char *tkey = key ? cfg_trimdup(key) : NULL;
    char *tval = cfg_trimdup(eq + 1);
    free(sec);
    free(key);
    ts_status st = TS_OK;
    if (!tsec || !tkey || !tval) {
        st = cfg_nomem();
    } else if (!*tsec || !*tkey) {
        st = ts_error(TS_ERR_CONFIG, "--set \"%s\": expected section.key=value (empty %s)",
                      assignment, *tsec ? "key" : "section");
    } else if (strpbrk(tsec, " \t[]") || strpbrk(tkey, " \t[]")) {
        st = ts_error(TS_ERR_CONFIG,
                      "--set \"%s\": expected section.key=value (no spaces or brackets in the "
                      "section or key)",
                      assignment);
    } else {
        st = cfg_add_section(cfg, tsec, 0);
        if (st == TS_OK) st = cfg_put(cfg, tsec, tkey, tval, 0, 1);
    }
    free(tsec);
    free(tkey);
    free(tval);
    return st;
}

/* "tiny.ini:12" or "--set" into buf. */
static const char *cfg_origin(const ts_config *cfg, int from_set, int line, char *buf,
                              size_t size) {
    if (from_set || line <= 0)
        snprintf(buf, size, "%s", from_set || !*cfg->path ? "--set" : cfg->path);
    else
        snprintf(buf, size, "%s:%d", cfg->path, line);
    return buf;
}

/* The edit distance of a and b, capped at 3 (enough for a suggestion). */
static int cfg_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 3;
    int d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            d[i][j] = c;
        }
    return d[la][lb] < 3 ? d[la][lb] : 3;
}

ts_status ts_config_validate(const ts_config *cfg) {
    char where[1200], list[1024];
    for (int i = 0; i < cfg->nsections; i++) {
        const cfg_section *s = &cfg->sections[i];
        if (cfg_section_known(cfg, s->name)) continue;
        size_t j = 0;
        list[0] = '\0';
        for (int k = 0; k < cfg->nspecs && j + 40 < sizeof list; k++) {
            int seen = 0;
            for (int m = 0; m < k; m++)
                if (strcmp(cfg->specs[m].section, cfg->specs[k].section) == 0) seen = 1;
            if (seen) continue;
            j += (size_t)snprintf(list + j, sizeof list - j, "%s%s", j ? ", " : "",
                                  cfg->specs[k].section);
        }
        return ts_error(TS_ERR_CONFIG, "%s: unknown section [%s] (known: %s)",
                        cfg_origin(cfg, s->line == 0, s->line, where, sizeof where), s->name, list);
    }
    for (int i = 0; i < cfg->nentries; i++) {
        const cfg_entry *e = &cfg->entries[i];
        cfg_origin(cfg, e->from_set, e->line, where, sizeof where);
        const ts_key_spec *sp = cfg_find_spec(cfg, e->section, e->key);
        if (!sp) {
            size_t j = 0;
            const char *best = NULL;
            int best_d = 3;
            list[0] = '\0';
            for (int k = 0; k < cfg->nspecs; k++) {
                if (strcmp(cfg->specs[k].section, e->section) != 0) continue;
                if (j + 40 < sizeof list)
                    j += (size_t)snprintf(list + j, sizeof list - j, "%s%s", j ? ", " : "",
                                          cfg->specs[k].name);
                int d = cfg_distance(e->key, cfg->specs[k].name);
                if (d < best_d) {
                    best_d = d;
                    best = cfg->specs[k].name;
                }
            }
            char hint[128] = "";
            if (best) snprintf(hint, sizeof hint, "; did you mean '%s'?", best);
            return ts_error(TS_ERR_CONFIG, "%s: unknown key '%s' in [%s] (known: %s)%s", where,
                            e->key, e->section, list, hint);
        }
        char why[CFG_MSG];
        if (!cfg_check_value(sp, e->value, why, sizeof why))
            return ts_error(TS_ERR_CONFIG, "%s: [%s] %s = %s (%s)", where, e->section, e->key, why,
                            sp->help);
    }
    for (int k = 0; k < cfg->nspecs; k++) {
        const ts_key_spec *sp = &cfg->specs[k];
        if (sp->def || cfg_find_entry(cfg, sp->section, sp->name)) continue;
        return ts_error(TS_ERR_CONFIG, "%s: [%s] %s is required (%s)",
                        *cfg->path ? cfg->path : "config", sp->section, sp->name, sp->help);
    }
    return TS_OK;
}

/* ------------------------------------------------------------------------- */
/* look-ups                                                                   */

/* The text of a key: its entry's value, or its default. */
static const char *cfg_text(const ts_config *cfg, const char *section, const char *key,
                            const ts_key_spec **spec) {
    const ts_key_spec *sp = cfg_find_spec(cfg, section, key);
    TS_ASSERT(sp != NULL); /* look-ups are for keys in the schema */
    const cfg_entry *e = cfg_find_entry(cfg, section, key);
    const char *text = e ? e->value : sp->def;
    TS_ASSERT(text != NULL); /* a required key is missing: validate first */
    if (spec) *spec = sp;
    return text;
}

int64_t ts_config_int(const ts_config *cfg, const char *section, const char *key) {
    const ts_key_spec *sp;
    const char *text = cfg_text(cfg, section, key, &sp);
    TS_ASSERT(sp->type == TS_KEY_INT);
    if (strcmp(text, "auto") == 0 && cfg_choice_has(sp->choices, "auto")) return -1;
    int64_t v = 0;
    TS_ASSERT(cfg_parse_int(text, &v) == NULL); /* validate first */
    return v;
}

double ts_config_float(const ts_config *cfg, const char *section, const char *key) {
    const ts_key_spec *sp;
    const char *text = cfg_text(cfg, section, key, &sp);
    TS_ASSERT(sp->type == TS_KEY_FLOAT || sp->type == TS_KEY_INT);
    double v = 0;
    TS_ASSERT(cfg_parse_float(text, &v) == NULL); /* validate first */
    return v;
}

int ts_config_bool(const ts_config *cfg, const char *section, const char *key) {
    const ts_key_spec *sp;
    const char *text = cfg_text(cfg, section, key, &sp);
    TS_ASSERT(sp->type == TS_KEY_BOOL);
    int v = 0;
    TS_ASSERT(cfg_parse_bool(text, &v) == NULL); /* validate first */
    return v;
}

const char *ts_config_str(const ts_config *cfg, const char *section, const char *key) {
    return cfg_text(cfg, section, key, NULL);
}

int ts_config_has(const ts_config *cfg, const char *section, const char *key) {
    return cfg_find_entry(cfg, section, key) != NULL;
}

const char *ts_config_where(const ts_config *cfg, const char *section, const char *key, char *buf,
                            int size) {
    if (size <= 0) return buf;
    const cfg_entry *e = cfg_find_entry(cfg, section, key);
    if (!e)
        snprintf(buf, (size_t)size, "default [%s] %s", section, key);
    else if (e->from_set)
        snprintf(buf, (size_t)size, "--set [%s] %s", section, key);
    else
        snprintf(buf, (size_t)size, "%s:%d [%s] %s", cfg->path, e->line, section, key);
    return buf;
}

/* One key's canonical value into buf. */
static void cfg_canonical_value(const ts_key_spec *sp, const char *text, char *buf, size_t size) {
    int64_t i;
    double d;
    int b;
    if (sp->type == TS_KEY_INT && !cfg_choice_has(sp->choices, text) && !cfg_parse_int(text, &i))
        snprintf(buf, size, "%lld", (long long)i);
    else if (sp->type == TS_KEY_FLOAT && !cfg_parse_float(text, &d))
        cfg_fmt_num(d, buf, size); /* the shortest text that reads back as d */
    else if (sp->type == TS_KEY_BOOL && !cfg_parse_bool(text, &b))
        snprintf(buf, size, "%s", b ? "true" : "false");
    else
        snprintf(buf, size, "%s", text);
}

static int cfg_cmp_lines(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

char *ts_config_canonical(const ts_config *cfg) {
    char **lines = calloc((size_t)cfg->nspecs + 1, sizeof *lines);
    size_t total = 1;
    int n = 0, ok = lines != NULL;
    for (int k = 0; ok && k < cfg->nspecs; k++) {
        const ts_key_spec *sp = &cfg->specs[k];
        const cfg_entry *e = cfg_find_entry(cfg, sp->section, sp->name);
        const char *text = e ? e->value : sp->def ? sp->def : "";
        char value[CFG_MSG];
        cfg_canonical_value(sp, text, value, sizeof value);
        size_t len = strlen(sp->section) + strlen(sp->name) + strlen(value) + 3;
        lines[n] = malloc(len);
        if (!lines[n]) {
            ok = 0;
            break;
        }
        snprintf(lines[n], len, "%s.%s=%s", sp->section, sp->name, value);
        total += len;
        n++;
    }
    char *out = ok ? malloc(total) : NULL;
    if (out) {
        qsort(lines, (size_t)n, sizeof *lines, cfg_cmp_lines);
        size_t pos = 0;
        for (int k = 0; k < n; k++)
            pos += (size_t)sprintf(out + pos, "%s\n", lines[k]);
        out[pos] = '\0';
    }
    for (int k = 0; lines && k < n; k++)
        free(lines[k]);
    free(lines);
    return out;
}

const char *ts_config_path(const ts_config *cfg) {
    return cfg->path;
}

int ts_config_num_sections(const ts_config *cfg) {
    return cfg->nsections;
}

const char *ts_config_section(const ts_config *cfg, int i) {
    TS_ASSERT(i >= 0 && i < cfg->nsections);
    return cfg->sections[i].name;
}

int ts_config_num_specs(const ts_config *cfg) {
    return cfg->nspecs;
}

const ts_key_spec *ts_config_spec(const ts_config *cfg, int i) {
    TS_ASSERT(i >= 0 && i < cfg->nspecs);
    return &cfg->specs[i];
}
