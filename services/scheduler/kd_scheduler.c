/*  kd_scheduler: the scheduler's service loop.

    The scheduler is the single authority on membership and model versions.
    Shards, workers and the monitor register with HELLO and get a rank
    (the same rank again when a known name registers again).  Once the
    configured shards and workers are in, it sends START with the shards'
    address book, and from then on feeds every ARRIVE, LEAVE and death to the
    consistency controller (common/kd_controller.c) and sends out what it
    decides: COMMIT to every shard, RELEASE to one worker.  Training ends on
    epochs, time or target accuracy; the scheduler then stops the workers,
    asks the monitor for a final evaluation, writes the summary and stops
    everyone else.
*/
#include "kd_scheduler.h"
#include <math.h>
#include <msgpack.h>

#define S_MAX_WORKERS   1024            //  worker ranks
#define S_MAX_SHARDS    64              //  shard ranks
#define S_STALE_BINS    1024            //  staleness histogram bins
#define S_FINAL_EVAL_MS 30000           //  wait for the final evaluation
#define S_LOSS_ALPHA    0.02            //  EWMA weight of one train loss
#define S_COMMIT_SCRATCH (2 * S_MAX_WORKERS)  //  entries a commit holds without
                                        //  a malloc: a late and a fresh
                                        //  gradient per rank at most

typedef enum { S_ROLE_WORKER, S_ROLE_SHARD, S_ROLE_MONITOR } s_role_t;
typedef enum { S_WAITING, S_TRAINING, S_FINISHING, S_DONE } s_state_t;

static const double s_milestones [] = { 0.70, 0.75, 0.80, 0.82, 0.85 };
#define S_N_MILESTONES (sizeof s_milestones / sizeof s_milestones [0])

typedef struct {
    char *name;                 //  stable instance name (table key)
    s_role_t role;              //  what it is
    uint64_t rank;              //  rank within its role
    zframe_t *routing_id;       //  current ROUTER identity
    char id_hex [64];           //  routing id as hex (table key)
    uint64_t last_seen;         //  ms of its last message
    bool alive;                 //  registered and not declared dead
    char *endpoint;             //  shards: advertised endpoint
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
} s_member_t;

typedef struct {
    kd_config_t *config;        //  settings
    zsock_t *router;            //  every peer talks to us here
    zsock_t *telemetry;         //  SUB to the monitor's "worker" topic (ALSP)
    s_state_t state;            //  lifecycle
    kd_controller_t *ctl;       //  consistency decisions
    zhashx_t *by_name;          //  name -> s_member_t (owns)
    zhashx_t *by_id;            //  routing id hex -> s_member_t (borrows)
    s_member_t *workers [S_MAX_WORKERS];  //  by rank (borrowed)
    s_member_t *shards [S_MAX_SHARDS];    //  by rank (borrowed)
    s_member_t *monitor;        //  the monitor, if registered
    size_t n_shards;            //  configured shard count
    size_t min_workers;         //  workers needed to start
    size_t max_live_workers;    //  most workers training at once
    kd_model_kind_t kind;       //  model
    uint32_t hidden;            //  mlp hidden units
    size_t n_params;            //  flat parameter count
    uint64_t train_rows;        //  rows in the training set (min reported)
    uint64_t t0_ms;             //  wall ms at START
    double t0_mono;             //  monotonic ms at START
    double t_end;               //  monotonic ms when training ended
    uint64_t samples;           //  samples of accepted arrivals
    uint64_t updates;           //  commits with entries
    uint64_t phases;            //  decisions that released workers
    uint64_t stale_hist [S_STALE_BINS + 1];  //  applied-gradient staleness
    uint64_t dropped;           //  gradients dropped
    uint64_t regroups;          //  GROUPS decisions after the first
    uint32_t *groups;           //  last group assignment, by rank
    size_t n_groups;            //  its length
    double train_loss;          //  EWMA of reported losses
    bool have_loss;             //  train_loss is set
    double wait_total, busy_total;  //  worker barrier wait and work, ms
    double accuracy;            //  last test accuracy from the monitor
    uint64_t accuracy_version;  //  version it was measured at
    double milestone_s [S_N_MILESTONES];  //  seconds to reach, or -1
    uint64_t final_version;     //  version the final eval must cover
    uint64_t finish_deadline;   //  ms: give up on the final eval
    char reason [64];           //  why training ended
    uint64_t next_heartbeat;    //  ms
    uint64_t next_status;       //  ms
    int heartbeat_ms;           //  interval
    int liveness;               //  missed intervals that mean death
    uint64_t session;           //  this scheduler instance, sent in WELCOME
    uint64_t resumed_from;      //  version training resumed from (0 = fresh)
    uint64_t commit_u [4][S_COMMIT_SCRATCH];  //  s_do_commit: ranks, clocks,
                                //  drop ranks, drop clocks, without a malloc
    double commit_w [S_COMMIT_SCRATCH];       //  s_do_commit: weights
    bool part_valid;            //  s_drain: part_pos and part_live hold
    uint32_t part_pos [S_MAX_WORKERS];        //  s_drain: each live rank's
                                //  position among the live workers
    uint64_t part_live;         //  s_drain: live workers
} self_t;

//  --------------------------------------------------------------------------
//  Members

static void
s_member_destroy (void **item)
{
    s_member_t *m = (s_member_t *) *item;
    if (!m)
        return;
    zframe_destroy (&m->routing_id);
    free (m->name);
    free (m->endpoint);
    free (m);
    *item = NULL;
}

//  Routing id as a printable key.
static void
s_id_hex (zframe_t *id, char *out, size_t size)
{
    char *hex = zframe_strhex (id);
    snprintf (out, size, "%s", hex);
    free (hex);
}

static const char *
s_role_name (s_role_t role)
{
    return role == S_ROLE_WORKER ? "worker" : role == S_ROLE_SHARD ? "shard" : "monitor";
}

//  Send a message to a member (consumes the message).
static void
s_send_to (self_t *self, s_member_t *m, kd_msg_t **msg_p)
{
    if (!m || !m->alive || !m->routing_id) {
        kd_msg_destroy (msg_p);
        return;
    }
    kd_msg_set_routing_id (*msg_p, m->routing_id);
    kd_msg_send (msg_p, self->router);
}

