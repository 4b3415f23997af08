/*  kd_history_check: reads a run's history and says whether anything was
    lost (the checker of `kudus chaos`, docs/chaos.md).

    It is fed the JSON lines the services wrote (kd_history): the
    scheduler's leases and commits, each shard's applies, states received
    and final CRC, `kudus local`'s starts, exits and restarts, and
    kd_chaos's faults, resource samples and leftovers.  Then it checks:

    - every row of every completed epoch was applied exactly once on each
      range (the leases of the gradients each range applied, one version
      counted once however many replicas applied it), and no row twice in
      any epoch;
    - no gradient (rank, clock and its lease) applied at two versions of
      a range, and no two replicas that applied one version differently;
    - versions only go up on each shard process;
    - the replicas of each range ended at one version with one params_crc,
      and had one params_crc at every CRC point (a version the shards
      made a multiple of history-crc-every) two of them reported;
    - the run reached its target (the scheduler ended on epochs, time or
      accuracy, with an epoch complete) and no process was left behind;
    - no service's descriptors or RSS grew more than 5 % after warm-up;
    - the cluster committed again after every fault.

    It streams: lines must come in time order across sources (as
    kd_history_check_load merges the files), and state is released as
    epochs close and replicas move on, so memory stays bounded however long
    the run.  Pure logic: no sockets, no processes; Criterion feeds it
    hand-made lines (tests/test_kd_history_check.c).
*/
#ifndef KD_HISTORY_CHECK_H_INCLUDED
#define KD_HISTORY_CHECK_H_INCLUDED

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define KD_CHECK_GROWTH         0.05    //  resource growth that fails
#define KD_CHECK_RSS_FLOOR_KB   2048    //  growth below this is noise (KiB)
#define KD_CHECK_FDS_FLOOR      3       //  descriptors: the same
#define KD_CHECK_WARMUP_S       10      //  a process's first seconds
#define KD_CHECK_MIN_SAMPLES    6       //  samples after warm-up to judge
#define KD_CHECK_MAX_LISTED     20      //  failures of one kind listed

typedef struct _kd_history_check_t kd_history_check_t;

//  An empty checker.  Caller owns return value.
kd_history_check_t *
    kd_history_check_new (void);

//  Destroy and null the caller's pointer.
void
    kd_history_check_destroy (kd_history_check_t **self_p);

//  Feed one line from source: "scheduler", "local", "chaos", or a shard's
//  name ("shard-0").  Lines must come in time order (their "t"), across
//  sources too: a lease before the apply that names it.
//  Returns 0, or -2 when the line is malformed (it is counted and
//  reported, and a cut last line of a killed process is forgiven).
int
    kd_history_check_line (kd_history_check_t *self, const char *source, const char *line);

//  Feed every history file of a run's directory: scheduler.jsonl,
//  local.jsonl, chaos.jsonl and shard-*.jsonl, merged by time.  Returns 0, or -1 with a
//  message in err when the directory cannot be read.
int
    kd_history_check_load (kd_history_check_t *self, const char *dir, char *err, size_t err_size);

//  Check what was fed (once: the lines are judged as they come, and what
//  is still open is judged now).  Returns the number of failures.
size_t
    kd_history_check_run (kd_history_check_t *self);

//  Failures found by the last run, as sentences.
size_t
    kd_history_check_failures (kd_history_check_t *self);
const char *
    kd_history_check_failure (kd_history_check_t *self, size_t index);

//  Figures of the last run.
uint64_t
    kd_history_check_rows_lost (kd_history_check_t *self);
uint64_t
    kd_history_check_rows_twice (kd_history_check_t *self);
uint64_t
    kd_history_check_gradients_twice (kd_history_check_t *self);
size_t
    kd_history_check_faults (kd_history_check_t *self);
size_t
    kd_history_check_survived (kd_history_check_t *self);
size_t
    kd_history_check_restarts (kd_history_check_t *self);
//  CRC points two replicas reported and were compared at.
size_t
    kd_history_check_crc_points (kd_history_check_t *self);
//  The most entries (leases, versions, epochs, gradients) held at once.
size_t
    kd_history_check_held_peak (kd_history_check_t *self);

//  The report for people, and as one JSON object.
void
    kd_history_check_print (kd_history_check_t *self, FILE *out);
void
    kd_history_check_write_json (kd_history_check_t *self, FILE *out);

#endif
