/*  test_kd_keyed: a shard's keyed range: range checks, staged frames, and
    the per-key averaging rule of a commit, against a direct computation.
*/
#include "kd_keyed.h"
#include <criterion/criterion.h>
#include <math.h>

static kd_optimizer_opts_t
s_sgd (double lr)
{
    kd_optimizer_opts_t o = kd_optimizer_defaults (KD_OPT_SGD);
    o.lr = lr;
    return o;
}

Test (kd_keyed, checks_keys_against_the_range_and_the_value_count)
{
    kd_optimizer_opts_t o = s_sgd (0.1);
    kd_keyed_t *k = kd_keyed_new (100, 200, 2, &o);
    cr_assert_not_null (k);
    char why [160];
    const uint64_t in [] = { 100, 150, 199 }, low [] = { 99, 150 }, high [] = { 150, 200 };
    cr_expect_eq (kd_keyed_check (k, in, 3, 6, why, sizeof why), 0);
    cr_expect_eq (kd_keyed_check (k, in, 3, SIZE_MAX, why, sizeof why), 0, "a pull has no values");
    cr_expect_eq (kd_keyed_check (k, in, 0, 0, why, sizeof why), 0, "no keys is fine");
    cr_expect_eq (kd_keyed_check (k, low, 2, 4, why, sizeof why), -1);
    cr_expect (strstr (why, "outside"), "%s", why);
    cr_expect_eq (kd_keyed_check (k, high, 2, 4, why, sizeof why), -1);
    cr_expect_eq (kd_keyed_check (k, in, 3, 5, why, sizeof why), -1);
    cr_expect (strstr (why, "values"), "%s", why);
    cr_expect_null (kd_keyed_new (5, 5, 1, &o));
    cr_expect_null (kd_keyed_new (0, 5, 0, &o));
    kd_keyed_destroy (&k);
    cr_expect_null (k);
}

Test (kd_keyed, staged_frames_are_checked)
{
    kd_optimizer_opts_t o = s_sgd (0.1);
    kd_keyed_t *k = kd_keyed_new (0, 10, 3, &o);
    const uint64_t keys [] = { 1, 4 };
    const float values [6] = { 1, 2, 3, 4, 5, 6 };
    zframe_t *f = kd_keyed_stage (k, keys, 2, values);
    cr_expect (kd_keyed_staged_ok (k, f));
    zframe_t *cut = zframe_new (zframe_data (f), zframe_size (f) - 4);
    cr_expect_not (kd_keyed_staged_ok (k, cut), "a short frame passed");
    zframe_t *tiny = zframe_new ("abc", 3);
    cr_expect_not (kd_keyed_staged_ok (k, tiny));
    cr_expect_not (kd_keyed_staged_ok (k, NULL));
    zframe_destroy (&f);
    zframe_destroy (&cut);
    zframe_destroy (&tiny);
    kd_keyed_destroy (&k);
}

//  Three gradients over overlapping keys, weights 0.5, 0.25, 0.25 (W = 1):
//  each key's step is W times the weighted mean over the gradients that
//  touched it, and keys nobody touched do not move or exist.
Test (kd_keyed, a_commit_averages_each_key_over_the_gradients_that_touched_it)
{
    const double lr = 0.5;
    kd_optimizer_opts_t o = s_sgd (lr);
    kd_keyed_t *k = kd_keyed_new (0, 1000, 2, &o);
    const uint64_t ka [] = { 1, 5, 9 }, kb [] = { 5, 7 }, kc [] = { 1, 5, 900 };
    const float va [] = { 1, 1, 2, 2, 3, 3 }, vb [] = { 10, 20, 30, 40 }, vc [] = { -1, -2, 4, 4, 8, 8 };
    zframe_t *f [3] = { kd_keyed_stage (k, ka, 3, va), kd_keyed_stage (k, kb, 2, vb),
                        kd_keyed_stage (k, kc, 3, vc) };
    const void *staged [3] = { zframe_data (f [0]), zframe_data (f [1]), zframe_data (f [2]) };
    const double w [3] = { 0.5, 0.25, 0.25 };
    cr_assert_eq (kd_keyed_commit (k, staged, w, 3), 0);
    const uint64_t all [] = { 1, 5, 7, 9, 900, 3 };
    float got [12];
    kd_keyed_pull (k, all, 6, got);
    //  Expected gradients per key (W = 1):
    //  1: (0.5*1 + 0.25*-1)/0.75, (0.5*1 + 0.25*-2)/0.75
    //  5: (0.5*2 + 0.25*10 + 0.25*4)/1, (0.5*2 + 0.25*20 + 0.25*4)/1
    //  7: vb's row, 9: va's row, 900: vc's row; 3: untouched.
    const float g [12] = { 0.25f / 0.75f, 0.0f, 4.5f, 7.0f, 30, 40, 3, 3, 8, 8, 0, 0 };
    for (int i = 0; i < 12; i++)
        cr_expect (fabsf (got [i] + (float) lr * g [i]) < 1e-6f, "value %d: %g, expected %g", i,
                   got [i], -(float) lr * g [i]);
    cr_expect_eq (kd_keyed_rows (k), 5, "untouched keys take no memory");
    //  An empty commit of empty gradients changes nothing.
    zframe_t *e = kd_keyed_stage (k, NULL, 0, NULL);
    const void *es [1] = { zframe_data (e) };
    const double one [1] = { 1.0 };
    cr_expect_eq (kd_keyed_commit (k, es, one, 1), 0);
    float again [12];
    kd_keyed_pull (k, all, 6, again);
    cr_expect_eq (memcmp (again, got, sizeof got), 0);
    zframe_destroy (&e);
    for (int i = 0; i < 3; i++)
        zframe_destroy (&f [i]);
    kd_keyed_destroy (&k);
}
