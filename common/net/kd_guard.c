/*  kd_guard: per-peer limits at a service's ROUTER (see kd_guard.h).
*/
#include "kd_guard.h"
#include "kd_util.h"
#include "kd_log.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#define S_MAX_TRACKED   65536   //  peers with strikes remembered at most
#define S_MAX_BANNED    4096    //  disconnected peers remembered at most
#define S_EVENT_BATCH   256     //  monitor events read per call at most
#define S_MAX_FD        65536   //  descriptors tracked as refused at most

struct _kd_guard_t {
    zsock_t *router;            //  the guarded socket (not ours)
    zsock_t *monitor;           //  PAIR receiving its connection events
    char service [32];          //  for the log
    int max_connections;        //  0: no limit
    int max_malformed;          //  0: never disconnect
    size_t connections;         //  accepted, served, and not yet disconnected
    uint8_t refused [S_MAX_FD / 8]; //  descriptors we shut down, not yet seen gone
    uint8_t served [S_MAX_FD / 8];  //  descriptors accepted within the limit, not yet gone
    uint64_t disconnects;       //  connections we closed
    zhashx_t *strikes;          //  routing id (hex) -> strikes, as a pointer-sized count
    zhashx_t *banned;           //  routing id (hex) of peers we disconnected
    kd_msg_source_t last;       //  source of the last request received
    char last_id [520];         //  its routing id, hex
};

//  Hex text of a routing id, the key of both tables.
static void
s_key (zframe_t *routing_id, char *out, size_t size)
{
    if (routing_id)
        kd_hex (zframe_data (routing_id), zframe_size (routing_id), out, size);
    else
        out [0] = 0;
}

kd_guard_t *
kd_guard_new (zsock_t *router, const char *service, int max_connections,
              int max_malformed)
{
    assert (router);
    kd_guard_t *self = (kd_guard_t *) zmalloc (sizeof (kd_guard_t));
    self->router = router;
    snprintf (self->service, sizeof self->service, "%s", service ? service : "service");
    self->max_connections = max_connections > 0 ? max_connections : 0;
    self->max_malformed = max_malformed > 0 ? max_malformed : 0;
    self->strikes = zhashx_new ();
    self->banned = zhashx_new ();
    self->last.fd = -1;
    //  The monitor's endpoint is private to this guard.
    char endpoint [64];
    snprintf (endpoint, sizeof endpoint, "inproc://kd-guard-%p", (void *) self);
    if (zmq_socket_monitor (zsock_resolve (router), endpoint,
                            ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) == 0) {
        self->monitor = zsock_new (ZMQ_PAIR);
        if (self->monitor && zsock_connect (self->monitor, "%s", endpoint) != 0)
            zsock_destroy (&self->monitor);
    }
    if (!self->monitor)
        kd_warn ("%s: cannot watch connections: %s; the connection limit is off",
                 self->service, zmq_strerror (zmq_errno ()));
    return self;
}

void
kd_guard_destroy (kd_guard_t **self_p)
{
    assert (self_p);
    kd_guard_t *self = *self_p;
    if (!self)
        return;
    if (self->monitor) {
        zmq_socket_monitor (zsock_resolve (self->router), NULL, 0);
        zsock_destroy (&self->monitor);
    }
    zhashx_destroy (&self->strikes);
    zhashx_destroy (&self->banned);
    free (self);
    *self_p = NULL;
}

zsock_t *
kd_guard_socket (kd_guard_t *self)
{
    assert (self);
    return self->monitor;
}

//  The port the guarded ROUTER listens on (0 if unknown).
static int
s_listen_port (kd_guard_t *self)
{
    const char *endpoint = zsock_endpoint (self->router);
    const char *colon = endpoint ? strrchr (endpoint, ':') : NULL;
    return colon ? atoi (colon + 1) : 0;
}

