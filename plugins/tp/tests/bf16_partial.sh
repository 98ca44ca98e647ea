# [train] partial_dtype = bf16 (bf16 runs): the partial sums of the
# row-parallel products and the gradients of activations cross the tp axis
# in bf16 too, so every tp collective of the model's tensors moves half the
# bytes of an f32 run, counted by the run and by tessera plan alike:
#  - tp 2 + SP: all_gather and reduce_scatter bytes exactly half of f32;
#  - tp 2 without SP: the all_reduce bytes less the cross-entropy's f32
#    statistics (the maximum and the two sums over the vocabulary: 3 floats
#    a row) half of f32's;
# the loss statistics stay f32. partial_dtype = bf16 in an f32 run is
# refused naming the key. (Equivalence: tp_equivalence_*_bf16_partials.)
. "$2/tests/cli/multirank.sh"
write_config
tp() { # NAME DTYPE PARTIAL SETS...
    local name=$1 d=$2 p=$3
    shift 3
    train_and_plan $name 2 -- --set parallel.plugins=tp --set tp.size=2 --set train.dtype=$d \
        --set train.partial_dtype=$p --set train.steps=2 "$@"
}
tp sp32 fp32 f32 --set tp.sequence_parallel=true
tp sp16 bf16 bf16 --set tp.sequence_parallel=true
tp no32 fp32 f32
tp no16 bf16 bf16
python3 - <<'PY' || fail "tp bytes"
import json
def comm(name):
    run = [json.loads(l) for l in open(name + ".jsonl")][-1]["comm"]["tp"]
    plan = json.load(open(name + ".plan.json"))["comm"]
    for op, c in run.items():
        assert plan["tp." + op]["bytes"] == c["bytes"], (name, op, "plan", plan["tp." + op], "run", c)
    return {op: c["bytes"] for op, c in run.items()}
a, b = comm("sp32"), comm("sp16")
for op in ("all_gather", "reduce_scatter"):
    assert b[op] * 2 == a[op], (op, a[op], b[op])
assert a["all_reduce"] == b["all_reduce"], (a, b)
G, T = 16, 32
stats = 3 * 4 * G * T  # the cross-entropy's f32 statistics
c, d = comm("no32"), comm("no16")
assert set(c) == {"all_reduce"} and (c["all_reduce"] - stats) == 2 * (d["all_reduce"] - stats), (c, d)
print("tp2+SP: all_gather %d -> %d, reduce_scatter %d -> %d, all_reduce %d (statistics) both; "
      "tp2: all_reduce %d -> %d (%d of it f32 statistics); plan = run" %
      (a["all_gather"], b["all_gather"], a["reduce_scatter"], b["reduce_scatter"], a["all_reduce"],
       c["all_reduce"], d["all_reduce"], stats))
PY
"$TESSERA" train model.ini --set train.partial_dtype=bf16 > bad.txt 2>&1 && fail "partial_dtype = bf16 in an f32 run was accepted"
grep -q "partial_dtype.*needs dtype = bf16" bad.txt || { cat bad.txt; fail "no message naming the key"; }
echo PASS
