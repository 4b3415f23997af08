/*  kd_monitor: the monitor's service loop.

    Workers send TELEMETRY to our ROUTER after every iteration, and the
    scheduler sends STATUS about twice a second.  We keep per-worker and
    global figures and publish them on the PUB socket as [topic][MessagePack
    map] messages ("stats", "worker", "groups", "event"; see
    docs/protocol.md).  We also evaluate test accuracy on the 10,000 test
    images: every eval-interval seconds, and whenever the scheduler asks with
    EVAL, we pull the whole model from the shards (the pull parks at the
    shards until the version exists, so no polling) and answer EVAL_OK.
    Evaluation happens here, off the workers' critical path.

    Evaluators (kudus.torch.Evaluator, kudus-worker --evaluator) send
    REPORT: a metric of a version they pulled.  Each evaluation, ours or
    reported, goes out as an "eval" stream message.  A model we cannot
    evaluate (external) takes its test figures from the reports instead,
    through the same paths as our own: "stats", /metrics and EVAL_OK, so
    that --target-accuracy and the summary's time_to_accuracy work.
*/
#include "kd_monitor.h"
#include "kd_shardset.h"
#include "kd_keyed_eval.h"
#include "kd_stream.h"
#include "kd_metrics.h"
#include "kd_guard.h"
#include "kd_server.h"
#include "kd_service.h"
#include <cblas.h>
#include <math.h>

#define S_MAX_WORKERS   1024    //  worker ranks we track
#define S_MODEL_EVERY_MS 10000  //  the "model" event again, for late subscribers
#define S_MAX_SHARDS    64      //  shards in the address book
#define S_EVAL_BATCH    1000    //  rows per evaluation batch
#define S_WORKER_AGE_MS 10000   //  stop listing a worker silent this long
#define S_STALE_BINS    256     //  staleness histogram bins
#define S_LOSS_ALPHA    0.05    //  EWMA weight of one reported loss
#define S_SNAPSHOT_BYTES (1ull << 30)  //  memory for curve snapshots at most
#define S_STATS_RETRY_MS 5000  //  ask an unanswering shard for STATS again after this
#define S_METRIC_MAX    32      //  bytes of a reported metric's name

typedef struct {
    bool seen;                  //  has reported
    uint64_t clock;             //  last clock
    uint64_t samples;           //  total samples
    uint64_t window_samples;    //  samples since the last publish
    double samples_per_s;       //  rate over the last publish window
    double loss;                //  last loss
    double compute_ms, push_ms, wait_ms, pull_ms;  //  last timings
    uint64_t staleness;         //  last staleness
    uint64_t dropped;           //  drops so far
    uint64_t refused;           //  its gradients refused so far
    uint64_t group;             //  ALSP group
    uint64_t last_ms;           //  ms of its last telemetry
    double sum_compute, sum_push, sum_wait, sum_pull;  //  over the window
    uint64_t n_window;          //  iterations in the window
} s_worker_t;

typedef struct {
    uint64_t version;           //  model version of the snapshot
    uint64_t ts_ms;             //  wall ms of the commit that made it
    uint64_t samples;           //  samples applied into that version
    float *params;              //  the model
} s_snapshot_t;

typedef enum { S_ROUND_EVAL, S_ROUND_SNAPSHOT } s_round_t;

typedef struct {
    bool done;                  //  answered the current eval pull
    uint64_t version;           //  version it returned
    uint64_t ts_ms;             //  commit time of that version
    uint64_t samples;           //  samples applied into that version
    bool have_stats;            //  answered a STATS
    uint64_t stats_version;     //  its version then
    uint64_t counters [KD_SC_COUNT];    //  its counters (kd_shard_counter_t)
    size_t n_counters;          //  entries it sent that we know
    uint64_t stats_ms;          //  monotonic ms of the answer
    uint64_t stats_asked_ms;    //  when we last asked (0: answered since)
} s_shard_t;

typedef struct {
    kd_config_t *config;        //  settings
    uint64_t request_timeout_ms;    //  request-timeout-ms, read once: every loop
    int64_t snapshot_ms;        //  snapshot-ms, read once
    uint64_t eval_interval_ms;  //  eval-interval in ms, read once
    zsock_t *router;            //  telemetry intake
    kd_guard_t *guard;          //  its connection and malformed-input limits
    zsock_t *pub;               //  the live stream
    kd_peer_t *peer;            //  link to the scheduler
    kd_dataset_t *test;         //  test set
    kd_model_t *model;          //  evaluation code
    bool external;              //  an external model: nothing to evaluate
    kd_keyed_eval_t *keyed;     //  sparse-lr's held-out rows (--test-file), or NULL
    bool keyed_ready;           //  START named a keyed model they fit
    uint32_t hidden;            //  mlp hidden units (to name its tensors)
    kd_metrics_t *metrics;      //  GET /metrics, or NULL when off
    double last_rate;           //  samples/s over the last publish window
    char model_text [2048];     //  the "model" event's detail, once started
    uint64_t model_published;   //  ms when it last went out
    float *params;              //  assembled model
    size_t n_params;            //  its length
    char model_name [16];       //  "softmax" / "mlp"
    char consistency [16];      //  from STATUS
    char mode [16];             //  from STATUS: the model in effect (auto's)
    kd_shardset_t *book;        //  the shards' address book (START)
    s_shard_t shards [S_MAX_SHARDS];  //  per-shard evaluation state
    size_t n_shards;            //  entries in use
    bool started;               //  START received
    bool stop;                  //  STOP received
    uint64_t t0_ms;             //  wall ms at training start
    s_worker_t workers [S_MAX_WORKERS];  //  per-rank figures
    uint64_t version;           //  latest version from STATUS
    uint64_t phases, dropped, regroups, active, sched_samples;  //  from STATUS
    uint64_t relays [5];        //  from STATUS: aggregators, RELAYs in and
                                //  their messages, RELAYs out and theirs
    double epoch;               //  from STATUS
    uint64_t *groups;           //  last group per rank (UINT64_MAX none)
    uint64_t total_samples;     //  telemetry samples
    uint64_t window_samples;    //  since the last publish
    uint64_t last_publish;      //  ms
    double train_loss;          //  EWMA over telemetry
    bool have_loss;             //  train_loss set
    double wait_total, busy_total;  //  sums of worker time, ms
    uint64_t stale_hist [S_STALE_BINS + 1];  //  reported staleness
    bool evaluating;            //  pulls outstanding
    uint64_t eval_want;         //  minimum version of the current pull
    uint64_t eval_requested;    //  highest version the scheduler asked for
    kd_server_t *server;        //  the request loop (intake)
    int publish_ms;             //  stats are published this often
    uint64_t next_publish;      //  ms
    bool eval_answer;           //  an EVAL is waiting for an answer
    uint64_t evaluated;         //  last version evaluated
    bool have_accuracy;         //  accuracy set
    double accuracy, test_loss; //  last evaluation
    double auc;                 //  and its AUC (a keyed model's metric), or NAN
    uint64_t next_eval;         //  ms
    uint64_t eval_started;      //  ms the current pull began
    s_round_t round;            //  what the outstanding pull is for
    s_snapshot_t *snapshots;    //  the curve's models
    size_t n_snapshots, max_snapshots;  //  used, allocated
    uint64_t next_snapshot;     //  ms
} self_t;

//  --------------------------------------------------------------------------
//  Stream publishing: [topic][MessagePack map]

//  Send one stream message (kd_stream declares every topic's fields).
static void
s_publish (self_t *self, kd_stream_t **msg_p)
{
    kd_stream_send (msg_p, self->pub);
}

//  Staleness percentile of reported values.
static double
s_stale_pct (self_t *self, double q)
{
    return kd_hist_quantile (self->stale_hist, S_STALE_BINS + 1, q);
}

//  Publish "stats" and one "worker" message per live worker.
static void s_publish_event (self_t *self, const char *kind, const char *detail);

