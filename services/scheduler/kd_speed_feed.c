/*  kd_speed_feed: the monitor's per-worker telemetry, read by the
    scheduler for ALSP's groups.
*/
#include "kd_speed_feed.h"
#include "kd_curve.h"
#include "kd_stream.h"
#include <assert.h>
#include <math.h>

#define S_MAX_RANK 1048576      //  a rank beyond any cluster: malformed
#define S_MAX_MSG  (16 << 20)   //  a stream message larger is refused

struct _kd_speed_feed_t {
    zsock_t *sub;               //  the monitor's stream, topic "worker"
    uint64_t last [KD_SPEED_FEED_RANKS];    //  samples in the last report
                                //  taken, by rank: one window, one sample
    uint64_t reports;           //  reports handed over
    uint64_t malformed;         //  messages refused
};

kd_speed_feed_t *
kd_speed_feed_new (const char *endpoint, char *err, size_t err_size)
{
    assert (endpoint);
    kd_speed_feed_t *self = (kd_speed_feed_t *) calloc (1, sizeof (kd_speed_feed_t));
    assert (self);
    self->sub = zsock_new (ZMQ_SUB);
    assert (self->sub);
    //  Only the topic we read: the rest of the stream never reaches us.
    zsock_set_subscribe (self->sub, kd_stream_topic_name (KD_ST_WORKER));
    //  A slow scheduler must not queue the stream without bound: past the
    //  high-water mark ZeroMQ drops what comes next, which a later window
    //  reports again.
    zsock_set_rcvhwm (self->sub, 1000);
    zsock_set_maxmsgsize (self->sub, S_MAX_MSG);
    kd_curve_client (kd_curve_process (), self->sub);
    if (zsock_connect (self->sub, "%s", endpoint) < 0) {
        snprintf (err, err_size, "setting 'monitor-pub': cannot connect to '%s': %s", endpoint,
                  zmq_strerror (zmq_errno ()));
        zsock_destroy (&self->sub);
        free (self);
        return NULL;
    }
    return self;
}

void
kd_speed_feed_destroy (kd_speed_feed_t **self_p)
{
    assert (self_p);
    kd_speed_feed_t *self = *self_p;
    if (!self)
        return;
    zsock_destroy (&self->sub);
    free (self);
    *self_p = NULL;
}

zsock_t *
kd_speed_feed_socket (kd_speed_feed_t *self)
{
    assert (self);
    return self->sub;
}

//  A timing the controller may use: finite, not negative, below an hour.
static bool
s_timing (double ms)
{
    return isfinite (ms) && ms >= 0 && ms < 3600e3;
}

int
kd_speed_feed_recv (kd_speed_feed_t *self, kd_speed_report_t *out, char *err, size_t err_size)
{
    assert (self && out);
    kd_stream_t *m = NULL;
    int rc = kd_stream_recv (self->sub, &m, err, err_size);
    if (rc == -1)
        return 0;
    if (rc == -2) {
        self->malformed++;
        return -2;
    }
    if (kd_stream_topic (m) != KD_ST_WORKER) {
        kd_stream_destroy (&m);
        return 0;
    }
    double rank = kd_stream_number (m, KD_S_RANK, -1);
    double samples = kd_stream_number (m, KD_S_SAMPLES, -1);
    kd_speed_report_t r = {
        .compute_ms = kd_stream_number (m, KD_S_COMPUTE_MS, NAN),
        .push_ms = kd_stream_number (m, KD_S_PUSH_MS, NAN),
        .pull_ms = kd_stream_number (m, KD_S_PULL_MS, NAN),
        .wait_ms = kd_stream_number (m, KD_S_WAIT_MS, 0),
    };
    double age = kd_stream_number (m, KD_S_AGE_MS, NAN);
    kd_stream_destroy (&m);
    if (!(rank >= 0 && rank < S_MAX_RANK && rank == floor (rank))
    ||  !s_timing (r.compute_ms) || !s_timing (r.push_ms) || !s_timing (r.pull_ms)
    ||  !(age >= 0 && age < 1e12)) {
        snprintf (err, err_size, "a worker report without a valid rank, timings or age");
        self->malformed++;
        return -2;
    }
    r.rank = (uint32_t) rank;
    r.age_ms = (uint64_t) age;
    if (!s_timing (r.wait_ms))
        r.wait_ms = 0;
    //  A worker that stopped reporting keeps its last means on the stream;
    //  they say nothing about its speed now.  Nor does a window in which
    //  it finished no iteration: the monitor publishes the previous means
    //  again, and counting them twice would make one slow iteration look
    //  like a run of them.  Its sample count tells.
    if (r.rank >= KD_SPEED_FEED_RANKS || r.age_ms > KD_SPEED_FEED_MAX_AGE_MS
    ||  r.compute_ms + r.push_ms + r.pull_ms <= 0)
        return 0;
    uint64_t count = samples >= 0 && samples < 1e18 ? (uint64_t) samples : 0;
    if (count <= self->last [r.rank])
        return 0;
    self->last [r.rank] = count;
    *out = r;
    self->reports++;
    return 1;
}

uint64_t
kd_speed_feed_reports (kd_speed_feed_t *self)
{
    assert (self);
    return self->reports;
}

uint64_t
kd_speed_feed_malformed (kd_speed_feed_t *self)
{
    assert (self);
    return self->malformed;
}
