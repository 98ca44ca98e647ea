# cuda_emu.cmake — CUDA kernels run on the host by the emulator in
# tests/cuda_emu/ (thread-by-thread coroutines, block-wide barriers, WMMA
# tiles computed per lane), against the CPU kernels: the tensor-core
# attention (attention_tc_emulated). Needs no GPU and no CUDA toolkit, so it
# runs in every build (label cuda).
enable_language(CXX)
add_executable(test_attention_tc_emu
  ${PROJECT_SOURCE_DIR}/tests/cuda_emu/test_attention_tc_emu.cc
  ${PROJECT_SOURCE_DIR}/tests/cuda_emu/cuda_emu.cc)
target_include_directories(test_attention_tc_emu BEFORE PRIVATE
  ${PROJECT_SOURCE_DIR}/tests/cuda_emu)
target_include_directories(test_attention_tc_emu PRIVATE
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/kernels/cpu
  ${PROJECT_SOURCE_DIR}/kernels/cuda)
set_target_properties(test_attention_tc_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
# The kernels' `#pragma unroll` is nvcc's.
target_compile_options(test_attention_tc_emu PRIVATE -Wno-unknown-pragmas)
target_link_libraries(test_attention_tc_emu PRIVATE tessera m)
add_test(NAME attention_tc_emulated COMMAND test_attention_tc_emu)
set_tests_properties(attention_tc_emulated PROPERTIES LABELS cuda TIMEOUT 300
  ENVIRONMENT "${TESSERA_TEST_ENV}")
