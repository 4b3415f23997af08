/*  test_kd_model: the models' gradients, initial values and evaluation.

    The central check is a finite-difference comparison of kd_model_gradient
    against kd_model_loss for both models, on random batches at random
    non-trivial parameters.  Everything is float32, so the differences use
    a step large enough that rounding in the loss stays small, and the
    tolerance is mixed absolute/relative.
*/
#include <criterion/criterion.h>
#include "kd_util.h"
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kd_model.h"
#include "kd_range.h"

TestSuite (kd_model);

#define MLP_HIDDEN 128

//  Small deterministic generator, so a failure reproduces.
#define s_next kd_splitmix64

//  Uniform float in [0, 1).
static float
s_unit (uint64_t *state)
{
    return (float) (s_next (state) >> 40) / 16777216.0f;
}

//  Random batch: pixels in [0, 1), labels in 0..9.
static void
s_random_batch (uint64_t *rng, float *X, uint8_t *y, size_t n)
{
    for (size_t i = 0; i < n * KD_INPUT_DIM; i++)
        X [i] = s_unit (rng);
    for (size_t r = 0; r < n; r++)
        y [r] = (uint8_t) (s_next (rng) % KD_CLASSES);
}

//  Result of one finite-difference comparison.
typedef struct {
    size_t checked;                     //  coordinates compared
    size_t mismatches;                  //  outside the per-coordinate tolerance
    double rel_err;                     //  ||g - fd|| / ||fd|| over checked
    double fd_norm;                     //  ||fd||, to know the check had signal
} s_fd_result_t;

//  Central difference of the loss in coordinate i.  The step is measured
//  after rounding, (p+eps) - (p-eps), so float rounding of the perturbed
//  parameter does not bias the quotient.
static double
s_central_difference (kd_model_t *model, float *params, const float *X,
                      const uint8_t *y, size_t n, size_t i, float eps)
{
    float saved = params [i];
    float up = saved + eps, down = saved - eps;
    params [i] = up;
    float lp = kd_model_loss (model, params, X, y, n);
    params [i] = down;
    float lm = kd_model_loss (model, params, X, y, n);
    params [i] = saved;
    return ((double) lp - (double) lm) / ((double) up - (double) down);
}

//  True if an analytic and a numerical derivative agree within float32
//  tolerance.
static bool
s_close (double g, double fd)
{
    return fabs (g - fd) <= 2e-3 + 5e-2 * fabs (fd);
}

//  Compare the analytic gradient with central differences on the given
//  coordinates.  A coordinate whose difference disagrees is tried again
//  with a larger and a smaller step: a step across a ReLU kink spoils one
//  step size, a wrong gradient spoils all of them.
static s_fd_result_t
s_fd_check (kd_model_t *model, float *params, const float *X,
            const uint8_t *y, size_t n, const size_t *coords, size_t n_coords,
            float eps)
{
    size_t np = kd_model_n_params (model);
    float *grad = (float *) malloc (np * sizeof (float));
    cr_assert_not_null (grad);
    float loss = kd_model_gradient (model, params, X, y, n, grad);
    cr_assert (isfinite (loss));
    cr_expect_float_eq (loss, kd_model_loss (model, params, X, y, n), 1e-6,
                        "gradient and loss disagree on the loss");

    s_fd_result_t res = { 0 };
    double diff2 = 0.0, fd2 = 0.0;
    for (size_t k = 0; k < n_coords; k++) {
        size_t i = coords [k];
        double g = grad [i];
        double fd = s_central_difference (model, params, X, y, n, i, eps);
        if (!s_close (g, fd)) {
            double fd_big = s_central_difference (model, params, X, y, n, i,
                                                  3.0f * eps);
            double fd_small = s_central_difference (model, params, X, y, n, i,
                                                    eps / 3.0f);
            if (!s_close (g, fd_big) && !s_close (g, fd_small)) {
                res.mismatches++;
                cr_log_warn ("coordinate %zu: gradient %.6g, differences "
                             "%.6g %.6g %.6g", i, g, fd, fd_big, fd_small);
            }
        }
        diff2 += (g - fd) * (g - fd);
        fd2 += fd * fd;
        res.checked++;
    }
    res.fd_norm = sqrt (fd2);
    res.rel_err = fd2 > 0 ? sqrt (diff2 / fd2) : sqrt (diff2);
    free (grad);
    return res;
}

