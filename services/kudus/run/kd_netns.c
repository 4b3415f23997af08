/*  kd_netns: an emulated multi-host network (see kd_netns.h).

    Set-up runs iproute2's ip and tc, and iptables, one command at a time,
    so that a failure names the step that failed.
*/
#define _GNU_SOURCE
#include "kd_netns.h"
#include "kd_spawn.h"
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S_NETNS_DIR   "/var/run/netns"
#define S_MAX_NODES   1000              //  nodes in one network
#define S_NAME_MAX    64

struct _kd_netns_t {
    int pid;                            //  kudus local's pid, in every name
    int octet;                          //  the network is 10.octet.0.0/16
    size_t n;
    char (*names) [S_NAME_MAX];         //  node i's namespace
    char (*addrs) [20];                 //  node i's address
    kd_link_t *links;
    char host_addr [20];
    char switch_name [S_NAME_MAX];
    char host_port [16];                //  the host's veth, "kdPID"
    pid_t guard;                        //  the clean-up guard
    int guard_fd;                       //  its pipe; closing it wakes it
};

//  Run a command, its words split on spaces, and return its exit code
//  (127 when it cannot run).  Its output goes to out (may be NULL).
static int
s_run_v (char *out, size_t out_size, const char *fmt, va_list ap)
{
    char line [1024];
    vsnprintf (line, sizeof line, fmt, ap);
    char *argv [64];
    int argc = 0;
    for (char *tok = strtok (line, " "); tok && argc < 63; tok = strtok (NULL, " "))
        argv [argc++] = tok;
    argv [argc] = NULL;
    int fds [2];
    if (pipe2 (fds, O_CLOEXEC))
        return 127;
    kd_spawn_t how = KD_SPAWN_INIT;
    how.argv = (const char *const *) argv;
    how.search = true;
    how.out_fd = how.err_fd = fds [1];
    pid_t pid = kd_spawn (&how);
    if (pid < 0) {
        close (fds [0]);
        close (fds [1]);
        return 127;
    }
    close (fds [1]);
    size_t len = 0;
    char buf [4096];
    ssize_t got;
    while ((got = read (fds [0], buf, sizeof buf)) > 0)
        if (out && len + 1 < out_size) {
            size_t take = (size_t) got < out_size - 1 - len ? (size_t) got : out_size - 1 - len;
            memcpy (out + len, buf, take);
            len += take;
        }
    if (out && out_size)
        out [len] = 0;
    close (fds [0]);
    int status = 0;
    while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
        ;
    return WIFEXITED (status) ? WEXITSTATUS (status) : 127;
}

static int
s_run (char *out, size_t out_size, const char *fmt, ...)
{
    va_list ap;
    va_start (ap, fmt);
    int rc = s_run_v (out, out_size, fmt, ap);
    va_end (ap);
    return rc;
}

//  Run a set-up step; on failure, say which and why.
static int
s_step (char *err, size_t err_size, const char *fmt, ...)
{
    char out [512] = "";
    va_list ap;
    va_start (ap, fmt);
    char cmd [1024];
    va_list copy;
    va_copy (copy, ap);
    vsnprintf (cmd, sizeof cmd, fmt, copy);
    va_end (copy);
    int rc = s_run_v (out, sizeof out, fmt, ap);
    va_end (ap);
    if (rc != 0) {
        size_t len = strlen (out);
        while (len && (out [len - 1] == '\n' || out [len - 1] == ' '))
            out [--len] = 0;
        snprintf (err, err_size, "netns: '%s' failed (%d): %s", cmd, rc, *out ? out : "no output");
        return -1;
    }
    return 0;
}

//  Kill every process in a namespace, then delete it.
static void
s_delete_ns (const char *name)
{
    for (int round = 0; round < 20; round++) {
        char pids [8192] = "";
        if (s_run (pids, sizeof pids, "ip netns pids %s", name) != 0 || !*pids)
            break;
        for (char *tok = strtok (pids, "\n"); tok; tok = strtok (NULL, "\n")) {
            int pid = atoi (tok);
            if (pid > 1)
                kill (pid, round < 10 ? SIGTERM : SIGKILL);
        }
        usleep (100 * 1000);
    }
    s_run (NULL, 0, "ip netns del %s", name);
}

