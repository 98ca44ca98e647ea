# safetensors round trip of a mixture of experts trained with ep: 5 steps
# on 4 ranks (dense side dp 4, experts ep 2 x edp 2, one micro-batch a
# rank), checkpointed, exported to safetensors by the same 4 ranks (every
# expert gathered) and by one rank reading the checkpoint (resharded): the
# same bytes. Read back on one rank with `init = safetensors:`, the next
# step's loss, aux loss, z-loss and gradient norm equal, bit for bit (f32,
# the metrics' 9 digits), those of the checkpoint resumed on one rank (every
# step reads the same batch: a token file of one batch), and exporting the
# re-read model gives a byte-identical file; read on the 4 ranks, the
# step is the one rank's within 1e-5. The 4-rank run's first step
# equals st_reference.py's from the exported initial weights (1e-5). Then
# the checkpoints of expert tensor parallelism (tp 2 + SP, ep 2, etp 2),
# of a pipeline (pp 2, ep 2) and of folding (tp 2 + SP, ep 4 on 8 ranks)
# export in their topology and on one rank to the same bytes, each tensor
# within 1e-4 of one rank trained the same steps (an expert written in
# another's place would be off by the weights' size, 2e-2).
. "$2/tests/cli/multirank.sh"
python3 "$SRC/tests/cli/tokens_file.py" data.bin 129 64 5 || fail "token file" # one batch of 8 x 16
cat > model.ini <<'INI'
[model]
layers = 4
d_model = 32
heads = 2
vocab = 64
context = 16
experts = 4
top_k = 2
moe_every = 2
aux_loss_coeff = 0.01
z_loss_coeff = 0.001
[data]
source = tokens:data.bin
[train]
steps = 5
seq_len = 16
global_batch = 8
micro_batch = 8
lr = 3e-3
INI
ep=(--set parallel.plugins=dp,ep --set ep.size=2 --set train.micro_batch=2)
"$TESSERA" export model.ini --format safetensors --out init.safetensors > /dev/null || fail "initial export"
run_mpi 4 "$TESSERA" train model.ini "${ep[@]}" --set train.checkpoint_dir=ck --set train.checkpoint_every=5 \
    --set train.metrics=ep.jsonl > ep.txt 2>&1 || { cat ep.txt; fail "ep 2 x dp 2"; }
run_mpi 4 "$TESSERA" export model.ini "${ep[@]}" --set train.checkpoint_dir=ck --format safetensors \
    --out ep.safetensors > export4.txt 2>&1 || { cat export4.txt; fail "export on 4 ranks"; }
"$TESSERA" export model.ini --checkpoint ck/ckpt-00000005 --format safetensors --out one.safetensors \
    > /dev/null || fail "export on one rank"
cmp ep.safetensors one.safetensors || fail "4 ranks and one rank export different files"
cp -r ck resume
"$TESSERA" train model.ini --set train.steps=6 --set train.resume=auto --set train.checkpoint_dir=resume \
    --set train.metrics=resumed.jsonl > resumed.txt 2>&1 || { cat resumed.txt; fail "resume on one rank"; }
grep -q "resumed from resume/ckpt-00000005 at step 5" resumed.txt || { cat resumed.txt; fail "did not resume"; }
"$TESSERA" train model.ini --set model.init=safetensors:ep.safetensors --set train.steps=1 \
    --set train.metrics=reread.jsonl > reread.txt 2>&1 || { cat reread.txt; fail "init = safetensors:"; }
"$TESSERA" export model.ini --set model.init=safetensors:ep.safetensors --format safetensors \
    --out again.safetensors > /dev/null || fail "export of the re-read model"
cmp ep.safetensors again.safetensors || fail "the re-read model exports a different file"
# Read on the 4 ranks too (each rank takes its experts of the whole file).
run_mpi 4 "$TESSERA" train model.ini "${ep[@]}" --set model.init=safetensors:ep.safetensors --set train.steps=1 \
    --set train.metrics=reread4.jsonl > reread4.txt 2>&1 || { cat reread4.txt; fail "init = safetensors: on 4 ranks"; }
python3 "$SRC/tests/cli/st_reference.py" --weights init.safetensors --tokens data.bin --batch 8 --seq 16 \
    --aux-coeff 0.01 --z-coeff 0.001 > ref.json || fail "st_reference.py"
