/*  kudus bench sparse: keyed (sparse) models against dense ones.

    1. What a keyed pull costs.  Two one-shard clusters run side by side,
       each a real kudus-scheduler and kudus-shard on loopback: one shard
       holds a keyed model of the largest `sparse-features` keys
       (--bench-keys), the other `pull-keys` dense floats (--bench-floats).
       This process pulls `pull-keys` scattered keys, which one push
       touched first, from the one and as many floats from the other, in
       alternating timed runs (--run-seconds each), and reports the median
       op times and their ratio.  A keyed pull sends its keys (8 bytes a
       key) and the shard looks each one up, so it cannot be as cheap as a
       dense pull of the same floats: the ratio says how much dearer.

       Each repeat also splits that difference into measured parts.  The
       wire: a plain libzmq ROUTER (`kudus bench zmq-reply`, no Kudus code)
       answers every request with a header-sized frame and n floats sent
       without a copy, as the shard lends its snapshot, and the client
       times round trips of a dense pull's shape (a header-sized frame) and
       of a keyed pull's (the same and the 8 n byte keys frame).  The work,
       timed in this process with the real code on the same keys: the
       client's building and kd_msg_send of a keyed and a dense PULL (into
       a PUB socket with no subscriber, which drops it, so no wire is
       timed), the shard's kd_msg_decode of each as its ROUTER receives it,
       and kd_sparse_pull of the n keys from a table built as the shard's
       keyed model builds it (adagrad, rows made by one step of the n
       keys).  These run hot in cache, one op of each in turn; the lookups
       are also timed cold, after streaming through a buffer larger than
       the last-level cache.  split_sum_us adds the keys frame's wire cost,
       the decode's and the encode's keyed-minus-dense, and the lookups,
       to set against keyed_pull_us - dense_pull_us.

    2. Bytes on the wire per iteration, against the model's size.  For each
       feature count in `sparse-features`, a click log of `sparse-rows` rows
       (kd_ctrgen, as `kudus gen-ctr` writes it, same seed) and a `kudus
       local --model sparse-lr` cluster of `sparse-workers` built-in
       workers and `sparse-shards` shards, BSP, trained for
       `sparse-seconds`.  The shards' STATS, read twice a second, give the
       bytes they received (keys and gradient values) and sent (values),
       over the worker iterations after the first fifth of the run (every
       iteration pushes to every shard).  A dense model would move
       2 x 4 x (features + 1) bytes an iteration; a keyed one only the keys
       its batch touches, whatever the model's size.  Each row also gives
       each shard's peak RSS, and the AUC on `sparse-test-rows` held-out
       rows of the same planted model, which the monitor evaluates when
       training stops (--test-file), beside the planted model's own AUC on
       them.  With `sparse-epochs`, each run trains that many epochs
       instead of `sparse-seconds`: the AUC a full run reaches, and its
       time.

    Stopped by SIGINT or SIGTERM, it says "interrupted" and reaps its
    children, as the other benchmarks do.
*/
#include "kd_bench.h"
#include "kd_ctrgen.h"
#include "kd_ctrref.h"
#include "kd_sparse.h"
#include <ctype.h>
#include <dirent.h>
#include <json-c/json.h>
#include <math.h>
#include <errno.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_TIMEOUT_MS    30000           //  a reply later than this fails
#define S_READY_MS      20000           //  shards must register by then
#define S_MAX_OPS       100000          //  ops per timed run at most
#define S_MAX_SHARDS    16
#define S_POLL_MS       500             //  STATS period
#define S_REPLY_HEADER  64              //  zmq-reply: stands for a PULL_OK header
#define S_REPLY_MAX     (256u << 20)    //  zmq-reply: largest values frame
#define S_EVICT_BYTES   (64u << 20)     //  cold lookups: twice a 32 MiB last-level cache
#define S_SPLIT_OPS     5               //  in-process ops timed in turn

static volatile sig_atomic_t s_stop = 0;

static void
s_on_signal (int sig)
{
    (void) sig;
    s_stop = 1;
}

//  A PULL of version 0: of keys when given (plain uint64s, or varint
//  deltas), else of the whole slice.
static kd_msg_t *
s_pull (const uint64_t *keys, size_t n, bool delta)
{
    kd_msg_t *pull = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (pull, KD_F_VERSION, 0);
    if (keys)
        kd_msg_set_keys (pull, keys, n);
    if (keys && delta)
        kd_msg_set_uint (pull, KD_F_KEY_ENC, KD_KEY_ENC_DELTA);
    return pull;
}

//  The bytes of a PULL's header frame (header) or of its last frame, the
//  keys frame of n keys, plain or as varint deltas, as kd_msg_send sends
//  them.
static size_t
s_pull_frame_bytes (const uint64_t *keys, size_t n, bool delta, bool header)
{
    kd_msg_t *probe = s_pull (keys, n, delta);
    zmsg_t *wire = NULL;
    size_t bytes = kd_msg_encode (probe, &wire) == 0
                 ? zframe_size (header ? zmsg_first (wire) : zmsg_last (wire)) : 0;
    zmsg_destroy (&wire);
    kd_msg_destroy (&probe);
    return bytes;
}

//  Whether a timed loop goes on: at least 8 ops, then until `seconds`
//  have passed, at most cap, and not after a signal.
static bool
s_timing (size_t ops, size_t cap, double t0, double seconds)
{
    return ops < cap && !s_stop && (ops < 8 || kd_now_msf () - t0 < seconds * 1000);
}

//  A keyed PUSH of n keys and their values, as rank 0's gradient of
//  clock 0: staged under BSP, applied at once under ASP.
static kd_msg_t *
s_keyed_push (const uint64_t *keys, const float *values, size_t n)
{
    kd_msg_t *push = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (push, KD_F_RANK, 0);
    kd_msg_set_uint (push, KD_F_CLOCK, 0);
    kd_msg_set_uint (push, KD_F_BASE, 0);
    kd_msg_set_uint (push, KD_F_LO, 0);
    zframe_t *data = zframe_new (values, n * sizeof (float));
    kd_msg_set_data (push, &data);
    kd_msg_set_keys (push, keys, n);
    return push;
}

//  One request and its answer; returns 0 if the answer is `want` with
//  `count` values (any count when 0).
static int
s_round (zsock_t *sock, kd_msg_t **req_p, kd_msg_type_t want, size_t count, char *why, size_t size)
{
    if (kd_msg_send (req_p, sock))
        return -1;
    kd_msg_t *reply = NULL;
    if (kd_msg_recv (sock, &reply, NULL, NULL) != 0) {
        snprintf (why, size, "no answer within %d ms", S_TIMEOUT_MS);
        return -1;
    }
    int rc = kd_msg_type (reply) == want && (!count || kd_msg_uint (reply, KD_F_COUNT) == count) ? 0 : -1;
    if (rc)
        snprintf (why, size, "answered %s (%s)", kd_msg_type_name (kd_msg_type (reply)),
                  kd_msg_type (reply) == KD_MSG_ERROR ? kd_msg_str (reply, KD_F_REASON) : "unexpected");
    kd_msg_destroy (&reply);
    return rc;
}

