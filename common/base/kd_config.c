/*  kd_config: the one table of Kudus settings, and its loader.

    Each setting is declared once below.  A program sees only the settings
    whose service mask includes it; one name may appear twice with different
    masks when services need different defaults (bind).  Values are kept as
    text and as a parsed number, so getters cost a lookup and no parsing.
*/
#include "kd_config.h"
#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifndef KUDUS_DEFAULT_DATA_DIR
#define KUDUS_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"
#endif

#define S_SCH   KD_SVC_SCHEDULER
#define S_SHD   KD_SVC_SHARD
#define S_MON   KD_SVC_MONITOR
#define S_WRK   KD_SVC_WORKER
#define S_LOC   KD_SVC_LOCAL
#define S_TAIL  KD_SVC_TAIL
#define S_EXP   KD_SVC_EXPERIMENT
#define S_PRF   KD_SVC_PERF
#define S_SVC   KD_SVC_SERVICES
#define S_DASH  KD_SVC_DASHBOARD
#define S_LINK  KD_SVC_LINKD
#define S_AGG   KD_SVC_AGGREGATOR
#define S_CHS   KD_SVC_CHAOS
#define S_XPT   KD_SVC_EXPORT

//  The table.  Bounds are inclusive; for strings max is the longest value.
static const kd_setting_t s_table [] = {
    //  Wiring
    { "bind", KD_CT_STRING, "tcp://*:7000", 0, 256, NULL, S_SCH,
      "endpoint the scheduler's ROUTER binds" },
    { "bind", KD_CT_STRING, "tcp://*:7100", 0, 256, NULL, S_SHD,
      "endpoint the shard's ROUTER binds (port 0 or * picks a free one)" },
    { "bind", KD_CT_STRING, "tcp://*:7010", 0, 256, NULL, S_AGG,
      "endpoint the barrier aggregator's workers connect to (their --scheduler)" },
    { "max-batch", KD_CT_INT, "1024", 1, 4096, NULL, S_AGG,
      "messages the aggregator bundles into one RELAY to the scheduler at most" },
    { "bind", KD_CT_STRING, "tcp://*:7001", 0, 256, NULL, S_MON,
      "endpoint the monitor's telemetry ROUTER binds" },
    { "metrics-bind", KD_CT_STRING, "*:7003", 0, 256, NULL, S_MON,
      "Prometheus endpoint GET /metrics, HOST:PORT ('' = off)" },
    { "pub-bind", KD_CT_STRING, "tcp://*:7002", 0, 256, NULL, S_MON,
      "endpoint the monitor's PUB stream binds" },
    { "advertise", KD_CT_STRING, "", 0, 256, NULL, S_SHD | S_SCH | S_MON,
      "endpoint other peers use to reach this service (default: derived from bind)" },
    { "scheduler", KD_CT_STRING, "tcp://127.0.0.1:7000", 0, 256, NULL,
      S_SHD | S_MON | S_WRK | S_AGG, "scheduler endpoint to connect to" },
    { "monitor", KD_CT_STRING, "tcp://127.0.0.1:7001", 0, 256, NULL,
      S_WRK, "monitor telemetry endpoint to connect to" },
    { "monitor-pub", KD_CT_STRING, "tcp://127.0.0.1:7002", 0, 256, NULL,
      S_SCH, "monitor stream the scheduler follows (ALSP telemetry)" },
    { "name", KD_CT_STRING, "", 0, 128, NULL, S_SVC,
      "stable instance name used to rejoin with the same rank (default host-pid)" },
    { "log-level", KD_CT_ENUM, "info", 0, 0, "error|warn|info|debug", KD_SVC_ALL,
      "logging verbosity" },
    { "heartbeat-ms", KD_CT_INT, "1000", 50, 60000, NULL, S_SVC | S_LOC,
      "heartbeat interval in ms" },
    { "liveness", KD_CT_INT, "3", 1, 100, NULL, S_SVC | S_LOC,
      "missed heartbeats before a peer is declared dead" },
    { "max-msg-bytes", KD_CT_INT, "268435456", 4096, 2147483647, NULL, S_SVC | S_AGG,
      "largest message a network socket accepts (ZMQ_MAXMSGSIZE)" },
    { "request-timeout-ms", KD_CT_INT, "15000", 100, 600000, NULL, S_WRK | S_MON,
      "how long a request to a shard or the scheduler may take before it is an error" },
    //  Security (kd_curve): one switch for every network socket.
    { "curve", KD_CT_BOOL, "false", 0, 0, NULL, KD_SVC_ALL,
      "CURVE encryption and authentication on every network socket (keys from keys-dir)" },
    { "keys-dir", KD_CT_STRING, "/etc/kudus/keys", 0, 200, NULL, KD_SVC_ALL,
      "CURVE keys from 'kudus keygen': server.cert[_secret], client.cert[_secret], allowed/" },
    { "threads", KD_CT_INT, "1", 1, 64, NULL, S_WRK | S_MON | S_SHD,
      "OpenBLAS threads in this process" },

    //  Cluster shape and training (the scheduler hands these to its peers)
    { "shards", KD_CT_INT, "2", 1, 64, NULL, S_SCH | S_LOC,
      "parameter shards to wait for before training starts" },
    { "replicas", KD_CT_INT, "1", 1, 8, NULL, S_SCH | S_LOC,
      "replicas of each key range, chained (1: none); shards x replicas shard processes run" },
    { "min-workers", KD_CT_INT, "4", 1, 1024, NULL, S_SCH,
      "workers to wait for before training starts" },
    { "workers", KD_CT_INT, "4", 0, 256, NULL, S_LOC,
      "built-in workers to start" },
    { "external-workers", KD_CT_INT, "0", 0, 256, NULL, S_LOC,
      "workers of any kind (kd_client, Python) the cluster also waits for" },
    { "model", KD_CT_ENUM, "softmax", 0, 0, "softmax|mlp|external|sparse-lr", S_SCH | S_WRK | S_LOC,
      "model to train (external: declared and computed by kd_client workers; sparse-lr: "
      "keyed logistic regression on train-file)" },
    { "train-file", KD_CT_STRING, "", 0, 1024, NULL, S_WRK | S_LOC,
      "sparse-lr: the training set, a LIBSVM file (gzipped or not)" },
    { "features", KD_CT_INT, "0", 0, 4294967295.0, NULL, S_WRK | S_LOC,
      "sparse-lr: features in the model (0: the train-file's largest index)" },
    { "hidden", KD_CT_INT, "128", 1, 4096, NULL, S_SCH | S_LOC,
      "hidden units of the mlp model" },
    { "lr", KD_CT_DOUBLE, "0.02", 1e-6, 100, NULL, S_SCH | S_LOC,
      "learning rate" },
    { "momentum", KD_CT_DOUBLE, "0.9", 0, 0.999, NULL, S_SCH | S_LOC,
      "SGD momentum applied by the shards (0 = plain SGD); sgd and nesterov" },
    { "optimizer", KD_CT_ENUM, "sgd", 0, 0, "sgd|momentum|nesterov|adagrad|adam|adamw|ftrl",
      S_SCH | S_LOC, "update rule the shards apply (momentum = sgd)" },
    { "beta1", KD_CT_DOUBLE, "0.9", 0, 0.9999, NULL, S_SCH | S_LOC,
      "adam, adamw: first-moment decay" },
    { "beta2", KD_CT_DOUBLE, "0.999", 0, 0.999999, NULL, S_SCH | S_LOC,
      "adam, adamw: second-moment decay" },
    { "eps", KD_CT_DOUBLE, "1e-08", 1e-12, 1, NULL, S_SCH | S_LOC,
      "adagrad, adam, adamw: term added to the denominator" },
    { "weight-decay", KD_CT_DOUBLE, "0", 0, 1, NULL, S_SCH | S_LOC,
      "L2 penalty (adamw: decoupled weight decay)" },
    { "l1", KD_CT_DOUBLE, "0", 0, 1e6, NULL, S_SCH | S_LOC,
      "ftrl: L1 penalty (keys whose |z| stays under it are exactly 0)" },
    { "l2", KD_CT_DOUBLE, "0", 0, 1e6, NULL, S_SCH | S_LOC,
      "ftrl: L2 penalty" },
    { "ftrl-beta", KD_CT_DOUBLE, "1", 1e-12, 1e6, NULL, S_SCH | S_LOC,
      "ftrl: beta of the per-key learning rate alpha / (beta + sqrt (n))" },
    { "lr-schedule", KD_CT_STRING, "constant", 1, 63, NULL, S_SCH | S_LOC,
      "learning-rate schedule: constant, step:EVERY:GAMMA, cosine:STEPS (counted in schedule-unit)" },
    { "warmup-steps", KD_CT_INT, "0", 0, 100000000, NULL, S_SCH | S_LOC,
      "linear learning-rate warm-up over this many steps (or samples: schedule-unit)" },
    { "schedule-unit", KD_CT_ENUM, "steps", 0, 0, "steps|samples", S_SCH | S_LOC,
      "what lr-schedule and warmup-steps count: optimizer steps, or training samples applied" },
    { "batch", KD_CT_INT, "32", 1, 8192, NULL, S_SCH | S_LOC,
      "minibatch size per worker per iteration" },
    { "seed", KD_CT_INT, "42", 0, 9007199254740991.0, NULL, S_SCH | S_LOC,
      "seed for parameter init, data order and injected heterogeneity" },
    { "epochs", KD_CT_DOUBLE, "10", 0.001, 1000, NULL, S_SCH | S_LOC,
      "passes over the training set before training stops" },
    { "target-accuracy", KD_CT_DOUBLE, "0", 0, 1, NULL, S_SCH | S_LOC,
      "stop once test accuracy (sparse-lr: the held-out AUC) reaches this (0 = never)" },
    { "max-seconds", KD_CT_DOUBLE, "0", 0, 1e6, NULL, S_SCH | S_LOC,
      "stop after this many seconds of training (0 = no limit)" },
    { "summary", KD_CT_STRING, "", 0, 1024, NULL, S_SCH | S_LOC,
      "write the final JSON summary to this file" },
    { "history-file", KD_CT_STRING, "", 0, 1024, NULL, S_SCH | S_SHD,
      "append the run's history here, one JSON line per lease, commit and apply (docs/chaos.md; '' = off)" },
    { "history-crc-every", KD_CT_INT, "100", 0, 1000000000, NULL, S_SHD,
      "with history-file: record the params_crc after every version that is a multiple of this, so the checker compares replicas there too (0 = only at the end)" },
    { "history-dir", KD_CT_STRING, "", 0, 1000, NULL, S_LOC,
      "write every service's history (scheduler.jsonl, shard-N.jsonl) and the restarts (local.jsonl) into this directory ('' = off)" },

    //  Consistency
    { "consistency", KD_CT_ENUM, "bsp", 0, 0, "bsp|asp|ssp|lsp|alsp|auto", S_SCH | S_LOC,
      "synchronization model (auto: BSP, LSP or ALSP, chosen and switched from live speeds)" },
    { "staleness", KD_CT_INT, "3", 0, 1000, NULL, S_SCH | S_LOC,
      "SSP: clocks a worker may run ahead of the slowest; LSP/ALSP: commits of its group a late gradient may miss" },
    { "staleness-weight", KD_CT_STRING, "inverse", 0, 64, NULL, S_SCH | S_LOC,
      "LSP/ALSP weight f(tau) of a gradient tau versions stale: inverse = 1/(1+tau), none, exp:LAMBDA" },
    { "quota", KD_CT_INT, "0", 0, 1024, NULL, S_SCH | S_LOC,
      "LSP: workers that release a phase (0 = ceil(quota-ratio * N))" },
    { "quota-ratio", KD_CT_DOUBLE, "0.75", 0.01, 1, NULL, S_SCH | S_LOC,
      "LSP quota as a fraction of the workers; ALSP kappa" },
    { "window-ms", KD_CT_INT, "0", 0, 600000, NULL, S_SCH | S_LOC,
      "LSP: release after this many ms once 2 workers arrived (0 = off)" },
    { "barrier", KD_CT_ENUM, "adaptive", 0, 0, "adaptive|quota", S_SCH | S_LOC,
      "LSP/ALSP/auto phase release: adaptive (wait for whoever is expected within the slack) or quota; an explicit quota or window-ms means quota" },
    { "barrier-slack", KD_CT_DOUBLE, "0.25", 0.01, 10, NULL, S_SCH | S_LOC,
      "adaptive barrier: how late a worker may be expected, as a fraction of the phase, and still be waited for" },
    { "key-encoding", KD_CT_ENUM, "plain", 0, 0, "plain|delta", S_SCH | S_LOC,
      "keyed models: how workers send their keys, plain uint64s or varint deltas (a third of the bytes for keys drawn from a large table, but more CPU: worth it on slow links, not on loopback)" },
    { "phase-path", KD_CT_ENUM, "classic", 0, 0, "classic|short", S_SCH | S_LOC,
      "BSP/LSP/ALSP: classic (a worker sends ARRIVE after every PUSH_OK) or short (each shard tells the scheduler STAGED, so ARRIVE goes with the pushes: one message hop fewer a phase; protocol 9.3.1)" },
    { "barrier-spread", KD_CT_DOUBLE, "auto", 0, 10, "auto", S_SCH | S_LOC,
      "adaptive barrier: also wait for a worker expected within this many half-ranges of its last 5 iteration times (noisy speeds; 0 = the slack only; auto = 1 at first and while the typical worker's times stray more than the slack, else 0)" },
    { "group-ratio", KD_CT_DOUBLE, "1.3", 1.01, 100, NULL, S_SCH | S_LOC,
      "ALSP: speed ratio between neighbours that starts a new group" },
    { "min-group", KD_CT_INT, "1", 1, 1024, NULL, S_SCH | S_LOC,
      "ALSP: smallest group (1: a lone straggler gets its own group)" },
    { "max-groups", KD_CT_INT, "4", 1, 64, NULL, S_SCH | S_LOC,
      "ALSP: most groups" },
    { "group-staleness", KD_CT_INT, "8", 1, 4096, NULL, S_SCH | S_LOC,
      "ALSP: commits a group may make while another group's phase is open" },
    { "group-step", KD_CT_ENUM, "fastest", 0, 0, "each|fastest", S_SCH | S_LOC,
      "ALSP/auto with several groups: every group's commit is an optimizer step (each), or only the fastest group's, and a slower group's update rides in its next one (fastest)" },
    { "regroup-dwell", KD_CT_DOUBLE, "1", 0, 3600, NULL, S_SCH | S_LOC,
      "ALSP: seconds between regroups at least" },
    { "speed-source", KD_CT_ENUM, "arrivals", 0, 0, "arrivals|telemetry", S_SCH | S_LOC,
      "ALSP/auto worker speeds: arrivals (the scheduler times release to arrival) or telemetry (the monitor's compute, push and pull times from monitor-pub; arrivals fill the gaps)" },
    { "rejoin-wait-ms", KD_CT_INT, "2000", 0, 600000, NULL, S_SCH | S_LOC,
      "a key range that lost every replica: how long the first replica back waits for the others, "
      "so that the newest checkpoint leads (0 = the first back leads)" },
    { "final-pull-ms", KD_CT_INT, "2000", 0, 60000, NULL, S_SCH | S_LOC,
      "external model: after STOP, how long the shards keep serving the final version while workers "
      "pull it into their modules (ends early once every worker left; 0 = stop at once)" },
    { "status-ms", KD_CT_INT, "500", 50, 10000, NULL, S_SCH,
      "how often the scheduler reports its state to the monitor" },

    //  Shard durability
    { "checkpoint-dir", KD_CT_STRING, "", 0, 1024, NULL, S_SHD | S_LOC,
      "directory for this shard's checkpoints; a restart restores the newest valid one (empty = off)" },
    { "checkpoint-every", KD_CT_STRING, "5s", 0, 32, NULL, S_SHD | S_LOC,
      "checkpoint interval: seconds (\"5s\") or versions (\"200\" or \"200v\")" },
    { "checkpoint-keep", KD_CT_INT, "3", 1, 100, NULL, S_SHD,
      "checkpoints kept on disk; older ones are deleted" },

    //  Per-peer limits and poisoned input (kd_guard, the shard's PUSH)
    { "max-connections", KD_CT_INT, "4096", 0, 1000000, NULL, (S_SVC & ~KD_SVC_WORKER) | S_AGG,
      "connections a service's ROUTER keeps open at most; more are closed at once (0 = no limit)" },
    { "max-malformed", KD_CT_INT, "100", 0, 1000000, NULL, (S_SVC & ~KD_SVC_WORKER) | S_AGG,
      "malformed or unknown messages after which a peer is disconnected (0 = never)" },
    { "max-registrations-per-key", KD_CT_INT, "1024", 1, 1000000, NULL, S_SCH,
      "names one client key (CURVE) or one address (without CURVE) may register" },
    { "max-staged", KD_CT_INT, "8192", 1, 8192, NULL, S_SHD,
      "gradients a shard holds staged for a COMMIT at most" },
    { "max-staged-bytes", KD_CT_INT, "4294967296", 4096, 1099511627776.0, NULL, S_SHD,
      "bytes of staged gradients a shard holds at most" },
    { "max-staged-per-peer", KD_CT_INT, "64", 1, 8192, NULL, S_SHD,
      "gradients one connection (one worker) may have staged at a shard at once" },
    { "max-parked", KD_CT_INT, "4096", 1, 1000000, NULL, S_SHD,
      "pulls waiting for a version a shard holds at most (one per connection)" },
    { "staged-ttl", KD_CT_DOUBLE, "900", 0, 1e6, NULL, S_SHD,
      "seconds of commits that pass a staged gradient over before it is dropped (0 = no limit); one whose rank had a later clock committed goes at once" },
    { "parked-ttl", KD_CT_DOUBLE, "60", 0, 1e6, NULL, S_SHD,
      "seconds a parked pull may wait for its version before it is dropped (0 = no limit); clients ask again well before" },
    { "max-grad-norm", KD_CT_DOUBLE, "0", 0, 1e30, NULL, S_SHD | S_LOC,
      "bound on the L2 norm of each shard's slice of a gradient (0 = off); see grad-norm-action" },
    { "grad-norm-action", KD_CT_ENUM, "clip", 0, 0, "clip|refuse", S_SHD | S_LOC,
      "a slice over max-grad-norm is scaled down to it (clip) or refused (refuse)" },

    //  kudus gen-ctr: a synthetic click log
    { "rows", KD_CT_INT, "100000", 1, 1e12, NULL, KD_SVC_GENCTR,
      "rows to write" },
    { "test-rows", KD_CT_INT, "0", 0, 1e9, NULL, KD_SVC_GENCTR,
      "held-out rows from the same planted model, written to OUT.test (OUT.test.gz)" },
    { "features", KD_CT_INT, "1000000", 1, 1e12, NULL, KD_SVC_GENCTR,
      "features in the model; indices run from 1 to this" },
    { "zipf", KD_CT_DOUBLE, "1.1", 0.5, 5, NULL, KD_SVC_GENCTR | S_PRF,
      "exponent of the power law of feature frequencies (the k-th commonest has weight k^-zipf)" },
    { "per-row", KD_CT_INT, "40", 1, 65536, NULL, KD_SVC_GENCTR | S_PRF,
      "distinct features in each row" },
    { "vocab", KD_CT_INT, "0", 0, 1e12, NULL, KD_SVC_GENCTR | S_PRF,
      "rows draw from this many commonest features only, scattered over every index (0: all; same vocab, same touched keys at any size)" },
    { "seed", KD_CT_INT, "42", 0, 9007199254740991.0, NULL, KD_SVC_GENCTR,
      "seed of the planted model and of the rows: the same seed writes the same file" },

    //  Monitor
    { "eval-interval", KD_CT_DOUBLE, "0.5", 0, 3600, NULL, S_MON | S_WRK | S_LOC,
      "seconds between test-set evaluations, the monitor's and an evaluator's (0 = every new version)" },
    { "evaluator", KD_CT_BOOL, "false", 0, 0, NULL, S_WRK | S_LOC,
      "kudus-worker: be an evaluator (pull, score the test set, report to the monitor; "
      "no training); kudus local: start one beside the workers" },
    { "eval-delay-ms", KD_CT_DOUBLE, "0", 0, 600000, NULL, S_WRK,
      "an evaluator's emulated scoring time per test batch of 1000 rows: a sleep that answers "
      "nothing, as slow scoring (tests)" },
    { "snapshot-ms", KD_CT_INT, "0", 0, 60000, NULL, S_MON | S_LOC,
      "copy the model this often for the accuracy curve, evaluated at the end (0 = off)" },
    { "test-file", KD_CT_STRING, "", 0, 1024, NULL, S_MON | S_LOC,
      "sparse-lr: the held-out LIBSVM file the monitor evaluates (AUC, log loss); empty: none" },
    { "eval-rows", KD_CT_INT, "100000", 1, 10000000, NULL, S_MON | S_LOC,
      "sparse-lr: held-out rows the monitor reads from test-file at most" },
    { "curve-file", KD_CT_STRING, "", 0, 1024, NULL, S_MON | S_LOC,
      "write the accuracy-against-time curve of the snapshots here (CSV)" },
    { "publish-ms", KD_CT_INT, "500", 50, 1000, NULL, S_MON,
      "how often the stream publishes stats" },
    { "data-dir", KD_CT_STRING, KUDUS_DEFAULT_DATA_DIR, 0, 1024, NULL,
      S_WRK | S_MON | S_LOC, "directory with the Fashion-MNIST IDX files" },

    //  Workers and heterogeneity
    { "no-pull-ahead", KD_CT_BOOL, "false", 0, 0, NULL, S_WRK | S_LOC,
      "BSP, LSP, ALSP: pull after RELEASE instead of sending the pull with ARRIVE" },
    { "no-shm", KD_CT_BOOL, "false", 0, 0, NULL, S_SHD | S_WRK | S_LOC,
      "keep every payload on TCP, even between a worker and a shard on one host" },
    { "wire-dtype", KD_CT_ENUM, "fp32", 0, 0, "fp32|fp16|bf16", S_WRK | S_LOC,
      "values on the wire for pushes and pulls; the shards keep fp32 master weights" },
    { "inject-nan-every", KD_CT_INT, "0", 0, 1000000000, NULL, S_WRK | S_LOC,
      "fault injection: every Nth gradient of a built-in worker gets a NaN (0 = never)" },
    { "delay-ms", KD_CT_DOUBLE, "0", 0, 600000, NULL, S_WRK | S_LOC,
      "emulated compute per iteration: the gradient takes this long, real work included, times the speed factor" },
    { "speed", KD_CT_STRING, "", 0, 4096, NULL, S_WRK,
      "this worker's speed schedule (kd_speed grammar, docs/experiments.md); empty = constant 1" },
    { "rank", KD_CT_INT, "-1", -1, 1023, NULL, S_WRK,
      "rank to ask the scheduler for (-1 = any free rank)" },
    { "slowdown", KD_CT_DOUBLE, "1", 1, 1000, NULL, S_WRK,
      "this worker's slowdown factor on its emulated and real compute" },
    { "straggler", KD_CT_LIST, "", 0, 4096, NULL, S_LOC,
      "RANK:FACTOR, a static straggler (repeatable)" },
    { "speeds", KD_CT_STRING, "", 0, 131000, NULL, S_LOC,
      "speed schedule of each worker (kd_speed specs, docs/experiments.md), worker 0's first, joined with ';' (missing or empty = constant 1)" },
    { "hetero", KD_CT_ENUM, "none", 0, 0, "none|dynamic", S_LOC | S_WRK,
      "dynamic: every hetero-period seconds a seeded subset changes speed" },
    { "hetero-period", KD_CT_DOUBLE, "15", 0.1, 3600, NULL, S_LOC | S_WRK,
      "seconds between speed changes with --hetero dynamic" },

    //  kudus local
    { "fan-in", KD_CT_INT, "0", 0, 1024, NULL, S_LOC,
      "workers per barrier aggregator (kudus aggregate, at base-port + 50 + i); 0 = none, "
      "every worker talks to the scheduler" },
    { "base-port", KD_CT_INT, "7000", 1024, 64000, NULL, S_LOC,
      "first port of the local cluster; all ports shift by base-port - 7000" },
    { "bin-dir", KD_CT_STRING, "", 0, 1024, NULL, S_LOC,
      "where the service binaries are (default: beside kudus)" },
    { "quiet", KD_CT_BOOL, "false", 0, 0, NULL, S_LOC,
      "do not echo the services' logs" },
    { "restart", KD_CT_ENUM, "on-failure", 0, 0, "on-failure|no", S_LOC,
      "start a shard, the monitor, an aggregator or a worker again when it dies without being asked to (a shard only with a replica or a checkpoint), as compose's restart: on-failure" },

    //  kudus chaos: a seeded fault schedule against a local cluster; flags
    //  after "--" go to kudus local as they are
    { "seed", KD_CT_INT, "1", 0, 9007199254740991.0, NULL, S_CHS,
      "chaos: seed of the fault schedule, and of the training (the same seed, the same schedule)" },
    { "seconds", KD_CT_DOUBLE, "60", 5, 1e6, NULL, S_CHS,
      "chaos: how long faults are injected; training goes on for settle-seconds after" },
    { "minutes", KD_CT_DOUBLE, "0", 0, 1e5, NULL, S_CHS,
      "chaos: the same in minutes (0 = use seconds)" },
    { "settle-seconds", KD_CT_DOUBLE, "15", 1, 3600, NULL, S_CHS,
      "chaos: training after the last fault, so the cluster is quiet when it stops" },
    { "fault-gap", KD_CT_DOUBLE, "6", 1, 3600, NULL, S_CHS,
      "chaos: mean seconds between faults (each gap drawn in [gap/2, 3gap/2])" },
    { "faults", KD_CT_STRING, "worker,primary,backup,monitor,pause,flood", 1, 256, NULL, S_CHS,
      "chaos: fault kinds to draw from: worker, primary, backup, monitor (kill -9), pause (SIGSTOP, SIGCONT), flood (malformed messages), partition (a worker's or shard's link down, then up; needs netns), slow (its link held to a few Mbit/s for a while; needs netns)" },
    { "netns", KD_CT_BOOL, "false", 0, 0, NULL, S_CHS,
      "chaos: run the cluster with kudus local --netns (root): each service in a network namespace of its own, so partition faults can cut one off and slow faults shape its link" },
    { "out", KD_CT_STRING, "", 0, 900, NULL, S_CHS,
      "chaos: directory for the schedule, the histories, the cluster's log and the report (default /tmp/kudus-chaos-SEED)" },
    { "shards", KD_CT_INT, "2", 1, 16, NULL, S_CHS,
      "chaos: key ranges" },
    { "replicas", KD_CT_INT, "2", 2, 4, NULL, S_CHS,
      "chaos: replicas of each range (2 at least, so a primary may die)" },
    { "workers", KD_CT_INT, "4", 1, 64, NULL, S_CHS,
      "chaos: built-in workers" },
    { "consistency", KD_CT_ENUM, "bsp", 0, 0, "bsp|asp|ssp|lsp|alsp|auto", S_CHS,
      "chaos: synchronization model of the run" },
    { "base-port", KD_CT_INT, "7000", 1024, 64000, NULL, S_CHS,
      "chaos: first port of the cluster (as kudus local's)" },
    { "bin-dir", KD_CT_STRING, "", 0, 1024, NULL, S_CHS,
      "chaos: where the service binaries are (default: beside kudus)" },
    { "sample-ms", KD_CT_INT, "1000", 100, 60000, NULL, S_CHS,
      "chaos: how often the descriptors and RSS of every service are sampled" },
    { "dry-run", KD_CT_BOOL, "false", 0, 0, NULL, S_CHS,
      "chaos: print and save the schedule, run nothing" },

    //  kudus experiment
    { "out", KD_CT_STRING, "", 0, 1024, NULL, S_EXP,
      "experiment: directory for each run's summary, curve and log (default /tmp/kudus-experiments/SCENARIO)" },
    { "results", KD_CT_STRING, "", 0, 1024, NULL, S_EXP,
      "experiment: JSON-lines file of finished runs, appended to and skipped on rerun (default docs/results/SCENARIO.jsonl)" },
    { "seeds-only", KD_CT_INT, "0", 0, 1000, NULL, S_EXP,
      "experiment: run only the scenario's first N seeds (0 = all)" },
    { "models", KD_CT_STRING, "", 0, 1024, NULL, S_EXP,
      "experiment: run only these model entries, comma-separated (empty = all)" },
    { "build-id", KD_CT_STRING, "", 0, 63, NULL, S_EXP,
      "experiment: the build named in every record (empty = git describe --always --dirty of the current directory)" },

    //  kudus bench (bench/*.c): lists are comma-separated; sizes take K/M
    { "sizes", KD_CT_STRING, "4K,64K,1M,16M,64M", 0, 256, NULL, S_PRF,
      "bench pushpull: value sizes in bytes, split evenly over the shards" },
    { "shards", KD_CT_STRING, "1,2,4", 0, 64, NULL, S_PRF,
      "bench pushpull: shard counts (real kudus-shard processes)" },
    { "inflight", KD_CT_STRING, "1,4,8", 0, 64, NULL, S_PRF,
      "bench pushpull: requests in flight per shard" },
    { "dtypes", KD_CT_STRING, "fp32", 0, 64, NULL, S_PRF,
      "bench pushpull: wire dtypes to time (fp32, fp16, bf16), each as a ratio to fp32 when both run" },
    { "staged-echo", KD_CT_BOOL, "false", 0, 0, NULL, S_PRF,
      "bench pushpull: also time an echo that keeps pushes and answers pulls from a fixed buffer, as a shard does" },
    { "workers", KD_CT_STRING, "8,64,256,1024", 0, 128, NULL, S_PRF,
      "bench barrier: fake workers, each its own DEALER" },
    { "fan-in", KD_CT_STRING, "0,32", 0, 64, NULL, S_PRF,
      "barrier: workers per barrier aggregator, a list (0 = none: every worker talks to the scheduler)" },
    { "consistency", KD_CT_STRING, "bsp,lsp", 0, 64, NULL, S_PRF,
      "bench barrier: consistency models to run" },
    { "phases", KD_CT_INT, "40", 2, 100000, NULL, S_PRF,
      "bench barrier: phases timed per repeat" },
    { "models", KD_CT_STRING, "softmax,mlp", 0, 64, NULL, S_PRF,
      "bench compute: models to time" },
    { "iterations", KD_CT_INT, "300", 1, 1000000, NULL, S_PRF,
      "bench compute: gradient batches timed per repeat" },
    { "batch", KD_CT_INT, "32", 1, 8192, NULL, S_PRF,
      "bench compute and phase: minibatch rows" },
    { "hidden", KD_CT_INT, "128", 1, 4096, NULL, S_PRF,
      "bench compute and phase: mlp hidden units" },
    { "run-seconds", KD_CT_DOUBLE, "0.12", 0.01, 60, NULL, S_PRF,
      "bench pushpull: how long each timed run issues operations (at least 8, at most 4000)" },
    { "repeat", KD_CT_INT, "5", 1, 100, NULL, S_PRF,
      "bench: runs per configuration; the median is reported" },
    { "json", KD_CT_BOOL, "false", 0, 0, NULL, S_PRF,
      "bench: one JSON object per configuration per line instead of the table" },
    { "base-port", KD_CT_INT, "7400", 1024, 64000, NULL, S_PRF,
      "bench: first port of the services it starts" },
    { "bin-dir", KD_CT_STRING, "", 0, 1024, NULL, S_PRF,
      "bench: where the service binaries are (default: beside kudus)" },
    { "baseline-bin-dir", KD_CT_STRING, "", 0, 1024, NULL, S_PRF,
      "bench barrier (asp, ssp): also measure the scheduler of this other build, for a ratio" },
    { "data-dir", KD_CT_STRING, KUDUS_DEFAULT_DATA_DIR, 0, 1024, NULL, S_PRF,
      "bench compute: directory with the Fashion-MNIST IDX files" },
    { "sparse-features", KD_CT_STRING, "1000000,10000000,100000000", 0, 256, NULL, S_PRF,
      "bench sparse: feature counts of the sparse-lr runs (bytes per iteration against model size)" },
    { "sparse-rows", KD_CT_INT, "200000", 1000, 1e9, NULL, S_PRF,
      "bench sparse: rows of each generated click log" },
    { "sparse-workers", KD_CT_INT, "4", 1, 64, NULL, S_PRF,
      "bench sparse: built-in sparse-lr workers of each run" },
    { "sparse-shards", KD_CT_INT, "4", 1, 16, NULL, S_PRF,
      "bench sparse: shards of each run" },
    { "sparse-batch", KD_CT_INT, "100", 1, 8192, NULL, S_PRF,
      "bench sparse: rows per worker per iteration" },
    { "sparse-seconds", KD_CT_DOUBLE, "20", 1, 3600, NULL, S_PRF,
      "bench sparse: training time of each run (the first fifth is warm-up)" },
    { "sparse-epochs", KD_CT_DOUBLE, "0", 0, 1000, NULL, S_PRF,
      "bench sparse: train each run for this many epochs instead of sparse-seconds (0 = timed)" },
    { "sparse-rate", KD_CT_DOUBLE, "0.1", 1e-6, 100, NULL, S_PRF,
      "bench sparse: AdaGrad's learning rate for sparse-lr" },
    { "sparse-test-rows", KD_CT_INT, "20000", 0, 10000000, NULL, S_PRF,
      "bench sparse: held-out rows of each click log, for the AUC against the planted model's" },
    { "phase-workers", KD_CT_INT, "4", 1, 64, NULL, S_PRF,
      "bench phase: built-in MLP workers" },
    { "phase-shards", KD_CT_INT, "1", 1, 16, NULL, S_PRF,
      "bench phase: shards the MLP is split over" },
    { "phase-delay-ms", KD_CT_DOUBLE, "10", 0, 10000, NULL, S_PRF,
      "bench phase: emulated compute per iteration (the real compute counts within it)" },
    { "phase-seconds", KD_CT_DOUBLE, "10", 2, 3600, NULL, S_PRF,
      "bench phase: length of each run (the first fifth is warm-up)" },
    { "phase-path", KD_CT_STRING, "classic", 0, 16, NULL, S_PRF,
      "bench phase: the scheduler's phase path, classic, short or both (classic,short: each repeat runs both, taking turns at going first)" },
    { "phase-eval", KD_CT_STRING, "off,on", 0, 16, NULL, S_PRF,
      "bench phase: the monitor's test-set evaluation, off (only at the end), on (every 0.5 s) or both" },
    { "pull-keys", KD_CT_INT, "10000", 1, 10000000, NULL, S_PRF,
      "bench sparse: keys of a keyed pull, against a dense pull of as many floats" },
    { "sparse-parts", KD_CT_STRING, "pull,bytes", 0, 64, NULL, S_PRF,
      "bench sparse: parts to run: pull (keyed against dense), bytes (sparse-lr per iteration), pslite (ps-lite's sparse benchmark's shape, pull-keys keys)" },
    { "threads", KD_CT_INT, "1", 1, 64, NULL, S_PRF,
      "bench compute: OpenBLAS threads, as a worker would use" },
    { "bench-floats", KD_CT_INT, "0", 0, 67108864, NULL, S_SHD,
      "benchmarks only (kudus bench pushpull): hold this many floats at rank * n whatever the model (0 = off)" },
    { "bench-keys", KD_CT_INT, "0", 0, 1099511627776.0, NULL, S_SHD,
      "benchmarks only (kudus bench sparse): hold a keyed model of this many keys at rank * n (0 = off)" },

    { "dashboard", KD_CT_STRING, "", 0, 256, NULL, S_LOC,
      "also serve the live page (kudus dashboard) on this HOST:PORT ('' = off)" },
    { "netns", KD_CT_BOOL, "false", 0, 0, NULL, S_LOC,
      "every service in a network namespace of its own, on a bridge, with shaped links (root)" },
    { "link-delay-ms", KD_CT_DOUBLE, "0", 0, 10000, NULL, S_LOC,
      "--netns: one-way delay of every node's link to the switch, in user space (kudus linkd)" },
    { "link-rate-mbit", KD_CT_DOUBLE, "0", 0, 100000, NULL, S_LOC,
      "--netns: rate of every node's link, each way, with tbf (0 = no limit)" },
    { "link-loss", KD_CT_DOUBLE, "0", 0, 0.99, NULL, S_LOC,
      "--netns: probability that a packet is dropped on a node's link, each way" },
    { "link", KD_CT_LIST, "", 0, 4096, NULL, S_LOC,
      "--netns: a link override ROLE[:FIRST[-LAST]]=delay:MS,rate:MBIT,loss:P (repeatable; later wins)" },

    //  kudus tail
    { "json", KD_CT_BOOL, "false", 0, 0, NULL, S_TAIL,
      "print one JSON object per message instead of the table" },
    { "count", KD_CT_INT, "0", 0, 1e9, NULL, S_TAIL,
      "exit after this many messages (0 = follow forever)" },
    { "timeout", KD_CT_DOUBLE, "0", 0, 1e6, NULL, S_TAIL,
      "exit 1 if no message arrives for this many seconds (0 = wait forever)" },

    //  kudus linkd
    { "forward", KD_CT_LIST, "", 0, 1024, NULL, S_LINK,
      "LISTEN_IP:PORT=TARGET_IP:PORT, a connection to relay (repeatable)" },
    { "self-delay-ms", KD_CT_DOUBLE, "0", 0, 10000, NULL, S_LINK,
      "one-way delay of this node's own link" },
    { "peer-delay", KD_CT_LIST, "", 0, 16384, NULL, S_LINK,
      "IP=MS, the link delay of the peer at IP, added to a connection from it (repeatable)" },

    //  kudus export: checked here, written by the Python package
    { "scheduler", KD_CT_STRING, "", 0, 256, NULL, S_XPT,
      "export: a running cluster's scheduler to pull the current model from, tcp://HOST:PORT" },
    { "checkpoint-dir", KD_CT_STRING, "", 0, 1024, NULL, S_XPT,
      "export: a run's shard checkpoint directory (or its parent, one directory per shard) to read the final model from" },
    { "out", KD_CT_STRING, "", 0, 1024, NULL, S_XPT,
      "export: FILE.pt (a state_dict for torch.load + load_state_dict) or FILE.npz (numpy)" },
    { "like", KD_CT_STRING, "", 0, 1024, NULL, S_XPT,
      "export: FILE.py:NAME, a module (class, function or instance) whose parameter shapes the .pt takes" },
    { "timeout", KD_CT_DOUBLE, "30", 0.1, 3600, NULL, S_XPT,
      "export: with scheduler, seconds to wait for the cluster" },
    { "curve-keys", KD_CT_STRING, "", 0, 1024, NULL, S_XPT,
      "export: with scheduler, the CURVE keys folder of 'kudus keygen DIR' (as --curve --keys-dir DIR)" },
    { "samples", KD_CT_INT, "0", 0, 9007199254740991.0, NULL, S_XPT,
      "export: accepted and ignored (earlier versions pulled as a worker, which needed it)" },

    //  kudus dashboard
    { "monitor", KD_CT_STRING, "tcp://127.0.0.1:7002", 0, 256, NULL, S_DASH,
      "the monitor's PUB stream to follow" },
    { "listen", KD_CT_STRING, "127.0.0.1:8080", 0, 256, NULL, S_DASH,
      "HTTP address of the page, HOST:PORT (port 0 picks a free one)" },
    { "history", KD_CT_INT, "100000", 100, 10000000, NULL, S_DASH,
      "stream messages kept for a page that connects late (oldest go first)" },
};

