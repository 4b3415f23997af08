/*  test_kd_msg: the wire codec.

    The suite keeps its own copy of the message table from kd_msg.h, so that
    a change to the codec's table that is not also a change to the protocol
    fails here.  It round-trips every type with every field set, exercises
    the DEALER/ROUTER path over inproc://, and feeds the decoder truncated,
    mistyped, oversized and random input: every malformed message must come
    back as -2 with the right code, and nothing may crash or leak (run the
    suite under ASan to see the latter).
*/
#include <criterion/criterion.h>
#include "kd_util.h"
#include <czmq.h>
#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kd_msg.h"
#include "kd_half.h"
#include <math.h>

TestSuite (kd_msg);

#define END          KD_F_FIELD_COUNT   //  ends a field list below
typedef unsigned __int128 s_mask_t;     //  a set of fields, as the codec keeps it
#define RCVTIMEO_MS  2000               //  every test socket gives up after this
#define FUZZ_ROUNDS  20000              //  random inputs per fuzz loop

//  --------------------------------------------------------------------------
//  The protocol table, as kd_msg.h states it

typedef struct {
    kd_msg_type_t type;             //  message type
    kd_field_t required [8];        //  required fields, END-terminated
    kd_field_t optional [20];       //  optional fields, END-terminated
    bool data;                      //  a data frame is required
} s_schema_t;

static const s_schema_t s_schema [] = {
    { KD_MSG_HELLO, { KD_F_ROLE, KD_F_NAME, END },
      { KD_F_ENDPOINT, KD_F_VERSION, KD_F_CLOCK, KD_F_RANK, KD_F_LO, KD_F_HI,
        KD_F_SAMPLES, KD_F_SESSION, KD_F_TENSORS, KD_F_SHAPES, KD_F_LEASE_AHEAD, END }, false },
    { KD_MSG_WELCOME, { KD_F_RANK, KD_F_ROLE, END },
      { KD_F_MODEL, KD_F_HIDDEN, KD_F_N_PARAMS, KD_F_LO, KD_F_HI, KD_F_LR,
        KD_F_MOMENTUM, KD_F_BATCH, KD_F_SEED, KD_F_EPOCHS, KD_F_HEARTBEAT_MS,
        KD_F_CONSISTENCY, KD_F_SESSION, KD_F_STALENESS, KD_F_OPTIMIZER, KD_F_TENSORS,
        KD_F_SHAPES, KD_F_LEASE_AHEAD, END }, false },
    { KD_MSG_START, { KD_F_ENDPOINTS, KD_F_LOS, KD_F_HIS, END },
      { KD_F_PART_LO, KD_F_PART_HI, KD_F_T0_MS, KD_F_VERSION, KD_F_TENSORS, KD_F_SHAPES, END },
      false },
    { KD_MSG_HEARTBEAT, { END }, { KD_F_RANK, END }, false },
    { KD_MSG_ARRIVE, { KD_F_CLOCK, KD_F_BASE, KD_F_SAMPLES, END },
      { KD_F_LOSS, END }, false },
    { KD_MSG_RELEASE, { KD_F_VERSION, KD_F_CLOCK, END },
      { KD_F_STALENESS, KD_F_DROPPED, KD_F_GROUP, KD_F_PART_LO, KD_F_PART_HI,
        KD_F_ROWS, KD_F_MIN_CLOCK, KD_F_AHEAD, END }, false },
    { KD_MSG_LEAVE, { END }, { KD_F_REASON, END }, false },
    { KD_MSG_STOP, { END }, { KD_F_REASON, END }, false },
    { KD_MSG_PUSH, { KD_F_RANK, KD_F_CLOCK, KD_F_BASE, KD_F_LO, KD_F_COUNT, END },
      { END }, true },
    { KD_MSG_PUSH_OK, { KD_F_CLOCK, END }, { END }, false },
    { KD_MSG_PULL, { KD_F_VERSION, END }, { KD_F_LO, KD_F_COUNT, END }, false },
    { KD_MSG_PULL_OK, { KD_F_VERSION, KD_F_LO, KD_F_COUNT, END },
      { KD_F_TS_MS, END }, true },
    { KD_MSG_COMMIT, { KD_F_VERSION, KD_F_RANKS, KD_F_CLOCKS, KD_F_WEIGHTS, END },
      { KD_F_TS_MS, KD_F_DROP_RANKS, KD_F_DROP_CLOCKS, KD_F_SAMPLES, END }, false },
    { KD_MSG_COMMIT_OK, { KD_F_VERSION, END }, { KD_F_LOST, END }, false },
    { KD_MSG_TELEMETRY, { KD_F_RANK, KD_F_CLOCK, END },
      { KD_F_COMPUTE_MS, KD_F_PUSH_MS, KD_F_WAIT_MS, KD_F_PULL_MS, KD_F_LOSS,
        KD_F_SAMPLES, KD_F_STALENESS, KD_F_DROPPED, KD_F_GROUP, KD_F_VERSION,
        END }, false },
    { KD_MSG_STATUS, { KD_F_VERSION, END },
      { KD_F_PHASES, KD_F_EPOCH, KD_F_WORKERS, KD_F_DROPPED, KD_F_REGROUPS,
        KD_F_CONSISTENCY, KD_F_RANKS, KD_F_GROUPS, KD_F_RELAYS, END }, false },
    { KD_MSG_EVAL, { KD_F_VERSION, END }, { END }, false },
    { KD_MSG_EVAL_OK, { KD_F_VERSION, KD_F_ACCURACY, END },
      { KD_F_LOSS, KD_F_TS_MS, END }, false },
    { KD_MSG_ERROR, { KD_F_CODE, KD_F_REASON, END }, { KD_F_LEASE_AHEAD, END }, false },
    { KD_MSG_EVENT, { KD_F_KIND, END },
      { KD_F_DETAIL, KD_F_RANK, KD_F_NAME, KD_F_ROLE, KD_F_VERSION, KD_F_LOST, END }, false },
    { KD_MSG_INIT, { KD_F_LO, KD_F_COUNT, END }, { END }, true },
    { KD_MSG_INIT_OK, { KD_F_VERSION, END }, { END }, false },
    { KD_MSG_STATS, { END }, { END }, false },
    { KD_MSG_STATS_OK, { KD_F_RANK, KD_F_VERSION, KD_F_COUNTERS, END }, { KD_F_TS_MS, END }, false },
    { KD_MSG_CHAIN, { KD_F_ROLE, END }, { KD_F_ENDPOINT, KD_F_SYNC, KD_F_GEN, END }, false },
    { KD_MSG_SYNC, { KD_F_KIND, END },
      { KD_F_VERSION, KD_F_SAMPLES, KD_F_TS_MS, KD_F_LO, KD_F_RANK, KD_F_CLOCK, KD_F_BASE,
        KD_F_SESSION, KD_F_GEN, END }, false },
    { KD_MSG_SYNC_OK, { KD_F_VERSION, END }, { KD_F_RANK, KD_F_GEN, END }, false },
    { KD_MSG_ROUTE, { KD_F_RANK, KD_F_ENDPOINT, END }, { END }, false },
    { KD_MSG_SHM, { KD_F_PID, KD_F_HOST, KD_F_FD, KD_F_TOKEN, KD_F_BYTES, END }, { END }, false },
    { KD_MSG_SHM_OK, { KD_F_PID, KD_F_HOST, KD_F_FD, KD_F_TOKEN, KD_F_BYTES, END }, { END }, false },
    { KD_MSG_RELAY, { KD_F_ITEMS, END }, { END }, true },
    { KD_MSG_REPORT, { KD_F_VERSION, KD_F_METRIC, KD_F_VALUE, END },
      { KD_F_LOSS, KD_F_TS_MS, KD_F_NAME, END }, false },
    { KD_MSG_STAGED, { KD_F_RANK, KD_F_CLOCK, END }, { KD_F_REFUSED, END }, false },
};
#define SCHEMAS (sizeof s_schema / sizeof s_schema [0])

//  Test data that fits in a PUSH or PULL_OK data frame.
static const float s_floats [] = { 0.5f, -1.0f, 3.25f, 1e-7f, 42.0f };
#define FLOATS (sizeof s_floats / sizeof s_floats [0])

//  Length of every array field the fill helper sets.
#define ARRAY_LEN 3

//  Small deterministic generator, so a failure reproduces.
#define s_next kd_splitmix64

//  The field mask a schema sets in a complete message.
static s_mask_t
s_schema_mask (const s_schema_t *s, bool with_optional)
{
    s_mask_t mask = 0;
    for (int i = 0; s->required [i] != END; i++)
        mask |= (s_mask_t) 1 << s->required [i];
    if (with_optional) {
        for (int i = 0; s->optional [i] != END; i++)
            mask |= (s_mask_t) 1 << s->optional [i];
    }
    return mask;
}

//  Values the fill helper uses, chosen to reach the edges of each encoding:
//  fixint, 32-bit and full 64-bit integers; tiny, huge and negative floats;
//  non-ASCII strings.
static uint64_t
s_uint_value (int f, int i)
{
    switch ((f + i) % 3) {
        case 0:  return UINT64_MAX - (uint64_t) f - (uint64_t) i;
        case 1:  return (uint64_t) f + (uint64_t) i;
        default: return ((uint64_t) 1 << 40) + (uint64_t) f * 7 + (uint64_t) i;
    }
}

//  Test value of float field f, element i.
static double
s_float_value (int f, int i)
{
    return (f + i) % 2 ? -1e300 / (f + i + 1) : 0.1 * f + 1e-9 * i;
}

//  Test value of string field f, element i.
static void
s_str_value (int f, int i, char *buf, size_t size)
{
    snprintf (buf, size, "%s-\xc3\xbc-%d", kd_msg_field_name ((kd_field_t) f), i);
}

//  Set field f to its test value.
static void
s_fill_field (kd_msg_t *msg, int f)
{
    kd_field_t field = (kd_field_t) f;
    char bufs [ARRAY_LEN][64];
    const char *strs [ARRAY_LEN];
    uint64_t uints [ARRAY_LEN];
    double floats [ARRAY_LEN];
    for (int i = 0; i < ARRAY_LEN; i++) {
        s_str_value (f, i + 1, bufs [i], sizeof bufs [i]);
        strs [i] = bufs [i];
        uints [i] = s_uint_value (f, i + 1);
        floats [i] = s_float_value (f, i + 1);
    }
    switch (kd_msg_field_kind (field)) {
        case KD_FT_UINT:   kd_msg_set_uint (msg, field, s_uint_value (f, 0)); break;
        case KD_FT_FLOAT:  kd_msg_set_float (msg, field, s_float_value (f, 0)); break;
        case KD_FT_STR:    kd_msg_set_str (msg, field, bufs [0]); break;
        case KD_FT_UINTS:  kd_msg_set_uints (msg, field, uints, ARRAY_LEN); break;
        case KD_FT_FLOATS: kd_msg_set_floats (msg, field, floats, ARRAY_LEN); break;
        case KD_FT_STRS:   kd_msg_set_strs (msg, field, strs, ARRAY_LEN); break;
    }
}

//  Check that field f holds its test value.
static void
s_expect_field (kd_msg_t *msg, int f)
{
    kd_field_t field = (kd_field_t) f;
    const char *name = kd_msg_field_name (field);
    cr_assert (kd_msg_has (msg, field), "%s lost field %s",
               kd_msg_type_name (kd_msg_type (msg)), name);
    char buf [64];
    size_t n = 0;
    switch (kd_msg_field_kind (field)) {
        case KD_FT_UINT:
            cr_expect_eq (kd_msg_uint (msg, field), s_uint_value (f, 0), "%s", name);
            break;
        case KD_FT_FLOAT:
            cr_expect_eq (kd_msg_float (msg, field), s_float_value (f, 0), "%s", name);
            break;
        case KD_FT_STR:
            s_str_value (f, 1, buf, sizeof buf);
            cr_expect_str_eq (kd_msg_str (msg, field), buf, "%s", name);
            break;
        case KD_FT_UINTS: {
            const uint64_t *v = kd_msg_uints (msg, field, &n);
            cr_assert_eq (n, ARRAY_LEN, "%s", name);
            for (int i = 0; i < ARRAY_LEN; i++)
                cr_expect_eq (v [i], s_uint_value (f, i + 1), "%s[%d]", name, i);
            break;
        }
        case KD_FT_FLOATS: {
            const double *v = kd_msg_floats (msg, field, &n);
            cr_assert_eq (n, ARRAY_LEN, "%s", name);
            for (int i = 0; i < ARRAY_LEN; i++)
                cr_expect_eq (v [i], s_float_value (f, i + 1), "%s[%d]", name, i);
            break;
        }
        case KD_FT_STRS: {
            const char **v = kd_msg_strs (msg, field, &n);
            cr_assert_eq (n, ARRAY_LEN, "%s", name);
            for (int i = 0; i < ARRAY_LEN; i++) {
                s_str_value (f, i + 1, buf, sizeof buf);
                cr_expect_str_eq (v [i], buf, "%s[%d]", name, i);
            }
            break;
        }
    }
}

//  A new data frame holding s_floats.
static zframe_t *
s_data_frame (void)
{
    return zframe_new (s_floats, sizeof s_floats);
}

//  A message of the schema's type with the fields of mask set (except
//  "count" on data types, which the data frame sets).
static kd_msg_t *
s_build (const s_schema_t *s, s_mask_t mask)
{
    kd_msg_t *msg = kd_msg_new (s->type);
    for (int f = 0; f < KD_F_FIELD_COUNT; f++)
        if ((mask >> f) & 1 && !(s->data && f == KD_F_COUNT))
            s_fill_field (msg, f);
    if (s->data) {
        zframe_t *data = s_data_frame ();
        kd_msg_set_data (msg, &data);
        cr_assert_null (data);
    }
    return msg;
}

//  Check a decoded message against s_build (s, mask).
static void
s_expect_built (kd_msg_t *msg, const s_schema_t *s, s_mask_t mask)
{
    cr_assert_eq (kd_msg_type (msg), s->type);
    for (int f = 0; f < KD_F_FIELD_COUNT; f++) {
        if (s->data && f == KD_F_COUNT)
            cr_expect_eq (kd_msg_uint (msg, KD_F_COUNT), FLOATS);
        else
        if ((mask >> f) & 1)
            s_expect_field (msg, f);
        else
            cr_expect_not (kd_msg_has (msg, (kd_field_t) f), "%s has stray %s",
                           kd_msg_type_name (s->type),
                           kd_msg_field_name ((kd_field_t) f));
    }
    size_t n = 0;
    const float *values = kd_msg_data_floats (msg, &n);
    if (s->data) {
        cr_assert_not_null (values);
        cr_assert_eq (n, FLOATS);
        for (size_t i = 0; i < FLOATS; i++)
            cr_expect_eq (values [i], s_floats [i]);
    }
    else {
        cr_expect_null (values);
        cr_expect_eq (n, 0);
    }
}

//  Schema entry of a type.
static const s_schema_t *
s_schema_of (kd_msg_type_t type)
{
    for (size_t i = 0; i < SCHEMAS; i++)
        if (s_schema [i].type == type)
            return &s_schema [i];
    cr_assert_fail ("no schema for type %d", type);
    return NULL;
}

//  Encode a complete message of a type (all fields) as a zmsg.
static zmsg_t *
s_encoded (kd_msg_type_t type, const char *routing)
{
    const s_schema_t *s = s_schema_of (type);
    kd_msg_t *msg = s_build (s, s_schema_mask (s, true));
    if (routing) {
        zframe_t *id = zframe_from (routing);
        kd_msg_set_routing_id (msg, id);
        zframe_destroy (&id);
    }
    zmsg_t *zmsg = NULL;
    cr_assert_eq (kd_msg_encode (msg, &zmsg), 0);
    kd_msg_destroy (&msg);
    return zmsg;
}

//  Decode and expect failure with the given code; returns the reason.
static const char *
s_expect_fail (zmsg_t **zmsg_p, bool routed, int code, kd_msg_err_t *err)
{
    kd_msg_t *out = (kd_msg_t *) 0x1;
    zframe_t *routing = NULL;
    int rc = kd_msg_decode (zmsg_p, routed, &out, &routing, err);
    cr_expect_eq (rc, -2, "decode returned %d, reason '%s'", rc, err->reason);
    cr_expect_null (out);
    cr_expect_null (*zmsg_p);
    cr_expect_eq (err->code, code, "code %d, expected %d, reason '%s'",
                  err->code, code, err->reason);
    cr_expect_neq (err->reason [0], 0, "a failure has a reason");
    zframe_destroy (&routing);
    kd_msg_destroy (&out);
    return err->reason;
}

//  --------------------------------------------------------------------------
//  Raw headers, for input the encoder would never produce

typedef struct {
    msgpack_sbuffer sbuf;           //  bytes packed so far
    msgpack_packer pk;              //  packer writing into sbuf
} s_raw_t;

//  Start a raw header.
static void
s_raw_init (s_raw_t *r)
{
    msgpack_sbuffer_init (&r->sbuf);
    msgpack_packer_init (&r->pk, &r->sbuf, msgpack_sbuffer_write);
}

//  Pack a string.
static void
s_raw_str (s_raw_t *r, const char *s)
{
    msgpack_pack_str (&r->pk, strlen (s));
    msgpack_pack_str_body (&r->pk, s, strlen (s));
}

//  Start a map of entries entries, the first two being v=version, t=type.
static void
s_raw_head (s_raw_t *r, uint32_t entries, uint64_t version, const char *type)
{
    s_raw_init (r);
    msgpack_pack_map (&r->pk, entries);
    s_raw_str (r, "v");
    msgpack_pack_uint64 (&r->pk, version);
    s_raw_str (r, "t");
    s_raw_str (r, type);
}

