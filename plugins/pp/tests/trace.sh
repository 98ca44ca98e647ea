# A trace from a dp x tp x pp = 2 x 2 x 2 run on 8 ranks loads as valid
# trace-event JSON with spans on all 8 ranks: forward, backward, send, recv,
# the gradient synchronisation and the optimizer step, with micro-batch and
# stage in their args. The run also reports each stage's measured bubble.
. "$2/tests/cli/multirank.sh"
write_config
run_mpi 8 "$TESSERA" train model.ini --set parallel.plugins=dp,tp,pp --set tp.size=2 \
    --set pp.size=2 --set train.micro_batch=2 --set train.steps=3 --set train.trace=run.json \
    --set train.metrics=m.jsonl > run.txt 2>&1 || { cat run.txt; fail "run failed"; }
python3 - <<'PY' || fail "trace"
import json
doc = json.load(open("run.json"))
events = doc["traceEvents"]
spans = [e for e in events if e.get("ph") == "X"]
pids = sorted({e["pid"] for e in spans})
assert pids == list(range(8)), pids
for pid in pids:
    names = {e["name"] for e in spans if e["pid"] == pid}
    for need in ("forward", "backward", "send", "recv", "grad_sync", "optimizer_step", "step"):
        assert need in names, (pid, need, names)
    fwd = [e for e in spans if e["pid"] == pid and e["name"] == "forward"]
    assert all("mb" in e["args"] and "stage" in e["args"] for e in fwd), fwd[:1]
    assert all(e["dur"] >= 0 for e in spans if e["pid"] == pid)
names = [e for e in events if e.get("ph") == "M" and e.get("name") == "process_name"]
assert len(names) == 8, names
m = json.loads(open("m.jsonl").readlines()[-1])["pipeline"]
assert m["stages"] == 2 and len(m["bubble"]) == 2 and all(0 <= b < 1 for b in m["bubble"]), m
print("trace: %d spans on ranks %s; measured bubble per stage %s" % (len(spans), pids, m["bubble"]))
PY
echo PASS