//  One metric family's HELP and TYPE lines.
static void
s_family (FILE *f, const char *name, const char *type, const char *help)
{
    fprintf (f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

//  Per shard, labelled by its rank: what its last STATS_OK said.
static void
s_render_shard_metrics (self_t *self, FILE *f)
{
    static const struct {
        kd_shard_counter_t counter;
        const char *name, *type, *help;
    } rows [] = {
        { KD_SC_PUSHES, "kudus_shard_pushes_total", "counter", "Gradient slices the shard received." },
        { KD_SC_PULLS, "kudus_shard_pulls_total", "counter", "Parameter slices the shard sent." },
        { KD_SC_COMMITS, "kudus_shard_commits_total", "counter", "Optimizer steps the shard applied." },
        { KD_SC_BYTES_IN, "kudus_shard_received_bytes_total", "counter", "Bytes of gradient data received." },
        { KD_SC_BYTES_OUT, "kudus_shard_sent_bytes_total", "counter", "Bytes of parameter data sent." },
        { KD_SC_STAGED, "kudus_shard_staged_gradients", "gauge", "Gradients staged, waiting for a commit." },
        { KD_SC_CHECKPOINTS, "kudus_shard_checkpoints_total", "counter", "Checkpoints the shard wrote." },
        { KD_SC_CHECKPOINT_AGE_MS, "kudus_shard_checkpoint_age_seconds", "gauge",
          "Time since the shard's newest checkpoint (absent when it has none)." },
        { KD_SC_REFUSED, "kudus_shard_refused_gradients_total", "counter",
          "Gradients refused: NaN or Inf, or over max-grad-norm with grad-norm-action refuse." },
        { KD_SC_CLIPPED, "kudus_shard_clipped_gradients_total", "counter",
          "Gradients scaled down to max-grad-norm." },
        { KD_SC_LIMITED, "kudus_shard_limited_requests_total", "counter",
          "Requests refused by a per-peer limit (staged gradients, parked pulls)." },
        { KD_SC_DISCONNECTS, "kudus_shard_disconnects_total", "counter",
          "Peers the shard disconnected: malformed input, or over max-connections." },
        { KD_SC_CONNECTIONS, "kudus_shard_connections", "gauge", "Connections open at the shard." },
        { KD_SC_PARKED, "kudus_shard_parked_pulls", "gauge", "Pulls parked, waiting for a version." },
        { KD_SC_SHM_PEERS, "kudus_shard_shm_workers", "gauge",
          "Workers that move their values through shared memory with the shard." },
        { KD_SC_SHM_BYTES_IN, "kudus_shard_shm_received_bytes_total", "counter",
          "Bytes of gradient data read from shared memory (part of received_bytes)." },
        { KD_SC_SHM_BYTES_OUT, "kudus_shard_shm_sent_bytes_total", "counter",
          "Bytes of parameter data served from shared memory (part of sent_bytes)." },
    };
    s_family (f, "kudus_shard_version", "gauge", "Model version the shard holds.");
    for (size_t i = 0; i < self->n_shards; i++)
        if (self->shards [i].have_stats)
            fprintf (f, "kudus_shard_version{shard=\"%zu\"} %llu\n", i,
                     (unsigned long long) self->shards [i].stats_version);
    for (size_t r = 0; r < sizeof rows / sizeof rows [0]; r++) {
        s_family (f, rows [r].name, rows [r].type, rows [r].help);
        for (size_t i = 0; i < self->n_shards; i++) {
            s_shard_t *sh = &self->shards [i];
            if (!sh->have_stats || (size_t) rows [r].counter >= sh->n_counters)
                continue;
            uint64_t v = sh->counters [rows [r].counter];
            if (rows [r].counter == KD_SC_CHECKPOINT_AGE_MS) {
                if (v != UINT64_MAX)
                    fprintf (f, "%s{shard=\"%zu\"} %.3f\n", rows [r].name, i, (double) v / 1000.0);
            }
            else
                fprintf (f, "%s{shard=\"%zu\"} %llu\n", rows [r].name, i, (unsigned long long) v);
        }
    }
}

//  The Prometheus exposition of what this monitor knows, in base units
//  (seconds, samples), counters ending in _total.
static void
s_render_metrics (self_t *self, double window_s)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream (&text, &len);
    assert (f);
    double busy = self->wait_total + self->busy_total;
    s_family (f, "kudus_build_info", "gauge", "Kudus version, model and consistency of this run.");
    fprintf (f, "kudus_build_info{version=\"%s\",model=\"%s\",consistency=\"%s\"} 1\n",
             KUDUS_VERSION_STRING, self->model_name, self->consistency);
    s_family (f, "kudus_model_version", "gauge", "Model version: commits applied so far.");
    fprintf (f, "kudus_model_version %llu\n", (unsigned long long) self->version);
    s_family (f, "kudus_samples_total", "counter", "Training rows in the gradients workers reported.");
    fprintf (f, "kudus_samples_total %llu\n", (unsigned long long) self->total_samples);
    s_family (f, "kudus_samples_per_second", "gauge", "Training rows per second over the last publish window.");
    fprintf (f, "kudus_samples_per_second %.6g\n", window_s > 0 ? self->last_rate : 0);
    s_family (f, "kudus_epoch", "gauge", "Passes over the training set.");
    fprintf (f, "kudus_epoch %.6g\n", self->epoch);
    s_family (f, "kudus_train_loss", "gauge", "Mean training loss over recent iterations.");
    fprintf (f, "kudus_train_loss %.6g\n", self->have_loss ? self->train_loss : 0);
    if (self->have_accuracy) {
        s_family (f, "kudus_test_accuracy", "gauge", "Test accuracy of the last evaluated version.");
        fprintf (f, "kudus_test_accuracy %.6g\n", self->accuracy);
    }
    if (self->have_accuracy && isfinite (self->auc)) {
        s_family (f, "kudus_test_auc", "gauge", "Held-out AUC of the last evaluated version (sparse-lr).");
        fprintf (f, "kudus_test_auc %.6g\n", self->auc);
    }
    s_family (f, "kudus_workers", "gauge", "Workers in the barrier.");
    fprintf (f, "kudus_workers %llu\n", (unsigned long long) self->active);
    s_family (f, "kudus_wait_fraction", "gauge", "Share of worker time spent waiting at the barrier.");
    fprintf (f, "kudus_wait_fraction %.6g\n", busy > 0 ? self->wait_total / busy : 0);
    s_family (f, "kudus_staleness", "gauge", "Staleness of applied gradients, in versions, by quantile.");
    fprintf (f, "kudus_staleness{quantile=\"0.5\"} %.6g\nkudus_staleness{quantile=\"0.99\"} %.6g\n",
             s_stale_pct (self, 0.5), s_stale_pct (self, 0.99));
    s_family (f, "kudus_dropped_gradients_total", "counter", "Gradients dropped as too stale.");
    fprintf (f, "kudus_dropped_gradients_total %llu\n", (unsigned long long) self->dropped);
    s_family (f, "kudus_regroups_total", "counter", "ALSP regroupings.");
    fprintf (f, "kudus_regroups_total %llu\n", (unsigned long long) self->regroups);
    s_family (f, "kudus_aggregators", "gauge", "Barrier aggregators the scheduler has heard from or sent to.");
    fprintf (f, "kudus_aggregators %llu\n", (unsigned long long) self->relays [0]);
    s_family (f, "kudus_scheduler_relays_total", "counter",
              "RELAYs between the scheduler and barrier aggregators, by direction.");
    fprintf (f, "kudus_scheduler_relays_total{direction=\"in\"} %llu\n"
             "kudus_scheduler_relays_total{direction=\"out\"} %llu\n",
             (unsigned long long) self->relays [1], (unsigned long long) self->relays [3]);
    s_family (f, "kudus_scheduler_relayed_messages_total", "counter",
              "Workers' messages carried in those RELAYs, by direction.");
    fprintf (f, "kudus_scheduler_relayed_messages_total{direction=\"in\"} %llu\n"
             "kudus_scheduler_relayed_messages_total{direction=\"out\"} %llu\n",
             (unsigned long long) self->relays [2], (unsigned long long) self->relays [4]);
    static const char *phase [4] = { "compute", "push", "wait", "pull" };
    for (int p = 0; p < 4; p++) {
        char name [64], help [128];
        snprintf (name, sizeof name, "kudus_worker_%s_seconds", phase [p]);
        snprintf (help, sizeof help, "Mean %s time per iteration of a worker.", phase [p]);
        s_family (f, name, "gauge", help);
        for (size_t r = 0; r < S_MAX_WORKERS; r++) {
            s_worker_t *w = &self->workers [r];
            if (!w->seen)
                continue;
            double ms = p == 0 ? w->compute_ms : p == 1 ? w->push_ms : p == 2 ? w->wait_ms : w->pull_ms;
            fprintf (f, "%s{rank=\"%zu\",group=\"%llu\"} %.6g\n", name, r,
                     (unsigned long long) w->group, ms / 1000.0);
        }
    }
    s_family (f, "kudus_worker_samples_total", "counter", "Training rows a worker computed.");
    for (size_t r = 0; r < S_MAX_WORKERS; r++)
        if (self->workers [r].seen)
            fprintf (f, "kudus_worker_samples_total{rank=\"%zu\",group=\"%llu\"} %llu\n", r,
                     (unsigned long long) self->workers [r].group,
                     (unsigned long long) self->workers [r].samples);
    s_render_shard_metrics (self, f);
    fclose (f);
    kd_metrics_update (self->metrics, text, len);
    free (text);
}

//  A follower subscribed to the stream (or left): a new one is sent the
//  model event with the next stats, not up to S_MODEL_EVERY_MS later (or
//  never, in a shorter run): what it follows must not depend on whether
//  it subscribed before or after the event first went out.
static void
s_on_subscribe (void *state, zsock_t *sock)
{
    self_t *self = (self_t *) state;
    (void) sock;
    zframe_t *frame = zframe_recv (self->pub);
    if (frame && zframe_size (frame) > 0 && zframe_data (frame) [0] == 1)
        self->model_published = 0;
    zframe_destroy (&frame);
}

static void
s_publish_stats (self_t *self)
{
    uint64_t now = kd_now_ms ();
    double window_s = self->last_publish ? (double) (now - self->last_publish) / 1000.0 : 0;
    self->last_publish = now;
    //  A subscriber that joined late learns the model's tensors too.
    if (*self->model_text && now - self->model_published >= S_MODEL_EVERY_MS) {
        s_publish_event (self, "model", self->model_text);
        self->model_published = now;
    }
    uint64_t wall = kd_wall_ms ();
    double busy = self->wait_total + self->busy_total;
    kd_stream_t *m = kd_stream_new (KD_ST_STATS);
    kd_stream_set_uint (m, KD_S_T_MS, wall);
    kd_stream_set_float (m, KD_S_ELAPSED_S, self->t0_ms && wall > self->t0_ms ? (double) (wall - self->t0_ms) / 1000.0 : 0);
    kd_stream_set_uint (m, KD_S_VERSION, self->version);
    kd_stream_set_float (m, KD_S_EPOCH, self->epoch);
    kd_stream_set_uint (m, KD_S_SAMPLES, self->total_samples);
    self->last_rate = window_s > 0 ? (double) self->window_samples / window_s : 0;
    kd_stream_set_float (m, KD_S_SAMPLES_PER_S, self->last_rate);
    kd_stream_set_float (m, KD_S_TRAIN_LOSS, self->have_loss ? self->train_loss : 0);
    kd_stream_set_uint (m, KD_S_WORKERS, self->active);
    kd_stream_set_str (m, KD_S_CONSISTENCY, self->consistency);
    //  From a scheduler that does not say, the configured model.
    kd_stream_set_str (m, KD_S_MODE, *self->mode ? self->mode : self->consistency);
    kd_stream_set_str (m, KD_S_MODEL, self->model_name);
    kd_stream_set_uint (m, KD_S_PHASES, self->phases);
    kd_stream_set_uint (m, KD_S_DROPPED, self->dropped);
    kd_stream_set_uint (m, KD_S_REGROUPS, self->regroups);
    kd_stream_set_float (m, KD_S_WAIT_FRACTION, busy > 0 ? self->wait_total / busy : 0);
    kd_stream_set_float (m, KD_S_STALENESS_P50, s_stale_pct (self, 0.5));
    kd_stream_set_float (m, KD_S_STALENESS_P99, s_stale_pct (self, 0.99));
    kd_stream_set_uint (m, KD_S_SHARDS, self->n_shards);
    if (self->have_accuracy) {
        kd_stream_set_float (m, KD_S_TEST_ACCURACY, self->accuracy);
        kd_stream_set_uint (m, KD_S_TEST_VERSION, self->evaluated);
        if (isfinite (self->auc))
            kd_stream_set_float (m, KD_S_TEST_AUC, self->auc);
    }
    s_publish (self, &m);
    self->window_samples = 0;

    for (size_t r = 0; r < S_MAX_WORKERS; r++) {
        s_worker_t *w = &self->workers [r];
        if (!w->seen || now - w->last_ms > S_WORKER_AGE_MS)
            continue;
        w->samples_per_s = window_s > 0 ? (double) w->window_samples / window_s : 0;
        w->window_samples = 0;
        //  Means over the window; the last values if it had no iteration.
        if (w->n_window > 0) {
            w->compute_ms = w->sum_compute / (double) w->n_window;
            w->push_ms = w->sum_push / (double) w->n_window;
            w->wait_ms = w->sum_wait / (double) w->n_window;
            w->pull_ms = w->sum_pull / (double) w->n_window;
        }
        w->sum_compute = w->sum_push = w->sum_wait = w->sum_pull = 0;
        w->n_window = 0;
        m = kd_stream_new (KD_ST_WORKER);
        kd_stream_set_uint (m, KD_S_RANK, r);
        kd_stream_set_uint (m, KD_S_CLOCK, w->clock);
        kd_stream_set_uint (m, KD_S_SAMPLES, w->samples);
        kd_stream_set_float (m, KD_S_SAMPLES_PER_S, w->samples_per_s);
        kd_stream_set_float (m, KD_S_LOSS, w->loss);
        kd_stream_set_float (m, KD_S_COMPUTE_MS, w->compute_ms);
        kd_stream_set_float (m, KD_S_PUSH_MS, w->push_ms);
        kd_stream_set_float (m, KD_S_WAIT_MS, w->wait_ms);
        kd_stream_set_float (m, KD_S_PULL_MS, w->pull_ms);
        kd_stream_set_float (m, KD_S_ITER_MS, w->compute_ms + w->push_ms + w->pull_ms);
        kd_stream_set_uint (m, KD_S_STALENESS, w->staleness);
        kd_stream_set_uint (m, KD_S_DROPPED, w->dropped);
        kd_stream_set_uint (m, KD_S_REFUSED, w->refused);
        kd_stream_set_uint (m, KD_S_GROUP, w->group);
        kd_stream_set_uint (m, KD_S_AGE_MS, now - w->last_ms);
        s_publish (self, &m);
    }
    //  Shards: publish what they last said, and ask again.
    for (size_t i = 0; i < self->n_shards; i++) {
        s_shard_t *sh = &self->shards [i];
        if (sh->have_stats) {
            m = kd_stream_new (KD_ST_SHARD);
            kd_stream_set_uint (m, KD_S_RANK, i);
            kd_stream_set_uint (m, KD_S_VERSION, sh->stats_version);
            static const kd_stream_field_t fields [KD_SC_CHECKPOINT_AGE_MS] = {
                KD_S_PUSHES, KD_S_PULLS, KD_S_COMMITS, KD_S_BYTES_IN, KD_S_BYTES_OUT,
                KD_S_STAGED, KD_S_CHECKPOINTS
            };
            for (size_t c = 0; c < KD_SC_CHECKPOINT_AGE_MS && c < sh->n_counters; c++)
                kd_stream_set_uint (m, fields [c], sh->counters [c]);
            if (sh->n_counters > KD_SC_CHECKPOINT_AGE_MS && sh->counters [KD_SC_CHECKPOINT_AGE_MS] != UINT64_MAX)
                kd_stream_set_float (m, KD_S_CHECKPOINT_AGE_S,
                                     (double) sh->counters [KD_SC_CHECKPOINT_AGE_MS] / 1000.0);
            //  The guards' counters, from shards that report them.
            static const kd_stream_field_t guards [] = {
                KD_S_REFUSED, KD_S_CLIPPED, KD_S_LIMITED, KD_S_DISCONNECTS, KD_S_CONNECTIONS,
                KD_S_PARKED
            };
            for (size_t c = KD_SC_REFUSED; c <= KD_SC_PARKED && c < sh->n_counters; c++)
                kd_stream_set_uint (m, guards [c - KD_SC_REFUSED], sh->counters [c]);
            kd_stream_set_uint (m, KD_S_AGE_MS, now - sh->stats_ms);
            s_publish (self, &m);
        }
        //  One question at a time: a shard that is down must not find a
        //  queue of them when it comes back.
        if (!sh->stats_asked_ms || now - sh->stats_asked_ms > S_STATS_RETRY_MS) {
            kd_msg_t *ask = kd_msg_new (KD_MSG_STATS);
            kd_msg_send (&ask, kd_shardset_socket (self->book, i));
            sh->stats_asked_ms = now;
        }
    }
    if (self->metrics)
        s_render_metrics (self, window_s);
}

//  Publish an "event".
static void
s_publish_event (self_t *self, const char *kind, const char *detail)
{
    kd_stream_t *m = kd_stream_new (KD_ST_EVENT);
    kd_stream_set_str (m, KD_S_KIND, kind);
    kd_stream_set_str (m, KD_S_DETAIL, detail);
    kd_stream_set_uint (m, KD_S_T_MS, kd_wall_ms ());
    s_publish (self, &m);
}

//  Publish one evaluation as an "eval" message: who scored which version.
static void
s_publish_eval (self_t *self, const char *name, uint64_t version, const char *metric,
                double value, double loss)
{
    kd_stream_t *m = kd_stream_new (KD_ST_EVAL);
    kd_stream_set_uint (m, KD_S_T_MS, kd_wall_ms ());
    kd_stream_set_uint (m, KD_S_VERSION, version);
    kd_stream_set_str (m, KD_S_NAME, name);
    kd_stream_set_str (m, KD_S_METRIC, metric);
    kd_stream_set_float (m, KD_S_VALUE, value);
    if (isfinite (loss))
        kd_stream_set_float (m, KD_S_LOSS, loss);
    s_publish (self, &m);
}

//  Publish the model by name, once, as a "model" event: each tensor's
//  shape and the shards that hold it, e.g.
//  "mlp 101770 params: W1 784x128 [0-1], b1 128 [1], W2 128x10 [1], b2 10 [1]".
static void
s_publish_model (self_t *self, kd_msg_t *start)
{
    kd_tensor_t tensors [KD_MODEL_MAX_TENSORS];
    size_t n = 0, n_params = 0;
    if (self->external) {
        size_t nn = 0, ns = 0;
        const char **names = kd_msg_strs (start, KD_F_TENSORS, &nn);
        const uint64_t *shapes = kd_msg_uints (start, KD_F_SHAPES, &ns);
        char err [256];
        if (kd_model_layout_parse (names, nn, shapes, ns, tensors, &n_params, err, sizeof err) == 0)
            n = nn;
    }
    else {
        int kind = kd_model_kind_parse (self->model_name);
        if (kind >= 0)
            n = kd_model_tensors ((kd_model_kind_t) kind, self->hidden, tensors, KD_MODEL_MAX_TENSORS);
    }
    char text [2048];
    size_t len = (size_t) snprintf (text, sizeof text, "%s %zu params:", self->model_name, self->n_params);
    for (size_t i = 0; i < n && len < sizeof text; i++) {
        const kd_tensor_t *t = &tensors [i];
        size_t first = SIZE_MAX, last = 0;
        for (size_t s = 0; s < self->n_shards; s++)
            if (kd_shardset_lo (self->book, s) < t->offset + t->count && kd_shardset_hi (self->book, s) > t->offset) {
                first = first == SIZE_MAX ? s : first;
                last = s;
            }
        char shape [48], where [32];
        if (t->cols > 1)
            snprintf (shape, sizeof shape, "%zux%zu", t->rows, t->cols);
        else
            snprintf (shape, sizeof shape, "%zu", t->rows);
        if (first == last)
            snprintf (where, sizeof where, "%zu", first);
        else
            snprintf (where, sizeof where, "%zu-%zu", first, last);
        len += (size_t) snprintf (text + len, sizeof text - len, "%s %s %s [%s]", i ? "," : "",
                                  t->name, shape, first == SIZE_MAX ? "?" : where);
    }
    snprintf (self->model_text, sizeof self->model_text, "%s", text);
    self->model_published = kd_now_ms ();
    s_publish_event (self, "model", text);
}

//  Publish an EVENT from the scheduler: kind, detail and t_ms, plus the
//  member it concerns (name, role, rank) and the model version when given,
//  so that a consumer can tell which worker died or came back.
static void
s_publish_scheduler_event (self_t *self, kd_msg_t *msg)
{
    kd_stream_t *m = kd_stream_new (KD_ST_EVENT);
    kd_stream_set_str (m, KD_S_KIND, kd_msg_str (msg, KD_F_KIND));
    kd_stream_set_str (m, KD_S_DETAIL, kd_msg_str (msg, KD_F_DETAIL));
    kd_stream_set_uint (m, KD_S_T_MS, kd_wall_ms ());
    if (kd_msg_has (msg, KD_F_NAME) && kd_msg_has (msg, KD_F_RANK)) {
        kd_stream_set_str (m, KD_S_NAME, kd_msg_str (msg, KD_F_NAME));
        kd_stream_set_str (m, KD_S_ROLE, kd_msg_str (msg, KD_F_ROLE));
        kd_stream_set_uint (m, KD_S_RANK, kd_msg_uint (msg, KD_F_RANK));
    }
    if (kd_msg_has (msg, KD_F_VERSION))
        kd_stream_set_uint (m, KD_S_VERSION, kd_msg_uint (msg, KD_F_VERSION));
    s_publish (self, &m);
}

//  Publish "groups" (the ALSP assignment).
static void
s_publish_groups (self_t *self, const uint64_t *ranks, const uint64_t *groups, size_t n)
{
    uint32_t count = 0;
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        if (ranks [i] >= S_MAX_WORKERS || groups [i] >= S_MAX_WORKERS)
            continue;       //  the caller checked; never trust a bound twice removed
        if (groups [i] + 1 > count)
            count = (uint32_t) (groups [i] + 1);
        if (ranks [i] + 1 > len)
            len = ranks [i] + 1;
    }
    uint64_t by_rank [S_MAX_WORKERS];
    for (size_t r = 0; r < len; r++) {
        by_rank [r] = UINT32_MAX;
        for (size_t i = 0; i < n; i++)
            if (ranks [i] == r)
                by_rank [r] = groups [i];
    }
    kd_stream_t *m = kd_stream_new (KD_ST_GROUPS);
    kd_stream_set_uint (m, KD_S_VERSION, self->version);
    kd_stream_set_uint (m, KD_S_COUNT, count);
    kd_stream_set_uint (m, KD_S_REGROUPS, self->regroups);
    kd_stream_set_uints (m, KD_S_GROUPS, by_rank, len);
    s_publish (self, &m);
}

