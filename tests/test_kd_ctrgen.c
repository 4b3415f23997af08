/*  test_kd_ctrgen: the synthetic click log of `kudus gen-ctr`.

    Rows are deterministic in the seed, hold distinct increasing indices in
    range, feature frequencies follow the power law asked for, labels follow
    the planted model, and the file `kudus gen-ctr` writes reads back through
    kd_libsvm row for row.  The references a trained model is held against
    (kd_ctrref) order as they must: the planted model, then what it scores
    knowing only the features training holds, then with those weights
    estimated from their training rows, which nears the planted model only
    when every feature has many rows.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <sys/wait.h>
#include "kd_ctrgen.h"
#include "kd_ctrref.h"
#include "kd_util.h"
#include "kudus/kd_libsvm.h"
#include "kd_testutil.h"

TestSuite (kd_ctrgen, .timeout = 60);

static kd_ctrgen_t *
s_new (uint64_t features, double zipf, uint32_t per_row, uint64_t seed)
{
    char err [256];
    kd_ctrgen_t *gen = kd_ctrgen_new (features, zipf, per_row, seed, err, sizeof err);
    cr_assert (gen, "%s", err);
    return gen;
}

Test (kd_ctrgen, impossible_settings_are_refused)
{
    char err [256];
    cr_expect_null (kd_ctrgen_new (10, 1.1, 11, 1, err, sizeof err));
    cr_expect (strstr (err, "per-row"), "%s", err);
    cr_expect_null (kd_ctrgen_new (10, 0.2, 5, 1, err, sizeof err));
    cr_expect_null (kd_ctrgen_new (0, 1.1, 1, 1, err, sizeof err));
}

Test (kd_ctrgen, rows_are_deterministic_distinct_and_in_range)
{
    kd_ctrgen_t *a = s_new (1000000, 1.1, 40, 7), *b = s_new (1000000, 1.1, 40, 7);
    kd_ctrgen_t *c = s_new (1000000, 1.1, 40, 8);
    uint64_t ia [40], ib [40], ic [40];
    int differ = 0;
    for (int r = 0; r < 2000; r++) {
        double sa, sb, sc;
        int la = kd_ctrgen_row (a, ia, &sa), lb = kd_ctrgen_row (b, ib, &sb);
        kd_ctrgen_row (c, ic, &sc);
        cr_assert_eq (la, lb);
        cr_assert (sa == sb);
        cr_assert (!memcmp (ia, ib, sizeof ia), "same seed, different row %d", r);
        differ += memcmp (ia, ic, sizeof ia) != 0;
        for (int i = 0; i < 40; i++) {
            cr_assert (ia [i] >= 1 && ia [i] <= 1000000);
            cr_assert (i == 0 || ia [i] > ia [i - 1], "indices not increasing");
        }
    }
    cr_expect_gt (differ, 1900, "another seed wrote the same rows");
    kd_ctrgen_destroy (&a);
    kd_ctrgen_destroy (&b);
    kd_ctrgen_destroy (&c);
    cr_expect_null (a);
}

Test (kd_ctrgen, ranks_follow_the_power_law)
{
    //  P(k) is proportional to k^-a: rank 1 is 2^a times rank 2 and 10^a
    //  times rank 10.
    const double a = 1.3;
    kd_ctrgen_t *gen = s_new (100000000, a, 1, 3);
    uint64_t count [11] = { 0 };
    const int draws = 2000000;
    for (int i = 0; i < draws; i++) {
        uint64_t k = kd_ctrgen_rank (gen);
        cr_assert (k >= 1 && k <= 100000000);
        if (k <= 10)
            count [k]++;
    }
    cr_expect_float_eq ((double) count [1] / (double) count [2], pow (2, a), 0.05 * pow (2, a));
    cr_expect_float_eq ((double) count [1] / (double) count [10], pow (10, a), 0.1 * pow (10, a));
    //  The commonest features land far apart in the index space.
    uint64_t f2 = kd_ctrgen_feature_of_rank (gen, 2), f3 = kd_ctrgen_feature_of_rank (gen, 3);
    cr_expect (f2 > 1000 && f3 > 1000 && f2 != f3, "hot features %llu, %llu", (unsigned long long) f2,
               (unsigned long long) f3);
    kd_ctrgen_destroy (&gen);
}

Test (kd_ctrgen, auc_is_exact_on_known_cases)
{
    double s1 [] = { 0.1, 0.4, 0.35, 0.8 };
    uint8_t l1 [] = { 0, 0, 1, 1 };
    cr_expect_float_eq (kd_auc (s1, l1, 4), 0.75, 1e-12);
    double s2 [] = { 1, 2, 3, 4 };
    uint8_t l2 [] = { 0, 0, 1, 1 };
    cr_expect_float_eq (kd_auc (s2, l2, 4), 1.0, 1e-12);
    double s3 [] = { 5, 5, 5, 5 };
    cr_expect_float_eq (kd_auc (s3, l2, 4), 0.5, 1e-12, "ties count half");
    uint8_t none [] = { 0, 0, 0, 0 };
    cr_expect (isnan (kd_auc (s2, none, 4)));
    //  A score that is not a number gives no AUC, and returns.
    double s4 [] = { 1, NAN, 3, 4 };
    cr_expect (isnan (kd_auc (s4, l2, 4)));
    double s5 [] = { 1, 2, INFINITY, 4 };
    cr_expect (isnan (kd_auc (s5, l2, 4)));
}

Test (kd_ctrgen, labels_follow_the_planted_model)
{
    kd_ctrgen_t *gen = s_new (10000000, 1.1, 40, 11);
    enum { N = 50000 };
    static double scores [N];
    static uint8_t labels [N];
    uint64_t index [40];
    double positives = 0, mean_p = 0;
    for (int r = 0; r < N; r++) {
        labels [r] = (uint8_t) kd_ctrgen_row (gen, index, &scores [r]);
        //  The score is the bias plus the weights of the row's features.
        double logit = kd_ctrgen_bias (gen);
        for (int i = 0; i < 40; i++)
            logit += kd_ctrgen_weight (gen, index [i]);
        cr_assert_float_eq (scores [r], logit, 1e-9);
        positives += labels [r];
        mean_p += 1 / (1 + exp (-scores [r]));
    }
    //  Labels are drawn from the model: their mean is its mean, and its
    //  scores rank them well.
    cr_expect_float_eq (positives / N, mean_p / N, 0.01);
    double auc = kd_auc (scores, labels, N);
    cr_expect (auc > 0.75 && auc < 0.95, "planted AUC %.4f", auc);
    kd_ctrgen_destroy (&gen);
}

Test (kd_ctrgen, the_written_file_reads_back_through_kd_libsvm)
{
    char *dir = kd_test_tmpdir ();
    char path [512], meta [600];
    snprintf (path, sizeof path, "%s/ctr.svm.gz", dir);
    snprintf (meta, sizeof meta, "%s.json", path);
    const char *argv [] = { "kudus", "gen-ctr", "--rows", "3000", "--features", "50000", "--per-row", "12",
                            "--seed", "5", "--test-rows", "500", path, NULL };
    pid_t pid = kd_test_spawn (argv, NULL);
    int status = -1;
    cr_assert (kd_test_wait (pid, 30000, &status) && WIFEXITED (status) && WEXITSTATUS (status) == 0);
    char err [256];
    kd_libsvm_t *r = kd_libsvm_open (path, 50000, err, sizeof err);
    cr_assert (r, "%s", err);
    kd_ctrgen_t *gen = s_new (50000, 1.1, 12, 5);
    kd_libsvm_row_t row;
    uint64_t index [12];
    int n = 0, rc;
    //  The training rows, then the held-out ones (ctr.svm.test.gz), which
    //  continue the same generator: the same planted model labels both.
    for (int part = 0; part < 2; part++) {
        if (part == 1) {
            kd_libsvm_destroy (&r);
            snprintf (path, sizeof path, "%s/ctr.svm.test.gz", dir);
            r = kd_libsvm_open (path, 50000, err, sizeof err);
            cr_assert (r, "%s", err);
        }
        while ((rc = kd_libsvm_next (r, &row, err, sizeof err)) == 1) {
            double score;
            int label = kd_ctrgen_row (gen, index, &score);
            cr_assert_eq (row.label, (float) label, "row %d", n);
            cr_assert_eq (row.nnz, 12);
            for (int i = 0; i < 12; i++) {
                cr_assert_eq (row.index [i], index [i]);
                cr_assert_eq (row.value [i], 1.0f);
            }
            n++;
        }
        cr_expect_eq (rc, 0, "%s", err);
        cr_expect_eq (n, part == 0 ? 3000 : 3500);
    }
    char *json = kd_test_slurp (meta);
    cr_assert (json);
    cr_expect_eq (kd_test_json_number (json, "rows"), 3000);
    double auc = kd_test_json_number (json, "planted_auc");
    cr_expect (auc > 0.7 && auc < 1, "planted AUC %g", auc);
    cr_expect_eq (kd_test_json_number (json, "test_rows"), 500);
    double test_auc = kd_test_json_number (json, "planted_test_auc");
    cr_expect (test_auc > 0.7 && test_auc < 1, "planted AUC on the held-out rows %g", test_auc);
    free (json);
    kd_libsvm_destroy (&r);
    kd_ctrgen_destroy (&gen);
    free (dir);
}

//  Feed rows training rows and test_rows held-out ones of gen to refs.
static kd_ctrref_result_t
s_references (uint64_t features, uint32_t per_row, size_t rows, size_t test_rows)
{
    kd_ctrgen_t *gen = s_new (features, 1.1, per_row, 3);
    kd_ctrref_t *refs = kd_ctrref_new (gen, features, test_rows);
    cr_assert (refs);
    uint64_t index [64];
    double score;
    for (size_t r = 0; r < rows; r++) {
        int label = kd_ctrgen_row (gen, index, &score);
        kd_ctrref_train (refs, index, per_row, score, label);
    }
    //  Rows past test_rows are not kept.
    for (size_t r = 0; r < test_rows + 10; r++) {
        int label = kd_ctrgen_row (gen, index, &score);
        kd_ctrref_test (refs, index, per_row, score, label);
    }
    kd_ctrref_result_t result = kd_ctrref_result (refs);
    kd_ctrref_destroy (&refs);
    cr_expect_null (refs);
    kd_ctrgen_destroy (&gen);
    return result;
}

Test (kd_ctrgen, references_near_the_planted_model_when_every_feature_has_many_rows)
{
    //  50 features, 10 a row, 100,000 rows: the rarest has thousands.
    kd_ctrref_result_t r = s_references (50, 10, 100000, 20000);
    cr_expect (r.planted > 0.75 && r.planted < 1, "planted %.4f", r.planted);
    cr_expect_eq (r.seen, r.planted);
    cr_expect_eq (r.unseen_share, 0);
    cr_expect (fabs (r.estimated - r.planted) < 0.005, "estimated %.4f against planted %.4f",
               r.estimated, r.planted);
}

Test (kd_ctrgen, references_fall_below_the_planted_model_when_rows_are_few)
{
    //  A million features and 2,000 rows: a quarter of the held-out draws
    //  were never seen, and most seen features were seen once.
    kd_ctrref_result_t r = s_references (1000000, 40, 2000, 20000);
    cr_expect (r.unseen_share > 0.1 && r.unseen_share < 1, "unseen %.4f", r.unseen_share);
    cr_expect (r.seen < r.planted - 0.02, "seen %.4f, planted %.4f", r.seen, r.planted);
    cr_expect (r.estimated < r.seen - 0.02, "estimated %.4f, seen %.4f", r.estimated, r.seen);
    cr_expect (r.estimated > 0.5, "estimated %.4f still ranks", r.estimated);
}

Test (kd_ctrgen, references_without_held_out_rows_are_not_numbers)
{
    kd_ctrgen_t *gen = s_new (100, 1.1, 5, 1);
    kd_ctrref_t *refs = kd_ctrref_new (gen, 100, 0);
    cr_assert (refs);
    kd_ctrref_result_t r = kd_ctrref_result (refs);
    cr_expect (isnan (r.planted) && isnan (r.seen) && isnan (r.estimated) && isnan (r.unseen_share));
    kd_ctrref_destroy (&refs);
    kd_ctrgen_destroy (&gen);
}

static int
s_compare (const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;
    return x < y ? -1 : x > y;
}

Test (kd_ctrgen, a_vocabulary_touches_keys_alike_at_any_feature_count)
{
    //  The same seed and vocabulary over 1M and 100M features: the same
    //  ranks, so the same number of distinct keys in every batch of rows,
    //  each index within the features and each rank within the vocabulary.
    kd_ctrgen_t *small = s_new (1000000, 1.1, 40, 9), *large = s_new (100000000, 1.1, 40, 9);
    cr_assert_eq (kd_ctrgen_set_vocab (small, 50000, NULL, 0), 0);
    cr_assert_eq (kd_ctrgen_set_vocab (large, 50000, NULL, 0), 0);
    static uint64_t keys_small [100 * 40], keys_large [100 * 40];
    for (int batch = 0; batch < 20; batch++) {
        for (int r = 0; r < 100; r++) {
            double score;
            kd_ctrgen_row (small, keys_small + r * 40, &score);
            kd_ctrgen_row (large, keys_large + r * 40, &score);
        }
        for (int i = 0; i < 4000; i++) {
            cr_assert (keys_small [i] >= 1 && keys_small [i] <= 1000000);
            cr_assert (keys_large [i] >= 1 && keys_large [i] <= 100000000);
        }
        qsort (keys_small, 4000, sizeof (uint64_t), s_compare);
        qsort (keys_large, 4000, sizeof (uint64_t), s_compare);
        size_t distinct_small = 1, distinct_large = 1;
        for (int i = 1; i < 4000; i++) {
            distinct_small += keys_small [i] != keys_small [i - 1];
            distinct_large += keys_large [i] != keys_large [i - 1];
        }
        cr_expect_eq (distinct_small, distinct_large, "batch %d", batch);
        cr_expect (distinct_small < 4000, "a batch repeats common keys");
    }
    //  Every draw stays within the vocabulary's ranks.
    for (int i = 0; i < 100000; i++)
        cr_assert_leq (kd_ctrgen_rank (small), 50000);
    //  Out of bounds: under per-row, over the features.
    char err [128] = "";
    cr_expect_eq (kd_ctrgen_set_vocab (small, 39, err, sizeof err), -1);
    cr_expect (strstr (err, "per-row"), "%s", err);
    cr_expect_eq (kd_ctrgen_set_vocab (small, 1000001, NULL, 0), -1);
    kd_ctrgen_destroy (&small);
    kd_ctrgen_destroy (&large);
}
