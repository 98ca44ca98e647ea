# Memory of the schedules, pp = 4 (one layer per stage), measured per stage
# by the allocator (activation peak, from the metrics). With m micro-batches
# GPipe holds all m in flight on every stage, 1F1B at most p - stage: so
# 1F1B at m = 16 needs no more than GPipe at m = 4 (both 4 in flight on
# stage 0), while GPipe's peak grows with m and 1F1B's does not: the
# gradients a stage sent upstream are freed once their send has completed
# (held to the optimizer step, 1F1B at m = 16 held up to 15 more on stages
# 1-3, 8 KiB each).
. "$2/tests/cli/multirank.sh"
write_config
run() { # SCHEDULE GLOBAL_BATCH
    run_mpi 4 "$TESSERA" train model.ini --set parallel.plugins=pp --set pp.size=4 \
        --set pp.schedule=$1 --set model.layers=4 --set train.micro_batch=1 \
        --set train.global_batch=$2 --set train.steps=2 --set train.metrics=$1.$2.jsonl \
        > $1.$2.txt 2>&1 || { cat $1.$2.txt; fail "$1 with $2 micro-batches failed"; }
}
run gpipe 4
run gpipe 16
run 1f1b 4
run 1f1b 16
python3 - <<'PY' || fail "memory"
import json
def peaks(name):
    return json.loads(open(name).readlines()[-1])["pipeline"]["activation_peak_bytes"]
g4, g16, f16 = peaks("gpipe.4.jsonl"), peaks("gpipe.16.jsonl"), peaks("1f1b.16.jsonl")
f4 = peaks("1f1b.4.jsonl")
print("activation peak per stage (bytes), p = 4:")
print("  gpipe m=4  ", g4)
print("  gpipe m=16 ", g16)
print("  1f1b  m=4  ", f4)
print("  1f1b  m=16 ", f16)
for s in range(4):
    # 1F1B with 16 micro-batches holds no more than GPipe with 4 (KiB rounding).
    assert f16[s] <= g4[s] + 1024, ("stage", s, f16[s], g4[s])
    # GPipe grows with m: 12 more micro-batches in flight.
    assert g16[s] > 2 * g4[s], ("stage", s, g16[s], g4[s])
    # 1F1B does not grow with m: at most one more gradient whose send is
    # still in flight (one micro-batch's hidden state, 1 x 32 x 64 floats),
    # KiB rounding.
    assert f16[s] <= f4[s] + 4 * 32 * 64 + 1024, ("stage", s, "1f1b m=16", f16[s], "m=4", f4[s])
print("1F1B/GPipe at m=16, stage 0: %.2f" % (f16[0] / g16[0]))
PY
echo PASS
