/*  kd_history_check: reads a run's history and says whether anything was
    lost.  See kd_history_check.h for what is checked; docs/chaos.md for the
    lines.

    It streams: kd_history_check_load merges the files by time and every
    line is judged as it comes, so memory follows what is still open, not
    the length of the run (a 30-minute soak writes about 240 MB).  What is
    kept:
    - the newest lease of each (rank, clock), until every range closed its
      epoch;
    - per range, the gradients of each version (and each CRC point) until
      every replica of the range went past it, so a second replica's apply
      is compared with the first and counted once;
    - per range and epoch, how often each position was applied and which
      gradients were, until the epoch closes: every position applied and
      the range two epochs further.  A closed epoch keeps one bit; a later
      apply in it can only apply its rows again, and is counted so;
    - the faults (their stall is measured as commits stream past), the
      resource samples (one a second a process) and the final CRCs.
*/
#define _GNU_SOURCE    //  vasprintf, open_memstream
#include "kd_history_check.h"
#include "kd_fault_plan.h"
#include <assert.h>
#include <czmq.h>
#include <dirent.h>
#include <json-c/json.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define S_MAX_RANGES        64          //  key ranges (kd_config: shards <= 64)
#define S_MAX_SOURCES       512         //  history files of one run
#define S_RECOVERY_WINDOW   15000000    //  us after a fault within which its
                                        //  stall is measured
#define S_MAX_EPOCHS        100000      //  epochs a history may name
#define S_VERSION_MARGIN    256         //  versions kept below every replica's,
                                        //  in case one is behind its line

typedef struct {
    uint64_t t;                 //  us: when the RELEASE went out
    uint64_t epoch, pos;        //  the lease's permutation and first position
    uint32_t count;             //  its rows
} s_lease_t;

typedef struct {
    uint64_t lo, version;       //  range, version at exit
    char crc [16];              //  params_crc
    char source [32];           //  shard-N
} s_final_t;

typedef struct {
    uint64_t t, t_end;          //  us: fired, and over (a pause's SIGCONT)
    char kind [16];             //  kd_fault_kind_name
    char target [48];           //  the process it hit
    bool fired;                 //  false: it could not be fired (note says why)
    char note [160];            //  why not
    uint64_t prev, stall;       //  us: the last commit after it, longest gap
    bool after;                 //  a commit came after it was over
    bool measured;              //  its window is over
} s_fault_t;

typedef struct {
    uint64_t t;                 //  us
    char name [32];             //  service
    int pid;                    //  its process
    double rss_kb, fds;         //  the figures
} s_sample_t;

typedef struct {
    char source [32];           //  shard-N
    int pid;                    //  its current process
    uint64_t version;           //  the last version it stood at
    bool any;                   //  version is valid
    uint64_t lo;                //  the range it serves
    bool placed;                //  lo is valid (a role line named it)
} s_incarnation_t;

typedef struct {
    uint8_t *counts;            //  times each position was applied
    uint64_t unapplied;         //  positions still at 0
    zhashx_t *grads;            //  rank/clock/pos -> version + 1
} s_epoch_t;

typedef struct {
    char *text;                 //  a version's gradients, or a CRC point's CRC (owned)
    char source [32];           //  who reported it first
} s_seen_t;

typedef struct {
    uint64_t lo;                //  its first key
    zhashx_t *versions;         //  version -> s_seen_t of its gradients
    zhashx_t *crcs;             //  version -> s_seen_t of its params_crc
    uint64_t released;          //  versions up to this were forgotten
    s_epoch_t **epochs;         //  per epoch while open (NULL: unseen or closed)
    uint8_t *closed;            //  per epoch: closed
    size_t n_epochs;            //  both allocated
    uint64_t top_epoch;         //  the highest epoch it applied
    bool any;                   //  something was applied
} s_range_t;

typedef struct {
    char kind [16];             //  fault kind
    size_t injected, survived;  //  how many, how many recovered
    double worst_ms;            //  longest stall after one
} s_kind_stat_t;

struct _kd_history_check_t {
    zhashx_t *leases;           //  "rank/clock" -> s_lease_t, the newest
    s_range_t ranges [S_MAX_RANGES];    //  what each range applied
    size_t n_ranges;            //  in use
    uint32_t *closed_on;        //  per epoch: ranges that closed it
    size_t n_closed_on;         //  allocated
    s_final_t *finals;          //  every final line
    size_t n_finals, cap_finals;
    s_fault_t *faults;          //  every fault line
    size_t n_faults, cap_faults, first_open;    //  and the first still measured
    s_sample_t *samples;        //  every resource sample
    size_t n_samples, cap_samples;
    s_incarnation_t inc [S_MAX_SOURCES];    //  each shard file's process
    size_t n_inc;               //  in use
    bool finished;              //  kd_history_check_run was called
    //  The scheduler's start and end
    bool started, ended;        //  lines seen
    uint64_t t_start, t_end;    //  us
    uint64_t rows, ranges_n, replicas;  //  rows per epoch, key ranges, replicas
    char reason [32];           //  why it ended
    char consistency [16];      //  the run's model
    uint64_t epochs_completed;  //  as its sampler counted
    //  kudus local and kd_chaos
    size_t restarts;            //  restarts kudus local made
    bool chaos;                 //  a chaos run (its lines were fed)
    char command [2048];        //  the command that reproduces it
    double soak_s;              //  its length
    double peers;               //  processes of the cluster: descriptors
                                //  may grow by one connection to each
    bool done;                  //  its done line was seen
    int local_code;             //  kudus local's exit code
    size_t leftovers;           //  processes left behind
    size_t malformed;           //  lines that were not JSON objects
    //  Findings
    char **failures;            //  sentences (owned)
    size_t n_failures, cap_failures;
    uint64_t rows_lost, rows_twice, grads_twice, unleased;
    size_t twice_listed, unleased_listed, late_listed;  //  failures of each kind listed
    size_t crc_lines, crc_compared; //  CRC points reported, compared between replicas
    s_kind_stat_t kinds [KD_FAULT_KINDS + 1];   //  per fault kind
    size_t n_kinds;             //  in use
    double growth_rss, growth_fds;  //  largest growth seen (fraction)
    char growth_rss_who [48], growth_fds_who [48];  //  whose
    size_t sampled;             //  processes judged
    size_t held, held_peak;     //  open state (leases, versions, epochs' gradients)
};

//  --------------------------------------------------------------------------
//  Small helpers

