/*  The short phase path (--phase-path short, protocol 9.3.1) on the real
    binaries.

    - A real scheduler with two fake shards and a fake worker: an ARRIVE
      marked `staged` is held until both ranges sent STAGED for it, and
      only then committed and released; STAGED that comes first is kept; a
      range's refusal drops the gradient; an ARRIVE without `staged` (an
      older worker) counts at once; a shard that cannot send STAGED is
      refused with an error naming the setting, and STAGED from a worker is
      refused.
    - A chaos run on the short path, with primaries, backups and workers
      killed (two replicas of each of two ranges): every row applied
      exactly once, replicas identical (the chaos checker).
*/
#include <criterion/criterion.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kd_internal.h"
#include "kd_testutil.h"

#define S_ROWS      60000       //  the training set the fake worker claims
#define S_WAIT_MS   5000        //  for a message that must come
#define S_QUIET_MS  300         //  for one that must not

static char *s_dir;
static int s_port;
static kd_test_procs_t s_procs;      //  started here, killed at teardown
static char s_log [256];

static void
setup (void)
{
    s_dir = kd_test_tmpdir ();
    cr_assert (s_dir);
    s_port = kd_test_base_port ();
    memset (&s_procs, 0, sizeof s_procs);
    snprintf (s_log, sizeof s_log, "%s/services.log", s_dir);
}

static void
teardown (void)
{
    kd_test_procs_kill (&s_procs);
    free (s_dir);
}

TestSuite (short_path, .init = setup, .fini = teardown, .timeout = 240);

//  The next message of type on sock within timeout_ms, skipping
//  heartbeats and other types; NULL if none came.
static kd_msg_t *
s_expect (zsock_t *sock, kd_msg_type_t type, int timeout_ms)
{
    uint64_t deadline = kd_now_ms () + (uint64_t) timeout_ms;
    zpoller_t *poller = zpoller_new (sock, NULL);
    kd_msg_t *found = NULL;
    while (!found && kd_now_ms () < deadline) {
        if (!zpoller_wait (poller, (int) (deadline - kd_now_ms ()) + 1))
            continue;
        kd_msg_t *msg = NULL;
        if (kd_msg_recv (sock, &msg, NULL, NULL) != 0)
            continue;
        if (kd_msg_type (msg) == type)
            found = msg;
        else
            kd_msg_destroy (&msg);
    }
    zpoller_destroy (&poller);
    return found;
}

//  A message the scheduler does not take from anyone: its ERROR proves
//  that everything sent before on this connection was handled.
static void
s_probe (zsock_t *sock)
{
    kd_msg_t *probe = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (probe, KD_F_VERSION, 0);
    kd_msg_send (&probe, sock);
    kd_msg_t *err = s_expect (sock, KD_MSG_ERROR, S_WAIT_MS);
    cr_assert (err, "the probe was not answered");
    kd_msg_destroy (&err);
}

//  A HELLO of a fake shard; with staged, it says it can send STAGED.
static void
s_shard_hello (zsock_t *sock, const char *name, bool staged)
{
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "shard");
    kd_msg_set_str (hello, KD_F_NAME, name);
    kd_msg_set_str (hello, KD_F_ENDPOINT, "tcp://127.0.0.1:1");
    if (staged)
        kd_msg_set_uint (hello, KD_F_STAGED, 1);
    kd_msg_send (&hello, sock);
}

//  STAGED from a fake shard.  Unless it completes an arrival (whose COMMIT
//  the probe's wait would swallow), a probe follows it.
static void
s_staged (zsock_t *sock, uint64_t rank, uint64_t clock, bool refused, bool completes)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_STAGED);
    kd_msg_set_uint (msg, KD_F_RANK, rank);
    kd_msg_set_uint (msg, KD_F_CLOCK, clock);
    if (refused)
        kd_msg_set_uint (msg, KD_F_REFUSED, 1);
    kd_msg_send (&msg, sock);
    if (!completes)
        s_probe (sock);
}

//  The fake cluster: two shards, one worker, and what its RELEASE said.
typedef struct {
    zsock_t *shard [2];
    zsock_t *worker;
    uint64_t rank, clock, version, rows;
} s_fake_t;

static void
s_take_release (s_fake_t *f, kd_msg_t *release)
{
    cr_assert (release, "no RELEASE");
    size_t n = 0;
    kd_msg_uints (release, KD_F_ROWS, &n);
    f->clock = kd_msg_uint (release, KD_F_CLOCK);
    f->version = kd_msg_uint (release, KD_F_VERSION);
    f->rows = n;
    kd_msg_destroy (&release);
}

