/*  test_kd_history_check: the checker of `kudus chaos` can fail.

    Hand-made histories of one range with two replicas and an epoch of 8
    rows in two leases of 4: a clean one passes; one where a gradient is
    applied at two versions reports it and the rows applied twice; one
    where a lease is never applied reports its rows lost; and replicas that
    differ, versions that go back, a fault after which nothing committed
    and a service whose RSS grows are each reported.
*/
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "kd_history_check.h"

static kd_history_check_t *s_check;
static int s_n_lines;           //  lines s_feed kept

static void
setup (void)
{
    s_check = kd_history_check_new ();
    cr_assert (s_check);
}

static void
teardown (void)
{
    kd_history_check_destroy (&s_check);
    cr_expect_null (s_check);
}

TestSuite (kd_history_check, .init = setup, .fini = teardown);

//  The checker streams: it takes lines in time order across sources.  The
//  tests write each source's lines in turn, so s_feed keeps them and
//  s_run feeds them sorted by t (stable: a source's order stays).
#define S_MAX_LINES 256
static struct {
    char source [16];           //  scheduler, chaos, shard-N
    char line [512];            //  the JSON line
    long long t;                //  its t
    int seq;                    //  order of writing
} s_lines [S_MAX_LINES];

static void
s_feed (const char *source, const char *line)
{
    cr_assert_lt (s_n_lines, S_MAX_LINES);
    const char *t = strstr (line, "\"t\":");
    cr_assert (t, "%s", line);
    snprintf (s_lines [s_n_lines].source, sizeof s_lines [0].source, "%s", source);
    snprintf (s_lines [s_n_lines].line, sizeof s_lines [0].line, "%s", line);
    s_lines [s_n_lines].t = atoll (t + 4);
    s_lines [s_n_lines].seq = s_n_lines;
    s_n_lines++;
}

static int
s_by_t (const void *a, const void *b)
{
    const __typeof__ (s_lines [0]) *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->seq - y->seq;
}

//  Feed what was written, in time order, and check it.
static size_t
s_run (void)
{
    qsort (s_lines, (size_t) s_n_lines, sizeof s_lines [0], s_by_t);
    for (int i = 0; i < s_n_lines; i++)
        cr_assert_eq (kd_history_check_line (s_check, s_lines [i].source, s_lines [i].line), 0,
                      "%s", s_lines [i].line);
    s_n_lines = 0;
    return kd_history_check_run (s_check);
}

//  The scheduler's side: two leases of epoch 0, one commit naming both,
//  and the end after one epoch.
static void
s_scheduler (void)
{
    s_feed ("scheduler", "{\"t\":1000,\"pid\":1,\"ev\":\"start\",\"rows\":8,\"batch\":4,\"epochs\":1,"
                         "\"ranges\":1,\"replicas\":2,\"consistency\":\"bsp\",\"resumed_from\":0}");
    s_feed ("scheduler", "{\"t\":1100,\"pid\":1,\"ev\":\"lease\",\"rank\":0,\"clock\":0,\"epoch\":0,\"pos\":0,\"count\":4}");
    s_feed ("scheduler", "{\"t\":1101,\"pid\":1,\"ev\":\"lease\",\"rank\":1,\"clock\":0,\"epoch\":0,\"pos\":4,\"count\":4}");
    s_feed ("scheduler", "{\"t\":2000,\"pid\":1,\"ev\":\"commit\",\"version\":1,\"direct\":false,"
                         "\"ranks\":[0,1],\"clocks\":[0,0],\"drop_ranks\":[],\"drop_clocks\":[]}");
    s_feed ("scheduler", "{\"t\":9000,\"pid\":1,\"ev\":\"end\",\"reason\":\"epochs\",\"epochs_completed\":1,"
                         "\"applied_rows\":8,\"rows\":8,\"updates\":1}");
}

//  Both replicas apply version 1 (what it names is given) and end alike.
static void
s_replicas (const char *ranks, const char *clocks, const char *crc_b)
{
    char line [512];
    const char *names [2] = { "shard-0", "shard-1" };
    for (int i = 0; i < 2; i++) {
        snprintf (line, sizeof line, "{\"t\":%d,\"pid\":%d,\"ev\":\"apply\",\"lo\":0,\"version\":1,"
                  "\"primary\":%s,\"missing\":0,\"ranks\":%s,\"clocks\":%s}", 2100 + i, 10 + i,
                  i ? "false" : "true", ranks, clocks);
        s_feed (names [i], line);
        snprintf (line, sizeof line, "{\"t\":%d,\"pid\":%d,\"ev\":\"final\",\"lo\":0,\"version\":1,"
                  "\"primary\":%s,\"params_crc\":\"%s\"}", 9100 + i, 10 + i, i ? "false" : "true",
                  i ? crc_b : "0badcafe");
        s_feed (names [i], line);
    }
}

