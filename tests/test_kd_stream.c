/*  test_kd_stream: the monitor's stream codec.  Every topic round-trips,
    keys nobody declared are skipped, and malformed bodies are refused with
    -2 and a reason, never a crash.
*/
#include <criterion/criterion.h>
#include <msgpack.h>
#include "kd_stream.h"

TestSuite (kd_stream);

//  Encode, then decode the two frames.
static kd_stream_t *
s_round_trip (kd_stream_t *in)
{
    zmsg_t *msg = NULL;
    cr_assert_eq (kd_stream_encode (in, &msg), 0);
    cr_assert_eq (zmsg_size (msg), 2);
    zframe_t *topic = zmsg_first (msg), *body = zmsg_next (msg);
    kd_stream_t *out = NULL;
    char err [256] = "";
    cr_assert_eq (kd_stream_decode ((const char *) zframe_data (topic), zframe_size (topic),
                                    zframe_data (body), zframe_size (body), &out, err, sizeof err),
                  0, "%s", err);
    zmsg_destroy (&msg);
    return out;
}

Test (kd_stream, every_topic_round_trips)
{
    kd_stream_t *s = kd_stream_new (KD_ST_STATS);
    kd_stream_set_uint (s, KD_S_VERSION, 42);
    kd_stream_set_float (s, KD_S_TEST_ACCURACY, 0.875);
    kd_stream_set_str (s, KD_S_MODEL, "mlp");
    kd_stream_t *back = s_round_trip (s);
    cr_expect_eq (kd_stream_topic (back), KD_ST_STATS);
    cr_expect_float_eq (kd_stream_number (back, KD_S_VERSION, -1), 42, 0);
    cr_expect_float_eq (kd_stream_number (back, KD_S_TEST_ACCURACY, -1), 0.875, 0);
    cr_expect_str_eq (kd_stream_str (back, KD_S_MODEL), "mlp");
    cr_expect_not (kd_stream_has (back, KD_S_EPOCH));
    cr_expect_float_eq (kd_stream_number (back, KD_S_EPOCH, -7), -7, 0);
    kd_stream_destroy (&s);
    kd_stream_destroy (&back);

    s = kd_stream_new (KD_ST_GROUPS);
    uint64_t groups [3] = { 0, 1, UINT32_MAX };
    kd_stream_set_uints (s, KD_S_GROUPS, groups, 3);
    back = s_round_trip (s);
    size_t n = 0;
    const uint64_t *g = kd_stream_uints (back, KD_S_GROUPS, &n);
    cr_assert_eq (n, 3);
    cr_expect_eq (g [2], UINT32_MAX);
    kd_stream_destroy (&s);
    kd_stream_destroy (&back);

    s = kd_stream_new (KD_ST_EVENT);
    kd_stream_set_str (s, KD_S_KIND, "model");
    kd_stream_set_str (s, KD_S_DETAIL, "mlp 101770 params: W1 784x128 [0-1]");
    back = s_round_trip (s);
    cr_expect_str_eq (kd_stream_str (back, KD_S_DETAIL), "mlp 101770 params: W1 784x128 [0-1]");
    char *json = NULL;
    size_t len = 0;
    FILE *f = open_memstream (&json, &len);
    kd_stream_print_json (back, f);
    fclose (f);
    cr_expect_str_eq (json, "{\"topic\":\"event\",\"kind\":\"model\",\"detail\":\"mlp 101770 params: "
                            "W1 784x128 [0-1]\"}\n");
    free (json);
    kd_stream_destroy (&s);
    kd_stream_destroy (&back);

    s = kd_stream_new (KD_ST_SHARD);
    kd_stream_set_uint (s, KD_S_RANK, 1);
    kd_stream_set_uint (s, KD_S_PUSHES, 2120);
    kd_stream_set_uint (s, KD_S_BYTES_IN, (uint64_t) 1 << 40);
    kd_stream_set_float (s, KD_S_CHECKPOINT_AGE_S, 2.5);
    back = s_round_trip (s);
    cr_expect_eq (kd_stream_topic (back), KD_ST_SHARD);
    cr_expect_float_eq (kd_stream_number (back, KD_S_PUSHES, -1), 2120, 0);
    cr_expect_float_eq (kd_stream_number (back, KD_S_BYTES_IN, -1), (double) ((uint64_t) 1 << 40), 0);
    cr_expect_float_eq (kd_stream_number (back, KD_S_CHECKPOINT_AGE_S, -1), 2.5, 0);
    cr_expect_not (kd_stream_has (back, KD_S_STAGED));
    cr_expect_str_eq (kd_stream_topic_name (KD_ST_SHARD), "shard");
    kd_stream_destroy (&s);
    kd_stream_destroy (&back);
}

