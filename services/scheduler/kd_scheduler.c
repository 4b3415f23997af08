/*  kd_scheduler: the scheduler's service loop.

    The scheduler is the single authority on membership and model versions.
    Shards, workers and the monitor register with HELLO and get a rank
    (the same rank again when a known name registers again).  Once the
    configured shards and workers are in, it sends START with the shards'
    address book, and from then on feeds every ARRIVE, LEAVE and death to the
    consistency controller (common/core/kd_controller.c) and sends out what it
    decides: COMMIT to every shard, RELEASE to one worker.  Every RELEASE
    carries the worker's next lease, the training rows it computes on, from
    the controller's sampler.  Under ASP and SSP the shards apply gradients
    on arrival and the scheduler only gates clocks: their commits are
    bookkeeping and are not sent.  Training ends on epochs (every row of
    them applied), time or target accuracy (a rolling mean of the
    monitor's evaluations); the scheduler then stops the workers, asks the
    monitor for a final evaluation, writes the summary and stops everyone
    else.  The member table, its indexes and their invariants are
    kd_members.c's; what to answer a HELLO, and when, is decided here.
*/
#include "kd_scheduler.h"
#include "kd_aggregators.h"
#include "kd_guard.h"
#include "kd_members.h"
#include "kd_role.h"
#include "kd_server.h"
#include "kd_service.h"
#include "kd_speed_feed.h"
#include <math.h>
#include <msgpack.h>

#define S_STALE_BINS    1024            //  staleness histogram bins
#define S_FINAL_EVAL_MS 30000           //  wait for the final evaluation
#define S_LOSS_ALPHA    0.02            //  EWMA weight of one train loss
#define S_ACC_WINDOW_MS 1000            //  rolling window of the target
#define S_ACC_HISTORY   64              //  evaluations kept for it
#define S_MAX_REGROUPS  256             //  regroup times kept for the summary
#define S_MAX_SWITCHES  64              //  auto's switches kept for the summary
#define S_MAX_POLL_MS   20              //  longest poll: run limits, windows
#define S_COMMIT_SCRATCH (2 * KD_MEMBERS_MAX_WORKERS)
#define S_MAX_BATCH     8192            //  largest batch (config bound)
#define S_MAX_EPOCH_LOG 1000            //  epochs whose share is reported  //  entries a commit holds without
                                        //  a malloc: a late and a fresh
                                        //  gradient per rank at most

typedef enum { S_WAITING, S_TRAINING, S_FINISHING, S_DONE } s_state_t;

static const double s_milestones [] = { 0.70, 0.75, 0.80, 0.82, 0.85 };
#define S_N_MILESTONES (sizeof s_milestones / sizeof s_milestones [0])

#define S_MAX_REPLICAS  8               //  replicas of a range (config bound)
#define S_MAX_QUEUED    100000          //  commits kept for a silent primary
#define S_NAME_SHOWN    96              //  bytes of a member's name that a
                                        //  detail with fields after it shows

//  One key range's replicas, in chain order: the primary first, the tail
//  last.  Commits the primary has not acknowledged are kept, so that a
//  promoted backup gets them again (it applies each version once).
typedef struct {
    uint64_t ranks [S_MAX_REPLICAS];    //  shard ranks, head first
    size_t n;                   //  live members
    zlistx_t *unacked;          //  kd_msg_t COMMITs sent to the primary
    bool lost;                  //  every replica died while training
    uint64_t gather_until;      //  ms: replicas of a lost range coming back
                                //  gather until then (0: not gathering)
    uint64_t gen;               //  generation: new whenever a replica is
                                //  marked unsynced; every CHAIN names it
} s_chain_t;

//  One change of auto's effective model.
typedef struct {
    double at_s;                //  seconds after start
    kd_consistency_t from;      //  effective model before
    kd_consistency_t to;        //  and after
    char reason [160];          //  the controller's words
} s_switch_t;

//  A change of the barrier's spread allowance (--barrier-spread auto).
typedef struct {
    double at_s;                //  s after START
    double spread;              //  the allowance from then on
    char reason [160];          //  the controller's words
} s_allowance_t;

typedef struct {
    kd_config_t *config;        //  settings
    zsock_t *router;            //  every peer talks to us here
    s_state_t state;            //  lifecycle
    kd_controller_t *ctl;       //  consistency decisions (and leases)
    kd_members_t *members;      //  every peer that said HELLO, by name,
                                //  routing id, rank and registering key
    kd_guard_t *guard;          //  connection and malformed-input limits
    kd_msg_source_t src;        //  where the message being handled came from
    zframe_t *via;              //  the aggregator that relayed it, or NULL
    kd_aggregators_t *aggs;     //  bundles for workers behind aggregators
    size_t n_shards;            //  shard processes: n_ranges x replicas
    size_t n_ranges;            //  key ranges (the shards setting)
    size_t replicas;            //  replicas of each range (1: none)
    s_chain_t chains [KD_MEMBERS_MAX_SHARDS];    //  by range
    size_t min_workers;         //  workers needed to start
    size_t max_live_workers;    //  most workers training at once
    kd_model_kind_t kind;       //  model
    uint32_t hidden;            //  mlp hidden units
    size_t n_params;            //  flat parameter count (external: 0 until known)
    bool external;              //  the model's layout comes from the first worker
    kd_tensor_t layout [KD_MODEL_MAX_TENSORS];  //  external: its tensors
    size_t n_layout;            //  external: tensors in layout
    bool keyed;                 //  external: a keyed (sparse) model, one tensor
                                //  whose rows are the keys: n_params counts keys
    bool sparse_lr;             //  the built-in keyed model: its metric is AUC
    bool monitor_keyed;         //  the monitor evaluates keyed models (HELLO KEYS 1)
    bool short_path;            //  --phase-path short under BSP, LSP, ALSP: an
                                //  ARRIVE with `staged` counts once every
                                //  range's primary sent STAGED (9.3.1)
    char optimizer [KD_OPTIMIZER_SPEC_MAX];  //  the shards' update rule (spec)
    uint64_t train_rows;        //  rows in the training set (min reported)
    double max_seconds;         //  max-seconds, read once: the tick checks it
    double epochs;              //  epochs, read once: every commit checks it
    double target_accuracy;     //  target-accuracy, read once: every evaluation
    uint64_t t0_ms;             //  wall ms at START
    double t0_mono;             //  monotonic ms at START
    double t_end;               //  monotonic ms when training ended
    uint64_t samples;           //  samples of applied gradients
    uint64_t updates;           //  commits with entries
    uint64_t phases;            //  decisions that released workers
    uint64_t stale_hist [S_STALE_BINS + 1];  //  applied-gradient staleness
    uint64_t stale_max;         //  largest staleness applied
    uint64_t dropped;           //  gradients dropped
    uint64_t regroups;          //  regroups that changed the groups
    double regroup_s [S_MAX_REGROUPS];  //  when they happened, s after start
    size_t n_regroup_s;         //  entries in regroup_s
    s_switch_t switches [S_MAX_SWITCHES];  //  auto: first switches, for the summary
    size_t n_switches;          //  entries in switches
    s_allowance_t allowances [S_MAX_SWITCHES];  //  first allowance changes
    size_t n_allowances;        //  entries in allowances
    uint32_t *groups;           //  last group assignment, by rank
    size_t n_groups;            //  its length
    double train_loss;          //  EWMA of reported losses
    bool have_loss;             //  train_loss is set
    double wait_total, busy_total;  //  worker barrier wait and work, ms
    double accuracy;            //  last test accuracy from the monitor
    uint64_t accuracy_version;  //  version it was measured at
    double milestone_s [S_N_MILESTONES];  //  seconds to reach, or -1
    double acc_value [S_ACC_HISTORY];     //  recent evaluations, a ring
    uint64_t acc_ts [S_ACC_HISTORY];      //  their wall ms
    size_t acc_at, acc_n;       //  ring position and fill
    double stop_accuracy;       //  rolling mean that met the target, or -1
    uint64_t final_version;     //  version the final eval must cover
    uint64_t finish_deadline;   //  ms: give up on the final eval
    bool eval_pending;          //  finishing: the final eval is awaited
    bool pulls_pending;         //  finishing: external workers may still
                                //  pull the final model (until they leave)
    uint64_t pulls_deadline;    //  ms: stop waiting for them
    char reason [64];           //  why training ended
    uint64_t next_heartbeat;    //  ms
    uint64_t last_beat;         //  ms: the last heartbeat tick
    uint64_t pauses;            //  ticks over two intervals late (starved, stopped)
    uint64_t next_status;       //  ms
    int heartbeat_ms;           //  interval
    int status_ms;              //  interval of STATUS to the monitor
    kd_server_t *server;        //  the request loop
    int liveness;               //  missed intervals that mean death
    uint64_t session;           //  this scheduler instance, sent in WELCOME
    uint64_t registrations;     //  worker registrations so far: each one's
                                //  reg is session + this count (9.3.1)
    uint64_t resumed_from;      //  version training resumed from (0 = fresh)
    uint64_t commit_u [4][S_COMMIT_SCRATCH];  //  s_do_commit: ranks, clocks,
                                //  drop ranks, drop clocks, without a malloc
    double commit_w [S_COMMIT_SCRATCH];       //  s_do_commit: weights
    uint32_t *lease_rows;       //  scratch: a lease's rows, batch entries
    uint64_t lease_u [S_MAX_BATCH];           //  scratch: the same as uints
    uint64_t epochs_done;       //  epochs complete at the last check
    double epoch_share [S_MAX_EPOCH_LOG];     //  share of each completed
                                //  epoch's rows applied (1.0 by design)
    kd_history_t *history;      //  --history: leases and commits (or NULL)
    char *history_buf;          //  scratch: a commit's arrays as JSON
    kd_speed_feed_t *feed;      //  --speed-source telemetry: the monitor's
                                //  per-worker timings (or NULL)
    float feed_compute [KD_MEMBERS_MAX_WORKERS];  //  its last compute ms, by rank
    float feed_link [KD_MEMBERS_MAX_WORKERS];     //  and push + pull ms (0: none yet)
    uint64_t speed_reports;     //  telemetry reports the controller took
    bool causes_due;            //  a regroup since the last GROUPS: log
                                //  what its groups spend their time on
} self_t;

//  --------------------------------------------------------------------------
//  Members: the table and its indexes are kd_members'; here, what the
//  scheduler says to them

//  True under ASP and SSP, whose shards apply a push on arrival (the
//  controller's immediate engine).
static bool
s_immediate (self_t *self)
{
    const char *model = kd_config_str (self->config, "consistency");
    return !strcmp (model, "asp") || !strcmp (model, "ssp");
}

//  Of `refused` gradients, those also named in drops: under the phased
//  models a refused gradient's slices are dropped at the shards.
static uint64_t
s_refused_drops (self_t *self, uint64_t refused)
{
    return s_immediate (self) ? 0 : refused;
}

//  Drops that were not refusals.  A refused gradient still waiting at its
//  barrier when the run stops was counted as refused but never dropped.
static uint64_t
s_true_drops (self_t *self, uint64_t drops, uint64_t refused)
{
    uint64_t r = s_refused_drops (self, refused);
    return drops > r ? drops - r : 0;
}

//  The member-table key of the peer that sent the message being handled:
//  its routing id, after its aggregator's when it came in a RELAY.
static void
s_peer_key (self_t *self, zframe_t *id, char *out, size_t size)
{
    kd_members_id_key (self->via, id, out, size);
}

//  Send to a routing id, directly or through the aggregator it is behind
//  (consumes the message).
static void
s_send_routed (self_t *self, zframe_t *via, zframe_t *id, kd_msg_t **msg_p)
{
    if (via) {
        kd_aggregators_send (self->aggs, via, id, msg_p);
        return;
    }
    kd_msg_set_routing_id (*msg_p, id);
    kd_msg_send (msg_p, self->router);
}

//  Send a message to a member (consumes the message).
static void
s_send_to (self_t *self, kd_member_t *m, kd_msg_t **msg_p)
{
    if (!m || !m->alive || !m->routing_id) {
        kd_msg_destroy (msg_p);
        return;
    }
    s_send_routed (self, m->via, m->routing_id, msg_p);
}

//  Answer the peer whose message is being handled with ERROR.
static void
s_error (self_t *self, zframe_t *id, int code, const char *reason)
{
    char hex [KD_MEMBERS_ID_MAX] = "?";
    if (id)
        s_peer_key (self, id, hex, sizeof hex);
    kd_warn ("error peer=%s code=%d reason=\"%s\"", hex, code, reason);
    if (!id)
        return;
    kd_msg_t *msg = kd_msg_new_error (id, code, reason);
    s_send_routed (self, self->via, id, &msg);
}

//  Count a malformed or forbidden message against its peer.  A relayed
//  worker is the aggregator's to disconnect, not ours: its aggregator's
//  connection carries every other worker behind it.
static void
s_strike (self_t *self, zframe_t *id, const char *reason)
{
    if (!self->via)
        kd_guard_strike (self->guard, id, reason);
}

//  Tell the monitor about a membership or recovery event; it publishes it
//  on the "event" topic.
static void
s_event (self_t *self, const char *kind, kd_member_t *m, const char *detail)
{
    kd_info ("event kind=%s name=%s detail=\"%s\"", kind, m ? m->name : "-", detail);
    kd_member_t *monitor = kd_members_monitor (self->members);
    if (!monitor || !monitor->alive)
        return;
    kd_msg_t *msg = kd_msg_new (KD_MSG_EVENT);
    kd_msg_set_str (msg, KD_F_KIND, kind);
    kd_msg_set_str (msg, KD_F_DETAIL, detail);
    kd_msg_set_uint (msg, KD_F_VERSION, kd_controller_version (self->ctl));
    if (m) {
        kd_msg_set_str (msg, KD_F_NAME, m->name);
        kd_msg_set_str (msg, KD_F_ROLE, kd_member_role_name (m->role));
        kd_msg_set_uint (msg, KD_F_RANK, m->rank);
    }
    s_send_to (self, monitor, &msg);
}

//  The model's name in messages and the summary.
static const char *
s_model_name (self_t *self)
{
    return self->external ? "external" : kd_model_kind_name (self->kind);
}

//  An external model's layout into a message.
static void
s_set_layout (self_t *self, kd_msg_t *msg)
{
    const char *names [KD_MODEL_MAX_TENSORS];
    uint64_t shapes [2 * KD_MODEL_MAX_TENSORS];
    for (size_t i = 0; i < self->n_layout; i++) {
        names [i] = self->layout [i].name;
        shapes [2 * i] = self->layout [i].rows;
        shapes [2 * i + 1] = self->layout [i].cols;
    }
    kd_msg_set_strs (msg, KD_F_TENSORS, names, self->n_layout);
    kd_msg_set_uints (msg, KD_F_SHAPES, shapes, 2 * self->n_layout);
    if (self->keyed)
        kd_msg_set_uint (msg, KD_F_KEYS, 1);
}

//  The key range a shard rank holds.
static size_t
s_range_of (self_t *self, uint64_t rank)
{
    return (size_t) (rank % self->n_ranges);
}

//  The member that takes a range's writes: its chain's head, replicated;
//  else the shard of that rank.  NULL when there is none.
static kd_member_t *
s_primary (self_t *self, size_t g)
{
    if (self->replicas == 1)
        return kd_members_shard (self->members, g);
    s_chain_t *c = &self->chains [g];
    //  A lost range gathering its replicas has no primary until it chose one.
    return c->n > 0 && !c->gather_until ? kd_members_shard (self->members, c->ranks [0]) : NULL;
}

