# Bad mixture-of-experts and [ep] input is refused before training, at
# `tessera plan` and at start-up, with a message naming the key or the sizes
# and a non-zero exit: top_k above experts, experts not divisible by ep, an
# unknown dispatcher (the message lists the registered ones), folding sizes
# that do not cover the world, pipeline groups that differ between the two
# meshes, ep with tensor parallelism but no sequence parallelism, and an
# llm.c checkpoint into a mixture-of-experts model.
. "$2/tests/cli/multirank.sh"
write_config
e=(--set parallel.plugins=dp,ep --set train.micro_batch=8)
expect top_k 'top_k = 5 is more than experts = 4' 1 train model.ini --set model.experts=4 \
    --set model.top_k=5
both divisible 'experts = 6 is not divisible by ep = 4' 4 "${e[@]}" --set model.experts=6 \
    --set ep.size=4 --set train.micro_batch=4
both dispatcher "dispatcher 'nope' is registered \(known: all_to_all, all_gather\)" 2 "${e[@]}" \
    --set model.experts=4 --set ep.size=2 --set ep.dispatcher=nope
both cover 'expert mesh: edp cannot be derived: the world of 4 ranks is not divisible by etp 1 x ep 3' 4 "${e[@]}" \
    --set model.experts=6 --set ep.size=3 --set train.micro_batch=4
both tp_no_sp 'routed over ep, and the tp ranks hold the same rows' 4 \
    --set parallel.plugins=dp,tp,ep --set tp.size=2 --set ep.size=2 --set model.experts=4 \
    --set train.micro_batch=8
expect pp_groups 'the pipeline of rank 0 has rank 1 at stage 1 in the dense mesh.*but rank 2 in the expert mesh' 1 plan model.ini --world 8 --set parallel.plugins=dp,pp,ep \
    --set pp.size=2 --set ep.size=2 --set model.experts=4 --set parallel.order=tp-cp-ep-pp-dp
"$TESSERA" export model.ini --out dense.bin > /dev/null || fail "export of the dense model"
expect llmc "\[model\] experts: block h.0 is a mixture of experts here .* and a dense MLP in the llm.c checkpoint dense.bin \(no experts\)" \
    1 train model.ini --set model.experts=4 --set model.init=llmc:dense.bin
echo PASS