python3 - <<'PY' || fail "round trip"
import json, re
def line(path, step):
    for l in open(path):
        if json.loads(l)["step"] == step:
            return l
    raise SystemExit("%s has no step %d" % (path, step))
def fields(l):  # the numbers as printed (9 significant digits: an f32 exactly)
    return {k: re.search('"%s":([^,}]*)' % k, l).group(1) for k in ("loss", "grad_norm", "aux_loss", "z_loss")}
a, b = fields(line("resumed.jsonl", 6)), fields(line("reread.jsonl", 1))
assert a == b, (a, b)
print("step 6 resumed on one rank  %s" % a)
print("step 1 from the safetensors %s" % b)
# 4 ranks sum the same terms in another order: 1e-5, as every ep equivalence test.
c = json.loads(line("reread4.jsonl", 1))
for k, x, y in (("loss", float(b["loss"]), c["loss"]), ("aux_loss", float(b["aux_loss"]), c["moe"]["aux_loss"])):
    assert abs(x - y) / abs(x) < 1e-5, (k, x, y)
print("step 1 from the safetensors on ep 2 x dp 2: loss %.9g, aux %.9g" % (c["loss"], c["moe"]["aux_loss"]))
ref, first = json.load(open("ref.json")), json.loads(line("ep.jsonl", 1))
for k, v in (("loss", first["loss"]), ("aux_loss", first["moe"]["aux_loss"]), ("z_loss", first["moe"]["z_loss"])):
    rel = abs(ref[k] - v) / abs(ref[k])
    assert rel < 1e-5, (k, ref[k], v, rel)
    print("ep 2 x dp 2 step 1 %-8s %.9g, reference %.9g (%.1e)" % (k, v, ref[k], rel))
PY
echo "ep 2 x dp 2: 4-rank and one-rank exports equal; re-read export equal"

# Other topologies, 2 steps each, against one rank's 2 steps.
"$TESSERA" train model.ini --set train.steps=2 --set train.checkpoint_dir=ck1 --set train.checkpoint_every=2 \
    > one.txt 2>&1 || { cat one.txt; fail "one rank"; }
"$TESSERA" export model.ini --set train.checkpoint_dir=ck1 --format safetensors --out ref.safetensors \
    > /dev/null || fail "one rank's export"
topology() { # NAME NP sets...
    local name=$1 np=$2
    shift 2
    run_mpi $np "$TESSERA" train model.ini "$@" --set train.steps=2 --set train.checkpoint_dir=ck_$name \
        --set train.checkpoint_every=2 > $name.txt 2>&1 || { cat $name.txt; fail "$name: train"; }
    run_mpi $np "$TESSERA" export model.ini "$@" --set train.checkpoint_dir=ck_$name --format safetensors \
        --out $name.safetensors > $name.export.txt 2>&1 || { cat $name.export.txt; fail "$name: export"; }
    "$TESSERA" export model.ini --checkpoint ck_$name/ckpt-00000002 --format safetensors \
        --out $name.one.safetensors > /dev/null || fail "$name: export on one rank"
    cmp $name.safetensors $name.one.safetensors || fail "$name: $np ranks and one rank export different files"
    python3 - $name.safetensors <<'PY' || fail "$name: weights"
import json, struct, sys
from array import array
def read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    h.pop("__metadata__")
    return {k: array("f", b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}
ref, got = read("ref.safetensors"), read(sys.argv[1])
assert ref.keys() == got.keys()
worst = max((max(abs(x - y) for x, y in zip(ref[k], got[k])), k) for k in ref)
assert worst[0] < 1e-4, worst
print("%s: %d tensors, largest difference from one rank %.1e (%s)" % (sys.argv[1], len(ref), *worst))
PY
}
topology etp 4 --set parallel.plugins=dp,tp,ep --set tp.size=2 --set tp.sequence_parallel=true --set ep.size=2 \
    --set ep.tensor_size=2 --set train.micro_batch=4
topology pp 4 --set parallel.plugins=dp,pp,ep --set pp.size=2 --set ep.size=2 --set train.micro_batch=4
topology folding 8 --set parallel.plugins=dp,tp,ep --set tp.size=2 --set tp.sequence_parallel=true --set ep.size=4 \
    --set train.micro_batch=2
echo PASS
