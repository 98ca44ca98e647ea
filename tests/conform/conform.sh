#!/usr/bin/env bash
# conform.sh — `tessera conform` (apps/conform.c) as a plugin author runs it:
#   pass SO WORLDS JSON [SKIP...]  on the grid of WORLDS ranks ("2,4"), every
#                           check of SO passes (those named after it are SKIP
#                           instead), exit 0; with JSON "json" a --json run
#                           on 2 ranks gives the same results
#   broken SO CHECK JSON [SKIP...]  on 2 ranks, exit 1 with exactly CHECK
#                           failing, named in the table's verdict; every
#                           other check passes (those named after it: SKIP)
#   examples BUILD_DIR NAME...  installs BUILD_DIR into a temporary prefix,
#                           builds each examples/NAME against it alone, and
#                           conforms it (on 2 ranks; hsdp, a strategy with
#                           axes of its own, with shard 2 on 2 and 4 ranks,
#                           and beside tp 2 on 4)
#   cli TEST_PLUGIN_DIR     bad command lines exit 2 naming what is wrong; a
#                           plugin of another ABI major or a newer minor fails
#                           abi naming both versions and runs nothing else
# Runs on 2 ranks (and 4 where the default grid is kept), 4 steps of two
# small GPT-2 shapes: a few seconds per (ranks, shape).
# usage: conform.sh TESSERA SRC MODE ARGS...
set -u
TESSERA=$1
SRC=$2
MODE=$3
shift 3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tessera-conform-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
L="mpirun --oversubscribe --bind-to none"
fail() { echo "FAIL: $*" >&2; exit 1; }

# check JSON TEXT EXPECT_FAIL SKIPS...: the table's rows and verdict (and
# the object's results, when JSON is not "-") are what is expected.
check() {
    local json=$1 text=$2 want_fail=$3
    shift 3
    python3 - "$json" "$text" "$want_fail" "$@" <<'PY'
import json, re, sys
text = open(sys.argv[2]).read()
j = None if sys.argv[1] == "-" else json.load(open(sys.argv[1]))
want_fail = set(filter(None, sys.argv[3].split(",")))
skips = set(sys.argv[4:])
names = ["abi", "init", "unknown_key", "bad_value", "numerics", "memory", "comm", "resume",
         "resume_other_topology"]
rows = re.findall(r"^(\w+) +(PASS|FAIL|SKIP) +(.*)$", text, re.M)
assert [r[0] for r in rows] == names, rows
got = {r[0]: r[1].lower() for r in rows}
for n, res, fig in rows:
    want = "fail" if n in want_fail else "skip" if n in skips else "pass"
    assert res.lower() == want, "%s: %s, expected %s (%s)" % (n, res, want, fig)
if j is not None:
    assert [c["name"] for c in j["checks"]] == names, j["checks"]
    assert {c["name"]: c["result"] for c in j["checks"]} == got, j["checks"]
    assert j["pass"] is (not want_fail), j["pass"]
verdict = "conform: FAILED: " + " ".join(n for n in names if n in want_fail) if want_fail \
    else "conform: PASS"
assert verdict in text, (verdict, text[-300:])
print(", ".join("%s %s" % (n, got[n]) for n in names))
PY
}

# conform_run SO OUT [ARGS...]: the table in OUT.txt; returns its exit
# status.
conform_run() {
    local so=$1 out=$2
    shift 2
    timeout 900 "$TESSERA" conform "$so" --launcher "$L" "$@" > "$out.txt" 2> "$out.err"
    local rc=$?
    cat "$out.txt"
    return $rc
}

# json_run SO OUT RC [ARGS...]: the same as one --json object in OUT.json,
# with the same exit status RC (a second run: the object is not a copy).
json_run() {
    local so=$1 out=$2 rc=$3
    shift 3
    timeout 900 "$TESSERA" conform "$so" --launcher "$L" --json "$@" > "$out.json" 2>> "$out.err"
    local rj=$?
    [ $rc = $rj ] || fail "$so: exit $rc with the table, $rj with --json"
    python3 -c "import json,sys; json.load(open(sys.argv[1]))" "$out.json" ||
        { cat "$out.json"; fail "$so: --json is not one JSON object"; }
}

case "$MODE" in
pass)
    so=$1 worlds=$2 js=$3
    shift 3
    conform_run "$so" run --world "$worlds"
    rc=$?
    [ $rc = 0 ] || { cat run.err; fail "$so: exit status $rc, expected 0"; }
    j=-
    # The object's run on 2 ranks only (the table's covered the grid).
    if [ "$js" = json ]; then json_run "$so" run 0 --world 2; j=run.json; fi
    check $j run.txt "" "$@" || fail "$so: unexpected results"
    ;;
broken)
    so=$1 want=$2 js=$3
    shift 3
    conform_run "$so" run --world 2
    rc=$?
    [ $rc = 1 ] || { cat run.err; fail "$so: exit status $rc, expected 1"; }
    j=-
    if [ "$js" = json ]; then json_run "$so" run 1 --world 2; j=run.json; fi
    check $j run.txt "$want" "$@" || fail "$so: not exactly $want failing"
    grep -q "kept in" run.txt || fail "$so: the failing runs' directory is not named"
    ;;
