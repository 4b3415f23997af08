/*  kd_sparse: a shard's sparse tensor, rows created on first touch.

    Parameter servers exist for models too large to move whole: a
    click-through model of 10^8 features touches about 40 of them per row.
    A sparse tensor holds a row of `dim` floats per key that some gradient
    touched, with the optimizer's state for that row beside it, in a hash
    table (open addressing, linear probing) over an arena of rows.  Memory
    follows the touched keys, not the key space.

    A key never touched reads as its initial value (0, or a small uniform
    value drawn from (seed, key, column) when init_scale > 0), and reading
    it creates nothing: only a step does.  A step applies the rule of
    kd_optimizer to each touched row, with the tensor's step count, so a
    row's update is the dense rule's on that row.
*/
#ifndef KD_SPARSE_H_INCLUDED
#define KD_SPARSE_H_INCLUDED

#include "kd_optimizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _kd_sparse_t kd_sparse_t;

//  A sparse tensor of rows of dim floats, updated by opts.  init_scale 0
//  starts rows at 0, else uniform in [-init_scale, init_scale].  NULL for
//  bad arguments.  Caller owns return value.
kd_sparse_t *
    kd_sparse_new (size_t dim, const kd_optimizer_opts_t *opts, double init_scale, uint64_t seed);

//  Destroy and null the caller's pointer.
void
    kd_sparse_destroy (kd_sparse_t **self_p);

//  The rows of n keys into out (n * dim floats); keys never touched read as
//  their initial value and are not created.
void
    kd_sparse_pull (kd_sparse_t *self, const uint64_t *keys, size_t n, float *out);

//  One optimizer step on the rows of n distinct keys with gradient rows g
//  (n * dim floats), creating rows on first touch.  Returns 0, or -1 when
//  the table cannot grow (nothing is applied then).
int
    kd_sparse_step (kd_sparse_t *self, const uint64_t *keys, size_t n, const float *g);

//  Training samples applied before the next step: the schedule's clock
//  under "unit=samples" (kd_optimizer_set_samples).
void
    kd_sparse_set_samples (kd_sparse_t *self, uint64_t samples);

//  Rows held, steps taken, and the bytes of rows and table.
size_t
    kd_sparse_rows (kd_sparse_t *self);
uint64_t
    kd_sparse_steps (kd_sparse_t *self);
size_t
    kd_sparse_bytes (kd_sparse_t *self);

//  The i-th row held (0 <= i < rows), in creation order, for checkpoints:
//  its key, and its values (dim floats, borrowed).
const float *
    kd_sparse_row (kd_sparse_t *self, size_t i, uint64_t *key);

//  Every row held, for a checkpoint: the keys in creation order, and the
//  rows in the same order, stride floats each (the dim values, then the
//  optimizer's state buffers of dim floats each).  Borrowed, valid until
//  the next step.
const uint64_t *
    kd_sparse_keys (kd_sparse_t *self);
const float *
    kd_sparse_arena (kd_sparse_t *self);
size_t
    kd_sparse_stride (kd_sparse_t *self);

//  Replace every row with n rows from a checkpoint (keys distinct, rows
//  laid out as kd_sparse_arena's) and the step count.  Returns 0, or -1
//  (nothing changed) out of memory or on a repeated key.
int
    kd_sparse_load (kd_sparse_t *self, const uint64_t *keys, const float *rows, size_t n,
                    uint64_t steps);

#ifdef __cplusplus
}
#endif

#endif
