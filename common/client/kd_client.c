/*  kd_client: a worker's link to a Kudus cluster.

    The protocol a worker speaks, in one place: HELLO/WELCOME through
    kd_peer, START's address book, rounds of PUSH and PULL to every shard
    with resends and backoff, ARRIVE and RELEASE, and TELEMETRY.
    Every wait polls the scheduler too (STOP, heartbeats) and has a
    deadline: a request that is not answered in time is sent again, which
    is safe because shards de-duplicate pushes by (rank, clock) and pulls
    have no side effects.
*/
#include "kd_internal.h"
#include "kd_client.h"
#include "kd_optimizer.h"
#include "kd_shardset.h"
#include "kd_shmlink.h"
#include <math.h>
#include "kd_half.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>

#define S_MAX_SHARDS     KD_SHARDSET_MAX    //  shards in the address book at most
#define S_MAX_TENSORS    KD_MODEL_MAX_TENSORS   //  tensors of a layout
#define S_RETRY_MAX_MS   5000   //  ceiling of the retry backoff
#define S_RETRY_BUSY_MS  200    //  retry after a shard said "not now"
#define S_RETRY_FIRST_MS 1000   //  first resend to a silent shard
#define S_MAX_BATCH      65536  //  largest batch a WELCOME may ask for
#define S_DEFAULT_TIMEOUT_MS 10000
#define S_DEFAULT_MAX_MSG (1ll << 30)
#define S_SHM_MIN_BYTES  16384  //  slices smaller than this stay on TCP
#define S_SHM_RETRY_MS   3000   //  an unanswered offer is made again after this
#define S_SHM_WAIT_MS    500    //  how long the offers of a round wait for answers
#define S_SHM_TORN_MAX   2      //  torn snapshot reads in a pull before it goes by TCP

typedef struct {
    bool done;                  //  replied in the current round
    uint64_t version;           //  version it last returned
    uint64_t ts_ms;             //  commit time of that version (wall ms), 0 unknown
    uint64_t borrowed;          //  clock + 1 of the last push that borrowed
    kd_shmlink_t *shm;          //  shared memory with the shard, or NULL
    int shm_state;              //  S_SHM_*
    uint64_t shm_retry_ms;      //  untried: offer again from then (unanswered)
    unsigned torn;              //  snapshot reads in a row found rewritten
    uint64_t pulled [2];        //  lease ahead: version of the last pull
                                //  and of the one before
} s_shard_t;

//  Where a shard stands with shared memory.
enum {
    S_SHM_UNTRIED,              //  not offered yet (or the shard restarted)
    S_SHM_ON,                   //  values move through shared memory
    S_SHM_OFF                   //  declined, or too small: TCP
};

struct _kd_client_t {
    char *scheduler;            //  scheduler endpoint
    char *name;                 //  name we register with
    kd_peer_t *peer;            //  link to the scheduler (made at register)
    zsock_t *monitor;           //  DEALER to the monitor's intake, or NULL
    kd_curve_t *curve;          //  own CURVE keys, or NULL: the process's
    zsock_t *cancel;            //  an actor's pipe: a message there ends waits
    int64_t max_msg;            //  ZMQ_MAXMSGSIZE of every socket
    int timeout_ms;             //  request deadline before a retry
    int liveness;               //  missed heartbeats before a new HELLO
    int heartbeat_ms;           //  heartbeat interval until WELCOME
    uint64_t samples;           //  training rows we can read (HELLO)
    bool has_rank;              //  a rank hint was set
    bool evaluator;             //  registered as an evaluator: pulls and reports only
    bool told_no_monitor;       //  a report found no monitor, and we said so
    kd_tensor_t declared [S_MAX_TENSORS];   //  external model's layout we declare
    size_t n_declared;          //  tensors in it (0: none)
    bool declared_keyed;        //  ... and it is a keyed model
    uint64_t rank_hint;         //  that hint
    kd_shardset_t *book;        //  the shards' address book (START), or NULL
    s_shard_t shards [S_MAX_SHARDS];  //  per-shard round state
    size_t n_shards;            //  shards in the book
    uint64_t rerouted;          //  bit i: range i's socket was replaced (ROUTE)
    bool welcomed, started;     //  registration stages
    uint64_t t0_ms;             //  wall clock start of training (START)
    bool stop;                  //  STOP came, or we left
    bool stopped_run;           //  STOP came from the scheduler
    uint64_t stop_version;      //  the final version STOP named (0: none)
    uint64_t final_until;       //  ms: kd_client_pull_final's deadline
    kd_msg_t *reopen;           //  the shards' book as a START, kept when a
                                //  STOP mid-push closed their sockets
    bool failed;                //  WELCOME or START we cannot serve
    char failure [160];         //  why, or why the scheduler refused us
    //  What WELCOME said
    uint64_t rank;              //  our worker rank
    char model [32];            //  model name
    uint32_t hidden;            //  mlp hidden units
    size_t n_params;            //  flat parameter count
    size_t batch;               //  largest lease
    uint64_t seed;              //  the run's seed
    double momentum;            //  the shards' momentum (WELCOME)
    char consistency [16];      //  consistency model
    uint64_t staleness;         //  SSP: s, clocks of slack
    bool direct;                //  ASP/SSP: shards apply pushes on arrival
    bool ssp;                   //  SSP: pull only when the cache is too old
    kd_tensor_t tensors [S_MAX_TENSORS];    //  the layout
    bool keyed;                 //  a keyed model: n_params counts keys
    bool delta_keys;            //  START said the shards read varint-delta
                                //  keys frames (key_enc); else plain ones
    size_t dim;                 //  keyed: floats per key
    size_t n_tensors;           //  tensors in it
    //  The iteration
    uint64_t clock;             //  clock we compute
    uint64_t version;           //  version of the model pulled (min over shards)
    uint64_t version_ts;        //  its commit time (wall ms), 0 unknown
    uint64_t released_version;  //  version named by the last RELEASE
    uint64_t min_clock;         //  min_clock named by the last RELEASE
    uint64_t last_staleness;    //  staleness of our last applied gradient
    uint64_t group;             //  ALSP group
    uint64_t dropped;           //  our gradients dropped so far
    uint64_t *lease;            //  rows of the current lease
    size_t lease_n;             //  rows in it
    bool lease_ahead;           //  hold a lease ahead (asked in HELLO)
    uint64_t *ahead;            //  rows of the lease ahead (clock + 1)
    size_t ahead_n;             //  rows in it
    uint64_t pull_clock [2];    //  lease ahead: clock + 1 at the last pull
                                //  and at the one before (0: none)
    uint64_t pull_released [2]; //  lease ahead: the released version then
    uint64_t ahead_from;        //  lease ahead: clock of our last admission
                                //  (first) RELEASE, computed on the pull
                                //  after it, not on one before
    bool rewelcomed;            //  lease ahead: WELCOME came again (we were
                                //  declared dead): the next RELEASE is an
                                //  admission, whichever wait takes it
    uint64_t pushed_samples;    //  rows of the gradient pushed this clock
    bool pushed;                //  a gradient was pushed this clock
    bool refused;               //  ... and a shard refused it (or we did)
    uint64_t wire_dtype;        //  kd_dtype_t of pushes and pulls
    uint64_t refused_total;     //  gradients refused so far
    uint64_t push_tau;          //  direct: largest staleness the shards saw
    const float *cache;         //  SSP: the buffer last pulled into
    uint64_t cache_clock;       //  SSP: min_clock when it was pulled
    uint64_t pulls_skipped;     //  SSP: pulls the cache saved
    kd_msg_t *early_release;    //  a readmission RELEASE (see s_on_scheduler)
    atomic_int inflight;        //  borrowed gradient frames ZeroMQ still holds
    bool no_shm;                //  keep every payload on TCP
    bool no_pull_ahead;         //  pull after RELEASE, not with ARRIVE
    uint64_t prefetched;        //  bit i: a PULL went to shard i with ARRIVE
    bool short_path;            //  WELCOME `staged`: ARRIVE goes with the pushes
    uint64_t reg;               //  WELCOME `reg`: our registration, in PUSH
    bool push_early;            //  short path: this clock's PUSHes went, and
                                //  kd_client_arrive waits for their PUSH_OKs
    bool awaiting_release;      //  short path: our ARRIVE went, its RELEASE may
                                //  come while PUSH_OKs are still awaited
    float *push_copy;           //  short path: the gradient the PUSHes read
    uint64_t prefetch_version;  //  ... for this version or newer
    //  Timings of the last iteration, for ARRIVE and TELEMETRY
    double t_pull, t_pulled;    //  pull started, ended
    double t_push, t_pushed;    //  push started, ended
    double t_wait;              //  ARRIVE went
    double t_released;          //  RELEASE came
    double emulated_ms;         //  emulated compute declared by the caller
    float loss;                 //  loss of the last arrival
    uint64_t arrived_clock;     //  clock of the last arrival
    uint64_t arrived_samples;   //  rows of the last arrival
};

const char *
kudus_version (void)
{
    return KUDUS_VERSION_STRING;
}

//  Give up on what the cluster sent: log why, keep it for kd_client_failure,
//  and end every wait (s_over).
static void
s_refuse (kd_client_t *self, const char *format, ...)
{
    va_list args;
    va_start (args, format);
    vsnprintf (self->failure, sizeof self->failure, format, args);
    va_end (args);
    kd_error ("%s", self->failure);
    self->failed = true;
}

//  --------------------------------------------------------------------------
//  Life cycle and settings

//  CZMQ's zsys_init is not safe to race: two threads that create their
//  first sockets at once can trip its assertions.  Clients made in threads
//  (a worker with several, a test) initialize it once, first.
static pthread_once_t s_zsys_once = PTHREAD_ONCE_INIT;

static void
s_zsys_init (void)
{
    zsys_init ();
}

kd_client_t *
kd_client_new (const char *scheduler, const char *name)
{
    if (!scheduler || !*scheduler) {
        kd_error ("kd_client: a scheduler endpoint is required");
        return NULL;
    }
    pthread_once (&s_zsys_once, s_zsys_init);
    kd_client_t *self = (kd_client_t *) zmalloc (sizeof (kd_client_t));
    self->scheduler = strdup (scheduler);
    //  kd_peer names a nameless worker worker-HOST-PID.
    self->name = strdup (name ? name : "");
    self->max_msg = S_DEFAULT_MAX_MSG;
    self->timeout_ms = S_DEFAULT_TIMEOUT_MS;
    self->liveness = 3;
    self->heartbeat_ms = 1000;
    return self;
}

//  The I/O thread calls this when a borrowed gradient frame is sent or
//  dropped.
static void
s_ref_free (void *data, void *hint)
{
    (void) data;
    atomic_fetch_sub ((atomic_int *) hint, 1);
}

//  Close every shard socket, and wait until ZeroMQ has let go of every
//  borrowed gradient frame, so that the caller may free the gradient.
//  Closing with linger 0 drops the frames still queued.
static void
s_shm_drop (kd_client_t *self, size_t i, int state)
{
    kd_shmlink_destroy (&self->shards [i].shm);
    self->shards [i].shm_state = state;
}

