/*  Integration tests: recovery of the stateful services, with figures.

    - kill -9 a shard and restart it: the RTO, the updates lost against the
      checkpoint interval (RPO), and the restored parameters equal to the
      checkpoint's;
    - kill a shard while it writes a checkpoint: the previous one loads;
    - kill -9 a keyed (sparse-lr) shard and restart it: the touched rows
      and their optimizer state come back from its checkpoint;
    - kill -9 the scheduler and restart it: training continues from the
      shards' version, every worker keeps its rank.
    Each test asserts the behaviour, then prints a FIGURE line that the
    README's reliability table quotes.
*/
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kd_internal.h"
#include "kd_checkpoint.h"
#include "kd_testutil.h"

#define S_SHARDS    2
#define S_WORKERS   2

static char *s_dir;
static int s_port;

static void
setup (void)
{
    s_dir = kd_test_tmpdir ();
    cr_assert (s_dir);
    s_port = kd_test_base_port ();
}

static void
teardown (void)
{
    free (s_dir);
}

TestSuite (recovery, .init = setup, .fini = teardown, .timeout = 220);

//  A cluster started process by process, so single services can be
//  killed and restarted with the same arguments.
typedef struct {
    char sched [64], shard [S_SHARDS][64], ckpt [S_SHARDS][256];
    char sched_log [256], shard_log [S_SHARDS][256], worker_log [S_WORKERS][256];
    pid_t sched_pid, shard_pid [S_SHARDS], worker_pid [S_WORKERS];
    const char *model, *hidden, *every, *liveness;
    const char *train_file;     //  sparse-lr workers read it; NULL: dense
    int shards, workers;
} s_cluster_t;

static void
s_cluster_init (s_cluster_t *c, int shards, int workers)
{
    memset (c, 0, sizeof *c);
    c->shards = shards;
    c->workers = workers;
    c->model = "softmax";
    c->hidden = "16";
    c->every = "20";
    c->liveness = "3";
    snprintf (c->sched, sizeof c->sched, "tcp://127.0.0.1:%d", s_port);
    snprintf (c->sched_log, sizeof c->sched_log, "%s/scheduler.log", s_dir);
    for (int i = 0; i < shards; i++) {
        snprintf (c->shard [i], sizeof c->shard [i], "tcp://127.0.0.1:%d", s_port + 100 + i);
        snprintf (c->ckpt [i], sizeof c->ckpt [i], "%s/ckpt-%d", s_dir, i);
        snprintf (c->shard_log [i], sizeof c->shard_log [i], "%s/shard-%d.log", s_dir, i);
    }
    for (int r = 0; r < workers; r++)
        snprintf (c->worker_log [r], sizeof c->worker_log [r], "%s/worker-%d.log", s_dir, r);
}

static void
s_start_scheduler (s_cluster_t *c)
{
    char shards [8], workers [8];
    snprintf (shards, sizeof shards, "%d", c->shards);
    snprintf (workers, sizeof workers, "%d", c->workers);
    const char *argv [] = { "kudus-scheduler", "--bind", c->sched, "--shards", shards,
                            "--min-workers", workers, "--model", c->model, "--hidden", c->hidden,
                            "--epochs", "1000", "--liveness", c->liveness, "--log-level", "debug",
                            NULL };
    c->sched_pid = kd_test_spawn (argv, c->sched_log);
}

static void
s_start_shard (s_cluster_t *c, int i)
{
    char name [32];
    snprintf (name, sizeof name, "shard-%d", i);
    const char *argv [] = { "kudus-shard", "--bind", c->shard [i], "--scheduler", c->sched,
                            "--name", name, "--checkpoint-dir", c->ckpt [i],
                            "--checkpoint-every", c->every, "--liveness", c->liveness, NULL };
    c->shard_pid [i] = kd_test_spawn (argv, c->shard_log [i]);
}

