/*  kd_worker: the built-in training worker, a thin program over kd_client.

    One iteration:  pull the released version (kd_client_pull, which skips
    it while SSP's cache is fresh) -> compute a gradient of the built-in
    model on the rows of the lease -> sleep out the emulated compute, if
    any, scaled by this worker's speed -> push -> arrive, which brings the
    next lease -> telemetry.  The protocol lives in kd_client; what is left
    here is the arithmetic and the injected heterogeneity of experiments.

    With --evaluator it trains nothing: it is an evaluator, which pulls the
    model every eval-interval seconds, scores it on the test set and
    reports that to the monitor (kd_client_report_eval), the path a user's
    own evaluator takes.  kudus local --evaluator starts one, so that the
    monitor's own evaluation and a reported one can be checked against
    each other.
*/
#include "kd_worker.h"
#include "kd_sparse_lr.h"
#include "kd_speed.h"
#include <cblas.h>
#include <math.h>

#define S_EVAL_BATCH    1000    //  rows per evaluation batch, as the monitor's
#define S_EVAL_ANSWER_MS 1      //  between batches: long enough to answer a heartbeat

typedef struct {
    kd_config_t *config;        //  settings
    kd_client_t *client;        //  the cluster
    kd_model_t *model;          //  gradient code and scratch
    kd_dataset_t *data;         //  the whole training set
    kd_sparse_lr_t *sparse;     //  or, for sparse-lr, its LIBSVM rows
    float *params;              //  local copy of the model
    float *grad;                //  gradient buffer
    float *xbuf;                //  gathered batch rows
    uint8_t *ybuf;              //  gathered labels
    uint64_t rank;              //  our worker rank
    uint64_t seed;              //  the run's seed
    double delay_ms;            //  emulated compute per iteration
    double slowdown;            //  static slowdown factor
    bool hetero;                //  dynamic heterogeneity on
    double hetero_period;       //  seconds between speed changes
    kd_speed_t *speed;          //  speed schedule, NULL = constant
    uint64_t nan_every;         //  inject-nan-every (0: never)
    uint64_t iterations;        //  gradients computed
    size_t n_params;            //  the model's size
    bool evaluator;             //  --evaluator: score and report, no training
    double eval_delay_ms;       //  emulated scoring time per test batch
} self_t;

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
    uint64_t t0 = kd_client_start_ms (self->client);
    uint64_t now = kd_wall_ms ();
    double elapsed = t0 && now > t0 ? (double) (now - t0) / 1000.0 : 0;
    if (self->hetero && t0)
        factor *= kd_worker_hetero_factor (self->seed, kd_client_rank (self->client),
                                           (uint64_t) (elapsed / self->hetero_period));
    if (self->speed)
        factor *= kd_speed_factor (self->speed, elapsed);
    return factor;
}

//  Build the model and buffers for what WELCOME said.  Returns 0 or -1.
static int
s_setup (self_t *self)
{
    kd_client_t *client = self->client;
    int kind = kd_model_kind_parse (kd_client_model (client));
    size_t batch = kd_client_batch (client);
    size_t n_params = kd_client_param_count (client);
    self->rank = kd_client_rank (client);
    self->seed = kd_client_seed (client);
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
    if (self->sparse) {
        //  Room for the keys of the largest batch: every row its most entries.
        size_t cap = 1 + batch * kd_sparse_lr_max_nnz (self->sparse);
        if (!kd_client_keyed (client)) {
            kd_error ("the cluster's model is not keyed: run it with --model sparse-lr");
            return -1;
        }
        self->params = (float *) calloc (cap, sizeof (float));
        self->grad = (float *) calloc (cap, sizeof (float));
        self->n_params = cap;
        assert (self->params && self->grad);
        return 0;
    }
    if (kind < 0) {
        if (self->evaluator)
            kd_error ("an evaluator here scores built-in models; score model %s with "
                      "kudus.torch.Evaluator or kd_client_report_eval", kd_client_model (client));
        return -1;
    }
    //  An evaluator scores the whole test set, in the monitor's batches.
    if (self->evaluator)
        batch = S_EVAL_BATCH;
    self->model = kd_model_new ((kd_model_kind_t) kind, kd_client_hidden (client), batch);
    if (!self->model) {
        kd_error ("cannot build model %s hidden=%u", kd_client_model (client), kd_client_hidden (client));
        return -1;
    }
    self->params = (float *) calloc (n_params, sizeof (float));
    self->grad = (float *) calloc (n_params, sizeof (float));
    self->n_params = n_params;
    self->xbuf = (float *) malloc (batch * KD_INPUT_DIM * sizeof (float));
    self->ybuf = (uint8_t *) malloc (batch);
    assert (self->params && self->grad && self->xbuf && self->ybuf);
    return 0;
}

