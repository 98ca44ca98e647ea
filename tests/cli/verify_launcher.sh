# tessera verify's launcher. With no --launcher, configs/tiny.ini on 4 ranks
# (dp) passes all four ledgers on a machine of fewer cores: Open MPI's
# mpirun is given --oversubscribe (the suite's own oversubscription variable
# is unset here, so the default path is what runs). A --launcher is taken as
# given (plain mpirun is refused 4 slots on fewer cores, and verify prints
# mpirun's own first lines of error), and a launcher that fails says why in
# its own words: a script's two lines of error, a command that does not
# exist, one that prints nothing.
# Usage: verify_launcher.sh TESSERA SRC
. "$(dirname "$0")/multirank.sh"
unset OMPI_MCA_rmaps_base_oversubscribe
export TMPDIR=$WORK # the failed runs' files, which verify keeps
TINY=$SRC/configs/tiny.ini
# Speed is reported, not judged (4 ranks on 2 shared cores), as in verify.sh.
# tiny.ini names no parallel plugin: its 4-rank run is data parallel, with
# the micro-batch that divides its global batch of 16 among 4 ranks.
DP=(--steps 4 --slow-rank 1000)
# Its runs go in a TMPDIR with a quote and a space in its name: copied and
# removed without a shell (verify used to build "rm -rf '...'" commands).
mkdir -p "$WORK/it's here"
TMPDIR="$WORK/it's here" timeout 600 "$TESSERA" verify "$TINY" --world 4 "${DP[@]}" > default.txt 2>&1 ||
    { cat default.txt; fail "verify configs/tiny.ini --world 4 with the default launcher failed"; }
cat default.txt
[ -z "$(ls -A "$WORK/it's here")" ] || fail "verify left its runs in a TMPDIR with a quote in its name: $(ls -A "$WORK/it's here")"
grep -qF "names no parallel plugin: the 4-rank run is data parallel (--set parallel.plugins=dp --set train.micro_batch=4)" default.txt ||
    fail "verify did not say the 4-rank run of a configuration without plugins is data parallel"
for ledger in numerics memory speed recovery; do
    grep -qE "^$ledger +PASS " default.txt || fail "default launcher: $ledger did not pass"
done
# With global_batch = 0 (micro_batch x dp) both runs are given the N-rank
# run's global batch, so the one rank sums as many micro-batches.
timeout 600 "$TESSERA" verify "$TINY" --world 2 "${DP[@]}" --set train.global_batch=0 > gb0.txt 2>&1 ||
    { cat gb0.txt; fail "verify of global_batch = 0 on 2 ranks failed"; }
grep -qF "the 2-rank run is data parallel (--set parallel.plugins=dp --set train.global_batch=16)" gb0.txt ||
    { cat gb0.txt; fail "verify did not give both runs the global batch of 2 x 8"; }
grep -qE "^numerics +PASS " gb0.txt || fail "global_batch = 0: numerics did not pass"
echo "ok global_batch = 0: $(grep -F 'names no parallel' gb0.txt)"
if mpirun --version 2>&1 | grep -q "Open MPI"; then
    grep -q "(launcher: mpirun --oversubscribe)" default.txt || fail "Open MPI's mpirun not given --oversubscribe"
fi

launch_fails() { # NAME LAUNCHER REGEX...: verify exits 1 and its stderr matches every REGEX
    local name=$1 launcher=$2
    shift 2
    timeout 300 "$TESSERA" verify "$TINY" --world 4 "${DP[@]}" --launcher "$launcher" \
        > $name.out 2> $name.err
    local rc=$?
    [ $rc = 1 ] || { cat $name.out $name.err; fail "$name: exit status $rc, expected 1"; }
    local re
    for re in "$@"; do
        grep -qE -e "$re" $name.err || { cat $name.err; fail "$name: stderr does not match /$re/"; }
    done
    echo "ok $name: $(tr '\n' ' ' < $name.err | head -c 300)"
}
if [ "$(nproc)" -lt 4 ] && mpirun --version 2>&1 | grep -q "Open MPI"; then
    launch_fails plain_mpirun mpirun "the launcher 'mpirun -np 4' said:" \
        "^  There are not enough slots available in the system to satisfy the 4$" \
        "^  slots that were requested by the application:$"
fi
cat > launcher.sh <<'SH'
#!/bin/sh
echo "launcher.sh: cannot reach node17 (connection refused)" >&2
echo "launcher.sh: giving up after 3 tries" >&2
exit 3
SH
chmod +x launcher.sh
launch_fails script_error "$PWD/launcher.sh --hosts node17" "status 3" \
    "^  launcher.sh: cannot reach node17 \(connection refused\)$" "^  launcher.sh: giving up after 3 tries$"
launch_fails no_such_command "no-such-launcher -v" "cannot run no-such-launcher: No such file or directory"
launch_fails silent false "the launcher 'false -np 4' printed nothing"

# --keep DIR takes a new or empty directory only: the runs' files are then the
# only ones there, and none can be a link planted to have its target written.
mkdir -p kept && echo mine > kept/notes.txt && ln -sfn "$WORK/kept" keptlink
for d in kept keptlink; do
    "$TESSERA" verify "$TINY" --world 2 --keep $d > keep.out 2> keep.err && fail "--keep $d was taken"
    grep -qx "tessera verify: --keep $d: exists and is not an empty directory; name a new one" keep.err ||
        { cat keep.err; fail "--keep $d: wrong message"; }
done
[ "$(cat kept/notes.txt)" = mine ] || fail "--keep kept changed a file already there"
echo "ok --keep refuses a directory with files and a link"
echo PASS
