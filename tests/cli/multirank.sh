# multirank.sh — shared by the multi-rank test scripts of the core and of
# every plugin's suite: a scratch directory, the small equivalence model,
# mpirun with the flags a small shared machine needs, and a comparison of two
# runs (losses and gradient norms per step, final weights).
# Scripts are run as: bash SCRIPT TESSERA SRC [args...]
set -u
TESSERA=$1
SRC=$2
shift 2
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tessera-mr.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

fail() { echo "FAIL: $*" >&2; exit 1; }

run_mpi() { # NP args...
    local np=$1
    shift
    timeout 240 mpirun --oversubscribe --bind-to none -np "$np" "$@"
}

# The model and data every equivalence run uses: 2 layers, width 64, 4 heads,
# synthetic data, 20 steps of a global batch of 16 sequences of 32 tokens.
write_config() {
    cat > model.ini <<'INI'
[model]
layers = 2
d_model = 64
heads = 4
vocab = 256
context = 64
[data]
source = synthetic
synthetic_tokens = 65536
[train]
steps = 20
seq_len = 32
global_batch = 16
micro_batch = 16
lr = 2e-3
warmup = 3
min_lr = 2e-4
grad_clip = 1.0
seed = 7
INI
}

# apply_mode MODE: the keys MODE gives every run, appended to EXTRA_SET:
# plain (none), layers=N, or set=S.K=V[,S.K=V...].
apply_mode() {
    case "$1" in
    layers=*) EXTRA_SET+=(--set model.layers=${1#layers=}) ;;
    set=*) local keys k
        IFS=, read -ra keys <<< "${1#set=}"
        for k in "${keys[@]}"; do EXTRA_SET+=(--set "$k"); done ;;
    esac
}

# compare REF_DIR RUN_DIR TOL: losses of every step and the final weights
# (exported as llm.c files) agree within TOL, relative. Both runs have
# $STEPS steps (20 unless the script sets it).
compare_runs() {
    local ref=$1 run=$2 tol=$3
    "$TESSERA" export model.ini --set train.checkpoint_dir="$ref" --out "$ref.bin" "${EXTRA_SET[@]}" > /dev/null ||
        fail "export of $ref failed"
    "$TESSERA" export model.ini --set train.checkpoint_dir="$run" --out "$run.bin" "${EXTRA_SET[@]}" > /dev/null ||
        fail "export of $run failed"
    python3 - "$ref.jsonl" "$run.jsonl" "$ref.bin" "$run.bin" "$tol" "${STEPS:-20}" <<'PY' || fail "runs differ"
import json, math, sys
from array import array
ref = [json.loads(l) for l in open(sys.argv[1])]
run = [json.loads(l) for l in open(sys.argv[2])]
tol = float(sys.argv[5])
steps = int(sys.argv[6])
assert len(ref) == len(run) == steps, (len(ref), len(run), steps)
worst = 0.0
for a, b in zip(ref, run):
    rel = abs(a["loss"] - b["loss"]) / abs(a["loss"])
    worst = max(worst, rel)
    if rel > tol:
        sys.exit("step %d: loss %.9g vs %.9g (relative %.2e > %.0e)" % (a["step"], a["loss"], b["loss"], rel, tol))
    # The global gradient norm counts every parameter once, however many
    # ranks hold a replica (a double count would show as a factor sqrt(dp)).
    nrel = abs(a["grad_norm"] - b["grad_norm"]) / a["grad_norm"]
    if nrel > 10 * tol:
        sys.exit("step %d: grad_norm %.9g vs %.9g (relative %.2e)" % (a["step"], a["grad_norm"], b["grad_norm"], nrel))
def weights(path):
    w = array("f")
    with open(path, "rb") as f:
        f.seek(1024)
        w.frombytes(f.read())
    return w
wa, wb = weights(sys.argv[3]), weights(sys.argv[4])
assert len(wa) == len(wb)
num = sum((x - y) ** 2 for x, y in zip(wa, wb))
den = sum(x * x for x in wa)
prel = math.sqrt(num / den)
pmax = max(abs(x - y) for x, y in zip(wa, wb))
print("losses: worst relative difference %.2e over %d steps (first %.6f, last %.6f); "
      "final weights: relative L2 difference %.2e, largest element difference %.2e"
      % (worst, steps, ref[0]["loss"], ref[-1]["loss"], prel, pmax))
if prel > tol:
    sys.exit("final weights differ: relative L2 %.2e > %.0e" % (prel, tol))
PY
}

# expect NAME REGEX NP args...: `tessera args...` on NP ranks (1: without
# mpirun) must fail cleanly (non-zero, not a signal) with a message matching
# REGEX; the matching line is printed. For the bad-input scripts.
expect() { # NAME REGEX NP args...
    local name=$1 regex=$2 np=$3
    shift 3
    if [ "$np" = 1 ]; then
        "$TESSERA" "$@" > $name.txt 2>&1
    else
        run_mpi "$np" "$TESSERA" "$@" > $name.txt 2>&1
    fi
    local rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 128 ] || { cat $name.txt; fail "$name: exit status $rc"; }
    grep -qE "$regex" $name.txt || { cat $name.txt; fail "$name: message does not match /$regex/"; }
    echo "ok $name: $(grep -m1 -E "$regex" $name.txt)"
}

# both NAME REGEX NP sets...: expect the same refusal from `tessera plan
# model.ini --world NP` and from training on NP ranks.
both() { # NAME REGEX NP sets...
    local name=$1 regex=$2 np=$3
    shift 3
    expect ${name}_plan "$regex" 1 plan model.ini --world "$np" "$@"
    expect ${name}_run "$regex" "$np" train model.ini "$@"
}

# train_and_plan NAME NP [CONFIG] -- sets...: train CONFIG (default
# model.ini) on NP ranks (1: without mpirun) with metrics NAME.jsonl, and
# `tessera plan` it for rank 0 of NP into NAME.plan.json; either failing
# fails the test with its output. For the scripts that hold a run's
# counters to the plan's.
train_and_plan() { # NAME NP [CONFIG] -- sets...
    local name=$1 np=$2 config=model.ini
    shift 2
    if [ "$1" != "--" ]; then config=$1; shift; fi
    shift
    if [ "$np" = 1 ]; then
        "$TESSERA" train "$config" "$@" --set train.metrics=$name.jsonl > $name.txt 2>&1
    else
        run_mpi "$np" "$TESSERA" train "$config" "$@" --set train.metrics=$name.jsonl > $name.txt 2>&1
    fi || { cat $name.txt; fail "$name: run"; }
    "$TESSERA" plan "$config" --world "$np" --json "$@" > $name.plan.json 2> $name.plan.err ||
        { cat $name.plan.err; fail "$name: plan"; }
}
