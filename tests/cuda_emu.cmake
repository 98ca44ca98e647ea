# cuda_emu.cmake — the GPU tests run on the host emulator of tests/cuda_emu/
# (include/cuda_emu.h says what it models and what it cannot), in every
# build: no GPU and no CUDA toolkit needed. Each kernels/cuda/*.cu is
# rewritten by cu2cc.py (launches and shared memory only) and compiled as C++
# against the emulator's stand-in headers for the CUDA runtime, cuBLAS and
# NCCL (implemented by libtessera_cuda_emu.so); the CUDA backend is built
# again over them as <build>/cuda_emu/tessera/tessera-backend-cuda.so, the
# core again as a static library (tessera_emu) that loads that backend, and
# the GPU tests' own sources are compiled against it unchanged. Label `emulated`
# (not `cuda`: `ctest -L cuda` stays the tests that need a real GPU, skipped
# without one); docs/gpu.md lists the tests.
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_FOUND)
  message(STATUS "emulated GPU tests: no python3 (cu2cc.py needs it): not built")
  return()
endif()
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

# The emulated CUDA runtime, cuBLAS and NCCL: one shared library standing in
# for libcudart, libcublas and libnccl, so that the emulated backend and the
# test programs that call the runtime themselves (test_nccl's own stream)
# share one emulated device, as they share one libcudart on a GPU.
set(TESSERA_EMU_DIR ${CMAKE_BINARY_DIR}/cuda_emu)
add_library(tessera_cuda_emu SHARED
  ${PROJECT_SOURCE_DIR}/tests/cuda_emu/cuda_emu.cc ${PROJECT_SOURCE_DIR}/tests/cuda_emu/nccl_emu.cc)