static void
s_start_worker (s_cluster_t *c, int r)
{
    char name [32], monitor [64];
    snprintf (name, sizeof name, "worker-%d", r);
    //  No monitor runs: telemetry is best effort and goes nowhere.
    snprintf (monitor, sizeof monitor, "tcp://127.0.0.1:%d", s_port + 1);
    const char *argv [] = { "kudus-worker", "--scheduler", c->sched, "--monitor", monitor,
                            "--name", name, "--delay-ms", "5", "--request-timeout-ms", "1000",
                            "--liveness", c->liveness,
                            c->train_file ? "--model" : NULL, "sparse-lr", "--train-file", c->train_file,
                            NULL };
    c->worker_pid [r] = kd_test_spawn (argv, c->worker_log [r]);
}

static void
s_cluster_start (s_cluster_t *c)
{
    s_start_scheduler (c);
    for (int i = 0; i < c->shards; i++)
        s_start_shard (c, i);
    for (int r = 0; r < c->workers; r++)
        s_start_worker (c, r);
}

static void
s_cluster_stop (s_cluster_t *c)
{
    for (int r = 0; r < c->workers; r++)
        kd_test_kill (c->worker_pid [r]);
    for (int i = 0; i < c->shards; i++)
        kd_test_kill (c->shard_pid [i]);
    kd_test_kill (c->sched_pid);
}

static void
s_dump_all (s_cluster_t *c)
{
    kd_test_dump (c->sched_log);
    for (int i = 0; i < c->shards; i++)
        kd_test_dump (c->shard_log [i]);
    for (int r = 0; r < c->workers; r++)
        kd_test_dump (c->worker_log [r]);
}

//  A DEALER to a shard that gives up on a reply after timeout_ms.
static zsock_t *
s_dealer (const char *endpoint, int timeout_ms)
{
    zsock_t *sock = zsock_new (ZMQ_DEALER);
    zsock_set_rcvtimeo (sock, timeout_ms);
    zsock_set_linger (sock, 0);
    zsock_connect (sock, "%s", endpoint);
    return sock;
}

//  PULL version 0 from a shard: its version and (optionally) a copy of its
//  values.  -1 when it does not answer PULL_OK within timeout_ms.
static int64_t
s_probe (const char *endpoint, int timeout_ms, float **values, size_t *count)
{
    zsock_t *sock = s_dealer (endpoint, timeout_ms);
    kd_msg_t *pull = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (pull, KD_F_VERSION, 0);
    kd_msg_send (&pull, sock);
    int64_t version = -1;
    kd_msg_t *reply = NULL;
    if (kd_msg_recv (sock, &reply, NULL, &(kd_msg_err_t) { 0 }) == 0
    &&  kd_msg_type (reply) == KD_MSG_PULL_OK) {
        version = (int64_t) kd_msg_uint (reply, KD_F_VERSION);
        if (values) {
            size_t n = 0;
            const float *data = kd_msg_data_floats (reply, &n);
            *values = (float *) malloc (n * sizeof (float) + 1);
            memcpy (*values, data, n * sizeof (float));
            *count = n;
        }
    }
    kd_msg_destroy (&reply);
    zsock_destroy (&sock);
    return version;
}

//  A keyed PULL of n keys from a shard: its version, and the values into
//  values (n floats) when given.  -1 when it does not answer PULL_OK.
static int64_t
s_probe_keys (const char *endpoint, int timeout_ms, const uint64_t *keys, size_t n, float *values)
{
    zsock_t *sock = s_dealer (endpoint, timeout_ms);
    kd_msg_t *pull = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (pull, KD_F_VERSION, 0);
    kd_msg_set_keys (pull, keys, n);
    kd_msg_send (&pull, sock);
    int64_t version = -1;
    kd_msg_t *reply = NULL;
    if (kd_msg_recv (sock, &reply, NULL, &(kd_msg_err_t) { 0 }) == 0
    &&  kd_msg_type (reply) == KD_MSG_PULL_OK
    &&  (!values || kd_msg_data_to_floats (reply, values, n) == 0))
        version = (int64_t) kd_msg_uint (reply, KD_F_VERSION);
    kd_msg_destroy (&reply);
    zsock_destroy (&sock);
    return version;
}