//  Pack a map body with msgpack-c for the decoder to judge.
static int
s_decode_packed (const char *topic, void (*fill) (msgpack_packer *), char *err, size_t err_size,
                 kd_stream_t **out)
{
    msgpack_sbuffer buf;
    msgpack_sbuffer_init (&buf);
    msgpack_packer pk;
    msgpack_packer_init (&pk, &buf, msgpack_sbuffer_write);
    fill (&pk);
    int rc = kd_stream_decode (topic, strlen (topic), (const uint8_t *) buf.data, buf.size, out,
                               err, err_size);
    msgpack_sbuffer_destroy (&buf);
    return rc;
}

static void
s_key (msgpack_packer *pk, const char *k)
{
    msgpack_pack_str (pk, strlen (k));
    msgpack_pack_str_body (pk, k, strlen (k));
}

static void s_fill_unknown (msgpack_packer *pk)
{
    msgpack_pack_map (pk, 2);
    s_key (pk, "from_the_future");
    msgpack_pack_array (pk, 1);
    msgpack_pack_nil (pk);
    s_key (pk, "version");
    msgpack_pack_uint64 (pk, 9);
}
static void s_fill_wrong_type (msgpack_packer *pk)
{
    msgpack_pack_map (pk, 1);
    s_key (pk, "version");
    msgpack_pack_str (pk, 1);
    msgpack_pack_str_body (pk, "x", 1);
}
static void s_fill_not_a_map (msgpack_packer *pk)
{
    msgpack_pack_array (pk, 0);
}
static void s_fill_negative_uint (msgpack_packer *pk)
{
    msgpack_pack_map (pk, 1);
    s_key (pk, "rank");
    msgpack_pack_int64 (pk, -1);
}
static void s_fill_bad_array (msgpack_packer *pk)
{
    msgpack_pack_map (pk, 1);
    s_key (pk, "groups");
    msgpack_pack_array (pk, 2);
    msgpack_pack_uint64 (pk, 1);
    msgpack_pack_double (pk, 1.5);
}

Test (kd_stream, unknown_keys_are_skipped_and_bad_bodies_refused)
{
    kd_stream_t *out = NULL;
    char err [256];
    cr_assert_eq (s_decode_packed ("stats", s_fill_unknown, err, sizeof err, &out), 0, "%s", err);
    cr_expect_float_eq (kd_stream_number (out, KD_S_VERSION, -1), 9, 0);
    kd_stream_destroy (&out);
    cr_expect_eq (s_decode_packed ("stats", s_fill_wrong_type, err, sizeof err, &out), -2);
    cr_expect (strstr (err, "version"), "%s", err);
    cr_expect_null (out);
    cr_expect_eq (s_decode_packed ("stats", s_fill_not_a_map, err, sizeof err, &out), -2);
    cr_expect_eq (s_decode_packed ("worker", s_fill_negative_uint, err, sizeof err, &out), -2);
    cr_expect_eq (s_decode_packed ("groups", s_fill_bad_array, err, sizeof err, &out), -2);
    cr_expect_eq (s_decode_packed ("nonsense", s_fill_unknown, err, sizeof err, &out), -2);
    //  A field of another topic is not this one's: skipped.
    cr_assert_eq (s_decode_packed ("event", s_fill_negative_uint, err, sizeof err, &out), -2,
                  "rank is an event field too, and -1 is not a uint");
    //  Truncated and empty bodies.
    const uint8_t trunc [] = { 0x81, 0xa7, 'v', 'e', 'r' };
    cr_expect_eq (kd_stream_decode ("stats", 5, trunc, sizeof trunc, &out, err, sizeof err), -2);
    cr_expect_eq (kd_stream_decode ("stats", 5, trunc, 0, &out, err, sizeof err), -2);
    cr_expect_eq (kd_stream_decode ("stats", 5, NULL, 0, &out, err, sizeof err), -2);
    //  A map that claims more entries than the bytes hold.
    const uint8_t claims [] = { 0xdf, 0xff, 0xff, 0xff, 0xff };
    cr_expect_eq (kd_stream_decode ("stats", 5, claims, sizeof claims, &out, err, sizeof err), -2);
}

Test (kd_stream, names_are_declared_once)
{
    cr_expect_str_eq (kd_stream_topic_name (KD_ST_WORKER), "worker");
    cr_expect_eq (kd_stream_topic_lookup ("groups", 6), KD_ST_GROUPS);
    cr_expect_eq (kd_stream_topic_lookup ("group", 5), 0);
    cr_expect_null (kd_stream_topic_name ((kd_stream_topic_t) 0));
    for (int f = 0; f < KD_S_FIELD_COUNT; f++)
        cr_expect_not_null (kd_stream_field_name ((kd_stream_field_t) f), "field %d has no name", f);
    cr_expect_str_eq (kd_stream_field_name (KD_S_SAMPLES_PER_S), "samples_per_s");
}
