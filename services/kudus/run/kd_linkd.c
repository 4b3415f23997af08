/*  kd_linkd: `kudus linkd`, link delay in user space for `kudus local
    --netns` (this kernel has no netem).

    It runs in a node's namespace in front of the node's listening services:
    it accepts on the node's address and forwards each connection to the
    service on the namespace's loopback.  Every chunk it reads, either way,
    is held for the one-way delay of the path, this node's link plus the
    peer's (found by the peer's address), then written on.  Reading goes on
    while chunks wait, so a delayed link keeps its throughput; a direction
    with more than S_MAX_QUEUED bytes waiting stops reading, so TCP's flow
    control still reaches the sender.

        kudus linkd --forward 10.213.0.2:7000=127.0.0.1:7000 --self-delay-ms 5
                    --peer-delay 10.213.0.7=20 ...
*/
#define _GNU_SOURCE
#include "kd_cli.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#define S_MAX_FORWARDS  16
#define S_MAX_PEERS     1024
#define S_MAX_CONNS     1024
#define S_CHUNK         65536
#define S_MAX_QUEUED    (8u << 20)

typedef struct s_chunk {
    struct s_chunk *next;
    double due_ms;              //  when it may be written on
    size_t len, off;
    char data [];
} s_chunk_t;

//  One direction of a connection.
typedef struct {
    s_chunk_t *head, *tail;
    size_t queued;              //  bytes waiting
    bool eof;                   //  the reader saw end of stream
    bool shut;                  //  and the writer passed it on
} s_flow_t;

typedef struct {
    int a;                      //  the accepted peer
    int b;                      //  the service
    bool connecting;            //  b's connect is in progress
    double delay_ms;            //  one way, both links
    int pidx;                   //  its entries in this round's poll, or -1
    s_flow_t up;                //  a -> b
    s_flow_t down;              //  b -> a
} s_conn_t;

typedef struct {
    int fd;
    struct sockaddr_in target;
} s_listener_t;

static double
s_now (void)
{
    return kd_now_msf ();
}

static int
s_parse_addr (const char *text, struct sockaddr_in *addr)
{
    char host [64];
    const char *colon = strrchr (text, ':');
    if (!colon || (size_t) (colon - text) >= sizeof host)
        return -1;
    memcpy (host, text, (size_t) (colon - text));
    host [colon - text] = 0;
    char *end = NULL;
    long port = strtol (colon + 1, &end, 10);
    if (!end || *end || port <= 0 || port > 65535)
        return -1;
    memset (addr, 0, sizeof *addr);
    addr->sin_family = AF_INET;
    addr->sin_port = htons ((uint16_t) port);
    return inet_pton (AF_INET, host, &addr->sin_addr) == 1 ? 0 : -1;
}

static void
s_flow_free (s_flow_t *f)
{
    while (f->head) {
        s_chunk_t *next = f->head->next;
        free (f->head);
        f->head = next;
    }
    f->tail = NULL;
    f->queued = 0;
}

static void
s_conn_close (s_conn_t *c)
{
    close (c->a);
    close (c->b);
    s_flow_free (&c->up);
    s_flow_free (&c->down);
    c->a = c->b = -1;
}

//  Read what fd has into flow.  -1 on error.
static int
s_read (int fd, s_flow_t *f, double delay_ms)
{
    //  Read first, then allocate what was read: many small messages held
    //  for a long delay must not each cost a whole chunk.
    static char buf [S_CHUNK];
    ssize_t n = read (fd, buf, S_CHUNK);
    if (n <= 0) {
        if (n == 0) {
            f->eof = true;
            return 0;
        }
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    }
    s_chunk_t *ch = (s_chunk_t *) malloc (sizeof *ch + (size_t) n);
    assert (ch);
    memcpy (ch->data, buf, (size_t) n);
    ch->next = NULL;
    ch->len = (size_t) n;
    ch->off = 0;
    ch->due_ms = s_now () + delay_ms;
    if (f->tail)
        f->tail->next = ch;
    else
        f->head = ch;
    f->tail = ch;
    f->queued += (size_t) n;
    return 0;
}

//  Write the chunks that are due.  -1 on error.
static int
s_write (int fd, s_flow_t *f, double now)
{
    while (f->head && f->head->due_ms <= now) {
        s_chunk_t *ch = f->head;
        ssize_t n = write (fd, ch->data + ch->off, ch->len - ch->off);
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -1;
        ch->off += (size_t) n;
        f->queued -= (size_t) n;
        if (ch->off < ch->len)
            return 0;
        f->head = ch->next;
        if (!f->head)
            f->tail = NULL;
        free (ch);
    }
    //  End of stream passes on once everything before it has.
    if (f->eof && !f->head && !f->shut) {
        shutdown (fd, SHUT_WR);
        f->shut = true;
    }
    return 0;
}