//  START for a worker or the monitor.
static void
s_send_start (self_t *self, kd_member_t *m)
{
    const char *endpoints [KD_MEMBERS_MAX_SHARDS];
    uint64_t los [KD_MEMBERS_MAX_SHARDS], his [KD_MEMBERS_MAX_SHARDS];
    for (size_t i = 0; i < self->n_ranges; i++) {
        //  A range without a live replica names its first replica (rank i):
        //  when one registers again, s_chain_join sends the ROUTE to it.
        kd_member_t *head = s_primary (self, i);
        endpoints [i] = head ? head->endpoint : kd_members_shard (self->members, i)->endpoint;
        kd_range_split (self->n_params, self->n_ranges, i, &los [i], &his [i]);
    }
    kd_msg_t *msg = kd_msg_new (KD_MSG_START);
    kd_msg_set_strs (msg, KD_F_ENDPOINTS, endpoints, self->n_ranges);
    kd_msg_set_uints (msg, KD_F_LOS, los, self->n_ranges);
    kd_msg_set_uints (msg, KD_F_HIS, his, self->n_ranges);
    kd_msg_set_uint (msg, KD_F_T0_MS, self->t0_ms);
    kd_msg_set_uint (msg, KD_F_VERSION, kd_controller_version (self->ctl));
    //  This cluster's shards read keys frames as varint deltas, and a
    //  client sends them so only when told (an older cluster would misread
    //  them): on slow links, where the bytes cost more than the encoding.
    if (!strcmp (kd_config_str (self->config, "key-encoding"), "delta"))
        kd_msg_set_uint (msg, KD_F_KEY_ENC, KD_KEY_ENC_DELTA);
    //  The monitor may have registered before an external model's layout
    //  was known: START names it.
    if (self->external)
        s_set_layout (self, msg);
    s_send_to (self, m, &msg);
}

//  WELCOME for a member that registered.
static void
s_send_welcome (self_t *self, kd_member_t *m)
{
    kd_config_t *c = self->config;
    kd_msg_t *msg = kd_msg_new (KD_MSG_WELCOME);
    kd_msg_set_uint (msg, KD_F_RANK, m->rank);
    kd_msg_set_str (msg, KD_F_ROLE, kd_member_role_name (m->role));
    kd_msg_set_str (msg, KD_F_MODEL, s_model_name (self));
    kd_msg_set_uint (msg, KD_F_HIDDEN, self->hidden);
    kd_msg_set_uint (msg, KD_F_N_PARAMS, self->n_params);
    if (self->external && self->n_layout > 0)
        s_set_layout (self, msg);
    kd_msg_set_float (msg, KD_F_LR, kd_config_double (c, "lr"));
    kd_msg_set_float (msg, KD_F_MOMENTUM, kd_config_double (c, "momentum"));
    kd_msg_set_str (msg, KD_F_OPTIMIZER, self->optimizer);
    kd_msg_set_uint (msg, KD_F_BATCH, (uint64_t) kd_config_int (c, "batch"));
    kd_msg_set_uint (msg, KD_F_SEED, (uint64_t) kd_config_int (c, "seed"));
    kd_msg_set_float (msg, KD_F_EPOCHS, kd_config_double (c, "epochs"));
    kd_msg_set_uint (msg, KD_F_HEARTBEAT_MS, (uint64_t) self->heartbeat_ms);
    kd_msg_set_str (msg, KD_F_CONSISTENCY, kd_config_str (c, "consistency"));
    kd_msg_set_uint (msg, KD_F_STALENESS, (uint64_t) kd_config_int (c, "staleness"));
    kd_msg_set_uint (msg, KD_F_SESSION, self->session);
    if (self->short_path)
        kd_msg_set_uint (msg, KD_F_STAGED, 1);
    if (self->short_path && m->role == KD_MEMBER_WORKER)
        kd_msg_set_uint (msg, KD_F_REG, m->reg);
    //  Granted: a worker that asked and does not see it would be talking
    //  to a scheduler that ignored the field, and refuses the WELCOME.
    if (m->role == KD_MEMBER_WORKER && m->lease_ahead)
        kd_msg_set_uint (msg, KD_F_LEASE_AHEAD, 1);
    if (m->role == KD_MEMBER_SHARD) {
        uint64_t lo, hi;
        kd_range_split (self->n_params, self->n_ranges, s_range_of (self, m->rank), &lo, &hi);
        kd_msg_set_uint (msg, KD_F_LO, lo);
        kd_msg_set_uint (msg, KD_F_HI, hi);
    }
    //  An evaluator reports to the monitor: it learns where from us.
    kd_member_t *monitor = kd_members_monitor (self->members);
    if (m->role == KD_MEMBER_EVALUATOR && monitor && monitor->endpoint)
        kd_msg_set_str (msg, KD_F_ENDPOINT, monitor->endpoint);
    s_send_to (self, m, &msg);
}

//  STOP for a member.
static void
s_send_stop (self_t *self, kd_member_t *m)
{
    kd_msg_t *stop = kd_msg_new (KD_MSG_STOP);
    kd_msg_set_str (stop, KD_F_REASON, self->reason);
    //  The final version, which a worker may still pull (s_finish).
    kd_msg_set_uint (stop, KD_F_VERSION, self->final_version);
    s_send_to (self, m, &stop);
}

//  Call fn for every live evaluator.  An evaluator only pulls and reports:
//  it has no rank of its own, no lease and no place in any barrier.
static void
s_each_evaluator (self_t *self, void (*fn) (self_t *, kd_member_t *))
{
    for (kd_member_t *m = kd_members_first (self->members); m; m = kd_members_next (self->members))
        if (m->alive && m->role == KD_MEMBER_EVALUATOR)
            fn (self, m);
}

//  --------------------------------------------------------------------------
//  Replicas: each key range's chain (--replicas R > 1)

static void s_resync_shard (self_t *self, kd_member_t *m);
static void s_chain_regather (self_t *self, size_t g);

//  CHAIN to one member: its role and its successor, if any.
static void
s_send_chain (self_t *self, size_t g, size_t pos, bool sync)
{
    s_chain_t *c = &self->chains [g];
    kd_member_t *m = kd_members_shard (self->members, c->ranks [pos]);
    kd_member_t *next = pos + 1 < c->n ? kd_members_shard (self->members, c->ranks [pos + 1]) : NULL;
    kd_msg_t *msg = kd_msg_new (KD_MSG_CHAIN);
    kd_msg_set_str (msg, KD_F_ROLE, pos == 0 ? "primary" : "backup");
    kd_msg_set_str (msg, KD_F_ENDPOINT, next ? next->endpoint : "");
    kd_msg_set_uint (msg, KD_F_SYNC, sync && next ? 1 : 0);
    kd_msg_set_uint (msg, KD_F_GEN, c->gen);
    s_send_to (self, m, &msg);
}

//  ROUTE: tell workers and the monitor where a range's writes go now.
static void
s_send_route (self_t *self, size_t g)
{
    kd_member_t *head = s_primary (self, g);
    if (!head)
        return;
    for (kd_member_t *m = kd_members_first (self->members); m; m = kd_members_next (self->members))
        if (m->alive && m->role != KD_MEMBER_SHARD) {
            kd_msg_t *msg = kd_msg_new (KD_MSG_ROUTE);
            kd_msg_set_uint (msg, KD_F_RANK, g);
            kd_msg_set_str (msg, KD_F_ENDPOINT, head->endpoint);
            s_send_to (self, m, &msg);
        }
}

//  Send a COMMIT to a range's primary; replicated, keep it until the
//  primary acknowledges it (which it does once the tail applied it).
static void
s_send_commit (self_t *self, size_t g, kd_msg_t **msg_p)
{
    kd_member_t *head = s_primary (self, g);
    if (self->replicas > 1) {
        zlistx_t *q = self->chains [g].unacked;
        if (zlistx_size (q) >= S_MAX_QUEUED) {
            kd_error ("range %zu: %d commits unacknowledged by its primary; the oldest is dropped",
                      g, S_MAX_QUEUED);
            kd_msg_t *old = (kd_msg_t *) zlistx_first (q);
            kd_msg_destroy (&old);
            zlistx_delete (q, zlistx_cursor (q));
        }
        kd_msg_t *copy = kd_msg_dup (*msg_p);
        if (copy)
            zlistx_add_end (q, copy);
    }
    //  Even to a shard that looks dead: ZeroMQ keeps the order, and one
    //  that was only slow must not miss a version.
    if (head && head->routing_id) {
        kd_msg_set_routing_id (*msg_p, head->routing_id);
        kd_msg_send (msg_p, self->router);
    }
    else
        kd_msg_destroy (msg_p);
}

//  Forget the commits kept for a range (its chain starts again).
static void
s_chain_forget (self_t *self, size_t g)
{
    zlistx_t *q = self->chains [g].unacked;
    kd_msg_t *msg;
    while (q && (msg = (kd_msg_t *) zlistx_first (q))) {
        kd_msg_destroy (&msg);
        zlistx_delete (q, zlistx_cursor (q));
    }
}

//  The primary acknowledged its oldest outstanding commit.
static void
s_chain_acked (self_t *self, kd_member_t *m)
{
    size_t g = s_range_of (self, m->rank);
    if (self->replicas == 1 || s_primary (self, g) != m)
        return;
    zlistx_t *q = self->chains [g].unacked;
    kd_msg_t *msg = (kd_msg_t *) zlistx_first (q);
    if (msg) {
        kd_msg_destroy (&msg);
        zlistx_delete (q, zlistx_cursor (q));
    }
}

//  Place of a member in its range's chain, or -1.
static int
s_chain_pos (self_t *self, kd_member_t *m)
{
    s_chain_t *c = &self->chains [s_range_of (self, m->rank)];
    for (size_t i = 0; i < c->n; i++)
        if (c->ranks [i] == m->rank)
            return (int) i;
    return -1;
}

//  Take a member out of its range's chain (it died, or it restarted).  Once
//  training runs, the chain is mended at once: a dead primary's successor
//  is promoted and gets every commit not yet acknowledged, and workers are
//  routed to it; a dead backup's predecessor links to the next replica and
//  sends it its state.
static void
s_chain_remove (self_t *self, kd_member_t *m)
{
    if (self->replicas == 1 || m->role != KD_MEMBER_SHARD)
        return;
    int pos = s_chain_pos (self, m);
    if (pos < 0)
        return;
    size_t g = s_range_of (self, m->rank);
    s_chain_t *c = &self->chains [g];
    memmove (&c->ranks [pos], &c->ranks [pos + 1], (c->n - (size_t) pos - 1) * sizeof c->ranks [0]);
    c->n--;
    if (self->state != S_TRAINING && self->state != S_FINISHING)
        return;
    char detail [256];
    if (c->n == 0) {
        snprintf (detail, sizeof detail, "range %zu lost every replica: training waits until one "
                  "restarts; with --checkpoint-dir it restores the newest checkpoint and the "
                  "updates after it are lost", g);
        kd_error ("%s", detail);
        s_event (self, "range-lost", m, detail);
        s_chain_forget (self, g);
        c->lost = true;
        c->gather_until = 0;
        return;
    }
    //  Still gathering a lost range: nobody leads yet, nothing to mend.
    if (c->gather_until)
        return;
    if (pos == 0) {
        kd_member_t *head = kd_members_shard (self->members, c->ranks [0]);
        snprintf (detail, sizeof detail, "range %zu: %s promoted to primary after %s, %zu commits resent",
                  g, head->name, m->name, zlistx_size (c->unacked));
        kd_warn ("%s", detail);
        s_event (self, "shard-promoted", head, detail);
        s_send_chain (self, g, 0, false);
        //  The new primary applies each version once: what it already has
        //  is acknowledged, the rest applied, in order.
        for (kd_msg_t *q = (kd_msg_t *) zlistx_first (c->unacked); q;
             q = (kd_msg_t *) zlistx_next (c->unacked)) {
            kd_msg_t *copy = kd_msg_dup (q);
            if (copy && head->routing_id) {
                kd_msg_set_routing_id (copy, head->routing_id);
                kd_msg_send (&copy, self->router);
            }
            kd_msg_destroy (&copy);
        }
        if (!head->synced) {
            //  It never received the chain's state: what it holds is its
            //  own (a checkpoint, or initial values).
            kd_error ("range %zu: the promoted replica %s had not received its state; "
                      "it is brought to the cluster's version, updates are lost", g, head->name);
            s_chain_forget (self, g);
            head->synced = true;
            s_resync_shard (self, head);
        }
        s_send_route (self, g);
    }
    else
        s_send_chain (self, g, (size_t) pos - 1, true);
}

//  Append a registered shard to its range's chain.  Once training runs it
//  becomes the tail and its predecessor sends it its state; into an empty
//  chain it comes as the primary, with what it holds (a checkpoint).
static void
s_chain_join (self_t *self, kd_member_t *m)
{
    if (self->replicas == 1)
        return;
    s_chain_remove (self, m);
    size_t g = s_range_of (self, m->rank);
    s_chain_t *c = &self->chains [g];
    if (c->n >= S_MAX_REPLICAS)
        return;
    c->ranks [c->n++] = m->rank;
    m->synced = c->n == 1;
    if (!m->synced)
        m->sync_gen = ++c->gen;
    if ((self->state != S_TRAINING && self->state != S_FINISHING) || self->n_params == 0)
        return;
    //  A range that lost every replica waits a moment for the others to
    //  come back, so that the newest checkpoint leads and not the first
    //  one back.
    int64_t gather_ms = kd_config_int (self->config, "rejoin-wait-ms");
    if (c->lost && c->n == 1 && gather_ms > 0) {
        c->gather_until = kd_now_ms () + (uint64_t) gather_ms;
        kd_info ("range %zu: %s back at version %llu; waiting up to %lld ms for the other replicas",
                 g, m->name, (unsigned long long) m->version, (long long) gather_ms);
    }
    if (c->gather_until) {
        if (c->n >= self->replicas)
            s_chain_regather (self, g);
        return;
    }
    c->lost = false;
    if (c->n == 1) {
        kd_info ("range %zu: %s is its only replica, the primary", g, m->name);
        s_chain_forget (self, g);
        s_send_chain (self, g, 0, false);
        s_send_route (self, g);
        return;
    }
    s_send_chain (self, g, c->n - 1, false);
    s_send_chain (self, g, c->n - 2, true);
}

//  Put the replica with the newest version at the head of the chain: it
//  holds what the others may lack (a newer checkpoint, or commits they
//  missed before a scheduler restart).
static void
s_chain_newest_first (self_t *self, s_chain_t *c)
{
    for (size_t i = 1; i < c->n; i++)
        if (kd_members_shard (self->members, c->ranks [i])->version
          > kd_members_shard (self->members, c->ranks [0])->version) {
            uint64_t r = c->ranks [0];
            c->ranks [0] = c->ranks [i];
            c->ranks [i] = r;
        }
}

//  Mark every replica of range g but its head unsynced, in a new
//  generation of the chain: each holds its range's state only once the
//  transfer that the CHAINs sent next order has landed, and a SYNC_OK for
//  one ordered before (its predecessor may have held older state) must
//  not count.
static void
s_chain_unsync (self_t *self, size_t g)
{
    s_chain_t *c = &self->chains [g];
    if (c->n > 1)
        c->gen++;
    for (size_t i = 0; i < c->n; i++) {
        kd_member_t *m = kd_members_shard (self->members, c->ranks [i]);
        m->synced = i == 0;
        if (i > 0)
            m->sync_gen = c->gen;
    }
}

//  A lost range's replicas are back, or the wait is over: the one with the
//  newest version (its checkpoint) leads, the others get its state, and
//  the leader is brought to the cluster's version.
static void
s_chain_regather (self_t *self, size_t g)
{
    s_chain_t *c = &self->chains [g];
    c->gather_until = 0;
    c->lost = false;
    if (c->n == 0)
        return;
    s_chain_newest_first (self, c);
    kd_member_t *head = kd_members_shard (self->members, c->ranks [0]);
    char detail [192];
    snprintf (detail, sizeof detail, "range %zu: %s leads at version %llu, the newest of %zu replicas back",
              g, head->name, (unsigned long long) head->version, c->n);
    kd_warn ("%s", detail);
    s_event (self, "range-regathered", head, detail);
    s_chain_forget (self, g);
    s_chain_unsync (self, g);
    //  The head is brought to the cluster's version before it is told its
    //  successors, so that the state it sends them is already there: a
    //  resync after the transfer would count the lost updates once more at
    //  each backup.
    if (self->state == S_TRAINING)
        s_resync_shard (self, head);
    for (size_t i = 0; i < c->n; i++)
        s_send_chain (self, g, i, c->n > 1);
    s_send_route (self, g);
}

