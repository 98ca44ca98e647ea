# `tessera plan` predicts, without running anything, the communication a
# step makes: for dp, tp, tp with sequence parallelism, pp (1F1B) and
# dp x tp x pp on 8 ranks, the plan's calls and bytes per group and
# operation for rank 0 equal the counters rank 0 measured in each of two
# real steps (exactly: the plan runs the same trainer, model and plugins over
# communicators that only count); with activation recomputation (tp + SP
# full, cp x tp selective) too.
# Usage: plan_matches_run.sh TESSERA SRC
. "$(dirname "$0")/multirank.sh"
write_config
check() { # NAME NP ARGS...
    local name=$1 np=$2
    shift 2
    run_mpi "$np" "$TESSERA" train model.ini "$@" --set train.steps=2 \
        --set train.metrics=$name.jsonl > $name.txt 2>&1 || { cat $name.txt; fail "$name: run"; }
    "$TESSERA" plan model.ini "$@" --world "$np" --rank 0 --json > $name.plan.json 2> $name.plan.err ||
        { cat $name.plan.err; fail "$name: plan"; }
    python3 - "$name" <<'PY' || fail "$1: plan and run differ"
import json, sys
name = sys.argv[1]
plan = json.load(open(name + ".plan.json"))["comm"]
for line in open(name + ".jsonl"):
    m = json.loads(line)
    run = {"%s.%s" % (g, op): {"calls": c["calls"], "bytes": c["bytes"]}
           for g, ops in m["comm"].items() for op, c in ops.items()}
    if run != plan:
        for k in sorted(set(run) | set(plan)):
            if run.get(k) != plan.get(k):
                print("  %s: run %s, plan %s" % (k, run.get(k), plan.get(k)))
        sys.exit("%s step %d: the plan's communication differs from the run's" % (name, m["step"]))
print("%s: %d group.op entries equal in both steps (%s)" % (name, len(plan), ", ".join(
    "%s %d/%d" % (k, v["calls"], v["bytes"]) for k, v in sorted(plan.items()))))
PY
}
check dp 2 --set parallel.plugins=dp --set train.micro_batch=4
check tp 2 --set parallel.plugins=tp --set tp.size=2
check tp_sp 2 --set parallel.plugins=tp --set tp.size=2 --set tp.sequence_parallel=true
check pp 2 --set parallel.plugins=pp --set pp.size=2 --set pp.schedule=1f1b --set train.micro_batch=4
check dp_tp_pp 8 --set parallel.plugins=dp,tp,pp --set tp.size=2 --set pp.size=2 \
    --set tp.sequence_parallel=true --set train.micro_batch=4
# Activation recomputation repeats the forward's collectives inside the
# backward: the run counts them, the plan predicts them, and the plan's
# share of recomputed forwards is exactly what full adds to none.
check tp_sp_full 2 --set parallel.plugins=tp --set tp.size=2 --set tp.sequence_parallel=true \
    --set train.recompute=full
check cp_tp_selective 4 --set parallel.plugins=cp,tp --set tp.size=2 --set cp.size=2 \
    --set tp.sequence_parallel=true --set train.recompute=selective
"$TESSERA" plan model.ini --world 2 --rank 0 --json --set parallel.plugins=tp --set tp.size=2 \
    --set tp.sequence_parallel=true > tp_sp_none.plan.json || fail "plan of tp_sp none"
python3 - <<'PY' || fail "the recomputed communication is not what full adds to none"
import json
full = json.load(open("tp_sp_full.plan.json"))
none = json.load(open("tp_sp_none.plan.json"))
re = full["comm_recomputed"]
assert re, "full recomputation of tp + SP blocks repeats no collective"
for k in sorted(set(full["comm"]) | set(none["comm"])):
    f = full["comm"].get(k, {"calls": 0, "bytes": 0})
    n = none["comm"].get(k, {"calls": 0, "bytes": 0})
    r = re.get(k, {"calls": 0, "bytes": 0})
    assert (f["calls"] - n["calls"], f["bytes"] - n["bytes"]) == (r["calls"], r["bytes"]), (k, f, n, r)
print("full adds to none exactly the recomputed share: %s" % ", ".join(
    "%s %d/%d" % (k, v["calls"], v["bytes"]) for k, v in sorted(re.items())))
fl = full["flops"]
print("flops: forward %.6g, backward %.6g, recomputed %.6g" % (fl["forward"], fl["backward"], fl["recomputed"]))
assert fl["recomputed"] > 0 and none["flops"]["recomputed"] == 0
PY
echo PASS