//  Answer a peer with ERROR.
static void
s_error (self_t *self, zframe_t *id, int code, const char *reason)
{
    char hex [64] = "?";
    if (id)
        s_id_hex (id, hex, sizeof hex);
    kd_warn ("error peer=%s code=%d reason=\"%s\"", hex, code, reason);
    if (!id)
        return;
    kd_msg_t *msg = kd_msg_new_error (id, code, reason);
    kd_msg_send (&msg, self->router);
}

//  Tell the monitor about a membership or recovery event; it publishes it
//  on the "event" topic.
static void
s_event (self_t *self, const char *kind, s_member_t *m, const char *detail)
{
    kd_info ("event kind=%s name=%s detail=\"%s\"", kind, m ? m->name : "-", detail);
    if (!self->monitor || !self->monitor->alive)
        return;
    kd_msg_t *msg = kd_msg_new (KD_MSG_EVENT);
    kd_msg_set_str (msg, KD_F_KIND, kind);
    kd_msg_set_str (msg, KD_F_DETAIL, detail);
    kd_msg_set_uint (msg, KD_F_VERSION, kd_controller_version (self->ctl));
    if (m) {
        kd_msg_set_str (msg, KD_F_NAME, m->name);
        kd_msg_set_str (msg, KD_F_ROLE, s_role_name (m->role));
        kd_msg_set_uint (msg, KD_F_RANK, m->rank);
    }
    s_send_to (self, self->monitor, &msg);
}

//  Partition of the training set for a worker: by its position among the
//  live workers, so the data stays covered as workers come and go.
static void
s_partition_of (self_t *self, uint64_t rank, uint64_t *lo, uint64_t *hi)
{
    uint64_t position = 0, live = 0;
    if (self->part_valid && rank < S_MAX_WORKERS) {
        //  Inside s_drain membership cannot change, so one walk serves
        //  every RELEASE of a phase instead of one walk each.
        position = self->part_pos [rank];
        live = self->part_live;
    }
    else
        for (size_t r = 0; r < S_MAX_WORKERS; r++)
            if (self->workers [r] && self->workers [r]->alive) {
                if (r < rank)
                    position++;
                live++;
            }
    if (live == 0 || kd_range_split (self->train_rows, live, position, lo, hi)) {
        *lo = 0;
        *hi = self->train_rows;
    }
}

//  START for a worker or the monitor.
static void
s_send_start (self_t *self, s_member_t *m)
{
    const char *endpoints [S_MAX_SHARDS];
    uint64_t los [S_MAX_SHARDS], his [S_MAX_SHARDS];
    for (size_t i = 0; i < self->n_shards; i++) {
        endpoints [i] = self->shards [i]->endpoint;
        kd_range_split (self->n_params, self->n_shards, i, &los [i], &his [i]);
    }
    kd_msg_t *msg = kd_msg_new (KD_MSG_START);
    kd_msg_set_strs (msg, KD_F_ENDPOINTS, endpoints, self->n_shards);
    kd_msg_set_uints (msg, KD_F_LOS, los, self->n_shards);
    kd_msg_set_uints (msg, KD_F_HIS, his, self->n_shards);
    kd_msg_set_uint (msg, KD_F_T0_MS, self->t0_ms);
    kd_msg_set_uint (msg, KD_F_VERSION, kd_controller_version (self->ctl));
    if (m->role == S_ROLE_WORKER) {
        uint64_t lo, hi;
        s_partition_of (self, m->rank, &lo, &hi);
        kd_msg_set_uint (msg, KD_F_PART_LO, lo);
        kd_msg_set_uint (msg, KD_F_PART_HI, hi);
    }
    s_send_to (self, m, &msg);
}

//  WELCOME for a member that registered.
static void
s_send_welcome (self_t *self, s_member_t *m)
{
    kd_config_t *c = self->config;
    kd_msg_t *msg = kd_msg_new (KD_MSG_WELCOME);
    kd_msg_set_uint (msg, KD_F_RANK, m->rank);
    kd_msg_set_str (msg, KD_F_ROLE, s_role_name (m->role));
    kd_msg_set_str (msg, KD_F_MODEL, kd_model_kind_name (self->kind));
    kd_msg_set_uint (msg, KD_F_HIDDEN, self->hidden);
    kd_msg_set_uint (msg, KD_F_N_PARAMS, self->n_params);
    kd_msg_set_float (msg, KD_F_LR, kd_config_double (c, "lr"));
    kd_msg_set_float (msg, KD_F_MOMENTUM, kd_config_double (c, "momentum"));
    kd_msg_set_uint (msg, KD_F_BATCH, (uint64_t) kd_config_int (c, "batch"));
    kd_msg_set_uint (msg, KD_F_SEED, (uint64_t) kd_config_int (c, "seed"));
    kd_msg_set_float (msg, KD_F_EPOCHS, kd_config_double (c, "epochs"));
    kd_msg_set_uint (msg, KD_F_HEARTBEAT_MS, (uint64_t) self->heartbeat_ms);
    kd_msg_set_str (msg, KD_F_CONSISTENCY, kd_config_str (c, "consistency"));
    kd_msg_set_uint (msg, KD_F_SESSION, self->session);
    if (m->role == S_ROLE_SHARD) {
        uint64_t lo, hi;
        kd_range_split (self->n_params, self->n_shards, m->rank, &lo, &hi);
        kd_msg_set_uint (msg, KD_F_LO, lo);
        kd_msg_set_uint (msg, KD_F_HI, hi);
    }
    s_send_to (self, m, &msg);
}

