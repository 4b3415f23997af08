/*  Poisoned and flooded training runs of `kudus local`, on the real
    binaries:

    - every 5th gradient of every worker has a NaN: none is applied, and
      the epoch still completes with its rows trained, under BSP and ASP;
    - a whole training run flooded from the side reaches the accuracy of
      the same run unflooded.

    A peer's poisoned and absurd requests, one by one, are tested in
    process (tests/inproc/test_shard_guards.c).  Each test prints a FIGURE
    line that the README's reliability table quotes.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kd_internal.h"
#include "kd_testutil.h"

#define S_PARAMS    7850        //  softmax parameters

static char *s_dir;
static int s_port;
static kd_test_procs_t s_procs;      //  started here, killed at teardown
static char s_log [256];

static void
setup (void)
{
    s_dir = kd_test_tmpdir ();
    cr_assert (s_dir);
    s_port = kd_test_base_port ();
    memset (&s_procs, 0, sizeof s_procs);
    snprintf (s_log, sizeof s_log, "%s/services.log", s_dir);
}

static void
teardown (void)
{
    kd_test_procs_kill (&s_procs);
    free (s_dir);
}

TestSuite (guards, .init = setup, .fini = teardown, .timeout = 400);

static pid_t
s_spawn (const char *const *argv)
{
    pid_t pid = kd_test_procs_spawn (&s_procs, argv, s_log);
    cr_assert (pid > 0);
    return pid;
}

//  --------------------------------------------------------------------------
//  Poisoned gradients from real workers

Test (guards, poisoned_gradients_of_real_workers_are_never_applied_and_their_rows_train, .timeout = 300)
{
    //  Every 5th gradient of every worker has a NaN: the client does not
    //  push it, the scheduler drops it and leases its rows again, and the
    //  run still completes its epoch with every row applied once.
    const char *models [] = { "bsp", "asp" };
    for (int m = 0; m < 2; m++) {
        char summary [256], base [16];
        snprintf (summary, sizeof summary, "%s/summary-nan-%s.json", s_dir, models [m]);
        snprintf (base, sizeof base, "%d", s_port);
        const char *argv [] = { "kudus", "local", "--model", "softmax", "--epochs", "1", "--workers", "4",
                                "--consistency", models [m], "--inject-nan-every", "5", "--seed", "7",
                                "--base-port", base, "--quiet", "true", "--summary", summary, NULL };
        pid_t pid = s_spawn (argv);
        int status = -1;
        bool exited = kd_test_wait (pid, 150000, &status);
        if (!exited || !WIFEXITED (status) || WEXITSTATUS (status) != 0)
            kd_test_dump (s_log);
        cr_assert (exited && WIFEXITED (status) && WEXITSTATUS (status) == 0, "kudus local failed");
        char *text = kd_test_slurp (summary);
        cr_assert (text, "no summary");
        double refused = kd_test_json_number (text, "refused_gradients");
        double epochs = kd_test_json_number (text, "epochs_completed");
        double accuracy = kd_test_json_number (text, "test_accuracy");
        printf ("FIGURE guards: %s, every 5th gradient poisoned: %.0f refused, never applied; "
                "epochs completed %.0f; accuracy %.4f\n", models [m], refused, epochs, accuracy);
        cr_expect_gt (refused, 100, "%s: %.0f refused", models [m], refused);
        cr_expect_eq (epochs, 1, "%s: the epoch did not complete", models [m]);
        //  One epoch of ASP lands anywhere in 0.74-0.80 with arrival order
        //  (runs seen: 0.7406, 0.7703, 0.7935), and lower when a busy
        //  machine makes its gradients staler (0.6966 beside three other
        //  suites); the check is that it trains (untrained: 0.10).
        cr_expect_gt (accuracy, m == 0 ? 0.75 : 0.60, "%s: accuracy %.4f", models [m], accuracy);
        cr_expect_geq (kd_test_count (s_log, "gradient not finite (NaN or Inf)"), 1);
        free (text);
    }
}

//  --------------------------------------------------------------------------
//  A training run flooded from the side

typedef struct {
    char endpoint [64];         //  the shard to flood
    uint64_t lo, count;         //  its key range
    int staged_attempts;        //  what the flood sent
    int pull_attempts;
} s_flood_t;

//  Flood a shard until told to stop, or 5,000 of each were sent: staged
//  gradients under a rank no worker has, and pulls of versions far ahead.
static void
s_flood_actor (zsock_t *pipe, void *args)
{
    s_flood_t *flood = (s_flood_t *) args;
    zsock_signal (pipe, 0);
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    zsock_set_linger (sock, 0);
    zsock_set_sndtimeo (sock, 100);
    zsock_connect (sock, "%s", flood->endpoint);
    float *g = (float *) calloc (flood->count, sizeof (float));
    g [0] = 1.0f;
    zpoller_t *poller = zpoller_new (pipe, NULL);
    uint64_t clock = 0;
    while (!zpoller_wait (poller, 10) && !zpoller_terminated (poller)) {
        for (int i = 0; i < 40 && flood->staged_attempts < 5000; i++) {
            kd_msg_t *req = kd_msg_new (KD_MSG_PUSH);
            kd_msg_set_uint (req, KD_F_RANK, 200);
            kd_msg_set_uint (req, KD_F_CLOCK, clock++);
            kd_msg_set_uint (req, KD_F_BASE, 0);
            kd_msg_set_uint (req, KD_F_LO, flood->lo);
            zframe_t *data = zframe_new (g, flood->count * sizeof (float));
            kd_msg_set_data (req, &data);
            if (kd_msg_send (&req, sock) == 0)
                flood->staged_attempts++;
            req = kd_msg_new (KD_MSG_PULL);
            kd_msg_set_uint (req, KD_F_VERSION, 50000 + clock);
            if (kd_msg_send (&req, sock) == 0)
                flood->pull_attempts++;
        }
        //  Whatever came back is read and thrown away.
        while (zsock_events (sock) & ZMQ_POLLIN) {
            zmsg_t *reply = zmsg_recv (sock);
            zmsg_destroy (&reply);
        }
    }
    zpoller_destroy (&poller);
    free (g);
    zsock_destroy (&sock);
}

//  Train softmax for one epoch under BSP with a fixed seed, with or
//  without a flood of shard 0; the test accuracy of the summary.
static double
s_train (bool flooded, s_flood_t *flood)
{
    char summary [256], base [16];
    snprintf (summary, sizeof summary, "%s/summary-%s.json", s_dir, flooded ? "flooded" : "clean");
    snprintf (base, sizeof base, "%d", s_port);
    const char *argv [] = { "kudus", "local", "--model", "softmax", "--epochs", "1", "--workers", "4",
                            "--shards", "2", "--consistency", "bsp", "--seed", "7", "--base-port", base,
                            "--quiet", "true", "--summary", summary, NULL };
    pid_t pid = s_spawn (argv);
    zactor_t *actor = NULL;
    if (flooded) {
        //  Shard 0 holds the first half of the model.
        uint64_t hi;
        kd_range_split (S_PARAMS, 2, 0, &flood->lo, &hi);
        flood->count = hi - flood->lo;
        snprintf (flood->endpoint, sizeof flood->endpoint, "tcp://127.0.0.1:%d", s_port + 100);
        actor = zactor_new (s_flood_actor, flood);
    }
    int status = -1;
    bool exited = kd_test_wait (pid, 150000, &status);
    zactor_destroy (&actor);
    if (!exited || !WIFEXITED (status) || WEXITSTATUS (status) != 0)
        kd_test_dump (s_log);
    cr_assert (exited && WIFEXITED (status) && WEXITSTATUS (status) == 0, "kudus local failed");
    char *text = kd_test_slurp (summary);
    cr_assert (text, "no summary %s", summary);
    double accuracy = kd_test_json_number (text, "test_accuracy");
    free (text);
    return accuracy;
}

Test (guards, a_flooded_training_run_reaches_the_unflooded_accuracy, .timeout = 400)
{
    s_flood_t flood = { .staged_attempts = 0 };
    double clean = s_train (false, NULL);
    double flooded = s_train (true, &flood);
    printf ("FIGURE guards: softmax, 1 epoch, BSP, seed 7: accuracy %.4f unflooded, %.4f under a flood "
            "of %d staged-gradient and %d parked-pull attempts\n",
            clean, flooded, flood.staged_attempts, flood.pull_attempts);
    cr_expect (isfinite (clean) && clean > 0.7, "the clean run did not train (%.4f)", clean);
    cr_expect_geq (flood.staged_attempts, 1000, "the flood barely ran");
    //  Two runs of one seed differ by the order in which arrivals are
    //  summed and, on a loaded machine, by leases a late worker hands
    //  back: 0.0037 apart in a flake round.  A flood that stalled or
    //  poisoned the run moves it far more.
    cr_expect (fabs (clean - flooded) <= 0.01, "accuracy %.4f flooded against %.4f", flooded, clean);
}
