/*  kd_aggregator: `kudus aggregate`, a node of the barrier tree (see .h).
*/
#include "kd_aggregator.h"
#include "kd_cli.h"
#include "kd_bundle.h"
#include "kd_curve.h"
#include "kd_guard.h"
#include "kd_server.h"
#include "kd_service.h"

typedef struct {
    zsock_t *router;            //  workers
    zsock_t *upstream;          //  the scheduler
    kd_guard_t *guard;          //  connection and malformed-input limits
    kd_server_t *server;        //  the request loop
    kd_bundle_t *bundle;        //  workers' messages waiting to go up
    size_t max_batch;           //  items per RELAY
    uint64_t relays_up, items_up;       //  counters for the exit line
    uint64_t relays_down, items_down;
    uint64_t refused;           //  messages answered with ERROR here
    uint64_t dropped;           //  RELAYs the scheduler's queue had no room for
    bool dropping;              //  the last RELAY up was dropped
} self_t;

static void
s_send_up (self_t *self)
{
    size_t items = kd_bundle_items (self->bundle);
    kd_msg_t *relay = kd_bundle_take (self->bundle);
    if (!relay)
        return;
    //  The send never blocks: with the scheduler gone and the queue full, the
    //  RELAY is dropped (workers resend what matters: HELLO, ARRIVE) and the
    //  loop keeps serving.  One line per outage, not per RELAY.
    if (kd_msg_send (&relay, self->upstream) == 0) {
        self->relays_up++;
        self->items_up += items;
        if (self->dropping)
            kd_info ("scheduler reachable again after %llu dropped RELAYs",
                     (unsigned long long) self->dropped);
        self->dropping = false;
    }
    else {
        if (!self->dropping)
            kd_warn ("cannot send to the scheduler (%s): dropping RELAYs until it answers",
                     zmq_strerror (zmq_errno ()));
        self->dropping = true;
        self->dropped++;
    }
}

static void
s_refuse (self_t *self, zframe_t *id, int code, const char *reason)
{
    self->refused++;
    kd_msg_t *error = kd_msg_new_error (id, code, reason);
    kd_msg_send (&error, self->router);
}

//  Answer errors without the loop's log line: a refusal here is routine
//  (a full bundle, a data frame), and the counter shows them.
static void
s_on_error (void *state, zframe_t *id, int code, const char *reason)
{
    if (id)
        s_refuse ((self_t *) state, id, code, reason);
}

//  One message from a worker, checked by the loop against the scheduler's
//  role table: bundled to go up.
static void
s_on_worker (void *state, kd_msg_t *msg)
{
    self_t *self = (self_t *) state;
    zframe_t *rid = kd_msg_routing_id (msg);
    if (kd_msg_type (msg) == KD_MSG_RELAY || kd_msg_data (msg)) {
        s_refuse (self, rid, KD_ERR_MALFORMED, "a worker's message to the scheduler has no data frame");
        kd_server_strike (self->server, rid, "data frame for the scheduler");
    }
    else
    if (kd_bundle_add_msg (self->bundle, rid, kd_server_source (self->server), msg) != 0) {
        //  Full: what is bundled goes up now, and this starts the next.
        s_send_up (self);
        if (kd_bundle_add_msg (self->bundle, rid, kd_server_source (self->server), msg) != 0)
            s_refuse (self, rid, KD_ERR_LIMIT, "message too large to relay");
    }
    if (kd_bundle_items (self->bundle) >= self->max_batch)
        s_send_up (self);
}

//  After each turn: a burst is whatever was queued; it goes up now.
static int
s_on_tick (void *state)
{
    s_send_up ((self_t *) state);
    return 1000;
}

