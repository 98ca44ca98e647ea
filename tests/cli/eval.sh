# The held-out loss ([data] split / val_source, [train] eval_every and
# eval_batches): forward only over the same mesh and plugins, it equals one
# rank's within 1e-5 relative (f32; only reduction orders differ) on dp 2,
# tp 2 + SP, pp 2 (1F1B) and dp 2 x pp 2; split keeps the training and
# held-out tokens apart (their ranges meet at one cut); bad input is refused
# with the key named.
# Usage: eval.sh TESSERA SRC
. "$(dirname "$0")/multirank.sh"
write_config
ev=(--set data.split=0.1 --set train.eval_every=5 --set train.eval_batches=2)
"$TESSERA" train model.ini "${ev[@]}" --set train.metrics=one.jsonl > one.txt 2>&1 ||
    { cat one.txt; fail "one-rank run failed"; }
grep -E "^(data|held-out data):" one.txt
train_range=$(sed -nE 's/^data: .*training tokens \[0, ([0-9]+)\).*/\1/p' one.txt)
val_from=$(sed -nE 's/^held-out data: .*held-out tokens \[([0-9]+), 65536\).*/\1/p' one.txt)
[ -n "$train_range" ] && [ "$train_range" = "$val_from" ] ||
    fail "the training part [0, $train_range) and the held-out part [$val_from, 65536) do not meet at one cut"
grep -qE "^step    20/20 \| loss [0-9.]+ \| val [0-9.]+ \|" one.txt || fail "no val on the step line"
check() { # NAME NP SETS...
    local name=$1 np=$2
    shift 2
    run_mpi $np "$TESSERA" train model.ini "${ev[@]}" "$@" --set train.metrics=$name.jsonl \
        > $name.txt 2>&1 || { cat $name.txt; fail "$name failed"; }
    python3 - one.jsonl $name.jsonl $name <<'PY' || fail "$name: held-out loss differs"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"val_loss"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"val_loss"' in l]
assert [x["step"] for x in a] == [5, 10, 15, 20] == [x["step"] for x in b], (a, b)
worst = max(abs(x["val_loss"] - y["val_loss"]) / x["val_loss"] for x, y in zip(a, b))
print("%s: held-out loss at steps 5..20 within %.1e of one rank (%.6f at step 20)"
      % (sys.argv[3], worst, b[-1]["val_loss"]))
sys.exit(worst > 1e-5)
PY
}
check dp2 2 --set parallel.plugins=dp --set train.micro_batch=8
check tp2_sp 2 --set parallel.plugins=tp --set tp.size=2 --set tp.sequence_parallel=true
check pp2_1f1b 2 --set parallel.plugins=pp --set pp.size=2 --set pp.schedule=1f1b --set train.micro_batch=4
check dp2_pp2 4 --set parallel.plugins=dp,pp --set pp.size=2 --set train.micro_batch=4

bad() { # NAME REGEX SETS...
    local name=$1 regex=$2
    shift 2
    "$TESSERA" train model.ini --set train.steps=1 "$@" > $name.txt 2>&1
    local rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 128 ] || { cat $name.txt; fail "$name: exit status $rc"; }
    grep -qE "$regex" $name.txt || { cat $name.txt; fail "$name: no message matching /$regex/"; }
    echo "ok $name: $(head -n 1 $name.txt)"
}
bad split_too_big '\[data\] split' --set data.split=1.5
bad split_negative '\[data\] split' --set data.split=-0.1
bad split_and_val_source 'split = 0.1 holds out part of source, and val_source' \
    --set data.split=0.1 --set data.val_source=synthetic
bad eval_without_data '\[train\] eval_every: eval_every = 5 needs held-out data' --set train.eval_every=5
bad eval_batches_too_many '\[train\] eval_batches: eval_batches = 1000 global batches' \
    --set data.split=0.1 --set train.eval_every=5 --set train.eval_batches=1000
bad val_source_missing '\[data\] val_source: .*nowhere.txt' --set data.val_source=text:nowhere.txt \
    --set train.eval_every=5
echo "PASS"
