# cuda_train.sh — [train] device = cuda, end to end on one GPU.
#   bash cuda_train.sh TESSERA SRC PROBE MODE
# PROBE is tessera_cuda_probe (exit 0 with a device, 77 without). MODE:
#   matches_cpu  (needs a GPU, else exit 77 = skipped) configs/tiny.ini for 10
#                steps in f32 on the CPU and on the GPU: the losses agree
#                within 1e-4 relative at every step and the gradient norms
#                within 1e-3; bf16 on both within 2e-2, and the GPU's bf16
#                GEMMs in chunks of 64 rows within 1e-3 of whole; a GPU run resumed
#                from its step-5 checkpoint repeats the uninterrupted run's
#                last 5 losses (within 1e-6); the exported weights of the
#                GPU run are close to the CPU run's.
#   multi_gpu    (needs 2 GPUs, else exit 77) dp 2, tp 2 with sequence
#                parallelism, and pp 2 (1F1B) on 2 GPUs over NCCL, each
#                against the one-rank CPU run (losses within 1e-4, norms
#                1e-3), and each moving, per step, the same collectives with
#                the same bytes under the same groups as the same job on 2
#                CPU ranks over MPI.
#   no_device    (needs NO GPU, else exit 77) device = cuda fails with a
#                message naming [train] device and why, exit status non-zero,
#                on one rank and on 2 ranks (with dp, where every rank stops
#                at the same point: no hang).
. "$(dirname "$0")/lib.sh"
PROBE=$3
MODE=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$PROBE"
have=$?
[ $have -eq 0 ] || [ $have -eq 77 ] || fail "the probe failed ($have)"

train() { # NAME settings...
    local name=$1
    shift
    "$TESSERA" train "$SRC/configs/tiny.ini" --set train.steps=10 --set train.metrics=$name.jsonl \
        "$@" > $name.txt 2>&1 || { cat $name.txt; fail "run $name failed"; }
}

# compare A.jsonl B.jsonl LOSS_TOL NORM_TOL [FIRST_STEP]
compare() {
    python3 - "$@" <<'PY' || fail "$1 and $2 differ"
import json, sys
a = {m["step"]: m for m in map(json.loads, open(sys.argv[1]))}
b = {m["step"]: m for m in map(json.loads, open(sys.argv[2]))}
tol, ntol = float(sys.argv[3]), float(sys.argv[4])
first = int(sys.argv[5]) if len(sys.argv) > 5 else 1
steps = [s for s in sorted(a) if s >= first]
assert steps and steps == [s for s in sorted(b) if s >= first], (sorted(a), sorted(b))
worst = 0.0
for s in steps:
    rel = abs(a[s]["loss"] - b[s]["loss"]) / abs(a[s]["loss"])
    nrel = abs(a[s]["grad_norm"] - b[s]["grad_norm"]) / a[s]["grad_norm"]
    worst = max(worst, rel)
    if rel > tol or nrel > ntol:
        sys.exit("step %d: loss %.9g vs %.9g (rel %.2e, tol %.0e), norm %.9g vs %.9g (rel %.2e)"
                 % (s, a[s]["loss"], b[s]["loss"], rel, tol, a[s]["grad_norm"],
                    b[s]["grad_norm"], nrel))
print("%s vs %s: worst loss difference %.2e relative over steps %d-%d"
      % (sys.argv[1], sys.argv[2], worst, steps[0], steps[-1]))
PY
}

