/*
 * swiglu.cu — the SwiGLU gate of a Llama-class MLP, silu(gate) * up, over a
 * packed (N, 2F) input (gate columns first), forward and backward, as
 * ts_cpu_swiglu_*: elementwise, a grid-stride loop over the N F outputs.
 *
 * The sigmoid is the CPU's: e = exp(-|x|), taken as 0 for |x| > 87 (so
 * silu is +-0 below -87 and exactly x above about 17, as on the CPU), then
 * 1 / (1 + e) or e / (1 + e) by the sign of x, so neither sigmoid(x) nor
 * 1 - sigmoid(x) comes from a cancelling subtraction. expf is the accurate
 * libdevice function (no --use_fast_math), the CPU's a polynomial: they
 * agree within a few ulp.
 */
#include "cuda_common.h"

#define SWIGLU_THREADS 256

/* *s = sigmoid(x), *sc = 1 - sigmoid(x). */
__device__ __forceinline__ static void swiglu_sigmoid(float x, float *s, float *sc) {
    float ax = fabsf(x);
    float e = ax > 87.0f || isnan(x) ? 0.0f : expf(-ax), r = 1.0f / (1.0f + e), er = e * r;
    *s = x < 0.0f ? er : r;
    *sc = x < 0.0f ? r : er;
}

__global__ static void swiglu_forward_kernel(float *out,       /* (N, F) */
                                             const float *inp, /* (N, 2F): gate | up */
                                             size_t nf, int F) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nf;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / (size_t)F, f = i % (size_t)F;
        const float *g = inp + n * 2 * (size_t)F;
        float s, sc;
        swiglu_sigmoid(g[f], &s, &sc);
        out[i] = g[f] * s * g[F + f];
    }
}

__global__ static void swiglu_backward_kernel(float *dinp,       /* (N, 2F): dgate | dup */
                                              const float *inp,  /* (N, 2F): gate | up */
                                              const float *dout, /* (N, F) */
                                              size_t nf, int F) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < nf;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / (size_t)F, f = i % (size_t)F, row = n * 2 * (size_t)F;
        float x = inp[row + f], u = inp[row + F + f], d = dout[i], s, sc;
        swiglu_sigmoid(x, &s, &sc);
        /* d silu / dx = s + x s (1 - s) */
        dinp[row + f] += d * u * (s * (1.0f + x * sc));
        dinp[row + F + f] += d * x * s;
    }
}

ts_status ts_cuda_swiglu_forward(float *out, const float *inp, int N, int F) {
    TS_CUDA_REQUIRE(N >= 0 && F > 0, "ts_cuda_swiglu_forward");
    size_t nf = (size_t)N * F;
    if (!nf) return TS_OK;
    swiglu_forward_kernel<<<ts_cuda_blocks(nf, SWIGLU_THREADS), SWIGLU_THREADS, 0,
                            ts_cuda_cur_stream()>>>(out, inp, nf, F);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
    TS_CUDA_REQUIRE(N >= 0 && F > 0, "ts_cuda_swiglu_backward");
    size_t nf = (size_t)N * F;
    if (!nf) return TS_OK;
    swiglu_backward_kernel<<<ts_cuda_blocks(nf, SWIGLU_THREADS), SWIGLU_THREADS, 0,
                             ts_cuda_cur_stream()>>>(dinp, inp, dout, nf, F);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}
