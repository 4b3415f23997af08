/*  kd_chain: a replica's link to its successor (see kd_chain.h).
*/
#include "kd_chain.h"

//  An answer that waits for the successor, or the mark of a state transfer.
typedef struct {
    kd_msg_t *reply;            //  NULL for a SYNC mark
    kd_chain_dest_t dest;       //  where it goes
} s_waiting_t;

struct _kd_chain_t {
    zsock_t *router;            //  answers to ROUTER peers (borrowed)
    kd_peer_t *peer;            //  answers to the scheduler (borrowed)
    int64_t max_msg;            //  socket limit
    zsock_t *next;              //  DEALER to the successor, or NULL
    char endpoint [256];        //  its endpoint
    zlistx_t *waiting;          //  s_waiting_t, oldest first
    zlistx_t *held;             //  s_waiting_t the successor refused: a
                                //  state transfer answers them
    uint64_t bytes;             //  data bytes forwarded
};

static void
s_waiting_destroy (void **item)
{
    s_waiting_t *w = (s_waiting_t *) *item;
    if (w) {
        kd_msg_destroy (&w->reply);
        free (w);
        *item = NULL;
    }
}

//  Send an answer where it goes.
static void
s_answer (kd_chain_t *self, kd_msg_t **reply_p, kd_chain_dest_t dest)
{
    if (!*reply_p)
        return;
    //  The short path: the scheduler hears of a staged push when the
    //  worker does, once the whole chain holds it.
    if (dest == KD_CHAIN_ROUTER_STAGED) {
        kd_msg_t *staged = kd_msg_new (KD_MSG_STAGED);
        kd_msg_set_uint (staged, KD_F_RANK, kd_msg_uint (*reply_p, KD_F_RANK));
        kd_msg_set_uint (staged, KD_F_CLOCK, kd_msg_uint (*reply_p, KD_F_CLOCK));
        if (kd_msg_has (*reply_p, KD_F_REG))
            kd_msg_set_uint (staged, KD_F_REG, kd_msg_uint (*reply_p, KD_F_REG));
        kd_peer_send (self->peer, &staged);
    }
    if (dest == KD_CHAIN_SCHEDULER)
        kd_peer_send (self->peer, reply_p);
    else
        kd_msg_send (reply_p, self->router);
}

kd_chain_t *
kd_chain_new (zsock_t *router, kd_peer_t *peer, int64_t max_msg)
{
    kd_chain_t *self = (kd_chain_t *) zmalloc (sizeof *self);
    self->router = router;
    self->peer = peer;
    self->max_msg = max_msg;
    self->waiting = zlistx_new ();
    zlistx_set_destructor (self->waiting, s_waiting_destroy);
    self->held = zlistx_new ();
    zlistx_set_destructor (self->held, s_waiting_destroy);
    return self;
}

void
kd_chain_destroy (kd_chain_t **self_p)
{
    assert (self_p);
    kd_chain_t *self = *self_p;
    if (!self)
        return;
    zsock_destroy (&self->next);
    zlistx_destroy (&self->waiting);
    zlistx_destroy (&self->held);
    free (self);
    *self_p = NULL;
}

//  Answer every entry of a list, or with until_mark only those up to and
//  including the first mark.
static void
s_release (kd_chain_t *self, zlistx_t *list, bool until_mark)
{
    s_waiting_t *w;
    while ((w = (s_waiting_t *) zlistx_first (list))) {
        bool mark = w->reply == NULL;
        s_answer (self, &w->reply, w->dest);
        zlistx_delete (list, zlistx_cursor (list));
        if (mark && until_mark)
            break;
    }
}

//  Answer everything that waits: we hold every write we applied.
static void
s_flush (kd_chain_t *self)
{
    s_release (self, self->held, false);
    s_release (self, self->waiting, false);
}

int
kd_chain_set_successor (kd_chain_t *self, const char *endpoint)
{
    assert (self);
    //  Whatever the old successor still had in flight is lost with its
    //  connection; a new one gets our whole state instead.
    if (self->next) {
        zsock_set_linger (self->next, 0);
        zsock_destroy (&self->next);
    }
    self->endpoint [0] = 0;
    if (!endpoint || !*endpoint) {
        s_flush (self);
        return 0;
    }
    self->next = zsock_new (ZMQ_DEALER);
    kd_socket_harden (self->next, self->max_msg);
    kd_curve_client (kd_curve_process (), self->next);
    if (zsock_connect (self->next, "%s", endpoint) != 0) {
        kd_error ("chain: cannot connect to successor endpoint=%s", endpoint);
        zsock_destroy (&self->next);
        s_flush (self);
        return -1;
    }
    snprintf (self->endpoint, sizeof self->endpoint, "%s", endpoint);
    kd_info ("chain: successor endpoint=%s", endpoint);
    return 0;
}

void
kd_chain_discard (kd_chain_t *self)
{
    assert (self);
    if (zlistx_size (self->waiting) + zlistx_size (self->held) > 0)
        kd_warn ("chain: %zu answers discarded, their writes may not be replicated",
                 zlistx_size (self->waiting) + zlistx_size (self->held));
    zlistx_purge (self->waiting);
    zlistx_purge (self->held);
}

const char *
kd_chain_endpoint (kd_chain_t *self)
{
    assert (self);
    return self->endpoint;
}

