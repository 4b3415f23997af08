/*  test_kd_shardset: the address book every client of the shards builds
    from START, and the one rule by which a PULL_OK slice is accepted.
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include "kd_shardset.h"

TestSuite (kd_shardset, .timeout = 20);

static kd_msg_t *
s_start (size_t n, const uint64_t *los, const uint64_t *his)
{
    const char *eps [4] = { "tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3",
                            "tcp://127.0.0.1:4" };
    kd_msg_t *msg = kd_msg_new (KD_MSG_START);
    kd_msg_set_strs (msg, KD_F_ENDPOINTS, eps, n);
    kd_msg_set_uints (msg, KD_F_LOS, los, n);
    kd_msg_set_uints (msg, KD_F_HIS, his, n);
    return msg;
}

Test (kd_shardset, a_book_that_tiles_the_model)
{
    uint64_t los [2] = { 0, 6 }, his [2] = { 6, 10 };
    kd_msg_t *start = s_start (2, los, his);
    char err [256] = "";
    kd_shardset_t *book = kd_shardset_new (start, 10, 1 << 20, NULL, err, sizeof err);
    cr_assert (book, "%s", err);
    cr_expect_eq (kd_shardset_size (book), 2);
    cr_expect_eq (kd_shardset_params (book), 10);
    cr_expect_eq (kd_shardset_lo (book, 1), 6);
    cr_expect_eq (kd_shardset_hi (book, 1), 10);
    cr_expect_str_eq (kd_shardset_endpoint (book, 0), "tcp://127.0.0.1:1");
    cr_expect_not_null (kd_shardset_socket (book, 1));
    kd_shardset_destroy (&book);
    cr_expect_null (book);
    //  n_params 0 takes the model's size from the book.
    book = kd_shardset_new (start, 0, 1 << 20, NULL, err, sizeof err);
    cr_assert (book);
    cr_expect_eq (kd_shardset_params (book), 10);
    kd_shardset_destroy (&book);
    kd_msg_destroy (&start);
}

Test (kd_shardset, malformed_books_are_refused)
{
    struct { size_t n; uint64_t los [2], his [2]; size_t n_params; } bad [] = {
        { 2, { 0, 6 }, { 6, 10 }, 11 },     //  short of the model
        { 2, { 0, 5 }, { 6, 10 }, 10 },     //  overlap
        { 2, { 0, 7 }, { 6, 10 }, 10 },     //  gap
        { 2, { 1, 6 }, { 6, 10 }, 10 },     //  does not start at 0
        { 2, { 0, 6 }, { 6, 6 }, 6 },       //  an empty range
        { 0, { 0 }, { 0 }, 10 },            //  no shard
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        kd_msg_t *start = s_start (bad [i].n, bad [i].los, bad [i].his);
        char err [256] = "";
        kd_shardset_t *book = kd_shardset_new (start, bad [i].n_params, 1 << 20, NULL, err, sizeof err);
        cr_expect_null (book, "case %zu accepted", i);
        cr_expect (strstr (err, "address book"), "case %zu: '%s'", i, err);
        kd_shardset_destroy (&book);
        kd_msg_destroy (&start);
    }
    //  Lists of different lengths.
    uint64_t los [2] = { 0, 6 }, his [1] = { 10 };
    kd_msg_t *start = s_start (2, los, los);
    kd_msg_set_uints (start, KD_F_HIS, his, 1);
    char err [256];
    cr_expect_null (kd_shardset_new (start, 10, 1 << 20, NULL, err, sizeof err));
    kd_msg_destroy (&start);
}

static kd_msg_t *
s_pull_ok (uint64_t version, uint64_t lo, size_t count)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_uint (msg, KD_F_VERSION, version);
    kd_msg_set_uint (msg, KD_F_LO, lo);
    zframe_t *data = zframe_new (NULL, count * sizeof (float));
    for (size_t i = 0; i < count; i++)
        ((float *) zframe_data (data)) [i] = (float) (lo + i);
    kd_msg_set_data (msg, &data);
    return msg;
}

Test (kd_shardset, a_slice_is_taken_by_one_rule)
{
    uint64_t los [2] = { 0, 6 }, his [2] = { 6, 10 };
    kd_msg_t *start = s_start (2, los, his);
    char err [256];
    kd_shardset_t *book = kd_shardset_new (start, 10, 1 << 20, NULL, err, sizeof err);
    cr_assert (book);
    float params [10] = { 0 };
    kd_msg_t *ok = s_pull_ok (5, 6, 4), *stale = s_pull_ok (4, 6, 4);
    kd_msg_t *other = s_pull_ok (5, 0, 6), *short_ = s_pull_ok (5, 6, 3);
    kd_msg_t *push_ok = kd_msg_new (KD_MSG_PUSH_OK);
    cr_expect_eq (kd_shardset_take_pull (book, 1, stale, 5, params), -1);
    cr_expect_eq (kd_shardset_take_pull (book, 1, other, 5, params), -1);
    cr_expect_eq (kd_shardset_take_pull (book, 1, short_, 5, params), -1);
    cr_expect_eq (kd_shardset_take_pull (book, 1, push_ok, 0, params), -1);
    cr_expect_float_eq (params [6], 0.0f, 0, "a refused slice copied nothing");
    cr_expect_eq (kd_shardset_take_pull (book, 1, ok, 5, params), 0);
    cr_expect_float_eq (params [6], 6.0f, 0);
    cr_expect_float_eq (params [9], 9.0f, 0);
    cr_expect_float_eq (params [5], 0.0f, 0);
    kd_msg_destroy (&ok);
    kd_msg_destroy (&stale);
    kd_msg_destroy (&other);
    kd_msg_destroy (&short_);
    kd_msg_destroy (&push_ok);
    kd_shardset_destroy (&book);
    kd_msg_destroy (&start);
}
