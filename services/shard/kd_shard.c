/*  kd_shard: the parameter shard's service loop.

    A shard registers with the scheduler, which answers with its rank and key
    range [lo, hi) and the optimizer settings.  Workers PUSH gradient slices
    that are only staged, keyed by (rank, clock); nothing is applied until the
    scheduler's COMMIT names them with their weights.  That keeps every shard
    making the same decision for a given gradient.  A PULL that asks for a
    version the shard does not have yet is parked and answered when a commit
    creates it.
*/
#include "kd_shard.h"
#include <cblas.h>

#define S_MAX_STAGED    8192    //  staged gradients at most; more is refused
#define S_MAX_PARKED    4096    //  parked pulls at most
#define S_MAX_LOOKAHEAD 100000  //  versions ahead a pull may wait for
#define S_MAX_RANKS     65536   //  worker ranks we keep a commit mark for

typedef struct {
    zframe_t *routing_id;       //  who asked
    uint64_t version;           //  minimum version wanted
} s_parked_t;

static void s_parked_destroy (void **item);

typedef struct {
    kd_config_t *config;        //  settings
    zsock_t *router;            //  workers, monitor, tests
    kd_peer_t *peer;            //  link to the scheduler
    char endpoint [256];        //  what we advertise
    bool registered;            //  WELCOME received
    uint64_t rank;              //  our shard rank
    uint64_t lo, hi;            //  key range
    size_t n;                   //  hi - lo
    float *params;              //  values of our range
    float *velocity;            //  momentum buffer
    double lr;                  //  learning rate
    double momentum;            //  momentum (0 = plain SGD)
    uint64_t version;           //  model version
    uint64_t version_ts;        //  wall ms of the commit that made it
    zhashx_t *staged;           //  "rank/clock" -> zframe_t gradient
    zlistx_t *parked;           //  s_parked_t, pulls waiting for a version
    uint64_t pushes, commits, pulls, errors;  //  counters for the log
    bool stop;                  //  STOP received
} self_t;

//  Key under which a gradient is staged.
static void
s_stage_key (char *buf, size_t size, uint64_t rank, uint64_t clock)
{
    snprintf (buf, size, "%llu/%llu", (unsigned long long) rank, (unsigned long long) clock);
}

//  Frame destructor for the staging table.
static void
s_frame_destroy (void **item)
{
    zframe_destroy ((zframe_t **) item);
}

//  Answer a request with ERROR and count it.
static void
s_error (self_t *self, zframe_t *routing_id, int code, const char *reason)
{
    char id [64] = "?";
    if (routing_id) {
        char *hex = zframe_strhex (routing_id);
        snprintf (id, sizeof id, "%s", hex);
        free (hex);
    }
    kd_warn ("error peer=%s code=%d reason=\"%s\"", id, code, reason);
    self->errors++;
    kd_msg_t *reply = kd_msg_new_error (routing_id, code, reason);
    kd_msg_send (&reply, self->router);
}

//  Send our range at the current version to one puller.
static void
s_send_params (self_t *self, zframe_t *routing_id)
{
    kd_msg_t *reply = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_routing_id (reply, routing_id);
    kd_msg_set_uint (reply, KD_F_VERSION, self->version);
    kd_msg_set_uint (reply, KD_F_LO, self->lo);
    kd_msg_set_uint (reply, KD_F_TS_MS, self->version_ts);
    //  A copy: the parameters change with the next commit, possibly before
    //  ZeroMQ has sent this frame.
    zframe_t *data = zframe_new (self->params, self->n * sizeof (float));
    kd_msg_set_data (reply, &data);
    kd_msg_send (&reply, self->router);
    self->pulls++;
}

//  Answer every parked pull the current version satisfies.
static void
s_release_parked (self_t *self)
{
    zlistx_t *keep = zlistx_new ();
    zlistx_set_destructor (keep, s_parked_destroy);
    s_parked_t *p;
    while ((p = (s_parked_t *) zlistx_detach (self->parked, NULL))) {
        if (p->version <= self->version) {
            s_send_params (self, p->routing_id);
            zframe_destroy (&p->routing_id);
            free (p);
        }
        else
            zlistx_add_end (keep, p);
    }
    zlistx_destroy (&self->parked);
    self->parked = keep;
}

