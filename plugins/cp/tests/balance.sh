# Load balance: the attention work of every cp rank, counted by the plugin as
# score elements computed (per step, summed over layers, sequences and
# heads; the ranks' counts gathered into scores_min / scores_max). With T
# tokens, n ranks, L rows per chunk, a causal block of L x L on the diagonal
# computes L(L+1)/2 scores and one below it L^2:
#   load_balance = true   2n chunks of L = T/2n; rank i holds chunks i and
#                         2n-1-i: (2n-1) L^2 + L(L+1) each, equal on every rank
#   load_balance = false  n parts of L = T/n; rank i: i L^2 + L(L+1)/2, rank
#                         n-1 the most: imbalance max/mean = that / (T(T+1)/2n)
#   all_to_all            every rank attends whole sequences for NH/n heads
. "$2/tests/cli/multirank.sh"
write_config
for case in "ring true" "ring false" "all_gather true" "all_gather false" "all_to_all true"; do
    set -- $case
    algo=$1 bal=$2 name=b_$1_$2
    run_mpi 4 "$TESSERA" train model.ini --set parallel.plugins=cp --set cp.size=4 \
        --set cp.algorithm=$algo --set cp.load_balance=$bal --set train.steps=2 \
        --set train.metrics=$name.jsonl > $name.txt 2>&1 || { cat $name.txt; fail "$case: run"; }
    python3 - "$algo" "$bal" "$name" <<'PY' || fail "$case: balance"
import json, sys
algo, bal, name = sys.argv[1], sys.argv[2] == "true", sys.argv[3]
T, n, layers, B, NH = 32, 4, 2, 16, 4
per = layers * B * NH  # score elements are counted per sequence and head
if algo == "all_to_all":
    want = [T * (T + 1) // 2 * NH // n * layers * B] * n
elif bal:
    L = T // (2 * n)
    want = [((2 * n - 1) * L * L + L * (L + 1)) * per] * n
else:
    L = T // n
    want = [(i * L * L + L * (L + 1) // 2) * per for i in range(n)]
total = T * (T + 1) // 2 * per
assert sum(want) == total, (want, total)
for line in open(name + ".jsonl"):
    c = json.loads(line)["plugins"]["cp"]
    got = (c["scores_min"], c["scores_max"])
    assert got == (min(want), max(want)), ("run", got, "formula", (min(want), max(want)))
    imb = max(want) / (total / n)
    assert abs(c["imbalance"] - imb) < 1e-6, (c["imbalance"], imb)  # metrics print 9 digits
print("%-10s load_balance=%-5s scores per rank min %d max %d, imbalance %.3f; blocks %d, skipped %d"
      % (algo, bal, got[0], got[1], c["imbalance"], c["blocks"], c["blocks_skipped"]))
PY
done
echo PASS
