# rank_groups.py — the rank groups Megatron-LM's RankGenerator
# (megatron/core/parallel_state.py) makes, by an independent transcription of
# its generate_masked_orthogonal_rank_groups, checked against the groups and
# sizes of a `tessera plan --json` output.
# usage: rank_groups.py WORLD TP CP PP EP ETP ORDER PLAN_JSON
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
