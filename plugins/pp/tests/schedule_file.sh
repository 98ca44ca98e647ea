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
bad shape "lists 2 ranks, 2 micro-batches and 1 chunks per rank; the run has pp = 2, 4 micro-batches" \
    "rank 0: F0 F1 B0 B1 W0 W1" "rank 1: F0 F1 B0 B1 W0 W1"
bad ranks "ranks.sched:3: rank 2's line, but the run has pp = 2 \(ranks 0..1\)" \
    "rank 0: F0 BW0" "rank 1: F0 BW0" "rank 2: F0 BW0"
bad too_few "too_few.sched:1: the file ends after rank 0's line; the run has pp = 2" "rank 0: F0 BW0"
bad order_words "order_words.sched:1: 'order' takes one word, interleaved or v" "order v interleaved" \
    "rank 0: F0.0 F0.1 BW0.1 BW0.0" "rank 1: F0.0 F0.1 BW0.1 BW0.0"
bad overflow "overflow.sched:1: 'F700000.1023' \(rank 0, action 0\) makes 700001 micro-batches x 1024 chunks = 716801024 \(micro-batch, chunk\) pairs, each run forward and backward by every rank, but the longest rank's line \(overflow.sched:1, rank 0\) has 1 actions" \
    "rank 0: F700000.1023" "rank 1: F0"
bad big_rank "big_rank.sched:2: rank 4294967297's line, where rank 1's is next" \
    "rank 0: F0 F1 F2 F3 BW0 BW1 BW2 BW3" "rank 4294967297: F0 BW0 F1 BW1 F2 BW2 F3 BW3"
printf 'rank 0: F0 F1 F2 F3 BW0 BW1 BW2 BW3\nrank 1: F0 BW0\0 F1 BW1 F2 BW2 F3 BW3\n' > nul.sched
both nul "nul.sched:2: a NUL byte at column 15" 2 "${pp[@]}" --set pp.schedule=file --set pp.schedule_file=nul.sched
# Not regular files: refused without reading or waiting (plan and train
# each under a timeout: a hang is a failure, not a stuck suite).
refused_at_once() { # NAME REGEX FILE
    local name=$1 regex=$2 file=$3 rc
    timeout 20 "$TESSERA" plan model.ini --world 2 "${pp[@]}" --set pp.schedule=file \
        --set pp.schedule_file="$file" > ${name}_plan.txt 2>&1
    rc=$?
    [ $rc -ne 124 ] || fail "$name: plan still running after 20 s"
    [ $rc -ne 0 ] && [ $rc -lt 128 ] || { cat ${name}_plan.txt; fail "$name: plan exit status $rc"; }
    grep -qE "$regex" ${name}_plan.txt || { cat ${name}_plan.txt; fail "$name: plan says otherwise"; }
    timeout 60 mpirun --oversubscribe --bind-to none -np 2 "$TESSERA" train model.ini "${pp[@]}" \
        --set pp.schedule=file --set pp.schedule_file="$file" > ${name}_run.txt 2>&1
    rc=$?
    [ $rc -ne 124 ] || fail "$name: train still running after 60 s"
    [ $rc -ne 0 ] && [ $rc -lt 128 ] || { cat ${name}_run.txt; fail "$name: train exit status $rc"; }
    grep -qE "$regex" ${name}_run.txt || { cat ${name}_run.txt; fail "$name: train says otherwise"; }
    echo "ok $name: $(grep -m1 -E "$regex" ${name}_plan.txt)"
}
refused_at_once dev_zero "/dev/zero: is a character device; a schedule file must be a regular file" /dev/zero
ln -s /dev/zero zero_link
refused_at_once zero_link "zero_link: is a character device; a schedule file must be a regular file" zero_link
mkfifo sched.fifo
refused_at_once fifo "sched.fifo: is a FIFO; a schedule file must be a regular file" sched.fifo
# 150,000 rank lines for pp = 2: refused at the third, in under a second.
python3 -c "
with open('many.sched', 'w') as f:
    f.writelines('rank %d: F0 BW0\n' % r for r in range(150000))"
start=$(date +%s.%N)
expect many "many.sched:3: rank 2's line, but the run has pp = 2" 1 plan model.ini --world 2 "${pp[@]}" \
    --set pp.schedule=file --set pp.schedule_file=many.sched
python3 -c "import sys; t = float(sys.argv[2]) - float(sys.argv[1]); print('150,000 lines refused in %.3f s' % t); sys.exit(t >= 1)" \
    "$start" "$(date +%s.%N)" || fail "150,000 lines: refused, but not within a second"
# With pp = auto the size is not known when the file is read: at most 65,536
# ranks ([pp] size's limit), all checked together in linear time.
head -n 65536 many.sched > auto.sched
start=$(date +%s.%N)
expect auto "lists 65536 ranks, 1 micro-batches and 1 chunks per rank; the run has pp = 2" 1 plan model.ini \
    --world 2 "${pp[@]}" --set pp.size=auto --set pp.schedule=file --set pp.schedule_file=auto.sched
python3 -c "import sys; t = float(sys.argv[2]) - float(sys.argv[1]); print('65,536 ranks checked in %.3f s' % t); sys.exit(t >= 5)" \
    "$start" "$(date +%s.%N)" || fail "65,536 ranks: checked, but not within 5 s"
expect auto_limit "many.sched:65537: rank 65536's line: at most 65536 ranks" 1 plan model.ini \
    --world 2 "${pp[@]}" --set pp.size=auto --set pp.schedule=file --set pp.schedule_file=many.sched
both no_file "\[pp\] schedule = file needs \[pp\] schedule_file" 2 "${pp[@]}" --set pp.schedule=file
both file_unused "\[pp\] schedule_file is read only with \[pp\] schedule = file, not 1f1b" 2 "${pp[@]}" \
    --set pp.schedule_file=zb.txt
echo PASS
