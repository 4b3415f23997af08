/*  kd_speed: a worker's speed schedule (grammar in kd_speed.h).

    A spec is parsed once into a list of terms whose factors multiply.
    Every term is a pure function of time, so the same spec gives the same
    schedule in the worker that obeys it and in the experiment runner that
    reports on it (speed shares, change times for the regroup lag).  Only
    the noise term has state: a splitmix64 stream seeded by kd_speed_new's
    seed, advanced once per kd_speed_factor call.

    The bursts of a burst: term are drawn from a hash of its ID and the
    window number, never from the seed, which is what makes workers that
    share an ID slow down together.
*/
#include "kd_speed.h"
#include "kd_util.h"
#include <assert.h>
#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_ID        32      //  longest burst ID
#define S_RAMP_STEPS    1000    //  kd_speed_changes samples a ramp this finely
#define S_EPS           1e-9    //  seconds: "just after" an edge
#define S_NOISE_SALT    0x6b645f73706565ULL     //  "kd_spee": noise stream
#define S_BURST_SALT    0x6b645f6275727374ULL   //  "kd_burst": burst pattern

typedef enum { S_CONST, S_SEG, S_ONOFF, S_BURST } s_kind_t;

typedef struct {
    double from;                //  seconds, inclusive
    double to;                  //  seconds, exclusive; INFINITY if open
    double f0;                  //  factor at from
    double f1;                  //  factor at to (f0 unless a ramp)
} s_segment_t;

typedef struct {
    s_kind_t kind;              //  which of the fields below apply
    double factor;              //  CONST; ONOFF and BURST when on
    s_segment_t *segments;      //  SEG: in time order
    size_t n_segments;          //  SEG: how many
    double period;              //  ONOFF: seconds
    double duty;                //  ONOFF: fraction of the period that is on
    double phase;               //  ONOFF: first period starts here
    uint64_t key;               //  BURST: hash of the ID
    double window;              //  BURST: seconds per window
    double length;              //  BURST: seconds per burst
    double prob;                //  BURST: chance of a burst in a window
} s_term_t;

struct _kd_speed_t {
    s_term_t terms [KD_SPEED_MAX_TERMS];    //  factors that multiply
    size_t n_terms;             //  terms in use
    double sigma;               //  noise: log-sd (0 = none)
    bool has_noise;             //  a noise term was given
    uint64_t rng;               //  noise: splitmix64 state
};

//  --------------------------------------------------------------------------
//  Parsing

typedef struct {
    const char *p;              //  cursor
    const char *term;           //  start of the current term
    size_t term_len;            //  its length
    size_t index;               //  1-based number of the current term
    char *err;                  //  message buffer
    size_t err_size;            //  its size
} s_parser_t;

//  Report a problem with the current term; always returns -1.
static int
s_fail (s_parser_t *ps, const char *what)
{
    int shown = ps->term_len > 40 ? 40 : (int) ps->term_len;
    snprintf (ps->err, ps->err_size, "speed spec: term %zu '%.*s%s': %s", ps->index, shown,
              ps->term, ps->term_len > 40 ? "..." : "", what);
    return -1;
}

//  A plain non-negative decimal: digits, an optional fraction, an optional
//  exponent.  No sign, no NaN or infinity, no hex.  Returns 0 or -1 with
//  the error set.
static int
s_number (s_parser_t *ps, const char *what, double *out)
{
    const char *p = ps->p;
    char msg [96];
    if (*p == '-') {
        snprintf (msg, sizeof msg, "%s must not be negative", what);
        return s_fail (ps, msg);
    }
    const char *start = p;
    size_t digits = 0;
    while (isdigit ((unsigned char) *p)) {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (isdigit ((unsigned char) *p)) {
            p++;
            digits++;
        }
    }
    if (digits == 0) {
        snprintf (msg, sizeof msg, "expected %s (a number) at '%.12s'", what, ps->p);
        return s_fail (ps, msg);
    }
    if ((*p == 'e' || *p == 'E')
    &&  (isdigit ((unsigned char) p [1])
         || ((p [1] == '+' || p [1] == '-') && isdigit ((unsigned char) p [2])))) {
        p += 2;
        while (isdigit ((unsigned char) *p))
            p++;
    }
    char buf [64];
    if ((size_t) (p - start) >= sizeof buf) {
        snprintf (msg, sizeof msg, "%s: number too long", what);
        return s_fail (ps, msg);
    }
    memcpy (buf, start, (size_t) (p - start));
    buf [p - start] = 0;
    double v = strtod (buf, NULL);
    if (!isfinite (v)) {
        snprintf (msg, sizeof msg, "%s is out of range", what);
        return s_fail (ps, msg);
    }
    ps->p = p;
    *out = v;
    return 0;
}

