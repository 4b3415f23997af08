/*  kd_msg: the Kudus wire codec.

    Every Kudus message is one ZeroMQ multipart message:

        [routing id]   only on ROUTER sockets, added and removed by ZeroMQ
        header         a MessagePack map: {"v": 1, "t": "TYPE", field: value, ...}
        [data]         optional raw frame: little-endian float32 values
        [keys]         only on a keyed PUSH or PULL (header field "keys"):
                       little-endian uint64 keys, strictly increasing

    The header's "count" field states how many floats the data frame holds,
    and the decoder checks the frame's length against it.

    The schema is written once, as the table s_types in kd_msg.c: for every
    type its required and optional fields, its data frame rule, its
    direction, and which roles may send it to which service (kd_role reads
    that).  docs/protocol.md states the same tables in prose, and
    test_kd_schema fails when the two disagree.

    A RELAY's data frame is not floats but bundled messages (kd_bundle.h).
    A PUSH or PULL_OK with "shm": 1 has no data frame: its values are at
    "offset" in a region the two peers share (kd_shm; docs/protocol.md).

    Unknown header keys are ignored, so that a newer peer can add optional
    fields; unknown types and other versions are rejected with ERROR.
*/
#ifndef KD_MSG_H_INCLUDED
#define KD_MSG_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KD_PROTOCOL_VERSION 1

//  Hard limits of the codec.  Counts are also checked against the bytes that
//  remain, so these are only the ceiling.
#define KD_MSG_MAX_HEADER   (1u << 20)  //  bytes in one header frame
#define KD_MSG_MAX_ARRAY    65536       //  elements in one array field
#define KD_MSG_MAX_STRING   4096        //  bytes in one string field
#define KD_MSG_MAX_DEPTH    4           //  MessagePack nesting depth
#define KD_MSG_MAX_FRAMES   4           //  routing id + header + data + keys
#define KD_MSG_MAX_KEYS     (1u << 24)  //  keys in one keys frame

typedef enum {
    KD_MSG_HELLO = 1,
    KD_MSG_WELCOME,
    KD_MSG_START,
    KD_MSG_HEARTBEAT,
    KD_MSG_ARRIVE,
    KD_MSG_RELEASE,
    KD_MSG_LEAVE,
    KD_MSG_STOP,
    KD_MSG_PUSH,
    KD_MSG_PUSH_OK,
    KD_MSG_PULL,
    KD_MSG_PULL_OK,
    KD_MSG_COMMIT,
    KD_MSG_COMMIT_OK,
    KD_MSG_TELEMETRY,
    KD_MSG_STATUS,
    KD_MSG_EVAL,
    KD_MSG_EVAL_OK,
    KD_MSG_ERROR,
    KD_MSG_EVENT,
    KD_MSG_INIT,
    KD_MSG_INIT_OK,
    KD_MSG_STATS,
    KD_MSG_STATS_OK,
    KD_MSG_CHAIN,           //  scheduler -> shard: its place in its range's chain
    KD_MSG_SYNC,            //  shard -> shard: one part of a state transfer
    KD_MSG_SYNC_OK,         //  shard -> shard, scheduler: the transfer is applied
    KD_MSG_ROUTE,           //  scheduler -> worker, monitor: a range's new primary
    KD_MSG_SHM,             //  worker -> shard: attach my push region (same host)
    KD_MSG_SHM_OK,          //  shard -> worker: attached; here is my snapshot region
    KD_MSG_RELAY,           //  aggregator <-> scheduler: workers' messages, bundled
    KD_MSG_REPORT,          //  evaluator -> monitor: a metric of one model version
    KD_MSG_STAGED,          //  shard -> scheduler: a push is staged (the short phase path)
    KD_MSG_TYPE_COUNT       //  one past the last type
} kd_msg_type_t;

//  Field kinds.  Unsigned ints are the default; signed values are not needed
//  on this wire.
typedef enum {
    KD_FT_UINT,             //  uint64
    KD_FT_FLOAT,            //  double (MessagePack float32 or float64 on input;
                            //  also accepts an integer)
    KD_FT_STR,              //  UTF-8 string
    KD_FT_UINTS,            //  array of uint64
    KD_FT_FLOATS,           //  array of double
    KD_FT_STRS              //  array of string
} kd_field_kind_t;

