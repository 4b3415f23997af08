/*  kd_controller: the consistency controller.

    The scheduler's rule book, kept pure so that tests can drive it with
    thousands of events: no sockets, no clock, no I/O.  Events go in (join,
    leave, arrive, telemetry, tick) and decisions come out of a queue
    (COMMIT, RELEASE, GROUPS).  docs/consistency.md states the rules and why
    they hold; this file implements them with two engines.

    - The immediate engine (ASP, SSP) takes every arrival as applied: the
      shards applied the gradient when it was pushed, so its COMMIT is
      bookkeeping (direct) and never sent to them.  SSP holds back a worker
      that would run more than s clocks ahead of the slowest one, and lets
      it go when the slowest catches up.  A worker may hold a lease ahead
      there (kd_controller_join_ahead): each RELEASE also names the rows of
      its next clock, which it computes while its arrival and pull travel.
    - The phase engine (BSP, LSP, ALSP) splits the active workers into
      groups: always one group, except under ALSP.  A group's phase is open
      until its quota of fresh arrivals is met; it then commits its
      gradients, fresh and late, as one update and releases its waiting
      members.  Lateness is counted in commits of the worker's own group.
      BSP is LSP with K = N and s = 0, so the degenerate settings of LSP
      produce BSP's decisions by construction, not by coincidence.

    Every RELEASE carries a lease from the sampler (kd_sampler): the rows
    the worker trains on next.  A dropped gradient's lease, and the lease of
    a worker that leaves, go back to the front of the queue, so every row of
    an epoch is applied exactly once however slow its worker is.

    One weighting rule serves every phased commit: weight_i = share * n_i *
    f (tau_i) / sum_j n_j, where n_i is the rows of gradient i, tau_i its
    staleness in versions, f the staleness weight, and share 1, or under
    ALSP the group's share of the workers, so that no model takes a larger
    step per sample than BSP.

    All state lives in arrays indexed by rank.  Bookkeeping that every
    event needs is incremental, so that a phase of N arrivals costs
    O(N log N) and not O(N^2): an indexed min-heap holds each member's
    next clock (min_clock is its top), a second one holds the waiting
    members of the immediate engine by clock (SSP releases whoever is
    within the bound), and counters answer ALSP's "does every member have
    enough speed samples, is any outside its band".  A group commit or a
    regroup still walks the ranks once, O(N), and so does each event while
    an adaptive phase is open (it asks who is expected when), which makes
    such a phase O(N^2) at worst.
*/
#include "kd_controller.h"
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

//  Largest max_workers we accept; beyond it a rank table is a config error.
#define S_MAX_WORKERS_LIMIT (1u << 20)
//  Largest group staleness: each group keeps a ring of its last G commits.
#define S_MAX_GROUP_STALENESS 4096
//  EWMA weight of a new iteration-time sample.
#define S_EWMA_ALPHA        0.3
//  A sample is outside its group's band when it is beyond it by this factor.
#define S_BAND_SLACK        1.2
//  Speed samples in a row outside the band that ask for a regroup.
#define S_OUTSIDE_RUN       2
//  Speed samples every member needs before ALSP groups around it.
#define S_SPEED_SAMPLES     2
//  Slack for ceil (ratio * N), so that 0.7 * 10 gives 7 and not 8.
#define S_QUOTA_EPSILON     1e-9
//  Auto: the phases it remembers when it tells BSP from LSP, and how many
//  of them must have left someone behind for LSP.  Fewer than that keeps
//  the current model, none makes it BSP: the gap is the hysteresis.
#define S_AUTO_WINDOW       16
#define S_AUTO_LSP_EARLY    2
//  Auto: a split stands until the slowest group is within (s + 1) / this
//  of the fastest (see s_auto_split).
#define S_AUTO_BAND         1.5
//  Room for a switch's reason.
#define S_REASON_MAX        160
//  Iteration times the adaptive barrier keeps per worker; it expects the
//  median of them, so one slow iteration (a page fault, a descheduled
//  process) does not make a worker look late for several phases, as it
//  would through the EWMA.
#define S_RECENT_TIMES      5
//  --barrier-spread auto: the allowance it applies when the typical worker
//  is noisy (spread 1, the value the barrier-spread ablation measured), and
//  the fraction of the slack below which the typical worker's relative
//  half-range must fall before it is withdrawn: the gap is the hysteresis.
#define S_NOISE_SPREAD      1.0
#define S_NOISE_OFF         0.5
//  Commits in a row that must ask for the other allowance before it
//  changes: hiccups (one iteration in ten twice as long) put about 40 % of
//  the workers over the threshold, and a single commit's count then
//  crosses one half back and forth (kd_train_sim: 42 changes in 36 s).
#define S_NOISE_DWELL       16

//  Where a worker is in its cycle.
typedef enum {
    S_INACTIVE,                 //  not a member
    S_PENDING,                  //  joined, waits for a phase boundary
    S_COMPUTING,                //  released, computing `clock`
    S_WAITING                   //  arrived for `clock`, waits for release
} s_state_t;

//  A staged gradient the controller still has to name.
typedef struct {
    uint64_t clock;             //  its clock
    uint64_t base;              //  version it was computed on
    uint64_t gclock;            //  its group's clock when it was released
    kd_lease_t lease;           //  the rows it was computed on
    uint32_t samples;           //  n_i
    bool refused;               //  a shard refused it: only ever dropped
} s_grad_t;

//  What the controller knows about one rank.
typedef struct {
    s_state_t state;            //  cycle position
    uint64_t clock;             //  clock it computes or arrived for
    uint64_t version;           //  version of its last RELEASE
    uint64_t floor;             //  lowest base its next arrival may name:
                                //  version, or with a lease ahead the
                                //  version of the release before
    uint64_t gclock;            //  its group's clock at its last RELEASE
    kd_lease_t lease;           //  lease of the clock it computes
    bool ahead_on;              //  holds a lease ahead (join_ahead)
    kd_lease_t ahead;           //  that lease: clock + 1's rows, named
                                //  already, so it computes them before
                                //  its next release comes
    s_grad_t wait;              //  WAITING: the staged in-phase gradient
    bool has_late;              //  a late gradient waits for a commit
    s_grad_t late;              //  that late gradient
    bool dropped;               //  its staged gradient was just dropped
    uint32_t group;             //  group slot; 0 unless ALSP
    uint32_t next_group;        //  ALSP: slot it moves to at its release
    double ewma;                //  smoothed iteration ms; 0 = no sample
    bool ewma_telemetry;        //  ewma is from telemetry, not arrivals
    double recent [S_RECENT_TIMES]; //  its last release-to-arrival times,
                                //  a ring: what the adaptive barrier expects
    uint32_t n_times;           //  entries written to recent
    uint32_t n_speed;           //  speed samples (ewma) so far
    uint32_t outside;           //  samples in a row outside its band
    uint64_t t_release;         //  ms of its last release
    uint64_t t_telemetry;       //  ms of its last telemetry sample (0: none)
    uint64_t spread_holds;      //  phases it held only through the spread
    uint64_t held_at;           //  1 + its group's clock when it last did
} s_worker_t;

//  One group of the phase engine (BSP and LSP have exactly one).
typedef struct {
    uint32_t size;              //  active members
    uint32_t waiting;           //  members staged and waiting for release
    uint64_t base;              //  V_g: version of its last commit
    uint64_t clock;             //  group clock: its commits
    uint64_t t_first;           //  time of the phase's first arrival
    uint64_t t_open;            //  time its phase opened (its last commit)
    double band_lo;             //  lowest member ewma at grouping time
    double band_hi;             //  highest member ewma; 0 = band unknown
    uint64_t *recent;           //  ALSP: versions of its last G commits
    uint32_t n_recent;          //  valid entries in recent
    uint32_t recent_at;         //  next slot of the ring
} s_group_t;

//  A queued decision; its pointers are filled in when it is handed out,
//  because the pools may move while more decisions are queued.
typedef struct {
    kd_decision_t decision;     //  the decision, pointers still NULL
    size_t entries_at;          //  COMMIT: first entry in the entry pool
    size_t drops_at;            //  COMMIT: first drop in the entry pool
    size_t groups_at;           //  GROUPS: first slot in the groups pool
    char reason [S_REASON_MAX]; //  SWITCH, ALLOWANCE: its reason
} s_item_t;

//  A worker's place in the speed order, for grouping.
typedef struct {
    double key;                 //  log (ewma)
    uint32_t rank;              //  the worker
} s_speed_t;

//  An indexed binary min-heap of ranks by a 64-bit key, ties by rank, so
//  that a member's key can change in O(log N) and the smallest is at hand.
typedef struct {
    uint32_t *ranks;            //  heap order, n entries
    uint32_t *pos;              //  by rank: index in ranks + 1, 0 = absent
    uint64_t *key;              //  by rank: its key while present
    uint32_t n;                 //  entries in the heap
} s_heap_t;

//  What a rank contributes to the incremental counts, so that s_track can
//  undo it when the rank changes.  Kept apart from s_worker_t, which the
//  events reset wholesale.
typedef struct {
    bool unready;               //  counted in n_unready
    bool outside;               //  counted in n_outside
} s_tracked_t;