//  Append a failure sentence.
static void
s_fail (kd_history_check_t *self, const char *fmt, ...)
{
    if (self->n_failures == self->cap_failures) {
        self->cap_failures = self->cap_failures ? 2 * self->cap_failures : 16;
        self->failures = (char **) realloc (self->failures, self->cap_failures * sizeof (char *));
        assert (self->failures);
    }
    va_list args;
    va_start (args, fmt);
    char *s = NULL;
    if (vasprintf (&s, fmt, args) < 0)
        abort ();
    va_end (args);
    self->failures [self->n_failures++] = s;
}

//  Grow an array to hold one more element.
static void *
s_grow (void *array, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return array;
    *cap = *cap ? 2 * *cap : 16;
    array = realloc (array, *cap * size);
    assert (array);
    return array;
}

//  Grow a per-epoch array of elements of size to hold index e, zeroing the new part.
static void *
s_grow_to (void *array, size_t *n, size_t e, size_t size)
{
    if (e < *n)
        return array;
    size_t want = *n ? *n : 8;
    while (want <= e)
        want *= 2;
    array = realloc (array, want * size);
    assert (array);
    memset ((char *) array + *n * size, 0, (want - *n) * size);
    *n = want;
    return array;
}

//  One more (or one less) piece of open state.
static void
s_hold (kd_history_check_t *self, int delta)
{
    self->held = delta < 0 && self->held == 0 ? 0 : self->held + (size_t) (ptrdiff_t) delta;
    if (self->held > self->held_peak)
        self->held_peak = self->held;
}

static uint64_t
s_u (json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex (o, key, &v) ? (uint64_t) json_object_get_int64 (v) : 0;
}

static const char *
s_s (json_object *o, const char *key)
{
    json_object *v;
    const char *s = json_object_object_get_ex (o, key, &v) ? json_object_get_string (v) : NULL;
    return s ? s : "";
}

static bool
s_b (json_object *o, const char *key)
{
    json_object *v;
    return json_object_object_get_ex (o, key, &v) && json_object_get_boolean (v);
}

//  A JSON array of integers into a new array; its length in *n.
static uint64_t *
s_uints (json_object *o, const char *key, size_t *n)
{
    json_object *v;
    *n = 0;
    if (!json_object_object_get_ex (o, key, &v) || !json_object_is_type (v, json_type_array))
        return NULL;
    *n = json_object_array_length (v);
    uint64_t *out = (uint64_t *) malloc ((*n + 1) * sizeof (uint64_t));
    assert (out);
    for (size_t i = 0; i < *n; i++)
        out [i] = (uint64_t) json_object_get_int64 (json_object_array_get_idx (v, i));
    return out;
}

static void
s_free_destroy (void **item)
{
    free (*item);
    *item = NULL;
}

static void
s_seen_destroy (void **item)
{
    s_seen_t *s = (s_seen_t *) *item;
    if (s) {
        free (s->text);
        free (s);
        *item = NULL;
    }
}

static void
s_epoch_destroy (s_epoch_t **e_p)
{
    if (*e_p) {
        free ((*e_p)->counts);
        zhashx_destroy (&(*e_p)->grads);
        free (*e_p);
        *e_p = NULL;
    }
}

static void
s_range_destroy (s_range_t *r)
{
    for (size_t e = 0; e < r->n_epochs; e++)
        s_epoch_destroy (&r->epochs [e]);
    free (r->epochs);
    free (r->closed);
    zhashx_destroy (&r->versions);
    zhashx_destroy (&r->crcs);
}

//  --------------------------------------------------------------------------
//  Construction

kd_history_check_t *
kd_history_check_new (void)
{
    kd_history_check_t *self = (kd_history_check_t *) calloc (1, sizeof (kd_history_check_t));
    assert (self);
    self->leases = zhashx_new ();
    zhashx_set_destructor (self->leases, s_free_destroy);
    self->local_code = -1;
    return self;
}

void
kd_history_check_destroy (kd_history_check_t **self_p)
{
    assert (self_p);
    kd_history_check_t *self = *self_p;
    if (!self)
        return;
    for (size_t i = 0; i < self->n_failures; i++)
        free (self->failures [i]);
    free (self->failures);
    zhashx_destroy (&self->leases);
    for (size_t i = 0; i < self->n_ranges; i++)
        s_range_destroy (&self->ranges [i]);
    free (self->closed_on);
    free (self->finals);
    free (self->faults);
    free (self->samples);
    free (self);
    *self_p = NULL;
}

//  --------------------------------------------------------------------------
//  Ranges, epochs and versions

static s_range_t *
s_range (kd_history_check_t *self, uint64_t lo)
{
    for (size_t i = 0; i < self->n_ranges; i++)
        if (self->ranges [i].lo == lo)
            return &self->ranges [i];
    if (self->n_ranges == S_MAX_RANGES)
        return NULL;
    s_range_t *r = &self->ranges [self->n_ranges++];
    memset (r, 0, sizeof *r);
    r->lo = lo;
    r->versions = zhashx_new ();
    zhashx_set_destructor (r->versions, s_seen_destroy);
    r->crcs = zhashx_new ();
    zhashx_set_destructor (r->crcs, s_seen_destroy);
    return r;
}

//  Forget the leases of epoch e once every range closed it: no apply can
//  name them again without applying rows twice, which the closed epoch
//  reports.  (An epoch left open by a lost row keeps only its own.)
static void
s_release_leases (kd_history_check_t *self, uint64_t e)
{
    size_t ranges = self->ranges_n ? (size_t) self->ranges_n : self->n_ranges;
    if (self->closed_on [e] < ranges)
        return;
    zlistx_t *gone = zlistx_new ();
    for (s_lease_t *l = (s_lease_t *) zhashx_first (self->leases); l;
         l = (s_lease_t *) zhashx_next (self->leases))
        if (l->epoch == e)
            zlistx_add_end (gone, (void *) zhashx_cursor (self->leases));
    for (const char *key = (const char *) zlistx_first (gone); key;
         key = (const char *) zlistx_next (gone)) {
        zhashx_delete (self->leases, key);
        s_hold (self, -1);
    }
    zlistx_destroy (&gone);
}

