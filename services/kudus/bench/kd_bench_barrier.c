/*  kudus bench barrier: the scheduler's barrier under N workers.

    One process plays N workers, each with its own DEALER (so its own
    routing id), and one shard, against a real kudus-scheduler.  They speak
    the real protocol: workers HELLO (role worker, a samples count) and wait
    for WELCOME, START and their first RELEASE; the shard HELLOs with an
    endpoint and answers every COMMIT with COMMIT_OK.  Then each phase:

    - BSP: every worker ARRIVEs (clock, base, samples 1); the scheduler
      commits and RELEASEs all of them.
    - LSP (quota K = ceil (0.75 N), the quota rule: --barrier quota):
      workers 0 .. K-1 ARRIVE, which meets the quota, and are released;
      then the other N - K ARRIVE late and are released at once, their
      gradients queued for the next commit.  The adaptive barrier, LSP's
      default, releases by time and speed, which fake workers that answer
      in microseconds do not have; the quota rule's message pattern is
      what this bench times.

    Throughput (phases per second) and the scheduler's CPU time (utime +
    stime from /proc/PID/stat, per phase and per worker-phase: flat per
    worker-phase means O(N) a phase) come from phases whose ARRIVEs are
    sent in one burst.  Release latency comes from separate phases in
    which the scheduler has provably handled every other arrival first:
    each of those workers follows its ARRIVE with a probe (a PULL, which a
    scheduler answers with ERROR "command invalid" on the same connection,
    after the ARRIVE), and only when every probe is answered is the last
    ARRIVE the phase needs sent.  The latency is from that send to the
    last of the phase's RELEASEs received here, so it includes our own
    receive of them.

    The ceiling, measured the same way: a plain libzmq ROUTER process
    (kudus bench zmq-barrier) that counts N arrivals, answers probes at
    once, and on the N-th arrival sends every peer a release of the size
    of a RELEASE.  That is the cost of the fan-out over N connections with
    no Kudus code; release latencies are reported as a ratio to it.
*/
#define _GNU_SOURCE             //  memmem
#include "kd_bench.h"
#include <math.h>
#include <signal.h>

#define S_MAX_N         1024            //  the scheduler's S_MAX_WORKERS
#define S_TIMEOUT_MS    20000           //  a RELEASE later than this fails
#define S_WARMUP        3               //  untimed phases per configuration
#define S_ROWS          60000           //  training rows the workers claim
#define S_RAW_RELEASE   192             //  bytes of a raw release (a RELEASE
                                        //  with a lease of 32 rows is about
                                        //  that size)

//  The fake cluster of one configuration.
typedef struct {
    kd_bench_t *bench;          //  settings
    size_t n;                   //  workers
    size_t quota;               //  arrivals that release a phase
    pid_t scheduler;            //  kudus-scheduler
    zsock_t *shard;             //  the fake shard
    zsock_t **workers;          //  DEALER per fake worker
    uint64_t *version;          //  per worker: version of its last RELEASE
    uint64_t *clock;            //  per worker: clock it may compute
    uint64_t *lease;            //  per worker: rows of its lease, which its
                                //  ARRIVE must claim
    zmq_msg_t *held;            //  per worker: RELEASE received, to decode
    bool raw;                   //  talking to the raw zmq-barrier server
    size_t fan_in;              //  workers per aggregator (0: none)
    pid_t *aggs;                //  kudus aggregate processes
    size_t n_aggs;              //  how many
    char summary [1100];        //  the scheduler's summary file
    uint64_t phases;            //  phases run, warm-up included
} s_fake_t;

//  A DEALER to the scheduler with timeouts.
static zsock_t *
s_dealer (int port)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    assert (sock);
    zsock_set_rcvtimeo (sock, S_TIMEOUT_MS);
    zsock_set_linger (sock, 0);
    if (zsock_connect (sock, "tcp://127.0.0.1:%d", port))
        zsock_destroy (&sock);
    return sock;
}

