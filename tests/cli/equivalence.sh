# Equivalence: N ranks train exactly what one rank trains on the same global
# batch. Usage:
#   equivalence.sh TESSERA SRC NP MICRO DTYPE TOL MODE [--set section.key=value ...]
#   MICRO  micro_batch per rank in the parallel run (16 / (dp * MICRO)
#          micro-batches accumulate)
#   TOL    relative tolerance on every step's loss and gradient norm (x10)
#          and on the final weights
#   --set  what makes the parallel run parallel (plugins and their keys)
#   MODE   plain, layers=N (both runs use N layers), set=S.K=V[,S.K=V...]
#          (keys of both runs), or
#   masked train on text whose spaces are masked targets ([data]
#          ignore_token = 32), dense in the first half of every batch and
#          sparse in the second, so ranks hold very different numbers of
#          valid tokens: equivalence then needs the loss normalised by the
#          global count, not per rank
. "$(dirname "$0")/multirank.sh"
NP=$1 MICRO=$2 DTYPE=$3 TOL=$4 MODE=$5
shift 5
PARALLEL=("$@")
EXTRA_SET=(--set train.dtype=$DTYPE)
write_config
apply_mode "$MODE"
if [ "$MODE" = masked ]; then
    python3 - <<'PY'
import random
random.seed(3)
out = []
for w in range(2400):  # windows of 32 tokens; batches of 16 windows
    dense = (w % 16) < 8
    for _ in range(32):
        out.append(" " if random.random() < (0.8 if dense else 0.05)
                   else random.choice("abcdefghij"))
open("data.txt", "w").write("".join(out) + "x")
PY
    EXTRA_SET+=(--set data.source=text:data.txt --set data.ignore_token=32)
fi
"$TESSERA" train model.ini "${EXTRA_SET[@]}" --set train.checkpoint_dir=ref \
    --set train.metrics=ref.jsonl > ref.txt 2>&1 || { cat ref.txt; fail "one-rank run failed"; }
run_mpi "$NP" "$TESSERA" train model.ini "${EXTRA_SET[@]}" "${PARALLEL[@]}" \
    --set train.micro_batch="$MICRO" --set train.checkpoint_dir=par --set train.metrics=par.jsonl \
    > par.txt 2>&1 || { cat par.txt; fail "run on $NP ranks failed"; }
grep -q "^parallel: $NP ranks" par.txt || { cat par.txt; fail "the run did not use $NP ranks"; }
grep "^parallel:" par.txt
compare_runs ref par "$TOL"
echo "PASS: $NP ranks (${PARALLEL[*]}) micro_batch=$MICRO $DTYPE $MODE within $TOL"