//  Finish: a zmsg of [routing] header [data]; frees the buffer.
static zmsg_t *
s_raw_msg (s_raw_t *r, const char *routing, zframe_t *data)
{
    zmsg_t *zmsg = zmsg_new ();
    if (routing)
        zmsg_addstr (zmsg, routing);
    zmsg_addmem (zmsg, r->sbuf.data, r->sbuf.size);
    if (data)
        zmsg_append (zmsg, &data);
    msgpack_sbuffer_destroy (&r->sbuf);
    return zmsg;
}

//  A zmsg whose only frame is the given bytes.
static zmsg_t *
s_bytes_msg (const void *bytes, size_t size)
{
    zmsg_t *zmsg = zmsg_new ();
    zmsg_addmem (zmsg, bytes, size);
    return zmsg;
}

typedef enum {
    S_EDIT_DROP,                    //  remove the key
    S_EDIT_WRONG_SCALAR,            //  replace the value by one of the wrong kind
    S_EDIT_WRONG_ELEMENT,           //  append a wrong-kind element to an array
    S_EDIT_DUPLICATE,               //  repeat the entry
    S_EDIT_SET_ONE                  //  replace the value by the integer 1
} s_edit_t;

//  Re-pack an encoded message's header with one edit to the entry of key.
//  The data frame, if any, is kept.  Takes ownership of *zmsg_p.
static zmsg_t *
s_edit (zmsg_t **zmsg_p, const char *key, s_edit_t edit)
{
    zmsg_t *zmsg = *zmsg_p;
    *zmsg_p = NULL;
    zframe_t *header = zmsg_pop (zmsg);
    msgpack_unpacked u;
    msgpack_unpacked_init (&u);
    size_t off = 0;
    cr_assert_eq (msgpack_unpack_next (&u, (const char *) zframe_data (header),
                                       zframe_size (header), &off),
                  MSGPACK_UNPACK_SUCCESS);
    cr_assert_eq (u.data.type, MSGPACK_OBJECT_MAP);
    msgpack_object_map *map = &u.data.via.map;
    s_raw_t r;
    s_raw_init (&r);
    uint32_t entries = map->size;
    if (edit == S_EDIT_DROP)
        entries--;
    if (edit == S_EDIT_DUPLICATE)
        entries++;
    msgpack_pack_map (&r.pk, entries);
    bool found = false;
    for (uint32_t i = 0; i < map->size; i++) {
        msgpack_object_kv *kv = &map->ptr [i];
        bool hit = kv->key.via.str.size == strlen (key)
                && memcmp (kv->key.via.str.ptr, key, strlen (key)) == 0;
        found |= hit;
        if (!hit) {
            msgpack_pack_object (&r.pk, kv->key);
            msgpack_pack_object (&r.pk, kv->val);
            continue;
        }
        if (edit == S_EDIT_DROP)
            continue;
        msgpack_pack_object (&r.pk, kv->key);
        if (edit == S_EDIT_DUPLICATE) {
            msgpack_pack_object (&r.pk, kv->val);
            msgpack_pack_object (&r.pk, kv->key);
            msgpack_pack_object (&r.pk, kv->val);
        }
        else
        if (edit == S_EDIT_SET_ONE)
            msgpack_pack_uint64 (&r.pk, 1);
        else
        if (edit == S_EDIT_WRONG_SCALAR) {
            //  A string where a number or array is due, a number where a
            //  string is due.
            if (kv->val.type == MSGPACK_OBJECT_STR)
                msgpack_pack_uint64 (&r.pk, 5);
            else
                s_raw_str (&r, "x");
        }
        else {
            cr_assert_eq (kv->val.type, MSGPACK_OBJECT_ARRAY);
            msgpack_object_array *a = &kv->val.via.array;
            msgpack_pack_array (&r.pk, a->size + 1);
            bool strs = a->size > 0 && a->ptr [0].type == MSGPACK_OBJECT_STR;
            for (uint32_t j = 0; j < a->size; j++)
                msgpack_pack_object (&r.pk, a->ptr [j]);
            if (strs)
                msgpack_pack_uint64 (&r.pk, 1);
            else
                msgpack_pack_nil (&r.pk);
        }
    }
    cr_assert (found, "key %s not in header", key);
    zmsg_pushmem (zmsg, r.sbuf.data, r.sbuf.size);
    msgpack_sbuffer_destroy (&r.sbuf);
    msgpack_unpacked_destroy (&u);
    zframe_destroy (&header);
    return zmsg;
}

//  --------------------------------------------------------------------------
//  Tables and accessors

Test (kd_msg, tables_name_every_type_and_field)
{
    static const char *types [] = {
        NULL, "HELLO", "WELCOME", "START", "HEARTBEAT", "ARRIVE", "RELEASE",
        "LEAVE", "STOP", "PUSH", "PUSH_OK", "PULL", "PULL_OK", "COMMIT",
        "COMMIT_OK", "TELEMETRY", "STATUS", "EVAL", "EVAL_OK", "ERROR", "EVENT",
        "INIT", "INIT_OK", "STATS", "STATS_OK", "CHAIN", "SYNC", "SYNC_OK", "ROUTE",
        "SHM", "SHM_OK", "RELAY", "REPORT", "STAGED"
    };
    cr_assert_eq (sizeof types / sizeof types [0], KD_MSG_TYPE_COUNT);
    for (int t = 1; t < KD_MSG_TYPE_COUNT; t++) {
        cr_expect_str_eq (kd_msg_type_name ((kd_msg_type_t) t), types [t]);
        cr_expect_eq ((int) kd_msg_type_lookup (types [t]), t);
    }
    cr_expect_null (kd_msg_type_name ((kd_msg_type_t) 0));
    cr_expect_null (kd_msg_type_name (KD_MSG_TYPE_COUNT));
    cr_expect_eq (kd_msg_type_lookup ("FOO"), 0);
    cr_expect_eq (kd_msg_type_lookup ("hello"), 0);
    cr_expect_eq (kd_msg_type_lookup (NULL), 0);
    cr_expect_eq (SCHEMAS, KD_MSG_TYPE_COUNT - 1);

    static const struct { kd_field_t f; const char *name; kd_field_kind_t kind; }
    fields [] = {
        { KD_F_ROLE, "role", KD_FT_STR }, { KD_F_NAME, "name", KD_FT_STR },
        { KD_F_ENDPOINT, "endpoint", KD_FT_STR }, { KD_F_RANK, "rank", KD_FT_UINT },
        { KD_F_VERSION, "version", KD_FT_UINT }, { KD_F_CLOCK, "clock", KD_FT_UINT },
        { KD_F_BASE, "base", KD_FT_UINT }, { KD_F_SAMPLES, "samples", KD_FT_UINT },
        { KD_F_LOSS, "loss", KD_FT_FLOAT }, { KD_F_MODEL, "model", KD_FT_STR },
        { KD_F_HIDDEN, "hidden", KD_FT_UINT }, { KD_F_N_PARAMS, "n_params", KD_FT_UINT },
        { KD_F_LO, "lo", KD_FT_UINT }, { KD_F_HI, "hi", KD_FT_UINT },
        { KD_F_LR, "lr", KD_FT_FLOAT }, { KD_F_MOMENTUM, "momentum", KD_FT_FLOAT },
        { KD_F_BATCH, "batch", KD_FT_UINT }, { KD_F_SEED, "seed", KD_FT_UINT },
        { KD_F_EPOCHS, "epochs", KD_FT_FLOAT },
        { KD_F_HEARTBEAT_MS, "heartbeat_ms", KD_FT_UINT },
        { KD_F_CONSISTENCY, "consistency", KD_FT_STR },
        { KD_F_ENDPOINTS, "endpoints", KD_FT_STRS }, { KD_F_LOS, "los", KD_FT_UINTS },
        { KD_F_HIS, "his", KD_FT_UINTS }, { KD_F_PART_LO, "part_lo", KD_FT_UINT },
        { KD_F_PART_HI, "part_hi", KD_FT_UINT }, { KD_F_T0_MS, "t0_ms", KD_FT_UINT },
        { KD_F_STALENESS, "staleness", KD_FT_UINT },
        { KD_F_DROPPED, "dropped", KD_FT_UINT }, { KD_F_GROUP, "group", KD_FT_UINT },
        { KD_F_REASON, "reason", KD_FT_STR }, { KD_F_CODE, "code", KD_FT_UINT },
        { KD_F_COUNT, "count", KD_FT_UINT }, { KD_F_TS_MS, "ts_ms", KD_FT_UINT },
        { KD_F_RANKS, "ranks", KD_FT_UINTS }, { KD_F_CLOCKS, "clocks", KD_FT_UINTS },
        { KD_F_WEIGHTS, "weights", KD_FT_FLOATS },
        { KD_F_DROP_RANKS, "drop_ranks", KD_FT_UINTS },
        { KD_F_DROP_CLOCKS, "drop_clocks", KD_FT_UINTS },
        { KD_F_COMPUTE_MS, "compute_ms", KD_FT_FLOAT },
        { KD_F_PUSH_MS, "push_ms", KD_FT_FLOAT }, { KD_F_WAIT_MS, "wait_ms", KD_FT_FLOAT },
        { KD_F_PULL_MS, "pull_ms", KD_FT_FLOAT }, { KD_F_PHASES, "phases", KD_FT_UINT },
        { KD_F_EPOCH, "epoch", KD_FT_FLOAT }, { KD_F_WORKERS, "workers", KD_FT_UINT },
        { KD_F_REGROUPS, "regroups", KD_FT_UINT },
        { KD_F_ACCURACY, "accuracy", KD_FT_FLOAT }, { KD_F_GROUPS, "groups", KD_FT_UINTS },
        { KD_F_KIND, "kind", KD_FT_STR }, { KD_F_DETAIL, "detail", KD_FT_STR },
        { KD_F_SESSION, "session", KD_FT_UINT }, { KD_F_LOST, "lost", KD_FT_UINT },
        { KD_F_ROWS, "rows", KD_FT_UINTS }, { KD_F_MIN_CLOCK, "min_clock", KD_FT_UINT },
        { KD_F_EMULATED_MS, "emulated_ms", KD_FT_FLOAT },
        { KD_F_OPTIMIZER, "optimizer", KD_FT_STR },
        { KD_F_TENSORS, "tensors", KD_FT_STRS }, { KD_F_SHAPES, "shapes", KD_FT_UINTS },
        { KD_F_COUNTERS, "counters", KD_FT_UINTS }, { KD_F_REFUSED, "refused", KD_FT_UINT },
        { KD_F_DTYPE, "dtype", KD_FT_UINT }, { KD_F_SYNC, "sync", KD_FT_UINT },
        { KD_F_KEYS, "keys", KD_FT_UINT }, { KD_F_SHM, "shm", KD_FT_UINT },
        { KD_F_PID, "pid", KD_FT_UINT }, { KD_F_HOST, "host", KD_FT_STR },
        { KD_F_FD, "fd", KD_FT_UINT }, { KD_F_TOKEN, "token", KD_FT_UINT },
        { KD_F_BYTES, "bytes", KD_FT_UINT }, { KD_F_OFFSET, "offset", KD_FT_UINT },
        { KD_F_SEQ, "seq", KD_FT_UINT }, { KD_F_ITEMS, "items", KD_FT_UINT },
        { KD_F_RELAYS, "relays", KD_FT_UINTS },
        { KD_F_METRIC, "metric", KD_FT_STR }, { KD_F_VALUE, "value", KD_FT_FLOAT },
        { KD_F_KEY_ENC, "key_enc", KD_FT_UINT },
        { KD_F_STAGED, "staged", KD_FT_UINT },
        { KD_F_REG, "reg", KD_FT_UINT },
        { KD_F_MODE, "mode", KD_FT_STR },
        { KD_F_GEN, "gen", KD_FT_UINT },
        { KD_F_LEASE_AHEAD, "lease_ahead", KD_FT_UINT },
        { KD_F_AHEAD, "ahead", KD_FT_UINTS },
    };
    cr_assert_eq (sizeof fields / sizeof fields [0], KD_F_FIELD_COUNT);
    for (size_t i = 0; i < KD_F_FIELD_COUNT; i++) {
        cr_assert_eq (fields [i].f, (kd_field_t) i);
        cr_expect_str_eq (kd_msg_field_name (fields [i].f), fields [i].name);
        cr_expect_eq (kd_msg_field_kind (fields [i].f), fields [i].kind, "%s",
                      fields [i].name);
    }
}

Test (kd_msg, replica_messages_and_a_copy)
{
    //  SYNC may carry values or not; either way it round-trips.
    zsock_t *a = zsock_new_pair ("@inproc://kd-msg-sync");
    zsock_t *b = zsock_new_pair (">inproc://kd-msg-sync");
    kd_msg_t *part = kd_msg_new (KD_MSG_SYNC);
    kd_msg_set_str (part, KD_F_KIND, "params");
    float values [3] = { 1, 2, 3 };
    zframe_t *data = zframe_new (values, sizeof values);
    kd_msg_set_uint (part, KD_F_COUNT, 3);
    kd_msg_set_data (part, &data);
    kd_msg_t *copy = kd_msg_dup (part);
    cr_assert (copy);
    cr_expect_eq (kd_msg_send (&part, a), 0);
    kd_msg_t *end = kd_msg_new (KD_MSG_SYNC);
    kd_msg_set_str (end, KD_F_KIND, "end");
    cr_expect_eq (kd_msg_send (&end, a), 0);
    kd_msg_t *got = NULL;
    cr_assert_eq (kd_msg_recv (b, &got, NULL, NULL), 0);
    size_t n = 0;
    const float *v = kd_msg_data_floats (got, &n);
    cr_expect_eq (n, 3);
    cr_expect_eq (v [2], 3.0f);
    kd_msg_destroy (&got);
    cr_assert_eq (kd_msg_recv (b, &got, NULL, NULL), 0);
    cr_expect_str_eq (kd_msg_str (got, KD_F_KIND), "end");
    cr_expect_null (kd_msg_data (got));
    kd_msg_destroy (&got);
    //  The copy holds its own data, and no routing id.
    v = kd_msg_data_floats (copy, &n);
    cr_expect_eq (n, 3);
    cr_expect_eq (v [0], 1.0f);
    cr_expect_null (kd_msg_routing_id (copy));
    kd_msg_destroy (&copy);
    //  CHAIN and ROUTE need their fields.
    kd_msg_t *chain = kd_msg_new (KD_MSG_CHAIN);
    cr_expect_neq (kd_msg_send (&chain, a), 0, "CHAIN without a role was sent");
    kd_msg_destroy (&chain);
    kd_msg_t *route = kd_msg_new (KD_MSG_ROUTE);
    kd_msg_set_uint (route, KD_F_RANK, 1);
    kd_msg_set_str (route, KD_F_ENDPOINT, "tcp://127.0.0.1:7101");
    cr_expect_eq (kd_msg_send (&route, a), 0);
    cr_assert_eq (kd_msg_recv (b, &got, NULL, NULL), 0);
    cr_expect_eq (kd_msg_type (got), KD_MSG_ROUTE);
    kd_msg_destroy (&got);
    zsock_destroy (&a);
    zsock_destroy (&b);
}

Test (kd_msg, chain_generation_round_trips)
{
    //  CHAIN names the range's chain generation; SYNC end and both SYNC_OKs
    //  carry the one of the CHAIN that ordered the transfer, full 64 bits.
    zsock_t *a = zsock_new_pair ("@inproc://kd-msg-gen");
    zsock_t *b = zsock_new_pair (">inproc://kd-msg-gen");
    const uint64_t gen = ((uint64_t) 1 << 40) + 3;
    kd_msg_t *chain = kd_msg_new (KD_MSG_CHAIN);
    kd_msg_set_str (chain, KD_F_ROLE, "primary");
    kd_msg_set_str (chain, KD_F_ENDPOINT, "tcp://127.0.0.1:7101");
    kd_msg_set_uint (chain, KD_F_SYNC, 1);
    kd_msg_set_uint (chain, KD_F_GEN, gen);
    cr_expect_eq (kd_msg_send (&chain, a), 0);
    kd_msg_t *end = kd_msg_new (KD_MSG_SYNC);
    kd_msg_set_str (end, KD_F_KIND, "end");
    kd_msg_set_uint (end, KD_F_VERSION, 12);
    kd_msg_set_uint (end, KD_F_GEN, gen);
    cr_expect_eq (kd_msg_send (&end, a), 0);
    kd_msg_t *ok = kd_msg_new (KD_MSG_SYNC_OK);
    kd_msg_set_uint (ok, KD_F_VERSION, 12);
    kd_msg_set_uint (ok, KD_F_RANK, 3);
    kd_msg_set_uint (ok, KD_F_GEN, gen);
    cr_expect_eq (kd_msg_send (&ok, a), 0);
    //  An older shard's SYNC_OK has no generation, and still decodes.
    ok = kd_msg_new (KD_MSG_SYNC_OK);
    kd_msg_set_uint (ok, KD_F_VERSION, 12);
    cr_expect_eq (kd_msg_send (&ok, a), 0);

    kd_msg_t *got = NULL;
    cr_assert_eq (kd_msg_recv (b, &got, NULL, NULL), 0);
    cr_expect_eq (kd_msg_type (got), KD_MSG_CHAIN);
    cr_expect_str_eq (kd_msg_str (got, KD_F_ROLE), "primary");
    cr_expect_eq (kd_msg_uint (got, KD_F_SYNC), 1);
    cr_expect_eq (kd_msg_uint (got, KD_F_GEN), gen);
    kd_msg_destroy (&got);
    cr_assert_eq (kd_msg_recv (b, &got, NULL, NULL), 0);
    cr_expect_eq (kd_msg_type (got), KD_MSG_SYNC);
    cr_expect_str_eq (kd_msg_str (got, KD_F_KIND), "end");
    cr_expect_eq (kd_msg_uint (got, KD_F_VERSION), 12);
    cr_expect_eq (kd_msg_uint (got, KD_F_GEN), gen);
    kd_msg_destroy (&got);
    cr_assert_eq (kd_msg_recv (b, &got, NULL, NULL), 0);
    cr_expect_eq (kd_msg_type (got), KD_MSG_SYNC_OK);
    cr_expect_eq (kd_msg_uint (got, KD_F_RANK), 3);
    cr_expect (kd_msg_has (got, KD_F_GEN));
    cr_expect_eq (kd_msg_uint (got, KD_F_GEN), gen);
    kd_msg_destroy (&got);
    cr_assert_eq (kd_msg_recv (b, &got, NULL, NULL), 0);
    cr_expect_eq (kd_msg_type (got), KD_MSG_SYNC_OK);
    cr_expect_not (kd_msg_has (got, KD_F_GEN));
    kd_msg_destroy (&got);
    zsock_destroy (&a);
    zsock_destroy (&b);
}