//  WELCOME: take our rank and range, and initialize the parameters.
static void
s_on_welcome (self_t *self, kd_msg_t *msg)
{
    uint64_t lo = kd_msg_uint (msg, KD_F_LO), hi = kd_msg_uint (msg, KD_F_HI);
    int kind = kd_model_kind_parse (kd_msg_str (msg, KD_F_MODEL));
    uint64_t n_params = kd_msg_uint (msg, KD_F_N_PARAMS);
    uint64_t hidden = kd_msg_uint (msg, KD_F_HIDDEN);
    if (kind < 0 || hi <= lo || hi > n_params || hidden > KD_MODEL_MAX_HIDDEN
    ||  n_params != kd_model_param_count (kind, (uint32_t) hidden)) {
        kd_error ("welcome rejected: bad range lo=%llu hi=%llu model=%s",
                  (unsigned long long) lo, (unsigned long long) hi, kd_msg_str (msg, KD_F_MODEL));
        return;
    }
    self->lr = kd_msg_float (msg, KD_F_LR);
    self->momentum = kd_msg_float (msg, KD_F_MOMENTUM);
    if (self->registered && lo == self->lo && hi == self->hi) {
        kd_info ("registered again rank=%llu version=%llu",
                 (unsigned long long) self->rank, (unsigned long long) self->version);
        self->rank = kd_msg_uint (msg, KD_F_RANK);
        return;
    }
    //  A new range makes every staged gradient and parked pull meaningless.
    zhashx_purge (self->staged);
    zlistx_purge (self->parked);
    self->rank = kd_msg_uint (msg, KD_F_RANK);
    self->lo = lo;
    self->hi = hi;
    self->n = (size_t) (hi - lo);
    free (self->params);
    free (self->velocity);
    self->params = (float *) malloc (self->n * sizeof (float));
    self->velocity = (float *) calloc (self->n, sizeof (float));
    assert (self->params && self->velocity);
    kd_model_init_range (kind, (uint32_t) kd_msg_uint (msg, KD_F_HIDDEN),
                         kd_msg_uint (msg, KD_F_SEED), lo, hi, self->params);
    self->version = 0;
    self->version_ts = kd_wall_ms ();
    self->registered = true;
    kd_info ("registered rank=%llu lo=%llu hi=%llu lr=%g momentum=%g",
             (unsigned long long) self->rank, (unsigned long long) lo,
             (unsigned long long) hi, self->lr, self->momentum);
}

