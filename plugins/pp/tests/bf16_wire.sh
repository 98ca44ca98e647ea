# In bf16 runs the pipeline's activations and gradients travel as bf16: on
# 2 stages the send and recv bytes per step are half the fp32 run's, equal
# to tessera plan's dry run, and training still matches one rank within the
# bf16 tolerance (the pp bf16 equivalence tests).
. "$2/tests/cli/multirank.sh"
write_config
for d in fp32 bf16; do
    train_and_plan $d 2 -- --set parallel.plugins=pp --set pp.size=2 --set train.dtype=$d \
        --set train.micro_batch=4 --set train.steps=3
done
python3 - <<'PY' || fail "pipeline bytes"
import json
run = {d: [json.loads(l) for l in open(d + ".jsonl")][-1]["comm"]["pp"] for d in ("fp32", "bf16")}
plan = {d: json.load(open("%s.plan.json" % d))["comm"] for d in ("fp32", "bf16")}
for op in ("send", "recv"):
    f, b = run["fp32"][op], run["bf16"][op]
    assert f["calls"] == b["calls"] and 2 * b["bytes"] == f["bytes"], (op, f, b)
    assert plan["bf16"]["pp." + op]["bytes"] == b["bytes"], (op, plan["bf16"])
    print("pp %s per step: fp32 %d bytes, bf16 %d bytes (plan %d), %d calls"
          % (op, f["bytes"], b["bytes"], plan["bf16"]["pp." + op]["bytes"], b["calls"]))
PY
echo PASS