bool
kd_chain_linked (kd_chain_t *self)
{
    assert (self);
    return self->next != NULL;
}

zsock_t *
kd_chain_socket (kd_chain_t *self)
{
    assert (self);
    return self->next;
}

//  Append an answer (or a mark, with reply NULL) to the FIFO.
static void
s_wait (kd_chain_t *self, kd_msg_t **reply_p, kd_chain_dest_t dest)
{
    s_waiting_t *w = (s_waiting_t *) zmalloc (sizeof *w);
    w->reply = reply_p ? *reply_p : NULL;
    if (reply_p)
        *reply_p = NULL;
    w->dest = dest;
    zlistx_add_end (self->waiting, w);
}

void
kd_chain_submit (kd_chain_t *self, kd_msg_t **forward_p, kd_msg_t **reply_p, kd_chain_dest_t dest)
{
    assert (self && forward_p && reply_p);
    if (!self->next || !*forward_p) {
        kd_msg_destroy (forward_p);
        s_answer (self, reply_p, dest);
        return;
    }
    //  The successor learns it is a forward: a replica, not a client.
    kd_msg_set_str (*forward_p, KD_F_ROLE, "shard");
    zframe_t *data = kd_msg_data (*forward_p);
    self->bytes += data ? zframe_size (data) : 0;
    kd_msg_send (forward_p, self->next);
    s_wait (self, reply_p, dest);
}

void
kd_chain_send_part (kd_chain_t *self, kd_msg_t **part_p)
{
    assert (self && part_p);
    if (!self->next) {
        kd_msg_destroy (part_p);
        return;
    }
    zframe_t *data = kd_msg_data (*part_p);
    self->bytes += data ? zframe_size (data) : 0;
    kd_msg_send (part_p, self->next);
}

void
kd_chain_end_sync (kd_chain_t *self, uint64_t version, uint64_t gen)
{
    assert (self);
    if (!self->next)
        return;
    kd_msg_t *end = kd_msg_new (KD_MSG_SYNC);
    kd_msg_set_str (end, KD_F_KIND, "end");
    kd_msg_set_uint (end, KD_F_VERSION, version);
    kd_msg_set_uint (end, KD_F_GEN, gen);
    kd_msg_send (&end, self->next);
    s_wait (self, NULL, KD_CHAIN_ROUTER);
}

int
kd_chain_on_answer (kd_chain_t *self)
{
    assert (self);
    if (!self->next)
        return 0;
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    int rc = kd_msg_recv (self->next, &msg, NULL, &err);
    if (rc == -2) {
        kd_warn ("chain: malformed answer from successor endpoint=%s reason=\"%s\"",
                 self->endpoint, err.reason);
        return -1;
    }
    if (rc != 0)
        return 0;
    kd_msg_type_t type = kd_msg_type (msg);
    rc = 0;
    //  The successor answers each forward and each transfer once, in
    //  order.  A refused forward is held until a transfer covers it; a
    //  transfer's SYNC_OK answers what waited before it, and what was held.
    s_waiting_t *w = (s_waiting_t *) zlistx_first (self->waiting);
    if (type == KD_MSG_ERROR) {
        bool transfer = !strcmp (kd_msg_str (msg, KD_F_KIND), "sync");
        kd_warn ("chain: successor endpoint=%s refused %s code=%llu reason=\"%s\"", self->endpoint,
                 transfer ? "our state" : "a write",
                 (unsigned long long) kd_msg_uint (msg, KD_F_CODE), kd_msg_str (msg, KD_F_REASON));
        //  A failed transfer's mark goes: the next transfer brings its own.
        //  What waited before it stays held until one succeeds.
        if (w && w->reply)
            zlistx_add_end (self->held, zlistx_detach_cur (self->waiting));
        else
        if (w && transfer)
            zlistx_delete (self->waiting, zlistx_cursor (self->waiting));
        rc = -1;
    }
    else
    if (type == KD_MSG_SYNC_OK) {
        s_release (self, self->waiting, true);
        s_release (self, self->held, false);
        kd_info ("chain: successor endpoint=%s synced version=%llu", self->endpoint,
                 (unsigned long long) kd_msg_uint (msg, KD_F_VERSION));
    }
    else
    if (type == KD_MSG_PUSH_OK || type == KD_MSG_COMMIT_OK || type == KD_MSG_INIT_OK) {
        //  A mark in front means answers were lost with a connection: the
        //  transfer that follows settles them.
        if (w && w->reply) {
            s_answer (self, &w->reply, w->dest);
            zlistx_delete (self->waiting, zlistx_cursor (self->waiting));
        }
        else
            kd_debug ("chain: %s from successor with %s waiting", kd_msg_type_name (type),
                      w ? "a state transfer" : "nothing");
    }
    else
    if (type != KD_MSG_HEARTBEAT)
        kd_warn ("chain: unexpected %s from successor", kd_msg_type_name (type));
    kd_msg_destroy (&msg);
    return rc;
}

size_t
kd_chain_waiting (kd_chain_t *self)
{
    assert (self);
    return zlistx_size (self->waiting) + zlistx_size (self->held);
}

uint64_t
kd_chain_bytes (kd_chain_t *self)
{
    assert (self);
    return self->bytes;
}
