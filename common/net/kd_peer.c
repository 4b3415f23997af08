/*  kd_peer: membership link to the scheduler (see kd_peer.h).
*/
#include "kd_peer.h"
#include "kd_curve.h"
#include "kd_log.h"
#include "kd_util.h"
#include <unistd.h>

struct _kd_peer_t {
    zsock_t *sock;              //  DEALER to the scheduler
    char *role;                 //  "worker", "shard", "monitor"
    char *name;                 //  stable instance name
    char *endpoint;             //  advertised endpoint (shards), or NULL
    uint64_t version;           //  model version to report (shards)
    uint64_t samples;           //  training rows (workers), samples
                                //  trained into version (shards)
    bool has_rank;              //  rank is a hint to send
    kd_msg_t *layout;           //  TENSORS and SHAPES to send, or NULL
    bool evaluates_keyed;       //  a monitor with a held-out file for keyed models
    bool lease_ahead;           //  a worker that asks to hold a lease ahead
    uint64_t rank;              //  rank held before, asked for again
    uint64_t lo, hi;            //  key range held (shards), if hi > 0
    int heartbeat_ms;           //  interval
    int liveness;               //  missed intervals before re-HELLO
    uint64_t last_sent;         //  ms, monotonic
    uint64_t last_heard;        //  ms, monotonic
    uint64_t last_hello;        //  ms, monotonic
};

//  Connect to the scheduler.
kd_peer_t *
kd_peer_new (const char *scheduler, const char *role, const char *name,
             int64_t max_msg_bytes, int heartbeat_ms, int liveness, kd_curve_t *curve)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    if (!sock)
        return NULL;
    kd_socket_harden (sock, max_msg_bytes);
    //  CURVE options must be set before the connect.
    kd_curve_client (curve ? curve : kd_curve_process (), sock);
    if (zsock_connect (sock, "%s", scheduler) != 0) {
        zsock_destroy (&sock);
        return NULL;
    }
    kd_peer_t *self = (kd_peer_t *) zmalloc (sizeof *self);
    self->sock = sock;
    self->role = strdup (role);
    if (name && *name)
        self->name = strdup (name);
    else {
        char host [128] = "host";
        gethostname (host, sizeof host);
        host [sizeof host - 1] = 0;
        self->name = zsys_sprintf ("%s-%s-%d", role, host, (int) getpid ());
    }
    self->heartbeat_ms = heartbeat_ms;
    self->liveness = liveness;
    self->last_heard = kd_now_ms ();
    self->last_sent = 0;
    return self;
}

//  Destroy the link.
void
kd_peer_destroy (kd_peer_t **self_p)
{
    assert (self_p);
    kd_peer_t *self = *self_p;
    if (!self)
        return;
    //  Give a last LEAVE or STOP reply a moment to go out.
    zsock_set_linger (self->sock, 500);
    zsock_destroy (&self->sock);
    free (self->role);
    kd_msg_destroy (&self->layout);
    free (self->name);
    free (self->endpoint);
    free (self);
    *self_p = NULL;
}

zsock_t *
kd_peer_socket (kd_peer_t *self)
{
    return self->sock;
}

const char *
kd_peer_name (kd_peer_t *self)
{
    return self->name;
}

void
kd_peer_set_endpoint (kd_peer_t *self, const char *endpoint)
{
    free (self->endpoint);
    self->endpoint = endpoint ? strdup (endpoint) : NULL;
}

void
kd_peer_set_version (kd_peer_t *self, uint64_t version)
{
    self->version = version;
}

void
kd_peer_set_samples (kd_peer_t *self, uint64_t samples)
{
    self->samples = samples;
}

void
kd_peer_set_rank (kd_peer_t *self, uint64_t rank)
{
    self->has_rank = true;
    self->rank = rank;
}

void
kd_peer_set_range (kd_peer_t *self, uint64_t lo, uint64_t hi)
{
    self->lo = lo;
    self->hi = hi;
}

void
kd_peer_set_heartbeat (kd_peer_t *self, int heartbeat_ms)
{
    if (heartbeat_ms >= 10 && heartbeat_ms <= 60000)
        self->heartbeat_ms = heartbeat_ms;
}