//  Gather the rows of the lease; returns how many.  A row outside the
//  training set is a broken scheduler: it is left out and logged, and the
//  scheduler then refuses the arrival with a clear error.
static size_t
s_gather (self_t *self, const kd_release_t *release)
{
    const float *images = kd_dataset_images (self->data);
    const uint8_t *labels = kd_dataset_labels (self->data);
    size_t total = kd_dataset_count (self->data), n = 0;
    for (size_t r = 0; r < release->n_rows; r++) {
        uint64_t row = release->rows [r];
        if (row >= total) {
            kd_error ("lease row out of range row=%llu rows=%zu", (unsigned long long) row, total);
            continue;
        }
        memcpy (self->xbuf + n * KD_INPUT_DIM, images + (size_t) row * KD_INPUT_DIM,
                KD_INPUT_DIM * sizeof (float));
        self->ybuf [n++] = labels [row];
    }
    return n;
}

//  Injected heterogeneity: an emulated compute time, scaled by this
//  worker's speed factor, which the real work counts toward; or, without
//  one, a stretch of the real work.  Returns -1 when the run stopped.
static int
s_emulate (self_t *self, double real_ms)
{
    double factor = s_speed_factor (self);
    double emulated = self->delay_ms > 0 ? self->delay_ms * factor : real_ms * factor;
    if (emulated > real_ms && kd_client_sleep (self->client, emulated - real_ms))
        return -1;
    kd_client_set_emulated_ms (self->client, emulated);
    return 0;
}

//  sparse-lr: pull and push only the keys of the lease's rows.
static void
s_train_sparse (self_t *self, kd_release_t *release)
{
    kd_client_t *client = self->client;
    while (!kd_client_stopped (client)) {
        const uint64_t *keys;
        size_t n_keys;
        size_t rows = kd_sparse_lr_batch (self->sparse, release->rows, release->n_rows, &keys, &n_keys);
        if (n_keys == 0) {
            //  Every batch holds the bias: no keys means no memory.
            kd_error ("sparse-lr: out of memory for a batch of %zu rows", release->n_rows);
            break;
        }
        if (kd_client_pull_keys (client, keys, n_keys, self->params))
            break;
        double t_compute = kd_now_msf ();
        float loss = kd_sparse_lr_gradient (self->sparse, self->params, self->grad);
        if (s_emulate (self, kd_now_msf () - t_compute))
            break;
        if (self->nan_every > 0 && ++self->iterations % self->nan_every == 0)
            self->grad [self->iterations % n_keys] = NAN;
        if (kd_client_push_keys (client, keys, n_keys, self->grad, rows)
        ||  kd_client_arrive (client, loss, release))
            break;
        kd_client_telemetry (client);
    }
}

//  Iterate until STOP.
static void
s_train (self_t *self, kd_release_t *release)
{
    kd_client_t *client = self->client;
    while (!kd_client_stopped (client)) {
        if (kd_client_pull (client, self->params))
            break;
        double t_compute = kd_now_msf ();
        size_t rows = s_gather (self, release);
        float loss = rows > 0 ? kd_model_gradient (self->model, self->params, self->xbuf,
                                                   self->ybuf, rows, self->grad)
                              : 0;
        if (s_emulate (self, kd_now_msf () - t_compute))
            break;
        //  Fault injection: a poisoned gradient, which the client must not
        //  push and the cluster must not apply.
        if (self->nan_every > 0 && ++self->iterations % self->nan_every == 0 && self->n_params > 0)
            self->grad [self->iterations % self->n_params] = NAN;
        if (kd_client_push (client, self->grad, rows)
        ||  kd_client_arrive (client, loss, release))
            break;
        kd_client_telemetry (client);
    }
}

