/*  test_kd_sampler: the lease book.

    The sampler cuts every epoch's seeded permutation into leases of at most
    a batch, serves returned leases first (last returned, first served),
    and counts applied rows per epoch.  These tests check the order of the
    leases, the short last lease of an epoch, the rollover, the returned
    stack, the applied counts and shares, and that kd_sampler_rows turns the
    leases of an epoch into a permutation of the rows that depends on
    (seed, epoch) only.
*/
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "kd_sampler.h"

TestSuite (kd_sampler);

//  A book that must be created.
static kd_sampler_t *
s_new (uint64_t rows, uint32_t batch, uint64_t seed, uint64_t first_epoch)
{
    kd_sampler_t *sampler = kd_sampler_new (rows, batch, seed, first_epoch);
    cr_assert (sampler, "rows %lu batch %u refused", (unsigned long) rows, batch);
    return sampler;
}

//  Expect a lease to be (epoch, pos, count).
static void
s_expect_lease (kd_lease_t lease, uint64_t epoch, uint64_t pos, uint32_t count)
{
    cr_expect (lease.epoch == epoch && lease.pos == pos && lease.count == count,
               "lease (%lu, %lu, %u), expected (%lu, %lu, %u)",
               (unsigned long) lease.epoch, (unsigned long) lease.pos, lease.count,
               (unsigned long) epoch, (unsigned long) pos, count);
}

//  The rows of one whole epoch, in permutation order: the concatenation of
//  its leases.  Caller frees.
static uint32_t *
s_epoch_rows (kd_sampler_t *sampler, uint64_t epoch)
{
    uint64_t rows = kd_sampler_rows_per_epoch (sampler);
    uint32_t *out = calloc (rows, sizeof (uint32_t));
    cr_assert (out);
    kd_lease_t whole = { .epoch = epoch, .pos = 0, .count = (uint32_t) rows };
    cr_assert_eq (kd_sampler_rows (sampler, whole, out), 0);
    return out;
}


//  --------------------------------------------------------------------------
//  Construction

Test (kd_sampler, new_rejects_zero_rows_or_batch)
{
    cr_expect_null (kd_sampler_new (0, 8, 1, 0));
    cr_expect_null (kd_sampler_new (100, 0, 1, 0));
    cr_expect_null (kd_sampler_new (0, 0, 1, 0));
    cr_expect_null (kd_sampler_new ((uint64_t) UINT32_MAX + 1, 8, 1, 0),
                    "row indices are 32-bit");
    kd_sampler_t *sampler = s_new (100, 8, 1, 0);
    cr_expect_eq (kd_sampler_rows_per_epoch (sampler), 100);
    cr_expect_eq (kd_sampler_applied_rows (sampler), 0);
    cr_expect_eq (kd_sampler_epochs_completed (sampler), 0);
    cr_expect_eq (kd_sampler_returned (sampler), 0);
    cr_expect_eq (kd_sampler_epoch_share (sampler, 0), 0.0);
    kd_sampler_destroy (&sampler);
    cr_expect_null (sampler);
    kd_sampler_destroy (&sampler);
}


//  --------------------------------------------------------------------------
//  Leases

Test (kd_sampler, leases_in_order_with_a_short_last_one)
{
    //  20 rows in leases of 7: 7, 7, 6, then the next epoch.
    kd_sampler_t *sampler = s_new (20, 7, 3, 0);
    s_expect_lease (kd_sampler_take (sampler), 0, 0, 7);
    s_expect_lease (kd_sampler_take (sampler), 0, 7, 7);
    s_expect_lease (kd_sampler_take (sampler), 0, 14, 6);
    s_expect_lease (kd_sampler_take (sampler), 1, 0, 7);
    s_expect_lease (kd_sampler_take (sampler), 1, 7, 7);
    s_expect_lease (kd_sampler_take (sampler), 1, 14, 6);
    s_expect_lease (kd_sampler_take (sampler), 2, 0, 7);
    kd_sampler_destroy (&sampler);

    //  A batch that divides the rows leaves no short lease.
    sampler = s_new (12, 4, 3, 0);
    for (uint64_t epoch = 0; epoch < 3; epoch++)
        for (uint64_t pos = 0; pos < 12; pos += 4)
            s_expect_lease (kd_sampler_take (sampler), epoch, pos, 4);
    kd_sampler_destroy (&sampler);

    //  A batch above the rows: one lease per epoch, of every row.
    sampler = s_new (5, 64, 3, 0);
    for (uint64_t epoch = 0; epoch < 4; epoch++)
        s_expect_lease (kd_sampler_take (sampler), epoch, 0, 5);
    kd_sampler_destroy (&sampler);

    //  Batch 1 and a single row.
    sampler = s_new (1, 1, 3, 0);
    for (uint64_t epoch = 0; epoch < 4; epoch++)
        s_expect_lease (kd_sampler_take (sampler), epoch, 0, 1);
    kd_sampler_destroy (&sampler);
}

