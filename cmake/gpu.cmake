# gpu.cmake — the GPU side of the core: the caching device allocator
# (core/backend/cuda/device_cuda.c) and the NCCL communicator (core/backend/cuda/comm_nccl.c), compiled
# with the CUDA runtime API and NCCL into the OBJECT library tessera_gpu.
#
# Does nothing unless TESSERA_CUDA is ON. Include it from the top-level
# CMakeLists.txt after TESSERA_CORE_SOURCES is globbed and before
# add_library(tessera ...): it takes its files out of that list (in a CPU-only
# build the core compiles them as stubs: no device, no NCCL), then link
#     target_link_libraries(tessera PRIVATE tessera_gpu)
# The objects land in libtessera; the PUBLIC definitions TESSERA_HAVE_CUDA=1
# and (when NCCL is found) TESSERA_HAVE_NCCL=1 reach the rest of the core.
# Without NCCL the allocator is still built and ts_comm_nccl_create stays a
# stub that fails with "built without NCCL".
if(NOT TESSERA_CUDA)
  return()
endif()
if(NOT DEFINED TESSERA_CORE_SOURCES)
  message(FATAL_ERROR "cmake/gpu.cmake: include it after TESSERA_CORE_SOURCES is globbed")
endif()

find_package(CUDAToolkit)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "GPU: the CUDA toolkit was not found: the device allocator and NCCL are left out")
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
                 "the NCCL communicator is left out")
endif()
list(REMOVE_ITEM TESSERA_CORE_SOURCES ${TESSERA_GPU_SOURCES})

add_library(tessera_gpu OBJECT ${TESSERA_GPU_SOURCES})
set_target_properties(tessera_gpu PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(tessera_gpu PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_compile_definitions(tessera_gpu PUBLIC TESSERA_HAVE_CUDA=1)
target_link_libraries(tessera_gpu PUBLIC CUDA::cudart MPI::MPI_C)
if(TESSERA_NCCL_INCLUDE AND TESSERA_NCCL_LIB)
  target_compile_definitions(tessera_gpu PUBLIC TESSERA_HAVE_NCCL=1)
  target_include_directories(tessera_gpu PRIVATE ${TESSERA_NCCL_INCLUDE})
  target_link_libraries(tessera_gpu PUBLIC ${TESSERA_NCCL_LIB})
endif()