//  Wait until a keyed shard, asked for key, reaches a version.
static int64_t
s_wait_keyed (const char *endpoint, uint64_t key, int64_t want, int timeout_ms)
{
    uint64_t deadline = kd_now_ms () + (uint64_t) timeout_ms;
    int64_t v = -1;
    while (kd_now_ms () < deadline) {
        v = s_probe_keys (endpoint, 300, &key, 1, NULL);
        if (v >= want)
            break;
        usleep (20000);
    }
    return v;
}

//  Wait until a shard reaches a version; returns the version seen (or the
//  last one, if time ran out).
static int64_t
s_wait_version (const char *endpoint, int64_t want, int timeout_ms)
{
    uint64_t deadline = kd_now_ms () + (uint64_t) timeout_ms;
    int64_t v = -1;
    while (kd_now_ms () < deadline) {
        v = s_probe (endpoint, 300, NULL, NULL);
        if (v >= want)
            break;
        usleep (20000);
    }
    return v;
}

//  Number of final checkpoint files in a directory, and whether a
//  temporary one is there.
static int
s_checkpoints (const char *dir, bool *has_tmp)
{
    DIR *d = opendir (dir);
    int n = 0;
    if (has_tmp)
        *has_tmp = false;
    struct dirent *e;
    while (d && (e = readdir (d))) {
        size_t len = strlen (e->d_name);
        if (len > 4 && !strcmp (e->d_name + len - 4, ".kdc"))
            n++;
        if (has_tmp && len > 4 && !strcmp (e->d_name + len - 4, ".tmp"))
            *has_tmp = true;
    }
    if (d)
        closedir (d);
    return n;
}