//  --------------------------------------------------------------------------
//  Evaluation

//  The values an evaluation pulls: the dense model, or a keyed model's
//  values at the held-out rows' keys.  Their count, and where they are.
static size_t
s_eval_count (self_t *self)
{
    return self->keyed_ready ? kd_keyed_eval_keys (self->keyed) : self->n_params;
}

static float *
s_eval_values (self_t *self)
{
    return self->keyed_ready ? kd_keyed_eval_values (self->keyed) : self->params;
}

//  Score values: test accuracy and loss; for a keyed model also the AUC,
//  which is then its metric.  Returns the metric.
static double
s_evaluate (self_t *self, const float *values, double *accuracy, double *loss, double *auc)
{
    *auc = NAN;
    if (self->keyed_ready) {
        if (kd_keyed_eval_score (self->keyed, values, auc, loss, accuracy))
            kd_error ("held-out evaluation: out of memory");
        return *auc;
    }
    kd_model_evaluate (self->model, values, kd_dataset_images (self->test),
                       kd_dataset_labels (self->test), kd_dataset_count (self->test),
                       accuracy, loss);
    return *accuracy;
}

//  Ask shard i for its part of the evaluation's values.
static void
s_eval_pull (self_t *self, size_t i)
{
    kd_msg_t *pull;
    if (self->keyed_ready)
        pull = kd_keyed_eval_request (self->keyed, i, self->eval_want);
    else {
        pull = kd_msg_new (KD_MSG_PULL);
        kd_msg_set_uint (pull, KD_F_VERSION, self->eval_want);
    }
    kd_msg_send (&pull, kd_shardset_socket (self->book, i));
}

