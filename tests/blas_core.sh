#!/usr/bin/env bash
# blas_core.sh CORE PROBE CMD... — runs CMD with OpenBLAS forced to CORE's
# kernels (OPENBLAS_CORETYPE), so that a claim about the GEMM's bits (the
# same on any thread count) is checked on the kernels of every core OpenBLAS
# may pick, not only this CPU's own. Skips (exit 77) when this CPU lacks an
# instruction set CORE's kernels use (they would die of SIGILL); fails when
# OpenBLAS does not run CORE's kernels after all (PROBE blas_core says which
# it runs).
set -u
core=$1 probe=$2
shift 2
case $core in
SkylakeX) need="avx512f avx512cd avx512bw avx512dq avx512vl" ;;
Cooperlake) need="avx512f avx512cd avx512bw avx512dq avx512vl avx512_bf16" ;;
Haswell | Zen) need="avx2 fma" ;;
Sandybridge) need="avx" ;;
Nehalem) need="ssse3 sse4_1 sse4_2" ;;
Core2) need="ssse3" ;;
*) echo "blas_core.sh: no instruction sets known for core '$core'" >&2; exit 2 ;;
esac
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
for f in $need; do
    case $flags in *" $f "*) ;; *) echo "SKIP: this CPU has no $f, which $core's kernels use"; exit 77 ;; esac
done
export OPENBLAS_CORETYPE=$core
got=$("$probe" blas_core | sed -n 's/^ *OpenBLAS core: *//p')
[ "$got" = "$core" ] || { echo "FAIL: OPENBLAS_CORETYPE=$core, but OpenBLAS runs '$got' kernels"; exit 1; }
echo "OpenBLAS runs $core's kernels"
exec "$@"
