/*  kd_half: float32 to and from fp16 and bf16 (see kd_half.h).
*/
#include "kd_half.h"
#include <immintrin.h>
#include <string.h>

static bool s_portable = false;

void
kd_half_force_portable (bool on)
{
    s_portable = on;
}

bool
kd_half_has_f16c (void)
{
    return !s_portable && __builtin_cpu_supports ("f16c") && __builtin_cpu_supports ("avx");
}

static uint32_t
s_bits (float f)
{
    uint32_t u;
    memcpy (&u, &f, 4);
    return u;
}

static float
s_float (uint32_t u)
{
    float f;
    memcpy (&f, &u, 4);
    return f;
}

//  One float32 to binary16, round to nearest even, as VCVTPS2PH with
//  imm8 = 0 does (a NaN keeps its top fraction bits and is quieted).
static uint16_t
s_to_half (float f)
{
    uint32_t u = s_bits (f);
    uint16_t sign = (uint16_t) ((u >> 16) & 0x8000);
    uint32_t exp = (u >> 23) & 0xff, frac = u & 0x7fffff;
    if (exp == 0xff)
        return (uint16_t) (sign | 0x7c00 | (frac ? 0x200 | (frac >> 13) : 0));
    //  The value's exponent, unbiased.
    int e = (int) exp - 127;
    if (e > 15)
        return (uint16_t) (sign | 0x7c00);          //  overflow: infinity
    if (e >= -14) {
        //  Normal in fp16: 10 fraction bits, round the 13 dropped.
        uint32_t half = ((uint32_t) (e + 15) << 10) | (frac >> 13);
        uint32_t rest = frac & 0x1fff;
        if (rest > 0x1000 || (rest == 0x1000 && (half & 1)))
            half++;                                 //  may carry into the exponent, even to infinity
        return (uint16_t) (sign | half);
    }
    if (e < -25)
        return sign;                                //  below half the smallest subnormal
    //  Subnormal in fp16: the value is m * 2^-24 with m < 1024.
    uint32_t mant = frac | 0x800000;                //  24 significant bits
    int shift = -e - 1;                             //  14 to 24 bits drop
    uint32_t half = mant >> shift;
    uint32_t rest = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1)))
        half++;
    return (uint16_t) (sign | half);
}

//  One binary16 to float32 (exact; a NaN is quieted, as VCVTPH2PS does).
static float
s_from_half (uint16_t h)
{
    uint32_t sign = (uint32_t) (h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, frac = h & 0x3ff;
    if (exp == 0x1f)
        return s_float (sign | 0x7f800000 | (frac ? 0x400000 | (frac << 13) : 0));
    if (exp == 0) {
        if (frac == 0)
            return s_float (sign);
        //  Subnormal: normalize.
        int e = -14;
        while (!(frac & 0x400)) {
            frac <<= 1;
            e--;
        }
        frac &= 0x3ff;
        return s_float (sign | ((uint32_t) (e + 127) << 23) | (frac << 13));
    }
    return s_float (sign | ((exp - 15 + 127) << 23) | (frac << 13));
}

__attribute__ ((target ("avx,f16c")))
static void
s_to_half_f16c (uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps (src + i);
        _mm_storeu_si128 ((__m128i *) (dst + i), _mm256_cvtps_ph (v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++)
        dst [i] = s_to_half (src [i]);
}

__attribute__ ((target ("avx,f16c")))
static void
s_from_half_f16c (float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128 ((const __m128i *) (src + i));
        _mm256_storeu_ps (dst + i, _mm256_cvtph_ps (h));
    }
    for (; i < n; i++)
        dst [i] = s_from_half (src [i]);
}

void
kd_half_from_float (uint16_t *dst, const float *src, size_t n)
{
    if (kd_half_has_f16c ()) {
        s_to_half_f16c (dst, src, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst [i] = s_to_half (src [i]);
}

void
kd_half_to_float (float *dst, const uint16_t *src, size_t n)
{
    if (kd_half_has_f16c ()) {
        s_from_half_f16c (dst, src, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst [i] = s_from_half (src [i]);
}

void
kd_bf16_from_float (uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u = s_bits (src [i]);
        if ((u & 0x7fffffff) > 0x7f800000)
            dst [i] = (uint16_t) ((u >> 16) | 0x40);    //  NaN: quiet, keep the sign
        else
            dst [i] = (uint16_t) ((u + 0x7fff + ((u >> 16) & 1)) >> 16);
    }
}

void
kd_bf16_to_float (float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst [i] = s_float ((uint32_t) src [i] << 16);
}
