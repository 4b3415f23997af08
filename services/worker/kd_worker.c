/*  kd_worker: the training worker.

    One iteration:  compute a gradient on the rows of its lease, on the
    local model (version v_r) -> PUSH each shard its slice -> ARRIVE at the
    scheduler -> wait for RELEASE (the consistency decision, with the next
    lease) -> PULL the released version -> TELEMETRY.  Under SSP the pull
    is skipped while the cached model is fresh enough for the next clock,
    as in Bosen's client cache.
    A worker is a client, so it waits for replies, but every wait polls the
    scheduler too (STOP, heartbeats) and has a deadline: a request that is
    not answered in time is sent again, which is safe because the shards
    de-duplicate pushes by (rank, clock) and pulls have no side effects.
*/
#include "kd_worker.h"
#include "kd_speed.h"
#include <cblas.h>
#include <math.h>

#define S_MAX_SHARDS    64      //  shards in the address book at most
#define S_RETRY_MAX_MS  5000    //  ceiling of the retry backoff
#define S_RETRY_BUSY_MS 200     //  retry after a shard said "not now"
#define S_RETRY_FIRST_MS 1000   //  first resend to a silent shard
#define S_MAX_BATCH     65536   //  largest batch a WELCOME may ask for

typedef struct {
    zsock_t *sock;              //  DEALER to this shard
    char *endpoint;             //  its advertised endpoint
    uint64_t lo, hi;            //  its key range
    bool done;                  //  replied in the current round
    uint64_t version;           //  version it last returned
} s_shard_t;

typedef struct {
    kd_config_t *config;        //  settings
    kd_peer_t *peer;            //  link to the scheduler
    zsock_t *monitor;           //  DEALER to the monitor's intake
    s_shard_t shards [S_MAX_SHARDS];  //  address book
    size_t n_shards;            //  entries in use
    bool welcomed, started;     //  registration stages
    bool stop;                  //  STOP or signal: leave the loop
    int exit_code;              //  what to return
    uint64_t rank;              //  our worker rank
    kd_model_kind_t kind;       //  model
    uint32_t hidden;            //  mlp hidden units
    size_t n_params;            //  flat parameter count
    size_t batch;               //  rows per iteration
    uint64_t seed;              //  shared seed
    kd_model_t *model;          //  gradient code and scratch
    float *params;              //  local copy of the model
    float *grad;                //  gradient buffer
    float *xbuf;                //  gathered batch rows
    uint8_t *ybuf;              //  gathered labels
    kd_dataset_t *data;         //  the whole training set
    uint32_t *lease;            //  rows of the current lease
    size_t lease_n;             //  rows in it
    uint64_t version;           //  version of params (min over shards)
    uint64_t clock;             //  clock we may compute
    uint64_t released_version;  //  version named by the last RELEASE
    uint64_t last_staleness;    //  staleness of our last applied gradient
    uint64_t dropped;           //  our gradients dropped so far
    uint64_t group;             //  ALSP group
    uint64_t t0_ms;             //  wall clock start of training
    double delay_ms;            //  emulated compute per iteration
    double slowdown;            //  static slowdown factor
    bool hetero;                //  dynamic heterogeneity on
    double hetero_period;       //  seconds between speed changes
    int timeout_ms;             //  request deadline before a retry
    bool direct;                //  ASP/SSP: shards apply pushes on arrival
    bool ssp;                   //  SSP: pull only when the cache is too old
    uint64_t staleness;         //  SSP: s, clocks of slack
    uint64_t min_clock;         //  min_clock named by the last RELEASE
    bool cached;                //  SSP: params hold a pulled model
    uint64_t cache_clock;       //  SSP: min_clock when it was pulled; it
                                //  holds every update of earlier clocks
    uint64_t push_tau;          //  direct: largest staleness the shards saw
    uint64_t pulls_skipped;     //  SSP: iterations served from the cache
    kd_speed_t *speed;          //  speed schedule, NULL = constant
    kd_msg_t *early_release;    //  a readmission RELEASE that came while we
                                //  were not waiting for one (see s_on_scheduler)
} self_t;

//  --------------------------------------------------------------------------
//  Small helpers

