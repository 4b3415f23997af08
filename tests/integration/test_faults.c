/*  Fault injection on the real binaries, on loopback.

    Each test starts a scheduler, two shards, a monitor and N workers as
    separate processes, so that one worker can be signalled on its own, and
    follows the monitor's stream ("stats" and "event") with a SUB socket.
    It asserts what the cluster must do, then prints one FIGURE line on
    stdout that the README quotes:

    - kill -9 of a worker mid-barrier (BSP): the scheduler declares it dead
      (event "worker-dead", within the liveness bound) and the phases advance
      again without it;
    - SIGSTOP of a worker for 10 s, then SIGCONT (default heartbeats: 1 s,
      3 missed): training goes on while it is stopped, it is declared dead,
      it rejoins with the same rank, keeps training, and the gradient it was
      working on when it stopped is dropped, never applied;
    - the same readmission while the worker's push of that stale gradient is
      blocked (the shards are briefly stopped too): BSP must not deadlock.

    The docker-compose variant (a worker cut off the network) is
    tests/compose/test_compose_faults.sh.
*/
#include <criterion/criterion.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <msgpack.h>
#include "kd_internal.h"
#include "kd_testutil.h"

#define S_MAX_WORKERS   8       //  workers one test starts at most
#define S_MAX_EVENTS    256     //  events one test records
#define S_MAX_TELE      20000   //  victim telemetry records
#define S_STATUS_MS     "100"   //  scheduler STATUS and monitor publish
                                //  interval: 100 ms resolution for figures
#define S_EVENT_CEILING_MS 60000 //  an event a test waits for: a generous
                                //  ceiling, not a timing bound (a busy 2-core
                                //  machine delays checks and their events)

static char *s_dir;
static int s_port;
static kd_test_procs_t s_procs;      //  started here, killed at teardown

static void
setup (void)
{
    s_dir = kd_test_tmpdir ();
    cr_assert (s_dir);
    s_port = kd_test_base_port ();
    memset (&s_procs, 0, sizeof s_procs);
}

//  Every process a test started dies here, also when an assertion failed
//  half way (SIGKILL works on a stopped process too).
static void
teardown (void)
{
    kd_test_procs_kill (&s_procs);
    free (s_dir);
}

TestSuite (faults, .init = setup, .fini = teardown, .timeout = 200);

//  --------------------------------------------------------------------------
//  The cluster

typedef struct {
    int n_workers;                      //  workers started
    int heartbeat_ms, liveness;         //  failure detection settings
    char sched [64], intake [64], pub [64], proxy [64];
    char shard_ep [2][64];              //  shard endpoints
    char summary [256];                 //  scheduler summary path
    char log_sched [256], log_mon [256], log_shard [256];
    char log_worker [S_MAX_WORKERS][256];
    pid_t sched_pid, mon_pid, shard_pid [2];
    pid_t worker_pid [S_MAX_WORKERS];
} s_cluster_t;

static pid_t
s_spawn (const char *const *argv, const char *log)
{
    pid_t pid = kd_test_procs_spawn (&s_procs, argv, log);
    cr_assert (pid > 0);
    return pid;
}

//  Start scheduler, 2 shards, monitor and n workers named fw-0 ... fw-n-1.
//  Worker `proxied` (or -1) sends its telemetry to the test's proxy instead
//  of the monitor.
static void
s_cluster_start (s_cluster_t *c, int n, int heartbeat_ms, int liveness,
                 const char *delay_ms, int proxied)
{
    memset (c, 0, sizeof *c);
    c->n_workers = n;
    c->heartbeat_ms = heartbeat_ms;
    c->liveness = liveness;
    snprintf (c->sched, sizeof c->sched, "tcp://127.0.0.1:%d", s_port);
    snprintf (c->intake, sizeof c->intake, "tcp://127.0.0.1:%d", s_port + 1);
    snprintf (c->pub, sizeof c->pub, "tcp://127.0.0.1:%d", s_port + 2);
    snprintf (c->proxy, sizeof c->proxy, "tcp://127.0.0.1:%d", s_port + 3);
    for (int s = 0; s < 2; s++)
        snprintf (c->shard_ep [s], sizeof c->shard_ep [s], "tcp://127.0.0.1:%d", s_port + 100 + s);
    snprintf (c->summary, sizeof c->summary, "%s/summary.json", s_dir);
    snprintf (c->log_sched, sizeof c->log_sched, "%s/scheduler.log", s_dir);
    snprintf (c->log_mon, sizeof c->log_mon, "%s/monitor.log", s_dir);
    snprintf (c->log_shard, sizeof c->log_shard, "%s/shards.log", s_dir);
    char hb [16], live [16], nw [16];
    snprintf (hb, sizeof hb, "%d", heartbeat_ms);
    snprintf (live, sizeof live, "%d", liveness);
    snprintf (nw, sizeof nw, "%d", n);
    //  The time limit only bounds a broken run; each test stops the
    //  scheduler itself with SIGTERM, which also writes the summary.
    const char *a_sched [] = { "kudus-scheduler", "--bind", c->sched, "--shards", "2",
                               "--min-workers", nw, "--epochs", "1000", "--max-seconds", "150",
                               "--heartbeat-ms", hb, "--liveness", live, "--status-ms", S_STATUS_MS,
                               "--summary", c->summary, NULL };
    c->sched_pid = s_spawn (a_sched, c->log_sched);
    for (int s = 0; s < 2; s++) {
        char name [16];
        snprintf (name, sizeof name, "fs-%d", s);
        const char *a_shard [] = { "kudus-shard", "--bind", c->shard_ep [s], "--scheduler", c->sched,
                                   "--name", name, "--heartbeat-ms", hb, "--liveness", live, NULL };
        c->shard_pid [s] = s_spawn (a_shard, c->log_shard);
    }
    const char *a_mon [] = { "kudus-monitor", "--bind", c->intake, "--pub-bind", c->pub,
                             "--scheduler", c->sched, "--publish-ms", S_STATUS_MS,
                             "--eval-interval", "2", "--heartbeat-ms", hb, "--liveness", live, NULL };
    c->mon_pid = s_spawn (a_mon, c->log_mon);
    for (int w = 0; w < n; w++) {
        char name [16];
        snprintf (name, sizeof name, "fw-%d", w);
        snprintf (c->log_worker [w], sizeof c->log_worker [w], "%s/worker-%d.log", s_dir, w);
        const char *a_worker [] = { "kudus-worker", "--scheduler", c->sched,
                                    "--monitor", w == proxied ? c->proxy : c->intake,
                                    "--name", name, "--delay-ms", delay_ms,
                                    "--heartbeat-ms", hb, "--liveness", live, NULL };
        c->worker_pid [w] = s_spawn (a_worker, c->log_worker [w]);
    }
}