//  Judge an epoch of a range and forget it: its rows applied twice (and,
//  at the end of the run, lost when the epoch was completed).
static void
s_epoch_close (kd_history_check_t *self, s_range_t *r, size_t e, bool at_end)
{
    s_epoch_t *ep = e < r->n_epochs ? r->epochs [e] : NULL;
    uint64_t lost = 0, twice = 0, first_lost = 0, first_twice = 0;
    for (uint64_t p = 0; p < self->rows; p++) {
        uint8_t c = ep ? ep->counts [p] : 0;
        if (c == 0 && !lost++)
            first_lost = p;
        if (c > 1 && !twice)
            first_twice = p;
        twice += c > 1 ? c - 1u : 0;
    }
    if (!at_end || e >= self->epochs_completed)
        lost = 0;
    if (lost)
        s_fail (self, "range %llu epoch %zu: %llu rows lost (never applied; the first at "
                "position %llu)", (unsigned long long) r->lo, e, (unsigned long long) lost,
                (unsigned long long) first_lost);
    if (twice)
        s_fail (self, "range %llu epoch %zu: %llu rows applied twice (the first at position "
                "%llu)", (unsigned long long) r->lo, e, (unsigned long long) twice,
                (unsigned long long) first_twice);
    self->rows_lost += lost;
    self->rows_twice += twice;
    if (ep)
        s_hold (self, -(int) zhashx_size (ep->grads) - 1);
    if (e < r->n_epochs)
        s_epoch_destroy (&r->epochs [e]);
    if (!at_end) {
        assert (e < r->n_epochs);
        r->closed [e] = 1;
        size_t n = self->n_closed_on;
        self->closed_on = (uint32_t *) s_grow_to (self->closed_on, &n, e, sizeof (uint32_t));
        self->n_closed_on = n;
        self->closed_on [e]++;
        s_release_leases (self, e);
    }
}

//  The open state of epoch e on a range, made when first needed.
static s_epoch_t *
s_epoch (kd_history_check_t *self, s_range_t *r, size_t e)
{
    if (e >= r->n_epochs) {
        size_t n = r->n_epochs;
        r->epochs = (s_epoch_t **) s_grow_to (r->epochs, &n, e, sizeof (s_epoch_t *));
        size_t m = r->n_epochs;
        r->closed = (uint8_t *) s_grow_to (r->closed, &m, e, 1);
        assert (m == n);
        r->n_epochs = n;
    }
    if (!r->epochs [e]) {
        s_epoch_t *ep = (s_epoch_t *) calloc (1, sizeof (s_epoch_t));
        assert (ep);
        ep->counts = (uint8_t *) calloc (self->rows + 1, 1);
        assert (ep->counts);
        ep->unapplied = self->rows;
        ep->grads = zhashx_new ();
        r->epochs [e] = ep;
        s_hold (self, 1);
    }
    return r->epochs [e];
}

//  Close the epochs of a range that are done: every position applied, and
//  the range two epochs further (a resent gradient of the epoch is still
//  told apart from another that applied its rows).
static void
s_epochs_settle (kd_history_check_t *self, s_range_t *r)
{
    for (size_t e = 0; e + 2 <= r->top_epoch && e < r->n_epochs; e++)
        if (r->epochs [e] && r->epochs [e]->unapplied == 0)
            s_epoch_close (self, r, e, false);
}

//  Forget the versions and CRC points of a range that every replica of it
//  went past: none will apply or report them again.
static void
s_versions_release (kd_history_check_t *self, s_range_t *r)
{
    uint64_t low = UINT64_MAX;
    for (size_t i = 0; i < self->n_inc; i++)
        if (self->inc [i].placed && self->inc [i].lo == r->lo && self->inc [i].any
        &&  self->inc [i].version < low)
            low = self->inc [i].version;
    if (low == UINT64_MAX || low < S_VERSION_MARGIN)
        return;
    low -= S_VERSION_MARGIN;
    for (uint64_t v = r->released + 1; v <= low; v++) {
        char vkey [32];
        snprintf (vkey, sizeof vkey, "%llu", (unsigned long long) v);
        if (zhashx_lookup (r->versions, vkey)) {
            zhashx_delete (r->versions, vkey);
            s_hold (self, -1);
        }
        if (zhashx_lookup (r->crcs, vkey)) {
            zhashx_delete (r->crcs, vkey);
            s_hold (self, -1);
        }
    }
    if (low > r->released)
        r->released = low;
}

static int
s_pair_cmp (const void *a, const void *b)
{
    const uint64_t *x = (const uint64_t *) a, *y = (const uint64_t *) b;
    if (x [0] != y [0])
        return x [0] < y [0] ? -1 : 1;
    return x [1] < y [1] ? -1 : x [1] > y [1];
}

//  The gradients of an apply as one sorted string, to compare replicas.
static char *
s_signature (const uint64_t *ranks, const uint64_t *clocks, size_t n)
{
    uint64_t *pairs = (uint64_t *) malloc ((2 * n + 1) * sizeof (uint64_t));
    assert (pairs);
    for (size_t i = 0; i < n; i++) {
        pairs [2 * i] = ranks [i];
        pairs [2 * i + 1] = clocks [i];
    }
    qsort (pairs, n, 2 * sizeof (uint64_t), s_pair_cmp);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream (&text, &len);
    for (size_t i = 0; i < n; i++)
        fprintf (f, "%llu/%llu,", (unsigned long long) pairs [2 * i], (unsigned long long) pairs [2 * i + 1]);
    fclose (f);
    free (pairs);
    return text;
}

//  The first report of a version (or CRC point) of a range, or NULL after
//  recording this one as it.  Takes ownership of text.
static s_seen_t *
s_seen (kd_history_check_t *self, zhashx_t *table, uint64_t version, char **text_p,
        const char *source)
{
    char vkey [32];
    snprintf (vkey, sizeof vkey, "%llu", (unsigned long long) version);
    s_seen_t *seen = (s_seen_t *) zhashx_lookup (table, vkey);
    if (seen)
        return seen;
    seen = (s_seen_t *) calloc (1, sizeof (s_seen_t));
    assert (seen);
    seen->text = *text_p;
    *text_p = NULL;
    snprintf (seen->source, sizeof seen->source, "%s", source);
    zhashx_insert (table, vkey, seen);
    s_hold (self, 1);
    return NULL;
}

