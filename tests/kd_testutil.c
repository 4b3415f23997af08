/*  kd_testutil: helpers shared by the test suites.
*/
#define _GNU_SOURCE
#include "kd_testutil.h"
#include <msgpack.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <stddef.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include "kd_spawn.h"
#include "kd_util.h"
#include "kd_msg.h"
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef KUDUS_BIN_DIR
#define KUDUS_BIN_DIR "."
#endif

//  Scratch directories made by this process, removed when it exits.
#define S_MAX_TMPDIRS 64
static char *s_tmpdirs [S_MAX_TMPDIRS];
static pid_t s_tmpdir_owner [S_MAX_TMPDIRS];
static int s_n_tmpdirs;

//  Remove one entry of a tree, children first (nftw with FTW_DEPTH).
static int
s_rm_entry (const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void) sb;
    (void) flag;
    (void) ftw;
    remove (path);
    return 0;
}

//  At exit: remove the scratch directories this very process made.  A
//  forked child that exits does not remove its parent's.
static void
s_rm_tmpdirs (void)
{
    for (int i = 0; i < s_n_tmpdirs; i++)
        if (s_tmpdir_owner [i] == getpid ())
            nftw (s_tmpdirs [i], s_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

char *
kd_test_tmpdir (void)
{
    char tmpl [1024];
    snprintf (tmpl, sizeof tmpl, "%s/kudus-test-XXXXXX", kd_temp_base ());
    char *dir = mkdtemp (tmpl);
    if (!dir)
        return NULL;
    //  Every test removes its scratch files when it ends, passing or
    //  failing: the directory goes when the test's process exits.
    if (s_n_tmpdirs == 0)
        atexit (s_rm_tmpdirs);
    if (s_n_tmpdirs < S_MAX_TMPDIRS) {
        s_tmpdirs [s_n_tmpdirs] = strdup (dir);
        s_tmpdir_owner [s_n_tmpdirs++] = getpid ();
    }
    return strdup (dir);
}

//  A suite killed by a signal runs no atexit handler (and Criterion's
//  runner takes SIGTERM and SIGINT for itself), so its folder would stay.
//  Each suite's folder names its owner in a file "owner"; a suite that
//  starts removes the folders of owners no longer alive.
static void
s_rm_orphans (void)
{
    DIR *d = opendir (kd_temp_base ());
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir (d))) {
        if (strncmp (e->d_name, "kudus-test-", 11))
            continue;
        char path [1024], owner [1100];
        snprintf (path, sizeof path, "%s/%s", kd_temp_base (), e->d_name);
        snprintf (owner, sizeof owner, "%s/owner", path);
        FILE *f = fopen (owner, "r");
        long pid = 0;
        if (!f)
            continue;
        if (fscanf (f, "%ld", &pid) != 1)
            pid = 0;
        fclose (f);
        if (pid > 0 && kill ((pid_t) pid, 0) < 0 && errno == ESRCH)
            nftw (path, s_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    }
    closedir (d);
}

__attribute__ ((constructor)) static void
s_scratch_tmpdir (void)
{
    if (getenv ("KD_TEST_SCRATCH"))
        return;
    s_rm_orphans ();
    char *dir = kd_test_tmpdir ();
    if (dir) {
        setenv ("KD_TEST_SCRATCH", dir, 1);
        setenv ("TMPDIR", dir, 1);
        char owner [1100];
        snprintf (owner, sizeof owner, "%s/owner", dir);
        FILE *f = fopen (owner, "w");
        if (f) {
            fprintf (f, "%ld\n", (long) getpid ());
            fclose (f);
        }
    }
    free (dir);
}

const char *
kd_test_bin (const char *name)
{
    static char path [1024];
    snprintf (path, sizeof path, "%s/%s", KUDUS_BIN_DIR, name);
    return path;
}

pid_t
kd_test_spawn (const char *const *argv, const char *log_path)
{
    char path [1024];
    snprintf (path, sizeof path, "%s/%s", KUDUS_BIN_DIR, argv [0]);
    kd_spawn_t how = KD_SPAWN_INIT;
    how.path = path;
    how.argv = argv;
    how.out_file = how.err_file = log_path;
    how.append = true;
    return kd_spawn (&how);
}

bool
kd_test_wait (pid_t pid, int timeout_ms, int *status)
{
    for (int waited = 0; waited <= timeout_ms; waited += 10) {
        int st;
        pid_t r = waitpid (pid, &st, WNOHANG);
        if (r == pid) {
            if (status)
                *status = st;
            return true;
        }
        if (r < 0)
            return false;
        usleep (10000);
    }
    return false;
}

void
kd_test_kill (pid_t pid)
{
    if (pid <= 0)
        return;
    if (waitpid (pid, NULL, WNOHANG) == 0) {
        kill (pid, SIGKILL);
        waitpid (pid, NULL, 0);
    }
}

//  True when nothing listens on the ports a local cluster at base takes
//  first: scheduler, monitor, stream, metrics, aggregators, shards.
static bool
s_ports_free (int base)
{
    const int offsets [] = { 0, 1, 2, 3, 50, 100, 101, 102, 103 };
    for (size_t i = 0; i < sizeof offsets / sizeof offsets [0]; i++) {
        int fd = socket (AF_INET, SOCK_STREAM, 0);
        if (fd < 0)
            return true;
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) (base + offsets [i])) };
        a.sin_addr.s_addr = htonl (INADDR_ANY);
        int one = 1;
        setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        bool free_port = bind (fd, (struct sockaddr *) &a, sizeof a) == 0;
        close (fd);
        if (!free_port)
            return false;
    }
    return true;
}