//  The controller.
struct _kd_controller_t {
    kd_controller_opts_t opts;  //  rules and limits
    s_worker_t *workers;        //  indexed by rank
    uint32_t hi_rank;           //  one past the highest rank ever joined
    uint32_t n_active;          //  N: released members
    uint32_t n_pending;         //  joined, not yet admitted
    uint32_t n_waiting;         //  active members waiting for release
    uint64_t version;           //  V: current model version
    uint64_t min_clock;         //  last known min_clock, kept when N = 0
    uint64_t dropped;           //  gradients named in drops so far
    uint64_t refused;           //  gradients refused by a shard so far
    uint64_t regroups;          //  regroups that changed the groups
    uint64_t untimed;           //  arrivals not used as speed samples:
                                //  the rank's telemetry was fresh
    s_group_t *groups;          //  group slots
    uint32_t n_slots;           //  allocated group slots
    uint32_t n_groups;          //  slots in use: 0 .. n_groups-1
    bool groups_dirty;          //  ALSP: publish GROUPS at the end of event
    bool started;               //  an event has been seen
    uint64_t t_regroup;         //  time of last regroup (or of the start)
    bool formed;                //  groups were formed from speeds once
    s_speed_t *speeds;          //  regroup scratch, max_workers slots
    uint32_t *seg_len;          //  regroup scratch: segment lengths
    uint32_t *seg_first;        //  regroup scratch: segment first index
    uint32_t *seg_slot;         //  regroup scratch: slot of each segment
    s_item_t *items;            //  decision queue
    size_t n_items;             //  decisions queued
    size_t head;                //  next decision to hand out
    size_t cap_items;           //  allocated queue slots
    kd_entry_t *pool;           //  entries and drops of queued commits
    size_t n_pool;              //  entries used
    size_t cap_pool;            //  entries allocated
    uint32_t *gpool;            //  group tables of queued GROUPS
    size_t n_gpool;             //  slots used
    size_t cap_gpool;           //  slots allocated
    kd_entry_t *drops;          //  drops waiting for the next commit
    size_t n_drops;             //  drops used
    size_t cap_drops;           //  drops allocated
    kd_entry_t *riders;         //  --group-step fastest: weighted entries of
                                //  slower groups' commits, for the next step
    size_t n_riders;            //  riders used
    size_t cap_riders;          //  riders allocated
    kd_decision_t current;      //  the decision last handed out
    s_heap_t clocks;            //  members by next clock: min_clock on top
    s_heap_t waiters;           //  immediate engine: waiting members by clock
    s_tracked_t *tracked;       //  by rank: what s_track has counted
    uint32_t n_unready;         //  members with too few speed samples
    uint32_t n_outside;         //  members outside their band long enough
    kd_sampler_t *sampler;      //  lease book, NULL when leases are off
    uint64_t deadline;          //  earliest time a tick may release a phase
    uint64_t early;             //  commits that left a member behind
    uint32_t recent_early;      //  auto: bit i set when the i-th last
                                //  commit left someone behind
    kd_consistency_t mode;      //  auto: the effective model
    uint64_t switches;          //  auto: changes of mode
    double allowance;           //  adaptive: the spread in force, opts.spread
                                //  or, with spread_auto, chosen from noise
    uint64_t allowance_changes; //  spread_auto: changes of the allowance
    uint32_t noise_run;         //  spread_auto: commits in a row that asked
                                //  for the other allowance
};


//  --------------------------------------------------------------------------
//  Names and options

static const char *s_model_names [] = { "bsp", "asp", "ssp", "lsp", "alsp", "auto" };
#define S_MODELS (sizeof s_model_names / sizeof s_model_names [0])

//  Parse a model name; -1 if unknown.
int
kd_consistency_parse (const char *name)
{
    if (!name)
        return -1;
    for (size_t i = 0; i < S_MODELS; i++)
        if (strcasecmp (name, s_model_names [i]) == 0)
            return (int) i;
    return -1;
}

//  Name of a model.
const char *
kd_consistency_name (kd_consistency_t model)
{
    if ((unsigned) model < S_MODELS)
        return s_model_names [model];
    return "unknown";
}

//  Index of name in a table of n names, whose indices are the enum's
//  values; -1 if it is not there.
static int
s_name_index (const char *name, const char *const *names, int n)
{
    for (int i = 0; name && i < n; i++)
        if (!strcmp (name, names [i]))
            return i;
    return -1;
}

//  Parse a barrier rule: "adaptive" or "quota".
int
kd_barrier_parse (const char *name)
{
    static const char *const names [] = { "adaptive", "quota" };
    return s_name_index (name, names, KD_BARRIER_QUOTA + 1);
}

//  Parse a group step rule: "each" or "fastest".
int
kd_group_step_parse (const char *name)
{
    static const char *const names [] = { "each", "fastest" };
    return s_name_index (name, names, KD_GROUP_STEP_FASTEST + 1);
}

//  Parse a staleness weight: "inverse", "none" or "exp:LAMBDA".
int
kd_staleness_weight_parse (const char *text, kd_weight_kind_t *kind, double *lambda)
{
    if (!text || !kind || !lambda)
        return -1;
    if (!strcmp (text, "inverse")) {
        *kind = KD_WEIGHT_INVERSE;
        *lambda = 0;
        return 0;
    }
    if (!strcmp (text, "none")) {
        *kind = KD_WEIGHT_NONE;
        *lambda = 0;
        return 0;
    }
    if (!strncmp (text, "exp:", 4) && text [4]) {
        char *end;
        double value = strtod (text + 4, &end);
        if (*end || !isfinite (value) || value <= 0 || value > 1000)
            return -1;
        *kind = KD_WEIGHT_EXP;
        *lambda = value;
        return 0;
    }
    return -1;
}

//  Fill opts with the documented defaults for a model.
void
kd_controller_opts_defaults (kd_controller_opts_t *opts, kd_consistency_t model)
{
    assert (opts);
    *opts = (kd_controller_opts_t) {
        .model = model,
        .staleness = 3,
        .quota = 0,
        .quota_ratio = 0.75,
        .window_ms = 0,
        .barrier = KD_BARRIER_ADAPTIVE,
        .slack = 0.25,
        .spread = 0,
        .group_ratio = 1.3,
        .min_group = 1,
        .max_groups = 4,
        .group_staleness = 8,
        .regroup_dwell_ms = 1000,
        .group_step = KD_GROUP_STEP_EACH,
        .telemetry_fresh_ms = 0,
        .weight = KD_WEIGHT_INVERSE,
        .weight_lambda = 0,
        .rows = 0,
        .batch = 32,
        .seed = 42,
        .max_workers = 1024
    };
}

//  True when opts describe a controller we can run.
static bool
s_opts_valid (const kd_controller_opts_t *opts)
{
    return opts
        && (unsigned) opts->model < S_MODELS
        && opts->max_workers >= 1
        && opts->max_workers <= S_MAX_WORKERS_LIMIT
        && isfinite (opts->quota_ratio)
        && opts->quota_ratio > 0 && opts->quota_ratio <= 1
        && (unsigned) opts->barrier <= KD_BARRIER_QUOTA
        && (unsigned) opts->group_step <= KD_GROUP_STEP_FASTEST
        && isfinite (opts->slack) && opts->slack >= 0.01 && opts->slack <= 10
        && isfinite (opts->spread) && opts->spread >= 0 && opts->spread <= 10
        && (!opts->spread_auto || opts->spread == 0)
        && isfinite (opts->group_ratio) && opts->group_ratio > 1
        && opts->min_group >= 1
        && opts->max_groups >= 1 && opts->max_groups <= 64
        && opts->group_staleness >= 1
        && opts->group_staleness <= S_MAX_GROUP_STALENESS
        && (unsigned) opts->weight <= KD_WEIGHT_EXP
        && (opts->weight != KD_WEIGHT_EXP
            || (isfinite (opts->weight_lambda) && opts->weight_lambda > 0))
        && (opts->rows == 0 || (opts->batch >= 1 && opts->rows <= UINT32_MAX));
}

//  --------------------------------------------------------------------------
//  Incremental bookkeeping

//  Allocate a heap for ranks 0 .. n-1.  Returns 0, or -1 out of memory.
static int
s_heap_init (s_heap_t *heap, size_t n)
{
    heap->ranks = (uint32_t *) calloc (n, sizeof (uint32_t));
    heap->pos = (uint32_t *) calloc (n, sizeof (uint32_t));
    heap->key = (uint64_t *) calloc (n, sizeof (uint64_t));
    heap->n = 0;
    return heap->ranks && heap->pos && heap->key ? 0 : -1;
}

//  Free a heap's arrays.
static void
s_heap_fini (s_heap_t *heap)
{
    free (heap->ranks);
    free (heap->pos);
    free (heap->key);
}

//  True when the entry at index a sorts before the one at index b.
static bool
s_heap_less (const s_heap_t *heap, uint32_t a, uint32_t b)
{
    uint32_t ra = heap->ranks [a], rb = heap->ranks [b];
    if (heap->key [ra] != heap->key [rb])
        return heap->key [ra] < heap->key [rb];
    return ra < rb;
}

//  Swap two heap slots and keep pos in step.
static void
s_heap_swap (s_heap_t *heap, uint32_t a, uint32_t b)
{
    uint32_t ra = heap->ranks [a], rb = heap->ranks [b];
    heap->ranks [a] = rb;
    heap->ranks [b] = ra;
    heap->pos [rb] = a + 1;
    heap->pos [ra] = b + 1;
}

//  Restore the heap order around index i after its key changed.
static void
s_heap_fix (s_heap_t *heap, uint32_t i)
{
    while (i > 0 && s_heap_less (heap, i, (i - 1) / 2)) {
        s_heap_swap (heap, i, (i - 1) / 2);
        i = (i - 1) / 2;
    }
    for (;;) {
        uint32_t left = 2 * i + 1, right = left + 1, least = i;
        if (left < heap->n && s_heap_less (heap, left, least))
            least = left;
        if (right < heap->n && s_heap_less (heap, right, least))
            least = right;
        if (least == i)
            return;
        s_heap_swap (heap, i, least);
        i = least;
    }
}

//  Insert rank with key, or move it to key if present.
static void
s_heap_set (s_heap_t *heap, uint32_t rank, uint64_t key)
{
    if (heap->pos [rank] == 0) {
        heap->ranks [heap->n] = rank;
        heap->pos [rank] = ++heap->n;
    }
    else
    if (heap->key [rank] == key)
        return;
    heap->key [rank] = key;
    s_heap_fix (heap, heap->pos [rank] - 1);
}

//  Remove rank if present.
static void
s_heap_remove (s_heap_t *heap, uint32_t rank)
{
    if (heap->pos [rank] == 0)
        return;
    uint32_t i = heap->pos [rank] - 1, last = heap->n - 1;
    if (i != last)
        s_heap_swap (heap, i, last);
    heap->pos [rank] = 0;
    heap->n--;
    if (i < heap->n)
        s_heap_fix (heap, i);
}


