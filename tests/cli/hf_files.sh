# transformers' GPT-2 files read as transformers writes them, or refused. A
# checkpoint transformers itself wrote (tests/cli/hf_gpt2: 6 heads, sharded)
# trains its first step to transformers' loss within 1e-6. Then
# a writer of this test's own turns tessera's export of a 6-head model
# (d_model 48: 4 heads divide it too, so a guessed head count would run)
# into the layouts save_pretrained gives — the `transformer.` prefix, no
# shape keys in the metadata, config.json beside the file, lm_head.weight
# (equal to wte: tied), a directory, a sharded checkpoint with
# model.safetensors.index.json — and each reads to the same first step as
# the file in tessera's own layout (loss and gradient norm bit for bit), that
# loss within 1e-6 of st_reference.py's forward with 6 heads. Refused, in one
# line naming the key, tensor or file, with a non-zero exit: no head count
# anywhere, an untied head, another LayerNorm epsilon, the erf GELU,
# tie_word_embeddings = false, config.json against the tensors or the INI, a
# stray tensor past the blocks, a bad index or shard, a directory of two
# files.
. "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
python3 "$SRC/tests/cli/tokens_file.py" data.bin 33 64 5 || fail "token file" # one batch of 2 x 16
cat > model.ini <<'INI'
[model]
layers = 3
d_model = 48
heads = 6
vocab = 64
context = 16
[data]
source = tokens:data.bin
shuffle = false
[train]
steps = 1
seq_len = 16
global_batch = 2
micro_batch = 2
seed = 11
INI
# The INI a transformers user would write: the shape left to the file.
sed '/^\[model\]/,/^\[data\]/{/^\[data\]/!d}' model.ini > bare.ini
"$TESSERA" export model.ini --format safetensors --out w.safetensors > /dev/null || fail "export"

python3 - <<'PY' || fail "writing the transformers files"
import json, os, struct
from array import array

def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n].decode())
    meta = h.pop("__metadata__")
    data = b[8 + n:]
    return meta, {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
                  for k, v in h.items()}

def write(path, tensors, meta={"format": "pt"}):
    """tensors: [(name, dtype, shape, bytes)] in file order."""
    head, pos, blobs = {"__metadata__": meta}, 0, []
    for name, dtype, shape, blob in tensors:
        head[name] = {"dtype": dtype, "shape": shape, "data_offsets": [pos, pos + len(blob)]}
        pos += len(blob)
        blobs.append(blob)
    text = json.dumps(head).encode()
    text += b" " * (-len(text) % 8)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + b"".join(blobs))

meta, W = read("w.safetensors")
assert meta["heads"] == "6", meta
# Sharper attention than the initialisation's (queries and keys x 16), so
# that the head count shows in the loss; tessera's own layout of it.
for k in [k for k in W if k.endswith("attn.c_attn.weight")]:
    dtype, shape, blob = W[k]
    x = array("f", blob)
    for i in range(len(x)):
        if i % (3 * 48) < 2 * 48:  # [C, 3C]: columns q, k, v
            x[i] *= 16
    W[k] = (dtype, shape, x.tobytes())
write("ours.safetensors", [(k, *W[k]) for k in W], meta)
config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_head": 6, "n_embd": 48,
          "n_layer": 3, "n_positions": 16, "n_ctx": 16, "vocab_size": 64,
          "layer_norm_epsilon": 1e-05, "activation_function": "gelu_new",
          "tie_word_embeddings": True, "n_inner": None, "resid_pdrop": 0.1,
          "task_specific_params": {"text-generation": {"do_sample": True, "max_length": 50}},
          "torch_dtype": "float32", "transformers_version": "5.0.0"}

def hf(prefix="transformer.", lm_head=True, extra=()):
    """GPT2LMHeadModel's state dict: prefixed names, lm_head.weight (tied: wte's bytes)."""
    out = [(prefix + k, *W[k]) for k in W] + list(extra)
    if lm_head:
        out.append(("lm_head.weight", *W["wte.weight"]))
    return out

def save(d, tensors, cfg=config, name="model.safetensors"):
    write(os.path.join(d, name), tensors)
    if cfg is not None:
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)

def changed(**kw):
    c = dict(config)
    c.update(kw)
    return c

def flipped(blob, at):  # one element's sign bit flipped
    b = bytearray(blob)
    b[4 * at + 3] ^= 0x80
    return bytes(b)