typedef enum {
    KD_F_ROLE,          //  str    "worker", "shard", "monitor" or "evaluator"
    KD_F_NAME,          //  str    stable instance name, for rejoin
    KD_F_ENDPOINT,      //  str    advertised endpoint of a shard or the monitor
    KD_F_RANK,          //  uint
    KD_F_VERSION,       //  uint   model version
    KD_F_CLOCK,         //  uint   worker iteration number
    KD_F_BASE,          //  uint   model version a gradient was computed on
    KD_F_SAMPLES,       //  uint
    KD_F_LOSS,          //  float
    KD_F_MODEL,         //  str    "softmax" or "mlp"
    KD_F_HIDDEN,        //  uint
    KD_F_N_PARAMS,      //  uint
    KD_F_LO,            //  uint   first key of a range
    KD_F_HI,            //  uint   one past the last key
    KD_F_LR,            //  float
    KD_F_MOMENTUM,      //  float
    KD_F_BATCH,         //  uint
    KD_F_SEED,          //  uint
    KD_F_EPOCHS,        //  float
    KD_F_HEARTBEAT_MS,  //  uint
    KD_F_CONSISTENCY,   //  str
    KD_F_ENDPOINTS,     //  strs   shard address book
    KD_F_LOS,           //  uints  shard key ranges, first keys
    KD_F_HIS,           //  uints  shard key ranges, ends
    KD_F_PART_LO,       //  uint   first training sample of a partition
    KD_F_PART_HI,       //  uint   one past the last
    KD_F_T0_MS,         //  uint   wall clock ms when training started
    KD_F_STALENESS,     //  uint
    KD_F_DROPPED,       //  uint
    KD_F_GROUP,         //  uint
    KD_F_REASON,        //  str
    KD_F_CODE,          //  uint   error code, see kd_msg_error_t
    KD_F_COUNT,         //  uint   floats in the data frame
    KD_F_TS_MS,         //  uint   wall clock ms
    KD_F_RANKS,         //  uints
    KD_F_CLOCKS,        //  uints
    KD_F_WEIGHTS,       //  floats
    KD_F_DROP_RANKS,    //  uints
    KD_F_DROP_CLOCKS,   //  uints
    KD_F_COMPUTE_MS,    //  float
    KD_F_PUSH_MS,       //  float
    KD_F_WAIT_MS,       //  float
    KD_F_PULL_MS,       //  float
    KD_F_PHASES,        //  uint
    KD_F_EPOCH,         //  float
    KD_F_WORKERS,       //  uint
    KD_F_REGROUPS,      //  uint
    KD_F_ACCURACY,      //  float
    KD_F_GROUPS,        //  uints
    KD_F_KIND,          //  str    event kind ("worker-dead", ...)
    KD_F_DETAIL,        //  str    human-readable event detail
    KD_F_SESSION,       //  uint   scheduler instance, new at each start
    KD_F_LOST,          //  uint   updates a restored shard lost
    KD_F_ROWS,          //  uints  training rows of a lease (RELEASE)
    KD_F_MIN_CLOCK,     //  uint   cluster min_clock at a RELEASE (SSP cache)
    KD_F_EMULATED_MS,   //  float  emulated compute the worker aimed for
    KD_F_OPTIMIZER,     //  str    the shards' update rule, a kd_optimizer spec
    KD_F_TENSORS,       //  strs   an external model's tensor names
    KD_F_SHAPES,        //  uints  their shapes, (rows, cols) per tensor
    KD_F_COUNTERS,      //  uints  a shard's counters, by kd_shard_counter_t
    KD_F_REFUSED,       //  uint   gradients a shard refused (ARRIVE: of this
                        //         clock; TELEMETRY: all of this worker's)
    KD_F_DTYPE,         //  uint   the data frame's values: kd_dtype_t (absent: fp32)
    KD_F_SYNC,          //  uint   CHAIN: 1 when the successor is new and needs our state
    KD_F_KEYS,          //  uint   PUSH, PULL: keys in the keys frame (a keyed,
                        //         sparse request); WELCOME, START: 1 when the
                        //         model is keyed
    KD_F_SHM,           //  uint   PUSH, PULL_OK: 1 when the values are in shared
                        //         memory, not in a data frame; PULL: 1 when
                        //         the answer may come so; ERROR: 1 when the
                        //         shared-memory path failed (resend by TCP)
    KD_F_PID,           //  uint   SHM, SHM_OK: the sender's process id
    KD_F_HOST,          //  str    SHM, SHM_OK: boot id, pid and net namespace
    KD_F_FD,            //  uint   SHM, SHM_OK: the region's descriptor in the sender
    KD_F_TOKEN,         //  uint   SHM, SHM_OK: the secret in the region's header
    KD_F_BYTES,         //  uint   SHM, SHM_OK: the region's size
    KD_F_OFFSET,        //  uint   PUSH, PULL_OK: where the values start in the region
    KD_F_SEQ,           //  uint   PULL_OK: the snapshot slot's sequence number
    KD_F_ITEMS,         //  uint   RELAY: messages bundled in the data frame
    KD_F_RELAYS,        //  uints  STATUS: the barrier tree: aggregators, RELAYs in,
                        //         messages in them, RELAYs out, messages in them
    KD_F_METRIC,        //  str    REPORT: the metric's name ("accuracy", "loss", ...)
    KD_F_VALUE,         //  float  REPORT: its value
    KD_F_KEY_ENC,       //  uint   PUSH, PULL: the keys frame's encoding,
                        //         kd_key_enc_t (absent: plain uint64s)
    KD_F_STAGED,        //  uint   the short phase path (section 9.3.1): HELLO of a
                        //         shard, 1 when it can send STAGED; WELCOME, 1
                        //         when the run uses it; ARRIVE, 1 when the
                        //         arrival waits for every range's STAGED
    KD_F_REG,           //  uint   the short phase path: WELCOME of a worker, its
                        //         registration number; PUSH, PUSH_OK, STAGED:
                        //         the registration that pushed
    KD_F_MODE,          //  str    STATUS: the model in effect (auto: bsp, lsp
                        //         or alsp; otherwise the configured one)
    KD_F_GEN,           //  uint   CHAIN: the range's chain generation, new whenever
                        //         the scheduler marks a replica unsynced; SYNC
                        //         end and SYNC_OK: the generation of the CHAIN
                        //         that ordered the transfer
    KD_F_LEASE_AHEAD,   //  uint   HELLO of a worker: 1 asks to hold a lease ahead
                        //         (ASP, SSP); WELCOME: 1 when granted; ERROR:
                        //         1 when the registration was refused for it
    KD_F_AHEAD,         //  uints  RELEASE: the rows of the lease ahead (clock + 1)
    KD_F_FIELD_COUNT    //  one past the last field; must stay <= 128
} kd_field_t;

