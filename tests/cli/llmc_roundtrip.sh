# llm.c interop: a checkpoint written by `tessera export` loads back through
# [model] init = llmc:PATH with identical weights (exporting again gives the
# same bytes), its header and size follow docs/formats.md, the bf16 export
# (version 5) is the f32 one rounded to nearest even, and an INI value
# that conflicts with the checkpoint's shape is an error naming the key.
. "$(dirname "$0")/lib.sh"
"$TESSERA" train "$SRC/configs/tiny.ini" --set train.steps=5 --set train.checkpoint_dir=ck \
    > train.txt 2>&1 || { cat train.txt; fail "training failed"; }
"$TESSERA" export "$SRC/configs/tiny.ini" --set train.checkpoint_dir=ck --out a.bin > e1.txt 2>&1 ||
    { cat e1.txt; fail "export failed"; }
grep -q "step 5" e1.txt || fail "export did not take the step-5 checkpoint"
# Header: magic, version 3, maxT 64, V 256, L 2, NH 4, C 64, Vp 256.
header=$(od -An -t d4 -N 32 a.bin | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$header" = "20240326 3 64 256 2 4 64 256" ] || fail "header is '$header'"
# Size: 1024 + 4 * (Vp*C + maxT*C + L*12*C*C + L*13*C + 2*C) for this shape.
C=64; L=2
n=$((256 * C + 64 * C + L * (12 * C * C + 13 * C) + 2 * C))
size=$(stat -c %s a.bin)
[ "$size" -eq $((1024 + 4 * n)) ] || fail "file is $size bytes, expected $((1024 + 4 * n))"
"$TESSERA" export "$SRC/configs/tiny.ini" --set model.init=llmc:a.bin --out b.bin > e2.txt 2>&1 ||
    { cat e2.txt; fail "export from llmc init failed"; }
cmp a.bin b.bin || fail "weights changed through an llm.c round trip"
# --dtype bf16: version 5, each value the f32 one rounded to nearest even;
# it loads (bf16 to f32 is exact), and exporting it in bf16 again gives the
# same bytes.
"$TESSERA" export "$SRC/configs/tiny.ini" --set train.checkpoint_dir=ck --dtype bf16 --out a16.bin \
    > /dev/null || fail "bf16 export failed"
"$TESSERA" export "$SRC/configs/tiny.ini" --set model.init=llmc:a16.bin --dtype bf16 --out b16.bin \
    > /dev/null || fail "bf16 export from the bf16 file failed"
cmp a16.bin b16.bin || fail "a bf16 llm.c file changed through a round trip"
python3 - <<'PY' || fail "the bf16 file"
import struct
from array import array
a, b = open("a.bin", "rb").read(), open("a16.bin", "rb").read()
assert b[:4] + b[8:1024] == a[:4] + a[8:1024] and struct.unpack("<i", b[4:8])[0] == 5
f, h = array("f", a[1024:]), array("H", b[1024:])
assert len(h) == len(f)
for x, y in zip(f, h):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    assert (u + 0x7fff + ((u >> 16) & 1)) >> 16 == y, (x, y)
print("bf16 llm.c export: version 5, %d values rounded to nearest even" % len(h))
PY
# The loaded weights differ from a fresh initialisation (the load did happen).
"$TESSERA" export "$SRC/configs/tiny.ini" --out fresh.bin > e3.txt 2>&1 || fail "fresh export failed"
cmp -s a.bin fresh.bin && fail "exported weights equal the initial ones: nothing was trained"
# Training from the llm.c checkpoint starts at its loss, not at ln(vocab).
"$TESSERA" train "$SRC/configs/tiny.ini" --set model.init=llmc:a.bin --set train.steps=1 \
    > t2.txt 2>&1 || { cat t2.txt; fail "training from llmc failed"; }
if "$TESSERA" train "$SRC/configs/tiny.ini" --set model.init=llmc:a.bin --set model.layers=3 \
    > bad.txt 2>&1; then fail "a conflicting layers value was accepted"; fi
grep -q "layers" bad.txt && grep -q "conflicts" bad.txt || { cat bad.txt; fail "unclear conflict message"; }
echo PASS
