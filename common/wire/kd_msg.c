/*  kd_msg: the Kudus wire codec.

    A message travels as [routing id] header [data].  The header is one
    MessagePack map; the optional data frame is a raw little-endian float32
    array.  Both directions are driven by two static tables: s_fields names
    every field and its kind, s_types names every message type with the
    fields it requires and the data frame it carries.  Adding a field or a
    type means adding a table row, not code.

    Decoding never trusts its input.  Before msgpack-c sees a header, our own
    walker (kd_msgpack_validate) proves that every declared length and count
    fits in the bytes that remain, because msgpack-c allocates from declared
    counts: five bytes can otherwise ask it for gigabytes.  After unpacking,
    every object's type and size is checked before it is read.  Failures
    return -2 with an error code and a short reason, never an assert.

    docs/protocol.md is the normative description of the wire.
*/
#include "kd_msg.h"
#include "kd_half.h"
#include <assert.h>
#include <errno.h>
#include <msgpack.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

//  The data frame is handed to BLAS as float *, without a copy, so the wire
//  byte order must be the host's.  Kudus runs on little-endian hosts only.
_Static_assert (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
                "the Kudus wire is little-endian; this host is not");
_Static_assert (sizeof (float) == 4, "the data frame holds IEEE float32");
_Static_assert (KD_F_FIELD_COUNT <= 128, "presence is a 128-bit mask");

//  A set of fields, bit f for field f.
typedef unsigned __int128 s_mask_t;

#define S_BIT(f)        ((s_mask_t) 1 << (KD_F_ ## f))
#define S_ONE(f)        ((s_mask_t) 1 << (f))

//  Lowest field in a non-empty set, and the size of a set.  Loops visit
//  the set bits only: a message has a handful of fields of the hundred,
//  and every message is encoded, decoded and destroyed once.
static inline int
s_mask_first (s_mask_t m)
{
    uint64_t lo = (uint64_t) m;
    return lo ? __builtin_ctzll (lo) : 64 + __builtin_ctzll ((uint64_t) (m >> 64));
}

static inline int
s_mask_count (s_mask_t m)
{
    return __builtin_popcountll ((uint64_t) m) + __builtin_popcountll ((uint64_t) (m >> 64));
}
#define S_FLOAT_BYTES   4           //  bytes per value in the data frame
#define S_MAX_STACK     64          //  deepest nesting the validator tracks
#define S_NAME_SHOWN    32          //  bytes of a peer's string in a reason

//  --------------------------------------------------------------------------
//  Schema tables

typedef struct {
    const char *name;               //  wire name, lowercase
    size_t name_len;                //  strlen (name), for key matching
    kd_field_kind_t kind;           //  value kind
} s_field_spec_t;

#define S_FIELD(f, n, k) [KD_F_ ## f] = { n, sizeof (n) - 1, KD_FT_ ## k }

static const s_field_spec_t s_fields [KD_F_FIELD_COUNT] = {
    S_FIELD (ROLE,          "role",         STR),
    S_FIELD (NAME,          "name",         STR),
    S_FIELD (ENDPOINT,      "endpoint",     STR),
    S_FIELD (RANK,          "rank",         UINT),
    S_FIELD (VERSION,       "version",      UINT),
    S_FIELD (CLOCK,         "clock",        UINT),
    S_FIELD (BASE,          "base",         UINT),
    S_FIELD (SAMPLES,       "samples",      UINT),
    S_FIELD (LOSS,          "loss",         FLOAT),
    S_FIELD (MODEL,         "model",        STR),
    S_FIELD (HIDDEN,        "hidden",       UINT),
    S_FIELD (N_PARAMS,      "n_params",     UINT),
    S_FIELD (LO,            "lo",           UINT),
    S_FIELD (HI,            "hi",           UINT),
    S_FIELD (LR,            "lr",           FLOAT),
    S_FIELD (MOMENTUM,      "momentum",     FLOAT),
    S_FIELD (BATCH,         "batch",        UINT),
    S_FIELD (SEED,          "seed",         UINT),
    S_FIELD (EPOCHS,        "epochs",       FLOAT),
    S_FIELD (HEARTBEAT_MS,  "heartbeat_ms", UINT),
    S_FIELD (CONSISTENCY,   "consistency",  STR),
    S_FIELD (ENDPOINTS,     "endpoints",    STRS),
    S_FIELD (LOS,           "los",          UINTS),
    S_FIELD (HIS,           "his",          UINTS),
    S_FIELD (PART_LO,       "part_lo",      UINT),
    S_FIELD (PART_HI,       "part_hi",      UINT),
    S_FIELD (T0_MS,         "t0_ms",        UINT),
    S_FIELD (STALENESS,     "staleness",    UINT),
    S_FIELD (DROPPED,       "dropped",      UINT),
    S_FIELD (GROUP,         "group",        UINT),
    S_FIELD (REASON,        "reason",       STR),
    S_FIELD (CODE,          "code",         UINT),
    S_FIELD (COUNT,         "count",        UINT),
    S_FIELD (TS_MS,         "ts_ms",        UINT),
    S_FIELD (RANKS,         "ranks",        UINTS),
    S_FIELD (CLOCKS,        "clocks",       UINTS),
    S_FIELD (WEIGHTS,       "weights",      FLOATS),
    S_FIELD (DROP_RANKS,    "drop_ranks",   UINTS),
    S_FIELD (DROP_CLOCKS,   "drop_clocks",  UINTS),
    S_FIELD (COMPUTE_MS,    "compute_ms",   FLOAT),
    S_FIELD (PUSH_MS,       "push_ms",      FLOAT),
    S_FIELD (WAIT_MS,       "wait_ms",      FLOAT),
    S_FIELD (PULL_MS,       "pull_ms",      FLOAT),
    S_FIELD (PHASES,        "phases",       UINT),
    S_FIELD (EPOCH,         "epoch",        FLOAT),
    S_FIELD (WORKERS,       "workers",      UINT),
    S_FIELD (REGROUPS,      "regroups",     UINT),
    S_FIELD (ACCURACY,      "accuracy",     FLOAT),
    S_FIELD (GROUPS,        "groups",       UINTS),
    S_FIELD (KIND,          "kind",         STR),
    S_FIELD (DETAIL,        "detail",       STR),
    S_FIELD (SESSION,       "session",      UINT),
    S_FIELD (LOST,          "lost",         UINT),
    S_FIELD (ROWS,          "rows",         UINTS),
    S_FIELD (MIN_CLOCK,     "min_clock",    UINT),
    S_FIELD (EMULATED_MS,   "emulated_ms",  FLOAT),
    S_FIELD (OPTIMIZER,     "optimizer",    STR),
    S_FIELD (TENSORS,       "tensors",      STRS),
    S_FIELD (SHAPES,        "shapes",       UINTS),
    S_FIELD (COUNTERS,      "counters",     UINTS),
    S_FIELD (REFUSED,       "refused",      UINT),
    S_FIELD (DTYPE,         "dtype",        UINT),
    S_FIELD (SYNC,          "sync",         UINT),
    S_FIELD (KEYS,          "keys",         UINT),
    S_FIELD (SHM,           "shm",          UINT),
    S_FIELD (PID,           "pid",          UINT),
    S_FIELD (HOST,          "host",         STR),
    S_FIELD (FD,            "fd",           UINT),
    S_FIELD (TOKEN,         "token",        UINT),
    S_FIELD (BYTES,         "bytes",        UINT),
    S_FIELD (OFFSET,        "offset",       UINT),
    S_FIELD (SEQ,           "seq",          UINT),
    S_FIELD (ITEMS,         "items",        UINT),
    S_FIELD (RELAYS,        "relays",       UINTS),
    S_FIELD (METRIC,        "metric",       STR),
    S_FIELD (VALUE,         "value",        FLOAT),
    S_FIELD (KEY_ENC,       "key_enc",      UINT),
    S_FIELD (STAGED,        "staged",       UINT),
    S_FIELD (REG,           "reg",          UINT),
    S_FIELD (MODE,          "mode",         STR),
    S_FIELD (GEN,           "gen",          UINT),
    S_FIELD (LEASE_AHEAD,   "lease_ahead",  UINT),
    S_FIELD (AHEAD,         "ahead",        UINTS),
};

typedef enum {
    S_DATA_NONE,                    //  a data frame is malformed
    S_DATA_REQUIRED,                //  a data frame must follow the header
    S_DATA_OPTIONAL                 //  a data frame may follow (checked alike)
} s_data_t;

typedef struct {
    const char *name;               //  wire name, as in the enum
    const char *direction;          //  who sends it to whom, in words
    s_mask_t required;              //  fields that must be present
    s_mask_t optional;              //  fields its senders may add
    s_data_t data;                  //  data frame rule
    unsigned senders [KD_TO_COUNT]; //  roles that may send it to each service
} s_type_spec_t;

