# tessera sample and [train] sample_every: a fixed seed gives the same text
# twice; temperature 0 picks the argmax (the same text as top-k 1, drawn by
# the other path); a checkpoint laid out for tp 2 (tessera reshard: the same
# weights) and one trained on tp 2 sample the same greedy text on one rank as
# the unsharded one; sample_every prints during a run and is refused where
# rank 0 holds part of the model; a 50,257-token weights file read by an INI
# without [model] vocab prints ids (the model's vocabulary decides, not the
# INI's default); bad input, every number whole and in range included, is
# refused with a message naming the flag and its value.
# Usage: sample.sh TESSERA SRC
. "$(dirname "$0")/multirank.sh"
write_config
cat >> model.ini <<'INI'
steps = 10
INI
sed -i 's/^steps = 20$//' model.ini
"$TESSERA" train model.ini --set train.checkpoint_dir=one > one.txt 2>&1 || { cat one.txt; fail "one-rank run failed"; }
run_mpi 2 "$TESSERA" train model.ini --set parallel.plugins=tp --set tp.size=2 \
    --set train.checkpoint_dir=tp > tp.txt 2>&1 || { cat tp.txt; fail "tp2 run failed"; }
run_mpi 2 "$TESSERA" reshard model.ini --set parallel.plugins=tp --set tp.size=2 \
    --checkpoint one/ckpt-00000010 --out one_tp2 > re.txt 2>&1 || { cat re.txt; fail "reshard failed"; }
s() { # OUT ARGS...: sample into OUT (stdout only)
    local out=$1
    shift
    "$TESSERA" sample model.ini "$@" > $out 2> $out.err || { cat $out.err; fail "sample $*"; }
}
s a1 --checkpoint one/ckpt-00000010 --prompt "hello" --tokens 40 --seed 5
s a2 --checkpoint one/ckpt-00000010 --prompt "hello" --tokens 40 --seed 5
s a3 --checkpoint one/ckpt-00000010 --prompt "hello" --tokens 40 --seed 6
cmp -s a1 a2 || fail "the same seed gave different text"
cmp -s a1 a3 && fail "seeds 5 and 6 gave the same 40 tokens"
[ "$(head -c 5 a1)" = hello ] || fail "the output does not start with the prompt"
[ "$(wc -c < a1)" = 46 ] || fail "not 5 + 40 bytes and a newline: $(wc -c < a1)"
echo "ok: seed 5 twice the same, seed 6 another text"
s g0 --checkpoint one/ckpt-00000010 --prompt "hello" --tokens 40 --temperature 0
s g1 --checkpoint one/ckpt-00000010 --prompt "hello" --tokens 40 --temperature 1 --top-k 1 --seed 9
cmp -s g0 g1 || fail "temperature 0 and top-k 1 differ"
echo "ok: temperature 0 = top-k 1 (the argmax)"
s r0 --checkpoint one_tp2 --prompt "hello" --tokens 40 --temperature 0
cmp -s g0 r0 || fail "the tp2 layout of the same weights samples other text"
grep -q "from one_tp2" r0.err || fail "did not read the resharded checkpoint"
s t0 --checkpoint tp/ckpt-00000010 --prompt "hello" --tokens 40 --temperature 0
cmp -s g0 t0 || fail "the checkpoint trained on tp2 samples other greedy text than one rank's"
echo "ok: a tp2 checkpoint (resharded, and trained on tp2) samples the one-rank text: $(od -An -c g0 | head -n 1)"

"$TESSERA" train model.ini --set train.sample_every=5 --set train.sample_tokens=16 > se.txt 2>&1 ||
    { cat se.txt; fail "sample_every run failed"; }