Test (recovery, killed_shard_restores_its_checkpoint)
{
    s_cluster_t c;
    s_cluster_init (&c, S_SHARDS, S_WORKERS);
    c.liveness = "10";      //  the workers are paused while we compare
    s_cluster_start (&c);
    int64_t v = s_wait_version (c.shard [0], 60, 60000);
    if (v < 60)
        s_dump_all (&c);
    cr_assert (v >= 60, "training did not start (version %lld)", (long long) v);
    cr_assert (s_checkpoints (c.ckpt [0], NULL) > 0, "no checkpoint written by version %lld", (long long) v);

    //  1. RTO: kill -9 shard 0 mid-interval (checkpoints at 60, 80, ...),
    //  restart it at once, time until the model version moves on again.
    s_wait_version (c.shard [0], 75, 30000);
    int64_t before = s_probe (c.shard [1], 1000, NULL, NULL);
    uint64_t t_kill = kd_now_ms ();
    kill (c.shard_pid [0], SIGKILL);
    waitpid (c.shard_pid [0], NULL, 0);
    s_start_shard (&c, 0);
    int64_t after = s_wait_version (c.shard [0], before + 10, 30000);
    uint64_t rto_ms = kd_now_ms () - t_kill;
    if (after < before + 10)
        s_dump_all (&c);
    cr_assert (after >= before + 10, "training did not resume after the shard restart (%lld -> %lld)",
               (long long) before, (long long) after);
    int64_t restored = kd_test_log_value (c.shard_log [0], "restored checkpoint", "version=");
    int64_t resynced = kd_test_log_value (c.shard_log [0], "resync version=", "resync version=");
    int64_t had = kd_test_log_value (c.shard_log [0], "resync version=", "have=");
    cr_assert (restored > 0, "the shard did not restore a checkpoint");
    cr_assert_eq (had, restored, "resync started from the restored version");
    int64_t lost = resynced - had;
    //  Lost: what came after the newest checkpoint (at most one interval of
    //  20 versions) plus what was committed while the shard was down.
    cr_expect (lost >= 0 && lost <= 20 + 2, "updates lost %lld exceed the RPO of 20 versions",
               (long long) lost);
    cr_expect (kd_test_count (c.sched_log, "kind=shard-restored") >= 1, "no shard-restored event");

    //  2. Parameters equal to the checkpoint: kill again, hold the workers
    //  so that no commit lands, restart, and compare what the shard serves
    //  with the newest checkpoint on disk.
    kill (c.shard_pid [0], SIGKILL);
    waitpid (c.shard_pid [0], NULL, 0);
    for (int r = 0; r < c.workers; r++)
        kill (c.worker_pid [r], SIGSTOP);
    kd_checkpoint_meta_t meta;
    float *ck_params = NULL, *ck_velocity = NULL, *served = NULL;
    char err [512];
    cr_assert_eq (kd_checkpoint_load_latest (c.ckpt [0], &meta, &ck_params, &ck_velocity,
                                             NULL, 0, err, sizeof err), 0, "%s", err);
    uint64_t t_restart = kd_now_ms ();
    s_start_shard (&c, 0);
    size_t count = 0;
    int64_t served_version = -1;
    while (served_version < 0 && kd_now_ms () - t_restart < 8000)
        served_version = s_probe (c.shard [0], 200, &served, &count);
    uint64_t ready_ms = kd_now_ms () - t_restart;
    for (int r = 0; r < c.workers; r++)
        kill (c.worker_pid [r], SIGCONT);
    cr_assert (served_version >= (int64_t) meta.version, "restarted shard did not serve (version %lld)",
               (long long) served_version);
    cr_assert_eq (count, (size_t) (meta.hi - meta.lo));
    size_t differ = 0;
    for (size_t i = 0; i < count; i++)
        differ += served [i] != ck_params [i];
    cr_expect_eq (differ, 0, "%zu of %zu parameters differ from the checkpoint", differ, count);
    int64_t resumed = s_wait_version (c.shard [0], served_version + 10, 30000);
    cr_expect (resumed >= served_version + 10, "training did not continue after the second restart");
    printf ("FIGURE shard_kill rto_ms=%llu restore_ready_ms=%llu updates_lost=%lld rpo_versions=20 "
            "params_equal_checkpoint=%s (%zu keys, checkpoint version %llu)\n",
            (unsigned long long) rto_ms, (unsigned long long) ready_ms, (long long) lost,
            differ == 0 ? "yes" : "no", count, (unsigned long long) meta.version);
    fflush (stdout);
    free (ck_params);
    free (ck_velocity);
    free (served);
    s_cluster_stop (&c);
}

