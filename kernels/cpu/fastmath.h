/*
 * fastmath.h — a branch-free exp the compiler vectorizes, shared by the CPU
 * kernels that need exp in a hot loop (libm's expf stays scalar without
 * -ffast-math). Private to kernels/cpu.
 */
#ifndef TESSERA_KERNELS_CPU_FASTMATH_H
#define TESSERA_KERNELS_CPU_FASTMATH_H

#include <stdint.h>
#include <string.h>

/* exp(x) for x in [-87, 87]: Cody-Waite reduction to r in [-ln2/2, ln2/2]
 * and the Cephes degree-6 polynomial; about 1 ulp. Callers clamp x first. */
static inline float ts_cpu_exp_poly(float x) {
    float n = x * 1.44269504088896341f + 12582912.0f; /* round(x/ln2) */
    n -= 12582912.0f;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23; /* 2^n */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* exp(x) for x <= 0 (a value minus the max or the lse of its row): 0 below
 * -87, where exp would go subnormal. The clamp and the zeroing select on
 * integer bits: a float compare with a constant bound lets GCC fold the
 * clamped path into a constant under -ftrapping-math, which leaves a branch
 * in the loop and stops vectorization. */
static inline float ts_cpu_exp_neg(float x) {
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    uint32_t mag = b & 0x7fffffffu;
    int under = mag > 0x42ae0000u; /* |x| > 87 or NaN */
    b = (b & 0x80000000u) | (under ? 0x42ae0000u : mag);
    memcpy(&x, &b, sizeof x);
    float e = ts_cpu_exp_poly(x);
    uint32_t keep = under ? 0u : 0xffffffffu;
    memcpy(&b, &e, sizeof b);
    b &= keep;
    memcpy(&e, &b, sizeof e);
    return e;
}

#endif /* TESSERA_KERNELS_CPU_FASTMATH_H */