//  A scheduler on port and one shard on port + 1 with a bench flag.
static int
s_mini_cluster (kd_bench_t *b, int port, const char *consistency, const char *flag, size_t value,
                pid_t *sched, pid_t *shard)
{
    char bind [64], shard_bind [64], v [32];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", port);
    snprintf (shard_bind, sizeof shard_bind, "tcp://127.0.0.1:%d", port + 1);
    snprintf (v, sizeof v, "%zu", value);
    const char *sargv [] = { "kudus-scheduler", "--bind", bind, "--shards", "1", "--min-workers", "1",
                             "--consistency", consistency, "--optimizer", "adagrad",
                             "--log-level", "error", NULL };
    *sched = kd_bench_spawn (b, sargv);
    const char *argv [] = { "kudus-shard", "--bind", shard_bind, "--scheduler", bind, flag, v,
                            "--log-level", "error", NULL };
    *shard = kd_bench_spawn (b, argv);
    return *sched > 0 && *shard > 0 ? 0 : -1;
}

//  Ask until the shard answers the probe as wanted (it has registered).
static int
s_wait_ready (zsock_t *sock, const uint64_t *keys, size_t n)
{
    uint64_t deadline = kd_now_ms () + S_READY_MS;
    char why [160];
    while (kd_now_ms () < deadline && !s_stop) {
        kd_msg_t *pull = s_pull (keys, n, false);
        if (s_round (sock, &pull, KD_MSG_PULL_OK, 0, why, sizeof why) == 0)
            return 0;
        zclock_sleep (50);
    }
    return -1;
}

//  Pulls for `seconds`: the median op time in us, or -1 (why).
static double
s_timed_pulls (zsock_t *sock, const uint64_t *keys, size_t n, bool delta, double seconds, double *op_us,
               char *why, size_t size)
{
    size_t ops = 0;
    double t0 = kd_now_msf ();
    while (s_timing (ops, S_MAX_OPS, t0, seconds)) {
        double t = kd_now_msf ();
        kd_msg_t *pull = s_pull (keys, keys ? n : 0, delta);
        if (s_round (sock, &pull, KD_MSG_PULL_OK, n, why, size))
            return -1;
        op_us [ops++] = (kd_now_msf () - t) * 1000;
    }
    return kd_bench_median (op_us, (int) ops);
}

//  One raw round trip to the zmq-reply helper: a header-sized frame, then
//  keys_bytes of keys when not 0 (without a copy, as the values of
//  pushpull's echo go), and the whole reply read.  Returns 0 or -1 (why).
static int
s_raw_round (zsock_t *sock, size_t head_bytes, const void *keys, size_t keys_bytes, size_t reply_bytes,
             char *why, size_t size)
{
    static const char head [256];
    assert (head_bytes <= sizeof head);
    void *handle = zsock_resolve (sock);
    int rc = zmq_send (handle, head, head_bytes, keys_bytes ? ZMQ_SNDMORE : 0);
    if (rc >= 0 && keys_bytes) {
        zmq_msg_t msg;
        zmq_msg_init_data (&msg, (void *) keys, keys_bytes, NULL, NULL);
        rc = zmq_msg_send (&msg, handle, 0);
        if (rc < 0)
            zmq_msg_close (&msg);
    }
    size_t total = 0;
    int more = 1;
    while (rc >= 0 && more) {
        zmq_msg_t msg;
        zmq_msg_init (&msg);
        rc = zmq_msg_recv (&msg, handle, 0);
        total += rc >= 0 ? zmq_msg_size (&msg) : 0;
        more = zmq_msg_more (&msg);
        zmq_msg_close (&msg);
    }
    if (rc < 0)
        snprintf (why, size, "the zmq-reply helper did not answer within %d ms", S_TIMEOUT_MS);
    else
    if (total != S_REPLY_HEADER + reply_bytes)
        snprintf (why, size, "the zmq-reply helper answered %zu bytes, not %zu", total,
                  (size_t) S_REPLY_HEADER + reply_bytes);
    return rc >= 0 && total == S_REPLY_HEADER + reply_bytes ? 0 : -1;
}

//  Raw round trips for `seconds`: the median op time in us, or -1 (why).
static double
s_timed_raw (zsock_t *sock, size_t head_bytes, const void *keys, size_t keys_bytes, size_t reply_bytes,
             double seconds, double *op_us, char *why, size_t size)
{
    size_t ops = 0;
    double t0 = kd_now_msf ();
    while (s_timing (ops, S_MAX_OPS, t0, seconds)) {
        double t = kd_now_msf ();
        if (s_raw_round (sock, head_bytes, keys, keys_bytes, reply_bytes, why, size))
            return -1;
        op_us [ops++] = (kd_now_msf () - t) * 1000;
    }
    return kd_bench_median (op_us, (int) ops);
}

//  One repeat's figures of the split, in us (medians of its ops).
typedef struct {
    double raw_dense;           //  raw round trip, a dense pull's shape
    double raw_keyed;           //  ... a keyed pull's: the keys frame too
    double decode_keyed;        //  kd_msg_decode and destroy of a keyed PULL
    double decode_dense;        //  ... of a dense PULL
    double encode_keyed;        //  building a keyed PULL and kd_msg_send
    double encode_dense;        //  ... a dense PULL
    double lookup;              //  kd_sparse_pull of the n keys, hot
    double lookup_cold;         //  ... after streaming through S_EVICT_BYTES
} s_split_t;

//  What the in-process timings work on: the real code's inputs, made once.
typedef struct {
    const uint64_t *keys;       //  the n keys the pulls name
    size_t n;                   //  how many
    zmsg_t *keyed_wire;         //  a keyed PULL as the shard's ROUTER receives it
    zmsg_t *dense_wire;         //  a dense PULL, likewise
    zsock_t *sink;              //  a PUB with no subscriber: sends go nowhere
    kd_sparse_t *table;         //  the n rows, as the shard's keyed model holds them
    float *out;                 //  the looked-up values
    char *evict;                //  S_EVICT_BYTES streamed through before a cold lookup
} s_work_t;

//  A PULL as the shard's ROUTER hands it to kd_msg_decode: a routing id
//  (5 bytes, as a ROUTER makes them), the header, and the keys if any.
static zmsg_t *
s_received_pull (const uint64_t *keys, size_t n)
{
    static const byte id [5] = { 0, 0x6b, 0x8b, 0x45, 0x67 };
    kd_msg_t *pull = s_pull (keys, keys ? n : 0, false);
    zframe_t *routing = zframe_new (id, sizeof id);
    kd_msg_set_routing_id (pull, routing);
    zframe_destroy (&routing);
    zmsg_t *wire = NULL;
    if (kd_msg_encode (pull, &wire))
        zmsg_destroy (&wire);
    kd_msg_destroy (&pull);
    return wire;
}

