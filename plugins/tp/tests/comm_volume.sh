# Communication volume: per step, the tp group's collectives equal the
# analytic count of plugins/tp/README.md, read from the communicator's
# counters, with and without sequence parallelism (N = B*T, C, L layers,
# one micro-batch per step; bytes as the counters define them: all_reduce
# the buffer, all_gather the gathered total, reduce_scatter the input total).
. "$2/tests/cli/multirank.sh"
write_config
for sp in false true; do
    run_mpi 2 "$TESSERA" train model.ini --set parallel.plugins=tp --set tp.size=2 \
        --set tp.sequence_parallel=$sp --set train.steps=2 --set train.metrics=m.jsonl \
        > run.txt 2>&1 || { cat run.txt; fail "run failed"; }
    "$TESSERA" plan model.ini --set parallel.plugins=tp --set tp.size=2 \
        --set tp.sequence_parallel=$sp --world 2 --json > plan.json || fail "plan failed"
    python3 - "$sp" <<'PY' || fail "sequence_parallel=$sp"
import json, sys
sp = sys.argv[1] == "true"
B, T, C, L, maxT = 16, 32, 64, 2, 64
N = B * T
act = 4 * N * C  # one hidden state (B, T, C) in f32
if not sp:
    # forward: embedding 1, every block 2 (after the row-parallel products);
    # head: max (N) and {sum-exp, target logit} (2N); backward: head 1,
    # every block 2 (before the column-parallel products' input gradient).
    want = {"all_reduce": (4 + 4 * L, act * (2 + 4 * L) + 4 * 3 * N)}
else:
    partial = maxT * C + L * 6 * C + 2 * C  # wpe, LayerNorms, row-parallel biases, lnf
    want = {
        # embedding 1, blocks 2L forward; head 1, blocks 2L backward
        "reduce_scatter": (2 + 4 * L, act * (2 + 4 * L)),
        # blocks 2L and head 1 forward; backward: blocks 4L (dout twice, the
        # saved slices twice, for the weight gradients), head 1 (the saved
        # slice of lnf), embedding 1
        "all_gather": (3 + 6 * L, act * (3 + 6 * L)),
        # the head's two reductions, and once per step the partial gradients
        # of the weights used on sequence slices (1 + 6L + 2 tensors)
        "all_reduce": (2 + 1 + 6 * L + 2, 4 * 3 * N + 4 * partial),
    }
for line in open("m.jsonl"):
    got = json.loads(line)["comm"]["tp"]
    assert set(got) == set(want), (sorted(got), sorted(want))
    for op, (calls, nbytes) in want.items():
        assert got[op]["calls"] == calls and got[op]["bytes"] == nbytes, (op, got[op], calls, nbytes)
# tessera plan predicts the same traffic without running anything.
plan = json.load(open("plan.json"))["comm"]
for op, (calls, nbytes) in want.items():
    assert plan["tp." + op] == {"calls": calls, "bytes": nbytes}, (op, plan.get("tp." + op))
print("sequence_parallel=%s: %s" % (sys.argv[1], ", ".join(
    "%s %d calls %d bytes" % (op, c, b) for op, (c, b) in sorted(want.items()))))
PY
done
echo PASS