//  The protocol's schema, written once.  For each type: its direction, its
//  required and optional fields, its data frame, and the roles that may
//  send it to the scheduler, a shard and the monitor (kd_role enforces
//  those under CURVE; a role with no bit for a service is refused there).
//  The decoder accepts any known field on any type (checked by kind and
//  kept), so that a peer can add a field without a version bump; only the
//  required ones are enforced.  docs/protocol.md's message and role tables
//  state the same, and test_kd_schema compares them.
#define S_TYPE(t, dir, req, opt, d, to_sch, to_shd, to_mon) \
    [KD_MSG_ ## t] = { #t, dir, req, opt, S_DATA_ ## d, { to_sch, to_shd, to_mon } }
#define S_W     KD_ROLE_WORKER
#define S_S     KD_ROLE_SHARD
#define S_M     KD_ROLE_MONITOR
#define S_C     KD_ROLE_SCHEDULER
#define S_E     KD_ROLE_EVALUATOR

static const s_type_spec_t s_types [KD_MSG_TYPE_COUNT] = {
    S_TYPE (HELLO, "any -> scheduler",
            S_BIT (ROLE) | S_BIT (NAME),
            S_BIT (ENDPOINT) | S_BIT (VERSION) | S_BIT (CLOCK) | S_BIT (RANK)
          | S_BIT (LO) | S_BIT (HI) | S_BIT (SAMPLES) | S_BIT (SESSION)
          | S_BIT (TENSORS) | S_BIT (SHAPES) | S_BIT (KEYS) | S_BIT (STAGED)
          | S_BIT (LEASE_AHEAD), NONE,
            S_W | S_S | S_M | S_E, 0, 0),
    S_TYPE (WELCOME, "scheduler -> any",
            S_BIT (RANK) | S_BIT (ROLE),
            S_BIT (MODEL) | S_BIT (HIDDEN) | S_BIT (N_PARAMS) | S_BIT (LO)
          | S_BIT (HI) | S_BIT (LR) | S_BIT (MOMENTUM) | S_BIT (BATCH)
          | S_BIT (SEED) | S_BIT (EPOCHS) | S_BIT (HEARTBEAT_MS)
          | S_BIT (CONSISTENCY) | S_BIT (SESSION) | S_BIT (STALENESS)
          | S_BIT (OPTIMIZER) | S_BIT (TENSORS) | S_BIT (SHAPES) | S_BIT (KEYS)
          | S_BIT (ENDPOINT) | S_BIT (STAGED) | S_BIT (REG) | S_BIT (LEASE_AHEAD), NONE,
            0, 0, 0),
    S_TYPE (START, "scheduler -> worker, monitor, evaluator",
            S_BIT (ENDPOINTS) | S_BIT (LOS) | S_BIT (HIS),
            S_BIT (PART_LO) | S_BIT (PART_HI) | S_BIT (T0_MS)
          | S_BIT (VERSION) | S_BIT (TENSORS) | S_BIT (SHAPES) | S_BIT (KEYS)
          | S_BIT (KEY_ENC), NONE,
            0, 0, 0),
    S_TYPE (HEARTBEAT, "both ways", 0, S_BIT (RANK), NONE,
            S_W | S_S | S_M | S_E, S_W | S_S | S_M, S_W),
    S_TYPE (ARRIVE, "worker -> scheduler",
            S_BIT (CLOCK) | S_BIT (BASE) | S_BIT (SAMPLES),
            S_BIT (LOSS) | S_BIT (REFUSED) | S_BIT (STALENESS) | S_BIT (COMPUTE_MS)
          | S_BIT (EMULATED_MS) | S_BIT (STAGED), NONE,
            S_W, 0, 0),
    S_TYPE (RELEASE, "scheduler -> worker",
            S_BIT (VERSION) | S_BIT (CLOCK),
            S_BIT (STALENESS) | S_BIT (DROPPED) | S_BIT (GROUP)
          | S_BIT (PART_LO) | S_BIT (PART_HI) | S_BIT (ROWS) | S_BIT (MIN_CLOCK)
          | S_BIT (AHEAD), NONE,
            0, 0, 0),
    S_TYPE (LEAVE, "worker, evaluator -> scheduler", 0, S_BIT (REASON), NONE, S_W | S_E, 0, 0),
    S_TYPE (STOP, "scheduler -> any", 0, S_BIT (REASON) | S_BIT (VERSION), NONE, 0, 0, 0),
    S_TYPE (PUSH, "worker -> shard",
            S_BIT (RANK) | S_BIT (CLOCK) | S_BIT (BASE) | S_BIT (LO) | S_BIT (COUNT),
            S_BIT (SAMPLES) | S_BIT (DTYPE) | S_BIT (ROLE) | S_BIT (KEYS)
          | S_BIT (KEY_ENC) | S_BIT (SHM) | S_BIT (OFFSET) | S_BIT (REG), REQUIRED,
            0, S_W | S_S, 0),
    S_TYPE (PUSH_OK, "shard -> worker", S_BIT (CLOCK),
            S_BIT (VERSION) | S_BIT (STALENESS) | S_BIT (RANK) | S_BIT (REG), NONE,
            0, 0, 0),
    S_TYPE (PULL, "worker, monitor, evaluator -> shard",
            S_BIT (VERSION),
            S_BIT (LO) | S_BIT (COUNT) | S_BIT (DTYPE) | S_BIT (KEYS) | S_BIT (KEY_ENC)
          | S_BIT (SHM), NONE,
            0, S_W | S_M | S_E, 0),
    S_TYPE (PULL_OK, "shard -> puller",
            S_BIT (VERSION) | S_BIT (LO) | S_BIT (COUNT),
            S_BIT (TS_MS) | S_BIT (SAMPLES) | S_BIT (DTYPE) | S_BIT (SHM) | S_BIT (OFFSET)
          | S_BIT (SEQ), REQUIRED,
            0, 0, 0),
    S_TYPE (COMMIT, "scheduler -> shard",
            S_BIT (VERSION) | S_BIT (RANKS) | S_BIT (CLOCKS) | S_BIT (WEIGHTS),
            S_BIT (TS_MS) | S_BIT (DROP_RANKS) | S_BIT (DROP_CLOCKS)
          | S_BIT (SAMPLES) | S_BIT (ROLE), NONE,
            0, S_S, 0),
    S_TYPE (COMMIT_OK, "shard -> scheduler", S_BIT (VERSION), S_BIT (LOST), NONE, S_S, 0, 0),
    S_TYPE (TELEMETRY, "worker -> monitor",
            S_BIT (RANK) | S_BIT (CLOCK),
            S_BIT (COMPUTE_MS) | S_BIT (PUSH_MS) | S_BIT (WAIT_MS)
          | S_BIT (PULL_MS) | S_BIT (LOSS) | S_BIT (SAMPLES)
          | S_BIT (STALENESS) | S_BIT (DROPPED) | S_BIT (GROUP)
          | S_BIT (VERSION) | S_BIT (REFUSED), NONE,
            0, 0, S_W),
    S_TYPE (STATUS, "scheduler -> monitor",
            S_BIT (VERSION),
            S_BIT (PHASES) | S_BIT (EPOCH) | S_BIT (WORKERS) | S_BIT (DROPPED)
          | S_BIT (REGROUPS) | S_BIT (CONSISTENCY) | S_BIT (RANKS)
          | S_BIT (GROUPS) | S_BIT (RELAYS) | S_BIT (SAMPLES) | S_BIT (MODEL)
          | S_BIT (MODE), NONE,
            0, 0, 0),
    S_TYPE (EVAL, "scheduler -> monitor", S_BIT (VERSION), 0, NONE, 0, 0, 0),
    S_TYPE (EVAL_OK, "monitor -> scheduler",
            S_BIT (VERSION) | S_BIT (ACCURACY), S_BIT (LOSS) | S_BIT (TS_MS), NONE,
            S_M, 0, 0),
    S_TYPE (ERROR, "any -> any", S_BIT (CODE) | S_BIT (REASON), S_BIT (SHM) | S_BIT (LEASE_AHEAD), NONE,
            S_W | S_S | S_M | S_E, S_W | S_S | S_M | S_E, S_W | S_E),
    S_TYPE (EVENT, "scheduler -> monitor", S_BIT (KIND),
            S_BIT (DETAIL) | S_BIT (RANK) | S_BIT (NAME) | S_BIT (ROLE)
          | S_BIT (VERSION) | S_BIT (LOST), NONE,
            0, 0, 0),
    S_TYPE (INIT, "worker -> shard", S_BIT (LO) | S_BIT (COUNT), S_BIT (ROLE), REQUIRED,
            0, S_W | S_S, 0),
    S_TYPE (INIT_OK, "shard -> worker", S_BIT (VERSION), 0, NONE, 0, 0, 0),
    S_TYPE (STATS, "monitor -> shard", 0, 0, NONE, 0, S_M, 0),
    S_TYPE (STATS_OK, "shard -> monitor",
            S_BIT (RANK) | S_BIT (VERSION) | S_BIT (COUNTERS), S_BIT (TS_MS), NONE,
            0, 0, 0),
    S_TYPE (CHAIN, "scheduler -> shard", S_BIT (ROLE), S_BIT (ENDPOINT) | S_BIT (SYNC) | S_BIT (GEN), NONE,
            0, 0, 0),
    S_TYPE (SYNC, "shard -> shard", S_BIT (KIND),
            S_BIT (VERSION) | S_BIT (SAMPLES) | S_BIT (TS_MS) | S_BIT (LO)
          | S_BIT (COUNT) | S_BIT (RANK) | S_BIT (CLOCK) | S_BIT (BASE)
          | S_BIT (SESSION) | S_BIT (DTYPE) | S_BIT (GEN), OPTIONAL,
            0, S_S, 0),
    S_TYPE (SYNC_OK, "shard -> shard, scheduler", S_BIT (VERSION), S_BIT (RANK) | S_BIT (GEN), NONE,
            S_S, 0, 0),
    S_TYPE (ROUTE, "scheduler -> worker, monitor, evaluator", S_BIT (RANK) | S_BIT (ENDPOINT), 0, NONE,
            0, 0, 0),
    S_TYPE (SHM, "worker -> shard",
            S_BIT (PID) | S_BIT (HOST) | S_BIT (FD) | S_BIT (TOKEN) | S_BIT (BYTES), 0, NONE,
            0, S_W, 0),
    S_TYPE (SHM_OK, "shard -> worker",
            S_BIT (PID) | S_BIT (HOST) | S_BIT (FD) | S_BIT (TOKEN) | S_BIT (BYTES), 0, NONE,
            0, 0, 0),
    //  A barrier aggregator runs with the scheduler's key and vouches for
    //  the roles of the workers behind it.
    S_TYPE (RELAY, "aggregator <-> scheduler", S_BIT (ITEMS), 0, REQUIRED,
            S_C, 0, 0),
    //  An evaluator's score of a model version it pulled: the monitor
    //  publishes it, and stands on it when it cannot evaluate the model.
    S_TYPE (REPORT, "evaluator -> monitor",
            S_BIT (VERSION) | S_BIT (METRIC) | S_BIT (VALUE),
            S_BIT (LOSS) | S_BIT (TS_MS) | S_BIT (NAME), NONE,
            0, 0, S_E),
    //  The short phase path: the primary of a range tells the scheduler
    //  that a push is staged (by its whole chain), or refused for good.
    S_TYPE (STAGED, "shard -> scheduler", S_BIT (RANK) | S_BIT (CLOCK), S_BIT (REFUSED) | S_BIT (REG), NONE,
            S_S, 0, 0),
};

//  Array fields of one type that must have the same length, because entry i
//  of each describes the same thing.  An absent array counts as empty.
typedef struct {
    kd_msg_type_t type;             //  message type the rule applies to
    kd_field_t fields [3];          //  arrays that run in parallel
    size_t nfields;                 //  entries used in fields
} s_parallel_t;

static const s_parallel_t s_parallel [] = {
    { KD_MSG_START,  { KD_F_ENDPOINTS, KD_F_LOS, KD_F_HIS }, 3 },
    { KD_MSG_COMMIT, { KD_F_RANKS, KD_F_CLOCKS, KD_F_WEIGHTS }, 3 },
    { KD_MSG_COMMIT, { KD_F_DROP_RANKS, KD_F_DROP_CLOCKS }, 2 },
};

//  The data frame rule of one message: a PUSH or PULL_OK whose values are
//  in shared memory ("shm": 1) has no data frame.
static s_data_t s_data_rule (kd_msg_t *msg);

//  --------------------------------------------------------------------------
//  The message object

//  One field's value; which member is live follows s_fields [f].kind.
typedef struct {
    union {
        uint64_t u;                 //  KD_FT_UINT
        double f;                   //  KD_FT_FLOAT
        char *s;                    //  KD_FT_STR, owned
        uint64_t *us;               //  KD_FT_UINTS, owned
        double *fs;                 //  KD_FT_FLOATS, owned
        char **ss;                  //  KD_FT_STRS, owned, each owned
    };
    size_t count;                   //  elements of an array field
} s_value_t;

struct _kd_msg_t {
    kd_msg_type_t type;             //  message type
    s_mask_t present;               //  bit f set when field f is present
    s_value_t values [KD_F_FIELD_COUNT];    //  field values, by kd_field_t
    zframe_t *routing_id;           //  ROUTER peer identity, or NULL
    zframe_t *data;                 //  float32 data frame, or NULL
    zframe_t *keys;                 //  keys frame of a keyed PUSH or PULL, or NULL
    size_t keys_wire;               //  the bytes it took on the wire (decoded)
    bool has_ref;                   //  the data frame is borrowed memory:
    const void *ref_data;           //  its bytes (not owned)
    size_t ref_size;                //  their length
    zmq_free_fn *ref_free;          //  called once when they are let go
    void *ref_hint;                 //  passed to ref_free
};

//  Let go of borrowed data: its owner learns it is no longer needed.
static void
s_ref_release (kd_msg_t *self)
{
    if (self->has_ref && self->ref_free)
        self->ref_free ((void *) self->ref_data, self->ref_hint);
    self->has_ref = false;
    self->ref_data = NULL;
    self->ref_size = 0;
    self->ref_free = NULL;
    self->ref_hint = NULL;
}

//  Bytes in the data frame, owned or borrowed; 0 when there is none.
static size_t
s_data_size (kd_msg_t *self)
{
    return self->has_ref ? self->ref_size : self->data ? zframe_size (self->data) : 0;
}

//  True when type is a real message type.
static bool
s_type_valid (kd_msg_type_t type)
{
    return type > 0 && type < KD_MSG_TYPE_COUNT;
}

//  True when field is a real field.
static bool
s_field_valid (kd_field_t field)
{
    return (int) field >= 0 && field < KD_F_FIELD_COUNT;
}

//  True when a message of this type may carry a keys frame (header field
//  "keys" then says how many keys it holds).
static bool
s_takes_keys (kd_msg_type_t type)
{
    return type == KD_MSG_PUSH || type == KD_MSG_PULL;
}

//  Copy n bytes into a new NUL-terminated string.  Out of memory aborts,
//  like zmalloc does.
static char *
s_strndup (const char *src, size_t n)
{
    char *copy = (char *) zmalloc (n + 1);
    //  msgpack-c gives an empty string a NULL pointer, which memcpy may
    //  not be handed even for zero bytes.
    if (n > 0)
        memcpy (copy, src, n);
    copy [n] = 0;
    return copy;
}

//  Free a field's value and mark it absent.
static void
s_clear (kd_msg_t *self, kd_field_t field)
{
    s_value_t *v = &self->values [field];
    if (self->present & S_ONE (field)) {
        switch (s_fields [field].kind) {
            case KD_FT_STR:
                free (v->s);
                break;
            case KD_FT_UINTS:
                free (v->us);
                break;
            case KD_FT_FLOATS:
                free (v->fs);
                break;
            case KD_FT_STRS:
                for (size_t i = 0; i < v->count; i++)
                    free (v->ss [i]);
                free (v->ss);
                break;
            default:
                break;
        }
    }
    memset (v, 0, sizeof *v);
    self->present &= ~S_ONE (field);
}

//  Replace a field: check its kind, free the old value, mark it present.
//  Returns the slot to fill.
static s_value_t *
s_slot (kd_msg_t *self, kd_field_t field, kd_field_kind_t kind)
{
    assert (self);
    assert (s_field_valid (field));
    assert (s_fields [field].kind == kind);
    s_clear (self, field);
    self->present |= S_ONE (field);
    return &self->values [field];
}

//  Slot of a present field for a getter, or NULL when absent.
static s_value_t *
s_get (kd_msg_t *self, kd_field_t field, kd_field_kind_t kind)
{
    assert (self);
    assert (s_field_valid (field));
    assert (s_fields [field].kind == kind);
    if (!(self->present & S_ONE (field)))
        return NULL;
    return &self->values [field];
}

//  Create a new empty message of the given type.
kd_msg_t *
kd_msg_new (kd_msg_type_t type)
{
    assert (s_type_valid (type));
    //  The values of absent fields are never read (s_slot zeroes one
    //  before it is filled), so only the rest of the struct is cleared.
    kd_msg_t *self = (kd_msg_t *) malloc (sizeof (kd_msg_t));
    assert (self);
    memset (self, 0, offsetof (kd_msg_t, values));
    memset (&self->routing_id, 0, sizeof (kd_msg_t) - offsetof (kd_msg_t, routing_id));
    self->type = type;
    return self;
}

//  Destroy a message and null the caller's pointer.
void
kd_msg_destroy (kd_msg_t **self_p)
{
    assert (self_p);
    kd_msg_t *self = *self_p;
    if (!self)
        return;
    //  Only present fields own memory; the rest are zero already.
    while (self->present)
        s_clear (self, (kd_field_t) s_mask_first (self->present));
    zframe_destroy (&self->routing_id);
    zframe_destroy (&self->data);
    zframe_destroy (&self->keys);
    s_ref_release (self);
    free (self);
    *self_p = NULL;
}

//  Message type.
kd_msg_type_t
kd_msg_type (kd_msg_t *self)
{
    assert (self);
    return self->type;
}

//  Wire name of a type, or NULL when the type is not one.
//  The data frame rule of a type.
int
kd_msg_type_data (kd_msg_type_t type)
{
    return s_type_valid (type) ? (int) s_types [type].data : -1;
}

//  Who sends a type to whom.
const char *
kd_msg_type_direction (kd_msg_type_t type)
{
    return s_type_valid (type) ? s_types [type].direction : NULL;
}

//  A type's required or optional field names, in field order.
size_t
kd_msg_type_fields (kd_msg_type_t type, bool required, const char **names, size_t max)
{
    if (!s_type_valid (type))
        return 0;
    s_mask_t mask = required ? s_types [type].required : s_types [type].optional;
    size_t n = 0;
    for (int f = 0; f < KD_F_FIELD_COUNT; f++)
        if (mask & S_ONE (f)) {
            if (names && n < max)
                names [n] = s_fields [f].name;
            n++;
        }
    return n;
}

//  The roles that may send a type to a service.
unsigned
kd_msg_type_senders (kd_msg_type_t type, kd_msg_to_t to)
{
    return s_type_valid (type) && (unsigned) to < KD_TO_COUNT ? s_types [type].senders [to] : 0;
}

const char *
kd_msg_type_name (kd_msg_type_t type)
{
    return s_type_valid (type) ? s_types [type].name : NULL;
}

//  An ERROR that says "send HELLO first".
bool
kd_msg_is_not_registered (kd_msg_t *msg)
{
    if (!msg || kd_msg_type (msg) != KD_MSG_ERROR)
        return false;
    uint64_t code = kd_msg_uint (msg, KD_F_CODE);
    return code == KD_ERR_NOT_REGISTERED
        || (code == KD_ERR_STATE && !strncmp (kd_msg_str (msg, KD_F_REASON), "not registered", 14));
}

//  Look a type up by wire name; 0 if unknown.
kd_msg_type_t
kd_msg_type_lookup (const char *name)
{
    if (!name)
        return (kd_msg_type_t) 0;
    for (int t = 1; t < KD_MSG_TYPE_COUNT; t++)
        if (streq (name, s_types [t].name))
            return (kd_msg_type_t) t;
    return (kd_msg_type_t) 0;
}

//  Wire name of a field.
const char *
kd_msg_field_name (kd_field_t field)
{
    assert (s_field_valid (field));
    return s_fields [field].name;
}

//  Kind of a field.
kd_field_kind_t
kd_msg_field_kind (kd_field_t field)
{
    assert (s_field_valid (field));
    return s_fields [field].kind;
}

//  Routing id, borrowed; NULL when none.
zframe_t *
kd_msg_routing_id (kd_msg_t *self)
{
    assert (self);
    return self->routing_id;
}

//  Set (a copy of) the routing id; NULL clears it.
void
kd_msg_set_routing_id (kd_msg_t *self, zframe_t *routing_id)
{
    assert (self);
    //  Copy before destroying: the caller may pass our own frame back.
    zframe_t *copy = routing_id ? zframe_dup (routing_id) : NULL;
    zframe_destroy (&self->routing_id);
    self->routing_id = copy;
}

//  True when the field is present.
bool
kd_msg_has (kd_msg_t *self, kd_field_t field)
{
    assert (self);
    assert (s_field_valid (field));
    return (self->present & S_ONE (field)) != 0;
}

static s_data_t
s_data_rule (kd_msg_t *msg)
{
    s_data_t rule = s_types [msg->type].data;
    if (rule == S_DATA_REQUIRED && kd_msg_uint (msg, KD_F_SHM)
    &&  (msg->type == KD_MSG_PUSH || msg->type == KD_MSG_PULL_OK))
        return S_DATA_NONE;
    return rule;
}

//  --------------------------------------------------------------------------
//  Field accessors

//  Set an unsigned integer field.
void
kd_msg_set_uint (kd_msg_t *self, kd_field_t field, uint64_t value)
{
    s_slot (self, field, KD_FT_UINT)->u = value;
}

//  Unsigned integer field, 0 when absent.
uint64_t
kd_msg_uint (kd_msg_t *self, kd_field_t field)
{
    s_value_t *v = s_get (self, field, KD_FT_UINT);
    return v ? v->u : 0;
}

//  Set a float field.
void
kd_msg_set_float (kd_msg_t *self, kd_field_t field, double value)
{
    s_slot (self, field, KD_FT_FLOAT)->f = value;
}

//  Float field, 0.0 when absent.
double
kd_msg_float (kd_msg_t *self, kd_field_t field)
{
    s_value_t *v = s_get (self, field, KD_FT_FLOAT);
    return v ? v->f : 0.0;
}

//  Set a string field to a copy of value.
void
kd_msg_set_str (kd_msg_t *self, kd_field_t field, const char *value)
{
    assert (value);
    //  Copy first: value may be the string this call replaces.
    char *copy = s_strndup (value, strlen (value));
    s_slot (self, field, KD_FT_STR)->s = copy;
}

//  String field, "" when absent.  Borrowed.
const char *
kd_msg_str (kd_msg_t *self, kd_field_t field)
{
    s_value_t *v = s_get (self, field, KD_FT_STR);
    return v ? v->s : "";
}

//  Set an array of unsigned integers (copied).
void
kd_msg_set_uints (kd_msg_t *self, kd_field_t field,
                  const uint64_t *values, size_t count)
{
    assert (values || count == 0);
    //  At least one element, so that a present empty array is not NULL.
    uint64_t *copy = (uint64_t *) zmalloc ((count ? count : 1) * sizeof *copy);
    if (count)
        memcpy (copy, values, count * sizeof *copy);
    s_value_t *v = s_slot (self, field, KD_FT_UINTS);
    v->us = copy;
    v->count = count;
}

//  Array of unsigned integers, borrowed; NULL and 0 when absent.
const uint64_t *
kd_msg_uints (kd_msg_t *self, kd_field_t field, size_t *count)
{
    s_value_t *v = s_get (self, field, KD_FT_UINTS);
    if (count)
        *count = v ? v->count : 0;
    return v ? v->us : NULL;
}

//  Set an array of floats (copied).
void
kd_msg_set_floats (kd_msg_t *self, kd_field_t field,
                   const double *values, size_t count)
{
    assert (values || count == 0);
    double *copy = (double *) zmalloc ((count ? count : 1) * sizeof *copy);
    if (count)
        memcpy (copy, values, count * sizeof *copy);
    s_value_t *v = s_slot (self, field, KD_FT_FLOATS);
    v->fs = copy;
    v->count = count;
}

//  Array of floats, borrowed; NULL and 0 when absent.
const double *
kd_msg_floats (kd_msg_t *self, kd_field_t field, size_t *count)
{
    s_value_t *v = s_get (self, field, KD_FT_FLOATS);
    if (count)
        *count = v ? v->count : 0;
    return v ? v->fs : NULL;
}

//  Set an array of strings (each copied).
void
kd_msg_set_strs (kd_msg_t *self, kd_field_t field,
                 const char **values, size_t count)
{
    assert (values || count == 0);
    char **copy = (char **) zmalloc ((count ? count : 1) * sizeof *copy);
    for (size_t i = 0; i < count; i++) {
        assert (values [i]);
        copy [i] = s_strndup (values [i], strlen (values [i]));
    }
    s_value_t *v = s_slot (self, field, KD_FT_STRS);
    v->ss = copy;
    v->count = count;
}

//  Array of strings, borrowed; NULL and 0 when absent.
const char **
kd_msg_strs (kd_msg_t *self, kd_field_t field, size_t *count)
{
    s_value_t *v = s_get (self, field, KD_FT_STRS);
    if (count)
        *count = v ? v->count : 0;
    return v ? (const char **) v->ss : NULL;
}

//  --------------------------------------------------------------------------
//  Data frame

//  Take ownership of a float32 frame and set "count" from its length.
size_t
kd_dtype_size (uint64_t dtype)
{
    return dtype == KD_DTYPE_F32 ? 4 : dtype == KD_DTYPE_F16 || dtype == KD_DTYPE_BF16 ? 2 : 0;
}

int
kd_dtype_parse (const char *name)
{
    if (!name)
        return -1;
    return !strcmp (name, "fp32") ? KD_DTYPE_F32 : !strcmp (name, "fp16") ? KD_DTYPE_F16
         : !strcmp (name, "bf16") ? KD_DTYPE_BF16 : -1;
}

const char *
kd_dtype_name (uint64_t dtype)
{
    return dtype == KD_DTYPE_F32 ? "fp32" : dtype == KD_DTYPE_F16 ? "fp16"
         : dtype == KD_DTYPE_BF16 ? "bf16" : "unknown";
}

//  Bytes per value of a message's data frame: set "dtype" before the data.
static size_t
s_value_bytes (kd_msg_t *self)
{
    size_t size = kd_dtype_size (kd_msg_uint (self, KD_F_DTYPE));
    return size ? size : S_FLOAT_BYTES;
}

void
kd_msg_set_data (kd_msg_t *self, zframe_t **frame_p)
{
    assert (self);
    assert (frame_p && *frame_p);
    assert (zframe_size (*frame_p) % s_value_bytes (self) == 0);
    zframe_destroy (&self->data);
    s_ref_release (self);
    self->data = *frame_p;
    *frame_p = NULL;
    kd_msg_set_uint (self, KD_F_COUNT, zframe_size (self->data) / s_value_bytes (self));
}

//  Borrow size bytes at data as the data frame, sent without a copy.
void
kd_msg_set_data_ref (kd_msg_t *self, const void *data, size_t size,
                     zmq_free_fn *free_fn, void *hint)
{
    assert (self);
    assert (data || size == 0);
    assert (size % s_value_bytes (self) == 0);
    zframe_destroy (&self->data);
    s_ref_release (self);
    self->has_ref = true;
    self->ref_data = data;
    self->ref_size = size;
    self->ref_free = free_fn;
    self->ref_hint = hint;
    kd_msg_set_uint (self, KD_F_COUNT, size / s_value_bytes (self));
}

//  Data frame, borrowed; NULL when none.
zframe_t *
kd_msg_data (kd_msg_t *self)
{
    assert (self);
    return self->data;
}

//  Detach the data frame; the caller owns it.  "count" stays as it was.
zframe_t *
kd_msg_take_data (kd_msg_t *self)
{
    assert (self);
    zframe_t *data = self->data;
    self->data = NULL;
    if (self->has_ref) {
        data = zframe_new (self->ref_data, self->ref_size);
        s_ref_release (self);
    }
    return data;
}

//  The data frame as floats, or NULL when absent.  The decoder guarantees
//  that a received frame is float-aligned.
const float *
kd_msg_data_floats (kd_msg_t *self, size_t *count)
{
    assert (self);
    if (kd_msg_uint (self, KD_F_DTYPE) != KD_DTYPE_F32) {
        if (count)
            *count = 0;
        return NULL;
    }
    if (self->has_ref) {
        if (count)
            *count = self->ref_size / S_FLOAT_BYTES;
        return (const float *) self->ref_data;
    }
    if (!self->data) {
        if (count)
            *count = 0;
        return NULL;
    }
    if (count)
        *count = zframe_size (self->data) / S_FLOAT_BYTES;
    return (const float *) zframe_data (self->data);
}

void
kd_msg_set_keys (kd_msg_t *self, const uint64_t *keys, size_t n)
{
    assert (self);
    assert (keys || n == 0);
    assert (s_takes_keys (self->type));
    for (size_t i = 1; i < n; i++)
        assert (keys [i - 1] < keys [i]);
    zframe_destroy (&self->keys);
    self->keys = zframe_new (keys, n * sizeof (uint64_t));
    kd_msg_set_uint (self, KD_F_KEYS, n);
}

//  The keys frame as it goes on the wire: the message's own (moved or
//  copied) when plain, a new one when delta-encoded.
static zframe_t *
s_keys_wire (kd_msg_t *self, bool move)
{
    if (kd_msg_uint (self, KD_F_KEY_ENC) != KD_KEY_ENC_DELTA) {
        zframe_t *keys = move ? self->keys : zframe_dup (self->keys);
        if (move)
            self->keys = NULL;
        return keys;
    }
    size_t n = zframe_size (self->keys) / sizeof (uint64_t), bytes = 0;
    const uint64_t *k = (const uint64_t *) zframe_data (self->keys);
    //  Sized first, then written into the frame: no second copy.
    for (size_t i = 0; i < n; i++)
        for (uint64_t v = i ? k [i] - k [i - 1] : k [0]; ; v >>= 7) {
            bytes++;
            if (v < 0x80)
                break;
        }
    zframe_t *keys = zframe_new (NULL, bytes);
    uint8_t *p = zframe_data (keys);
    for (size_t i = 0; i < n; i++) {
        uint64_t v = i ? k [i] - k [i - 1] : k [0];
        while (v >= 0x80) {
            *p++ = (uint8_t) (v | 0x80);
            v >>= 7;
        }
        *p++ = (uint8_t) v;
    }
    if (move)
        zframe_destroy (&self->keys);
    return keys;
}

size_t
kd_msg_keys_wire_bytes (kd_msg_t *self)
{
    assert (self);
    return self->keys ? self->keys_wire : 0;
}

const uint64_t *
kd_msg_keys (kd_msg_t *self, size_t *n)
{
    assert (self && n);
    *n = self->keys ? zframe_size (self->keys) / sizeof (uint64_t) : 0;
    return self->keys ? (const uint64_t *) zframe_data (self->keys) : NULL;
}

int
kd_msg_data_to_floats (kd_msg_t *self, float *out, size_t count)
{
    assert (self && (out || count == 0));
    const void *data = self->has_ref ? self->ref_data : self->data ? zframe_data (self->data) : NULL;
    size_t bytes = s_data_size (self);
    uint64_t dtype = kd_msg_uint (self, KD_F_DTYPE);
    size_t value_bytes = kd_dtype_size (dtype);
    if (!data || value_bytes == 0 || bytes != count * value_bytes)
        return -1;
    if (dtype == KD_DTYPE_F32)
        memcpy (out, data, bytes);
    else
    if (dtype == KD_DTYPE_F16)
        kd_half_to_float (out, (const uint16_t *) data, count);
    else
        kd_bf16_to_float (out, (const uint16_t *) data, count);
    return 0;
}

//  --------------------------------------------------------------------------
//  Encoding

//  Length of array field f, 0 when absent.
static size_t
s_array_len (kd_msg_t *self, kd_field_t field)
{
    return kd_msg_has (self, field) ? self->values [field].count : 0;
}

//  True when every set of parallel arrays of this message agrees in length.
static bool
s_parallel_ok (kd_msg_t *self, kd_field_t *bad_a, kd_field_t *bad_b)
{
    for (size_t r = 0; r < sizeof s_parallel / sizeof s_parallel [0]; r++) {
        const s_parallel_t *rule = &s_parallel [r];
        if (rule->type != self->type)
            continue;
        size_t len = s_array_len (self, rule->fields [0]);
        for (size_t i = 1; i < rule->nfields; i++)
            if (s_array_len (self, rule->fields [i]) != len) {
                *bad_a = rule->fields [0];
                *bad_b = rule->fields [i];
                return false;
            }
    }
    return true;
}

//  True when the message can be encoded into a header the decoder accepts:
//  required fields present, data frame rule kept, limits respected.
static bool
s_encodable (kd_msg_t *self)
{
    const s_type_spec_t *spec = &s_types [self->type];
    if ((self->present & spec->required) != spec->required)
        return false;
    bool has_data = self->data != NULL || self->has_ref;
    s_data_t rule = s_data_rule (self);
    if ((rule == S_DATA_REQUIRED && !has_data) || (rule == S_DATA_NONE && has_data))
        return false;
    if (has_data
    &&  (kd_dtype_size (kd_msg_uint (self, KD_F_DTYPE)) == 0
    ||   kd_msg_uint (self, KD_F_COUNT) != s_data_size (self) / s_value_bytes (self)))
        return false;
    //  A keys frame goes with "keys" on the types that take one, and only there.
    bool keyed = s_takes_keys (self->type) && kd_msg_has (self, KD_F_KEYS);
    if (keyed != (self->keys != NULL)
    ||  (keyed && kd_msg_uint (self, KD_F_KEYS) != zframe_size (self->keys) / sizeof (uint64_t)))
        return false;
    for (s_mask_t m = self->present; m; m &= m - 1) {
        int f = s_mask_first (m);
        s_value_t *v = &self->values [f];
        switch (s_fields [f].kind) {
            case KD_FT_STR:
                if (strlen (v->s) > KD_MSG_MAX_STRING)
                    return false;
                break;
            case KD_FT_STRS:
                for (size_t i = 0; i < v->count; i++)
                    if (strlen (v->ss [i]) > KD_MSG_MAX_STRING)
                        return false;
                if (v->count > KD_MSG_MAX_ARRAY)
                    return false;
                break;
            case KD_FT_UINTS:
            case KD_FT_FLOATS:
                if (v->count > KD_MSG_MAX_ARRAY)
                    return false;
                break;
            default:
                break;
        }
    }
    kd_field_t a, b;
    return s_parallel_ok (self, &a, &b);
}

//  Pack a string.
static int
s_pack_str (msgpack_packer *pk, const char *s, size_t len)
{
    int rc = msgpack_pack_str (pk, len);
    return rc ? rc : msgpack_pack_str_body (pk, s, len);
}

//  Pack one field's value.
static int
s_pack_value (msgpack_packer *pk, kd_field_kind_t kind, const s_value_t *v)
{
    int rc = 0;
    switch (kind) {
        case KD_FT_UINT:
            return msgpack_pack_uint64 (pk, v->u);
        case KD_FT_FLOAT:
            return msgpack_pack_double (pk, v->f);
        case KD_FT_STR:
            return s_pack_str (pk, v->s, strlen (v->s));
        case KD_FT_UINTS:
            rc = msgpack_pack_array (pk, v->count);
            for (size_t i = 0; rc == 0 && i < v->count; i++)
                rc = msgpack_pack_uint64 (pk, v->us [i]);
            return rc;
        case KD_FT_FLOATS:
            rc = msgpack_pack_array (pk, v->count);
            for (size_t i = 0; rc == 0 && i < v->count; i++)
                rc = msgpack_pack_double (pk, v->fs [i]);
            return rc;
        case KD_FT_STRS:
            rc = msgpack_pack_array (pk, v->count);
            for (size_t i = 0; rc == 0 && i < v->count; i++)
                rc = s_pack_str (pk, v->ss [i], strlen (v->ss [i]));
            return rc;
    }
    assert (false);
    return -1;
}

//  Encode the message.  With move, the routing id and data frame are moved
//  into the output instead of copied, leaving the message without them.
//  Borrowed data is copied into a frame, unless skip_ref is set: then the
//  caller sends it, and the keys frame, after the frames of *out.
static int
s_encode (kd_msg_t *self, zmsg_t **out, bool move, bool skip_ref)
{
    assert (self);
    assert (out);
    *out = NULL;
    if (!s_encodable (self))
        return -1;

    int rc = -1;
    msgpack_sbuffer sbuf;
    msgpack_sbuffer_init (&sbuf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);

    //  "v" and "t" come first so that a reader streaming the map learns the
    //  version before anything else; the map itself is unordered.
    int fields = s_mask_count (self->present);
    int prc = msgpack_pack_map (&pk, 2 + fields);
    prc |= s_pack_str (&pk, "v", 1);
    prc |= msgpack_pack_uint64 (&pk, KD_PROTOCOL_VERSION);
    prc |= s_pack_str (&pk, "t", 1);
    const char *name = s_types [self->type].name;
    prc |= s_pack_str (&pk, name, strlen (name));
    for (s_mask_t m = self->present; m; m &= m - 1) {
        int f = s_mask_first (m);
        prc |= s_pack_str (&pk, s_fields [f].name, s_fields [f].name_len);
        prc |= s_pack_value (&pk, s_fields [f].kind, &self->values [f]);
    }
    //  The sbuffer fails only when realloc does.
    if (prc != 0 || sbuf.size > KD_MSG_MAX_HEADER)
        goto cleanup;

    zmsg_t *zmsg = zmsg_new ();
    if (self->routing_id) {
        zframe_t *id = move ? self->routing_id : zframe_dup (self->routing_id);
        if (move)
            self->routing_id = NULL;
        zmsg_append (zmsg, &id);
    }
    zmsg_addmem (zmsg, sbuf.data, sbuf.size);
    if (self->data) {
        zframe_t *data = move ? self->data : zframe_dup (self->data);
        if (move)
            self->data = NULL;
        zmsg_append (zmsg, &data);
    }
    if (self->has_ref && !skip_ref)
        zmsg_addmem (zmsg, self->ref_data, self->ref_size);
    //  Keys come last: after borrowed data the caller sends them too.
    if (self->keys && !(skip_ref && self->has_ref)) {
        zframe_t *keys = s_keys_wire (self, move);
        zmsg_append (zmsg, &keys);
    }
    *out = zmsg;
    rc = 0;
cleanup:
    msgpack_sbuffer_destroy (&sbuf);
    return rc;
}

//  Encode into a new zmsg; the message keeps its routing id and data.
int
kd_msg_encode (kd_msg_t *self, zmsg_t **out)
{
    return s_encode (self, out, false, false);
}

//  --------------------------------------------------------------------------
//  Validation of raw MessagePack

//  Read a big-endian unsigned integer of n bytes.
static uint64_t
s_read_be (const uint8_t *p, int n)
{
    uint64_t value = 0;
    for (int i = 0; i < n; i++)
        value = (value << 8) | p [i];
    return value;
}

//  Walk the buffer's format bytes without building anything.  pending counts
//  the objects still owed by every open container; as each needs at least a
//  byte, pending may never exceed the bytes left.  That bounds what
//  msgpack-c allocates afterwards by the size of the buffer.
int
kd_msgpack_validate (const uint8_t *data, size_t size, int max_depth)
{
    if (!data && size > 0)
        return -2;
    if (max_depth < 0)
        max_depth = 0;
    if (max_depth > S_MAX_STACK)
        max_depth = S_MAX_STACK;

    uint64_t stack [S_MAX_STACK];   //  objects left in each open container
    int height = 0;                 //  open containers
    uint64_t pending = 1;           //  objects still to read, all levels
    size_t pos = 0;
    while (pending > 0) {
        //  Close containers that are complete; the parent of the object
        //  being read stays open while that object's children are read.
        while (height > 0 && stack [height - 1] == 0)
            height--;
        if (pos >= size)
            return -2;
        uint8_t b = data [pos++];
        pending--;
        if (height > 0)
            stack [height - 1]--;

        int len_bytes = 0;          //  bytes of the length field
        uint64_t fixed = 0;         //  payload bytes after the length field
        int unit = 0;               //  payload: 1 = bytes, 2 = array, 3 = map
        uint64_t count = 0;         //  the length, for fix formats
        if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
            ;                       //  fixint, nil, bool: the byte alone
        else
        if (b <= 0x8f) {
            unit = 3;
            count = b & 0x0f;
        }
        else
        if (b <= 0x9f) {
            unit = 2;
            count = b & 0x0f;
        }
        else
        if (b <= 0xbf) {
            unit = 1;
            count = b & 0x1f;
        }
        else
        switch (b) {
            case 0xc4: case 0xd9: unit = 1; len_bytes = 1; break;  //  bin8, str8
            case 0xc5: case 0xda: unit = 1; len_bytes = 2; break;  //  bin16, str16
            case 0xc6: case 0xdb: unit = 1; len_bytes = 4; break;  //  bin32, str32
            case 0xc7: unit = 1; len_bytes = 1; fixed = 1; break;  //  ext8 + type
            case 0xc8: unit = 1; len_bytes = 2; fixed = 1; break;  //  ext16
            case 0xc9: unit = 1; len_bytes = 4; fixed = 1; break;  //  ext32
            case 0xca: fixed = 4; break;                           //  float32
            case 0xcb: fixed = 8; break;                           //  float64
            case 0xcc: case 0xd0: fixed = 1; break;                //  (u)int8
            case 0xcd: case 0xd1: fixed = 2; break;                //  (u)int16
            case 0xce: case 0xd2: fixed = 4; break;                //  (u)int32
            case 0xcf: case 0xd3: fixed = 8; break;                //  (u)int64
            case 0xd4: fixed = 2; break;                           //  fixext1
            case 0xd5: fixed = 3; break;                           //  fixext2
            case 0xd6: fixed = 5; break;                           //  fixext4
            case 0xd7: fixed = 9; break;                           //  fixext8
            case 0xd8: fixed = 17; break;                          //  fixext16
            case 0xdc: unit = 2; len_bytes = 2; break;             //  array16
            case 0xdd: unit = 2; len_bytes = 4; break;             //  array32
            case 0xde: unit = 3; len_bytes = 2; break;             //  map16
            case 0xdf: unit = 3; len_bytes = 4; break;             //  map32
            default:
                return -2;          //  0xc1 is never used
        }
        if ((size_t) len_bytes > size - pos)
            return -2;
        if (len_bytes) {
            count = s_read_be (data + pos, len_bytes);
            pos += len_bytes;
        }
        uint64_t payload = fixed + (unit == 1 ? count : 0);
        if (payload > size - pos)
            return -2;
        pos += payload;
        if (unit >= 2) {
            if (height + 1 > max_depth)
                return -2;
            uint64_t children = unit == 3 ? 2 * count : count;
            uint64_t left = size - pos;
            if (pending > left || children > left - pending)
                return -2;
            pending += children;
            if (children > 0)
                stack [height++] = children;
        }
    }
    return pos == size ? 0 : -2;
}

//  --------------------------------------------------------------------------
//  Decoding

//  Fill err and return -2.
static int
s_fail (kd_msg_err_t *err, int code, const char *format, ...)
{
    err->code = code;
    va_list args;
    va_start (args, format);
    vsnprintf (err->reason, sizeof err->reason, format, args);
    va_end (args);
    return -2;
}

//  Copy a peer's string for a log line or reason: at most S_NAME_SHOWN
//  bytes, non-printable bytes replaced, so that a hostile name cannot forge
//  log lines.
static void
s_printable (const char *src, size_t len, char *out)
{
    size_t n = len < S_NAME_SHOWN ? len : S_NAME_SHOWN;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char) src [i];
        out [i] = (c >= 0x20 && c < 0x7f && c != '\'') ? (char) c : '?';
    }
    out [n] = 0;
}

