# The auxiliary losses on N ranks are one rank's: the load-balancing loss
# needs each expert's token count and probability mass over every rank
# holding rows of the micro-batch (dp, and tp under sequence parallelism),
# the z-loss the token total. On 8 ranks (dense tp 2 x dp 4 with SP,
# experts ep 4 x edp 2) the metrics' aux_loss and z_loss of every step equal
# those of one rank within 1e-5, and the rows per expert sum to the same
# total. (Counting over dp alone would halve the token totals and change
# both losses by far more.)
. "$2/tests/cli/multirank.sh"
write_config
moe=(--set model.experts=8 --set model.top_k=2 --set model.aux_loss_coeff=0.1
    --set model.z_loss_coeff=0.01 --set train.steps=5)
"$TESSERA" train model.ini "${moe[@]}" --set train.metrics=one.jsonl > one.txt 2>&1 ||
    { cat one.txt; fail "one rank"; }
run_mpi 8 "$TESSERA" train model.ini "${moe[@]}" --set parallel.plugins=dp,tp,ep --set tp.size=2 \
    --set tp.sequence_parallel=true --set ep.size=4 --set train.micro_batch=4 \
    --set train.metrics=par.jsonl > par.txt 2>&1 || { cat par.txt; fail "8 ranks"; }
python3 - <<'PY' || fail "auxiliary losses"
import json
one = [json.loads(l)["moe"] for l in open("one.jsonl")]
par = [json.loads(l)["moe"] for l in open("par.jsonl")]
assert len(one) == len(par) == 5
for i, (a, b) in enumerate(zip(one, par)):
    for k in ("aux_loss", "z_loss"):
        rel = abs(a[k] - b[k]) / abs(a[k])
        assert rel < 1e-5, (i + 1, k, a[k], b[k])
    assert sum(a["expert_tokens"]) == sum(b["expert_tokens"]) == 2 * 16 * 32 * 2, (i + 1)
print("aux_loss %s / z_loss %s over 5 steps, equal to one rank's within 1e-5"
      % (" ".join("%.6f" % m["aux_loss"] for m in par), " ".join("%.6f" % m["z_loss"] for m in par)))
PY
echo PASS
