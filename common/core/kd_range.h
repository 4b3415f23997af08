/*  kd_range: contiguous partitioning of [0, n) into parts.

    Used for the shards' key ranges of the parameter vector and for the
    workers' partitions of the training set.  Part i gets
    [floor (i*n/parts), floor ((i+1)*n/parts)): the sizes differ by at most
    one, every key is in exactly one part, and parts are in order.
*/
#ifndef KD_RANGE_H_INCLUDED
#define KD_RANGE_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

//  Range of part `index` of `parts`.  Returns 0, or -1 if parts is 0 or
//  index >= parts.
int
    kd_range_split (uint64_t n, uint64_t parts, uint64_t index,
                    uint64_t *lo, uint64_t *hi);

//  Which part holds key; -1 if key >= n or parts is 0 (or parts exceeds
//  INT64_MAX, whose indices the return type cannot hold).
int64_t
    kd_range_owner (uint64_t n, uint64_t parts, uint64_t key);

//  Which of `parts` holds key under consistent hashing (the jump hash of
//  Lamping and Veach, 2014): keys spread evenly whatever their order, so
//  a run of hot neighbouring keys lands on many parts, and adding a part
//  moves only the keys it takes, about 1/(parts+1) of them.  -1 if parts
//  is 0 or over INT32_MAX.
int64_t
    kd_range_hash_owner (uint64_t parts, uint64_t key);

#ifdef __cplusplus
}
#endif

#endif