//  Delete every namespace whose name starts with prefix, up to 256 per
//  scan.  Returns how many.
static int
s_delete_scan (const char *prefix)
{
    int deleted = 0;
    DIR *dir = opendir (S_NETNS_DIR);
    if (!dir)
        return 0;
    char names [256][S_NAME_MAX];
    int n = 0;
    struct dirent *e;
    while ((e = readdir (dir)) && n < 256) {
        size_t len = strlen (e->d_name);
        if (!strncmp (e->d_name, prefix, strlen (prefix)) && len < S_NAME_MAX)
            memcpy (names [n++], e->d_name, len + 1);
    }
    closedir (dir);
    //  Nodes first, the switch last: its bridge outlives their links.
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            size_t len = strlen (names [i]);
            bool is_switch = len >= 3 && !strcmp (names [i] + len - 3, "-sw");
            if (is_switch == (pass == 1)) {
                s_delete_ns (names [i]);
                deleted++;
            }
        }
    return deleted;
}

//  Delete them all: scan again until a scan finds none.
static int
s_delete_prefix (const char *prefix)
{
    int deleted = 0, round;
    //  Bounded: a namespace that cannot be deleted must not spin us.
    for (int scans = 0; scans < 8 && (round = s_delete_scan (prefix)) > 0; scans++)
        deleted += round;
    return deleted;
}

int
kd_netns_sweep_stale (void)
{
    DIR *dir = opendir (S_NETNS_DIR);
    if (!dir)
        return 0;
    int pids [256], n = 0;
    struct dirent *e;
    while ((e = readdir (dir)) && n < 256) {
        int pid = 0;
        if (sscanf (e->d_name, "kudus-%d-", &pid) == 1 && pid > 0
        &&  kill (pid, 0) != 0 && errno == ESRCH) {
            bool seen = false;
            for (int i = 0; i < n; i++)
                seen = seen || pids [i] == pid;
            if (!seen)
                pids [n++] = pid;
        }
    }
    closedir (dir);
    int deleted = 0;
    for (int i = 0; i < n; i++) {
        char prefix [32];
        snprintf (prefix, sizeof prefix, "kudus-%d-", pids [i]);
        deleted += s_delete_prefix (prefix);
    }
    return deleted;
}

//  The guard: waits for kudus local's end of the pipe to close (clean exit
//  or SIGKILL), then removes whatever of this run is left.
static void
s_guard (int fd, int owner)
{
    setsid ();
    //  Hold nothing of kudus local's: a reader of its output must see EOF.
    for (int other = 0; other < 1024; other++)
        if (other != fd)
            close (other);
    int null = open ("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2 (null, STDIN_FILENO);
        dup2 (null, STDOUT_FILENO);
        dup2 (null, STDERR_FILENO);
    }
    signal (SIGINT, SIG_IGN);
    signal (SIGTERM, SIG_IGN);
    signal (SIGHUP, SIG_IGN);
    char c;
    while (read (fd, &c, 1) != 0 && errno == EINTR)
        ;
    //  Give the services their SIGTERM (PR_SET_PDEATHSIG) a moment.
    usleep (300 * 1000);
    char prefix [32];
    snprintf (prefix, sizeof prefix, "kudus-%d-", owner);
    s_delete_prefix (prefix);
    char port [16];
    snprintf (port, sizeof port, "kd%d", owner);
    s_run (NULL, 0, "ip link del %s", port);
    _exit (0);
}

//  A /16 of 10.x that no address or route of this host uses.
static int
s_free_octet (void)
{
    char addrs [65536] = "", routes [65536] = "";
    s_run (addrs, sizeof addrs, "ip -4 -o addr show");
    s_run (routes, sizeof routes, "ip -4 route show");
    for (int octet = 200; octet < 255; octet++) {
        char needle [16];
        snprintf (needle, sizeof needle, "10.%d.", octet);
        if (!strstr (addrs, needle) && !strstr (routes, needle))
            return octet;
    }
    return -1;
}

static void
s_addr (int octet, size_t i, char *out, size_t size)
{
    //  The host is .0.1; node i is the (i + 2)th address.
    snprintf (out, size, "10.%d.%zu.%zu", octet, (i + 2) / 256, (i + 2) % 256);
}