//  Hold base for this process's life: an abstract socket named for it
//  (tests/python/conftest.py takes the same names), which goes when the
//  process does, however it ends.  False if another process holds it.
static bool
s_reserve (int base)
{
    int fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return true;
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int n = snprintf (a.sun_path + 1, sizeof a.sun_path - 1, "kudus-test-base-%d", base);
    if (bind (fd, (struct sockaddr *) &a, (socklen_t) (offsetof (struct sockaddr_un, sun_path) + 1 + n)) == 0)
        return true;            //  fd stays open on purpose
    close (fd);
    return false;
}

int
kd_test_base_port (void)
{
    //  Below Linux's ephemeral range (32768 and up): a port there can be
    //  the source port of any outgoing connection, and then bind fails.
    //  Other suites (other checkouts' too) draw from the same 60 bases at
    //  the same time: a base whose cluster ports are bound, or that another
    //  suite holds between its clusters, is passed over.
    //  When all 60 are taken, wait for one (suites end every few seconds)
    //  for 30 s, then say so: a silent clash would fail as something else.
    unsigned seed = (unsigned) getpid () ^ (unsigned) time (NULL);
    int base = 20000 + (int) (seed % 60) * 200;
    for (int round = 0; round < 150; round++) {
        for (int tries = 0; tries < 60; tries++) {
            base = 20000 + (int) ((seed + (unsigned) tries * 37) % 60) * 200;
            if (s_ports_free (base) && s_reserve (base))
                return base;
        }
        usleep (200 * 1000);
    }
    fprintf (stderr, "kd_test_base_port: no free base among 20000-31999 after 30 s; using %d, "
             "unreserved: its ports may clash\n", base);
    return base;
}

char *
kd_test_slurp (const char *path)
{
    return kd_read_file (path);
}

double
kd_test_json_number (const char *json, const char *key)
{
    if (!json)
        return NAN;
    char pattern [128];
    snprintf (pattern, sizeof pattern, "\"%s\":", key);
    const char *p = strstr (json, pattern);
    if (!p)
        return NAN;
    p += strlen (pattern);
    while (*p == ' ')
        p++;
    char *end;
    double v = strtod (p, &end);
    return end == p ? NAN : v;
}

