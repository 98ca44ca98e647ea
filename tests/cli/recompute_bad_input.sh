# Bad activation-recomputation input is refused by `tessera plan` and at
# start-up with one line naming the key and a non-zero exit: an unknown mode
# or method, recompute_layers negative or above the blocks of a model chunk
# (one rank, and pp 2 where a chunk holds one block), and recomputation with
# a module that cannot recompute: blocks whose attention over a cut
# sequence comes from a provider without release (the test plugin oldattn,
# built before that slot existed).
# Usage: recompute_bad_input.sh TESSERA SRC TEST_PLUGIN_DIR
. "$2/tests/cli/multirank.sh"
PLUGINS=$1
write_config
expect mode '\[train\] recompute = "partial": expected one of none, selective, full' 1 \
    train model.ini --set train.recompute=partial
expect mode_plan '\[train\] recompute = "partial": expected one of none, selective, full' 1 \
    plan model.ini --world 1 --set train.recompute=partial
expect method '\[train\] recompute_method = "random": expected one of uniform, block' 1 \
    train model.ini --set train.recompute=full --set train.recompute_method=random
expect negative '\[train\] recompute_layers = -1: out of range' 1 \
    train model.ini --set train.recompute=full --set train.recompute_layers=-1
expect too_many '\[train\] recompute_layers: 3 blocks \(recompute_method = uniform\), but the model has 2' 1 \
    train model.ini --set train.recompute=full --set train.recompute_layers=3
expect too_many_plan '\[train\] recompute_layers: 3 blocks \(recompute_method = block\), but the model has 2' 1 \
    plan model.ini --world 1 --set train.recompute=selective --set train.recompute_method=block \
    --set train.recompute_layers=3
both too_many_pp '\[train\] recompute_layers: 2 blocks \(recompute_method = uniform\), but a model chunk of pipeline stage [01] has 1' \
    2 --set parallel.plugins=pp --set pp.size=2 --set train.micro_batch=4 \
    --set train.recompute=full --set train.recompute_layers=2
old=(--set parallel.plugin_path=$PLUGINS --set parallel.plugins=oldattn)
for m in full selective; do
    both oldattn_$m "\[train\] recompute: h.0 cannot recompute \($m\): its attention over cp comes from plugin 'oldattn', whose attention ops have no release" \
        2 "${old[@]}" --set train.recompute=$m
done
# Without recomputation the provider passes the start-up checks: what fails
# is its forward, which computes nothing.
expect oldattn_none "h.0: attention forward over cp: oldattn computes no attention" 1 \
    plan model.ini --world 2 "${old[@]}"
echo PASS
