# cuda_train.cmake — training with [train] device = cuda (tests/cli/cuda_train.sh):
#   cuda_train_matches_cpu  configs/tiny.ini, 10 steps on the CPU and on one
#                           GPU: losses within 1e-4 relative (f32), bf16 close,
#                           resume and export through host buffers (label
#                           cuda; skipped, exit 77, without a GPU);
#   cuda_train_multi_gpu    dp 2, tp 2 (SP) and pp 2 on 2 GPUs over NCCL
#                           against the one-rank CPU run, with the same
#                           collectives as on 2 CPU ranks (label cuda;
#                           skipped under 2 GPUs);
#   cuda_train_no_device    without a GPU (or in a build without CUDA),
#                           device = cuda fails naming [train] device and
#                           why, on one rank and on 2 (label core; skipped
#                           where a GPU is present).
# tessera_cuda_probe (tests/cuda/cuda_probe.c) tells them apart.
add_executable(tessera_cuda_probe tests/cuda/cuda_probe.c)
target_link_libraries(tessera_cuda_probe PRIVATE tessera)

foreach(entry "matches_cpu|cuda|600" "multi_gpu|cuda|900" "no_device|core|180")
  string(REPLACE "|" ";" entry "${entry}")
  list(GET entry 0 mode)
  list(GET entry 1 label)
  list(GET entry 2 timeout)
  add_test(NAME cuda_train_${mode}
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/cuda_train.sh $<TARGET_FILE:tessera_cli>
      ${PROJECT_SOURCE_DIR} $<TARGET_FILE:tessera_cuda_probe> ${mode})
  set_tests_properties(cuda_train_${mode} PROPERTIES LABELS ${label} TIMEOUT ${timeout}
    SKIP_RETURN_CODE 77 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
endforeach()
