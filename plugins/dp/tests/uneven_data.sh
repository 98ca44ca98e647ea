# Uneven inputs: a token file whose windows do not divide into whole global
# batches, trained for one epoch ([data] epochs = 1) on 3 data-parallel
# ranks. The last global batch would leave some ranks without data; every
# rank stops together, cleanly, before it (exit status 0, no hang: the
# whole run is bounded by a 60 s timeout, far below CI's).
. "$2/tests/cli/multirank.sh"
write_config
# 1000 + 1 tokens = 31 windows of 32; a global batch of 6 windows takes 5
# whole steps (30 windows), and step 6 would need windows 30..35.
python3 - <<'PY'
import struct, random
random.seed(1)
toks = [random.randrange(256) for _ in range(1001)]
with open("short.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))
PY
set +e
timeout 60 mpirun --oversubscribe --bind-to none -np 3 "$TESSERA" train model.ini \
    --set parallel.plugins=dp --set data.source=tokens:short.bin --set data.epochs=1 \
    --set train.global_batch=6 --set train.micro_batch=2 --set train.steps=100 > run.txt 2>&1
status=$?
set -e
cat run.txt
[ "$status" -eq 0 ] || fail "exit status $status (124 = timed out)"
steps=$(grep -c '^step ' run.txt)
[ "$steps" -eq 5 ] || fail "$steps steps were taken, expected 5 whole global batches"
grep -q "epochs = 1 exhausted before step 6; stopping on all ranks" run.txt ||
    fail "no clean-stop message"
echo "PASS: stopped on all 3 ranks after 5 steps"