//  A keyed range checkpoints the rows gradients touched, with their
//  AdaGrad state; killed with -9 and restarted, the shard serves exactly
//  the checkpoint's rows and training goes on from there.
Test (recovery, keyed_shard_restores_its_checkpoint)
{
    char train [512];
    snprintf (train, sizeof train, "%s/ctr.svm", s_dir);
    const char *gen [] = { "kudus", "gen-ctr", "--rows", "4000", "--features", "2000", "--per-row", "8",
                           train, NULL };
    int status = -1;
    pid_t pid = kd_test_spawn (gen, NULL);
    cr_assert (kd_test_wait (pid, 30000, &status) && WIFEXITED (status) && WEXITSTATUS (status) == 0);
    s_cluster_t c;
    s_cluster_init (&c, S_SHARDS, S_WORKERS);
    c.model = "sparse-lr";
    c.train_file = train;
    c.liveness = "10";      //  the workers are paused while we compare
    s_cluster_start (&c);
    //  Key 0 (the bias) is touched by every batch.  Shards take their
    //  ranges in the order they register, so find the one that holds it.
    int s = -1;
    int64_t v = -1;
    uint64_t deadline = kd_now_ms () + 60000;
    while (kd_now_ms () < deadline && v < 60) {
        for (int i = 0; i < c.shards && v < 60; i++) {
            int64_t vi = s_probe_keys (c.shard [i], 300, &(uint64_t) { 0 }, 1, NULL);
            if (vi >= 0) {
                s = i;
                v = vi;
            }
        }
        if (v < 60)
            usleep (20000);
    }
    if (v < 60)
        s_dump_all (&c);
    cr_assert (v >= 60, "training did not start (version %lld)", (long long) v);
    cr_assert (s_checkpoints (c.ckpt [s], NULL) > 0, "no keyed checkpoint by version %lld", (long long) v);
    //  Kill that shard and hold the workers, so that nothing commits while
    //  the restarted shard is compared with its newest checkpoint.
    kill (c.shard_pid [s], SIGKILL);
    waitpid (c.shard_pid [s], NULL, 0);
    for (int r = 0; r < c.workers; r++)
        kill (c.worker_pid [r], SIGSTOP);
    kd_checkpoint_meta_t meta;
    float *rows = NULL, *state = NULL;
    char err [512];
    cr_assert_eq (kd_checkpoint_load_latest (c.ckpt [s], &meta, &rows, &state, NULL, 0, err, sizeof err),
                  0, "%s", err);
    cr_assert_eq (meta.key_dim, 1);
    cr_assert_eq (meta.n_state, 1, "AdaGrad's one state buffer");
    cr_assert (meta.key_rows > 100 && meta.key_rows <= meta.hi - meta.lo, "%llu rows",
               (unsigned long long) meta.key_rows);
    //  The checkpoint's keys, sorted for a keyed pull, with their values.
    size_t n = (size_t) meta.key_rows;
    uint64_t *keys = malloc (n * sizeof (uint64_t));
    float *want = malloc (n * sizeof (float)), *got = calloc (n, sizeof (float));
    for (size_t i = 0; i < n; i++)
        keys [i] = meta.keys [i];
    for (size_t i = 1; i < n; i++)              //  insertion sort, carrying values
        for (size_t j = i; j > 0 && keys [j - 1] > keys [j]; j--) {
            uint64_t k = keys [j]; keys [j] = keys [j - 1]; keys [j - 1] = k;
        }
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            if (meta.keys [j] == keys [i])
                want [i] = rows [j * 2];        //  a row: its value, then AdaGrad's sum
    s_start_shard (&c, s);
    uint64_t t_restart = kd_now_ms ();
    int64_t served = -1;
    while (served < 0 && kd_now_ms () - t_restart < 10000)
        served = s_probe_keys (c.shard [s], 300, keys, n, got);
    for (int r = 0; r < c.workers; r++)
        kill (c.worker_pid [r], SIGCONT);
    if (served < 0)
        s_dump_all (&c);
    cr_assert (served >= (int64_t) meta.version, "the restarted shard did not serve (version %lld)",
               (long long) served);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++)
        differ += got [i] != want [i];
    cr_expect_eq (differ, 0, "%zu of %zu keyed rows differ from the checkpoint", differ, n);
    cr_expect_eq (kd_test_count (c.shard_log [s], "registered from checkpoint"), 1);
    int64_t resumed = s_wait_keyed (c.shard [s], 0, served + 10, 30000);
    if (resumed < served + 10)
        s_dump_all (&c);
    cr_expect (resumed >= served + 10, "training did not continue after the restart (%lld -> %lld)",
               (long long) served, (long long) resumed);
    printf ("FIGURE keyed_shard_kill rows=%zu checkpoint_version=%llu served=%lld resumed=%lld "
            "rows_equal_checkpoint=%s\n", n, (unsigned long long) meta.version, (long long) served,
            (long long) resumed, differ == 0 ? "yes" : "no");
    fflush (stdout);
    free (keys);
    free (want);
    free (got);
    free (rows);
    free (state);
    free (meta.keys);
    s_cluster_stop (&c);
}

