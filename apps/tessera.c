/*
 * tessera.c — the command-line program.
 *
 *   tessera train CONFIG [--set section.key=value ...]
 *   tessera export CONFIG --out PATH [--checkpoint CKPT] [--set ...]
 *   tessera sample CONFIG [--checkpoint CKPT] [--prompt TEXT] [--tokens N] ...
 *   tessera reshard CONFIG --checkpoint CKPT --out DIR [--set ...]
 *   tessera inspect CKPT
 *   tessera verify CONFIG --world N [--steps K] [--json] [--launcher CMD] [--set ...]
 *   tessera conform PLUGIN.so [--kind K] [--world N,M] [--json] [--set ...]
 *   tessera report METRICS.jsonl [--out FILE]
 *   tessera plan CONFIG --world N [--json] [--set ...]
 *   tessera plugins [--config CONFIG] [--plugin-path DIRS]
 *
 * Every failure prints one message naming its place (file, line, key, rank,
 * plugin) and exits non-zero: 2 for a bad command line, configuration or
 * plugin, 1 for a failure while running.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_plan.h"
#include "commands.h"
#include "comm_plan.h"
#include "config.h"
#include "parallel.h"
#include "plan_run.h"
#include "plugin.h"
#include "schedule.h"
#include "state.h"
#include "train.h"

static const char *usage_main =
    "usage: tessera <command> [options]\n"
    "\n"
    "commands:\n"
    "  train CONFIG [--set section.key=value ...]   train a model as CONFIG says\n"
    "  export CONFIG --out PATH [--checkpoint C]     write weights (llm.c, safetensors)\n"
    "  reshard CONFIG --checkpoint C --out DIR      rewrite a checkpoint for CONFIG's ranks\n"
    "  sample CONFIG [--checkpoint C] [--prompt T]  text from the model, on one rank\n"
    "  inspect CKPT                                 a checkpoint's tensors, shards and sums\n"
    "  verify CONFIG --world N                      the four ledgers against one rank\n"
    "  conform PLUGIN.so [--kind K]                 the checks every plugin of its kind passes\n"
    "  report METRICS.jsonl [--out FILE]            a run's metrics as one HTML file\n"
    "  plan CONFIG --world N [--json]                the mesh and rank groups, no training\n"
    "  plugins [--config CONFIG] [--plugin-path D]   list plugins with their INI keys\n"
    "\n"
    "Run 'tessera <command> --help' for a command's options. Multi-rank runs are\n"
    "launched with mpirun: 'mpirun -np 4 tessera train CONFIG'.\n";

static const char *usage_train =
    "usage: tessera train CONFIG [--set section.key=value ...]\n"
    "\n"
    "Trains as the INI file CONFIG says, printing one line per step (step, loss,\n"
    "lr, grad norm, tokens/s, step ms, peak memory). [train] metrics = PATH also\n"
    "writes one JSON object per step; [train] checkpoint_dir and checkpoint_every\n"
    "write checkpoints, and resume = auto continues from the newest one.\n"
    "[parallel] plugins = dp, ... loads strategy plugins; launch N ranks with\n"
    "mpirun -np N. Each rank runs [train] threads CPU threads, else\n"
    "OMP_NUM_THREADS, else the node's cores divided among its ranks.\n"
    "\n"
    "  --set section.key=value   override one key (repeatable)\n";

static const char *usage_export =
    "usage: tessera export CONFIG --out PATH [--format llmc|safetensors] [--dtype f32|bf16]\n"
    "                      [--checkpoint CKPT] [--set ...]\n"
    "\n"
    "Writes the model's weights, whole, as an llm.c GPT-2 checkpoint (version 3,\n"
    "or 5 in bf16); a mixture-of-experts model, which llm.c cannot hold, as\n"
    "tessera's raw weights (the same 1024-byte header, magic 20260601, then every\n"
    "parameter in f32), or as safetensors. The weights come from CKPT (of any\n"
    "topology), else from the newest checkpoint in [train] checkpoint_dir, else\n"
    "from the model's initialisation ([model] init).\n"
    "\n"
    "  --out PATH         the file to write (atomically)\n"
    "  --format F         llmc (default), or safetensors: transformers' GPT-2 names and\n"
    "                     shapes (its Conv1D weights as [in, out]), experts as\n"
    "                     h.L.mlp.experts.K.*, the shape keys in its metadata\n"
    "  --dtype D          f32 (default) or bf16 (rounded to nearest even)\n"
    "  --checkpoint CKPT  a tessera checkpoint (directory, or an earlier build's file)\n"
    "                     to take the weights from\n"
    "  --set section.key=value   override one key (repeatable)\n";

static const char *usage_sample =
    "usage: tessera sample CONFIG [--checkpoint CKPT] [--prompt TEXT | --prompt-tokens IDS]\n"
    "                      [--tokens N] [--temperature T] [--top-k K] [--seed S] [--set ...]\n"
    "\n"
    "Writes text the model continues a prompt with, on one rank: the weights come\n"
    "from CKPT (a checkpoint of any topology), else from the newest checkpoint in\n"
    "[train] checkpoint_dir, else from the initialisation. The prompt's bytes are\n"
    "its tokens (a byte vocabulary); --prompt-tokens \"464 2068\" gives ids. The\n"
    "model's vocabulary (as built: [model] vocab, or the weights file's through\n"
    "[model] init) decides the output: at most 256 tokens prints bytes; a larger\n"
    "one prints ids, or text through [data] tokenizer (an llm.c tokenizer file).\n"
    "N, K, S and the ids are whole numbers, T a number: anything else, or out of\n"
    "range, is refused naming the flag.\n"
    "\n"
    "  --tokens N         new tokens, 1 to 1000000 (default 64)\n"
    "  --temperature T    0 to 100; 0 picks the most likely token each time (default 1)\n"
    "  --top-k K          draw among the K most likely (default 0: all)\n"
    "  --seed S           the draws (default [train] seed); the same seed, the same text\n";

static const char *usage_reshard =
    "usage: tessera reshard CONFIG --checkpoint CKPT --out DIR [--set ...]\n"
    "\n"
    "Loads checkpoint CKPT (a checkpoint directory of any topology, or an earlier\n"
    "build's single .tsck file) into the run CONFIG describes and saves it as the\n"
    "checkpoint directory DIR, each rank writing its own shards, at the same step:\n"
    "launch it as the run itself (mpirun -np N). Training loads any topology's\n"
    "checkpoint directly; this converts old files and lays a checkpoint out for\n"
    "the ranks that will read it.\n"
    "\n"
    "  --checkpoint CKPT  the checkpoint to read\n"
    "  --out DIR          the directory to write (atomically: DIR.tmp.dir, renamed)\n"
    "  --set section.key=value   override one key (repeatable)\n";

static const char *usage_inspect =
    "usage: tessera inspect CKPT\n"
    "\n"
    "Prints what checkpoint directory CKPT holds: the step, data cursor, seed and\n"
    "model; every shard file's size; and for every tensor its shape, its number of\n"
    "shards and the CRC-32 of each array (master weights, first and second\n"
    "moments) read whole from its shards, so two checkpoints of different\n"
    "topologies can be compared tensor by tensor. Reads one tensor at a time.\n";

static const char *usage_plan =
    "usage: tessera plan CONFIG --world N [--rank R] [--json] [--groups] [--layout] [--timeline]\n"
    "                    [--set ...]\n"
    "\n"
    "Loads CONFIG's plugins and prints, without starting MPI, a summary of one\n"
    "screen for N ranks: the size of every axis, dense (tp cp dp pp) and expert\n"
    "(ep etp edp); the number and size of the rank groups of every axis and\n"
    "product of axes; and for rank R (default 0) the memory it allocates by\n"
    "category, the communication of every group per step, the step's FLOPs\n"
    "(forward, backward, and the forwards [train] recompute runs again, with\n"
    "their communication apart) and the pipeline's bubble, from a dry run of\n"
    "two steps: the real trainer, model and plugins\n"
    "over a backend and communicators that only count (nothing computed, nothing\n"
    "exchanged).\n"
    "  --groups    every group's ranks\n"
    "  --layout    the layout plan: every tensor's shape, placements, local block\n"
    "  --timeline  every pipeline stage's slots under the unit-time model\n"
    "  --json      everything as one object: \"groups\" maps each axis name to its\n"
    "              groups (lists of ranks ascending, ordered by their first rank);\n"
    "              \"memory\" and \"comm\" (\"group.op\": calls and bytes) are rank R's\n"
    "  --cluster FILE  a cluster file (a [cluster] section; CONFIG's own [cluster]\n"
    "              otherwise): the dry run's clock predicts rank R's step on it\n"
    "\n"
    "usage: tessera plan CONFIG --search [--cluster FILE] [--world N] [--top N]\n"
    "                    [--jobs N] [--processes] [--json] [--set ...]\n"
    "Every layout of CONFIG's model (tp, cp, pp and its schedule, dp, zero stage,\n"
    "ep, micro-batch, recomputation) on the cluster's devices, ranked by\n"
    "predicted step time; the top N (default 10) with memory per rank, step\n"
    "time and its parts, tokens/s and MFU; --json gives every layout. The dry\n"
    "runs run on --jobs threads (default: the CPUs), or in processes with\n"
    "--processes or when a plugin keeps process-wide state.\n"
    "  mpirun -np N tessera plan CONFIG --calibrate --cluster FILE [--search]\n"
    "measures this machine's kernels and MPI on N ranks side by side, writes\n"
    "FILE, and with --search ranks the layouts of N ranks on it (docs/search.md).\n";

static const char *usage_plugins =
    "usage: tessera plugins [--config CONFIG [--set ...]] [--plugin-path DIRS]\n"
    "\n"
    "Lists plugins with their versions and INI keys (type, default, help). With\n"
    "--config, the plugins CONFIG loads; otherwise every tessera-*.so found in\n"
    "DIRS (':'-separated), $TESSERA_PLUGIN_PATH and the built-in directory.\n";

static int fail(ts_status st) {
    fprintf(stderr, "tessera: %s\n", ts_last_error());
    return st == TS_ERR_CONFIG || st == TS_ERR_INVALID || st == TS_ERR_PLUGIN ? 2 : 1;
}

static int wants_help(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    return 0;
}

/* --help prints the command's usage (exit 0); no CONFIG prints it on stderr
 * (exit 2). Returns 1 when the command should stop with *rc. */
