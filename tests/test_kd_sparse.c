/*  test_kd_sparse: a sparse tensor's rows, created on first touch.

    Reading creates nothing; a step creates the rows it touches and applies
    the optimizer's rule to them, bit for bit as the dense kd_optimizer does
    on the same rows; rules whose step leaves a key with a zero gradient
    alone (AdaGrad, FTRL) match the dense rule even when a step touches
    only some keys; memory follows the rows touched; rows survive the
    table's growth.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kd_sparse.h"

TestSuite (kd_sparse, .timeout = 60);

static kd_optimizer_opts_t
s_opts (const char *spec)
{
    kd_optimizer_opts_t o;
    char err [256];
    cr_assert_eq (kd_optimizer_parse (spec, &o, err, sizeof err), 0, "%s", err);
    return o;
}

Test (kd_sparse, reading_creates_nothing_and_returns_the_initial_values)
{
    kd_optimizer_opts_t o = s_opts ("ftrl lr=0.1");
    kd_sparse_t *zero = kd_sparse_new (4, &o, 0, 1), *rnd = kd_sparse_new (4, &o, 0.01, 9);
    cr_assert (zero && rnd);
    uint64_t keys [3] = { 5, 1000000007, UINT64_MAX };
    float a [12], b [12], c [12];
    kd_sparse_pull (zero, keys, 3, a);
    for (int i = 0; i < 12; i++)
        cr_expect_eq (a [i], 0.0f);
    kd_sparse_pull (rnd, keys, 3, b);
    kd_sparse_pull (rnd, keys, 3, c);
    cr_expect (!memcmp (b, c, sizeof b), "initial values are not a function of the key");
    int nonzero = 0;
    for (int i = 0; i < 12; i++) {
        cr_expect (fabsf (b [i]) <= 0.01f);
        nonzero += b [i] != 0;
    }
    cr_expect_gt (nonzero, 10);
    cr_expect_eq (kd_sparse_rows (zero), 0, "a pull created rows");
    cr_expect_eq (kd_sparse_rows (rnd), 0);
    cr_expect_null (kd_sparse_new (0, &o, 0, 1));
    kd_sparse_destroy (&zero);
    kd_sparse_destroy (&rnd);
    cr_expect_null (zero);
}

//  Every step touches every key: the sparse rows are the dense tensor.
static void
s_same_as_dense (const char *spec)
{
    enum { K = 50, DIM = 3, STEPS = 40 };
    kd_optimizer_opts_t o = s_opts (spec);
    kd_sparse_t *sp = kd_sparse_new (DIM, &o, 0, 1);
    kd_optimizer_t *dense = kd_optimizer_new (&o, K * DIM);
    cr_assert (sp && dense);
    float x [K * DIM] = { 0 }, g [K * DIM], out [K * DIM];
    uint64_t keys [K];
    for (size_t k = 0; k < K; k++)
        keys [k] = k * 7919 + 3;
    unsigned seed = 4;
    for (int t = 0; t < STEPS; t++) {
        for (size_t i = 0; i < K * DIM; i++)
            g [i] = (float) ((double) rand_r (&seed) / RAND_MAX - 0.4);
        kd_optimizer_step (dense, x, g);
        cr_assert_eq (kd_sparse_step (sp, keys, K, g), 0);
    }
    kd_sparse_pull (sp, keys, K, out);
    cr_expect (!memcmp (out, x, sizeof x), "%s: sparse rows differ from the dense tensor", spec);
    cr_expect_eq (kd_sparse_rows (sp), K);
    cr_expect_eq (kd_sparse_steps (sp), STEPS);
    kd_optimizer_destroy (&dense);
    kd_sparse_destroy (&sp);
}

Test (kd_sparse, every_rule_matches_the_dense_rule_bit_for_bit)
{
    s_same_as_dense ("sgd lr=0.1 momentum=0.9");
    s_same_as_dense ("adagrad lr=0.1");
    s_same_as_dense ("adam lr=0.01");
    s_same_as_dense ("ftrl lr=0.1 l1=0.5 l2=0.1");
}

//  A step touches some keys: for AdaGrad and FTRL a zero gradient leaves a
//  key as it is, so the sparse tensor equals the dense one fed zeros.
static void
s_partial (const char *spec)
{
    enum { K = 64, DIM = 2, STEPS = 200 };
    kd_optimizer_opts_t o = s_opts (spec);
    kd_sparse_t *sp = kd_sparse_new (DIM, &o, 0, 1);
    kd_optimizer_t *dense = kd_optimizer_new (&o, K * DIM);
    float x [K * DIM] = { 0 }, gd [K * DIM], gs [K * DIM], out [K * DIM];
    uint64_t touched [K], all [K];
    for (size_t k = 0; k < K; k++)
        all [k] = k;
    unsigned seed = 8;
    for (int t = 0; t < STEPS; t++) {
        memset (gd, 0, sizeof gd);
        size_t n = 0;
        for (size_t k = 0; k < K; k++)
            if (rand_r (&seed) % 4 == 0) {
                touched [n] = k;
                for (size_t j = 0; j < DIM; j++) {
                    float v = (float) ((double) rand_r (&seed) / RAND_MAX - 0.5);
                    gd [k * DIM + j] = v;
                    gs [n * DIM + j] = v;
                }
                n++;
            }
        kd_optimizer_step (dense, x, gd);
        cr_assert_eq (kd_sparse_step (sp, touched, n, gs), 0);
    }
    kd_sparse_pull (sp, all, K, out);
    for (size_t i = 0; i < K * DIM; i++)
        cr_assert_eq (out [i], x [i], "%s: key %zu col %zu: %g against %g", spec, i / DIM, i % DIM,
                      out [i], x [i]);
    kd_optimizer_destroy (&dense);
    kd_sparse_destroy (&sp);
}

Test (kd_sparse, lazy_rules_match_the_dense_rule_on_partial_steps)
{
    s_partial ("adagrad lr=0.05");
    s_partial ("ftrl lr=0.1 l1=0.2 l2=0.01");
}

Test (kd_sparse, memory_follows_the_touched_rows_and_survives_growth)
{
    kd_optimizer_opts_t o = s_opts ("ftrl lr=0.1");
    kd_sparse_t *sp = kd_sparse_new (1, &o, 0, 1);
    enum { N = 100000, BATCH = 40 };
    uint64_t *keys = (uint64_t *) malloc (N * sizeof (uint64_t));
    //  Keys spread over 2^60: the key space could never be allocated.
    for (size_t i = 0; i < N; i++)
        keys [i] = (uint64_t) i * 11400714819323198485ull >> 4;
    float g [BATCH];
    for (size_t i = 0; i < BATCH; i++)
        g [i] = 1.0f;
    for (size_t i = 0; i < N; i += BATCH)
        cr_assert_eq (kd_sparse_step (sp, keys + i, BATCH, g), 0);
    cr_expect_eq (kd_sparse_rows (sp), N);
    //  Row, two state floats, key, and table slots at load <= 1/2: under
    //  100 bytes a row even with the arena's doubling.
    cr_expect_lt (kd_sparse_bytes (sp), (size_t) N * 100, "%zu bytes for %d rows", kd_sparse_bytes (sp), N);
    //  Every row kept its value through the rehashes: one FTRL step from
    //  z = n = 0 with g = 1 gives -(1 - 0) / ((1 + 1) / 0.1) = -0.05.
    float v;
    for (size_t i = 0; i < N; i += 997) {
        kd_sparse_pull (sp, keys + i, 1, &v);
        cr_assert_float_eq (v, -0.05f, 1e-7, "key %zu", i);
    }
    size_t seen = 0;
    uint64_t key;
    for (size_t i = 0; kd_sparse_row (sp, i, &key); i++)
        seen += key == keys [i];
    cr_expect_eq (seen, N, "rows iterate in creation order with their keys");
    free (keys);
    kd_sparse_destroy (&sp);
}

//  A checkpoint's view of the rows (keys, arena, steps) loads into a new
//  table that then answers and steps exactly as the old one.
Test (kd_sparse, rows_and_state_load_into_a_new_table)
{
    kd_optimizer_opts_t o = s_opts ("adagrad lr=0.5");
    kd_sparse_t *a = kd_sparse_new (2, &o, 0, 0), *b = kd_sparse_new (2, &o, 0, 0);
    cr_assert (a && b);
    const uint64_t keys [3] = { 40, 7, 1000000007ull };
    const float g [6] = { 1, -2, 0.5f, 0.25f, -1, 3 };
    cr_assert_eq (kd_sparse_step (a, keys, 3, g), 0);
    cr_assert_eq (kd_sparse_step (a, keys, 2, g + 2), 0);
    cr_assert_eq (kd_sparse_stride (a), 4, "2 values and AdaGrad's 2 sums");
    cr_assert_eq (kd_sparse_load (b, kd_sparse_keys (a), kd_sparse_arena (a), kd_sparse_rows (a),
                                  kd_sparse_steps (a)), 0);
    cr_expect_eq (kd_sparse_rows (b), 3);
    cr_expect_eq (kd_sparse_steps (b), 2);
    float va [6], vb [6];
    kd_sparse_pull (a, keys, 3, va);
    kd_sparse_pull (b, keys, 3, vb);
    cr_expect_eq (memcmp (va, vb, sizeof va), 0);
    //  The state came too: the next step is the same in both.
    cr_assert_eq (kd_sparse_step (a, keys, 3, g), 0);
    cr_assert_eq (kd_sparse_step (b, keys, 3, g), 0);
    kd_sparse_pull (a, keys, 3, va);
    kd_sparse_pull (b, keys, 3, vb);
    cr_expect_eq (memcmp (va, vb, sizeof va), 0);
    //  A repeated key is refused and changes nothing.
    const uint64_t twice [2] = { 5, 5 };
    const float rows [8] = { 1, 1, 1, 1, 2, 2, 2, 2 };
    cr_expect_eq (kd_sparse_load (b, twice, rows, 2, 9), -1);
    cr_expect_eq (kd_sparse_rows (b), 3);
    kd_sparse_pull (b, keys, 3, vb);
    cr_expect_eq (memcmp (va, vb, sizeof va), 0);
    kd_sparse_destroy (&a);
    kd_sparse_destroy (&b);
}
