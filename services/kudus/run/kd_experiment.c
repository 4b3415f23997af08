/*  kd_experiment: `kudus experiment FILE` runs a scenario file.

    The scenario (kd_scenario, format in docs/experiments.md) lists seeds,
    optimizers and consistency models; every combination is one run, a
    `kudus local` child with the scenario's shape, that stops at the highest
    target accuracy, at the cap, or at the epoch budget.  Runs go seed by
    seed, so an interrupted sweep leaves whole seeds, which is what paired
    comparisons need.

    Each finished run appends one JSON line to the results file (default
    docs/results/SCENARIO.jsonl), keyed by scenario, model, optimizer and
    seed; a rerun skips the keys already there, so a sweep resumes where it
    stopped.  The line is written with one write() and an fsync, and only
    once the run is over, so a run killed midway records nothing.

    A line holds everything the report (bench/report.py) needs: times to
    each target on the 1 s rolling mean of the snapshot curve, the final
    accuracy (mean of the last 5 % of snapshots), a downsampled curve of
    [seconds, applied samples, rolling accuracy], the scheduler's summary
    figures, per-worker applied and speed shares, the regroup lag after each
    speed change, the CPU the run took, and the achieved-vs-emulated
    iteration check.  Each run's summary, curve and log stay in --out.
*/
#include "kd_cli.h"
#include "kd_scenario.h"
#include "kd_spawn.h"
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_SNAPSHOT_MS       "200"   //  snapshot period of the curve
#define S_EVAL_INTERVAL     "0.25"  //  online evaluations (they drive the stop)
#define S_ROLLING_S         1.0     //  window of the rolling mean, seconds
#define S_FINAL_SHARE       0.05    //  final accuracy: mean of this last share
#define S_CURVE_POINTS      400     //  curve points kept per run, at most
#define S_SPEED_SAMPLES     4000    //  samples of a schedule averaged over a run
#define S_MAX_CHANGES       4096    //  speed changes per rank considered
#define S_ITER_TOLERANCE    0.10    //  iteration check: achieved within 10 %
#define S_STOP_MARGIN       0.005   //  a run stops this far past its top target
#define S_MAX_ARGS          160     //  argv entries of the kudus local child
#define S_PATH              2048    //  path buffers

static volatile sig_atomic_t s_signal = 0;

static void
s_on_signal (int sig)
{
    s_signal = sig;
}

//  Settings the scenario decides: giving one to `kudus experiment` (flag or
//  environment) is an error, so the child never mixes them.
static const char *const s_owned [] = {
    "workers", "shards", "model", "hidden", "batch", "epochs", "delay-ms", "lr", "momentum",
    "seed", "consistency", "staleness", "staleness-weight", "quota", "quota-ratio", "window-ms",
    "barrier", "barrier-slack", "barrier-spread", "group-ratio", "min-group", "max-groups", "group-staleness",
    "group-step", "global-sync-every",
    "regroup-dwell", "speed-source", "max-seconds", "target-accuracy", "snapshot-ms", "eval-interval",
    "curve-file", "summary", "speeds", "straggler", "hetero", "hetero-period", "quiet",
    "checkpoint-dir", "checkpoint-every", NULL
};

//  One curve point.
typedef struct {
    double seconds;             //  since training started
    double samples;             //  applied samples, NAN if not reported
    double accuracy;            //  snapshot test accuracy
    double rolling;             //  mean over (seconds - 1, seconds]
} s_point_t;

//  --------------------------------------------------------------------------
//  Small helpers

//  The directory part of a path, into out ("." if none).
static void
s_dirname (const char *path, char *out, size_t size)
{
    snprintf (out, size, "%s", path);
    char *slash = strrchr (out, '/');
    if (slash == out)
        out [1] = 0;
    else
    if (slash)
        *slash = 0;
    else
        snprintf (out, size, ".");
}

//  A number of a JSON object; NAN when absent, null or not a number.
static double
s_num (json_object *obj, const char *key)
{
    json_object *v;
    if (!obj || !json_object_object_get_ex (obj, key, &v))
        return NAN;
    if (!json_object_is_type (v, json_type_int) && !json_object_is_type (v, json_type_double))
        return NAN;
    return json_object_get_double (v);
}

//  A JSON number written with fmt, or null for NAN.  Caller owns return value.
static json_object *
s_jnum (double v, const char *fmt)
{
    if (!isfinite (v))
        return NULL;
    char text [64];
    snprintf (text, sizeof text, fmt, v);
    return json_object_new_double_s (v, text);
}

