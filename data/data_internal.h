/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internal pieces shared by the files of cpr_data: the 64-bit mixer behind
 * every hash, a small seeded PRNG (xoshiro256** seeded through SplitMix64,
 * so one 64-bit seed gives a well-spread state) and the Zipf sampler. The
 * generator must be reproducible from its seed alone, which is why none of
 * this touches rand() or any global state. Not installed.
 */
#ifndef CPR_DATA_INTERNAL_H
#define CPR_DATA_INTERNAL_H

#include <stdint.h>

#include "cpr/rng.h"

/* The hashes and the xoshiro256** stream come from common/cpr_rng.h
 * (cpr_mix64, cpr_splitmix64, cpr_rng). */
/* Uniform in [0, 1) with 53 random bits. */
double data_rng_uniform(cpr_rng *rng);
/* Standard normal (Box-Muller; one value per call, the pair's twin dropped
 * so the stream does not depend on call parity). */
double data_rng_normal(cpr_rng *rng);

/* A deterministic uniform in [-1, 1) from a 64-bit key (no state). */
static inline double data_hash_unit(uint64_t key)
{
    return (double)(cpr_mix64(key) >> 11) * 0x1p-52 - 1.0;
}

/*
 * Zipf on ranks 1..n with P(k) proportional to k^-s, sampled in O(1)
 * expected time by rejection-inversion (W. Hormann and G. Derflinger,
 * "Rejection-inversion to generate variates from monotone discrete
 * distributions", ACM TOMACS 6(3), 1996): invert the integral of the
 * continuous hat x^-s and accept unless the point falls in the sliver
 * between the hat and the step function. No tables, any n up to 2^53.
 */
typedef struct data_zipf {
    double s;            /* exponent, > 0 */
    double n;            /* number of ranks, >= 1 */
    double h_x1;         /* H(1.5) - 1 */
    double h_n;          /* H(n + 0.5) */
    double squeeze;      /* accept at once when k - x <= squeeze */
} data_zipf;

void data_zipf_init(data_zipf *z, double s, uint64_t n);
/* A rank in 1..n. */
uint64_t data_zipf_sample(const data_zipf *z, cpr_rng *rng);

#endif /* CPR_DATA_INTERNAL_H */
