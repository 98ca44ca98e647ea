#!/usr/bin/env bash
# dp_overlap.sh — how much of the data-parallel gradient all-reduce hides
# behind backward, on 2 ranks of this machine. Run by hand:
#     bench/dp_overlap.sh [BUILD_DIR]
# It trains the same model for 12 steps with [dp] overlap = true and = false
# (alternating runs, 2 of each, side by side in one invocation) and prints,
# from the metrics of steps 3..12: median step ms, the all-reduce span (first
# bucket start to last completion), the part of it exposed after backward,
# and the hidden fraction 1 - exposed / span (the dp plugin's own metric).
. "$(dirname "$0")/lib.sh" "$@"
cat > bench.ini <<'INI'
[model]
layers = 6
d_model = 384
heads = 6
vocab = 8192
context = 128
[data]
source = synthetic
synthetic_tokens = 262144
[train]
steps = 12
seq_len = 128
micro_batch = 4
global_batch = 8
[parallel]
plugins = dp
[dp]
bucket_mb = 2
INI
for round in 1 2; do
    for overlap in true false; do
        mpirun --oversubscribe --bind-to none -np 2 "$TESSERA" train bench.ini \
            --set dp.overlap=$overlap --set train.metrics=$overlap.$round.jsonl > /dev/null
    done
done
python3 - <<'PY'
import json, statistics
for overlap in ("true", "false"):
    rows = []
    for r in (1, 2):
        rows += [json.loads(l) for l in open("%s.%d.jsonl" % (overlap, r))][2:]
    ms = statistics.median(x["step_ms"] for x in rows)
    dp = [x["plugins"]["dp"] for x in rows]
    span = statistics.median(d["allreduce_span_ms"] for d in dp)
    exposed = statistics.median(d["allreduce_exposed_ms"] for d in dp)
    hidden = statistics.median(d["hidden_fraction"] for d in dp)
    print("overlap=%-5s step %7.1f ms | buckets %d | all-reduce %.1f MB | span %6.1f ms | "
          "exposed %6.1f ms | hidden %.0f%%" % (overlap, ms, dp[0]["buckets"],
          dp[0]["allreduce_bytes"] / 1e6, span, exposed, 100 * hidden))
PY
