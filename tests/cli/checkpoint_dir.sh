# The checkpoint directory: created with its parents and checked writable at
# start-up (an unusable one is an error before any training); locked by the
# run that uses it (a second run is refused, naming the holder's host and
# pid; the lock of a killed run is taken over with a message); temporary
# files of an interrupted save are removed; after a kill and resume the
# metrics file holds every step exactly once.
. "$(dirname "$0")/lib.sh"
CFG="$SRC/configs/tiny.ini"

# Parents are created.
"$TESSERA" train "$CFG" --set train.steps=2 --set train.checkpoint_dir=a/b/c > parents.out 2>&1 ||
    { cat parents.out; fail "checkpoint_dir with missing parents"; }
[ -f a/b/c/ckpt-00000002/COMPLETE ] || fail "no checkpoint in a/b/c"
[ -e a/b/c/tessera.lock ] && fail "the lock was not removed at the end of the run"
echo "ok parents created, lock removed at exit"

# Unusable: a path under a regular file. Refused before the first step.
echo x > afile
timeout -s KILL 60 "$TESSERA" train "$CFG" --set train.steps=2 --set train.checkpoint_every=1 \
    --set train.checkpoint_dir=afile/sub > unusable.out 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || { cat unusable.out; fail "unusable dir: exit status $rc"; }
grep -q "\[train\] checkpoint_dir: directory afile/sub: cannot create afile/sub: Not a directory" \
    unusable.out || { cat unusable.out; fail "unusable dir: no clear message"; }
grep -q "^step" unusable.out && fail "trained before finding checkpoint_dir unusable"
echo "ok unusable directory refused at start-up"

# Two runs on one directory: the second is refused, naming the first.
common=(--set train.checkpoint_dir=ck --set train.checkpoint_every=5 --set train.resume=auto
        --set train.metrics=m.jsonl)
"$TESSERA" train "$CFG" --set train.steps=100000 "${common[@]}" > first.out 2>&1 &
pid=$!
for _ in $(seq 1 3000); do
    [ -f ck/ckpt-00000010/COMPLETE ] && break
    sleep 0.01
done
[ -f ck/ckpt-00000010/COMPLETE ] || { cat first.out; fail "the first run wrote no checkpoint"; }
timeout -s KILL 60 "$TESSERA" train "$CFG" --set train.steps=100000 "${common[@]}" \
    --set train.metrics=m_second.jsonl > second.out 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || { cat second.out; fail "second run: exit status $rc"; }
grep -qE "directory ck is in use by another run \(host [^ ]+ pid $pid since" second.out ||
    { cat second.out; fail "second run: the message does not name the holder (pid $pid)"; }
[ -e m_second.jsonl ] && fail "the refused run wrote metrics"
echo "ok second run refused: $(grep -o 'in use by another run ([^;]*' second.out)"

# Kill the first run; an interrupted save's temporary directory (and an
# earlier build's temporary file) are left too, and a checkpoint directory
# without its completion marker, which must never be loaded.
kill -9 "$pid"
wait "$pid" 2>/dev/null
killed_at=$(wc -l < m.jsonl)
newest=$(ls ck | grep -E '^ckpt-[0-9]+$' | tail -n 1)
touch ck/ckpt-99999999.tsck.tmp.AbCdEf
mkdir ck/ckpt-99999998.tmp.dir && touch ck/ckpt-99999998.tmp.dir/rank-00000.bin
cp -r "ck/$newest" ck/ckpt-99999997 && rm ck/ckpt-99999997/COMPLETE
"$TESSERA" train "$CFG" --set train.steps=$((killed_at + 5)) "${common[@]}" > third.out 2>&1 ||
    { cat third.out; fail "the run after the kill failed"; }
grep -qE "taking over the lock left by host [^ ]+ pid $pid since .*, which is no longer running" \
    third.out || { cat third.out; fail "no message about the stale lock"; }
grep -q "removed ck/ckpt-99999999.tsck.tmp.AbCdEf" third.out || fail "the temporary file was not removed"
grep -q "removed ck/ckpt-99999998.tmp.dir" third.out && [ ! -e ck/ckpt-99999998.tmp.dir ] ||
    fail "the temporary directory was not removed"
grep -q "resumed from ck/$newest" third.out || { cat third.out; fail "did not resume from $newest"; }
python3 - "$((killed_at + 5))" <<'PY' || fail "metrics after resume do not hold every step once"
import json, sys
steps = [json.loads(l)["step"] for l in open("m.jsonl")]
want = list(range(1, int(sys.argv[1]) + 1))
print("metrics steps: %d lines, 1..%d each once: %s" % (len(steps), want[-1], steps == want))
sys.exit(steps != want)
PY
echo "PASS"