Test (kd_msg, accessors_default_replace_and_copy)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_WELCOME);
    cr_expect_eq (kd_msg_type (msg), KD_MSG_WELCOME);
    cr_expect_not (kd_msg_has (msg, KD_F_RANK));
    cr_expect_eq (kd_msg_uint (msg, KD_F_RANK), 0);
    cr_expect_eq (kd_msg_float (msg, KD_F_LR), 0.0);
    cr_expect_str_eq (kd_msg_str (msg, KD_F_ROLE), "");
    size_t n = 99;
    cr_expect_null (kd_msg_uints (msg, KD_F_LOS, &n));
    cr_expect_eq (n, 0);
    cr_expect_null (kd_msg_routing_id (msg));
    cr_expect_null (kd_msg_data (msg));

    char role [16] = "worker";
    kd_msg_set_str (msg, KD_F_ROLE, role);
    strcpy (role, "XXXX");
    cr_expect_str_eq (kd_msg_str (msg, KD_F_ROLE), "worker", "setter copies");
    kd_msg_set_str (msg, KD_F_ROLE, "shard");
    cr_expect_str_eq (kd_msg_str (msg, KD_F_ROLE), "shard", "setter replaces");
    //  Setting a field to its own current value must not read freed memory.
    kd_msg_set_str (msg, KD_F_ROLE, kd_msg_str (msg, KD_F_ROLE));
    cr_expect_str_eq (kd_msg_str (msg, KD_F_ROLE), "shard");
    kd_msg_set_uint (msg, KD_F_RANK, 3);
    kd_msg_set_uint (msg, KD_F_RANK, 4);
    cr_expect_eq (kd_msg_uint (msg, KD_F_RANK), 4);

    uint64_t los [2] = { 1, 2 };
    kd_msg_set_uints (msg, KD_F_LOS, los, 2);
    los [0] = 77;
    const uint64_t *got = kd_msg_uints (msg, KD_F_LOS, &n);
    cr_expect_eq (n, 2);
    cr_expect_eq (got [0], 1);
    kd_msg_set_uints (msg, KD_F_LOS, NULL, 0);
    got = kd_msg_uints (msg, KD_F_LOS, &n);
    cr_expect (kd_msg_has (msg, KD_F_LOS));
    cr_expect_not_null (got, "a present empty array is not NULL");
    cr_expect_eq (n, 0);

    zframe_t *id = zframe_from ("peer");
    kd_msg_set_routing_id (msg, id);
    cr_expect (zframe_eq (kd_msg_routing_id (msg), id));
    cr_expect_neq (kd_msg_routing_id (msg), id, "the setter copies");
    kd_msg_set_routing_id (msg, kd_msg_routing_id (msg));
    cr_expect (zframe_eq (kd_msg_routing_id (msg), id));
    kd_msg_set_routing_id (msg, NULL);
    cr_expect_null (kd_msg_routing_id (msg));
    zframe_destroy (&id);

    kd_msg_destroy (&msg);
    cr_expect_null (msg);
    kd_msg_destroy (&msg);
}

Test (kd_msg, data_frame_set_take_and_floats)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_PUSH);
    size_t n = 7;
    cr_expect_null (kd_msg_data_floats (msg, &n));
    cr_expect_eq (n, 0);
    zframe_t *data = s_data_frame ();
    zframe_t *raw = data;
    kd_msg_set_data (msg, &data);
    cr_expect_null (data);
    cr_expect_eq (kd_msg_data (msg), raw);
    cr_expect_eq (kd_msg_uint (msg, KD_F_COUNT), FLOATS);
    const float *values = kd_msg_data_floats (msg, &n);
    cr_expect_eq (n, FLOATS);
    cr_expect_eq ((const void *) values, (const void *) zframe_data (raw), "no copy");

    zframe_t *taken = kd_msg_take_data (msg);
    cr_expect_eq (taken, raw);
    cr_expect_null (kd_msg_data (msg));
    cr_expect_null (kd_msg_data_floats (msg, &n));
    zframe_destroy (&taken);
    kd_msg_destroy (&msg);
}

//  "Send HELLO first" has a code of its own; the 409 with that reason,
//  which earlier builds sent, still reads the same.
Test (kd_msg, not_registered_is_one_check)
{
    kd_msg_t *e = kd_msg_new_error (NULL, KD_ERR_NOT_REGISTERED, "not registered: send HELLO first");
    cr_expect_eq (kd_msg_uint (e, KD_F_CODE), 428);
    cr_expect (kd_msg_is_not_registered (e));
    kd_msg_destroy (&e);
    e = kd_msg_new_error (NULL, KD_ERR_STATE, "not registered: send HELLO first");
    cr_expect (kd_msg_is_not_registered (e), "an earlier build's 409");
    kd_msg_destroy (&e);
    e = kd_msg_new_error (NULL, KD_ERR_STATE, "training has ended");
    cr_expect_not (kd_msg_is_not_registered (e));
    kd_msg_destroy (&e);
    e = kd_msg_new_error (NULL, KD_ERR_UNAVAILABLE, "not registered");
    cr_expect_not (kd_msg_is_not_registered (e), "only 428, or 409 with the reason");
    kd_msg_destroy (&e);
    kd_msg_t *other = kd_msg_new (KD_MSG_HEARTBEAT);
    cr_expect_not (kd_msg_is_not_registered (other));
    cr_expect_not (kd_msg_is_not_registered (NULL));
    kd_msg_destroy (&other);
}

Test (kd_msg, new_error_truncates_reason)
{
    zframe_t *id = zframe_from ("peer");
    kd_msg_t *e = kd_msg_new_error (id, KD_ERR_STATE, "not registered");
    cr_expect_eq (kd_msg_type (e), KD_MSG_ERROR);
    cr_expect_eq (kd_msg_uint (e, KD_F_CODE), 409);
    cr_expect_str_eq (kd_msg_str (e, KD_F_REASON), "not registered");
    cr_expect (zframe_eq (kd_msg_routing_id (e), id));
    kd_msg_destroy (&e);
    zframe_destroy (&id);

    //  A reason of multi-byte characters is cut on a character boundary.
    size_t len = KD_MSG_MAX_STRING * 2;
    char *reason = (char *) malloc (len + 1);
    for (size_t i = 0; i < len; i += 3)
        memcpy (reason + i, "\xe2\x82\xac", 3);
    reason [len] = 0;
    e = kd_msg_new_error (NULL, KD_ERR_INTERNAL, reason);
    size_t got = strlen (kd_msg_str (e, KD_F_REASON));
    cr_expect_leq (got, KD_MSG_MAX_STRING);
    cr_expect_geq (got, KD_MSG_MAX_STRING - 2);
    cr_expect_eq (got % 3, 0);
    cr_expect_null (kd_msg_routing_id (e));
    zmsg_t *zmsg = NULL;
    cr_expect_eq (kd_msg_encode (e, &zmsg), 0, "a truncated reason encodes");
    zmsg_destroy (&zmsg);
    kd_msg_destroy (&e);
    free (reason);

    e = kd_msg_new_error (NULL, KD_ERR_MALFORMED, NULL);
    cr_expect_str_eq (kd_msg_str (e, KD_F_REASON), "");
    kd_msg_destroy (&e);
}

//  --------------------------------------------------------------------------
//  Round trips

Test (kd_msg, round_trip_every_type_with_all_fields)
{
    for (size_t i = 0; i < SCHEMAS; i++) {
        const s_schema_t *s = &s_schema [i];
        s_mask_t mask = s_schema_mask (s, true);
        kd_msg_t *msg = s_build (s, mask);
        zframe_t *id = zframe_new ("\x00\x6b\x8b\x45\x67", 5);
        kd_msg_set_routing_id (msg, id);

        zmsg_t *zmsg = NULL;
        cr_assert_eq (kd_msg_encode (msg, &zmsg), 0, "%s", kd_msg_type_name (s->type));
        cr_expect_eq (zmsg_size (zmsg), s->data ? 3 : 2);
        //  Encoding copies: the message still has its routing id and data.
        cr_expect_not_null (kd_msg_routing_id (msg));
        cr_expect_eq (kd_msg_data (msg) != NULL, s->data);
        kd_msg_destroy (&msg);

        kd_msg_t *out = NULL;
        zframe_t *routing = (zframe_t *) 0x1;
        kd_msg_err_t err;
        int rc = kd_msg_decode (&zmsg, true, &out, &routing, &err);
        cr_assert_eq (rc, 0, "%s: %s", kd_msg_type_name (s->type), err.reason);
        cr_expect_null (zmsg);
        cr_expect_null (routing, "no routing id handed out on success");
        cr_assert_not_null (kd_msg_routing_id (out));
        cr_expect (zframe_eq (kd_msg_routing_id (out), id));
        s_expect_built (out, s, mask);
        kd_msg_destroy (&out);
        zframe_destroy (&id);
    }
}

Test (kd_msg, round_trip_every_type_with_required_fields_only)
{
    for (size_t i = 0; i < SCHEMAS; i++) {
        const s_schema_t *s = &s_schema [i];
        s_mask_t mask = s_schema_mask (s, false);
        kd_msg_t *msg = s_build (s, mask);
        zmsg_t *zmsg = NULL;
        cr_assert_eq (kd_msg_encode (msg, &zmsg), 0, "%s", kd_msg_type_name (s->type));
        cr_expect_eq (zmsg_size (zmsg), s->data ? 2 : 1);
        kd_msg_destroy (&msg);
        kd_msg_t *out = NULL;
        kd_msg_err_t err;
        cr_assert_eq (kd_msg_decode (&zmsg, false, &out, NULL, &err), 0,
                      "%s: %s", kd_msg_type_name (s->type), err.reason);
        cr_expect_null (kd_msg_routing_id (out));
        s_expect_built (out, s, mask);
        kd_msg_destroy (&out);
    }
}

//  A known field that the table does not list for a type is carried too, so
//  that a peer can extend a message without a protocol version bump.
Test (kd_msg, round_trip_extension_fields)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_STATUS);
    kd_msg_set_uint (msg, KD_F_VERSION, 12);
    kd_msg_set_uint (msg, KD_F_SAMPLES, 60000);
    kd_msg_set_str (msg, KD_F_MODEL, "mlp");
    zmsg_t *zmsg = NULL;
    cr_assert_eq (kd_msg_encode (msg, &zmsg), 0);
    kd_msg_destroy (&msg);
    kd_msg_t *out = NULL;
    kd_msg_err_t err;
    cr_assert_eq (kd_msg_decode (&zmsg, false, &out, NULL, &err), 0, "%s", err.reason);
    cr_expect_eq (kd_msg_uint (out, KD_F_SAMPLES), 60000);
    cr_expect_str_eq (kd_msg_str (out, KD_F_MODEL), "mlp");
    kd_msg_destroy (&out);
}

//  An empty COMMIT (version only, no entries) is how the scheduler discards
//  drops; empty arrays and an empty data frame must survive.
Test (kd_msg, round_trip_empty_arrays_and_empty_data)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_COMMIT);
    kd_msg_set_uint (msg, KD_F_VERSION, 7);
    kd_msg_set_uints (msg, KD_F_RANKS, NULL, 0);
    kd_msg_set_uints (msg, KD_F_CLOCKS, NULL, 0);
    kd_msg_set_floats (msg, KD_F_WEIGHTS, NULL, 0);
    uint64_t drop [1] = { 2 };
    kd_msg_set_uints (msg, KD_F_DROP_RANKS, drop, 1);
    kd_msg_set_uints (msg, KD_F_DROP_CLOCKS, drop, 1);
    zmsg_t *zmsg = NULL;
    cr_assert_eq (kd_msg_encode (msg, &zmsg), 0);
    kd_msg_destroy (&msg);
    kd_msg_t *out = NULL;
    kd_msg_err_t err;
    cr_assert_eq (kd_msg_decode (&zmsg, false, &out, NULL, &err), 0, "%s", err.reason);
    size_t n = 9;
    cr_expect_not_null (kd_msg_uints (out, KD_F_RANKS, &n));
    cr_expect_eq (n, 0);
    cr_expect_not_null (kd_msg_floats (out, KD_F_WEIGHTS, &n));
    cr_expect_eq (n, 0);
    cr_expect_eq (kd_msg_uints (out, KD_F_DROP_CLOCKS, &n) [0], 2);
    kd_msg_destroy (&out);

    msg = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_uint (msg, KD_F_VERSION, 1);
    kd_msg_set_uint (msg, KD_F_LO, 0);
    zframe_t *data = zframe_new_empty ();
    kd_msg_set_data (msg, &data);
    cr_assert_eq (kd_msg_encode (msg, &zmsg), 0);
    kd_msg_destroy (&msg);
    cr_assert_eq (kd_msg_decode (&zmsg, false, &out, NULL, &err), 0, "%s", err.reason);
    cr_expect_not_null (kd_msg_data_floats (out, &n));
    cr_expect_eq (n, 0);
    kd_msg_destroy (&out);
}

//  Arrays of exactly KD_MSG_MAX_ARRAY elements, and strings of exactly
//  KD_MSG_MAX_STRING bytes, are within the limits.  (Three full arrays of
//  large integers would not be: they exceed KD_MSG_MAX_HEADER, and the
//  encoder refuses them.)
Test (kd_msg, round_trip_at_the_limits)
{
    uint64_t *u = (uint64_t *) calloc (KD_MSG_MAX_ARRAY, sizeof *u);
    double *w = (double *) calloc (KD_MSG_MAX_ARRAY, sizeof *w);
    for (size_t i = 0; i < KD_MSG_MAX_ARRAY; i++) {
        u [i] = i % 128;
        w [i] = 1.0 / (double) (i + 1);
    }
    kd_msg_t *msg = kd_msg_new (KD_MSG_COMMIT);
    kd_msg_set_uint (msg, KD_F_VERSION, 1);
    kd_msg_set_uints (msg, KD_F_RANKS, u, KD_MSG_MAX_ARRAY);
    kd_msg_set_uints (msg, KD_F_CLOCKS, u, KD_MSG_MAX_ARRAY);
    kd_msg_set_floats (msg, KD_F_WEIGHTS, w, KD_MSG_MAX_ARRAY);
    char *big = (char *) malloc (KD_MSG_MAX_STRING + 1);
    memset (big, 'a', KD_MSG_MAX_STRING);
    big [KD_MSG_MAX_STRING] = 0;
    kd_msg_t *err_msg = kd_msg_new_error (NULL, 400, big);

    kd_msg_t *msgs [2] = { msg, err_msg };
    for (int m = 0; m < 2; m++) {
        zmsg_t *zmsg = NULL;
        cr_assert_eq (kd_msg_encode (msgs [m], &zmsg), 0, "message %d", m);
        kd_msg_t *out = NULL;
        kd_msg_err_t err;
        cr_assert_eq (kd_msg_decode (&zmsg, false, &out, NULL, &err), 0, "%s", err.reason);
        size_t n = 0;
        if (m == 0) {
            const double *got = kd_msg_floats (out, KD_F_WEIGHTS, &n);
            cr_expect_eq (n, KD_MSG_MAX_ARRAY);
            cr_expect_eq (got [KD_MSG_MAX_ARRAY - 1], w [KD_MSG_MAX_ARRAY - 1]);
            cr_expect_eq (kd_msg_uints (out, KD_F_CLOCKS, &n) [12345], u [12345]);
        }
        else
            cr_expect_str_eq (kd_msg_str (out, KD_F_REASON), big);
        kd_msg_destroy (&out);
        kd_msg_destroy (&msgs [m]);
    }
    free (big);

    //  Large integers: 65536 x 3 x 9 bytes is over the header limit.
    for (size_t i = 0; i < KD_MSG_MAX_ARRAY; i++)
        u [i] = UINT64_MAX - i;
    msg = kd_msg_new (KD_MSG_COMMIT);
    kd_msg_set_uint (msg, KD_F_VERSION, 1);
    kd_msg_set_uints (msg, KD_F_RANKS, u, KD_MSG_MAX_ARRAY);
    kd_msg_set_uints (msg, KD_F_CLOCKS, u, KD_MSG_MAX_ARRAY);
    kd_msg_set_floats (msg, KD_F_WEIGHTS, w, KD_MSG_MAX_ARRAY);
    zmsg_t *zmsg = NULL;
    cr_expect_eq (kd_msg_encode (msg, &zmsg), -1);
    cr_expect_null (zmsg);
    kd_msg_destroy (&msg);
    free (u);
    free (w);
}