//  ARRIVE from the fake worker, probed unless it completes (the probe's
//  wait would swallow the RELEASE).
static void
s_arrive (s_fake_t *f, bool staged, bool completes)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_ARRIVE);
    kd_msg_set_uint (msg, KD_F_CLOCK, f->clock);
    kd_msg_set_uint (msg, KD_F_BASE, f->version);
    kd_msg_set_uint (msg, KD_F_SAMPLES, f->rows);
    if (staged)
        kd_msg_set_uint (msg, KD_F_STAGED, 1);
    kd_msg_send (&msg, f->worker);
    if (!completes)
        s_probe (f->worker);
}

//  Both shards get the COMMIT of the worker's clock: applied (dropped
//  false) or dropped.  They answer it.
static void
s_expect_commit (s_fake_t *f, bool dropped)
{
    for (int s = 0; s < 2; s++) {
        kd_msg_t *commit = s_expect (f->shard [s], KD_MSG_COMMIT, S_WAIT_MS);
        cr_assert (commit, "shard %d got no COMMIT for clock %llu", s, (unsigned long long) f->clock);
        size_t n = 0, nd = 0;
        const uint64_t *ranks = kd_msg_uints (commit, KD_F_RANKS, &n);
        const uint64_t *clocks = kd_msg_uints (commit, KD_F_CLOCKS, &n);
        const uint64_t *dclocks = kd_msg_uints (commit, KD_F_DROP_CLOCKS, &nd);
        if (dropped) {
            cr_expect_eq (n, 0, "a refused gradient is not applied");
            cr_expect (nd == 1 && dclocks [0] == f->clock, "the refused gradient is dropped");
        }
        else
            cr_expect (n == 1 && ranks [0] == f->rank && clocks [0] == f->clock,
                       "the COMMIT names the worker's gradient");
        kd_msg_t *ok = kd_msg_new (KD_MSG_COMMIT_OK);
        kd_msg_set_uint (ok, KD_F_VERSION, kd_msg_uint (commit, KD_F_VERSION));
        kd_msg_send (&ok, f->shard [s]);
        kd_msg_destroy (&commit);
    }
}

//  Nothing is committed or released for now.
static void
s_expect_held (s_fake_t *f, const char *why)
{
    kd_msg_t *commit = s_expect (f->shard [0], KD_MSG_COMMIT, S_QUIET_MS);
    kd_msg_t *release = s_expect (f->worker, KD_MSG_RELEASE, 10);
    cr_expect_null (commit, "committed %s", why);
    cr_expect_null (release, "released %s", why);
    kd_msg_destroy (&commit);
    kd_msg_destroy (&release);
}