//  At the start: in each chain the replica with the newest version leads
//  (after a scheduler restart, it holds what the others may lack), and
//  every member learns its place; each successor gets its predecessor's
//  state.
static void
s_chain_configure (self_t *self)
{
    if (self->replicas == 1)
        return;
    for (size_t g = 0; g < self->n_ranges; g++) {
        s_chain_t *c = &self->chains [g];
        s_chain_newest_first (self, c);
        s_chain_unsync (self, g);
        for (size_t i = 0; i < c->n; i++)
            s_send_chain (self, g, i, true);
    }
}

//  SYNC_OK: a backup holds its range's state, and may be promoted.
static void
s_on_sync_ok (self_t *self, kd_member_t *m, kd_msg_t *msg)
{
    if (m->role != KD_MEMBER_SHARD)
        return;
    //  A SYNC_OK that answers a transfer ordered before the backup was
    //  last marked unsynced may stand for older state than the chain's
    //  head holds now: the transfer that counts is still on its way.
    //  Without a generation (an older shard) it is taken, as it always was.
    uint64_t gen = kd_msg_uint (msg, KD_F_GEN);
    if (kd_msg_has (msg, KD_F_GEN) && gen < m->sync_gen) {
        kd_info ("backup %s of range %zu: SYNC_OK ignored, it answers a transfer ordered before "
                 "the chain changed gen=%llu chain_gen=%llu", m->name, s_range_of (self, m->rank),
                 (unsigned long long) gen, (unsigned long long) m->sync_gen);
        return;
    }
    m->synced = true;
    m->version = kd_msg_uint (msg, KD_F_VERSION);
    //  The generation is named, so that a test can see a real backup echo
    //  it (if none did, the check above would be off without a word).
    //  At most 7 + 96 + 10 + 20 + 31 + 20 + 5 + 20 bytes and a NUL: a long
    //  name is cut, never the generation.
    char gen_text [24] = "none";
    if (kd_msg_has (msg, KD_F_GEN))
        snprintf (gen_text, sizeof gen_text, "%llu", (unsigned long long) gen);
    char detail [256];
    snprintf (detail, sizeof detail, "backup %.*s of range %zu received its state at version %llu gen=%s",
              S_NAME_SHOWN, m->name, s_range_of (self, m->rank), (unsigned long long) m->version, gen_text);
    kd_info ("%s", detail);
    s_event (self, "shard-synced", m, detail);
}

//  --------------------------------------------------------------------------
//  Decisions

//  The history's line for a commit decision: the gradients it names and
//  drops.  The arrays are JSON text in one scratch buffer, cut short (and
//  marked so) for a commit too large to write.
static void
s_history_commit (self_t *self, const kd_decision_t *d, const uint64_t *ranks,
                  const uint64_t *clocks, const uint64_t *dranks, const uint64_t *dclocks)
{
    if (!self->history)
        return;
    size_t size = KD_HISTORY_MAX_LINE / 2, len = 0;
    char *b = self->history_buf;
    const uint64_t *arrays [4] = { ranks, clocks, dranks, dclocks };
    const char *names [4] = { "ranks", "clocks", "drop_ranks", "drop_clocks" };
    for (int k = 0; k < 4; k++) {
        len += (size_t) snprintf (b + len, size - len, "%s\"%s\":", k ? "," : "", names [k]);
        kd_history_uints (b, size, &len, arrays [k], k < 2 ? d->n_entries : d->n_drops);
        if (len >= size - 64)
            break;
    }
    kd_history_line (self->history, "commit", "\"version\":%llu,\"direct\":%s,%s",
                     (unsigned long long) d->version, d->direct ? "true" : "false",
                     len < size - 64 ? b : "\"truncated\":true");
}

//  Broadcast a COMMIT to every shard.
static void
s_do_commit (self_t *self, const kd_decision_t *d)
{
    size_t n = d->n_entries, nd = d->n_drops;
    //  The arrays are copied into each COMMIT, so they are only scratch:
    //  ours, or the heap for a commit larger than any the controller makes.
    bool heap = n > S_COMMIT_SCRATCH || nd > S_COMMIT_SCRATCH;
    uint64_t *ranks = heap ? (uint64_t *) malloc ((n + 1) * sizeof (uint64_t)) : self->commit_u [0];
    uint64_t *clocks = heap ? (uint64_t *) malloc ((n + 1) * sizeof (uint64_t)) : self->commit_u [1];
    double *weights = heap ? (double *) malloc ((n + 1) * sizeof (double)) : self->commit_w;
    uint64_t *dranks = heap ? (uint64_t *) malloc ((nd + 1) * sizeof (uint64_t)) : self->commit_u [2];
    uint64_t *dclocks = heap ? (uint64_t *) malloc ((nd + 1) * sizeof (uint64_t)) : self->commit_u [3];
    assert (ranks && clocks && weights && dranks && dclocks);
    for (size_t i = 0; i < n; i++) {
        ranks [i] = d->entries [i].rank;
        clocks [i] = d->entries [i].clock;
        weights [i] = d->entries [i].weight;
        kd_member_t *w = kd_members_worker (self->members, d->entries [i].rank);
        //  Under ASP and SSP the shards measured the staleness when they
        //  applied the gradient; the controller's versions are only counts.
        uint64_t tau = d->direct && w ? w->reported_tau : d->entries [i].staleness;
        self->stale_hist [tau < S_STALE_BINS ? tau : S_STALE_BINS]++;
        if (tau > self->stale_max)
            self->stale_max = tau;
        self->samples += d->entries [i].samples;
        if (w) {
            w->staleness = tau;
            w->applied += d->entries [i].samples;
        }
    }
    for (size_t i = 0; i < nd; i++) {
        dranks [i] = d->drops [i].rank;
        dclocks [i] = d->drops [i].clock;
        kd_member_t *w = kd_members_worker (self->members, d->drops [i].rank);
        if (w)
            w->drops++;
    }
    if (n > 0)
        self->updates++;
    s_history_commit (self, d, ranks, clocks, dranks, dclocks);
    //  Under ASP and SSP the shards applied every gradient on arrival and
    //  stage nothing, and their versions count their own steps: no COMMIT,
    //  not even a drop, may reach them.
    bool send = !kd_controller_direct (self->ctl);
    uint64_t ts = kd_wall_ms ();
    for (size_t s = 0; s < self->n_ranges && send; s++) {
        kd_msg_t *msg = kd_msg_new (KD_MSG_COMMIT);
        kd_msg_set_uint (msg, KD_F_VERSION, d->version);
        kd_msg_set_uint (msg, KD_F_TS_MS, ts);
        kd_msg_set_uint (msg, KD_F_SAMPLES, self->samples);
        kd_msg_set_uints (msg, KD_F_RANKS, ranks, n);
        kd_msg_set_uints (msg, KD_F_CLOCKS, clocks, n);
        kd_msg_set_floats (msg, KD_F_WEIGHTS, weights, n);
        if (nd > 0) {
            kd_msg_set_uints (msg, KD_F_DROP_RANKS, dranks, nd);
            kd_msg_set_uints (msg, KD_F_DROP_CLOCKS, dclocks, nd);
        }
        s_send_commit (self, s, &msg);
    }
    if (heap) {
        free (ranks);
        free (clocks);
        free (weights);
        free (dranks);
        free (dclocks);
    }
}

static void s_send_release (self_t *self, kd_member_t *m, const kd_decision_t *d);

//  RELEASE one worker.
static void
s_do_release (self_t *self, const kd_decision_t *d)
{
    kd_member_t *m = kd_members_worker (self->members, d->rank);
    if (!m || !m->alive)
        return;
    double now = kd_now_msf ();
    if (m->arrive_ms > 0) {
        self->wait_total += now - m->arrive_ms;
        m->wait_ms += now - m->arrive_ms;
        m->arrive_ms = 0;
    }
    m->release_ms = now;
    m->waiting = false;
    m->released = true;
    m->last_release = *d;
    s_send_release (self, m, d);
}

//  Set field to a lease's rows, when leases are on and it has any.
static void
s_set_lease_rows (self_t *self, kd_msg_t *msg, kd_field_t field, kd_lease_t lease)
{
    kd_sampler_t *sampler = kd_controller_sampler (self->ctl);
    if (!sampler || lease.count == 0 || lease.count > S_MAX_BATCH
    ||  kd_sampler_rows (sampler, lease, self->lease_rows) != 0)
        return;
    for (uint32_t i = 0; i < lease.count; i++)
        self->lease_u [i] = self->lease_rows [i];
    kd_msg_set_uints (msg, field, self->lease_u, lease.count);
}

//  Send a worker its RELEASE (again, if its first copy was lost).
static void
s_send_release (self_t *self, kd_member_t *m, const kd_decision_t *d)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_RELEASE);
    kd_msg_set_uint (msg, KD_F_VERSION, d->version);
    kd_msg_set_uint (msg, KD_F_CLOCK, d->clock);
    kd_msg_set_uint (msg, KD_F_STALENESS, m->staleness);
    kd_msg_set_uint (msg, KD_F_DROPPED, d->dropped ? 1 : 0);
    kd_msg_set_uint (msg, KD_F_GROUP, d->group);
    kd_msg_set_uint (msg, KD_F_MIN_CLOCK, d->min_clock);
    //  The leases as row indices: the worker needs no sampler of its own.
    //  A lease-ahead worker is also told its next clock's rows.
    s_set_lease_rows (self, msg, KD_F_ROWS, d->lease);
    s_set_lease_rows (self, msg, KD_F_AHEAD, d->ahead);
    //  Resends are written too: the checker keys a lease by (rank, clock).
    if (d->lease.count > 0)
        kd_history_line (self->history, "lease",
                         "\"rank\":%llu,\"clock\":%llu,\"epoch\":%llu,\"pos\":%llu,\"count\":%u",
                         (unsigned long long) m->rank, (unsigned long long) d->clock,
                         (unsigned long long) d->lease.epoch, (unsigned long long) d->lease.pos,
                         (unsigned) d->lease.count);
    s_send_to (self, m, &msg);
}

//  Note the time of every regroup the controller made since the last look,
//  for the summary (regroup lag) and the log.
static void
s_note_regroups (self_t *self)
{
    uint64_t regroups = kd_controller_regroups (self->ctl);
    if (regroups == self->regroups)
        return;
    double at = self->t0_mono > 0 ? (kd_now_msf () - self->t0_mono) / 1000.0 : 0;
    for (uint64_t k = self->regroups; k < regroups; k++)
        if (self->n_regroup_s < S_MAX_REGROUPS)
            self->regroup_s [self->n_regroup_s++] = at;
    kd_info ("regroup regroups=%llu groups=%u at_s=%.3f", (unsigned long long) regroups,
             kd_controller_group_count (self->ctl), at);
    self->regroups = regroups;
    self->causes_due = true;
}

//  With telemetry, say what each group's members spend an iteration on:
//  a group slow to compute and one slow on its link look alike to arrival
//  times, not to the monitor.
static void
s_log_group_causes (self_t *self, const kd_decision_t *d)
{
    for (uint32_t g = 0; g < d->group_count && g < 64; g++) {
        double compute = 0, link = 0;
        unsigned n = 0, heard = 0;
        for (size_t r = 0; r < d->n_groups && r < KD_MEMBERS_MAX_WORKERS; r++) {
            if (d->groups [r] != g)
                continue;
            n++;
            if (self->feed_compute [r] + self->feed_link [r] > 0) {
                compute += self->feed_compute [r];
                link += self->feed_link [r];
                heard++;
            }
        }
        if (heard > 0)
            kd_info ("group %u workers=%u compute_ms=%.1f link_ms=%.1f bound=%s", g, n,
                     compute / heard, link / heard, link > compute ? "link" : "compute");
        else
            kd_info ("group %u workers=%u (no telemetry yet)", g, n);
    }
}

//  Keep the latest group assignment for STATUS.
static void
s_do_groups (self_t *self, const kd_decision_t *d)
{
    //  Membership changes (and ALSP's members moving to their new groups)
    //  also publish groups; only the controller knows the regroups.
    s_note_regroups (self);
    free (self->groups);
    self->groups = (uint32_t *) malloc (d->n_groups * sizeof (uint32_t) + 1);
    assert (self->groups);
    memcpy (self->groups, d->groups, d->n_groups * sizeof (uint32_t));
    self->n_groups = d->n_groups;
    kd_info ("groups count=%u regroups=%llu", d->group_count, (unsigned long long) self->regroups);
    if (self->feed && self->causes_due) {
        s_log_group_causes (self, d);
        self->causes_due = false;
    }
}

//  Auto changed the effective model: log it, keep it for the summary, and
//  put it on the stream as an event.
static void
s_do_switch (self_t *self, const kd_decision_t *d)
{
    double at = self->t0_mono > 0 ? (kd_now_msf () - self->t0_mono) / 1000.0 : 0;
    if (self->n_switches < S_MAX_SWITCHES) {
        s_switch_t *sw = &self->switches [self->n_switches++];
        sw->at_s = at;
        sw->from = d->from;
        sw->to = d->mode;
        snprintf (sw->reason, sizeof sw->reason, "%s", d->reason);
    }
    char detail [256];
    snprintf (detail, sizeof detail, "%s -> %s: %s", kd_consistency_name (d->from),
              kd_consistency_name (d->mode), d->reason);
    s_event (self, "consistency-switch", NULL, detail);
}

//  --barrier-spread auto changed the allowance: log it, keep it for the
//  summary, and put it on the stream as an event, as a switch.
static void
s_do_allowance (self_t *self, const kd_decision_t *d)
{
    double at = self->t0_mono > 0 ? (kd_now_msf () - self->t0_mono) / 1000.0 : 0;
    if (self->n_allowances < S_MAX_SWITCHES) {
        s_allowance_t *a = &self->allowances [self->n_allowances++];
        a->at_s = at;
        a->spread = d->spread;
        snprintf (a->reason, sizeof a->reason, "%s", d->reason);
    }
    char detail [256];
    snprintf (detail, sizeof detail, "spread %g: %s", d->spread, d->reason);
    kd_info ("barrier-allowance spread=%g reason=\"%s\"", d->spread, d->reason);
    s_event (self, "barrier-allowance", NULL, detail);
}

//  Carry out every pending decision.
static void
s_drain (self_t *self)
{
    const kd_decision_t *d;
    bool released = false;
    while ((d = kd_controller_next (self->ctl))) {
        if (d->type == KD_DEC_COMMIT) {
            self->dropped += d->n_drops;
            s_do_commit (self, d);
        }
        else
        if (d->type == KD_DEC_RELEASE) {
            s_do_release (self, d);
            released = true;
        }
        else
        if (d->type == KD_DEC_GROUPS)
            s_do_groups (self, d);
        else
        if (d->type == KD_DEC_SWITCH)
            s_do_switch (self, d);
        else
        if (d->type == KD_DEC_ALLOWANCE)
            s_do_allowance (self, d);
    }
    if (released)
        self->phases++;
    s_note_regroups (self);
}

//  A drop-only COMMIT for one gradient the controller never heard of (a
//  worker that died computing it).  It must carry the version the shards
//  hold: decisions still queued go out first, since the controller's
//  version already counts a commit it decided and we have not sent; a drop
//  with that newer version would make each shard adopt it (a resync) and
//  then take the real commit for a duplicate, losing its gradients on every
//  range (`kudus chaos --seed 4` found it: 128 rows lost).
static void
s_drop_gradient (self_t *self, uint64_t rank, uint64_t clock)
{
    s_drain (self);
    kd_entry_t drop = { .rank = (uint32_t) rank, .clock = clock };
    kd_decision_t d = { .type = KD_DEC_COMMIT, .version = kd_controller_version (self->ctl),
                        .drops = &drop, .n_drops = 1 };
    s_do_commit (self, &d);
}