//  Make the in-process timings' inputs.  Returns 0, or -1 (why).
static int
s_work_new (s_work_t *w, const uint64_t *keys, const float *values, size_t n, char *why, size_t size)
{
    *w = (s_work_t) { .keys = keys, .n = n };
    w->keyed_wire = s_received_pull (keys, n);
    w->dense_wire = s_received_pull (NULL, n);
    w->sink = zsock_new (ZMQ_PUB);
    //  The shard's keyed model: kd_keyed_new's table under the cluster's
    //  adagrad, its rows made by the one push that touched the n keys.
    kd_optimizer_opts_t opts = kd_optimizer_defaults (KD_OPT_ADAGRAD);
    w->table = kd_sparse_new (1, &opts, 0.0, 0);
    w->out = (float *) malloc (n * sizeof (float));
    w->evict = (char *) malloc (S_EVICT_BYTES);
    assert (w->sink && w->out && w->evict);
    if (!w->keyed_wire || !w->dense_wire || !w->table || kd_sparse_step (w->table, keys, n, values)) {
        snprintf (why, size, "cannot build the in-process inputs");
        return -1;
    }
    //  A key missing from the table would read as a zero row, a cheaper
    //  path than the shard's: every row must have taken its step.
    kd_sparse_pull (w->table, keys, n, w->out);
    for (size_t i = 0; i < n; i++)
        if (w->out [i] == 0) {
            snprintf (why, size, "the in-process table lacks key %llu", (unsigned long long) keys [i]);
            return -1;
        }
    return 0;
}

//  Free what s_work_new made (any of it).
static void
s_work_destroy (s_work_t *w)
{
    zmsg_destroy (&w->keyed_wire);
    zmsg_destroy (&w->dense_wire);
    zsock_destroy (&w->sink);
    kd_sparse_destroy (&w->table);
    free (w->out);
    free (w->evict);
    w->out = NULL;
    w->evict = NULL;
}

//  Decode (and free) a copy of a received PULL: the copy is made before
//  the clock starts.  Returns the op's us, or -1 if the codec refused it.
static double
s_time_decode (zmsg_t *wire, size_t want_keys)
{
    zmsg_t *copy = zmsg_dup (wire);
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    double t = kd_now_msf ();
    int rc = kd_msg_decode (&copy, true, &msg, NULL, &err);
    size_t n_keys = 0;
    if (rc == 0)
        kd_msg_keys (msg, &n_keys);
    kd_msg_destroy (&msg);
    double us = (kd_now_msf () - t) * 1000;
    return rc == 0 && n_keys == want_keys ? us : -1;
}

//  Build a PULL and send it into the sink, as a worker does per pull:
//  kd_msg_set_keys copies the keys, kd_msg_send encodes the header and
//  moves the keys frame to libzmq.  Returns the op's us, or -1.
static double
s_time_encode (s_work_t *w, bool keyed)
{
    double t = kd_now_msf ();
    kd_msg_t *pull = s_pull (keyed ? w->keys : NULL, keyed ? w->n : 0, false);
    int rc = kd_msg_send (&pull, w->sink);
    double us = (kd_now_msf () - t) * 1000;
    return rc == 0 ? us : -1;
}

//  The lookups of the n keys, timed.
static double
s_time_lookup (s_work_t *w)
{
    double t = kd_now_msf ();
    kd_sparse_pull (w->table, w->keys, w->n, w->out);
    return (kd_now_msf () - t) * 1000;
}

//  The in-process parts of one repeat, into split.  Hot: one op of each
//  kind in turn, for `seconds`, so each runs with the others' data in
//  the caches as a loop leaves them (a shard does little else between
//  pulls, but this is still a best case).  Cold: lookups after streaming
//  through S_EVICT_BYTES, the keys then read back (they arrive fresh in
//  the shard), so the table and the output are cold (a shard writes its
//  answer into a new frame).  Returns 0, or -1 (why).
static int
s_time_work (s_work_t *w, double seconds, double *op_us, s_split_t *split, char *why, size_t size)
{
    size_t cap = S_MAX_OPS / S_SPLIT_OPS, rounds = 0;
    double *at [S_SPLIT_OPS];
    for (int k = 0; k < S_SPLIT_OPS; k++)
        at [k] = op_us + (size_t) k * cap;
    double t0 = kd_now_msf ();
    while (s_timing (rounds, cap, t0, seconds)) {
        at [0][rounds] = s_time_decode (w->keyed_wire, w->n);
        at [1][rounds] = s_time_decode (w->dense_wire, 0);
        at [2][rounds] = s_time_encode (w, true);
        at [3][rounds] = s_time_encode (w, false);
        at [4][rounds] = s_time_lookup (w);
        for (int k = 0; k < S_SPLIT_OPS; k++)
            if (at [k][rounds] < 0) {
                snprintf (why, size, "in-process %s failed", k < 2 ? "kd_msg_decode" : "kd_msg_send");
                return -1;
            }
        rounds++;
    }
    split->decode_keyed = kd_bench_median (at [0], (int) rounds);
    split->decode_dense = kd_bench_median (at [1], (int) rounds);
    split->encode_keyed = kd_bench_median (at [2], (int) rounds);
    split->encode_dense = kd_bench_median (at [3], (int) rounds);
    split->lookup = kd_bench_median (at [4], (int) rounds);
    size_t ops = 0;
    t0 = kd_now_msf ();
    while (s_timing (ops, cap, t0, seconds)) {
        memset (w->evict, (int) (ops & 0xff), S_EVICT_BYTES);
        //  Read back through a volatile sum so that the reads happen.
        volatile uint64_t sum = 0;
        for (size_t i = 0; i < w->n; i++)
            sum += w->keys [i];
        at [0][ops++] = s_time_lookup (w);
    }
    split->lookup_cold = kd_bench_median (at [0], (int) ops);
    return 0;
}

//  The median over the repeats of one field of s_split_t.
static double
s_split_median (const s_split_t *runs, int n, size_t offset, double *scratch)
{
    for (int r = 0; r < n; r++)
        scratch [r] = *(const double *) ((const char *) &runs [r] + offset);
    return kd_bench_median (scratch, n);
}

