/*  Integration tests: the smoke versions of `kudus bench`.

    Each benchmark runs with tiny sizes, worker counts and iterations
    against the real binaries, with --json.  A test checks that the command
    exits 0 and that every line it prints on stdout is one JSON object with
    the documented keys and sane values.  No speed is asserted: these are
    benchmarks, and the machine is shared.
*/
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <msgpack.h>
#include "kd_internal.h"
#include "kd_spawn.h"
#include "kd_testutil.h"

#define S_TIMEOUT_MS    180000      //  a smoke run must end by then

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

TestSuite (bench, .init = setup, .fini = teardown, .timeout = 220);

//  Run `kudus bench ARGS...` with stdout to out_path and stderr to
//  err_path; returns its exit status, or -1 if it did not exit in time.
static int
s_run (const char *const *args, const char *out_path, const char *err_path)
{
    const char *argv [32] = { kd_test_bin ("kudus"), "bench" };
    int n = 2;
    for (int i = 0; args [i] && n < 31; i++)
        argv [n++] = args [i];
    argv [n] = NULL;
    kd_spawn_t how = KD_SPAWN_INIT;
    how.argv = argv;
    how.out_file = out_path;
    how.err_file = err_path;
    pid_t pid = kd_spawn (&how);
    cr_assert (pid >= 0);
    int status = 0;
    if (!kd_test_wait (pid, S_TIMEOUT_MS, &status)) {
        kd_test_kill (pid);
        return -1;
    }
    return WIFEXITED (status) ? WEXITSTATUS (status) : -1;
}

//  Print a file, to explain a failure.
static void
s_dump (const char *path)
{
    char *text = kd_test_slurp (path);
    if (text) {
        fprintf (stderr, "----- %s -----\n%s\n", path, text);
        free (text);
    }
}

//  Keys whose value may be negative: a sum of differences of medians.
static const char *const s_signed [] = { "split_sum_us", NULL };

//  True when a value in line is negative and its key is not in s_signed.
static bool
s_has_negative (const char *line)
{
    for (const char *at = strstr (line, ":-"); at; at = strstr (at + 2, ":-")) {
        //  The key is the quoted string just before the colon.
        const char *close = at - 1, *open = close;
        while (open > line && open [-1] != '"')
            open--;
        bool allowed = false;
        for (int i = 0; s_signed [i] && *close == '"'; i++)
            allowed |= (size_t) (close - open) == strlen (s_signed [i])
                     && !strncmp (open, s_signed [i], (size_t) (close - open));
        if (!allowed)
            return true;
    }
    return false;
}

//  Check every line of out_path: a JSON object of the named benchmark
//  holding every key in keys (NULL-terminated) as a number, positive
//  unless listed in zero_ok.  Returns the number of lines.
static int
s_check_lines (const char *out_path, const char *bench, const char *const *keys,
               const char *const *zero_ok)
{
    char *text = kd_test_slurp (out_path);
    cr_assert (text, "no output at %s", out_path);
    int lines = 0;
    char want [64];
    snprintf (want, sizeof want, "{\"bench\":\"%s\"", bench);
    char *save = NULL;
    for (char *line = strtok_r (text, "\n", &save); line; line = strtok_r (NULL, "\n", &save)) {
        lines++;
        size_t len = strlen (line);
        cr_expect (len > 2 && !strncmp (line, want, strlen (want)) && line [len - 1] == '}',
                   "line %d is not a %s object: %s", lines, bench, line);
        cr_expect (!strstr (line, ":nan") && !strstr (line, ":inf") && !s_has_negative (line),
                   "line %d has a value that is not a finite non-negative number: %s", lines, line);
        for (int k = 0; keys [k]; k++) {
            double v = kd_test_json_number (line, keys [k]);
            bool may_be_zero = false;
            for (int z = 0; zero_ok && zero_ok [z]; z++)
                may_be_zero |= !strcmp (zero_ok [z], keys [k]);
            cr_expect (isfinite (v) && (may_be_zero ? v >= 0 : v > 0),
                       "line %d: key %s is %g: %s", lines, keys [k], v, line);
        }
    }
    free (text);
    return lines;
}

