# A single-rank run that no launcher started does not start MPI: the world
# is the self communicator. Under `ulimit -f 1` (no file may exceed 1 KiB)
# Open MPI's singleton start-up fails or hangs (its PMIx daemon cannot size
# its segment file); tessera train configs/tiny.ini must end within the
# timeout all the same:
#   - its output on a pipe (nothing it writes to a file): it trains and exits 0;
#   - with [train] metrics = FILE: it stops non-zero with its own error
#     naming the metrics file ("File too large").
# TESSERA_COMM_WORLD=mpi still starts an MPI singleton (no ulimit), mpirun -np 1
# still runs on MPI, and another TESSERA_COMM_WORLD is refused by name.
# Usage: alone_without_mpi.sh TESSERA SRC
. "$(dirname "$0")/lib.sh"
# Nothing in this test's environment may look like a launcher's.
for v in OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_RANK PMIX_RANK PMIX_NAMESPACE PMI_RANK PMI_SIZE \
    PMI_FD PMI_PORT MPI_LOCALNRANKS MV2_COMM_WORLD_RANK SLURM_PROCID SLURM_STEP_ID \
    TESSERA_COMM_WORLD; do
    unset $v
done
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
tiny=(train "$SRC/configs/tiny.ini" --set train.steps=5)

# limited OUT CMD...: CMD under `ulimit -f 1` and a 60 s timeout, its output
# through a pipe into OUT (written by cat, outside the limit); rc in $rc.
limited() {
    local out=$1
    shift
    (ulimit -f 1 && exec timeout 60 "$@") 2>&1 | cat > "$out"
    rc=${PIPESTATUS[0]}
}

limited alone.txt "$TESSERA" "${tiny[@]}"
[ $rc = 124 ] && { cat alone.txt; fail "a run alone under ulimit -f 1 hung (timeout)"; }
[ $rc = 0 ] || { cat alone.txt; fail "a run alone under ulimit -f 1 failed (rc $rc)"; }
grep -q '^step     5/5 | loss' alone.txt || { cat alone.txt; fail "no step 5"; }
echo "ok: alone under ulimit -f 1: $(grep '^step     5/5' alone.txt | cut -c1-40)"

limited metrics.txt "$TESSERA" "${tiny[@]}" --set train.metrics=m.jsonl
[ $rc = 124 ] && { cat metrics.txt; fail "a run alone with metrics under ulimit -f 1 hung"; }
[ $rc = 0 ] && fail "metrics past the file-size limit were accepted"
grep -q "tessera: metrics m.jsonl: write failed: File too large" metrics.txt ||
    { cat metrics.txt; fail "no error naming the metrics file"; }
echo "ok: metrics under ulimit -f 1: $(grep 'metrics m.jsonl' metrics.txt)"

TESSERA_COMM_WORLD=mpi timeout 120 "$TESSERA" "${tiny[@]}" --set train.steps=2 > single.txt 2>&1 ||
    { cat single.txt; fail "TESSERA_COMM_WORLD=mpi: the MPI singleton failed"; }
grep -q '^step     2/2 | loss' single.txt || { cat single.txt; fail "singleton: no step 2"; }
timeout 120 mpirun --oversubscribe --bind-to none -np 1 "$TESSERA" "${tiny[@]}" --set train.steps=2 \
    > np1.txt 2>&1 || { cat np1.txt; fail "mpirun -np 1 failed"; }
grep -q '^step     2/2 | loss' np1.txt || { cat np1.txt; fail "mpirun -np 1: no step 2"; }
# The same first losses alone, as a singleton and under mpirun.
a=$(grep '^step     1/5' alone.txt | cut -d'|' -f2)
for f in single.txt np1.txt; do
    [ "$(grep '^step     1/2' $f | cut -d'|' -f2)" = "$a" ] || fail "$f: step 1's loss differs from the run alone's ($a)"
done
echo "ok: TESSERA_COMM_WORLD=mpi and mpirun -np 1 train as before (step 1:$a)"

TESSERA_COMM_WORLD=yes "$TESSERA" "${tiny[@]}" > bad.txt 2>&1 && fail "TESSERA_COMM_WORLD=yes was accepted"
grep -q "TESSERA_COMM_WORLD=yes: expected mpi (always start MPI) or auto" bad.txt ||
    { cat bad.txt; fail "no message naming TESSERA_COMM_WORLD"; }
echo "PASS"