//  A few hundred coordinates: every output bias, some other biases, and
//  random keys over the whole vector.
static size_t
s_pick_coords (kd_model_kind_t kind, uint32_t hidden, uint64_t *rng,
               size_t *coords, size_t max)
{
    size_t np = kd_model_param_count (kind, hidden);
    size_t k = 0;
    for (size_t c = 0; c < KD_CLASSES; c++)
        coords [k++] = np - KD_CLASSES + c;
    if (kind == KD_MODEL_MLP) {
        size_t b1 = (size_t) KD_INPUT_DIM * hidden;
        for (size_t h = 0; h < hidden && h < 20; h++)
            coords [k++] = b1 + h;
    }
    while (k < max)
        coords [k++] = s_next (rng) % np;
    return k;
}

Test (kd_model, finite_differences_softmax)
{
    const size_t n = 16;
    kd_model_t *model = kd_model_new (KD_MODEL_SOFTMAX, 0, n);
    cr_assert_not_null (model);
    size_t np = kd_model_n_params (model);
    uint64_t rng = 1234;
    float *params = (float *) malloc (np * sizeof (float));
    float *X = (float *) malloc (n * KD_INPUT_DIM * sizeof (float));
    uint8_t y [16];
    cr_assert (params && X);
    //  Softmax starts at zero, so add noise for a non-trivial point.
    kd_model_init_range (KD_MODEL_SOFTMAX, 0, 7, 0, np, params);
    for (size_t i = 0; i < np; i++)
        params [i] += 0.1f * (2.0f * s_unit (&rng) - 1.0f);
    s_random_batch (&rng, X, y, n);

    size_t coords [300];
    size_t nc = s_pick_coords (KD_MODEL_SOFTMAX, 0, &rng, coords, 300);
    s_fd_result_t res = s_fd_check (model, params, X, y, n, coords, nc, 1e-2f);
    cr_expect_eq (res.mismatches, 0, "%zu of %zu coordinates off",
                  res.mismatches, res.checked);
    cr_expect_lt (res.rel_err, 1e-2, "relative error %g", res.rel_err);
    cr_expect_gt (res.fd_norm, 1e-2, "the check had no signal");

    free (params);
    free (X);
    kd_model_destroy (&model);
    cr_expect_null (model);
}

Test (kd_model, finite_differences_mlp)
{
    const size_t n = 16;
    const uint32_t H = 32;
    kd_model_t *model = kd_model_new (KD_MODEL_MLP, H, n);
    cr_assert_not_null (model);
    size_t np = kd_model_n_params (model);
    uint64_t rng = 99;
    float *params = (float *) malloc (np * sizeof (float));
    float *X = (float *) malloc (n * KD_INPUT_DIM * sizeof (float));
    uint8_t y [16];
    cr_assert (params && X);
    kd_model_init_range (KD_MODEL_MLP, H, 5, 0, np, params);
    for (size_t i = 0; i < np; i++)
        params [i] += 0.02f * (2.0f * s_unit (&rng) - 1.0f);
    s_random_batch (&rng, X, y, n);

    size_t coords [400];
    size_t nc = s_pick_coords (KD_MODEL_MLP, H, &rng, coords, 400);
    //  A smaller step than for softmax, so that few steps move a hidden
    //  unit across the ReLU kink.
    s_fd_result_t res = s_fd_check (model, params, X, y, n, coords, nc, 3e-3f);
    cr_expect_eq (res.mismatches, 0, "%zu of %zu coordinates off",
                  res.mismatches, res.checked);
    cr_expect_lt (res.rel_err, 3e-2, "relative error %g", res.rel_err);
    cr_expect_gt (res.fd_norm, 1e-2, "the check had no signal");

    free (params);
    free (X);
    kd_model_destroy (&model);
}

