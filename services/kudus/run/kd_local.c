/*  kd_local: `kudus local` runs a whole cluster as child processes on
    loopback: a monitor, a scheduler, the shards and the workers.

    With --restart on-failure (the default), a child that dies without
    being asked to is started again with the same command line after a
    doubling backoff, as compose's `restart: on-failure` does, so a run
    keeps training while a replica is down; each restart is logged and
    counted in the summary (`restarts`).  A shard comes back only when it
    has something to come back from (a replica or a checkpoint); the
    scheduler not at all, since a new one would start its epochs, run time
    and summary over.

    With --netns, each service runs in a network namespace of its own, on
    a bridge, behind a shaped link (kd_netns), and every listening service
    sits behind `kudus linkd` when links have a delay (kd_linkd).

    Each child's stdout and stderr come back through a pipe and are echoed
    with the child's name in front, so one log holds the whole story.  We
    follow the monitor's stream to print progress, wait for the scheduler to
    finish (it writes the summary), and then make sure every child is gone:
    SIGTERM, a grace period, SIGKILL.  Children also get PR_SET_PDEATHSIG, so
    even a SIGKILL of kudus itself leaves no orphans.
*/
#define _GNU_SOURCE    //  vasprintf
#include "kd_cli.h"
#include "kd_netns.h"
#include "kd_spawn.h"
#include "kd_stream.h"
#include <ctype.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define S_MAX_CHILDREN  300     //  monitor + scheduler + shards + workers
#define S_MAX_ARGS      128     //  argv entries per child
#define S_GRACE_MS      180000  //  after the scheduler exits, before SIGTERM:
                                //  the monitor may be evaluating its curve
                                //  (900 MLP snapshots of a 180 s run at 200 ms
                                //  take 20-40 s on 2 cores)
#define S_KILL_MS       3000    //  after SIGTERM, before SIGKILL
#define S_STUCK_MS      45000   //  scheduler still running with no workers
#define S_STALL_MS      120000  //  model version unchanged while training
#define S_RESTART_MIN_MS    200     //  first wait before a restart
#define S_RESTART_MAX_MS    5000    //  longest wait: the backoff doubles to it
#define S_RESTART_BURST     5       //  restarts of one child within the window
#define S_RESTART_WINDOW_MS 60000   //  that mean a crash loop: give up
#define S_FIRST_BREATH_MS   2000    //  a child that exits or crashes this
                                    //  soon after its first start failed to
                                    //  start (a bad setting, a port in use):
                                    //  no restart; one killed from outside
                                    //  is restarted (an OOM kill, a chaos kill)

typedef enum {
    S_KIND_MONITOR, S_KIND_SCHEDULER, S_KIND_SHARD, S_KIND_WORKER,
    S_KIND_DASHBOARD, S_KIND_LINKD,     //  helpers: they live as long as the cluster
    S_KIND_AGGREGATOR
} s_kind_t;

static kd_netns_t *s_net = NULL;       //  --netns: the emulated network
static kd_history_t *s_history = NULL; //  --history-dir: starts, exits, restarts

typedef struct {
    char *argv [S_MAX_ARGS];    //  NULL-terminated
    int argc;                   //  entries in use
} s_args_t;

typedef struct {
    char name [32];             //  "worker-3"
    s_kind_t kind;              //  role
    bool awaited;               //  a worker the scheduler waits for to start
    s_args_t args;              //  its command line, kept for restarts (owned)
    int node;                   //  --netns host, or -1
    pid_t pid;                  //  0 when reaped
    int fd;                     //  read end of its output pipe, -1 at EOF
    int status;                 //  wait status once reaped
    bool seen_exit;             //  its last exit was handled
    uint64_t started_at;        //  ms of its last start
    uint64_t first_start;       //  ms of its first start
    uint64_t restart_at;        //  ms of a pending restart, 0 = none
    unsigned restarts;          //  restarts so far
    uint64_t recent [S_RESTART_BURST];  //  ms of its last restarts (a ring)
    char partial [1024];        //  output line not yet complete
    size_t partial_len;         //  its length
} s_child_t;

static volatile sig_atomic_t s_signal = 0;

static void
s_on_signal (int sig)
{
    s_signal = sig;
}

//  Add one argument (copied).
static void
s_arg (s_args_t *a, const char *fmt, ...)
{
    assert (a->argc < S_MAX_ARGS - 1);
    va_list args;
    va_start (args, fmt);
    char *s = NULL;
    if (vasprintf (&s, fmt, args) < 0)
        abort ();
    va_end (args);
    a->argv [a->argc++] = s;
    a->argv [a->argc] = NULL;
}

//  Pass one setting of ours to a child as --name value.
static void
s_pass (s_args_t *a, kd_config_t *c, const char *name)
{
    size_t count;
    const kd_setting_t *table = kd_config_table (&count);
    for (size_t i = 0; i < count; i++)
        if (!strcmp (table [i].name, name) && (table [i].services & KD_SVC_LOCAL)) {
            s_arg (a, "--%s", name);
            if (table [i].type == KD_CT_INT)
                s_arg (a, "%lld", (long long) kd_config_int (c, name));
            else
            if (table [i].type == KD_CT_DOUBLE && !isnan (kd_config_double (c, name)))
                s_arg (a, "%.17g", kd_config_double (c, name));
            else
            if (table [i].type == KD_CT_BOOL)
                s_arg (a, "%s", kd_config_bool (c, name) ? "true" : "false");
            else
                s_arg (a, "%s", kd_config_str (c, name));
            return;
        }
    assert (false);
}

//  True when this build declares a setting for one of the services in mask
//  (so a flag for it is safe to pass).
static bool
s_has_setting (const char *name, unsigned mask)
{
    size_t count;
    const kd_setting_t *table = kd_config_table (&count);
    for (size_t i = 0; i < count; i++)
        if (!strcmp (table [i].name, name) && (table [i].services & mask))
            return true;
    return false;
}

static void
s_args_free (s_args_t *a)
{
    for (int i = 0; i < a->argc; i++)
        free (a->argv [i]);
    a->argc = 0;
}

//  In a child before exec: enter its node's network namespace.
static int
s_enter_node (void *arg)
{
    int node = *(int *) arg;
    if (kd_netns_enter (s_net, (size_t) node) == 0)
        return 0;
    fprintf (stderr, "cannot enter network namespace %s: %s\n",
             kd_netns_name (s_net, (size_t) node), strerror (errno));
    return -1;
}

