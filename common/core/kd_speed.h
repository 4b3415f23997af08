/*  kd_speed: a worker's speed schedule, for experiments.

    A schedule gives a slowdown factor as a function of the time since
    training started: 1 is nominal speed, 4 is four times slower.  A worker
    multiplies its emulated compute time by the factor it draws each
    iteration.  The schedule is written as a short text spec; the terms of a
    spec multiply:

        spec    = [ term { SPACE term } ]          empty (or "1") = constant 1
        term    = FACTOR                           persistent factor: "4"
                | "seg:" segment { "," segment }   segments by time
                | "onoff:" PERIOD "," DUTY "," FACTOR [ "," PHASE ]
                | "burst:" ID "," WINDOW "," LENGTH "," FACTOR [ "," PROB ]
                | "noise:" SIGMA                   per-iteration log-normal noise
        segment = FROM "-" [ TO ] "=" FACTOR [ ">" FACTOR ]

    - seg: the factor during [FROM, TO) seconds; "F0>F1" ramps linearly from
      F0 at FROM to F1 at TO.  Segments go forward in time and do not
      overlap; only the last may leave TO out (open-ended).  Outside every
      segment the term is 1.  "seg:0-10=1,10-40=1>4,40-=4".
    - onoff: from PHASE (default 0) on, each PERIOD seconds starts with
      DUTY * PERIOD seconds at FACTOR, then runs at 1 until the next period.
      "onoff:20,0.25,3" is 3x slow during [0,5), [20,25), ...
    - burst: correlated bursts.  Time is cut into windows of WINDOW seconds;
      in each window, with probability PROB (default 1), a burst of LENGTH
      seconds at FACTOR starts at a random offset.  The pattern depends only
      on ID (letters, digits, '_'), not on the seed, so workers with the same
      ID slow down together.  "burst:rack1,30,5,3".
    - noise: each iteration draws a factor exp (SIGMA * z), z ~ N(0, 1), from
      a stream seeded by the seed given to kd_speed_new; the median is the
      deterministic factor.  At most one noise term.

    Numbers are plain decimals (no sign, no NaN, no hex); factors lie in
    (0, KD_SPEED_MAX_FACTOR], times in [0, KD_SPEED_MAX_TIME].  A spec never
    contains ';' or '|', so lists of specs can be joined with either.
*/
#ifndef KD_SPEED_H_INCLUDED
#define KD_SPEED_H_INCLUDED

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KD_SPEED_MAX_SPEC      4096    //  longest spec, bytes
#define KD_SPEED_MAX_TERMS     16      //  terms per spec
#define KD_SPEED_MAX_SEGMENTS  256     //  segments per seg: term
#define KD_SPEED_MAX_FACTOR    1000.0  //  largest factor a spec may give
#define KD_SPEED_MAX_TIME      1e6     //  largest time in a spec, seconds
#define KD_SPEED_MAX_SIGMA     3.0     //  largest noise sigma
#define KD_SPEED_MIN_PERIOD    0.01    //  shortest onoff period / burst window, s
#define KD_SPEED_FLOOR         0.01    //  kd_speed_factor never returns less
#define KD_SPEED_CEILING       10000.0 //  ... nor more (noise tails)
#define KD_SPEED_CHANGE        1.2     //  kd_speed_changes: ratio that counts

typedef struct _kd_speed_t kd_speed_t;

//  Parse a schedule.  Returns NULL with a message naming the problem in err
//  when the spec is malformed.  seed seeds the per-iteration noise.  Caller
//  owns return value.
kd_speed_t *
    kd_speed_new (const char *spec, uint64_t seed, char *err, size_t err_size);

//  Destroy and null the caller's pointer.
void
    kd_speed_destroy (kd_speed_t **self_p);

//  Slowdown factor at t_s seconds since training started, in
//  [KD_SPEED_FLOOR, KD_SPEED_CEILING].  Draws the per-iteration noise, so
//  call it once per iteration.
double
    kd_speed_factor (kd_speed_t *self, double t_s);

//  The deterministic factor at t_s, without noise (for tests and reports).
double
    kd_speed_base (kd_speed_t *self, double t_s);

//  Times in [0, t_end) at which the deterministic factor changes by more
//  than 20 %: the ratio between the new factor and the last reported one
//  (1 before time 0) exceeds KD_SPEED_CHANGE either way.  That is the start
//  of a segment, an on/off or burst edge, or the point where a ramp has
//  moved far enough.  A schedule that starts away from 1 reports time 0.
//  Fills at most max times, in increasing order; returns how many there are.
size_t
    kd_speed_changes (kd_speed_t *self, double t_end, double *times, size_t max);

#ifdef __cplusplus
}
#endif

#endif