char *
kd_test_run_report (const char *const *argv, const char *log, const char *report, int ceiling_ms,
                    int *status)
{
    *status = 0;
    pid_t pid = kd_test_spawn (argv, log);
    if (pid <= 0)
        return NULL;
    bool exited = kd_test_wait (pid, ceiling_ms, status);
    if (!exited)
        kd_test_kill (pid);
    kd_test_dump (log);
    return exited ? kd_test_slurp (report) : NULL;
}

bool
kd_test_chaos_passed (const char *report, double min_faults, char *why, size_t why_size)
{
    double faults = kd_test_json_number (report, "faults");
    const char *fail = !(faults >= min_faults) ? "too few faults fired"
                     : kd_test_json_number (report, "survived") != faults ? "a fault was not survived"
                     : kd_test_json_number (report, "rows_lost") != 0 ? "rows were lost"
                     : kd_test_json_number (report, "rows_twice") != 0 ? "rows were applied twice"
                     : kd_test_json_number (report, "gradients_twice") != 0 ? "gradients were applied twice"
                     : !strstr (report, "\"pass\": true") ? "the checker did not pass" : NULL;
    snprintf (why, why_size, "%s: %s", fail ? fail : "pass", report ? report : "(no report)");
    return fail == NULL;
}

void
kd_test_dump (const char *path)
{
    char *text = kd_test_slurp (path);
    if (text) {
        //  The end of a log says what went wrong; all of it is too long.
        size_t len = strlen (text);
        fprintf (stderr, "----- %s -----\n%s\n", path, len > 6000 ? text + len - 6000 : text);
        free (text);
    }
}

void
kd_test_dump_lines (const char *path, const char *const *needles)
{
    char *text = kd_test_slurp (path);
    fprintf (stderr, "----- %s: lines with", path);
    for (size_t i = 0; needles [i]; i++)
        fprintf (stderr, " \"%s\"", needles [i]);
    fprintf (stderr, " -----\n");
    for (char *line = text ? strtok (text, "\n") : NULL; line; line = strtok (NULL, "\n"))
        for (size_t i = 0; needles [i]; i++)
            if (strstr (line, needles [i])) {
                fprintf (stderr, "%s\n", line);
                break;
            }
    free (text);
    kd_test_dump (path);
}

int
kd_test_count (const char *path, const char *needle)
{
    char *text = kd_test_slurp (path);
    int n = 0;
    for (const char *p = text; p && (p = strstr (p, needle)); p += strlen (needle))
        n++;
    free (text);
    return n;
}

int
kd_test_wait_count (const char *path, const char *needle, int at_least, int timeout_ms)
{
    uint64_t t0 = kd_now_ms ();
    int n = kd_test_count (path, needle);
    while (n < at_least && kd_now_ms () - t0 < (uint64_t) timeout_ms) {
        usleep (20 * 1000);
        n = kd_test_count (path, needle);
    }
    return n;
}

void
kd_test_log_word (const char *path, const char *needle, const char *key, char *out, size_t size)
{
    out [0] = 0;
    char *text = kd_test_slurp (path);
    char *line = text ? strstr (text, needle) : NULL, *last = NULL;
    while (line) {
        last = line;
        line = strstr (line + 1, needle);
    }
    if (last) {
        char *eol = strchr (last, '\n');
        char *at = strstr (last, key);
        if (at && (!eol || at < eol)) {
            at += strlen (key);
            size_t n = strcspn (at, " \n");
            n = n < size - 1 ? n : size - 1;
            memcpy (out, at, n);
            out [n] = 0;
        }
    }
    free (text);
}

int64_t
kd_test_log_value (const char *path, const char *needle, const char *key)
{
    char word [32];
    kd_test_log_word (path, needle, key, word, sizeof word);
    return *word ? strtoll (word, NULL, 10) : -1;
}

void
kd_test_rss (pid_t pid, long *peak, long *now)
{
    char path [64], line [256];
    snprintf (path, sizeof path, "/proc/%d/status", (int) pid);
    *peak = *now = -1;
    FILE *f = fopen (path, "r");
    while (f && fgets (line, sizeof line, f)) {
        if (!strncmp (line, "VmHWM:", 6))
            *peak = atol (line + 6);
        if (!strncmp (line, "VmRSS:", 6))
            *now = atol (line + 6);
    }
    if (f)
        fclose (f);
}

