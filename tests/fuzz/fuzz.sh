#!/usr/bin/env bash
# fuzz.sh — builds and runs the libFuzzer targets of tests/fuzz for ctest
# (tests/fuzz.cmake, label `fuzz`) and by hand (docs/fuzzing.md).
#
# usage: fuzz.sh build SOURCE_DIR BUILD_DIR [CLANG]
#          configures and builds tests/fuzz into BUILD_DIR with CLANG (default:
#          clang). Exit 77 (skipped), saying why, when clang or its libFuzzer
#          runtime is missing; 1 when the build itself fails.
#        fuzz.sh run SOURCE_DIR BUILD_DIR TARGET [SECONDS]
#          runs fuzz_TARGET for SECONDS (default 20) on a copy of its seed
#          corpus tests/fuzz/corpus/TARGET (for cluster: configs/clusters/*.ini)
#          plus fresh seeds from fuzz_seeds,
#          in BUILD_DIR/work/TARGET (the corpus grows there, crash files land
#          there). Prints the executions and coverage; exit 1 on any crash,
#          leak, sanitizer report, timeout (> 10 s for one input) or
#          out-of-memory (> 2048 MiB), printing the report and the command
#          that reproduces it; 77 when the build was skipped.
set -u
cmd=${1:-}
src=${2:-}
build=${3:-}
if [ -z "$cmd" ] || [ -z "$src" ] || [ -z "$build" ]; then
  sed -n '2,17p' "$0" >&2
  exit 2
fi

skip() { # records why the fuzz build is skipped, for the run steps too
  mkdir -p "$build"
  printf 'fuzz: SKIPPED: %s\n' "$*" | tee "$build/unavailable"
  exit 77
}

case "$cmd" in
build)
  cc=${4:-clang}
  rm -f "$build/unavailable"
  if ! command -v "$cc" >/dev/null 2>&1; then
    skip "no clang found ('$cc'); .ci/install-deps installs clang and libclang-rt-14-dev"
  fi
  probe=$(mktemp -d)
  trap 'rm -rf "$probe"' EXIT
  printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
    'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
    >"$probe/probe.c"
  if ! "$cc" -fsanitize=fuzzer,address,undefined "$probe/probe.c" -o "$probe/probe" \
    >"$probe/log" 2>&1; then
    tail -n 5 "$probe/log"
    skip "$cc cannot link a libFuzzer target (-fsanitize=fuzzer,address,undefined): the" \
      "libFuzzer runtime is missing (Debian: libclang-rt-14-dev)"
  fi
  start=$(date +%s)
  echo "== configure: $src/tests/fuzz -> $build ($("$cc" --version | head -n 1))"
  cmake -S "$src/tests/fuzz" -B "$build" -DCMAKE_C_COMPILER="$cc" >"$probe/configure.log" 2>&1 ||
    { cat "$probe/configure.log"; echo "fuzz: FAIL: configure"; exit 1; }
  echo "== build (-j2)"
  cmake --build "$build" -j2 >"$probe/build.log" 2>&1 ||
    { cat "$probe/build.log"; echo "fuzz: FAIL: build"; exit 1; }
  grep -E "warning:" "$probe/build.log" | sort -u | head -n 20
  echo "fuzz: built in $(($(date +%s) - start)) s: $(cd "$build" && ls fuzz_* | tr '\n' ' ')"
  ;;
run)
  target=${4:-}
  secs=${5:-20}
  [ -n "$target" ] || { echo "fuzz.sh run: no TARGET" >&2; exit 2; }
  if [ -f "$build/unavailable" ]; then
    cat "$build/unavailable"
    exit 77
  fi
  bin=$build/fuzz_$target
  [ -x "$bin" ] || { echo "fuzz: FAIL: $bin is not built (run fuzz.sh build first)"; exit 1; }
  work=$build/work/$target
  rm -rf "$work"
  mkdir -p "$work/corpus"
  cp "$src/tests/fuzz/corpus/$target"/* "$work/corpus/" 2>/dev/null
  # cluster files: the checked-in ones are seeds too
  [ "$target" = cluster ] && cp "$src/configs/clusters"/*.ini "$work/corpus/"
  # Inputs that once crashed this target: replayed first, so a bug that
  # comes back fails at once.
  cp "$src/tests/fuzz/regressions/$target"/* "$work/corpus/" 2>/dev/null
  "$build/fuzz_seeds" "$target" "$work/corpus" ||
    { echo "fuzz: FAIL: fuzz_seeds $target could not write the fresh seeds"; exit 1; }
  opts=(-max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1
    -artifact_prefix="$work/")
  "$build/fuzz_seeds" dict "$target" >"$work/dict"
  [ -s "$work/dict" ] && opts+=(-dict="$work/dict")
  seeds=$(ls "$work/corpus" | wc -l)
  echo "== fuzz_$target for ${secs}s on $seeds seed inputs (work dir $work)"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
  "$bin" "${opts[@]}" "$work/corpus" >"$work/log" 2>&1
  rc=$?
  grep -E "^INFO: Seed:" "$work/log"
  if [ "$rc" -ne 0 ]; then
    echo "---- the end of the log ($work/log) ----"
    tail -n 120 "$work/log"
    echo "----"
    for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
      [ -e "$a" ] && echo "fuzz: reproduce with: $bin $a"
    done
    echo "fuzz: FAIL: fuzz_$target exited with status $rc (a crash, leak, sanitizer report," \
      "timeout or out-of-memory above)"
    exit 1
  fi
  grep -E "^#[0-9]+[[:space:]]+DONE" "$work/log"
  grep -E "^stat::" "$work/log"
  done_line=$(grep -E "^#[0-9]+[[:space:]]+DONE" "$work/log" | tail -n 1)
  runs=$(sed -E 's/^#([0-9]+).*/\1/' <<<"$done_line")
  cov=$(sed -E 's/.* cov: ([0-9]+).*/\1/' <<<"$done_line")
  ft=$(sed -E 's/.* ft: ([0-9]+).*/\1/' <<<"$done_line")
  echo "fuzz_$target: $runs executions in ${secs}s, cov $cov, ft $ft, corpus" \
    "$(ls "$work/corpus" | wc -l) inputs (from $seeds): no crash"
  ;;
*)
  echo "fuzz.sh: unknown command $cmd (build or run)" >&2
  exit 2
  ;;
esac
