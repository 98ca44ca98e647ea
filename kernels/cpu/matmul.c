/*
 * matmul.c — the linear layer: out = inp @ weight^T + bias and its backward.
 *
 * Both products go to CBLAS sgemm (the OpenMP build of OpenBLAS, which shares
 * our thread team); only the bias add and the bias gradient are ours. The
 * bias gradient sums each column over rows in row order, so it is bitwise the
 * same for any thread count.
 */
#include <cblas.h>

#include "cpu_kernels.h"

/* Columns per task in the bias-gradient sum: one task owns whole columns. */
#define MATMUL_COL_BLOCK 64

void ts_cpu_matmul_forward(float *out,          /* (N, OC) */
                           const float *inp,    /* (N, C) */
                           const float *weight, /* (OC, C) */
                           const float *bias,   /* (OC) or NULL */
                           int N, int C, int OC) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, 0.0f,
                out, OC);
    if (!bias) return;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = out + (size_t)n * OC;
        for (int o = 0; o < OC; o++)
            row[o] += bias[o];
    }
}

void ts_cpu_matmul_backward(float *dinp,         /* (N, C) or NULL */
                            float *dweight,      /* (OC, C) or NULL */
                            float *dbias,        /* (OC) or NULL */
                            const float *dout,   /* (N, OC) */
                            const float *inp,    /* (N, C) */
                            const float *weight, /* (OC, C) */
                            int N, int C, int OC) {
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                    1.0f, dinp, C);
    if (dweight)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
                    dweight, C);
    if (!dbias) return;
    int nblocks = (OC + MATMUL_COL_BLOCK - 1) / MATMUL_COL_BLOCK;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < nblocks; blk++) {
        int o0 = blk * MATMUL_COL_BLOCK;
        int w = OC - o0 < MATMUL_COL_BLOCK ? OC - o0 : MATMUL_COL_BLOCK;
        float acc[MATMUL_COL_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const float *row = dout + (size_t)n * OC + o0;
            for (int j = 0; j < w; j++)
                acc[j] += row[j];
        }
        for (int j = 0; j < w; j++)
            dbias[o0 + j] += acc[j];
    }
}
