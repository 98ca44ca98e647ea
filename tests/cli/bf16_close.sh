# bf16 storage and activations train the tiny config to a final loss within
# 2% of f32 (the same data and initial weights; only rounding differs).
. "$(dirname "$0")/lib.sh"
for dt in fp32 bf16; do
    "$TESSERA" train "$SRC/configs/tiny.ini" --set train.dtype=$dt --set train.metrics=$dt.jsonl \
        > $dt.txt 2>&1 || { cat $dt.txt; fail "$dt training failed"; }
done
steps=$(wc -l < fp32.jsonl)
f=$(metric fp32.jsonl "$steps" loss)
b=$(metric bf16.jsonl "$steps" loss)
echo "final loss fp32=$f bf16=$b"
grep -q "bf16" bf16.txt || fail "the bf16 run does not say it uses bf16"
awk -v f="$f" -v b="$b" 'BEGIN { d = (b - f) / f; if (d < 0) d = -d; exit !(d <= 0.02) }' ||
    fail "bf16 final loss $b is not within 2% of f32's $f"
[ "$f" != "$b" ] || fail "bf16 and f32 losses are identical: is bf16 really in effect?"
echo PASS
