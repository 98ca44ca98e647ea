#!/usr/bin/env bash
# ep_imbalance.sh — what a skewed router costs the expert-parallel step, on
# 4 ranks of this machine (dp 4, ep 4: 8 experts of width 1024, 2 per rank,
# top 2). Run by hand:
#     bench/ep_imbalance.sh [BUILD_DIR]
# The router is skewed by the data: a corpus of 8 token ids (synthetic,
# branching 1) gives the router 8 distinct inputs, so a few experts take
# most rows once it has trained a little; with the load-balancing loss
# (aux_loss_coeff 0.1) it is pushed back. For each, from steps 11..30: the
# rows per expert (last step, whole batch), the busiest rank's rows against
# the mean (balanced = 1.00), the busiest rank's time in its experts and
# its share of the step, and the step time. On CPU ranks sharing 2 cores the
# step time also waits on the other ranks' compute; the rows ratio is the
# load the router creates, the time share what it costs here.
. "$(dirname "$0")/lib.sh" "$@"
cat > bench.ini <<'INI'
[model]
layers = 2
d_model = 256
heads = 4
vocab = 8
context = 128
experts = 8
top_k = 2
expert_hidden = 1024
[data]
source = synthetic
synthetic_tokens = 65536
synthetic_branching = 1
[train]
steps = 30
seq_len = 128
micro_batch = 4
global_batch = 16
lr = 3e-3
[parallel]
plugins = dp, ep
[ep]
size = 4
INI
for aux in 0 0.1; do
    mpirun --oversubscribe --bind-to none -np 4 "$TESSERA" train bench.ini \
        --set model.aux_loss_coeff=$aux --set train.metrics=aux$aux.jsonl > /dev/null
done
python3 - <<'PY'
import json, statistics
for aux in ("0", "0.1"):
    rows = [json.loads(l) for l in open("aux%s.jsonl" % aux)][10:]
    last = rows[-1]["moe"]
    total = sum(last["expert_tokens"])
    ratio = statistics.median(r["moe"]["expert_rows_max"] / (sum(r["moe"]["expert_tokens"]) / 4)
                              for r in rows)
    busy = statistics.median(r["moe"]["expert_ms_max"] for r in rows)
    step = statistics.median(r["step_ms"] for r in rows)
    print("aux_loss_coeff %-4s rows per expert %s" % (aux, last["expert_tokens"]))
    print("    busiest rank: %.2f x the mean rows; %.1f ms in its experts = %.0f%% of a %.1f ms step"
          % (ratio, busy, 100 * busy / step, step))
PY
