# The memory ledger of bf16 activations: in bf16 mode every saved activation
# waits for its backward in two bytes per value, except the statistics and
# the attention's saved state, which stay f32 (docs/choices.md). Shown on
# two depths, 4 and 8 blocks, in f32 and in bf16:
#  - each run's activation peak equals `tessera plan`'s estimate exactly;
#  - what one more block adds to the peak in bf16 is exactly half of what it
#    adds in f32, except its f32 part: 4 * (4 rows of LayerNorm statistics +
#    the attention's saved floats: B*NH*T*T probabilities on the CPU, B*NH*T
#    log-sum-exps on CUDA) bytes in both.
# The ratio of the whole peaks is printed: it also holds the f32 workspace
# and the one block unpacked at a time (itemised by the plan).
# Usage: bf16_memory.sh TESSERA SRC [DEVICE] — cpu (default) or cuda.
. "$2/tests/cli/multirank.sh"
DEVICE=${1:-cpu}
write_config # the equivalence model, wider and with longer sequences:
model=(--set model.d_model=128 --set train.seq_len=64 --set train.global_batch=8
       --set train.micro_batch=8 --set train.steps=2)
for L in 4 8; do
    for d in fp32 bf16; do
        train_and_plan $L.$d 1 -- "${model[@]}" --set model.layers=$L --set train.dtype=$d \
            --set train.device=$DEVICE
    done
done
python3 - "$DEVICE" <<'PY' || fail "memory ledger"
import json, sys
B, T, C, NH = 8, 64, 128, 4
Nl = B * T
att = B * NH * T * T if sys.argv[1] == "cpu" else B * NH * T
keep = 4 * Nl + att  # f32 floats of a block in either mode
peak = {}
for L in (4, 8):
    for d in ("fp32", "bf16"):
        m = json.loads(open("%d.%s.jsonl" % (L, d)).readlines()[-1])["mem"]["activations"]["peak"]
        plan = json.load(open("%d.%s.plan.json" % (L, d)))
        est = plan["memory"]["activations"]
        print("L=%d %s: activation peak %d bytes, plan %d; at the peak %s" %
              (L, d, m, est, plan["activations_at_peak"]))
        assert m == est, ("measured", m, "estimated", est)
        peak[L, d] = m
d32 = (peak[8, "fp32"] - peak[4, "fp32"]) // 4
d16 = (peak[8, "bf16"] - peak[4, "bf16"]) // 4
want = (d32 - 4 * keep) // 2 + 4 * keep
print("one block adds %d bytes in f32, %d in bf16 (want %d: half of %d, plus %d f32)" %
      (d32, d16, want, d32 - 4 * keep, 4 * keep))
assert d16 == want, (d16, want)
print("8 blocks: bf16 peak / f32 peak = %.3f" % (peak[8, "bf16"] / peak[8, "fp32"]))
PY
echo "PASS"
