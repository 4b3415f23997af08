/*  kd_bench_phase: `kudus bench phase`, where a BSP phase's time goes.

    A real `kudus local` cluster (built-in MLP workers, `phase-shards`
    shards, BSP) runs
    with an emulated compute of `phase-delay-ms` per iteration, and this
    benchmark follows the monitor's stream.  Over the window after the
    first fifth it takes the time per phase from the cluster's phase count,
    and each worker's own split of an iteration (the worker telemetry the
    monitor averages every 500 ms): compute (real and emulated), push,
    barrier wait, pull.  The rest of a phase is "other".  The ceiling is
    the compute-bound limit, a phase that is all compute: the ratio is the
    time per phase over the workers' mean compute.  Each evaluation setting
    of `phase-eval` runs: "off" (the monitor evaluates only at the end) and
    "on" (every 0.5 s, the default of `kudus local`), so that the load of
    evaluation on the same cores shows as the difference.  With
    `phase-path classic,short` each repeat runs both of the scheduler's
    phase paths (protocol 9.3.1), taking turns at going first, so that
    their ratio comes from interleaved runs on the same machine.
*/
#include "kd_bench.h"
#include "kd_stream.h"
#include <sys/wait.h>

#define S_WARMUP_SHARE  0.2             //  of each run, not measured
#define S_FIELDS        5               //  compute, push, wait, pull, phase

static volatile sig_atomic_t s_stop = 0;

static void
s_on_signal (int sig)
{
    (void) sig;
    s_stop = 1;
}

//  What one run measured, in ms per iteration (phase: per phase).
typedef struct {
    double compute, push, wait, pull, phase;
} s_split_t;