//  Read a RELEASE (skipping WELCOME, START, HEARTBEAT) and note its
//  version and clock.  Returns 0 or -1.
static int
s_await_release (s_fake_t *f, size_t w)
{
    for (;;) {
        kd_msg_t *msg = NULL;
        kd_msg_err_t err;
        if (kd_msg_recv (f->workers [w], &msg, NULL, &err) != 0) {
            kd_error ("worker %zu: no RELEASE", w);
            return -1;
        }
        kd_msg_type_t type = kd_msg_type (msg);
        if (type == KD_MSG_RELEASE) {
            f->version [w] = kd_msg_uint (msg, KD_F_VERSION);
            f->clock [w] = kd_msg_uint (msg, KD_F_CLOCK);
            size_t rows = 0;
            kd_msg_uints (msg, KD_F_ROWS, &rows);
            f->lease [w] = rows;
        }
        else
        if (type == KD_MSG_ERROR || type == KD_MSG_STOP)
            kd_error ("worker %zu: %s %s", w, kd_msg_type_name (type), kd_msg_str (msg, KD_F_REASON));
        kd_msg_destroy (&msg);
        if (type == KD_MSG_RELEASE)
            return 0;
        if (type == KD_MSG_ERROR || type == KD_MSG_STOP)
            return -1;
    }
}

//  Send worker w's ARRIVE for the clock it was released to compute.
static int
s_arrive (s_fake_t *f, size_t w)
{
    if (f->raw)
        return zmq_send (zsock_resolve (f->workers [w]), "A", 1, 0) == 1 ? 0 : -1;
    kd_msg_t *msg = kd_msg_new (KD_MSG_ARRIVE);
    kd_msg_set_uint (msg, KD_F_CLOCK, f->clock [w]);
    kd_msg_set_uint (msg, KD_F_BASE, f->version [w]);
    kd_msg_set_uint (msg, KD_F_SAMPLES, f->lease [w]);
    kd_msg_set_float (msg, KD_F_LOSS, 1.0);
    return kd_msg_send (&msg, f->workers [w]);
}

//  Send worker w's probe: the reply proves its ARRIVE was handled.
static int
s_probe (s_fake_t *f, size_t w)
{
    if (f->raw)
        return zmq_send (zsock_resolve (f->workers [w]), "P", 1, 0) == 1 ? 0 : -1;
    kd_msg_t *msg = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (msg, KD_F_VERSION, 0);
    return kd_msg_send (&msg, f->workers [w]);
}

//  Wait for the answer to worker w's probe.  Returns 0 or -1.
static int
s_probe_answer (s_fake_t *f, size_t w)
{
    void *handle = zsock_resolve (f->workers [w]);
    char buf [512];
    for (;;) {
        int n = zmq_recv (handle, buf, sizeof buf, 0);
        if (n < 0) {
            kd_error ("worker %zu: probe not answered", w);
            return -1;
        }
        if (f->raw ? (n == 1 && buf [0] == 'P')
                   : memmem (buf, (size_t) n < sizeof buf ? (size_t) n : sizeof buf, "\xa5" "ERROR", 6) != NULL)
            return 0;
    }
}

//  Receive worker w's RELEASE as raw frames, skipping anything else: the
//  decode waits until the phase is timed.  Returns 0 or -1.
static int
s_take_release (s_fake_t *f, size_t w)
{
    void *handle = zsock_resolve (f->workers [w]);
    for (;;) {
        zmq_msg_init (&f->held [w]);
        if (zmq_msg_recv (&f->held [w], handle, 0) < 0) {
            kd_error ("worker %zu: no RELEASE in %d ms", w, S_TIMEOUT_MS);
            zmq_msg_close (&f->held [w]);
            return -1;
        }
        //  msgpack fixstr "RELEASE" appears in its header and in no other
        //  message a worker gets.
        if (f->raw ? zmq_msg_size (&f->held [w]) == S_RAW_RELEASE
                   : memmem (zmq_msg_data (&f->held [w]), zmq_msg_size (&f->held [w]),
                             "\xa7RELEASE", 8) != NULL)
            return 0;
        zmq_msg_close (&f->held [w]);
    }
}

//  Decode a held RELEASE into the worker's version and clock.
static int
s_decode_release (s_fake_t *f, size_t w)
{
    if (f->raw) {
        zmq_msg_close (&f->held [w]);
        return 0;
    }
    zmsg_t *zmsg = zmsg_new ();
    zmsg_addmem (zmsg, zmq_msg_data (&f->held [w]), zmq_msg_size (&f->held [w]));
    zmq_msg_close (&f->held [w]);
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    if (kd_msg_decode (&zmsg, false, &msg, NULL, &err) != 0) {
        kd_error ("worker %zu: bad RELEASE: %s", w, err.reason);
        return -1;
    }
    f->version [w] = kd_msg_uint (msg, KD_F_VERSION);
    f->clock [w] = kd_msg_uint (msg, KD_F_CLOCK);
    size_t rows = 0;
            kd_msg_uints (msg, KD_F_ROWS, &rows);
            f->lease [w] = rows;
    kd_msg_destroy (&msg);
    return 0;
}