static void
s_cluster_dump (s_cluster_t *c)
{
    kd_test_dump (c->log_sched);
    kd_test_dump (c->log_mon);
    kd_test_dump (c->log_shard);
    for (int w = 0; w < c->n_workers; w++)
        kd_test_dump (c->log_worker [w]);
}

//  SIGTERM the scheduler, which writes the summary and stops everyone;
//  returns the summary text (caller frees) or NULL.
static char *
s_cluster_finish (s_cluster_t *c)
{
    kill (c->sched_pid, SIGTERM);
    int status = -1;
    bool exited = kd_test_wait (c->sched_pid, 20000, &status);
    cr_expect (exited && WIFEXITED (status) && WEXITSTATUS (status) == 0,
               "scheduler did not exit cleanly after SIGTERM (status %d)", status);
    //  The others get STOP; give them a moment, then the teardown kills
    //  whatever is left.
    for (int w = 0; w < c->n_workers; w++)
        kd_test_wait (c->worker_pid [w], 3000, NULL);
    return kd_test_slurp (c->summary);
}

//  --------------------------------------------------------------------------
//  Following the stream

typedef struct {
    char kind [32];             //  event kind
    char name [64];             //  member name, "" if none
    int64_t rank;               //  member rank, -1 if none
    char detail [160];          //  human text
    uint64_t recv_ms;           //  wall ms the test received it
} s_event_t;

typedef struct {
    uint64_t clock;             //  clock the gradient was computed for
    uint64_t staleness;         //  staleness of the worker's last applied gradient
    uint64_t dropped;           //  its gradients dropped so far
    uint64_t version;           //  model version it computed on
    double compute_ms, push_ms, wait_ms, pull_ms;
    uint64_t recv_ms;           //  wall ms the test received it
} s_tele_t;

typedef struct {
    zsock_t *sub;               //  SUB to the monitor's stream
    zsock_t *proxy_in;          //  ROUTER the proxied worker sends TELEMETRY to
    zsock_t *proxy_out;         //  DEALER that forwards it to the monitor
    int64_t version;            //  latest stats version, -1 before any
    int64_t phases;             //  latest stats phases
    int64_t workers;            //  latest stats workers
    int64_t max_workers;        //  most workers any stats message showed
    uint64_t stats_ms;          //  wall ms of the latest stats
    int n_stats;                //  stats messages seen
    s_event_t events [S_MAX_EVENTS];
    int n_events;
    s_tele_t *tele;             //  proxied worker's telemetry, in order
    int n_tele;
    int64_t tele_rank;          //  its rank, from its telemetry
} s_watch_t;