Test (recovery, shard_killed_during_a_checkpoint_write_loads_the_previous_one)
{
    //  A large range checkpointed at every version, so that a write is
    //  nearly always under way: 1 shard holding an MLP of 1024 hidden units
    //  (814,090 floats, 6.5 MB a file).
    s_cluster_t c;
    s_cluster_init (&c, 1, 1);
    c.model = "mlp";
    c.hidden = "1024";
    c.every = "1";
    s_cluster_start (&c);
    int64_t v = s_wait_version (c.shard [0], 3, 60000);
    if (v < 3)
        s_dump_all (&c);
    cr_assert (v >= 3, "training did not start (version %lld)", (long long) v);
    //  Kill as soon as a temporary file shows; if the write finished before
    //  the signal landed, restart and try again.
    bool caught = false;
    int attempts = 0;
    for (; attempts < 20 && !caught; attempts++) {
        uint64_t deadline = kd_now_ms () + 10000;
        bool tmp = false;
        while (!tmp && kd_now_ms () < deadline) {
            s_checkpoints (c.ckpt [0], &tmp);
            if (!tmp)
                usleep (200);
        }
        if (!tmp)
            continue;
        kill (c.shard_pid [0], SIGKILL);
        waitpid (c.shard_pid [0], NULL, 0);
        s_checkpoints (c.ckpt [0], &caught);
        if (!caught) {
            s_start_shard (&c, 0);
            s_wait_version (c.shard [0], 0, 20000);
        }
    }
    cr_assert (caught, "never killed the shard inside a checkpoint write (%d attempts)", attempts);
    //  What a correct restore must pick: the newest complete checkpoint.
    kd_checkpoint_meta_t meta;
    float *p = NULL, *vel = NULL;
    char err [512];
    cr_assert_eq (kd_checkpoint_load_latest (c.ckpt [0], &meta, &p, &vel, NULL, 0, err, sizeof err), 0,
                  "%s", err);
    free (p);
    free (vel);
    //  load_latest removed the half-written file; make one again exactly as
    //  a killed writer leaves it, so the restarted shard must skip it too.
    char tmp [512];
    snprintf (tmp, sizeof tmp, "%s/.ckpt-%020llu-1.tmp", c.ckpt [0], (unsigned long long) meta.version + 1);
    FILE *f = fopen (tmp, "w");
    fputs ("KDCKPT01 half written", f);
    fclose (f);
    s_start_shard (&c, 0);
    int64_t after = s_wait_version (c.shard [0], (int64_t) meta.version + 2, 60000);
    int64_t restored = kd_test_log_value (c.shard_log [0], "restored checkpoint", "version=");
    if (restored != (int64_t) meta.version)
        kd_test_dump (c.shard_log [0]);
    cr_assert_eq (restored, (int64_t) meta.version, "restored version %lld, newest complete %llu",
                  (long long) restored, (unsigned long long) meta.version);
    cr_expect (kd_test_count (c.shard_log [0], "removing half-written checkpoint") >= 1);
    cr_expect (after >= (int64_t) meta.version + 2, "training did not continue (version %lld)",
               (long long) after);
    printf ("FIGURE checkpoint_kill attempts=%d killed_mid_write=yes restored_version=%llu "
            "previous_checkpoint_loaded=yes\n", attempts, (unsigned long long) meta.version);
    fflush (stdout);
    s_cluster_stop (&c);
}

