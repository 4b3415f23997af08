/*  Integration test of `kudus experiment FILE`: a tiny scenario runs end to
    end through `kudus local` and the real services, appends exactly one
    JSON line, and a rerun skips it (the sweep is resumable).

    The scenario gives rank 1 a persistent 2x speed factor, so the line's
    per-worker figures also show that `--speeds` reached the workers: rank
    1's emulated compute is twice rank 0's and its speed share is 1/3.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kd_testutil.h"

#define S_RUN_MS    120000      //  one tiny run, with margin for a loaded machine

static char *s_dir;             //  temporary directory of the test
static int s_port;              //  base port of the test

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

TestSuite (experiment, .init = setup, .fini = teardown, .timeout = 240);

//  Run kudus experiment with its output in log; the exit code, or -1.
static int
s_experiment (const char *scenario, const char *results, const char *log)
{
    char out [600], port [16];
    snprintf (out, sizeof out, "%s/runs", s_dir);
    snprintf (port, sizeof port, "%d", s_port);
    const char *argv [] = { "kudus", "experiment", scenario, "--results", results, "--out", out,
                            "--base-port", port, NULL };
    pid_t pid = kd_test_spawn (argv, log);
    int status = -1;
    bool exited = kd_test_wait (pid, S_RUN_MS, &status);
    kd_test_kill (pid);
    int rc = exited && WIFEXITED (status) ? WEXITSTATUS (status) : -1;
    return rc;
}

//  Lines in a text.
static int
s_lines (const char *text)
{
    int n = 0;
    for (const char *p = text; p && *p; p++)
        n += *p == '\n';
    return n;
}

//  The number after "key": in the per-worker object of a rank.
static double
s_worker_number (const char *line, int rank, const char *key)
{
    char needle [32];
    snprintf (needle, sizeof needle, "{\"rank\":%d,", rank);
    const char *p = strstr (line, needle);
    return p ? kd_test_json_number (p, key) : NAN;
}

Test (experiment, records_one_line_and_a_rerun_skips_it)
{
    char scenario [600], results [600], log [600];
    snprintf (scenario, sizeof scenario, "%s/tiny.json", s_dir);
    //  A results directory that does not exist yet: it is created.
    snprintf (results, sizeof results, "%s/results/tiny.jsonl", s_dir);
    FILE *f = fopen (scenario, "w");
    cr_assert (f);
    fprintf (f, "{\"name\": \"tiny\", \"workers\": 2, \"shards\": 1, \"model\": \"mlp\", \"hidden\": 16,\n"
                " \"epochs\": 0.05, \"delay_ms\": 5, \"cap_seconds\": 20, \"seeds\": [1],\n"
                " \"speeds\": {\"assign\": [{\"ranks\": [1], \"spec\": \"2\"}]},\n"
                " \"models\": [{\"name\": \"bsp\", \"lr\": 0.05}]}\n");
    fclose (f);

    snprintf (log, sizeof log, "%s/first.log", s_dir);
    int rc = s_experiment (scenario, results, log);
    if (rc != 0)
        kd_test_dump (log);
    cr_assert_eq (rc, 0, "kudus experiment exited %d", rc);
    char *first = kd_test_slurp (results);
    cr_assert (first, "no results file at %s", results);
    cr_expect_eq (s_lines (first), 1, "expected one line:\n%s", first);
    const char *fields [] = { "\"scenario\":\"tiny\"", "\"model\":\"bsp\"", "\"optimizer\":\"momentum\"",
                              "\"seed\":1,", "\"status\":\"ok\"", "\"time_to\":{\"0.85\":",
                              "\"final_accuracy\":", "\"curve\":[[", "\"per_worker\":[",
                              "\"iteration_check\":", "\"cpu_fraction\":", "\"speeds\":[\"\",\"2\"]" };
    for (size_t i = 0; i < sizeof fields / sizeof fields [0]; i++)
        cr_expect (strstr (first, fields [i]), "the line lacks %s:\n%s", fields [i], first);
    double acc = kd_test_json_number (first, "final_accuracy");
    cr_expect (acc > 0.1 && acc <= 1, "final accuracy %g", acc);
    //  Rank 1 ran at 2x: twice the emulated compute, a third of the speed.
    double em0 = s_worker_number (first, 0, "emulated_ms_mean");
    double em1 = s_worker_number (first, 1, "emulated_ms_mean");
    cr_expect (em1 > 1.6 * em0 && em1 < 2.4 * em0, "emulated ms: rank 0 %g, rank 1 %g", em0, em1);
    cr_expect_float_eq (s_worker_number (first, 1, "speed_share"), 1.0 / 3, 1e-3);
    char *text = kd_test_slurp (log);
    cr_expect (text && strstr (text, "iteration check: achieved"), "no iteration check printed");
    free (text);
    fprintf (stderr, "experiment: one run recorded, final accuracy %.4f, emulated ms %.1f / %.1f\n",
             acc, em0, em1);

    //  A rerun skips the recorded run and appends nothing.
    snprintf (log, sizeof log, "%s/second.log", s_dir);
    rc = s_experiment (scenario, results, log);
    if (rc != 0)
        kd_test_dump (log);
    cr_expect_eq (rc, 0, "rerun exited %d", rc);
    cr_expect_eq (kd_test_count (log, "recorded, skipped"), 1);
    cr_expect_eq (kd_test_count (log, "kudus local"), 0);
    char *second = kd_test_slurp (results);
    cr_expect (second && !strcmp (first, second), "the rerun changed the results file");
    free (second);
    free (first);
}

Test (experiment, malformed_scenario_exits_2_and_records_nothing)
{
    char scenario [600], results [600], log [600];
    snprintf (scenario, sizeof scenario, "%s/bad.json", s_dir);
    snprintf (results, sizeof results, "%s/bad.jsonl", s_dir);
    snprintf (log, sizeof log, "%s/bad.log", s_dir);
    FILE *f = fopen (scenario, "w");
    cr_assert (f);
    fprintf (f, "{\"name\": \"bad\", \"workers\": 2, \"models\": [{\"name\": \"fast\", \"lr\": 0.1}]}\n");
    fclose (f);
    cr_expect_eq (s_experiment (scenario, results, log), 2);
    cr_expect_eq (kd_test_count (log, "unknown consistency model 'fast'"), 1);
    struct stat st;
    cr_expect_neq (stat (results, &st), 0, "a results file was written");
}