//  --------------------------------------------------------------------------
//  Lifecycle

static kd_controller_t *s_controller_new (kd_config_t *c, uint64_t initial_version,
                                          uint64_t rows);

//  Bring a shard that is behind (restored from a checkpoint, or restarted
//  empty) to the current version: a drop-only COMMIT at that version makes
//  it adopt the version with the parameters it has.  The updates between
//  are lost for its key range; that is the RPO of a checkpoint interval.
static void
s_resync_shard (self_t *self, kd_member_t *m)
{
    uint64_t version = kd_controller_version (self->ctl);
    //  Under ASP and SSP a shard's version counts its own steps and is not
    //  the cluster's: there is nothing to bring it to.
    if (m->version >= version || kd_controller_direct (self->ctl))
        return;
    char detail [128];
    snprintf (detail, sizeof detail, "shard at version %llu brought to %llu, %llu updates lost",
              (unsigned long long) m->version, (unsigned long long) version,
              (unsigned long long) (version - m->version));
    s_event (self, "shard-restored", m, detail);
    kd_msg_t *msg = kd_msg_new (KD_MSG_COMMIT);
    kd_msg_set_uint (msg, KD_F_VERSION, version);
    kd_msg_set_uint (msg, KD_F_TS_MS, kd_wall_ms ());
    kd_msg_set_uint (msg, KD_F_SAMPLES, self->samples);
    kd_msg_set_uints (msg, KD_F_RANKS, NULL, 0);
    kd_msg_set_uints (msg, KD_F_CLOCKS, NULL, 0);
    kd_msg_set_floats (msg, KD_F_WEIGHTS, NULL, 0);
    if (self->replicas > 1)
        s_send_commit (self, s_range_of (self, m->rank), &msg);
    else
        s_send_to (self, m, &msg);
    m->version = version;
}

//  A worker joins the controller, holding a lease ahead if it asked: its
//  HELLO was refused for that under the phase models, which have no use
//  for one.  A rank already pending or active stays as it is.
static void
s_join (self_t *self, kd_member_t *m, uint64_t now)
{
    if (m->lease_ahead)
        kd_controller_join_ahead (self->ctl, (uint32_t) m->rank, now);
    else
        kd_controller_join (self->ctl, (uint32_t) m->rank, now);
}

//  Start training once the cluster is complete.
static void
s_maybe_start (self_t *self)
{
    if (self->state != S_WAITING || self->n_params == 0)
        return;
    for (size_t i = 0; i < self->n_shards; i++)
        if (!kd_members_shard (self->members, i) || !kd_members_shard (self->members, i)->alive)
            return;
    if (kd_members_live (self->members, KD_MEMBER_WORKER) < self->min_workers)
        return;
    //  A scheduler that restarted finds shards that already trained: it
    //  resumes from the newest version they hold, with their sample count,
    //  and brings any shard that is behind up to it.
    uint64_t resume = 0, samples = 0;
    for (size_t i = 0; i < self->n_shards; i++) {
        kd_member_t *shard = kd_members_shard (self->members, i);
        if (shard->version > resume) {
            resume = shard->version;
            samples = shard->samples;
        }
    }
    //  The controller is built now that the training set's size is known:
    //  it owns the lease book.
    kd_controller_t *ctl = s_controller_new (self->config, resume, self->train_rows);
    assert (ctl);   //  the same settings built the first one
    kd_controller_destroy (&self->ctl);
    self->ctl = ctl;
    if (resume > 0) {
        self->samples = samples;
        self->resumed_from = resume;
        char detail [128];
        snprintf (detail, sizeof detail, "training resumes from version %llu, %llu samples",
                  (unsigned long long) resume, (unsigned long long) samples);
        s_event (self, "resume", NULL, detail);
    }
    //  Replicated, each chain's newest replica leads and the others get its
    //  state; only primaries are brought to the cluster's version.
    s_chain_configure (self);
    for (size_t g = 0; g < self->n_ranges && resume > 0; g++)
        s_resync_shard (self, s_primary (self, g));
    self->state = S_TRAINING;
    self->t0_ms = kd_wall_ms ();
    self->t0_mono = kd_now_msf ();
    kd_info ("start shards=%zu workers=%zu params=%zu rows=%llu consistency=%s",
             self->n_shards, kd_members_live (self->members, KD_MEMBER_WORKER), self->n_params,
             (unsigned long long) self->train_rows, kd_config_str (self->config, "consistency"));
    kd_history_line (self->history, "start",
                     "\"rows\":%llu,\"batch\":%lld,\"epochs\":%.17g,\"ranges\":%zu,\"replicas\":%zu,"
                     "\"consistency\":\"%s\",\"resumed_from\":%llu",
                     (unsigned long long) self->train_rows, (long long) kd_config_int (self->config, "batch"),
                     self->epochs, self->n_ranges, self->replicas, kd_config_str (self->config, "consistency"),
                     (unsigned long long) resume);
    kd_member_t *monitor = kd_members_monitor (self->members);
    if (monitor && monitor->alive)
        s_send_start (self, monitor);
    s_each_evaluator (self, s_send_start);
    uint64_t now = kd_now_ms ();
    for (size_t r = 0; r < KD_MEMBERS_MAX_WORKERS; r++) {
        kd_member_t *w = kd_members_worker (self->members, r);
        if (w && w->alive) {
            s_send_start (self, w);
            s_join (self, w, now);
        }
    }
    s_drain (self);
}

//  Stop training: stop the workers and ask for the final evaluation.
static void
s_finish (self_t *self, const char *reason)
{
    if (self->state != S_TRAINING && self->state != S_WAITING)
        return;
    snprintf (self->reason, sizeof self->reason, "%s", reason);
    self->t_end = kd_now_msf ();
    self->final_version = kd_controller_version (self->ctl);
    kd_info ("finish reason=%s version=%llu samples=%llu", reason,
             (unsigned long long) self->final_version, (unsigned long long) self->samples);
    //  STOP names the final version, which a worker may still pull: an
    //  external model lives in the user's module, and the user expects the
    //  trained one there when training returns.
    size_t workers = 0;
    for (size_t r = 0; r < KD_MEMBERS_MAX_WORKERS; r++) {
        kd_member_t *m = kd_members_worker (self->members, r);
        if (!m)
            continue;
        s_send_stop (self, m);
        workers += m->alive;
    }
    s_each_evaluator (self, s_send_stop);
    //  The shards stop when we do, so we wait until the external workers
    //  have left (after their final pull) or the window has passed.
    self->pulls_pending = self->external && workers > 0 && self->state == S_TRAINING
                       && kd_config_int (self->config, "final-pull-ms") > 0;
    self->pulls_deadline = kd_now_ms () + (uint64_t) kd_config_int (self->config, "final-pull-ms");
    //  The monitor cannot evaluate an external model (it is the workers'
    //  own), nor sparse-lr without a held-out file: waiting for it would
    //  only time out.
    kd_member_t *monitor = kd_members_monitor (self->members);
    self->eval_pending = monitor && monitor->alive && self->state == S_TRAINING
        && (!self->external || (self->sparse_lr && self->monitor_keyed))
        && !(self->accuracy_version >= self->final_version && self->accuracy_version > 0);
    if (self->eval_pending) {
        kd_msg_t *eval = kd_msg_new (KD_MSG_EVAL);
        kd_msg_set_uint (eval, KD_F_VERSION, self->final_version);
        s_send_to (self, monitor, &eval);
        self->finish_deadline = kd_now_ms () + S_FINAL_EVAL_MS;
    }
    self->state = self->eval_pending || self->pulls_pending ? S_FINISHING : S_DONE;
}

//  Finishing: done once nothing is awaited any more.
static void
s_check_finished (self_t *self)
{
    if (self->state == S_FINISHING && !self->eval_pending && !self->pulls_pending)
        self->state = S_DONE;
}

//  Finishing: a worker left or died; the last one ends the final pulls.
static void
s_check_pulls (self_t *self)
{
    if (self->state != S_FINISHING || !self->pulls_pending)
        return;
    for (size_t r = 0; r < KD_MEMBERS_MAX_WORKERS; r++) {
        kd_member_t *m = kd_members_worker (self->members, r);
        if (m && m->alive)
            return;
    }
    self->pulls_pending = false;
    s_check_finished (self);
}

//  Staleness percentile from the histogram.
static double
s_staleness_pct (self_t *self, double q)
{
    return kd_hist_quantile (self->stale_hist, S_STALE_BINS + 1, q);
}

//  A JSON number, or null when it is not finite.
static void
s_json_num (FILE *f, const char *format, double value)
{
    if (isfinite (value))
        fprintf (f, format, value);
    else
        fputs ("null", f);
}

//  A JSON string literal of a name the scheduler accepted (no quotes,
//  backslashes or control bytes pass unescaped).
static void
s_json_str (FILE *f, const char *text)
{
    fputc ('"', f);
    for (const unsigned char *p = (const unsigned char *) text; *p; p++)
        if (*p == '"' || *p == '\\')
            fprintf (f, "\\%c", *p);
        else
        if (*p < 0x20)
            fprintf (f, "\\u%04x", *p);
        else
            fputc (*p, f);
    fputc ('"', f);
}

//  The per-worker part of the summary.
static void
s_write_workers (self_t *self, FILE *f)
{
    fputs ("  \"per_worker\": [", f);
    bool first = true;
    for (size_t r = 0; r < KD_MEMBERS_MAX_WORKERS; r++) {
        kd_member_t *m = kd_members_worker (self->members, r);
        if (!m)
            continue;
        double its = m->iterations > 0 ? (double) m->iterations : NAN;
        double busy = m->iter_ms + m->wait_ms;
        fprintf (f, "%s\n    {\"rank\": %zu, \"name\": ", first ? "" : ",", r);
        s_json_str (f, m->name);
        fprintf (f, ", \"applied_samples\": %llu, \"applied_share\": ",
                 (unsigned long long) m->applied);
        s_json_num (f, "%.5f", self->samples ? (double) m->applied / (double) self->samples : NAN);
        fprintf (f, ", \"dropped\": %llu, \"refused\": %llu, \"iterations\": %llu, \"iter_ms_mean\": ",
                 (unsigned long long) s_true_drops (self, m->drops, m->refused),
                 (unsigned long long) m->refused,
                 (unsigned long long) m->iterations);
        s_json_num (f, "%.3f", m->iter_ms / its);
        fputs (", \"compute_ms_mean\": ", f);
        s_json_num (f, "%.3f", m->compute_ms / its);
        fputs (", \"emulated_ms_mean\": ", f);
        s_json_num (f, "%.3f", m->emulated_ms / its);
        fputs (", \"wait_fraction\": ", f);
        s_json_num (f, "%.4f", busy > 0 ? m->wait_ms / busy : NAN);
        fputc ('}', f);
        first = false;
    }
    fputs ("\n  ],\n", f);
}

//  Write the JSON summary, to the file if one is configured, and log it.
static void
s_write_summary (self_t *self)
{
    double end = self->t_end > 0 ? self->t_end : kd_now_msf ();
    double wall = self->t0_mono > 0 ? (end - self->t0_mono) / 1000.0 : 0;
    char *json = NULL;
    size_t json_size = 0;
    FILE *f = open_memstream (&json, &json_size);
    assert (f);
    fputs ("{\n  \"model\": ", f);
    //  The model as configured: the wire calls sparse-lr external too.
    s_json_str (f, self->external ? kd_config_str (self->config, "model") : s_model_name (self));
    //  The model by name: each tensor's shape, place in the flat vector,
    //  and the shards that hold it.
    kd_tensor_t builtin [4];
    const kd_tensor_t *tensors = self->external ? self->layout : builtin;
    size_t n_tensors = self->external ? self->n_layout
                     : kd_model_tensors (self->kind, self->hidden, builtin, 4);
    fprintf (f, ",\n  \"params\": %zu,\n  \"layout\": [", self->n_params);
    for (size_t i = 0; i < n_tensors && self->n_params > 0; i++) {
        const kd_tensor_t *t = &tensors [i];
        fprintf (f, "%s\n    {\"name\": ", i ? "," : "");
        s_json_str (f, t->name);
        fprintf (f, ", \"rows\": %zu, \"cols\": %zu, \"offset\": %zu, \"held_by\": [",
                 t->rows, t->cols, t->offset);
        bool first = true;
        for (size_t s = 0; s < self->n_ranges; s++) {
            uint64_t lo, hi;
            kd_range_split (self->n_params, self->n_ranges, s, &lo, &hi);
            if (lo < t->offset + t->count && hi > t->offset) {
                fprintf (f, "%s%zu", first ? "" : ", ", s);
                first = false;
            }
        }
        fputs ("]}", f);
    }
    fputs (n_tensors > 0 && self->n_params > 0 ? "\n  ]" : "]", f);
    fputs (",\n  \"consistency\": ", f);
    s_json_str (f, kd_config_str (self->config, "consistency"));
    fputs (",\n  \"optimizer\": ", f);
    s_json_str (f, self->optimizer);
    fprintf (f, ",\n  \"workers\": %zu,\n  \"shards\": %zu,\n  \"replicas\": %zu,\n  \"wall_seconds\": %.3f,\n",
             self->max_live_workers, self->n_ranges, self->replicas, wall);
    //  The test metric: accuracy, or for sparse-lr the held-out AUC.
    const char *metric = self->sparse_lr ? "auc" : "accuracy";
    fprintf (f, "  \"test_metric\": \"%s\",\n  \"test_%s\": ", metric, metric);
    s_json_num (f, "%.4f", self->accuracy_version > 0 || self->accuracy > 0 ? self->accuracy : NAN);
    fprintf (f, ",\n  \"stop_%s\": ", metric);
    s_json_num (f, "%.4f", self->stop_accuracy >= 0 ? self->stop_accuracy : NAN);
    fprintf (f, ",\n  \"test_version\": %llu,\n  \"train_loss\": %.5f,\n",
             (unsigned long long) self->accuracy_version, self->have_loss ? self->train_loss : 0.0);
    fprintf (f, "  \"updates\": %llu,\n  \"phases\": %llu,\n  \"samples\": %llu,\n",
             (unsigned long long) self->updates, (unsigned long long) self->phases,
             (unsigned long long) self->samples);
    fprintf (f, "  \"epochs\": %.3f,\n  \"samples_per_second\": %.1f,\n"
                "  \"updates_per_second\": %.2f,\n  \"barriers_per_second\": %.2f,\n",
             self->train_rows ? (double) self->samples / (double) self->train_rows : 0.0,
             wall > 0 ? (double) self->samples / wall : 0.0,
             wall > 0 ? (double) self->updates / wall : 0.0,
             wall > 0 && !kd_controller_direct (self->ctl) ? (double) self->phases / wall : 0.0);
    fprintf (f, "  \"time_to_%s\": {", metric);
    for (size_t i = 0; i < S_N_MILESTONES; i++) {
        fprintf (f, "%s\"%.2f\": ", i ? ", " : "", s_milestones [i]);
        s_json_num (f, "%.3f", self->milestone_s [i] >= 0 ? self->milestone_s [i] : NAN);
    }
    double busy = self->wait_total + self->busy_total;
    fprintf (f, "},\n  \"wait_fraction\": %.4f,\n", busy > 0 ? self->wait_total / busy : 0.0);
    fprintf (f, "  \"staleness_p50\": %.1f,\n  \"staleness_p99\": %.1f,\n  \"staleness_max\": %llu,\n",
             s_staleness_pct (self, 0.5), s_staleness_pct (self, 0.99),
             (unsigned long long) self->stale_max);
    //  A refused gradient is named in drops too (so shards forget its
    //  slices) but is counted apart.
    uint64_t refused = kd_controller_refused (self->ctl);
    //  The barrier tree: RELAYs from and to aggregators, and the messages
    //  they bundled (all 0 without aggregators).
    kd_aggregators_stats_t *relays = kd_aggregators_stats (self->aggs);
    fprintf (f, "  \"relays\": {\"aggregators\": %zu, \"in\": %llu, \"items_in\": %llu, "
             "\"out\": %llu, \"items_out\": %llu},\n", kd_aggregators_size (self->aggs),
             (unsigned long long) relays->relays_in, (unsigned long long) relays->items_in,
             (unsigned long long) relays->relays_out, (unsigned long long) relays->items_out);
    fprintf (f, "  \"dropped_gradients\": %llu,\n  \"refused_gradients\": %llu,\n"
             "  \"regroups\": %llu,\n  \"regroup_times\": [",
             (unsigned long long) s_true_drops (self, self->dropped, refused),
             (unsigned long long) refused, (unsigned long long) self->regroups);
    for (size_t i = 0; i < self->n_regroup_s; i++)
        fprintf (f, "%s%.3f", i ? ", " : "", self->regroup_s [i]);
    fputs ("],\n", f);
    //  Where ALSP's speeds came from: how many of the monitor's reports
    //  the controller took, and how many arrivals it left out for them
    //  (both 0 with arrivals).
    fprintf (f, "  \"speed_source\": \"%s\",\n  \"speed_reports\": %llu,\n"
             "  \"arrivals_untimed\": %llu,\n", self->feed ? "telemetry" : "arrivals",
             (unsigned long long) self->speed_reports,
             (unsigned long long) kd_controller_untimed (self->ctl));
    //  What the barrier did, and under auto which model it ran as.
    fprintf (f, "  \"early_releases\": %llu,\n  \"mode\": ",
             (unsigned long long) kd_controller_early_releases (self->ctl));
    s_json_str (f, kd_consistency_name (kd_controller_mode (self->ctl)));
    fprintf (f, ",\n  \"switch_count\": %llu,\n  \"switches\": [",
             (unsigned long long) kd_controller_switches (self->ctl));
    for (size_t i = 0; i < self->n_switches; i++) {
        fprintf (f, "%s{\"at_s\": %.3f, \"from\": \"%s\", \"to\": \"%s\", \"reason\": ",
                 i ? ", " : "", self->switches [i].at_s,
                 kd_consistency_name (self->switches [i].from),
                 kd_consistency_name (self->switches [i].to));
        s_json_str (f, self->switches [i].reason);
        fputc ('}', f);
    }
    //  The adaptive barrier's spread allowance, and its changes under auto.
    fprintf (f, "],\n  \"allowance\": %g,\n  \"allowance_count\": %llu,\n  \"allowance_changes\": [",
             kd_controller_allowance (self->ctl),
             (unsigned long long) kd_controller_allowance_changes (self->ctl));
    for (size_t i = 0; i < self->n_allowances; i++) {
        fprintf (f, "%s{\"at_s\": %.3f, \"spread\": %g, \"reason\": ",
                 i ? ", " : "", self->allowances [i].at_s, self->allowances [i].spread);
        s_json_str (f, self->allowances [i].reason);
        fputc ('}', f);
    }
    fputs ("],\n", f);
    //  Heartbeat ticks that came over two intervals late: the scheduler
    //  itself was starved or stopped (members were credited the delay).
    fprintf (f, "  \"scheduler_pauses\": %llu,\n", (unsigned long long) self->pauses);
    kd_sampler_t *sampler = kd_controller_sampler (self->ctl);
    uint64_t done = sampler ? kd_sampler_epochs_completed (sampler) : 0;
    fprintf (f, "  \"epochs_completed\": %llu,\n  \"epoch_row_share\": [", (unsigned long long) done);
    //  Each epoch whose rows all went out and came back: exactly 1.0 when
    //  every row was applied once.
    for (uint64_t e = 0; sampler && e < done && e < S_MAX_EPOCH_LOG; e++)
        fprintf (f, "%s%.6f", e ? ", " : "", kd_sampler_epoch_share (sampler, e));
    fputs ("],\n  \"current_epoch_share\": ", f);
    s_json_num (f, "%.6f", sampler ? kd_sampler_epoch_share (sampler, done) : NAN);
    fputs (",\n", f);
    s_write_workers (self, f);
    fputs ("  \"stop_reason\": ", f);
    s_json_str (f, self->reason);
    fputs ("\n}\n", f);
    fclose (f);
    const char *path = kd_config_str (self->config, "summary");
    if (*path) {
        //  Write then rename, so a reader never sees half a summary.
        char *tmp = zsys_sprintf ("%s.tmp", path);
        FILE *out = fopen (tmp, "w");
        if (out && fputs (json, out) >= 0 && fclose (out) == 0 && rename (tmp, path) == 0)
            kd_info ("summary written path=%s", path);
        else
            kd_error ("cannot write summary path=%s: %s", path, strerror (errno));
        zstr_free (&tmp);
    }
    kd_history_line (self->history, "end",
                     "\"reason\":\"%s\",\"epochs_completed\":%llu,\"applied_rows\":%llu,\"rows\":%llu,"
                     "\"updates\":%llu",
                     self->reason, (unsigned long long) done,
                     (unsigned long long) (sampler ? kd_sampler_applied_rows (sampler) : 0),
                     (unsigned long long) self->train_rows, (unsigned long long) self->updates);
    kd_info ("summary %s=%.4f wall_seconds=%.1f updates=%llu samples=%llu epochs=%llu",
             metric, self->accuracy, wall, (unsigned long long) self->updates,
             (unsigned long long) self->samples, (unsigned long long) done);
    free (json);
}