//  True when a msgpack string object equals name.
static bool
s_str_is (const msgpack_object *obj, const char *name, size_t name_len)
{
    return obj->type == MSGPACK_OBJECT_STR
        && obj->via.str.size == name_len
        && memcmp (obj->via.str.ptr, name, name_len) == 0;
}

//  Field names hashed by length and first and last byte, so that a
//  decoded key costs one or two compares instead of a scan of the table.
#define S_NAME_BUCKETS  256
static int16_t s_name_head [S_NAME_BUCKETS];
static int16_t s_name_next [KD_F_FIELD_COUNT];
static pthread_once_t s_names_once = PTHREAD_ONCE_INIT;

static unsigned
s_name_hash (const char *name, size_t len)
{
    unsigned char first = len ? (unsigned char) name [0] : 0;
    unsigned char last = len ? (unsigned char) name [len - 1] : 0;
    return ((unsigned) len * 31u + first * 7u + last) % S_NAME_BUCKETS;
}

static void
s_names_index (void)
{
    for (int b = 0; b < S_NAME_BUCKETS; b++)
        s_name_head [b] = -1;
    for (int f = KD_F_FIELD_COUNT - 1; f >= 0; f--) {
        unsigned b = s_name_hash (s_fields [f].name, s_fields [f].name_len);
        s_name_next [f] = s_name_head [b];
        s_name_head [b] = (int16_t) f;
    }
}

