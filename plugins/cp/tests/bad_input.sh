# Bad [cp] input is refused at `tessera plan` and at start-up, with a
# message naming the key and a non-zero exit: seq_len not divisible by
# 2 x cp (load balanced) or by cp (contiguous), heads that all_to_all cannot
# cut over cp, an unknown algorithm.
. "$2/tests/cli/multirank.sh"
write_config
c=(--set parallel.plugins=cp)
both balanced 'seq_len = 36 is not divisible by 2 x cp = 8' 4 "${c[@]}" --set cp.size=4 \
    --set train.seq_len=36
both contiguous 'seq_len = 34 is not divisible by cp = 4' 4 "${c[@]}" --set cp.size=4 \
    --set cp.load_balance=false --set train.seq_len=34
both heads 'algorithm = all_to_all.*the 2 heads of this rank.*do not divide by \[cp\] size = 4' 4 \
    "${c[@]}" --set cp.size=4 --set cp.algorithm=all_to_all --set model.heads=2
both heads_tp 'algorithm = all_to_all.*the 1 heads of this rank.*do not divide by \[cp\] size = 2' 4 \
    --set parallel.plugins=cp,tp --set cp.size=2 --set tp.size=2 --set cp.algorithm=all_to_all \
    --set model.heads=2
expect algorithm '\[cp\] algorithm = "tree": expected one of ring, all_gather, all_to_all' 1 \
    train model.ini "${c[@]}" --set cp.algorithm=tree
expect algorithm_plan '\[cp\] algorithm = "tree": expected one of ring, all_gather, all_to_all' 1 \
    plan model.ini --world 2 "${c[@]}" --set cp.algorithm=tree
expect size '\[cp\] size = 0: out of range' 1 train model.ini "${c[@]}" --set cp.size=0
echo PASS