//  Count one applied gradient's rows on its range; returns false when the
//  lease lies outside the epochs.
static void
s_count_rows (kd_history_check_t *self, s_range_t *r, uint64_t rank, uint64_t clock,
              const s_lease_t *lease, uint64_t version)
{
    if (lease->epoch >= S_MAX_EPOCHS || lease->pos + lease->count > self->rows) {
        s_fail (self, "range %llu: a lease outside the epochs (epoch %llu, positions %llu..%llu of %llu)",
                (unsigned long long) r->lo, (unsigned long long) lease->epoch,
                (unsigned long long) lease->pos, (unsigned long long) (lease->pos + lease->count),
                (unsigned long long) self->rows);
        return;
    }
    size_t e = (size_t) lease->epoch;
    if (e < r->n_epochs && r->closed [e]) {
        //  Every row of a closed epoch was applied: these are again.
        self->rows_twice += lease->count;
        if (self->late_listed++ < KD_CHECK_MAX_LISTED)
            s_fail (self, "range %llu: version %llu applied rank %llu clock %llu (epoch %llu, rows at "
                    "%llu..%llu) after every row of its epoch was: %u rows applied twice",
                    (unsigned long long) r->lo, (unsigned long long) version,
                    (unsigned long long) rank, (unsigned long long) clock,
                    (unsigned long long) lease->epoch, (unsigned long long) lease->pos,
                    (unsigned long long) (lease->pos + lease->count), lease->count);
        return;
    }
    s_epoch_t *ep = s_epoch (self, r, e);
    char gkey [96];
    snprintf (gkey, sizeof gkey, "%llu/%llu/%llu", (unsigned long long) rank,
              (unsigned long long) clock, (unsigned long long) lease->pos);
    uintptr_t before = (uintptr_t) zhashx_lookup (ep->grads, gkey);
    if (before) {
        self->grads_twice++;
        if (self->twice_listed++ < KD_CHECK_MAX_LISTED)
            s_fail (self, "range %llu: gradient rank %llu clock %llu (epoch %llu, rows at "
                    "%llu..%llu) applied twice, at versions %llu and %llu",
                    (unsigned long long) r->lo, (unsigned long long) rank,
                    (unsigned long long) clock, (unsigned long long) lease->epoch,
                    (unsigned long long) lease->pos,
                    (unsigned long long) (lease->pos + lease->count),
                    (unsigned long long) (before - 1), (unsigned long long) version);
    }
    else {
        zhashx_insert (ep->grads, gkey, (void *) (uintptr_t) (version + 1));
        s_hold (self, 1);
    }
    for (uint64_t p = lease->pos; p < lease->pos + lease->count; p++) {
        if (ep->counts [p] == 0)
            ep->unapplied--;
        if (ep->counts [p] < 255)
            ep->counts [p]++;
    }
    if (lease->epoch > r->top_epoch)
        r->top_epoch = lease->epoch;
}

//  A shard applied a version: counted once on its range however many
//  replicas applied it, each gradient resolved to its lease.
static void
s_on_apply (kd_history_check_t *self, const char *source, json_object *o, uint64_t version)
{
    s_range_t *r = s_range (self, s_u (o, "lo"));
    if (!r)
        return;
    r->any = true;
    size_t n = 0, nc = 0;
    uint64_t *ranks = s_uints (o, "ranks", &n);
    uint64_t *clocks = s_uints (o, "clocks", &nc);
    if (nc < n)
        n = nc;
    char *sig = s_signature (ranks, clocks, n);
    s_seen_t *seen = s_seen (self, r->versions, version, &sig, source);
    if (seen) {
        //  Another replica (or a resend) applied this version: it must
        //  have applied the same gradients, and counts once.
        if (strcmp (seen->text, sig))
            s_fail (self, "range %llu: version %llu applied with different gradients on two "
                    "replicas (%s: %s against %s: %s)", (unsigned long long) r->lo,
                    (unsigned long long) version, source, sig, seen->source, seen->text);
    }
    else
    if (version <= r->released)
        s_fail (self, "range %llu: %s applied version %llu after every replica went past it",
                (unsigned long long) r->lo, source, (unsigned long long) version);
    else {
        uint64_t t = s_u (o, "t");
        for (size_t g = 0; g < n; g++) {
            char key [48];
            snprintf (key, sizeof key, "%llu/%llu", (unsigned long long) ranks [g],
                      (unsigned long long) clocks [g]);
            const s_lease_t *lease = (const s_lease_t *) zhashx_lookup (self->leases, key);
            if (!lease || lease->t > t) {
                self->unleased++;
                if (self->unleased_listed++ < KD_CHECK_MAX_LISTED)
                    s_fail (self, "range %llu: version %llu applied rank %llu clock %llu, which no "
                            "open lease names (none was sent, or its epoch closed on every range and "
                            "this applies its rows again)", (unsigned long long) r->lo, (unsigned long long) version,
                            (unsigned long long) ranks [g], (unsigned long long) clocks [g]);
                continue;
            }
            s_count_rows (self, r, ranks [g], clocks [g], lease, version);
        }
        s_epochs_settle (self, r);
    }
    free (sig);
    free (ranks);
    free (clocks);
}

//  A shard's CRC point: every replica that made this version of the range
//  must hold the same parameters.
static void
s_on_crc (kd_history_check_t *self, const char *source, json_object *o, uint64_t version)
{
    s_range_t *r = s_range (self, s_u (o, "lo"));
    if (!r)
        return;
    self->crc_lines++;
    char *crc = strdup (s_s (o, "params_crc"));
    assert (crc);
    s_seen_t *seen = s_seen (self, r->crcs, version, &crc, source);
    if (seen) {
        self->crc_compared++;
        if (strcmp (seen->text, crc))
            s_fail (self, "range %llu: replicas differ at version %llu: %s params_crc %s, %s %s",
                    (unsigned long long) r->lo, (unsigned long long) version, seen->source,
                    seen->text, source, crc);
    }
    free (crc);
}

//  --------------------------------------------------------------------------
//  Feeding

//  The incarnation record of a shard's file.
static s_incarnation_t *
s_incarnation (kd_history_check_t *self, const char *source)
{
    for (size_t i = 0; i < self->n_inc; i++)
        if (!strcmp (self->inc [i].source, source))
            return &self->inc [i];
    if (self->n_inc == S_MAX_SOURCES)
        return NULL;
    s_incarnation_t *inc = &self->inc [self->n_inc++];
    snprintf (inc->source, sizeof inc->source, "%s", source);
    return inc;
}

