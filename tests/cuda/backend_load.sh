# backend_load.sh — the CUDA backend is its own shared object, loaded only
# when a run needs a device, and a missing, damaged or foreign backend file
# is a clean error that names [train] device and the file.
#   bash backend_load.sh TESSERA SRC LIBTESSERA FAKE_DIR
# LIBTESSERA is libtessera.so; FAKE_DIR holds the stand-ins of
# tests/cuda/fake_backend.c (fake-abi.so, fake-name.so, fake-nosym.so,
# fake-refuse.so, fake-open.so). Checks, with TESSERA_BACKEND_PATH pointing
# at a directory whose tessera-backend-cuda.so is, in turn:
#   empty; truncated; a directory; a text file; built for backend ABI 2.0;
#   a backend named "rocm"; without the entry point; refusing the host table;
#   a valid backend whose open fails (its own message must come through);
# that `tessera train configs/tiny.ini --set train.device=cuda` exits non-zero
# (2, a configuration error) with "[train] device", the file's path (but for
# the valid one) and the reason in its message — on one rank, and once on 2 ranks (no hang). Then:
# no backend anywhere (libtessera copied to a directory without tessera/):
# the message lists the directories searched; a CPU run maps neither the
# backend nor libcudart, libcublas or libnccl (LD_DEBUG=files); and
# libtessera.so needs none of them (readelf -d).
. "$(dirname "$0")/../cli/lib.sh"
LIB=$3
FAKES=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
CUDA_LIBS='libcudart|libcublas|libnccl|tessera-backend-cuda'

# expect NAME REASON_REGEX [LAUNCHER ...]: the run (with $EXTRA settings)
# fails cleanly naming [train] device, the file and the reason.
expect() {
    local name=$1 reason=$2
    shift 2
    local file="$WORK/$name/tessera-backend-cuda.so"
    TESSERA_BACKEND_PATH="$WORK/$name" timeout 120 "$@" "$TESSERA" train "$SRC/configs/tiny.ini" \
        --set train.device=cuda --set train.steps=1 ${EXTRA:-} > $name.txt 2>&1
    local rc=$?
    cat $name.txt
    [ $rc -ne 0 ] || fail "$name: device = cuda with that backend file succeeded"
    [ $rc -ne 124 ] || fail "$name: the run hung"
    [ $rc -lt 128 ] || fail "$name: killed by signal $((rc - 128))"
    grep -q "\[train\] device" $name.txt || fail "$name: the message does not name [train] device"
    # A backend that loads speaks for itself (e.g. "no CUDA device is visible").
    [ $name = open ] || grep -qF "$file" $name.txt || fail "$name: the message does not name $file"
    grep -Eq "$reason" $name.txt || fail "$name: the message does not say '$reason'"
}

# stage NAME: an empty directory NAME for the backend file.
stage() { rm -rf "$WORK/$1" && mkdir -p "$WORK/$1"; }

stage empty && : > empty/tessera-backend-cuda.so
expect empty "is empty \(0 bytes\)"
stage truncated && head -c 3000 "$FAKES/fake-open.so" > truncated/tessera-backend-cuda.so
expect truncated "truncated"
stage directory && mkdir directory/tessera-backend-cuda.so
expect directory "not a regular file"
stage text && echo "not a library" > text/tessera-backend-cuda.so
expect text "is not an ELF shared object"
stage abi && cp "$FAKES/fake-abi.so" abi/tessera-backend-cuda.so
expect abi "built for backend ABI 2\.0, but this tessera speaks 1\."
stage name && cp "$FAKES/fake-name.so" name/tessera-backend-cuda.so
expect name "a backend named 'rocm', not 'cuda'"
stage nosym && cp "$FAKES/fake-nosym.so" nosym/tessera-backend-cuda.so
expect nosym "no symbol tessera_backend_descriptor"
stage refuse && cp "$FAKES/fake-refuse.so" refuse/tessera-backend-cuda.so
expect refuse "refused the core's host table: fake backend: this host table will not do"
stage open && cp "$FAKES/fake-open.so" open/tessera-backend-cuda.so
expect open "fake backend: open reached through the descriptor"
# Two ranks with data parallelism: both stop at the same point.
stage np2 && : > np2/tessera-backend-cuda.so
EXTRA="--set parallel.plugins=dp" expect np2 "is empty" mpirun --oversubscribe -np 2 \
    -x TESSERA_BACKEND_PATH

# No backend in any directory: libtessera alone in lib/, so that its
# built-in directory lib/tessera does not exist.
mkdir -p lib && cp -L "$LIB" lib/ || fail "cannot copy $LIB"
soname=$(readelf -d "$LIB" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$soname" ] && [ ! -e "lib/$soname" ] && cp -L "$LIB" "lib/$soname"
LD_LIBRARY_PATH="$WORK/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" TESSERA_BACKEND_PATH="$WORK/none" \
    "$TESSERA" train "$SRC/configs/tiny.ini" --set train.device=cuda --set train.steps=1 \
    > missing.txt 2>&1 && { cat missing.txt; fail "device = cuda without any backend succeeded"; }
cat missing.txt
grep -q "\[train\] device" missing.txt || fail "missing: the message does not name [train] device"
grep -qF "tessera-backend-cuda.so is not in $WORK/none, $WORK/lib/tessera" missing.txt ||
    fail "missing: the message does not list the directories searched"

# A CPU run maps no CUDA library and not the backend.
LD_DEBUG=files "$TESSERA" train "$SRC/configs/tiny.ini" --set train.steps=2 > cpu.txt 2>&1 ||
    { cat cpu.txt; fail "the CPU run failed"; }
if grep -E "$CUDA_LIBS" cpu.txt; then
    fail "the CPU run mapped the CUDA backend or a CUDA library (above)"
fi
grep -q "file=" cpu.txt || fail "LD_DEBUG=files printed nothing: the check above saw nothing"
# ... because libtessera needs none of them.
if command -v readelf > /dev/null; then
    readelf -d "$LIB" | grep NEEDED
    if readelf -d "$LIB" | grep NEEDED | grep -E "$CUDA_LIBS"; then
        fail "libtessera.so needs a CUDA library"
    fi
fi
echo PASS