//  Answer every COMMIT waiting on the fake shard with COMMIT_OK.
static void
s_shard_drain (s_fake_t *f)
{
    if (f->raw)
        return;
    kd_msg_t *msg = NULL;
    zsock_set_rcvtimeo (f->shard, 0);
    while (kd_msg_recv (f->shard, &msg, NULL, NULL) != -1) {
        if (msg && kd_msg_type (msg) == KD_MSG_COMMIT) {
            kd_msg_t *ok = kd_msg_new (KD_MSG_COMMIT_OK);
            kd_msg_set_uint (ok, KD_F_VERSION, kd_msg_uint (msg, KD_F_VERSION));
            kd_msg_send (&ok, f->shard);
        }
        kd_msg_destroy (&msg);
    }
    zsock_set_rcvtimeo (f->shard, S_TIMEOUT_MS);
}

//  One phase.  With latency_ms, the arrivals before the last one the
//  phase needs are probed first, and *latency_ms gets the release latency;
//  without, all arrive in one burst.  Returns 0 or -1.
static int
s_phase (s_fake_t *f, double *latency_ms)
{
    size_t burst = latency_ms ? f->quota - 1 : f->quota;
    for (size_t w = 0; w < burst; w++)
        if (s_arrive (f, w) || (latency_ms && s_probe (f, w)))
            return -1;
    for (size_t w = 0; latency_ms && w < burst; w++)
        if (s_probe_answer (f, w))
            return -1;
    double t_last = kd_now_msf ();
    if (burst < f->quota && s_arrive (f, burst))
        return -1;
    for (size_t w = 0; w < f->quota; w++)
        if (s_take_release (f, w))
            return -1;
    if (latency_ms)
        *latency_ms = kd_now_msf () - t_last;
    for (size_t w = 0; w < f->quota; w++)
        if (s_decode_release (f, w))
            return -1;
    //  LSP: the rest arrive late and are released at once.
    for (size_t w = f->quota; w < f->n; w++)
        if (s_arrive (f, w))
            return -1;
    for (size_t w = f->quota; w < f->n; w++)
        if (s_take_release (f, w) || s_decode_release (f, w))
            return -1;
    s_shard_drain (f);
    f->phases++;
    return 0;
}

//  Sum of the aggregators' CPU time, ms.
static double
s_aggs_cpu_ms (s_fake_t *f)
{
    double ms = 0;
    for (size_t i = 0; i < f->n_aggs; i++)
        ms += kd_bench_cpu_ms (f->aggs [i]);
    return ms;
}

//  Stop the scheduler and close every socket.
static void
s_fake_stop (s_fake_t *f)
{
    for (size_t w = 0; f->workers && w < f->n; w++)
        zsock_destroy (&f->workers [w]);
    zsock_destroy (&f->shard);
    kd_bench_stop (f->scheduler);
    for (size_t i = 0; i < f->n_aggs; i++)
        kd_bench_stop (f->aggs [i]);
    free (f->aggs);
    free (f->workers);
    free (f->version);
    free (f->clock);
    free (f->lease);
    free (f->held);
}

