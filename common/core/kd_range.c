/*  kd_range: contiguous partitioning of [0, n) into parts.

    Shards split the parameter vector with it and workers split the
    training set, so every process must compute the same boundaries from
    (n, parts) alone.  The products i*n and (key+1)*parts can exceed 64 bits
    for large n, so they are formed in 128-bit arithmetic.
*/
#include "kd_range.h"
#include <assert.h>

typedef unsigned __int128 s_u128_t;

//  floor (i * n / parts), exactly.
static uint64_t
s_boundary (uint64_t n, uint64_t parts, uint64_t i)
{
    return (uint64_t) (((s_u128_t) i * n) / parts);
}

//  Range of part index of parts.
int
kd_range_split (uint64_t n, uint64_t parts, uint64_t index,
                uint64_t *lo, uint64_t *hi)
{
    assert (lo && hi);
    if (parts == 0 || index >= parts)
        return -1;
    *lo = s_boundary (n, parts, index);
    *hi = s_boundary (n, parts, index + 1);
    return 0;
}

//  Part that holds key.  Part i starts at floor (i*n/parts) <= key exactly
//  when i*n < (key+1)*parts, so the owner, the last part starting at or
//  before key, is floor (((key+1)*parts - 1) / n).  That is below parts
//  because key < n.  Empty parts (parts > n) start where the next one
//  starts and so are never chosen.
int64_t
kd_range_owner (uint64_t n, uint64_t parts, uint64_t key)
{
    //  An index above INT64_MAX could not be returned.
    if (parts == 0 || key >= n || parts > (uint64_t) INT64_MAX)
        return -1;
    s_u128_t top = ((s_u128_t) key + 1) * parts - 1;
    return (int64_t) (top / n);
}

int64_t
kd_range_hash_owner (uint64_t parts, uint64_t key)
{
    if (parts == 0 || parts > INT32_MAX)
        return -1;
    //  Jump consistent hash: follow the key's jumps through bucket counts
    //  with a linear congruential generator seeded by the key.
    int64_t b = -1, j = 0;
    while (j < (int64_t) parts) {
        b = j;
        key = key * 2862933555777941757ull + 1;
        j = (int64_t) ((double) (b + 1) * ((double) (1ll << 31) / (double) ((key >> 33) + 1)));
    }
    return b;
}