//  The entries of a STATS_OK's counters, in this order.  A consumer reads
//  the entries it knows and ignores any after them, so that a newer shard
//  may append one.
typedef enum {
    KD_SC_PUSHES,           //  gradient slices received
    KD_SC_PULLS,            //  parameter slices sent
    KD_SC_COMMITS,          //  optimizer steps applied
    KD_SC_BYTES_IN,         //  bytes of gradient data (and keys) received
    KD_SC_BYTES_OUT,        //  bytes of parameter data sent
    KD_SC_STAGED,           //  gradients staged now, waiting for a COMMIT
    KD_SC_CHECKPOINTS,      //  checkpoints written
    KD_SC_CHECKPOINT_AGE_MS,//  ms since the last one (UINT64_MAX: none yet)
    KD_SC_REFUSED,          //  gradients refused: NaN/Inf, or over max-grad-norm
    KD_SC_CLIPPED,          //  gradients scaled down to max-grad-norm
    KD_SC_LIMITED,          //  requests refused by a per-peer limit
    KD_SC_DISCONNECTS,      //  peers disconnected (malformed input, connection limit)
    KD_SC_CONNECTIONS,      //  connections open now
    KD_SC_PARKED,           //  pulls parked now, waiting for a version
    KD_SC_SHM_PEERS,        //  workers attached through shared memory now
    KD_SC_SHM_BYTES_IN,     //  of bytes_in, those read from shared memory
    KD_SC_SHM_BYTES_OUT,    //  of bytes_out, those published in shared memory
    KD_SC_COUNT             //  one past the last
} kd_shard_counter_t;

