/*  kd_bundle: RELAYs of many peers' messages, both ways, and every way a
    RELAY can be malformed.
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include "kd_bundle.h"

//  A RELAY as it comes off the wire: encoded and decoded again.
static kd_msg_t *
s_wire (kd_msg_t **relay_p)
{
    zmsg_t *z = NULL;
    cr_assert_eq (kd_msg_encode (*relay_p, &z), 0);
    kd_msg_destroy (relay_p);
    kd_msg_t *back = NULL;
    kd_msg_err_t err;
    cr_assert_eq (kd_msg_decode (&z, false, &back, NULL, &err), 0, "%s", err.reason);
    return back;
}

//  A RELAY whose data frame is exactly these bytes (padded with zeros).
static kd_msg_t *
s_relay_of (const byte *data, size_t size, uint64_t items)
{
    size_t padded = (size + 3) / 4 * 4;
    byte *copy = (byte *) calloc (1, padded + 1);
    memcpy (copy, data, size);
    zframe_t *frame = zframe_new (copy, padded);
    free (copy);
    kd_msg_t *msg = kd_msg_new (KD_MSG_RELAY);
    kd_msg_set_uint (msg, KD_F_ITEMS, items);
    kd_msg_set_data (msg, &frame);
    return msg;
}

//  Read every item; returns what the last kd_bundle_next said.
static int
s_read_all (kd_msg_t *relay, size_t *count)
{
    size_t offset = 0, index = 0;
    kd_bundle_item_t item;
    char reason [160];
    int rc;
    while ((rc = kd_bundle_next (relay, &offset, &index, &item, reason, sizeof reason)) == 0)
        ;
    if (count)
        *count = index;
    return rc;
}

Test (kd_bundle, items_come_back_in_order_with_their_sources)
{
    kd_bundle_t *bundle = kd_bundle_new ();
    cr_assert_null (kd_bundle_take (bundle), "an empty bundle makes no RELAY");
    char msgs [50][64];
    for (int i = 0; i < 50; i++) {
        byte id [5] = { 0, (byte) i, 2, 3, (byte) (i * 7) };
        snprintf (msgs [i], sizeof msgs [i], "message %d %.*s", i, i % 17, "abcdefghijklmnopq");
        kd_bundle_item_t item = { .id = id, .id_size = (size_t) 1 + (size_t) i % 5,
                                  .msg = (const byte *) msgs [i], .msg_size = strlen (msgs [i]) };
        snprintf (item.src.role, sizeof item.src.role, "%s", i % 2 ? "worker" : "");
        snprintf (item.src.user, sizeof item.src.user, "key%d", i);
        snprintf (item.src.address, sizeof item.src.address, "10.0.0.%d", i);
        cr_assert_eq (kd_bundle_add (bundle, &item), 0);
    }
    cr_assert_eq (kd_bundle_items (bundle), 50);
    kd_msg_t *relay = kd_bundle_take (bundle);
    cr_assert_eq (kd_bundle_items (bundle), 0, "taking empties the bundle");
    relay = s_wire (&relay);
    cr_assert_eq (kd_msg_uint (relay, KD_F_ITEMS), 50);
    size_t offset = 0, index = 0;
    kd_bundle_item_t item;
    char reason [160];
    for (int i = 0; i < 50; i++) {
        cr_assert_eq (kd_bundle_next (relay, &offset, &index, &item, reason, sizeof reason), 0,
                      "%s", reason);
        cr_expect_eq (item.id_size, (size_t) 1 + (size_t) i % 5);
        cr_expect_eq (item.id [1 % item.id_size], item.id_size > 1 ? (byte) i : 0);
        cr_expect_eq (item.msg_size, strlen (msgs [i]));
        cr_expect_eq (memcmp (item.msg, msgs [i], item.msg_size), 0);
        cr_expect_str_eq (item.src.role, i % 2 ? "worker" : "");
        char want [64];
        snprintf (want, sizeof want, "key%d", i);
        cr_expect_str_eq (item.src.user, want);
        snprintf (want, sizeof want, "10.0.0.%d", i);
        cr_expect_str_eq (item.src.address, want);
    }
    cr_expect_eq (kd_bundle_next (relay, &offset, &index, &item, reason, sizeof reason), 1);
    kd_msg_destroy (&relay);
    kd_bundle_destroy (&bundle);
    cr_assert_null (bundle);
}

Test (kd_bundle, a_relayed_message_decodes_as_if_received_directly)
{
    kd_bundle_t *bundle = kd_bundle_new ();
    kd_msg_t *arrive = kd_msg_new (KD_MSG_ARRIVE);
    kd_msg_set_uint (arrive, KD_F_CLOCK, 41);
    kd_msg_set_uint (arrive, KD_F_BASE, 40);
    kd_msg_set_uint (arrive, KD_F_SAMPLES, 32);
    zframe_t *id = zframe_new ("\x00\x11\x22\x33\x44", 5);
    //  The message's own routing id is the item's: the frame may be the same.
    kd_msg_set_routing_id (arrive, id);
    kd_msg_source_t src = { .fd = 3, .role = "worker", .user = "K", .address = "127.0.0.1" };
    cr_assert_eq (kd_bundle_add_msg (bundle, kd_msg_routing_id (arrive), &src, arrive), 0);
    cr_assert (zframe_eq (kd_msg_routing_id (arrive), id), "the message keeps its routing id");
    //  A data frame is never relayed.
    kd_msg_t *push = kd_msg_new (KD_MSG_PUSH);
    float v [2] = { 1, 2 };
    zframe_t *data = zframe_new (v, sizeof v);
    kd_msg_set_data (push, &data);
    cr_expect_eq (kd_bundle_add_msg (bundle, id, &src, push), -1);
    kd_msg_destroy (&push);
    kd_msg_t *relay = kd_bundle_take (bundle);
    relay = s_wire (&relay);
    size_t offset = 0, index = 0;
    kd_bundle_item_t item;
    char reason [160];
    cr_assert_eq (kd_bundle_next (relay, &offset, &index, &item, reason, sizeof reason), 0);
    kd_msg_t *back = NULL;
    kd_msg_err_t err;
    cr_assert_eq (kd_bundle_decode (&item, &back, &err), 0, "%s", err.reason);
    cr_expect_eq (kd_msg_type (back), KD_MSG_ARRIVE);
    cr_expect_eq (kd_msg_uint (back, KD_F_CLOCK), 41);
    cr_expect_eq (kd_msg_uint (back, KD_F_SAMPLES), 32);
    cr_expect (zframe_eq (kd_msg_routing_id (back), id));
    cr_expect_str_eq (item.src.role, "worker");
    cr_expect_eq (item.src.fd, -1, "a descriptor means nothing past the aggregator");
    kd_msg_destroy (&back);
    kd_msg_destroy (&arrive);
    kd_msg_destroy (&relay);
    zframe_destroy (&id);
    kd_bundle_destroy (&bundle);
}

Test (kd_bundle, fields_out_of_bounds_are_refused_and_a_full_bundle_says_so)
{
    kd_bundle_t *bundle = kd_bundle_new ();
    byte id [256] = { 1 };
    byte *big = (byte *) calloc (1, KD_BUNDLE_MAX_MSG + 1);
    kd_bundle_item_t ok = { .id = id, .id_size = 5, .msg = big, .msg_size = 10 };
    kd_bundle_item_t bad = ok;
    bad.id_size = 0;
    cr_expect_eq (kd_bundle_add (bundle, &bad), -1);
    bad = ok;
    bad.id_size = 256;
    cr_expect_eq (kd_bundle_add (bundle, &bad), -1);
    bad = ok;
    bad.msg_size = 0;
    cr_expect_eq (kd_bundle_add (bundle, &bad), -1);
    bad = ok;
    bad.msg_size = KD_BUNDLE_MAX_MSG + 1;
    cr_expect_eq (kd_bundle_add (bundle, &bad), -1);
    bad = ok;
    memset (bad.src.role, 'r', sizeof bad.src.role);     //  no terminator
    cr_expect_eq (kd_bundle_add (bundle, &bad), -1);
    cr_expect_eq (kd_bundle_items (bundle), 0, "nothing refused was added");
    for (int i = 0; i < KD_BUNDLE_MAX_ITEMS; i++)
        cr_assert_eq (kd_bundle_add (bundle, &ok), 0);
    cr_expect_eq (kd_bundle_add (bundle, &ok), -1, "full at KD_BUNDLE_MAX_ITEMS");
    kd_msg_t *relay = kd_bundle_take (bundle);
    size_t count = 0;
    cr_expect_eq (s_read_all (relay, &count), 1);
    cr_expect_eq (count, KD_BUNDLE_MAX_ITEMS);
    kd_msg_destroy (&relay);
    //  Bytes, not only items, are bounded.
    bad = ok;
    bad.msg_size = KD_BUNDLE_MAX_MSG;
    int added = 0;
    while (kd_bundle_add (bundle, &bad) == 0)
        added++;
    cr_expect_eq (added, (int) (KD_BUNDLE_MAX_BYTES / (KD_BUNDLE_MAX_MSG + 13)));
    free (big);
    kd_bundle_destroy (&bundle);
}

Test (kd_bundle, malformed_relays_are_refused_never_read_past)
{
    //  One good item: id "AB", role "worker", user "", address "x", msg "hello".
    const byte good [] = { 2, 'A', 'B', 6, 'w', 'o', 'r', 'k', 'e', 'r', 0, 1, 'x',
                           5, 0, 0, 0, 'h', 'e', 'l', 'l', 'o' };
    kd_msg_t *relay = s_relay_of (good, sizeof good, 1);
    size_t count = 0;
    cr_expect_eq (s_read_all (relay, &count), 1);
    cr_expect_eq (count, 1);
    kd_msg_destroy (&relay);
    //  Every cut of it is malformed, except those the zero padding fills
    //  in: the last 3 bytes of the message (a well-formed RELAY whose last
    //  message ends in zeros, which the message's own decoder judges).
    for (size_t cut = 0; cut < sizeof good - 3; cut++) {
        relay = s_relay_of (good, cut, 1);
        cr_expect_eq (s_read_all (relay, NULL), -2, "cut at %zu", cut);
        kd_msg_destroy (&relay);
    }
    //  "items" must match: more than there are, or fewer.
    relay = s_relay_of (good, sizeof good, 2);
    cr_expect_eq (s_read_all (relay, NULL), -2);
    kd_msg_destroy (&relay);
    relay = s_relay_of (good, sizeof good, 0);
    cr_expect_eq (s_read_all (relay, NULL), -2);
    kd_msg_destroy (&relay);
    relay = s_relay_of (good, sizeof good, KD_BUNDLE_MAX_ITEMS + 1);
    cr_expect_eq (s_read_all (relay, NULL), -2);
    kd_msg_destroy (&relay);
    //  Lengths that point past the end, a zero-length id or message, a NUL
    //  inside a string, and padding that is not zero.
    struct { size_t at; byte value; } cases [] = {
        { 0, 0 }, { 0, 200 }, { 3, 60 }, { 5, 0 }, { 11, 200 }, { 13, 0 }, { 13, 9 }, { 16, 1 },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases [0]; c++) {
        byte bad [sizeof good];
        memcpy (bad, good, sizeof good);
        bad [cases [c].at] = cases [c].value;
        relay = s_relay_of (bad, sizeof bad, 1);
        cr_expect_eq (s_read_all (relay, NULL), -2, "byte %zu = %u", cases [c].at, cases [c].value);
        kd_msg_destroy (&relay);
    }
    byte padded [sizeof good + 2];
    memcpy (padded, good, sizeof good);
    padded [sizeof good] = 0;
    padded [sizeof good + 1] = 7;
    relay = s_relay_of (padded, sizeof padded, 1);
    cr_expect_eq (s_read_all (relay, NULL), -2, "padding must be zero");
    kd_msg_destroy (&relay);
    //  Random bytes never crash the reader.
    uint64_t seed = 7;
    for (int t = 0; t < 20000; t++) {
        byte noise [64];
        size_t size = (size_t) (kd_splitmix64 (&seed) % sizeof noise);
        for (size_t i = 0; i < size; i++)
            noise [i] = (byte) (kd_splitmix64 (&seed) % 8 == 0 ? kd_splitmix64 (&seed) : i % 7);
        relay = s_relay_of (noise, size, kd_splitmix64 (&seed) % 4);
        int rc = s_read_all (relay, NULL);
        cr_assert (rc == 1 || rc == -2);
        kd_msg_destroy (&relay);
    }
    //  A RELAY without its data frame does not get past the codec.
    zmsg_t *z = NULL;
    kd_msg_t *empty = kd_msg_new (KD_MSG_RELAY);
    kd_msg_set_uint (empty, KD_F_ITEMS, 0);
    cr_expect_neq (kd_msg_encode (empty, &z), 0);
    kd_msg_destroy (&empty);
}
