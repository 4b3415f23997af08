/*  kd_model: the models Kudus trains, on a flat parameter vector.

    softmax:  W [784 x 10] row-major (input-major), then b [10].
    mlp:      W1 [784 x H], b1 [H], W2 [H x 10], b2 [10]; ReLU hidden layer.

    The flat layout is the contract between workers, shards and the monitor:
    shards hold contiguous key ranges of it.  Forward and backward passes use
    OpenBLAS sgemm.  Loss is mean cross-entropy over the batch.
*/
#ifndef KD_MODEL_H_INCLUDED
#define KD_MODEL_H_INCLUDED

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include "kd_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KD_INPUT_DIM  784
#define KD_CLASSES    10
#define KD_MODEL_MAX_HIDDEN 4096    //  largest mlp hidden layer accepted

typedef enum {
    KD_MODEL_SOFTMAX,
    KD_MODEL_MLP
} kd_model_kind_t;

//  Parse "softmax" or "mlp"; -1 if unknown.
int
    kd_model_kind_parse (const char *name);
const char *
    kd_model_kind_name (kd_model_kind_t kind);

//  Number of parameters of a model (hidden is ignored for softmax).
size_t
    kd_model_param_count (kd_model_kind_t kind, uint32_t hidden);

//  The model's tensors, in flat order: W, b for softmax; W1, b1, W2, b2
//  for mlp.  Writes at most max into out; returns how many there are.
size_t
    kd_model_tensors (kd_model_kind_t kind, uint32_t hidden, kd_tensor_t *out, size_t max);

//  Tensors of an external model's layout at most, and floats in all of them.
#define KD_MODEL_MAX_TENSORS 64
#define KD_MODEL_MAX_PARAMS  (1ULL << 31)

//  Build an external model's layout from n names and 2 n shape entries
//  ((rows, cols) per tensor) as a HELLO or WELCOME carries them: offsets
//  run in order.  Checks every bound (1..KD_MODEL_MAX_TENSORS tensors,
//  names 1..KD_TENSOR_NAME_MAX-1 bytes and distinct, dimensions >= 1, at
//  most KD_MODEL_MAX_PARAMS floats).  Returns 0 and sets *n_params, or -2
//  with a reason in err.
int
    kd_model_layout_parse (const char *const *names, size_t n, const uint64_t *shapes,
                           size_t n_shapes, kd_tensor_t *out, size_t *n_params,
                           char *err, size_t err_size);

//  True when two layouts are the same: names, shapes and order.
bool
    kd_model_layout_equal (const kd_tensor_t *a, size_t na, const kd_tensor_t *b, size_t nb);

//  Deterministic initial values for keys [lo, hi) of the flat vector, from
//  a seed.  Key i's value depends only on (kind, hidden, seed, i), so any
//  sharding gives the same model.  Weights get a scaled uniform (Glorot)
//  value, biases 0; softmax starts at all zeros.
void
    kd_model_init_range (kd_model_kind_t kind, uint32_t hidden, uint64_t seed,
                         size_t lo, size_t hi, float *out);

typedef struct _kd_model_t kd_model_t;

//  Create a model with scratch space for batches of up to max_batch rows.
//  NULL when hidden is 0 for mlp or max_batch is 0.  Caller owns it.
kd_model_t *
    kd_model_new (kd_model_kind_t kind, uint32_t hidden, size_t max_batch);

//  Destroy and null the caller's pointer.
void
    kd_model_destroy (kd_model_t **self_p);

size_t
    kd_model_n_params (kd_model_t *self);
kd_model_kind_t
    kd_model_kind (kd_model_t *self);

//  Gradient of the mean loss over n rows (n <= max_batch) of X [n x 784]
//  with labels y, at params; writes grad [n_params] and returns the loss.
float
    kd_model_gradient (kd_model_t *self, const float *params, const float *X,
                       const uint8_t *y, size_t n, float *grad);

//  Loss only (used by the finite-difference check and evaluation).
float
    kd_model_loss (kd_model_t *self, const float *params, const float *X,
                   const uint8_t *y, size_t n);

//  Accuracy and mean loss over n rows of any size, in batches of
//  max_batch.  Returns 0.
int
    kd_model_evaluate (kd_model_t *self, const float *params, const float *X,
                       const uint8_t *y, size_t n, double *accuracy,
                       double *loss);

#ifdef __cplusplus
}
#endif

#endif
