/*  kd_shmlink: a worker's shared memory with one shard on its host.

    The worker makes a push region of `slots` slices of the shard's range
    and offers it with SHM; the shard answers SHM_OK with its snapshot
    region, which the link maps read-only.  Then a PUSH names a slot's
    offset instead of carrying a data frame, and a PULL_OK names a snapshot
    slot and sequence number that kd_shmlink_read copies from.  The client
    (kd_client) and the benchmarks use it; see kd_shm for the regions.
*/
#ifndef KD_SHMLINK_H_INCLUDED
#define KD_SHMLINK_H_INCLUDED

#include "kd_msg.h"

typedef struct _kd_shmlink_t kd_shmlink_t;

//  A link for a range of n floats with slots push slots.  NULL when this
//  host cannot share memory (logged at debug level).
kd_shmlink_t *
    kd_shmlink_new (size_t n, size_t slots);

//  Unmap both regions and null the caller's pointer.  Safe on NULL.
void
    kd_shmlink_destroy (kd_shmlink_t **self_p);

//  The SHM request that offers our push region.
kd_msg_t *
    kd_shmlink_offer (kd_shmlink_t *self);

//  Take the shard's answer: 0 when an SHM_OK's region is mapped; -1 with
//  why filled for an ERROR or a region that cannot be mapped.
int
    kd_shmlink_accept (kd_shmlink_t *self, kd_msg_t *reply, char *why, size_t why_size);

//  Push slot i (< slots): where to write n floats, and its offset on the wire.
float *
    kd_shmlink_slot (kd_shmlink_t *self, size_t i);
uint64_t
    kd_shmlink_offset (kd_shmlink_t *self, size_t i);

//  Copy the n floats a PULL_OK with "shm": 1 names into dst: 0; -1 when
//  the shard wrote that slot again meanwhile (pull again); -2 when the
//  reply names no slot of the snapshot.
int
    kd_shmlink_read (kd_shmlink_t *self, kd_msg_t *reply, float *dst, size_t n);

//  True when the shard whose snapshot we map has exited.
bool
    kd_shmlink_shard_gone (kd_shmlink_t *self);

#endif