//  --------------------------------------------------------------------------
//  Decisions

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
        uint64_t tau = d->entries [i].staleness;
        self->stale_hist [tau < S_STALE_BINS ? tau : S_STALE_BINS]++;
        if (d->entries [i].rank < S_MAX_WORKERS && self->workers [d->entries [i].rank])
            self->workers [d->entries [i].rank]->staleness = tau;
    }
    for (size_t i = 0; i < nd; i++) {
        dranks [i] = d->drops [i].rank;
        dclocks [i] = d->drops [i].clock;
    }
    if (n > 0)
        self->updates++;
    uint64_t ts = kd_wall_ms ();
    for (size_t s = 0; s < self->n_shards; s++) {
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
        //  Even to a shard that looks dead: ZeroMQ keeps the order, and one
        //  that was only slow must not miss a version.
        if (self->shards [s] && self->shards [s]->routing_id) {
            kd_msg_set_routing_id (msg, self->shards [s]->routing_id);
            kd_msg_send (&msg, self->router);
        }
        else
            kd_msg_destroy (&msg);
    }
    if (heap) {
        free (ranks);
        free (clocks);
        free (weights);
        free (dranks);
        free (dclocks);
    }
}

static void s_send_release (self_t *self, s_member_t *m, const kd_decision_t *d);

//  RELEASE one worker.
static void
s_do_release (self_t *self, const kd_decision_t *d)
{
    s_member_t *m = d->rank < S_MAX_WORKERS ? self->workers [d->rank] : NULL;
    if (!m || !m->alive)
        return;
    double now = kd_now_msf ();
    if (m->arrive_ms > 0) {
        self->wait_total += now - m->arrive_ms;
        m->arrive_ms = 0;
    }
    m->release_ms = now;
    m->waiting = false;
    m->released = true;
    m->last_release = *d;
    s_send_release (self, m, d);
}

//  Send a worker its RELEASE (again, if its first copy was lost).
static void
s_send_release (self_t *self, s_member_t *m, const kd_decision_t *d)
{
    uint64_t lo, hi;
    s_partition_of (self, m->rank, &lo, &hi);
    kd_msg_t *msg = kd_msg_new (KD_MSG_RELEASE);
    kd_msg_set_uint (msg, KD_F_VERSION, d->version);
    kd_msg_set_uint (msg, KD_F_CLOCK, d->clock);
    kd_msg_set_uint (msg, KD_F_STALENESS, m->staleness);
    kd_msg_set_uint (msg, KD_F_DROPPED, d->dropped ? 1 : 0);
    kd_msg_set_uint (msg, KD_F_GROUP, d->group);
    kd_msg_set_uint (msg, KD_F_PART_LO, lo);
    kd_msg_set_uint (msg, KD_F_PART_HI, hi);
    s_send_to (self, m, &msg);
}

//  Keep the latest group assignment for STATUS.
static void
s_do_groups (self_t *self, const kd_decision_t *d)
{
    //  Membership changes also publish groups; only the controller knows
    //  which publications were regroups.
    self->regroups = kd_controller_regroups (self->ctl);
    free (self->groups);
    self->groups = (uint32_t *) malloc (d->n_groups * sizeof (uint32_t) + 1);
    assert (self->groups);
    memcpy (self->groups, d->groups, d->n_groups * sizeof (uint32_t));
    self->n_groups = d->n_groups;
    kd_info ("groups count=%u regroups=%llu", d->group_count, (unsigned long long) self->regroups);
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
            //  The partitions of a phase's RELEASEs come from one walk
            //  over the ranks, made at the first of them.
            if (!self->part_valid) {
                self->part_live = 0;
                for (size_t r = 0; r < S_MAX_WORKERS; r++)
                    if (self->workers [r] && self->workers [r]->alive)
                        self->part_pos [r] = (uint32_t) self->part_live++;
                    else
                        self->part_pos [r] = (uint32_t) self->part_live;
                self->part_valid = true;
            }
            s_do_release (self, d);
            released = true;
        }
        else
        if (d->type == KD_DEC_GROUPS)
            s_do_groups (self, d);
    }
    self->part_valid = false;
    if (released)
        self->phases++;
}

//  --------------------------------------------------------------------------
//  Lifecycle

//  Number of live members of a role.
static size_t
s_live (self_t *self, s_role_t role)
{
    size_t n = 0;
    s_member_t *m = (s_member_t *) zhashx_first (self->by_name);
    while (m) {
        if (m->alive && m->role == role)
            n++;
        m = (s_member_t *) zhashx_next (self->by_name);
    }
    return n;
}

static kd_controller_t *s_controller_new (kd_config_t *c, uint64_t initial_version);

//  Bring a shard that is behind (restored from a checkpoint, or restarted
//  empty) to the current version: a drop-only COMMIT at that version makes
//  it adopt the version with the parameters it has.  The updates between
//  are lost for its key range; that is the RPO of a checkpoint interval.
static void
s_resync_shard (self_t *self, s_member_t *m)
{
    uint64_t version = kd_controller_version (self->ctl);
    if (m->version >= version)
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
    s_send_to (self, m, &msg);
    m->version = version;
}