//  Part 1: a keyed pull of n keys against a dense pull of n floats.
static int
s_pull_cost (kd_bench_t *b, uint64_t model_keys, size_t n, bool *header)
{
    if (n == 0 || n > model_keys)
        return 0;
    pid_t pids [5] = { 0 };
    zsock_t *keyed = NULL, *dense = NULL, *raw = NULL;
    s_work_t work = { 0 };
    uint64_t *keys = (uint64_t *) malloc (n * sizeof (uint64_t));
    float *values = (float *) malloc (n * sizeof (float));
    double *op_us = (double *) malloc (S_MAX_OPS * sizeof (double));
    double *keyed_us = (double *) calloc ((size_t) b->repeat, sizeof (double));
    double *dense_us = (double *) calloc ((size_t) b->repeat, sizeof (double));
    double *ratio = (double *) calloc ((size_t) b->repeat, sizeof (double));
    double *delta_us = (double *) calloc ((size_t) b->repeat, sizeof (double));
    double *delta_ratio = (double *) calloc ((size_t) b->repeat, sizeof (double));
    s_split_t *split = (s_split_t *) calloc ((size_t) b->repeat, sizeof (s_split_t));
    assert (keys && values && op_us && keyed_us && dense_us && ratio && delta_us && delta_ratio && split);
    //  Scattered over the whole model, one key in each of n equal strides.
    uint64_t stride = model_keys / n, state = 7;
    for (size_t i = 0; i < n; i++) {
        keys [i] = i * stride + kd_splitmix64 (&state) % stride;
        values [i] = 0.01f;
    }
    char why [160] = "";
    int rc = -1;
    double seconds = kd_config_double (b->config, "run-seconds");
    char reply_bind [64], reply_bytes [32];
    snprintf (reply_bind, sizeof reply_bind, "tcp://127.0.0.1:%d", b->base_port + 5);
    snprintf (reply_bytes, sizeof reply_bytes, "%zu", n * sizeof (float));
    const char *rargv [] = { b->self_exe, "bench", "zmq-reply", reply_bind, reply_bytes, NULL };
    //  ASP: the touching push is applied at once, so the pulls read rows
    //  that exist, as in training.
    if (s_mini_cluster (b, b->base_port, "asp", "--bench-keys", (size_t) model_keys, &pids [0], &pids [1])
    ||  s_mini_cluster (b, b->base_port + 10, "bsp", "--bench-floats", n, &pids [2], &pids [3])
    ||  (pids [4] = kd_bench_spawn (b, rargv)) <= 0
    ||  !(keyed = kd_bench_dealer (b->base_port + 1, S_TIMEOUT_MS))
    ||  !(dense = kd_bench_dealer (b->base_port + 11, S_TIMEOUT_MS))
    ||  !(raw = kd_bench_dealer (b->base_port + 5, S_TIMEOUT_MS))) {
        snprintf (why, sizeof why, "cannot start the clusters");
        goto done;
    }
    if (s_wait_ready (keyed, keys, 1) || s_wait_ready (dense, NULL, 0)) {
        snprintf (why, sizeof why, "a shard did not register in %d ms", S_READY_MS);
        goto done;
    }
    kd_msg_t *push = s_keyed_push (keys, values, n);
    if (s_round (keyed, &push, KD_MSG_PUSH_OK, 0, why, sizeof why))
        goto done;
    //  The raw requests are as large as the real ones: the PULL headers as
    //  encoded, and the keys frame of 8 bytes a key.
    size_t dense_head = s_pull_frame_bytes (NULL, 0, false, true);
    size_t keyed_head = s_pull_frame_bytes (keys, n, false, true);
    size_t keys_bytes = n * sizeof (uint64_t), reply_values = n * sizeof (float);
    //  One round trip first: the helper may still be starting.
    if (s_raw_round (raw, dense_head, NULL, 0, reply_values, why, sizeof why)
    ||  s_work_new (&work, keys, values, n, why, sizeof why))
        goto done;
    //  Each repeat times the keys plain (the default) and as varint deltas
    //  (--key-encoding delta), taking turns at going first, then the dense
    //  pull.
    for (int r = 0; r < b->repeat && !s_stop; r++) {
        for (int turn = 0; turn < 2; turn++) {
            bool delta = (turn + r) % 2;
            double us = s_timed_pulls (keyed, keys, n, delta, seconds, op_us, why, sizeof why);
            *(delta ? &delta_us [r] : &keyed_us [r]) = us;
        }
        dense_us [r] = s_timed_pulls (dense, NULL, n, false, seconds, op_us, why, sizeof why);
        if (keyed_us [r] < 0 || delta_us [r] < 0 || dense_us [r] < 0)
            goto done;
        //  The split: the raw shapes, taking turns at going first, then
        //  the real code in this process.
        s_split_t *sp = &split [r];
        sp->raw_keyed = sp->raw_dense = 0;
        for (int turn = 0; turn < 2; turn++) {
            bool with_keys = (turn + r) % 2;
            double us = s_timed_raw (raw, with_keys ? keyed_head : dense_head, with_keys ? keys : NULL,
                                     with_keys ? keys_bytes : 0, reply_values, seconds, op_us, why, sizeof why);
            *(with_keys ? &sp->raw_keyed : &sp->raw_dense) = us;
            //  A late reply of a failed turn must not count as the next's.
            if (us < 0)
                break;
        }
        if (sp->raw_keyed < 0 || sp->raw_dense < 0
        ||  s_time_work (&work, seconds, op_us, sp, why, sizeof why))
            goto done;
        ratio [r] = keyed_us [r] / dense_us [r];
        delta_ratio [r] = delta_us [r] / dense_us [r];
    }
    if (s_stop)
        goto done;
    char f_keys [32], f_model [32], f_keyed [32], f_dense [32], f_ratio [32], f_bytes [32];
    char f_delta [32], f_delta_ratio [32], f_delta_bytes [32];
    snprintf (f_keys, sizeof f_keys, "%zu", n);
    snprintf (f_model, sizeof f_model, "%llu", (unsigned long long) model_keys);
    snprintf (f_keyed, sizeof f_keyed, "%.1f", kd_bench_median (keyed_us, b->repeat));
    snprintf (f_dense, sizeof f_dense, "%.1f", kd_bench_median (dense_us, b->repeat));
    snprintf (f_ratio, sizeof f_ratio, "%.2f", kd_bench_median (ratio, b->repeat));
    snprintf (f_delta, sizeof f_delta, "%.1f", kd_bench_median (delta_us, b->repeat));
    snprintf (f_delta_ratio, sizeof f_delta_ratio, "%.2f", kd_bench_median (delta_ratio, b->repeat));
    //  What one keyed pull and its answer take on the wire: the keys frame
    //  as encoded, and the values.
    snprintf (f_bytes, sizeof f_bytes, "%zu", s_pull_frame_bytes (keys, n, false, false) + n * sizeof (float));
    snprintf (f_delta_bytes, sizeof f_delta_bytes, "%zu", s_pull_frame_bytes (keys, n, true, false) + n * sizeof (float));
    //  The split, each part the median over the repeats; the sum is of
    //  those medians, so it can be checked against the fields.
    s_split_t m;
    m.raw_dense = s_split_median (split, b->repeat, offsetof (s_split_t, raw_dense), op_us);
    m.raw_keyed = s_split_median (split, b->repeat, offsetof (s_split_t, raw_keyed), op_us);
    m.decode_keyed = s_split_median (split, b->repeat, offsetof (s_split_t, decode_keyed), op_us);
    m.decode_dense = s_split_median (split, b->repeat, offsetof (s_split_t, decode_dense), op_us);
    m.encode_keyed = s_split_median (split, b->repeat, offsetof (s_split_t, encode_keyed), op_us);
    m.encode_dense = s_split_median (split, b->repeat, offsetof (s_split_t, encode_dense), op_us);
    m.lookup = s_split_median (split, b->repeat, offsetof (s_split_t, lookup), op_us);
    m.lookup_cold = s_split_median (split, b->repeat, offsetof (s_split_t, lookup_cold), op_us);
    double sum = (m.raw_keyed - m.raw_dense) + (m.decode_keyed - m.decode_dense) + m.lookup
               + (m.encode_keyed - m.encode_dense);
    char f_raw_dense [32], f_raw_keyed [32], f_dec_keyed [32], f_dec_dense [32], f_enc_keyed [32],
         f_enc_dense [32], f_lookup [32], f_cold [32], f_sum [32];
    snprintf (f_raw_dense, sizeof f_raw_dense, "%.1f", m.raw_dense);
    snprintf (f_raw_keyed, sizeof f_raw_keyed, "%.1f", m.raw_keyed);
    snprintf (f_dec_keyed, sizeof f_dec_keyed, "%.2f", m.decode_keyed);
    snprintf (f_dec_dense, sizeof f_dec_dense, "%.2f", m.decode_dense);
    snprintf (f_enc_keyed, sizeof f_enc_keyed, "%.2f", m.encode_keyed);
    snprintf (f_enc_dense, sizeof f_enc_dense, "%.2f", m.encode_dense);
    snprintf (f_lookup, sizeof f_lookup, "%.2f", m.lookup);
    snprintf (f_cold, sizeof f_cold, "%.2f", m.lookup_cold);
    snprintf (f_sum, sizeof f_sum, "%.1f", sum);
    const char *kv [] = { "keys", f_keys, "model_keys", f_model, "keyed_pull_us", f_keyed,
                          "dense_pull_us", f_dense, "ratio_keyed_vs_dense", f_ratio,
                          "keyed_wire_bytes", f_bytes, "delta_keys_pull_us", f_delta,
                          "ratio_delta_keys_vs_dense", f_delta_ratio, "delta_keys_wire_bytes", f_delta_bytes,
                          "raw_dense_shape_us", f_raw_dense, "raw_keyed_shape_us", f_raw_keyed,
                          "decode_keyed_us", f_dec_keyed, "decode_dense_us", f_dec_dense,
                          "encode_keyed_us", f_enc_keyed, "encode_dense_us", f_enc_dense,
                          "lookup_us", f_lookup, "lookup_cold_us", f_cold, "split_sum_us", f_sum,
                          NULL };
    kd_bench_row (b, "sparse-pull", header, kv);
    rc = 0;
done:
    if (rc && !s_stop)
        kd_error ("sparse pull (%zu keys of %llu): %s", n, (unsigned long long) model_keys, why);
    zsock_destroy (&keyed);
    zsock_destroy (&dense);
    zsock_destroy (&raw);
    s_work_destroy (&work);
    for (int i = 0; i < 5; i++)
        if (pids [i] > 0)
            kd_bench_stop (pids [i]);
    free (keys);
    free (values);
    free (op_us);
    free (keyed_us);
    free (dense_us);
    free (ratio);
    free (delta_us);
    free (delta_ratio);
    free (split);
    return s_stop ? -2 : rc;
}