//  One message from the scheduler: a RELAY is sent on item by item, as the
//  bytes the scheduler encoded.
static void
s_on_scheduler_one (self_t *self)
{
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    int rc = kd_msg_recv (self->upstream, &msg, NULL, &err);
    if (rc == -2) {
        kd_warn ("malformed message from the scheduler: %s", err.reason);
        return;
    }
    if (rc != 0)
        return;
    if (kd_msg_type (msg) == KD_MSG_ERROR)
        kd_warn ("scheduler error code=%llu reason=\"%s\"",
                 (unsigned long long) kd_msg_uint (msg, KD_F_CODE), kd_msg_str (msg, KD_F_REASON));
    else
    if (kd_msg_type (msg) != KD_MSG_RELAY)
        kd_warn ("unexpected %s from the scheduler", kd_msg_type_name (kd_msg_type (msg)));
    else {
        size_t offset = 0, index = 0;
        kd_bundle_item_t item;
        char reason [160];
        void *router = zsock_resolve (self->router);
        while ((rc = kd_bundle_next (msg, &offset, &index, &item, reason, sizeof reason)) == 0) {
            //  A worker that went away drops its messages (ROUTER's default).
            if (zmq_send (router, item.id, item.id_size, ZMQ_SNDMORE) >= 0)
                zmq_send (router, item.msg, item.msg_size, 0);
        }
        self->relays_down++;
        self->items_down += index;
        if (rc == -2)
            kd_warn ("malformed RELAY from the scheduler: %s", reason);
    }
    kd_msg_destroy (&msg);
}

//  The scheduler's socket is readable: up to 64 messages per turn.
static void
s_on_scheduler (void *state, zsock_t *upstream)
{
    for (int i = 0; i < 64; i++) {
        s_on_scheduler_one ((self_t *) state);
        if (!(zsock_events (upstream) & ZMQ_POLLIN))
            break;
    }
}

int
kd_aggregator_run (kd_config_t *config, zsock_t *pipe)
{
    int rc = 1;
    self_t self_s = { .max_batch = (size_t) kd_config_int (config, "max-batch") }, *self = &self_s;
    self->bundle = kd_bundle_new ();
    self->router = zsock_new (ZMQ_ROUTER);
    self->upstream = zsock_new (ZMQ_DEALER);
    assert (self->router && self->upstream);
    kd_socket_harden (self->router, kd_config_int (config, "max-msg-bytes"));
    kd_curve_server (kd_curve_process (), self->router);
    kd_curve_client (kd_curve_process (), self->upstream);
    self->guard = kd_guard_new (self->router, "aggregator", (int) kd_config_int (config, "max-connections"),
                                (int) kd_config_int (config, "max-malformed"));
    zsock_set_linger (self->upstream, 1000);
    zsock_set_sndtimeo (self->upstream, 0);
    if (zsock_bind (self->router, "%s", kd_config_str (config, "bind")) < 0) {
        kd_error ("cannot bind endpoint=%s: %s", kd_config_str (config, "bind"), zmq_strerror (zmq_errno ()));
        goto cleanup;
    }
    if (zsock_connect (self->upstream, "%s", kd_config_str (config, "scheduler")) < 0) {
        kd_error ("cannot connect to the scheduler endpoint=%s: %s", kd_config_str (config, "scheduler"),
                  zmq_strerror (zmq_errno ()));
        goto cleanup;
    }
    kd_warn_open_bind (kd_config_str (config, "bind"), kd_curve_enabled (kd_curve_process ()));
    kd_info ("aggregating endpoint=%s scheduler=%s max_batch=%zu", zsock_endpoint (self->router),
             kd_config_str (config, "scheduler"), self->max_batch);
    kd_service_ready (pipe);
    self->server = kd_server_new (KD_SVC_SCHEDULER, self->router, self->guard, self);
    kd_server_on (self->server, KD_MSG_TYPE_COUNT, s_on_worker);
    kd_server_set_error (self->server, s_on_error);
    kd_server_set_tick (self->server, s_on_tick);
    kd_server_set_burst (self->server, 4 * self->max_batch);
    kd_server_reader (self->server, self->upstream, s_on_scheduler);
    kd_server_run (self->server, pipe);
    kd_server_destroy (&self->server);
    kd_info ("aggregator done relays_up=%llu items_up=%llu relays_down=%llu items_down=%llu refused=%llu "
             "dropped=%llu", (unsigned long long) self->relays_up, (unsigned long long) self->items_up,
             (unsigned long long) self->relays_down, (unsigned long long) self->items_down,
             (unsigned long long) self->refused, (unsigned long long) self->dropped);
    rc = 0;
cleanup:
    kd_guard_destroy (&self->guard);
    zsock_destroy (&self->router);
    zsock_destroy (&self->upstream);
    kd_bundle_destroy (&self->bundle);
    return rc;
}

int
kd_aggregator_main (int argc, char **argv)
{
    return kd_service_main (argc, argv, KD_SVC_AGGREGATOR, "kudus aggregate", "aggregator",
                            kd_aggregator_run);
}
