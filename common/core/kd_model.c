/*  kd_model: softmax regression and a one-hidden-layer ReLU MLP on a flat
    parameter vector.

    Workers call kd_model_gradient on every minibatch, so it does no
    allocation: kd_model_new sizes all scratch for max_batch rows once.  The
    matrix products go through OpenBLAS sgemm in row-major order, which
    matches the flat layout in kd_model.h, so a shard's slice of the vector
    is a block of rows of one of the weight matrices (or a bias).

    The thread count of OpenBLAS is left to the caller (OPENBLAS_NUM_THREADS
    or openblas_set_num_threads in main), because the right value depends
    on how many workers share the machine.
*/
#include "kd_model.h"
#include "kd_util.h"
#include <assert.h>
#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct _kd_model_t {
    kd_model_kind_t kind;               //  softmax or mlp
    uint32_t hidden;                    //  hidden units (0 for softmax)
    size_t max_batch;                   //  rows the scratch can hold
    size_t n_params;                    //  length of the flat vector
    float *hid;                         //  [max_batch x hidden] ReLU output
    float *dhid;                        //  [max_batch x hidden] dL/d(pre-activation)
    float *logits;                      //  [max_batch x 10] logits, then probs, then dL/dlogits
};

//  Flat offsets of the four blocks of a model (softmax uses w1 and b1 only).
typedef struct {
    size_t w1;                          //  first weight matrix [784 x H or 10]
    size_t b1;                          //  first bias
    size_t w2;                          //  second weight matrix [H x 10] (mlp)
    size_t b2;                          //  second bias (mlp)
    size_t end;                         //  total parameter count
} s_layout_t;


//  --------------------------------------------------------------------------
//  Names, sizes and initial values

//  Parse a model name.
int
kd_model_kind_parse (const char *name)
{
    if (!name)
        return -1;
    if (strcmp (name, "softmax") == 0)
        return KD_MODEL_SOFTMAX;
    if (strcmp (name, "mlp") == 0)
        return KD_MODEL_MLP;
    return -1;
}

//  Name of a model kind, for logs and summaries.
const char *
kd_model_kind_name (kd_model_kind_t kind)
{
    switch (kind) {
        case KD_MODEL_SOFTMAX: return "softmax";
        case KD_MODEL_MLP:     return "mlp";
    }
    return "unknown";
}

//  Offsets of the parameter blocks; the single definition of the layout.
static s_layout_t
s_layout (kd_model_kind_t kind, uint32_t hidden)
{
    s_layout_t l;
    if (kind == KD_MODEL_SOFTMAX) {
        l.w1 = 0;
        l.b1 = (size_t) KD_INPUT_DIM * KD_CLASSES;
        l.w2 = l.b2 = l.end = l.b1 + KD_CLASSES;
    }
    else {
        l.w1 = 0;
        l.b1 = (size_t) KD_INPUT_DIM * hidden;
        l.w2 = l.b1 + hidden;
        l.b2 = l.w2 + (size_t) hidden * KD_CLASSES;
        l.end = l.b2 + KD_CLASSES;
    }
    return l;
}

//  The model's tensors, from the same layout.
size_t
kd_model_tensors (kd_model_kind_t kind, uint32_t hidden, kd_tensor_t *out, size_t max)
{
    s_layout_t l = s_layout (kind, hidden);
    size_t h = kind == KD_MODEL_SOFTMAX ? KD_CLASSES : hidden;
    kd_tensor_t all [4] = {
        { "W1", l.w1, l.b1 - l.w1, KD_INPUT_DIM, h },
        { "b1", l.b1, h, h, 1 },
        { "W2", l.w2, l.b2 - l.w2, h, KD_CLASSES },
        { "b2", l.b2, KD_CLASSES, KD_CLASSES, 1 }
    };
    size_t n = 4;
    if (kind == KD_MODEL_SOFTMAX) {
        all [0] = (kd_tensor_t) { "W", l.w1, l.b1 - l.w1, KD_INPUT_DIM, KD_CLASSES };
        all [1] = (kd_tensor_t) { "b", l.b1, KD_CLASSES, KD_CLASSES, 1 };
        n = 2;
    }
    for (size_t i = 0; i < n && i < max; i++)
        out [i] = all [i];
    return n;
}

