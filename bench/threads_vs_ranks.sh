#!/usr/bin/env bash
# threads_vs_ranks.sh — one rank with 2 threads against two ranks with one
# thread each (data parallel), and one rank with one thread for the scale,
# on a mid-size model (4 layers, width 256, vocabulary 1024, T 128, global
# batch 16). Run by hand:
#     bench/threads_vs_ranks.sh [BUILD_DIR] [ROUNDS]
# Each round runs the three back to back (12 steps each) and prints the
# median step time of steps 3..12 and its range. The machine is shared:
# compare within a round, not across rounds.
. "$(dirname "$0")/lib.sh" "$@"
ROUNDS=${2:-3}
cat > mid.ini <<'INI'
[model]
layers = 4
d_model = 256
heads = 4
vocab = 1024
context = 128
[data]
source = synthetic
synthetic_tokens = 262144
[train]
steps = 12
seq_len = 128
global_batch = 16
micro_batch = 16
INI
steps() { # METRICS: median, min, max of steps 3..
    python3 - "$1" <<'PY'
import json, sys
a = sorted([json.loads(l)["step_ms"] for l in open(sys.argv[1]) if '"step_ms"' in l][2:])
print("%.1f ms (%.1f-%.1f)" % (a[len(a) // 2], a[0], a[-1]), end="")
PY
}
for r in $(seq 1 "$ROUNDS"); do
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$TESSERA" train mid.ini --set train.threads=1 \
        --set train.metrics=t1.jsonl > t1.txt 2>&1 || { cat t1.txt; exit 1; }
    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 "$TESSERA" train mid.ini --set train.threads=2 \
        --set train.metrics=t2.jsonl > t2.txt 2>&1 || { cat t2.txt; exit 1; }
    mpirun --oversubscribe --bind-to none -np 2 "$TESSERA" train mid.ini --set train.threads=1 \
        --set parallel.plugins=dp --set train.micro_batch=8 --set train.metrics=r2.jsonl \
        > r2.txt 2>&1 || { cat r2.txt; exit 1; }
    echo "round $r: 1 rank x 1 thread $(steps t1.jsonl) | 1 rank x 2 threads $(steps t2.jsonl) | 2 ranks x 1 thread $(steps r2.jsonl)"
done
