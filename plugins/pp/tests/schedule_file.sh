# A schedule written by hand ([pp] schedule = file, schedule_file = PATH):
# a file with ZB-H1's order for p = 2, m = 4 trains with the same bits as
# schedule = zb_h1; a file in V order with two chunks trains too, within
# 1e-5 of one rank; and bad files are refused before the first step, by
# `tessera plan` and by training alike, with one line naming the file, the
# line and the action: a deadlock, a skipped W, a W before its B, an action
# twice, a token that is no action, ranks or micro-batches other than the
# run's, schedule_file without schedule = file, and schedule = file without
# a file.
. "$2/tests/cli/multirank.sh"
write_config
pp=(--set parallel.plugins=pp --set pp.size=2 --set train.micro_batch=4 --set train.steps=8)
cat > zb.txt <<'TXT'
# ZB-H1 by hand: p = 2, m = 4 (what schedule = zb_h1 generates)
rank 0: F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3
rank 1: F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3
TXT
for s in zb_h1 file; do
    run_mpi 2 "$TESSERA" train model.ini "${pp[@]}" --set pp.schedule=$s --set pp.schedule_file=$([ $s = file ] && echo zb.txt) \
        --set train.checkpoint_dir=$s --set train.metrics=$s.jsonl > $s.txt 2>&1 || { cat $s.txt; fail "$s: run"; }
    "$TESSERA" export model.ini --set train.checkpoint_dir=$s --out $s.bin > /dev/null || fail "$s: export"
done
python3 - <<'PY' || fail "the file's schedule does not give zb_h1's bits"
import json
f = lambda p: [(json.loads(l)["loss"], json.loads(l)["grad_norm"]) for l in open(p)]
a, b = f("zb_h1.jsonl"), f("file.jsonl")
assert len(a) == 8 and a == b, (a, b)
print("schedule = file (zb.txt) and zb_h1: 8 steps, the same losses and norms")
PY
cmp zb_h1.bin file.bin || fail "final weights differ"
# Two chunks in V order, p = 2, m = 2: rank 1 turns the pipeline around.
cat > v.txt <<'TXT'
order v
rank 0: F0.0 F1.0 F0.1 B0.1 W0.1 F1.1 B1.1 B0.0 W1.1 W0.0 B1.0 W1.0
rank 1: F0.0 F0.1 F1.0 B0.1 F1.1 W0.1 B1.1 B0.0 W1.1 B1.0 W0.0 W1.0
TXT
"$TESSERA" train model.ini --set model.layers=4 --set train.steps=8 --set train.metrics=one.jsonl > one.txt 2>&1 ||
    { cat one.txt; fail "one rank"; }
run_mpi 2 "$TESSERA" train model.ini --set model.layers=4 "${pp[@]}" --set train.micro_batch=8 \
    --set pp.virtual_stages=2 --set pp.schedule=file --set pp.schedule_file=v.txt \
    --set train.metrics=v.jsonl > v.out 2>&1 || { cat v.out; fail "the V file's run"; }
python3 - <<'PY' || fail "the V file's run differs from one rank"
import json
f = lambda p: [json.loads(l)["loss"] for l in open(p)]
a, b = f("one.jsonl"), f("v.jsonl")
worst = max(abs(x - y) / x for x, y in zip(a, b))
print("order v file: 8 steps, worst relative loss difference to one rank %.2e" % worst)
assert len(a) == len(b) == 8 and worst < 1e-5
PY
bad() { # NAME REGEX LINES...
    local name=$1 regex=$2
    shift 2
    printf '%s\n' "$@" > $name.sched
    both $name "$regex" 2 "${pp[@]}" --set pp.schedule=file --set pp.schedule_file=$name.sched
}
bad deadlock "deadlock.sched:1: 'B0' \(rank 0, action 1\) waits for the backward of micro-batch 0 on virtual stage 1 \(rank 1\), which never comes: the schedule deadlocks" \
    "rank 0: F0 B0 W0 F1 B1 W1 F2 B2 W2 F3 B3 W3" "rank 1: F1 B1 W1 F0 B0 W0 F2 B2 W2 F3 B3 W3"
bad skipped_w "skipped_w.sched:2: rank 1 never runs W3 \(the weight part of its action 9, 'B3'\)" \
    "rank 0: F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3" "rank 1: F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2"
bad w_before_b "w_before_b.sched:1: 'W1' \(rank 0, action 4\): weight part before its B1" \
    "rank 0: F0 F1 B0 W0 W1 F2 B1 F3 B2 W2 B3 W3" "rank 1: F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3"
bad twice "twice.sched:1: 'F1' \(rank 0, action 2\): the forward of micro-batch 1 chunk 0 runs twice" \
    "rank 0: F0 F1 F1 B0 W0" "rank 1: F0 B0 W0"
bad token "token.sched:2: 'Q1' \(rank 1, action 2\) is not F, B, W or BW followed by a micro-batch" \
    "rank 0: F0 F1 B0 W0 B1 W1" "rank 1: F0 B0 Q1 B1 W0 W1"
bad shape "lists 3 ranks, 4 micro-batches and 1 chunks per rank; the run has pp = 2, 4 micro-batches" \
    "rank 0: F0 F1 F2 F3 B0 B1 B2 B3 W0 W1 W2 W3" "rank 1: F0 F1 F2 F3 B0 B1 B2 B3 W0 W1 W2 W3" \
    "rank 2: F0 F1 F2 F3 B0 B1 B2 B3 W0 W1 W2 W3"
both no_file "\[pp\] schedule = file needs \[pp\] schedule_file" 2 "${pp[@]}" --set pp.schedule=file
both file_unused "\[pp\] schedule_file is read only with \[pp\] schedule = file, not 1f1b" 2 "${pp[@]}" \
    --set pp.schedule_file=zb.txt
echo PASS
