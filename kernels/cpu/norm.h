/*
 * norm.h — what LayerNorm's and RMSNorm's backwards share (layernorm.c,
 * rmsnorm.c): the weight (and bias) gradient of a block of channels, summed
 * over the rows in order by the one task that owns the block, which is
 * race-free and gives the same bits for any thread count.
 */
#ifndef TESSERA_KERNELS_CPU_NORM_H
#define TESSERA_KERNELS_CPU_NORM_H

#include <stddef.h>

/* Channels per task in the weight-gradient reduction. */
#define TS_CPU_NORM_COL_BLOCK 64

/* dweight[c0, c0 + w) += sum over rows n of (x - mean[n]) rstd[n] dout, and
 * dbias[c0, c0 + w) += sum of dout when dbias is given; mean NULL: 0
 * (RMSNorm, where x - 0 is x exactly). w <= TS_CPU_NORM_COL_BLOCK. */
static inline void ts_cpu_norm_weight_block(float *dweight, float *dbias, const float *dout,
                                            const float *inp, const float *mean, const float *rstd,
                                            int N, int C, int c0, int w) {
    float accw[TS_CPU_NORM_COL_BLOCK] = {0}, accb[TS_CPU_NORM_COL_BLOCK] = {0};
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C + c0;
        const float *d = dout + (size_t)n * C + c0;
        float m = mean ? mean[n] : 0.0f, r = rstd[n];
        for (int j = 0; j < w; j++)
            accw[j] += (x[j] - m) * r * d[j];
        if (dbias)
            for (int j = 0; j < w; j++)
                accb[j] += d[j];
    }
    for (int j = 0; j < w; j++)
        dweight[c0 + j] += accw[j];
    if (dbias)
        for (int j = 0; j < w; j++)
            dbias[c0 + j] += accb[j];
}

#endif /* TESSERA_KERNELS_CPU_NORM_H */
