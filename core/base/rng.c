/*
 * rng.c — counter-based random numbers (see rng.h for the contract).
 */
#include "rng.h"

#include <math.h>

static uint64_t rng_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t ts_rng_key(uint64_t seed, const char *stream) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    for (const unsigned char *p = (const unsigned char *)stream; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return rng_mix(seed ^ rng_mix(h));
}

uint64_t ts_rng_u64(uint64_t key, uint64_t i) {
    /* Two rounds so that neighbouring counters and neighbouring keys decorrelate. */
    return rng_mix(rng_mix(key + i * 0x9e3779b97f4a7c15ull) ^ key);
}

float ts_rng_uniform(uint64_t key, uint64_t i) {
    return (float)(ts_rng_u64(key, i) >> 40) * (1.0f / 16777216.0f);
}

double ts_rng_uniform_f64(uint64_t key, uint64_t i) {
    return (double)(ts_rng_u64(key, i) >> 11) * (1.0 / 9007199254740992.0);
}

float ts_rng_normal(uint64_t key, uint64_t i) {
    uint64_t r = ts_rng_u64(key, i);
    /* u1 in (0, 1], u2 in [0, 1): 32 bits each. */
    double u1 = ((double)(r >> 32) + 1.0) * (1.0 / 4294967296.0);
    double u2 = (double)(r & 0xffffffffull) * (1.0 / 4294967296.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
