/*  The barrier tree (kudus aggregate) on the real binaries.

    - Random arrival scripts under BSP, LSP and SSP get exactly the same
      decisions through aggregators as from the flat scheduler: every
      worker's RELEASEs (version, clock, group, lease rows) and every
      COMMIT the shard receives.  Each arrival is followed by a probe on
      the same connection, so the scheduler has handled it before the next
      one is sent: both runs feed the controller the same sequence.
    - Malformed and forbidden input, at the aggregator and in a RELAY, gets
      ERROR, and both keep serving.
    - Real workers train through aggregators (kudus local --fan-in), and a
      killed aggregator's workers come back through its replacement.
*/
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kd_internal.h"
#include "kd_bundle.h"
#include "kd_testutil.h"

#define S_N         8           //  fake workers
#define S_ROWS      60000       //  the training set they claim
#define S_LOG       (64 * 1024) //  bytes of decisions kept per worker

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

TestSuite (tree, .init = setup, .fini = teardown, .timeout = 240);

static pid_t
s_spawn (const char *const *argv)
{
    pid_t pid = kd_test_procs_spawn (&s_procs, argv, s_log);
    cr_assert (pid > 0);
    return pid;
}

//  An aggregator for the scheduler at s_port, bound at port.
static pid_t
s_aggregator (int port)
{
    char bind [64], sched [64];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", s_port);
    const char *argv [] = { "kudus", "aggregate", "--bind", bind, "--scheduler", sched, NULL };
    return s_spawn (argv);
}

//  --------------------------------------------------------------------------
//  A fake cluster: a real scheduler (and aggregators), a fake shard that
//  answers COMMITs, and S_N fake workers.  Every decision is logged as text.

typedef struct {
    zsock_t *shard;
    zsock_t *workers [S_N];
    bool pending [S_N];         //  holds a RELEASE it has not arrived for
    uint64_t clock [S_N], version [S_N], rows [S_N];
    bool probed [S_N];          //  its probe was answered
    char *log [S_N];            //  its RELEASEs
    char *commits;              //  the shard's COMMITs
} s_fake_t;

static void
s_append (char *log, const char *line)
{
    size_t used = strlen (log);
    cr_assert (used + strlen (line) + 1 < S_LOG, "decision log full");
    memcpy (log + used, line, strlen (line) + 1);
}

//  Handle one message for worker w.
static void
s_on_worker (s_fake_t *f, size_t w, kd_msg_t *msg)
{
    kd_msg_type_t type = kd_msg_type (msg);
    if (type == KD_MSG_RELEASE) {
        size_t n = 0;
        const uint64_t *rows = kd_msg_uints (msg, KD_F_ROWS, &n);
        uint64_t hash = 1469598103934665603ull;
        for (size_t i = 0; i < n; i++)
            hash = (hash ^ rows [i]) * 1099511628211ull;
        char line [256];
        snprintf (line, sizeof line, "v=%llu c=%llu g=%llu d=%llu tau=%llu min=%llu rows=%zu:%016llx\n",
                  (unsigned long long) kd_msg_uint (msg, KD_F_VERSION),
                  (unsigned long long) kd_msg_uint (msg, KD_F_CLOCK),
                  (unsigned long long) kd_msg_uint (msg, KD_F_GROUP),
                  (unsigned long long) kd_msg_uint (msg, KD_F_DROPPED),
                  (unsigned long long) kd_msg_uint (msg, KD_F_STALENESS),
                  (unsigned long long) kd_msg_uint (msg, KD_F_MIN_CLOCK), n, (unsigned long long) hash);
        s_append (f->log [w], line);
        cr_assert (!f->pending [w], "worker %zu released twice for one arrival", w);
        f->pending [w] = true;
        f->clock [w] = kd_msg_uint (msg, KD_F_CLOCK);
        f->version [w] = kd_msg_uint (msg, KD_F_VERSION);
        f->rows [w] = n;
    }
    else
    if (type == KD_MSG_ERROR && strstr (kd_msg_str (msg, KD_F_REASON), "command invalid"))
        f->probed [w] = true;
    else
    if (type == KD_MSG_ERROR || type == KD_MSG_STOP)
        cr_assert_fail ("worker %zu got %s: %s", w, kd_msg_type_name (type), kd_msg_str (msg, KD_F_REASON));
}