//  Part 0 (sparse-parts pslite): ps-lite's own sparse benchmark
//  (tests/test_kv_app_benchmark) in Kudus: n keys spread evenly over a
//  keyed model of 2^40 keys, one float each, pushed once and pulled once,
//  each timed alone.  The push is staged (BSP, no commit follows), as
//  ps-lite's benchmark server answers a push without applying it; the
//  pull reads rows no gradient created, which read as zeros, as its
//  server answers zeros.  Repeated `repeat` times: the first op, and the
//  median of the others, in ms.
static int
s_pslite_shape (kd_bench_t *b, size_t n, bool *header)
{
    const uint64_t model_keys = (uint64_t) 1 << 40;
    pid_t pids [2] = { 0 };
    zsock_t *sock = NULL;
    uint64_t *keys = (uint64_t *) malloc (n * sizeof (uint64_t));
    float *values = (float *) malloc (n * sizeof (float));
    double *push_ms = (double *) calloc ((size_t) b->repeat, sizeof (double));
    double *pull_ms = (double *) calloc ((size_t) b->repeat, sizeof (double));
    assert (keys && values && push_ms && pull_ms);
    uint64_t stride = model_keys / n, state = 7;
    for (size_t i = 0; i < n; i++) {
        keys [i] = i * stride;
        values [i] = (float) (kd_splitmix64 (&state) % 1000);
    }
    char why [160] = "";
    int rc = -1;
    if (s_mini_cluster (b, b->base_port + 20, "bsp", "--bench-keys", (size_t) model_keys, &pids [0], &pids [1])
    ||  !(sock = kd_bench_dealer (b->base_port + 21, S_TIMEOUT_MS))) {
        snprintf (why, sizeof why, "cannot start the cluster");
        goto done;
    }
    if (s_wait_ready (sock, keys, 1)) {
        snprintf (why, sizeof why, "the shard did not register in %d ms", S_READY_MS);
        goto done;
    }
    for (int r = 0; r < b->repeat && !s_stop; r++) {
        kd_msg_t *push = s_keyed_push (keys, values, n);
        double t = kd_now_msf ();
        if (s_round (sock, &push, KD_MSG_PUSH_OK, 0, why, sizeof why))
            goto done;
        push_ms [r] = kd_now_msf () - t;
        t = kd_now_msf ();
        kd_msg_t *pull = s_pull (keys, n, false);
        if (s_round (sock, &pull, KD_MSG_PULL_OK, n, why, sizeof why))
            goto done;
        pull_ms [r] = kd_now_msf () - t;
    }
    if (s_stop)
        goto done;
    //  The first op pays for first touches on both sides, as the single
    //  timed op of ps-lite's benchmark does; the rest are warm.
    char f_keys [32], f_push1 [32], f_pull1 [32], f_push [32], f_pull [32], f_bytes [32];
    snprintf (f_keys, sizeof f_keys, "%zu", n);
    snprintf (f_push1, sizeof f_push1, "%.2f", push_ms [0]);
    snprintf (f_pull1, sizeof f_pull1, "%.2f", pull_ms [0]);
    int warm = b->repeat > 1 ? b->repeat - 1 : 1;
    snprintf (f_push, sizeof f_push, "%.2f", kd_bench_median (push_ms + (b->repeat > 1), warm));
    snprintf (f_pull, sizeof f_pull, "%.2f", kd_bench_median (pull_ms + (b->repeat > 1), warm));
    snprintf (f_bytes, sizeof f_bytes, "%zu", s_pull_frame_bytes (keys, n, false, false) + n * sizeof (float));
    const char *kv [] = { "keys", f_keys, "first_push_ms", f_push1, "first_pull_ms", f_pull1,
                          "push_ms", f_push, "pull_ms", f_pull, "push_wire_bytes", f_bytes, NULL };
    kd_bench_row (b, "sparse-pslite", header, kv);
    rc = 0;
done:
    if (rc && !s_stop)
        kd_error ("sparse ps-lite shape (%zu keys): %s", n, why);
    zsock_destroy (&sock);
    for (int i = 0; i < 2; i++)
        if (pids [i] > 0)
            kd_bench_stop (pids [i]);
    free (keys);
    free (values);
    free (push_ms);
    free (pull_ms);
    return s_stop ? -2 : rc;
}

