# lib.sh — helpers for the command-line tests: each test script is run by
# ctest as `bash SCRIPT TESSERA_BINARY SOURCE_DIR` in a fresh work directory.
set -u
TESSERA=$1
SRC=$2
WORK=$(mktemp -d "${TMPDIR:-/tmp}/tessera-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1

fail() { echo "FAIL: $*" >&2; exit 1; }

# The value of a numeric field in the JSONL line of a given step.
metric() { # FILE STEP FIELD
    grep "^{\"step\":$2," "$1" | sed -E "s/.*\"$3\":([^,}]*).*/\1/"
}