Test (bench, pushpull_json_smoke)
{
    char out [256], err [256], port [16];
    snprintf (out, sizeof out, "%s/pushpull.json", s_dir);
    snprintf (err, sizeof err, "%s/pushpull.err", s_dir);
    snprintf (port, sizeof port, "%d", s_port);
    const char *args [] = { "pushpull", "--json", "--sizes", "4K,64K", "--shards", "1,2",
                            "--inflight", "1,2", "--dtypes", "fp32,fp16", "--repeat", "1",
                            "--run-seconds", "0.05", "--base-port", port, NULL };
    int rc = s_run (args, out, err);
    if (rc != 0)
        s_dump (err);
    cr_assert_eq (rc, 0, "kudus bench pushpull exited %d", rc);
    const char *keys [] = { "size_bytes", "shards", "inflight", "push_gbps", "pull_gbps",
                            "pushpull_gbps", "zmq_echo_gbps", "memcpy_gbps", "ratio_vs_zmq",
                            "ratio_vs_memcpy", "pushpull_us", "zmq_echo_us", "rtt_ratio",
                            "repeat", "shard_rss_kib", "echo_rss_kib", "client_rss_kib",
                            "ratio_vs_fp32", "shard_cpu_us_op", "echo_cpu_us_op", "client_cpu_us_op",
                            "client_echo_cpu_us_op", NULL };
    cr_expect_eq (s_check_lines (out, "pushpull", keys, NULL), 16,
                  "2 sizes x 2 shard counts x 2 in-flight depths x 2 dtypes");
    char *text = kd_test_slurp (out);
    cr_expect (text && strstr (text, "\"dtype\":\"fp16\"") && strstr (text, "\"dtype\":\"fp32\""),
               "rows do not name their dtype: %s", text ? text : "(none)");
    //  Shared memory is timed for fp32 through one shard, and is null elsewhere.
    int shm_rows = 0;
    char *save = NULL;
    for (char *line = text ? strtok_r (text, "\n", &save) : NULL; line; line = strtok_r (NULL, "\n", &save))
        if (strstr (line, "\"shards\":1,") && strstr (line, "\"dtype\":\"fp32\"")
        &&  strstr (line, "\"size_bytes\":65536,")) {
            cr_expect_gt (kd_test_json_number (line, "shm_pushpull_gbps"), 0, "%s", line);
            cr_expect_gt (kd_test_json_number (line, "shm_ratio_vs_zmq"), 0, "%s", line);
            shm_rows++;
        }
        else
            cr_expect (strstr (line, "\"shm_pushpull_gbps\":null"), "%s", line);
    cr_expect_eq (shm_rows, 2, "64K (4K is under the client's threshold) x 2 in-flight depths through one shard in fp32");
    free (text);
    //  The staged echo runs only when asked for.
    text = kd_test_slurp (out);
    cr_expect (text && !strstr (text, "\"staged_echo_gbps\":0") && strstr (text, "\"staged_echo_gbps\":null"),
               "staged echo columns not null without --staged-echo: %s", text ? text : "(none)");
    free (text);
}

