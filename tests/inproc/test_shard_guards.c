/*  Poisoned and absurd input from a peer, in process: a scheduler and one
    shard run as actors of this test (softmax, plain SGD at lr 0.5, so that
    an applied gradient shows in the parameters exactly) and take requests
    from a DEALER the test drives:

    - gradients with NaN or Inf are refused with ERROR 406, never applied,
      and counted in the shard's STATS;
    - max-grad-norm clips a slice to the bound, or refuses it;
    - one peer's flood of 5,000 staged gradients and 5,000 parked pulls is
      held to its per-peer limits, in bounded memory, while another peer
      is served;
    - a peer that keeps sending malformed messages is disconnected, and one
      past max-connections is closed at once;
    - a key (here: an address) registers at most max-registrations-per-key
      names;
    - a bind beyond loopback without CURVE logs a warning.

    The services' log lines go to a file of the test's scratch folder,
    where the tests count them.  Poisoned and flooded training runs of
    `kudus local` are in tests/integration/test_guards.c.

    Each test prints a FIGURE line that the README's reliability table
    quotes.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <unistd.h>
#include "kd_internal.h"
#include "kd_testutil.h"
#include "kd_inproc.h"

#define S_PARAMS    7850        //  softmax parameters
#define S_LR        0.5         //  the scheduler's learning rate

static char s_sched [64], s_shard [64];

static void
setup (void)
{
    kd_inproc_setup ();
    snprintf (s_sched, sizeof s_sched, "tcp://127.0.0.1:%d", kd_inproc_port ());
    snprintf (s_shard, sizeof s_shard, "tcp://127.0.0.1:%d", kd_inproc_port () + 100);
}

static void
teardown (void)
{
    kd_inproc_teardown ();
}

TestSuite (guards, .init = setup, .fini = teardown, .timeout = 200);

//  Start a service of this test as an actor, with flags (NULL-terminated).
static void
s_run (unsigned service, const char *name, const char *const *flags)
{
    kd_inproc_run (service, name, flags);
}

//  A DEALER with timeouts, so a dead service fails the test.
static zsock_t *
s_dealer (const char *endpoint)
{
    zsock_t *sock = kd_test_dealer (endpoint);
    cr_assert (sock, "cannot connect to %s", endpoint);
    return sock;
}

//  PULL any version into params; returns the version.
static uint64_t
s_pull (zsock_t *sock, float *params)
{
    kd_msg_t *req = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (req, KD_F_VERSION, 0);
    kd_msg_send (&req, sock);
    kd_msg_t *reply = kd_test_recv (sock);
    cr_assert (reply && kd_msg_type (reply) == KD_MSG_PULL_OK, "no PULL_OK");
    size_t n = 0;
    const float *data = kd_msg_data_floats (reply, &n);
    cr_assert_eq (n, S_PARAMS, "PULL_OK holds %zu values (count %llu, dtype %llu, shm %llu, version %llu)",
                  n, (unsigned long long) kd_msg_uint (reply, KD_F_COUNT),
                  (unsigned long long) kd_msg_uint (reply, KD_F_DTYPE),
                  (unsigned long long) kd_msg_uint (reply, KD_F_SHM),
                  (unsigned long long) kd_msg_uint (reply, KD_F_VERSION));
    memcpy (params, data, n * sizeof (float));
    uint64_t version = kd_msg_uint (reply, KD_F_VERSION);
    kd_msg_destroy (&reply);
    return version;
}

//  Send a PUSH of the whole softmax model's gradient (one shard holds it).
static void
s_push (zsock_t *sock, uint64_t rank, uint64_t clock, const float *g)
{
    kd_msg_t *req = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (req, KD_F_RANK, rank);
    kd_msg_set_uint (req, KD_F_CLOCK, clock);
    kd_msg_set_uint (req, KD_F_BASE, 0);
    kd_msg_set_uint (req, KD_F_LO, 0);
    kd_msg_set_uint (req, KD_F_SAMPLES, 32);
    zframe_t *data = zframe_new (g, S_PARAMS * sizeof (float));
    kd_msg_set_data (req, &data);
    cr_assert_eq (kd_msg_send (&req, sock), 0);
}

//  The shard's counters.
static void
s_stats (zsock_t *sock, uint64_t counters [KD_SC_COUNT])
{
    kd_msg_t *req = kd_msg_new (KD_MSG_STATS);
    kd_msg_send (&req, sock);
    kd_msg_t *reply = NULL;
    //  Answers to requests sent before may still be queued.
    for (int i = 0; i < 10000 && !reply; i++) {
        reply = kd_test_recv (sock);
        cr_assert (reply, "no STATS_OK");
        if (kd_msg_type (reply) != KD_MSG_STATS_OK)
            kd_msg_destroy (&reply);
    }
    size_t n = 0;
    const uint64_t *c = kd_msg_uints (reply, KD_F_COUNTERS, &n);
    cr_assert_eq (n, KD_SC_COUNT);
    memcpy (counters, c, n * sizeof (uint64_t));
    kd_msg_destroy (&reply);
}

//  A scheduler (softmax, consistency, plain SGD at S_LR, one shard) and
//  its shard with extra flags; returns once the shard serves pulls.
static void
s_start (const char *consistency, const char *const *shard_flags)
{
    const char *a_sched [] = { "--bind", s_sched, "--shards", "1", "--min-workers", "1",
                               "--model", "softmax", "--consistency", consistency, "--optimizer", "sgd",
                               "--momentum", "0", "--lr", "0.5", "--max-seconds", "150", NULL };
    s_run (KD_SVC_SCHEDULER, "scheduler", a_sched);
    const char *a_shard [24] = { "--bind", s_shard, "--scheduler", s_sched };
    int n = 4;
    for (int i = 0; shard_flags && shard_flags [i] && n < 23; i++)
        a_shard [n++] = shard_flags [i];
    a_shard [n] = NULL;
    s_run (KD_SVC_SHARD, "shard", a_shard);
    bool ready = kd_inproc_shard_serves (s_shard);
    if (!ready)
        kd_inproc_dump_log ();
    cr_assert (ready, "the shard never served a pull");
}

static double
s_norm (const float *v, size_t n)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += (double) v [i] * v [i];
    return sqrt (sum);
}

Test (guards, nan_and_inf_gradients_are_refused_and_never_applied)
{
    s_start ("asp", NULL);
    zsock_t *sock = s_dealer (s_shard);
    float *p0 = (float *) malloc (S_PARAMS * sizeof (float));
    float *p1 = (float *) malloc (S_PARAMS * sizeof (float));
    float *g = (float *) calloc (S_PARAMS, sizeof (float));
    cr_assert_eq (s_pull (sock, p0), 0);
    const int sent = 60;
    int refused = 0;
    for (int i = 0; i < sent; i++) {
        memset (g, 0, S_PARAMS * sizeof (float));
        g [(size_t) i * 131 % S_PARAMS] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        g [7] = 0.25f;      //  finite values beside the poison
        s_push (sock, 0, (uint64_t) i, g);
        kd_msg_t *reply = kd_test_recv (sock);
        cr_assert (reply);
        if (kd_msg_type (reply) == KD_MSG_ERROR && kd_msg_uint (reply, KD_F_CODE) == KD_ERR_REFUSED
        &&  kd_msg_uint (reply, KD_F_CLOCK) == (uint64_t) i)
            refused++;
        kd_msg_destroy (&reply);
    }
    //  Nothing of them reached the parameters.
    cr_expect_eq (s_pull (sock, p1), 0, "a refused gradient made a version");
    cr_expect (memcmp (p0, p1, S_PARAMS * sizeof (float)) == 0, "a refused gradient was applied");
    uint64_t c [KD_SC_COUNT];
    s_stats (sock, c);
    cr_expect_eq (c [KD_SC_REFUSED], (uint64_t) sent);
    //  A finite gradient is applied as before: p1 = p0 - lr g.
    for (size_t k = 0; k < S_PARAMS; k++)
        g [k] = (float) (k % 7) * 0.01f;
    s_push (sock, 0, (uint64_t) sent, g);
    kd_msg_t *ok = kd_test_recv (sock);
    cr_assert (ok && kd_msg_type (ok) == KD_MSG_PUSH_OK);
    kd_msg_destroy (&ok);
    cr_expect_eq (s_pull (sock, p1), 1);
    for (size_t k = 0; k < S_PARAMS; k++)
        cr_assert_float_eq (p1 [k], p0 [k] - (float) S_LR * g [k], 1e-6);
    cr_expect_geq (kd_test_count (kd_inproc_log (), "refused rank=0 clock="), sent, "refusals not logged");
    printf ("FIGURE guards: NaN/Inf pushes refused %d of %d, applied 0\n", refused, sent);
    cr_expect_eq (refused, sent);
    zsock_destroy (&sock);
    free (p0);
    free (p1);
    free (g);
}

//  A shard under max-grad-norm 1 with action (clip or refuse), its
//  parameters before, and its answer to a push of norm 10 (6 and 8 in the
//  first two values).
typedef struct {
    zsock_t *sock;
    float *p0, *p1, *g;
    kd_msg_t *reply;
} s_norm_case_t;

static s_norm_case_t
s_norm_case (const char *action)
{
    const char *flags [] = { "--max-grad-norm", "1", "--grad-norm-action", action, NULL };
    s_start ("asp", flags);
    s_norm_case_t t;
    t.sock = s_dealer (s_shard);
    t.p0 = (float *) malloc (S_PARAMS * sizeof (float));
    t.p1 = (float *) malloc (S_PARAMS * sizeof (float));
    t.g = (float *) calloc (S_PARAMS, sizeof (float));
    s_pull (t.sock, t.p0);
    t.g [0] = 6;
    t.g [1] = 8;
    s_push (t.sock, 0, 0, t.g);
    t.reply = kd_test_recv (t.sock);
    cr_assert (t.reply, "no answer to the push");
    return t;
}

static void
s_norm_case_end (s_norm_case_t *t)
{
    kd_msg_destroy (&t->reply);
    zsock_destroy (&t->sock);
    free (t->p0);
    free (t->p1);
    free (t->g);
}

Test (guards, max_grad_norm_clips_a_slice_to_the_bound)
{
    s_norm_case_t t = s_norm_case ("clip");
    cr_assert_eq (kd_msg_type (t.reply), KD_MSG_PUSH_OK);
    s_pull (t.sock, t.p1);
    //  The step taken is lr times the gradient scaled to norm 1.
    for (size_t k = 0; k < S_PARAMS; k++)
        t.p1 [k] = (t.p0 [k] - t.p1 [k]) / (float) S_LR;
    cr_expect_float_eq (s_norm (t.p1, S_PARAMS), 1.0, 1e-4);
    cr_expect_float_eq (t.p1 [0], 0.6, 1e-4);
    cr_expect_float_eq (t.p1 [1], 0.8, 1e-4);
    uint64_t c [KD_SC_COUNT];
    s_stats (t.sock, c);
    cr_expect_eq (c [KD_SC_CLIPPED], 1);
    cr_expect_eq (c [KD_SC_REFUSED], 0);
    s_norm_case_end (&t);
}

Test (guards, max_grad_norm_refuses_over_the_bound_and_applies_under_it)
{
    s_norm_case_t t = s_norm_case ("refuse");
    cr_expect_eq (kd_msg_type (t.reply), KD_MSG_ERROR);
    cr_expect_eq (kd_msg_uint (t.reply, KD_F_CODE), KD_ERR_REFUSED);
    t.g [0] = 0.3f;
    t.g [1] = 0.4f;         //  norm 0.5: applied as it is
    s_push (t.sock, 0, 1, t.g);
    kd_msg_t *reply = kd_test_recv (t.sock);
    cr_assert (reply && kd_msg_type (reply) == KD_MSG_PUSH_OK);
    kd_msg_destroy (&reply);
    cr_expect_eq (s_pull (t.sock, t.p1), 1);
    cr_expect_float_eq (t.p1 [0], t.p0 [0] - (float) S_LR * 0.3f, 1e-6);
    cr_expect_float_eq (t.p1 [1], t.p0 [1] - (float) S_LR * 0.4f, 1e-6);
    uint64_t c [KD_SC_COUNT];
    s_stats (t.sock, c);
    cr_expect_eq (c [KD_SC_REFUSED], 1);
    cr_expect_eq (c [KD_SC_CLIPPED], 0);
    s_norm_case_end (&t);
}

//  Memory a flood may add to the shard: 64 staged gradients of 31 KiB are
//  2 MiB.  The shard is a thread here, so the bound is on this process,
//  which also holds the flooding side's queues (100 pushes, 3 MiB).  ASan holds the 5,000 refused frames in its quarantine (256 MB
//  by default) with their shadow, so there the bound is only a sanity one.
#ifdef __SANITIZE_ADDRESS__
#   define S_FLOOD_GROWTH_KIB   (600 * 1024)
#else
#   define S_FLOOD_GROWTH_KIB   (32 * 1024)
#endif

Test (guards, one_peers_flood_is_held_to_its_limits)
{
    s_start ("lsp", NULL);
    zsock_t *attacker = s_dealer (s_shard), *honest = s_dealer (s_shard);
    float *g = (float *) calloc (S_PARAMS, sizeof (float));
    float *params = (float *) malloc (S_PARAMS * sizeof (float));
    g [3] = 0.5f;
    long peak0, now0, peak1, now1;
    kd_test_rss (getpid (), &peak0, &now0);
    //  5,000 gradients staged under distinct clocks, 100 in flight.
    const int flood = 5000, window = 100;
    int staged = 0, limited = 0, other = 0;
    for (int i = 0; i < flood; i += window) {
        for (int j = i; j < i + window; j++)
            s_push (attacker, 7, (uint64_t) j, g);
        for (int j = i; j < i + window; j++) {
            kd_msg_t *reply = kd_test_recv (attacker);
            cr_assert (reply, "the shard stopped answering the flood");
            if (kd_msg_type (reply) == KD_MSG_PUSH_OK)
                staged++;
            else
            if (kd_msg_type (reply) == KD_MSG_ERROR && kd_msg_uint (reply, KD_F_CODE) == KD_ERR_LIMIT)
                limited++;
            else
                other++;
            kd_msg_destroy (&reply);
        }
    }
    //  5,000 pulls for a version that does not exist yet: each parks.
    for (int i = 0; i < flood; i++) {
        kd_msg_t *req = kd_msg_new (KD_MSG_PULL);
        kd_msg_set_uint (req, KD_F_VERSION, 50 + (uint64_t) (i % 10));
        kd_msg_send (&req, attacker);
    }
    //  The honest peer is served meanwhile: its push stages, its pull
    //  answers, and the counters show the attacker's footprint.
    s_push (honest, 1, 0, g);
    kd_msg_t *ok = kd_test_recv (honest);
    cr_assert (ok && kd_msg_type (ok) == KD_MSG_PUSH_OK, "the honest push was not staged");
    kd_msg_destroy (&ok);
    cr_expect_eq (s_pull (honest, params), 0);
    uint64_t c [KD_SC_COUNT];
    s_stats (honest, c);
    kd_test_rss (getpid (), &peak1, &now1);
    printf ("FIGURE guards: flood of %d staged-gradient attempts: %d staged, %d refused (429); "
            "%d parked-pull attempts: %llu parked; peak RSS %ld KiB (+%ld KiB)\n",
            flood, staged, limited, flood, (unsigned long long) c [KD_SC_PARKED], peak1, peak1 - peak0);
    cr_expect_eq (staged, 64, "max-staged-per-peer is 64");
    cr_expect_eq (limited, flood - 64);
    cr_expect_eq (other, 0);
    cr_expect_eq (c [KD_SC_STAGED], 65, "64 of the attacker's and 1 honest");
    cr_expect_eq (c [KD_SC_PARKED], 1, "one parked pull per peer");
    cr_expect_eq (c [KD_SC_LIMITED], (uint64_t) (flood - 64));
    cr_expect (peak1 - peak0 < S_FLOOD_GROWTH_KIB, "the process grew by %ld KiB", peak1 - peak0);
    zsock_destroy (&attacker);
    zsock_destroy (&honest);
    free (g);
    free (params);
}

//  PUSH (rank, clock) on a connection and read the answer: 1 staged, 0
//  refused with 429 LIMIT, -1 anything else.
static int
s_push_once (zsock_t *sock, uint64_t rank, uint64_t clock, const float *g)
{
    s_push (sock, rank, clock, g);
    kd_msg_t *reply = kd_test_recv (sock);
    cr_assert (reply, "the shard did not answer a push");
    int rc = kd_msg_type (reply) == KD_MSG_PUSH_OK ? 1
           : kd_msg_type (reply) == KD_MSG_ERROR && kd_msg_uint (reply, KD_F_CODE) == KD_ERR_LIMIT ? 0 : -1;
    kd_msg_destroy (&reply);
    return rc;
}

//  Limits follow the peer, not its connection: without CURVE a peer is its
//  address and the rank it pushes for, so a flooder that reconnects 1,000
//  times stays held at max-staged-per-peer, while another worker on the
//  same host is served.
Test (guards, a_peer_that_reconnects_stays_limited)
{
    s_start ("lsp", NULL);
    float *g = (float *) calloc (S_PARAMS, sizeof (float));
    zsock_t *first = s_dealer (s_shard);
    int staged = 0;
    for (uint64_t clock = 0; clock < 70; clock++)
        staged += s_push_once (first, 7, clock, g) == 1;
    cr_expect_eq (staged, 64, "max-staged-per-peer is 64");
    zsock_destroy (&first);
    int refused = 0, other = 0;
    for (int i = 0; i < 1000; i++) {
        zsock_t *again = s_dealer (s_shard);
        int rc = s_push_once (again, 7, 1000 + (uint64_t) i, g);
        refused += rc == 0;
        other += rc != 0;
        zsock_destroy (&again);
    }
    printf ("FIGURE guards: a peer reconnected 1000 times: %d pushes refused (429), %d staged\n",
            refused, other);
    cr_expect_eq (refused, 1000, "a reconnect reset the peer's count");
    cr_expect_eq (other, 0);
    zsock_t *honest = s_dealer (s_shard);
    cr_expect_eq (s_push_once (honest, 1, 0, g), 1, "another worker of the host was refused");
    uint64_t c [KD_SC_COUNT];
    s_stats (honest, c);
    cr_expect_eq (c [KD_SC_STAGED], 65);
    zsock_destroy (&honest);
    free (g);
}

//  A pull parked for a version that never comes, from a peer that went
//  away, is aged out: left behind on purpose, with a short time limit the
//  shard drops it, counts it, says so in its log, and still serves.  A
//  gradient staged beside it stays: no commit has passed it over, and a
//  phase that only waits must lose nothing (test_kd_stage ages staged
//  gradients that commits pass over).
Test (guards, an_abandoned_pull_is_aged_out_a_waiting_gradient_is_not)
{
    const char *flags [] = { "--staged-ttl", "1", "--parked-ttl", "1", NULL };
    s_start ("lsp", flags);
    float *g = (float *) calloc (S_PARAMS, sizeof (float));
    zsock_t *gone = s_dealer (s_shard);
    cr_assert_eq (s_push_once (gone, 9, 0, g), 1);
    kd_msg_t *req = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (req, KD_F_VERSION, 50);
    kd_msg_send (&req, gone);
    zsock_t *watch = s_dealer (s_shard);
    uint64_t c [KD_SC_COUNT];
    //  The PULL and the STATS come from two peers, in either order, and on
    //  a busy machine the sweep may age the pull out before STATS is
    //  served: either shows that it was parked.
    const char *aging = "staged_expired=0 (passed over by commits for staged-ttl) parked=1 (older than parked-ttl)";
    bool parked = false;
    for (int i = 0; i < 100 && !parked; i++) {
        s_stats (watch, c);
        parked = c [KD_SC_PARKED] == 1 || kd_test_count (kd_inproc_log (), aging) >= 1;
        if (!parked)
            zclock_sleep (100);
    }
    cr_expect (parked, "the pull was never parked");
    cr_expect_eq (c [KD_SC_STAGED], 1);
    zsock_destroy (&gone);
    //  The shard sweeps once a second; wait for the event, 10 s at most.
    bool aged = false;
    for (int i = 0; i < 100 && !aged; i++) {
        zclock_sleep (100);
        s_stats (watch, c);
        aged = c [KD_SC_PARKED] == 0;
    }
    cr_expect (aged, "parked %llu after 10 s", (unsigned long long) c [KD_SC_PARKED]);
    cr_expect_eq (c [KD_SC_STAGED], 1, "a gradient no commit passed over was dropped");
    cr_expect_geq (kd_test_count (kd_inproc_log (), "aged out staged=0 ("), 1, "no log line for the aging");
    cr_expect_geq (kd_test_count (kd_inproc_log (), aging), 1, "the aging's counts");
    float *params = (float *) malloc (S_PARAMS * sizeof (float));
    s_pull (watch, params);
    zsock_destroy (&watch);
    free (params);
    free (g);
}

//  A socket monitor's next event of a kind within timeout_ms.
static bool
s_saw_event (zsock_t *monitor, int want, int timeout_ms)
{
    zsock_set_rcvtimeo (monitor, timeout_ms);
    for (int i = 0; i < 50; i++) {
        zmsg_t *event = zmsg_recv (monitor);
        if (!event)
            return false;
        zframe_t *head = zmsg_first (event);
        uint16_t id = 0;
        if (head && zframe_size (head) >= 2)
            memcpy (&id, zframe_data (head), 2);
        zmsg_destroy (&event);
        if (id == want)
            return true;
    }
    return false;
}

Test (guards, a_peer_that_keeps_sending_garbage_is_disconnected)
{
    const char *flags [] = { "--max-malformed", "20", NULL };
    s_start ("bsp", flags);
    zsock_t *attacker = s_dealer (s_shard), *honest = s_dealer (s_shard);
    //  Watch the attacker's own connection.
    cr_assert_eq (zmq_socket_monitor (zsock_resolve (attacker), "inproc://guards-attacker",
                                      ZMQ_EVENT_DISCONNECTED), 0);
    zsock_t *monitor = zsock_new (ZMQ_PAIR);
    cr_assert_eq (zsock_connect (monitor, "inproc://guards-attacker"), 0);
    for (int i = 0; i < 25; i++) {
        char junk [16];
        snprintf (junk, sizeof junk, "junk %d", i);
        zstr_send (attacker, junk);
    }
    cr_expect (s_saw_event (monitor, ZMQ_EVENT_DISCONNECTED, 5000),
               "the shard kept the connection of a peer that sent 25 malformed messages");
    float *params = (float *) malloc (S_PARAMS * sizeof (float));
    cr_expect_eq (s_pull (honest, params), 0, "the shard stopped serving others");
    uint64_t c [KD_SC_COUNT];
    s_stats (honest, c);
    cr_expect_geq (c [KD_SC_DISCONNECTS], 1);
    cr_expect_eq (kd_test_count (kd_inproc_log (), "peer disconnected after 20 malformed messages"), 1);
    printf ("FIGURE guards: a peer sending malformed messages is disconnected after 20 "
            "(disconnects %llu), others served\n", (unsigned long long) c [KD_SC_DISCONNECTS]);
    zmq_socket_monitor (zsock_resolve (attacker), NULL, 0);
    zsock_destroy (&monitor);
    zsock_destroy (&attacker);
    zsock_destroy (&honest);
    free (params);
}

Test (guards, connections_over_the_limit_are_closed)
{
    const char *flags [] = { "--max-connections", "3", NULL };
    s_start ("bsp", flags);
    //  The scheduler's connection to the shard is not one: the shard dials
    //  the scheduler.  The start-up probe has closed: wait until the shard
    //  has seen that, and counts only our first connection (a fixed sleep
    //  was too short on a loaded machine).
    zsock_t *socks [5];
    float *params = (float *) malloc (S_PARAMS * sizeof (float));
    socks [0] = s_dealer (s_shard);
    uint64_t c [KD_SC_COUNT] = { 0 };
    for (int i = 0; i < 100; i++, zclock_sleep (30)) {
        s_stats (socks [0], c);
        if (c [KD_SC_CONNECTIONS] == 1)
            break;
    }
    cr_assert_eq (c [KD_SC_CONNECTIONS], 1, "the start-up probe's connection is still counted");
    for (int i = 0; i < 3; i++) {
        if (i > 0)
            socks [i] = s_dealer (s_shard);
        cr_assert_eq (s_pull (socks [i], params), 0);
    }
    for (int i = 3; i < 5; i++) {
        socks [i] = s_dealer (s_shard);
        zsock_set_rcvtimeo (socks [i], 1000);
        kd_msg_t *req = kd_msg_new (KD_MSG_PULL);
        kd_msg_set_uint (req, KD_F_VERSION, 0);
        kd_msg_send (&req, socks [i]);
        kd_msg_t *reply = kd_test_recv (socks [i]);
        cr_expect_null (reply, "a connection over max-connections was served");
        kd_msg_destroy (&reply);
    }
    s_stats (socks [0], c);
    cr_expect_leq (c [KD_SC_CONNECTIONS], 3);
    cr_expect_geq (c [KD_SC_DISCONNECTS], 2);
    cr_expect_geq (kd_test_count (kd_inproc_log (), "connection refused"), 2);
    printf ("FIGURE guards: max-connections 3: 3 served, 2 closed (disconnects %llu)\n",
            (unsigned long long) c [KD_SC_DISCONNECTS]);
    //  The three inside are still served.
    for (int i = 0; i < 3; i++)
        cr_expect_eq (s_pull (socks [i], params), 0);
    for (int i = 0; i < 5; i++)
        zsock_destroy (&socks [i]);
    free (params);
}

Test (guards, one_key_registers_a_bounded_number_of_names)
{
    const char *a_sched [] = { "--bind", s_sched, "--shards", "1", "--min-workers", "8",
                               "--model", "softmax", "--max-registrations-per-key", "3",
                               "--max-seconds", "150", NULL };
    s_run (KD_SVC_SCHEDULER, "scheduler", a_sched);
    zsock_t *sock = s_dealer (s_sched);
    int welcomed = 0, limited = 0;
    for (int i = 0; i < 5; i++) {
        kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
        char name [32];
        snprintf (name, sizeof name, "squatter-%d", i);
        kd_msg_set_str (hello, KD_F_ROLE, "worker");
        kd_msg_set_str (hello, KD_F_NAME, name);
        kd_msg_set_uint (hello, KD_F_SAMPLES, 60000);
        kd_msg_send (&hello, sock);
        kd_msg_t *reply = kd_test_recv (sock);
        cr_assert (reply, "no answer to HELLO %d", i);
        if (kd_msg_type (reply) == KD_MSG_WELCOME)
            welcomed++;
        else
        if (kd_msg_type (reply) == KD_MSG_ERROR && kd_msg_uint (reply, KD_F_CODE) == KD_ERR_LIMIT)
            limited++;
        kd_msg_destroy (&reply);
    }
    cr_expect_eq (welcomed, 3);
    cr_expect_eq (limited, 2);
    //  A name already registered by this key may register again (rejoin).
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "worker");
    kd_msg_set_str (hello, KD_F_NAME, "squatter-1");
    kd_msg_set_uint (hello, KD_F_SAMPLES, 60000);
    kd_msg_send (&hello, sock);
    kd_msg_t *reply = kd_test_recv (sock);
    cr_expect (reply && kd_msg_type (reply) == KD_MSG_WELCOME, "a rejoin was refused");
    kd_msg_destroy (&reply);
    cr_expect_eq (kd_test_count (kd_inproc_log (), "hello refused name=squatter-"), 2);
    cr_expect_geq (kd_test_count (kd_inproc_log (), "too many registrations from key 127.0.0.1"), 2);
    zsock_destroy (&sock);
}

Test (guards, a_bind_beyond_loopback_without_curve_warns)
{
    char wild [64], local [64];
    snprintf (wild, sizeof wild, "tcp://*:%d", kd_inproc_port () + 150);
    snprintf (local, sizeof local, "tcp://127.0.0.1:%d", kd_inproc_port () + 151);
    const char *a_wild [] = { "--bind", wild, "--scheduler", s_sched, "--name", "wild", NULL };
    const char *a_local [] = { "--bind", local, "--scheduler", s_sched, "--name", "local", NULL };
    //  The warning is written while the shard binds, before its set-up
    //  returns.
    s_run (KD_SVC_SHARD, "wild", a_wild);
    s_run (KD_SVC_SHARD, "local", a_local);
    char needle [128];
    snprintf (needle, sizeof needle, "bound %s without CURVE", wild);
    cr_expect_eq (kd_test_count (kd_inproc_log (), needle), 1);
    snprintf (needle, sizeof needle, "bound %s without CURVE", local);
    cr_expect_eq (kd_test_count (kd_inproc_log (), needle), 0);
}