//  Send HELLO with this peer's identity.
int
kd_peer_hello (kd_peer_t *self)
{
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, self->role);
    kd_msg_set_str (hello, KD_F_NAME, self->name);
    if (self->endpoint)
        kd_msg_set_str (hello, KD_F_ENDPOINT, self->endpoint);
    kd_msg_set_uint (hello, KD_F_VERSION, self->version);
    if (self->samples)
        kd_msg_set_uint (hello, KD_F_SAMPLES, self->samples);
    if (self->has_rank)
        kd_msg_set_uint (hello, KD_F_RANK, self->rank);
    if (self->hi > 0) {
        kd_msg_set_uint (hello, KD_F_LO, self->lo);
        kd_msg_set_uint (hello, KD_F_HI, self->hi);
    }
    if (self->evaluates_keyed)
        kd_msg_set_uint (hello, KD_F_KEYS, 1);
    if (self->lease_ahead)
        kd_msg_set_uint (hello, KD_F_LEASE_AHEAD, 1);
    //  Every shard of this code base can send STAGED (the short phase
    //  path, protocol 9.3.1); the scheduler refuses one that cannot.
    if (!strcmp (self->role, "shard"))
        kd_msg_set_uint (hello, KD_F_STAGED, 1);
    if (self->layout) {
        size_t n = 0, ns = 0;
        const char **names = kd_msg_strs (self->layout, KD_F_TENSORS, &n);
        const uint64_t *shapes = kd_msg_uints (self->layout, KD_F_SHAPES, &ns);
        kd_msg_set_strs (hello, KD_F_TENSORS, names, n);
        kd_msg_set_uints (hello, KD_F_SHAPES, shapes, ns);
        if (kd_msg_has (self->layout, KD_F_KEYS))
            kd_msg_set_uint (hello, KD_F_KEYS, 1);
    }
    //  A fresh HELLO restarts the liveness clock, so that a scheduler that
    //  is still starting up is given time to answer.
    self->last_heard = kd_now_ms ();
    self->last_hello = self->last_heard;
    return kd_peer_send (self, &hello);
}

//  Declare an external model's layout with every HELLO.
void
kd_peer_set_layout (kd_peer_t *self, const char **names, size_t n, const uint64_t *shapes,
                    bool keyed)
{
    assert (self);
    kd_msg_destroy (&self->layout);
    self->layout = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_strs (self->layout, KD_F_TENSORS, names, n);
    kd_msg_set_uints (self->layout, KD_F_SHAPES, shapes, 2 * n);
    if (keyed)
        kd_msg_set_uint (self->layout, KD_F_KEYS, 1);
}

void
kd_peer_set_evaluates_keyed (kd_peer_t *self, bool on)
{
    assert (self);
    self->evaluates_keyed = on;
}

void
kd_peer_set_lease_ahead (kd_peer_t *self, bool on)
{
    assert (self);
    self->lease_ahead = on;
}

//  Send one message to the scheduler.
int
kd_peer_send (kd_peer_t *self, kd_msg_t **msg_p)
{
    self->last_sent = kd_now_ms ();
    return kd_msg_send (msg_p, self->sock);
}

void
kd_peer_heard (kd_peer_t *self)
{
    self->last_heard = kd_now_ms ();
}

//  The scheduler does not know us (it restarted, or declared us dead):
//  register again, at most once per heartbeat interval.
void
kd_peer_unknown (kd_peer_t *self)
{
    uint64_t now = kd_now_ms ();
    if (now - self->last_hello >= (uint64_t) self->heartbeat_ms) {
        kd_warn ("scheduler does not know us, registering again name=%s", self->name);
        kd_peer_hello (self);
    }
}

//  Heartbeat when idle; re-register when the scheduler went silent.
int
kd_peer_tick (kd_peer_t *self)
{
    uint64_t now = kd_now_ms ();
    if (now - self->last_heard > (uint64_t) self->heartbeat_ms * self->liveness) {
        kd_warn ("scheduler silent ms=%llu, registering again name=%s",
                 (unsigned long long) (now - self->last_heard), self->name);
        kd_peer_hello (self);
        return 1;
    }
    if (now - self->last_sent >= (uint64_t) self->heartbeat_ms) {
        kd_msg_t *hb = kd_msg_new (KD_MSG_HEARTBEAT);
        kd_peer_send (self, &hb);
    }
    return 0;
}

//  Time until the next heartbeat is due.
int
kd_peer_timeout (kd_peer_t *self)
{
    uint64_t now = kd_now_ms ();
    uint64_t due = self->last_sent + (uint64_t) self->heartbeat_ms;
    return due > now ? (int) (due - now) : 0;
}
