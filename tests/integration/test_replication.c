/*  Integration tests: replicated shards (--replicas 2, chain replication).

    - kill -9 a range's primary ten times during a run: no update is lost,
      every replica of a range ends bit for bit the same, and the final
      accuracy is that of an unfaulted run with the same seed;
    - kill -9 a backup: training goes on, the restarted backup catches up;
    - kill both replicas of a range: the range restores its checkpoint and
      the cluster says what it lost;
    - a backup's SYNC_OK of an older chain generation (it answers a
      transfer ordered before the chain changed) does not mark it synced:
      a real scheduler, with fake shards and a fake worker.
    Each test prints FIGURE lines that the README's reliability table
    quotes: RTO, throughput against the unfaulted run, and chain bytes.
*/
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include "kd_internal.h"
#include "kd_testutil.h"

#define S_RANGES    2
#define S_REPLICAS  2
#define S_SHARDS    (S_RANGES * S_REPLICAS)
#define S_WORKERS   2
#define S_HB        "200"       //  heartbeat ms: a death is seen in 0.6 s
#define S_LIVENESS  "3"

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

TestSuite (replication, .init = setup, .fini = teardown, .timeout = 240);

typedef struct {
    char tag [16];              //  run name, for files
    char sched [64], intake [64], pub [64], shard [S_SHARDS][64], ckpt [S_SHARDS][256];
    char sched_log [256], mon_log [256], shard_log [S_SHARDS][256], worker_log [S_WORKERS][256];
    char summary [256];
    pid_t sched_pid, mon_pid, shard_pid [S_SHARDS], worker_pid [S_WORKERS];
    uint64_t sched_t0;          //  wall-clock ms just before the scheduler
                                //  was spawned: its generations are above
    const char *epochs;
    bool checkpoints;
    const char *rejoin_wait_ms;     //  --rejoin-wait-ms, or NULL for the default
} s_cluster_t;

static void
s_cluster_init (s_cluster_t *c, const char *tag, int port_offset, const char *epochs)
{
    memset (c, 0, sizeof *c);
    snprintf (c->tag, sizeof c->tag, "%s", tag);
    c->epochs = epochs;
    int port = s_port + port_offset;
    snprintf (c->sched, sizeof c->sched, "tcp://127.0.0.1:%d", port);
    snprintf (c->intake, sizeof c->intake, "tcp://127.0.0.1:%d", port + 1);
    snprintf (c->pub, sizeof c->pub, "tcp://127.0.0.1:%d", port + 2);
    snprintf (c->sched_log, sizeof c->sched_log, "%s/%s-scheduler.log", s_dir, tag);
    snprintf (c->mon_log, sizeof c->mon_log, "%s/%s-monitor.log", s_dir, tag);
    snprintf (c->summary, sizeof c->summary, "%s/%s-summary.json", s_dir, tag);
    for (int i = 0; i < S_SHARDS; i++) {
        snprintf (c->shard [i], sizeof c->shard [i], "tcp://127.0.0.1:%d", port + 100 + i);
        snprintf (c->ckpt [i], sizeof c->ckpt [i], "%s/%s-ckpt-%d", s_dir, tag, i);
        snprintf (c->shard_log [i], sizeof c->shard_log [i], "%s/%s-shard-%d.log", s_dir, tag, i);
    }
    for (int r = 0; r < S_WORKERS; r++)
        snprintf (c->worker_log [r], sizeof c->worker_log [r], "%s/%s-worker-%d.log", s_dir, tag, r);
}

static void
s_start_shard (s_cluster_t *c, int i)
{
    char name [32];
    snprintf (name, sizeof name, "shard-%d", i);
    const char *argv [] = { "kudus-shard", "--bind", c->shard [i], "--scheduler", c->sched,
                            "--name", name, "--heartbeat-ms", S_HB, "--liveness", S_LIVENESS,
                            c->checkpoints ? "--checkpoint-dir" : NULL, c->ckpt [i],
                            "--checkpoint-every", "50", NULL };
    c->shard_pid [i] = kd_test_spawn (argv, c->shard_log [i]);
}

static void
s_cluster_start (s_cluster_t *c)
{
    char shards [8], replicas [8], workers [8];
    snprintf (shards, sizeof shards, "%d", S_RANGES);
    snprintf (replicas, sizeof replicas, "%d", S_REPLICAS);
    snprintf (workers, sizeof workers, "%d", S_WORKERS);
    const char *a_sched [] = { "kudus-scheduler", "--bind", c->sched, "--shards", shards,
                               "--replicas", replicas, "--min-workers", workers, "--model", "softmax",
                               "--epochs", c->epochs, "--seed", "11", "--consistency", "bsp",
                               "--heartbeat-ms", S_HB, "--liveness", S_LIVENESS, "--max-seconds", "150",
                               "--summary", c->summary, "--log-level", "debug",
                               c->rejoin_wait_ms ? "--rejoin-wait-ms" : NULL, c->rejoin_wait_ms, NULL };
    c->sched_t0 = (uint64_t) zclock_time ();
    c->sched_pid = kd_test_spawn (a_sched, c->sched_log);
    for (int i = 0; i < S_SHARDS; i++)
        s_start_shard (c, i);
    const char *a_mon [] = { "kudus-monitor", "--bind", c->intake, "--pub-bind", c->pub,
                             "--scheduler", c->sched, "--eval-interval", "5", "--heartbeat-ms", S_HB,
                             "--liveness", S_LIVENESS, NULL };
    c->mon_pid = kd_test_spawn (a_mon, c->mon_log);
    for (int r = 0; r < S_WORKERS; r++) {
        char name [32];
        snprintf (name, sizeof name, "worker-%d", r);
        const char *argv [] = { "kudus-worker", "--scheduler", c->sched, "--monitor", c->intake,
                                "--name", name, "--delay-ms", "10", "--request-timeout-ms", "1000",
                                "--heartbeat-ms", S_HB, "--liveness", S_LIVENESS, NULL };
        c->worker_pid [r] = kd_test_spawn (argv, c->worker_log [r]);
    }
}

