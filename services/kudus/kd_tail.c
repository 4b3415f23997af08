/*  kd_tail: `kudus tail ENDPOINT` follows the monitor's PUB stream.

    By default it keeps a table that refreshes on every "stats" message: a
    global line, then one row per worker.  With --json it prints every
    message as one JSON object per line, with its topic as "topic", for jq.
*/
#include "kd_cli.h"
#include <unistd.h>

#define S_MAX_ROWS 1024     //  worker rows kept

typedef struct {
    bool used;              //  row seen
    char line [256];        //  rendered row
} s_row_t;

//  Render the table.
static void
s_draw (const msgpack_object *stats, s_row_t *rows, const char *groups, bool tty)
{
    char consistency [16], model [16];
    if (tty)
        fputs ("\033[H\033[2J", stdout);
    double acc = kd_mp_number (stats, "test_accuracy", -1);
    char accs [32] = "-";
    if (acc >= 0)
        snprintf (accs, sizeof accs, "%.4f (v%.0f)", acc, kd_mp_number (stats, "test_version", 0));
    printf ("kudus  %s/%s  t=%.1fs  version %.0f  epoch %.2f  samples/s %.0f  "
            "loss %.4f  test acc %s  workers %.0f\n",
            kd_mp_string (stats, "model", model, sizeof model),
            kd_mp_string (stats, "consistency", consistency, sizeof consistency),
            kd_mp_number (stats, "elapsed_s", 0), kd_mp_number (stats, "version", 0),
            kd_mp_number (stats, "epoch", 0), kd_mp_number (stats, "samples_per_s", 0),
            kd_mp_number (stats, "train_loss", 0), accs, kd_mp_number (stats, "workers", 0));
    printf ("       wait %.1f%%  staleness p50 %.0f p99 %.0f  dropped %.0f  regroups %.0f%s%s\n",
            100 * kd_mp_number (stats, "wait_fraction", 0), kd_mp_number (stats, "staleness_p50", 0),
            kd_mp_number (stats, "staleness_p99", 0), kd_mp_number (stats, "dropped", 0),
            kd_mp_number (stats, "regroups", 0), *groups ? "  groups " : "", groups);
    printf ("%5s %8s %10s %8s %9s %8s %8s %8s %6s %6s %6s %7s\n", "rank", "clock", "samples/s",
            "loss", "compute", "push", "wait", "pull", "stale", "drop", "group", "age_ms");
    for (size_t r = 0; r < S_MAX_ROWS; r++)
        if (rows [r].used)
            fputs (rows [r].line, stdout);
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
    char groups [256] = "";
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
        char *topic = zmsg_popstr (msg);
        zframe_t *body = zmsg_pop (msg);
        if (!topic || !body) {
            fprintf (stderr, "kudus tail: message without topic and body\n");
            goto next;
        }
        if (json) {
            char *text = kd_json_from_msgpack (zframe_data (body), zframe_size (body), topic);
            if (text) {
                puts (text);
                fflush (stdout);
                free (text);
            }
            else
                fprintf (stderr, "kudus tail: malformed %s message\n", topic);
        }
        else
        if (kd_msgpack_validate (zframe_data (body), zframe_size (body), 8) == 0) {
            msgpack_unpacked up;
            msgpack_unpacked_init (&up);
            if (msgpack_unpack_next (&up, (const char *) zframe_data (body), zframe_size (body), NULL)
                == MSGPACK_UNPACK_SUCCESS && up.data.type == MSGPACK_OBJECT_MAP) {
                const msgpack_object *o = &up.data;
                if (!strcmp (topic, "worker")) {
                    double rank = kd_mp_number (o, "rank", -1);
                    if (rank >= 0 && rank < S_MAX_ROWS) {
                        s_row_t *row = &rows [(size_t) rank];
                        row->used = true;
                        snprintf (row->line, sizeof row->line,
                                  "%5.0f %8.0f %10.0f %8.4f %9.2f %8.2f %8.2f %8.2f %6.0f %6.0f %6.0f %7.0f\n",
                                  rank, kd_mp_number (o, "clock", 0), kd_mp_number (o, "samples_per_s", 0),
                                  kd_mp_number (o, "loss", 0), kd_mp_number (o, "compute_ms", 0),
                                  kd_mp_number (o, "push_ms", 0), kd_mp_number (o, "wait_ms", 0),
                                  kd_mp_number (o, "pull_ms", 0), kd_mp_number (o, "staleness", 0),
                                  kd_mp_number (o, "dropped", 0), kd_mp_number (o, "group", 0),
                                  kd_mp_number (o, "age_ms", 0));
                    }
                }
                else
                if (!strcmp (topic, "groups")) {
                    const msgpack_object *g = kd_mp_find (o, "groups");
                    size_t len = 0;
                    groups [0] = 0;
                    for (uint32_t i = 0; g && g->type == MSGPACK_OBJECT_ARRAY && i < g->via.array.size; i++)
                        if (g->via.array.ptr [i].type == MSGPACK_OBJECT_POSITIVE_INTEGER
                        &&  g->via.array.ptr [i].via.u64 != UINT32_MAX && len + 16 < sizeof groups)
                            len += snprintf (groups + len, sizeof groups - len, "%s%u:%llu",
                                             len ? " " : "", i,
                                             (unsigned long long) g->via.array.ptr [i].via.u64);
                }
                else
                if (!strcmp (topic, "event")) {
                    char kind [32], detail [128];
                    if (!tty)
                        printf ("event %s: %s\n", kd_mp_string (o, "kind", kind, sizeof kind),
                                kd_mp_string (o, "detail", detail, sizeof detail));
                }
                else
                if (!strcmp (topic, "stats"))
                    s_draw (o, rows, groups, tty);
            }
            msgpack_unpacked_destroy (&up);
        }
        seen++;
    next:
        zstr_free (&topic);
        zframe_destroy (&body);
        zmsg_destroy (&msg);
    }
    free (rows);
    zsock_destroy (&sub);
    kd_curve_destroy (&curve);
    kd_config_destroy (&config);
    return rc;
}
