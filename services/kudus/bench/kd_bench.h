/*  kd_bench: `kudus bench`, benchmarks that print ratios.

    Each benchmark measures a Kudus path and, in the same run, the ceiling
    it is held against (raw ZeroMQ, memcpy, bare OpenBLAS), and reports the
    Kudus figure as a ratio to it, so that a noisy shared machine still
    gives comparable numbers.  Every configuration runs `repeat` times and
    the median is reported: a table for people, or with --json one object
    per configuration per line.  None of this is a test: tests only run the
    smoke versions (tests/integration/test_bench.c) and assert no speed.
    docs/performance.md has the figures and how to rerun them.
*/
#ifndef KD_BENCH_H_INCLUDED
#define KD_BENCH_H_INCLUDED

#include "kd_internal.h"
#include <signal.h>
#include <sys/types.h>

#define KD_BENCH_MAX_LIST   32      //  entries of a list setting

//  What every benchmark gets from the command line.
typedef struct {
    kd_config_t *config;        //  the bench settings (KD_SVC_PERF)
    bool json;                  //  one JSON object per line
    int repeat;                 //  runs per configuration
    int base_port;              //  first port of the services we start
    char bindir [1024];         //  where kudus-scheduler and kudus-shard are
    char self_exe [1000];       //  this binary, for helper processes
} kd_bench_t;

//  kudus bench pushpull: values through real shards, against a raw
//  ZeroMQ echo and memcpy.
int
    kd_bench_pushpull (kd_bench_t *bench);

//  kudus bench barrier: N fake workers against a real scheduler.
int
    kd_bench_barrier (kd_bench_t *bench);

//  kudus bench sparse: a keyed pull against a dense one, and sparse-lr's
//  bytes per iteration against the model's size.
int
    kd_bench_sparse (kd_bench_t *bench);

//  kudus bench phase: a BSP phase's time split into compute, push,
//  barrier and pull, against the compute-bound limit.
int
    kd_bench_phase (kd_bench_t *bench);

//  kudus bench compute: kd_model_gradient against bare OpenBLAS.
int
    kd_bench_compute (kd_bench_t *bench);

//  Hidden helper process of pushpull: a plain libzmq ROUTER that sends
//  every message back, with no Kudus code.  Runs until SIGTERM.
int
    kd_bench_echo_server (const char *endpoint);

//  A helper's BYTES argument: a whole number from 1 to max, else 0.
size_t
    kd_bench_bytes_arg (const char *text, size_t max);

//  The staged echo server (kudus bench zmq-staged-echo ENDPOINT BYTES):
//  keeps pushed values per rank, answers pulls from a fixed buffer.
int
    kd_bench_staged_echo_server (const char *endpoint, const char *bytes);

//  Hidden helper process of barrier: a plain libzmq ROUTER that holds the
//  first `quota` of every n arrivals and then releases them together, and
//  answers probes at once.  Runs until SIGTERM.
int
    kd_bench_barrier_server (const char *endpoint, size_t n, size_t quota);

//  Hidden helper process of sparse: a plain libzmq ROUTER that answers
//  every whole message with a header-sized frame and `bytes` (decimal, 1
//  to 256 MiB) of values sent without a copy from one fixed buffer.  Runs
//  until SIGTERM; returns 1, with a message, for a bad argument.
int
    kd_bench_reply_server (const char *endpoint, const char *bytes);

//  Keep large freed blocks in the heap for reuse, as kudus-shard does.
void
    kd_bench_tune_allocator (void);

//  Parse a comma-separated list of sizes ("4K,64K,1M", K and M are 1024
//  and 1024^2; plain numbers otherwise).  Returns the count, or -1 when an
//  entry is malformed or there are more than max.
int
    kd_bench_list (const char *text, uint64_t *out, int max);
//  True when the comma-separated list names word.
bool
    kd_bench_has (const char *list, const char *word);

//  Median and q-quantile of n values (sorts them in place).
double
    kd_bench_median (double *values, int n);
double
    kd_bench_quantile (double *values, int n, double q);

//  Start a binary from the bin dir with argv (argv [0] is its name), its
//  output on our stderr.  Returns the pid, or -1.
pid_t
    kd_bench_spawn (kd_bench_t *bench, const char *const *argv);

//  A DEALER connected to a loopback port, with send and receive timeouts
//  and no linger.  NULL if it cannot connect.
zsock_t *
    kd_bench_dealer (int port, int timeout_ms);

//  SIGTERM a child, wait for it a moment, then SIGKILL and reap.
void
    kd_bench_stop (pid_t pid);

//  CPU time (user + system) a process has used, in ms; -1 if unknown.
double
    kd_bench_cpu_ms (pid_t pid);

//  CPU time all threads of a process have run, in ns, from its CPU-time
//  clock (clock_getcpuclockid), exact where kd_bench_cpu_ms counts clock
//  ticks; pid 0 is this process.  -1 if unknown.
double
    kd_bench_cpu_ns (pid_t pid);

//  Peak resident set (VmHWM) of a process in KiB, -1 if unknown.  Read it
//  before the process is reaped.
long
    kd_bench_peak_rss (pid_t pid);

//  Print one result line: in the table, or as a JSON object.  The row is
//  given as alternating keys and preformatted values ending with NULL,
//  e.g. "size_bytes", "4096", "ratio_vs_zmq", "0.91", NULL.  header is
//  printed once before the first table row of a benchmark.
void
    kd_bench_row (kd_bench_t *bench, const char *name, bool *header_done,
                  const char *const *kv);

//  The raw ceilings' helper processes (no Kudus code on their path) share
//  this: a plain libzmq ROUTER bound to endpoint, with a 200 ms receive
//  timeout so that their loop sees kd_bench_raw_stop, which SIGTERM and
//  SIGINT set.  NULL, with a message naming `what`, if it cannot bind.
extern volatile sig_atomic_t kd_bench_raw_stop;
void *
    kd_bench_raw_router (void *ctx, const char *endpoint, const char *what);

#endif
