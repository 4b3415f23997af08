/*  kd_client: a worker's link to a Kudus cluster.  Public API.

    Any program that computes gradients can be a Kudus worker through this
    class: the built-in kudus-worker is one, the Python binding is another.
    The client owns the protocol: registration, the address book of shards,
    retries with backoff, heartbeats, CURVE, the SSP cache and the direct
    (ASP/SSP) bookkeeping.  The caller owns the model's arithmetic.
    Under ASP and SSP a worker may hold a lease ahead
    (kd_client_set_lease_ahead) and compute the next clock's gradient while
    this clock's communication travels.

    One iteration, after kd_client_register and kd_client_wait_start:

        kd_client_pull (client, params);            //  the released version
        loss = my_gradient (params, rows, grad);    //  on the lease's rows
        kd_client_push (client, grad, n_rows);      //  every shard its slice
        kd_client_arrive (client, loss, &release);  //  consistency decision
        kd_client_telemetry (client);               //  optional, best effort

    The release names the next lease: the training rows to compute on.  A
    call returns -1 when the cluster stopped the run (STOP), on SIGINT or
    SIGTERM, after kd_client_leave, or when the cluster sent what this
    client cannot serve; kd_client_stopped tells the first three apart
    from an error.  kd_client_register and kd_client_wait_start also
    return -1 at their timeout; pull, push and arrive resend for as long
    as the run lasts.  Nothing here asserts on what the network sends: a
    malformed or unexpected message is logged and ignored.  Lease rows are
    checked against kd_client_set_samples when it was called.

    An evaluator (kd_client_set_evaluator) is the same client in a role
    that may only pull and report: it registers, waits for START, then
    pulls whatever version the shards hold and reports a metric of it to
    the monitor with kd_client_report_eval.  It has no rank of its own, no
    lease and no place in any barrier; STOP ends it like a worker.

        kd_client_set_evaluator (client);
        kd_client_register (client, -1);
        kd_client_wait_start (client, NULL, -1);
        while (kd_client_pull_version (client, params, 0) == 0) {
            double accuracy = my_accuracy (params);
            kd_client_report_eval (client, "accuracy", accuracy, NAN,
                                   kd_client_version (client));
            if (kd_client_sleep (client, 5000))
                break;                              //  the run stopped
        }

    The client is not thread safe: one thread drives it.  It uses CZMQ,
    whose first socket installs SIGINT and SIGTERM handlers (zsys), and it
    logs to stderr.
*/
#ifndef KD_CLIENT_H_INCLUDED
#define KD_CLIENT_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kd_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _kd_client_t kd_client_t;

//  What a RELEASE tells the worker.  rows is borrowed from the client and
//  valid until its next call.
typedef struct {
    uint64_t version;           //  pull at least this model version
    uint64_t clock;             //  the clock to compute next
    uint64_t min_clock;         //  slowest member's clock (SSP's horizon)
    uint64_t group;             //  ALSP group, 0 otherwise
    uint64_t staleness;         //  staleness of our last applied gradient
    bool dropped;               //  our last gradient was dropped
    const uint64_t *rows;       //  the lease: training rows to compute on
    size_t n_rows;              //  rows in the lease
} kd_release_t;

//  Create a client for the scheduler at endpoint ("tcp://host:7000").  name
//  identifies the worker (unique per cluster; a restart with the same name
//  gets its rank back); NULL or "" means worker-HOST-PID.  NULL if the
//  endpoint is missing.  Caller owns return value.
kd_client_t *
    kd_client_new (const char *scheduler, const char *name);

//  Leave the cluster if still in it, close every socket, and null the
//  caller's pointer.
void
    kd_client_destroy (kd_client_t **self_p);

//  Settings; call before kd_client_register.
//  Rows of the training set this worker can read (sent with HELLO, so the
//  scheduler can size its lease book).
void
    kd_client_set_samples (kd_client_t *self, uint64_t samples);
//  Register as an evaluator, not a worker: the client may then pull and
//  report (kd_client_report_eval), and kd_client_push, kd_client_push_keys,
//  kd_client_arrive and kd_client_init_params return -1.  Under CURVE it
//  uses the evaluator's key: call it before kd_client_set_curve_keys, and
//  before kd_client_register.
void
    kd_client_set_evaluator (kd_client_t *self);
