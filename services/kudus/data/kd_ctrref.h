/*  kd_ctrref: the references a sparse-lr model trained on a kd_ctrgen click
    log is held against, scored on its held-out rows.

    - planted: the planted model itself, every weight known.
    - seen: the planted model knowing only the features some training row
      holds (the others count as 0).
    - estimated: each feature that training holds gets its weight from the
      training rows that hold it, with every other weight known: one Newton
      step of its posterior from 0 under the generator's own prior,
      N (0, sigma^2), that is sum (y - p) / (1 / sigma^2 + sum p (1 - p)),
      p the planted probability without that feature.  A learner knows
      less (it must estimate the other weights too), so this is near what
      any learner could reach from these rows; at a few rows per feature it
      sits well under "seen", which credits an exact weight to a feature
      seen once.

    Feed it every training row, then every held-out row, in that order.
*/
#ifndef KD_CTRREF_H_INCLUDED
#define KD_CTRREF_H_INCLUDED

#include "kd_ctrgen.h"
#include <stddef.h>
#include <stdint.h>

typedef struct _kd_ctrref_t kd_ctrref_t;

//  The held-out AUCs, and the share of held-out feature draws that no
//  training row holds.  NAN where not computed.
typedef struct {
    double planted, seen, estimated;
    double unseen_share;
} kd_ctrref_result_t;

//  References for gen's rows over features features and up to test_rows
//  held-out rows; NULL when the rows do not fit in memory.  "seen" needs a
//  bit a feature and "estimated" 16 bytes more (the features are scattered
//  over the index space, so most pages are touched): above
//  KD_CTRREF_MAX_SEEN and KD_CTRREF_MAX_ESTIMATED features, or out of
//  memory, they are left out (NAN).
#define KD_CTRREF_MAX_SEEN       (1ull << 33)
#define KD_CTRREF_MAX_ESTIMATED  (1ull << 28)
kd_ctrref_t *
    kd_ctrref_new (kd_ctrgen_t *gen, uint64_t features, size_t test_rows);

//  Destroy and null the caller's pointer.
void
    kd_ctrref_destroy (kd_ctrref_t **self_p);

//  One training row: its features, the planted logit and its label, as
//  kd_ctrgen_row gave them.
void
    kd_ctrref_train (kd_ctrref_t *self, const uint64_t *index, uint32_t per_row, double score, int label);

//  One held-out row; rows past test_rows are ignored.
void
    kd_ctrref_test (kd_ctrref_t *self, const uint64_t *index, uint32_t per_row, double score, int label);

//  The AUCs over the held-out rows fed so far.
kd_ctrref_result_t
    kd_ctrref_result (kd_ctrref_t *self);

#endif