//  Bring the incremental state in line with what rank is now.  Called after
//  every change of a worker's state, clock, speed or outside run, so that
//  no event has to walk the ranks to find the minimum clock, the waiting
//  workers, or a member without enough speed samples.
static void
s_track (kd_controller_t *self, uint32_t rank)
{
    s_worker_t *worker = &self->workers [rank];
    bool member = worker->state == S_COMPUTING || worker->state == S_WAITING;
    //  A waiting worker waits to compute clock + 1.
    if (worker->state == S_COMPUTING)
        s_heap_set (&self->clocks, rank, worker->clock);
    else
    if (worker->state == S_WAITING)
        s_heap_set (&self->clocks, rank, worker->clock + 1);
    else
        s_heap_remove (&self->clocks, rank);
    if (worker->state == S_WAITING)
        s_heap_set (&self->waiters, rank, worker->clock);
    else
        s_heap_remove (&self->waiters, rank);
    s_tracked_t *tracked = &self->tracked [rank];
    bool unready = member && worker->n_speed < S_SPEED_SAMPLES;
    bool outside = member && worker->outside >= S_OUTSIDE_RUN;
    self->n_unready += (uint32_t) unready - (uint32_t) tracked->unready;
    self->n_outside += (uint32_t) outside - (uint32_t) tracked->outside;
    tracked->unready = unready;
    tracked->outside = outside;
}


//  --------------------------------------------------------------------------
//  Constructor and destructor

//  Create a controller.  NULL if opts are invalid.
kd_controller_t *
kd_controller_new (const kd_controller_opts_t *opts)
{
    if (!s_opts_valid (opts))
        return NULL;
    kd_controller_t *self = (kd_controller_t *) calloc (1, sizeof *self);
    if (!self)
        return NULL;
    self->opts = *opts;
    size_t n = opts->max_workers;
    //  ALSP keeps old slots while their members move out, so a regroup can
    //  need up to twice max_groups slots at once.
    self->n_slots = (uint32_t) (n > 2 * opts->max_groups + 1 ? n : 2 * opts->max_groups + 1);
    self->workers = (s_worker_t *) calloc (n, sizeof (s_worker_t));
    self->groups = (s_group_t *) calloc (self->n_slots, sizeof (s_group_t));
    self->speeds = (s_speed_t *) calloc (n, sizeof (s_speed_t));
    self->seg_len = (uint32_t *) calloc (n, sizeof (uint32_t));
    self->seg_first = (uint32_t *) calloc (n, sizeof (uint32_t));
    self->seg_slot = (uint32_t *) calloc (n, sizeof (uint32_t));
    self->tracked = (s_tracked_t *) calloc (n, sizeof (s_tracked_t));
    if (!self->workers || !self->groups || !self->speeds || !self->seg_len
    ||  !self->seg_first || !self->seg_slot || !self->tracked
    ||  s_heap_init (&self->clocks, n) || s_heap_init (&self->waiters, n))
        goto failed;
    if (opts->rows > 0) {
        //  A resumed run (a restarted scheduler) starts over at epoch 0's
        //  permutation; its sample total comes from the shards.
        self->sampler = kd_sampler_new (opts->rows, opts->batch, opts->seed, 0);
        if (!self->sampler)
            goto failed;
    }
    //  Everyone starts in group 0, whose band is unknown.
    self->n_groups = 1;
    self->version = opts->initial_version;
    self->groups [0].base = self->version;
    self->deadline = UINT64_MAX;
    //  Auto starts out waiting for everyone until speeds say otherwise.
    self->mode = opts->model == KD_CONS_AUTO ? KD_CONS_BSP : opts->model;
    //  Auto starts with the allowance on, until it has measured: the
    //  first second of a noisy run at spread 0 (stale gradients while the
    //  model moves fastest) cost 1.3-1.7x in time to 0.86 in kd_train_sim,
    //  and waiting within a steady worker's narrow window costs nothing.
    self->allowance = opts->spread_auto ? S_NOISE_SPREAD : opts->spread;
    return self;

failed:
    kd_controller_destroy (&self);
    return NULL;
}

//  Destroy and null the caller's pointer.
void
kd_controller_destroy (kd_controller_t **self_p)
{
    assert (self_p);
    kd_controller_t *self = *self_p;
    if (!self)
        return;
    if (self->groups)
        for (uint32_t g = 0; g < self->n_slots; g++)
            free (self->groups [g].recent);
    free (self->workers);
    free (self->groups);
    free (self->speeds);
    free (self->seg_len);
    free (self->seg_first);
    free (self->seg_slot);
    free (self->items);
    free (self->pool);
    free (self->gpool);
    free (self->drops);
    free (self->riders);
    free (self->tracked);
    s_heap_fini (&self->clocks);
    s_heap_fini (&self->waiters);
    kd_sampler_destroy (&self->sampler);
    free (self);
    *self_p = NULL;
}


//  --------------------------------------------------------------------------
//  Decision queue

//  Grow an array to hold `need` elements; out of memory aborts.
static void *
s_reserve (void *array, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return array;
    size_t cap_new = *cap ? *cap * 2 : 16;
    while (cap_new < need)
        cap_new *= 2;
    array = realloc (array, cap_new * size);
    if (!array)
        abort ();
    *cap = cap_new;
    return array;
}

//  Append a decision to the queue.
static s_item_t *
s_push (kd_controller_t *self, kd_decision_type_t type)
{
    self->items = (s_item_t *) s_reserve (self->items, &self->cap_items,
                                          self->n_items + 1, sizeof (s_item_t));
    s_item_t *item = &self->items [self->n_items++];
    memset (item, 0, sizeof *item);
    item->decision.type = type;
    return item;
}

//  Append an entry to the entry pool.
static void
s_pool_add (kd_controller_t *self, kd_entry_t entry)
{
    self->pool = (kd_entry_t *) s_reserve (self->pool, &self->cap_pool,
                                           self->n_pool + 1, sizeof (kd_entry_t));
    self->pool [self->n_pool++] = entry;
}

//  Next pending decision, or NULL when there is none.
const kd_decision_t *
kd_controller_next (kd_controller_t *self)
{
    assert (self);
    if (self->head == self->n_items)
        return NULL;
    s_item_t *item = &self->items [self->head++];
    self->current = item->decision;
    if (item->decision.n_entries)
        self->current.entries = self->pool + item->entries_at;
    if (item->decision.n_drops)
        self->current.drops = self->pool + item->drops_at;
    if (item->decision.n_groups)
        self->current.groups = self->gpool + item->groups_at;
    if (item->decision.type == KD_DEC_SWITCH || item->decision.type == KD_DEC_ALLOWANCE)
        self->current.reason = item->reason;
    return &self->current;
}


//  --------------------------------------------------------------------------
//  Rules shared by the engines

//  True for the models run by the phase engine.
static bool
s_phased (kd_controller_t *self)
{
    kd_consistency_t model = self->opts.model;
    return model == KD_CONS_BSP || model == KD_CONS_LSP || model == KD_CONS_ALSP
        || model == KD_CONS_AUTO;
}

//  True for the models that may split the workers into groups.
static bool
s_grouped (kd_controller_t *self)
{
    return self->opts.model == KD_CONS_ALSP || self->opts.model == KD_CONS_AUTO;
}

//  True when phases release by the adaptive rule: LSP, ALSP and auto with
//  the adaptive barrier, unless a quota or a window was set explicitly.
static bool
s_adaptive (kd_controller_t *self)
{
    kd_consistency_t model = self->opts.model;
    return (model == KD_CONS_LSP || model == KD_CONS_ALSP || model == KD_CONS_AUTO)
        && self->opts.barrier == KD_BARRIER_ADAPTIVE
        && self->opts.quota == 0 && self->opts.window_ms == 0;
}

//  True for a released member.
static bool
s_is_member (const s_worker_t *worker)
{
    return worker->state == S_COMPUTING || worker->state == S_WAITING;
}

//  How many commits of its group a late gradient may miss: BSP is LSP
//  with s = 0.
static uint64_t
s_bound (kd_controller_t *self)
{
    return self->opts.model == KD_CONS_BSP ? 0 : self->opts.staleness;
}

//  Release window in ms, 0 for none.
static uint64_t
s_window (kd_controller_t *self)
{
    return self->opts.model == KD_CONS_BSP ? 0 : self->opts.window_ms;
}

//  Quota of a group of `size` members, clamped into [1, size].
static uint32_t
s_quota (kd_controller_t *self, uint32_t size)
{
    if (size == 0)
        return 0;
    if (self->opts.model == KD_CONS_BSP)
        return size;
    double k = self->opts.quota > 0
             ? (double) self->opts.quota
             : ceil (self->opts.quota_ratio * size - S_QUOTA_EPSILON);
    if (k < 1)
        k = 1;
    if (k > size)
        k = size;
    return (uint32_t) k;
}

//  The staleness weight f (tau).
static double
s_weight (kd_controller_t *self, uint64_t tau)
{
    if (tau == 0 || self->opts.weight == KD_WEIGHT_NONE)
        return 1.0;
    if (self->opts.weight == KD_WEIGHT_EXP)
        return exp (-self->opts.weight_lambda * (double) tau);
    return 1.0 / (1.0 + (double) tau);
}

//  min_clock: the lowest clock an active worker computes or waits to
//  compute (a waiting worker waits to compute clock + 1).
static uint64_t
s_min_clock (kd_controller_t *self)
{
    if (self->clocks.n == 0)
        return self->min_clock;
    uint64_t lowest = self->clocks.key [self->clocks.ranks [0]];
    return lowest == UINT64_MAX ? self->min_clock : lowest;
}

//  Move a member into the group it was assigned to by the last regroup.
//  Its late gradient moves with it and counts as fresh to its new group,
//  whose clock is unrelated to the old one; its weight still carries its
//  staleness in versions.
static void
s_migrate (kd_controller_t *self, uint32_t rank)
{
    s_worker_t *worker = &self->workers [rank];
    if (worker->next_group == worker->group)
        return;
    assert (worker->state != S_WAITING);
    self->groups [worker->group].size--;
    worker->group = worker->next_group;
    s_group_t *group = &self->groups [worker->group];
    group->size++;
    if (worker->has_late)
        worker->late.gclock = group->clock;
    self->groups_dirty = true;
}