//  The monitor's intake endpoint for kd_client_telemetry; none by default.
//  An evaluator that sets none reports where WELCOME says the monitor is.
int
    kd_client_set_monitor (kd_client_t *self, const char *endpoint);
//  The rank to ask for (a hint the scheduler honours when it is free).
void
    kd_client_set_rank (kd_client_t *self, uint64_t rank);
//  Request deadline before a retry, in ms (default 10000).
void
    kd_client_set_timeout (kd_client_t *self, int timeout_ms);
//  Heartbeats the scheduler may miss before we say HELLO again (default
//  3), and the interval until WELCOME brings the scheduler's (default
//  1000 ms).
void
    kd_client_set_liveness (kd_client_t *self, int liveness);
void
    kd_client_set_heartbeat (kd_client_t *self, int heartbeat_ms);
//  Declare the layout of an external model (the scheduler runs with
//  --model external): its tensors' names and shapes, in flat order (offset
//  and count are computed).  The first worker to register declares the
//  cluster's layout; the others must declare the same, or none.  Returns
//  0, or -1 (logged) for a malformed layout: 1..64 tensors, distinct names
//  shorter than KD_TENSOR_NAME_MAX, dimensions >= 1, at most 2^31 floats.
int
    kd_client_set_layout (kd_client_t *self, const kd_tensor_t *tensors, size_t n);
//  Declare a keyed (sparse) model instead: one tensor of `keys` rows of
//  `dim` floats, addressed by key (the row), of which each request moves
//  only the rows it names (kd_client_push_keys, kd_client_pull_keys).  The
//  shards split the keys into ranges and create a row, at zero, when a
//  gradient first touches it: keys may run to 2^31 and more.  Returns 0, or
//  -1 (logged) for a bad name or size.
int
    kd_client_set_keyed_layout (kd_client_t *self, const char *name, uint64_t keys, uint64_t dim);
//  True when the cluster's model is keyed (after kd_client_register).
bool
    kd_client_keyed (kd_client_t *self);

//  Largest message accepted from a peer, in bytes (default 1 GiB).
void
    kd_client_set_max_msg_bytes (kd_client_t *self, int64_t bytes);
//  Use CURVE with the keys of `kudus keygen DIR` (client.cert_secret and
//  server.cert).  Returns 0, or -1 with the reason logged when a key is
//  missing or malformed.  Without it, the process's CURVE setting applies
//  (a kudus service's "curve" and "keys-dir").
int
    kd_client_set_curve_keys (kd_client_t *self, const char *dir);

//  Send HELLO and wait up to timeout_ms for WELCOME (-1: for ever).
//  Returns 0, or -1 on stop, timeout or a WELCOME this client cannot
//  serve (its reason is logged).
int
    kd_client_register (kd_client_t *self, int timeout_ms);

//  Wait up to timeout_ms (-1: for ever) for START, connect to every shard,
//  and wait for the first RELEASE, returned in *release.  Returns 0 or -1.
//  An evaluator waits for START only; *release (may be NULL) is zeroed.
int
    kd_client_wait_start (kd_client_t *self, kd_release_t *release, int timeout_ms);

//  What WELCOME said; valid after kd_client_register.
uint64_t
    kd_client_rank (kd_client_t *self);
//  Floats in the flat parameter vector.
size_t
    kd_client_param_count (kd_client_t *self);
//  The model's name ("softmax", "mlp", or "external"), its hidden units, the
//  batch (largest lease), the run's seed and consistency model.
const char *
    kd_client_model (kd_client_t *self);
uint32_t
    kd_client_hidden (kd_client_t *self);
size_t
    kd_client_batch (kd_client_t *self);
uint64_t
    kd_client_seed (kd_client_t *self);
const char *
    kd_client_consistency (kd_client_t *self);
//  The momentum the shards apply (from WELCOME; 0 for plain SGD or an
//  optimizer without one).
double
    kd_client_momentum (kd_client_t *self);
//  Wall-clock ms since the epoch when the run started (from START), 0
//  before it.
uint64_t
    kd_client_start_ms (kd_client_t *self);
//  The model's layout: tensor i of kd_client_tensor_count.  NULL when i is
//  out of range.
size_t
    kd_client_tensor_count (kd_client_t *self);
const kd_tensor_t *
    kd_client_tensor (kd_client_t *self, size_t i);

