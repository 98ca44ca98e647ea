# Equivalence: N data-parallel ranks train exactly what one rank trains on
# the same global batch. Usage: equivalence.sh TESSERA SRC NP MICRO DTYPE TOL [masked]
#   MICRO  micro_batch per rank (16 / (NP * MICRO) micro-batches accumulate)
#   TOL    relative tolerance on every step's loss and on the final weights
#   masked train on text whose spaces are masked targets ([data]
#          ignore_token = 32), dense in the first half of every batch and
#          sparse in the second, so ranks hold very different numbers of
#          valid tokens: equivalence then needs the loss normalised by the
#          global count, not per rank
. "$(dirname "$0")/common.sh"
NP=$1 MICRO=$2 DTYPE=$3 TOL=$4 MODE=${5:-plain}
EXTRA_SET=(--set train.dtype=$DTYPE)
write_config
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
run_mpi "$NP" "$TESSERA" train model.ini "${EXTRA_SET[@]}" --set parallel.plugins=dp \
    --set train.micro_batch="$MICRO" --set train.checkpoint_dir=dp --set train.metrics=dp.jsonl \
    > dp.txt 2>&1 || { cat dp.txt; fail "dp run on $NP ranks failed"; }
grep -q "batch in $NP parts ($((16 / NP / MICRO)) micro-batches of $MICRO per rank)" dp.txt ||
    { cat dp.txt; fail "the run did not split the batch over $NP ranks"; }
compare_runs ref dp "$TOL"
echo "PASS: dp=$NP micro_batch=$MICRO $DTYPE $MODE within $TOL"
