# Communication per step over the cp group, by operation, from rank 0's
# counters, against the formula and `tessera plan`. One micro-batch of B
# sequences of T tokens, n = cp ranks, Tl = T/n rows per rank, width C,
# L layers; K = B Tl 2C 4 bytes, one rank's keys and values:
#   ring        send and recv: per layer (n-1) blocks forward, (n-1) blocks
#               and (n-1) dK/dV accumulators backward: 3 (n-1) L calls,
#               3 (n-1) L K bytes each way
#   all_gather  all_gather: 2 L calls (forward, and again in backward) of
#               n K bytes (counted by the output); reduce_scatter: L calls of
#               n K (counted by the input)
#   all_to_all  all_to_all: 4 L calls (q,k,v and the output forward; their
#               gradients backward), 8 B Tl C 4 L bytes
# In bf16 runs keys, values and the all-to-all's forward travel in two bytes
# (exact: they are bf16 values), gradients in four: the ring's forward and
# backward blocks K/2 each (2 (n-1) L K in all), all_gather's gathers n K/2,
# all_to_all's forward half (24 B Tl C L in all). With [train] partial_dtype
# = bf16 (bf16p) the gradients too: every byte of the exchanges halves.
# Besides, for every algorithm, the plugin's gather of each rank's work count
# (all_gather, 1 call of 8n bytes, host memory) and the core's: the weight
# gradients summed over cp (all_reduce of the 4P gradient bytes) and the
# token count and loss (2 x 4 bytes).
. "$2/tests/cli/multirank.sh"
write_config
for dtype in fp32 bf16 bf16p; do
for n in 2 4; do
    for algo in ring all_gather all_to_all; do
        name=c_${n}_${algo}_$dtype
        sets=(--set parallel.plugins=cp --set cp.size=$n --set cp.algorithm=$algo --set train.steps=2
              --set train.dtype=${dtype%p})
        [ "$dtype" = bf16p ] && sets+=(--set train.partial_dtype=bf16)
        run_mpi "$n" "$TESSERA" train model.ini "${sets[@]}" --set train.metrics=$name.jsonl \
            > $name.txt 2>&1 || { cat $name.txt; fail "cp $n $algo: run"; }
        "$TESSERA" plan model.ini "${sets[@]}" --world "$n" --json > $name.plan.json 2> $name.err ||
            { cat $name.err; fail "cp $n $algo: plan"; }
        python3 - "$n" "$algo" "$name" "$dtype" <<'PY' || fail "cp $n $algo $dtype: communication"
import json, sys
n, algo, name = int(sys.argv[1]), sys.argv[2], sys.argv[3]
bf16, grads16 = sys.argv[4] != "fp32", sys.argv[4] == "bf16p"
B, T, C, L, V, ctx = 16, 32, 64, 2, 256, 64
P = V * C + ctx * C + L * (12 * C * C + 13 * C) + 2 * C
Tl = T // n
K = B * Tl * 2 * C * 4
want = {"cp.all_reduce": (3, 4 * P + 8), "world.all_reduce": (1, 12)}
kv = K // 2 if bf16 else K  # keys and values on the wire
dkv = K // 2 if grads16 else K  # their gradients
if algo == "ring":
    want["cp.send"] = want["cp.recv"] = (3 * (n - 1) * L, (n - 1) * L * (2 * kv + dkv))
    want["cp.all_gather"] = (1, 8 * n)
elif algo == "all_gather":
    want["cp.all_gather"] = (2 * L + 1, 2 * L * n * kv + 8 * n)
    want["cp.reduce_scatter"] = (L, L * n * dkv)
else:
    fwd = 4 * B * Tl * C * (2 if bf16 else 4)
    bwd = 4 * B * Tl * C * (2 if grads16 else 4)
    want["cp.all_to_all"] = (4 * L, (fwd + bwd) * L)
    want["cp.all_gather"] = (1, 8 * n)
plan = {k: (v["calls"], v["bytes"]) for k, v in json.load(open(name + ".plan.json"))["comm"].items()}
for line in open(name + ".jsonl"):
    m = json.loads(line)
    got = {"%s.%s" % (g, op): (c["calls"], c["bytes"]) for g, ops in m["comm"].items()
           for op, c in ops.items()}
    assert got == want, ("step %d run" % m["step"], got, "formula", want)
assert plan == want, ("plan", plan, "formula", want)
print("cp %d %-10s %s %s" % (n, algo, sys.argv[4], ", ".join("%s %d calls %d B" % (k, c, b)
      for k, (c, b) in sorted(want.items()) if k.split(".")[1] != "all_reduce")))
PY
    done
done
done
echo PASS