//  --staged-echo: a third ceiling, an echo that keeps pushes and answers
//  pulls from a fixed buffer, in every fp32 row and for every shard.
Test (bench, pushpull_staged_echo_smoke)
{
    char out [256], err [256], port [16];
    snprintf (out, sizeof out, "%s/staged.json", s_dir);
    snprintf (err, sizeof err, "%s/staged.err", s_dir);
    snprintf (port, sizeof port, "%d", s_port);
    const char *args [] = { "pushpull", "--json", "--sizes", "64K", "--shards", "1,2",
                            "--inflight", "1,4", "--staged-echo", "true", "--repeat", "1",
                            "--run-seconds", "0.05", "--base-port", port, NULL };
    int rc = s_run (args, out, err);
    if (rc != 0)
        s_dump (err);
    cr_assert_eq (rc, 0, "kudus bench pushpull --staged-echo exited %d", rc);
    const char *keys [] = { "pushpull_gbps", "zmq_echo_gbps", "staged_echo_gbps", "staged_ratio_vs_zmq",
                            "ratio_vs_staged_echo", "shard_cpu_us_op", "echo_cpu_us_op", "staged_cpu_us_op",
                            "client_cpu_us_op", "client_echo_cpu_us_op", "client_staged_cpu_us_op", NULL };
    cr_expect_eq (s_check_lines (out, "pushpull", keys, NULL), 4, "2 shard counts x 2 in-flight depths");
    //  Its helper refuses a size it cannot serve, and says why.
    char endpoint [64];
    snprintf (endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", s_port + 1);
    const char *bad [] = { "zmq-staged-echo", endpoint, "0", NULL };
    cr_expect_eq (s_run (bad, out, err), 1);
    char *text = kd_test_slurp (err);
    cr_expect (text && strstr (text, "BYTES must be"), "%s", text ? text : "(none)");
    free (text);
    const char *missing [] = { "zmq-staged-echo", endpoint, NULL };
    cr_expect_eq (s_run (missing, out, err), 2);
}

//  Children of a process, from /proc (space-separated pids).
static int
s_children (pid_t pid, pid_t *out, int max)
{
    char path [96];
    snprintf (path, sizeof path, "/proc/%d/task/%d/children", (int) pid, (int) pid);
    char *text = kd_test_slurp (path);
    int n = 0;
    for (char *p = text; p && *p && n < max;) {
        char *end = NULL;
        long v = strtol (p, &end, 10);
        if (end == p)
            break;
        out [n++] = (pid_t) v;
        p = end;
    }
    free (text);
    return n;
}

//  A user's Ctrl-C: the bench says "interrupted", names what it completed,
//  exits 130 and leaves no child behind.
Test (bench, pushpull_interrupted_says_so_and_reaps_its_children)
{
    char out [256], err [256], port [16];
    snprintf (out, sizeof out, "%s/pushpull.out", s_dir);
    snprintf (err, sizeof err, "%s/pushpull.err", s_dir);
    snprintf (port, sizeof port, "%d", s_port);
    const char *argv [] = { kd_test_bin ("kudus"), "bench", "pushpull", "--sizes", "4K,64K,1M",
                            "--shards", "1,2", "--inflight", "1,4", "--repeat", "30",
                            "--base-port", port, NULL };
    kd_spawn_t how = KD_SPAWN_INIT;
    how.argv = argv;
    how.out_file = out;
    how.err_file = err;
    pid_t pid = kd_spawn (&how);
    cr_assert (pid >= 0);
    //  Let it start its cluster and time some runs.
    pid_t kids [64];
    int n_kids = 0;
    for (int i = 0; i < 50 && n_kids < 3; i++) {
        zclock_sleep (100);
        n_kids = s_children (pid, kids, 64);
    }
    zclock_sleep (1500);
    n_kids = s_children (pid, kids, 64);
    cr_assert_geq (n_kids, 3, "the bench started %d processes", n_kids);
    kill (pid, SIGINT);
    int status = -1;
    bool exited = kd_test_wait (pid, 30000, &status);
    if (!exited)
        kd_test_kill (pid);
    cr_assert (exited, "the bench did not stop on SIGINT");
    char *text = kd_test_slurp (err);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 130, "exit status 0x%x: %s", status, text);
    cr_expect (text && strstr (text, "interrupted;") && strstr (text, "configurations completed"),
               "no interrupted message: %s", text ? text : "(none)");
    cr_expect (text && !strstr (text, "failed"), "an interruption read as a failure: %s", text);
    free (text);
    for (int i = 0; i < n_kids; i++)
        cr_expect (kill (kids [i], 0) != 0, "child %d outlived the bench", (int) kids [i]);
}