//  Answer the shard's COMMITs and log them.
static void
s_on_shard (s_fake_t *f, kd_msg_t *msg)
{
    if (kd_msg_type (msg) != KD_MSG_COMMIT)
        return;
    char line [1024];
    int at = snprintf (line, sizeof line, "v=%llu", (unsigned long long) kd_msg_uint (msg, KD_F_VERSION));
    kd_field_t fields [] = { KD_F_RANKS, KD_F_CLOCKS, KD_F_DROP_RANKS, KD_F_DROP_CLOCKS };
    for (size_t k = 0; k < 4; k++) {
        size_t n = 0;
        const uint64_t *v = kd_msg_uints (msg, fields [k], &n);
        at += snprintf (line + at, sizeof line - (size_t) at, " %s=", kd_msg_field_name (fields [k]));
        for (size_t i = 0; i < n && at < 900; i++)
            at += snprintf (line + at, sizeof line - (size_t) at, "%llu,", (unsigned long long) v [i]);
    }
    size_t n = 0;
    const double *weights = kd_msg_floats (msg, KD_F_WEIGHTS, &n);
    at += snprintf (line + at, sizeof line - (size_t) at, " weights=");
    for (size_t i = 0; i < n && at < 1000; i++)
        at += snprintf (line + at, sizeof line - (size_t) at, "%.9g,", weights [i]);
    snprintf (line + at, sizeof line - (size_t) at, "\n");
    s_append (f->commits, line);
    kd_msg_t *ok = kd_msg_new (KD_MSG_COMMIT_OK);
    kd_msg_set_uint (ok, KD_F_VERSION, kd_msg_uint (msg, KD_F_VERSION));
    kd_msg_send (&ok, f->shard);
}

//  Handle one message, if one comes within timeout_ms.  Returns false
//  when none came.
static bool
s_handle_one (s_fake_t *f, int timeout_ms)
{
    zpoller_t *poller = zpoller_new (f->shard, NULL);
    for (size_t w = 0; w < S_N; w++)
        zpoller_add (poller, f->workers [w]);
    void *which = zpoller_wait (poller, timeout_ms);
    zpoller_destroy (&poller);
    if (!which)
        return false;
    kd_msg_t *msg = NULL;
    cr_assert_eq (kd_msg_recv (which, &msg, NULL, NULL), 0);
    if (which == f->shard)
        s_on_shard (f, msg);
    for (size_t w = 0; w < S_N; w++)
        if (which == f->workers [w])
            s_on_worker (f, w, msg);
    kd_msg_destroy (&msg);
    return true;
}

//  Handle whatever arrives until it has been quiet for timeout_ms.
static void
s_pump (s_fake_t *f, int timeout_ms)
{
    while (s_handle_one (f, timeout_ms))
        ;
}

//  Handle everything until *flag is set, at most 5 s.
static void
s_wait_for (s_fake_t *f, size_t w, bool *flag)
{
    uint64_t deadline = kd_now_ms () + 5000;
    while (!*flag && kd_now_ms () < deadline)
        s_handle_one (f, 10);
    cr_assert (*flag, "worker %zu: nothing came in 5 s", w);
}

//  Start a scheduler for model with fan_in workers per aggregator (0: no
//  aggregators), and register everyone.
static void
s_fake_start (s_fake_t *f, const char *model, size_t fan_in)
{
    memset (f, 0, sizeof *f);
    char bind [64], n [16];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", s_port);
    snprintf (n, sizeof n, "%d", S_N);
    //  Decisions must replay exactly, so LSP releases by its quota: the
    //  adaptive barrier's decisions depend on when arrivals happen.
    const char *argv [] = { "kudus-scheduler", "--bind", bind, "--shards", "1", "--min-workers", n,
                            "--consistency", model, "--quota-ratio", "0.75", "--barrier", "quota",
                            "--staleness", "2",
                            "--epochs", "1000", "--heartbeat-ms", "60000", "--liveness", "100", NULL };
    s_spawn (argv);
    size_t aggs = fan_in ? (S_N + fan_in - 1) / fan_in : 0;
    for (size_t i = 0; i < aggs; i++)
        s_aggregator (s_port + 1 + (int) i);
    f->shard = kd_test_dealer (bind);
    f->commits = (char *) calloc (1, S_LOG);
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "shard");
    kd_msg_set_str (hello, KD_F_NAME, "fake-shard");
    kd_msg_set_str (hello, KD_F_ENDPOINT, "tcp://127.0.0.1:1");
    kd_msg_send (&hello, f->shard);
    for (size_t w = 0; w < S_N; w++) {
        char ep [64], name [32];
        snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", fan_in ? s_port + 1 + (int) (w / fan_in) : s_port);
        f->workers [w] = kd_test_dealer (ep);
        f->log [w] = (char *) calloc (1, S_LOG);
        snprintf (name, sizeof name, "fake-worker-%zu", w);
        hello = kd_msg_new (KD_MSG_HELLO);
        kd_msg_set_str (hello, KD_F_ROLE, "worker");
        kd_msg_set_str (hello, KD_F_NAME, name);
        //  Ask for rank w, so the two runs number workers alike.
        kd_msg_set_uint (hello, KD_F_RANK, w);
        kd_msg_set_uint (hello, KD_F_SAMPLES, S_ROWS);
        kd_msg_send (&hello, f->workers [w]);
    }
    for (size_t w = 0; w < S_N; w++)
        s_wait_for (f, w, &f->pending [w]);
}

