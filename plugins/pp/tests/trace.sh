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
# ZB-H1 on pp 2: the backward's two parts show as backward_input and
# backward_weight spans of every micro-batch, each W after its B.
run_mpi 2 "$TESSERA" train model.ini --set parallel.plugins=pp --set pp.size=2 \
    --set pp.schedule=zb_h1 --set train.micro_batch=4 --set train.steps=2 --set train.trace=zb.json \
    > zb.txt 2>&1 || { cat zb.txt; fail "zb_h1 run failed"; }
python3 - <<'PY' || fail "zb_h1 trace"
import json
spans = [e for e in json.load(open("zb.json"))["traceEvents"] if e.get("ph") == "X"]
for pid in (0, 1):
    for mb in range(4):
        b = [e for e in spans if e["pid"] == pid and e["name"] == "backward_input" and e["args"]["mb"] == mb]
        w = [e for e in spans if e["pid"] == pid and e["name"] == "backward_weight" and e["args"]["mb"] == mb]
        assert len(b) == len(w) == 2, (pid, mb, len(b), len(w))  # two steps
        assert all(x["ts"] + x["dur"] <= y["ts"] for x, y in zip(b, w)), (pid, mb)
print("zb_h1 trace: backward_input then backward_weight for every micro-batch on both ranks")
PY
echo PASS
