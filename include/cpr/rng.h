/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cpr/rng.h - seeded randomness shared by the modules that need reproducible streams
 * (the synthetic data generator, the failure schedule) and well-mixed hashes
 * (shard placement, benchmark tags): SplitMix64's finaliser and step, and
 * xoshiro256** (Blackman and Vigna) seeded by SplitMix64. Pure functions of
 * their inputs; a cpr_rng is a value owned by its caller, not thread-safe.
 */
#ifndef CPR_RNG_H
#define CPR_RNG_H

#include <stdint.h>

/* SplitMix64's finaliser: full avalanche, so structured keys spread. */
static inline uint64_t cpr_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The SplitMix64 step: advance *state by the golden gamma and mix. */
static inline uint64_t cpr_splitmix64(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ull;
    return cpr_mix64(*state);
}

typedef struct cpr_rng {
    uint64_t s[4];
} cpr_rng;

/* SplitMix64 never yields four zero words, so the state is always valid. */
static inline void cpr_rng_seed(cpr_rng *rng, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        rng->s[i] = cpr_splitmix64(&seed);
}

static inline uint64_t cpr_rotl64(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* xoshiro256**: the next 64 random bits. */
static inline uint64_t cpr_rng_next(cpr_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = cpr_rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = cpr_rotl64(s[3], 45);
    return result;
}

/* Uniform in [0, n), n >= 1, without modulo bias (rejection). */
static inline uint64_t cpr_rng_below(cpr_rng *rng, uint64_t n)
{
    uint64_t limit = UINT64_MAX - UINT64_MAX % n, x;
    do
        x = cpr_rng_next(rng);
    while (x >= limit);
    return x % n;
}

/* Uniform in (0, 1]: never 0, so log() of it is finite. */
static inline double cpr_rng_unit(cpr_rng *rng)
{
    return (double)((cpr_rng_next(rng) >> 11) + 1) * 0x1p-53;
}

#endif /* CPR_RNG_H */
