/*  test_kd_speed: the speed-schedule grammar, its evaluation, its noise and
    its change times.

    Experiments depend on two properties checked here: a schedule is a pure
    function of (spec, time) apart from the noise, which is a pure function
    of the seed; and a bad spec is refused with a message, never a crash.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kd_speed.h"

TestSuite (kd_speed);

//  Parse a spec that must be valid.
static kd_speed_t *
s_new (const char *spec, uint64_t seed)
{
    char err [256];
    kd_speed_t *speed = kd_speed_new (spec, seed, err, sizeof err);
    cr_assert (speed, "'%s' refused: %s", spec, err);
    return speed;
}

//  The deterministic factor of a spec at t.
static double
s_base (const char *spec, double t)
{
    kd_speed_t *speed = s_new (spec, 1);
    double f = kd_speed_base (speed, t);
    kd_speed_destroy (&speed);
    return f;
}

static int
s_cmp_double (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

Test (kd_speed, empty_and_one_are_nominal)
{
    const char *specs [] = { "", "1", "  ", " 1 ", "1 1" };
    for (size_t i = 0; i < sizeof specs / sizeof specs [0]; i++) {
        kd_speed_t *speed = s_new (specs [i], 7);
        for (double t = 0; t < 100; t += 3.7) {
            cr_expect_float_eq (kd_speed_base (speed, t), 1.0, 1e-12);
            cr_expect_float_eq (kd_speed_factor (speed, t), 1.0, 1e-12);
        }
        double times [4];
        cr_expect_eq (kd_speed_changes (speed, 100, times, 4), 0);
        kd_speed_destroy (&speed);
        cr_expect_null (speed);
    }
    char err [64];
    kd_speed_t *speed = kd_speed_new (NULL, 1, err, sizeof err);
    cr_assert (speed);
    cr_expect_float_eq (kd_speed_base (speed, 5), 1.0, 1e-12);
    kd_speed_destroy (&speed);
    kd_speed_destroy (&speed);      //  a second destroy is harmless
}

Test (kd_speed, persistent_factor_and_products)
{
    cr_expect_float_eq (s_base ("4", 0), 4.0, 1e-12);
    cr_expect_float_eq (s_base ("4", 1000), 4.0, 1e-12);
    cr_expect_float_eq (s_base ("2.5", 3), 2.5, 1e-12);
    cr_expect_float_eq (s_base ("0.5", 3), 0.5, 1e-12);
    cr_expect_float_eq (s_base ("1e1", 3), 10.0, 1e-12);
    //  Terms multiply.
    cr_expect_float_eq (s_base ("2 3", 3), 6.0, 1e-12);
    cr_expect_float_eq (s_base ("2\tseg:0-10=3", 5), 6.0, 1e-12);
    cr_expect_float_eq (s_base ("2 seg:0-10=3", 15), 2.0, 1e-12);
    //  Times before the start count as the start.
    cr_expect_float_eq (s_base ("seg:0-10=3", -5), 3.0, 1e-12);
    cr_expect_float_eq (s_base ("seg:0-10=3", NAN), 3.0, 1e-12);
}

Test (kd_speed, segments_by_time)
{
    const char *spec = "seg:5-10=2,10-20=4,30-=3";
    cr_expect_float_eq (s_base (spec, 0), 1.0, 1e-12);      //  before the first
    cr_expect_float_eq (s_base (spec, 4.999), 1.0, 1e-12);
    cr_expect_float_eq (s_base (spec, 5), 2.0, 1e-12);      //  start inclusive
    cr_expect_float_eq (s_base (spec, 9.99), 2.0, 1e-12);
    cr_expect_float_eq (s_base (spec, 10), 4.0, 1e-12);     //  end exclusive
    cr_expect_float_eq (s_base (spec, 25), 1.0, 1e-12);     //  a gap
    cr_expect_float_eq (s_base (spec, 30), 3.0, 1e-12);
    cr_expect_float_eq (s_base (spec, 1e5), 3.0, 1e-12);    //  open-ended
    cr_expect_float_eq (s_base ("seg:0-=4", 123), 4.0, 1e-12);
}

Test (kd_speed, linear_ramps)
{
    const char *spec = "seg:10-40=1>4,40-=4";
    cr_expect_float_eq (s_base (spec, 0), 1.0, 1e-12);
    cr_expect_float_eq (s_base (spec, 10), 1.0, 1e-12);
    cr_expect_float_eq (s_base (spec, 20), 2.0, 1e-12);
    cr_expect_float_eq (s_base (spec, 25), 2.5, 1e-12);
    cr_expect_float_eq (s_base (spec, 39.999), 4.0, 1e-3);
    cr_expect_float_eq (s_base (spec, 50), 4.0, 1e-12);
    //  Down as well as up.
    cr_expect_float_eq (s_base ("seg:0-10=5>1", 5), 3.0, 1e-12);
}

Test (kd_speed, periodic_on_off)
{
    const char *spec = "onoff:20,0.25,3";
    double expect [][2] = { { 0, 3 }, { 4.99, 3 }, { 5, 1 }, { 19.9, 1 }, { 20, 3 }, { 24, 3 },
                            { 25.5, 1 }, { 100, 3 }, { 104.9, 3 }, { 106, 1 } };
    for (size_t i = 0; i < sizeof expect / sizeof expect [0]; i++)
        cr_expect_float_eq (s_base (spec, expect [i][0]), expect [i][1], 1e-12, "t=%g",
                            expect [i][0]);
    //  With a phase: nothing before it, then the pattern from there.
    const char *phased = "onoff:10,0.5,2,7";
    cr_expect_float_eq (s_base (phased, 3), 1.0, 1e-12);
    cr_expect_float_eq (s_base (phased, 7), 2.0, 1e-12);
    cr_expect_float_eq (s_base (phased, 11.9), 2.0, 1e-12);
    cr_expect_float_eq (s_base (phased, 12), 1.0, 1e-12);
    cr_expect_float_eq (s_base (phased, 17), 2.0, 1e-12);
    //  Duty 0 never, duty 1 always.
    cr_expect_float_eq (s_base ("onoff:10,0,5", 1), 1.0, 1e-12);
    cr_expect_float_eq (s_base ("onoff:10,1,5", 9.99), 5.0, 1e-12);
    //  The share of time on matches the duty.
    kd_speed_t *speed = s_new ("onoff:3,0.4,2", 1);
    int on = 0, n = 0;
    for (double t = 0; t < 300; t += 0.01, n++)
        on += kd_speed_base (speed, t) > 1.5;
    cr_expect_float_eq ((double) on / n, 0.4, 0.01);
    kd_speed_destroy (&speed);
}

Test (kd_speed, correlated_bursts)
{
    //  Same ID: the same bursts whatever the seed or the other terms.
    kd_speed_t *a = s_new ("burst:rack1,30,5,3", 1);
    kd_speed_t *b = s_new ("burst:rack1,30,5,3 noise:0.1", 999);
    kd_speed_t *c = s_new ("burst:rack2,30,5,3", 1);
    int on_a = 0, differ = 0, n = 0;
    for (double t = 0; t < 3000; t += 0.05, n++) {
        double fa = kd_speed_base (a, t);
        cr_assert (fa == 1.0 || fa == 3.0);
        cr_assert_float_eq (fa, kd_speed_base (b, t), 1e-12, "t=%g", t);
        on_a += fa > 1;
        differ += fa != kd_speed_base (c, t);
    }
    //  One 5 s burst per 30 s window: a sixth of the time.
    cr_expect_float_eq ((double) on_a / n, 5.0 / 30, 0.005);
    cr_expect_gt (differ, n / 10, "another ID should give another pattern");
    //  Each window holds exactly one burst, wholly inside it.
    double times [400];
    size_t k = kd_speed_changes (a, 3000, times, 400);
    cr_expect (k >= 150 && k <= 200, "%zu edges in 100 windows", k);
    for (size_t i = 0; i + 1 < k && i + 1 < 400; i += 2) {
        cr_expect_float_eq (times [i + 1] - times [i], 5.0, 1e-6, "burst %zu", i / 2);
        cr_expect_float_eq (kd_speed_base (a, times [i] + 0.01), 3.0, 1e-12);
        cr_expect_float_eq (kd_speed_base (a, times [i + 1] + 0.01), 1.0, 1e-12);
    }
    kd_speed_destroy (&a);
    kd_speed_destroy (&b);
    kd_speed_destroy (&c);
    //  A probability: about that share of windows has a burst.
    kd_speed_t *p = s_new ("burst:x,10,10,2,0.3", 1);
    int on = 0;
    n = 0;
    for (double t = 0.5; t < 10000; t += 10, n++)
        on += kd_speed_base (p, t) > 1;
    cr_expect_float_eq ((double) on / n, 0.3, 0.05);
    kd_speed_destroy (&p);
    cr_expect_float_eq (s_base ("burst:x,10,5,2,0", 3), 1.0, 1e-12);
}

Test (kd_speed, noise_is_log_normal_around_the_base)
{
    const double sigmas [] = { 0.6, 0.2 };
    for (size_t s = 0; s < 2; s++) {
        char spec [64];
        snprintf (spec, sizeof spec, "2 noise:%g", sigmas [s]);
        kd_speed_t *speed = s_new (spec, 42);
        enum { N = 40000 };
        static double logs [N];
        double sum = 0, sum2 = 0;
        for (int i = 0; i < N; i++) {
            double f = kd_speed_factor (speed, 1.0);
            cr_assert (f >= KD_SPEED_FLOOR && f <= KD_SPEED_CEILING);
            logs [i] = log (f);
            sum += logs [i];
            sum2 += logs [i] * logs [i];
        }
        double mean = sum / N;
        double sd = sqrt (sum2 / N - mean * mean);
        qsort (logs, N, sizeof logs [0], s_cmp_double);
        double median = exp (logs [N / 2]);
        cr_expect_float_eq (median, 2.0, 0.03, "sigma %g: median %g", sigmas [s], median);
        cr_expect_float_eq (sd, sigmas [s], 0.02 * sigmas [s] + 0.005, "sigma %g: log-sd %g",
                            sigmas [s], sd);
        //  The base is untouched by the noise.
        cr_expect_float_eq (kd_speed_base (speed, 1.0), 2.0, 1e-12);
        kd_speed_destroy (&speed);
    }
}

Test (kd_speed, noise_is_deterministic_per_seed)
{
    kd_speed_t *a = s_new ("noise:0.6", 5);
    kd_speed_t *b = s_new ("noise:0.6", 5);
    kd_speed_t *c = s_new ("noise:0.6", 6);
    int same_c = 0;
    for (int i = 0; i < 1000; i++) {
        double fa = kd_speed_factor (a, i * 0.1);
        cr_assert_eq (fa, kd_speed_factor (b, i * 0.1), "draw %d differs for one seed", i);
        same_c += fa == kd_speed_factor (c, i * 0.1);
    }
    cr_expect_lt (same_c, 5, "seeds 5 and 6 gave %d equal draws", same_c);
    kd_speed_destroy (&a);
    kd_speed_destroy (&b);
    kd_speed_destroy (&c);
}

Test (kd_speed, floor_and_ceiling_hold)
{
    kd_speed_t *speed = s_new ("0.001 0.001 noise:3", 1);
    for (int i = 0; i < 1000; i++)
        cr_assert_geq (kd_speed_factor (speed, i), KD_SPEED_FLOOR);
    kd_speed_destroy (&speed);
    speed = s_new ("1000 1000 noise:3", 1);
    for (int i = 0; i < 1000; i++)
        cr_assert_leq (kd_speed_factor (speed, i), KD_SPEED_CEILING);
    kd_speed_destroy (&speed);
}

Test (kd_speed, changes_of_segments_and_on_off)
{
    double times [32];
    kd_speed_t *speed = s_new ("seg:5-10=2,10-20=2.2,20-30=1,30-=1.1", 1);
    //  2 -> 2.2 and 1 -> 1.1 are 10 %: not changes.
    size_t n = kd_speed_changes (speed, 100, times, 32);
    cr_assert_eq (n, 2);
    cr_expect_float_eq (times [0], 5.0, 1e-9);
    cr_expect_float_eq (times [1], 20.0, 1e-9);
    //  Only times before t_end; the count is the full count even past max.
    cr_expect_eq (kd_speed_changes (speed, 10, times, 32), 1);
    cr_expect_eq (kd_speed_changes (speed, 100, times, 1), 2);
    cr_expect_eq (kd_speed_changes (speed, 100, NULL, 0), 2);
    cr_expect_eq (kd_speed_changes (speed, 0, times, 32), 0);
    kd_speed_destroy (&speed);

    //  A persistent straggler changes at time 0 and never again.
    speed = s_new ("4", 1);
    cr_assert_eq (kd_speed_changes (speed, 180, times, 32), 1);
    cr_expect_float_eq (times [0], 0.0, 1e-12);
    kd_speed_destroy (&speed);

    //  On/off: every edge.
    speed = s_new ("onoff:20,0.25,3,10", 1);
    n = kd_speed_changes (speed, 60, times, 32);
    cr_assert_eq (n, 6);
    double expect [] = { 10, 15, 30, 35, 50, 55 };
    for (size_t i = 0; i < 6; i++)
        cr_expect_float_eq (times [i], expect [i], 1e-9, "edge %zu at %g", i, times [i]);
    kd_speed_destroy (&speed);

    //  Noise is not a change.
    speed = s_new ("noise:0.6", 1);
    cr_expect_eq (kd_speed_changes (speed, 100, times, 32), 0);
    kd_speed_destroy (&speed);
}

Test (kd_speed, changes_of_a_ramp_are_crossings)
{
    //  1 -> 4 over [0, 30): crossings at factors 1.2, 1.44, 1.728, ...
    kd_speed_t *speed = s_new ("seg:0-30=1>4,30-=4", 1);
    double times [32];
    size_t n = kd_speed_changes (speed, 100, times, 32);
    //  log(4)/log(1.2) = 7.6: seven crossings.
    cr_assert_eq (n, 7, "%zu crossings", n);
    double level = 1;
    for (size_t i = 0; i < n; i++) {
        double t = times [i];
        double f = kd_speed_base (speed, t + 1e-6);
        cr_expect_gt (f / level, KD_SPEED_CHANGE, "crossing %zu at %g: %g after %g", i, t, f, level);
        cr_expect_lt (f / level, KD_SPEED_CHANGE * 1.01, "crossing %zu reported late", i);
        level = f;
        if (i > 0)
            cr_expect_gt (times [i], times [i - 1]);
    }
    kd_speed_destroy (&speed);
}

Test (kd_speed, malformed_specs_are_refused_with_a_message)
{
    struct {
        const char *spec;
        const char *needle;
    } cases [] = {
        { "x", "unknown term" },
        { "fast", "unknown term" },
        { "4x", "unexpected 'x'" },
        { "-2", "negative" },
        { "0", "greater than 0" },
        { "nan", "unknown term" },
        { "inf", "unknown term" },
        { "1e999", "out of range" },
        { "1x10", "unexpected 'x'" },
        { "2000", "at most" },
        { ".", "expected factor" },
        { "seg:", "expected segment start" },
        { "seg:10-5=2", "ends before it starts" },
        { "seg:5-5=2", "ends before it starts" },
        { "seg:0-10=2,5-20=3", "overlap" },
        { "seg:10-20=2,0-5=3", "overlap or go backwards" },
        { "seg:0-=2,10-20=3", "only the last segment" },
        { "seg:0-10=-2", "negative" },
        { "seg:0-10=nan", "expected factor" },
        { "seg:0-10", "expected '='" },
        { "seg:0-10=2,", "expected segment start" },
        { "seg:0-10=2;", "expected ','" },
        { "seg:0-=1>4", "ramp needs an end" },
        { "seg:0-10=1>0", "greater than 0" },
        { "seg:-5-10=2", "negative" },
        { "seg:0-2e6=2", "at most" },
        { "onoff:20,0.25", "expected ','" },
        { "onoff:20,1.5,3", "duty" },
        { "onoff:0,0.5,3", "period must be" },
        { "onoff:20,0.5,3,x", "expected phase" },
        { "burst:,30,5,3", "burst ID" },
        { "burst:a-b,30,5,3", "expected ','" },
        { "burst:a,30,40,3", "burst length" },
        { "burst:a,30,0,3", "burst length" },
        { "burst:a,30,5,3,1.5", "probability" },
        { "burst:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa,30,5,3", "burst ID" },
        { "noise:", "expected sigma" },
        { "noise:-1", "negative" },
        { "noise:9", "sigma must be at most" },
        { "noise:0.5 noise:0.1", "at most one noise" },
        { "noise:0.5x", "unexpected text" },
        { "2 3 4 5 6 7 8 9 2 3 4 5 6 7 8 9 2", "more than 16 terms" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        char err [256] = "";
        kd_speed_t *speed = kd_speed_new (cases [i].spec, 1, err, sizeof err);
        cr_expect_null (speed, "'%s' was accepted", cases [i].spec);
        kd_speed_destroy (&speed);
        cr_expect (strstr (err, cases [i].needle), "'%s': message '%s' lacks '%s'", cases [i].spec,
                   err, cases [i].needle);
        cr_expect (strncmp (err, "speed spec:", 11) == 0, "message '%s'", err);
    }
    //  Oversize: too long a text, and too many segments.
    size_t big = KD_SPEED_MAX_SPEC + 100;
    char *text = malloc (big + 1);
    cr_assert (text);
    memset (text, '1', big);
    text [big] = 0;
    char err [256];
    cr_expect_null (kd_speed_new (text, 1, err, sizeof err));
    cr_expect (strstr (err, "longer than"), "%s", err);
    size_t len = (size_t) snprintf (text, big, "seg:");
    for (int i = 0; i <= KD_SPEED_MAX_SEGMENTS && len + 16 < big; i++)
        len += (size_t) snprintf (text + len, big - len, "%s%d-%d=2", i ? "," : "", i, i + 1);
    cr_expect_null (kd_speed_new (text, 1, err, sizeof err));
    cr_expect (strstr (err, "more than"), "%s", err);
    free (text);
    //  A small error buffer truncates, never overflows.
    char tiny [8];
    cr_expect_null (kd_speed_new ("seg:10-5=2", 1, tiny, sizeof tiny));
    cr_expect_eq (strlen (tiny), sizeof tiny - 1);
}

Test (kd_speed, random_garbage_never_crashes)
{
    //  Random short strings over the grammar's alphabet: each is accepted
    //  or refused with a message, and anything accepted evaluates finitely.
    const char alphabet [] = "0123456789.-=>,: segonoffburstnoise:eE+x";
    unsigned seed = 12345;
    for (int i = 0; i < 20000; i++) {
        char spec [48];
        int len = rand_r (&seed) % 40;
        for (int j = 0; j < len; j++)
            spec [j] = alphabet [rand_r (&seed) % (sizeof alphabet - 1)];
        spec [len] = 0;
        char err [256] = "";
        kd_speed_t *speed = kd_speed_new (spec, (uint64_t) i, err, sizeof err);
        if (!speed) {
            cr_assert (*err, "'%s' refused without a message", spec);
            continue;
        }
        for (double t = 0; t < 50; t += 7.3) {
            double f = kd_speed_factor (speed, t);
            cr_assert (isfinite (f) && f > 0, "'%s' at %g gave %g", spec, t, f);
        }
        double times [8];
        kd_speed_changes (speed, 50, times, 8);
        kd_speed_destroy (&speed);
    }
}
