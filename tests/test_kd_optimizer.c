/*  test_kd_optimizer: specs, schedules and the rules' first steps.

    The long runs against torch.optim are tests/python/test_optimizer.py;
    here each rule's first steps are checked against values worked by
    hand, and every malformed spec against a clear refusal (-2).
*/
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "kd_optimizer.h"

TestSuite (kd_optimizer);

static kd_optimizer_t *
s_new (const char *spec, size_t n)
{
    kd_optimizer_opts_t o;
    char err [256];
    cr_assert_eq (kd_optimizer_parse (spec, &o, err, sizeof err), 0, "%s: %s", spec, err);
    kd_optimizer_t *opt = kd_optimizer_new (&o, n);
    cr_assert (opt);
    return opt;
}

Test (kd_optimizer, format_and_parse_round_trip)
{
    kd_optimizer_opts_t o = kd_optimizer_defaults (KD_OPT_ADAMW), back;
    o.lr = 0.0123;
    o.warmup = 7;
    char err [256], spec [KD_OPTIMIZER_SPEC_MAX];
    cr_assert_eq (kd_optimizer_schedule_parse ("step:30:0.5", &o, err, sizeof err), 0);
    cr_assert_eq (kd_optimizer_format (&o, spec, sizeof spec), 0);
    cr_expect (strstr (spec, "adamw lr=0.0123 "), "%s", spec);
    cr_assert_eq (kd_optimizer_parse (spec, &back, err, sizeof err), 0, "%s", err);
    //  Field by field: padding bytes need not match.
    cr_expect (o.kind == back.kind && o.lr == back.lr && o.momentum == back.momentum
            && o.beta1 == back.beta1 && o.beta2 == back.beta2 && o.eps == back.eps
            && o.weight_decay == back.weight_decay && o.schedule == back.schedule
            && o.step_every == back.step_every && o.gamma == back.gamma
            && o.cosine_steps == back.cosine_steps && o.warmup == back.warmup,
            "%s does not read back", spec);
    //  Too small a buffer is an error, not a truncated spec.
    cr_expect_eq (kd_optimizer_format (&o, spec, 20), -1);
}

Test (kd_optimizer, malformed_specs_are_refused)
{
    const char *bad [] = {
        "", "rmsprop", "adam lr", "adam lr=", "adam lr=abc", "adam lr=-1", "adam lr=nan",
        "sgd momentum=1", "nesterov momentum=0", "adam beta1=1", "adam eps=0", "adam wd=2",
        "adam schedule=cosine:0", "adam schedule=step:0:0.5", "adam schedule=step:10:1.5",
        "adam schedule=linear", "adam warmup=-3", "adam warmup=1e9", "adam bogus=1",
        "sgd unit=epochs", "sgd unit="
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++) {
        kd_optimizer_opts_t o;
        char err [256] = "";
        cr_expect_eq (kd_optimizer_parse (bad [i], &o, err, sizeof err), -2, "'%s' accepted", bad [i]);
        cr_expect (err [0], "'%s': no reason given", bad [i]);
    }
    char *long_spec = malloc (1000);
    memset (long_spec, 'a', 999);
    long_spec [999] = 0;
    kd_optimizer_opts_t o;
    char err [256];
    cr_expect_eq (kd_optimizer_parse (long_spec, &o, err, sizeof err), -2);
    cr_expect_eq (kd_optimizer_parse (NULL, &o, err, sizeof err), -2);
    free (long_spec);
}