//  Send a worker off to compute `clock` on the current version, with a new
//  lease.  Admits a pending worker into its group, and moves a member to
//  its new ALSP group.
static void
s_release (kd_controller_t *self, uint32_t rank, uint64_t clock, bool dropped,
           uint64_t now)
{
    s_worker_t *worker = &self->workers [rank];
    bool was_member = s_is_member (worker);
    if (worker->state == S_PENDING) {
        self->n_pending--;
        self->n_active++;
        //  A group that had nobody opens its phase now, not at its last
        //  commit, however long ago that was: the adaptive barrier measures
        //  the phase from here.
        if (self->groups [worker->group].size++ == 0)
            self->groups [worker->group].t_open = now;
        self->groups_dirty = true;
    }
    else
    if (worker->state == S_WAITING) {
        self->n_waiting--;
        if (s_phased (self)) {
            s_group_t *group = &self->groups [worker->group];
            assert (group->waiting > 0);
            group->waiting--;
        }
    }
    worker->state = S_COMPUTING;
    s_migrate (self, rank);
    worker->dropped = false;
    worker->clock = clock;
    //  A worker with a lease ahead computes this clock on the model of its
    //  previous release (its first clock on the first release's): its
    //  arrival may name that base.
    worker->floor = worker->ahead_on && was_member ? worker->version : self->version;
    worker->version = self->version;
    worker->gclock = self->groups [worker->group].clock;
    worker->t_release = now;
    if (self->sampler) {
        //  The ahead lease becomes the current one, and a fresh one is
        //  taken behind it: the worker has computed, or is computing, on
        //  the rows it was told of at its last release.
        bool held = worker->ahead_on && worker->ahead.count > 0;
        worker->lease = held ? worker->ahead : kd_sampler_take (self->sampler);
        worker->ahead = worker->ahead_on ? kd_sampler_take (self->sampler) : (kd_lease_t) { 0 };
    }
    else
        worker->lease = worker->ahead = (kd_lease_t) { 0 };
    s_track (self, rank);
    s_item_t *item = s_push (self, KD_DEC_RELEASE);
    item->decision.version = self->version;
    item->decision.rank = rank;
    item->decision.clock = clock;
    item->decision.dropped = dropped;
    item->decision.group = s_grouped (self) ? worker->group : 0;
    item->decision.lease = worker->lease;
    item->decision.ahead = worker->ahead;
    item->decision.min_clock = s_min_clock (self);
}

//  Name a gradient in the drops of the next commit; its rows go back to
//  the front of the lease queue.
static void
s_drop (kd_controller_t *self, uint32_t rank, const s_grad_t *grad)
{
    self->drops = (kd_entry_t *) s_reserve (self->drops, &self->cap_drops,
                                            self->n_drops + 1, sizeof (kd_entry_t));
    self->drops [self->n_drops++] = (kd_entry_t) {
        .rank = rank, .clock = grad->clock, .weight = 0,
        .staleness = self->version - grad->base, .samples = grad->samples
    };
    if (!grad->refused)
        self->dropped++;
    if (self->sampler)
        kd_sampler_give_back (self->sampler, grad->lease);
}

//  Stage a gradient into the commit being built with its raw weight
//  n_i f (tau_i), normalized by s_commit.  One that missed more than s
//  commits of its group goes to drops instead.  Returns false when it was
//  dropped.
static bool
s_take (kd_controller_t *self, uint32_t rank, const s_grad_t *grad, uint64_t gclock)
{
    if (grad->refused || gclock - grad->gclock > s_bound (self)) {
        s_drop (self, rank, grad);
        return false;
    }
    uint64_t tau = self->version - grad->base;
    s_pool_add (self, (kd_entry_t) {
        .rank = rank, .clock = grad->clock, .staleness = tau, .samples = grad->samples,
        .weight = (double) grad->samples * s_weight (self, tau)
    });
    if (self->sampler)
        kd_sampler_applied (self->sampler, grad->lease);
    return true;
}

//  Weigh the entries pool [at ..] of one group's commit: raw weights
//  n_i f (tau_i) are divided by the commit's rows, sum n_j, and scaled by
//  share: a late gradient never enlarges the step per sample, and one step
//  (share 1) never grows with the gradients in it.
static void
s_weigh (kd_controller_t *self, size_t at, double share)
{
    double rows = 0;
    for (size_t i = at; i < self->n_pool; i++)
        rows += (double) self->pool [i].samples;
    for (size_t i = at; i < self->n_pool; i++)
        self->pool [i].weight = share * self->pool [i].weight / rows;
}

//  Emit the commit whose entries are pool [at ..], weighed (unless direct),
//  with the pending drops.  A commit that carries takes the riders waiting
//  for a step along, weighted as their own commits were.
static void
s_commit (kd_controller_t *self, size_t at, double share, bool direct, bool carry)
{
    if (!direct)
        s_weigh (self, at, share);
    if (carry) {
        for (size_t i = 0; i < self->n_riders; i++)
            s_pool_add (self, self->riders [i]);
        self->n_riders = 0;
    }
    size_t n_entries = self->n_pool - at;
    if (n_entries == 0 && self->n_drops == 0)
        return;
    size_t drops_at = self->n_pool;
    for (size_t i = 0; i < self->n_drops; i++)
        s_pool_add (self, self->drops [i]);
    if (n_entries > 0)
        self->version++;

    s_item_t *item = s_push (self, KD_DEC_COMMIT);
    item->decision.version = self->version;
    item->decision.n_entries = n_entries;
    item->decision.n_drops = self->n_drops;
    item->decision.direct = direct;
    item->entries_at = at;
    item->drops_at = drops_at;
    self->n_drops = 0;
}

//  Emit pending drops as a drop-only commit.
static void
s_flush_drops (kd_controller_t *self)
{
    if (self->n_drops > 0)
        s_commit (self, self->n_pool, 1.0, false, false);
}

//  Number of group slots with members.
static uint32_t
s_nonempty (kd_controller_t *self)
{
    uint32_t count = 0;
    for (uint32_t g = 0; g < self->n_groups; g++)
        count += self->groups [g].size > 0;
    return count;
}

//  Publish the current groups (ALSP).
static void
s_push_groups (kd_controller_t *self)
{
    size_t n = self->opts.max_workers;
    self->gpool = (uint32_t *) s_reserve (self->gpool, &self->cap_gpool,
                                          self->n_gpool + n, sizeof (uint32_t));
    size_t at = self->n_gpool;
    for (uint32_t rank = 0; rank < n; rank++) {
        s_worker_t *worker = &self->workers [rank];
        self->gpool [at + rank] = s_is_member (worker) ? worker->group : UINT32_MAX;
    }
    self->n_gpool += n;
    s_item_t *item = s_push (self, KD_DEC_GROUPS);
    item->decision.n_groups = n;
    item->decision.group_count = s_nonempty (self);
    item->groups_at = at;
    self->groups_dirty = false;
}


//  --------------------------------------------------------------------------
//  Immediate engine: ASP and SSP

//  Order ranks ascending, for qsort.
static int
s_rank_compare (const void *a, const void *b)
{
    uint32_t left = *(const uint32_t *) a, right = *(const uint32_t *) b;
    return left < right ? -1 : (left > right);
}

//  Release every waiting worker whose next clock is within min_clock + s
//  (ASP: every waiting worker).
static void
s_release_bounded (kd_controller_t *self, uint64_t now)
{
    if (self->n_waiting == 0)
        return;
    uint64_t limit = UINT64_MAX;
    if (self->opts.model == KD_CONS_SSP) {
        uint64_t lowest = s_min_clock (self);
        if (lowest <= UINT64_MAX - self->opts.staleness)
            limit = lowest + self->opts.staleness;
    }
    //  Releasing a waiting worker leaves min_clock alone, since it already
    //  counted as computing clock + 1, so the set to release is known
    //  before the first release.  The waiters heap yields it lowest clock
    //  first; the releases go out in rank order.
    uint32_t *go = self->seg_first;     //  scratch, free outside regroups
    uint32_t n = 0;
    while (self->waiters.n > 0) {
        uint32_t rank = self->waiters.ranks [0];
        if (self->workers [rank].clock + 1 > limit)
            break;
        go [n++] = rank;
        s_heap_remove (&self->waiters, rank);
    }
    qsort (go, n, sizeof (uint32_t), s_rank_compare);
    for (uint32_t i = 0; i < n; i++)
        s_release (self, go [i], self->workers [go [i]].clock + 1, false, now);
}

//  ASP/SSP arrival: the shards applied the gradient when it was pushed, so
//  it is committed at once (a direct commit, weight 1), then whoever may go
//  is released.
static void
s_arrive_now (kd_controller_t *self, uint32_t rank, uint64_t base, uint32_t samples,
              uint64_t now)
{
    s_worker_t *worker = &self->workers [rank];
    size_t at = self->n_pool;
    s_pool_add (self, (kd_entry_t) {
        .rank = rank, .clock = worker->clock, .weight = 1.0,
        .staleness = self->version - base, .samples = samples
    });
    if (self->sampler)
        kd_sampler_applied (self->sampler, worker->lease);
    worker->lease = (kd_lease_t) { 0 };
    s_commit (self, at, 1.0, true, false);
    worker->state = S_WAITING;
    self->n_waiting++;
    s_track (self, rank);
    s_release_bounded (self, now);
}


//  --------------------------------------------------------------------------
//  Phase engine: BSP, LSP, ALSP

//  Note a time at which a tick may release a phase.
static void
s_wake_at (kd_controller_t *self, uint64_t at)
{
    if (at < self->deadline)
        self->deadline = at;
}

//  What the adaptive barrier expects a worker's iteration to take: the
//  median of its last few times (of those it has), or 0 with none; and
//  into *spread, half their range (0 with fewer than two), how far one
//  iteration of this worker strays from another.
static double
s_expected_ms (const s_worker_t *worker, double *spread)
{
    uint32_t n = worker->n_times < S_RECENT_TIMES ? worker->n_times : S_RECENT_TIMES;
    *spread = 0;
    if (n == 0)
        return 0;
    double sorted [S_RECENT_TIMES];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i;
        for (; j > 0 && sorted [j - 1] > worker->recent [i]; j--)
            sorted [j] = sorted [j - 1];
        sorted [j] = worker->recent [i];
    }
    *spread = (sorted [n - 1] - sorted [0]) / 2;
    return n % 2 ? sorted [n / 2] : (sorted [n / 2 - 1] + sorted [n / 2]) / 2;
}

