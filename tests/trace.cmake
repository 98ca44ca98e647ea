# trace.cmake — the trace recorder's tests (label core): test_trace, built
# from its sources directly. trace_unit runs without MPI (spans, args, name
# copies, overflow counting, lanes, write failures, NULL-trace no-ops);
# trace_np4 runs 4 ranks that record a pipeline-like step around real
# transfers and write one file collectively, which rank 0 parses and checks
# for spans of every rank.
if(NOT MPI_C_FOUND)
  message(STATUS "MPI not found: the trace tests are not built")
  return()
endif()

add_executable(test_trace
  ${PROJECT_SOURCE_DIR}/tests/test_trace.c
  ${PROJECT_SOURCE_DIR}/core/train/trace.c
  ${PROJECT_SOURCE_DIR}/core/base/file.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_request.c
  ${PROJECT_SOURCE_DIR}/core/base/phase.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_self.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_mpi.c
  ${PROJECT_SOURCE_DIR}/core/base/status.c
  ${PROJECT_SOURCE_DIR}/core/base/alloc.c
  ${PROJECT_SOURCE_DIR}/core/base/tensor.c)
target_include_directories(test_trace PRIVATE
  ${PROJECT_SOURCE_DIR}/include ${TESSERA_CORE_INCLUDE_DIRS})
target_link_libraries(test_trace PRIVATE MPI::MPI_C m)

add_test(NAME trace_unit COMMAND $<TARGET_FILE:test_trace>)
set_tests_properties(trace_unit PROPERTIES
  LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}" TIMEOUT 60)
add_test(NAME trace_np4
  COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 4 $<TARGET_FILE:test_trace> --mpi)
set_tests_properties(trace_np4 PROPERTIES
  LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}" TIMEOUT 60)