static int
s_cmp_double (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

//  Median of n values (sorted in place); NAN when n is 0.
static double
s_median (double *v, size_t n)
{
    if (n == 0)
        return NAN;
    qsort (v, n, sizeof *v, s_cmp_double);
    return n % 2 ? v [n / 2] : (v [n / 2 - 1] + v [n / 2]) / 2;
}

//  The value of a kudus-local setting as text, whatever its type.
static void
s_setting_text (kd_config_t *c, const kd_setting_t *row, char *out, size_t size)
{
    if (row->type == KD_CT_INT)
        snprintf (out, size, "%lld", (long long) kd_config_int (c, row->name));
    else
    if (row->type == KD_CT_DOUBLE && !isnan (kd_config_double (c, row->name)))
        snprintf (out, size, "%.17g", kd_config_double (c, row->name));
    else
    if (row->type == KD_CT_BOOL)
        snprintf (out, size, "%s", kd_config_bool (c, row->name) ? "true" : "false");
    else
        snprintf (out, size, "%s", kd_config_str (c, row->name));
}

//  --------------------------------------------------------------------------
//  The results file

//  Key of a run in the results file.  Caller frees.
static char *
s_key (const char *sweep, const char *model, const char *optimizer, uint64_t seed)
{
    return zsys_sprintf ("%s|%s|%s|%llu", sweep, model, optimizer, (unsigned long long) seed);
}

//  What a run was configured with, as text: lr, momentum and controller
//  settings.  A recorded run whose signature differs from the scenario's
//  (say, after the learning rates were tuned) is still skipped, but
//  reported, so stale records do not pass unnoticed.  Caller frees.
static char *
s_signature (double lr, double momentum, json_object *params)
{
    char *sig = zsys_sprintf ("lr=%.6g momentum=%.6g", lr, momentum);
    if (params && json_object_is_type (params, json_type_object)) {
        json_object_object_foreach (params, key, val) {
            char *next = zsys_sprintf ("%s %s=%s", sig, key, json_object_get_string (val));
            zstr_free (&sig);
            sig = next;
        }
    }
    return sig;
}

//  The signature of a model entry with an optimizer.  Caller frees.
static char *
s_scenario_signature (kd_scenario_t *sc, size_t model, size_t opt)
{
    json_object *params = json_object_new_object ();
    for (size_t i = 0; i < kd_scenario_param_count (sc, model); i++)
        json_object_object_add (params, kd_scenario_param_name (sc, model, i),
                                json_object_new_string (kd_scenario_param_value (sc, model, i)));
    char *sig = s_signature (kd_scenario_model_lr (sc, model, opt),
                             kd_scenario_optimizer_momentum (sc, opt), params);
    json_object_put (params);
    return sig;
}

//  The keys of the runs of this scenario already recorded, each with its
//  signature (a string the table owns).  Lines that do
//  not parse (there should be none) are reported and ignored.
static zhashx_t *
s_recorded (const char *path, const char *scenario)
{
    zhashx_t *keys = zhashx_new ();
    zhashx_set_destructor (keys, (zhashx_destructor_fn *) zstr_free);
    char *text = kd_read_file (path);
    if (!text)
        return keys;
    size_t line_no = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr (line, '\n');
        if (next)
            *next++ = 0;
        line_no++;
        if (!*line)
            continue;
        json_object *o = json_tokener_parse (line);
        json_object *v;
        const char *sc = o && json_object_object_get_ex (o, "scenario", &v) ? json_object_get_string (v) : NULL;
        const char *m = o && json_object_object_get_ex (o, "model", &v) ? json_object_get_string (v) : NULL;
        const char *op = o && json_object_object_get_ex (o, "optimizer", &v) ? json_object_get_string (v) : NULL;
        double seed = s_num (o, "seed");
        if (!sc || !m || !op || isnan (seed))
            fprintf (stderr, "kudus experiment: %s line %zu is not a run record; ignored\n", path, line_no);
        else
        if (!strcmp (sc, scenario)) {
            //  Records from before sweeps were named belong to the first.
            const char *sweep = json_object_object_get_ex (o, "sweep", &v)
                              ? json_object_get_string (v) : "1";
            char *key = s_key (sweep, m, op, (uint64_t) seed);
            json_object *params = NULL;
            json_object_object_get_ex (o, "params", &params);
            char *sig = s_signature (s_num (o, "lr"), s_num (o, "momentum"), params);
            zhashx_update (keys, key, sig);
            zstr_free (&key);
        }
        json_object_put (o);
    }
    free (text);
    return keys;
}

//  Append one line with a single write, then fsync: a reader sees the
//  whole line or nothing.  A file whose last line lacks its newline (cut
//  by a crash) gets one first, in the same write.
static int
s_append_line (const char *path, const char *line)
{
    int fd = open (path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0)
        return -1;
    bool newline_first = false;
    struct stat st;
    if (fstat (fd, &st) == 0 && st.st_size > 0) {
        int rd = open (path, O_RDONLY);
        char last = '\n';
        if (rd >= 0 && pread (rd, &last, 1, st.st_size - 1) == 1)
            newline_first = last != '\n';
        if (rd >= 0)
            close (rd);
    }
    char *text = zsys_sprintf ("%s%s\n", newline_first ? "\n" : "", line);
    size_t len = strlen (text);
    ssize_t n = write (fd, text, len);
    int rc = n == (ssize_t) len && fsync (fd) == 0 ? 0 : -1;
    zstr_free (&text);
    if (close (fd) != 0)
        rc = -1;
    return rc;
}

//  --------------------------------------------------------------------------
//  Reading a run's outputs

//  The snapshot curve: header "seconds,version,accuracy,loss[,samples]".
//  Returns the points (caller frees) and their count in *n; NULL if none.
static s_point_t *
s_read_curve (const char *path, size_t *n)
{
    *n = 0;
    char *text = kd_read_file (path);
    if (!text)
        return NULL;
    int col_s = -1, col_acc = -1, col_samples = -1;
    size_t cap = 0;
    s_point_t *points = NULL;
    bool header = true;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr (line, '\n');
        if (next)
            *next++ = 0;
        char *fields [16];
        int nf = 0;
        for (char *p = line; p && nf < 16; ) {
            fields [nf++] = p;
            p = strchr (p, ',');
            if (p)
                *p++ = 0;
        }
        if (header) {
            for (int i = 0; i < nf; i++) {
                char *f = fields [i];
                f [strcspn (f, "\r")] = 0;
                if (!strcmp (f, "seconds"))
                    col_s = i;
                else
                if (!strcmp (f, "accuracy"))
                    col_acc = i;
                else
                if (!strcmp (f, "samples"))
                    col_samples = i;
            }
            header = false;
            if (col_s < 0 || col_acc < 0)
                break;
            continue;
        }
        if (nf <= col_s || nf <= col_acc)
            continue;
        char *end1, *end2;
        double s = strtod (fields [col_s], &end1);
        double a = strtod (fields [col_acc], &end2);
        if (end1 == fields [col_s] || end2 == fields [col_acc] || !isfinite (s) || !isfinite (a))
            continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 512;
            points = (s_point_t *) realloc (points, cap * sizeof *points);
            assert (points);
        }
        s_point_t *pt = &points [(*n)++];
        pt->seconds = s;
        pt->accuracy = a;
        pt->samples = NAN;
        if (col_samples >= 0 && nf > col_samples) {
            char *end3;
            double v = strtod (fields [col_samples], &end3);
            if (end3 != fields [col_samples])
                pt->samples = v;
        }
    }
    free (text);
    return points;
}

