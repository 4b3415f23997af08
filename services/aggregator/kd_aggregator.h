/*  kd_aggregator: `kudus aggregate`, a node of the barrier tree.

    A group of workers (one host's, or any 32) connects to an aggregator
    instead of the scheduler: it is their --scheduler endpoint, and they
    speak the same protocol to it.  The aggregator checks each message
    (codec, per-connection limits and, under CURVE, the sender's role) and
    bundles what arrived in one burst into one RELAY to the scheduler
    (kd_bundle); the scheduler bundles what it sends to those workers into
    one RELAY back, which is unpacked here and sent on.  Nothing is held
    back for a timer: a burst is what was already queued, so the first-K
    order of arrivals reaches the scheduler unchanged and no latency is
    added, while a phase's N arrivals and releases cost the scheduler about
    N / fan-in messages each way.
*/
#ifndef KD_AGGREGATOR_H_INCLUDED
#define KD_AGGREGATOR_H_INCLUDED

#include "kd_config.h"
#include <czmq.h>

//  The aggregator's loop: runs until SIGINT, SIGTERM or "$TERM" on pipe
//  (a kd_service actor's).  Returns the exit code (0, 1 when it cannot
//  bind).
int
    kd_aggregator_run (kd_config_t *config, zsock_t *pipe);

//  kudus aggregate: kd_service_main around kd_aggregator_run.
int
    kd_aggregator_main (int argc, char **argv);

#endif