//  --------------------------------------------------------------------------
//  Messages

//  HELLO: register a member, or recognise one that registers again.
//  An external model's layout, from a worker's HELLO: the first one
//  declares it, and every later one must declare the same or none.  Once
//  it is known the shards, which waited for it, are welcomed.  Returns 0,
//  or -1 after answering ERROR.
static int
s_adopt_layout (self_t *self, kd_msg_t *msg, zframe_t *id)
{
    size_t n = 0, n_shapes = 0;
    const char **names = kd_msg_strs (msg, KD_F_TENSORS, &n);
    const uint64_t *shapes = kd_msg_uints (msg, KD_F_SHAPES, &n_shapes);
    if (n == 0 && n_shapes == 0) {
        if (self->n_params > 0)
            return 0;
        s_error (self, id, KD_ERR_STATE, "the external model's layout is not known yet: the first "
                 "worker must declare it (kd_client_set_layout)");
        return -1;
    }
    kd_tensor_t layout [KD_MODEL_MAX_TENSORS];
    size_t n_params = 0;
    char err [256];
    if (kd_model_layout_parse (names, n, shapes, n_shapes, layout, &n_params, err, sizeof err)) {
        s_error (self, id, KD_ERR_MALFORMED, err);
        return -1;
    }
    //  A keyed model is one tensor; its rows are the keys the shards split.
    bool keyed = kd_msg_uint (msg, KD_F_KEYS) == 1;
    if (keyed && n != 1) {
        s_error (self, id, KD_ERR_MALFORMED, "a keyed model has exactly one tensor");
        return -1;
    }
    if (keyed && self->replicas > 1) {
        s_error (self, id, KD_ERR_STATE, "keyed models do not support --replicas above 1 yet");
        return -1;
    }
    if (keyed)
        n_params = layout [0].rows;
    if (self->n_params > 0) {
        if (keyed == self->keyed && kd_model_layout_equal (layout, n, self->layout, self->n_layout))
            return 0;
        s_error (self, id, KD_ERR_STATE, "this worker's model layout differs from the cluster's");
        return -1;
    }
    if (n_params < self->n_ranges) {
        s_error (self, id, KD_ERR_STATE, "the model has fewer parameters than there are shards");
        return -1;
    }
    memcpy (self->layout, layout, n * sizeof layout [0]);
    self->n_layout = n;
    self->n_params = n_params;
    self->keyed = keyed;
    kd_info ("external model: %zu tensors, %zu %s, declared by name=%s", n, n_params,
             keyed ? "keys (keyed)" : "parameters", kd_msg_str (msg, KD_F_NAME));
    for (size_t i = 0; i < self->n_shards; i++) {
        kd_member_t *shard = kd_members_shard (self->members, i);
        if (shard && shard->alive)
            s_send_welcome (self, shard);
    }
    s_each_evaluator (self, s_send_welcome);
    return 0;
}

//  Who sent the message being handled: its CURVE key, else its address.
static const char *
s_source_key (self_t *self)
{
    //  Without CURVE, "User-Id" is whatever the peer says: not a key.
    if (*self->src.user && kd_curve_enabled (kd_curve_process ()))
        return self->src.user;
    return *self->src.address ? self->src.address : "local";
}

//  HELLO, first part: who the peer says it is, checked against its key,
//  its path and the cluster.  Returns 0 with its role, or -1 refused.
static int
s_hello_check (self_t *self, kd_msg_t *msg, zframe_t *id, kd_member_role_t *role_p)
{
    const char *role_name = kd_msg_str (msg, KD_F_ROLE);
    const char *name = kd_msg_str (msg, KD_F_NAME);
    int role = kd_member_role_parse (role_name);
    if (role < 0) {
        s_error (self, id, KD_ERR_MALFORMED, "role must be worker, shard, monitor or evaluator");
        return -1;
    }
    if (!*name) {
        s_error (self, id, KD_ERR_MALFORMED, "name must not be empty");
        return -1;
    }
    //  Commits and evaluations are not relayed: only workers sit behind an
    //  aggregator.
    if (self->via && role != KD_MEMBER_WORKER) {
        s_error (self, id, KD_ERR_STATE, "only workers may register through an aggregator");
        return -1;
    }
    //  Under CURVE a key registers only as the role it was issued for.
    if (*self->src.role && strcmp (self->src.role, role_name)) {
        char reason [128];
        snprintf (reason, sizeof reason, "forbidden: a %s key cannot register as %s",
                  self->src.role, role_name);
        kd_warn ("%s name=%s key=%s", reason, name, self->src.user);
        s_error (self, id, KD_ERR_FORBIDDEN, reason);
        return -1;
    }
    if (role == KD_MEMBER_SHARD && !*kd_msg_str (msg, KD_F_ENDPOINT)) {
        s_error (self, id, KD_ERR_MALFORMED, "a shard must advertise an endpoint");
        return -1;
    }
    //  The short path waits for every range's STAGED: a shard that cannot
    //  send it would stall every phase, so it is refused here, plainly.
    if (role == KD_MEMBER_SHARD && self->short_path && !kd_msg_uint (msg, KD_F_STAGED)) {
        s_error (self, id, KD_ERR_STATE, "this scheduler runs --phase-path short and this shard "
                 "does not send STAGED (protocol 9.3.1): upgrade the shard, or run --phase-path classic");
        return -1;
    }
    //  A lease ahead is the immediate engine's: under a phase model the
    //  next clock must be computed on the very model its barrier releases.
    if (role == KD_MEMBER_WORKER && kd_msg_uint (msg, KD_F_LEASE_AHEAD) == 1 && !s_immediate (self)) {
        char reason [128];
        snprintf (reason, sizeof reason, "lease_ahead needs consistency asp or ssp; this cluster runs %s",
                  kd_config_str (self->config, "consistency"));
        kd_warn ("hello refused name=%s: %s", name, reason);
        kd_msg_t *refusal = kd_msg_new_error (id, KD_ERR_STATE, reason);
        kd_msg_set_uint (refusal, KD_F_LEASE_AHEAD, 1);
        s_send_routed (self, self->via, id, &refusal);
        return -1;
    }
    if (role == KD_MEMBER_WORKER && self->external && s_adopt_layout (self, msg, id))
        return -1;
    if (role == KD_MEMBER_WORKER) {
        //  Partitions index one training set, so every worker must hold the
        //  same one: the first report sets its size.
        uint64_t rows = kd_msg_uint (msg, KD_F_SAMPLES);
        if (self->train_rows == 0 && rows > 0)
            self->train_rows = rows;
        if (rows != self->train_rows) {
            char reason [128];
            snprintf (reason, sizeof reason, "training set has %llu rows, the cluster's has %llu",
                      (unsigned long long) rows, (unsigned long long) self->train_rows);
            s_error (self, id, KD_ERR_STATE, reason);
            return -1;
        }
    }
    *role_p = (kd_member_role_t) role;
    return 0;
}

//  HELLO, second part: the member of that name, found or made with a
//  rank (a free one, or the one it asks back).  NULL when refused.
static kd_member_t *
s_hello_admit (self_t *self, kd_msg_t *msg, zframe_t *id, kd_member_role_t role)
{
    const char *name = kd_msg_str (msg, KD_F_NAME);
    kd_member_t *m = kd_members_find (self->members, name);
    //  One monitor at a time: a second one would silently take over the
    //  evaluations and the stream.
    kd_member_t *monitor = kd_members_monitor (self->members);
    if (role == KD_MEMBER_MONITOR && monitor && monitor->alive && monitor != m) {
        s_error (self, id, KD_ERR_STATE, "a monitor is already registered");
        return NULL;
    }
    if (m && m->role != role) {
        s_error (self, id, KD_ERR_STATE, "name already registered with another role");
        return NULL;
    }
    //  Under CURVE a name belongs to the key that first registered it:
    //  another key cannot take its rank by reusing the name.  (Without
    //  CURVE the address may change on a restart, so it binds nothing.)
    if (m && *self->src.user && kd_curve_enabled (kd_curve_process ()) && strcmp (m->key, self->src.user)) {
        char reason [160];
        snprintf (reason, sizeof reason, "name %s is bound to another key", name);
        kd_warn ("hello refused name=%s key=%s: registered by key=%s", name, self->src.user, m->key);
        s_error (self, id, KD_ERR_FORBIDDEN, reason);
        return NULL;
    }
    //  A member that names the rank it held (a shard restored from its
    //  checkpoint, or anyone after a scheduler restart) gets it back if it
    //  is free.  A shard's rank is its key range, so a restored shard also
    //  takes over the slot of a dead shard registered under another name.
    bool has_hint = kd_msg_has (msg, KD_F_RANK);
    uint64_t hint = kd_msg_uint (msg, KD_F_RANK);
    kd_member_t *old = !m && role == KD_MEMBER_SHARD && has_hint && hint < self->n_shards
                     ? kd_members_shard (self->members, hint) : NULL;
    if (old) {
        uint64_t lo, hi;
        kd_range_split (self->n_params, self->n_ranges, s_range_of (self, hint), &lo, &hi);
        if (!old->alive && kd_msg_uint (msg, KD_F_LO) == lo && kd_msg_uint (msg, KD_F_HI) == hi) {
            kd_info ("shard name=%s takes over rank=%llu from name=%s", name,
                     (unsigned long long) hint, old->name);
            kd_members_remove (self->members, &old);
        }
    }
    if (!m) {
        int64_t rank = kd_members_free_rank (self->members, role, has_hint, hint);
        if (rank < 0) {
            s_error (self, id, KD_ERR_STATE, role == KD_MEMBER_SHARD ? "all shard ranks are taken"
                                                                   : "no free worker rank");
            return NULL;
        }
        if (role == KD_MEMBER_WORKER && self->state != S_WAITING && self->state != S_TRAINING) {
            s_error (self, id, KD_ERR_STATE, "training has ended");
            return NULL;
        }
        //  One key may register only so many names: a peer cannot fill the
        //  rank table by inventing names.
        const char *key = s_source_key (self);
        m = kd_members_add (self->members, name, role, (uint64_t) rank, key);
        if (!m) {
            char reason [160];
            snprintf (reason, sizeof reason, "too many registrations from key %s "
                      "(max-registrations-per-key=%lld)", key,
                      (long long) kd_config_int (self->config, "max-registrations-per-key"));
            kd_warn ("hello refused name=%s: %s", name, reason);
            s_error (self, id, KD_ERR_LIMIT, reason);
            return NULL;
        }
    }
    return m;
}