static int
s_cmp_point (const void *a, const void *b)
{
    double x = ((const s_point_t *) a)->seconds, y = ((const s_point_t *) b)->seconds;
    return x < y ? -1 : x > y;
}

//  Fill each point's rolling mean: the snapshots in (t - 1 s, t].
static void
s_rolling (s_point_t *points, size_t n)
{
    if (n == 0)
        return;
    qsort (points, n, sizeof *points, s_cmp_point);
    size_t lo = 0;
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += points [i].accuracy;
        while (points [lo].seconds <= points [i].seconds - S_ROLLING_S) {
            sum -= points [lo].accuracy;
            lo++;
        }
        points [i].rolling = sum / (double) (i - lo + 1);
    }
}

//  First time the rolling mean reaches target within the cap; NAN if never.
static double
s_time_to (const s_point_t *points, size_t n, double target, double cap)
{
    for (size_t i = 0; i < n && points [i].seconds <= cap; i++)
        if (points [i].rolling >= target)
            return points [i].seconds;
    return NAN;
}

//  --------------------------------------------------------------------------
//  One run

typedef struct {
    kd_scenario_t *scenario;    //  what runs
    size_t model;               //  model entry
    size_t opt;                 //  optimizer
    uint64_t seed;              //  run seed
    char **speeds;              //  spec per rank
    char summary [S_PATH];      //  the scheduler's summary
    char curve [S_PATH];        //  the monitor's curve
    char log [S_PATH];          //  the child's output
    int exit_code;              //  of kudus local, 128+sig if signalled
    double run_s;               //  fork to reap, seconds
    double cpu_s;               //  user + system of the whole cluster
    const char *build;          //  the build that ran it (borrowed)
} s_run_t;

//  Start `kudus local` and wait for it; a signal to us is passed on as
//  SIGTERM, which makes it tear the cluster down.  The rusage of wait4
//  covers its children too, since it reaps them.
static void
s_exec_local (s_run_t *run, char **argv)
{
    double t0 = kd_now_msf ();
    kd_spawn_t how = KD_SPAWN_INIT;
    how.argv = (const char *const *) argv;
    how.out_file = how.err_file = run->log;
    how.death_signal = SIGTERM;
    how.ignore_sigint = true;       //  Ctrl-C reaches us; we send SIGTERM
    pid_t pid = kd_spawn (&how);
    run->exit_code = 127;
    if (pid < 0)
        return;
    int status = 0;
    bool forwarded = false;
    struct rusage ru;
    memset (&ru, 0, sizeof ru);
    while (wait4 (pid, &status, 0, &ru) < 0) {
        if (errno != EINTR)
            return;
        if (s_signal && !forwarded) {
            kill (pid, SIGTERM);
            forwarded = true;
        }
    }
    run->run_s = (kd_now_msf () - t0) / 1000.0;
    run->cpu_s = (double) ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6
               + (double) ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
    run->exit_code = WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
}

//  Per-worker figures, with each worker's share of the speed: the time
//  average of 1/factor over the run (iterations go as speed), over the sum
//  of those of all workers.
static json_object *
s_per_worker (s_run_t *run, json_object *summary, double wall, double *worst_ratio,
              json_object **check)
{
    int n = kd_scenario_workers (run->scenario);
    double *speed = (double *) calloc ((size_t) n, sizeof (double));
    assert (speed);
    double speed_sum = 0;
    double span = wall > 0 ? wall : 1;
    for (int r = 0; r < n; r++) {
        char msg [256];
        kd_speed_t *sp = kd_speed_new (run->speeds [r], 0, msg, sizeof msg);
        assert (sp);    //  checked when the scenario was loaded
        double sum = 0;
        for (int i = 0; i < S_SPEED_SAMPLES; i++)
            sum += 1.0 / kd_speed_base (sp, span * (i + 0.5) / S_SPEED_SAMPLES);
        speed [r] = sum / S_SPEED_SAMPLES;
        speed_sum += speed [r];
        kd_speed_destroy (&sp);
    }
    json_object *out = json_object_new_array ();
    json_object *workers;
    size_t count = json_object_object_get_ex (summary, "per_worker", &workers)
                && json_object_is_type (workers, json_type_array) ? json_object_array_length (workers) : 0;
    double *achieved = (double *) calloc (count + 1, sizeof (double));
    double *emulated = (double *) calloc (count + 1, sizeof (double));
    double *ratios = (double *) calloc (count + 1, sizeof (double));
    assert (achieved && emulated && ratios);
    size_t n_check = 0;
    *worst_ratio = NAN;
    for (size_t i = 0; i < count; i++) {
        json_object *w = json_object_array_get_idx (workers, i);
        double rank = s_num (w, "rank");
        json_object *o = json_object_new_object ();
        json_object_object_add (o, "rank", s_jnum (rank, "%.0f"));
        static const struct { const char *key, *fmt; } fields [] = {
            { "applied_samples", "%.0f" }, { "applied_share", "%.5f" }, { "dropped", "%.0f" },
            { "iterations", "%.0f" }, { "iter_ms_mean", "%.3f" }, { "emulated_ms_mean", "%.3f" },
            { "compute_ms_mean", "%.3f" }, { "wait_fraction", "%.4f" }
        };
        for (size_t f = 0; f < sizeof fields / sizeof fields [0]; f++)
            json_object_object_add (o, fields [f].key, s_jnum (s_num (w, fields [f].key), fields [f].fmt));
        bool known = rank >= 0 && rank < n && speed_sum > 0;
        json_object_object_add (o, "speed_share",
                                s_jnum (known ? speed [(int) rank] / speed_sum : NAN, "%.5f"));
        json_object_array_add (out, o);
        //  The check is on the compute itself: the time a gradient took
        //  against the emulated time it aimed for.  A loaded machine shows
        //  there first; pushes, pulls and waits are the models' own cost.
        double it = s_num (w, "compute_ms_mean"), em = s_num (w, "emulated_ms_mean");
        if (isfinite (it) && isfinite (em) && em > 0) {
            achieved [n_check] = it;
            emulated [n_check] = em;
            ratios [n_check] = it / em;
            if (isnan (*worst_ratio) || fabs (ratios [n_check] - 1) > fabs (*worst_ratio - 1))
                *worst_ratio = ratios [n_check];
            n_check++;
        }
    }
    *check = NULL;
    if (n_check > 0) {
        bool ok = fabs (*worst_ratio - 1) <= S_ITER_TOLERANCE;
        *check = json_object_new_object ();
        json_object_object_add (*check, "achieved_ms", s_jnum (s_median (achieved, n_check), "%.3f"));
        json_object_object_add (*check, "emulated_ms", s_jnum (s_median (emulated, n_check), "%.3f"));
        json_object_object_add (*check, "ratio", s_jnum (s_median (ratios, n_check), "%.4f"));
        json_object_object_add (*check, "worst_ratio", s_jnum (*worst_ratio, "%.4f"));
        json_object_object_add (*check, "ok", json_object_new_boolean (ok));
    }
    free (achieved);
    free (emulated);
    free (ratios);
    free (speed);
    return out;
}

