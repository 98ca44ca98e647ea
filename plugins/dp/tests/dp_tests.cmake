# The dp plugin's suite: ctest -L dp.
add_executable(test_dp_weighting ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_dp_weighting.c)
target_link_libraries(test_dp_weighting PRIVATE tessera)
add_dependencies(test_dp_weighting tessera_plugin_dp)

set(dp_tests ${CMAKE_CURRENT_SOURCE_DIR}/tests)
# name | script arguments after TESSERA SRC
set(equiv ${PROJECT_SOURCE_DIR}/tests/cli/equivalence.sh)
set(dp_on "--set parallel.plugins=dp")
# name | script | arguments after TESSERA SRC (equivalence: NP MICRO DTYPE TOL MODE SETS)
set(dp_cases
  "dp_equivalence_np2|${equiv}|2 8 fp32 1e-5 plain ${dp_on}"
  "dp_equivalence_np4|${equiv}|4 4 fp32 1e-5 plain ${dp_on}"
  "dp_equivalence_np8|${equiv}|8 2 fp32 1e-5 plain ${dp_on}"
  "dp_equivalence_np2_accumulation|${equiv}|2 4 fp32 1e-5 plain ${dp_on}"
  "dp_equivalence_np4_accumulation|${equiv}|4 2 fp32 1e-5 plain ${dp_on}"
  "dp_equivalence_np2_masked_tokens|${equiv}|2 8 fp32 1e-5 masked ${dp_on}"
  "dp_equivalence_np2_bf16|${equiv}|2 8 bf16 1e-3 plain ${dp_on}"
  "dp_equivalence_np2_bf16_grad_reduction|${equiv}|2 8 bf16 1e-3 plain ${dp_on} --set dp.grad_dtype=bf16"
  "dp_equivalence_np4_bf16_grad_reduction|${equiv}|4 4 bf16 1e-3 plain ${dp_on} --set dp.grad_dtype=bf16"
  "dp_recompute_np2_same_bits|${PROJECT_SOURCE_DIR}/tests/cli/recompute.sh|2 8 fp32 1e-5 plain ${dp_on}"
  "dp_recompute_np2_accumulation_bf16|${PROJECT_SOURCE_DIR}/tests/cli/recompute.sh|2 4 bf16 1e-3 plain ${dp_on}"
  "dp_uneven_data_stops_cleanly|${dp_tests}/uneven_data.sh|"
  "dp_bytes_and_buckets|${dp_tests}/bytes_buckets.sh|")
tessera_script_tests(dp ${dp_cases})
add_test(NAME dp_loss_weighting_2_5_not_2
  COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 2 $<TARGET_FILE:test_dp_weighting>)
set_tests_properties(dp_loss_weighting_2_5_not_2 PROPERTIES LABELS dp TIMEOUT 120
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