Test (kd_optimizer, schedules_and_warmup)
{
    kd_optimizer_opts_t o = kd_optimizer_defaults (KD_OPT_SGD);
    o.lr = 1;
    char err [128];
    cr_expect_float_eq (kd_optimizer_lr_at (&o, 1000), 1.0, 1e-12);
    cr_assert_eq (kd_optimizer_schedule_parse ("step:10:0.5", &o, err, sizeof err), 0);
    cr_expect_float_eq (kd_optimizer_lr_at (&o, 10), 1.0, 1e-12);
    cr_expect_float_eq (kd_optimizer_lr_at (&o, 11), 0.5, 1e-12);
    cr_expect_float_eq (kd_optimizer_lr_at (&o, 31), 0.125, 1e-12);
    cr_assert_eq (kd_optimizer_schedule_parse ("cosine:100", &o, err, sizeof err), 0);
    cr_expect_float_eq (kd_optimizer_lr_at (&o, 1), 1.0, 1e-12);
    cr_expect_float_eq (kd_optimizer_lr_at (&o, 51), 0.5, 1e-12);
    cr_expect_float_eq (kd_optimizer_lr_at (&o, 101), 0.0, 1e-12);
    cr_expect_float_eq (kd_optimizer_lr_at (&o, 500), 0.0, 1e-12);     //  stays at 0
    o.warmup = 4;
    cr_expect_float_eq (kd_optimizer_lr_at (&o, 1), 0.25, 1e-12);
    cr_expect_float_eq (kd_optimizer_lr_at (&o, 4), cos (M_PI * 3 / 100) / 2 + 0.5, 1e-12);
}

//  unit=samples: the schedule's clock is the samples applied before a
//  step, whatever the steps count; the spec names it and reads it back.
Test (kd_optimizer, schedule_counted_in_samples)
{
    char err [256], spec [KD_OPTIMIZER_SPEC_MAX];
    kd_optimizer_opts_t o, back;
    cr_assert_eq (kd_optimizer_parse ("sgd lr=1 momentum=0 schedule=step:100:0.5 unit=samples",
                                      &o, err, sizeof err), 0, "%s", err);
    cr_expect (o.per_sample);
    cr_assert_eq (kd_optimizer_format (&o, spec, sizeof spec), 0);
    cr_expect (strstr (spec, " unit=samples"), "%s", spec);
    cr_assert_eq (kd_optimizer_parse (spec, &back, err, sizeof err), 0, "%s", err);
    cr_expect (back.per_sample && back.step_every == 100);
    //  Counted in steps, the spec reads as it always did.
    o.per_sample = false;
    cr_assert_eq (kd_optimizer_format (&o, spec, sizeof spec), 0);
    cr_expect_null (strstr (spec, "unit"), "%s", spec);
    cr_assert_eq (kd_optimizer_parse ("sgd lr=1 momentum=0 unit=steps", &back, err, sizeof err), 0);
    cr_expect_not (back.per_sample);

    //  Steps of 64 samples: the rate halves at the step that starts past
    //  100 samples (the third), not at the 101st step.
    kd_optimizer_t *opt = s_new ("sgd lr=1 momentum=0 schedule=step:100:0.5 unit=samples", 1);
    float x = 0, g = 1;
    float want [] = { -1, -2, -2.5, -3, -3.25 };
    for (int k = 0; k < 5; k++) {
        kd_optimizer_set_samples (opt, (uint64_t) k * 64);
        kd_optimizer_step (opt, &x, &g);
        cr_expect_float_eq (x, want [k], 1e-6, "step %d: x=%g", k + 1, x);
    }
    cr_expect_eq (kd_optimizer_steps (opt), 5);
    kd_optimizer_destroy (&opt);

    //  kd_optimizer_apply, as a sparse table calls it, takes the same clock.
    kd_optimizer_opts_t a;
    cr_assert_eq (kd_optimizer_parse ("sgd lr=1 momentum=0 schedule=step:100:0.5 unit=samples",
                                      &a, err, sizeof err), 0);
    float y = 0;
    kd_optimizer_apply (&a, 1, 150, &y, NULL, &g, 1);
    cr_expect_float_eq (y, -0.5, 1e-6);
}

