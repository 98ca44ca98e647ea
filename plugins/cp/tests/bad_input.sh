# Bad [cp] input is refused at `tessera plan` and at start-up, with a
# message naming the key and a non-zero exit: seq_len not divisible by
# 2 x cp (load balanced) or by cp (contiguous), heads that all_to_all cannot
# cut over cp, an unknown algorithm.
. "$2/tests/cli/multirank.sh"
write_config
expect() { # NAME REGEX NP args...
    local name=$1 regex=$2 np=$3
    shift 3
    if [ "$np" = 1 ]; then
        "$TESSERA" "$@" > $name.txt 2>&1
    else
        run_mpi "$np" "$TESSERA" "$@" > $name.txt 2>&1
    fi
    local rc=$?
    [ $rc -ne 0 ] && [ $rc -lt 128 ] || { cat $name.txt; fail "$name: exit status $rc"; }
    grep -qE "$regex" $name.txt || { cat $name.txt; fail "$name: message does not match /$regex/"; }
    echo "ok $name: $(grep -m1 -E "$regex" $name.txt)"
}
both() { # NAME REGEX NP sets... : the plan for NP ranks, then the run on NP ranks
    local name=$1 regex=$2 np=$3
    shift 3
    expect ${name}_plan "$regex" 1 plan model.ini --world "$np" "$@"
    expect ${name}_run "$regex" "$np" train model.ini "$@"
}
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
