/*  kd_ctrgen: a synthetic click log with a planted logistic model.

    Feature frequencies follow a power law: the k-th commonest feature is
    drawn with weight k^-zipf, by rejection-inversion (Hörmann and Derflinger,
    1996), which needs no table, so a model of 10^9 features costs nothing
    to sample.  Ranks are scattered over the index space by a fixed
    multiplicative permutation, so the hot features do not all fall in the
    first key range.  Each row holds per_row distinct features of value 1;
    its label is 1 with probability sigmoid (b + sum of the planted weights
    of its features), the weights being N (0, (2 / sqrt (per_row))^2) drawn
    from a hash of (seed, feature), so they are never stored either.

    Everything follows from the seed: the same settings write the same rows.
*/
#ifndef KD_CTRGEN_H_INCLUDED
#define KD_CTRGEN_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

typedef struct _kd_ctrgen_t kd_ctrgen_t;

//  A generator; NULL with a reason in err for impossible settings (per_row
//  over features, zipf out of (0.5, 5]).  Caller owns return value.
kd_ctrgen_t *
    kd_ctrgen_new (uint64_t features, double zipf, uint32_t per_row, uint64_t seed,
                   char *err, size_t err_size);

//  Draw the rows' features from the vocab commonest only (the power law's
//  ranks 1 to vocab), still scattered over every index.  The same seed and
//  vocab then touch keys alike at any feature count: what changes is only
//  the model's size.  Call before the first row; -1 with the reason in err
//  (when given) if vocab is under per_row or over the features.
int
    kd_ctrgen_set_vocab (kd_ctrgen_t *self, uint64_t vocab, char *err, size_t err_size);

//  Destroy and null the caller's pointer.
void
    kd_ctrgen_destroy (kd_ctrgen_t **self_p);

//  The next row: per_row feature indices in [1, features], increasing, into
//  index; returns its label, 0 or 1.  *score gets the planted model's logit.
int
    kd_ctrgen_row (kd_ctrgen_t *self, uint64_t *index, double *score);

//  The planted weight of a feature, and the bias.
double
    kd_ctrgen_weight (kd_ctrgen_t *self, uint64_t index);
double
    kd_ctrgen_bias (kd_ctrgen_t *self);

//  The planted weights' standard deviation: the prior a learner would use.
double
    kd_ctrgen_sigma (kd_ctrgen_t *self);

//  The feature index of the k-th commonest feature (k from 1).
uint64_t
    kd_ctrgen_feature_of_rank (kd_ctrgen_t *self, uint64_t rank);

//  One power-law draw: a rank in [1, features] (or [1, vocab]).
uint64_t
    kd_ctrgen_rank (kd_ctrgen_t *self);

#endif