#define S_TABLE_SIZE (sizeof s_table / sizeof s_table [0])
#define S_MAX_POSITIONAL 16

typedef struct {
    const kd_setting_t *setting;    //  row of the table
    char *text;                     //  current value as text
    double number;                  //  parsed value for numbers and bools
    bool is_set;                    //  came from a flag or the environment
} s_value_t;

struct _kd_config_t {
    unsigned service;               //  KD_SVC_* bit of this program
    char *program;                  //  name for --help
    s_value_t *values;              //  one per visible setting
    size_t count;                   //  values in use
    char *positional [S_MAX_POSITIONAL];  //  non-flag arguments
    int n_positional;               //  how many
};

//  Find a visible setting by name.
static s_value_t *
s_find (kd_config_t *self, const char *name)
{
    for (size_t i = 0; i < self->count; i++)
        if (strcmp (self->values [i].setting->name, name) == 0)
            return &self->values [i];
    return NULL;
}

//  Parse a bool from text.
static int
s_parse_bool (const char *text, bool *out)
{
    if (!strcasecmp (text, "1") || !strcasecmp (text, "true") || !strcasecmp (text, "yes")
    ||  !strcasecmp (text, "on")) {
        *out = true;
        return 0;
    }
    if (!strcasecmp (text, "0") || !strcasecmp (text, "false") || !strcasecmp (text, "no")
    ||  !strcasecmp (text, "off")) {
        *out = false;
        return 0;
    }
    return -1;
}