//  The address book as a START names it now (each range's primary of the
//  moment), so that the shards can be reached again after s_close_shards.
static kd_msg_t *
s_book_as_start (kd_client_t *self)
{
    if (!self->book || self->n_shards == 0 || self->n_shards > S_MAX_SHARDS)
        return NULL;
    const char *endpoints [S_MAX_SHARDS];
    uint64_t los [S_MAX_SHARDS], his [S_MAX_SHARDS];
    for (size_t i = 0; i < self->n_shards; i++) {
        endpoints [i] = kd_shardset_endpoint (self->book, i);
        los [i] = kd_shardset_lo (self->book, i);
        his [i] = kd_shardset_hi (self->book, i);
    }
    kd_msg_t *start = kd_msg_new (KD_MSG_START);
    kd_msg_set_strs (start, KD_F_ENDPOINTS, endpoints, self->n_shards);
    kd_msg_set_uints (start, KD_F_LOS, los, self->n_shards);
    kd_msg_set_uints (start, KD_F_HIS, his, self->n_shards);
    kd_msg_set_uint (start, KD_F_T0_MS, self->t0_ms);
    return start;
}

static void
s_close_shards (kd_client_t *self)
{
    for (size_t i = 0; i < self->n_shards; i++)
        s_shm_drop (self, i, S_SHM_UNTRIED);
    self->prefetched = 0;
    kd_shardset_destroy (&self->book);
    self->n_shards = 0;
    self->started = false;
    for (int waited = 0; atomic_load (&self->inflight) > 0 && waited < 5000; waited++)
        zclock_sleep (1);
    if (atomic_load (&self->inflight) > 0)
        kd_error ("kd_client: ZeroMQ still holds %d gradient frames after 5 s",
                  atomic_load (&self->inflight));
}

void
kd_client_destroy (kd_client_t **self_p)
{
    assert (self_p);
    kd_client_t *self = *self_p;
    if (!self)
        return;
    //  A client that is still a member leaves, so a BSP barrier stops
    //  counting it now rather than after the liveness timeout, and a
    //  stopped run's scheduler need not wait out its final-pull window
    //  (which only an external model's has).
    if (self->welcomed && (!self->stop || !strcmp (self->model, "external")))
        kd_client_leave (self, "client closed");
    s_close_shards (self);
    kd_msg_destroy (&self->reopen);
    zsock_destroy (&self->monitor);
    kd_msg_destroy (&self->early_release);
    free (self->push_copy);
    kd_peer_destroy (&self->peer);
    kd_curve_destroy (&self->curve);
    free (self->lease);
    free (self->ahead);
    free (self->scheduler);
    free (self->name);
    free (self);
    *self_p = NULL;
}

void
kd_client_set_samples (kd_client_t *self, uint64_t samples)
{
    assert (self);
    self->samples = samples;
}

void
kd_client_set_rank (kd_client_t *self, uint64_t rank)
{
    assert (self);
    self->has_rank = true;
    self->rank_hint = rank;
}

void
kd_client_set_timeout (kd_client_t *self, int timeout_ms)
{
    assert (self);
    self->timeout_ms = timeout_ms > 0 ? timeout_ms : S_DEFAULT_TIMEOUT_MS;
}

void
kd_client_set_liveness (kd_client_t *self, int liveness)
{
    assert (self);
    self->liveness = liveness > 0 ? liveness : 3;
}

void
kd_client_set_heartbeat (kd_client_t *self, int heartbeat_ms)
{
    assert (self);
    self->heartbeat_ms = heartbeat_ms >= 50 && heartbeat_ms <= 60000 ? heartbeat_ms : 1000;
}

void
kd_client_set_max_msg_bytes (kd_client_t *self, int64_t bytes)
{
    assert (self);
    self->max_msg = bytes > 0 ? bytes : S_DEFAULT_MAX_MSG;
}

//  The CURVE instance our sockets use.
static kd_curve_t *
s_curve (kd_client_t *self)
{
    return self->curve ? self->curve : kd_curve_process ();
}

int
kd_client_set_curve_keys (kd_client_t *self, const char *dir)
{
    assert (self);
    char err [512];
    kd_curve_t *curve = kd_curve_new_as (dir, KD_CURVE_CLIENT, self->evaluator ? "evaluator" : "worker",
                                         err, sizeof err);
    if (!curve) {
        kd_error ("kd_client: CURVE keys: %s", err);
        return -1;
    }
    kd_curve_destroy (&self->curve);
    self->curve = curve;
    return 0;
}