//  A header of exactly KD_MSG_MAX_HEADER bytes is accepted, one more is not.
Test (kd_msg, header_size_limit_is_inclusive)
{
    for (int extra = 0; extra < 2; extra++) {
        //  {"v":1, "t":"HEARTBEAT", "pad": <str32>}: 1 + 2+1 + 2+10 + 4 +
        //  5 bytes of str32 header, then the padding.
        size_t fixed = 1 + 3 + 12 + 4 + 5;
        size_t pad = KD_MSG_MAX_HEADER - fixed + extra;
        s_raw_t r;
        s_raw_head (&r, 3, 1, "HEARTBEAT");
        s_raw_str (&r, "pad");
        char *body = (char *) malloc (pad);
        memset (body, 'p', pad);
        //  Force str32 so the size is exact.
        unsigned char head [5] = { 0xdb, (unsigned char) (pad >> 24),
                                   (unsigned char) (pad >> 16),
                                   (unsigned char) (pad >> 8), (unsigned char) pad };
        msgpack_sbuffer_write (&r.sbuf, (const char *) head, sizeof head);
        msgpack_sbuffer_write (&r.sbuf, body, pad);
        free (body);
        cr_assert_eq (r.sbuf.size, KD_MSG_MAX_HEADER + extra);
        zmsg_t *zmsg = s_raw_msg (&r, NULL, NULL);
        kd_msg_err_t err;
        if (extra == 0) {
            kd_msg_t *out = NULL;
            cr_expect_eq (kd_msg_decode (&zmsg, false, &out, NULL, &err), 0, "%s", err.reason);
            kd_msg_destroy (&out);
        }
        else {
            const char *reason = s_expect_fail (&zmsg, false, KD_ERR_TOO_LARGE, &err);
            cr_expect (strstr (reason, "exceeds 1048576"), "%s", reason);
        }
    }
}

//  --------------------------------------------------------------------------
//  Encoder refusals

Test (kd_msg, encode_refuses_incomplete_messages)
{
    for (size_t i = 0; i < SCHEMAS; i++) {
        const s_schema_t *s = &s_schema [i];
        s_mask_t mask = s_schema_mask (s, true);
        for (int r = 0; s->required [r] != END; r++) {
            if (s->data && s->required [r] == KD_F_COUNT)
                continue;           //  set_data sets it
            kd_msg_t *msg = s_build (s, mask & ~((s_mask_t) 1 << s->required [r]));
            zmsg_t *zmsg = (zmsg_t *) 0x1;
            cr_expect_eq (kd_msg_encode (msg, &zmsg), -1, "%s without %s",
                          kd_msg_type_name (s->type),
                          kd_msg_field_name (s->required [r]));
            cr_expect_null (zmsg);
            kd_msg_destroy (&msg);
        }
    }
    //  Data frame rules.
    kd_msg_t *msg = s_build (s_schema_of (KD_MSG_PUSH), s_schema_mask (s_schema_of (KD_MSG_PUSH), true));
    zframe_t *data = kd_msg_take_data (msg);
    zmsg_t *zmsg = NULL;
    cr_expect_eq (kd_msg_encode (msg, &zmsg), -1, "PUSH without data");
    kd_msg_set_data (msg, &data);
    kd_msg_set_uint (msg, KD_F_COUNT, FLOATS + 1);
    cr_expect_eq (kd_msg_encode (msg, &zmsg), -1, "PUSH with a count that disagrees");
    kd_msg_destroy (&msg);

    msg = s_build (s_schema_of (KD_MSG_HELLO), s_schema_mask (s_schema_of (KD_MSG_HELLO), true));
    data = s_data_frame ();
    kd_msg_set_data (msg, &data);
    cr_expect_eq (kd_msg_encode (msg, &zmsg), -1, "HELLO with data");
    kd_msg_destroy (&msg);

    //  Limits the decoder would refuse.
    msg = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (msg, KD_F_ROLE, "worker");
    char *big = (char *) malloc (KD_MSG_MAX_STRING + 2);
    memset (big, 'n', KD_MSG_MAX_STRING + 1);
    big [KD_MSG_MAX_STRING + 1] = 0;
    kd_msg_set_str (msg, KD_F_NAME, big);
    cr_expect_eq (kd_msg_encode (msg, &zmsg), -1, "string over the limit");
    kd_msg_destroy (&msg);
    free (big);

    msg = kd_msg_new (KD_MSG_STATUS);
    kd_msg_set_uint (msg, KD_F_VERSION, 1);
    uint64_t *u = (uint64_t *) calloc (KD_MSG_MAX_ARRAY + 1, sizeof *u);
    kd_msg_set_uints (msg, KD_F_RANKS, u, KD_MSG_MAX_ARRAY + 1);
    cr_expect_eq (kd_msg_encode (msg, &zmsg), -1, "array over the limit");
    kd_msg_destroy (&msg);
    free (u);

    //  Parallel arrays must agree.
    msg = kd_msg_new (KD_MSG_COMMIT);
    uint64_t three [3] = { 1, 2, 3 };
    double w [3] = { 1, 1, 1 };
    kd_msg_set_uint (msg, KD_F_VERSION, 1);
    kd_msg_set_uints (msg, KD_F_RANKS, three, 3);
    kd_msg_set_uints (msg, KD_F_CLOCKS, three, 2);
    kd_msg_set_floats (msg, KD_F_WEIGHTS, w, 3);
    cr_expect_eq (kd_msg_encode (msg, &zmsg), -1, "ranks and clocks differ");
    kd_msg_set_uints (msg, KD_F_CLOCKS, three, 3);
    cr_expect_eq (kd_msg_encode (msg, &zmsg), 0);
    zmsg_destroy (&zmsg);
    kd_msg_set_uints (msg, KD_F_DROP_RANKS, three, 1);
    cr_expect_eq (kd_msg_encode (msg, &zmsg), -1, "drop_clocks missing");
    kd_msg_destroy (&msg);
}

//  --------------------------------------------------------------------------
//  Malformed input

Test (kd_msg, truncated_header_fails_at_every_length)
{
    for (size_t i = 0; i < SCHEMAS; i++) {
        zmsg_t *full = s_encoded (s_schema [i].type, NULL);
        zframe_t *header = zmsg_first (full);
        size_t len = zframe_size (header);
        for (size_t cut = 0; cut < len; cut++) {
            zmsg_t *zmsg = zmsg_new ();
            zmsg_addmem (zmsg, zframe_data (header), cut);
            //  Keep the data frame so that only the header is at fault.
            if (s_schema [i].data)
                zmsg_addmem (zmsg, s_floats, sizeof s_floats);
            kd_msg_err_t err;
            s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);
        }
        zmsg_destroy (&full);
    }
}

Test (kd_msg, wrong_type_for_a_field)
{
    //  The example from the protocol document.
    s_raw_t r;
    s_raw_head (&r, 4, 1, "HEARTBEAT");
    s_raw_str (&r, "rank");
    s_raw_str (&r, "x");
    s_raw_str (&r, "zzz");
    msgpack_pack_nil (&r.pk);
    zmsg_t *zmsg = s_raw_msg (&r, NULL, NULL);
    kd_msg_err_t err;
    cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err),
                      "field 'rank' has wrong type");

    //  Every field of every type, in turn.
    for (size_t i = 0; i < SCHEMAS; i++) {
        const s_schema_t *s = &s_schema [i];
        s_mask_t mask = s_schema_mask (s, true);
        for (int f = 0; f < KD_F_FIELD_COUNT; f++) {
            if (!((mask >> f) & 1))
                continue;
            const char *name = kd_msg_field_name ((kd_field_t) f);
            zmsg = s_encoded (s->type, NULL);
            zmsg_t *bad = s_edit (&zmsg, name, S_EDIT_WRONG_SCALAR);
            s_expect_fail (&bad, false, KD_ERR_MALFORMED, &err);
            kd_field_kind_t kind = kd_msg_field_kind ((kd_field_t) f);
            if (kind == KD_FT_UINTS || kind == KD_FT_FLOATS || kind == KD_FT_STRS) {
                zmsg = s_encoded (s->type, NULL);
                bad = s_edit (&zmsg, name, S_EDIT_WRONG_ELEMENT);
                s_expect_fail (&bad, false, KD_ERR_MALFORMED, &err);
            }
        }
    }
}

//  uint fields take non-negative integers only; float fields take any
//  number; strings must be strings without NUL.
Test (kd_msg, numeric_kinds_on_input)
{
    struct { const char *key; int how; bool ok; } cases [] = {
        { "rank", 0, false },       //  negative integer
        { "rank", 1, false },       //  float64
        { "rank", 2, false },       //  nil
        { "rank", 3, false },       //  true
        { "loss", 0, true },
        { "loss", 1, true },
        { "loss", 4, true },        //  float32
        { "loss", 5, true },        //  positive integer
        { "loss", 2, false },
        { "loss", 6, false },       //  bin
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases [0]; c++) {
        s_raw_t r;
        s_raw_head (&r, 3, 1, "HEARTBEAT");
        s_raw_str (&r, cases [c].key);
        switch (cases [c].how) {
            case 0: msgpack_pack_int64 (&r.pk, -5); break;
            case 1: msgpack_pack_double (&r.pk, 2.5); break;
            case 2: msgpack_pack_nil (&r.pk); break;
            case 3: msgpack_pack_true (&r.pk); break;
            case 4: msgpack_pack_float (&r.pk, 0.75f); break;
            case 5: msgpack_pack_uint64 (&r.pk, 9); break;
            case 6: msgpack_pack_bin (&r.pk, 1); msgpack_pack_bin_body (&r.pk, "x", 1); break;
        }
        zmsg_t *zmsg = s_raw_msg (&r, NULL, NULL);
        kd_msg_err_t err;
        if (cases [c].ok) {
            kd_msg_t *out = NULL;
            cr_assert_eq (kd_msg_decode (&zmsg, false, &out, NULL, &err), 0,
                          "case %zu: %s", c, err.reason);
            double expect [] = { -5, 2.5, 0, 0, 0.75, 9 };
            cr_expect_eq (kd_msg_float (out, KD_F_LOSS), expect [cases [c].how], "case %zu", c);
            kd_msg_destroy (&out);
        }
        else
            s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);
    }
}

Test (kd_msg, strings_too_long_or_with_nul)
{
    char big [KD_MSG_MAX_STRING + 1];
    memset (big, 'x', sizeof big);
    for (int c = 0; c < 3; c++) {
        s_raw_t r;
        s_raw_head (&r, 4, 1, "HELLO");
        s_raw_str (&r, "role");
        s_raw_str (&r, "worker");
        s_raw_str (&r, "name");
        if (c == 0 || c == 1) {
            msgpack_pack_str (&r.pk, c == 0 ? sizeof big : 3);
            msgpack_pack_str_body (&r.pk, c == 0 ? big : "a\0b", c == 0 ? sizeof big : 3);
        }
        else {
            //  An array where a string is due.
            msgpack_pack_array (&r.pk, 1);
            s_raw_str (&r, "a");
        }
        zmsg_t *zmsg = s_raw_msg (&r, NULL, NULL);
        kd_msg_err_t err;
        const char *reason = s_expect_fail (&zmsg, false,
                                            c == 0 ? KD_ERR_TOO_LARGE : KD_ERR_MALFORMED, &err);
        cr_expect (strstr (reason, "'name'"), "%s", reason);
    }
    //  An endpoint over the limit inside START.
    s_raw_t r;
    s_raw_head (&r, 5, 1, "START");
    s_raw_str (&r, "endpoints");
    msgpack_pack_array (&r.pk, 2);
    s_raw_str (&r, "tcp://a:7100");
    msgpack_pack_str (&r.pk, sizeof big);
    msgpack_pack_str_body (&r.pk, big, sizeof big);
    s_raw_str (&r, "los");
    msgpack_pack_array (&r.pk, 2);
    msgpack_pack_uint64 (&r.pk, 0);
    msgpack_pack_uint64 (&r.pk, 5);
    s_raw_str (&r, "his");
    msgpack_pack_array (&r.pk, 2);
    msgpack_pack_uint64 (&r.pk, 5);
    msgpack_pack_uint64 (&r.pk, 10);
    zmsg_t *zmsg = s_raw_msg (&r, NULL, NULL);
    kd_msg_err_t err;
    s_expect_fail (&zmsg, false, KD_ERR_TOO_LARGE, &err);
}

Test (kd_msg, header_not_a_map)
{
    static const uint8_t array [] = { 0x92, 0x01, 0x02 };
    static const uint8_t scalar [] = { 0x05 };
    static const uint8_t string [] = { 0xa3, 'a', 'b', 'c' };
    const uint8_t *bufs [] = { array, scalar, string };
    size_t sizes [] = { sizeof array, sizeof scalar, sizeof string };
    for (int i = 0; i < 3; i++) {
        zmsg_t *zmsg = s_bytes_msg (bufs [i], sizes [i]);
        kd_msg_err_t err;
        cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err),
                          "header is not a map");
    }
}

Test (kd_msg, data_frame_rules)
{
    kd_msg_err_t err;
    //  count disagrees with the frame.
    zmsg_t *zmsg = s_encoded (KD_MSG_PUSH, NULL);
    zframe_t *data = zmsg_last (zmsg);
    zmsg_remove (zmsg, data);
    zframe_destroy (&data);
    zmsg_addmem (zmsg, s_floats, sizeof s_floats - 4);
    const char *reason = s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);
    cr_expect (strstr (reason, "count 5"), "%s", reason);

    //  Not a whole number of floats.
    zmsg = s_encoded (KD_MSG_PULL_OK, NULL);
    data = zmsg_last (zmsg);
    zmsg_remove (zmsg, data);
    zframe_destroy (&data);
    zmsg_addmem (zmsg, s_floats, sizeof s_floats - 2);
    reason = s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);
    cr_expect (strstr (reason, "multiple of 4"), "%s", reason);

    //  PUSH without its data frame.
    zmsg = s_encoded (KD_MSG_PUSH, NULL);
    data = zmsg_last (zmsg);
    zmsg_remove (zmsg, data);
    zframe_destroy (&data);
    cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err),
                      "PUSH requires a data frame");

    //  HELLO with one, even an empty one.
    for (int empty = 0; empty < 2; empty++) {
        zmsg = s_encoded (KD_MSG_HELLO, NULL);
        zmsg_addmem (zmsg, s_floats, empty ? 0 : sizeof s_floats);
        cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err),
                          "HELLO takes no data frame");
    }
}

Test (kd_msg, unknown_type_and_versions)
{
    kd_msg_err_t err;
    s_raw_t r;
    s_raw_head (&r, 2, 1, "FOO");
    zmsg_t *zmsg = s_raw_msg (&r, NULL, NULL);
    cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_UNKNOWN_TYPE, &err),
                      "unknown message type 'FOO'");

    //  A hostile type name is shortened and made printable for the log.
    s_raw_head (&r, 2, 1, "EVIL\n2024 scheduler: fake log line that goes on and on");
    zmsg = s_raw_msg (&r, NULL, NULL);
    const char *reason = s_expect_fail (&zmsg, false, KD_ERR_UNKNOWN_TYPE, &err);
    cr_expect_null (strchr (reason, '\n'));
    cr_expect_lt (strlen (reason), 80);

    s_raw_head (&r, 2, 7, "HELLO");
    zmsg = s_raw_msg (&r, NULL, NULL);
    cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_VERSION, &err),
                      "protocol version 7 not supported");

    //  A future version is judged before the rest of the header, even if
    //  this peer would not understand it.
    s_raw_head (&r, 3, 2, "SOMETHING_NEW");
    msgpack_pack_uint64 (&r.pk, 1);
    msgpack_pack_uint64 (&r.pk, 2);
    zmsg = s_raw_msg (&r, NULL, NULL);
    s_expect_fail (&zmsg, false, KD_ERR_VERSION, &err);

    s_raw_head (&r, 2, 0, "HELLO");
    zmsg = s_raw_msg (&r, NULL, NULL);
    s_expect_fail (&zmsg, false, KD_ERR_VERSION, &err);

    //  Missing "v", and "v" of the wrong type.
    s_raw_init (&r);
    msgpack_pack_map (&r.pk, 1);
    s_raw_str (&r, "t");
    s_raw_str (&r, "HEARTBEAT");
    zmsg = s_raw_msg (&r, NULL, NULL);
    cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err),
                      "missing protocol version 'v'");
    s_raw_init (&r);
    msgpack_pack_map (&r.pk, 2);
    s_raw_str (&r, "v");
    s_raw_str (&r, "1");
    s_raw_str (&r, "t");
    s_raw_str (&r, "HEARTBEAT");
    zmsg = s_raw_msg (&r, NULL, NULL);
    s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);

    //  Missing "t", and "t" of the wrong type.
    s_raw_init (&r);
    msgpack_pack_map (&r.pk, 1);
    s_raw_str (&r, "v");
    msgpack_pack_uint64 (&r.pk, 1);
    zmsg = s_raw_msg (&r, NULL, NULL);
    cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err),
                      "missing message type 't'");
    s_raw_init (&r);
    msgpack_pack_map (&r.pk, 2);
    s_raw_str (&r, "v");
    msgpack_pack_uint64 (&r.pk, 1);
    s_raw_str (&r, "t");
    msgpack_pack_uint64 (&r.pk, KD_MSG_HELLO);
    zmsg = s_raw_msg (&r, NULL, NULL);
    s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);
}

