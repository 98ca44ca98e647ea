# The zero-bubble schedules' activation memory, pp 4, m = 8, bf16 (whose
# pipeline sends free their buffers at once, so every rank's peak is exact):
#  - every rank's measured activation peak (the run's summary) equals
#    `tessera plan --rank R`'s to the byte, for 1F1B, ZB-H1 and ZB-V;
#  - on every stage ZB-H1's peak is at most 1F1B's plus the deferred weight
#    gradients' state the plan itemises: the activations held past a
#    B for its W ("held for weight gradients") and the operands a W needs
#    that were not saved ("deferred weight gradients"): every other item
#    of the peak is 1F1B's. Stage s defers up to s Ws past the next B, so
#    the later stages hold more (ZB-H1 trades that memory for the bubble).
# Usage: zb_memory.sh TESSERA SRC
. "$2/tests/cli/multirank.sh"
write_config
sets=(--set model.layers=8 --set parallel.plugins=pp --set pp.size=4 --set train.micro_batch=2
      --set train.steps=2 --set train.dtype=bf16)
for s in 1f1b zb_h1 zb_v; do
    extra=()
    [ $s = zb_v ] && extra=(--set pp.virtual_stages=2)
    run_mpi 4 "$TESSERA" train model.ini "${sets[@]}" "${extra[@]}" --set pp.schedule=$s \
        --set train.summary=$s.summary.json > $s.txt 2>&1 || { cat $s.txt; fail "$s: run"; }
    for r in 0 1 2 3; do
        "$TESSERA" plan model.ini --world 4 --rank $r --json "${sets[@]}" "${extra[@]}" \
            --set pp.schedule=$s > $s.$r.plan.json 2> $s.plan.err || { cat $s.plan.err; fail "$s: plan"; }
    done
done
python3 - <<'PY' || fail "memory"
import json
peak, items = {}, {}
for s in ("1f1b", "zb_h1", "zb_v"):
    ranks = {r["rank"]: r["mem"]["activations"]["peak"] for r in json.load(open(s + ".summary.json"))["ranks"]}
    for r in range(4):
        plan = json.load(open("%s.%d.plan.json" % (s, r)))
        assert ranks[r] == plan["memory"]["activations"], (s, r, ranks[r], plan["memory"]["activations"])
        peak[s, r], items[s, r] = ranks[r], plan["activations_at_peak"]
    print("%-6s activation peaks by rank %s = plan" % (s, [peak[s, r] for r in range(4)]))
for r in range(4):
    held = items["zb_h1", r].get("held for weight gradients (f32)", 0) + \
           items["zb_h1", r].get("held for weight gradients, packed (bf16)", 0)
    copies = items["zb_h1", r].get("deferred weight gradients (f32)", 0)
    print("stage %d: zb_h1 %d <= 1f1b %d + held %d + copies %d = %d" %
          (r, peak["zb_h1", r], peak["1f1b", r], held, copies, peak["1f1b", r] + held + copies))
    assert peak["zb_h1", r] <= peak["1f1b", r] + held + copies
    assert peak["zb_h1", r - 1 if r else 0] <= peak["zb_h1", r] or r == 0
PY
echo PASS