set_target_properties(tessera_cuda_emu PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${TESSERA_EMU_DIR})
target_link_libraries(tessera_cuda_emu PUBLIC MPI::MPI_C)
# The C API only (Open MPI's mpi.h pulls in its C++ bindings otherwise).
target_compile_definitions(tessera_cuda_emu PRIVATE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
# The emulated kernels (for the backend, and for the kernel test directly).
add_library(tessera_emu_kernels OBJECT ${TESSERA_EMU_GENERATED})
# The emulated CUDA backend, made as cmake/gpu.cmake makes the real one, over
# the emulated kernels and runtime: <build>/cuda_emu/tessera/tessera-backend-cuda.so.
add_library(tessera_emu_backend_cuda MODULE
  ${PROJECT_SOURCE_DIR}/core/backend/cuda/backend_cuda.c
  ${PROJECT_SOURCE_DIR}/core/backend/cuda/backend_host.c
  ${PROJECT_SOURCE_DIR}/core/backend/cuda/device_cuda.c
  ${PROJECT_SOURCE_DIR}/core/backend/cuda/comm_nccl.c
  $<TARGET_OBJECTS:tessera_emu_kernels>)
tessera_backend_module(tessera_emu_backend_cuda ${TESSERA_EMU_DIR}/tessera)
target_link_libraries(tessera_emu_backend_cuda PRIVATE tessera_cuda_emu MPI::MPI_C m stdc++)
# The core, as libtessera is (it knows no CUDA), static, looking for its
# backend in the emulator's directory instead of <build>/tessera.
file(GLOB TESSERA_EMU_CORE CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/core/*/*.c)
add_library(tessera_emu STATIC ${TESSERA_EMU_CORE} $<TARGET_OBJECTS:tessera_kernels_cpu>)
target_include_directories(tessera_emu PRIVATE
  ${PROJECT_SOURCE_DIR}/include ${TESSERA_CORE_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/kernels/cpu
  ${TESSERA_CBLAS_INCLUDE})
target_compile_definitions(tessera_emu PRIVATE TESSERA_BACKEND_DIR="${TESSERA_EMU_DIR}/tessera"
  TESSERA_CUDA_BACKEND_BUILT=1)
add_dependencies(tessera_emu tessera_emu_backend_cuda)
foreach(t tessera_cuda_emu tessera_emu_kernels tessera_emu_backend_cuda)
  # The stand-ins come first, so <cuda_runtime.h> and friends are never the toolkit's.
  target_include_directories(${t} BEFORE PRIVATE ${PROJECT_SOURCE_DIR}/tests/cuda_emu/include)
  target_include_directories(${t} PRIVATE
    ${PROJECT_SOURCE_DIR}/include ${TESSERA_CORE_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/kernels/cpu
    ${PROJECT_SOURCE_DIR}/kernels/cuda)
  target_compile_definitions(${t} PRIVATE TESSERA_HAVE_CUDA=1 TESSERA_HAVE_NCCL=1)
  set_target_properties(${t} PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON)
  # `#pragma unroll` is nvcc's.
  target_compile_options(${t} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-unknown-pragmas>)
endforeach()
target_link_libraries(tessera_emu PUBLIC OpenMP::OpenMP_C MPI::MPI_C PkgConfig::INIH
  ${TESSERA_CBLAS_LIB} ${CMAKE_DL_LIBS} m)

# The GPU kernel test, unchanged, over the emulated kernels (linked in: the
# kernels are not the core's), the emulated runtime and the core.
add_executable(test_cuda_kernels_emu ${PROJECT_SOURCE_DIR}/tests/cuda/test_cuda_kernels.c
  $<TARGET_OBJECTS:tessera_emu_kernels>)
target_link_libraries(test_cuda_kernels_emu PRIVATE tessera_cuda_emu stdc++)
add_executable(test_cuda_llama_kernels_emu ${PROJECT_SOURCE_DIR}/tests/cuda/test_cuda_llama_kernels.c
  $<TARGET_OBJECTS:tessera_emu_kernels>)
target_link_libraries(test_cuda_llama_kernels_emu PRIVATE tessera_cuda_emu stdc++)
# The program and the probe of the training tests, over the emulated library:
# they load the emulated backend as `tessera` loads the real one.
add_executable(tessera_emu_cli ${TESSERA_CLI_SOURCES})
add_executable(tessera_cuda_probe_emu ${PROJECT_SOURCE_DIR}/tests/cuda/cuda_probe.c)
# The GPU side's own tests, unchanged: the NCCL backend, the device allocator,
# the parallel context's device communicators (through the loaded backend).
add_executable(test_nccl_emu ${PROJECT_SOURCE_DIR}/tests/test_nccl.c)
target_link_libraries(test_nccl_emu PRIVATE tessera_cuda_emu) # its own stream
add_executable(test_device_alloc_emu ${PROJECT_SOURCE_DIR}/tests/test_device_alloc.c)
add_executable(test_parallel_emu ${PROJECT_SOURCE_DIR}/tests/test_parallel.c)
foreach(t test_cuda_kernels_emu test_cuda_llama_kernels_emu tessera_emu_cli tessera_cuda_probe_emu test_nccl_emu
    test_device_alloc_emu test_parallel_emu)
  target_include_directories(${t} BEFORE PRIVATE ${PROJECT_SOURCE_DIR}/tests/cuda_emu/include)
  target_include_directories(${t} PRIVATE
    ${PROJECT_SOURCE_DIR}/include ${TESSERA_CORE_INCLUDE_DIRS} ${PROJECT_SOURCE_DIR}/kernels/cpu
    ${PROJECT_SOURCE_DIR}/kernels/cuda)
  target_compile_definitions(${t} PRIVATE TESSERA_HAVE_CUDA=1 TESSERA_HAVE_NCCL=1)
  target_link_libraries(${t} PRIVATE tessera_emu)
endforeach()

set(TESSERA_EMU_FAMILIES matmul_f32 matmul_bf16 embedding layernorm gelu attention residual
  crossentropy adamw reduce model_extra attention_bf16 attention_block moe)
foreach(family ${TESSERA_EMU_FAMILIES})
  add_test(NAME cuda_emulated_${family} COMMAND test_cuda_kernels_emu ${family})
  set_tests_properties(cuda_emulated_${family} PROPERTIES LABELS emulated TIMEOUT 600
    ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()
# The Llama-class block's kernels (tests/cuda/test_cuda_llama_kernels.c).
foreach(family rmsnorm rope swiglu gqa_attention)
  add_test(NAME cuda_emulated_llama_${family} COMMAND test_cuda_llama_kernels_emu ${family})
  set_tests_properties(cuda_emulated_llama_${family} PROPERTIES LABELS emulated TIMEOUT 600
    ENVIRONMENT "${TESSERA_TEST_ENV}")
endforeach()
# Training on the emulated GPU against the CPU (tests/cli/cuda_train.sh,
# matches_cpu: f32 within 1e-4, bf16 within 2e-2, resume, export), and on
# two emulated GPUs. Not under the sanitizers: there the coroutines switch
# through ucontext (AddressSanitizer must see stack switches) and these runs
# take longer than their limits; the kernel, NCCL and allocator tests above
# and below still run under them.
if(NOT TESSERA_SANITIZE)
add_test(NAME cuda_emulated_train_matches_cpu
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/cuda_train.sh $<TARGET_FILE:tessera_emu_cli>
    ${PROJECT_SOURCE_DIR} $<TARGET_FILE:tessera_cuda_probe_emu> matches_cpu)
set_tests_properties(cuda_emulated_train_matches_cpu PROPERTIES LABELS emulated TIMEOUT 900
  ENVIRONMENT "${TESSERA_TEST_ENV}")
# Two emulated GPUs over the emulated NCCL: dp, tp (SP) and pp against the
# one-rank CPU run, with the same collectives as on CPU ranks.
add_test(NAME cuda_emulated_train_multi_gpu
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/cuda_train.sh $<TARGET_FILE:tessera_emu_cli>
    ${PROJECT_SOURCE_DIR} $<TARGET_FILE:tessera_cuda_probe_emu> multi_gpu)
set_tests_properties(cuda_emulated_train_multi_gpu PROPERTIES LABELS emulated TIMEOUT 1200
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
# The memory ledger on four emulated GPUs (tp 4, with and without SP): the
# allocator's activation peak equals `tessera plan`'s estimate for the GPU.
add_test(NAME tp_memory_emulated_gpu
  COMMAND bash ${PROJECT_SOURCE_DIR}/plugins/tp/tests/memory.sh $<TARGET_FILE:tessera_emu_cli>
    ${PROJECT_SOURCE_DIR} cuda)
set_tests_properties(tp_memory_emulated_gpu PROPERTIES LABELS emulated TIMEOUT 900
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
# bf16 activations in two bytes on the emulated GPU: plan = run, and one
# block adds half its f32 bytes plus its f32 statistics and LSE.
add_test(NAME bf16_memory_emulated_gpu
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/bf16_memory.sh $<TARGET_FILE:tessera_emu_cli>
    ${PROJECT_SOURCE_DIR} cuda)
set_tests_properties(bf16_memory_emulated_gpu PROPERTIES LABELS emulated TIMEOUT 600
  ENVIRONMENT "${TESSERA_TEST_ENV}")
# Activation recomputation on the emulated GPU (its attention keeps the
# log-sum-exp; selective runs the attention's forward again): the same bits
# as none, and the memory ledger against the plan.
add_test(NAME recompute_same_bits_emulated_gpu
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/recompute.sh $<TARGET_FILE:tessera_emu_cli>
    ${PROJECT_SOURCE_DIR} 1 16 fp32 1e-5 set=train.device=cuda recompute=selective,full)
add_test(NAME recompute_memory_emulated_gpu
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/recompute_memory.sh $<TARGET_FILE:tessera_emu_cli>
    ${PROJECT_SOURCE_DIR} cuda)
set_tests_properties(recompute_same_bits_emulated_gpu recompute_memory_emulated_gpu PROPERTIES
  LABELS emulated TIMEOUT 600 ENVIRONMENT "${TESSERA_TEST_ENV}")
# ZB-H1 on two emulated GPUs: the split backward (cuBLAS products without
# dinp or without dweight) gives 1F1B's bits.
add_test(NAME pp_zb_h1_same_bits_as_1f1b_emulated_gpu
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/same_bits.sh $<TARGET_FILE:tessera_emu_cli>
    ${PROJECT_SOURCE_DIR} 2 4 fp32 set=train.device=cuda --set parallel.plugins=pp --set pp.size=2
    -- --set pp.schedule=1f1b -- --set pp.schedule=zb_h1)
set_tests_properties(pp_zb_h1_same_bits_as_1f1b_emulated_gpu PROPERTIES LABELS emulated
  TIMEOUT 600 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
# Recovery across topologies on emulated GPUs: dp 2 x tp 2 (SP) for 10 steps,
# resumed on pp 2 for 10 more, against one CPU rank.
add_test(NAME resume_on_another_topology_emulated_gpu
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/cli/resume_topology.sh $<TARGET_FILE:tessera_emu_cli>
    ${PROJECT_SOURCE_DIR} cuda)
set_tests_properties(resume_on_another_topology_emulated_gpu PROPERTIES LABELS emulated
  TIMEOUT 900 ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
endif()

foreach(n 2 3)
  add_test(NAME nccl_emulated_np${n}
    COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np ${n} $<TARGET_FILE:test_nccl_emu>)
  set_tests_properties(nccl_emulated_np${n} PROPERTIES LABELS emulated TIMEOUT 300
    ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
endforeach()
add_test(NAME nccl_emulated_timeout
  COMMAND bash ${PROJECT_SOURCE_DIR}/tests/run_expect_fail.sh 20
    "collective timeout after 2s on axis 'nccl-dp': all_reduce #1 \\(count 1000 f32\\) did not complete"
    "last 16 communication operations on this rank"
    --
    ${MPIEXEC_EXECUTABLE} --oversubscribe -np 2 $<TARGET_FILE:test_nccl_emu> --timeout-abort)
set_tests_properties(nccl_emulated_timeout PROPERTIES LABELS emulated TIMEOUT 90
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
add_test(NAME device_alloc_emulated COMMAND test_device_alloc_emu)
set_tests_properties(device_alloc_emulated PROPERTIES LABELS emulated TIMEOUT 120
  ENVIRONMENT "${TESSERA_TEST_ENV}")
add_test(NAME parallel_comms_emulated_np4
  COMMAND ${MPIEXEC_EXECUTABLE} --oversubscribe -np 4 $<TARGET_FILE:test_parallel_emu>)
set_tests_properties(parallel_comms_emulated_np4 PROPERTIES LABELS emulated TIMEOUT 120
  ENVIRONMENT "${TESSERA_MPI_TEST_ENV}")
