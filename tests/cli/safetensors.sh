# safetensors interop: `tessera export --format safetensors` writes
# transformers' GPT-2 names and shapes (Conv1D weights as [in, out]), read
# here by a parser of this test's own (8-byte length, JSON header, data
# offsets that tile the data exactly) and compared element by element with
# the llm.c export of the same checkpoint (c_attn, c_proj, c_fc transposed,
# wte without the padding rows). `[model] init = safetensors:PATH` then
# trains exactly as `init = llmc:PATH` of the same weights (losses equal,
# bit for bit), also from a BF16 file (within bf16 rounding); bad files and
# a mixture-of-experts configuration of the dense file are refused with
# messages naming the file (the experts' files: safetensors_moe.sh); a
# one-channel model keeps its matrices 2-D.
. "$(dirname "$0")/lib.sh"
cat > model.ini <<'INI'
[model]
layers = 2
d_model = 64
heads = 4
vocab = 200
context = 32
[train]
steps = 4
seq_len = 32
global_batch = 4
micro_batch = 4
checkpoint_every = 4
checkpoint_dir = ck
INI
"$TESSERA" train model.ini > train.txt 2>&1 || { cat train.txt; fail "train"; }
"$TESSERA" export model.ini --format safetensors --out w.safetensors > /dev/null || fail "export safetensors"
"$TESSERA" export model.ini --out w.bin > /dev/null || fail "export llmc"
python3 - <<'PY' || fail "the safetensors file"
import json, struct
from array import array
b = open("w.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
assert 8 + n <= len(b) and n % 8 == 0, n
h = json.loads(b[8:8 + n].decode())
meta = h.pop("__metadata__")
assert meta == {"format": "pt", "layers": "2", "d_model": "64", "heads": "4", "vocab": "200",
                "context": "32"}, meta
data = b[8 + n:]
spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in h.items())
pos = 0
for lo, hi, k in spans:
    assert lo == pos and hi > lo, ("offsets do not tile the data", k, lo, pos)
    pos = hi
assert pos == len(data), (pos, len(data))
L, C, V, T, Vp = 2, 64, 200, 32, 256
want = {"wte.weight": [V, C], "wpe.weight": [T, C], "ln_f.weight": [C], "ln_f.bias": [C]}
for l in range(L):
    p = "h.%d." % l
    want.update({p + "ln_1.weight": [C], p + "ln_1.bias": [C], p + "attn.c_attn.weight": [C, 3 * C],
                 p + "attn.c_attn.bias": [3 * C], p + "attn.c_proj.weight": [C, C],
                 p + "attn.c_proj.bias": [C], p + "ln_2.weight": [C], p + "ln_2.bias": [C],
                 p + "mlp.c_fc.weight": [C, 4 * C], p + "mlp.c_fc.bias": [4 * C],
                 p + "mlp.c_proj.weight": [4 * C, C], p + "mlp.c_proj.bias": [C]})
assert {k: v["shape"] for k, v in h.items()} == want, "names or shapes differ"
assert all(v["dtype"] == "F32" for v in h.values())
def tensor(k):
    lo, hi = h[k]["data_offsets"]
    return array("f", data[lo:hi])
# The llm.c file: the same weights in our (out, in) layout, llm.c's order.
w = array("f", open("w.bin", "rb").read()[1024:])
groups = [("wte", Vp * C), ("wpe", T * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
          ("qkvb", L * 3 * C), ("projw", L * C * C), ("projb", L * C), ("ln2w", L * C), ("ln2b", L * C),
          ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * 4 * C * C), ("fcprojb", L * C),
          ("lnfw", C), ("lnfb", C)]
off, g = 0, {}
for name, size in groups:
    g[name] = w[off:off + size]
    off += size
assert off == len(w)
def same(k, ours, rows, cols, transpose):
    t = tensor(k)
    for r in range(rows):
        for c in range(cols):
            x = t[c * rows + r] if transpose else t[r * cols + c]
            assert x == ours[r * cols + c], (k, r, c, x, ours[r * cols + c])
same("wte.weight", g["wte"], V, C, False)
same("wpe.weight", g["wpe"], T, C, False)
for l in range(L):
    p = "h.%d." % l
    same(p + "attn.c_attn.weight", g["qkvw"][l * 3 * C * C:], 3 * C, C, True)
    same(p + "attn.c_attn.bias", g["qkvb"][l * 3 * C:], 3 * C, 1, False)
    same(p + "attn.c_proj.weight", g["projw"][l * C * C:], C, C, True)
    same(p + "mlp.c_fc.weight", g["fcw"][l * 4 * C * C:], 4 * C, C, True)
    same(p + "mlp.c_proj.weight", g["fcprojw"][l * 4 * C * C:], C, 4 * C, True)
    same(p + "ln_2.bias", g["ln2b"][l * C:], C, 1, False)
