# safetensors of a mixture-of-experts model, one rank: `tessera export
# --format safetensors` writes DESIGN.md's names (h.L.mlp.router.weight
# [C, E], h.L.mlp.experts.K.c_fc/c_proj, dense blocks' h.L.mlp.c_fc/c_proj)
# with the shape keys in the metadata, read here by a parser of this test's
# own; st_reference.py, a standard-library reader and forward pass, gives the
# first step's LM loss, Switch aux loss and z-loss from the exported initial
# weights within 1e-5 of tessera's (one micro-batch: tessera forms the
# auxiliary losses per micro-batch). The bf16 export is the f32 one rounded
# to nearest even, and trains within bf16 rounding. Raw weights (the format
# MoE exports had before) convert to a byte-identical file. Bad files and
# mismatched configurations (and a raw file's damaged header): one line
# naming the file and the tensor or key, non-zero exit.
. "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
python3 "$SRC/tests/cli/tokens_file.py" data.bin 65 64 3 || fail "token file" # one batch of 4 x 16
cat > model.ini <<'INI'
[model]
layers = 3
d_model = 32
heads = 2
vocab = 64
context = 16
experts = 4
top_k = 2
moe_every = 2
expert_hidden = 48
aux_loss_coeff = 0.01
z_loss_coeff = 0.001
[data]
source = tokens:data.bin
[train]
steps = 1
seq_len = 16
global_batch = 4
micro_batch = 4
metrics = m.jsonl
INI
"$TESSERA" export model.ini --format safetensors --out w.safetensors > /dev/null || fail "export safetensors"
"$TESSERA" export model.ini --format safetensors --dtype bf16 --out w16.safetensors > /dev/null ||
    fail "export bf16"
"$TESSERA" train model.ini > train.txt 2>&1 || { cat train.txt; fail "train"; }

python3 - <<'PY' || fail "the file's names, shapes and metadata"
import json, struct
from array import array
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    assert n % 8 == 0 and 8 + n <= len(b)
    h = json.loads(b[8:8 + n].decode())
    return h.pop("__metadata__"), h, b[8 + n:]
meta, h, data = read("w.safetensors")
assert meta == {"format": "pt", "layers": "3", "d_model": "32", "heads": "2", "vocab": "64",
                "context": "16", "experts": "4", "moe_every": "2", "expert_hidden": "48",
                "top_k": "2"}, meta
pos = 0
for lo, hi, k in sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in h.items()):
    assert lo == pos and hi > lo, ("offsets do not tile the data", k)
    pos = hi
assert pos == len(data)
C, F, E, V, T = 32, 48, 4, 64, 16
want = {"wte.weight": [V, C], "wpe.weight": [T, C], "ln_f.weight": [C], "ln_f.bias": [C]}
for l in range(3):
    p = "h.%d." % l
    want.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C], p + "attn.c_attn.weight": [C, 3 * C],
                 p + "attn.c_attn.bias": [3 * C], p + "attn.c_proj.weight": [C, C],
                 p + "attn.c_proj.bias": [C], p + "ln_2.weight": [C], p + "ln_2.bias": [C]})
    if l % 2 == 0:  # moe_every = 2: blocks 0 and 2 route to experts
        want[p + "mlp.router.weight"] = [C, E]
        for k in range(E):
            q = p + "mlp.experts.%d." % k
            want.update({q + "c_fc.weight": [C, F], q + "c_fc.bias": [F],
                         q + "c_proj.weight": [F, C], q + "c_proj.bias": [C]})
    else:
        want.update({p + "mlp.c_fc.weight": [C, 4 * C], p + "mlp.c_fc.bias": [4 * C],
                     p + "mlp.c_proj.weight": [4 * C, C], p + "mlp.c_proj.bias": [C]})
assert {k: v["shape"] for k, v in h.items()} == want, sorted(set(want) ^ set(h))
assert all(v["dtype"] == "F32" for v in h.values())
# Experts differ from each other (each its own slab of our (E, F, C) tensor).
t = lambda k: data[h[k]["data_offsets"][0]:h[k]["data_offsets"][1]]
assert len({t("h.0.mlp.experts.%d.c_fc.weight" % k) for k in range(E)}) == E
# bf16: the same names and shapes, each value the f32 one rounded to nearest even.
meta16, h16, data16 = read("w16.safetensors")
assert meta16 == meta and {k: v["shape"] for k, v in h16.items()} == want
assert all(v["dtype"] == "BF16" for v in h16.values())
for k in h:
    f = array("f", t(k))
    lo, hi = h16[k]["data_offsets"]
    g = array("H", data16[lo:hi])
    for x, y in zip(f, g):
        u = struct.unpack("<I", struct.pack("<f", x))[0]
        assert (u + 0x7fff + ((u >> 16) & 1)) >> 16 == y, (k, x, y)
