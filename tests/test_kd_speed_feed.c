/*  test_kd_speed_feed: the scheduler reads workers' timings off the
    monitor's stream.

    A PUB socket stands in for the monitor.  A fresh worker report comes
    out as a report; other topics, stale reports, idle workers and a
    window that repeats the last one are passed over; a malformed message or a report with a bad rank or
    timing is refused with -2, counted, and the feed goes on reading.
*/
#include <criterion/criterion.h>
#include "kd_speed_feed.h"
#include "kd_stream.h"
#include "kd_util.h"

TestSuite (kd_speed_feed, .timeout = 30);

//  A "worker" message; each one carries a sample count higher than the
//  last, as a worker that iterated in the window.
static uint64_t s_samples = 0;

static kd_stream_t *
s_worker (uint64_t rank, double compute, double push, double pull, uint64_t age)
{
    kd_stream_t *m = kd_stream_new (KD_ST_WORKER);
    kd_stream_set_uint (m, KD_S_RANK, rank);
    kd_stream_set_uint (m, KD_S_SAMPLES, s_samples += 32);
    kd_stream_set_float (m, KD_S_COMPUTE_MS, compute);
    kd_stream_set_float (m, KD_S_PUSH_MS, push);
    kd_stream_set_float (m, KD_S_PULL_MS, pull);
    kd_stream_set_float (m, KD_S_WAIT_MS, 3);
    kd_stream_set_uint (m, KD_S_AGE_MS, age);
    return m;
}

//  The next message's verdict, waiting up to 2 s for it.
static int
s_next (kd_speed_feed_t *feed, kd_speed_report_t *r, char *err, size_t size)
{
    zpoller_t *poller = zpoller_new (kd_speed_feed_socket (feed), NULL);
    void *which = zpoller_wait (poller, 2000);
    zpoller_destroy (&poller);
    cr_assert (which, "no stream message within 2 s");
    return kd_speed_feed_recv (feed, r, err, size);
}

Test (kd_speed_feed, reads_fresh_worker_reports_and_refuses_malformed_ones)
{
    zsock_t *pub = zsock_new_pub ("inproc://speed-feed-test");
    cr_assert (pub);
    char err [160];
    kd_speed_feed_t *feed = kd_speed_feed_new ("inproc://speed-feed-test", err, sizeof err);
    cr_assert (feed, "%s", err);
    //  A SUB joins a moment after it connects: publish until one lands.
    kd_speed_report_t r = { 0 };
    zpoller_t *poller = zpoller_new (kd_speed_feed_socket (feed), NULL);
    bool joined = false;
    for (int i = 0; i < 200 && !joined; i++) {
        kd_stream_t *m = s_worker (7, 40, 5, 2, 100);
        kd_stream_send (&m, pub);
        joined = zpoller_wait (poller, 10) != NULL;
    }
    zpoller_destroy (&poller);
    cr_assert (joined, "the feed never heard the stream");
    cr_assert_eq (kd_speed_feed_recv (feed, &r, err, sizeof err), 1, "%s", err);
    cr_expect_eq (r.rank, 7);
    cr_expect_float_eq (r.compute_ms, 40, 1e-9);
    cr_expect_float_eq (r.push_ms + r.pull_ms, 7, 1e-9);
    cr_expect_float_eq (r.wait_ms, 3, 1e-9);
    //  Drain the joining burst.
    while (zsock_events (kd_speed_feed_socket (feed)) & ZMQ_POLLIN)
        kd_speed_feed_recv (feed, &r, err, sizeof err);
    uint64_t taken = kd_speed_feed_reports (feed);

    //  Another topic (not subscribed: never arrives), a stale report, an
    //  idle one: passed over.  Then one good report proves they were read.
    kd_stream_t *m = kd_stream_new (KD_ST_STATS);
    kd_stream_set_uint (m, KD_S_VERSION, 5);
    kd_stream_send (&m, pub);
    m = s_worker (2, 40, 5, 2, KD_SPEED_FEED_MAX_AGE_MS + 1);
    kd_stream_send (&m, pub);
    m = s_worker (2, 0, 0, 0, 10);
    kd_stream_send (&m, pub);
    cr_expect_eq (s_next (feed, &r, err, sizeof err), 0, "a stale report is no sample");
    cr_expect_eq (s_next (feed, &r, err, sizeof err), 0, "an idle worker is no sample");
    //  A window without a new iteration repeats the last means: one
    //  sample, not two.
    m = s_worker (5, 40, 5, 2, 10);
    kd_stream_t *again = s_worker (5, 40, 5, 2, 510);
    kd_stream_set_uint (again, KD_S_SAMPLES, s_samples - 32);
    kd_stream_send (&m, pub);
    kd_stream_send (&again, pub);
    cr_expect_eq (s_next (feed, &r, err, sizeof err), 1);
    cr_expect_eq (r.rank, 5);
    cr_expect_eq (s_next (feed, &r, err, sizeof err), 0, "a repeated window is no sample");

    //  Malformed: a bad body, a rank beyond any cluster, a negative timing.
    zstr_sendm (pub, "worker");
    zstr_send (pub, "\xc1 not msgpack");
    m = s_worker (1ull << 40, 40, 5, 2, 10);
    kd_stream_send (&m, pub);
    m = s_worker (3, -1, 5, 2, 10);
    kd_stream_send (&m, pub);
    for (int i = 0; i < 3; i++) {
        err [0] = 0;
        cr_expect_eq (s_next (feed, &r, err, sizeof err), -2, "message %d", i);
        cr_expect (err [0], "a reason is given");
    }
    cr_expect_eq (kd_speed_feed_malformed (feed), 3);
    //  And it keeps reading.
    m = s_worker (4, 80, 30, 30, 0);
    kd_stream_send (&m, pub);
    cr_expect_eq (s_next (feed, &r, err, sizeof err), 1);
    cr_expect_eq (r.rank, 4);
    cr_expect_float_eq (r.push_ms + r.pull_ms, 60, 1e-9);
    cr_expect_eq (kd_speed_feed_reports (feed), taken + 2);
    kd_speed_feed_destroy (&feed);
    cr_expect_null (feed);
    zsock_destroy (&pub);
}

Test (kd_speed_feed, a_malformed_endpoint_is_a_clear_error)
{
    char err [160] = "";
    kd_speed_feed_t *feed = kd_speed_feed_new ("not an endpoint", err, sizeof err);
    cr_expect_null (feed);
    cr_expect (strstr (err, "monitor-pub"), "%s", err);
}
