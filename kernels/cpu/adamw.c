/*
 * adamw.c — one AdamW step (Adam with decoupled weight decay, Loshchilov &
 * Hutter 2019) over a flat array of parameters, elementwise and parallel.
 * Which parameters get weight decay is the caller's choice (pass 0).
 *
 * With zero_grad the gradient is zeroed in the same pass, each line while
 * it is in cache: the line is written back once, where a separate zeroing
 * pass before the next backward wrote the whole gradient again from memory
 * (124M's steps alternated in one process: 21 and 67 ms faster in medians,
 * 13 and 11 of 15 steps; docs/choices.md).
 */
#include <math.h>

#include "cpu_kernels.h"
#include "tasks.h"

void ts_cpu_adamw(float *param,      /* (n) */
                  float *m,          /* (n) first moment */
                  float *v,          /* (n) second moment */
                  float *grad,       /* (n); 0 after, with zero_grad */
                  size_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                  int t, float grad_scale, int zero_grad) {
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
            if (zero_grad) grad[i] = 0.0f;
        }
}