print("%d tensors, DESIGN.md's names and shapes; metadata %s; bf16 rounded to nearest even"
      % (len(h), meta))
PY

# The reference reader's first step against tessera's.
python3 "$SRC/tests/cli/st_reference.py" --weights w.safetensors --tokens data.bin --batch 4 --seq 16 \
    --aux-coeff 0.01 --z-coeff 0.001 > ref.json || fail "st_reference.py"
python3 - <<'PY' || fail "the reference's first step"
import json
ref = json.load(open("ref.json"))
got = json.loads(open("m.jsonl").readline())
pairs = [("loss", got["loss"]), ("aux_loss", got["moe"]["aux_loss"]), ("z_loss", got["moe"]["z_loss"])]
for k, v in pairs:
    rel = abs(ref[k] - v) / abs(ref[k])
    # f32 sums of a few thousand terms against double: ~1e-7 seen.
    assert rel < 1e-5, (k, ref[k], v, rel)
    print("%-8s tessera %.9g  reference %.9g  (%.1e)" % (k, v, ref[k], rel))
PY

# Read back: the f32 file trains as the initialisation it came from (same
# bits), the bf16 one within bf16 rounding; raw weights convert to the same
# file.
"$TESSERA" train model.ini --set model.init=safetensors:w.safetensors --set train.metrics=st.jsonl \
    > st.txt 2>&1 || { cat st.txt; fail "train from safetensors"; }
"$TESSERA" train model.ini --set model.init=safetensors:w16.safetensors --set train.metrics=st16.jsonl \
    > st16.txt 2>&1 || { cat st16.txt; fail "train from bf16 safetensors"; }
cmp <(head -c 60 m.jsonl) <(head -c 60 st.jsonl) || fail "the f32 file does not train as its source"
python3 - <<'PY' || fail "bf16 file"
import json
a, b = json.loads(open("m.jsonl").readline()), json.loads(open("st16.jsonl").readline())
assert a["loss"] != b["loss"] and abs(a["loss"] - b["loss"]) / a["loss"] < 1e-2, (a["loss"], b["loss"])
PY
"$TESSERA" export model.ini --out raw.bin > /dev/null || fail "raw export"
"$TESSERA" export model.ini --set model.init=llmc:raw.bin --format safetensors --out conv.safetensors \
    > /dev/null || fail "raw weights to safetensors"
cmp w.safetensors conv.safetensors || fail "converted raw weights differ from the direct export"
echo "raw weights (magic 20260601) convert to the same bytes"

