/*  test_kd_range: the contiguous split and its owner lookup.

    Shards and workers each compute their own range from (n, parts), so the
    split must tile [0, n) exactly and owner() must agree with it for every
    key, including when there are more parts than keys.
*/
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include "kd_range.h"

TestSuite (kd_range);

//  Check split and owner for one (n, parts): tiling, order, balance, and
//  that every key's owner is the part whose range holds it.
static void
s_check_partition (uint64_t n, uint64_t parts)
{
    uint64_t expect_lo = 0;
    uint64_t min_size = UINT64_MAX, max_size = 0;
    for (uint64_t i = 0; i < parts; i++) {
        uint64_t lo, hi;
        cr_assert_eq (kd_range_split (n, parts, i, &lo, &hi), 0);
        cr_expect_eq (lo, expect_lo, "n=%lu parts=%lu part %lu starts at %lu",
                      n, parts, i, lo);
        cr_expect_leq (lo, hi);
        uint64_t size = hi - lo;
        if (size < min_size)
            min_size = size;
        if (size > max_size)
            max_size = size;
        for (uint64_t k = lo; k < hi; k++)
            cr_expect_eq (kd_range_owner (n, parts, k), (int64_t) i,
                          "n=%lu parts=%lu key %lu", n, parts, k);
        expect_lo = hi;
    }
    cr_expect_eq (expect_lo, n, "n=%lu parts=%lu ends at %lu", n, parts,
                  expect_lo);
    cr_expect_leq (max_size - min_size, 1, "n=%lu parts=%lu sizes %lu..%lu",
                   n, parts, min_size, max_size);
    cr_expect_eq (kd_range_owner (n, parts, n), -1);
}

Test (kd_range, small_combinations_tile_exactly)
{
    for (uint64_t n = 0; n <= 120; n++)
        for (uint64_t parts = 1; parts <= 17; parts++)
            s_check_partition (n, parts);
}

Test (kd_range, more_parts_than_keys)
{
    s_check_partition (0, 5);
    s_check_partition (1, 7);
    s_check_partition (3, 10);
    s_check_partition (10, 64);
    //  Exactly n parts of one key each when n of them are non-empty.
    uint64_t lo, hi, nonempty = 0;
    for (uint64_t i = 0; i < 64; i++) {
        cr_assert_eq (kd_range_split (10, 64, i, &lo, &hi), 0);
        if (hi > lo) {
            cr_expect_eq (hi - lo, 1);
            nonempty++;
        }
    }
    cr_expect_eq (nonempty, 10);
}

Test (kd_range, realistic_sizes)
{
    //  The MLP vector over shards and the training set over workers.
    s_check_partition (101898, 3);
    s_check_partition (7850, 4);
    s_check_partition (60000, 7);
    uint64_t lo, hi;
    cr_assert_eq (kd_range_split (60000, 4, 1, &lo, &hi), 0);
    cr_expect_eq (lo, 15000);
    cr_expect_eq (hi, 30000);
}

Test (kd_range, invalid_arguments)
{
    uint64_t lo = 77, hi = 77;
    cr_expect_eq (kd_range_split (10, 0, 0, &lo, &hi), -1);
    cr_expect_eq (kd_range_split (10, 3, 3, &lo, &hi), -1);
    cr_expect_eq (kd_range_split (10, 3, UINT64_MAX, &lo, &hi), -1);
    cr_expect_eq (lo, 77, "outputs untouched on error");
    cr_expect_eq (hi, 77);
    cr_expect_eq (kd_range_owner (10, 0, 0), -1);
    cr_expect_eq (kd_range_owner (10, 3, 10), -1);
    cr_expect_eq (kd_range_owner (0, 3, 0), -1);
    cr_expect_eq (kd_range_owner (10, 3, UINT64_MAX), -1);
}

Test (kd_range, big_n_does_not_overflow)
{
    const uint64_t n = UINT64_C (1) << 62;
    const uint64_t parts = 3;
    uint64_t lo [3], hi [3];
    for (uint64_t i = 0; i < parts; i++)
        cr_assert_eq (kd_range_split (n, parts, i, &lo [i], &hi [i]), 0);
    //  2^62 = 3 * 1537228672809129301 + 1.
    cr_expect_eq (lo [0], 0);
    cr_expect_eq (hi [0], UINT64_C (1537228672809129301));
    cr_expect_eq (lo [1], hi [0]);
    cr_expect_eq (hi [1], UINT64_C (3074457345618258602));
    cr_expect_eq (lo [2], hi [1]);
    cr_expect_eq (hi [2], n);
    for (uint64_t i = 0; i < parts; i++) {
        cr_expect_eq (kd_range_owner (n, parts, lo [i]), (int64_t) i);
        cr_expect_eq (kd_range_owner (n, parts, hi [i] - 1), (int64_t) i);
    }
    cr_expect_eq (kd_range_owner (n, parts, n - 1), 2);

    //  Largest n, many parts: boundaries stay monotone and owner agrees at
    //  each boundary.
    const uint64_t m = UINT64_MAX;
    const uint64_t many = 1000003;
    uint64_t prev_hi = 0;
    for (uint64_t i = 0; i < many; i += 9973) {
        uint64_t a, b;
        cr_assert_eq (kd_range_split (m, many, i, &a, &b), 0);
        cr_expect_geq (a, prev_hi);
        cr_expect_gt (b, a);
        cr_expect_eq (kd_range_owner (m, many, a), (int64_t) i);
        cr_expect_eq (kd_range_owner (m, many, b - 1), (int64_t) i);
        prev_hi = b;
    }
    uint64_t a, b;
    cr_assert_eq (kd_range_split (m, many, many - 1, &a, &b), 0);
    cr_expect_eq (b, m);
    cr_expect_eq (kd_range_owner (m, many, m - 1), (int64_t) (many - 1));
}

Test (kd_range, owner_rejects_unrepresentable_part_counts)
{
    cr_expect_eq (kd_range_owner (10, UINT64_MAX, 3), -1);
    //  INT64_MAX parts is still representable.
    cr_expect_eq (kd_range_owner (1, (uint64_t) INT64_MAX, 0),
                  INT64_MAX - 1);
}

Test (kd_range, hash_owner_spreads_keys_and_moves_few_when_a_part_is_added)
{
    cr_expect_eq (kd_range_hash_owner (0, 5), -1);
    cr_expect_eq (kd_range_hash_owner (1, 12345), 0);
    enum { N = 200000, P = 8 };
    uint64_t count [P + 1] = { 0 };
    int moved = 0, moved_elsewhere = 0;
    for (uint64_t k = 0; k < N; k++) {
        //  Neighbouring keys: a range partition would put them all on one part.
        int64_t a = kd_range_hash_owner (P, k), b = kd_range_hash_owner (P + 1, k);
        cr_assert (a >= 0 && a < P && b >= 0 && b <= P);
        count [a]++;
        if (a != b) {
            moved++;
            moved_elsewhere += b != P;
        }
        cr_assert_eq (kd_range_hash_owner (P, k), a, "not a function of the key");
    }
    for (int p = 0; p < P; p++)
        cr_expect (fabs ((double) count [p] - N / P) < 0.03 * N / P, "part %d holds %lu of %d", p,
                   (unsigned long) count [p], N);
    //  Adding a ninth part moves about a ninth of the keys, all to it.
    cr_expect (fabs ((double) moved - N / (P + 1)) < 0.05 * N / (P + 1), "moved %d", moved);
    cr_expect_eq (moved_elsewhere, 0, "a key moved between old parts");
}
