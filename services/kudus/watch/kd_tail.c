/*  kd_tail: `kudus tail ENDPOINT` follows the monitor's PUB stream.

    By default it keeps a table that refreshes on every "stats" message: a
    global line, then one row per worker.  With --json it prints every
    message as one JSON object per line, with its topic as "topic", for jq.
*/
#include "kd_cli.h"
#include "kd_stream.h"
#include <unistd.h>

#define S_MAX_ROWS 1024     //  worker rows kept
#define S_MAX_SHARD_ROWS 64 //  shard rows kept

typedef struct {
    bool used;              //  row seen
    char line [256];        //  rendered row
} s_row_t;

//  Render the table.
static void
s_draw (kd_stream_t *stats, s_row_t *rows, s_row_t *shard_rows, const char *groups, bool tty)
{
    if (tty)
        fputs ("\033[H\033[2J", stdout);
    double acc = kd_stream_number (stats, KD_S_TEST_ACCURACY, -1);
    double auc = kd_stream_number (stats, KD_S_TEST_AUC, -1);
    char accs [48] = "-";
    if (acc >= 0 && auc >= 0)
        snprintf (accs, sizeof accs, "%.4f auc %.4f (v%.0f)", acc, auc,
                  kd_stream_number (stats, KD_S_TEST_VERSION, 0));
    else
    if (acc >= 0)
        snprintf (accs, sizeof accs, "%.4f (v%.0f)", acc, kd_stream_number (stats, KD_S_TEST_VERSION, 0));
    //  auto shows what it runs now: "auto (alsp)".
    const char *consistency = kd_stream_str (stats, KD_S_CONSISTENCY);
    const char *mode = kd_stream_str (stats, KD_S_MODE);
    char model [48];
    if (*mode && strcmp (mode, consistency))
        snprintf (model, sizeof model, "%.15s (%.15s)", consistency, mode);
    else
        snprintf (model, sizeof model, "%.15s", consistency);
    printf ("kudus  %.15s/%s  t=%.1fs  version %.0f  epoch %.2f  samples/s %.0f  "
            "loss %.4f  test acc %s  workers %.0f\n",
            kd_stream_str (stats, KD_S_MODEL), model,
            kd_stream_number (stats, KD_S_ELAPSED_S, 0), kd_stream_number (stats, KD_S_VERSION, 0),
            kd_stream_number (stats, KD_S_EPOCH, 0), kd_stream_number (stats, KD_S_SAMPLES_PER_S, 0),
            kd_stream_number (stats, KD_S_TRAIN_LOSS, 0), accs, kd_stream_number (stats, KD_S_WORKERS, 0));
    printf ("       wait %.1f%%  staleness p50 %.0f p99 %.0f  dropped %.0f  regroups %.0f%s%s\n",
            100 * kd_stream_number (stats, KD_S_WAIT_FRACTION, 0),
            kd_stream_number (stats, KD_S_STALENESS_P50, 0), kd_stream_number (stats, KD_S_STALENESS_P99, 0),
            kd_stream_number (stats, KD_S_DROPPED, 0), kd_stream_number (stats, KD_S_REGROUPS, 0),
            *groups ? "  groups " : "", groups);
    printf ("%5s %8s %10s %8s %9s %8s %8s %8s %6s %6s %7s %6s %7s\n", "rank", "clock", "samples/s",
            "loss", "compute", "push", "wait", "pull", "stale", "drop", "refused", "group", "age_ms");
    for (size_t r = 0; r < S_MAX_ROWS; r++)
        if (rows [r].used)
            fputs (rows [r].line, stdout);
    bool header = false;
    for (size_t r = 0; r < S_MAX_SHARD_ROWS; r++)
        if (shard_rows [r].used) {
            if (!header)
                printf ("%5s %8s %10s %10s %8s %9s %9s %6s %7s %7s %9s\n", "shard", "version", "pushes",
                        "pulls", "commits", "MB in", "MB out", "staged", "refused", "limited", "ckpt age");
            header = true;
            fputs (shard_rows [r].line, stdout);
        }
    if (!tty)
        puts ("");
    fflush (stdout);
}

