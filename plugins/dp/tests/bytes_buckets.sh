# Bytes and buckets: per step, the all-reduce payload on the batch group
# equals the gradient bytes of one rank (every parameter reduced once), and
# the number of buckets is what [dp] bucket_mb implies: buckets fill in
# reverse order of parameter use and close once they hold bucket_mb MiB.
. "$2/tests/cli/multirank.sh"
write_config
for mb in 25 0.1 0.03; do
    run_mpi 2 "$TESSERA" train model.ini --set parallel.plugins=dp --set dp.bucket_mb=$mb \
        --set train.micro_batch=8 --set train.steps=3 --set train.metrics=m.jsonl \
        > run.txt 2>&1 || { cat run.txt; fail "run failed"; }
    python3 - "$mb" <<'PY' || fail "bucket_mb=$mb"
import json, sys
C, L, V, maxT = 64, 2, 256, 64
# Parameter sizes in memory order (llm.c's shapes), as the model lays them out.
sizes = [V * C, maxT * C]
for _ in range(L):
    sizes += [C, C, 3 * C * C, 3 * C, C * C, C, C, C, 4 * C * C, 4 * C, 4 * C * C, C]
sizes += [C, C]
grad_bytes = 4 * sum(sizes)
cap = float(sys.argv[1]) * 1024 * 1024
buckets, fill = 0, 0
for n in reversed(sizes):  # gradients become ready in reverse order
    fill += 4 * n
    if fill >= cap:
        buckets, fill = buckets + 1, 0
buckets += fill > 0
for line in open("m.jsonl"):
    m = json.loads(line)
    # Gradients reduce over dp-cp (the batch-sharding group the mesh
    # provides); the core sums the valid-token count and the loss over dp.
    ar = m["comm"]["dp-cp"]["all_reduce"]
    assert ar["calls"] == m["plugins"]["dp"]["buckets"], ar
    assert ar["bytes"] == grad_bytes, (ar["bytes"], grad_bytes)
    assert m["comm"]["dp"]["all_reduce"] == dict(m["comm"]["dp"]["all_reduce"], calls=2, bytes=8)
    assert m["plugins"]["dp"]["allreduce_bytes"] == grad_bytes
    assert m["plugins"]["dp"]["buckets"] == buckets, (m["plugins"]["dp"]["buckets"], buckets)
print("bucket_mb %s: %d buckets, %d gradient bytes all-reduced per step" % (sys.argv[1], buckets, grad_bytes))
PY
done
# [dp] grad_dtype = bf16: the same buckets carry half the bytes, and
# tessera plan's dry run counts the same.
sets=(--set parallel.plugins=dp --set dp.grad_dtype=bf16 --set train.micro_batch=8 --set train.dtype=bf16)
run_mpi 2 "$TESSERA" train model.ini "${sets[@]}" --set train.steps=3 --set train.metrics=h.jsonl \
    > half.txt 2>&1 || { cat half.txt; fail "grad_dtype=bf16 run failed"; }
"$TESSERA" plan model.ini --world 2 --json "${sets[@]}" > plan.json 2> plan.err || { cat plan.err; fail "plan"; }
python3 - <<'PY' || fail "grad_dtype=bf16 bytes"
import json
m = [json.loads(l) for l in open("h.jsonl")][-1]
plan = json.load(open("plan.json"))
ar = m["comm"]["dp-cp"]["all_reduce"]
grad_bytes = 4 * 120576
assert ar["bytes"] == grad_bytes // 2 == m["plugins"]["dp"]["allreduce_bytes"], ar
assert plan["comm"]["dp-cp.all_reduce"]["bytes"] == ar["bytes"], plan["comm"]
print("grad_dtype bf16: %d bytes per step (f32 gradients: %d), plan %d"
      % (ar["bytes"], grad_bytes, plan["comm"]["dp-cp.all_reduce"]["bytes"]))
PY
echo PASS