//  A factor: a number in (0, KD_SPEED_MAX_FACTOR].
static int
s_factor (s_parser_t *ps, double *out)
{
    if (s_number (ps, "factor", out))
        return -1;
    if (!(*out > 0))
        return s_fail (ps, "factor must be greater than 0");
    if (*out > KD_SPEED_MAX_FACTOR) {
        char msg [64];
        snprintf (msg, sizeof msg, "factor must be at most %g", KD_SPEED_MAX_FACTOR);
        return s_fail (ps, msg);
    }
    return 0;
}

//  A time in seconds: a number in [0, KD_SPEED_MAX_TIME].
static int
s_time (s_parser_t *ps, const char *what, double *out)
{
    if (s_number (ps, what, out))
        return -1;
    if (*out > KD_SPEED_MAX_TIME) {
        char msg [96];
        snprintf (msg, sizeof msg, "%s must be at most %g s", what, KD_SPEED_MAX_TIME);
        return s_fail (ps, msg);
    }
    return 0;
}

//  Expect one character.
static int
s_expect (s_parser_t *ps, char c, const char *after)
{
    if (*ps->p != c) {
        char msg [96];
        snprintf (msg, sizeof msg, "expected '%c' after %s", c, after);
        return s_fail (ps, msg);
    }
    ps->p++;
    return 0;
}

//  True at the end of the current term.
static bool
s_at_end (s_parser_t *ps)
{
    return ps->p >= ps->term + ps->term_len;
}

//  seg: segment { "," segment }
static int
s_parse_seg (s_parser_t *ps, s_term_t *term)
{
    term->kind = S_SEG;
    term->segments = (s_segment_t *) calloc (KD_SPEED_MAX_SEGMENTS, sizeof (s_segment_t));
    assert (term->segments);
    double last_to = 0;
    while (true) {
        if (term->n_segments == KD_SPEED_MAX_SEGMENTS) {
            char msg [64];
            snprintf (msg, sizeof msg, "more than %d segments", KD_SPEED_MAX_SEGMENTS);
            return s_fail (ps, msg);
        }
        s_segment_t *seg = &term->segments [term->n_segments];
        if (term->n_segments > 0 && isinf (last_to))
            return s_fail (ps, "only the last segment may be open-ended");
        if (s_time (ps, "segment start", &seg->from) || s_expect (ps, '-', "segment start"))
            return -1;
        seg->to = INFINITY;
        if (*ps->p != '=' && s_time (ps, "segment end", &seg->to))
            return -1;
        if (s_expect (ps, '=', "segment times") || s_factor (ps, &seg->f0))
            return -1;
        seg->f1 = seg->f0;
        if (*ps->p == '>') {
            ps->p++;
            if (s_factor (ps, &seg->f1))
                return -1;
            if (isinf (seg->to))
                return s_fail (ps, "a ramp needs an end time");
        }
        if (!(seg->to > seg->from))
            return s_fail (ps, "segment ends before it starts");
        if (term->n_segments > 0 && seg->from < last_to)
            return s_fail (ps, "segments overlap or go backwards in time");
        last_to = seg->to;
        term->n_segments++;
        if (s_at_end (ps))
            return 0;
        if (s_expect (ps, ',', "a segment"))
            return -1;
    }
}

