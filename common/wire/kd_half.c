/*  kd_half: float32 to and from fp16 and bf16 (see kd_half.h).
*/
#include "kd_half.h"
#include <cpuid.h>
#include <immintrin.h>
#include <string.h>

static bool s_portable = false;

void
kd_half_force_portable (bool on)
{
    s_portable = on;
}

//  CPU features, from CPUID (compilers differ in the names their builtin
//  knows): bit 0 AVX usable, 1 F16C, 2 AVX2.
static int
s_cpu (void)
{
    static int features = -1;
    if (features >= 0)
        return features;
    features = 0;
    unsigned a, b, c, d;
    if (!__get_cpuid (1, &a, &b, &c, &d))
        return features;
    //  AVX needs the OS to save the YMM state (OSXSAVE, then XCR0).
    bool osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (osxsave && avx) {
        unsigned lo, hi;
        __asm__ volatile ("xgetbv" : "=a" (lo), "=d" (hi) : "c" (0));
        if ((lo & 6) == 6) {
            features |= 1;
            if (f16c)
                features |= 2;
            if (__get_cpuid_count (7, 0, &a, &b, &c, &d) && (b & (1u << 5)))
                features |= 4;
        }
    }
    return features;
}

bool
kd_half_has_f16c (void)
{
    return !s_portable && (s_cpu () & 3) == 3;
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

//  One float32 to bfloat16: round to nearest even; a NaN is quieted.
static uint16_t
s_to_bf16 (float f)
{
    uint32_t u = s_bits (f);
    if ((u & 0x7fffffff) > 0x7f800000)
        return (uint16_t) ((u >> 16) | 0x40);
    return (uint16_t) ((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

static bool
s_has_avx2 (void)
{
    return !s_portable && (s_cpu () & 5) == 5;
}

//  The same, eight at a time: both results, then a select by the NaN mask,
//  and the low halves packed (every value fits 16 bits, so the unsigned
//  saturation of PACKUSDW never bites).
__attribute__ ((target ("avx2")))
static void
s_to_bf16_avx2 (uint16_t *dst, const float *src, size_t n)
{
    const __m256i one = _mm256_set1_epi32 (1), bias = _mm256_set1_epi32 (0x7fff);
    const __m256i quiet_bit = _mm256_set1_epi32 (0x40), abs_mask = _mm256_set1_epi32 (0x7fffffff);
    const __m256i inf = _mm256_set1_epi32 (0x7f800000);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i u = _mm256_loadu_si256 ((const __m256i *) (src + i));
        __m256i high = _mm256_srli_epi32 (u, 16);
        __m256i rounded = _mm256_srli_epi32 (_mm256_add_epi32 (_mm256_add_epi32 (u, bias),
                                                               _mm256_and_si256 (high, one)), 16);
        __m256i nan = _mm256_cmpgt_epi32 (_mm256_and_si256 (u, abs_mask), inf);
        __m256i r = _mm256_blendv_epi8 (rounded, _mm256_or_si256 (high, quiet_bit), nan);
        __m256i packed = _mm256_permute4x64_epi64 (_mm256_packus_epi32 (r, r), 0x08);
        _mm_storeu_si128 ((__m128i *) (dst + i), _mm256_castsi256_si128 (packed));
    }
    for (; i < n; i++)
        dst [i] = s_to_bf16 (src [i]);
}

__attribute__ ((target ("avx2")))
static void
s_from_bf16_avx2 (float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i w = _mm256_cvtepu16_epi32 (_mm_loadu_si128 ((const __m128i *) (src + i)));
        _mm256_storeu_si256 ((__m256i *) (dst + i), _mm256_slli_epi32 (w, 16));
    }
    for (; i < n; i++)
        dst [i] = s_float ((uint32_t) src [i] << 16);
}

void
kd_bf16_from_float (uint16_t *dst, const float *src, size_t n)
{
    if (s_has_avx2 ()) {
        s_to_bf16_avx2 (dst, src, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst [i] = s_to_bf16 (src [i]);
}

void
kd_bf16_to_float (float *dst, const uint16_t *src, size_t n)
{
    if (s_has_avx2 ()) {
        s_from_bf16_avx2 (dst, src, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dst [i] = s_float ((uint32_t) src [i] << 16);
}