static int cli_usage(int argc, char **argv, const char *usage, int *rc) {
    if (wants_help(argc, argv)) {
        fputs(usage, stdout);
        *rc = 0;
        return 1;
    }
    if (argc < 1) {
        fputs(usage, stderr);
        *rc = 2;
        return 1;
    }
    return 0;
}

/* The options a command accepts beyond --set. */
typedef struct cli_opts {
    const char *out;              /* export --out            */
    const char *checkpoint;       /* export --checkpoint     */
    const char *format;           /* export --format         */
    const char *dtype;            /* export --dtype          */
    const char *prompt;           /* sample --prompt         */
    const char *prompt_ids;       /* sample --prompt-tokens  */
    const char *tokens;           /* sample --tokens         */
    const char *temp;             /* sample --temperature    */
    const char *top_k;            /* sample --top-k          */
    const char *seed;             /* sample --seed           */
    int world;                    /* plan --world            */
    int rank;                     /* plan --rank             */
    int json;                     /* plan --json             */
    int groups, layout, timeline; /* plan's details      */
    int search;                   /* plan --search           */
    const char *cluster;          /* plan --cluster          */
    int top, jobs;                /* plan --top, --jobs      */
    int processes;                /* plan --processes        */
    int calibrate;                /* plan --calibrate        */
} cli_opts;

ts_status cli_parse_int(const char *flag, const char *text, int64_t lo, int64_t hi, int64_t *out) {
    const char *p = text + (lo < 0 && text[0] == '-');
    int ok = *p != 0 && strspn(p, "0123456789") == strlen(p);
    long long v = 0;
    if (ok) {
        char *end = NULL;
        errno = 0;
        v = strtoll(text, &end, 10);
        ok = errno == 0 && *end == 0 && v >= lo && v <= hi;
    }
    if (!ok)
        return ts_error(TS_ERR_CONFIG, "%s '%s': a whole number from %lld to %lld is required",
                        flag, text, (long long)lo, (long long)hi);
    *out = v;
    return TS_OK;
}

ts_status cli_parse_number(const char *flag, const char *text, double lo, double hi, double *out) {
    int ok = text[0] != 0 && strspn(text, "0123456789.eE+-") == strlen(text);
    double v = 0;
    if (ok) {
        char *end = NULL;
        errno = 0;
        v = strtod(text, &end);
        ok = errno == 0 && *end == 0 && isfinite(v) && v >= lo && v <= hi;
    }
    if (!ok)
        return ts_error(TS_ERR_CONFIG, "%s '%s': a number in [%g, %g] is required", flag, text, lo,
                        hi);
    *out = v;
    return TS_OK;
}

/* Loads CONFIG (argv[0]), applies --set overrides, loads the plugins it
 * names and validates every key (core and plugins'). */
ts_status cli_config_create(ts_config **out) {
    ts_config *cfg = NULL;
    TS_TRY(ts_config_create(&cfg));
    int n = 0;
    const ts_key_spec *core = ts_config_core_keys(&n);
    ts_status st = ts_config_register(cfg, core, n);
    if (st) {
        ts_config_destroy(cfg);
        return st;
    }
    *out = cfg;
    return TS_OK;
}

ts_status cli_config_finish(ts_status st, ts_config *cfg, ts_config **out_cfg,
                            ts_plugins **out_reg) {
    ts_plugins *reg = NULL;
    if (!st) st = ts_plugins_create(&reg);
    if (!st) st = ts_plugins_load(reg, cfg);
    if (st) {
        ts_plugins_destroy(reg);
        ts_config_destroy(cfg);
        return st;
    }
    *out_cfg = cfg;
    *out_reg = reg;
    return TS_OK;
}