Test (kd_model, softmax_loss_at_zero_is_log_10)
{
    const size_t n = 8;
    kd_model_t *model = kd_model_new (KD_MODEL_SOFTMAX, 123, n);
    cr_assert_not_null (model);
    size_t np = kd_model_n_params (model);
    float *params = (float *) calloc (np, sizeof (float));
    float *grad = (float *) malloc (np * sizeof (float));
    float *X = (float *) malloc (n * KD_INPUT_DIM * sizeof (float));
    uint8_t y [8];
    cr_assert (params && grad && X);
    uint64_t rng = 5;
    s_random_batch (&rng, X, y, n);
    float loss = kd_model_gradient (model, params, X, y, n, grad);
    cr_expect_float_eq (loss, logf (10.0f), 1e-5, "loss %f", loss);
    //  At uniform predictions the bias gradient is 1/10 minus the label
    //  frequency.
    for (int c = 0; c < KD_CLASSES; c++) {
        int freq = 0;
        for (size_t r = 0; r < n; r++)
            freq += y [r] == c;
        float expect = 0.1f - (float) freq / (float) n;
        cr_expect_float_eq (grad [np - KD_CLASSES + c], expect, 1e-6);
    }
    free (params);
    free (grad);
    free (X);
    kd_model_destroy (&model);
}

Test (kd_model, empty_batch_gives_zero_gradient)
{
    kd_model_t *model = kd_model_new (KD_MODEL_MLP, 8, 4);
    cr_assert_not_null (model);
    size_t np = kd_model_n_params (model);
    float *params = (float *) calloc (np, sizeof (float));
    float *grad = (float *) malloc (np * sizeof (float));
    cr_assert (params && grad);
    for (size_t i = 0; i < np; i++)
        grad [i] = 1.0f;
    cr_expect_float_eq (kd_model_gradient (model, params, NULL, NULL, 0, grad),
                        0.0f, 0);
    size_t nonzero = 0;
    for (size_t i = 0; i < np; i++)
        nonzero += grad [i] != 0.0f;
    cr_expect_eq (nonzero, 0);
    free (params);
    free (grad);
    kd_model_destroy (&model);
}

Test (kd_model, init_is_deterministic_per_key)
{
    const uint32_t H = 16;
    size_t np = kd_model_param_count (KD_MODEL_MLP, H);
    float *whole = (float *) malloc (np * sizeof (float));
    float *parts = (float *) malloc (np * sizeof (float));
    float *other = (float *) malloc (np * sizeof (float));
    cr_assert (whole && parts && other);
    kd_model_init_range (KD_MODEL_MLP, H, 42, 0, np, whole);
    //  Any sharding gives the same vector.
    for (uint64_t shards = 1; shards <= 5; shards += 2) {
        memset (parts, 0xff, np * sizeof (float));
        for (uint64_t i = 0; i < shards; i++) {
            uint64_t lo, hi;
            cr_assert_eq (kd_range_split (np, shards, i, &lo, &hi), 0);
            kd_model_init_range (KD_MODEL_MLP, H, 42, lo, hi, parts + lo);
        }
        cr_expect_eq (memcmp (whole, parts, np * sizeof (float)), 0,
                      "%lu shards differ from the whole", shards);
    }
    //  Another seed gives other weights.
    kd_model_init_range (KD_MODEL_MLP, H, 43, 0, np, other);
    size_t w1 = (size_t) KD_INPUT_DIM * H;
    size_t same = 0;
    for (size_t i = 0; i < w1; i++)
        same += whole [i] == other [i];
    cr_expect_lt (same, w1 / 100, "%zu of %zu weights equal across seeds",
                  same, w1);

    //  Glorot range, biases zero, and a roughly centred uniform.
    float a1 = sqrtf (6.0f / (KD_INPUT_DIM + H));
    float a2 = sqrtf (6.0f / (H + KD_CLASSES));
    double sum = 0, sum2 = 0;
    for (size_t i = 0; i < w1; i++) {
        cr_expect_leq (fabsf (whole [i]), a1);
        sum += whole [i];
        sum2 += (double) whole [i] * whole [i];
    }
    double mean = sum / w1, var = sum2 / w1 - mean * mean;
    cr_expect_lt (fabs (mean), 0.05 * a1, "mean %g", mean);
    cr_expect_float_eq (var, (double) a1 * a1 / 3.0, 0.05 * a1 * a1,
                        "variance %g", var);
    for (size_t i = w1; i < w1 + H; i++)
        cr_expect_eq (whole [i], 0.0f);
    for (size_t i = w1 + H; i < np - KD_CLASSES; i++)
        cr_expect_leq (fabsf (whole [i]), a2);
    for (size_t i = np - KD_CLASSES; i < np; i++)
        cr_expect_eq (whole [i], 0.0f);

    //  Softmax starts at zero whatever the seed.
    size_t ns = kd_model_param_count (KD_MODEL_SOFTMAX, 0);
    float soft [7850];
    cr_assert_eq (ns, 7850);
    memset (soft, 0xff, sizeof soft);
    kd_model_init_range (KD_MODEL_SOFTMAX, 0, 42, 0, ns, soft);
    size_t nonzero = 0;
    for (size_t i = 0; i < ns; i++)
        nonzero += soft [i] != 0.0f;
    cr_expect_eq (nonzero, 0);

    free (whole);
    free (parts);
    free (other);
}