//  HELLO, third part: the member's new routing id and what it announced.
//  Says whether it came from a new process, and whether it was alive.
static void
s_hello_bind (self_t *self, kd_member_t *m, kd_msg_t *msg, zframe_t *id, bool *restarted_p, bool *was_alive_p)
{
    kd_member_role_t role = m->role;
    //  A new routing id replaces the old one (a restarted process).  A
    //  worker that restarted lost its place in the barrier: it leaves and
    //  joins again, so it gets a fresh RELEASE.
    char new_hex [KD_MEMBERS_ID_MAX];
    s_peer_key (self, id, new_hex, sizeof new_hex);
    bool restarted = m->routing_id && strcmp (m->id_hex, new_hex) != 0;
    if (restarted && role == KD_MEMBER_WORKER && m->alive
    &&  kd_controller_is_active (self->ctl, (uint32_t) m->rank)) {
        //  After the finish nothing is decided: no commit past the final
        //  version.
        if (self->state != S_FINISHING && self->state != S_DONE) {
            kd_controller_leave (self->ctl, (uint32_t) m->rank, kd_now_ms ());
            s_drain (self);
        }
        m->alive = false;
    }
    kd_members_bind (self->members, m, self->via, id);
    //  A new incarnation (a new process, or one declared dead) ends the
    //  iteration it was in: an ARRIVE held for STAGED and the STAGED
    //  counted so far go, and a new registration number keeps out a STAGED
    //  of the last one still on its way.  A live worker that only says
    //  HELLO again (it heard nothing from a busy scheduler) still waits for
    //  the RELEASE of that ARRIVE: it keeps both, and its number, or BSP
    //  would stall until its request deadline sent the ARRIVE again.
    if (restarted || !m->alive) {
        kd_msg_destroy (&m->held_arrive);
        memset (m->staged, 0, sizeof m->staged);
    }
    if (role == KD_MEMBER_WORKER && (restarted || !m->alive || !m->reg))
        m->reg = self->session + ++self->registrations;
    bool was_alive = m->alive;
    m->alive = true;
    m->last_seen = kd_now_ms ();
    if (role == KD_MEMBER_MONITOR)
        self->monitor_keyed = kd_msg_uint (msg, KD_F_KEYS) == 1;
    if (role == KD_MEMBER_WORKER)
        m->lease_ahead = kd_msg_uint (msg, KD_F_LEASE_AHEAD) == 1;
    //  A shard's endpoint is where workers push; the monitor's, its
    //  intake, is where evaluators report.
    if (role == KD_MEMBER_SHARD || (role == KD_MEMBER_MONITOR && kd_msg_has (msg, KD_F_ENDPOINT))) {
        free (m->endpoint);
        m->endpoint = strdup (kd_msg_str (msg, KD_F_ENDPOINT));
    }
    if (role == KD_MEMBER_SHARD) {
        m->version = kd_msg_uint (msg, KD_F_VERSION);
        m->samples = kd_msg_uint (msg, KD_F_SAMPLES);
    }
    *restarted_p = restarted;
    *was_alive_p = was_alive;
}

//  HELLO, last part: the member is told where it stands (WELCOME, START,
//  a resync), and the run may start.
static void
s_hello_welcome (self_t *self, kd_member_t *m, kd_msg_t *msg, bool rejoin, bool restarted, bool was_alive)
{
    kd_member_role_t role = m->role;
    const char *name = m->name;
    kd_info ("%s %s name=%s rank=%llu version=%llu", rejoin ? "rejoin" : "join", kd_member_role_name (role),
             name, (unsigned long long) m->rank, (unsigned long long) kd_msg_uint (msg, KD_F_VERSION));
    //  A shard of an external model waits for its layout (s_adopt_layout).
    if (rejoin && !was_alive && (role == KD_MEMBER_WORKER || role == KD_MEMBER_SHARD))
        s_event (self, role == KD_MEMBER_WORKER ? "worker-rejoin" : "shard-rejoin", m,
                 restarted ? "registered again from a new process" : "registered again");
    //  So does an evaluator: a WELCOME names the model it scores.
    if ((role != KD_MEMBER_SHARD && role != KD_MEMBER_EVALUATOR) || self->n_params > 0)
        s_send_welcome (self, m);
    //  Evaluators welcomed before the monitor came learn where it is.
    if (role == KD_MEMBER_MONITOR && self->n_params > 0)
        s_each_evaluator (self, s_send_welcome);
    //  A member that only says HELLO again (it heard nothing from us for
    //  its liveness) is the same process with the same state.
    bool same_process = was_alive && !restarted;
    //  A worker that was declared dead while computing may have pushed that
    //  gradient after its death was handled (a SIGSTOP, a partition): drop
    //  it again now, after the push, so no shard keeps it for ever.  Not on
    //  a live worker's second HELLO: readmitted, it may compute that very
    //  clock again, and the drop would take its new push.
    if (role == KD_MEMBER_WORKER && m->orphan && !same_process && self->state == S_TRAINING) {
        s_drop_gradient (self, m->rank, m->orphan_clock);
        self->dropped++;
    }
    //  A live shard keeps its place in its chain and is told it again.
    //  Rejoining as the tail would demote a primary and overwrite, with its
    //  predecessor's state, gradients that only it had staged.
    int pos = role == KD_MEMBER_SHARD ? s_chain_pos (self, m) : -1;
    if (same_process && pos >= 0 && (self->state == S_TRAINING || self->state == S_FINISHING)) {
        //  A lost range still gathering has no roles yet: the regather
        //  tells every member its own.
        if (!self->chains [s_range_of (self, m->rank)].gather_until)
            s_send_chain (self, s_range_of (self, m->rank), (size_t) pos, false);
        s_maybe_start (self);
        return;
    }
    //  A shard that comes back behind the cluster (restored from a
    //  checkpoint, or restarted empty) is brought to the current version.
    if (role == KD_MEMBER_SHARD)
        s_chain_join (self, m);
    //  Not a live one that only said HELLO again: its COMMITs are queued
    //  in order, and the version its HELLO carried is already behind them.
    if (role == KD_MEMBER_SHARD && self->state == S_TRAINING && !same_process
    &&  s_primary (self, s_range_of (self, m->rank)) == m)
        s_resync_shard (self, m);
    if (self->state == S_TRAINING && role != KD_MEMBER_SHARD) {
        s_send_start (self, m);
        if (role == KD_MEMBER_WORKER && !(was_alive && kd_controller_is_active (self->ctl, (uint32_t) m->rank))) {
            s_join (self, m, kd_now_ms ());
            s_drain (self);
        }
    }
    s_maybe_start (self);
}

//  HELLO: a peer registers, or registers again (a restart, a rejoin).
static void
s_on_hello (self_t *self, kd_msg_t *msg, zframe_t *id)
{
    kd_member_role_t role;
    if (s_hello_check (self, msg, id, &role))
        return;
    bool rejoin = kd_members_find (self->members, kd_msg_str (msg, KD_F_NAME)) != NULL;
    kd_member_t *m = s_hello_admit (self, msg, id, role);
    if (!m)
        return;
    bool restarted, was_alive;
    s_hello_bind (self, m, msg, id, &restarted, &was_alive);
    s_hello_welcome (self, m, msg, rejoin, restarted, was_alive);
}

//  A worker is gone (LEAVE or death): release anyone who waited on it.
static void
s_worker_gone (self_t *self, kd_member_t *m, const char *why)
{
    if (!m->alive)
        return;
    m->alive = false;
    //  A held ARRIVE never counted: its gradient is dropped below with the
    //  one it was computing, on every range, whichever ranges staged it.
    kd_msg_destroy (&m->held_arrive);
    memset (m->staged, 0, sizeof m->staged);
    bool computing = m->released && !m->waiting;
    m->waiting = m->released = m->has_arrived = false;
    uint64_t silent_ms = kd_now_ms () - m->last_seen;
    kd_info ("%s worker name=%s rank=%llu silent_ms=%llu", why, m->name, (unsigned long long) m->rank,
             (unsigned long long) silent_ms);
    char detail [128];
    snprintf (detail, sizeof detail, "worker %s (%s) after %llu ms of silence", m->name, why,
              (unsigned long long) silent_ms);
    s_event (self, !strcmp (why, "dead") ? "worker-dead" : "worker-left", m, detail);
    //  After the finish nothing is decided any more: a leave then must not
    //  complete a phase and commit past the final version.
    if (self->state == S_FINISHING || self->state == S_DONE)
        s_check_pulls (self);
    else
    if (kd_controller_is_active (self->ctl, (uint32_t) m->rank)
    ||  self->state == S_TRAINING) {
        kd_controller_leave (self->ctl, (uint32_t) m->rank, kd_now_ms ());
        s_drain (self);
    }
    //  A worker that died between PUSH and ARRIVE left its gradient staged
    //  on the shards, and the controller never heard of it: drop it so the
    //  shards do not keep it for ever.  Dropping a key that was never
    //  staged is harmless.
    if (computing && self->state == S_TRAINING) {
        m->orphan = true;
        m->orphan_clock = m->last_release.clock;
        s_drop_gradient (self, m->rank, m->last_release.clock);
    }
}

//  Stop once the epochs are trained: enough rows applied, and every row of
//  each whole epoch among them.
static void
s_check_epochs (self_t *self)
{
    kd_sampler_t *sampler = kd_controller_sampler (self->ctl);
    if (!sampler || self->state != S_TRAINING)
        return;
    double epochs = self->epochs;
    uint64_t done = kd_sampler_epochs_completed (sampler);
    if (done != self->epochs_done) {
        kd_info ("epoch complete epochs=%llu applied_rows=%llu", (unsigned long long) done,
                 (unsigned long long) kd_sampler_applied_rows (sampler));
        self->epochs_done = done;
    }
    if ((double) kd_sampler_applied_rows (sampler) >= epochs * (double) self->train_rows
    &&  (double) done >= floor (epochs))
        s_finish (self, "epochs");
}

//  ARRIVE: a worker pushed its gradient everywhere and meets the barrier.
static void
s_on_arrive (self_t *self, kd_member_t *m, kd_msg_t *msg)
{
    if (self->state != S_TRAINING)
        return;
    uint64_t clock = kd_msg_uint (msg, KD_F_CLOCK);
    uint64_t samples = kd_msg_uint (msg, KD_F_SAMPLES);
    if (samples > S_MAX_BATCH) {
        s_error (self, m->routing_id, KD_ERR_MALFORMED, "samples out of range");
        return;
    }
    uint64_t now = kd_now_ms ();
    //  A worker that heard nothing for a while sends its ARRIVE again: if
    //  it is still waiting, that changes nothing; if its RELEASE was lost,
    //  it gets the same RELEASE again.
    if (m->waiting && clock == m->arrive_clock)
        return;
    if (!m->waiting && m->released && m->has_arrived && clock == m->arrive_clock) {
        s_send_release (self, m, &m->last_release);
        return;
    }
    //  ASP/SSP: the staleness the shards saw when they applied it, read
    //  by s_do_commit while the arrival is committed.
    m->reported_tau = kd_msg_uint (msg, KD_F_STALENESS);
    bool refused = kd_msg_uint (msg, KD_F_REFUSED) > 0;
    if (refused ? kd_controller_refuse (self->ctl, (uint32_t) m->rank, clock,
                                        kd_msg_uint (msg, KD_F_BASE), now)
                : kd_controller_arrive (self->ctl, (uint32_t) m->rank, clock,
                                        kd_msg_uint (msg, KD_F_BASE), samples, now)) {
        //  A worker that rejoined can miss the RELEASE its rejoin produced
        //  (it was busy pushing) and arrive with its old clock: send that
        //  RELEASE again, so it computes the clock it was given.
        if (m->released && !m->waiting && clock != m->last_release.clock) {
            kd_info ("stale arrival rank=%llu clock=%llu, resending release clock=%llu",
                     (unsigned long long) m->rank, (unsigned long long) clock,
                     (unsigned long long) m->last_release.clock);
            s_send_release (self, m, &m->last_release);
            return;
        }
        char reason [128];
        snprintf (reason, sizeof reason, "arrival rejected rank=%llu clock=%llu samples=%llu "
                  "(a gradient covers exactly its lease)", (unsigned long long) m->rank,
                  (unsigned long long) clock, (unsigned long long) samples);
        s_error (self, m->routing_id, KD_ERR_STATE, reason);
        return;
    }
    double t = kd_now_msf ();
    if (m->release_ms > 0) {
        self->busy_total += t - m->release_ms;
        m->iter_ms += t - m->release_ms;
    }
    m->arrive_ms = t;
    m->waiting = true;
    m->has_arrived = true;
    m->arrive_clock = clock;
    m->iterations++;
    if (refused) {
        m->refused++;
        kd_warn ("gradient refused by a shard rank=%llu name=%s clock=%llu: its rows go back "
                 "(refused so far %llu)", (unsigned long long) m->rank, m->name,
                 (unsigned long long) clock, (unsigned long long) m->refused);
    }
    double compute = kd_msg_float (msg, KD_F_COMPUTE_MS), emulated = kd_msg_float (msg, KD_F_EMULATED_MS);
    if (isfinite (compute) && compute >= 0 && compute < 1e9)
        m->compute_ms += compute;
    if (isfinite (emulated) && emulated >= 0 && emulated < 1e9)
        m->emulated_ms += emulated;
    //  The first arrival after a rejoin proves that any late push of the
    //  orphaned clock reached the shards before this clock's pushes (one
    //  connection keeps the order): dropping it again now leaves nothing
    //  staged for ever.  Same clock: the new push already replaced it.
    if (m->orphan) {
        if (m->orphan_clock != clock)
            s_drop_gradient (self, m->rank, m->orphan_clock);
        m->orphan = false;
    }
    size_t active = kd_controller_active (self->ctl);
    if (active > self->max_live_workers)
        self->max_live_workers = active;
    double loss = kd_msg_float (msg, KD_F_LOSS);
    if (isfinite (loss) && loss < 1e29) {
        self->train_loss = self->have_loss ? (1 - S_LOSS_ALPHA) * self->train_loss + S_LOSS_ALPHA * loss
                                           : loss;
        self->have_loss = true;
    }
    s_drain (self);
    s_check_epochs (self);
}

//  --------------------------------------------------------------------------
//  The short phase path (--phase-path short, protocol 9.3.1)

//  A worker's STAGED slot for clock, or NULL; with take, the least
//  recently used slot, cleared for it.
static kd_staged_t *
s_staged_slot (kd_member_t *m, uint64_t clock, bool take)
{
    kd_staged_t *lru = &m->staged [0];
    for (size_t i = 0; i < KD_MEMBERS_STAGED_SLOTS; i++) {
        if (m->staged [i].clock1 == clock + 1)
            return &m->staged [i];
        if (m->staged [i].used < lru->used)
            lru = &m->staged [i];
    }
    if (!take)
        return NULL;
    *lru = (kd_staged_t) { .clock1 = clock + 1 };
    return lru;
}

//  Count a held ARRIVE whose pushes every range has staged now.
static void
s_arrive_staged (self_t *self, kd_member_t *m)
{
    kd_msg_t *arrive = m->held_arrive;
    kd_staged_t *slot = arrive ? s_staged_slot (m, kd_msg_uint (arrive, KD_F_CLOCK), false) : NULL;
    uint64_t all = self->n_ranges >= 64 ? UINT64_MAX : (1ull << self->n_ranges) - 1;
    if (!slot || (slot->mask & all) != all)
        return;
    m->held_arrive = NULL;
    if (slot->refused)
        kd_msg_set_uint (arrive, KD_F_REFUSED, 1);
    s_on_arrive (self, m, arrive);
    kd_msg_destroy (&arrive);
}

//  ARRIVE, either path.  A worker on the short path sends ARRIVE with
//  `staged: 1` as soon as its PUSHes are sent, not acknowledged: the
//  arrival is held until every range's primary says STAGED, so a commit
//  only names a gradient that every range holds (a worker that dies
//  first is handled as one that died pushing).  A repeat of an arrival
//  already counted goes straight through, to get its RELEASE again.
static void
s_on_arrive_any (self_t *self, kd_member_t *m, kd_msg_t *msg)
{
    uint64_t clock = kd_msg_uint (msg, KD_F_CLOCK);
    if (!self->short_path || !kd_msg_uint (msg, KD_F_STAGED) || kd_msg_uint (msg, KD_F_REFUSED)
    ||  (m->has_arrived && clock == m->arrive_clock)) {
        //  Counted now: an ARRIVE of that clock still held would only count
        //  it again when its STAGED complete.
        if (m->held_arrive && kd_msg_uint (m->held_arrive, KD_F_CLOCK) == clock)
            kd_msg_destroy (&m->held_arrive);
        s_on_arrive (self, m, msg);
        return;
    }
    kd_msg_destroy (&m->held_arrive);
    m->held_arrive = kd_msg_dup (msg);
    s_arrive_staged (self, m);
}