same("ln_f.weight", g["lnfw"], C, 1, False)
# A BF16 copy (round to nearest even), for the reader's other dtype.
hb, out, pos = {}, bytearray(), 0
for k in sorted(h, key=lambda k: h[k]["data_offsets"][0]):
    t = tensor(k)
    for x in t:
        u = struct.unpack("<I", struct.pack("<f", x))[0]
        u = (u + 0x7fff + ((u >> 16) & 1)) >> 16
        out += struct.pack("<H", u)
    hb[k] = {"dtype": "BF16", "shape": h[k]["shape"], "data_offsets": [pos, pos + 2 * len(t)]}
    pos += 2 * len(t)
hj = json.dumps(hb).encode()
hj += b" " * (-len(hj) % 8)
open("w16.safetensors", "wb").write(struct.pack("<Q", len(hj)) + hj + out)
print("%d tensors, header %d bytes, data %d bytes; equal to the llm.c export, Conv1D weights transposed"
      % (len(h), n, len(data)))
PY
run() { # NAME INIT: 3 steps from those weights
    "$TESSERA" train model.ini --set model.init=$2 --set train.checkpoint_dir= --set train.checkpoint_every=0 --set train.steps=3 \
        --set train.metrics=$1.jsonl > $1.txt 2>&1 || { cat $1.txt; fail "$1: train"; }
}
run llmc llmc:w.bin
run st safetensors:w.safetensors
run st16 safetensors:w16.safetensors
python3 - <<'PY' || fail "training from safetensors"
import json
a = [json.loads(l) for l in open("llmc.jsonl")]
b = [json.loads(l) for l in open("st.jsonl")]
c = [json.loads(l) for l in open("st16.jsonl")]
assert [(x["loss"], x["grad_norm"]) for x in a] == [(x["loss"], x["grad_norm"]) for x in b]
worst = max(abs(x["loss"] - y["loss"]) / x["loss"] for x, y in zip(a, c))
assert worst < 1e-2, worst  # bf16 weights: 3 significant digits
print("from safetensors: losses equal to llm.c's bit for bit; from BF16 within %.1e" % worst)
PY
# Bad files and models.
head -c 100 w.safetensors > cut.safetensors
printf '\377\377\377\377\377\377\377\177{}' > huge.safetensors
expect_fail() { # NAME REGEX args...
    local name=$1 regex=$2
    shift 2
    "$TESSERA" "$@" > $name.txt 2>&1 && { cat $name.txt; fail "$name: accepted"; }
    grep -qE "$regex" $name.txt || { cat $name.txt; fail "$name: message does not match /$regex/"; }
    echo "ok $name: $(grep -m1 -E "$regex" $name.txt)"
}
expect_fail truncated 'cut.safetensors' train model.ini --set model.init=safetensors:cut.safetensors
expect_fail huge 'huge.safetensors: header length [0-9]+ does not fit the file' train model.ini \
    --set model.init=safetensors:huge.safetensors
expect_fail conflict 'd_model.*32 conflicts with 64 in the safetensors file' train model.ini \
    --set model.d_model=32 --set model.init=safetensors:w.safetensors
expect_fail moe 'experts: block h.0 is a mixture of experts here .* and a dense MLP in the safetensors file w.safetensors' \
    train model.ini --set model.experts=4 --set model.init=safetensors:w.safetensors
expect_fail dtype 'dtype f16: expected f32 or bf16' export model.ini --dtype f16 --out x
expect_fail format 'format onnx: expected llmc or safetensors' export model.ini --format onnx --out x
# One channel (d_model = 1): the matrices stay 2-D ([V, 1], Conv1D [1, 3], ...;
# they were written as vectors, which the reader then refused), and train back.
sed -e 's/^d_model = 64/d_model = 1/' -e 's/^heads = 4/heads = 1/' model.ini > one.ini
"$TESSERA" export one.ini --set train.checkpoint_dir= --format safetensors --out one.safetensors > /dev/null ||
    fail "export d_model 1"
python3 - <<'PY' || fail "d_model 1: shapes"
import json, struct
b = open("one.safetensors", "rb").read()
h = json.loads(b[8:8 + struct.unpack("<Q", b[:8])[0]])
got = {k: v["shape"] for k, v in h.items() if k in ("wte.weight", "wpe.weight", "h.0.attn.c_attn.weight",
                                                      "h.0.attn.c_proj.weight", "h.0.mlp.c_fc.weight")}
assert got == {"wte.weight": [200, 1], "wpe.weight": [32, 1], "h.0.attn.c_attn.weight": [1, 3],
               "h.0.attn.c_proj.weight": [1, 1], "h.0.mlp.c_fc.weight": [1, 4]}, got
PY
"$TESSERA" train one.ini --set model.init=safetensors:one.safetensors --set train.checkpoint_dir= \
    --set train.checkpoint_every=0 --set train.steps=1 > one.txt 2>&1 || { cat one.txt; fail "d_model 1: train"; }
echo "ok d_model 1: 2-D matrices, read back"
echo PASS