//  Seed an external model with initial values (param_count floats), as
//  user code such as PyTorch's initializes them.  The shards take the first
//  values any worker sends, and answer no pull before: every worker may
//  call it, and all of them then start from the same model.  A built-in
//  model's shards hold their seeded values already and ignore it.  Call
//  after kd_client_wait_start and before the first pull.  Returns 0 or -1.
int
    kd_client_init_params (kd_client_t *self, const float *params);

//  Pull the version named by the last release into params (param_count
//  floats), straight from each shard's reply frame.  Under SSP the pull is
//  skipped while params, the same buffer as the last pull and unchanged
//  since, holds every update SSP promises for the next clock, as in
//  Bosen's client cache.  Returns 0 or -1.
int
    kd_client_pull (kd_client_t *self, float *params);

//  Pull at least version (0: whatever each shard has) into params.
int
    kd_client_pull_version (kd_client_t *self, float *params, uint64_t version);

//  After the scheduler stopped the run: pull its final model, the version
//  STOP named (kd_client_stop_version), into params.  With an external
//  model the scheduler keeps the shards serving for --final-pull-ms (2 s)
//  after STOP, or until every worker has left, so call kd_client_leave
//  once this returns.  Gives up after timeout_ms.  Returns 0, or -1 when
//  the run was not stopped by the scheduler, the model is built-in (its
//  shards stop with the scheduler), the shards did not answer in time, or
//  a signal came.
int
    kd_client_pull_final (kd_client_t *self, float *params, int timeout_ms);

//  The final version the scheduler's STOP named, or 0 before STOP (or
//  from a scheduler that does not name it).
uint64_t
    kd_client_stop_version (kd_client_t *self);

//  Version of the model last pulled (the oldest shard's, if they differ).
uint64_t
    kd_client_version (kd_client_t *self);

//  Push gradient (param_count floats, the mean over samples rows) to every
//  shard, and wait until each has taken it.  The gradient is borrowed, not
//  copied, until the call returns (on -1 too: the client then lets go of
//  it before returning, and can no longer push).  A gradient with a NaN or
//  an Inf is not sent, and one a shard refuses is not resent: both return
//  0, the next kd_client_arrive reports the refusal, and the lease's rows
//  go back to be trained again (kd_client_refused counts them).  On the
//  short phase path (the scheduler runs --phase-path short; BSP, LSP,
//  ALSP) the call copies the gradient, sends it and returns at once:
//  kd_client_arrive then sends ARRIVE with it and waits for the shards'
//  answers (protocol section 9.3.1).  Returns 0 or -1.
int
    kd_client_push (kd_client_t *self, const float *gradient, uint64_t samples);

//  A keyed model's pull and push.  keys are n strictly increasing keys
//  below the model's key count; values hold n * dim floats, row by row.
//  kd_client_pull_keys reads the version kd_client_pull would, and
//  kd_client_push_keys sends every shard its keys (an empty request to a
//  shard none of them falls to, so that a commit finds a gradient at
//  every shard), with the rules of kd_client_push.  Return 0 or -1.
int
    kd_client_pull_keys (kd_client_t *self, const uint64_t *keys, size_t n, float *values);
int
    kd_client_push_keys (kd_client_t *self, const uint64_t *keys, size_t n, const float *values,
                         uint64_t samples);

//  Tell the scheduler this clock is done, and wait for its decision: the
//  next RELEASE, in *release.  loss is the batch's mean loss.  Returns 0
//  or -1.
int
    kd_client_arrive (kd_client_t *self, float loss, kd_release_t *release);

//  Sleep ms while still answering the scheduler (heartbeats, STOP).  For
//  emulated compute.  Returns 0, or -1 if the run stopped meanwhile.
int
    kd_client_sleep (kd_client_t *self, double ms);

//  Declare ms of the compute just done as emulated (reported beside the
//  real compute time with the next arrival).
void
    kd_client_set_emulated_ms (kd_client_t *self, double ms);

//  Send the last iteration's telemetry to the monitor: its pull, compute,
//  push and wait times as measured by the client, loss, rows, staleness,
//  drops and group.  Best effort: never blocks.  Returns 0 or -1.
int
    kd_client_telemetry (kd_client_t *self);