int
kd_client_set_layout (kd_client_t *self, const kd_tensor_t *tensors, size_t n)
{
    assert (self);
    const char *names [S_MAX_TENSORS];
    uint64_t shapes [2 * S_MAX_TENSORS];
    size_t n_params = 0;
    char err [256];
    if (!tensors || n == 0 || n > S_MAX_TENSORS) {
        kd_error ("kd_client: a layout has 1..%d tensors, not %zu", S_MAX_TENSORS, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        names [i] = tensors [i].name;
        shapes [2 * i] = tensors [i].rows;
        shapes [2 * i + 1] = tensors [i].cols;
    }
    if (kd_model_layout_parse (names, n, shapes, 2 * n, self->declared, &n_params, err, sizeof err)) {
        kd_error ("kd_client: %s", err);
        self->n_declared = 0;
        return -1;
    }
    self->n_declared = n;
    self->declared_keyed = false;
    if (self->peer)
        kd_peer_set_layout (self->peer, names, n, shapes, false);
    return 0;
}

int
kd_client_set_keyed_layout (kd_client_t *self, const char *name, uint64_t keys, uint64_t dim)
{
    assert (self);
    kd_tensor_t t = { .rows = (size_t) keys, .cols = (size_t) dim, .count = (size_t) (keys * dim) };
    if (!name || strlen (name) >= sizeof t.name) {
        kd_error ("kd_client: a keyed tensor's name must be 1..%zu bytes", sizeof t.name - 1);
        return -1;
    }
    snprintf (t.name, sizeof t.name, "%s", name);
    if (kd_client_set_layout (self, &t, 1))
        return -1;
    self->declared_keyed = true;
    if (self->peer) {
        const char *names [1] = { name };
        uint64_t shapes [2] = { keys, dim };
        kd_peer_set_layout (self->peer, names, 1, shapes, true);
    }
    return 0;
}

bool
kd_client_keyed (kd_client_t *self)
{
    assert (self);
    return self->keyed;
}

void
kd_client_set_evaluator (kd_client_t *self)
{
    assert (self);
    assert (!self->peer);
    self->evaluator = true;
    //  Shared memory is a worker's (SHM is not an evaluator's to send).
    self->no_shm = true;
}

//  True, after logging it, when an evaluator calls what only a worker may.
static bool
s_worker_only (kd_client_t *self, const char *call)
{
    if (self->evaluator)
        kd_error ("%s: an evaluator only pulls and reports", call);
    return self->evaluator;
}

int
kd_client_set_monitor (kd_client_t *self, const char *endpoint)
{
    assert (self);
    zsock_destroy (&self->monitor);
    if (!endpoint || !*endpoint)
        return 0;
    self->monitor = zsock_new (ZMQ_DEALER);
    if (!self->monitor)
        return -1;
    kd_socket_harden (self->monitor, self->max_msg);
    kd_curve_client (s_curve (self), self->monitor);
    //  Telemetry is best effort: a slow monitor never blocks training.
    zsock_set_sndtimeo (self->monitor, 0);
    if (zsock_connect (self->monitor, "%s", endpoint) != 0) {
        kd_error ("kd_client: cannot connect to monitor endpoint=%s", endpoint);
        zsock_destroy (&self->monitor);
        return -1;
    }
    return 0;
}

//  --------------------------------------------------------------------------
//  Messages from the scheduler

//  What every WELCOME says, built-in model or not.
static void
s_adopt_welcome (kd_client_t *self, kd_msg_t *msg, size_t batch)
{
    const char *consistency = kd_msg_str (msg, KD_F_CONSISTENCY);
    self->batch = batch;
    self->seed = kd_msg_uint (msg, KD_F_SEED);
    //  The optimizer field is the shards' spec, read as they read it: only
    //  the SGD rules apply momentum.  None named: the shards fall back to
    //  SGD with the momentum field.
    kd_optimizer_opts_t rule;
    char why [128];
    const char *spec = kd_msg_str (msg, KD_F_OPTIMIZER);
    if (!*spec || kd_optimizer_parse (spec, &rule, why, sizeof why) != 0)
        self->momentum = *spec ? 0 : kd_msg_float (msg, KD_F_MOMENTUM);
    else
        self->momentum = rule.kind == KD_OPT_SGD || rule.kind == KD_OPT_NESTEROV ? rule.momentum : 0;
    snprintf (self->consistency, sizeof self->consistency, "%s", consistency);
    self->direct = !strcmp (consistency, "asp") || !strcmp (consistency, "ssp");
    self->ssp = !strcmp (consistency, "ssp");
    self->short_path = kd_msg_uint (msg, KD_F_STAGED) && !self->direct;
    self->staleness = kd_msg_uint (msg, KD_F_STALENESS);
    self->lease = (uint64_t *) zmalloc (batch * sizeof (uint64_t));
    self->ahead = (uint64_t *) zmalloc (batch * sizeof (uint64_t));
    self->welcomed = true;
    kd_info ("registered rank=%llu model=%s params=%zu batch=%zu consistency=%s",
             (unsigned long long) self->rank, self->model, self->n_params, batch, self->consistency);
}

//  Adopt WELCOME's rank and heartbeat.  Returns true when we were welcomed
//  before (a scheduler restart): nothing else changes then.
static bool
s_adopt_rank (kd_client_t *self, kd_msg_t *msg)
{
    self->rank = kd_msg_uint (msg, KD_F_RANK);
    //  Every registration has its own number: a shard's word that a push
    //  is staged names the one that pushed (protocol 9.3.1).
    self->reg = kd_msg_uint (msg, KD_F_REG);
    //  Asked for again if the scheduler restarts, so our staged gradients
    //  keep their meaning.
    kd_peer_set_rank (self->peer, self->rank);
    if (kd_msg_has (msg, KD_F_HEARTBEAT_MS))
        kd_peer_set_heartbeat (self->peer, (int) kd_msg_uint (msg, KD_F_HEARTBEAT_MS));
    if (self->welcomed) {
        kd_info ("registered again rank=%llu", (unsigned long long) self->rank);
        self->rewelcomed = true;
    }
    return self->welcomed;
}

//  WELCOME for an external model: its layout is the cluster's (the first
//  worker's declaration), which must be ours if we declared one.
static void
s_on_welcome_external (kd_client_t *self, kd_msg_t *msg)
{
    size_t n = 0, n_shapes = 0, n_params = 0;
    const char **names = kd_msg_strs (msg, KD_F_TENSORS, &n);
    const uint64_t *shapes = kd_msg_uints (msg, KD_F_SHAPES, &n_shapes);
    size_t batch = (size_t) kd_msg_uint (msg, KD_F_BATCH);
    kd_tensor_t layout [S_MAX_TENSORS];
    char err [256];
    bool keyed = kd_msg_uint (msg, KD_F_KEYS) == 1;
    err [0] = 0;
    if (kd_model_layout_parse (names, n, shapes, n_shapes, layout, &n_params, err, sizeof err)
    ||  (keyed && n != 1)
    ||  (keyed ? layout [0].rows : n_params) != kd_msg_uint (msg, KD_F_N_PARAMS)
    ||  batch == 0 || batch > S_MAX_BATCH
    ||  strlen (kd_msg_str (msg, KD_F_CONSISTENCY)) >= sizeof self->consistency) {
        s_refuse (self, "welcome rejected: external model: %s", err [0] ? err : "bad size or batch");
        return;
    }
    if (self->n_declared > 0 && (keyed != self->declared_keyed
                             || !kd_model_layout_equal (layout, n, self->declared, self->n_declared))) {
        s_refuse (self, "welcome rejected: the cluster's model layout is not the one this worker declared");
        return;
    }
    if (s_adopt_rank (self, msg))
        return;
    snprintf (self->model, sizeof self->model, "external");
    self->hidden = 0;
    self->keyed = keyed;
    self->dim = keyed ? (size_t) layout [0].cols : 0;
    self->n_params = keyed ? (size_t) layout [0].rows : n_params;
    memcpy (self->tensors, layout, n * sizeof layout [0]);
    self->n_tensors = n;
    s_adopt_welcome (self, msg, batch);
}

//  Adopt WELCOME: rank, model, batch, consistency.
static void
s_on_welcome (kd_client_t *self, kd_msg_t *msg)
{
    const char *model = kd_msg_str (msg, KD_F_MODEL);
    int kind = kd_model_kind_parse (model);
    uint64_t hidden64 = kd_msg_uint (msg, KD_F_HIDDEN);
    uint32_t hidden = (uint32_t) hidden64;
    size_t batch = (size_t) kd_msg_uint (msg, KD_F_BATCH);
    const char *consistency = kd_msg_str (msg, KD_F_CONSISTENCY);
    if (!strcmp (model, "external")) {
        s_on_welcome_external (self, msg);
        return;
    }
    if (kind < 0 || batch == 0 || batch > S_MAX_BATCH || hidden64 > KD_MODEL_MAX_HIDDEN
    ||  (kind == KD_MODEL_MLP && hidden == 0)
    ||  strlen (consistency) >= sizeof self->consistency
    ||  kd_msg_uint (msg, KD_F_N_PARAMS) != kd_model_param_count (kind, hidden)) {
        s_refuse (self, "welcome rejected: model=%s hidden=%u batch=%zu", model, hidden, batch);
        return;
    }
    if (s_adopt_rank (self, msg))
        return;
    snprintf (self->model, sizeof self->model, "%s", kd_model_kind_name (kind));
    self->hidden = kind == KD_MODEL_MLP ? hidden : 0;
    self->n_params = kd_model_param_count (kind, hidden);
    self->n_tensors = kd_model_tensors (kind, hidden, self->tensors, S_MAX_TENSORS);
    if (self->n_tensors > S_MAX_TENSORS)
        self->n_tensors = S_MAX_TENSORS;
    s_adopt_welcome (self, msg, batch);
}

//  Adopt START's address book: connect to every shard.
static void s_route (kd_client_t *self, size_t i, const char *endpoint);

static void
s_on_start (kd_client_t *self, kd_msg_t *msg)
{
    //  A START after we registered again (the scheduler had declared us
    //  dead, or restarted) names each range's primary now: a ROUTE sent
    //  while we were away never reached us, and a replica we still write to
    //  may be a backup that refuses writes for ever.
    //  The ranges themselves must be the ones we split our model by: a
    //  cluster that changed them (another --shards after a restart) cannot
    //  be followed, and is an error rather than a worker writing to shards
    //  that refuse it for ever.
    if (self->started && self->book) {
        size_t n = 0, nl = 0, nh = 0;
        const char **endpoints = kd_msg_strs (msg, KD_F_ENDPOINTS, &n);
        const uint64_t *los = kd_msg_uints (msg, KD_F_LOS, &nl);
        const uint64_t *his = kd_msg_uints (msg, KD_F_HIS, &nh);
        bool same = n == self->n_shards && nl == n && nh == n;
        for (size_t i = 0; same && i < n; i++)
            same = los [i] == kd_shardset_lo (self->book, i) && his [i] == kd_shardset_hi (self->book, i);
        if (!same) {
            s_refuse (self, "start again with other key ranges (%zu ranges, we split by %zu): "
                      "this worker cannot follow; start it again", n, self->n_shards);
            return;
        }
        for (size_t i = 0; i < n; i++)
            s_route (self, i, endpoints [i]);
        return;
    }
    if (self->started || !self->welcomed)
        return;
    char err [256];
    self->book = kd_shardset_new (msg, self->n_params, self->max_msg, self->curve, err, sizeof err);
    if (!self->book) {
        s_refuse (self, "start rejected: %s", err);
        return;
    }
    for (size_t i = 0; i < self->n_shards; i++)
        s_shm_drop (self, i, S_SHM_UNTRIED);
    self->n_shards = kd_shardset_size (self->book);
    memset (self->shards, 0, sizeof self->shards);
    self->prefetched = 0;
    self->t0_ms = kd_msg_uint (msg, KD_F_T0_MS);
    //  A cluster older than key_enc would read a delta frame as plain keys.
    self->delta_keys = kd_msg_uint (msg, KD_F_KEY_ENC) == KD_KEY_ENC_DELTA;
    self->started = true;
    kd_info ("start shards=%zu", self->n_shards);
}

//  Range i's requests go to endpoint from now on (a no-op when they do).
static void
s_route (kd_client_t *self, size_t i, const char *endpoint)
{
    int rc = kd_shardset_reroute (self->book, i, endpoint);
    if (rc == 1) {
        kd_info ("route range=%zu endpoint=%s", i, endpoint);
        self->rerouted |= 1ull << i;
        self->prefetched &= ~(1ull << i);
        s_shm_drop (self, i, S_SHM_UNTRIED);
    }
    else
    if (rc < 0)
        kd_warn ("route refused range=%zu endpoint=%s", i, endpoint);
}

//  True when the socket has a message within timeout_ms.  A client run in
//  an actor also wakes when "$TERM" reaches the actor's pipe, and then
//  says no: the caller's next s_over sees it.
static bool
s_readable (kd_client_t *self, zsock_t *sock, int timeout_ms)
{
    zmq_pollitem_t items [2] = { { zsock_resolve (sock), 0, ZMQ_POLLIN, 0 },
                                 { self->cancel ? zsock_resolve (self->cancel) : NULL,
                                   self->cancel ? 0 : -1, ZMQ_POLLIN, 0 } };
    return zmq_poll (items, 2, timeout_ms) > 0 && (items [0].revents & ZMQ_POLLIN);
}

//  Handle one message from the scheduler; returns it if the caller waits for
//  its type, else NULL.
static kd_msg_t *
s_on_scheduler (kd_client_t *self, kd_msg_type_t waiting_for)
{
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    int rc = kd_msg_recv (kd_peer_socket (self->peer), &msg, NULL, &err);
    if (rc == -2)
        kd_warn ("malformed message from scheduler code=%d reason=\"%s\"", err.code, err.reason);
    if (rc != 0)
        return NULL;
    kd_peer_heard (self->peer);
    kd_msg_type_t type = kd_msg_type (msg);
    if (type == KD_MSG_WELCOME) {
        //  A scheduler that ignored our lease_ahead (protocol 9.3.2) would
        //  name one lease a release: computing ahead would train rows
        //  nobody leased us.
        if (self->lease_ahead && kd_msg_uint (msg, KD_F_LEASE_AHEAD) != 1)
            s_refuse (self, "welcome rejected: this worker asked to hold a lease ahead and the "
                      "scheduler did not grant it (older than protocol 9.3.2)");
        else
            s_on_welcome (self, msg);
        //  An evaluator reports where the scheduler says the monitor is,
        //  unless told otherwise.  A monitor that registers after us is
        //  named by a WELCOME again.
        const char *monitor = kd_msg_str (msg, KD_F_ENDPOINT);
        if (self->evaluator && self->welcomed && !self->monitor && *monitor
        &&  kd_client_set_monitor (self, monitor) == 0)
            kd_info ("reporting to monitor endpoint=%s", monitor);
    }
    else
    if (type == KD_MSG_START)
        s_on_start (self, msg);
    else
    if (type == KD_MSG_ROUTE && self->book)
        //  A replica was promoted: its range's requests go there now.
        s_route (self, (size_t) kd_msg_uint (msg, KD_F_RANK), kd_msg_str (msg, KD_F_ENDPOINT));
    else
    if (type == KD_MSG_STOP) {
        kd_info ("stop reason=\"%s\" version=%llu", kd_msg_str (msg, KD_F_REASON),
                 (unsigned long long) kd_msg_uint (msg, KD_F_VERSION));
        self->stop = true;
        self->stopped_run = true;
        //  The STOP that ends the scheduler's loop names no version.
        if (kd_msg_has (msg, KD_F_VERSION))
            self->stop_version = kd_msg_uint (msg, KD_F_VERSION);
    }
    else
    if (type == KD_MSG_ERROR) {
        if (kd_msg_is_not_registered (msg))
            kd_peer_unknown (self->peer);
        //  Refused for our lease ahead: asking again would be refused again.
        if (kd_msg_uint (msg, KD_F_LEASE_AHEAD) == 1)
            s_refuse (self, "registration refused: %s", kd_msg_str (msg, KD_F_REASON));
        else
            kd_warn ("scheduler error code=%llu reason=\"%s\"",
                     (unsigned long long) kd_msg_uint (msg, KD_F_CODE), kd_msg_str (msg, KD_F_REASON));
    }
    //  A RELEASE we did not wait for, with a newer clock than the one we
    //  compute, is a readmission: we were declared dead (a SIGSTOP, a
    //  partition) and registered again while computing or pushing.  It
    //  supersedes the iteration in progress, whose gradient the scheduler
    //  no longer expects; thrown away, it would leave us sending an ARRIVE
    //  the scheduler rejects, every deadline, while BSP waits for us.  A
    //  repeat of the RELEASE we work on is only a duplicate.
    if (type == KD_MSG_RELEASE && waiting_for != KD_MSG_RELEASE && self->started
    &&  kd_msg_uint (msg, KD_F_CLOCK) > self->clock) {
        //  On the short path our own RELEASE may come while we still wait
        //  for PUSH_OKs: kept the same way, and it ends that wait.
        if (!self->awaiting_release)
            kd_info ("readmitted rank=%llu clock=%llu superseded_clock=%llu", (unsigned long long) self->rank,
                     (unsigned long long) kd_msg_uint (msg, KD_F_CLOCK), (unsigned long long) self->clock);
        kd_msg_destroy (&self->early_release);
        self->early_release = msg;
        return NULL;
    }
    if (type == waiting_for)
        return msg;
    kd_msg_destroy (&msg);
    return NULL;
}

//  True when the actor that runs this client was told to end.
static bool
s_cancelled (kd_client_t *self)
{
    return self->cancel && (zsock_events (self->cancel) & ZMQ_POLLIN);
}

//  True when a wait must end: STOP, a signal, or a refused registration.
static bool
s_over (kd_client_t *self)
{
    //  kd_client_pull_final talks to the shards after STOP, until its deadline.
    bool stop = self->stop && !(self->final_until && kd_now_ms () < self->final_until);
    return stop || self->failed || zsys_interrupted || s_cancelled (self);
}

void
kd_client_set_cancel (kd_client_t *self, zsock_t *pipe)
{
    assert (self);
    self->cancel = pipe;
}

//  Wait up to timeout_ms (-1: for ever) for a message of one type from the
//  scheduler, keeping heartbeats going.  Returns it, or NULL on stop or
//  timeout.
static kd_msg_t *
s_wait_scheduler (kd_client_t *self, kd_msg_type_t type, int timeout_ms)
{
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : kd_now_ms () + (uint64_t) timeout_ms;
    zsock_t *sock = kd_peer_socket (self->peer);
    while (!s_over (self)) {
        uint64_t now = kd_now_ms ();
        if (now >= deadline)
            return NULL;
        int wait = kd_peer_timeout (self->peer) + 1;
        if ((uint64_t) wait > deadline - now)
            wait = (int) (deadline - now);
        if (s_readable (self, sock, wait)) {
            kd_msg_t *msg = s_on_scheduler (self, type);
            if (msg)
                return msg;
        }
        kd_peer_tick (self->peer);
    }
    return NULL;
}

//  A lease's rows from a RELEASE field into out (a batch of room): at most
//  a batch, each inside the training set we declared.  Anything else is a
//  broken scheduler; it is left out and logged, and the scheduler then
//  refuses the arrival with a clear error.  Returns the rows kept.
static size_t
s_take_rows (kd_client_t *self, kd_msg_t *release, kd_field_t field, uint64_t *out)
{
    size_t n = 0, kept = 0;
    const uint64_t *rows = kd_msg_uints (release, field, &n);
    if (n > self->batch)
        kd_error ("lease of %zu rows exceeds the batch of %zu", n, self->batch);
    for (size_t i = 0; i < n && kept < self->batch; i++) {
        if (self->samples > 0 && rows [i] >= self->samples)
            kd_error ("lease row out of range row=%llu rows=%llu", (unsigned long long) rows [i],
                      (unsigned long long) self->samples);
        else
            out [kept++] = rows [i];
    }
    return kept;
}

//  Adopt a RELEASE and describe it in *out.  An admission is our first
//  RELEASE, or one that readmitted us: it names a lease we have not seen.
static void
s_take_release (kd_client_t *self, kd_msg_t *release, kd_release_t *out, bool admission)
{
    self->released_version = kd_msg_uint (release, KD_F_VERSION);
    self->clock = kd_msg_uint (release, KD_F_CLOCK);
    self->last_staleness = kd_msg_uint (release, KD_F_STALENESS);
    bool dropped = kd_msg_uint (release, KD_F_DROPPED) != 0;
    if (dropped)
        self->dropped++;
    self->group = kd_msg_uint (release, KD_F_GROUP);
    self->min_clock = kd_msg_uint (release, KD_F_MIN_CLOCK);
    self->pushed = false;
    self->push_tau = 0;
    self->lease_n = s_take_rows (self, release, KD_F_ROWS, self->lease);
    self->ahead_n = self->lease_ahead ? s_take_rows (self, release, KD_F_AHEAD, self->ahead) : 0;
    //  A readmission's RELEASE may come while we wait for our own (the
    //  scheduler resends it when we arrive with the old clock): the WELCOME
    //  before it says so.
    if (admission || self->rewelcomed)
        self->ahead_from = self->clock;
    self->rewelcomed = false;
    self->t_released = kd_now_msf ();
    if (out)
        *out = (kd_release_t) {
            .version = self->released_version, .clock = self->clock,
            .min_clock = self->min_clock, .group = self->group,
            .staleness = self->last_staleness, .dropped = dropped,
            .rows = self->lease, .n_rows = self->lease_n
        };
}

//  --------------------------------------------------------------------------
//  Registration

int
kd_client_register (kd_client_t *self, int timeout_ms)
{
    assert (self);
    if (self->welcomed)
        return 0;
    if (!self->peer) {
        self->peer = kd_peer_new (self->scheduler, self->evaluator ? "evaluator" : "worker", self->name,
                                  self->max_msg,
                                  self->heartbeat_ms, self->liveness, self->curve);
        if (!self->peer) {
            kd_error ("kd_client: cannot connect to scheduler endpoint=%s", self->scheduler);
            return -1;
        }
        kd_peer_set_samples (self->peer, self->samples);
        kd_peer_set_lease_ahead (self->peer, self->lease_ahead);
        if (self->n_declared > 0) {
            const char *names [S_MAX_TENSORS];
            uint64_t shapes [2 * S_MAX_TENSORS];
            for (size_t i = 0; i < self->n_declared; i++) {
                names [i] = self->declared [i].name;
                shapes [2 * i] = self->declared [i].rows;
                shapes [2 * i + 1] = self->declared [i].cols;
            }
            kd_peer_set_layout (self->peer, names, self->n_declared, shapes, self->declared_keyed);
        }
        if (self->has_rank)
            kd_peer_set_rank (self->peer, self->rank_hint);
        kd_peer_hello (self->peer);
    }
    kd_msg_destroy (&(kd_msg_t *) { s_wait_scheduler (self, KD_MSG_WELCOME, timeout_ms) });
    return self->welcomed && !self->failed ? 0 : -1;
}

int
kd_client_wait_start (kd_client_t *self, kd_release_t *release, int timeout_ms)
{
    assert (self);
    if (!self->welcomed)
        return -1;
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : kd_now_ms () + (uint64_t) timeout_ms;
    //  START, then a first RELEASE that names our starting version, clock
    //  and lease.
    while (!self->started && !s_over (self) && kd_now_ms () < deadline)
        kd_msg_destroy (&(kd_msg_t *) { s_wait_scheduler (self, KD_MSG_START, 200) });
    //  An evaluator gets no lease: START is all it waits for.
    if (self->evaluator) {
        if (release)
            *release = (kd_release_t) { .version = 0 };
        return self->started && !s_over (self) ? 0 : -1;
    }
    kd_msg_t *msg = NULL;
    while (self->started && !msg && !s_over (self) && kd_now_ms () < deadline)
        msg = s_wait_scheduler (self, KD_MSG_RELEASE, 200);
    if (!msg)
        return -1;
    s_take_release (self, msg, release, true);
    kd_msg_destroy (&msg);
    return 0;
}

//  --------------------------------------------------------------------------
//  Accessors

uint64_t
kd_client_rank (kd_client_t *self)
{
    assert (self);
    return self->rank;
}

size_t
kd_client_param_count (kd_client_t *self)
{
    assert (self);
    return self->n_params;
}

const char *
kd_client_model (kd_client_t *self)
{
    assert (self);
    return self->model;
}

uint32_t
kd_client_hidden (kd_client_t *self)
{
    assert (self);
    return self->hidden;
}

size_t
kd_client_batch (kd_client_t *self)
{
    assert (self);
    return self->batch;
}

uint64_t
kd_client_seed (kd_client_t *self)
{
    assert (self);
    return self->seed;
}

double
kd_client_momentum (kd_client_t *self)
{
    assert (self);
    return self->momentum;
}

const char *
kd_client_consistency (kd_client_t *self)
{
    assert (self);
    return self->consistency;
}

uint64_t
kd_client_start_ms (kd_client_t *self)
{
    assert (self);
    return self->t0_ms;
}

size_t
kd_client_tensor_count (kd_client_t *self)
{
    assert (self);
    return self->n_tensors;
}

const kd_tensor_t *
kd_client_tensor (kd_client_t *self, size_t i)
{
    assert (self);
    return i < self->n_tensors ? &self->tensors [i] : NULL;
}

uint64_t
kd_client_version (kd_client_t *self)
{
    assert (self);
    return self->version;
}

bool
kd_client_stopped (kd_client_t *self)
{
    assert (self);
    return self->stop || zsys_interrupted || s_cancelled (self);
}

uint64_t
kd_client_dropped (kd_client_t *self)
{
    assert (self);
    return self->dropped;
}

void
kd_client_set_pull_ahead (kd_client_t *self, bool on)
{
    assert (self);
    self->no_pull_ahead = !on;
}

void
kd_client_set_lease_ahead (kd_client_t *self, bool on)
{
    assert (self);
    assert (!self->peer);
    //  An evaluator has no lease at all.
    self->lease_ahead = on && !self->evaluator;
}

const uint64_t *
kd_client_ahead_rows (kd_client_t *self, size_t *n)
{
    assert (self);
    assert (n);
    *n = self->ahead_n;
    return self->ahead;
}

bool
kd_client_admitted (kd_client_t *self)
{
    assert (self);
    return self->lease_ahead && self->clock == self->ahead_from;
}

const char *
kd_client_failure (kd_client_t *self)
{
    assert (self);
    return self->failure;
}

void
kd_client_set_shm (kd_client_t *self, bool on)
{
    assert (self);
    self->no_shm = !on;
    for (size_t i = 0; !on && i < self->n_shards; i++)
        s_shm_drop (self, i, S_SHM_UNTRIED);
}

int
kd_client_set_wire_dtype (kd_client_t *self, const char *name)
{
    assert (self);
    int dtype = kd_dtype_parse (name);
    if (dtype < 0)
        return -1;
    self->wire_dtype = (uint64_t) dtype;
    return 0;
}

uint64_t
kd_client_refused (kd_client_t *self)
{
    assert (self);
    return self->refused_total;
}

uint64_t
kd_client_pulls_skipped (kd_client_t *self)
{
    assert (self);
    return self->pulls_skipped;
}

//  --------------------------------------------------------------------------
//  Rounds of requests to every shard

typedef kd_msg_t *(s_request_fn) (kd_client_t *self, size_t shard, void *arg);
typedef int (s_reply_fn) (kd_client_t *self, size_t shard, kd_msg_t *reply, void *arg);
static s_request_fn s_pull_request;
static s_request_fn s_push_request;

//  Send a request to every shard and wait until each has answered, resending
//  with backoff to shards that stay silent.  Returns 0, or -1 on stop.
static int
s_shard_round (kd_client_t *self, s_request_fn *request, kd_msg_type_t reply_type,
               s_reply_fn *on_reply, void *arg)
{
    if (s_over (self))
        return -1;
    size_t n = self->n_shards, pending = n;
    uint64_t resend_at [S_MAX_SHARDS];
    int backoff [S_MAX_SHARDS];
    zmq_pollitem_t items [S_MAX_SHARDS + 1];
    uint64_t now = kd_now_ms ();
    //  The short path's pushes went before ARRIVE: this round only waits
    //  for their PUSH_OKs (resending as any round), and ends early when our
    //  RELEASE comes, which proves that every range staged them.
    bool early = request == s_push_request && self->push_early;
    uint64_t present = request == s_pull_request ? self->prefetched : early ? UINT64_MAX : 0;
    //  A range rerouted since the early pushes went lost them with its old
    //  socket: they are sent again now, not after the first backoff.
    if (early)
        present &= ~self->rerouted;
    self->rerouted = 0;
    //  Only a pull round uses up the pulls sent ahead: the short path's
    //  push round comes after them, and must not make the pull send again.
    if (request == s_pull_request)
        self->prefetched = 0;
    self->push_early = false;
    for (size_t i = 0; i < n; i++) {
        self->shards [i].done = false;
        //  A pull that went with ARRIVE is already on its way.
        if (!(present & (1ull << i))) {
            kd_msg_t *req = request (self, i, arg);
            kd_msg_send (&req, kd_shardset_socket (self->book, i));
        }
        //  The first resend comes soon: a shard that restarted lost the
        //  request, and waiting the whole deadline would be the RTO.
        backoff [i] = self->timeout_ms < S_RETRY_FIRST_MS ? self->timeout_ms : S_RETRY_FIRST_MS;
        resend_at [i] = now + (uint64_t) backoff [i];
        items [i + 1] = (zmq_pollitem_t) { zsock_resolve (kd_shardset_socket (self->book, i)), 0, ZMQ_POLLIN, 0 };
    }
    items [0] = (zmq_pollitem_t) { zsock_resolve (kd_peer_socket (self->peer)), 0, ZMQ_POLLIN, 0 };
    while (pending > 0 && !(early && self->early_release)) {
        if (s_over (self))
            return -1;
        //  A shard that acknowledged may answer our early PULL next, on the
        //  same socket: it is left for the pull to read.
        for (size_t i = 0; i < n && early; i++)
            items [i + 1].events = self->shards [i].done ? 0 : ZMQ_POLLIN;
        now = kd_now_ms ();
        int wait = kd_peer_timeout (self->peer) + 1;
        for (size_t i = 0; i < n; i++)
            if (!self->shards [i].done) {
                if (resend_at [i] <= now) {
                    kd_warn ("shard silent, resending endpoint=%s type=%s after_ms=%d",
                             kd_shardset_endpoint (self->book, i), kd_msg_type_name (reply_type), backoff [i]);
                    kd_msg_t *req = request (self, i, arg);
                    kd_msg_send (&req, kd_shardset_socket (self->book, i));
                    backoff [i] = backoff [i] * 2 > S_RETRY_MAX_MS ? S_RETRY_MAX_MS : backoff [i] * 2;
                    resend_at [i] = now + (uint64_t) backoff [i];
                }
                if ((int) (resend_at [i] - now) < wait)
                    wait = (int) (resend_at [i] - now);
            }
        //  A final pull ends at its deadline, not a backoff later.
        if (self->final_until && self->final_until > now && (int) (self->final_until - now) < wait)
            wait = (int) (self->final_until - now) + 1;
        if (zmq_poll (items, (int) n + 1, wait) < 0)
            return -1;
        if (items [0].revents & ZMQ_POLLIN)
            s_on_scheduler (self, 0);
        //  A request to a range whose primary changed goes to the new one
        //  now, on its new socket.
        for (size_t i = 0; i < n && self->rerouted; i++)
            if (self->rerouted & (1ull << i)) {
                self->rerouted &= ~(1ull << i);
                items [i + 1].socket = zsock_resolve (kd_shardset_socket (self->book, i));
                items [i + 1].revents = 0;
                if (!self->shards [i].done) {
                    kd_msg_t *req = request (self, i, arg);
                    kd_msg_send (&req, kd_shardset_socket (self->book, i));
                    backoff [i] = self->timeout_ms < S_RETRY_FIRST_MS ? self->timeout_ms : S_RETRY_FIRST_MS;
                    resend_at [i] = kd_now_ms () + (uint64_t) backoff [i];
                }
            }
        for (size_t i = 0; i < n; i++) {
            if (!(items [i + 1].revents & ZMQ_POLLIN))
                continue;
            kd_msg_t *reply = NULL;
            kd_msg_err_t err;
            int rc = kd_msg_recv (kd_shardset_socket (self->book, i), &reply, NULL, &err);
            if (rc == -2) {
                kd_warn ("malformed reply from shard endpoint=%s reason=\"%s\"",
                         kd_shardset_endpoint (self->book, i), err.reason);
                continue;
            }
            if (rc != 0)
                continue;
            if (kd_msg_type (reply) == KD_MSG_ERROR
            &&  kd_msg_uint (reply, KD_F_CODE) == KD_ERR_REFUSED && reply_type == KD_MSG_PUSH_OK
            &&  kd_msg_has (reply, KD_F_CLOCK) && kd_msg_uint (reply, KD_F_CLOCK) == self->clock) {
                //  Refused for good (NaN, Inf, or over the norm bound): not
                //  resent; ARRIVE says so and the rows go back.
                kd_warn ("gradient refused endpoint=%s reason=\"%s\"", kd_shardset_endpoint (self->book, i),
                         kd_msg_str (reply, KD_F_REASON));
                self->refused = true;
                if (!self->shards [i].done) {
                    self->shards [i].done = true;
                    pending--;
                }
            }
            else
            if (kd_msg_type (reply) == KD_MSG_ERROR && kd_msg_uint (reply, KD_F_SHM)) {
                //  The shard lost our mapping (it restarted): the request
                //  goes again by TCP now, and the next round offers anew.
                kd_warn ("shm: falling back to TCP endpoint=%s reason=\"%s\"",
                         kd_shardset_endpoint (self->book, i), kd_msg_str (reply, KD_F_REASON));
                s_shm_drop (self, i, S_SHM_UNTRIED);
                if (!self->shards [i].done) {
                    kd_msg_t *req = request (self, i, arg);
                    kd_msg_send (&req, kd_shardset_socket (self->book, i));
                }
            }
            else
            if (kd_msg_type (reply) == KD_MSG_ERROR) {
                //  A shard that is not ready yet, or full, is asked again
                //  after a short pause rather than the full deadline.
                kd_warn ("shard error endpoint=%s code=%llu reason=\"%s\"", kd_shardset_endpoint (self->book, i),
                         (unsigned long long) kd_msg_uint (reply, KD_F_CODE),
                         kd_msg_str (reply, KD_F_REASON));
                if (!self->shards [i].done)
                    resend_at [i] = kd_now_ms () + S_RETRY_BUSY_MS;
            }
            else
            if (kd_msg_type (reply) == reply_type && !self->shards [i].done
            &&  on_reply (self, i, reply, arg) == 0) {
                self->shards [i].done = true;
                pending--;
            }
            kd_msg_destroy (&reply);
        }
        kd_peer_tick (self->peer);
    }
    return 0;
}

//  Offer shared memory to each shard not asked yet, and forget the shards
//  whose process exited.  The offers go out together and are answered at
//  once, by SHM_OK or by an ERROR that says why; the wait keeps the
//  scheduler's link alive.  A shard that declines ("shm": 1) or does not
//  know SHM stays on TCP; one that does not answer, or answers "not yet",
//  is asked again later.
static void
s_shm_prepare (kd_client_t *self)
{
    if (self->no_shm || self->wire_dtype != KD_DTYPE_F32 || self->keyed
    ||  kd_curve_enabled (s_curve (self)))
        return;
    size_t pending [S_MAX_SHARDS], n_pending = 0;
    uint64_t now = kd_now_ms ();
    for (size_t i = 0; i < self->n_shards; i++) {
        s_shard_t *s = &self->shards [i];
        const char *endpoint = kd_shardset_endpoint (self->book, i);
        if (s->shm_state == S_SHM_ON && kd_shmlink_shard_gone (s->shm)) {
            kd_info ("shm: shard exited, its mapping is released endpoint=%s", endpoint);
            s_shm_drop (self, i, S_SHM_UNTRIED);
        }
        //  A shard with a pull on its way answers that first: offered next round.
        if (s->shm_state != S_SHM_UNTRIED || now < s->shm_retry_ms || (self->prefetched & (1ull << i)))
            continue;
        size_t n = (size_t) (kd_shardset_hi (self->book, i) - kd_shardset_lo (self->book, i));
        //  Two slots: a late retry of the last clock's push never reads
        //  the values of this one.
        if (n * sizeof (float) < S_SHM_MIN_BYTES || !(s->shm = kd_shmlink_new (n, 2))) {
            s->shm_state = S_SHM_OFF;
            continue;
        }
        kd_msg_t *offer = kd_shmlink_offer (s->shm);
        kd_msg_send (&offer, kd_shardset_socket (self->book, i));
        pending [n_pending++] = i;
    }
    //  Well inside a heartbeat interval, and ticking the scheduler's link.
    uint64_t deadline = now + (uint64_t) (self->timeout_ms < S_SHM_WAIT_MS ? self->timeout_ms : S_SHM_WAIT_MS);
    size_t left = n_pending;
    while (left > 0 && (now = kd_now_ms ()) < deadline) {
        zmq_pollitem_t items [S_MAX_SHARDS + 1];
        items [0] = (zmq_pollitem_t) { zsock_resolve (kd_peer_socket (self->peer)), 0, ZMQ_POLLIN, 0 };
        for (size_t k = 0; k < n_pending; k++)
            items [k + 1] = (zmq_pollitem_t) {
                zsock_resolve (kd_shardset_socket (self->book, pending [k])), 0, ZMQ_POLLIN, 0 };
        if (zmq_poll (items, (int) n_pending + 1, (long) (deadline - now)) < 0)
            break;
        if (items [0].revents & ZMQ_POLLIN)
            s_on_scheduler (self, 0);
        kd_peer_tick (self->peer);
        for (size_t k = 0; k < n_pending; k++) {
            size_t i = pending [k];
            s_shard_t *s = &self->shards [i];
            if (!(items [k + 1].revents & ZMQ_POLLIN) || s->shm_state != S_SHM_UNTRIED || !s->shm)
                continue;
            kd_msg_t *reply = NULL;
            kd_msg_err_t err;
            if (kd_msg_recv (kd_shardset_socket (self->book, i), &reply, NULL, &err) != 0)
                continue;
            kd_msg_type_t type = kd_msg_type (reply);
            const char *endpoint = kd_shardset_endpoint (self->book, i);
            char why [192] = "";
            uint64_t code = kd_msg_uint (reply, KD_F_CODE);
            if (type == KD_MSG_SHM_OK && kd_shmlink_accept (s->shm, reply, why, sizeof why) == 0) {
                s->shm_state = S_SHM_ON;
                kd_info ("shm: values move through shared memory endpoint=%s bytes=%zu", endpoint,
                         (size_t) (kd_shardset_hi (self->book, i) - kd_shardset_lo (self->book, i)) * sizeof (float));
                left--;
            }
            else
            if (type == KD_MSG_SHM_OK
            ||  (type == KD_MSG_ERROR && (kd_msg_uint (reply, KD_F_SHM) || code == KD_ERR_UNKNOWN_TYPE
                                      ||  code == KD_ERR_FORBIDDEN))) {
                //  Declined, or a shard that does not know SHM: TCP for good.
                if (!*why)
                    snprintf (why, sizeof why, "%s", kd_msg_str (reply, KD_F_REASON));
                kd_info ("shm: staying on TCP endpoint=%s reason=\"%s\"", endpoint, why);
                s_shm_drop (self, i, S_SHM_OFF);
                left--;
            }
            else
            if (type == KD_MSG_ERROR) {
                //  Not now (a shard still registering): TCP, and ask again.
                kd_info ("shm: not now, TCP meanwhile endpoint=%s reason=\"%s\"", endpoint,
                         kd_msg_str (reply, KD_F_REASON));
                s_shm_drop (self, i, S_SHM_UNTRIED);
                s->shm_retry_ms = kd_now_ms () + S_SHM_RETRY_MS;
                left--;
            }
            //  Anything else is a late answer from an earlier round.
            kd_msg_destroy (&reply);
        }
    }
    for (size_t k = 0; k < n_pending; k++) {
        s_shard_t *s = &self->shards [pending [k]];
        if (s->shm_state == S_SHM_UNTRIED && s->shm) {
            //  The shard may be restarting: TCP for now, and ask again later.
            kd_info ("shm: no answer to the offer, TCP for now endpoint=%s",
                     kd_shardset_endpoint (self->book, pending [k]));
            s_shm_drop (self, pending [k], S_SHM_UNTRIED);
            s->shm_retry_ms = kd_now_ms () + S_SHM_RETRY_MS;
        }
    }
}

//  True (logged) when the model is keyed, so that a dense call cannot
//  apply to it.
static bool
s_dense_only (kd_client_t *self, const char *call)
{
    if (self->keyed)
        kd_error ("%s: the model is keyed: use %s_keys", call, strstr (call, "push") ? "kd_client_push"
                                                                                  : "kd_client_pull");
    return self->keyed;
}

//  --------------------------------------------------------------------------
//  Pull

typedef struct {
    float *params;              //  caller's buffer
    uint64_t version;           //  least version wanted (0: any)
} s_pull_arg_t;

//  PULL of at least a version from one shard.
static kd_msg_t *
s_pull_request (kd_client_t *self, size_t i, void *arg)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (msg, KD_F_VERSION, ((s_pull_arg_t *) arg)->version);
    if (self->wire_dtype != KD_DTYPE_F32)
        kd_msg_set_uint (msg, KD_F_DTYPE, self->wire_dtype);
    //  A reader that keeps losing the race to newer versions asks by TCP.
    if (self->shards [i].shm_state == S_SHM_ON && self->shards [i].torn < S_SHM_TORN_MAX)
        kd_msg_set_uint (msg, KD_F_SHM, 1);
    return msg;
}

