# tessera plan's default output is a summary a person reads in one screen,
# even for GPT-3 175B on 1,536 ranks (tp 8 + SP, pp 16 interleaved with 3
# chunks, dp 12): mesh sizes, groups counted per axis, rank 0's memory by
# category, its FLOPs, communication per group and op, the bubble; --groups,
# --layout and --timeline add the details, --json keeps everything. With
# recompute = selective and full as well.
. "$(dirname "$0")/lib.sh"
cat > g3.ini <<'INI'
[model]
layers = 96
d_model = 12288
heads = 96
vocab = 50257
context = 2048
[train]
seq_len = 2048
micro_batch = 1
global_batch = 1536
dtype = bf16
device = cuda
[parallel]
plugins = dp, tp, pp
[tp]
size = 8
sequence_parallel = true
[pp]
size = 16
schedule = interleaved
virtual_stages = 3
INI
"$TESSERA" plan g3.ini --world 1536 > sum.txt 2>&1 || { cat sum.txt; fail "plan failed"; }
cat sum.txt
lines=$(wc -l < sum.txt)
[ "$lines" -le 50 ] || fail "the summary is $lines lines"
grep -q "^  dense  tp 8 x cp 1 x dp 12 x pp 16$" sum.txt || fail "no mesh sizes"
grep -qE "^  tp +192 groups of +8, the first \[0, 1, 2, 3, 4, 5, 6, 7\]$" sum.txt || fail "no tp groups line"
grep -qE "^  pp +96 groups of +16, the first \[0, 96, 192, \.\.\., 1248, 1344, 1440\]$" sum.txt ||
    fail "no abbreviated pp group"
grep -qE "^  activations +[0-9]+ bytes +[0-9.]+ GB" sum.txt || fail "no activation memory"
grep -qE "^  tp +reduce_scatter +[0-9]+ calls" sum.txt || fail "no tp communication"
grep -qE "^pipeline: schedule interleaved, 16 stages, 128 micro-batches, 3 chunks per rank: bubble 0\.0[0-9]+" sum.txt ||
    fail "no bubble line"
grep -q "^layout plan" sum.txt && fail "the layout plan is not a detail"
# Activations of rank 0 (the first stage holds the most) against Korthikanti
# et al. 2022 (eq. 5 with sequence parallelism, and section 4.2.3's factor
# for an interleaved schedule): 34 s b h / t bytes per layer for L layers (p
# stages of L/p layers, p micro-batches in flight on the first) times
# 1 + (p - 1) / (p m) for m chunks per rank; the 5 a s / h term is gone with
# an attention that keeps no score matrix. Within 10 %; the rest itemised.
python3 - sum.txt <<'PY' || fail "activations differ from Megatron-LM's formula by more than 10 %"
import re, sys
text = open(sys.argv[1]).read()
acts = int(re.search(r"^  activations +([0-9]+) bytes", text, re.M).group(1))
s, b, h, t, L, p, m = 2048, 1, 12288, 8, 96, 16, 3
formula = 34 * s * b * h / t * L * (1 + (p - 1) / (p * m))
items = re.findall(r"^    (\S.*?) +([0-9]+) bytes", text, re.M)
assert sum(int(v) for _, v in items) == acts, ("items do not add up", items, acts)
print("activations %d bytes = %.3f x Korthikanti's %d; at the peak: %s" %
      (acts, acts / formula, formula, ", ".join("%s %s" % it for it in items)))
sys.exit(not abs(acts / formula - 1) <= 0.10)
PY
# The same plan with activation recomputation ([train] recompute), printed
# beside it: selective keeps, per layer, Korthikanti et al.'s 34 s b h / t
# (without 5 a s / h) and recomputes the attention core; full keeps each
# layer's input alone, 2 s b h / t (in bf16) per layer and micro-batch in
# flight, the same factor 1 + (p - 1) / (p m) for the interleaved schedule,
# plus one layer's working set: its state made again in f32 (68 s b h / t)
# and the scratch the run without recomputation holds as well (workspace,
# weights staged in f32, GEMM operands: what its peak holds besides saved
# state, outputs and received inputs). Each within 10 %.
for m in selective full; do
    "$TESSERA" plan g3.ini --world 1536 --set train.recompute=$m > $m.txt 2>&1 ||
        { cat $m.txt; fail "plan with recompute = $m failed"; }
    [ "$(wc -l < $m.txt)" -le 52 ] || fail "the summary with recompute = $m is $(wc -l < $m.txt) lines"
    grep -E "^compute of rank 0 per step: .*recomputed forwards .* \(recompute = $m: \+[0-9.]+ % of the step without\)" $m.txt ||
        fail "recompute = $m: no FLOPs line"
    grep -q "^  of which recomputed forwards (recompute = $m):" $m.txt ||
        fail "recompute = $m: no recomputed communication"
