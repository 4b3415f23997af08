/*  kd_shardset: the address book of the shards, as START gives it.

    Every client of the shards (kd_client for workers, the monitor's
    evaluation pulls) builds one from START: it checks the book (ranges that
    tile the model, endpoints that connect) and holds one DEALER per shard.
    It also checks and copies a shard's PULL_OK into the caller's model, so
    a slice is accepted by the same rule everywhere.  The caller drives the
    sockets: a worker blocks on a round, the monitor polls.
*/
#ifndef KD_SHARDSET_H_INCLUDED
#define KD_SHARDSET_H_INCLUDED

#include "kd_msg.h"
#include "kd_curve.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KD_SHARDSET_MAX 64              //  shards in one book at most

typedef struct _kd_shardset_t kd_shardset_t;

//  Build the book of a START and connect a DEALER to every shard, with
//  max_msg bytes at most per message and CURVE from curve (NULL: the
//  process's).  n_params is the model's size the ranges must tile; 0 takes
//  it from the book.  NULL with a reason in err when the book is malformed
//  or an endpoint does not connect.  Caller owns return value.
kd_shardset_t *
    kd_shardset_new (kd_msg_t *start, size_t n_params, int64_t max_msg, kd_curve_t *curve,
                     char *err, size_t err_size);

//  Close every socket and null the caller's pointer.
void
    kd_shardset_destroy (kd_shardset_t **self_p);

//  Shards in the book, and the model's size (the last range's end).
size_t
    kd_shardset_size (kd_shardset_t *self);
size_t
    kd_shardset_params (kd_shardset_t *self);

//  Shard i's DEALER, endpoint and key range [lo, hi).
zsock_t *
    kd_shardset_socket (kd_shardset_t *self, size_t i);
const char *
    kd_shardset_endpoint (kd_shardset_t *self, size_t i);

//  ROUTE: range i's writes go to another replica now.  Its socket is
//  replaced (the old one's socket pointer is no longer valid).  Returns
//  1 when it changed, 0 when it was already there, -1 on a bad range or
//  an endpoint that cannot be connected (the book is unchanged).
int
    kd_shardset_reroute (kd_shardset_t *self, size_t i, const char *endpoint);
uint64_t
    kd_shardset_lo (kd_shardset_t *self, size_t i);
uint64_t
    kd_shardset_hi (kd_shardset_t *self, size_t i);

//  Accept shard i's PULL_OK when it holds exactly shard i's range at a
//  version of at least min_version: copy the slice into params (the whole
//  model's buffer) and return 0.  Anything else (a stale version, another
//  range, a wrong count) returns -1 and copies nothing.
int
    kd_shardset_take_pull (kd_shardset_t *self, size_t i, kd_msg_t *reply,
                           uint64_t min_version, float *params);

#ifdef __cplusplus
}
#endif

#endif
