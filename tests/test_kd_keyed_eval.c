/*  test_kd_keyed_eval: the monitor's held-out evaluation of a keyed model:
    each shard is asked for its range's keys only, its answer lands at
    those keys' place, a short or stale answer is refused, and rows with
    features the model lacks are read out.
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include "kd_shardset.h"
#include "kd_keyed_eval.h"
#include "kd_testutil.h"
#include <math.h>

TestSuite (kd_keyed_eval, .timeout = 20);

static char s_path [512];

static void
s_file (const char *text)
{
    char *dir = kd_test_tmpdir ();
    snprintf (s_path, sizeof s_path, "%s/test.svm", dir);
    free (dir);
    FILE *f = fopen (s_path, "w");
    cr_assert (f);
    fputs (text, f);
    fclose (f);
}

//  Two shards: keys [0, 3) and [3, n).
static kd_shardset_t *
s_book (uint64_t n)
{
    const char *eps [2] = { "tcp://127.0.0.1:1", "tcp://127.0.0.1:2" };
    uint64_t los [2] = { 0, 3 }, his [2] = { 3, n };
    kd_msg_t *start = kd_msg_new (KD_MSG_START);
    kd_msg_set_strs (start, KD_F_ENDPOINTS, eps, 2);
    kd_msg_set_uints (start, KD_F_LOS, los, 2);
    kd_msg_set_uints (start, KD_F_HIS, his, 2);
    char err [256];
    kd_shardset_t *book = kd_shardset_new (start, 0, 1 << 20, NULL, err, sizeof err);
    cr_assert (book, "%s", err);
    kd_msg_destroy (&start);
    return book;
}

//  A PULL_OK at version with these values.
static kd_msg_t *
s_reply (uint64_t version, const float *values, size_t n)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_uint (msg, KD_F_VERSION, version);
    kd_msg_set_uint (msg, KD_F_COUNT, n);
    zframe_t *data = zframe_new (values, n * sizeof (float));
    kd_msg_set_data (msg, &data);
    return msg;
}

Test (kd_keyed_eval, pulls_each_shards_keys_and_scores_the_rows)
{
    //  Features 1 and 2 (shard 0) mark clicks, 4 (shard 1) non-clicks.
    s_file ("1 1:1\n0 4:1\n1 2:1 4:1\n0 4:1\n");
    char err [256];
    kd_keyed_eval_t *e = kd_keyed_eval_new (s_path, 0, err, sizeof err);
    cr_assert (e, "%s", err);
    cr_expect_eq (kd_keyed_eval_rows (e), 4);
    cr_expect_eq (kd_keyed_eval_keys (e), 4);           //  bias, 1, 2, 4
    kd_shardset_t *book = s_book (6);
    cr_assert_eq (kd_keyed_eval_start (e, 6, 1, book, err, sizeof err), 0, "%s", err);
    //  Shard 0 is asked for keys 0, 1, 2; shard 1 for key 4 only.
    kd_msg_t *pull = kd_keyed_eval_request (e, 0, 7);
    size_t n;
    const uint64_t *keys = kd_msg_keys (pull, &n);
    cr_assert_eq (n, 3);
    cr_expect (keys [0] == 0 && keys [1] == 1 && keys [2] == 2);
    cr_expect_eq (kd_msg_uint (pull, KD_F_VERSION), 7);
    kd_msg_destroy (&pull);
    pull = kd_keyed_eval_request (e, 1, 7);
    keys = kd_msg_keys (pull, &n);
    cr_assert_eq (n, 1);
    cr_expect_eq (keys [0], 4);
    kd_msg_destroy (&pull);
    //  A stale answer and a short one are refused.
    const float w0 [3] = { 0, 3, 3 }, w1 [1] = { -3 };
    kd_msg_t *reply = s_reply (6, w0, 3);
    cr_expect_eq (kd_keyed_eval_take (e, 0, reply, 7), -1);
    kd_msg_destroy (&reply);
    reply = s_reply (7, w0, 2);
    cr_expect_eq (kd_keyed_eval_take (e, 0, reply, 7), -1);
    kd_msg_destroy (&reply);
    reply = s_reply (7, w0, 3);
    cr_expect_eq (kd_keyed_eval_take (e, 0, reply, 7), 0);
    kd_msg_destroy (&reply);
    reply = s_reply (8, w1, 1);
    cr_expect_eq (kd_keyed_eval_take (e, 1, reply, 7), 0);
    kd_msg_destroy (&reply);
    const float *v = kd_keyed_eval_values (e);
    cr_expect (v [0] == 0 && v [1] == 3 && v [2] == 3 && v [3] == -3);
    //  Logits 3, -3, 0, -3: every click above every non-click.
    double auc, loss, accuracy;
    cr_assert_eq (kd_keyed_eval_score (e, v, &auc, &loss, &accuracy), 0);
    cr_expect_float_eq (auc, 1.0, 1e-12);
    cr_expect_float_eq (accuracy, 1.0, 1e-12);
    cr_expect (loss > 0 && loss < 0.5, "loss %g", loss);
    kd_keyed_eval_destroy (&e);
    cr_expect_null (e);
    kd_shardset_destroy (&book);
}

Test (kd_keyed_eval, rows_past_the_model_are_read_out)
{
    s_file ("1 1:1\n0 9:1\n1 2:1\n");
    char err [256];
    kd_keyed_eval_t *e = kd_keyed_eval_new (s_path, 0, err, sizeof err);
    cr_assert (e, "%s", err);
    cr_expect_eq (kd_keyed_eval_rows (e), 3);
    kd_shardset_t *book = s_book (6);
    //  The model has keys 0..5: the row with feature 9 cannot be scored.
    cr_assert_eq (kd_keyed_eval_start (e, 6, 1, book, err, sizeof err), 0, "%s", err);
    cr_expect_eq (kd_keyed_eval_rows (e), 2);
    cr_expect_eq (kd_keyed_eval_keys (e), 3);
    //  Only one value per key is scored.
    cr_expect_eq (kd_keyed_eval_start (e, 6, 4, book, err, sizeof err), -1);
    cr_expect (strstr (err, "values per key"), "%s", err);
    kd_keyed_eval_destroy (&e);
    //  max_rows, and a file that is not there.
    s_file ("1 1:1\n0 2:1\n1 2:1\n");
    e = kd_keyed_eval_new (s_path, 2, err, sizeof err);
    cr_assert (e);
    cr_expect_eq (kd_keyed_eval_rows (e), 2);
    kd_keyed_eval_destroy (&e);
    cr_expect_null (kd_keyed_eval_new ("/nonexistent/test.svm", 0, err, sizeof err));
    cr_expect (strstr (err, "nonexistent"), "%s", err);
    kd_shardset_destroy (&book);
}