Test (kd_model, evaluate_hand_built_case)
{
    //  W is the identity on the first ten pixels, so a row that lights
    //  pixel c predicts class c with logits e_c.
    const size_t n = 10;
    size_t np = kd_model_param_count (KD_MODEL_SOFTMAX, 0);
    float *params = (float *) calloc (np, sizeof (float));
    float *X = (float *) calloc (n * KD_INPUT_DIM, sizeof (float));
    cr_assert (params && X);
    for (int c = 0; c < KD_CLASSES; c++)
        params [c * KD_CLASSES + c] = 1.0f;
    uint8_t y [10] = { 0, 1, 2, 3, 4, 5, 6, 0, 0, 0 };   //  7 right
    for (size_t r = 0; r < n; r++)
        X [r * KD_INPUT_DIM + r] = 1.0f;
    double right_loss = log (9.0 + exp (1.0)) - 1.0;
    double wrong_loss = log (9.0 + exp (1.0));
    double expect_loss = (7 * right_loss + 3 * wrong_loss) / 10.0;

    //  A batch size that does not divide n exercises the last short batch.
    size_t batches [] = { 1, 3, 10, 64 };
    for (size_t b = 0; b < sizeof batches / sizeof batches [0]; b++) {
        kd_model_t *model = kd_model_new (KD_MODEL_SOFTMAX, 0, batches [b]);
        cr_assert_not_null (model);
        double accuracy = -1, loss = -1;
        cr_expect_eq (kd_model_evaluate (model, params, X, y, n, &accuracy,
                                         &loss), 0);
        cr_expect_float_eq (accuracy, 0.7, 1e-12, "batch %zu", batches [b]);
        cr_expect_float_eq (loss, expect_loss, 1e-5, "batch %zu: %f vs %f",
                            batches [b], loss, expect_loss);
        kd_model_destroy (&model);
    }
    free (params);
    free (X);
}

//  Synthetic separable problem: class c lights a band of pixels, plus noise.
static void
s_separable (uint64_t *rng, float *X, uint8_t *y, size_t n)
{
    const size_t band = KD_INPUT_DIM / KD_CLASSES;
    for (size_t r = 0; r < n; r++) {
        uint8_t c = (uint8_t) (r % KD_CLASSES);
        y [r] = c;
        for (size_t j = 0; j < KD_INPUT_DIM; j++) {
            float v = 0.1f * s_unit (rng);
            if (j / band == c)
                v += 0.8f;
            X [r * KD_INPUT_DIM + j] = v;
        }
    }
}

