/*  kd_members: the scheduler's member table and its indexes (by name,
    routing id, rank and registering key).
*/
#include <criterion/criterion.h>
#include "kd_internal.h"
#include "kd_members.h"

static kd_members_t *s_members;

static void
setup (void)
{
    //  Four shard ranks; a key may register three names.
    s_members = kd_members_new (4, 3);
    cr_assert (s_members);
}

static void
teardown (void)
{
    kd_members_destroy (&s_members);
}

TestSuite (kd_members, .init = setup, .fini = teardown, .timeout = 30);

//  A member bound to a routing id made of text, as a ROUTER's would be.
static kd_member_t *
s_join (const char *name, kd_member_role_t role, uint64_t rank, const char *key, const char *id)
{
    kd_member_t *m = kd_members_add (s_members, name, role, rank, key);
    cr_assert (m, "add %s", name);
    zframe_t *frame = zframe_new (id, strlen (id));
    kd_members_bind (s_members, m, NULL, frame);
    zframe_destroy (&frame);
    m->alive = true;
    return m;
}

//  The id key of a text routing id, behind via when it is not NULL.
static void
s_key (const char *via, const char *id, char *out, size_t size)
{
    zframe_t *v = via ? zframe_new (via, strlen (via)) : NULL;
    zframe_t *i = zframe_new (id, strlen (id));
    kd_members_id_key (v, i, out, size);
    zframe_destroy (&v);
    zframe_destroy (&i);
}

Test (kd_members, roles_by_name)
{
    for (int r = KD_MEMBER_WORKER; r <= KD_MEMBER_EVALUATOR; r++)
        cr_expect_eq (kd_member_role_parse (kd_member_role_name ((kd_member_role_t) r)), r);
    cr_expect_eq (kd_member_role_parse ("shard"), KD_MEMBER_SHARD);
    cr_expect_eq (kd_member_role_parse ("scheduler"), -1);
    cr_expect_eq (kd_member_role_parse (""), -1);
}

Test (kd_members, too_many_shards_is_refused)
{
    cr_expect_null (kd_members_new (KD_MEMBERS_MAX_SHARDS + 1, 1));
    kd_members_t *max = kd_members_new (KD_MEMBERS_MAX_SHARDS, 1);
    cr_expect (max);
    kd_members_destroy (&max);
}

Test (kd_members, add_and_look_up)
{
    kd_member_t *w = s_join ("w0", KD_MEMBER_WORKER, 5, "k1", "A");
    kd_member_t *s = s_join ("s0", KD_MEMBER_SHARD, 2, "k1", "B");
    kd_member_t *mon = s_join ("mon", KD_MEMBER_MONITOR, 0, "k2", "C");
    cr_expect_eq (kd_members_size (s_members), 3);
    cr_expect_str_eq (w->name, "w0");
    cr_expect_eq (w->rank, 5);
    cr_expect_str_eq (w->key, "k1");
    //  By name.
    cr_expect_eq (kd_members_find (s_members, "w0"), w);
    cr_expect_eq (kd_members_find (s_members, "s0"), s);
    cr_expect_null (kd_members_find (s_members, "nobody"));
    //  By routing id: "A" is 41 in hex.
    char key [KD_MEMBERS_ID_MAX];
    s_key (NULL, "A", key, sizeof key);
    cr_expect_str_eq (key, "41");
    cr_expect_str_eq (w->id_hex, "41");
    cr_expect_eq (kd_members_find_id (s_members, key), w);
    s_key (NULL, "B", key, sizeof key);
    cr_expect_eq (kd_members_find_id (s_members, key), s);
    s_key (NULL, "Z", key, sizeof key);
    cr_expect_null (kd_members_find_id (s_members, key));
    //  By role and rank; out of range is NULL, not a crash.
    cr_expect_eq (kd_members_worker (s_members, 5), w);
    cr_expect_null (kd_members_worker (s_members, 0));
    cr_expect_null (kd_members_worker (s_members, KD_MEMBERS_MAX_WORKERS));
    cr_expect_eq (kd_members_shard (s_members, 2), s);
    cr_expect_null (kd_members_shard (s_members, 0));
    cr_expect_null (kd_members_shard (s_members, UINT64_MAX));
    //  A bound monitor is the table's monitor.
    cr_expect_eq (kd_members_monitor (s_members), mon);
}

