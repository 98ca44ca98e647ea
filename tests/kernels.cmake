# kernels.cmake — the CPU reference kernels' tests: one executable, one ctest
# per kernel (`ctest -R kernels_`), each a forward check against a naive
# double-precision reference plus a finite-difference check of the backward.
add_executable(test_kernels tests/test_kernels.c)
target_link_libraries(test_kernels PRIVATE tessera_kernels_cpu OpenMP::OpenMP_C m
  ${TESSERA_CBLAS_LIB})

foreach(kernel matmul embedding layernorm gelu attention residual crossentropy
               adamw reduce determinism)
  add_test(NAME kernels_${kernel}_grad COMMAND test_kernels ${kernel})
  set_tests_properties(kernels_${kernel}_grad PROPERTIES
    LABELS core ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()
