/*  kd_netns: an emulated multi-host network for `kudus local --netns`.

    Every node (a service) gets a Linux network namespace of its own,
    "kudus-PID-NODE", with one interface, eth0, on a bridge that lives in a
    switch namespace, "kudus-PID-sw".  The host (the namespace kudus local
    runs in) joins the bridge too, through a veth named "kdPID", so that
    kudus local, `kudus tail` and the dashboard reach the cluster.  All
    addresses are in one /16 of 10.x chosen free on this host.

    Each node's link to the switch is shaped:
    - rate: tbf on both ends of its veth (upload and download);
    - loss: random drops on eth0, both ways (iptables' statistic match);
    - delay: in user space, because this kernel has no netem: every
      listening service sits behind `kudus linkd` (kd_linkd), which holds
      each chunk for the delay of both ends' links before passing it on.

    Clean-up is exact: destroying the network kills whatever still runs in
    its namespaces and deletes them, which deletes every veth with them.  A
    guard process does the same if kudus local dies without cleaning up
    (SIGKILL): it waits for a pipe from kudus local to close.
*/
#ifndef KD_NETNS_H_INCLUDED
#define KD_NETNS_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    double delay_ms;                //  one way, this node to the switch
    double rate_mbit;               //  0: no limit
    double loss;                    //  drop probability per packet, each way
} kd_link_t;

typedef struct _kd_netns_t kd_netns_t;

//  Create the switch, the host's port and n nodes named names [i] (short:
//  "sched", "w3"), with their links.  NULL with a reason in err when a
//  step fails (not root, no ip command, ...); whatever was made is removed.
//  Caller owns return value.
kd_netns_t *
    kd_netns_new (const char *const *names, const kd_link_t *links, size_t n,
                  char *err, size_t err_size);

//  Kill what runs in the namespaces, delete them, and null the caller's
//  pointer.
void
    kd_netns_destroy (kd_netns_t **self_p);

//  Node i's address ("10.213.0.5"), the host's, and node i's namespace.
const char *
    kd_netns_addr (kd_netns_t *self, size_t i);
const char *
    kd_netns_host_addr (kd_netns_t *self);
const char *
    kd_netns_name (kd_netns_t *self, size_t i);
size_t
    kd_netns_size (kd_netns_t *self);
const kd_link_t *
    kd_netns_link (kd_netns_t *self, size_t i);

//  Move the calling process into node i's namespace (in a child, between
//  fork and exec).  Returns 0 or -1.
int
    kd_netns_enter (kd_netns_t *self, size_t i);

//  Parse a link override, "ROLE[:FIRST[-LAST]]=delay:MS,rate:MBIT,loss:P",
//  and apply it to *link when it names role and rank.  Returns 1 when it
//  applied, 0 when not, -1 with a reason in err when it does not parse.
int
    kd_netns_override (const char *spec, const char *role, int rank, kd_link_t *link,
                       char *err, size_t err_size);

//  Take a node's link down or up again, from any process: the network of
//  the kudus local with pid owner, node as it was named ("s0", "w3").  A
//  partition for `kudus chaos`.  Returns 0, or -1 with a reason in err.
int
    kd_netns_set_link (int owner, const char *node, bool up, char *err, size_t err_size);

//  Limit a node's link to rate_mbit both ways (tbf on both ends of its
//  veth), or with rate_mbit 0 lift the limit, whatever it was: slowed
//  links for `kudus chaos`.  Returns 0, or -1 with a reason in err.
int
    kd_netns_set_rate (int owner, const char *node, double rate_mbit, char *err, size_t err_size);

//  Delete what earlier runs left behind: namespaces "kudus-PID-*" whose
//  PID is no longer alive.  Returns the number deleted.
int
    kd_netns_sweep_stale (void);

#endif
