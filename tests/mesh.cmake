# mesh.cmake — the process-mesh unit test: dense and expert rank groups
# checked against Megatron-LM's documented examples and an independent
# re-derivation, plus size and order errors. Pure logic, no MPI.
add_executable(test_mesh tests/test_mesh.c core/mesh/mesh.c core/base/status.c)
target_include_directories(test_mesh PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/include)
add_test(NAME mesh_groups COMMAND test_mesh)
set_tests_properties(mesh_groups PROPERTIES
  LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}")
