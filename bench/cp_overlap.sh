#!/usr/bin/env bash
# cp_overlap.sh — how much of the ring's K/V exchange hides behind the
# attention of the block in hand, on this machine. Run by hand:
#     bench/cp_overlap.sh [BUILD_DIR]
# It trains one model with a long sequence (1024 tokens) on cp = 2 and 4
# ranks, ring attention with [cp] overlap = true (the next block's send and
# recv started before attending to this one) and false (exchange, then
# attend), alternating, 2 runs of each, and prints from steps 3..8: median
# step ms, the time blocked in the exchange (the cp metric wait_ms: the
# exposed communication) and the hidden fraction 1 - exposed(on) /
# exposed(off). On CPU ranks MPI's shared-memory transport copies with the
# same cores that compute, and with more ranks than cores a rank waits for
# its neighbour's compute as much as for bytes, so little can hide; the
# figure says what the schedule allows, not what a GPU's copy engines get.
. "$(dirname "$0")/lib.sh" "$@"
cat > bench.ini <<'INI'
[model]
layers = 4
d_model = 256
heads = 4
vocab = 4096
context = 1024
[data]
source = synthetic
synthetic_tokens = 262144
[train]
steps = 8
seq_len = 1024
micro_batch = 2
global_batch = 2
[parallel]
plugins = cp
[cp]
algorithm = ring
INI
for round in 1 2; do
    for n in 2 4; do
        for mode in true false; do
            mpirun --oversubscribe --bind-to none -np $n "$TESSERA" train bench.ini --set cp.size=$n \
                --set cp.overlap=$mode --set train.metrics=$n.$mode.$round.jsonl > /dev/null
        done
    done
done
python3 - <<'PY'
import json, statistics
print("cp  overlap  step_ms  exposed_ms  hidden")
for n in (2, 4):
    exposed = {}
    for mode in ("true", "false"):
        rows = []
        for r in (1, 2):
            rows += [json.loads(l) for l in open("%d.%s.%d.jsonl" % (n, mode, r))][2:]
        step = statistics.median(r["step_ms"] for r in rows)
        wait = statistics.median(r["plugins"]["cp"]["wait_ms"] for r in rows)
        exposed[mode] = wait
        print("%2d  %-7s  %7.1f  %10.1f" % (n, mode, step, wait))
    hidden = 1 - exposed["true"] / exposed["false"] if exposed["false"] > 0 else 0.0
    print("    hidden fraction of the exchange: %.2f" % hidden)
PY