//  Full-batch gradient descent for some steps; returns the final loss and
//  the accuracy.
static void
s_descend (kd_model_kind_t kind, uint32_t hidden, float lr, int steps,
           float *first, float *last, double *accuracy)
{
    const size_t n = 100;
    kd_model_t *model = kd_model_new (kind, hidden, n);
    cr_assert_not_null (model);
    size_t np = kd_model_n_params (model);
    float *params = (float *) malloc (np * sizeof (float));
    float *grad = (float *) malloc (np * sizeof (float));
    float *X = (float *) malloc (n * KD_INPUT_DIM * sizeof (float));
    uint8_t y [100];
    cr_assert (params && grad && X);
    uint64_t rng = 77;
    s_separable (&rng, X, y, n);
    kd_model_init_range (kind, hidden, 1, 0, np, params);
    for (int s = 0; s < steps; s++) {
        float loss = kd_model_gradient (model, params, X, y, n, grad);
        if (s == 0)
            *first = loss;
        for (size_t i = 0; i < np; i++)
            params [i] -= lr * grad [i];
    }
    double loss;
    kd_model_evaluate (model, params, X, y, n, accuracy, &loss);
    *last = (float) loss;
    free (params);
    free (grad);
    free (X);
    kd_model_destroy (&model);
}

Test (kd_model, gradient_descent_reduces_loss)
{
    float first, last;
    double accuracy;
    s_descend (KD_MODEL_SOFTMAX, 0, 0.1f, 20, &first, &last, &accuracy);
    cr_expect_lt (last, 0.5f * first, "softmax: %f -> %f", first, last);
    cr_expect_float_eq (accuracy, 1.0, 1e-12, "softmax accuracy %f", accuracy);
    s_descend (KD_MODEL_MLP, 16, 0.1f, 30, &first, &last, &accuracy);
    cr_expect_lt (last, 0.5f * first, "mlp: %f -> %f", first, last);
    cr_expect_float_eq (accuracy, 1.0, 1e-12, "mlp accuracy %f", accuracy);
}

Test (kd_model, sizes_names_and_bad_arguments)
{
    cr_expect_eq (kd_model_param_count (KD_MODEL_SOFTMAX, 0), 7850);
    cr_expect_eq (kd_model_param_count (KD_MODEL_SOFTMAX, 999), 7850);
    cr_expect_eq (kd_model_param_count (KD_MODEL_MLP, MLP_HIDDEN),
                  784 * 128 + 128 + 128 * 10 + 10);
    cr_expect_eq (kd_model_kind_parse ("softmax"), KD_MODEL_SOFTMAX);
    cr_expect_eq (kd_model_kind_parse ("mlp"), KD_MODEL_MLP);
    cr_expect_eq (kd_model_kind_parse ("cnn"), -1);
    cr_expect_eq (kd_model_kind_parse (""), -1);
    cr_expect_eq (kd_model_kind_parse (NULL), -1);
    cr_expect_str_eq (kd_model_kind_name (KD_MODEL_SOFTMAX), "softmax");
    cr_expect_str_eq (kd_model_kind_name (KD_MODEL_MLP), "mlp");

    cr_expect_null (kd_model_new (KD_MODEL_MLP, 0, 64));
    cr_expect_null (kd_model_new (KD_MODEL_SOFTMAX, 0, 0));
    cr_expect_null (kd_model_new (KD_MODEL_MLP, 16, 0));
    kd_model_t *model = kd_model_new (KD_MODEL_MLP, MLP_HIDDEN, 64);
    cr_assert_not_null (model);
    cr_expect_eq (kd_model_kind (model), KD_MODEL_MLP);
    cr_expect_eq (kd_model_n_params (model), 101770);
    kd_model_destroy (&model);
    cr_expect_null (model);
    kd_model_destroy (&model);          //  destroying NULL is a no-op
}
