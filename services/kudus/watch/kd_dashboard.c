/*  kd_dashboard: `kudus dashboard` serves a live page of a training run.

    One thread follows the monitor's PUB stream, decodes each message with
    kd_stream and publishes it, as JSON, to a kd_sse_hub.  libmicrohttpd
    serves the page and its vendored chart library (embedded in the
    binary: the page works offline) and, on GET /events, a server-sent
    event stream: every connection replays the run so far, then follows.

        kudus dashboard --monitor tcp://127.0.0.1:7002 --listen 127.0.0.1:8080
*/
#include "kd_cli.h"
#include "kd_dashboard_assets.h"
#include "kd_sse_hub.h"
#include "kd_stream.h"
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

#define S_MAX_RANKS      4096       //  worker rows kept, one slot per rank
#define S_MAX_SHARDS     64         //  shard rows kept, one slot each after those
#define S_KEEPALIVE_MS   15000      //  a comment line when nothing happens
#define S_MAX_CLIENTS    64         //  concurrent HTTP connections

typedef struct {
    kd_sse_hub_t *hub;
    const char *monitor;            //  the stream followed, for the hello
} self_t;

//  One /events connection: its cursor in the hub and the rest of the
//  event being written.
typedef struct {
    self_t *dash;
    uint64_t cursor;
    char *pending;
    size_t pending_len;
    size_t pending_off;
    bool hello_sent;
} s_reader_t;

//  libmicrohttpd asks for more of the event stream.  A connection has a
//  thread of its own, so waiting here blocks no one else.
static ssize_t
s_read_events (void *cls, uint64_t pos, char *buf, size_t max)
{
    (void) pos;
    s_reader_t *r = (s_reader_t *) cls;
    if (r->pending_off == r->pending_len) {
        free (r->pending);
        r->pending = NULL;
        r->pending_len = r->pending_off = 0;
        if (!r->hello_sent) {
            r->hello_sent = true;
            r->pending = zsys_sprintf ("retry: 2000\nevent: hello\ndata: {\"monitor\":\"%s\","
                                       "\"version\":\"%s\"}\n\n", r->dash->monitor,
                                       KUDUS_VERSION_STRING);
            r->pending_len = strlen (r->pending);
        }
        else {
            int rc = kd_sse_hub_read (r->dash->hub, &r->cursor, &r->pending, &r->pending_len,
                                      S_KEEPALIVE_MS);
            if (rc < 0)
                return MHD_CONTENT_READER_END_OF_STREAM;
            if (rc == 0) {
                r->pending = strdup (": keepalive\n\n");
                r->pending_len = strlen (r->pending);
            }
        }
    }
    size_t n = r->pending_len - r->pending_off;
    if (n > max)
        n = max;
    memcpy (buf, r->pending + r->pending_off, n);
    r->pending_off += n;
    return (ssize_t) n;
}

static void
s_free_reader (void *cls)
{
    s_reader_t *r = (s_reader_t *) cls;
    free (r->pending);
    free (r);
}

static enum MHD_Result
s_reply_text (struct MHD_Connection *conn, unsigned int status, const char *text)
{
    struct MHD_Response *response = MHD_create_response_from_buffer (strlen (text), (void *) text,
                                                                     MHD_RESPMEM_PERSISTENT);
    if (!response)
        return MHD_NO;
    MHD_add_response_header (response, "Content-Type", "text/plain; charset=utf-8");
    enum MHD_Result rc = MHD_queue_response (conn, status, response);
    MHD_destroy_response (response);
    return rc;
}

