/*
 * matmul.c — the linear layer: out = inp @ weight^T + bias and its backward.
 *
 * The products go to CBLAS sgemm (the OpenMP build of OpenBLAS) in tiles that
 * our thread team shares out (below); the bias add, done on each tile while
 * it is in cache, and the bias gradient are ours. The bias gradient sums each
 * column over rows in row order, so it is bitwise the same for any thread
 * count.
 */
#include <cblas.h>
#include <omp.h>

#include "cpu_kernels.h"
#include "tasks.h"

/* Tiles per thread of a product cut by the caller; the fewest rows (or
 * columns) of a tile, and the fewest multiply-adds. OpenBLAS multiplies small
 * products (M N K up to 100^3 on some CPUs) with another kernel, which sums in
 * another order: a tile kept above 2^21 multiply-adds takes the same path as
 * the whole product, so cutting it changes no bit. */
#define MATMUL_TILES_PER_THREAD 2
/* dweight's tiles per thread in the backward's pool: they make up the far
 * end of each share, the part another thread may take, so the smaller they
 * are the less a thread waits for a slower one at the pool's end. */
#define MATMUL_DWEIGHT_TILES_PER_THREAD 4
#define MATMUL_TILE_MIN 64
#define MATMUL_TILE_MIN_MNK (1L << 21)

/* Where a product may be cut without changing a bit. OpenBLAS sees our
 * row-major C (M, N) as the column-major C^T: its "M" is our columns, its
 * "N" our rows. Its micro-kernel takes the "N" side in blocks of its unroll
 * (4 on SkylakeX and Cooperlake, 12 on Haswell and Zen, 4 or 8 on older
 * cores), and an element's sum over K is the same in a tile whose first row
 * is a multiple of the unroll as in the whole product: tiles of rows start
 * at multiples of 48, the unrolls' least common multiple, and their number
 * may follow the threads. Its "M" side has no such multiple on every core:
 * on Haswell and Zen an element of a column tile is summed in another order
 * than in the whole product, whatever the tile's edges. So a product wider
 * than tall is cut into column tiles whose edges depend on its shape alone
 * (one width, at least MATMUL_COL_TILE columns and at most MATMUL_COL_TILES
 * tiles), the same on any thread count, which only shares them out. Either
 * way the bits are the same on any thread count on every core OpenBLAS
 * selects (kernels_same_bits_on_1_2_3_threads, run under each
 * OPENBLAS_CORETYPE this CPU executes). */
#define MATMUL_TILE_ALIGN 48
#define MATMUL_COL_TILE 384
#define MATMUL_COL_TILES 24

/* One product C (M, N) = op(A) op(B) + beta C (+ bias on every row), row-major,
 * cut into tiles of whole rows of C (whole columns when C is wider than tall)
 * of equal size (up to the alignment). Each tile is a single-threaded SGEMM,
 * run inside the team's parallel region, where the library does not split
 * it. The library's own split synchronised its threads many times per
 * product, and summed over K in other blocks. */
typedef struct {
    CBLAS_TRANSPOSE ta, tb;
    int M, N, K, lda, ldb, ldc;
    const float *A, *B, *bias;
    float beta, *C;
    int by_rows, dim, ntiles;
    int width; /* column tiles: each this wide (the last the rest); rows: 0 */
} gemm_tiles;

/* The product's tiles: by rows as many as `per_thread` per thread, each at
 * least `least` rows plus the alignment; by columns by the shape alone. */
