# A slow checkpoint write is not a communication timeout. With [comm]
# timeout_s = 5, one rank's write of the step-4 checkpoint is slowed by
# TESSERA_FAULT=RANK:4:slow_checkpoint:SECONDS (a slow disk), on 2 ranks:
#   - slowed by 8 s: the run goes on and finishes, every checkpoint is
#     published, rank 0 says it waited for rank 1 longer than timeout_s, and
#     the losses equal an unslowed run's bit for bit;
#   - slowed by 90 s with [train] checkpoint_timeout_s = 2: the job stops
#     non-zero within seconds, naming the rank still writing (rank 1 named by
#     rank 0, or rank 0 named by rank 1); the step-4 checkpoint is not
#     published, the step-2 one is, and resume = auto continues from it to
#     the same losses as the unslowed run.
# Each for a synchronous save and for checkpoint_async = true (there the
# step-4 save is still pending when the step-6 one falls due). The same
# for a slow read of the step-4 checkpoint by a resumed run. Also
# TESSERA_FAULT's kill kind, a malformed TESSERA_FAULT and checkpoint_timeout_s
# out of range refused by name.
# Usage: ckpt_slow_write.sh TESSERA SRC
. "$(dirname "$0")/multirank.sh"
write_config
run=(train model.ini --set parallel.plugins=tp --set tp.size=2 --set train.steps=6
     --set train.decay_steps=6 --set train.checkpoint_every=2 --set comm.timeout_s=5)

run_mpi 2 "$TESSERA" "${run[@]}" --set train.checkpoint_dir=ref --set train.metrics=ref.jsonl \
    > ref.txt 2>&1 || { cat ref.txt; fail "the unslowed run failed"; }

# same_losses REF RUN FIRST: steps FIRST..6 of RUN equal REF's bit for bit.
same_losses() {
    python3 - "$1" "$2" "$3" <<'PY'
import json, sys
ref = {j["step"]: j for j in map(json.loads, open(sys.argv[1]))}
run = [json.loads(l) for l in open(sys.argv[2])]
assert [j["step"] for j in run] == list(range(1, 7)), [j["step"] for j in run]
for j in run[int(sys.argv[3]) - 1:]:
    for f in ("loss", "grad_norm", "lr"):
        assert j[f] == ref[j["step"]][f], (j["step"], f, j[f], ref[j["step"]][f])
PY
}

# slowed NAME FAULT ASYNC [--set ...]: the run with TESSERA_FAULT=FAULT; its
# exit status in $rc, its wall time in $took, its output in NAME.txt.
slowed() {
    local name=$1 fault=$2 async=$3
    shift 3
    local t0=$SECONDS
    TESSERA_FAULT=$fault timeout 240 mpirun --oversubscribe --bind-to none -np 2 -x TESSERA_FAULT \
        "$TESSERA" "${run[@]}" --set train.checkpoint_async=$async \
        --set train.checkpoint_dir=$name --set train.metrics=$name.jsonl "$@" > $name.txt 2>&1
    rc=$?
    took=$((SECONDS - t0))
}

for async in false true; do
    # Slower than [comm] timeout_s, within checkpoint_timeout_s (default).
    d=slow_$async
    slowed $d 1:4:slow_checkpoint:8 $async
    [ $rc = 0 ] || { cat $d.txt; fail "async=$async: a write 8 s slow ended the run (rc $rc)"; }
    [ $took -ge 8 ] || fail "async=$async: the run took $took s: the write was not slowed"
    for s in 2 4 6; do
        [ -f $d/ckpt-0000000$s/COMPLETE ] || { cat $d.txt; fail "async=$async: ckpt $s missing"; }
    done
    ls $d | grep -q tmp.dir && fail "async=$async: a temporary directory is left: $(ls $d)"
    grep -qE "checkpoint: step 4: waited [0-9.]+ s for rank 1 to finish writing its shards, longer than \[comm\] timeout_s = 5 \(a save waits up to \[train\] checkpoint_timeout_s = 1800\)" $d.txt ||
        { cat $d.txt; fail "async=$async: no note of the wait for rank 1"; }
    same_losses ref.jsonl $d.jsonl 1 || fail "async=$async: the slowed run's losses differ"
    echo "ok async=$async: rank 1's write 8 s slow, the run finished in $took s: $(grep 'waited' $d.txt)"

    # Past checkpoint_timeout_s: the job stops naming the rank still writing.
    for slow in 1 0; do
        d=stop_${async}_$slow
        other=$((1 - slow))
        slowed $d $slow:4:slow_checkpoint:90 $async --set train.checkpoint_timeout_s=2
        [ $rc != 0 ] || { cat $d.txt; fail "async=$async slow=$slow: the run did not stop"; }
        [ $took -lt 60 ] || { cat $d.txt; fail "async=$async slow=$slow: took $took s: not stopped by the bound"; }
        grep -qE "checkpoint of step 4: rank $slow is still writing its shards [0-9.]+ s after rank $other was done \(--set \[train\] checkpoint_timeout_s = 2\); the job ends: this checkpoint is not published" $d.txt ||
            { cat $d.txt; fail "async=$async slow=$slow: no message naming rank $slow"; }
        grep -q "did not complete" $d.txt && { cat $d.txt; fail "async=$async slow=$slow: blamed on a collective"; }
        [ -f $d/ckpt-00000002/COMPLETE ] || fail "async=$async slow=$slow: the step-2 checkpoint is gone"
        [ -e $d/ckpt-00000004 ] && fail "async=$async slow=$slow: the interrupted save was published"
        echo "ok async=$async: rank $slow's write 90 s slow, stopped after $took s: $(grep -o 'checkpoint of step 4: rank [0-9] is still writing[^;]*' $d.txt | head -1)"

        run_mpi 2 "$TESSERA" "${run[@]}" --set train.checkpoint_async=$async \
            --set train.checkpoint_dir=$d --set train.resume=auto --set train.metrics=$d.jsonl \
            > $d.resumed.txt 2>&1 || { cat $d.resumed.txt; fail "async=$async slow=$slow: resume failed"; }
        grep -q "resumed from $d/ckpt-00000002 at step 2" $d.resumed.txt ||
            { cat $d.resumed.txt; fail "async=$async slow=$slow: did not resume from step 2"; }
        same_losses ref.jsonl $d.jsonl 3 || fail "async=$async slow=$slow: the resumed run differs"
        echo "ok async=$async slow=$slow: resumed from step 2, steps 3..6 equal the unslowed run"
    done
