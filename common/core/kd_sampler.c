/*  kd_sampler: the scheduler's sampler and lease book.

    Fresh leases are cut from the permutation of the current epoch in
    order; once it is used up the next epoch starts.  Returned leases sit on
    a stack that is served before any fresh run, so the rows of a dropped
    gradient are trained again next.  Applied rows are counted per epoch,
    for every epoch since the first, so a row applied twice shows as a
    share above 1 however late it happens; an epoch stays open while any of
    its leases is out, however long its holder takes.
*/
#include "kd_sampler.h"
#include "kd_util.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

//  Permutations kept: the epoch being cut and the one before, where
//  returned leases come from.
#define S_PERM_CACHE 2

//  One cached permutation.
typedef struct {
    uint64_t epoch;             //  which epoch; UINT64_MAX = empty
    uint32_t *rows;             //  rows_per_epoch entries
} s_perm_t;

struct _kd_sampler_t {
    uint64_t rows;              //  rows per epoch
    uint32_t batch;             //  rows per fresh lease at most
    uint64_t seed;              //  permutation seed
    uint64_t epoch;             //  epoch fresh leases come from
    uint64_t pos;               //  next fresh position in it
    kd_lease_t *returned;       //  stack of returned leases
    size_t n_returned;          //  leases on it
    size_t cap_returned;        //  allocated
    uint64_t first;             //  first epoch counted
    uint64_t *applied;          //  applied rows per epoch, from first
    size_t n_epochs;            //  epochs counted
    size_t cap_epochs;          //  allocated
    uint64_t completed;         //  epochs complete
    uint64_t applied_rows;      //  rows applied in all
    s_perm_t perms [S_PERM_CACHE];  //  permutation cache
    size_t next_perm;           //  cache slot to replace next
};

//  Grow an array to `need` elements; out of memory aborts.
static void *
s_reserve (void *array, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return array;
    size_t cap_new = *cap ? *cap * 2 : 8;
    while (cap_new < need)
        cap_new *= 2;
    array = realloc (array, cap_new * size);
    if (!array)
        abort ();
    *cap = cap_new;
    return array;
}

//  Create a book.
kd_sampler_t *
kd_sampler_new (uint64_t rows, uint32_t batch, uint64_t seed, uint64_t first_epoch)
{
    if (rows == 0 || batch == 0 || rows > UINT32_MAX)
        return NULL;
    kd_sampler_t *self = (kd_sampler_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->rows = rows;
    self->batch = batch;
    self->seed = seed;
    self->epoch = first_epoch;
    self->first = first_epoch;
    for (size_t i = 0; i < S_PERM_CACHE; i++)
        self->perms [i].epoch = UINT64_MAX;
    return self;
}

//  Destroy and null the caller's pointer.
void
kd_sampler_destroy (kd_sampler_t **self_p)
{
    assert (self_p);
    kd_sampler_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < S_PERM_CACHE; i++)
        free (self->perms [i].rows);
    free (self->returned);
    free (self->applied);
    free (self);
    *self_p = NULL;
}

//  Applied count of an epoch, growing the table to reach it.
static uint64_t *
s_slot (kd_sampler_t *self, uint64_t epoch)
{
    assert (epoch >= self->first);
    size_t index = (size_t) (epoch - self->first);
    if (index >= self->n_epochs) {
        self->applied = (uint64_t *) s_reserve (self->applied, &self->cap_epochs, index + 1,
                                                sizeof (uint64_t));
        memset (self->applied + self->n_epochs, 0,
                (index + 1 - self->n_epochs) * sizeof (uint64_t));
        self->n_epochs = index + 1;
    }
    return &self->applied [index];
}

//  The next lease.
kd_lease_t
kd_sampler_take (kd_sampler_t *self)
{
    assert (self);
    if (self->n_returned > 0)
        return self->returned [--self->n_returned];
    if (self->pos >= self->rows) {
        self->epoch++;
        self->pos = 0;
    }
    uint64_t left = self->rows - self->pos;
    kd_lease_t lease = {
        .epoch = self->epoch, .pos = self->pos,
        .count = (uint32_t) (left < self->batch ? left : self->batch)
    };
    self->pos += lease.count;
    s_slot (self, lease.epoch);
    return lease;
}