static ts_status load_config(int argc, char **argv, cli_opts *opts, ts_config **out_cfg,
                             ts_plugins **out_reg) {
    ts_config *cfg = NULL;
    TS_TRY(cli_config_create(&cfg));
    ts_status st = ts_config_load(cfg, argv[0]);
    for (int i = 1; i < argc && !st; i++) {
        if (strcmp(argv[i], "--set") == 0 && i + 1 < argc) {
            st = ts_config_set(cfg, argv[++i]);
        } else if (strncmp(argv[i], "--set=", 6) == 0) {
            st = ts_config_set(cfg, argv[i] + 6);
        } else if (opts && strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            opts->out = argv[++i];
        } else if (opts && strcmp(argv[i], "--checkpoint") == 0 && i + 1 < argc) {
            opts->checkpoint = argv[++i];
        } else if (opts && strcmp(argv[i], "--format") == 0 && i + 1 < argc) {
            opts->format = argv[++i];
        } else if (opts && strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
            opts->dtype = argv[++i];
        } else if (opts && strcmp(argv[i], "--prompt") == 0 && i + 1 < argc) {
            opts->prompt = argv[++i];
        } else if (opts && strcmp(argv[i], "--prompt-tokens") == 0 && i + 1 < argc) {
            opts->prompt_ids = argv[++i];
        } else if (opts && strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
            opts->tokens = argv[++i];
        } else if (opts && strcmp(argv[i], "--temperature") == 0 && i + 1 < argc) {
            opts->temp = argv[++i];
        } else if (opts && strcmp(argv[i], "--top-k") == 0 && i + 1 < argc) {
            opts->top_k = argv[++i];
        } else if (opts && strcmp(argv[i], "--seed") == 0 && i + 1 < argc) {
            opts->seed = argv[++i];
        } else if (opts && strcmp(argv[i], "--world") == 0 && i + 1 < argc) {
            int64_t w = 0;
            st = cli_parse_int("--world", argv[++i], 1, 1 << 20, &w);
            opts->world = (int)w;
        } else if (opts && strcmp(argv[i], "--rank") == 0 && i + 1 < argc) {
            int64_t r = 0;
            st = cli_parse_int("--rank", argv[++i], 0, (1 << 20) - 1, &r);
            opts->rank = (int)r;
        } else if (opts && strcmp(argv[i], "--json") == 0) {
            opts->json = 1;
        } else if (opts && strcmp(argv[i], "--groups") == 0) {
            opts->groups = 1;
        } else if (opts && strcmp(argv[i], "--layout") == 0) {
            opts->layout = 1;
        } else if (opts && strcmp(argv[i], "--timeline") == 0) {
            opts->timeline = 1;
        } else if (opts && strcmp(argv[i], "--search") == 0) {
            opts->search = 1;
        } else if (opts && strcmp(argv[i], "--processes") == 0) {
            opts->processes = 1;
        } else if (opts && strcmp(argv[i], "--calibrate") == 0) {
            opts->calibrate = 1;
        } else if (opts && strcmp(argv[i], "--cluster") == 0 && i + 1 < argc) {
            opts->cluster = argv[++i];
        } else if (opts && (strcmp(argv[i], "--top") == 0 || strcmp(argv[i], "--jobs") == 0) &&
                   i + 1 < argc) {
            const char *opt = argv[i];
            int64_t v = 0;
            st = cli_parse_int(opt, argv[++i], 1, 1 << 20, &v);
            *(strcmp(opt, "--top") == 0 ? &opts->top : &opts->jobs) = (int)v;
        } else {
            st = ts_error(TS_ERR_CONFIG, "unexpected argument '%s' (see --help)", argv[i]);
        }
    }
    return cli_config_finish(st, cfg, out_cfg, out_reg);
}

/* The mesh sizes the plugins' axes give for `world` ranks, then the mesh
 * (for plan) or the parallel context over `comm` (for train). A failure
 * says where every axis size came from. */
static ts_status build_mesh(const ts_config *cfg, ts_plugins *reg, int world, ts_comm *comm,
                            ts_mesh **mesh, ts_parallel **par) {
    const char *order = ts_config_str(cfg, "parallel", "order");
    ts_mesh *m = NULL;
    ts_status st = ts_plugins_mesh(reg, world, NULL, &m);
    if (!st && par) {
        ts_mesh *own = NULL;
        st = ts_plugins_mesh(reg, world, NULL, &own);
        if (!st) st = ts_parallel_create_mesh(comm, own, par);
    }
    if (!st && mesh)
        *mesh = m;
    else
        ts_mesh_destroy(m);
    if (!st) return TS_OK;
    char msg[2048], axes[1024], where[512];
    snprintf(msg, sizeof msg, "%s", ts_last_error_bare());
    ts_plugins_axes_origin(reg, axes, sizeof axes);
    if (!ts_config_has(cfg, "parallel", "order"))
        return ts_error(st, "%s (axis sizes: %s; [parallel] order not given: the axes' default)",
                        msg, axes);
    ts_config_where(cfg, "parallel", "order", where, sizeof where);
    return ts_error(st, "%s (axis sizes: %s; %s = %s)", msg, axes, where, order);
}

/* Starts MPI (a singleton without mpirun) and builds the mesh of the axes the
 * plugins registered, with one communicator per group. */
static ts_status start_parallel(int *argc, char ***argv, const ts_config *cfg, ts_plugins *reg,
                                ts_comm **world, ts_parallel **par) {
    TS_TRY(ts_comm_world_init(argc, argv, ts_config_float(cfg, "comm", "timeout_s"), world));
    TS_TRY(ts_config_agree(cfg, *world));
    TS_TRY(build_mesh(cfg, reg, ts_comm_size(*world), *world, NULL, par));
    ts_plugins_set_comm_source(reg, ts_parallel_plugin_comm, *par);
    ts_plugins_set_coord_source(reg, ts_parallel_plugin_coord);
    return TS_OK;
}

static int cmd_train(int argc, char **argv) {
    int rc = 0;
    if (cli_usage(argc, argv, usage_train, &rc)) return rc;
    ts_config *cfg = NULL;
    ts_plugins *reg = NULL;
    ts_status st = load_config(argc, argv, NULL, &cfg, &reg);
    if (st) return fail(st);
    ts_comm *world = NULL;
    ts_parallel *par = NULL;
    ts_trainer *t = NULL;
    st = start_parallel(&argc, &argv, cfg, reg, &world, &par);
    if (!st) st = ts_trainer_create(cfg, par, reg, &t);
    if (!st) st = ts_trainer_run(t);
    rc = st ? fail(st) : 0;
    /* A failure on one rank must not leave its peers waiting. */
    if (rc && world && ts_comm_size(world) > 1) ts_comm_abort(world, rc);
    ts_trainer_destroy(t);
    ts_plugins_destroy(reg);
    ts_parallel_destroy(par);
    ts_config_destroy(cfg);
    ts_comm_world_finalize(world);
    return rc;
}

/* For the commands that read a checkpoint into a trainer and do not train
 * (export, sample, reshard): the checkpoint to read (`given`, else the
 * newest in [train] checkpoint_dir when `newest`, else none: *checkpoint
 * NULL), then the run's own outputs switched off, so that the command
 * leaves them alone (the checkpoint directory, which a run may hold locked,
 * metrics, trace, summary) and does no evaluation or sampling. */
static ts_status cli_checkpoint_quiet(ts_config *cfg, const char *given, int newest, char *latest,
                                      size_t size, const char **checkpoint) {
    *checkpoint = given;
    if (!given && newest) {
        const char *dir = ts_config_str(cfg, "train", "checkpoint_dir");
        int found = 0;
        if (dir[0]) TS_TRY(ts_checkpoint_latest(dir, latest, size, &found));
        if (found) *checkpoint = latest;
    }
    static const char *quiet[] = {
        "train.resume=no",    "train.checkpoint_dir=", "train.checkpoint_every=0",
        "train.metrics=",     "train.trace=",          "train.summary=",
        "train.eval_every=0", "train.sample_every=0"};
    for (size_t i = 0; i < sizeof quiet / sizeof quiet[0]; i++)
        TS_TRY(ts_config_set(cfg, quiet[i]));
    return TS_OK;
}