//  onoff: PERIOD "," DUTY "," FACTOR [ "," PHASE ]
static int
s_parse_onoff (s_parser_t *ps, s_term_t *term)
{
    term->kind = S_ONOFF;
    if (s_time (ps, "period", &term->period) || s_expect (ps, ',', "the period")
    ||  s_number (ps, "duty", &term->duty) || s_expect (ps, ',', "the duty")
    ||  s_factor (ps, &term->factor))
        return -1;
    if (*ps->p == ',') {
        ps->p++;
        if (s_time (ps, "phase", &term->phase))
            return -1;
    }
    if (term->period < KD_SPEED_MIN_PERIOD) {
        char msg [64];
        snprintf (msg, sizeof msg, "period must be at least %g s", KD_SPEED_MIN_PERIOD);
        return s_fail (ps, msg);
    }
    if (term->duty > 1)
        return s_fail (ps, "duty must be in [0, 1]");
    return 0;
}

//  burst: ID "," WINDOW "," LENGTH "," FACTOR [ "," PROB ]
static int
s_parse_burst (s_parser_t *ps, s_term_t *term)
{
    term->kind = S_BURST;
    term->prob = 1;
    //  FNV-1a of the ID, then mixed: a stable key for the pattern.
    uint64_t hash = 0xcbf29ce484222325ULL;
    size_t n = 0;
    while (isalnum ((unsigned char) *ps->p) || *ps->p == '_') {
        hash = (hash ^ (uint64_t) (unsigned char) *ps->p) * 0x100000001b3ULL;
        ps->p++;
        n++;
    }
    if (n == 0 || n > S_MAX_ID) {
        char msg [96];
        snprintf (msg, sizeof msg, "burst ID must be 1 to %d letters, digits or '_'", S_MAX_ID);
        return s_fail (ps, msg);
    }
    term->key = kd_mix64 (hash ^ S_BURST_SALT);
    if (s_expect (ps, ',', "the burst ID")
    ||  s_time (ps, "window", &term->window) || s_expect (ps, ',', "the window")
    ||  s_time (ps, "burst length", &term->length) || s_expect (ps, ',', "the burst length")
    ||  s_factor (ps, &term->factor))
        return -1;
    if (*ps->p == ',') {
        ps->p++;
        if (s_number (ps, "probability", &term->prob))
            return -1;
    }
    if (term->window < KD_SPEED_MIN_PERIOD) {
        char msg [64];
        snprintf (msg, sizeof msg, "window must be at least %g s", KD_SPEED_MIN_PERIOD);
        return s_fail (ps, msg);
    }
    if (!(term->length > 0) || term->length > term->window)
        return s_fail (ps, "burst length must be in (0, window]");
    if (term->prob > 1)
        return s_fail (ps, "probability must be in [0, 1]");
    return 0;
}

//  One term, between ps->term and ps->term + ps->term_len.
static int
s_parse_term (s_parser_t *ps, kd_speed_t *self)
{
    ps->p = ps->term;
    s_term_t *term = &self->terms [self->n_terms];
    memset (term, 0, sizeof *term);
    int rc;
    if (isdigit ((unsigned char) *ps->p) || *ps->p == '.' || *ps->p == '-') {
        term->kind = S_CONST;
        rc = s_factor (ps, &term->factor);
    }
    else
    if (!strncmp (ps->p, "seg:", 4)) {
        ps->p += 4;
        rc = s_parse_seg (ps, term);
    }
    else
    if (!strncmp (ps->p, "onoff:", 6)) {
        ps->p += 6;
        rc = s_parse_onoff (ps, term);
    }
    else
    if (!strncmp (ps->p, "burst:", 6)) {
        ps->p += 6;
        rc = s_parse_burst (ps, term);
    }
    else
    if (!strncmp (ps->p, "noise:", 6)) {
        ps->p += 6;
        if (self->has_noise)
            return s_fail (ps, "at most one noise term");
        self->has_noise = true;
        double sigma;
        rc = s_number (ps, "sigma", &sigma);
        if (rc == 0 && sigma > KD_SPEED_MAX_SIGMA) {
            char msg [64];
            snprintf (msg, sizeof msg, "sigma must be at most %g", KD_SPEED_MAX_SIGMA);
            return s_fail (ps, msg);
        }
        if (rc == 0)
            self->sigma = sigma;
        return rc == 0 && !s_at_end (ps) ? s_fail (ps, "unexpected text after the sigma") : rc;
    }
    else
        return s_fail (ps, "unknown term (expected a factor, seg:, onoff:, burst: or noise:)");
    if (rc == 0 && !s_at_end (ps)) {
        char msg [64];
        snprintf (msg, sizeof msg, "unexpected '%c'", *ps->p);
        rc = s_fail (ps, msg);
    }
    //  Counted even on failure, so destroy frees its segments.
    self->n_terms++;
    return rc;
}

