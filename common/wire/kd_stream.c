/*  kd_stream: the monitor's live stream (see kd_stream.h).
*/
#include "kd_stream.h"
#include "kd_msg.h"
#include <math.h>
#include <msgpack.h>

typedef enum { S_UINT, S_FLOAT, S_STR, S_UINTS } s_kind_t;

_Static_assert (KD_S_FIELD_COUNT <= 64, "presence is a 64-bit mask");

#define S_T(t) (1u << (t))

//  Every field: its key, its kind, and the topics that carry it.
static const struct {
    const char *name;
    s_kind_t kind;
    unsigned topics;
} s_fields [KD_S_FIELD_COUNT] = {
    [KD_S_T_MS]          = { "t_ms",          S_UINT,  S_T (KD_ST_STATS) | S_T (KD_ST_EVENT) | S_T (KD_ST_EVAL) },
    [KD_S_ELAPSED_S]     = { "elapsed_s",     S_FLOAT, S_T (KD_ST_STATS) },
    [KD_S_VERSION]       = { "version",       S_UINT,  S_T (KD_ST_STATS) | S_T (KD_ST_GROUPS) | S_T (KD_ST_EVENT)
                                                     | S_T (KD_ST_SHARD) | S_T (KD_ST_EVAL) },
    [KD_S_EPOCH]         = { "epoch",         S_FLOAT, S_T (KD_ST_STATS) },
    [KD_S_SAMPLES]       = { "samples",       S_UINT,  S_T (KD_ST_STATS) | S_T (KD_ST_WORKER) },
    [KD_S_SAMPLES_PER_S] = { "samples_per_s", S_FLOAT, S_T (KD_ST_STATS) | S_T (KD_ST_WORKER) },
    [KD_S_TRAIN_LOSS]    = { "train_loss",    S_FLOAT, S_T (KD_ST_STATS) },
    [KD_S_WORKERS]       = { "workers",       S_UINT,  S_T (KD_ST_STATS) },
    [KD_S_CONSISTENCY]   = { "consistency",   S_STR,   S_T (KD_ST_STATS) },
    [KD_S_MODEL]         = { "model",         S_STR,   S_T (KD_ST_STATS) },
    [KD_S_PHASES]        = { "phases",        S_UINT,  S_T (KD_ST_STATS) },
    [KD_S_DROPPED]       = { "dropped",       S_UINT,  S_T (KD_ST_STATS) | S_T (KD_ST_WORKER) },
    [KD_S_REGROUPS]      = { "regroups",      S_UINT,  S_T (KD_ST_STATS) | S_T (KD_ST_GROUPS) },
    [KD_S_WAIT_FRACTION] = { "wait_fraction", S_FLOAT, S_T (KD_ST_STATS) },
    [KD_S_STALENESS_P50] = { "staleness_p50", S_FLOAT, S_T (KD_ST_STATS) },
    [KD_S_STALENESS_P99] = { "staleness_p99", S_FLOAT, S_T (KD_ST_STATS) },
    [KD_S_SHARDS]        = { "shards",        S_UINT,  S_T (KD_ST_STATS) },
    [KD_S_TEST_ACCURACY] = { "test_accuracy", S_FLOAT, S_T (KD_ST_STATS) },
    [KD_S_TEST_VERSION]  = { "test_version",  S_UINT,  S_T (KD_ST_STATS) },
    [KD_S_TEST_AUC]      = { "test_auc",      S_FLOAT, S_T (KD_ST_STATS) },
    [KD_S_RANK]          = { "rank",          S_UINT,  S_T (KD_ST_WORKER) | S_T (KD_ST_EVENT) | S_T (KD_ST_SHARD) },
    [KD_S_CLOCK]         = { "clock",         S_UINT,  S_T (KD_ST_WORKER) },
    [KD_S_LOSS]          = { "loss",          S_FLOAT, S_T (KD_ST_WORKER) | S_T (KD_ST_EVAL) },
    [KD_S_COMPUTE_MS]    = { "compute_ms",    S_FLOAT, S_T (KD_ST_WORKER) },
    [KD_S_PUSH_MS]       = { "push_ms",       S_FLOAT, S_T (KD_ST_WORKER) },
    [KD_S_WAIT_MS]       = { "wait_ms",       S_FLOAT, S_T (KD_ST_WORKER) },
    [KD_S_PULL_MS]       = { "pull_ms",       S_FLOAT, S_T (KD_ST_WORKER) },
    [KD_S_ITER_MS]       = { "iter_ms",       S_FLOAT, S_T (KD_ST_WORKER) },
    [KD_S_STALENESS]     = { "staleness",     S_UINT,  S_T (KD_ST_WORKER) },
    [KD_S_GROUP]         = { "group",         S_UINT,  S_T (KD_ST_WORKER) },
    [KD_S_AGE_MS]        = { "age_ms",        S_UINT,  S_T (KD_ST_WORKER) | S_T (KD_ST_SHARD) },
    [KD_S_COUNT]         = { "count",         S_UINT,  S_T (KD_ST_GROUPS) },
    [KD_S_GROUPS]        = { "groups",        S_UINTS, S_T (KD_ST_GROUPS) },
    [KD_S_KIND]          = { "kind",          S_STR,   S_T (KD_ST_EVENT) },
    [KD_S_DETAIL]        = { "detail",        S_STR,   S_T (KD_ST_EVENT) },
    [KD_S_NAME]          = { "name",          S_STR,   S_T (KD_ST_EVENT) | S_T (KD_ST_EVAL) },
    [KD_S_ROLE]          = { "role",          S_STR,   S_T (KD_ST_EVENT) },
    [KD_S_PUSHES]        = { "pushes",        S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_PULLS]         = { "pulls",         S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_COMMITS]       = { "commits",       S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_BYTES_IN]      = { "bytes_in",      S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_BYTES_OUT]     = { "bytes_out",     S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_STAGED]        = { "staged",        S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_CHECKPOINTS]   = { "checkpoints",   S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_CHECKPOINT_AGE_S] = { "checkpoint_age_s", S_FLOAT, S_T (KD_ST_SHARD) },
    [KD_S_REFUSED]       = { "refused",       S_UINT,  S_T (KD_ST_WORKER) | S_T (KD_ST_SHARD) },
    [KD_S_CLIPPED]       = { "clipped",       S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_LIMITED]       = { "limited",       S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_DISCONNECTS]   = { "disconnects",   S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_CONNECTIONS]   = { "connections",   S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_PARKED]        = { "parked",        S_UINT,  S_T (KD_ST_SHARD) },
    [KD_S_METRIC]        = { "metric",        S_STR,   S_T (KD_ST_EVAL) },
    [KD_S_VALUE]         = { "value",         S_FLOAT, S_T (KD_ST_EVAL) },
    [KD_S_MODE]          = { "mode",          S_STR,   S_T (KD_ST_STATS) },
};

