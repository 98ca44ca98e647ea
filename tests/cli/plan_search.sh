# tessera plan --search and --cluster on a small model (4 layers, width 64,
# 4 heads, 256 tokens, 16 sequences a step) and an 8-device cluster (two
# nodes of 4):
#   - bad cluster files: a missing key, a zero bandwidth, an unknown key, a
#     --world the file does not describe, no cluster at all: one line naming
#     the file and key, exit 2; memory too small for any layout: "no layout
#     fits ... the smallest needs X GB", exit 1, and X is right: a device of
#     X GB (plus rounding) fits a layout, one of X/2 fits none;
#   - the search: every fitting layout within the device, the text's top N
#     in predicted order, every layout pruned by memory order (a floor of its
#     memory only) truly too big, and layouts with more recomputation than a
#     fitting one, or zero 2/3 where zero 1 fits, marked dominated;
#   - its predictions are the plan's: for the top layouts (confirmed: dry-run
#     whole, the first and last stage) `tessera plan --cluster` of the same
#     --set line gives the same peak (the larger of the two stages') and,
#     without a pipeline, the same step;
#     for screened layouts (fewer micro-batches, two cut models) rank 0's
#     whole dry run is within 6 % in step and 3 % in memory (the screening
#     scales the communication a step waits for once, in the last
#     micro-batch's backward, with the micro-batches: up to +4.7 % here;
#     memory down to -2.6 % with zb_v and zero 2; docs/search.md);
#   - a layout whose model state alone was judged over the device (dense and
#     MoE with ep) holds at least that floor in its dry run;
#   - `mpirun -np 2 tessera plan --calibrate --cluster FILE --search` writes
#     a cluster file the search reads, atomically (no FILE.tmp left); without
#     --cluster, or for device = cuda, it is refused and writes nothing.
# Usage: plan_search.sh TESSERA SRC
. "$2/tests/cli/multirank.sh"
. "$SRC/tests/cli/cluster_lib.sh"
cat > small.ini <<'INI'
[model]
layers = 4
d_model = 64
heads = 4
vocab = 256
context = 256
[data]
source = synthetic
synthetic_tokens = 65536
[train]
steps = 2
seq_len = 256
micro_batch = 1
global_batch = 16
INI
cluster() { # FILE [key=value ...]: two nodes of 4 devices, A100-like figures
    cluster_file "$1" 4 2 1 "${@:2}"
}
expect_rc() { # NAME RC REGEX args...: exit status RC, a line matching REGEX, at most 3 lines
    expect_status "$1" "$2" 3 "${@:3}"
}

# --- bad cluster files ---------------------------------------------------------
cluster missing.ini
sed -i '/^flops_bf16/d' missing.ini
expect_rc missing 2 'missing.ini: \[cluster\] flops_bf16 is required by plan --search' \
    plan small.ini --search --cluster missing.ini
cluster zero_bw.ini intra_bandwidth_gbs=0
expect_rc zero_bandwidth 2 'zero_bw.ini:[0-9]+: \[cluster\] intra_bandwidth_gbs = 0' \
    plan small.ini --search --cluster zero_bw.ini
cluster unknown.ini intra_bandwith_gbs=100
expect_rc unknown_key 2 'unknown.ini:[0-9]+: .*intra_bandwith_gbs' \
    plan small.ini --search --cluster unknown.ini
cluster good.ini
expect_rc world 2 'describes 2 nodes x 4 = 8 devices' \
    plan small.ini --search --cluster good.ini --world 16
expect_rc no_cluster 2 'plan --search needs a cluster' plan small.ini --search
expect_rc plan_missing 2 'missing.ini: \[cluster\] flops_bf16 is required' \
    plan small.ini --world 1 --cluster missing.ini
cluster tiny.ini memory_gb=0.001
expect_rc too_small 1 'no layout fits in 0.0 GB .*the smallest needs [0-9.]+ GB' \
    plan small.ini --search --cluster tiny.ini
