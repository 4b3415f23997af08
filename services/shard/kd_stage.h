/*  kd_stage: the shard's staged gradients.

    Under the phased models (BSP, LSP, ALSP, auto) a PUSH is staged here,
    keyed by (rank, clock), until a COMMIT names it: in its entries, to be
    applied, or in its drops, to be forgotten.  The table is open
    addressing with linear probing, so staging and committing a gradient
    cost no allocation and no key formatting.

    Each gradient counts against the peer that staged it (a key the shard
    chooses: the CURVE key, or the address and rank), so the shard can
    bound what one peer holds however often it reconnects.

    Some staged gradients can never be named: a retry that lands after its
    commit, or the push of a worker that died before its ARRIVE and came
    back with higher clocks.  The controller names each rank's clocks in
    order (a late gradient is named no later than the next clock of its
    worker), so once a commit names (rank, c), every gradient of rank
    staged before that commit at a clock <= c is dead.  Staged before: a
    worker that died and rejoined starts again at the cluster's lowest
    clock, below what its rank had named, and its new gradients live.
    kd_stage_sweep drops the dead ones, and, as a backstop, any gradient
    older than a time to live.
*/
#ifndef KD_STAGE_H_INCLUDED
#define KD_STAGE_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Gradients the table holds at most.  It has twice as many slots, so that
//  probes stay short.
#define KD_STAGE_MAX        8192
//  Ranks whose named clocks the table remembers (higher ranks are refused
//  at PUSH).
#define KD_STAGE_MAX_RANKS  65536

typedef struct _kd_stage_t kd_stage_t;

//  One staged gradient, as kd_stage_first / kd_stage_next show it.
typedef struct {
    uint64_t rank;              //  worker rank
    uint64_t clock;             //  its clock
    zframe_t *frame;            //  the gradient (borrowed)
} kd_stage_item_t;

//  A new, empty table.  Caller owns it.
kd_stage_t *
    kd_stage_new (void);

//  Free every gradient and the table, and null the caller's pointer.
void
    kd_stage_destroy (kd_stage_t **self_p);

//  The gradient staged as (rank, clock), or NULL.  Borrowed.
zframe_t *
    kd_stage_find (kd_stage_t *self, uint64_t rank, uint64_t clock);

//  Stage a gradient from peer at now_ms, replacing one staged as (rank,
//  clock).  Takes ownership of *frame_p and nulls it.  The caller keeps the
//  count below KD_STAGE_MAX (kd_stage_count).
void
    kd_stage_put (kd_stage_t *self, uint64_t rank, uint64_t clock, uint64_t peer,
                  zframe_t **frame_p, uint64_t now_ms);

//  Forget (rank, clock); nothing happens if it is not staged.
void
    kd_stage_remove (kd_stage_t *self, uint64_t rank, uint64_t clock);

//  A commit named (rank, clock) at now_ms: it, and every earlier clock of
//  rank staged before now_ms, can never be named again.
void
    kd_stage_named (kd_stage_t *self, uint64_t rank, uint64_t clock, uint64_t now_ms);

//  Forget every gradient and every named clock (a new scheduler session
//  numbers clocks afresh).
void
    kd_stage_purge (kd_stage_t *self);

//  Drop the gradients no commit can name any more: those at or below
//  their rank's last named clock and staged before that naming, and those
//  that commits have passed over for ttl_ms: a commit came more than ttl_ms
//  after they were staged and did not name them (0: no time limit).  A
//  phase that only waits makes no commit, so nothing it waits for expires.
//  commit_ms is the time of the last commit.  Adds the counts to *orphaned
//  and *expired.  Returns how many were dropped.
size_t
    kd_stage_sweep (kd_stage_t *self, uint64_t commit_ms, uint64_t ttl_ms,
                    uint64_t *orphaned, uint64_t *expired);

//  Gradients staged, their bytes, and those of one peer.
size_t
    kd_stage_count (kd_stage_t *self);
size_t
    kd_stage_bytes (kd_stage_t *self);
size_t
    kd_stage_peer_count (kd_stage_t *self, uint64_t peer);

//  Walk the staged gradients: the first, then the next after it, until
//  false.  The table must not change during the walk.
bool
    kd_stage_first (kd_stage_t *self, kd_stage_item_t *item);
bool
    kd_stage_next (kd_stage_t *self, kd_stage_item_t *item);

#ifdef __cplusplus
}
#endif

#endif