static const char *s_topics [KD_ST_TOPIC_COUNT] = {
    [KD_ST_STATS] = "stats", [KD_ST_WORKER] = "worker", [KD_ST_GROUPS] = "groups",
    [KD_ST_EVENT] = "event", [KD_ST_SHARD] = "shard", [KD_ST_EVAL] = "eval"
};

typedef struct {
    uint64_t u;                 //  S_UINT
    double f;                   //  S_FLOAT
    char *s;                    //  S_STR, owned
    uint64_t *us;               //  S_UINTS, owned
    size_t n;                   //  entries in us
} s_value_t;

struct _kd_stream_t {
    kd_stream_topic_t topic;    //  what the message is
    uint64_t present;           //  bit per field set
    s_value_t values [KD_S_FIELD_COUNT];    //  by field
};

kd_stream_t *
kd_stream_new (kd_stream_topic_t topic)
{
    assert (topic > 0 && topic < KD_ST_TOPIC_COUNT);
    kd_stream_t *self = (kd_stream_t *) zmalloc (sizeof *self);
    self->topic = topic;
    return self;
}

void
kd_stream_destroy (kd_stream_t **self_p)
{
    assert (self_p);
    kd_stream_t *self = *self_p;
    if (!self)
        return;
    for (int f = 0; f < KD_S_FIELD_COUNT; f++) {
        free (self->values [f].s);
        free (self->values [f].us);
    }
    free (self);
    *self_p = NULL;
}

