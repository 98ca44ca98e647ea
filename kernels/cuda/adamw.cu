/*
 * adamw.cu — one fused AdamW step over f32 master weights (Loshchilov &
 * Hutter 2019), with an optional bf16 copy-out of the updated weights in the
 * same pass: one read of param, m, v, grad and one write of param, m, v
 * (and param_bf16, and the gradient's zero with zero_grad) per element. Bias
 * corrections are computed on the host in double, rounded to float, exactly
 * as ts_cpu_adamw does.
 */
#include <math.h>

#include "cuda_common.h"

__global__ static void adamw_kernel(float *param, float *m, float *v, uint16_t *param_bf16,
                                    float *grad, size_t n, float lr, float beta1, float beta2,
                                    float eps, float weight_decay, float bc1, float bc2,
                                    float grad_scale, int zero_grad) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float g = grad[i] * grad_scale;
        if (zero_grad) grad[i] = 0.0f;
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1;
        float vhat = vi / bc2;
        float p = param[i];
        p -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * p);
        param[i] = p;
        if (param_bf16) param_bf16[i] = ts_dev_f32_to_bf16(p);
    }
}

ts_status ts_cuda_adamw(float *param, float *m, float *v, uint16_t *param_bf16, float *grad,
                        size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                        int t, float grad_scale, int zero_grad) {
    TS_CUDA_REQUIRE(t >= 1, "ts_cuda_adamw");
    if (!n) return TS_OK;
    float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    adamw_kernel<<<ts_cuda_blocks(n, 256), 256, 0, ts_cuda_cur_stream()>>>(
        param, m, v, param_bf16, grad, n, lr, beta1, beta2, eps, weight_decay, bc1, bc2,
        grad_scale, zero_grad);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}