//  A shard's line: its versions must only go up while one process lives.
static void
s_on_shard (kd_history_check_t *self, const char *source, const char *ev, json_object *o)
{
    s_incarnation_t *inc = s_incarnation (self, source);
    int pid = (int) s_u (o, "pid");
    uint64_t version = s_u (o, "version");
    if (inc && (inc->pid != pid || !strcmp (ev, "open"))) {
        inc->pid = pid;
        inc->any = false;
        inc->placed = false;
    }
    if (!strcmp (ev, "apply")) {
        if (inc && inc->any && version <= inc->version)
            s_fail (self, "%s pid %d applied version %llu after version %llu: versions went back",
                    source, pid, (unsigned long long) version, (unsigned long long) inc->version);
        if (s_b (o, "truncated"))
            s_fail (self, "%s: the apply of version %llu was too long to record", source,
                    (unsigned long long) version);
        s_on_apply (self, source, o, version);
    }
    else
    if (!strcmp (ev, "crc"))
        s_on_crc (self, source, o, version);
    else
    if (!strcmp (ev, "final")) {
        self->finals = (s_final_t *) s_grow (self->finals, &self->cap_finals, self->n_finals,
                                             sizeof (s_final_t));
        s_final_t *f = &self->finals [self->n_finals++];
        f->lo = s_u (o, "lo");
        f->version = version;
        snprintf (f->crc, sizeof f->crc, "%s", s_s (o, "params_crc"));
        snprintf (f->source, sizeof f->source, "%s", source);
    }
    if (!inc)
        return;
    if (!strcmp (ev, "role") || !strcmp (ev, "apply") || !strcmp (ev, "sync") || !strcmp (ev, "resync")) {
        inc->version = version;
        inc->any = true;
        inc->lo = s_u (o, "lo");
        inc->placed = true;
        s_range_t *r = s_range (self, inc->lo);
        if (r)
            s_versions_release (self, r);
    }
}

static void
s_on_scheduler (kd_history_check_t *self, const char *ev, json_object *o)
{
    if (!strcmp (ev, "start")) {
        self->started = true;
        self->t_start = s_u (o, "t");
        self->rows = s_u (o, "rows");
        self->ranges_n = s_u (o, "ranges");
        self->replicas = s_u (o, "replicas");
        snprintf (self->consistency, sizeof self->consistency, "%s", s_s (o, "consistency"));
    }
    else
    if (!strcmp (ev, "lease")) {
        char key [48];
        snprintf (key, sizeof key, "%llu/%llu", (unsigned long long) s_u (o, "rank"),
                  (unsigned long long) s_u (o, "clock"));
        s_lease_t *l = (s_lease_t *) zhashx_lookup (self->leases, key);
        if (!l) {
            l = (s_lease_t *) calloc (1, sizeof (s_lease_t));
            assert (l);
            zhashx_insert (self->leases, key, l);
            s_hold (self, 1);
        }
        //  Lines come in time order: the newest lease is the one an apply
        //  after it resolves to.
        *l = (s_lease_t) { .t = s_u (o, "t"), .epoch = s_u (o, "epoch"),
                           .pos = s_u (o, "pos"), .count = (uint32_t) s_u (o, "count") };
    }
    else
    if (!strcmp (ev, "commit")) {
        json_object *v;
        bool named = json_object_object_get_ex (o, "ranks", &v) && json_object_array_length (v) > 0;
        if (named) {
            //  The stall after each fault still being measured.
            uint64_t t = s_u (o, "t");
            for (size_t i = self->first_open; i < self->n_faults; i++) {
                s_fault_t *f = &self->faults [i];
                if (f->measured || !f->fired || t <= f->t)
                    continue;
                if (t - f->prev > f->stall)
                    f->stall = t - f->prev;
                f->prev = t;
                if (t > f->t_end) {
                    f->after = true;
                    f->measured = t > f->t_end + S_RECOVERY_WINDOW;
                }
            }
            while (self->first_open < self->n_faults
               && (self->faults [self->first_open].measured || !self->faults [self->first_open].fired))
                self->first_open++;
        }
    }
    else
    if (!strcmp (ev, "end")) {
        self->ended = true;
        self->t_end = s_u (o, "t");
        self->epochs_completed = s_u (o, "epochs_completed");
        snprintf (self->reason, sizeof self->reason, "%s", s_s (o, "reason"));
    }
}

static void
s_on_chaos (kd_history_check_t *self, const char *ev, json_object *o)
{
    self->chaos = true;
    if (!strcmp (ev, "begin")) {
        snprintf (self->command, sizeof self->command, "%s", s_s (o, "command"));
        self->soak_s = (double) s_u (o, "soak_ms") / 1000;
        self->peers = (double) s_u (o, "peers");
    }
    else
    if (!strcmp (ev, "fault")) {
        self->faults = (s_fault_t *) s_grow (self->faults, &self->cap_faults, self->n_faults,
                                             sizeof (s_fault_t));
        s_fault_t *f = &self->faults [self->n_faults++];
        memset (f, 0, sizeof *f);
        f->t = s_u (o, "t");
        f->prev = f->t;
        f->t_end = f->t + s_u (o, "duration_ms") * 1000;
        f->fired = s_b (o, "fired");
        snprintf (f->kind, sizeof f->kind, "%s", s_s (o, "kind"));
        snprintf (f->target, sizeof f->target, "%s", s_s (o, "target"));
        snprintf (f->note, sizeof f->note, "%s", s_s (o, "note"));
    }
    else
    if (!strcmp (ev, "sample")) {
        self->samples = (s_sample_t *) s_grow (self->samples, &self->cap_samples, self->n_samples,
                                               sizeof (s_sample_t));
        s_sample_t *s = &self->samples [self->n_samples++];
        s->t = s_u (o, "t");
        snprintf (s->name, sizeof s->name, "%s", s_s (o, "name"));
        s->pid = (int) s_u (o, "child");
        s->rss_kb = (double) s_u (o, "rss_kb");
        s->fds = (double) s_u (o, "fds");
    }
    else
    if (!strcmp (ev, "heal-failed"))
        s_fail (self, "%s's link would not come back after %s", s_s (o, "node"),
                s_b (o, "slow") ? "a slowed link" : "a partition");
    else
    if (!strcmp (ev, "leftover")) {
        self->leftovers++;
        s_fail (self, "%s pid %d was still running after the cluster stopped", s_s (o, "name"),
                (int) s_u (o, "child"));
    }
    else
    if (!strcmp (ev, "done")) {
        self->done = true;
        self->local_code = (int) s_u (o, "code");
    }
}