kd_stream_topic_t
kd_stream_topic (kd_stream_t *self)
{
    assert (self);
    return self->topic;
}

const char *
kd_stream_topic_name (kd_stream_topic_t topic)
{
    return topic > 0 && topic < KD_ST_TOPIC_COUNT ? s_topics [topic] : NULL;
}

kd_stream_topic_t
kd_stream_topic_lookup (const char *name, size_t len)
{
    for (int t = 1; name && t < KD_ST_TOPIC_COUNT; t++)
        if (strlen (s_topics [t]) == len && !memcmp (s_topics [t], name, len))
            return (kd_stream_topic_t) t;
    return (kd_stream_topic_t) 0;
}

const char *
kd_stream_field_name (kd_stream_field_t field)
{
    return field >= 0 && field < KD_S_FIELD_COUNT ? s_fields [field].name : NULL;
}

//  The slot of a field about to be set: checks topic and kind, clears it.
static s_value_t *
s_slot (kd_stream_t *self, kd_stream_field_t field, s_kind_t kind)
{
    assert (self && field >= 0 && field < KD_S_FIELD_COUNT);
    assert (s_fields [field].kind == kind);
    assert (s_fields [field].topics & S_T (self->topic));
    s_value_t *v = &self->values [field];
    free (v->s);
    free (v->us);
    memset (v, 0, sizeof *v);
    self->present |= 1ull << field;
    return v;
}

void
kd_stream_set_uint (kd_stream_t *self, kd_stream_field_t field, uint64_t value)
{
    s_slot (self, field, S_UINT)->u = value;
}

void
kd_stream_set_float (kd_stream_t *self, kd_stream_field_t field, double value)
{
    s_slot (self, field, S_FLOAT)->f = value;
}

void
kd_stream_set_str (kd_stream_t *self, kd_stream_field_t field, const char *value)
{
    s_value_t *v = s_slot (self, field, S_STR);
    size_t len = value ? strnlen (value, KD_STREAM_MAX_STRING) : 0;
    v->s = (char *) zmalloc (len + 1);
    if (len)
        memcpy (v->s, value, len);
}

void
kd_stream_set_uints (kd_stream_t *self, kd_stream_field_t field, const uint64_t *values, size_t count)
{
    assert (count <= KD_STREAM_MAX_ARRAY);
    s_value_t *v = s_slot (self, field, S_UINTS);
    v->us = (uint64_t *) zmalloc ((count ? count : 1) * sizeof (uint64_t));
    if (count)
        memcpy (v->us, values, count * sizeof (uint64_t));
    v->n = count;
}

bool
kd_stream_has (kd_stream_t *self, kd_stream_field_t field)
{
    assert (self);
    return field >= 0 && field < KD_S_FIELD_COUNT && (self->present >> field) & 1;
}

double
kd_stream_number (kd_stream_t *self, kd_stream_field_t field, double dflt)
{
    if (!kd_stream_has (self, field))
        return dflt;
    if (s_fields [field].kind == S_UINT)
        return (double) self->values [field].u;
    if (s_fields [field].kind == S_FLOAT)
        return self->values [field].f;
    return dflt;
}

const char *
kd_stream_str (kd_stream_t *self, kd_stream_field_t field)
{
    return kd_stream_has (self, field) && s_fields [field].kind == S_STR ? self->values [field].s : "";
}

const uint64_t *
kd_stream_uints (kd_stream_t *self, kd_stream_field_t field, size_t *count)
{
    *count = 0;
    if (!kd_stream_has (self, field) || s_fields [field].kind != S_UINTS)
        return NULL;
    *count = self->values [field].n;
    return self->values [field].us;
}

