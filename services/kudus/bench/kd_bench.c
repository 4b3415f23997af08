/*  kd_bench: the `kudus bench` command and what its benchmarks share:
    list settings, medians, child processes, and result lines.
*/
#include "kd_bench.h"
#include "kd_spawn.h"
#include <ctype.h>
#include <malloc.h>
#include <errno.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

//  Usage of the command.
static void
s_usage (FILE *out)
{
    fprintf (out,
        "usage: kudus bench pushpull|barrier|compute|sparse|phase [--setting VALUE ...]\n\n"
        "  pushpull   values through real kudus-shard processes, against a raw\n"
        "             ZeroMQ DEALER/ROUTER echo and memcpy\n"
        "  barrier    N fake workers against a real kudus-scheduler (BSP, LSP)\n"
        "  compute    kd_model_gradient against bare OpenBLAS sgemm\n"
        "  sparse     a keyed pull against a dense one, and sparse-lr's bytes per\n"
        "             iteration at growing model sizes\n"
        "  phase      where a BSP phase's time goes (compute, push, barrier, pull),\n"
        "             against the compute-bound limit\n\n"
        "'kudus bench --help' lists the settings; --json prints one object per line.\n");
}

//  The allocator settings of kudus-shard (S_MALLOC_TRIM there), for our
//  side and the echo servers alike: the client and the ceiling then pay
//  what the shards pay for a large received message, no more, no less.
void
kd_bench_tune_allocator (void)
{
    if (getenv ("KUDUS_BENCH_DEFAULT_MALLOC"))
        return;
    mallopt (M_ARENA_MAX, 1);
    mallopt (M_MMAP_MAX, 0);
    mallopt (M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
}

int
kd_bench_main (int argc, char **argv)
{
    kd_bench_tune_allocator ();
    if (argc >= 3 && !strcmp (argv [1], "zmq-echo"))
        return kd_bench_echo_server (argv [2]);
    if (argc >= 2 && !strcmp (argv [1], "zmq-staged-echo")) {
        if (argc != 4) {
            fprintf (stderr, "usage: kudus bench zmq-staged-echo ENDPOINT BYTES\n");
            return 2;
        }
        return kd_bench_staged_echo_server (argv [2], argv [3]);
    }
    if (argc >= 2 && !strcmp (argv [1], "zmq-reply")) {
        if (argc != 4) {
            fprintf (stderr, "usage: kudus bench zmq-reply ENDPOINT BYTES\n");
            return 2;
        }
        return kd_bench_reply_server (argv [2], argv [3]);
    }
    if (argc >= 5 && !strcmp (argv [1], "zmq-barrier"))
        return kd_bench_barrier_server (argv [2], (size_t) atol (argv [3]), (size_t) atol (argv [4]));
    int rc = 0;
    kd_config_t *config = kd_config_from_args (KD_SVC_PERF, "kudus bench pushpull|barrier|compute|sparse|phase",
                                               "kudus bench", argc, argv, &rc);
    if (!config)
        return rc;
    const char *what = kd_config_positional (config, 0);
    if (!what) {
        s_usage (stderr);
        kd_config_destroy (&config);
        return 2;
    }
    kd_log_init ("bench", kd_log_level_parse (kd_config_str (config, "log-level")));
    kd_bench_t bench_s = {
        .config = config,
        .json = kd_config_bool (config, "json"),
        .repeat = (int) kd_config_int (config, "repeat"),
        .base_port = (int) kd_config_int (config, "base-port")
    }, *bench = &bench_s;
    ssize_t n = readlink ("/proc/self/exe", bench->self_exe, sizeof bench->self_exe - 1);
    bench->self_exe [n > 0 ? n : 0] = 0;
    if (*kd_config_str (config, "bin-dir"))
        snprintf (bench->bindir, sizeof bench->bindir, "%s", kd_config_str (config, "bin-dir"));
    else {
        snprintf (bench->bindir, sizeof bench->bindir, "%s", bench->self_exe);
        char *slash = strrchr (bench->bindir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf (bench->bindir, sizeof bench->bindir, ".");
    }
    //  The barrier benchmark holds a socket and a connection per fake
    //  worker, here and in the scheduler (which inherits the limit).
    struct rlimit lim;
    if (getrlimit (RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
        lim.rlim_cur = lim.rlim_max;
        setrlimit (RLIMIT_NOFILE, &lim);
    }
    zsys_set_max_sockets (0);
    zsys_init ();
    if (!strcmp (what, "pushpull"))
        rc = kd_bench_pushpull (bench);
    else
    if (!strcmp (what, "barrier"))
        rc = kd_bench_barrier (bench);
    else
    if (!strcmp (what, "compute"))
        rc = kd_bench_compute (bench);
    else
    if (!strcmp (what, "sparse"))
        rc = kd_bench_sparse (bench);
    else
    if (!strcmp (what, "phase"))
        rc = kd_bench_phase (bench);
    else {
        fprintf (stderr, "kudus bench: unknown benchmark '%s'\n\n", what);
        s_usage (stderr);
        rc = 2;
    }
    kd_config_destroy (&config);
    return rc;
}

//  --------------------------------------------------------------------------
//  Helpers

int
kd_bench_list (const char *text, uint64_t *out, int max)
{
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end = NULL;
        errno = 0;
        unsigned long long v = strtoull (p, &end, 10);
        if (end == p || errno)
            return -1;
        if (*end == 'K' || *end == 'k') {
            v *= 1024;
            end++;
        }
        else
        if (*end == 'M' || *end == 'm') {
            v *= 1024 * 1024;
            end++;
        }
        if ((*end && *end != ',') || n == max || v == 0)
            return -1;
        out [n++] = v;
        p = *end ? end + 1 : end;
    }
    return n;
}

//  Ascending order for qsort.
static int
s_double_compare (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : (x > y);
}

double
kd_bench_quantile (double *values, int n, double q)
{
    if (n <= 0)
        return 0;
    qsort (values, (size_t) n, sizeof (double), s_double_compare);
    double at = q * (n - 1);
    int lo = (int) at;
    if (lo >= n - 1)
        return values [n - 1];
    return values [lo] + (at - lo) * (values [lo + 1] - values [lo]);
}

double
kd_bench_median (double *values, int n)
{
    return kd_bench_quantile (values, n, 0.5);
}

pid_t
kd_bench_spawn (kd_bench_t *bench, const char *const *argv)
{
    char path [1200];
    if (argv [0][0] == '/')
        snprintf (path, sizeof path, "%s", argv [0]);
    else
        snprintf (path, sizeof path, "%s/%s", bench->bindir, argv [0]);
    //  A bench killed by a timeout must not leave services behind: the
    //  default death signal is SIGKILL.
    kd_spawn_t how = KD_SPAWN_INIT;
    how.path = path;
    how.argv = argv;
    how.out_to_err = true;
    return kd_spawn (&how);
}

void
kd_bench_stop (pid_t pid)
{
    if (pid <= 0)
        return;
    kill (pid, SIGTERM);
    for (int i = 0; i < 300; i++) {
        if (waitpid (pid, NULL, WNOHANG) == pid)
            return;
        usleep (10000);
    }
    kill (pid, SIGKILL);
    waitpid (pid, NULL, 0);
}

long
kd_bench_peak_rss (pid_t pid)
{
    char path [64], line [256];
    snprintf (path, sizeof path, "/proc/%d/status", (int) pid);
    long kib = -1;
    FILE *f = fopen (path, "r");
    while (f && fgets (line, sizeof line, f))
        if (!strncmp (line, "VmHWM:", 6))
            kib = atol (line + 6);
    if (f)
        fclose (f);
    return kib;
}

double
kd_bench_cpu_ms (pid_t pid)
{
    char path [64];
    snprintf (path, sizeof path, "/proc/%d/stat", (int) pid);
    char *text = kd_read_file (path);
    if (!text)
        return -1;
    //  The command name may hold spaces; fields count from after ')'.
    char *p = strrchr (text, ')');
    unsigned long long utime = 0, stime = 0;
    int got = p ? sscanf (p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                          &utime, &stime) : 0;
    free (text);
    if (got != 2)
        return -1;
    return (double) (utime + stime) * 1000.0 / (double) sysconf (_SC_CLK_TCK);
}

size_t
kd_bench_bytes_arg (const char *text, size_t max)
{
    //  Digits only: strtoull would take a sign or leading blanks.
    if (!isdigit ((unsigned char) *text))
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long n = strtoull (text, &end, 10);
    return errno || *end || n == 0 || n > max ? 0 : (size_t) n;
}

double
kd_bench_cpu_ns (pid_t pid)
{
    //  The process's CPU-time clock: every thread, those that ended too,
    //  brought up to date at the read (a /proc sum would miss both).
    clockid_t clock;
    struct timespec t;
    if (clock_getcpuclockid (pid, &clock) || clock_gettime (clock, &t))
        return -1;
    return (double) t.tv_sec * 1e9 + (double) t.tv_nsec;
}

void
kd_bench_row (kd_bench_t *bench, const char *name, bool *header_done,
              const char *const *kv)
{
    if (bench->json) {
        printf ("{\"bench\":\"%s\"", name);
        for (int i = 0; kv [i]; i += 2)
            printf (",\"%s\":%s", kv [i], kv [i + 1]);
        printf ("}\n");
    }
    else {
        if (!*header_done) {
            for (int i = 0; kv [i]; i += 2)
                printf ("%*s ", (int) (strlen (kv [i]) > 8 ? strlen (kv [i]) : 8), kv [i]);
            printf ("\n");
            *header_done = true;
        }
        for (int i = 0; kv [i]; i += 2) {
            char value [64];
            //  Strings are given JSON-quoted; the table shows them bare.
            const char *v = kv [i + 1];
            size_t len = strlen (v);
            if (len >= 2 && v [0] == '"')
                snprintf (value, sizeof value, "%.*s", (int) (len - 2), v + 1);
            else
                snprintf (value, sizeof value, "%s", v);
            printf ("%*s ", (int) (strlen (kv [i]) > 8 ? strlen (kv [i]) : 8), value);
        }
        printf ("\n");
    }
    fflush (stdout);
}

volatile sig_atomic_t kd_bench_raw_stop = 0;

//  SIGTERM: leave the helper's loop.
static void
s_raw_signal (int sig)
{
    (void) sig;
    kd_bench_raw_stop = 1;
}

void *
kd_bench_raw_router (void *ctx, const char *endpoint, const char *what)
{
    signal (SIGTERM, s_raw_signal);
    signal (SIGINT, s_raw_signal);
    void *router = zmq_socket (ctx, ZMQ_ROUTER);
    int linger = 0, timeout = 200;
    zmq_setsockopt (router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt (router, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    if (zmq_bind (router, endpoint)) {
        fprintf (stderr, "kudus bench %s: cannot bind %s: %s\n", what, endpoint, zmq_strerror (zmq_errno ()));
        zmq_close (router);
        return NULL;
    }
    return router;
}

zsock_t *
kd_bench_dealer (int port, int timeout_ms)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    assert (sock);
    zsock_set_rcvtimeo (sock, timeout_ms);
    zsock_set_sndtimeo (sock, timeout_ms);
    zsock_set_linger (sock, 0);
    if (zsock_connect (sock, "tcp://127.0.0.1:%d", port)) {
        zsock_destroy (&sock);
        return NULL;
    }
    return sock;
}

bool
kd_bench_has (const char *list, const char *word)
{
    size_t len = strlen (word);
    for (const char *at = list; at && *at; ) {
        const char *end = strchr (at, ',');
        size_t n = end ? (size_t) (end - at) : strlen (at);
        if (n == len && !strncmp (at, word, len))
            return true;
        at = end ? end + 1 : NULL;
    }
    return false;
}