static int cmd_export(int argc, char **argv) {
    int rc = 0;
    if (cli_usage(argc, argv, usage_export, &rc)) return rc;
    cli_opts opts = {0};
    ts_config *cfg = NULL;
    ts_plugins *reg = NULL;
    ts_status st = load_config(argc, argv, &opts, &cfg, &reg);
    if (st) return fail(st);
    if (!opts.out) {
        ts_plugins_destroy(reg);
        ts_config_destroy(cfg);
        fprintf(stderr, "tessera export: --out PATH is required\n");
        return 2;
    }
    if (opts.format && strcmp(opts.format, "llmc") != 0 &&
        strcmp(opts.format, "safetensors") != 0) {
        ts_plugins_destroy(reg);
        ts_config_destroy(cfg);
        fprintf(stderr, "tessera export: --format %s: expected llmc or safetensors\n", opts.format);
        return 2;
    }
    if (opts.dtype && strcmp(opts.dtype, "f32") != 0 && strcmp(opts.dtype, "bf16") != 0) {
        ts_plugins_destroy(reg);
        ts_config_destroy(cfg);
        fprintf(stderr, "tessera export: --dtype %s: expected f32 or bf16\n", opts.dtype);
        return 2;
    }
    /* Export what a checkpoint holds, not what resume would do. */
    char latest[4096];
    const char *checkpoint = NULL;
    st = cli_checkpoint_quiet(cfg, opts.checkpoint, 1, latest, sizeof latest, &checkpoint);
    ts_trainer *t = NULL;
    if (!st) st = ts_trainer_create(cfg, NULL, NULL, &t);
    if (!st && checkpoint) st = ts_trainer_load(t, checkpoint);
    if (!st)
        st = ts_trainer_export(t, opts.out, opts.format,
                               opts.dtype && strcmp(opts.dtype, "bf16") == 0);
    if (!st)
        printf("exported %s (step %lld, from %s)\n", opts.out, (long long)ts_trainer_state(t)->step,
               checkpoint ? checkpoint : "initialisation");
    rc = st ? fail(st) : 0;
    ts_trainer_destroy(t);
    ts_plugins_destroy(reg);
    ts_config_destroy(cfg);
    return rc;
}

/* The prompt of `sample` as token ids: the bytes of --prompt, the ids of
 * --prompt-tokens (each a whole number below 2^31, checked before it is
 * cast), else none (*n = 0: the caller gives the model's own first token).
 * `ids` holds strlen of the text given. */
static ts_status sample_prompt(const cli_opts *o, int32_t *ids, int *n) {
    *n = 0;
    if (o->prompt) {
        for (const char *c = o->prompt; *c; c++)
            ids[(*n)++] = (unsigned char)*c;
        return TS_OK;
    }
    for (const char *p = o->prompt_ids ? o->prompt_ids : ""; *(p += strspn(p, " ,"));) {
        char word[32];
        size_t len = strcspn(p, " ,");
        snprintf(word, sizeof word, "%.*s", (int)(len < sizeof word - 1 ? len : sizeof word - 1),
                 p);
        int64_t v = 0;
        if (len >= sizeof word - 1 || cli_parse_int("--prompt-tokens", word, 0, INT32_MAX, &v))
            return ts_error(TS_ERR_CONFIG,
                            "--prompt-tokens '%s': token ids (whole numbers from 0 to %d) "
                            "separated by spaces; '%.*s' at position %d is not one",
                            o->prompt_ids, INT32_MAX, (int)len, p, *n);
        ids[(*n)++] = (int32_t)v;
        p += len;
    }
    if (o->prompt_ids && *n == 0)
        return ts_error(TS_ERR_CONFIG, "--prompt-tokens '%s': no token id given", o->prompt_ids);
    return TS_OK;
}

static int cmd_sample(int argc, char **argv) {
    int rc = 0;
    if (cli_usage(argc, argv, usage_sample, &rc)) return rc;
    cli_opts opts = {0};
    ts_config *cfg = NULL;
    ts_plugins *reg = NULL;
    ts_status st = load_config(argc, argv, &opts, &cfg, &reg);
    if (st) return fail(st);
    /* Every number checked before anything is built. */
    int64_t ntok = 64, topk = 0, seed = ts_config_int(cfg, "train", "seed");
    double temp = 1;
    if (opts.tokens) st = cli_parse_int("--tokens", opts.tokens, 1, 1000000, &ntok);
    if (!st && opts.temp) st = cli_parse_number("--temperature", opts.temp, 0, 100, &temp);
    if (!st && opts.top_k) st = cli_parse_int("--top-k", opts.top_k, 0, 1 << 20, &topk);
    if (!st && opts.seed) st = cli_parse_int("--seed", opts.seed, 0, INT64_MAX, &seed);
    if (!st && opts.prompt && opts.prompt_ids)
        st = ts_error(TS_ERR_CONFIG, "--prompt and --prompt-tokens: give one of them");
    size_t plen = opts.prompt ? strlen(opts.prompt) : opts.prompt_ids ? strlen(opts.prompt_ids) : 0;
    int32_t *prompt = calloc(plen + 1, sizeof *prompt);
    int nprompt = 0;
    if (!st && !prompt) st = ts_error(TS_ERR_NOMEM, "sample: out of memory");
    if (!st) st = sample_prompt(&opts, prompt, &nprompt);
    char latest[4096];
    const char *checkpoint = NULL;
    if (!st) st = cli_checkpoint_quiet(cfg, opts.checkpoint, 1, latest, sizeof latest, &checkpoint);
    if (!st) st = ts_config_set(cfg, "parallel.plugins=");
    ts_tokenizer *tk = NULL;
    const char *tok_path = st ? "" : ts_config_str(cfg, "data", "tokenizer");
    if (!st && tok_path[0]) st = ts_tokenizer_open(tok_path, &tk);
    ts_trainer *t = NULL;
    if (!st) st = ts_trainer_create(cfg, NULL, NULL, &t);
    if (!st && checkpoint) st = ts_trainer_load(t, checkpoint);
    /* The vocabulary is the model's, as built: the INI's [model] vocab, or
     * the weights file's ([model] init) when the INI does not set it. */
    int vocab = st ? 0 : ts_trainer_state(t)->model->cfg.vocab;
    if (!st && nprompt == 0) prompt[nprompt++] = vocab >= 256 ? '\n' : 0;
    for (int i = 0; !st && i < nprompt; i++)
        if (prompt[i] >= vocab)
            st = ts_error(TS_ERR_CONFIG,
                          "%s '%s': prompt token %d (position %d) is outside the vocabulary "
                          "[0, %d) of the model",
                          opts.prompt ? "--prompt" : "--prompt-tokens",
                          opts.prompt ? opts.prompt : opts.prompt_ids, prompt[i], i, vocab);
    int32_t *out = st ? NULL : calloc((size_t)nprompt + (size_t)ntok, sizeof *out);
    if (!st && !out) st = ts_error(TS_ERR_NOMEM, "sample: out of memory");
    ts_sample_opts so = {(int)ntok, temp, (int)topk, (uint64_t)seed};
    if (!st) st = ts_trainer_sample(t, prompt, nprompt, &so, out);
    if (!st) {
        ts_tokens_print(stdout, out, nprompt + (int)ntok, vocab, tk);
        printf("\n");
        fprintf(stderr,
                "sampled %d tokens after a prompt of %d (step %lld, from %s; vocabulary %d, "
                "printed as %s; temperature %g, top-k %d, seed %llu)\n",
                (int)ntok, nprompt, (long long)ts_trainer_state(t)->step,
                checkpoint ? checkpoint : "initialisation", vocab,
                tk             ? "text"
                : vocab <= 256 ? "bytes"
                               : "ids",
                temp, (int)topk, (unsigned long long)seed);
    }
    rc = st ? fail(st) : 0;
    ts_trainer_destroy(t);
    ts_tokenizer_close(tk);
    free(prompt);
    free(out);
    ts_plugins_destroy(reg);
    ts_config_destroy(cfg);
    return rc;
}

