# Communication per step, by group and operation, from rank 0's counters:
# P the parameters' bytes (f32), n the parameters, one micro-batch per step.
#   stage 1  dp.reduce_scatter: one call per bucket, P bytes (the inputs);
#            dp.all_gather: 1 call, P bytes (the updated ranges)
#   stage 2  dp.reduce_scatter: n calls, P bytes; dp.all_gather: n calls, P
#   stage 3  dp.all_gather: every module's parameters before its forward and
#            again before its backward (the tied wte, read by the embedding
#            and the head, twice each way): 2 (n + 1) calls, 2 (P + wte);
#            dp.reduce_scatter: n calls, P bytes
# besides the core's dp.all_reduce (token count and loss, 2 calls, 8 bytes)
# and world.all_reduce (the gradient norm). Reduce-scatter plus all-gather of
# P moves what one all-reduce of P moves (2 (dp-1)/dp P on the bus); stage 3
# moves 1.5 times that. `tessera plan` predicts exactly the same counters,
# and the all-reduce of the same run without zero is checked alongside.
. "$2/tests/cli/multirank.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
write_config
for dp in 2 4; do
    for st in 0 1 2 3; do
        name=c_${dp}_$st
        sets=(--set parallel.plugins=dp,zero --set zero.stage=$st)
        [ $st = 0 ] && sets=(--set parallel.plugins=dp)
        sets+=(--set train.micro_batch=$((16 / dp)) --set train.steps=2)
        run_mpi "$dp" "$TESSERA" train model.ini "${sets[@]}" --set train.metrics=$name.jsonl \
            > $name.txt 2>&1 || { cat $name.txt; fail "dp $dp stage $st: run"; }
        "$TESSERA" plan model.ini "${sets[@]}" --world "$dp" --json > $name.plan.json 2> $name.err ||
            { cat $name.err; fail "dp $dp stage $st: plan"; }
        PYTHONPATH="$HERE" python3 - "$dp" "$st" "$name" <<'PY' || fail "dp $dp stage $st: communication"
import json, sys
from zero_model import P, params, modules, numel
dp, st, name = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
n, Pb = len(params()), 4 * P
wte = 4 * numel(dict(params())["wte"])
plan = json.load(open(name + ".plan.json"))["comm"]
for line in open(name + ".jsonl"):
    m = json.loads(line)
    got = {"%s.%s" % (g, op): (c["calls"], c["bytes"]) for g, ops in m["comm"].items()
           for op, c in ops.items()}
    want = {"dp.all_reduce": (2, 8), "world.all_reduce": (1, 12)}
    if st == 0:
        want["dp-cp.all_reduce"] = (m["plugins"]["dp"]["buckets"], Pb)
    elif st == 1:
        want["dp.reduce_scatter"] = (m["plugins"]["zero"]["buckets"], Pb)
        want["dp.all_gather"] = (1, Pb)
    elif st == 2:
        want["dp.reduce_scatter"] = (n, Pb)
        want["dp.all_gather"] = (n, Pb)
    else:
        uses = sum(len(ps) for _, ps in modules())
        assert uses == n + 1
        want["dp.reduce_scatter"] = (n, Pb)
        want["dp.all_gather"] = (2 * uses, 2 * (Pb + wte))
    assert got == want, ("step %d run" % m["step"], got, "formula", want)
    pl = {k: (v["calls"], v["bytes"]) for k, v in plan.items()}
    assert pl == want, ("plan", pl, "formula", want)
moved = sum(b for k, (c, b) in want.items() if k.split(".")[0] in ("dp", "dp-cp") and k != "dp.all_reduce")
print("dp %d %s: %s (zero-moved bytes %.2f x P)" % (dp, "no zero" if st == 0 else "stage %d" % st,
      ", ".join("%s %d calls %d B" % (k, c, b) for k, (c, b) in sorted(want.items())), moved / Pb))
PY
    done
done
echo PASS