//  One splitmix64 step from z, for stateless seeded choices.
static uint64_t
s_mix (uint64_t z)
{
    return kd_splitmix64 (&z);
}

double
kd_worker_hetero_factor (uint64_t seed, uint64_t rank, uint64_t period)
{
    //  Each period, from the first, half of the workers (chosen by the
    //  seed) draw a new speed from these factors; the rest keep theirs.
    static const double factors [] = { 1.0, 1.0, 2.0, 3.0, 4.0 };
    double factor = 1.0;
    for (uint64_t k = 0; k <= period; k++) {
        uint64_t h = s_mix (seed * 0x100000001B3ULL ^ s_mix (k * 1000003ULL + rank));
        if (h & 1)
            factor = factors [(h >> 8) % (sizeof factors / sizeof factors [0])];
    }
    return factor;
}

//  Current slowdown: the static factor times the dynamic one times the
//  speed schedule's (which draws its per-iteration noise here).
static double
s_speed_factor (self_t *self)
{
    double factor = self->slowdown;
    uint64_t now = kd_wall_ms ();
    double elapsed = self->t0_ms && now > self->t0_ms ? (double) (now - self->t0_ms) / 1000.0 : 0;
    if (self->hetero && self->t0_ms)
        factor *= kd_worker_hetero_factor (self->seed, self->rank,
                                           (uint64_t) (elapsed / self->hetero_period));
    if (self->speed)
        factor *= kd_speed_factor (self->speed, elapsed);
    return factor;
}

//  --------------------------------------------------------------------------
//  Messages from the scheduler

static void
s_on_welcome (self_t *self, kd_msg_t *msg)
{
    int kind = kd_model_kind_parse (kd_msg_str (msg, KD_F_MODEL));
    uint64_t hidden64 = kd_msg_uint (msg, KD_F_HIDDEN);
    uint32_t hidden = (uint32_t) hidden64;
    size_t batch = (size_t) kd_msg_uint (msg, KD_F_BATCH);
    if (kind < 0 || batch == 0 || batch > S_MAX_BATCH || hidden64 > KD_MODEL_MAX_HIDDEN
    ||  kd_msg_uint (msg, KD_F_N_PARAMS) != kd_model_param_count (kind, hidden)) {
        kd_error ("welcome rejected: model=%s hidden=%u batch=%zu",
                  kd_msg_str (msg, KD_F_MODEL), hidden, batch);
        self->stop = true;
        self->exit_code = 1;
        return;
    }
    self->rank = kd_msg_uint (msg, KD_F_RANK);
    //  Asked for again if the scheduler restarts, so our staged gradients
    //  and partition keep their meaning.
    kd_peer_set_rank (self->peer, self->rank);
    if (kd_msg_has (msg, KD_F_HEARTBEAT_MS))
        kd_peer_set_heartbeat (self->peer, (int) kd_msg_uint (msg, KD_F_HEARTBEAT_MS));
    if (self->welcomed) {
        kd_info ("registered again rank=%llu", (unsigned long long) self->rank);
        return;
    }
    self->kind = kind;
    self->hidden = hidden;
    self->n_params = kd_model_param_count (kind, hidden);
    self->batch = batch;
    self->seed = kd_msg_uint (msg, KD_F_SEED);
    const char *spec = kd_config_str (self->config, "speed");
    if (*spec) {
        //  Seeded by the run's seed and our name: each run draws other
        //  noise, and two workers with one schedule do not draw the same.
        uint64_t seed = 0xcbf29ce484222325ull;
        for (const char *p = kd_config_str (self->config, "name"); *p; p++)
            seed = (seed ^ (uint8_t) *p) * 0x100000001b3ull;
        char err [256];
        self->speed = kd_speed_new (spec, kd_mix64 (seed ^ kd_mix64 (self->seed)), err, sizeof err);
        if (!self->speed)
            kd_error ("setting 'speed': %s", err);
    }
    const char *consistency = kd_msg_str (msg, KD_F_CONSISTENCY);
    self->direct = !strcmp (consistency, "asp") || !strcmp (consistency, "ssp");
    self->ssp = !strcmp (consistency, "ssp");
    self->staleness = kd_msg_uint (msg, KD_F_STALENESS);
    self->model = kd_model_new (kind, hidden, batch);
    self->params = (float *) calloc (self->n_params, sizeof (float));
    self->grad = (float *) calloc (self->n_params, sizeof (float));
    self->xbuf = (float *) malloc (batch * KD_INPUT_DIM * sizeof (float));
    self->ybuf = (uint8_t *) malloc (batch);
    self->lease = (uint32_t *) malloc (batch * sizeof (uint32_t));
    assert (self->model && self->params && self->grad && self->xbuf && self->ybuf && self->lease);
    self->welcomed = true;
    kd_info ("registered rank=%llu model=%s batch=%zu", (unsigned long long) self->rank,
             kd_model_kind_name (kind), batch);
}

