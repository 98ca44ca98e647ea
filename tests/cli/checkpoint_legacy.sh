# Single-file checkpoints of earlier builds (DIR/ckpt-NNNNNNNN.tsck) still
# load: one is made from a one-rank checkpoint directory by a writer of this
# test's own (the documented layout: 256-byte header, 128-byte table entries,
# master weights, first and second moments), then
#  - resume = auto continues from it bit for bit as from the directory;
#  - tessera reshard converts it into a directory whose tensors equal the
#    original's (tessera inspect: the CRC of every array of every tensor);
#  - a truncated file, a wrong magic and a corrupt payload are refused, named.
. "$(dirname "$0")/lib.sh"
CFG="$SRC/configs/tiny.ini"
"$TESSERA" train "$CFG" --set train.steps=20 --set train.metrics=ref.jsonl > ref.txt 2>&1 ||
    { cat ref.txt; fail "reference run failed"; }
"$TESSERA" train "$CFG" --set train.steps=10 --set train.decay_steps=20 \
    --set train.checkpoint_dir=new > new.txt 2>&1 || { cat new.txt; fail "first run failed"; }
mkdir old
python3 - new/ckpt-00000010 old/ckpt-00000010.tsck <<'PY' || fail "could not write the old file"
import struct, sys, zlib
src, dst = sys.argv[1], sys.argv[2]
meta = {}
tensors = []
for line in open(src + "/metadata"):
    f = line.split()
    if f[0] == "tensor":
        tensors.append((f[2], int(f[3]), [int(x) for x in f[4:7]]))
    elif f[0] == "model":
        meta.update({k: int(v) for k, v in (kv.split("=") for kv in f[1:])})
    elif f[0] in ("step", "data_cursor", "seed", "skipped_steps"):
        meta[f[0]] = int(f[1])
    elif f[0] == "param_dtype":
        assert f[1] == "f32"
numel = sum(s[0] * s[1] * s[2] for _, _, s in tensors)
# One rank wrote every tensor whole, in model order, array after array:
# its file is the flat layout of master, m and v.
payload = open(src + "/rank-00000.bin", "rb").read()
assert len(payload) == 12 * numel, (len(payload), numel)
table = b""
off = 0
for name, ndim, shape in tensors:
    n = shape[0] * shape[1] * shape[2]
    table += struct.pack("<64sq4qqqq", name.encode(), ndim, *(shape[:ndim] + [0] * (4 - ndim)), off, n, 0)
    off += n
h = bytearray(256)
struct.pack_into("<8sII", h, 0, b"TSCKPT\0\1", 1, 256)
struct.pack_into("<qqQ", h, 16, meta["step"], meta["data_cursor"], meta["seed"])
struct.pack_into("<8i", h, 40, meta["layers"], meta["d_model"], meta["heads"], meta["vocab"],
                 meta["padded_vocab"], meta["context"], 0, len(tensors))
struct.pack_into("<QQI", h, 72, numel, len(table) + len(payload), zlib.crc32(table + payload))
struct.pack_into("<q", h, 96, meta["skipped_steps"])
struct.pack_into("<I", h, 92, zlib.crc32(bytes(h)))
open(dst, "wb").write(bytes(h) + table + payload)
PY
"$TESSERA" train "$CFG" --set train.steps=20 --set train.checkpoint_dir=old --set train.resume=auto \
    --set train.metrics=old.jsonl > old.txt 2>&1 || { cat old.txt; fail "resume from the old file failed"; }
grep -q "resumed from old/ckpt-00000010.tsck at step 10" old.txt || { cat old.txt; fail "did not resume"; }
for s in $(seq 11 20); do
    for field in loss grad_norm; do
        a=$(metric ref.jsonl "$s" $field) b=$(metric old.jsonl "$s" $field)
        [ -n "$a" ] && [ "$a" = "$b" ] || fail "step $s: $field $b from the old file, $a uninterrupted"
    done
done
[ -f old/ckpt-00000020/COMPLETE ] || fail "the resumed run did not write a checkpoint directory"
echo "ok: steps 11..20 resumed from the old file equal the uninterrupted run bit for bit"

"$TESSERA" reshard "$CFG" --checkpoint old/ckpt-00000010.tsck --out conv > conv.txt 2>&1 ||
    { cat conv.txt; fail "reshard of the old file failed"; }
"$TESSERA" inspect new/ckpt-00000010 | grep '^tensor' > a.txt || fail "inspect failed"
"$TESSERA" inspect conv | grep '^tensor' > b.txt || fail "inspect of the converted failed"
[ "$(wc -l < a.txt)" -gt 10 ] && cmp -s a.txt b.txt || { diff a.txt b.txt; fail "converted tensors differ"; }
echo "ok: tessera reshard converts the old file; $(wc -l < a.txt) tensors equal"

expect() { # NAME REGEX: resume from the damaged old file fails with a message
    timeout -s KILL 60 "$TESSERA" train "$CFG" --set train.steps=12 --set train.checkpoint_dir=bad \
        --set train.resume=auto > "$1.out" 2>&1
    local rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || { cat "$1.out"; fail "$1: exit status $rc"; }
    grep -qE "$2" "$1.out" || { cat "$1.out"; fail "$1: no message matching /$2/"; }
    echo "ok $1: $(head -n 1 "$1.out")"
}
mkdir bad
f=bad/ckpt-00000010.tsck
size=$(stat -c %s old/ckpt-00000010.tsck)
head -c $((size - 100)) old/ckpt-00000010.tsck > $f
expect truncated 'ckpt-00000010.tsck.*(truncated|bytes, expected)'
cp old/ckpt-00000010.tsck $f
printf 'XXXXXXXX' | dd of=$f conv=notrunc 2>/dev/null
expect wrong_magic 'ckpt-00000010.tsck.*wrong magic'
cp old/ckpt-00000010.tsck $f
printf '\x55' | dd of=$f bs=1 seek=$((size - 7)) conv=notrunc 2>/dev/null
expect corrupt 'ckpt-00000010.tsck.*checksum'
echo "PASS"
