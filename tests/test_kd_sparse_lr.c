/*  test_kd_sparse_lr: the built-in keyed model: reading a LIBSVM file with
    a bad line, a batch's keys, and the gradient against finite differences.
*/
#include "kd_sparse_lr.h"
#include "kd_testutil.h"
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>

static char *
s_file (const char *text)
{
    char *dir = kd_test_tmpdir ();
    static char path [512];
    snprintf (path, sizeof path, "%s/train.svm", dir);
    free (dir);
    FILE *f = fopen (path, "w");
    cr_assert (f);
    fputs (text, f);
    fclose (f);
    return path;
}

Test (kd_sparse_lr, loads_rows_and_skips_a_bad_line)
{
    const char *path = s_file ("1 3:1 7:0.5\n"
                               "0 2:1 3:2 9:1\n"
                               "1 4:x\n"                   //  bad value: skipped
                               "-1 1:1\n");
    char err [256];
    kd_sparse_lr_t *m = kd_sparse_lr_load (path, 0, 0, err, sizeof err);
    cr_assert (m, "%s", err);
    cr_expect_eq (kd_sparse_lr_rows (m), 3);
    cr_expect_eq (kd_sparse_lr_skipped (m), 1);
    cr_expect_eq (kd_sparse_lr_features (m), 9);
    cr_expect_eq (kd_sparse_lr_max_nnz (m), 3);
    const uint64_t rows [] = { 0, 1, 99 };      //  99: past the end, left out
    const uint64_t *keys;
    size_t n;
    cr_expect_eq (kd_sparse_lr_batch (m, rows, 3, &keys, &n), 2);
    const uint64_t want [] = { 0, 2, 3, 7, 9 };
    cr_assert_eq (n, 5);
    cr_expect_eq (memcmp (keys, want, sizeof want), 0);
    kd_sparse_lr_destroy (&m);
    cr_expect_null (m);
    //  A larger declared feature count wins; a file index above it is a bad line.
    m = kd_sparse_lr_load (path, 100, 0, err, sizeof err);
    cr_assert (m);
    cr_expect_eq (kd_sparse_lr_features (m), 100);
    kd_sparse_lr_destroy (&m);
    m = kd_sparse_lr_load (path, 5, 0, err, sizeof err);
    cr_assert (m);
    cr_expect_eq (kd_sparse_lr_rows (m), 1, "rows with index 7 and 9 are over 5");
    kd_sparse_lr_destroy (&m);
    cr_expect_null (kd_sparse_lr_load ("/nonexistent/train.svm", 0, 0, err, sizeof err));
    cr_expect (strstr (err, "nonexistent"), "%s", err);
    const char *bad = s_file ("x\n");
    cr_expect_null (kd_sparse_lr_load (bad, 0, 0, err, sizeof err));
    cr_expect (strstr (err, "no good row"), "%s", err);
}

Test (kd_sparse_lr, gradient_matches_finite_differences)
{
    const char *path = s_file ("1 3:1 7:0.5\n0 2:1 3:2 9:1\n1 2:-1 7:3\n");
    char err [256];
    kd_sparse_lr_t *m = kd_sparse_lr_load (path, 0, 0, err, sizeof err);
    cr_assert (m, "%s", err);
    const uint64_t rows [] = { 0, 1, 2 };
    const uint64_t *keys;
    size_t n;
    kd_sparse_lr_batch (m, rows, 3, &keys, &n);
    float w [5] = { 0.1f, -0.2f, 0.3f, 0.05f, -0.4f }, g [5], g2 [5];
    float loss = kd_sparse_lr_gradient (m, w, g);
    cr_expect (loss > 0 && isfinite (loss));
    for (size_t k = 0; k < n; k++) {
        const float h = 1e-3f;
        float wp [5], wm [5];
        memcpy (wp, w, sizeof w);
        memcpy (wm, w, sizeof w);
        wp [k] += h;
        wm [k] -= h;
        double numeric = (kd_sparse_lr_gradient (m, wp, g2) - kd_sparse_lr_gradient (m, wm, g2)) / (2 * h);
        cr_expect (fabs (numeric - g [k]) < 2e-3, "key %llu: %g against %g", (unsigned long long) keys [k],
                   g [k], numeric);
    }
    //  Huge scores do not overflow.
    float big [5] = { 500, 500, 500, 500, 500 };
    cr_expect (isfinite (kd_sparse_lr_gradient (m, big, g)));
    kd_sparse_lr_destroy (&m);
}

Test (kd_sparse_lr, evaluates_auc_loss_and_accuracy)
{
    const char *path = s_file ("1 1:1\n0 2:1\n1 1:1 3:1\n0 2:1 3:1\n");
    char err [256];
    kd_sparse_lr_t *m = kd_sparse_lr_load (path, 0, 0, err, sizeof err);
    cr_assert (m, "%s", err);
    const uint64_t rows [] = { 0, 1, 2, 3 };
    const uint64_t *keys;
    size_t n;
    cr_assert_eq (kd_sparse_lr_batch (m, rows, 4, &keys, &n), 4);
    cr_assert_eq (n, 4);                        //  bias, 1, 2, 3
    double auc, loss, accuracy;
    //  A model that separates the classes: logits +2 and -2.
    const float w [4] = { 0, 2, -2, 0 };
    cr_assert_eq (kd_sparse_lr_evaluate (m, w, &auc, &loss, &accuracy), 0);
    cr_expect_float_eq (auc, 1.0, 1e-12);
    cr_expect_float_eq (accuracy, 1.0, 1e-12);
    cr_expect_float_eq (loss, log1p (exp (-2.0)), 1e-9);
    //  The zero model: every logit ties, so the AUC is a half, the loss log 2.
    const float zero [4] = { 0 };
    cr_assert_eq (kd_sparse_lr_evaluate (m, zero, &auc, &loss, &accuracy), 0);
    cr_expect_float_eq (auc, 0.5, 1e-12);
    cr_expect_float_eq (accuracy, 0.5, 1e-12);
    cr_expect_float_eq (loss, log (2.0), 1e-9);
    //  A model that inverts them: AUC 0.
    const float bad [4] = { 0, -2, 2, 0 };
    kd_sparse_lr_evaluate (m, bad, &auc, &loss, &accuracy);
    cr_expect_float_eq (auc, 0.0, 1e-12);
    cr_expect_float_eq (accuracy, 0.0, 1e-12);
    kd_sparse_lr_destroy (&m);
    //  max_rows stops the read early.
    m = kd_sparse_lr_load (path, 0, 2, err, sizeof err);
    cr_assert (m, "%s", err);
    cr_expect_eq (kd_sparse_lr_rows (m), 2);
    cr_expect_eq (kd_sparse_lr_features (m), 2);
    kd_sparse_lr_destroy (&m);
}
