# parallel.cmake — the parallel context (core/parallel/parallel.h) on 4 ranks
# (tp 2 x dp 2): host and device communicators per token, the plugins'
# "host:" resolver, per-token counters, and ts_parallel_open_device, which
# fails cleanly here (no GPU) and gives NCCL communicators with a GPU per
# rank (label core).
if(NOT MPI_C_FOUND)
  return()
endif()
add_executable(test_parallel ${PROJECT_SOURCE_DIR}/tests/test_parallel.c)
target_include_directories(test_parallel PRIVATE ${TESSERA_CORE_INCLUDE_DIRS})
target_link_libraries(test_parallel PRIVATE tessera)
add_test(NAME parallel_comms_np4
  COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 4 $<TARGET_FILE:test_parallel>)
set_tests_properties(parallel_comms_np4 PROPERTIES LABELS core TIMEOUT 120
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
