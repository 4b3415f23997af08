/*  kd_aggregators: the scheduler's bundles for workers behind aggregators.
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include "kd_aggregators.h"

//  A ROUTER and two DEALERs named A1 and A2 over inproc.
static zsock_t *s_router, *s_agg [2];

static void
setup (void)
{
    s_router = zsock_new_router ("inproc://kd-aggregators-test");
    cr_assert (s_router);
    zsock_set_rcvtimeo (s_router, 2000);
    for (int i = 0; i < 2; i++) {
        s_agg [i] = zsock_new (ZMQ_DEALER);
        char id [3] = { 'A', (char) ('1' + i), 0 };
        zsock_set_identity (s_agg [i], id);
        zsock_set_rcvtimeo (s_agg [i], 500);
        cr_assert_eq (zsock_connect (s_agg [i], "inproc://kd-aggregators-test"), 0);
        //  The ROUTER learns the id from a first message.
        zstr_send (s_agg [i], "hello");
        char *hello = zstr_recv (s_router);     //  the id frame
        zstr_free (&hello);
        hello = zstr_recv (s_router);
        zstr_free (&hello);
    }
}

static void
teardown (void)
{
    for (int i = 0; i < 2; i++)
        zsock_destroy (&s_agg [i]);
    zsock_destroy (&s_router);
}

TestSuite (kd_aggregators, .init = setup, .fini = teardown, .timeout = 30);

static kd_msg_t *
s_beat (uint64_t rank)
{
    kd_msg_t *msg = kd_msg_new (KD_MSG_HEARTBEAT);
    kd_msg_set_uint (msg, KD_F_RANK, rank);
    return msg;
}

//  Items in the next RELAY on agg i, -1 when none comes; their ranks go to
//  ranks (at most max).
static int
s_relay_items (int i, uint64_t *ranks, size_t max)
{
    kd_msg_t *relay = NULL;
    if (kd_msg_recv (s_agg [i], &relay, NULL, NULL) != 0)
        return -1;
    cr_assert_eq (kd_msg_type (relay), KD_MSG_RELAY);
    size_t offset = 0, index = 0;
    kd_bundle_item_t item;
    char reason [160];
    int rc;
    while ((rc = kd_bundle_next (relay, &offset, &index, &item, reason, sizeof reason)) == 0) {
        kd_msg_t *msg = NULL;
        cr_assert_eq (kd_bundle_decode (&item, &msg, NULL), 0);
        if (index - 1 < max)
            ranks [index - 1] = kd_msg_uint (msg, KD_F_RANK);
        cr_expect (item.id_size == 2 && item.id [0] == 'W');
        kd_msg_destroy (&msg);
    }
    cr_assert_eq (rc, 1, "%s", reason);
    kd_msg_destroy (&relay);
    return (int) index;
}

Test (kd_aggregators, one_relay_per_aggregator_per_flush_in_order)
{
    kd_aggregators_t *aggs = kd_aggregators_new (s_router);
    zframe_t *a1 = zframe_new ("A1", 2), *a2 = zframe_new ("A2", 2), *w = zframe_new ("W1", 2);
    for (uint64_t r = 0; r < 5; r++) {
        kd_msg_t *msg = s_beat (r);
        kd_aggregators_send (aggs, r < 3 ? a1 : a2, w, &msg);
        cr_assert_null (msg, "the message is taken");
    }
    //  Nothing goes out before the flush.
    uint64_t ranks [8];
    cr_expect_eq (s_relay_items (0, ranks, 8), -1);
    kd_aggregators_flush (aggs);
    cr_assert_eq (s_relay_items (0, ranks, 8), 3);
    cr_expect (ranks [0] == 0 && ranks [1] == 1 && ranks [2] == 2, "order kept");
    cr_assert_eq (s_relay_items (1, ranks, 8), 2);
    cr_expect (ranks [0] == 3 && ranks [1] == 4);
    //  An empty flush sends nothing.
    kd_aggregators_flush (aggs);
    cr_expect_eq (s_relay_items (0, ranks, 8), -1);
    kd_aggregators_stats_t *stats = kd_aggregators_stats (aggs);
    cr_expect_eq (stats->relays_out, 2);
    cr_expect_eq (stats->items_out, 5);
    cr_expect_eq (kd_aggregators_size (aggs), 2);
    kd_aggregators_received (aggs, a1, 7);
    cr_expect_eq (stats->relays_in, 1);
    cr_expect_eq (stats->items_in, 7);
    zframe_destroy (&a1);
    zframe_destroy (&a2);
    zframe_destroy (&w);
    kd_aggregators_destroy (&aggs);
    cr_assert_null (aggs);
}

Test (kd_aggregators, a_full_bundle_goes_out_and_the_rest_follows)
{
    kd_aggregators_t *aggs = kd_aggregators_new (s_router);
    zframe_t *a1 = zframe_new ("A1", 2), *w = zframe_new ("W1", 2);
    size_t n = KD_BUNDLE_MAX_ITEMS + 10;
    for (size_t r = 0; r < n; r++) {
        kd_msg_t *msg = s_beat (r);
        kd_aggregators_send (aggs, a1, w, &msg);
    }
    //  The first bundle left when it was full; the rest at the flush.
    uint64_t first [1];
    cr_assert_eq (s_relay_items (0, first, 1), KD_BUNDLE_MAX_ITEMS);
    cr_expect_eq (first [0], 0);
    kd_aggregators_flush (aggs);
    cr_assert_eq (s_relay_items (0, first, 1), 10);
    cr_expect_eq (first [0], KD_BUNDLE_MAX_ITEMS);
    //  A message with a data frame cannot be relayed: dropped, not sent.
    kd_msg_t *push = kd_msg_new (KD_MSG_PUSH);
    float v [2] = { 1, 2 };
    zframe_t *data = zframe_new (v, sizeof v);
    kd_msg_set_data (push, &data);
    kd_aggregators_send (aggs, a1, w, &push);
    cr_assert_null (push);
    kd_aggregators_flush (aggs);
    cr_expect_eq (s_relay_items (0, first, 1), -1);
    zframe_destroy (&a1);
    zframe_destroy (&w);
    kd_aggregators_destroy (&aggs);
}
