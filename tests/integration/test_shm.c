/*  Shared memory between a worker and a shard on one host, on the real
    binaries.

    - Values pushed and pulled through shared memory equal the same values
      over TCP, bit for bit, and the shard counts them; bad offsets and
      unattached peers get ERROR with "shm": 1, and the shard keeps serving.
    - A shard under --no-shm declines, and a real worker trains over TCP.
    - kill -9 of a worker leaves no mapping in the shard; kill -9 of a shard
      leaves none in the worker; the restarted peers attach again.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kd_internal.h"
#include "kd_half.h"
#include "kd_shmlink.h"
#include "kd_testutil.h"

#define S_PARAMS    7850        //  softmax parameters, one shard: 31 KB

static char *s_dir;
static int s_port;
static kd_test_procs_t s_procs;      //  started here, killed at teardown
static char s_sched [64], s_shard [64], s_monitor [64], s_log [256], s_ckpt [256];

static void
setup (void)
{
    s_dir = kd_test_tmpdir ();
    cr_assert (s_dir);
    s_port = kd_test_base_port ();
    memset (&s_procs, 0, sizeof s_procs);
    snprintf (s_sched, sizeof s_sched, "tcp://127.0.0.1:%d", s_port);
    snprintf (s_shard, sizeof s_shard, "tcp://127.0.0.1:%d", s_port + 100);
    snprintf (s_monitor, sizeof s_monitor, "tcp://127.0.0.1:%d", s_port + 1);
    snprintf (s_log, sizeof s_log, "%s/services.log", s_dir);
    snprintf (s_ckpt, sizeof s_ckpt, "%s/ckpt", s_dir);
}

static void
teardown (void)
{
    kd_test_procs_kill (&s_procs);
    free (s_dir);
}

TestSuite (shm, .init = setup, .fini = teardown, .timeout = 200);

static pid_t
s_spawn (const char *const *argv)
{
    pid_t pid = kd_test_procs_spawn (&s_procs, argv, s_log);
    cr_assert (pid > 0);
    return pid;
}

//  The next message of a type, skipping others; NULL after the timeout.
static kd_msg_t *
s_recv_type (zsock_t *sock, kd_msg_type_t type)
{
    for (int i = 0; i < 1000; i++) {
        kd_msg_t *msg = kd_test_recv (sock);
        if (!msg || kd_msg_type (msg) == type)
            return msg;
        kd_msg_destroy (&msg);
    }
    return NULL;
}

//  A shard's counters; false when it does not answer.
static bool
s_stats (const char *endpoint, uint64_t counters [KD_SC_COUNT])
{
    zsock_t *sock = kd_test_dealer (endpoint);
    kd_msg_t *req = kd_msg_new (KD_MSG_STATS);
    kd_msg_send (&req, sock);
    kd_msg_t *reply = s_recv_type (sock, KD_MSG_STATS_OK);
    zsock_destroy (&sock);
    if (!reply)
        return false;
    size_t n = 0;
    const uint64_t *c = kd_msg_uints (reply, KD_F_COUNTERS, &n);
    cr_assert_eq (n, KD_SC_COUNT);
    memcpy (counters, c, n * sizeof (uint64_t));
    kd_msg_destroy (&reply);
    return true;
}

//  Wait until the shard reports this many attached workers.
static bool
s_wait_attached (const char *endpoint, uint64_t want, int timeout_ms)
{
    uint64_t c [KD_SC_COUNT];
    for (int waited = 0; waited < timeout_ms; waited += 100) {
        if (s_stats (endpoint, c) && c [KD_SC_SHM_PEERS] == want)
            return true;
        zclock_sleep (100);
    }
    return false;
}

//  Lines of /proc/<pid>/maps that map a region named name.
static int
s_mappings (pid_t pid, const char *name)
{
    char path [64];
    snprintf (path, sizeof path, "/proc/%d/maps", (int) pid);
    char *maps = kd_test_slurp (path);
    cr_assert (maps, "cannot read %s", path);
    int n = 0;
    for (const char *p = maps; (p = strstr (p, name)); p++)
        n++;
    free (maps);
    return n;
}

//  Wait up to 5 s for pid to map name exactly want times: the shard counts
//  a worker attached when it answers SHM, and the worker maps the shard's
//  snapshot when that answer arrives, a moment later on a busy machine.
static int
s_mappings_become (pid_t pid, const char *name, int want)
{
    int n = s_mappings (pid, name);
    for (int i = 0; i < 100 && n != want; i++) {
        zclock_sleep (50);
        n = s_mappings (pid, name);
    }
    return n;
}

static void
s_start_scheduler (const char *consistency)
{
    const char *argv [] = { "kudus-scheduler", "--bind", s_sched, "--shards", "1", "--min-workers", "1",
                            "--model", "softmax", "--consistency", consistency, "--optimizer", "sgd",
                            "--momentum", "0", "--lr", "0.5", "--max-seconds", "150",
                            "--log-level", "debug", NULL };
    s_spawn (argv);
}

static pid_t
s_start_shard (const char *extra)
{
    const char *argv [] = { "kudus-shard", "--bind", s_shard, "--scheduler", s_sched, "--name", "shard-0",
                            "--checkpoint-dir", s_ckpt, "--checkpoint-every", "10", extra, NULL };
    return s_spawn (argv);
}

static pid_t
s_start_worker (void)
{
    const char *argv [] = { "kudus-worker", "--scheduler", s_sched, "--monitor", s_monitor,
                            "--name", "worker-0", "--delay-ms", "5", "--request-timeout-ms", "1000", NULL };
    return s_spawn (argv);
}

//  Wait until the shard serves pulls (it has registered).
static void
s_wait_serving (void)
{
    for (int i = 0; i < 100; i++) {
        if (kd_test_shard_version (s_shard, 200) >= 0)
            return;
        zclock_sleep (100);
    }
    kd_test_dump (s_log);
    cr_assert_fail ("the shard never served a pull");
}

//  PULL through TCP (shm false) or shared memory into params; the version.
static uint64_t
s_pull (zsock_t *sock, kd_shmlink_t *link, float *params)
{
    kd_msg_t *req = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (req, KD_F_VERSION, 0);
    if (link)
        kd_msg_set_uint (req, KD_F_SHM, 1);
    kd_msg_send (&req, sock);
    kd_msg_t *reply = s_recv_type (sock, KD_MSG_PULL_OK);
    cr_assert (reply, "no PULL_OK");
    if (link) {
        cr_assert_eq (kd_msg_uint (reply, KD_F_SHM), 1, "answered by TCP");
        cr_assert_null (kd_msg_data (reply));
        cr_assert_eq (kd_shmlink_read (link, reply, params, S_PARAMS), 0);
    }
    else {
        size_t n = 0;
        const float *data = kd_msg_data_floats (reply, &n);
        cr_assert_eq (n, S_PARAMS);
        memcpy (params, data, n * sizeof (float));
    }
    uint64_t version = kd_msg_uint (reply, KD_F_VERSION);
    kd_msg_destroy (&reply);
    return version;
}

//  PULL in a 16-bit dtype into out (when not NULL); the version.
static uint64_t
s_pull_half (zsock_t *sock, uint64_t dtype, uint16_t *out)
{
    kd_msg_t *req = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (req, KD_F_VERSION, 0);
    kd_msg_set_uint (req, KD_F_DTYPE, dtype);
    kd_msg_send (&req, sock);
    kd_msg_t *reply = s_recv_type (sock, KD_MSG_PULL_OK);
    cr_assert (reply, "no PULL_OK");
    cr_assert_eq (kd_msg_uint (reply, KD_F_DTYPE), dtype);
    zframe_t *data = kd_msg_data (reply);
    cr_assert (data && zframe_size (data) == S_PARAMS * 2);
    if (out)
        memcpy (out, zframe_data (data), S_PARAMS * 2);
    uint64_t version = kd_msg_uint (reply, KD_F_VERSION);
    kd_msg_destroy (&reply);
    return version;
}

static kd_msg_t *
s_push_msg (uint64_t clock)
{
    kd_msg_t *req = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (req, KD_F_RANK, 0);
    kd_msg_set_uint (req, KD_F_CLOCK, clock);
    kd_msg_set_uint (req, KD_F_BASE, 0);
    kd_msg_set_uint (req, KD_F_LO, 0);
    kd_msg_set_uint (req, KD_F_SAMPLES, 32);
    return req;
}

//  PUSH g through shared memory at offset; the reply.
static kd_msg_t *
s_push_shm (zsock_t *sock, uint64_t clock, uint64_t offset, size_t count)
{
    kd_msg_t *req = s_push_msg (clock);
    kd_msg_set_uint (req, KD_F_COUNT, count);
    kd_msg_set_uint (req, KD_F_SHM, 1);
    kd_msg_set_uint (req, KD_F_OFFSET, offset);
    kd_msg_send (&req, sock);
    return kd_test_recv (sock);
}

Test (shm, push_and_pull_through_shared_memory_equal_tcp)
{
    s_start_scheduler ("asp");
    s_start_shard (NULL);
    s_wait_serving ();
    zsock_t *tcp = kd_test_dealer (s_shard), *shm = kd_test_dealer (s_shard);
    kd_shmlink_t *link = kd_shmlink_new (S_PARAMS, 2);
    cr_assert (link);
    kd_msg_t *offer = kd_shmlink_offer (link);
    kd_msg_send (&offer, shm);
    kd_msg_t *answer = kd_test_recv (shm);
    char why [192] = "";
    cr_assert (answer && kd_shmlink_accept (link, answer, why, sizeof why) == 0, "attach: %s", why);
    kd_msg_destroy (&answer);
    cr_assert (s_wait_attached (s_shard, 1, 5000));

    float *p0 = (float *) malloc (S_PARAMS * sizeof (float)), *q = (float *) malloc (S_PARAMS * sizeof (float));
    float *p1 = (float *) malloc (S_PARAMS * sizeof (float)), *p2 = (float *) malloc (S_PARAMS * sizeof (float));
    uint64_t v0 = s_pull (tcp, NULL, p0);
    cr_expect_eq (s_pull (shm, link, q), v0);
    cr_expect (memcmp (p0, q, S_PARAMS * sizeof (float)) == 0, "a shared-memory pull differs from TCP");

    //  The same gradient once through shared memory, once through TCP (ASP
    //  applies each at once, plain SGD): equal steps.
    float *g = kd_shmlink_slot (link, 1);
    for (size_t i = 0; i < S_PARAMS; i++)
        g [i] = (float) ((int) (i % 17) - 8) / 64.0f;
    kd_msg_t *ok = s_push_shm (shm, 1, kd_shmlink_offset (link, 1), S_PARAMS);
    cr_assert (ok && kd_msg_type (ok) == KD_MSG_PUSH_OK, "%s", ok ? kd_msg_str (ok, KD_F_REASON) : "no reply");
    kd_msg_destroy (&ok);
    //  Changing the region after PUSH_OK changes nothing the shard holds.
    g [0] = 1e9f;
    cr_expect_eq (s_pull (tcp, NULL, p1), v0 + 1);
    //  A 16-bit pull now fills the shard's cache of this version.
    cr_expect_eq (s_pull_half (tcp, KD_DTYPE_F16, NULL), v0 + 1);
    cr_expect_eq (s_pull (shm, link, q), v0 + 1);
    cr_expect (memcmp (p1, q, S_PARAMS * sizeof (float)) == 0);
    g [0] = -8.0f / 64.0f;
    kd_msg_t *req = s_push_msg (2);
    zframe_t *data = zframe_new (g, S_PARAMS * sizeof (float));
    kd_msg_set_data (req, &data);
    kd_msg_send (&req, tcp);
    ok = kd_test_recv (tcp);
    cr_assert (ok && kd_msg_type (ok) == KD_MSG_PUSH_OK);
    kd_msg_destroy (&ok);
    cr_expect_eq (s_pull (shm, link, p2), v0 + 2);
    //  ... and after the next version it serves that one, not its cache.
    uint16_t *h = (uint16_t *) malloc (S_PARAMS * sizeof (uint16_t)), *want = (uint16_t *) malloc (S_PARAMS * 2);
    for (int d = 0; d < 2; d++) {
        uint64_t dtype = d ? KD_DTYPE_BF16 : KD_DTYPE_F16;
        cr_expect_eq (s_pull_half (tcp, dtype, h), v0 + 2);
        if (d)
            kd_bf16_from_float (want, p2, S_PARAMS);
        else
            kd_half_from_float (want, p2, S_PARAMS);
        cr_expect (memcmp (h, want, S_PARAMS * 2) == 0, "a %s pull is not the current version", kd_dtype_name (dtype));
    }
    free (h);
    free (want);
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < S_PARAMS; i++) {
        double d = fabs ((double) (p1 [i] - p0 [i]) - (double) (p2 [i] - p1 [i]));
        if (d > worst) {
            worst = d;
            at = i;
        }
    }
    cr_expect (worst < 1e-6, "the two steps differ by %g at %zu: %g %g %g", worst, at, p0 [at], p1 [at], p2 [at]);
    cr_expect (p1 [5] != p0 [5], "the shared-memory push was not applied");

    //  Bad requests: answered with ERROR "shm": 1; the shard keeps serving.
    ok = s_push_shm (shm, 3, 1ull << 40, S_PARAMS);
    cr_expect (ok && kd_msg_type (ok) == KD_MSG_ERROR && kd_msg_uint (ok, KD_F_SHM) == 1);
    cr_expect (ok && strstr (kd_msg_str (ok, KD_F_REASON), "outside"));
    kd_msg_destroy (&ok);
    ok = s_push_shm (tcp, 3, 0, S_PARAMS);
    cr_expect (ok && kd_msg_type (ok) == KD_MSG_ERROR && kd_msg_uint (ok, KD_F_SHM) == 1);
    cr_expect (ok && strstr (kd_msg_str (ok, KD_F_REASON), "not attached"));
    kd_msg_destroy (&ok);
    //  An offer with a wrong token, or from another host, is declined.
    offer = kd_shmlink_offer (link);
    kd_msg_set_uint (offer, KD_F_TOKEN, kd_msg_uint (offer, KD_F_TOKEN) ^ 1);
    kd_msg_send (&offer, tcp);
    answer = kd_test_recv (tcp);
    cr_expect (answer && kd_msg_type (answer) == KD_MSG_ERROR && kd_msg_uint (answer, KD_F_SHM) == 1);
    cr_expect (answer && strstr (kd_msg_str (answer, KD_F_REASON), "token"));
    kd_msg_destroy (&answer);
    offer = kd_shmlink_offer (link);
    kd_msg_set_str (offer, KD_F_HOST, "another-boot/pid:[1]");
    kd_msg_send (&offer, tcp);
    answer = kd_test_recv (tcp);
    cr_expect (answer && strstr (kd_msg_str (answer, KD_F_REASON), "another host"));
    kd_msg_destroy (&answer);
    cr_expect_eq (s_pull (tcp, NULL, q), v0 + 2);

    uint64_t c [KD_SC_COUNT];
    cr_assert (s_stats (s_shard, c));
    cr_expect_eq (c [KD_SC_SHM_PEERS], 1);
    cr_expect_eq (c [KD_SC_SHM_BYTES_IN], S_PARAMS * sizeof (float));
    cr_expect_eq (c [KD_SC_SHM_BYTES_OUT], 3 * S_PARAMS * sizeof (float), "%llu bytes out", (unsigned long long) c [KD_SC_SHM_BYTES_OUT]);
    //  Our region goes away with the link; the shard sees our process is
    //  still here, so it keeps the mapping until we exit or attach again.
    kd_shmlink_destroy (&link);
    free (p0); free (p1); free (p2); free (q);
    zsock_destroy (&tcp);
    zsock_destroy (&shm);
}

Test (shm, a_no_shm_shard_declines_and_a_worker_trains_on_tcp)
{
    s_start_scheduler ("bsp");
    s_start_shard ("--no-shm");
    s_wait_serving ();
    s_start_worker ();
    int64_t v = -1;
    for (int i = 0; i < 100 && v < 20; i++) {
        zclock_sleep (100);
        v = kd_test_shard_version (s_shard, 500);
    }
    cr_expect (v >= 20, "training did not go on over TCP (version %lld)", (long long) v);
    uint64_t c [KD_SC_COUNT];
    cr_assert (s_stats (s_shard, c));
    cr_expect_eq (c [KD_SC_SHM_PEERS], 0);
    cr_expect_eq (c [KD_SC_SHM_BYTES_IN], 0);
    cr_expect_gt (kd_test_count (s_log, "staying on TCP"), 0, "the worker did not log its fallback");
    cr_expect_gt (kd_test_count (s_log, "--no-shm"), 0);
}

Test (shm, kill_9_leaves_no_mapping_and_peers_attach_again)
{
    s_start_scheduler ("bsp");
    pid_t shard = s_start_shard (NULL);
    s_wait_serving ();
    pid_t worker = s_start_worker ();
    cr_assert (s_wait_attached (s_shard, 1, 15000), "the worker never attached");
    cr_expect_eq (s_mappings_become (shard, "kudus-worker-push", 1), 1);
    cr_expect_eq (s_mappings_become (worker, "kudus-shard-snapshot", 1), 1);

    //  The worker dies: the shard lets go of its region.
    kill (worker, SIGKILL);
    cr_expect (s_wait_attached (s_shard, 0, 5000), "the shard kept a dead worker's mapping");
    cr_expect_eq (s_mappings_become (shard, "kudus-worker-push", 0), 0);
    //  A restarted worker attaches again and training goes on.
    worker = s_start_worker ();
    cr_assert (s_wait_attached (s_shard, 1, 15000), "the restarted worker never attached");
    int64_t before = kd_test_shard_version (s_shard, 1000);

    //  The shard dies: the worker lets go of its snapshot, and attaches to
    //  the restarted shard.
    kill (shard, SIGKILL);
    waitpid (shard, NULL, 0);
    shard = s_start_shard (NULL);
    bool again = false;
    for (int i = 0; i < 150 && !again; i++) {
        zclock_sleep (100);
        uint64_t c [KD_SC_COUNT];
        again = s_stats (s_shard, c) && c [KD_SC_SHM_PEERS] == 1 && c [KD_SC_SHM_BYTES_IN] > 0;
    }
    if (!again)
        kd_test_dump (s_log);
    cr_assert (again, "the worker never attached to the restarted shard");
    cr_expect_eq (s_mappings_become (worker, "kudus-shard-snapshot", 1), 1, "the dead shard's snapshot is still mapped");
    cr_expect_eq (s_mappings_become (shard, "kudus-worker-push", 1), 1);
    int64_t after = -1;
    for (int i = 0; i < 100 && after <= before; i++) {
        zclock_sleep (100);
        after = kd_test_shard_version (s_shard, 1000);
    }
    cr_expect_gt (after, before, "training did not go on");
    //  memfds have no name in any file system: nothing to clean in /dev/shm.
    cr_expect_eq (system ("ls /dev/shm 2>/dev/null | grep -q kudus"), 256);
}