static void
s_cluster_stop (s_cluster_t *c)
{
    for (int r = 0; r < S_WORKERS; r++)
        kd_test_kill (c->worker_pid [r]);
    for (int i = 0; i < S_SHARDS; i++)
        kd_test_kill (c->shard_pid [i]);
    kd_test_kill (c->mon_pid);
    kd_test_kill (c->sched_pid);
}

static void
s_dump_all (s_cluster_t *c)
{
    //  The scheduler logs at debug level, so its tail is mostly per-shard
    //  lines: its events, warnings and errors are what explain a run.
    const char *explain [] = { " event kind=", " warn ", " error ", NULL };
    kd_test_dump_lines (c->sched_log, explain);
    for (int i = 0; i < S_SHARDS; i++)
        kd_test_dump (c->shard_log [i]);
    for (int r = 0; r < S_WORKERS; r++)
        kd_test_dump (c->worker_log [r]);
}

//  Wait until a shard serves a version above `above`; the ms it took, or
//  -1 when time ran out.
static int64_t
s_wait_above (const char *endpoint, int64_t above, int timeout_ms)
{
    uint64_t t0 = kd_now_ms ();
    while (kd_now_ms () - t0 < (uint64_t) timeout_ms) {
        if (kd_test_shard_version (endpoint, 300) > above)
            return (int64_t) (kd_now_ms () - t0);
        usleep (10000);
    }
    return -1;
}

//  The shard that is the primary of the range starting at lo, by the last
//  CHAIN each shard's log reports; -1 if none.
static int
s_primary_of (s_cluster_t *c, const char *lo)
{
    for (int i = 0; i < S_SHARDS; i++) {
        char role [16], at [32];
        kd_test_log_word (c->shard_log [i], "chain role=", "chain role=", role, sizeof role);
        kd_test_log_word (c->shard_log [i], "chain role=", " lo=", at, sizeof at);
        if (!strcmp (role, "primary") && !strcmp (at, lo) && waitpid (c->shard_pid [i], NULL, WNOHANG) == 0)
            return i;
    }
    return -1;
}

//  The other replica of shard i's range.
static int
s_partner_of (s_cluster_t *c, int i)
{
    char lo [32], other [32];
    kd_test_log_word (c->shard_log [i], "chain role=", " lo=", lo, sizeof lo);
    for (int j = 0; j < S_SHARDS; j++) {
        if (j == i)
            continue;
        kd_test_log_word (c->shard_log [j], "chain role=", " lo=", other, sizeof other);
        if (!strcmp (lo, other))
            return j;
    }
    return -1;
}

//  Wait until every shard has been placed, and each backup holds its state.
static bool
s_wait_chains (s_cluster_t *c, int timeout_ms)
{
    uint64_t t0 = kd_now_ms ();
    while (kd_now_ms () - t0 < (uint64_t) timeout_ms) {
        if (kd_test_count (c->sched_log, "kind=shard-synced") >= S_RANGES * (S_REPLICAS - 1))
            return true;
        usleep (20000);
    }
    return false;
}

//  Where the last line containing needle starts in text; NULL if none.
static const char *
s_last (const char *text, const char *needle)
{
    const char *last = NULL;
    for (const char *at = strstr (text, needle); at; at = strstr (at + 1, needle))
        last = at;
    return last;
}

//  Wait until every range is whole again: each shard the scheduler
//  declared dead (a kill, or a starved shard it could not hear within the
//  0.6 s liveness) has come back and received its state since.  Killing a
//  primary before then kills its range's only up-to-date replica, a
//  second fault this test does not mean to inject.
static bool
s_wait_whole (s_cluster_t *c, int timeout_ms)
{
    uint64_t t0 = kd_now_ms ();
    while (kd_now_ms () - t0 < (uint64_t) timeout_ms) {
        char *text = kd_test_slurp (c->sched_log);
        bool whole = text != NULL;
        //  The start places every replica afresh (the newest leads, the
        //  others receive its state): a death before it is over, and a
        //  primary placed then receives no state of anyone.
        const char *start = text ? s_last (text, " start shards=") : NULL;
        for (int i = 0; whole && i < S_SHARDS; i++) {
            char dead [64], synced [64];
            snprintf (dead, sizeof dead, "kind=shard-dead name=shard-%d ", i);
            snprintf (synced, sizeof synced, "kind=shard-synced name=shard-%d ", i);
            const char *d = s_last (text, dead), *y = s_last (text, synced);
            whole = !d || (y && y > d) || (start && start > d);
        }
        free (text);
        if (whole)
            return true;
        usleep (100000);
    }
    return false;
}

//  Start the cluster and wait until it is placed (the logs printed if not).
static void
s_cluster_placed (s_cluster_t *c)
{
    s_cluster_start (c);
    bool placed = s_wait_chains (c, 30000);
    if (!placed)
        s_dump_all (c);
    cr_assert (placed, "the backups never received their state");
}

