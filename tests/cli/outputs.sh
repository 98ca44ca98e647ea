# Outputs: every write of metrics, traces, exports and standard output is
# checked, and a failure is an error naming the file with a non-zero exit
# (never a signal); an output only ever replaces a regular file or makes a
# new one, so nothing at that path that is not a file (a FIFO, a directory,
# a device) is replaced, and a symbolic link is written through.
. "$(dirname "$0")/lib.sh"
CFG="$SRC/configs/tiny.ini"
cases=0

# expect NAME REGEX args...: a clean failure saying REGEX, within 60 s.
expect() {
    local name=$1 regex=$2
    shift 2
    timeout -s KILL 60 "$TESSERA" "$@" > "$name.out" 2>&1
    local rc=$?
    cases=$((cases + 1))
    [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || { cat "$name.out"; fail "$name: exit status $rc"; }
    grep -qE "$regex" "$name.out" || { cat "$name.out"; fail "$name: message does not match /$regex/"; }
    echo "ok $name: $(grep tessera "$name.out" | head -n 1 | head -c 200)"
}

# A full disk under the metrics file, and under standard output.
expect metrics_full_disk 'metrics /dev/full: write failed: No space left on device' train "$CFG" \
    --set train.steps=2 --set train.metrics=/dev/full
timeout -s KILL 60 "$TESSERA" plan "$CFG" --world 1 > /dev/full 2> plan_full.err
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "plan > /dev/full: exit status $rc"
grep -q "cannot write the standard output: No space left on device" plan_full.err ||
    { cat plan_full.err; fail "plan > /dev/full: no message"; }
echo "ok stdout_full_disk"

# A file-size limit: the checkpoint writer fails cleanly and leaves nothing.
( ulimit -f 20000
  "$TESSERA" train "$CFG" --set train.steps=1 --set model.d_model=256 --set model.layers=8 \
      --set train.micro_batch=1 --set train.global_batch=1 --set train.checkpoint_dir=big \
      > fsize.out 2>&1 )
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || { cat fsize.out; fail "file-size limit: exit status $rc"; }
grep -q "write failed: File too large" fsize.out || { cat fsize.out; fail "file-size limit: no message"; }
[ -z "$(ls big | grep ckpt-)" ] || fail "a partial checkpoint was left behind: $(ls big)"
echo "ok file_size_limit"

# Export: never replaces what is not a regular file.
mkfifo fifo
mkdir adir
expect export_to_fifo 'output file fifo: is a FIFO; refusing to replace it' export "$CFG" --out fifo
[ -p fifo ] || fail "the FIFO was replaced"
expect export_to_dir 'output file adir: is a directory; refusing to replace it' export "$CFG" --out adir
[ -d adir ] || fail "the directory was replaced"
# Through a link to a regular file: the file is written, the link kept.
echo old > target.bin
ln -s target.bin link.bin
"$TESSERA" export "$CFG" --out link.bin > export_link.out 2>&1 || { cat export_link.out; fail "export through a link"; }
[ -L link.bin ] || fail "the symbolic link was replaced by a file"
[ "$(stat -c %s target.bin)" -gt 1024 ] || fail "the link's target was not written"
echo "ok export_through_link"
ln -s adir dirlink
expect export_link_to_dir 'dirlink: leads to .*adir, which is a directory' export "$CFG" --out dirlink

# Metrics into a FIFO nobody reads: an error at once, not a hang.
expect metrics_fifo_no_reader 'metrics fifo: cannot open for writing: a FIFO that no process reads' \
    train "$CFG" --set train.steps=1 --set train.metrics=fifo

# Outputs that cannot be written are found at start-up, before training.
expect trace_unwritable '\[train\] trace: trace missing/t.json: cannot create files there' train \
    "$CFG" --set train.steps=2 --set train.trace=missing/t.json
grep -q "^step" trace_unwritable.out && fail "trained before finding the trace unwritable"
expect metrics_unwritable '\[train\] metrics: metrics missing/m.jsonl: cannot open for writing' \
    train "$CFG" --set train.steps=2 --set train.metrics=missing/m.jsonl
echo "PASS: $cases output failures reported cleanly"
