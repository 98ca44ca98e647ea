# tessera plan --calibrate --cluster PATH, report --out and [cluster] values
# that a careless user or someone sharing the directory hands it (~15 s):
#   - the cluster file is written through the atomic writer: a symbolic link
#     planted at PATH.tmp (the old fixed temporary name) leaves its target
#     alone; a FIFO at PATH, or a link at PATH to a FIFO (as /dev/null would
#     be), or a directory, is refused naming it before anything is measured
#     and is still there afterwards; through a link to a regular file the
#     file it leads to is written and the link stays; a config without
#     seq_len (the context) calibrates (it crashed);
#   - report --out: the same rules (a FIFO refused, a link's target written);
#   - nodes x gpus_per_node in 64 bits: 1048576 x 4096 (was "0 devices") and
#     2048 x 1048576 (was "-2147483648 devices") are refused naming the file,
#     line and key, by --search and by plan --cluster;
#   - every [cluster] rate, bandwidth, size and time outside its range (a
#     positive but tiny 1e-300, a huge 1e300) is refused naming the file, the
#     key's line and the key (1e-300 gave inf/NaN step times, a "best"
#     layout and exit 0); a cluster at the edges of every range gives finite
#     predictions only (the JSON parses, every step finite and positive).
# Usage: plan_cluster_bad_input.sh TESSERA SRC
. "$2/tests/cli/multirank.sh"
. "$SRC/tests/cli/cluster_lib.sh"
cat > small.ini <<'INI'
[model]
layers = 2
d_model = 64
heads = 4
vocab = 256
context = 64
[data]
source = synthetic
synthetic_tokens = 65536
[train]
steps = 2
seq_len = 64
micro_batch = 1
global_batch = 8
INI
grep -v '^seq_len' small.ini > noseq.ini
cluster() { # FILE [key=value ...]: one node of 8 devices, A100-like figures
    cluster_file "$1" 8 1 80 "${@:2}"
}
expect_rc() { # NAME RC REGEX args...: exit status RC, a line matching REGEX, at most 1 lines
    expect_status "$1" "$2" 1 "${@:3}"
}
calibrate() { # PATH [config]: a calibration on one rank
    run_mpi 1 "$TESSERA" plan "${2:-small.ini}" --calibrate --cluster "$1"
}

# --- the calibrated file -----------------------------------------------------------
echo precious > victim.txt
ln -s victim.txt cal.ini.tmp
calibrate cal.ini noseq.ini > cal.txt 2>&1 || { cat cal.txt; fail "calibrate (no seq_len)"; }
grep -q '^calibrated 1 ranks side by side' cal.txt || { cat cal.txt; fail "no calibration line"; }
[ "$(cat victim.txt)" = precious ] || fail "a link planted at cal.ini.tmp had its target overwritten"
[ -L cal.ini.tmp ] || fail "the planted link cal.ini.tmp was replaced"
[ -f cal.ini ] && [ ! -L cal.ini ] || fail "cal.ini is not a regular file"
grep -q 'the kernels at 1 x 64 rows' cal.ini || fail "not calibrated at the context's 64 tokens"
ls | grep -q '^cal\.ini\.tmp\.' && fail "a temporary file was left: $(ls)"
"$TESSERA" plan small.ini --world 1 --cluster cal.ini | grep -q 'predicted step of rank 0' ||
    fail "the calibrated file does not load"
echo "ok calibrate: the link at cal.ini.tmp not followed, cal.ini written and loads"

mkfifo fifo
expect_rc cal_fifo 1 'plan --calibrate --cluster fifo: is a FIFO; refusing to replace it' \
    plan small.ini --calibrate --cluster fifo
[ -p fifo ] || fail "the FIFO at PATH was replaced"
ln -s fifo null-like
expect_rc cal_link_fifo 1 "plan --calibrate --cluster null-like: leads to .*/fifo, which is a FIFO" \
    plan small.ini --calibrate --cluster null-like
[ -L null-like ] && [ -p fifo ] || fail "the link to a FIFO, or the FIFO, was replaced"
mkdir adir
expect_rc cal_dir 1 'plan --calibrate --cluster adir: is a directory' \
    plan small.ini --calibrate --cluster adir
grep -q calibrated cal_fifo.txt cal_link_fifo.txt cal_dir.txt && fail "measured before refusing"

echo old > real.ini
ln -s real.ini link.ini
calibrate link.ini > link.txt 2>&1 || { cat link.txt; fail "calibrate through a link"; }
[ -L link.ini ] || fail "the link at PATH was replaced by a regular file"
grep -q '^\[cluster\]' real.ini || fail "the link's target was not written"
echo "ok calibrate through a link: the link stays, real.ini written"