[ "$(grep -c '^sample at step \(5\|10\): ' se.txt)" = 2 ] || { cat se.txt; fail "no samples at steps 5 and 10"; }
bad() { # NAME REGEX NP ARGS...
    local name=$1 regex=$2 np=$3
    shift 3
    if [ $np = 1 ]; then "$TESSERA" "$@" > $name.txt 2>&1; else run_mpi $np "$TESSERA" "$@" > $name.txt 2>&1; fi
    local rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 128 ] || { cat $name.txt; fail "$name: exit status $rc"; }
    grep -qE -e "$regex" $name.txt || { cat $name.txt; fail "$name: no message matching /$regex/"; }
    echo "ok $name: $(grep -m1 -E -e "$regex" $name.txt)"
}
# The vocabulary is the model's: a weights file of 50,257 tokens read by an
# INI that does not set [model] vocab (its default is 256) prints ids, not
# each id's low byte; with no prompt the first token is a newline (10).
cat > big.ini <<'INI'
[model]
layers = 1
d_model = 32
heads = 2
vocab = 50257
context = 32
[train]
seq_len = 16
micro_batch = 2
INI
"$TESSERA" export big.ini --out big.bin > big.txt 2>&1 || { cat big.txt; fail "export of a 50257-token model failed"; }
cat > from_file.ini <<'INI'
[model]
init = llmc:big.bin
[train]
seq_len = 16
micro_batch = 2
INI
for run in "ids --prompt-tokens 464,50256 --tokens 12" "ids_default --tokens 4"; do
    set -- $run
    out=$1
    shift
    "$TESSERA" sample from_file.ini "$@" --seed 3 > $out 2> $out.err || { cat $out.err; fail "sample $run"; }
done
python3 - ids ids_default <<'PY2' || { cat ids ids.err; fail "a 50257-token file did not print ids"; }
import sys
for path, head, n in ((sys.argv[1], [464, 50256], 14), (sys.argv[2], [10], 5)):
    text = open(path, "rb").read()
    words = text.decode("ascii").split()
    ids = [int(w) for w in words]
    assert len(ids) == n and ids[:len(head)] == head, (path, ids)
    assert all(0 <= i < 50257 for i in ids), ids
    assert max(ids) >= 256, ids  # ids past a byte: printed whole
print("ok: 50257-token file prints ids:", " ".join(words))
PY2
grep -q "vocabulary 50257, printed as ids" ids.err || { cat ids.err; fail "the summary line does not say ids"; }
bad prompt_outside_file_vocab "--prompt-tokens '464 50257': prompt token 50257 \(position 1\) is outside the vocabulary \[0, 50257\)" \
    1 sample from_file.ini --prompt-tokens "464 50257"

bad sample_every_cut 'sample_every = 5 needs the whole model on rank 0' 2 train model.ini \
    --set parallel.plugins=tp --set tp.size=2 --set train.sample_every=5
bad prompt_outside_vocab "--prompt 'z': prompt token 122 \(position 0\) is outside the vocabulary \[0, 100\)" 1 \
    sample model.ini --set model.vocab=100 --prompt "z"
bad temperature_negative "--temperature '-1': a number in" 1 sample model.ini --temperature -1
bad two_prompts '--prompt and --prompt-tokens' 1 sample model.ini --prompt a --prompt-tokens 1
bad prompt_ids_words "--prompt-tokens 'a b'" 1 sample model.ini --prompt-tokens "a b"
# Every number whole and in range before it is cast (was: 4294967361 read as
# token 65, 1.5 and 2.7 truncated, an empty --temperature read as 0).
bad prompt_ids_past_int "--prompt-tokens '4294967361': token ids .*'4294967361' at position 0" 1 \
    sample model.ini --prompt-tokens 4294967361
bad prompt_ids_negative "--prompt-tokens '5 -1':.*'-1' at position 1" 1 sample model.ini --prompt-tokens "5 -1"
bad prompt_ids_empty "--prompt-tokens '': no token id" 1 sample model.ini --prompt-tokens ""
bad top_k_fraction "--top-k '1.5': a whole number" 1 sample model.ini --top-k 1.5
bad tokens_fraction "--tokens '2.7': a whole number" 1 sample model.ini --tokens 2.7
bad seed_fraction "--seed '1.5': a whole number" 1 sample model.ini --seed 1.5
bad seed_negative "--seed '-1': a whole number" 1 sample model.ini --seed -1
bad tokens_negative "--tokens '-3': a whole number" 1 sample model.ini --tokens -3
bad tokens_empty "--tokens '': a whole number" 1 sample model.ini --tokens ""
bad top_k_past_int "--top-k '4294967297': a whole number" 1 sample model.ini --top-k 4294967297
bad temperature_nan "--temperature 'nan': a number in" 1 sample model.ini --temperature nan
bad temperature_empty "--temperature '': a number in" 1 sample model.ini --temperature ""
bad tokenizer_missing 'tokenizer nowhere.bin' 1 sample model.ini --set data.tokenizer=nowhere.bin
echo "PASS"
