/*  kd_chaos: `kudus chaos`, a seeded fault schedule against a local
    cluster, and the check of its history.

    The cluster is `kudus local` itself, run as our child: it restarts
    what dies (--restart on-failure) and passes --history-file to the scheduler
    and the shards (--history-dir).  We find its services among its
    children in /proc by their --name, fire each fault of the plan when
    training has run for its time, and follow the shards' histories to
    know which replica of a range is the primary and whether a restarted
    backup holds its state yet.

    A fault that would take a range's last synced replica (a kill or a
    pause of a shard while its range is not whole again) waits until the
    range is whole: two replicas tolerate one failure, and the schedule
    should test Kudus, not ask for the impossible.  The wait is event
    driven (we read the histories as they grow) with a generous ceiling;
    a fault that could not fire is reported as a failure.

    The scheduler is never a target: `kudus local` does not restart it (a
    new scheduler would start its epochs, run time and summary over: the
    sampler's book and the leases out live only in its memory; see
    docs/chaos.md, "Why the scheduler is not a target"), so killing it
    ends the run.
*/
#define _GNU_SOURCE    //  asprintf
#include "kd_spawn.h"
#include "kd_cli.h"
#include "kd_chaos.h"
#include "kd_fault_plan.h"
#include "kd_history_check.h"
#include "kd_netns.h"
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_TICK_MS           50          //  the loop's period
#define S_START_CEILING_MS  180000      //  for training to start
#define S_GRACE_MS          300000      //  after the planned end, for kudus
                                        //  local to finish (final evaluation)
#define S_KILL_WAIT_MS      10000       //  after SIGTERM, before SIGKILL
#define S_LEFTOVER_WAIT_MS  5000        //  for the cluster's processes to go
#define S_MAX_PROCS         256         //  services of one cluster
#define S_MAX_SHARDS        64          //  shard processes
#define S_KILLS_KEPT        64          //  kills remembered for the backstop
#define S_HEAL_TRIES        20          //  ticks a heal is tried before the
                                        //  run is failed
#define S_FLOOD_FRAME_MAX   64          //  bytes of a garbage frame at most
#define S_FLOOD_PER_SOCKET  150         //  messages per connection: past the
                                        //  guard's max-malformed (100)

//  A kill fired: whom and when.
typedef struct {
    char who [48];
    uint64_t at_ms;
} s_kill_t;

//  A service of the cluster, as found in /proc.
typedef struct {
    int pid;                    //  its process
    char name [32];             //  its --name, or "scheduler"
} s_proc_t;

//  What a shard's history says about its current process.
typedef struct {
    int fd;                     //  its history, read as it grows (-1: not yet)
    char partial [4096];        //  a line not yet complete
    size_t partial_len;         //  its length
    int pid;                    //  the process the last line came from
    uint64_t lo;                //  its range
    bool placed;                //  it was told its role
    bool primary;               //  and it leads its range
    bool synced;                //  it holds its range's state
} s_shard_t;

//  A fault on a node's link, in force until healed.
typedef struct {
    char node [16];             //  "w2", or "" when none is in force
    uint64_t heal_at;           //  when it ends
    int failures;               //  heals tried in vain, in a row
} s_link_fault_t;

#define S_CUT   0               //  links [S_CUT]: a partition
#define S_SLOW  1               //  links [S_SLOW]: a slowed link

typedef struct {
    kd_config_t *config;        //  our settings
    char out [1024];            //  output directory
    int local_pid;              //  kudus local
    int port;                   //  its base port
    int shards, replicas, workers;  //  its shape
    s_proc_t procs [S_MAX_PROCS];   //  its services, at the last look
    size_t n_procs;             //  found
    s_shard_t shard [S_MAX_SHARDS]; //  shard-N's history
    kd_history_t *history;      //  chaos.jsonl
    bool netns;                 //  the cluster runs with --netns
    s_link_fault_t links [2];   //  the partition and the slowed link in
                                //  force: one of each at a time
    s_kill_t kills [S_KILLS_KEPT];  //  the last kills fired, a ring
    size_t n_kills;             //  kills fired so far
} self_t;

static volatile sig_atomic_t s_signal = 0;

static void
s_on_signal (int sig)
{
    s_signal = sig;
}

//  --------------------------------------------------------------------------
//  The cluster's processes

//  DIR/FILE into path.  Returns 0, or -1 when it does not fit.
static int
s_path (char *path, size_t size, const char *dir, const char *file)
{
    //  Copied, not formatted: GCC cannot bound a directory inside self_t
    //  and warns of truncation at -O2 (the release build) on any format.
    size_t d = strlen (dir), f = strlen (file);
    path [0] = 0;
    if (d + 1 + f + 1 > size)
        return -1;
    memcpy (path, dir, d);
    path [d] = '/';
    memcpy (path + d + 1, file, f + 1);
    return 0;
}

//  The start of /proc/PID/FILE into buf, NUL-terminated; its length, or -1.
static ssize_t
s_proc_read (int pid, const char *file, char *buf, size_t size)
{
    char path [64];
    snprintf (path, sizeof path, "/proc/%d/%s", pid, file);
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read (fd, buf, size - 1);
    close (fd);
    buf [n > 0 ? n : 0] = 0;
    return n;
}