//  A lease that was not applied goes to the front of the queue.
void
kd_sampler_give_back (kd_sampler_t *self, kd_lease_t lease)
{
    assert (self);
    if (lease.count == 0)
        return;
    self->returned = (kd_lease_t *) s_reserve (self->returned, &self->cap_returned,
                                               self->n_returned + 1, sizeof (kd_lease_t));
    self->returned [self->n_returned++] = lease;
}

//  A lease's rows were applied.
void
kd_sampler_applied (kd_sampler_t *self, kd_lease_t lease)
{
    assert (self);
    if (lease.count == 0 || lease.epoch < self->first)
        return;
    uint64_t *slot = s_slot (self, lease.epoch);
    *slot += lease.count;
    self->applied_rows += lease.count;
    //  Complete epochs are counted as a leading run: epochs 0 .. completed-1
    //  all complete, whatever order their last leases came back in.
    while (self->completed < self->n_epochs && self->applied [self->completed] >= self->rows)
        self->completed++;
}

//  Rows applied so far.
uint64_t
kd_sampler_applied_rows (kd_sampler_t *self)
{
    assert (self);
    return self->applied_rows;
}

//  Epochs whose every row was applied.
uint64_t
kd_sampler_epochs_completed (kd_sampler_t *self)
{
    assert (self);
    return self->completed;
}

//  Share of an epoch's rows applied so far.
double
kd_sampler_epoch_share (kd_sampler_t *self, uint64_t epoch)
{
    assert (self);
    if (epoch < self->first || epoch - self->first >= self->n_epochs)
        return 0.0;
    return (double) self->applied [epoch - self->first] / (double) self->rows;
}

//  Leases waiting in the returned queue.
size_t
kd_sampler_returned (kd_sampler_t *self)
{
    assert (self);
    return self->n_returned;
}

//  Rows per epoch.
uint64_t
kd_sampler_rows_per_epoch (kd_sampler_t *self)
{
    assert (self);
    return self->rows;
}

//  The permutation of an epoch: Fisher-Yates driven by splitmix64 seeded
//  from (seed, epoch), so any process can compute it.
static const uint32_t *
s_perm (kd_sampler_t *self, uint64_t epoch)
{
    for (size_t i = 0; i < S_PERM_CACHE; i++)
        if (self->perms [i].epoch == epoch)
            return self->perms [i].rows;
    s_perm_t *perm = &self->perms [self->next_perm];
    self->next_perm = (self->next_perm + 1) % S_PERM_CACHE;
    if (!perm->rows) {
        perm->rows = (uint32_t *) malloc (self->rows * sizeof (uint32_t));
        if (!perm->rows)
            abort ();
    }
    perm->epoch = epoch;
    uint64_t state = kd_mix64 (self->seed ^ kd_mix64 (epoch + 0x5851F42D4C957F2Dull));
    for (uint64_t i = 0; i < self->rows; i++)
        perm->rows [i] = (uint32_t) i;
    for (uint64_t i = self->rows; i > 1; i--) {
        uint64_t j = kd_splitmix64 (&state) % i;
        uint32_t t = perm->rows [i - 1];
        perm->rows [i - 1] = perm->rows [j];
        perm->rows [j] = t;
    }
    return perm->rows;
}

//  Row indices of a lease.
int
kd_sampler_rows (kd_sampler_t *self, kd_lease_t lease, uint32_t *out)
{
    assert (self);
    if (lease.pos > self->rows || lease.count > self->rows - lease.pos)
        return -1;
    if (lease.count == 0)
        return 0;
    const uint32_t *perm = s_perm (self, lease.epoch);
    memcpy (out, perm + lease.pos, lease.count * sizeof (uint32_t));
    return 0;
}