//  Field whose wire name is the string key, or -1 for an unknown key.
static int
s_field_lookup (const msgpack_object_str *key)
{
    pthread_once (&s_names_once, s_names_index);
    for (int f = s_name_head [s_name_hash (key->ptr, key->size)]; f >= 0; f = s_name_next [f])
        if (key->size == s_fields [f].name_len
        &&  memcmp (key->ptr, s_fields [f].name, key->size) == 0)
            return f;
    return -1;
}

//  Check one string object: type, length, no NUL.
static int
s_check_str (const msgpack_object *obj, kd_field_t field, kd_msg_err_t *err)
{
    const char *name = s_fields [field].name;
    if (obj->type != MSGPACK_OBJECT_STR)
        return s_fail (err, KD_ERR_MALFORMED, "field '%s' has wrong type", name);
    if (obj->via.str.size > KD_MSG_MAX_STRING)
        return s_fail (err, KD_ERR_TOO_LARGE,
                       "field '%s' has a string of %u bytes, limit %d",
                       name, obj->via.str.size, KD_MSG_MAX_STRING);
    if (memchr (obj->via.str.ptr, 0, obj->via.str.size))
        return s_fail (err, KD_ERR_MALFORMED, "field '%s' contains a NUL byte", name);
    return 0;
}