//  What the data frame's values are (field "dtype"; absent means fp32).
typedef enum {
    KD_DTYPE_F32  = 0,
    KD_DTYPE_F16  = 1,          //  IEEE binary16
    KD_DTYPE_BF16 = 2           //  bfloat16
} kd_dtype_t;

//  Bytes per value of a dtype; 0 for an unknown one.
size_t
    kd_dtype_size (uint64_t dtype);

//  "fp32", "fp16", "bf16" to a dtype, -1 if unknown; and back.
int
    kd_dtype_parse (const char *name);
const char *
    kd_dtype_name (uint64_t dtype);

//  Error codes carried by ERROR, modelled on HTTP's classes.
typedef enum {
    KD_ERR_MALFORMED    = 400,  //  header or frames do not parse
    KD_ERR_UNAUTHORIZED = 401,
    KD_ERR_FORBIDDEN    = 403,  //  the peer's role may not send this
    KD_ERR_NOT_FOUND    = 404,  //  e.g. a COMMIT names an unstaged gradient
    KD_ERR_REFUSED      = 406,  //  a gradient refused for good: NaN/Inf, or its
                                //  norm over max-grad-norm; do not resend it
    KD_ERR_STATE        = 409,  //  valid message, wrong time (not registered)
    KD_ERR_TOO_LARGE    = 413,  //  a count or frame over its limit
    KD_ERR_UNKNOWN_TYPE = 422,  //  "command invalid"
    KD_ERR_NOT_REGISTERED = 428, //  send HELLO first (the peer does not know us)
    KD_ERR_LIMIT        = 429,  //  a per-peer limit is reached; try again later
    KD_ERR_INTERNAL     = 500,
    KD_ERR_UNAVAILABLE  = 503,  //  try again later
    KD_ERR_VERSION      = 505   //  protocol version not supported
} kd_msg_error_t;

//  What went wrong in a decode, for the log line and the ERROR reply.
typedef struct {
    int code;                   //  a kd_msg_error_t
    char reason [128];          //  short human text, NUL-terminated
} kd_msg_err_t;

typedef struct _kd_msg_t kd_msg_t;

//  Create a new empty message of the given type.  Caller owns return value.
kd_msg_t *
    kd_msg_new (kd_msg_type_t type);

//  Destroy a message and null the caller's pointer.  Safe on NULL.
void
    kd_msg_destroy (kd_msg_t **self_p);

//  Message type, and its wire name ("HELLO" ...); NULL for an unknown type.
kd_msg_type_t
    kd_msg_type (kd_msg_t *self);
const char *
    kd_msg_type_name (kd_msg_type_t type);

//  The schema, as the role table, the docs test and tools read it.
//  Roles as bits, and the services a message may be sent to.
#define KD_ROLE_WORKER      0x01
#define KD_ROLE_SHARD       0x02
#define KD_ROLE_MONITOR     0x04
#define KD_ROLE_SCHEDULER   0x08
#define KD_ROLE_EVALUATOR   0x10
typedef enum {
    KD_TO_SCHEDULER,            //  the scheduler's ROUTER (and an aggregator's)
    KD_TO_SHARD,                //  a shard's ROUTER
    KD_TO_MONITOR,              //  the monitor's intake
    KD_TO_COUNT
} kd_msg_to_t;

//  The data frame rule of a type: 0 none, 1 required, 2 optional.
int
    kd_msg_type_data (kd_msg_type_t type);
//  Who sends a type to whom, as docs/protocol.md's "Direction" column.
const char *
    kd_msg_type_direction (kd_msg_type_t type);
//  The names of a type's required (or optional) fields, in field order,
//  into names (at most max); returns how many there are.
size_t
    kd_msg_type_fields (kd_msg_type_t type, bool required, const char **names, size_t max);
//  The roles (KD_ROLE_* bits) that may send a type to a service.
unsigned
    kd_msg_type_senders (kd_msg_type_t type, kd_msg_to_t to);
//  Look a type up by wire name; 0 if unknown.
kd_msg_type_t
    kd_msg_type_lookup (const char *name);

