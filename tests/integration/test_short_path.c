/*  The short phase path (--phase-path short, protocol 9.3.1) on the real
    binaries: a chaos run with primaries, backups and workers killed (two
    replicas of each of two ranges) loses nothing: every row applied
    exactly once, replicas identical (the chaos checker).  How the
    scheduler holds and counts staged arrivals is tested in process
    (tests/inproc/test_staged_arrivals.c).
*/
#include <criterion/criterion.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kd_internal.h"
#include "kd_testutil.h"

static char *s_dir;
static int s_port;

static void
setup (void)
{
    s_dir = kd_test_tmpdir ();
    cr_assert (s_dir);
    s_port = kd_test_base_port ();
}

static void
teardown (void)
{
    free (s_dir);
}

TestSuite (short_path, .init = setup, .fini = teardown, .timeout = 240);

Test (short_path, a_chaos_run_on_the_short_path_loses_nothing, .timeout = 240)
{
    char port [16], out [1024], log [1100], report [1100];
    snprintf (port, sizeof port, "%d", s_port);
    snprintf (out, sizeof out, "%s/chaos", s_dir);
    snprintf (log, sizeof log, "%s/chaos.out", s_dir);
    snprintf (report, sizeof report, "%s/report.json", out);
    //  Kills only, every 5 s on average: seed 4 draws two primaries, two
    //  backups and two workers in 30 s.  20 s of settling leave a loaded
    //  machine time to restart and resync before the last kill's deadline
    //  and to commit after it.
    const char *argv [] = { "kudus", "chaos", "--seed", "4", "--seconds", "30", "--fault-gap", "5",
                            "--faults", "primary,backup,worker", "--settle-seconds", "20",
                            "--base-port", port, "--out", out, "--", "--phase-path", "short", NULL };
    int status = 0;
    char *text = kd_test_run_report (argv, log, report, 200000, &status);
    cr_assert (text, "kudus chaos did not finish, or wrote no report at %s", report);
    char why [8192];
    bool passed = kd_test_chaos_passed (text, 5, why, sizeof why);
    char cluster [1100];
    snprintf (cluster, sizeof cluster, "%s/cluster.log", out);
    //  A failure under load is rare and its scratch goes at teardown: what
    //  explains it goes to the test's output (the flake rounds keep it).
    //  Second HELLOs are where a stall starts.
    const char *explain [] = { " warn ", " error ", "event kind=", "registering again", "rejoin", NULL };
    if (!passed)
        kd_test_dump_lines (cluster, explain);
    cr_expect (passed, "%s", why);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "kudus chaos exits 0 on a pass");
    free (text);
    //  The cluster ran the short path: every shard was told so.
    cr_expect_geq (kd_test_count (cluster, "phase_path=short"), 4, "the shards registered on the short path");
    cr_expect_eq (kd_test_count (cluster, "phase_path=classic"), 0);
}
