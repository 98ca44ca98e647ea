# comm.cmake — the communicator's tests (label core): test_comm, built from
# its sources directly, runs every operation against serial references on
# 1 (MPI singleton), 2, 3, 4 and 8 ranks; comm_timeout checks that a rank
# that never joins a collective makes the others abort the job with a message
# naming the timeout, the axis and the op.
if(NOT MPI_C_FOUND)
  message(STATUS "MPI not found: the communicator tests are not built")
  return()
endif()

add_executable(test_comm
  ${PROJECT_SOURCE_DIR}/tests/test_comm.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_request.c
  ${PROJECT_SOURCE_DIR}/core/base/phase.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_self.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_mpi.c
  ${PROJECT_SOURCE_DIR}/core/base/status.c
  ${PROJECT_SOURCE_DIR}/core/base/alloc.c
  ${PROJECT_SOURCE_DIR}/core/base/tensor.c)
target_include_directories(test_comm PRIVATE
  ${PROJECT_SOURCE_DIR}/include ${TESSERA_CORE_INCLUDE_DIRS})
target_link_libraries(test_comm PRIVATE MPI::MPI_C m)

# Without a launcher the world is the self communicator (no MPI):
# TESSERA_COMM_WORLD=mpi keeps the MPI singleton under test here.
add_test(NAME comm_np1 COMMAND $<TARGET_FILE:test_comm>)
set_tests_properties(comm_np1 PROPERTIES
  LABELS core ENVIRONMENT "${TESSERA_TEST_ENV};TESSERA_COMM_WORLD=mpi" TIMEOUT 120)
foreach(n 2 3 4 8)
  add_test(NAME comm_np${n}
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${n} $<TARGET_FILE:test_comm>)
  set_tests_properties(comm_np${n} PROPERTIES
    LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}" TIMEOUT 120)
endforeach()

# 3 ranks, timeout 2 s: the job must end non-zero within 15 s, with the
# message, and with the record of recent operations.
add_test(NAME comm_timeout
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/run_expect_fail.sh 15
    "collective timeout after 2s on axis 'dp': all_reduce #2 \\(count 1000 f32\\) did not complete"
    "last 16 communication operations on this rank"
    --
    ${MPIEXEC_EXECUTABLE} --oversubscribe -np 3 $<TARGET_FILE:test_comm> --timeout-abort)
set_tests_properties(comm_timeout PROPERTIES
  LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}" TIMEOUT 90)
