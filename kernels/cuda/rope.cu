/*
 * rope.cu — rotary position embeddings in the "rotate_half" layout, forward
 * and backward, over heads inside packed rows (ts_cpu_rope_*; cpu_kernels.h
 * states the layout and the arithmetic).
 *
 * One block per row: a thread owns frequencies d = threadIdx.x + k ROPE_THREADS
 * of the row, computes each one's angle pos * inv_freq[d], cosine and sine in
 * double and rounds them to float (as the CPU does, so the two agree to f32
 * rounding), then rotates pair (d, d + hs/2) of every head of the row. A
 * thread reads a pair before it writes it, so the forward may run in place
 * (os == is). Not here: computing inv_freq (the host's ts_cpu_rope_inv_freq),
 * a cached table of cosines.
 */
#include "cuda_common.h"

#define ROPE_THREADS 64

/* The rotation of the nheads heads of row blockIdx.x: by +a (sign 1, out =)
 * or by -a (sign -1, out +=). */
__global__ static void rope_kernel(float *out,            /* (N, os), nheads * hs used */
                                   const float *inp,      /* (N, is), nheads * hs used */
                                   const int32_t *pos,    /* (N) */
                                   const float *inv_freq, /* (hs/2) */
                                   int nheads, int hs, int os, int is, int sign) {
    size_t n = blockIdx.x;
    int half = hs / 2;
    const float *x = inp + n * (size_t)is;
    float *o = out + n * (size_t)os;
    double p = (double)pos[n];
    for (int d = threadIdx.x; d < half; d += ROPE_THREADS) {
        double a = p * (double)inv_freq[d];
        float cs = (float)cos(a), sn = (float)(sign * sin(a));
        for (int h = 0; h < nheads; h++) {
            size_t i0 = (size_t)h * hs + d, i1 = i0 + half;
            float a0 = x[i0], a1 = x[i1];
            float r0 = a0 * cs - a1 * sn, r1 = a1 * cs + a0 * sn;
            if (sign > 0) {
                o[i0] = r0;
                o[i1] = r1;
            } else {
                o[i0] += r0;
                o[i1] += r1;
            }
        }
    }
}

static ts_status rope_launch(const char *kernel, float *out, const float *inp, const int32_t *pos,
                             const float *inv_freq, int N, int nheads, int hs, int os, int is,
                             int sign) {
    if (N < 0 || nheads < 0 || hs <= 0 || hs % 2 || (long)nheads * hs > os ||
        (long)nheads * hs > is)
        return ts_error(TS_ERR_INVALID,
                        "cuda: %s: bad shape N=%d nheads=%d hs=%d strides %d, %d (need hs even, "
                        "strides >= nheads*hs)",
                        kernel, N, nheads, hs, os, is);
    if (!N || !nheads) return TS_OK;
    rope_kernel<<<(unsigned)N, ROPE_THREADS, 0, ts_cuda_cur_stream()>>>(out, inp, pos, inv_freq,
                                                                        nheads, hs, os, is, sign);
    TS_CUDA_CHECK_LAUNCH();
    return TS_OK;
}

ts_status ts_cuda_rope_forward(float *out, const float *inp, const int32_t *pos,
                               const float *inv_freq, int N, int nheads, int hs, int os, int is) {
    return rope_launch("ts_cuda_rope_forward", out, inp, pos, inv_freq, N, nheads, hs, os, is, 1);
}

ts_status ts_cuda_rope_backward(float *dinp, const float *dout, const int32_t *pos,
                                const float *inv_freq, int N, int nheads, int hs, int ds, int dos) {
    return rope_launch("ts_cuda_rope_backward", dinp, dout, pos, inv_freq, N, nheads, hs, ds, dos,
                       -1);
}
