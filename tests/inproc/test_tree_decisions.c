/*  The barrier tree (kudus aggregate), in process: a real scheduler and
    real aggregators run as actors of this test, with a fake shard and
    fake workers that the test drives.

    - Random arrival scripts under BSP, LSP and SSP get exactly the same
      decisions through aggregators as from the flat scheduler: every
      worker's RELEASEs (version, clock, group, lease rows) and every
      COMMIT the shard receives.  Each arrival is followed by a probe on
      the same connection, so the scheduler has handled it before the next
      one is sent: both runs feed the controller the same sequence.
    - Malformed and forbidden input, at the aggregator and in a RELAY, gets
      ERROR, and both keep serving.

    Real workers training through aggregators, and a killed aggregator,
    are tests/integration/test_tree.c.
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include "kd_bundle.h"
#include "kd_testutil.h"
#include "kd_inproc.h"

#define S_N         8           //  fake workers
#define S_ROWS      60000       //  the training set they claim
#define S_LOG       (64 * 1024) //  bytes of decisions kept per worker

static int s_runs;                  //  clusters started by this test

static void
setup (void)
{
    kd_inproc_setup ();
    s_runs = 0;
}

TestSuite (tree, .init = setup, .fini = kd_inproc_teardown, .timeout = 240);

//  An aggregator for the scheduler at sched_port, bound at port.
static void
s_aggregator (int sched_port, int port)
{
    char bind [64], sched [64], name [32];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", sched_port);
    snprintf (name, sizeof name, "aggregator-%d", port - sched_port);
    const char *flags [] = { "--bind", bind, "--scheduler", sched, NULL };
    kd_inproc_run (KD_SVC_AGGREGATOR, name, flags);
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
    //  Each run binds ports of its own: a port the last run's actor closed
    //  may not be free again yet (a killed process's would be).
    int base = kd_inproc_port () + 10 * s_runs++;
    char bind [64], n [16];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", base);
    snprintf (n, sizeof n, "%d", S_N);
    //  Decisions must replay exactly, so LSP releases by its quota: the
    //  adaptive barrier's decisions depend on when arrivals happen.
    const char *flags [] = { "--bind", bind, "--shards", "1", "--min-workers", n,
                             "--consistency", model, "--quota-ratio", "0.75", "--barrier", "quota",
                             "--staleness", "2",
                             "--epochs", "1000", "--heartbeat-ms", "60000", "--liveness", "100", NULL };
    kd_inproc_run (KD_SVC_SCHEDULER, "scheduler", flags);
    size_t aggs = fan_in ? (S_N + fan_in - 1) / fan_in : 0;
    for (size_t i = 0; i < aggs; i++)
        s_aggregator (base, base + 1 + (int) i);
    f->shard = kd_test_dealer (bind);
    f->commits = (char *) calloc (1, S_LOG);
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "shard");
    kd_msg_set_str (hello, KD_F_NAME, "fake-shard");
    kd_msg_set_str (hello, KD_F_ENDPOINT, "tcp://127.0.0.1:1");
    kd_msg_send (&hello, f->shard);
    for (size_t w = 0; w < S_N; w++) {
        char ep [64], name [32];
        snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", fan_in ? base + 1 + (int) (w / fan_in) : base);
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
    kd_inproc_stop_all ();
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
    int base = kd_inproc_port ();
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", base);
    snprintf (agg, sizeof agg, "tcp://127.0.0.1:%d", base + 1);
    const char *flags [] = { "--bind", sched, "--shards", "1", "--min-workers", "1",
                             "--heartbeat-ms", "60000", NULL };
    kd_inproc_run (KD_SVC_SCHEDULER, "scheduler", flags);
    s_aggregator (base, base + 1);

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