//  One parsed line from source.
static void
s_on_line (kd_history_check_t *self, const char *source, json_object *o)
{
    const char *ev = s_s (o, "ev");
    if (!strcmp (source, "scheduler"))
        s_on_scheduler (self, ev, o);
    else
    if (!strcmp (source, "chaos"))
        s_on_chaos (self, ev, o);
    else
    if (!strcmp (source, "local")) {
        if (!strcmp (ev, "restart"))
            self->restarts++;
    }
    else
        s_on_shard (self, source, ev, o);
}

//  A line as a JSON object, or NULL (counted as malformed).
static json_object *
s_parse (kd_history_check_t *self, const char *line)
{
    json_object *o = json_tokener_parse (line);
    if (!o || !json_object_is_type (o, json_type_object)) {
        json_object_put (o);
        self->malformed++;
        return NULL;
    }
    return o;
}

int
kd_history_check_line (kd_history_check_t *self, const char *source, const char *line)
{
    assert (self && source && line);
    if (!*line)
        return 0;
    json_object *o = s_parse (self, line);
    if (!o)
        return -2;
    s_on_line (self, source, o);
    json_object_put (o);
    return 0;
}

//  One history file being merged: its next line.
typedef struct {
    FILE *file;                 //  open (owned)
    char source [32];           //  scheduler, chaos, local, shard-N
    int order;                  //  ties at one t: scheduler, chaos, local, shards
    json_object *next;          //  its next line, parsed (owned), or NULL at its end
    uint64_t t;                 //  next's t
} s_input_t;

//  Read an input's next well-formed line.
static void
s_input_advance (kd_history_check_t *self, s_input_t *in, char **line, size_t *cap)
{
    json_object_put (in->next);
    in->next = NULL;
    ssize_t n;
    while (!in->next && (n = getline (line, cap, in->file)) > 0) {
        if ((*line) [n - 1] == '\n')
            (*line) [n - 1] = 0;
        if (**line)
            in->next = s_parse (self, *line);
    }
    in->t = in->next ? s_u (in->next, "t") : 0;
}

int
kd_history_check_load (kd_history_check_t *self, const char *dir, char *err, size_t err_size)
{
    DIR *d = opendir (dir);
    if (!d) {
        snprintf (err, err_size, "cannot read %s: %s", dir, strerror (errno));
        return -1;
    }
    s_input_t *inputs = (s_input_t *) calloc (S_MAX_SOURCES, sizeof (s_input_t));
    assert (inputs);
    size_t n_inputs = 0;
    char *line = NULL;
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir (d)) && n_inputs < S_MAX_SOURCES) {
        size_t len = strlen (e->d_name);
        if (len < 7 || strcmp (e->d_name + len - 6, ".jsonl") || len - 6 >= 32)
            continue;
        s_input_t *in = &inputs [n_inputs];
        snprintf (in->source, sizeof in->source, "%.*s", (int) (len - 6), e->d_name);
        in->order = !strcmp (in->source, "scheduler") ? 0 : !strcmp (in->source, "chaos") ? 1
                  : !strcmp (in->source, "local") ? 2 : !strncmp (in->source, "shard-", 6) ? 3 : -1;
        if (in->order < 0)
            continue;
        char path [2048];
        int fit = snprintf (path, sizeof path, "%s/%s", dir, e->d_name);
        in->file = fit > 0 && (size_t) fit < sizeof path ? fopen (path, "r") : NULL;
        if (!in->file)
            continue;
        s_input_advance (self, in, &line, &cap);
        n_inputs++;
    }
    closedir (d);
    //  Merge by time: a lease comes before the apply that names it, a
    //  fault before the commits after it.  Each file is in time order.
    while (true) {
        s_input_t *next = NULL;
        for (size_t i = 0; i < n_inputs; i++) {
            s_input_t *in = &inputs [i];
            if (in->next && (!next || in->t < next->t || (in->t == next->t && in->order < next->order)))
                next = in;
        }
        if (!next)
            break;
        s_on_line (self, next->source, next->next);
        s_input_advance (self, next, &line, &cap);
    }
    for (size_t i = 0; i < n_inputs; i++) {
        json_object_put (inputs [i].next);
        fclose (inputs [i].file);
    }
    free (inputs);
    free (line);
    return 0;
}

//  --------------------------------------------------------------------------
//  Checking

//  Every range applied every row of every completed epoch exactly once:
//  judge the epochs still open.
static void
s_check_rows (kd_history_check_t *self)
{
    for (uint64_t k = self->n_ranges; k < self->ranges_n; k++)
        s_fail (self, "only %zu of %llu ranges applied anything", self->n_ranges,
                (unsigned long long) self->ranges_n);
    for (size_t i = 0; i < self->n_ranges; i++) {
        s_range_t *r = &self->ranges [i];
        for (size_t e = 0; e < r->n_epochs || e < self->epochs_completed; e++)
            if (e >= r->n_epochs || !r->closed [e])
                s_epoch_close (self, r, e, true);
    }
}

//  The replicas of each range ended at one version with one CRC.
static void
s_check_finals (kd_history_check_t *self)
{
    for (size_t i = 0; i < self->n_finals; i++) {
        const s_final_t *f = &self->finals [i];
        bool first = true;
        for (size_t j = 0; j < i; j++)
            first = first && self->finals [j].lo != f->lo;
        if (!first)
            continue;
        uint64_t top = 0;
        size_t at_top = 0;
        for (size_t j = i; j < self->n_finals; j++)
            if (self->finals [j].lo == f->lo && self->finals [j].version > top)
                top = self->finals [j].version;
        const s_final_t *ref = NULL;
        for (size_t j = i; j < self->n_finals; j++) {
            const s_final_t *g = &self->finals [j];
            if (g->lo != f->lo)
                continue;
            if (g->version != top) {
                s_fail (self, "range %llu: %s ended at version %llu, its replica at %llu",
                        (unsigned long long) g->lo, g->source, (unsigned long long) g->version,
                        (unsigned long long) top);
                continue;
            }
            at_top++;
            if (!ref)
                ref = g;
            else
            if (strcmp (ref->crc, g->crc))
                s_fail (self, "range %llu: replicas differ at version %llu: %s params_crc %s, %s %s",
                        (unsigned long long) g->lo, (unsigned long long) top, ref->source, ref->crc,
                        g->source, g->crc);
        }
        if (self->replicas > 1 && at_top < 2)
            s_fail (self, "range %llu: %zu replica(s) reported a final params_crc; two are needed "
                    "to compare", (unsigned long long) f->lo, at_top);
    }
    if (self->replicas > 1 && self->n_finals == 0 && self->started)
        s_fail (self, "no shard reported its final params_crc (did they stop cleanly?)");
    if (self->replicas > 1 && self->crc_lines > 0 && self->crc_compared == 0)
        s_fail (self, "%zu CRC points were reported, none by two replicas of a range at one version",
                self->crc_lines);
}