//  Ask shard i again at once: its answer was older than we need (a pull
//  sent with ARRIVE, answered at a commit before the one that released
//  us), or its snapshot slot was written again while we copied it.
static void
s_pull_again (kd_client_t *self, size_t i, void *arg)
{
    kd_msg_t *req = s_pull_request (self, i, arg);
    kd_msg_send (&req, kd_shardset_socket (self->book, i));
}

//  A shard's slice, copied straight from its frame into the caller's buffer.
static int
s_pull_reply (kd_client_t *self, size_t i, kd_msg_t *reply, void *arg)
{
    s_pull_arg_t *pull = (s_pull_arg_t *) arg;
    if (kd_msg_uint (reply, KD_F_SHM)) {
        //  The values are in the shard's snapshot: copied from there
        //  straight into the caller's buffer.
        uint64_t lo = kd_shardset_lo (self->book, i), hi = kd_shardset_hi (self->book, i);
        if (kd_msg_uint (reply, KD_F_LO) != lo)
            return -1;
        if (kd_msg_uint (reply, KD_F_VERSION) < pull->version) {
            s_pull_again (self, i, arg);
            return -1;
        }
        s_shard_t *s = &self->shards [i];
        int rc = s->shm ? kd_shmlink_read (s->shm, reply, pull->params + lo, (size_t) (hi - lo)) : -2;
        s->torn = rc == -1 ? s->torn + 1 : 0;
        if (rc) {
            //  Written again since (a newer version came twice), or not a
            //  slot we know: ask again now, by TCP if the slot was bad.
            if (rc == -2 && s->shm) {
                kd_warn ("shm: bad snapshot slot, falling back to TCP endpoint=%s",
                         kd_shardset_endpoint (self->book, i));
                s_shm_drop (self, i, S_SHM_OFF);
            }
            s_pull_again (self, i, arg);
            return -1;
        }
    }
    else
    if (kd_msg_uint (reply, KD_F_VERSION) < pull->version) {
        s_pull_again (self, i, arg);
        return -1;
    }
    else
    if (kd_shardset_take_pull (self->book, i, reply, pull->version, pull->params))
        return -1;
    self->shards [i].version = kd_msg_uint (reply, KD_F_VERSION);
    self->shards [i].ts_ms = kd_msg_uint (reply, KD_F_TS_MS);
    self->shards [i].torn = 0;
    return 0;
}