//  Pull the model at >= want from every shard, for an evaluation or a
//  snapshot.  One round is outstanding at a time.
static void
s_eval_begin (self_t *self, uint64_t want, s_round_t round)
{
    if (!self->started || (!self->model && !self->keyed_ready) || self->evaluating)
        return;
    self->evaluating = true;
    self->round = round;
    self->eval_want = want;
    self->eval_started = kd_now_ms ();
    for (size_t i = 0; i < self->n_shards; i++) {
        self->shards [i].done = false;
        s_eval_pull (self, i);
    }
}

//  Keep a copy of the assembled model for the curve.
static void
s_snapshot_take (self_t *self, uint64_t version, uint64_t ts, uint64_t samples)
{
    self->evaluating = false;
    if (self->n_snapshots > 0 && self->snapshots [self->n_snapshots - 1].version >= version)
        return;
    //  Bound the memory the curve may take.
    size_t count = s_eval_count (self);
    if ((self->n_snapshots + 1) * count * sizeof (float) > S_SNAPSHOT_BYTES) {
        kd_warn ("snapshot memory full, curve stops at version=%llu", (unsigned long long) version);
        return;
    }
    if (self->n_snapshots == self->max_snapshots) {
        self->max_snapshots = self->max_snapshots ? self->max_snapshots * 2 : 256;
        self->snapshots = (s_snapshot_t *) realloc (self->snapshots,
                                                    self->max_snapshots * sizeof (s_snapshot_t));
        assert (self->snapshots);
    }
    s_snapshot_t *snap = &self->snapshots [self->n_snapshots++];
    snap->version = version;
    snap->ts_ms = ts;
    snap->samples = samples;
    snap->params = (float *) malloc (count * sizeof (float));
    assert (snap->params);
    memcpy (snap->params, s_eval_values (self), count * sizeof (float));
}

