# A module's saved activations and outputs come unzeroed (alloc_uninit,
# core/backend/backend.h): its forward must write every float before its
# backward or the next module reads one. With TESSERA_POISON_UNINIT=1 the CPU
# backend fills those blocks with NaN; a float read before it is written
# then reaches the loss. Training with and without the poison gives the same
# losses and gradient norms, bit for bit: dense blocks, then MoE blocks (a
# capacity that drops tokens), each over a few steps of reused blocks.
. "$(dirname "$0")/lib.sh"
run() { # NAME POISON ARGS...
    local name=$1 poison=$2
    shift 2
    TESSERA_POISON_UNINIT=$poison "$TESSERA" train "$SRC/configs/tiny.ini" --set train.steps=6 \
        --set train.metrics=$name.jsonl "$@" > $name.txt 2>&1 || { cat $name.txt; fail "$name failed"; }
    python3 - $name.jsonl > $name.bits <<'PY'
import json, math, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    if "loss" in d:
        assert math.isfinite(d["loss"]), "loss %r at step %d" % (d["loss"], d["step"])
        print(d["step"], repr(d["loss"]), repr(d["grad_norm"]))
PY
    [ "$(wc -l < $name.bits)" -eq 6 ] || fail "$name: expected 6 finite steps, got $(wc -l < $name.bits)"
}
for kind in dense moe; do
    args=()
    [ $kind = moe ] && args=(--set model.experts=4 --set model.top_k=2
        --set model.capacity_factor=1.0)
    run ${kind}0 0 "${args[@]}"
    run ${kind}1 1 "${args[@]}"
    cmp -s ${kind}0.bits ${kind}1.bits ||
        { diff ${kind}0.bits ${kind}1.bits | head; fail "$kind: poisoned blocks change the run"; }
    echo "$kind: 6 steps identical with NaN-poisoned saved blocks; last: $(tail -1 ${kind}1.bits)"
done
echo PASS
