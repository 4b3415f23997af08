/*  kd_half: float32 to and from the 16-bit wire types, fp16 and bf16.

    fp16 is IEEE 754 binary16 (5 exponent bits, 10 fraction bits): finer
    than bf16 but with a range of only about 6.5e4, so larger values become
    infinity.  bf16 keeps float32's exponent and 7 fraction bits: float32's
    range, coarser steps.  Both round to nearest, ties to even, keep signed
    zeros, infinities and subnormals, and keep a NaN a NaN (quieted).

    fp16 uses the CPU's F16C instructions (VCVTPS2PH, VCVTPH2PS) when it has
    them, eight values at a time, and a portable bit-exact equivalent
    otherwise; bf16 uses AVX2 integer arithmetic where the CPU has it.  The
    tests check that every path gives the same bits.
*/
#ifndef KD_HALF_H_INCLUDED
#define KD_HALF_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void
    kd_half_from_float (uint16_t *dst, const float *src, size_t n);
void
    kd_half_to_float (float *dst, const uint16_t *src, size_t n);
void
    kd_bf16_from_float (uint16_t *dst, const float *src, size_t n);
void
    kd_bf16_to_float (float *dst, const uint16_t *src, size_t n);

//  True when fp16 conversion uses F16C here.
bool
    kd_half_has_f16c (void);

//  Use the portable paths even where F16C and AVX2 exist (for the tests and
//  benchmarks that compare them).
void
    kd_half_force_portable (bool on);

#ifdef __cplusplus
}
#endif

#endif
