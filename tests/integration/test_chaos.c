/*  test_chaos: a 60 s seeded chaos soak on the real binaries, checked.

    `kudus chaos` runs a local cluster with two replicas of each of two
    ranges and four workers, kills workers, primaries, backups and the
    monitor, pauses processes and floods a ROUTER with garbage, on the
    schedule seed S_SEED draws; then its checker reads the history.  The
    soak must pass: every fault survived, no row lost or applied twice,
    replicas identical, nothing left behind, resources flat.

    The second test is the regression of the loss seed 4 found: a worker
    killed while computing, whose first arrival after it came back
    completes a barrier, must not make the shards skip that commit.  It
    runs kudus local with a slow victim (so it computes, and arrives last),
    stops it until the scheduler declares it dead, kills it (kudus local
    restarts it), and checks the history with `kudus chaos check`.

    Nothing here waits on a clock of its own: kudus chaos waits for events
    (training started, a range whole again) with generous ceilings, and
    the tests wait for files to say what happened, with ceilings.
*/
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kd_testutil.h"

#define S_SEED          "4"         //  a schedule with every kind of fault
#define S_SOAK_S        "60"
#define S_EXIT_CEILING  540000      //  ms: the soak, the settling, the final
                                    //  evaluation, on a busy machine
#define S_EVENT_CEILING 180000      //  ms: for a history line to appear

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
    int status = 0;
    char *text = kd_test_run_report (argv, log, report, S_EXIT_CEILING, &status);
    cr_assert (text, "kudus chaos did not finish, or wrote no report at %s", report);
    char why [8192];
    cr_expect (kd_test_chaos_passed (text, 5, why, sizeof why), "%s", why);
    cr_expect_geq (kd_test_json_number (text, "restarts"), 1, "the killed services came back");
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "kudus chaos exits 0 on a pass");
    free (text);
}

//  The pid of service name from kudus local's history, once it started.
static int
s_spawned (const char *dir, const char *name)
{
    char path [1100], needle [64];
    snprintf (path, sizeof path, "%s/local.jsonl", dir);
    snprintf (needle, sizeof needle, "\"name\":\"%s\",\"child\":", name);
    char *text = kd_test_slurp (path);
    const char *at = text ? strstr (text, needle) : NULL;
    int pid = at ? atoi (at + strlen (needle)) : 0;
    free (text);
    return pid;
}

//  Wait until file holds needle at least count times; false at the ceiling.
static bool
s_wait_count (const char *file, const char *needle, int count)
{
    for (int waited = 0; waited < S_EVENT_CEILING; waited += 100) {
        if (kd_test_count (file, needle) >= count)
            return true;
        usleep (100000);
    }
    return false;
}

