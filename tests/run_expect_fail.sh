#!/usr/bin/env bash
# run_expect_fail.sh — runs a command that must fail, for tests of failure paths
# (a job that must abort). Passes when the command exits non-zero (but was not
# killed by the hard limit), within MAX_SECONDS, and its combined output
# matches every REGEX (grep -E, one line each).
#
# usage: run_expect_fail.sh MAX_SECONDS REGEX [REGEX ...] -- COMMAND [ARGS ...]
# The command is killed after 60 s (or MAX_SECONDS + 30, if larger).
set -u
if [ $# -lt 3 ]; then
  echo "usage: $0 MAX_SECONDS REGEX [REGEX ...] -- COMMAND [ARGS ...]" >&2
  exit 2
fi
max=$1
shift
regexes=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  regexes+=("$1")
  shift
done
if [ $# -lt 2 ]; then
  echo "run_expect_fail.sh: no command after --" >&2
  exit 2
fi
shift
hard=$((max + 30 > 60 ? max + 30 : 60))
out=$(mktemp)
trap 'rm -f "$out"' EXIT
start=$(date +%s.%N)
timeout "$hard" "$@" >"$out" 2>&1
rc=$?
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
cat "$out"
echo "run_expect_fail.sh: exit status $rc after ${elapsed}s"
fail=0
if [ "$rc" -eq 0 ]; then
  echo "run_expect_fail.sh: FAIL: the command succeeded, it must fail"
  fail=1
elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
  echo "run_expect_fail.sh: FAIL: the command hung and was killed after ${hard}s"
  fail=1
fi
if awk -v e="$elapsed" -v m="$max" 'BEGIN { exit !(e > m) }'; then
  echo "run_expect_fail.sh: FAIL: took ${elapsed}s, the limit is ${max}s"
  fail=1
fi
for re in "${regexes[@]}"; do
  if ! grep -Eq -- "$re" "$out"; then
    echo "run_expect_fail.sh: FAIL: the output does not match: $re"
    fail=1
  fi
done
[ "$fail" -eq 0 ] && echo "run_expect_fail.sh: PASS"
exit "$fail"