//  Start training once the cluster is complete.
static void
s_maybe_start (self_t *self)
{
    if (self->state != S_WAITING)
        return;
    for (size_t i = 0; i < self->n_shards; i++)
        if (!self->shards [i] || !self->shards [i]->alive)
            return;
    if (s_live (self, S_ROLE_WORKER) < self->min_workers)
        return;
    //  A scheduler that restarted finds shards that already trained: it
    //  resumes from the newest version they hold, with their sample count,
    //  and brings any shard that is behind up to it.
    uint64_t resume = 0, samples = 0;
    for (size_t i = 0; i < self->n_shards; i++)
        if (self->shards [i]->version > resume) {
            resume = self->shards [i]->version;
            samples = self->shards [i]->samples;
        }
    if (resume > 0) {
        kd_controller_t *ctl = s_controller_new (self->config, resume);
        assert (ctl);   //  the same settings built the first one
        kd_controller_destroy (&self->ctl);
        self->ctl = ctl;
        self->samples = samples;
        self->resumed_from = resume;
        char detail [128];
        snprintf (detail, sizeof detail, "training resumes from version %llu, %llu samples",
                  (unsigned long long) resume, (unsigned long long) samples);
        s_event (self, "resume", NULL, detail);
        for (size_t i = 0; i < self->n_shards; i++)
            s_resync_shard (self, self->shards [i]);
    }
    self->state = S_TRAINING;
    self->t0_ms = kd_wall_ms ();
    self->t0_mono = kd_now_msf ();
    kd_info ("start shards=%zu workers=%zu params=%zu rows=%llu consistency=%s",
             self->n_shards, s_live (self, S_ROLE_WORKER), self->n_params,
             (unsigned long long) self->train_rows, kd_config_str (self->config, "consistency"));
    if (self->monitor && self->monitor->alive)
        s_send_start (self, self->monitor);
    uint64_t now = kd_now_ms ();
    for (size_t r = 0; r < S_MAX_WORKERS; r++)
        if (self->workers [r] && self->workers [r]->alive) {
            s_send_start (self, self->workers [r]);
            kd_controller_join (self->ctl, (uint32_t) r, now);
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
    kd_info ("finish reason=%s version=%llu samples=%llu", reason,
             (unsigned long long) kd_controller_version (self->ctl),
             (unsigned long long) self->samples);
    for (size_t r = 0; r < S_MAX_WORKERS; r++) {
        kd_msg_t *stop = kd_msg_new (KD_MSG_STOP);
        kd_msg_set_str (stop, KD_F_REASON, reason);
        s_send_to (self, self->workers [r], &stop);
    }
    self->final_version = kd_controller_version (self->ctl);
    if (self->monitor && self->monitor->alive && self->state == S_TRAINING
    &&  !(self->accuracy_version >= self->final_version && self->accuracy_version > 0)) {
        kd_msg_t *eval = kd_msg_new (KD_MSG_EVAL);
        kd_msg_set_uint (eval, KD_F_VERSION, self->final_version);
        s_send_to (self, self->monitor, &eval);
        self->state = S_FINISHING;
        self->finish_deadline = kd_now_ms () + S_FINAL_EVAL_MS;
    }
    else
        self->state = S_DONE;
}

//  Staleness percentile from the histogram.
static double
s_staleness_pct (self_t *self, double q)
{
    return kd_hist_quantile (self->stale_hist, S_STALE_BINS + 1, q);
}

//  Write the JSON summary, to the file if one is configured, and log it.
static void
s_write_summary (self_t *self)
{
    double end = self->t_end > 0 ? self->t_end : kd_now_msf ();
    double wall = self->t0_mono > 0 ? (end - self->t0_mono) / 1000.0 : 0;
    char ttl [512] = "";
    size_t len = 0;
    for (size_t i = 0; i < S_N_MILESTONES; i++) {
        char v [32];
        if (self->milestone_s [i] >= 0)
            snprintf (v, sizeof v, "%.3f", self->milestone_s [i]);
        else
            snprintf (v, sizeof v, "null");
        len += snprintf (ttl + len, sizeof ttl - len, "%s\"%.2f\": %s", i ? ", " : "",
                         s_milestones [i], v);
    }
    char acc [32];
    if (self->accuracy_version > 0 || self->accuracy > 0)
        snprintf (acc, sizeof acc, "%.4f", self->accuracy);
    else
        snprintf (acc, sizeof acc, "null");
    double busy = self->wait_total + self->busy_total;
    char *json = zsys_sprintf (
        "{\n"
        "  \"model\": \"%s\",\n  \"consistency\": \"%s\",\n"
        "  \"workers\": %zu,\n  \"shards\": %zu,\n"
        "  \"wall_seconds\": %.3f,\n  \"test_accuracy\": %s,\n"
        "  \"test_version\": %llu,\n  \"train_loss\": %.5f,\n"
        "  \"updates\": %llu,\n  \"phases\": %llu,\n  \"samples\": %llu,\n"
        "  \"epochs\": %.3f,\n  \"samples_per_second\": %.1f,\n"
        "  \"updates_per_second\": %.2f,\n"
        "  \"time_to_accuracy\": {%s},\n"
        "  \"wait_fraction\": %.4f,\n"
        "  \"staleness_p50\": %.1f,\n  \"staleness_p99\": %.1f,\n"
        "  \"dropped_gradients\": %llu,\n  \"regroups\": %llu,\n"
        "  \"stop_reason\": \"%s\"\n}\n",
        kd_model_kind_name (self->kind), kd_config_str (self->config, "consistency"),
        self->max_live_workers, self->n_shards, wall, acc,
        (unsigned long long) self->accuracy_version, self->have_loss ? self->train_loss : 0.0,
        (unsigned long long) self->updates, (unsigned long long) self->phases,
        (unsigned long long) self->samples,
        self->train_rows ? (double) self->samples / (double) self->train_rows : 0.0,
        wall > 0 ? (double) self->samples / wall : 0.0,
        wall > 0 ? (double) self->updates / wall : 0.0, ttl,
        busy > 0 ? self->wait_total / busy : 0.0,
        s_staleness_pct (self, 0.5), s_staleness_pct (self, 0.99),
        (unsigned long long) self->dropped, (unsigned long long) self->regroups, self->reason);
    const char *path = kd_config_str (self->config, "summary");
    if (*path) {
        //  Write then rename, so a reader never sees half a summary.
        char *tmp = zsys_sprintf ("%s.tmp", path);
        FILE *f = fopen (tmp, "w");
        if (f && fputs (json, f) >= 0 && fclose (f) == 0 && rename (tmp, path) == 0)
            kd_info ("summary written path=%s", path);
        else
            kd_error ("cannot write summary path=%s: %s", path, strerror (errno));
        zstr_free (&tmp);
    }
    kd_info ("summary accuracy=%s wall_seconds=%.1f updates=%llu samples=%llu",
             acc, wall, (unsigned long long) self->updates, (unsigned long long) self->samples);
    zstr_free (&json);
}

//  --------------------------------------------------------------------------
//  Messages

//  Lowest worker rank held by no member, live or departed.
static int64_t
s_free_worker_rank (self_t *self)
{
    for (size_t r = 0; r < S_MAX_WORKERS; r++)
        if (!self->workers [r])
            return (int64_t) r;
    return -1;
}

//  HELLO: register a member, or recognise one that registers again.
static void
s_on_hello (self_t *self, kd_msg_t *msg, zframe_t *id)
{
    const char *role_name = kd_msg_str (msg, KD_F_ROLE);
    const char *name = kd_msg_str (msg, KD_F_NAME);
    s_role_t role;
    if (!strcmp (role_name, "worker"))
        role = S_ROLE_WORKER;
    else
    if (!strcmp (role_name, "shard"))
        role = S_ROLE_SHARD;
    else
    if (!strcmp (role_name, "monitor"))
        role = S_ROLE_MONITOR;
    else {
        s_error (self, id, KD_ERR_MALFORMED, "role must be worker, shard or monitor");
        return;
    }
    if (!*name) {
        s_error (self, id, KD_ERR_MALFORMED, "name must not be empty");
        return;
    }
    if (role == S_ROLE_SHARD && !*kd_msg_str (msg, KD_F_ENDPOINT)) {
        s_error (self, id, KD_ERR_MALFORMED, "a shard must advertise an endpoint");
        return;
    }
    if (role == S_ROLE_WORKER) {
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
            return;
        }
    }
    s_member_t *m = (s_member_t *) zhashx_lookup (self->by_name, name);
    //  One monitor at a time: a second one would silently take over the
    //  evaluations and the stream.
    if (role == S_ROLE_MONITOR && self->monitor && self->monitor->alive && self->monitor != m) {
        s_error (self, id, KD_ERR_STATE, "a monitor is already registered");
        return;
    }
    if (m && m->role != role) {
        s_error (self, id, KD_ERR_STATE, "name already registered with another role");
        return;
    }
    //  A member that names the rank it held (a shard restored from its
    //  checkpoint, or anyone after a scheduler restart) gets it back if it
    //  is free.  A shard's rank is its key range, so a restored shard also
    //  takes over the slot of a dead shard registered under another name.
    bool has_hint = kd_msg_has (msg, KD_F_RANK);
    uint64_t hint = kd_msg_uint (msg, KD_F_RANK);
    if (!m && role == S_ROLE_SHARD && has_hint && hint < self->n_shards && self->shards [hint]) {
        s_member_t *old = self->shards [hint];
        uint64_t lo, hi;
        kd_range_split (self->n_params, self->n_shards, hint, &lo, &hi);
        if (!old->alive && kd_msg_uint (msg, KD_F_LO) == lo && kd_msg_uint (msg, KD_F_HI) == hi) {
            kd_info ("shard name=%s takes over rank=%llu from name=%s", name,
                     (unsigned long long) hint, old->name);
            self->shards [hint] = NULL;
            if (old->routing_id)
                zhashx_delete (self->by_id, old->id_hex);
            zhashx_delete (self->by_name, old->name);
        }
    }
    bool rejoin = m != NULL;
    if (!m) {
        int64_t rank = -1;
        if (role == S_ROLE_WORKER) {
            if (has_hint && hint < S_MAX_WORKERS && !self->workers [hint])
                rank = (int64_t) hint;
            else
                rank = s_free_worker_rank (self);
        }
        else
        if (role == S_ROLE_SHARD) {
            if (has_hint && hint < self->n_shards && !self->shards [hint])
                rank = (int64_t) hint;
            for (size_t i = 0; i < self->n_shards && rank < 0; i++)
                if (!self->shards [i])
                    rank = (int64_t) i;
        }
        else
            rank = 0;
        if (rank < 0) {
            s_error (self, id, KD_ERR_STATE, role == S_ROLE_SHARD ? "all shard ranks are taken"
                                                                   : "no free worker rank");
            return;
        }
        if (role == S_ROLE_WORKER && self->state != S_WAITING && self->state != S_TRAINING) {
            s_error (self, id, KD_ERR_STATE, "training has ended");
            return;
        }
        m = (s_member_t *) zmalloc (sizeof *m);
        m->name = strdup (name);
        m->role = role;
        m->rank = (uint64_t) rank;
        zhashx_insert (self->by_name, name, m);
        if (role == S_ROLE_WORKER)
            self->workers [rank] = m;
        else
        if (role == S_ROLE_SHARD)
            self->shards [rank] = m;
    }
    //  A new routing id replaces the old one (a restarted process).  A
    //  worker that restarted lost its place in the barrier: it leaves and
    //  joins again, so it gets a fresh RELEASE.
    char new_hex [64];
    s_id_hex (id, new_hex, sizeof new_hex);
    bool restarted = m->routing_id && strcmp (m->id_hex, new_hex) != 0;
    if (restarted && role == S_ROLE_WORKER && m->alive
    &&  kd_controller_is_active (self->ctl, (uint32_t) m->rank)) {
        kd_controller_leave (self->ctl, (uint32_t) m->rank, kd_now_ms ());
        s_drain (self);
        m->alive = false;
    }
    if (m->routing_id)
        zhashx_delete (self->by_id, m->id_hex);
    zframe_destroy (&m->routing_id);
    m->routing_id = zframe_dup (id);
    s_id_hex (id, m->id_hex, sizeof m->id_hex);
    zhashx_insert (self->by_id, m->id_hex, m);
    bool was_alive = m->alive;
    m->alive = true;
    m->last_seen = kd_now_ms ();
    if (role == S_ROLE_MONITOR)
        self->monitor = m;
    if (role == S_ROLE_SHARD) {
        free (m->endpoint);
        m->endpoint = strdup (kd_msg_str (msg, KD_F_ENDPOINT));
        m->version = kd_msg_uint (msg, KD_F_VERSION);
        m->samples = kd_msg_uint (msg, KD_F_SAMPLES);
    }
    kd_info ("%s %s name=%s rank=%llu version=%llu", rejoin ? "rejoin" : "join", s_role_name (role),
             name, (unsigned long long) m->rank, (unsigned long long) kd_msg_uint (msg, KD_F_VERSION));
    if (rejoin && !was_alive && role != S_ROLE_MONITOR)
        s_event (self, role == S_ROLE_WORKER ? "worker-rejoin" : "shard-rejoin", m,
                 restarted ? "registered again from a new process" : "registered again");
    s_send_welcome (self, m);
    //  A worker that was declared dead while computing may have pushed that
    //  gradient after its death was handled (a SIGSTOP, a partition): drop
    //  it again now, after the push, so no shard keeps it for ever.
    if (role == S_ROLE_WORKER && m->orphan && self->state == S_TRAINING) {
        kd_entry_t drop = { .rank = (uint32_t) m->rank, .clock = m->orphan_clock };
        kd_decision_t d = { .type = KD_DEC_COMMIT, .version = kd_controller_version (self->ctl),
                            .drops = &drop, .n_drops = 1 };
        s_do_commit (self, &d);
        self->dropped++;
    }
    //  A shard that comes back behind the cluster (restored from a
    //  checkpoint, or restarted empty) is brought to the current version.
    if (role == S_ROLE_SHARD && self->state == S_TRAINING)
        s_resync_shard (self, m);
    if (self->state == S_TRAINING && role != S_ROLE_SHARD) {
        s_send_start (self, m);
        if (role == S_ROLE_WORKER && !(was_alive && kd_controller_is_active (self->ctl, (uint32_t) m->rank))) {
            kd_controller_join (self->ctl, (uint32_t) m->rank, kd_now_ms ());
            s_drain (self);
        }
    }
    s_maybe_start (self);
}