Test (kd_members, added_member_is_not_bound_nor_alive)
{
    kd_member_t *w = kd_members_add (s_members, "w0", KD_MEMBER_WORKER, 0, "k");
    cr_assert (w);
    cr_expect_null (w->routing_id);
    cr_expect_not (w->alive);
    cr_expect_eq (kd_members_live (s_members, KD_MEMBER_WORKER), 0);
    //  A monitor counts as the monitor only once it is bound.
    kd_member_t *mon = kd_members_add (s_members, "mon", KD_MEMBER_MONITOR, 0, "k");
    cr_assert (mon);
    cr_expect_null (kd_members_monitor (s_members));
}

Test (kd_members, rebind_moves_the_id_index)
{
    kd_member_t *w = s_join ("w0", KD_MEMBER_WORKER, 0, "k", "old");
    char old_key [KD_MEMBERS_ID_MAX], new_key [KD_MEMBERS_ID_MAX];
    s_key (NULL, "old", old_key, sizeof old_key);
    s_key (NULL, "new", new_key, sizeof new_key);
    cr_assert_eq (kd_members_find_id (s_members, old_key), w);
    //  The same name registers again from a new process.
    zframe_t *id = zframe_new ("new", 3);
    kd_members_bind (s_members, w, NULL, id);
    cr_expect_null (kd_members_find_id (s_members, old_key));
    cr_expect_eq (kd_members_find_id (s_members, new_key), w);
    cr_expect_str_eq (w->id_hex, new_key);
    cr_expect (zframe_eq (w->routing_id, id));
    cr_expect_neq (w->routing_id, id, "the id is copied");
    cr_expect_null (w->via);
    //  Then through an aggregator: its id comes first in the key.
    zframe_t *via = zframe_new ("agg", 3);
    kd_members_bind (s_members, w, via, id);
    char relayed [KD_MEMBERS_ID_MAX];
    s_key ("agg", "new", relayed, sizeof relayed);
    cr_expect_str_eq (relayed, "616767/6E6577");
    cr_expect_null (kd_members_find_id (s_members, new_key));
    cr_expect_eq (kd_members_find_id (s_members, relayed), w);
    cr_expect (w->via && zframe_eq (w->via, via));
    //  Back to a direct connection: the via is gone.
    kd_members_bind (s_members, w, NULL, id);
    cr_expect_null (w->via);
    cr_expect_null (kd_members_find_id (s_members, relayed));
    cr_expect_eq (kd_members_find_id (s_members, new_key), w);
    //  The name and the rank did not move.
    cr_expect_eq (kd_members_find (s_members, "w0"), w);
    cr_expect_eq (kd_members_worker (s_members, 0), w);
    cr_expect_eq (kd_members_size (s_members), 1);
    zframe_destroy (&via);
    zframe_destroy (&id);
}

Test (kd_members, shared_id_keeps_the_first_members_entry)
{
    //  Two names from one connection: the id finds the first, and the
    //  second moving away leaves the first one's entry alone.
    kd_member_t *a = s_join ("a", KD_MEMBER_WORKER, 0, "k", "conn");
    kd_member_t *b = s_join ("b", KD_MEMBER_WORKER, 1, "k", "conn");
    char key [KD_MEMBERS_ID_MAX];
    s_key (NULL, "conn", key, sizeof key);
    cr_expect_eq (kd_members_find_id (s_members, key), a);
    zframe_t *id = zframe_new ("other", 5);
    kd_members_bind (s_members, b, NULL, id);
    zframe_destroy (&id);
    cr_expect_eq (kd_members_find_id (s_members, key), a);
    s_key (NULL, "other", key, sizeof key);
    cr_expect_eq (kd_members_find_id (s_members, key), b);
}