//  Parse a schedule.
kd_speed_t *
kd_speed_new (const char *spec, uint64_t seed, char *err, size_t err_size)
{
    assert (err && err_size > 0);
    err [0] = 0;
    if (!spec)
        spec = "";
    size_t len = strnlen (spec, KD_SPEED_MAX_SPEC + 1);
    if (len > KD_SPEED_MAX_SPEC) {
        snprintf (err, err_size, "speed spec: longer than %d bytes", KD_SPEED_MAX_SPEC);
        return NULL;
    }
    kd_speed_t *self = (kd_speed_t *) calloc (1, sizeof *self);
    assert (self);
    self->rng = kd_mix64 (seed ^ S_NOISE_SALT);
    s_parser_t ps = { .err = err, .err_size = err_size };
    const char *p = spec;
    while (true) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        ps.term = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        ps.term_len = (size_t) (p - ps.term);
        ps.index++;
        if (self->n_terms == KD_SPEED_MAX_TERMS) {
            snprintf (err, err_size, "speed spec: more than %d terms", KD_SPEED_MAX_TERMS);
            kd_speed_destroy (&self);
            return NULL;
        }
        if (s_parse_term (&ps, self)) {
            kd_speed_destroy (&self);
            return NULL;
        }
    }
    return self;
}

//  Destroy a schedule.
void
kd_speed_destroy (kd_speed_t **self_p)
{
    assert (self_p);
    kd_speed_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->n_terms; i++)
        free (self->terms [i].segments);
    free (self);
    *self_p = NULL;
}

//  --------------------------------------------------------------------------
//  Evaluation

//  A uniform double in [0, 1) from 64 random bits.
static double
s_unit (uint64_t bits)
{
    return (double) (bits >> 11) * 0x1.0p-53;
}

//  The burst of window k, if there is one: its start time.
static bool
s_burst_at (const s_term_t *term, int64_t k, double *start)
{
    uint64_t h = kd_mix64 (term->key ^ kd_mix64 ((uint64_t) k));
    if (!(s_unit (h) < term->prob))
        return false;
    double offset = s_unit (kd_mix64 (h)) * (term->window - term->length);
    *start = (double) k * term->window + offset;
    return true;
}