//  A pull completed.  Shards may be a commit apart; a gradient is then
//  computed on a model at least as new as the oldest slice, which is the
//  version we report.
static void
s_pulled (kd_client_t *self)
{
    uint64_t v = UINT64_MAX, ts = 0;
    for (size_t i = 0; i < self->n_shards; i++)
        if (self->shards [i].version < v) {
            v = self->shards [i].version;
            ts = self->shards [i].ts_ms;
        }
    self->version = v;
    self->version_ts = ts;
    self->t_pulled = kd_now_msf ();
    //  A lease-ahead worker pushes a gradient computed on the pull before
    //  this one, and must name its versions then (s_ahead_pull).
    if (self->lease_ahead) {
        for (size_t i = 0; i < self->n_shards; i++) {
            self->shards [i].pulled [1] = self->shards [i].pulled [0];
            self->shards [i].pulled [0] = self->shards [i].version;
        }
        self->pull_clock [1] = self->pull_clock [0];
        self->pull_clock [0] = self->clock + 1;
        self->pull_released [1] = self->pull_released [0];
        self->pull_released [0] = self->released_version;
    }
}

//  Lease ahead: the pull the gradient of our clock was computed on, 0 the
//  last one or 1 the one before; -1 without a lease ahead or a pull.  It
//  is the newest pull made before that clock's release (protocol 9.3.2),
//  except for our first clock since an admission, which is computed on the
//  pull after it.
static int
s_ahead_pull (kd_client_t *self)
{
    if (!self->lease_ahead || !self->pull_clock [0])
        return -1;
    if (self->clock == self->ahead_from || self->pull_clock [0] <= self->clock
    ||  !self->pull_clock [1])
        return 0;
    return 1;
}