Test (kd_msg, oversize_header)
{
    size_t size = (size_t) KD_MSG_MAX_HEADER * 2;
    uint8_t *bytes = (uint8_t *) calloc (1, size);
    zmsg_t *zmsg = s_bytes_msg (bytes, size);
    free (bytes);
    kd_msg_err_t err;
    cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_TOO_LARGE, &err),
                      "header of 2097152 bytes exceeds 1048576");
}

Test (kd_msg, frame_counts)
{
    kd_msg_err_t err;
    //  Header, data and one more, without a routing id.
    zmsg_t *zmsg = s_encoded (KD_MSG_PUSH, NULL);
    zmsg_addstr (zmsg, "extra");
    s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);

    //  Four frames on a ROUTER: the routing id is still handed back.
    zmsg = s_encoded (KD_MSG_PUSH, "peer-1");
    zmsg_addstr (zmsg, "extra");
    kd_msg_t *out = NULL;
    zframe_t *routing = NULL;
    cr_expect_eq (kd_msg_decode (&zmsg, true, &out, &routing, &err), -2);
    cr_expect_eq (err.code, KD_ERR_MALFORMED);
    cr_assert_not_null (routing);
    cr_expect (zframe_streq (routing, "peer-1"));
    zframe_destroy (&routing);

    //  Empty messages.
    zmsg = zmsg_new ();
    s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);
    zmsg = zmsg_new ();
    s_expect_fail (&zmsg, true, KD_ERR_MALFORMED, &err);
    zmsg = NULL;
    s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);

    //  A routed message with only the routing id.
    zmsg = zmsg_new ();
    zmsg_addstr (zmsg, "peer-2");
    cr_expect_eq (kd_msg_decode (&zmsg, true, &out, &routing, &err), -2);
    cr_expect_str_eq (err.reason, "message has no header frame");
    cr_assert_not_null (routing);
    cr_expect (zframe_streq (routing, "peer-2"));
    zframe_destroy (&routing);

    //  The same with no routing_p: nothing leaks (ASan says).
    zmsg = zmsg_new ();
    zmsg_addstr (zmsg, "peer-3");
    cr_expect_eq (kd_msg_decode (&zmsg, true, &out, NULL, NULL), -2);
}

Test (kd_msg, allocation_bombs)
{
    static const uint8_t array32 [] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
    static const uint8_t map32 [] = { 0xdf, 0xff, 0xff, 0xff, 0xff };
    static const uint8_t str32 [] = { 0xdb, 0xff, 0xff, 0xff, 0xff, 'a' };
    static const uint8_t bin32 [] = { 0xc6, 0x7f, 0xff, 0xff, 0xff, 'a' };
    static const uint8_t ext32 [] = { 0xc9, 0x7f, 0xff, 0xff, 0xff, 0x01, 'a' };
    static const uint8_t map16 [] = { 0xde, 0xff, 0xff, 0x01, 0x02 };
    //  A plausible header whose last value is a bomb.
    static const uint8_t inner [] = { 0x83, 0xa1, 'v', 0x01, 0xa1, 't', 0xa4,
                                      'P', 'U', 'S', 'H', 0xa1, 'x',
                                      0xdd, 0xff, 0xff, 0xff, 0xff };
    //  Nested counts that fit one by one but not together.
    static const uint8_t nested [] = { 0x92, 0x93, 0x01, 0x01 };
    const uint8_t *bufs [] = { array32, map32, str32, bin32, ext32, map16, inner, nested };
    size_t sizes [] = { sizeof array32, sizeof map32, sizeof str32, sizeof bin32,
                        sizeof ext32, sizeof map16, sizeof inner, sizeof nested };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes [0]; i++) {
        cr_expect_eq (kd_msgpack_validate (bufs [i], sizes [i], KD_MSG_MAX_DEPTH), -2,
                      "bomb %zu", i);
        zmsg_t *zmsg = s_bytes_msg (bufs [i], sizes [i]);
        kd_msg_err_t err;
        s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);
    }
}

//  An unknown key may hold any value, nested up to the depth limit.
Test (kd_msg, nesting_depth)
{
    for (int depth = KD_MSG_MAX_DEPTH - 1; depth <= KD_MSG_MAX_DEPTH + 1; depth++) {
        //  The header map is level 1, so "x" holds depth - 1 nested maps.
        s_raw_t r;
        s_raw_head (&r, 3, 1, "HEARTBEAT");
        s_raw_str (&r, "x");
        for (int d = 1; d < depth; d++) {
            msgpack_pack_map (&r.pk, d == depth - 1 ? 0 : 1);
            if (d < depth - 1)
                s_raw_str (&r, "k");
        }
        zmsg_t *zmsg = s_raw_msg (&r, NULL, NULL);
        kd_msg_err_t err;
        if (depth <= KD_MSG_MAX_DEPTH) {
            kd_msg_t *out = NULL;
            cr_expect_eq (kd_msg_decode (&zmsg, false, &out, NULL, &err), 0,
                          "depth %d: %s", depth, err.reason);
            kd_msg_destroy (&out);
        }
        else
            s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);
    }
}

Test (kd_msg, array_over_the_limit)
{
    s_raw_t r;
    s_raw_head (&r, 4, 1, "STATUS");
    s_raw_str (&r, "version");
    msgpack_pack_uint64 (&r.pk, 1);
    s_raw_str (&r, "ranks");
    msgpack_pack_array (&r.pk, KD_MSG_MAX_ARRAY + 1);
    for (int i = 0; i < KD_MSG_MAX_ARRAY + 1; i++)
        msgpack_pack_uint64 (&r.pk, 1);
    zmsg_t *zmsg = s_raw_msg (&r, NULL, NULL);
    kd_msg_err_t err;
    const char *reason = s_expect_fail (&zmsg, false, KD_ERR_TOO_LARGE, &err);
    cr_expect_str_eq (reason, "field 'ranks' has 65537 elements, limit 65536");
}

//  A lease-ahead worker's fields: the flag in HELLO, WELCOME and ERROR, and
//  the ahead lease's rows in RELEASE beside the current ones, checked like
//  them (non-negative integers, at most KD_MSG_MAX_ARRAY, a truncated header
//  refused), and ignored by a peer that reads only `rows`.
Test (kd_msg, lease_ahead_fields_round_trip_and_are_checked)
{
    zsock_t *a = zsock_new_pair ("@inproc://kd-msg-ahead");
    zsock_t *b = zsock_new_pair (">inproc://kd-msg-ahead");
    zsock_set_rcvtimeo (b, RCVTIMEO_MS);
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "worker");
    kd_msg_set_str (hello, KD_F_NAME, "w0");
    kd_msg_set_uint (hello, KD_F_LEASE_AHEAD, 1);
    cr_assert_eq (kd_msg_send (&hello, a), 0);
    kd_msg_t *refusal = kd_msg_new_error (NULL, KD_ERR_STATE, "lease_ahead needs asp or ssp");
    kd_msg_set_uint (refusal, KD_F_LEASE_AHEAD, 1);
    cr_assert_eq (kd_msg_send (&refusal, a), 0);
    uint64_t rows [64], ahead [64];
    for (int i = 0; i < 64; i++) {
        rows [i] = (uint64_t) i * 3;
        ahead [i] = UINT64_MAX - (uint64_t) i;
    }
    kd_msg_t *release = kd_msg_new (KD_MSG_RELEASE);
    kd_msg_set_uint (release, KD_F_VERSION, 7);
    kd_msg_set_uint (release, KD_F_CLOCK, 3);
    kd_msg_set_uints (release, KD_F_ROWS, rows, 64);
    kd_msg_set_uints (release, KD_F_AHEAD, ahead, 64);
    cr_assert_eq (kd_msg_send (&release, a), 0);

    kd_msg_t *got = NULL;
    cr_assert_eq (kd_msg_recv (b, &got, NULL, NULL), 0);
    cr_expect_eq (kd_msg_uint (got, KD_F_LEASE_AHEAD), 1);
    kd_msg_destroy (&got);
    cr_assert_eq (kd_msg_recv (b, &got, NULL, NULL), 0);
    cr_expect_eq (kd_msg_type (got), KD_MSG_ERROR);
    cr_expect_eq (kd_msg_uint (got, KD_F_LEASE_AHEAD), 1);
    kd_msg_destroy (&got);
    cr_assert_eq (kd_msg_recv (b, &got, NULL, NULL), 0);
    size_t n = 0, m = 0;
    const uint64_t *r = kd_msg_uints (got, KD_F_ROWS, &n);
    const uint64_t *x = kd_msg_uints (got, KD_F_AHEAD, &m);
    cr_assert_eq (n, 64);
    cr_assert_eq (m, 64);
    cr_expect_eq (r [63], 189);
    cr_expect_eq (x [0], UINT64_MAX);
    cr_expect_eq (x [63], UINT64_MAX - 63);
    kd_msg_destroy (&got);
    zsock_destroy (&a);
    zsock_destroy (&b);

    //  Malformed: a negative row, a float row, a string, over the limit,
    //  and a flag that is not an unsigned integer.
    kd_msg_err_t err;
    for (int bad = 0; bad < 5; bad++) {
        s_raw_t raw;
        s_raw_head (&raw, 5, 1, bad == 4 ? "HELLO" : "RELEASE");
        if (bad == 4) {
            s_raw_str (&raw, "role");
            s_raw_str (&raw, "worker");
            s_raw_str (&raw, "name");
            s_raw_str (&raw, "w0");
            s_raw_str (&raw, "lease_ahead");
            msgpack_pack_int64 (&raw.pk, -1);
        }
        else {
            s_raw_str (&raw, "version");
            msgpack_pack_uint64 (&raw.pk, 1);
            s_raw_str (&raw, "clock");
            msgpack_pack_uint64 (&raw.pk, 1);
            s_raw_str (&raw, "ahead");
            uint32_t count = bad == 3 ? KD_MSG_MAX_ARRAY + 1 : 2;
            if (bad == 2)
                s_raw_str (&raw, "0,1");
            else {
                msgpack_pack_array (&raw.pk, count);
                for (uint32_t i = 0; i + 1 < count; i++)
                    msgpack_pack_uint64 (&raw.pk, i);
                if (bad == 0)
                    msgpack_pack_int64 (&raw.pk, -5);
                else
                if (bad == 1)
                    msgpack_pack_double (&raw.pk, 1.5);
                else
                    msgpack_pack_uint64 (&raw.pk, 9);
            }
        }
        zmsg_t *zmsg = s_raw_msg (&raw, NULL, NULL);
        const char *reason = s_expect_fail (&zmsg, false,
                                            bad == 3 ? KD_ERR_TOO_LARGE : KD_ERR_MALFORMED, &err);
        cr_expect (strstr (reason, bad == 4 ? "lease_ahead" : "ahead"), "case %d: '%s'", bad, reason);
    }
    //  A RELEASE cut anywhere inside its ahead rows is refused.
    release = kd_msg_new (KD_MSG_RELEASE);
    kd_msg_set_uint (release, KD_F_VERSION, 7);
    kd_msg_set_uint (release, KD_F_CLOCK, 3);
    kd_msg_set_uints (release, KD_F_AHEAD, ahead, 64);
    zmsg_t *whole = NULL;
    cr_assert_eq (kd_msg_encode (release, &whole), 0);
    kd_msg_destroy (&release);
    zframe_t *header = zmsg_first (whole);
    for (size_t cut = 1; cut < zframe_size (header); cut += 37) {
        zmsg_t *zmsg = s_bytes_msg (zframe_data (header), cut);
        s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);
    }
    zmsg_destroy (&whole);
}

Test (kd_msg, trailing_bytes_after_the_map)
{
    zmsg_t *full = s_encoded (KD_MSG_HELLO, NULL);
    zframe_t *header = zmsg_first (full);
    size_t len = zframe_size (header);
    uint8_t *bytes = (uint8_t *) malloc (len + 1);
    memcpy (bytes, zframe_data (header), len);
    bytes [len] = 0xc0;
    zmsg_t *zmsg = s_bytes_msg (bytes, len + 1);
    kd_msg_err_t err;
    s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);
    //  A second complete map is trailing bytes too.
    zmsg = zmsg_new ();
    zframe_t *twice = zframe_new (NULL, 2 * len);
    memcpy (zframe_data (twice), zframe_data (header), len);
    memcpy (zframe_data (twice) + len, zframe_data (header), len);
    zmsg_append (zmsg, &twice);
    s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err);
    free (bytes);
    zmsg_destroy (&full);
}

Test (kd_msg, duplicate_keys)
{
    kd_msg_err_t err;
    zmsg_t *zmsg = s_encoded (KD_MSG_PUSH, NULL);
    zmsg_t *bad = s_edit (&zmsg, "rank", S_EDIT_DUPLICATE);
    cr_expect_str_eq (s_expect_fail (&bad, false, KD_ERR_MALFORMED, &err),
                      "duplicate key 'rank'");
    const char *keys [] = { "v", "t", "count" };
    for (int i = 0; i < 3; i++) {
        zmsg = s_encoded (KD_MSG_PUSH, NULL);
        bad = s_edit (&zmsg, keys [i], S_EDIT_DUPLICATE);
        s_expect_fail (&bad, false, KD_ERR_MALFORMED, &err);
    }
    //  Unknown keys may not repeat either.
    s_raw_t r;
    s_raw_head (&r, 4, 1, "HEARTBEAT");
    s_raw_str (&r, "future");
    msgpack_pack_uint64 (&r.pk, 1);
    s_raw_str (&r, "future");
    msgpack_pack_uint64 (&r.pk, 2);
    zmsg = s_raw_msg (&r, NULL, NULL);
    cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err),
                      "duplicate key 'future'");
    //  Regression (fuzz_kd_msg): empty keys, whose pointers msgpack-c
    //  leaves NULL, are compared without reading them.
    s_raw_head (&r, 4, 1, "HEARTBEAT");
    s_raw_str (&r, "");
    msgpack_pack_uint64 (&r.pk, 1);
    s_raw_str (&r, "");
    msgpack_pack_uint64 (&r.pk, 2);
    zmsg = s_raw_msg (&r, NULL, NULL);
    cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err),
                      "duplicate key ''");
}

Test (kd_msg, empty_string_values_decode)
{
    //  Regression (fuzz_kd_msg): an empty string value has a NULL pointer.
    s_raw_t r;
    s_raw_head (&r, 4, 1, "HELLO");
    s_raw_str (&r, "role");
    s_raw_str (&r, "");
    s_raw_str (&r, "name");
    s_raw_str (&r, "");
    zmsg_t *zmsg = s_raw_msg (&r, NULL, NULL);
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    cr_assert_eq (kd_msg_decode (&zmsg, false, &msg, NULL, &err), 0, "%s", err.reason);
    cr_expect_str_eq (kd_msg_str (msg, KD_F_ROLE), "");
    kd_msg_destroy (&msg);
}

Test (kd_msg, keys_must_be_strings_unknown_keys_are_ignored)
{
    kd_msg_err_t err;
    s_raw_t r;
    s_raw_head (&r, 3, 1, "HEARTBEAT");
    msgpack_pack_uint64 (&r.pk, 4);
    msgpack_pack_uint64 (&r.pk, 5);
    zmsg_t *zmsg = s_raw_msg (&r, NULL, NULL);
    cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err),
                      "header key is not a string");

    s_raw_head (&r, 6, 1, "HEARTBEAT");
    s_raw_str (&r, "rank");
    msgpack_pack_uint64 (&r.pk, 3);
    s_raw_str (&r, "future_list");
    msgpack_pack_array (&r.pk, 2);
    msgpack_pack_nil (&r.pk);
    s_raw_str (&r, "z");
    s_raw_str (&r, "future_map");
    msgpack_pack_map (&r.pk, 1);
    s_raw_str (&r, "a");
    msgpack_pack_double (&r.pk, 1.5);
    s_raw_str (&r, "Rank");       //  keys are case-sensitive
    s_raw_str (&r, "not a number");
    zmsg = s_raw_msg (&r, NULL, NULL);
    kd_msg_t *out = NULL;
    cr_assert_eq (kd_msg_decode (&zmsg, false, &out, NULL, &err), 0, "%s", err.reason);
    cr_expect_eq (kd_msg_uint (out, KD_F_RANK), 3);
    kd_msg_destroy (&out);
}

Test (kd_msg, missing_required_field)
{
    for (size_t i = 0; i < SCHEMAS; i++) {
        const s_schema_t *s = &s_schema [i];
        for (int r = 0; s->required [r] != END; r++) {
            const char *name = kd_msg_field_name (s->required [r]);
            zmsg_t *zmsg = s_encoded (s->type, NULL);
            zmsg_t *bad = s_edit (&zmsg, name, S_EDIT_DROP);
            kd_msg_err_t err;
            const char *reason = s_expect_fail (&bad, false, KD_ERR_MALFORMED, &err);
            char expect [128];
            snprintf (expect, sizeof expect, "%s lacks required field '%s'",
                      kd_msg_type_name (s->type), name);
            cr_expect_str_eq (reason, expect);
        }
    }
}

