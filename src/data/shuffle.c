/* data/shuffle.c - the per-epoch global permutation and the data module's generator; both are
 * pure functions of their seeds, so every rank (and a resumed run) computes the same order. */
#include "data/data.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
        uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
        return (x << k) | (x >> (64 - k));
}

void dt_data_rng_seed(dt_data_rng *r, uint64_t a, uint64_t b)
{
        /* hash (a, b) first so that nearby seeds and epochs give unrelated streams */
        uint64_t x = a;
        uint64_t h = splitmix64(&x);
        x = h ^ (b * 0xd1b54a32d192ed03ULL);
        for (int i = 0; i < 4; i++)
                r->s[i] = splitmix64(&x);
        if (!(r->s[0] | r->s[1] | r->s[2] | r->s[3]))
                r->s[0] = 1;    /* the all-zero state is a fixed point */
}

uint64_t dt_data_rng_next(dt_data_rng *r)
{
        uint64_t *s = r->s;
        uint64_t out = rotl(s[1] * 5, 7) * 9;
        uint64_t t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = rotl(s[3], 45);
        return out;
}

uint64_t dt_data_rng_below(dt_data_rng *r, uint64_t n)
{
        if (n <= 1) return 0;
        /* rejection: drop the top partial block of 2^64 so every residue is equally likely */
        uint64_t lim = UINT64_MAX - UINT64_MAX % n;
        uint64_t x;
        do x = dt_data_rng_next(r); while (x >= lim);
        return x % n;
}

double dt_data_rng_normal(dt_data_rng *r)
{
        /* Box-Muller on (0,1] x [0,1): one value per call keeps the stream position simple */
        double u1 = ((dt_data_rng_next(r) >> 11) + 1) * 0x1.0p-53;
        double u2 = (dt_data_rng_next(r) >> 11) * 0x1.0p-53;
        return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void dt_shuffle(long *perm, long n, uint64_t seed, long epoch)
{
        dt_data_rng r;
        dt_data_rng_seed(&r, seed, (uint64_t)epoch);
        for (long i = 0; i < n; i++)
                perm[i] = i;
        /* Fisher-Yates, from the top: perm[i] swaps with a uniform j in [0, i] */
        for (long i = n - 1; i > 0; i--) {
                long j = (long)dt_data_rng_below(&r, (uint64_t)i + 1);
                long t = perm[i];
                perm[i] = perm[j];
                perm[j] = t;
        }
}