//  Start the scheduler, register the fake shard and workers, and wait for
//  every first RELEASE.  Returns 0 or -1.
static int
s_fake_start (s_fake_t *f, const char *model)
{
    kd_bench_t *b = f->bench;
    char bind [64], n [16], quota [16];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", b->base_port);
    snprintf (n, sizeof n, "%zu", f->n);
    snprintf (quota, sizeof quota, "%zu", f->quota);
    f->workers = (zsock_t **) calloc (f->n, sizeof (zsock_t *));
    f->version = (uint64_t *) calloc (f->n, sizeof (uint64_t));
    f->clock = (uint64_t *) calloc (f->n, sizeof (uint64_t));
    f->lease = (uint64_t *) calloc (f->n, sizeof (uint64_t));
    f->held = (zmq_msg_t *) calloc (f->n, sizeof (zmq_msg_t));
    assert (f->workers && f->version && f->clock && f->held);
    if (f->raw) {
        const char *argv [] = { b->self_exe, "bench", "zmq-barrier", bind, n, quota, NULL };
        f->scheduler = kd_bench_spawn (b, argv);
        if (f->scheduler < 0)
            return -1;
        //  Wait until every connection is up: a probe each.
        for (size_t w = 0; w < f->n; w++)
            if (!(f->workers [w] = s_dealer (b->base_port)) || s_probe (f, w))
                return -1;
        for (size_t w = 0; w < f->n; w++)
            if (s_probe_answer (f, w))
                return -1;
        return 0;
    }
    //  Heartbeats are slow and liveness long: a fake peer only talks when
    //  the protocol asks it to.  Every fake worker comes from 127.0.0.1,
    //  and its probes are "unknown" commands: neither may count against it.
    snprintf (f->summary, sizeof f->summary, "%s/kd-bench-barrier-%d.json", kd_temp_base (), (int) getpid ());
    const char *argv [] = { "kudus-scheduler", "--bind", bind, "--shards", "1",
                            "--min-workers", n, "--consistency", model,
                            "--quota-ratio", "0.75", "--barrier", "quota", "--epochs", "1000",
                            "--heartbeat-ms", "60000", "--liveness", "100",
                            "--summary", f->summary, "--max-registrations-per-key", "4096",
                            "--max-malformed", "0", "--log-level", "error", NULL };
    f->scheduler = kd_bench_spawn (b, argv);
    if (f->scheduler < 0)
        return -1;
    //  The tree: worker w talks to aggregator w / fan-in, at base-port + 1 + i.
    f->n_aggs = f->fan_in ? (f->n + f->fan_in - 1) / f->fan_in : 0;
    f->aggs = (pid_t *) calloc (f->n_aggs + 1, sizeof (pid_t));
    assert (f->aggs);
    for (size_t i = 0; i < f->n_aggs; i++) {
        char agg_bind [64];
        snprintf (agg_bind, sizeof agg_bind, "tcp://127.0.0.1:%d", b->base_port + 1 + (int) i);
        const char *agg_argv [] = { b->self_exe, "aggregate", "--bind", agg_bind, "--scheduler", bind,
                                    "--log-level", "error", NULL };
        f->aggs [i] = kd_bench_spawn (b, agg_argv);
        if (f->aggs [i] < 0)
            return -1;
    }
    f->shard = s_dealer (b->base_port);
    if (!f->shard)
        return -1;
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "shard");
    kd_msg_set_str (hello, KD_F_NAME, "bench-shard");
    kd_msg_set_str (hello, KD_F_ENDPOINT, "tcp://127.0.0.1:1");
    kd_msg_send (&hello, f->shard);
    for (size_t w = 0; w < f->n; w++) {
        f->workers [w] = s_dealer (b->base_port + (f->fan_in ? 1 + (int) (w / f->fan_in) : 0));
        if (!f->workers [w])
            return -1;
        char name [48];
        snprintf (name, sizeof name, "bench-worker-%zu", w);
        hello = kd_msg_new (KD_MSG_HELLO);
        kd_msg_set_str (hello, KD_F_ROLE, "worker");
        kd_msg_set_str (hello, KD_F_NAME, name);
        kd_msg_set_uint (hello, KD_F_SAMPLES, S_ROWS);
        kd_msg_send (&hello, f->workers [w]);
    }
    for (size_t w = 0; w < f->n; w++)
        if (s_await_release (f, w))
            return -1;
    s_shard_drain (f);
    return 0;
}

//  The consistency controller alone (common/core/kd_controller.c, pure logic):
//  microseconds of CPU per phase of n workers, every one arriving, as the
//  scheduler drives it.  Isolates its bookkeeping from sockets and noise.
static double
s_controller_us (const char *model, size_t n, int phases)
{
    kd_controller_opts_t opts;
    kd_controller_opts_defaults (&opts, (kd_consistency_t) kd_consistency_parse (model));
    opts.quota_ratio = 0.75;
    opts.barrier = KD_BARRIER_QUOTA;
    kd_controller_t *ctl = kd_controller_new (&opts);
    assert (ctl);
    uint64_t *clock = (uint64_t *) calloc (n, sizeof (uint64_t));
    uint64_t *version = (uint64_t *) calloc (n, sizeof (uint64_t));
    assert (clock && version);
    const kd_decision_t *d;
    for (size_t w = 0; w < n; w++)
        kd_controller_join (ctl, (uint32_t) w, 0);
    double t0 = 0;
    //  Two untimed phases first, then the timed ones.
    for (int p = -2; p < phases; p++) {
        if (p == 0)
            t0 = kd_now_msf ();
        for (size_t w = 0; w < n; w++) {
            while ((d = kd_controller_next (ctl)))
                if (d->type == KD_DEC_RELEASE) {
                    clock [d->rank] = d->clock;
                    version [d->rank] = d->version;
                }
            kd_controller_arrive (ctl, (uint32_t) w, clock [w], version [w], 1, 0);
        }
        while ((d = kd_controller_next (ctl)))
            if (d->type == KD_DEC_RELEASE) {
                clock [d->rank] = d->clock;
                version [d->rank] = d->version;
            }
    }
    double us = (kd_now_msf () - t0) * 1000.0 / phases;
    kd_controller_destroy (&ctl);
    free (clock);
    free (version);
    return us;
}

