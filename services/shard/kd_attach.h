/*  kd_attach: the workers a shard shares memory with.

    A worker on the shard's host sends SHM with its push region (kd_shm);
    the shard maps it read-only and answers SHM_OK with its own snapshot
    region, which the worker maps read-only.  From then on:
    - a PUSH with "shm": 1 names an offset in the worker's region, and the
      shard copies the values out once, into its staging, before it checks
      them: a worker could change its region after a check, never a copy;
    - a PULL with "shm": 1 is answered by a PULL_OK that names a slot of the
      snapshot and its sequence number, and the worker copies the values
      straight into its buffer (kd_shm_read).
    A worker's mapping is dropped when the worker's process exits or closes
    the region (reap), when it attaches again, or when the shard stops.
*/
#ifndef KD_ATTACH_H_INCLUDED
#define KD_ATTACH_H_INCLUDED

#include "kd_msg.h"
#include <czmq.h>

typedef struct _kd_attach_t kd_attach_t;

//  Attachments for a shard.  off_reason, when not NULL, says why shared
//  memory is off (--no-shm, CURVE): every SHM is then declined with it.
kd_attach_t *
    kd_attach_new (const char *off_reason);

//  Unmap everything and null the caller's pointer.
void
    kd_attach_destroy (kd_attach_t **self_p);

//  Answer an SHM from a worker, for a dense range of n floats: SHM_OK, or
//  an ERROR with "shm": 1 that says why the worker must stay on TCP.
kd_msg_t *
    kd_attach_on_shm (kd_attach_t *self, kd_msg_t *msg, size_t n);

//  The count floats at offset in the push region of the peer with this
//  routing id, bounds checked; NULL with why filled if there is none.
const float *
    kd_attach_values (kd_attach_t *self, zframe_t *routing_id, uint64_t offset, size_t count,
                      char *why, size_t why_size);

//  True when the peer with this routing id is attached.
bool
    kd_attach_has (kd_attach_t *self, zframe_t *routing_id);

//  Make the snapshot hold these n floats, once per generation (a number
//  the shard changes whenever it writes its values), and tell where they
//  are.  -1 when there is no snapshot.
int
    kd_attach_publish (kd_attach_t *self, const float *params, size_t n, uint64_t generation,
                       uint64_t *offset, uint64_t *seq);

//  Unmap the regions of workers whose process has exited, or that no
//  longer hold them (a reconnect under a new routing id, a closed client).
//  Returns how many were dropped.
size_t
    kd_attach_reap (kd_attach_t *self);

//  Workers attached now.
size_t
    kd_attach_count (kd_attach_t *self);

#endif
