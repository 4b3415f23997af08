/*  kd_fault_plan: the seeded schedule of faults of `kudus chaos`.

    From a seed, the length of the soak, the mean gap between faults and
    the cluster's shape, a list of faults: when each fires (ms after
    training starts), what it does and to whom.  The plan is a pure
    function of those inputs (splitmix64 streams), so the same seed gives
    the same schedule on any machine; kd_chaos executes it, and saves it
    as JSON beside the histories (docs/chaos.md).

    Targets are named as the cluster names its processes ("worker-2",
    "shard-3", "monitor", "scheduler"), except a kill of a primary or a
    backup, which names a range ("range-1"): which of its replicas leads
    is only known when the fault fires.
*/
#ifndef KD_FAULT_PLAN_H_INCLUDED
#define KD_FAULT_PLAN_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define KD_FAULT_WARMUP_MS      3000    //  training before the first fault
#define KD_FAULT_PAUSE_MIN_MS   300     //  SIGSTOP .. SIGCONT, shortest
#define KD_FAULT_PAUSE_MAX_MS   4000    //  longest: beyond heartbeat x
                                        //  liveness (3 s), so a paused
                                        //  process is sometimes declared dead
#define KD_FAULT_PARTITION_MIN_MS 1000  //  link down .. up, shortest
#define KD_FAULT_PARTITION_MAX_MS 8000  //  longest: well past liveness, so a
                                        //  cut-off process is declared dead
                                        //  and must rejoin when healed
#define KD_FAULT_SLOW_MIN_MS    2000    //  a slowed link, shortest
#define KD_FAULT_SLOW_MAX_MS    15000
#define KD_FAULT_SLOW_MIN_KBIT  4000    //  its rate, drawn log-uniform: at
#define KD_FAULT_SLOW_MAX_KBIT  40000   //  4 Mbit/s a worker's push and pull
                                        //  of the MLP take 1-2 s
#define KD_FAULT_FLOOD_MIN      200     //  malformed messages in a flood
#define KD_FAULT_FLOOD_MAX      2000
#define KD_FAULT_KILL_WINDOW_MS 60000   //  at most KD_FAULT_KILLS_PER_WINDOW
#define KD_FAULT_KILLS_PER_WINDOW 4     //  kills of one target in any window:
                                        //  kudus local takes a 6th death in
                                        //  60 s for a crash loop and gives up,
                                        //  which is not the fault under test

typedef enum {
    KD_FAULT_KILL_WORKER,       //  kill -9 a worker
    KD_FAULT_KILL_PRIMARY,      //  kill -9 the primary of a range
    KD_FAULT_KILL_BACKUP,       //  kill -9 a backup of a range
    KD_FAULT_KILL_MONITOR,      //  kill -9 the monitor
    KD_FAULT_PAUSE,             //  SIGSTOP, then SIGCONT after duration_ms
    KD_FAULT_FLOOD,             //  malformed messages at a service's ROUTER
    KD_FAULT_PARTITION,         //  --netns: a worker's or shard's link down
                                //  for duration_ms, then up
    KD_FAULT_SLOW,              //  --netns: a worker's or shard's link held
                                //  to rate_kbit for duration_ms
    KD_FAULT_KINDS
} kd_fault_kind_t;

typedef struct {
    uint64_t at_ms;             //  after training started
    kd_fault_kind_t kind;       //  what
    char target [32];           //  whom: "worker-2", "range-1", "shard-0", ...
    uint32_t duration_ms;       //  pause: how long the process stays stopped;
                                //  partition: how long its link stays down;
                                //  slow: how long its link stays slowed
    uint32_t rate_kbit;         //  slow: the link's rate meanwhile
    uint32_t count;             //  flood: messages sent
    uint64_t seed;              //  flood: seed of the garbage
} kd_fault_t;

typedef struct _kd_fault_plan_t kd_fault_plan_t;

//  Draw a plan: faults every gap_s seconds on average (each gap uniform in
//  [gap/2, 3gap/2]) over seconds, against shards ranges of replicas shard
//  processes each and workers workers.  kinds is a comma-separated list
//  of kind names (kd_fault_kind_name).  A kill that would be the target's
//  (KD_FAULT_KILLS_PER_WINDOW + 1)th within KD_FAULT_KILL_WINDOW_MS is left
//  out of the plan, its time slot empty.  NULL with a message in err when
//  kinds names an unknown kind.  Caller owns return value.
kd_fault_plan_t *
    kd_fault_plan_new (uint64_t seed, double seconds, double gap_s, int shards, int replicas,
                       int workers, const char *kinds, char *err, size_t err_size);

//  Destroy and null the caller's pointer.
void
    kd_fault_plan_destroy (kd_fault_plan_t **self_p);

//  Faults, in time order.
size_t
    kd_fault_plan_size (kd_fault_plan_t *self);
const kd_fault_t *
    kd_fault_plan_at (kd_fault_plan_t *self, size_t index);

//  The plan as JSON (seed, inputs, faults), to a stream.
void
    kd_fault_plan_write_json (kd_fault_plan_t *self, FILE *out);

//  One line per fault, for people.
void
    kd_fault_plan_print (kd_fault_plan_t *self, FILE *out);

//  "worker", "primary", "backup", "monitor", "pause", "flood",
//  "partition", "slow".
const char *
    kd_fault_kind_name (kd_fault_kind_t kind);

//  A kind by name, or -1.
int
    kd_fault_kind_parse (const char *name);

//  True for the kinds that kill a process (kudus local restarts it): the
//  plan, the runner and the tests count them against the crash-loop guard.
bool
    kd_fault_kind_kills (kd_fault_kind_t kind);

//  True for the kinds in force for duration_ms: pause, partition, slow.
bool
    kd_fault_kind_lasts (kd_fault_kind_t kind);

#endif