//  Score the whole test set in batches of S_EVAL_BATCH rows.  Between
//  batches the client answers the scheduler, so a scoring that outlasts
//  its liveness window (liveness x heartbeat-ms) is no death.  -1 when the
//  run stopped meanwhile.
static int
s_score (self_t *self, double *accuracy, double *loss)
{
    kd_client_t *client = self->client;
    size_t n = kd_dataset_count (self->data);
    double correct = 0, total = 0;
    for (size_t r = 0; r < n; r += S_EVAL_BATCH) {
        size_t rows = n - r < S_EVAL_BATCH ? n - r : S_EVAL_BATCH;
        double batch_accuracy = 0, batch_loss = 0;
        kd_model_evaluate (self->model, self->params, kd_dataset_images (self->data) + r * KD_INPUT_DIM,
                           kd_dataset_labels (self->data) + r, rows, &batch_accuracy, &batch_loss);
        //  Emulated slow scoring: a sleep that answers nothing, as a long
        //  batch on a slow machine would not.
        if (self->eval_delay_ms > 0)
            zclock_sleep ((int) self->eval_delay_ms);
        correct += floor (batch_accuracy * (double) rows + 0.5);
        total += batch_loss * (double) rows;
        if (kd_client_sleep (client, S_EVAL_ANSWER_MS))
            return -1;
    }
    *accuracy = n ? correct / (double) n : 0;
    *loss = n ? total / (double) n : 0;
    return 0;
}

//  Evaluator: pull the version the shards hold (with eval-interval 0, each
//  next one as it is committed), score it on the test set and report it,
//  until STOP.
static void
s_evaluate (self_t *self)
{
    kd_client_t *client = self->client;
    double every_ms = kd_config_double (self->config, "eval-interval") * 1000;
    bool scored = false;
    uint64_t last = 0;
    while (kd_client_pull_version (client, self->params,
                                   every_ms > 0 || !scored ? 0 : last + 1) == 0) {
        uint64_t version = kd_client_version (client);
        if (!scored || version != last) {
            double accuracy = 0, loss = 0;
            if (s_score (self, &accuracy, &loss))
                break;
            kd_client_report_eval (client, "accuracy", accuracy, loss, version);
            kd_debug ("eval version=%llu accuracy=%.4f", (unsigned long long) version, accuracy);
            scored = true;
            last = version;
        }
        if (kd_client_sleep (client, every_ms))
            break;
    }
}

