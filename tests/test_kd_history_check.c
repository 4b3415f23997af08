/*  test_kd_history_check: the checker of `kudus chaos` can fail.

    Hand-made histories of one range with two replicas and an epoch of 8
    rows in two leases of 4: a clean one passes; one where a gradient is
    applied at two versions reports it and the rows applied twice; one
    where a lease is never applied reports its rows lost; and replicas that
    differ, versions that go back, a fault after which nothing committed
    and a service whose RSS grows are each reported.
*/
#include <criterion/criterion.h>
#include <string.h>
#include "kd_history_check.h"

static kd_history_check_t *s_check;

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

static void
s_feed (const char *source, const char *line)
{
    cr_assert_eq (kd_history_check_line (s_check, source, line), 0, "%s", line);
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
    cr_expect_eq (kd_history_check_run (s_check), 0, "first failure: %s",
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
    cr_expect_gt (kd_history_check_run (s_check), 0);
    cr_expect_eq (kd_history_check_gradients_twice (s_check), 1);
    cr_expect_eq (kd_history_check_rows_twice (s_check), 4, "the lease's 4 rows");
    cr_expect (s_reported ("applied twice"));
}

Test (kd_history_check, a_lost_row_is_reported)
{
    s_scheduler ();
    //  Version 1 applied only rank 0's gradient: rank 1's lease is lost.
    s_replicas ("[0]", "[0]", "0badcafe");
    cr_expect_gt (kd_history_check_run (s_check), 0);
    cr_expect_eq (kd_history_check_rows_lost (s_check), 4);
    cr_expect (s_reported ("rows lost"));
}

Test (kd_history_check, replicas_that_differ_are_reported)
{
    s_scheduler ();
    s_replicas ("[0,1]", "[0,0]", "12345678");
    cr_expect_gt (kd_history_check_run (s_check), 0);
    cr_expect (s_reported ("replicas differ"));
}

Test (kd_history_check, a_version_that_goes_back_is_reported)
{
    s_scheduler ();
    s_replicas ("[0,1]", "[0,0]", "0badcafe");
    s_feed ("shard-1", "{\"t\":3000,\"pid\":11,\"ev\":\"apply\",\"lo\":0,\"version\":1,\"primary\":false,"
                       "\"missing\":0,\"ranks\":[0,1],\"clocks\":[0,0]}");
    cr_expect_gt (kd_history_check_run (s_check), 0);
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
    cr_expect_gt (kd_history_check_run (s_check), 0);
    cr_expect (s_reported ("no commit after it"));
    cr_expect_eq (kd_history_check_faults (s_check), 1);
    cr_expect_eq (kd_history_check_survived (s_check), 0);
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
    kd_history_check_run (s_check);
    cr_expect (s_reported ("RSS (KiB) grew"));
    cr_expect_not (s_reported ("descriptors grew"));
}
