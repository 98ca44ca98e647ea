# Bad [zero] input is refused before training, with a message naming the key
# (or the plugin list) and a non-zero exit: stage outside 1..3, prefetch < 0,
# an offload target that does not exist, offload = cpu on a CPU run (one rank
# and two), zero without dp; and an INI file's own line is named.
. "$2/tests/cli/multirank.sh"
write_config
z=(--set parallel.plugins=dp,zero)
expect stage0 '\[zero\] stage = 0: out of range \[1, 3\]' 1 train model.ini "${z[@]}" --set zero.stage=0
expect stage4 '\[zero\] stage = 4: out of range \[1, 3\]' 1 train model.ini "${z[@]}" --set zero.stage=4
expect prefetch '\[zero\] prefetch = -1: out of range' 1 train model.ini "${z[@]}" --set zero.prefetch=-1
expect offload_word '\[zero\] offload = "gpu": expected one of none, cpu' 1 train model.ini "${z[@]}" \
    --set zero.offload=gpu
expect offload_cpu_1 '\[zero\] offload.*nothing to offload' 1 train model.ini "${z[@]}" --set zero.offload=cpu
expect offload_cpu_2 '\[zero\] offload.*nothing to offload' 2 train model.ini "${z[@]}" --set zero.offload=cpu \
    --set train.micro_batch=8 --set zero.stage=1
expect offload_cpu_3 '\[zero\] offload.*nothing to offload' 2 train model.ini "${z[@]}" --set zero.offload=cpu \
    --set train.micro_batch=8 --set zero.stage=3
expect no_dp 'nothing cuts the batch over dp: load dp first' 1 train model.ini --set parallel.plugins=zero
printf '[parallel]\nplugins = dp, zero\n[zero]\nstage = 5\n' >> model.ini
expect ini_line 'model.ini:[0-9]+: \[zero\] stage = 5: out of range' 1 train model.ini
echo PASS
