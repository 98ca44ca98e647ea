# `tessera plan --world N --json` gives, for every axis and product of axes of
# the dense and the expert mesh, exactly the rank groups of Megatron-LM's
# RankGenerator (megatron/core/parallel_state.py) for the same sizes and
# order. The expected groups are computed here, in Python, by an independent
# transcription of its generate_masked_orthogonal_rank_groups.
# Usage: plan_groups.sh TESSERA SRC TEST_PLUGIN_DIR
. "$(dirname "$0")/lib.sh"
PLUGDIR=$3
n=0
check() { # WORLD TP CP PP EP ETP ORDER
    cat > plan.ini <<INI
[model]
layers = 4
d_model = 48
heads = 12
vocab = 64
padded_vocab = 384
context = 16
[train]
micro_batch = 1
[parallel]
plugins = dp, meshaxes
plugin_path = $PLUGDIR
order = $7
[meshaxes]
tp = $2
cp = $3
pp = $4
ep = $5
etp = $6
INI
    "$TESSERA" plan plan.ini --world "$1" --json > plan.json 2> plan.err ||
        { cat plan.err; fail "plan failed for world $1"; }
    python3 "$SRC/tests/cli/rank_groups.py" "$@" plan.json || fail "world $1 tp $2 cp $3 pp $4 ep $5 etp $6 order $7"
    n=$((n + 1))
}
check 16 2 2 2 4 1 tp-cp-ep-dp-pp
check 8 2 1 2 2 1 tp-cp-ep-dp-pp
check 12 3 1 1 1 3 tp-cp-ep-dp-pp
check 64 4 2 2 8 1 tp-cp-ep-dp-pp
check 16 2 2 2 4 1 tp-cp-ep-pp-dp
check 24 2 1 3 2 2 tp-pp-dp-cp-ep
# Sizes that do not multiply to the world are an error showing the arithmetic.
sed -i 's/^tp = .*/tp = 3/' plan.ini
if "$TESSERA" plan plan.ini --world 16 > bad.txt 2>&1; then fail "tp 3 on 16 ranks accepted"; fi
grep -q "16" bad.txt && grep -qE "x|\*" bad.txt || { cat bad.txt; fail "unclear size error"; }
echo "PASS: $n meshes match Megatron-LM's rank generator"