//  Every line of the scheduler's log that says a backup "received its
//  state at version" (its SYNC_OK was taken) must name the generation that the backup
//  echoed, and one at least floor, the wall clock before the scheduler was
//  spawned (generations start at its start time).  A real shard that
//  stopped echoing it (gen=none) would switch the check of stale SYNC_OKs
//  off without a word.  Of the lines about backup name (NULL: none), the
//  first and last generations go to *first and *last.  Returns the lines.
static int
s_expect_gens (const char *log, uint64_t floor, const char *name, uint64_t *first, uint64_t *last)
{
    char *text = kd_test_slurp (log);
    cr_assert (text, "no scheduler log at %s", log);
    char who [64] = "";
    if (name)
        snprintf (who, sizeof who, "backup %s of range ", name);
    int lines = 0;
    for (char *line = text; *line; ) {
        char *end = strchr (line, '\n');
        if (end)
            *end = 0;
        //  (Not "had not received its state", a promotion's error.)
        if (strstr (line, "received its state at version")) {
            lines++;
            const char *at = strstr (line, " gen=");
            cr_expect (at, "a SYNC_OK taken, its generation not logged: %s", line);
            char *stop = NULL;
            unsigned long long gen = at ? strtoull (at + strlen (" gen="), &stop, 10) : 0;
            bool echoed = at && stop != at + strlen (" gen=");
            if (at)
                cr_expect (echoed, "a backup did not echo its generation: %s", line);
            if (echoed) {
                cr_expect (gen >= floor, "generation %llu is below the wall clock %llu ms before the "
                           "scheduler started: %s", gen, (unsigned long long) floor, line);
                if (name && strstr (line, who)) {
                    if (first && !*first)
                        *first = gen;
                    if (last)
                        *last = gen;
                }
            }
        }
        if (!end)
            break;
        line = end + 1;
    }
    free (text);
    return lines;
}

//  Wait for the scheduler to end the run; its summary (caller frees).
static char *
s_wait_end (s_cluster_t *c, int timeout_ms)
{
    if (!kd_test_wait (c->sched_pid, timeout_ms, NULL)) {
        s_dump_all (c);
        return NULL;
    }
    c->sched_pid = 0;
    //  The shards log their final CRC as they stop.
    for (int i = 0; i < S_SHARDS; i++)
        kd_test_wait (c->shard_pid [i], 5000, NULL);
    return kd_test_slurp (c->summary);
}

//  Every range's replicas end at one version with the same values (CRC of
//  their bytes); returns the number of ranges that do, and sums lost=.
static int
s_replicas_equal (s_cluster_t *c, long long *lost)
{
    int equal = 0;
    *lost = 0;
    for (int i = 0; i < S_SHARDS; i++) {
        char v [32], crc [32], lo [32], l [32];
        kd_test_log_word (c->shard_log [i], "replica ", "version=", v, sizeof v);
        kd_test_log_word (c->shard_log [i], "replica ", "params_crc=", crc, sizeof crc);
        kd_test_log_word (c->shard_log [i], "replica ", "lo=", lo, sizeof lo);
        kd_test_log_word (c->shard_log [i], " exit version=", "lost=", l, sizeof l);
        *lost += atoll (l);
        for (int j = i + 1; j < S_SHARDS; j++) {
            char v2 [32], crc2 [32], lo2 [32];
            kd_test_log_word (c->shard_log [j], "replica ", "version=", v2, sizeof v2);
            kd_test_log_word (c->shard_log [j], "replica ", "params_crc=", crc2, sizeof crc2);
            kd_test_log_word (c->shard_log [j], "replica ", "lo=", lo2, sizeof lo2);
            if (*lo && !strcmp (lo, lo2)) {
                cr_expect_str_eq (v, v2, "range lo=%s: replicas end at versions %s and %s", lo, v, v2);
                cr_expect_str_eq (crc, crc2, "range lo=%s: replicas differ (CRC %s and %s)", lo, crc, crc2);
                equal += !strcmp (v, v2) && !strcmp (crc, crc2) && *crc;
            }
        }
    }
    return equal;
}

//  A counter of the shards' last replica lines, summed over the primaries
//  (a backup's bytes_in counts the forwards again).
static long long
s_log_sum (s_cluster_t *c, const char *key)
{
    long long sum = 0;
    for (int i = 0; i < S_SHARDS; i++) {
        char role [16], b [32];
        kd_test_log_word (c->shard_log [i], "replica ", "replica ", role, sizeof role);
        kd_test_log_word (c->shard_log [i], "replica ", key, b, sizeof b);
        if (!strcmp (role, "primary"))
            sum += atoll (b);
    }
    return sum;
}

