# A step whose loss or gradient norm is not finite is skipped, not applied:
# it is counted (skipped, skipped_steps in the metrics, whose non-finite
# numbers are JSON null), logged, and after [train] max_skipped_steps in a
# row the run stops with an error naming the key. No checkpoint is written
# from the state a skipped step started from, and a checkpoint holding
# non-finite values is refused at load.
. "$(dirname "$0")/lib.sh"

# Strict JSON: NaN and Infinity are not JSON.
jsonl_check() { # FILE
    python3 - "$1" <<'PY' || fail "$1 is not strict JSON lines"
import json, sys
def no_constants(c): raise ValueError("non-JSON constant " + c)
for n, line in enumerate(open(sys.argv[1]), 1):
    json.loads(line, parse_constant=no_constants)
PY
}

# A learning rate so large that the first update overflows the model.
huge=(--set train.lr=1e30 --set train.grad_clip=0 --set train.warmup=0 --set train.steps=10)
"$TESSERA" train "$SRC/configs/tiny.ini" "${huge[@]}" --set train.metrics=m.jsonl \
    --set train.checkpoint_dir=ck --set train.checkpoint_every=1 > out.txt 2>&1
rc=$?
cat out.txt
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "diverging run: exit status $rc (expected a clean failure)"
grep -q "3 steps in a row had a non-finite loss or gradient norm.*max_skipped_steps = 3" out.txt ||
    fail "no error naming max_skipped_steps"
[ "$(grep -c '| skipped:' out.txt)" -eq 3 ] || fail "expected 3 skipped-step lines"
jsonl_check m.jsonl
[ "$(metric m.jsonl 1 skipped)" = false ] || fail "step 1 was not applied"
for s in 2 3 4; do
    [ "$(metric m.jsonl $s skipped)" = true ] || fail "step $s: not marked skipped"
    [ "$(metric m.jsonl $s grad_norm)" = null ] || fail "step $s: grad_norm is not null"
done
[ "$(metric m.jsonl 4 skipped_steps)" = 3 ] || fail "skipped_steps at step 4 is not 3"
[ "$(wc -l < m.jsonl)" -eq 4 ] || fail "the run went on after stopping"
# Checkpoints: step 1 (applied) only; those due at steps 2-4 were deferred.
ls ck
[ "$(ls ck | grep -c '^ckpt-')" -eq 1 ] && [ -f ck/ckpt-00000001/COMPLETE ] ||
    fail "a checkpoint was written from the state a skipped step started from"
echo "ok: diverging run stopped after 3 skipped steps, no checkpoint of the diverged state"

# A larger max_skipped_steps lets more steps be skipped before stopping.
"$TESSERA" train "$SRC/configs/tiny.ini" "${huge[@]}" --set train.max_skipped_steps=5 \
    --set train.metrics=m5.jsonl > out5.txt 2>&1 && fail "max_skipped_steps=5: exit 0"
[ "$(grep -c '| skipped:' out5.txt)" -eq 5 ] || { cat out5.txt; fail "expected 5 skipped steps"; }
grep -q "max_skipped_steps = 5" out5.txt || fail "the message does not name --set max_skipped_steps"
echo "ok: max_skipped_steps = 5 skips 5 steps"

# Resuming from the newest checkpoint (step 1, finite) meets the same
# divergence and stops again, cleanly: it never loads a non-finite state.
"$TESSERA" train "$SRC/configs/tiny.ini" "${huge[@]}" --set train.checkpoint_dir=ck \
    --set train.resume=auto > out_r.txt 2>&1 && fail "resumed diverging run: exit 0"
grep -q "resumed from ck/ckpt-00000001" out_r.txt || { cat out_r.txt; fail "did not resume"; }

# A checkpoint holding a NaN (as an older build could write) with valid
# checksums is refused with a message, not resumed.
"$TESSERA" train "$SRC/configs/tiny.ini" --set train.steps=2 --set train.checkpoint_dir=nan \
    > out_n.txt 2>&1 || { cat out_n.txt; fail "could not write a checkpoint"; }