static void
s_fake_stop (s_fake_t *f)
{
    zsock_destroy (&f->shard);
    for (size_t w = 0; w < S_N; w++) {
        zsock_destroy (&f->workers [w]);
        free (f->log [w]);
    }
    free (f->commits);
    kd_test_procs_kill (&s_procs);
}

//  Worker w arrives for its clock, and its probe proves the scheduler
//  handled the arrival.
static void
s_arrive (s_fake_t *f, size_t w)
{
    cr_assert (f->pending [w]);
    f->pending [w] = false;
    f->probed [w] = false;
    kd_msg_t *msg = kd_msg_new (KD_MSG_ARRIVE);
    kd_msg_set_uint (msg, KD_F_CLOCK, f->clock [w]);
    kd_msg_set_uint (msg, KD_F_BASE, f->version [w]);
    kd_msg_set_uint (msg, KD_F_SAMPLES, f->rows [w]);
    kd_msg_send (&msg, f->workers [w]);
    kd_msg_t *probe = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (probe, KD_F_VERSION, 0);
    kd_msg_send (&probe, f->workers [w]);
    s_wait_for (f, w, &f->probed [w]);
}

//  One run.  With script_in NULL, choose each arrival at random among the
//  workers holding a RELEASE (after letting the releases settle) and write
//  the choices to script_out; else replay script_in.  Decisions are copied
//  into logs (S_N worker logs, then the commits).
static void
s_run (const char *model, size_t fan_in, uint64_t seed, size_t arrivals, const size_t *script_in,
       size_t *script_out, char **logs)
{
    s_fake_t f;
    s_fake_start (&f, model, fan_in);
    for (size_t i = 0; i < arrivals; i++) {
        size_t w;
        if (script_in) {
            w = script_in [i];
            s_wait_for (&f, w, &f.pending [w]);
        }
        else {
            s_pump (&f, 15);
            size_t ready [S_N], n = 0;
            for (size_t k = 0; k < S_N; k++)
                if (f.pending [k])
                    ready [n++] = k;
            cr_assert (n > 0, "%s: no worker holds a RELEASE after %zu arrivals", model, i);
            w = ready [kd_splitmix64 (&seed) % n];
            script_out [i] = w;
        }
        s_arrive (&f, w);
    }
    s_pump (&f, 200);
    for (size_t w = 0; w < S_N; w++)
        logs [w] = strdup (f.log [w]);
    logs [S_N] = strdup (f.commits);
    s_fake_stop (&f);
}