Test (replication, primary_killed_ten_times_loses_nothing)
{
    //  1. The unfaulted run, for the accuracy and the throughput.
    s_cluster_t ref;
    s_cluster_init (&ref, "ref", 0, "2");
    s_cluster_start (&ref);
    char *ref_summary = s_wait_end (&ref, 120000);
    cr_assert (ref_summary, "the unfaulted run did not finish");
    double ref_acc = kd_test_json_number (ref_summary, "test_accuracy");
    double ref_wall = kd_test_json_number (ref_summary, "wall_seconds");
    long long ref_lost = 0;
    cr_expect_eq (s_replicas_equal (&ref, &ref_lost), S_RANGES);
    s_cluster_stop (&ref);

    //  2. The same run, with a primary killed ten times, by turns in each
    //  range, and restarted each time (it comes back as a backup).
    s_cluster_t c;
    s_cluster_init (&c, "kill", 20, "2");
    s_cluster_placed (&c);
    const char *los [S_RANGES] = { "0", "3925" };
    uint64_t rto [10];
    int kills = 0;
    for (int k = 0; k < 10; k++) {
        if (k == 5) {
            //  A backup too starved to answer is declared dead, as under a
            //  loaded machine: stopped until the scheduler says so.  The
            //  next kill must wait until it is back with its state.
            cr_assert (s_wait_whole (&c, 30000), "a range never had both replicas again");
            int pp = s_primary_of (&c, los [k % S_RANGES]);
            int bp = pp >= 0 ? s_partner_of (&c, pp) : -1;
            cr_assert (bp >= 0, "no backup found for range lo=%s", los [k % S_RANGES]);
            char dead [64];
            snprintf (dead, sizeof dead, "kind=shard-dead name=shard-%d ", bp);
            int deaths = kd_test_count (c.sched_log, dead);
            kill (c.shard_pid [bp], SIGSTOP);
            int now_dead = kd_test_wait_count (c.sched_log, dead, deaths + 1, 10000);
            kill (c.shard_pid [bp], SIGCONT);
            cr_assert (now_dead > deaths,
                       "the stopped backup shard-%d was never declared dead", bp);
        }
        bool whole = s_wait_whole (&c, 30000);
        if (!whole)
            s_dump_all (&c);
        cr_assert (whole, "kill %d: a range never had both replicas again", k);
        int p = s_primary_of (&c, los [k % S_RANGES]);
        int b = p >= 0 ? s_partner_of (&c, p) : -1;
        cr_assert (p >= 0 && b >= 0, "kill %d: no primary and backup found for range lo=%s", k, los [k % S_RANGES]);
        int64_t before = kd_test_shard_version (c.shard [b], 1000);
        int synced = kd_test_count (c.shard_log [p], "synced from predecessor");
        kill (c.shard_pid [p], SIGKILL);
        waitpid (c.shard_pid [p], NULL, 0);
        //  RTO: until the promoted backup has made a new version.
        int64_t ms = s_wait_above (c.shard [b], before + 1, 20000);
        if (ms < 0)
            s_dump_all (&c);
        cr_assert (ms >= 0, "kill %d: range lo=%s did not move on after its primary died", k, los [k % S_RANGES]);
        rto [kills++] = (uint64_t) ms;
        s_start_shard (&c, p);
        uint64_t t0 = kd_now_ms ();
        while (kd_test_count (c.shard_log [p], "synced from predecessor") <= synced && kd_now_ms () - t0 < 20000)
            usleep (20000);
        cr_assert (kd_test_count (c.shard_log [p], "synced from predecessor") > synced,
                   "kill %d: the restarted shard never received its state", k);
    }
    char *summary = s_wait_end (&c, 150000);
    cr_assert (summary, "the faulted run did not finish");
    double acc = kd_test_json_number (summary, "test_accuracy");
    double wall = kd_test_json_number (summary, "wall_seconds");
    long long lost = 0;
    int equal = s_replicas_equal (&c, &lost);
    //  The logs go with the scratch folder: print them while they explain.
    if (equal != S_RANGES || lost != 0)
        s_dump_all (&c);
    cr_expect_eq (equal, S_RANGES, "%d of %d ranges have identical replicas", equal, S_RANGES);
    cr_expect_eq (lost, 0, "%lld updates lost", lost);
    cr_expect_eq (kd_test_count (c.sched_log, "updates lost") + kd_test_count (c.sched_log, "kind=range-lost"), 0,
                  "the scheduler reports lost updates");
    //  Every SYNC_OK the scheduler took, through ten promotions and
    //  rejoins, named the generation that real backups echo.
    int gen_lines = s_expect_gens (c.sched_log, c.sched_t0, NULL, NULL, NULL);
    cr_expect_geq (gen_lines, 2 * S_RANGES, "%d lines say a backup received its state", gen_lines);
    //  Each kill promotes a backup.  On a loaded machine a starved shard
    //  can also miss its heartbeats and be declared dead, and its partner
    //  promoted: more promotions than kills is failover working, fewer is
    //  a kill it missed.
    int promotions = kd_test_count (c.sched_log, "kind=shard-promoted");
    //  Deaths are not counted against the kills: a killed primary whose
    //  restart registers before its silence is judged (the scheduler's
    //  late turns credited under load) is handled as a new process, not
    //  a death; its promotion is what counts.  The stopped backup's death
    //  was asserted when it happened.
    cr_expect_geq (promotions, 10, "%d promotions for 10 kills of a primary", promotions);
    cr_expect (fabs (acc - ref_acc) <= 0.003, "accuracy %.4f against %.4f unfaulted", acc, ref_acc);
    uint64_t sorted [10];
    memcpy (sorted, rto, sizeof sorted);
    for (int i = 0; i < kills; i++)
        for (int j = i + 1; j < kills; j++)
            if (sorted [j] < sorted [i]) {
                uint64_t t = sorted [i];
                sorted [i] = sorted [j];
                sorted [j] = t;
            }
    //  Deaths beyond the kills are starved shards the scheduler could not
    //  hear within the liveness; the test waited for their ranges to heal.
    printf ("FIGURE replica_primary_kill kills=%d deaths=%d promotions=%d lost=%lld replicas_identical=%d/%d "
            "rto_ms_median=%llu rto_ms_max=%llu accuracy=%.4f unfaulted=%.4f wall_s=%.1f unfaulted_wall_s=%.1f "
            "unfaulted_chain_bytes=%lld unfaulted_gradient_bytes=%lld\n",
            kills, kd_test_count (c.sched_log, "kind=shard-dead"), promotions, lost, equal, S_RANGES,
            (unsigned long long) sorted [kills / 2],
            (unsigned long long) sorted [kills - 1], acc, ref_acc, wall, ref_wall,
            s_log_sum (&ref, "chain_bytes="), s_log_sum (&ref, "bytes_in="));
    fflush (stdout);
    free (ref_summary);
    free (summary);
    s_cluster_stop (&c);
}