//  Write rows of a click log (kd_ctrgen) as LIBSVM text.  Returns 0 or -1.
//  rows training rows to path, then test_rows held-out rows from the same
//  generator (the same planted model) to test_path; the references on the
//  held-out rows (kd_ctrref) into *ref (NAN without them).
static int
s_write_log (const char *path, const char *test_path, uint64_t features, uint64_t vocab, size_t rows,
             size_t test_rows, uint32_t per_row, double zipf, uint64_t seed, kd_ctrref_result_t *ref,
             char *why, size_t size)
{
    *ref = (kd_ctrref_result_t) { NAN, NAN, NAN, NAN };
    kd_ctrgen_t *gen = kd_ctrgen_new (features, zipf, per_row, seed, why, size);
    if (gen && vocab && kd_ctrgen_set_vocab (gen, vocab, why, size))
        kd_ctrgen_destroy (&gen);
    if (!gen)
        return -1;
    uint64_t *index = (uint64_t *) malloc (per_row * sizeof (uint64_t));
    kd_ctrref_t *refs = test_rows ? kd_ctrref_new (gen, features, test_rows) : NULL;
    bool no_memory = !index || (test_rows && !refs);
    int rc = no_memory ? -1 : 0;
    for (int part = 0; part < 2 && rc == 0; part++) {
        const char *out = part == 0 ? path : test_path;
        size_t n = part == 0 ? rows : test_rows;
        FILE *f = fopen (out, "w");
        if (!f) {
            rc = -1;
            break;
        }
        for (size_t r = 0; r < n && !s_stop; r++) {
            double score;
            int label = kd_ctrgen_row (gen, index, &score);
            if (refs && part == 0)
                kd_ctrref_train (refs, index, per_row, score, label);
            if (refs && part == 1)
                kd_ctrref_test (refs, index, per_row, score, label);
            fputc (label ? '1' : '0', f);
            for (uint32_t i = 0; i < per_row; i++)
                fprintf (f, " %llu:1", (unsigned long long) index [i]);
            fputc ('\n', f);
        }
        if (ferror (f))
            rc = -1;
        if (fclose (f))
            rc = -1;
    }
    if (no_memory)
        snprintf (why, size, "out of memory for %llu features", (unsigned long long) features);
    else
    if (rc)
        snprintf (why, size, "cannot write %s or %s", path, test_path);
    else
    if (refs)
        *ref = kd_ctrref_result (refs);
    free (index);
    kd_ctrref_destroy (&refs);
    kd_ctrgen_destroy (&gen);
    return s_stop ? -1 : rc;
}

//  The shards' counters summed; returns the shards that answered.
static size_t
s_shard_stats (zsock_t **socks, size_t n, uint64_t *bytes, uint64_t *pushes)
{
    size_t answered = 0;
    *bytes = *pushes = 0;
    for (size_t s = 0; s < n; s++) {
        kd_msg_t *req = kd_msg_new (KD_MSG_STATS);
        if (kd_msg_send (&req, socks [s]))
            continue;
        kd_msg_t *reply = NULL;
        if (kd_msg_recv (socks [s], &reply, NULL, NULL) == 0 && kd_msg_type (reply) == KD_MSG_STATS_OK) {
            size_t k = 0;
            const uint64_t *c = kd_msg_uints (reply, KD_F_COUNTERS, &k);
            if (c && k > KD_SC_BYTES_OUT) {
                *bytes += c [KD_SC_BYTES_IN] + c [KD_SC_BYTES_OUT];
                *pushes += c [KD_SC_PUSHES];
                answered++;
            }
        }
        bool silent = reply == NULL;
        kd_msg_destroy (&reply);
        //  A shard that timed out has exited with its cluster: asking the
        //  others would only time out too.
        if (silent)
            break;
    }
    return answered;
}

//  The peak RSS (VmHWM, KiB) of each kudus-shard child of parent: pids
//  [n] and peaks [n] keep each one's largest, in the order first seen.
static void
s_shards_peak_kib (pid_t parent, pid_t *pids, long *peaks, size_t *n)
{
    DIR *d = opendir ("/proc");
    struct dirent *e;
    while (d && (e = readdir (d))) {
        char path [300], line [256];
        snprintf (path, sizeof path, "/proc/%s/status", e->d_name);
        FILE *f = fopen (path, "r");
        if (!f)
            continue;
        bool shard = false;
        long hwm = 0, ppid = -1;
        while (fgets (line, sizeof line, f)) {
            if (!strncmp (line, "Name:", 5))
                shard = strstr (line, "kudus-shard") != NULL;
            else
            if (!strncmp (line, "PPid:", 5))
                ppid = atol (line + 5);
            else
            if (!strncmp (line, "VmHWM:", 6))
                hwm = atol (line + 6);
        }
        fclose (f);
        if (!shard || ppid != parent)
            continue;
        pid_t pid = (pid_t) atol (e->d_name);
        size_t i = 0;
        while (i < *n && pids [i] != pid)
            i++;
        if (i == *n && *n < S_MAX_SHARDS) {
            pids [i] = pid;
            peaks [i] = 0;
            (*n)++;
        }
        if (i < *n && hwm > peaks [i])
            peaks [i] = hwm;
    }
    if (d)
        closedir (d);
}

//  A number of the run's summary; NAN when absent or null.
static double
s_number (json_object *summary, const char *key)
{
    json_object *v;
    if (!json_object_object_get_ex (summary, key, &v)
    ||  !(json_object_is_type (v, json_type_double) || json_object_is_type (v, json_type_int)))
        return NAN;
    return json_object_get_double (v);
}

