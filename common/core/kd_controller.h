/*  kd_controller: the consistency controller.

    Pure logic, no sockets and no clock of its own: the scheduler feeds it
    events (join, leave, arrive, telemetry, tick) stamped with a monotonic
    time in ms, and drains decisions (commit, release, groups) with
    kd_controller_next.  Criterion drives it directly with scripted and
    random event sequences.

    Terms.  V is the global model version; it starts at 0 and increases by
    one with every COMMIT.  A worker's clock is the number of the iteration it
    is computing.  A gradient computed on version v_r (the "base") and
    applied in the commit that creates version V+1 from V has staleness
    tau = V - v_r.

    Protocol between controller and scheduler:
    - join (r): a worker wants in.  It is admitted at the next phase
      boundary, and always receives a RELEASE telling it which version to
      pull and which clock to compute next.
    - arrive (r, clock, base, samples): the worker has pushed the gradient
      for (r, clock) to every shard, where it is staged.
    - COMMIT (version, entries, drops): tell every shard to apply
      sum_i weight_i * grad (rank_i, clock_i) as one update that creates
      `version`, and to discard the staged gradients in drops.  Every staged
      gradient is eventually named exactly once, in entries or in drops.
    - RELEASE (rank, version, clock): the worker may compute `clock` on a
      model of at least `version`.
    - leave (r): the worker is gone; its staged gradients appear in the
      drops of the next commit (or of a drop-only decision, see below), and
      the barrier counts no longer include it.
    - join_ahead (r): as join, for a worker that holds one lease ahead
      (ASP and SSP only): every RELEASE also names the lease of clock + 1,
      which the worker computes, on the model of this release, while its
      arrival for clock + 0 and the next pull travel.  Its arrival may then
      name the version of its previous release as base.
*/
#ifndef KD_CONTROLLER_H_INCLUDED
#define KD_CONTROLLER_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kd_sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    KD_CONS_BSP,
    KD_CONS_ASP,
    KD_CONS_SSP,
    KD_CONS_LSP,
    KD_CONS_ALSP,
    KD_CONS_AUTO                //  BSP, LSP or ALSP, chosen from live speeds
} kd_consistency_t;

//  Parse "bsp", "asp", "ssp", "lsp", "alsp", "auto"; -1 if unknown.
int
    kd_consistency_parse (const char *name);
const char *
    kd_consistency_name (kd_consistency_t model);

//  How a late gradient is discounted: f (tau) in the commit rule
//  sum_i n_i f (tau_i) g_i / sum_i n_i.
typedef enum {
    KD_WEIGHT_INVERSE,          //  f = 1 / (1 + tau), the default
    KD_WEIGHT_NONE,             //  f = 1
    KD_WEIGHT_EXP               //  f = exp (-lambda tau)
} kd_weight_kind_t;

//  How a phase of LSP, ALSP and auto is released.
typedef enum {
    KD_BARRIER_ADAPTIVE,        //  wait for whoever is expected within the
                                //  slack; release early only for the late
    KD_BARRIER_QUOTA            //  release at K = ceil (quota_ratio * N)
} kd_barrier_t;

//  Parse "adaptive" or "quota"; -1 if unknown.
int
    kd_barrier_parse (const char *name);

//  ALSP and auto with several groups: which group commits are optimizer
//  steps of their own.
typedef enum {
    KD_GROUP_STEP_EACH,         //  every group's commit is a step (the default)
    KD_GROUP_STEP_FASTEST       //  only the fastest group's commits are steps;
                                //  a slower group's update rides, weighted as
                                //  its own commit would be, in the next step
} kd_group_step_t;

//  Parse "each" or "fastest"; -1 if unknown.
int
    kd_group_step_parse (const char *name);

//  Parse "inverse", "none" or "exp:LAMBDA" (0 < LAMBDA <= 1000).
//  Returns 0, or -1 if malformed.
int
    kd_staleness_weight_parse (const char *text, kd_weight_kind_t *kind,
                               double *lambda);