int
kd_worker_run (kd_config_t *config, zsock_t *pipe)
{
    self_t self_s = { .config = config }, *self = &self_s;
    char err [512];
    int exit_code = 0;
    openblas_set_num_threads ((int) kd_config_int (config, "threads"));
    self->delay_ms = kd_config_double (config, "delay-ms");
    self->nan_every = (uint64_t) kd_config_int (config, "inject-nan-every");
    self->slowdown = kd_config_double (config, "slowdown");
    self->hetero = strcmp (kd_config_str (config, "hetero"), "dynamic") == 0;
    self->hetero_period = kd_config_double (config, "hetero-period");
    self->evaluator = kd_config_bool (config, "evaluator");
    self->eval_delay_ms = kd_config_double (config, "eval-delay-ms");
    //  Checked now, built once WELCOME brings the run's seed.
    if (*kd_config_str (config, "speed")) {
        self->speed = kd_speed_new (kd_config_str (config, "speed"), 0, err, sizeof err);
        if (!self->speed) {
            kd_error ("setting 'speed': %s", err);
            return 2;
        }
        kd_speed_destroy (&self->speed);
    }
    bool sparse = !strcmp (kd_config_str (config, "model"), "sparse-lr");
    if (sparse && self->evaluator) {
        kd_error ("setting 'evaluator': sparse-lr is scored by the monitor (--test-file)");
        return 2;
    }
    if (sparse) {
        self->sparse = kd_sparse_lr_load (kd_config_str (config, "train-file"),
                                          (uint64_t) kd_config_int (config, "features"), 0, err, sizeof err);
        if (!self->sparse) {
            kd_error ("cannot load training data: %s", *kd_config_str (config, "train-file")
                      ? err : "sparse-lr needs --train-file");
            return 1;
        }
        kd_info ("sparse-lr: %zu rows, %llu features, %zu bad lines skipped",
                 kd_sparse_lr_rows (self->sparse),
                 (unsigned long long) kd_sparse_lr_features (self->sparse), kd_sparse_lr_skipped (self->sparse));
    }
    else {
        self->data = kd_dataset_load_dir (kd_config_str (config, "data-dir"),
                                          self->evaluator ? "t10k" : "train", 0, 0, err, sizeof err);
        if (!self->data) {
            kd_error ("cannot load %s data: %s", self->evaluator ? "test" : "training", err);
            return 1;
        }
    }
    self->client = kd_client_new (kd_config_str (config, "scheduler"), kd_config_str (config, "name"));
    if (!self->client) {
        exit_code = 1;
        goto cleanup;
    }
    kd_client_set_cancel (self->client, pipe);
    //  A worker binds nothing: it is ready once its client exists.
    kd_service_ready (pipe);
    if (self->evaluator)
        kd_client_set_evaluator (self->client);
    kd_client_set_max_msg_bytes (self->client, kd_config_int (config, "max-msg-bytes"));
    kd_client_set_wire_dtype (self->client, kd_config_str (config, "wire-dtype"));
    kd_client_set_shm (self->client, !kd_config_bool (config, "no-shm"));
    kd_client_set_pull_ahead (self->client, !kd_config_bool (config, "no-pull-ahead"));
    kd_client_set_timeout (self->client, (int) kd_config_int (config, "request-timeout-ms"));
    kd_client_set_liveness (self->client, (int) kd_config_int (config, "liveness"));
    kd_client_set_heartbeat (self->client, (int) kd_config_int (config, "heartbeat-ms"));
    if (sparse) {
        kd_client_set_samples (self->client, kd_sparse_lr_rows (self->sparse));
        kd_client_set_keyed_layout (self->client, "w", kd_sparse_lr_features (self->sparse) + 1, 1);
    }
    else
    if (!self->evaluator)
        kd_client_set_samples (self->client, kd_dataset_count (self->data));
    if (kd_config_int (config, "rank") >= 0)
        kd_client_set_rank (self->client, (uint64_t) kd_config_int (config, "rank"));
    //  An evaluator reports where WELCOME says, unless told.
    if ((!self->evaluator || kd_config_is_set (config, "monitor"))
    &&  kd_client_set_monitor (self->client, kd_config_str (config, "monitor"))) {
        exit_code = 1;
        goto cleanup;
    }
    //  Registration: WELCOME, then START once the cluster is complete, then
    //  a first RELEASE with our starting version, clock and lease.
    kd_release_t release;
    if (kd_client_register (self->client, -1) == 0 && s_setup (self) == 0
    &&  kd_client_wait_start (self->client, &release, -1) == 0) {
        if (self->evaluator)
            s_evaluate (self);
        else
        if (sparse)
            s_train_sparse (self, &release);
        else
            s_train (self, &release);
    }
    if (!kd_client_stopped (self->client))
        exit_code = 1;
    else
    if (zsys_interrupted || (pipe && zsock_events (pipe) & ZMQ_POLLIN))
        //  SIGTERM, or "$TERM" to the actor: leave gracefully so the barrier
        //  stops counting us now.
        kd_client_leave (self->client, "signal");
    kd_info ("exit rank=%llu version=%llu pulls_skipped=%llu",
             (unsigned long long) kd_client_rank (self->client),
             (unsigned long long) kd_client_version (self->client),
             (unsigned long long) kd_client_pulls_skipped (self->client));
cleanup:
    kd_client_destroy (&self->client);
    kd_model_destroy (&self->model);
    kd_dataset_destroy (&self->data);
    kd_sparse_lr_destroy (&self->sparse);
    free (self->params);
    free (self->grad);
    free (self->xbuf);
    free (self->ybuf);
    kd_speed_destroy (&self->speed);
    return exit_code;
}
