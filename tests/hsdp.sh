#!/usr/bin/env bash
# hsdp.sh — examples/hsdp, a strategy with axes of its own (shard, replicate;
# plugin ABI 1.2), as a third party builds and runs it: installs the build
# into a temporary prefix, builds the example against that prefix alone (no
# warnings, no tessera symbol referenced), then on 8 ranks:
#  - shard 4 x replicate 2, shard 2 x replicate 2 with tp 2, and shard 2 x
#    replicate 2 with pp 2 (two micro-batches each), the same with tp kept
#    gathered from forward to backward under full recomputation, and shard 1
#    x replicate 8 each give one rank's losses and gradient norms within
#    1e-5 relative over 20 steps;
#  - rank 0's parameters, gradients and optimizer state (bytes allocated,
#    from the run's metrics) equal `tessera plan`'s dry run to the byte, its
#    optimizer state is 1/4 of plain dp's on the same 8 ranks, and the bytes
#    of the run's collectives per group equal the plan's and the README's
#    formula (reduce-scatter 4P over shard, all-reduce 4P/shard over
#    replicate, all-gather twice the parameters over shard);
#  - `tessera plan --world 16` prints the shard and replicate groups;
#  - dp of 2 ranks beside it is refused by hsdp naming dp, dp auto beside
#    replicate auto by the core naming both plugins, dp of 1 rank trains
#    like one rank; [hsdp] shard is required.
#
# usage: hsdp.sh BUILD_DIR SOURCE_DIR TESSERA
set -euo pipefail
build=$1 src=$2 tessera=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "hsdp.sh: FAIL: $*"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
mpi() { timeout -s KILL 240 mpirun --oversubscribe --bind-to none "$@"; }

echo "== install into $tmp/prefix, build examples/hsdp against it"
cmake --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "install"; }
cp -r "$src/examples/hsdp" "$tmp/hsdp-src"
cmake -S "$tmp/hsdp-src" -B "$tmp/hsdp" -DCMAKE_PREFIX_PATH="$tmp/prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$tmp/hsdp.log" 2>&1 || { cat "$tmp/hsdp.log"; fail "configure"; }
cmake --build "$tmp/hsdp" >>"$tmp/hsdp.log" 2>&1 || { cat "$tmp/hsdp.log"; fail "build"; }
if grep -q "warning:" "$tmp/hsdp.log"; then cat "$tmp/hsdp.log"; fail "warnings building hsdp"; fi
so="$tmp/hsdp/tessera-hsdp.so"
if nm -D --undefined-only "$so" | grep -E ' (ts_|tessera_)'; then fail "hsdp references tessera"; fi

cd "$tmp"
cat > model.ini <<'INI'
[model]
layers = 2
d_model = 64
heads = 4
vocab = 256
context = 64
[data]
synthetic_tokens = 65536
[train]
steps = 20
seq_len = 32
global_batch = 16
micro_batch = 2
lr = 2e-3
warmup = 3
min_lr = 2e-4
grad_clip = 1.0
seed = 7
INI
H=(--set parallel.plugin_path="$tmp/hsdp")
# compare A.jsonl B.jsonl: every step's loss and grad norm within 1e-5.
compare() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == len(b) == 20, (len(a), len(b))
worst = 0.0
for x, y in zip(a, b):
    for k in ("loss", "grad_norm"):
        d = abs(x[k] - y[k]) / max(1e-12, abs(y[k]))
        worst = max(worst, d)
        assert d <= 1e-5, ("step", x["step"], k, x[k], "one rank", y[k])
print("%s vs %s: 20 steps, worst relative difference %.2e" % (sys.argv[1], sys.argv[2], worst))
PY
}

echo "== one rank"
"$tessera" train model.ini --set train.micro_batch=16 --set train.metrics=one.jsonl > one.out 2>&1 ||
  { cat one.out; fail "one rank"; }

run8() { # NAME PLUGINS SETS...: 8 ranks, metrics NAME.jsonl, compared with one rank
  local name=$1 plugins=$2
  shift 2
  echo "== $name: plugins = $plugins $*"
  mpi -np 8 "$tessera" train model.ini --set parallel.plugins="$plugins" "${H[@]}" "$@" \
    --set train.metrics=$name.jsonl > $name.out 2>&1 || { cat $name.out; fail "$name: run"; }
  compare $name.jsonl one.jsonl || fail "$name differs from one rank"
}
run8 s4r2 hsdp --set hsdp.shard=4
run8 s2r2tp2 hsdp,tp --set hsdp.shard=2 --set tp.size=2
run8 s2r2pp2 hsdp,pp --set hsdp.shard=2 --set pp.size=2
# The gathers kept from forward to backward, two modules ahead, no overlap,
# every block recomputed; and shard 1 (nothing cut: the flat gradient
# all-reduced over replicate = 8).
run8 s2r2tp2_kept_recompute hsdp,tp --set hsdp.shard=2 --set tp.size=2 \
  --set hsdp.reshard_after_forward=false --set hsdp.prefetch=2 --set hsdp.overlap=false \
  --set train.recompute=full --set train.recompute_layers=2
run8 s1r8 hsdp --set hsdp.shard=1