done

# A slow read is not a communication timeout either: rank 1's read of the
# step-4 checkpoint 8 s slow, the resumed run finishes as the unslowed one;
# 90 s slow with checkpoint_timeout_s = 2, it stops naming rank 1.
for name in load_slow load_stop; do
    mkdir $name && cp -r ref/ckpt-00000004 $name/ && head -4 ref.jsonl > $name.jsonl
done
slowed load_slow 1:4:slow_checkpoint:8 false --set train.resume=auto
[ $rc = 0 ] || { cat load_slow.txt; fail "a read 8 s slow ended the run (rc $rc)"; }
[ $took -ge 8 ] || fail "load: the run took $took s: the read was not slowed"
grep -q "resumed from load_slow/ckpt-00000004 at step 4" load_slow.txt || { cat load_slow.txt; fail "load: not resumed"; }
same_losses ref.jsonl load_slow.jsonl 5 || fail "load: the resumed run differs"
echo "ok: rank 1's read 8 s slow, resumed and finished in $took s"
slowed load_stop 1:4:slow_checkpoint:90 false --set train.resume=auto --set train.checkpoint_timeout_s=2
[ $rc != 0 ] && [ $took -lt 60 ] || { cat load_stop.txt; fail "load: not stopped by the bound (rc $rc, $took s)"; }
grep -qE "loading checkpoint load_stop/ckpt-00000004: rank 1 is still reading its shards [0-9.]+ s after rank 0 was done \(--set \[train\] checkpoint_timeout_s = 2\); the job ends" load_stop.txt ||
    { cat load_stop.txt; fail "load: no message naming rank 1"; }
echo "ok: rank 1's read 90 s slow, stopped after $took s naming it"

# The other kind of TESSERA_FAULT: rank 1 killed right after step 3.
slowed kill 1:3:kill false
[ $rc != 0 ] || fail "kill: the job survived"
grep -q '^step     3/6' kill.txt && ! grep -q '^step     4/6' kill.txt ||
    { cat kill.txt; fail "kill: not stopped right after step 3"; }
echo "ok: TESSERA_FAULT=1:3:kill ended the job after step 3"

# A malformed fault is refused naming the variable.
TESSERA_FAULT=1:4:slow_checkpoint "$TESSERA" train model.ini --set train.steps=2 > bad.txt 2>&1 &&
    fail "a malformed TESSERA_FAULT was accepted"
grep -q "TESSERA_FAULT=1:4:slow_checkpoint: entry '1:4:slow_checkpoint': expected" bad.txt ||
    { cat bad.txt; fail "no message for a malformed TESSERA_FAULT"; }
# The bound is range-checked, naming the key.
for bad in 0 -1 604801 nan; do
    "$TESSERA" train model.ini --set train.steps=1 --set train.checkpoint_timeout_s=$bad > bad.txt 2>&1 &&
        fail "checkpoint_timeout_s = $bad was accepted"
    grep -q "checkpoint_timeout_s" bad.txt || { cat bad.txt; fail "checkpoint_timeout_s = $bad: no message naming the key"; }
done
echo "PASS"