//  tbf at rate_mbit on one device of one namespace.
static int
s_shape (const char *ns, const char *dev, double rate_mbit, char *err, size_t err_size)
{
    double bytes_per_s = rate_mbit * 1e6 / 8;
    //  A burst of 2 ms at the rate, and at least a few full frames: a
    //  larger one would let a whole message through unshaped.
    long burst = (long) (bytes_per_s / 500);
    if (burst < 16 * 1024)
        burst = 16 * 1024;
    return s_step (err, err_size, "tc -n %s qdisc replace dev %s root tbf rate %.0fkbit burst %ld latency 50ms",
                   ns, dev, rate_mbit * 1000, burst);
}

kd_netns_t *
kd_netns_new (const char *const *names, const kd_link_t *links, size_t n, char *err, size_t err_size)
{
    if (geteuid () != 0) {
        snprintf (err, err_size, "netns: network namespaces need root (run as root, or without --netns)");
        return NULL;
    }
    if (n == 0 || n > S_MAX_NODES) {
        snprintf (err, err_size, "netns: %zu nodes (1..%d)", n, S_MAX_NODES);
        return NULL;
    }
    if (s_run (NULL, 0, "ip -V") != 0 || s_run (NULL, 0, "tc -V") != 0) {
        snprintf (err, err_size, "netns: the ip and tc commands are missing (Debian package iproute2)");
        return NULL;
    }
    kd_netns_sweep_stale ();
    kd_netns_t *self = (kd_netns_t *) calloc (1, sizeof *self);
    assert (self);
    self->pid = (int) getpid ();
    self->n = n;
    self->names = calloc (n, sizeof *self->names);
    self->addrs = calloc (n, sizeof *self->addrs);
    self->links = calloc (n, sizeof *self->links);
    assert (self->names && self->addrs && self->links);
    self->guard_fd = -1;
    //  Two runs starting together must not pick the same network: hold a
    //  lock from the choice until the host's address is set.
    int lock = open ("/run/lock/kudus-netns.lock", O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (lock >= 0)
        flock (lock, LOCK_EX);
    self->octet = s_free_octet ();
    if (self->octet < 0) {
        snprintf (err, err_size, "netns: no free 10.x.0.0/16 network on this host");
        if (lock >= 0)
            close (lock);
        kd_netns_destroy (&self);
        return NULL;
    }
    snprintf (self->switch_name, sizeof self->switch_name, "kudus-%d-sw", self->pid);
    snprintf (self->host_port, sizeof self->host_port, "kd%d", self->pid);
    snprintf (self->host_addr, sizeof self->host_addr, "10.%d.0.1", self->octet);
    for (size_t i = 0; i < n; i++) {
        snprintf (self->names [i], S_NAME_MAX, "kudus-%d-%s", self->pid, names [i]);
        s_addr (self->octet, i, self->addrs [i], sizeof self->addrs [i]);
        self->links [i] = links [i];
    }
    //  The guard first, so that even a half-built network is removed.
    int fds [2];
    if (pipe2 (fds, O_CLOEXEC)) {
        snprintf (err, err_size, "netns: pipe: %s", strerror (errno));
        if (lock >= 0)
            close (lock);
        kd_netns_destroy (&self);
        return NULL;
    }
    self->guard = fork ();
    if (self->guard == 0) {
        close (fds [1]);
        s_guard (fds [0], self->pid);
    }
    close (fds [0]);
    self->guard_fd = fds [1];
    if (self->guard < 0) {
        snprintf (err, err_size, "netns: cannot start the clean-up guard: %s", strerror (errno));
        if (lock >= 0)
            close (lock);
        kd_netns_destroy (&self);
        return NULL;
    }

    const char *sw = self->switch_name;
    int rc = s_step (err, err_size, "ip netns add %s", sw)
          || s_step (err, err_size, "ip -n %s link set lo up", sw)
          || s_step (err, err_size, "ip -n %s link add br0 type bridge", sw)
          || s_step (err, err_size, "ip -n %s link set br0 up", sw)
          || s_step (err, err_size, "ip link add %s type veth peer name host netns %s", self->host_port, sw)
          || s_step (err, err_size, "ip -n %s link set host master br0 up", sw)
          || s_step (err, err_size, "ip addr add %s/16 dev %s", self->host_addr, self->host_port)
          || s_step (err, err_size, "ip link set %s up", self->host_port);
    if (lock >= 0)
        close (lock);               //  the network is ours now, or given up
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *ns = self->names [i];
        const kd_link_t *l = &self->links [i];
        rc = s_step (err, err_size, "ip netns add %s", ns)
          || s_step (err, err_size, "ip -n %s link set lo up", ns)
          || s_step (err, err_size, "ip link add p%zu netns %s type veth peer name eth0 netns %s", i, sw, ns)
          || s_step (err, err_size, "ip -n %s link set p%zu master br0 up", sw, i)
          || s_step (err, err_size, "ip -n %s addr add %s/16 dev eth0", ns, self->addrs [i])
          || s_step (err, err_size, "ip -n %s link set eth0 up", ns);
        if (rc == 0 && l->rate_mbit > 0) {
            char port [32];
            snprintf (port, sizeof port, "p%zu", i);
            rc = s_shape (ns, "eth0", l->rate_mbit, err, err_size)
              || s_shape (sw, port, l->rate_mbit, err, err_size);
        }
        if (rc == 0 && l->loss > 0)
            rc = s_step (err, err_size, "ip netns exec %s iptables -w -A INPUT -i eth0 -m statistic "
                         "--mode random --probability %.6f -j DROP", ns, l->loss)
              || s_step (err, err_size, "ip netns exec %s iptables -w -A OUTPUT -o eth0 -m statistic "
                         "--mode random --probability %.6f -j DROP", ns, l->loss);
    }
    if (rc) {
        kd_netns_destroy (&self);
        return NULL;
    }
    return self;
}