int
kd_tail_main (int argc, char **argv)
{
    int rc = 0;
    kd_config_t *config = kd_config_from_args (KD_SVC_TAIL, "kudus tail [ENDPOINT]", "kudus tail",
                                               argc, argv, &rc);
    if (!config)
        return rc;
    const char *endpoint = kd_config_positional_count (config) > 0
                         ? kd_config_positional (config, 0) : "tcp://127.0.0.1:7002";
    bool json = kd_config_bool (config, "json");
    int64_t count = kd_config_int (config, "count");
    double timeout = kd_config_double (config, "timeout");
    char err [512];
    //  A follower of the stream is an observer: its key can do nothing else.
    kd_curve_set_identity ("observer");
    kd_curve_t *curve = kd_curve_new (config, KD_CURVE_CLIENT, err, sizeof err);
    if (!curve) {
        fprintf (stderr, "kudus tail: %s\n", err);
        kd_config_destroy (&config);
        return 1;
    }
    zsock_t *sub = zsock_new (ZMQ_SUB);
    zsock_set_maxmsgsize (sub, 16 << 20);
    zsock_set_subscribe (sub, "");
    kd_curve_client (curve, sub);
    if (zsock_connect (sub, "%s", endpoint) != 0) {
        fprintf (stderr, "kudus tail: cannot connect to '%s'\n", endpoint);
        zsock_destroy (&sub);
        kd_curve_destroy (&curve);
        kd_config_destroy (&config);
        return 2;
    }
    zsock_set_rcvtimeo (sub, timeout > 0 ? (int) (timeout * 1000) : 1000);
    bool tty = isatty (STDOUT_FILENO);
    s_row_t *rows = (s_row_t *) calloc (S_MAX_ROWS, sizeof (s_row_t));
    s_row_t shard_rows [S_MAX_SHARD_ROWS] = { { 0 } };
    char groups [256] = "";
    char model_line [1024] = "";     //  the last "model" event
    int64_t seen = 0;
    rc = 0;
    uint64_t last = kd_now_ms ();
    while (!zsys_interrupted && (count == 0 || seen < count)) {
        zmsg_t *msg = zmsg_recv (sub);
        if (!msg) {
            if (timeout > 0 && kd_now_ms () - last >= (uint64_t) (timeout * 1000)) {
                fprintf (stderr, "kudus tail: no message from %s for %.1f s\n", endpoint, timeout);
                rc = 1;
                break;
            }
            continue;
        }
        last = kd_now_ms ();
        //  One decoder for every consumer of the stream: kd_stream.
        kd_stream_t *m = NULL;
        zframe_t *topic = zmsg_first (msg), *body = zmsg_next (msg);
        if (zmsg_size (msg) != 2 || !topic || !body
        ||  kd_stream_decode ((const char *) zframe_data (topic), zframe_size (topic),
                              zframe_data (body), zframe_size (body), &m, err, sizeof err) != 0) {
            fprintf (stderr, "kudus tail: malformed message: %s\n",
                     zmsg_size (msg) != 2 ? "not a topic and a body" : err);
            goto next;
        }
        kd_stream_topic_t t = kd_stream_topic (m);
        if (json) {
            kd_stream_print_json (m, stdout);
            fflush (stdout);
        }
        else
        if (t == KD_ST_WORKER) {
            double rank = kd_stream_number (m, KD_S_RANK, -1);
            if (rank >= 0 && rank < S_MAX_ROWS) {
                s_row_t *row = &rows [(size_t) rank];
                row->used = true;
                snprintf (row->line, sizeof row->line,
                          "%5.0f %8.0f %10.0f %8.4f %9.2f %8.2f %8.2f %8.2f %6.0f %6.0f %7.0f %6.0f %7.0f\n",
                          rank, kd_stream_number (m, KD_S_CLOCK, 0), kd_stream_number (m, KD_S_SAMPLES_PER_S, 0),
                          kd_stream_number (m, KD_S_LOSS, 0), kd_stream_number (m, KD_S_COMPUTE_MS, 0),
                          kd_stream_number (m, KD_S_PUSH_MS, 0), kd_stream_number (m, KD_S_WAIT_MS, 0),
                          kd_stream_number (m, KD_S_PULL_MS, 0), kd_stream_number (m, KD_S_STALENESS, 0),
                          kd_stream_number (m, KD_S_DROPPED, 0), kd_stream_number (m, KD_S_REFUSED, 0),
                          kd_stream_number (m, KD_S_GROUP, 0),
                          kd_stream_number (m, KD_S_AGE_MS, 0));
            }
        }
        else
        if (t == KD_ST_SHARD) {
            double rank = kd_stream_number (m, KD_S_RANK, -1);
            if (rank >= 0 && rank < S_MAX_SHARD_ROWS) {
                s_row_t *row = &shard_rows [(size_t) rank];
                char age [32] = "-";
                if (kd_stream_has (m, KD_S_CHECKPOINT_AGE_S))
                    snprintf (age, sizeof age, "%.1fs", kd_stream_number (m, KD_S_CHECKPOINT_AGE_S, 0));
                row->used = true;
                snprintf (row->line, sizeof row->line, "%5.0f %8.0f %10.0f %10.0f %8.0f %9.1f %9.1f %6.0f %7.0f %7.0f %9s\n",
                          rank, kd_stream_number (m, KD_S_VERSION, 0), kd_stream_number (m, KD_S_PUSHES, 0),
                          kd_stream_number (m, KD_S_PULLS, 0), kd_stream_number (m, KD_S_COMMITS, 0),
                          kd_stream_number (m, KD_S_BYTES_IN, 0) / 1e6,
                          kd_stream_number (m, KD_S_BYTES_OUT, 0) / 1e6,
                          kd_stream_number (m, KD_S_STAGED, 0), kd_stream_number (m, KD_S_REFUSED, 0),
                          kd_stream_number (m, KD_S_LIMITED, 0), age);
            }
        }
        else
        if (t == KD_ST_GROUPS) {
            size_t n = 0, len = 0;
            const uint64_t *g = kd_stream_uints (m, KD_S_GROUPS, &n);
            groups [0] = 0;
            for (size_t i = 0; i < n && len + 16 < sizeof groups; i++)
                if (g [i] != UINT32_MAX)
                    len += (size_t) snprintf (groups + len, sizeof groups - len, "%s%zu:%llu",
                                              len ? " " : "", i, (unsigned long long) g [i]);
        }
        else
        if (t == KD_ST_EVENT) {
            if (!tty)
                printf ("event %s: %s\n", kd_stream_str (m, KD_S_KIND), kd_stream_str (m, KD_S_DETAIL));
            //  The model by name stays on the table's last line.
            if (!strcmp (kd_stream_str (m, KD_S_KIND), "model"))
                snprintf (model_line, sizeof model_line, "%s", kd_stream_str (m, KD_S_DETAIL));
        }
        else
        if (t == KD_ST_STATS) {
            s_draw (m, rows, shard_rows, groups, tty);
            if (tty && *model_line)
                printf ("model  %s\n", model_line);
        }
        kd_stream_destroy (&m);
        seen++;
    next:
        zmsg_destroy (&msg);
    }
    free (rows);
    zsock_destroy (&sub);
    kd_curve_destroy (&curve);
    kd_config_destroy (&config);
    return rc;
}
