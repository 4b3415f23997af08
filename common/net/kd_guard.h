/*  kd_guard: per-peer limits at a service's ROUTER.

    Redis closes a client that keeps sending garbage and caps its clients;
    a ZeroMQ ROUTER can do neither by itself.  A guard watches the ROUTER's
    connections through a socket monitor and closes any connection past
    max-connections as soon as it is accepted.  It reads requests for the
    service, drops those from peers it disconnected, and counts strikes
    (malformed or unknown messages) per peer: at max-malformed strikes the
    peer's TCP connection is shut down, which libzmq sees as the peer going
    away, and what it still had queued is dropped.

    A peer is a connection (its routing id).  The guard checks that the
    descriptor it shuts down still belongs to that peer's address, since
    libzmq owns the descriptor and may have reused it.
*/
#ifndef KD_GUARD_H_INCLUDED
#define KD_GUARD_H_INCLUDED

#include "kd_msg.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _kd_guard_t kd_guard_t;

//  Guard router for service (a name for the log).  max_connections 0 means
//  no limit; max_malformed 0 never disconnects.  Caller owns return value.
kd_guard_t *
    kd_guard_new (zsock_t *router, const char *service, int max_connections,
                  int max_malformed);

//  Stop watching and null the caller's pointer.
void
    kd_guard_destroy (kd_guard_t **self_p);

//  The monitor socket, for the service's poller: call kd_guard_on_event
//  when it is readable.
zsock_t *
    kd_guard_socket (kd_guard_t *self);

//  Handle connection events: count them, close those over the limit.
void
    kd_guard_on_event (kd_guard_t *self);

//  Receive one request from the router, as kd_msg_recv_from, but skip
//  requests from disconnected peers (returns -1 for those) and count a
//  malformed one (-2) as a strike.  src may be NULL.
int
    kd_guard_recv (kd_guard_t *self, kd_msg_t **out, zframe_t **routing_p,
                   kd_msg_err_t *err, kd_msg_source_t *src);

//  kd_guard_recv that does not wait: returns 1 when no request is queued.
int
    kd_guard_recv_nowait (kd_guard_t *self, kd_msg_t **out, zframe_t **routing_p,
                          kd_msg_err_t *err, kd_msg_source_t *src);

//  Count a strike against the peer of the last request received (for an
//  abuse the service found itself, such as an unknown message type).
//  Returns true when this strike disconnected it.
bool
    kd_guard_strike (kd_guard_t *self, zframe_t *routing_id, const char *reason);

//  Connections open and served now (refused ones are not counted).
size_t
    kd_guard_connections (kd_guard_t *self);

//  Peers disconnected so far: over the connection limit, or for strikes.
uint64_t
    kd_guard_disconnects (kd_guard_t *self);

#ifdef __cplusplus
}
#endif

#endif