//  The adaptive rule: group g's open phase may release when no member
//  whose arrival would count in it is expected within the slack of now,
//  before or after.  A member expects to arrive the median of its last
//  iteration times after its release (a member with no speed yet, the time
//  the phase's first arrival took).  The slack is a fraction of that first
//  arrival's time, so it scales with the phase.  A member expected later
//  than the slack is released early for: it will be late.  One overdue
//  by more than the slack is released early for as well, so nobody waits
//  for a member that stopped or slowed down without notice.  With equal
//  speeds everyone is expected together and every phase waits for all:
//  the decisions of BSP.  With --barrier-spread k a member's window is at
//  least k half-ranges of its recent times: when iteration times are
//  noisy, the first arrival comes early and says little about the phase,
//  and a member whose times stray that much is not late yet.  A member
//  slow and steady keeps a narrow window, and is released early for.
static bool
s_adaptive_ready (kd_controller_t *self, uint32_t g, uint64_t now)
{
    s_group_t *group = &self->groups [g];
    double phase = group->t_first > group->t_open
                 ? (double) (group->t_first - group->t_open) : 1.0;
    double slack = self->opts.slack * phase;
    if (slack < 1)
        slack = 1;
    bool ready = true;
    for (uint32_t rank = 0; rank < self->hi_rank; rank++) {
        s_worker_t *worker = &self->workers [rank];
        if (worker->state != S_COMPUTING || worker->group != g
        ||  worker->gclock != group->clock)
            continue;
        double spread;
        double ms = s_expected_ms (worker, &spread);
        double expected = (double) worker->t_release + (ms > 0 ? ms : phase);
        double window = self->allowance * spread > slack ? self->allowance * spread : slack;
        if (expected > (double) now + window || (double) now >= expected + window)
            continue;
        ready = false;
        if ((expected > (double) now + slack || (double) now >= expected + slack)
        &&  worker->held_at != group->clock + 1) {
            worker->held_at = group->clock + 1;
            worker->spread_holds++;
        }
        s_wake_at (self, (uint64_t) ceil (expected + window));
    }
    return ready;
}

//  --barrier-spread auto, after each commit: apply the allowance when the
//  typical worker is noisy, withdraw it when it is steady again.  A
//  worker's noise is its relative half-range, half the range of its last
//  iteration times over their median; the typical worker is the median
//  one, so one or two stragglers do not decide.  The threshold is the
//  slack: a worker whose own times stray further than the slack cannot be
//  told late from unlucky by the first arrival, which is what the
//  allowance is for.  The verdict must hold S_NOISE_DWELL commits in a row
//  before the allowance changes, so passing hiccups do not flip it.  With
//  steady speeds, stragglers included, the typical worker strays a few
//  percent, and the allowance stays off: the barrier decides as with
//  spread 0.  The allowance is k half-ranges of each worker's own times,
//  so a slow but steady worker keeps a narrow window and is still
//  released early for.
static void
s_noise_check (kd_controller_t *self)
{
    if (!self->opts.spread_auto || !s_adaptive (self))
        return;
    uint32_t measured = 0, over_on = 0, over_off = 0;
    double on = self->opts.slack, off = S_NOISE_OFF * self->opts.slack;
    for (uint32_t rank = 0; rank < self->hi_rank; rank++) {
        s_worker_t *worker = &self->workers [rank];
        if (!s_is_member (worker) || worker->n_times < S_RECENT_TIMES)
            continue;
        double spread;
        double ms = s_expected_ms (worker, &spread);
        if (ms <= 0)
            continue;
        measured++;
        over_on += spread / ms > on;
        over_off += spread / ms > off;
    }
    //  The typical worker is one of most: wait until most have 5 times.
    if (measured < 2 || 2 * measured < self->n_active)
        return;
    double next = self->allowance;
    if (self->allowance == 0 && 2 * over_on > measured)
        next = S_NOISE_SPREAD;
    else
    if (self->allowance > 0 && 2 * over_off <= measured)
        next = 0;
    self->noise_run = next == self->allowance ? 0 : self->noise_run + 1;
    if (self->noise_run < S_NOISE_DWELL)
        return;
    self->noise_run = 0;
    s_item_t *item = s_push (self, KD_DEC_ALLOWANCE);
    item->decision.spread = next;
    if (next > 0)
        snprintf (item->reason, sizeof item->reason,
                  "%u of %u workers' recent times stray more than the slack (%.2f of their median) "
                  "for %d commits: noisy", over_on, measured, on, S_NOISE_DWELL);
    else
        snprintf (item->reason, sizeof item->reason,
                  "%u of %u workers' recent times stray more than %.2f of their median "
                  "for %d commits: steady", over_off, measured, off, S_NOISE_DWELL);
    self->allowance = next;
    self->allowance_changes++;
}

//  True when a group's phase may release: by the adaptive rule, or when
//  its quota is met, or the window has passed since its first arrival and
//  at least two have arrived.
static bool
s_group_ready (kd_controller_t *self, uint32_t g, uint64_t now)
{
    s_group_t *group = &self->groups [g];
    if (group->waiting == 0)
        return false;
    if (s_adaptive (self))
        return s_adaptive_ready (self, g, now);
    if (group->waiting >= s_quota (self, group->size))
        return true;
    uint64_t window = s_window (self);
    if (window > 0 && group->waiting >= 2 && now >= group->t_first + window)
        return true;
    //  A passed window with one arrival waits for the next arrival, an
    //  event; a deadline in the past would only make the scheduler spin.
    if (window > 0 && now < group->t_first + window)
        s_wake_at (self, group->t_first + window);
    return false;
}

//  ALSP: true when group g may not commit now, because it already made G
//  commits since another group's phase opened.  The group whose last
//  commit is oldest is never held, so some group can always go.
static bool
s_group_held (kd_controller_t *self, uint32_t g)
{
    if (!s_grouped (self))
        return false;
    s_group_t *group = &self->groups [g];
    uint32_t G = self->opts.group_staleness;
    if (group->n_recent < G)
        return false;
    //  The ring is full: its next slot holds the G-th most recent commit.
    uint64_t oldest = group->recent [group->recent_at];
    for (uint32_t h = 0; h < self->n_groups; h++)
        if (h != g && self->groups [h].size > 0 && oldest > self->groups [h].base)
            return true;
    return false;
}

//  Auto: queue a SWITCH to `mode` with its reason.
static void
s_auto_switch (kd_controller_t *self, kd_consistency_t mode, const char *format, ...)
{
    if (self->opts.model != KD_CONS_AUTO || mode == self->mode)
        return;
    s_item_t *item = s_push (self, KD_DEC_SWITCH);
    item->decision.mode = mode;
    item->decision.from = self->mode;
    va_list args;
    va_start (args, format);
    vsnprintf (item->reason, sizeof item->reason, format, args);
    va_end (args);
    self->mode = mode;
    self->switches++;
}

//  Auto with one group: after each commit, tell BSP from LSP by how many
//  of the last phases were released before every member expected in them
//  had arrived.  The rule that decides each phase is the adaptive barrier;
//  this only names what it has been doing, with hysteresis, so that one
//  noisy phase does not flip the name.
static void
s_auto_phase (kd_controller_t *self, uint32_t behind)
{
    self->recent_early = (self->recent_early << 1 | (behind > 0))
                       & ((1u << S_AUTO_WINDOW) - 1);
    //  Leaving ALSP is the regroup's call (s_auto_split), not the phases'.
    if (self->opts.model != KD_CONS_AUTO || self->mode == KD_CONS_ALSP
    ||  s_nonempty (self) > 1)
        return;
    int early = __builtin_popcount (self->recent_early);
    if (early >= S_AUTO_LSP_EARLY)
        s_auto_switch (self, KD_CONS_LSP,
                       "%d of the last %d phases released without late workers",
                       early, S_AUTO_WINDOW);
    else
    if (early == 0 && self->mode != KD_CONS_BSP)
        s_auto_switch (self, KD_CONS_BSP,
                       "the last %d phases waited for every worker: speeds are within the slack",
                       S_AUTO_WINDOW);
}

//  --group-step fastest: true when group g's update rides in the next step
//  instead of taking one of its own, because another group with members is
//  known to be faster.  The fastest group, and a group of unknown speed,
//  always step, so some group can always carry the riders.
//
//  Why: every step of a momentum optimizer moves the model by the whole
//  velocity, however little the commit adds to it.  A slow group's commit
//  of a few discounted gradients is such a step, and it lands while the
//  fast group computes, so every fast gradient in flight becomes one
//  version stale and is halved by the staleness weight.  Riding, the slow
//  update joins the fast group's next step, as LSP's late gradients do,
//  and the model moves once per fast phase.
static bool
s_rides (kd_controller_t *self, uint32_t g)
{
    if (!s_grouped (self) || self->opts.group_step != KD_GROUP_STEP_FASTEST)
        return false;
    const s_group_t *group = &self->groups [g];
    if (group->band_hi == 0)
        return false;
    for (uint32_t h = 0; h < self->n_groups; h++) {
        const s_group_t *other = &self->groups [h];
        if (h != g && other->size > 0 && other->band_hi > 0 && other->band_lo < group->band_lo)
            return true;
    }
    return false;
}

//  Weigh the entries pool [at ..] as their own commit would, and keep them
//  for the next step; pending drops go out now, in a drop-only commit.
static void
s_ride (kd_controller_t *self, size_t at, double share)
{
    s_weigh (self, at, share);
    size_t n = self->n_pool - at;
    self->riders = (kd_entry_t *) s_reserve (self->riders, &self->cap_riders,
                                             self->n_riders + n, sizeof (kd_entry_t));
    memcpy (self->riders + self->n_riders, self->pool + at, n * sizeof (kd_entry_t));
    self->n_riders += n;
    self->n_pool = at;
    s_flush_drops (self);
}

