/*  kd_sampler: the scheduler's sampler and lease book.

    Every epoch is a seeded permutation of the training rows.  A lease is a
    contiguous run of positions of one epoch's permutation, at most a batch
    long; the worker that holds it trains on exactly those rows.  The book
    hands out leases in order, takes back the leases of dropped gradients
    and departed workers (they go to the front of the queue, so they are
    trained again before any fresh row), and counts the rows applied per
    epoch.  An epoch is complete when every one of its rows was applied.

    Pure logic apart from the permutation, which is a deterministic function
    of (seed, epoch): the controller keeps the book, the scheduler turns a
    lease into row indices with kd_sampler_rows.
*/
#ifndef KD_SAMPLER_H_INCLUDED
#define KD_SAMPLER_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//  A lease: positions [pos, pos + count) of epoch `epoch`'s permutation.
//  count 0 is "no lease".
typedef struct {
    uint64_t epoch;             //  which permutation
    uint64_t pos;               //  first position in it
    uint32_t count;             //  rows, at most the batch
} kd_lease_t;

typedef struct _kd_sampler_t kd_sampler_t;

//  Create a book for `rows` training rows, leases of `batch` rows, and
//  permutations seeded by `seed`; the first lease comes from first_epoch.
//  NULL if rows or batch is 0.  Caller owns it.
kd_sampler_t *
    kd_sampler_new (uint64_t rows, uint32_t batch, uint64_t seed,
                    uint64_t first_epoch);

//  Destroy and null the caller's pointer.
void
    kd_sampler_destroy (kd_sampler_t **self_p);

//  The next lease: a returned one if any, else the next fresh run.
kd_lease_t
    kd_sampler_take (kd_sampler_t *self);

//  A lease that was not applied (its gradient was dropped, or its worker
//  left) goes back to the front of the queue.
void
    kd_sampler_give_back (kd_sampler_t *self, kd_lease_t lease);

//  A lease's rows were applied to the model.
void
    kd_sampler_applied (kd_sampler_t *self, kd_lease_t lease);

//  Rows applied so far, over every epoch.
uint64_t
    kd_sampler_applied_rows (kd_sampler_t *self);

//  Epochs complete as a leading run: epochs first .. first + n - 1 each had
//  every row applied.
uint64_t
    kd_sampler_epochs_completed (kd_sampler_t *self);

//  Rows of `epoch` applied so far, divided by the rows of an epoch.  Exactly
//  1.0 once the epoch is complete; above 1.0 would mean a row applied twice.
double
    kd_sampler_epoch_share (kd_sampler_t *self, uint64_t epoch);

//  Leases waiting in the returned queue.
size_t
    kd_sampler_returned (kd_sampler_t *self);

//  Rows per epoch.
uint64_t
    kd_sampler_rows_per_epoch (kd_sampler_t *self);

//  Write the row indices of a lease into out (lease.count entries).  The
//  permutation of an epoch is computed once and cached.  Returns 0, or -1
//  if the lease is out of range.
int
    kd_sampler_rows (kd_sampler_t *self, kd_lease_t lease, uint32_t *out);

#ifdef __cplusplus
}
#endif

#endif