//  Evaluate every snapshot and write the curve: seconds since the start,
//  version, accuracy, loss (and a keyed model's AUC).  Done at the end, so
//  that it costs training nothing.
static void
s_write_curve (self_t *self)
{
    const char *path = kd_config_str (self->config, "curve-file");
    if (!*path || (!self->model && !self->keyed_ready))
        return;
    char *tmp = zsys_sprintf ("%s.tmp", path);
    FILE *f = fopen (tmp, "w");
    if (!f) {
        kd_error ("cannot write curve path=%s: %s", path, strerror (errno));
        zstr_free (&tmp);
        return;
    }
    fprintf (f, "seconds,version,accuracy,loss,samples%s\n", self->keyed_ready ? ",auc" : "");
    for (size_t i = 0; i < self->n_snapshots && !zsys_interrupted; i++) {
        s_snapshot_t *snap = &self->snapshots [i];
        double accuracy = 0, loss = 0, auc;
        s_evaluate (self, snap->params, &accuracy, &loss, &auc);
        double seconds = snap->ts_ms > self->t0_ms ? (double) (snap->ts_ms - self->t0_ms) / 1000.0 : 0;
        fprintf (f, "%.3f,%llu,%.4f,%.5f,%llu", seconds, (unsigned long long) snap->version,
                 accuracy, loss, (unsigned long long) snap->samples);
        if (self->keyed_ready)
            fprintf (f, ",%.5f", auc);
        fputc ('\n', f);
    }
    if (fclose (f) == 0 && rename (tmp, path) == 0)
        kd_info ("curve written path=%s points=%zu", path, self->n_snapshots);
    else
        kd_error ("cannot write curve path=%s: %s", path, strerror (errno));
    zstr_free (&tmp);
}

//  Tell the scheduler a test metric.  Its "accuracy" is the run's test
//  metric: a keyed model's is its AUC (a NAN, one class only, it ignores),
//  an external model's is what its evaluator reports.
static void
s_eval_ok (self_t *self, uint64_t version, double metric, double loss, uint64_t ts)
{
    kd_msg_t *ok = kd_msg_new (KD_MSG_EVAL_OK);
    kd_msg_set_uint (ok, KD_F_VERSION, version);
    kd_msg_set_float (ok, KD_F_ACCURACY, metric);
    if (isfinite (loss))
        kd_msg_set_float (ok, KD_F_LOSS, loss);
    kd_msg_set_uint (ok, KD_F_TS_MS, ts);
    kd_peer_send (self->peer, &ok);
}

//  All slices are in: evaluate, publish, tell the scheduler.
static void
s_eval_finish (self_t *self)
{
    uint64_t version = UINT64_MAX, ts = 0, samples = UINT64_MAX;
    for (size_t i = 0; i < self->n_shards; i++) {
        if (self->shards [i].version < version) {
            version = self->shards [i].version;
            ts = self->shards [i].ts_ms;
        }
        //  The slices may be a commit apart: the fewest samples any of them
        //  holds is what the whole model is sure to contain.
        if (self->shards [i].samples < samples)
            samples = self->shards [i].samples;
    }
    if (self->round == S_ROUND_SNAPSHOT) {
        s_snapshot_take (self, version, ts, samples);
        return;
    }
    double accuracy = 0, loss = 0, auc;
    double t = kd_now_msf ();
    double metric = s_evaluate (self, s_eval_values (self), &accuracy, &loss, &auc);
    kd_debug ("eval version=%llu accuracy=%.4f auc=%.4f ms=%.1f", (unsigned long long) version,
              accuracy, auc, kd_now_msf () - t);
    self->evaluating = false;
    self->evaluated = version;
    self->accuracy = accuracy;
    self->test_loss = loss;
    self->auc = auc;
    self->have_accuracy = true;
    s_publish_eval (self, "monitor", version, self->keyed_ready ? "auc" : "accuracy", metric, loss);
    s_eval_ok (self, version, metric, loss, ts);
    if (self->eval_answer && version >= self->eval_requested)
        self->eval_answer = false;
}