//  The segment holding t, or NULL.
static const s_segment_t *
s_segment_at (const s_term_t *term, double t)
{
    size_t lo = 0, hi = term->n_segments;
    //  Last segment whose start is <= t.
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (term->segments [mid].from <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    const s_segment_t *seg = &term->segments [lo - 1];
    return t < seg->to ? seg : NULL;
}

//  One term's factor at t.
static double
s_term_value (const s_term_t *term, double t)
{
    switch (term->kind) {
        case S_CONST:
            return term->factor;
        case S_SEG: {
            const s_segment_t *seg = s_segment_at (term, t);
            if (!seg)
                return 1;
            if (seg->f0 == seg->f1)
                return seg->f0;
            return seg->f0 + (seg->f1 - seg->f0) * (t - seg->from) / (seg->to - seg->from);
        }
        case S_ONOFF: {
            if (t < term->phase)
                return 1;
            double x = fmod (t - term->phase, term->period);
            return x < term->duty * term->period ? term->factor : 1;
        }
        case S_BURST: {
            int64_t k = (int64_t) floor (t / term->window);
            double start;
            if (s_burst_at (term, k, &start) && t >= start && t < start + term->length)
                return term->factor;
            return 1;
        }
    }
    return 1;
}

//  The deterministic factor at t_s.
double
kd_speed_base (kd_speed_t *self, double t_s)
{
    assert (self);
    double t = isfinite (t_s) && t_s > 0 ? t_s : 0;
    double f = 1;
    for (size_t i = 0; i < self->n_terms; i++)
        f *= s_term_value (&self->terms [i], t);
    return f;
}

//  The factor with this iteration's noise.
double
kd_speed_factor (kd_speed_t *self, double t_s)
{
    assert (self);
    double f = kd_speed_base (self, t_s);
    if (self->sigma > 0) {
        //  Box-Muller from two fresh uniforms; u1 in (0, 1] keeps log finite.
        double u1 = 1.0 - s_unit (kd_splitmix64 (&self->rng));
        double u2 = s_unit (kd_splitmix64 (&self->rng));
        double z = sqrt (-2.0 * log (u1)) * cos (2.0 * M_PI * u2);
        f *= exp (self->sigma * z);
    }
    if (f < KD_SPEED_FLOOR)
        f = KD_SPEED_FLOOR;
    if (f > KD_SPEED_CEILING)
        f = KD_SPEED_CEILING;
    return f;
}

//  --------------------------------------------------------------------------
//  Change times

//  The first time after t at which a term may change (an edge, or the next
//  sample of a ramp); INFINITY if none before limit.
static double
s_term_next (const s_term_t *term, double t, double limit)
{
    double after = t + S_EPS;
    double next = INFINITY;
    switch (term->kind) {
        case S_CONST:
            break;
        case S_SEG:
            for (size_t i = 0; i < term->n_segments; i++) {
                const s_segment_t *seg = &term->segments [i];
                if (seg->from > after) {
                    next = fmin (next, seg->from);
                    break;
                }
                if (seg->to > after) {
                    next = fmin (next, seg->to);
                    if (seg->f0 != seg->f1) {
                        double step = (seg->to - seg->from) / S_RAMP_STEPS;
                        double k = floor ((after - seg->from) / step) + 1;
                        next = fmin (next, seg->from + k * step);
                    }
                    break;
                }
            }
            break;
        case S_ONOFF: {
            if (term->duty <= 0 || term->duty >= 1) {
                if (term->phase > after && term->duty >= 1)
                    next = term->phase;
                break;
            }
            if (term->phase > after) {
                next = term->phase;
                break;
            }
            double k = floor ((after - term->phase) / term->period);
            double start = term->phase + k * term->period;
            double off = start + term->duty * term->period;
            next = off > after ? off : start + term->period;
            break;
        }
        case S_BURST: {
            int64_t k = (int64_t) floor (after / term->window);
            for (; (double) k * term->window <= limit; k++) {
                double start;
                if (!s_burst_at (term, k, &start))
                    continue;
                if (start > after) {
                    next = start;
                    break;
                }
                if (start + term->length > after) {
                    next = start + term->length;
                    break;
                }
            }
            break;
        }
    }
    return next;
}

//  Times in [0, t_end) where the deterministic factor moves by more than
//  KD_SPEED_CHANGE from the last reported level.
size_t
kd_speed_changes (kd_speed_t *self, double t_end, double *times, size_t max)
{
    assert (self);
    assert (times || max == 0);
    if (!(t_end > 0))
        return 0;
    if (t_end > KD_SPEED_MAX_TIME)
        t_end = KD_SPEED_MAX_TIME;
    size_t count = 0;
    double level = 1;
    double t = 0;
    while (t < t_end) {
        //  The value just after t: edges are inclusive at their start.
        double f = kd_speed_base (self, t + S_EPS);
        double ratio = f > level ? f / level : level / f;
        if (ratio > KD_SPEED_CHANGE) {
            if (count < max)
                times [count] = t;
            count++;
            level = f;
        }
        double next = INFINITY;
        for (size_t i = 0; i < self->n_terms; i++)
            next = fmin (next, s_term_next (&self->terms [i], t, t_end));
        //  Every candidate lies beyond t + S_EPS, so this always advances.
        t = next;
    }
    return count;
}