Test (tree, decides_exactly_as_the_flat_scheduler)
{
    const char *models [] = { "bsp", "lsp", "ssp" };
    size_t script [160];
    for (size_t m = 0; m < 3; m++)
        for (uint64_t seed = 1; seed <= 2; seed++) {
            size_t arrivals = 120;
            char *flat [S_N + 1], *tree [S_N + 1];
            s_run (models [m], 0, seed * 7919 + m, arrivals, NULL, script, flat);
            s_run (models [m], 3, 0, arrivals, script, NULL, tree);
            size_t releases = 0, commits = 0;
            for (size_t k = 0; k <= S_N; k++) {
                cr_expect_str_eq (tree [k], flat [k], "%s seed %llu: %s %zu differs\nflat:\n%s\ntree:\n%s",
                                  models [m], (unsigned long long) seed, k < S_N ? "worker" : "shard", k,
                                  flat [k], tree [k]);
                for (const char *p = flat [k]; (p = strchr (p, '\n')); p++)
                    *(k < S_N ? &releases : &commits) += 1;
                free (flat [k]);
                free (tree [k]);
            }
            //  The runs did something: every arrival was released, and the
            //  synchronous models committed.
            cr_expect_geq (releases, arrivals);
            if (strcmp (models [m], "ssp"))
                cr_expect_gt (commits, 10, "%s: %zu commits", models [m], commits);
            printf ("FIGURE tree_equals_flat model=%s seed=%llu arrivals=%zu releases=%zu commits=%zu\n",
                    models [m], (unsigned long long) seed, arrivals, releases, commits);
            fflush (stdout);
        }
}

//  --------------------------------------------------------------------------
//  Bad input

//  Expect an ERROR whose reason holds needle.  Takes the message.
static void
s_expect_error (kd_msg_t *msg, const char *needle, const char *what)
{
    cr_assert (msg, "%s: no answer", what);
    cr_expect_eq (kd_msg_type (msg), KD_MSG_ERROR, "%s: got %s", what, kd_msg_type_name (kd_msg_type (msg)));
    cr_expect (strstr (kd_msg_str (msg, KD_F_REASON), needle), "%s: reason \"%s\" lacks \"%s\"", what,
               kd_msg_str (msg, KD_F_REASON), needle);
    kd_msg_destroy (&msg);
}

//  Send the scheduler a RELAY of one message from routing id "W1", and
//  return the single message the RELAY back holds (decoded), or NULL.
static kd_msg_t *
s_relay_one (zsock_t *sock, kd_msg_t **msg_p, const char *role)
{
    kd_bundle_t *bundle = kd_bundle_new ();
    zframe_t *id = zframe_new ("W1", 2);
    kd_msg_source_t src = { .fd = -1 };
    snprintf (src.role, sizeof src.role, "%s", role);
    snprintf (src.address, sizeof src.address, "127.0.0.1");
    cr_assert_eq (kd_bundle_add_msg (bundle, id, &src, *msg_p), 0);
    kd_msg_destroy (msg_p);
    kd_msg_t *relay = kd_bundle_take (bundle);
    kd_msg_send (&relay, sock);
    kd_bundle_destroy (&bundle);
    kd_msg_t *back = kd_test_recv (sock);
    cr_assert (back, "no RELAY back");
    cr_assert_eq (kd_msg_type (back), KD_MSG_RELAY, "got %s: %s", kd_msg_type_name (kd_msg_type (back)),
                  kd_msg_str (back, KD_F_REASON));
    size_t offset = 0, index = 0;
    kd_bundle_item_t item;
    char reason [160];
    cr_assert_eq (kd_bundle_next (back, &offset, &index, &item, reason, sizeof reason), 0, "%s", reason);
    cr_expect (item.id_size == 2 && !memcmp (item.id, "W1", 2), "answered to another id");
    kd_msg_t *inner = NULL;
    kd_msg_err_t err;
    cr_assert_eq (kd_bundle_decode (&item, &inner, &err), 0, "%s", err.reason);
    kd_msg_destroy (&back);
    zframe_destroy (&id);
    return inner;
}