Test (kd_msg, parallel_arrays_must_agree)
{
    struct { kd_msg_type_t type; const char *key; } cases [] = {
        { KD_MSG_COMMIT, "ranks" }, { KD_MSG_COMMIT, "clocks" },
        { KD_MSG_COMMIT, "weights" }, { KD_MSG_COMMIT, "drop_ranks" },
        { KD_MSG_COMMIT, "drop_clocks" }, { KD_MSG_START, "endpoints" },
        { KD_MSG_START, "los" }, { KD_MSG_START, "his" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases [0]; c++) {
        //  Drop one array of a set.  The drop arrays are optional, so only
        //  the length rule catches a lone drop_ranks.
        zmsg_t *zmsg = s_encoded (cases [c].type, NULL);
        zmsg_t *bad = s_edit (&zmsg, cases [c].key, S_EDIT_DROP);
        kd_msg_err_t err;
        s_expect_fail (&bad, false, KD_ERR_MALFORMED, &err);
    }
    s_raw_t r;
    s_raw_head (&r, 6, 1, "COMMIT");
    s_raw_str (&r, "version");
    msgpack_pack_uint64 (&r.pk, 4);
    s_raw_str (&r, "ranks");
    msgpack_pack_array (&r.pk, 2);
    msgpack_pack_uint64 (&r.pk, 0);
    msgpack_pack_uint64 (&r.pk, 1);
    s_raw_str (&r, "clocks");
    msgpack_pack_array (&r.pk, 1);
    msgpack_pack_uint64 (&r.pk, 9);
    s_raw_str (&r, "weights");
    msgpack_pack_array (&r.pk, 2);
    msgpack_pack_double (&r.pk, 0.5);
    msgpack_pack_double (&r.pk, 0.5);
    zmsg_t *zmsg = s_raw_msg (&r, NULL, NULL);
    kd_msg_err_t err;
    cr_expect_str_eq (s_expect_fail (&zmsg, false, KD_ERR_MALFORMED, &err),
                      "COMMIT fields 'ranks' and 'clocks' differ in length");
}

Test (kd_msg, routing_id_returned_on_every_failure)
{
    static const uint8_t junk [] = { 0xc1 };
    zmsg_t *zmsg = zmsg_new ();
    zmsg_addmem (zmsg, "\x00\x01\x02", 3);
    zmsg_addmem (zmsg, junk, sizeof junk);
    kd_msg_t *out = NULL;
    zframe_t *routing = NULL;
    kd_msg_err_t err;
    cr_expect_eq (kd_msg_decode (&zmsg, true, &out, &routing, &err), -2);
    cr_assert_not_null (routing);
    cr_expect_eq (zframe_size (routing), 3);
    cr_expect_eq (memcmp (zframe_data (routing), "\x00\x01\x02", 3), 0);
    zframe_destroy (&routing);

    //  Not routed: the first frame is the header and nothing comes back.
    zmsg = zmsg_new ();
    zmsg_addmem (zmsg, junk, sizeof junk);
    routing = (zframe_t *) 0x1;
    cr_expect_eq (kd_msg_decode (&zmsg, false, &out, &routing, &err), -2);
    cr_expect_null (routing);
}

//  --------------------------------------------------------------------------
//  kd_msgpack_validate

Test (kd_msg, validate_accepts_every_format)
{
    static const struct { uint8_t bytes [24]; size_t size; } ok [] = {
        { { 0x00 }, 1 }, { { 0x7f }, 1 }, { { 0xe0 }, 1 }, { { 0xff }, 1 },
        { { 0xc0 }, 1 }, { { 0xc2 }, 1 }, { { 0xc3 }, 1 },
        { { 0xcc, 1 }, 2 }, { { 0xcd, 1, 2 }, 3 }, { { 0xce, 1, 2, 3, 4 }, 5 },
        { { 0xcf, 1, 2, 3, 4, 5, 6, 7, 8 }, 9 },
        { { 0xd0, 1 }, 2 }, { { 0xd1, 1, 2 }, 3 }, { { 0xd2, 1, 2, 3, 4 }, 5 },
        { { 0xd3, 1, 2, 3, 4, 5, 6, 7, 8 }, 9 },
        { { 0xca, 1, 2, 3, 4 }, 5 }, { { 0xcb, 1, 2, 3, 4, 5, 6, 7, 8 }, 9 },
        { { 0xa0 }, 1 }, { { 0xa2, 'h', 'i' }, 3 },
        { { 0xd9, 2, 'h', 'i' }, 4 }, { { 0xda, 0, 2, 'h', 'i' }, 5 },
        { { 0xdb, 0, 0, 0, 2, 'h', 'i' }, 7 },
        { { 0xc4, 1, 9 }, 3 }, { { 0xc5, 0, 1, 9 }, 4 }, { { 0xc6, 0, 0, 0, 1, 9 }, 6 },
        { { 0xd4, 1, 9 }, 3 }, { { 0xd5, 1, 9, 9 }, 4 }, { { 0xd6, 1, 9, 9, 9, 9 }, 6 },
        { { 0xd7, 1, 9, 9, 9, 9, 9, 9, 9, 9 }, 10 },
        { { 0xd8, 1, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9 }, 18 },
        { { 0xc7, 1, 5, 9 }, 4 }, { { 0xc8, 0, 1, 5, 9 }, 5 },
        { { 0xc9, 0, 0, 0, 1, 5, 9 }, 7 },
        { { 0x90 }, 1 }, { { 0x80 }, 1 }, { { 0x92, 1, 2 }, 3 },
        { { 0xdc, 0, 2, 1, 2 }, 5 }, { { 0xdd, 0, 0, 0, 2, 1, 2 }, 7 },
        { { 0x81, 1, 2 }, 3 }, { { 0xde, 0, 1, 1, 2 }, 5 },
        { { 0xdf, 0, 0, 0, 1, 1, 2 }, 7 },
        { { 0x92, 0x91, 0x90, 0x80 }, 4 },
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok [0]; i++) {
        cr_expect_eq (kd_msgpack_validate (ok [i].bytes, ok [i].size, 4), 0, "case %zu", i);
        //  Every strict prefix is incomplete.
        for (size_t cut = 0; cut < ok [i].size; cut++)
            cr_expect_eq (kd_msgpack_validate (ok [i].bytes, cut, 4), -2,
                          "case %zu cut %zu", i, cut);
        //  msgpack-c agrees that the whole buffer is one object.
        msgpack_unpacked u;
        msgpack_unpacked_init (&u);
        size_t off = 0;
        cr_expect_eq (msgpack_unpack_next (&u, (const char *) ok [i].bytes,
                                           ok [i].size, &off),
                      MSGPACK_UNPACK_SUCCESS, "case %zu", i);
        cr_expect_eq (off, ok [i].size, "case %zu", i);
        msgpack_unpacked_destroy (&u);
    }
}

Test (kd_msg, validate_rejects)
{
    static const struct { uint8_t bytes [8]; size_t size; } bad [] = {
        { { 0xc1 }, 1 },                        //  never used
        { { 0x00, 0x00 }, 2 },                  //  two objects
        { { 0x91, 0x01, 0x01 }, 3 },            //  trailing byte
        { { 0xcd, 0x01 }, 2 },                  //  short uint16
        { { 0xd9 }, 1 },                        //  str8 without length
        { { 0xa5, 'a' }, 2 },                   //  fixstr past the end
        { { 0x92, 0x01 }, 2 },                  //  array short of an element
        { { 0x81, 0x01 }, 2 },                  //  map short of a value
        { { 0xde, 0x00, 0x02, 1, 2, 3 }, 6 },   //  map16 short by one value
        { { 0x92, 0x93, 0x01, 0x01 }, 4 },      //  nested counts
        { { 0xc7, 0x02, 0x01, 0x00 }, 4 },      //  ext8 short
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad [0]; i++)
        cr_expect_eq (kd_msgpack_validate (bad [i].bytes, bad [i].size, 4), -2,
                      "case %zu", i);
    cr_expect_eq (kd_msgpack_validate (NULL, 0, 4), -2, "empty");
    cr_expect_eq (kd_msgpack_validate ((const uint8_t *) "", 0, 4), -2, "empty");
}

Test (kd_msg, validate_depth)
{
    uint8_t bytes [80];
    for (int depth = 0; depth <= 70; depth++) {
        //  depth nested one-element arrays around a nil.
        memset (bytes, 0x91, (size_t) depth);
        bytes [depth] = 0xc0;
        size_t size = (size_t) depth + 1;
        cr_expect_eq (kd_msgpack_validate (bytes, size, depth > 64 ? 64 : depth),
                      depth > 64 ? -2 : 0, "depth %d", depth);
        if (depth > 0)
            cr_expect_eq (kd_msgpack_validate (bytes, size, depth - 1), -2,
                          "depth %d", depth);
    }
    //  Empty containers count as a level too.
    static const uint8_t empty [] = { 0x91, 0x80 };
    cr_expect_eq (kd_msgpack_validate (empty, 2, 2), 0);
    cr_expect_eq (kd_msgpack_validate (empty, 2, 1), -2);
    //  Siblings do not add up: [[],[],[]] has depth 2.
    static const uint8_t siblings [] = { 0x93, 0x90, 0x91, 0x90, 0x90 };
    cr_expect_eq (kd_msgpack_validate (siblings, sizeof siblings, 3), 0);
    cr_expect_eq (kd_msgpack_validate (siblings, sizeof siblings, 2), -2);
    static const uint8_t flat [] = { 0x93, 0x90, 0x90, 0x90 };
    cr_expect_eq (kd_msgpack_validate (flat, sizeof flat, 2), 0);
    //  A negative limit allows scalars only.
    cr_expect_eq (kd_msgpack_validate (flat + 1, 1, -3), -2);
    cr_expect_eq (kd_msgpack_validate (empty + 1, 0, -3), -2);
    static const uint8_t nil [] = { 0xc0 };
    cr_expect_eq (kd_msgpack_validate (nil, 1, -3), 0);
}

//  Pack a random valid object of at most max_depth levels; returns its
//  depth.
static int
s_random_object (msgpack_packer *pk, uint64_t *state, int max_depth)
{
    uint64_t pick = s_next (state) % (max_depth > 0 ? 12 : 8);
    switch (pick) {
        case 0: msgpack_pack_nil (pk); return 0;
        case 1: msgpack_pack_true (pk); return 0;
        case 2: msgpack_pack_uint64 (pk, s_next (state) >> (s_next (state) % 64)); return 0;
        case 3: msgpack_pack_int64 (pk, -(int64_t) (s_next (state) >> (1 + s_next (state) % 63))); return 0;
        case 4: msgpack_pack_double (pk, (double) s_next (state)); return 0;
        case 5: msgpack_pack_float (pk, 1.5f); return 0;
        case 6: {
            size_t len = s_next (state) % 300;
            char buf [300];
            memset (buf, 'q', len);
            msgpack_pack_str (pk, len);
            msgpack_pack_str_body (pk, buf, len);
            return 0;
        }
        case 7: {
            size_t len = s_next (state) % 40;
            char buf [40] = { 0 };
            if (s_next (state) % 2) {
                msgpack_pack_bin (pk, len);
                msgpack_pack_bin_body (pk, buf, len);
            }
            else {
                msgpack_pack_ext (pk, len, 3);
                msgpack_pack_ext_body (pk, buf, len);
            }
            return 0;
        }
        default: {
            bool map = pick >= 10;
            size_t n = s_next (state) % 5;
            //  Long containers of scalars reach the 16-bit counts without
            //  letting the object grow without bound.
            if (max_depth == 1 && s_next (state) % 4 == 0)
                n = 20 + s_next (state) % 300;
            if (map)
                msgpack_pack_map (pk, n);
            else
                msgpack_pack_array (pk, n);
            int deepest = 0;
            for (size_t i = 0; i < n * (map ? 2 : 1); i++) {
                int d = s_random_object (pk, state, max_depth - 1);
                if (d > deepest)
                    deepest = d;
            }
            return deepest + 1;
        }
    }
}

Test (kd_msg, validate_agrees_with_msgpack_on_random_valid_objects)
{
    uint64_t state = 42;
    for (int round = 0; round < 2000; round++) {
        msgpack_sbuffer sbuf;
        msgpack_sbuffer_init (&sbuf);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &sbuf, msgpack_sbuffer_write);
        int depth = s_random_object (&pk, &state, 1 + (int) (s_next (&state) % 5));
        const uint8_t *bytes = (const uint8_t *) sbuf.data;
        cr_expect_eq (kd_msgpack_validate (bytes, sbuf.size, depth), 0, "round %d", round);
        if (depth > 0)
            cr_expect_eq (kd_msgpack_validate (bytes, sbuf.size, depth - 1), -2,
                          "round %d", round);
        if (sbuf.size > 0)
            cr_expect_eq (kd_msgpack_validate (bytes, sbuf.size - 1, depth), -2,
                          "round %d", round);
        msgpack_sbuffer_destroy (&sbuf);
    }
}

//  --------------------------------------------------------------------------
//  Random input: decode returns 0 or -2 and never crashes

//  Decode one input and check the contract.  Returns the decode's result.
static int
s_decode_any (zmsg_t **zmsg_p, bool routed, bool expect_routing)
{
    kd_msg_t *out = NULL;
    zframe_t *routing = NULL;
    kd_msg_err_t err;
    int rc = kd_msg_decode (zmsg_p, routed, &out, &routing, &err);
    cr_assert (rc == 0 || rc == -2, "decode returned %d", rc);
    cr_assert_null (*zmsg_p);
    if (rc == 0) {
        cr_assert_not_null (out);
        cr_assert_null (routing);
    }
    else {
        cr_assert_null (out);
        cr_assert (err.code == KD_ERR_MALFORMED || err.code == KD_ERR_TOO_LARGE
                || err.code == KD_ERR_UNKNOWN_TYPE || err.code == KD_ERR_VERSION,
                   "code %d", err.code);
        cr_assert_lt (strlen (err.reason), sizeof err.reason);
        if (expect_routing)
            cr_assert_not_null (routing, "routing id returned on failure");
    }
    kd_msg_destroy (&out);
    zframe_destroy (&routing);
    return rc;
}

Test (kd_msg, fuzz_random_bytes)
{
    uint64_t state = 20240601;
    uint8_t buf [96];
    //  First bytes that make the rest interesting: maps, arrays, strings.
    static const uint8_t leads [] = { 0x80, 0x83, 0x85, 0x8f, 0xde, 0xdf,
                                      0x93, 0xdc, 0xdd, 0xa1, 0xd9, 0xdb };
    for (int round = 0; round < FUZZ_ROUNDS; round++) {
        size_t size = s_next (&state) % sizeof buf;
        for (size_t i = 0; i < size; i++)
            buf [i] = (uint8_t) s_next (&state);
        if (size > 0 && round % 2)
            buf [0] = leads [s_next (&state) % sizeof leads];
        int valid = kd_msgpack_validate (buf, size, KD_MSG_MAX_DEPTH);
        cr_assert (valid == 0 || valid == -2);
        if (valid == 0) {
            //  Whatever the validator passes, msgpack-c parses completely.
            msgpack_unpacked u;
            msgpack_unpacked_init (&u);
            size_t off = 0;
            cr_assert_eq (msgpack_unpack_next (&u, (const char *) buf, size, &off),
                          MSGPACK_UNPACK_SUCCESS, "round %d", round);
            cr_assert_eq (off, size);
            msgpack_unpacked_destroy (&u);
        }
        zmsg_t *zmsg = zmsg_new ();
        if (round % 3 == 0)
            zmsg_addstr (zmsg, "peer");
        zmsg_addmem (zmsg, buf, size);
        if (round % 5 == 0)
            zmsg_addmem (zmsg, buf, size & ~(size_t) 3);
        s_decode_any (&zmsg, round % 3 == 0, round % 3 == 0);
    }
}

Test (kd_msg, fuzz_mutated_valid_headers)
{
    zmsg_t *seeds [SCHEMAS];
    for (size_t i = 0; i < SCHEMAS; i++)
        seeds [i] = s_encoded (s_schema [i].type, NULL);
    uint64_t state = 7;
    int decoded = 0;
    uint8_t buf [4096];
    for (int round = 0; round < FUZZ_ROUNDS; round++) {
        size_t which = s_next (&state) % SCHEMAS;
        zframe_t *header = zmsg_first (seeds [which]);
        size_t size = zframe_size (header);
        cr_assert_lt (size + 8, sizeof buf);
        memcpy (buf, zframe_data (header), size);
        int edits = 1 + (int) (s_next (&state) % 4);
        for (int e = 0; e < edits && size > 0; e++) {
            size_t at = s_next (&state) % size;
            switch (s_next (&state) % 6) {
                case 0: buf [at] ^= (uint8_t) (1u << (s_next (&state) % 8)); break;
                case 1: buf [at] = (uint8_t) s_next (&state); break;
                case 2: buf [at] = (uint8_t) (0xc0 + s_next (&state) % 0x20); break;
                case 3:             //  insert a byte
                    memmove (buf + at + 1, buf + at, size - at);
                    buf [at] = (uint8_t) s_next (&state);
                    size++;
                    break;
                case 4:             //  delete a byte
                    memmove (buf + at, buf + at + 1, size - at - 1);
                    size--;
                    break;
                default:            //  truncate
                    size = at;
                    break;
            }
        }
        zmsg_t *zmsg = zmsg_new ();
        zmsg_addstr (zmsg, "peer");
        zmsg_addmem (zmsg, buf, size);
        if (s_schema [which].data || s_next (&state) % 8 == 0)
            zmsg_addmem (zmsg, s_floats, sizeof s_floats - (s_next (&state) % 3 ? 0 : 2));
        if (s_decode_any (&zmsg, true, true) == 0)
            decoded++;
    }
    //  Some mutations (a flipped bit in a value) still decode; that the
    //  loop saw both outcomes shows it was not testing only garbage.
    cr_expect_gt (decoded, 0);
    cr_expect_lt (decoded, FUZZ_ROUNDS);
    for (size_t i = 0; i < SCHEMAS; i++)
        zmsg_destroy (&seeds [i]);
}

//  --------------------------------------------------------------------------
//  Sockets

