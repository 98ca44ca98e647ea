# Plugins run on their init's thread (TS_PLUGIN_THREAD_LOCAL_STATE, plugin
# ABI 1.3): the test plugin tessera-onethread.so fails any callback made on
# another thread (its transform, every hook and module hook, fini logs it).
# A real run with recomputation, evaluation and asynchronous checkpoints
# (whose writer is a thread of its own) on one rank, and beside dp and zero
# on two ranks, must finish with the plugin's callbacks counted and none
# refused.
# Usage: one_thread.sh TESSERA SRC PLUGIN_DIR
. "$(dirname "$0")/lib.sh"
PLUGINS=$3
run=(train "$SRC/configs/tiny.ini" --set train.steps=6 --set train.warmup=0
    --set parallel.plugin_path="$PLUGINS" --set train.checkpoint_every=2
    --set train.checkpoint_async=true --set train.recompute=full
    --set data.split=0.1 --set train.eval_every=3 --set train.eval_batches=2)

check() { # NAME
    grep -q "another thread" "$1.txt" && { cat "$1.txt"; fail "$1: a callback ran on another thread"; }
    grep -q "tessera: onethread: [0-9]* callbacks, all on init's thread" "$1.txt" ||
        { cat "$1.txt"; fail "$1: onethread's fini did not report its callbacks"; }
    [ -f "$1/ckpt-00000006/COMPLETE" ] || { ls -R "$1"; fail "$1: no final checkpoint"; }
    python3 - "$1.jsonl" <<'PY' || fail "$1: no positive onethread.calls in the metrics"
import json, sys
calls = [json.loads(l).get("plugins", {}).get("onethread", {}).get("calls", 0) for l in open(sys.argv[1])]
assert calls and all(c > 0 for c in calls) and calls == sorted(calls), calls
PY
    echo "ok: $1: every callback of onethread on init's thread"
}

"$TESSERA" "${run[@]}" --set parallel.plugins=onethread --set train.checkpoint_dir=one \
    --set train.metrics=one.jsonl > one.txt 2>&1 || { cat one.txt; fail "one rank: exit $?"; }
check one
timeout 300 mpirun --oversubscribe --bind-to none -np 2 "$TESSERA" "${run[@]}" \
    --set parallel.plugins=dp,zero,onethread --set train.checkpoint_dir=two \
    --set train.metrics=two.jsonl > two.txt 2>&1 || { cat two.txt; fail "two ranks: exit $?"; }
check two