Test (recovery, restarted_scheduler_resumes_from_the_shards)
{
    s_cluster_t c;
    s_cluster_init (&c, S_SHARDS, S_WORKERS);
    s_cluster_start (&c);
    int64_t v = s_wait_version (c.shard [0], 50, 60000);
    if (v < 50)
        s_dump_all (&c);
    cr_assert (v >= 50, "training did not start (version %lld)", (long long) v);
    int64_t rank0 = kd_test_log_value (c.sched_log, "join worker name=worker-0", "rank=");
    int64_t rank1 = kd_test_log_value (c.sched_log, "join worker name=worker-1", "rank=");
    cr_assert (rank0 >= 0 && rank1 >= 0 && rank0 != rank1);

    kill (c.sched_pid, SIGKILL);
    waitpid (c.sched_pid, NULL, 0);
    int64_t at_kill = s_probe (c.shard [0], 1000, NULL, NULL);
    //  A second log, so the first run's lines do not count.
    snprintf (c.sched_log, sizeof c.sched_log, "%s/scheduler-2.log", s_dir);
    uint64_t t_restart = kd_now_ms ();
    s_start_scheduler (&c);
    int64_t after = s_wait_version (c.shard [0], at_kill + 30, 60000);
    uint64_t resumed_ms = kd_now_ms () - t_restart;
    if (after < at_kill + 30)
        s_dump_all (&c);
    cr_assert (after >= at_kill + 30, "training did not continue (version %lld at kill, %lld after)",
               (long long) at_kill, (long long) after);
    int64_t from = kd_test_log_value (c.sched_log, "training resumes from version", "version ");
    cr_expect (kd_test_count (c.sched_log, "kind=resume") == 1, "no resume event");
    //  The ranks are rebuilt from the members, as they were: no duplicates.
    int64_t again0 = kd_test_log_value (c.sched_log, "worker name=worker-0", "rank=");
    int64_t again1 = kd_test_log_value (c.sched_log, "worker name=worker-1", "rank=");
    cr_expect_eq (again0, rank0, "worker-0 had rank %lld, now %lld", (long long) rank0, (long long) again0);
    cr_expect_eq (again1, rank1, "worker-1 had rank %lld, now %lld", (long long) rank1, (long long) again1);
    //  "rejoin worker" is a live worker's second HELLO (a silent scheduler
    //  under load), not a second registration.
    cr_expect_eq (kd_test_count (c.sched_log, "scheduler: join worker"), 2, "one registration per worker");
    //  Both shards must still agree on the version: none was left behind.
    //  Training goes on between the two probes, so a starved test may see
    //  them apart for a moment: asked again until they agree or time runs out.
    int64_t s0 = -1, s1 = -1;
    for (uint64_t t0 = kd_now_ms (); kd_now_ms () - t0 < 20000; ) {
        s0 = s_probe (c.shard [0], 3000, NULL, NULL);
        s1 = s_probe (c.shard [1], 3000, NULL, NULL);
        if (s0 >= 0 && s1 >= 0 && s0 - s1 <= 2 && s1 - s0 <= 2)
            break;
        usleep (100000);
    }
    cr_expect (s0 >= 0 && s1 >= 0 && (s0 - s1 <= 2 && s1 - s0 <= 2), "shards diverged: %lld vs %lld",
               (long long) s0, (long long) s1);
    printf ("FIGURE scheduler_restart version_at_kill=%lld resumed_from=%lld training_again_after_ms=%llu "
            "ranks_before=%lld,%lld ranks_after=%lld,%lld duplicate_ranks=0\n",
            (long long) at_kill, (long long) from, (unsigned long long) resumed_ms,
            (long long) rank0, (long long) rank1, (long long) again0, (long long) again1);
    fflush (stdout);
    //  SIGTERM stops the whole cluster from the scheduler.
    kill (c.sched_pid, SIGTERM);
    int status = -1;
    cr_expect (kd_test_wait (c.sched_pid, 10000, &status) && WIFEXITED (status) && WEXITSTATUS (status) == 0);
    for (int i = 0; i < c.shards; i++)
        cr_expect (kd_test_wait (c.shard_pid [i], 10000, &status), "shard %d did not stop", i);
    for (int r = 0; r < c.workers; r++)
        cr_expect (kd_test_wait (c.worker_pid [r], 10000, &status), "worker %d did not stop", r);
    s_cluster_stop (&c);
}
