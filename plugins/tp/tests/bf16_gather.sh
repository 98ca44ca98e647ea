# In bf16 runs with sequence parallelism the all-gathers of activations move
# bf16 (the values are bf16 already, so they arrive exact): the forward's
# gathers of the hidden state and the backward's gathering of the same
# LayerNorm outputs again. Per step the tp all-gather bytes drop by half of
# those gathers' f32 bytes — 2 x (2 layers + 1) gathers of global_batch x
# seq_len x d_model — while partial sums and the backward's gathers of
# gradients stay f32; the counters
# equal tessera plan's dry run; tp_equivalence_tp2_bf16 keeps 1e-3.
. "$2/tests/cli/multirank.sh"
write_config
for d in fp32 bf16; do
    train_and_plan $d 2 -- --set parallel.plugins=tp --set tp.size=2 --set tp.sequence_parallel=true \
        --set train.dtype=$d --set train.steps=3
done
python3 - <<'PY' || fail "tp bytes"
import json
run = {d: [json.loads(l) for l in open(d + ".jsonl")][-1]["comm"]["tp"] for d in ("fp32", "bf16")}
plan = {d: json.load(open("%s.plan.json" % d))["comm"] for d in ("fp32", "bf16")}
L, G, T, C = 2, 16, 32, 64
values_f32 = 2 * (2 * L + 1) * G * T * C * 4
f, b = run["fp32"]["all_gather"], run["bf16"]["all_gather"]
assert f["calls"] == b["calls"] and f["bytes"] - b["bytes"] == values_f32 // 2, (f, b, values_f32)
for op in ("all_reduce", "reduce_scatter"):
    assert run["fp32"][op]["bytes"] == run["bf16"][op]["bytes"], op
for d in ("fp32", "bf16"):
    for op in ("all_gather", "all_reduce", "reduce_scatter"):
        assert plan[d]["tp." + op]["bytes"] == run[d][op]["bytes"], (d, op)
print("tp all_gather per step: fp32 %d bytes, bf16 %d (%d gathers of activations halved); "
      "all_reduce and reduce_scatter unchanged; plan = run" % (f["bytes"], b["bytes"], 2 * (2 * L + 1)))
PY
echo PASS