Test (replication, backup_killed_catches_up)
{
    s_cluster_t c;
    s_cluster_init (&c, "backup", 40, "1");
    s_cluster_placed (&c);
    int p = s_primary_of (&c, "0");
    int b = p >= 0 ? s_partner_of (&c, p) : -1;
    cr_assert (p >= 0 && b >= 0);
    int64_t before = kd_test_shard_version (c.shard [p], 1000);
    kill (c.shard_pid [b], SIGKILL);
    waitpid (c.shard_pid [b], NULL, 0);
    //  The primary stops answering until the scheduler drops its dead
    //  successor, then goes on alone.
    int64_t ms = s_wait_above (c.shard [p], before + 5, 20000);
    cr_assert (ms >= 0, "the primary did not go on after its backup died");
    s_start_shard (&c, b);
    uint64_t t0 = kd_now_ms ();
    while (kd_test_count (c.shard_log [b], "synced from predecessor") < 2 && kd_now_ms () - t0 < 20000)
        usleep (20000);
    cr_assert (kd_test_count (c.shard_log [b], "synced from predecessor") >= 2,
               "the restarted backup never received its state");
    char *summary = s_wait_end (&c, 120000);
    cr_assert (summary, "the run did not finish");
    long long lost = 0;
    cr_expect_eq (s_replicas_equal (&c, &lost), S_RANGES);
    cr_expect_eq (lost, 0);
    //  Real backups echo the generation of the CHAIN that ordered their
    //  transfer: the placement's, and at the restarted one's rejoin a newer.
    char name [32];
    snprintf (name, sizeof name, "shard-%d", b);
    uint64_t first = 0, last = 0;
    int lines = s_expect_gens (c.sched_log, c.sched_t0, name, &first, &last);
    cr_expect_geq (lines, 2 * (S_RANGES + 1), "%d lines say a backup received its state: a SYNC_OK "
                   "per range at the placement and one after the restart, each logged and an event", lines);
    cr_expect_gt (last, first, "the restarted backup shard-%d synced in generation %llu, as at the "
                  "placement (%llu)", b, (unsigned long long) last, (unsigned long long) first);
    printf ("FIGURE replica_backup_kill rto_ms=%lld lost=%lld\n", (long long) ms, lost);
    fflush (stdout);
    free (summary);
    s_cluster_stop (&c);
}

//  A scheduler that does not run for a while (starved on a busy host, or
//  stopped) hears nothing meanwhile.  Its members' silence is its own: it
//  declares no one dead when it runs again, and the members, which found
//  it silent and said HELLO again, keep their places in their chains.
//  Before, every member was declared dead at once and each range lost its
//  replicas, and a replica that came back first overwrote gradients only
//  the other held (8 updates lost in a flake round).
Test (replication, a_stopped_scheduler_declares_no_one_dead)
{
    s_cluster_t c;
    s_cluster_init (&c, "pause", 80, "1");
    s_cluster_placed (&c);
    int p = s_primary_of (&c, "0");
    cr_assert (p >= 0);
    int64_t before = kd_test_shard_version (c.shard [p], 1000);
    cr_assert (s_wait_above (c.shard [p], before + 5, 20000) >= 0, "training did not start");
    //  Stopped for 2 s, three times the 0.6 s liveness: every member finds
    //  it silent and registers again.  One backup really dies meanwhile:
    //  its death must still be seen, within the liveness once the
    //  scheduler runs again.
    int b = s_partner_of (&c, p);
    cr_assert (b >= 0);
    kill (c.sched_pid, SIGSTOP);
    usleep (1000000);
    kill (c.shard_pid [b], SIGKILL);
    waitpid (c.shard_pid [b], NULL, 0);
    usleep (1000000);
    kill (c.sched_pid, SIGCONT);
    uint64_t t0 = kd_now_ms ();
    char dead [64];
    snprintf (dead, sizeof dead, "kind=shard-dead name=shard-%d ", b);
    kd_test_wait_count (c.sched_log, dead, 1, 20000);
    uint64_t seen_ms = kd_now_ms () - t0;
    cr_expect_geq (kd_test_count (c.sched_log, "no turn for"), 1, "the scheduler did not see its own pause");
    cr_assert_eq (kd_test_count (c.sched_log, dead), 1, "the backup killed during the pause was never declared dead");
    s_start_shard (&c, b);
    int hellos = 0;
    for (int i = 0; i < S_SHARDS; i++)
        hellos += kd_test_count (c.shard_log [i], "registering again");
    cr_expect_geq (hellos, 1, "no shard found the stopped scheduler silent");
    char *summary = s_wait_end (&c, 120000);
    cr_assert (summary, "the run did not finish");
    long long lost = 0;
    int equal = s_replicas_equal (&c, &lost);
    int deaths = kd_test_count (c.sched_log, "kind=shard-dead");
    int worker_deaths = kd_test_count (c.sched_log, "kind=worker-dead");
    int promotions = kd_test_count (c.sched_log, "kind=shard-promoted");
    int ranges_lost = kd_test_count (c.sched_log, "kind=range-lost");
    if (equal != S_RANGES || lost || deaths != 1 || worker_deaths || promotions || ranges_lost)
        s_dump_all (&c);
    cr_expect_eq (equal, S_RANGES);
    cr_expect_eq (lost, 0, "%lld updates lost", lost);
    cr_expect_eq (deaths, 1, "%d shards declared dead, 1 killed", deaths);
    cr_expect_eq (worker_deaths, 0, "%d workers declared dead for the scheduler's own pause", worker_deaths);
    cr_expect_eq (promotions, 0, "%d promotions for the scheduler's own pause", promotions);
    cr_expect_eq (ranges_lost, 0);
    printf ("FIGURE replica_scheduler_pause stopped_ms=2000 shard_hellos=%d deaths=%d (1 killed, seen %llu ms after "
            "the pause) worker_deaths=%d promotions=%d lost=%lld\n", hellos, deaths, (unsigned long long) seen_ms,
            worker_deaths, promotions, lost);
    fflush (stdout);
    free (summary);
    s_cluster_stop (&c);
}