# Read right.
save("hf", hf())                                        # save_pretrained's directory
save("plain", hf(prefix="", lm_head=False))             # GPT2Model's names, config.json
write("nometa.safetensors", hf(prefix="", lm_head=False))  # no shape keys, no config.json
# A sharded checkpoint: blocks 0-1 in the first shard, the rest in the second.
first = [t for t in hf() if t[0].startswith(("transformer.h.0.", "transformer.h.1."))]
second = [t for t in hf() if t not in first]
shards = {"model-00001-of-00002.safetensors": first, "model-00002-of-00002.safetensors": second}
def sharded(d, mapping=None, cfg=config):
    os.makedirs(d, exist_ok=True)
    for name, ts in shards.items():
        write(os.path.join(d, name), ts)
    wm = mapping or {t[0]: name for name, ts in shards.items() for t in ts}
    json.dump({"metadata": {"total_size": sum(len(t[3]) for ts in shards.values() for t in ts)},
               "weight_map": wm}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    if cfg is not None:
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
sharded("sharded")

# Refused.
lm = W["wte.weight"]
save("untied", hf(lm_head=False, extra=[("lm_head.weight", lm[0], lm[1], flipped(lm[2], 5 * 48 + 7))]))
save("eps", hf(), changed(layer_norm_epsilon=1e-3))
save("erf", hf(), changed(activation_function="gelu"))
save("untie", hf(), changed(tie_word_embeddings=False))
save("unscaled", hf(), changed(scale_attn_weights=False))
save("bylayer", hf(), changed(scale_attn_by_inverse_layer_idx=True))
save("cross", hf(), changed(add_cross_attention=True))
save("embd", hf(), changed(n_embd=64))
save("layers", hf(), changed(n_layer=2))
ln = W["h.0.ln_1.weight"]
save("stray", hf(extra=[("transformer.h.5.ln_1.weight", *ln)]))
save("stray3", hf(extra=[("transformer.h.3.ln_1.weight", *ln)]), cfg=None)
save("unknown", hf(extra=[("transformer.h.1.attn.c_attn.lora", *ln)]))
save("twice", hf(extra=[("wpe.weight", *W["wpe.weight"])]))
save("two", hf(), name="a.safetensors")
save("two", hf(), name="b.safetensors")
wm = {t[0]: n for n, ts in shards.items() for t in ts}
sharded("noshard", {**wm, "transformer.h.2.ln_1.weight": "model-00003-of-00002.safetensors"})
sharded("wrongshard", {**wm, "transformer.h.0.ln_1.weight": "model-00002-of-00002.safetensors"})
missing = dict(wm)
del missing["transformer.ln_f.bias"]
sharded("unmapped", missing)
sharded("outside", {**wm, "transformer.wpe.weight": "../w.safetensors"})
sharded("badindex")
open("badindex/model.safetensors.index.json", "w").write('{"weight_map": {"wte.weight": ')
save("badconfig", hf(), cfg=None)
open("badconfig/config.json", "w").write('{"model_type": "gpt2", "n_head": 0x6}')
print("transformers layouts written")
PY

run() { # NAME INI INIT [--set ...]: one step from those weights
    local name=$1 ini=$2 init=$3
    shift 3
    "$TESSERA" train $ini --set model.init=safetensors:$init --set train.metrics=$name.jsonl "$@" \
        > $name.txt 2>&1 || { cat $name.txt; fail "$name: train"; }
    grep -q 'heads=6' $name.txt || { cat $name.txt; fail "$name: not 6 heads"; }
}
run ours model.ini ours.safetensors
for case in "hf bare.ini hf" "hf_file bare.ini hf/model.safetensors" "plain bare.ini plain" \
    "sharded bare.ini sharded" "index bare.ini sharded/model.safetensors.index.json" \
    "hf_ini model.ini hf" "nometa_set bare.ini nometa.safetensors --set model.heads=6"; do
    run $case
    name=${case%% *}
    a=$(metric ours.jsonl 1 loss)/$(metric ours.jsonl 1 grad_norm)
    b=$(metric $name.jsonl 1 loss)/$(metric $name.jsonl 1 grad_norm)
    [ "$a" = "$b" ] || fail "$name: step 1 loss/grad norm $b, tessera's layout $a"
    echo "ok $name: step 1 loss/grad norm $b, as tessera's layout"
done
python3 "$SRC/tests/cli/st_reference.py" --weights nometa.safetensors --tokens data.bin --batch 2 \
    --seq 16 --heads 6 > ref6.json || fail "st_reference.py"
python3 "$SRC/tests/cli/st_reference.py" --weights nometa.safetensors --tokens data.bin --batch 2 \
    --seq 16 --heads 4 > ref4.json || fail "st_reference.py"
python3 - "$(metric hf.jsonl 1 loss)" <<'PY' || fail "the reference forward"
import json, sys
ours = float(sys.argv[1])
six, four = (json.load(open(f))["loss"] for f in ("ref6.json", "ref4.json"))
assert abs(ours - six) <= 1e-6 * six, (ours, six)
assert abs(ours - four) > 1e3 * abs(ours - six), (ours, four)  # the head count shows
print("ok reference: step 1 loss %.9g, st_reference.py's with 6 heads %.9g (with 4: %.9g)"
      % (ours, six, four))
PY

# What transformers itself wrote (tests/cli/hf_gpt2/make.py: save_pretrained
# of a 6-head GPT2LMHeadModel, sharded in 4): its first step is transformers'
# loss, read through the directory and through the index.
cp -r "$SRC/tests/cli/hf_gpt2" real || fail "the transformers checkpoint"
python3 - <<'PY' || fail "its tokens"
import json, struct
e = json.load(open("real/expected.json"))
t = e["tokens"]
open("real.bin", "wb").write(struct.pack("<256i", 20240520, 1, len(t), *[0] * 253) +
                             struct.pack("<%dH" % len(t), *t))
PY
sed -e 's/^source = .*/source = tokens:real.bin/' -e 's/^seq_len = .*/seq_len = 8/' bare.ini > real.ini
for init in real real/model.safetensors.index.json; do
    "$TESSERA" train real.ini --set model.init=safetensors:$init --set train.metrics=real.jsonl \
        > real.txt 2>&1 || { cat real.txt; fail "$init: train"; }
    grep -q 'layers=2 d_model=24 heads=6 vocab=64' real.txt || { cat real.txt; fail "$init: shape"; }
    python3 - "$(metric real.jsonl 1 loss)" <<'PY' || fail "$init: transformers' loss"
import json, sys
ours, e = float(sys.argv[1]), json.load(open("real/expected.json"))
assert abs(ours - e["loss"]) <= 1e-6 * e["loss"], (ours, e["loss"])
print("ok transformers %s's checkpoint: step 1 loss %.9g, transformers' %.9g (%.1e)"
      % (e["transformers"], ours, e["loss"], abs(ours - e["loss"]) / e["loss"]))
PY
done

refuse() { # NAME REGEX INIT [ARGS...]: one line naming it, a non-zero exit
    local name=$1 regex=$2 init=$3
    shift 3
    "$TESSERA" train bare.ini --set model.init=safetensors:$init "$@" > $name.out 2>&1 &&
        { cat $name.out; fail "$name: accepted"; }
    [ "$(wc -l < $name.out)" -eq 1 ] || { cat $name.out; fail "$name: not one line"; }
    grep -qE "$regex" $name.out || { cat $name.out; fail "$name: message does not match /$regex/"; }
    echo "ok $name: $(cat $name.out)"
}
refuse noheads 'default \[model\] heads: the safetensors file nometa.safetensors does not say it' \
    nometa.safetensors
refuse heads_ini '\[model\] heads: 4 conflicts with 6 in the safetensors file hf' hf --set model.heads=4
refuse untied 'untied/model.safetensors: lm_head.weight differs from wte.weight \(first at row 5, column 7\).*no tie_embeddings' untied
refuse eps 'eps/config.json: layer_norm_epsilon = 0.001: .* no key' eps
refuse erf 'erf/config.json: activation_function = "gelu": .*tanh GELU.*not the erf' erf
refuse untie 'untie/config.json: tie_word_embeddings = false' untie
refuse unscaled 'unscaled/config.json: scale_attn_weights = false: tessera scales the attention scores by 1/sqrt\(head size\)' unscaled
refuse bylayer 'bylayer/config.json: scale_attn_by_inverse_layer_idx = true: tessera does not scale' bylayer
refuse cross 'cross/config.json: add_cross_attention = true: tessera.s GPT-2 has no cross-attention' cross
refuse embd 'embd/config.json: n_embd = 64, but the tensors make it 48' embd
refuse layers 'transformer.h.2.[a-z_.]+: a tensor of block h.2, past layers/config.json.s n_layer = 2' layers
refuse stray 'stray/model.safetensors: transformer.h.5.ln_1.weight: a tensor of block h.5, past the file.s blocks h.0-h.2' stray
refuse stray3 'no tensor transformer.h.3.ln_1.bias, while block h.3 holds 1 other \(transformer.h.3.ln_1.weight' stray3
refuse unknown 'transformer.h.1.attn.c_attn.lora is no tensor of transformers. GPT-2' unknown
refuse twice 'wpe.weight and transformer.wpe.weight are one tensor named twice' twice
refuse two 'two: the directory holds 2 \*.safetensors files' two
refuse noshard 'noshard/model-00003-of-00002.safetensors: cannot open.*a shard of noshard/model.safetensors.index.json' noshard
refuse wrongshard 'weight_map puts transformer.h.0.ln_1.weight in wrongshard/model-00002-of-00002.safetensors, which has no such tensor' wrongshard
refuse unmapped 'transformer.ln_f.bias is not in unmapped/model.safetensors.index.json.s weight_map' unmapped
refuse outside 'weight_map puts transformer.wpe.weight in "../w.safetensors", not a file beside the index' outside
refuse badindex 'badindex/model.safetensors.index.json: at byte [0-9]+: a string expected' badindex
refuse badconfig 'badconfig/config.json: at byte 34: .,. or .\}. expected' badconfig
echo PASS
