# Parallel folding: `tessera plan` for a mixture-of-experts GPT on 16 ranks
# with the real plugins (dense tp 2 x cp 2 x dp 2 x pp 2, sequence
# parallelism; experts etp 1 x ep 4 x edp 2 x pp 2) prints every group of
# both meshes exactly as Megatron-LM's two RankGenerators make them
# (tests/cli/rank_groups.py transcribes generate_masked_orthogonal_rank_groups),
# and its dry run of the whole 5-D step (ring attention over cp, the
# all-to-all dispatcher over ep, the pipeline) goes through.
. "$2/tests/cli/multirank.sh"
cat > fold.ini <<'INI'
[model]
layers = 2
d_model = 64
heads = 4
vocab = 256
context = 64
experts = 8
[train]
seq_len = 32
global_batch = 16
micro_batch = 4
[parallel]
plugins = dp, tp, cp, pp, ep
[tp]
size = 2
sequence_parallel = true
[cp]
size = 2
[pp]
size = 2
[ep]
size = 4
INI
"$TESSERA" plan fold.ini --world 16 --json > plan.json 2> plan.err || { cat plan.err; fail "plan"; }
python3 "$SRC/tests/cli/rank_groups.py" 16 2 2 2 4 1 tp-cp-ep-dp-pp plan.json || fail "groups"
"$TESSERA" plan fold.ini --world 16 --groups --layout > plan.txt 2>&1 || fail "plan (text)"
sed -n '/^mesh:/,/^layout plan/p' plan.txt | head -n -1
grep -q "h.0.moe.experts.fc.weight.*local \[2x256x64\].*ep:S(0)" plan.txt ||
    fail "the experts are not cut over ep (2 of 8 per rank)"
python3 - <<'PY' || fail "dry-run traffic"
import json
comm = json.load(open("plan.json"))["comm"]
assert comm.get("ep.all_to_all", {}).get("calls", 0) > 0, comm
assert comm.get("cp.send", {}).get("calls", 0) > 0, comm
print("dry run: ep.all_to_all %(calls)d calls %(bytes)d bytes" % comm["ep.all_to_all"])
PY
echo PASS