static int cmd_reshard(int argc, char **argv) {
    int rc = 0;
    if (cli_usage(argc, argv, usage_reshard, &rc)) return rc;
    cli_opts opts = {0};
    ts_config *cfg = NULL;
    ts_plugins *reg = NULL;
    ts_status st = load_config(argc, argv, &opts, &cfg, &reg);
    if (st) return fail(st);
    if (!opts.out || !opts.checkpoint || opts.format) {
        ts_plugins_destroy(reg);
        ts_config_destroy(cfg);
        fprintf(stderr, "tessera reshard: --checkpoint CKPT and --out DIR are required "
                        "(and nothing else but --set)\n");
        return 2;
    }
    const char *checkpoint = NULL;
    st = cli_checkpoint_quiet(cfg, opts.checkpoint, 0, NULL, 0, &checkpoint);
    ts_comm *world = NULL;
    ts_parallel *par = NULL;
    ts_trainer *t = NULL;
    if (!st) st = start_parallel(&argc, &argv, cfg, reg, &world, &par);
    if (!st) st = ts_trainer_create(cfg, par, reg, &t);
    if (!st) st = ts_trainer_load(t, checkpoint);
    if (!st) st = ts_trainer_save_checkpoint(t, opts.out);
    if (!st && (!world || ts_comm_rank(world) == 0))
        printf("resharded %s (step %lld) into %s for %d rank%s\n", opts.checkpoint,
               (long long)ts_trainer_state(t)->step, opts.out, world ? ts_comm_size(world) : 1,
               world && ts_comm_size(world) > 1 ? "s" : "");
    rc = st ? fail(st) : 0;
    if (rc && world && ts_comm_size(world) > 1) ts_comm_abort(world, rc);
    ts_trainer_destroy(t);
    ts_plugins_destroy(reg);
    ts_parallel_destroy(par);
    ts_config_destroy(cfg);
    ts_comm_world_finalize(world);
    return rc;
}

static int cmd_inspect(int argc, char **argv) {
    int rc = 0;
    if (cli_usage(argc, argv, usage_inspect, &rc)) return rc;
    if (argc != 1) {
        fputs(usage_inspect, stderr);
        return 2;
    }
    ts_ckpt_reader *r = NULL;
    ts_status st = ts_ckpt_reader_open(argv[0], &r);
    if (st) return fail(st);
    const ts_ckpt_info *in = ts_ckpt_reader_info(r);
    const ts_model_config *c = &in->cfg;
    printf("checkpoint %s\nstep %lld data_cursor %lld seed %llu skipped_steps %lld\n", argv[0],
           (long long)in->meta.step, (long long)in->meta.data_cursor,
           (unsigned long long)in->meta.seed, (long long)in->meta.skipped_steps);
    printf("model layers=%d d_model=%d heads=%d vocab=%d padded_vocab=%d context=%d experts=%d, "
           "parameters %s\n",
           c->layers, c->d_model, c->heads, c->vocab, c->padded_vocab, c->context, c->experts,
           ts_dtype_name(in->param_dtype));
    uint64_t total = 0, largest = 0;
    for (int i = 0; i < in->nfiles; i++) {
        total += in->file_bytes[i];
        if (in->file_bytes[i] > largest) largest = in->file_bytes[i];
    }
    printf("files %d, %llu bytes, largest %llu (%.3f of the mean)\n", in->nfiles,
           (unsigned long long)total, (unsigned long long)largest,
           total ? (double)largest * in->nfiles / (double)total : 0.0);
    for (int i = 0; i < in->nfiles; i++)
        printf("  rank-%05d.bin %llu\n", i, (unsigned long long)in->file_bytes[i]);
    int64_t biggest = 1;
    for (int i = 0; i < in->ntensors; i++) {
        const int64_t *d = in->tensors[i].shape;
        if (d[0] * d[1] * d[2] > biggest) biggest = d[0] * d[1] * d[2];
    }
    float *buf = malloc((size_t)biggest * sizeof(float));
    if (!buf) st = ts_error(TS_ERR_NOMEM, "inspect: out of memory");
    for (int i = 0; i < in->ntensors && !st; i++) {
        const ts_ckpt_tensor *e = &in->tensors[i];
        int64_t off[3] = {0, 0, 0}, n = e->shape[0] * e->shape[1] * e->shape[2];
        int shards = 0;
        for (int64_t k = 0; k < in->nshards; k++)
            shards += in->shards[k].tensor == i && in->shards[k].array == 0;
        char shape[96];
        int len = snprintf(shape, sizeof shape, "[%lld", (long long)e->shape[0]);
        for (int d = 1; d < e->ndim; d++)
            len +=
                snprintf(shape + len, sizeof shape - (size_t)len, ", %lld", (long long)e->shape[d]);
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        printf("tensor %-28s %-18s shards %3d", e->name, shape, shards);
        for (int a = 0; a < TS_CKPT_ARRAYS && !st; a++) {
            st = ts_ckpt_reader_read(r, i, a, off, e->shape, 0, n, buf);
            if (!st) printf("  %s %08x", ts_ckpt_array_name(a), ts_crc32(0, buf, (size_t)n * 4));
        }
        printf("\n");
    }
    free(buf);
    ts_ckpt_reader_close(r);
    return st ? fail(st) : 0;
}

/* One line per axis and product of axes: how many groups of how many
 * ranks, and the first group (its first and last ranks when long). */
static void print_groups_summary(const ts_mesh *mesh, FILE *f) {
    for (int i = 0; i < ts_mesh_num_tokens(mesh); i++) {
        const char *token = ts_mesh_token_at(mesh, i);
        ts_mesh_groups g;
        if (ts_mesh_groups_init(&g, mesh, token) != TS_OK) continue;
        if (g.size > 1) {
            fprintf(f, "  %-10s %6d group%s of %5d, the first [", token, g.count,
                    g.count == 1 ? " " : "s", g.size);
            for (int r = 0; r < g.size; r++) {
                if (g.size > 8 && r == 3) {
                    fprintf(f, ", ...");
                    r = g.size - 3;
                }
                fprintf(f, "%s%d", r ? ", " : "", g.ranks[r]);
            }
            fprintf(f, "]\n");
        }
        ts_mesh_groups_free(&g);
    }
}

static void print_groups(const ts_mesh *mesh, FILE *f) {
    for (int i = 0; i < ts_mesh_num_tokens(mesh); i++) {
        const char *token = ts_mesh_token_at(mesh, i);
        ts_mesh_groups g;
        if (ts_mesh_groups_init(&g, mesh, token) != TS_OK) continue;
        fprintf(f, "  %-10s %d group%s of %d:", token, g.count, g.count == 1 ? "" : "s", g.size);
        for (int k = 0; k < g.count; k++) {
            fputs(k ? " [" : " [", f);
            for (int r = 0; r < g.size; r++)
                fprintf(f, "%s%d", r ? "," : "", g.ranks[k * g.size + r]);
            fputc(']', f);
        }
        fputc('\n', f);
        ts_mesh_groups_free(&g);
    }
}