//  Fork and exec a child's command line with its output on a pipe.
//  Returns 0 or -1.
static int
s_start (s_child_t *child)
{
    s_args_t *args = &child->args;
    int node = child->node;
    //  Close-on-exec: no child inherits the other children's pipes.
    int fds [2];
    if (pipe2 (fds, O_CLOEXEC) != 0)
        return -1;
    kd_spawn_t how = KD_SPAWN_INIT;
    how.argv = (const char *const *) args->argv;
    how.out_fd = how.err_fd = fds [1];
    how.death_signal = SIGTERM;
    how.ignore_sigint = true;       //  Ctrl-C reaches us; we send SIGTERM
    if (node >= 0 && s_net) {
        how.before_exec = s_enter_node;
        how.arg = &child->node;
    }
    pid_t pid = kd_spawn (&how);
    if (pid < 0) {
        close (fds [0]);
        close (fds [1]);
        return -1;
    }
    close (fds [1]);
    fcntl (fds [0], F_SETFL, O_NONBLOCK);
    child->pid = pid;
    child->fd = fds [0];
    child->seen_exit = false;
    kd_history_line (s_history, "spawn", "\"name\":\"%s\",\"child\":%d,\"restarts\":%u",
                     child->name, (int) pid, child->restarts);
    child->started_at = kd_now_ms ();
    if (!child->first_start)
        child->first_start = child->started_at;
    return 0;
}

//  Start one child, taking its command line (args is left empty, also on
//  failure).  Returns 0 or -1.
static int
s_spawn (s_child_t *child, const char *name, s_kind_t kind, s_args_t *args, int node)
{
    memset (child, 0, sizeof *child);
    snprintf (child->name, sizeof child->name, "%s", name);
    child->kind = kind;
    child->node = node;
    child->fd = -1;
    child->args = *args;
    *args = (s_args_t) { .argc = 0 };
    if (s_start (child) == 0)
        return 0;
    s_args_free (&child->args);
    return -1;
}

