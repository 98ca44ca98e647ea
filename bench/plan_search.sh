#!/usr/bin/env bash
# plan_search.sh — does `tessera plan --search` rank layouts as they run
# here? Run by hand:
#     bench/plan_search.sh [BUILD_DIR] [ROUNDS] [LAYOUTS]
# One mid-size model (8 layers, width 256, 8 heads, 256 tokens, 16
# sequences a step, f32) on 8 ranks of this machine:
#   1. `mpirun -np 8 tessera plan --calibrate --cluster cal.ini --search
#      --json`: the kernels and MPI measured with 8 ranks side by side, then
#      every layout predicted on that cluster;
#   2. LAYOUTS (default 12) of the fitting layouts are trained for real:
#      taken evenly from the best predicted to the worst, plus the best with
#      cp, with tp, with pp, with zero and with dp alone where the spread
#      missed one; ROUNDS (default 2) rounds, each running every layout once
#      in a rotating order, 6 steps each;
#   3. measured step = the median over rounds of the median of steps 3..6
#      (step_ms in the metrics); printed beside the prediction with its
#      error, and Spearman's rank correlation of the two orders.
. "$(dirname "$0")/lib.sh" "$@"
ROUNDS=${2:-2}
LAYOUTS=${3:-12}
cat > mid.ini <<'INI'
[model]
layers = 8
d_model = 256
heads = 8
vocab = 4096
context = 256
[data]
source = synthetic
synthetic_tokens = 262144
[train]
steps = 6
seq_len = 256
micro_batch = 2
global_batch = 16
log_every = 100
INI
MPI="mpirun --oversubscribe --bind-to none -np 8"
# --top: every fitting layout confirmed (both end stages dry-run whole)
$MPI "$TESSERA" plan mid.ini --calibrate --cluster cal.ini --search --json --top 100000 > search.json
python3 - "$LAYOUTS" > layouts.txt <<'PY'
import json, sys
want = int(sys.argv[1])
s = json.load(open("search.json"))
fits = [l for l in s["layouts"] if l["status"] == "fits"]  # in predicted order
n = min(want, len(fits))
pick = [fits[round(i * (len(fits) - 1) / max(1, n - 1))] for i in range(n)]
for cond in (lambda l: l["cp"] > 1, lambda l: l["tp"] > 1, lambda l: l["pp"] > 1,
             lambda l: l["zero"] > 0, lambda l: l["pp"] == 1 and l["tp"] == 1 and l["cp"] == 1):
    if not any(cond(l) for l in pick):
        extra = next((l for l in fits if cond(l)), None)
        if extra: pick.append(extra)
seen = []
for l in sorted(pick, key=lambda l: l["step_s"]):
    if l["sets"] not in seen:
        seen.append(l["sets"])
        print("%.6g\t%s" % (l["step_s"], l["sets"]))
PY
mapfile -t rows < layouts.txt
n=${#rows[@]}
echo "measuring $n layouts, $ROUNDS rounds" >&2
for round in $(seq 1 "$ROUNDS"); do
    for k in $(seq 0 $((n - 1))); do
        i=$(((k + round - 1) % n))
        sets=${rows[$i]#*$'\t'}
        # shellcheck disable=SC2086
        $MPI "$TESSERA" train mid.ini $sets --set train.metrics=m.$i.$round.jsonl > run.$i.$round.txt 2>&1 ||
            echo "layout $i failed: $(tail -1 run.$i.$round.txt)" >&2
    done
done
python3 - "$ROUNDS" "$n" <<'PY'
import json, statistics, sys
rounds, n = int(sys.argv[1]), int(sys.argv[2])
rows = [l.rstrip("\n").split("\t") for l in open("layouts.txt")]
def measured(i):
    per = []
    for r in range(1, rounds + 1):
        try:
            steps = [json.loads(x) for x in open("m.%d.%d.jsonl" % (i, r))]
        except OSError:
            continue
        per.append(statistics.median(m["step_ms"] for m in steps[2:]) / 1e3)
    return statistics.median(per) if per else None, per
def ranks(xs):
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    r = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r
pred, meas, spread = [], [], []
print("%-3s %9s %9s %7s  %-20s %s" % ("#", "predicted", "measured", "error", "rounds (s)", "layout"))
for i, (p, sets) in enumerate(rows):
    m, per = measured(i)
    if m is None:
        print("%-3d %9.3f %9s %7s  %-20s %s" % (i, float(p), "failed", "", "", sets))
        continue
    pred.append(float(p)); meas.append(m)
    spread.append((max(per) - min(per)) / m if len(per) > 1 else 0.0)
    print("%-3d %9.3f %9.3f %+6.1f%%  %-20s %s" % (i, float(p), m, 100 * (float(p) / m - 1),
          ", ".join("%.3f" % x for x in per), sets))
rp, rm = ranks(pred), ranks(meas)
k = len(rp)
mp, mm = sum(rp) / k, sum(rm) / k
cov = sum((a - mp) * (b - mm) for a, b in zip(rp, rm))
var = (sum((a - mp) ** 2 for a in rp) * sum((b - mm) ** 2 for b in rm)) ** 0.5
rho = cov / var if var else float("nan")
errs = [abs(p / m - 1) for p, m in zip(pred, meas)]
print("layouts %d; Spearman rank correlation %.3f; |error| median %.1f%%, max %.1f%%; "
      "spread between rounds median %.1f%%" % (k, rho, 100 * statistics.median(errs),
      100 * max(errs), 100 * statistics.median(spread)))
PY
grep -v '^;' cal.ini | head -12 | tr '\n' ' '; echo
