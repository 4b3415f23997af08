/*  kd_ctrref: the references a trained click-log model is held against
    (see kd_ctrref.h).
*/
#include "kd_ctrref.h"
#include "kd_util.h"
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

struct _kd_ctrref_t {
    kd_ctrgen_t *gen;           //  not owned
    uint64_t features;
    uint64_t *seen;             //  a bit a feature: some training row holds it
    double *num, *den;          //  a feature's sum (y - p) and sum p (1 - p)
    double *scores [3];         //  held-out scores: planted, seen, estimated
    uint8_t *labels;
    size_t cap, n;              //  held-out rows kept, and fed
    uint64_t draws, unseen;     //  held-out feature draws, those unseen
};

kd_ctrref_t *
kd_ctrref_new (kd_ctrgen_t *gen, uint64_t features, size_t test_rows)
{
    kd_ctrref_t *self = (kd_ctrref_t *) calloc (1, sizeof (kd_ctrref_t));
    if (!self)
        return NULL;
    self->gen = gen;
    self->features = features;
    self->cap = test_rows;
    self->labels = (uint8_t *) malloc (test_rows + 1);
    bool ok = self->labels != NULL;
    for (int k = 0; k < 3; k++)
        ok = ok && (self->scores [k] = (double *) malloc ((test_rows + 1) * sizeof (double)));
    //  The per-feature references cost memory per feature, not per row:
    //  past their bounds, or out of memory, they are left out (NAN) and the
    //  planted model's AUC is still given.
    if (ok && features <= KD_CTRREF_MAX_SEEN)
        self->seen = (uint64_t *) calloc (features / 64 + 1, sizeof (uint64_t));
    //  Doubles: a common feature sums tens of millions of terms, past
    //  float's 24 bits.
    if (ok && self->seen && features <= KD_CTRREF_MAX_ESTIMATED) {
        self->num = (double *) calloc (features + 1, sizeof (double));
        self->den = (double *) calloc (features + 1, sizeof (double));
        if (!self->num || !self->den) {
            free (self->num);
            free (self->den);
            self->num = self->den = NULL;
        }
    }
    if (!ok)
        kd_ctrref_destroy (&self);
    return self;
}

void
kd_ctrref_destroy (kd_ctrref_t **self_p)
{
    if (self_p && *self_p) {
        kd_ctrref_t *self = *self_p;
        free (self->seen);
        free (self->num);
        free (self->den);
        for (int k = 0; k < 3; k++)
            free (self->scores [k]);
        free (self->labels);
        free (self);
        *self_p = NULL;
    }
}

void
kd_ctrref_train (kd_ctrref_t *self, const uint64_t *index, uint32_t per_row, double score, int label)
{
    for (uint32_t i = 0; i < per_row && self->seen; i++) {
        uint64_t f = index [i];
        if (f > self->features)
            continue;
        self->seen [f / 64] |= 1ull << (f % 64);
        if (self->num) {
            //  The row's probability without this feature's own weight.
            double p = 1 / (1 + exp (-(score - kd_ctrgen_weight (self->gen, f))));
            self->num [f] += label - p;
            self->den [f] += p * (1 - p);
        }
    }
}

void
kd_ctrref_test (kd_ctrref_t *self, const uint64_t *index, uint32_t per_row, double score, int label)
{
    if (self->n >= self->cap)
        return;
    double prior = 1 / pow (kd_ctrgen_sigma (self->gen), 2);
    double seen = 0, estimated = 0;
    for (uint32_t i = 0; i < per_row; i++) {
        uint64_t f = index [i];
        if (self->seen && f <= self->features && (self->seen [f / 64] & (1ull << (f % 64)))) {
            seen += kd_ctrgen_weight (self->gen, f);
            if (self->num)
                estimated += self->num [f] / (prior + self->den [f]);
        }
        else
            self->unseen++;
    }
    self->draws += per_row;
    //  The bias is the same on every row, so AUC needs none of them.
    self->scores [0][self->n] = score;
    self->scores [1][self->n] = seen;
    self->scores [2][self->n] = estimated;
    self->labels [self->n++] = (uint8_t) (label != 0);
}

kd_ctrref_result_t
kd_ctrref_result (kd_ctrref_t *self)
{
    kd_ctrref_result_t r = { NAN, NAN, NAN, NAN };
    if (self->n == 0)
        return r;
    r.planted = kd_auc (self->scores [0], self->labels, self->n);
    if (self->seen) {
        r.seen = kd_auc (self->scores [1], self->labels, self->n);
        r.unseen_share = (double) self->unseen / (double) self->draws;
    }
    if (self->num)
        r.estimated = kd_auc (self->scores [2], self->labels, self->n);
    return r;
}