//  Echo complete lines of a child's output with its name in front.
static void
s_drain_output (s_child_t *c, bool quiet)
{
    char buf [4096];
    ssize_t n;
    while ((n = read (c->fd, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; i++) {
            if (buf [i] == '\n' || c->partial_len == sizeof c->partial - 1) {
                c->partial [c->partial_len] = 0;
                if (!quiet || strstr (c->partial, " warn ") || strstr (c->partial, " error ")
                ||  strstr (c->partial, "cannot"))
                    fprintf (stderr, "%-10s| %s\n", c->name, c->partial);
                c->partial_len = 0;
            }
            else
                c->partial [c->partial_len++] = buf [i];
        }
    }
    if (n == 0) {
        close (c->fd);
        c->fd = -1;
    }
}

//  Reap exited children without blocking.
static void
s_reap (s_child_t *children, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (children [i].pid > 0) {
            int status;
            if (waitpid (children [i].pid, &status, WNOHANG) == children [i].pid) {
                kd_history_line (s_history, "exit", "\"name\":\"%s\",\"child\":%d,\"code\":%d,\"signal\":%d",
                                 children [i].name, (int) children [i].pid,
                                 WIFEXITED (status) ? WEXITSTATUS (status) : -1,
                                 WIFSIGNALED (status) ? WTERMSIG (status) : 0);
                children [i].pid = 0;
                children [i].status = status;
            }
        }
}

//  Words for a wait status.
static void
s_status_text (int status, char *out, size_t size)
{
    if (WIFSIGNALED (status))
        snprintf (out, size, "killed by signal %d", WTERMSIG (status));
    else
    if (WIFEXITED (status))
        snprintf (out, size, "exit code %d", WEXITSTATUS (status));
    else
        snprintf (out, size, "status %d", status);
}

//  Restarts of a child within the crash-loop window before now.
static unsigned
s_recent_restarts (const s_child_t *ch, uint64_t now)
{
    unsigned n = 0;
    for (int i = 0; i < S_RESTART_BURST; i++)
        n += ch->recent [i] && now - ch->recent [i] < S_RESTART_WINDOW_MS;
    return n;
}

//  Whether a wait status is a kill from outside (an OOM kill, an operator,
//  a chaos test), which says nothing about the child's settings; a crash
//  (SIGSEGV, an assert's SIGABRT) or an exit of its own does.
static bool
s_killed (int status)
{
    if (!WIFSIGNALED (status))
        return false;
    int sig = WTERMSIG (status);
    return sig == SIGKILL || sig == SIGTERM || sig == SIGINT || sig == SIGHUP;
}

//  A child died without being asked to: plan its restart after a doubling
//  backoff.  Returns false when it must not come back: it exited or
//  crashed before it got going (a bad setting or a port in use fails again
//  at once), or it is in a crash loop.  A kill from outside says nothing
//  about the settings, so a child killed early is restarted like any other.
static bool
s_plan_restart (s_child_t *ch, uint64_t now)
{
    char why [64];
    s_status_text (ch->status, why, sizeof why);
    if (ch->restarts == 0 && now - ch->first_start < S_FIRST_BREATH_MS && !s_killed (ch->status)) {
        fprintf (stderr, "kudus local: %s failed to start (%s)\n", ch->name, why);
        return false;
    }
    unsigned recent = s_recent_restarts (ch, now);
    if (recent >= S_RESTART_BURST) {
        fprintf (stderr, "kudus local: %s exited again (%s) after %u restarts in %d s; giving up\n",
                 ch->name, why, recent, S_RESTART_WINDOW_MS / 1000);
        return false;
    }
    uint64_t wait = (uint64_t) S_RESTART_MIN_MS << recent;
    if (wait > S_RESTART_MAX_MS)
        wait = S_RESTART_MAX_MS;
    ch->restart_at = now + wait;
    fprintf (stderr, "kudus local: %s exited unexpectedly (%s); restarting it in %llu ms\n",
             ch->name, why, (unsigned long long) wait);
    return true;
}

//  Start again a child whose restart is due.  Returns 0 or -1.
static int
s_restart (s_child_t *ch, bool quiet, uint64_t now)
{
    //  What the dead process wrote last is echoed before the new one talks.
    if (ch->fd >= 0)
        s_drain_output (ch, quiet);
    if (ch->fd >= 0) {
        close (ch->fd);
        ch->fd = -1;
    }
    ch->partial_len = 0;
    ch->restart_at = 0;
    ch->recent [ch->restarts % S_RESTART_BURST] = now;
    ch->restarts++;
    if (s_start (ch) != 0) {
        fprintf (stderr, "kudus local: cannot restart %s: %s\n", ch->name, strerror (errno));
        return -1;
    }
    fprintf (stderr, "kudus local: restarted %s pid=%d (restart %u)\n", ch->name, (int) ch->pid,
             ch->restarts);
    kd_history_line (s_history, "restart", "\"name\":\"%s\",\"child\":%d,\"restarts\":%u",
                     ch->name, (int) ch->pid, ch->restarts);
    return 0;
}

//  Add the restarts to the summary the scheduler wrote: their total and
//  each restarted service's count, as one more member of its object.  The
//  text is spliced in before the closing brace, so the scheduler's own
//  layout stays as it wrote it.  Returns the total.
static unsigned
s_note_restarts (const char *summary, const s_child_t *children, size_t n)
{
    unsigned total = 0;
    char by [2048] = "";
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        if (children [i].restarts) {
            total += children [i].restarts;
            len += (size_t) snprintf (by + len, len < sizeof by ? sizeof by - len : 0, "%s\"%s\": %u",
                                      len ? ", " : "", children [i].name, children [i].restarts);
        }
    if (len >= sizeof by)
        return total;           //  hundreds of restarted services: the log has them
    char *text = kd_read_file (summary);
    char *brace = text ? strrchr (text, '}') : NULL;
    if (brace) {
        *brace = 0;
        for (char *end = brace; end > text && isspace ((unsigned char) end [-1]); end--)
            end [-1] = 0;
        char tmp [1200];
        snprintf (tmp, sizeof tmp, "%s.tmp", summary);
        FILE *f = fopen (tmp, "w");
        bool ok = f && fprintf (f, "%s,\n  \"restarts\": {\"total\": %u, \"by_service\": {%s}}\n}\n",
                                text, total, by) > 0;
        if (f && fclose (f) != 0)
            ok = false;
        if (!ok || rename (tmp, summary) != 0) {
            fprintf (stderr, "kudus local: cannot add the restarts to %s: %s\n", summary, strerror (errno));
            unlink (tmp);
        }
    }
    free (text);
    return total;
}

//  SIGTERM, then SIGKILL, every child still running.
static void
s_teardown (s_child_t *children, size_t n, bool quiet)
{
    for (size_t i = 0; i < n; i++)
        if (children [i].pid > 0)
            kill (children [i].pid, SIGTERM);
    uint64_t deadline = kd_now_ms () + S_KILL_MS;
    while (kd_now_ms () < deadline) {
        s_reap (children, n);
        size_t left = 0;
        for (size_t i = 0; i < n; i++) {
            if (children [i].fd >= 0)
                s_drain_output (&children [i], quiet);
            left += children [i].pid > 0;
        }
        if (!left)
            return;
        usleep (20000);
    }
    for (size_t i = 0; i < n; i++)
        if (children [i].pid > 0) {
            fprintf (stderr, "kudus local: killing %s pid=%d\n", children [i].name, (int) children [i].pid);
            kill (children [i].pid, SIGKILL);
            waitpid (children [i].pid, &children [i].status, 0);
            children [i].pid = 0;
        }
}

//  Print a progress line from a "stats" message.
static void
s_progress (kd_stream_t *o, uint64_t *version, uint64_t *changed_at, bool *started)
{
    //  The monitor counts elapsed time from the scheduler's START.
    if (kd_stream_number (o, KD_S_ELAPSED_S, 0) > 0)
        *started = true;
    uint64_t v = (uint64_t) kd_stream_number (o, KD_S_VERSION, 0);
    if (v != *version) {
        *version = v;
        *changed_at = kd_now_ms ();
    }
    double acc = kd_stream_number (o, KD_S_TEST_ACCURACY, -1);
    double auc = kd_stream_number (o, KD_S_TEST_AUC, -1);
    char accs [40] = "   -  ";
    if (acc >= 0 && auc >= 0)
        snprintf (accs, sizeof accs, "%.4f auc %.4f", acc, auc);
    else
    if (acc >= 0)
        snprintf (accs, sizeof accs, "%.4f", acc);
    printf ("kudus: t=%6.1fs  epoch %5.2f  samples/s %7.0f  train loss %.4f  "
            "test acc %s  version %.0f  workers %.0f\n",
            kd_stream_number (o, KD_S_ELAPSED_S, 0), kd_stream_number (o, KD_S_EPOCH, 0),
            kd_stream_number (o, KD_S_SAMPLES_PER_S, 0), kd_stream_number (o, KD_S_TRAIN_LOSS, 0), accs,
            kd_stream_number (o, KD_S_VERSION, 0), kd_stream_number (o, KD_S_WORKERS, 0));
    fflush (stdout);
}

//  Static slowdown of a rank from --straggler RANK:F[,RANK:F...].
static double
s_straggler_factor (const char *list, int rank, char *err, size_t err_size)
{
    double factor = 1;
    const char *p = list;
    while (p && *p) {
        char *end;
        long r = strtol (p, &end, 10);
        if (end == p || *end != ':') {
            snprintf (err, err_size, "setting 'straggler': '%s' is not RANK:FACTOR", p);
            return -1;
        }
        double f = strtod (end + 1, &end);
        if (!(f >= 1 && f <= 1000) || (*end && *end != ',')) {
            snprintf (err, err_size, "setting 'straggler': factor must be in [1, 1000]");
            return -1;
        }
        if (r == rank)
            factor = f;
        p = *end == ',' ? end + 1 : NULL;
    }
    return factor;
}

//  Worker index's entry of --speeds (specs joined with ';'), into out; ""
//  when the list is shorter.  Returns 0, or -1 when the entry is too long.
static int
s_speed_spec (const char *list, int index, char *out, size_t size)
{
    const char *p = list;
    for (int i = 0; i < index && p; i++) {
        p = strchr (p, ';');
        p = p ? p + 1 : NULL;
    }
    const char *end = p ? strchr (p, ';') : NULL;
    size_t len = !p ? 0 : end ? (size_t) (end - p) : strlen (p);
    if (len >= size)
        return -1;
    memcpy (out, p ? p : "", len);
    out [len] = 0;
    return 0;
}

//  Check --speeds before anything starts: one schedule per worker at most,
//  each a valid kd_speed spec, and workers that understand --speed.
static int
s_check_speeds (const char *list, int workers, char *err, size_t err_size)
{
    int entries = *list ? 1 : 0;
    for (const char *p = list; *p; p++)
        entries += *p == ';';
    if (entries > workers) {
        snprintf (err, err_size, "setting 'speeds': %d schedules for %d workers", entries, workers);
        return -1;
    }
    char spec [KD_SPEED_MAX_SPEC + 1], msg [256];
    for (int r = 0; r < entries; r++) {
        if (s_speed_spec (list, r, spec, sizeof spec)) {
            snprintf (err, err_size, "setting 'speeds': worker %d: longer than %d bytes", r,
                      KD_SPEED_MAX_SPEC);
            return -1;
        }
        kd_speed_t *speed = kd_speed_new (spec, 0, msg, sizeof msg);
        if (!speed) {
            snprintf (err, err_size, "setting 'speeds': worker %d: %s", r, msg);
            return -1;
        }
        kd_speed_destroy (&speed);
        if (*spec && !s_has_setting ("speed", KD_SVC_WORKER)) {
            snprintf (err, err_size, "setting 'speeds': this build's worker has no 'speed' setting");
            return -1;
        }
    }
    return 0;
}

//  --netns: a node per service, sched 0, mon 1, the shards, then the
//  workers, each link from the defaults and the overrides, in order.
static kd_netns_t *
s_netns_build (kd_config_t *c, int shards, int workers, char *err, size_t err_size)
{
    size_t n = 2 + (size_t) shards + (size_t) workers;
    const char **names = (const char **) calloc (n, sizeof (char *));
    char (*buf) [16] = calloc (n, sizeof *buf);
    kd_link_t *links = (kd_link_t *) calloc (n, sizeof (kd_link_t));
    kd_netns_t *net = NULL;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *role = i == 0 ? "scheduler" : i == 1 ? "monitor" : i < 2 + (size_t) shards ? "shard" : "worker";
        int rank = i < 2 ? 0 : i < 2 + (size_t) shards ? (int) i - 2 : (int) i - 2 - shards;
        if (i < 2)
            snprintf (buf [i], sizeof buf [i], "%s", i == 0 ? "sched" : "mon");
        else
            snprintf (buf [i], sizeof buf [i], "%s%d", i < 2 + (size_t) shards ? "s" : "w", rank);
        names [i] = buf [i];
        links [i] = (kd_link_t) {
            .delay_ms = kd_config_double (c, "link-delay-ms"),
            .rate_mbit = kd_config_double (c, "link-rate-mbit"),
            .loss = kd_config_double (c, "link-loss"),
        };
        char *list = strdup (kd_config_str (c, "link"));
        char *save = NULL;
        for (char *tok = strtok_r (list, ",", &save); tok && rc == 0; tok = strtok_r (NULL, ",", &save)) {
            //  An override's values are comma-separated too: glue them back.
            char spec [256];
            snprintf (spec, sizeof spec, "%s", tok);
            while (save && *save) {
                size_t tl = strcspn (save, ",");
                bool value = (!strncmp (save, "delay:", 6) || !strncmp (save, "rate:", 5)
                              || !strncmp (save, "loss:", 5)) && !memchr (save, '=', tl);
                char *next = value ? strtok_r (NULL, ",", &save) : NULL;
                if (!next)
                    break;
                size_t len = strlen (spec);
                snprintf (spec + len, sizeof spec - len, ",%s", next);
            }
            if (kd_netns_override (spec, role, rank, &links [i], err, err_size) < 0)
                rc = -1;
        }
        free (list);
    }
    if (rc == 0)
        net = kd_netns_new (names, links, n, err, err_size);
    free (names);
    free (buf);
    free (links);
    return net;
}

