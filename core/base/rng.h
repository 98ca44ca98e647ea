/*
 * rng.h — counter-based random numbers.
 *
 * Every random number in tessera is a pure function of (seed, stream name,
 * index): no generator state advances. A tensor's initial element i is drawn
 * from (seed, tensor name, i) with i its GLOBAL element index, so a tensor
 * sharded over any number of ranks starts bit-identical to the unsharded one;
 * the same holds for data order and dropout masks.
 *
 * The mixer is SplitMix64's finaliser (Steele, Lea, Flood: "Fast splittable
 * pseudorandom number generators", OOPSLA 2014) applied to a key derived from
 * the seed and the FNV-1a hash of the stream name, and the counter.
 */
#ifndef TESSERA_CORE_RNG_H
#define TESSERA_CORE_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A key for one named stream under one seed. */
uint64_t ts_rng_key(uint64_t seed, const char *stream);
/* 64 random bits at counter i of stream `key`. */
uint64_t ts_rng_u64(uint64_t key, uint64_t i);
/* Uniform in [0, 1) with 24 bits (exactly representable in f32). */
float ts_rng_uniform(uint64_t key, uint64_t i);
/* Uniform in [0, 1) with 53 bits. */
double ts_rng_uniform_f64(uint64_t key, uint64_t i);
/* Standard normal (Box-Muller over the two halves of one 64-bit draw). */
float ts_rng_normal(uint64_t key, uint64_t i);

#ifdef __cplusplus
}
#endif
#endif /* TESSERA_CORE_RNG_H */