Test (bench, barrier_json_smoke)
{
    char out [256], err [256], port [16];
    snprintf (out, sizeof out, "%s/barrier.json", s_dir);
    snprintf (err, sizeof err, "%s/barrier.err", s_dir);
    snprintf (port, sizeof port, "%d", s_port);
    const char *args [] = { "barrier", "--json", "--workers", "4,16", "--consistency", "bsp,lsp",
                            "--fan-in", "0,3", "--phases", "3", "--repeat", "1", "--base-port", port, NULL };
    int rc = s_run (args, out, err);
    if (rc != 0)
        s_dump (err);
    cr_assert_eq (rc, 0, "kudus bench barrier exited %d", rc);
    const char *keys [] = { "workers", "quota", "phases_per_s", "release_p50_ms",
                            "release_p99_ms", "zmq_release_p50_ms", "zmq_release_p99_ms",
                            "ratio_vs_zmq", "sched_cpu_ms_per_phase", "sched_cpu_us_per_worker",
                            "controller_us_per_phase", "phases", "repeat", "fan_in",
                            "aggregators_cpu_ms_per_phase", "sched_rss_kib", "client_rss_kib", NULL };
    //  CPU time comes in clock ticks, so a few short phases may read 0; a
    //  flat configuration has no aggregators.
    const char *zero_ok [] = { "sched_cpu_ms_per_phase", "sched_cpu_us_per_worker", "fan_in",
                               "aggregators_cpu_ms_per_phase", NULL };
    cr_expect_eq (s_check_lines (out, "barrier", keys, zero_ok), 8, "2 models x 2 worker counts x 2 fan-ins");
    char *text = kd_test_slurp (out);
    cr_expect (text && strstr (text, "\"consistency\":\"bsp\"") && strstr (text, "\"consistency\":\"lsp\""));
    //  The tree's rows: 16 workers behind 6 aggregators, whose RELAYs the
    //  scheduler counted, and whose memory is reported.
    cr_expect (text && strstr (text, "\"fan_in\":3,") && strstr (text, "\"fan_in\":0,"));
    int tree_rows = 0;
    for (const char *p = text; p && (p = strstr (p, "\"fan_in\":3,")); p++) {
        const char *line = p;
        cr_expect_gt (kd_test_json_number (line, "sched_relays_per_phase"), 0);
        cr_expect_gt (kd_test_json_number (line, "aggregator_rss_kib"), 0);
        tree_rows++;
    }
    cr_expect_eq (tree_rows, 4);
    free (text);
}

Test (bench, compute_json_smoke)
{
    char out [256], err [256];
    snprintf (out, sizeof out, "%s/compute.json", s_dir);
    snprintf (err, sizeof err, "%s/compute.err", s_dir);
    const char *args [] = { "compute", "--json", "--iterations", "5", "--repeat", "1",
                            "--models", "softmax,mlp", "--hidden", "16", NULL };
    int rc = s_run (args, out, err);
    if (rc != 0)
        s_dump (err);
    cr_assert_eq (rc, 0, "kudus bench compute exited %d", rc);
    const char *keys [] = { "batch", "threads", "kudus_samples_per_s", "blas_samples_per_s",
                            "ratio_vs_blas", "repeat", NULL };
    const char *zero_ok [] = { "hidden", NULL };
    cr_expect_eq (s_check_lines (out, "compute", keys, zero_ok), 2);
}

Test (bench, phase_json_smoke)
{
    char out [256], err [256], port [16];
    snprintf (out, sizeof out, "%s/phase.json", s_dir);
    snprintf (err, sizeof err, "%s/phase.err", s_dir);
    snprintf (port, sizeof port, "%d", s_port);
    const char *args [] = { "phase", "--json", "--phase-workers", "2", "--phase-delay-ms", "5",
                            "--phase-seconds", "3", "--phase-eval", "off,on", "--hidden", "16",
                            "--phase-path", "classic,short", "--repeat", "1", "--base-port", port, NULL };
    int rc = s_run (args, out, err);
    if (rc != 0)
        s_dump (err);
    cr_assert_eq (rc, 0, "kudus bench phase exited %d", rc);
    const char *keys [] = { "workers", "delay_ms", "phase_ms", "compute_ms", "push_ms", "barrier_ms",
                            "pull_ms", "other_ms", "ratio_vs_compute", NULL };
    const char *zero_ok [] = { "barrier_ms", "other_ms", NULL };
    cr_expect_eq (s_check_lines (out, "phase", keys, zero_ok), 4, "evaluation off and on, each path");
    //  A phase holds at least its compute, and the emulated 5 ms is in it.
    char *text = kd_test_slurp (out);
    cr_assert (text);
    double compute = kd_test_json_number (text, "compute_ms");
    double ratio = kd_test_json_number (text, "ratio_vs_compute");
    cr_expect (compute >= 4.5, "compute %g ms under the emulated 5 ms", compute);
    cr_expect (ratio >= 0.9, "a phase of %g times its compute", ratio);
    cr_expect (strstr (text, "\"evaluation\":\"off\"") && strstr (text, "\"evaluation\":\"on\""));
    cr_expect (strstr (text, "\"phase_path\":\"classic\"") && strstr (text, "\"phase_path\":\"short\""));
    free (text);
}