Test (kd_members, free_ranks)
{
    //  Workers: the hint when free, else the lowest free rank.
    cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_WORKER, false, 0), 0);
    cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_WORKER, true, 7), 7);
    s_join ("w0", KD_MEMBER_WORKER, 0, "k0", "a");
    s_join ("w7", KD_MEMBER_WORKER, 7, "k0", "b");
    cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_WORKER, false, 0), 1);
    cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_WORKER, true, 7), 1);
    cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_WORKER, true, KD_MEMBERS_MAX_WORKERS), 1);
    //  Shards: only the table's four ranks.
    cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_SHARD, true, 4), 0);
    for (uint64_t r = 0; r < 4; r++) {
        char name [16], id [16];
        snprintf (name, sizeof name, "s%llu", (unsigned long long) r);
        snprintf (id, sizeof id, "S%llu", (unsigned long long) r);
        cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_SHARD, true, 3 - r), (int64_t) (3 - r));
        s_join (name, KD_MEMBER_SHARD, 3 - r, id, id);
    }
    cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_SHARD, false, 0), -1);
    cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_SHARD, true, 2), -1);
    //  The monitor and evaluators have rank 0.
    cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_MONITOR, false, 0), 0);
    cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_EVALUATOR, true, 9), 0);
}

Test (kd_members, every_worker_rank_taken)
{
    kd_members_t *big = kd_members_new (1, KD_MEMBERS_MAX_WORKERS);
    cr_assert (big);
    for (uint64_t r = 0; r < KD_MEMBERS_MAX_WORKERS; r++) {
        char name [16];
        snprintf (name, sizeof name, "w%llu", (unsigned long long) r);
        cr_assert (kd_members_add (big, name, KD_MEMBER_WORKER, r, "k"));
    }
    cr_expect_eq (kd_members_free_rank (big, KD_MEMBER_WORKER, false, 0), -1);
    cr_expect_eq (kd_members_key_count (big, "k"), KD_MEMBERS_MAX_WORKERS);
    kd_members_destroy (&big);
}

Test (kd_members, key_count_and_its_limit)
{
    cr_expect_eq (kd_members_key_count (s_members, "k"), 0);
    s_join ("a", KD_MEMBER_WORKER, 0, "k", "1");
    s_join ("b", KD_MEMBER_WORKER, 1, "k", "2");
    kd_member_t *c = s_join ("c", KD_MEMBER_SHARD, 0, "k", "3");
    cr_expect_eq (kd_members_key_count (s_members, "k"), 3);
    //  A fourth name from the same key is refused and leaves no trace.
    cr_expect_null (kd_members_add (s_members, "d", KD_MEMBER_WORKER, 2, "k"));
    cr_expect_null (kd_members_find (s_members, "d"));
    cr_expect_null (kd_members_worker (s_members, 2));
    cr_expect_eq (kd_members_key_count (s_members, "k"), 3);
    cr_expect_eq (kd_members_size (s_members), 3);
    //  Another key is counted apart.
    cr_expect (kd_members_add (s_members, "d", KD_MEMBER_WORKER, 2, "other"));
    cr_expect_eq (kd_members_key_count (s_members, "other"), 1);
    //  Removing a member gives its key a name back, and frees its rank and
    //  its routing id.
    char key [KD_MEMBERS_ID_MAX];
    s_key (NULL, "3", key, sizeof key);
    kd_members_remove (s_members, &c);
    cr_expect_null (c);
    cr_expect_eq (kd_members_key_count (s_members, "k"), 2);
    cr_expect_null (kd_members_find (s_members, "c"));
    cr_expect_null (kd_members_shard (s_members, 0));
    cr_expect_null (kd_members_find_id (s_members, key));
    cr_expect_eq (kd_members_free_rank (s_members, KD_MEMBER_SHARD, true, 0), 0);
    cr_expect (kd_members_add (s_members, "e", KD_MEMBER_SHARD, 0, "k"));
    cr_expect_eq (kd_members_key_count (s_members, "k"), 3);
    //  The last name of a key gone: the key counts nothing.
    kd_member_t *d = kd_members_find (s_members, "d");
    kd_members_remove (s_members, &d);
    cr_expect_eq (kd_members_key_count (s_members, "other"), 0);
}