//  The base a PUSH to shard i names: under ASP and SSP the version of its
//  slice we computed on (each shard counts its own), else the model's.
static uint64_t
s_push_base (kd_client_t *self, size_t i)
{
    if (!self->direct)
        return self->version;
    int pull = s_ahead_pull (self);
    return pull < 0 ? self->shards [i].version : self->shards [i].pulled [pull];
}

int
kd_client_pull_version (kd_client_t *self, float *params, uint64_t version)
{
    assert (self);
    assert (params);
    if (!self->started || s_dense_only (self, "kd_client_pull"))
        return -1;
    self->t_pull = kd_now_msf ();
    //  A pull that fails halfway leaves params half written: no cache.
    self->cache = NULL;
    s_pull_arg_t arg = { params, version };
    uint64_t known = self->min_clock;
    //  A pull sent with ARRIVE serves only a version at least as new as
    //  the one it asked for; otherwise it may wait at the shard for a
    //  commit that is not coming, and the round asks afresh.
    if (version < self->prefetch_version)
        self->prefetched = 0;
    s_shm_prepare (self);
    if (s_shard_round (self, s_pull_request, KD_MSG_PULL_OK, s_pull_reply, &arg))
        return -1;
    self->cache = params;
    self->cache_clock = known;
    s_pulled (self);
    return 0;
}

int
kd_client_pull_final (kd_client_t *self, float *params, int timeout_ms)
{
    assert (self);
    assert (params);
    //  Only an external model's scheduler keeps the shards up after STOP.
    if (!self->stopped_run || !self->welcomed || timeout_ms <= 0 || strcmp (self->model, "external"))
        return -1;
    //  STOP came during a push, which let go of the shards' sockets (and
    //  the frames queued on them): connect to the same primaries again.
    if (!self->started && self->reopen) {
        char err [256];
        self->book = kd_shardset_new (self->reopen, self->n_params, self->max_msg, self->curve,
                                      err, sizeof err);
        if (!self->book) {
            kd_error ("final pull: %s", err);
            return -1;
        }
        self->n_shards = kd_shardset_size (self->book);
        memset (self->shards, 0, sizeof self->shards);
        self->prefetched = 0;
        self->started = true;
    }
    if (!self->started)
        return -1;
    if (self->keyed) {
        kd_error ("kd_client_pull_final: the model is keyed: pull the keys you need with "
                  "kd_client_pull_keys before leaving");
        return -1;
    }
    //  ASP and SSP shards keep versions of their own; our last push was
    //  applied before its PUSH_OK, so whatever they hold has it.
    uint64_t version = self->direct ? 0 : self->stop_version;
    self->final_until = kd_now_ms () + (uint64_t) timeout_ms;
    int rc = kd_client_pull_version (self, params, version);
    self->final_until = 0;
    if (rc == 0)
        kd_info ("final pull version=%llu", (unsigned long long) self->version);
    else
    if (!zsys_interrupted && !s_cancelled (self))
        kd_warn ("final pull: the shards did not answer within %d ms", timeout_ms);
    return rc;
}

uint64_t
kd_client_stop_version (kd_client_t *self)
{
    assert (self);
    return self->stop_version;
}

int
kd_client_pull (kd_client_t *self, float *params)
{
    assert (self);
    assert (params);
    //  SSP reads its cache while it holds every update of clocks below
    //  clock - s: that is all the model SSP promises a worker at `clock`.
    if (self->ssp && self->cache == params && self->cache_clock + self->staleness >= self->clock) {
        self->pulls_skipped++;
        self->t_pull = self->t_pulled = kd_now_msf ();
        return 0;
    }
    //  ASP and SSP take whatever each shard has: its versions are its own.
    return kd_client_pull_version (self, params, self->direct ? 0 : self->released_version);
}

//  --------------------------------------------------------------------------
//  Init

