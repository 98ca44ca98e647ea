/*
 * cuda_runtime_api.h — the emulator's CUDA runtime (tests/cuda_emu): the
 * types and calls tessera's kernels and tests use, over host memory.
 * Each process sees TS_EMU_DEVICES devices (default 8; every MPI rank is its
 * own process, so ranks never share memory) of TS_EMU_DEVICE_MIB MiB each
 * (default 16384; cudaMalloc beyond it fails with cudaErrorMemoryAllocation).
 * Kernels, copies and memsets run synchronously when issued. The only
 * asynchronous work is the emulated NCCL's (nccl.h), whose operations stay
 * pending on their stream until their MPI requests complete: cudaEventRecord
 * captures a stream's pending operations, cudaEventQuery tests them
 * (cudaErrorNotReady until done), cudaStreamWaitEvent and the synchronize
 * calls wait for them. cudaPointerGetAttributes knows the blocks of
 * cudaMalloc. A launch the hardware would refuse sets the error
 * cudaGetLastError returns. C and C++.
 */
#ifndef TESSERA_EMU_CUDA_RUNTIME_API_H
#define TESSERA_EMU_CUDA_RUNTIME_API_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNotReady = 600,
    cudaErrorLaunchOutOfResources = 701,
} cudaError_t;

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
#define cudaEventDisableTiming 0x02
enum cudaMemoryType {
    cudaMemoryTypeUnregistered = 0,
    cudaMemoryTypeHost = 1,
    cudaMemoryTypeDevice = 2,
    cudaMemoryTypeManaged = 3,
};
struct cudaPointerAttributes {
    enum cudaMemoryType type;
    int device;
    void *devicePointer;
    void *hostPointer;
};
typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;
typedef enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
} cudaFuncAttribute;
#define cudaStreamNonBlocking 0x01

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorName(cudaError_t err);
const char *cudaGetErrorString(cudaError_t err);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamCreate(cudaStream_t *stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attr, const void *ptr);
cudaError_t cudaMalloc(void **ptr, size_t bytes);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream);
cudaError_t cudaMemset(void *ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream);
/* The emulator's side of cudaFuncSetAttribute (cuda_runtime.h). */
cudaError_t emu_func_set_attribute(const void *func, cudaFuncAttribute attr, int value);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_EMU_CUDA_RUNTIME_API_H */