void
kd_netns_destroy (kd_netns_t **self_p)
{
    assert (self_p);
    kd_netns_t *self = *self_p;
    if (!self)
        return;
    char prefix [32];
    snprintf (prefix, sizeof prefix, "kudus-%d-", self->pid);
    s_delete_prefix (prefix);
    s_run (NULL, 0, "ip link del %s", self->host_port);
    if (self->guard_fd >= 0) {
        close (self->guard_fd);
        if (self->guard > 0)
            while (waitpid (self->guard, NULL, 0) < 0 && errno == EINTR)
                ;
    }
    free (self->names);
    free (self->addrs);
    free (self->links);
    free (self);
    *self_p = NULL;
}

const char *
kd_netns_addr (kd_netns_t *self, size_t i)
{
    assert (self && i < self->n);
    return self->addrs [i];
}

const char *
kd_netns_host_addr (kd_netns_t *self)
{
    assert (self);
    return self->host_addr;
}

const char *
kd_netns_name (kd_netns_t *self, size_t i)
{
    assert (self && i < self->n);
    return self->names [i];
}

size_t
kd_netns_size (kd_netns_t *self)
{
    assert (self);
    return self->n;
}

const kd_link_t *
kd_netns_link (kd_netns_t *self, size_t i)
{
    assert (self && i < self->n);
    return &self->links [i];
}

