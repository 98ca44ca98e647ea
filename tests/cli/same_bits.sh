# Two configurations that must compute the same bits: the same model, data
# and topology run with the settings A and with the settings B give the same
# losses and gradient norms at every step (as written: equal text is equal
# bits) and byte-identical final weights. Usage:
#   same_bits.sh TESSERA SRC NP MICRO DTYPE MODE [--set ...] -- A-SETS... -- B-SETS...
# the common sets first (MODE as equivalence.sh's), then A's and B's.
. "$(dirname "$0")/multirank.sh"
NP=$1 MICRO=$2 DTYPE=$3 MODE=$4
shift 4
COMMON=() A=() B=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do COMMON+=("$1"); shift; done
shift
while [ $# -gt 0 ] && [ "$1" != -- ]; do A+=("$1"); shift; done
shift
B=("$@")
STEPS=8
EXTRA_SET=(--set train.dtype=$DTYPE --set train.steps=$STEPS)
write_config
apply_mode "$MODE"
run() { # NAME SETS...
    local name=$1
    shift
    run_mpi "$NP" "$TESSERA" train model.ini "${EXTRA_SET[@]}" "${COMMON[@]}" "$@" \
        --set train.micro_batch="$MICRO" --set train.checkpoint_dir=$name \
        --set train.metrics=$name.jsonl > $name.txt 2>&1 || { cat $name.txt; fail "$name: run failed"; }
    "$TESSERA" export model.ini "${EXTRA_SET[@]}" --set train.checkpoint_dir=$name --out $name.bin \
        > /dev/null || fail "export of $name failed"
}
run a "${A[@]}"
run b "${B[@]}"
python3 - a.jsonl b.jsonl <<'PY' || fail "A and B do not give the same bits"
import json, sys
def fields(path):
    return [(json.loads(l)["step"], repr(json.loads(l)["loss"]), repr(json.loads(l)["grad_norm"]))
            for l in open(path)]
a, b = fields(sys.argv[1]), fields(sys.argv[2])
assert len(a) == len(b) and a, (len(a), len(b))
for x, y in zip(a, b):
    if x != y:
        sys.exit("step %s: A gives loss %s norm %s, B %s %s" % (x[0], x[1], x[2], y[1], y[2]))
print("%d steps: the same losses and norms as written (last %s, %s)" % (len(a), a[-1][1], a[-1][2]))
PY
cmp a.bin b.bin || fail "final weights differ"
echo "PASS: $NP ranks (${COMMON[*]}): (${A[*]}) and (${B[*]}) give the same bits, weights included"
