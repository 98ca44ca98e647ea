# lib.sh — what every multi-rank benchmark script starts with, sourced as
#     . "$(dirname "$0")/lib.sh" "$@"
# TESSERA: the binary of BUILD_DIR (the first argument, default build); a
# scratch directory made current and removed on exit; one thread per rank
# (N ranks share the machine's cores) and mpirun allowed as root.
set -euo pipefail
BUILD=${1:-build}
TESSERA=$(cd "$BUILD" && pwd)/bin/tessera
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