int
kd_model_layout_parse (const char *const *names, size_t n, const uint64_t *shapes,
                       size_t n_shapes, kd_tensor_t *out, size_t *n_params,
                       char *err, size_t err_size)
{
    if (n == 0 || n > KD_MODEL_MAX_TENSORS || n_shapes != 2 * n || !names || !shapes) {
        snprintf (err, err_size, "layout: %zu tensors with %zu shape entries (1..%d tensors, "
                  "2 entries each)", n, n_shapes, KD_MODEL_MAX_TENSORS);
        return -2;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = names [i] ? strlen (names [i]) : 0;
        uint64_t rows = shapes [2 * i], cols = shapes [2 * i + 1];
        if (len == 0 || len >= KD_TENSOR_NAME_MAX) {
            snprintf (err, err_size, "layout: tensor %zu's name must be 1..%d bytes", i,
                      KD_TENSOR_NAME_MAX - 1);
            return -2;
        }
        for (size_t j = 0; j < i; j++)
            if (!strcmp (names [i], names [j])) {
                snprintf (err, err_size, "layout: tensor name '%s' is used twice", names [i]);
                return -2;
            }
        if (rows == 0 || cols == 0 || rows > KD_MODEL_MAX_PARAMS || cols > KD_MODEL_MAX_PARAMS
        ||  rows * cols > KD_MODEL_MAX_PARAMS - total) {
            snprintf (err, err_size, "layout: tensor '%s' has shape %llu x %llu (at most %llu floats "
                      "in all)", names [i], (unsigned long long) rows, (unsigned long long) cols,
                      (unsigned long long) KD_MODEL_MAX_PARAMS);
            return -2;
        }
        kd_tensor_t *t = &out [i];
        memset (t, 0, sizeof *t);
        memcpy (t->name, names [i], len);
        t->offset = (size_t) total;
        t->rows = (size_t) rows;
        t->cols = (size_t) cols;
        t->count = (size_t) (rows * cols);
        total += rows * cols;
    }
    *n_params = (size_t) total;
    return 0;
}

bool
kd_model_layout_equal (const kd_tensor_t *a, size_t na, const kd_tensor_t *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp (a [i].name, b [i].name) || a [i].rows != b [i].rows || a [i].cols != b [i].cols)
            return false;
    return true;
}

//  Number of parameters of a model.
size_t
kd_model_param_count (kd_model_kind_t kind, uint32_t hidden)
{
    return s_layout (kind, hidden).end;
}

//  Uniform in [-1, 1) from (seed, key).  The seed is mixed first, so that
//  seeds s and s + gamma do not give the same sequence shifted by one key.
static float
s_uniform (uint64_t seed, uint64_t key)
{
    uint64_t z = kd_mix64 (kd_mix64 (seed) + (key + 1) * 0x9E3779B97F4A7C15ULL);
    //  24 high bits: exactly representable in a float.
    float u = (float) (z >> 40) * (1.0f / 16777216.0f);
    return 2.0f * u - 1.0f;
}

//  Deterministic initial values for keys [lo, hi).
void
kd_model_init_range (kd_model_kind_t kind, uint32_t hidden, uint64_t seed,
                     size_t lo, size_t hi, float *out)
{
    s_layout_t l = s_layout (kind, hidden);
    assert (lo <= hi && hi <= l.end);
    assert (out || lo == hi);
    if (kind == KD_MODEL_SOFTMAX) {
        //  A convex model: zeros are a fine start and make runs comparable.
        memset (out, 0, (hi - lo) * sizeof (float));
        return;
    }
    //  Glorot uniform keeps the activation variance roughly constant
    //  through both layers, so training starts without saturation.
    float a1 = sqrtf (6.0f / (float) (KD_INPUT_DIM + hidden));
    float a2 = sqrtf (6.0f / (float) (hidden + KD_CLASSES));
    for (size_t i = lo; i < hi; i++) {
        float v;
        if (i < l.b1)
            v = a1 * s_uniform (seed, i);
        else
        if (i < l.w2)
            v = 0.0f;
        else
        if (i < l.b2)
            v = a2 * s_uniform (seed, i);
        else
            v = 0.0f;
        out [i - lo] = v;
    }
}


//  --------------------------------------------------------------------------
//  Constructor, destructor, accessors

//  Create a model with scratch for max_batch rows.
kd_model_t *
kd_model_new (kd_model_kind_t kind, uint32_t hidden, size_t max_batch)
{
    if (kind != KD_MODEL_SOFTMAX && kind != KD_MODEL_MLP)
        return NULL;
    if (kind == KD_MODEL_SOFTMAX)
        hidden = 0;
    if (max_batch == 0 || (kind == KD_MODEL_MLP && hidden == 0))
        return NULL;
    //  Refuse sizes that sgemm's int dimensions or the scratch byte count
    //  could not hold.
    size_t width = hidden > KD_CLASSES ? hidden : KD_CLASSES;
    if (max_batch > INT_MAX || hidden > INT_MAX
    ||  max_batch > SIZE_MAX / sizeof (float) / width)
        return NULL;

    kd_model_t *self = (kd_model_t *) calloc (1, sizeof (kd_model_t));
    if (!self)
        return NULL;
    self->kind = kind;
    self->hidden = hidden;
    self->max_batch = max_batch;
    self->n_params = kd_model_param_count (kind, hidden);
    self->logits = (float *) malloc (max_batch * KD_CLASSES * sizeof (float));
    if (!self->logits)
        goto fail;
    if (kind == KD_MODEL_MLP) {
        self->hid = (float *) malloc (max_batch * hidden * sizeof (float));
        self->dhid = (float *) malloc (max_batch * hidden * sizeof (float));
        if (!self->hid || !self->dhid)
            goto fail;
    }
    return self;

fail:
    kd_model_destroy (&self);
    return NULL;
}