//  True when some failure sentence contains needle.
static bool
s_reported (const char *needle)
{
    for (size_t i = 0; i < kd_history_check_failures (s_check); i++)
        if (strstr (kd_history_check_failure (s_check, i), needle))
            return true;
    return false;
}

Test (kd_history_check, clean_history_passes)
{
    s_scheduler ();
    s_replicas ("[0,1]", "[0,0]", "0badcafe");
    cr_expect_eq (s_run (), 0, "first failure: %s",
                  kd_history_check_failure (s_check, 0));
    cr_expect_eq (kd_history_check_rows_lost (s_check), 0);
    cr_expect_eq (kd_history_check_rows_twice (s_check), 0);
}

Test (kd_history_check, a_row_applied_twice_is_reported)
{
    s_scheduler ();
    s_replicas ("[0,1]", "[0,0]", "0badcafe");
    //  The primary applies rank 0's gradient again, at a later version.
    s_feed ("shard-0", "{\"t\":3000,\"pid\":10,\"ev\":\"apply\",\"lo\":0,\"version\":2,\"primary\":true,"
                       "\"missing\":0,\"ranks\":[0],\"clocks\":[0]}");
    cr_expect_gt (s_run (), 0);
    cr_expect_eq (kd_history_check_gradients_twice (s_check), 1);
    cr_expect_eq (kd_history_check_rows_twice (s_check), 4, "the lease's 4 rows");
    cr_expect (s_reported ("applied twice"));
}

Test (kd_history_check, a_lost_row_is_reported)
{
    s_scheduler ();
    //  Version 1 applied only rank 0's gradient: rank 1's lease is lost.
    s_replicas ("[0]", "[0]", "0badcafe");
    cr_expect_gt (s_run (), 0);
    cr_expect_eq (kd_history_check_rows_lost (s_check), 4);
    cr_expect (s_reported ("rows lost"));
}

Test (kd_history_check, replicas_that_differ_are_reported)
{
    s_scheduler ();
    s_replicas ("[0,1]", "[0,0]", "12345678");
    cr_expect_gt (s_run (), 0);
    cr_expect (s_reported ("replicas differ"));
}

Test (kd_history_check, a_version_that_goes_back_is_reported)
{
    s_scheduler ();
    s_replicas ("[0,1]", "[0,0]", "0badcafe");
    s_feed ("shard-1", "{\"t\":3000,\"pid\":11,\"ev\":\"apply\",\"lo\":0,\"version\":1,\"primary\":false,"
                       "\"missing\":0,\"ranks\":[0,1],\"clocks\":[0,0]}");
    cr_expect_gt (s_run (), 0);
    cr_expect (s_reported ("versions went back"));
}

Test (kd_history_check, a_fault_nothing_recovered_from_is_reported)
{
    s_scheduler ();
    s_replicas ("[0,1]", "[0,0]", "0badcafe");
    s_feed ("chaos", "{\"t\":500,\"pid\":2,\"ev\":\"begin\",\"seed\":3,\"soak_ms\":60000,\"command\":\"kudus chaos --seed 3\"}");
    s_feed ("chaos", "{\"t\":5000,\"pid\":2,\"ev\":\"fault\",\"index\":1,\"kind\":\"primary\",\"target\":\"shard-0\","
                     "\"child\":10,\"fired\":true,\"duration_ms\":0,\"note\":\"\"}");
    s_feed ("chaos", "{\"t\":9500,\"pid\":2,\"ev\":\"done\",\"code\":0}");
    cr_expect_gt (s_run (), 0);
    cr_expect (s_reported ("no commit after it"));
    cr_expect_eq (kd_history_check_faults (s_check), 1);
    cr_expect_eq (kd_history_check_survived (s_check), 0);
}

