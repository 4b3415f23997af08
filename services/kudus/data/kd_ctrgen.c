/*  kd_ctrgen: a synthetic click log with a planted logistic model (see
    kd_ctrgen.h).
*/
#include "kd_ctrgen.h"
#include "kd_util.h"
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_BIAS  (-1.0)                  //  the planted model's intercept

struct _kd_ctrgen_t {
    uint64_t n;                         //  features
    uint64_t ranks;                     //  features the rows draw from (the vocabulary)
    double a;                           //  zipf exponent
    uint32_t per_row;                   //  features per row
    uint64_t seed;                      //  of the weights
    uint64_t state;                     //  of the draws (splitmix64)
    uint64_t stride;                    //  the rank permutation's multiplier
    double sigma;                       //  the weights' standard deviation
    //  Rejection-inversion's constants.
    double h_x1, h_n, s;
};

//  Uniform in [0, 1).
static double
s_uniform (kd_ctrgen_t *self)
{
    return (double) (kd_splitmix64 (&self->state) >> 11) * 0x1.0p-53;
}

//  (exp (x) - 1) / x, and log1p (x) / x, accurate near 0.
static double
s_helper2 (double x)
{
    return fabs (x) > 1e-8 ? expm1 (x) / x : 1 + x / 2 * (1 + x / 3 * (1 + x / 4));
}

static double
s_helper1 (double x)
{
    return fabs (x) > 1e-8 ? log1p (x) / x : 1 - x * (0.5 - x * (1.0 / 3 - 0.25 * x));
}

//  h (x) = x^-a, its integral H, and H's inverse.
static double
s_h (kd_ctrgen_t *self, double x)
{
    return exp (-self->a * log (x));
}

static double
s_hint (kd_ctrgen_t *self, double x)
{
    double log_x = log (x);
    return s_helper2 ((1 - self->a) * log_x) * log_x;
}

static double
s_hint_inverse (kd_ctrgen_t *self, double x)
{
    double t = x * (1 - self->a);
    if (t < -1)
        t = -1;     //  rounding can push it just past the domain
    return exp (s_helper1 (t) * x);
}

static uint64_t
s_gcd (uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

kd_ctrgen_t *
kd_ctrgen_new (uint64_t features, double zipf, uint32_t per_row, uint64_t seed,
               char *err, size_t err_size)
{
    if (features < 1 || per_row < 1 || per_row > features) {
        snprintf (err, err_size, "per-row (%u) must be between 1 and features (%llu)",
                  per_row, (unsigned long long) features);
        return NULL;
    }
    if (!(zipf > 0.5 && zipf <= 5)) {
        snprintf (err, err_size, "zipf must be in (0.5, 5], not %g", zipf);
        return NULL;
    }
    kd_ctrgen_t *self = (kd_ctrgen_t *) calloc (1, sizeof (kd_ctrgen_t));
    if (!self) {
        snprintf (err, err_size, "out of memory");
        return NULL;
    }
    self->n = features;
    self->a = zipf;
    self->per_row = per_row;
    self->seed = seed;
    self->state = kd_mix64 (seed ^ 0x5bd1e995u);
    self->sigma = 2.0 / sqrt ((double) per_row);
    //  A multiplier coprime with n permutes [0, n).
    self->stride = 2654435761u % features;
    while (features > 1 && (self->stride == 0 || s_gcd (self->stride, features) != 1))
        self->stride = (self->stride + 1) % features;
    if (features == 1)
        self->stride = 1;
    self->ranks = features;
    self->h_x1 = s_hint (self, 1.5) - 1;
    self->h_n = s_hint (self, (double) features + 0.5);
    self->s = 2 - s_hint_inverse (self, s_hint (self, 2.5) - s_h (self, 2));
    return self;
}

int
kd_ctrgen_set_vocab (kd_ctrgen_t *self, uint64_t vocab, char *err, size_t err_size)
{
    if (vocab < self->per_row || vocab > self->n) {
        if (err && err_size)
            snprintf (err, err_size, "vocab (%llu) must be between per-row (%u) and features (%llu)",
                      (unsigned long long) vocab, self->per_row, (unsigned long long) self->n);
        return -1;
    }
    //  The power law runs over the vocabulary's ranks; the permutation
    //  still scatters them over all n indices.
    self->ranks = vocab;
    self->h_n = s_hint (self, (double) vocab + 0.5);
    return 0;
}

void
kd_ctrgen_destroy (kd_ctrgen_t **self_p)
{
    if (self_p && *self_p) {
        free (*self_p);
        *self_p = NULL;
    }
}

uint64_t
kd_ctrgen_rank (kd_ctrgen_t *self)
{
    while (true) {
        double u = self->h_n + s_uniform (self) * (self->h_x1 - self->h_n);
        double x = s_hint_inverse (self, u);
        double kd = floor (x + 0.5);
        uint64_t k = kd < 1 ? 1 : kd > (double) self->ranks ? self->ranks : (uint64_t) kd;
        if ((double) k - x <= self->s || u >= s_hint (self, (double) k + 0.5) - s_h (self, (double) k))
            return k;
    }
}

uint64_t
kd_ctrgen_feature_of_rank (kd_ctrgen_t *self, uint64_t rank)
{
    unsigned __int128 p = (unsigned __int128) (rank - 1) * self->stride;
    return (uint64_t) (p % self->n) + 1;
}

double
kd_ctrgen_weight (kd_ctrgen_t *self, uint64_t index)
{
    //  Box-Muller on two uniforms hashed from (seed, index).
    uint64_t z = kd_mix64 (self->seed * 0x9e3779b97f4a7c15ull ^ index);
    double u1 = ((double) (kd_mix64 (z) >> 11) + 1) * 0x1.0p-53;
    double u2 = (double) (kd_mix64 (z + 1) >> 11) * 0x1.0p-53;
    return self->sigma * sqrt (-2 * log (u1)) * cos (2 * M_PI * u2);
}

double
kd_ctrgen_bias (kd_ctrgen_t *self)
{
    (void) self;
    return S_BIAS;
}

double
kd_ctrgen_sigma (kd_ctrgen_t *self)
{
    return self->sigma;
}

static int
s_compare_u64 (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

int
kd_ctrgen_row (kd_ctrgen_t *self, uint64_t *index, double *score)
{
    uint32_t n = 0;
    while (n < self->per_row) {
        uint64_t f = kd_ctrgen_feature_of_rank (self, kd_ctrgen_rank (self));
        bool seen = false;
        for (uint32_t i = 0; i < n && !seen; i++)
            seen = index [i] == f;
        if (!seen)
            index [n++] = f;
    }
    qsort (index, n, sizeof (uint64_t), s_compare_u64);
    double logit = S_BIAS;
    for (uint32_t i = 0; i < n; i++)
        logit += kd_ctrgen_weight (self, index [i]);
    *score = logit;
    return s_uniform (self) < 1 / (1 + exp (-logit)) ? 1 : 0;
}
