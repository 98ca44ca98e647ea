#!/usr/bin/env bash
# run.sh — the GPU benchmark of tessera, in one command, within 8 minutes:
#   1. configures and builds with the CUDA kernels (build-gpu/, sm_90 only
#      unless CUDA_ARCHS is set, to keep the build short);
#   2. runs the CUDA kernel tests, `ctest -L cuda` (each CUDA kernel against
#      its CPU reference on fresh random inputs);
#   3. measures the cuBLAS bf16 GEMM peak with bench/gpu/gemm_peak.cu
#      (8192^3, best of 10, TFLOP/s);
#   4. runs the training benchmark
#        build-gpu/bin/bench_step configs/gpt2-124m.ini --set train.device=cuda
#      and prints tokens/s, ms/step and MFU = model FLOP/s (bench_step's
#      "flops per step" over its median step time) / the measured GEMM peak.
#
# The training step runs the model's bf16 mode as configs/gpt2-124m.ini sets
# it: bf16 parameters, GEMMs (cuBLAS) and attention (attention_tc.cu) on
# tensor cores, f32 master weights, moments and reductions. If bench_step
# fails, the script says so and still prints steps 1-3.
#
# Usage: bench/gpu/run.sh            (from anywhere; BUILD=dir overrides build-gpu,
#                                     STEPS=n the timed training steps, default 10)
# Exit status: 0 when every step succeeded, 1 otherwise.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$root/build-gpu}
steps=${STEPS:-10}
archs=${CUDA_ARCHS:-90}
budget=470 # seconds: 8 minutes less a margin
start=$SECONDS
status=0
export PATH=/usr/local/cuda/bin:$PATH

left() { echo $((budget - (SECONDS - start))); }
phase() { printf '\n=== %s (%ds left) ===\n' "$1" "$(left)"; }
# Runs "$@" under the remaining time budget, at most $1 seconds.
run_for() {
    local cap=$1
    shift
    local t
    t=$(left)
    ((t > cap)) && t=$cap
    if ((t < 5)); then
        echo "run.sh: out of time before: $*" >&2
        return 124
    fi
    timeout --kill-after=5 "$t" "$@"
}

phase "device"
nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm --format=csv,noheader ||
    echo "run.sh: nvidia-smi failed (no GPU?)"

phase "build ($build, CUDA architectures $archs)"
run_for 240 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$archs" >"$build.cmake.log" 2>&1 ||
    { echo "run.sh: cmake failed, see $build.cmake.log"; tail -20 "$build.cmake.log"; exit 1; }
run_for 240 cmake --build "$build" -j"$(nproc)" >"$build.build.log" 2>&1 ||
    { echo "run.sh: build failed, see $build.build.log"; tail -30 "$build.build.log"; exit 1; }
echo "built in $((SECONDS - start)) s"

phase "ctest -L cuda"
(cd "$build" && run_for 120 ctest -L cuda --output-on-failure --timeout 60) || status=1

phase "cuBLAS bf16 GEMM peak"
peak_tflops=""
if run_for 60 nvcc -O3 -arch=native -o "$build/bin/gemm_peak" "$root/bench/gpu/gemm_peak.cu" \
    -lcublas; then
    out=$(run_for 60 "$build/bin/gemm_peak" 8192 10) || status=1
    echo "$out"
    peak_tflops=$(echo "$out" | sed -n 's/^gemm_peak bf16 .*: \([0-9.]*\) TFLOP\/s.*/\1/p')
else
    echo "run.sh: gemm_peak did not build"
    status=1
fi

phase "training: bench_step configs/gpt2-124m.ini --set train.device=cuda"
out=$(cd "$root" && run_for 200 "$build/bin/bench_step" configs/gpt2-124m.ini --steps "$steps" \
    --set train.device=cuda 2>&1)
rc=$?
echo "$out"
if ((rc != 0)); then
    echo "run.sh: bench_step failed (rc $rc): the training part needs the core's CUDA device path"
    status=1
else
    ms=$(echo "$out" | sed -n 's/^step *\([0-9.]*\) ms.*/\1/p')
    gflop=$(echo "$out" | sed -n 's/^flops per step *\([0-9.]*\) GFLOP.*/\1/p')
    tok=$(echo "$out" | sed -n 's/^tokens\/s *\([0-9.]*\).*/\1/p')
    echo
    echo "--- summary ---"
    echo "tokens/s     ${tok:-?}"
    echo "ms/step      ${ms:-?}"
    if [[ -n "$ms" && -n "$gflop" && -n "$peak_tflops" ]]; then
        awk -v g="$gflop" -v ms="$ms" -v p="$peak_tflops" 'BEGIN {
            a = g / (ms * 1e-3) * 1e-3;
            printf "model FLOP/s %.1f TFLOP/s\nGEMM peak    %.1f TFLOP/s (cuBLAS bf16, measured)\nMFU          %.1f%%\n", a, p, 100 * a / p }'
    else
        echo "MFU          ? (missing step time, FLOPs or GEMM peak)"
    fi
fi
echo
echo "run.sh: done in $((SECONDS - start)) s, status $status"
exit $status