//  A fault-kind's tally.
static s_kind_stat_t *
s_kind (kd_history_check_t *self, const char *kind)
{
    for (size_t i = 0; i < self->n_kinds; i++)
        if (!strcmp (self->kinds [i].kind, kind))
            return &self->kinds [i];
    if (self->n_kinds == KD_FAULT_KINDS + 1)
        return &self->kinds [KD_FAULT_KINDS];
    s_kind_stat_t *k = &self->kinds [self->n_kinds++];
    memset (k, 0, sizeof *k);
    snprintf (k->kind, sizeof k->kind, "%s", kind);
    return k;
}

//  After each fault the cluster committed again; its stall is the longest
//  gap between commits from the fault to a window after it (measured as
//  the commits streamed past).
static void
s_check_faults (kd_history_check_t *self)
{
    for (size_t i = 0; i < self->n_faults; i++) {
        s_fault_t *f = &self->faults [i];
        s_kind_stat_t *k = s_kind (self, f->kind);
        if (!f->fired) {
            s_fail (self, "fault %zu (%s %s) could not be fired: %s", i + 1, f->kind, f->target, f->note);
            continue;
        }
        k->injected++;
        if (!f->after) {
            s_fail (self, "fault %zu (%s %s): no commit after it", i + 1, f->kind, f->target);
            continue;
        }
        k->survived++;
        if ((double) f->stall / 1000 > k->worst_ms)
            k->worst_ms = (double) f->stall / 1000;
    }
}

static int
s_by_process (const void *a, const void *b)
{
    const s_sample_t *x = (const s_sample_t *) a, *y = (const s_sample_t *) b;
    int c = strcmp (x->name, y->name);
    if (c)
        return c;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->t < y->t ? -1 : x->t > y->t;
}

static int
s_double_cmp (const void *a, const void *b)
{
    double x = *(const double *) a, y = *(const double *) b;
    return x < y ? -1 : x > y;
}

//  Median of n values taken with a stride from samples (field at offset).
static double
s_median (const s_sample_t *s, size_t n, size_t offset)
{
    double *v = (double *) malloc ((n + 1) * sizeof (double));
    assert (v);
    for (size_t i = 0; i < n; i++)
        v [i] = *(const double *) ((const char *) &s [i] + offset);
    qsort (v, n, sizeof (double), s_double_cmp);
    double m = n ? v [n / 2] : 0;
    free (v);
    return m;
}

//  Under AddressSanitizer every freed block waits in a quarantine (256 MB
//  by default) before it is reused, so resident memory grows until the
//  quarantine is full whatever the code does: RSS growth is then reported
//  but does not fail the check.  Descriptors are judged as always.
#if defined (__SANITIZE_ADDRESS__)
#   define S_JUDGE_RSS false
#else
#   define S_JUDGE_RSS true
#endif

//  Judge one figure of one process: the median of the last third of its
//  samples after warm-up against the median of the first third.  Growth
//  is always reported (worst); it fails the check only when fatal.
static void
s_judge (kd_history_check_t *self, const s_sample_t *s, size_t n, size_t offset, const char *what,
         double floor, bool fatal, double *worst, char *worst_who, size_t who_size)
{
    size_t third = n / 3;
    double first = s_median (s, third, offset), last = s_median (s + n - third, third, offset);
    double growth = first > 0 ? (last - first) / first : 0;
    if (growth > *worst) {
        *worst = growth;
        snprintf (worst_who, who_size, "%s pid %d", s->name, s->pid);
    }
    if (fatal && growth > KD_CHECK_GROWTH && last - first > floor)
        s_fail (self, "%s pid %d: %s grew %.1f%% after warm-up (%.0f to %.0f)", s->name, s->pid, what,
                100 * growth, first, last);
}

//  Descriptors and RSS of every service stay flat after warm-up.
static void
s_check_resources (kd_history_check_t *self)
{
    //  No samples is no array at all: qsort may not be given NULL.
    if (self->n_samples > 1)
        qsort (self->samples, self->n_samples, sizeof (s_sample_t), s_by_process);
    double warmup_us = 1e6 * (self->soak_s * 0.2 > KD_CHECK_WARMUP_S ? self->soak_s * 0.2 : KD_CHECK_WARMUP_S);
    for (size_t i = 0; i < self->n_samples; ) {
        size_t j = i;
        while (j < self->n_samples && !strcmp (self->samples [j].name, self->samples [i].name)
               && self->samples [j].pid == self->samples [i].pid)
            j++;
        //  Warm-up is counted from training's start or the process's own.
        uint64_t from = self->samples [i].t > self->t_start ? self->samples [i].t : self->t_start;
        size_t a = i;
        while (a < j && (double) (self->samples [a].t - from) < warmup_us)
            a++;
        size_t b = a;
        while (b < j && (!self->ended || self->samples [b].t < self->t_end))
            b++;
        if (b - a >= KD_CHECK_MIN_SAMPLES) {
            self->sampled++;
            s_judge (self, &self->samples [a], b - a, offsetof (s_sample_t, rss_kb), "RSS (KiB)",
                     KD_CHECK_RSS_FLOOR_KB, S_JUDGE_RSS, &self->growth_rss, self->growth_rss_who,
                     sizeof self->growth_rss_who);
            //  A promoted replica opens a connection to each peer once:
            //  a step, not a leak, so the floor is the cluster's size.
            s_judge (self, &self->samples [a], b - a, offsetof (s_sample_t, fds), "descriptors",
                     self->peers > KD_CHECK_FDS_FLOOR ? self->peers : KD_CHECK_FDS_FLOOR, true,
                     &self->growth_fds, self->growth_fds_who,
                     sizeof self->growth_fds_who);
        }
        i = j;
    }
}

