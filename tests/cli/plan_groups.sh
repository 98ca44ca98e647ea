# `tessera plan --world N --json` gives, for every axis and product of axes of
# the dense and the expert mesh, exactly the rank groups of Megatron-LM's
# RankGenerator (megatron/core/parallel_state.py) for the same sizes and
# order. The expected groups are computed here, in Python, by an independent
# transcription of its generate_masked_orthogonal_rank_groups.
# Usage: plan_groups.sh TESSERA SRC TEST_PLUGIN_DIR
. "$(dirname "$0")/lib.sh"
PLUGDIR=$3
cat > expect.py <<'PY'
import json, sys

def prefix_product(a):
    out, acc = [1], 1
    for v in a:
        acc *= v
        out.append(acc)
    return out

def decompose(index, shape):
    stride = prefix_product(shape)
    return [(index // d) % s for s, d in zip(shape, stride)]

def masked_groups(world, sizes, mask):
    masked = [s for s, m in zip(sizes, mask) if m]
    unmasked = [s for s, m in zip(sizes, mask) if not m]
    stride = prefix_product(sizes)
    mstride = [d for d, m in zip(stride, mask) if m]
    ustride = [d for d, m in zip(stride, mask) if not m]
    gsize = prefix_product(masked)[-1]
    groups = []
    for g in range(world // gsize):
        gi = decompose(g, unmasked)
        groups.append([sum(a * b for a, b in zip(decompose(r, masked), mstride)) +
                       sum(a * b for a, b in zip(gi, ustride)) for r in range(gsize)])
    return sorted(sorted(g) for g in groups)

def rank_generator(world, tp, ep, dp, pp, cp, order):
    size = {"tp": tp, "ep": ep, "dp": dp, "pp": pp, "cp": cp}
    names = order.split("-")
    for n in size:
        if n not in names:
            names.append(n)
    sizes = [size[n] for n in names]
    return lambda token: masked_groups(world, sizes, [n in token.split("-") for n in names])

world, tp, cp, pp, ep, etp, order = int(sys.argv[1]), *map(int, sys.argv[2:7]), sys.argv[7]
dp = world // (tp * cp * pp)
edp = world // (etp * ep * pp)
dense = rank_generator(world, tp, 1, dp, pp, cp, order)
expert = rank_generator(world, etp, ep, edp, pp, 1, order)
expect = {t: dense(t) for t in ["tp", "cp", "dp", "pp", "dp-cp", "tp-cp", "tp-dp", "tp-dp-cp", "tp-pp"]}
for ours, theirs in [("ep", "ep"), ("etp", "tp"), ("edp", "dp"), ("etp-ep", "tp-ep"),
                     ("etp-ep-pp", "tp-ep-pp")]:
    expect[ours] = expert(theirs)
got = json.load(open(sys.argv[8]))
bad = [t for t in expect if got["groups"].get(t) != expect[t]]
sizes = got["sizes"]
want_sizes = {"tp": tp, "cp": cp, "dp": dp, "pp": pp, "ep": ep, "etp": etp, "edp": edp}
bad += [k for k in want_sizes if sizes.get(k) != want_sizes[k]]
if bad:
    for t in bad:
        print("mismatch", t, "expected", expect.get(t, want_sizes.get(t)),
              "got", got["groups"].get(t, sizes.get(t)))
    sys.exit(1)
print("ok", len(expect), "tokens")
PY
n=0
check() { # WORLD TP CP PP EP ETP ORDER
    cat > plan.ini <<INI
[model]
layers = 4
d_model = 48
heads = 12
vocab = 64
padded_vocab = 384
context = 16
[train]
micro_batch = 1
[parallel]
plugins = dp, meshaxes
plugin_path = $PLUGDIR
order = $7
[meshaxes]
tp = $2
cp = $3
pp = $4
ep = $5
etp = $6
INI
    "$TESSERA" plan plan.ini --world "$1" --json > plan.json 2> plan.err ||
        { cat plan.err; fail "plan failed for world $1"; }
    python3 expect.py "$@" plan.json || fail "world $1 tp $2 cp $3 pp $4 ep $5 etp $6 order $7"
    n=$((n + 1))
}
check 16 2 2 2 4 1 tp-cp-ep-dp-pp
check 8 2 1 2 2 1 tp-cp-ep-dp-pp
check 12 3 1 1 1 3 tp-cp-ep-dp-pp
check 64 4 2 2 8 1 tp-cp-ep-dp-pp
check 16 2 2 2 4 1 tp-cp-ep-pp-dp
check 24 2 1 3 2 2 tp-pp-dp-cp-ep
# Sizes that do not multiply to the world are an error showing the arithmetic.
sed -i 's/^tp = .*/tp = 3/' plan.ini
if "$TESSERA" plan plan.ini --world 16 > bad.txt 2>&1; then fail "tp 3 on 16 ranks accepted"; fi
grep -q "16" bad.txt && grep -qE "x|\*" bad.txt || { cat bad.txt; fail "unclear size error"; }
echo "PASS: $n meshes match Megatron-LM's rank generator"
