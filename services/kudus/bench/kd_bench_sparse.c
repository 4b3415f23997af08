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

//  The bytes n keys take in a keys frame, plain or as varint deltas.
static size_t
s_keys_wire_bytes (const uint64_t *keys, size_t n, bool delta)
{
    kd_msg_t *probe = s_pull (keys, n, delta);
    zmsg_t *wire = NULL;
    size_t bytes = kd_msg_encode (probe, &wire) == 0 ? zframe_size (zmsg_last (wire)) : 0;
    zmsg_destroy (&wire);
    kd_msg_destroy (&probe);
    return bytes;
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
    while (ops < S_MAX_OPS && !s_stop && (ops < 8 || kd_now_msf () - t0 < seconds * 1000)) {
        double t = kd_now_msf ();
        kd_msg_t *pull = s_pull (keys, keys ? n : 0, delta);
        if (s_round (sock, &pull, KD_MSG_PULL_OK, n, why, size))
            return -1;
        op_us [ops++] = (kd_now_msf () - t) * 1000;
    }
    return kd_bench_median (op_us, (int) ops);
}

//  Part 1: a keyed pull of n keys against a dense pull of n floats.
static int
s_pull_cost (kd_bench_t *b, uint64_t model_keys, size_t n, bool *header)
{
    if (n == 0 || n > model_keys)
        return 0;
    pid_t pids [4] = { 0 };
    zsock_t *keyed = NULL, *dense = NULL;
    uint64_t *keys = (uint64_t *) malloc (n * sizeof (uint64_t));
    float *values = (float *) malloc (n * sizeof (float));
    double *op_us = (double *) malloc (S_MAX_OPS * sizeof (double));
    double *keyed_us = (double *) calloc ((size_t) b->repeat, sizeof (double));
    double *dense_us = (double *) calloc ((size_t) b->repeat, sizeof (double));
    double *ratio = (double *) calloc ((size_t) b->repeat, sizeof (double));
    double *delta_us = (double *) calloc ((size_t) b->repeat, sizeof (double));
    double *delta_ratio = (double *) calloc ((size_t) b->repeat, sizeof (double));
    assert (keys && values && op_us && keyed_us && dense_us && ratio && delta_us && delta_ratio);
    //  Scattered over the whole model, one key in each of n equal strides.
    uint64_t stride = model_keys / n, state = 7;
    for (size_t i = 0; i < n; i++) {
        keys [i] = i * stride + kd_splitmix64 (&state) % stride;
        values [i] = 0.01f;
    }
    char why [160] = "";
    int rc = -1;
    double seconds = kd_config_double (b->config, "run-seconds");
    //  ASP: the touching push is applied at once, so the pulls read rows
    //  that exist, as in training.
    if (s_mini_cluster (b, b->base_port, "asp", "--bench-keys", (size_t) model_keys, &pids [0], &pids [1])
    ||  s_mini_cluster (b, b->base_port + 10, "bsp", "--bench-floats", n, &pids [2], &pids [3])
    ||  !(keyed = kd_bench_dealer (b->base_port + 1, S_TIMEOUT_MS))
    ||  !(dense = kd_bench_dealer (b->base_port + 11, S_TIMEOUT_MS))) {
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
    snprintf (f_bytes, sizeof f_bytes, "%zu", s_keys_wire_bytes (keys, n, false) + n * sizeof (float));
    snprintf (f_delta_bytes, sizeof f_delta_bytes, "%zu", s_keys_wire_bytes (keys, n, true) + n * sizeof (float));
    const char *kv [] = { "keys", f_keys, "model_keys", f_model, "keyed_pull_us", f_keyed,
                          "dense_pull_us", f_dense, "ratio_keyed_vs_dense", f_ratio,
                          "keyed_wire_bytes", f_bytes, "delta_keys_pull_us", f_delta,
                          "ratio_delta_keys_vs_dense", f_delta_ratio, "delta_keys_wire_bytes", f_delta_bytes,
                          NULL };
    kd_bench_row (b, "sparse-pull", header, kv);
    rc = 0;
done:
    if (rc && !s_stop)
        kd_error ("sparse pull (%zu keys of %llu): %s", n, (unsigned long long) model_keys, why);
    zsock_destroy (&keyed);
    zsock_destroy (&dense);
    for (int i = 0; i < 4; i++)
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
    snprintf (f_bytes, sizeof f_bytes, "%zu", s_keys_wire_bytes (keys, n, false) + n * sizeof (float));
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
