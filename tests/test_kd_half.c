/*  test_kd_half: fp16 and bf16 conversions.

    Every one of the 65536 fp16 values converts to float32 and back to
    itself (NaNs stay NaNs); float32 to fp16 rounds to nearest even, checked
    against exact arithmetic in double; the F16C and portable paths give
    the same bits on edge cases and a million random floats; bf16 rounds to
    nearest even and keeps float32's range.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kd_half.h"

TestSuite (kd_half, .timeout = 60);

static uint32_t
s_bits (float f)
{
    uint32_t u;
    memcpy (&u, &f, 4);
    return u;
}

//  The fp16 nearest to x, ties to even, by search in double: the oracle.
static double
s_half_value (uint16_t h)
{
    int e = (h >> 10) & 0x1f, f = h & 0x3ff;
    double v = e == 0 ? ldexp (f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexp (1024 + f, e - 25);
    return h & 0x8000 ? -v : v;
}

static void
s_both (bool portable)
{
    kd_half_force_portable (portable);
    //  Every fp16 value round-trips.
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t in = (uint16_t) h, back;
        float f;
        kd_half_to_float (&f, &in, 1);
        double want = s_half_value (in);
        if (isnan (want)) {
            cr_assert (isnan (f), "0x%04x", h);
            kd_half_from_float (&back, &f, 1);
            cr_assert ((back & 0x7c00) == 0x7c00 && (back & 0x3ff), "NaN 0x%04x came back 0x%04x", h, back);
            continue;
        }
        cr_assert ((double) f == want || (f == 0 && want == 0), "0x%04x: %g, want %g", h, f, want);
        kd_half_from_float (&back, &f, 1);
        cr_assert_eq (back, in, "0x%04x came back 0x%04x", h, back);
    }
    kd_half_force_portable (false);
}

Test (kd_half, every_fp16_value_round_trips_on_both_paths)
{
    s_both (true);
    if (kd_half_has_f16c ())
        s_both (false);
}

//  Nearest-even rounding against the oracle, on floats between fp16 values.
Test (kd_half, float_to_fp16_rounds_to_nearest_even)
{
    unsigned seed = 1;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t) rand_r (&seed) << 16 ^ (uint32_t) rand_r (&seed);
        //  Exponents around fp16's range: subnormals to overflow.
        u = (u & 0x807fffff) | ((uint32_t) (100 + rand_r (&seed) % 50) << 23);
        float f;
        memcpy (&f, &u, 4);
        uint16_t h;
        kd_half_force_portable (true);
        kd_half_from_float (&h, &f, 1);
        kd_half_force_portable (false);
        double got = s_half_value (h);
        //  No fp16 value is nearer than the one chosen.
        double err = fabs (got - (double) f);
        if (isinf (got)) {
            cr_assert (fabs ((double) f) >= 65520, "%g became infinite", f);
            continue;
        }
        for (int d = -1; d <= 1; d += 2) {
            uint16_t other = (uint16_t) (h + d);
            if ((other & 0x7c00) == 0x7c00 || ((h & 0x7fff) == 0 && d < 0))
                continue;
            double o = fabs (s_half_value (other) - (double) f);
            cr_assert (o > err || (o == err && !(h & 1)), "%g -> 0x%04x, but 0x%04x is as near", f, h, other);
        }
    }
}

Test (kd_half, f16c_and_portable_give_the_same_bits)
{
    if (!kd_half_has_f16c ())
        cr_skip_test ("no F16C on this CPU");
    enum { N = 1 << 20 };
    float *src = (float *) malloc (N * sizeof (float)), *a = (float *) malloc (N * sizeof (float)),
          *b = (float *) malloc (N * sizeof (float));
    uint16_t *ha = (uint16_t *) malloc (N * 2), *hb = (uint16_t *) malloc (N * 2);
    unsigned seed = 7;
    const float edge [] = { 0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                            6.1e-5f, INFINITY, -INFINITY, NAN, 1.0f / 3, 1e30f };
    for (size_t i = 0; i < N; i++) {
        uint32_t u = (uint32_t) rand_r (&seed) << 16 ^ (uint32_t) rand_r (&seed);
        memcpy (&src [i], &u, 4);
        if (i < sizeof edge / sizeof edge [0])
            src [i] = edge [i];
    }
    kd_half_from_float (ha, src, N);        //  F16C, with a scalar tail
    kd_half_force_portable (true);
    kd_half_from_float (hb, src, N);
    kd_half_force_portable (false);
    size_t differ = 0;
    for (size_t i = 0; i < N; i++)
        differ += ha [i] != hb [i] && !(isnan (src [i]) && (ha [i] & 0x7c00) == 0x7c00 && (hb [i] & 0x7c00) == 0x7c00);
    cr_expect_eq (differ, 0, "%zu of %d floats convert differently", differ, N);
    kd_half_to_float (a, ha, N);
    kd_half_force_portable (true);
    kd_half_to_float (b, ha, N);
    kd_half_force_portable (false);
    for (size_t i = 0; i < N; i++)
        cr_assert (s_bits (a [i]) == s_bits (b [i]) || (isnan (a [i]) && isnan (b [i])), "0x%04x", ha [i]);
    free (src);
    free (a);
    free (b);
    free (ha);
    free (hb);
}

Test (kd_half, bf16_vector_and_portable_give_the_same_bits)
{
    enum { N = (1 << 20) + 5 };
    float *src = (float *) malloc (N * sizeof (float)), *a = (float *) malloc (N * sizeof (float)),
          *b = (float *) malloc (N * sizeof (float));
    uint16_t *ha = (uint16_t *) malloc (N * 2), *hb = (uint16_t *) malloc (N * 2);
    unsigned seed = 5;
    for (size_t i = 0; i < N; i++) {
        uint32_t u = (uint32_t) rand_r (&seed) << 16 ^ (uint32_t) rand_r (&seed);
        memcpy (&src [i], &u, 4);
    }
    src [0] = NAN;
    src [1] = -INFINITY;
    src [2] = 1.0f + 0x1.0p-8f;
    kd_bf16_from_float (ha, src, N);
    kd_half_force_portable (true);
    kd_bf16_from_float (hb, src, N);
    kd_half_force_portable (false);
    cr_expect (!memcmp (ha, hb, N * 2), "bf16 paths differ");
    kd_bf16_to_float (a, ha, N);
    kd_half_force_portable (true);
    kd_bf16_to_float (b, ha, N);
    kd_half_force_portable (false);
    cr_expect (!memcmp (a, b, N * sizeof (float)), "bf16 paths differ back");
    free (src);
    free (a);
    free (b);
    free (ha);
    free (hb);
}

Test (kd_half, bf16_rounds_to_nearest_even_and_keeps_the_range)
{
    float in [] = { 1.0f, -2.5f, 3.0e38f, 1e-38f, INFINITY, NAN, 0.0f, -0.0f };
    uint16_t h [8];
    float out [8];
    kd_bf16_from_float (h, in, 8);
    kd_bf16_to_float (out, h, 8);
    cr_expect_eq (out [0], 1.0f);
    cr_expect_eq (out [1], -2.5f);
    cr_expect (isfinite (out [2]) && fabsf (out [2] - 3.0e38f) / 3.0e38f < 0.004f);
    cr_expect (out [3] > 0 && fabsf (out [3] - 1e-38f) / 1e-38f < 0.004f);
    cr_expect (isinf (out [4]));
    cr_expect (isnan (out [5]));
    cr_expect_eq (s_bits (out [7]), 0x80000000u);
    //  Ties go to even: 1 + 2^-8 lies halfway between 1 and 1 + 2^-7.
    float tie = 1.0f + 0x1.0p-8f, up = 1.0f + 0x1.8p-8f;
    uint16_t t;
    kd_bf16_from_float (&t, &tie, 1);
    cr_expect_eq (t, 0x3f80, "tie to even");
    kd_bf16_from_float (&t, &up, 1);
    cr_expect_eq (t, 0x3f81);
    //  Relative error at most half a step: 2^-8 with 8 significant bits.
    unsigned seed = 3;
    for (int i = 0; i < 100000; i++) {
        float f = (float) ((double) rand_r (&seed) / RAND_MAX * 2000 - 1000);
        uint16_t b;
        float back;
        kd_bf16_from_float (&b, &f, 1);
        kd_bf16_to_float (&back, &b, 1);
        cr_assert (fabsf (back - f) <= fabsf (f) * 0x1.0p-8f, "%g -> %g", f, back);
    }
}