//  Stopped before its first heartbeat tick, with members registered: the
//  first tick is late too, and judges no one dead for the scheduler's own
//  silence (a flake round: a starved scheduler's first tick declared two
//  shards dead before training began).  A slow heartbeat (1 s, liveness 3)
//  leaves time to stop it after the shard's join and before that tick.
Test (replication, a_scheduler_stopped_before_its_first_tick_declares_no_one_dead)
{
    char sched [64], shard [64], sched_log [256], shard_log [256];
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", s_port + 90);
    snprintf (shard, sizeof shard, "tcp://127.0.0.1:%d", s_port + 91);
    snprintf (sched_log, sizeof sched_log, "%s/first-tick-scheduler.log", s_dir);
    snprintf (shard_log, sizeof shard_log, "%s/first-tick-shard.log", s_dir);
    const char *a_sched [] = { "kudus-scheduler", "--bind", sched, "--shards", "1", "--min-workers", "1",
                               "--model", "softmax", "--heartbeat-ms", "1000", "--liveness", "3",
                               "--log-level", "debug", NULL };
    pid_t sp = kd_test_spawn (a_sched, sched_log);
    const char *a_shard [] = { "kudus-shard", "--bind", shard, "--scheduler", sched, "--name", "shard-0",
                               "--heartbeat-ms", "200", "--liveness", "3", NULL };
    pid_t hp = kd_test_spawn (a_shard, shard_log);
    cr_assert (sp > 0 && hp > 0);
    bool joined = kd_test_wait_count (sched_log, "join shard name=shard-0", 1, 20000) >= 1;
    //  The shard is stopped first, so that the scheduler, stopped next,
    //  has nothing from it after the join: only the credit keeps it alive.
    kill (hp, SIGSTOP);
    kill (sp, SIGSTOP);
    usleep (3500000);
    kill (sp, SIGCONT);
    //  The late tick has judged the shard once the pause is logged; the
    //  shard then speaks again, and a tick more shows any death.
    kd_test_wait_count (sched_log, "no turn for", 1, 20000);
    kill (hp, SIGCONT);
    usleep (1500000);
    int dead = kd_test_count (sched_log, "kind=shard-dead");
    int pauses = kd_test_count (sched_log, "no turn for");
    kd_test_kill (hp);
    kd_test_kill (sp);
    if (!joined || dead || !pauses)
        kd_test_dump (sched_log);
    cr_assert (joined, "the shard never joined");
    cr_expect_geq (pauses, 1, "the scheduler did not see its own pause");
    cr_expect_eq (dead, 0, "a shard was declared dead for the scheduler's own silence before its first tick");
}

Test (replication, both_replicas_killed_restores_the_checkpoint)
{
    s_cluster_t c;
    s_cluster_init (&c, "both", 60, "1");
    c.checkpoints = true;
    s_cluster_placed (&c);
    int p = s_primary_of (&c, "0");
    int b = p >= 0 ? s_partner_of (&c, p) : -1;
    cr_assert (p >= 0 && b >= 0);
    //  Mid-interval, so that the checkpoint (every 50 versions) is behind.
    uint64_t t0 = kd_now_ms ();
    int64_t v = -1;
    while (kd_now_ms () - t0 < 60000) {
        v = kd_test_shard_version (c.shard [p], 1000);
        if (v >= 60 && v % 50 >= 10 && v % 50 <= 35)
            break;
        usleep (5000);
    }
    cr_assert (v >= 60 && v % 50 >= 10, "training did not reach a version past a checkpoint (%lld)", (long long) v);
    kill (c.shard_pid [p], SIGKILL);
    kill (c.shard_pid [b], SIGKILL);
    waitpid (c.shard_pid [p], NULL, 0);
    waitpid (c.shard_pid [b], NULL, 0);
    t0 = kd_now_ms ();
    while (kd_test_count (c.sched_log, "kind=range-lost") < 1 && kd_now_ms () - t0 < 10000)
        usleep (20000);
    cr_expect_eq (kd_test_count (c.sched_log, "kind=range-lost"), 1, "no range-lost event");
    //  Both come back, with their checkpoints: the first leads, from its
    //  checkpoint, and the second gets its state.
    s_start_shard (&c, p);
    s_start_shard (&c, b);
    char *summary = s_wait_end (&c, 120000);
    cr_assert (summary, "the run did not finish after the range restored its checkpoint");
    long long lost = 0;
    cr_expect_eq (s_replicas_equal (&c, &lost), S_RANGES);
    cr_expect (kd_test_count (c.sched_log, "kind=shard-restored") >= 1, "no shard-restored event");
    //  At least the versions since the checkpoint are gone.
    cr_expect (lost >= 10, "losing every replica lost %lld updates, fewer than since the checkpoint", lost);
    printf ("FIGURE replica_range_lost lost=%lld (restored from the checkpoint, every 50 versions; killed at "
            "version %lld)\n", lost, (long long) v);
    fflush (stdout);
    free (summary);
    s_cluster_stop (&c);
}

//  Wait until the shard's version is at least `at` and sits mid-interval
//  between checkpoints (every 50): 10 to 35 past one.  Returns it, or -1.
static int64_t
s_wait_mid_interval (const char *endpoint, int64_t at, int timeout_ms)
{
    uint64_t t0 = kd_now_ms ();
    while (kd_now_ms () - t0 < (uint64_t) timeout_ms) {
        int64_t v = kd_test_shard_version (endpoint, 1000);
        if (v >= at && v % 50 >= 10 && v % 50 <= 35)
            return v;
        usleep (5000);
    }
    return -1;
}