//  GET / and the assets, GET /events; anything else is a 404 or a 405.
static enum MHD_Result
s_handle (void *cls, struct MHD_Connection *conn, const char *url, const char *method,
          const char *version, const char *upload_data, size_t *upload_size, void **req_cls)
{
    (void) version, (void) upload_data, (void) upload_size, (void) req_cls;
    self_t *self = (self_t *) cls;
    if (strcmp (method, "GET") != 0 && strcmp (method, "HEAD") != 0)
        return s_reply_text (conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET\n");
    struct MHD_Response *response = NULL;
    if (!strcmp (url, "/events")) {
        s_reader_t *r = (s_reader_t *) calloc (1, sizeof *r);
        assert (r);
        r->dash = self;
        response = MHD_create_response_from_callback (MHD_SIZE_UNKNOWN, 4096, s_read_events, r,
                                                      s_free_reader);
        if (!response) {
            s_free_reader (r);
            return MHD_NO;
        }
        MHD_add_response_header (response, "Content-Type", "text/event-stream");
        MHD_add_response_header (response, "Cache-Control", "no-cache");
    }
    else {
        const kd_asset_t *asset = NULL;
        const char *path = !strcmp (url, "/") ? "/index.html" : url;
        for (const kd_asset_t *a = kd_dashboard_assets; a->url && !asset; a++)
            if (!strcmp (a->url, path))
                asset = a;
        if (!asset)
            return s_reply_text (conn, MHD_HTTP_NOT_FOUND, "not found: the dashboard is at /\n");
        response = MHD_create_response_from_buffer (asset->size, (void *) asset->data,
                                                    MHD_RESPMEM_PERSISTENT);
        if (!response)
            return MHD_NO;
        MHD_add_response_header (response, "Content-Type", asset->type);
    }
    enum MHD_Result rc = MHD_queue_response (conn, MHD_HTTP_OK, response);
    MHD_destroy_response (response);
    return rc;
}

//  One stream message as an SSE event into the hub: worker rows by rank
//  replace each other, everything else is kept for replay.
static void
s_publish (self_t *self, kd_stream_t *m)
{
    char *json = NULL;
    size_t len = 0;
    FILE *out = open_memstream (&json, &len);
    assert (out);
    fputs ("data: ", out);
    kd_stream_print_json (m, out);
    fputs ("\n", out);                      //  print_json ends the line; SSE ends the event
    fclose (out);
    int slot = -1;
    double rank = kd_stream_number (m, KD_S_RANK, -1);
    if (kd_stream_topic (m) == KD_ST_WORKER && rank >= 0 && rank < S_MAX_RANKS)
        slot = (int) rank;
    if (kd_stream_topic (m) == KD_ST_SHARD && rank >= 0 && rank < S_MAX_SHARDS)
        slot = S_MAX_RANKS + (int) rank;
    kd_sse_hub_publish (self->hub, json, len, slot);
    free (json);
}

int
kd_dashboard_main (int argc, char **argv)
{
    int rc = 0;
    kd_config_t *config = kd_config_from_args (KD_SVC_DASHBOARD, "kudus dashboard", "kudus dashboard",
                                               argc, argv, &rc);
    if (!config)
        return rc;
    if (kd_config_positional_count (config) > 0) {
        fprintf (stderr, "kudus dashboard: unexpected argument '%s' (the stream is --monitor)\n",
                 kd_config_positional (config, 0));
        kd_config_destroy (&config);
        return 2;
    }
    const char *endpoint = kd_config_str (config, "monitor");
    const char *listen = kd_config_str (config, "listen");
    char err [512];
    struct sockaddr_in addr;
    if (kd_parse_listen (listen, &addr, err, sizeof err)) {
        fprintf (stderr, "kudus dashboard: setting 'listen': %s\n", err);
        kd_config_destroy (&config);
        return 2;
    }
    if (ntohl (addr.sin_addr.s_addr) >> 24 != 127)
        kd_warn ("the dashboard at %s is served to any host that reaches it, without authentication",
                 listen);
    //  A follower of the stream is an observer: its key can do nothing else.
    kd_curve_set_identity ("observer");
    kd_curve_t *curve = kd_curve_new (config, KD_CURVE_CLIENT, err, sizeof err);
    if (!curve) {
        fprintf (stderr, "kudus dashboard: %s\n", err);
        kd_config_destroy (&config);
        return 1;
    }
    zsock_t *sub = zsock_new (ZMQ_SUB);
    zsock_set_maxmsgsize (sub, 16 << 20);
    zsock_set_subscribe (sub, "");
    zsock_set_rcvtimeo (sub, 500);
    kd_curve_client (curve, sub);
    if (zsock_connect (sub, "%s", endpoint) != 0) {
        fprintf (stderr, "kudus dashboard: setting 'monitor': cannot connect to '%s'\n", endpoint);
        zsock_destroy (&sub);
        kd_curve_destroy (&curve);
        kd_config_destroy (&config);
        return 2;
    }
    self_t self = {
        .hub = kd_sse_hub_new ((size_t) kd_config_int (config, "history"), S_MAX_RANKS + S_MAX_SHARDS),
        .monitor = endpoint,
    };
    struct MHD_Daemon *daemon = MHD_start_daemon (
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
        ntohs (addr.sin_port), NULL, NULL, s_handle, &self,
        MHD_OPTION_SOCK_ADDR, (struct sockaddr *) &addr,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned int) S_MAX_CLIENTS,
        MHD_OPTION_END);
    if (!daemon) {
        fprintf (stderr, "kudus dashboard: setting 'listen': cannot listen on '%s' (%s)\n",
                 listen, strerror (errno));
        kd_sse_hub_destroy (&self.hub);
        zsock_destroy (&sub);
        kd_curve_destroy (&curve);
        kd_config_destroy (&config);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info (daemon, MHD_DAEMON_INFO_BIND_PORT);
    char host [INET_ADDRSTRLEN] = "127.0.0.1";
    if (addr.sin_addr.s_addr != htonl (INADDR_ANY))
        inet_ntop (AF_INET, &addr.sin_addr, host, sizeof host);
    //  Tests read the port from this line when they ask for port 0.
    printf ("kudus dashboard: http://%s:%d/ following %s\n", host,
            info ? (int) info->port : (int) ntohs (addr.sin_port), endpoint);
    fflush (stdout);

    uint64_t malformed = 0;
    while (!zsys_interrupted) {
        kd_stream_t *m = NULL;
        int got = kd_stream_recv (sub, &m, err, sizeof err);
        if (got == -2) {
            //  A bad message is logged (not every one) and skipped.
            if (malformed++ % 100 == 0)
                fprintf (stderr, "kudus dashboard: malformed stream message: %s (%llu so far)\n",
                         err, (unsigned long long) malformed);
            continue;
        }
        if (got != 0)
            continue;
        s_publish (&self, m);
        kd_stream_destroy (&m);
    }
    //  Readers end their streams, then the server joins their threads.
    kd_sse_hub_close (self.hub);
    MHD_stop_daemon (daemon);
    kd_sse_hub_destroy (&self.hub);
    zsock_destroy (&sub);
    kd_curve_destroy (&curve);
    kd_config_destroy (&config);
    return 0;
}