//  STAGED: a range's primary holds (rank, clock), or refused it for good.
static void
s_on_staged (self_t *self, kd_member_t *shard, kd_msg_t *msg)
{
    kd_member_t *m = kd_members_worker (self->members, kd_msg_uint (msg, KD_F_RANK));
    if (!self->short_path || !m || !m->alive)
        return;
    //  Only the range's primary speaks for it: a shard that lost that
    //  place (a failover) may still send what it staged before.
    size_t range = s_range_of (self, shard->rank);
    if (s_primary (self, range) != shard)
        return;
    //  A push of the worker's previous registration (a shard without reg
    //  is older than it, and is taken at its word).
    if (kd_msg_has (msg, KD_F_REG) && kd_msg_uint (msg, KD_F_REG) != m->reg) {
        kd_debug ("staged of an earlier registration rank=%llu clock=%llu: ignored",
                  (unsigned long long) m->rank, (unsigned long long) kd_msg_uint (msg, KD_F_CLOCK));
        return;
    }
    kd_staged_t *slot = s_staged_slot (m, kd_msg_uint (msg, KD_F_CLOCK), true);
    slot->used = ++m->staged_tick;
    slot->mask |= 1ull << range;
    if (kd_msg_uint (msg, KD_F_REFUSED))
        slot->refused = true;
    s_arrive_staged (self, m);
}

//  EVAL_OK: a test accuracy for some version.
static void
s_on_eval_ok (self_t *self, kd_msg_t *msg)
{
    double accuracy = kd_msg_float (msg, KD_F_ACCURACY);
    uint64_t version = kd_msg_uint (msg, KD_F_VERSION);
    if (!(accuracy >= 0 && accuracy <= 1))
        return;
    if (version >= self->accuracy_version) {
        self->accuracy = accuracy;
        self->accuracy_version = version;
    }
    uint64_t ts = kd_msg_uint (msg, KD_F_TS_MS);
    double at = ts > self->t0_ms ? (double) (ts - self->t0_ms) / 1000.0 : 0;
    for (size_t i = 0; i < S_N_MILESTONES; i++)
        if (accuracy >= s_milestones [i] && (self->milestone_s [i] < 0 || at < self->milestone_s [i]))
            self->milestone_s [i] = at;
    //  One evaluation is a noisy figure: the target is met when the mean of
    //  the evaluations of the last second reaches it.
    if (ts == 0)
        ts = kd_wall_ms ();
    self->acc_value [self->acc_at] = accuracy;
    self->acc_ts [self->acc_at] = ts;
    self->acc_at = (self->acc_at + 1) % S_ACC_HISTORY;
    if (self->acc_n < S_ACC_HISTORY)
        self->acc_n++;
    double sum = 0;
    size_t n = 0;
    for (size_t i = 0; i < self->acc_n; i++)
        if (self->acc_ts [i] + S_ACC_WINDOW_MS > ts && self->acc_ts [i] <= ts) {
            sum += self->acc_value [i];
            n++;
        }
    double rolling = n > 0 ? sum / (double) n : accuracy;
    double target = self->target_accuracy;
    if (self->state == S_TRAINING && target > 0 && rolling >= target) {
        self->stop_accuracy = rolling;
        kd_info ("target met rolling_accuracy=%.4f evaluations=%zu target=%.4f", rolling, n, target);
        s_finish (self, "target-accuracy");
    }
    if (self->state == S_FINISHING && self->eval_pending && version >= self->final_version) {
        self->eval_pending = false;
        s_check_finished (self);
    }
}

static void s_on_peer_message (self_t *self, kd_msg_t *msg);
static void s_on_relay (self_t *self, kd_msg_t *relay);

//  One message from a peer, received directly or unpacked from a RELAY
//  (then self->via is its aggregator).  Does not take the message.
static void
s_on_peer_message (self_t *self, kd_msg_t *msg)
{
    zframe_t *rid = kd_msg_routing_id (msg);
    kd_msg_type_t type = kd_msg_type (msg);
    if (type == KD_MSG_HELLO) {
        s_on_hello (self, msg, rid);
        return;
    }
    char hex [KD_MEMBERS_ID_MAX];
    s_peer_key (self, rid, hex, sizeof hex);
    kd_member_t *m = kd_members_find_id (self->members, hex);
    if (!m || !m->alive) {
        s_error (self, rid, KD_ERR_NOT_REGISTERED, "not registered: send HELLO first");
        return;
    }
    m->last_seen = kd_now_ms ();
    switch (type) {
        case KD_MSG_HEARTBEAT:
            break;
        case KD_MSG_ARRIVE:
            if (m->role == KD_MEMBER_WORKER)
                s_on_arrive_any (self, m, msg);
            else
                s_error (self, rid, KD_ERR_STATE, "ARRIVE is for workers");
            break;
        case KD_MSG_STAGED:
            if (m->role == KD_MEMBER_SHARD)
                s_on_staged (self, m, msg);
            else
                s_error (self, rid, KD_ERR_STATE, "STAGED is for shards");
            break;
        case KD_MSG_LEAVE:
            if (m->role == KD_MEMBER_WORKER)
                s_worker_gone (self, m, "leave");
            else
            if (m->role == KD_MEMBER_EVALUATOR) {
                kd_info ("leave evaluator name=%s", m->name);
                m->alive = false;
            }
            break;
        case KD_MSG_COMMIT_OK:
            if (m->role == KD_MEMBER_SHARD) {
                m->version = kd_msg_uint (msg, KD_F_VERSION);
                if (kd_msg_uint (msg, KD_F_LOST) > 0)
                    kd_debug ("shard name=%s lost=%llu", m->name,
                              (unsigned long long) kd_msg_uint (msg, KD_F_LOST));
                s_chain_acked (self, m);
            }
            break;
        case KD_MSG_SYNC_OK:
            s_on_sync_ok (self, m, msg);
            break;
        case KD_MSG_EVAL_OK:
            if (m->role == KD_MEMBER_MONITOR)
                s_on_eval_ok (self, msg);
            break;
        case KD_MSG_ERROR:
            kd_warn ("peer error name=%s code=%llu reason=\"%s\"", m->name,
                     (unsigned long long) kd_msg_uint (msg, KD_F_CODE), kd_msg_str (msg, KD_F_REASON));
            break;
        default: {
            char reason [96];
            snprintf (reason, sizeof reason, "command invalid: %s", kd_msg_type_name (type));
            s_error (self, rid, KD_ERR_UNKNOWN_TYPE, reason);
            s_strike (self, rid, reason);
        }
    }
}

//  A RELAY from a barrier aggregator: its workers' messages, each handled
//  as if it had come directly, with the role, key and address the
//  aggregator saw.  An item that is malformed or forbidden is answered with
//  ERROR through the aggregator, and the rest are still handled.
static void
s_on_relay (self_t *self, kd_msg_t *relay)
{
    zframe_t *via = kd_msg_routing_id (relay);
    kd_msg_source_t outer = self->src;
    size_t offset = 0, index = 0;
    kd_bundle_item_t item;
    char reason [160];
    int rc;
    self->via = via;
    while ((rc = kd_bundle_next (relay, &offset, &index, &item, reason, sizeof reason)) == 0) {
        zframe_t *id = zframe_new (item.id, item.id_size);
        kd_msg_t *msg = NULL;
        kd_msg_err_t err;
        //  The aggregator vouches for its workers' roles: under CURVE only a
        //  scheduler key may send RELAY (kd_role).
        self->src = item.src;
        self->src.fd = -1;
        if (kd_bundle_decode (&item, &msg, &err) != 0)
            s_error (self, id, err.code, err.reason);
        else
        if (!kd_role_allows (KD_SVC_SCHEDULER, self->src.role, kd_msg_type (msg))) {
            snprintf (reason, sizeof reason, "forbidden: role %s may not send %s here",
                      self->src.role, kd_msg_type_name (kd_msg_type (msg)));
            s_error (self, id, KD_ERR_FORBIDDEN, reason);
        }
        else
        if (kd_msg_type (msg) == KD_MSG_RELAY)
            s_error (self, id, KD_ERR_MALFORMED, "a RELAY cannot hold a RELAY");
        else
            s_on_peer_message (self, msg);
        kd_msg_destroy (&msg);
        zframe_destroy (&id);
    }
    self->via = NULL;
    self->src = outer;
    kd_aggregators_received (self->aggs, via, index);
    if (rc == -2) {
        //  What came before the bad item was handled; tell the aggregator.
        s_error (self, via, KD_ERR_MALFORMED, reason);
        kd_guard_strike (self->guard, via, reason);
    }
}

//  --------------------------------------------------------------------------
//  Timers

//  Heartbeats out, and deaths of silent members.
static void
s_on_heartbeat (self_t *self)
{
    uint64_t now = kd_now_ms ();
    uint64_t limit = (uint64_t) self->heartbeat_ms * (uint64_t) self->liveness;
    //  Silence counts only time this loop ran.  When it ran late (a starved
    //  or stopped scheduler), the members' messages of the delay wait unread
    //  in the socket: that silence is ours, so each live member is credited
    //  the delay beyond one interval.  Judging it declared every member dead
    //  at once, and each range lost every replica (test_replication under
    //  load).  A member that really died still goes silent by one interval
    //  a tick, however late the ticks, and is judged within `liveness` of
    //  them.
    uint64_t gap = now - self->last_beat;
    self->last_beat = now;
    if (gap > (uint64_t) self->heartbeat_ms) {
        uint64_t credit = gap - (uint64_t) self->heartbeat_ms;
        for (kd_member_t *m = kd_members_first (self->members); m; m = kd_members_next (self->members))
            if (m->alive)
                m->last_seen += credit < now - m->last_seen ? credit : now - m->last_seen;
        if (credit > (uint64_t) self->heartbeat_ms) {
            self->pauses++;
            kd_warn ("no turn for %llu ms (starved or stopped): members are credited %llu ms of silence",
                     (unsigned long long) gap, (unsigned long long) credit);
        }
    }
    zlistx_t *dead = kd_members_silent (self->members, now, limit);
    kd_member_t *m;
    for (m = kd_members_first (self->members); m; m = kd_members_next (self->members))
        if (m->alive && now - m->last_seen <= limit) {
            kd_msg_t *hb = kd_msg_new (KD_MSG_HEARTBEAT);
            s_send_to (self, m, &hb);
        }
    //  Deaths are handled after the walk: they change the controller, which
    //  must not happen while iterating the member table.
    for (m = (kd_member_t *) zlistx_first (dead); m; m = (kd_member_t *) zlistx_next (dead)) {
        if (m->role == KD_MEMBER_WORKER)
            s_worker_gone (self, m, "dead");
        else {
            kd_warn ("dead %s name=%s rank=%llu silent_ms=%llu", kd_member_role_name (m->role), m->name,
                     (unsigned long long) m->rank, (unsigned long long) (now - m->last_seen));
            m->alive = false;
            char detail [128];
            snprintf (detail, sizeof detail, "%s %s silent for %llu ms", kd_member_role_name (m->role),
                      m->name, (unsigned long long) (now - m->last_seen));
            if (m->role == KD_MEMBER_SHARD) {
                s_event (self, "shard-dead", m, detail);
                s_chain_remove (self, m);
            }
        }
    }
    zlistx_destroy (&dead);
}

//  STATUS to the monitor.
static void
s_on_status (self_t *self)
{
    kd_member_t *monitor = kd_members_monitor (self->members);
    if (!monitor || !monitor->alive)
        return;
    kd_msg_t *msg = kd_msg_new (KD_MSG_STATUS);
    kd_msg_set_uint (msg, KD_F_VERSION, kd_controller_version (self->ctl));
    kd_msg_set_uint (msg, KD_F_PHASES, self->phases);
    kd_msg_set_float (msg, KD_F_EPOCH, self->train_rows ? (double) self->samples / (double) self->train_rows : 0);
    kd_msg_set_uint (msg, KD_F_WORKERS, kd_controller_active (self->ctl));
    kd_msg_set_uint (msg, KD_F_DROPPED, self->dropped);
    kd_msg_set_uint (msg, KD_F_REGROUPS, self->regroups);
    kd_msg_set_uint (msg, KD_F_SAMPLES, self->samples);
    kd_msg_set_str (msg, KD_F_CONSISTENCY, kd_config_str (self->config, "consistency"));
    //  Under auto, what it runs now: the stream and the dashboard show it.
    kd_msg_set_str (msg, KD_F_MODE, kd_consistency_name (kd_controller_mode (self->ctl)));
    kd_msg_set_str (msg, KD_F_MODEL, s_model_name (self));
    //  The barrier tree's traffic, for the monitor's metrics.
    kd_aggregators_stats_t *r = kd_aggregators_stats (self->aggs);
    uint64_t relays [5] = { kd_aggregators_size (self->aggs), r->relays_in, r->items_in,
                            r->relays_out, r->items_out };
    kd_msg_set_uints (msg, KD_F_RELAYS, relays, 5);
    if (self->groups) {
        uint64_t ranks [KD_MEMBERS_MAX_WORKERS], groups [KD_MEMBERS_MAX_WORKERS];
        size_t n = 0;
        for (size_t r = 0; r < self->n_groups && r < KD_MEMBERS_MAX_WORKERS; r++)
            if (self->groups [r] != UINT32_MAX) {
                ranks [n] = r;
                groups [n++] = self->groups [r];
            }
        kd_msg_set_uints (msg, KD_F_RANKS, ranks, n);
        kd_msg_set_uints (msg, KD_F_GROUPS, groups, n);
    }
    s_send_to (self, monitor, &msg);
}

//  Time-based checks: run time limit, final-eval deadline, window ticks.
static void
s_on_tick (self_t *self)
{
    uint64_t now = kd_now_ms ();
    for (size_t g = 0; g < self->n_ranges && self->replicas > 1; g++)
        if (self->chains [g].gather_until && now >= self->chains [g].gather_until)
            s_chain_regather (self, g);
    if (self->state == S_TRAINING) {
        kd_controller_tick (self->ctl, now);
        s_drain (self);
        double limit = self->max_seconds;
        if (limit > 0 && (kd_now_msf () - self->t0_mono) / 1000.0 >= limit)
            s_finish (self, "max-seconds");
    }
    if (self->state == S_FINISHING && self->eval_pending && now >= self->finish_deadline) {
        kd_warn ("final evaluation timed out version=%llu", (unsigned long long) self->final_version);
        self->eval_pending = false;
        s_check_finished (self);
    }
    if (self->state == S_FINISHING && self->pulls_pending && now >= self->pulls_deadline) {
        kd_info ("final pulls: window of %lld ms closed with workers still registered",
                 (long long) kd_config_int (self->config, "final-pull-ms"));
        self->pulls_pending = false;
        s_check_finished (self);
    }
}

