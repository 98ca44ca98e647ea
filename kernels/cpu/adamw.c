/*
 * adamw.c — one AdamW step (Adam with decoupled weight decay, Loshchilov &
 * Hutter 2019) over a flat array of parameters, elementwise and parallel.
 * Which parameters get weight decay is the caller's choice (pass 0).
 */
#include <math.h>

#include "cpu_kernels.h"
#include "tasks.h"

void ts_cpu_adamw(float *param,      /* (n) */
                  float *m,          /* (n) first moment */
                  float *v,          /* (n) second moment */
                  const float *grad, /* (n) */
                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  int t, float grad_scale) {
    float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, n, TS_CPU_GRAIN);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (size_t i = lo; i < hi; i++) {
            float g = grad[i] * grad_scale;
            float mi = beta1 * m[i] + (1.0f - beta1) * g;
            float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
            m[i] = mi;
            v[i] = vi;
            float mhat = mi / bc1;
            float vhat = vi / bc2;
            param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + weight_decay * param[i]);
        }
}