static void
s_watch_open (s_watch_t *w, s_cluster_t *c, bool proxy)
{
    memset (w, 0, sizeof *w);
    w->version = w->phases = w->workers = -1;
    w->tele_rank = -1;
    w->sub = zsock_new (ZMQ_SUB);
    cr_assert (w->sub);
    zsock_set_subscribe (w->sub, "stats");
    zsock_set_subscribe (w->sub, "event");
    zsock_set_rcvtimeo (w->sub, 0);
    cr_assert (zsock_connect (w->sub, "%s", c->pub) == 0);
    if (proxy) {
        w->tele = (s_tele_t *) calloc (S_MAX_TELE, sizeof (s_tele_t));
        cr_assert (w->tele);
        w->proxy_in = zsock_new (ZMQ_ROUTER);
        w->proxy_out = zsock_new (ZMQ_DEALER);
        cr_assert (w->proxy_in && w->proxy_out);
        zsock_set_linger (w->proxy_in, 0);
        zsock_set_linger (w->proxy_out, 0);
        zsock_set_sndtimeo (w->proxy_out, 0);
        //  The last cluster's proxy, closed a moment ago, may still hold
        //  the port: ZeroMQ closes a listener in its own thread.
        int bound = -1;
        for (int i = 0; i < 100 && bound < 0; i++)
            if ((bound = zsock_bind (w->proxy_in, "%s", c->proxy)) < 0)
                zclock_sleep (50);
        cr_assert (bound >= 0, "cannot bind %s", c->proxy);
        cr_assert (zsock_connect (w->proxy_out, "%s", c->intake) == 0);
    }
}

static void
s_watch_close (s_watch_t *w)
{
    zsock_destroy (&w->sub);
    zsock_destroy (&w->proxy_in);
    zsock_destroy (&w->proxy_out);
    free (w->tele);
    w->tele = NULL;
}

//  Value of a key in a MessagePack map, or NULL.
static msgpack_object *
s_map_get (msgpack_object *map, const char *key)
{
    size_t len = strlen (key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        msgpack_object *k = &map->via.map.ptr [i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == len
        &&  !memcmp (k->via.str.ptr, key, len))
            return &map->via.map.ptr [i].val;
    }
    return NULL;
}

static int64_t
s_map_int (msgpack_object *map, const char *key, int64_t dflt)
{
    msgpack_object *v = s_map_get (map, key);
    return v && v->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? (int64_t) v->via.u64 : dflt;
}

static void
s_map_str (msgpack_object *map, const char *key, char *out, size_t size)
{
    msgpack_object *v = s_map_get (map, key);
    size_t n = v && v->type == MSGPACK_OBJECT_STR ? v->via.str.size : 0;
    if (n >= size)
        n = size - 1;
    if (n)
        memcpy (out, v->via.str.ptr, n);
    out [n] = 0;
}

//  One message from the stream.
static void
s_on_stream (s_watch_t *w)
{
    zmsg_t *msg = zmsg_recv (w->sub);
    if (!msg)
        return;
    char *topic = zmsg_popstr (msg);
    zframe_t *body = zmsg_first (msg);
    msgpack_unpacked up;
    msgpack_unpacked_init (&up);
    if (topic && body
    &&  msgpack_unpack_next (&up, (const char *) zframe_data (body), zframe_size (body), NULL)
        == MSGPACK_UNPACK_SUCCESS && up.data.type == MSGPACK_OBJECT_MAP) {
        if (!strcmp (topic, "stats")) {
            w->version = s_map_int (&up.data, "version", w->version);
            w->phases = s_map_int (&up.data, "phases", w->phases);
            w->workers = s_map_int (&up.data, "workers", w->workers);
            if (w->workers > w->max_workers)
                w->max_workers = w->workers;
            w->stats_ms = kd_wall_ms ();
            w->n_stats++;
        }
        else
        if (!strcmp (topic, "event") && w->n_events < S_MAX_EVENTS) {
            s_event_t *e = &w->events [w->n_events++];
            s_map_str (&up.data, "kind", e->kind, sizeof e->kind);
            s_map_str (&up.data, "name", e->name, sizeof e->name);
            s_map_str (&up.data, "detail", e->detail, sizeof e->detail);
            e->rank = s_map_int (&up.data, "rank", -1);
            e->recv_ms = kd_wall_ms ();
        }
    }
    msgpack_unpacked_destroy (&up);
    free (topic);
    zmsg_destroy (&msg);
}

//  One TELEMETRY from the proxied worker: record it, pass it on.
static void
s_on_proxy (s_watch_t *w)
{
    zmsg_t *msg = zmsg_recv (w->proxy_in);
    if (!msg)
        return;
    zframe_t *id = zmsg_pop (msg);
    zframe_destroy (&id);
    zmsg_t *copy = zmsg_dup (msg);
    kd_msg_t *t = NULL;
    kd_msg_err_t err;
    if (kd_msg_decode (&copy, false, &t, NULL, &err) == 0 && kd_msg_type (t) == KD_MSG_TELEMETRY
    &&  w->n_tele < S_MAX_TELE) {
        s_tele_t *r = &w->tele [w->n_tele++];
        r->clock = kd_msg_uint (t, KD_F_CLOCK);
        r->staleness = kd_msg_uint (t, KD_F_STALENESS);
        r->dropped = kd_msg_uint (t, KD_F_DROPPED);
        r->version = kd_msg_uint (t, KD_F_VERSION);
        r->compute_ms = kd_msg_float (t, KD_F_COMPUTE_MS);
        r->push_ms = kd_msg_float (t, KD_F_PUSH_MS);
        r->wait_ms = kd_msg_float (t, KD_F_WAIT_MS);
        r->pull_ms = kd_msg_float (t, KD_F_PULL_MS);
        r->recv_ms = kd_wall_ms ();
        w->tele_rank = (int64_t) kd_msg_uint (t, KD_F_RANK);
    }
    kd_msg_destroy (&t);
    zmsg_destroy (&copy);
    zmsg_send (&msg, w->proxy_out);
    zmsg_destroy (&msg);
}

