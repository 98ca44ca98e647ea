# gpu.cmake — the CUDA backend, tessera-backend-cuda.so: a shared object of
# its own, which the core opens with dlopen only when a run needs a device
# (core/backend/backend_load.c; the contract is core/backend/backend_abi.h).
# It holds core/backend/cuda/ (the ops table and its descriptor, the caching
# device allocator, the NCCL communicator, the forwarders of the host table)
# and the CUDA kernels (tessera_kernels_cuda), and links cudart, cuBLAS and
# NCCL. libtessera links none of them, so a CPU run maps no CUDA library.
#
# Include it from the top-level CMakeLists.txt after kernels/cuda/cuda.cmake
# and before the tests. It always defines tessera_backend_module() (the
# emulator's build, tests/cuda_emu.cmake, makes its backend with it too); the
# rest only when TESSERA_CUDA is ON and the toolkit is found:
#   tessera_gpu           OBJECT: device_cuda.c, and comm_nccl.c when NCCL is
#                         found (TESSERA_HAVE_CUDA=1, TESSERA_HAVE_NCCL=1);
#                         tests/gpu.cmake compiles its tests over it directly;
#   tessera_backend_cuda  MODULE <build>/tessera/tessera-backend-cuda.so, next
#                         to the plugins (installed into <libdir>/tessera by
#                         cmake/tessera-install.cmake).
# Without NCCL the backend's descriptor has no NCCL slots, and the core's
# ts_comm_nccl_create fails saying the backend was built without NCCL.

# tessera_backend_module(TARGET DIR): makes the MODULE target TARGET a device
# backend file DIR/tessera-backend-cuda.so: no "lib" prefix, hidden symbols
# with only the entry point tessera_backend_descriptor exported (a version
# script), and no undefined symbol left to the core (it reaches the core
# through the host table only, so it loads under any copy of the core).
set(TESSERA_BACKEND_MAP ${CMAKE_BINARY_DIR}/tessera-backend.map)
file(WRITE ${TESSERA_BACKEND_MAP} "{ global: tessera_backend_descriptor; local: *; };\n")
function(tessera_backend_module target dir)
  set_target_properties(${target} PROPERTIES PREFIX "" SUFFIX ".so"
    OUTPUT_NAME tessera-backend-cuda LIBRARY_OUTPUT_DIRECTORY ${dir}
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
    LINK_DEPENDS ${TESSERA_BACKEND_MAP})
  target_link_options(${target} PRIVATE -Wl,--no-undefined
    -Wl,--version-script=${TESSERA_BACKEND_MAP})
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/include
    ${PROJECT_SOURCE_DIR}/core/backend ${PROJECT_SOURCE_DIR}/core/backend/cuda)
endfunction()

if(NOT TESSERA_CUDA)
  return()
endif()

find_package(CUDAToolkit)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "GPU: the CUDA toolkit was not found: no CUDA backend")
  return()
endif()

# NCCL ships with the toolkit here (/usr/local/cuda/include/nccl.h), elsewhere
# under NCCL_HOME or the system prefixes.
find_path(TESSERA_NCCL_INCLUDE nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
find_library(TESSERA_NCCL_LIB nccl
  HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)

set(TESSERA_GPU_SOURCES ${PROJECT_SOURCE_DIR}/core/backend/cuda/device_cuda.c)
if(TESSERA_NCCL_INCLUDE AND TESSERA_NCCL_LIB)
  list(APPEND TESSERA_GPU_SOURCES ${PROJECT_SOURCE_DIR}/core/backend/cuda/comm_nccl.c)
  message(STATUS "GPU: CUDA ${CUDAToolkit_VERSION}, NCCL ${TESSERA_NCCL_LIB}")
else()
  message(STATUS "GPU: CUDA ${CUDAToolkit_VERSION}; NCCL not found (nccl.h, libnccl): "
                 "the CUDA backend has no NCCL communicator")
endif()

add_library(tessera_gpu OBJECT ${TESSERA_GPU_SOURCES})
set_target_properties(tessera_gpu PROPERTIES POSITION_INDEPENDENT_CODE ON
  C_VISIBILITY_PRESET hidden)
target_include_directories(tessera_gpu PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_compile_definitions(tessera_gpu PUBLIC TESSERA_HAVE_CUDA=1)
target_link_libraries(tessera_gpu PUBLIC CUDA::cudart MPI::MPI_C)
if(TESSERA_NCCL_INCLUDE AND TESSERA_NCCL_LIB)
  target_compile_definitions(tessera_gpu PUBLIC TESSERA_HAVE_NCCL=1)
  target_include_directories(tessera_gpu PRIVATE ${TESSERA_NCCL_INCLUDE})
  target_link_libraries(tessera_gpu PUBLIC ${TESSERA_NCCL_LIB})
endif()

# The backend: the ops table and descriptor, the host-table forwarders, the
# allocator and NCCL (tessera_gpu) and the kernels (tessera_kernels_cuda,
# which brings cudart, cuBLAS and cuBLASLt).
add_library(tessera_backend_cuda MODULE
  ${PROJECT_SOURCE_DIR}/core/backend/cuda/backend_cuda.c
  ${PROJECT_SOURCE_DIR}/core/backend/cuda/backend_host.c)
target_link_libraries(tessera_backend_cuda PRIVATE tessera_gpu tessera_kernels_cuda)
tessera_backend_module(tessera_backend_cuda $<TARGET_FILE_DIR:tessera>/tessera)
set_target_properties(tessera_backend_cuda PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

# The core's message for a missing backend says the build made one.
set_property(SOURCE ${PROJECT_SOURCE_DIR}/core/backend/backend_load.c APPEND PROPERTY
  COMPILE_DEFINITIONS TESSERA_CUDA_BACKEND_BUILT=1)