//  COMMIT: apply the named gradients as one step, or none of them.
static void
s_on_commit (self_t *self, kd_msg_t *msg)
{
    size_t n = 0, nc = 0, nw = 0, nd = 0, ndc = 0;
    const uint64_t *ranks = kd_msg_uints (msg, KD_F_RANKS, &n);
    const uint64_t *clocks = kd_msg_uints (msg, KD_F_CLOCKS, &nc);
    const double *weights = kd_msg_floats (msg, KD_F_WEIGHTS, &nw);
    const uint64_t *dranks = kd_msg_uints (msg, KD_F_DROP_RANKS, &nd);
    const uint64_t *dclocks = kd_msg_uints (msg, KD_F_DROP_CLOCKS, &ndc);
    uint64_t version = kd_msg_uint (msg, KD_F_VERSION);
    zframe_t *sched = NULL;
    char key [48];

    if (!self->registered) {
        kd_warn ("commit before registration version=%llu", (unsigned long long) version);
        return;
    }
    if ((n > 0 && version != self->version + 1) || (n == 0 && version != self->version)) {
        kd_error ("commit out of order version=%llu have=%llu entries=%zu",
                  (unsigned long long) version, (unsigned long long) self->version, n);
        kd_msg_t *err = kd_msg_new_error (sched, KD_ERR_STATE, "commit out of order");
        kd_peer_send (self->peer, &err);
        return;
    }
    //  Check every entry first, so that a commit is applied whole or not at
    //  all: a shard never applies part of a decision.
    for (size_t i = 0; i < n; i++) {
        s_stage_key (key, sizeof key, ranks [i], clocks [i]);
        zframe_t *g = (zframe_t *) zhashx_lookup (self->staged, key);
        if (!g || zframe_size (g) != self->n * sizeof (float)) {
            kd_error ("commit names unstaged gradient rank=%llu clock=%llu version=%llu",
                      (unsigned long long) ranks [i], (unsigned long long) clocks [i],
                      (unsigned long long) version);
            kd_msg_t *err = kd_msg_new_error (sched, KD_ERR_NOT_FOUND, "commit names unstaged gradient");
            kd_peer_send (self->peer, &err);
            return;
        }
    }
    if (n > 0) {
        //  With momentum: v = mu v + sum w_i g_i; x -= lr v.  Without, apply
        //  each gradient straight from its received frame: x -= lr w_i g_i.
        if (self->momentum > 0) {
            cblas_sscal ((int) self->n, (float) self->momentum, self->velocity, 1);
            for (size_t i = 0; i < n; i++) {
                s_stage_key (key, sizeof key, ranks [i], clocks [i]);
                zframe_t *g = (zframe_t *) zhashx_lookup (self->staged, key);
                cblas_saxpy ((int) self->n, (float) weights [i],
                             (const float *) zframe_data (g), 1, self->velocity, 1);
            }
            cblas_saxpy ((int) self->n, (float) -self->lr, self->velocity, 1, self->params, 1);
        }
        else
            for (size_t i = 0; i < n; i++) {
                s_stage_key (key, sizeof key, ranks [i], clocks [i]);
                zframe_t *g = (zframe_t *) zhashx_lookup (self->staged, key);
                cblas_saxpy ((int) self->n, (float) (-self->lr * weights [i]),
                             (const float *) zframe_data (g), 1, self->params, 1);
            }
        self->version = version;
        self->version_ts = kd_msg_has (msg, KD_F_TS_MS) ? kd_msg_uint (msg, KD_F_TS_MS)
                                                         : kd_wall_ms ();
        self->commits++;
    }
    for (size_t i = 0; i < n; i++) {
        s_stage_key (key, sizeof key, ranks [i], clocks [i]);
        zhashx_delete (self->staged, key);
    }
    for (size_t i = 0; i < nd && i < ndc; i++) {
        s_stage_key (key, sizeof key, dranks [i], dclocks [i]);
        zhashx_delete (self->staged, key);
    }
    kd_msg_t *ok = kd_msg_new (KD_MSG_COMMIT_OK);
    kd_msg_set_uint (ok, KD_F_VERSION, self->version);
    kd_peer_send (self->peer, &ok);
    kd_debug ("commit version=%llu entries=%zu drops=%zu", (unsigned long long) version, n, nd);
    s_release_parked (self);
    (void) nc;
    (void) nw;
}

//  A message from the scheduler.
static void
s_on_scheduler (self_t *self)
{
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    int rc = kd_msg_recv (kd_peer_socket (self->peer), &msg, NULL, &err);
    if (rc == -2) {
        kd_warn ("malformed message from scheduler code=%d reason=\"%s\"", err.code, err.reason);
        return;
    }
    if (rc != 0)
        return;
    kd_peer_heard (self->peer);
    switch (kd_msg_type (msg)) {
        case KD_MSG_WELCOME:   s_on_welcome (self, msg); break;
        case KD_MSG_COMMIT:    s_on_commit (self, msg); break;
        case KD_MSG_HEARTBEAT: break;
        case KD_MSG_STOP:
            kd_info ("stop reason=\"%s\"", kd_msg_str (msg, KD_F_REASON));
            self->stop = true;
            break;
        case KD_MSG_ERROR:
            if (kd_msg_uint (msg, KD_F_CODE) == KD_ERR_STATE
            &&  !strncmp (kd_msg_str (msg, KD_F_REASON), "not registered", 14))
                kd_peer_unknown (self->peer);
            kd_warn ("scheduler error code=%llu reason=\"%s\"",
                     (unsigned long long) kd_msg_uint (msg, KD_F_CODE), kd_msg_str (msg, KD_F_REASON));
            break;
        default:
            kd_warn ("unexpected %s from scheduler", kd_msg_type_name (kd_msg_type (msg)));
    }
    kd_msg_destroy (&msg);
}

