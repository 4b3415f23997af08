/*  In-process tests: the services as actors (kd_service), a whole cluster
    inside this test process, with no binary spawned.

    - a scheduler, two shards, a monitor and two workers train one epoch;
    - ALSP's groups form from the monitor's telemetry (--speed-source);
    - garbage sent to each service is answered with ERROR, and each still
      serves a valid request afterwards;
    - "$TERM" ends every service cleanly, as SIGTERM ends its process.
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include "kd_testutil.h"
#include "kd_inproc.h"
#include "kd_shard.h"

TestSuite (inproc, .timeout = 120);

//  One test's cluster: its endpoints, from a base port of its own, and
//  its scratch folder (kd_test_tmpdir's, removed when the test ends).
typedef struct {
    char sched [64], intake [64], pub [64], shard [2][64];
    char dir [200];
} s_endpoints_t;

static void
s_endpoints (s_endpoints_t *e)
{
    int port = kd_test_base_port ();
    char *dir = kd_test_tmpdir ();
    cr_assert (dir);
    snprintf (e->dir, sizeof e->dir, "%s", dir);
    free (dir);
    snprintf (e->sched, sizeof e->sched, "tcp://127.0.0.1:%d", port);
    snprintf (e->intake, sizeof e->intake, "tcp://127.0.0.1:%d", port + 1);
    snprintf (e->pub, sizeof e->pub, "tcp://127.0.0.1:%d", port + 2);
    for (int i = 0; i < 2; i++)
        snprintf (e->shard [i], sizeof e->shard [i], "tcp://127.0.0.1:%d", port + 100 + i);
}

//  Shards 0 and 1 of e's cluster, as actors.
static void
s_start_shards (const s_endpoints_t *e, kd_inproc_t shards [2])
{
    for (int i = 0; i < 2; i++) {
        char name [16];
        snprintf (name, sizeof name, "shard-%d", i);
        const char *a_shard [] = { "--bind", e->shard [i], "--scheduler", e->sched, "--name", name,
                                   "--log-level", "warn", NULL };
        shards [i] = kd_inproc_start (KD_SVC_SHARD, name, a_shard);
    }
}

//  Workers 0..n-1 of e's cluster, as actors.  With slowdowns, each batch
//  takes 5 ms times its rank's factor, so that speeds differ.
static void
s_start_workers (const s_endpoints_t *e, kd_inproc_t *workers, int n, const char *const *slowdowns)
{
    for (int r = 0; r < n; r++) {
        char name [32], rank [16];
        snprintf (name, sizeof name, "worker-%d", r);
        snprintf (rank, sizeof rank, "%d", r);
        const char *a_worker [] = { "--scheduler", e->sched, "--monitor", e->intake, "--name", name,
                                    "--rank", rank, "--log-level", "warn",
                                    //  Without slowdowns, the NULL ends the flags here.
                                    slowdowns ? "--delay-ms" : NULL, "5", "--slowdown",
                                    slowdowns ? slowdowns [r] : NULL, NULL };
        workers [r] = kd_inproc_start (KD_SVC_WORKER, name, a_worker);
    }
}

Test (inproc, a_cluster_of_actors_trains)
{
    s_endpoints_t e;
    s_endpoints (&e);
    char summary [256];
    snprintf (summary, sizeof summary, "%s/summary.json", e.dir);
    const char *a_sched [] = { "--bind", e.sched, "--shards", "2", "--min-workers", "2", "--epochs", "1",
                               "--summary", summary, "--log-level", "warn", NULL };
    kd_inproc_t sched = kd_inproc_start (KD_SVC_SCHEDULER, "scheduler", a_sched);
    kd_inproc_t shards [2];
    s_start_shards (&e, shards);
    const char *a_mon [] = { "--bind", e.intake, "--pub-bind", e.pub, "--scheduler", e.sched,
                             "--eval-interval", "0.5", "--log-level", "warn", NULL };
    kd_inproc_t mon = kd_inproc_start (KD_SVC_MONITOR, "monitor", a_mon);
    kd_inproc_t workers [2];
    s_start_workers (&e, workers, 2, NULL);
    //  The scheduler ends the run after one epoch and stops everyone: each
    //  actor ends by itself, not by the "$TERM" of kd_inproc_stop.
    cr_assert (kd_service_wait (sched.actor, 90000), "the run did not end in 90 s");
    const char *names [] = { "shard-0", "shard-1", "monitor", "worker-0", "worker-1" };
    kd_inproc_t *rest [] = { &shards [0], &shards [1], &mon, &workers [0], &workers [1] };
    for (int i = 0; i < 5; i++)
        cr_expect (kd_service_wait (rest [i]->actor, 15000), "%s did not end after STOP", names [i]);
    cr_expect_eq (kd_inproc_stop (&sched), 0);
    for (int i = 0; i < 5; i++)
        cr_expect_eq (kd_inproc_stop (rest [i]), 0, "%s exit code", names [i]);
    char *json = kd_test_slurp (summary);
    cr_assert (json, "no summary written");
    double accuracy = kd_test_json_number (json, "test_accuracy");
    cr_expect (accuracy > 0.6, "accuracy %f is not clearly better than chance", accuracy);
    cr_expect (kd_test_json_number (json, "workers") == 2);
    cr_expect (kd_test_json_number (json, "shards") == 2);
    cr_expect (kd_test_json_number (json, "epochs_completed") >= 1, "%s", json);
    printf ("FIGURE inproc: one epoch, 2 workers, 2 shards: accuracy %.4f, updates %.0f\n", accuracy,
            kd_test_json_number (json, "updates"));
    free (json);
}

//  --speed-source telemetry: the scheduler follows the monitor's stream
//  and groups ALSP's workers by the timings there: the controller takes
//  the reports, and leaves out the arrivals of every rank whose report is
//  fresh.  (Which group worker 3, six times slower, ends in is the
//  controller's rule, tested in test_kd_controller.)
Test (inproc, alsp_groups_from_the_monitors_telemetry)
{
    s_endpoints_t e;
    s_endpoints (&e);
    char summary [256];
    snprintf (summary, sizeof summary, "%s/summary.json", e.dir);
    const char *a_sched [] = { "--bind", e.sched, "--shards", "2", "--min-workers", "4",
                               "--consistency", "alsp", "--speed-source", "telemetry",
                               "--monitor-pub", e.pub, "--max-seconds", "8", "--epochs", "50",
                               "--summary", summary, "--log-level", "warn", NULL };
    kd_inproc_t sched = kd_inproc_start (KD_SVC_SCHEDULER, "scheduler", a_sched);
    kd_inproc_t shards [2];
    s_start_shards (&e, shards);
    const char *a_mon [] = { "--bind", e.intake, "--pub-bind", e.pub, "--scheduler", e.sched,
                             "--eval-interval", "1", "--publish-ms", "200", "--metrics-bind", "",
                             "--log-level", "warn", NULL };
    kd_inproc_t mon = kd_inproc_start (KD_SVC_MONITOR, "monitor", a_mon);
    kd_inproc_t workers [4];
    const char *slowdowns [] = { "1", "1", "1", "6" };
    s_start_workers (&e, workers, 4, slowdowns);
    cr_assert (kd_service_wait (sched.actor, 60000), "the run did not end in 60 s");
    kd_inproc_t *rest [] = { &shards [0], &shards [1], &mon, &workers [0], &workers [1], &workers [2],
                         &workers [3] };
    for (int i = 0; i < 7; i++)
        kd_service_wait (rest [i]->actor, 15000);
    cr_expect_eq (kd_inproc_stop (&sched), 0);
    for (int i = 0; i < 7; i++)
        kd_inproc_stop (rest [i]);
    char *json = kd_test_slurp (summary);
    cr_assert (json, "no summary written");
    cr_expect (strstr (json, "\"speed_source\": \"telemetry\""), "%s", json);
    double reports = kd_test_json_number (json, "speed_reports");
    double untimed = kd_test_json_number (json, "arrivals_untimed");
    double regroups = kd_test_json_number (json, "regroups");
    //  4 workers x 5 reports a second over most of 8 s, taken by the
    //  controller; while they were fresh, arrivals were not speed samples.
    cr_expect (reports >= 40, "only %.0f telemetry reports were used", reports);
    cr_expect (untimed >= 100, "only %.0f arrivals gave way to telemetry", untimed);
    cr_expect (regroups >= 1, "the groups never formed: %s", json);
    printf ("FIGURE inproc: ALSP from telemetry: %.0f reports taken, %.0f arrivals left to them, "
            "%.0f regroups\n", reports, untimed, regroups);
    free (json);
}

//  A scheduler (1 shard, 1 worker), a shard and a monitor.  These tests
//  count an answer to every malformed message, so the disconnection of a
//  peer that sends many (test_guards) is off.
static void
s_start_three (const s_endpoints_t *e, kd_inproc_t svc [3])
{
    const char *a_sched [] = { "--bind", e->sched, "--shards", "1", "--min-workers", "1",
                               "--max-malformed", "0", "--max-msg-bytes", "65536", "--log-level", "error",
                               NULL };
    const char *a_shard [] = { "--bind", e->shard [0], "--scheduler", e->sched, "--max-malformed", "0",
                               "--max-msg-bytes", "65536", "--log-level", "error", NULL };
    const char *a_mon [] = { "--bind", e->intake, "--pub-bind", e->pub, "--scheduler", e->sched,
                             "--max-malformed", "0", "--max-msg-bytes", "65536", "--log-level", "error",
                             NULL };
    svc [0] = kd_inproc_start (KD_SVC_SCHEDULER, "scheduler", a_sched);
    svc [1] = kd_inproc_start (KD_SVC_SHARD, "shard", a_shard);
    svc [2] = kd_inproc_start (KD_SVC_MONITOR, "monitor", a_mon);
}

Test (inproc, garbage_is_answered_and_valid_requests_still_work)
{
    s_endpoints_t ep;
    s_endpoints (&ep);
    kd_inproc_t svc [3];
    s_start_three (&ep, svc);
    cr_assert (kd_inproc_shard_serves (ep.shard [0]), "the shard never registered");
    const char *endpoints [] = { ep.sched, ep.shard [0], ep.intake };
    for (int e = 0; e < 3; e++) {
        zsock_t *client = kd_test_dealer (endpoints [e]);
        int expected = kd_test_send_garbage (client);
        int errors = kd_test_count_errors (client, expected);
        cr_expect (errors == expected, "%s answered %d of %d malformed messages with ERROR",
                   endpoints [e], errors, expected);
        //  An oversize frame makes ZeroMQ drop the connection; the client
        //  reconnects by itself and is served again.
        size_t big = 100000;
        char *huge = calloc (1, big);
        kd_test_send_raw (client, huge, big, NULL, 0);
        free (huge);
        kd_msg_t *req;
        kd_msg_type_t want;
        if (e == 0) {
            req = kd_msg_new (KD_MSG_HELLO);
            kd_msg_set_str (req, KD_F_ROLE, "worker");
            kd_msg_set_str (req, KD_F_NAME, "garbage-test-client");
            want = KD_MSG_WELCOME;
        }
        else
        if (e == 1) {
            req = kd_msg_new (KD_MSG_PULL);
            kd_msg_set_uint (req, KD_F_VERSION, 0);
            want = KD_MSG_PULL_OK;
        }
        else {
            req = kd_msg_new (KD_MSG_HEARTBEAT);
            want = KD_MSG_HEARTBEAT;
        }
        //  The request may be lost with the dropped connection: ask again
        //  until it is answered (the receive timeout is 3 s each).
        bool ok = false;
        kd_msg_t *reply = NULL;
        for (int attempt = 0; attempt < 5 && !ok; attempt++) {
            kd_msg_t *copy = kd_msg_dup (req);
            kd_msg_send (&copy, client);
            ok = kd_test_expect (client, want, &reply);
        }
        kd_msg_destroy (&req);
        cr_expect (ok, "%s did not answer a valid request after garbage", endpoints [e]);
        if (ok && e == 1) {
            size_t count = 0;
            kd_msg_data_floats (reply, &count);
            cr_expect (count == kd_model_param_count (KD_MODEL_SOFTMAX, 0));
        }
        kd_msg_destroy (&reply);
        zsock_destroy (&client);
    }
    //  A second monitor may not take over the stream and the evaluations.
    zsock_t *impostor = kd_test_dealer (ep.sched);
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "monitor");
    kd_msg_set_str (hello, KD_F_NAME, "impostor");
    kd_msg_send (&hello, impostor);
    kd_msg_t *refusal = NULL;
    bool refused = kd_test_expect (impostor, KD_MSG_ERROR, &refusal);
    cr_expect (refused && kd_msg_uint (refusal, KD_F_CODE) == KD_ERR_STATE,
               "a second monitor was not refused");
    kd_msg_destroy (&refusal);
    zsock_destroy (&impostor);
    //  Still running after all of it, and each ends cleanly on "$TERM".
    const char *names [] = { "scheduler", "shard", "monitor" };
    for (int i = 0; i < 3; i++)
        cr_expect (!kd_service_wait (svc [i].actor, 0), "the %s ended", names [i]);
    for (int i = 2; i >= 0; i--)
        cr_expect_eq (kd_inproc_stop (&svc [i]), 0, "the %s did not end cleanly on $TERM", names [i]);
}

//  A service whose set-up fails (a port already taken) is reported by
//  kd_service_new, with its exit code, instead of a thread left running.
Test (inproc, a_failed_set_up_is_reported)
{
    s_endpoints_t ep;
    s_endpoints (&ep);
    zsock_t *squatter = zsock_new (ZMQ_ROUTER);
    cr_assert (zsock_bind (squatter, "%s", ep.shard [0]) >= 0);
    const char *flags [] = { "shard", "--bind", ep.shard [0], "--scheduler", ep.sched,
                             "--log-level", "error", NULL };
    int rc = 0;
    kd_config_t *config = kd_config_from_args (KD_SVC_SHARD, "shard", "shard", 7, (char **) flags, &rc);
    cr_assert (config);
    kd_service_t *actor = kd_service_new (KD_SVC_SHARD, "shard", kd_shard_run, config, &rc);
    cr_expect_null (actor, "a shard started on a taken port");
    cr_expect_eq (rc, 1);
    kd_service_destroy (&actor);
    kd_config_destroy (&config);
    zsock_destroy (&squatter);
}