//  True when msg is an ERROR saying that its sender does not know us, so
//  that we must send HELLO again: code 428, or, from a peer of an earlier
//  build, code 409 with the reason "not registered...".
bool
    kd_msg_is_not_registered (kd_msg_t *msg);

//  Field metadata: wire name and kind.
const char *
    kd_msg_field_name (kd_field_t field);
kd_field_kind_t
    kd_msg_field_kind (kd_field_t field);

//  Routing id of a message received on, or to be sent from, a ROUTER socket.
//  Borrowed; NULL when none.  The setter copies the frame.
zframe_t *
    kd_msg_routing_id (kd_msg_t *self);
void
    kd_msg_set_routing_id (kd_msg_t *self, zframe_t *routing_id);

//  True when the field is present.
bool
    kd_msg_has (kd_msg_t *self, kd_field_t field);

//  Scalar accessors.  A getter on an absent field returns 0, 0.0 or "".
//  Setting a field of the wrong kind is a programming error (assert).
void
    kd_msg_set_uint (kd_msg_t *self, kd_field_t field, uint64_t value);
uint64_t
    kd_msg_uint (kd_msg_t *self, kd_field_t field);
void
    kd_msg_set_float (kd_msg_t *self, kd_field_t field, double value);
double
    kd_msg_float (kd_msg_t *self, kd_field_t field);
//  Copies the string.
void
    kd_msg_set_str (kd_msg_t *self, kd_field_t field, const char *value);
const char *
    kd_msg_str (kd_msg_t *self, kd_field_t field);

//  Array accessors.  Setters copy; getters borrow and set *count.
void
    kd_msg_set_uints (kd_msg_t *self, kd_field_t field,
                      const uint64_t *values, size_t count);
const uint64_t *
    kd_msg_uints (kd_msg_t *self, kd_field_t field, size_t *count);
void
    kd_msg_set_floats (kd_msg_t *self, kd_field_t field,
                       const double *values, size_t count);
const double *
    kd_msg_floats (kd_msg_t *self, kd_field_t field, size_t *count);
void
    kd_msg_set_strs (kd_msg_t *self, kd_field_t field,
                     const char **values, size_t count);
const char **
    kd_msg_strs (kd_msg_t *self, kd_field_t field, size_t *count);

//  Bulk data frame.  kd_msg_set_data takes ownership of *frame_p and nulls
//  it, and sets the "count" field to the frame's length / 4; the frame's
//  length must be a multiple of 4.  kd_msg_data borrows.
void
    kd_msg_set_data (kd_msg_t *self, zframe_t **frame_p);
zframe_t *
    kd_msg_data (kd_msg_t *self);
//  Borrow size bytes at data as the data frame (sets "count"), so that
//  kd_msg_send hands them to ZeroMQ without a copy (zmq_msg_init_data).
//  free_fn (data, hint), when not NULL, is called exactly once when the
//  bytes are no longer needed: by libzmq's I/O thread after sending, or on
//  destroy or a failed send.  The caller must not change the bytes until
//  then; with free_fn NULL it must know by other means (a reply) that the
//  message has gone.  kd_msg_encode and kd_msg_take_data copy them;
//  kd_msg_data returns NULL for them (kd_msg_data_floats sees them).
void
    kd_msg_set_data_ref (kd_msg_t *self, const void *data, size_t size,
                         zmq_free_fn *free_fn, void *hint);
//  Detach the data frame: caller owns it, the message keeps none.
zframe_t *
    kd_msg_take_data (kd_msg_t *self);
//  The data frame as floats, or NULL when absent or not fp32 (field
//  "dtype"); *count is set.  The pointer is into the received frame: no
//  copy is made.
const float *
    kd_msg_data_floats (kd_msg_t *self, size_t *count);

//  How a keys frame holds its keys on the wire.  In memory they are always
//  plain uint64s: the codec encodes and decodes the frame.
typedef enum {
    KD_KEY_ENC_U64 = 0,         //  little-endian uint64s, 8 bytes a key
    KD_KEY_ENC_DELTA = 1        //  the first key, then each key's distance
                                //  from the one before (at least 1), as
                                //  LEB128 varints: 1-3 bytes a key when keys
                                //  are dense, at most 10
} kd_key_enc_t;