//  kudus linkd for node (sched 0, mon 1, shard i at 2 + i): its listening
//  ports, its own delay and every other node's.
static void
s_linkd_args (s_args_t *a, const char *bindir, int node, int port, int shards)
{
    const char *addr = kd_netns_addr (s_net, (size_t) node);
    s_arg (a, "%s/kudus", bindir);
    s_arg (a, "linkd");
    if (node == 0) {
        s_arg (a, "--forward"); s_arg (a, "%s:%d=127.0.0.1:%d", addr, port, port);
    }
    else
    if (node == 1)
        for (int p = 1; p <= 2; p++) {
            s_arg (a, "--forward"); s_arg (a, "%s:%d=127.0.0.1:%d", addr, port + p, port + p);
        }
    else {
        int i = node - 2;
        s_arg (a, "--forward"); s_arg (a, "%s:%d=127.0.0.1:%d", addr, port + 100 + i, port + 100 + i);
    }
    (void) shards;
    s_arg (a, "--self-delay-ms"); s_arg (a, "%g", kd_netns_link (s_net, (size_t) node)->delay_ms);
    //  One list argument: the peers' delays, joined.
    size_t n = kd_netns_size (s_net);
    char *peers = NULL;
    size_t len = 0;
    FILE *f = open_memstream (&peers, &len);
    for (size_t j = 0; j < n; j++)
        if (j != (size_t) node && kd_netns_link (s_net, j)->delay_ms > 0)
            fprintf (f, "%s%s=%g", ftell (f) ? "," : "", kd_netns_addr (s_net, j), kd_netns_link (s_net, j)->delay_ms);
    fclose (f);
    if (len) {
        s_arg (a, "--peer-delay"); s_arg (a, "%s", peers);
    }
    free (peers);
}

//  One `kudus local` run: its settings, its children and their endpoints.
typedef struct {
    kd_config_t *c;
    int workers, external;      //  our workers, and workers we wait for
    int shards;                 //  shard processes (ranges x replicas)
    int port;                   //  base port
    bool quiet;
    bool restart_on;            //  --restart on-failure
    bool shard_can_restart;     //  a replica or a checkpoint to come back from
    bool evaluator;             //  --evaluator
    int fan_in, aggregators;    //  the barrier tree, when asked for
    const char *straggler, *speeds, *history_dir;
    char bindir [1024];         //  where the service binaries are
    char summary [1100];        //  the scheduler's summary file
    bool own_summary;           //  ours to remove: the user named none
    char *temp_keys;            //  throwaway CURVE keys of this run, or NULL
    kd_curve_t *curve;          //  ours, to follow the stream
    bool relay;                 //  --netns links with delays: kudus linkd
    const char *bind_host_sched, *bind_host_mon;
    char sched_ep [64], intake_ep [64], pub_ep [64];
    s_child_t *children;
    size_t n_children;
} s_local_t;

static const char *s_common [] = { "heartbeat-ms", "liveness" };

//  Start one child from args (then freed) and count it; -1 on failure.
static int
s_add (s_local_t *self, const char *name, s_kind_t kind, s_args_t *args, int node)
{
    int rc = s_spawn (&self->children [self->n_children], name, kind, args, node);
    s_args_free (args);
    if (rc == 0)
        self->n_children++;
    return rc == 0 ? 0 : -1;
}

//  The settings checked before anything starts; 0, or 2 after saying why.
static int
s_check (s_local_t *self)
{
    kd_config_t *c = self->c;
    char err [512];
    for (int r = 0; r < self->workers; r++)
        if (s_straggler_factor (self->straggler, r, err, sizeof err) < 0) {
            fprintf (stderr, "kudus local: %s\n", err);
            return 2;
        }
    if (s_check_speeds (self->speeds, self->workers, err, sizeof err)) {
        fprintf (stderr, "kudus local: %s\n", err);
        return 2;
    }
    if (!strcmp (kd_config_str (c, "model"), "external") && self->workers > 0) {
        fprintf (stderr, "kudus local: model external is trained by external workers only: "
                 "pass --workers 0 --external-workers N\n");
        return 2;
    }
    if (!strcmp (kd_config_str (c, "model"), "sparse-lr") && self->workers > 0 && !*kd_config_str (c, "train-file")) {
        fprintf (stderr, "kudus local: model sparse-lr needs --train-file (a LIBSVM file; "
                 "kudus gen-ctr writes one)\n");
        return 2;
    }
    //  The built-in evaluator scores the built-in dense models; a user's
    //  model is scored by the user's evaluator (kudus.torch.Evaluator).
    if (self->evaluator && (!strcmp (kd_config_str (c, "model"), "external")
                        ||  !strcmp (kd_config_str (c, "model"), "sparse-lr"))) {
        fprintf (stderr, "kudus local: setting 'evaluator': the built-in evaluator scores softmax and "
                 "mlp; score model %s with kudus.torch.Evaluator (or kd_client_report_eval)\n",
                 kd_config_str (c, "model"));
        return 2;
    }
    if (self->workers + self->external == 0) {
        fprintf (stderr, "kudus local: settings 'workers' and 'external-workers': no worker at all\n");
        return 2;
    }
    if (self->aggregators > 50 || (self->aggregators > 0 && kd_config_bool (c, "netns"))) {
        fprintf (stderr, "kudus local: setting 'fan-in': %s\n", self->aggregators > 50
                 ? "at most 50 aggregators (raise fan-in)" : "not with --netns (the aggregators have no node)");
        return 2;
    }
    //  Every child counts: the services, the dashboard, the aggregators, and
    //  with --netns a kudus linkd per listening service.
    int helpers = 1 + self->aggregators + (kd_config_bool (c, "netns") ? 2 + self->shards : 0) + self->evaluator;
    int all = 2 + self->shards + self->workers + helpers;
    if (all > S_MAX_CHILDREN) {
        fprintf (stderr, "kudus local: settings 'workers' + 'shards': at most %d processes in all "
                 "(%d asked for, helpers included)\n", S_MAX_CHILDREN, all);
        return 2;
    }
    if (self->port + 100 + self->shards > 65535) {
        fprintf (stderr, "kudus local: setting 'base-port': %d leaves no room for %d shards\n",
                 self->port, self->shards);
        return 2;
    }
    return 0;
}

