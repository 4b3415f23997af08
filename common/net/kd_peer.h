/*  kd_peer: a service's membership link to the scheduler.

    Shards, workers and the monitor each hold one.  It owns the DEALER
    socket to the scheduler, sends HELLO (again whenever the scheduler has
    been silent for `liveness` heartbeats, so a restarted scheduler gets its
    members back), and sends HEARTBEAT when nothing else went out for a
    heartbeat interval.  The service polls kd_peer_socket itself and reports
    every message it reads with kd_peer_heard.
*/
#ifndef KD_PEER_H_INCLUDED
#define KD_PEER_H_INCLUDED

#include "kd_msg.h"
#include "kd_curve.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _kd_peer_t kd_peer_t;

//  Connect to the scheduler.  role is "worker", "shard" or "monitor";
//  curve is the CURVE instance to use, NULL for the process's.  NULL if
//  the endpoint is invalid.  Caller owns return value.
kd_peer_t *
    kd_peer_new (const char *scheduler, const char *role, const char *name,
                 int64_t max_msg_bytes, int heartbeat_ms, int liveness, kd_curve_t *curve);

//  Destroy and null the caller's pointer.
void
    kd_peer_destroy (kd_peer_t **self_p);

//  The DEALER socket, for polling and receiving.
zsock_t *
    kd_peer_socket (kd_peer_t *self);
//  The name we register with (the one given, or ROLE-HOST-PID).
const char *
    kd_peer_name (kd_peer_t *self);

//  Fields sent with every HELLO.
void
    kd_peer_set_endpoint (kd_peer_t *self, const char *endpoint);
void
    kd_peer_set_version (kd_peer_t *self, uint64_t version);
void
    kd_peer_set_samples (kd_peer_t *self, uint64_t samples);
//  The rank held before (asked for again after a scheduler restart), and a
//  shard's key range.
void
    kd_peer_set_rank (kd_peer_t *self, uint64_t rank);
void
    kd_peer_set_range (kd_peer_t *self, uint64_t lo, uint64_t hi);
//  An external model's layout, sent with every HELLO: n names, 2 n shape
//  entries (rows, cols).  Copied.
void
    kd_peer_set_layout (kd_peer_t *self, const char **names, size_t n, const uint64_t *shapes,
                        bool keyed);
//  A monitor that can evaluate a keyed model (it holds a held-out file)
//  says so in its HELLO, with KEYS 1, so that the scheduler waits for its
//  final evaluation.
void
    kd_peer_set_evaluates_keyed (kd_peer_t *self, bool on);
//  A worker that asks to hold a lease ahead (ASP, SSP; protocol 9.3.2) says
//  so in every HELLO, with LEASE_AHEAD 1.
void
    kd_peer_set_lease_ahead (kd_peer_t *self, bool on);
//  Adopt the scheduler's heartbeat interval (from WELCOME), so both ends
//  judge silence by the same clock.
void
    kd_peer_set_heartbeat (kd_peer_t *self, int heartbeat_ms);

//  Send HELLO now.  Returns 0 or -1.
int
    kd_peer_hello (kd_peer_t *self);

//  Send a message to the scheduler (destroys it).  Returns 0 or -1.
int
    kd_peer_send (kd_peer_t *self, kd_msg_t **msg_p);

//  Note that a message from the scheduler was read.
void
    kd_peer_heard (kd_peer_t *self);

//  Call when the scheduler answered ERROR 409 (it does not know us): sends
//  HELLO again, at most once per heartbeat interval.
void
    kd_peer_unknown (kd_peer_t *self);

//  Heartbeat and liveness duties; call at least every heartbeat interval.
//  Returns 1 if it re-sent HELLO because the scheduler went silent, else 0.
int
    kd_peer_tick (kd_peer_t *self);

//  Milliseconds until kd_peer_tick next has work.
int
    kd_peer_timeout (kd_peer_t *self);

#ifdef __cplusplus
}
#endif

#endif
