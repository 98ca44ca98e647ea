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