//  A chaos run of one lasting fault (its JSON fields) whose link would not
//  come back (the heal-failed event's), checked.
static void
s_unhealed (const char *fault, const char *heal)
{
    s_scheduler ();
    s_replicas ("[0,1]", "[0,0]", "0badcafe");
    s_feed ("chaos", "{\"t\":500,\"pid\":2,\"ev\":\"begin\",\"seed\":3,\"soak_ms\":60000,\"command\":\"kudus chaos --seed 3\"}");
    char line [512];
    snprintf (line, sizeof line, "{\"t\":1500,\"pid\":2,\"ev\":\"fault\",\"index\":1,\"child\":20,\"fired\":true,"
              "\"duration_ms\":300,\"note\":\"\",%s}", fault);
    s_feed ("chaos", line);
    snprintf (line, sizeof line, "{\"t\":3000,\"pid\":2,\"ev\":\"heal-failed\",\"tries\":20,%s}", heal);
    s_feed ("chaos", line);
    s_feed ("chaos", "{\"t\":9500,\"pid\":2,\"ev\":\"done\",\"code\":0}");
    cr_expect_gt (s_run (), 0);
}

//  A partition whose link would not come up again: the node stayed cut
//  off for the rest of the run, which the check must not pass.
Test (kd_history_check, a_partition_that_was_never_healed_is_reported)
{
    s_unhealed ("\"kind\":\"partition\",\"target\":\"worker-1\"", "\"node\":\"w1\"");
    cr_expect (s_reported ("w1's link would not come back after a partition"));
}

//  The same for a slowed link whose limit would not come off.
Test (kd_history_check, a_slowed_link_that_was_never_restored_is_reported)
{
    s_unhealed ("\"kind\":\"slow\",\"target\":\"shard-0\",\"rate_kbit\":4000", "\"node\":\"s0\",\"slow\":true");
    cr_expect (s_reported ("s0's link would not come back after a slowed link"));
}

Test (kd_history_check, a_growing_service_is_reported)
{
    s_feed ("scheduler", "{\"t\":0,\"pid\":1,\"ev\":\"start\",\"rows\":8,\"batch\":4,\"epochs\":1,"
                         "\"ranges\":1,\"replicas\":1,\"consistency\":\"bsp\",\"resumed_from\":0}");
    char line [256];
    //  A minute of samples, one a second: flat descriptors, RSS that
    //  climbs 200 MiB after warm-up.
    for (int s = 0; s < 60; s++) {
        snprintf (line, sizeof line, "{\"t\":%lld,\"pid\":2,\"ev\":\"sample\",\"name\":\"shard-0\",\"child\":10,"
                  "\"rss_kb\":%d,\"fds\":20}", (long long) s * 1000000, 100000 + (s > 15 ? s * 4000 : 0));
        s_feed ("chaos", line);
    }
    s_run ();
#if defined (__SANITIZE_ADDRESS__)
    //  Under AddressSanitizer the checker reports RSS growth without
    //  failing on it (its quarantine grows RSS whatever the code does).
    cr_expect_not (s_reported ("RSS (KiB) grew"));
#else
    cr_expect (s_reported ("RSS (KiB) grew"));
#endif
    cr_expect_not (s_reported ("descriptors grew"));
    //  Either way the report names the growth and whose it is.
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream (&text, &size);
    cr_assert (out);
    kd_history_check_print (s_check, out);
    fclose (out);
    cr_expect (text && strstr (text, "RSS +79.1% (shard-0 pid 10)"), "%s", text ? text : "(none)");
    free (text);
}

Test (kd_history_check, replicas_that_differ_at_a_crc_point_are_reported)
{
    s_scheduler ();
    s_replicas ("[0,1]", "[0,0]", "0badcafe");
    s_feed ("shard-0", "{\"t\":2100,\"pid\":10,\"ev\":\"crc\",\"lo\":0,\"version\":1,\"params_crc\":\"0badcafe\"}");
    s_feed ("shard-1", "{\"t\":2101,\"pid\":11,\"ev\":\"crc\",\"lo\":0,\"version\":1,\"params_crc\":\"0badcaff\"}");
    cr_expect_gt (s_run (), 0);
    cr_expect (s_reported ("replicas differ at version 1"));
    cr_expect_eq (kd_history_check_crc_points (s_check), 1);
}