//  Where things are: the binaries, the summary, the CURVE keys, the
//  network and the endpoints; 0, or 1 after saying why.
static int
s_prepare (s_local_t *self)
{
    kd_config_t *c = self->c;
    char err [512];
    //  The service binaries live beside this one unless told otherwise.
    if (*kd_config_str (c, "bin-dir"))
        snprintf (self->bindir, sizeof self->bindir, "%s", kd_config_str (c, "bin-dir"));
    else {
        ssize_t n = readlink ("/proc/self/exe", self->bindir, sizeof self->bindir - 1);
        self->bindir [n > 0 ? n : 0] = 0;
        char *slash = strrchr (self->bindir, '/');
        if (slash)
            *slash = 0;
        else
            snprintf (self->bindir, sizeof self->bindir, ".");
    }
    self->own_summary = !*kd_config_str (c, "summary");
    if (self->own_summary)
        snprintf (self->summary, sizeof self->summary, "%s/kudus-summary-%d.json", kd_temp_base (), (int) getpid ());
    else
        snprintf (self->summary, sizeof self->summary, "%s", kd_config_str (c, "summary"));
    unlink (self->summary);
    //  CURVE: the children read the switch and the keys from the
    //  environment; without a keys dir, throwaway keys are made for the run.
    bool have_keys = true;
    if (kd_config_bool (c, "curve") && !kd_config_is_set (c, "keys-dir")) {
        self->temp_keys = kd_curve_keygen_temp (err, sizeof err);
        have_keys = self->temp_keys && kd_config_set (c, "keys-dir", self->temp_keys, err, sizeof err) == 0;
    }
    kd_curve_set_identity ("observer");
    self->curve = have_keys ? kd_curve_new (c, KD_CURVE_CLIENT, err, sizeof err) : NULL;
    if (!self->curve) {
        fprintf (stderr, "kudus local: %s\n", err);
        return 1;
    }
    setenv ("KUDUS_CURVE", kd_curve_enabled (self->curve) ? "1" : "0", 1);
    setenv ("KUDUS_KEYS_DIR", kd_config_str (c, "keys-dir"), 1);

    //  Where each listening service is reached (public) and where it binds:
    //  the same on loopback; with --netns, its node's address, or its
    //  namespace's loopback behind kudus linkd when links have a delay.
    if (kd_config_bool (c, "netns")) {
        s_net = s_netns_build (c, self->shards, self->workers, err, sizeof err);
        if (!s_net) {
            fprintf (stderr, "kudus local: %s\n", err);
            return 1;
        }
        for (size_t i = 0; i < kd_netns_size (s_net); i++)
            self->relay = self->relay || kd_netns_link (s_net, i)->delay_ms > 0;
        printf ("kudus: netns: %zu namespaces %s..., host %s on kd%d; links:",
                kd_netns_size (s_net), kd_netns_name (s_net, 0), kd_netns_host_addr (s_net), (int) getpid ());
        for (size_t i = 0; i < kd_netns_size (s_net); i++) {
            const kd_link_t *l = kd_netns_link (s_net, i);
            printf (" %s=%s/%gms/%gMbit/%g", strrchr (kd_netns_name (s_net, i), '-') + 1,
                    kd_netns_addr (s_net, i), l->delay_ms, l->rate_mbit, l->loss);
        }
        printf ("\n");
    }
    const char *sched_host = s_net ? kd_netns_addr (s_net, 0) : "127.0.0.1";
    const char *mon_host = s_net ? kd_netns_addr (s_net, 1) : "127.0.0.1";
    self->bind_host_sched = self->relay ? "127.0.0.1" : sched_host;
    self->bind_host_mon = self->relay ? "127.0.0.1" : mon_host;
    snprintf (self->sched_ep, sizeof self->sched_ep, "tcp://%s:%d", sched_host, self->port);
    snprintf (self->intake_ep, sizeof self->intake_ep, "tcp://%s:%d", mon_host, self->port + 1);
    snprintf (self->pub_ep, sizeof self->pub_ep, "tcp://%s:%d", mon_host, self->port + 2);

    //  Our own handler, not CZMQ's: we must know which signal came, and
    //  CZMQ would otherwise install its handler at the first socket.
    zsys_init ();
    zsys_handler_set (NULL);
    struct sigaction sa = { .sa_handler = s_on_signal };
    sigaction (SIGINT, &sa, NULL);
    sigaction (SIGTERM, &sa, NULL);
    signal (SIGPIPE, SIG_IGN);

    //  The history of the run (docs/chaos.md): the scheduler's and each
    //  shard's file, and ours with every start, exit and restart.
    if (*self->history_dir) {
        char path [1100];
        snprintf (path, sizeof path, "%s/local.jsonl", self->history_dir);
        s_history = kd_history_new (path);
        if (!s_history) {
            fprintf (stderr, "kudus local: setting 'history-dir': cannot write %s: %s\n", path, strerror (errno));
            return 1;
        }
    }
    self->children = (s_child_t *) calloc (S_MAX_CHILDREN, sizeof (s_child_t));
    return self->children ? 0 : 1;
}

//  With --netns and delayed links, a kudus linkd per listening service:
//  its peers reach it through them, so they start first.
static int
s_start_relays (s_local_t *self)
{
    s_args_t a = { .argc = 0 };
    char name [32];
    for (int node = 0; self->relay && node < 2 + self->shards; node++) {
        s_linkd_args (&a, self->bindir, node, self->port, self->shards);
        snprintf (name, sizeof name, "linkd-%s", node == 0 ? "sched" : node == 1 ? "mon" : "shard");
        if (node >= 2)
            snprintf (name, sizeof name, "linkd-shard-%d", node - 2);
        if (s_add (self, name, S_KIND_LINKD, &a, node))
            return -1;
    }
    return 0;
}