//  Destroy the model and null the caller's pointer.
void
kd_model_destroy (kd_model_t **self_p)
{
    assert (self_p);
    kd_model_t *self = *self_p;
    if (!self)
        return;
    free (self->hid);
    free (self->dhid);
    free (self->logits);
    free (self);
    *self_p = NULL;
}

//  Length of the flat parameter vector.
size_t
kd_model_n_params (kd_model_t *self)
{
    assert (self);
    return self->n_params;
}

//  Kind of model.
kd_model_kind_t
kd_model_kind (kd_model_t *self)
{
    assert (self);
    return self->kind;
}


//  --------------------------------------------------------------------------
//  Forward and backward passes

//  out [n x cols] = bias broadcast over rows; sgemm then adds with beta = 1,
//  which saves a second pass over the output.
static void
s_broadcast_rows (float *out, const float *bias, size_t n, size_t cols)
{
    for (size_t r = 0; r < n; r++)
        memcpy (out + r * cols, bias, cols * sizeof (float));
}

//  bias_grad [cols] = column sums of d [n x cols].
static void
s_column_sums (const float *d, size_t n, size_t cols, float *bias_grad)
{
    memset (bias_grad, 0, cols * sizeof (float));
    for (size_t r = 0; r < n; r++) {
        const float *row = d + r * cols;
        for (size_t c = 0; c < cols; c++)
            bias_grad [c] += row [c];
    }
}

//  Logits of n rows into self->logits (and ReLU outputs into self->hid).
static void
s_forward (kd_model_t *self, const float *params, const float *X, size_t n)
{
    s_layout_t l = s_layout (self->kind, self->hidden);
    const int rows = (int) n;
    if (self->kind == KD_MODEL_SOFTMAX) {
        s_broadcast_rows (self->logits, params + l.b1, n, KD_CLASSES);
        cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans,
                     rows, KD_CLASSES, KD_INPUT_DIM,
                     1.0f, X, KD_INPUT_DIM, params + l.w1, KD_CLASSES,
                     1.0f, self->logits, KD_CLASSES);
        return;
    }
    const int H = (int) self->hidden;
    s_broadcast_rows (self->hid, params + l.b1, n, self->hidden);
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans,
                 rows, H, KD_INPUT_DIM,
                 1.0f, X, KD_INPUT_DIM, params + l.w1, H,
                 1.0f, self->hid, H);
    size_t cells = n * self->hidden;
    for (size_t i = 0; i < cells; i++)
        if (self->hid [i] < 0.0f)
            self->hid [i] = 0.0f;
    s_broadcast_rows (self->logits, params + l.b2, n, KD_CLASSES);
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasNoTrans,
                 rows, KD_CLASSES, H,
                 1.0f, self->hid, H, params + l.w2, KD_CLASSES,
                 1.0f, self->logits, KD_CLASSES);
}

//  Cross-entropy of one row of logits against label y, through the
//  log-sum-exp with the row max subtracted so expf cannot overflow.  If
//  probs is not NULL, writes softmax (logits) there.  Sets *argmax.
static double
s_row_loss (const float *logits, uint8_t y, float *probs, int *argmax)
{
    assert (y < KD_CLASSES);
    int best = 0;
    for (int c = 1; c < KD_CLASSES; c++)
        if (logits [c] > logits [best])
            best = c;
    float max = logits [best];
    float e [KD_CLASSES];
    float sum = 0.0f;
    for (int c = 0; c < KD_CLASSES; c++) {
        e [c] = expf (logits [c] - max);
        sum += e [c];
    }
    //  Before probs is written: it may be the logits row itself.
    double loss = (double) logf (sum) - (double) (logits [y] - max);
    if (probs) {
        float inv = 1.0f / sum;
        for (int c = 0; c < KD_CLASSES; c++)
            probs [c] = e [c] * inv;
    }
    if (argmax)
        *argmax = best;
    return loss;
}