//  Shut a connection down if fd is still one this ROUTER accepted (its
//  local port is the one we listen on) and, when address is given, its
//  peer is that address.  libzmq owns the descriptor and may have closed
//  and reused it since the event or the message that named it, so a
//  descriptor that fails either check is left alone.  Returns true when it
//  was shut down.
static bool
s_shutdown (kd_guard_t *self, int fd, const char *address)
{
    if (fd < 0)
        return false;
    struct sockaddr_storage local, peer;
    socklen_t len = sizeof local;
    int port = s_listen_port (self);
    if (getsockname (fd, (struct sockaddr *) &local, &len) != 0 || port <= 0)
        return false;
    int local_port = local.ss_family == AF_INET ? ntohs (((struct sockaddr_in *) &local)->sin_port)
                   : local.ss_family == AF_INET6 ? ntohs (((struct sockaddr_in6 *) &local)->sin6_port) : -1;
    if (local_port != port)
        return false;
    len = sizeof peer;
    if (getpeername (fd, (struct sockaddr *) &peer, &len) != 0)
        return false;
    if (address && *address) {
        char text [INET6_ADDRSTRLEN] = "";
        if (peer.ss_family == AF_INET)
            inet_ntop (AF_INET, &((struct sockaddr_in *) &peer)->sin_addr, text, sizeof text);
        else
        if (peer.ss_family == AF_INET6)
            inet_ntop (AF_INET6, &((struct sockaddr_in6 *) &peer)->sin6_addr, text, sizeof text);
        if (strcmp (text, address))
            return false;
    }
    return shutdown (fd, SHUT_RDWR) == 0;
}

void
kd_guard_on_event (kd_guard_t *self)
{
    assert (self);
    if (!self->monitor)
        return;
    //  Every pending event first: a connection accepted and already gone
    //  in the same batch must not be acted on, since its descriptor may
    //  now be another connection's.
    struct {
        uint16_t id;
        uint32_t value;
    } events [S_EVENT_BATCH];
    int n = 0;
    do {
        zmsg_t *event = zmsg_recv (self->monitor);
        if (!event)
            break;
        zframe_t *head = zmsg_first (event);
        if (head && zframe_size (head) == 6) {
            memcpy (&events [n].id, zframe_data (head), 2);
            memcpy (&events [n].value, zframe_data (head) + 2, 4);
            n++;
        }
        zmsg_destroy (&event);
    } while (n < S_EVENT_BATCH && (zsock_events (self->monitor) & ZMQ_POLLIN));
    for (int i = 0; i < n; i++) {
        uint32_t fd = events [i].value;
        if (fd < S_MAX_FD)
            self->served [fd / 8] &= (uint8_t) ~(1u << (fd % 8));
        if (events [i].id == ZMQ_EVENT_DISCONNECTED) {
            //  A refused connection left the count when it was refused.
            if (fd < S_MAX_FD && (self->refused [fd / 8] & (1u << (fd % 8))))
                self->refused [fd / 8] &= (uint8_t) ~(1u << (fd % 8));
            else
            if (self->connections > 0)
                self->connections--;
            continue;
        }
        if (events [i].id != ZMQ_EVENT_ACCEPTED)
            continue;
        self->connections++;
        if (!self->max_connections || self->connections <= (size_t) self->max_connections) {
            if (fd < S_MAX_FD)
                self->served [fd / 8] |= (uint8_t) (1u << (fd % 8));
            continue;
        }
        bool gone = false;
        for (int j = i + 1; j < n && !gone; j++)
            gone = events [j].id == ZMQ_EVENT_DISCONNECTED && events [j].value == events [i].value;
        kd_warn ("%s: connection refused: %zu open, max-connections=%d",
                 self->service, self->connections - 1, self->max_connections);
        //  Closed at once, it leaves the count now: a client that keeps
        //  redialling is never counted as served.  Otherwise (gone already,
        //  or the descriptor is not ours any more) its disconnect will.
        if (!gone && s_shutdown (self, (int) fd, NULL)) {
            self->disconnects++;
            if (fd < S_MAX_FD) {
                self->connections--;
                self->refused [fd / 8] |= (uint8_t) (1u << (fd % 8));
            }
        }
    }
}

//  Every connection event pending, in as many batches as there are.
static void
s_read_events (kd_guard_t *self)
{
    while (self->monitor && (zsock_events (self->monitor) & ZMQ_POLLIN))
        kd_guard_on_event (self);
}