# NaN into element 5 of the master weights of wte (the first shard of
# rank 0's file), with the shard's CRC and the metadata's made to agree, so
# only the values are wrong.
python3 - nan/ckpt-00000002 <<'PY'
import struct, sys, zlib
d = sys.argv[1]
b = bytearray(open(d + "/rank-00000.bin", "rb").read())
lines = open(d + "/metadata").read().split("\n")
i = next(k for k, l in enumerate(lines) if l.startswith("shard 0 master 0 0 "))
f = lines[i].split()
n = int(f[12]) - int(f[11])
struct.pack_into("<f", b, 4 * 5, float("nan"))
f[13] = "%08x" % zlib.crc32(bytes(b[:4 * n]))
lines[i] = " ".join(f)
body = "\n".join(l for l in lines if l and not l.startswith("end ")) + "\n"
open(d + "/rank-00000.bin", "wb").write(b)
open(d + "/metadata", "w").write(body + "end %08x\n" % zlib.crc32(body.encode()))
PY
"$TESSERA" train "$SRC/configs/tiny.ini" --set train.steps=4 --set train.checkpoint_dir=nan \
    --set train.resume=auto > out_l.txt 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || { cat out_l.txt; fail "NaN checkpoint: exit status $rc"; }
grep -q "ckpt-00000002: holds a value that is not finite (master of wte)" out_l.txt ||
    { cat out_l.txt; fail "NaN checkpoint: no clear message"; }
echo "ok: a checkpoint holding NaN is refused"
# A transient blow-up: the plugin writes a NaN into one gradient on step 3
# (step index 2). That step is skipped and training goes on; the checkpoint
# due at step 3 is written at step 4. The data hold exactly one global batch,
# so every step reads the same tokens: if the skipped step left the weights
# as they were, step 4 of this run computes exactly what step 3 of a run
# without the NaN computes (same weights, same batch; bit for bit).
PLUGINS=${3:?the test plugin directory}
python3 -c "import random; random.seed(7); open('one_batch.txt','wb').write(bytes(random.randrange(256) for _ in range(16 * 64 + 1)))"
same=(--set data.source=text:one_batch.txt --set train.steps=6 --set parallel.plugin_path=$PLUGINS)
"$TESSERA" train "$SRC/configs/tiny.ini" "${same[@]}" --set parallel.plugins=poison \
    --set poison.step=2 --set train.metrics=p.jsonl --set train.checkpoint_dir=ckp \
    --set train.checkpoint_every=3 > p.txt 2>&1 || { cat p.txt; fail "run with one NaN gradient failed"; }
"$TESSERA" train "$SRC/configs/tiny.ini" "${same[@]}" --set train.metrics=n.jsonl > n.txt 2>&1 ||
    { cat n.txt; fail "run without the NaN failed"; }
jsonl_check p.jsonl
for s in 1 2 4 5 6; do
    [ "$(metric p.jsonl $s skipped)" = false ] || fail "step $s was skipped"
done
[ "$(metric p.jsonl 3 skipped)" = true ] && [ "$(metric p.jsonl 3 grad_norm)" = null ] ||
    fail "step 3 was not skipped"
[ "$(metric p.jsonl 3 loss)" = "$(metric n.jsonl 3 loss)" ] || fail "step 3's forward differs"
[ "$(metric p.jsonl 6 skipped_steps)" = 1 ] || fail "skipped_steps at the end is not 1"
for f in loss grad_norm; do
    a=$(metric p.jsonl 4 $f) b=$(metric n.jsonl 3 $f)
    [ "$a" = "$b" ] || fail "$f: step 4 after the skipped step is $a, the clean run's step 3 is $b"
done
grep -q "checkpoint: deferred, step 3 was skipped" p.txt || fail "no deferral message"
[ "$(ls ckp | grep '^ckpt-' | tr '\n' ' ')" = "ckpt-00000004 ckpt-00000006 " ] ||
    fail "checkpoints: $(ls ckp)"
echo "ok: one NaN gradient: step 3 skipped, training continued; step 4 equals the clean step 3" \
    "(loss $(metric p.jsonl 4 loss))"
echo "PASS"
