/*  kd_server: the one request loop of every Kudus service.

    A service gives it its ROUTER, the ROUTER's guard and a handler for each
    message type it serves.  Each turn the loop polls the ROUTER, the
    guard's connection events, the actor pipe and the service's other
    readers.  From the ROUTER it reads a burst of requests; each one is
    checked by the guard and the codec, then against the role table, then
    dispatched:

    - a malformed request is answered ERROR with the codec's code;
    - a request its sender's role may not send is answered 403 and counted
      as a strike (kd_role_check, kd_guard_strike);
    - a request the gate refuses is answered by the gate;
    - a type with no handler is answered 422 and counted as a strike;
    - an ERROR with no handler is logged and never answered, so that two
      peers cannot ping-pong errors.

    After each turn the service's tick runs and says how long the next
    poll may wait.  The loop ends on kd_server_stop, on "$TERM" from the
    pipe (the service runs as an actor, CZMQ's zactor contract) or when the
    process is interrupted.
*/
#ifndef KD_SERVER_H_INCLUDED
#define KD_SERVER_H_INCLUDED

#include "kd_guard.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _kd_server_t kd_server_t;

//  Handle one request; the loop destroys msg afterwards.
typedef void (kd_server_handler_fn) (void *state, kd_msg_t *msg);
//  Admit a request before its handler: return false to refuse it (the gate
//  answers the peer itself).
typedef bool (kd_server_gate_fn) (void *state, kd_msg_t *msg);
//  Read another socket of the service when it is readable.
typedef void (kd_server_reader_fn) (void *state, zsock_t *sock);
//  Run after every turn; return the longest the next poll may wait, in ms.
typedef int (kd_server_tick_fn) (void *state);
//  Answer an error to a peer (id may be NULL: then only log it).
typedef void (kd_server_error_fn) (void *state, zframe_t *id, int code, const char *reason);

//  A loop for service (KD_SVC_*, for the role table) over router and its
//  guard, calling handlers with state.  Neither socket is owned.
kd_server_t *
    kd_server_new (unsigned service, zsock_t *router, kd_guard_t *guard, void *state);

//  Destroy the loop (not the sockets) and null the caller's pointer.
void
    kd_server_destroy (kd_server_t **self_p);

//  Handle type with fn.  KD_MSG_TYPE_COUNT as type sets the handler of every
//  type without its own.
void
    kd_server_on (kd_server_t *self, kd_msg_type_t type, kd_server_handler_fn *fn);

//  Answer each HEARTBEAT with a HEARTBEAT (a peer's liveness check), with
//  no handler of the service's own.
void
    kd_server_echo_heartbeats (kd_server_t *self);

//  Let gate admit each request of a type not marked open.
void
    kd_server_set_gate (kd_server_t *self, kd_server_gate_fn *gate);

//  Requests of type pass without the gate (a HELLO, an ERROR...).
void
    kd_server_open (kd_server_t *self, kd_msg_type_t type);

//  How errors are answered; the default logs and sends ERROR on the router.
void
    kd_server_set_error (kd_server_t *self, kd_server_error_fn *fn);

//  The tick, run after every turn.  Without one the loop waits up to a
//  second at a time.
void
    kd_server_set_tick (kd_server_t *self, kd_server_tick_fn *fn);

//  At most max requests are read from the router per turn (default 256),
//  so other sockets and timers are served under load.
void
    kd_server_set_burst (kd_server_t *self, size_t max);

//  Poll sock too and call fn when it is readable.  A socket added or
//  removed by a handler is polled from the next turn on.
void
    kd_server_reader (kd_server_t *self, zsock_t *sock, kd_server_reader_fn *fn);

//  Stop polling sock (no-op when it is not polled).
void
    kd_server_reader_end (kd_server_t *self, zsock_t *sock);

//  Where the request being handled came from (its key and role).
const kd_msg_source_t *
    kd_server_source (kd_server_t *self);

//  Answer an error through the service's error function.
void
    kd_server_error (kd_server_t *self, zframe_t *id, int code, const char *reason);

//  Count a strike against the sender of a request (see kd_guard_strike).
void
    kd_server_strike (kd_server_t *self, zframe_t *id, const char *reason);

//  End the loop after the request being handled.
void
    kd_server_stop (kd_server_t *self);

//  Requests refused so far because their sender's role may not send them
//  (answered 403 by the role check, not through the error function).
uint64_t
    kd_server_forbidden (kd_server_t *self);

//  Run until stopped.  With a pipe (an actor's), "$TERM" on it stops the
//  loop too.  Returns 0 when the service stopped it, 1 on "$TERM" or an
//  interrupt.
int
    kd_server_run (kd_server_t *self, zsock_t *pipe);

#ifdef __cplusplus
}
#endif

#endif
