#!/usr/bin/env bash
# checkpoint.sh — the cost of a checkpoint of a model of several hundred MB
# on 2 ranks (tp 2) of this machine. Run by hand:
#     bench/checkpoint.sh [BUILD_DIR]
# GPT-2 small's shape (124M parameters: master weights and both moments are
# 1.49 GB) trains 8 steps three ways, side by side, twice: no checkpoint,
# a synchronous checkpoint every 2 steps, and checkpoint_async = true. For
# each it prints the run's wall time and the median step time (metrics
# step_ms, training only) and, from the trainer's lines, each save's size,
# its time (for async: the pause for the snapshot and the time until
# published) and the most any rank's resident memory grew by during it.
# Then it resumes the last checkpoint on 4 ranks (tp 2 x pp 2) and on 1
# rank, printing how much each rank 0 read and the load's resident growth.
. "$(dirname "$0")/lib.sh" "$@"
cat > bench.ini <<'INI'
[model]
layers = 12
d_model = 768
heads = 12
vocab = 50257
context = 1024
[data]
source = synthetic
synthetic_tokens = 262144
[train]
steps = 8
seq_len = 64
micro_batch = 1
global_batch = 1
[parallel]
plugins = tp
[tp]
size = 2
INI
median() { python3 -c "import json,statistics,sys; print('%.0f' % statistics.median(json.loads(l)['step_ms'] for l in list(open(sys.argv[1]))[1:]))" "$1"; }
for round in 1 2; do
    for mode in none sync async; do
        rm -rf ck_$mode
        case $mode in
        none) set=() ;;
        sync) set=(--set train.checkpoint_dir=ck_$mode --set train.checkpoint_every=2) ;;
        async) set=(--set train.checkpoint_dir=ck_$mode --set train.checkpoint_every=2
                    --set train.checkpoint_async=true) ;;
        esac
        t0=$(date +%s.%N)
        mpirun --oversubscribe --bind-to none -np 2 "$TESSERA" train bench.ini "${set[@]}" \
            --set train.metrics=$mode.jsonl > $mode.txt 2>&1 || { cat $mode.txt; exit 1; }
        t1=$(date +%s.%N)
        printf 'round %d %-5s wall %6.1f s, median step %s ms\n' $round $mode \
            "$(echo "$t1 - $t0" | bc)" "$(median $mode.jsonl)"
        grep '^checkpoint:' $mode.txt | sed 's/^/    /' || true
    done
done
last=$(ls -d ck_sync/ckpt-* | tail -n 1)
for np in 4 1; do
    rm -rf r$np && mkdir r$np && cp -r "$last" r$np/
    if [ $np = 4 ]; then set=(--set parallel.plugins=tp,pp --set pp.size=2); else set=(--set tp.size=1); fi
    mpirun --oversubscribe --bind-to none -np $np "$TESSERA" train bench.ini "${set[@]}" \
        --set train.steps=9 --set train.checkpoint_dir=r$np --set train.resume=auto > r$np.txt 2>&1 ||
        { cat r$np.txt; exit 1; }
    echo "load on $np rank(s): $(grep '^resumed from' r$np.txt)"
done
