# Optimizer state cut by a plugin (plugin ABI 1.1, host->register_optimizer_state):
# the test plugin tessera-optshard.so keeps master weights and moments for
# 1/dp of the flat buffers on each dp rank (ZeRO stage 1) and all-gathers the
# updated ranges after each step.
#  - dp 2 + optshard trains like dp 2: the same gradients meet the same
#    element-wise AdamW; only the gradient norm is summed in other groups
#    (each rank sums its own range), which moves it by a few f32 roundings
#    and, through the clipping factor, the updates by as much: losses and
#    gradient norms within 1e-6 relative over 20 steps in f32 (and on 4
#    ranks), within 1e-3 in bf16 (there a last-bit difference of an update
#    can flip the rounding of a bf16 parameter, 2^-8 relative);
#  - its optimizer memory per rank is half of dp's (within 1%), and
#    `tessera plan` predicts it exactly;
#  - checkpoints hold the whole state: 10 steps with optshard resumed with
#    plain dp (and the other way round) end where 20 uninterrupted dp steps
#    do (within 1e-6, as above);
#  - ranges that do not tile the buffers are refused at start-up, naming the
#    plugin, the axis and the rank.
# Usage: optim_state.sh TESSERA SRC PLUGIN_DIR
. "$(dirname "$0")/multirank.sh"
PLUGINS=$1
write_config
base=(--set parallel.plugin_path="$PLUGINS" --set train.micro_batch=8)
dp=(--set parallel.plugins=dp)
zs=(--set parallel.plugins=dp,optshard)

# close A.jsonl B.jsonl [TOL]: every step's loss and gradient norm within
# TOL relative (default 1e-6: the norm's summation order, see above).
close() {
    python3 - "$1" "$2" "${3:-1e-6}" <<'PY' || fail "$1 and $2 differ"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) > 0, (len(a), len(b))
worst, tol = 0.0, float(sys.argv[3])
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        d = abs(x[k] - y[k]) / abs(y[k])
        worst = max(worst, d)
        if d > tol:
            sys.exit("step %d: %s %r vs %r" % (x["step"], k, x[k], y[k]))
print("%s ~ %s: %d steps, worst relative difference %.2e" % (sys.argv[1], sys.argv[2], len(a), worst))
PY
}

for dtype in fp32 bf16; do
    run_mpi 2 "$TESSERA" train model.ini "${base[@]}" "${dp[@]}" --set train.dtype=$dtype \
        --set train.metrics=dp_$dtype.jsonl > dp_$dtype.txt 2>&1 || { cat dp_$dtype.txt; fail "dp $dtype"; }
    run_mpi 2 "$TESSERA" train model.ini "${base[@]}" "${zs[@]}" --set train.dtype=$dtype \
        --set train.metrics=zs_$dtype.jsonl > zs_$dtype.txt 2>&1 || { cat zs_$dtype.txt; fail "optshard $dtype"; }
    close zs_$dtype.jsonl dp_$dtype.jsonl $([ $dtype = bf16 ] && echo 1e-3)
done

python3 - <<'PY' || fail "optimizer memory"
import json
dp = json.loads(open("dp_fp32.jsonl").readlines()[-1])["mem"]["optimizer"]["allocated"]
zs = json.loads(open("zs_fp32.jsonl").readlines()[-1])["mem"]["optimizer"]["allocated"]
print("optimizer memory per rank: %d bytes cut over dp 2, %d replicated (ratio %.4f)" % (zs, dp, zs / dp))
assert abs(zs / dp - 0.5) < 0.01, (zs, dp)
PY
"$TESSERA" plan model.ini --world 2 --json "${base[@]}" "${zs[@]}" > plan.json 2> plan.err ||
    { cat plan.err; fail "plan"; }
python3 - <<'PY' || fail "plan's optimizer memory"
import json
plan = json.load(open("plan.json"))["memory"]["optimizer"]
run = json.loads(open("zs_fp32.jsonl").readlines()[-1])["mem"]["optimizer"]["allocated"]
print("plan predicts %s optimizer bytes, the run allocated %d" % (plan, run))
p = plan["allocated"] if isinstance(plan, dict) else plan
assert p == run, (p, run)
PY

# Four ranks.
run_mpi 4 "$TESSERA" train model.ini "${base[@]}" "${dp[@]}" --set train.micro_batch=4 \
    --set train.metrics=dp4.jsonl > dp4.txt 2>&1 || { cat dp4.txt; fail "dp 4"; }
run_mpi 4 "$TESSERA" train model.ini "${base[@]}" "${zs[@]}" --set train.micro_batch=4 \
    --set train.metrics=zs4.jsonl > zs4.txt 2>&1 || { cat zs4.txt; fail "optshard 4"; }
close zs4.jsonl dp4.jsonl

# Checkpoints across the two: 10 steps one way, 10 more the other.
for first in zs dp; do
    if [ $first = zs ]; then a=("${zs[@]}") b=("${dp[@]}"); else a=("${dp[@]}") b=("${zs[@]}"); fi
    run_mpi 2 "$TESSERA" train model.ini "${base[@]}" "${a[@]}" --set train.steps=10 \
        --set train.decay_steps=20 --set train.checkpoint_dir=ck_$first \
        --set train.metrics=r_$first.jsonl > r1_$first.txt 2>&1 || { cat r1_$first.txt; fail "first half ($first)"; }
    run_mpi 2 "$TESSERA" train model.ini "${base[@]}" "${b[@]}" --set train.resume=auto \
        --set train.checkpoint_dir=ck_$first --set train.metrics=r_$first.jsonl > r2_$first.txt 2>&1 ||
        { cat r2_$first.txt; fail "second half ($first)"; }
    grep -q "resumed from ck_$first/ckpt-00000010 at step 10" r2_$first.txt || { cat r2_$first.txt; fail "no resume"; }
    close r_$first.jsonl dp_fp32.jsonl
done

# Ranges with a gap between them.
run_mpi 2 "$TESSERA" train model.ini "${base[@]}" "${zs[@]}" --set optshard.skew=true \
    > skew.txt 2>&1 && { cat skew.txt; fail "a gap between the ranges was accepted"; }
grep -q "plugin 'optshard': optimizer state over dp: rank 1 of the group keeps \[.*the ranges must tile" skew.txt ||
    { cat skew.txt; fail "unclear refusal of a gap"; }
echo "ok: $(grep -m1 -o "plugin 'optshard'.*" skew.txt)"
echo "PASS"