/* The model state in the ZeRO paper's ledger (Rajbhandari et al. 2020,
 * section 3.1): with 16-bit weights, 2 bytes per parameter of weights and
 * 2 of gradients, and 12 of f32 master weights and Adam moments: 16P in
 * all, 16P/dp per rank fully sharded. (This build keeps gradients in f32:
 * its own per-rank bytes are the dry run's above.) Decimal units. */
static void plan_state_numbers(const plan_result *r, double *weights, double *state) {
    double wbytes = r->dtype == TS_BF16 ? 2.0 : 4.0;
    *weights = wbytes * (double)r->numel;
    /* f32 weights are their own master copy: 4 + 4 + 8 = 16 bytes too. */
    *state = 16.0 * (double)r->numel;
}

static void plan_bytes(double b, char *buf, size_t size) {
    static const char *unit[] = {"B", "kB", "MB", "GB", "TB", "PB"};
    int u = 0;
    while (b >= 1000.0 && u < 5) {
        b /= 1000.0;
        u++;
    }
    snprintf(buf, size, "%.4g %s", b, unit[u]);
}

/* "dp 4", or "shard 4 x replicate 2 = 8": the axes of the data-parallel
 * width (those of more than one rank; all of them when none has). */
static void plan_batch_axes(const ts_mesh *mesh, char *buf, size_t size) {
    size_t j = 0;
    int n = 0, wide = 0;
    buf[0] = '\0';
    for (int i = 0; i < ts_mesh_num_axes(mesh); i++)
        wide |= ts_mesh_axis_cuts_batch_at(mesh, i) == 1 && ts_mesh_axis_size_at(mesh, i) > 1;
    for (int i = 0; i < ts_mesh_num_axes(mesh) && j < size; i++) {
        if (ts_mesh_axis_cuts_batch_at(mesh, i) != 1) continue;
        if (wide && ts_mesh_axis_size_at(mesh, i) == 1) continue;
        j += (size_t)snprintf(buf + j, size - j, "%s%s %d", n++ ? " x " : "",
                              ts_mesh_axis_at(mesh, i), ts_mesh_axis_size_at(mesh, i));
    }
    if (n > 1 && j < size) snprintf(buf + j, size - j, " = %d", ts_mesh_batch_width(mesh));
    if (n == 0) snprintf(buf, size, "1 rank");
}

static void plan_state_text(const plan_result *r, const ts_mesh *mesh) {
    double w, st;
    int dp = ts_mesh_batch_width(mesh);
    char a[32], b[32], c[32], over[256];
    plan_state_numbers(r, &w, &st);
    plan_bytes(w, a, sizeof a);
    plan_bytes(st, b, sizeof b);
    plan_bytes(st / dp, c, sizeof c);
    plan_batch_axes(mesh, over, sizeof over);
    printf("model state (P = %zu parameters, %s): weights %s (%gP), model state %s (16P: "
           "weights, gradients, f32 master weights and Adam moments), fully sharded over %s "
           "%s per rank (16P/%d); this run keeps per rank %zu bytes (params + grads + "
           "optimizer)\n",
           r->numel, ts_dtype_name(r->dtype), a, w / (double)r->numel, b, over, c, dp,
           r->params + r->grads + r->optim);
}

static void plan_state_json(const plan_result *r, int dp) {
    double w, st;
    plan_state_numbers(r, &w, &st);
    printf("\"model_state\":{\"parameters\":%zu,\"dtype\":\"%s\",\"weights_bytes\":%.0f,"
           "\"state_bytes\":%.0f,\"dp\":%d,\"state_bytes_per_rank\":%.0f,"
           "\"run_bytes_per_rank\":%zu},",
           r->numel, ts_dtype_name(r->dtype), w, st, dp, st / dp, r->params + r->grads + r->optim);
}

/* The step's FLOPs of rank `rank`, and what recomputation adds. */
static void plan_flops_text(const plan_result *r, int rank) {
    double all = r->flops_fwd + r->flops_bwd + r->flops_re;
    printf("compute of rank %d per step: %.4g FLOPs (GEMMs and attention): forward %.4g, backward "
           "%.4g",
           rank, all, r->flops_fwd, r->flops_bwd);
    if (strcmp(r->recompute, "none") != 0)
        printf(", recomputed forwards %.4g (recompute = %s: +%.1f %% of the step without)",
               r->flops_re, r->recompute,
               r->flops_fwd + r->flops_bwd > 0 ? 100.0 * r->flops_re / (r->flops_fwd + r->flops_bwd)
                                               : 0.0);
    printf("\n");
}

/* Calls `fn` for every (group, op) with traffic in the dry run, world last:
 * all of it, or (recomputed = 1) what recomputed forwards started. */
static void plan_each_comm(const plan_result *r, ts_comm *world, int recomputed,
                           void (*fn)(const char *group, const char *op,
                                      const ts_comm_op_counter *c, int first)) {
    int first = 1;
    for (int i = 0; i <= r->par->ncomms; i++) {
        ts_comm *c = i < r->par->ncomms ? r->par->comms[i] : world;
        for (int op = 0; op < TS_COMM_NOPS; op++) {
            ts_comm_op_counter k = recomputed ? ts_comm_counter_recompute(c, (ts_comm_op)op)
                                              : ts_comm_counter(c, (ts_comm_op)op);
            if (k.calls == 0) continue;
            fn(ts_comm_name(c), ts_comm_op_name((ts_comm_op)op), &k, first);
            first = 0;
        }
    }
}

static void plan_comm_json(const char *group, const char *op, const ts_comm_op_counter *c,
                           int first) {
    printf("%s\"%s.%s\":{\"calls\":%llu,\"bytes\":%llu}", first ? "" : ",", group, op,
           (unsigned long long)c->calls, (unsigned long long)c->bytes);
}

/* How many (group, op) plan_each_comm visited last (plan_comm_count). */
static int plan_comm_counted;
static void plan_comm_count(const char *group, const char *op, const ts_comm_op_counter *c,
                            int first) {
    (void)group, (void)op, (void)c, (void)first;
    plan_comm_counted++;
}

static void plan_comm_text(const char *group, const char *op, const ts_comm_op_counter *c,
                           int first) {
    (void)first;
    printf("  %-9s %-15s %8llu calls %14llu bytes\n", group, op, (unsigned long long)c->calls,
           (unsigned long long)c->bytes);
}

