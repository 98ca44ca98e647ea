# Bad input: each malformed configuration, data file or checkpoint makes
# `tessera train` exit non-zero (not by a signal) with a message that names
# the problem and, where it has one, the file, line and key.
. "$(dirname "$0")/lib.sh"
cases=0

# expect NAME REGEX [tessera args...]: the run fails cleanly and says REGEX.
expect() {
    local name=$1 regex=$2
    shift 2
    # Bounded: a hang is killed (status 137) and fails as a signal would.
    timeout -s KILL 60 "$TESSERA" "$@" > "$name.out" 2>&1
    local rc=$?
    cases=$((cases + 1))
    [ "$rc" -ne 0 ] || { cat "$name.out"; fail "$name: exit status 0"; }
    [ "$rc" -lt 128 ] || { cat "$name.out"; fail "$name: killed by a signal (status $rc)"; }
    grep -qE "$regex" "$name.out" || { cat "$name.out"; fail "$name: message does not match /$regex/"; }
    grep -qiE "sanitizer|segmentation|core dumped" "$name.out" && fail "$name: crashed"
    echo "ok $name: $(head -c 200 "$name.out" | head -n 1)"
}

base() { # a valid tiny config, with one line replaced or added by the caller
    cat <<'INI'
[model]
layers = 1
d_model = 16
heads = 2
vocab = 256
context = 16
[train]
steps = 2
micro_batch = 2
INI
}

base | sed 's/^\[train\]/[trian]/' > unknown_section.ini
expect unknown_section 'unknown_section.ini:7.*unknown section.*trian' train unknown_section.ini

base | sed 's/^layers = 1/layer = 1/' > unknown_key.ini
expect unknown_key "unknown_key.ini:2.*unknown key 'layer'" train unknown_key.ini

base | sed 's/^steps = 2/steps = ten/' > bad_number.ini
expect bad_number 'bad_number.ini:8.*steps.*not an integer' train bad_number.ini

base | sed 's/^micro_batch = 2/micro_batch = -4/' > negative.ini
expect negative_size 'negative.ini:9.*micro_batch.*out of range' train negative.ini

base | sed 's/^heads = 2/heads = 3/' > heads.ini
expect heads_divide 'heads.ini:4.*\[model\] heads.*does not divide d_model' train heads.ini

base > nodata.ini
printf '[data]\nsource = tokens:missing.bin\n' >> nodata.ini
expect missing_data 'nodata.ini:11.*\[data\] source.*missing.bin' train nodata.ini

