/*  kd_sparse_lr: the built-in keyed model, sparse logistic regression.

    The training set is a LIBSVM file (`label index:value ...`, gzipped or
    not), read whole into CSR form; a label above 0 is a click.  The model
    is one keyed tensor "w" of features + 1 rows of one value: key 0 is the
    bias, key i the weight of feature i.  A batch names only the keys its
    rows touch, so a worker pulls and pushes those and nothing else, and
    the monitor evaluates a held-out file the same way: one batch of all
    its rows, and a keyed pull of their keys.
*/
#ifndef KD_SPARSE_LR_H_INCLUDED
#define KD_SPARSE_LR_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

typedef struct _kd_sparse_lr_t kd_sparse_lr_t;

//  Read path, max_rows good rows at most (0: all).  features 0 means the
//  file's largest index; a larger index than features is a bad line.  Bad lines are logged (the first few, with
//  their line numbers), counted and skipped.  NULL with err set when the
//  file cannot be read or holds no good row.
kd_sparse_lr_t *
    kd_sparse_lr_load (const char *path, uint64_t features, size_t max_rows, char *err,
                       size_t err_size);

//  Destroy and null the caller's pointer.
void
    kd_sparse_lr_destroy (kd_sparse_lr_t **self_p);

//  Rows read, lines skipped, features (the model has features + 1 keys),
//  and the most entries of one row.
size_t
    kd_sparse_lr_rows (kd_sparse_lr_t *self);
size_t
    kd_sparse_lr_skipped (kd_sparse_lr_t *self);
uint64_t
    kd_sparse_lr_features (kd_sparse_lr_t *self);
size_t
    kd_sparse_lr_max_nnz (kd_sparse_lr_t *self);

//  Take a batch of rows (those past the end are left out and counted):
//  its sorted distinct keys, the bias first, borrowed until the next call.
//  Returns the rows taken; 0 with no keys when out of memory.
size_t
    kd_sparse_lr_batch (kd_sparse_lr_t *self, const uint64_t *rows, size_t n_rows,
                        const uint64_t **keys, size_t *n_keys);

//  The batch's mean log loss under w (the values of its keys, in order),
//  and its gradient into g (one value per key).
float
    kd_sparse_lr_gradient (kd_sparse_lr_t *self, const float *w, float *g);

//  The batch under w: the AUC of its logits against its labels (NAN when
//  one class is missing), the mean log loss, and the share of rows whose
//  logit has the label's sign.  Returns 0, or -1 out of memory.
int
    kd_sparse_lr_evaluate (kd_sparse_lr_t *self, const float *w, double *auc, double *loss,
                           double *accuracy);

#endif
