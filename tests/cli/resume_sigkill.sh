# Kill a run with SIGKILL after a checkpoint, mid-step; resume = auto
# continues, and every later step's loss and gradient norm equal an
# uninterrupted run's bit for bit (printed with 17 significant digits).
. "$(dirname "$0")/lib.sh"
common=(--set train.steps=60 --set train.checkpoint_every=20 --set train.resume=auto)
"$TESSERA" train "$SRC/configs/tiny.ini" "${common[@]}" --set train.checkpoint_dir=full \
    --set train.metrics=full.jsonl > full.txt 2>&1 || { cat full.txt; fail "reference run failed"; }

"$TESSERA" train "$SRC/configs/tiny.ini" "${common[@]}" --set train.checkpoint_dir=cut \
    --set train.metrics=cut1.jsonl > cut1.txt 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
    [ -f cut/ckpt-00000020/COMPLETE ] && break
    sleep 0.01
done
[ -f cut/ckpt-00000020/COMPLETE ] || fail "no checkpoint appeared"
kill -9 "$pid" 2>/dev/null || fail "the run ended before it could be killed"
wait "$pid"
status=$?
[ "$status" -eq 137 ] || fail "the run was not killed by SIGKILL (status $status)"
killed_at=$(wc -l < cut1.jsonl)
echo "killed after step $killed_at"

"$TESSERA" train "$SRC/configs/tiny.ini" "${common[@]}" --set train.checkpoint_dir=cut \
    --set train.metrics=cut2.jsonl > cut2.txt 2>&1 || { cat cut2.txt; fail "resumed run failed"; }
grep -q "resumed from cut/ckpt-" cut2.txt || fail "the second run did not resume"
from=$(sed -nE 's/resumed from .* at step ([0-9]+).*/\1/p' cut2.txt)
echo "resumed at step $from"
[ "$from" -ge 20 ] || fail "resumed at step $from"
compared=0
for s in $(seq $((from + 1)) 60); do
    for field in loss grad_norm lr; do
        a=$(metric full.jsonl "$s" $field)
        b=$(metric cut2.jsonl "$s" $field)
        [ -n "$a" ] && [ "$a" = "$b" ] || fail "step $s: $field $b after resume, $a uninterrupted"
    done
    compared=$((compared + 1))
done
[ "$compared" -ge 20 ] || fail "only $compared steps compared"
ls cut | grep -q tmp && fail "a temporary checkpoint file was left behind"
echo "PASS: $compared steps identical"