static int cmd_plan(int argc, char **argv) {
    int rc = 0;
    if (cli_usage(argc, argv, usage_plan, &rc)) return rc;
    cli_opts opts = {.rank = 0};
    ts_config *cfg = NULL;
    ts_plugins *reg = NULL;
    ts_status st = load_config(argc, argv, &opts, &cfg, &reg);
    if (!st && opts.processes && !opts.search)
        st = ts_error(TS_ERR_CONFIG, "plan: --processes is an option of --search");
    if (st) {
        ts_plugins_destroy(reg);
        ts_config_destroy(cfg);
        return fail(st);
    }
    if (opts.calibrate) {
        /* under mpirun: every rank measures; rank 0 writes --cluster FILE
         * and, with --search, searches the layouts of this world */
        ts_plugins_destroy(reg);
        reg = NULL;
        if (!opts.cluster || strcmp(ts_config_str(cfg, "train", "device"), "cpu") != 0) {
            fprintf(stderr, "tessera: plan --calibrate %s\n",
                    !opts.cluster ? "needs --cluster FILE: where to write what it measures"
                                  : "measures this machine's CPU kernels and MPI: [train] device "
                                    "= cpu (for GPUs, give the cluster file their figures)");
            ts_config_destroy(cfg);
            return 2;
        }
        int world = 0, rank = 0;
        rc = cmd_plan_calibrate(cfg, &argc, &argv, opts.cluster, opts.json ? stderr : stdout,
                                &world, &rank);
        if (rc || !opts.search || rank != 0) {
            ts_config_destroy(cfg);
            return rc;
        }
        opts.world = world;
    }
    if (opts.search) {
        plan_search_opts so = {.world = opts.world,
                               .top = opts.top,
                               .jobs = opts.jobs,
                               .processes = opts.processes,
                               .json = opts.json,
                               .cluster = opts.cluster};
        ts_plugins_destroy(reg);
        rc = cmd_plan_search(cfg, &so);
        ts_config_destroy(cfg);
        return rc;
    }
    ts_mesh *mesh = NULL;
    if (opts.world < 1) {
        st = ts_error(TS_ERR_CONFIG, "tessera plan: --world N is required");
    } else {
        st = build_mesh(cfg, reg, opts.world, NULL, &mesh, NULL);
        if (!st && opts.rank >= opts.world)
            st = ts_error(TS_ERR_CONFIG, "tessera plan: --rank %d is not a rank of --world %d",
                          opts.rank, opts.world);
    }
    ts_train_shape shape;
    ts_layout_plan plan;
    ts_layout_plan_init(&plan);
    if (!st) st = ts_train_shape_resolve(cfg, ts_mesh_batch_width(mesh), &shape);
    if (!st)
        st = ts_model_layout_plan_arch(shape.arch, &shape.model, shape.global_batch, shape.T, mesh,
                                       &plan);
    if (!st) st = ts_plugins_apply_transforms(reg, &plan);
    ts_schedule_sim sim;
    memset(&sim, 0, sizeof sim);
    /* One unit a forward, a backward's input part and its weight part (a
     * whole backward two), as Qi et al. count them. */
    if (!st) st = plan_pipeline(reg, mesh, plan_chunks(mesh, &plan), &shape, 1, 1, 1, &sim);
    ts_comm *world = NULL;
    ts_parallel *par = NULL;
    plan_result est = {0};
    /* A mesh whose axes nothing implements yet (planning a mesh before its
     * strategies exist) is still described; only the prediction is missing,
     * and says why. Any other failure is an error. */
    char unbound[1024] = "";
    /* With a cluster (--cluster FILE, or CONFIG's [cluster]) the dry run's
     * clock predicts the step. */
    cluster cl;
    int timed = 0;
    if (!st && (opts.cluster || cluster_given(cfg))) {
        st = opts.cluster ? cluster_load(opts.cluster, &cl) : cluster_from_config(cfg, &cl);
        timed = !st;
    }
    ts_dry_run *dr = NULL;
    if (!st) st = ts_dry_run_create(&dr);
    if (!st) {
        st = plan_dry_run(dr, cfg, reg, opts.world, opts.rank, timed ? &cl : NULL, mesh, &world,
                          &par, &est);
        if (st == TS_ERR_PLUGIN) {
            snprintf(unbound, sizeof unbound, "%s", ts_last_error_bare());
            st = TS_OK;
        }
    }
    double bubble = sim.bubble_den ? (double)sim.bubble_num / (double)sim.bubble_den : 0.0;
    plan_time pt = {0};
    if (!st && timed && !unbound[0])
        st = plan_predict(&est.clock, NULL, est.dtype, reg, mesh, plan_chunks(mesh, &plan), &shape,
                          &cl, &pt);
    if (!st && opts.json) {
        size_t len = ts_mesh_json_format(mesh, NULL, 0);
        char *buf = malloc(len + 1);
        if (!buf) {
            st = ts_error(TS_ERR_NOMEM, "plan: out of memory");
        } else {
            ts_mesh_json_format(mesh, buf, len + 1);
            buf[len - 1] = '\0'; /* reopen the object: drop its closing brace */
            printf("%s,\"rank\":%d,", buf, opts.rank);
            if (unbound[0]) {
                printf("\"unbound\":\"");
                for (const char *c = unbound; *c; c++)
                    printf(*c == '"' || *c == '\\' ? "\\%c" : "%c", *c);
                printf("\",");
            } else {
                printf("\"memory\":{\"params\":%zu,\"grads\":%zu,\"optimizer\":%zu,"
                       "\"activations\":%zu,\"comm\":%zu,\"batch\":%zu},",
                       est.params, est.grads, est.optim, est.acts, est.comm, est.batch);
                printf("\"peak\":{\"params\":%zu,\"grads\":%zu,\"optimizer\":%zu,"
                       "\"total\":%zu},",
                       est.params_peak, est.grads_peak, est.optim_peak, est.total_peak);
                printf("\"activations_at_peak\":{");
                for (int k = 0; k < est.nact; k++)
                    printf("%s\"%s\":%zu", k ? "," : "", est.act_tag[k], est.act_bytes[k]);
                printf("},");
                plan_state_json(&est, ts_mesh_batch_width(mesh));
                printf("\"comm\":{");
                plan_each_comm(&est, world, 0, plan_comm_json);
                printf("},\"recompute\":\"%s\",\"flops\":{\"forward\":%.17g,\"backward\":%.17g,"
                       "\"recomputed\":%.17g},\"comm_recomputed\":{",
                       est.recompute, est.flops_fwd, est.flops_bwd, est.flops_re);
                plan_each_comm(&est, world, 1, plan_comm_json);
                printf("},");
            }
            if (timed && !unbound[0])
                printf("\"prediction\":{\"cluster\":\"%s\",\"step_s\":%.6g,\"compute_s\":%.6g,"
                       "\"comm_s\":%.6g,\"bubble_s\":%.6g,\"outside_s\":%.6g,\"forward_s\":%.6g,"
                       "\"backward_s\":%.6g,\"weight_s\":%.6g,\"tokens_per_s\":%.6g,\"mfu\":%.6g,"
                       "\"fits\":%s},",
                       cl.source, pt.step_s, pt.compute_s, pt.comm_s, pt.bubble_s, pt.outside_s,
                       pt.f_s, pt.b_s, pt.w_s, pt.tokens_per_s, pt.mfu,
                       (double)est.total_peak <= cl.memory ? "true" : "false");
            printf("\"schedule\":\"%s\",\"bubble\":%.6f,\"bubble_per_stage\":[",
                   sim.stages ? ts_plugins_scheduler_name(reg, 0) : "default", bubble);
            for (int s = 0; s < sim.stages; s++)
                printf("%s%.6f", s ? "," : "", plan_stage_bubble(&sim, s));
            printf("]}\n");
            free(buf);
        }
    } else if (!st) {
        printf("mesh: %d ranks, order %s (fastest-varying first)\n", ts_mesh_world(mesh),
               ts_mesh_order(mesh));
        for (int k = 0; k < 2; k++) {
            const char *names[TS_MESH_MAX_AXES];
            int n = ts_mesh_axes_of(mesh, (ts_mesh_kind)k, names, TS_MESH_MAX_AXES);
            printf("  %s", k ? "expert" : "dense ");
            for (int i = 0; i < n && i < TS_MESH_MAX_AXES; i++)
                printf("%s %s %d", i ? " x" : "", names[i], ts_mesh_size(mesh, names[i]));
            printf("\n");
        }
        if (opts.groups) {
            printf("groups:\n");
            print_groups(mesh, stdout);
        } else {
            printf("groups (axes and products of more than one rank; --groups lists them all):\n");
            print_groups_summary(mesh, stdout);
        }
        if (opts.layout) {
            printf("layout plan (rank 0's block in 'local'):\n");
            st = ts_layout_plan_print(&plan, stdout);
        }
        if (unbound[0]) printf("no prediction of memory and communication: %s\n", unbound);
        if (!unbound[0]) {
            char h[6][32];
            size_t v[6] = {est.params, est.grads, est.optim, est.acts, est.comm, est.batch};
            for (int k = 0; k < 6; k++)
                plan_bytes((double)v[k], h[k], sizeof h[k]);
            printf("memory of rank %d (a dry run of two steps: what it allocates):\n"
                   "  params       %14zu bytes %10s\n  grads        %14zu bytes %10s\n"
                   "  optimizer    %14zu bytes %10s\n  activations  %14zu bytes %10s (peak of "
                   "steps of %d micro-batches of %d x %d)\n  comm         %14zu bytes %10s (peak "
                   "of staging)\n  batch        %14zu bytes %10s\n",
                   opts.rank, est.params, h[0], est.grads, h[1], est.optim, h[2], est.acts, h[3],
                   shape.micro_batches, shape.B, shape.T, est.comm, h[4], est.batch, h[5]);
            for (int k = 0; k < est.nact; k++) {
                char b[32];
                plan_bytes((double)est.act_bytes[k], b, sizeof b);
                printf("    %-34s %14zu bytes %10s\n", est.act_tag[k], est.act_bytes[k], b);
            }
        }
        if (!unbound[0]) {
            printf("  peak during a step: params %zu, grads %zu, optimizer %zu, all %zu bytes\n",
                   est.params_peak, est.grads_peak, est.optim_peak, est.total_peak);
            plan_state_text(&est, mesh);
            plan_flops_text(&est, opts.rank);
            printf("communication of rank %d per step:\n", opts.rank);
            plan_each_comm(&est, world, 0, plan_comm_text);
            if (strcmp(est.recompute, "none") != 0) {
                plan_comm_counted = 0;
                plan_each_comm(&est, world, 1, plan_comm_count);
                printf("  of which recomputed forwards (recompute = %s):%s\n", est.recompute,
                       plan_comm_counted ? "" : " none");
                plan_each_comm(&est, world, 1, plan_comm_text);
            }
        }
        if (sim.stages && opts.timeline) {
            printf("pipeline schedule %s, %d micro-batches (unit-time model: a forward, a "
                   "backward's input part and its weight part take one slot each, a whole "
                   "backward two):\n",
                   ts_plugins_scheduler_name(reg, 0), shape.micro_batches);
            ts_schedule_timeline_print(&sim, stdout);
        } else if (sim.stages) {
            printf("pipeline: schedule %s, %d stages, %d micro-batches, %d chunk%s per rank: "
                   "bubble %.4f of the step (unit-time model; --timeline prints every stage's "
                   "slots)\n",
                   ts_plugins_scheduler_name(reg, 0), sim.stages, shape.micro_batches, sim.chunks,
                   sim.chunks == 1 ? "" : "s", bubble);
        } else {
            printf("pipeline bubble: 0 (one stage)\n");
        }
        if (timed && !unbound[0]) {
            char mem[32];
            plan_bytes(cl.memory, mem, sizeof mem);
            printf("predicted step of rank %d on %s: %.4g s = compute %.4g s + communication "
                   "not hidden %.4g s + pipeline idle %.4g s (a forward %.4g s, a backward "
                   "%.4g s%s); %.4g tokens/s, MFU %.1f %%; peak %zu bytes %s the %s a device "
                   "has\n",
                   opts.rank, cl.source, pt.step_s, pt.compute_s, pt.comm_s, pt.bubble_s, pt.f_s,
                   pt.b_s, pt.w_s > 0 ? ", its weight part apart" : "", pt.tokens_per_s,
                   100.0 * pt.mfu, est.total_peak,
                   (double)est.total_peak <= cl.memory ? "fits in" : "exceeds", mem);
        }
    }
    ts_layout_plan_free(&plan);
    ts_schedule_sim_free(&sim);
    rc = st ? fail(st) : 0;
    ts_parallel_destroy(par);
    ts_comm_free(world);
    ts_dry_run_destroy(dr);
    ts_mesh_destroy(mesh);
    ts_plugins_destroy(reg);
    ts_config_destroy(cfg);
    return rc;
}