//  A worker is gone (LEAVE or death): release anyone who waited on it.
static void
s_worker_gone (self_t *self, s_member_t *m, const char *why)
{
    if (!m->alive)
        return;
    m->alive = false;
    bool computing = m->released && !m->waiting;
    m->waiting = m->released = m->has_arrived = false;
    kd_info ("%s worker name=%s rank=%llu", why, m->name, (unsigned long long) m->rank);
    char detail [128];
    snprintf (detail, sizeof detail, "worker %s (%s) after %llu ms of silence", m->name, why,
              (unsigned long long) (kd_now_ms () - m->last_seen));
    s_event (self, !strcmp (why, "dead") ? "worker-dead" : "worker-left", m, detail);
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
        kd_entry_t drop = { .rank = (uint32_t) m->rank, .clock = m->last_release.clock };
        kd_decision_t d = { .type = KD_DEC_COMMIT, .version = kd_controller_version (self->ctl),
                            .drops = &drop, .n_drops = 1 };
        s_do_commit (self, &d);
    }
}

//  ARRIVE: a worker pushed its gradient everywhere and meets the barrier.
static void
s_on_arrive (self_t *self, s_member_t *m, kd_msg_t *msg)
{
    if (self->state != S_TRAINING)
        return;
    uint64_t clock = kd_msg_uint (msg, KD_F_CLOCK);
    uint64_t samples = kd_msg_uint (msg, KD_F_SAMPLES);
    if (samples > 1000000) {
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
    if (kd_controller_arrive (self->ctl, (uint32_t) m->rank, clock, kd_msg_uint (msg, KD_F_BASE),
                              samples, now)) {
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
        char reason [96];
        snprintf (reason, sizeof reason, "arrival rejected rank=%llu clock=%llu",
                  (unsigned long long) m->rank, (unsigned long long) clock);
        s_error (self, m->routing_id, KD_ERR_STATE, reason);
        return;
    }
    double t = kd_now_msf ();
    if (m->release_ms > 0)
        self->busy_total += t - m->release_ms;
    m->arrive_ms = t;
    m->waiting = true;
    m->has_arrived = true;
    m->arrive_clock = clock;
    self->samples += samples;
    //  The first arrival after a rejoin proves that any late push of the
    //  orphaned clock reached the shards before this clock's pushes (one
    //  connection keeps the order): dropping it again now leaves nothing
    //  staged for ever.  Same clock: the new push already replaced it.
    if (m->orphan) {
        if (m->orphan_clock != clock) {
            kd_entry_t drop = { .rank = (uint32_t) m->rank, .clock = m->orphan_clock };
            kd_decision_t d = { .type = KD_DEC_COMMIT, .version = kd_controller_version (self->ctl),
                                .drops = &drop, .n_drops = 1 };
            s_do_commit (self, &d);
        }
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
    double epochs = kd_config_double (self->config, "epochs");
    if (self->train_rows && (double) self->samples >= epochs * (double) self->train_rows)
        s_finish (self, "epochs");
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
    double target = kd_config_double (self->config, "target-accuracy");
    if (self->state == S_TRAINING && target > 0 && accuracy >= target)
        s_finish (self, "target-accuracy");
    if (self->state == S_FINISHING && version >= self->final_version)
        self->state = S_DONE;
}

//  One message on the ROUTER.
static void
s_on_message (self_t *self)
{
    kd_msg_t *msg = NULL;
    zframe_t *id = NULL;
    kd_msg_err_t err;
    int rc = kd_msg_recv (self->router, &msg, &id, &err);
    if (rc == -2) {
        s_error (self, id, err.code, err.reason);
        zframe_destroy (&id);
        return;
    }
    if (rc != 0)
        return;
    zframe_t *rid = kd_msg_routing_id (msg);
    kd_msg_type_t type = kd_msg_type (msg);
    if (type == KD_MSG_HELLO) {
        s_on_hello (self, msg, rid);
        kd_msg_destroy (&msg);
        return;
    }
    char hex [64];
    s_id_hex (rid, hex, sizeof hex);
    s_member_t *m = (s_member_t *) zhashx_lookup (self->by_id, hex);
    if (!m || !m->alive) {
        s_error (self, rid, KD_ERR_STATE, "not registered: send HELLO first");
        kd_msg_destroy (&msg);
        return;
    }
    m->last_seen = kd_now_ms ();
    switch (type) {
        case KD_MSG_HEARTBEAT:
            break;
        case KD_MSG_ARRIVE:
            if (m->role == S_ROLE_WORKER)
                s_on_arrive (self, m, msg);
            else
                s_error (self, rid, KD_ERR_STATE, "ARRIVE is for workers");
            break;
        case KD_MSG_LEAVE:
            if (m->role == S_ROLE_WORKER)
                s_worker_gone (self, m, "leave");
            break;
        case KD_MSG_COMMIT_OK:
            if (m->role == S_ROLE_SHARD) {
                m->version = kd_msg_uint (msg, KD_F_VERSION);
                if (kd_msg_uint (msg, KD_F_LOST) > 0)
                    kd_debug ("shard name=%s lost=%llu", m->name,
                              (unsigned long long) kd_msg_uint (msg, KD_F_LOST));
            }
            break;
        case KD_MSG_EVAL_OK:
            if (m->role == S_ROLE_MONITOR)
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
        }
    }
    kd_msg_destroy (&msg);
}

//  A "worker" message from the monitor's stream: the worker's iteration
//  time without the barrier wait, averaged over the publish window, is its
//  speed for ALSP's grouping.
static void
s_on_telemetry (self_t *self)
{
    zmsg_t *msg = zmsg_recv (self->telemetry);
    zframe_t *body = msg && zmsg_size (msg) == 2 ? zmsg_last (msg) : NULL;
    if (body && kd_msgpack_validate (zframe_data (body), zframe_size (body), 4) == 0) {
        msgpack_unpacked up;
        msgpack_unpacked_init (&up);
        if (msgpack_unpack_next (&up, (const char *) zframe_data (body), zframe_size (body), NULL)
            == MSGPACK_UNPACK_SUCCESS && up.data.type == MSGPACK_OBJECT_MAP) {
            int64_t rank = -1;
            double iter_ms = -1;
            for (uint32_t i = 0; i < up.data.via.map.size; i++) {
                msgpack_object *k = &up.data.via.map.ptr [i].key, *v = &up.data.via.map.ptr [i].val;
                if (k->type != MSGPACK_OBJECT_STR)
                    continue;
                if (k->via.str.size == 4 && !memcmp (k->via.str.ptr, "rank", 4)
                &&  v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 < S_MAX_WORKERS)
                    rank = (int64_t) v->via.u64;
                if (k->via.str.size == 7 && !memcmp (k->via.str.ptr, "iter_ms", 7)
                &&  (v->type == MSGPACK_OBJECT_FLOAT64 || v->type == MSGPACK_OBJECT_FLOAT32))
                    iter_ms = v->via.f64;
            }
            if (rank >= 0 && iter_ms > 0 && isfinite (iter_ms) && self->state == S_TRAINING
            &&  kd_controller_is_active (self->ctl, (uint32_t) rank)) {
                kd_controller_telemetry (self->ctl, (uint32_t) rank, iter_ms, kd_now_ms ());
                s_drain (self);
            }
        }
        msgpack_unpacked_destroy (&up);
    }
    zmsg_destroy (&msg);
}

//  --------------------------------------------------------------------------
//  Timers

//  Heartbeats out, and deaths of silent members.
static void
s_on_heartbeat (self_t *self)
{
    uint64_t now = kd_now_ms ();
    uint64_t limit = (uint64_t) self->heartbeat_ms * (uint64_t) self->liveness;
    s_member_t *m = (s_member_t *) zhashx_first (self->by_name);
    zlistx_t *dead = zlistx_new ();
    while (m) {
        if (m->alive) {
            if (now - m->last_seen > limit)
                zlistx_add_end (dead, m);
            else {
                kd_msg_t *hb = kd_msg_new (KD_MSG_HEARTBEAT);
                s_send_to (self, m, &hb);
            }
        }
        m = (s_member_t *) zhashx_next (self->by_name);
    }
    //  Deaths are handled after the walk: they change the controller, which
    //  must not happen while iterating the member table.
    for (m = (s_member_t *) zlistx_first (dead); m; m = (s_member_t *) zlistx_next (dead)) {
        if (m->role == S_ROLE_WORKER)
            s_worker_gone (self, m, "dead");
        else {
            kd_warn ("dead %s name=%s rank=%llu silent_ms=%llu", s_role_name (m->role), m->name,
                     (unsigned long long) m->rank, (unsigned long long) (now - m->last_seen));
            m->alive = false;
            char detail [128];
            snprintf (detail, sizeof detail, "%s %s silent for %llu ms", s_role_name (m->role),
                      m->name, (unsigned long long) (now - m->last_seen));
            if (m->role == S_ROLE_SHARD)
                s_event (self, "shard-dead", m, detail);
        }
    }
    zlistx_destroy (&dead);
}

//  STATUS to the monitor.
static void
s_on_status (self_t *self)
{
    if (!self->monitor || !self->monitor->alive)
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
    kd_msg_set_str (msg, KD_F_MODEL, kd_model_kind_name (self->kind));
    if (self->groups) {
        uint64_t ranks [S_MAX_WORKERS], groups [S_MAX_WORKERS];
        size_t n = 0;
        for (size_t r = 0; r < self->n_groups && r < S_MAX_WORKERS; r++)
            if (self->groups [r] != UINT32_MAX) {
                ranks [n] = r;
                groups [n++] = self->groups [r];
            }
        kd_msg_set_uints (msg, KD_F_RANKS, ranks, n);
        kd_msg_set_uints (msg, KD_F_GROUPS, groups, n);
    }
    s_send_to (self, self->monitor, &msg);
}

//  Time-based checks: run time limit, final-eval deadline, window ticks.
static void
s_on_tick (self_t *self)
{
    uint64_t now = kd_now_ms ();
    if (self->state == S_TRAINING) {
        kd_controller_tick (self->ctl, now);
        s_drain (self);
        double limit = kd_config_double (self->config, "max-seconds");
        if (limit > 0 && (kd_now_msf () - self->t0_mono) / 1000.0 >= limit)
            s_finish (self, "max-seconds");
    }
    if (self->state == S_FINISHING && now >= self->finish_deadline) {
        kd_warn ("final evaluation timed out version=%llu", (unsigned long long) self->final_version);
        self->state = S_DONE;
    }
}

//  Build the controller from the config table.
static kd_controller_t *
s_controller_new (kd_config_t *c, uint64_t initial_version)
{
    kd_controller_opts_t opts;
    int model = kd_consistency_parse (kd_config_str (c, "consistency"));
    assert (model >= 0);    //  the config table only admits known names
    kd_controller_opts_defaults (&opts, (kd_consistency_t) model);
    opts.staleness = (uint32_t) kd_config_int (c, "staleness");
    opts.quota = (uint32_t) kd_config_int (c, "quota");
    opts.quota_ratio = kd_config_double (c, "quota-ratio");
    opts.window_ms = (uint32_t) kd_config_int (c, "window-ms");
    opts.group_ratio = kd_config_double (c, "group-ratio");
    opts.min_group = (uint32_t) kd_config_int (c, "min-group");
    opts.max_groups = (uint32_t) kd_config_int (c, "max-groups");
    opts.global_sync_every = (uint32_t) kd_config_int (c, "global-sync-every");
    opts.regroup_dwell_ms = (uint32_t) (kd_config_double (c, "regroup-dwell") * 1000);
    opts.max_workers = S_MAX_WORKERS;
    opts.initial_version = initial_version;
    return kd_controller_new (&opts);
}

int
kd_scheduler_run (kd_config_t *config)
{
    int rc = 1;
    self_t self_s = { .config = config }, *self = &self_s;
    self->kind = (kd_model_kind_t) kd_model_kind_parse (kd_config_str (config, "model"));
    self->hidden = (uint32_t) kd_config_int (config, "hidden");
    self->n_params = kd_model_param_count (self->kind, self->hidden);
    self->n_shards = (size_t) kd_config_int (config, "shards");
    self->min_workers = (size_t) kd_config_int (config, "min-workers");
    self->heartbeat_ms = (int) kd_config_int (config, "heartbeat-ms");
    self->liveness = (int) kd_config_int (config, "liveness");
    for (size_t i = 0; i < S_N_MILESTONES; i++)
        self->milestone_s [i] = -1;
    if (self->n_shards > self->n_params) {
        kd_error ("more shards than parameters shards=%zu params=%zu", self->n_shards, self->n_params);
        return 2;
    }
    self->ctl = s_controller_new (config, 0);
    //  A fresh session id tells shards that state staged with an earlier
    //  scheduler instance will never be committed.
    uint64_t seed = kd_wall_ms () ^ ((uint64_t) getpid () << 32);
    self->session = kd_splitmix64 (&seed) | 1;
    if (!self->ctl) {
        kd_error ("invalid consistency settings");
        return 2;
    }
    self->by_name = zhashx_new ();
    zhashx_set_destructor (self->by_name, s_member_destroy);
    self->by_id = zhashx_new ();
    self->router = zsock_new (ZMQ_ROUTER);
    kd_socket_harden (self->router, kd_config_int (config, "max-msg-bytes"));
    kd_curve_server (kd_curve_process (), self->router);
    if (zsock_bind (self->router, "%s", kd_config_str (config, "bind")) < 0) {
        kd_error ("cannot bind endpoint=%s: %s", kd_config_str (config, "bind"), zmq_strerror (zmq_errno ()));
        goto cleanup;
    }
    kd_info ("listening endpoint=%s shards=%zu min_workers=%zu model=%s consistency=%s",
             zsock_endpoint (self->router), self->n_shards, self->min_workers,
             kd_model_kind_name (self->kind), kd_config_str (config, "consistency"));

    //  ALSP groups workers by the speeds the monitor publishes.
    if (!strcmp (kd_config_str (config, "consistency"), "alsp")) {
        self->telemetry = zsock_new (ZMQ_SUB);
        kd_socket_harden (self->telemetry, kd_config_int (config, "max-msg-bytes"));
        kd_curve_client (kd_curve_process (), self->telemetry);
        zsock_set_subscribe (self->telemetry, "worker");
        if (zsock_connect (self->telemetry, "%s", kd_config_str (config, "monitor-pub")) != 0) {
            kd_error ("cannot connect to monitor stream endpoint=%s", kd_config_str (config, "monitor-pub"));
            goto cleanup;
        }
    }
    uint64_t now = kd_now_ms ();
    int status_ms = (int) kd_config_int (config, "status-ms");
    self->next_heartbeat = now + (uint64_t) self->heartbeat_ms;
    self->next_status = now + (uint64_t) status_ms;
    zpoller_t *poller = zpoller_new (self->router, NULL);
    if (self->telemetry)
        zpoller_add (poller, self->telemetry);
    while (self->state != S_DONE && !zsys_interrupted) {
        //  A short tick bounds LSP windows and run-time limits.
        void *which = zpoller_wait (poller, 20);
        if (which == self->router) {
            //  Drain a burst of messages before looking at timers.
            for (int i = 0; i < 1000 && self->state != S_DONE; i++) {
                s_on_message (self);
                if (!(zsock_events (self->router) & ZMQ_POLLIN))
                    break;
            }
        }
        else
        if (which && which == self->telemetry)
            s_on_telemetry (self);
        else
        if (zpoller_terminated (poller))
            break;
        now = kd_now_ms ();
        if (now >= self->next_heartbeat) {
            s_on_heartbeat (self);
            self->next_heartbeat = now + (uint64_t) self->heartbeat_ms;
        }
        if (now >= self->next_status) {
            s_on_status (self);
            self->next_status = now + (uint64_t) status_ms;
        }
        s_on_tick (self);
    }
    zpoller_destroy (&poller);
    if (self->state != S_DONE)
        snprintf (self->reason, sizeof self->reason, "signal");
    s_write_summary (self);
    //  Everyone stops with us: parameter servers must not linger.
    s_member_t *m = (s_member_t *) zhashx_first (self->by_name);
    while (m) {
        kd_msg_t *stop = kd_msg_new (KD_MSG_STOP);
        kd_msg_set_str (stop, KD_F_REASON, self->reason);
        s_send_to (self, m, &stop);
        m = (s_member_t *) zhashx_next (self->by_name);
    }
    s_on_status (self);
    zsock_set_linger (self->router, 1000);
    rc = 0;
cleanup:
    zsock_destroy (&self->telemetry);
    zsock_destroy (&self->router);
    zhashx_destroy (&self->by_id);
    zhashx_destroy (&self->by_name);
    kd_controller_destroy (&self->ctl);
    free (self->groups);
    return rc;
}
