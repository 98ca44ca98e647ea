# Memory with tp = 4:
#  - each rank holds 1/4 of every sharded tensor and all of the replicated
#    ones (params allocated, counted by the allocator, equal that exactly);
#  - the activation peak of a run equals `tessera plan`'s estimate exactly,
#    and sequence parallelism lowers it (both figures printed);
#  - the full logits (N x Vp floats) never exist on one rank: with a
#    vocabulary of 8192 they alone would exceed the whole measured peak.
# Usage: memory.sh TESSERA SRC [DEVICE] — DEVICE cpu (default) or cuda (one
# GPU per rank; `tessera plan` then counts the GPU attention's state).
. "$2/tests/cli/multirank.sh"
DEVICE=${1:-cpu}
write_config
common=(--set model.vocab=8192 --set parallel.plugins=tp --set tp.size=4 --set train.steps=2
    --set train.device=$DEVICE)
for sp in false true; do
    run_mpi 4 "$TESSERA" train model.ini "${common[@]}" --set tp.sequence_parallel=$sp \
        --set train.metrics=$sp.jsonl > $sp.txt 2>&1 || { cat $sp.txt; fail "run failed"; }
    "$TESSERA" plan model.ini "${common[@]}" --set tp.sequence_parallel=$sp --world 4 --json \
        > $sp.plan.json || fail "plan failed"
done
python3 - <<'PY' || fail "memory"
import json
C, L, V, maxT, tp = 64, 2, 8192, 64, 4
N = 16 * 32
sharded = V * C + L * (3 * C * C + 3 * C + C * C + 4 * C * C + 4 * C + 4 * C * C)
replicated = maxT * C + L * (2 * C + C + 2 * C + C) + 2 * C
peaks = {}
for sp in ("false", "true"):
    m = json.loads(open(sp + ".jsonl").readlines()[-1])["mem"]
    plan = json.load(open(sp + ".plan.json"))["memory"]
    want = 4 * (sharded // tp + replicated)
    assert m["params"]["allocated"] == want, (m["params"]["allocated"], want)
    assert plan["params"] == want, (plan["params"], want)
    peak = m["activations"]["peak"]
    assert peak == plan["activations"], ("measured", peak, "estimated", plan["activations"])
    full_logits = 4 * N * V
    assert peak < full_logits, (peak, full_logits)
    peaks[sp] = peak
    print("sequence_parallel=%s: activation peak %d bytes (= estimate); params %d bytes = "
          "1/4 of %d sharded + %d replicated elements; full logits would be %d bytes"
          % (sp, peak, want, sharded, replicated, full_logits))
assert peaks["true"] < peaks["false"], peaks
print("sequence parallelism saves %.1f%% of the activation peak" % (100 * (1 - peaks["true"] / peaks["false"])))
PY
echo PASS
