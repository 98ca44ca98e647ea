# The dp plugin's suite: ctest -L dp.
add_executable(test_dp_weighting ${CMAKE_CURRENT_SOURCE_DIR}/tests/test_dp_weighting.c)
target_link_libraries(test_dp_weighting PRIVATE tessera)
add_dependencies(test_dp_weighting tessera_plugin_dp)

set(dp_tests ${CMAKE_CURRENT_SOURCE_DIR}/tests)
set(dp_cli $<TARGET_FILE:tessera_cli> ${PROJECT_SOURCE_DIR})
# name | script arguments after TESSERA SRC
set(dp_cases
  "dp_equivalence_np2|equivalence.sh 2 8 fp32 1e-5"
  "dp_equivalence_np4|equivalence.sh 4 4 fp32 1e-5"
  "dp_equivalence_np8|equivalence.sh 8 2 fp32 1e-5"
  "dp_equivalence_np2_accumulation|equivalence.sh 2 4 fp32 1e-5"
  "dp_equivalence_np4_accumulation|equivalence.sh 4 2 fp32 1e-5"
  "dp_equivalence_np2_masked_tokens|equivalence.sh 2 8 fp32 1e-5 masked"
  "dp_equivalence_np2_bf16|equivalence.sh 2 8 bf16 1e-3"
  "dp_uneven_data_stops_cleanly|uneven_data.sh"
  "dp_bytes_and_buckets|bytes_buckets.sh")
foreach(entry ${dp_cases})
  string(REPLACE "|" ";" entry "${entry}")
  list(GET entry 0 name)
  list(GET entry 1 args)
  separate_arguments(args)
  list(GET args 0 script)
  list(REMOVE_AT args 0)
  add_test(NAME ${name} COMMAND bash ${dp_tests}/${script} ${dp_cli} ${args})
  set_tests_properties(${name} PROPERTIES LABELS dp TIMEOUT 300
    ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
endforeach()
add_test(NAME dp_loss_weighting_2_5_not_2
  COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 2 $<TARGET_FILE:test_dp_weighting>)
set_tests_properties(dp_loss_weighting_2_5_not_2 PROPERTIES LABELS dp TIMEOUT 120
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