# --- report --out -----------------------------------------------------------------------
printf '{"step":1,"loss":2.5,"lr":0.001}\n{"step":2,"loss":2.4,"lr":0.001}\n' > m.jsonl
"$TESSERA" report m.jsonl --out fifo > rep.txt 2>&1 && { cat rep.txt; fail "report --out a FIFO"; }
grep -q 'report: --out fifo: is a FIFO' rep.txt || { cat rep.txt; fail "report --out fifo: message"; }
[ -p fifo ] || fail "report replaced the FIFO"
echo keep > page.html
ln -s page.html plink.html
"$TESSERA" report m.jsonl --out plink.html > rep.txt 2>&1 || { cat rep.txt; fail "report through a link"; }
[ -L plink.html ] && grep -q '<html' page.html || fail "report did not write the link's target"
echo "ok report --out: a FIFO refused, a link's target written"

# --- device counts ---------------------------------------------------------------------------
cluster ov.ini nodes=1048576 gpus_per_node=4096
line=$(grep -n '^nodes =' ov.ini | cut -d: -f1)
expect_rc devices_2_32 2 "ov.ini:$line \[cluster\] nodes = 1048576 x gpus_per_node = 4096 is 4294967296 devices, more than the 1048576" \
    plan small.ini --search --cluster ov.ini
expect_rc devices_plan 2 "ov.ini:$line \[cluster\] nodes = 1048576 x gpus_per_node = 4096 is 4294967296 devices" \
    plan small.ini --world 1 --cluster ov.ini
cluster ov31.ini nodes=2048 gpus_per_node=1048576
expect_rc devices_2_31 2 "ov31.ini:[0-9]+ \[cluster\] nodes = 2048 x gpus_per_node = 1048576 is 2147483648 devices" \
    plan small.ini --search --cluster ov31.ini

# --- ranges of the rates -------------------------------------------------------------------------
n=0
for kv in flops_bf16=1e-300 flops_fp32=1e-300 matmul_efficiency=1e-300 attention_efficiency=1e-300 \
    attention_block_efficiency=1e-300 memory_bandwidth_gbs=1e-300 memory_gb=1e-300 \
    intra_bandwidth_gbs=1e-300 inter_bandwidth_gbs=1e-300 inter_all_reduce_bandwidth_gbs=1e-300 \
    intra_send_recv_bandwidth_gbs=1e-300 flops_bf16=1e300 memory_gb=1e300 memory_reserve_gb=1e300 \
    memory_bandwidth_gbs=1e300 intra_bandwidth_gbs=1e300 kernel_us=1e300 intra_latency_us=1e300 \
    inter_latency_us=1e300 inter_all_to_all_latency_us=1e300; do
    k=${kv%%=*}
    cluster r.ini "$kv"
    line=$(grep -n "^$k =" r.ini | cut -d: -f1)
    expect_rc "range_$k" 2 "r.ini:$line: \[cluster\] $k = ${kv#*=}: out of range" \
        plan small.ini --search --cluster r.ini
    n=$((n + 1))
done
echo "ok ranges: $n values out of range refused naming the file, line and key"
# every range at its slow edge: slow, but every prediction finite
cluster edge.ini flops_bf16=1e6 flops_fp32=1e6 matmul_efficiency=1e-3 attention_efficiency=1e-3 \
    memory_bandwidth_gbs=1e-3 kernel_us=1e6 intra_bandwidth_gbs=1e-6 inter_bandwidth_gbs=1e-6 \
    intra_latency_us=1e8 inter_latency_us=1e8 memory_gb=1e6
"$TESSERA" plan small.ini --search --cluster edge.ini --json --top 3 > edge.json 2> edge.err ||
    { cat edge.err; fail "search at the ranges' edges"; }
python3 - <<'PY' || fail "a prediction at the ranges' edges is not finite"
import json, math
L = json.load(open("edge.json"))["layouts"]  # "inf" or "nan" would not parse
fits = [l for l in L if l["status"] == "fits"]
assert fits
for l in fits:
    for k in ("step_s", "compute_s", "comm_s", "tokens_per_s", "mfu"):
        assert math.isfinite(l[k]), (k, l)
    assert l["step_s"] > 0, l
print("ok edges: %d fitting layouts, steps %.3g .. %.3g s, all finite" %
      (len(fits), min(l["step_s"] for l in fits), max(l["step_s"] for l in fits)))
PY
for f in "$SRC"/configs/clusters/*.ini; do
    "$TESSERA" plan small.ini --world 8 --set parallel.plugins=dp --cluster "$f" > one.txt 2>&1 ||
        { cat one.txt; fail "$f does not load"; }
    grep -q 'predicted step of rank 0' one.txt || { cat one.txt; fail "$f: no prediction"; }
done
echo "ok the checked-in cluster files load"
echo PASS
