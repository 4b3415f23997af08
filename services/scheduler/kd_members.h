/*  kd_members: the scheduler's membership, every peer that said HELLO.

    A member is known by its stable name and keeps its record (and its
    rank) across restarts, reconnections and deaths.  The table owns the
    records and keeps their indexes true:
    - by routing id: a member is found under exactly its current routing id
      (behind an aggregator, the aggregator's id, then its own);
    - by rank: workers [rank] and shards [rank] point at the member that
      holds that rank;
    - by registering key (a CURVE key, else an address): how many names
      each key registered, against a limit, so that a peer cannot fill the
      rank table by inventing names.
    The scheduler (kd_scheduler.c) reads and writes a record's other fields,
    and decides what to answer; only this class changes the indexes.
*/
#ifndef KD_MEMBERS_H_INCLUDED
#define KD_MEMBERS_H_INCLUDED

#include "kd_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KD_MEMBERS_MAX_WORKERS  1024    //  worker ranks
#define KD_MEMBERS_MAX_SHARDS   64      //  shard ranks
#define KD_MEMBERS_ID_MAX       128     //  a routing id key, with its NUL

typedef enum {
    KD_MEMBER_WORKER,
    KD_MEMBER_SHARD,
    KD_MEMBER_MONITOR,
    KD_MEMBER_EVALUATOR
} kd_member_role_t;

#define KD_MEMBERS_STAGED_SLOTS 4  //  a worker's clocks with STAGED counted

//  Short phase path: which ranges said STAGED for one clock of a worker.
//  A few slots, not one: a late STAGED of another clock (a retried push,
//  or the push of a worker's previous process, whose clocks may be reused
//  after it rejoins) takes a slot of its own and never clears this one.
typedef struct {
    uint64_t clock1;            //  clock + 1 (0: slot free)
    uint64_t mask;              //  bit g: range g's primary staged it
    uint64_t used;              //  staged_tick when last touched
    bool refused;               //  a range refused it for good
} kd_staged_t;

typedef struct {
    char *name;                 //  stable instance name (table key)
    kd_member_role_t role;      //  what it is
    uint64_t rank;              //  rank within its role
    zframe_t *routing_id;       //  current ROUTER identity (behind an
                                //  aggregator: its identity there)
    zframe_t *via;              //  workers: the aggregator it is behind, or NULL
    char id_hex [KD_MEMBERS_ID_MAX];  //  routing id key (by_id's key; behind
                                //  an aggregator, the aggregator's first)
    char key [64];              //  who registered it: CURVE key, else address
    uint64_t refused;           //  its gradients a shard refused
    uint64_t last_seen;         //  ms of its last message
    bool alive;                 //  registered and not declared dead
    char *endpoint;             //  shards, monitor: advertised endpoint
    uint64_t version;           //  shards: last version reported
    double arrive_ms;           //  workers: time of the last ARRIVE
    double release_ms;          //  workers: time of the last RELEASE
    uint64_t staleness;         //  workers: tau of its last applied gradient
    bool waiting;               //  workers: arrived, not yet released
    bool has_arrived;           //  workers: arrive_clock is valid
    uint64_t arrive_clock;      //  workers: clock of the last accepted ARRIVE
    bool released;              //  workers: last_release is valid
    bool orphan;                //  workers: died computing; orphan_clock
                                //  may still be pushed after the death
    uint64_t orphan_clock;      //  workers: that clock
    uint64_t samples;           //  shards: samples trained into version
    kd_decision_t last_release; //  workers: the last RELEASE (its scalar
                                //  fields only; the pointers go stale)
    uint64_t applied;           //  workers: samples of applied gradients
    uint64_t drops;             //  workers: gradients dropped
    uint64_t iterations;        //  workers: accepted arrivals
    double iter_ms;             //  workers: sum of release-to-arrival times
    double compute_ms;          //  workers: sum of reported compute times
    double emulated_ms;         //  workers: sum of emulated compute aimed at
    double wait_ms;             //  workers: sum of arrival-to-release times
    uint64_t reported_tau;      //  workers: staleness its last PUSH_OKs saw
                                //  (ASP/SSP, measured by the shards)
    bool synced;                //  shards, replicated: holds its range's state
    uint64_t sync_gen;          //  shards, replicated: its range's chain
                                //  generation when it was last marked
                                //  unsynced; an older SYNC_OK is stale
    kd_msg_t *held_arrive;      //  workers, short phase path: an ARRIVE that
                                //  waits for every range's STAGED (owned)
    kd_staged_t staged [KD_MEMBERS_STAGED_SLOTS];  //  workers, short path:
                                //  the ranges that staged its latest clocks
    uint64_t staged_tick;       //  workers, short path: last slot use (LRU)
    uint64_t reg;               //  workers: registration number (WELCOME's reg)
    bool lease_ahead;           //  workers: holds a lease ahead (HELLO's
                                //  lease_ahead; ASP, SSP)
} kd_member_t;