//  A bound ROUTER and a connected DEALER on a fresh inproc endpoint, both
//  with receive timeouts.
static void
s_pair (zsock_t **router, zsock_t **dealer, const char *endpoint)
{
    *router = zsock_new (ZMQ_ROUTER);
    cr_assert_not_null (*router);
    zsock_set_rcvtimeo (*router, RCVTIMEO_MS);
    cr_assert_eq (zsock_bind (*router, "%s", endpoint), 0);
    *dealer = zsock_new (ZMQ_DEALER);
    cr_assert_not_null (*dealer);
    zsock_set_rcvtimeo (*dealer, RCVTIMEO_MS);
    cr_assert_eq (zsock_connect (*dealer, "%s", endpoint), 0);
}

Test (kd_msg, socket_round_trip_dealer_router)
{
    zsock_t *router, *dealer;
    s_pair (&router, &dealer, "inproc://test-kd-msg-sockets");

    //  HELLO from the dealer; the router sees its routing id.
    kd_msg_t *hello = kd_msg_new (KD_MSG_HELLO);
    kd_msg_set_str (hello, KD_F_ROLE, "worker");
    kd_msg_set_str (hello, KD_F_NAME, "w-0");
    cr_assert_eq (kd_msg_send (&hello, dealer), 0);
    cr_expect_null (hello);

    kd_msg_t *msg = NULL;
    zframe_t *routing = NULL;
    kd_msg_err_t err;
    cr_assert_eq (kd_msg_recv (router, &msg, &routing, &err), 0, "%s", err.reason);
    cr_expect_null (routing);
    cr_expect_eq (kd_msg_type (msg), KD_MSG_HELLO);
    cr_expect_str_eq (kd_msg_str (msg, KD_F_NAME), "w-0");
    zframe_t *peer = zframe_dup (kd_msg_routing_id (msg));
    cr_assert_not_null (peer);
    kd_msg_destroy (&msg);

    //  WELCOME back through the routing id.
    kd_msg_t *welcome = kd_msg_new (KD_MSG_WELCOME);
    kd_msg_set_routing_id (welcome, peer);
    kd_msg_set_uint (welcome, KD_F_RANK, 3);
    kd_msg_set_str (welcome, KD_F_ROLE, "worker");
    kd_msg_set_float (welcome, KD_F_LR, 0.05);
    cr_assert_eq (kd_msg_send (&welcome, router), 0);
    cr_assert_eq (kd_msg_recv (dealer, &msg, &routing, &err), 0, "%s", err.reason);
    cr_expect_eq (kd_msg_type (msg), KD_MSG_WELCOME);
    cr_expect_null (kd_msg_routing_id (msg), "no routing id on a DEALER");
    cr_expect_eq (kd_msg_uint (msg, KD_F_RANK), 3);
    cr_expect_eq (kd_msg_float (msg, KD_F_LR), 0.05);
    kd_msg_destroy (&msg);

    //  A PUSH with data, through the raw libzmq handles this time.
    kd_msg_t *push = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (push, KD_F_RANK, 3);
    kd_msg_set_uint (push, KD_F_CLOCK, 1);
    kd_msg_set_uint (push, KD_F_BASE, 0);
    kd_msg_set_uint (push, KD_F_LO, 100);
    zframe_t *data = s_data_frame ();
    kd_msg_set_data (push, &data);
    cr_assert_eq (kd_msg_send (&push, zsock_resolve (dealer)), 0);
    cr_assert_eq (kd_msg_recv (zsock_resolve (router), &msg, &routing, &err), 0,
                  "%s", err.reason);
    cr_expect (zframe_eq (kd_msg_routing_id (msg), peer));
    size_t n = 0;
    const float *values = kd_msg_data_floats (msg, &n);
    cr_assert_eq (n, FLOATS);
    for (size_t i = 0; i < FLOATS; i++)
        cr_expect_eq (values [i], s_floats [i]);
    cr_expect_eq ((uintptr_t) values % _Alignof (float), 0);
    kd_msg_destroy (&msg);

    //  Garbage: the router gets -2 and the routing id, and answers ERROR.
    zmsg_t *junk = zmsg_new ();
    zmsg_addstr (junk, "not msgpack at all");
    cr_assert_eq (zmsg_send (&junk, dealer), 0);
    cr_expect_eq (kd_msg_recv (router, &msg, &routing, &err), -2);
    cr_expect_null (msg);
    cr_expect_eq (err.code, KD_ERR_MALFORMED);
    cr_assert_not_null (routing);
    cr_expect (zframe_eq (routing, peer));
    kd_msg_t *reply = kd_msg_new_error (routing, err.code, err.reason);
    zframe_destroy (&routing);
    cr_assert_eq (kd_msg_send (&reply, router), 0);
    cr_assert_eq (kd_msg_recv (dealer, &msg, NULL, &err), 0, "%s", err.reason);
    cr_expect_eq (kd_msg_type (msg), KD_MSG_ERROR);
    cr_expect_eq (kd_msg_uint (msg, KD_F_CODE), KD_ERR_MALFORMED);
    cr_expect_str_eq (kd_msg_str (msg, KD_F_REASON), "header is not well-formed MessagePack");
    kd_msg_destroy (&msg);

    //  Many frames: refused, and the router keeps serving.
    junk = zmsg_new ();
    for (int i = 0; i < 1000; i++)
        zmsg_addstr (junk, "");
    cr_assert_eq (zmsg_send (&junk, dealer), 0);
    cr_expect_eq (kd_msg_recv (router, &msg, &routing, &err), -2);
    cr_expect_eq (err.code, KD_ERR_MALFORMED);
    cr_expect (strstr (err.reason, "frames"), "%s", err.reason);
    cr_expect (zframe_eq (routing, peer));
    zframe_destroy (&routing);

    kd_msg_t *hb = kd_msg_new (KD_MSG_HEARTBEAT);
    cr_assert_eq (kd_msg_send (&hb, dealer), 0);
    cr_assert_eq (kd_msg_recv (router, &msg, &routing, &err), 0, "%s", err.reason);
    cr_expect_eq (kd_msg_type (msg), KD_MSG_HEARTBEAT);
    kd_msg_destroy (&msg);

    zframe_destroy (&peer);
    zsock_destroy (&dealer);
    zsock_destroy (&router);
}

Test (kd_msg, recv_without_waiting_reads_what_is_queued_and_says_when_none_is)
{
    zsock_t *router, *dealer;
    s_pair (&router, &dealer, "inproc://test-kd-msg-nowait");
    kd_msg_t *msg = NULL;
    zframe_t *routing = NULL;
    kd_msg_err_t err;
    kd_msg_source_t src;
    //  Nothing queued: 1 at once, nothing read, on both kinds of socket.
    cr_expect_eq (kd_msg_recv_from_nowait (router, &msg, &routing, &err, &src), 1);
    cr_expect_null (msg);
    cr_expect_null (routing);
    cr_expect_eq (kd_msg_recv_from_nowait (dealer, &msg, NULL, &err, NULL), 1);
    //  Three queued, one of them garbage: read in order, the garbage as -2
    //  with its routing id, then 1 again.
    for (uint64_t clock = 0; clock < 2; clock++) {
        kd_msg_t *push = kd_msg_new (KD_MSG_PUSH);
        kd_msg_set_uint (push, KD_F_RANK, 1);
        kd_msg_set_uint (push, KD_F_CLOCK, clock);
        kd_msg_set_uint (push, KD_F_BASE, 0);
        kd_msg_set_uint (push, KD_F_LO, 0);
        zframe_t *data = s_data_frame ();
        kd_msg_set_data (push, &data);
        cr_assert_eq (kd_msg_send (&push, dealer), 0);
        if (clock == 0) {
            zmsg_t *junk = zmsg_new ();
            zmsg_addstr (junk, "not msgpack");
            cr_assert_eq (zmsg_send (&junk, dealer), 0);
        }
    }
    //  inproc delivers asynchronously: wait until the first is there.
    zpoller_t *poller = zpoller_new (router, NULL);
    cr_assert_eq (zpoller_wait (poller, 2000), router);
    zpoller_destroy (&poller);
    zclock_sleep (50);
    cr_assert_eq (kd_msg_recv_from_nowait (router, &msg, &routing, &err, &src), 0, "%s", err.reason);
    cr_expect_eq (kd_msg_uint (msg, KD_F_CLOCK), 0);
    size_t n = 0;
    cr_expect_not_null (kd_msg_data_floats (msg, &n));
    cr_expect_eq (n, FLOATS);
    kd_msg_destroy (&msg);
    cr_expect_eq (kd_msg_recv_from_nowait (router, &msg, &routing, &err, &src), -2);
    cr_expect_eq (err.code, KD_ERR_MALFORMED);
    cr_expect_not_null (routing);
    zframe_destroy (&routing);
    cr_assert_eq (kd_msg_recv_from_nowait (router, &msg, &routing, &err, &src), 0, "%s", err.reason);
    cr_expect_eq (kd_msg_uint (msg, KD_F_CLOCK), 1);
    kd_msg_destroy (&msg);
    cr_expect_eq (kd_msg_recv_from_nowait (router, &msg, &routing, &err, &src), 1);
    cr_expect_null (msg);
    zsock_destroy (&dealer);
    zsock_destroy (&router);
}

Test (kd_msg, socket_send_rules_and_timeout)
{
    zsock_t *router, *dealer;
    s_pair (&router, &dealer, "inproc://test-kd-msg-rules");
    zsock_set_rcvtimeo (router, 50);
    zsock_set_rcvtimeo (dealer, 50);

    //  Nothing pending: -1, nothing read.
    kd_msg_t *msg = (kd_msg_t *) 0x1;
    kd_msg_err_t err;
    cr_expect_eq (kd_msg_recv (dealer, &msg, NULL, &err), -1);
    cr_expect_null (msg);
    cr_expect_eq (kd_msg_recv (router, &msg, NULL, &err), -1);

    //  A ROUTER cannot send without a routing id; the message is destroyed.
    kd_msg_t *hb = kd_msg_new (KD_MSG_HEARTBEAT);
    cr_expect_eq (kd_msg_send (&hb, router), -1);
    cr_expect_null (hb);

    //  An incomplete message is not sent, and is destroyed.
    kd_msg_t *push = kd_msg_new (KD_MSG_PUSH);
    cr_expect_eq (kd_msg_send (&push, dealer), -1);
    cr_expect_null (push);
    cr_expect_eq (kd_msg_recv (router, &msg, NULL, &err), -1);

    //  A routing id on a message sent from a DEALER is not put on the wire,
    //  so a received message can be forwarded as it is.
    hb = kd_msg_new (KD_MSG_HEARTBEAT);
    kd_msg_set_uint (hb, KD_F_RANK, 2);
    zframe_t *stale = zframe_from ("stale");
    kd_msg_set_routing_id (hb, stale);
    zframe_destroy (&stale);
    cr_assert_eq (kd_msg_send (&hb, dealer), 0);
    zsock_set_rcvtimeo (router, RCVTIMEO_MS);
    cr_assert_eq (kd_msg_recv (router, &msg, NULL, &err), 0, "%s", err.reason);
    cr_expect_not (zframe_streq (kd_msg_routing_id (msg), "stale"));
    cr_expect_eq (kd_msg_uint (msg, KD_F_RANK), 2);
    kd_msg_destroy (&msg);

    kd_msg_t *null_msg = NULL;
    cr_expect_eq (kd_msg_send (&null_msg, dealer), -1);

    zsock_destroy (&dealer);
    zsock_destroy (&router);
}

//  --------------------------------------------------------------------------
//  Borrowed data frames (zero-copy send)

//  Free callback for borrowed data: counts calls.  libzmq may call it from
//  its I/O thread, hence the atomic.
static void
s_count_free (void *data, void *hint)
{
    (void) data;
    __atomic_add_fetch ((int *) hint, 1, __ATOMIC_SEQ_CST);
}

Test (kd_msg, borrowed_data_is_sent_and_let_go_once)
{
    zsock_t *router, *dealer;
    s_pair (&router, &dealer, "inproc://test-kd-msg-borrowed");
    float values [1024];
    for (size_t i = 0; i < 1024; i++)
        values [i] = (float) i * 0.5f;
    int freed = 0;

    //  DEALER -> ROUTER: a PUSH over our own array.
    kd_msg_t *push = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (push, KD_F_RANK, 1);
    kd_msg_set_uint (push, KD_F_CLOCK, 2);
    kd_msg_set_uint (push, KD_F_BASE, 0);
    kd_msg_set_uint (push, KD_F_LO, 0);
    kd_msg_set_data_ref (push, values, sizeof values, s_count_free, &freed);
    size_t count = 0;
    cr_expect_eq (kd_msg_data_floats (push, &count), values, "borrowed, not copied");
    cr_expect_eq (count, 1024);
    cr_expect_eq (kd_msg_uint (push, KD_F_COUNT), 1024);
    cr_assert_eq (kd_msg_send (&push, dealer), 0);
    kd_msg_t *msg = NULL;
    kd_msg_err_t err;
    cr_assert_eq (kd_msg_recv (router, &msg, NULL, &err), 0, "%s", err.reason);
    cr_expect_eq (kd_msg_type (msg), KD_MSG_PUSH);
    const float *got = kd_msg_data_floats (msg, &count);
    cr_assert_eq (count, 1024);
    cr_expect_eq (memcmp (got, values, sizeof values), 0);

    //  ROUTER -> DEALER: a PULL_OK routed back, also borrowed.
    kd_msg_t *reply = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_routing_id (reply, kd_msg_routing_id (msg));
    kd_msg_set_uint (reply, KD_F_VERSION, 3);
    kd_msg_set_uint (reply, KD_F_LO, 0);
    kd_msg_set_data_ref (reply, values, 16, s_count_free, &freed);
    cr_assert_eq (kd_msg_send (&reply, router), 0);
    kd_msg_destroy (&msg);
    cr_assert_eq (kd_msg_recv (dealer, &msg, NULL, &err), 0, "%s", err.reason);
    cr_expect_eq (kd_msg_type (msg), KD_MSG_PULL_OK);
    got = kd_msg_data_floats (msg, &count);
    cr_expect_eq (count, 4);
    cr_expect_eq (memcmp (got, values, 16), 0);
    kd_msg_destroy (&msg);
    //  Over inproc the receiver held the same bytes, so both callbacks
    //  have run once the received messages are gone.
    for (int i = 0; i < 200 && __atomic_load_n (&freed, __ATOMIC_SEQ_CST) < 2; i++)
        zclock_sleep (5);
    cr_expect_eq (__atomic_load_n (&freed, __ATOMIC_SEQ_CST), 2);

    //  Destroyed unsent, replaced, taken or encoded: let go exactly once,
    //  and the copies carry the same bytes.
    kd_msg_t *m = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_data_ref (m, values, 8, s_count_free, &freed);
    kd_msg_destroy (&m);
    cr_expect_eq (freed, 3);
    m = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_uint (m, KD_F_VERSION, 1);
    kd_msg_set_uint (m, KD_F_LO, 0);
    kd_msg_set_data_ref (m, values, 8, s_count_free, &freed);
    zmsg_t *zmsg = NULL;
    cr_assert_eq (kd_msg_encode (m, &zmsg), 0);
    cr_expect_eq (zmsg_size (zmsg), 2);
    cr_expect_eq (memcmp (zframe_data (zmsg_last (zmsg)), values, 8), 0);
    zmsg_destroy (&zmsg);
    cr_expect_eq (freed, 3, "encode copies and keeps the reference");
    kd_msg_set_data_ref (m, values, 12, s_count_free, &freed);
    cr_expect_eq (freed, 4, "replacing lets the first go");
    zframe_t *taken = kd_msg_take_data (m);
    cr_expect_eq (freed, 5, "taking copies and lets go");
    cr_assert_not_null (taken);
    cr_expect_eq (zframe_size (taken), 12);
    zframe_destroy (&taken);
    kd_msg_destroy (&m);
    cr_expect_eq (freed, 5);

    //  Without a free function nothing is called back.
    m = kd_msg_new (KD_MSG_PULL_OK);
    kd_msg_set_data_ref (m, values, 8, NULL, NULL);
    kd_msg_destroy (&m);
    zsock_destroy (&dealer);
    zsock_destroy (&router);
}

