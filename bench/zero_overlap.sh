#!/usr/bin/env bash
# zero_overlap.sh — how much of zero's communication hides behind compute,
# on 2 ranks of this machine. Run by hand:
#     bench/zero_overlap.sh [BUILD_DIR]
# For each stage it trains the same model for 12 steps with overlap on
# ([zero] overlap = true, prefetch = 1) and off (overlap = false, prefetch =
# 0: every reduction and gather waited where it is needed, with nothing in
# flight), alternating, 2 runs of each, and prints from steps 3..12: median
# step ms, the time blocked waiting for all-gathers and reduce-scatters (the
# exposed time, zero's metrics gather_wait_ms and reduce_wait_ms), and the
# hidden fraction 1 - exposed(on) / exposed(off). On CPU ranks the transport
# (MPI) shares the two cores with the compute, so little can hide; the figure
# says what the schedule allows, not what a GPU with its own copy engines
# would get.
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
plugins = dp, zero
[zero]
bucket_mb = 2
INI
for round in 1 2; do
    for stage in 1 2 3; do
        for mode in on off; do
            if [ $mode = on ]; then set=(--set zero.overlap=true --set zero.prefetch=1);
            else set=(--set zero.overlap=false --set zero.prefetch=0); fi
            mpirun --oversubscribe --bind-to none -np 2 "$TESSERA" train bench.ini --set zero.stage=$stage \
                "${set[@]}" --set train.metrics=$stage.$mode.$round.jsonl > /dev/null
        done
    done
done
python3 - <<'PY'
import json, statistics
print("stage  mode  step_ms  gather_wait_ms  reduce_wait_ms  exposed_ms  hidden")
for stage in (1, 2, 3):
    exposed = {}
    for mode in ("on", "off"):
        rows = []
        for r in (1, 2):
            rows += [json.loads(l) for l in open("%d.%s.%d.jsonl" % (stage, mode, r))][2:]
        ms = statistics.median(x["step_ms"] for x in rows)
        g = statistics.median(x["plugins"]["zero"]["gather_wait_ms"] for x in rows)
        w = statistics.median(x["plugins"]["zero"]["reduce_wait_ms"] for x in rows)
        exposed[mode] = (ms, g, w, g + w)
    for mode in ("on", "off"):
        ms, g, w, e = exposed[mode]
        hidden = "" if mode == "off" else "%.2f" % (1 - e / exposed["off"][3] if exposed["off"][3] else 0)
        print("%5d  %4s  %7.1f  %14.2f  %14.2f  %10.2f  %s" % (stage, mode, ms, g, w, e, hidden))
PY