//  Gradient of the mean loss over n rows; returns the mean loss.
float
kd_model_gradient (kd_model_t *self, const float *params, const float *X,
                   const uint8_t *y, size_t n, float *grad)
{
    assert (self);
    assert (params && grad);
    assert (n <= self->max_batch);
    if (n == 0) {
        //  An empty batch has no loss to descend; a zero step is harmless.
        memset (grad, 0, self->n_params * sizeof (float));
        return 0.0f;
    }
    assert (X && y);
    s_forward (self, params, X, n);

    //  dL/dlogits of the mean loss is (softmax - onehot) / n, written over
    //  the logits in place.
    double total = 0.0;
    const float inv_n = 1.0f / (float) n;
    for (size_t r = 0; r < n; r++) {
        float *row = self->logits + r * KD_CLASSES;
        total += s_row_loss (row, y [r], row, NULL);
        row [y [r]] -= 1.0f;
        for (int c = 0; c < KD_CLASSES; c++)
            row [c] *= inv_n;
    }

    s_layout_t l = s_layout (self->kind, self->hidden);
    const int rows = (int) n;
    const float *dlogits = self->logits;
    if (self->kind == KD_MODEL_SOFTMAX) {
        //  dW = X^T dlogits, db = column sums of dlogits.
        cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans,
                     KD_INPUT_DIM, KD_CLASSES, rows,
                     1.0f, X, KD_INPUT_DIM, dlogits, KD_CLASSES,
                     0.0f, grad + l.w1, KD_CLASSES);
        s_column_sums (dlogits, n, KD_CLASSES, grad + l.b1);
        return (float) (total / (double) n);
    }

    const int H = (int) self->hidden;
    //  Output layer: dW2 = h^T dlogits, db2 = column sums of dlogits.
    cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans,
                 H, KD_CLASSES, rows,
                 1.0f, self->hid, H, dlogits, KD_CLASSES,
                 0.0f, grad + l.w2, KD_CLASSES);
    s_column_sums (dlogits, n, KD_CLASSES, grad + l.b2);
    //  Back through W2: dh = dlogits W2^T, then through the ReLU, whose
    //  derivative is 1 where the output is positive.  At exactly zero we
    //  take the subgradient 0.
    cblas_sgemm (CblasRowMajor, CblasNoTrans, CblasTrans,
                 rows, H, KD_CLASSES,
                 1.0f, dlogits, KD_CLASSES, params + l.w2, KD_CLASSES,
                 0.0f, self->dhid, H);
    size_t cells = n * self->hidden;
    for (size_t i = 0; i < cells; i++)
        if (self->hid [i] <= 0.0f)
            self->dhid [i] = 0.0f;
    //  Input layer: dW1 = X^T dh, db1 = column sums of dh.
    cblas_sgemm (CblasRowMajor, CblasTrans, CblasNoTrans,
                 KD_INPUT_DIM, H, rows,
                 1.0f, X, KD_INPUT_DIM, self->dhid, H,
                 0.0f, grad + l.w1, H);
    s_column_sums (self->dhid, n, self->hidden, grad + l.b1);
    return (float) (total / (double) n);
}

//  Sum of losses and count of correct predictions over n <= max_batch rows.
static void
s_batch_stats (kd_model_t *self, const float *params, const float *X,
               const uint8_t *y, size_t n, double *loss_sum, size_t *correct)
{
    s_forward (self, params, X, n);
    double total = 0.0;
    size_t right = 0;
    for (size_t r = 0; r < n; r++) {
        int best;
        total += s_row_loss (self->logits + r * KD_CLASSES, y [r], NULL, &best);
        if (best == (int) y [r])
            right++;
    }
    *loss_sum = total;
    *correct = right;
}

//  Mean loss over n <= max_batch rows.
float
kd_model_loss (kd_model_t *self, const float *params, const float *X,
               const uint8_t *y, size_t n)
{
    assert (self);
    assert (params);
    assert (n <= self->max_batch);
    if (n == 0)
        return 0.0f;
    assert (X && y);
    double total;
    size_t correct;
    s_batch_stats (self, params, X, y, n, &total, &correct);
    return (float) (total / (double) n);
}

//  Accuracy and mean loss over any number of rows, max_batch at a time.
int
kd_model_evaluate (kd_model_t *self, const float *params, const float *X,
                   const uint8_t *y, size_t n, double *accuracy,
                   double *loss)
{
    assert (self);
    assert (params);
    assert (X || n == 0);
    assert (y || n == 0);
    double total = 0.0;
    size_t correct = 0;
    for (size_t r = 0; r < n; r += self->max_batch) {
        size_t rows = n - r < self->max_batch ? n - r : self->max_batch;
        double batch_loss;
        size_t batch_correct;
        s_batch_stats (self, params, X + r * KD_INPUT_DIM, y + r, rows,
                       &batch_loss, &batch_correct);
        total += batch_loss;
        correct += batch_correct;
    }
    if (accuracy)
        *accuracy = n ? (double) correct / (double) n : 0.0;
    if (loss)
        *loss = n ? total / (double) n : 0.0;
    return 0;
}