//  16-bit values on the wire: count is in values of the dtype, the decoder
//  checks the frame against it, and the values come back as float32.
Test (kd_msg, dtype_frames_round_trip_and_are_checked)
{
    const float values [5] = { 1.0f, -2.5f, 0.1f, 65504.0f, 0.0f };
    const uint64_t dtypes [] = { KD_DTYPE_F16, KD_DTYPE_BF16 };
    for (int d = 0; d < 2; d++) {
        kd_msg_t *msg = kd_msg_new (KD_MSG_PULL_OK);
        kd_msg_set_uint (msg, KD_F_VERSION, 3);
        kd_msg_set_uint (msg, KD_F_LO, 0);
        kd_msg_set_uint (msg, KD_F_DTYPE, dtypes [d]);
        zframe_t *data = zframe_new (NULL, 5 * 2);
        uint16_t *h = (uint16_t *) zframe_data (data);
        for (int i = 0; i < 5; i++) {
            float one = values [i];
            uint16_t bits;
            //  Exact in fp16 but 0.1; within bf16's step for all.
            if (dtypes [d] == KD_DTYPE_F16)
                kd_half_from_float (&bits, &one, 1);
            else
                kd_bf16_from_float (&bits, &one, 1);
            h [i] = bits;
        }
        kd_msg_set_data (msg, &data);
        cr_expect_eq (kd_msg_uint (msg, KD_F_COUNT), 5, "count is in values, not bytes / 4");
        size_t n = 99;
        cr_expect_null (kd_msg_data_floats (msg, &n), "16-bit values read as floats");
        cr_expect_eq (n, 0);
        zmsg_t *wire = NULL;
        cr_assert_eq (kd_msg_encode (msg, &wire), 0);
        kd_msg_t *back = NULL;
        kd_msg_err_t err;
        cr_assert_eq (kd_msg_decode (&wire, false, &back, NULL, &err), 0, "%s", err.reason);
        float out [5];
        cr_assert_eq (kd_msg_data_to_floats (back, out, 5), 0);
        cr_expect_eq (kd_msg_data_to_floats (back, out, 4), -1, "a wrong count was accepted");
        for (int i = 0; i < 5; i++)
            cr_expect (fabsf (out [i] - values [i]) <= fabsf (values [i]) * 0.004f, "%s value %d: %g",
                       kd_dtype_name (dtypes [d]), i, out [i]);
        kd_msg_destroy (&back);
        kd_msg_destroy (&msg);
    }
    //  A frame whose size disagrees with count x 2 bytes, and an unknown
    //  dtype, are malformed.
    struct {
        uint64_t dtype, count;
        size_t bytes;
        const char *why;
    } bad [] = {
        { KD_DTYPE_F16, 5, 12, "count" }, { KD_DTYPE_F16, 5, 11, "multiple" },
        { 7, 5, 10, "unknown dtype" }, { KD_DTYPE_F32, 5, 10, "multiple" },
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad [0]; b++) {
        msgpack_sbuffer sb;
        msgpack_sbuffer_init (&sb);
        msgpack_packer pk;
        msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_map (&pk, 6);
        const char *keys [] = { "v", "t", "version", "lo", "count", "dtype" };
        for (int k = 0; k < 6; k++) {
            msgpack_pack_str (&pk, strlen (keys [k]));
            msgpack_pack_str_body (&pk, keys [k], strlen (keys [k]));
            if (k == 1) {
                msgpack_pack_str (&pk, 7);
                msgpack_pack_str_body (&pk, "PULL_OK", 7);
            }
            else
                msgpack_pack_uint64 (&pk, k == 0 ? 1 : k == 4 ? bad [b].count : k == 5 ? bad [b].dtype : 0);
        }
        zmsg_t *wire = zmsg_new ();
        zmsg_addmem (wire, sb.data, sb.size);
        zmsg_addmem (wire, NULL, bad [b].bytes);
        msgpack_sbuffer_destroy (&sb);
        kd_msg_t *out = NULL;
        kd_msg_err_t err;
        cr_expect_eq (kd_msg_decode (&wire, false, &out, NULL, &err), -2, "case %zu accepted", b);
        cr_expect (strstr (err.reason, bad [b].why), "case %zu: %s", b, err.reason);
        zmsg_destroy (&wire);
    }
}

//  A message of one header frame, packed by hand: version 1, type, and n
//  uint fields, whatever the encoder would refuse.
static zmsg_t *
s_uint_header (const char *type, const char *const *names, const uint64_t *vals, int n)
{
    msgpack_sbuffer sb;
    msgpack_sbuffer_init (&sb);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map (&pk, 2 + n);
    msgpack_pack_str (&pk, 1);
    msgpack_pack_str_body (&pk, "v", 1);
    msgpack_pack_uint64 (&pk, 1);
    msgpack_pack_str (&pk, 1);
    msgpack_pack_str_body (&pk, "t", 1);
    msgpack_pack_str (&pk, strlen (type));
    msgpack_pack_str_body (&pk, type, strlen (type));
    for (int f = 0; f < n; f++) {
        msgpack_pack_str (&pk, strlen (names [f]));
        msgpack_pack_str_body (&pk, names [f], strlen (names [f]));
        msgpack_pack_uint64 (&pk, vals [f]);
    }
    zmsg_t *wire = zmsg_new ();
    zmsg_addmem (wire, sb.data, sb.size);
    msgpack_sbuffer_destroy (&sb);
    return wire;
}

//  Keyed (sparse) PUSH and PULL: the keys frame comes last, and is checked.
static kd_msg_t *
s_keyed_push (const uint64_t *keys, size_t n, size_t dim)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (msg, KD_F_RANK, 1);
    kd_msg_set_uint (msg, KD_F_CLOCK, 2);
    kd_msg_set_uint (msg, KD_F_BASE, 0);
    kd_msg_set_uint (msg, KD_F_LO, 0);
    zframe_t *data = zframe_new (NULL, n * dim * sizeof (float));
    for (size_t i = 0; i < n * dim; i++)
        ((float *) zframe_data (data)) [i] = (float) i;
    kd_msg_set_data (msg, &data);
    kd_msg_set_keys (msg, keys, n);
    return msg;
}

Test (kd_msg, keyed_frames_round_trip_and_are_checked)
{
    const uint64_t keys [4] = { 3, 17, 1000000007ull, 99999999999ull };
    kd_msg_t *msg = s_keyed_push (keys, 4, 2);
    zmsg_t *wire = NULL;
    cr_assert_eq (kd_msg_encode (msg, &wire), 0);
    cr_expect_eq (zmsg_size (wire), 3, "header, values, keys");
    kd_msg_t *back = NULL;
    kd_msg_err_t err;
    cr_assert_eq (kd_msg_decode (&wire, false, &back, NULL, &err), 0, "%s", err.reason);
    size_t n = 0, count = 0;
    const uint64_t *k = kd_msg_keys (back, &n);
    cr_assert_eq (n, 4);
    cr_expect_eq (memcmp (k, keys, sizeof keys), 0);
    cr_expect_eq ((uintptr_t) k % 8, 0);
    const float *v = kd_msg_data_floats (back, &count);
    cr_assert_eq (count, 8);
    cr_expect_eq (v [7], 7.0f);
    kd_msg_destroy (&back);

    //  A keyed PULL: header and keys, no values.
    kd_msg_t *pull = kd_msg_new (KD_MSG_PULL);
    kd_msg_set_uint (pull, KD_F_VERSION, 5);
    kd_msg_set_keys (pull, keys, 4);
    cr_assert_eq (kd_msg_encode (pull, &wire), 0);
    cr_expect_eq (zmsg_size (wire), 2);
    cr_assert_eq (kd_msg_decode (&wire, false, &back, NULL, &err), 0, "%s", err.reason);
    cr_expect_eq (kd_msg_uint (back, KD_F_KEYS), 4);
    cr_expect_not_null (kd_msg_keys (back, &n));
    cr_expect_null (kd_msg_data (back));
    kd_msg_destroy (&back);
    kd_msg_destroy (&pull);

    //  No keys at all is a valid (empty) request.
    kd_msg_t *none = s_keyed_push (keys, 0, 2);
    cr_assert_eq (kd_msg_encode (none, &wire), 0);
    cr_assert_eq (kd_msg_decode (&wire, false, &back, NULL, &err), 0, "%s", err.reason);
    kd_msg_destroy (&back);
    kd_msg_destroy (&none);

    //  Malformed keys frames, each built from the good message's frames.
    struct {
        const char *why;
        int code;
    } cases [] = {
        { "not strictly increasing", KD_ERR_MALFORMED },    //  0: swapped keys
        { "not strictly increasing", KD_ERR_MALFORMED },    //  1: a duplicate
        { "multiple of 8", KD_ERR_MALFORMED },              //  2: ragged frame
        { "disagrees", KD_ERR_MALFORMED },                  //  3: count off by one
        { "needs 2", KD_ERR_MALFORMED },                    //  4: frame missing
        { "whole number", KD_ERR_MALFORMED },               //  5: 9 values, 4 keys
    };
    for (int c = 0; c < 6; c++) {
        uint64_t bad [4];
        memcpy (bad, keys, sizeof bad);
        kd_msg_t *m = s_keyed_push (keys, 4, 2);
        kd_msg_set_uint (m, KD_F_KEY_ENC, KD_KEY_ENC_U64);     //  plain frames below
        cr_assert_eq (kd_msg_encode (m, &wire), 0);
        kd_msg_destroy (&m);
        zframe_t *header = zmsg_pop (wire), *data = zmsg_pop (wire), *kf = zmsg_pop (wire);
        zmsg_destroy (&wire);
        wire = zmsg_new ();
        zmsg_append (wire, &header);
        if (c == 5) {
            //  Re-encode with count 9 and a frame of 9 floats.
            zframe_destroy (&data);
            zmsg_destroy (&wire);
            const char *names [] = { "rank", "clock", "base", "lo", "count", "keys" };
            const uint64_t vals [] = { 1, 2, 0, 0, 9, 4 };
            wire = s_uint_header ("PUSH", names, vals, 6);
            data = zframe_new (NULL, 9 * sizeof (float));
        }
        zmsg_append (wire, &data);
        if (c == 0) {
            bad [1] = keys [2];
            bad [2] = keys [1];
        }
        if (c == 1)
            bad [2] = bad [1];
        if (c == 2)
            zmsg_addmem (wire, bad, sizeof bad - 3);
        else
        if (c == 3)
            zmsg_addmem (wire, bad, sizeof bad - 8);
        else
        if (c != 4)
            zmsg_addmem (wire, bad, sizeof bad);
        zframe_destroy (&kf);
        s_expect_fail (&wire, false, cases [c].code, &err);
        cr_expect (strstr (err.reason, cases [c].why), "case %d: %s", c, err.reason);
    }

    //  A keys frame on a type that takes none is one frame too many.
    kd_msg_t *ok = kd_msg_new (KD_MSG_PUSH_OK);
    kd_msg_set_uint (ok, KD_F_CLOCK, 1);
    kd_msg_set_uint (ok, KD_F_KEYS, 1);
    cr_assert_eq (kd_msg_encode (ok, &wire), 0);
    zmsg_addmem (wire, keys, 8);
    s_expect_fail (&wire, false, KD_ERR_MALFORMED, &err);
    kd_msg_destroy (&ok);
    kd_msg_destroy (&msg);
}

//  Keys go on the wire plain by default, or as varint deltas (key_enc 1):
//  the decoder gives back the same uint64s either way, over the whole
//  64-bit range, and deltas take fewer bytes when keys are dense.
Test (kd_msg, delta_keys_round_trip_in_fewer_bytes)
{
    const uint64_t wide [5] = { 0, 1, 128, 1ull << 62, UINT64_MAX };
    uint64_t dense [1000];
    for (size_t i = 0; i < 1000; i++)
        dense [i] = 5000000 + i * 37;
    struct { const uint64_t *keys; size_t n; } sets [] = { { wide, 5 }, { dense, 1000 } };
    for (size_t c = 0; c < 2; c++)
        for (uint64_t enc = 0; enc < 2; enc++) {
            kd_msg_t *pull = kd_msg_new (KD_MSG_PULL);
            kd_msg_set_uint (pull, KD_F_VERSION, 1);
            kd_msg_set_keys (pull, sets [c].keys, sets [c].n);
            cr_expect_eq (kd_msg_uint (pull, KD_F_KEY_ENC), KD_KEY_ENC_U64, "plain by default");
            kd_msg_set_uint (pull, KD_F_KEY_ENC, enc);
            zmsg_t *wire = NULL;
            cr_assert_eq (kd_msg_encode (pull, &wire), 0);
            size_t bytes = zframe_size (zmsg_last (wire));
            if (enc == KD_KEY_ENC_U64)
                cr_expect_eq (bytes, sets [c].n * 8);
            else
            if (c == 1)
                //  A delta of 37 is one byte; the first key, 23 bits, four.
                cr_expect_eq (bytes, 4 + 999, "%zu bytes for 1000 dense keys", bytes);
            kd_msg_t *back = NULL;
            kd_msg_err_t err;
            cr_assert_eq (kd_msg_decode (&wire, false, &back, NULL, &err), 0, "%s", err.reason);
            size_t n = 0;
            const uint64_t *k = kd_msg_keys (back, &n);
            cr_assert_eq (n, sets [c].n);
            cr_expect_eq (memcmp (k, sets [c].keys, n * 8), 0, "set %zu, key_enc %llu", c,
                          (unsigned long long) enc);
            cr_expect_eq ((uintptr_t) k % 8, 0);
            cr_expect_eq (kd_msg_keys_wire_bytes (back), bytes, "what the shard counts as bytes in");
            //  The sender's message still reads as plain keys.
            cr_expect_eq (memcmp (kd_msg_keys (pull, &n), sets [c].keys, n * 8), 0);
            kd_msg_destroy (&back);
            kd_msg_destroy (&pull);
        }
}

//  Every malformed delta frame is ERROR 400 (or 413) with its reason, and
//  nothing is allocated for a count the frame cannot hold.
Test (kd_msg, malformed_delta_keys_are_refused)
{
    static const uint8_t overlong [11] = { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01 };
    static const uint8_t past64 [10] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03 };
    static const uint8_t wrap [11] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01 };
    struct {
        const char *why;
        const uint8_t *frame;
        size_t bytes;
        uint64_t keys, enc;
        int code;
    } cases [] = {
        { "disagrees", (const uint8_t []) { 5, 0x81 }, 2, 2, 1, KD_ERR_MALFORMED },   //  one varint ends
        { "after its", (const uint8_t []) { 5, 0x81 }, 2, 1, 1, KD_ERR_MALFORMED },   //  a varint left open
        { "longer than 64 bits", overlong, 11, 1, 1, KD_ERR_MALFORMED },
        { "longer than 64 bits", past64, 10, 1, 1, KD_ERR_MALFORMED },
        { "past 2^64 - 1", wrap, 11, 2, 1, KD_ERR_MALFORMED },
        { "not strictly increasing", (const uint8_t []) { 5, 0 }, 2, 2, 1, KD_ERR_MALFORMED },
        { "disagrees", (const uint8_t []) { 5, 1, 1 }, 3, 2, 1, KD_ERR_MALFORMED },
        { "disagrees", (const uint8_t []) { 5, 1 }, 2, 3, 1, KD_ERR_MALFORMED },
        { "at most", (const uint8_t []) { 5 }, 1, (uint64_t) KD_MSG_MAX_KEYS + 1, 1, KD_ERR_TOO_LARGE },
        { "unknown key_enc 2", (const uint8_t []) { 5 }, 1, 1, 2, KD_ERR_MALFORMED },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases [0]; c++) {
        //  The encoder refuses a "keys" without its frame: the header is
        //  packed by hand, and the frame appended.
        const char *names [] = { "version", "keys", "key_enc" };
        const uint64_t vals [] = { 1, cases [c].keys, cases [c].enc };
        zmsg_t *wire = s_uint_header ("PULL", names, vals, 3);
        zmsg_addmem (wire, cases [c].frame, cases [c].bytes);
        kd_msg_err_t err;
        s_expect_fail (&wire, false, cases [c].code, &err);
        cr_expect (strstr (err.reason, cases [c].why), "case %zu: %s", c, err.reason);
    }
}

//  A PUSH or PULL_OK whose values are in shared memory has no data frame,
//  and one that has both is malformed; a keyed request never uses it.
Test (kd_msg, shared_memory_values_replace_the_data_frame)
{
    kd_msg_type_t types [] = { KD_MSG_PUSH, KD_MSG_PULL_OK };
    for (size_t t = 0; t < 2; t++) {
        const s_schema_t *s = s_schema_of (types [t]);
        kd_msg_t *msg = kd_msg_new (types [t]);
        for (int r = 0; s->required [r] != END; r++)
            kd_msg_set_uint (msg, s->required [r], 7);
        kd_msg_set_uint (msg, KD_F_SHM, 1);
        kd_msg_set_uint (msg, KD_F_OFFSET, 4096);
        kd_msg_set_uint (msg, KD_F_SEQ, 2);
        zmsg_t *zmsg = NULL;
        cr_assert_eq (kd_msg_encode (msg, &zmsg), 0, "%s in shared memory", kd_msg_type_name (types [t]));
        cr_expect_eq (zmsg_size (zmsg), 1, "no data frame");
        kd_msg_t *out = NULL;
        kd_msg_err_t err;
        cr_assert_eq (kd_msg_decode (&zmsg, false, &out, NULL, &err), 0, "%s", err.reason);
        cr_expect_eq (kd_msg_uint (out, KD_F_OFFSET), 4096);
        cr_expect_eq (kd_msg_uint (out, KD_F_COUNT), 7);
        cr_expect_null (kd_msg_data (out));
        kd_msg_destroy (&out);
        //  With a data frame too: refused both ways.
        zframe_t *data = s_data_frame ();
        kd_msg_set_data (msg, &data);
        kd_msg_set_uint (msg, KD_F_SHM, 1);
        cr_expect_eq (kd_msg_encode (msg, &zmsg), -1);
        kd_msg_set_uint (msg, KD_F_SHM, 0);
        cr_assert_eq (kd_msg_encode (msg, &zmsg), 0);
        zmsg_t *bad = s_edit (&zmsg, "shm", S_EDIT_SET_ONE);
        const char *reason = s_expect_fail (&bad, false, KD_ERR_MALFORMED, &err);
        cr_expect (strstr (reason, "shared memory"), "%s", reason);
        kd_msg_destroy (&msg);
    }
    //  Without "shm" the data frame stays required.
    kd_msg_t *msg = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (msg, KD_F_RANK, 1);
    kd_msg_set_uint (msg, KD_F_CLOCK, 1);
    kd_msg_set_uint (msg, KD_F_BASE, 1);
    kd_msg_set_uint (msg, KD_F_LO, 1);
    kd_msg_set_uint (msg, KD_F_COUNT, 1);
    zmsg_t *zmsg = NULL;
    cr_expect_eq (kd_msg_encode (msg, &zmsg), -1);
    kd_msg_destroy (&msg);
}
