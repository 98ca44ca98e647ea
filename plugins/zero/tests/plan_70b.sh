# `tessera plan` of about 70B parameters in the gpt2 architecture (86 layers
# of d_model 8192, 64 heads, GPT-2's vocabulary and context), bf16, 16 ranks,
# zero stage 3: it prints the weights (2P bytes), the model state of the
# ZeRO paper's ledger (16P: bf16 weights and gradients, f32 master weights
# and moments) and that state fully sharded (16P/16); P is checked against
# the architecture's count, and for P = 70e9 these would be 140 GB, 1.12 TB
# and 70 GB. The dry run's own per-rank bytes (this build keeps f32
# gradients: 2P + 4P + 12P over 16) are checked too, without allocating
# anything.
. "$2/tests/cli/lib.sh"
cat > big.ini <<'INI'
[model]
layers = 86
d_model = 8192
heads = 64
vocab = 50257
context = 1024
[train]
dtype = bf16
seq_len = 1024
micro_batch = 1
global_batch = 16
steps = 1
INI
sets=(--set parallel.plugins=dp,zero --set zero.stage=3)
"$TESSERA" plan big.ini --world 16 "${sets[@]}" > plan.txt 2>&1 || { cat plan.txt; fail "plan"; }
"$TESSERA" plan big.ini --world 16 --json "${sets[@]}" > plan.json 2>&1 || { cat plan.json; fail "plan --json"; }
grep "^model state" plan.txt
python3 - <<'PY' || fail "the 70B arithmetic"
import json, re
C, L, V, T = 8192, 86, 50257, 1024
Vp = (V + 127) // 128 * 128
P = L * (12 * C * C + 13 * C) + Vp * C + T * C + 2 * C
s = json.load(open("plan.json"))["model_state"]
assert s["parameters"] == P, (s["parameters"], P)
assert s["weights_bytes"] == 2 * P and s["state_bytes"] == 16 * P, s
assert s["dp"] == 16 and s["state_bytes_per_rank"] == P, s
text = open("plan.txt").read()
for want in ("weights %.4g GB (2P)" % (2 * P / 1e9), "model state %.4g TB (16P" % (16 * P / 1e12),
             "%.4g GB per rank (16P/16)" % (P / 1e9)):
    assert want in text, want
# The same arithmetic at P = 70e9 gives the survey's figures.
Q = 70e9
assert (2 * Q / 1e9, 16 * Q / 1e12, 16 * Q / 16 / 1e9) == (140.0, 1.12, 70.0)
run = s["run_bytes_per_rank"]
assert run == (2 + 4 + 12) * P // 16, (run, 18 * P // 16)
print("P = %d: weights %.1f GB, model state %.3f TB, %.1f GB per rank (16P/16); this run keeps "
      "%.1f GB per rank (18P/16, f32 gradients)" % (P, 2 * P / 1e9, 16 * P / 1e12, P / 1e9, run / 1e9))
PY
echo PASS
