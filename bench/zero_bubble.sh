#!/usr/bin/env bash
# zero_bubble.sh — 1F1B against the zero-bubble schedules, side by side on
# this machine. Run by hand:
#     bench/zero_bubble.sh [BUILD_DIR] [ROUNDS]
# One model (8 layers, width 256, 4 heads, 64 tokens) on pp = 4 ranks with
# m = 8 micro-batches, schedule = 1f1b, zb_h1 and zb_v (two chunks a rank in
# V order), one run of each per round in a rotating order, 12 steps each.
# Per schedule: the median over the rounds of the median step (steps 3..12),
# its ratio to 1F1B's of the same round, each stage's measured bubble (the
# idle share of its step, the metrics' pipeline.bubble, mean over the steps)
# beside what the schedule predicts for that stage under the unit-time model
# (F = B = W = 1: `tessera plan --json` bubble_per_stage), and each stage's
# activation peak. With 4 ranks on 2 cores a rank idles also while the
# others compute on its core, so the measured bubbles sit above the
# prediction by the time shared; the order of the schedules is the point.
. "$(dirname "$0")/lib.sh" "$@"
ROUNDS=${2:-3}
cat > bench.ini <<'INI'
[model]
layers = 8
d_model = 256
heads = 4
vocab = 4096
context = 64
[data]
source = synthetic
synthetic_tokens = 262144
[train]
steps = 12
seq_len = 64
micro_batch = 2
global_batch = 16
[parallel]
plugins = pp
[pp]
size = 4
INI
set_of() { # SCHEDULE -> its keys
    case $1 in
    zb_v) echo "--set pp.schedule=zb_v --set pp.virtual_stages=2" ;;
    *) echo "--set pp.schedule=$1" ;;
    esac
}
schedules=(1f1b zb_h1 zb_v)
for s in "${schedules[@]}"; do
    "$TESSERA" plan bench.ini --world 4 --json $(set_of $s) > $s.plan.json
done
for round in $(seq 1 "$ROUNDS"); do
    for k in 0 1 2; do
        s=${schedules[$(((round + k) % 3))]}
        mpirun --oversubscribe --bind-to none -np 4 "$TESSERA" train bench.ini $(set_of $s) \
            --set train.metrics=$s.$round.jsonl > $s.$round.txt
    done
done
python3 - "$ROUNDS" <<'PY'
import json, statistics, sys
rounds = int(sys.argv[1])
def steps(path):
    return [json.loads(l) for l in open(path)][2:]
med, bub, peak = {}, {}, {}
for s in ("1f1b", "zb_h1", "zb_v"):
    med[s] = [statistics.median(m["step_ms"] for m in steps("%s.%d.jsonl" % (s, r)))
              for r in range(1, rounds + 1)]
    rows = [m["pipeline"]["bubble"] for r in range(1, rounds + 1) for m in steps("%s.%d.jsonl" % (s, r))]
    bub[s] = [statistics.mean(x[i] for x in rows) for i in range(4)]
    last = [json.loads(l) for l in open("%s.%d.jsonl" % (s, rounds))][-1]
    peak[s] = last["pipeline"]["activation_peak_bytes"]
print("schedule  step ms (median of rounds)  x 1f1b   stage bubbles measured / predicted        activation peak by stage (KiB)")
for s in ("1f1b", "zb_h1", "zb_v"):
    plan = json.load(open(s + ".plan.json"))
    ratio = statistics.median(a / b for a, b in zip(med[s], med["1f1b"]))
    pairs = "  ".join("%.2f/%.2f" % (m, p) for m, p in zip(bub[s], plan["bubble_per_stage"]))
    print("%-8s  %8.1f (%s)  %6.3f   %s   %s" % (s, statistics.median(med[s]),
          ", ".join("%.1f" % x for x in med[s]), ratio, pairs, [p // 1024 for p in peak[s]]))
PY