//  Part 2: bytes per iteration of sparse-lr with `features` features, and
//  the held-out AUC the run reached against the planted model's.
static int
s_bytes_per_iteration (kd_bench_t *b, const char *dir, uint64_t features, bool *header)
{
    kd_config_t *c = b->config;
    size_t rows = (size_t) kd_config_int (c, "sparse-rows");
    size_t test_rows = (size_t) kd_config_int (c, "sparse-test-rows");
    uint32_t per_row = (uint32_t) kd_config_int (c, "per-row");
    int workers = (int) kd_config_int (c, "sparse-workers");
    int shards = (int) kd_config_int (c, "sparse-shards");
    double seconds = kd_config_double (c, "sparse-seconds");
    double epochs = kd_config_double (c, "sparse-epochs");
    char path [600], test [600], why [1400] = "", summary [600];
    snprintf (path, sizeof path, "%s/ctr-%llu.svm", dir, (unsigned long long) features);
    snprintf (test, sizeof test, "%s/ctr-%llu.test.svm", dir, (unsigned long long) features);
    snprintf (summary, sizeof summary, "%s/summary-%llu.json", dir, (unsigned long long) features);
    double t_gen = kd_now_msf ();
    kd_ctrref_result_t planted;
    //  A vocabulary larger than this run's model is the whole model.
    uint64_t vocab = (uint64_t) kd_config_int (c, "vocab");
    if (vocab > features)
        vocab = 0;
    if (s_write_log (path, test, features, vocab, rows, test_rows, per_row, kd_config_double (c, "zipf"), 42,
                     &planted, why, sizeof why)) {
        if (!s_stop)
            kd_error ("sparse features=%llu: %s", (unsigned long long) features, why);
        unlink (path);
        unlink (test);
        return s_stop ? -2 : -1;
    }
    kd_info ("sparse: %zu rows (and %zu held out) of %u features of %llu written in %.1f s", rows,
             test_rows, per_row, (unsigned long long) features, (kd_now_msf () - t_gen) / 1000);
    int port = b->base_port + 20;
    char f_features [32], f_workers [16], f_shards [16], f_port [16], f_seconds [32], f_batch [16],
         f_epochs [32], f_test_rows [32], f_rate [32];
    snprintf (f_features, sizeof f_features, "%llu", (unsigned long long) features);
    snprintf (f_workers, sizeof f_workers, "%d", workers);
    snprintf (f_shards, sizeof f_shards, "%d", shards);
    snprintf (f_port, sizeof f_port, "%d", port);
    snprintf (f_test_rows, sizeof f_test_rows, "%zu", test_rows);
    snprintf (f_rate, sizeof f_rate, "%g", kd_config_double (c, "sparse-rate"));
    //  Timed: the workers load the file before the clock starts, and the
    //  run lasts the measured seconds and a margin.  By epochs: as long as
    //  they take.
    snprintf (f_seconds, sizeof f_seconds, "%g", epochs > 0 ? 0 : seconds + 5);
    snprintf (f_epochs, sizeof f_epochs, "%g", epochs > 0 ? epochs : 1000);
    snprintf (f_batch, sizeof f_batch, "%lld", (long long) kd_config_int (c, "sparse-batch"));
    //  The monitor evaluates the held-out rows once, when training stops,
    //  so that its pulls are not counted as the workers' bytes.
    const char *argv [] = { "kudus", "local", "--model", "sparse-lr", "--train-file", path,
                            "--features", f_features, "--workers", f_workers, "--shards", f_shards,
                            "--consistency", "bsp", "--optimizer", "adagrad", "--lr", f_rate,
                            "--batch", f_batch, "--epochs", f_epochs, "--max-seconds", f_seconds,
                            "--test-file", test_rows > 0 ? test : "", "--eval-rows", f_test_rows,
                            "--eval-interval", "3600", "--summary", summary,
                            "--base-port", f_port, "--quiet", "true", "--log-level", "warn", NULL };
    pid_t local = kd_bench_spawn (b, argv);
    zsock_t *socks [S_MAX_SHARDS] = { NULL };
    for (int s = 0; s < shards && s < S_MAX_SHARDS; s++)
        socks [s] = kd_bench_dealer (port + 100 + s, S_TIMEOUT_MS);
    //  Poll: the first sample with pushes starts the clock; the samples
    //  after the first fifth of `seconds` (by epochs: after 2 s) up to
    //  `seconds` (by epochs: to the last) are the window.
    double warm_ms = epochs > 0 ? 2000 : seconds * 1000 / 5;
    double end_ms = epochs > 0 ? INFINITY : seconds * 1000;
    double t_first = -1, t_from = 0, t_to = 0;
    uint64_t bytes_from = 0, pushes_from = 0, bytes_to = 0, pushes_to = 0;
    pid_t pids [S_MAX_SHARDS];
    long peaks [S_MAX_SHARDS];
    size_t n_peaks = 0;
    bool in_window = false, polling = true;
    int rc = -1;
    while (!s_stop) {
        int status;
        if (local <= 0 || waitpid (local, &status, WNOHANG) == local) {
            local = 0;
            break;
        }
        zclock_sleep (S_POLL_MS);
        s_shards_peak_kib (local, pids, peaks, &n_peaks);
        if (!polling)
            continue;
        uint64_t bytes, pushes;
        size_t answered = s_shard_stats (socks, (size_t) shards, &bytes, &pushes);
        double now = kd_now_msf ();
        if (answered < (size_t) shards || pushes == 0) {
            //  Once the window is open, a silent shard means the run ended.
            polling = !in_window;
            continue;
        }
        if (t_first < 0)
            t_first = now;
        if (!in_window && now - t_first >= warm_ms) {
            in_window = true;
            t_from = now;
            bytes_from = bytes;
            pushes_from = pushes;
        }
        if (in_window && now - t_first <= end_ms && pushes > pushes_to) {
            t_to = now;
            bytes_to = bytes;
            pushes_to = pushes;
        }
        //  Timed: the window is over; the run ends by itself (max-seconds)
        //  and writes its summary after the final evaluation.
        if (now - t_first > end_ms)
            polling = false;
    }
    for (int s = 0; s < shards && s < S_MAX_SHARDS; s++)
        zsock_destroy (&socks [s]);
    if (local > 0)
        kd_bench_stop (local);
    double iterations = (double) (pushes_to - pushes_from) / shards;
    char *text = kd_read_file (summary);
    json_object *json = text ? json_tokener_parse (text) : NULL;
    free (text);
    if (s_stop)
        rc = -2;
    else
    if (!in_window || iterations < 1 || !json) {
        kd_error ("sparse features=%llu: no iterations measured, or no summary (%s)",
                  (unsigned long long) features, summary);
        rc = -1;
    }
    else {
        double per_iter = (double) (bytes_to - bytes_from) / iterations;
        double dense = 2.0 * sizeof (float) * (double) (features + 1);
        double auc = s_number (json, "test_auc"), wall = s_number (json, "wall_seconds");
        double done_epochs = s_number (json, "epochs");
        long peak = 0;
        char each [S_MAX_SHARDS * 16] = "\"";
        for (size_t i = 0; i < n_peaks; i++) {
            peak = peaks [i] > peak ? peaks [i] : peak;
            snprintf (each + strlen (each), sizeof each - strlen (each), "%s%ld", i ? "/" : "", peaks [i]);
        }
        strcat (each, "\"");
        char f_rows [32], f_iter [32], f_bytes [32], f_dense [32], f_ratio [32], f_rss [32], f_ips [32],
             f_auc [32], f_planted [32], f_gap [32], f_wall [32], f_done [32], f_seen [32],
             f_unseen [32], f_zipf [32], f_est [32], f_vocab [32];
        snprintf (f_rows, sizeof f_rows, "%zu", rows);
        snprintf (f_iter, sizeof f_iter, "%.0f", iterations);
        snprintf (f_ips, sizeof f_ips, "%.1f", iterations / ((t_to - t_from) / 1000));
        snprintf (f_bytes, sizeof f_bytes, "%.0f", per_iter);
        snprintf (f_dense, sizeof f_dense, "%.0f", dense);
        snprintf (f_ratio, sizeof f_ratio, "%.2e", per_iter / dense);
        snprintf (f_rss, sizeof f_rss, "%ld", peak);
        snprintf (f_wall, sizeof f_wall, "%.1f", wall);
        snprintf (f_done, sizeof f_done, "%.2f", done_epochs);
        //  JSON has no NaN: a missing figure is null.
        snprintf (f_auc, sizeof f_auc, isfinite (auc) ? "%.4f" : "null", auc);
        snprintf (f_planted, sizeof f_planted, isfinite (planted.planted) ? "%.4f" : "null", planted.planted);
        snprintf (f_gap, sizeof f_gap, isfinite (auc - planted.planted) ? "%.4f" : "null", planted.planted - auc);
        snprintf (f_zipf, sizeof f_zipf, "%g", kd_config_double (c, "zipf"));
        snprintf (f_vocab, sizeof f_vocab, "%llu", (unsigned long long) (vocab ? vocab : features));
        snprintf (f_seen, sizeof f_seen, isfinite (planted.seen) ? "%.4f" : "null", planted.seen);
        snprintf (f_est, sizeof f_est, isfinite (planted.estimated) ? "%.4f" : "null", planted.estimated);
        snprintf (f_unseen, sizeof f_unseen, isfinite (planted.unseen_share) ? "%.4f" : "null",
                  planted.unseen_share);
        const char *kv [] = { "features", f_features, "rows", f_rows, "test_rows", f_test_rows,
                              "zipf", f_zipf, "vocab", f_vocab, "workers", f_workers, "shards", f_shards,
                              "lr", f_rate, "epochs", f_done,
                              "wall_seconds", f_wall, "iterations", f_iter,
                              "iterations_per_s", f_ips, "bytes_per_iteration", f_bytes,
                              "dense_bytes_per_iteration", f_dense, "ratio_vs_dense", f_ratio,
                              "shard_peak_rss_kib", f_rss, "shard_peak_rss_kib_each", each,
                              "test_auc", f_auc, "planted_test_auc", f_planted, "auc_gap", f_gap,
                              "planted_seen_test_auc", f_seen, "test_unseen_share", f_unseen,
                              "estimated_test_auc", f_est, NULL };
        kd_bench_row (b, "sparse-bytes", header, kv);
        rc = 0;
    }
    json_object_put (json);
    unlink (path);
    unlink (test);
    unlink (summary);
    return rc;
}