//  ASP and SSP: one round is one gradient per worker, every worker arriving
//  for the same clock, so none is held and each is released at once.
//  Returns 0 or -1.
static int
s_round_async (s_fake_t *f)
{
    for (size_t w = 0; w < f->n; w++)
        if (s_arrive (f, w))
            return -1;
    for (size_t w = 0; w < f->n; w++)
        if (s_await_release (f, w))
            return -1;
    s_shard_drain (f);
    return 0;
}

//  Scheduler CPU per gradient under ASP or SSP with n workers, using the
//  scheduler in bindir.  Sets *per_s to gradients per second.  Returns the
//  median microseconds, or -1 on failure.
static double
s_async_cpu_us (kd_bench_t *b, const char *model, size_t n, int rounds, double *per_s)
{
    s_fake_t f = { .bench = b, .n = n, .quota = n };
    double cpu [KD_BENCH_MAX_LIST * 4], rate [KD_BENCH_MAX_LIST * 4];
    int repeat = b->repeat < KD_BENCH_MAX_LIST * 4 ? b->repeat : KD_BENCH_MAX_LIST * 4;
    int rc = s_fake_start (&f, model);
    for (int i = 0; i < S_WARMUP && rc == 0; i++)
        rc = s_round_async (&f);
    for (int r = 0; r < repeat && rc == 0; r++) {
        double cpu0 = kd_bench_cpu_ms (f.scheduler), t0 = kd_now_msf ();
        for (int i = 0; i < rounds && rc == 0; i++)
            rc = s_round_async (&f);
        double secs = (kd_now_msf () - t0) / 1000.0;
        cpu [r] = (kd_bench_cpu_ms (f.scheduler) - cpu0) * 1000.0 / ((double) rounds * (double) n);
        rate [r] = (double) rounds * (double) n / secs;
    }
    s_fake_stop (&f);
    if (rc)
        return -1;
    *per_s = kd_bench_median (rate, repeat);
    return kd_bench_median (cpu, repeat);
}

//  `--consistency asp,ssp`: the scheduler's CPU per applied gradient, and,
//  with --baseline-bin-dir, the same against another build's scheduler in
//  the same run (the ratio the direct path was built for).
static int
s_bench_async (kd_bench_t *b, const char *model, const uint64_t *ns, int n_ns, bool *header)
{
    int rounds = (int) kd_config_int (b->config, "phases");
    const char *baseline = kd_config_str (b->config, "baseline-bin-dir");
    for (int i = 0; i < n_ns; i++) {
        double rate = 0, base_rate = 0;
        double us = s_async_cpu_us (b, model, ns [i], rounds, &rate);
        if (us < 0) {
            kd_error ("bench async failed consistency=%s workers=%llu", model,
                      (unsigned long long) ns [i]);
            return 1;
        }
        double base_us = -1;
        if (*baseline) {
            char ours [sizeof b->bindir];
            snprintf (ours, sizeof ours, "%s", b->bindir);
            snprintf (b->bindir, sizeof b->bindir, "%s", baseline);
            base_us = s_async_cpu_us (b, model, ns [i], rounds, &base_rate);
            snprintf (b->bindir, sizeof b->bindir, "%s", ours);
            if (base_us < 0) {
                kd_error ("baseline scheduler failed consistency=%s workers=%llu bin-dir=%s",
                          model, (unsigned long long) ns [i], baseline);
                return 1;
            }
        }
        char v [8][32];
        snprintf (v [0], 32, "\"%s\"", model);
        snprintf (v [1], 32, "%llu", (unsigned long long) ns [i]);
        snprintf (v [2], 32, "%.0f", rate);
        snprintf (v [3], 32, "%.2f", us);
        snprintf (v [4], 32, "%.0f", base_rate);
        snprintf (v [5], 32, base_us >= 0 ? "%.2f" : "null", base_us);
        snprintf (v [6], 32, base_us > 0 ? "%.3f" : "null", us / base_us);
        const char *kv [] = {
            "consistency", v [0], "workers", v [1], "gradients_per_s", v [2],
            "sched_cpu_us_per_gradient", v [3], "baseline_gradients_per_s", v [4],
            "baseline_cpu_us_per_gradient", v [5], "cpu_ratio_vs_baseline", v [6], NULL };
        kd_bench_row (b, "async", header, kv);
    }
    return 0;
}