Test (tree, bad_input_gets_errors_and_both_keep_serving)
{
    char sched [64], agg [64];
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", s_port);
    snprintf (agg, sizeof agg, "tcp://127.0.0.1:%d", s_port + 1);
    const char *argv [] = { "kudus-scheduler", "--bind", sched, "--shards", "1", "--min-workers", "1",
                            "--heartbeat-ms", "60000", NULL };
    s_spawn (argv);
    s_aggregator (s_port + 1);

    //  At the aggregator: garbage, a data frame, a RELAY from a worker.
    zsock_t *worker = kd_test_dealer (agg);
    zstr_send (worker, "not a message");
    s_expect_error (kd_test_recv (worker), "", "garbage at the aggregator");
    kd_msg_t *push = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (push, KD_F_RANK, 0);
    kd_msg_set_uint (push, KD_F_CLOCK, 0);
    kd_msg_set_uint (push, KD_F_BASE, 0);
    kd_msg_set_uint (push, KD_F_LO, 0);
    float v [4] = { 0 };
    zframe_t *data = zframe_new (v, sizeof v);
    kd_msg_set_data (push, &data);
    kd_msg_send (&push, worker);
    s_expect_error (kd_test_recv (worker), "no data frame", "a PUSH at the aggregator");
    kd_bundle_t *bundle = kd_bundle_new ();
    kd_bundle_item_t item = { .id = (const byte *) "X", .id_size = 1, .msg = (const byte *) "x", .msg_size = 1 };
    kd_bundle_add (bundle, &item);
    kd_msg_t *relay = kd_bundle_take (bundle);
    kd_bundle_destroy (&bundle);
    kd_msg_send (&relay, worker);
    s_expect_error (kd_test_recv (worker), "no data frame", "a RELAY from a worker");

    //  At the scheduler, a RELAY that is malformed as a whole: ERROR to its sender.
    zsock_t *fake_agg = kd_test_dealer (sched);
    byte junk [8] = { 5, 'A', 'B', 0, 0, 0, 0, 0 };
    zframe_t *frame = zframe_new (junk, sizeof junk);
    relay = kd_msg_new (KD_MSG_RELAY);
    kd_msg_set_uint (relay, KD_F_ITEMS, 2);
    kd_msg_set_data (relay, &frame);
    kd_msg_send (&relay, fake_agg);
    s_expect_error (kd_test_recv (fake_agg), "RELAY item 0", "a malformed RELAY");
    //  Items that are each wrong: answered inside a RELAY, to their id.
    kd_msg_t *arrive = kd_msg_new (KD_MSG_ARRIVE);
    kd_msg_set_uint (arrive, KD_F_CLOCK, 0);
    kd_msg_set_uint (arrive, KD_F_BASE, 0);
    kd_msg_set_uint (arrive, KD_F_SAMPLES, 32);
    kd_msg_t *back = s_relay_one (fake_agg, &arrive, "");
    s_expect_error (back, "not registered", "an ARRIVE before HELLO");
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "shard");
    kd_msg_set_str (hello, KD_F_NAME, "relayed-shard");
    kd_msg_set_str (hello, KD_F_ENDPOINT, "tcp://127.0.0.1:1");
    back = s_relay_one (fake_agg, &hello, "");
    s_expect_error (back, "only workers", "a shard through an aggregator");
    kd_msg_t *commit_ok = kd_msg_new (KD_MSG_COMMIT_OK);
    kd_msg_set_uint (commit_ok, KD_F_VERSION, 1);
    back = s_relay_one (fake_agg, &commit_ok, "worker");
    s_expect_error (back, "forbidden", "a worker's COMMIT_OK under its role");
    //  An item that is not a message at all.
    bundle = kd_bundle_new ();
    kd_bundle_item_t bad = { .id = (const byte *) "W2", .id_size = 2, .msg = (const byte *) "\x81\xa1v\x07", .msg_size = 4 };
    kd_bundle_add (bundle, &bad);
    relay = kd_bundle_take (bundle);
    kd_msg_send (&relay, fake_agg);
    back = kd_test_recv (fake_agg);
    cr_assert (back && kd_msg_type (back) == KD_MSG_RELAY);
    size_t offset = 0, index = 0;
    char reason [160];
    cr_assert_eq (kd_bundle_next (back, &offset, &index, &item, reason, sizeof reason), 0);
    kd_msg_t *inner = NULL;
    cr_assert_eq (kd_bundle_decode (&item, &inner, NULL), 0);
    s_expect_error (inner, "", "an item that is not a message");
    kd_msg_destroy (&back);
    kd_bundle_destroy (&bundle);

    //  Both still serve: a worker registers through the aggregator.
    hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "worker");
    kd_msg_set_str (hello, KD_F_NAME, "good-worker");
    kd_msg_set_uint (hello, KD_F_SAMPLES, S_ROWS);
    kd_msg_send (&hello, worker);
    kd_msg_t *welcome = kd_test_recv (worker);
    cr_assert (welcome, "no WELCOME through the aggregator");
    cr_expect_eq (kd_msg_type (welcome), KD_MSG_WELCOME, "got %s: %s", kd_msg_type_name (kd_msg_type (welcome)),
                  kd_msg_str (welcome, KD_F_REASON));
    kd_msg_destroy (&welcome);
    zsock_destroy (&worker);
    zsock_destroy (&fake_agg);
}

//  --------------------------------------------------------------------------
//  Real workers

