# cuda_backend.cmake — the CUDA backend as a file of its own (label core,
# every build, no GPU needed; core/backend/backend_abi.h is the contract):
#   backend_descriptor_checks  tests/cuda/test_backend_abi.c: the device.h
#                              calls that need no device load no backend, the
#                              host table, and every refusal of the
#                              descriptor check, in one process;
#   cuda_backend_load          tests/cuda/backend_load.sh: a missing, empty,
#                              truncated or foreign tessera-backend-cuda.so
#                              is a clean error of `tessera train` naming
#                              [train] device and the file (one rank and 2);
#                              a CPU run maps no CUDA library; libtessera.so
#                              needs none.
# The stand-in backends both use: tests/cuda/fake_backend.c, one MODULE per
# variant, made as a real backend is (cmake/gpu.cmake's
# tessera_backend_module) but into <build>/fake_backends/fake-VARIANT.so,
# where the loader never looks.
set(TESSERA_FAKE_BACKEND_DIR ${CMAKE_BINARY_DIR}/fake_backends)
foreach(entry "1|abi" "2|name" "3|nosym" "4|refuse" "5|open")
  string(REPLACE "|" ";" entry "${entry}")
  list(GET entry 0 variant)
  list(GET entry 1 name)
  add_library(tessera_fake_backend_${name} MODULE tests/cuda/fake_backend.c)
  tessera_backend_module(tessera_fake_backend_${name} ${TESSERA_FAKE_BACKEND_DIR})
  target_compile_definitions(tessera_fake_backend_${name} PRIVATE FAKE_VARIANT=${variant})
  set_target_properties(tessera_fake_backend_${name} PROPERTIES OUTPUT_NAME fake-${name})
endforeach()

add_executable(test_backend_abi tests/cuda/test_backend_abi.c)
target_link_libraries(test_backend_abi PRIVATE tessera ${CMAKE_DL_LIBS})
add_dependencies(test_backend_abi tessera_fake_backend_open)
add_test(NAME backend_descriptor_checks
  COMMAND test_backend_abi ${TESSERA_FAKE_BACKEND_DIR}/fake-open.so)
set_tests_properties(backend_descriptor_checks PROPERTIES LABELS core TIMEOUT 60
  ENVIRONMENT "${TESSERA_TEST_ENV}")

add_test(NAME cuda_backend_load
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cuda/backend_load.sh $<TARGET_FILE:tessera_cli>
    ${PROJECT_SOURCE_DIR} $<TARGET_FILE:tessera> ${TESSERA_FAKE_BACKEND_DIR})
set_tests_properties(cuda_backend_load PROPERTIES LABELS core TIMEOUT 300
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
