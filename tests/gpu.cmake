# gpu.cmake — tests of the GPU side of the core: the caching device
# allocator and the NCCL communicator (label cuda; the host-backed pool test
# runs everywhere, label core). Built from their sources, like
# test_comm: the allocator and NCCL objects of the CUDA backend (tessera_gpu)
# linked straight into the test with the core files they call, not loaded
# through tessera-backend-cuda.so (the emulated copies, tests/cuda_emu.cmake,
# go through the loader).
#
#   device_alloc_host  the allocator's pool over host memory: its logic on any
#                      machine, with or without CUDA;
#   device_alloc       the real allocator on one GPU (skipped without one);
#   nccl_np2           the NCCL backend on 2 ranks (skipped under 2 GPUs);
#   nccl_timeout       a rank that never joins an all_reduce: the job must end
#                      with the timeout message (skipped under 2 GPUs).
# A test exits 77 to be reported as skipped (SKIP_RETURN_CODE).
add_executable(test_device_alloc_host
  ${PROJECT_SOURCE_DIR}/tests/test_device_alloc.c
  ${PROJECT_SOURCE_DIR}/core/backend/cuda/device_cuda.c
  ${PROJECT_SOURCE_DIR}/core/base/status.c
  ${PROJECT_SOURCE_DIR}/core/base/alloc.c)
target_compile_definitions(test_device_alloc_host PRIVATE TS_DEVICE_HOST_BACKING=1)
target_include_directories(test_device_alloc_host PRIVATE ${PROJECT_SOURCE_DIR}/include)
find_package(Threads REQUIRED)
target_link_libraries(test_device_alloc_host PRIVATE Threads::Threads)
add_test(NAME device_alloc_host COMMAND test_device_alloc_host)
set_tests_properties(device_alloc_host PROPERTIES
  LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}" TIMEOUT 120)

if(NOT TARGET tessera_gpu)
  message(STATUS "GPU tests: no tessera_gpu target (no CUDA): only device_alloc_host")
  return()
endif()

set(tessera_gpu_test_core
  ${PROJECT_SOURCE_DIR}/core/comm/comm.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_request.c
  ${PROJECT_SOURCE_DIR}/core/base/phase.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_self.c
  ${PROJECT_SOURCE_DIR}/core/comm/comm_mpi.c
  ${PROJECT_SOURCE_DIR}/core/base/status.c
  ${PROJECT_SOURCE_DIR}/core/base/alloc.c
  ${PROJECT_SOURCE_DIR}/core/base/tensor.c)

add_executable(test_device_alloc ${PROJECT_SOURCE_DIR}/tests/test_device_alloc.c
  ${tessera_gpu_test_core})
target_include_directories(test_device_alloc PRIVATE ${PROJECT_SOURCE_DIR}/include
  ${TESSERA_CORE_INCLUDE_DIRS})
target_link_libraries(test_device_alloc PRIVATE tessera_gpu Threads::Threads m)
add_test(NAME device_alloc COMMAND test_device_alloc)
set_tests_properties(device_alloc PROPERTIES
  LABELS cuda ENVIRONMENT "${TESSERA_TEST_ENV}" TIMEOUT 120 SKIP_RETURN_CODE 77)

if(NOT TESSERA_NCCL_INCLUDE OR NOT TESSERA_NCCL_LIB)
  message(STATUS "GPU tests: NCCL not found: nccl_np2 and nccl_timeout are not built")
  return()
endif()

add_executable(test_nccl ${PROJECT_SOURCE_DIR}/tests/test_nccl.c ${tessera_gpu_test_core})
target_include_directories(test_nccl PRIVATE ${PROJECT_SOURCE_DIR}/include
  ${TESSERA_CORE_INCLUDE_DIRS})
target_link_libraries(test_nccl PRIVATE tessera_gpu CUDA::cudart MPI::MPI_C m)

add_test(NAME nccl_np2
  COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 2 $<TARGET_FILE:test_nccl>)
set_tests_properties(nccl_np2 PROPERTIES
  LABELS cuda ENVIRONMENT "${TESSERA_TEST_ENV}" TIMEOUT 300 SKIP_RETURN_CODE 77)

# `test_nccl --probe 2` exits 77 under 2 GPUs, which skips the test; else the
# 2-rank job must abort within 20 s with the message and the recent operations.
add_test(NAME nccl_timeout
  COMMAND sh -c "\"$0\" --probe 2 || exit $?; exec bash \"$@\""
    $<TARGET_FILE:test_nccl>
    ${CMAKE_CURRENT_LIST_DIR}/run_expect_fail.sh 20
    "collective timeout after 2s on axis 'nccl-dp': all_reduce #1 \\(count 1000 f32\\) did not complete"
    "last 16 communication operations on this rank"
    --
    ${MPIEXEC_EXECUTABLE} --oversubscribe -np 2 $<TARGET_FILE:test_nccl> --timeout-abort)
set_tests_properties(nccl_timeout PROPERTIES
  LABELS cuda ENVIRONMENT "${TESSERA_TEST_ENV}" TIMEOUT 90 SKIP_RETURN_CODE 77)
