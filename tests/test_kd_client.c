/*  test_kd_client: the public worker API against a fake scheduler and a
    fake shard, ROUTER sockets driven by the test.

    The client must register, adopt the layout, pull into the caller's
    buffer, push with the lease's rows, and turn ARRIVE into the next
    RELEASE.  Every bad thing a peer can send (a WELCOME for an unknown
    model, an address book whose ranges do not tile the model, silence)
    must end in -1 and a log line, never in a crash or a hang.
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include <math.h>
#include <pthread.h>

TestSuite (kd_client, .timeout = 30);

#define S_EP "tcp://127.0.0.1:%d"

//  A fake peer: a bound ROUTER and the routing id of the last sender.
typedef struct {
    zsock_t *sock;
    zframe_t *from;
    int port;
} s_fake_t;

static s_fake_t
s_fake_new (void)
{
    s_fake_t f = { .sock = zsock_new (ZMQ_ROUTER) };
    cr_assert (f.sock);
    f.port = zsock_bind (f.sock, "tcp://127.0.0.1:*[30000-]");
    cr_assert (f.port > 0);
    zsock_set_rcvtimeo (f.sock, 5000);
    return f;
}

static void
s_fake_destroy (s_fake_t *f)
{
    zframe_destroy (&f->from);
    zsock_destroy (&f->sock);
}

//  Receive the next message of a type, skipping heartbeats.
static kd_msg_t *
s_expect (s_fake_t *f, kd_msg_type_t type)
{
    for (int i = 0; i < 20; i++) {
        kd_msg_t *msg = NULL;
        zframe_t *from = NULL;
        kd_msg_err_t err;
        int rc = kd_msg_recv (f->sock, &msg, &from, &err);
        cr_assert_eq (rc, 0, "no message (rc %d) while waiting for %s", rc, kd_msg_type_name (type));
        zframe_destroy (&from);
        zframe_destroy (&f->from);
        f->from = zframe_dup (kd_msg_routing_id (msg));
        if (kd_msg_type (msg) == type)
            return msg;
        kd_msg_destroy (&msg);
    }
    cr_assert_fail ("no %s", kd_msg_type_name (type));
    return NULL;
}

//  Send msg to the last sender.
static void
s_reply (s_fake_t *f, kd_msg_t *msg)
{
    kd_msg_set_routing_id (msg, zframe_dup (f->from));
    cr_assert_eq (kd_msg_send (&msg, f->sock), 0);
}

static kd_msg_t *
s_welcome (const char *model, uint64_t n_params, const char *consistency)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_WELCOME);
    kd_msg_set_uint (msg, KD_F_RANK, 3);
    kd_msg_set_str (msg, KD_F_ROLE, "worker");
    kd_msg_set_str (msg, KD_F_MODEL, model);
    kd_msg_set_uint (msg, KD_F_HIDDEN, 16);
    kd_msg_set_uint (msg, KD_F_N_PARAMS, n_params);
    kd_msg_set_uint (msg, KD_F_BATCH, 4);
    kd_msg_set_uint (msg, KD_F_SEED, 9);
    kd_msg_set_str (msg, KD_F_CONSISTENCY, consistency);
    kd_msg_set_uint (msg, KD_F_STALENESS, 2);
    return msg;
}

static kd_msg_t *
s_start (const char *endpoint, uint64_t lo, uint64_t hi)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_START);
    kd_msg_set_strs (msg, KD_F_ENDPOINTS, &endpoint, 1);
    kd_msg_set_uints (msg, KD_F_LOS, &lo, 1);
    kd_msg_set_uints (msg, KD_F_HIS, &hi, 1);
    kd_msg_set_uint (msg, KD_F_T0_MS, 1234);
    return msg;
}

static kd_msg_t *
s_release (uint64_t version, uint64_t clock, const uint64_t *rows, size_t n)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_RELEASE);
    kd_msg_set_uint (msg, KD_F_VERSION, version);
    kd_msg_set_uint (msg, KD_F_CLOCK, clock);
    kd_msg_set_uint (msg, KD_F_GROUP, 1);
    kd_msg_set_uints (msg, KD_F_ROWS, rows, n);
    return msg;
}

static kd_client_t *
s_client (s_fake_t *sched)
{
    char ep [64];
    snprintf (ep, sizeof ep, S_EP, sched->port);
    kd_client_t *client = kd_client_new (ep, "test-worker");
    cr_assert (client);
    kd_client_set_samples (client, 100);
    kd_client_set_timeout (client, 2000);
    return client;
}

Test (kd_client, new_refuses_missing_arguments)
{
    cr_expect_null (kd_client_new ("", "w"));
    cr_expect_null (kd_client_new (NULL, "w"));
    //  A nameless worker is named by its host and pid.
    kd_client_t *client = kd_client_new ("tcp://127.0.0.1:1", NULL);
    cr_expect_not_null (client);
    kd_client_destroy (&client);
}

Test (kd_client, register_times_out_without_a_scheduler)
{
    s_fake_t sched = s_fake_new ();     //  binds, never answers
    kd_client_t *client = s_client (&sched);
    uint64_t t0 = kd_now_ms ();
    cr_expect_eq (kd_client_register (client, 300), -1);
    cr_expect_lt (kd_now_ms () - t0, 3000);
    cr_expect_not (kd_client_stopped (client));
    kd_client_destroy (&client);
    cr_expect_null (client);
    s_fake_destroy (&sched);
}

Test (kd_client, welcome_for_an_unknown_model_is_refused)
{
    s_fake_t sched = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    //  The first call sends HELLO and times out; the next one reads our
    //  answer: a model this client cannot serve.
    cr_expect_eq (kd_client_register (client, 100), -1);
    kd_msg_destroy (&(kd_msg_t *) { s_expect (&sched, KD_MSG_HELLO) });
    s_reply (&sched, s_welcome ("resnet", 10, "bsp"));
    cr_expect_eq (kd_client_register (client, 2000), -1);
    cr_expect_eq (kd_client_param_count (client), 0);
    kd_client_destroy (&client);
    s_fake_destroy (&sched);
}

//  Register with the fake scheduler: HELLO, then a WELCOME for softmax.
static void
s_register (s_fake_t *sched, kd_client_t *client, const char *consistency)
{
    cr_expect_eq (kd_client_register (client, 100), -1);
    kd_msg_t *hello = s_expect (sched, KD_MSG_HELLO);
    cr_expect_eq (kd_msg_uint (hello, KD_F_SAMPLES), 100);
    kd_msg_destroy (&hello);
    s_reply (sched, s_welcome ("softmax", 7850, consistency));
    cr_assert_eq (kd_client_register (client, 2000), 0);
}

Test (kd_client, start_with_ranges_that_do_not_tile_is_refused)
{
    s_fake_t sched = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    s_register (&sched, client, "bsp");
    cr_expect_eq (kd_client_rank (client), 3);
    s_reply (&sched, s_start ("tcp://127.0.0.1:1", 0, 7000));     //  short of 7850
    kd_release_t release;
    cr_expect_eq (kd_client_wait_start (client, &release, 2000), -1);
    kd_client_destroy (&client);
    s_fake_destroy (&sched);
}

//  START with one shard holding [0, hi) on the fake shard, then the first
//  RELEASE (version 0, clock 0, one row: 5), and the client takes both.
static void
s_start_one (s_fake_t *sched, s_fake_t *shard, kd_client_t *client, uint64_t hi,
             kd_release_t *release)
{
    char ep [64];
    snprintf (ep, sizeof ep, S_EP, shard->port);
    s_reply (sched, s_start (ep, 0, hi));
    uint64_t rows [1] = { 5 };
    s_reply (sched, s_release (0, 0, rows, 1));
    cr_assert_eq (kd_client_wait_start (client, release, 2000), 0);
}

//  What the fake cluster saw during one iteration.
typedef struct {
    zsock_t *sched, *shard;     //  handed over to the actor
    uint64_t push_samples;      //  PUSH's samples
    float push_first;           //  first float pushed
    uint64_t arrive_samples;    //  ARRIVE's samples
    double arrive_loss;         //  ARRIVE's loss
    int pulls;                  //  PULLs answered
    uint64_t pull_version;      //  the version the last PULL asked for
    int arrivals;               //  ARRIVEs answered
    uint64_t push_base;         //  PUSH's base
    uint64_t clocks [4];        //  the clock of each RELEASE after an ARRIVE (0: 1)
    bool refuse;                //  the shard refuses every push (ERROR 406)
    int pushes;                 //  PUSHes the shard received
    uint64_t arrive_refused;    //  ARRIVE's refused
    bool ahead;                 //  lease ahead: every PULL_OK and RELEASE
                                //  names a new version, every RELEASE an
                                //  ahead lease
    uint64_t push_bases [4];    //  lease ahead: each PUSH's base
    uint64_t arrive_bases [4];  //  lease ahead: each ARRIVE's base
    int rejoin_at;              //  lease ahead: arrival (1-based) answered by
                                //  a readmission: WELCOME, START, RELEASE
    const char *shard_ep;       //  the shard's endpoint, for that START
} s_cluster_t;

//  Plays the scheduler and the shard until told to stop.
static void
s_cluster_actor (zsock_t *pipe, void *args)
{
    s_cluster_t *c = (s_cluster_t *) args;
    zsock_signal (pipe, 0);
    zpoller_t *poller = zpoller_new (pipe, c->sched, c->shard, NULL);
    while (true) {
        zsock_t *which = (zsock_t *) zpoller_wait (poller, 5000);
        if (!which || which == pipe)
            break;
        kd_msg_t *msg = NULL;
        zframe_t *from = NULL;
        if (kd_msg_recv (which, &msg, &from, NULL) != 0)
            continue;
        kd_msg_t *reply = NULL;
        if (kd_msg_type (msg) == KD_MSG_PULL) {
            reply = kd_msg_new (KD_MSG_PULL_OK);
            kd_msg_set_uint (reply, KD_F_VERSION, c->ahead ? 7 + (uint64_t) c->pulls : 7);
            kd_msg_set_uint (reply, KD_F_LO, 0);
            zframe_t *data = zframe_new (NULL, 7850 * sizeof (float));
            float *v = (float *) zframe_data (data);
            for (size_t i = 0; i < 7850; i++)
                v [i] = (float) i;
            kd_msg_set_data (reply, &data);
            c->pulls++;
            c->pull_version = kd_msg_uint (msg, KD_F_VERSION);
        }
        else
        if (kd_msg_type (msg) == KD_MSG_PUSH) {
            size_t n = 0;
            const float *g = kd_msg_data_floats (msg, &n);
            c->push_samples = kd_msg_uint (msg, KD_F_SAMPLES);
            c->push_base = kd_msg_uint (msg, KD_F_BASE);
            c->push_first = n == 7850 ? g [0] : -1;
            if (c->pushes < 4)
                c->push_bases [c->pushes] = c->push_base;
            c->pushes++;
            if (c->refuse) {
                reply = kd_msg_new_error (NULL, KD_ERR_REFUSED, "gradient refused: norm over bound");
                kd_msg_set_uint (reply, KD_F_CLOCK, kd_msg_uint (msg, KD_F_CLOCK));
            }
            else {
                reply = kd_msg_new (KD_MSG_PUSH_OK);
                kd_msg_set_uint (reply, KD_F_CLOCK, kd_msg_uint (msg, KD_F_CLOCK));
            }
        }
        else
        if (kd_msg_type (msg) == KD_MSG_ARRIVE) {
            c->arrive_samples = kd_msg_uint (msg, KD_F_SAMPLES);
            c->arrive_loss = kd_msg_float (msg, KD_F_LOSS);
            c->arrive_refused = kd_msg_uint (msg, KD_F_REFUSED);
            uint64_t rows [2] = { 8, 9 };
            uint64_t clock = c->arrivals < 4 && c->clocks [c->arrivals] ? c->clocks [c->arrivals] : 1;
            if (c->arrivals < 4)
                c->arrive_bases [c->arrivals] = kd_msg_uint (msg, KD_F_BASE);
            if (c->ahead && c->arrivals + 1 == c->rejoin_at) {
                //  Declared dead meanwhile: registered again, and the
                //  rejoin's RELEASE comes while the client waits for its own.
                kd_msg_t *welcome = s_welcome ("softmax", 7850, "asp");
                kd_msg_set_uint (welcome, KD_F_LEASE_AHEAD, 1);
                kd_msg_t *start = s_start (c->shard_ep, 0, 7850);
                kd_msg_t *both [2] = { welcome, start };
                for (int k = 0; k < 2; k++) {
                    kd_msg_set_routing_id (both [k], zframe_dup (kd_msg_routing_id (msg)));
                    kd_msg_send (&both [k], which);
                }
                uint64_t now [1] = { 70 }, next [1] = { 71 };
                reply = s_release (30, 20, now, 1);
                kd_msg_set_uints (reply, KD_F_AHEAD, next, 1);
            }
            else
            if (c->ahead) {
                uint64_t a = (uint64_t) c->arrivals, now [1] = { 50 + a }, next [1] = { 51 + a };
                reply = s_release (10 + a, a + 1, now, 1);
                kd_msg_set_uints (reply, KD_F_AHEAD, next, 1);
            }
            else {
                reply = s_release (1, clock, rows, 2);
                kd_msg_set_uint (reply, KD_F_DROPPED, 1);
            }
            c->arrivals++;
        }
        if (reply) {
            kd_msg_set_routing_id (reply, zframe_dup (kd_msg_routing_id (msg)));
            kd_msg_send (&reply, which);
        }
        zframe_destroy (&from);
        kd_msg_destroy (&msg);
    }
    zpoller_destroy (&poller);
}

Test (kd_client, one_iteration_against_a_fake_cluster)
{
    s_fake_t sched = s_fake_new (), shard = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    s_register (&sched, client, "bsp");
    cr_expect_str_eq (kd_client_model (client), "softmax");
    cr_expect_str_eq (kd_client_consistency (client), "bsp");
    cr_expect_eq (kd_client_param_count (client), 7850);
    cr_expect_eq (kd_client_batch (client), 4);
    cr_assert_eq (kd_client_tensor_count (client), 2);
    const kd_tensor_t *W = kd_client_tensor (client, 0), *b = kd_client_tensor (client, 1);
    cr_expect_str_eq (W->name, "W");
    cr_expect_eq (W->rows, 784);
    cr_expect_eq (W->cols, 10);
    cr_expect_str_eq (b->name, "b");
    cr_expect_eq (b->offset, 7840);
    cr_expect_null (kd_client_tensor (client, 2));

    char ep [64];
    snprintf (ep, sizeof ep, S_EP, shard.port);
    s_reply (&sched, s_start (ep, 0, 7850));
    uint64_t rows [3] = { 5, 17, 42 };
    s_reply (&sched, s_release (0, 0, rows, 3));
    kd_release_t release;
    cr_assert_eq (kd_client_wait_start (client, &release, 2000), 0);
    cr_expect_eq (kd_client_start_ms (client), 1234);
    cr_expect_eq (release.n_rows, 3);
    cr_expect_eq (release.rows [2], 42);
    cr_expect_eq (release.group, 1);

    //  From here the actor owns both fake sockets.
    s_cluster_t cluster = { .sched = sched.sock, .shard = shard.sock };
    zactor_t *actor = zactor_new (s_cluster_actor, &cluster);
    float *params = (float *) calloc (7850, sizeof (float));
    float *grad = (float *) calloc (7850, sizeof (float));
    grad [0] = 0.5f;
    cr_assert_eq (kd_client_pull (client, params), 0);
    cr_expect_eq (kd_client_version (client), 7);
    cr_expect_float_eq (params [7849], 7849.0f, 1e-6);
    cr_assert_eq (kd_client_push (client, grad, release.n_rows), 0);
    cr_assert_eq (kd_client_arrive (client, 2.5f, &release), 0);
    cr_expect_eq (release.clock, 1);
    cr_expect_eq (release.n_rows, 2);
    cr_expect_eq (release.rows [0], 8);
    cr_expect (release.dropped);
    cr_expect_eq (kd_client_dropped (client), 1);
    //  The pull sent with ARRIVE reaches the actor on another socket than
    //  the ARRIVE: wait for it before stopping the actor.
    for (int waited = 0; waited < 2000 && __atomic_load_n (&cluster.pulls, __ATOMIC_ACQUIRE) < 2; waited += 10)
        zclock_sleep (10);
    zactor_destroy (&actor);
    //  The pull, and the next one, sent with ARRIVE for a newer version
    //  than the 7 pulled (BSP pulls ahead).
    cr_expect_eq (cluster.pulls, 2);
    cr_expect_eq (cluster.pull_version, 8);
    cr_expect_eq (cluster.push_samples, 3);
    cr_expect_float_eq (cluster.push_first, 0.5f, 1e-6);
    cr_expect_eq (cluster.arrive_samples, 3);
    cr_expect_float_eq (cluster.arrive_loss, 2.5, 1e-6);
    free (params);
    free (grad);
    kd_client_destroy (&client);
    s_fake_destroy (&shard);
    s_fake_destroy (&sched);
}

Test (kd_client, stop_ends_the_wait_and_reads_as_stopped)
{
    s_fake_t sched = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    s_register (&sched, client, "bsp");
    kd_msg_t *stop = kd_msg_new (KD_MSG_STOP);
    kd_msg_set_str (stop, KD_F_REASON, "test");
    s_reply (&sched, stop);
    kd_release_t release;
    cr_expect_eq (kd_client_wait_start (client, &release, 3000), -1);
    cr_expect (kd_client_stopped (client));
    cr_expect_eq (kd_client_stop_version (client), 0, "this STOP named no version");
    //  Not started (and a built-in model): no final pull.
    float *params = (float *) calloc (7850, sizeof (float));
    cr_expect_eq (kd_client_pull_final (client, params, 100), -1);
    free (params);
    //  After STOP one LEAVE still goes (an external model's scheduler waits
    //  for it), then no more; sleep ends.
    cr_expect_eq (kd_client_leave (client, "done"), 0);
    kd_msg_t *leave = s_expect (&sched, KD_MSG_LEAVE);
    cr_expect_str_eq (kd_msg_str (leave, KD_F_REASON), "done");
    kd_msg_destroy (&leave);
    cr_expect_eq (kd_client_leave (client, "again"), -1);
    cr_expect_eq (kd_client_sleep (client, 50), -1);
    kd_client_destroy (&client);
    s_fake_destroy (&sched);
}

//  Plays the shard of a final pull: answers each PULL with the version it
//  asks for, values 0 .. 9.
typedef struct {
    zsock_t *shard;
    int pulls;
    uint64_t pull_version;
} s_final_t;

static void
s_final_actor (zsock_t *pipe, void *args)
{
    s_final_t *f = (s_final_t *) args;
    zsock_signal (pipe, 0);
    zpoller_t *poller = zpoller_new (pipe, f->shard, NULL);
    while (zpoller_wait (poller, 5000) == f->shard) {
        kd_msg_t *msg = NULL;
        if (kd_msg_recv (f->shard, &msg, NULL, NULL) != 0)
            continue;
        if (kd_msg_type (msg) == KD_MSG_PULL) {
            kd_msg_t *reply = kd_msg_new (KD_MSG_PULL_OK);
            kd_msg_set_uint (reply, KD_F_VERSION, kd_msg_uint (msg, KD_F_VERSION));
            kd_msg_set_uint (reply, KD_F_LO, 0);
            zframe_t *data = zframe_new (NULL, 10 * sizeof (float));
            for (size_t i = 0; i < 10; i++)
                ((float *) zframe_data (data)) [i] = (float) i;
            kd_msg_set_data (reply, &data);
            kd_msg_set_routing_id (reply, zframe_dup (kd_msg_routing_id (msg)));
            kd_msg_send (&reply, f->shard);
            f->pull_version = kd_msg_uint (msg, KD_F_VERSION);
            __atomic_add_fetch (&f->pulls, 1, __ATOMIC_RELEASE);
        }
        kd_msg_destroy (&msg);
    }
    zpoller_destroy (&poller);
}

//  An external model's worker, stopped by the scheduler, pulls the final
//  version STOP named (the scheduler keeps the shards up for it), leaves
//  once; with the shards gone the pull gives up at its deadline.
Test (kd_client, a_stopped_external_worker_pulls_the_final_version)
{
    s_fake_t sched = s_fake_new (), shard = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    cr_expect_eq (kd_client_register (client, 100), -1);
    kd_msg_t *hello = s_expect (&sched, KD_MSG_HELLO);
    kd_msg_destroy (&hello);
    kd_msg_t *welcome = kd_msg_new (KD_MSG_WELCOME);
    const char *names [1] = { "w" };
    uint64_t shapes [2] = { 10, 1 };
    kd_msg_set_uint (welcome, KD_F_RANK, 0);
    kd_msg_set_str (welcome, KD_F_ROLE, "worker");
    kd_msg_set_str (welcome, KD_F_MODEL, "external");
    kd_msg_set_strs (welcome, KD_F_TENSORS, names, 1);
    kd_msg_set_uints (welcome, KD_F_SHAPES, shapes, 2);
    kd_msg_set_uint (welcome, KD_F_N_PARAMS, 10);
    kd_msg_set_uint (welcome, KD_F_BATCH, 4);
    kd_msg_set_str (welcome, KD_F_CONSISTENCY, "bsp");
    s_reply (&sched, welcome);
    cr_assert_eq (kd_client_register (client, 2000), 0);
    cr_assert_str_eq (kd_client_model (client), "external");
    kd_release_t release;
    s_start_one (&sched, &shard, client, 10, &release);
    float params [10] = { 0 };
    cr_expect_eq (kd_client_pull_final (client, params, 100), -1, "not stopped yet");

    //  STOP comes while the worker pushes (nobody answers the PUSH): the
    //  push lets go of the shards' sockets, and the final pull still
    //  reaches them.
    kd_msg_t *stop = kd_msg_new (KD_MSG_STOP);
    kd_msg_set_str (stop, KD_F_REASON, "epochs");
    kd_msg_set_uint (stop, KD_F_VERSION, 5);
    s_reply (&sched, stop);
    float grad [10] = { 1 };
    cr_expect_eq (kd_client_push (client, grad, 1), -1, "STOP ends the push");
    cr_expect (kd_client_stopped (client));
    cr_expect_eq (kd_client_sleep (client, 50), -1);
    cr_expect_eq (kd_client_stop_version (client), 5);
    //  The STOP that ends the scheduler's loop names none: 5 stays.
    stop = kd_msg_new (KD_MSG_STOP);
    kd_msg_set_str (stop, KD_F_REASON, "epochs");
    s_reply (&sched, stop);
    zclock_sleep (100);

    s_final_t fin = { .shard = shard.sock };
    zactor_t *actor = zactor_new (s_final_actor, &fin);
    cr_expect_eq (kd_client_pull_final (client, params, 3000), 0);
    zactor_destroy (&actor);
    cr_expect_eq (fin.pulls, 1);
    cr_expect_eq (fin.pull_version, 5, "the final pull asks for version %llu",
                  (unsigned long long) fin.pull_version);
    cr_expect_eq (kd_client_version (client), 5);
    cr_expect_float_eq (params [9], 9.0f, 1e-6);
    cr_expect_eq (kd_client_stop_version (client), 5);

    //  Nobody answers now: the pull gives up at its deadline.
    int64_t t0 = zclock_mono ();
    cr_expect_eq (kd_client_pull_final (client, params, 300), -1);
    int64_t took = zclock_mono () - t0;
    cr_expect (took >= 250 && took < 2000, "gave up after %lld ms", (long long) took);

    cr_expect_eq (kd_client_leave (client, "done"), 0);
    kd_msg_t *leave = s_expect (&sched, KD_MSG_LEAVE);
    kd_msg_destroy (&leave);
    cr_expect_eq (kd_client_leave (client, "again"), -1);
    kd_client_destroy (&client);
    s_fake_destroy (&shard);
    s_fake_destroy (&sched);
}

Test (kd_client, welcome_for_an_mlp_without_hidden_units_is_refused)
{
    s_fake_t sched = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    cr_expect_eq (kd_client_register (client, 100), -1);
    kd_msg_destroy (&(kd_msg_t *) { s_expect (&sched, KD_MSG_HELLO) });
    kd_msg_t *w = s_welcome ("mlp", 10, "bsp");
    kd_msg_set_uint (w, KD_F_HIDDEN, 0);
    s_reply (&sched, w);
    cr_expect_eq (kd_client_register (client, 2000), -1);
    kd_client_destroy (&client);
    s_fake_destroy (&sched);
}

Test (kd_client, calls_before_start_fail_cleanly)
{
    s_fake_t sched = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    float buf [4] = { 0 };
    kd_release_t release;
    cr_expect_eq (kd_client_pull (client, buf), -1);
    cr_expect_eq (kd_client_push (client, buf, 1), -1);
    cr_expect_eq (kd_client_arrive (client, 0, &release), -1);
    cr_expect_eq (kd_client_wait_start (client, &release, 10), -1);
    cr_expect_eq (kd_client_telemetry (client), -1);
    cr_expect_eq (kd_client_leave (client, "test"), -1);
    kd_client_destroy (&client);
    s_fake_destroy (&sched);
}

Test (kd_client, ssp_pulls_only_when_the_cache_is_too_old)
{
    //  SSP with s = 2: a model pulled when the slowest member was at clock
    //  0 serves clocks up to 2; clock 3 needs a fresh pull.  Pushes carry
    //  the version each shard gave (its own count under ASP and SSP).
    s_fake_t sched = s_fake_new (), shard = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    s_register (&sched, client, "ssp");
    kd_release_t release;
    s_start_one (&sched, &shard, client, 7850, &release);
    s_cluster_t cluster = { .sched = sched.sock, .shard = shard.sock, .clocks = { 1, 3 } };
    zactor_t *actor = zactor_new (s_cluster_actor, &cluster);
    float *params = (float *) calloc (7850, sizeof (float));
    float *grad = (float *) calloc (7850, sizeof (float));
    cr_assert_eq (kd_client_pull (client, params), 0);              //  clock 0: pulls
    cr_assert_eq (kd_client_push (client, grad, 1), 0);
    cr_assert_eq (kd_client_arrive (client, 1.0f, &release), 0);    //  -> clock 1
    cr_expect_eq (release.clock, 1);
    cr_assert_eq (kd_client_pull (client, params), 0);              //  0 + 2 >= 1: cache
    cr_expect_eq (kd_client_pulls_skipped (client), 1);
    cr_assert_eq (kd_client_push (client, grad, 1), 0);
    cr_assert_eq (kd_client_arrive (client, 1.0f, &release), 0);    //  -> clock 3
    cr_expect_eq (release.clock, 3);
    cr_assert_eq (kd_client_pull (client, params), 0);              //  0 + 2 < 3: pulls
    cr_expect_eq (kd_client_pulls_skipped (client), 1);
    zactor_destroy (&actor);
    cr_expect_eq (cluster.pulls, 2);
    cr_expect_eq (cluster.push_base, 7, "the push names the shard's own version");
    free (params);
    free (grad);
    kd_client_destroy (&client);
    s_fake_destroy (&shard);
    s_fake_destroy (&sched);
}

Test (kd_client, a_readmission_release_supersedes_the_iteration)
{
    //  A RELEASE we did not wait for, with a newer clock, means we were
    //  declared dead and readmitted: the gradient in progress is not
    //  pushed, and arrive returns that RELEASE without an ARRIVE.
    s_fake_t sched = s_fake_new (), shard = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    s_register (&sched, client, "bsp");
    char ep [64];
    snprintf (ep, sizeof ep, S_EP, shard.port);
    s_reply (&sched, s_start (ep, 0, 7850));
    uint64_t rows [1] = { 5 }, later [2] = { 6, 7 };
    s_reply (&sched, s_release (0, 0, rows, 1));
    kd_release_t release;
    cr_assert_eq (kd_client_wait_start (client, &release, 2000), 0);
    s_reply (&sched, s_release (4, 5, later, 2));       //  the readmission
    s_cluster_t cluster = { .sched = sched.sock, .shard = shard.sock };
    zactor_t *actor = zactor_new (s_cluster_actor, &cluster);
    float *params = (float *) calloc (7850, sizeof (float));
    float *grad = (float *) calloc (7850, sizeof (float));
    //  The pull round reads the RELEASE from the scheduler's socket.
    cr_assert_eq (kd_client_pull (client, params), 0);
    cr_assert_eq (kd_client_push (client, grad, 1), 0);
    cr_assert_eq (kd_client_arrive (client, 1.0f, &release), 0);
    cr_expect_eq (release.clock, 5);
    cr_expect_eq (release.version, 4);
    cr_expect_eq (release.n_rows, 2);
    zactor_destroy (&actor);
    cr_expect_eq (cluster.arrivals, 0, "an ARRIVE went out for the superseded clock");
    cr_expect_eq (cluster.push_samples, 0, "the superseded gradient was pushed");
    free (params);
    free (grad);
    kd_client_destroy (&client);
    s_fake_destroy (&shard);
    s_fake_destroy (&sched);
}

//  Start a fake cluster's client on its first lease, for the refusal tests.
static kd_client_t *
s_started_client (s_fake_t *sched, s_fake_t *shard, kd_release_t *release)
{
    kd_client_t *client = s_client (sched);
    s_register (sched, client, "bsp");
    char ep [64];
    snprintf (ep, sizeof ep, S_EP, shard->port);
    s_reply (sched, s_start (ep, 0, 7850));
    uint64_t rows [3] = { 5, 17, 42 };
    s_reply (sched, s_release (0, 0, rows, 3));
    cr_assert_eq (kd_client_wait_start (client, release, 2000), 0);
    return client;
}

//  A shard's refusal (406) is final: the push is not resent, push returns
//  0, and ARRIVE reports it so the scheduler gives the rows back.
Test (kd_client, a_refused_push_is_not_resent_and_arrive_reports_it)
{
    s_fake_t sched = s_fake_new (), shard = s_fake_new ();
    kd_release_t release;
    kd_client_t *client = s_started_client (&sched, &shard, &release);
    s_cluster_t cluster = { .sched = sched.sock, .shard = shard.sock, .refuse = true };
    zactor_t *actor = zactor_new (s_cluster_actor, &cluster);
    float *params = (float *) calloc (7850, sizeof (float));
    float *grad = (float *) calloc (7850, sizeof (float));
    grad [0] = 1e3f;
    cr_assert_eq (kd_client_pull (client, params), 0);
    cr_assert_eq (kd_client_push (client, grad, release.n_rows), 0);
    cr_assert_eq (kd_client_arrive (client, 1.0f, &release), 0);
    //  Long enough for a resend after S_RETRY_BUSY_MS, had there been one.
    zclock_sleep (600);
    zactor_destroy (&actor);
    cr_expect_eq (cluster.pushes, 1, "a refused push was sent %d times", cluster.pushes);
    cr_expect_eq (cluster.arrive_refused, 1);
    cr_expect_eq (kd_client_refused (client), 1);
    free (params);
    free (grad);
    kd_client_destroy (&client);
    s_fake_destroy (&shard);
    s_fake_destroy (&sched);
}

//  A gradient with a NaN or an Inf never leaves the client.
Test (kd_client, a_gradient_that_is_not_finite_is_not_pushed)
{
    s_fake_t sched = s_fake_new (), shard = s_fake_new ();
    kd_release_t release;
    kd_client_t *client = s_started_client (&sched, &shard, &release);
    s_cluster_t cluster = { .sched = sched.sock, .shard = shard.sock };
    zactor_t *actor = zactor_new (s_cluster_actor, &cluster);
    float *params = (float *) calloc (7850, sizeof (float));
    float *grad = (float *) calloc (7850, sizeof (float));
    grad [4000] = NAN;
    cr_assert_eq (kd_client_pull (client, params), 0);
    cr_assert_eq (kd_client_push (client, grad, release.n_rows), 0);
    cr_assert_eq (kd_client_arrive (client, 1.0f, &release), 0);
    grad [4000] = INFINITY;
    cr_assert_eq (kd_client_pull (client, params), 0);
    cr_assert_eq (kd_client_push (client, grad, release.n_rows), 0);
    cr_assert_eq (kd_client_arrive (client, 1.0f, &release), 0);
    zactor_destroy (&actor);
    cr_expect_eq (cluster.pushes, 0, "a gradient that is not finite was pushed");
    cr_expect_eq (cluster.arrive_refused, 1);
    cr_expect_eq (kd_client_refused (client), 2);
    free (params);
    free (grad);
    kd_client_destroy (&client);
    s_fake_destroy (&shard);
    s_fake_destroy (&sched);
}

//  A keyed pull sends its keys as varint deltas only when START said the
//  cluster's shards read them (key_enc): a cluster older than that would
//  misread them, and gets plain uint64s.
typedef struct {
    kd_client_t *client;
    int rc;
} s_pull_job_t;

static void *
s_pull_keys_job (void *arg)
{
    s_pull_job_t *job = (s_pull_job_t *) arg;
    const uint64_t keys [3] = { 2, 9, 700 };
    float values [3];
    job->rc = kd_client_pull_keys (job->client, keys, 3, values);
    return NULL;
}

Test (kd_client, keyed_pulls_send_delta_keys_only_when_start_says_so)
{
    for (int delta = 0; delta < 2; delta++) {
        s_fake_t sched = s_fake_new (), shard = s_fake_new ();
        kd_client_t *client = s_client (&sched);
        cr_expect_eq (kd_client_register (client, 100), -1);
        kd_msg_t *hello = s_expect (&sched, KD_MSG_HELLO);
        kd_msg_destroy (&hello);
        kd_msg_t *welcome = s_welcome ("external", 1000, "bsp");
        const char *names [] = { "emb" };
        const uint64_t shape [] = { 1000, 1 };
        kd_msg_set_strs (welcome, KD_F_TENSORS, names, 1);
        kd_msg_set_uints (welcome, KD_F_SHAPES, shape, 2);
        kd_msg_set_uint (welcome, KD_F_KEYS, 1);
        s_reply (&sched, welcome);
        cr_assert_eq (kd_client_register (client, 2000), 0);
        cr_assert (kd_client_keyed (client));
        char ep [64];
        snprintf (ep, sizeof ep, S_EP, shard.port);
        kd_msg_t *start = s_start (ep, 0, 1000);
        if (delta)
            kd_msg_set_uint (start, KD_F_KEY_ENC, KD_KEY_ENC_DELTA);
        s_reply (&sched, start);
        const uint64_t rows [1] = { 1 };
        s_reply (&sched, s_release (0, 0, rows, 1));
        kd_release_t release;
        cr_assert_eq (kd_client_wait_start (client, &release, 2000), 0);

        s_pull_job_t job = { client, -9 };
        pthread_t thread;
        cr_assert_eq (pthread_create (&thread, NULL, s_pull_keys_job, &job), 0);
        kd_msg_t *pull = s_expect (&shard, KD_MSG_PULL);
        cr_expect_eq (kd_msg_uint (pull, KD_F_KEY_ENC), delta ? KD_KEY_ENC_DELTA : KD_KEY_ENC_U64);
        size_t n = 0;
        const uint64_t *k = kd_msg_keys (pull, &n);
        cr_expect (n == 3 && k [0] == 2 && k [1] == 9 && k [2] == 700);
        //  Deltas 2, 7 and 691: one, one and two bytes.
        cr_expect_eq (kd_msg_keys_wire_bytes (pull), delta ? 4u : 24u);
        kd_msg_destroy (&pull);
        kd_msg_t *ok = kd_msg_new (KD_MSG_PULL_OK);
        kd_msg_set_uint (ok, KD_F_VERSION, 0);
        kd_msg_set_uint (ok, KD_F_LO, 0);
        float values [3] = { 1, 2, 3 };
        zframe_t *data = zframe_new (values, sizeof values);
        kd_msg_set_data (ok, &data);
        kd_msg_set_uint (ok, KD_F_COUNT, 3);
        s_reply (&shard, ok);
        pthread_join (thread, NULL);
        cr_expect_eq (job.rc, 0, "delta %d", delta);
        kd_client_destroy (&client);
        s_fake_destroy (&shard);
        s_fake_destroy (&sched);
    }
}

//  A client registered and started under BSP, the whole softmax model in
//  one range at endpoint, holding its first RELEASE.
static kd_client_t *
s_started (s_fake_t *sched, const char *endpoint)
{
    kd_client_t *client = s_client (sched);
    s_register (sched, client, "bsp");
    s_reply (sched, s_start (endpoint, 0, 7850));
    uint64_t rows [2] = { 1, 2 };
    s_reply (sched, s_release (0, 0, rows, 2));
    kd_release_t release;
    cr_assert_eq (kd_client_wait_start (client, &release, 2000), 0);
    return client;
}

//  A dense pull on a thread of its own, while the test plays the shard.
static void *
s_dense_pull (void *arg)
{
    s_pull_job_t *job = (s_pull_job_t *) arg;
    float *params = (float *) calloc (7850, sizeof (float));
    job->rc = kd_client_pull (job->client, params);
    free (params);
    return NULL;
}

//  A START after the worker registered again names the ranges' primaries
//  of now: a ROUTE the scheduler sent while it counted the worker dead
//  never came, and the replica it wrote to may have become a backup.
Test (kd_client, a_start_after_registering_again_routes_to_the_primaries_of_now)
{
    s_fake_t sched = s_fake_new (), old = s_fake_new (), now = s_fake_new ();
    char ep_old [64], ep_now [64];
    snprintf (ep_old, sizeof ep_old, S_EP, old.port);
    snprintf (ep_now, sizeof ep_now, S_EP, now.port);
    kd_client_t *client = s_started (&sched, ep_old);
    uint64_t rows [2] = { 1, 2 };
    kd_release_t release;
    //  Registered again: WELCOME, a START naming another primary, a RELEASE.
    s_reply (&sched, s_welcome ("softmax", 7850, "bsp"));
    s_reply (&sched, s_start (ep_now, 0, 7850));
    s_reply (&sched, s_release (3, 1, rows, 2));
    cr_assert_eq (kd_client_wait_start (client, &release, 2000), 0);
    cr_expect_eq (release.clock, 1);
    //  The pull, from a thread, goes to the primary of now, which answers.
    s_pull_job_t job = { client, -9 };
    pthread_t thread;
    cr_assert_eq (pthread_create (&thread, NULL, s_dense_pull, &job), 0);
    kd_msg_t *pull = s_expect (&now, KD_MSG_PULL);
    kd_msg_destroy (&pull);
    kd_msg_t *ok = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_uint (ok, KD_F_VERSION, 3);
    kd_msg_set_uint (ok, KD_F_LO, 0);
    zframe_t *data = zframe_new (NULL, 7850 * sizeof (float));
    memset (zframe_data (data), 0, zframe_size (data));
    kd_msg_set_data (ok, &data);
    s_reply (&now, ok);
    pthread_join (thread, NULL);
    cr_expect_eq (job.rc, 0, "the pull from the primary of now failed");
    zsock_set_rcvtimeo (old.sock, 200);
    kd_msg_t *stray = NULL;
    cr_expect_neq (kd_msg_recv (old.sock, &stray, NULL, NULL), 0, "a request still went to the old replica");
    kd_msg_destroy (&stray);
    kd_client_destroy (&client);
    s_fake_destroy (&now);
    s_fake_destroy (&old);
    s_fake_destroy (&sched);
}

//  A START again with other key ranges (a cluster restarted with another
//  --shards) cannot be followed: the client fails instead of writing to
//  shards that would refuse it for ever.
Test (kd_client, a_start_again_with_other_ranges_is_an_error)
{
    s_fake_t sched = s_fake_new ();
    kd_client_t *client = s_started (&sched, "tcp://127.0.0.1:1");
    uint64_t rows [2] = { 1, 2 };
    kd_release_t release;
    s_reply (&sched, s_welcome ("softmax", 7850, "bsp"));
    kd_msg_t *start = kd_msg_new (KD_MSG_START);
    const char *endpoints [2] = { "tcp://127.0.0.1:1", "tcp://127.0.0.1:2" };
    uint64_t los [2] = { 0, 4000 }, his [2] = { 4000, 7850 };
    kd_msg_set_strs (start, KD_F_ENDPOINTS, endpoints, 2);
    kd_msg_set_uints (start, KD_F_LOS, los, 2);
    kd_msg_set_uints (start, KD_F_HIS, his, 2);
    s_reply (&sched, start);
    s_reply (&sched, s_release (3, 1, rows, 2));
    cr_expect_eq (kd_client_wait_start (client, &release, 2000), -1, "a START of other ranges was followed");
    kd_client_destroy (&client);
    s_fake_destroy (&sched);
}

//  Register a lease-ahead client with the fake scheduler, which grants it
//  under ASP.
static void
s_register_ahead (s_fake_t *sched, kd_client_t *client)
{
    kd_client_set_lease_ahead (client, true);
    cr_expect_eq (kd_client_register (client, 100), -1);
    kd_msg_t *hello = s_expect (sched, KD_MSG_HELLO);
    cr_expect_eq (kd_msg_uint (hello, KD_F_LEASE_AHEAD), 1, "HELLO does not ask for a lease ahead");
    kd_msg_destroy (&hello);
    kd_msg_t *welcome = s_welcome ("softmax", 7850, "asp");
    kd_msg_set_uint (welcome, KD_F_LEASE_AHEAD, 1);
    s_reply (sched, welcome);
    cr_assert_eq (kd_client_register (client, 2000), 0, "%s", kd_client_failure (client));
}

//  A lease-ahead worker computes clock c on the model it pulled after the
//  RELEASE of clock c - 1 (protocol 9.3.2): its PUSH names that pull's
//  version, and its ARRIVE that RELEASE's version.  Its first clock is
//  computed on the pull after its own RELEASE.  Each RELEASE's ahead rows
//  are at hand until the next arrival.
Test (kd_client, lease_ahead_names_the_pull_before_as_base)
{
    s_fake_t sched = s_fake_new (), shard = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    s_register_ahead (&sched, client);
    char ep [64];
    snprintf (ep, sizeof ep, S_EP, shard.port);
    s_reply (&sched, s_start (ep, 0, 7850));
    uint64_t rows [1] = { 5 }, next [2] = { 6, 99 };
    kd_msg_t *first = s_release (3, 0, rows, 1);
    kd_msg_set_uints (first, KD_F_AHEAD, next, 2);
    s_reply (&sched, first);
    kd_release_t release;
    cr_assert_eq (kd_client_wait_start (client, &release, 2000), 0);
    size_t n = 0;
    const uint64_t *ahead = kd_client_ahead_rows (client, &n);
    cr_assert_eq (n, 2);
    cr_expect_eq (ahead [0], 6);
    cr_expect_eq (ahead [1], 99);
    s_cluster_t cluster = { .sched = sched.sock, .shard = shard.sock, .ahead = true };
    zactor_t *actor = zactor_new (s_cluster_actor, &cluster);
    float *params [2] = { calloc (7850, sizeof (float)), calloc (7850, sizeof (float)) };
    float *grad = (float *) calloc (7850, sizeof (float));
    for (int step = 0; step < 3; step++) {
        cr_assert_eq (kd_client_pull (client, params [step % 2]), 0);     //  versions 7, 8, 9
        cr_assert_eq (kd_client_push (client, grad, release.n_rows), 0);
        cr_assert_eq (kd_client_arrive (client, 1.0f, &release), 0);     //  versions 10, 11, 12
        cr_expect_eq (release.clock, (uint64_t) step + 1);
        cr_expect_eq (release.rows [0], 50 + (uint64_t) step);
        ahead = kd_client_ahead_rows (client, &n);
        cr_assert_eq (n, 1);
        cr_expect_eq (ahead [0], 51 + (uint64_t) step);
    }
    zactor_destroy (&actor);
    cr_expect_eq (cluster.push_bases [0], 7, "clock 0: the pull after its release");
    cr_expect_eq (cluster.push_bases [1], 7, "clock 1: the pull of clock 0, not %llu",
                  (unsigned long long) cluster.push_bases [1]);
    cr_expect_eq (cluster.push_bases [2], 8);
    cr_expect_eq (cluster.arrive_bases [0], 3);
    cr_expect_eq (cluster.arrive_bases [1], 3, "clock 1: the release of clock 0, not %llu",
                  (unsigned long long) cluster.arrive_bases [1]);
    cr_expect_eq (cluster.arrive_bases [2], 10);
    free (params [0]);
    free (params [1]);
    free (grad);
    kd_client_destroy (&client);
    s_fake_destroy (&shard);
    s_fake_destroy (&sched);
}

//  A lease-ahead worker declared dead and readmitted while it waits for its
//  RELEASE takes the rejoin's RELEASE in that wait: its next clock is
//  computed on the pull after that RELEASE, whose versions it must name
//  (the scheduler's floor for a readmitted worker is that RELEASE's), not
//  those of the pull before, or every ARRIVE is refused.
Test (kd_client, lease_ahead_readmission_during_arrive_is_an_admission)
{
    s_fake_t sched = s_fake_new (), shard = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    s_register_ahead (&sched, client);
    char ep [64];
    snprintf (ep, sizeof ep, S_EP, shard.port);
    s_reply (&sched, s_start (ep, 0, 7850));
    uint64_t rows [1] = { 5 }, next [1] = { 6 };
    kd_msg_t *first = s_release (3, 0, rows, 1);
    kd_msg_set_uints (first, KD_F_AHEAD, next, 1);
    s_reply (&sched, first);
    kd_release_t release;
    cr_assert_eq (kd_client_wait_start (client, &release, 2000), 0);
    cr_expect (kd_client_admitted (client), "the first release admits us");
    s_cluster_t cluster = { .sched = sched.sock, .shard = shard.sock, .ahead = true,
                            .rejoin_at = 2, .shard_ep = ep };
    zactor_t *actor = zactor_new (s_cluster_actor, &cluster);
    float *params [2] = { calloc (7850, sizeof (float)), calloc (7850, sizeof (float)) };
    float *grad = (float *) calloc (7850, sizeof (float));
    bool admitted [3] = { false };
    for (int step = 0; step < 3; step++) {
        cr_assert_eq (kd_client_pull (client, params [step % 2]), 0);     //  versions 7, 8, 9
        cr_assert_eq (kd_client_push (client, grad, release.n_rows), 0);
        cr_assert_eq (kd_client_arrive (client, 1.0f, &release), 0);
        admitted [step] = kd_client_admitted (client);
    }
    zactor_destroy (&actor);
    //  Only the rejoin's release (the answer to clock 1's arrival) admits
    //  us: its lease is not the one named ahead.
    cr_expect (!admitted [0] && admitted [1] && !admitted [2], "admitted: %d %d %d",
               admitted [0], admitted [1], admitted [2]);
    cr_expect_eq (cluster.push_bases [1], 7, "clock 1: the pull of clock 0");
    cr_expect_eq (cluster.arrive_bases [1], 3);
    cr_expect_eq (cluster.push_bases [2], 9, "readmitted: the pull after the rejoin, not %llu",
                  (unsigned long long) cluster.push_bases [2]);
    cr_expect_eq (cluster.arrive_bases [2], 30, "readmitted: the rejoin's release, not %llu",
                  (unsigned long long) cluster.arrive_bases [2]);
    free (params [0]);
    free (params [1]);
    free (grad);
    kd_client_destroy (&client);
    s_fake_destroy (&shard);
    s_fake_destroy (&sched);
}

//  A scheduler that refuses the lease ahead (a phase model) ends the
//  registration at once with its reason; one that does not know the field
//  (its WELCOME does not grant it) is refused by the client.  A plain
//  worker never asks, and another ERROR does not end its registration.
Test (kd_client, lease_ahead_refused_or_not_granted_ends_the_registration)
{
    s_fake_t sched = s_fake_new ();
    kd_client_t *client = s_client (&sched);
    kd_client_set_lease_ahead (client, true);
    cr_expect_str_eq (kd_client_failure (client), "");
    cr_expect_eq (kd_client_register (client, 100), -1);
    kd_msg_destroy (&(kd_msg_t *) { s_expect (&sched, KD_MSG_HELLO) });
    kd_msg_t *refusal = kd_msg_new_error (NULL, KD_ERR_STATE,
                                          "lease_ahead needs consistency asp or ssp; this cluster runs bsp");
    kd_msg_set_uint (refusal, KD_F_LEASE_AHEAD, 1);
    s_reply (&sched, refusal);
    uint64_t t0 = kd_now_ms ();
    cr_expect_eq (kd_client_register (client, 5000), -1);
    cr_expect_lt (kd_now_ms () - t0, 2000, "waited for the timeout");
    cr_expect (strstr (kd_client_failure (client), "this cluster runs bsp"), "failure: '%s'",
               kd_client_failure (client));
    kd_client_destroy (&client);

    client = s_client (&sched);
    kd_client_set_lease_ahead (client, true);
    cr_expect_eq (kd_client_register (client, 100), -1);
    kd_msg_destroy (&(kd_msg_t *) { s_expect (&sched, KD_MSG_HELLO) });
    s_reply (&sched, s_welcome ("softmax", 7850, "asp"));
    cr_expect_eq (kd_client_register (client, 2000), -1);
    cr_expect (strstr (kd_client_failure (client), "lease ahead"), "failure: '%s'",
               kd_client_failure (client));
    cr_expect_eq (kd_client_param_count (client), 0);
    kd_client_destroy (&client);

    client = s_client (&sched);
    cr_expect_eq (kd_client_register (client, 100), -1);
    kd_msg_t *hello = s_expect (&sched, KD_MSG_HELLO);
    cr_expect_not (kd_msg_has (hello, KD_F_LEASE_AHEAD));
    kd_msg_destroy (&hello);
    s_reply (&sched, kd_msg_new_error (NULL, KD_ERR_UNAVAILABLE, "not now"));
    cr_expect_eq (kd_client_register (client, 300), -1);
    cr_expect_str_eq (kd_client_failure (client), "");
    kd_client_destroy (&client);
    s_fake_destroy (&sched);
}
