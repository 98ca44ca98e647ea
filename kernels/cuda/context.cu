/*
 * context.cu — the process's CUDA context as the kernels see it: device
 * probing (ts_cuda_available), the chosen device, the stream every kernel is
 * enqueued on, the cuBLAS and cuBLASLt handles, and the error functions
 * behind TS_CUDA_CHECK / TS_CUBLAS_CHECK.
 *
 * One context per process (a rank drives one GPU). The state is plain static
 * data, set up by ts_cuda_init and not guarded for concurrent init/free.
 */
#include <cublasLt.h>
#include <stdio.h>

#include "cuda_common.h"

static int g_device = -1;
static cudaStream_t g_own_stream = NULL; /* created by ts_cuda_init */
static cudaStream_t g_stream = NULL;     /* the one kernels use */
static cublasHandle_t g_cublas = NULL;
static cublasLtHandle_t g_cublaslt = NULL;

ts_status ts_cuda_error_at(cudaError_t err, const char *call, const char *file, int line) {
    ts_status code = err == cudaErrorMemoryAllocation ? TS_ERR_NOMEM : TS_ERR_INTERNAL;
    return ts_error(code, "cuda: %s:%d: %s: %s: %s", file, line, call, cudaGetErrorName(err),
                    cudaGetErrorString(err));
}

ts_status ts_cublas_error_at(cublasStatus_t st, const char *call, const char *file, int line) {
    ts_status code = st == CUBLAS_STATUS_ALLOC_FAILED ? TS_ERR_NOMEM : TS_ERR_INTERNAL;
    return ts_error(code, "cuda: %s:%d: %s: %s: %s", file, line, call, cublasGetStatusName(st),
                    cublasGetStatusString(st));
}

int ts_cuda_available(char *reason, size_t reason_len) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    const char *why = NULL;
    char buf[256];
    if (err != cudaSuccess) {
        snprintf(buf, sizeof buf, "cudaGetDeviceCount: %s: %s", cudaGetErrorName(err),
                 cudaGetErrorString(err));
        why = buf;
        (void)cudaGetLastError(); /* clear the sticky-free error state */
    } else if (n == 0) {
        why = "cudaGetDeviceCount found 0 devices";
    }
    if (!why) return 1;
    if (reason && reason_len) snprintf(reason, reason_len, "%s", why);
    return 0;
}

ts_status ts_cuda_init(int device) {
    if (g_device >= 0) {
        if (device == g_device) return TS_OK;
        return ts_error(TS_ERR_INVALID, "cuda: ts_cuda_init(%d): already initialised on device %d",
                        device, g_device);
    }
    char why[256];
    if (!ts_cuda_available(why, sizeof why))
        return ts_error(TS_ERR_INVALID, "cuda: ts_cuda_init(%d): no CUDA device (%s)", device, why);
    int n = 0;
    TS_CUDA_CHECK(cudaGetDeviceCount(&n));
    if (device < 0 || device >= n)
        return ts_error(TS_ERR_INVALID, "cuda: ts_cuda_init(%d): device out of range [0, %d)",
                        device, n);
    TS_CUDA_CHECK(cudaSetDevice(device));
    TS_CUDA_CHECK(cudaStreamCreateWithFlags(&g_own_stream, cudaStreamNonBlocking));
    TS_CUBLAS_CHECK(cublasCreate(&g_cublas));
    TS_CUBLAS_CHECK(cublasSetStream(g_cublas, g_own_stream));
    TS_CUBLAS_CHECK(cublasSetPointerMode(g_cublas, CUBLAS_POINTER_MODE_HOST));
    TS_CUBLAS_CHECK(cublasSetMathMode(g_cublas, CUBLAS_DEFAULT_MATH));
    TS_CUBLAS_CHECK(cublasLtCreate(&g_cublaslt));
    g_stream = g_own_stream;
    g_device = device;
    return TS_OK;
}

void ts_cuda_free(void) {
    if (g_device < 0) return;
    if (g_stream) (void)cudaStreamSynchronize(g_stream);
    if (g_cublaslt) (void)cublasLtDestroy(g_cublaslt);
    if (g_cublas) (void)cublasDestroy(g_cublas);
    if (g_own_stream) (void)cudaStreamDestroy(g_own_stream);
    g_cublaslt = NULL;
    g_cublas = NULL;
    g_own_stream = g_stream = NULL;
    g_device = -1;
}

int ts_cuda_device(void) {
    return g_device;
}

struct CUstream_st *ts_cuda_stream(void) {
    return g_stream;
}

ts_status ts_cuda_set_stream(struct CUstream_st *stream) {
    if (g_device < 0)
        return ts_error(TS_ERR_INVALID, "cuda: ts_cuda_set_stream: ts_cuda_init not called");
    cudaStream_t s = stream ? stream : g_own_stream;
    TS_CUBLAS_CHECK(cublasSetStream(g_cublas, s));
    g_stream = s;
    return TS_OK;
}

struct cublasContext *ts_cuda_cublas(void) {
    return g_cublas;
}

struct cublasLtContext *ts_cuda_cublaslt(void) {
    return g_cublaslt;
}

ts_status ts_cuda_sync(void) {
    TS_CUDA_CHECK(cudaStreamSynchronize(g_stream));
    TS_CUDA_CHECK(cudaGetLastError());
    return TS_OK;
}