//  A reply from a shard to an evaluation pull.
static void
s_on_shard (void *state, zsock_t *sock)
{
    self_t *self = (self_t *) state;
    size_t i = 0;
    while (i < self->n_shards && kd_shardset_socket (self->book, i) != sock)
        i++;
    if (i == self->n_shards)
        return;
    s_shard_t *s = &self->shards [i];
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    int rc = kd_msg_recv (kd_shardset_socket (self->book, i), &msg, NULL, &err);
    if (rc == -2)
        kd_warn ("malformed reply from shard rank=%zu reason=\"%s\"", i, err.reason);
    if (rc != 0)
        return;
    if (kd_msg_type (msg) == KD_MSG_PULL_OK && self->evaluating && !s->done
    &&  (self->keyed_ready ? kd_keyed_eval_take (self->keyed, i, msg, self->eval_want)
                           : kd_shardset_take_pull (self->book, i, msg, self->eval_want, self->params)) == 0) {
        s->done = true;
        s->version = kd_msg_uint (msg, KD_F_VERSION);
        s->ts_ms = kd_msg_uint (msg, KD_F_TS_MS);
        s->samples = kd_msg_uint (msg, KD_F_SAMPLES);
        bool all = true;
        for (size_t j = 0; j < self->n_shards; j++)
            all = all && self->shards [j].done;
        if (all)
            s_eval_finish (self);
    }
    else
    if (kd_msg_type (msg) == KD_MSG_STATS_OK) {
        size_t n = 0;
        const uint64_t *counters = kd_msg_uints (msg, KD_F_COUNTERS, &n);
        s->have_stats = true;
        s->stats_version = kd_msg_uint (msg, KD_F_VERSION);
        s->n_counters = n < KD_SC_COUNT ? n : KD_SC_COUNT;
        memcpy (s->counters, counters, s->n_counters * sizeof (uint64_t));
        s->stats_ms = kd_now_ms ();
        s->stats_asked_ms = 0;
    }
    else
    if (kd_msg_type (msg) == KD_MSG_ERROR)
        kd_warn ("shard error rank=%zu code=%llu reason=\"%s\"", i,
                 (unsigned long long) kd_msg_uint (msg, KD_F_CODE), kd_msg_str (msg, KD_F_REASON));
    kd_msg_destroy (&msg);
}

//  Start an evaluation when one is due.
static void
s_eval_check (self_t *self)
{
    uint64_t now = kd_now_ms ();
    //  A shard that restarted or refused loses our pull: give the round up
    //  rather than wait for ever, and let the next check start a new one.
    if (self->evaluating
    &&  now - self->eval_started > self->request_timeout_ms) {
        kd_warn ("evaluation pull timed out want=%llu", (unsigned long long) self->eval_want);
        self->evaluating = false;
    }
    if (!self->started || self->evaluating)
        return;
    if (self->eval_answer) {
        s_eval_begin (self, self->eval_requested, S_ROUND_EVAL);
        return;
    }
    //  Snapshots take the current version at once: a parked pull would
    //  hold up the final evaluation once training stops.
    int64_t snapshot_ms = self->snapshot_ms;
    if (snapshot_ms > 0 && now >= self->next_snapshot) {
        s_eval_begin (self, 0, S_ROUND_SNAPSHOT);
        self->next_snapshot = now + (uint64_t) snapshot_ms;
        return;
    }
    //  Periodic: the next version after the last one evaluated.
    if (now >= self->next_eval && self->version > self->evaluated) {
        s_eval_begin (self, self->evaluated + 1, S_ROUND_EVAL);
        self->next_eval = now + self->eval_interval_ms;
    }
}

//  --------------------------------------------------------------------------
//  Scheduler and worker messages

static void
s_on_welcome (self_t *self, kd_msg_t *msg)
{
    if (self->model || self->external)
        return;
    //  An external model is the workers' own: the monitor cannot evaluate
    //  it, and streams its telemetry only.
    if (!strcmp (kd_msg_str (msg, KD_F_MODEL), "external")) {
        self->external = true;
        snprintf (self->model_name, sizeof self->model_name, "external");
        snprintf (self->consistency, sizeof self->consistency, "%s", kd_msg_str (msg, KD_F_CONSISTENCY));
        kd_info ("registered model=external: evaluated by evaluators' reports only");
        return;
    }
    int kind = kd_model_kind_parse (kd_msg_str (msg, KD_F_MODEL));
    uint64_t hidden64 = kd_msg_uint (msg, KD_F_HIDDEN);
    uint32_t hidden = (uint32_t) hidden64;
    if (kind < 0 || hidden64 > KD_MODEL_MAX_HIDDEN
    ||  kd_msg_uint (msg, KD_F_N_PARAMS) != kd_model_param_count (kind, hidden)) {
        kd_error ("welcome rejected: model=%s", kd_msg_str (msg, KD_F_MODEL));
        return;
    }
    self->n_params = kd_model_param_count (kind, hidden);
    self->hidden = hidden;
    self->model = kd_model_new (kind, hidden, S_EVAL_BATCH);
    self->params = (float *) calloc (self->n_params, sizeof (float));
    assert (self->model && self->params);
    snprintf (self->model_name, sizeof self->model_name, "%s", kd_model_kind_name (kind));
    snprintf (self->consistency, sizeof self->consistency, "%s", kd_msg_str (msg, KD_F_CONSISTENCY));
    kd_info ("registered model=%s params=%zu", self->model_name, self->n_params);
}

//  A keyed model started: fit the held-out rows to it, or say why not.
static void
s_start_keyed (self_t *self, kd_msg_t *msg)
{
    size_t nn = 0, ns = 0, n_params = 0;
    const char **names = kd_msg_strs (msg, KD_F_TENSORS, &nn);
    const uint64_t *shapes = kd_msg_uints (msg, KD_F_SHAPES, &ns);
    kd_tensor_t tensors [KD_MODEL_MAX_TENSORS];
    char err [256] = "";
    if (kd_model_layout_parse (names, nn, shapes, ns, tensors, &n_params, err, sizeof err) == 0
    &&  nn == 1
    &&  kd_keyed_eval_start (self->keyed, tensors [0].rows, tensors [0].cols, self->book,
                             err, sizeof err) == 0) {
        self->keyed_ready = true;
        kd_info ("held-out evaluation rows=%zu keys=%zu", kd_keyed_eval_rows (self->keyed),
                 kd_keyed_eval_keys (self->keyed));
    }
    else
        kd_error ("no held-out evaluation: %s", *err ? err : "the keyed model is not one tensor");
}

static void
s_on_start (self_t *self, kd_msg_t *msg)
{
    if (self->started || (!self->model && !self->external))
        return;
    //  An external model's size is what the address book says.
    char err [256];
    self->book = kd_shardset_new (msg, self->external ? 0 : self->n_params,
                                  kd_config_int (self->config, "max-msg-bytes"), NULL, err, sizeof err);
    if (!self->book) {
        kd_error ("start rejected: %s", err);
        return;
    }
    self->n_shards = kd_shardset_size (self->book);
    self->n_params = kd_shardset_params (self->book);
    for (size_t i = 0; i < self->n_shards; i++)
        kd_server_reader (self->server, kd_shardset_socket (self->book, i), s_on_shard);
    self->t0_ms = kd_msg_uint (msg, KD_F_T0_MS);
    self->started = true;
    if (self->keyed && kd_msg_uint (msg, KD_F_KEYS) == 1)
        s_start_keyed (self, msg);
    s_publish_event (self, "start", "training started");
    s_publish_model (self, msg);
    kd_info ("start shards=%zu", self->n_shards);
}

