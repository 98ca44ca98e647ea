# Ranks launched with different configurations (an MPMD launch with another
# override on one side) are refused at start-up: every rank fails with a
# message naming the key, the values and the ranks holding each; a launch
# whose ranks agree (same values written differently) trains.
. "$(dirname "$0")/lib.sh"
CFG="$SRC/configs/tiny.ini"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
mpi() { timeout -s KILL 120 mpirun --oversubscribe --bind-to none "$@"; }
common=(train "$CFG" --set parallel.plugins=dp --set train.steps=2)

mpi -np 1 "$TESSERA" "${common[@]}" --set train.lr=0.002 : -np 2 "$TESSERA" "${common[@]}" \
    > lr.out 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || { cat lr.out; fail "lr differs: exit status $rc"; }
grep -q "the ranks run different configurations (after --set): \[train\] lr = 0.002 on rank 0; = 0.003 on ranks 1, 2" \
    lr.out || { cat lr.out; fail "lr differs: no clear message"; }
grep -q "^step" lr.out && fail "lr differs: trained anyway"
echo "ok: $(grep -m1 'different configurations' lr.out)"

mpi -np 2 "$TESSERA" "${common[@]}" : -np 1 "$TESSERA" "${common[@]}" --set model.layers=3 \
    > layers.out 2>&1
rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || { cat layers.out; fail "layers differ: exit status $rc"; }
grep -q "\[model\] layers = 2 on ranks 0, 1; = 3 on rank 2" layers.out ||
    { cat layers.out; fail "layers differ: no clear message"; }
echo "ok: $(grep -m1 'different configurations' layers.out)"

# The same values written differently agree.
mpi -np 1 "$TESSERA" "${common[@]}" --set train.lr=1e-3 : -np 1 "$TESSERA" "${common[@]}" \
    --set train.lr=0.0010 > same.out 2>&1 || { cat same.out; fail "equal values refused"; }
grep -q "^step     2/2" same.out || { cat same.out; fail "equal values: did not train"; }
echo "PASS"
