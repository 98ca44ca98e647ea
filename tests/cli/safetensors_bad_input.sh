# safetensors files that must be refused before a step is taken, each in
# one line naming the file and the tensor or metadata key, with a non-zero
# exit (and in bounded time: a file must not build a model larger than
# itself): weights that are not finite (F32, BF16, F16; llm.c checkpoints
# and raw weights too), metadata counts that its own tensors contradict
# (experts, expert_hidden, moe_every, top_k, heads: 65,536 or 2^30 experts
# in a 4-expert file among them; the sizes an llm.c or raw header gives),
# and header JSON the format does not allow (a second __metadata__, a key
# twice, a NUL inside a string or one not UTF-8, text after the closing
# brace, a number past 64 bits, data bytes no tensor holds). A header with
# JSON escapes, UTF-8 and the format's space padding reads.
. "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cat > model.ini <<'INI'
[model]
layers = 3
d_model = 16
heads = 2
vocab = 32
context = 8
experts = 4
top_k = 2
moe_every = 2
expert_hidden = 24
[train]
steps = 1
seq_len = 8
global_batch = 2
micro_batch = 2
INI
sed 's/^experts = 4/experts = 0/' model.ini > dense.ini
sed '/^\[model\]/,/^\[train\]/{/^\[train\]/!d}' model.ini > bare.ini # the file gives the shape
"$TESSERA" export model.ini --format safetensors --out w.safetensors > /dev/null || fail "export"
"$TESSERA" export model.ini --format safetensors --dtype bf16 --out w16.safetensors > /dev/null ||
    fail "export bf16"
"$TESSERA" export dense.ini --format safetensors --out dense.safetensors > /dev/null ||
    fail "export dense"
"$TESSERA" export dense.ini --out dense.bin > /dev/null || fail "export llm.c"
"$TESSERA" export dense.ini --dtype bf16 --out dense16.bin > /dev/null || fail "export llm.c bf16"
"$TESSERA" export model.ini --out raw.bin > /dev/null || fail "export raw"

python3 - <<'PY' || fail "making the files"
import json, struct
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n].decode()), bytearray(b[8 + n:])
def write(name, text, data):  # text: the header JSON as bytes, padded here with spaces
    text += b" " * (-len(text) % 8)
    open(name, "wb").write(struct.pack("<Q", len(text)) + text + bytes(data))
def dump(h):
    return json.dumps(h).encode()
def edit(name, fn, src="w.safetensors"):
    h, d = read(src)
    fn(h, d)
    write(name, dump(h), d)
def put(h, d, tensor, index, fmt, value):  # element `index` of a tensor (file order)
    lo = h[tensor]["data_offsets"][0]
    size = struct.calcsize(fmt)
    d[lo + size * index:lo + size * (index + 1)] = struct.pack(fmt, value)

# Weights that are not finite.
edit("nan_f32.safetensors", lambda h, d: put(h, d, "h.1.attn.c_attn.weight", 5, "<f", float("nan")))
edit("inf_bf16.safetensors", lambda h, d: put(h, d, "h.0.mlp.experts.2.c_fc.bias", 3, "<H", 0x7f80),
     "w16.safetensors")
h, d = read("w.safetensors")  # every tensor as F16, then -inf in wte.weight
h16, d16, pos = {}, bytearray(), 0
for k in sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0]):
    lo, hi = h[k]["data_offsets"]
    for (x,) in struct.iter_unpack("<f", d[lo:hi]):
        d16 += struct.pack("<e", x)
    h16[k] = {"dtype": "F16", "shape": h[k]["shape"], "data_offsets": [pos, len(d16)]}
    pos = len(d16)
h16["__metadata__"] = h["__metadata__"]
write("f16.safetensors", dump(h16), d16)
put(h16, d16, "wte.weight", 70, "<e", float("-inf"))
write("inf_f16.safetensors", dump(h16), d16)
def llmc_nan(src, dst, index, fmt, value):
    b = bytearray(open(src, "rb").read())
    size = struct.calcsize(fmt)
    b[1024 + size * index:1024 + size * (index + 1)] = struct.pack(fmt, value)
    open(dst, "wb").write(b)
# llm.c order: wte (Vp 128 x 16), wpe (8 x 16), ln1w (3 x 16): element 2 of h.1.ln1.weight.
llmc_nan("dense.bin", "nan.bin", 128 * 16 + 8 * 16 + 16 + 2, "<f", float("nan"))
llmc_nan("dense16.bin", "inf16.bin", 128 * 16 + 7, "<H", 0xff80)  # wpe element 7: -inf
# Raw weights: the declared order; wte then wpe then block 0's ln1.weight.
llmc_nan("raw.bin", "nan_raw.bin", 128 * 16 + 8 * 16 + 3, "<f", float("inf"))
# Headers whose shape the file is far too short for (ints 7: Vp, 8: experts).
for name, src, at, v in [("vp.bin", "dense.bin", 7, 2**31 - 1), ("experts.bin", "raw.bin", 8, 65536)]:
    b = bytearray(open(src, "rb").read())
    b[4 * at:4 * at + 4] = struct.pack("<i", v)
    open(name, "wb").write(b)