static gemm_tiles gemm_plan(int per_thread, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N,
                            int K, const float *A, int lda, const float *B, int ldb, float beta,
                            float *C, int ldc, const float *bias) {
    gemm_tiles g = {ta, tb, M, N, K, lda, ldb, ldc, A, B, bias, beta, C, M >= N, M >= N ? M : N,
                    0,  0};
    if (!g.by_rows) {
        long w = ((long)N + MATMUL_COL_TILES - 1) / MATMUL_COL_TILES;
        w = (w + MATMUL_TILE_ALIGN - 1) / MATMUL_TILE_ALIGN * MATMUL_TILE_ALIGN;
        g.width = (int)(w > MATMUL_COL_TILE ? w : MATMUL_COL_TILE);
        g.ntiles = (int)(((long)N + g.width - 1) / g.width);
        return g;
    }
    long other_k = (long)N * K;
    long least = other_k > 0 ? (MATMUL_TILE_MIN_MNK + other_k - 1) / other_k : 0;
    if (least < MATMUL_TILE_MIN) least = MATMUL_TILE_MIN;
    long most = g.dim / (least + MATMUL_TILE_ALIGN); /* tiles no smaller than `least` */
    long want = (long)omp_get_max_threads() * per_thread;
    g.ntiles = (int)(want < most ? want : most);
    if (g.ntiles < 1) g.ntiles = g.dim > 0;
    return g;
}

/* Tile i's first row (or column); tile ntiles starts at dim. */
static int gemm_edge(const gemm_tiles *g, int i) {
    if (i >= g->ntiles) return g->dim;
    if (g->width) return i * g->width;
    return (int)((long)g->dim * i / g->ntiles) / MATMUL_TILE_ALIGN * MATMUL_TILE_ALIGN;
}

static void gemm_tile(const gemm_tiles *g, int i) {
    int x0 = gemm_edge(g, i), w = gemm_edge(g, i + 1) - x0;
    int rows = g->by_rows ? w : g->M, cols = g->by_rows ? g->N : w;
    const float *a = g->A, *b = g->B, *bias = g->bias;
    float *c = g->C;
    if (g->by_rows) { /* rows x0.. of C: rows of op(A) */
        a += g->ta == CblasNoTrans ? (size_t)x0 * g->lda : (size_t)x0;
        c += (size_t)x0 * g->ldc;
    } else { /* columns x0.. of C: columns of op(B) */
        b += g->tb == CblasNoTrans ? (size_t)x0 : (size_t)x0 * g->ldb;
        c += x0;
        bias = bias ? bias + x0 : NULL;
    }
    cblas_sgemm(CblasRowMajor, g->ta, g->tb, rows, cols, g->K, 1.0f, a, g->lda, b, g->ldb, g->beta,
                c, g->ldc);
    if (bias)
        for (int n = 0; n < rows; n++)
            for (int o = 0; o < cols; o++)
                c[(size_t)n * g->ldc + o] += bias[o];
}

/* The team: every thread when there are several (an active region, so the
 * library runs single-threaded even when there is only one tile), as many
 * as the task pool has shares. */
static int gemm_team(void) {
    int n = omp_in_parallel() ? 1 : omp_get_max_threads();
    return n < TS_CPU_MAX_SHARES ? n : TS_CPU_MAX_SHARES;
}

void ts_cpu_matmul_forward(float *out,          /* (N, OC) */
                           const float *inp,    /* (N, C) */
                           const float *weight, /* (OC, C) */
                           const float *bias,   /* (OC) or NULL */
                           int N, int C, int OC) {
    gemm_tiles g = gemm_plan(MATMUL_TILES_PER_THREAD, CblasNoTrans, CblasTrans, N, OC, C, inp, C,
                             weight, C, 0.0f, out, OC, bias);
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)g.ntiles, 1);
#pragma omp parallel num_threads(gemm_team())
    for (size_t i, end; ts_cpu_tasks_next(&q, &i, &end);)
        gemm_tile(&g, (int)i);
}

/* A linear layer's backward is one pool of tasks, so that it waits for its
 * threads once: dinp's tiles, dweight's tiles and the bias gradient's
 * blocks of columns. Laid out share by share when each part divides among
 * the shares: the s-th share holds dinp's s-th tiles, dweight's s-th tiles
 * and the s-th blocks, biggest first, so that a thread that has finished
 * its own takes the smallest tasks from another's far end. dinp then has one
 * tile per thread, not two: each tile of dinp reads (and the library packs)
 * all of dout, and dweight's tiles are small enough to even the threads out.
 * Products too small for that alternate their tiles (in a pool of dinp's
 * tiles then dweight's, one thread got all of one product and the other all
 * of the other, and the faster waited at the end for most of a tile). */