//  Run `kudus local` with these settings (NULL-terminated) on our ports,
//  calling watch (if any) every 100 ms while it runs, and return its
//  summary (the caller frees it).
static char *
s_local (const char *const *settings, void (*watch) (void *), void *arg)
{
    char port [16], summary [300];
    snprintf (port, sizeof port, "%d", s_port);
    snprintf (summary, sizeof summary, "%s/summary.json", s_dir);
    const char *argv [40] = { "kudus", "local" };
    int n = 2;
    for (int i = 0; settings [i] && n < 32; i++)
        argv [n++] = settings [i];
    const char *tail [] = { "--base-port", port, "--summary", summary, "--quiet", NULL };
    for (int i = 0; i < 6; i++)
        argv [n++] = tail [i];
    pid_t pid = s_spawn (argv);
    int status = -1;
    bool done = false;
    for (int i = 0; i < 1800 && !done; i++) {
        if (watch)
            watch (arg);
        done = kd_test_wait (pid, 100, &status);
    }
    if (!done || !WIFEXITED (status) || WEXITSTATUS (status) != 0)
        kd_test_dump (s_log);
    cr_assert (done && WIFEXITED (status) && WEXITSTATUS (status) == 0, "kudus local failed");
    char *json = kd_test_slurp (summary);
    cr_assert (json, "no summary");
    return json;
}

//  The largest value of the tree's metrics seen while a cluster trains.
typedef struct {
    double relayed_in;          //  kudus_scheduler_relayed_messages_total{in}
    double aggregators;         //  kudus_aggregators
} s_metrics_t;

static void
s_watch_metrics (void *arg)
{
    s_metrics_t *m = (s_metrics_t *) arg;
    char *metrics = kd_test_http_get (s_port + 3, "/metrics");
    const char *at = metrics ? strstr (metrics, "\nkudus_scheduler_relayed_messages_total{direction=\"in\"} ") : NULL;
    if (at && atof (strchr (at, '}') + 1) > m->relayed_in)
        m->relayed_in = atof (strchr (at, '}') + 1);
    at = metrics ? strstr (metrics, "\nkudus_aggregators ") : NULL;
    if (at && atof (at + strlen ("\nkudus_aggregators ")) > m->aggregators)
        m->aggregators = atof (at + strlen ("\nkudus_aggregators "));
    free (metrics);
}

Test (tree, real_workers_train_through_aggregators)
{
    //  While it trains, the monitor's metrics show the tree's traffic.
    const char *settings [] = { "--workers", "4", "--fan-in", "2", "--shards", "2", "--epochs", "0.6", NULL };
    s_metrics_t seen = { 0 };
    char *json = s_local (settings, s_watch_metrics, &seen);
    double metric_in = seen.relayed_in, metric_aggs = seen.aggregators;
    const char *relays = strstr (json, "\"relays\":");
    cr_assert (relays);
    double aggregators = kd_test_json_number (relays, "aggregators");
    double in = kd_test_json_number (relays, "in"), items_in = kd_test_json_number (relays, "items_in");
    double out = kd_test_json_number (relays, "out"), items_out = kd_test_json_number (relays, "items_out");
    cr_expect_eq (aggregators, 2);
    //  Every worker message came in a RELAY: hellos, heartbeats and arrivals.
    double iterations = kd_test_json_number (json, "updates");
    cr_expect_gt (items_in, 0.6 * 60000 / 32, "items in %g", items_in);
    cr_expect (in > 0 && out > 0 && items_out >= items_in * 0.5, "in %g out %g items out %g", in, out, items_out);
    cr_expect_eq (kd_test_json_number (json, "dropped_gradients"), 0);
    cr_expect_eq (metric_aggs, 2, "kudus_aggregators showed %g", metric_aggs);
    cr_expect (metric_in > 0 && metric_in <= items_in, "kudus_scheduler_relayed_messages_total{in} showed %g",
               metric_in);
    printf ("FIGURE tree_training relays_in=%.0f items_in=%.0f relays_out=%.0f items_out=%.0f updates=%.0f\n",
            in, items_in, out, items_out, iterations);
    free (json);
}