//  A clean run of one range, two replicas, epochs of 8 rows in two leases
//  of 4, fed straight to a new checker in time order.  lose_epoch drops
//  rank 1's gradient from that epoch's commit; late_epoch has rank 0's
//  gradient of that epoch applied again at the end.  Returns the checker.
static kd_history_check_t *
s_long_run (int epochs, int lose_epoch, int late_epoch)
{
    kd_history_check_t *check = kd_history_check_new ();
    char line [512];
    long long t = 1000;
    snprintf (line, sizeof line, "{\"t\":%lld,\"pid\":1,\"ev\":\"start\",\"rows\":8,\"batch\":4,\"epochs\":%d,"
              "\"ranges\":1,\"replicas\":2,\"consistency\":\"bsp\",\"resumed_from\":0}", t++, epochs);
    cr_assert_eq (kd_history_check_line (check, "scheduler", line), 0);
    for (int i = 0; i < 2; i++) {
        snprintf (line, sizeof line, "{\"t\":%lld,\"pid\":%d,\"ev\":\"role\",\"lo\":0,\"primary\":%s,\"version\":0}",
                  t++, 10 + i, i ? "false" : "true");
        cr_assert_eq (kd_history_check_line (check, i ? "shard-1" : "shard-0", line), 0);
    }
    for (int e = 0; e < epochs; e++) {
        for (int rank = 0; rank < 2; rank++) {
            snprintf (line, sizeof line, "{\"t\":%lld,\"pid\":1,\"ev\":\"lease\",\"rank\":%d,\"clock\":%d,"
                      "\"epoch\":%d,\"pos\":%d,\"count\":4}", t++, rank, e, e, 4 * rank);
            cr_assert_eq (kd_history_check_line (check, "scheduler", line), 0);
        }
        const char *ranks = e == lose_epoch ? "[0]" : "[0,1]";
        char clocks [32];
        snprintf (clocks, sizeof clocks, e == lose_epoch ? "[%d]" : "[%d,%d]", e, e);
        for (int i = 0; i < 2; i++) {
            snprintf (line, sizeof line, "{\"t\":%lld,\"pid\":%d,\"ev\":\"crc\",\"lo\":0,\"version\":%d,"
                      "\"params_crc\":\"%08x\"}", t++, 10 + i, e + 1, e);
            cr_assert_eq (kd_history_check_line (check, i ? "shard-1" : "shard-0", line), 0);
            snprintf (line, sizeof line, "{\"t\":%lld,\"pid\":%d,\"ev\":\"apply\",\"lo\":0,\"version\":%d,"
                      "\"primary\":%s,\"missing\":0,\"ranks\":%s,\"clocks\":%s}", t++, 10 + i, e + 1,
                      i ? "false" : "true", ranks, clocks);
            cr_assert_eq (kd_history_check_line (check, i ? "shard-1" : "shard-0", line), 0);
        }
    }
    int version = epochs;
    if (late_epoch >= 0)
        for (int i = 0; i < 2; i++) {
            snprintf (line, sizeof line, "{\"t\":%lld,\"pid\":%d,\"ev\":\"apply\",\"lo\":0,\"version\":%d,"
                      "\"primary\":%s,\"missing\":0,\"ranks\":[0],\"clocks\":[%d]}", t++, 10 + i,
                      epochs + 1, i ? "false" : "true", late_epoch);
            cr_assert_eq (kd_history_check_line (check, i ? "shard-1" : "shard-0", line), 0);
            version = epochs + 1;
        }
    for (int i = 0; i < 2; i++) {
        snprintf (line, sizeof line, "{\"t\":%lld,\"pid\":%d,\"ev\":\"final\",\"lo\":0,\"version\":%d,"
                  "\"primary\":%s,\"params_crc\":\"0badcafe\"}", t++, 10 + i, version, i ? "false" : "true");
        cr_assert_eq (kd_history_check_line (check, i ? "shard-1" : "shard-0", line), 0);
    }
    snprintf (line, sizeof line, "{\"t\":%lld,\"pid\":1,\"ev\":\"end\",\"reason\":\"epochs\",\"epochs_completed\":%d,"
              "\"applied_rows\":0,\"rows\":8,\"updates\":%d}", t++, epochs, epochs);
    cr_assert_eq (kd_history_check_line (check, "scheduler", line), 0);
    kd_history_check_run (check);
    return check;
}

