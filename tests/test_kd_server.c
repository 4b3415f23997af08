/*  kd_server: the one request loop, with a small service of its own.

    The loop runs in an actor over a ROUTER on loopback; the test is its
    client.  It dispatches by type, answers malformed and unknown requests
    with ERROR, never answers an ERROR, lets a gate refuse, echoes
    heartbeats, reads other sockets, and ends on kd_server_stop or "$TERM".
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include "kd_server.h"
#include "kd_guard.h"
#include "kd_testutil.h"

typedef struct {
    kd_server_t *server;
    zsock_t *router;
    bool open;                  //  the gate admits everything
    int stats, pokes;           //  handled requests, reader calls
    int run_rc;
} s_state_t;

static char s_endpoint [64];
static char s_poke_endpoint [64];   //  a new name each start: closing a
                                    //  bound socket frees its name later
static zsock_t *s_poke;         //  the test's end of the extra reader

//  STATS: answered STATS_OK; a STATS with rank 99 stops the loop.
static void
s_on_stats (void *state, kd_msg_t *msg)
{
    s_state_t *self = (s_state_t *) state;
    self->stats++;
    kd_msg_t *ok = kd_msg_new (KD_MSG_STATS_OK);
    kd_msg_set_routing_id (ok, kd_msg_routing_id (msg));
    kd_msg_set_uint (ok, KD_F_RANK, (uint64_t) self->stats);
    kd_msg_set_uint (ok, KD_F_VERSION, 0);
    uint64_t counters [1] = { 0 };
    kd_msg_set_uints (ok, KD_F_COUNTERS, counters, 1);
    cr_assert_eq (kd_msg_send (&ok, self->router), 0, "the test's STATS_OK did not encode");
    if (kd_msg_uint (msg, KD_F_RANK) == 99)
        kd_server_stop (self->server);
}

static bool
s_gate (void *state, kd_msg_t *msg)
{
    s_state_t *self = (s_state_t *) state;
    if (!self->open)
        kd_server_error (self->server, kd_msg_routing_id (msg), KD_ERR_UNAVAILABLE, "closed");
    return self->open;
}

static void
s_on_poke (void *state, zsock_t *sock)
{
    s_state_t *self = (s_state_t *) state;
    char *text = zstr_recv (sock);
    self->pokes++;
    //  "open" opens the gate; "end" removes this reader.
    if (text && streq (text, "open"))
        self->open = true;
    if (text && streq (text, "end"))
        kd_server_reader_end (self->server, sock);
    zstr_free (&text);
    zstr_sendf (sock, "%d", self->pokes);
}

static s_state_t *s_result;

static void
s_actor (zsock_t *pipe, void *args)
{
    s_state_t *self = (s_state_t *) zmalloc (sizeof *self);
    //  A port of the kernel's choosing: suites run side by side.
    self->router = zsock_new_router ("tcp://127.0.0.1:*");
    assert (self->router);
    snprintf (s_endpoint, sizeof s_endpoint, "%s", zsock_endpoint (self->router));
    kd_guard_t *guard = kd_guard_new (self->router, "test", 0, 0);
    zsock_t *poke = zsock_new_pair (s_poke_endpoint);
    assert (poke);
    self->server = kd_server_new (KD_SVC_SHARD, self->router, guard, self);
    kd_server_on (self->server, KD_MSG_STATS, s_on_stats);
    kd_server_set_gate (self->server, s_gate);
    kd_server_open (self->server, KD_MSG_STATS);
    //  Past the gate but served by no handler: 422.
    kd_server_open (self->server, KD_MSG_COMMIT_OK);
    kd_server_echo_heartbeats (self->server);
    kd_server_open (self->server, KD_MSG_HEARTBEAT);
    kd_server_reader (self->server, poke, s_on_poke);
    zsock_signal (pipe, 0);
    //  With args, wait for the $TERM first: asking the pipe takes the
    //  wake-up its descriptor carried, so the loop cannot count on it.
    while (args && !(zsock_events (pipe) & ZMQ_POLLIN))
        zclock_sleep (1);
    self->run_rc = kd_server_run (self->server, pipe);
    kd_server_destroy (&self->server);
    zsock_destroy (&poke);
    kd_guard_destroy (&guard);
    zsock_destroy (&self->router);
    s_result = self;
}

static zactor_t *
s_start_with (void *args)
{
    static int starts = 0;
    snprintf (s_poke_endpoint, sizeof s_poke_endpoint, "@inproc://kd-server-poke-%d", ++starts);
    s_result = NULL;
    zactor_t *actor = zactor_new (s_actor, args);
    s_poke = zsock_new (ZMQ_PAIR);
    zsock_connect (s_poke, "%s", s_poke_endpoint + 1);
    zsock_set_rcvtimeo (s_poke, 3000);
    return actor;
}

static zactor_t *
s_start (void)
{
    return s_start_with (NULL);
}

static void
s_end (zactor_t **actor)
{
    zactor_destroy (actor);
    zsock_destroy (&s_poke);
    free (s_result);
    s_result = NULL;
}

//  The next reply on sock, or NULL after 3 s.
static kd_msg_t *
s_reply (zsock_t *sock)
{
    return kd_test_recv (sock);
}

Test (kd_server, dispatches_refuses_and_echoes)
{
    zactor_t *actor = s_start ();
    zsock_t *client = kd_test_dealer (s_endpoint);
    kd_msg_t *req = kd_msg_new (KD_MSG_STATS);
    kd_msg_send (&req, client);
    kd_msg_t *reply = s_reply (client);
    cr_assert (reply && kd_msg_type (reply) == KD_MSG_STATS_OK, "STATS was not dispatched");
    kd_msg_destroy (&reply);
    //  A type the service has no handler for: 422.
    req = kd_msg_new (KD_MSG_COMMIT_OK);
    kd_msg_set_uint (req, KD_F_VERSION, 1);
    kd_msg_send (&req, client);
    reply = s_reply (client);
    cr_expect (reply && kd_msg_type (reply) == KD_MSG_ERROR
               && kd_msg_uint (reply, KD_F_CODE) == KD_ERR_UNKNOWN_TYPE, "no 422 for an unserved type");
    kd_msg_destroy (&reply);
    //  Malformed: the codec's 400.
    kd_test_send_raw (client, "hello world", 11, NULL, 0);
    reply = s_reply (client);
    cr_expect (reply && kd_msg_type (reply) == KD_MSG_ERROR
               && kd_msg_uint (reply, KD_F_CODE) == KD_ERR_MALFORMED, "no 400 for garbage");
    kd_msg_destroy (&reply);
    //  The gate refuses a PULL while closed (the gate's own 503)...
    req = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (req, KD_F_VERSION, 0);
    kd_msg_send (&req, client);
    reply = s_reply (client);
    cr_expect (reply && kd_msg_uint (reply, KD_F_CODE) == KD_ERR_UNAVAILABLE, "the gate did not answer");
    kd_msg_destroy (&reply);
    //  ... and an ERROR is never answered, while a HEARTBEAT is echoed.
    kd_msg_t *error = kd_msg_new_error (NULL, KD_ERR_INTERNAL, "a peer's error");
    kd_msg_send (&error, client);
    req = kd_msg_new (KD_MSG_HEARTBEAT);
    kd_msg_send (&req, client);
    reply = s_reply (client);
    cr_expect (reply && kd_msg_type (reply) == KD_MSG_HEARTBEAT, "the ERROR was answered, or no echo");
    kd_msg_destroy (&reply);
    zsock_destroy (&client);
    s_end (&actor);
}

Test (kd_server, readers_and_the_gate_opened_by_one)
{
    zactor_t *actor = s_start ();
    zstr_send (s_poke, "open");
    char *answer = zstr_recv (s_poke);
    cr_assert (answer && streq (answer, "1"), "the reader was not called");
    zstr_free (&answer);
    zsock_t *client = kd_test_dealer (s_endpoint);
    //  Open now: a PULL passes the gate, and with no handler gets 422.
    kd_msg_t *req = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (req, KD_F_VERSION, 0);
    kd_msg_send (&req, client);
    kd_msg_t *reply = s_reply (client);
    cr_expect (reply && kd_msg_uint (reply, KD_F_CODE) == KD_ERR_UNKNOWN_TYPE, "the gate stayed closed");
    kd_msg_destroy (&reply);
    //  A removed reader is not read again.
    zstr_send (s_poke, "end");
    answer = zstr_recv (s_poke);
    cr_expect (answer && streq (answer, "2"));
    zstr_free (&answer);
    zstr_send (s_poke, "again");
    answer = zstr_recv (s_poke);
    cr_expect_null (answer, "a removed reader was read");
    zstr_free (&answer);
    zsock_destroy (&client);
    s_end (&actor);
}

Test (kd_server, stops_on_its_service_or_on_term)
{
    //  "$TERM" (zactor_destroy) ends the loop with 1.
    zactor_t *actor = s_start ();
    zactor_destroy (&actor);
    cr_assert (s_result);
    cr_expect_eq (s_result->run_rc, 1);
    zsock_destroy (&s_poke);
    free (s_result);
    //  The service's kd_server_stop ends it with 0, after the request.
    actor = s_start ();
    zsock_t *client = kd_test_dealer (s_endpoint);
    kd_msg_t *req = kd_msg_new (KD_MSG_STATS);
    kd_msg_set_uint (req, KD_F_RANK, 99);
    kd_msg_send (&req, client);
    kd_msg_t *reply = s_reply (client);
    cr_expect (reply && kd_msg_type (reply) == KD_MSG_STATS_OK);
    kd_msg_destroy (&reply);
    //  The actor's end is a signal on its pipe (CZMQ's), which
    //  zactor_destroy collects.
    zmq_pollitem_t item = { zsock_resolve (actor), 0, ZMQ_POLLIN, 0 };
    cr_assert (zmq_poll (&item, 1, 3000) == 1, "kd_server_stop did not end the loop");
    zactor_destroy (&actor);
    cr_assert (s_result);
    cr_expect_eq (s_result->run_rc, 0);
    zsock_destroy (&client);
    s_end (&actor);
}

Test (kd_server, a_term_whose_wakeup_was_taken_still_ends_it)
{
    //  The loop polls the pipe by its descriptor, which says only that
    //  commands arrived; here they were taken before the loop began, so
    //  only asking the pipe outright finds the $TERM (a hang otherwise,
    //  which the suite's timeout reports).
    zactor_t *actor = s_start_with ((void *) 1);
    zactor_destroy (&actor);
    cr_assert (s_result, "the loop did not end on a $TERM already taken from its descriptor");
    cr_expect_eq (s_result->run_rc, 1);
    s_end (&actor);
}