int
kd_stream_encode (kd_stream_t *self, zmsg_t **out)
{
    assert (self && out);
    msgpack_sbuffer buf;
    msgpack_sbuffer_init (&buf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &buf, msgpack_sbuffer_write);
    uint32_t n = 0;
    for (int f = 0; f < KD_S_FIELD_COUNT; f++)
        n += (self->present >> f) & 1;
    msgpack_pack_map (&pk, n);
    for (int f = 0; f < KD_S_FIELD_COUNT; f++) {
        if (!((self->present >> f) & 1))
            continue;
        const char *key = s_fields [f].name;
        msgpack_pack_str (&pk, strlen (key));
        msgpack_pack_str_body (&pk, key, strlen (key));
        s_value_t *v = &self->values [f];
        switch (s_fields [f].kind) {
            case S_UINT:  msgpack_pack_uint64 (&pk, v->u); break;
            case S_FLOAT: msgpack_pack_double (&pk, isfinite (v->f) ? v->f : 0); break;
            case S_STR:
                msgpack_pack_str (&pk, strlen (v->s));
                msgpack_pack_str_body (&pk, v->s, strlen (v->s));
                break;
            case S_UINTS:
                msgpack_pack_array (&pk, (uint32_t) v->n);
                for (size_t i = 0; i < v->n; i++)
                    msgpack_pack_uint64 (&pk, v->us [i]);
                break;
        }
    }
    zmsg_t *msg = zmsg_new ();
    zmsg_addstr (msg, s_topics [self->topic]);
    zmsg_addmem (msg, buf.data, buf.size);
    msgpack_sbuffer_destroy (&buf);
    *out = msg;
    return 0;
}

int
kd_stream_send (kd_stream_t **self_p, zsock_t *sock)
{
    assert (self_p);
    int rc = -1;
    zmsg_t *msg = NULL;
    if (*self_p && kd_stream_encode (*self_p, &msg) == 0)
        rc = zmsg_send (&msg, sock);
    zmsg_destroy (&msg);
    kd_stream_destroy (self_p);
    return rc;
}

//  One value into a field of the message being decoded; -2 on a type the
//  field does not take.
static int
s_take (kd_stream_t *self, int f, const msgpack_object *o)
{
    switch (s_fields [f].kind) {
        case S_UINT:
            if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return -2;
            kd_stream_set_uint (self, (kd_stream_field_t) f, o->via.u64);
            return 0;
        case S_FLOAT:
            if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
                kd_stream_set_float (self, (kd_stream_field_t) f, o->via.f64);
            else
            if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                kd_stream_set_float (self, (kd_stream_field_t) f, (double) o->via.u64);
            else
            if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
                kd_stream_set_float (self, (kd_stream_field_t) f, (double) o->via.i64);
            else
                return -2;
            return 0;
        case S_STR: {
            if (o->type != MSGPACK_OBJECT_STR || o->via.str.size > KD_STREAM_MAX_STRING)
                return -2;
            char text [KD_STREAM_MAX_STRING + 1];
            memcpy (text, o->via.str.ptr, o->via.str.size);
            text [o->via.str.size] = 0;
            kd_stream_set_str (self, (kd_stream_field_t) f, text);
            return 0;
        }
        case S_UINTS: {
            if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > KD_STREAM_MAX_ARRAY)
                return -2;
            uint32_t n = o->via.array.size;
            uint64_t *us = (uint64_t *) zmalloc ((n ? n : 1) * sizeof (uint64_t));
            for (uint32_t i = 0; i < n; i++) {
                if (o->via.array.ptr [i].type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
                    free (us);
                    return -2;
                }
                us [i] = o->via.array.ptr [i].via.u64;
            }
            kd_stream_set_uints (self, (kd_stream_field_t) f, us, n);
            free (us);
            return 0;
        }
    }
    return -2;
}