//  The keys frame of a keyed PUSH or PULL.  kd_msg_set_keys copies n keys,
//  which must be strictly increasing, and sets "keys" to n; they go plain
//  unless "key_enc" is set to KD_KEY_ENC_DELTA.  kd_msg_keys borrows them
//  (8-byte aligned), or returns NULL with *n 0 when there is no keys frame.
void
    kd_msg_set_keys (kd_msg_t *self, const uint64_t *keys, size_t n);
const uint64_t *
    kd_msg_keys (kd_msg_t *self, size_t *n);

//  The bytes a received message's keys frame took on the wire (0 for a
//  message not decoded, or without keys): what the keys cost the network.
size_t
    kd_msg_keys_wire_bytes (kd_msg_t *self);

//  The data frame's values as float32, whatever its dtype: converted into
//  out (count floats) from fp16 or bf16, copied from fp32.  Returns 0, or
//  -1 when there is no frame or it does not hold count values.
int
    kd_msg_data_to_floats (kd_msg_t *self, float *out, size_t count);

//  Encode into a new zmsg (routing id first if set).  Caller owns *out.
//  Returns 0, or -1 if the message lacks a required field.
int
    kd_msg_encode (kd_msg_t *self, zmsg_t **out);

//  Decode a multipart message.  Takes ownership of *zmsg_p and nulls it.
//  If routed is true, the first frame is a routing id.  On success returns 0
//  and sets *out (caller owns it).  On malformed input returns -2, sets
//  *out to NULL and fills err; if the routing id could be read, *routing_p
//  (when not NULL) receives a copy of it so that the caller can answer
//  ERROR.  Never asserts on input.
int
    kd_msg_decode (zmsg_t **zmsg_p, bool routed, kd_msg_t **out,
                   zframe_t **routing_p, kd_msg_err_t *err);

//  Pre-validate a MessagePack buffer: every declared array, map, string and
//  binary length fits in the bytes that remain, nesting is at most
//  max_depth, and the buffer holds exactly one object.  Returns 0 or -2.
int
    kd_msgpack_validate (const uint8_t *data, size_t size, int max_depth);

//  Send and destroy the message (also on failure).  Returns 0 or -1.
int
    kd_msg_send (kd_msg_t **self_p, void *socket);

//  Receive one message from a socket.  Returns 0 and sets *out; -1 when
//  interrupted or timed out (nothing read); -2 on malformed input, with err
//  and *routing_p set as for kd_msg_decode.  Routed is inferred from the
//  socket type (ROUTER).
int
    kd_msg_recv (void *socket, kd_msg_t **out, zframe_t **routing_p,
                 kd_msg_err_t *err);

//  Where a message came from: the connection's file descriptor and the
//  metadata ZeroMQ attaches to it.
typedef struct {
    int fd;                     //  ZMQ_SRCFD, or -1 (inproc, unknown)
    char address [64];          //  "Peer-Address" (TCP: the IP), or ""
    char user [64];             //  "User-Id" from ZAP (CURVE: the key), or ""
    char role [16];             //  "role" of that key's certificate, or ""
} kd_msg_source_t;

//  kd_msg_recv that also says where the message came from.  src may be
//  NULL; its fields are filled from the header frame, and also on -2 when
//  a header frame was read.
int
    kd_msg_recv_from (void *socket, kd_msg_t **out, zframe_t **routing_p,
                      kd_msg_err_t *err, kd_msg_source_t *src);

//  kd_msg_recv_from that does not wait: returns 1, with nothing read, when
//  no message is queued.  A loop that drains a socket asks the socket
//  itself instead of polling it between messages: a poll costs system
//  calls, a queued message none.
int
    kd_msg_recv_from_nowait (void *socket, kd_msg_t **out, zframe_t **routing_p,
                             kd_msg_err_t *err, kd_msg_source_t *src);

//  A copy of a message without its routing id (encoded and decoded, so
//  it holds its own data frame), or NULL if it cannot be encoded.
kd_msg_t *
    kd_msg_dup (kd_msg_t *self);

//  Build an ERROR reply (routing id copied when given).  Caller owns it.
kd_msg_t *
    kd_msg_new_error (zframe_t *routing_id, int code, const char *reason);

#ifdef __cplusplus
}
#endif

#endif
