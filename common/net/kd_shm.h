/*  kd_shm: a shared-memory region between two processes on one host.

    The owner makes the region with memfd_create: it has no name in any
    file system, so a process killed with -9 leaves nothing behind; the
    kernel frees the memory when the last descriptor and mapping go.  The
    region is sealed against shrinking and growing, so a peer that maps it
    can never take SIGBUS from a truncation.

    A peer on the same host maps it through /proc/<pid>/fd/<fd>, which the
    kernel allows to processes that may read the owner's memory anyway (the
    same user, or root).  The owner sends pid, fd, size and a random 64-bit
    token over ZeroMQ; the peer maps the region only when the region's
    header holds that token, so a pid or fd reused by another process is
    refused.  The peer watches the owner with a pidfd and unmaps when it
    exits.

    A region may also hold a snapshot: two slots of n floats, each with a
    sequence number (a seqlock).  The owner publishes into the slot it did
    not publish last; a reader copies a slot and keeps the copy only when
    the slot's sequence number is the same, and even, before and after.
    docs/protocol.md states the memory ordering.
*/
#ifndef KD_SHM_H_INCLUDED
#define KD_SHM_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define KD_SHM_HOST_MAX     96      //  bytes of a host identity, with NUL
#define KD_SHM_MAX_BYTES    (1ull << 34)    //  a region's usable bytes at most
#define KD_SHM_ALIGN        64      //  offsets of values are multiples of this

typedef struct _kd_shm_t kd_shm_t;

//  This host's identity for shared memory: the boot id, the pid namespace
//  and the network namespace, as "BOOTID/pid:[INODE]/net:[INODE]".  Peers
//  in different network namespaces (containers, `kudus local --netns`)
//  stay on their network.  0, or -1 when /proc cannot tell.
int
    kd_shm_host (char *buf, size_t size);

//  Make a region with bytes usable bytes, zeroed.  NULL (logged) on error.
kd_shm_t *
    kd_shm_new (const char *name, size_t bytes);

//  Make a region that holds a snapshot of n floats (two slots).
kd_shm_t *
    kd_shm_new_snapshot (const char *name, size_t n);

//  Map the region another process made, read-only, or read-write when
//  writable.  NULL with why filled when the owner is gone, the descriptor
//  is not a sealed region of that size, or its token differs.
kd_shm_t *
    kd_shm_attach (uint64_t pid, uint64_t fd, uint64_t token, uint64_t bytes, bool writable,
                   char *why, size_t why_size);

//  Unmap and close, and null the caller's pointer.  Safe on NULL.
void
    kd_shm_destroy (kd_shm_t **self_p);

//  The usable bytes; the first is KD_SHM_ALIGN-aligned.  Offsets on the wire
//  count from here.
void *
    kd_shm_data (kd_shm_t *self);
size_t
    kd_shm_size (kd_shm_t *self);

//  What a peer needs to attach: the owner's pid, the descriptor and the token.
uint64_t
    kd_shm_pid (kd_shm_t *self);
uint64_t
    kd_shm_fd (kd_shm_t *self);
uint64_t
    kd_shm_token (kd_shm_t *self);

//  True when the region was attached and its owner has exited.
bool
    kd_shm_owner_gone (kd_shm_t *self);

//  True when the region was attached and its owner has exited or no longer
//  holds the region under the descriptor it sent (it made a new one).
bool
    kd_shm_orphaned (kd_shm_t *self);

//  Snapshot: copy n floats into the slot not published last and return its
//  sequence number (even, never 0); *offset gets where the values start.
//  The region must have been made by kd_shm_new_snapshot with n floats.
uint64_t
    kd_shm_publish (kd_shm_t *self, const float *values, size_t n, uint64_t *offset);

//  Snapshot: copy n floats published at offset with sequence number seq.
//  0 on success; -1 when the slot was written again since (retry the pull);
//  -2 when offset, n or seq cannot be a publication of this region.
int
    kd_shm_read (kd_shm_t *self, uint64_t offset, uint64_t seq, float *dst, size_t n);

#endif