static int
s_start_monitor (s_local_t *self)
{
    kd_config_t *c = self->c;
    s_args_t a = { .argc = 0 };
    const char *mon_host = s_net ? kd_netns_addr (s_net, 1) : "127.0.0.1";
    s_arg (&a, "%s/kudus-monitor", self->bindir);
    s_arg (&a, "--bind"); s_arg (&a, "tcp://%s:%d", self->bind_host_mon, self->port + 1);
    s_arg (&a, "--pub-bind"); s_arg (&a, "tcp://%s:%d", self->bind_host_mon, self->port + 2);
    if (self->relay) {
        s_arg (&a, "--advertise"); s_arg (&a, "%s", self->intake_ep);
    }
    //  Prometheus scrapes the monitor at base-port + 3 (7003 by default).
    s_arg (&a, "--metrics-bind"); s_arg (&a, "%s:%d", mon_host, self->port + 3);
    s_arg (&a, "--scheduler"); s_arg (&a, "%s", self->sched_ep);
    s_arg (&a, "--name"); s_arg (&a, "monitor");
    s_pass (&a, c, "data-dir");
    s_pass (&a, c, "eval-interval");
    s_pass (&a, c, "snapshot-ms");
    s_pass (&a, c, "curve-file");
    s_pass (&a, c, "test-file");
    s_pass (&a, c, "eval-rows");
    for (size_t i = 0; i < 2; i++) s_pass (&a, c, s_common [i]);
    s_arg (&a, "--log-level"); s_arg (&a, "%s", kd_config_str (c, "log-level"));
    if (s_add (self, "monitor", S_KIND_MONITOR, &a, s_net ? 1 : -1))
        return -1;
    //  The live page (`kudus dashboard`), when asked for; it lives as long
    //  as the cluster.
    if (*kd_config_str (c, "dashboard")) {
        s_arg (&a, "%s/kudus", self->bindir);
        s_arg (&a, "dashboard");
        s_arg (&a, "--monitor"); s_arg (&a, "%s", self->pub_ep);
        s_arg (&a, "--listen"); s_arg (&a, "%s", kd_config_str (c, "dashboard"));
        if (s_add (self, "dashboard", S_KIND_DASHBOARD, &a, -1))
            return -1;
    }
    return 0;
}

//  The scheduler, with every training and consistency setting, and the
//  barrier aggregators in front of it.
static int
s_start_scheduler (s_local_t *self)
{
    kd_config_t *c = self->c;
    static const char *sched_settings [] = {
        "shards", "replicas", "model", "hidden", "lr", "momentum", "batch", "seed", "epochs",
        "optimizer", "beta1", "beta2", "eps", "weight-decay", "l1", "l2", "ftrl-beta",
        "lr-schedule", "warmup-steps", "schedule-unit",
        "target-accuracy", "max-seconds", "consistency", "staleness", "quota", "quota-ratio",
        "window-ms", "barrier", "barrier-slack", "barrier-spread", "key-encoding", "phase-path", "group-ratio",
        "min-group", "max-groups", "group-staleness", "group-step", "staleness-weight",
        "regroup-dwell", "speed-source", "heartbeat-ms", "liveness", "final-pull-ms", "rejoin-wait-ms"
    };
    s_args_t a = { .argc = 0 };
    s_arg (&a, "%s/kudus-scheduler", self->bindir);
    s_arg (&a, "--bind"); s_arg (&a, "tcp://%s:%d", self->bind_host_sched, self->port);
    if (self->relay) {
        s_arg (&a, "--advertise"); s_arg (&a, "%s", self->sched_ep);
    }
    s_arg (&a, "--monitor-pub"); s_arg (&a, "%s", self->pub_ep);
    s_arg (&a, "--min-workers"); s_arg (&a, "%d", self->workers + self->external);
    s_arg (&a, "--summary"); s_arg (&a, "%s", self->summary);
    if (*self->history_dir) {
        s_arg (&a, "--history-file"); s_arg (&a, "%s/scheduler.jsonl", self->history_dir);
    }
    s_arg (&a, "--log-level"); s_arg (&a, "%s", kd_config_str (c, "log-level"));
    for (size_t i = 0; i < sizeof sched_settings / sizeof sched_settings [0]; i++)
        s_pass (&a, c, sched_settings [i]);
    if (s_add (self, "scheduler", S_KIND_SCHEDULER, &a, s_net ? 0 : -1))
        return -1;
    char name [32];
    for (int i = 0; i < self->aggregators; i++) {
        snprintf (name, sizeof name, "aggregator-%d", i);
        s_arg (&a, "%s/kudus", self->bindir);
        s_arg (&a, "aggregate");
        s_arg (&a, "--bind"); s_arg (&a, "tcp://127.0.0.1:%d", self->port + 50 + i);
        s_arg (&a, "--scheduler"); s_arg (&a, "%s", self->sched_ep);
        s_arg (&a, "--log-level"); s_arg (&a, "%s", kd_config_str (c, "log-level"));
        if (s_add (self, name, S_KIND_AGGREGATOR, &a, -1))
            return -1;
    }
    return 0;
}

static int
s_start_shards (s_local_t *self)
{
    kd_config_t *c = self->c;
    s_args_t a = { .argc = 0 };
    char name [32];
    for (int i = 0; i < self->shards; i++) {
        snprintf (name, sizeof name, "shard-%d", i);
        s_arg (&a, "%s/kudus-shard", self->bindir);
        const char *shard_host = s_net ? kd_netns_addr (s_net, 2 + (size_t) i) : "127.0.0.1";
        s_arg (&a, "--bind"); s_arg (&a, "tcp://%s:%d", self->relay ? "127.0.0.1" : shard_host, self->port + 100 + i);
        if (self->relay) {
            s_arg (&a, "--advertise"); s_arg (&a, "tcp://%s:%d", shard_host, self->port + 100 + i);
        }
        s_arg (&a, "--scheduler"); s_arg (&a, "%s", self->sched_ep);
        s_arg (&a, "--name"); s_arg (&a, "%s", name);
        s_arg (&a, "--log-level"); s_arg (&a, "%s", kd_config_str (c, "log-level"));
        for (size_t j = 0; j < 2; j++) s_pass (&a, c, s_common [j]);
        //  Each shard checkpoints into its own subdirectory.
        if (*kd_config_str (c, "checkpoint-dir")) {
            s_arg (&a, "--checkpoint-dir"); s_arg (&a, "%s/%s", kd_config_str (c, "checkpoint-dir"), name);
            s_pass (&a, c, "checkpoint-every");
        }
        if (*self->history_dir) {
            s_arg (&a, "--history-file"); s_arg (&a, "%s/%s.jsonl", self->history_dir, name);
        }
        s_pass (&a, c, "max-grad-norm");
        s_pass (&a, c, "grad-norm-action");
        s_pass (&a, c, "no-shm");
        if (s_add (self, name, S_KIND_SHARD, &a, s_net ? 2 + i : -1))
            return -1;
    }
    return 0;
}

