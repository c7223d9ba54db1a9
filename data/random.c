/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The seeded randomness of the synthetic generator: xoshiro256** (Blackman
 * and Vigna, common/cpr_rng.h) for the stream, Box-Muller for normals, and a rejection-
 * inversion Zipf sampler. Everything is a pure function of the seed so a
 * generated file can be reproduced byte for byte; the Zipf sampler keeps
 * no per-rank tables so a table of 2^32 ids costs the same as one of 10.
 * cpr_zipf (cpr/data.h) is the same sampler behind a public handle.
 */
#include <math.h>
#include <stdlib.h>

#include "cpr/data.h"
#include "cpr_common.h"
#include "data_internal.h"

double data_rng_uniform(cpr_rng *rng)
{
    return (double)(cpr_rng_next(rng) >> 11) * 0x1p-53;
}

double data_rng_normal(cpr_rng *rng)
{
    double u1 = 1.0 - data_rng_uniform(rng); /* (0, 1]: log is finite */
    double u2 = data_rng_uniform(rng);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- Zipf by rejection-inversion -------------------------------------------- */

/* log1p(z)/z and expm1(y)/y, continuous through 0 where the plain quotients
 * lose every digit (s near 1 makes the argument tiny). */
static double log1p_over(double z)
{
    if (fabs(z) > 1e-8)
        return log1p(z) / z;
    return 1.0 - z * (0.5 - z / 3.0);
}

static double expm1_over(double y)
{
    if (fabs(y) > 1e-8)
        return expm1(y) / y;
    return 1.0 + y * (0.5 + y / 6.0);
}

/* The hat density x^-s. */
static double hat(const data_zipf *z, double x)
{
    return exp(-z->s * log(x));
}

/* H(x) = integral of the hat from 1 to x: (x^(1-s) - 1)/(1-s), log x at s=1. */
static double hat_integral(const data_zipf *z, double x)
{
    double log_x = log(x);
    return expm1_over((1.0 - z->s) * log_x) * log_x;
}

/* The inverse of hat_integral. */
static double hat_integral_inv(const data_zipf *z, double y)
{
    double t = y * (1.0 - z->s);
    if (t <= -1.0) /* s > 1 and y at H(infinity) by rounding: the far end */
        return z->n + 0.5;
    return exp(log1p_over(t) * y);
}

void data_zipf_init(data_zipf *z, double s, uint64_t n)
{
    z->s = s;
    z->n = (double)n;
    /* Rank 1 gets an exact slab of width h(1) = 1 just below H(1.5). */
    z->h_x1 = hat_integral(z, 1.5) - 1.0;
    z->h_n = hat_integral(z, z->n + 0.5);
    z->squeeze = 2.0 - hat_integral_inv(z, hat_integral(z, 2.5) - hat(z, 2.0));
}

uint64_t data_zipf_sample(const data_zipf *z, cpr_rng *rng)
{
    if (z->n <= 1.0)
        return 1;
    for (;;) {
        double u = z->h_n + data_rng_uniform(rng) * (z->h_x1 - z->h_n);
        double x = hat_integral_inv(z, u);
        double kd = floor(x + 0.5);
        if (kd < 1.0)
            kd = 1.0;
        else if (kd > z->n)
            kd = z->n;
        /* Accept inside the squeeze, or under the step of rank k. */
        if (kd - x <= z->squeeze ||
            u >= hat_integral(z, kd + 0.5) - hat(z, kd))
            return (uint64_t)kd;
    }
}

/* ---- the public Zipf stream (cpr/data.h) ------------------------------------- */

struct cpr_zipf {
    data_zipf zipf;
    cpr_rng rng;
};

cpr_status cpr_zipf_create(double s, uint64_t n, uint64_t seed, cpr_zipf **out)
{
    if (!out)
        return cpr_fail(CPR_INVALID_ARGUMENT, "out is NULL");
    if (!(s > 0.0 && s <= 20.0))
        return cpr_fail(CPR_INVALID_ARGUMENT, "zipf exponent %g is not in (0, 20]", s);
    if (n < 1 || n > (1ull << 53))
        return cpr_fail(CPR_INVALID_ARGUMENT, "zipf ranks %llu are not in 1..2^53",
                        (unsigned long long)n);
    cpr_zipf *z = malloc(sizeof *z);
    if (!z)
        return cpr_fail(CPR_NO_MEMORY, "out of memory for a Zipf stream");
    data_zipf_init(&z->zipf, s, n);
    cpr_rng_seed(&z->rng, seed);
    *out = z;
    return CPR_OK;
}

uint64_t cpr_zipf_next(cpr_zipf *zipf)
{
    return data_zipf_sample(&zipf->zipf, &zipf->rng) - 1;
}

void cpr_zipf_destroy(cpr_zipf *zipf)
{
    free(zipf);
}