//  PUSH: stage a gradient slice.  Idempotent per (rank, clock).
static void
s_on_push (self_t *self, kd_msg_t *msg)
{
    zframe_t *id = kd_msg_routing_id (msg);
    uint64_t rank = kd_msg_uint (msg, KD_F_RANK), clock = kd_msg_uint (msg, KD_F_CLOCK);
    size_t count = 0;
    kd_msg_data_floats (msg, &count);
    if (kd_msg_uint (msg, KD_F_LO) != self->lo || count != self->n) {
        char reason [128];
        snprintf (reason, sizeof reason, "push range lo=%llu count=%zu, shard holds lo=%llu count=%zu",
                  (unsigned long long) kd_msg_uint (msg, KD_F_LO), count,
                  (unsigned long long) self->lo, self->n);
        s_error (self, id, KD_ERR_MALFORMED, reason);
        return;
    }
    if (rank >= S_MAX_RANKS) {
        s_error (self, id, KD_ERR_MALFORMED, "rank out of range");
        return;
    }
    char key [48];
    s_stage_key (key, sizeof key, rank, clock);
    //  A push for a staged (rank, clock) replaces it: a retry carries the
    //  same values, and a worker that rejoined under its old rank recomputed
    //  that clock on a newer model.  A worker sends ARRIVE only after every
    //  shard acknowledged, so no retry can come after its commit.
    if (!zhashx_lookup (self->staged, key) && zhashx_size (self->staged) >= S_MAX_STAGED) {
        s_error (self, id, KD_ERR_UNAVAILABLE, "too many staged gradients");
        return;
    }
    zframe_t *data = kd_msg_take_data (msg);
    zhashx_update (self->staged, key, data);
    self->pushes++;
    kd_msg_t *ok = kd_msg_new (KD_MSG_PUSH_OK);
    kd_msg_set_routing_id (ok, id);
    kd_msg_set_uint (ok, KD_F_CLOCK, clock);
    kd_msg_send (&ok, self->router);
}

//  PULL: answer now, or park until the version exists.
static void
s_on_pull (self_t *self, kd_msg_t *msg)
{
    uint64_t want = kd_msg_uint (msg, KD_F_VERSION);
    //  A version far beyond ours can only be a confused or hostile peer;
    //  parking it would hold a slot for ever.
    if (want > self->version + S_MAX_LOOKAHEAD) {
        s_error (self, kd_msg_routing_id (msg), KD_ERR_STATE, "pull asks for a version too far ahead");
        return;
    }
    if (want <= self->version) {
        s_send_params (self, kd_msg_routing_id (msg));
        return;
    }
    if (zlistx_size (self->parked) >= S_MAX_PARKED) {
        s_error (self, kd_msg_routing_id (msg), KD_ERR_UNAVAILABLE, "too many parked pulls");
        return;
    }
    //  One parked pull per peer: a retry replaces the one before.
    for (s_parked_t *q = (s_parked_t *) zlistx_first (self->parked); q;
         q = (s_parked_t *) zlistx_next (self->parked))
        if (zframe_eq (q->routing_id, kd_msg_routing_id (msg))) {
            q->version = want;
            return;
        }
    s_parked_t *p = (s_parked_t *) zmalloc (sizeof *p);
    p->routing_id = zframe_dup (kd_msg_routing_id (msg));
    p->version = want;
    zlistx_add_end (self->parked, p);
}

