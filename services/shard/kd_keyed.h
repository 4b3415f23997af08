/*  kd_keyed: a shard's keyed (sparse) range.

    A keyed model is one tensor of rows of `dim` floats, addressed by key
    (the row).  Workers push and pull only the keys a batch touches, with
    the keys in a frame of their own (docs/protocol.md, keyed requests).
    This class holds the range's rows in a kd_sparse table, checks keyed
    requests against the range, keeps a staged gradient as one frame, and
    combines a commit's gradients key by key:

        g_k = W * sum_{i touches k} w_i g_ik / sum_{i touches k} w_i,
        W   = sum_i w_i

    so a key touched by several gradients is averaged over those that
    touched it, and the commit keeps its total weight (docs/consistency.md).
*/
#ifndef KD_KEYED_H_INCLUDED
#define KD_KEYED_H_INCLUDED

#include "kd_optimizer.h"
#include "kd_sparse.h"
#include <czmq.h>
#include <stdint.h>

typedef struct _kd_keyed_t kd_keyed_t;

//  A keyed range [lo, hi) of rows of dim floats, updated by opts, rows
//  starting at 0.  NULL for bad arguments.  Caller owns return value.
kd_keyed_t *
    kd_keyed_new (uint64_t lo, uint64_t hi, size_t dim, const kd_optimizer_opts_t *opts);

//  Destroy and null the caller's pointer.
void
    kd_keyed_destroy (kd_keyed_t **self_p);

//  Floats per key.
size_t
    kd_keyed_dim (kd_keyed_t *self);

//  Check a keyed request of n strictly increasing keys: every key inside
//  the range and, when values is not SIZE_MAX, values == n * dim.  Returns
//  0, or -1 with a reason in why.
int
    kd_keyed_check (kd_keyed_t *self, const uint64_t *keys, size_t n, size_t values,
                    char *why, size_t why_size);

//  A gradient of n keys as one frame, to stage: [n][keys][values].
zframe_t *
    kd_keyed_stage (kd_keyed_t *self, const uint64_t *keys, size_t n, const float *values);

//  True when a frame is a staged gradient of this range's dim.
bool
    kd_keyed_staged_ok (kd_keyed_t *self, zframe_t *frame);

//  One optimizer step from n staged gradients (frame data of
//  kd_keyed_stage) with weights w_i, combined key by key as above.
//  Returns 0, or -1 when memory ran out (nothing applied).
int
    kd_keyed_commit (kd_keyed_t *self, const void *const *staged, const double *weights, size_t n);

//  The values of n keys into out (n * dim floats).
void
    kd_keyed_pull (kd_keyed_t *self, const uint64_t *keys, size_t n, float *out);

//  The update rule the range was made with.
const kd_optimizer_opts_t *
    kd_keyed_opts (kd_keyed_t *self);

//  The rows themselves (borrowed), for checkpoints: kd_sparse_keys,
//  kd_sparse_arena and kd_sparse_load.
kd_sparse_t *
    kd_keyed_table (kd_keyed_t *self);

//  Rows held, and their bytes with the optimizer state and the table.
size_t
    kd_keyed_rows (kd_keyed_t *self);
size_t
    kd_keyed_bytes (kd_keyed_t *self);

#endif