case $MODE in
matches_cpu)
    [ $have -eq 0 ] || exit 77
    train cpu --set train.device=cpu --set train.checkpoint_dir=ckpt_cpu
    train gpu --set train.device=cuda --set train.checkpoint_dir=ckpt_gpu \
        --set train.checkpoint_every=5
    grep -q "device cuda:" gpu.txt || fail "the GPU run's header does not name the device"
    compare cpu.jsonl gpu.jsonl 1e-4 1e-3
    train cpu_bf16 --set train.device=cpu --set train.dtype=bf16
    train gpu_bf16 --set train.device=cuda --set train.dtype=bf16
    compare cpu_bf16.jsonl gpu_bf16.jsonl 2e-2 1e-1
    # The bf16 GEMMs in chunks of 64 rows (a 64 KiB operand scratch instead
    # of whole operands): the same training up to f32 summation order.
    TESSERA_BF16_GEMM_SCRATCH_KB=64 train gpu_bf16_chunked --set train.device=cuda \
        --set train.dtype=bf16
    compare gpu_bf16.jsonl gpu_bf16_chunked.jsonl 1e-3 1e-2
    # Resume: the step-5 checkpoint alone (the step-10 one moved away).
    mkdir -p resume && cp -r ckpt_gpu/ckpt-00000005 resume/ || fail "no step-5 checkpoint"
    train resumed --set train.device=cuda --set train.checkpoint_dir=resume \
        --set train.resume=auto
    grep -q "resumed from" resumed.txt || fail "the GPU run did not resume"
    compare gpu.jsonl resumed.jsonl 1e-6 1e-5 6
    # Export (device to host) of both runs' final weights.
    for d in cpu gpu; do
        "$TESSERA" export "$SRC/configs/tiny.ini" --set train.device=$([ $d = cpu ] && echo cpu || echo cuda) \
            --set train.checkpoint_dir=ckpt_$d --out $d.bin > export_$d.txt 2>&1 ||
            { cat export_$d.txt; fail "export of the $d run failed"; }
    done
    python3 - <<'PY' || fail "exported weights differ"
import math
from array import array
def weights(path):
    w = array("f")
    with open(path, "rb") as f:
        f.seek(1024)
        w.frombytes(f.read())
    return w
a, b = weights("cpu.bin"), weights("gpu.bin")
assert len(a) == len(b) and len(a) > 0
rel = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b)) / sum(x * x for x in a))
print("exported weights: relative L2 difference %.2e" % rel)
if rel > 1e-3:
    raise SystemExit("relative L2 difference %.2e > 1e-3" % rel)
PY
    ;;
multi_gpu)
    "$PROBE" 2 || exit 77
    train cpu --set train.device=cpu
    for c in "dp|--set parallel.plugins=dp" \
        "tp|--set parallel.plugins=tp --set tp.size=2 --set tp.sequence_parallel=true" \
        "pp|--set parallel.plugins=pp --set pp.size=2 --set pp.schedule=1f1b --set train.micro_batch=4"; do
        name=${c%%|*}
        sets=(${c#*|})
        for d in cpu cuda; do
            timeout 300 mpirun --oversubscribe -np 2 "$TESSERA" train "$SRC/configs/tiny.ini" \
                --set train.steps=10 --set train.device=$d --set train.metrics=${name}_$d.jsonl \
                "${sets[@]}" > ${name}_$d.txt 2>&1 || { cat ${name}_$d.txt; fail "$name on 2 $d ranks failed"; }
        done
        grep -q "device cuda:" ${name}_cuda.txt || fail "$name: the GPU run does not name its device"
        compare cpu.jsonl ${name}_cuda.jsonl 1e-4 1e-3
        python3 - ${name}_cpu.jsonl ${name}_cuda.jsonl <<'PY' || fail "$name: the collectives differ"
import json, sys
a, b = (list(map(json.loads, open(p))) for p in sys.argv[1:3])
def moved(m):  # group -> op -> (calls, bytes)
    return {g: {o: (v["calls"], v["bytes"]) for o, v in ops.items()} for g, ops in m["comm"].items()}
for x, y in zip(a, b):
    if moved(x) != moved(y):
        sys.exit("step %d: MPI %s, NCCL %s" % (x["step"], moved(x), moved(y)))
print("%s: the same collectives and bytes per step on MPI and NCCL" % sys.argv[2])
PY
    done
    ;;
no_device)
    [ $have -eq 77 ] || exit 77
    "$TESSERA" train "$SRC/configs/tiny.ini" --set train.device=cuda --set train.steps=1 \
        > out.txt 2>&1 && { cat out.txt; fail "device = cuda without a GPU succeeded"; }
    cat out.txt
    grep -q "\[train\] device" out.txt || fail "the message does not name [train] device"
    grep -Eq "no CUDA device|no CUDA" out.txt || fail "the message does not say there is no device"
    timeout 120 mpirun --oversubscribe -np 2 "$TESSERA" train "$SRC/configs/tiny.ini" \
        --set parallel.plugins=dp --set train.device=cuda --set train.steps=1 \
        > np2.txt 2>&1 && { cat np2.txt; fail "device = cuda on 2 ranks succeeded"; }
    grep -q "\[train\] device" np2.txt && grep -Eq "no CUDA" np2.txt ||
        { cat np2.txt; fail "2 ranks: the message does not name [train] device and the cause"; }
    ;;
*) fail "unknown mode '$MODE'" ;;
esac
echo PASS