# Metadata counts the file's tensors contradict.
def meta(name, src="w.safetensors", **kv):
    edit(name, lambda h, d: h["__metadata__"].update(kv), src)
meta("experts_65536.safetensors", experts="65536")
meta("experts_2p30.safetensors", experts=str(1 << 30))
meta("experts_dense.safetensors", "dense.safetensors", experts="4", moe_every="1",
     expert_hidden="64", top_k="1")
meta("hidden.safetensors", expert_hidden=str(1 << 30))
meta("top_k.safetensors", top_k=str(1 << 30))
meta("heads.safetensors", heads=str(1 << 30))
meta("moe_every.safetensors", moe_every="1")
meta("moe_every_2p30.safetensors", moe_every=str(1 << 30))
def stray(h, d):  # expert 65535 alone, no metadata: the tensors' own count
    del h["__metadata__"]
    h["h.0.mlp.experts.65535.c_fc.bias"] = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
edit("stray_expert.safetensors", stray)

# Header JSON the format does not allow.
h, d = read("w.safetensors")
text = dump(h)
assert text.endswith(b"}") and b'"__metadata__": {' in text
m = json.dumps(h["__metadata__"]).encode()
write("meta_twice.safetensors", text[:-1] + b', "__metadata__": ' +
      m.replace(b'"top_k": "2"', b'"top_k": "1"') + b"}", d)
write("key_twice.safetensors", text.replace(b'"top_k": "2"', b'"top_k": "2", "top_k": "1"'), d)
write("field_twice.safetensors", text.replace(b'"wpe.weight": {"dtype": "F32"',
                                              b'"wpe.weight": {"dtype": "F32", "dtype": "F16"'), d)
# "wte.weight\0x": read as wte.weight when the string stops at the NUL.
write("nul_name.safetensors", text.replace(b'"wte.weight"', b'"wte.weight\0x"'), d)
write("nul_meta.safetensors", text.replace(b'"top_k": "2"', b'"top_k": "2\0junk"'), d)
write("escaped_nul.safetensors", text.replace(b'"wte.weight"', b'"wte.weight\\u0000x"'), d)
write("not_utf8.safetensors", text.replace(b'"format": "pt"', b'"format": "p\xfft"'), d)
write("surrogate_utf8.safetensors", text.replace(b'"format": "pt"', b'"format": "\xed\xa0\x80"'), d)
write("after_brace.safetensors", text + b'{"wte.weight": 1}', d)
write("leading.safetensors", b"x" + text, d)
h["extra"] = {"dtype": "F32", "shape": [99999999999999999999, 0], "data_offsets": [0, 0]}
write("big_number.safetensors", dump(h), d)
del h["extra"]
write("trailing_data.safetensors", text, d + bytes(16))
# A hole: ln_f.bias (the last tensor) moved 16 bytes on, the file 16 longer.
lo, hi = h["ln_f.bias"]["data_offsets"]
h2 = json.loads(text)
h2["ln_f.bias"]["data_offsets"] = [lo + 16, hi + 16]
write("hole.safetensors", dump(h2), d[:lo] + bytes(16) + d[lo:])
# Valid: JSON escapes in names and metadata, whitespace around the JSON.
esc = text.replace(b'"wte.weight"', b'"\\u0077te\\u002eweight"')
esc = esc.replace(b'"format": "pt"',
                  b'"format": "pt", "note": "a\\nb\\t\\"c\\" \\u00e9\\ud83d\\ude00 caf\xc3\xa9 \xf0\x9f\x98\x80"')
write("escaped.safetensors", b"{\n " + esc[1:] + b"\n  ", d)
PY