Test (kd_members, remove_the_monitor)
{
    kd_member_t *mon = s_join ("mon", KD_MEMBER_MONITOR, 0, "k", "m");
    cr_assert_eq (kd_members_monitor (s_members), mon);
    kd_members_remove (s_members, &mon);
    cr_expect_null (kd_members_monitor (s_members));
    cr_expect_eq (kd_members_size (s_members), 0);
}

Test (kd_members, iterate_and_count_live)
{
    const char *names [] = { "w0", "w1", "s0", "mon", "ev" };
    kd_member_role_t roles [] = { KD_MEMBER_WORKER, KD_MEMBER_WORKER, KD_MEMBER_SHARD,
                                  KD_MEMBER_MONITOR, KD_MEMBER_EVALUATOR };
    uint64_t ranks [] = { 0, 1, 0, 0, 0 };
    kd_members_t *t = kd_members_new (1, 10);
    cr_assert (t);
    for (size_t i = 0; i < 5; i++)
        cr_assert (kd_members_add (t, names [i], roles [i], ranks [i], "k"));
    kd_members_find (t, "w0")->alive = true;
    kd_members_find (t, "w1")->alive = true;
    kd_members_find (t, "ev")->alive = true;
    //  Every member once.
    bool seen [5] = { false };
    size_t n = 0;
    for (kd_member_t *m = kd_members_first (t); m; m = kd_members_next (t)) {
        n++;
        for (size_t i = 0; i < 5; i++)
            if (!strcmp (m->name, names [i])) {
                cr_expect_not (seen [i], "%s twice", names [i]);
                seen [i] = true;
            }
    }
    cr_expect_eq (n, 5);
    for (size_t i = 0; i < 5; i++)
        cr_expect (seen [i], "%s not seen", names [i]);
    cr_expect_eq (kd_members_live (t, KD_MEMBER_WORKER), 2);
    cr_expect_eq (kd_members_live (t, KD_MEMBER_EVALUATOR), 1);
    cr_expect_eq (kd_members_live (t, KD_MEMBER_SHARD), 0);
    kd_members_find (t, "w1")->alive = false;
    cr_expect_eq (kd_members_live (t, KD_MEMBER_WORKER), 1);
    kd_members_destroy (&t);
}

Test (kd_members, silent_members)
{
    kd_member_t *a = s_join ("a", KD_MEMBER_WORKER, 0, "k", "1");
    kd_member_t *b = s_join ("b", KD_MEMBER_SHARD, 1, "k", "2");
    kd_member_t *c = s_join ("c", KD_MEMBER_WORKER, 1, "k2", "3");
    a->last_seen = 1000;
    b->last_seen = 5000;
    c->last_seen = 1000;
    c->alive = false;            //  already dead: not declared again
    //  At 6000 with a limit of 3000, a is silent (5000 ms) and b is not.
    zlistx_t *silent = kd_members_silent (s_members, 6000, 3000);
    cr_assert (silent);
    cr_expect_eq (zlistx_size (silent), 1);
    cr_expect_eq (zlistx_first (silent), a);
    zlistx_destroy (&silent);
    //  Exactly the limit is not silence.
    silent = kd_members_silent (s_members, 6000, 5000);
    cr_expect_eq (zlistx_size (silent), 0);
    zlistx_destroy (&silent);
    silent = kd_members_silent (s_members, 9000, 3000);
    cr_expect_eq (zlistx_size (silent), 2);
    zlistx_destroy (&silent);
}

Test (kd_members, destroy_nulls_the_pointer)
{
    kd_members_t *t = kd_members_new (2, 2);
    cr_assert (t);
    kd_member_t *m = kd_members_add (t, "w", KD_MEMBER_WORKER, 0, "k");
    cr_assert (m);
    zframe_t *id = zframe_new ("x", 1);
    kd_members_bind (t, m, NULL, id);
    zframe_destroy (&id);
    m->endpoint = strdup ("tcp://127.0.0.1:1");
    kd_members_destroy (&t);
    cr_expect_null (t);
    //  A second destroy of the nulled pointer is harmless.
    kd_members_destroy (&t);
    cr_expect_null (t);
}