examples)
    build=$1
    shift
    cmake --install "$build" --prefix "$WORK/prefix" > install.log 2>&1 || { cat install.log; fail "install"; }
    for name in "$@"; do
        ex=$SRC/examples/$name
        [ -f "$ex/CMakeLists.txt" ] || fail "no examples/$name"
        cp -r "$ex" "src-$name"
        cmake -S "src-$name" -B "b-$name" -DCMAKE_PREFIX_PATH="$WORK/prefix" \
            -DCMAKE_BUILD_TYPE=Release > "b-$name.log" 2>&1 &&
            cmake --build "b-$name" >> "b-$name.log" 2>&1 || { cat "b-$name.log"; fail "build $name"; }
        so=$(ls "b-$name"/tessera-*.so | head -1)
        # Keys the examples do not declare: a2a_dispatcher and flex have none,
        # shard_params one string; their bad_value is SKIP, saying so.
        skips=() args=(--world 2)
        case "$name" in
        token-dispatcher | flex-dispatcher | module-hook) skips=(bad_value) ;;
        hsdp) args=(--world 2,4 --set hsdp.shard=2) ;;
        esac
        conform_run "$so" "$name" "${args[@]}"
        rc=$?
        [ $rc = 0 ] || { cat "$name.err"; fail "examples/$name: exit status $rc"; }
        check - "$name.txt" "" "${skips[@]}" || fail "examples/$name: unexpected results"
        if [ "$name" = hsdp ]; then
            # Beside tp (the plugins named by --set, tp's key only for the runs).
            conform_run "$so" hsdp_tp --world 4 --set hsdp.shard=2 --set parallel.plugins=hsdp,tp \
                --set tp.size=2 || { cat hsdp_tp.err; fail "examples/hsdp with tp 2"; }
            check - hsdp_tp.txt "" || fail "examples/hsdp with tp 2: unexpected results"
        fi
    done
    # hello-plugin is built for ABI 1.3 with thread-local state; hsdp, as it
    # was written for 1.2, declares the current minor and no flags.
    [ ! -f hello-plugin.txt ] || grep -qE "^abi +PASS +plugin hello .* built for ABI 1\.3 \(this core 1\.3\).*flags 0x1 \(thread-local state" \
        hello-plugin.txt || fail "hello-plugin: not said to be a 1.3 plugin with thread-local state"
    [ ! -f hsdp.txt ] || grep -qE "^abi +PASS +plugin hsdp .*flags 0x0 \(process-wide state.*host table [0-9]+ bytes \(comms [0-9]+" \
        hsdp.txt || fail "hsdp: its flags and the host table's sizes are not on the abi row"
    ;;
cli)
    plugins=$1
    "$TESSERA" conform > u.txt 2>&1
    [ $? = 2 ] && grep -q "PLUGIN.so is required" u.txt || { cat u.txt; fail "no PLUGIN.so: not refused"; }
    "$TESSERA" conform --help > h.txt 2>&1 && grep -q "resume_other_topology" h.txt ||
        fail "conform --help"
    "$TESSERA" --help | grep -q "conform PLUGIN.so" || fail "tessera --help does not list conform"
    touch libwhatever.so
    "$TESSERA" conform libwhatever.so > u.txt 2>&1
    [ $? = 2 ] && grep -q "libwhatever.so: a plugin file is named tessera-NAME.so" u.txt ||
        { cat u.txt; fail "a misnamed file: not refused"; }
    "$TESSERA" conform "$plugins/tessera-good.so" --kind nonsense > u.txt 2>&1
    [ $? = 2 ] && grep -q "\-\-kind: one of strategy" u.txt || { cat u.txt; fail "--kind nonsense"; }
    "$TESSERA" conform "$plugins/tessera-good.so" --world 1 > u.txt 2>&1
    [ $? = 2 ] && grep -q "\-\-world '1'" u.txt || { cat u.txt; fail "--world 1: not refused"; }
    "$TESSERA" conform "$plugins/tessera-good.so" --steps 2 > u.txt 2>&1
    [ $? = 2 ] && grep -q "\-\-steps" u.txt || { cat u.txt; fail "--steps 2: not refused"; }
    "$TESSERA" conform "$plugins/tessera-good.so" --config "$WORK/nowhere.ini" > u.txt 2>&1
    [ $? = 2 ] && grep -q "\-\-config .*nowhere.ini" u.txt || { cat u.txt; fail "a missing --config"; }
    "$TESSERA" conform "$WORK/tessera-nowhere.so" > u.txt 2>&1
    [ $? = 2 ] && grep -q "tessera-nowhere.so" u.txt || { cat u.txt; fail "a missing file is not named"; }
    for p in wrong_major newer_minor; do
        "$TESSERA" conform "$plugins/tessera-$p.so" > $p.txt 2>&1
        [ $? = 1 ] || { cat $p.txt; fail "$p: exit status not 1"; }
        json_run "$plugins/tessera-$p.so" $p 1
        check $p.json $p.txt abi init unknown_key bad_value numerics memory comm resume \
            resume_other_topology || fail "$p: not an abi failure alone"
        grep -qE "^abi +FAIL .*ABI [0-9]+\.[0-9]+.* ABI [0-9]+\.[0-9]+" $p.txt ||
            fail "$p: the abi row does not name both versions"
        grep -qE "^numerics +SKIP +not run: abi" $p.txt || fail "$p: the runs are not said to be skipped"
    done
    ;;
*) fail "unknown mode $MODE" ;;
esac
echo PASS
