# layout.cmake — layouts and redistribution (label core): test_layout, built
# from its sources directly. layout_unit runs the serial mode (no MPI:
# local-block arithmetic, printing, errors, the layout plan, redistribution on
# a size-1 communicator); layout_np2/4/8 run every (from, to) placement pair
# on even and uneven global shapes, with empty shards, in f32, bf16 and i32,
# and on 4 and 8 ranks a two-axis mesh.
if(NOT MPI_C_FOUND)
  message(STATUS "MPI not found: the layout tests are not built")
  return()
endif()

add_executable(test_layout
  ${PROJECT_SOURCE_DIR}/tests/test_layout.c
  ${PROJECT_SOURCE_DIR}/core/mesh/layout.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_request.c
  ${PROJECT_SOURCE_DIR}/core/base/phase.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_self.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_mpi.c
  ${PROJECT_SOURCE_DIR}/core/base/status.c
  ${PROJECT_SOURCE_DIR}/core/base/alloc.c
  ${PROJECT_SOURCE_DIR}/core/base/tensor.c)
target_include_directories(test_layout PRIVATE
  ${PROJECT_SOURCE_DIR}/include ${TESSERA_CORE_INCLUDE_DIRS})
target_link_libraries(test_layout PRIVATE MPI::MPI_C m)

add_test(NAME layout_unit COMMAND $<TARGET_FILE:test_layout> --unit)
set_tests_properties(layout_unit PROPERTIES
  LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}" TIMEOUT 120)
foreach(n 2 4 8)
  add_test(NAME layout_np${n}
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${n} $<TARGET_FILE:test_layout>)
  set_tests_properties(layout_np${n} PROPERTIES
    LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}" TIMEOUT 120)
endforeach()
