# Communication of the all-to-all dispatcher against the routing, on 4
# ranks (dp 4, ep 4; 8 experts, 2 on each rank; top 2; 2 MoE blocks; one
# micro-batch of N = 4 x 32 tokens per rank, rows of C = 64 floats). Per
# block, forward and again backward: dispatch sends all N k rows (to itself
# too), combine sends back the R0 rows its experts took, and the counts go
# ahead as one all_to_all of E ints. So rank 0's ep.all_to_all bytes are
#   sum over blocks of 2 (N k + R0) C 4 + 4 dispatches x 4 E,
# with sum R0 = the tokens of experts 0 and 1 in the metrics (ep spans the
# world). The row bytes the layer reports (dispatch_bytes) are the same
# without the counts. flex sends a token once per destination rank: its row
# bytes are all_to_all's minus what it reports saved (> 0, same routing).
# `tessera plan` routes evenly (R0 = N k) and predicts that balanced case.
# In a bf16 run the forward dispatch moves its rows in two bytes (they are
# the LayerNorm's bf16 values); combine and the backward stay f32: rows
#   sum over blocks of (N k 2 + R0 4) C + (N k + R0) C 4;
# with [train] partial_dtype = bf16 every row travels in two bytes: half of
# the f32 formula.
# Usage: comm.sh TESSERA SRC FLEX_DIR
. "$2/tests/cli/multirank.sh"
FLEX=$1
write_config
sets=(--set model.experts=8 --set model.top_k=2 --set parallel.plugins=dp,ep,flex
    --set parallel.plugin_path="$FLEX" --set ep.size=4 --set train.micro_batch=4 --set train.steps=2)
for d in all_to_all flex; do
    run_mpi 4 "$TESSERA" train model.ini "${sets[@]}" --set ep.dispatcher=$d \
        --set train.metrics=$d.jsonl > $d.txt 2>&1 || { cat $d.txt; fail "$d: run"; }
done
run_mpi 4 "$TESSERA" train model.ini "${sets[@]}" --set ep.dispatcher=all_to_all \
    --set train.dtype=bf16 --set train.metrics=bf16.jsonl > bf16.txt 2>&1 ||
    { cat bf16.txt; fail "bf16: run"; }
run_mpi 4 "$TESSERA" train model.ini "${sets[@]}" --set ep.dispatcher=all_to_all \
    --set train.dtype=bf16 --set train.partial_dtype=bf16 --set train.metrics=partial.jsonl \
    > partial.txt 2>&1 || { cat partial.txt; fail "bf16 partials: run"; }
"$TESSERA" plan model.ini "${sets[@]}" --world 4 --json > plan.json 2> plan.err ||
    { cat plan.err; fail "plan"; }
"$TESSERA" plan model.ini "${sets[@]}" --set train.dtype=bf16 --world 4 --json > plan16.json \
    2> plan.err || { cat plan.err; fail "plan bf16"; }
python3 - <<'PY' || fail "communication"
import json
N, k, C, E, L, ep = 4 * 32, 2, 64, 8, 2, 4
a2a = [json.loads(l) for l in open("all_to_all.jsonl")]
flex = [json.loads(l) for l in open("flex.jsonl")]
counts = 2 * L * 4 * E
for s, f in zip(a2a, flex):
    r0 = sum(s["moe"]["expert_tokens"][: E // ep])
    rows = 2 * (L * N * k + r0) * C * 4
    got = s["comm"]["ep"]["all_to_all"]["bytes"]
    assert got == rows + counts, ("step", s["step"], got, rows + counts)
    assert s["moe"]["dispatch_bytes"] == rows, (s["moe"]["dispatch_bytes"], rows)
    saved = f["plugins"]["flex"]["bytes_saved"]
    assert f["moe"]["expert_tokens"] == s["moe"]["expert_tokens"]
    assert saved > 0 and f["moe"]["dispatch_bytes"] == rows - saved, (f["moe"], saved)
    print("step %d: all_to_all %d bytes (rows %d, R0 %d), flex rows %d: %d saved (%.1f%%)"
          % (s["step"], got, rows, r0, rows - saved, saved, 100.0 * saved / rows))
plan = json.load(open("plan.json"))["comm"]["ep.all_to_all"]
balanced = 2 * (L * N * k + L * N * k) * C * 4 + counts
assert plan["bytes"] == balanced, (plan, balanced)
print("plan (balanced routing): %d bytes in %d calls" % (plan["bytes"], plan["calls"]))
for s in (json.loads(l) for l in open("bf16.jsonl")):
    r0 = sum(s["moe"]["expert_tokens"][: E // ep])
    rows = (L * N * k * 2 + r0 * 4) * C + (L * N * k + r0) * C * 4
    got = s["comm"]["ep"]["all_to_all"]["bytes"]
    assert got == rows + counts, ("bf16 step", s["step"], got, rows + counts)
    assert s["moe"]["dispatch_bytes"] == rows, (s["moe"]["dispatch_bytes"], rows)
    print("bf16 step %d: all_to_all %d bytes (rows %d, R0 %d)" % (s["step"], got, rows, r0))
plan = json.load(open("plan16.json"))["comm"]["ep.all_to_all"]
balanced = (L * N * k * 2 + L * N * k * 4) * C + 2 * L * N * k * C * 4 + counts
assert plan["bytes"] == balanced, ("bf16 plan", plan, balanced)
print("bf16 plan (balanced routing): %d bytes" % plan["bytes"])
for s in (json.loads(l) for l in open("partial.jsonl")):
    r0 = sum(s["moe"]["expert_tokens"][: E // ep])
    rows = (L * N * k + r0) * C * 4  # both ways, two bytes a value
    got = s["comm"]["ep"]["all_to_all"]["bytes"]
    assert got == rows + counts and s["moe"]["dispatch_bytes"] == rows, ("partial", s["step"], got, rows)
    print("bf16 partials step %d: all_to_all %d bytes (rows %d, R0 %d)" % (s["step"], got, rows, r0))
PY
echo PASS
