/*  kd_aggregators: the scheduler's side of the barrier tree.

    Workers behind a barrier aggregator (kudus aggregate) reach the
    scheduler in RELAYs.  What the scheduler sends them is queued here, one
    bundle per aggregator, and goes out as one RELAY per aggregator when the
    scheduler's loop has handled its burst of input (kd_aggregators_flush).
    So a phase's releases to N workers behind A aggregators cost A sends.
*/
#ifndef KD_AGGREGATORS_H_INCLUDED
#define KD_AGGREGATORS_H_INCLUDED

#include "kd_bundle.h"

typedef struct _kd_aggregators_t kd_aggregators_t;

//  Aggregators reached through router (borrowed).
kd_aggregators_t *
    kd_aggregators_new (zsock_t *router);

//  Destroy (unsent bundles are dropped) and null the caller's pointer.
void
    kd_aggregators_destroy (kd_aggregators_t **self_p);

//  Queue a message for worker id behind aggregator via.  Takes the message.
//  A message that cannot be relayed (it has a data frame) is logged and
//  dropped.
void
    kd_aggregators_send (kd_aggregators_t *self, zframe_t *via, zframe_t *id, kd_msg_t **msg_p);

//  Send every aggregator its queued messages.
void
    kd_aggregators_flush (kd_aggregators_t *self);

//  Counters since start: RELAYs and the items they held, in and out.
typedef struct {
    uint64_t relays_in, items_in;
    uint64_t relays_out, items_out;
} kd_aggregators_stats_t;

kd_aggregators_stats_t *
    kd_aggregators_stats (kd_aggregators_t *self);

//  Aggregators seen (a RELAY in or out).
size_t
    kd_aggregators_size (kd_aggregators_t *self);

//  Note an incoming RELAY from via with items.
void
    kd_aggregators_received (kd_aggregators_t *self, zframe_t *via, size_t items);

#endif