int
kd_netns_enter (kd_netns_t *self, size_t i)
{
    assert (self && i < self->n);
    char path [128];
    snprintf (path, sizeof path, S_NETNS_DIR "/%s", self->names [i]);
    int fd = open (path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = setns (fd, CLONE_NEWNET);
    close (fd);
    return rc;
}

int
kd_netns_set_link (int owner, const char *node, bool up, char *err, size_t err_size)
{
    return s_step (err, err_size, "ip -n kudus-%d-%s link set eth0 %s", owner, node, up ? "up" : "down");
}

//  Lift a device's tbf.  0 when none is left, also when there was none:
//  a heal retried after half of it worked must not fail on that half.
static int
s_unshape (const char *ns, const char *dev, char *err, size_t err_size)
{
    char out [1024];
    if (s_run (out, sizeof out, "tc -n %s qdisc show dev %s", ns, dev) == 0 && !strstr (out, "tbf"))
        return 0;
    return s_step (err, err_size, "tc -n %s qdisc del dev %s root", ns, dev);
}

int
kd_netns_set_rate (int owner, const char *node, double rate_mbit, char *err, size_t err_size)
{
    char ns [64], sw [64], port [32] = "";
    snprintf (ns, sizeof ns, "kudus-%d-%s", owner, node);
    snprintf (sw, sizeof sw, "kudus-%d-sw", owner);
    //  The switch's end of the node's veth shapes what the node receives:
    //  "N: eth0@ifK: ..." names that end's index, K, in the switch, whose
    //  one-line listing has a line of about 200 bytes a node.
    size_t out_size = 512 * (S_MAX_NODES + 8);
    char *out = (char *) malloc (out_size);
    assert (out);
    const char *at = s_run (out, out_size, "ip -n %s -o link show eth0", ns) == 0 ? strstr (out, "@if") : NULL;
    int peer = at ? atoi (at + 3) : 0;
    if (peer > 0 && s_run (out, out_size, "ip -n %s -o link show", sw) == 0)
        for (char *save = NULL, *line = strtok_r (out, "\n", &save); line; line = strtok_r (NULL, "\n", &save)) {
            char name [32];
            int index;
            if (sscanf (line, "%d: %31[^@:]", &index, name) == 2 && index == peer)
                snprintf (port, sizeof port, "%s", name);
        }
    free (out);
    if (!*port) {
        snprintf (err, err_size, "netns: no link of node '%s' in the network of pid %d", node, owner);
        return -1;
    }
    if (rate_mbit > 0) {
        if (s_shape (ns, "eth0", rate_mbit, err, err_size))
            return -1;
        //  Both ends or neither: a half-shaped link would outlive the fault.
        if (s_shape (sw, port, rate_mbit, err, err_size)) {
            char ignored [64];
            s_unshape (ns, "eth0", ignored, sizeof ignored);
            return -1;
        }
        return 0;
    }
    int rc = s_unshape (ns, "eth0", err, err_size);
    return s_unshape (sw, port, err, err_size) || rc ? -1 : 0;
}

int
kd_netns_override (const char *spec, const char *role, int rank, kd_link_t *link,
                   char *err, size_t err_size)
{
    char who [64];
    const char *eq = strchr (spec, '=');
    if (!eq || (size_t) (eq - spec) >= sizeof who) {
        snprintf (err, err_size, "link override '%s': expected ROLE[:FIRST[-LAST]]=delay:MS,rate:MBIT,loss:P", spec);
        return -1;
    }
    memcpy (who, spec, (size_t) (eq - spec));
    who [eq - spec] = 0;
    char *colon = strchr (who, ':');
    long first = -1, last = -1;
    if (colon) {
        *colon = 0;
        char *end = NULL;
        first = strtol (colon + 1, &end, 10);
        bool digits = end != colon + 1;
        last = first;
        if (digits && *end == '-') {
            char *from = end + 1;
            last = strtol (from, &end, 10);
            digits = end != from;
        }
        if (!digits || *end || first < 0 || last < first) {
            snprintf (err, err_size, "link override '%s': ranks must be FIRST or FIRST-LAST", spec);
            return -1;
        }
    }
    static const char *roles [] = { "scheduler", "monitor", "shard", "worker" };
    bool known = false;
    for (size_t i = 0; i < 4; i++)
        known = known || !strcmp (who, roles [i]);
    if (!known) {
        snprintf (err, err_size, "link override '%s': role must be scheduler, monitor, shard or worker", spec);
        return -1;
    }
    kd_link_t parsed = *link;
    char values [256];
    snprintf (values, sizeof values, "%s", eq + 1);
    char *save = NULL;
    for (char *tok = strtok_r (values, ",", &save); tok; tok = strtok_r (NULL, ",", &save)) {
        char *sep = strchr (tok, ':');
        char *end = NULL;
        double v = sep ? strtod (sep + 1, &end) : -1;
        if (!sep || !end || *end || end == sep + 1 || v < 0) {
            snprintf (err, err_size, "link override '%s': '%s' is not KEY:VALUE", spec, tok);
            return -1;
        }
        *sep = 0;
        if (!strcmp (tok, "delay") && v <= 10000)
            parsed.delay_ms = v;
        else
        if (!strcmp (tok, "rate") && v <= 100000)
            parsed.rate_mbit = v;
        else
        if (!strcmp (tok, "loss") && v < 1)
            parsed.loss = v;
        else {
            snprintf (err, err_size, "link override '%s': '%s' must be delay (0..10000 ms), "
                      "rate (0..100000 Mbit/s) or loss (0..1)", spec, tok);
            return -1;
        }
    }
    if (strcmp (who, role) || (first >= 0 && (rank < first || rank > last)))
        return 0;
    *link = parsed;
    return 1;
}