//  The value of a process's command-line flag (the last given) into out;
//  argv [0] when flag is NULL.  0, or -1 when absent or empty.
static int
s_flag_of (int pid, const char *flag, char *out, size_t size)
{
    char buf [4096];
    ssize_t n = pid > 0 ? s_proc_read (pid, "cmdline", buf, sizeof buf) : -1;
    if (n <= 0)
        return -1;
    *out = 0;
    const char *prev = NULL;
    for (const char *p = buf; p < buf + n; p += strlen (p) + 1) {
        if (flag ? prev && !strcmp (prev, flag) : p == buf)
            snprintf (out, size, "%s", p);
        prev = p;
    }
    return *out ? 0 : -1;
}

//  A process's --name value into name ("scheduler" for the scheduler).
//  Returns 0, or -1 when it is no service of ours.
static int
s_cmdline (int pid, char *name, size_t name_size)
{
    if (s_flag_of (pid, "--name", name, name_size) == 0)
        return 0;
    char argv0 [4096];
    size_t len = s_flag_of (pid, NULL, argv0, sizeof argv0) == 0 ? strlen (argv0) : 0;
    if (len >= 15 && !strcmp (argv0 + len - 15, "kudus-scheduler")) {
        snprintf (name, name_size, "scheduler");
        return 0;
    }
    return -1;
}

//  The parent of a process, or -1.
static int
s_ppid (int pid)
{
    char buf [512];
    if (s_proc_read (pid, "stat", buf, sizeof buf) <= 0)
        return -1;
    //  The name in parentheses may hold spaces: the fields follow its end.
    const char *p = strrchr (buf, ')');
    int ppid = -1;
    char state;
    if (!p || sscanf (p + 1, " %c %d", &state, &ppid) != 2)
        return -1;
    return state == 'Z' ? -1 : ppid;
}

//  Look for kudus local's services again.
static void
s_scan (self_t *self)
{
    self->n_procs = 0;
    DIR *d = opendir ("/proc");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir (d)) && self->n_procs < S_MAX_PROCS) {
        int pid = atoi (e->d_name);
        if (pid <= 0 || s_ppid (pid) != self->local_pid)
            continue;
        s_proc_t *p = &self->procs [self->n_procs];
        if (s_cmdline (pid, p->name, sizeof p->name) == 0) {
            p->pid = pid;
            self->n_procs++;
        }
    }
    closedir (d);
}

//  The pid of a service by name, or 0.
static int
s_pid_of (self_t *self, const char *name)
{
    for (size_t i = 0; i < self->n_procs; i++)
        if (!strcmp (self->procs [i].name, name))
            return self->procs [i].pid;
    return 0;
}

//  --------------------------------------------------------------------------
//  The shards' histories

