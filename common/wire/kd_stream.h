/*  kd_stream: the monitor's live stream, one codec for every producer and
    consumer.

    Each message on the monitor's PUB socket is two frames: a topic string
    and a MessagePack map of named fields.  The topics and their fields are
    declared once, in kd_stream.c's tables:

        stats   t_ms elapsed_s version epoch samples samples_per_s train_loss
                workers consistency model phases dropped regroups
                wait_fraction staleness_p50 staleness_p99 shards
                [test_accuracy test_version [test_auc]]
        worker  rank clock samples samples_per_s loss compute_ms push_ms
                wait_ms pull_ms iter_ms staleness dropped refused group age_ms
        groups  version count regroups groups (the group of each rank)
        event   kind detail t_ms [name role rank version]
        shard   rank version pushes pulls commits bytes_in bytes_out staged
                checkpoints refused clipped limited disconnects connections parked
                age_ms [checkpoint_age_s]
        eval    t_ms version name metric value [loss]: one evaluation, the
                monitor's own (name "monitor") or an evaluator's report

    The encoder writes the fields that were set (the map's size is counted,
    never written by hand).  The decoder checks every bound before it
    reads: the map's size, key and string lengths, array lengths and each
    value's type; it skips keys it does not know, so that an older
    consumer reads a newer producer, and returns -2 on anything malformed.
*/
#ifndef KD_STREAM_H_INCLUDED
#define KD_STREAM_H_INCLUDED

#include <czmq.h>
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KD_STREAM_MAX_FIELDS  64        //  entries in one map at most
#define KD_STREAM_MAX_STRING  4096      //  bytes in one string
#define KD_STREAM_MAX_ARRAY   65536     //  entries in one array

typedef enum {
    KD_ST_STATS = 1,
    KD_ST_WORKER,
    KD_ST_GROUPS,
    KD_ST_EVENT,
    KD_ST_SHARD,
    KD_ST_EVAL,
    KD_ST_TOPIC_COUNT                   //  one past the last topic
} kd_stream_topic_t;

typedef enum {
    KD_S_T_MS, KD_S_ELAPSED_S, KD_S_VERSION, KD_S_EPOCH, KD_S_SAMPLES, KD_S_SAMPLES_PER_S,
    KD_S_TRAIN_LOSS, KD_S_WORKERS, KD_S_CONSISTENCY, KD_S_MODEL, KD_S_PHASES, KD_S_DROPPED,
    KD_S_REGROUPS, KD_S_WAIT_FRACTION, KD_S_STALENESS_P50, KD_S_STALENESS_P99, KD_S_SHARDS,
    KD_S_TEST_ACCURACY, KD_S_TEST_VERSION, KD_S_TEST_AUC,
    KD_S_RANK, KD_S_CLOCK, KD_S_LOSS, KD_S_COMPUTE_MS, KD_S_PUSH_MS, KD_S_WAIT_MS, KD_S_PULL_MS,
    KD_S_ITER_MS, KD_S_STALENESS, KD_S_GROUP, KD_S_AGE_MS,
    KD_S_COUNT, KD_S_GROUPS,
    KD_S_KIND, KD_S_DETAIL, KD_S_NAME, KD_S_ROLE,
    KD_S_PUSHES, KD_S_PULLS, KD_S_COMMITS, KD_S_BYTES_IN, KD_S_BYTES_OUT, KD_S_STAGED,
    KD_S_CHECKPOINTS, KD_S_CHECKPOINT_AGE_S,
    KD_S_REFUSED, KD_S_CLIPPED, KD_S_LIMITED, KD_S_DISCONNECTS, KD_S_CONNECTIONS, KD_S_PARKED,
    KD_S_METRIC, KD_S_VALUE,
    KD_S_MODE,
    KD_S_FIELD_COUNT                    //  one past the last field
} kd_stream_field_t;

typedef struct _kd_stream_t kd_stream_t;

//  A message of a topic with no field set.  Caller owns return value.
kd_stream_t *
    kd_stream_new (kd_stream_topic_t topic);

//  Destroy and null the caller's pointer.
void
    kd_stream_destroy (kd_stream_t **self_p);

kd_stream_topic_t
    kd_stream_topic (kd_stream_t *self);
//  "stats", ...; NULL for a bad topic.  And back: 0 for an unknown name.
const char *
    kd_stream_topic_name (kd_stream_topic_t topic);
kd_stream_topic_t
    kd_stream_topic_lookup (const char *name, size_t len);
//  A field's key on the wire ("samples_per_s").
const char *
    kd_stream_field_name (kd_stream_field_t field);

//  Setters; a field that its topic does not carry, or of another kind, is
//  a programming error (assert).  Strings and arrays are copied.
void
    kd_stream_set_uint (kd_stream_t *self, kd_stream_field_t field, uint64_t value);
void
    kd_stream_set_float (kd_stream_t *self, kd_stream_field_t field, double value);
void
    kd_stream_set_str (kd_stream_t *self, kd_stream_field_t field, const char *value);
void
    kd_stream_set_uints (kd_stream_t *self, kd_stream_field_t field, const uint64_t *values,
                         size_t count);

//  Getters.  A number field reads as a double whatever its kind; an
//  absent one gives the default.  Strings and arrays are borrowed.
bool
    kd_stream_has (kd_stream_t *self, kd_stream_field_t field);
double
    kd_stream_number (kd_stream_t *self, kd_stream_field_t field, double dflt);
const char *
    kd_stream_str (kd_stream_t *self, kd_stream_field_t field);
const uint64_t *
    kd_stream_uints (kd_stream_t *self, kd_stream_field_t field, size_t *count);

//  Encode as the two frames of the stream.  Caller owns *out.  Returns 0.
int
    kd_stream_encode (kd_stream_t *self, zmsg_t **out);

//  Send on a PUB socket, and destroy (also on failure).  Returns 0 or -1.
int
    kd_stream_send (kd_stream_t **self_p, zsock_t *sock);

//  Decode a topic and a MessagePack body.  Returns 0 and sets *out (caller
//  owns it), or -2 with a reason in err when the topic is unknown or the
//  body malformed.  Never asserts on input.
int
    kd_stream_decode (const char *topic, size_t topic_len, const uint8_t *body, size_t size,
                      kd_stream_t **out, char *err, size_t err_size);

//  Receive one message from a SUB socket.  0 and *out; -1 when nothing
//  came (timeout, interrupt); -2 when it was malformed (err says why).
int
    kd_stream_recv (zsock_t *sock, kd_stream_t **out, char *err, size_t err_size);

//  Print as one JSON object, {"topic":"stats","version":12,...}, with a
//  newline.
void
    kd_stream_print_json (kd_stream_t *self, FILE *out);

#ifdef __cplusplus
}
#endif

#endif
