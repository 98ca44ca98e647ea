# Sizes tp cannot cut are refused before anything runs, with a message that
# says which: heads, padded_vocab, and seq_len under sequence parallelism
# (checked by `tessera plan`, which the run's start-up shares, and by a run).
. "$2/tests/cli/multirank.sh"
write_config
expect() { # NAME REGEX args...
    local name=$1 regex=$2
    shift 2
    "$TESSERA" "$@" > $name.txt 2>&1 && { cat $name.txt; fail "$name: accepted"; }
    grep -qE "$regex" $name.txt || { cat $name.txt; fail "$name: message does not match /$regex/"; }
    echo "ok $name: $(head -n 1 $name.txt)"
}
tp4=(--set parallel.plugins=tp --set tp.size=4 --world 4)
expect heads 'heads = 6 is not divisible by tp = 4' plan model.ini "${tp4[@]}" \
    --set model.heads=6 --set model.d_model=48
expect padded_vocab 'padded_vocab.*(250|not divisible)' plan model.ini "${tp4[@]}" \
    --set model.vocab=250 --set model.padded_vocab=250
expect seq_len 'seq_len = 30 is not divisible by tp = 4' plan model.ini "${tp4[@]}" \
    --set tp.sequence_parallel=true --set train.seq_len=30
run_mpi 2 "$TESSERA" train model.ini --set parallel.plugins=tp --set tp.size=2 \
    --set model.heads=3 --set model.d_model=48 > run.txt 2>&1 && { cat run.txt; fail "run accepted heads 3"; }
grep -q "heads = 3 is not divisible by tp = 2" run.txt || { cat run.txt; fail "unclear run message"; }
echo "ok run: $(grep -m1 'heads = 3' run.txt)"
echo PASS