zsock_t *
kd_test_dealer (const char *endpoint)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    if (!sock)
        return NULL;
    zsock_set_rcvtimeo (sock, 3000);
    zsock_set_sndtimeo (sock, 3000);
    zsock_set_linger (sock, 0);
    if (zsock_connect (sock, "%s", endpoint) != 0)
        zsock_destroy (&sock);
    return sock;
}

int64_t
kd_test_shard_version (const char *endpoint, int timeout_ms)
{
    zsock_t *sock = kd_test_dealer (endpoint);
    if (!sock)
        return -1;
    zsock_set_rcvtimeo (sock, timeout_ms);
    kd_msg_t *pull = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (pull, KD_F_VERSION, 0);
    kd_msg_send (&pull, sock);
    int64_t version = -1;
    kd_msg_t *reply = NULL;
    if (kd_msg_recv (sock, &reply, NULL, &(kd_msg_err_t) { 0 }) == 0
    &&  kd_msg_type (reply) == KD_MSG_PULL_OK)
        version = (int64_t) kd_msg_uint (reply, KD_F_VERSION);
    kd_msg_destroy (&reply);
    zsock_destroy (&sock);
    return version;
}

pid_t
kd_test_procs_spawn (kd_test_procs_t *self, const char *const *argv, const char *log_path)
{
    if (self->n >= KD_TEST_MAX_PIDS)
        return -1;
    pid_t pid = kd_test_spawn (argv, log_path);
    if (pid > 0)
        self->pids [self->n++] = pid;
    return pid > 0 ? pid : -1;
}

void
kd_test_procs_kill (kd_test_procs_t *self)
{
    for (int i = 0; i < self->n; i++)
        kd_test_kill (self->pids [i]);
    self->n = 0;
}

kd_msg_t *
kd_test_recv (zsock_t *sock)
{
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    return kd_msg_recv (sock, &msg, NULL, &err) == 0 ? msg : NULL;
}

char *
kd_test_http_get (int port, const char *path)
{
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return NULL;
    struct timeval tv = { .tv_sec = 2 };
    setsockopt (fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt (fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port) };
    addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
    char request [512];
    int len = snprintf (request, sizeof request, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (connect (fd, (struct sockaddr *) &addr, sizeof addr) != 0
    ||  send (fd, request, (size_t) len, MSG_NOSIGNAL) != len) {
        close (fd);
        return NULL;
    }
    size_t size = 0, cap = 65536;
    char *text = (char *) malloc (cap + 1);
    ssize_t n;
    while (text && (n = recv (fd, text + size, cap - size, 0)) > 0) {
        size += (size_t) n;
        if (size == cap) {
            char *bigger = (char *) realloc (text, cap * 2 + 1);
            if (!bigger) {
                free (text);
                text = NULL;
                break;
            }
            text = bigger;
            cap *= 2;
        }
    }
    close (fd);
    if (text)
        text [size] = 0;
    return text;
}

//  Send raw frames.
void
kd_test_send_raw (zsock_t *sock, const void *a, size_t alen, const void *b, size_t blen)
{
    zmsg_t *msg = zmsg_new ();
    zmsg_addmem (msg, a, alen);
    if (b)
        zmsg_addmem (msg, b, blen);
    zmsg_send (&msg, sock);
}

//  Encode a header map {"v": version, "t": type} plus one extra pair.
size_t
kd_test_header (char *buf, size_t size, unsigned version, const char *type, const char *key, int value)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init (&sb);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, key ? 3 : 2);
    msgpack_pack_str (&pk, 1); msgpack_pack_str_body (&pk, "v", 1);
    msgpack_pack_uint32 (&pk, version);
    msgpack_pack_str (&pk, 1); msgpack_pack_str_body (&pk, "t", 1);
    msgpack_pack_str (&pk, strlen (type)); msgpack_pack_str_body (&pk, type, strlen (type));
    if (key) {
        msgpack_pack_str (&pk, strlen (key)); msgpack_pack_str_body (&pk, key, strlen (key));
        msgpack_pack_int (&pk, value);
    }
    size_t n = sb.size < size ? sb.size : size;
    memcpy (buf, sb.data, n);
    msgpack_sbuffer_destroy (&sb);
    return n;
}

