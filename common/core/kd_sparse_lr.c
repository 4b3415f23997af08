/*  kd_sparse_lr: sparse logistic regression (see kd_sparse_lr.h).
*/
#include "kd_sparse_lr.h"
#include "kd_log.h"
#include "kd_util.h"
#include "kudus/kd_libsvm.h"
#include <assert.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#define S_LOGGED_LINES  5           //  bad lines logged one by one

struct _kd_sparse_lr_t {
    size_t rows, skipped;
    uint64_t features;          //  largest feature index
    size_t max_nnz;             //  most entries in one row
    size_t *start;              //  row r: entries [start [r], start [r + 1])
    uint64_t *index;            //  feature indices, increasing in a row
    float *value;
    float *label;               //  1 (click) or 0
    size_t nnz, cap;            //  entries held, and room
    //  The batch of the last kd_sparse_lr_batch
    uint64_t *batch_rows;       //  rows taken
    size_t n_batch;
    uint64_t *keys;             //  its distinct keys
    size_t n_keys;
    size_t *pos;                //  each entry's key, as an index into keys
    size_t batch_cap, entry_cap;
};

static int
s_cmp_u64 (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

//  Append one row; returns 0, or -1 out of memory.
static int
s_append (kd_sparse_lr_t *self, const kd_libsvm_row_t *row)
{
    if (self->nnz + row->nnz > self->cap) {
        size_t cap = self->cap ? self->cap * 2 : 1 << 16;
        while (cap < self->nnz + row->nnz)
            cap *= 2;
        uint64_t *index = (uint64_t *) realloc (self->index, cap * sizeof (uint64_t));
        if (index)
            self->index = index;
        float *value = (float *) realloc (self->value, cap * sizeof (float));
        if (value)
            self->value = value;
        if (!index || !value)
            return -1;
        self->cap = cap;
    }
    if ((self->rows & (self->rows + 1)) == 0) {
        //  rows + 1 is a power of two: double the per-row arrays.
        size_t n = 2 * (self->rows + 1);
        size_t *start = (size_t *) realloc (self->start, (n + 1) * sizeof (size_t));
        if (start)
            self->start = start;
        float *label = (float *) realloc (self->label, n * sizeof (float));
        if (label)
            self->label = label;
        if (!start || !label)
            return -1;
    }
    memcpy (self->index + self->nnz, row->index, row->nnz * sizeof (uint64_t));
    memcpy (self->value + self->nnz, row->value, row->nnz * sizeof (float));
    self->start [self->rows] = self->nnz;
    self->label [self->rows] = row->label > 0 ? 1.0f : 0.0f;
    self->nnz += row->nnz;
    self->rows++;
    self->start [self->rows] = self->nnz;
    if (row->nnz > self->max_nnz)
        self->max_nnz = row->nnz;
    if (row->nnz > 0 && row->index [row->nnz - 1] > self->features)
        self->features = row->index [row->nnz - 1];
    return 0;
}

kd_sparse_lr_t *
kd_sparse_lr_load (const char *path, uint64_t features, size_t max_rows, char *err, size_t err_size)
{
    kd_libsvm_t *reader = kd_libsvm_open (path, features, err, err_size);
    if (!reader)
        return NULL;
    kd_sparse_lr_t *self = (kd_sparse_lr_t *) calloc (1, sizeof (kd_sparse_lr_t));
    if (!self) {
        kd_libsvm_destroy (&reader);
        snprintf (err, err_size, "%s: out of memory", path);
        return NULL;
    }
    kd_libsvm_row_t row;
    char why [256] = "";
    int rc = 0;
    while ((max_rows == 0 || self->rows < max_rows)
    &&     (rc = kd_libsvm_next (reader, &row, why, sizeof why)) != 0) {
        if (rc == -2) {
            if (self->skipped++ < S_LOGGED_LINES)
                kd_warn ("skipped: %s", why);
            continue;
        }
        if (rc < 0)
            break;
        if (s_append (self, &row)) {
            snprintf (err, err_size, "%s: out of memory after %zu rows", path, self->rows);
            kd_libsvm_destroy (&reader);
            kd_sparse_lr_destroy (&self);
            return NULL;
        }
    }
    kd_libsvm_destroy (&reader);
    if (rc < 0 && rc != -2) {
        snprintf (err, err_size, "%s", why);
        kd_sparse_lr_destroy (&self);
        return NULL;
    }
    if (self->rows == 0) {
        snprintf (err, err_size, "%s: no good row (%zu lines skipped)", path, self->skipped);
        kd_sparse_lr_destroy (&self);
        return NULL;
    }
    if (features > self->features)
        self->features = features;
    if (self->skipped > S_LOGGED_LINES)
        kd_warn ("%s: %zu bad lines skipped in all", path, self->skipped);
    return self;
}

void
kd_sparse_lr_destroy (kd_sparse_lr_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kd_sparse_lr_t *self = *self_p;
    free (self->start);
    free (self->index);
    free (self->value);
    free (self->label);
    free (self->batch_rows);
    free (self->keys);
    free (self->pos);
    free (self);
    *self_p = NULL;
}

size_t
kd_sparse_lr_rows (kd_sparse_lr_t *self)
{
    return self->rows;
}

size_t
kd_sparse_lr_skipped (kd_sparse_lr_t *self)
{
    return self->skipped;
}

uint64_t
kd_sparse_lr_features (kd_sparse_lr_t *self)
{
    return self->features;
}

size_t
kd_sparse_lr_max_nnz (kd_sparse_lr_t *self)
{
    return self->max_nnz;
}

//  Index of key in the batch's sorted keys (present by construction).
static size_t
s_find (const uint64_t *keys, size_t n, uint64_t key)
{
    const uint64_t *hit = (const uint64_t *) bsearch (&key, keys, n, sizeof *keys, s_cmp_u64);
    assert (hit);
    return (size_t) (hit - keys);
}

size_t
kd_sparse_lr_batch (kd_sparse_lr_t *self, const uint64_t *rows, size_t n_rows,
                    const uint64_t **keys, size_t *n_keys)
{
    size_t entries = 0, taken = 0;
    for (size_t r = 0; r < n_rows; r++)
        if (rows [r] < self->rows)
            entries += self->start [rows [r] + 1] - self->start [rows [r]];
    if (n_rows > self->batch_cap || entries + 1 > self->entry_cap) {
        size_t bc = n_rows > self->batch_cap ? n_rows : self->batch_cap;
        size_t ec = entries + 1 > self->entry_cap ? 2 * (entries + 1) : self->entry_cap;
        //  A worker's batch is a few thousand entries; the monitor's
        //  held-out batch is the whole file, and may not fit.
        uint64_t *br = (uint64_t *) realloc (self->batch_rows, bc * sizeof (uint64_t));
        if (br)
            self->batch_rows = br;
        uint64_t *k = (uint64_t *) realloc (self->keys, ec * sizeof (uint64_t));
        if (k)
            self->keys = k;
        size_t *p = (size_t *) realloc (self->pos, ec * sizeof (size_t));
        if (p)
            self->pos = p;
        if (!br || !k || !p) {
            *keys = NULL;
            *n_keys = 0;
            return 0;
        }
        self->batch_cap = bc;
        self->entry_cap = ec;
    }
    size_t n = 0;
    self->keys [n++] = 0;
    for (size_t r = 0; r < n_rows; r++) {
        if (rows [r] >= self->rows) {
            kd_error ("lease row out of range row=%llu rows=%zu", (unsigned long long) rows [r], self->rows);
            continue;
        }
        self->batch_rows [taken++] = rows [r];
        for (size_t e = self->start [rows [r]]; e < self->start [rows [r] + 1]; e++)
            self->keys [n++] = self->index [e];
    }
    qsort (self->keys, n, sizeof (uint64_t), s_cmp_u64);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || self->keys [i] != self->keys [u - 1])
            self->keys [u++] = self->keys [i];
    self->n_keys = u;
    self->n_batch = taken;
    //  Where each entry's key sits, once, for the gradient.
    size_t at = 0;
    for (size_t b = 0; b < taken; b++)
        for (size_t e = self->start [self->batch_rows [b]]; e < self->start [self->batch_rows [b] + 1]; e++)
            self->pos [at++] = s_find (self->keys, u, self->index [e]);
    *keys = self->keys;
    *n_keys = u;
    return taken;
}