//  Our workers, and the evaluator (a kudus-worker that scores and reports,
//  no more).
static int
s_start_workers (s_local_t *self)
{
    kd_config_t *c = self->c;
    s_args_t a = { .argc = 0 };
    char name [32], err [256];
    for (int r = 0; r < self->workers; r++) {
        snprintf (name, sizeof name, "worker-%d", r);
        s_arg (&a, "%s/kudus-worker", self->bindir);
        if (self->aggregators > 0) {
            s_arg (&a, "--scheduler"); s_arg (&a, "tcp://127.0.0.1:%d", self->port + 50 + r / self->fan_in);
        }
        else {
            s_arg (&a, "--scheduler"); s_arg (&a, "%s", self->sched_ep);
        }
        s_arg (&a, "--monitor"); s_arg (&a, "%s", self->intake_ep);
        s_arg (&a, "--name"); s_arg (&a, "%s", name);
        s_arg (&a, "--slowdown"); s_arg (&a, "%g", s_straggler_factor (self->straggler, r, err, sizeof err));
        //  Worker i asks for rank i, so a scenario's rank i is the
        //  scheduler's rank i; and it follows the i-th speed schedule.
        if (s_has_setting ("rank", KD_SVC_WORKER)) {
            s_arg (&a, "--rank"); s_arg (&a, "%d", r);
        }
        char spec [KD_SPEED_MAX_SPEC + 1];
        if (s_speed_spec (self->speeds, r, spec, sizeof spec) == 0 && *spec) {
            s_arg (&a, "--speed"); s_arg (&a, "%s", spec);
        }
        s_arg (&a, "--log-level"); s_arg (&a, "%s", kd_config_str (c, "log-level"));
        static const char *passed [] = {
            "data-dir", "model", "train-file", "features", "delay-ms", "inject-nan-every",
            "wire-dtype", "no-shm", "no-pull-ahead", "hetero", "hetero-period"
        };
        for (size_t j = 0; j < sizeof passed / sizeof passed [0]; j++)
            s_pass (&a, c, passed [j]);
        for (size_t j = 0; j < 2; j++) s_pass (&a, c, s_common [j]);
        if (s_add (self, name, S_KIND_WORKER, &a, s_net ? 2 + self->shards + r : -1))
            return -1;
        //  The scheduler's --min-workers counts it (not the evaluator).
        self->children [self->n_children - 1].awaited = true;
    }
    if (self->evaluator) {
        s_arg (&a, "%s/kudus-worker", self->bindir);
        s_arg (&a, "--evaluator"); s_arg (&a, "true");
        s_arg (&a, "--scheduler"); s_arg (&a, "%s", self->sched_ep);
        s_arg (&a, "--name"); s_arg (&a, "evaluator");
        s_arg (&a, "--log-level"); s_arg (&a, "%s", kd_config_str (c, "log-level"));
        s_pass (&a, c, "data-dir");
        s_pass (&a, c, "eval-interval");
        for (size_t j = 0; j < 2; j++) s_pass (&a, c, s_common [j]);
        if (s_add (self, "evaluator", S_KIND_WORKER, &a, s_net ? 1 : -1))
            return -1;
    }
    return 0;
}

//  Watch the cluster until the scheduler ends the run, a child fails for
//  good, the run stalls or a signal comes: print progress, pass the
//  children's output on, restart what died.  Returns the exit code; the
//  scheduler's wait status goes to *sched_status_p (-1: still running).
static int
s_supervise (s_local_t *self, int *sched_status_p)
{
    s_child_t *children = self->children;
    size_t n_children = self->n_children;
    int rc = 0;
    zsock_t *sub = zsock_new (ZMQ_SUB);
    zsock_set_subscribe (sub, "stats");
    zsock_set_maxmsgsize (sub, 16 << 20);
    kd_curve_client (self->curve, sub);
    zsock_connect (sub, "%s", self->pub_ep);
    uint64_t last_progress = 0, sched_exit_at = 0, workers_gone_at = 0;
    uint64_t version = 0, changed_at = kd_now_ms ();
    bool started = false;           //  the scheduler sent START
    int sched_status = -1;
    const char *failure = NULL;
    while (rc == 0) {
        struct pollfd pfds [S_MAX_CHILDREN + 1];
        size_t map [S_MAX_CHILDREN];
        size_t np = 0;
        for (size_t i = 0; i < n_children; i++)
            if (children [i].fd >= 0) {
                pfds [np] = (struct pollfd) { .fd = children [i].fd, .events = POLLIN };
                map [np++] = i;
            }
        zmq_pollitem_t items [S_MAX_CHILDREN + 1];
        items [0] = (zmq_pollitem_t) { zsock_resolve (sub), 0, ZMQ_POLLIN, 0 };
        for (size_t i = 0; i < np; i++)
            items [i + 1] = (zmq_pollitem_t) { NULL, pfds [i].fd, ZMQ_POLLIN, 0 };
        zmq_poll (items, (int) np + 1, 100);
        for (size_t i = 0; i < np; i++)
            if (items [i + 1].revents)
                s_drain_output (&children [map [i]], self->quiet);
        if (items [0].revents & ZMQ_POLLIN) {
            kd_stream_t *stats = NULL;
            char why [128];
            if (kd_stream_recv (sub, &stats, why, sizeof why) == 0 && kd_now_ms () - last_progress >= 1000) {
                s_progress (stats, &version, &changed_at, &started);
                last_progress = kd_now_ms ();
            }
            kd_stream_destroy (&stats);
        }
        if (s_signal) {
            fprintf (stderr, "kudus local: signal %d, stopping the cluster\n", (int) s_signal);
            rc = 128 + s_signal;
            break;
        }
        s_reap (children, n_children);
        uint64_t now = kd_now_ms ();
        size_t live_workers = 0;
        for (size_t i = 0; i < n_children && !failure; i++) {
            s_child_t *ch = &children [i];
            if (ch->kind == S_KIND_WORKER && (ch->pid > 0 || ch->restart_at))
                live_workers++;
            //  Nothing comes back once the run is over.
            if (ch->restart_at && sched_status >= 0)
                ch->restart_at = 0;
            if (ch->pid == 0 && ch->restart_at && now >= ch->restart_at) {
                if (s_restart (ch, self->quiet, now) != 0) {
                    failure = ch->name;
                    rc = 1;
                }
                continue;
            }
            if (ch->pid != 0 || ch->seen_exit)
                continue;
            ch->seen_exit = true;
            bool clean = WIFEXITED (ch->status) && WEXITSTATUS (ch->status) == 0;
            //  Nothing comes back once the run is over (the scheduler
            //  exited 0 and asked everyone to stop).
            bool restart = self->restart_on && !clean && sched_status < 0
                        && (ch->kind != S_KIND_SHARD || self->shard_can_restart);
            if (ch->kind == S_KIND_SCHEDULER) {
                //  Not restarted: a new scheduler would start its epochs,
                //  its run time and its summary over.
                sched_status = ch->status;
                sched_exit_at = now;
                continue;
            }
            //  Workers exit 0 on STOP; a worker that dies only leaves the
            //  run smaller unless it comes back.
            if (clean || sched_status >= 0 || ch->kind == S_KIND_WORKER) {
                bool back = restart && s_plan_restart (ch, now);
                //  Before START the scheduler waits for every worker to
                //  register: one that never comes back would hang the run.
                //  (Once started, a dead worker only leaves it smaller.)
                if (!back && !clean && sched_status < 0 && ch->awaited && !started && version == 0) {
                    char why [64];
                    s_status_text (ch->status, why, sizeof why);
                    failure = ch->name;
                    fprintf (stderr, "kudus local: %s exited (%s) before the run started, "
                             "and does not come back; stopping\n", ch->name, why);
                    rc = 1;
                }
                continue;
            }
            //  A shard or the monitor that stays dead while the scheduler
            //  runs would stall the run; stop instead of hanging.
            if (restart && s_plan_restart (ch, now))
                continue;
            char why [64];
            s_status_text (ch->status, why, sizeof why);
            failure = ch->name;
            fprintf (stderr, "kudus local: %s exited unexpectedly (%s)%s\n", ch->name, why,
                     ch->kind == S_KIND_SHARD && self->restart_on && !self->shard_can_restart
                     ? ", and it has no replica or checkpoint to come back from; stopping"
                       " (--replicas 2 or --checkpoint-dir keep a run going)" : "");
            rc = 1;
        }
        //  Workers exit 0 on STOP, just before the scheduler's final
        //  evaluation; only a scheduler that outlives them for long is stuck.
        //  External workers are not our children: we cannot see them go.
        if (sched_status < 0 && live_workers == 0 && self->external == 0 && !failure) {
            if (!workers_gone_at)
                workers_gone_at = kd_now_ms ();
            if (kd_now_ms () - workers_gone_at > S_STUCK_MS) {
                fprintf (stderr, "kudus local: every worker exited but the scheduler did not finish\n");
                rc = 1;
            }
        }
        //  A cluster that stopped making progress fails instead of hanging.
        if (sched_status < 0 && version > 0 && kd_now_ms () - changed_at > S_STALL_MS) {
            fprintf (stderr, "kudus local: no new model version for %d s; stopping\n", S_STALL_MS / 1000);
            rc = 1;
        }
        //  A scheduler that failed (a bad setting, a port in use) leaves the
        //  others waiting for ever: stop them now, not after the grace.
        if (sched_status >= 0 && !(WIFEXITED (sched_status) && WEXITSTATUS (sched_status) == 0))
            break;
        if (sched_status >= 0) {
            size_t left = 0;
            for (size_t i = 0; i < n_children; i++)
                left += children [i].pid > 0 && children [i].kind != S_KIND_DASHBOARD
                     && children [i].kind != S_KIND_LINKD && children [i].kind != S_KIND_AGGREGATOR;
            if (left == 0 || kd_now_ms () - sched_exit_at > S_GRACE_MS)
                break;
        }
    }
    zsock_destroy (&sub);
    *sched_status_p = sched_status;
    return rc;
}