//  The fan-in list: like kd_bench_list, but 0 (no aggregators) is allowed.
static int
s_fan_list (const char *text, uint64_t *out, int max)
{
    int n = 0;
    for (const char *p = text; *p; ) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull (p, &end, 10);
        if (end == p || errno || (*end && *end != ',') || n == max)
            return -1;
        out [n++] = v;
        p = *end ? end + 1 : end;
    }
    return n;
}

//  What one configuration measured (medians over the repeats).
typedef struct {
    double rate;                //  phases per second, in bursts
    double p50, p99;            //  release latency, ms
    double cpu;                 //  scheduler CPU ms per phase
    double agg_cpu;             //  all aggregators' CPU ms per phase
    double relays;              //  RELAYs in and out of the scheduler per
                                //  phase (-1 when unknown)
    long sched_rss;             //  peak RSS, KiB: the scheduler,
    long agg_rss;               //  the largest aggregator,
    long client_rss;            //  this process (the fake workers)
} s_row_t;

//  RELAYs the scheduler handled, from its summary (written at SIGTERM).
static double
s_relays (s_fake_t *f)
{
    char *text = kd_read_file (f->summary);
    unlink (f->summary);
    const char *at = text ? strstr (text, "\"relays\":") : NULL;
    unsigned long long in = 0, out = 0;
    size_t aggs = 0;
    int got = at ? sscanf (at, "\"relays\": {\"aggregators\": %zu, \"in\": %llu, \"items_in\": %*u, "
                           "\"out\": %llu", &aggs, &in, &out) : 0;
    free (text);
    return got == 3 && f->phases ? (double) (in + out) / (double) f->phases : -1;
}

//  One Kudus configuration: bursts for throughput and CPU, then probed
//  phases for latency, repeat times.  Returns 0 or 1.
static int
s_measure (kd_bench_t *b, const char *model, size_t n, size_t quota, size_t fan_in, int phases,
           int repeat, double *lat, s_row_t *row)
{
    s_fake_t f = { .bench = b, .n = n, .quota = quota, .fan_in = fan_in };
    double rate [KD_BENCH_MAX_LIST * 4], p50 [KD_BENCH_MAX_LIST * 4], p99 [KD_BENCH_MAX_LIST * 4],
           cpu [KD_BENCH_MAX_LIST * 4], agg [KD_BENCH_MAX_LIST * 4];
    int rc = 0;
    if (s_fake_start (&f, model)) {
        kd_error ("cannot start the barrier cluster workers=%zu fan_in=%zu", f.n, fan_in);
        rc = 1;
    }
    for (int i = 0; i < S_WARMUP && rc == 0; i++)
        if (s_phase (&f, NULL) || s_phase (&f, &lat [0]))
            rc = 1;
    for (int r = 0; r < repeat && rc == 0; r++) {
        double cpu0 = kd_bench_cpu_ms (f.scheduler), agg0 = s_aggs_cpu_ms (&f);
        double t0 = kd_now_msf ();
        for (int p = 0; p < phases && rc == 0; p++)
            if (s_phase (&f, NULL))
                rc = 1;
        double secs = (kd_now_msf () - t0) / 1000.0;
        double cpu1 = kd_bench_cpu_ms (f.scheduler), agg1 = s_aggs_cpu_ms (&f);
        for (int p = 0; p < phases && rc == 0; p++)
            if (s_phase (&f, &lat [p]))
                rc = 1;
        if (rc)
            break;
        rate [r] = phases / secs;
        cpu [r] = (cpu1 - cpu0) / phases;
        agg [r] = (agg1 - agg0) / phases;
        p99 [r] = kd_bench_quantile (lat, phases, 0.99);
        p50 [r] = kd_bench_quantile (lat, phases, 0.5);
    }
    long sched_rss = kd_bench_peak_rss (f.scheduler), agg_rss = -1;
    for (size_t i = 0; i < f.n_aggs; i++) {
        long k = kd_bench_peak_rss (f.aggs [i]);
        agg_rss = k > agg_rss ? k : agg_rss;
    }
    s_fake_stop (&f);
    double relays = s_relays (&f);
    if (rc)
        return 1;
    *row = (s_row_t) {
        .rate = kd_bench_median (rate, repeat), .p50 = kd_bench_median (p50, repeat),
        .p99 = kd_bench_median (p99, repeat), .cpu = kd_bench_median (cpu, repeat),
        .agg_cpu = kd_bench_median (agg, repeat), .relays = fan_in ? relays : -1,
        .sched_rss = sched_rss, .agg_rss = agg_rss, .client_rss = kd_bench_peak_rss (getpid ())
    };
    return 0;
}