//  Batch row b's logit under w; *at walks its entries' key positions.
static double
s_logit (kd_sparse_lr_t *self, size_t b, const float *w, size_t *at)
{
    uint64_t row = self->batch_rows [b];
    double z = w [0];
    for (size_t e = self->start [row]; e < self->start [row + 1]; e++)
        z += (double) w [self->pos [(*at)++]] * self->value [e];
    return z;
}

//  log p and log (1 - p) of a logit, in the log(1 + e^-|z|) form: no
//  overflow for any z.
static void
s_log_probs (double z, double *lp, double *lq)
{
    *lp = z >= 0 ? -log1p (exp (-z)) : z - log1p (exp (z));
    *lq = z >= 0 ? -z - log1p (exp (-z)) : -log1p (exp (z));
}

float
kd_sparse_lr_gradient (kd_sparse_lr_t *self, const float *w, float *g)
{
    memset (g, 0, self->n_keys * sizeof (float));
    if (self->n_batch == 0)
        return 0;
    double loss = 0;
    size_t at = 0;
    for (size_t b = 0; b < self->n_batch; b++) {
        uint64_t row = self->batch_rows [b];
        size_t first = at;
        double lp, lq;
        s_log_probs (s_logit (self, b, w, &at), &lp, &lq);
        float y = self->label [row];
        loss -= y > 0 ? lp : lq;
        float d = (float) ((exp (lp) - y) / (double) self->n_batch);
        g [0] += d;
        at = first;
        for (size_t e = self->start [row]; e < self->start [row + 1]; e++)
            g [self->pos [at++]] += d * self->value [e];
    }
    return (float) (loss / (double) self->n_batch);
}

int
kd_sparse_lr_evaluate (kd_sparse_lr_t *self, const float *w, double *auc, double *loss,
                       double *accuracy)
{
    *auc = *loss = *accuracy = NAN;
    if (self->n_batch == 0)
        return 0;
    double *scores = (double *) malloc (self->n_batch * sizeof (double));
    uint8_t *labels = (uint8_t *) malloc (self->n_batch);
    if (!scores || !labels) {
        free (scores);
        free (labels);
        return -1;
    }
    double sum = 0;
    size_t right = 0, at = 0;
    for (size_t b = 0; b < self->n_batch; b++) {
        double z = s_logit (self, b, w, &at), lp, lq;
        s_log_probs (z, &lp, &lq);
        bool click = self->label [self->batch_rows [b]] > 0;
        sum -= click ? lp : lq;
        right += (z >= 0) == click;
        scores [b] = z;
        labels [b] = click;
    }
    *auc = kd_auc (scores, labels, self->n_batch);
    *loss = sum / (double) self->n_batch;
    *accuracy = (double) right / (double) self->n_batch;
    free (scores);
    free (labels);
    return 0;
}