Test (bench, sparse_json_smoke)
{
    char out [256], err [256], port [16];
    snprintf (out, sizeof out, "%s/sparse.json", s_dir);
    snprintf (err, sizeof err, "%s/sparse.err", s_dir);
    snprintf (port, sizeof port, "%d", s_port);
    const char *args [] = { "sparse", "--json", "--sparse-features", "20000,200000", "--sparse-rows", "5000",
                            "--sparse-seconds", "3", "--sparse-workers", "2", "--sparse-shards", "2",
                            "--per-row", "10", "--pull-keys", "1000", "--repeat", "1",
                            "--run-seconds", "0.05", "--base-port", port, NULL };
    int rc = s_run (args, out, err);
    if (rc != 0)
        s_dump (err);
    cr_assert_eq (rc, 0, "kudus bench sparse exited %d", rc);
    char pull [256], bytes [256];
    snprintf (pull, sizeof pull, "%s/sparse-pull.json", s_dir);
    snprintf (bytes, sizeof bytes, "%s/sparse-bytes.json", s_dir);
    //  One pull line, then one bytes line per feature count.
    char *text = kd_test_slurp (out);
    cr_assert (text);
    char *nl = strchr (text, '\n');
    cr_assert (nl, "no second line: %s", text);
    *nl = 0;
    FILE *f = fopen (pull, "w");
    fputs (text, f);
    fclose (f);
    f = fopen (bytes, "w");
    fputs (nl + 1, f);
    fclose (f);
    free (text);
    const char *pull_keys [] = { "keys", "model_keys", "keyed_pull_us", "dense_pull_us",
                                 "ratio_keyed_vs_dense", "keyed_wire_bytes", "delta_keys_pull_us",
                                 "ratio_delta_keys_vs_dense", "delta_keys_wire_bytes",
                                 "raw_dense_shape_us", "raw_keyed_shape_us", "decode_keyed_us",
                                 "decode_dense_us", "encode_keyed_us", "encode_dense_us", "lookup_us",
                                 "lookup_cold_us", NULL };
    cr_expect_eq (s_check_lines (pull, "sparse-pull", pull_keys, NULL), 1);
    //  As varint deltas the keys take fewer bytes than 8 a key.
    char *line = kd_test_slurp (pull);
    cr_assert (line);
    cr_expect_lt (kd_test_json_number (line, "delta_keys_wire_bytes"), kd_test_json_number (line, "keyed_wire_bytes"),
                  "%s", line);
    //  The split's sum may be negative on a loaded machine (the raw keys
    //  frame's cost is a difference of medians), but it is the sum of the
    //  fields it names, up to their rounding.
    double sum = kd_test_json_number (line, "split_sum_us");
    double parts = kd_test_json_number (line, "raw_keyed_shape_us") - kd_test_json_number (line, "raw_dense_shape_us")
                 + kd_test_json_number (line, "decode_keyed_us") - kd_test_json_number (line, "decode_dense_us")
                 + kd_test_json_number (line, "lookup_us")
                 + kd_test_json_number (line, "encode_keyed_us") - kd_test_json_number (line, "encode_dense_us");
    cr_expect (isfinite (sum) && fabs (sum - parts) < 0.25, "split_sum_us %g, its parts add to %g: %s",
               sum, parts, line);
    free (line);
    const char *bytes_keys [] = { "features", "rows", "iterations", "bytes_per_iteration",
                                  "dense_bytes_per_iteration", "ratio_vs_dense", "shard_peak_rss_kib",
                                  "test_auc", "planted_test_auc", "planted_seen_test_auc", "test_unseen_share",
                                  NULL };
    cr_expect_eq (s_check_lines (bytes, "sparse-bytes", bytes_keys, NULL), 2);
    //  Keyed traffic does not grow with the model: 10x the features, far
    //  less than 10x the bytes (the batch's distinct keys grow a little).
    text = kd_test_slurp (bytes);
    nl = text ? strchr (text, '\n') : NULL;
    cr_assert (nl);
    double small = kd_test_json_number (text, "bytes_per_iteration");
    double large = kd_test_json_number (nl + 1, "bytes_per_iteration");
    cr_expect (large < 2 * small, "bytes per iteration %g at 20,000 features, %g at 200,000", small, large);
    //  The model learned something, and knowing only the features that
    //  training showed cannot beat knowing them all.
    double auc = kd_test_json_number (text, "test_auc");
    double planted = kd_test_json_number (text, "planted_test_auc");
    double seen = kd_test_json_number (text, "planted_seen_test_auc");
    double unseen = kd_test_json_number (text, "test_unseen_share");
    cr_expect (auc > 0.55 && auc <= planted + 0.02, "test AUC %g, the planted model's %g", auc, planted);
    cr_expect (seen > 0.5 && seen <= planted + 0.01, "planted AUC on seen features %g, on all %g", seen, planted);
    cr_expect (unseen > 0 && unseen < 1, "unseen share %g", unseen);
    free (text);
}

