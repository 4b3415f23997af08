/*  kd_util: clocks, endpoints and socket hardening shared by every service.
*/
#include "kd_util.h"
#include "kd_log.h"
#include <cblas.h>
#include <arpa/inet.h>
#include <assert.h>
#include <stdlib.h>
#include <math.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

//  Monotonic milliseconds.
uint64_t
kd_now_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

//  Monotonic time in fractional milliseconds.
double
kd_now_msf (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec * 1e3 + (double) ts.tv_nsec / 1e6;
}

//  Wall-clock milliseconds since the epoch.
uint64_t
kd_wall_ms (void)
{
    struct timespec ts;
    clock_gettime (CLOCK_REALTIME, &ts);
    return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

//  This host's address as other hosts see it: what the hostname resolves to,
//  which in a container is its address on the project network.
static void
s_host_address (char *out, size_t out_size)
{
    char host [256];
    snprintf (out, out_size, "127.0.0.1");
    if (gethostname (host, sizeof host) != 0)
        return;
    host [sizeof host - 1] = 0;
    struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = NULL;
    if (getaddrinfo (host, NULL, &hints, &res) != 0 || !res)
        return;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        struct sockaddr_in *sin = (struct sockaddr_in *) ai->ai_addr;
        char buf [INET_ADDRSTRLEN];
        if (inet_ntop (AF_INET, &sin->sin_addr, buf, sizeof buf)
        &&  strncmp (buf, "127.", 4) != 0) {
            snprintf (out, out_size, "%s", buf);
            break;
        }
    }
    freeaddrinfo (res);
}

//  Endpoint to advertise for a bound socket.
int
kd_advertise_endpoint (zsock_t *sock, const char *advertise,
                       char *out, size_t out_size)
{
    if (advertise && *advertise) {
        snprintf (out, out_size, "%s", advertise);
        return 0;
    }
    const char *last = zsock_endpoint (sock);
    if (!last)
        return -1;
    //  zsock_endpoint gives the resolved endpoint, e.g. tcp://0.0.0.0:7100.
    const char *hostp = strstr (last, "://");
    const char *colon = strrchr (last, ':');
    if (!hostp || !colon || colon < hostp + 3)
        return -1;
    hostp += 3;
    size_t hlen = (size_t) (colon - hostp);
    if ((hlen == 1 && *hostp == '*') || (hlen == 7 && strncmp (hostp, "0.0.0.0", 7) == 0)) {
        char addr [64];
        s_host_address (addr, sizeof addr);
        snprintf (out, out_size, "tcp://%s%s", addr, colon);
    }
    else
        snprintf (out, out_size, "%s", last);
    return 0;
}

//  Settings for every socket that faces the network.
void
kd_socket_harden (zsock_t *sock, int64_t max_msg_bytes)
{
    zsock_set_maxmsgsize (sock, (int) (max_msg_bytes > INT32_MAX ? INT32_MAX : max_msg_bytes));
    zsock_set_linger (sock, 0);
    //  High-water marks large enough for 1024 peers' control traffic.
    zsock_set_sndhwm (sock, 100000);
    zsock_set_rcvhwm (sock, 100000);
    //  ZMTP heartbeats and TCP keepalive find a connection whose peer
    //  vanished without a FIN (a cut network, a host that moved), so the
    //  socket reconnects in seconds instead of when TCP gives up.
    zsock_set_heartbeat_ivl (sock, 2000);
    zsock_set_heartbeat_timeout (sock, 6000);
    zsock_set_tcp_keepalive (sock, 1);
    zsock_set_tcp_keepalive_idle (sock, 10);
    zsock_set_tcp_keepalive_intvl (sock, 5);
}

uint64_t
kd_splitmix64 (uint64_t *state)
{
    *state += 0x9E3779B97F4A7C15ULL;
    return kd_mix64 (*state);
}