# Bad files: each edit of the header (a tensor's dtype, shape, offsets, a
# name dropped or renamed) written beside the data.
python3 - <<'PY' || fail "making bad files"
import json, struct
b = open("w.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
head, data = json.loads(b[8:8 + n].decode()), b[8 + n:]
def write(name, h, d=data):
    j = json.dumps(h).encode()
    j += b" " * (-len(j) % 8)
    open(name, "wb").write(struct.pack("<Q", len(j)) + j + d)
def edit(name, fn):
    h = json.loads(json.dumps(head))
    fn(h)
    write(name, h)
open("trunc.safetensors", "wb").write(b[:len(b) - 1000])
def overlap(h):  # expert 1's c_fc.weight onto expert 0's bytes
    h["h.0.mlp.experts.1.c_fc.weight"]["data_offsets"] = h["h.0.mlp.experts.0.c_fc.weight"]["data_offsets"]
edit("overlap.safetensors", overlap)
def past(h):
    lo, hi = h["h.2.mlp.experts.3.c_proj.bias"]["data_offsets"]
    h["h.2.mlp.experts.3.c_proj.bias"]["data_offsets"] = [len(data) - 64, len(data) - 64 + hi - lo]
edit("past.safetensors", past)
edit("shape.safetensors", lambda h: h["h.2.mlp.experts.2.c_proj.weight"].update(shape=[32, 48]))
edit("dtype.safetensors", lambda h: h["h.0.mlp.experts.1.c_fc.bias"].update(dtype="I32"))
def drop(name, prefix):  # the tensors and their bytes (the rest still tile the data)
    h, d, pos = {"__metadata__": head["__metadata__"]}, bytearray(), 0
    for k, v in sorted(((k, v) for k, v in head.items() if k != "__metadata__"),
                       key=lambda kv: kv[1]["data_offsets"][0]):
        if k.startswith(prefix): continue
        lo, hi = v["data_offsets"]
        d += data[lo:hi]
        h[k] = dict(v, data_offsets=[pos, pos + hi - lo])
        pos += hi - lo
    write(name, h, d)
drop("missing.safetensors", "h.2.mlp.experts.3.")
edit("index.safetensors",
     lambda h: h.update({"h.0.mlp.experts.4.c_proj.bias": h.pop("h.0.mlp.experts.3.c_proj.bias")}))
def dense_router(h):  # a router in block 1, which moe_every = 2 makes dense
    h["h.1.mlp.router.weight"] = h.pop("h.0.mlp.router.weight")
edit("router.safetensors", dense_router)
edit("meta.safetensors", lambda h: h["__metadata__"].update(experts="four"))
PY
expect_fail() { # NAME REGEX args...: exit non-zero, one line on stderr matching REGEX
    local name=$1 regex=$2
    shift 2
    "$TESSERA" "$@" > $name.out 2> $name.err && { cat $name.out $name.err; fail "$name: accepted"; }
    [ "$(wc -l < $name.err)" = 1 ] || { cat $name.err; fail "$name: not one line"; }
    grep -qE "$regex" $name.err || { cat $name.err; fail "$name: message does not match /$regex/"; }
    echo "ok $name: $(cat $name.err)"
}
bad() { # NAME REGEX: training from NAME.safetensors is refused
    expect_fail "$1" "$1.safetensors: $2" train model.ini --set model.init=safetensors:$1.safetensors
}
bad trunc "h\.[0-9a-z._]+'s data_offsets \[[0-9]+, [0-9]+\) run past the end of the [0-9]+ data bytes"
bad overlap 'h\.0\.mlp\.experts\.[01]\.c_fc\.weight.s data_offsets .* overlap h\.0\.mlp\.experts\.[01]\.c_fc\.weight'
bad past 'h\.2\.mlp\.experts\.3\.c_proj\.bias.s data_offsets .* run past the end'
bad shape 'h\.2\.mlp\.experts\.2\.c_proj\.weight has shape \[32,48\], the model.s is \[48,32\]'
bad dtype 'h\.0\.mlp\.experts\.1\.c_fc\.bias is I32 \(F32, BF16 or F16 expected\)'
bad missing 'no tensor h\.2\.mlp\.experts\.3\.c_fc\.weight'
bad index 'h\.0\.mlp\.experts\.4\.c_proj\.bias: expert 4 is past the model.s 4'
bad router 'h\.1\.mlp\.router\.weight: block h\.1 of the model is a dense MLP'
bad meta '__metadata__ experts = "four" is not a count'
# Configurations the file does not fit: a key the INI sets, the blocks.
expect_fail top_k 'top_k: 1 conflicts with 2 in the safetensors file w.safetensors' \
    train model.ini --set model.top_k=1 --set model.init=safetensors:w.safetensors
expect_fail moe_into_dense 'experts: block h.0 is a dense MLP here .* and a mixture of experts in the safetensors file w.safetensors' \
    train model.ini --set model.experts=0 --set model.init=safetensors:w.safetensors
expect_fail moe_every 'moe_every: block h.1 is a mixture of experts here .* and a dense MLP in the safetensors file' \
    train model.ini --set model.moe_every=1 --set model.init=safetensors:w.safetensors
"$TESSERA" export model.ini --set model.experts=0 --format safetensors --out dense.safetensors > /dev/null ||
    fail "dense export"
expect_fail dense_into_moe 'experts: block h.0 is a mixture of experts here .* and a dense MLP in the safetensors file dense.safetensors' \
    train model.ini --set model.init=safetensors:dense.safetensors
python3 -c "
import struct
b = bytearray(open('raw.bin', 'rb').read())
b[44:48] = struct.pack('<i', 9)  # top_k 9 of 4 experts
open('rawbad.bin', 'wb').write(b)" || fail "making a bad raw file"
expect_fail raw_header 'raw weights rawbad.bin: header experts=4 moe_every=2 expert_hidden=48 top_k=9 is not a mixture of experts' \
    train model.ini --set model.init=llmc:rawbad.bin
expect_fail raw_bf16 'raw weights of a mixture of experts are f32 only' \
    export model.ini --dtype bf16 --out raw16.bin
echo PASS
