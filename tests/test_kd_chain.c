/*  kd_chain: answers wait for the successor, in order; a refused forward is
    held until a state transfer covers it; the tail answers at once; a
    demoted replica answers nothing it owed.
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include "kd_chain.h"

typedef struct {
    zsock_t *router;            //  the replica's ROUTER (answers go out here)
    zsock_t *client;            //  an upstream peer of it
    zsock_t *next;              //  the fake successor
    zframe_t *client_id;        //  the client's routing id at the router
    kd_chain_t *chain;
    char next_ep [64];
} s_fixture_t;

static int s_seq;

static void
s_setup (s_fixture_t *f)
{
    memset (f, 0, sizeof *f);
    char up [64];
    snprintf (up, sizeof up, "inproc://chain-up-%d", s_seq);
    snprintf (f->next_ep, sizeof f->next_ep, "inproc://chain-next-%d", s_seq++);
    f->router = zsock_new_router (up);
    f->client = zsock_new_dealer (up);
    f->next = zsock_new_router (f->next_ep);
    cr_assert (f->router && f->client && f->next);
    zsock_set_rcvtimeo (f->router, 2000);
    zsock_set_rcvtimeo (f->client, 200);
    zsock_set_rcvtimeo (f->next, 2000);
    //  The router learns the client's routing id from a first message.
    kd_msg_t *hb = kd_msg_new (KD_MSG_HEARTBEAT);
    kd_msg_send (&hb, f->client);
    kd_msg_t *got = NULL;
    cr_assert_eq (kd_msg_recv (f->router, &got, NULL, NULL), 0);
    f->client_id = zframe_dup (kd_msg_routing_id (got));
    kd_msg_destroy (&got);
    f->chain = kd_chain_new (f->router, NULL, 1 << 20);
}

static void
s_teardown (s_fixture_t *f)
{
    kd_chain_destroy (&f->chain);
    cr_assert_null (f->chain);
    zframe_destroy (&f->client_id);
    zsock_destroy (&f->client);
    zsock_destroy (&f->router);
    zsock_destroy (&f->next);
}

//  Apply a write: a PUSH forward, and the PUSH_OK for the client.
static void
s_submit (s_fixture_t *f, uint64_t clock)
{
    kd_msg_t *fwd = kd_msg_new (KD_MSG_PUSH);
    kd_msg_set_uint (fwd, KD_F_RANK, 1);
    kd_msg_set_uint (fwd, KD_F_CLOCK, clock);
    kd_msg_set_uint (fwd, KD_F_BASE, 0);
    kd_msg_set_uint (fwd, KD_F_LO, 0);
    kd_msg_set_uint (fwd, KD_F_COUNT, 1);
    float one = 1;
    zframe_t *data = zframe_new (&one, sizeof one);
    kd_msg_set_data (fwd, &data);
    kd_msg_t *ok = kd_msg_new (KD_MSG_PUSH_OK);
    kd_msg_set_routing_id (ok, f->client_id);
    kd_msg_set_uint (ok, KD_F_CLOCK, clock);
    kd_chain_submit (f->chain, &fwd, &ok, KD_CHAIN_ROUTER);
    cr_assert_null (fwd);
    cr_assert_null (ok);
}

//  The clock of the next answer the client gets, or -1 if none comes.
static int64_t
s_client_answer (s_fixture_t *f)
{
    kd_msg_t *got = NULL;
    if (kd_msg_recv (f->client, &got, NULL, NULL) != 0)
        return -1;
    int64_t clock = kd_msg_type (got) == KD_MSG_PUSH_OK ? (int64_t) kd_msg_uint (got, KD_F_CLOCK) : -2;
    kd_msg_destroy (&got);
    return clock;
}

//  The successor reads what came and returns its type; the routing id of
//  the chain's socket goes to *id.
static kd_msg_type_t
s_next_reads (s_fixture_t *f, zframe_t **id, kd_msg_t **out)
{
    kd_msg_t *got = NULL;
    cr_assert_eq (kd_msg_recv (f->next, &got, NULL, NULL), 0, "the successor got nothing");
    kd_msg_type_t type = kd_msg_type (got);
    if (id && !*id)
        *id = zframe_dup (kd_msg_routing_id (got));
    if (out)
        *out = got;
    else
        kd_msg_destroy (&got);
    return type;
}

//  The successor answers; the chain reads that answer.
static int
s_next_answers (s_fixture_t *f, zframe_t *id, kd_msg_t *answer)
{
    kd_msg_set_routing_id (answer, id);
    kd_msg_send (&answer, f->next);
    zpoller_t *p = zpoller_new (kd_chain_socket (f->chain), NULL);
    cr_assert (zpoller_wait (p, 2000), "the answer did not arrive");
    zpoller_destroy (&p);
    return kd_chain_on_answer (f->chain);
}

static kd_msg_t *
s_ok (kd_msg_type_t type)
{
    kd_msg_t *m = kd_msg_new (type);
    kd_msg_set_uint (m, type == KD_MSG_SYNC_OK ? KD_F_VERSION : KD_F_CLOCK, 0);
    return m;
}

Test (kd_chain, tail_answers_at_once)
{
    s_fixture_t f;
    s_setup (&f);
    cr_assert_not (kd_chain_linked (f.chain));
    s_submit (&f, 7);
    cr_assert_eq (s_client_answer (&f), 7);
    cr_assert_eq (kd_chain_waiting (f.chain), 0);
    s_teardown (&f);
}

Test (kd_chain, answers_wait_for_the_successor_in_order)
{
    s_fixture_t f;
    s_setup (&f);
    cr_assert_eq (kd_chain_set_successor (f.chain, f.next_ep), 0);
    cr_assert_str_eq (kd_chain_endpoint (f.chain), f.next_ep);
    s_submit (&f, 1);
    s_submit (&f, 2);
    cr_assert_eq (s_client_answer (&f), -1, "answered before the successor had the write");
    zframe_t *id = NULL;
    kd_msg_t *fwd = NULL;
    cr_assert_eq (s_next_reads (&f, &id, &fwd), KD_MSG_PUSH);
    cr_assert_str_eq (kd_msg_str (fwd, KD_F_ROLE), "shard", "a forward names itself");
    kd_msg_destroy (&fwd);
    cr_assert_eq (s_next_reads (&f, &id, NULL), KD_MSG_PUSH);
    cr_assert_eq (kd_chain_bytes (f.chain), 2 * sizeof (float));
    cr_assert_eq (s_next_answers (&f, id, s_ok (KD_MSG_PUSH_OK)), 0);
    cr_assert_eq (s_client_answer (&f), 1);
    cr_assert_eq (s_client_answer (&f), -1);
    cr_assert_eq (s_next_answers (&f, id, s_ok (KD_MSG_PUSH_OK)), 0);
    cr_assert_eq (s_client_answer (&f), 2);
    cr_assert_eq (kd_chain_waiting (f.chain), 0);
    zframe_destroy (&id);
    s_teardown (&f);
}

Test (kd_chain, a_refused_write_waits_for_a_transfer)
{
    s_fixture_t f;
    s_setup (&f);
    kd_chain_set_successor (f.chain, f.next_ep);
    s_submit (&f, 1);
    s_submit (&f, 2);
    zframe_t *id = NULL;
    s_next_reads (&f, &id, NULL);
    s_next_reads (&f, &id, NULL);
    //  The successor refuses the first write: it is held, not answered.
    cr_assert_eq (s_next_answers (&f, id, kd_msg_new_error (NULL, 503, "not synced")), -1);
    cr_assert_eq (s_next_answers (&f, id, s_ok (KD_MSG_PUSH_OK)), 0);
    cr_assert_eq (s_client_answer (&f), 2);
    cr_assert_eq (s_client_answer (&f), -1, "a refused write was answered");
    cr_assert_eq (kd_chain_waiting (f.chain), 1);
    //  A transfer that fails answers nothing; one that succeeds, all.
    kd_chain_end_sync (f.chain, 5, 7);
    cr_assert_eq (s_next_reads (&f, &id, NULL), KD_MSG_SYNC);
    kd_msg_t *refused = kd_msg_new_error (NULL, 503, "not registered");
    kd_msg_set_str (refused, KD_F_KIND, "sync");
    cr_assert_eq (s_next_answers (&f, id, refused), -1);
    cr_assert_eq (s_client_answer (&f), -1);
    kd_chain_end_sync (f.chain, 5, 8);
    s_submit (&f, 3);
    //  The end names the generation of the CHAIN that ordered the transfer.
    kd_msg_t *end = NULL;
    cr_assert_eq (s_next_reads (&f, &id, &end), KD_MSG_SYNC);
    cr_expect_str_eq (kd_msg_str (end, KD_F_KIND), "end");
    cr_expect_eq (kd_msg_uint (end, KD_F_VERSION), 5);
    cr_expect (kd_msg_has (end, KD_F_GEN));
    cr_expect_eq (kd_msg_uint (end, KD_F_GEN), 8);
    kd_msg_destroy (&end);
    cr_assert_eq (s_next_reads (&f, &id, NULL), KD_MSG_PUSH);
    cr_assert_eq (s_next_answers (&f, id, s_ok (KD_MSG_SYNC_OK)), 0);
    cr_assert_eq (s_client_answer (&f), 1, "the transfer did not release the held write");
    cr_assert_eq (s_client_answer (&f), -1, "a write after the transfer was answered early");
    cr_assert_eq (s_next_answers (&f, id, s_ok (KD_MSG_PUSH_OK)), 0);
    cr_assert_eq (s_client_answer (&f), 3);
    cr_assert_eq (kd_chain_waiting (f.chain), 0);
    zframe_destroy (&id);
    s_teardown (&f);
}

Test (kd_chain, becoming_the_tail_answers_what_waits)
{
    s_fixture_t f;
    s_setup (&f);
    kd_chain_set_successor (f.chain, f.next_ep);
    s_submit (&f, 4);
    s_submit (&f, 5);
    cr_assert_eq (s_client_answer (&f), -1);
    cr_assert_eq (kd_chain_set_successor (f.chain, ""), 0);
    cr_assert_not (kd_chain_linked (f.chain));
    cr_assert_eq (s_client_answer (&f), 4);
    cr_assert_eq (s_client_answer (&f), 5);
    s_teardown (&f);
}

Test (kd_chain, a_demoted_replica_answers_nothing_it_owed)
{
    s_fixture_t f;
    s_setup (&f);
    kd_chain_set_successor (f.chain, f.next_ep);
    s_submit (&f, 1);
    kd_chain_discard (f.chain);
    cr_assert_eq (kd_chain_waiting (f.chain), 0);
    kd_chain_set_successor (f.chain, NULL);
    cr_assert_eq (s_client_answer (&f), -1);
    s_teardown (&f);
}
