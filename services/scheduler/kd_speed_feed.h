/*  kd_speed_feed: the monitor's per-worker telemetry, read by the
    scheduler for ALSP's groups (--speed-source telemetry).

    The monitor publishes one "worker" message per live worker every
    publish-ms on its stream, with the means of the worker's compute, push,
    pull and wait times over that window.  The feed follows the stream at
    monitor-pub, keeps only those messages, and hands each one over as a
    report; the scheduler gives compute + push + pull to the controller as
    a speed sample and keeps the split, so a regroup can say whether a slow
    group is slow to compute or slow on its link.
*/
#ifndef KD_SPEED_FEED_H_INCLUDED
#define KD_SPEED_FEED_H_INCLUDED

#include <czmq.h>
#include <stdint.h>

#define KD_SPEED_FEED_MAX_AGE_MS 2000   //  older reports (a worker silent
                                        //  since) are not speed samples
#define KD_SPEED_FEED_RANKS      1024   //  worker ranks followed

typedef struct {
    uint32_t rank;              //  worker
    double compute_ms;          //  means over the monitor's window
    double push_ms;
    double pull_ms;
    double wait_ms;             //  barrier wait (not part of the speed)
    uint64_t age_ms;            //  since the worker's last telemetry
} kd_speed_report_t;

typedef struct _kd_speed_feed_t kd_speed_feed_t;

//  A feed that follows the stream at endpoint (a SUB socket, CURVE client
//  when the process has keys).  NULL with a message in err when the
//  endpoint is malformed.  Caller owns return value.
kd_speed_feed_t *
    kd_speed_feed_new (const char *endpoint, char *err, size_t err_size);

//  Destroy and null the caller's pointer.
void
    kd_speed_feed_destroy (kd_speed_feed_t **self_p);

//  The socket to poll.
zsock_t *
    kd_speed_feed_socket (kd_speed_feed_t *self);

//  Read one stream message.  1 and a report when it was a worker's fresh
//  timings of a window with new iterations (its sample count went up);
//  0 when it was something else (another topic, a stale, empty or
//  repeated report, a rank beyond KD_SPEED_FEED_RANKS, nothing to read);
//  -2 with a reason in err when it was malformed.
int
    kd_speed_feed_recv (kd_speed_feed_t *self, kd_speed_report_t *out, char *err, size_t err_size);

//  Reports taken and messages refused as malformed so far.
uint64_t
    kd_speed_feed_reports (kd_speed_feed_t *self);
uint64_t
    kd_speed_feed_malformed (kd_speed_feed_t *self);

#endif