static void
s_on_start (self_t *self, kd_msg_t *msg)
{
    size_t n = 0, nlo = 0, nhi = 0;
    const char **endpoints = kd_msg_strs (msg, KD_F_ENDPOINTS, &n);
    const uint64_t *los = kd_msg_uints (msg, KD_F_LOS, &nlo);
    const uint64_t *his = kd_msg_uints (msg, KD_F_HIS, &nhi);
    if (self->started)
        return;
    if (n == 0 || n > S_MAX_SHARDS || n != nlo || n != nhi || his [n - 1] != self->n_params) {
        kd_error ("start rejected: bad address book shards=%zu", n);
        self->stop = true;
        self->exit_code = 1;
        return;
    }
    int64_t max_msg = kd_config_int (self->config, "max-msg-bytes");
    for (size_t i = 0; i < n; i++) {
        s_shard_t *s = &self->shards [i];
        if (los [i] >= his [i] || (i > 0 && los [i] != his [i - 1]) || (i == 0 && los [0] != 0)) {
            kd_error ("start rejected: shard ranges do not tile the model");
            self->stop = true;
            self->exit_code = 1;
            return;
        }
        s->sock = zsock_new (ZMQ_DEALER);
        kd_socket_harden (s->sock, max_msg);
        kd_curve_client (kd_curve_process (), s->sock);
        if (zsock_connect (s->sock, "%s", endpoints [i]) != 0) {
            kd_error ("cannot connect to shard endpoint=%s", endpoints [i]);
            self->stop = true;
            self->exit_code = 1;
            return;
        }
        s->endpoint = strdup (endpoints [i]);
        s->lo = los [i];
        s->hi = his [i];
    }
    self->n_shards = n;
    self->t0_ms = kd_msg_uint (msg, KD_F_T0_MS);
    self->started = true;
    kd_info ("start shards=%zu", n);
}

//  True when the socket has a message within timeout_ms.
static bool
s_readable (zsock_t *sock, int timeout_ms)
{
    zmq_pollitem_t item = { zsock_resolve (sock), 0, ZMQ_POLLIN, 0 };
    return zmq_poll (&item, 1, timeout_ms) > 0 && (item.revents & ZMQ_POLLIN);
}