char *
kd_read_file (const char *path)
{
    FILE *f = fopen (path, "r");
    if (!f)
        return NULL;
    char *text = NULL;
    size_t len = 0;
    if (getdelim (&text, &len, 0, f) < 0) {
        free (text);
        text = NULL;
    }
    fclose (f);
    return text;
}

//  Quantile of a histogram of small integers (staleness).
double
kd_hist_quantile (const uint64_t *bins, size_t n_bins, double q)
{
    uint64_t total = 0, seen = 0;
    for (size_t i = 0; i < n_bins; i++)
        total += bins [i];
    if (total == 0)
        return 0;
    uint64_t rank = (uint64_t) ceil (q * (double) total);
    if (rank == 0)
        rank = 1;
    for (size_t i = 0; i < n_bins; i++) {
        seen += bins [i];
        if (seen >= rank)
            return (double) i;
    }
    return (double) (n_bins - 1);
}

//  Sort (score, label) pairs by score, for kd_auc.
typedef struct {
    double score;
    uint8_t label;
} s_pair_t;

static int
s_compare_pair (const void *a, const void *b)
{
    double x = ((const s_pair_t *) a)->score, y = ((const s_pair_t *) b)->score;
    return x < y ? -1 : x > y;
}

size_t
kd_lower_bound (const uint64_t *keys, size_t n, uint64_t key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (keys [mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

double
kd_auc (const double *scores, const uint8_t *labels, size_t n)
{
    //  A NaN score has no rank (and never equals itself, which would stall
    //  the tie loop below): no AUC at all.
    for (size_t i = 0; i < n; i++)
        if (!isfinite (scores [i]))
            return NAN;
    s_pair_t *pairs = (s_pair_t *) malloc (n * sizeof (s_pair_t));
    if (!pairs)
        return NAN;
    for (size_t i = 0; i < n; i++)
        pairs [i] = (s_pair_t) { scores [i], labels [i] };
    qsort (pairs, n, sizeof (s_pair_t), s_compare_pair);
    //  Mann-Whitney: the sum of the positives' ranks, ties at their mean.
    double rank_sum = 0, positives = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && pairs [j].score == pairs [i].score)
            j++;
        double mean_rank = (double) (i + j + 1) / 2;
        for (size_t k = i; k < j; k++)
            if (pairs [k].label) {
                rank_sum += mean_rank;
                positives++;
            }
        i = j;
    }
    free (pairs);
    double negatives = (double) n - positives;
    if (positives == 0 || negatives == 0)
        return NAN;
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

//  Shift the port of an endpoint.
int
kd_endpoint_shift (const char *endpoint, int delta, char *out, size_t out_size)
{
    const char *colon = strrchr (endpoint, ':');
    if (!colon || colon [1] < '0' || colon [1] > '9')
        return -1;
    long port = strtol (colon + 1, NULL, 10) + delta;
    if (port <= 0 || port > 65535)
        return -1;
    snprintf (out, out_size, "%.*s:%ld", (int) (colon - endpoint), endpoint, port);
    return 0;
}

int
kd_parse_listen (const char *text, struct sockaddr_in *addr, char *err, size_t err_size)
{
    assert (addr && err);
    char host [128] = "";
    const char *colon = text ? strrchr (text, ':') : NULL;
    const char *port_text = colon ? colon + 1 : text;
    if (!text || (colon && (size_t) (colon - text) >= sizeof host)) {
        snprintf (err, err_size, "'%s': expected HOST:PORT, :PORT or PORT", text ? text : "");
        return -1;
    }
    if (colon) {
        memcpy (host, text, (size_t) (colon - text));
        host [colon - text] = 0;
    }
    char *end = NULL;
    long port = *port_text ? strtol (port_text, &end, 10) : -1;
    if (port < 0 || port > 65535 || (end && *end)) {
        snprintf (err, err_size, "'%s': expected HOST:PORT, :PORT or PORT", text);
        return -1;
    }
    memset (addr, 0, sizeof *addr);
    addr->sin_family = AF_INET;
    addr->sin_port = htons ((uint16_t) port);
    addr->sin_addr.s_addr = htonl (INADDR_ANY);
    if (*host && strcmp (host, "*") && inet_pton (AF_INET, host, &addr->sin_addr) != 1) {
        snprintf (err, err_size, "'%s': the host must be an IPv4 address or *", text);
        return -1;
    }
    return 0;
}

bool
kd_endpoint_is_local (const char *endpoint)
{
    if (!endpoint)
        return false;
    if (!strncmp (endpoint, "ipc://", 6) || !strncmp (endpoint, "inproc://", 9))
        return true;
    if (strncmp (endpoint, "tcp://", 6))
        return false;
    const char *host = endpoint + 6;
    //  An interface name or "*" before the port: only loopback names count.
    if (!strncmp (host, "127.", 4) || !strncmp (host, "localhost:", 10)
    ||  !strncmp (host, "[::1]:", 6) || !strncmp (host, "lo:", 3))
        return true;
    return false;
}

void
kd_warn_open_bind (const char *endpoint, bool curve)
{
    if (!curve && !kd_endpoint_is_local (endpoint))
        kd_warn ("bound %s without CURVE: any host that reaches it can act as any peer "
                 "(trusted network only; see README, Security)", endpoint);
}

double
kd_sumsq (const float *v, size_t n)
{
    //  sdot sums in float: a NaN or an Inf makes it non-finite, and so can
    //  a large finite value (over about 1.8e19), which the exact pass in
    //  double tells apart (float squares cannot overflow a double sum).
    double fast = 0;
    for (size_t at = 0; at < n; at += (size_t) INT32_MAX) {
        size_t m = n - at < (size_t) INT32_MAX ? n - at : (size_t) INT32_MAX;
        fast += (double) cblas_sdot ((int) m, v + at, 1, v + at, 1);
    }
    if (isfinite (fast))
        return fast;
    double exact = 0;
    for (size_t i = 0; i < n; i++)
        exact += (double) v [i] * (double) v [i];
    return exact;
}

const char *
kd_temp_base (void)
{
    //  A test points TMPDIR at its scratch folder, so that what a killed
    //  run leaves goes with that folder.
    const char *base = getenv ("TMPDIR");
    return base && *base ? base : "/tmp";
}

char *
kd_temp_dir (const char *prefix)
{
    const char *base = kd_temp_base ();
    //  mkdtemp replaces the six trailing characters with random ones.
    size_t size = strlen (base) + strlen (prefix) + 9;
    char *path = (char *) malloc (size);
    if (!path)
        return NULL;
    snprintf (path, size, "%s/%s-XXXXXX", base, prefix);
    if (!mkdtemp (path)) {
        free (path);
        return NULL;
    }
    return path;
}

size_t
kd_hex (const void *data, size_t n, char *out, size_t size)
{
    static const char digits [] = "0123456789ABCDEF";
    const uint8_t *bytes = (const uint8_t *) data;
    size_t at = 0;
    if (size == 0)
        return 0;
    for (size_t i = 0; i < n && at + 2 < size; i++) {
        out [at++] = digits [bytes [i] >> 4];
        out [at++] = digits [bytes [i] & 15];
    }
    out [at] = 0;
    return at;
}

//  The shards of one cluster create their checkpoint directories under one
//  parent at once: each component is made, and one that already exists
//  (made by us earlier, or by a peer just now) is taken as it is.
int
kd_dir_create (const char *path, mode_t mode)
{
    char buf [PATH_MAX];
    size_t n = path ? strlen (path) : 0;
    if (n == 0 || n >= sizeof buf) {
        errno = n ? ENAMETOOLONG : ENOENT;
        return -1;
    }
    memcpy (buf, path, n + 1);
    for (char *p = buf + 1; ; p++)
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir (buf, mode) && errno != EEXIST)
                return -1;
            *p = c;
            if (!c)
                break;
        }
    struct stat st;
    if (stat (path, &st))
        return -1;
    if (!S_ISDIR (st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}
