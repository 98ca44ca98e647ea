# [train] threads = 0 (the default) takes OMP_NUM_THREADS when it is set,
# else the cores: OMP_NUM_THREADS=1 and =3 give 1 and 3 threads on the
# run's first line (the machine's core count has no part in it), unset gives
# the cores; --set train.threads wins over the variable; a value that is not
# a whole number from 1 to 4096 is refused naming the variable, exit 2.
# Usage: omp_threads.sh TESSERA SRC
. "$(dirname "$0")/lib.sh"
cat > t.ini <<'INI'
[model]
layers = 1
d_model = 16
heads = 2
vocab = 64
context = 16
[data]
source = synthetic
[train]
steps = 1
seq_len = 8
micro_batch = 2
global_batch = 2
INI
threads() { # ENV... -- ARGS...: the thread count on the run's first line
    local env=()
    while [ "$1" != -- ]; do env+=("$1"); shift; done
    shift
    env -u OMP_NUM_THREADS "${env[@]}" "$TESSERA" train t.ini "$@" > run.txt 2>&1 ||
        { cat run.txt; fail "train ${env[*]} $*"; }
    sed -nE 's/^train: .*, ([0-9]+) threads?$/\1/p' run.txt
}
cores=$(nproc)
[ "$(threads OMP_NUM_THREADS=1 --)" = 1 ] || { cat run.txt; fail "OMP_NUM_THREADS=1 did not give 1 thread"; }
[ "$(threads OMP_NUM_THREADS=3 --)" = 3 ] || { cat run.txt; fail "OMP_NUM_THREADS=3 did not give 3 threads"; }
[ "$(threads --)" = "$cores" ] || { cat run.txt; fail "unset: not the $cores cores"; }
[ "$(threads OMP_NUM_THREADS=1 -- --set train.threads=2)" = 2 ] ||
    { cat run.txt; fail "--set train.threads=2 did not win over OMP_NUM_THREADS=1"; }
[ "$(threads OMP_NUM_THREADS=bad -- --set train.threads=2)" = 2 ] ||
    { cat run.txt; fail "with [train] threads set, OMP_NUM_THREADS is not read"; }
echo "ok: OMP_NUM_THREADS=1 -> 1, =3 -> 3, unset -> $cores (cores), train.threads=2 wins"
for v in 0 -1 x 2.5 4,2 "" 4097 99999999999999999999; do
    env OMP_NUM_THREADS="$v" "$TESSERA" train t.ini > bad.txt 2>&1
    rc=$?
    [ $rc = 2 ] || { cat bad.txt; fail "OMP_NUM_THREADS='$v': exit status $rc, expected 2"; }
    # (libgomp may warn of the value too, on a line of its own.)
    [ "$(grep -c '^tessera:' bad.txt)" = 1 ] && grep -qF "tessera: OMP_NUM_THREADS = '$v' (environment)" bad.txt ||
        { cat bad.txt; fail "OMP_NUM_THREADS='$v': not one line naming the variable and its value"; }
done
echo "ok: refused, naming the variable: $(grep '^tessera:' bad.txt)"
echo PASS