Test (kd_sampler, first_epoch_starts_the_book)
{
    //  A resumed run starts at a later epoch; earlier ones are not counted.
    kd_sampler_t *sampler = s_new (10, 4, 3, 5);
    s_expect_lease (kd_sampler_take (sampler), 5, 0, 4);
    s_expect_lease (kd_sampler_take (sampler), 5, 4, 4);
    s_expect_lease (kd_sampler_take (sampler), 5, 8, 2);
    s_expect_lease (kd_sampler_take (sampler), 6, 0, 4);
    kd_sampler_applied (sampler, (kd_lease_t) { .epoch = 4, .pos = 0, .count = 4 });
    cr_expect_eq (kd_sampler_applied_rows (sampler), 0, "epoch before the first ignored");
    cr_expect_eq (kd_sampler_epoch_share (sampler, 4), 0.0);
    kd_sampler_applied (sampler, (kd_lease_t) { .epoch = 5, .pos = 0, .count = 4 });
    cr_expect_eq (kd_sampler_epoch_share (sampler, 5), 0.4);
    kd_sampler_destroy (&sampler);
}

Test (kd_sampler, give_back_is_served_first_last_in_first_out)
{
    kd_sampler_t *sampler = s_new (20, 7, 3, 0);
    kd_lease_t a = kd_sampler_take (sampler);
    kd_lease_t b = kd_sampler_take (sampler);
    kd_lease_t c = kd_sampler_take (sampler);
    kd_sampler_give_back (sampler, a);
    kd_sampler_give_back (sampler, c);
    cr_expect_eq (kd_sampler_returned (sampler), 2);
    //  "No lease" is not queued.
    kd_sampler_give_back (sampler, (kd_lease_t) { 0 });
    cr_expect_eq (kd_sampler_returned (sampler), 2);
    s_expect_lease (kd_sampler_take (sampler), c.epoch, c.pos, c.count);
    cr_expect_eq (kd_sampler_returned (sampler), 1);
    kd_sampler_give_back (sampler, b);
    s_expect_lease (kd_sampler_take (sampler), b.epoch, b.pos, b.count);
    s_expect_lease (kd_sampler_take (sampler), a.epoch, a.pos, a.count);
    cr_expect_eq (kd_sampler_returned (sampler), 0);
    //  Then the fresh leases go on where they were.
    s_expect_lease (kd_sampler_take (sampler), 1, 0, 7);
    //  A lease of an old epoch comes back before the current one's.
    kd_sampler_give_back (sampler, b);
    s_expect_lease (kd_sampler_take (sampler), 0, 7, 7);
    s_expect_lease (kd_sampler_take (sampler), 1, 7, 7);
    kd_sampler_destroy (&sampler);
}


//  --------------------------------------------------------------------------
//  Applied rows