need=$(sed -nE 's/.*the smallest needs ([0-9.]+) GB.*/\1/p' too_small.txt)
"$TESSERA" plan small.ini --search --cluster tiny.ini --json > tiny.json
# The smallest layout's exact bytes: a device that holds them fits it, half
# of them fits nothing.
bytes=$(python3 -c "
import json
s = json.load(open('tiny.json'))
print(min(l.get('memory_bytes', 1e30) for l in s['layouts'] if l['status'] == 'too_big'))")
cluster enough.ini memory_gb=$(python3 -c "print($bytes / 1e9 * 1.0001)")
"$TESSERA" plan small.ini --search --cluster enough.ini > enough.txt 2>&1 ||
    { cat enough.txt; fail "a device of the smallest layout's $bytes bytes fits none"; }
cluster half.ini memory_gb=$(python3 -c "print($bytes / 2e9)")
expect_rc half 1 'no layout fits' plan small.ini --search --cluster half.ini
echo "ok smallest: $need GB said, $bytes bytes fit"
# A layout not dry-run because its model state alone is over the device:
# the floor it was given is at most what its dry run holds (dense, and MoE
# with ep, whose experts and their optimizer state are cut further).
sed 's/^heads = 4/heads = 4\nexperts = 4\nmoe_every = 2/' small.ini > moe.ini
for cfg in small.ini moe.ini; do
    "$TESSERA" plan $cfg --search --cluster tiny.ini --json > floor.json
    python3 - <<'PY' > floor.txt || fail "no state_too_big layouts in $cfg"
import json
L = [l for l in json.load(open("floor.json"))["layouts"] if l["status"] == "state_too_big"]
assert L
pick = [l for l in L if l["ep"] > 1][:12] + [l for l in L if l["ep"] == 1][:4]
for l in pick:
    print("%.0f %s" % (l["state_bytes_at_least"], l["sets"]))
PY
    checked=0
    while read -r floor sets; do
        # a layout the plugins refuse (zero 2/3 of experts over ep) has no state
        # shellcheck disable=SC2086
        "$TESSERA" plan $cfg --world 8 --json $sets > one.json 2> one.err || {
            grep -q "plugin '" one.err || { cat one.err; fail "$cfg: plan failed: $sets"; }
            continue
        }
        python3 -c "
import json
m = json.load(open('one.json'))['memory']
state = m['params'] + m['grads'] + m['optimizer']
assert state >= $floor, (state, $floor)
" || fail "$cfg: a state floor above the state: $sets"
        checked=$((checked + 1))
    done < floor.txt
    [ $checked -ge 3 ] || fail "$cfg: $checked state floors checked"
    echo "ok state floors ($cfg): $checked checked, each at most the dry run's state"
done

# --- the search --------------------------------------------------------------------
cluster c.ini memory_gb=0.02
"$TESSERA" plan small.ini --search --cluster c.ini --top 10 > search.txt 2>&1 ||
    { cat search.txt; fail "search"; }
"$TESSERA" plan small.ini --search --cluster c.ini --top 10 --json > search.json ||
    fail "search --json"
cat search.txt
grep -q 'dry runs in processes' search.txt && fail "the in-tree strategies' dry runs ran in processes"
# The same search in processes (--processes, and how a plugin without
# TS_PLUGIN_THREAD_LOCAL_STATE makes it run): every layout the same.
"$TESSERA" plan small.ini --search --cluster c.ini --top 10 --processes > search_proc.txt 2>&1 ||
    { cat search_proc.txt; fail "search --processes"; }
grep -q 'dry runs in processes, not threads: --processes' search_proc.txt ||
    { cat search_proc.txt; fail "search --processes does not say it ran in processes"; }
"$TESSERA" plan small.ini --search --cluster c.ini --top 10 --json --processes > search_proc.json ||
    fail "search --json --processes"
python3 - <<'PY' || fail "threads and processes disagree"
import json
t, p = json.load(open("search.json")), json.load(open("search_proc.json"))
assert t["layouts"] == p["layouts"], [
    (a["sets"], a["status"], b["status"]) for a, b in zip(t["layouts"], p["layouts"]) if a != b][:3]
print("ok threads and processes: %d layouts the same (%.2f s on threads, %.2f s in processes)"
      % (len(t["layouts"]), t["seconds"], p["seconds"]))
PY
# A plugin on the path that keeps its state per process (skew: no
# TS_PLUGIN_THREAD_LOCAL_STATE) sends the dry runs to processes, naming it.
mkdir -p noflag && cp "$(dirname "$(dirname "$TESSERA")")/tests/plugins/tessera-skew.so" noflag/
"$TESSERA" plan small.ini --search --cluster c.ini --top 10 --set parallel.plugin_path=noflag \
    > search_noflag.txt 2>&1 || { cat search_noflag.txt; fail "search beside skew"; }
grep -q "dry runs in processes, not threads: skew does not declare TS_PLUGIN_THREAD_LOCAL_STATE" \
    search_noflag.txt || { cat search_noflag.txt; fail "skew's process state not named"; }
diff <(sed 1,2d search.txt) <(sed 1,2d search_noflag.txt | grep -v 'dry runs in processes') ||
    fail "the search beside skew ranked otherwise"
echo "ok a plugin without thread-local state: dry runs in processes, skew named"
expect_rc processes_alone 2 'plan: --processes is an option of --search' \
    plan small.ini --world 1 --processes
python3 - <<'PY' || fail "search properties"
import json, re
s = json.load(open("search.json"))
L = s["layouts"]
mem = s["memory_bytes"]
status = {}
for l in L:
    status[l["status"]] = status.get(l["status"], 0) + 1
print("statuses", status)
assert len(L) > 100 and status.get("fits", 0) > 10 and status.get("too_big", 0) > 10, status
assert status.get("dominated", 0) > 0, status
fits = [l for l in L if l["status"] == "fits"]
assert all(l["memory_bytes"] <= mem for l in fits)
steps = [l["step_s"] for l in fits]
assert steps == sorted(steps), "fitting layouts not in predicted order"
# every kind of cut is proposed
for k in ("tp", "cp", "pp", "zero"):
    assert any(l[k] > 1 if k != "zero" else l[k] > 0 for l in fits), k
assert {l["schedule"] for l in fits if l["pp"] > 1} >= {"1f1b", "zb_h1", "interleaved", "zb_v"}
# a dominated layout has a fitting one differing only by less recomputation,
# or, at zero 2 or 3, zero 1's at no more recomputation
rec = {"none": 0, "selective": 1, "full": 2}
def key(l, zero=None):
    return tuple(l[k] for k in ("tp", "cp", "pp", "dp", "ep", "schedule", "virtual_stages",
                                "micro_batch")) + (l["zero"] if zero is None else zero,)
fit_rec = {}
for l in fits: fit_rec.setdefault(key(l), []).append(rec[l["recompute"]])
by_zero = 0
for l in L:
    if l["status"] == "dominated":
        r = rec[l["recompute"]]
        less = any(x < r for x in fit_rec.get(key(l), []))
        zero1 = l["zero"] >= 2 and any(x <= r for x in fit_rec.get(key(l, 1), []))
        assert less or zero1, l
        by_zero += zero1 and not less
assert by_zero > 0, "no layout dominated by zero 1"
print("dominated by zero 1:", by_zero)
# the text's rows are the JSON's first fitting layouts
rows = [r for r in open("search.txt") if re.match(r"\s+\d+\s+tp ", r)]
assert len(rows) == 10, rows
for r, l in zip(rows, fits):
    assert abs(float(re.search(r"([0-9.e+-]+)s", r.split("GB")[1]).group(1)) / l["step_s"] - 1) < 1e-3, (r, l)
top = [l for l in fits if l["confirmed"] and l["pp"] == 1][:2] + \
      [l for l in fits if l["confirmed"] and l["pp"] > 1][:2]
assert len(top) == 4, "the top 10 hold no 2 layouts with pipelines and 2 without"
open("top.txt", "w").write("".join("%d %s\n" % (l["pp"], l["sets"]) for l in top))
bounded = [l for l in L if "memory_bytes_at_least" in l]
screened = [l for l in fits if not l["confirmed"]]
open("bounded.txt", "w").write("".join("%s\n" % l["sets"] for l in bounded[:: max(1, len(bounded) // 6)][:6]))
open("screened.txt", "w").write("".join("%.9g %.9g %s\n" % (l["step_s"], l["memory_bytes"], l["sets"])
                                        for l in screened[:: max(1, len(screened) // 8)][:8]))
print("bounded", len(bounded), "screened", len(screened))
PY
# The plan of one layout on the cluster: rank R's predicted step and peak.
predict() { # RANK sets...: "step_s peak_bytes"
    local r=$1
    shift
    # shellcheck disable=SC2068
    "$TESSERA" plan small.ini --world 8 --rank $r --cluster c.ini --json $@ |
        python3 -c "import json,sys; j=json.load(sys.stdin); print(j['prediction']['step_s'], j['peak']['total'])"
}
last_rank() { # sets...: the last pipeline stage's rank beside rank 0
    # shellcheck disable=SC2068
    "$TESSERA" plan small.ini --world 8 --json $@ |
        python3 -c "import json,sys; print(json.load(sys.stdin)['groups']['pp'][0][-1])"
}
n=0
while read -r pp sets; do
    want=$(python3 -c "
import json
for l in json.load(open('search.json'))['layouts']:
    if l['sets'] == '''$sets''': print(l['step_s'], l['memory_bytes'])")
    last=$(last_rank $sets)
    a=$(predict 0 $sets) b=$(predict "$last" $sets)
    python3 -c "
w = [float(x) for x in '$want'.split()]
a = [float(x) for x in '$a'.split()[:2]]; b = [float(x) for x in '$b'.split()[:2]]
peak = max(a[1], b[1])
assert abs(peak / w[1] - 1) < 1e-9, (w, a, b)
# without a pipeline the step is rank 0's; with one, the search's
# simulation takes each end stage's own times where plan takes rank R's
if $pp == 1: assert abs(a[0] / w[0] - 1) < 1e-6, (w, a)
print('ok confirmed: step %.6g s (plan of rank 0: %.6g), peak %.0f B = the larger of ranks 0 and $last' % (w[0], a[0], w[1]))
" || fail "confirmed layout differs from its plan: $sets"
    n=$((n + 1))
done < top.txt
[ $n -eq 4 ] || fail "4 top layouts checked, not $n"
while read -r step mem sets; do
    a=$(predict 0 $sets)
    python3 -c "
a = [float(x) for x in '$a'.split()[:2]]
e, m = $step / a[0] - 1, $mem / a[1] - 1
print('screened: step %+.3f%%, memory %+.3f%% against the whole dry run' % (100 * e, 100 * m))
assert abs(e) < 0.06 and abs(m) < 0.03
" || fail "screened layout far from its whole dry run: $sets"
done < screened.txt
while read -r sets; do
    a=$(predict 0 $sets)
    python3 -c "
a = [float(x) for x in '$a'.split()[:2]]
assert a[1] > 0.02e9, a
" || fail "a layout pruned as too big fits: $sets"
done < bounded.txt
echo "ok pruned by memory order: $(grep -c . bounded.txt) sampled, each above the device"

# --- calibration ------------------------------------------------------------------------
run_mpi 2 "$TESSERA" plan small.ini --calibrate --cluster cal.ini --search --top 3 > cal.txt 2>&1 ||
    { cat cal.txt; fail "calibrate"; }
grep -qE '^calibrated 2 ranks side by side: GEMM [0-9.e+]+ GFLOP/s' cal.txt || { cat cal.txt; fail "no calibration line"; }
grep -qE 'on 1 nodes x 2 devices' cal.txt || { cat cal.txt; fail "the search did not use the calibrated world"; }
[ ! -e cal.ini.tmp ] || fail "cal.ini.tmp left behind"
"$TESSERA" plan small.ini --world 2 --set parallel.plugins=dp --cluster cal.ini | grep -E 'predicted step of rank 0' ||
    fail "the calibrated file does not load"
expect_rc cal_no_file 2 'plan --calibrate needs --cluster FILE' plan small.ini --calibrate
expect_rc cal_cuda 2 'plan --calibrate measures this machine.s CPU kernels and MPI: \[train\] device = cpu' \
    plan small.ini --calibrate --cluster x.ini --set train.device=cuda
[ ! -e x.ini ] || fail "a refused calibration wrote x.ini"
echo PASS