//  No Nagle, and CUBIC whatever the host's default: BBR sees the near-zero
//  kernel round trip of a link whose delay is held here, overshoots the
//  link's tbf queue and retransmits most of what it sends.
static void
s_tune (int fd)
{
    int one = 1;
    setsockopt (fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    static const char cubic [] = "cubic";
    setsockopt (fd, IPPROTO_TCP, TCP_CONGESTION, cubic, sizeof cubic - 1);
}

int
kd_linkd_main (int argc, char **argv)
{
    int rc = 0;
    kd_config_t *config = kd_config_from_args (KD_SVC_LINKD, "kudus linkd", "kudus linkd",
                                               argc, argv, &rc);
    if (!config)
        return rc;
    double self_delay = kd_config_double (config, "self-delay-ms");
    //  Peers' delays, by address.
    struct { struct in_addr addr; double delay_ms; } peers [S_MAX_PEERS];
    size_t n_peers = 0;
    char *list = strdup (kd_config_str (config, "peer-delay"));
    char *save = NULL;
    for (char *tok = strtok_r (list, ",", &save); tok; tok = strtok_r (NULL, ",", &save)) {
        char *eq = strchr (tok, '=');
        char *end = NULL;
        if (eq)
            *eq = 0;
        double ms = eq ? strtod (eq + 1, &end) : -1;
        if (!eq || !end || *end || ms < 0 || n_peers == S_MAX_PEERS
        ||  inet_pton (AF_INET, tok, &peers [n_peers].addr) != 1) {
            fprintf (stderr, "kudus linkd: setting 'peer-delay': '%s' is not IP=MS\n", tok);
            free (list);
            kd_config_destroy (&config);
            return 2;
        }
        peers [n_peers++].delay_ms = ms;
    }
    free (list);
    s_listener_t listeners [S_MAX_FORWARDS];
    size_t n_listeners = 0;
    list = strdup (kd_config_str (config, "forward"));
    for (char *tok = strtok_r (list, ",", &save); tok; tok = strtok_r (NULL, ",", &save)) {
        char *eq = strchr (tok, '=');
        struct sockaddr_in listen_addr;
        if (eq)
            *eq = 0;
        if (!eq || n_listeners == S_MAX_FORWARDS || s_parse_addr (tok, &listen_addr)
        ||  s_parse_addr (eq + 1, &listeners [n_listeners].target)) {
            fprintf (stderr, "kudus linkd: setting 'forward': '%s' is not IP:PORT=IP:PORT\n", tok);
            rc = 2;
            break;
        }
        int fd = socket (AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt (fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (fd < 0 || bind (fd, (struct sockaddr *) &listen_addr, sizeof listen_addr) || listen (fd, 128)) {
            fprintf (stderr, "kudus linkd: cannot listen on %s: %s\n", tok, strerror (errno));
            if (fd >= 0)
                close (fd);
            rc = 1;
            break;
        }
        listeners [n_listeners++].fd = fd;
    }
    free (list);
    if (rc == 0 && n_listeners == 0) {
        fprintf (stderr, "kudus linkd: nothing to forward (--forward LISTEN=TARGET)\n");
        rc = 2;
    }
    s_conn_t *conns = (s_conn_t *) calloc (S_MAX_CONNS, sizeof (s_conn_t));
    for (size_t i = 0; i < S_MAX_CONNS; i++)
        conns [i].a = conns [i].b = -1;
    struct pollfd *fds = (struct pollfd *) calloc (S_MAX_FORWARDS + 2 * S_MAX_CONNS, sizeof (struct pollfd));
    signal (SIGPIPE, SIG_IGN);
    if (rc == 0)
        printf ("kudus linkd: %zu forward(s), own link delay %.2f ms, %zu peer(s)\n",
                n_listeners, self_delay, n_peers);
    fflush (stdout);
    //  SIGTERM ends it (the default action): the kernel closes every socket.
    while (rc == 0) {
        double now = s_now ();
        double next_due = now + 1000;
        size_t nfds = 0;
        for (size_t i = 0; i < n_listeners; i++)
            fds [nfds++] = (struct pollfd) { listeners [i].fd, POLLIN, 0 };
        for (size_t i = 0; i < S_MAX_CONNS; i++) {
            s_conn_t *c = &conns [i];
            if (c->a < 0)
                continue;
            short ea = 0, eb = 0;
            if (!c->up.eof && c->up.queued < S_MAX_QUEUED)
                ea |= POLLIN;
            if (c->connecting)
                eb |= POLLOUT;
            else {
                if (!c->down.eof && c->down.queued < S_MAX_QUEUED)
                    eb |= POLLIN;
                if (c->up.head && c->up.head->due_ms <= now)
                    eb |= POLLOUT;
            }
            if (c->down.head && c->down.head->due_ms <= now)
                ea |= POLLOUT;
            if (c->up.head && c->up.head->due_ms > now && c->up.head->due_ms < next_due)
                next_due = c->up.head->due_ms;
            if (c->down.head && c->down.head->due_ms > now && c->down.head->due_ms < next_due)
                next_due = c->down.head->due_ms;
            c->pidx = (int) nfds;
            fds [nfds++] = (struct pollfd) { c->a, ea, 0 };
            fds [nfds++] = (struct pollfd) { c->b, eb, 0 };
        }
        int timeout = (int) (next_due - now) + 1;
        if (poll (fds, nfds, timeout < 0 ? 0 : timeout) < 0 && errno != EINTR) {
            fprintf (stderr, "kudus linkd: poll: %s\n", strerror (errno));
            rc = 1;
            break;
        }
        for (size_t i = 0; i < n_listeners; i++) {
            if (!(fds [i].revents & POLLIN))
                continue;
            struct sockaddr_in peer;
            socklen_t len = sizeof peer;
            int a = accept4 (listeners [i].fd, (struct sockaddr *) &peer, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
            if (a < 0)
                continue;
            size_t slot = 0;
            while (slot < S_MAX_CONNS && conns [slot].a >= 0)
                slot++;
            int b = slot < S_MAX_CONNS ? socket (AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0) : -1;
            if (b < 0 || (connect (b, (struct sockaddr *) &listeners [i].target, sizeof listeners [i].target)
                          && errno != EINPROGRESS)) {
                //  No room, or the service is not there: the peer sees a close.
                close (a);
                if (b >= 0)
                    close (b);
                continue;
            }
            s_tune (a);
            s_tune (b);
            s_conn_t *c = &conns [slot];
            memset (c, 0, sizeof *c);
            c->a = a;
            c->b = b;
            c->connecting = true;
            c->pidx = -1;
            c->delay_ms = self_delay;
            for (size_t p = 0; p < n_peers; p++)
                if (peers [p].addr.s_addr == peer.sin_addr.s_addr)
                    c->delay_ms += peers [p].delay_ms;
        }
        now = s_now ();
        for (size_t i = 0; i < S_MAX_CONNS; i++) {
            s_conn_t *c = &conns [i];
            if (c->a < 0 || c->pidx < 0)
                continue;
            short ra = fds [c->pidx].revents, rb = fds [c->pidx + 1].revents;
            //  An error or a reset on either side ends the connection; without
            //  this, a side at end of stream would be polled in a busy loop.
            bool failed = (ra & POLLERR) || (rb & POLLERR)
                       || ((ra & POLLHUP) && c->up.eof) || ((rb & POLLHUP) && !c->connecting && c->down.eof);
            if (c->connecting && (rb & (POLLOUT | POLLERR | POLLHUP))) {
                int soerr = 0;
                socklen_t sl = sizeof soerr;
                getsockopt (c->b, SOL_SOCKET, SO_ERROR, &soerr, &sl);
                failed = failed || soerr != 0;
                c->connecting = false;
                rb &= ~POLLOUT;
            }
            if (!failed && (ra & (POLLIN | POLLHUP | POLLERR)) && !c->up.eof)
                failed = s_read (c->a, &c->up, c->delay_ms) != 0;
            if (!failed && !c->connecting && (rb & (POLLIN | POLLHUP | POLLERR)) && !c->down.eof)
                failed = s_read (c->b, &c->down, c->delay_ms) != 0;
            if (!failed && !c->connecting)
                failed = s_write (c->b, &c->up, now) != 0 || s_write (c->a, &c->down, now) != 0;
            if (failed || (c->up.shut && c->down.shut))
                s_conn_close (c);
        }
    }
    for (size_t i = 0; i < S_MAX_CONNS; i++)
        if (conns [i].a >= 0)
            s_conn_close (&conns [i]);
    for (size_t i = 0; i < n_listeners; i++)
        close (listeners [i].fd);
    free (conns);
    free (fds);
    kd_config_destroy (&config);
    return rc;
}
