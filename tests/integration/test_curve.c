/*  Integration tests for CURVE (setting "curve"): the real binaries on
    loopback, with keys from `kudus keygen`.

    Four kinds of unauthenticated client attack every CURVE port (the
    scheduler ROUTER, a shard ROUTER, the monitor ROUTER and the monitor PUB):

        null      a plain ZeroMQ client, no security
        unknown   a valid CURVE client whose key is not in allowed/
        wrong     the authorized client key, but a wrong server key
        raw       a plain TCP connection writing random bytes

    Each DEALER attacker sends requests that are always answered when they
    arrive (HELLO, PULL, HEARTBEAT) and a malformed message that is always
    answered with ERROR and logged; each SUB attacker just listens.  A
    message counts as delivered if any reply comes back, if the stream
    reaches a SUB, or if the service's log shows it was seen.  Then an
    authorized client sends the same messages, which must be answered and
    logged: that shows the checks could have seen a delivery.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kd_internal.h"
#include "kd_bundle.h"
#include "kd_testutil.h"

#define S_ROUNDS        3       //  request + garbage pairs per DEALER attacker
#define S_LISTEN_MS     2000    //  how long attackers wait for anything back

static char *s_dir;             //  temporary directory of the test
static char s_keys [512];       //  keys from kudus keygen
static int s_port;              //  base port of the test

static void
setup (void)
{
    s_dir = kd_test_tmpdir ();
    cr_assert (s_dir);
    snprintf (s_keys, sizeof s_keys, "%s/keys", s_dir);
    s_port = kd_test_base_port ();
}

static void
teardown (void)
{
    free (s_dir);
}

TestSuite (curve, .init = setup, .fini = teardown, .timeout = 200);

//  ---------------------------------------------------------------------
//  Helpers

//  Run a command to completion; its exit status, or -1.
static int
s_run (const char *const *argv, const char *log, int timeout_ms)
{
    pid_t pid = kd_test_spawn (argv, log);
    int status = -1;
    bool exited = kd_test_wait (pid, timeout_ms, &status);
    kd_test_kill (pid);
    return exited && WIFEXITED (status) ? WEXITSTATUS (status) : -1;
}

static void
s_keygen (void)
{
    char log [600];
    snprintf (log, sizeof log, "%s/keygen.log", s_dir);
    const char *argv [] = { "kudus", "keygen", s_keys, NULL };
    int rc = s_run (argv, log, 10000);
    if (rc != 0)
        kd_test_dump (log);
    cr_assert_eq (rc, 0, "kudus keygen failed");
}

//  Public key of a certificate file.
static char *
s_public_key (const char *name)
{
    char path [700];
    snprintf (path, sizeof path, "%s/%s", s_keys, name);
    zcert_t *cert = zcert_load (path);
    cr_assert (cert, "cannot load %s", path);
    char *key = strdup (zcert_public_txt (cert));
    zcert_destroy (&cert);
    return key;
}

typedef enum { S_NULL, S_UNKNOWN, S_WRONG, S_RAW, S_KINDS } s_kind_t;
static const char *s_kind_names [] = { "null", "unknown", "wrong", "raw" };

//  A client socket of the given attack kind (not S_RAW), or authorized
//  when authorized is not NULL.
static zsock_t *
s_socket (int type, s_kind_t kind, kd_curve_t *authorized, const char *endpoint)
{
    zsock_t *sock = zsock_new (type);
    cr_assert (sock);
    zsock_set_rcvtimeo (sock, 200);
    zsock_set_sndtimeo (sock, 200);
    zsock_set_linger (sock, 0);
    if (type == ZMQ_SUB)
        zsock_set_subscribe (sock, "");
    if (authorized)
        kd_curve_client (authorized, sock);
    else
    if (kind == S_UNKNOWN) {
        //  A valid key pair nobody put in allowed/, aimed at the real server.
        zcert_t *stranger = zcert_new ();
        zcert_apply (stranger, sock);
        char *server_key = s_public_key (KD_CURVE_SERVER_CERT);
        zsock_set_curve_serverkey (sock, server_key);
        free (server_key);
        zcert_destroy (&stranger);
    }
    else
    if (kind == S_WRONG) {
        //  The authorized client's own key pair, but the server key of an
        //  impostor: the real server cannot read its handshake.
        char path [700];
        snprintf (path, sizeof path, "%s/%s", s_keys, KD_CURVE_CLIENT_CERT);
        zcert_t *client = zcert_load (path);
        cr_assert (client);
        zcert_apply (client, sock);
        zcert_t *impostor = zcert_new ();
        zsock_set_curve_serverkey (sock, zcert_public_txt (impostor));
        zcert_destroy (&impostor);
        zcert_destroy (&client);
    }
    cr_assert_eq (zsock_connect (sock, "%s", endpoint), 0);
    return sock;
}

//  The request each ROUTER always answers: HELLO (scheduler), PULL
//  (shard), HEARTBEAT (monitor).
static kd_msg_t *
s_request (int service, const char *name)
{
    kd_msg_t *req;
    if (service == 0) {
        req = kd_msg_new (KD_MSG_HELLO);
        kd_msg_set_str (req, KD_F_ROLE, "worker");
        kd_msg_set_str (req, KD_F_NAME, name);
    }
    else
    if (service == 1) {
        req = kd_msg_new (KD_MSG_PULL);
        kd_msg_set_uint (req, KD_F_VERSION, 0);
    }
    else
        req = kd_msg_new (KD_MSG_HEARTBEAT);
    return req;
}

//  Send rounds of request + malformed message; returns messages handed
//  to ZeroMQ.
static int
s_send_rounds (zsock_t *sock, int service, const char *name, int rounds)
{
    int sent = 0;
    for (int i = 0; i < rounds; i++) {
        kd_msg_t *req = s_request (service, name);
        if (kd_msg_send (&req, sock) == 0)
            sent++;
        kd_msg_destroy (&req);
        if (zstr_send (sock, "hello world") == 0)
            sent++;
    }
    return sent;
}

//  Messages that arrive on any of the sockets within ms.
static int
s_drain (zsock_t **socks, size_t n, int ms)
{
    int got = 0;
    uint64_t deadline = kd_now_ms () + (uint64_t) ms;
    while (kd_now_ms () < deadline) {
        zmq_pollitem_t items [32];
        assert (n <= 32);
        for (size_t i = 0; i < n; i++)
            items [i] = (zmq_pollitem_t) { zsock_resolve (socks [i]), 0, ZMQ_POLLIN, 0 };
        if (zmq_poll (items, (int) n, 50) <= 0)
            continue;
        for (size_t i = 0; i < n; i++)
            if (items [i].revents & ZMQ_POLLIN) {
                zmsg_t *msg = zmsg_recv (socks [i]);
                if (msg)
                    got++;
                zmsg_destroy (&msg);
            }
    }
    return got;
}

//  True when a message arrives on sock: its first, however long a loaded
//  machine takes to shake hands, subscribe and publish.  15 s ends only a
//  wait that never would (2.5 s of draining missed it in a flake round).
static bool
s_first_message (zsock_t *sock)
{
    zsock_set_rcvtimeo (sock, 15000);
    zmsg_t *first = zmsg_recv (sock);
    bool got = first != NULL;
    zmsg_destroy (&first);
    return got;
}

//  Plain TCP to a port: write random bytes, then wait for the server to
//  close.  Returns true if it closed within timeout_ms; *bytes_back gets
//  what it sent (at most a ZeroMQ greeting).
static bool
s_raw_garbage (int port, unsigned *seed, int timeout_ms, size_t *bytes_back)
{
    *bytes_back = 0;
    int fd = socket (AF_INET, SOCK_STREAM, 0);
    cr_assert (fd >= 0);
    struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons ((uint16_t) port),
                                .sin_addr.s_addr = htonl (INADDR_LOOPBACK) };
    if (connect (fd, (struct sockaddr *) &addr, sizeof addr) != 0) {
        close (fd);
        return true;        //  nothing listening accepts nothing either
    }
    uint8_t junk [4096];
    for (int chunk = 0; chunk < 4; chunk++) {
        for (size_t i = 0; i < sizeof junk; i++)
            junk [i] = (uint8_t) rand_r (seed);
        if (send (fd, junk, sizeof junk, MSG_NOSIGNAL) < 0)
            break;
    }
    bool closed = false;
    uint64_t deadline = kd_now_ms () + (uint64_t) timeout_ms;
    while (!closed && kd_now_ms () < deadline) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll (&p, 1, 50) <= 0)
            continue;
        ssize_t n = recv (fd, junk, sizeof junk, 0);
        if (n <= 0)
            closed = true;
        else
            *bytes_back += (size_t) n;
    }
    close (fd);
    return closed;
}

//  ---------------------------------------------------------------------
//  Tests

Test (curve, keygen_writes_0600_secrets_and_allowed_dir)
{
    s_keygen ();
    const char *secrets [] = { "server.cert_secret", "client.cert_secret" };
    const char *publics [] = { "server.cert", "client.cert", "allowed/client.cert" };
    char path [700];
    struct stat st;
    for (int i = 0; i < 2; i++) {
        snprintf (path, sizeof path, "%s/%s", s_keys, secrets [i]);
        cr_assert_eq (stat (path, &st), 0, "%s missing", path);
        cr_expect_eq (st.st_mode & 0777, 0600, "%s has mode %03o", path, st.st_mode & 0777);
        cr_expect (S_ISREG (st.st_mode));
    }
    for (int i = 0; i < 3; i++) {
        snprintf (path, sizeof path, "%s/%s", s_keys, publics [i]);
        cr_expect_eq (stat (path, &st), 0, "%s missing", path);
        cr_expect_eq (st.st_mode & 077, 044, "%s should be readable, mode %03o", path, st.st_mode & 0777);
    }
    char *client = s_public_key (KD_CURVE_CLIENT_CERT);
    char *allowed = s_public_key (KD_CURVE_ALLOWED_DIR "/" KD_CURVE_CLIENT_CERT);
    cr_expect_str_eq (client, allowed, "allowed/ does not hold the generated client");
    free (client);
    free (allowed);
    fprintf (stderr, "curve: kudus keygen wrote server.cert_secret and client.cert_secret with mode 0600\n");
    //  A second run never overwrites keys in use.
    char log [600];
    snprintf (log, sizeof log, "%s/keygen2.log", s_dir);
    const char *again [] = { "kudus", "keygen", s_keys, NULL };
    cr_expect_eq (s_run (again, log, 10000), 1);
    cr_expect (kd_test_count (log, "already exists") == 1);
}

Test (curve, missing_or_empty_keys_refuse_to_start)
{
    char missing [600], empty [600], no_clients [600], log [600];
    snprintf (missing, sizeof missing, "%s/nonexistent", s_dir);
    snprintf (empty, sizeof empty, "%s/empty", s_dir);
    mkdir (empty, 0755);
    //  Real keys, but nobody in allowed/.
    s_keygen ();
    const char *listed [] = { KD_CURVE_CLIENT_CERT, "scheduler.cert", "shard.cert", "monitor.cert",
                              "observer.cert", "evaluator.cert" };
    for (size_t i = 0; i < sizeof listed / sizeof listed [0]; i++) {
        snprintf (no_clients, sizeof no_clients, "%s/%s/%s", s_keys, KD_CURVE_ALLOWED_DIR, listed [i]);
        cr_assert_eq (unlink (no_clients), 0, "keygen wrote no %s", no_clients);
    }
    snprintf (no_clients, sizeof no_clients, "%s", s_keys);
    char sched [64], intake [64], pub [64], shard [64], port [16];
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", s_port);
    snprintf (intake, sizeof intake, "tcp://127.0.0.1:%d", s_port + 1);
    snprintf (pub, sizeof pub, "tcp://127.0.0.1:%d", s_port + 2);
    snprintf (shard, sizeof shard, "tcp://127.0.0.1:%d", s_port + 100);
    snprintf (port, sizeof port, "%d", s_port);
    struct {
        const char *argv [16];
        const char *needle;
    } cases [] = {
        { { "kudus-scheduler", "--bind", sched, "--curve", "--keys-dir", missing, NULL },
          "server.cert_secret" },
        { { "kudus-scheduler", "--bind", sched, "--curve", "--keys-dir", empty, NULL },
          "server.cert_secret" },
        { { "kudus-scheduler", "--bind", sched, "--curve", "--keys-dir", no_clients, NULL },
          "no client certificates" },
        { { "kudus-shard", "--bind", shard, "--scheduler", sched, "--curve", "--keys-dir", empty, NULL },
          "server.cert_secret" },
        { { "kudus-monitor", "--bind", intake, "--pub-bind", pub, "--scheduler", sched,
            "--curve", "--keys-dir", missing, NULL }, "server.cert_secret" },
        { { "kudus-worker", "--scheduler", sched, "--monitor", intake, "--curve", "--keys-dir", empty, NULL },
          "client.cert_secret" },
        { { "kudus", "tail", pub, "--curve", "--keys-dir", missing, NULL }, "client.cert_secret" },
        { { "kudus", "local", "--base-port", port, "--curve", "--keys-dir", empty, NULL },
          "client.cert_secret" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases [0]; i++) {
        snprintf (log, sizeof log, "%s/refuse-%zu.log", s_dir, i);
        int rc = s_run (cases [i].argv, log, 15000);
        char *text = kd_test_slurp (log);
        cr_expect_eq (rc, 1, "%s %s should exit 1, got %d: %s", cases [i].argv [0], cases [i].argv [1],
                      rc, text ? text : "");
        cr_expect (text && strstr (text, cases [i].needle) && strstr (text, "curve"),
                   "message for case %zu lacks '%s': %s", i, cases [i].needle, text ? text : "(none)");
        if (text && i == 0)
            fprintf (stderr, "curve: refused start, exit %d: %s", rc, text);
        free (text);
    }
    //  Nothing listens: a refused service never bound its port.
    size_t back;
    unsigned seed = 1;
    cr_expect (s_raw_garbage (s_port, &seed, 500, &back));
}

Test (curve, unauthenticated_clients_get_nothing_through)
{
    s_keygen ();
    char sched [64], intake [64], pub [64], shard [64];
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", s_port);
    snprintf (intake, sizeof intake, "tcp://127.0.0.1:%d", s_port + 1);
    snprintf (pub, sizeof pub, "tcp://127.0.0.1:%d", s_port + 2);
    snprintf (shard, sizeof shard, "tcp://127.0.0.1:%d", s_port + 100);
    char logs [3][600];
    const char *names [] = { "scheduler", "shard", "monitor" };
    for (int i = 0; i < 3; i++)
        snprintf (logs [i], sizeof logs [i], "%s/%s.log", s_dir, names [i]);
    //  ALSP makes the scheduler follow the monitor's stream, so its SUB
    //  is a CURVE client too.
    const char *a_sched [] = { "kudus-scheduler", "--bind", sched, "--shards", "1", "--min-workers", "1",
                               "--consistency", "alsp", "--monitor-pub", pub,
                               "--curve", "--keys-dir", s_keys, "--log-level", "debug", NULL };
    const char *a_shard [] = { "kudus-shard", "--bind", shard, "--scheduler", sched,
                               "--curve", "--keys-dir", s_keys, "--log-level", "debug", NULL };
    const char *a_mon [] = { "kudus-monitor", "--bind", intake, "--pub-bind", pub, "--scheduler", sched,
                             "--curve", "--keys-dir", s_keys, "--log-level", "debug", NULL };
    pid_t pids [3];
    pids [0] = kd_test_spawn (a_sched, logs [0]);
    pids [1] = kd_test_spawn (a_shard, logs [1]);
    pids [2] = kd_test_spawn (a_mon, logs [2]);
    //  Until both have registered over CURVE; on a busy machine that took
    //  longer than the 2 s this test once slept (a flake round).
    uint64_t t0 = kd_now_ms ();
    while (kd_now_ms () - t0 < 30000
       && (kd_test_count (logs [1], "registered") + kd_test_count (logs [0], "join shard") == 0
           || kd_test_count (logs [0], "join monitor") == 0))
        usleep (50 * 1000);
    const char *endpoints [] = { sched, shard, intake };
    const int ports [] = { s_port, s_port + 100, s_port + 1, s_port + 2 };
    bool ok = true;

    //  The shard registered through its CURVE DEALER.
    cr_expect (kd_test_count (logs [1], "registered") + kd_test_count (logs [0], "join shard") > 0,
               "the shard did not register over CURVE");
    //  The scheduler's DEALER to the monitor's intake went through the
    //  handshake too (the scheduler times ALSP's workers itself now, so it
    //  has no SUB on the stream).
    cr_expect (kd_test_count (logs [0], "join monitor") > 0,
               "the monitor did not register over CURVE");

    //  Attack every ROUTER and the PUB, each kind at once, and listen.
    int sent_total = 0, delivered_total = 0;
    unsigned seed = 4242;
    for (s_kind_t kind = 0; kind < S_KINDS; kind++) {
        int sent [4] = { 0 }, delivered [4] = { 0 };
        if (kind == S_RAW) {
            for (int e = 0; e < 4; e++) {
                size_t back = 0;
                bool closed = s_raw_garbage (ports [e], &seed, 3000, &back);
                sent [e] = 1;
                //  Anything beyond a ZMTP greeting (64 bytes) would be an answer.
                delivered [e] = back > 64;
                cr_expect (closed, "port %d kept a garbage connection open", ports [e]);
                cr_expect (back <= 64, "port %d sent %zu bytes back to garbage", ports [e], back);
            }
        }
        else {
            zsock_t *socks [4];
            char name [64];
            snprintf (name, sizeof name, "curve-attacker-%s", s_kind_names [kind]);
            for (int e = 0; e < 3; e++) {
                socks [e] = s_socket (ZMQ_DEALER, kind, NULL, endpoints [e]);
                sent [e] = s_send_rounds (socks [e], e, name, S_ROUNDS);
            }
            socks [3] = s_socket (ZMQ_SUB, kind, NULL, pub);
            //  Replies per socket: drain each one separately to attribute them.
            uint64_t deadline = kd_now_ms () + S_LISTEN_MS;
            while (kd_now_ms () < deadline)
                for (int e = 0; e < 4; e++)
                    delivered [e] += s_drain (&socks [e], 1, 50);
            sent [3] = 1;       //  a subscription
            for (int e = 0; e < 4; e++)
                zsock_destroy (&socks [e]);
        }
        const char *targets [] = { "scheduler ROUTER", "shard ROUTER", "monitor ROUTER", "monitor PUB" };
        for (int e = 0; e < 4; e++) {
            fprintf (stderr, "curve: %-16s %-7s client: delivered %d of %d\n", targets [e],
                     s_kind_names [kind], delivered [e], sent [e]);
            cr_expect_eq (delivered [e], 0, "%s client got %d messages from the %s",
                          s_kind_names [kind], delivered [e], targets [e]);
            sent_total += sent [e];
            delivered_total += delivered [e];
        }
    }
    //  What the services saw: any delivered request or garbage is logged
    //  (a join, an ERROR answer, malformed telemetry) or starts training.
    int seen = kd_test_count (logs [0], "curve-attacker") + kd_test_count (logs [0], "error peer=")
             + kd_test_count (logs [0], "start shards=") + kd_test_count (logs [1], "error peer=")
             + kd_test_count (logs [2], "malformed telemetry") + kd_test_count (logs [2], "error code=");
    cr_expect_eq (seen, 0, "the services logged %d messages from unauthenticated clients", seen);
    delivered_total += seen;
    //  zauth saw the unknown key and turned it away, on every server.
    for (int i = 0; i < 3; i++)
        cr_expect (kd_test_count (logs [i], "zauth: - denied (CURVE)") > 0,
                   "%s: no denied CURVE handshake logged", names [i]);
    fprintf (stderr, "curve: unauthenticated messages delivered %d of %d\n", delivered_total, sent_total);
    ok = ok && delivered_total == 0;

    //  The authorized client, same messages: each must be answered and
    //  logged, so the checks above could see a delivery.
    char err [512];
    kd_curve_t *curve = kd_curve_new_dir (s_keys, KD_CURVE_CLIENT, err, sizeof err);
    cr_assert (curve, "%s", err);
    zsock_t *listener = s_socket (ZMQ_SUB, S_NULL, curve, pub);
    int streamed = s_first_message (listener) ? 1 + s_drain (&listener, 1, 500) : 0;
    zsock_destroy (&listener);
    cr_expect (streamed > 0, "an authorized SUB got nothing from the stream");
    int answered = 0, asked = 0;
    const kd_msg_type_t wants [] = { KD_MSG_WELCOME, KD_MSG_PULL_OK, KD_MSG_HEARTBEAT };
    for (int e = 2; e >= 0; e--) {      //  the scheduler last: a HELLO starts training
        zsock_t *sock = s_socket (ZMQ_DEALER, S_NULL, curve, endpoints [e]);
        zsock_set_rcvtimeo (sock, 3000);
        asked += s_send_rounds (sock, e, "curve-authorized", 1);
        bool got_reply = false, got_error = false;
        for (int i = 0; i < 10 && !(got_reply && got_error); i++) {
            kd_msg_t *msg = NULL;
            if (kd_msg_recv (sock, &msg, NULL, &(kd_msg_err_t) { 0 }) != 0)
                break;
            got_reply |= kd_msg_type (msg) == wants [e];
            got_error |= kd_msg_type (msg) == KD_MSG_ERROR;
            kd_msg_destroy (&msg);
        }
        answered += got_reply + got_error;
        cr_expect (got_reply && got_error, "%s did not answer the authorized client", names [e]);
        zsock_destroy (&sock);
    }
    //  The services log each of those messages as they handle them.
    int logged = 0;
    for (uint64_t t1 = kd_now_ms (); logged < 4 && kd_now_ms () - t1 < 10000; usleep (50 * 1000))
        logged = kd_test_count (logs [0], "curve-authorized") + kd_test_count (logs [0], "error peer=")
               + kd_test_count (logs [1], "error peer=") + kd_test_count (logs [2], "error code=");
    cr_expect (logged >= 4, "the services logged %d of the authorized client's messages", logged);
    fprintf (stderr, "curve: authorized client answered %d of %d, stream messages received %d\n",
             answered, asked, streamed);
    ok = ok && answered == asked && streamed > 0;
    kd_curve_destroy (&curve);

    for (int i = 0; i < 3; i++) {
        bool alive = waitpid (pids [i], NULL, WNOHANG) == 0;
        cr_expect (alive, "%s died", names [i]);
        ok = ok && alive;
        kill (pids [i], SIGTERM);
    }
    for (int i = 0; i < 3; i++) {
        int status = -1;
        bool exited = kd_test_wait (pids [i], 10000, &status);
        kd_test_kill (pids [i]);
        cr_expect (exited && WIFEXITED (status) && WEXITSTATUS (status) == 0,
                   "%s did not exit cleanly (status %d)", names [i], status);
    }
    if (!ok)
        for (int i = 0; i < 3; i++)
            kd_test_dump (logs [i]);
}

//  True while a child runs; unlike waitpid, leaves its status to reap.
static bool
s_running (pid_t pid)
{
    siginfo_t info = { .si_pid = 0 };
    return waitid (P_PID, (id_t) pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0;
}

//  Run kudus local to the end; its summary's test accuracy (NAN on failure).
static double
s_local_accuracy (const char *const *argv, const char *log, const char *summary, pid_t *pid_out,
                  int *rounds, int *sent, int *delivered)
{
    pid_t pid = kd_test_spawn (argv, log);
    if (pid_out)
        *pid_out = pid;
    //  Attack every port in rounds while it trains.
    unsigned seed = 99;
    while (rounds && s_running (pid) && *rounds < 40) {
        char ep [5][64];
        const int ports [] = { s_port, s_port + 100, s_port + 101, s_port + 1, s_port + 2 };
        for (int e = 0; e < 5; e++)
            snprintf (ep [e], sizeof ep [e], "tcp://127.0.0.1:%d", ports [e]);
        const int service [] = { 0, 1, 1, 2 };
        zsock_t *socks [32];
        size_t n = 0;
        for (s_kind_t kind = 0; kind < S_RAW; kind++) {
            for (int e = 0; e < 4; e++) {
                socks [n] = s_socket (ZMQ_DEALER, kind, NULL, ep [e]);
                *sent += s_send_rounds (socks [n++], service [e], "curve-attacker", 1);
            }
            socks [n++] = s_socket (ZMQ_SUB, kind, NULL, ep [4]);
            (*sent)++;
        }
        for (int e = 0; e < 5; e++) {
            size_t back = 0;
            s_raw_garbage (ports [e], &seed, 100, &back);
            (*sent)++;
            *delivered += back > 64;
        }
        *delivered += s_drain (socks, n, 300);
        for (size_t i = 0; i < n; i++)
            zsock_destroy (&socks [i]);
        (*rounds)++;
    }
    int status = -1;
    bool exited = kd_test_wait (pid, 150000, &status);
    kd_test_kill (pid);
    if (!exited || !WIFEXITED (status) || WEXITSTATUS (status) != 0) {
        kd_test_dump (log);
        return NAN;
    }
    char *json = kd_test_slurp (summary);
    double accuracy = kd_test_json_number (json, "test_accuracy");
    cr_expect (kd_test_json_number (json, "workers") == 2, "summary: %s", json ? json : "(none)");
    cr_expect (kd_test_json_number (json, "updates") > 10);
    free (json);
    return accuracy;
}

Test (curve, training_under_attack_reaches_its_usual_accuracy)
{
    s_keygen ();
    char port [16], summary [600], log [600];
    snprintf (port, sizeof port, "%d", s_port);
    //  Plain run first, for the accuracy to match.
    snprintf (summary, sizeof summary, "%s/plain.json", s_dir);
    snprintf (log, sizeof log, "%s/plain.log", s_dir);
    const char *plain [] = { "kudus", "local", "--workers", "2", "--shards", "2", "--epochs", "1",
                             "--base-port", port, "--summary", summary, "--quiet", NULL };
    double plain_acc = s_local_accuracy (plain, log, summary, NULL, NULL, NULL, NULL);
    cr_assert (!isnan (plain_acc), "plain run failed");

    snprintf (summary, sizeof summary, "%s/curve.json", s_dir);
    snprintf (log, sizeof log, "%s/curve.log", s_dir);
    const char *secure [] = { "kudus", "local", "--workers", "2", "--shards", "2", "--epochs", "1",
                              "--base-port", port, "--summary", summary, "--curve", "--keys-dir", s_keys,
                              "--log-level", "debug", NULL };
    int rounds = 0, sent = 0, delivered = 0;
    double curve_acc = s_local_accuracy (secure, log, summary, NULL, &rounds, &sent, &delivered);
    cr_assert (!isnan (curve_acc), "CURVE run failed");
    int seen = kd_test_count (log, "curve-attacker") + kd_test_count (log, "error peer=")
             + kd_test_count (log, "malformed telemetry") + kd_test_count (log, "error code=");
    int denied = kd_test_count (log, "zauth: - denied (CURVE)");
    int curve_on = kd_test_count (log, "curve on keys=");
    fprintf (stderr, "curve: training under attack: %d rounds, unauthenticated messages delivered %d of %d "
             "(%d seen in the logs, %d handshakes denied by zauth)\n", rounds, delivered, sent, seen, denied);
    fprintf (stderr, "curve: test accuracy %.4f with CURVE under attack, %.4f without (1 epoch, 2 workers, BSP)\n",
             curve_acc, plain_acc);
    cr_expect (rounds > 0, "the run ended before any attack");
    cr_expect_eq (delivered, 0);
    cr_expect_eq (seen, 0, "the services logged %d unauthenticated messages", seen);
    cr_expect (denied > 0, "zauth denied nothing, so the attacks never reached it");
    cr_expect (curve_on >= 6, "only %d of 6 services reported curve on", curve_on);
    cr_expect (curve_acc > 0.75, "accuracy %.4f with CURVE", curve_acc);
    cr_expect (fabs (curve_acc - plain_acc) < 0.03, "accuracy %.4f with CURVE, %.4f without",
               curve_acc, plain_acc);
}

Test (curve, local_makes_temporary_keys_and_removes_them)
{
    char port [16], summary [600], log [600];
    snprintf (port, sizeof port, "%d", s_port);
    snprintf (summary, sizeof summary, "%s/temp.json", s_dir);
    snprintf (log, sizeof log, "%s/temp.log", s_dir);
    const char *argv [] = { "kudus", "local", "--workers", "2", "--shards", "1", "--epochs", "0.3",
                            "--base-port", port, "--summary", summary, "--curve", NULL };
    double acc = s_local_accuracy (argv, log, summary, NULL, NULL, NULL, NULL);
    cr_expect (acc > 0.6, "accuracy %.4f with temporary keys", acc);
    //  The keys dir it made is named in the services' logs, and is gone.
    char *text = kd_test_slurp (log);
    const char *p = text ? strstr (text, "curve on keys=") : NULL;
    cr_assert (p, "no service reported curve on");
    char dir [256];
    cr_assert (sscanf (p, "curve on keys=%255s", dir) == 1);
    struct stat st;
    //  Under $TMPDIR (the suite's scratch folder), named for what it is.
    char want [1100];
    snprintf (want, sizeof want, "%s/kudus-keys-", kd_temp_base ());
    cr_expect (strncmp (dir, want, strlen (want)) == 0, "keys at %s, not under %s", dir, want);
    cr_expect_neq (stat (dir, &st), 0, "temporary keys %s left behind", dir);
    free (text);
}

//  ---------------------------------------------------------------------
//  Roles bound to keys

//  Send msg with a key of role (or with cert) and return the ERROR code of
//  the answer, 0 for another answer, -1 for none.
static int
s_try (kd_curve_t *curve, const char *endpoint, kd_msg_t *msg)
{
    zsock_t *sock = s_socket (ZMQ_DEALER, S_NULL, curve, endpoint);
    zsock_set_rcvtimeo (sock, 3000);
    zsock_set_sndtimeo (sock, 3000);
    kd_msg_send (&msg, sock);
    kd_msg_t *reply = NULL;
    kd_msg_err_t err;
    int code = -1;
    if (kd_msg_recv (sock, &reply, NULL, &err) == 0)
        code = kd_msg_type (reply) == KD_MSG_ERROR ? (int) kd_msg_uint (reply, KD_F_CODE) : 0;
    kd_msg_destroy (&reply);
    zsock_destroy (&sock);
    return code;
}

static kd_msg_t *
s_hello (const char *role, const char *name)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (msg, KD_F_ROLE, role);
    kd_msg_set_str (msg, KD_F_NAME, name);
    kd_msg_set_uint (msg, KD_F_SAMPLES, 60000);
    if (!strcmp (role, "shard"))
        kd_msg_set_str (msg, KD_F_ENDPOINT, "tcp://127.0.0.1:1");
    return msg;
}

//  A message as a replica's forward down a chain (role "shard").
static kd_msg_t *
s_forward (kd_msg_t *msg)
{
    kd_msg_set_str (msg, KD_F_ROLE, "shard");
    if (kd_msg_type (msg) == KD_MSG_SYNC)
        kd_msg_set_str (msg, KD_F_KIND, "end");
    return msg;
}

//  A RELAY bundling one HEARTBEAT, as a barrier aggregator would send it.
static kd_msg_t *
s_relay (void)
{
    kd_bundle_t *bundle = kd_bundle_new ();
    kd_msg_t *beat = kd_msg_new (KD_MSG_HEARTBEAT);
    zframe_t *id = zframe_new ("W1", 2);
    kd_msg_source_t src = { .fd = -1, .role = "worker" };
    kd_bundle_add_msg (bundle, id, &src, beat);
    kd_msg_t *relay = kd_bundle_take (bundle);
    kd_msg_destroy (&beat);
    zframe_destroy (&id);
    kd_bundle_destroy (&bundle);
    return relay;
}

static kd_msg_t *
s_with (kd_msg_type_t type)
{
    kd_msg_t *msg = kd_msg_new (type);
    uint64_t zero = 0;
    double one = 1;
    switch (type) {
        case KD_MSG_COMMIT:
            kd_msg_set_uint (msg, KD_F_VERSION, 1);
            kd_msg_set_uints (msg, KD_F_RANKS, &zero, 1);
            kd_msg_set_uints (msg, KD_F_CLOCKS, &zero, 1);
            kd_msg_set_floats (msg, KD_F_WEIGHTS, &one, 1);
            break;
        case KD_MSG_EVAL_OK:
            kd_msg_set_uint (msg, KD_F_VERSION, 0);
            kd_msg_set_float (msg, KD_F_ACCURACY, 0.99);
            break;
        case KD_MSG_COMMIT_OK:
        case KD_MSG_PULL:
            kd_msg_set_uint (msg, KD_F_VERSION, 0);
            break;
        case KD_MSG_TELEMETRY:
            kd_msg_set_uint (msg, KD_F_RANK, 0);
            kd_msg_set_uint (msg, KD_F_CLOCK, 0);
            break;
        case KD_MSG_ARRIVE:
            kd_msg_set_uint (msg, KD_F_CLOCK, 0);
            kd_msg_set_uint (msg, KD_F_BASE, 0);
            kd_msg_set_uint (msg, KD_F_SAMPLES, 0);
            break;
        case KD_MSG_REPORT:
            kd_msg_set_uint (msg, KD_F_VERSION, 0);
            kd_msg_set_str (msg, KD_F_METRIC, "accuracy");
            kd_msg_set_float (msg, KD_F_VALUE, 0.99);
            break;
        case KD_MSG_INIT:
        case KD_MSG_PUSH: {
            if (type == KD_MSG_PUSH) {
                kd_msg_set_uint (msg, KD_F_RANK, 0);
                kd_msg_set_uint (msg, KD_F_CLOCK, 0);
                kd_msg_set_uint (msg, KD_F_BASE, 0);
            }
            kd_msg_set_uint (msg, KD_F_LO, 0);
            zframe_t *data = zframe_new (NULL, 7850 * sizeof (float));
            memset (zframe_data (data), 0, zframe_size (data));
            kd_msg_set_data (msg, &data);
            break;
        }
        default:
            break;
    }
    return msg;
}

Test (curve, each_key_acts_only_in_its_role)
{
    s_keygen ();
    char sched [64], intake [64], pub [64], shard [64], log [600];
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", s_port);
    snprintf (intake, sizeof intake, "tcp://127.0.0.1:%d", s_port + 1);
    snprintf (pub, sizeof pub, "tcp://127.0.0.1:%d", s_port + 2);
    snprintf (shard, sizeof shard, "tcp://127.0.0.1:%d", s_port + 100);
    snprintf (log, sizeof log, "%s/services.log", s_dir);
    const char *a_sched [] = { "kudus-scheduler", "--bind", sched, "--shards", "1", "--min-workers", "4",
                               "--model", "softmax", "--curve", "--keys-dir", s_keys, NULL };
    const char *a_shard [] = { "kudus-shard", "--bind", shard, "--scheduler", sched,
                               "--curve", "--keys-dir", s_keys, NULL };
    const char *a_mon [] = { "kudus-monitor", "--bind", intake, "--pub-bind", pub, "--scheduler", sched,
                             "--publish-ms", "100", "--curve", "--keys-dir", s_keys, NULL };
    pid_t pids [3];
    pids [0] = kd_test_spawn (a_sched, log);
    pids [1] = kd_test_spawn (a_shard, log);
    pids [2] = kd_test_spawn (a_mon, log);
    //  Until the shard and the monitor have registered with their keys
    //  (a fixed 2 s was too short on a busy machine).
    kd_test_wait_count (log, "join shard", 1, 30000);
    kd_test_wait_count (log, "join monitor", 1, 30000);
    char err [512];
    const char *roles [] = { "worker", "shard", "monitor", "observer", "evaluator" };
    kd_curve_t *key [5];
    for (int i = 0; i < 5; i++) {
        key [i] = kd_curve_new_as (s_keys, KD_CURVE_CLIENT, roles [i], err, sizeof err);
        cr_assert (key [i], "%s", err);
    }
    kd_curve_t *worker = key [0], *shard_key = key [1], *monitor_key = key [2], *observer = key [3];
    kd_curve_t *evaluator = key [4];
    //  The services registered with their own keys, so the shard serves.
    cr_assert_eq (s_try (worker, shard, s_with (KD_MSG_PULL)), 0, "the shard did not register");
    struct {
        const char *what;
        int code;
    } tried [] = {
        { "worker key registers as a shard", s_try (worker, sched, s_hello ("shard", "fake-shard")) },
        { "worker key registers as a monitor", s_try (worker, sched, s_hello ("monitor", "fake-mon")) },
        { "worker key sends COMMIT to a shard", s_try (worker, shard, s_with (KD_MSG_COMMIT)) },
        { "worker key asks a shard for STATS", s_try (worker, shard, s_with (KD_MSG_STATS)) },
        { "worker key sends EVAL_OK to the scheduler", s_try (worker, sched, s_with (KD_MSG_EVAL_OK)) },
        { "worker key sends COMMIT_OK to the scheduler", s_try (worker, sched, s_with (KD_MSG_COMMIT_OK)) },
        { "worker key relays for other workers (RELAY)", s_try (worker, sched, s_relay ()) },
        { "shard key relays for workers (RELAY)", s_try (shard_key, sched, s_relay ()) },
        { "shard key pushes a gradient", s_try (shard_key, shard, s_with (KD_MSG_PUSH)) },
        { "worker key forwards a write as a replica", s_try (worker, shard, s_forward (s_with (KD_MSG_PUSH))) },
        { "worker key sends a replica's state", s_try (worker, shard, s_forward (s_with (KD_MSG_SYNC))) },
        { "shard key registers as a worker", s_try (shard_key, sched, s_hello ("worker", "fake-w1")) },
        { "monitor key sends TELEMETRY", s_try (monitor_key, intake, s_with (KD_MSG_TELEMETRY)) },
        { "observer key registers as a worker", s_try (observer, sched, s_hello ("worker", "fake-w2")) },
        { "observer key sends a HEARTBEAT", s_try (observer, sched, s_with (KD_MSG_HEARTBEAT)) },
        { "observer key pulls the model", s_try (observer, shard, s_with (KD_MSG_PULL)) },
        { "observer key sends TELEMETRY", s_try (observer, intake, s_with (KD_MSG_TELEMETRY)) },
        { "observer key reports an evaluation", s_try (observer, intake, s_with (KD_MSG_REPORT)) },
        //  An evaluator pulls and reports, nothing else.
        { "evaluator key pushes a gradient", s_try (evaluator, shard, s_with (KD_MSG_PUSH)) },
        { "evaluator key seeds the model (INIT)", s_try (evaluator, shard, s_with (KD_MSG_INIT)) },
        { "evaluator key arrives at the barrier", s_try (evaluator, sched, s_with (KD_MSG_ARRIVE)) },
        { "evaluator key registers as a worker", s_try (evaluator, sched, s_hello ("worker", "fake-w3")) },
        { "evaluator key sends TELEMETRY", s_try (evaluator, intake, s_with (KD_MSG_TELEMETRY)) },
        { "evaluator key sends EVAL_OK to the scheduler", s_try (evaluator, sched, s_with (KD_MSG_EVAL_OK)) },
        { "worker key reports an evaluation", s_try (worker, intake, s_with (KD_MSG_REPORT)) },
    };
    int n = (int) (sizeof tried / sizeof tried [0]), refused = 0;
    for (int i = 0; i < n; i++) {
        cr_expect_eq (tried [i].code, KD_ERR_FORBIDDEN, "%s: answered %d, not 403", tried [i].what, tried [i].code);
        refused += tried [i].code == KD_ERR_FORBIDDEN;
    }
    //  What an evaluator may do: register as one, pull, and report (which
    //  has no answer).
    cr_expect_eq (s_try (evaluator, sched, s_hello ("evaluator", "an-evaluator")), 0,
                  "the evaluator key could not register as an evaluator");
    cr_expect_eq (s_try (evaluator, shard, s_with (KD_MSG_PULL)), 0, "the evaluator key could not pull");
    cr_expect_eq (s_try (evaluator, intake, s_with (KD_MSG_REPORT)), -1, "the evaluator's report was answered");
    //  ... and a report without a metric's name is malformed, to anyone.
    kd_msg_t *nameless = s_with (KD_MSG_REPORT);
    kd_msg_set_str (nameless, KD_F_METRIC, "");
    cr_expect_eq (s_try (evaluator, intake, nameless), KD_ERR_MALFORMED, "a nameless metric was taken");
    //  Each refusal names the key in the log.
    char *worker_key = s_public_key (KD_CURVE_CLIENT_CERT);
    char *observer_key = s_public_key ("observer.cert");
    cr_expect_geq (kd_test_count (log, worker_key), 6, "refusals of the worker key not logged with it");
    cr_expect_geq (kd_test_count (log, observer_key), 4, "refusals of the observer key not logged with it");
    //  A name belongs to the key that registered it first.
    cr_expect_eq (s_try (worker, sched, s_hello ("worker", "squatted")), 0);
    zcert_t *other = zcert_new ();
    zcert_set_meta (other, "role", "worker");
    char path [700];
    snprintf (path, sizeof path, "%s/allowed/second-worker.cert", s_keys);
    cr_assert_eq (zcert_save_public (other, path), 0);
    snprintf (path, sizeof path, "%s/second-worker.cert", s_keys);
    cr_assert_eq (zcert_save (other, path), 0);
    zclock_sleep (1100);        //  the certificate store rereads its directory
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    zsock_set_rcvtimeo (sock, 3000);
    zsock_set_linger (sock, 0);
    zcert_apply (other, sock);
    char *server_key = s_public_key (KD_CURVE_SERVER_CERT);
    zsock_set_curve_serverkey (sock, server_key);
    zsock_connect (sock, "%s", sched);
    kd_msg_t *hello = s_hello ("worker", "squatted");
    kd_msg_send (&hello, sock);
    kd_msg_t *reply = NULL;
    kd_msg_err_t merr;
    int squat = kd_msg_recv (sock, &reply, NULL, &merr) == 0 && kd_msg_type (reply) == KD_MSG_ERROR
              ? (int) kd_msg_uint (reply, KD_F_CODE) : -1;
    kd_msg_destroy (&reply);
    cr_expect_eq (squat, KD_ERR_FORBIDDEN, "another key took a registered name (answer %d)", squat);
    refused += squat == KD_ERR_FORBIDDEN;
    //  ... but that key registers a name of its own.
    hello = s_hello ("worker", "second");
    kd_msg_send (&hello, sock);
    cr_expect (kd_msg_recv (sock, &reply, NULL, &merr) == 0 && kd_msg_type (reply) == KD_MSG_WELCOME);
    kd_msg_destroy (&reply);
    zsock_destroy (&sock);
    zcert_destroy (&other);
    //  The observer reads the stream.
    zsock_t *listener = s_socket (ZMQ_SUB, S_NULL, observer, pub);
    int streamed = s_first_message (listener) ? 1 : 0;
    zsock_destroy (&listener);
    cr_expect (streamed > 0, "the observer got nothing from the stream");
    printf ("FIGURE curve: forbidden role actions refused %d of %d (403, key logged); "
            "the observer key reads the stream\n", refused, n + 1);
    free (server_key);
    free (worker_key);
    free (observer_key);
    for (int i = 0; i < 5; i++)
        kd_curve_destroy (&key [i]);
    for (int i = 0; i < 3; i++)
        kd_test_kill (pids [i]);
}