//  A request on the ROUTER.
static void
s_on_request (self_t *self)
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
    kd_msg_type_t type = kd_msg_type (msg);
    if (!self->registered && type != KD_MSG_HEARTBEAT && type != KD_MSG_ERROR)
        s_error (self, kd_msg_routing_id (msg), KD_ERR_UNAVAILABLE, "shard not registered yet");
    else
    if (type == KD_MSG_PUSH)
        s_on_push (self, msg);
    else
    if (type == KD_MSG_PULL)
        s_on_pull (self, msg);
    else
    if (type == KD_MSG_HEARTBEAT) {
        kd_msg_t *hb = kd_msg_new (KD_MSG_HEARTBEAT);
        kd_msg_set_routing_id (hb, kd_msg_routing_id (msg));
        kd_msg_send (&hb, self->router);
    }
    else
    if (type == KD_MSG_ERROR)
        //  Never answer an ERROR with an ERROR: two peers could ping-pong.
        kd_warn ("peer error code=%llu reason=\"%s\"",
                 (unsigned long long) kd_msg_uint (msg, KD_F_CODE), kd_msg_str (msg, KD_F_REASON));
    else {
        char reason [96];
        snprintf (reason, sizeof reason, "command invalid: %s", kd_msg_type_name (type));
        s_error (self, kd_msg_routing_id (msg), KD_ERR_UNKNOWN_TYPE, reason);
    }
    kd_msg_destroy (&msg);
}

//  Parked-pull destructor.
static void
s_parked_destroy (void **item)
{
    s_parked_t *p = (s_parked_t *) *item;
    if (p) {
        zframe_destroy (&p->routing_id);
        free (p);
        *item = NULL;
    }
}

int
kd_shard_run (kd_config_t *config)
{
    int rc = 1;
    self_t self_s = { .config = config }, *self = &self_s;
    int64_t max_msg = kd_config_int (config, "max-msg-bytes");
    openblas_set_num_threads ((int) kd_config_int (config, "threads"));

    self->router = zsock_new (ZMQ_ROUTER);
    kd_socket_harden (self->router, max_msg);
    if (zsock_bind (self->router, "%s", kd_config_str (config, "bind")) < 0) {
        kd_error ("cannot bind endpoint=%s: %s", kd_config_str (config, "bind"), zmq_strerror (zmq_errno ()));
        goto cleanup;
    }
    if (kd_advertise_endpoint (self->router, kd_config_str (config, "advertise"),
                               self->endpoint, sizeof self->endpoint)) {
        kd_error ("cannot derive an endpoint to advertise");
        goto cleanup;
    }
    self->peer = kd_peer_new (kd_config_str (config, "scheduler"), "shard",
                              kd_config_str (config, "name"), max_msg,
                              (int) kd_config_int (config, "heartbeat-ms"),
                              (int) kd_config_int (config, "liveness"));
    if (!self->peer) {
        kd_error ("cannot connect to scheduler endpoint=%s", kd_config_str (config, "scheduler"));
        goto cleanup;
    }
    self->staged = zhashx_new ();
    zhashx_set_destructor (self->staged, s_frame_destroy);
    self->parked = zlistx_new ();
    zlistx_set_destructor (self->parked, s_parked_destroy);
    kd_peer_set_endpoint (self->peer, self->endpoint);
    kd_info ("listening endpoint=%s advertise=%s", kd_config_str (config, "bind"), self->endpoint);
    kd_peer_hello (self->peer);

    zpoller_t *poller = zpoller_new (self->router, kd_peer_socket (self->peer), NULL);
    while (!self->stop && !zsys_interrupted) {
        void *which = zpoller_wait (poller, kd_peer_timeout (self->peer) + 1);
        if (which == self->router)
            s_on_request (self);
        else
        if (which == kd_peer_socket (self->peer))
            s_on_scheduler (self);
        else
        if (zpoller_terminated (poller))
            break;
        kd_peer_set_version (self->peer, self->version);
        kd_peer_tick (self->peer);
    }
    zpoller_destroy (&poller);
    kd_info ("exit version=%llu pushes=%llu commits=%llu pulls=%llu errors=%llu",
             (unsigned long long) self->version, (unsigned long long) self->pushes,
             (unsigned long long) self->commits, (unsigned long long) self->pulls,
             (unsigned long long) self->errors);
    rc = 0;
cleanup:
    zhashx_destroy (&self->staged);
    zlistx_destroy (&self->parked);
    kd_peer_destroy (&self->peer);
    zsock_destroy (&self->router);
    free (self->params);
    free (self->velocity);
    return rc;
}
