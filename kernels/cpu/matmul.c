/*
 * matmul.c — the linear layer: out = inp @ weight^T + bias and its backward.
 *
 * Both products go to CBLAS sgemm (the OpenMP build of OpenBLAS, which shares
 * our thread team); only the bias add and the bias gradient are ours. The
 * bias gradient sums each column over rows in row order, so it is bitwise the
 * same for any thread count.
 */
#include <cblas.h>
#include <omp.h>

#include "cpu_kernels.h"
#include "tasks.h"

/* Columns per task in the bias-gradient sum: one task owns whole columns. */
#define MATMUL_COL_BLOCK 64

/* Tiles per thread of a product cut by the caller; the fewest rows (or
 * columns) of a tile, and the fewest multiply-adds. OpenBLAS multiplies small
 * products (M N K up to 100^3 on some CPUs) with another kernel, which sums in
 * another order: a tile kept above 2^21 multiply-adds takes the same path as
 * the whole product, so cutting it changes no bit. */
#define MATMUL_TILES_PER_THREAD 2
#define MATMUL_TILE_MIN 64
#define MATMUL_TILE_MIN_MNK (1L << 21)

/* C (M, N) = op(A) op(B) + beta C, row-major. With more than one thread the
 * product is cut into tiles of whole rows of C (whole columns when C is
 * wider than tall), each a single-threaded SGEMM, shared out as tasks
 * (tasks.h); the last tile takes the remainder. Every element of C is still
 * one dot product over all of K in the library's order, so the result is the
 * same bits as one thread's (kernels_same_bits_on_1_2_3_threads). The
 * library's own split synchronises its threads many times per product, this
 * one once, and a core that falls behind leaves its tiles to the other. */
static void sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    int by_rows = M >= N, dim = by_rows ? M : N;
    long other_k = (long)(by_rows ? N : M) * K;
    int want = omp_get_max_threads() * MATMUL_TILES_PER_THREAD;
    int tile = want > 1 ? (dim + want - 1) / want : dim;
    tile = (tile + MATMUL_TILE_MIN - 1) / MATMUL_TILE_MIN * MATMUL_TILE_MIN;
    while ((long)tile * other_k < MATMUL_TILE_MIN_MNK && tile < dim)
        tile += MATMUL_TILE_MIN;
    int ntiles = dim / tile;
    if (omp_in_parallel()) ntiles = 1;
    if (ntiles < 2) {
        /* one tile: on one thread of an active team, where the library does
         * not split it either (its own split may sum over K in other blocks) */
#pragma omp parallel num_threads(2) if (omp_get_max_threads() > 1 && !omp_in_parallel())
#pragma omp single
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)ntiles, 1);
#pragma omp parallel num_threads(q.shares)
    for (size_t i, end; ts_cpu_tasks_next(&q, &i, &end);) {
        int x0 = (int)i * tile, w = (int)i == ntiles - 1 ? dim - x0 : tile;
        if (by_rows)
            cblas_sgemm(CblasRowMajor, ta, tb, w, N, K, 1.0f,
                        ta == CblasNoTrans ? A + (size_t)x0 * lda : A + x0, lda, B, ldb, beta,
                        C + (size_t)x0 * ldc, ldc);
        else
            cblas_sgemm(CblasRowMajor, ta, tb, M, w, K, 1.0f, A, lda,
                        tb == CblasNoTrans ? B + x0 : B + (size_t)x0 * ldb, ldb, beta, C + x0, ldc);
    }
}

void ts_cpu_matmul_forward(float *out,          /* (N, OC) */
                           const float *inp,    /* (N, C) */
                           const float *weight, /* (OC, C) */
                           const float *bias,   /* (OC) or NULL */
                           int N, int C, int OC) {
    sgemm(CblasNoTrans, CblasTrans, N, OC, C, inp, C, weight, C, 0.0f, out, OC);
    if (!bias) return;
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)N, ts_cpu_rows_grain(OC));
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int n = (int)lo; n < (int)hi; n++) {
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
    if (dinp) sgemm(CblasNoTrans, CblasNoTrans, N, C, OC, dout, OC, weight, C, 1.0f, dinp, C);
    if (dweight) sgemm(CblasTrans, CblasNoTrans, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
    if (!dbias) return;
    int nblocks = (OC + MATMUL_COL_BLOCK - 1) / MATMUL_COL_BLOCK;
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)nblocks, 1);
#pragma omp parallel num_threads(q.shares)
    for (size_t lo, hi; ts_cpu_tasks_next(&q, &lo, &hi);)
        for (int blk = (int)lo; blk < (int)hi; blk++) {
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