static void
s_on_status (self_t *self, kd_msg_t *msg)
{
    self->version = kd_msg_uint (msg, KD_F_VERSION);
    self->phases = kd_msg_uint (msg, KD_F_PHASES);
    self->epoch = kd_msg_float (msg, KD_F_EPOCH);
    self->active = kd_msg_uint (msg, KD_F_WORKERS);
    self->dropped = kd_msg_uint (msg, KD_F_DROPPED);
    uint64_t regroups = kd_msg_uint (msg, KD_F_REGROUPS);
    self->sched_samples = kd_msg_uint (msg, KD_F_SAMPLES);
    size_t n_relays = 0;
    const uint64_t *relays = kd_msg_uints (msg, KD_F_RELAYS, &n_relays);
    for (size_t i = 0; i < n_relays && i < 5; i++)
        self->relays [i] = relays [i];
    snprintf (self->consistency, sizeof self->consistency, "%s", kd_msg_str (msg, KD_F_CONSISTENCY));
    snprintf (self->mode, sizeof self->mode, "%s", kd_msg_str (msg, KD_F_MODE));
    size_t nr = 0, ng = 0;
    const uint64_t *ranks = kd_msg_uints (msg, KD_F_RANKS, &nr);
    const uint64_t *groups = kd_msg_uints (msg, KD_F_GROUPS, &ng);
    bool changed = regroups != self->regroups;
    bool sane = nr == ng && nr > 0 && nr <= S_MAX_WORKERS;
    for (size_t i = 0; sane && i < nr; i++)
        sane = ranks [i] < S_MAX_WORKERS && groups [i] < S_MAX_WORKERS;
    if (sane) {
        for (size_t i = 0; i < nr; i++)
            if (self->groups [ranks [i]] != groups [i]) {
                self->groups [ranks [i]] = groups [i];
                changed = true;
            }
        bool regrouped = regroups != self->regroups;
        self->regroups = regroups;
        if (changed)
            s_publish_groups (self, ranks, groups, nr);
        if (regrouped) {
            char detail [64];
            snprintf (detail, sizeof detail, "regroup %llu", (unsigned long long) regroups);
            s_publish_event (self, "regroup", detail);
        }
    }
    self->regroups = regroups;
}

//  ROUTE: a range's primary changed.  An evaluation pull still unanswered
//  goes to the new one, and so does the next STATS.
static void
s_on_route (self_t *self, kd_msg_t *msg)
{
    size_t i = (size_t) kd_msg_uint (msg, KD_F_RANK);
    if (!self->book || i >= self->n_shards)
        return;
    zsock_t *old = kd_shardset_socket (self->book, i);
    if (kd_shardset_reroute (self->book, i, kd_msg_str (msg, KD_F_ENDPOINT)) != 1)
        return;
    kd_info ("route range=%zu endpoint=%s", i, kd_msg_str (msg, KD_F_ENDPOINT));
    kd_server_reader_end (self->server, old);
    kd_server_reader (self->server, kd_shardset_socket (self->book, i), s_on_shard);
    self->shards [i].stats_asked_ms = 0;
    if (self->evaluating && !self->shards [i].done)
        s_eval_pull (self, i);
}

static void
s_on_scheduler (void *state, zsock_t *sock)
{
    self_t *self = (self_t *) state;
    (void) sock;
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    int rc = kd_msg_recv (kd_peer_socket (self->peer), &msg, NULL, &err);
    if (rc == -2)
        kd_warn ("malformed message from scheduler reason=\"%s\"", err.reason);
    if (rc != 0)
        return;
    kd_peer_heard (self->peer);
    switch (kd_msg_type (msg)) {
        case KD_MSG_WELCOME: s_on_welcome (self, msg); break;
        case KD_MSG_START:   s_on_start (self, msg); break;
        case KD_MSG_ROUTE:   s_on_route (self, msg); break;
        case KD_MSG_STATUS:  s_on_status (self, msg); break;
        case KD_MSG_EVAL:
            if (kd_msg_uint (msg, KD_F_VERSION) >= self->eval_requested || !self->eval_answer) {
                self->eval_requested = kd_msg_uint (msg, KD_F_VERSION);
                self->eval_answer = true;
            }
            break;
        case KD_MSG_STOP:
            kd_info ("stop reason=\"%s\"", kd_msg_str (msg, KD_F_REASON));
            s_publish_event (self, "done", kd_msg_str (msg, KD_F_REASON));
            self->stop = true;
            break;
        case KD_MSG_EVENT:
            //  Membership and recovery events from the scheduler: a worker
            //  declared dead, a rejoin, a restored shard.
            s_publish_scheduler_event (self, msg);
            break;
        case KD_MSG_HEARTBEAT: break;
        case KD_MSG_ERROR:
            if (kd_msg_is_not_registered (msg))
                kd_peer_unknown (self->peer);
            kd_warn ("scheduler error code=%llu reason=\"%s\"",
                     (unsigned long long) kd_msg_uint (msg, KD_F_CODE), kd_msg_str (msg, KD_F_REASON));
            break;
        default:
            kd_warn ("unexpected %s from scheduler", kd_msg_type_name (kd_msg_type (msg)));
    }
    kd_msg_destroy (&msg);
}

//  REPORT from an evaluator: publish it; and when we cannot evaluate the
//  model ourselves, stand on it as on our own evaluation.  A metric named
//  "loss" is lower-better and only sets the test loss; any other is the
//  run's test metric, which the scheduler takes when it lies in [0, 1].
static void
s_on_report (self_t *self, kd_msg_t *msg)
{
    const char *metric = kd_msg_str (msg, KD_F_METRIC);
    double value = kd_msg_float (msg, KD_F_VALUE);
    double loss = kd_msg_has (msg, KD_F_LOSS) ? kd_msg_float (msg, KD_F_LOSS) : NAN;
    uint64_t version = kd_msg_uint (msg, KD_F_VERSION);
    const char *name = *kd_msg_str (msg, KD_F_NAME) ? kd_msg_str (msg, KD_F_NAME) : "evaluator";
    if (!*metric || strlen (metric) >= S_METRIC_MAX || !isfinite (value)) {
        kd_msg_t *reply = kd_msg_new_error (kd_msg_routing_id (msg), KD_ERR_MALFORMED,
                                            "report: metric name empty or too long, or value not finite");
        kd_msg_send (&reply, self->router);
        return;
    }
    kd_debug ("report name=%s version=%llu %s=%.4f", name, (unsigned long long) version, metric, value);
    s_publish_eval (self, name, version, metric, value, loss);
    //  Our own evaluation of a built-in model stays the one the run uses;
    //  the reports are then there to be compared with it.
    if (self->model || self->keyed_ready || !self->started || version < self->evaluated)
        return;
    bool is_loss = !strcmp (metric, "loss");
    if (is_loss)
        loss = value;
    if (isfinite (loss))
        self->test_loss = loss;
    if (is_loss)
        return;
    self->evaluated = version;
    self->accuracy = value;
    self->have_accuracy = true;
    self->auc = !strcmp (metric, "auc") ? value : NAN;
    //  The commit time of the version scored, when the evaluator knew it.
    uint64_t ts = kd_msg_uint (msg, KD_F_TS_MS);
    if (value >= 0 && value <= 1)
        s_eval_ok (self, version, value, loss, ts ? ts : kd_wall_ms ());
}

//  TELEMETRY from a worker.
static void
s_on_telemetry (void *state, kd_msg_t *msg)
{
    self_t *self = (self_t *) state;
    uint64_t rank = kd_msg_uint (msg, KD_F_RANK);
    uint64_t samples = kd_msg_uint (msg, KD_F_SAMPLES);
    if (rank >= S_MAX_WORKERS || samples > 1000000) {
        kd_msg_t *reply = kd_msg_new_error (kd_msg_routing_id (msg), KD_ERR_MALFORMED,
                                            "rank or samples out of range");
        kd_msg_send (&reply, self->router);
    }
    else {
        s_worker_t *w = &self->workers [rank];
        w->seen = true;
        w->clock = kd_msg_uint (msg, KD_F_CLOCK);
        w->samples += samples;
        w->window_samples += samples;
        w->loss = kd_msg_float (msg, KD_F_LOSS);
        w->compute_ms = kd_msg_float (msg, KD_F_COMPUTE_MS);
        w->push_ms = kd_msg_float (msg, KD_F_PUSH_MS);
        w->wait_ms = kd_msg_float (msg, KD_F_WAIT_MS);
        w->pull_ms = kd_msg_float (msg, KD_F_PULL_MS);
        w->staleness = kd_msg_uint (msg, KD_F_STALENESS);
        w->dropped = kd_msg_uint (msg, KD_F_DROPPED);
        w->refused = kd_msg_uint (msg, KD_F_REFUSED);
        w->group = kd_msg_uint (msg, KD_F_GROUP);
        w->last_ms = kd_now_ms ();
        if (isfinite (w->compute_ms + w->push_ms + w->wait_ms + w->pull_ms)) {
            w->sum_compute += w->compute_ms;
            w->sum_push += w->push_ms;
            w->sum_wait += w->wait_ms;
            w->sum_pull += w->pull_ms;
            w->n_window++;
        }
        self->total_samples += samples;
        self->window_samples += samples;
        if (isfinite (w->loss) && w->loss < 1e29) {
            self->train_loss = self->have_loss
                ? (1 - S_LOSS_ALPHA) * self->train_loss + S_LOSS_ALPHA * w->loss : w->loss;
            self->have_loss = true;
        }
        if (isfinite (w->wait_ms) && w->wait_ms >= 0)
            self->wait_total += w->wait_ms;
        double work = w->compute_ms + w->push_ms + w->pull_ms;
        if (isfinite (work) && work >= 0)
            self->busy_total += work;
        self->stale_hist [w->staleness < S_STALE_BINS ? w->staleness : S_STALE_BINS]++;
    }
}