typedef struct {
    int ti, tw, nb; /* dinp's tiles, dweight's tiles, the bias gradient's blocks */
    int per;        /* tasks per share when laid out by share; 0: alternating */
} bwd_pool;

enum { BWD_DINP, BWD_DWEIGHT, BWD_DBIAS };

static int bwd_pool_task(const bwd_pool *p, int t, int *index) {
    if (p->per) {
        int shares = (p->ti + p->tw + p->nb) / p->per;
        int s = t / p->per, j = t % p->per;
        int li = p->ti / shares, lw = p->tw / shares, lb = p->nb / shares;
        if (j < li) return *index = s * li + j, BWD_DINP;
        if (j < li + lw) return *index = s * lw + j - li, BWD_DWEIGHT;
        return *index = s * lb + j - li - lw, BWD_DBIAS;
    }
    int pairs = p->ti < p->tw ? p->ti : p->tw;
    if (t < 2 * pairs) return *index = t / 2, t % 2 ? BWD_DWEIGHT : BWD_DINP;
    if (t < p->ti + p->tw) /* the longer product's remaining tiles */
        return *index = t - pairs, p->ti > p->tw ? BWD_DINP : BWD_DWEIGHT;
    return *index = t - p->ti - p->tw, BWD_DBIAS;
}

/* Block b of nb of the bias gradient: columns [OC b / nb, OC (b + 1) / nb),
 * at most TS_CPU_BIAS_BLOCK. */
static void bias_grad_block(float *dbias, const float *dout, int N, int OC, int b, int nb) {
    int o0 = (int)((long)OC * b / nb);
    ts_cpu_bias_grad_block(dbias, dout, N, OC, o0, (int)((long)OC * (b + 1) / nb) - o0);
}

void ts_cpu_matmul_backward(float *dinp,         /* (N, C) or NULL */
                            float *dweight,      /* (OC, C) or NULL */
                            float *dbias,        /* (OC) or NULL */
                            const float *dout,   /* (N, OC) */
                            const float *inp,    /* (N, C) */
                            const float *weight, /* (OC, C) */
                            int N, int C, int OC) {
    int team = gemm_team();
    gemm_tiles gw = gemm_plan(MATMUL_DWEIGHT_TILES_PER_THREAD, CblasTrans, CblasNoTrans, OC, C, N,
                              dout, OC, inp, C, 1.0f, dweight, C, NULL);
    int by_share = !dweight || gw.ntiles % team == 0;
    gemm_tiles gi = gemm_plan(dweight && by_share ? 1 : MATMUL_TILES_PER_THREAD, CblasNoTrans,
                              CblasNoTrans, N, C, OC, dout, OC, weight, C, 1.0f, dinp, C, NULL);
    bwd_pool p = {dinp ? gi.ntiles : 0, dweight ? gw.ntiles : 0, 0, 0};
    int blocks = dbias ? (OC + TS_CPU_BIAS_BLOCK - 1) / TS_CPU_BIAS_BLOCK : 0;
    if (by_share && p.ti % team == 0) {
        p.nb = (blocks + team - 1) / team * team; /* narrower blocks, as many per share */
        p.per = (p.ti + p.tw + p.nb) / team;
    } else {
        p.nb = blocks;
    }
    ts_cpu_tasks q;
    ts_cpu_tasks_init(&q, (size_t)(p.ti + p.tw + p.nb), 1);
#pragma omp parallel num_threads(gemm_team())
    for (size_t i, end; ts_cpu_tasks_next(&q, &i, &end);) {
        int index, kind = bwd_pool_task(&p, (int)i, &index);
        if (kind == BWD_DINP)
            gemm_tile(&gi, index);
        else if (kind == BWD_DWEIGHT)
            gemm_tile(&gw, index);
        else
            bias_grad_block(dbias, dout, N, OC, index, p.nb);
    }
}
