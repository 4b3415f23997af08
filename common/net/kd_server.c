/*  kd_server: the one request loop of every Kudus service (kd_server.h).
*/
#include "kd_server.h"
#include "kd_log.h"
#include "kd_role.h"

#define S_MAX_READERS  72              //  peer, chain, a monitor's shards...
#define S_MAX_WAIT_MS  1000            //  a loop without a tick still looks up
#define S_SIDE_CHECK_MS 100            //  the pipe and the guard asked at least this often

typedef struct {
    zsock_t *sock;
    kd_server_reader_fn *fn;
} s_reader_t;

struct _kd_server_t {
    unsigned service;
    zsock_t *router;
    kd_guard_t *guard;
    void *state;
    kd_server_handler_fn *handlers [KD_MSG_TYPE_COUNT + 1];
    bool echo;                          //  HEARTBEAT is answered here
    bool open [KD_MSG_TYPE_COUNT];
    kd_server_gate_fn *gate;
    kd_server_error_fn *error;
    kd_server_tick_fn *tick;
    size_t burst;
    s_reader_t readers [S_MAX_READERS];
    size_t n_readers;
    bool dirty;                         //  readers changed during this turn
    bool stop;
    kd_msg_source_t src;                //  of the request being handled
    uint64_t forbidden;
};

kd_server_t *
kd_server_new (unsigned service, zsock_t *router, kd_guard_t *guard, void *state)
{
    assert (router && guard);
    kd_server_t *self = (kd_server_t *) zmalloc (sizeof *self);
    self->service = service;
    self->router = router;
    self->guard = guard;
    self->state = state;
    self->burst = 256;
    //  The replies to an ERROR would be errors, so no gate stands in front.
    self->open [KD_MSG_ERROR] = true;
    return self;
}

void
kd_server_destroy (kd_server_t **self_p)
{
    if (self_p && *self_p) {
        free (*self_p);
        *self_p = NULL;
    }
}

void
kd_server_on (kd_server_t *self, kd_msg_type_t type, kd_server_handler_fn *fn)
{
    assert ((unsigned) type <= KD_MSG_TYPE_COUNT);
    self->handlers [type] = fn;
    if (type == KD_MSG_HEARTBEAT)
        self->echo = false;
}

//  A peer's liveness check, answered by the loop itself.
static void
s_echo (kd_server_t *self, kd_msg_t *msg)
{
    kd_msg_t *hb = kd_msg_new (KD_MSG_HEARTBEAT);
    kd_msg_set_routing_id (hb, kd_msg_routing_id (msg));
    kd_msg_send (&hb, self->router);
}

void
kd_server_echo_heartbeats (kd_server_t *self)
{
    self->handlers [KD_MSG_HEARTBEAT] = NULL;
    self->echo = true;
}

void
kd_server_set_gate (kd_server_t *self, kd_server_gate_fn *gate)
{
    self->gate = gate;
}

void
kd_server_open (kd_server_t *self, kd_msg_type_t type)
{
    assert ((unsigned) type < KD_MSG_TYPE_COUNT);
    self->open [type] = true;
}

void
kd_server_set_error (kd_server_t *self, kd_server_error_fn *fn)
{
    self->error = fn;
}

void
kd_server_set_tick (kd_server_t *self, kd_server_tick_fn *fn)
{
    self->tick = fn;
}

void
kd_server_set_burst (kd_server_t *self, size_t max)
{
    self->burst = max ? max : 1;
}

void
kd_server_reader (kd_server_t *self, zsock_t *sock, kd_server_reader_fn *fn)
{
    assert (sock && fn);
    for (size_t i = 0; i < self->n_readers; i++)
        if (self->readers [i].sock == sock) {
            self->readers [i].fn = fn;
            return;
        }
    assert (self->n_readers < S_MAX_READERS);
    self->readers [self->n_readers++] = (s_reader_t) { sock, fn };
    self->dirty = true;
}

void
kd_server_reader_end (kd_server_t *self, zsock_t *sock)
{
    for (size_t i = 0; i < self->n_readers; i++)
        if (self->readers [i].sock == sock) {
            memmove (&self->readers [i], &self->readers [i + 1],
                     (self->n_readers - i - 1) * sizeof self->readers [0]);
            self->n_readers--;
            self->dirty = true;
            return;
        }
}

const kd_msg_source_t *
kd_server_source (kd_server_t *self)
{
    return &self->src;
}

void
kd_server_error (kd_server_t *self, zframe_t *id, int code, const char *reason)
{
    if (self->error) {
        self->error (self->state, id, code, reason);
        return;
    }
    kd_warn ("error code=%d reason=\"%s\"", code, reason);
    if (id) {
        kd_msg_t *reply = kd_msg_new_error (id, code, reason);
        kd_msg_send (&reply, self->router);
    }
}

void
kd_server_strike (kd_server_t *self, zframe_t *id, const char *reason)
{
    kd_guard_strike (self->guard, id, reason);
}

void
kd_server_stop (kd_server_t *self)
{
    self->stop = true;
}

uint64_t
kd_server_forbidden (kd_server_t *self)
{
    return self->forbidden;
}