//  Report an evaluation to the monitor (REPORT): metric ("accuracy",
//  "loss", "auc" or any name under 32 bytes) had value on the model at
//  version (kd_client_version after the pull that fetched it), with its
//  test loss beside it, or NAN.  The monitor publishes every report on its
//  stream ("eval"); for a model it cannot evaluate itself (external) a
//  report is the run's test figure: "stats", Prometheus, and, for any
//  metric but "loss" with a value in [0, 1], --target-accuracy and the
//  summary's time_to_accuracy.  Best effort, like kd_client_telemetry:
//  never blocks.  Returns 0, or -1 when there is no monitor to report to.
int
    kd_client_report_eval (kd_client_t *self, const char *metric, double value, double loss,
                           uint64_t version);

//  Leave the cluster now: the scheduler stops counting us at once.
//  reason is logged by the scheduler.  Returns 0 or -1.
int
    kd_client_leave (kd_client_t *self, const char *reason);

//  True once the scheduler sent STOP or a signal arrived.
bool
    kd_client_stopped (kd_client_t *self);

//  Hold one lease ahead (off by default; ASP and SSP only; call before
//  kd_client_register).  Every RELEASE then also names the rows of the
//  next clock (kd_client_ahead_rows), so that their gradient can be
//  computed while this clock's push, arrival and pull travel: another
//  thread may compute on the ahead rows and a model pulled earlier while
//  the one thread that drives the client pushes, arrives and pulls.  The
//  gradient pushed for clock c counts as computed on the model pulled
//  after the RELEASE of clock c - 1 (the first clock after a start or a
//  readmission: on the pull after its own RELEASE), and the client names
//  that pull's versions as its base.  So pull once per clock, into a
//  buffer of its own if another thread still computes on the last one.
//  Under BSP, LSP, ALSP and auto the scheduler refuses the registration
//  (kd_client_register returns -1, kd_client_failure says why), and a
//  scheduler that does not know lease ahead is refused by the client.
void
    kd_client_set_lease_ahead (kd_client_t *self, bool on);
//  With a lease ahead: the rows of the lease ahead, the next clock's, as
//  the last RELEASE (kd_client_wait_start or kd_client_arrive) named them;
//  *n rows (0 without a lease ahead).  Borrowed: valid until the next
//  kd_client_arrive.  The next RELEASE names them as its rows, unless it
//  readmitted the worker, whose lease is then new.
const uint64_t *
    kd_client_ahead_rows (kd_client_t *self, size_t *n);
//  With a lease ahead: true when the last RELEASE admitted the worker (the
//  first after START, or a readmission), whose lease is then new and not
//  the one named ahead before: a gradient computed ahead is not for it.
bool
    kd_client_admitted (kd_client_t *self);
//  Why the client gave up, when a call returned -1 for it: the scheduler's
//  reason for refusing the registration, or the WELCOME or START it could
//  not serve; "" otherwise.
const char *
    kd_client_failure (kd_client_t *self);

//  Under BSP, LSP and ALSP, send the next pull with ARRIVE (on by default):
//  each shard holds it until the commit that releases us and answers then,
//  so the new values arrive with RELEASE instead of a round trip after it.
void
    kd_client_set_pull_ahead (kd_client_t *self, bool on);

//  Shared memory with the shards on this host (on by default): a shard that
//  shares this host's boot id, pid and network namespace reads our gradient from a
//  region we map, and we copy its values from a snapshot it maps, instead
//  of both crossing TCP.  Off, or under CURVE, or for fp16/bf16 and keyed
//  models, or slices under 16 KiB, every payload stays on TCP.  The regions
//  are memfds: nothing is left behind when a process dies.
void
    kd_client_set_shm (kd_client_t *self, bool on);

//  The values' type on the wire for pushes and pulls: "fp32" (the default),
//  "fp16" or "bf16".  The shards keep float32 master weights and convert;
//  the client converts its gradient and the pulled values (fp16 with the
//  CPU's F16C instructions where it has them).  Returns 0, or -1 for an
//  unknown name.
int
    kd_client_set_wire_dtype (kd_client_t *self, const char *name);

//  Counters: gradients of ours the scheduler dropped, gradients refused
//  (not finite, or over a shard's max-grad-norm: never applied, and their
//  rows go back to the lease queue), and pulls the SSP cache saved.
uint64_t
    kd_client_dropped (kd_client_t *self);
uint64_t
    kd_client_refused (kd_client_t *self);
uint64_t
    kd_client_pulls_skipped (kd_client_t *self);

#ifdef __cplusplus
}
#endif

#endif