//  Follow the stream (and the proxy) for ms milliseconds.
static void
s_pump (s_watch_t *w, int ms)
{
    uint64_t deadline = kd_now_ms () + (uint64_t) ms;
    zmq_pollitem_t items [2] = {
        { zsock_resolve (w->sub), 0, ZMQ_POLLIN, 0 },
        { w->proxy_in ? zsock_resolve (w->proxy_in) : NULL, 0, ZMQ_POLLIN, 0 }
    };
    int n = w->proxy_in ? 2 : 1;
    for (;;) {
        uint64_t now = kd_now_ms ();
        if (now >= deadline)
            break;
        if (zmq_poll (items, n, (long) (deadline - now)) <= 0)
            continue;
        if (items [0].revents & ZMQ_POLLIN)
            s_on_stream (w);
        if (n > 1 && (items [1].revents & ZMQ_POLLIN))
            s_on_proxy (w);
    }
}

//  Pump until the stats version reaches `version`; true if it did in time.
static bool
s_wait_version (s_watch_t *w, int64_t version, int timeout_ms)
{
    uint64_t deadline = kd_now_ms () + (uint64_t) timeout_ms;
    while (w->version < version && kd_now_ms () < deadline)
        s_pump (w, 20);
    return w->version >= version;
}

//  Index of the first event of a kind for a rank at or after `from`, or -1.
static int
s_find_event (s_watch_t *w, const char *kind, int64_t rank, int from)
{
    for (int i = from; i < w->n_events; i++)
        if (!strcmp (w->events [i].kind, kind) && w->events [i].rank == rank)
            return i;
    return -1;
}

//  Pump until such an event shows; its index, or -1 after timeout_ms.
static int
s_wait_event (s_watch_t *w, const char *kind, int64_t rank, int from, int timeout_ms)
{
    uint64_t deadline = kd_now_ms () + (uint64_t) timeout_ms;
    int i;
    while ((i = s_find_event (w, kind, rank, from)) < 0 && kd_now_ms () < deadline)
        s_pump (w, 10);
    return i;
}

//  The kinds of all events seen, for a failure message.
static const char *
s_event_list (s_watch_t *w)
{
    static char list [2048];
    size_t len = 0;
    list [0] = 0;
    for (int i = 0; i < w->n_events && len < sizeof list - 80; i++)
        len += (size_t) snprintf (list + len, sizeof list - len, "%s%s(rank %lld)", i ? ", " : "",
                                  w->events [i].kind, (long long) w->events [i].rank);
    return w->n_events ? list : "(none)";
}

//  --------------------------------------------------------------------------
//  The scheduler's log

//  Rank of every worker name in "join worker" and "rejoin worker" lines.
//  Returns the number of lines; names [i] / ranks [i] hold each line, and
//  *rejoins counts the rejoin lines of `name`.
static int
s_log_ranks (const char *log, char names [][32], int64_t *ranks, int max, const char *name,
             int *rejoins)
{
    char *text = kd_test_slurp (log);
    int n = 0;
    *rejoins = 0;
    for (char *line = text ? strtok (text, "\n") : NULL; line; line = strtok (NULL, "\n")) {
        char *p = strstr (line, "join worker name=");
        if (!p || n >= max)
            continue;
        bool rejoin = p >= line + 2 && !strncmp (p - 2, "rejoin", 6);
        char nm [32] = "";
        long long rank = -1;
        if (sscanf (p, "join worker name=%31s rank=%lld", nm, &rank) != 2)
            continue;
        snprintf (names [n], 32, "%s", nm);
        ranks [n++] = rank;
        if (rejoin && !strcmp (nm, name))
            (*rejoins)++;
    }
    free (text);
    return n;
}

//  Check that names and ranks are one to one in the scheduler's log: a name
//  never changes rank and no two names share one.  Returns distinct ranks,
//  or -1 on a violation (reported with cr_expect).
static int
s_check_ranks (const char *log, const char *victim, int64_t *victim_rank, int *victim_rejoins)
{
    char names [64][32];
    int64_t ranks [64];
    int n = s_log_ranks (log, names, ranks, 64, victim, victim_rejoins);
    int distinct = 0;
    bool ok = true;
    *victim_rank = -1;
    for (int i = 0; i < n; i++) {
        bool first = true;
        for (int j = 0; j < i; j++) {
            bool same_name = !strcmp (names [i], names [j]);
            if (same_name && ranks [i] != ranks [j]) {
                cr_expect (false, "%s rejoined with rank %lld, it had rank %lld", names [i],
                           (long long) ranks [i], (long long) ranks [j]);
                ok = false;
            }
            if (!same_name && ranks [i] == ranks [j]) {
                cr_expect (false, "duplicate rank %lld: %s and %s", (long long) ranks [i],
                           names [i], names [j]);
                ok = false;
            }
            if (ranks [i] == ranks [j])
                first = false;
        }
        if (first)
            distinct++;
        if (!strcmp (names [i], victim) && *victim_rank < 0)
            *victim_rank = ranks [i];
    }
    return ok ? distinct : -1;
}

