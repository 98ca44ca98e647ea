#!/usr/bin/env bash
# schedule_scale.sh — what a pipeline schedule costs `tessera plan` at scale,
# each schedule beside 1F1B on the same shape. Run by hand:
#     bench/schedule_scale.sh [BUILD_DIR] [ROUNDS]
# A model too small to cost anything itself (width 8, vocab 16, 4 tokens), so
# that the schedules' generation, the simulation of every rank's list (done
# by the trainer's start-up check and again by the plan's pipeline report)
# and the dry run of rank 0's steps are what is timed:
#   - pp 512, 1,024 micro-batches, 1,024 layers: 1f1b, zb_v (two chunks a
#     rank in V order) and interleaved (two chunks);
#   - pp 2, 65,536 micro-batches, 4 layers: 1f1b and interleaved;
#   - a schedule file of 150,000 rank lines for pp 2 (refused at the third
#     line) and its first 65,536 lines with pp = auto (every line read and
#     the ranks checked together before the scheduler finds pp 2).
# One `tessera plan` of each per round in a rotating order; per case the
# least over the rounds of its CPU time (user + system, of the process) and
# of its wall time, and the CPU ratio to 1F1B of the same shape. The
# machine is shared: compare only figures of one run.
. "$(dirname "$0")/lib.sh" "$@"
ROUNDS=${2:-3}
cat > scale.ini <<'INI'
[model]
layers = 1024
d_model = 8
heads = 1
vocab = 16
context = 4
[data]
source = synthetic
synthetic_tokens = 65536
[train]
steps = 2
seq_len = 4
micro_batch = 1
global_batch = 1024
[parallel]
plugins = pp
INI
python3 -c "
with open('many.sched', 'w') as f:
    f.writelines('rank %d: F0 BW0\n' % r for r in range(150000))"
head -n 65536 many.sched > auto.sched
python3 - "$TESSERA" "$ROUNDS" <<'PY'
import os, subprocess, sys, time
tessera, rounds = sys.argv[1], int(sys.argv[2])
big = ["--world", "512", "--set", "pp.size=512"]
long = ["--world", "2", "--set", "pp.size=2", "--set", "model.layers=4",
        "--set", "train.global_batch=65536"]
two = ["--set", "pp.virtual_stages=2"]
cases = [  # name, arguments, the 1F1B case it is compared with, must it succeed
    ("pp512_1f1b", big + ["--set", "pp.schedule=1f1b"], None, True),
    ("pp512_zb_v", big + ["--set", "pp.schedule=zb_v"] + two, "pp512_1f1b", True),
    ("pp512_interleaved", big + ["--set", "pp.schedule=interleaved"] + two, "pp512_1f1b", True),
    ("m65536_1f1b", long + ["--set", "pp.schedule=1f1b"], None, True),
    ("m65536_interleaved", long + ["--set", "pp.schedule=interleaved"] + two, "m65536_1f1b", True),
    ("file_150000_lines_pp2", ["--world", "2", "--set", "pp.size=2", "--set", "pp.schedule=file",
                               "--set", "pp.schedule_file=many.sched"], None, False),
    ("file_65536_lines_auto", ["--world", "2", "--set", "pp.size=auto", "--set", "pp.schedule=file",
                               "--set", "pp.schedule_file=auto.sched"], None, False),
]
cpu = {c[0]: [] for c in cases}
wall = {c[0]: [] for c in cases}
for r in range(rounds):
    for k in range(len(cases)):
        name, args, _, ok = cases[(r + k) % len(cases)]
        t0 = time.monotonic()
        p = subprocess.Popen([tessera, "plan", "scale.ini"] + args, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
        err = p.stderr.read().decode()
        _, status, use = os.wait4(p.pid, 0)
        wall[name].append(time.monotonic() - t0)
        cpu[name].append(use.ru_utime + use.ru_stime)
        code = os.waitstatus_to_exitcode(status)
        if (code == 0) != ok or code < 0:
            sys.exit("%s: exit status %d\n%s" % (name, code, err))
print("%-24s %9s %9s %s" % ("case", "cpu s", "wall s", "cpu against 1F1B of its shape"))
for name, _, ref, _ in cases:
    c, w = min(cpu[name]), min(wall[name])
    against = " %.2f x %s" % (c / min(cpu[ref]), ref) if ref else ""
    print("%-24s %9.3f %9.3f%s" % (name, c, w, against))
PY
