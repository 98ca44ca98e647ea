# Training on 1, 2 and 3 threads gives the same losses and gradient norms,
# bit for bit, step for step: every CPU kernel's loop is cut into tasks that
# write disjoint outputs, GEMMs into one-thread tiles, and the sum of squares
# into chunks that do not depend on the thread count (kernels/cpu/tasks.h).
# The model is wide enough that the products are cut into several tiles
# (rows 16 x 64 = 1024, width 128), and the clip is low enough to act.
. "$(dirname "$0")/lib.sh"
for th in 1 2 3; do
    OMP_NUM_THREADS=$th OPENBLAS_NUM_THREADS=$th "$TESSERA" train "$SRC/configs/tiny.ini" \
        --set model.d_model=128 --set train.steps=20 --set train.micro_batch=16 \
        --set train.grad_clip=0.5 --set train.threads=$th --set train.metrics=t$th.jsonl \
        > t$th.txt 2>&1 || { cat t$th.txt; fail "training on $th threads failed"; }
    python3 - t$th.jsonl > t$th.bits <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    if "loss" in d:
        print(d["step"], repr(d["loss"]), repr(d["grad_norm"]))
PY
done
[ "$(wc -l < t1.bits)" -eq 20 ] || fail "expected 20 steps, got $(wc -l < t1.bits)"
awk '$3 + 0 > 0.5 { n++ } END { exit !(n > 0) }' t1.bits ||
    fail "no step's gradient norm passed the clip (0.5): the clip is not exercised"
for th in 2 3; do
    cmp -s t1.bits t$th.bits || { diff t1.bits t$th.bits | head; fail "$th threads differ from 1"; }
done
echo "20 steps, losses and gradient norms identical on 1, 2 and 3 threads; last: $(tail -1 t1.bits)"
echo PASS
