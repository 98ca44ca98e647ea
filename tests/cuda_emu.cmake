# cuda_emu.cmake — every CUDA kernel run on the host by the emulator of
# tests/cuda_emu/ (include/cuda_emu.h says what it models and what it
# cannot), against the CPU kernels, in every build: no GPU and no CUDA
# toolkit needed. Each kernels/cuda/*.cu is rewritten by cu2cc.py (launches
# and shared memory only) and compiled as C++ against the emulator's stand-in
# headers; tests/cuda/test_cuda_kernels.c, the GPU test, is compiled against
# them unchanged. One ctest per family, cuda_emulated_FAMILY (label cuda),
# with the GPU test's tolerances.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
enable_language(CXX)
file(GLOB TESSERA_EMU_CU CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu)
set(TESSERA_EMU_GENERATED "")
foreach(cu ${TESSERA_EMU_CU})
  get_filename_component(name ${cu} NAME_WE)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu/${name}.cc)
  add_custom_command(OUTPUT ${out}
    COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/tests/cuda_emu/cu2cc.py ${cu} ${out}
    DEPENDS ${cu} ${PROJECT_SOURCE_DIR}/tests/cuda_emu/cu2cc.py
    COMMENT "cu2cc ${name}.cu")
  list(APPEND TESSERA_EMU_GENERATED ${out})
endforeach()
file(MAKE_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR}/cuda_emu)

add_executable(test_cuda_kernels_emu
  ${PROJECT_SOURCE_DIR}/tests/cuda/test_cuda_kernels.c
  ${TESSERA_EMU_GENERATED}
  ${PROJECT_SOURCE_DIR}/tests/cuda_emu/cuda_emu.cc
  ${PROJECT_SOURCE_DIR}/core/status.c
  $<TARGET_OBJECTS:tessera_kernels_cpu>)
# The stand-ins come first, so <cuda_runtime.h> and friends are never the toolkit's.
target_include_directories(test_cuda_kernels_emu BEFORE PRIVATE
  ${PROJECT_SOURCE_DIR}/tests/cuda_emu/include)
target_include_directories(test_cuda_kernels_emu PRIVATE
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/kernels/cpu
  ${PROJECT_SOURCE_DIR}/kernels/cuda ${TESSERA_CBLAS_INCLUDE})
set_target_properties(test_cuda_kernels_emu PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
# `#pragma unroll` is nvcc's; the kernels' unused-parameter style is nvcc-clean.
target_compile_options(test_cuda_kernels_emu PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:-Wno-unknown-pragmas>)
target_link_libraries(test_cuda_kernels_emu PRIVATE OpenMP::OpenMP_C ${TESSERA_CBLAS_LIB} m)

set(TESSERA_EMU_FAMILIES matmul_f32 matmul_bf16 embedding layernorm gelu attention residual
  crossentropy adamw reduce model_extra attention_bf16)
foreach(family ${TESSERA_EMU_FAMILIES})
  add_test(NAME cuda_emulated_${family} COMMAND test_cuda_kernels_emu ${family})
  set_tests_properties(cuda_emulated_${family} PROPERTIES LABELS cuda TIMEOUT 600
    ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()
