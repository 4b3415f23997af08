/*  kd_keyed_eval: the monitor's held-out evaluation of a keyed model.

    sparse-lr's model has up to 10^9 keys, so the monitor cannot pull it
    whole as it pulls a dense model.  It reads a held-out LIBSVM file
    (--test-file) once, takes every row as one batch, and pulls only the
    keys those rows touch: one keyed PULL per shard, each for the keys in
    that shard's range.  The values it gets back score the rows: AUC, mean
    log loss, and the share classified right.  A snapshot for the curve is
    those values alone, so keeping one costs keys x 4 bytes.
*/
#ifndef KD_KEYED_EVAL_H_INCLUDED
#define KD_KEYED_EVAL_H_INCLUDED

#include "kd_internal.h"
#include "kd_shardset.h"

typedef struct _kd_keyed_eval_t kd_keyed_eval_t;

//  Read at most max_rows rows of the held-out file at path.  NULL with a
//  reason in err when it cannot be read or holds no good row.
kd_keyed_eval_t *
    kd_keyed_eval_new (const char *path, size_t max_rows, char *err, size_t err_size);

//  Destroy and null the caller's pointer.
void
    kd_keyed_eval_destroy (kd_keyed_eval_t **self_p);

//  START: the model is one keyed tensor of n_keys keys of dim values, held
//  by the shards of book.  Rows with a feature at or past n_keys are read
//  out again (logged).  Returns 0, or -1 with a reason in err when the
//  file does not fit the model (dim not 1, no row left).
int
    kd_keyed_eval_start (kd_keyed_eval_t *self, uint64_t n_keys, uint64_t dim,
                         kd_shardset_t *book, char *err, size_t err_size);

//  Held-out rows, and the distinct keys they touch (the values to pull).
size_t
    kd_keyed_eval_rows (kd_keyed_eval_t *self);
size_t
    kd_keyed_eval_keys (kd_keyed_eval_t *self);

//  The values pulled so far, one per key, in key order.
float *
    kd_keyed_eval_values (kd_keyed_eval_t *self);

//  A keyed PULL of shard i's keys at version >= want.  Caller owns it.
kd_msg_t *
    kd_keyed_eval_request (kd_keyed_eval_t *self, size_t i, uint64_t want);

//  Take shard i's PULL_OK into the values.  Returns 0, or -1 (logged) when
//  it is older than want or does not hold shard i's keys.
int
    kd_keyed_eval_take (kd_keyed_eval_t *self, size_t i, kd_msg_t *reply, uint64_t want);

//  Score the rows under values (kd_keyed_eval_values, or a snapshot of
//  them).  Returns 0, or -1 out of memory.
int
    kd_keyed_eval_score (kd_keyed_eval_t *self, const float *values, double *auc,
                         double *loss, double *accuracy);

#endif