//  Build the controller from the config table.
static kd_controller_t *
s_controller_new (kd_config_t *c, uint64_t initial_version, uint64_t rows)
{
    kd_controller_opts_t opts;
    int model = kd_consistency_parse (kd_config_str (c, "consistency"));
    assert (model >= 0);    //  the config table only admits known names
    kd_controller_opts_defaults (&opts, (kd_consistency_t) model);
    opts.staleness = (uint32_t) kd_config_int (c, "staleness");
    opts.quota = (uint32_t) kd_config_int (c, "quota");
    opts.quota_ratio = kd_config_double (c, "quota-ratio");
    opts.window_ms = (uint32_t) kd_config_int (c, "window-ms");
    opts.barrier = (kd_barrier_t) kd_barrier_parse (kd_config_str (c, "barrier"));
    opts.slack = kd_config_double (c, "barrier-slack");
    //  barrier-spread auto (NAN from the table) lets the controller choose
    //  the allowance from the noise it measures; a number fixes it.
    double spread = kd_config_double (c, "barrier-spread");
    opts.spread_auto = isnan (spread);
    opts.spread = opts.spread_auto ? 0 : spread;
    //  quota-ratio is the K rule's; under the adaptive barrier it does
    //  nothing, and a user who set it should hear so.
    if (opts.barrier == KD_BARRIER_ADAPTIVE && opts.quota == 0 && opts.window_ms == 0
    &&  kd_config_is_set (c, "quota-ratio"))
        kd_warn ("quota-ratio=%g has no effect under the adaptive barrier; add --barrier quota for the K rule",
                 opts.quota_ratio);
    opts.group_ratio = kd_config_double (c, "group-ratio");
    opts.min_group = (uint32_t) kd_config_int (c, "min-group");
    opts.max_groups = (uint32_t) kd_config_int (c, "max-groups");
    opts.group_staleness = (uint32_t) kd_config_int (c, "group-staleness");
    opts.group_step = (kd_group_step_t) kd_group_step_parse (kd_config_str (c, "group-step"));
    opts.regroup_dwell_ms = (uint32_t) (kd_config_double (c, "regroup-dwell") * 1000);
    //  With the monitor's telemetry as the speed source, a rank's arrivals
    //  are timed only while its reports are missing.
    if (!strcmp (kd_config_str (c, "speed-source"), "telemetry"))
        opts.telemetry_fresh_ms = KD_SPEED_FEED_MAX_AGE_MS;
    if (kd_staleness_weight_parse (kd_config_str (c, "staleness-weight"), &opts.weight,
                                   &opts.weight_lambda))
        return NULL;
    opts.rows = rows;
    opts.batch = (uint32_t) kd_config_int (c, "batch");
    opts.seed = (uint64_t) kd_config_int (c, "seed");
    opts.max_workers = KD_MEMBERS_MAX_WORKERS;
    opts.initial_version = initial_version;
    return kd_controller_new (&opts);
}

int
kd_scheduler_optimizer (kd_config_t *config, char *spec, size_t spec_size,
                        char *err, size_t err_size)
{
    int kind = kd_optimizer_kind_parse (kd_config_str (config, "optimizer"));
    if (kind < 0) {
        snprintf (err, err_size, "setting 'optimizer': unknown rule '%s'", kd_config_str (config, "optimizer"));
        return -1;
    }
    kd_optimizer_opts_t o = kd_optimizer_defaults ((kd_opt_kind_t) kind);
    o.lr = kd_config_double (config, "lr");
    o.momentum = kd_config_double (config, "momentum");
    o.beta1 = kd_config_double (config, "beta1");
    o.beta2 = kd_config_double (config, "beta2");
    o.eps = kd_config_double (config, "eps");
    o.weight_decay = kd_config_double (config, "weight-decay");
    o.l1 = kd_config_double (config, "l1");
    o.l2 = kd_config_double (config, "l2");
    o.ftrl_beta = kd_config_double (config, "ftrl-beta");
    o.warmup = (uint64_t) kd_config_int (config, "warmup-steps");
    o.per_sample = !strcmp (kd_config_str (config, "schedule-unit"), "samples");
    char why [200];
    if (kd_optimizer_schedule_parse (kd_config_str (config, "lr-schedule"), &o, why, sizeof why)) {
        snprintf (err, err_size, "setting 'lr-schedule': %s", why);
        return -1;
    }
    if (kd_optimizer_opts_check (&o, why, sizeof why)) {
        snprintf (err, err_size, "settings of the optimizer: %s", why);
        return -1;
    }
    return kd_optimizer_format (&o, spec, spec_size);
}

//  A request the loop checked (codec, guard, role): a RELAY is unpacked,
//  anything else handled as one peer's message.
static void
s_on_request (void *state, kd_msg_t *msg)
{
    self_t *self = (self_t *) state;
    self->src = *kd_server_source (self->server);
    if (kd_msg_type (msg) == KD_MSG_RELAY)
        s_on_relay (self, msg);
    else
        s_on_peer_message (self, msg);
    if (self->state == S_DONE)
        kd_server_stop (self->server);
}

//  The monitor's stream (--speed-source telemetry): a worker's timings
//  become a speed sample.  A malformed message is logged, a few at most,
//  and otherwise ignored: the stream is advice, never a command.
static void
s_on_speed_report (void *state, zsock_t *sock)
{
    self_t *self = (self_t *) state;
    (void) sock;
    kd_speed_report_t r;
    char err [160];
    int rc = kd_speed_feed_recv (self->feed, &r, err, sizeof err);
    if (rc == -2) {
        uint64_t bad = kd_speed_feed_malformed (self->feed);
        if (bad <= 3 || bad % 1000 == 0)
            kd_warn ("monitor stream: malformed worker report (%s); %llu so far", err,
                     (unsigned long long) bad);
        return;
    }
    if (rc != 1 || r.rank >= KD_MEMBERS_MAX_WORKERS || self->state != S_TRAINING)
        return;
    self->feed_compute [r.rank] = (float) r.compute_ms;
    self->feed_link [r.rank] = (float) (r.push_ms + r.pull_ms);
    if (kd_controller_telemetry (self->ctl, r.rank, r.compute_ms + r.push_ms + r.pull_ms,
                                 kd_now_ms ()) == 0) {
        self->speed_reports++;
        s_drain (self);
    }
}

static void
s_on_server_error (void *state, zframe_t *id, int code, const char *reason)
{
    s_error ((self_t *) state, id, code, reason);
}

//  After every turn: timers, the run's limits, the aggregators' RELAYs,
//  and how long the next poll may wait.
static int
s_on_loop_tick (void *state)
{
    self_t *self = (self_t *) state;
    uint64_t now = kd_now_ms ();
    if (now >= self->next_heartbeat) {
        s_on_heartbeat (self);
        self->next_heartbeat = now + (uint64_t) self->heartbeat_ms;
    }
    if (now >= self->next_status) {
        s_on_status (self);
        self->next_status = now + (uint64_t) self->status_ms;
    }
    s_on_tick (self);
    //  Workers behind aggregators get this turn's messages in one RELAY
    //  per aggregator.
    kd_aggregators_flush (self->aggs);
    if (self->state == S_DONE) {
        kd_server_stop (self->server);
        return 0;
    }
    //  A short tick bounds LSP windows and run-time limits; an adaptive
    //  phase that waits for an overdue worker asks for a shorter one, so it
    //  is released when the worker stops being waited for and not up to a
    //  tick later.
    int timeout = S_MAX_POLL_MS;
    uint64_t deadline = self->ctl ? kd_controller_deadline (self->ctl) : UINT64_MAX;
    now = kd_now_ms ();
    if (self->state == S_TRAINING && deadline < now + S_MAX_POLL_MS)
        timeout = deadline > now ? (int) (deadline - now) : 0;
    return timeout;
}

int
kd_scheduler_run (kd_config_t *config, zsock_t *pipe)
{
    int rc = 1;
    //  Settings read on hot paths are bound to typed fields once, here.
    self_t self_s = {
        .config = config,
        .max_seconds = kd_config_double (config, "max-seconds"),
        .epochs = kd_config_double (config, "epochs"),
        .target_accuracy = kd_config_double (config, "target-accuracy")
    }, *self = &self_s;
    //  sparse-lr is the built-in worker's keyed model: its layout comes
    //  from the workers, as an external model's does.
    self->external = !strcmp (kd_config_str (config, "model"), "external")
                  || !strcmp (kd_config_str (config, "model"), "sparse-lr");
    self->sparse_lr = !strcmp (kd_config_str (config, "model"), "sparse-lr");
    self->kind = self->external ? KD_MODEL_SOFTMAX
               : (kd_model_kind_t) kd_model_kind_parse (kd_config_str (config, "model"));
    self->hidden = self->external ? 0 : (uint32_t) kd_config_int (config, "hidden");
    self->n_params = self->external ? 0 : kd_model_param_count (self->kind, self->hidden);
    //  An external model is scored by an evaluator the user runs
    //  (kudus.torch.Evaluator, kd_client_report_eval); without one the
    //  target is never met, so say so.
    if (self->external && !self->sparse_lr && kd_config_double (config, "target-accuracy") > 0)
        kd_warn ("setting 'target-accuracy': model external is scored only by an evaluator "
                 "(kudus.torch.Evaluator or kd_client_report_eval); without one the run stops "
                 "on epochs or max-seconds");
    self->n_ranges = (size_t) kd_config_int (config, "shards");
    //  Under ASP and SSP a push is applied on arrival and its PUSH_OK
    //  carries the staleness ARRIVE reports: only the committing models
    //  take the short path.  auto may switch to them, so it keeps classic.
    const char *model = kd_config_str (config, "consistency");
    self->short_path = !strcmp (kd_config_str (config, "phase-path"), "short")
                    && (!strcmp (model, "bsp") || !strcmp (model, "lsp") || !strcmp (model, "alsp"));
    if (!strcmp (kd_config_str (config, "phase-path"), "short") && !self->short_path)
        kd_warn ("setting 'phase-path': short applies to bsp, lsp and alsp; %s runs classic", model);
    self->replicas = (size_t) kd_config_int (config, "replicas");
    self->n_shards = self->n_ranges * self->replicas;
    if (self->n_shards > KD_MEMBERS_MAX_SHARDS || self->replicas > S_MAX_REPLICAS) {
        kd_error ("shards x replicas is %zu shard processes, at most %d", self->n_shards, KD_MEMBERS_MAX_SHARDS);
        return 2;
    }
    for (size_t g = 0; g < self->n_ranges; g++) {
        self->chains [g].unacked = zlistx_new ();
        //  Generations start at the wall clock's ms, so that a restarted
        //  scheduler's are above any its predecessor named (it made one
        //  per reconfiguration, far fewer than one a ms), unless the wall
        //  clock stepped back (docs/protocol.md 9.8).
        self->chains [g].gen = (uint64_t) zclock_time ();
    }
    self->min_workers = (size_t) kd_config_int (config, "min-workers");
    self->heartbeat_ms = (int) kd_config_int (config, "heartbeat-ms");
    self->liveness = (int) kd_config_int (config, "liveness");
    for (size_t i = 0; i < S_N_MILESTONES; i++)
        self->milestone_s [i] = -1;
    if (!self->external && self->n_ranges > self->n_params) {
        kd_error ("more shards than parameters shards=%zu params=%zu", self->n_ranges, self->n_params);
        return 2;
    }
    char err [256];
    if (kd_scheduler_optimizer (config, self->optimizer, sizeof self->optimizer, err, sizeof err)) {
        kd_error ("%s", err);
        return 2;
    }
    kd_info ("optimizer %s", self->optimizer);
    self->ctl = s_controller_new (config, 0, 0);
    self->stop_accuracy = -1;
    self->lease_rows = (uint32_t *) malloc (S_MAX_BATCH * sizeof (uint32_t));
    assert (self->lease_rows);
    //  A fresh session id tells shards that state staged with an earlier
    //  scheduler instance will never be committed.
    uint64_t seed = kd_wall_ms () ^ ((uint64_t) getpid () << 32);
    self->session = kd_splitmix64 (&seed) | 1;
    if (!self->ctl) {
        kd_error ("invalid consistency settings (staleness-weight is inverse, none or exp:LAMBDA)");
        free (self->lease_rows);
        return 2;
    }
    if (*kd_config_str (config, "history-file")) {
        self->history = kd_history_new (kd_config_str (config, "history-file"));
        if (!self->history) {
            kd_error ("setting 'history-file': cannot open %s: %s", kd_config_str (config, "history-file"),
                      strerror (errno));
            free (self->lease_rows);
            kd_controller_destroy (&self->ctl);
            return 2;
        }
        self->history_buf = (char *) malloc (KD_HISTORY_MAX_LINE / 2);
        assert (self->history_buf);
    }
    self->members = kd_members_new (self->n_shards,
                                    (size_t) kd_config_int (config, "max-registrations-per-key"));
    assert (self->members);     //  n_shards was checked above
    self->router = zsock_new (ZMQ_ROUTER);
    kd_socket_harden (self->router, kd_config_int (config, "max-msg-bytes"));
    kd_curve_server (kd_curve_process (), self->router);
    self->aggs = kd_aggregators_new (self->router);
    self->guard = kd_guard_new (self->router, "scheduler", (int) kd_config_int (config, "max-connections"),
                                (int) kd_config_int (config, "max-malformed"));
    if (zsock_bind (self->router, "%s", kd_config_str (config, "bind")) < 0) {
        kd_error ("cannot bind endpoint=%s: %s", kd_config_str (config, "bind"), zmq_strerror (zmq_errno ()));
        goto cleanup;
    }
    kd_warn_open_bind (kd_config_str (config, "bind"), kd_curve_enabled (kd_curve_process ()));
    kd_info ("listening endpoint=%s shards=%zu replicas=%zu min_workers=%zu model=%s consistency=%s",
             zsock_endpoint (self->router), self->n_ranges, self->replicas, self->min_workers,
             s_model_name (self), kd_config_str (config, "consistency"));

    uint64_t now = kd_now_ms ();
    self->status_ms = (int) kd_config_int (config, "status-ms");
    //  The first tick is judged late against this too: a scheduler starved
    //  right after it bound declared members dead that had registered and
    //  then only waited in its socket (a flake round).
    self->last_beat = now;
    self->next_heartbeat = now + (uint64_t) self->heartbeat_ms;
    self->next_status = now + (uint64_t) self->status_ms;
    self->server = kd_server_new (KD_SVC_SCHEDULER, self->router, self->guard, self);
    kd_server_on (self->server, KD_MSG_TYPE_COUNT, s_on_request);
    kd_server_set_error (self->server, s_on_server_error);
    kd_server_set_tick (self->server, s_on_loop_tick);
    //  A burst of arrivals is read before timers are looked at.
    kd_server_set_burst (self->server, 1000);
    if (!strcmp (kd_config_str (config, "speed-source"), "telemetry")) {
        self->feed = kd_speed_feed_new (kd_config_str (config, "monitor-pub"), err, sizeof err);
        if (!self->feed) {
            kd_error ("%s", err);
            rc = 2;         //  a bad setting
            goto cleanup;
        }
        kd_server_reader (self->server, kd_speed_feed_socket (self->feed), s_on_speed_report);
        kd_info ("speeds from the monitor's telemetry at %s; arrivals fill the gaps",
                 kd_config_str (config, "monitor-pub"));
    }
    kd_service_ready (pipe);
    kd_server_run (self->server, pipe);
    kd_server_destroy (&self->server);
    //  A signal during the finish leaves the run's own reason.
    if (self->state != S_DONE && self->state != S_FINISHING)
        snprintf (self->reason, sizeof self->reason, "signal");
    s_write_summary (self);
    //  Everyone stops with us: parameter servers must not linger.
    for (kd_member_t *m = kd_members_first (self->members); m; m = kd_members_next (self->members)) {
        kd_msg_t *stop = kd_msg_new (KD_MSG_STOP);
        kd_msg_set_str (stop, KD_F_REASON, self->reason);
        s_send_to (self, m, &stop);
    }
    kd_aggregators_flush (self->aggs);
    s_on_status (self);
    zsock_set_linger (self->router, 1000);
    rc = 0;
cleanup:
    kd_server_destroy (&self->server);
    kd_speed_feed_destroy (&self->feed);
    kd_guard_destroy (&self->guard);
    kd_aggregators_destroy (&self->aggs);
    zsock_destroy (&self->router);
    kd_members_destroy (&self->members);
    kd_controller_destroy (&self->ctl);
    for (size_t g = 0; g < self->n_ranges; g++) {
        s_chain_forget (self, g);
        zlistx_destroy (&self->chains [g].unacked);
    }
    free (self->groups);
    free (self->lease_rows);
    kd_history_destroy (&self->history);
    free (self->history_buf);
    return rc;
}
