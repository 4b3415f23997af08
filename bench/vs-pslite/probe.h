/*  probe.h: what the machine probes of this folder share (first_touch.c,
    three_copies.c): a monotonic clock in seconds and a qsort order for
    doubles, from which they take medians.  Standalone programs, so the
    helpers are static here rather than in a library.
*/
#ifndef PROBE_H_INCLUDED
#define PROBE_H_INCLUDED

#include <time.h>

static inline double
s_now (void)
{
    struct timespec t;
    clock_gettime (CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline int
s_cmp (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

#endif