int
kd_stream_decode (const char *topic, size_t topic_len, const uint8_t *body, size_t size,
                  kd_stream_t **out, char *err, size_t err_size)
{
    *out = NULL;
    kd_stream_topic_t t = kd_stream_topic_lookup (topic, topic_len);
    if (!t) {
        snprintf (err, err_size, "unknown topic");
        return -2;
    }
    //  Every length is checked against the bytes that remain before
    //  msgpack-c allocates anything.
    if (!body || size == 0 || size > (1u << 20) || kd_msgpack_validate (body, size, 3) != 0) {
        snprintf (err, err_size, "%s: body is not one well-formed MessagePack object", s_topics [t]);
        return -2;
    }
    msgpack_unpacked up;
    msgpack_unpacked_init (&up);
    int rc = -2;
    kd_stream_t *self = NULL;
    if (msgpack_unpack_next (&up, (const char *) body, size, NULL) != MSGPACK_UNPACK_SUCCESS
    ||  up.data.type != MSGPACK_OBJECT_MAP || up.data.via.map.size > KD_STREAM_MAX_FIELDS) {
        snprintf (err, err_size, "%s: body must be a map of at most %d fields", s_topics [t],
                  KD_STREAM_MAX_FIELDS);
        goto done;
    }
    self = kd_stream_new (t);
    for (uint32_t i = 0; i < up.data.via.map.size; i++) {
        const msgpack_object_kv *kv = &up.data.via.map.ptr [i];
        if (kv->key.type != MSGPACK_OBJECT_STR) {
            snprintf (err, err_size, "%s: a key is not a string", s_topics [t]);
            goto done;
        }
        int f = -1;
        for (int j = 0; j < KD_S_FIELD_COUNT && f < 0; j++)
            if ((s_fields [j].topics & S_T (t)) && strlen (s_fields [j].name) == kv->key.via.str.size
            &&  !memcmp (s_fields [j].name, kv->key.via.str.ptr, kv->key.via.str.size))
                f = j;
        //  A newer producer's field: skipped, not an error.
        if (f < 0)
            continue;
        if (s_take (self, f, &kv->val)) {
            snprintf (err, err_size, "%s: field '%s' has the wrong type or size", s_topics [t],
                      s_fields [f].name);
            goto done;
        }
    }
    *out = self;
    self = NULL;
    rc = 0;
done:
    kd_stream_destroy (&self);
    msgpack_unpacked_destroy (&up);
    return rc;
}

int
kd_stream_recv (zsock_t *sock, kd_stream_t **out, char *err, size_t err_size)
{
    *out = NULL;
    zmsg_t *msg = zmsg_recv (sock);
    if (!msg)
        return -1;
    int rc = -2;
    zframe_t *topic = zmsg_first (msg), *body = zmsg_next (msg);
    if (zmsg_size (msg) != 2 || !topic || !body)
        snprintf (err, err_size, "a stream message has 2 frames, not %zu", zmsg_size (msg));
    else
        rc = kd_stream_decode ((const char *) zframe_data (topic), zframe_size (topic),
                               zframe_data (body), zframe_size (body), out, err, err_size);
    zmsg_destroy (&msg);
    return rc;
}

//  A JSON string literal.
static void
s_json_str (FILE *out, const char *s)
{
    fputc ('"', out);
    for (const unsigned char *p = (const unsigned char *) s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf (out, "\\%c", *p);
        else
        if (*p < 0x20)
            fprintf (out, "\\u%04x", *p);
        else
            fputc (*p, out);
    }
    fputc ('"', out);
}

void
kd_stream_print_json (kd_stream_t *self, FILE *out)
{
    assert (self && out);
    fprintf (out, "{\"topic\":\"%s\"", s_topics [self->topic]);
    for (int f = 0; f < KD_S_FIELD_COUNT; f++) {
        if (!((self->present >> f) & 1))
            continue;
        s_value_t *v = &self->values [f];
        fprintf (out, ",\"%s\":", s_fields [f].name);
        switch (s_fields [f].kind) {
            case S_UINT:  fprintf (out, "%llu", (unsigned long long) v->u); break;
            case S_FLOAT: fprintf (out, "%.10g", isfinite (v->f) ? v->f : 0); break;
            case S_STR:   s_json_str (out, v->s); break;
            case S_UINTS:
                fputc ('[', out);
                for (size_t i = 0; i < v->n; i++)
                    fprintf (out, "%s%llu", i ? "," : "", (unsigned long long) v->us [i]);
                fputc (']', out);
                break;
        }
    }
    fputs ("}\n", out);
}