int
kd_bench_barrier (kd_bench_t *b)
{
    uint64_t ns [KD_BENCH_MAX_LIST];
    int n_ns = kd_bench_list (kd_config_str (b->config, "workers"), ns, KD_BENCH_MAX_LIST);
    if (n_ns < 1) {
        fprintf (stderr, "kudus bench barrier: --workers is a comma-separated list of counts\n");
        return 2;
    }
    for (int i = 0; i < n_ns; i++)
        if (ns [i] > S_MAX_N || ns [i] < 2) {
            fprintf (stderr, "kudus bench barrier: workers must be in [2, %d]\n", S_MAX_N);
            return 2;
        }
    uint64_t fans [KD_BENCH_MAX_LIST];
    int n_fan = s_fan_list (kd_config_str (b->config, "fan-in"), fans, KD_BENCH_MAX_LIST);
    for (int i = 0; i < n_fan; i++)
        if (fans [i] == 1 || fans [i] > S_MAX_N)
            n_fan = -1;
    if (n_fan < 1) {
        fprintf (stderr, "kudus bench barrier: --fan-in is a comma-separated list of 0 (no "
                 "aggregators) or workers per aggregator in [2, %d]\n", S_MAX_N);
        return 2;
    }
    char models [64];
    snprintf (models, sizeof models, "%s", kd_config_str (b->config, "consistency"));
    int phases = (int) kd_config_int (b->config, "phases");
    double *lat = (double *) malloc ((size_t) phases * sizeof (double));
    assert (lat);
    int rc = 0;
    bool header = false;
    char *save = NULL;
    for (char *model = strtok_r (models, ",", &save); model && rc == 0;
         model = strtok_r (NULL, ",", &save)) {
        if (!strcmp (model, "asp") || !strcmp (model, "ssp")) {
            bool async_header = false;
            rc = s_bench_async (b, model, ns, n_ns, &async_header);
            continue;
        }
        if (strcmp (model, "bsp") && strcmp (model, "lsp")) {
            fprintf (stderr, "kudus bench barrier: consistency '%s' is not bsp, lsp, asp or ssp\n",
                     model);
            rc = 2;
            break;
        }
        for (int ni = 0; ni < n_ns && rc == 0; ni++) {
            size_t n = ns [ni];
            size_t quota = strcmp (model, "lsp") ? n : (size_t) ceil (0.75 * (double) n - 1e-9);
            double raw50 [KD_BENCH_MAX_LIST * 4], raw99 [KD_BENCH_MAX_LIST * 4];
            int repeat = b->repeat < KD_BENCH_MAX_LIST * 4 ? b->repeat : KD_BENCH_MAX_LIST * 4;
            //  The ceiling: the same phases against the raw fan-out.
            s_fake_t raw = { .bench = b, .n = n, .quota = quota, .raw = true };
            if (s_fake_start (&raw, model)) {
                kd_error ("cannot start the raw barrier workers=%zu", raw.n);
                rc = 1;
            }
            for (int i = 0; i < S_WARMUP && rc == 0; i++)
                if (s_phase (&raw, &lat [0]))
                    rc = 1;
            for (int r = 0; r < repeat && rc == 0; r++) {
                for (int p = 0; p < phases && rc == 0; p++)
                    if (s_phase (&raw, &lat [p]))
                        rc = 1;
                raw99 [r] = kd_bench_quantile (lat, phases, 0.99);
                raw50 [r] = kd_bench_quantile (lat, phases, 0.5);
            }
            s_fake_stop (&raw);
            for (int fi = 0; fi < n_fan && rc == 0; fi++) {
                s_row_t row;
                rc = s_measure (b, model, n, quota, (size_t) fans [fi], phases, repeat, lat, &row);
                if (rc) {
                    kd_error ("barrier failed consistency=%s workers=%zu fan_in=%llu", model, n,
                              (unsigned long long) fans [fi]);
                    break;
                }
                char v [20][32];
                double r50 = kd_bench_median (raw50, repeat);
                snprintf (v [0], 32, "\"%s\"", model);
                snprintf (v [1], 32, "%zu", n);
                snprintf (v [2], 32, "%zu", quota);
                snprintf (v [3], 32, "%llu", (unsigned long long) fans [fi]);
                snprintf (v [4], 32, "%.1f", row.rate);
                snprintf (v [5], 32, "%.3f", row.p50);
                snprintf (v [6], 32, "%.3f", row.p99);
                snprintf (v [7], 32, "%.3f", r50);
                snprintf (v [8], 32, "%.3f", kd_bench_median (raw99, repeat));
                snprintf (v [9], 32, "%.3f", row.p50 / r50);
                snprintf (v [10], 32, "%.3f", row.cpu);
                snprintf (v [11], 32, "%.3f", row.cpu * 1000.0 / (double) n);
                snprintf (v [12], 32, "%.3f", row.agg_cpu);
                snprintf (v [13], 32, row.relays >= 0 ? "%.1f" : "null", row.relays);
                snprintf (v [14], 32, "%d", phases);
                snprintf (v [15], 32, "%d", repeat);
                snprintf (v [16], 32, "%.1f", s_controller_us (model, n, phases * 5));
                snprintf (v [17], 32, "%ld", row.sched_rss);
                snprintf (v [18], 32, row.agg_rss >= 0 ? "%ld" : "null", row.agg_rss);
                snprintf (v [19], 32, "%ld", row.client_rss);
                const char *kv [] = {
                    "consistency", v [0], "workers", v [1], "quota", v [2], "fan_in", v [3],
                    "phases_per_s", v [4], "release_p50_ms", v [5], "release_p99_ms", v [6],
                    "zmq_release_p50_ms", v [7], "zmq_release_p99_ms", v [8],
                    "ratio_vs_zmq", v [9],
                    "sched_cpu_ms_per_phase", v [10], "sched_cpu_us_per_worker", v [11],
                    "aggregators_cpu_ms_per_phase", v [12], "sched_relays_per_phase", v [13],
                    "controller_us_per_phase", v [16],
                    "sched_rss_kib", v [17], "aggregator_rss_kib", v [18], "client_rss_kib", v [19],
                    "phases", v [14], "repeat", v [15], NULL };
                kd_bench_row (b, "barrier", &header, kv);
            }
        }
    }
    free (lat);
    return rc;
}