expect_fail() { # NAME REGEX args...: exit non-zero within 20 s, one line on stderr matching REGEX
    local name=$1 regex=$2
    shift 2
    local t0=$SECONDS
    timeout -s KILL 20 "$TESSERA" "$@" > $name.out 2> $name.err
    local rc=$? took=$((SECONDS - t0))
    [ $rc = 0 ] && { cat $name.out $name.err; fail "$name: accepted"; }
    [ $rc -lt 128 ] || { cat $name.err; fail "$name: killed (status $rc) after ${took}s"; }
    [ "$(wc -l < $name.err)" = 1 ] || { cat $name.err; fail "$name: not one line"; }
    grep -qE "$regex" $name.err || { cat $name.err; fail "$name: message does not match /$regex/"; }
    echo "ok $name (${took}s): $(cat $name.err)"
}
bad() { # NAME REGEX: training from NAME.safetensors is refused naming it
    expect_fail "$1" "safetensors $1.safetensors: $2" train bare.ini --set model.init=safetensors:$1.safetensors
}
early() { # NAME REGEX: ... while its shape is read, before a model is built ([model] init named)
    bad "$1" "$2"
    grep -q "\[model\] init: safetensors $1.safetensors: " $1.err || fail "$1: refused after the model was built"
}
bad_llmc() { # NAME INI FILE REGEX
    expect_fail "$1" "$4" train $2 --set model.init=llmc:$3
}
# Each edited file came from one that trains.
for f in bare:w bare:w16 bare:f16 bare:dense; do
    "$TESSERA" train ${f%%:*}.ini --set model.init=safetensors:${f#*:}.safetensors > ${f#*:}.txt 2>&1 ||
        { cat ${f#*:}.txt; fail "${f#*:}.safetensors does not train"; }
done
for f in dense:dense dense:dense16 model:raw; do
    "$TESSERA" train ${f%%:*}.ini --set model.init=llmc:${f#*:}.bin > ${f#*:}.txt 2>&1 ||
        { cat ${f#*:}.txt; fail "${f#*:}.bin does not train"; }
done

finite='holds a value that is not finite'
bad nan_f32 "h\.1\.attn\.c_attn\.weight $finite \(nan at element 5 of its \[16,48\]\)"
bad inf_bf16 "h\.0\.mlp\.experts\.2\.c_fc\.bias $finite \(inf at element 3 of its \[24\]\)"
bad inf_f16 "wte\.weight $finite \(-inf at element 70 of its \[32,16\]\)"
bad_llmc nan dense.ini nan.bin "llm\.c checkpoint nan\.bin: h\.1\.ln1\.weight $finite \(nan at element 2 of its 16\)"
bad_llmc inf16 dense.ini inf16.bin "llm\.c checkpoint inf16\.bin: wpe $finite \(-inf at element 7 of its 128\)"
bad_llmc nan_raw model.ini nan_raw.bin "raw weights nan_raw\.bin: h\.0\.ln1\.weight $finite \(inf at element 3 of its 16\)"
bad_llmc vp bare.ini vp.bin 'llm\.c checkpoint vp\.bin: [0-9]+ bytes, but its header.s shape \(maxT=8 V=32 L=3 NH=2 C=16 Vp=2147483647\) takes [0-9]+$'
bad_llmc raw_experts bare.ini experts.bin 'raw weights experts\.bin: [0-9]+ bytes, but its header.s shape \(.* experts=65536 moe_every=2 expert_hidden=24\) takes [0-9]+$'

early experts_65536 '__metadata__ experts = 65536, but the tensors make it 4'
early experts_2p30 '__metadata__ experts = 1073741824, but the tensors make it 4'
early experts_dense '__metadata__ experts = 4, but the tensors make it 0'
early hidden '__metadata__ expert_hidden = 1073741824, but the tensors make it 24 \(h\.0\.mlp\.experts\.0\.c_fc\.weight \[16, 24\]\)'
early top_k '__metadata__ top_k = 1073741824 is more than the 4 experts'
early heads '__metadata__ heads = 1073741824 does not divide d_model = 16'
early moe_every 'h\.1\.mlp\.c_fc\.bias: block h\.1 of the model is a mixture of 4 experts \(__metadata__ moe_every = 1\), the file has a dense MLP there'
early moe_every_2p30 'h\.2\.mlp\.experts\.0\.c_fc\.bias: block h\.2 of the model is a dense MLP \(__metadata__ moe_every = 1073741824\), the file routes it to experts'
early stray_expert 'h\.0\.mlp\.router\.weight has shape \[16,4\], the model.s is \[16,65536\]'

early meta_twice 'header JSON, at byte [0-9]+ of it: a second __metadata__'
early key_twice 'header JSON, at byte [0-9]+ of it: __metadata__ key top_k appears twice'
early field_twice 'header JSON, at byte [0-9]+ of it: wpe\.weight has dtype twice'
early nul_name 'header JSON, at byte [0-9]+ of it: a NUL byte inside a string'
early nul_meta 'header JSON, at byte [0-9]+ of it: a NUL byte inside a string'
early escaped_nul 'header JSON, at byte [0-9]+ of it: a NUL \(\\u0000\) inside a string'
early not_utf8 'header JSON, at byte [0-9]+ of it: a string that is not UTF-8'
early surrogate_utf8 'header JSON, at byte [0-9]+ of it: a string that is not UTF-8'
early after_brace "header JSON, at byte [0-9]+ of it: '\{' after the header's closing brace"
early leading "header JSON, at byte 0 of it: the header does not begin with '\{'"
early big_number 'header JSON, at byte [0-9]+ of it: 99999999999999999999 is more than 2\^63 - 1'
early trailing_data 'data bytes \[[0-9]+, [0-9]+\) after the last tensor are no tensor.s'
early hole 'data bytes \[[0-9]+, [0-9]+\) before ln_f\.bias are no tensor.s'

"$TESSERA" train bare.ini --set model.init=safetensors:escaped.safetensors > escaped.txt 2>&1 ||
    { cat escaped.txt; fail "a header with JSON escapes and whitespace"; }
echo "ok escaped: JSON escapes (\\u0077te\\u002eweight, \\n, a surrogate pair) and whitespace read"
echo PASS