Test (kd_sampler, applied_rows_epochs_completed_and_share)
{
    kd_sampler_t *sampler = s_new (20, 7, 3, 0);
    kd_lease_t epoch0 [3], epoch1 [3];
    for (int i = 0; i < 3; i++)
        epoch0 [i] = kd_sampler_take (sampler);
    for (int i = 0; i < 3; i++)
        epoch1 [i] = kd_sampler_take (sampler);
    kd_sampler_applied (sampler, epoch0 [0]);
    cr_expect_eq (kd_sampler_applied_rows (sampler), 7);
    cr_expect_eq (kd_sampler_epoch_share (sampler, 0), 7.0 / 20);
    cr_expect_eq (kd_sampler_epoch_share (sampler, 1), 0.0);
    kd_sampler_applied (sampler, epoch0 [2]);
    kd_sampler_applied (sampler, epoch1 [1]);
    cr_expect_eq (kd_sampler_applied_rows (sampler), 20);
    cr_expect_eq (kd_sampler_epochs_completed (sampler), 0);
    kd_sampler_applied (sampler, epoch0 [1]);
    cr_expect_eq (kd_sampler_epochs_completed (sampler), 1);
    cr_expect_eq (kd_sampler_epoch_share (sampler, 0), 1.0, "exactly 1");
    kd_sampler_applied (sampler, epoch1 [0]);
    kd_sampler_applied (sampler, epoch1 [2]);
    cr_expect_eq (kd_sampler_epochs_completed (sampler), 2);
    cr_expect_eq (kd_sampler_epoch_share (sampler, 1), 1.0);
    cr_expect_eq (kd_sampler_applied_rows (sampler), 40);
    //  A lease with no rows counts nothing.
    kd_sampler_applied (sampler, (kd_lease_t) { .epoch = 2, .pos = 0, .count = 0 });
    cr_expect_eq (kd_sampler_applied_rows (sampler), 40);
    //  A row applied twice shows as a share above 1 and completes nothing
    //  more.
    kd_sampler_applied (sampler, epoch1 [0]);
    cr_expect_gt (kd_sampler_epoch_share (sampler, 1), 1.0);
    cr_expect_eq (kd_sampler_epochs_completed (sampler), 2);
    //  Epochs never touched have share 0.
    cr_expect_eq (kd_sampler_epoch_share (sampler, 9), 0.0);
    kd_sampler_destroy (&sampler);
}

//  An epoch is complete when every one of its rows was applied, and the
//  scheduler reads kd_sampler_epochs_completed as "epochs 0 .. done-1 are
//  complete": it reports kd_sampler_epoch_share (e) for e < done as the
//  completed epochs' shares, the share of epoch `done` as the current one,
//  and stops for --epochs E once done >= E.  A lease of epoch 0 that is
//  still out (its worker is slow, or its gradient keeps being dropped)
//  while epoch 1 completes must therefore not count epoch 1 as the first
//  completed epoch.
Test (kd_sampler, epochs_completed_counts_a_complete_prefix)
{
    kd_sampler_t *sampler = s_new (20, 7, 3, 0);
    kd_lease_t held = kd_sampler_take (sampler);
    for (int i = 0; i < 5; i++)
        kd_sampler_applied (sampler, kd_sampler_take (sampler));
    cr_assert_eq (kd_sampler_epoch_share (sampler, 0), 13.0 / 20);
    cr_assert_eq (kd_sampler_epoch_share (sampler, 1), 1.0);
    cr_expect_eq (kd_sampler_epochs_completed (sampler), 0,
                  "epoch 0 is incomplete, yet %lu epochs count as completed",
                  (unsigned long) kd_sampler_epochs_completed (sampler));
    kd_sampler_applied (sampler, held);
    cr_expect_eq (kd_sampler_epochs_completed (sampler), 2);
    kd_sampler_destroy (&sampler);
}


//  --------------------------------------------------------------------------
//  Rows

Test (kd_sampler, rows_are_a_permutation_of_each_epoch)
{
    uint64_t rows = 1000;
    kd_sampler_t *sampler = s_new (rows, 7, 42, 0);
    uint8_t *seen = calloc (rows, 1);
    uint32_t out [7];
    cr_assert (seen);
    for (uint64_t epoch = 0; epoch < 4; epoch++) {
        memset (seen, 0, rows);
        uint64_t covered = 0;
        for (;;) {
            kd_lease_t lease = kd_sampler_take (sampler);
            if (lease.epoch != epoch) {
                kd_sampler_give_back (sampler, lease);
                break;
            }
            cr_assert_eq (kd_sampler_rows (sampler, lease, out), 0);
            for (uint32_t i = 0; i < lease.count; i++) {
                cr_assert_lt (out [i], rows);
                cr_assert_not (seen [out [i]], "row %u twice in epoch %lu", out [i],
                               (unsigned long) epoch);
                seen [out [i]] = 1;
                covered++;
            }
        }
        cr_expect_eq (covered, rows, "epoch %lu covers %lu rows",
                      (unsigned long) epoch, (unsigned long) covered);
    }
    free (seen);
    kd_sampler_destroy (&sampler);
}