typedef struct {
    kd_consistency_t model;     //  which rule set
    uint32_t staleness;         //  s: SSP clock bound; LSP/ALSP: how many
                                //  commits of its group a late gradient
                                //  may miss
    uint32_t quota;             //  K for LSP; 0 means ceil (quota_ratio * N)
    double quota_ratio;         //  LSP K/N when quota is 0; ALSP kappa
    uint32_t window_ms;         //  LSP release window, 0 = none
    kd_barrier_t barrier;       //  phase release rule; an explicit quota or
                                //  window selects the quota rule
    double slack;               //  adaptive: how late, as a fraction of the
                                //  phase, a member may be and still be
                                //  waited for
    double spread;              //  adaptive: also wait for a member within
                                //  this many half-ranges of its recent
                                //  iteration times (0: the slack only)
    bool spread_auto;           //  adaptive: choose the spread from measured
                                //  noise, 1 at first, then 0 or 1; spread
                                //  must then be 0
    double group_ratio;         //  ALSP rho: cut between neighbours above it
    uint32_t min_group;         //  ALSP minimum group size (1: a lone
                                //  straggler gets a group of its own)
    uint32_t max_groups;        //  ALSP maximum number of groups
    uint32_t group_staleness;   //  ALSP G: commits another group may make
                                //  while a group's phase is open
    uint32_t regroup_dwell_ms;  //  ALSP: minimum time between regroups
    kd_group_step_t group_step; //  ALSP: every group's commit a step, or
                                //  only the fastest group's
    uint32_t telemetry_fresh_ms;    //  speeds: while a rank's last
                                //  kd_controller_telemetry is younger than
                                //  this, its arrivals are not timed (the
                                //  monitor's reports lead, arrivals fill
                                //  the gaps); 0 = arrivals always count
    kd_weight_kind_t weight;    //  staleness weight f
    double weight_lambda;       //  lambda of KD_WEIGHT_EXP
    uint64_t rows;              //  training rows: leases on when > 0
    uint32_t batch;             //  rows per lease
    uint64_t seed;              //  permutation seed of the sampler
    uint32_t max_workers;       //  ranks are 0 .. max_workers-1
    uint64_t initial_version;   //  V at start: a restarted scheduler resumes
                                //  from the shards' version (0 = fresh)
} kd_controller_opts_t;

//  Fill opts with the documented defaults for a model.
void
    kd_controller_opts_defaults (kd_controller_opts_t *opts,
                                 kd_consistency_t model);

typedef enum {
    KD_DEC_COMMIT,
    KD_DEC_RELEASE,
    KD_DEC_GROUPS,
    KD_DEC_SWITCH,              //  auto: the effective model changed
    KD_DEC_ALLOWANCE            //  spread_auto: the spread allowance changed
} kd_decision_type_t;

//  One gradient named in a commit.
typedef struct {
    uint32_t rank;              //  worker
    uint64_t clock;             //  its iteration
    double weight;              //  applied as weight * gradient (0 in drops)
    uint64_t staleness;         //  tau at apply time (or at drop time)
    uint32_t samples;           //  n_i: rows it was computed on
} kd_entry_t;

//  A decision.  Valid until the next call into the controller.
typedef struct {
    kd_decision_type_t type;    //  what to do
    uint64_t version;           //  COMMIT: version created (may equal the
                                //  current one for a drop-only commit with
                                //  no entries); RELEASE: minimum version to
                                //  pull
    const kd_entry_t *entries;  //  COMMIT: gradients to apply
    size_t n_entries;           //  COMMIT: entries count
    const kd_entry_t *drops;    //  COMMIT: gradients to discard
    size_t n_drops;             //  COMMIT: drops count
    bool direct;                //  COMMIT: ASP/SSP, the shards applied the
                                //  gradients on arrival; bookkeeping only
    uint32_t rank;              //  RELEASE: the worker
    uint64_t clock;             //  RELEASE: clock it may compute next
    bool dropped;               //  RELEASE: its last gradient was dropped
    uint32_t group;             //  RELEASE: its group (0 unless ALSP)
    kd_lease_t lease;           //  RELEASE: rows to train on (count 0 when
                                //  leases are off)
    kd_lease_t ahead;           //  RELEASE: a lease-ahead worker's rows of
                                //  clock + 1 (count 0 for other workers)
    uint64_t min_clock;         //  RELEASE: min_clock at release (SSP cache)
    const uint32_t *groups;     //  GROUPS: group of each rank, indexed by
                                //  rank; UINT32_MAX for non-members
    size_t n_groups;            //  GROUPS: length of groups (max_workers)
    uint32_t group_count;       //  GROUPS: number of groups
    kd_consistency_t mode;      //  SWITCH: the effective model now (bsp,
                                //  lsp or alsp)
    kd_consistency_t from;      //  SWITCH: the effective model before
    const char *reason;         //  SWITCH, ALLOWANCE: why, in words
    double spread;              //  ALLOWANCE: the spread allowance now
} kd_decision_t;

typedef struct _kd_controller_t kd_controller_t;

//  Create a controller.  NULL if opts are invalid.  Caller owns it.
kd_controller_t *
    kd_controller_new (const kd_controller_opts_t *opts);

//  Destroy and null the caller's pointer.
void
    kd_controller_destroy (kd_controller_t **self_p);