//  --------------------------------------------------------------------------
//  The raw barrier (a helper process; no Kudus code on its path)

int
kd_bench_barrier_server (const char *endpoint, size_t n, size_t quota)
{
    if (n == 0 || n > S_MAX_N || quota == 0 || quota > n)
        return 2;
    void *ctx = zmq_ctx_new ();
    void *router = kd_bench_raw_router (ctx, endpoint, "zmq-barrier");
    if (!router) {
        zmq_ctx_term (ctx);
        return 1;
    }
    //  'P' is answered at once.  Of the n arrivals ('A') of a round, the
    //  first `quota` are held and then released together (the phase); the
    //  others are released as they come (LSP's late ones).
    char (*held) [256] = calloc (n, 256);
    size_t *held_len = calloc (n, sizeof (size_t));
    assert (held && held_len);
    size_t n_held = 0, arrived = 0;
    char release [S_RAW_RELEASE] = { 0 };
    while (!kd_bench_raw_stop) {
        char id [256], body [64];
        int n_id = zmq_recv (router, id, sizeof id, 0);
        if (n_id < 0 || n_id > (int) sizeof id)
            continue;
        int n_body = zmq_recv (router, body, sizeof body, 0);
        if (n_body != 1)
            continue;
        if (body [0] == 'P') {
            zmq_send (router, id, (size_t) n_id, ZMQ_SNDMORE);
            zmq_send (router, "P", 1, 0);
            continue;
        }
        if (arrived < quota) {
            memcpy (held [n_held], id, (size_t) n_id);
            held_len [n_held++] = (size_t) n_id;
            if (n_held == quota) {
                for (size_t i = 0; i < n_held; i++) {
                    zmq_send (router, held [i], held_len [i], ZMQ_SNDMORE);
                    zmq_send (router, release, sizeof release, 0);
                }
                n_held = 0;
            }
        }
        else {
            zmq_send (router, id, (size_t) n_id, ZMQ_SNDMORE);
            zmq_send (router, release, sizeof release, 0);
        }
        if (++arrived == n)
            arrived = 0;
    }
    free (held);
    free (held_len);
    zmq_close (router);
    zmq_ctx_term (ctx);
    return 0;
}