//  Stop what still runs, report, and free the run.
static int
s_finish (s_local_t *self, int rc, int sched_status)
{
    s_teardown (self->children, self->n_children, self->quiet);
    for (size_t i = 0; i < self->n_children; i++)
        if (self->children [i].fd >= 0) {
            s_drain_output (&self->children [i], self->quiet);
            close (self->children [i].fd);
        }
    kd_netns_destroy (&s_net);
    kd_history_destroy (&s_history);
    if (rc == 0 && !(WIFEXITED (sched_status) && WEXITSTATUS (sched_status) == 0)) {
        if (WIFEXITED (sched_status))
            fprintf (stderr, "kudus local: scheduler failed (exit code %d; its log is above)\n",
                     WEXITSTATUS (sched_status));
        else
            fprintf (stderr, "kudus local: scheduler failed (status %d)\n", sched_status);
        rc = 1;
    }
    if (rc == 0) {
        unsigned restarts = s_note_restarts (self->summary, self->children, self->n_children);
        if (restarts)
            fprintf (stderr, "kudus local: %u restart(s) during the run (in the summary's \"restarts\")\n",
                     restarts);
        char *text = kd_read_file (self->summary);
        if (text && *text)
            printf ("kudus: summary (%s):\n%s", self->own_summary ? "not saved" : self->summary, text);
        else {
            fprintf (stderr, "kudus local: no summary at %s\n", self->summary);
            rc = 1;
        }
        free (text);
    }
    if (self->own_summary)
        unlink (self->summary);
    kd_curve_destroy (&self->curve);
    if (self->temp_keys)
        kd_curve_keys_remove (self->temp_keys);
    free (self->temp_keys);
    for (size_t i = 0; self->children && i < self->n_children; i++)
        s_args_free (&self->children [i].args);
    free (self->children);
    kd_config_destroy (&self->c);
    return rc;
}

int
kd_local_main (int argc, char **argv)
{
    int rc = 0;
    s_local_t self_s = { .c = kd_config_from_args (KD_SVC_LOCAL, "kudus local", "kudus local", argc, argv, &rc) };
    s_local_t *self = &self_s;
    kd_config_t *c = self->c;
    if (!c)
        return rc;
    self->workers = (int) kd_config_int (c, "workers");
    self->external = (int) kd_config_int (c, "external-workers");
    //  Each key range runs on replicas shard processes.
    self->shards = (int) kd_config_int (c, "shards") * (int) kd_config_int (c, "replicas");
    self->port = (int) kd_config_int (c, "base-port");
    self->quiet = kd_config_bool (c, "quiet");
    self->restart_on = !strcmp (kd_config_str (c, "restart"), "on-failure");
    //  A restarted shard without a replica or a checkpoint would serve a
    //  fresh range: better to stop than to lose its parameters silently.
    self->shard_can_restart = kd_config_int (c, "replicas") > 1 || *kd_config_str (c, "checkpoint-dir");
    self->straggler = kd_config_str (c, "straggler");
    self->speeds = kd_config_str (c, "speeds");
    self->history_dir = kd_config_str (c, "history-dir");
    self->evaluator = kd_config_bool (c, "evaluator");
    //  Barrier aggregators: workers i*fan-in .. go through aggregator i.
    self->fan_in = (int) kd_config_int (c, "fan-in");
    self->aggregators = self->fan_in > 0 ? (self->workers + self->fan_in - 1) / self->fan_in : 0;
    rc = s_check (self);
    if (rc) {
        kd_config_destroy (&self->c);
        return rc;
    }
    if (s_prepare (self))
        return s_finish (self, 1, 0);
    //  Relays first, then the monitor: the scheduler announces it.
    if (s_start_relays (self) || s_start_monitor (self) || s_start_scheduler (self)
    ||  s_start_shards (self) || s_start_workers (self)) {
        fprintf (stderr, "kudus local: cannot start the services: %s\n", strerror (errno));
        return s_finish (self, 1, 0);
    }
    printf ("kudus: local cluster: scheduler %s, monitor %s (stream %s), %d shards, %d workers, "
            "%s/%s\n", self->sched_ep, self->intake_ep, self->pub_ep, self->shards, self->workers,
            kd_config_str (c, "model"), kd_config_str (c, "consistency"));
    if (self->external > 0)
        printf ("kudus: waiting for %d external worker(s): connect them to scheduler %s, "
                "telemetry to %s\n", self->external, self->sched_ep, self->intake_ep);
    fflush (stdout);
    int sched_status = -1;
    rc = s_supervise (self, &sched_status);
    return s_finish (self, rc, sched_status);
}