//  The times any rank's speed changes during the run (kd_speed_changes of
//  every rank, merged and sorted).  Returns them (caller frees), *n set.
static double *
s_speed_changes (s_run_t *run, double wall, size_t *n)
{
    int workers = kd_scenario_workers (run->scenario);
    double *changes = (double *) calloc ((size_t) workers * S_MAX_CHANGES + 1, sizeof (double));
    assert (changes);
    size_t total = 0;
    for (int r = 0; r < workers; r++) {
        char msg [256];
        kd_speed_t *sp = kd_speed_new (run->speeds [r], 0, msg, sizeof msg);
        assert (sp);    //  checked when the scenario was loaded
        size_t k = kd_speed_changes (sp, wall, changes + total, S_MAX_CHANGES);
        total += k < S_MAX_CHANGES ? k : S_MAX_CHANGES;
        kd_speed_destroy (&sp);
    }
    qsort (changes, total, sizeof (double), s_cmp_double);
    size_t unique = 0;
    for (size_t i = 0; i < total; i++)
        if (unique == 0 || changes [i] - changes [unique - 1] > 1e-6)
            changes [unique++] = changes [i];
    *n = unique;
    return changes;
}

//  Regroup lag (ALSP only): for each speed change, the time to the first
//  regroup at or after it; a change no regroup follows is "unanswered".
static json_object *
s_regroup_lag (s_run_t *run, json_object *summary, const double *changes, size_t n_changes)
{
    if (strcmp (kd_scenario_model_consistency (run->scenario, run->model), "alsp"))
        return NULL;
    json_object *times;
    bool have = json_object_object_get_ex (summary, "regroup_times", &times)
             && json_object_is_type (times, json_type_array);
    size_t n_regroups = have ? json_object_array_length (times) : 0;
    double *lags = (double *) calloc (n_changes + 1, sizeof (double));
    assert (lags);
    size_t n_lags = 0, unanswered = 0;
    double max = NAN;
    for (size_t c = 0; c < n_changes; c++) {
        double best = NAN;
        for (size_t i = 0; i < n_regroups; i++) {
            double t = json_object_get_double (json_object_array_get_idx (times, i));
            if (t >= changes [c] && (isnan (best) || t < best))
                best = t;
        }
        if (isnan (best))
            unanswered++;
        else {
            lags [n_lags++] = best - changes [c];
            max = isnan (max) || best - changes [c] > max ? best - changes [c] : max;
        }
    }
    json_object *o = json_object_new_object ();
    json_object_object_add (o, "median", s_jnum (s_median (lags, n_lags), "%.3f"));
    json_object_object_add (o, "max", s_jnum (max, "%.3f"));
    json_object_object_add (o, "changes", json_object_new_int64 ((int64_t) n_changes));
    json_object_object_add (o, "unanswered", json_object_new_int64 ((int64_t) unanswered));
    free (lags);
    return o;
}

//  Copy a field of the summary into the record as it is (null if absent).
static void
s_copy (json_object *rec, json_object *summary, const char *from, const char *to)
{
    json_object *v = NULL;
    if (json_object_object_get_ex (summary, from, &v))
        json_object_get (v);
    json_object_object_add (rec, to, v);
}

