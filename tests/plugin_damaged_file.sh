#!/usr/bin/env bash
# plugin_damaged_file.sh — `tessera train` with a damaged plugin file, as a user
# meets it: the good test plugin copied and cut to half its size (dlopen of
# such a file dies of SIGBUS). The run must end with an error that names the
# file, and an exit status of 1..127: not 0, not a signal (128 + n).
#
# usage: plugin_damaged_file.sh TESSERA SOURCE_DIR GOOD_PLUGIN
set -u
tessera=$1
src=$2
good=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cp "$good" "$tmp/tessera-good.so"
truncate -s $(($(stat -c %s "$good") / 2)) "$tmp/tessera-good.so"
{
  cat "$src/configs/tiny.ini"
  printf '\n[parallel]\nplugins = good\nplugin_path = %s\n' "$tmp"
} >"$tmp/run.ini"

timeout 60 "$tessera" train "$tmp/run.ini" --set train.steps=1 >"$tmp/out" 2>&1
rc=$?
cat "$tmp/out"
echo "plugin_damaged_file.sh: exit status $rc"
fail=0
if [ "$rc" -eq 0 ] || [ "$rc" -ge 128 ] || [ "$rc" -eq 124 ]; then
  echo "plugin_damaged_file.sh: FAIL: expected an error exit (1..127), got $rc"
  fail=1
fi
want="plugin 'good': cannot load $tmp/tessera-good.so: truncated: its program headers say"
if ! grep -qF -- "$want" "$tmp/out"; then
  echo "plugin_damaged_file.sh: FAIL: the output lacks: $want"
  fail=1
fi
[ "$fail" -eq 0 ] && echo "plugin_damaged_file.sh: PASS"
exit "$fail"