//  --------------------------------------------------------------------------
//  1. kill -9 a worker mid-barrier (BSP)

Test (faults, kill9_worker_mid_barrier)
{
    const int n = 3, hb = 200, liveness = 3;
    s_cluster_t c;
    s_cluster_start (&c, n, hb, liveness, "20", -1);
    s_watch_t w;
    s_watch_open (&w, &c, false);
    bool trained = s_wait_version (&w, 40, 60000);
    if (!trained)
        s_cluster_dump (&c);
    cr_assert (trained, "training did not start (version %lld)", (long long) w.version);
    cr_expect_eq (w.workers, n, "stats show %lld workers, not %d", (long long) w.workers, n);

    //  The victim is fw-1; its rank comes from the scheduler's log.
    int64_t victim_rank;
    int rejoins;
    cr_assert (s_check_ranks (c.log_sched, "fw-1", &victim_rank, &rejoins) == n);
    int mark = w.n_events;
    uint64_t t_kill = kd_wall_ms ();
    kill (c.worker_pid [1], SIGKILL);
    //  The version just after the kill, from a shard itself (the stream's
    //  lags by up to one publish interval).  Read after the kill, it holds
    //  however late this test runs: BSP can finish at most the barrier the
    //  victim had arrived at, then waits.
    int64_t v_kill = kd_test_shard_version (c.shard_ep [0], 1000);
    if (v_kill < w.version)
        v_kill = w.version;

    //  BSP waits for it at the next barrier until the scheduler misses
    //  `liveness` heartbeats; the plateau is the version it stalls at.
    int64_t plateau = w.version;
    uint64_t deadline = kd_now_ms () + S_EVENT_CEILING_MS;
    int dead = -1;
    while (dead < 0 && kd_now_ms () < deadline) {
        s_pump (&w, 10);
        if (w.version > plateau)
            plateau = w.version;
        dead = s_find_event (&w, "worker-dead", victim_rank, mark);
    }
    if (dead < 0)
        s_cluster_dump (&c);
    cr_assert (dead >= 0, "no worker-dead event for rank %lld within %d s; events: %s",
               (long long) victim_rank, S_EVENT_CEILING_MS / 1000, s_event_list (&w));
    uint64_t detection_ms = w.events [dead].recv_ms - t_kill;

    //  Versions advance again: the first stats past the plateau, then a
    //  clear run of 20 more phases.
    uint64_t advance_ms = 0;
    deadline = kd_now_ms () + S_EVENT_CEILING_MS;
    while (kd_now_ms () < deadline && !advance_ms) {
        s_pump (&w, 5);
        if (w.version > plateau)
            advance_ms = w.stats_ms - t_kill;
    }
    bool resumed = s_wait_version (&w, plateau + 20, S_EVENT_CEILING_MS);
    s_pump (&w, 500);
    int64_t workers_after = w.workers;
    char *summary = s_cluster_finish (&c);
    int dead_lines = kd_test_count (c.log_sched, "dead worker name=fw-1 ");
    int64_t silent_ms = kd_test_log_value (c.log_sched, "dead worker name=fw-1 ", "silent_ms=");
    printf ("FIGURE kill9_worker detection_ms=%llu silent_ms=%lld advance_ms=%llu versions_at_kill=%lld "
            "plateau=%lld heartbeat_ms=%d liveness=%d workers=%d\n",
            (unsigned long long) detection_ms, (long long) silent_ms, (unsigned long long) advance_ms,
            (long long) v_kill, (long long) plateau, hb, liveness, n);
    fflush (stdout);

    //  Death is declared after `liveness` silent intervals, by the
    //  scheduler's own clock (the wall time from the kill depends on how
    //  late the checks run on a busy machine: the figure above).
    cr_expect (silent_ms > (int64_t) liveness * hb,
               "declared dead after %lld ms of silence, before %d heartbeats of %d ms were missed",
               (long long) silent_ms, liveness, hb);
    cr_expect (advance_ms > 0 && resumed, "phases did not advance after the kill: plateau %lld, now %lld",
               (long long) plateau, (long long) w.version);
    //  Until the death, BSP stalled: after the version read just after
    //  the kill, at most the barrier the victim had arrived at completed
    //  (and the scheduler's count may lead the shard's by the commit it
    //  is sending).
    cr_expect (plateau <= v_kill + 2, "versions went from %lld to %lld before the death was declared",
               (long long) v_kill, (long long) plateau);
    cr_expect_eq (workers_after, n - 1, "stats show %lld workers after the death", (long long) workers_after);
    cr_expect_eq (dead_lines, 1, "scheduler log has %d 'dead worker name=fw-1' lines", dead_lines);
    cr_expect (summary != NULL, "no summary written");
    cr_expect (kd_test_json_number (summary, "phases") > (double) plateau,
               "summary phases %g", kd_test_json_number (summary, "phases"));
    if (advance_ms == 0 || !resumed || !summary)
        s_cluster_dump (&c);
    free (summary);
    s_watch_close (&w);
}