//  Send the malformed set; return how many should be answered with ERROR.
int
kd_test_send_garbage (zsock_t *sock)
{
    char buf [256];
    int expected = 0;
    uint8_t bomb [] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
    kd_test_send_raw (sock, bomb, sizeof bomb, NULL, 0); expected++;
    uint8_t mapbomb [] = { 0xdf, 0xff, 0xff, 0xff, 0xff };
    kd_test_send_raw (sock, mapbomb, sizeof mapbomb, NULL, 0); expected++;
    kd_test_send_raw (sock, "hello world", 11, NULL, 0); expected++;
    size_t n = kd_test_header (buf, sizeof buf, 1, "NO_SUCH_TYPE", NULL, 0);
    kd_test_send_raw (sock, buf, n, NULL, 0); expected++;
    n = kd_test_header (buf, sizeof buf, 99, "HEARTBEAT", NULL, 0);
    kd_test_send_raw (sock, buf, n, NULL, 0); expected++;
    n = kd_test_header (buf, sizeof buf, 1, "PULL", NULL, 0);     //  missing version
    kd_test_send_raw (sock, buf, n, NULL, 0); expected++;
    n = kd_test_header (buf, sizeof buf, 1, "PULL", "version", -5);   //  wrong type
    kd_test_send_raw (sock, buf, n, NULL, 0); expected++;
    n = kd_test_header (buf, sizeof buf, 1, "HEARTBEAT", NULL, 0);
    kd_test_send_raw (sock, buf, n - 3, NULL, 0); expected++;     //  truncated
    n = kd_test_header (buf, sizeof buf, 1, "HEARTBEAT", NULL, 0);
    kd_test_send_raw (sock, buf, n, "abc", 3); expected++;        //  unexpected data frame
    srand (7);
    for (int i = 0; i < 200; i++) {
        char junk [64];
        size_t len = 1 + (size_t) rand () % sizeof junk;
        for (size_t j = 0; j < len; j++)
            junk [j] = (char) rand ();
        kd_test_send_raw (sock, junk, len, NULL, 0);
        expected++;
    }
    return expected;
}

//  Read replies until `want` ERRORs or a timeout; returns ERRORs seen.
int
kd_test_count_errors (zsock_t *sock, int want)
{
    int errors = 0;
    while (errors < want) {
        kd_msg_t *msg = NULL;
        if (kd_msg_recv (sock, &msg, NULL, &(kd_msg_err_t) { 0 }) != 0)
            break;
        if (kd_msg_type (msg) == KD_MSG_ERROR)
            errors++;
        kd_msg_destroy (&msg);
    }
    return errors;
}

//  Wait for a reply of one type, skipping up to max_skip others (the ERRORs
//  that answer garbage sent before); true if it came.
bool
kd_test_expect_within (zsock_t *sock, kd_msg_type_t type, kd_msg_t **out, int max_skip)
{
    for (int i = 0; i < max_skip; i++) {
        kd_msg_t *msg = NULL;
        if (kd_msg_recv (sock, &msg, NULL, &(kd_msg_err_t) { 0 }) != 0)
            return false;
        if (kd_msg_type (msg) == type) {
            if (out)
                *out = msg;
            else
                kd_msg_destroy (&msg);
            return true;
        }
        kd_msg_destroy (&msg);
    }
    return false;
}

bool
kd_test_expect (zsock_t *sock, kd_msg_type_t type, kd_msg_t **out)
{
    return kd_test_expect_within (sock, type, out, 50);
}