//  Commit group g's phase: its members' late gradients and its waiting
//  members' gradients as one update, then release the waiting members on
//  the new version.
static void
s_group_commit (kd_controller_t *self, uint32_t g, uint64_t now)
{
    s_group_t *group = &self->groups [g];
    size_t at = self->n_pool;
    uint32_t behind = 0;
    for (uint32_t rank = 0; rank < self->hi_rank; rank++) {
        s_worker_t *worker = &self->workers [rank];
        if (!s_is_member (worker) || worker->group != g)
            continue;
        behind += worker->state == S_COMPUTING && worker->gclock == group->clock;
        if (worker->has_late) {
            s_take (self, rank, &worker->late, group->clock);
            worker->has_late = false;
        }
        if (worker->state == S_WAITING)
            worker->dropped = !s_take (self, rank, &worker->wait, group->clock);
    }
    //  Under ALSP a group's update counts for its share of the workers, so
    //  a fast group committing often takes BSP's step per sample, no more.
    double share = 1.0;
    if (s_grouped (self))
        share = (double) group->size / (double) self->n_active;
    //  A phase whose every gradient was refused or dropped made no update:
    //  it releases its members, but no late gradient counts it as missed.
    bool made = self->n_pool > at;
    if (made && s_rides (self, g))
        s_ride (self, at, share);
    else
        s_commit (self, at, share, false, true);
    group->t_open = now;
    if (made) {
        group->clock++;
        group->base = self->version;
        self->early += behind > 0;
        s_auto_phase (self, behind);
        s_noise_check (self);
        if (group->recent) {
            group->recent [group->recent_at] = self->version;
            group->recent_at = (group->recent_at + 1) % self->opts.group_staleness;
            if (group->n_recent < self->opts.group_staleness)
                group->n_recent++;
        }
    }
    for (uint32_t rank = 0; rank < self->hi_rank; rank++) {
        s_worker_t *worker = &self->workers [rank];
        if (worker->state == S_WAITING && worker->group == g)
            s_release (self, rank, worker->clock + 1, worker->dropped, now);
    }
}

//  Release every phase whose condition holds, until none does.
static void
s_evaluate (kd_controller_t *self, uint64_t now)
{
    if (!s_phased (self))
        return;
    bool acted = true;
    self->deadline = UINT64_MAX;
    while (acted && self->n_active > 0) {
        acted = false;
        self->deadline = UINT64_MAX;
        for (uint32_t g = 0; g < self->n_groups; g++)
            if (s_group_ready (self, g, now) && !s_group_held (self, g)) {
                s_group_commit (self, g, now);
                acted = true;
            }
    }
}

//  Phase engine arrival: count it toward its group's quota when its group
//  has not committed since the worker's release; otherwise it is late:
//  queue it for the group's next commit (at most s commits missed), or
//  drop it, and release the worker at once.
static void
s_arrive_phase (kd_controller_t *self, uint32_t rank, uint64_t base, uint32_t samples,
                bool refused, uint64_t now)
{
    s_worker_t *worker = &self->workers [rank];
    s_group_t *group = &self->groups [worker->group];
    s_grad_t grad = {
        .clock = worker->clock, .base = base, .gclock = worker->gclock,
        .lease = worker->lease, .samples = samples, .refused = refused
    };
    worker->lease = (kd_lease_t) { 0 };
    uint64_t missed = group->clock - worker->gclock;
    if (missed == 0) {
        worker->state = S_WAITING;
        worker->wait = grad;
        s_track (self, rank);
        if (group->waiting == 0)
            group->t_first = now;
        group->waiting++;
        self->n_waiting++;
    }
    else
    if (missed <= s_bound (self) && !refused) {
        //  A commit of its group flushes every late gradient of the group,
        //  and a worker can only be late again after such a commit.
        assert (!worker->has_late);
        worker->has_late = true;
        worker->late = grad;
        s_release (self, rank, worker->clock + 1, false, now);
    }
    else {
        //  The worker takes its next lease before the dropped one goes back:
        //  otherwise a persistent straggler would be handed its own rows
        //  again and again, and they would never be applied.  Returned
        //  now, they go to the next worker released.
        kd_lease_t lease = grad.lease;
        grad.lease = (kd_lease_t) { 0 };
        s_drop (self, rank, &grad);
        s_flush_drops (self);
        s_release (self, rank, worker->clock + 1, true, now);
        if (self->sampler)
            kd_sampler_give_back (self->sampler, lease);
    }
}


//  --------------------------------------------------------------------------
//  ALSP grouping

//  Order speeds by key, then by rank, so grouping is deterministic.
static int
s_speed_compare (const void *a, const void *b)
{
    const s_speed_t *left = (const s_speed_t *) a;
    const s_speed_t *right = (const s_speed_t *) b;
    if (left->key != right->key)
        return left->key < right->key ? -1 : 1;
    return left->rank < right->rank ? -1 : (left->rank > right->rank);
}

//  Merge segment j + 1 into segment j.
static void
s_segment_merge (kd_controller_t *self, uint32_t *n_segs, uint32_t j)
{
    self->seg_len [j] += self->seg_len [j + 1];
    for (uint32_t k = j + 1; k + 1 < *n_segs; k++) {
        self->seg_len [k] = self->seg_len [k + 1];
        self->seg_first [k] = self->seg_first [k + 1];
    }
    (*n_segs)--;
}

//  Log-space gap between segment j and segment j + 1.
static double
s_segment_gap (kd_controller_t *self, uint32_t j)
{
    uint32_t first = self->seg_first [j + 1];
    return self->speeds [first].key - self->speeds [first - 1].key;
}

//  Mean speed in ms of the members of segment j.
static double
s_segment_ms (kd_controller_t *self, uint32_t j)
{
    double sum = 0;
    uint32_t first = self->seg_first [j];
    for (uint32_t i = first; i < first + self->seg_len [j]; i++)
        sum += exp (self->speeds [i].key);
    return sum / self->seg_len [j];
}

//  Auto: keep in the fastest group every segment that LSP's bound can
//  carry, and give a group of its own only to a segment that is more than
//  s + 1 times slower than the fastest.  One group waits for whoever is
//  close and leaves the rest behind for at most s commits, so a worker
//  slower than that would have every gradient dropped: its compute counts
//  only in a group of its own (ALSP).  Everyone else gains nothing from a
//  group barrier of their own, only its cost.
//
//  Once split, the slowest group stays apart until it is within
//  (s + 1) / S_AUTO_BAND of the fastest.  A straggler's measured ratio
//  moves with the machine's load; with one threshold both ways, a ratio
//  near it flipped the rule at every regroup.
static void
s_auto_split (kd_controller_t *self, uint32_t *n_segs, uint32_t n)
{
    double fastest = s_segment_ms (self, 0);
    double slowest = s_segment_ms (self, *n_segs - 1);
    double limit = (double) (self->opts.staleness + 1);
    double keep = self->mode == KD_CONS_ALSP ? limit / S_AUTO_BAND : limit;
    while (*n_segs > 1 && s_segment_ms (self, 1) <= limit * fastest) {
        if (*n_segs == 2 && s_segment_ms (self, 1) > keep * fastest)
            break;
        s_segment_merge (self, n_segs, 0);
    }
    if (*n_segs > 1) {
        double slow = s_segment_ms (self, *n_segs - 1);
        s_auto_switch (self, KD_CONS_ALSP,
                       "speeds split: %u workers at %.0f ms, the slowest group at %.0f ms (%.1fx, over s + 1 = %.0f)",
                       self->seg_len [0], fastest, slow, slow / fastest, limit);
    }
    else
    if (self->mode == KD_CONS_ALSP)
        s_auto_switch (self, KD_CONS_LSP,
                       "speeds within (s + 1) / %.1f = %.1f of the fastest (the slowest at %.1fx): one group of %u",
                       S_AUTO_BAND, keep, slowest / fastest, n);
}

//  A group slot to reuse or open: empty, with nobody moving into it.
static uint32_t
s_free_slot (kd_controller_t *self, const bool *taken)
{
    for (uint32_t g = 0; g < self->n_slots; g++)
        if (!taken [g] && (g >= self->n_groups
                           || (self->groups [g].size == 0 && self->groups [g].waiting == 0)))
            return g;
    return UINT32_MAX;
}

//  Open slot g for a new group: its clock starts at the lowest clock of the
//  groups with members, so the group bound neither holds it nor others.
static void
s_open_slot (kd_controller_t *self, uint32_t g, uint64_t now)
{
    uint64_t clock = UINT64_MAX;
    for (uint32_t h = 0; h < self->n_groups; h++)
        if (self->groups [h].size > 0 && self->groups [h].clock < clock)
            clock = self->groups [h].clock;
    s_group_t *group = &self->groups [g];
    uint64_t *recent = group->recent;
    *group = (s_group_t) {
        .base = self->version, .clock = clock == UINT64_MAX ? 0 : clock,
        .t_open = now, .recent = recent
    };
    if (!group->recent) {
        group->recent = (uint64_t *) calloc (self->opts.group_staleness, sizeof (uint64_t));
        if (!group->recent)
            abort ();
    }
    if (g >= self->n_groups)
        self->n_groups = g + 1;
}

