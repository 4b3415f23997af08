/*  kd_util: small helpers every service needs: clocks, endpoints, sockets.
*/
#ifndef KD_UTIL_H_INCLUDED
#define KD_UTIL_H_INCLUDED

#include <czmq.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Monotonic milliseconds (for timeouts and durations).
uint64_t
    kd_now_ms (void);
//  Monotonic microseconds, as a double in ms, for fine timing.
double
    kd_now_msf (void);
//  Wall-clock milliseconds since the epoch (for timestamps on the wire).
uint64_t
    kd_wall_ms (void);

//  Endpoint to advertise for a bound socket.  If advertise is non-empty it
//  is returned as is.  Otherwise the socket's last bound endpoint is used,
//  with a wildcard host ("*" or "0.0.0.0") replaced by this host's address
//  (the address its hostname resolves to, else 127.0.0.1).  Writes into
//  out; returns 0 or -1.
int
    kd_advertise_endpoint (zsock_t *sock, const char *advertise,
                           char *out, size_t out_size);

//  Sum of squares of n floats; not finite exactly when one of them is a
//  NaN or an Inf.  Vectorized (BLAS), with an exact double pass only when
//  the fast sum overflows.
double
    kd_sumsq (const float *v, size_t n);

//  Create a directory and its parents (mkdir -p), each with mode (less the
//  umask).  A component that another process creates at the same moment is
//  not an error, as it is for zsys_dir_create.  Returns 0, or -1 with errno
//  set.
int
    kd_dir_create (const char *path, mode_t mode);

//  True when a ZeroMQ endpoint only accepts peers on this host: ipc://,
//  inproc://, or tcp:// on a loopback address (127.0.0.0/8, ::1, localhost).
bool
    kd_endpoint_is_local (const char *endpoint);

//  Log a warning when a service binds endpoint beyond loopback without
//  CURVE: the threat model is then a trusted network.
void
    kd_warn_open_bind (const char *endpoint, bool curve);

//  Apply the settings every network socket gets: ZMQ_MAXMSGSIZE, linger,
//  and (for ROUTER) ZMQ_ROUTER_MANDATORY off so a vanished peer is dropped
//  rather than blocking.
void
    kd_socket_harden (zsock_t *sock, int64_t max_msg_bytes);

//  splitmix64's output function: a bijective 64-bit mixer with good
//  avalanche, for stateless seeded choices.  Inline: kd_sparse hashes
//  every key of a keyed pull with it.
static inline uint64_t
kd_mix64 (uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

//  splitmix64: the next value of a seeded sequence; advances *state.
uint64_t
    kd_splitmix64 (uint64_t *state);

//  A whole file as a new NUL-terminated string (caller frees), or NULL if
//  it cannot be read.
char *
    kd_read_file (const char *path);

//  Where scratch files go: $TMPDIR, or /tmp without it (borrowed).
const char *
    kd_temp_base (void);

//  Create a fresh private directory $TMPDIR/PREFIX-<random> (/tmp without
//  TMPDIR).  Returns its path, or NULL (errno set).  Caller frees it.
char *
    kd_temp_dir (const char *prefix);

//  The q-quantile (0 < q <= 1) of a histogram whose bin i counts the value
//  i; 0 when it is empty.
double
    kd_hist_quantile (const uint64_t *bins, size_t n_bins, double q);

//  Area under the ROC curve of scores against labels (0 or 1), ties
//  counting half; NAN when one class is missing, a score is not finite, or
//  out of memory.
double
    kd_auc (const double *scores, const uint8_t *labels, size_t n);

//  Index of the first of n sorted keys that is >= key (n when none is).
size_t
    kd_lower_bound (const uint64_t *keys, size_t n, uint64_t key);

//  Shift the port of a tcp endpoint by delta ("tcp://h:7000" + 5 ->
//  "tcp://h:7005").  Returns 0 or -1 if the endpoint has no port.
int
    kd_endpoint_shift (const char *endpoint, int delta, char *out,
                       size_t out_size);

//  Parse an HTTP listen address, "HOST:PORT", ":PORT", "*:PORT" or
//  "PORT", where HOST is an IPv4 address (a missing host or "*" is every
//  interface).  Returns 0 and fills *addr, or -1 with the reason in err.
struct sockaddr_in;
int
    kd_parse_listen (const char *text, struct sockaddr_in *addr, char *err, size_t err_size);

//  Bytes as upper-case hex into out (size bytes, NUL-terminated, cut to
//  fit).  Returns the characters written.  For routing ids, on every message.
size_t
    kd_hex (const void *data, size_t n, char *out, size_t size);

#ifdef __cplusplus
}
#endif

#endif