Test (bench, sparse_pslite_shape_smoke)
{
    char out [256], err [256], port [16];
    snprintf (out, sizeof out, "%s/pslite.json", s_dir);
    snprintf (err, sizeof err, "%s/pslite.err", s_dir);
    snprintf (port, sizeof port, "%d", s_port);
    const char *args [] = { "sparse", "--json", "--sparse-parts", "pslite", "--pull-keys", "20000",
                            "--repeat", "3", "--base-port", port, NULL };
    int rc = s_run (args, out, err);
    if (rc != 0)
        s_dump (err);
    cr_assert_eq (rc, 0, "kudus bench sparse --sparse-parts pslite exited %d", rc);
    const char *keys [] = { "keys", "first_push_ms", "first_pull_ms", "push_ms", "pull_ms",
                            "push_wire_bytes", NULL };
    cr_expect_eq (s_check_lines (out, "sparse-pslite", keys, NULL), 1);
    char *text = kd_test_slurp (out);
    cr_assert (text);
    cr_expect_eq (kd_test_json_number (text, "keys"), 20000);
    cr_expect_eq (kd_test_json_number (text, "push_wire_bytes"), 20000 * 12);
    free (text);
    const char *typo [] = { "sparse", "--sparse-parts", "pull,psltie", "--base-port", port, NULL };
    cr_expect_eq (s_run (typo, out, err), 2);
}

Test (bench, bad_settings_are_refused)
{
    char out [256], err [256];
    snprintf (out, sizeof out, "%s/bad.out", s_dir);
    snprintf (err, sizeof err, "%s/bad.err", s_dir);
    const char *unknown [] = { "nonsense", NULL };
    cr_expect_eq (s_run (unknown, out, err), 2);
    const char *none [] = { NULL };
    cr_expect_eq (s_run (none, out, err), 2);
    const char *bad_list [] = { "pushpull", "--sizes", "4K,x", NULL };
    cr_expect_eq (s_run (bad_list, out, err), 2);
    const char *odd_size [] = { "pushpull", "--sizes", "6", "--shards", "4", NULL };
    cr_expect_eq (s_run (odd_size, out, err), 2);
    const char *no_features [] = { "sparse", "--sparse-features", "0", NULL };
    cr_expect_eq (s_run (no_features, out, err), 2);
    const char *range [] = { "barrier", "--workers", "2000", NULL };
    cr_expect_eq (s_run (range, out, err), 2);
    const char *help [] = { "--help", NULL };
    cr_expect_eq (s_run (help, out, err), 0);
    char *text = kd_test_slurp (out);
    cr_expect (text && strstr (text, "--inflight") && strstr (text, "KUDUS_REPEAT"),
               "help lists the bench settings");
    free (text);
}