Test (kd_optimizer, sgd_momentum_and_nesterov_by_hand)
{
    kd_optimizer_t *m = s_new ("sgd lr=0.1 momentum=0.5", 1);
    kd_optimizer_t *n = s_new ("nesterov lr=0.1 momentum=0.5", 1);
    kd_optimizer_t *p = s_new ("sgd lr=0.1 momentum=0", 1);
    cr_expect_eq (kd_optimizer_state_count (m), 1);
    cr_expect_eq (kd_optimizer_state_count (p), 0);
    cr_expect_null (kd_optimizer_state (p));
    float xm = 1, xn = 1, xp = 1, g = 2;
    kd_optimizer_step (m, &xm, &g);     //  b = 2, x = 1 - 0.2
    kd_optimizer_step (n, &xn, &g);     //  b = 2, d = 2 + 1, x = 1 - 0.3
    kd_optimizer_step (p, &xp, &g);
    cr_expect_float_eq (xm, 0.8f, 1e-6);
    cr_expect_float_eq (xn, 0.7f, 1e-6);
    cr_expect_float_eq (xp, 0.8f, 1e-6);
    kd_optimizer_step (m, &xm, &g);     //  b = 1 + 2 = 3, x = 0.8 - 0.3
    kd_optimizer_step (n, &xn, &g);     //  b = 3, d = 2 + 1.5, x = 0.7 - 0.35
    cr_expect_float_eq (xm, 0.5f, 1e-6);
    cr_expect_float_eq (xn, 0.35f, 1e-6);
    cr_expect_eq (kd_optimizer_steps (m), 2);
    kd_optimizer_destroy (&m);
    kd_optimizer_destroy (&n);
    kd_optimizer_destroy (&p);
    cr_expect_null (m);
}

Test (kd_optimizer, adam_first_step_is_lr_times_sign)
{
    //  At t = 1 the bias corrections make m/sqrt(v) = g/|g|: each key moves
    //  by lr (less eps's share), whatever the gradient's size.
    kd_optimizer_t *a = s_new ("adam lr=0.01", 3);
    float x [3] = { 0, 0, 0 }, g [3] = { 1000, -0.001f, 0 };
    kd_optimizer_step (a, x, g);
    cr_expect_float_eq (x [0], -0.01f, 1e-6);
    cr_expect_float_eq (x [1], 0.01f, 1e-4);
    cr_expect_float_eq (x [2], 0.0f, 0);
    cr_expect_eq (kd_optimizer_state_count (a), 2);
    //  The state block holds m then v.
    float *st = kd_optimizer_state (a);
    cr_expect_float_eq (st [0], 100.0f, 1e-3);              //  m = 0.1 g
    cr_expect_float_eq (st [3], 1000.0f, 1e-2);             //  v = 0.001 g^2
    kd_optimizer_destroy (&a);
}

Test (kd_optimizer, adamw_decays_weights_without_gradient)
{
    kd_optimizer_t *a = s_new ("adamw lr=0.1 wd=0.5", 1);
    float x = 2, g = 0;
    kd_optimizer_step (a, &x, &g);      //  x *= 1 - 0.05
    cr_expect_float_eq (x, 1.9f, 1e-6);
    kd_optimizer_set_steps (a, 41);
    cr_expect_eq (kd_optimizer_steps (a), 41);
    kd_optimizer_destroy (&a);
}

Test (kd_optimizer, adagrad_by_hand)
{
    kd_optimizer_t *a = s_new ("adagrad lr=1 eps=1e-10", 1);
    float x = 0, g = 3;
    kd_optimizer_step (a, &x, &g);      //  s = 9, x = -3/3
    cr_expect_float_eq (x, -1.0f, 1e-6);
    g = 4;
    kd_optimizer_step (a, &x, &g);      //  s = 25, x = -1 - 4/5
    cr_expect_float_eq (x, -1.8f, 1e-6);
    kd_optimizer_destroy (&a);
}

Test (kd_optimizer, new_refuses_bad_options)
{
    kd_optimizer_opts_t o = kd_optimizer_defaults (KD_OPT_ADAM);
    cr_expect_null (kd_optimizer_new (&o, 0));
    o.lr = -1;
    cr_expect_null (kd_optimizer_new (&o, 4));
    cr_expect_eq (kd_optimizer_kind_parse ("momentum"), KD_OPT_SGD);
    cr_expect_eq (kd_optimizer_kind_parse ("nope"), -1);
    cr_expect_str_eq (kd_optimizer_kind_name (KD_OPT_ADAMW), "adamw");
}