//  The record of a finished run, or NULL (with a message) when its outputs
//  are missing.  Prints the one-line result and the iteration check.
static json_object *
s_record (s_run_t *run)
{
    kd_scenario_t *sc = run->scenario;
    char *text = kd_read_file (run->summary);
    json_object *summary = text ? json_tokener_parse (text) : NULL;
    free (text);
    if (!summary || !json_object_is_type (summary, json_type_object)) {
        fprintf (stderr, "kudus experiment: no readable summary at %s (log: %s)\n", run->summary, run->log);
        json_object_put (summary);
        return NULL;
    }
    size_t n = 0;
    s_point_t *points = s_read_curve (run->curve, &n);
    if (n == 0)
        fprintf (stderr, "kudus experiment: no curve at %s; times to target are null\n", run->curve);
    s_rolling (points, n);
    double wall = s_num (summary, "wall_seconds");
    double cap = kd_scenario_cap_seconds (sc);
    json_object *rec = json_object_new_object ();
    json_object_object_add (rec, "scenario", json_object_new_string (kd_scenario_name (sc)));
    json_object_object_add (rec, "model", json_object_new_string (kd_scenario_model_name (sc, run->model)));
    json_object_object_add (rec, "optimizer", json_object_new_string (kd_scenario_optimizer_name (sc, run->opt)));
    json_object_object_add (rec, "seed", json_object_new_int64 ((int64_t) run->seed));
    json_object_object_add (rec, "consistency",
                            json_object_new_string (kd_scenario_model_consistency (sc, run->model)));
    json_object_object_add (rec, "lr", s_jnum (kd_scenario_model_lr (sc, run->model, run->opt), "%.10g"));
    json_object_object_add (rec, "momentum", s_jnum (kd_scenario_optimizer_momentum (sc, run->opt), "%.10g"));
    json_object *params = json_object_new_object ();
    for (size_t i = 0; i < kd_scenario_param_count (sc, run->model); i++)
        json_object_object_add (params, kd_scenario_param_name (sc, run->model, i),
                                json_object_new_string (kd_scenario_param_value (sc, run->model, i)));
    json_object_object_add (rec, "params", params);
    json_object_object_add (rec, "workers", json_object_new_int (kd_scenario_workers (sc)));
    json_object_object_add (rec, "delay_ms", s_jnum (kd_scenario_delay_ms (sc), "%.10g"));
    json_object_object_add (rec, "cap_seconds", s_jnum (cap, "%.10g"));
    json_object_object_add (rec, "status", json_object_new_string ("ok"));
    json_object_object_add (rec, "wall", s_jnum (wall, "%.3f"));
    json_object_object_add (rec, "run_seconds", s_jnum (run->run_s, "%.3f"));
    s_copy (rec, summary, "stop_reason", "stop_reason");
    s_copy (rec, summary, "stop_accuracy", "stop_accuracy");
    s_copy (rec, summary, "test_accuracy", "test_accuracy");
    json_object_object_add (rec, "target", s_jnum (kd_scenario_target (sc), "%.4g"));

    //  Times to each target on the rolling mean; past the cap counts as never.
    json_object *time_to = json_object_new_object ();
    double primary = NAN;
    for (size_t i = 0; i < kd_scenario_target_count (sc); i++) {
        double target = kd_scenario_target_at (sc, i);
        double t = s_time_to (points, n, target, cap);
        char key [16];
        snprintf (key, sizeof key, "%.2f", target);
        json_object_object_add (time_to, key, s_jnum (t, "%.3f"));
        if (fabs (target - kd_scenario_target (sc)) < 1e-12)
            primary = t;
    }
    json_object_object_add (rec, "time_to", time_to);
    size_t tail = n ? (size_t) ceil ((double) n * S_FINAL_SHARE) : 0;
    double final_sum = 0;
    for (size_t i = n - tail; i < n; i++)
        final_sum += points [i].accuracy;
    double final = tail ? final_sum / (double) tail : NAN;
    json_object_object_add (rec, "final_accuracy", s_jnum (final, "%.4f"));
    json_object_object_add (rec, "snapshots", json_object_new_int64 ((int64_t) n));

    static const struct { const char *key, *to; } copied [] = {
        { "samples", "samples" }, { "epochs", "epochs" }, { "epochs_completed", "epochs_completed" },
        { "epoch_row_share", "epoch_row_share" }, { "updates", "updates" },
        { "updates_per_second", "updates_per_second" }, { "barriers_per_second", "barriers_per_second" },
        { "staleness_p50", "staleness_p50" }, { "staleness_p99", "staleness_p99" },
        { "staleness_max", "staleness_max" }, { "dropped_gradients", "dropped" },
        { "regroups", "regroups" }, { "regroup_times", "regroup_times" },
        { "wait_fraction", "wait_fraction" }, { "early_releases", "early_releases" },
        { "mode", "mode" }, { "switch_count", "switch_count" }, { "switches", "switches" },
        { "allowance", "allowance" }, { "allowance_count", "allowance_count" },
        { "allowance_changes", "allowance_changes" }
    };
    for (size_t i = 0; i < sizeof copied / sizeof copied [0]; i++)
        s_copy (rec, summary, copied [i].key, copied [i].to);
    size_t n_changes = 0;
    double *changes = s_speed_changes (run, wall, &n_changes);
    json_object *change_list = json_object_new_array ();
    for (size_t c = 0; c < n_changes && c < S_CURVE_POINTS; c++)
        json_object_array_add (change_list, s_jnum (changes [c], "%.3f"));
    json_object_object_add (rec, "speed_changes", change_list);
    json_object_object_add (rec, "regroup_lag", s_regroup_lag (run, summary, changes, n_changes));
    free (changes);
    long ncpu = sysconf (_SC_NPROCESSORS_ONLN);
    double cpu = run->run_s > 0 && ncpu > 0 ? run->cpu_s / run->run_s / (double) ncpu : NAN;
    json_object_object_add (rec, "cpu_fraction", s_jnum (cpu, "%.4f"));
    double worst = NAN;
    json_object *check = NULL;
    json_object_object_add (rec, "per_worker", s_per_worker (run, summary, wall, &worst, &check));
    json_object_object_add (rec, "iteration_check", check);

    //  The curve, at most S_CURVE_POINTS points: [seconds, samples, rolling].
    json_object *curve = json_object_new_array ();
    size_t stride = n > S_CURVE_POINTS ? (n + S_CURVE_POINTS - 2) / (S_CURVE_POINTS - 1) : 1;
    for (size_t i = 0; i < n; i += stride) {
        size_t k = i + stride >= n ? n - 1 : i;     //  the last point always
        json_object *pt = json_object_new_array ();
        json_object_array_add (pt, s_jnum (points [k].seconds, "%.3f"));
        json_object_array_add (pt, s_jnum (points [k].samples, "%.0f"));
        json_object_array_add (pt, s_jnum (points [k].rolling, "%.4f"));
        json_object_array_add (curve, pt);
        if (k == n - 1)
            break;
    }
    json_object_object_add (rec, "curve", curve);
    json_object *speeds = json_object_new_array ();
    for (int r = 0; r < kd_scenario_workers (sc); r++)
        json_object_array_add (speeds, json_object_new_string (run->speeds [r]));
    json_object_object_add (rec, "speeds", speeds);
    json_object_object_add (rec, "kudus_version", json_object_new_string (KUDUS_VERSION_STRING));
    json_object_object_add (rec, "sweep", json_object_new_string (kd_scenario_sweep (sc)));
    json_object_object_add (rec, "build", json_object_new_string (run->build));
    char stamp [32];
    time_t now = time (NULL);
    strftime (stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime (&now));
    json_object_object_add (rec, "finished_at", json_object_new_string (stamp));

    //  What a reader of the terminal wants to know.
    char t_primary [32] = "not reached";
    if (!isnan (primary))
        snprintf (t_primary, sizeof t_primary, "%.2f s", primary);
    json_object *reason;
    printf ("ok: stop %s after %.1f s, %.2f at %s, final accuracy %.4f, cpu %.2f\n",
            json_object_object_get_ex (summary, "stop_reason", &reason) ? json_object_get_string (reason) : "?",
            wall, kd_scenario_target (sc), t_primary, final, cpu);
    if (check)
        printf ("iteration check: achieved compute %.1f ms vs emulated %.1f ms (ratio %.3f) %s%s\n",
                s_num (check, "achieved_ms"), s_num (check, "emulated_ms"), s_num (check, "ratio"),
                fabs (worst - 1) <= S_ITER_TOLERANCE ? "OK" : "OFF",
                fabs (worst - 1) <= S_ITER_TOLERANCE ? "" : " (a worker is outside 10 %)");
    else
        printf ("iteration check: no emulated compute reported\n");
    fflush (stdout);
    free (points);
    json_object_put (summary);
    return rec;
}