# An llm.c token file whose token 5 is 300, beyond vocab 256.
python3 - <<'PY'
import struct
toks = [1, 2, 3, 4, 5, 300] + [7] * 100
with open("bad_tokens.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(toks), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(toks), *toks))
PY
base > badtok.ini
printf '[data]\nsource = tokens:bad_tokens.bin\n' >> badtok.ini
expect token_out_of_range 'bad_tokens.bin.*300' train badtok.ini

base | sed 's/^\[train\]/[train]\nseq_len = 32/' > seqlen.ini
expect seq_len_too_long 'seqlen.ini:8.*seq_len.*context' train seqlen.ini

base | sed 's/^micro_batch = 2/micro_batch = 2\nglobal_batch = 3/' > gb.ini
expect global_batch_multiple 'gb.ini:10.*global_batch.*multiple of micro_batch' train gb.ini

printf '[model]\nlayers = 1\nd_model = 16\n  = 3\n' > syntax.ini
expect syntax_error 'syntax.ini:4' train syntax.ini

expect missing_config 'nowhere.ini' train nowhere.ini
expect bad_set 'no_dot|section\.key' train unknown_key.ini --set no_dot
expect unknown_plugin 'plugins' train heads.ini --set model.heads=2 --set parallel.plugins=nosuch

# Checkpoints: a good one, then a shard file truncated, a shard corrupted,
# the metadata corrupted or missing, another model's shape; a directory
# without its completion marker is not a checkpoint.
base > ck.ini
printf 'checkpoint_dir = ck\nresume = auto\n' >> ck.ini
"$TESSERA" train ck.ini > ck.out 2>&1 || { cat ck.out; fail "could not write a checkpoint"; }
good=ck/ckpt-00000002
[ -f "$good/COMPLETE" ] || fail "no checkpoint written"
cp -r "$good" good.ckpt
size=$(stat -c %s good.ckpt/rank-00000.bin)
head -c $((size - 100)) good.ckpt/rank-00000.bin > "$good/rank-00000.bin"
expect truncated_checkpoint 'ckpt-00000002: shard file .*rank-00000.bin is [0-9]+ bytes, the metadata says [0-9]+ \(truncated' \
    train ck.ini --set train.steps=4
cp good.ckpt/rank-00000.bin "$good/"
printf '\x55' | dd of="$good/rank-00000.bin" bs=1 seek=$((size - 7)) conv=notrunc 2>/dev/null
expect corrupt_checkpoint 'ckpt-00000002: v of .* in rank-00000.bin: checksum mismatch' train ck.ini --set train.steps=4
cp good.ckpt/rank-00000.bin "$good/"
sed -i 's/^step 2$/step 3/' "$good/metadata"
expect corrupt_metadata 'ckpt-00000002: metadata checksum mismatch' train ck.ini --set train.steps=4
rm "$good/metadata"
expect missing_metadata 'ckpt-00000002/metadata' train ck.ini --set train.steps=4
cp good.ckpt/metadata "$good/"
expect checkpoint_shape 'ckpt-00000002: model shape .* does not match' train ck.ini --set train.steps=4 --set model.d_model=32
rm "$good/COMPLETE"
expect incomplete_checkpoint 'ckpt-00000002: not a complete checkpoint directory' \
    reshard ck.ini --checkpoint "$good" --out re
cp good.ckpt/COMPLETE "$good/"
expect reshard_onto_existing 'exists: a checkpoint is written to a new path only' \
    reshard ck.ini --checkpoint "$good" --out good.ckpt
expect inspect_not_a_checkpoint 'not a checkpoint directory \(no metadata' inspect ck
mkdir -p stray/ckpt-00000002 && touch stray/ckpt-00000002/mine
expect stray_directory 'stray/ckpt-00000002: exists and is not a checkpoint: it is left alone' \
    train ck.ini --set train.checkpoint_dir=stray --set train.resume=no
[ -f stray/ckpt-00000002/mine ] && [ -z "$(ls stray | grep tmp)" ] || fail "the stray directory was touched"

printf 'not an llm.c file at all, but long enough to hold its header...%.0s' $(seq 1 40) > fake.bin
expect llmc_wrong_magic 'fake.bin.*wrong magic' train heads.ini --set model.heads=2 --set model.init=llmc:fake.bin

# Sizes: parsed as 64 bits and checked against what stores them, never
# wrapped; absurd ones refused before any work that grows with them.
expect d_model_wraps 'd_model = 4294967360.*out of range \[1, 2147483647\]' train heads.ini \
    --set model.heads=2 --set model.d_model=4294967360
expect layers_absurd 'layers = 1000000000.*out of range \[1, 1024\]' train heads.ini \
    --set model.heads=2 --set model.layers=1000000000
expect rows_overflow 'micro_batch x seq_len.*exceeds 2147483647' train heads.ini \
    --set model.heads=2 --set train.micro_batch=2000000 --set model.context=4096 \
    --set train.seq_len=4096
expect micro_batches_absurd 'global_batch = 2147483647 makes 2147483647 micro-batches' train \
    heads.ini --set model.heads=2 --set train.global_batch=2147483647 --set train.micro_batch=1
expect steps_overflow_cursor 'steps = 9200000000000000000 x global_batch = 2 sequences overflow' \
    train heads.ini --set model.heads=2 --set train.steps=9200000000000000000
expect params_beyond_memory "would exceed this machine's memory" train heads.ini \
    --set model.heads=1 --set model.d_model=1000000
# An llm.c header with an absurd layer count (a corrupt file) is blamed on
# the file, at once.
python3 - <<'PY'
import struct
with open("huge_layers.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240326, 3, 64, 256, 1000000000, 4, 64, 256, *([0] * 248)))
    f.write(b"\0" * 4096)
PY
expect llmc_absurd_layers 'huge_layers.bin: header .*L=1000000000.*exceeds 1024' train heads.ini \
    --set model.heads=2 --set model.init=llmc:huge_layers.bin
python3 - <<'PY'
import struct
with open("bad_heads.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240326, 3, 64, 256, 2, 5, 64, 256, *([0] * 248)))
PY
expect llmc_heads_blamed_on_file '\[model\] init: llm.c checkpoint bad_heads.bin: .*NH \(heads\) does not divide' \
    train heads.ini --set model.heads=2 --set model.init=llmc:bad_heads.bin

# Inputs must be regular files: a FIFO would block forever.
mkfifo fifo
expect fifo_tokens '\[data\] source: data file fifo: is a FIFO' train \
    heads.ini --set model.heads=2 --set data.source=tokens:fifo
expect fifo_text '\[data\] source: data file fifo: is a FIFO' train \
    heads.ini --set model.heads=2 --set data.source=text:fifo
expect fifo_config 'config file fifo: is a FIFO' train fifo
expect dir_tokens 'data file \.: is a directory' train heads.ini --set model.heads=2 \
    --set data.source=tokens:.
expect fifo_llmc 'llm.c checkpoint fifo: is a FIFO' train heads.ini \
    --set model.heads=2 --set model.init=llmc:fifo

# resume = auto needs a directory to resume from.
expect resume_without_dir '\[train\] resume: resume = auto needs \[train\] checkpoint_dir' \
    train heads.ini --set model.heads=2 --set train.resume=auto

# Layout errors name the keys behind them.
expect mesh_names_keys 'do not divide the world of 4 ranks.*tp 3 \(plugin tp, --set \[tp\] size\)' \
    plan heads.ini --set model.heads=2 --world 4 --set parallel.plugins=dp,tp --set tp.size=3
expect order_names_key 'unknown axis "xx".*--set \[parallel\] order = tp-dp-xx' plan heads.ini \
    --set model.heads=2 --world 2 --set parallel.plugins=dp --set parallel.order=tp-dp-xx
expect tp_heads_names_key 'heads = 2 is not divisible by tp = 4.*--set \[model\] heads' plan \
    heads.ini --set model.heads=2 --world 4 --set parallel.plugins=tp --set tp.size=4

echo "PASS: $cases malformed inputs rejected cleanly"
