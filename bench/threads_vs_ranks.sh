#!/usr/bin/env bash
# threads_vs_ranks.sh — one rank with 2 threads against two ranks with one
# thread each (data parallel), and one rank with one thread for the scale,
# on a mid-size model (4 layers, width 256, vocabulary 1024, T 128, global
# batch 16). Run by hand:
#     bench/threads_vs_ranks.sh [BUILD_DIR] [ROUNDS] [BEFORE_BUILD_DIR]
# Each round runs the set-ups back to back (12 steps each; with a second
# build, its one rank with 2 threads too) and prints the median step time of
# steps 3..12. The machine is shared and its speed drifts within minutes:
# compare within a round. At the end: each set-up's median over the rounds,
# and the geometric mean over the rounds of one rank with 2 threads over
# two ranks (below 1: the one rank is faster).
. "$(dirname "$0")/lib.sh" "$@"
ROUNDS=${2:-3}
BEFORE=${3:+$(cd "$3" && pwd)/bin/tessera}
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
median() { # METRICS: median step_ms of steps 3..
    python3 - "$1" <<'PY'
import json, sys
a = sorted([json.loads(l)["step_ms"] for l in open(sys.argv[1]) if '"step_ms"' in l][2:])
print("%.1f" % a[len(a) // 2])
PY
}
one_rank() { # NAME BINARY THREADS
    OMP_NUM_THREADS=$3 OPENBLAS_NUM_THREADS=$3 "$2" train mid.ini --set train.threads=$3 \
        --set train.metrics=$1.jsonl > $1.txt 2>&1 || { cat $1.txt; exit 1; }
}
: > rounds.txt
for r in $(seq 1 "$ROUNDS"); do
    one_rank t1 "$TESSERA" 1
    [ -z "$BEFORE" ] || one_rank b2 "$BEFORE" 2
    one_rank t2 "$TESSERA" 2
    mpirun --oversubscribe --bind-to none -np 2 "$TESSERA" train mid.ini --set train.threads=1 \
        --set parallel.plugins=dp --set train.micro_batch=8 --set train.metrics=r2.jsonl \
        > r2.txt 2>&1 || { cat r2.txt; exit 1; }
    line="t1=$(median t1.jsonl) t2=$(median t2.jsonl) r2=$(median r2.jsonl)"
    [ -z "$BEFORE" ] || line="$line b2=$(median b2.jsonl)"
    echo "$line" >> rounds.txt
    echo "round $r: 1 rank x 1 thread ${line#t1=}" | sed 's/ t2=/ ms | 1 rank x 2 threads /;
        s/ r2=/ ms | 2 ranks x 1 thread /; s/ b2=/ ms | before: 1 rank x 2 threads /; s/$/ ms/'
done
python3 - rounds.txt <<'PY'
import math, sys
rows = [dict(kv.split("=") for kv in l.split()) for l in open(sys.argv[1])]
names = {"t1": "1 rank x 1 thread", "t2": "1 rank x 2 threads", "r2": "2 ranks x 1 thread",
         "b2": "before: 1 rank x 2 threads"}
for k in rows[0]:
    a = sorted(float(r[k]) for r in rows)
    print("%-28s median over %d rounds %.1f ms" % (names[k], len(a), a[len(a) // 2]))
for k in ("t2", "b2"):
    if k in rows[0]:
        g = math.exp(sum(math.log(float(r[k]) / float(r["r2"])) for r in rows) / len(rows))
        wins = sum(float(r[k]) <= float(r["r2"]) for r in rows)
        print("%s / two ranks: geometric mean %.3f, faster or equal in %d of %d rounds"
              % (names[k], g, wins, len(rows)))
PY