//  One run: start the cluster, follow its stream, stop it.  Returns 0,
//  -1 on failure (logged) or -2 when interrupted.
static int
s_run (kd_bench_t *b, bool eval_on, const char *path, s_split_t *out)
{
    kd_config_t *c = b->config;
    double seconds = kd_config_double (c, "phase-seconds");
    int port = b->base_port + 40;
    char f_workers [16], f_shards [16], f_delay [32], f_hidden [16], f_batch [16], f_port [16],
         f_max [32], pub [64];
    snprintf (f_workers, sizeof f_workers, "%lld", (long long) kd_config_int (c, "phase-workers"));
    snprintf (f_shards, sizeof f_shards, "%lld", (long long) kd_config_int (c, "phase-shards"));
    snprintf (f_delay, sizeof f_delay, "%g", kd_config_double (c, "phase-delay-ms"));
    snprintf (f_hidden, sizeof f_hidden, "%lld", (long long) kd_config_int (c, "hidden"));
    snprintf (f_batch, sizeof f_batch, "%lld", (long long) kd_config_int (c, "batch"));
    snprintf (f_port, sizeof f_port, "%d", port);
    snprintf (f_max, sizeof f_max, "%g", seconds + 2);
    snprintf (pub, sizeof pub, "tcp://127.0.0.1:%d", port + 2);
    const char *argv [] = { "kudus", "local", "--model", "mlp", "--hidden", f_hidden, "--batch", f_batch,
                            "--workers", f_workers, "--shards", f_shards, "--consistency", "bsp",
                            "--delay-ms", f_delay, "--max-seconds", f_max,
                            "--eval-interval", eval_on ? "0.5" : "3600", "--data-dir",
                            kd_config_str (c, "data-dir"), "--base-port", f_port,
                            "--quiet", "true", "--log-level", "warn", "--phase-path", path, NULL };
    zsock_t *sub = zsock_new (ZMQ_SUB);
    zsock_set_subscribe (sub, "");
    zsock_set_rcvtimeo (sub, 500);
    zsock_connect (sub, "%s", pub);
    pid_t local = kd_bench_spawn (b, argv);
    if (local <= 0) {
        zsock_destroy (&sub);
        kd_error ("phase: cannot start kudus local");
        return -1;
    }
    double sums [S_FIELDS - 1] = { 0 };
    size_t records = 0;
    double t_from = -1, t_to = -1, ph_from = 0, ph_to = 0;
    bool ended = false, late = false;
    //  The cluster stops itself (max-seconds); a minute past that, it is
    //  stuck, and this run fails instead of waiting for ever.
    uint64_t deadline = kd_now_ms () + (uint64_t) ((seconds + 60) * 1000);
    while (!s_stop && !ended) {
        if (kd_now_ms () > deadline) {
            late = true;
            break;
        }
        int status;
        if (waitpid (local, &status, WNOHANG) == local) {
            local = 0;
            break;
        }
        kd_stream_t *m = NULL;
        char err [256];
        if (kd_stream_recv (sub, &m, err, sizeof err) != 0 || !m)
            continue;
        if (kd_stream_topic (m) == KD_ST_STATS) {
            double elapsed = kd_stream_number (m, KD_S_ELAPSED_S, 0);
            double phases = kd_stream_number (m, KD_S_PHASES, 0);
            if (elapsed >= seconds * S_WARMUP_SHARE && elapsed <= seconds && phases > 0) {
                if (t_from < 0) {
                    t_from = elapsed;
                    ph_from = phases;
                }
                t_to = elapsed;
                ph_to = phases;
            }
            ended = elapsed > seconds;
        }
        else
        if (kd_stream_topic (m) == KD_ST_WORKER && t_from >= 0 && !ended
        &&  kd_stream_number (m, KD_S_AGE_MS, 1e9) < 1000) {
            sums [0] += kd_stream_number (m, KD_S_COMPUTE_MS, 0);
            sums [1] += kd_stream_number (m, KD_S_PUSH_MS, 0);
            sums [2] += kd_stream_number (m, KD_S_WAIT_MS, 0);
            sums [3] += kd_stream_number (m, KD_S_PULL_MS, 0);
            records++;
        }
        kd_stream_destroy (&m);
    }
    zsock_destroy (&sub);
    if (local > 0)
        kd_bench_stop (local);
    if (s_stop)
        return -2;
    if (late) {
        kd_error ("phase (evaluation %s): the cluster did not stop within %.0f s", eval_on ? "on" : "off",
                  seconds + 60);
        return -1;
    }
    if (records == 0 || ph_to <= ph_from || t_to <= t_from) {
        kd_error ("phase (evaluation %s): no phases measured from the monitor's stream %s",
                  eval_on ? "on" : "off", pub);
        return -1;
    }
    out->compute = sums [0] / (double) records;
    out->push = sums [1] / (double) records;
    out->wait = sums [2] / (double) records;
    out->pull = sums [3] / (double) records;
    out->phase = (t_to - t_from) * 1000 / (ph_to - ph_from);
    return 0;
}