Test (short_path, an_arrival_counts_once_every_range_staged_it)
{
    char bind [64];
    snprintf (bind, sizeof bind, "tcp://127.0.0.1:%d", s_port);
    const char *argv [] = { "kudus-scheduler", "--bind", bind, "--shards", "2", "--min-workers", "1",
                            "--consistency", "bsp", "--phase-path", "short", "--epochs", "1000",
                            "--heartbeat-ms", "60000", "--liveness", "100", NULL };
    cr_assert (kd_test_procs_spawn (&s_procs, argv, s_log) > 0);
    s_fake_t f = { .rank = 0 };
    //  A shard that cannot send STAGED would stall every phase: refused.
    zsock_t *old = kd_test_dealer (bind);
    s_shard_hello (old, "old-shard", false);
    kd_msg_t *err = s_expect (old, KD_MSG_ERROR, S_WAIT_MS);
    cr_assert (err, "a shard without STAGED was not refused");
    cr_expect (strstr (kd_msg_str (err, KD_F_REASON), "phase-path"), "the error names the setting: %s",
               kd_msg_str (err, KD_F_REASON));
    kd_msg_destroy (&err);
    zsock_destroy (&old);
    for (int s = 0; s < 2; s++) {
        char name [16];
        snprintf (name, sizeof name, "shard-%d", s);
        f.shard [s] = kd_test_dealer (bind);
        s_shard_hello (f.shard [s], name, true);
        kd_msg_t *welcome = s_expect (f.shard [s], KD_MSG_WELCOME, S_WAIT_MS);
        cr_assert (welcome, "shard %d was not welcomed", s);
        cr_expect_eq (kd_msg_uint (welcome, KD_F_STAGED), 1, "WELCOME says the short path");
        kd_msg_destroy (&welcome);
    }
    f.worker = kd_test_dealer (bind);
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "worker");
    kd_msg_set_str (hello, KD_F_NAME, "fake-worker");
    kd_msg_set_uint (hello, KD_F_SAMPLES, S_ROWS);
    kd_msg_send (&hello, f.worker);
    kd_msg_t *welcome = s_expect (f.worker, KD_MSG_WELCOME, S_WAIT_MS);
    cr_assert (welcome);
    cr_expect_eq (kd_msg_uint (welcome, KD_F_STAGED), 1);
    f.rank = kd_msg_uint (welcome, KD_F_RANK);
    kd_msg_destroy (&welcome);
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));
    cr_assert_gt (f.rows, 0, "the RELEASE carries a lease");

    //  ARRIVE first: held until both ranges staged the push.
    s_arrive (&f, true, false);
    s_expect_held (&f, "before any range staged the push");
    s_staged (f.shard [0], f.rank, f.clock, false, false);
    s_expect_held (&f, "with one range of two staged");
    //  A STAGED of another clock (a late retry) counts for nothing here.
    s_staged (f.shard [1], f.rank, f.clock + 7, false, false);
    s_expect_held (&f, "on a STAGED of another clock");
    s_staged (f.shard [1], f.rank, f.clock, false, true);
    s_expect_commit (&f, false);
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));

    //  STAGED first, from both ranges: the ARRIVE counts at once.
    s_staged (f.shard [0], f.rank, f.clock, false, false);
    s_staged (f.shard [1], f.rank, f.clock, false, false);
    s_arrive (&f, true, true);
    s_expect_commit (&f, false);
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));

    //  One range refused the push: the gradient is dropped everywhere.
    s_arrive (&f, true, false);
    s_staged (f.shard [1], f.rank, f.clock, true, false);
    s_expect_held (&f, "with one range of two heard from");
    s_staged (f.shard [0], f.rank, f.clock, false, true);
    s_expect_commit (&f, true);
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));

    //  An older worker's ARRIVE, without `staged`, counts at once.
    s_arrive (&f, false, true);
    s_expect_commit (&f, false);
    s_take_release (&f, s_expect (f.worker, KD_MSG_RELEASE, S_WAIT_MS));

    //  STAGED is for shards.
    kd_msg_t *staged = kd_msg_new (KD_MSG_STAGED);
    kd_msg_set_uint (staged, KD_F_RANK, f.rank);
    kd_msg_set_uint (staged, KD_F_CLOCK, f.clock);
    kd_msg_send (&staged, f.worker);
    err = s_expect (f.worker, KD_MSG_ERROR, S_WAIT_MS);
    cr_assert (err, "STAGED from a worker was not refused");
    kd_msg_destroy (&err);
    s_expect_held (&f, "on a worker's STAGED");

    for (int s = 0; s < 2; s++)
        zsock_destroy (&f.shard [s]);
    zsock_destroy (&f.worker);
}

Test (short_path, a_chaos_run_on_the_short_path_loses_nothing, .timeout = 240)
{
    char port [16], out [1024], log [1100], report [1100];
    snprintf (port, sizeof port, "%d", s_port);
    snprintf (out, sizeof out, "%s/chaos", s_dir);
    snprintf (log, sizeof log, "%s/chaos.out", s_dir);
    snprintf (report, sizeof report, "%s/report.json", out);
    //  Kills only, every 5 s on average: seed 4 draws two primaries, two
    //  backups and two workers in 30 s.
    const char *argv [] = { "kudus", "chaos", "--seed", "4", "--seconds", "30", "--fault-gap", "5",
                            "--faults", "primary,backup,worker", "--settle-seconds", "10",
                            "--base-port", port, "--out", out, "--", "--phase-path", "short", NULL };
    int status = 0;
    char *text = kd_test_run_report (argv, log, report, 200000, &status);
    cr_assert (text, "kudus chaos did not finish, or wrote no report at %s", report);
    char why [8192];
    cr_expect (kd_test_chaos_passed (text, 5, why, sizeof why), "%s", why);
    cr_expect (WIFEXITED (status) && WEXITSTATUS (status) == 0, "kudus chaos exits 0 on a pass");
    free (text);
    //  The cluster ran the short path: every shard was told so.
    char cluster [1100];
    snprintf (cluster, sizeof cluster, "%s/cluster.log", out);
    cr_expect_geq (kd_test_count (cluster, "phase_path=short"), 4, "the shards registered on the short path");
    cr_expect_eq (kd_test_count (cluster, "phase_path=classic"), 0);
}