//  ALSP's groups come from release-to-arrival times, which no two runs
//  share, so they are not in the exact replay; here a 4x straggler behind
//  an aggregator must still be regrouped (without one, this run makes no
//  regroup at all).
Test (tree, alsp_regroups_a_straggler_behind_an_aggregator)
{
    const char *settings [] = { "--workers", "4", "--fan-in", "2", "--shards", "1", "--consistency", "alsp",
                                "--straggler", "3:4", "--delay-ms", "5", "--epochs", "0.3", NULL };
    char *json = s_local (settings, NULL, NULL);
    cr_expect_geq (kd_test_json_number (json, "regroups"), 1, "no regroup");
    //  ALSP may drop a gradient too stale for another group (its rows go
    //  back): what it may not do is lose rows, so the run ends on epochs.
    cr_expect (strstr (json, "\"stop_reason\": \"epochs\""), "the epochs did not complete");
    const char *relays = strstr (json, "\"relays\":");
    cr_expect (relays && kd_test_json_number (relays, "aggregators") == 2);
    printf ("FIGURE tree_alsp regroups=%.0f\n", kd_test_json_number (json, "regroups"));
    free (json);
}

Test (tree, workers_train_through_aggregators_under_curve)
{
    //  Throwaway keys: the aggregators run with the scheduler's pair.
    const char *settings [] = { "--curve", "--workers", "3", "--fan-in", "2", "--shards", "1",
                                "--epochs", "0.1", NULL };
    char *json = s_local (settings, NULL, NULL);
    const char *relays = strstr (json, "\"relays\":");
    cr_assert (relays);
    cr_expect_eq (kd_test_json_number (relays, "aggregators"), 2);
    cr_expect_gt (kd_test_json_number (relays, "items_in"), 0.1 * 60000 / 32);
    cr_expect_eq (kd_test_count (s_log, "forbidden"), 0, "a relayed message was refused");
    free (json);
}

Test (tree, workers_of_a_killed_aggregator_come_back_through_its_replacement)
{
    char sched [64], agg [64], shard [64], monitor [64];
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", s_port);
    snprintf (agg, sizeof agg, "tcp://127.0.0.1:%d", s_port + 1);
    snprintf (shard, sizeof shard, "tcp://127.0.0.1:%d", s_port + 100);
    snprintf (monitor, sizeof monitor, "tcp://127.0.0.1:%d", s_port + 2);
    const char *sargv [] = { "kudus-scheduler", "--bind", sched, "--shards", "1", "--min-workers", "2",
                             "--epochs", "1000", "--heartbeat-ms", "200", "--liveness", "3", NULL };
    s_spawn (sargv);
    const char *hargv [] = { "kudus-shard", "--bind", shard, "--scheduler", sched, "--name", "shard-0",
                             "--heartbeat-ms", "200", "--liveness", "3", NULL };
    s_spawn (hargv);
    pid_t aggregator = s_aggregator (s_port + 1);
    for (int r = 0; r < 2; r++) {
        char name [32];
        snprintf (name, sizeof name, "worker-%d", r);
        const char *wargv [] = { "kudus-worker", "--scheduler", agg, "--monitor", monitor, "--name", name,
                                 "--delay-ms", "5", "--heartbeat-ms", "200", "--liveness", "3",
                                 "--request-timeout-ms", "1000", NULL };
        s_spawn (wargv);
    }
    int64_t v = -1;
    for (int i = 0; i < 600 && v < 30; i++, usleep (50000))
        v = kd_test_shard_version (shard, 500);
    if (v < 30)
        kd_test_dump (s_log);
    cr_assert (v >= 30, "training did not start through the aggregator (version %lld)", (long long) v);
    kill (aggregator, SIGKILL);
    waitpid (aggregator, NULL, 0);
    for (int i = 0; i < s_procs.n; i++)
        if (s_procs.pids [i] == aggregator)
            s_procs.pids [i] = 0;
    usleep (1500000);
    int64_t at_kill = kd_test_shard_version (shard, 1000);
    s_aggregator (s_port + 1);
    int64_t after = -1;
    for (int i = 0; i < 600 && after < at_kill + 30; i++, usleep (50000))
        after = kd_test_shard_version (shard, 500);
    if (after < at_kill + 30)
        kd_test_dump (s_log);
    cr_assert (after >= at_kill + 30, "training did not resume (%lld at the kill, %lld after)",
               (long long) at_kill, (long long) after);
    printf ("FIGURE tree_aggregator_restart version_at_kill=%lld after=%lld\n", (long long) at_kill,
            (long long) after);
}