//  INIT of an external model's initial values for one shard: a copy, since
//  retries may outlive the caller's buffer.
static kd_msg_t *
s_init_request (kd_client_t *self, size_t i, void *arg)
{
    uint64_t lo = kd_shardset_lo (self->book, i), hi = kd_shardset_hi (self->book, i);
    kd_msg_t *msg = kd_msg_new (KD_MSG_INIT);
    kd_msg_set_uint (msg, KD_F_LO, lo);
    zframe_t *data = zframe_new ((const float *) arg + lo, (size_t) (hi - lo) * sizeof (float));
    kd_msg_set_data (msg, &data);
    return msg;
}

static int
s_init_reply (kd_client_t *self, size_t i, kd_msg_t *reply, void *arg)
{
    (void) self, (void) i, (void) reply, (void) arg;
    return 0;
}

int
kd_client_init_params (kd_client_t *self, const float *params)
{
    assert (self);
    assert (params);
    if (!self->started || s_dense_only (self, "kd_client_init_params")
    ||  s_worker_only (self, "kd_client_init_params"))
        return -1;
    return s_shard_round (self, s_init_request, KD_MSG_INIT_OK, s_init_reply, (void *) params);
}

//  --------------------------------------------------------------------------
//  Push

//  PUSH of our gradient slice for one shard.
static kd_msg_t *
s_push_request (kd_client_t *self, size_t i, void *arg)
{
    const float *gradient = (const float *) arg;
    s_shard_t *s = &self->shards [i];
    kd_msg_t *msg = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (msg, KD_F_RANK, self->rank);
    kd_msg_set_uint (msg, KD_F_CLOCK, self->clock);
    //  Under ASP and SSP each shard counts its own versions and measures
    //  staleness against the version we pulled from it.
    kd_msg_set_uint (msg, KD_F_BASE, s_push_base (self, i));
    uint64_t lo = kd_shardset_lo (self->book, i), hi = kd_shardset_hi (self->book, i);
    kd_msg_set_uint (msg, KD_F_LO, lo);
    kd_msg_set_uint (msg, KD_F_SAMPLES, self->pushed_samples);
    if (self->short_path && self->reg)
        kd_msg_set_uint (msg, KD_F_REG, self->reg);
    const float *slice = gradient + lo;
    size_t bytes = (size_t) (hi - lo) * sizeof (float);
    if (s->shm_state == S_SHM_ON) {
        size_t slot = (size_t) (self->clock % 2);
        memcpy (kd_shmlink_slot (s->shm, slot), slice, bytes);
        kd_msg_set_uint (msg, KD_F_COUNT, hi - lo);
        kd_msg_set_uint (msg, KD_F_SHM, 1);
        kd_msg_set_uint (msg, KD_F_OFFSET, kd_shmlink_offset (s->shm, slot));
        return msg;
    }
    if (self->wire_dtype != KD_DTYPE_F32) {
        //  16-bit values: converted into a frame of their own each time.
        zframe_t *data = zframe_new (NULL, (size_t) (hi - lo) * 2);
        if (self->wire_dtype == KD_DTYPE_F16)
            kd_half_from_float ((uint16_t *) zframe_data (data), slice, (size_t) (hi - lo));
        else
            kd_bf16_from_float ((uint16_t *) zframe_data (data), slice, (size_t) (hi - lo));
        kd_msg_set_uint (msg, KD_F_DTYPE, self->wire_dtype);
        kd_msg_set_data (msg, &data);
        return msg;
    }
    //  The first push of a clock borrows the gradient: the caller may write
    //  it again only after every shard answered PUSH_OK, and a shard can
    //  only answer once ZeroMQ has written this message, which goes out
    //  before any retry on the same connection.  A retry copies: it may
    //  still be queued when the first copy's answer lets us move on.
    if (s->borrowed != self->clock + 1) {
        s->borrowed = self->clock + 1;
        atomic_fetch_add (&self->inflight, 1);
        kd_msg_set_data_ref (msg, slice, bytes, s_ref_free, &self->inflight);
    }
    else {
        zframe_t *data = zframe_new (slice, bytes);
        kd_msg_set_data (msg, &data);
    }
    return msg;
}

static int
s_push_reply (kd_client_t *self, size_t i, kd_msg_t *reply, void *arg)
{
    (void) i, (void) arg;
    if (kd_msg_uint (reply, KD_F_CLOCK) != self->clock)
        return -1;
    if (kd_msg_uint (reply, KD_F_STALENESS) > self->push_tau)
        self->push_tau = kd_msg_uint (reply, KD_F_STALENESS);
    return 0;
}

//  The short path (protocol 9.3.1): send every PUSH now and return, so that
//  ARRIVE can follow at once; kd_client_arrive then waits for the PUSH_OKs.
//  The PUSHes and their retries read our copy of the gradient: the caller
//  may write its own as soon as we return.  After a readmission nothing is
//  sent, as in the classic path.
static void
s_push_early (kd_client_t *self, const float *gradient)
{
    if (self->early_release)
        return;
    if (!self->push_copy) {
        self->push_copy = (float *) malloc (self->n_params * sizeof (float) + 1);
        assert (self->push_copy);
    }
    memcpy (self->push_copy, gradient, self->n_params * sizeof (float));
    for (size_t i = 0; i < self->n_shards; i++) {
        kd_msg_t *req = s_push_request (self, i, self->push_copy);
        kd_msg_send (&req, kd_shardset_socket (self->book, i));
    }
    self->push_early = true;
    self->pushed = true;
    self->t_pushed = kd_now_msf ();
}

//  A gradient with a NaN or an Inf is refused here: not sent, its rows go
//  back.  Returns true if it was refused.
static bool
s_refuse_nonfinite (kd_client_t *self, const float *g, size_t n)
{
    if (isfinite (kd_sumsq (g, n)))
        return false;
    kd_warn ("gradient not finite (NaN or Inf) clock=%llu: not pushed, its rows go back",
             (unsigned long long) self->clock);
    self->refused = true;
    self->refused_total++;
    self->pushed = true;
    self->t_pushed = kd_now_msf ();
    return true;
}

int
kd_client_push (kd_client_t *self, const float *gradient, uint64_t samples)
{
    assert (self);
    assert (gradient);
    if (!self->started || s_dense_only (self, "kd_client_push") || s_worker_only (self, "kd_client_push"))
        return -1;
    self->t_push = kd_now_msf ();
    self->push_tau = 0;
    self->pushed_samples = samples;
    self->refused = false;
    //  A gradient with a NaN or an Inf is not sent at all: every shard
    //  would refuse its slice anyway, and under ASP the finite slices of
    //  the others would be applied alone.
    if (s_refuse_nonfinite (self, gradient, self->n_params))
        return 0;
    s_shm_prepare (self);
    if (self->short_path && !self->keyed) {
        s_push_early (self, gradient);
        return 0;
    }
    //  After a readmission the gradient is superseded: not pushed, so that
    //  no shard stages it after the scheduler dropped it.
    if (!self->early_release
    &&  s_shard_round (self, s_push_request, KD_MSG_PUSH_OK, s_push_reply, (void *) gradient)) {
        //  Stopped mid-round: frames of the gradient may still be queued.
        //  This client is done; let go of them before the caller may free
        //  the gradient.  Where the ranges are is kept for a final pull.
        kd_msg_destroy (&self->reopen);
        self->reopen = s_book_as_start (self);
        s_close_shards (self);
        return -1;
    }
    if (self->refused)
        self->refused_total++;
    self->pushed = true;
    self->t_pushed = kd_now_msf ();
    return 0;
}

//  --------------------------------------------------------------------------
//  Keyed pull and push

typedef struct {
    const uint64_t *keys;       //  the caller's keys
    float *out;                 //  pull: the caller's values
    const float *values;        //  push: the caller's values
    size_t first [S_MAX_SHARDS];    //  shard i's keys are [first [i], end [i])
    size_t end [S_MAX_SHARDS];
    uint64_t version;           //  pull: least version wanted
} s_keyed_arg_t;

