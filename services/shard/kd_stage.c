/*  kd_stage: the shard's staged gradients (see kd_stage.h).
*/
#include "kd_stage.h"
#include "kd_util.h"
#include <assert.h>
#include <stdlib.h>

//  Slots: a power of two, twice the most gradients held.
#define S_SLOTS     (2 * KD_STAGE_MAX)

//  One slot: a gradient keyed by (rank, clock).
typedef struct {
    uint64_t rank;              //  worker rank
    uint64_t clock;             //  its clock
    uint64_t peer;              //  whom it counts against
    uint64_t staged_at;         //  ms when it was staged
    zframe_t *frame;            //  the gradient; NULL = free slot
} s_slot_t;

struct _kd_stage_t {
    s_slot_t *slots;            //  S_SLOTS slots, allocated at first use
    size_t count;               //  slots in use
    size_t bytes;               //  gradient bytes they hold
    zhashx_t *by_peer;          //  peer (hex) -> gradients it staged
    uint64_t *named;            //  by rank: last named clock + 1, 0 = none;
                                //  allocated at the first commit
    uint64_t *named_at;         //  by rank: ms of that naming
    size_t cursor;              //  kd_stage_next's position
};

//  Home slot of (rank, clock).
static size_t
s_home (uint64_t rank, uint64_t clock)
{
    return (size_t) (kd_mix64 (rank * 0x9e3779b97f4a7c15ull ^ clock) & (S_SLOTS - 1));
}

//  Slot holding (rank, clock), or the free slot that ends its probe.
static s_slot_t *
s_probe (kd_stage_t *self, uint64_t rank, uint64_t clock)
{
    if (!self->slots) {
        self->slots = (s_slot_t *) calloc (S_SLOTS, sizeof (s_slot_t));
        assert (self->slots);
    }
    size_t i = s_home (rank, clock);
    while (self->slots [i].frame
       &&  (self->slots [i].rank != rank || self->slots [i].clock != clock))
        i = (i + 1) & (S_SLOTS - 1);
    return &self->slots [i];
}

//  Change a peer's count by one.
static void
s_peer_add (kd_stage_t *self, uint64_t peer, int delta)
{
    char key [17];
    kd_hex (&peer, sizeof peer, key, sizeof key);
    if (!self->by_peer)
        self->by_peer = zhashx_new ();
    uintptr_t n = (uintptr_t) zhashx_lookup (self->by_peer, key);
    n = delta < 0 ? (n > 0 ? n - 1 : 0) : n + 1;
    if (n == 0)
        zhashx_delete (self->by_peer, key);
    else
        zhashx_update (self->by_peer, key, (void *) n);
}

//  Drop a slot's gradient and its accounting; the slot stays in its run.
static void
s_clear (kd_stage_t *self, s_slot_t *slot)
{
    self->bytes -= zframe_size (slot->frame);
    s_peer_add (self, slot->peer, -1);
    zframe_destroy (&slot->frame);
}

//  A new, empty table.
kd_stage_t *
kd_stage_new (void)
{
    kd_stage_t *self = (kd_stage_t *) calloc (1, sizeof *self);
    assert (self);
    return self;
}

//  Free every gradient and the table.
void
kd_stage_destroy (kd_stage_t **self_p)
{
    assert (self_p);
    kd_stage_t *self = *self_p;
    if (!self)
        return;
    kd_stage_purge (self);
    free (self->slots);
    free (self->named);
    free (self->named_at);
    zhashx_destroy (&self->by_peer);
    free (self);
    *self_p = NULL;
}

//  The gradient staged as (rank, clock), or NULL.
zframe_t *
kd_stage_find (kd_stage_t *self, uint64_t rank, uint64_t clock)
{
    assert (self);
    return s_probe (self, rank, clock)->frame;
}

//  Stage a gradient, replacing one under the same key.
void
kd_stage_put (kd_stage_t *self, uint64_t rank, uint64_t clock, uint64_t peer,
              zframe_t **frame_p, uint64_t now_ms)
{
    assert (self && frame_p && *frame_p);
    s_slot_t *slot = s_probe (self, rank, clock);
    if (slot->frame)
        s_clear (self, slot);
    else
        self->count++;
    assert (self->count < S_SLOTS);
    *slot = (s_slot_t) {
        .rank = rank, .clock = clock, .peer = peer, .staged_at = now_ms, .frame = *frame_p
    };
    self->bytes += zframe_size (*frame_p);
    s_peer_add (self, peer, 1);
    *frame_p = NULL;
}