//  True when text is one of "a|b|c".
static bool
s_enum_has (const char *choices, const char *text)
{
    size_t len = strlen (text);
    const char *p = choices;
    while (p && *p) {
        const char *bar = strchr (p, '|');
        size_t n = bar ? (size_t) (bar - p) : strlen (p);
        if (n == len && strncmp (p, text, n) == 0)
            return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

//  Check and store one value; append for lists unless replacing the default.
static int
s_assign (s_value_t *value, const char *text, bool from_user, char *err, size_t err_size)
{
    const kd_setting_t *s = value->setting;
    double number = 0;
    if ((s->type == KD_CT_INT || s->type == KD_CT_DOUBLE) && s->choices
    &&  s_enum_has (s->choices, text))
        number = NAN;   //  a word the number also takes: the getter says NAN
    else
    if (s->type == KD_CT_INT || s->type == KD_CT_DOUBLE) {
        char *end = NULL;
        errno = 0;
        number = strtod (text, &end);
        if (!*text || *end || errno || !isfinite (number)) {
            snprintf (err, err_size, "setting '%s': '%s' is not a number", s->name, text);
            return -1;
        }
        if (s->type == KD_CT_INT && number != floor (number)) {
            snprintf (err, err_size, "setting '%s': '%s' is not a whole number", s->name, text);
            return -1;
        }
        if (number < s->min || number > s->max) {
            snprintf (err, err_size, "setting '%s': %s is out of range [%g, %g]",
                      s->name, text, s->min, s->max);
            return -1;
        }
    }
    else
    if (s->type == KD_CT_BOOL) {
        bool b;
        if (s_parse_bool (text, &b)) {
            snprintf (err, err_size, "setting '%s': '%s' is not a boolean", s->name, text);
            return -1;
        }
        number = b;
    }
    else
    if (s->type == KD_CT_ENUM) {
        if (!s_enum_has (s->choices, text)) {
            snprintf (err, err_size, "setting '%s': '%s' is not one of %s",
                      s->name, text, s->choices);
            return -1;
        }
    }
    else
    if (s->max > 0 && strlen (text) > (size_t) s->max) {
        snprintf (err, err_size, "setting '%s': value longer than %g bytes", s->name, s->max);
        return -1;
    }
    if (s->type == KD_CT_LIST && value->is_set && *value->text && from_user) {
        size_t len = strlen (value->text) + strlen (text) + 2;
        char *joined = malloc (len);
        assert (joined);
        snprintf (joined, len, "%s,%s", value->text, text);
        free (value->text);
        value->text = joined;
    }
    else {
        free (value->text);
        value->text = strdup (text);
        assert (value->text);
    }
    value->number = number;
    if (from_user)
        value->is_set = true;
    return 0;
}

//  Create a config holding the defaults a program sees.
kd_config_t *
kd_config_new (unsigned service, const char *program)
{
    kd_config_t *self = calloc (1, sizeof *self);
    assert (self);
    self->service = service;
    self->program = strdup (program ? program : "kudus");
    self->values = calloc (S_TABLE_SIZE, sizeof *self->values);
    assert (self->program && self->values);
    char err [256];
    for (size_t i = 0; i < S_TABLE_SIZE; i++) {
        if (!(s_table [i].services & service) || s_find (self, s_table [i].name))
            continue;
        s_value_t *value = &self->values [self->count++];
        value->setting = &s_table [i];
        //  A default that fails its own bounds is a bug in the table.
        int rc = s_assign (value, s_table [i].def, false, err, sizeof err);
        assert (rc == 0);
        (void) rc;
    }
    return self;
}

//  Destroy a config.
void
kd_config_destroy (kd_config_t **self_p)
{
    assert (self_p);
    kd_config_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->count; i++)
        free (self->values [i].text);
    for (int i = 0; i < self->n_positional; i++)
        free (self->positional [i]);
    free (self->values);
    free (self->program);
    free (self);
    *self_p = NULL;
}

//  Environment variable name of a setting: KUDUS_ + upper snake case.
static void
s_env_name (const char *name, char *out, size_t out_size)
{
    size_t n = (size_t) snprintf (out, out_size, "KUDUS_");
    for (const char *p = name; *p && n + 1 < out_size; p++)
        out [n++] = *p == '-' ? '_' : (char) toupper ((unsigned char) *p);
    out [n] = 0;
}

//  Load the environment, then the flags.
int
kd_config_load (kd_config_t *self, int argc, char **argv, char *err, size_t err_size)
{
    for (size_t i = 0; i < self->count; i++) {
        char env [96];
        s_env_name (self->values [i].setting->name, env, sizeof env);
        const char *text = getenv (env);
        if (text && s_assign (&self->values [i], text, true, err, err_size)) {
            size_t len = strlen (err);
            snprintf (err + len, err_size - len, " (from %s)", env);
            return -1;
        }
    }
    for (int i = 1; i < argc; i++) {
        const char *arg = argv [i];
        if (!strcmp (arg, "--help") || !strcmp (arg, "-h")) {
            kd_config_help (self, stdout);
            return 1;
        }
        if (strncmp (arg, "--", 2) != 0 || arg [2] == 0) {
            if (self->n_positional == S_MAX_POSITIONAL) {
                snprintf (err, err_size, "too many arguments at '%s'", arg);
                return -1;
            }
            self->positional [self->n_positional++] = strdup (arg);
            continue;
        }
        char name [128];
        const char *eq = strchr (arg + 2, '=');
        size_t len = eq ? (size_t) (eq - arg - 2) : strlen (arg + 2);
        if (len >= sizeof name) {
            snprintf (err, err_size, "unknown flag '%.40s...' (see --help)", arg);
            return -1;
        }
        memcpy (name, arg + 2, len);
        name [len] = 0;
        s_value_t *value = s_find (self, name);
        if (!value) {
            snprintf (err, err_size, "unknown flag '--%s' (see --help)", name);
            return -1;
        }
        const char *text = eq ? eq + 1 : NULL;
        if (!text && value->setting->type == KD_CT_BOOL) {
            //  A bare boolean flag means true, unless a bool word follows.
            bool b;
            if (i + 1 < argc && s_parse_bool (argv [i + 1], &b) == 0)
                text = argv [++i];
            else
                text = "true";
        }
        if (!text) {
            if (i + 1 >= argc) {
                snprintf (err, err_size, "flag '--%s' needs a value", name);
                return -1;
            }
            text = argv [++i];
        }
        if (s_assign (value, text, true, err, err_size))
            return -1;
    }
    return 0;
}

//  Config from the environment and argv, for a main.
kd_config_t *
kd_config_from_args (unsigned service, const char *program, const char *label,
                     int argc, char **argv, int *exit_code)
{
    kd_config_t *self = kd_config_new (service, program);
    char err [512];
    int rc = kd_config_load (self, argc, argv, err, sizeof err);
    if (rc != 0) {
        if (rc < 0)
            fprintf (stderr, "%s: %s\n", label, err);
        kd_config_destroy (&self);
        *exit_code = rc < 0 ? 2 : 0;
    }
    return self;
}

//  Set one value from text.
int
kd_config_set (kd_config_t *self, const char *name, const char *value,
               char *err, size_t err_size)
{
    s_value_t *v = s_find (self, name);
    if (!v) {
        snprintf (err, err_size, "unknown setting '%s'", name);
        return -1;
    }
    return s_assign (v, value, true, err, err_size);
}

//  Find a setting that must exist with the given type.
static s_value_t *
s_get (kd_config_t *self, const char *name, kd_config_type_t type)
{
    s_value_t *value = s_find (self, name);
    (void) type;    //  only checked by the asserts
    assert (value);
    //  A number that also takes words may be read as text, to pass it on.
    assert (value->setting->type == type
        ||  (type == KD_CT_STRING && value->setting->type != KD_CT_INT
             && value->setting->type != KD_CT_DOUBLE && value->setting->type != KD_CT_BOOL)
        ||  (type == KD_CT_STRING && value->setting->choices
             && value->setting->type != KD_CT_ENUM && value->setting->type != KD_CT_BOOL));
    return value;
}

int64_t
kd_config_int (kd_config_t *self, const char *name)
{
    return (int64_t) s_get (self, name, KD_CT_INT)->number;
}

double
kd_config_double (kd_config_t *self, const char *name)
{
    return s_get (self, name, KD_CT_DOUBLE)->number;
}

const char *
kd_config_str (kd_config_t *self, const char *name)
{
    return s_get (self, name, KD_CT_STRING)->text;
}

bool
kd_config_bool (kd_config_t *self, const char *name)
{
    return s_get (self, name, KD_CT_BOOL)->number != 0;
}

bool
kd_config_is_set (kd_config_t *self, const char *name)
{
    s_value_t *value = s_find (self, name);
    assert (value);
    return value->is_set;
}

int
kd_config_positional_count (kd_config_t *self)
{
    return self->n_positional;
}

const char *
kd_config_positional (kd_config_t *self, int index)
{
    return index >= 0 && index < self->n_positional ? self->positional [index] : NULL;
}

//  Print --help from the table.
void
kd_config_help (kd_config_t *self, FILE *out)
{
    fprintf (out, "usage: %s [--setting VALUE ...]\n\n", self->program);
    fprintf (out, "Every setting is also read from the environment variable shown.\n\n");
    for (size_t i = 0; i < self->count; i++) {
        const kd_setting_t *s = self->values [i].setting;
        char env [96];
        s_env_name (s->name, env, sizeof env);
        char range [96] = "";
        if ((s->type == KD_CT_INT || s->type == KD_CT_DOUBLE) && s->choices)
            snprintf (range, sizeof range, " [%g..%g] or {%s}", s->min, s->max, s->choices);
        else
        if (s->type == KD_CT_INT || s->type == KD_CT_DOUBLE)
            snprintf (range, sizeof range, " [%g..%g]", s->min, s->max);
        else
        if (s->type == KD_CT_ENUM)
            snprintf (range, sizeof range, " {%s}", s->choices);
        fprintf (out, "  --%-20s %s\n  %-22s   default '%s'%s, env %s\n",
                 s->name, s->help, "", s->def, range, env);
    }
}

const kd_setting_t *
kd_config_table (size_t *count)
{
    *count = S_TABLE_SIZE;
    return s_table;
}