//  Events.  Each returns 0, or -1 when the event is invalid (unknown or
//  inactive rank, wrong clock, duplicate arrival); an invalid event changes
//  nothing.
int
    kd_controller_join (kd_controller_t *self, uint32_t rank, uint64_t now_ms);
//  Join holding one lease ahead (immediate engine: ASP, SSP).  Each RELEASE
//  then names two leases: the one to compute (the ahead lease of the last
//  RELEASE, or a fresh one at admission) and a fresh ahead lease.  The
//  worker computes clock c on the model of its release for c - 1, so its
//  arrival for c may name that release's version as base.  When it
//  leaves, both leases go back to the front of the queue.  -1 under the
//  phase engine (BSP, LSP, ALSP, auto), or as join.
int
    kd_controller_join_ahead (kd_controller_t *self, uint32_t rank, uint64_t now_ms);
int
    kd_controller_leave (kd_controller_t *self, uint32_t rank, uint64_t now_ms);
int
    kd_controller_arrive (kd_controller_t *self, uint32_t rank, uint64_t clock,
                          uint64_t base, uint64_t samples, uint64_t now_ms);
//  An arrival whose gradient a shard refused (NaN or Inf, or a norm over
//  max-grad-norm): nothing of it is committed, its staged slices are named
//  in the next commit's drops, its rows go back to the lease queue, and the
//  worker is released at once.
int
    kd_controller_refuse (kd_controller_t *self, uint32_t rank, uint64_t clock,
                          uint64_t base, uint64_t now_ms);
//  An iteration time of rank measured elsewhere (the monitor's telemetry:
//  compute, push and pull), as a speed sample for ALSP's and auto's
//  groups.  The adaptive barrier's expectations come from arrivals only.
//  See telemetry_fresh_ms.
int
    kd_controller_telemetry (kd_controller_t *self, uint32_t rank,
                             double iter_ms, uint64_t now_ms);
//  Arrivals not used as speed samples for the groups because the rank's
//  telemetry was fresh (telemetry_fresh_ms); 0 without telemetry.
uint64_t
    kd_controller_untimed (kd_controller_t *self);
//  Time passes: windows and dwell timers fire.
void
    kd_controller_tick (kd_controller_t *self, uint64_t now_ms);
//  The earliest time at which a tick may release a phase that no arrival
//  releases first (an adaptive phase waits for an overdue member no
//  longer), or UINT64_MAX when only events can.  The scheduler polls no
//  longer than this.
uint64_t
    kd_controller_deadline (kd_controller_t *self);

//  Next pending decision, or NULL when there is none.
const kd_decision_t *
    kd_controller_next (kd_controller_t *self);

//  Introspection for the scheduler, the monitor and the tests.
uint64_t
    kd_controller_version (kd_controller_t *self);
size_t
    kd_controller_active (kd_controller_t *self);
bool
    kd_controller_is_active (kd_controller_t *self, uint32_t rank);
uint64_t
    kd_controller_min_clock (kd_controller_t *self);
uint64_t
    kd_controller_dropped (kd_controller_t *self);
//  Gradients refused so far (kd_controller_refuse).
uint64_t
    kd_controller_refused (kd_controller_t *self);
uint64_t
    kd_controller_regroups (kd_controller_t *self);
uint32_t
    kd_controller_group_of (kd_controller_t *self, uint32_t rank);
//  Number of ALSP groups with members (1 otherwise).
uint32_t
    kd_controller_group_count (kd_controller_t *self);
//  The lease book, or NULL when leases are off.  Borrowed.
kd_sampler_t *
    kd_controller_sampler (kd_controller_t *self);
//  The effective model: the configured one, except under auto, where it is
//  what the controller chose last (bsp, lsp or alsp).
kd_consistency_t
    kd_controller_mode (kd_controller_t *self);
//  Auto: switches of the effective model so far.
uint64_t
    kd_controller_switches (kd_controller_t *self);
//  The adaptive barrier's spread allowance in force (opts.spread, or with
//  spread_auto 1 at first, then 0 or 1 as measured noise decides).
double
    kd_controller_allowance (kd_controller_t *self);
//  spread_auto: changes of the allowance so far.
uint64_t
    kd_controller_allowance_changes (kd_controller_t *self);
//  Phases that rank held only because its spread window was wider than
//  the slack (a diagnostic for the spread's cost).
uint64_t
    kd_controller_spread_holds (kd_controller_t *self, uint32_t rank);
//  Phases released before every member expected in them had arrived.
uint64_t
    kd_controller_early_releases (kd_controller_t *self);
//  True when the controller treats gradients as applied by the shards on
//  arrival (ASP and SSP).
bool
    kd_controller_direct (kd_controller_t *self);

#ifdef __cplusplus
}
#endif

#endif