static int cmd_plugins(int argc, char **argv) {
    if (wants_help(argc, argv)) {
        fputs(usage_plugins, stdout);
        return 0;
    }
    const char *config = NULL, *path = NULL;
    int rest = argc;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) {
            config = argv[i + 1];
            rest = i + 1; /* CONFIG and what follows are load_config's */
            break;
        } else if (strcmp(argv[i], "--plugin-path") == 0 && i + 1 < argc) {
            path = argv[++i];
        } else {
            fprintf(stderr, "tessera plugins: unexpected argument '%s'\n\n%s", argv[i],
                    usage_plugins);
            return 2;
        }
    }
    ts_config *cfg = NULL;
    ts_plugins *reg = NULL;
    ts_status st;
    if (config) {
        st = load_config(argc - rest, argv + rest, NULL, &cfg, &reg);
    } else {
        st = ts_plugins_create(&reg);
        if (!st) st = ts_plugins_discover(reg, path, stderr);
    }
    if (!st) st = ts_plugins_describe(reg, stdout);
    int rc = st ? fail(st) : 0;
    ts_plugins_destroy(reg);
    ts_config_destroy(cfg);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        fputs(usage_main, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    /* A file-size limit or a closed pipe makes write() fail (EFBIG, EPIPE),
     * which every writer reports naming its file, instead of killing the
     * process with SIGXFSZ or SIGPIPE. */
    signal(SIGXFSZ, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    int rc;
    if (strcmp(argv[1], "train") == 0)
        rc = cmd_train(argc - 2, argv + 2);
    else if (strcmp(argv[1], "export") == 0)
        rc = cmd_export(argc - 2, argv + 2);
    else if (strcmp(argv[1], "sample") == 0)
        rc = cmd_sample(argc - 2, argv + 2);
    else if (strcmp(argv[1], "reshard") == 0)
        rc = cmd_reshard(argc - 2, argv + 2);
    else if (strcmp(argv[1], "inspect") == 0)
        rc = cmd_inspect(argc - 2, argv + 2);
    else if (strcmp(argv[1], "verify") == 0)
        rc = cmd_verify(argc - 2, argv + 2);
    else if (strcmp(argv[1], "conform") == 0)
        rc = cmd_conform(argc - 2, argv + 2);
    else if (strcmp(argv[1], "report") == 0)
        rc = cmd_report(argc - 2, argv + 2);
    else if (strcmp(argv[1], "plan") == 0)
        rc = cmd_plan(argc - 2, argv + 2);
    else if (strcmp(argv[1], "plugins") == 0)
        rc = cmd_plugins(argc - 2, argv + 2);
    else {
        fprintf(stderr, "tessera: unknown command '%s'\n\n%s", argv[1], usage_main);
        return 2;
    }
    /* What was printed must have reached its destination (a full disk under
     * `tessera plan > FILE` is a failure, not a silent truncation). */
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tessera: cannot write the standard output: %s\n",
                errno ? strerror(errno) : "stream error");
        if (rc == 0) rc = 1;
    }
    return rc;
}
