/*  test_chaos: a 60 s seeded chaos soak on the real binaries, checked.

    `kudus chaos` runs a local cluster with two replicas of each of two
    ranges and four workers, kills workers, primaries, backups and the
    monitor, pauses processes and floods a ROUTER with garbage, on the
    schedule seed S_SEED draws; then its checker reads the history.  The
    soak must pass: every fault survived, no row lost or applied twice,
    replicas identical, nothing left behind, resources flat.

    Nothing here waits on a clock of its own: kudus chaos waits for events
    (training started, a range whole again) with generous ceilings, and
    the test only waits for it to exit.
*/
#include <criterion/criterion.h>
#include <sys/wait.h>
#include "kd_testutil.h"

#define S_SEED          "4"         //  a schedule with every kind of fault
#define S_SOAK_S        "60"
#define S_EXIT_CEILING  540000      //  ms: the soak, the settling, the final
                                    //  evaluation, on a busy machine

static char *s_dir;

static void
setup (void)
{
    s_dir = kd_test_tmpdir ();
    cr_assert (s_dir);
}

static void
teardown (void)
{
    free (s_dir);
}

TestSuite (chaos, .init = setup, .fini = teardown);

Test (chaos, a_sixty_second_soak_loses_nothing, .timeout = 600)
{
    char port [16], out [1024], log [1100], report [1100];
    snprintf (port, sizeof port, "%d", kd_test_base_port ());
    snprintf (out, sizeof out, "%s/soak", s_dir);
    snprintf (log, sizeof log, "%s/chaos.out", s_dir);
    snprintf (report, sizeof report, "%s/report.json", out);
    const char *argv [] = { "kudus", "chaos", "--seed", S_SEED, "--seconds", S_SOAK_S,
                            "--base-port", port, "--out", out, NULL };
    pid_t pid = kd_test_spawn (argv, log);
    cr_assert (pid > 0);
    int status = 0;
    bool exited = kd_test_wait (pid, S_EXIT_CEILING, &status);
    if (!exited)
        kd_test_kill (pid);
    kd_test_dump (log);
    cr_assert (exited, "kudus chaos did not finish");
    char *text = kd_test_slurp (report);
    cr_assert (text, "no report at %s", report);
    double faults = kd_test_json_number (text, "faults");
    cr_expect_geq (faults, 5, "the schedule fires faults");
    cr_expect_eq (kd_test_json_number (text, "survived"), faults, "every fault survived");
    cr_expect_eq (kd_test_json_number (text, "rows_lost"), 0);
    cr_expect_eq (kd_test_json_number (text, "rows_twice"), 0);
    cr_expect_eq (kd_test_json_number (text, "gradients_twice"), 0);
    cr_expect_geq (kd_test_json_number (text, "restarts"), 1, "the killed services came back");
    cr_expect (strstr (text, "\"pass\": true"), "the checker passed: %s", text);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "kudus chaos exits 0 on a pass");
    free (text);
}