//  One request from the router, waited for or not; false when none was
//  queued.
static bool
s_request (kd_server_t *self, bool wait)
{
    kd_msg_t *msg = NULL;
    zframe_t *id = NULL;
    kd_msg_err_t err;
    int rc = wait ? kd_guard_recv (self->guard, &msg, &id, &err, &self->src)
                  : kd_guard_recv_nowait (self->guard, &msg, &id, &err, &self->src);
    if (rc == 1)
        return false;
    if (rc == -2) {
        kd_server_error (self, id, err.code, err.reason);
        zframe_destroy (&id);
        return true;
    }
    zframe_destroy (&id);
    if (rc != 0)
        return true;
    kd_msg_type_t type = kd_msg_type (msg);
    zframe_t *rid = kd_msg_routing_id (msg);
    kd_server_handler_fn *fn = self->handlers [type] ? self->handlers [type]
                                                    : self->handlers [KD_MSG_TYPE_COUNT];
    if (!kd_role_check (self->service, &self->src, msg, self->router)) {
        //  A key that keeps trying what its role may not do is cut off too.
        self->forbidden++;
        kd_guard_strike (self->guard, rid, "forbidden for its role");
    }
    else
    if (self->gate && !self->open [type] && !self->gate (self->state, msg))
        ;   //  The gate answered.
    else
    if (type == KD_MSG_HEARTBEAT && self->echo)
        s_echo (self, msg);
    else
    if (fn)
        fn (self->state, msg);
    else
    if (type == KD_MSG_ERROR)
        kd_warn ("peer error code=%llu reason=\"%s\"",
                 (unsigned long long) kd_msg_uint (msg, KD_F_CODE), kd_msg_str (msg, KD_F_REASON));
    else {
        char reason [96];
        snprintf (reason, sizeof reason, "command invalid: %s", kd_msg_type_name (type));
        kd_server_error (self, rid, KD_ERR_UNKNOWN_TYPE, reason);
        kd_guard_strike (self->guard, rid, reason);
    }
    kd_msg_destroy (&msg);
    return true;
}

int
kd_server_run (kd_server_t *self, zsock_t *pipe)
{
    //  The poll set: the router, the pipe, the guard, then the readers.
    //  The pipe and the guard's monitor are polled by their descriptors,
    //  not as sockets: zmq_poll asks every socket item for its events, a
    //  system call each, twice a wait, and these two rarely have any.  A
    //  descriptor says only that commands arrived, and another call on the
    //  socket may have taken them, so both are also asked outright every
    //  S_SIDE_CHECK_MS, which no wait outlasts: a $TERM is late then by at
    //  most that, never lost.
    zmq_pollitem_t items [3 + S_MAX_READERS];
    s_reader_t polled [S_MAX_READERS];
    zsock_t *guard_sock = kd_guard_socket (self->guard);
    int pipe_fd = pipe ? zsock_fd (pipe) : -1;
    int guard_fd = guard_sock ? zsock_fd (guard_sock) : -1;
    int64_t side_check = 0;
    int rc = 0;
    int wait = 0;
    while (!self->stop) {
        if (zsys_interrupted) {
            rc = 1;
            break;
        }
        size_t n = 0;
        items [n++] = (zmq_pollitem_t) { zsock_resolve (self->router), 0, ZMQ_POLLIN, 0 };
        //  An absent pipe or guard socket is an entry poll ignores (fd -1),
        //  so the indexes stay fixed.
        items [n++] = (zmq_pollitem_t) { NULL, pipe_fd, ZMQ_POLLIN, 0 };
        items [n++] = (zmq_pollitem_t) { NULL, guard_fd, ZMQ_POLLIN, 0 };
        //  A handler may change the readers; this turn serves the ones polled.
        size_t n_polled = self->n_readers;
        memcpy (polled, self->readers, n_polled * sizeof polled [0]);
        for (size_t i = 0; i < n_polled; i++)
            items [n++] = (zmq_pollitem_t) { zsock_resolve (polled [i].sock), 0, ZMQ_POLLIN, 0 };
        self->dirty = false;
        if (zmq_poll (items, (int) n, wait) < 0) {
            if (zmq_errno () == EINTR && !zsys_interrupted)
                continue;
            rc = 1;
            break;
        }
        int64_t now = zclock_mono ();
        bool ask = now >= side_check;
        if (ask)
            side_check = now + S_SIDE_CHECK_MS;
        if (pipe && (ask || (items [1].revents & ZMQ_POLLIN))
        &&  (zsock_events (pipe) & ZMQ_POLLIN)) {
            char *command = zstr_recv (pipe);
            bool term = !command || streq (command, "$TERM");
            if (!term)
                kd_warn ("unknown command on the actor pipe: %s", command);
            zstr_free (&command);
            if (term) {
                rc = 1;
                break;
            }
        }
        if (guard_sock && (ask || (items [2].revents & ZMQ_POLLIN))
        &&  (zsock_events (guard_sock) & ZMQ_POLLIN))
            kd_guard_on_event (self->guard);
        if (items [0].revents & ZMQ_POLLIN)
            //  The first read is known to find a request; after it, each
            //  read asks the socket without waiting, which costs no system
            //  call while requests are queued (a poll per request would).
            for (size_t i = 0; i < self->burst && !self->stop; i++)
                if (!s_request (self, i == 0))
                    break;
        //  Once a handler changed the readers, the rest wait for the next
        //  turn: a socket polled here may be gone, and polling is level-
        //  triggered, so nothing is lost.
        for (size_t i = 0; i < n_polled && !self->stop && !self->dirty; i++)
            if (items [3 + i].revents & ZMQ_POLLIN)
                polled [i].fn (self->state, polled [i].sock);
        wait = self->tick ? self->tick (self->state) : S_MAX_WAIT_MS;
        if (wait < 0)
            wait = 0;
        //  No wait outlasts the next outright ask of the pipe and guard.
        int64_t left = side_check - zclock_mono ();
        if ((pipe || guard_sock) && wait > left)
            wait = left > 0 ? (int) left : 0;
    }
    return rc;
}