//  --------------------------------------------------------------------------
//  The sweep

typedef struct {
    kd_config_t *config;        //  our settings
    kd_scenario_t *scenario;    //  the file
    char self_exe [S_PATH];     //  this binary, to run `kudus local`
    char out [S_PATH];          //  per-run files
    char results [S_PATH];      //  the JSON-lines file
    char build [64];            //  git describe of the tree, or "unknown"
} s_sweep_t;

//  Name the build that runs the sweep: --build-id when given (binaries
//  copied away from their tree, or a tarball), else `git describe --always
//  --dirty` of the current directory, so every record says which code
//  produced it.
static void
s_build_id (const char *given, char *out, size_t size)
{
    if (given && *given) {
        snprintf (out, size, "%s", given);
        return;
    }
    snprintf (out, size, "unknown");
    FILE *pipe = popen ("git describe --always --dirty 2>/dev/null", "r");
    if (!pipe)
        return;
    char line [64];
    if (fgets (line, sizeof line, pipe)) {
        line [strcspn (line, "\n")] = 0;
        if (*line)
            snprintf (out, size, "%s", line);
    }
    pclose (pipe);
}

//  Build the argv of one run's `kudus local`.  Returns the count.
static int
s_build_args (s_sweep_t *sw, s_run_t *run, char **argv, char store [][S_PATH])
{
    kd_scenario_t *sc = sw->scenario;
    int n = 0, k = 0;
    #define S_ADD(...) do { snprintf (store [k], S_PATH, __VA_ARGS__); argv [n++] = store [k++]; } while (0)
    S_ADD ("%s", sw->self_exe);
    S_ADD ("local");
    S_ADD ("--consistency"); S_ADD ("%s", kd_scenario_model_consistency (sc, run->model));
    S_ADD ("--seed"); S_ADD ("%llu", (unsigned long long) run->seed);
    S_ADD ("--base-port"); S_ADD ("%lld", (long long) kd_config_int (sw->config, "base-port"));
    S_ADD ("--workers"); S_ADD ("%d", kd_scenario_workers (sc));
    S_ADD ("--shards"); S_ADD ("%d", kd_scenario_shards (sc));
    S_ADD ("--model"); S_ADD ("%s", kd_scenario_model_kind (sc));
    S_ADD ("--hidden"); S_ADD ("%d", kd_scenario_hidden (sc));
    S_ADD ("--batch"); S_ADD ("%d", kd_scenario_batch (sc));
    S_ADD ("--epochs"); S_ADD ("%.10g", kd_scenario_epochs (sc));
    S_ADD ("--delay-ms"); S_ADD ("%.10g", kd_scenario_delay_ms (sc));
    S_ADD ("--lr"); S_ADD ("%.10g", kd_scenario_model_lr (sc, run->model, run->opt));
    S_ADD ("--momentum"); S_ADD ("%.10g", kd_scenario_optimizer_momentum (sc, run->opt));
    S_ADD ("--max-seconds"); S_ADD ("%.10g", kd_scenario_cap_seconds (sc));
    if (kd_scenario_netns (sc)) {
        S_ADD ("--netns"); S_ADD ("true");
        S_ADD ("--link-delay-ms"); S_ADD ("%.10g", kd_scenario_link_delay_ms (sc));
        S_ADD ("--link-rate-mbit"); S_ADD ("%.10g", kd_scenario_link_rate_mbit (sc));
        S_ADD ("--link-loss"); S_ADD ("%.10g", kd_scenario_link_loss (sc));
        if (*kd_scenario_links (sc)) {
            S_ADD ("--link"); S_ADD ("%s", kd_scenario_links (sc));
        }
    }
    //  Stop past the highest target: the lower ones are crossed on the way.
    //  The online evaluations that stop a run and the snapshots that time
    //  it are different samples of one noisy curve, so the stop comes half
    //  a point above the target, or the snapshots' rolling mean could end
    //  just below a target the online one met.
    S_ADD ("--target-accuracy");
    S_ADD ("%.10g", kd_scenario_target_at (sc, kd_scenario_target_count (sc) - 1) + S_STOP_MARGIN);
    S_ADD ("--snapshot-ms"); S_ADD (S_SNAPSHOT_MS);
    S_ADD ("--eval-interval"); S_ADD (S_EVAL_INTERVAL);
    S_ADD ("--quiet");
    S_ADD ("--summary"); S_ADD ("%s", run->summary);
    S_ADD ("--curve-file"); S_ADD ("%s", run->curve);
    for (size_t i = 0; i < kd_scenario_param_count (sc, run->model); i++) {
        S_ADD ("--%s", kd_scenario_param_name (sc, run->model, i));
        S_ADD ("%s", kd_scenario_param_value (sc, run->model, i));
    }
    //  Other kudus-local settings given to us (data dir, log level,
    //  heartbeats...) go through unchanged.
    size_t count;
    const kd_setting_t *table = kd_config_table (&count);
    for (size_t i = 0; i < count; i++) {
        const kd_setting_t *row = &table [i];
        bool owned = !strcmp (row->name, "base-port") || !(row->services & KD_SVC_LOCAL);
        for (size_t j = 0; s_owned [j] && !owned; j++)
            owned = !strcmp (row->name, s_owned [j]);
        for (size_t j = 0; j < i && !owned; j++)
            owned = !strcmp (table [j].name, row->name) && (table [j].services & KD_SVC_LOCAL);
        if (owned || !kd_config_is_set (sw->config, row->name) || n + 2 >= S_MAX_ARGS - 2)
            continue;
        S_ADD ("--%s", row->name);
        char value [S_PATH];
        s_setting_text (sw->config, row, value, sizeof value);
        S_ADD ("%s", value);
    }
    #undef S_ADD
    argv [n] = NULL;
    return n;
}

