# cuda.cmake — tests of the CUDA kernels against the CPU reference kernels
# (`ctest -L cuda`): one executable, one ctest per kernel family. Each run
# draws fresh random inputs (seed printed; TS_TEST_SEED=S replays it). Without
# a GPU every test prints "SKIPPED: no CUDA device (...)" and exits 77, which
# ctest reports as skipped. Registered only when the CUDA kernels are built
# (TESSERA_CUDA ON and kernels/cuda/cuda.cmake included).
if(TESSERA_CUDA AND TARGET tessera_kernels_cuda)
  add_executable(test_cuda_kernels tests/cuda/test_cuda_kernels.c)
  # The CUDA kernels' objects themselves (libtessera does not carry them: they
  # live in the CUDA backend), over tessera for the CPU kernels and ts_error.
  target_link_libraries(test_cuda_kernels PRIVATE tessera_kernels_cuda tessera CUDA::cudart m)
  target_include_directories(test_cuda_kernels PRIVATE
    ${PROJECT_SOURCE_DIR}/kernels/cpu ${PROJECT_SOURCE_DIR}/kernels/cuda)

  set(TESSERA_CUDA_TEST_FAMILIES matmul_f32 matmul_bf16 embedding layernorm gelu
    attention residual crossentropy adamw reduce model_extra attention_bf16
    attention_block moe)
  foreach(family ${TESSERA_CUDA_TEST_FAMILIES})
    add_test(NAME cuda_${family} COMMAND test_cuda_kernels ${family})
    set_tests_properties(cuda_${family} PROPERTIES
      LABELS cuda SKIP_RETURN_CODE 77 ENVIRONMENT "${TESSERA_TEST_ENV}")
  endforeach()

  # The kernels of a Llama-class block (rmsnorm.cu, rope.cu, swiglu.cu,
  # gqa_attention.cu) against theirs, the same way: cuda_llama_FAMILY.
  add_executable(test_cuda_llama_kernels tests/cuda/test_cuda_llama_kernels.c)
  target_link_libraries(test_cuda_llama_kernels PRIVATE tessera_kernels_cuda tessera CUDA::cudart
    m)
  target_include_directories(test_cuda_llama_kernels PRIVATE
    ${PROJECT_SOURCE_DIR}/kernels/cpu ${PROJECT_SOURCE_DIR}/kernels/cuda)
  foreach(family rmsnorm rope swiglu gqa_attention)
    add_test(NAME cuda_llama_${family} COMMAND test_cuda_llama_kernels ${family})
    set_tests_properties(cuda_llama_${family} PROPERTIES
      LABELS cuda SKIP_RETURN_CODE 77 ENVIRONMENT "${TESSERA_TEST_ENV}")
  endforeach()
endif()
