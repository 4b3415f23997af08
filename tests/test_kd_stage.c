/*  test_kd_stage: the shard's staging table.

    Staging, finding and removing under probe collisions; per-peer counts;
    and what no commit can name any more: a clock at or below its rank's
    last named clock, and, as a backstop, a gradient older than the time to
    live.  Each is left behind on purpose and must be swept, counted apart,
    while everything a commit may still name stays.
*/
#include <criterion/criterion.h>
#include "kd_stage.h"

static kd_stage_t *s_stage;

static void
setup (void)
{
    s_stage = kd_stage_new ();
    cr_assert (s_stage);
}

static void
teardown (void)
{
    kd_stage_destroy (&s_stage);
    cr_expect_null (s_stage);
}

TestSuite (kd_stage, .init = setup, .fini = teardown);

//  Stage a 16-byte gradient of (rank, clock) from peer at now.
static void
s_put (uint64_t rank, uint64_t clock, uint64_t peer, uint64_t now)
{
    float g [4] = { (float) rank, (float) clock, 0, 0 };
    zframe_t *frame = zframe_new (g, sizeof g);
    kd_stage_put (s_stage, rank, clock, peer, &frame, now);
    cr_assert_null (frame, "put takes the frame");
}

Test (kd_stage, put_find_remove_and_counts)
{
    //  Many keys, so that probe runs form and removals shift them.
    for (uint64_t r = 0; r < 64; r++)
        for (uint64_t c = 0; c < 32; c++)
            s_put (r, c, r % 3, 0);
    cr_expect_eq (kd_stage_count (s_stage), 64 * 32);
    cr_expect_eq (kd_stage_bytes (s_stage), 64 * 32 * 16);
    cr_expect_eq (kd_stage_peer_count (s_stage, 0), 22 * 32);
    for (uint64_t r = 0; r < 64; r += 2)
        for (uint64_t c = 0; c < 32; c++)
            kd_stage_remove (s_stage, r, c);
    kd_stage_remove (s_stage, 999, 999);        //  harmless
    cr_expect_eq (kd_stage_count (s_stage), 32 * 32);
    for (uint64_t r = 0; r < 64; r++)
        for (uint64_t c = 0; c < 32; c++) {
            zframe_t *g = kd_stage_find (s_stage, r, c);
            if (r % 2 == 0)
                cr_expect_null (g);
            else {
                cr_assert (g, "(%lu, %lu) lost by a removal", (unsigned long) r, (unsigned long) c);
                const float *v = (const float *) zframe_data (g);
                cr_expect (v [0] == (float) r && v [1] == (float) c);
            }
        }
    //  A replacement keeps one slot and moves the count to its new peer.
    s_put (1, 0, 7, 0);
    cr_expect_eq (kd_stage_count (s_stage), 32 * 32);
    cr_expect_eq (kd_stage_peer_count (s_stage, 7), 1);
    //  The walk sees each staged gradient once.
    kd_stage_item_t item;
    size_t seen = 0;
    for (bool more = kd_stage_first (s_stage, &item); more; more = kd_stage_next (s_stage, &item)) {
        cr_expect (item.rank % 2 == 1 && item.frame);
        seen++;
    }
    cr_expect_eq (seen, 32 * 32);
    kd_stage_purge (s_stage);
    cr_expect_eq (kd_stage_count (s_stage), 0);
    cr_expect_eq (kd_stage_bytes (s_stage), 0);
    cr_expect_eq (kd_stage_peer_count (s_stage, 7), 0);
    cr_expect_not (kd_stage_first (s_stage, &item));
}

Test (kd_stage, a_clock_below_a_named_one_is_swept)
{
    uint64_t orphaned = 0, expired = 0;
    //  Rank 3 pushed clock 4 and died before its ARRIVE; it came back and
    //  its clock 6 was committed.  Rank 5's clock 2 was committed, and a
    //  retry of it landed after the commit.  Rank 8's clock 7 waits for
    //  its commit, and rank 3's clock 7 too.
    s_put (3, 4, 1, 100);
    s_put (5, 2, 2, 100);
    s_put (8, 7, 3, 100);
    s_put (3, 7, 1, 100);
    kd_stage_named (s_stage, 3, 6, 150);
    kd_stage_named (s_stage, 5, 2, 150);
    kd_stage_named (s_stage, 8, 5, 150);
    kd_stage_named (s_stage, 1u << 20, 1, 150);    //  a rank past the table: ignored
    cr_expect_eq (kd_stage_sweep (s_stage, 200, 0, &orphaned, &expired), 2);
    cr_expect_eq (orphaned, 2);
    cr_expect_eq (expired, 0);
    cr_expect_null (kd_stage_find (s_stage, 3, 4));
    cr_expect_null (kd_stage_find (s_stage, 5, 2));
    cr_expect (kd_stage_find (s_stage, 8, 7), "a clock above the named one stays");
    cr_expect (kd_stage_find (s_stage, 3, 7));
    cr_expect_eq (kd_stage_peer_count (s_stage, 2), 0);
    //  Rank 9 had clock 50 committed, died and rejoined at the cluster's
    //  lowest clock: its new gradient, staged after that commit, lives.
    kd_stage_named (s_stage, 9, 50, 150);
    s_put (9, 20, 4, 300);
    cr_expect_eq (kd_stage_sweep (s_stage, 400, 0, &orphaned, &expired), 0);
    cr_expect (kd_stage_find (s_stage, 9, 20), "a rejoined worker's gradient was swept");
    //  Its commit names it; the latest naming counts from then on.
    kd_stage_remove (s_stage, 9, 20);
    kd_stage_named (s_stage, 9, 20, 450);
    s_put (9, 21, 4, 460);
    cr_expect_eq (kd_stage_sweep (s_stage, 500, 0, &orphaned, &expired), 0);
    //  A new scheduler session numbers clocks afresh: purge forgets marks.
    kd_stage_purge (s_stage);
    s_put (3, 0, 1, 600);
    cr_expect_eq (kd_stage_sweep (s_stage, 700, 0, &orphaned, &expired), 0);
    cr_expect (kd_stage_find (s_stage, 3, 0));
}

Test (kd_stage, passed_over_longer_than_the_ttl_is_swept)
{
    uint64_t orphaned = 0, expired = 0;
    s_put (1, 0, 1, 1000);
    s_put (2, 0, 1, 5000);
    //  ttl 0: no time limit.
    cr_expect_eq (kd_stage_sweep (s_stage, 100000, 0, &orphaned, &expired), 0);
    //  No commit since they were staged (a phase that waits): nothing
    //  expires, however long it waits.
    cr_expect_eq (kd_stage_sweep (s_stage, 900, 3000, &orphaned, &expired), 0);
    //  A commit at 7000 that named neither, with ttl 3000: the first was
    //  passed over for 6 s, the second for 2 s.
    cr_expect_eq (kd_stage_sweep (s_stage, 7000, 3000, &orphaned, &expired), 1);
    cr_expect_eq (expired, 1);
    cr_expect_eq (orphaned, 0);
    cr_expect_null (kd_stage_find (s_stage, 1, 0));
    cr_expect (kd_stage_find (s_stage, 2, 0));
    cr_expect_eq (kd_stage_count (s_stage), 1);
    //  An empty table sweeps nothing.
    kd_stage_purge (s_stage);
    cr_expect_eq (kd_stage_sweep (s_stage, 9000, 1, &orphaned, &expired), 0);
}
