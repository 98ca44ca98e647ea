# Activation memory per rank at a long sequence (2048 tokens, width 64, 4
# heads, 2 layers, 2 sequences), from the accounted allocator's peak over
# two steps, for cp = 1, 2, 4 with each algorithm:
#  - the run's peak equals `tessera plan`'s (the dry run of the same step);
#  - every activation is proportional to this rank's rows (T/cp): the peak
#    at cp = 2 is exactly twice the peak at cp = 4;
#  - cp = 1 is the core's own attention, which saves the probabilities
#    (B, NH, T, T) of every layer and needs a scratch of one layer's in
#    backward; with those taken away and the block kernels' log-sum-exp
#    (B, NH, T) of every layer put in, it is exactly twice cp = 2's peak.
# The ring and all_gather keep the same activations (their K/V traffic is
# communication memory); all_to_all also keeps its heads' q, k, v and output
# of whole sequences ((B, T, 4C/cp): the same rows-per-rank scaling).
. "$2/tests/cli/multirank.sh"
write_config
long=(--set train.seq_len=2048 --set model.context=2048 --set train.global_batch=2
    --set train.micro_batch=2 --set train.steps=2)
for algo in ring all_gather all_to_all; do
    for n in 1 2 4; do
        [ $n = 1 ] && [ $algo != ring ] && continue
        name=m_${n}_$algo
        sets=("${long[@]}" --set parallel.plugins=cp --set cp.size=$n --set cp.algorithm=$algo)
        run_mpi "$n" "$TESSERA" train model.ini "${sets[@]}" --set train.metrics=$name.jsonl \
            > $name.txt 2>&1 || { cat $name.txt; fail "cp $n $algo: run"; }
        "$TESSERA" plan model.ini "${sets[@]}" --world "$n" --json > $name.plan.json 2> $name.err ||
            { cat $name.err; fail "cp $n $algo: plan"; }
    done
done
python3 - <<'PY' || fail "activation memory"
import json
B, T, NH, L = 2, 2048, 4, 2
def peak(n, algo):
    name = "m_%d_%s" % (n, algo)
    run = json.loads(open(name + ".jsonl").readlines()[-1])["mem"]["activations"]["peak"]
    plan = json.load(open(name + ".plan.json"))["memory"]["activations"]
    assert run == plan, (name, "run", run, "plan", plan)
    return run
one = peak(1, "ring")
probs, scratch, lse = 4 * L * B * NH * T * T, 4 * B * NH * T * T, 4 * L * B * NH * T
for algo in ("ring", "all_gather", "all_to_all"):
    two, four = peak(2, algo), peak(4, algo)
    assert two == 2 * four, (algo, "cp 2", two, "cp 4", four)
    line = "%-10s cp=1 %d (the core's attention: probabilities %d, scratch %d), cp=2 %d, cp=4 %d bytes" % (
        algo, one, probs, scratch, two, four)
    if algo != "all_to_all":
        assert one - probs - scratch + lse == 2 * two, (algo, one - probs - scratch + lse, 2 * two)
    print(line)
PY
echo PASS