//  FTRL-Proximal in double, straight from McMahan et al. (2013), Algorithm 1.
static void
s_ftrl_reference (double *w, double *z, double *n, const double *g, size_t k,
                  double alpha, double beta, double l1, double l2)
{
    for (size_t i = 0; i < k; i++) {
        double sigma = (sqrt (n [i] + g [i] * g [i]) - sqrt (n [i])) / alpha;
        z [i] += g [i] - sigma * w [i];
        n [i] += g [i] * g [i];
        w [i] = fabs (z [i]) <= l1 ? 0
              : -(z [i] - (z [i] > 0 ? l1 : -l1)) / ((beta + sqrt (n [i])) / alpha + l2);
    }
}

Test (kd_optimizer, ftrl_follows_the_papers_algorithm)
{
    enum { K = 64, STEPS = 300 };
    kd_optimizer_t *opt = s_new ("ftrl lr=0.05 l1=8 l2=0.1 beta=1", K);
    cr_expect_eq (kd_optimizer_state_count (opt), 2);
    float x [K], g [K];
    double w [K] = { 0 }, z [K] = { 0 }, n [K] = { 0 }, gd [K];
    for (size_t i = 0; i < K; i++)
        x [i] = 0;
    unsigned seed = 9;
    size_t zeros = 0;
    for (int t = 0; t < STEPS; t++) {
        for (size_t i = 0; i < K; i++) {
            //  Keys with a bias pull away from 0; the rest hover around it.
            double bias = i < K / 2 ? 0.4 : 0.0;
            g [i] = (float) (bias + ((double) rand_r (&seed) / RAND_MAX - 0.5));
            gd [i] = g [i];
        }
        kd_optimizer_step (opt, x, g);
        s_ftrl_reference (w, z, n, gd, K, 0.05, 1, 8, 0.1);
        for (size_t i = 0; i < K; i++)
            cr_assert_float_eq (x [i], w [i], 1e-5 + 1e-4 * fabs (w [i]), "step %d key %zu", t, i);
    }
    //  L1 makes the keys without signal exactly 0, and leaves the others.
    for (size_t i = K / 2; i < K; i++)
        zeros += x [i] == 0.0f;
    cr_expect_gt (zeros, K / 4, "l1 left %zu of %d noise keys at 0", zeros, K / 2);
    for (size_t i = 0; i < K / 2; i++)
        cr_expect_lt (x [i], 0.0f, "a key with a steady positive gradient did not go negative");
    kd_optimizer_destroy (&opt);
}

Test (kd_optimizer, ftrl_spec_round_trip_and_refusals)
{
    kd_optimizer_opts_t o = kd_optimizer_defaults (KD_OPT_FTRL), back;
    cr_expect_eq (o.lr, 0.1);
    o.l1 = 1.5;
    o.l2 = 0.25;
    o.ftrl_beta = 2;
    char err [256], spec [KD_OPTIMIZER_SPEC_MAX];
    cr_assert_eq (kd_optimizer_format (&o, spec, sizeof spec), 0);
    cr_expect (strstr (spec, "ftrl lr=0.1 ") && strstr (spec, " l1=1.5 l2=0.25 beta=2"), "%s", spec);
    cr_assert_eq (kd_optimizer_parse (spec, &back, err, sizeof err), 0, "%s", err);
    cr_expect (back.kind == KD_OPT_FTRL && back.l1 == 1.5 && back.l2 == 0.25 && back.ftrl_beta == 2);
    //  Other rules' specs do not carry FTRL's fields.
    kd_optimizer_opts_t adam = kd_optimizer_defaults (KD_OPT_ADAM);
    cr_assert_eq (kd_optimizer_format (&adam, spec, sizeof spec), 0);
    cr_expect_null (strstr (spec, "l1="), "%s", spec);
    const char *bad [] = { "ftrl l1=-1", "ftrl l2=nan", "ftrl beta=0", "ftrl wd=0.1", "ftrl l1=1e7" };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++)
        cr_expect_eq (kd_optimizer_parse (bad [i], &back, err, sizeof err), -2, "%s accepted", bad [i]);
    cr_expect_eq (kd_optimizer_kind_parse ("ftrl"), KD_OPT_FTRL);
    cr_expect_str_eq (kd_optimizer_kind_name (KD_OPT_FTRL), "ftrl");
}
