# Memory ledger per rank, from the accounted allocator: for stages 1, 2, 3
# at dp = 2, 4, 8, rank 0's persistent parameter, gradient and optimizer
# bytes after a step equal the analytic formula exactly (f32; P parameters,
# rank 0's range of the flat buffers R0 = the uneven split of P, its blocks
# B0 = the sum of its block of every parameter):
#   stage 1  params 4P, grads 4P, optimizer 8 R0 (moments; the f32
#            parameters are the master weights)
#   stage 2  params 4 B0 + 4P (the whole copy the layers read), grads 4 B0,
#            optimizer 8 B0
#   stage 3  params 4 B0, grads 4 B0, optimizer 8 B0
# and `tessera plan` predicts the same. Stage 3's parameter peak (the blocks
# plus the modules gathered at once) equals the plan's, and the peak the
# gather rules give (the module in use, `prefetch` modules ahead; with
# reshard_after_forward = false a module's parameters stay from its forward
# to its backward), simulated here independently.
. "$2/tests/cli/multirank.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
write_config
check() { # DP STAGE [sets...]
    local dp=$1 st=$2 name=m_$1_$2_$#
    shift 2
    local sets=(--set parallel.plugins=dp,zero --set zero.stage=$st --set train.micro_batch=$((16 / dp))
        --set train.steps=2 --set zero.bucket_mb=0.0001 "$@")
    run_mpi "$dp" "$TESSERA" train model.ini "${sets[@]}" --set train.metrics=$name.jsonl \
        > $name.txt 2>&1 || { cat $name.txt; fail "dp $dp stage $st: run"; }
    "$TESSERA" plan model.ini "${sets[@]}" --world "$dp" --json > $name.plan.json 2> $name.err ||
        { cat $name.err; fail "dp $dp stage $st: plan"; }
    PYTHONPATH="$HERE" python3 - "$dp" "$st" "$name" "$@" <<'PY' || fail "dp $1 stage $st: memory"
import json, sys
from zero_model import P, params, modules, numel, block_range, block
dp, st, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
extra = " ".join(sys.argv[4:])
prefetch = 2 if "prefetch=2" in extra else 1
reshard = "reshard_after_forward=false" not in extra
m = json.loads(open(name + ".jsonl").readlines()[-1])["mem"]
plan = json.load(open(name + ".plan.json"))
R0 = block_range(P, dp, 0)[1]
B0 = sum(block(s, dp, 0) for _, s in params())
want = {1: (4 * P, 4 * P, 8 * R0), 2: (4 * B0 + 4 * P, 4 * B0, 8 * B0),
        3: (4 * B0, 4 * B0, 8 * B0)}[st]
got = tuple(m[k]["allocated"] for k in ("params", "grads", "optimizer"))
pl = tuple(plan["memory"][k] for k in ("params", "grads", "optimizer"))
assert got == want, ("run", got, "formula", want)
assert pl == want, ("plan", pl, "formula", want)
line = "dp %d stage %d: params %d, grads %d, optimizer %d bytes (formula, run and plan)" % (dp, st, *got)
if st == 3:
    # The gather rules, module by module: forward 0..M-1, backward M-1..0.
    shape = dict(params())
    mods = [ps for _, ps in modules()]
    whole, holders, pre = {}, {}, set()
    peak = 0
    def gather(p, ahead):
        if p not in whole:
            whole[p] = 4 * numel(shape[p])
            if ahead: pre.add(p)
    def use(p):
        gather(p, False)
        holders[p] = holders.get(p, 0) + 1
        pre.discard(p)
    def release(p):
        holders[p] = max(0, holders.get(p, 0) - 1)
        if holders[p] == 0 and p not in pre: whole.pop(p, None)
    def note():
        global peak
        peak = max(peak, sum(whole.values()))
    for k, ps in enumerate(mods):
        for p in ps: gather(p, False)
        for j in range(k + 1, min(len(mods), k + 1 + prefetch)):
            for p in mods[j]: gather(p, True)
        for p in ps: use(p)
        note()
        if reshard:
            for p in ps: release(p)
    for k in reversed(range(len(mods))):
        ps = mods[k]
        if reshard:
            for p in ps: gather(p, False)
        for j in range(k - 1, max(-1, k - 1 - prefetch), -1):
            for p in mods[j]:
                if p not in whole:
                    gather(p, True)
        if reshard:
            for p in ps: use(p)
        note()
        for p in ps: release(p)
    want_peak = 4 * B0 + peak
    assert m["params"]["peak"] == want_peak, ("run peak", m["params"]["peak"], want_peak)
    assert plan["peak"]["params"] == want_peak, ("plan peak", plan["peak"]["params"], want_peak)
    line += "; parameter peak %d = blocks %d + gathered %d (run, plan, rules)" % (want_peak, 4 * B0, peak)
print(line)
PY
}
for dp in 2 4 8; do
    for st in 1 2 3; do check $dp $st; done
done
check 2 3 --set zero.prefetch=2
check 2 3 --set zero.reshard_after_forward=false
echo PASS
