/*  kd_keyed: a shard's keyed (sparse) range (see kd_keyed.h).
*/
#include "kd_keyed.h"
#include "kd_sparse.h"
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _kd_keyed_t {
    uint64_t lo, hi;            //  the range's keys
    size_t dim;                 //  floats per key
    kd_optimizer_opts_t opts;   //  the update rule
    kd_sparse_t *rows;          //  the touched rows and their optimizer state
    uint64_t *ukeys;            //  commit scratch: the union of the keys
    float *ug;                  //  ... their combined gradient rows
    size_t cap;                 //  keys the scratch holds
};

kd_keyed_t *
kd_keyed_new (uint64_t lo, uint64_t hi, size_t dim, const kd_optimizer_opts_t *opts)
{
    if (hi <= lo || dim == 0 || !opts)
        return NULL;
    kd_keyed_t *self = (kd_keyed_t *) calloc (1, sizeof (kd_keyed_t));
    if (!self)
        return NULL;
    self->lo = lo;
    self->hi = hi;
    self->dim = dim;
    self->opts = *opts;
    self->rows = kd_sparse_new (dim, opts, 0.0, 0);
    if (!self->rows) {
        free (self);
        return NULL;
    }
    return self;
}

void
kd_keyed_destroy (kd_keyed_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    kd_keyed_t *self = *self_p;
    kd_sparse_destroy (&self->rows);
    free (self->ukeys);
    free (self->ug);
    free (self);
    *self_p = NULL;
}

size_t
kd_keyed_dim (kd_keyed_t *self)
{
    assert (self);
    return self->dim;
}

int
kd_keyed_check (kd_keyed_t *self, const uint64_t *keys, size_t n, size_t values,
                char *why, size_t why_size)
{
    assert (self);
    //  The codec proved the keys strictly increasing: the ends bound them all.
    if (n > 0 && (keys [0] < self->lo || keys [n - 1] >= self->hi)) {
        snprintf (why, why_size, "keys %llu..%llu outside this shard's range [%llu, %llu)",
                  (unsigned long long) keys [0], (unsigned long long) keys [n - 1],
                  (unsigned long long) self->lo, (unsigned long long) self->hi);
        return -1;
    }
    if (values != SIZE_MAX && values != n * self->dim) {
        snprintf (why, why_size, "%zu values for %zu keys of %zu values each", values, n, self->dim);
        return -1;
    }
    return 0;
}

zframe_t *
kd_keyed_stage (kd_keyed_t *self, const uint64_t *keys, size_t n, const float *values)
{
    assert (self);
    size_t bytes = sizeof (uint64_t) * (1 + n) + n * self->dim * sizeof (float);
    zframe_t *frame = zframe_new (NULL, bytes);
    uint8_t *p = zframe_data (frame);
    uint64_t count = n;
    memcpy (p, &count, sizeof count);
    if (n > 0) {
        memcpy (p + sizeof count, keys, n * sizeof (uint64_t));
        memcpy (p + sizeof count * (1 + n), values, n * self->dim * sizeof (float));
    }
    return frame;
}

bool
kd_keyed_staged_ok (kd_keyed_t *self, zframe_t *frame)
{
    assert (self);
    if (!frame || zframe_size (frame) < sizeof (uint64_t))
        return false;
    uint64_t n;
    memcpy (&n, zframe_data (frame), sizeof n);
    return n <= zframe_size (frame)
        && zframe_size (frame) == sizeof (uint64_t) * (1 + n) + n * self->dim * sizeof (float);
}

//  The parts of a staged frame.
static size_t
s_parts (const void *staged, size_t dim, const uint64_t **keys, const float **values)
{
    const uint8_t *p = (const uint8_t *) staged;
    uint64_t n;
    memcpy (&n, p, sizeof n);
    *keys = (const uint64_t *) (p + sizeof n);
    *values = (const float *) (p + sizeof n * (1 + n));
    (void) dim;
    return (size_t) n;
}

int
kd_keyed_commit (kd_keyed_t *self, const void *const *staged, const double *weights, size_t n)
{
    assert (self);
    if (n == 0)
        return 0;
    size_t total = 0;
    double w_all = 0;
    const uint64_t *keys [n];
    const float *values [n];
    size_t len [n], at [n];
    for (size_t i = 0; i < n; i++) {
        len [i] = s_parts (staged [i], self->dim, &keys [i], &values [i]);
        at [i] = 0;
        total += len [i];
        w_all += weights [i];
    }
    if (total > self->cap) {
        uint64_t *k = (uint64_t *) realloc (self->ukeys, total * sizeof (uint64_t));
        if (k)
            self->ukeys = k;
        float *g = (float *) realloc (self->ug, total * self->dim * sizeof (float));
        if (g)
            self->ug = g;
        if (!k || !g)
            return -1;
        self->cap = total;
    }
    //  A k-way merge of the sorted key lists: k is the gradients of one
    //  commit (a few workers), so a linear scan for the least head is fine.
    size_t u = 0;
    for (;;) {
        uint64_t least = UINT64_MAX;
        bool any = false;
        for (size_t i = 0; i < n; i++)
            if (at [i] < len [i] && (!any || keys [i][at [i]] < least)) {
                least = keys [i][at [i]];
                any = true;
            }
        if (!any)
            break;
        float *row = self->ug + u * self->dim;
        memset (row, 0, self->dim * sizeof (float));
        double w_key = 0;
        for (size_t i = 0; i < n; i++)
            if (at [i] < len [i] && keys [i][at [i]] == least) {
                const float *g = values [i] + at [i] * self->dim;
                for (size_t d = 0; d < self->dim; d++)
                    row [d] += (float) weights [i] * g [d];
                w_key += weights [i];
                at [i]++;
            }
        if (w_key <= 0)
            continue;               //  only zero weights touched it
        float scale = (float) (w_all / w_key);
        for (size_t d = 0; d < self->dim; d++)
            row [d] *= scale;
        self->ukeys [u++] = least;
    }
    return kd_sparse_step (self->rows, self->ukeys, u, self->ug);
}

void
kd_keyed_pull (kd_keyed_t *self, const uint64_t *keys, size_t n, float *out)
{
    assert (self);
    kd_sparse_pull (self->rows, keys, n, out);
}

const kd_optimizer_opts_t *
kd_keyed_opts (kd_keyed_t *self)
{
    assert (self);
    return &self->opts;
}

kd_sparse_t *
kd_keyed_table (kd_keyed_t *self)
{
    assert (self);
    return self->rows;
}

size_t
kd_keyed_rows (kd_keyed_t *self)
{
    assert (self);
    return kd_sparse_rows (self->rows);
}

size_t
kd_keyed_bytes (kd_keyed_t *self)
{
    assert (self);
    return kd_sparse_bytes (self->rows) + self->cap * (sizeof (uint64_t) + self->dim * sizeof (float));
}