Test (kd_sampler, rows_depend_on_seed_and_epoch_only)
{
    uint64_t rows = 500;
    kd_sampler_t *a = s_new (rows, 7, 42, 0);
    kd_sampler_t *b = s_new (rows, 13, 42, 3);      //  other batch and start
    kd_sampler_t *c = s_new (rows, 7, 43, 0);
    uint32_t *a0 = s_epoch_rows (a, 0);
    uint32_t *a1 = s_epoch_rows (a, 1);
    uint32_t *a2 = s_epoch_rows (a, 2);
    uint32_t *a3 = s_epoch_rows (a, 3);
    //  Evicted from the cache and computed again: the same permutation.
    uint32_t *a0_again = s_epoch_rows (a, 0);
    cr_expect_eq (memcmp (a0, a0_again, rows * sizeof (uint32_t)), 0);
    //  Another process with the same seed computes the same rows.
    uint32_t *b0 = s_epoch_rows (b, 0);
    uint32_t *b3 = s_epoch_rows (b, 3);
    cr_expect_eq (memcmp (a0, b0, rows * sizeof (uint32_t)), 0);
    cr_expect_eq (memcmp (a3, b3, rows * sizeof (uint32_t)), 0);
    //  Epochs differ, and so do seeds.
    cr_expect_neq (memcmp (a0, a1, rows * sizeof (uint32_t)), 0);
    cr_expect_neq (memcmp (a1, a2, rows * sizeof (uint32_t)), 0);
    uint32_t *c0 = s_epoch_rows (c, 0);
    cr_expect_neq (memcmp (a0, c0, rows * sizeof (uint32_t)), 0);
    //  And a permutation is not the identity.
    uint32_t moved = 0;
    for (uint32_t i = 0; i < rows; i++)
        moved += a0 [i] != i;
    cr_expect_gt (moved, rows / 2);
    //  A lease is a slice of its epoch's permutation.
    uint32_t slice [13];
    kd_lease_t lease = { .epoch = 2, .pos = 487, .count = 13 };
    cr_assert_eq (kd_sampler_rows (a, lease, slice), 0);
    cr_expect_eq (memcmp (slice, a2 + 487, 13 * sizeof (uint32_t)), 0);
    free (a0);
    free (a1);
    free (a2);
    free (a3);
    free (a0_again);
    free (b0);
    free (b3);
    free (c0);
    kd_sampler_destroy (&a);
    kd_sampler_destroy (&b);
    kd_sampler_destroy (&c);
}

Test (kd_sampler, rows_of_an_out_of_range_lease_are_refused)
{
    kd_sampler_t *sampler = s_new (20, 7, 3, 0);
    uint32_t out [32];
    memset (out, 0xAB, sizeof out);
    cr_expect_eq (kd_sampler_rows (sampler, (kd_lease_t) { 0, 21, 1 }, out), -1);
    cr_expect_eq (kd_sampler_rows (sampler, (kd_lease_t) { 0, 14, 7 }, out), -1);
    cr_expect_eq (kd_sampler_rows (sampler, (kd_lease_t) { 0, 0, 21 }, out), -1);
    cr_expect_eq (kd_sampler_rows (sampler, (kd_lease_t) { 0, UINT64_MAX, 2 }, out), -1);
    cr_expect_eq (out [0], 0xABABABABu, "a refused lease writes nothing");
    //  Up to the end is fine, and so is no lease at all.
    cr_expect_eq (kd_sampler_rows (sampler, (kd_lease_t) { 0, 14, 6 }, out), 0);
    cr_expect_eq (kd_sampler_rows (sampler, (kd_lease_t) { 0, 20, 0 }, out), 0);
    cr_expect_eq (kd_sampler_rows (sampler, (kd_lease_t) { 7, 0, 20 }, out), 0);
    kd_sampler_destroy (&sampler);
}