//  ALSP: form groups from the speeds and assign every member the group it
//  moves to at its next release.  Nobody waits for a regroup: a worker
//  that keeps its group is not touched, and one that moves does so when
//  it is next released, so no barrier is needed and no gradient is lost.
//  New groups take the slots of the old groups they overlap most.
static void
s_regroup (kd_controller_t *self, uint64_t now)
{
    //  Sort the members by log speed; cut where neighbours differ by more
    //  than rho.
    uint32_t n = 0;
    for (uint32_t rank = 0; rank < self->hi_rank; rank++) {
        s_worker_t *worker = &self->workers [rank];
        if (s_is_member (worker) && worker->ewma > 0)
            self->speeds [n++] = (s_speed_t) { log (worker->ewma), rank };
    }
    if (n == 0)
        return;
    qsort (self->speeds, n, sizeof (s_speed_t), s_speed_compare);
    double cut = log (self->opts.group_ratio);
    uint32_t n_segs = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i == 0 || self->speeds [i].key - self->speeds [i - 1].key > cut) {
            self->seg_first [n_segs] = i;
            self->seg_len [n_segs++] = 0;
        }
        self->seg_len [n_segs - 1]++;
    }
    //  A too-small group joins its nearest neighbour in log space.  Left of
    //  j every segment is big enough, so merging left never needs a recheck.
    uint32_t j = 0;
    while (j < n_segs && n_segs > 1) {
        if (self->seg_len [j] >= self->opts.min_group) {
            j++;
            continue;
        }
        bool left = j + 1 == n_segs
                 || (j > 0 && s_segment_gap (self, j - 1) <= s_segment_gap (self, j));
        if (left)
            s_segment_merge (self, &n_segs, j - 1);
        else
            s_segment_merge (self, &n_segs, j);
    }
    //  Too many groups: merge the closest adjacent pair until few enough.
    while (n_segs > self->opts.max_groups) {
        uint32_t best = 0;
        for (uint32_t k = 1; k + 1 < n_segs; k++)
            if (s_segment_gap (self, k) < s_segment_gap (self, best))
                best = k;
        s_segment_merge (self, &n_segs, best);
    }
    if (self->opts.model == KD_CONS_AUTO)
        s_auto_split (self, &n_segs, n);
    //  Map segments to slots greedily by overlap with the slots the members
    //  are headed for now: the pair with most members in common first.
    //  Regroups are rare, so the scratch is allocated here.
    bool *slot_taken = (bool *) calloc (self->n_slots, sizeof (bool));
    uint32_t *count = (uint32_t *) calloc (self->n_slots, sizeof (uint32_t));
    if (!slot_taken || !count)
        abort ();
    for (uint32_t s = 0; s < n_segs; s++)
        self->seg_slot [s] = UINT32_MAX;
    for (uint32_t round = 0; round < n_segs; round++) {
        uint32_t best_seg = UINT32_MAX, best_slot = UINT32_MAX, best_count = 0;
        for (uint32_t s = 0; s < n_segs; s++) {
            if (self->seg_slot [s] != UINT32_MAX)
                continue;
            uint32_t first = self->seg_first [s], end = first + self->seg_len [s];
            for (uint32_t i = first; i < end; i++)
                count [self->workers [self->speeds [i].rank].next_group]++;
            for (uint32_t i = first; i < end; i++) {
                uint32_t slot = self->workers [self->speeds [i].rank].next_group;
                if (!slot_taken [slot] && count [slot] > best_count) {
                    best_count = count [slot];
                    best_seg = s;
                    best_slot = slot;
                }
            }
            for (uint32_t i = first; i < end; i++)
                count [self->workers [self->speeds [i].rank].next_group] = 0;
        }
        if (best_seg == UINT32_MAX)
            break;
        self->seg_slot [best_seg] = best_slot;
        slot_taken [best_slot] = true;
    }
    bool changed = false;
    for (uint32_t s = 0; s < n_segs; s++) {
        if (self->seg_slot [s] == UINT32_MAX) {
            uint32_t slot = s_free_slot (self, slot_taken);
            assert (slot != UINT32_MAX);
            slot_taken [slot] = true;
            self->seg_slot [s] = slot;
            s_open_slot (self, slot, now);
            changed = true;
        }
        s_group_t *group = &self->groups [self->seg_slot [s]];
        if (!group->recent) {
            group->recent = (uint64_t *) calloc (self->opts.group_staleness, sizeof (uint64_t));
            if (!group->recent)
                abort ();
        }
        group->band_lo = group->band_hi = 0;
        for (uint32_t i = self->seg_first [s]; i < self->seg_first [s] + self->seg_len [s]; i++) {
            s_worker_t *worker = &self->workers [self->speeds [i].rank];
            changed |= worker->next_group != self->seg_slot [s];
            worker->next_group = self->seg_slot [s];
            if (group->band_hi == 0 || worker->ewma < group->band_lo)
                group->band_lo = worker->ewma;
            if (worker->ewma > group->band_hi)
                group->band_hi = worker->ewma;
        }
    }
    free (slot_taken);
    free (count);
    for (uint32_t rank = 0; rank < self->hi_rank; rank++) {
        s_worker_t *worker = &self->workers [rank];
        worker->outside = 0;
        s_track (self, rank);
    }
    self->t_regroup = now;
    self->formed = true;
    if (changed)
        self->regroups++;
}

//  Reset ALSP to its first formation: one group, band unknown.
static void
s_groups_reset (kd_controller_t *self)
{
    for (uint32_t g = 1; g < self->n_groups; g++)
        self->groups [g].size = self->groups [g].waiting = 0;
    uint64_t *recent = self->groups [0].recent;
    self->groups [0] = (s_group_t) { .base = self->version, .recent = recent };
    self->n_groups = 1;
    self->formed = false;       //  an emptied cluster groups afresh
}

//  The slot of the slowest group with members (highest band), where
//  joiners go: a fast worker there only waits, a slow worker in a fast
//  group would hold that group's quota.
static uint32_t
s_slowest_group (kd_controller_t *self)
{
    uint32_t slowest = 0;
    double hi = -1;
    for (uint32_t g = 0; g < self->n_groups; g++)
        if (self->groups [g].size > 0 && self->groups [g].band_hi > hi) {
            hi = self->groups [g].band_hi;
            slowest = g;
        }
    return slowest;
}

//  Admit pending workers when no phase is in progress for them: always
//  under ASP/SSP; under the phase engine when their group has nobody
//  waiting, that is at a phase boundary.
static void
s_admit (kd_controller_t *self, uint64_t now)
{
    if (self->n_pending == 0)
        return;
    uint32_t g = 0;
    if (s_phased (self)) {
        if (s_grouped (self)) {
            if (self->n_active == 0)
                s_groups_reset (self);
            g = s_slowest_group (self);
        }
        if (self->groups [g].waiting > 0)
            return;
    }
    uint64_t clock = s_min_clock (self);
    for (uint32_t rank = 0; rank < self->hi_rank; rank++)
        if (self->workers [rank].state == S_PENDING) {
            self->workers [rank].group = self->workers [rank].next_group = g;
            s_release (self, rank, clock, false, now);
        }
}

//  ALSP: true when a speed lies outside a group's band by more than the
//  slack; an unknown band contains nothing.
static bool
s_outside (const s_group_t *group, double value)
{
    if (group->band_hi == 0)
        return true;
    return value > group->band_hi * S_BAND_SLACK
        || value < group->band_lo / S_BAND_SLACK;
}

//  One speed sample of a member, for its group: from its own arrivals
//  (release to arrival, which leaves out barrier waits) or from the
//  monitor's telemetry (compute, push and pull on the worker, without the
//  messages' latency).  The two measure slightly different spans, so when
//  a rank's source changes its average starts afresh instead of mixing
//  them, and so does its run outside the band.
static void
s_observe_speed (kd_controller_t *self, uint32_t rank, double iter_ms, bool telemetry)
{
    s_worker_t *worker = &self->workers [rank];
    if (worker->n_speed > 0 && worker->ewma_telemetry != telemetry) {
        worker->ewma = 0;
        worker->outside = 0;
    }
    worker->ewma_telemetry = telemetry;
    worker->ewma = worker->ewma > 0
                 ? S_EWMA_ALPHA * iter_ms + (1 - S_EWMA_ALPHA) * worker->ewma
                 : iter_ms;
    worker->n_speed++;
    if (s_grouped (self)) {
        //  Both the sample and the average must be out: one spike moves
        //  the average, but the next normal sample resets the run.
        s_group_t *group = &self->groups [worker->next_group];
        bool out = s_outside (group, iter_ms) && s_outside (group, worker->ewma);
        worker->outside = out ? worker->outside + 1 : 0;
    }
    s_track (self, rank);
}

//  An arrival times the iteration since the release.  The adaptive
//  barrier always learns from it, as it predicts exactly that span.  The
//  groups learn from it too, unless the monitor's telemetry for the rank
//  is fresh: then that is their source, and arrivals only fill the gaps.
static void
s_observe_arrival (kd_controller_t *self, uint32_t rank, uint64_t now_ms)
{
    s_worker_t *worker = &self->workers [rank];
    if (now_ms <= worker->t_release)
        return;
    double ms = (double) (now_ms - worker->t_release);
    worker->recent [worker->n_times % S_RECENT_TIMES] = ms;
    worker->n_times++;
    if (self->opts.telemetry_fresh_ms > 0 && worker->t_telemetry
    &&  now_ms < worker->t_telemetry + self->opts.telemetry_fresh_ms) {
        self->untimed++;
        return;
    }
    s_observe_speed (self, rank, ms, false);
}

//  ALSP: regroup when every member has a couple of speed samples and
//  either no groups were formed yet (the first grouping waits for no
//  dwell: until then ALSP is LSP over everyone), or some member has been
//  outside its band long enough and the dwell has passed since the last
//  regroup.
static void
s_check_regroup (kd_controller_t *self, uint64_t now)
{
    if (!s_grouped (self) || self->n_active == 0
    ||  self->n_unready > 0)
        return;
    if (!self->formed
    ||  (self->n_outside > 0 && now >= self->t_regroup + self->opts.regroup_dwell_ms))
        s_regroup (self, now);
}


//  --------------------------------------------------------------------------
//  Events

//  Start of a valid event: recycle the drained queue, note the start time.
static void
s_begin (kd_controller_t *self, uint64_t now)
{
    if (self->head == self->n_items) {
        self->head = self->n_items = 0;
        self->n_pool = self->n_gpool = 0;
    }
    if (!self->started) {
        self->started = true;
        self->t_regroup = now;
        self->groups [0].t_open = now;
    }
}

//  True when some member will move to another group at its next release.
static bool
s_moves_pending (kd_controller_t *self)
{
    for (uint32_t rank = 0; rank < self->hi_rank; rank++) {
        s_worker_t *worker = &self->workers [rank];
        if (s_is_member (worker) && worker->next_group != worker->group)
            return true;
    }
    return false;
}

//  Auto: a split whose slower groups emptied (their workers left, or sped
//  up and moved back) is one group again, whatever regroup made it.
static void
s_auto_rejoin (kd_controller_t *self)
{
    if (self->opts.model == KD_CONS_AUTO && self->mode == KD_CONS_ALSP && self->n_active > 0
    &&  s_nonempty (self) <= 1 && !s_moves_pending (self))
        s_auto_switch (self, KD_CONS_LSP, "one group left, of %u workers", self->n_active);
}

