# Activation recomputation changes no bit: on the same topology, [train]
# recompute = selective and full (and the variants named) give the
# same losses, gradient norms (and MoE losses) at every step and the same
# final weights, byte for byte, as recompute = none, in f32 and in bf16:
# every recomputed forward runs the same kernels on the same inputs, its
# collectives again, an MoE layer's routing reused. And the run equals one
# rank within TOL (the strategy's own tolerance; TOL none: a configuration
# that differs from one rank by design, held to its own topology alone).
# Usage:
#   recompute.sh TESSERA SRC NP MICRO DTYPE TOL MODE [recompute=V,V...] [--set ...]
# with the arguments of equivalence.sh (NP 1: no mpirun, the one-rank run
# against itself); the variants V are MODE[/METHOD/LAYERS] (default
# selective,full,full/uniform/2: groups of two blocks keeping one input).
. "$(dirname "$0")/multirank.sh"
NP=$1 MICRO=$2 DTYPE=$3 TOL=$4 MODE=$5
shift 5
VARIANTS="selective full full/uniform/2"
case "${1:-}" in
recompute=*) VARIANTS=$(echo "${1#recompute=}" | tr , ' '); shift ;;
esac
PARALLEL=("$@")
STEPS=8
EXTRA_SET=(--set train.dtype=$DTYPE --set train.steps=$STEPS)
write_config
apply_mode "$MODE"
launch() { # NAME SETS...: NP ranks (1: no mpirun)
    local name=$1
    shift
    if [ "$NP" = 1 ]; then
        "$TESSERA" train model.ini "${EXTRA_SET[@]}" "$@" --set train.checkpoint_dir=$name \
            --set train.metrics=$name.jsonl > $name.txt 2>&1
    else
        run_mpi "$NP" "$TESSERA" train model.ini "${EXTRA_SET[@]}" "${PARALLEL[@]}" "$@" \
            --set train.micro_batch="$MICRO" --set train.checkpoint_dir=$name \
            --set train.metrics=$name.jsonl > $name.txt 2>&1
    fi || { cat $name.txt; fail "$name: run failed"; }
    "$TESSERA" export model.ini "${EXTRA_SET[@]}" --set train.checkpoint_dir=$name \
        --out $name.bin > /dev/null || fail "export of $name failed"
}
[ "$TOL" = none ] || "$TESSERA" train model.ini "${EXTRA_SET[@]}" --set train.checkpoint_dir=ref \
    --set train.metrics=ref.jsonl > ref.txt 2>&1 || { cat ref.txt; fail "one-rank run failed"; }
launch none --set train.recompute=none
[ "$NP" = 1 ] || grep -q "^parallel: $NP ranks" none.txt || { cat none.txt; fail "not $NP ranks"; }
for v in $VARIANTS; do
    IFS=/ read -r mode method layers <<< "$v"
    name=$(echo "$v" | tr / _)
    launch $name --set train.recompute=$mode --set train.recompute_method=${method:-uniform} \
        --set train.recompute_layers=${layers:-0}
    python3 - none.jsonl $name.jsonl <<'PY' || fail "$v: not the same bits as recompute = none"
import json, sys
# The numbers as written (shortest round-trip text of the f32/f64 value):
# equal text is equal bits.
def fields(path):
    out = []
    for line in open(path):
        m = json.loads(line)
        moe = m.get("moe") or {}
        out.append((m["step"], repr(m["loss"]), repr(m["grad_norm"]),
                    repr(moe.get("aux_loss")), repr(moe.get("z_loss"))))
    return out
a, b = fields(sys.argv[1]), fields(sys.argv[2])
assert len(a) == len(b) and a, (len(a), len(b))
for x, y in zip(a, b):
    if x != y:
        sys.exit("step %s: recompute = none gives %s, this %s" % (x[0], x[1:], y[1:]))
print("%s: %d steps, loss and grad_norm equal as written (last loss %s, norm %s)" %
      (sys.argv[2][:-6], len(a), a[-1][1], a[-1][2]))
PY
    cmp none.bin $name.bin || fail "$v: final weights differ from recompute = none"
    echo "ok $v: final weights byte-identical to recompute = none ($(wc -c < $name.bin) bytes)"
done
[ "$TOL" = none ] || compare_runs ref none "$TOL"
echo "PASS: $NP ranks (${PARALLEL[*]}) $DTYPE: $VARIANTS bit for bit as none; none within $TOL of one rank"
