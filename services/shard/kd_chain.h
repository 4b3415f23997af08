/*  kd_chain: a replica's link to its successor in its range's chain.

    With --replicas R > 1 each key range lives on R shard processes in a
    chain (van Renesse and Schneider's chain replication, as the reference
    parameter server uses).  Every write (PUSH, COMMIT, INIT) is applied by
    the replica that receives it, forwarded to its successor, and answered
    upstream only when the successor has answered: so an answer means the
    tail holds the write too.  One connection carries the forwards in
    order, and a successor answers in order, so the answers waiting here
    form a FIFO.  A new successor first gets our whole state (SYNC parts,
    then SYNC end); its SYNC_OK answers everything waiting before it.
*/
#ifndef KD_CHAIN_H_INCLUDED
#define KD_CHAIN_H_INCLUDED
#include "kd_internal.h"

typedef struct _kd_chain_t kd_chain_t;

//  Where an answer goes once the successor has the write.
typedef enum {
    KD_CHAIN_ROUTER,            //  a peer on our ROUTER (routing id set)
    KD_CHAIN_SCHEDULER,         //  the scheduler, over our peer link
    KD_CHAIN_ROUTER_STAGED      //  a PUSH_OK (with its rank) on our ROUTER,
                                //  and STAGED to the scheduler (9.3.1)
} kd_chain_dest_t;

//  A link that sends answers on router or through peer (both borrowed).
kd_chain_t *
    kd_chain_new (zsock_t *router, kd_peer_t *peer, int64_t max_msg);

void
    kd_chain_destroy (kd_chain_t **self_p);

//  Connect to a new successor, or with NULL or "" become the tail.  The
//  tail answers what waits at once: it holds every write it applied.
//  Returns 0, or -1 when the endpoint cannot be connected (we stay tail).
int
    kd_chain_set_successor (kd_chain_t *self, const char *endpoint);

//  Forget what waits without answering it: we were demoted, and answers
//  for writes that may not be replicated must not go out.
void
    kd_chain_discard (kd_chain_t *self);

//  The successor's endpoint, "" when we are the tail.
const char *
    kd_chain_endpoint (kd_chain_t *self);

//  True when a successor is connected.
bool
    kd_chain_linked (kd_chain_t *self);

//  The successor's socket, for the poller; NULL when we are the tail.
zsock_t *
    kd_chain_socket (kd_chain_t *self);

//  A write we applied: send *forward_p (if we have a successor) and answer
//  with *reply_p once it has it; the tail answers at once.  Takes both.
void
    kd_chain_submit (kd_chain_t *self, kd_msg_t **forward_p, kd_msg_t **reply_p,
                     kd_chain_dest_t dest);

//  Send one SYNC part to the successor (no answer waits on it).  Takes it.
void
    kd_chain_send_part (kd_chain_t *self, kd_msg_t **part_p);

//  End a state transfer: send SYNC end with gen, the generation of the
//  CHAIN that ordered it, which the successor's SYNC_OKs echo (so the
//  scheduler can tell one ordered before the chain changed).  Its SYNC_OK
//  answers everything that waited before it.
void
    kd_chain_end_sync (kd_chain_t *self, uint64_t version, uint64_t gen);

//  Read one answer from the successor and release what it answers.
//  Returns 0, or -1 when the successor refused a write (it is not synced,
//  or lost state): the caller sends it our state again.
int
    kd_chain_on_answer (kd_chain_t *self);

//  Answers waiting now, and bytes forwarded so far (data frames).
size_t
    kd_chain_waiting (kd_chain_t *self);
uint64_t
    kd_chain_bytes (kd_chain_t *self);

#endif