//  One row: the medians of one configuration's runs.
static void
s_report (kd_bench_t *b, bool *header, bool eval_on, const char *path,
          double v [S_FIELDS][KD_BENCH_MAX_LIST], int runs)
{
    double m [S_FIELDS];
    for (int f = 0; f < S_FIELDS; f++)
        m [f] = kd_bench_median (v [f], runs);
    //  The split is the workers' means, the phase the cluster's rate:
    //  two windows that differ by a sample, so a rest a hair below 0
    //  reads as none.
    double other = m [4] - m [0] - m [1] - m [2] - m [3];
    if (other < 0)
        other = 0;
    char f_delay [32], f_workers [16], f_shards [16], f_phase [32], f_compute [32], f_push [32], f_wait [32],
         f_pull [32], f_other [32], f_ratio [32], f_path [24];
    snprintf (f_delay, sizeof f_delay, "%g", kd_config_double (b->config, "phase-delay-ms"));
    snprintf (f_workers, sizeof f_workers, "%lld", (long long) kd_config_int (b->config, "phase-workers"));
    snprintf (f_shards, sizeof f_shards, "%lld", (long long) kd_config_int (b->config, "phase-shards"));
    snprintf (f_phase, sizeof f_phase, "%.2f", m [4]);
    snprintf (f_compute, sizeof f_compute, "%.2f", m [0]);
    snprintf (f_push, sizeof f_push, "%.2f", m [1]);
    snprintf (f_wait, sizeof f_wait, "%.2f", m [2]);
    snprintf (f_pull, sizeof f_pull, "%.2f", m [3]);
    snprintf (f_other, sizeof f_other, "%.2f", other);
    snprintf (f_ratio, sizeof f_ratio, "%.3f", m [0] > 0 ? m [4] / m [0] : NAN);
    snprintf (f_path, sizeof f_path, "\"%s\"", path);
    const char *kv [] = { "model", "\"mlp\"", "workers", f_workers, "shards", f_shards,
                          "delay_ms", f_delay,
                          "evaluation", eval_on ? "\"on\"" : "\"off\"",
                          "phase_ms", f_phase, "compute_ms", f_compute, "push_ms", f_push,
                          "barrier_ms", f_wait, "pull_ms", f_pull, "other_ms", f_other,
                          "ratio_vs_compute", f_ratio, "phase_path", f_path, NULL };
    kd_bench_row (b, "phase", header, kv);
}

//  Parse a comma-separated list of at most two words of a setting, each
//  one of a and b.  Returns how many (0: malformed).
static int
s_words (kd_bench_t *b, const char *name, const char *a, const char *w2, const char *out [2])
{
    char text [32];
    snprintf (text, sizeof text, "%s", kd_config_str (b->config, name));
    int n = 0;
    char *save = NULL;
    for (char *word = strtok_r (text, ",", &save); word; word = strtok_r (NULL, ",", &save)) {
        if (n == 2 || (strcmp (word, a) && strcmp (word, w2))) {
            fprintf (stderr, "kudus bench: setting '%s': %s, %s or %s,%s\n", name, a, w2, a, w2);
            return 0;
        }
        out [n++] = !strcmp (word, a) ? a : w2;
    }
    if (n == 0)
        fprintf (stderr, "kudus bench: setting '%s': %s, %s or %s,%s\n", name, a, w2, a, w2);
    return n;
}

int
kd_bench_phase (kd_bench_t *b)
{
    //  "off", "on", or both, comma-separated, in the order given; the
    //  same for the phase paths.
    const char *evals [2], *paths [2];
    int n = s_words (b, "phase-eval", "off", "on", evals);
    int n_paths = n ? s_words (b, "phase-path", "classic", "short", paths) : 0;
    if (n == 0 || n_paths == 0)
        return 2;
    struct sigaction sa = { .sa_handler = s_on_signal };
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    bool header = false;
    int done = 0;
    for (int i = 0; i < n; i++) {
        bool eval_on = !strcmp (evals [i], "on");
        double v [2][S_FIELDS][KD_BENCH_MAX_LIST];
        int runs = 0;
        for (int r = 0; r < b->repeat && r < KD_BENCH_MAX_LIST; r++) {
            for (int k = 0; k < n_paths; k++) {
                //  Odd repeats run the paths in reverse: neither always
                //  goes first on a machine that warms up or gets busier.
                int p = r % 2 ? n_paths - 1 - k : k;
                s_split_t s;
                int rc = s_run (b, eval_on, paths [p], &s);
                if (rc == -2) {
                    fprintf (stderr, "kudus bench phase: interrupted after %d of %d configurations\n", done, n);
                    return 130;
                }
                if (rc)
                    return 1;
                v [p][0][runs] = s.compute;
                v [p][1][runs] = s.push;
                v [p][2][runs] = s.wait;
                v [p][3][runs] = s.pull;
                v [p][4][runs] = s.phase;
            }
            runs++;
        }
        for (int p = 0; p < n_paths; p++)
            s_report (b, &header, eval_on, paths [p], v [p], runs);
        done++;
    }
    return 0;
}