//  End of an event: release what its time or its changes allow, name
//  leftover drops, admit joiners, publish groups.  Every event runs the
//  time rules, so a window or a dwell fires on the first event after it
//  passes.
static void
s_finish (kd_controller_t *self, uint64_t now)
{
    s_check_regroup (self, now);
    if (s_phased (self))
        s_evaluate (self, now);
    else
        s_release_bounded (self, now);
    s_flush_drops (self);
    //  Riders wait for a step; with nobody left to take one, they are one.
    if (self->n_riders > 0 && self->n_active == 0)
        s_commit (self, self->n_pool, 1.0, false, true);
    s_admit (self, now);
    s_auto_rejoin (self);
    if (self->groups_dirty && s_grouped (self))
        s_push_groups (self);
    self->groups_dirty = false;
    self->min_clock = s_min_clock (self);
}

//  True when rank is a released member.
static bool
s_member (kd_controller_t *self, uint32_t rank)
{
    return rank < self->opts.max_workers && s_is_member (&self->workers [rank]);
}

//  A worker wants in, holding a lease ahead or not; it is admitted at the
//  next phase boundary.
static int
s_join (kd_controller_t *self, uint32_t rank, bool ahead, uint64_t now_ms)
{
    if (rank >= self->opts.max_workers
    ||  self->workers [rank].state != S_INACTIVE)
        return -1;
    s_begin (self, now_ms);
    self->workers [rank] = (s_worker_t) { .state = S_PENDING, .ahead_on = ahead };
    s_track (self, rank);
    self->n_pending++;
    if (rank >= self->hi_rank)
        self->hi_rank = rank + 1;
    s_finish (self, now_ms);
    return 0;
}

//  A worker wants in, holding one lease at a time.
int
kd_controller_join (kd_controller_t *self, uint32_t rank, uint64_t now_ms)
{
    assert (self);
    return s_join (self, rank, false, now_ms);
}

//  The phase engine has no use for a lease ahead: a worker there waits at
//  the barrier for the very model its next clock must be computed on.
int
kd_controller_join_ahead (kd_controller_t *self, uint32_t rank, uint64_t now_ms)
{
    assert (self);
    if (s_phased (self))
        return -1;
    return s_join (self, rank, true, now_ms);
}

//  A worker is gone: drop what it staged, give back its leases, and release
//  what its absence completes.
int
kd_controller_leave (kd_controller_t *self, uint32_t rank, uint64_t now_ms)
{
    assert (self);
    if (rank >= self->opts.max_workers
    ||  self->workers [rank].state == S_INACTIVE)
        return -1;
    s_begin (self, now_ms);
    s_worker_t *worker = &self->workers [rank];
    if (worker->state == S_PENDING)
        self->n_pending--;
    else {
        s_group_t *group = &self->groups [worker->group];
        if (worker->state == S_WAITING) {
            //  Only the phase engine stages gradients while a worker waits.
            if (s_phased (self)) {
                s_drop (self, rank, &worker->wait);
                group->waiting--;
            }
            self->n_waiting--;
        }
        //  The ahead lease goes back first, so that the current one, which
        //  the book handed out earlier, is the first to be leased again.
        if (self->sampler)
            kd_sampler_give_back (self->sampler, worker->ahead);
        if (worker->state == S_COMPUTING && self->sampler)
            kd_sampler_give_back (self->sampler, worker->lease);
        if (worker->has_late)
            s_drop (self, rank, &worker->late);
        group->size--;
        self->n_active--;
        self->groups_dirty = true;
    }
    *worker = (s_worker_t) { .state = S_INACTIVE };
    s_track (self, rank);
    if (s_grouped (self) && self->n_active == 0)
        s_groups_reset (self);
    s_finish (self, now_ms);
    return 0;
}

//  A worker staged the gradient for (rank, clock), computed on base from
//  `samples` rows (its lease's rows when leases are on).
//  An arrival may come only from a computing worker, for the clock it was
//  released on, computed on a version between its release's and ours.
static bool
s_arrival_valid (kd_controller_t *self, uint32_t rank, uint64_t clock, uint64_t base)
{
    if (rank >= self->opts.max_workers)
        return false;
    s_worker_t *worker = &self->workers [rank];
    return worker->state == S_COMPUTING && clock == worker->clock
        && base >= worker->floor && base <= self->version;
}

int
kd_controller_arrive (kd_controller_t *self, uint32_t rank, uint64_t clock,
                      uint64_t base, uint64_t samples, uint64_t now_ms)
{
    assert (self);
    if (!s_arrival_valid (self, rank, clock, base))
        return -1;
    s_worker_t *worker = &self->workers [rank];
    //  With leases the gradient covers exactly the leased rows; without,
    //  the worker's count stands, and a count of 0 weighs as one row.
    if (self->sampler && samples != worker->lease.count)
        return -1;
    uint32_t n = samples == 0 ? 1 : samples > UINT32_MAX ? UINT32_MAX : (uint32_t) samples;
    s_begin (self, now_ms);
    s_observe_arrival (self, rank, now_ms);
    if (s_phased (self))
        s_arrive_phase (self, rank, base, n, false, now_ms);
    else
        s_arrive_now (self, rank, base, n, now_ms);
    s_finish (self, now_ms);
    return 0;
}

int
kd_controller_refuse (kd_controller_t *self, uint32_t rank, uint64_t clock,
                      uint64_t base, uint64_t now_ms)
{
    assert (self);
    if (!s_arrival_valid (self, rank, clock, base))
        return -1;
    s_worker_t *worker = &self->workers [rank];
    s_begin (self, now_ms);
    s_observe_arrival (self, rank, now_ms);
    self->refused++;
    if (s_phased (self))
        //  It still counts at the barrier, as the worker did its
        //  iteration, but it is only ever named in drops, never committed:
        //  BSP stays in lockstep and its rows go back when it is dropped.
        s_arrive_phase (self, rank, base, worker->lease.count, true, now_ms);
    else {
        //  ASP/SSP: a shard that accepted its slice applied it; the refused
        //  slices were not, so the rows go back to be learned in full, once
        //  the worker took its next lease.
        kd_lease_t lease = worker->lease;
        worker->lease = (kd_lease_t) { 0 };
        worker->state = S_WAITING;
        self->n_waiting++;
        s_track (self, rank);
        s_release_bounded (self, now_ms);
        if (self->sampler)
            kd_sampler_give_back (self->sampler, lease);
    }
    s_finish (self, now_ms);
    return 0;
}

//  A worker reports how long an iteration took.
int
kd_controller_telemetry (kd_controller_t *self, uint32_t rank,
                         double iter_ms, uint64_t now_ms)
{
    assert (self);
    if (!s_member (self, rank) || !isfinite (iter_ms) || iter_ms <= 0)
        return -1;
    s_begin (self, now_ms);
    s_observe_speed (self, rank, iter_ms, true);
    self->workers [rank].t_telemetry = now_ms ? now_ms : 1;
    s_finish (self, now_ms);
    return 0;
}

//  Time passes: windows and dwell timers fire.
void
kd_controller_tick (kd_controller_t *self, uint64_t now_ms)
{
    assert (self);
    s_begin (self, now_ms);
    s_finish (self, now_ms);
}

//  Arrivals whose times the groups did not use, telemetry being fresh.
uint64_t
kd_controller_untimed (kd_controller_t *self)
{
    assert (self);
    return self->untimed;
}

//  When a tick may next release a phase.
uint64_t
kd_controller_deadline (kd_controller_t *self)
{
    assert (self);
    return self->deadline;
}


//  --------------------------------------------------------------------------
//  Introspection

//  Current model version.
uint64_t
kd_controller_version (kd_controller_t *self)
{
    assert (self);
    return self->version;
}

//  Number of active (released) workers.
size_t
kd_controller_active (kd_controller_t *self)
{
    assert (self);
    return self->n_active;
}

//  True when rank is an active worker.
bool
kd_controller_is_active (kd_controller_t *self, uint32_t rank)
{
    assert (self);
    return s_member (self, rank);
}

//  Lowest clock an active worker computes or waits to compute.
uint64_t
kd_controller_min_clock (kd_controller_t *self)
{
    assert (self);
    return self->min_clock;
}

//  Gradients dropped so far.
uint64_t
kd_controller_refused (kd_controller_t *self)
{
    assert (self);
    return self->refused;
}

uint64_t
kd_controller_dropped (kd_controller_t *self)
{
    assert (self);
    return self->dropped;
}

//  Regroups that changed the groups so far.
uint64_t
kd_controller_regroups (kd_controller_t *self)
{
    assert (self);
    return self->regroups;
}

//  Group of an active worker, UINT32_MAX for others.
uint32_t
kd_controller_group_of (kd_controller_t *self, uint32_t rank)
{
    assert (self);
    if (!s_member (self, rank))
        return UINT32_MAX;
    return s_grouped (self) ? self->workers [rank].group : 0;
}

//  The effective model.
kd_consistency_t
kd_controller_mode (kd_controller_t *self)
{
    assert (self);
    return self->mode;
}

//  Auto: changes of the effective model so far.
uint64_t
kd_controller_switches (kd_controller_t *self)
{
    assert (self);
    return self->switches;
}

//  The adaptive barrier's spread allowance in force.
double
kd_controller_allowance (kd_controller_t *self)
{
    assert (self);
    return self->allowance;
}

//  --barrier-spread auto: changes of the allowance so far.
uint64_t
kd_controller_allowance_changes (kd_controller_t *self)
{
    assert (self);
    return self->allowance_changes;
}

//  Phases a rank held only through its spread window (diagnostics).
uint64_t
kd_controller_spread_holds (kd_controller_t *self, uint32_t rank)
{
    assert (self);
    return rank < self->opts.max_workers ? self->workers [rank].spread_holds : 0;
}

//  Phases released before every member expected in them had arrived.
uint64_t
kd_controller_early_releases (kd_controller_t *self)
{
    assert (self);
    return self->early;
}

//  Number of groups with members.
uint32_t
kd_controller_group_count (kd_controller_t *self)
{
    assert (self);
    uint32_t count = s_nonempty (self);
    return count > 0 ? count : 1;
}

//  The lease book, or NULL when leases are off.
kd_sampler_t *
kd_controller_sampler (kd_controller_t *self)
{
    assert (self);
    return self->sampler;
}

//  True for ASP and SSP, whose gradients the shards apply on arrival.
bool
kd_controller_direct (kd_controller_t *self)
{
    assert (self);
    return !s_phased (self);
}