//  Both replicas of a range die at different times, so their checkpoints
//  differ by at least one interval; the one with the older checkpoint comes
//  back first.  The range waits for the other (--rejoin-wait-ms), and the
//  newer checkpoint leads: fewer updates are lost than if the first back
//  had led, as it did before.
Test (replication, a_lost_range_is_led_by_its_newest_checkpoint)
{
    s_cluster_t c;
    s_cluster_init (&c, "newest", 70, "1");
    c.checkpoints = true;
    //  Long, so that a slow start of the second cannot end the wait; the
    //  regather comes as soon as both are back.
    c.rejoin_wait_ms = "30000";
    s_cluster_placed (&c);
    int p = s_primary_of (&c, "0");
    int b = p >= 0 ? s_partner_of (&c, p) : -1;
    cr_assert (p >= 0 && b >= 0);
    int64_t v1 = s_wait_mid_interval (c.shard [p], 60, 60000);
    cr_assert (v1 > 0, "training did not pass a checkpoint");
    kill (c.shard_pid [b], SIGKILL);
    waitpid (c.shard_pid [b], NULL, 0);
    //  The primary goes on alone and checkpoints at least once more.
    int64_t v2 = s_wait_mid_interval (c.shard [p], v1 + 60, 90000);
    cr_assert (v2 > 0, "training did not go on without the backup (version %lld)", (long long) v1);
    kill (c.shard_pid [p], SIGKILL);
    waitpid (c.shard_pid [p], NULL, 0);
    uint64_t t0 = kd_now_ms ();
    while (kd_test_count (c.sched_log, "kind=range-lost") < 1 && kd_now_ms () - t0 < 10000)
        usleep (20000);
    cr_assert_eq (kd_test_count (c.sched_log, "kind=range-lost"), 1, "no range-lost event");
    //  The older checkpoint first; the newer once the range waits for it.
    s_start_shard (&c, b);
    char back [64];
    snprintf (back, sizeof back, "shard-%d back at version", b);
    t0 = kd_now_ms ();
    while (kd_test_count (c.sched_log, back) < 1 && kd_now_ms () - t0 < 20000)
        usleep (20000);
    cr_assert_eq (kd_test_count (c.sched_log, back), 1, "the older replica did not come back first");
    s_start_shard (&c, p);
    char *summary = s_wait_end (&c, 120000);
    cr_assert (summary, "the run did not finish after the range came back");
    long long lost = 0;
    cr_expect_eq (s_replicas_equal (&c, &lost), S_RANGES);
    char leads [64], at [32];
    snprintf (leads, sizeof leads, "kind=range-regathered name=shard-%d ", p);
    kd_test_log_word (c.sched_log, "leads at version", "leads at version ", at, sizeof at);
    cr_expect_eq (kd_test_count (c.sched_log, leads), 1, "the newer checkpoint (shard-%d) does not lead", p);
    cr_expect_geq (atoll (at), v1 / 50 * 50 + 50, "led at version %s, not past the backup's checkpoint", at);
    //  Lost: what the primary did after its last checkpoint, not what it
    //  did after the backup's.
    cr_expect (lost > 0 && lost < 50, "lost %lld updates (killed at %lld; the backup's checkpoint %lld, "
               "the primary's %lld)", lost, (long long) v2, (long long) (v1 / 50 * 50),
               (long long) (v2 / 50 * 50));
    printf ("FIGURE replica_range_regathered lost=%lld (killed the backup at %lld, the primary at %lld; "
            "checkpoints every 50)\n", lost, (long long) v1, (long long) v2);
    fflush (stdout);
    free (summary);
    s_cluster_stop (&c);
}

//  --------------------------------------------------------------------------
//  A stale SYNC_OK: a real scheduler, fake shards and a fake worker

#define S_FAKE_ROWS     60000       //  the fake worker's training set
#define S_FAKE_WAIT_MS  20000       //  a fake peer's receive timeout

//  A fake peer's DEALER to the scheduler.
static zsock_t *
s_fake_dealer (const char *sched)
{
    zsock_t *sock = kd_test_dealer (sched);
    cr_assert (sock);
    //  Generous, as the scheduler may start slowly on a busy machine; a
    //  broken one still fails the test instead of hanging it.
    zsock_set_rcvtimeo (sock, S_FAKE_WAIT_MS);
    return sock;
}

//  HELLO from a fake peer, as a real one says it (common/net/kd_peer.c): a
//  shard advertises an endpoint (nothing listens there: the scheduler only
//  names it in CHAINs) and can send STAGED; a worker reports its rows.
static void
s_fake_hello (zsock_t *sock, const char *name, const char *endpoint)
{
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, endpoint ? "shard" : "worker");
    kd_msg_set_str (hello, KD_F_NAME, name);
    kd_msg_set_uint (hello, KD_F_VERSION, 0);
    if (endpoint) {
        kd_msg_set_str (hello, KD_F_ENDPOINT, endpoint);
        kd_msg_set_uint (hello, KD_F_STAGED, 1);
    }
    else
        kd_msg_set_uint (hello, KD_F_SAMPLES, S_FAKE_ROWS);
    cr_assert_eq (kd_msg_send (&hello, sock), 0);
}

//  The rank a fake peer's WELCOME gives it.
static uint64_t
s_fake_welcome (zsock_t *sock)
{
    kd_msg_t *welcome = NULL;
    cr_assert (kd_test_expect (sock, KD_MSG_WELCOME, &welcome), "no WELCOME came");
    uint64_t rank = kd_msg_uint (welcome, KD_F_RANK);
    kd_msg_destroy (&welcome);
    return rank;
}

//  The next CHAIN a fake shard gets (other messages skipped): its role
//  must be role, and sync, when not negative, its sync.  Its generation.
static uint64_t
s_fake_chain (zsock_t *sock, const char *role, int sync)
{
    kd_msg_t *chain = NULL;
    cr_assert (kd_test_expect (sock, KD_MSG_CHAIN, &chain), "no CHAIN came");
    cr_expect_str_eq (kd_msg_str (chain, KD_F_ROLE), role);
    if (sync >= 0)
        cr_expect_eq (kd_msg_uint (chain, KD_F_SYNC), (uint64_t) sync);
    cr_assert (kd_msg_has (chain, KD_F_GEN), "a CHAIN names no generation");
    uint64_t gen = kd_msg_uint (chain, KD_F_GEN);
    kd_msg_destroy (&chain);
    return gen;
}

//  The fake backup shard-b's SYNC_OK to the scheduler, with generation
//  gen, or without one (gen < 0) as an older shard sends it.  Then, so
//  that the scheduler has handled it when this returns, the backup says
//  HELLO again on the same connection: a live replica is told its place
//  again, by a CHAIN of the same generation, which comes after the
//  SYNC_OK was read.
static void
s_fake_sync_ok (zsock_t *sock, uint64_t rank, int64_t gen, uint64_t chain_gen)
{
    kd_msg_t *ok = kd_msg_new (KD_MSG_SYNC_OK);
    kd_msg_set_uint (ok, KD_F_VERSION, 0);
    kd_msg_set_uint (ok, KD_F_RANK, rank);
    if (gen >= 0)
        kd_msg_set_uint (ok, KD_F_GEN, (uint64_t) gen);
    cr_assert_eq (kd_msg_send (&ok, sock), 0);
    s_fake_hello (sock, "shard-b", "tcp://127.0.0.1:1");
    cr_expect_eq (s_fake_chain (sock, "backup", -1), chain_gen, "telling a live replica its "
                  "place again made a new generation");
}

