# Checkpoints with every stage, dp = 2: 10 steps, then 10 more resumed from
# the step-10 checkpoint, repeat an uninterrupted 20-step run bit for bit
# (losses, gradient norms, and the final weights byte for byte), since the
# checkpoint holds every rank's blocks, ranges and moments gathered whole.
# And the state is interchangeable with runs without zero: 10 steps with the
# stage resumed with plain dp, and 10 with plain dp resumed with the stage,
# end within 1e-5 of the uninterrupted run (the reductions sum in another
# order).
. "$2/tests/cli/multirank.sh"
write_config
run() { # NAME STEPS PLUGINS_SETS...
    local name=$1 steps=$2
    shift 2
    run_mpi 2 "$TESSERA" train model.ini --set train.micro_batch=8 --set train.steps=$steps \
        --set train.decay_steps=20 --set train.checkpoint_dir=$name --set train.resume=auto \
        --set train.metrics=$name.jsonl "$@" > $name.$steps.txt 2>&1 ||
        { cat $name.$steps.txt; fail "$name ($steps steps)"; }
}
exported() { # DIR
    "$TESSERA" export model.ini --set train.checkpoint_dir=$1 --out $1.bin > /dev/null || fail "export $1"
}
for st in 1 2 3; do
    z=(--set parallel.plugins=dp,zero --set zero.stage=$st)
    d=(--set parallel.plugins=dp)
    run full$st 20 "${z[@]}"
    run part$st 10 "${z[@]}"
    run part$st 20 "${z[@]}"
    grep -q "resumed from part$st/ckpt-00000010 at step 10" part$st.20.txt || fail "stage $st: no resume"
    python3 - full$st.jsonl part$st.jsonl <<'PY' || fail "stage $st: resumed run differs"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 20, (len(a), len(b))
for x, y in zip(a, b):
    assert (x["loss"], x["grad_norm"]) == (y["loss"], y["grad_norm"]), (x["step"], x["loss"], y["loss"])
PY
    exported full$st
    exported part$st
    cmp -s full$st.bin part$st.bin || fail "stage $st: final weights differ after resume"
    echo "stage $st: 10 + 10 steps resumed = 20 steps, bit for bit"
    run zd$st 10 "${z[@]}"
    run zd$st 20 "${d[@]}"
    run dz$st 10 "${d[@]}"
    run dz$st 20 "${z[@]}"
    for x in zd$st dz$st; do
        python3 - full$st.jsonl $x.jsonl <<'PY' || fail "$x: differs"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 20, (len(a), len(b))
worst = max(abs(x[k] - y[k]) / abs(x[k]) for x, y in zip(a, b) for k in ("loss", "grad_norm"))
assert worst <= 1e-5, worst
print("%s: worst relative difference %.2e against the uninterrupted run" % (sys.argv[2], worst))
PY
    done
done
echo PASS