//  kd_guard_recv, waiting for a request or not (returns 1 when none).
static int
s_recv (kd_guard_t *self, kd_msg_t **out, zframe_t **routing_p,
        kd_msg_err_t *err, kd_msg_source_t *src, bool wait)
{
    assert (self);
    //  A connection over the limit must be seen and closed before any
    //  request it sent is served.  The events are read before the first
    //  request of every burst (the poller may favour a busy ROUTER over the
    //  monitor for as long as the load lasts); within a burst, asking the
    //  monitor costs a poll a request, so only a request from a descriptor
    //  not yet known as served reads them first, all of them.  Its accept
    //  event was queued before its first byte could be read.  A descriptor
    //  closed and reused within one burst is checked at the next.
    if (wait)
        s_read_events (self);
    zframe_t *id = NULL;
    void *router = zsock_resolve (self->router);
    kd_msg_source_t from;
    int rc = wait ? kd_msg_recv_from (router, out, &id, err, &from)
                  : kd_msg_recv_from_nowait (router, out, &id, err, &from);
    if (rc == 1)
        return 1;
    self->last = from;
    int fd = self->last.fd;
    bool known = fd >= 0 && fd < S_MAX_FD && (self->served [fd / 8] & (1u << (fd % 8)));
    if (!known)
        s_read_events (self);
    //  A decoded message holds its routing id; a malformed one hands it back.
    s_key (rc == 0 ? kd_msg_routing_id (*out) : id, self->last_id, sizeof self->last_id);
    if (src)
        *src = self->last;
    //  What a connection refused at accept had sent is dropped unread.
    bool refused = rc != -1 && fd >= 0 && fd < S_MAX_FD && (self->refused [fd / 8] & (1u << (fd % 8)));
    if (refused || (rc != -1 && zhashx_lookup (self->banned, self->last_id))) {
        //  What a disconnected peer had queued is dropped unread.
        kd_msg_destroy (out);
        zframe_destroy (&id);
        return -1;
    }
    if (rc == -2 && id)
        kd_guard_strike (self, id, err->reason);
    if (routing_p)
        *routing_p = id;
    else
        zframe_destroy (&id);
    return rc;
}

int
kd_guard_recv (kd_guard_t *self, kd_msg_t **out, zframe_t **routing_p,
               kd_msg_err_t *err, kd_msg_source_t *src)
{
    return s_recv (self, out, routing_p, err, src, true);
}

int
kd_guard_recv_nowait (kd_guard_t *self, kd_msg_t **out, zframe_t **routing_p,
                      kd_msg_err_t *err, kd_msg_source_t *src)
{
    return s_recv (self, out, routing_p, err, src, false);
}

bool
kd_guard_strike (kd_guard_t *self, zframe_t *routing_id, const char *reason)
{
    assert (self);
    if (!self->max_malformed || !routing_id)
        return false;
    char key [520];
    s_key (routing_id, key, sizeof key);
    if (zhashx_lookup (self->banned, key))
        return false;
    if (zhashx_size (self->strikes) >= S_MAX_TRACKED)
        zhashx_purge (self->strikes);
    uintptr_t strikes = (uintptr_t) zhashx_lookup (self->strikes, key) + 1;
    zhashx_update (self->strikes, key, (void *) strikes);
    if (strikes < (uintptr_t) self->max_malformed)
        return false;
    zhashx_delete (self->strikes, key);
    if (zhashx_size (self->banned) >= S_MAX_BANNED)
        zhashx_purge (self->banned);
    zhashx_insert (self->banned, key, (void *) 1);
    //  The descriptor is only known for the request just received.
    bool closed = !strcmp (key, self->last_id) && s_shutdown (self, self->last.fd, self->last.address);
    self->disconnects++;
    kd_warn ("%s: peer disconnected after %d malformed messages peer=%s address=%s key=%s "
             "closed=%s last=\"%s\"", self->service, self->max_malformed, key,
             *self->last.address ? self->last.address : "?", *self->last.user ? self->last.user : "-",
             closed ? "yes" : "no", reason ? reason : "");
    return true;
}

size_t
kd_guard_connections (kd_guard_t *self)
{
    assert (self);
    return self->connections;
}

uint64_t
kd_guard_disconnects (kd_guard_t *self)
{
    assert (self);
    return self->disconnects;
}