done
python3 - sum.txt selective.txt full.txt <<'PY' || fail "recomputation's activations differ from the formulas by more than 10 %"
import re, sys
def parse(path):
    text = open(path).read()
    acts = int(re.search(r"^  activations +([0-9]+) bytes", text, re.M).group(1))
    items = {k: int(v) for k, v in re.findall(r"^    (\S.*?) +([0-9]+) bytes", text, re.M)}
    assert sum(items.values()) == acts, (path, items, acts)
    return acts, items
s, b, h, t, L, p, m = 2048, 1, 12288, 8, 96, 16, 3
il = 1 + (p - 1) / (p * m)
none, nitems = parse(sys.argv[1])
sel, _ = parse(sys.argv[2])
full, fitems = parse(sys.argv[3])
want_sel = 34 * s * b * h / t * L * il
kept = ("saved", "outputs", "received inputs")
scratch = sum(v for k, v in nitems.items() if not k.startswith(kept))
inputs = sum(v for k, v in fitems.items() if k.startswith(("outputs", "received inputs")))
want_full = 2 * s * b * h / t * L * il + 68 * s * b * h / t + scratch
print("none      %d bytes" % none)
print("selective %d bytes = %.3f x 34 s b h / t L (1 + (p-1)/(p m)) = %d" % (sel, sel / want_sel, want_sel))
print("full      %d bytes = %.3f x (2 s b h / t L (1 + (p-1)/(p m)) = %d, + one layer's working set %d)"
      % (full, full / want_full, 2 * s * b * h / t * L * il, 68 * s * b * h / t + scratch))
print("full: kept inputs %d bytes = %.3f x 2 s b h / t L (1 + (p-1)/(p m))" % (inputs, inputs / (2 * s * b * h / t * L * il)))
ok = abs(sel / want_sel - 1) <= 0.10 and abs(full / want_full - 1) <= 0.10
ok = ok and abs(inputs / (2 * s * b * h / t * L * il) - 1) <= 0.10 and full < sel <= none
sys.exit(not ok)
PY
"$TESSERA" plan g3.ini --world 1536 --groups --layout --timeline > all.txt 2>&1 || fail "plan with details"
[ "$(grep -c '^  tp .*192 groups of 8:' all.txt)" = 1 ] || fail "--groups: no full tp list"
grep -q "^layout plan" all.txt || fail "--layout: no layout plan"
grep -q "^pipeline schedule interleaved" all.txt || fail "--timeline: no timeline"
# The plan's FLOPs of a step on one rank (GPT-2 124M's shape, s = 1024)
# are Narayanan et al. 2021's (eq. 3): 72 B s l h^2 (1 + s/6h + V/12lh)
# without recomputation, 96 B s l h^2 (1 + s/6h + V/16lh) with full (a
# fourth forward of every layer, the LM head not recomputed), V the padded
# vocabulary; selective adds the attention scores' product alone,
# 2 B s^2 h per layer.
cat > g2.ini <<'INI'
[model]
layers = 12
d_model = 768
heads = 12
vocab = 50257
context = 1024
[train]
micro_batch = 8
global_batch = 8
INI
for m in none selective full; do
    "$TESSERA" plan g2.ini --world 1 --json --set train.recompute=$m > g2.$m.json ||
        fail "plan of g2.ini with recompute = $m"
done
python3 - <<'PY' || fail "FLOPs differ from Narayanan et al.'s"
import json
B, s, l, h, V = 8, 1024, 12, 768, 50304
f = {m: json.load(open("g2.%s.json" % m))["flops"] for m in ("none", "selective", "full")}
step = {m: v["forward"] + v["backward"] + v["recomputed"] for m, v in f.items()}
want = {"none": 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)),
        "full": 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))}
want["selective"] = want["none"] + 2 * B * s * s * h * l
for m in ("none", "selective", "full"):
    print("%-9s %.6e FLOPs a step, formula %.6e (%+.2e)" % (m, step[m], want[m], step[m] / want[m] - 1))
    assert abs(step[m] / want[m] - 1) < 1e-12, m
PY
echo "ok: summary $lines lines, $(wc -c < sum.txt) bytes; with every detail $(wc -l < all.txt) lines, $(wc -c < all.txt) bytes"
echo "PASS"