Test (kd_history_check, memory_does_not_grow_with_the_run)
{
    //  What the checker holds at once is the same for 2,000 epochs as for
    //  400 (both past the versions it keeps below every replica's):
    //  closed epochs, their leases and the versions every replica went
    //  past are let go.
    kd_history_check_t *a = s_long_run (400, -1, -1), *b = s_long_run (2000, -1, -1);
    cr_expect_eq (kd_history_check_failures (a), 0, "%s", kd_history_check_failure (a, 0));
    cr_expect_eq (kd_history_check_failures (b), 0, "%s", kd_history_check_failure (b, 0));
    cr_expect_eq (kd_history_check_crc_points (b), 2000);
    cr_expect_gt (kd_history_check_held_peak (a), 0);
    cr_expect_eq (kd_history_check_held_peak (b), kd_history_check_held_peak (a));
    kd_history_check_destroy (&a);
    kd_history_check_destroy (&b);
}

Test (kd_history_check, a_row_lost_early_in_a_long_run_is_reported)
{
    kd_history_check_t *c = s_long_run (1000, 5, -1);
    cr_expect_eq (kd_history_check_rows_lost (c), 4, "rank 1's lease of epoch 5");
    cr_expect_eq (kd_history_check_rows_twice (c), 0);
    kd_history_check_destroy (&c);
}

Test (kd_history_check, a_gradient_applied_again_after_its_epoch_closed_is_reported)
{
    //  Epoch 3 closed long ago, on every range: its rows, leases and
    //  gradients are forgotten, and a gradient of it applied again is one
    //  no open lease names.
    kd_history_check_t *c = s_long_run (1000, -1, 3);
    cr_expect_gt (kd_history_check_failures (c), 0);
    cr_expect_eq (kd_history_check_rows_lost (c), 0);
    bool named = false;
    for (size_t i = 0; i < kd_history_check_failures (c); i++)
        named = named || strstr (kd_history_check_failure (c, i), "rank 0 clock 3, which no open lease");
    cr_expect (named, "first failure: %s", kd_history_check_failure (c, 0));
    kd_history_check_destroy (&c);
}

Test (kd_history_check, a_gradient_applied_again_in_a_closed_epoch_counts_its_rows_twice)
{
    //  Two ranges; range 0 closed epoch 3 but range 1 has not (it lost a
    //  row there), so the lease is still known: range 0 applying it again
    //  counts its rows twice though its epoch's counts are gone.
    kd_history_check_t *c = kd_history_check_new ();
    char line [512];
    long long t = 1000;
    cr_assert_eq (kd_history_check_line (c, "scheduler", "{\"t\":1,\"pid\":1,\"ev\":\"start\",\"rows\":8,"
                  "\"batch\":4,\"epochs\":9,\"ranges\":2,\"replicas\":1,\"consistency\":\"bsp\"}"), 0);
    for (int e = 0; e < 8; e++) {
        for (int rank = 0; rank < 2; rank++) {
            snprintf (line, sizeof line, "{\"t\":%lld,\"pid\":1,\"ev\":\"lease\",\"rank\":%d,\"clock\":%d,"
                      "\"epoch\":%d,\"pos\":%d,\"count\":4}", t++, rank, e, e, 4 * rank);
            cr_assert_eq (kd_history_check_line (c, "scheduler", line), 0);
        }
        for (int lo = 0; lo < 2; lo++) {
            snprintf (line, sizeof line, "{\"t\":%lld,\"pid\":%d,\"ev\":\"apply\",\"lo\":%d,\"version\":%d,"
                      "\"primary\":true,\"missing\":0,\"ranks\":%s,\"clocks\":[%d,%d]}", t++, 10 + lo,
                      lo * 100, e + 1, lo && e == 3 ? "[0]" : "[0,1]", e, e);
            cr_assert_eq (kd_history_check_line (c, lo ? "shard-1" : "shard-0", line), 0);
        }
    }
    cr_assert_eq (kd_history_check_line (c, "shard-0", "{\"t\":5000,\"pid\":10,\"ev\":\"apply\",\"lo\":0,"
                  "\"version\":9,\"primary\":true,\"missing\":0,\"ranks\":[1],\"clocks\":[3]}"), 0);
    cr_assert_eq (kd_history_check_line (c, "scheduler", "{\"t\":6000,\"pid\":1,\"ev\":\"end\",\"reason\":"
                  "\"epochs\",\"epochs_completed\":8,\"applied_rows\":0,\"rows\":8,\"updates\":8}"), 0);
    kd_history_check_run (c);
    cr_expect_eq (kd_history_check_rows_twice (c), 4, "rank 1's lease of epoch 3, again on range 0");
    cr_expect_eq (kd_history_check_rows_lost (c), 4, "rank 1's lease of epoch 3, never on range 100");
    kd_history_check_destroy (&c);
}