//  Run one (model, optimizer, seed) and record it.  Returns 0, or -1 when
//  it failed (nothing recorded).
static int
s_run_one (s_sweep_t *sw, size_t model, size_t opt, uint64_t seed)
{
    kd_scenario_t *sc = sw->scenario;
    s_run_t run = { .scenario = sc, .model = model, .opt = opt, .seed = seed,
                    .build = sw->build };
    run.speeds = kd_scenario_speeds (sc, seed);
    char base [S_PATH];
    snprintf (base, sizeof base, "%.1700s/%s-%s-%s-seed%llu", sw->out, kd_scenario_name (sc),
              kd_scenario_model_name (sc, model), kd_scenario_optimizer_name (sc, opt),
              (unsigned long long) seed);
    snprintf (run.summary, sizeof run.summary, "%.2000s.json", base);
    snprintf (run.curve, sizeof run.curve, "%.2000s.csv", base);
    snprintf (run.log, sizeof run.log, "%.2000s.log", base);
    unlink (run.summary);
    unlink (run.curve);
    //  The speeds, joined for --speeds (a spec never holds ';').
    char *joined = strdup ("");
    bool any = false;
    for (int r = 0; r < kd_scenario_workers (sc); r++) {
        char *next = zsys_sprintf ("%s%s%s", joined, r ? ";" : "", run.speeds [r]);
        free (joined);
        joined = strdup (next);
        zstr_free (&next);
        any |= *run.speeds [r] != 0;
    }
    static char store [S_MAX_ARGS][S_PATH];
    char *argv [S_MAX_ARGS + 2];
    int argc = s_build_args (sw, &run, argv, store);
    if (any) {
        argv [argc++] = "--speeds";
        argv [argc++] = joined;
        argv [argc] = NULL;
    }
    printf ("experiment: %s %s %s seed %llu ... ", kd_scenario_name (sc), kd_scenario_model_name (sc, model),
            kd_scenario_optimizer_name (sc, opt), (unsigned long long) seed);
    fflush (stdout);
    s_exec_local (&run, argv);
    free (joined);
    int rc = -1;
    if (s_signal)
        printf ("interrupted; not recorded\n");
    else
    if (run.exit_code != 0)
        printf ("FAILED: kudus local exited %d; not recorded (log: %s)\n", run.exit_code, run.log);
    else {
        json_object *rec = s_record (&run);
        if (rec) {
            const char *line = json_object_to_json_string_ext (rec, JSON_C_TO_STRING_PLAIN
                                                                    | JSON_C_TO_STRING_NOSLASHESCAPE);
            if (s_append_line (sw->results, line) == 0)
                rc = 0;
            else
                fprintf (stderr, "kudus experiment: cannot append to %s: %s\n", sw->results, strerror (errno));
            json_object_put (rec);
        }
        else
            printf ("FAILED: outputs missing; not recorded\n");
    }
    fflush (stdout);
    kd_scenario_speeds_free (&run.speeds);
    return rc;
}