echo "== memory and communication of shard 4 x replicate 2 against the plan"
"$tessera" plan model.ini --set parallel.plugins=hsdp "${H[@]}" --set hsdp.shard=4 --world 8 --json \
  > s4r2.plan.json 2> plan.err || { cat plan.err; fail "plan of hsdp"; }
"$tessera" plan model.ini --set parallel.plugins=dp --world 8 --json > dp.plan.json 2> plan.err ||
  { cat plan.err; fail "plan of dp"; }
python3 - <<'PY' || fail "memory or communication differs from the plan"
import json
run = json.loads(open("s4r2.jsonl").readlines()[-1])
plan = json.load(open("s4r2.plan.json"))
dp = json.load(open("dp.plan.json"))
P = json.loads(open("one.jsonl").readlines()[-1])["mem"]["params"]["allocated"] // 4
got = {k: run["mem"][k]["allocated"] for k in ("params", "grads", "optimizer")}
want = {k: plan["memory"][k] for k in ("params", "grads", "optimizer")}
assert got == want, ("run", got, "plan", want)
# Every dimension divides by 4: each block is a quarter, f32 blocks and two moments.
assert got == {"params": 4 * P // 4, "grads": 4 * P // 4, "optimizer": 8 * P // 4}, (got, P)
assert 4 * got["optimizer"] == dp["memory"]["optimizer"], (got["optimizer"], dp["memory"]["optimizer"])
print("rank 0: params %d, grads %d, optimizer %d bytes (run = plan; P = %d); dp's optimizer %d = 4 x %d"
      % (got["params"], got["grads"], got["optimizer"], P, dp["memory"]["optimizer"], got["optimizer"]))
# One micro-batch per step: reduce-scatter 4P over shard, all-reduce 4P/4
# over replicate, all-gather of every module's parameters before its forward
# and its backward (wte, read by the embedding and the head, twice as often).
wte = 4 * 256 * 64
formula = {"shard.reduce_scatter": 4 * P, "replicate.all_reduce": P,
           "shard.all_gather": 2 * (4 * P + wte)}
for key, want in formula.items():
    group, op = key.split(".")
    r = run["comm"][group][op]["bytes"]
    p = plan["comm"][key]["bytes"]
    assert r == p == want, (key, "run", r, "plan", p, "formula", want)
    print("%-22s %8d bytes per step (run = plan = formula)" % (key, r))
PY

echo "== tessera plan --world 16 prints the groups"
"$tessera" plan model.ini --set parallel.plugins=hsdp "${H[@]}" --set hsdp.shard=4 \
  --set train.global_batch=32 --world 16 > w16.txt 2>&1 || { cat w16.txt; fail "plan --world 16"; }
cat w16.txt | sed -n '1,/^memory/p'
grep -Eq "^  shard +4 groups of +4, the first \[0, 1, 2, 3\]" w16.txt || fail "no shard groups in the plan"
grep -Eq "^  replicate +4 groups of +4, the first \[0, 4, 8, 12\]" w16.txt ||
  fail "no replicate groups in the plan"

echo "== dp beside hsdp; [hsdp] shard required"
# dp of 2 ranks beside shard 2 x replicate 2, either order: refused by hsdp
# naming dp's ranks (dp would sum each gradient as it is announced, before
# hsdp's reduce-scatter has put the block in place: it used to train with
# half the gradient when dp came first).
for plugins in dp,hsdp hsdp,dp; do
  if mpi -np 8 "$tessera" train model.ini --set parallel.plugins=$plugins "${H[@]}" \
    --set hsdp.shard=2 --set dp.size=2 > hd.out 2>&1; then
    cat hd.out; fail "plugins = $plugins with dp 2 was accepted"
  fi
  grep -q "plugin 'hsdp': transform 'hsdp' (phase SHARD_DATA): the dp axis has 2 ranks beside shard and replicate" \
    hd.out || { cat hd.out; fail "plugins = $plugins: unclear refusal"; }
done
echo "ok: $(grep -m1 -o "the dp axis has 2 ranks.*" hd.out)"
# dp auto beside replicate auto: two derived axes, refused naming both plugins.
if mpi -np 8 "$tessera" train model.ini --set parallel.plugins=hsdp,dp "${H[@]}" \
  --set hsdp.shard=4 > hd.out 2>&1; then
  cat hd.out; fail "two auto axes accepted"
fi
grep -q "replicate auto (plugin hsdp); dp auto (plugin dp" hd.out || { cat hd.out; fail "two auto axes: unclear refusal"; }
echo "ok: $(grep -m1 -o "plugins: 2 axes of the dense mesh are auto.*" hd.out | cut -c1-150)"
# dp of one rank has nothing to do: the run is hsdp's.
run8 s4r2_dp1 hsdp,dp --set hsdp.shard=4 --set dp.size=1
if "$tessera" train model.ini --set parallel.plugins=hsdp "${H[@]}" > nokey.out 2>&1; then
  fail "hsdp without [hsdp] shard was accepted"
fi
grep -q "\[hsdp\] shard is required" nokey.out || { cat nokey.out; fail "no shard: unclear refusal"; }
echo "ok: $(grep -m1 -o "\[hsdp\] shard is required.*" nokey.out)"
echo "hsdp.sh: PASS"