//  Handle one message from the scheduler; returns it if the caller waits for
//  its type, else NULL.
static kd_msg_t *
s_on_scheduler (self_t *self, kd_msg_type_t waiting_for)
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
    if (type == KD_MSG_WELCOME)
        s_on_welcome (self, msg);
    else
    if (type == KD_MSG_START)
        s_on_start (self, msg);
    else
    if (type == KD_MSG_STOP) {
        kd_info ("stop reason=\"%s\"", kd_msg_str (msg, KD_F_REASON));
        self->stop = true;
    }
    else
    if (type == KD_MSG_ERROR) {
        if (kd_msg_uint (msg, KD_F_CODE) == KD_ERR_STATE
        &&  !strncmp (kd_msg_str (msg, KD_F_REASON), "not registered", 14))
            kd_peer_unknown (self->peer);
    }
    if (type == KD_MSG_ERROR)
        kd_warn ("scheduler error code=%llu reason=\"%s\"",
                 (unsigned long long) kd_msg_uint (msg, KD_F_CODE), kd_msg_str (msg, KD_F_REASON));
    //  A RELEASE we did not wait for, with a newer clock than the one we
    //  compute, is a readmission: we were declared dead (a SIGSTOP, a
    //  partition) and registered again while computing or pushing.  It
    //  supersedes the iteration in progress, whose gradient the scheduler
    //  no longer expects; thrown away, it would leave us sending an ARRIVE
    //  the scheduler rejects, every deadline, while BSP waits for us.  A
    //  repeat of the RELEASE we work on is only a duplicate.
    if (type == KD_MSG_RELEASE && waiting_for != KD_MSG_RELEASE
    &&  kd_msg_uint (msg, KD_F_CLOCK) > self->clock) {
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

//  Wait up to timeout_ms for a message of one type from the scheduler
//  (while keeping heartbeats going).  Returns it, or NULL on stop/timeout.
static kd_msg_t *
s_wait_scheduler (self_t *self, kd_msg_type_t type, int timeout_ms)
{
    uint64_t deadline = kd_now_ms () + (uint64_t) timeout_ms;
    zsock_t *sock = kd_peer_socket (self->peer);
    while (!self->stop && !zsys_interrupted) {
        uint64_t now = kd_now_ms ();
        if (now >= deadline)
            return NULL;
        int wait = kd_peer_timeout (self->peer) + 1;
        if ((uint64_t) wait > deadline - now)
            wait = (int) (deadline - now);
        if (s_readable (sock, wait)) {
            kd_msg_t *msg = s_on_scheduler (self, type);
            if (msg)
                return msg;
        }
        kd_peer_tick (self->peer);
    }
    return NULL;
}

//  --------------------------------------------------------------------------
//  Rounds of requests to every shard

typedef kd_msg_t *(s_request_fn) (self_t *self, size_t shard);
typedef int (s_reply_fn) (self_t *self, size_t shard, kd_msg_t *reply);

//  Send a request to every shard and wait until each has answered, resending
//  with backoff to shards that stay silent.  Returns 0, or -1 on stop.
static int
s_shard_round (self_t *self, s_request_fn *request, kd_msg_type_t reply_type,
               s_reply_fn *on_reply)
{
    size_t n = self->n_shards, pending = n;
    uint64_t resend_at [S_MAX_SHARDS];
    int backoff [S_MAX_SHARDS];
    zmq_pollitem_t items [S_MAX_SHARDS + 1];
    uint64_t now = kd_now_ms ();
    for (size_t i = 0; i < n; i++) {
        self->shards [i].done = false;
        kd_msg_t *req = request (self, i);
        kd_msg_send (&req, self->shards [i].sock);
        //  The first resend comes soon: a shard that restarted lost the
        //  request, and waiting the whole deadline would be the RTO.
        backoff [i] = self->timeout_ms < S_RETRY_FIRST_MS ? self->timeout_ms : S_RETRY_FIRST_MS;
        resend_at [i] = now + (uint64_t) backoff [i];
        items [i + 1] = (zmq_pollitem_t) { zsock_resolve (self->shards [i].sock), 0, ZMQ_POLLIN, 0 };
    }
    items [0] = (zmq_pollitem_t) { zsock_resolve (kd_peer_socket (self->peer)), 0, ZMQ_POLLIN, 0 };
    while (pending > 0) {
        if (self->stop || zsys_interrupted)
            return -1;
        now = kd_now_ms ();
        int wait = kd_peer_timeout (self->peer) + 1;
        for (size_t i = 0; i < n; i++)
            if (!self->shards [i].done) {
                if (resend_at [i] <= now) {
                    kd_warn ("shard silent, resending endpoint=%s type=%s after_ms=%d",
                             self->shards [i].endpoint, kd_msg_type_name (reply_type), backoff [i]);
                    kd_msg_t *req = request (self, i);
                    kd_msg_send (&req, self->shards [i].sock);
                    backoff [i] = backoff [i] * 2 > S_RETRY_MAX_MS ? S_RETRY_MAX_MS : backoff [i] * 2;
                    resend_at [i] = now + (uint64_t) backoff [i];
                }
                if ((int) (resend_at [i] - now) < wait)
                    wait = (int) (resend_at [i] - now);
            }
        if (zmq_poll (items, (int) n + 1, wait) < 0)
            return -1;
        if (items [0].revents & ZMQ_POLLIN)
            s_on_scheduler (self, 0);
        for (size_t i = 0; i < n; i++) {
            if (!(items [i + 1].revents & ZMQ_POLLIN))
                continue;
            kd_msg_t *reply = NULL;
            kd_msg_err_t err;
            int rc = kd_msg_recv (self->shards [i].sock, &reply, NULL, &err);
            if (rc == -2) {
                kd_warn ("malformed reply from shard endpoint=%s reason=\"%s\"",
                         self->shards [i].endpoint, err.reason);
                continue;
            }
            if (rc != 0)
                continue;
            if (kd_msg_type (reply) == KD_MSG_ERROR) {
                //  A shard that is not ready yet, or full, is asked again
                //  after a short pause rather than the full deadline.
                kd_warn ("shard error endpoint=%s code=%llu reason=\"%s\"", self->shards [i].endpoint,
                         (unsigned long long) kd_msg_uint (reply, KD_F_CODE),
                         kd_msg_str (reply, KD_F_REASON));
                if (!self->shards [i].done)
                    resend_at [i] = kd_now_ms () + S_RETRY_BUSY_MS;
            }
            else
            if (kd_msg_type (reply) == reply_type && !self->shards [i].done
            &&  on_reply (self, i, reply) == 0) {
                self->shards [i].done = true;
                pending--;
            }
            kd_msg_destroy (&reply);
        }
        kd_peer_tick (self->peer);
    }
    return 0;
}

//  PUSH of our gradient slice for one shard.
static kd_msg_t *
s_push_request (self_t *self, size_t i)
{
    //  Clock + 1 of the last push to each shard that borrowed the gradient
    //  (one worker per process, so one table).
    static uint64_t borrowed [S_MAX_SHARDS];
    s_shard_t *s = &self->shards [i];
    kd_msg_t *msg = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (msg, KD_F_RANK, self->rank);
    kd_msg_set_uint (msg, KD_F_CLOCK, self->clock);
    //  Under ASP and SSP each shard counts its own versions and measures
    //  staleness against the version we pulled from it.
    kd_msg_set_uint (msg, KD_F_BASE, self->direct ? s->version : self->version);
    kd_msg_set_uint (msg, KD_F_LO, s->lo);
    kd_msg_set_uint (msg, KD_F_SAMPLES, self->lease_n);
    const float *slice = self->grad + s->lo;
    size_t bytes = (size_t) (s->hi - s->lo) * sizeof (float);
    //  The first push of a clock borrows the gradient: the next gradient is
    //  written only after every shard answered PUSH_OK, and a shard can
    //  only answer once ZeroMQ has written this message, which goes out
    //  before any retry on the same connection.  A retry copies: it may
    //  still be queued when the first copy's answer lets us move on.
    if (borrowed [i] != self->clock + 1) {
        borrowed [i] = self->clock + 1;
        kd_msg_set_data_ref (msg, slice, bytes, NULL, NULL);
    }
    else {
        zframe_t *data = zframe_new (slice, bytes);
        kd_msg_set_data (msg, &data);
    }
    return msg;
}

static int
s_push_reply (self_t *self, size_t i, kd_msg_t *reply)
{
    (void) i;
    if (kd_msg_uint (reply, KD_F_CLOCK) != self->clock)
        return -1;
    if (kd_msg_uint (reply, KD_F_STALENESS) > self->push_tau)
        self->push_tau = kd_msg_uint (reply, KD_F_STALENESS);
    return 0;
}

//  PULL of the released version from one shard.
static kd_msg_t *
s_pull_request (self_t *self, size_t i)
{
    (void) i;
    kd_msg_t *msg = kd_msg_new (KD_MSG_PULL);
    //  ASP and SSP take whatever each shard has: its versions are its own.
    kd_msg_set_uint (msg, KD_F_VERSION, self->direct ? 0 : self->released_version);
    return msg;
}

static int
s_pull_reply (self_t *self, size_t i, kd_msg_t *reply)
{
    s_shard_t *s = &self->shards [i];
    size_t count = 0;
    const float *values = kd_msg_data_floats (reply, &count);
    if ((!self->direct && kd_msg_uint (reply, KD_F_VERSION) < self->released_version)
    ||  kd_msg_uint (reply, KD_F_LO) != s->lo || count != (size_t) (s->hi - s->lo))
        return -1;
    memcpy (self->params + s->lo, values, count * sizeof (float));
    s->version = kd_msg_uint (reply, KD_F_VERSION);
    return 0;
}

//  Pull the released version from every shard into params.
static int
s_pull (self_t *self)
{
    //  SSP reads its cache while it holds every update of clocks below
    //  clock - s: that is all the model SSP promises a worker at `clock`.
    if (self->ssp && self->cached && self->cache_clock + self->staleness >= self->clock) {
        self->pulls_skipped++;
        return 0;
    }
    uint64_t known = self->min_clock;
    if (s_shard_round (self, s_pull_request, KD_MSG_PULL_OK, s_pull_reply))
        return -1;
    self->cached = true;
    self->cache_clock = known;
    //  Shards may be a commit apart; the gradient is then computed on a
    //  model at least as new as the oldest slice, which is what we report.
    uint64_t v = UINT64_MAX;
    for (size_t i = 0; i < self->n_shards; i++)
        if (self->shards [i].version < v)
            v = self->shards [i].version;
    self->version = v;
    return 0;
}

//  Apply a RELEASE: remember the version to pull and the next clock.
static void
s_take_release (self_t *self, kd_msg_t *release)
{
    self->released_version = kd_msg_uint (release, KD_F_VERSION);
    self->clock = kd_msg_uint (release, KD_F_CLOCK);
    self->last_staleness = kd_msg_uint (release, KD_F_STALENESS);
    if (kd_msg_uint (release, KD_F_DROPPED))
        self->dropped++;
    self->group = kd_msg_uint (release, KD_F_GROUP);
    self->min_clock = kd_msg_uint (release, KD_F_MIN_CLOCK);
    //  The lease: the rows to train on next.  A row outside the training
    //  set is a broken scheduler; it is left out and logged, and the
    //  scheduler then refuses the arrival with a clear error.
    size_t n = 0;
    const uint64_t *rows = kd_msg_uints (release, KD_F_ROWS, &n);
    size_t total = kd_dataset_count (self->data);
    self->lease_n = 0;
    for (size_t i = 0; i < n && self->lease_n < self->batch; i++) {
        if (rows [i] < total)
            self->lease [self->lease_n++] = (uint32_t) rows [i];
        else
            kd_error ("lease row out of range row=%llu rows=%zu", (unsigned long long) rows [i], total);
    }
    if (n > self->batch)
        kd_error ("lease of %zu rows exceeds the batch of %zu", n, self->batch);
}

//  Sleep while still answering the scheduler (STOP, heartbeats).
static void
s_sleep (self_t *self, double ms)
{
    double until = kd_now_msf () + ms;
    zsock_t *sock = kd_peer_socket (self->peer);
    while (!self->stop && !zsys_interrupted) {
        double left = until - kd_now_msf ();
        if (left <= 0)
            break;
        int wait = kd_peer_timeout (self->peer) + 1;
        if (left < wait)
            wait = (int) ceil (left);
        if (s_readable (sock, wait))
            s_on_scheduler (self, 0);
        kd_peer_tick (self->peer);
    }
}

//  --------------------------------------------------------------------------
//  The training loop

//  Gather the rows of our lease.
static size_t
s_next_batch (self_t *self)
{
    const float *images = kd_dataset_images (self->data);
    const uint8_t *labels = kd_dataset_labels (self->data);
    for (size_t r = 0; r < self->lease_n; r++) {
        uint32_t row = self->lease [r];
        memcpy (self->xbuf + r * KD_INPUT_DIM, images + (size_t) row * KD_INPUT_DIM,
                KD_INPUT_DIM * sizeof (float));
        self->ybuf [r] = labels [row];
    }
    return self->lease_n;
}

//  Iterate until STOP.
static void
s_train (self_t *self)
{
    while (!self->stop && !zsys_interrupted) {
        double t_pull = kd_now_msf ();
        if (s_pull (self))
            break;
        double t_compute = kd_now_msf ();
        size_t rows = s_next_batch (self);
        float loss = rows > 0 ? kd_model_gradient (self->model, self->params, self->xbuf,
                                                   self->ybuf, rows, self->grad)
                              : 0;
        double real_ms = kd_now_msf () - t_compute;
        //  Injected heterogeneity: an emulated compute time, scaled by this
        //  worker's speed factor, which the real work counts toward; or,
        //  without one, a stretch of the real work.
        double factor = s_speed_factor (self);
        double emulated = self->delay_ms > 0 ? self->delay_ms * factor : real_ms * factor;
        if (emulated > real_ms)
            s_sleep (self, emulated - real_ms);
        double t_push = kd_now_msf ();
        self->push_tau = 0;
        //  After a readmission the gradient is superseded: not pushed, so
        //  that no shard stages it after the scheduler dropped it.
        if (!self->early_release
        &&  s_shard_round (self, s_push_request, KD_MSG_PUSH_OK, s_push_reply))
            break;
        double t_wait = kd_now_msf ();
        uint64_t computed_clock = self->clock;
        kd_msg_t *release = NULL;
        //  ARRIVE, and again after every silent deadline: the scheduler
        //  ignores a repeat while we wait, and resends a RELEASE it already
        //  sent, so a lost message costs one deadline, not the run.
        while (!release && !self->stop && !zsys_interrupted) {
            if (self->early_release) {
                release = self->early_release;
                self->early_release = NULL;
                break;
            }
            kd_msg_t *arrive = kd_msg_new (KD_MSG_ARRIVE);
            kd_msg_set_uint (arrive, KD_F_CLOCK, computed_clock);
            //  Under ASP and SSP the scheduler's version is only a count:
            //  the base is the version it released us on.
            kd_msg_set_uint (arrive, KD_F_BASE, self->direct ? self->released_version
                                                             : self->version);
            kd_msg_set_uint (arrive, KD_F_SAMPLES, rows);
            kd_msg_set_float (arrive, KD_F_LOSS, isfinite (loss) ? loss : 1e30);
            kd_msg_set_uint (arrive, KD_F_STALENESS, self->push_tau);
            kd_msg_set_float (arrive, KD_F_COMPUTE_MS, t_push - t_compute);
            kd_msg_set_float (arrive, KD_F_EMULATED_MS, emulated);
            kd_peer_send (self->peer, &arrive);
            release = s_wait_scheduler (self, KD_MSG_RELEASE, self->timeout_ms);
        }
        if (!release)
            break;
        s_take_release (self, release);
        kd_msg_destroy (&release);
        double t_end = kd_now_msf ();

        kd_msg_t *t = kd_msg_new (KD_MSG_TELEMETRY);
        kd_msg_set_uint (t, KD_F_RANK, self->rank);
        kd_msg_set_uint (t, KD_F_CLOCK, computed_clock);
        kd_msg_set_float (t, KD_F_PULL_MS, t_compute - t_pull);
        kd_msg_set_float (t, KD_F_COMPUTE_MS, t_push - t_compute);
        kd_msg_set_float (t, KD_F_PUSH_MS, t_wait - t_push);
        kd_msg_set_float (t, KD_F_WAIT_MS, t_end - t_wait);
        kd_msg_set_float (t, KD_F_LOSS, isfinite (loss) ? loss : 1e30);
        kd_msg_set_uint (t, KD_F_SAMPLES, rows);
        kd_msg_set_uint (t, KD_F_STALENESS, self->last_staleness);
        kd_msg_set_uint (t, KD_F_DROPPED, self->dropped);
        kd_msg_set_uint (t, KD_F_GROUP, self->group);
        kd_msg_set_uint (t, KD_F_VERSION, self->version);
        kd_msg_send (&t, self->monitor);
    }
}

int
kd_worker_run (kd_config_t *config)
{
    self_t self_s = { .config = config }, *self = &self_s;
    char err [512];
    int64_t max_msg = kd_config_int (config, "max-msg-bytes");
    openblas_set_num_threads ((int) kd_config_int (config, "threads"));
    self->delay_ms = kd_config_double (config, "delay-ms");
    self->slowdown = kd_config_double (config, "slowdown");
    self->hetero = strcmp (kd_config_str (config, "hetero"), "dynamic") == 0;
    self->hetero_period = kd_config_double (config, "hetero-period");
    self->timeout_ms = (int) kd_config_int (config, "request-timeout-ms");
    self->exit_code = 0;
    //  Checked now, built at WELCOME, which brings the run's seed.
    if (*kd_config_str (config, "speed")) {
        self->speed = kd_speed_new (kd_config_str (config, "speed"), 0, err, sizeof err);
        if (!self->speed) {
            kd_error ("setting 'speed': %s", err);
            return 2;
        }
        kd_speed_destroy (&self->speed);
    }

    self->data = kd_dataset_load_dir (kd_config_str (config, "data-dir"), "train", 0, 0,
                                      err, sizeof err);
    if (!self->data) {
        kd_error ("cannot load training data: %s", err);
        return 1;
    }
    self->peer = kd_peer_new (kd_config_str (config, "scheduler"), "worker",
                              kd_config_str (config, "name"), max_msg,
                              (int) kd_config_int (config, "heartbeat-ms"),
                              (int) kd_config_int (config, "liveness"));
    self->monitor = zsock_new (ZMQ_DEALER);
    kd_socket_harden (self->monitor, max_msg);
    kd_curve_client (kd_curve_process (), self->monitor);
    //  Telemetry is best effort: never let a slow monitor block training.
    zsock_set_sndtimeo (self->monitor, 0);
    if (!self->peer || zsock_connect (self->monitor, "%s", kd_config_str (config, "monitor")) != 0) {
        kd_error ("cannot connect scheduler=%s monitor=%s", kd_config_str (config, "scheduler"),
                  kd_config_str (config, "monitor"));
        self->exit_code = 1;
        goto cleanup;
    }
    kd_peer_set_samples (self->peer, kd_dataset_count (self->data));
    if (kd_config_int (config, "rank") >= 0)
        kd_peer_set_rank (self->peer, (uint64_t) kd_config_int (config, "rank"));
    kd_peer_hello (self->peer);
    //  Registration: WELCOME, then START once the cluster is complete, then
    //  a first RELEASE that names our starting version and clock.
    while (!self->welcomed && !self->stop && !zsys_interrupted)
        kd_msg_destroy (&(kd_msg_t *) { s_wait_scheduler (self, KD_MSG_WELCOME, 1000) });
    while (!self->started && !self->stop && !zsys_interrupted)
        kd_msg_destroy (&(kd_msg_t *) { s_wait_scheduler (self, KD_MSG_START, 1000) });
    kd_msg_t *release = NULL;
    while (!release && !self->stop && !zsys_interrupted)
        release = s_wait_scheduler (self, KD_MSG_RELEASE, 1000);
    if (release) {
        s_take_release (self, release);
        kd_msg_destroy (&release);
        s_train (self);
    }
    if (zsys_interrupted && !self->stop) {
        //  SIGTERM: leave gracefully so the barrier stops counting us now.
        kd_msg_t *leave = kd_msg_new (KD_MSG_LEAVE);
        kd_msg_set_str (leave, KD_F_REASON, "signal");
        kd_peer_send (self->peer, &leave);
        kd_info ("leave rank=%llu clock=%llu", (unsigned long long) self->rank,
                 (unsigned long long) self->clock);
    }
    kd_info ("exit rank=%llu clock=%llu version=%llu pulls_skipped=%llu", (unsigned long long) self->rank,
             (unsigned long long) self->clock, (unsigned long long) self->version,
             (unsigned long long) self->pulls_skipped);
cleanup:
    for (size_t i = 0; i < self->n_shards; i++) {
        zsock_destroy (&self->shards [i].sock);
        free (self->shards [i].endpoint);
    }
    zsock_destroy (&self->monitor);
    kd_msg_destroy (&self->early_release);
    kd_peer_destroy (&self->peer);
    kd_model_destroy (&self->model);
    kd_dataset_destroy (&self->data);
    free (self->params);
    free (self->grad);
    free (self->xbuf);
    free (self->ybuf);
    free (self->lease);
    kd_speed_destroy (&self->speed);
    return self->exit_code;
}
