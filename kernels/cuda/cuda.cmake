# cuda.cmake — the CUDA kernels: an OBJECT library tessera_kernels_cuda built
# from kernels/cuda/*.cu for sm_80 and sm_90 (override with
# -DCMAKE_CUDA_ARCHITECTURES=...), with cudart, cuBLAS and cuBLASLt as link
# requirements and TESSERA_HAVE_CUDA=1 for whoever links it.
#
# Included by the top-level CMakeLists.txt only when TESSERA_CUDA is ON, after
# the tessera_kernels_cpu target exists (the .cu files include cpu_kernels.h
# for shared constants) and before the tests (tests/cuda.cmake registers the
# `cuda` label's tests against it). cmake/gpu.cmake links it into the CUDA
# backend, tessera-backend-cuda.so, never into the `tessera` library; the
# kernels' calls of ts_error reach the core through the backend's host table.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES "80;90")
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

file(GLOB TESSERA_CUDA_KERNEL_SOURCES CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_LIST_DIR}/*.cu)
add_library(tessera_kernels_cuda OBJECT ${TESSERA_CUDA_KERNEL_SOURCES})
set_target_properties(tessera_kernels_cuda PROPERTIES
  POSITION_INDEPENDENT_CODE ON
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  CUDA_SEPARABLE_COMPILATION OFF)
target_include_directories(tessera_kernels_cuda PUBLIC
  ${CMAKE_CURRENT_LIST_DIR}
  ${PROJECT_SOURCE_DIR}/include
  ${PROJECT_SOURCE_DIR}/kernels/cpu)
# The directory's add_compile_options (-Wall -Wextra -O3 -march=...,
# -fsanitize=...) are gcc flags that nvcc rejects: drop them for this target
# and give nvcc its own, for host and device code. --Werror all-warnings keeps
# every .cu warning-free.
set_property(TARGET tessera_kernels_cuda PROPERTY COMPILE_OPTIONS "")
target_compile_options(tessera_kernels_cuda PRIVATE
  -Xcompiler=-Wall,-Wextra --Werror=all-warnings)
target_compile_definitions(tessera_kernels_cuda PUBLIC TESSERA_HAVE_CUDA=1)
target_link_libraries(tessera_kernels_cuda PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt)