int
kd_bench_sparse (kd_bench_t *b)
{
    uint64_t features [KD_BENCH_MAX_LIST];
    int n = kd_bench_list (kd_config_str (b->config, "sparse-features"), features, KD_BENCH_MAX_LIST);
    if (n <= 0) {
        fprintf (stderr, "kudus bench: setting 'sparse-features': a list of feature counts, e.g. 1M,10M\n");
        return 2;
    }
    if (kd_config_int (b->config, "sparse-shards") > S_MAX_SHARDS) {
        fprintf (stderr, "kudus bench: setting 'sparse-shards': at most %d\n", S_MAX_SHARDS);
        return 2;
    }
    struct sigaction sa = { .sa_handler = s_on_signal };
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    uint64_t largest = 0;
    for (int i = 0; i < n; i++)
        if (features [i] > largest)
            largest = features [i];
    char *dir = kd_temp_dir ("kudus-bench-sparse");
    if (!dir) {
        fprintf (stderr, "kudus bench sparse: cannot make a temporary directory: %s\n", strerror (errno));
        return 1;
    }
    const char *parts = kd_config_str (b->config, "sparse-parts");
    bool pslite = kd_bench_has (parts, "pslite"), pull = kd_bench_has (parts, "pull"),
         bytes = kd_bench_has (parts, "bytes");
    //  Every word must be a part: a typo must not run nothing and succeed.
    size_t words = 1;
    for (const char *c = parts; *c; c++)
        words += *c == ',';
    if (!*parts || words != (size_t) pslite + pull + bytes) {
        fprintf (stderr, "kudus bench: setting 'sparse-parts': a list of pull, bytes and pslite, not '%s'\n",
                 parts);
        rmdir (dir);
        free (dir);
        return 2;
    }
    bool pull_header = false, bytes_header = false, pslite_header = false;
    int done = 0, rc = 0;
    if (pslite) {
        rc = s_pslite_shape (b, (size_t) kd_config_int (b->config, "pull-keys"), &pslite_header);
        if (rc == 0)
            done++;
    }
    if (pull && rc != -2) {
        int r = s_pull_cost (b, largest + 1, (size_t) kd_config_int (b->config, "pull-keys"), &pull_header);
        if (r == 0)
            done++;
        else
            rc = r;
    }
    for (int i = 0; bytes && i < n && rc != -2; i++) {
        int r = s_bytes_per_iteration (b, dir, features [i], &bytes_header);
        if (r == 0)
            done++;
        else
            rc = r;
    }
    rmdir (dir);
    free (dir);
    if (rc == -2) {
        fprintf (stderr, "kudus bench sparse: interrupted after %d configurations\n", done);
        return 130;
    }
    return rc ? 1 : 0;
}

//  --------------------------------------------------------------------------
//  The reply server (a helper process; no Kudus code on its path)

int
kd_bench_reply_server (const char *endpoint, const char *bytes)
{
    size_t size = kd_bench_bytes_arg (bytes, S_REPLY_MAX);
    if (!size) {
        fprintf (stderr, "kudus bench zmq-reply: BYTES must be a whole number from 1 to %u, not '%s'\n",
                 S_REPLY_MAX, bytes);
        return 1;
    }
    //  Written now, so that no reply pays for the first touch of a page.
    char *values = (char *) malloc (size);
    assert (values);
    memset (values, 1, size);
    void *ctx = zmq_ctx_new ();
    void *router = kd_bench_raw_router (ctx, endpoint, "zmq-reply");
    if (!router) {
        zmq_ctx_term (ctx);
        free (values);
        return 1;
    }
    static const char head [S_REPLY_HEADER];
    while (!kd_bench_raw_stop) {
        zmq_msg_t id;
        zmq_msg_init (&id);
        if (zmq_msg_recv (&id, router, 0) < 0) {
            zmq_msg_close (&id);
            continue;
        }
        //  The request is read whole and dropped, whatever its frames.
        int more = zmq_msg_more (&id), rc = 0;
        while (more && rc >= 0) {
            zmq_msg_t part;
            zmq_msg_init (&part);
            rc = zmq_msg_recv (&part, router, 0);
            more = zmq_msg_more (&part);
            zmq_msg_close (&part);
        }
        //  The header is copied, as a small frame is; the values are lent
        //  without a copy, as the shard lends its snapshot.  They never
        //  change, so no free function is needed.
        if (rc >= 0 && zmq_msg_send (&id, router, ZMQ_SNDMORE) >= 0
        &&  zmq_send (router, head, sizeof head, ZMQ_SNDMORE) >= 0) {
            zmq_msg_t data;
            zmq_msg_init_data (&data, values, size, NULL, NULL);
            if (zmq_msg_send (&data, router, 0) < 0)
                zmq_msg_close (&data);
        }
        zmq_msg_close (&id);
    }
    zmq_close (router);
    //  With no linger the context drops what is unsent: values can go once
    //  it is gone, which a signal must not cut short.
    while (zmq_ctx_term (ctx) == -1 && errno == EINTR)
        ;
    free (values);
    return 0;
}