//  --------------------------------------------------------------------------
//  2. SIGSTOP a worker for 10 s, then SIGCONT

Test (faults, sigstop_worker_rejoins_with_same_rank_and_its_stale_gradient_is_dropped)
{
    //  Default failure detection: heartbeats every 1 s, dead after 3 missed.
    const int n = 3, hb = 1000, liveness = 3, stop_ms = 10000;
    s_cluster_t c;
    s_cluster_start (&c, n, hb, liveness, "20", 1);
    s_watch_t w;
    s_watch_open (&w, &c, true);
    bool trained = s_wait_version (&w, 40, 60000);
    if (!trained)
        s_cluster_dump (&c);
    cr_assert (trained, "training did not start (version %lld)", (long long) w.version);
    s_pump (&w, 300);
    cr_assert (w.n_tele > 5 && w.tele_rank >= 0, "no telemetry from fw-1 through the proxy");
    int64_t victim_rank, log_rank;
    int rejoins;
    cr_assert (s_check_ranks (c.log_sched, "fw-1", &log_rank, &rejoins) == n);
    victim_rank = w.tele_rank;
    cr_assert_eq (victim_rank, log_rank);

    //  Stop it.
    int mark = w.n_events, tele_before = w.n_tele;
    int64_t v_stop = w.version;
    uint64_t t_stop = kd_wall_ms ();
    kill (c.worker_pid [1], SIGSTOP);
    int dead = s_wait_event (&w, "worker-dead", victim_rank, mark, S_EVENT_CEILING_MS);
    int64_t v_dead = w.version;
    uint64_t detection_ms = dead >= 0 ? w.events [dead].recv_ms - t_stop : 0;
    //  What it sent just before the stop may reach us late on a busy
    //  machine, but not after its death was declared, `liveness`
    //  heartbeats of silence later: only telemetry from then on counts.
    int tele_dead = w.n_tele;
    //  It stays stopped at least stop_ms, and until the others trained 20
    //  versions without it (waited for, not assumed of the time).
    int64_t left_ms = (int64_t) (t_stop + (uint64_t) stop_ms) - (int64_t) kd_wall_ms ();
    if (left_ms > 0)
        s_pump (&w, (int) left_ms);
    if (dead >= 0)
        s_wait_version (&w, v_dead + 20, S_EVENT_CEILING_MS);
    int64_t v_cont = w.version;
    int64_t workers_stopped = w.workers;
    int tele_stopped = w.n_tele - tele_dead;

    //  Continue it: it finds out it was declared dead and registers again.
    uint64_t t_cont = kd_wall_ms ();
    kill (c.worker_pid [1], SIGCONT);
    int rejoin = s_wait_event (&w, "worker-rejoin", victim_rank, mark, S_EVENT_CEILING_MS);
    uint64_t rejoined_ms = rejoin >= 0 ? w.events [rejoin].recv_ms - t_cont : 0;
    //  It keeps training: 20 more iterations of its own.
    int tele_cont = w.n_tele;
    uint64_t deadline = kd_now_ms () + S_EVENT_CEILING_MS;
    while (w.n_tele < tele_cont + 20 && kd_now_ms () < deadline)
        s_pump (&w, 20);
    int trained_after = w.n_tele - tele_cont;
    s_pump (&w, 500);
    int64_t workers_after = w.workers;
    char *summary = s_cluster_finish (&c);
    s_pump (&w, 200);

    //  The iteration that spanned the stop is the one whose timings add up
    //  to the stop; it ended with the RELEASE that readmitted the worker.
    int stale = -1;
    for (int i = tele_before; i < w.n_tele && stale < 0; i++)
        if (w.tele [i].compute_ms + w.tele [i].push_ms + w.tele [i].wait_ms + w.tele [i].pull_ms
            > stop_ms / 2)
            stale = i;
    const char *stopped_in = "?";
    uint64_t stale_clock = 0, next_clock = 0;
    if (stale >= 0) {
        s_tele_t *t = &w.tele [stale];
        stopped_in = t->compute_ms > t->wait_ms && t->compute_ms > t->push_ms && t->compute_ms > t->pull_ms
                   ? "compute" : t->push_ms > t->wait_ms && t->push_ms > t->pull_ms ? "push"
                   : t->pull_ms > t->wait_ms ? "pull" : "wait";
        stale_clock = t->clock;
        if (stale + 1 < w.n_tele)
            next_clock = w.tele [stale + 1].clock;
    }
    //  Under BSP every applied gradient was computed on the version it was
    //  applied to, so a staleness above 0 in the worker's RELEASEs means a
    //  gradient of an older version, the stale one, was applied.
    int stale_applied = 0;
    uint64_t max_staleness = 0;
    for (int i = 0; i < w.n_tele; i++)
        if (w.tele [i].staleness > 0) {
            stale_applied++;
            if (w.tele [i].staleness > max_staleness)
                max_staleness = w.tele [i].staleness;
        }
    double dropped = kd_test_json_number (summary, "dropped_gradients");
    double p99 = kd_test_json_number (summary, "staleness_p99");
    int64_t rank_after;
    int distinct = s_check_ranks (c.log_sched, "fw-1", &rank_after, &rejoins);
    int64_t silent_ms = kd_test_log_value (c.log_sched, "dead worker name=fw-1 ", "silent_ms=");
    char rejected [64];
    snprintf (rejected, sizeof rejected, "arrival rejected rank=%lld clock=%llu",
              (long long) victim_rank, (unsigned long long) stale_clock);
    int rejected_lines = kd_test_count (c.log_sched, rejected);

    printf ("FIGURE sigstop_worker detected_ms=%llu rejoined_ms_after_cont=%llu stale_gradients_applied=%d "
            "dropped=%g ranks_seen=%d max_workers=%lld stopped_in=%s stale_clock=%llu next_clock=%llu "
            "versions_stop=%lld versions_dead=%lld versions_cont=%lld heartbeat_ms=%d liveness=%d stop_ms=%d\n",
            (unsigned long long) detection_ms, (unsigned long long) rejoined_ms, stale_applied, dropped,
            distinct, (long long) w.max_workers, stopped_in, (unsigned long long) stale_clock,
            (unsigned long long) next_clock, (long long) v_stop, (long long) v_dead, (long long) v_cont,
            hb, liveness, stop_ms);
    fflush (stdout);

    bool ok = true;
    #define S_CHECK(cond, ...) do { bool _c = (cond); ok = ok && _c; cr_expect (_c, __VA_ARGS__); } while (0)
    S_CHECK (dead >= 0, "no worker-dead event for rank %lld during the stop; events: %s",
             (long long) victim_rank, s_event_list (&w));
    S_CHECK (dead < 0 || silent_ms > (int64_t) liveness * hb,
             "declared dead after %lld ms of silence, before %d heartbeats of %d ms were missed",
             (long long) silent_ms, liveness, hb);
    S_CHECK (tele_stopped == 0, "a stopped worker sent %d telemetry messages", tele_stopped);
    S_CHECK (workers_stopped == n - 1, "stats show %lld workers while fw-1 is stopped",
             (long long) workers_stopped);
    S_CHECK (v_cont >= v_dead + 20, "training did not continue during the stop: version %lld at death, "
             "%lld at SIGCONT", (long long) v_dead, (long long) v_cont);
    S_CHECK (rejoin >= 0, "no worker-rejoin event for rank %lld within %d s of SIGCONT; events: %s",
             (long long) victim_rank, S_EVENT_CEILING_MS / 1000, s_event_list (&w));
    S_CHECK (rejoins >= 1, "no 'rejoin worker name=fw-1' line in the scheduler log");
    S_CHECK (rank_after == victim_rank, "fw-1 had rank %lld, now %lld", (long long) victim_rank,
             (long long) rank_after);
    S_CHECK (distinct == n, "the scheduler log shows %d distinct worker ranks for %d workers", distinct, n);
    S_CHECK (w.max_workers == n, "stats showed up to %lld workers for %d", (long long) w.max_workers, n);
    S_CHECK (workers_after == n, "stats show %lld workers after the rejoin", (long long) workers_after);
    S_CHECK (trained_after >= 20, "fw-1 trained only %d iterations after it rejoined", trained_after);
    S_CHECK (stale >= 0, "no iteration of fw-1 spans the stop");
    S_CHECK (stale < 0 || next_clock > stale_clock,
             "after the rejoin fw-1 computed clock %llu again, not a new clock (stale clock %llu)",
             (unsigned long long) next_clock, (unsigned long long) stale_clock);
    S_CHECK (stale_applied == 0, "%d RELEASEs to fw-1 report a stale gradient applied (staleness up to %llu)",
             stale_applied, (unsigned long long) max_staleness);
    S_CHECK (summary != NULL, "no summary written");
    S_CHECK (dropped >= 1, "summary dropped_gradients %g: the stale gradient of rank %lld clock %llu "
             "was not dropped", dropped, (long long) victim_rank, (unsigned long long) stale_clock);
    S_CHECK (p99 == 0, "summary staleness_p99 %g under BSP", p99);
    #undef S_CHECK
    fprintf (stderr, "sigstop: the stale arrival of clock %llu was refused %d times; events: %s\n",
             (unsigned long long) stale_clock, rejected_lines, s_event_list (&w));
    if (!ok)
        s_cluster_dump (&c);
    free (summary);
    s_watch_close (&w);
}