typedef struct _kd_members_t kd_members_t;

//  A role's name on the wire ("worker", "shard", "monitor", "evaluator").
const char *
    kd_member_role_name (kd_member_role_t role);

//  A role from its name on the wire; -1 for any other name.
int
    kd_member_role_parse (const char *name);

//  The routing id key of a peer: id as hex, after via's (its aggregator)
//  and a '/' when it came through one.  Cut to fit out.
void
    kd_members_id_key (zframe_t *via, zframe_t *id, char *out, size_t size);

//  An empty table for n_shards shard ranks, where one registering key may
//  register at most max_per_key names.  NULL when n_shards is above
//  KD_MEMBERS_MAX_SHARDS.  Caller owns it.
kd_members_t *
    kd_members_new (size_t n_shards, size_t max_per_key);

//  Free every member and the table, and null the caller's pointer.
void
    kd_members_destroy (kd_members_t **self_p);

//  A rank of role that no member holds, live or departed: hint when it is
//  free and in range, else the lowest free one; -1 when every rank is
//  taken.  The monitor and evaluators have rank 0.
int64_t
    kd_members_free_rank (kd_members_t *self, kd_member_role_t role, bool has_hint, uint64_t hint);

//  Names registered by key.
size_t
    kd_members_key_count (kd_members_t *self, const char *key);

//  Add a member, not yet bound to a routing id nor alive, registered by
//  key.  The name must be new and a worker's or a shard's rank free
//  (kd_members_free_rank).  Returns it (borrowed), or NULL when key has
//  registered max_per_key names already.
kd_member_t *
    kd_members_add (kd_members_t *self, const char *name, kd_member_role_t role,
                    uint64_t rank, const char *key);

//  Free a member and take it out of every index: its rank is free again
//  and it no longer counts against its key.
void
    kd_members_remove (kd_members_t *self, kd_member_t **member_p);

//  Bind a member to the routing id it now speaks from (id behind via, or
//  directly when via is NULL); the id it had is forgotten.  A monitor
//  becomes the table's monitor.  The ids are copied.
void
    kd_members_bind (kd_members_t *self, kd_member_t *member, zframe_t *via, zframe_t *id);

//  The member of that name, or NULL.  Borrowed.
kd_member_t *
    kd_members_find (kd_members_t *self, const char *name);

//  The member bound to routing id key id_key (kd_members_id_key), or NULL.
kd_member_t *
    kd_members_find_id (kd_members_t *self, const char *id_key);

//  The worker of rank, or NULL (also when rank is out of range).
kd_member_t *
    kd_members_worker (kd_members_t *self, uint64_t rank);

//  The shard of rank, or NULL (also when rank is out of range).
kd_member_t *
    kd_members_shard (kd_members_t *self, uint64_t rank);

//  The monitor last bound, or NULL.
kd_member_t *
    kd_members_monitor (kd_members_t *self);

//  Live members of role.
size_t
    kd_members_live (kd_members_t *self, kd_member_role_t role);

//  Every member, in the table's order: the first, then the next, NULL at
//  the end.  One walk at a time; adding or removing ends it.
kd_member_t *
    kd_members_first (kd_members_t *self);
kd_member_t *
    kd_members_next (kd_members_t *self);

//  The live members silent for more than limit_ms at now_ms, in the
//  table's order: those the heartbeat declares dead.  Caller owns the list
//  (not its members).
zlistx_t *
    kd_members_silent (kd_members_t *self, uint64_t now_ms, uint64_t limit_ms);

//  Members in the table.
size_t
    kd_members_size (kd_members_t *self);

#ifdef __cplusplus
}
#endif

#endif