//  Read a float from a msgpack number, or return false.
static bool
s_read_float (const msgpack_object *obj, double *value)
{
    switch (obj->type) {
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
            *value = obj->via.f64;
            return true;
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
            *value = (double) obj->via.u64;
            return true;
        case MSGPACK_OBJECT_NEGATIVE_INTEGER:
            *value = (double) obj->via.i64;
            return true;
        default:
            return false;
    }
}

//  Check an array object against the field's element kind, then store it.
static int
s_decode_array (kd_msg_t *self, kd_field_t field, const msgpack_object *obj,
                kd_msg_err_t *err)
{
    const char *name = s_fields [field].name;
    if (obj->type != MSGPACK_OBJECT_ARRAY)
        return s_fail (err, KD_ERR_MALFORMED, "field '%s' has wrong type", name);
    uint32_t n = obj->via.array.size;
    if (n > KD_MSG_MAX_ARRAY)
        return s_fail (err, KD_ERR_TOO_LARGE, "field '%s' has %u elements, limit %d",
                       name, n, KD_MSG_MAX_ARRAY);
    const msgpack_object *items = obj->via.array.ptr;
    kd_field_kind_t kind = s_fields [field].kind;

    //  Check everything before allocating, so that failure leaks nothing.
    for (uint32_t i = 0; i < n; i++) {
        double ignored;
        if (kind == KD_FT_UINTS && items [i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return s_fail (err, KD_ERR_MALFORMED, "field '%s' has wrong type", name);
        if (kind == KD_FT_FLOATS && !s_read_float (&items [i], &ignored))
            return s_fail (err, KD_ERR_MALFORMED, "field '%s' has wrong type", name);
        if (kind == KD_FT_STRS && s_check_str (&items [i], field, err))
            return -2;
    }
    s_value_t *v = s_slot (self, field, kind);
    v->count = n;
    size_t alloc = n ? n : 1;
    if (kind == KD_FT_UINTS) {
        v->us = (uint64_t *) zmalloc (alloc * sizeof (uint64_t));
        for (uint32_t i = 0; i < n; i++)
            v->us [i] = items [i].via.u64;
    }
    else
    if (kind == KD_FT_FLOATS) {
        v->fs = (double *) zmalloc (alloc * sizeof (double));
        for (uint32_t i = 0; i < n; i++)
            s_read_float (&items [i], &v->fs [i]);
    }
    else {
        v->ss = (char **) zmalloc (alloc * sizeof (char *));
        for (uint32_t i = 0; i < n; i++)
            v->ss [i] = s_strndup (items [i].via.str.ptr, items [i].via.str.size);
    }
    return 0;
}

//  Check one known field's value against its kind, then store it.
static int
s_decode_field (kd_msg_t *self, kd_field_t field, const msgpack_object *obj,
                kd_msg_err_t *err)
{
    const char *name = s_fields [field].name;
    switch (s_fields [field].kind) {
        case KD_FT_UINT:
            if (obj->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return s_fail (err, KD_ERR_MALFORMED, "field '%s' has wrong type", name);
            kd_msg_set_uint (self, field, obj->via.u64);
            return 0;
        case KD_FT_FLOAT: {
            double value;
            if (!s_read_float (obj, &value))
                return s_fail (err, KD_ERR_MALFORMED, "field '%s' has wrong type", name);
            kd_msg_set_float (self, field, value);
            return 0;
        }
        case KD_FT_STR:
            if (s_check_str (obj, field, err))
                return -2;
            s_slot (self, field, KD_FT_STR)->s =
                s_strndup (obj->via.str.ptr, obj->via.str.size);
            return 0;
        default:
            return s_decode_array (self, field, obj, err);
    }
}

//  qsort order of map keys: by length, then bytes.
static int
s_key_compare (const void *a, const void *b)
{
    const msgpack_object_str *ka = *(const msgpack_object_str *const *) a;
    const msgpack_object_str *kb = *(const msgpack_object_str *const *) b;
    if (ka->size != kb->size)
        return ka->size < kb->size ? -1 : 1;
    //  Empty keys have NULL pointers (found by fuzz_kd_msg).
    return ka->size ? memcmp (ka->ptr, kb->ptr, ka->size) : 0;
}

//  Check that every key is a string and no key repeats.  Sorting costs
//  O(n log n); comparing pairs would let a large header burn the CPU.
static int
s_check_keys (const msgpack_object_map *map, kd_msg_err_t *err)
{
    uint32_t n = map->size;
    for (uint32_t i = 0; i < n; i++)
        if (map->ptr [i].key.type != MSGPACK_OBJECT_STR)
            return s_fail (err, KD_ERR_MALFORMED, "header key is not a string");
    if (n < 2)
        return 0;
    int rc = 0;
    const msgpack_object_str **keys =
        (const msgpack_object_str **) zmalloc (n * sizeof *keys);
    for (uint32_t i = 0; i < n; i++)
        keys [i] = &map->ptr [i].key.via.str;
    qsort (keys, n, sizeof *keys, s_key_compare);
    for (uint32_t i = 1; i < n; i++)
        if (s_key_compare (&keys [i - 1], &keys [i]) == 0) {
            char shown [S_NAME_SHOWN + 1];
            s_printable (keys [i]->ptr, keys [i]->size, shown);
            rc = s_fail (err, KD_ERR_MALFORMED, "duplicate key '%s'", shown);
            break;
        }
    free (keys);
    return rc;
}

//  Value of the first key named name, or NULL.
static const msgpack_object *
s_map_find (const msgpack_object_map *map, const char *name)
{
    size_t len = strlen (name);
    for (uint32_t i = 0; i < map->size; i++)
        if (s_str_is (&map->ptr [i].key, name, len))
            return &map->ptr [i].val;
    return NULL;
}

//  Decode a header frame into a new message.  The order of the checks is
//  part of the protocol: the version is judged before anything else, so
//  that a future header layout still earns a 505 rather than a 400.
static int
s_decode_header (const uint8_t *bytes, size_t size, kd_msg_t **out,
                 kd_msg_err_t *err)
{
    *out = NULL;
    if (size > KD_MSG_MAX_HEADER)
        return s_fail (err, KD_ERR_TOO_LARGE, "header of %zu bytes exceeds %u",
                       size, KD_MSG_MAX_HEADER);
    if (kd_msgpack_validate (bytes, size, KD_MSG_MAX_DEPTH))
        return s_fail (err, KD_ERR_MALFORMED, "header is not well-formed MessagePack");

    int rc = -2;
    kd_msg_t *msg = NULL;
    msgpack_unpacked unpacked;
    msgpack_unpacked_init (&unpacked);
    size_t offset = 0;
    if (msgpack_unpack_next (&unpacked, (const char *) bytes, size, &offset)
            != MSGPACK_UNPACK_SUCCESS
    ||  offset != size) {
        s_fail (err, KD_ERR_MALFORMED, "header is not well-formed MessagePack");
        goto cleanup;
    }
    if (unpacked.data.type != MSGPACK_OBJECT_MAP) {
        s_fail (err, KD_ERR_MALFORMED, "header is not a map");
        goto cleanup;
    }
    const msgpack_object_map *map = &unpacked.data.via.map;

    const msgpack_object *v = s_map_find (map, "v");
    if (!v) {
        s_fail (err, KD_ERR_MALFORMED, "missing protocol version 'v'");
        goto cleanup;
    }
    if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
        s_fail (err, KD_ERR_MALFORMED, "protocol version 'v' has wrong type");
        goto cleanup;
    }
    if (v->via.u64 != KD_PROTOCOL_VERSION) {
        s_fail (err, KD_ERR_VERSION, "protocol version %llu not supported",
                (unsigned long long) v->via.u64);
        goto cleanup;
    }
    if (s_check_keys (map, err))
        goto cleanup;

    const msgpack_object *t = s_map_find (map, "t");
    if (!t) {
        s_fail (err, KD_ERR_MALFORMED, "missing message type 't'");
        goto cleanup;
    }
    if (t->type != MSGPACK_OBJECT_STR) {
        s_fail (err, KD_ERR_MALFORMED, "message type 't' has wrong type");
        goto cleanup;
    }
    int type = 0;
    for (int i = 1; i < KD_MSG_TYPE_COUNT && !type; i++)
        if (s_str_is (t, s_types [i].name, strlen (s_types [i].name)))
            type = i;
    if (!type) {
        char shown [S_NAME_SHOWN + 1];
        s_printable (t->via.str.ptr, t->via.str.size, shown);
        s_fail (err, KD_ERR_UNKNOWN_TYPE, "unknown message type '%s'", shown);
        goto cleanup;
    }

    msg = kd_msg_new ((kd_msg_type_t) type);
    for (uint32_t i = 0; i < map->size; i++) {
        //  Unknown keys, "v" and "t" among them, are skipped: a newer peer
        //  may send fields this one does not know.
        int field = s_field_lookup (&map->ptr [i].key.via.str);
        if (field >= 0
        &&  s_decode_field (msg, (kd_field_t) field, &map->ptr [i].val, err))
            goto cleanup;
    }
    const s_type_spec_t *spec = &s_types [type];
    s_mask_t missing = spec->required & ~msg->present;
    if (missing) {
        int f = s_mask_first (missing);
        s_fail (err, KD_ERR_MALFORMED, "%s lacks required field '%s'",
                spec->name, s_fields [f].name);
        goto cleanup;
    }
    kd_field_t a, b;
    if (!s_parallel_ok (msg, &a, &b)) {
        s_fail (err, KD_ERR_MALFORMED, "%s fields '%s' and '%s' differ in length",
                spec->name, s_fields [a].name, s_fields [b].name);
        goto cleanup;
    }
    *out = msg;
    msg = NULL;
    rc = 0;
cleanup:
    kd_msg_destroy (&msg);
    msgpack_unpacked_destroy (&unpacked);
    return rc;
}

//  Decode a delta-encoded keys frame into plain uint64s, in place of
//  *keys_p: exactly declared varints, none longer than 10 bytes or past 64
//  bits, every delta after the first at least 1 and no sum past 2^64 - 1.
//  So the keys come out strictly increasing.  0, or -2 with err filled.
static int
s_keys_delta (zframe_t **keys_p, uint64_t declared, kd_msg_err_t *err)
{
    const uint8_t *p = zframe_data (*keys_p), *end = p + zframe_size (*keys_p);
    if (declared > KD_MSG_MAX_KEYS) {
        s_fail (err, KD_ERR_TOO_LARGE, "keys %llu in a delta keys frame, at most %u",
                (unsigned long long) declared, KD_MSG_MAX_KEYS);
        return -2;
    }
    //  A varint ends at each byte without its top bit: count them before
    //  anything is allocated for the keys, which take 8 bytes each.
    uint64_t ends = 0;
    for (const uint8_t *q = p; q < end; q++)
        ends += !(*q & 0x80);
    if (ends != declared) {
        s_fail (err, KD_ERR_MALFORMED, "keys %llu disagrees with a delta keys frame of %llu varints",
                (unsigned long long) declared, (unsigned long long) ends);
        return -2;
    }
    zframe_t *plain = zframe_new (NULL, (size_t) declared * sizeof (uint64_t));
    uint64_t *k = (uint64_t *) zframe_data (plain);
    for (uint64_t i = 0; i < declared; i++) {
        uint64_t v = 0;
        int shift = 0;
        for (;;) {
            if (p == end || shift > 63 || (shift == 63 && (*p & 0x7e))) {
                s_fail (err, KD_ERR_MALFORMED, p == end ? "delta keys frame ends inside key %llu"
                        : "delta keys frame: key %llu's varint is longer than 64 bits", (unsigned long long) i);
                zframe_destroy (&plain);
                return -2;
            }
            uint8_t b = *p++;
            v |= (uint64_t) (b & 0x7f) << shift;
            shift += 7;
            if (!(b & 0x80))
                break;
        }
        if (i && (v == 0 || v > UINT64_MAX - k [i - 1])) {
            s_fail (err, KD_ERR_MALFORMED, v ? "delta keys frame: key %llu is past 2^64 - 1"
                    : "keys are not strictly increasing at entry %llu", (unsigned long long) i);
            zframe_destroy (&plain);
            return -2;
        }
        k [i] = i ? k [i - 1] + v : v;
    }
    if (p != end) {
        s_fail (err, KD_ERR_MALFORMED, "delta keys frame has %zu bytes after its %llu keys",
                (size_t) (end - p), (unsigned long long) declared);
        zframe_destroy (&plain);
        return -2;
    }
    zframe_destroy (keys_p);
    *keys_p = plain;
    return 0;
}

//  Check a keys frame against its header, decoding a delta frame first
//  (key_enc): as many keys as "keys" says, at most KD_MSG_MAX_KEYS, a plain
//  frame of whole uint64s, strictly increasing (so sorted and unique), and,
//  on a PUSH, a value count that gives every key the same number of values.
//  Realigns a misplaced frame.  Returns 0, or -2 with err filled.
static int
s_keys_check (kd_msg_t *msg, zframe_t **keys_p, zframe_t *data, kd_msg_err_t *err)
{
    uint64_t declared = kd_msg_uint (msg, KD_F_KEYS);
    uint64_t enc = kd_msg_uint (msg, KD_F_KEY_ENC);
    if (enc != KD_KEY_ENC_U64 && enc != KD_KEY_ENC_DELTA) {
        s_fail (err, KD_ERR_MALFORMED, "unknown key_enc %llu (0: uint64, 1: delta varints)",
                (unsigned long long) enc);
        return -2;
    }
    if (enc == KD_KEY_ENC_DELTA && s_keys_delta (keys_p, declared, err))
        return -2;
    size_t bytes = zframe_size (*keys_p);
    if (bytes % sizeof (uint64_t)) {
        s_fail (err, KD_ERR_MALFORMED, "keys frame of %zu bytes is not a multiple of 8", bytes);
        return -2;
    }
    size_t n = bytes / sizeof (uint64_t);
    if (n != declared) {
        s_fail (err, KD_ERR_MALFORMED, "keys %llu disagrees with a keys frame of %zu keys",
                (unsigned long long) declared, n);
        return -2;
    }
    if (n > KD_MSG_MAX_KEYS) {
        s_fail (err, KD_ERR_TOO_LARGE, "keys frame of %zu keys, at most %u", n, KD_MSG_MAX_KEYS);
        return -2;
    }
    if (n && (uintptr_t) zframe_data (*keys_p) % _Alignof (uint64_t)) {
        zframe_t *copy = zframe_dup (*keys_p);
        zframe_destroy (keys_p);
        *keys_p = copy;
    }
    //  Delta-decoded keys increase by construction.
    const uint64_t *k = (const uint64_t *) zframe_data (*keys_p);
    for (size_t i = 1; i < n && enc == KD_KEY_ENC_U64; i++)
        if (k [i - 1] >= k [i]) {
            s_fail (err, KD_ERR_MALFORMED, "keys are not strictly increasing at entry %zu", i);
            return -2;
        }
    if (msg->type == KD_MSG_PUSH && data) {
        uint64_t count = kd_msg_uint (msg, KD_F_COUNT);
        if (n == 0 ? count != 0 : count % n != 0) {
            s_fail (err, KD_ERR_MALFORMED, "count %llu is not a whole number of values per key "
                    "for %zu keys", (unsigned long long) count, n);
            return -2;
        }
    }
    return 0;
}

//  Decode a multipart message.  Takes ownership of *zmsg_p.
int
kd_msg_decode (zmsg_t **zmsg_p, bool routed, kd_msg_t **out,
               zframe_t **routing_p, kd_msg_err_t *err)
{
    assert (zmsg_p);
    assert (out);
    kd_msg_err_t local;
    if (!err)
        err = &local;
    err->code = 0;
    err->reason [0] = 0;
    *out = NULL;
    if (routing_p)
        *routing_p = NULL;

    int rc = -2;
    zmsg_t *zmsg = *zmsg_p;
    *zmsg_p = NULL;
    zframe_t *routing = NULL, *header = NULL, *data = NULL, *keys = NULL;
    kd_msg_t *msg = NULL;

    //  Without a routing id only the header and the data frame remain.
    size_t frames = zmsg ? zmsg_size (zmsg) : 0;
    size_t max_frames = routed ? KD_MSG_MAX_FRAMES : KD_MSG_MAX_FRAMES - 1;
    if (routed && frames > 0)
        routing = zmsg_pop (zmsg);
    if (frames < (routed ? 2u : 1u)) {
        s_fail (err, KD_ERR_MALFORMED, "message has no header frame");
        goto cleanup;
    }
    if (frames > max_frames) {
        s_fail (err, KD_ERR_MALFORMED, "message has %zu frames, at most %zu",
                frames, max_frames);
        goto cleanup;
    }
    header = zmsg_pop (zmsg);
    if (s_decode_header (zframe_data (header), zframe_size (header), &msg, err))
        goto cleanup;

    //  A keyed PUSH or PULL ends with its keys frame; any other message has
    //  at most one frame after its header.
    size_t rest = zmsg_size (zmsg);
    bool keyed = s_takes_keys (msg->type) && kd_msg_has (msg, KD_F_KEYS);
    if (kd_msg_uint (msg, KD_F_SHM) && keyed) {
        s_fail (err, KD_ERR_MALFORMED, "keyed %s cannot use shared memory", s_types [msg->type].name);
        goto cleanup;
    }
    size_t need = s_data_rule (msg) == S_DATA_REQUIRED ? 2 : 1;
    if (keyed && rest != need) {
        s_fail (err, KD_ERR_MALFORMED, "keyed %s has %zu frames after its header, needs %zu "
                "(values, if any, then keys)", s_types [msg->type].name, rest, need);
        goto cleanup;
    }
    if (!keyed && rest > 1) {
        s_fail (err, KD_ERR_MALFORMED, "%s has %zu frames after its header, at most 1",
                s_types [msg->type].name, rest);
        goto cleanup;
    }
    data = keyed && need == 1 ? NULL : zmsg_pop (zmsg);
    if (keyed) {
        keys = zmsg_pop (zmsg);
        msg->keys_wire = zframe_size (keys);
        if (s_keys_check (msg, &keys, data, err))
            goto cleanup;
    }

    const s_type_spec_t *spec = &s_types [msg->type];
    s_data_t rule = s_data_rule (msg);
    if (rule == S_DATA_NONE && data) {
        s_fail (err, KD_ERR_MALFORMED, "%s takes no data frame%s", spec->name,
                spec->data == S_DATA_NONE ? "" : " when its values are in shared memory");
        goto cleanup;
    }
    if (rule == S_DATA_REQUIRED || (rule == S_DATA_OPTIONAL && data)) {
        if (!data) {
            s_fail (err, KD_ERR_MALFORMED, "%s requires a data frame", spec->name);
            goto cleanup;
        }
        size_t bytes = zframe_size (data);
        uint64_t dtype = kd_msg_uint (msg, KD_F_DTYPE);
        size_t value_bytes = kd_dtype_size (dtype);
        if (value_bytes == 0) {
            s_fail (err, KD_ERR_MALFORMED, "unknown dtype %llu", (unsigned long long) dtype);
            goto cleanup;
        }
        if (bytes % value_bytes) {
            s_fail (err, KD_ERR_MALFORMED,
                    "data frame of %zu bytes is not a multiple of %zu",
                    bytes, value_bytes);
            goto cleanup;
        }
        uint64_t count = kd_msg_uint (msg, KD_F_COUNT);
        if (count != bytes / value_bytes) {
            s_fail (err, KD_ERR_MALFORMED,
                    "count %llu disagrees with data frame of %zu values",
                    (unsigned long long) count, bytes / value_bytes);
            goto cleanup;
        }
        //  libzmq may hand us a frame that points into its receive buffer at
        //  any offset.  Callers read it as float *, so realign the rare
        //  misplaced frame with one copy.
        if (bytes && (uintptr_t) zframe_data (data) % _Alignof (float)) {
            zframe_t *copy = zframe_dup (data);
            zframe_destroy (&data);
            data = copy;
        }
    }
    msg->routing_id = routing;
    routing = NULL;
    msg->data = data;
    data = NULL;
    msg->keys = keys;
    keys = NULL;
    *out = msg;
    msg = NULL;
    rc = 0;
cleanup:
    if (routing && routing_p) {
        *routing_p = routing;
        routing = NULL;
    }
    kd_msg_destroy (&msg);
    zframe_destroy (&routing);
    zframe_destroy (&header);
    zframe_destroy (&data);
    zframe_destroy (&keys);
    zmsg_destroy (&zmsg);
    return rc;
}

//  --------------------------------------------------------------------------
//  Sockets

//  True when the socket (zsock_t, zactor_t or libzmq handle) is a ROUTER.
static bool
s_is_router (void *socket)
{
    void *handle = zsock_resolve (socket);
    int type = 0;
    size_t size = sizeof type;
    if (!handle || zmq_getsockopt (handle, ZMQ_TYPE, &type, &size) != 0)
        return false;
    return type == ZMQ_ROUTER;
}

//  Send and destroy the message.  On a ROUTER the routing id is required,
//  since without it ZeroMQ would take the header for an identity and drop
//  the message; on other sockets a routing id is not sent.
int
kd_msg_send (kd_msg_t **self_p, void *socket)
{
    assert (self_p);
    assert (socket);
    int rc = -1;
    zmsg_t *zmsg = NULL;
    kd_msg_t *self = *self_p;
    if (!self)
        goto cleanup;
    bool router = s_is_router (socket);
    if (router && !self->routing_id)
        goto cleanup;
    if (!router)
        zframe_destroy (&self->routing_id);
    if (s_encode (self, &zmsg, true, true))
        goto cleanup;
    if (self->has_ref) {
        //  The header frames go first, then the borrowed bytes as a ZeroMQ
        //  message over the caller's memory: libzmq calls ref_free from its
        //  I/O thread once the bytes are on the wire (or dropped), and from
        //  here if the send fails.
        zframe_t *frame;
        rc = 0;
        while (rc == 0 && (frame = zmsg_pop (zmsg))) {
            rc = zframe_send (&frame, socket, ZFRAME_MORE);
            zframe_destroy (&frame);
        }
        zmq_msg_t data;
        zmq_msg_init_data (&data, (void *) self->ref_data, self->ref_size,
                           self->ref_free, self->ref_hint);
        self->has_ref = false;      //  data owns the reference now
        if (rc == 0 && zmq_msg_send (&data, zsock_resolve (socket), self->keys ? ZMQ_SNDMORE : 0) < 0)
            rc = -1;
        if (rc != 0)
            zmq_msg_close (&data);
        if (rc == 0 && self->keys) {
            zframe_t *keys = s_keys_wire (self, true);
            rc = zframe_send (&keys, socket, 0);
            zframe_destroy (&keys);
        }
    }
    else
        rc = zmsg_send (&zmsg, socket);
cleanup:
    zmsg_destroy (&zmsg);
    kd_msg_destroy (self_p);
    return rc;
}

//  Receive one message.  Frames are read one at a time and only the first
//  KD_MSG_MAX_FRAMES + 1 are kept (enough to see that there are too many),
//  so that a peer sending thousands of empty frames costs no memory.
int
kd_msg_recv (void *socket, kd_msg_t **out, zframe_t **routing_p,
             kd_msg_err_t *err)
{
    return kd_msg_recv_from (socket, out, routing_p, err, NULL);
}

//  Copy a metadata property of a received part, or "" when it has none.
static void
s_meta (zmq_msg_t *part, const char *property, char *out, size_t size)
{
    const char *value = zmq_msg_gets (part, property);
    snprintf (out, size, "%s", value ? value : "");
}

//  kd_msg_recv_from, waiting for the first part or not (ZMQ_DONTWAIT in
//  flags: returns 1 when no message is waiting).
static int
s_recv_from (void *socket, kd_msg_t **out, zframe_t **routing_p,
             kd_msg_err_t *err, kd_msg_source_t *src, int flags)
{
    assert (socket);
    assert (out);
    *out = NULL;
    if (routing_p)
        *routing_p = NULL;
    if (src)
        *src = (kd_msg_source_t) { .fd = -1 };
    bool routed = s_is_router (socket);
    zmsg_t *zmsg = zmsg_new ();
    zframe_t *frame = NULL;
    //  The source is read off the header part, which came off the wire (a
    //  ROUTER makes up the routing-id part).  Those parts are small, so
    //  they are read as zmq_msg_t and copied; data frames are not.
    int small = src ? (routed ? 2 : 1) : 0;
    bool more = true;
    for (int i = 0; i < small && more; i++) {
        zmq_msg_t part;
        zmq_msg_init (&part);
        if (zmq_msg_recv (&part, zsock_resolve (socket), i == 0 ? flags : 0) < 0) {
            bool empty = i == 0 && errno == EAGAIN && (flags & ZMQ_DONTWAIT);
            zmq_msg_close (&part);
            if (i == 0) {
                zmsg_destroy (&zmsg);
                return empty ? 1 : -1;
            }
            more = false;
            break;
        }
        more = zmq_msg_more (&part);
        if (i == small - 1) {
            src->fd = zmq_msg_get (&part, ZMQ_SRCFD);
            s_meta (&part, "Peer-Address", src->address, sizeof src->address);
            s_meta (&part, "User-Id", src->user, sizeof src->user);
            s_meta (&part, "role", src->role, sizeof src->role);
        }
        zframe_t *copy = zframe_new (zmq_msg_data (&part), zmq_msg_size (&part));
        zmq_msg_close (&part);
        zmsg_append (zmsg, &copy);
    }
    if (more) {
        bool first = small == 0;
        frame = first && (flags & ZMQ_DONTWAIT) ? zframe_recv_nowait (socket) : zframe_recv (socket);
        //  zframe_recv_nowait frees its empty frame before returning; free
        //  keeps errno (glibc 2.33 and later; Debian 12 has 2.36).
        if (!frame && first) {
            bool empty = errno == EAGAIN && (flags & ZMQ_DONTWAIT);
            zmsg_destroy (&zmsg);
            return empty ? 1 : -1;
        }
    }
    while (frame) {
        more = zframe_more (frame);
        if (zmsg_size (zmsg) <= KD_MSG_MAX_FRAMES)
            zmsg_append (zmsg, &frame);
        else
            zframe_destroy (&frame);
        //  The parts of a message arrive together, so this does not block.
        frame = more ? zframe_recv (socket) : NULL;
    }
    return kd_msg_decode (&zmsg, routed, out, routing_p, err);
}

int
kd_msg_recv_from (void *socket, kd_msg_t **out, zframe_t **routing_p,
                  kd_msg_err_t *err, kd_msg_source_t *src)
{
    return s_recv_from (socket, out, routing_p, err, src, 0);
}

int
kd_msg_recv_from_nowait (void *socket, kd_msg_t **out, zframe_t **routing_p,
                         kd_msg_err_t *err, kd_msg_source_t *src)
{
    return s_recv_from (socket, out, routing_p, err, src, ZMQ_DONTWAIT);
}

//  Build an ERROR reply with the reason cut to KD_MSG_MAX_STRING bytes.
kd_msg_t *
kd_msg_dup (kd_msg_t *self)
{
    assert (self);
    zmsg_t *zmsg = NULL;
    if (s_encode (self, &zmsg, false, false))
        return NULL;
    if (self->routing_id) {
        zframe_t *id = zmsg_pop (zmsg);
        zframe_destroy (&id);
    }
    kd_msg_t *copy = NULL;
    kd_msg_err_t err;
    if (kd_msg_decode (&zmsg, false, &copy, NULL, &err)) {
        zmsg_destroy (&zmsg);
        return NULL;
    }
    return copy;
}

kd_msg_t *
kd_msg_new_error (zframe_t *routing_id, int code, const char *reason)
{
    assert (code >= 0);
    if (!reason)
        reason = "";
    size_t len = strlen (reason);
    if (len > KD_MSG_MAX_STRING) {
        len = KD_MSG_MAX_STRING;
        //  Back up over UTF-8 continuation bytes so as not to split a
        //  character.
        while (len > 0 && ((unsigned char) reason [len] & 0xc0) == 0x80)
            len--;
    }
    kd_msg_t *self = kd_msg_new (KD_MSG_ERROR);
    kd_msg_set_routing_id (self, routing_id);
    kd_msg_set_uint (self, KD_F_CODE, (uint64_t) code);
    s_slot (self, KD_F_REASON, KD_FT_STR)->s = s_strndup (reason, len);
    return self;
}