//  --------------------------------------------------------------------------
//  3. A worker readmitted while its push is blocked must not deadlock BSP
//
//  The worker is stopped until it is declared dead, and continued while the
//  shards are briefly stopped, so that it registers again (and is readmitted
//  at once: the only other worker is not at the barrier, it is stuck in a
//  pull or push too) while its own push of the stale gradient waits for the
//  shards.  Its readmission RELEASE therefore arrives in the middle of the
//  push round.  A worker that threw such a RELEASE away then sent the
//  ARRIVE of its stale clock, was refused, and sent it again every request
//  deadline for ever, while the barrier waited for its new clock: the whole
//  cluster stalled (fixed in services/worker/kd_worker.c, s_on_scheduler).

//  One cluster of the scenario: the checks that BSP goes on hold for every
//  attempt; returns whether fw-1 was readmitted in the middle of its push.
//  Where SIGSTOP catches it decides that: stopped while it waits for its
//  RELEASE (after its push was answered), it registers again on the way
//  that needs no readmission, and the attempt tests the other path.
static bool
s_readmit_attempt (int attempt)
{
    //  Liveness 12 x 500 ms: the shards' stop, at most 4 s, stays below it.
    const int n = 2, hb = 500, liveness = 12, shard_stop_max_ms = 4000;
    s_cluster_t c;
    s_cluster_start (&c, n, hb, liveness, "20", 1);
    s_watch_t w;
    s_watch_open (&w, &c, true);
    bool trained = s_wait_version (&w, 40, 60000);
    if (!trained)
        s_cluster_dump (&c);
    cr_assert (trained, "training did not start (version %lld)", (long long) w.version);
    s_pump (&w, 300);
    cr_assert (w.tele_rank >= 0, "no telemetry from fw-1 through the proxy");
    int64_t victim_rank = w.tele_rank;
    int mark = w.n_events;
    kill (c.worker_pid [1], SIGSTOP);
    int dead = s_wait_event (&w, "worker-dead", victim_rank, mark, S_EVENT_CEILING_MS);
    s_pump (&w, 1000);
    int64_t v_solo = w.version;
    kill (c.shard_pid [0], SIGSTOP);
    kill (c.shard_pid [1], SIGSTOP);
    uint64_t t_cont = kd_wall_ms ();
    kill (c.worker_pid [1], SIGCONT);
    //  The shards stay stopped until fw-1 says it was readmitted (its push
    //  blocked on them): waited for, not assumed of 700 ms as before.
    uint64_t until = kd_now_ms () + (uint64_t) shard_stop_max_ms;
    while (kd_now_ms () < until && kd_test_count (c.log_worker [1], "readmitted rank=") == 0)
        s_pump (&w, 50);
    uint64_t shard_stop_ms = kd_wall_ms () - t_cont;
    kill (c.shard_pid [0], SIGCONT);
    kill (c.shard_pid [1], SIGCONT);
    int64_t v_resume = w.version;
    int tele_resume = w.n_tele;
    bool advanced = s_wait_version (&w, v_resume + 20, S_EVENT_CEILING_MS);
    uint64_t advance_ms = advanced ? w.stats_ms - t_cont : 0;
    int rejoin = s_wait_event (&w, "worker-rejoin", victim_rank, mark, S_EVENT_CEILING_MS);
    uint64_t deadline = kd_now_ms () + S_EVENT_CEILING_MS;
    while (w.n_tele < tele_resume + 20 && kd_now_ms () < deadline)
        s_pump (&w, 20);
    int trained_after = w.n_tele - tele_resume;
    char *summary = s_cluster_finish (&c);
    char rejected [64];
    snprintf (rejected, sizeof rejected, "arrival rejected rank=%lld ", (long long) victim_rank);
    int rejected_lines = kd_test_count (c.log_sched, rejected);
    int readmitted_lines = kd_test_count (c.log_worker [1], "readmitted rank=");
    printf ("FIGURE readmit_mid_push advance_ms_after_cont=%llu victim_iterations_after=%d "
            "stale_arrivals_refused=%d readmitted_mid_iteration=%d versions_solo=%lld versions_resume=%lld "
            "heartbeat_ms=%d liveness=%d shard_stop_ms=%llu attempt=%d\n",
            (unsigned long long) advance_ms, trained_after, rejected_lines, readmitted_lines,
            (long long) v_solo, (long long) v_resume, hb, liveness, (unsigned long long) shard_stop_ms,
            attempt);
    fflush (stdout);
    bool ok = dead >= 0 && advanced && rejoin >= 0 && trained_after >= 20;
    cr_expect (dead >= 0, "fw-1 was not declared dead; events: %s", s_event_list (&w));
    cr_expect (advanced, "BSP stalled after fw-1 was readmitted: version %lld 10 s after the shards resumed "
               "at %lld (stale ARRIVEs refused: %d)", (long long) w.version, (long long) v_resume,
               rejected_lines);
    cr_expect (rejoin >= 0, "no worker-rejoin event for fw-1; events: %s", s_event_list (&w));
    cr_expect (trained_after >= 20, "fw-1 trained %d iterations after it was readmitted", trained_after);
    if (!ok)
        s_cluster_dump (&c);
    free (summary);
    s_watch_close (&w);
    return readmitted_lines >= 1;
}

Test (faults, worker_readmitted_mid_push_does_not_deadlock_bsp, .timeout = 280)
{
    //  Without a readmission in the middle of a push the test tested
    //  nothing: it must happen in one of three clusters.
    bool happened = false;
    for (int attempt = 1; attempt <= 3 && !happened; attempt++)
        happened = s_readmit_attempt (attempt);
    cr_expect (happened, "fw-1 was never readmitted while its push waited for the shards (3 clusters)");
}
