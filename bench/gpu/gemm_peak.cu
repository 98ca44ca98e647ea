/*
 * gemm_peak.cu — the cuBLAS bf16 GEMM rate of this GPU, the ceiling that
 * bench/gpu/run.sh divides the training throughput by (MFU).
 *
 *   gemm_peak [N] [REPS]      (default 8192 and 10)
 *
 * C (N, N) bf16 = A^T B with A, B (N, N) bf16 holding random values in
 * [-1, 1) (random data, not zeros: the tensor cores draw more power on it),
 * f32 accumulation (CUBLAS_COMPUTE_32F), the transposes of tessera's forward
 * GEMM. One warm-up call, then REPS calls each timed with CUDA events; prints
 * the best as "gemm_peak bf16 N^3: X TFLOP/s (best of REPS)". Exits 77 when
 * there is no CUDA device. Standalone: depends on cudart and cuBLAS only.
 */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "gemm_peak: %s: %s\n", #call, cudaGetErrorString(e_));                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)
#define CB(call)                                                                                   \
    do {                                                                                           \
        cublasStatus_t s_ = (call);                                                                \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                         \
            fprintf(stderr, "gemm_peak: %s: %s\n", #call, cublasGetStatusString(s_));              \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

__global__ static void fill_random(__nv_bfloat16 *x, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 16;
        h *= 0x7feb352du;
        h ^= h >> 15;
        x[i] = __float2bfloat16((float)h / 2147483648.0f - 1.0f);
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 8192, reps = argc > 2 ? atoi(argv[2]) : 10;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    size_t nn = (size_t)n * n;
    __nv_bfloat16 *a, *b, *c;
    CK(cudaMalloc(&a, nn * sizeof *a));
    CK(cudaMalloc(&b, nn * sizeof *b));
    CK(cudaMalloc(&c, nn * sizeof *c));
    fill_random<<<4096, 256>>>(a, nn, 1u);
    fill_random<<<4096, 256>>>(b, nn, 2u);
    CK(cudaGetLastError());
    cublasHandle_t h;
    CB(cublasCreate(&h));
    const float one = 1.0f, zero = 0.0f;
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    float best = 1e30f;
    for (int r = 0; r <= reps; r++) {
        CK(cudaEventRecord(t0));
        CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, n, n, &one, a, CUDA_R_16BF, n, b,
                        CUDA_R_16BF, n, &zero, c, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT));
        CK(cudaEventRecord(t1));
        CK(cudaEventSynchronize(t1));
        float ms = 0.0f;
        CK(cudaEventElapsedTime(&ms, t0, t1));
        if (r > 0 && ms < best) best = ms; /* r = 0 is the warm-up */
    }
    double tflops = 2.0 * n * (double)n * n / (best * 1e-3) * 1e-12;
    printf("device %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount);
    printf("gemm_peak bf16 %d^3: %.1f TFLOP/s (best of %d, %.3f ms)\n", n, tflops, reps, best);
    cublasDestroy(h);
    cudaFree(a), cudaFree(b), cudaFree(c);
    return 0;
}
