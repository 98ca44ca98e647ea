# The memory ledger of activation recomputation, each run's activation peak
# equal to `tessera plan`'s to the byte:
#  - where the attention's T x T state dominates (T = 1024, 4 heads, 2
#    blocks, on the CPU): recompute = selective keeps no (B, NH, T, T)
#    array at all (its backward makes each block of rows' probabilities
#    again), so its peak is below none's by at least the probabilities of
#    every block (L B NH T^2 4 bytes);
#  - full keeps of each block only its input (the previous module's
#    output) plus one block's working set while it is recomputed: from 4 to
#    8 blocks its peak grows by exactly 4 inputs (B T C floats each; bf16
#    values packed in two bytes), in f32 and in bf16, where none's grows by
#    whole blocks of saved state.
# On a GPU (DEVICE cuda: the emulated one; f32 alone, for time) the
# attention keeps only its log-sum-exp (B NH T floats a block), which
# selective drops: its peak is below none's by those of all blocks but the
# one made again in the workspace; the T = 1024 part is the CPU's alone.
# Usage: recompute_memory.sh TESSERA SRC [DEVICE] — cpu (default) or cuda.
. "$2/tests/cli/multirank.sh"
DEVICE=${1:-cpu}
write_config
if [ "$DEVICE" = cpu ]; then
    long=(--set model.context=1024 --set train.seq_len=1024 --set train.global_batch=2
          --set train.micro_batch=2 --set train.steps=2)
    for m in none selective full; do
        train_and_plan long.$m 1 -- "${long[@]}" --set train.recompute=$m
    done
fi
model=(--set model.d_model=128 --set train.seq_len=64 --set train.global_batch=8
       --set train.micro_batch=8 --set train.steps=2 --set train.device=$DEVICE)
dtypes="fp32 bf16"
[ "$DEVICE" = cpu ] || dtypes=fp32
for L in 4 8; do
    for d in $dtypes; do
        for m in none selective full; do
            train_and_plan $L.$d.$m 1 -- "${model[@]}" --set model.layers=$L \
                --set train.dtype=$d --set train.recompute=$m
        done
    done
done
python3 - "$DEVICE" <<'PY' || fail "memory ledger"
import json, os, sys
def peak(name):
    run = json.loads(open(name + ".jsonl").readlines()[-1])["mem"]["activations"]["peak"]
    plan = json.load(open(name + ".plan.json"))
    est = plan["memory"]["activations"]
    assert run == est, (name, "measured", run, "plan", est)
    return run, plan["activations_at_peak"]
if sys.argv[1] == "cpu":
    B, T, NH, L = 2, 1024, 4, 2
    att = B * NH * T * T * 4  # one block's probabilities, bytes
    p = {m: peak("long." + m) for m in ("none", "selective", "full")}
    for m, (v, items) in p.items():
        print("T=1024 %-9s activation peak %10d bytes = plan; at the peak %s" % (m, v, items))
    saved = p["selective"][1].get("saved (f32)", 0)
    assert saved < att, ("selective keeps a T x T array", saved, att)
    cut = p["none"][0] - p["selective"][0]
    print("selective: %d bytes below none, %.2f x the %d bytes of every block's probabilities"
          % (cut, cut / (L * att), L * att))
    assert cut >= L * att, (cut, L * att)
else:
    B, T, NH = 8, 64, 4
    for d in ("fp32",):
        for L in (4, 8):
            cut = peak("%d.%s.none" % (L, d))[0] - peak("%d.%s.selective" % (L, d))[0]
            want = (L - 1) * B * NH * T * 4
            print("%s, %d blocks: selective %d bytes below none (the log-sum-exps of %d blocks: %d)"
                  % (d, L, cut, L - 1, want))
            assert cut == want, (d, L, cut, want)
B, T, C = 8, 64, 128
for d, size in (("fp32", 4), ("bf16", 2))[:2 if sys.argv[1] == "cpu" else 1]:
    grow = {m: peak("8.%s.%s" % (d, m))[0] - peak("4.%s.%s" % (d, m))[0] for m in ("none", "full")}
    want = 4 * B * T * C * size
    print("%s, 4 -> 8 blocks: full's peak grows %d bytes (4 inputs: %d), none's %d" %
          (d, grow["full"], want, grow["none"]))
    assert grow["full"] == want, (d, grow["full"], want)
    assert grow["none"] > 4 * grow["full"], grow
PY
echo PASS