Test (chaos, a_dropped_orphan_does_not_swallow_the_commit_its_arrival_completes, .timeout = 600)
{
    char port [16], hist [1024], log [1100], sched [1100], summary [1100];
    snprintf (port, sizeof port, "%d", kd_test_base_port ());
    snprintf (hist, sizeof hist, "%s/run", s_dir);
    snprintf (log, sizeof log, "%s/local.out", s_dir);
    snprintf (sched, sizeof sched, "%s/scheduler.jsonl", hist);
    snprintf (summary, sizeof summary, "%s/summary.json", hist);
    cr_assert_eq (mkdir (hist, 0755), 0);
    //  worker-0 computes 5 times longer than the others: it is computing
    //  when it is killed, and last at every barrier after it comes back.
    const char *argv [] = { "kudus", "local", "--workers", "3", "--shards", "2", "--epochs", "1",
                            "--delay-ms", "10", "--straggler", "0:5", "--heartbeat-ms", "200",
                            "--liveness", "3", "--base-port", port, "--history-dir", hist,
                            "--summary", summary, NULL };
    pid_t local = kd_test_spawn (argv, log);
    cr_assert (local > 0);
    bool trained = s_wait_count (sched, "\"ev\":\"commit\"", 50);
    int victim = s_spawned (hist, "worker-0");
    //  Stopped mid-computation until the scheduler declares it dead, then
    //  killed: kudus local restarts it, and it rejoins after its death
    //  was handled (a kill alone races the restart against the detection).
    bool dead = false;
    if (trained && victim > 0) {
        kill (victim, SIGSTOP);
        dead = s_wait_count (log, "dead worker name=worker-0 ", 1);
        kill (victim, SIGKILL);
    }
    int status = 0;
    bool exited = kd_test_wait (local, S_EXIT_CEILING, &status);
    if (!exited)
        kd_test_kill (local);
    kd_test_dump (log);
    cr_assert (trained && victim > 0, "training did not start");
    cr_assert (dead, "worker-0 was not declared dead while stopped");
    cr_assert (exited && WIFEXITED (status) && WEXITSTATUS (status) == 0, "kudus local failed");
    //  The path under test ran: the orphaned clock was dropped at the death,
    //  at the rejoin and at the first arrival after it.
    cr_expect_geq (kd_test_count (sched, "\"ranks\":[],\"clocks\":[],\"drop_ranks\":[0]"), 3,
                   "fewer than 3 drop-only commits for worker-0's orphaned clock");
    const char *check [] = { "kudus", "chaos", "check", hist, NULL };
    pid_t checker = kd_test_spawn (check, log);
    cr_assert (kd_test_wait (checker, 60000, &status));
    char report [1100];
    snprintf (report, sizeof report, "%s/report.json", hist);
    char *text = kd_test_slurp (report);
    cr_assert (text, "no report");
    cr_expect_eq (kd_test_json_number (text, "rows_lost"), 0, "%s", text);
    cr_expect_eq (kd_test_json_number (text, "rows_twice"), 0, "%s", text);
    cr_expect (strstr (text, "\"pass\": true"), "%s", text);
    free (text);
}

//  kudus chaos's exit status and what it said, for a command refused
//  before it starts anything; env is a KUDUS_LINK_RATE_MBIT value or NULL.
static int
s_refusal (const char *const *argv, const char *env, const char *log)
{
    if (env)
        setenv ("KUDUS_LINK_RATE_MBIT", env, 1);
    pid_t pid = kd_test_spawn (argv, log);
    unsetenv ("KUDUS_LINK_RATE_MBIT");
    int status = 0;
    if (pid <= 0 || !kd_test_wait (pid, 30000, &status)) {
        kd_test_kill (pid);
        return -1;
    }
    return WIFEXITED (status) ? WEXITSTATUS (status) : -1;
}

//  Slowed links heal to no limit, so a rate limit passed through to kudus
//  local refuses --faults slow: by flag (both forms) or by variable, where
//  a later flag wins.  A rate of 0 is no limit and is accepted (the netns
//  suite runs it: it needs root).
Test (chaos, slow_faults_are_refused_on_rate_limited_links_only, .timeout = 60)
{
    char log [1100];
    snprintf (log, sizeof log, "%s/refused.out", s_dir);
    const char *flag [] = { "kudus", "chaos", "--netns", "true", "--faults", "slow", "--",
                            "--link-rate-mbit", "5", NULL };
    const char *eq [] = { "kudus", "chaos", "--netns", "true", "--faults", "slow", "--",
                          "--link-rate-mbit=20", NULL };
    const char *none [] = { "kudus", "chaos", "--netns", "true", "--faults", "slow", NULL };
    const char *later [] = { "kudus", "chaos", "--netns", "true", "--faults", "slow", "--",
                             "--link-rate-mbit", "0", "--link-rate-mbit", "5", NULL };
    cr_expect_eq (s_refusal (flag, NULL, log), 2, "--link-rate-mbit 5 was not refused");
    cr_expect_eq (s_refusal (eq, NULL, log), 2, "--link-rate-mbit=20 was not refused");
    cr_expect_eq (s_refusal (none, "5", log), 2, "KUDUS_LINK_RATE_MBIT=5 was not refused");
    cr_expect_eq (s_refusal (later, NULL, log), 2, "a later --link-rate-mbit 5 was not refused");
    cr_expect_eq (kd_test_count (log, "slow needs links without a rate limit"), 4,
                  "the refusals did not say why");
    kd_test_dump (log);
}
