# The default job learns: the loss starts near ln(vocab) and ends below the
# midpoint between ln(vocab) and the source's entropy rate.
. "$(dirname "$0")/lib.sh"
"$TESSERA" train "$SRC/configs/tiny.ini" --set train.metrics=m.jsonl > out.txt 2>&1 ||
    { cat out.txt; fail "training failed"; }
lnv=$(sed -nE 's/.*ln\(vocab\) = ([0-9.]+).*/\1/p' out.txt)
h=$(sed -nE 's/.*entropy rate of the source = ([0-9.]+).*/\1/p' out.txt)
[ -n "$lnv" ] && [ -n "$h" ] || fail "the run did not print ln(vocab) and the entropy rate"
steps=$(wc -l < m.jsonl)
first=$(metric m.jsonl 1 loss)
last=$(metric m.jsonl "$steps" loss)
echo "ln(vocab)=$lnv entropy=$h first=$first last=$last after $steps steps"
awk -v a="$first" -v l="$lnv" 'BEGIN { exit !(a > 0.9 * l && a < 1.1 * l) }' ||
    fail "first loss $first is not about ln(vocab) = $lnv"
awk -v f="$last" -v l="$lnv" -v h="$h" 'BEGIN { exit !(f < (l + h) / 2) }' ||
    fail "final loss $last is not below the midpoint of $lnv and $h"
echo PASS
