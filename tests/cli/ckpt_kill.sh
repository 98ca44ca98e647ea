# kill -9 of one rank during a save: the save of step 20 is slowed down
# (TESSERA_CKPT_WRITE_DELAY_MS pauses after every shard), rank 1 is killed
# while it writes into ckpt-00000020.tmp.dir, and the job dies. The step-10
# checkpoint stays loadable and the half-written one is never loaded:
# resume = auto removes the temporary directory, continues from step 10,
# and steps 11..30 equal an uninterrupted run's bit for bit (same topology).
# Done for a synchronous save and for checkpoint_async = true (the writer
# thread killed while training goes on).
# Usage: ckpt_kill.sh TESSERA SRC
. "$(dirname "$0")/multirank.sh"
write_config
run=(train model.ini --set parallel.plugins=tp --set tp.size=2 --set train.steps=30
     --set train.decay_steps=30 --set train.checkpoint_every=10)
run_mpi 2 "$TESSERA" "${run[@]}" --set train.checkpoint_dir=ref --set train.metrics=ref.jsonl \
    > ref.txt 2>&1 || { cat ref.txt; fail "uninterrupted run failed"; }

# The pid of world rank R of this test's running job: only processes working
# in this test's directory (other tests run `tessera train model.ini` at the
# same time, in directories of their own, and must not be touched).
rank_pid() {
    for p in $(pgrep -f "tessera train model.ini"); do
        [ "$(readlink /proc/$p/cwd 2>/dev/null)" = "$(realpath "$WORK")" ] || continue
        tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo $p
    done
}

for async in false true; do
    d=cut_$async
    TESSERA_CKPT_WRITE_DELAY_MS=50 timeout 240 mpirun --oversubscribe --bind-to none -np 2 \
        -x TESSERA_CKPT_WRITE_DELAY_MS "$TESSERA" "${run[@]}" --set train.checkpoint_async=$async \
        --set train.checkpoint_dir=$d --set train.metrics=$d.jsonl > $d.txt 2>&1 &
    job=$!
    for _ in $(seq 1 3000); do
        [ -f $d/ckpt-00000020.tmp.dir/rank-00001.bin ] && break
        sleep 0.01
    done
    [ -f $d/ckpt-00000020.tmp.dir/rank-00001.bin ] || { cat $d.txt; fail "async=$async: the step-20 save never started"; }
    pid=$(rank_pid 1)
    [ -n "$pid" ] && [ "$(wc -w <<< "$pid")" = 1 ] || fail "async=$async: not one rank 1 process: '$pid'"
    kill -9 $pid
    wait $job && fail "async=$async: the job survived the kill of rank 1"
    [ -f $d/ckpt-00000010/COMPLETE ] || fail "async=$async: the step-10 checkpoint is gone"
    [ -e $d/ckpt-00000020 ] && fail "async=$async: the interrupted save was published"
    echo "ok async=$async: rank 1 (pid $pid) killed while writing step 20: $(ls $d | tr '\n' ' ')"

    run_mpi 2 "$TESSERA" "${run[@]}" --set train.checkpoint_dir=$d --set train.resume=auto \
        --set train.metrics=$d.jsonl > $d.resumed.txt 2>&1 || { cat $d.resumed.txt; fail "async=$async: resume failed"; }
    grep -q "removed $d/ckpt-00000020.tmp.dir, left by an interrupted save" $d.resumed.txt ||
        { cat $d.resumed.txt; fail "async=$async: the temporary directory was not removed"; }
    grep -q "resumed from $d/ckpt-00000010 at step 10" $d.resumed.txt ||
        { cat $d.resumed.txt; fail "async=$async: did not resume from step 10"; }
    python3 - ref.jsonl $d.jsonl <<'PY' || fail "async=$async: the resumed run differs"
import json, sys
ref = {j["step"]: j for j in map(json.loads, open(sys.argv[1]))}
run = [json.loads(l) for l in open(sys.argv[2])]
assert [j["step"] for j in run] == list(range(1, 31)), [j["step"] for j in run]
for j in run[10:]:
    for f in ("loss", "grad_norm", "lr"):
        assert j[f] == ref[j["step"]][f], (j["step"], f, j[f], ref[j["step"]][f])
print("steps 11..30 equal the uninterrupted run bit for bit")
PY
done
echo "PASS"