//  Forget (rank, clock).  Deletion shifts later members of the probe run
//  back, so no tombstones pile up.
void
kd_stage_remove (kd_stage_t *self, uint64_t rank, uint64_t clock)
{
    assert (self);
    s_slot_t *slot = s_probe (self, rank, clock);
    if (!slot->frame)
        return;
    s_clear (self, slot);
    self->count--;
    size_t hole = (size_t) (slot - self->slots);
    size_t i = (hole + 1) & (S_SLOTS - 1);
    while (self->slots [i].frame) {
        size_t home = s_home (self->slots [i].rank, self->slots [i].clock);
        //  The entry at i may move into the hole unless its home lies in
        //  the cyclic range (hole, i].
        bool stays = hole < i ? (home > hole && home <= i) : (home > hole || home <= i);
        if (!stays) {
            self->slots [hole] = self->slots [i];
            self->slots [i].frame = NULL;
            hole = i;
        }
        i = (i + 1) & (S_SLOTS - 1);
    }
}

//  A commit named (rank, clock).
void
kd_stage_named (kd_stage_t *self, uint64_t rank, uint64_t clock, uint64_t now_ms)
{
    assert (self);
    if (rank >= KD_STAGE_MAX_RANKS)
        return;
    if (!self->named) {
        self->named = (uint64_t *) calloc (KD_STAGE_MAX_RANKS, sizeof (uint64_t));
        self->named_at = (uint64_t *) calloc (KD_STAGE_MAX_RANKS, sizeof (uint64_t));
        assert (self->named && self->named_at);
    }
    //  The latest naming counts, not the highest: after a rejoin the rank's
    //  clocks start lower again.
    self->named [rank] = clock + 1;
    self->named_at [rank] = now_ms;
}

//  Forget every gradient and every named clock.
void
kd_stage_purge (kd_stage_t *self)
{
    assert (self);
    if (self->slots)
        for (size_t i = 0; i < S_SLOTS; i++)
            zframe_destroy (&self->slots [i].frame);
    self->count = 0;
    self->bytes = 0;
    if (self->by_peer)
        zhashx_purge (self->by_peer);
    if (self->named) {
        memset (self->named, 0, KD_STAGE_MAX_RANKS * sizeof (uint64_t));
        memset (self->named_at, 0, KD_STAGE_MAX_RANKS * sizeof (uint64_t));
    }
}

//  Drop what no commit can name any more.  The dead keys are collected
//  first and removed after the walk, since removal moves slots.
size_t
kd_stage_sweep (kd_stage_t *self, uint64_t commit_ms, uint64_t ttl_ms,
                uint64_t *orphaned, uint64_t *expired)
{
    assert (self && orphaned && expired);
    if (!self->slots || self->count == 0)
        return 0;
    uint64_t (*dead) [2] = (uint64_t (*) [2]) malloc (self->count * sizeof *dead);
    assert (dead);
    size_t n = 0;
    for (size_t i = 0; i < S_SLOTS && n < self->count; i++) {
        s_slot_t *slot = &self->slots [i];
        if (!slot->frame)
            continue;
        bool named = self->named && slot->rank < KD_STAGE_MAX_RANKS
                  && slot->clock < self->named [slot->rank]
                  && slot->staged_at < self->named_at [slot->rank];
        bool old = ttl_ms > 0 && commit_ms > slot->staged_at && commit_ms - slot->staged_at > ttl_ms;
        if (named || old) {
            dead [n][0] = slot->rank;
            dead [n++][1] = slot->clock;
            *orphaned += named;
            *expired += !named;
        }
    }
    for (size_t k = 0; k < n; k++)
        kd_stage_remove (self, dead [k][0], dead [k][1]);
    free (dead);
    return n;
}

//  Gradients staged.
size_t
kd_stage_count (kd_stage_t *self)
{
    assert (self);
    return self->count;
}

//  Bytes they hold.
size_t
kd_stage_bytes (kd_stage_t *self)
{
    assert (self);
    return self->bytes;
}

//  Gradients one peer staged.
size_t
kd_stage_peer_count (kd_stage_t *self, uint64_t peer)
{
    assert (self);
    char key [17];
    kd_hex (&peer, sizeof peer, key, sizeof key);
    return self->by_peer ? (size_t) (uintptr_t) zhashx_lookup (self->by_peer, key) : 0;
}

//  The staged gradient at or after slot i, or false.
static bool
s_walk (kd_stage_t *self, size_t i, kd_stage_item_t *item)
{
    for (; self->slots && i < S_SLOTS; i++)
        if (self->slots [i].frame) {
            self->cursor = i;
            *item = (kd_stage_item_t) {
                .rank = self->slots [i].rank, .clock = self->slots [i].clock,
                .frame = self->slots [i].frame
            };
            return true;
        }
    return false;
}

//  First staged gradient of a walk.
bool
kd_stage_first (kd_stage_t *self, kd_stage_item_t *item)
{
    assert (self && item);
    return s_walk (self, 0, item);
}

//  Next staged gradient of a walk.
bool
kd_stage_next (kd_stage_t *self, kd_stage_item_t *item)
{
    assert (self && item);
    return s_walk (self, self->cursor + 1, item);
}