static void
s_on_report_request (void *state, kd_msg_t *msg)
{
    s_on_report ((self_t *) state, msg);
}

//  After every turn: evaluations, the stats stream, the scheduler's
//  liveness, and how long the next poll may wait.
static int
s_on_tick (void *state)
{
    self_t *self = (self_t *) state;
    //  A STOP ends the loop after this turn's work, as it always did.
    if (self->stop)
        kd_server_stop (self->server);
    s_eval_check (self);
    uint64_t now = kd_now_ms ();
    if (now >= self->next_publish) {
        s_publish_stats (self);
        self->next_publish = now + (uint64_t) self->publish_ms;
    }
    kd_peer_tick (self->peer);
    int wait = self->next_publish > now ? (int) (self->next_publish - now) : 0;
    return wait > 20 ? 20 : wait;
}

int
kd_monitor_run (kd_config_t *config, zsock_t *pipe)
{
    int rc = 1;
    self_t *self = (self_t *) zmalloc (sizeof *self);
    self->config = config;
    //  Settings the loop reads on every turn are bound here, once.
    self->request_timeout_ms = (uint64_t) kd_config_int (config, "request-timeout-ms");
    self->snapshot_ms = kd_config_int (config, "snapshot-ms");
    self->eval_interval_ms = (uint64_t) (kd_config_double (config, "eval-interval") * 1000);
    char err [512];
    int64_t max_msg = kd_config_int (config, "max-msg-bytes");
    openblas_set_num_threads ((int) kd_config_int (config, "threads"));
    snprintf (self->model_name, sizeof self->model_name, "?");
    snprintf (self->consistency, sizeof self->consistency, "?");
    self->groups = (uint64_t *) malloc (S_MAX_WORKERS * sizeof (uint64_t));
    for (size_t r = 0; r < S_MAX_WORKERS; r++)
        self->groups [r] = UINT32_MAX;

    self->test = kd_dataset_load_dir (kd_config_str (config, "data-dir"), "t10k", 0, 0, err, sizeof err);
    if (!self->test) {
        kd_error ("cannot load test data: %s", err);
        goto cleanup;
    }
    //  A keyed model's held-out rows: a file named but unreadable is an
    //  error now, not a silent run without evaluations.
    self->auc = NAN;
    if (*kd_config_str (config, "test-file")) {
        self->keyed = kd_keyed_eval_new (kd_config_str (config, "test-file"),
                                         (size_t) kd_config_int (config, "eval-rows"), err, sizeof err);
        if (!self->keyed) {
            kd_error ("setting 'test-file': %s", err);
            goto cleanup;
        }
    }
    self->router = zsock_new (ZMQ_ROUTER);
    //  XPUB, verbose: every new follower's subscription reaches us, and
    //  it is sent the model event at once (s_on_subscribe).
    self->pub = zsock_new (ZMQ_XPUB);
    zsock_set_xpub_verbose (self->pub, 1);
    kd_socket_harden (self->router, max_msg);
    kd_socket_harden (self->pub, max_msg);
    kd_curve_server (kd_curve_process (), self->router);
    kd_curve_server (kd_curve_process (), self->pub);
    self->guard = kd_guard_new (self->router, "monitor", (int) kd_config_int (config, "max-connections"),
                                (int) kd_config_int (config, "max-malformed"));
    self->server = kd_server_new (KD_SVC_MONITOR, self->router, self->guard, self);
    if (zsock_bind (self->router, "%s", kd_config_str (config, "bind")) < 0
    ||  zsock_bind (self->pub, "%s", kd_config_str (config, "pub-bind")) < 0) {
        kd_error ("cannot bind endpoint=%s pub=%s: %s", kd_config_str (config, "bind"),
                  kd_config_str (config, "pub-bind"), zmq_strerror (zmq_errno ()));
        goto cleanup;
    }
    kd_warn_open_bind (kd_config_str (config, "bind"), kd_curve_enabled (kd_curve_process ()));
    kd_warn_open_bind (kd_config_str (config, "pub-bind"), kd_curve_enabled (kd_curve_process ()));
    if (*kd_config_str (config, "metrics-bind")) {
        char why [256];
        self->metrics = kd_metrics_new (kd_config_str (config, "metrics-bind"), why, sizeof why);
        //  Metrics are an extra: a taken port costs them, not the stream.
        if (!self->metrics)
            kd_error ("setting 'metrics-bind': %s; serving no metrics", why);
        else
            kd_info ("metrics at http://%s/metrics", kd_config_str (config, "metrics-bind"));
    }
    self->peer = kd_peer_new (kd_config_str (config, "scheduler"), "monitor",
                              kd_config_str (config, "name"), max_msg,
                              (int) kd_config_int (config, "heartbeat-ms"),
                              (int) kd_config_int (config, "liveness"), NULL);
    if (!self->peer) {
        kd_error ("cannot connect to scheduler endpoint=%s", kd_config_str (config, "scheduler"));
        goto cleanup;
    }
    kd_info ("listening intake=%s pub=%s test_rows=%zu", kd_config_str (config, "bind"),
             kd_config_str (config, "pub-bind"), kd_dataset_count (self->test));
    kd_peer_set_evaluates_keyed (self->peer, self->keyed != NULL);
    //  The scheduler tells evaluators where to report: our intake.
    char intake [256];
    if (kd_advertise_endpoint (self->router, kd_config_str (config, "advertise"), intake, sizeof intake) == 0)
        kd_peer_set_endpoint (self->peer, intake);
    kd_peer_hello (self->peer);
    self->publish_ms = (int) kd_config_int (config, "publish-ms");
    self->next_publish = kd_now_ms () + (uint64_t) self->publish_ms;
    kd_server_on (self->server, KD_MSG_TELEMETRY, s_on_telemetry);
    kd_server_on (self->server, KD_MSG_REPORT, s_on_report_request);
    kd_server_echo_heartbeats (self->server);
    kd_server_set_tick (self->server, s_on_tick);
    kd_server_reader (self->server, kd_peer_socket (self->peer), s_on_scheduler);
    kd_server_reader (self->server, self->pub, s_on_subscribe);
    kd_service_ready (pipe);
    kd_server_run (self->server, pipe);
    s_write_curve (self);
    //  A last picture for followers, then give it time to leave.
    if (self->pub) {
        s_publish_stats (self);
        zsock_set_linger (self->pub, 500);
    }
    rc = 0;
cleanup:
    kd_server_destroy (&self->server);
    kd_shardset_destroy (&self->book);
    kd_metrics_destroy (&self->metrics);
    kd_peer_destroy (&self->peer);
    kd_guard_destroy (&self->guard);
    zsock_destroy (&self->router);
    zsock_destroy (&self->pub);
    kd_model_destroy (&self->model);
    kd_keyed_eval_destroy (&self->keyed);
    kd_dataset_destroy (&self->test);
    free (self->params);
    free (self->groups);
    for (size_t i = 0; i < self->n_snapshots; i++)
        free (self->snapshots [i].params);
    free (self->snapshots);
    free (self);
    return rc;
}
