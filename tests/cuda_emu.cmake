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

# The emulated kernels, and the whole library built over them with CUDA on
# (TESSERA_HAVE_CUDA: the CUDA backend, the device allocator; NCCL stays a
# stub), as a static library for the emulated programs below.
add_library(tessera_emu_kernels OBJECT ${TESSERA_EMU_GENERATED}
  ${PROJECT_SOURCE_DIR}/tests/cuda_emu/cuda_emu.cc)
file(GLOB TESSERA_EMU_CORE CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/core/*.c)
add_library(tessera_emu STATIC ${TESSERA_EMU_CORE} $<TARGET_OBJECTS:tessera_kernels_cpu>
  $<TARGET_OBJECTS:tessera_emu_kernels>)
foreach(t tessera_emu_kernels tessera_emu)
  # The stand-ins come first, so <cuda_runtime.h> and friends are never the toolkit's.
  target_include_directories(${t} BEFORE PRIVATE ${PROJECT_SOURCE_DIR}/tests/cuda_emu/include)
  target_include_directories(${t} PRIVATE
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/core ${PROJECT_SOURCE_DIR}/kernels/cpu
    ${PROJECT_SOURCE_DIR}/kernels/cuda ${TESSERA_CBLAS_INCLUDE})
  target_compile_definitions(${t} PRIVATE TESSERA_HAVE_CUDA=1)
  set_target_properties(${t} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  # `#pragma unroll` is nvcc's.
  target_compile_options(${t} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-unknown-pragmas>)
endforeach()
target_link_libraries(tessera_emu PUBLIC OpenMP::OpenMP_C MPI::MPI_C PkgConfig::INIH
  ${TESSERA_CBLAS_LIB} ${CMAKE_DL_LIBS} m stdc++)

# The GPU kernel test, unchanged, over the emulated kernels.
add_executable(test_cuda_kernels_emu ${PROJECT_SOURCE_DIR}/tests/cuda/test_cuda_kernels.c)
# The program and the probe of the training tests, over the emulated library.
add_executable(tessera_emu_cli ${PROJECT_SOURCE_DIR}/apps/tessera.c)
add_executable(tessera_cuda_probe_emu ${PROJECT_SOURCE_DIR}/tests/cuda/cuda_probe.c)
foreach(t test_cuda_kernels_emu tessera_emu_cli tessera_cuda_probe_emu)
  target_include_directories(${t} BEFORE PRIVATE ${PROJECT_SOURCE_DIR}/tests/cuda_emu/include)
  target_include_directories(${t} PRIVATE
    ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/core ${PROJECT_SOURCE_DIR}/kernels/cpu
    ${PROJECT_SOURCE_DIR}/kernels/cuda)
  target_compile_definitions(${t} PRIVATE TESSERA_HAVE_CUDA=1)
  target_link_libraries(${t} PRIVATE tessera_emu)
endforeach()

set(TESSERA_EMU_FAMILIES matmul_f32 matmul_bf16 embedding layernorm gelu attention residual
  crossentropy adamw reduce model_extra attention_bf16)
foreach(family ${TESSERA_EMU_FAMILIES})
  add_test(NAME cuda_emulated_${family} COMMAND test_cuda_kernels_emu ${family})
  set_tests_properties(cuda_emulated_${family} PROPERTIES LABELS cuda TIMEOUT 600
    ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()
# Training on the emulated GPU against the CPU (tests/cli/cuda_train.sh,
# matches_cpu: f32 within 1e-4, bf16 within 2e-2, resume, export).
add_test(NAME cuda_emulated_train_matches_cpu
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/cuda_train.sh $<TARGET_FILE:tessera_emu_cli>
    ${PROJECT_SOURCE_DIR} $<TARGET_FILE:tessera_cuda_probe_emu> matches_cpu)
set_tests_properties(cuda_emulated_train_matches_cpu PROPERTIES LABELS cuda TIMEOUT 900
  ENVIRONMENT "${TESSERA_TEST_ENV}")