//  Check n keys (strictly increasing, below the key count) and split them
//  over the shards' ranges.  Returns 0, or -1 (logged).
static int
s_keyed_split (kd_client_t *self, const char *call, const uint64_t *keys, size_t n,
               s_keyed_arg_t *arg)
{
    if (!self->started)
        return -1;
    if (!self->keyed) {
        kd_error ("%s: the model is dense: use %s", call, strstr (call, "push") ? "kd_client_push"
                                                                              : "kd_client_pull");
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if ((i > 0 && keys [i - 1] >= keys [i]) || keys [i] >= self->n_params) {
            kd_error ("%s: key %zu (%llu) is not above the one before and below %zu", call, i,
                      (unsigned long long) keys [i], self->n_params);
            return -1;
        }
    arg->keys = keys;
    for (size_t i = 0; i < self->n_shards; i++) {
        arg->first [i] = kd_lower_bound (keys, n, kd_shardset_lo (self->book, i));
        arg->end [i] = kd_lower_bound (keys, n, kd_shardset_hi (self->book, i));
    }
    return 0;
}

//  A keyed PULL of one shard's keys.
static kd_msg_t *
s_pull_keys_request (kd_client_t *self, size_t i, void *arg)
{
    s_keyed_arg_t *a = (s_keyed_arg_t *) arg;
    kd_msg_t *msg = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (msg, KD_F_VERSION, a->version);
    if (self->wire_dtype != KD_DTYPE_F32)
        kd_msg_set_uint (msg, KD_F_DTYPE, self->wire_dtype);
    kd_msg_set_keys (msg, a->keys + a->first [i], a->end [i] - a->first [i]);
    if (self->delta_keys)
        kd_msg_set_uint (msg, KD_F_KEY_ENC, KD_KEY_ENC_DELTA);
    return msg;
}

//  A shard's rows, into the caller's values at its keys' place.
static int
s_pull_keys_reply (kd_client_t *self, size_t i, kd_msg_t *reply, void *arg)
{
    s_keyed_arg_t *a = (s_keyed_arg_t *) arg;
    size_t count = (a->end [i] - a->first [i]) * self->dim;
    if (kd_msg_uint (reply, KD_F_VERSION) < a->version
    ||  kd_msg_data_to_floats (reply, a->out + a->first [i] * self->dim, count)) {
        kd_warn ("keyed pull: shard %zu answered %llu values, expected %zu", i,
                 (unsigned long long) kd_msg_uint (reply, KD_F_COUNT), count);
        return -1;
    }
    self->shards [i].version = kd_msg_uint (reply, KD_F_VERSION);
    return 0;
}

int
kd_client_pull_keys (kd_client_t *self, const uint64_t *keys, size_t n, float *values)
{
    assert (self);
    assert ((keys && values) || n == 0);
    s_keyed_arg_t arg = { .out = values };
    if (s_keyed_split (self, "kd_client_pull_keys", keys, n, &arg))
        return -1;
    arg.version = self->direct ? 0 : self->released_version;
    self->t_pull = kd_now_msf ();
    if (s_shard_round (self, s_pull_keys_request, KD_MSG_PULL_OK, s_pull_keys_reply, &arg))
        return -1;
    s_pulled (self);
    return 0;
}

//  A keyed PUSH of one shard's keys and rows (copied: keyed requests are
//  small, and retries may outlive nothing but this call).
static kd_msg_t *
s_push_keys_request (kd_client_t *self, size_t i, void *arg)
{
    s_keyed_arg_t *a = (s_keyed_arg_t *) arg;
    kd_msg_t *msg = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (msg, KD_F_RANK, self->rank);
    kd_msg_set_uint (msg, KD_F_CLOCK, self->clock);
    kd_msg_set_uint (msg, KD_F_BASE, s_push_base (self, i));
    kd_msg_set_uint (msg, KD_F_LO, kd_shardset_lo (self->book, i));
    kd_msg_set_uint (msg, KD_F_SAMPLES, self->pushed_samples);
    size_t n = a->end [i] - a->first [i], count = n * self->dim;
    const float *rows = a->values + a->first [i] * self->dim;
    zframe_t *data;
    if (self->wire_dtype != KD_DTYPE_F32) {
        data = zframe_new (NULL, count * 2);
        if (self->wire_dtype == KD_DTYPE_F16)
            kd_half_from_float ((uint16_t *) zframe_data (data), rows, count);
        else
            kd_bf16_from_float ((uint16_t *) zframe_data (data), rows, count);
        kd_msg_set_uint (msg, KD_F_DTYPE, self->wire_dtype);
    }
    else
        data = zframe_new (rows, count * sizeof (float));
    kd_msg_set_data (msg, &data);
    kd_msg_set_keys (msg, a->keys + a->first [i], n);
    if (self->delta_keys)
        kd_msg_set_uint (msg, KD_F_KEY_ENC, KD_KEY_ENC_DELTA);
    return msg;
}

int
kd_client_push_keys (kd_client_t *self, const uint64_t *keys, size_t n, const float *values,
                     uint64_t samples)
{
    assert (self);
    assert ((keys && values) || n == 0);
    s_keyed_arg_t arg = { .values = values };
    if (s_worker_only (self, "kd_client_push_keys")
    ||  s_keyed_split (self, "kd_client_push_keys", keys, n, &arg))
        return -1;
    self->t_push = kd_now_msf ();
    self->push_tau = 0;
    self->pushed_samples = samples;
    self->refused = false;
    if (s_refuse_nonfinite (self, values, n * self->dim))
        return 0;
    if (!self->early_release
    &&  s_shard_round (self, s_push_keys_request, KD_MSG_PUSH_OK, s_push_reply, &arg))
        return -1;
    if (self->refused)
        self->refused_total++;
    self->pushed = true;
    self->t_pushed = kd_now_msf ();
    return 0;
}

//  --------------------------------------------------------------------------
//  Arrive, sleep, telemetry, leave

void
kd_client_set_emulated_ms (kd_client_t *self, double ms)
{
    assert (self);
    self->emulated_ms = ms;
}

//  BSP, LSP, ALSP: the next iteration's pull goes with ARRIVE.  Each shard
//  parks it until a version newer than the one we computed on exists,
//  which is the commit that releases us, and answers at that commit: the
//  values travel while COMMIT_OK and our RELEASE do, a round trip off
//  every phase.  Under ASP and SSP there is no barrier to hide it behind.
static void
s_pull_ahead (kd_client_t *self)
{
    if (self->direct || self->keyed || self->no_pull_ahead || self->prefetched || !self->book)
        return;
    s_shm_prepare (self);
    s_pull_arg_t arg = { NULL, self->version + 1 };
    for (size_t i = 0; i < self->n_shards; i++) {
        kd_msg_t *req = s_pull_request (self, i, &arg);
        kd_msg_send (&req, kd_shardset_socket (self->book, i));
        self->prefetched |= 1ull << i;
    }
    self->prefetch_version = arg.version;
}

int
kd_client_arrive (kd_client_t *self, float loss, kd_release_t *release)
{
    assert (self);
    if (!self->started || s_worker_only (self, "kd_client_arrive"))
        return -1;
    double t_wait = kd_now_msf ();
    self->t_wait = t_wait;
    if (!self->pushed)
        self->t_push = self->t_pushed = t_wait;
    uint64_t computed_clock = self->clock;
    uint64_t rows = self->pushed ? self->pushed_samples : 0;
    self->loss = isfinite (loss) ? loss : 1e30f;
    self->arrived_clock = computed_clock;
    self->arrived_samples = rows;
    kd_msg_t *msg = NULL;
    bool readmitted = false;
    //  ARRIVE, and again after every silent deadline: the scheduler ignores
    //  a repeat while we wait, and resends a RELEASE it already sent, so a
    //  lost message costs one deadline, not the run.
    while (!msg && !s_over (self)) {
        if (self->early_release) {
            msg = self->early_release;
            self->early_release = NULL;
            readmitted = true;
            break;
        }
        kd_msg_t *arrive = kd_msg_new (KD_MSG_ARRIVE);
        kd_msg_set_uint (arrive, KD_F_CLOCK, computed_clock);
        //  Under ASP and SSP the scheduler's version is only a count: the
        //  base is the version it released us on, with a lease ahead the
        //  release whose pull we computed on.
        int pull = s_ahead_pull (self);
        uint64_t released = pull < 0 ? self->released_version : self->pull_released [pull];
        kd_msg_set_uint (arrive, KD_F_BASE, self->direct ? released : self->version);
        kd_msg_set_uint (arrive, KD_F_SAMPLES, rows);
        if (self->pushed && self->refused)
            kd_msg_set_uint (arrive, KD_F_REFUSED, 1);
        kd_msg_set_float (arrive, KD_F_LOSS, self->loss);
        kd_msg_set_uint (arrive, KD_F_STALENESS, self->push_tau);
        kd_msg_set_float (arrive, KD_F_COMPUTE_MS, self->t_push - self->t_pulled);
        kd_msg_set_float (arrive, KD_F_EMULATED_MS, self->emulated_ms);
        bool early = self->push_early;
        if (early)
            kd_msg_set_uint (arrive, KD_F_STAGED, 1);
        kd_peer_send (self->peer, &arrive);
        s_pull_ahead (self);
        if (early) {
            self->awaiting_release = true;
            int rc = s_shard_round (self, s_push_request, KD_MSG_PUSH_OK, s_push_reply, self->push_copy);
            self->awaiting_release = false;
            if (rc)
                break;
            if (self->refused)
                self->refused_total++;
            if (self->early_release) {
                msg = self->early_release;
                self->early_release = NULL;
                readmitted = true;
                break;
            }
        }
        msg = s_wait_scheduler (self, KD_MSG_RELEASE, self->timeout_ms);
    }
    self->emulated_ms = 0;
    if (!msg)
        return -1;
    s_take_release (self, msg, release, readmitted);
    kd_msg_destroy (&msg);
    return 0;
}

int
kd_client_sleep (kd_client_t *self, double ms)
{
    assert (self);
    if (!(ms > 0))
        return s_over (self) ? -1 : 0;
    double until = kd_now_msf () + ms;
    while (!s_over (self)) {
        double left = until - kd_now_msf ();
        if (left <= 0)
            return 0;
        if (!self->peer) {
            zclock_sleep ((int) ceil (left));
            continue;
        }
        int wait = kd_peer_timeout (self->peer) + 1;
        if (left < wait)
            wait = (int) ceil (left);
        if (s_readable (self, kd_peer_socket (self->peer), wait))
            s_on_scheduler (self, 0);
        kd_peer_tick (self->peer);
    }
    return -1;
}

int
kd_client_telemetry (kd_client_t *self)
{
    assert (self);
    if (!self->monitor || !self->started)
        return -1;
    kd_msg_t *t = kd_msg_new (KD_MSG_TELEMETRY);
    kd_msg_set_uint (t, KD_F_RANK, self->rank);
    kd_msg_set_uint (t, KD_F_CLOCK, self->arrived_clock);
    kd_msg_set_float (t, KD_F_PULL_MS, self->t_pulled - self->t_pull);
    kd_msg_set_float (t, KD_F_COMPUTE_MS, self->t_push - self->t_pulled);
    kd_msg_set_float (t, KD_F_PUSH_MS, self->t_pushed - self->t_push);
    kd_msg_set_float (t, KD_F_WAIT_MS, self->t_released - self->t_wait);
    kd_msg_set_float (t, KD_F_LOSS, self->loss);
    kd_msg_set_uint (t, KD_F_SAMPLES, self->arrived_samples);
    kd_msg_set_uint (t, KD_F_STALENESS, self->last_staleness);
    kd_msg_set_uint (t, KD_F_DROPPED, self->dropped);
    kd_msg_set_uint (t, KD_F_REFUSED, self->refused_total);
    kd_msg_set_uint (t, KD_F_GROUP, self->group);
    kd_msg_set_uint (t, KD_F_VERSION, self->version);
    return kd_msg_send (&t, self->monitor);
}

int
kd_client_report_eval (kd_client_t *self, const char *metric, double value, double loss,
                       uint64_t version)
{
    assert (self);
    assert (metric);
    //  Said once: until the monitor registers, every report finds none.
    if (!self->monitor) {
        if (!self->told_no_monitor)
            kd_warn ("kd_client_report_eval: no monitor to report to yet (kd_client_set_monitor, "
                     "or a monitor registered with the scheduler)");
        self->told_no_monitor = true;
        return -1;
    }
    kd_msg_t *r = kd_msg_new (KD_MSG_REPORT);
    kd_msg_set_uint (r, KD_F_VERSION, version);
    kd_msg_set_str (r, KD_F_METRIC, metric);
    kd_msg_set_float (r, KD_F_VALUE, value);
    if (isfinite (loss))
        kd_msg_set_float (r, KD_F_LOSS, loss);
    //  The time the version was committed: the run's time to accuracy
    //  counts to it, not to when we got round to scoring it.
    if (version == self->version && self->version_ts)
        kd_msg_set_uint (r, KD_F_TS_MS, self->version_ts);
    if (self->peer)
        kd_msg_set_str (r, KD_F_NAME, kd_peer_name (self->peer));
    return kd_msg_send (&r, self->monitor);
}

int
kd_client_leave (kd_client_t *self, const char *reason)
{
    assert (self);
    //  After the scheduler's STOP one LEAVE still goes: with an external
    //  model it waits for its workers to leave before it stops the shards.
    if (!self->peer || !self->welcomed || (self->stop && !self->stopped_run))
        return -1;
    kd_msg_t *leave = kd_msg_new (KD_MSG_LEAVE);
    kd_msg_set_str (leave, KD_F_REASON, reason && *reason ? reason : "leave");
    int rc = kd_peer_send (self->peer, &leave);
    kd_info ("leave rank=%llu clock=%llu reason=\"%s\"", (unsigned long long) self->rank,
             (unsigned long long) self->clock, reason ? reason : "");
    //  Once we left, the scheduler no longer knows us: no second LEAVE.
    self->welcomed = false;
    self->stop = true;
    return rc;
}