//  Every fake peer heartbeats, so that none is declared dead.
static void
s_fake_beat (zsock_t **socks, int n)
{
    for (int i = 0; i < n; i++) {
        kd_msg_t *beat = kd_msg_new (KD_MSG_HEARTBEAT);
        kd_msg_send (&beat, socks [i]);
    }
}

//  A backup's SYNC_OK that answers a transfer ordered before the scheduler
//  last marked it unsynced must not mark it synced (its predecessor then
//  may have held older state than the head does now, and a promotion would
//  lose committed updates silently); one of the generation its CHAIN named
//  must, and so must one without a generation (an older shard).
Test (replication, a_stale_sync_ok_does_not_mark_a_backup_synced)
{
    char sched [64], log [256];
    snprintf (sched, sizeof sched, "tcp://127.0.0.1:%d", s_port + 90);
    snprintf (log, sizeof log, "%s/stale-scheduler.log", s_dir);
    const char *argv [] = { "kudus-scheduler", "--bind", sched, "--shards", "1", "--replicas", "2",
                            "--min-workers", "1", "--model", "softmax", "--consistency", "bsp",
                            "--heartbeat-ms", "500", "--liveness", "40", "--max-seconds", "120",
                            "--log-level", "info", NULL };
    uint64_t t0 = (uint64_t) zclock_time ();
    pid_t pid = kd_test_spawn (argv, log);
    cr_assert (pid > 0);
    zsock_t *a = s_fake_dealer (sched), *b = s_fake_dealer (sched), *w = s_fake_dealer (sched);
    //  One range, two replicas: a (rank 0) leads, b (rank 1) is its backup.
    s_fake_hello (a, "shard-a", "tcp://127.0.0.1:2");
    cr_assert_eq (s_fake_welcome (a), 0);
    s_fake_hello (b, "shard-b", "tcp://127.0.0.1:1");
    cr_assert_eq (s_fake_welcome (b), 1);
    //  The worker completes the cluster: training starts, and the chain is
    //  placed in a new generation, which both CHAINs name.
    s_fake_hello (w, "worker-0", NULL);
    uint64_t gen = s_fake_chain (a, "primary", 1);
    cr_assert_eq (s_fake_chain (b, "backup", 0), gen);
    //  Generations start at the scheduler's start time (ms since the
    //  epoch), so that a restarted one's are above its predecessor's.
    cr_assert_geq (gen, t0, "the first generation %llu is below the wall clock %llu ms before the "
                   "scheduler started", (unsigned long long) gen, (unsigned long long) t0);
    zsock_t *all [] = { a, b, w };
    s_fake_beat (all, 3);

    //  1. A generation below the one b's CHAIN named: not taken.
    s_fake_sync_ok (b, 1, (int64_t) gen - 1, gen);
    cr_expect_eq (kd_test_count (log, "SYNC_OK ignored"), 1);
    cr_expect_eq (kd_test_count (log, "kind=shard-synced"), 0,
                  "a SYNC_OK of generation %llu marked the backup synced, its CHAIN named %llu",
                  (unsigned long long) gen - 1, (unsigned long long) gen);
    //  2. The CHAIN's own generation: taken.
    s_fake_sync_ok (b, 1, (int64_t) gen, gen);
    cr_expect_eq (kd_test_count (log, "kind=shard-synced"), 1, "the SYNC_OK of the current generation was not taken");

    //  3. The race itself: b restarts (a new connection) and joins again
    //  as the tail, unsynced, in a new generation; the SYNC_OK of the
    //  transfer ordered before comes late, and must not count.
    zsock_destroy (&b);
    b = s_fake_dealer (sched);
    all [1] = b;
    s_fake_hello (b, "shard-b", "tcp://127.0.0.1:1");
    cr_assert_eq (s_fake_welcome (b), 1);
    uint64_t gen2 = s_fake_chain (b, "backup", 0);
    cr_assert_gt (gen2, gen);
    //  a first becomes the tail (b left the chain), then is told to send
    //  its state to b, in the new generation.
    cr_expect_eq (s_fake_chain (a, "primary", 0), gen);
    cr_expect_eq (s_fake_chain (a, "primary", 1), gen2);
    s_fake_beat (all, 3);
    s_fake_sync_ok (b, 1, (int64_t) gen, gen2);
    cr_expect_eq (kd_test_count (log, "SYNC_OK ignored"), 2);
    cr_expect_eq (kd_test_count (log, "kind=shard-synced"), 1,
                  "a SYNC_OK ordered before the backup rejoined (generation %llu, now %llu) marked it synced",
                  (unsigned long long) gen, (unsigned long long) gen2);
    s_fake_sync_ok (b, 1, (int64_t) gen2, gen2);
    cr_expect_eq (kd_test_count (log, "kind=shard-synced"), 2, "the SYNC_OK of the new generation was not taken");

    //  4. An older shard names no generation: taken, as always, and the
    //  log says so (the line and the event).
    s_fake_sync_ok (b, 1, -1, gen2);
    cr_expect_eq (kd_test_count (log, "kind=shard-synced"), 3, "a SYNC_OK without a generation was not taken");
    cr_expect_eq (kd_test_count (log, "gen=none"), 2, "a SYNC_OK without a generation was not logged as such");

    if (kd_test_count (log, "kind=shard-synced") != 3 || kd_test_count (log, "SYNC_OK ignored") != 2)
        kd_test_dump (log);
    zsock_destroy (&a);
    zsock_destroy (&b);
    zsock_destroy (&w);
    kd_test_kill (pid);
}