int
kd_experiment_main (int argc, char **argv)
{
    int rc = 0;
    kd_config_t *c = kd_config_from_args (KD_SVC_LOCAL | KD_SVC_EXPERIMENT, "kudus experiment FILE",
                                          "kudus experiment", argc, argv, &rc);
    if (!c)
        return rc;
    s_sweep_t sw = { .config = c };
    s_build_id (kd_config_str (c, "build-id"), sw.build, sizeof sw.build);
    zhashx_t *recorded = NULL;
    char err [1024];
    const char *file = kd_config_positional (c, 0);
    if (!file || kd_config_positional_count (c) > 1) {
        fprintf (stderr, "kudus experiment: usage: kudus experiment FILE [--models a,b] [--seeds-only N] "
                         "[--results FILE.jsonl] [--out DIR] [--base-port P]\n"
                         "(scenario files: bench/scenarios/*.json; format: docs/experiments.md)\n");
        rc = 2;
        goto cleanup;
    }
    for (size_t i = 0; s_owned [i]; i++) {
        size_t count;
        const kd_setting_t *table = kd_config_table (&count);
        bool visible = false;
        for (size_t j = 0; j < count && !visible; j++)
            visible = !strcmp (table [j].name, s_owned [i]) && (table [j].services & KD_SVC_LOCAL);
        if (visible && kd_config_is_set (c, s_owned [i])) {
            fprintf (stderr, "kudus experiment: setting '%s' is decided by the scenario file and the runner "
                             "(do not pass it, nor set its KUDUS_ variable)\n", s_owned [i]);
            rc = 2;
            goto cleanup;
        }
    }
    sw.scenario = kd_scenario_load (file, err, sizeof err);
    if (!sw.scenario) {
        fprintf (stderr, "kudus experiment: %s\n", err);
        rc = 2;
        goto cleanup;
    }
    kd_scenario_t *sc = sw.scenario;
    //  --models: a subset, by entry name.
    bool *chosen = (bool *) calloc (kd_scenario_model_count (sc), sizeof (bool));
    assert (chosen);
    const char *models = kd_config_str (c, "models");
    for (size_t m = 0; m < kd_scenario_model_count (sc); m++)
        chosen [m] = !*models;
    for (const char *p = models; *p; ) {
        size_t len = strcspn (p, ",");
        char name [KD_SCENARIO_MAX_NAME];
        snprintf (name, sizeof name, "%.*s", (int) (len < sizeof name ? len : sizeof name - 1), p);
        int m = kd_scenario_model_find (sc, name);
        if (m < 0 && len > 0) {
            fprintf (stderr, "kudus experiment: setting 'models': scenario %s has no model '%s'\n",
                     kd_scenario_name (sc), name);
            free (chosen);
            rc = 2;
            goto cleanup;
        }
        if (m >= 0)
            chosen [m] = true;
        p += len + (p [len] == ',');
    }
    if (*kd_config_str (c, "results"))
        snprintf (sw.results, sizeof sw.results, "%s", kd_config_str (c, "results"));
    else
        snprintf (sw.results, sizeof sw.results, "docs/results/%s.jsonl", kd_scenario_name (sc));
    if (*kd_config_str (c, "out"))
        snprintf (sw.out, sizeof sw.out, "%s", kd_config_str (c, "out"));
    else
        snprintf (sw.out, sizeof sw.out, "/tmp/kudus-experiments/%s", kd_scenario_name (sc));
    char results_dir [S_PATH];
    s_dirname (sw.results, results_dir, sizeof results_dir);
    if (kd_dir_create (sw.out, 0755) || kd_dir_create (results_dir, 0755)) {
        fprintf (stderr, "kudus experiment: cannot create '%s' or '%s': %s\n", sw.out, results_dir,
                 strerror (errno));
        free (chosen);
        rc = 1;
        goto cleanup;
    }
    ssize_t len = readlink ("/proc/self/exe", sw.self_exe, sizeof sw.self_exe - 1);
    sw.self_exe [len > 0 ? len : 0] = 0;
    //  A rebuild during a long sweep replaces the binary: run the new one.
    char *deleted = strstr (sw.self_exe, " (deleted)");
    if (deleted && deleted [10] == 0)
        *deleted = 0;
    //  Each run's `kudus local` reads the CURVE switch from the environment.
    setenv ("KUDUS_CURVE", kd_config_bool (c, "curve") ? "1" : "0", 1);
    if (kd_config_is_set (c, "keys-dir"))
        setenv ("KUDUS_KEYS_DIR", kd_config_str (c, "keys-dir"), 1);
    struct sigaction sa = { .sa_handler = s_on_signal };     //  no SA_RESTART
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);

    recorded = s_recorded (sw.results, kd_scenario_name (sc));
    size_t seeds = kd_scenario_seed_count (sc);
    int64_t only = kd_config_int (c, "seeds-only");
    if (only > 0 && (size_t) only < seeds)
        seeds = (size_t) only;
    printf ("experiment: %s: %zu seed(s) x %zu optimizer(s) x %zu model(s), results in %s, run files in %s\n",
            kd_scenario_name (sc), seeds, kd_scenario_optimizer_count (sc), kd_scenario_model_count (sc),
            sw.results, sw.out);
    size_t ran = 0, skipped = 0, failed = 0;
    for (size_t s = 0; s < seeds && !s_signal; s++)
        for (size_t o = 0; o < kd_scenario_optimizer_count (sc) && !s_signal; o++)
            for (size_t m = 0; m < kd_scenario_model_count (sc) && !s_signal; m++) {
                if (!chosen [m])
                    continue;
                uint64_t seed = kd_scenario_seed (sc, s);
                char *key = s_key (kd_scenario_sweep (sc), kd_scenario_model_name (sc, m),
                                   kd_scenario_optimizer_name (sc, o), seed);
                const char *was = (const char *) zhashx_lookup (recorded, key);
                bool done = was != NULL;
                zstr_free (&key);
                if (done) {
                    char *now = s_scenario_signature (sc, m, o);
                    printf ("experiment: %s %s %s seed %llu: recorded, skipped\n", kd_scenario_name (sc),
                            kd_scenario_model_name (sc, m), kd_scenario_optimizer_name (sc, o),
                            (unsigned long long) seed);
                    if (strcmp (was, now))
                        printf ("experiment: warning: that record has %s, the scenario now says %s; "
                                "delete its line from %s to run it again\n", was, now, sw.results);
                    zstr_free (&now);
                    skipped++;
                    continue;
                }
                if (s_run_one (&sw, m, o, seed) == 0)
                    ran++;
                else
                if (!s_signal)
                    failed++;
            }
    free (chosen);
    printf ("experiment: %s: %zu run(s) recorded, %zu skipped (already recorded), %zu failed%s\n",
            kd_scenario_name (sc), ran, skipped, failed, s_signal ? ", interrupted" : "");
    rc = s_signal ? 128 + s_signal : failed ? 1 : 0;
cleanup:
    zhashx_destroy (&recorded);
    kd_scenario_destroy (&sw.scenario);
    kd_config_destroy (&c);
    return rc;
}