//  A number after "key": in a history line, or def.
static uint64_t
s_field (const char *line, const char *key, uint64_t def)
{
    char pat [48];
    snprintf (pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr (line, pat);
    return p ? strtoull (p + strlen (pat), NULL, 10) : def;
}

//  One line of shard i's history.
static void
s_shard_line (s_shard_t *s, const char *line)
{
    int pid = (int) s_field (line, "pid", 0);
    if (pid != s->pid) {
        s->pid = pid;
        s->placed = s->primary = s->synced = false;
    }
    if (strstr (line, "\"ev\":\"role\"")) {
        s->placed = true;
        s->lo = s_field (line, "lo", 0);
        s->primary = strstr (line, "\"primary\":true") != NULL;
        //  A primary holds its range's state by definition.
        if (s->primary)
            s->synced = true;
    }
    else
    if (strstr (line, "\"ev\":\"sync\"")) {
        s->synced = true;
        s->lo = s_field (line, "lo", s->lo);
    }
}

//  Read what the shards wrote since the last look.
static void
s_follow_shards (self_t *self)
{
    int procs = self->shards * self->replicas;
    for (int i = 0; i < procs && i < S_MAX_SHARDS; i++) {
        s_shard_t *s = &self->shard [i];
        if (s->fd < 0) {
            char path [1100];
            char file [32];
            snprintf (file, sizeof file, "shard-%d.jsonl", i);
            s_path (path, sizeof path, self->out, file);
            s->fd = open (path, O_RDONLY | O_CLOEXEC);
            if (s->fd < 0)
                continue;
        }
        char buf [65536];
        ssize_t n;
        while ((n = read (s->fd, buf, sizeof buf)) > 0)
            for (ssize_t k = 0; k < n; k++) {
                if (buf [k] == '\n') {
                    s->partial [s->partial_len] = 0;
                    s_shard_line (s, s->partial);
                    s->partial_len = 0;
                }
                else
                if (s->partial_len < sizeof s->partial - 1)
                    s->partial [s->partial_len++] = buf [k];
            }
    }
}

//  Range k (in order of first key): whole when every replica runs, knows
//  its role and holds the state, and one leads.  Its shards' indexes go to
//  members (replicas entries).  Returns true when whole.
static bool
s_range_whole (self_t *self, int k, int *members)
{
    int procs = self->shards * self->replicas;
    uint64_t los [S_MAX_SHARDS];
    int n_los = 0;
    for (int i = 0; i < procs; i++) {
        if (!self->shard [i].placed)
            return false;
        bool seen = false;
        for (int j = 0; j < n_los; j++)
            seen = seen || los [j] == self->shard [i].lo;
        if (!seen)
            los [n_los++] = self->shard [i].lo;
    }
    if (n_los != self->shards)
        return false;
    //  The k-th smallest first key.
    uint64_t lo = 0;
    for (int j = 0; j < n_los; j++) {
        int below = 0;
        for (int m = 0; m < n_los; m++)
            below += los [m] < los [j];
        if (below == k)
            lo = los [j];
    }
    int n = 0, leaders = 0;
    for (int i = 0; i < procs; i++) {
        s_shard_t *s = &self->shard [i];
        if (s->lo != lo)
            continue;
        char name [32];
        snprintf (name, sizeof name, "shard-%d", i);
        if (!s->synced || s_pid_of (self, name) != s->pid)
            return false;
        leaders += s->primary;
        if (n < self->replicas)
            members [n] = i;
        n++;
    }
    return n == self->replicas && leaders == 1;
}

//  The range index of shard i, or -1.
static int
s_range_of_shard (self_t *self, int i)
{
    int members [S_MAX_SHARDS];
    for (int k = 0; k < self->shards; k++)
        if (s_range_whole (self, k, members))
            for (int m = 0; m < self->replicas; m++)
                if (members [m] == i)
                    return k;
    return -1;
}

//  --------------------------------------------------------------------------
//  Faults

//  Send count malformed messages to endpoint, seeded: random frames, empty
//  ones, and MessagePack headers with a wrong version or a wrong type.
static void
s_flood (const char *endpoint, uint32_t count, uint64_t seed)
{
    zsock_t *sock = NULL;
    uint8_t frame [S_FLOOD_FRAME_MAX];
    for (uint32_t i = 0; i < count; i++) {
        if (i % S_FLOOD_PER_SOCKET == 0) {
            if (sock)
                zsock_set_linger (sock, 500);
            zsock_destroy (&sock);
            sock = zsock_new (ZMQ_DEALER);
            zsock_set_sndtimeo (sock, 500);
            zsock_connect (sock, "%s", endpoint);
        }
        int frames = 1 + (int) (kd_splitmix64 (&seed) % 3);
        for (int f = 0; f < frames; f++) {
            size_t len = (size_t) (kd_splitmix64 (&seed) % (S_FLOOD_FRAME_MAX + 1));
            for (size_t b = 0; b < len; b++)
                frame [b] = (uint8_t) kd_splitmix64 (&seed);
            //  Some look like a header: a fixmap with a bad version.
            if (len >= 4 && f == 0 && (i & 3) == 0) {
                frame [0] = 0x83;
                frame [1] = 0xa1;
                frame [2] = 'v';
                frame [3] = 0x7f;
            }
            if (zmq_send (zsock_resolve (sock), frame, len, f + 1 < frames ? ZMQ_SNDMORE : 0) < 0)
                break;
        }
    }
    if (sock)
        zsock_set_linger (sock, 500);
    zsock_destroy (&sock);
}

//  Kills of a process seen in the last minute: the plan keeps them under
//  kudus local's crash-loop guard by their planned times, but faults that
//  waited (for a pause, a partition, a range to be whole) fire late and
//  can bunch up.  Remember each kill to defer one that would be too many.
static void
s_note_kill (self_t *self, const kd_fault_t *f, const char *who, uint64_t now_ms)
{
    if (!kd_fault_kind_kills (f->kind))
        return;
    s_kill_t *k = &self->kills [self->n_kills++ % S_KILLS_KEPT];
    snprintf (k->who, sizeof k->who, "%s", who);
    k->at_ms = now_ms;
}

static int
s_recent_kills (self_t *self, const char *who, uint64_t now_ms)
{
    int n = 0;
    for (size_t i = 0; i < S_KILLS_KEPT && i < self->n_kills; i++)
        n += !strcmp (self->kills [i].who, who) && now_ms < self->kills [i].at_ms + KD_FAULT_KILL_WINDOW_MS;
    return n;
}

//  Can fault f fire now?  Resolves its process into pid and who; a reason
//  into why when it must wait.
static bool
s_ready (self_t *self, const kd_fault_t *f, int *pid, char *who, size_t who_size, char *why, size_t why_size)
{
    *pid = 0;
    snprintf (who, who_size, "%s", f->target);
    int members [S_MAX_SHARDS];
    if (f->kind == KD_FAULT_KILL_PRIMARY || f->kind == KD_FAULT_KILL_BACKUP) {
        int k = atoi (f->target + strlen ("range-"));
        if (!s_range_whole (self, k, members)) {
            snprintf (why, why_size, "range %d is not whole (a replica is down or has no state yet)", k);
            return false;
        }
        for (int m = 0; m < self->replicas; m++)
            if (self->shard [members [m]].primary == (f->kind == KD_FAULT_KILL_PRIMARY)) {
                snprintf (who, who_size, "shard-%d", members [m]);
                break;
            }
    }
    if (kd_fault_kind_lasts (f->kind) && !strncmp (f->target, "shard-", 6)
    &&  s_range_of_shard (self, atoi (f->target + 6)) < 0) {
        snprintf (why, why_size, "the range of %s is not whole", f->target);
        return false;
    }
    if (f->kind == KD_FAULT_FLOOD)
        return true;
    if (kd_fault_kind_kills (f->kind) && s_recent_kills (self, who, kd_now_ms ()) >= KD_FAULT_KILLS_PER_WINDOW) {
        snprintf (why, why_size, "%s was killed %d times in the last %d s (kudus local's crash-loop guard)",
                  who, KD_FAULT_KILLS_PER_WINDOW, KD_FAULT_KILL_WINDOW_MS / 1000);
        return false;
    }
    *pid = s_pid_of (self, who);
    if (!*pid) {
        snprintf (why, why_size, "%s is not running (restarting?)", who);
        return false;
    }
    return true;
}

//  Where a service listens, from its command line: --advertise, else
//  --bind with a wildcard host made loopback.  0, or -1 when neither.
static int
s_endpoint_of (int pid, char *out, size_t size)
{
    char ep [256];
    if (s_flag_of (pid, "--advertise", ep, sizeof ep) != 0
    &&  s_flag_of (pid, "--bind", ep, sizeof ep) != 0)
        return -1;
    if (!strncmp (ep, "tcp://*:", 8))
        snprintf (out, size, "tcp://127.0.0.1:%s", ep + 8);
    else
        snprintf (out, size, "%s", ep);
    return 0;
}

//  The namespace node of a worker or shard ("w2", "s0"), as kudus local
//  names them under --netns.
static void
s_node_of (const char *who, char *out, size_t size)
{
    bool worker = !strncmp (who, "worker-", 7);
    snprintf (out, size, "%c%d", worker ? 'w' : 's', atoi (who + (worker ? 7 : 6)));
}

//  Fire a fault at process pid (who).  Returns 0, or -1 with a reason in
//  why when it could not be done.
static int
s_fire (self_t *self, const kd_fault_t *f, int pid, const char *who, char *why, size_t why_size)
{
    char ep [300];
    switch (f->kind) {
        case KD_FAULT_PAUSE:
            kill (pid, SIGSTOP);
            break;
        case KD_FAULT_FLOOD:
            //  Where the target listens (under --netns, its namespace's
            //  address); a service that is down gets its usual port.
            if (s_endpoint_of (s_pid_of (self, who), ep, sizeof ep)) {
                if (!strcmp (who, "scheduler"))
                    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", self->port);
                else
                if (!strcmp (who, "monitor"))
                    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", self->port + 1);
                else
                    snprintf (ep, sizeof ep, "tcp://127.0.0.1:%d", self->port + 100 + atoi (who + 6));
            }
            s_flood (ep, f->count, f->seed);
            break;
        case KD_FAULT_PARTITION:
        case KD_FAULT_SLOW: {
            s_link_fault_t *l = &self->links [f->kind == KD_FAULT_SLOW ? S_SLOW : S_CUT];
            s_node_of (who, l->node, sizeof l->node);
            if (f->kind == KD_FAULT_SLOW
                ? kd_netns_set_rate (self->local_pid, l->node, f->rate_kbit / 1000.0, why, why_size)
                : kd_netns_set_link (self->local_pid, l->node, false, why, why_size)) {
                l->node [0] = 0;
                return -1;
            }
            l->heal_at = kd_now_ms () + f->duration_ms;
            l->failures = 0;
            break;
        }
        default:
            kill (pid, SIGKILL);
    }
    return 0;
}

//  Heal links [which], the partition or the slowed link, if one is in
//  force.  A slowed link is healed to no limit at all (a chaos run's links
//  have none).  0, or -1 when the link would not come back (the fault
//  stays in force, to be tried again).
static int
s_heal (self_t *self, int which)
{
    s_link_fault_t *l = &self->links [which];
    if (!l->node [0])
        return 0;
    char why [300];
    if (which == S_SLOW ? kd_netns_set_rate (self->local_pid, l->node, 0, why, sizeof why)
                        : kd_netns_set_link (self->local_pid, l->node, true, why, sizeof why)) {
        fprintf (stderr, "kudus chaos: cannot heal %s: %s\n", l->node, why);
        return -1;
    }
    l->node [0] = 0;
    return 0;
}

//  --------------------------------------------------------------------------
//  Resources

//  Descriptors and RSS of every service, one sample line each.
static void
s_sample (self_t *self)
{
    for (size_t i = 0; i < self->n_procs; i++) {
        char path [64], line [256];
        long rss = -1, fds = 0;
        snprintf (path, sizeof path, "/proc/%d/status", self->procs [i].pid);
        FILE *f = fopen (path, "r");
        while (f && fgets (line, sizeof line, f))
            if (sscanf (line, "VmRSS: %ld", &rss) == 1)
                break;
        if (f)
            fclose (f);
        snprintf (path, sizeof path, "/proc/%d/fd", self->procs [i].pid);
        DIR *d = opendir (path);
        struct dirent *e;
        while (d && (e = readdir (d)))
            fds += e->d_name [0] != '.';
        if (d)
            closedir (d);
        if (rss >= 0 && d)
            kd_history_line (self->history, "sample", "\"name\":\"%s\",\"child\":%d,\"rss_kb\":%ld,\"fds\":%ld",
                             self->procs [i].name, self->procs [i].pid, rss, fds);
    }
}

//  --------------------------------------------------------------------------
//  The run

//  Wait for kudus local to exit, up to ms; its status into *status.
static bool
s_wait_local (self_t *self, int ms, int *status)
{
    uint64_t until = kd_now_ms () + (uint64_t) ms;
    do {
        if (waitpid (self->local_pid, status, WNOHANG) == self->local_pid)
            return true;
        usleep (S_TICK_MS * 1000);
    } while (kd_now_ms () < until);
    return false;
}

//  Start kudus local with our shape and the user's flags after "--".
static int
s_start_local (self_t *self, int extra_argc, char **extra_argv, double run_s)
{
    kd_config_t *c = self->config;
    char exe [1024];
    ssize_t n = readlink ("/proc/self/exe", exe, sizeof exe - 1);
    exe [n > 0 ? n : 0] = 0;
    char *args [128];
    int a = 0;
    char num [8][64], path [2][1100];
    args [a++] = exe;
    args [a++] = "local";
    snprintf (num [0], sizeof num [0], "%d", self->shards);
    snprintf (num [1], sizeof num [1], "%d", self->replicas);
    snprintf (num [2], sizeof num [2], "%d", self->workers);
    snprintf (num [3], sizeof num [3], "%d", self->port);
    snprintf (num [4], sizeof num [4], "%lld", (long long) kd_config_int (c, "seed"));
    snprintf (num [5], sizeof num [5], "%.3f", run_s);
    s_path (path [0], sizeof path [0], self->out, "summary.json");
    const char *pairs [][2] = {
        { "--shards", num [0] }, { "--replicas", num [1] }, { "--workers", num [2] },
        { "--base-port", num [3] }, { "--seed", num [4] }, { "--max-seconds", num [5] },
        { "--epochs", "1000" }, { "--consistency", kd_config_str (c, "consistency") },
        { "--history-dir", self->out }, { "--summary", path [0] }, { "--restart", "on-failure" }
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs [0]; i++) {
        args [a++] = (char *) pairs [i][0];
        args [a++] = (char *) pairs [i][1];
    }
    if (*kd_config_str (c, "bin-dir")) {
        args [a++] = "--bin-dir";
        args [a++] = (char *) kd_config_str (c, "bin-dir");
    }
    if (self->netns) {
        args [a++] = "--netns";
        args [a++] = "true";
    }
    for (int i = 0; i < extra_argc && a < 126; i++)
        args [a++] = extra_argv [i];
    args [a] = NULL;
    s_path (path [1], sizeof path [1], self->out, "cluster.log");
    int log = open (path [1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log < 0)
        return -1;
    kd_spawn_t how = KD_SPAWN_INIT;
    how.path = exe;
    how.argv = (const char *const *) args;
    how.out_fd = how.err_fd = log;
    how.death_signal = SIGTERM;
    how.ignore_sigint = true;       //  Ctrl-C reaches us; we stop kudus local
    pid_t pid = kd_spawn (&how);
    close (log);
    if (pid < 0)
        return -1;
    self->local_pid = pid;
    return 0;
}

//  The "t" of the scheduler's start line, or 0 while there is none.
static uint64_t
s_training_started (self_t *self)
{
    char path [1100];
    s_path (path, sizeof path, self->out, "scheduler.jsonl");
    FILE *f = fopen (path, "r");
    char line [1024];
    uint64_t t = 0;
    while (f && !t && fgets (line, sizeof line, f))
        if (strstr (line, "\"ev\":\"start\""))
            t = s_field (line, "t", 0);
    if (f)
        fclose (f);
    return t;
}

//  Remove the files an earlier run left in the output directory: the
//  histories are appended to.
static void
s_clean_out (const char *dir)
{
    DIR *d = opendir (dir);
    struct dirent *e;
    while (d && (e = readdir (d))) {
        size_t len = strlen (e->d_name);
        if (len > 6 && !strcmp (e->d_name + len - 6, ".jsonl")) {
            char path [2048];
            if (s_path (path, sizeof path, dir, e->d_name) == 0)
                unlink (path);
        }
    }
    if (d)
        closedir (d);
}

//  The processes kudus local started (its history) that still run.
static void
s_leftovers (self_t *self)
{
    char path [1100], line [1024];
    s_path (path, sizeof path, self->out, "local.jsonl");
    uint64_t until = kd_now_ms () + S_LEFTOVER_WAIT_MS;
    for (bool again = true; again; ) {
        again = false;
        FILE *f = fopen (path, "r");
        while (f && fgets (line, sizeof line, f)) {
            if (!strstr (line, "\"ev\":\"spawn\""))
                continue;
            int pid = (int) s_field (line, "child", 0);
            char name [32];
            //  A live process of that pid that is still a kudus service.
            if (pid <= 0 || kill (pid, 0) != 0 || s_cmdline (pid, name, sizeof name) != 0)
                continue;
            const char *n = strstr (line, "\"name\":\"");
            if (!n || strncmp (n + 8, name, strlen (name)))
                continue;
            if (kd_now_ms () < until) {
                again = true;
                continue;
            }
            kd_history_line (self->history, "leftover", "\"name\":\"%s\",\"child\":%d", name, pid);
            fprintf (stderr, "kudus chaos: %s pid=%d outlived the cluster; killing it\n", name, pid);
            kill (pid, SIGKILL);
        }
        if (f)
            fclose (f);
        if (again)
            usleep (100000);
    }
}

//  The command that reproduces this run, for the report.
static char *
s_command (kd_config_t *c, double seconds, int extra_argc, char **extra_argv)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream (&text, &len);
    fprintf (f, "kudus chaos --seed %lld --seconds %g --settle-seconds %g --fault-gap %g --faults %s "
             "--shards %lld --replicas %lld --workers %lld --consistency %s --base-port %lld",
             (long long) kd_config_int (c, "seed"), seconds, kd_config_double (c, "settle-seconds"),
             kd_config_double (c, "fault-gap"), kd_config_str (c, "faults"),
             (long long) kd_config_int (c, "shards"), (long long) kd_config_int (c, "replicas"),
             (long long) kd_config_int (c, "workers"), kd_config_str (c, "consistency"),
             (long long) kd_config_int (c, "base-port"));
    if (kd_config_bool (c, "netns"))
        fprintf (f, " --netns true");
    if (extra_argc > 0)
        fprintf (f, " --");
    for (int i = 0; i < extra_argc; i++)
        fprintf (f, " %s", extra_argv [i]);
    fclose (f);
    return text;
}

//  A string as JSON text (quotes and backslashes escaped), into out.
static void
s_json_text (const char *s, char *out, size_t size)
{
    size_t n = 0;
    for (; *s && n + 3 < size; s++) {
        if (*s == '"' || *s == '\\')
            out [n++] = '\\';
        out [n++] = (unsigned char) *s < 0x20 ? ' ' : *s;
    }
    out [n] = 0;
}

//  Check a run's directory; print the report and save it as report.json.
//  Returns 0 when it passed, 1 when not.
static int
s_check (const char *dir)
{
    kd_history_check_t *check = kd_history_check_new ();
    char err [256];
    if (kd_history_check_load (check, dir, err, sizeof err)) {
        fprintf (stderr, "kudus chaos: %s\n", err);
        kd_history_check_destroy (&check);
        return 1;
    }
    size_t failures = kd_history_check_run (check);
    kd_history_check_print (check, stdout);
    char path [1100];
    s_path (path, sizeof path, dir, "report.json");
    FILE *f = fopen (path, "w");
    if (f) {
        kd_history_check_write_json (check, f);
        fclose (f);
    }
    kd_history_check_destroy (&check);
    return failures ? 1 : 0;
}

//  Fire the plan at a running cluster, sampling as it goes.  Returns 0, or
//  1 when the cluster failed to start.
static int
s_soak (self_t *self, kd_fault_plan_t *plan, double seconds, double run_s, int *status, bool *exited)
{
    kd_config_t *c = self->config;
    uint64_t sample_ms = (uint64_t) kd_config_int (c, "sample-ms");
    uint64_t t0 = 0, waited_from = kd_now_ms (), next_sample = 0;
    *exited = false;
    //  Training starts once every worker and shard registered.
    while (!(t0 = s_training_started (self))) {
        if (waitpid (self->local_pid, status, WNOHANG) == self->local_pid) {
            *exited = true;
            fprintf (stderr, "kudus chaos: the cluster exited before training started (%s/cluster.log)\n",
                     self->out);
            return 1;
        }
        if (kd_now_ms () - waited_from > S_START_CEILING_MS || s_signal) {
            fprintf (stderr, "kudus chaos: training did not start within %d s\n", S_START_CEILING_MS / 1000);
            return 1;
        }
        usleep (100000);
    }
    printf ("kudus chaos: training started; %zu faults over %.0f s\n", kd_fault_plan_size (plan), seconds);
    fflush (stdout);
    size_t next = 0;
    int paused = 0;
    uint64_t resume_at = 0, deferred_from = 0;
    uint64_t deadline = t0 + (uint64_t) ((seconds + (run_s - seconds) / 2) * 1e6);
    uint64_t give_up = kd_now_ms () + (uint64_t) (run_s * 1000) + S_GRACE_MS;
    while (!s_signal) {
        if (waitpid (self->local_pid, status, WNOHANG) == self->local_pid) {
            *exited = true;
            break;
        }
        if (kd_now_ms () > give_up) {
            fprintf (stderr, "kudus chaos: the cluster did not stop %d s after its planned end; stopping it\n",
                     S_GRACE_MS / 1000);
            break;
        }
        uint64_t now_ms = kd_now_ms (), now_us = kd_history_now_us ();
        if (paused && now_ms >= resume_at) {
            kill (paused, SIGCONT);
            paused = 0;
        }
        for (int which = S_CUT; which <= S_SLOW; which++) {
            s_link_fault_t *l = &self->links [which];
            if (l->node [0] && now_ms >= l->heal_at && s_heal (self, which) && ++l->failures >= S_HEAL_TRIES) {
                //  A link that stays down (or slow) is a fault for the
                //  rest of the run: the check must fail, not the soak go on.
                kd_history_line (self->history, "heal-failed", "\"node\":\"%s\",\"tries\":%d,\"slow\":%s",
                                 l->node, l->failures, which == S_SLOW ? "true" : "false");
                fprintf (stderr, "kudus chaos: %s's link would not come back after %d tries\n", l->node,
                         l->failures);
                l->node [0] = 0;
            }
        }
        //  A partition holds every fault back; a slowed link only the next
        //  slow one: the cluster meets kills and pauses on a slow link.
        const kd_fault_t *f = kd_fault_plan_at (plan, next);
        bool due = f && !paused && !self->links [S_CUT].node [0]
                && !(f->kind == KD_FAULT_SLOW && self->links [S_SLOW].node [0])
                && now_us >= t0 + f->at_ms * 1000;
        //  /proc is walked only when we need to know who runs: it costs a
        //  read per process of the machine.
        if (due || now_ms >= next_sample) {
            s_scan (self);
            s_follow_shards (self);
        }
        if (now_ms >= next_sample) {
            s_sample (self);
            next_sample = now_ms + sample_ms;
        }
        if (due) {
            //  A lasting fault that fired late must still end in time for
            //  the cluster to commit after it before the run ends (the
            //  check asks for that): it lasts at most half of what is left.
            kd_fault_t trimmed = *f;
            uint64_t end_us = t0 + (uint64_t) (run_s * 1e6);
            uint64_t left_ms = end_us > now_us ? (end_us - now_us) / 1000 : 0;
            if (kd_fault_kind_lasts (f->kind) && trimmed.duration_ms > left_ms / 2)
                trimmed.duration_ms = (uint32_t) (left_ms / 2);
            f = &trimmed;
            int pid;
            char who [48], why [160] = "";
            bool ready = s_ready (self, f, &pid, who, sizeof who, why, sizeof why);
            if (!deferred_from)
                deferred_from = now_ms;
            //  Fired first, recorded after: a fault that failed (a link
            //  that would not go down) is recorded as not fired.
            bool failed = ready && s_fire (self, f, pid, who, why, sizeof why);
            if (failed)
                ready = false;
            if (ready || failed || now_us > deadline) {
                char note [200];
                s_json_text (why, note, sizeof note);
                kd_history_line (self->history, "fault",
                                 "\"index\":%zu,\"kind\":\"%s\",\"target\":\"%s\",\"child\":%d,\"fired\":%s,"
                                 "\"planned_ms\":%llu,\"deferred_ms\":%llu,\"duration_ms\":%u,\"rate_kbit\":%u,"
                                 "\"note\":\"%s\"",
                                 next + 1, kd_fault_kind_name (f->kind), who, pid, ready ? "true" : "false",
                                 (unsigned long long) f->at_ms, (unsigned long long) (now_ms - deferred_from),
                                 kd_fault_kind_lasts (f->kind) ? f->duration_ms : 0, f->rate_kbit,
                                 ready ? "" : note);
                if (ready) {
                    char how [64];
                    snprintf (how, sizeof how, "%s", f->kind == KD_FAULT_PAUSE ? " (SIGSTOP)"
                              : f->kind == KD_FAULT_PARTITION ? " (link down)"
                              : f->kind == KD_FAULT_FLOOD ? "" : " (kill -9)");
                    if (f->kind == KD_FAULT_SLOW)
                        snprintf (how, sizeof how, " (link at %u kbit/s)", f->rate_kbit);
                    printf ("kudus chaos: t=%6.1fs fault %zu: %s %s%s\n", (double) (now_us - t0) / 1e6,
                            next + 1, kd_fault_kind_name (f->kind), who, how);
                    s_note_kill (self, f, who, now_ms);
                    if (f->kind == KD_FAULT_PAUSE) {
                        paused = pid;
                        resume_at = kd_now_ms () + f->duration_ms;
                    }
                }
                else
                    printf ("kudus chaos: fault %zu (%s %s) could not fire: %s\n", next + 1,
                            kd_fault_kind_name (f->kind), f->target, *why ? why : "its time ran out");
                fflush (stdout);
                next++;
                deferred_from = 0;
            }
        }
        usleep (S_TICK_MS * 1000);
    }
    if (paused)
        kill (paused, SIGCONT);
    //  Once kudus local is gone its namespaces are too.
    if (!*exited) {
        s_heal (self, S_CUT);
        s_heal (self, S_SLOW);
    }
    //  Faults the run ended before.
    for (; next < kd_fault_plan_size (plan); next++) {
        const kd_fault_t *f = kd_fault_plan_at (plan, next);
        kd_history_line (self->history, "fault",
                         "\"index\":%zu,\"kind\":\"%s\",\"target\":\"%s\",\"child\":0,\"fired\":false,"
                         "\"planned_ms\":%llu,\"note\":\"the run ended first\"",
                         next + 1, kd_fault_kind_name (f->kind), f->target, (unsigned long long) f->at_ms);
    }
    return 0;
}

int
kd_chaos_main (int argc, char **argv)
{
    //  Our flags, then "--" and kudus local's.
    int own = argc;
    for (int i = 1; i < argc; i++)
        if (!strcmp (argv [i], "--")) {
            own = i;
            break;
        }
    int extra_argc = own < argc ? argc - own - 1 : 0;
    char **extra_argv = argv + own + 1;
    int rc = 0;
    kd_config_t *c = kd_config_from_args (KD_SVC_CHAOS, "kudus chaos", "kudus chaos", own, argv, &rc);
    if (!c)
        return rc;
    if (kd_config_positional_count (c) >= 1 && !strcmp (kd_config_positional (c, 0), "check")) {
        if (kd_config_positional_count (c) != 2) {
            fprintf (stderr, "kudus chaos: usage: kudus chaos check DIR\n");
            kd_config_destroy (&c);
            return 2;
        }
        rc = s_check (kd_config_positional (c, 1));
        kd_config_destroy (&c);
        return rc;
    }
    self_t self_s = { .config = c }, *self = &self_s;
    self->shards = (int) kd_config_int (c, "shards");
    self->replicas = (int) kd_config_int (c, "replicas");
    self->workers = (int) kd_config_int (c, "workers");
    self->port = (int) kd_config_int (c, "base-port");
    self->netns = kd_config_bool (c, "netns");
    for (int i = 0; i < S_MAX_SHARDS; i++)
        self->shard [i].fd = -1;
    double seconds = kd_config_double (c, "minutes") > 0 ? kd_config_double (c, "minutes") * 60
                                                          : kd_config_double (c, "seconds");
    double run_s = seconds + kd_config_double (c, "settle-seconds");
    uint64_t seed = (uint64_t) kd_config_int (c, "seed");
    if (*kd_config_str (c, "out"))
        snprintf (self->out, sizeof self->out, "%s", kd_config_str (c, "out"));
    else
        snprintf (self->out, sizeof self->out, "/tmp/kudus-chaos-%llu", (unsigned long long) seed);
    char err [256];
    kd_fault_plan_t *plan = kd_fault_plan_new (seed, seconds, kd_config_double (c, "fault-gap"), self->shards,
                                               self->replicas, self->workers, kd_config_str (c, "faults"),
                                               err, sizeof err);
    if (!plan) {
        fprintf (stderr, "kudus chaos: %s\n", err);
        kd_config_destroy (&c);
        return 2;
    }
    //  A partition cuts a namespace's link, a slow fault shapes it:
    //  without namespaces there is none (every service shares loopback).
    const char *faults = kd_config_str (c, "faults");
    if ((strstr (faults, "partition") || strstr (faults, "slow")) && !self->netns) {
        fprintf (stderr, "kudus chaos: setting 'faults': %s needs --netns true (root: each service "
                 "in a network namespace of its own)\n", strstr (faults, "slow") ? "slow" : "partition");
        kd_fault_plan_destroy (&plan);
        kd_config_destroy (&c);
        return 2;
    }
    //  A slowed link is healed to no limit at all: on links that have one
    //  (kudus local's --link-rate-mbit or a --link rate), healing would
    //  lift it, and the soak would go on over other links than asked for.
    //  The rate is read as kudus local reads it: its last flag wins over
    //  the variable, and 0 is no limit.
    double rate = getenv ("KUDUS_LINK_RATE_MBIT") ? atof (getenv ("KUDUS_LINK_RATE_MBIT")) : 0;
    bool rated = getenv ("KUDUS_LINK") && *getenv ("KUDUS_LINK");
    for (int i = 0; i < extra_argc; i++) {
        if (!strcmp (extra_argv [i], "--link-rate-mbit") && i + 1 < extra_argc)
            rate = atof (extra_argv [++i]);
        else if (!strncmp (extra_argv [i], "--link-rate-mbit=", 17))
            rate = atof (extra_argv [i] + 17);
        else
            rated = rated || !strcmp (extra_argv [i], "--link") || !strncmp (extra_argv [i], "--link=", 7);
    }
    rated = rated || rate > 0;
    if (strstr (faults, "slow") && rated) {
        fprintf (stderr, "kudus chaos: setting 'faults': slow needs links without a rate limit (it heals a "
                 "link to none); drop --link-rate-mbit and --link from kudus local's flags\n");
        kd_fault_plan_destroy (&plan);
        kd_config_destroy (&c);
        return 2;
    }
    if (mkdir (self->out, 0755) && errno != EEXIST) {
        fprintf (stderr, "kudus chaos: cannot create %s: %s\n", self->out, strerror (errno));
        kd_fault_plan_destroy (&plan);
        kd_config_destroy (&c);
        return 1;
    }
    s_clean_out (self->out);
    char path [1100];
    s_path (path, sizeof path, self->out, "schedule.json");
    FILE *f = fopen (path, "w");
    if (f) {
        kd_fault_plan_write_json (plan, f);
        fclose (f);
    }
    char *command = s_command (c, seconds, extra_argc, extra_argv);
    printf ("kudus chaos: seed %llu, %zu faults over %.0f s, output in %s (schedule.json)\n",
            (unsigned long long) seed, kd_fault_plan_size (plan), seconds, self->out);
    kd_fault_plan_print (plan, stdout);
    fflush (stdout);
    if (kd_config_bool (c, "dry-run")) {
        free (command);
        kd_fault_plan_destroy (&plan);
        kd_config_destroy (&c);
        return 0;
    }
    s_path (path, sizeof path, self->out, "chaos.jsonl");
    self->history = kd_history_new (path);
    if (!self->history) {
        fprintf (stderr, "kudus chaos: cannot write %s: %s\n", path, strerror (errno));
        free (command);
        kd_fault_plan_destroy (&plan);
        kd_config_destroy (&c);
        return 1;
    }
    char command_json [4096];
    s_json_text (command, command_json, sizeof command_json);
    kd_history_line (self->history, "begin", "\"seed\":%llu,\"soak_ms\":%llu,\"peers\":%d,\"command\":\"%s\"",
                     (unsigned long long) seed, (unsigned long long) (seconds * 1000),
                     2 + self->shards * self->replicas + self->workers, command_json);

    zsys_init ();
    zsys_handler_set (NULL);
    struct sigaction sa = { .sa_handler = s_on_signal };
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    signal (SIGPIPE, SIG_IGN);
    int status = 0;
    bool exited = false;
    rc = s_start_local (self, extra_argc, extra_argv, run_s);
    if (rc == 0)
        rc = s_soak (self, plan, seconds, run_s, &status, &exited);
    else
        fprintf (stderr, "kudus chaos: cannot start kudus local: %s\n", strerror (errno));
    if (self->local_pid > 0 && !exited) {
        kill (self->local_pid, SIGTERM);
        if (!s_wait_local (self, S_KILL_WAIT_MS, &status)) {
            kill (self->local_pid, SIGKILL);
            waitpid (self->local_pid, &status, 0);
        }
    }
    int code = WIFEXITED (status) ? WEXITSTATUS (status) : 128 + WTERMSIG (status);
    kd_history_line (self->history, "done", "\"code\":%d", self->local_pid > 0 ? code : -1);
    printf ("kudus chaos: the cluster stopped (kudus local exit code %d; its log: %s/cluster.log)\n",
            code, self->out);
    if (self->local_pid > 0)
        s_leftovers (self);
    kd_history_destroy (&self->history);
    for (int i = 0; i < S_MAX_SHARDS; i++)
        if (self->shard [i].fd >= 0)
            close (self->shard [i].fd);
    int result = s_check (self->out);
    if (result == 0 && rc != 0)
        result = 1;
    free (command);
    kd_fault_plan_destroy (&plan);
    kd_config_destroy (&c);
    return s_signal ? 128 + s_signal : result;
}