size_t
kd_history_check_run (kd_history_check_t *self)
{
    assert (self);
    //  What streamed past was judged as it came; the rest is judged once.
    if (self->finished)
        return self->n_failures;
    self->finished = true;
    if (self->malformed)
        s_fail (self, "%zu history lines are not JSON objects", self->malformed);
    if (!self->started)
        s_fail (self, "the scheduler's history has no start: training never began");
    else
    if (!self->ended)
        s_fail (self, "the scheduler's history has no end: the run did not finish");
    else
    if (strcmp (self->reason, "epochs") && strcmp (self->reason, "max-seconds")
    &&  strcmp (self->reason, "target-accuracy") && strcmp (self->reason, "accuracy"))
        s_fail (self, "the run ended on '%s', not on its target", self->reason);
    if (self->ended && self->epochs_completed == 0)
        s_fail (self, "the run completed no epoch");
    if (self->chaos && (!self->done || self->local_code != 0))
        s_fail (self, "kudus local %s", self->done ? "exited with an error" : "did not finish");
    if (self->started && self->rows > 0)
        s_check_rows (self);
    s_check_finals (self);
    s_check_faults (self);
    s_check_resources (self);
    return self->n_failures;
}

//  --------------------------------------------------------------------------
//  Results

size_t
kd_history_check_failures (kd_history_check_t *self)
{
    return self->n_failures;
}

const char *
kd_history_check_failure (kd_history_check_t *self, size_t index)
{
    return index < self->n_failures ? self->failures [index] : NULL;
}

uint64_t
kd_history_check_rows_lost (kd_history_check_t *self)
{
    return self->rows_lost;
}

uint64_t
kd_history_check_rows_twice (kd_history_check_t *self)
{
    return self->rows_twice;
}

uint64_t
kd_history_check_gradients_twice (kd_history_check_t *self)
{
    return self->grads_twice;
}

size_t
kd_history_check_faults (kd_history_check_t *self)
{
    size_t n = 0;
    for (size_t i = 0; i < self->n_kinds; i++)
        n += self->kinds [i].injected;
    return n;
}

size_t
kd_history_check_survived (kd_history_check_t *self)
{
    size_t n = 0;
    for (size_t i = 0; i < self->n_kinds; i++)
        n += self->kinds [i].survived;
    return n;
}

size_t
kd_history_check_restarts (kd_history_check_t *self)
{
    return self->restarts;
}

size_t
kd_history_check_crc_points (kd_history_check_t *self)
{
    return self->crc_compared;
}

size_t
kd_history_check_held_peak (kd_history_check_t *self)
{
    return self->held_peak;
}

void
kd_history_check_print (kd_history_check_t *self, FILE *out)
{
    fprintf (out, "kudus chaos: faults injected %zu, survived %zu; rows lost %llu, rows applied twice %llu, "
             "gradients applied twice %llu; restarts %zu; epochs completed %llu (%s)\n",
             kd_history_check_faults (self), kd_history_check_survived (self),
             (unsigned long long) self->rows_lost, (unsigned long long) self->rows_twice,
             (unsigned long long) self->grads_twice, self->restarts,
             (unsigned long long) self->epochs_completed, self->ended ? self->reason : "not finished");
    if (self->n_kinds) {
        fprintf (out, "kudus chaos: longest stall after a fault, per kind:");
        for (size_t i = 0; i < self->n_kinds; i++)
            fprintf (out, " %s %.0f ms (%zu/%zu)", self->kinds [i].kind, self->kinds [i].worst_ms,
                     self->kinds [i].survived, self->kinds [i].injected);
        fputc ('\n', out);
    }
    fprintf (out, "kudus chaos: resources: %zu processes judged; largest growth after warm-up: "
             "RSS %+.1f%% (%s), descriptors %+.1f%% (%s)\n", self->sampled, 100 * self->growth_rss,
             *self->growth_rss_who ? self->growth_rss_who : "-", 100 * self->growth_fds,
             *self->growth_fds_who ? self->growth_fds_who : "-");
    fprintf (out, "kudus chaos: replicas compared at %zu CRC points and at the end; "
             "the checker held at most %zu open entries\n", self->crc_compared, self->held_peak);
    if (self->n_failures == 0)
        fprintf (out, "kudus chaos: PASS\n");
    else {
        fprintf (out, "kudus chaos: FAIL, %zu failure(s):\n", self->n_failures);
        for (size_t i = 0; i < self->n_failures; i++)
            fprintf (out, "  - %s\n", self->failures [i]);
        if (self->rows_twice && (!strcmp (self->consistency, "asp") || !strcmp (self->consistency, "ssp")))
            fprintf (out, "kudus chaos: note: under ASP and SSP a worker that dies (or is declared dead) "
                     "after its pushes reached the shards but before its ARRIVE has its rows trained "
                     "twice: the exception docs/consistency.md states\n");
        if (*self->command)
            fprintf (out, "kudus chaos: reproduce with: %s\n", self->command);
    }
}

//  A JSON string.
static void
s_json_str (FILE *out, const char *s)
{
    fputc ('"', out);
    for (; *s; s++) {
        unsigned char c = (unsigned char) *s;
        if (c == '"' || c == '\\')
            fprintf (out, "\\%c", c);
        else
        if (c < 0x20)
            fprintf (out, "\\u%04x", c);
        else
            fputc (c, out);
    }
    fputc ('"', out);
}

void
kd_history_check_write_json (kd_history_check_t *self, FILE *out)
{
    fprintf (out, "{\"pass\": %s, \"faults\": %zu, \"survived\": %zu, \"rows_lost\": %llu, "
             "\"rows_twice\": %llu, \"gradients_twice\": %llu, \"restarts\": %zu, "
             "\"epochs_completed\": %llu, \"stop_reason\": ",
             self->n_failures ? "false" : "true", kd_history_check_faults (self),
             kd_history_check_survived (self), (unsigned long long) self->rows_lost,
             (unsigned long long) self->rows_twice, (unsigned long long) self->grads_twice,
             self->restarts, (unsigned long long) self->epochs_completed);
    s_json_str (out, self->reason);
    fprintf (out, ", \"worst_stall_ms\": {");
    for (size_t i = 0; i < self->n_kinds; i++)
        fprintf (out, "%s\"%s\": %.0f", i ? ", " : "", self->kinds [i].kind, self->kinds [i].worst_ms);
    fprintf (out, "}, \"growth\": {\"rss\": %.4f, \"fds\": %.4f}, \"crc_points\": %zu, "
             "\"failures\": [", self->growth_rss, self->growth_fds, self->crc_compared);
    for (size_t i = 0; i < self->n_failures; i++) {
        fputs (i ? ", " : "", out);
        s_json_str (out, self->failures [i]);
    }
    fputs ("], \"reproduce\": ", out);
    s_json_str (out, self->command);
    fputs ("}\n", out);
}
