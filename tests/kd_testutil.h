/*  kd_testutil: helpers shared by the test suites: temporary directories,
    child processes for integration tests, and sockets with timeouts.
*/
#ifndef KD_TESTUTIL_H_INCLUDED
#define KD_TESTUTIL_H_INCLUDED

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <czmq.h>
#include "kd_msg.h"

//  Create a fresh temporary directory; the caller frees the path.  The
//  directory and all it holds are removed when this process exits.
char *
    kd_test_tmpdir (void);

//  Start a binary from the build directory with its output appended to
//  log_path (NULL: inherit).  argv [0] is the binary's name, e.g.
//  "kudus-shard".  The child dies with the test (PR_SET_PDEATHSIG).
pid_t
    kd_test_spawn (const char *const *argv, const char *log_path);

//  Wait up to timeout_ms for a child to exit.  Returns true and sets
//  *status if it did.
bool
    kd_test_wait (pid_t pid, int timeout_ms, int *status);

//  SIGKILL and reap a child if it still runs.
void
    kd_test_kill (pid_t pid);

//  A base port for this test process, so that parallel runs do not collide:
//  a multiple of 200 in [20000, 32000), below the ephemeral port range,
//  reserved for the process's life.  Waits up to 30 s when all are taken.
int
    kd_test_base_port (void);

//  Read a whole file into a new NUL-terminated string (caller frees); NULL
//  if it cannot be read.
char *
    kd_test_slurp (const char *path);

//  Numeric value of "key": in a JSON text; NAN if absent or null.
double
    kd_test_json_number (const char *json, const char *key);

//  Run a command (its output to log) until it exits, at most ceiling_ms
//  (then it is killed), print the log's end, and return the text of the
//  report file it wrote (caller frees): NULL when it did not exit in time
//  or wrote none.  *status is its wait status.
char *
    kd_test_run_report (const char *const *argv, const char *log, const char *report,
                        int ceiling_ms, int *status);

//  True when a `kudus chaos` report (JSON text) says the run passed: at
//  least min_faults faults, every one survived, no row lost or applied
//  twice, no gradient applied twice, the checker's pass.  Else false,
//  with the first failure in why.
bool
    kd_test_chaos_passed (const char *report, double min_faults, char *why, size_t why_size);

//  Print a file's last 6000 bytes to stderr, to explain a failure.
void
    kd_test_dump (const char *path);

//  Print every line of a file that holds one of the needles (a NULL-ended
//  list), then its last 6000 bytes: a long log's events, then its end.
void
    kd_test_dump_lines (const char *path, const char *const *needles);

//  Occurrences of needle in a file (0 if it cannot be read).
int
    kd_test_count (const char *path, const char *needle);

//  Wait until needle occurs at least at_least times in the file at path,
//  timeout_ms at most; returns the count it last saw.
int
    kd_test_wait_count (const char *path, const char *needle, int at_least, int timeout_ms);

//  What the last line of a log holding needle says after key (e.g.
//  "version="), as text up to the next space, into out (empty when absent).
void
    kd_test_log_word (const char *path, const char *needle, const char *key, char *out, size_t size);

//  The same as a number; -1 if there is none.
int64_t
    kd_test_log_value (const char *path, const char *needle, const char *key);

//  Path of a binary in the build directory (static buffer).
const char *
    kd_test_bin (const char *name);

//  A DEALER connected to endpoint, with 3 s send and receive timeouts (so
//  a dead service fails a test instead of hanging it) and no linger.
zsock_t *
    kd_test_dealer (const char *endpoint);

//  The version a shard serves: PULL version 0, and its PULL_OK's version;
//  -1 when no PULL_OK comes within timeout_ms.
int64_t
    kd_test_shard_version (const char *endpoint, int timeout_ms);

//  The processes an integration test started, killed together at its
//  teardown.
#define KD_TEST_MAX_PIDS 64
typedef struct {
    pid_t pids [KD_TEST_MAX_PIDS];
    int n;
} kd_test_procs_t;

//  kd_test_spawn, and keep the pid.  Returns it, or -1 when the child
//  could not start or the set is full.
pid_t
    kd_test_procs_spawn (kd_test_procs_t *self, const char *const *argv, const char *log_path);

//  SIGKILL and reap every process of the set still running; empty it.
void
    kd_test_procs_kill (kd_test_procs_t *self);

//  GET path from 127.0.0.1:port over HTTP/1.0 with a 2 s timeout; the
//  whole response (headers and body) in a new string, or NULL.
char *
    kd_test_http_get (int port, const char *path);

//  The next message on a socket, or NULL when none comes in its receive
//  timeout or it is malformed.
kd_msg_t *
    kd_test_recv (zsock_t *sock);

//  A process's peak and current resident set, in KiB (-1 if unknown).
void
    kd_test_rss (pid_t pid, long *peak, long *now);

//  Send one or two raw frames (b may be NULL).
void
    kd_test_send_raw (zsock_t *sock, const void *a, size_t alen, const void *b, size_t blen);

//  Encode a header map {"v": version, "t": type} plus one extra pair (key
//  may be NULL) into buf; returns its length.
size_t
    kd_test_header (char *buf, size_t size, unsigned version, const char *type,
                    const char *key, int value);

//  Send a set of malformed messages; returns how many should be answered
//  with ERROR.
int
    kd_test_send_garbage (zsock_t *sock);

//  Read replies until want ERRORs or a receive timeout; returns the ERRORs.
int
    kd_test_count_errors (zsock_t *sock, int want);

//  Wait for a reply of one type, skipping up to max_skip others (ERRORs
//  that answer garbage sent before); true if it came (*out, if not NULL,
//  takes it).  kd_test_expect skips up to 50.
bool
    kd_test_expect_within (zsock_t *sock, kd_msg_type_t type, kd_msg_t **out, int max_skip);
bool
    kd_test_expect (zsock_t *sock, kd_msg_type_t type, kd_msg_t **out);

#endif
