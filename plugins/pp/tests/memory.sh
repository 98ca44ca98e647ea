# Memory of the schedules, pp = 4 (one layer per stage), measured per stage
# by the allocator (activation peak, from the metrics). With m micro-batches
# GPipe holds all m in flight on every stage, 1F1B at most p - stage: so
# 1F1B at m = 16 needs no more than GPipe at m = 4 (both 4 in flight on
# stage 0), while GPipe's peak grows with m.
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
run 1f1b 16
python3 - <<'PY' || fail "memory"
import json
def peaks(name):
    return json.loads(open(name).readlines()[-1])["pipeline"]["activation_peak_bytes"]
g4, g16, f16 = peaks("gpipe.4.jsonl"), peaks("gpipe.16.jsonl"), peaks("1f1b.16.jsonl")
print("activation peak per stage (bytes), p = 4:")
print("  gpipe m=4  ", g4)
print("  gpipe m=16 ", g16)
print("  1f1b  m=16 ", f16)
for s in range(4):
    # 1F1B with 16 micro-batches holds no more than GPipe with 4 (KiB rounding).
    assert f16[s] <= g4[s] + 1024, ("stage", s, f16[s], g4[s])
    # GPipe grows with m: 12 more micro-batches in flight.
    assert g16[s] > 2 * g4[s], ("stage", s, g16[s], g4[s])
print("1F1B/GPipe at m=16, stage 0: %.2f" % (f16[0] / g16[0]))
PY
echo PASS
