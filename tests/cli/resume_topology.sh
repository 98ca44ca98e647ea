# Recovery onto a different topology: train 10 steps on 4 ranks (dp 2 x tp 2
# with sequence parallelism), checkpoint, then resume the same checkpoint on
# 2 pipeline stages (pp 2, 1F1B) for steps 11..20. Checkpoints hold the
# unsharded model, so the resumed run must match an uninterrupted one-rank
# run: losses and gradient norms of steps 11..20 and the final weights within
# 1e-5 relative (only reduction orders differ between the topologies).
# Usage: resume_topology.sh TESSERA SRC [DEVICE] — with DEVICE cuda both
# parallel runs train on one GPU per rank against the CPU's one-rank run,
# within 1e-4 (the bound of the GPU-against-CPU tests).
. "$(dirname "$0")/multirank.sh"
DEVICE=${1:-cpu}
TOL=1e-5
[ "$DEVICE" = cpu ] || TOL=1e-4
write_config
"$TESSERA" train model.ini --set train.checkpoint_dir=ref --set train.metrics=ref.jsonl \
    > ref.txt 2>&1 || { cat ref.txt; fail "one-rank run failed"; }
run_mpi 4 "$TESSERA" train model.ini --set train.device=$DEVICE --set parallel.plugins=dp,tp --set tp.size=2 \
    --set tp.sequence_parallel=true --set train.micro_batch=8 --set train.steps=10 \
    --set train.decay_steps=20 --set train.checkpoint_dir=par --set train.metrics=first.jsonl \
    > first.txt 2>&1 || { cat first.txt; fail "dp x tp run failed"; }
[ -f par/ckpt-00000010/COMPLETE ] || fail "no checkpoint at step 10"
grep -q "device $DEVICE" first.txt || { cat first.txt; fail "the run did not train on $DEVICE"; }
run_mpi 2 "$TESSERA" train model.ini --set train.device=$DEVICE --set parallel.plugins=pp --set pp.size=2 \
    --set train.micro_batch=4 --set train.resume=auto --set train.checkpoint_dir=par \
    --set train.metrics=par.jsonl > second.txt 2>&1 || { cat second.txt; fail "pp resume failed"; }
grep -q "resumed from par/ckpt-00000010 at step 10" second.txt || { cat second.txt; fail "did not resume"; }
# The resumed run appends steps 11..20 to a fresh metrics file: put the first
# ten steps of the reference in front so compare_runs sees 20 steps.
head -n 10 ref.jsonl > joined.jsonl
cat par.jsonl >> joined.jsonl
mv joined.jsonl par.jsonl
compare_runs ref par $TOL
echo "PASS: dp2 x tp2 (SP) -> pp2 resume on $DEVICE matches one CPU rank within $TOL"
