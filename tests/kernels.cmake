# kernels.cmake — tests of the CPU reference kernels: one executable, one ctest
# per kernel (`ctest -R kernels_`). Each *_grad test checks the forward against
# a naive double-precision reference and the backward against finite
# differences, including that it accumulates (+=).
add_executable(test_kernels tests/test_kernels.c)
target_link_libraries(test_kernels PRIVATE tessera_kernels_cpu OpenMP::OpenMP_C m
  ${TESSERA_CBLAS_LIB})

set(TESSERA_KERNEL_TESTS
  "kernels_matmul_grad matmul"
  "kernels_embedding_grad embedding"
  "kernels_layernorm_grad layernorm"
  "kernels_gelu_grad gelu"
  "kernels_attention_grad attention"
  "kernels_attention_block_matches_whole attention_block"
  "kernels_attention_recompute_same_bits attention_recompute"
  "kernels_residual_grad residual"
  "kernels_crossentropy_grad crossentropy"
  "kernels_crossentropy_vocab_shards_match_full crossentropy_shards"
  "kernels_embedding_vocab_shards_match_full embedding_shards"
  "kernels_adamw_matches_formula adamw"
  "kernels_sumsq_bf16_rounding reduce"
  "kernels_backward_deterministic determinism"
  "kernels_tasks_each_once_and_shared tasks"
  "kernels_same_bits_on_1_2_3_threads threads")
foreach(entry ${TESSERA_KERNEL_TESTS})
  separate_arguments(entry)
  list(GET entry 0 test_name)
  list(GET entry 1 kernel)
  add_test(NAME ${test_name} COMMAND test_kernels ${kernel})
  set_tests_properties(${test_name} PROPERTIES
    LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()

# The same bits on 1, 2 and 3 threads under the kernels of every core
# OpenBLAS may pick (OPENBLAS_CORETYPE), where this CPU can run them: the
# products' tiles must fall where each core's micro-kernel sums alike
# (kernels/cpu/matmul.c). Skipped, saying why, for a core this CPU lacks.
foreach(core SkylakeX Cooperlake Haswell Zen Sandybridge Nehalem Core2)
  add_test(NAME kernels_same_bits_on_1_2_3_threads_${core}
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/blas_core.sh ${core} $<TARGET_FILE:test_kernels>
      $<TARGET_FILE:test_kernels> threads)
  set_tests_properties(kernels_same_bits_on_1_2_3_threads_${core} PROPERTIES
    LABELS core SKIP_RETURN_CODE 77 ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()

# And a whole training run's losses and gradient norms on 1, 2 and 3 threads
# (tests/cli/threads_same_bits.sh) under each of those cores' kernels.
foreach(core SkylakeX Cooperlake Haswell Zen Sandybridge Nehalem Core2)
  add_test(NAME cli_threads_same_bits_${core}
    COMMAND bash ${PROJECT_SOURCE_DIR}/tests/blas_core.sh ${core} $<TARGET_FILE:test_kernels>
      bash ${PROJECT_SOURCE_DIR}/tests/cli/threads_same_bits.sh $<TARGET_FILE:tessera_cli>
      ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli_threads_same_bits_${core} PROPERTIES
    LABELS core SKIP_RETURN_CODE 77 TIMEOUT 300 ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()

# The kernels of a Llama-class block (RMSNorm, rotary embeddings, SwiGLU,
# grouped-query attention): their own executable, the same checks.
add_executable(test_llama_kernels tests/test_llama_kernels.c)
target_link_libraries(test_llama_kernels PRIVATE tessera_kernels_cpu OpenMP::OpenMP_C m
  ${TESSERA_CBLAS_LIB})
set(TESSERA_LLAMA_KERNEL_TESTS
  "kernels_rmsnorm_grad rmsnorm"
  "kernels_rope_grad rope"
  "kernels_rope_inv_freq_llama3 rope_inv_freq"
  "kernels_swiglu_grad swiglu"
  "kernels_gqa_attention_grad gqa_attention"
  "kernels_gqa_attention_matches_repeated_mha gqa_attention_mha"
  "kernels_llama_same_bits_on_1_2_3_threads threads")
foreach(entry ${TESSERA_LLAMA_KERNEL_TESTS})
  separate_arguments(entry)
  list(GET entry 0 test_name)
  list(GET entry 1 kernel)
  add_test(NAME ${test_name} COMMAND test_llama_kernels ${kernel})
  set_tests_properties(${test_name} PROPERTIES
    LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()
# A head larger than the kernel's tiles stops the process naming it (it
# overran the stack before): the test passes on the message, whatever the
# exit status of the abort.
add_test(NAME kernels_gqa_attention_refuses_a_head_over_1024
  COMMAND bash -c "\"$0\" gqa_head_too_large 2>&1; echo \"exit status $?\""
    $<TARGET_FILE:test_llama_kernels>)
set_tests_properties(kernels_gqa_attention_refuses_a_head_over_1024 PROPERTIES
  LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}"
  PASS_REGULAR_EXPRESSION
    "ts_cpu_gqa_attention: head size 1025 outside \\[1, 1024\\].*exit status 134")
